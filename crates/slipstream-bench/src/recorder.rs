//! Recording transactions: each user buffers its samples and hands them over in batches, so the
//! shared state is locked once per batch, not once per transaction.
//!
//! # Implementation details
//!
//! A [`UserLog`] pushes a [`Sample`] per transaction into a local buffer and flushes it into the
//! shared [`Recorder`] when the buffer is full or the oldest sample is [`FLUSH_AFTER`] old (so a
//! slow user still shows on the progress line). Under the recorder's lock a flush updates each
//! type's HDR histogram, sufficient statistics and failure counts, the per-second intervals, the
//! open-loop lag histogram and, if asked for, the raw CSV. Statement counts stay in the user and
//! are added at the end. Every sample is recorded exactly once: a user flushes on drop.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::phases::StageTotals;
use crate::run_result::{Interval, Percentiles, Schedule, Sums, TxResult};
use crate::transaction::StatementCounts;

/// Samples a user buffers before taking the lock.
const BATCH: usize = 256;
/// The longest a sample waits in a user's buffer.
const FLUSH_AFTER: Duration = Duration::from_millis(200);
/// Histogram precision: three significant digits.
const SIGFIG: u8 = 3;

/// One finished transaction.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) kind: u32,
    pub(crate) user: u32,
    /// When it ended, from the start of measuring.
    pub(crate) end: Duration,
    pub(crate) latency: Duration,
    /// Start minus intended start (open loop; zero otherwise).
    pub(crate) lag: Duration,
    /// The failure code, or `None` for success.
    pub(crate) failure: Option<Box<str>>,
}

struct KindTotals {
    hist: Histogram<u64>,
    ok: u64,
    failures: BTreeMap<String, u64>,
    sums: Sums,
    statements: StatementCounts,
}

struct Totals {
    kinds: Vec<KindTotals>,
    /// `intervals[second][kind]`.
    intervals: Vec<Vec<Interval>>,
    lag: Histogram<u64>,
    late: u64,
    arrivals: u64,
    raw: Option<BufWriter<File>>,
    raw_error: Option<String>,
    /// Per-stage figures (phases.rs), when the runner asked for them.
    stages: Option<StageTotals>,
}

/// The run's shared record.
pub(crate) struct Recorder {
    names: Vec<String>,
    /// Open loop: lateness threshold. `None` for closed loop (no schedule to keep).
    late_after: Option<Duration>,
    totals: Mutex<Totals>,
}

/// Running totals for the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Progress {
    pub(crate) ok: u64,
    pub(crate) failed: u64,
}

fn histogram() -> Histogram<u64> {
    // Auto-resizing: a histogram only grows to the largest latency it has seen.
    let mut h = Histogram::new(SIGFIG).expect("3 significant digits is a valid precision");
    h.auto(true);
    h
}

impl Recorder {
    pub(crate) fn new(
        names: Vec<String>,
        late_after: Option<Duration>,
        raw: Option<&Path>,
    ) -> anyhow::Result<Recorder> {
        let raw = match raw {
            Some(p) => {
                let f = File::create(p).map_err(|e| {
                    anyhow::anyhow!("could not create the raw CSV {}: {e}", p.display())
                })?;
                let mut w = BufWriter::new(f);
                writeln!(w, "transaction,user,end_us,latency_us,lag_us,failure")?;
                Some(w)
            }
            None => None,
        };
        let kinds = names
            .iter()
            .map(|_| KindTotals {
                hist: histogram(),
                ok: 0,
                failures: BTreeMap::new(),
                sums: Sums::default(),
                statements: StatementCounts::default(),
            })
            .collect();
        Ok(Recorder {
            names,
            late_after,
            totals: Mutex::new(Totals {
                kinds,
                intervals: Vec::new(),
                lag: histogram(),
                late: 0,
                arrivals: 0,
                raw,
                raw_error: None,
                stages: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Totals> {
        // A panic while holding the lock leaves counts, not invariants: keep using them.
        self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn progress(&self) -> Progress {
        let t = self.lock();
        Progress {
            ok: t.kinds.iter().map(|k| k.ok).sum(),
            failed: t
                .kinds
                .iter()
                .map(|k| k.failures.values().sum::<u64>())
                .sum(),
        }
    }

    /// Keeps per-stage figures too (by completion time).
    pub(crate) fn set_stages(&self, stages: StageTotals) {
        self.lock().stages = Some(stages);
    }

    /// The per-stage figures, once the users are done.
    pub(crate) fn take_stages(&self) -> Option<StageTotals> {
        self.lock().stages.take()
    }

    pub(crate) fn add_arrivals(&self, n: u64) {
        self.lock().arrivals += n;
    }

    fn absorb(&self, batch: &mut Vec<Sample>) {
        let mut t = self.lock();
        let t = &mut *t;
        let kinds = self.names.len();
        for s in batch.drain(..) {
            let k = s.kind as usize;
            if let Some(st) = t.stages.as_mut() {
                st.record(k, s.end, s.latency, s.failure.is_some());
            }
            let ms = s.latency.as_secs_f64() * 1e3;
            let second = s.end.as_secs() as usize;
            if t.intervals.len() <= second {
                t.intervals
                    .resize_with(second + 1, || vec![Interval::default(); kinds]);
            }
            let iv = &mut t.intervals[second][k];
            let kt = &mut t.kinds[k];
            match &s.failure {
                None => {
                    kt.ok += 1;
                    kt.sums.add(ms);
                    // Saturates at the histogram's range rather than failing: auto-resize
                    // makes that range any u64.
                    let _ = kt.hist.record((s.latency.as_micros() as u64).max(1));
                    // Clamped like `Sums::add`, so the intervals add up to the totals.
                    iv.values.add(ms.max(1e-6));
                }
                Some(code) => {
                    *kt.failures.entry(code.to_string()).or_default() += 1;
                    iv.failed += 1;
                }
            }
            if let Some(late_after) = self.late_after {
                let _ = t.lag.record((s.lag.as_micros() as u64).max(1));
                if s.lag > late_after {
                    t.late += 1;
                }
            }
            if let Some(w) = t.raw.as_mut() {
                let r = writeln!(
                    w,
                    "{},{},{},{},{},{}",
                    self.names[k],
                    s.user,
                    s.end.as_micros(),
                    s.latency.as_micros(),
                    s.lag.as_micros(),
                    s.failure.as_deref().unwrap_or("")
                );
                if let Err(e) = r {
                    t.raw_error = Some(e.to_string());
                    t.raw = None;
                }
            }
        }
    }

    fn add_statements(&self, counts: &[StatementCounts]) {
        let mut t = self.lock();
        for (k, c) in t.kinds.iter_mut().zip(counts) {
            k.statements.add(c);
        }
    }

    /// The per-type results, the intervals (`[second][kind]`, trimmed to `measured`), and the
    /// open-loop schedule figures.
    pub(crate) fn finish(
        &self,
        weights: &[(String, u32)],
        measured: Duration,
    ) -> anyhow::Result<Finished> {
        let mut t = self.lock();
        if let Some(w) = t.raw.as_mut()
            && let Err(e) = w.flush()
        {
            t.raw_error = Some(e.to_string());
        }
        if let Some(e) = t.raw_error.take() {
            anyhow::bail!("writing the raw CSV failed: {e}");
        }
        let transactions = t
            .kinds
            .iter()
            .zip(weights)
            .map(|(k, (name, weight))| TxResult {
                name: name.clone(),
                weight: *weight,
                ok: k.ok,
                failed: k.failures.values().sum(),
                failures: k.failures.clone(),
                statements: k.statements,
                stats: k.sums,
                latency_ms: percentiles(&k.hist, k.sums.mean()),
                percentile_curve: curve(&k.hist),
            })
            .collect();
        // An interval that started before the end of the window counts; later ones hold only
        // stragglers and would show a false drop in throughput.
        let keep = measured.as_secs_f64().ceil() as usize;
        let mut intervals = t.intervals.clone();
        intervals.truncate(keep.max(1));
        let schedule = self.late_after.map(|late_after| Schedule {
            arrivals: t.arrivals,
            late: t.late,
            late_after_ms: late_after.as_secs_f64() * 1e3,
            lag_ms: percentiles(&t.lag, t.lag.mean() / 1e3),
        });
        Ok(Finished {
            transactions,
            intervals,
            schedule,
        })
    }
}

pub(crate) struct Finished {
    pub(crate) transactions: Vec<TxResult>,
    pub(crate) intervals: Vec<Vec<Interval>>,
    pub(crate) schedule: Option<Schedule>,
}

fn percentiles(h: &Histogram<u64>, mean_ms: f64) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    Percentiles {
        mean: mean_ms,
        p50: ms(0.5),
        p90: ms(0.9),
        p95: ms(0.95),
        p99: ms(0.99),
        p999: ms(0.999),
        max: h.max() as f64 / 1e3,
    }
}

/// Points for a percentile chart, denser towards the tail (HdrHistogram's percentile iterator
/// with 5 ticks per halving of the distance to 100%).
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<(f64, f64)> = h
        .iter_quantiles(5)
        .map(|v| (v.percentile(), v.value_iterated_to() as f64 / 1e3))
        .collect();
    points.dedup_by(|a, b| a.0 == b.0);
    points
}

/// One user's buffer.
pub(crate) struct UserLog {
    recorder: Arc<Recorder>,
    batch: Vec<Sample>,
    oldest: Option<Instant>,
    statements: Vec<StatementCounts>,
}

impl UserLog {
    pub(crate) fn new(recorder: Arc<Recorder>) -> UserLog {
        let kinds = recorder.names.len();
        UserLog {
            recorder,
            batch: Vec::with_capacity(BATCH),
            oldest: None,
            statements: vec![StatementCounts::default(); kinds],
        }
    }

    pub(crate) fn statements(&mut self, kind: usize, counts: &StatementCounts) {
        self.statements[kind].add(counts);
    }

    pub(crate) fn push(&mut self, sample: Sample, now: Instant) {
        let oldest = *self.oldest.get_or_insert(now);
        self.batch.push(sample);
        if self.batch.len() >= BATCH || now.duration_since(oldest) >= FLUSH_AFTER {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        if !self.batch.is_empty() {
            self.recorder.absorb(&mut self.batch);
        }
        self.oldest = None;
    }
}

impl Drop for UserLog {
    fn drop(&mut self) {
        self.flush();
        self.recorder.add_statements(&self.statements);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: u32, end_ms: u64, latency_ms: u64, failure: Option<&str>) -> Sample {
        Sample {
            kind,
            user: 0,
            end: Duration::from_millis(end_ms),
            latency: Duration::from_millis(latency_ms),
            lag: Duration::ZERO,
            failure: failure.map(Into::into),
        }
    }

    #[test]
    fn totals_intervals_and_failures_add_up() {
        let r = Arc::new(Recorder::new(vec!["a".into(), "b".into()], None, None).unwrap());
        {
            let mut log = UserLog::new(r.clone());
            let now = Instant::now();
            log.push(sample(0, 100, 2, None), now);
            log.push(sample(0, 1500, 4, None), now);
            log.push(sample(1, 1600, 1, Some("40001")), now);
            log.push(sample(1, 2100, 3, None), now);
            log.statements(
                0,
                &StatementCounts {
                    selects: 2,
                    ..Default::default()
                },
            );
        }
        let w = vec![("a".to_string(), 1), ("b".to_string(), 1)];
        let f = r.finish(&w, Duration::from_secs(3)).unwrap();
        let a = &f.transactions[0];
        assert_eq!((a.ok, a.failed, a.stats.values.n), (2, 0, 2));
        assert!((a.stats.mean() - 3.0).abs() < 1e-9);
        assert_eq!(a.statements.selects, 2);
        let b = &f.transactions[1];
        assert_eq!((b.ok, b.failed), (1, 1));
        assert_eq!(b.failures.get("40001"), Some(&1));
        assert_eq!(f.intervals.len(), 3);
        assert_eq!(f.intervals[0][0].values.n, 1);
        assert_eq!(f.intervals[1][0].values.n, 1);
        assert_eq!(f.intervals[1][1].failed, 1);
        assert_eq!(f.intervals[2][1].values.n, 1);
        // The intervals' sums are the totals' sums.
        let total: f64 = f.intervals.iter().map(|i| i[0].values.sum).sum();
        assert!((total - a.stats.values.sum).abs() < 1e-9);
        assert!((a.latency_ms.p50 - 2.0).abs() < 0.01, "{:?}", a.latency_ms);
        assert!(f.schedule.is_none());
    }

    #[test]
    fn a_full_batch_is_visible_before_the_user_ends() {
        let r = Arc::new(Recorder::new(vec!["a".into()], None, None).unwrap());
        let mut log = UserLog::new(r.clone());
        let now = Instant::now();
        for i in 0..BATCH as u64 {
            log.push(sample(0, i, 1, None), now);
        }
        assert_eq!(r.progress().ok, BATCH as u64);
        log.push(sample(0, 1, 1, None), now);
        assert_eq!(r.progress().ok, BATCH as u64);
        drop(log);
        assert_eq!(r.progress().ok, BATCH as u64 + 1);
    }
}
