//! `slipstream compare`: bench results, side A against side B, through slipstream-stats. This
//! module turns result files into the statistics crate's numbers (the unit of analysis) and
//! its answers into rows, JSON and figures. `slipstream compare` and `lab run ab` both go
//! through [`compare_sides`].
//!
//! # The unit
//!
//! | runs per side | unit (auto) | why |
//! |---|---|---|
//! | ≥ 2 each | [`Unit::Run`]: one value per run | between-run variance (drift, checkpoints, neighbours) is in the data |
//! | 1 each | [`Unit::Interval`]: batch means of the per-second series | the best one run can do; it cannot see between-run variance, and says so |

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use slipstream_stats::{CompareSettings, Comparison, RunValue, Verdict, compare, compare_runs};

use super::BenchRun;
use crate::chart::{Mark, posterior_chart_svg};

mod rates;
mod values;

pub use rates::{FAILURE_ROPE, RateComparison};
pub use values::P99_MIN_COUNT;
use values::Scope;

/// The false-alarm rate per transaction type the comparison is calibrated to stay under with
/// runs as the unit (the calibration tests check it): used to say how many "credible"
/// verdicts chance alone gives. The other units cannot see the variance between runs, and
/// their rate is higher by however much runs differ.
pub const CHANCE_PER_TYPE: f64 = 0.05;

/// What one value of the comparison is.
///
/// ```
/// use slipstream_bench::compare::Unit;
/// assert_eq!("interval".parse::<Unit>().unwrap(), Unit::Interval);
/// assert_eq!(Unit::default().to_string(), "auto");
/// assert!("runs".parse::<Unit>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    /// [`Unit::Run`] with two or more runs on each side, [`Unit::Interval`] with one on each.
    #[default]
    Auto,
    /// One value per run (its mean latency, p99, throughput): between-run variance included.
    Run,
    /// Each run's per-second series, cut into batch means by its autocorrelation.
    Interval,
    /// Every transaction, as the article does: overconfident when latencies are autocorrelated.
    Transaction,
}

impl FromStr for Unit {
    type Err = String;

    fn from_str(s: &str) -> Result<Unit, String> {
        match s {
            "auto" => Ok(Unit::Auto),
            "run" => Ok(Unit::Run),
            "interval" => Ok(Unit::Interval),
            "transaction" => Ok(Unit::Transaction),
            _ => Err(format!(
                "unit `{s}`: use auto, run, interval or transaction"
            )),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Auto => "auto",
            Unit::Run => "run",
            Unit::Interval => "interval",
            Unit::Transaction => "transaction",
        })
    }
}

/// What a row compares.
///
/// ```
/// use slipstream_bench::compare::Metric;
/// assert_eq!(Metric::P99.to_string(), "p99 ms");
/// assert_eq!(Metric::Tps.to_string(), "TPS");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Mean latency (ms).
    Mean,
    /// 99th-percentile latency (ms), run unit only.
    P99,
    /// Successful transactions per second (compared as ms per transaction).
    Tps,
    /// Failed / all transactions.
    FailureRate,
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Metric::Mean => "mean ms",
            Metric::P99 => "p99 ms",
            Metric::Tps => "TPS",
            Metric::FailureRate => "failure rate",
        })
    }
}

/// One row's result.
///
/// ```
/// use slipstream_bench::compare::{Metric, Outcome, Row};
/// use slipstream_stats::{CompareSettings, compare_run_values};
/// let c = compare_run_values(&[10.0, 10.2, 9.9], &[12.1, 11.9, 12.0], &CompareSettings::default())?;
/// let row = Row { name: None, metric: Metric::Mean, outcome: Outcome::Compared(Box::new(c)) };
/// if let Outcome::Compared(c) = &row.outcome {
///     assert!(c.ratio.mean > 1.1); // B about 20% slower
/// }
/// # Ok::<(), slipstream_stats::CompareError>(())
/// ```
#[derive(Debug)]
pub enum Outcome {
    /// Latency or throughput compared (throughput as ms per transaction: larger is slower).
    Compared(Box<Comparison>),
    /// Failure rates compared.
    Rates(RateComparison),
    /// Not compared, and why.
    Skipped(String),
}

/// One comparison: a transaction type (or the whole mix) and a metric.
///
/// ```
/// use slipstream_bench::compare::{Metric, Outcome, Row};
/// let row = Row {
///     name: Some("new-order".into()),
///     metric: Metric::P99,
///     outcome: Outcome::Skipped("too few transactions for a p99".into()),
/// };
/// assert_eq!((row.scope(), row.verdict_text().as_str()), ("new-order", "not compared"));
/// ```
#[derive(Debug)]
pub struct Row {
    /// The transaction type, or `None` for the whole mix.
    pub name: Option<String>,
    /// What is compared.
    pub metric: Metric,
    /// The result.
    pub outcome: Outcome,
}

/// Whether a row says B is worse or better than A.
///
/// ```
/// use slipstream_bench::compare::{Direction, Metric, Outcome, Row};
/// use slipstream_stats::{CompareSettings, compare_run_values};
/// // Throughput halved: as ms per transaction, B is credibly slower, which is worse.
/// let c = compare_run_values(&[1.0, 1.02, 0.99], &[2.0, 2.03, 1.98], &CompareSettings::default())?;
/// let row = Row { name: None, metric: Metric::Tps, outcome: Outcome::Compared(Box::new(c)) };
/// assert_eq!(row.direction(), Some(Direction::Worse));
/// # Ok::<(), slipstream_stats::CompareError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Slower, lower throughput, or more failures.
    Worse,
    /// Faster, higher throughput, or fewer failures.
    Better,
}

impl Row {
    /// The row's label: the type's name, or `all types`.
    ///
    /// ```
    /// use slipstream_bench::compare::{Metric, Outcome, Row};
    /// let mix = Row { name: None, metric: Metric::Mean, outcome: Outcome::Skipped("no runs".into()) };
    /// assert_eq!(mix.scope(), "all types");
    /// ```
    pub fn scope(&self) -> &str {
        self.name.as_deref().unwrap_or("all types")
    }

    /// The verdict, if the row was compared.
    ///
    /// ```
    /// use slipstream_bench::compare::{Metric, Outcome, Row};
    /// use slipstream_stats::{CompareSettings, Verdict, compare_run_values};
    /// let c = compare_run_values(&[10.0, 10.2, 9.9], &[10.1, 10.0, 10.05], &CompareSettings::default())?;
    /// let row = Row { name: None, metric: Metric::Mean, outcome: Outcome::Compared(Box::new(c)) };
    /// assert!(row.verdict().is_some());
    /// let skipped = Row { outcome: Outcome::Skipped("no runs".into()), ..row };
    /// assert_eq!(skipped.verdict(), None::<&Verdict>);
    /// # Ok::<(), slipstream_stats::CompareError>(())
    /// ```
    pub fn verdict(&self) -> Option<&Verdict> {
        match &self.outcome {
            Outcome::Compared(c) => Some(&c.verdict),
            Outcome::Rates(r) => Some(&r.verdict),
            Outcome::Skipped(_) => None,
        }
    }

    /// Worse or better, for a credible difference.
    ///
    /// ```
    /// use slipstream_bench::compare::{Direction, Metric, Outcome, Row};
    /// use slipstream_stats::{CompareSettings, compare_run_values};
    /// let c = compare_run_values(&[10.0, 10.2, 9.9], &[8.0, 8.1, 7.9], &CompareSettings::default())?;
    /// let row = Row { name: None, metric: Metric::Mean, outcome: Outcome::Compared(Box::new(c)) };
    /// assert_eq!(row.direction(), Some(Direction::Better)); // B's latency credibly lower
    /// # Ok::<(), slipstream_stats::CompareError>(())
    /// ```
    pub fn direction(&self) -> Option<Direction> {
        match self.verdict()? {
            Verdict::CrediblySlower => Some(Direction::Worse),
            Verdict::CrediblyFaster => Some(Direction::Better),
            _ => None,
        }
    }

    /// The verdict in the metric's words.
    ///
    /// ```
    /// use slipstream_bench::compare::{Metric, Outcome, Row};
    /// use slipstream_stats::{CompareSettings, compare_run_values};
    /// // Milliseconds per transaction doubled: throughput credibly lower.
    /// let c = compare_run_values(&[1.0, 1.02, 0.99], &[2.0, 2.03, 1.98], &CompareSettings::default())?;
    /// let tps = Row { name: None, metric: Metric::Tps, outcome: Outcome::Compared(Box::new(c)) };
    /// assert_eq!(tps.verdict_text(), "credibly lower");
    /// # Ok::<(), slipstream_stats::CompareError>(())
    /// ```
    pub fn verdict_text(&self) -> String {
        let Some(v) = self.verdict() else {
            return "not compared".into();
        };
        match (self.metric, v) {
            (Metric::Tps, Verdict::CrediblySlower) => "credibly lower".into(),
            (Metric::Tps, Verdict::CrediblyFaster) => "credibly higher".into(),
            (Metric::FailureRate, Verdict::CrediblySlower) => "credibly more failures".into(),
            (Metric::FailureRate, Verdict::CrediblyFaster) => "credibly fewer failures".into(),
            (_, v) => v.to_string(),
        }
    }
}

/// Everything `compare` found.
///
/// ```
/// # fn main() -> anyhow::Result<()> {
/// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
/// # struct Nap;
/// # impl Transaction for Nap {
/// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
/// #         tokio::time::sleep(std::time::Duration::from_millis(1)).await;
/// #         Ok(())
/// #     }
/// # }
/// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
/// # let mut config = RunConfig::new(None);
/// # config.duration = std::time::Duration::from_millis(150);
/// # let rt = tokio::runtime::Runtime::new()?;
/// # let mut run = || rt.block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()));
/// # let (a, b) = ([run()?, run()?], [run()?, run()?]);
/// use slipstream_bench::compare::{Unit, compare_sides};
/// let report = compare_sides(&a, &b, None, Unit::Auto, &Default::default())?;
/// assert_eq!((report.unit, report.runs), (Unit::Run, (2, 2))); // two runs a side: runs
/// assert_eq!(report.rows.last().unwrap().scope(), "all types"); // the mix comes last
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Report {
    /// The unit used (never [`Unit::Auto`]).
    pub unit: Unit,
    /// Runs on side A and on side B.
    pub runs: (usize, usize),
    /// The ROPE's half-width on the ratio (0.05 = ±5%).
    pub rope: f64,
    /// Per-type rows, then the whole mix's.
    pub rows: Vec<Row>,
    /// Transaction types compared (for the chance note).
    pub types: usize,
    /// What the reader should know first.
    pub warnings: Vec<String>,
    /// Further remarks (what is not compared in this unit, the chance note).
    pub notes: Vec<String>,
}

impl Report {
    /// How many per-type verdicts chance alone would call "credible" if nothing changed, and
    /// the probability of at least one, at [`CHANCE_PER_TYPE`].
    ///
    /// ```
    /// use slipstream_bench::compare::{Report, Unit};
    /// let r = Report {
    ///     unit: Unit::Run, runs: (3, 3), rope: 0.05, rows: vec![], types: 9,
    ///     warnings: vec![], notes: vec![],
    /// };
    /// let (expected, at_least_one) = r.chance(); // Order Entry's nine types
    /// assert!((expected - 0.45).abs() < 1e-12);
    /// assert!((at_least_one - (1.0 - 0.95f64.powi(9))).abs() < 1e-12); // about 37%
    /// ```
    pub fn chance(&self) -> (f64, f64) {
        let k = self.types as f64;
        (k * CHANCE_PER_TYPE, 1.0 - (1.0 - CHANCE_PER_TYPE).powf(k))
    }

    /// Rows that are credibly different, per type (not the mix).
    ///
    /// ```
    /// use slipstream_bench::compare::{Metric, Outcome, Report, Row, Unit};
    /// use slipstream_stats::{CompareSettings, compare_run_values};
    /// let slower = compare_run_values(&[10.0, 10.2, 9.9], &[12.1, 11.9, 12.0], &CompareSettings::default())?;
    /// let row = |name: Option<&str>| Row {
    ///     name: name.map(String::from),
    ///     metric: Metric::Mean,
    ///     outcome: Outcome::Compared(Box::new(slower.clone())),
    /// };
    /// let r = Report {
    ///     unit: Unit::Run, runs: (3, 3), rope: 0.05, rows: vec![row(Some("browse")), row(None)],
    ///     types: 1, warnings: vec![], notes: vec![],
    /// };
    /// assert_eq!(r.credible_per_type(), 1); // the mix's row is not a type
    /// # Ok::<(), slipstream_stats::CompareError>(())
    /// ```
    pub fn credible_per_type(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.name.is_some() && r.direction().is_some())
            .count()
    }

    /// The report as JSON (schema `slipstream-lab/compare`, version 1), for CI.
    ///
    /// ```
    /// # fn main() -> anyhow::Result<()> {
    /// # use slipstream_bench::{RunConfig, Session, Transaction, TxError, Workload};
    /// # struct Nap;
    /// # impl Transaction for Nap {
    /// #     async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
    /// #         tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    /// #         Ok(())
    /// #     }
    /// # }
    /// # let workload = Workload::new("nap").transaction("nap", 1, || Nap).without_database();
    /// # let mut config = RunConfig::new(None);
    /// # config.duration = std::time::Duration::from_millis(150);
    /// # let rt = tokio::runtime::Runtime::new()?;
    /// # let mut run = || rt.block_on(slipstream_bench::run(&workload, &config, std::future::pending::<()>()));
    /// # let (a, b) = ([run()?, run()?], [run()?, run()?]);
    /// use slipstream_bench::compare::{Unit, compare_sides};
    /// let json = compare_sides(&a, &b, None, Unit::Auto, &Default::default())?.to_json();
    /// assert_eq!(json["schema"], "slipstream-lab/compare");
    /// assert_eq!(json["unit"], "run");
    /// assert_eq!(json["rows"][0]["transaction"], "nap");
    /// # Ok(()) }
    /// ```
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let est =
            |e: &slipstream_stats::Estimate| json!({"mean": e.mean, "hdi95": [e.hdi.0, e.hdi.1]});
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut v = json!({
                    "transaction": r.name,
                    "metric": match r.metric {
                        Metric::Mean => "mean_ms",
                        Metric::P99 => "p99_ms",
                        Metric::Tps => "ms_per_transaction",
                        Metric::FailureRate => "failure_rate",
                    },
                    "verdict": match r.verdict() {
                        None => "skipped",
                        Some(Verdict::CrediblySlower) => "worse",
                        Some(Verdict::CrediblyFaster) => "better",
                        Some(Verdict::PracticallyEquivalent) => "equivalent",
                        Some(Verdict::Undecided) => "undecided",
                        Some(Verdict::Unreliable(_)) => "unreliable",
                    },
                    "verdict_text": r.verdict_text(),
                });
                // Cannot fail: `v` is the `json!({...})` object literal just above.
                let o = v.as_object_mut().expect("an object");
                match &r.outcome {
                    Outcome::Compared(c) => {
                        o.insert("a".into(), est(&c.a));
                        o.insert("b".into(), est(&c.b));
                        o.insert("ratio".into(), est(&c.ratio));
                        o.insert("log_ratio".into(), est(&c.log_ratio));
                        o.insert("p_b_worse".into(), json!(c.p_b_slower));
                        o.insert("in_rope".into(), json!(c.in_rope));
                        o.insert("ppc_p".into(), json!(c.ppc));
                        o.insert("warnings".into(), json!(c.warnings));
                        if let Verdict::Unreliable(why) = &c.verdict {
                            o.insert("reason".into(), json!(why));
                        }
                    }
                    Outcome::Rates(x) => {
                        o.insert("a".into(), json!({"failed": x.a.0, "total": x.a.1}));
                        o.insert("b".into(), json!({"failed": x.b.0, "total": x.b.1}));
                        o.insert("diff".into(), est(&x.diff));
                        o.insert("p_b_worse".into(), json!(x.p_b_more));
                    }
                    Outcome::Skipped(why) => {
                        o.insert("reason".into(), json!(why));
                    }
                }
                v
            })
            .collect();
        let (expected, at_least_one) = self.chance();
        json!({
            "schema": "slipstream-lab/compare",
            "schema_version": 1,
            "unit": self.unit.to_string(),
            "runs": {"a": self.runs.0, "b": self.runs.1},
            "rope": self.rope,
            "types": self.types,
            // `per_type` is calibrated only with runs as the unit; in the others it is a floor.
            "chance": {
                "per_type": CHANCE_PER_TYPE,
                "calibrated": self.unit == Unit::Run,
                "expected_credible": expected,
                "p_at_least_one": at_least_one,
            },
            "credible_per_type": self.credible_per_type(),
            "warnings": self.warnings,
            "notes": self.notes,
            "rows": rows,
        })
    }
}

/// The unit `unit` resolves to for `na` and `nb` runs, or why it cannot be used.
///
/// ```
/// use slipstream_bench::compare::{Unit, resolve_unit};
/// assert_eq!(resolve_unit(Unit::Auto, 3, 3)?, Unit::Run);
/// assert_eq!(resolve_unit(Unit::Auto, 1, 1)?, Unit::Interval);
/// assert!(resolve_unit(Unit::Run, 1, 3).is_err()); // runs as the unit need two a side
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn resolve_unit(unit: Unit, na: usize, nb: usize) -> anyhow::Result<Unit> {
    let min = slipstream_stats::MIN_RUNS;
    match unit {
        Unit::Auto if na >= min && nb >= min => Ok(Unit::Run),
        Unit::Auto if na == 1 && nb == 1 => Ok(Unit::Interval),
        Unit::Auto | Unit::Run if na < min || nb < min => anyhow::bail!(
            "A has {na} run(s) and B has {nb}: runs as the unit need at least {min} on each side \
             (3 is better); add runs to the short side, or pass --unit interval to use each run's \
             per-second series (which cannot see the variance between runs)"
        ),
        Unit::Auto => Ok(Unit::Run),
        u => Ok(u),
    }
}

/// Compares side B's runs against side A's, every transaction type that ran on either side
/// (or just `only`), then the whole mix.
///
/// ```no_run
/// use slipstream_bench::{BenchRun, compare};
/// let read = |p: &str| BenchRun::read_json(p.as_ref());
/// let a = [read("a1.json")?, read("a2.json")?, read("a3.json")?];
/// let b = [read("b1.json")?, read("b2.json")?, read("b3.json")?];
/// let report = compare::compare_sides(&a, &b, None, compare::Unit::Auto, &Default::default())?;
/// for row in &report.rows {
///     println!("{} {}: {}", row.scope(), row.metric, row.verdict_text());
/// }
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn compare_sides(
    a: &[BenchRun],
    b: &[BenchRun],
    only: Option<&str>,
    unit: Unit,
    settings: &CompareSettings,
) -> anyhow::Result<Report> {
    anyhow::ensure!(
        !a.is_empty() && !b.is_empty(),
        "each side needs at least one result file"
    );
    let unit = resolve_unit(unit, a.len(), b.len())?;
    // The types with a transaction that ended (ok or failed), and those with a success: a type
    // that ran but never succeeded on a side (B's change breaks it) has no latency there, but
    // its failures are compared; it is not "only in" the other side.
    let ran = |runs: &[BenchRun], succeeded: bool| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for r in runs {
            let done = |t: &&crate::TxResult| t.ok > 0 || (!succeeded && t.failed > 0);
            for t in r.transactions.iter().filter(done) {
                if !names.contains(&t.name) {
                    names.push(t.name.clone());
                }
            }
        }
        names
    };
    let (in_a, in_b) = (ran(a, false), ran(b, false));
    let (ok_a, ok_b) = (ran(a, true), ran(b, true));
    let mut names = in_a.clone();
    names.extend(in_b.iter().filter(|n| !in_a.contains(n)).cloned());
    if let Some(only) = only {
        anyhow::ensure!(
            names.iter().any(|n| n == only),
            "no transaction `{only}` ran in any file; they have: {}",
            // One line, whatever the names hold: they come from the files.
            crate::table::printable(names.join(", "))
        );
        names.retain(|n| n == only);
    }
    let mut report = Report {
        unit,
        runs: (a.len(), b.len()),
        rope: settings.rope,
        rows: Vec::new(),
        types: 0,
        warnings: Vec::new(),
        notes: Vec::new(),
    };
    match unit {
        Unit::Interval if a.len() == 1 || b.len() == 1 => report.warnings.push(
            "one run on a side: the unit is that run's per-second series (batch means over its \
             autocorrelation), which cannot see the variance between runs (drift, checkpoints, \
             the host's neighbours); a verdict may be the machine's mood. Use 3 runs per side"
                .into(),
        ),
        Unit::Transaction => report.warnings.push(
            "the transaction unit treats correlated latencies as independent: its intervals are \
             too narrow and its verdicts overconfident"
                .into(),
        ),
        _ => {}
    }
    // Said here, not by the CLI's table alone: `--json` is what a pipeline reads.
    let workload = &a[0].workload;
    if let Some(other) = a.iter().chain(b).find(|r| &r.workload != workload) {
        report.warnings.push(format!(
            "A ran {workload} and B ran {}: only transaction types with the same name are compared",
            other.workload
        ));
    }
    for (runs, which) in [(a, "A"), (b, "B")] {
        for how in runs.iter().filter_map(BenchRun::interruption) {
            report.warnings.push(format!(
                "a run of {which} was interrupted {how}: its figures cover what ran"
            ));
        }
    }
    if unit != Unit::Run {
        report
            .notes
            .push("p99 is compared with runs as the unit only (2 or more runs per side)".into());
    }
    let mut seed = settings.sampler.seed;
    let mut next_settings = || {
        let mut s = *settings;
        s.sampler.seed = seed;
        seed = seed.wrapping_add(7919);
        s
    };
    let mut short = false;
    for name in &names {
        let never_succeeded = |side: &str| {
            Outcome::Skipped(format!(
                "every transaction of it failed in {side}: no latency to compare (see its failure rate)"
            ))
        };
        let outcome = if !in_a.contains(name) {
            Outcome::Skipped("only in B".into())
        } else if !in_b.contains(name) {
            Outcome::Skipped("only in A".into())
        } else if !ok_a.contains(name) {
            never_succeeded("A")
        } else if !ok_b.contains(name) {
            never_succeeded("B")
        } else {
            latency(a, b, Scope::Type(name), unit, &next_settings(), &mut short)
        };
        let ran_on_both = in_a.contains(name) && in_b.contains(name);
        let compared = !matches!(outcome, Outcome::Skipped(_));
        report.rows.push(Row {
            name: Some(name.clone()),
            metric: Metric::Mean,
            outcome,
        });
        if !ran_on_both {
            continue;
        }
        report.types += 1;
        if compared && unit == Unit::Run {
            let outcome = match (values::run_p99s(a, name), values::run_p99s(b, name)) {
                (Ok(pa), Ok(pb)) => by_runs(&pa, &pb, &next_settings()),
                (Err(why), _) | (_, Err(why)) => Outcome::Skipped(why),
            };
            report.rows.push(Row {
                name: Some(name.clone()),
                metric: Metric::P99,
                outcome,
            });
        }
        if let Some(r) = failures(a, b, Scope::Type(name), unit, settings) {
            report.rows.push(Row {
                name: Some(name.clone()),
                metric: Metric::FailureRate,
                outcome: r,
            });
        }
    }
    // The whole mix: the reader's first question, and one comparison, not nine.
    if only.is_none() && report.types > 0 {
        let outcome = latency(a, b, Scope::Mix, unit, &next_settings(), &mut short);
        report.rows.push(Row {
            name: None,
            metric: Metric::Mean,
            outcome,
        });
        let tps = match unit {
            Unit::Run => by_runs(
                &values::run_ms_per_tx(a),
                &values::run_ms_per_tx(b),
                &next_settings(),
            ),
            Unit::Interval => {
                match (values::throughput_batches(a), values::throughput_batches(b)) {
                    (Some(x), Some(y)) => {
                        short |= x.short || y.short;
                        // Compared as TPS, the series' unbiased mean; shown, like the run
                        // unit's, as milliseconds per transaction (larger is slower).
                        match by_values(&x.values, &y.values, &next_settings()) {
                            Outcome::Compared(c) => {
                                Outcome::Compared(Box::new(c.reciprocal(1000.0)))
                            }
                            o => o,
                        }
                    }
                    _ => Outcome::Skipped(
                        "a side's run has fewer than 3 groups of seconds to average its \
                         throughput over (each expects 10 successes and outlasts the run's \
                         longest stretch without one): run longer"
                            .into(),
                    ),
                }
            }
            _ => Outcome::Skipped("throughput has no per-transaction unit".into()),
        };
        report.rows.push(Row {
            name: None,
            metric: Metric::Tps,
            outcome: tps,
        });
        if let Some(r) = failures(a, b, Scope::Mix, unit, settings) {
            report.rows.push(Row {
                name: None,
                metric: Metric::FailureRate,
                outcome: r,
            });
        }
    }
    if short {
        report.warnings.push(
            "a run is too short for its own autocorrelation (fewer than 3 batches of one \
             autocorrelation time): the per-second verdicts may be overconfident; run longer"
                .into(),
        );
    }
    for r in &report.rows {
        if let Outcome::Compared(c) = &r.outcome {
            for w in &c.warnings {
                report
                    .warnings
                    .push(format!("{} {}: {w}", r.scope(), r.metric));
            }
        }
    }
    // A run with no success in its window (a Ctrl-C right after the warm-up) has no
    // throughput to compare: the run-level TPS row leaves it out, and says so here rather
    // than in silence.
    if unit == Unit::Run && only.is_none() {
        for (side, runs) in [("A", a), ("B", b)] {
            for (i, r) in runs.iter().enumerate().filter(|(_, r)| r.tps() <= 0.0) {
                report.notes.push(format!(
                    "{side}'s run {} (started {}) has no successful transaction that ended in its {:.1} s window (a success that ended in the drain is not in the TPS): the TPS row leaves it out",
                    i + 1,
                    r.started_at,
                    r.measured_s
                ));
            }
        }
    }
    if report.types > 1 {
        let (expected, at_least_one) = report.chance();
        // The 5% is the run unit's: the per-second and transaction units cannot see the
        // variance between runs, and identical runs 3% apart were called different in 16 of
        // 100 pairs with one run a side (tests/attack_compare.rs). There it is a floor.
        let rate = if unit == Unit::Run {
            format!(
                "at most {:.0}% per type, as calibrated with runs as the unit",
                CHANCE_PER_TYPE * 100.0
            )
        } else {
            format!(
                "{:.0}% per type with runs as the unit only: the {unit} unit cannot see how far \
                 runs differ from each other, and with runs 3% apart it was 16%; use 3 runs a \
                 side",
                CHANCE_PER_TYPE * 100.0
            )
        };
        report.notes.push(format!(
            "{} types compared: if nothing changed, chance alone would call about {expected:.1} of \
             them credibly different ({rate}), at least one in {:.0}% of comparisons; read the \
             all-types rows first",
            report.types,
            at_least_one * 100.0
        ));
    }
    Ok(report)
}

/// Mean latency in `scope`, in `unit`.
fn latency(
    a: &[BenchRun],
    b: &[BenchRun],
    scope: Scope<'_>,
    unit: Unit,
    settings: &CompareSettings,
    short: &mut bool,
) -> Outcome {
    match unit {
        Unit::Run => by_runs(
            &values::run_means(a, scope),
            &values::run_means(b, scope),
            settings,
        ),
        Unit::Transaction => match (
            values::transactions(a, scope),
            values::transactions(b, scope),
        ) {
            (Some(x), Some(y)) => by_values(&x, &y, settings),
            _ => Outcome::Skipped(values::OVERFLOW.into()),
        },
        _ => match (
            values::latency_batches(a, scope),
            values::latency_batches(b, scope),
        ) {
            (Some(x), Some(y)) => {
                *short |= x.short || y.short;
                match by_values(&x.values, &y.values, settings) {
                    Outcome::Skipped(why) => Outcome::Skipped(format!(
                        "{why}; the values are batch means of seconds with a success (run longer)"
                    )),
                    o => o,
                }
            }
            _ => Outcome::Skipped(format!(
                "fewer than {} seconds with a success on a side (run longer)",
                slipstream_stats::MIN_BATCHES
            )),
        },
    }
}

fn by_runs(a: &[RunValue], b: &[RunValue], settings: &CompareSettings) -> Outcome {
    match compare_runs(a, b, settings) {
        Ok(c) => Outcome::Compared(Box::new(c)),
        Err(e) => Outcome::Skipped(e.to_string()),
    }
}

fn by_values(
    a: &slipstream_stats::Suff,
    b: &slipstream_stats::Suff,
    settings: &CompareSettings,
) -> Outcome {
    match compare(a, b, settings) {
        Ok(c) => Outcome::Compared(Box::new(c)),
        Err(e) => Outcome::Skipped(e.to_string()),
    }
}

/// The failure-rate row, when either side had a failure: runs as the unit with
/// [`Unit::Run`], else each side's counts pooled.
fn failures(
    a: &[BenchRun],
    b: &[BenchRun],
    scope: Scope<'_>,
    unit: Unit,
    settings: &CompareSettings,
) -> Option<Outcome> {
    let (Some((oa, fa)), Some((ob, fb))) = (values::counts(a, scope), values::counts(b, scope))
    else {
        return Some(Outcome::Skipped(values::OVERFLOW.into()));
    };
    (fa > 0 || fb > 0).then(|| {
        let draws = (settings.sampler.chains * settings.sampler.draws as usize).max(100);
        // Saturating: counts come from result files, which may be hand-edited.
        let pooled = ((fa, oa.saturating_add(fa)), (fb, ob.saturating_add(fb)));
        let seed = settings.sampler.seed;
        if unit != Unit::Run {
            return Outcome::Rates(rates::compare_rates(pooled.0, pooled.1, draws, seed));
        }
        match (values::run_counts(a, scope), values::run_counts(b, scope)) {
            (Some(x), Some(y)) => match rates::compare_run_rates(pooled, &x, &y, draws, seed) {
                Ok(r) => Outcome::Rates(r),
                Err(why) => Outcome::Skipped(why),
            },
            _ => Outcome::Skipped(values::OVERFLOW.into()),
        }
    })
}

/// Writes, for a compared row, `STEM-means.svg` (the posterior of both means) and
/// `STEM-ratio.svg` (B / A with its HDI and the ROPE) into `dir`, where STEM is
/// [`file_stem`](crate::file_stem)`(name)`: nothing is written outside `dir`.
///
/// ```
/// use slipstream_stats::{CompareSettings, compare_run_values};
/// let c = compare_run_values(&[10.0, 10.2, 9.9], &[12.1, 11.9, 12.0], &CompareSettings::default())?;
/// let dir = tempfile::tempdir()?;
/// slipstream_bench::compare::plot(dir.path(), "new-order", &c)?;
/// assert!(dir.path().join("new-order-means.svg").exists());
/// assert!(dir.path().join("new-order-ratio.svg").exists());
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn plot(dir: &Path, name: &str, c: &Comparison) -> anyhow::Result<()> {
    plot_as(dir, name, c, "mean (ms)", &c.verdict.to_string())
}

/// [`plot`] of a quantity other than a mean latency: `quantity` labels the means' axis (and
/// names the ratio's), `verdict` is the title's verdict in the row's words. A TPS row,
/// compared as milliseconds per transaction, is drawn in TPS by giving
/// `c.reciprocal(1000.0)`, `"TPS"` and the row's [`Row::verdict_text`].
///
/// ```
/// use slipstream_stats::{CompareSettings, compare_run_values};
/// // Milliseconds per transaction of A's and B's runs; B's are higher: lower TPS.
/// let ms = compare_run_values(&[1.0, 1.02, 0.99], &[2.0, 2.03, 1.98], &CompareSettings::default())?;
/// let dir = tempfile::tempdir()?;
/// let tps = ms.clone().reciprocal(1000.0);
/// slipstream_bench::compare::plot_as(dir.path(), "all-TPS", &tps, "TPS", "credibly lower")?;
/// let svg = std::fs::read_to_string(dir.path().join("all-TPS-ratio.svg"))?;
/// assert!(svg.contains("credibly lower") && svg.contains("ratio of TPS"));
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn plot_as(
    dir: &Path,
    name: &str,
    c: &Comparison,
    quantity: &str,
    verdict: &str,
) -> anyhow::Result<()> {
    let name = crate::file_stem(name);
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("could not create {}: {e}", dir.display()))?;
    let means = posterior_chart_svg(
        &format!("{name}: posterior of the mean"),
        quantity,
        &[("A", &c.draws[0]), ("B", &c.draws[1])],
        &[],
    )?;
    let ratio: Vec<f64> = c.draws[1]
        .iter()
        .zip(&c.draws[0])
        .map(|(b, a)| b / a)
        .collect();
    // "mean (ms)" is a ratio of means; any other quantity a ratio of itself.
    let ratio_of = match quantity {
        "mean (ms)" => "ratio of means".to_string(),
        q => format!("ratio of {q}"),
    };
    let figure = posterior_chart_svg(
        &format!("{name}: B / A ({verdict})"),
        &ratio_of,
        &[("B / A", &ratio)],
        &[
            Mark::new("95% HDI", c.ratio.hdi.0),
            Mark::new("", c.ratio.hdi.1),
            Mark::new("ROPE", c.rope.0.exp()),
            Mark::new("", c.rope.1.exp()),
        ],
    )?;
    for (suffix, svg) in [("means", means), ("ratio", figure)] {
        let path = dir.join(format!("{name}-{suffix}.svg"));
        std::fs::write(&path, svg)
            .map_err(|e| anyhow::anyhow!("could not write {}: {e}", path.display()))?;
    }
    Ok(())
}
