//! The run's shape: a ramp-up (users started evenly over a period) and stages, each with its own
//! user count (closed loop) or arrival rate (open loop) and duration (BenchBase's phases, k6's
//! stages), and each stage's own figures.
//!
//! # Implementation details
//!
//! The plan is a pure function of the time since measuring started, so no user needs to be told
//! anything: a closed-loop user asks [`Plan::next_active`] before each transaction whether it
//! is one of the stage's first N users, and if not, sleeps until it is (or ends). A user
//! removed by a stage that lowers the count is only asked between transactions, so it always
//! finishes the one in hand. Open-loop arrivals are drawn at the plan's highest rate and kept
//! with probability `rate(t) / highest` (thinning), which is exact for a rate that changes
//! with time, the ramp-up's linear rise included.
//!
//! ```text
//!  t0 ──warm-up──▶ w ──ramp-up──▶ stage 1 ──▶ stage 2 ──▶ … e
//!   at stage 1's load   recorded, each segment reported on its own
//! ```
//!
//! A ramp-up and a warm-up exclude each other: both exist to keep the start out of the steady
//! figures, and the ramp-up does it by being a stage of its own (index 0, `ramp-up`).

use std::str::FromStr;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::run_result::{BenchRun, Percentiles};
use crate::table::Table;
use crate::think::parse_duration;

/// What a stage asks for.
///
/// ```
/// use slipstream_bench::{Stage, StageLoad};
/// assert_eq!("30s:8".parse::<Stage>().unwrap().load, StageLoad::Users(8));
/// assert_eq!("1m:rate=250".parse::<Stage>().unwrap().load, StageLoad::Rate(250.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StageLoad {
    /// Closed loop: this many users run at once.
    Users(usize),
    /// Open loop: Poisson arrivals at this many per second.
    Rate(f64),
}

/// One stage of a run: a duration at a load.
///
/// Written `DURATION:USERS`, `DURATION:users=USERS` or `DURATION:rate=R` (`--stage 30s:8`,
/// `--stage 1m:rate=500`).
///
/// ```
/// use std::time::Duration;
/// use slipstream_bench::{Stage, StageLoad};
/// let s: Stage = "30s:8".parse().unwrap();
/// assert_eq!(s.duration, Duration::from_secs(30));
/// assert_eq!(s.load, StageLoad::Users(8));
/// let s: Stage = "1m:rate=500".parse().unwrap();
/// assert_eq!(s.load, StageLoad::Rate(500.0));
/// assert!("30s".parse::<Stage>().unwrap_err().contains("DURATION:USERS"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    /// How long the stage lasts.
    pub duration: Duration,
    /// Its user count or arrival rate.
    pub load: StageLoad,
}

const STAGE_SYNTAX: &str = "write a stage as DURATION:USERS, DURATION:users=USERS or DURATION:rate=PER_SECOND (e.g. 30s:8, 1m:rate=500)";

impl FromStr for Stage {
    type Err = String;

    fn from_str(s: &str) -> Result<Stage, String> {
        let bad = |why: String| format!("stage `{s}`: {why}; {STAGE_SYNTAX}");
        let (d, load) = s
            .split_once(':')
            .ok_or_else(|| bad("no load after the duration".into()))?;
        let duration = parse_duration(d.trim()).map_err(bad)?;
        let load = load.trim();
        let (key, value) = load.split_once('=').unwrap_or(("users", load));
        let load = match key.trim() {
            "users" | "u" => {
                let n: usize = value.trim().parse().map_err(|_| {
                    bad(format!("`{}` is not a whole number of users", value.trim()))
                })?;
                StageLoad::Users(n)
            }
            "rate" | "r" => {
                let r: f64 = value.trim().parse().map_err(|_| {
                    bad(format!(
                        "`{}` is not a number of arrivals per second",
                        value.trim()
                    ))
                })?;
                StageLoad::Rate(r)
            }
            other => return Err(bad(format!("unknown load `{other}`"))),
        };
        let stage = Stage { duration, load };
        match stage.problem() {
            Some(why) => Err(bad(why.into())),
            None => Ok(stage),
        }
    }
}

impl Stage {
    /// What keeps the stage from running, if anything. Checked where stages are parsed and
    /// again where a run's plan is made, since a library builds `Stage`s directly: a stage of
    /// 0 users panicked the runner (a channel of 0 slots), and one of no arrivals or no
    /// length would measure nothing.
    fn problem(&self) -> Option<&'static str> {
        if self.duration.is_zero() {
            return Some("the duration must be longer than 0");
        }
        match self.load {
            StageLoad::Users(0) => Some("a stage needs at least 1 user"),
            StageLoad::Rate(r) if !(r.is_finite() && r > 0.0) => {
                Some("the rate must be a positive, finite number per second")
            }
            _ => None,
        }
    }
}

/// One stage's figures in a [`BenchRun`].
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Nap;
/// # impl Transaction for Nap {
/// #     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
/// #         tokio::time::sleep(std::time::Duration::from_millis(2)).await;
/// #         s.count().selects += 1;
/// #         Ok(())
/// #     }
/// # }
/// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
/// # let mut config = RunConfig::new(None);
/// # config.users = 2;
/// # config.duration = std::time::Duration::from_millis(300);
/// # let run = tokio::runtime::Runtime::new()?
/// #     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
/// // A run without phases is one stage.
/// let stage = &run.stages[0];
/// assert_eq!((run.stages.len(), stage.name.as_str(), stage.users), (1, "stage 1", Some(2)));
/// assert_eq!(stage.start_s, 0.0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageResult {
    /// 0, 1, 2, ... in the order run (the ramp-up, if any, is 0).
    pub index: usize,
    /// `ramp-up`, or `stage N` (from 1).
    pub name: String,
    /// Its start, in seconds from the start of measuring.
    pub start_s: f64,
    /// Its end, in seconds from the start of measuring (cut short when the run was stopped).
    pub end_s: f64,
    /// Closed loop: the users it runs (for the ramp-up: the users it ends with).
    pub users: Option<usize>,
    /// Open loop: its arrival rate (for the ramp-up: the rate it rises to).
    pub rate: Option<f64>,
    /// Per transaction type, by completion time inside the stage.
    pub transactions: Vec<StageTx>,
}

/// One transaction type inside one stage.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Nap;
/// # impl Transaction for Nap {
/// #     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
/// #         tokio::time::sleep(std::time::Duration::from_millis(2)).await;
/// #         s.count().selects += 1;
/// #         Ok(())
/// #     }
/// # }
/// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
/// # let mut config = RunConfig::new(None);
/// # config.users = 2;
/// # config.duration = std::time::Duration::from_millis(300);
/// # let run = tokio::runtime::Runtime::new()?
/// #     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
/// let tx = &run.stages[0].transactions[0];
/// assert_eq!((tx.name.as_str(), tx.failed), ("nap", 0));
/// assert!(tx.ok > 0 && tx.latency_ms.p50 >= 2.0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageTx {
    /// The type's name.
    pub name: String,
    /// Successful transactions that ended in the stage.
    pub ok: u64,
    /// Failed transactions that ended in the stage.
    pub failed: u64,
    /// Latency of the successful ones (ms).
    pub latency_ms: Percentiles,
    /// Their HDR histogram (µs; V2 deflate, base64; empty when none succeeded), so the stages
    /// of several load generators add (`slipstream report --merge`).
    #[serde(default)]
    pub histogram: String,
    /// Of `ok`, those that ended after the window, in the drain: in the stage's count and
    /// latencies, not in its TPS. A run's drain is in the stage its window ended in, but a
    /// merged result's parts may have ended theirs in different stages (one stopped early),
    /// so each stage keeps its own. `None` in files written before it was saved: the drain is
    /// then taken to be in the last stage listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained: Option<u64>,
}

impl StageTx {
    /// The successes that ended inside the window, in this stage; `last` says whether the
    /// stage is its run's last listed, where a file without [`StageTx::drained`] has the
    /// drain (`after_window`, that run's per-type drained successes).
    pub(crate) fn ok_in_window(&self, last: bool, after_window: Option<u64>) -> u64 {
        let drained = match self.drained {
            Some(n) => n,
            None if last => after_window.unwrap_or(0),
            None => 0,
        };
        self.ok.saturating_sub(drained)
    }
}

impl StageResult {
    /// Successful transactions per second over the stage: those that ended inside the window
    /// (`ok` less `drained`), over its length, as [`crate::BenchRun::tps`] and
    /// [`stage_table`] count them. In a file written before `drained` was saved, the drain
    /// cannot be told apart here and is counted; [`stage_table`] takes it off the last stage.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
    /// # struct Nap;
    /// # impl Transaction for Nap {
    /// #     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
    /// #         tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    /// #         s.count().selects += 1;
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
    /// # let mut config = RunConfig::new(None);
    /// # config.users = 2;
    /// # config.duration = std::time::Duration::from_millis(300);
    /// # let run = tokio::runtime::Runtime::new()?
    /// #     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
    /// let s = &run.stages[0];
    /// let ok: u64 = s.transactions.iter().map(|t| t.ok - t.drained.unwrap()).sum();
    /// assert_eq!(s.tps(), ok as f64 / (s.end_s - s.start_s));
    /// // One stage: the run's successes that ended inside the window.
    /// assert_eq!(ok, run.ok_in_window("nap"));
    /// # Ok(()) }
    /// ```
    pub fn tps(&self) -> f64 {
        let ok: u64 = self
            .transactions
            .iter()
            .map(|t| t.ok.saturating_sub(t.drained.unwrap_or(0)))
            .sum();
        let secs = self.end_s - self.start_s;
        if secs > 0.0 { ok as f64 / secs } else { 0.0 }
    }
}

/// A closed run's or an open run's stages, resolved from a `RunConfig`.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Segments in order, the ramp-up first when there is one.
    segments: Vec<Segment>,
    open: bool,
    /// Open loop: the users serving arrivals.
    pool: usize,
}

#[derive(Debug, Clone)]
struct Segment {
    name: String,
    ramp: bool,
    /// Seconds from the start of measuring.
    start: f64,
    end: f64,
    /// Closed: users; open: rate. For the ramp-up, the value reached at its end.
    value: f64,
}

impl Plan {
    /// Checks and resolves the phases: `stages` empty means one stage of `duration` at
    /// `users` or `rate`.
    pub(crate) fn new(
        users: usize,
        rate: Option<f64>,
        duration: Duration,
        warmup: Duration,
        ramp_up: Duration,
        stages: &[Stage],
    ) -> anyhow::Result<Plan> {
        let stages: Vec<Stage> = if stages.is_empty() {
            anyhow::ensure!(!duration.is_zero(), "--duration must be longer than 0");
            vec![Stage {
                duration,
                load: match rate {
                    Some(r) => StageLoad::Rate(r),
                    None => StageLoad::Users(users),
                },
            }]
        } else {
            anyhow::ensure!(
                rate.is_none(),
                "--rate and --stage both set the load; give open-loop stages as --stage 30s:rate=500 instead"
            );
            // `--duration`, `--users` and `--rate` are checked under their own names.
            for (i, s) in stages.iter().enumerate() {
                if let Some(why) = s.problem() {
                    anyhow::bail!("stage {} ({s:?}): {why}", i + 1);
                }
            }
            stages.to_vec()
        };
        let open = matches!(stages[0].load, StageLoad::Rate(_));
        anyhow::ensure!(
            stages
                .iter()
                .all(|s| matches!(s.load, StageLoad::Rate(_)) == open),
            "the stages mix user counts and rates; a run is closed loop (every stage DURATION:USERS) or open loop (every stage DURATION:rate=R)"
        );
        anyhow::ensure!(
            ramp_up.is_zero() || warmup.is_zero(),
            "--ramp-up and --warmup both keep the start out of the steady figures; the ramp-up is recorded as a stage of its own, so drop --warmup (or set --warmup 0)"
        );
        let mut segments = Vec::new();
        let value = |s: &Stage| match s.load {
            StageLoad::Users(n) => n as f64,
            StageLoad::Rate(r) => r,
        };
        let mut at = 0.0;
        if !ramp_up.is_zero() {
            at = ramp_up.as_secs_f64();
            segments.push(Segment {
                name: "ramp-up".into(),
                ramp: true,
                start: 0.0,
                end: at,
                value: value(&stages[0]),
            });
        }
        for (i, s) in stages.iter().enumerate() {
            let end = at + s.duration.as_secs_f64();
            segments.push(Segment {
                name: format!("stage {}", i + 1),
                ramp: false,
                start: at,
                end,
                value: value(s),
            });
            at = end;
        }
        anyhow::ensure!(
            Duration::try_from_secs_f64(at).is_ok(),
            "the ramp-up and stages add up to {at:.0} s, longer than a run can be timed; give shorter stages"
        );
        Ok(Plan {
            segments,
            open,
            pool: users,
        })
    }

    /// The measured length: ramp-up plus stages (checked to fit a `Duration` when the plan
    /// was made).
    pub(crate) fn total(&self) -> Duration {
        Duration::from_secs_f64(self.segments.last().map_or(0.0, |s| s.end))
    }

    pub(crate) fn is_open(&self) -> bool {
        self.open
    }

    /// Users to start: the largest stage's (closed loop) or the pool (open loop).
    pub(crate) fn users(&self) -> usize {
        if self.open {
            self.pool
        } else {
            self.segments
                .iter()
                .map(|s| s.value as usize)
                .max()
                .unwrap_or(1)
        }
    }

    /// Open loop: the highest rate (for thinning).
    pub(crate) fn max_rate(&self) -> f64 {
        self.segments.iter().map(|s| s.value).fold(0.0, f64::max)
    }

    /// Open loop: the first stage's rate (what the run's `load` records).
    pub(crate) fn first_rate(&self) -> Option<f64> {
        self.open.then(|| {
            self.segments
                .iter()
                .find(|s| !s.ramp)
                .map_or(0.0, |s| s.value)
        })
    }

    /// The segment running `t` seconds after measuring started (the first during the warm-up,
    /// the last after the end).
    pub(crate) fn segment_at(&self, t: f64) -> usize {
        self.segments
            .iter()
            .position(|s| t < s.end)
            .unwrap_or(self.segments.len().saturating_sub(1))
    }

    /// The end (seconds from the start of measuring) of the segment running at `t`.
    pub(crate) fn segment_end(&self, t: f64) -> f64 {
        self.segments[self.segment_at(t)].end
    }

    /// The segment's name, for the progress line.
    pub(crate) fn name(&self, segment: usize) -> &str {
        &self.segments[segment].name
    }

    /// Segment end times in seconds from the start of measuring.
    pub(crate) fn ends(&self) -> Vec<f64> {
        self.segments.iter().map(|s| s.end).collect()
    }

    /// Closed loop: users running `t` seconds after measuring started.
    pub(crate) fn users_at(&self, t: f64) -> usize {
        if self.open {
            return self.pool;
        }
        let s = &self.segments[self.segment_at(t)];
        let n = s.value as usize;
        if s.ramp {
            // User i starts at ramp * i / n: user 0 at once, the last one just before the end.
            // Counted with the very expression `next_active` starts user i by: the quotient
            // t / ramp * n rounds otherwise at a start's instant (at 1.89 s of a 7 s ramp of
            // 100 users, user 27 ran while this said 27 users, not 28).
            let starts = |i: usize| s.end * i as f64 / n as f64;
            let mut started = (((t.max(0.0) / s.end) * n as f64).floor() as usize + 1).min(n);
            while started < n && starts(started) <= t {
                started += 1;
            }
            while started > 1 && starts(started - 1) > t {
                started -= 1;
            }
            started
        } else {
            n
        }
    }

    /// Closed loop: the first time at or after `t` (seconds from the start of measuring) at
    /// which user `user` (0-based) runs, or `None` if it never runs again. During the
    /// warm-up (`t` < 0) the first stage's users run: the warm-up is at stage 1's load.
    pub(crate) fn next_active(&self, user: usize, t: f64) -> Option<f64> {
        if self.open {
            return Some(t);
        }
        let current = self.segment_at(t);
        for (i, seg) in self.segments[current..].iter().enumerate() {
            let n = seg.value as usize;
            if user >= n {
                continue;
            }
            // A stage's users run from its start; in the one running now that is `t`, the
            // warm-up before the first stage included. (Its start, 0, would have every user
            // sleep through the warm-up, which then measured an idle server.)
            let from = if seg.ramp {
                seg.end * user as f64 / n as f64
            } else if i == 0 {
                t
            } else {
                seg.start
            };
            let at = t.max(from);
            if at < seg.end {
                return Some(at);
            }
        }
        None
    }

    /// Open loop: the arrival rate `t` seconds after measuring started.
    pub(crate) fn rate_at(&self, t: f64) -> f64 {
        let s = &self.segments[self.segment_at(t)];
        if s.ramp {
            s.value * (t.max(0.0) / s.end).min(1.0)
        } else {
            s.value
        }
    }

    /// The stages' results from per-stage histograms, cut at `measured` seconds.
    pub(crate) fn results(
        &self,
        totals: &StageTotals,
        names: &[String],
        measured: f64,
    ) -> Vec<StageResult> {
        self.segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.start < measured || s.start == 0.0)
            .map(|(i, s)| StageResult {
                index: i,
                name: s.name.clone(),
                start_s: s.start,
                end_s: s.end.min(measured),
                users: (!self.open).then_some(s.value as usize),
                rate: self.open.then_some(s.value),
                transactions: names
                    .iter()
                    .enumerate()
                    .map(|(k, name)| {
                        let c = &totals.cells[i][k];
                        StageTx {
                            name: name.clone(),
                            ok: c.ok,
                            failed: c.failed,
                            latency_ms: percentiles(&c.hist, c.sum_ms),
                            histogram: crate::histogram::encode(&c.hist),
                            drained: Some(c.drained),
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Per stage and type: an HDR histogram of successful latencies, and counts.
pub(crate) struct StageTotals {
    /// Segment end times (s from the start of measuring); a sample goes to the first segment
    /// ending after it. A straggler, finished in the drain, goes to the segment the window
    /// ended in: the last one, or the one a Ctrl-C cut short.
    ends: Vec<f64>,
    /// `cells[segment][kind]`.
    cells: Vec<Vec<Cell>>,
}

struct Cell {
    hist: Histogram<u64>,
    ok: u64,
    /// Of `ok`, those that ended in the drain.
    drained: u64,
    failed: u64,
    sum_ms: f64,
}

impl StageTotals {
    pub(crate) fn new(ends: Vec<f64>, kinds: usize) -> StageTotals {
        let cells = ends
            .iter()
            .map(|_| {
                (0..kinds)
                    .map(|_| Cell {
                        hist: crate::histogram::new(),
                        ok: 0,
                        drained: 0,
                        failed: 0,
                        sum_ms: 0.0,
                    })
                    .collect()
            })
            .collect();
        StageTotals { ends, cells }
    }

    /// With one stage (a run without phases), which `record` leaves empty: fills its figures
    /// for type `kind` from the run's totals of that type, which are the same samples
    /// (`drained` of its `ok` ended in the drain).
    pub(crate) fn whole_run(
        &mut self,
        kind: usize,
        hist: &Histogram<u64>,
        (ok, drained): (u64, u64),
        failed: u64,
        sum_ms: f64,
    ) {
        if let [cells] = self.cells.as_mut_slice() {
            cells[kind] = Cell {
                hist: hist.clone(),
                ok,
                drained,
                failed,
                sum_ms,
            };
        }
    }

    /// `(ok, failed, Σ ms, latencies in the histogram)` of stage `segment`, type `kind`.
    #[cfg(test)]
    pub(crate) fn cell(&self, segment: usize, kind: usize) -> (u64, u64, f64, u64) {
        let c = &self.cells[segment][kind];
        (c.ok, c.failed, c.sum_ms, c.hist.len())
    }

    /// Records one transaction that ended `end` after the start of measuring, in a window
    /// that ends at `window_end` (when known).
    pub(crate) fn record(
        &mut self,
        kind: usize,
        end: Duration,
        window_end: Option<Duration>,
        latency: Duration,
        failed: bool,
    ) {
        // One stage is the whole run: its figures are the run's totals, filled in by
        // `whole_run` at the end rather than recorded twice per transaction.
        if self.ends.len() <= 1 {
            return;
        }
        let t = end.as_secs_f64();
        let drained = window_end.is_some_and(|w| end >= w);
        let seg = match window_end {
            Some(w) if drained => {
                let w = w.as_secs_f64();
                self.ends.iter().position(|&e| w <= e)
            }
            _ => self.ends.iter().position(|&e| t < e),
        }
        .unwrap_or(self.ends.len() - 1);
        let c = &mut self.cells[seg][kind];
        if failed {
            c.failed += 1;
        } else {
            c.ok += 1;
            c.drained += u64::from(drained);
            c.sum_ms += latency.as_secs_f64() * 1e3;
            let _ = c.hist.record((latency.as_micros() as u64).max(1));
        }
    }
}

fn percentiles(h: &Histogram<u64>, sum_ms: f64) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    Percentiles {
        mean: sum_ms / h.len() as f64,
        p50: ms(0.5),
        p90: ms(0.9),
        p95: ms(0.95),
        p99: ms(0.99),
        p999: ms(0.999),
        max: h.max() as f64 / 1e3,
    }
}

/// The per-stage text table of a run with more than one stage: per stage and transaction type,
/// count, TPS, p50, p99 and errors. `None` for a single-stage run (the run's table says it all).
pub fn stage_table(run: &BenchRun) -> Option<Table> {
    if run.stages.len() < 2 {
        return None;
    }
    let mut t = Table::new(&[
        "stage",
        "from s",
        "to s",
        "load",
        "transaction",
        "count",
        "tps",
        "p50 ms",
        "p99 ms",
        "errors",
    ]);
    for s in &run.stages {
        let load = match (s.users, s.rate) {
            (Some(u), _) => crate::report::users(u),
            (_, Some(r)) => format!("{r}/s"),
            _ => String::new(),
        };
        let secs = (s.end_s - s.start_s).max(1e-9);
        // Its TPS, like the run's, is of the successes that ended inside the window: each
        // stage knows its drained ones (a merged result's parts may have ended their windows
        // in different stages); an older file's are all in the last stage listed.
        let last = std::ptr::eq(s, run.stages.last().unwrap_or(s));
        let in_window = |tx: &StageTx| {
            tx.ok_in_window(
                last,
                run.intervals
                    .after_window
                    .get(&tx.name)
                    .map(|i| i.sufficient.n),
            )
        };
        let mut first = true;
        for tx in s.transactions.iter().filter(|tx| tx.ok + tx.failed > 0) {
            t.row(vec![
                if first { s.name.clone() } else { String::new() },
                if first {
                    format!("{:.1}", s.start_s)
                } else {
                    String::new()
                },
                if first {
                    format!("{:.1}", s.end_s)
                } else {
                    String::new()
                },
                if first { load.clone() } else { String::new() },
                tx.name.clone(),
                tx.ok.to_string(),
                format!("{:.1}", in_window(tx) as f64 / secs),
                format!("{:.3}", tx.latency_ms.p50),
                format!("{:.3}", tx.latency_ms.p99),
                tx.failed.to_string(),
            ]);
            first = false;
        }
        if first {
            t.row(vec![
                s.name.clone(),
                format!("{:.1}", s.start_s),
                format!("{:.1}", s.end_s),
                load,
                "(none)".into(),
                "0".into(),
                "0".into(),
                String::new(),
                String::new(),
                "0".into(),
            ]);
        }
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages(s: &[&str]) -> Vec<Stage> {
        s.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn stage_syntax_errors_say_what_to_write() {
        for bad in [
            "30s",
            "x:8",
            "30s:0",
            "30s:rate=-1",
            "30s:rate=abc",
            "30s:cows=3",
            "0s:4",
        ] {
            let e = bad.parse::<Stage>().unwrap_err();
            assert!(e.contains(bad) && e.contains("DURATION:USERS"), "{e}");
        }
        assert_eq!(
            "2m:users=3".parse::<Stage>().unwrap(),
            Stage {
                duration: Duration::from_secs(120),
                load: StageLoad::Users(3)
            }
        );
    }

    #[test]
    fn a_ramp_up_starts_users_evenly_and_stages_change_the_count() {
        let p = Plan::new(
            1,
            None,
            Duration::ZERO,
            Duration::ZERO,
            Duration::from_secs(4),
            &stages(&["2s:4", "2s:2"]),
        )
        .unwrap();
        assert_eq!(p.users(), 4);
        assert_eq!(p.total(), Duration::from_secs(8));
        let at: Vec<usize> = [0.0, 0.5, 1.0, 2.5, 3.9, 4.0, 6.0, 7.9]
            .iter()
            .map(|&t| p.users_at(t))
            .collect();
        assert_eq!(at, [1, 1, 2, 3, 4, 4, 2, 2]);
        assert_eq!(p.next_active(0, 0.0), Some(0.0));
        assert_eq!(p.next_active(3, 0.0), Some(3.0));
        assert_eq!(p.next_active(3, 6.5), None);
        assert_eq!(p.next_active(1, 6.5), Some(6.5));
        let names: Vec<&str> = (0..3).map(|i| p.name(i)).collect();
        assert_eq!(names, ["ramp-up", "stage 1", "stage 2"]);
    }

    #[test]
    fn a_user_left_out_of_one_stage_comes_back_in_a_later_one() {
        let p = Plan::new(
            1,
            None,
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
            &stages(&["1s:4", "1s:1", "1s:4"]),
        )
        .unwrap();
        assert_eq!(p.next_active(2, 1.2), Some(2.0));
    }

    /// The warm-up (negative times) runs the first stage's users at once; a user the first
    /// stage leaves out waits for its stage. Before, every user slept until 0.
    #[test]
    fn the_warm_up_runs_the_first_stages_users() {
        let p = Plan::new(
            1,
            None,
            Duration::ZERO,
            Duration::from_secs(2),
            Duration::ZERO,
            &stages(&["1s:2", "1s:4"]),
        )
        .unwrap();
        assert_eq!(p.next_active(0, -1.5), Some(-1.5));
        assert_eq!(p.next_active(1, -0.1), Some(-0.1));
        assert_eq!(p.next_active(3, -1.5), Some(1.0));
        assert_eq!(p.users_at(-1.5), 2);
    }

    #[test]
    fn open_loop_rates_ramp_linearly() {
        let p = Plan::new(
            3,
            None,
            Duration::ZERO,
            Duration::ZERO,
            Duration::from_secs(2),
            &stages(&["1s:rate=100", "1s:rate=300"]),
        )
        .unwrap();
        assert!(p.is_open());
        assert_eq!(p.users(), 3);
        assert_eq!(p.rate_at(1.0), 50.0);
        assert_eq!(p.rate_at(2.5), 100.0);
        assert_eq!(p.max_rate(), 300.0);
        assert_eq!(p.first_rate(), Some(100.0));
    }

    #[test]
    fn conflicting_phases_are_refused() {
        let mixed = Plan::new(
            1,
            None,
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
            &stages(&["1s:4", "1s:rate=3"]),
        );
        assert!(mixed.unwrap_err().to_string().contains("mix"));
        let both = Plan::new(
            1,
            None,
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
            &[],
        );
        assert!(both.unwrap_err().to_string().contains("--warmup"));
        let rate = Plan::new(
            1,
            Some(5.0),
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
            &stages(&["1s:2"]),
        );
        assert!(rate.unwrap_err().to_string().contains("--rate"));
    }

    /// The users the progress line says run at `t` are the users the plan runs then: users
    /// 0..k and no other, at any time of a ramp-up and of stages that raise and lower the
    /// count, their boundaries included.
    #[test]
    fn the_users_said_to_run_are_the_users_that_run() {
        for (ramp, st) in [
            (3, &["2s:4", "1s:2", "2s:7"][..]),
            (1, &["1s:3"][..]),
            (7, &["1s:100", "1s:1"][..]),
            (0, &["1s:5", "3s:2", "1s:5"][..]),
        ] {
            let p = Plan::new(
                1,
                None,
                Duration::ZERO,
                Duration::ZERO,
                Duration::from_secs(ramp),
                &stages(st),
            )
            .unwrap();
            let total = p.total().as_secs_f64();
            let mut times: Vec<f64> = (0..=2000).map(|i| total * i as f64 / 2000.0).collect();
            // Every start a ramp-up plans, exactly, and every boundary.
            let n = p.users();
            times.extend((0..n).map(|u| ramp as f64 * u as f64 / n as f64));
            times.extend(p.ends());
            for t in times.into_iter().filter(|&t| t < total) {
                let k = p.users_at(t);
                let running: Vec<usize> =
                    (0..n).filter(|&u| p.next_active(u, t) == Some(t)).collect();
                assert_eq!(
                    running,
                    (0..k).collect::<Vec<_>>(),
                    "ramp {ramp} s, stages {st:?}, at {t} s the progress line says {k} users"
                );
            }
        }
    }
}
