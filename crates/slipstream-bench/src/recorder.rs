//! Recording transactions: each user buffers its samples and hands them over in batches, so the
//! shared state is locked once per batch, not once per transaction.
//!
//! # Implementation details
//!
//! A [`UserLog`] pushes a [`Sample`] per transaction into a local buffer and flushes it into the
//! shared [`Recorder`] when the buffer is full or the oldest sample is [`FLUSH_AFTER`] old (so a
//! slow user still shows on the progress line). Under the recorder's lock a flush updates each
//! type's HDR histogram, sufficient statistics, failure counts and first failure messages, the
//! per-second intervals (each with its own histogram, so intervals of several runs add), the
//! open-loop lag histograms and, if asked for, the raw CSV. Statement counts stay in the user
//! and are added at the end. Every sample is recorded exactly once: a user flushes on drop.
//! Transactions that never end are counted by [`Recorder::censor`] when the run gives up on
//! them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use slipstream_stats::Suff;

use crate::histogram::{self, encode};
use crate::phases::StageTotals;
use crate::run_result::{Interval, Intervals, LatencyStats, Percentiles, Schedule, TxResult};
use crate::transaction::StatementCounts;

/// Samples a user buffers before taking the lock.
const BATCH: usize = 256;
/// The longest a sample waits in a user's buffer.
const FLUSH_AFTER: Duration = Duration::from_millis(200);

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
    /// The failure, or `None` for success.
    pub(crate) failure: Option<Failure>,
}

/// Why a transaction failed.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// SQLSTATE, or `client:<kind>`.
    pub(crate) code: Box<str>,
    pub(crate) message: Box<str>,
}

struct KindTotals {
    hist: Histogram<u64>,
    ok: u64,
    failures: BTreeMap<String, u64>,
    failure_messages: BTreeMap<String, String>,
    censored: u64,
    sums: LatencyStats,
    statements: StatementCounts,
}

/// Intervals this many seconds older than the newest one are sealed: their histogram is
/// compressed and freed. A live 3-digit histogram of latencies up to a second takes about
/// 90 KB; a run of an hour with nine types would otherwise hold gigabytes. Samples reach the
/// recorder at most [`FLUSH_AFTER`] late from a busy user, so a sealed interval is rarely
/// touched again; when it is (a user that sat in a long transaction), it is reopened, which is
/// slower but exact.
const SEAL_AFTER: usize = 3;

/// One interval of one transaction type (or of the schedule lag), while recording.
struct IntervalTotals {
    sufficient: Suff,
    failed: u64,
    /// The live histogram; `None` until the first value and after sealing.
    hist: Option<Histogram<u64>>,
    /// The sealed histogram (V2 deflate, base64); empty when live or empty.
    sealed: String,
}

impl IntervalTotals {
    fn new() -> IntervalTotals {
        IntervalTotals {
            sufficient: Suff::default(),
            failed: 0,
            hist: None,
            sealed: String::new(),
        }
    }

    fn live(&mut self) -> &mut Histogram<u64> {
        let sealed = std::mem::take(&mut self.sealed);
        self.hist.get_or_insert_with(|| {
            // Only this module wrote it, so it decodes; an empty one is the fallback anyway.
            histogram::decode(&sealed, "a sealed interval").unwrap_or_else(|_| histogram::new())
        })
    }

    fn record(&mut self, us: u64) {
        // Saturates rather than failing: auto-resize makes the range any u64.
        let _ = self.live().record(us);
    }

    fn seal(&mut self) {
        if let Some(h) = self.hist.take() {
            self.sealed = encode(&h);
        }
    }

    fn histogram(&self) -> Histogram<u64> {
        match &self.hist {
            Some(h) => h.clone(),
            None => histogram::decode(&self.sealed, "a sealed interval")
                .unwrap_or_else(|_| histogram::new()),
        }
    }

    fn add(&mut self, o: &IntervalTotals) {
        self.sufficient.merge(&o.sufficient);
        self.failed += o.failed;
        if o.hist.is_some() || !o.sealed.is_empty() {
            // Both auto-resize, so adding cannot run out of range.
            let _ = self.live().add(o.histogram());
        }
    }

    fn result(&self) -> Interval {
        crate::merge::interval(self.sufficient, self.failed, &self.histogram())
    }
}

struct Totals {
    kinds: Vec<KindTotals>,
    /// `intervals[second][kind]`.
    intervals: Vec<Vec<IntervalTotals>>,
    /// Open loop: `lag_intervals[second]`.
    lag_intervals: Vec<IntervalTotals>,
    /// Intervals below this are sealed (`SEAL_AFTER`).
    sealed_below: usize,
    lag: Histogram<u64>,
    late: u64,
    arrivals: u64,
    /// Censored arrivals that never started: still queued, or turned away (open loop).
    never_started: u64,
    raw: Option<BufWriter<File>>,
    raw_error: Option<String>,
    /// Per-stage figures (phases.rs), when the runner asked for them.
    stages: Option<StageTotals>,
    /// Where the measuring window ends, from its start: the planned length once the run
    /// starts, lowered to the moment of a Ctrl-C. A sample that ends at or after it is the
    /// drain's: it goes to `after`, never to an interval of the window.
    window_end: Option<Duration>,
    /// Per type: the drain's completions (`Intervals::after_window`).
    after: Vec<IntervalTotals>,
}

/// The run's shared record.
pub(crate) struct Recorder {
    names: Vec<String>,
    /// The names as CSV fields (quoted when they hold a comma, a quote or a line break).
    csv_names: Vec<String>,
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

/// `text` as one CSV field (RFC 4180): quoted, its quotes doubled, when it holds a comma, a
/// quote or a line break. Names and failure codes are the caller's text.
fn csv_field(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\"")).into()
    } else {
        text.into()
    }
}

impl Recorder {
    pub(crate) fn new(
        names: Vec<String>,
        late_after: Option<Duration>,
        raw: Option<&Path>,
    ) -> anyhow::Result<Recorder> {
        let raw = match raw {
            Some(p) => {
                let failed = |e: std::io::Error| {
                    anyhow::anyhow!("could not create the raw CSV {}: {e}", p.display())
                };
                // Its directory made if missing, as the result's write makes `-o`'s.
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(failed)?;
                }
                let f = File::create(p).map_err(failed)?;
                let mut w = BufWriter::new(f);
                writeln!(w, "transaction,user,end_us,latency_us,lag_us,failure")?;
                Some(w)
            }
            None => None,
        };
        let kinds = names
            .iter()
            .map(|_| KindTotals {
                hist: histogram::new(),
                ok: 0,
                failures: BTreeMap::new(),
                failure_messages: BTreeMap::new(),
                censored: 0,
                sums: LatencyStats::default(),
                statements: StatementCounts::default(),
            })
            .collect();
        let after = (0..names.len()).map(|_| IntervalTotals::new()).collect();
        let csv_names = names.iter().map(|n| csv_field(n).into_owned()).collect();
        Ok(Recorder {
            names,
            csv_names,
            late_after,
            totals: Mutex::new(Totals {
                kinds,
                intervals: Vec::new(),
                lag: histogram::new(),
                lag_intervals: Vec::new(),
                sealed_below: 0,
                late: 0,
                arrivals: 0,
                never_started: 0,
                raw,
                raw_error: None,
                stages: None,
                window_end: None,
                after,
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
        let mut t = self.lock();
        let mut stages = t.stages.take()?;
        for (k, kt) in t.kinds.iter().enumerate() {
            let failed = kt.failures.values().sum();
            let drained = t.after[k].sufficient.n;
            stages.whole_run(
                k,
                &kt.hist,
                (kt.ok, drained),
                failed,
                kt.sums.sufficient.sum,
            );
        }
        Some(stages)
    }

    /// The window's planned length, known before the first sample: completions at or after
    /// it are the drain's.
    pub(crate) fn plan_window(&self, length: Duration) {
        let mut t = self.lock();
        t.window_end = Some(t.window_end.map_or(length, |e| e.min(length)));
    }

    /// Closes the window that started at `from` now, or at `to` if that came first, and
    /// returns when. The time is read under the lock every flush takes, so each sample
    /// absorbed before this ended before it, and each absorbed after it is compared with it:
    /// the split between the window and the drain is exact, however late users flush.
    pub(crate) fn close_window(&self, from: Instant, to: Instant) -> Instant {
        let mut t = self.lock();
        let closed = Instant::now().min(to);
        let at = closed.saturating_duration_since(from);
        t.window_end = Some(t.window_end.map_or(at, |e| e.min(at)));
        closed
    }

    pub(crate) fn add_arrivals(&self, n: u64) {
        self.lock().arrivals += n;
    }

    /// Counts a transaction of type `kind` the run stopped waiting for: its latency is only
    /// known to exceed the wait (right-censored), so it is in no latency figure.
    pub(crate) fn censor(&self, kind: usize) {
        if let Some(k) = self.lock().kinds.get_mut(kind) {
            k.censored += 1;
        }
    }

    /// Censors `n` open-loop arrivals of type `kind` that never started: still queued when
    /// the users stopped, or turned away by a full queue.
    pub(crate) fn censor_queued(&self, kind: usize, n: u64) {
        let mut t = self.lock();
        if let Some(k) = t.kinds.get_mut(kind) {
            k.censored += n;
            t.never_started += n;
        }
    }

    fn absorb(&self, batch: &mut Vec<Sample>) {
        let mut t = self.lock();
        let t = &mut *t;
        let kinds = self.names.len();
        for s in batch.drain(..) {
            let k = s.kind as usize;
            let drained = t.window_end.is_some_and(|e| s.end >= e);
            if let Some(st) = t.stages.as_mut() {
                st.record(k, s.end, t.window_end, s.latency, s.failure.is_some());
            }
            let ms = s.latency.as_secs_f64() * 1e3;
            let second = s.end.as_secs() as usize;
            let iv = if drained {
                &mut t.after[k]
            } else {
                if t.intervals.len() <= second {
                    t.intervals.resize_with(second + 1, || {
                        (0..kinds).map(|_| IntervalTotals::new()).collect()
                    });
                }
                &mut t.intervals[second][k]
            };
            let kt = &mut t.kinds[k];
            match &s.failure {
                None => {
                    kt.ok += 1;
                    kt.sums.add(ms);
                    // Saturates at the histogram's range rather than failing: auto-resize
                    // makes that range any u64.
                    let _ = kt.hist.record((s.latency.as_micros() as u64).max(1));
                    // Clamped like `LatencyStats::add`, so the intervals add up to the totals.
                    iv.sufficient.add(ms.max(1e-6));
                    iv.record((s.latency.as_micros() as u64).max(1));
                }
                Some(f) => {
                    *kt.failures.entry(f.code.to_string()).or_default() += 1;
                    if !kt.failure_messages.contains_key(&*f.code) {
                        kt.failure_messages
                            .insert(f.code.to_string(), f.message.to_string());
                    }
                    iv.failed += 1;
                }
            }
            if let Some(late_after) = self.late_after {
                let lag_us = (s.lag.as_micros() as u64).max(1);
                let _ = t.lag.record(lag_us);
                if s.lag > late_after {
                    t.late += 1;
                }
                // The lag per interval is the window's, as the latencies are.
                if !drained {
                    if t.lag_intervals.len() <= second {
                        t.lag_intervals.resize_with(second + 1, IntervalTotals::new);
                    }
                    let li = &mut t.lag_intervals[second];
                    li.sufficient.add(lag_us as f64 / 1e3);
                    li.record(lag_us);
                }
            }
            if let Some(w) = t.raw.as_mut() {
                let r = writeln!(
                    w,
                    "{},{},{},{},{},{}",
                    self.csv_names[k],
                    s.user,
                    s.end.as_micros(),
                    s.latency.as_micros(),
                    s.lag.as_micros(),
                    csv_field(s.failure.as_ref().map(|f| &*f.code).unwrap_or(""))
                );
                if let Err(e) = r {
                    t.raw_error = Some(e.to_string());
                    t.raw = None;
                }
            }
        }
        let seal_below = t.intervals.len().saturating_sub(SEAL_AFTER);
        for i in t.sealed_below..seal_below {
            for iv in &mut t.intervals[i] {
                iv.seal();
            }
            if let Some(li) = t.lag_intervals.get_mut(i) {
                li.seal();
            }
        }
        t.sealed_below = t.sealed_below.max(seal_below);
    }

    fn add_statements(&self, counts: &[StatementCounts]) {
        let mut t = self.lock();
        for (k, c) in t.kinds.iter_mut().zip(counts) {
            k.statements.add(c);
        }
    }

    /// Flushes and closes the raw CSV, returning why it is incomplete if a write to it failed
    /// (a full disk): the lines before the failure are in it, none after. The caller makes
    /// that a warning in the result rather than an error: the CSV is an extra beside the
    /// result, and failing the run for it would lose the window's figures too.
    pub(crate) fn close_raw(&self) -> Option<String> {
        let mut t = self.lock();
        if let Some(mut w) = t.raw.take()
            && let Err(e) = w.flush()
        {
            t.raw_error.get_or_insert(e.to_string());
        }
        t.raw_error.take()
    }

    /// The per-type results, the intervals (trimmed to `measured`, the rest summed into
    /// `after_window`), and the open-loop schedule figures.
    pub(crate) fn finish(&self, weights: &[(String, u32)], measured: Duration) -> Finished {
        let t = self.lock();
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
                failure_messages: k.failure_messages.clone(),
                censored: k.censored,
                statements: k.statements,
                latency_stats: k.sums,
                latency_ms: percentiles(&k.hist, k.sums.mean()),
                percentile_curve: curve(&k.hist),
                histogram: encode(&k.hist),
            })
            .collect();
        // Once the window is known (`window_end`), the drain's completions are already apart.
        // Without it, an interval that started before the end of the window counts, and later
        // ones, which hold only stragglers and would show a false drop in throughput, go to
        // `after_window`.
        let keep = (measured.as_secs_f64().ceil() as usize).max(1);
        let mut per_transaction = BTreeMap::new();
        let mut after_window = BTreeMap::new();
        for (k, (name, _)) in weights.iter().enumerate() {
            let series: Vec<Interval> = (0..keep.min(t.intervals.len()))
                .map(|i| t.intervals[i][k].result())
                .collect();
            let mut after = IntervalTotals::new();
            after.add(&t.after[k]);
            for iv in t.intervals.iter().skip(keep) {
                after.add(&iv[k]);
            }
            per_transaction.insert(name.clone(), series);
            if after.sufficient.n + after.failed > 0 {
                after_window.insert(name.clone(), after.result());
            }
        }
        let schedule_lag = t
            .lag_intervals
            .iter()
            .take(keep)
            .map(IntervalTotals::result)
            .collect();
        let intervals = Intervals {
            seconds: 1.0,
            per_transaction,
            after_window,
            schedule_lag,
        };
        let schedule = self.late_after.map(|late_after| Schedule {
            arrivals: t.arrivals,
            late: t.late,
            late_after_ms: late_after.as_secs_f64() * 1e3,
            lag_ms: percentiles(&t.lag, t.lag.mean() / 1e3),
            lag_histogram: encode(&t.lag),
            never_started: Some(t.never_started),
        });
        Finished {
            transactions,
            intervals,
            schedule,
        }
    }
}

pub(crate) struct Finished {
    pub(crate) transactions: Vec<TxResult>,
    pub(crate) intervals: Intervals,
    pub(crate) schedule: Option<Schedule>,
}

pub(crate) fn percentiles(h: &Histogram<u64>, mean_ms: f64) -> Percentiles {
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
pub(crate) fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
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
    /// When the batch must be handed over at the latest: [`FLUSH_AFTER`] after its first
    /// sample.
    due: Option<Instant>,
    statements: Vec<StatementCounts>,
}

impl UserLog {
    pub(crate) fn new(recorder: Arc<Recorder>) -> UserLog {
        let kinds = recorder.names.len();
        UserLog {
            recorder,
            batch: Vec::with_capacity(BATCH),
            due: None,
            statements: vec![StatementCounts::default(); kinds],
        }
    }

    pub(crate) fn statements(&mut self, kind: usize, counts: &StatementCounts) {
        self.statements[kind].add(counts);
    }

    pub(crate) fn push(&mut self, sample: Sample, now: Instant) {
        // A deadline, not the oldest sample's age: a comparison per transaction, not a
        // subtraction.
        let due = *self.due.get_or_insert_with(|| now + FLUSH_AFTER);
        self.batch.push(sample);
        if self.batch.len() >= BATCH || now >= due {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        if !self.batch.is_empty() {
            self.recorder.absorb(&mut self.batch);
        }
        self.due = None;
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
            failure: failure.map(|c| Failure {
                code: c.into(),
                message: format!("message of {c}").into(),
            }),
        }
    }

    /// Type a at 0.1 s (2 ms) and 1.5 s (4 ms); type b failing at 1.6 s, then at 2.1 s (3 ms).
    fn push_four(log: &mut UserLog) {
        let now = Instant::now();
        log.push(sample(0, 100, 2, None), now);
        log.push(sample(0, 1500, 4, None), now);
        log.push(sample(1, 1600, 1, Some("40001")), now);
        log.push(sample(1, 2100, 3, None), now);
    }

    #[test]
    fn totals_intervals_and_failures_add_up() {
        let r = Arc::new(Recorder::new(vec!["a".into(), "b".into()], None, None).unwrap());
        {
            let mut log = UserLog::new(r.clone());
            push_four(&mut log);
            log.statements(
                0,
                &StatementCounts {
                    selects: 2,
                    ..Default::default()
                },
            );
        }
        let w = vec![("a".to_string(), 1), ("b".to_string(), 1)];
        let f = r.finish(&w, Duration::from_secs(3));
        let a = &f.transactions[0];
        assert_eq!((a.ok, a.failed, a.latency_stats.sufficient.n), (2, 0, 2));
        assert!((a.latency_stats.mean() - 3.0).abs() < 1e-9);
        assert_eq!(a.statements.selects, 2);
        let b = &f.transactions[1];
        assert_eq!((b.ok, b.failed), (1, 1));
        assert_eq!(b.failures.get("40001"), Some(&1));
        assert_eq!(
            b.failure_messages.get("40001").map(String::as_str),
            Some("message of 40001")
        );
        let ia = &f.intervals.per_transaction["a"];
        let ib = &f.intervals.per_transaction["b"];
        assert_eq!((ia.len(), ib.len()), (3, 3));
        assert_eq!(ia[0].sufficient.n, 1);
        assert_eq!(ia[1].sufficient.n, 1);
        assert_eq!(ib[1].failed, 1);
        assert_eq!(ib[2].sufficient.n, 1);
        assert!((ia[1].p50_ms - 4.0).abs() < 0.01, "{:?}", ia[1]);
        assert!(!ia[1].histogram.is_empty() && ib[0].histogram.is_empty());
        // The intervals' sums are the totals' sums.
        let total: f64 = ia.iter().map(|i| i.sufficient.sum).sum();
        assert!((total - a.latency_stats.sufficient.sum).abs() < 1e-9);
        assert!(f.intervals.after_window.is_empty());
        assert!((a.latency_ms.p50 - 2.0).abs() < 0.01, "{:?}", a.latency_ms);
        assert!(f.schedule.is_none());
    }

    #[test]
    fn one_stage_has_the_runs_figures_and_two_stages_their_own() {
        for ends in [vec![10.0], vec![1.0, 10.0]] {
            let r = Arc::new(Recorder::new(vec!["a".into(), "b".into()], None, None).unwrap());
            r.set_stages(crate::phases::StageTotals::new(ends.clone(), 2));
            {
                push_four(&mut UserLog::new(r.clone()));
            }
            let st = r.take_stages().unwrap();
            let (a0, b0) = (st.cell(0, 0), st.cell(0, 1));
            if ends.len() == 1 {
                assert_eq!((a0.0, a0.1, a0.3), (2, 0, 2));
                assert!((a0.2 - 6.0).abs() < 1e-9, "{a0:?}");
                assert_eq!((b0.0, b0.1, b0.3), (1, 1, 1));
                assert!((b0.2 - 3.0).abs() < 1e-9, "{b0:?}");
            } else {
                // The first second holds only the 100 ms sample; the rest is the second stage's.
                assert_eq!((a0.0, a0.3, b0.0, b0.1), (1, 1, 0, 0));
                assert_eq!(st.cell(1, 0).0, 1);
                assert_eq!((st.cell(1, 1).0, st.cell(1, 1).1), (1, 1));
            }
        }
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

#[cfg(test)]
mod more_tests {
    use super::*;

    fn ok(kind: u32, end_ms: u64, latency_ms: u64) -> Sample {
        Sample {
            kind,
            user: 0,
            end: Duration::from_millis(end_ms),
            latency: Duration::from_millis(latency_ms),
            lag: Duration::from_millis(latency_ms / 2),
            failure: None,
        }
    }

    #[test]
    fn completions_after_the_window_are_kept_apart_and_censored_ones_counted() {
        let r = Arc::new(
            Recorder::new(vec!["a".into()], Some(Duration::from_millis(1)), None).unwrap(),
        );
        {
            let mut log = UserLog::new(r.clone());
            let now = Instant::now();
            log.push(ok(0, 500, 2), now);
            log.push(ok(0, 2500, 8), now);
            log.push(ok(0, 3700, 30), now);
        }
        r.censor(0);
        r.censor(0);
        let f = r.finish(&[("a".to_string(), 1)], Duration::from_secs(2));
        let a = &f.transactions[0];
        assert_eq!((a.ok, a.censored), (3, 2));
        let series = &f.intervals.per_transaction["a"];
        assert_eq!(series.len(), 2);
        let after = &f.intervals.after_window["a"];
        assert_eq!(after.sufficient.n, 2);
        let in_series: u64 = series.iter().map(|i| i.sufficient.n).sum();
        assert_eq!(in_series + after.sufficient.n, a.ok);
        // The lag is per interval too (open loop).
        assert_eq!(f.intervals.schedule_lag.len(), 2);
        assert!((f.intervals.schedule_lag[0].p50_ms - 1.0).abs() < 0.01);
        // The type's histogram holds every success, the window's and the drain's.
        let h = histogram::decode(&a.histogram, "a").unwrap();
        assert_eq!(h.len(), 3);
    }
}

#[cfg(test)]
mod sealing_tests {
    use super::*;

    #[test]
    fn old_intervals_are_sealed_and_a_late_sample_reopens_one_exactly() {
        let r = Arc::new(Recorder::new(vec!["a".into()], None, None).unwrap());
        let mut log = UserLog::new(r.clone());
        let now = Instant::now();
        let at = |end_ms: u64, latency_us: u64| Sample {
            kind: 0,
            user: 0,
            end: Duration::from_millis(end_ms),
            latency: Duration::from_micros(latency_us),
            lag: Duration::ZERO,
            failure: None,
        };
        log.push(at(100, 1000), now);
        log.push(at(200, 3000), now);
        log.flush();
        log.push(at(10_000, 5), now);
        log.flush();
        {
            let t = r.lock();
            assert!(t.intervals[0][0].hist.is_none(), "second 0 is sealed");
            assert!(!t.intervals[0][0].sealed.is_empty());
            assert!(t.intervals[10][0].hist.is_some(), "the newest is live");
        }
        // A sample for a sealed second (a user back from a long transaction) reopens it.
        log.push(at(300, 2000), now);
        drop(log);
        let f = r.finish(&[("a".to_string(), 1)], Duration::from_secs(11));
        let first = &f.intervals.per_transaction["a"][0];
        assert_eq!(first.sufficient.n, 3);
        let h = histogram::decode(&first.histogram, "first").unwrap();
        assert_eq!(h.len(), 3);
        assert!((first.p50_ms - 2.0).abs() < 0.01, "{first:?}");
    }
}

#[cfg(test)]
mod csv_tests {
    use super::*;

    /// A type named with a comma or a quote (the Rust API allows any name) is one CSV field.
    /// Before, names were written unquoted, adding columns (session 33's attacker).
    #[test]
    fn names_are_quoted_as_csv_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.csv");
        let r = Arc::new(
            Recorder::new(vec!["a,b".into(), "say \"hi\"".into()], None, Some(&path)).unwrap(),
        );
        {
            let mut log = UserLog::new(r.clone());
            for kind in 0..2 {
                let s = Sample {
                    kind,
                    user: 0,
                    end: Duration::from_millis(1),
                    latency: Duration::from_millis(1),
                    lag: Duration::ZERO,
                    failure: None,
                };
                log.push(s, Instant::now());
            }
        }
        assert_eq!(r.close_raw(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "\"a,b\",0,1000,1000,0,");
        assert_eq!(lines[2], "\"say \"\"hi\"\"\",0,1000,1000,0,");
    }

    /// A failure code is the caller's text too (`TxError::new`): with a comma, a quote or a
    /// line break it is one CSV field. Before (found by the attack of 2026-11-27) it was
    /// written unquoted, adding a column, or a line, to the file.
    #[test]
    fn failure_codes_are_quoted_as_csv_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.csv");
        let r = Arc::new(Recorder::new(vec!["a".into()], None, Some(&path)).unwrap());
        {
            let mut log = UserLog::new(r.clone());
            for code in ["app:bad,input", "say \"no\"", "two\nlines"] {
                let s = Sample {
                    kind: 0,
                    user: 0,
                    end: Duration::from_millis(1),
                    latency: Duration::from_millis(1),
                    lag: Duration::ZERO,
                    failure: Some(Failure {
                        code: code.into(),
                        message: "m".into(),
                    }),
                };
                log.push(s, Instant::now());
            }
        }
        assert_eq!(r.close_raw(), None);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1..],
            [
                "a,0,1000,1000,0,\"app:bad,input\"",
                "a,0,1000,1000,0,\"say \"\"no\"\"\"",
                "a,0,1000,1000,0,\"two",
                "lines\"",
            ],
            "{text}"
        );
    }
}
