//! The versioned JSON result of one `slipstream bench` run.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use slipstream_stats::Suff;

use crate::transaction::StatementCounts;
use crate::{Environment, write_atomically};

/// Names this file format; readers check it before trusting the fields.
pub const RUN_SCHEMA: &str = "slipstream-lab/bench-run";
/// Bumped on any incompatible change to [`BenchRun`]. Version 2 added the histograms,
/// per-interval percentiles, censored counts, failure messages, completions after the window
/// and the run's context; version 1 files are still read (those fields empty).
pub const RUN_SCHEMA_VERSION: u32 = 2;
/// The oldest version [`BenchRun::read_json`] reads.
pub const RUN_SCHEMA_OLDEST_READABLE: u32 = 1;

/// Everything one run measured, per transaction type and per second.
///
/// Latencies are in milliseconds. They run from a transaction's start (its intended start in an
/// open-loop run) to its end, less any intra-transaction think time.
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
/// // A 0.3 s run of a workload that needs no database: two users, 2 ms transactions.
/// assert_eq!((run.workload.as_str(), run.users, run.interrupted), ("nap", 2, false));
/// assert_eq!(run.transactions[0].name, "nap");
/// assert!(run.tps() > 100.0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRun {
    /// Always [`RUN_SCHEMA`].
    pub schema: String,
    /// [`RUN_SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The workload's name (`order-entry`, a workload file's `name`, ...).
    pub workload: String,
    /// How load was generated.
    pub load: Load,
    /// Concurrent users (connections).
    pub users: usize,
    /// Think time between transactions, as given.
    pub think: String,
    /// Think time inside transactions, as given.
    pub intra_think: String,
    /// Transaction types and weights, in the workload's order.
    pub weights: Vec<(String, u32)>,
    /// The measured window asked for, in seconds (after warm-up).
    pub duration_s: f64,
    /// The warm-up, in seconds (not recorded).
    pub warmup_s: f64,
    /// The measured window actually run, in seconds: shorter than `duration_s` when
    /// interrupted. Rates are per this.
    pub measured_s: f64,
    /// When measuring started (RFC 3339, UTC).
    pub started_at: String,
    /// True when the run was stopped early (Ctrl-C); the figures cover `measured_s`.
    pub interrupted: bool,
    /// Transactions started in the window that had not finished when the run gave up waiting
    /// for them (after `grace_s`): the sum of the types' `censored` counts. Their latency is
    /// only known to be longer than the wait, so they are in no latency figure.
    pub unfinished: u64,
    /// How long the run waited for in-flight work after the window, in seconds (0 in version 1
    /// files).
    #[serde(default)]
    pub grace_s: f64,
    /// The random seed the users' choices derive from.
    pub seed: u64,
    /// Machine, versions, server.
    pub environment: Environment,
    /// Per transaction type, in the workload's order (weight-0 types included).
    pub transactions: Vec<TxResult>,
    /// Per-second aggregates per transaction type, by completion time.
    pub intervals: Intervals,
    /// Open-loop schedule keeping (absent for closed-loop runs).
    pub schedule: Option<Schedule>,
    /// The server's state before and after the run (absent in version 1 files and for runs
    /// without a database).
    #[serde(default)]
    pub context: Option<crate::context::RunContext>,
    /// The runs this one was merged from (`slipstream report --merge`); empty for a run
    /// measured by one process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<MergedPart>,
    /// The ramp-up and stages in the order run, each with its own figures (one stage for a
    /// run without phases; empty in files written before stages existed).
    #[serde(default)]
    pub stages: Vec<crate::StageResult>,
}

/// One load generator's run inside a merged result.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Noop;
/// # impl Transaction for Noop {
/// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
/// # }
/// # let workload = Workload::new("noop").transaction("noop", 1, || Noop).without_database();
/// # let mut config = RunConfig::new(None);
/// # config.duration = std::time::Duration::from_millis(100);
/// # let rt = tokio::runtime::Runtime::new()?;
/// # let mut run = || rt.block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()));
/// // Two load generators' results of one test, merged.
/// let (a, b) = (run()?, run()?);
/// let all = slipstream_bench::merge(&[("gen1.json".into(), a), ("gen2.json".into(), b)])?;
/// assert_eq!(all.merged_from.len(), 2);
/// assert_eq!(all.merged_from[1].label, "gen2.json");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergedPart {
    /// The file it was read from (or the label it was given).
    pub label: String,
    /// Its `started_at`.
    pub started_at: String,
    /// Its users.
    pub users: usize,
    /// Its seed.
    pub seed: u64,
    /// Its measured window (s).
    pub measured_s: f64,
    /// Its machine.
    pub host: String,
    /// Whether it was stopped early (a Ctrl-C): its own `measured_s` says when. The merged
    /// result's `interrupted` says only that some part was, and its `measured_s` is the span
    /// of all of them (false in files merged before it was kept).
    #[serde(default)]
    pub interrupted: bool,
}

/// Closed loop (users with think time) or open loop (Poisson arrivals at a rate).
///
/// ```
/// use slipstream_bench::Load;
/// let json = serde_json::to_string(&Load::Open { rate: 500.0 }).unwrap();
/// assert_eq!(json, r#"{"mode":"open","rate":500.0}"#);
/// assert_eq!(serde_json::from_str::<Load>(r#"{"mode":"closed"}"#).unwrap(), Load::Closed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Load {
    /// Each user starts its next transaction when the last one (and its think time) is done.
    Closed,
    /// Transactions arrive at `rate` per second whatever the server does.
    Open {
        /// Mean arrivals per second.
        rate: f64,
    },
}

/// One transaction type's figures.
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
/// let nap = &run.transactions[0];
/// assert_eq!((nap.name.as_str(), nap.weight, nap.failed), ("nap", 1, 0));
/// assert_eq!(nap.statements.selects, nap.ok); // the transaction counts one select
/// assert!(nap.latency_ms.p50 >= 2.0); // each sleeps 2 ms
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TxResult {
    /// The type's name.
    pub name: String,
    /// Its weight in the mix.
    pub weight: u32,
    /// Transactions that succeeded.
    pub ok: u64,
    /// Transactions that failed.
    pub failed: u64,
    /// Failures by SQLSTATE (`client:<kind>` for errors not from the server).
    pub failures: BTreeMap<String, u64>,
    /// The first message seen for each failure code in `failures`.
    #[serde(default)]
    pub failure_messages: BTreeMap<String, String>,
    /// Transactions of this type still running when the run stopped waiting (the grace
    /// period): their latency is right-censored at about `grace_s`, so they are counted here
    /// and not in `ok`, `failed` or any latency figure. Open-loop arrivals still queued then
    /// are counted too, and those turned away by a full queue (`Schedule::never_started`).
    #[serde(default)]
    pub censored: u64,
    /// Statements run (by successful and failed transactions).
    pub statements: StatementCounts,
    /// Sufficient statistics of successful latencies (ms), and their extremes.
    #[serde(alias = "stats")]
    pub latency_stats: LatencyStats,
    /// Latency summary of successful transactions (ms).
    pub latency_ms: Percentiles,
    /// (percentile, ms) points for a percentile chart, from the HDR histogram.
    pub percentile_curve: Vec<(f64, f64)>,
    /// The HDR histogram of successful latencies in microseconds (3 significant digits),
    /// HdrHistogram V2 deflate, base64; empty when none succeeded. Histograms of several runs
    /// add exactly.
    #[serde(default)]
    pub histogram: String,
}

/// Sufficient statistics of a set of latencies y (ms), and their extremes: enough for means,
/// variances and the gamma and lognormal likelihoods without the samples. In JSON the
/// statistics' fields (`n`, `sum`, `sum_sq`, `sum_ln`, `sum_ln_sq`) sit beside `min` and `max`.
///
/// ```
/// use slipstream_bench::LatencyStats;
/// let mut s = LatencyStats::default();
/// for ms in [4.0, 1.0, 7.0] {
///     s.add(ms);
/// }
/// assert_eq!((s.sufficient.n, s.min, s.max, s.mean()), (3, 1.0, 7.0, 4.0));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// The sufficient statistics: n, Σy, Σy², Σln y, Σ(ln y)².
    #[serde(flatten)]
    pub sufficient: Suff,
    /// Smallest y (0 when n = 0).
    pub min: f64,
    /// Largest y.
    pub max: f64,
}

impl LatencyStats {
    /// Adds one latency. Zero is clamped to a nanosecond so `ln y` stays finite.
    ///
    /// ```
    /// let mut s = slipstream_bench::LatencyStats::default();
    /// s.add(2.5);
    /// s.add(0.0); // clamped to a nanosecond: its logarithm stays finite
    /// assert_eq!((s.sufficient.n, s.min, s.max), (2, 1e-6, 2.5));
    /// assert!(s.sufficient.sum_ln.is_finite());
    /// ```
    pub fn add(&mut self, y: f64) {
        let y = y.max(1e-6);
        self.min = if self.sufficient.n == 0 {
            y
        } else {
            self.min.min(y)
        };
        self.max = self.max.max(y);
        self.sufficient.add(y);
    }

    /// Adds another set.
    ///
    /// ```
    /// use slipstream_bench::LatencyStats;
    /// let (mut a, mut b) = (LatencyStats::default(), LatencyStats::default());
    /// a.add(3.0);
    /// b.add(1.0);
    /// b.add(5.0);
    /// a.merge(&b);
    /// assert_eq!((a.sufficient.n, a.min, a.max, a.mean()), (3, 1.0, 5.0, 3.0));
    /// ```
    pub fn merge(&mut self, o: &LatencyStats) {
        if o.sufficient.n == 0 {
            return;
        }
        self.min = if self.sufficient.n == 0 {
            o.min
        } else {
            self.min.min(o.min)
        };
        self.max = self.max.max(o.max);
        self.sufficient.merge(&o.sufficient);
    }

    /// The mean (0 when empty).
    ///
    /// ```
    /// let mut s = slipstream_bench::LatencyStats::default();
    /// s.add(1.0);
    /// s.add(3.0);
    /// assert_eq!(s.mean(), 2.0);
    /// assert_eq!(s.sufficient.sd(), 2f64.sqrt());
    /// ```
    pub fn mean(&self) -> f64 {
        self.sufficient.mean()
    }
}

/// Latency percentiles (ms).
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
/// let p = run.transactions[0].latency_ms; // Percentiles
/// assert!(p.p50 <= p.p90 && p.p90 <= p.p99 && p.p99 <= p.p999 && p.p999 <= p.max);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// Per-second aggregates.
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
/// let per_second = &run.intervals.per_transaction["nap"];
/// assert_eq!(run.intervals.seconds, 1.0);
/// // The series and what ended after the window add up to the type's totals.
/// let ended_after = run.intervals.after_window.get("nap").map_or(0, |i| i.sufficient.n);
/// let in_series: u64 = per_second.iter().map(|i| i.sufficient.n).sum();
/// assert_eq!(in_series + ended_after, run.transactions[0].ok);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Intervals {
    /// Interval length in seconds.
    pub seconds: f64,
    /// For each transaction type, one entry per interval from the start of measuring.
    pub per_transaction: BTreeMap<String, Vec<Interval>>,
    /// For each transaction type, everything that ended at or after the window's end: work
    /// started in the window and finished during the drain. These are in the type's totals; keeping
    /// them out of the series avoids a false drop (a half-empty last interval), and keeping
    /// them here lets the intervals plus this add up to the totals.
    #[serde(default)]
    pub after_window: BTreeMap<String, Interval>,
    /// Open loop: schedule lag (start minus intended start) per interval, by completion time;
    /// empty for closed loop. `sufficient` holds lags in ms; `failed` is unused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule_lag: Vec<Interval>,
}

/// One interval of one transaction type.
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
/// let first = &run.intervals.per_transaction["nap"][0]; // the first second
/// assert!(first.sufficient.n > 0 && first.failed == 0);
/// assert!(first.p50_ms >= 2.0 && first.p50_ms <= first.p99_ms);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The sufficient statistics of the latencies (ms) of the successful transactions that
    /// ended in the interval (`n` is their count).
    #[serde(flatten)]
    pub sufficient: Suff,
    /// Failed transactions that ended in the interval.
    pub failed: u64,
    /// Median latency in the interval (ms; 0 when none succeeded).
    #[serde(default)]
    pub p50_ms: f64,
    /// 99th percentile latency in the interval (ms; 0 when none succeeded).
    #[serde(default)]
    pub p99_ms: f64,
    /// The interval's HDR histogram (µs; V2 deflate, base64; empty when none succeeded).
    #[serde(default)]
    pub histogram: String,
}

/// How well an open-loop run kept its schedule.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Noop;
/// # impl Transaction for Noop {
/// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> { Ok(()) }
/// # }
/// # let workload = Workload::new("noop").transaction("noop", 1, || Noop).without_database();
/// let mut config = RunConfig::new(None);
/// config.rate = Some(200.0); // open loop: 200 arrivals a second
/// config.duration = std::time::Duration::from_millis(500);
/// let run = tokio::runtime::Runtime::new()?
///     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
/// let schedule = run.schedule.expect("an open-loop run keeps its schedule");
/// assert!(schedule.arrivals > 0 && schedule.late <= schedule.arrivals);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Schedule {
    /// Arrivals intended in the measured window.
    pub arrivals: u64,
    /// Transactions that started more than `late_after_ms` after their intended start.
    pub late: u64,
    /// The lateness threshold (ms).
    pub late_after_ms: f64,
    /// Start minus intended start (ms): queueing for a free user plus dispatch delay.
    pub lag_ms: Percentiles,
    /// The lag's HDR histogram (µs; V2 deflate, base64).
    #[serde(default)]
    pub lag_histogram: String,
    /// Arrivals of the window that never started: still queued when the users stopped (a
    /// stop, or the grace limit), or turned away because [`QUEUE_LIMIT`](crate::QUEUE_LIMIT)
    /// arrivals were already waiting. Part of `unfinished` (the rest of which was in flight).
    /// Absent from files written before it was counted apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub never_started: Option<u64>,
}

/// Fails, naming both, if a run is given twice (`runs` are labelled, e.g. by file): as the
/// same file or a copy, or as a merged result and one of its own parts (or two merges that
/// share a part). Counted twice, a run would double its transactions in a merge, and in a
/// comparison it would pass for a second run that agrees exactly with the first, narrowing
/// the verdict.
///
/// ```
/// # fn f(a: &slipstream_bench::BenchRun) {
/// let err = slipstream_bench::refuse_repeated_runs(&[("a1.json", a), ("a2.json", a)]).unwrap_err();
/// assert!(err.to_string().contains("the same run"));
/// # }
/// ```
pub fn refuse_repeated_runs(runs: &[(&str, &BenchRun)]) -> anyhow::Result<()> {
    let parts: Vec<_> = runs.iter().map(|(_, r)| r.parts()).collect();
    for (i, (label, _)) in runs.iter().enumerate() {
        for (j, (first, _)) in runs[..i].iter().enumerate() {
            if let Some(p) = parts[i].iter().find(|p| parts[j].contains(p)) {
                anyhow::bail!(
                    "{first} and {label} hold the same run (started {}, seed {}): give each run \
                     once; a copy, or a merged result with one of its own parts, counts it twice",
                    p.0,
                    p.1
                );
            }
        }
    }
    Ok(())
}

impl BenchRun {
    /// The single runs this result stands for, by start, seed, users and window (two load
    /// generators of one test started in the same second still differ in their seeds or, to
    /// the nanosecond, their windows): a merge's parts (`merged_from`), or itself.
    fn parts(&self) -> Vec<(&str, u64, usize, u64)> {
        if self.merged_from.is_empty() {
            vec![(
                self.started_at.as_str(),
                self.seed,
                self.users,
                self.measured_s.to_bits(),
            )]
        } else {
            self.merged_from
                .iter()
                .map(|p| {
                    (
                        p.started_at.as_str(),
                        p.seed,
                        p.users,
                        p.measured_s.to_bits(),
                    )
                })
                .collect()
        }
    }

    /// Successful transactions per second over the measured window, all types: the successes
    /// that **ended inside the window**, over its length: a throughput, what the server and the
    /// users sustained (wrk2's Requests/sec and k6's iteration rate count completions the same
    /// way). Work of the window that ended after it, in the drain, is in `ok`, `failed` and the
    /// latencies, not here: an open loop whose users fell behind serves its backlog there, and
    /// counted, it made the TPS read as the rate asked for (3x what the server could do in
    /// `tests/attack_runner_events.rs`). A closed loop's drain holds at most one transaction
    /// per user. [`BenchRun::ok_in_window`] gives a type's count.
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
    /// let in_window = run.ok_in_window("nap");
    /// assert_eq!(run.tps(), in_window as f64 / run.measured_s);
    /// // The rest of the window's successes ended in the drain.
    /// let drained = run.intervals.after_window.get("nap").map_or(0, |i| i.sufficient.n);
    /// assert_eq!(in_window + drained, run.transactions[0].ok);
    /// # Ok(()) }
    /// ```
    pub fn tps(&self) -> f64 {
        let ok: u64 = self
            .transactions
            .iter()
            .map(|t| self.ok_in_window(&t.name))
            .sum();
        self.per_second(ok)
    }

    /// A type's TPS as [`BenchRun::tps`] counts it: its successes that ended inside the
    /// window, over the window.
    pub fn tps_of(&self, name: &str) -> f64 {
        self.per_second(self.ok_in_window(name))
    }

    /// A type's successes that ended inside the measured window: its `ok` less those that
    /// ended in the drain (`intervals.after_window`), which the per-second series leave out
    /// too.
    pub fn ok_in_window(&self, name: &str) -> u64 {
        let ok = self
            .transactions
            .iter()
            .find(|t| t.name == name)
            .map_or(0, |t| t.ok);
        let after = self
            .intervals
            .after_window
            .get(name)
            .map_or(0, |i| i.sufficient.n);
        ok.saturating_sub(after)
    }

    fn per_second(&self, n: u64) -> f64 {
        if self.measured_s > 0.0 {
            n as f64 / self.measured_s
        } else {
            0.0
        }
    }

    /// How an interrupted run was cut short, for a sentence that begins "interrupted": after
    /// how long, of the window asked for; for a merged result, which of its parts and when
    /// (its own `measured_s` spans every part, so it says nothing of a stop). `None` for a run
    /// that ran its whole window.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
    /// # struct Nap;
    /// # impl Transaction for Nap {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
    /// #         tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
    /// # let mut config = RunConfig::new(None);
    /// config.duration = std::time::Duration::from_secs(2);
    /// # let mut run = tokio::runtime::Runtime::new()?
    /// #     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
    /// # (run.interrupted, run.measured_s) = (true, 0.5);
    /// // Stopped half a second in:
    /// assert_eq!(run.interruption().as_deref(), Some("after 0.5 s of the 2 s asked for"));
    /// # Ok(()) }
    /// ```
    pub fn interruption(&self) -> Option<String> {
        if !self.interrupted {
            return None;
        }
        let asked = format!("of the {:.0} s asked for", self.duration_s);
        if self.merged_from.is_empty() {
            return Some(format!("after {:.1} s {asked}", self.measured_s));
        }
        let stopped: Vec<String> = self
            .merged_from
            .iter()
            .filter(|p| p.interrupted)
            .map(|p| format!("{} after {:.1} s", p.label, p.measured_s))
            .collect();
        Some(if stopped.is_empty() {
            "in part (a load generator was stopped early; this file, merged by an older \
             slipstream, does not say which)"
                .to_string()
        } else {
            format!("in part: {} {asked}", stopped.join(", "))
        })
    }

    /// Where interval `i` of the series (`intervals.per_transaction`, `schedule_lag`) ends, in
    /// seconds from the start of measuring, and how many seconds it covers: `intervals.seconds`,
    /// but less for the last one when the window ended part way into it (a Ctrl-C, a `-d` that
    /// is not whole seconds). That interval holds only what ended before the end of the
    /// window, so a rate over it divides by the part it covers: over a whole one it read as a
    /// drop in throughput that never happened.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
    /// # struct Nap;
    /// # impl Transaction for Nap {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
    /// #         tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
    /// # let mut config = RunConfig::new(None);
    /// config.duration = std::time::Duration::from_millis(1500);
    /// # let run = tokio::runtime::Runtime::new()?
    /// #     .block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()))?;
    /// assert_eq!(run.interval_span(0), (1.0, 1.0));
    /// assert_eq!(run.interval_span(1), (1.5, 0.5)); // the window ended half way into it
    /// # Ok(()) }
    /// ```
    pub fn interval_span(&self, i: usize) -> (f64, f64) {
        let seconds = self.intervals.seconds;
        let (start, whole_end) = (i as f64 * seconds, (i + 1) as f64 * seconds);
        let end = whole_end.min(self.series_end());
        // A file whose window ends before this interval starts (edited, or a merge whose
        // parts' rounding disagrees) has no part length to give: the interval is taken whole.
        if end > start && end.is_finite() {
            (end, end - start)
        } else {
            (whole_end, seconds)
        }
    }

    /// Where the window ends on the series' time line. A merged result's series places each
    /// part whole intervals from the earliest start (its offset rounded: see `merge`), so
    /// its window ends where the latest part's does on that line, not at `measured_s`.
    fn series_end(&self) -> f64 {
        let seconds = self.intervals.seconds;
        let starts: Option<Vec<_>> = self
            .merged_from
            .iter()
            .map(|p| chrono::DateTime::parse_from_rfc3339(&p.started_at).ok())
            .collect();
        match starts {
            Some(starts) if !starts.is_empty() && seconds > 0.0 => {
                let origin = starts.iter().min().copied().unwrap_or(starts[0]);
                starts
                    .iter()
                    .zip(&self.merged_from)
                    .map(|(s, p)| {
                        let shift =
                            crate::merge::shift(crate::merge::offset_s(*s, origin), seconds);
                        shift as f64 * seconds + p.measured_s
                    })
                    .fold(0.0, f64::max)
            }
            _ => self.measured_s,
        }
    }

    /// Writes the result as pretty JSON, atomically (a reader never sees half a file).
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
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("nap.json");
    /// run.write_json(&path)?;
    /// let back = slipstream_bench::BenchRun::read_json(&path)?;
    /// assert_eq!((back.seed, back.tps()), (run.seed, run.tps()));
    /// # Ok(()) }
    /// ```
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        write_atomically(path, &json)
    }

    /// Reads a result file, checking that it is one and that this version can read it.
    ///
    /// ```no_run
    /// let run = slipstream_bench::BenchRun::read_json("run.json".as_ref())?;
    /// println!("{} at {:.0} TPS", run.workload, run.tps());
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn read_json(path: &Path) -> anyhow::Result<BenchRun> {
        use crate::text_file::{NotText, read_text};
        // Checked as it is read: a device or binary given by mistake (`report /dev/zero`) is
        // refused at its first byte rather than read into memory until the process is killed.
        let text = read_text(path, None).map_err(|e| {
            let path = path.display();
            match e {
                NotText::Io(e) => anyhow::anyhow!("could not read {path}: {e}"),
                NotText::Byte { offset, byte, control: true, .. } => anyhow::anyhow!(
                    "{path} holds a control character (byte {byte:#04x} at byte {offset}), which JSON does not allow: a result file is JSON; is it another kind of file?"
                ),
                NotText::Byte { offset, .. } => anyhow::anyhow!(
                    "{path} is not UTF-8 text (byte {offset} is not): a result file is JSON; is it another kind of file?"
                ),
                NotText::TooLong { limit } => {
                    anyhow::anyhow!("{path} is longer than {limit} bytes")
                }
            }
        })?;
        // The schema first, from a struct of two fields: serde skips the rest without building
        // it (a `serde_json::Value` of the whole file took 17 times the file's size).
        #[derive(Deserialize)]
        struct Header {
            schema: Option<String>,
            schema_version: Option<u64>,
        }
        let header: Header = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not valid JSON ({e}); is it truncated or corrupt? Re-run the benchmark to get a new one",
                path.display()
            )
        })?;
        if header.schema.as_deref() != Some(RUN_SCHEMA) {
            anyhow::bail!(
                "{} is not a slipstream bench result (schema {:?}, expected {RUN_SCHEMA:?})",
                path.display(),
                header.schema.as_deref().unwrap_or("missing")
            );
        }
        let version = header.schema_version;
        let readable = u64::from(RUN_SCHEMA_OLDEST_READABLE)..=u64::from(RUN_SCHEMA_VERSION);
        if !version.is_some_and(|v| readable.contains(&v)) {
            anyhow::bail!(
                "{} has schema version {}; this slipstream reads versions {RUN_SCHEMA_OLDEST_READABLE} to {RUN_SCHEMA_VERSION}{}",
                path.display(),
                version.map_or("(missing)".to_string(), |v| v.to_string()),
                if version.is_some_and(|v| v > u64::from(RUN_SCHEMA_VERSION)) {
                    " (the file is newer: update slipstream)"
                } else {
                    ""
                }
            );
        }
        let run: BenchRun = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is a bench result with a missing or malformed field: {e}",
                path.display()
            )
        })?;
        run.check().map_err(|why| {
            anyhow::anyhow!(
                "{}: {why}; the file is corrupt or edited by hand, re-run the benchmark",
                path.display()
            )
        })?;
        Ok(run)
    }

    /// What a result file must hold for its figures to mean anything: finite, non-negative
    /// times and latencies, wherever they are (summaries, intervals, stages, curves); counts
    /// that add up without overflowing (reports and comparisons add them); each type once,
    /// and listed in `weights`; and, from version 2, histograms and statistics that hold
    /// exactly the type's successes (every percentile shown is read from them).
    fn check(&self) -> Result<(), String> {
        let seconds = [
            ("measured_s", self.measured_s),
            ("duration_s", self.duration_s),
            ("warmup_s", self.warmup_s),
            ("grace_s", self.grace_s),
        ];
        for (what, v) in seconds {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{what} is {v}, not a time in seconds"));
            }
        }
        if !(self.intervals.seconds.is_finite() && self.intervals.seconds > 0.0) {
            return Err(format!(
                "intervals.seconds is {}, not a positive length",
                self.intervals.seconds
            ));
        }
        if let Load::Open { rate } = self.load
            && !(rate.is_finite() && rate >= 0.0)
        {
            return Err(format!("load.rate is {rate}, not a rate"));
        }
        let add = |total: u64, n: u64, what: &dyn Fn() -> String| {
            total
                .checked_add(n)
                .ok_or_else(|| format!("{} overflows a count when added", what()))
        };
        let mut all = 0u64;
        for (i, t) in self.transactions.iter().enumerate() {
            sums_hold(&t.latency_stats.sufficient, &|| format!("{:?}", t.name))?;
            if self.transactions[..i].iter().any(|o| o.name == t.name) {
                return Err(format!("transaction {:?} is listed twice", t.name));
            }
            let what = || format!("the counts of {:?}", t.name);
            all = add(all, t.ok, &what)?;
            all = add(all, t.failed, &what)?;
            all = add(all, t.censored, &what)?;
            let name = || format!("{:?}", t.name);
            percentiles_hold(&t.latency_ms, &name)?;
            let s = &t.latency_stats;
            curve_holds(&t.percentile_curve, &name)?;
            let curve = t.percentile_curve.iter().map(|(_, v)| *v);
            for v in [s.min, s.max].into_iter().chain(curve) {
                latency_holds(v, &name)?;
            }
            if self.schema_version >= 2 {
                let h =
                    crate::histogram::decode(&t.histogram, &t.name).map_err(|e| e.to_string())?;
                if h.len() != t.ok || t.latency_stats.sufficient.n != t.ok {
                    return Err(format!(
                        "{:?} has {} successes, but its histogram holds {} and its statistics {}",
                        t.name,
                        t.ok,
                        h.len(),
                        t.latency_stats.sufficient.n
                    ));
                }
            }
        }
        // A run writes both from its workload: each type, in order, with its weight. `--merge`
        // takes the types from `weights`, so a type missing there would be dropped.
        let listed = self.weights.len() == self.transactions.len()
            && self
                .weights
                .iter()
                .zip(&self.transactions)
                .all(|((name, weight), t)| *name == t.name && *weight == t.weight);
        if !listed {
            let types: Vec<(&str, u32)> = self
                .transactions
                .iter()
                .map(|t| (t.name.as_str(), t.weight))
                .collect();
            return Err(format!(
                "weights {:?} do not list the transaction types {types:?} with their weights",
                self.weights
            ));
        }
        let ok: u64 = self.transactions.iter().map(|t| t.ok).sum();
        // A window that held successes lasted at least their count at a billion a second: no
        // client runs faster, and a smaller window (0, 1e-300) makes every rate absurd.
        // (measured_s is finite and not negative here: checked above.)
        if ok > 0 && self.measured_s < ok as f64 * 1e-9 {
            return Err(format!(
                "measured_s is {}, too short for its {ok} successes",
                self.measured_s
            ));
        }
        // One total over every type, so that any sum a report takes (a type's, a second's
        // over all types) fits too.
        let mut n = 0u64;
        // Every type with a series, then every type with completions after the window but no
        // series (`report` adds those too): none escapes the checks.
        let no_series = self
            .intervals
            .after_window
            .keys()
            .filter(|name| !self.intervals.per_transaction.contains_key(*name))
            .map(|name| (name, &[][..]));
        let series = self
            .intervals
            .per_transaction
            .iter()
            .map(|(name, s)| (name, s.as_slice()));
        for (name, series) in series.chain(no_series) {
            let what = || format!("the intervals of {name:?}");
            // This type's successes and failures over its series and after the window.
            let (mut ok, mut failed) = (0u64, 0u64);
            for (i, iv) in series
                .iter()
                .chain(self.intervals.after_window.get(name))
                .enumerate()
            {
                n = add(n, iv.sufficient.n, &what)?;
                n = add(n, iv.failed, &what)?;
                ok += iv.sufficient.n;
                failed += iv.failed;
                sums_hold(&iv.sufficient, &|| format!("{name:?}'s interval {}", i + 1))?;
                let label = || format!("{name:?}'s interval {}", i + 1);
                // Version 1 files have none (an empty text); from version 2 every interval
                // with a success has one, and it must hold them, as `--merge` adds them.
                if self.schema_version >= 2 && iv.sufficient.n > 0 && iv.histogram.is_empty() {
                    return Err(format!(
                        "{} counts {} successes, but has no histogram",
                        label(),
                        iv.sufficient.n
                    ));
                }
                holds(&iv.histogram, iv.sufficient.n, &label)?;
                latency_holds(iv.p50_ms, &label)?;
                latency_holds(iv.p99_ms, &label)?;
            }
            // Each success and failure is in one interval or after the window, and in the
            // type's totals: the series never holds more than those (`compare` and the
            // report's charts read it).
            let totals = self
                .transactions
                .iter()
                .find(|t| t.name == *name)
                .map_or((0, 0), |t| (t.ok, t.failed));
            if ok > totals.0 || failed > totals.1 {
                return Err(format!(
                    "the intervals of {name:?} hold {ok} successes and {failed} failures, more \
                     than its totals ({} and {})",
                    totals.0, totals.1
                ));
            }
        }
        // The open-loop lag per second: drawn by the report (its "schedule lag" chart) and
        // added by `--merge` as the latencies are, so held to what they are held to.
        let mut n = 0u64;
        for (i, iv) in self.intervals.schedule_lag.iter().enumerate() {
            let label = || format!("the schedule's lag in interval {}", i + 1);
            n = add(n, iv.sufficient.n, &label)?;
            sums_hold(&iv.sufficient, &label)?;
            holds(&iv.histogram, iv.sufficient.n, &label)?;
            latency_holds(iv.p50_ms, &label)?;
            latency_holds(iv.p99_ms, &label)?;
        }
        if let Some(s) = &self.schedule {
            if let Some(q) = s.never_started
                && q > self.unfinished
            {
                return Err(format!(
                    "{q} arrivals never started, but only {} transactions are censored",
                    self.unfinished
                ));
            }
            holds_some(&s.lag_histogram, &|| "the schedule's lag".to_string())?;
            percentiles_hold(&s.lag_ms, &|| "the schedule's lag".to_string())?;
        }
        let mut n = 0u64;
        for s in &self.stages {
            // Seconds from the start of measuring: a stage cannot start before it.
            if !(s.start_s.is_finite()
                && s.end_s.is_finite()
                && s.start_s >= 0.0
                && s.end_s >= s.start_s)
            {
                return Err(format!(
                    "stage {:?} runs from {} s to {} s",
                    s.name, s.start_s, s.end_s
                ));
            }
            for t in &s.transactions {
                let what = || format!("the counts of stage {:?}", s.name);
                n = add(n, t.ok, &what)?;
                n = add(n, t.failed, &what)?;
                let label = || format!("stage {:?}'s {:?}", s.name, t.name);
                if t.drained.is_some_and(|d| d > t.ok) {
                    return Err(format!(
                        "{} ended {} successes in the drain, of only {}",
                        label(),
                        t.drained.unwrap_or(0),
                        t.ok
                    ));
                }
                holds(&t.histogram, t.ok, &label)?;
                percentiles_hold(&t.latency_ms, &label)?;
            }
        }
        Ok(())
    }
}

/// Sufficient statistics a run could have recorded: sums of latencies and of their squares
/// finite and not negative (a mean and a variance are read from them), the logarithms'
/// finite.
fn sums_hold(s: &Suff, label: &dyn Fn() -> String) -> Result<(), String> {
    let ok = s.sum.is_finite()
        && s.sum >= 0.0
        && s.sum_sq.is_finite()
        && s.sum_sq >= 0.0
        && s.sum_ln.is_finite()
        && s.sum_ln_sq.is_finite()
        && s.sum_ln_sq >= 0.0;
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{}'s latency statistics are not sums a run records (sum {}, sum of squares {}, \
             sum of logs {}, of their squares {})",
            label(),
            s.sum,
            s.sum_sq,
            s.sum_ln,
            s.sum_ln_sq
        ))
    }
}

/// A latency (ms) a run could have measured: finite and not negative. Every one a file holds
/// is shown (a table, a chart's point) or added as it stands.
fn latency_holds(v: f64, what: &dyn Fn() -> String) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("a latency of {} is {v} ms", what()))
    }
}

/// A percentile curve's percentiles lie in 0..=100 and rise, as the recorder writes them:
/// `compare` reads the p99's error from the points around it, and the report draws them.
fn curve_holds(curve: &[(f64, f64)], what: &dyn Fn() -> String) -> Result<(), String> {
    let mut last = 0.0;
    for &(p, _) in curve {
        if !(p.is_finite() && (last..=100.0).contains(&p)) {
            return Err(format!(
                "the percentile curve of {} has a point at percentile {p} (after {last}); \
                 percentiles run from 0 to 100, rising",
                what()
            ));
        }
        last = p;
    }
    Ok(())
}

/// [`latency_holds`] for each of a summary's figures.
fn percentiles_hold(p: &Percentiles, what: &dyn Fn() -> String) -> Result<(), String> {
    [p.mean, p.p50, p.p90, p.p95, p.p99, p.p999, p.max]
        .into_iter()
        .try_for_each(|v| latency_holds(v, what))
}

/// A histogram saved beside a count must decode and hold that many values (an empty text is
/// a histogram older files did not save, or one of no values).
fn holds(text: &str, n: u64, what: &dyn Fn() -> String) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    let h = crate::histogram::decode(text, &what()).map_err(|e| e.to_string())?;
    if h.len() != n {
        return Err(format!(
            "{} counts {n} successes, but its histogram holds {}",
            what(),
            h.len()
        ));
    }
    Ok(())
}

/// A histogram saved with no count beside it must at least decode.
fn holds_some(text: &str, what: &dyn Fn() -> String) -> Result<(), String> {
    crate::histogram::decode(text, &what())
        .map(drop)
        .map_err(|e| e.to_string())
}
