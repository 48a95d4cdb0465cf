//! Reports on bench results: a table per run or side by side (charbench's fields and more),
//! and an HTML page ([`write_html`]) with a summary, the run's context, and charts over time.

use crate::Table;
use crate::histogram;
use crate::recorder::percentiles;
use crate::run_result::{BenchRun, LatencyStats, Load, Percentiles};

mod context;
mod differ;
mod html;
mod series;

pub use differ::differences;
pub use html::write_html;
pub use series::tps_series;

/// One run and the label it is shown under (usually its file name).
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
/// use slipstream_bench::report::{self, Labeled};
/// let runs = [Labeled { label: "baseline".into(), run }];
/// assert!(report::table(&runs).rows.iter().any(|r| r[0] == "nap"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Labeled {
    /// How the run is named in tables and legends.
    pub label: String,
    /// The run.
    pub run: BenchRun,
}

/// Per transaction type (those that ran or have a weight), one row per run: count (the
/// window's successes, those that ended in the drain included), TPS (only those that ended
/// inside the window, [`BenchRun::tps`]), failures and latency in ms. With several runs they sit side by side, type by type.
///
/// ```no_run
/// use slipstream_bench::{BenchRun, report};
/// let run = BenchRun::read_json("a.json".as_ref())?;
/// let table = report::table(&[report::Labeled { label: "a".into(), run }]);
/// println!("{}", table.render());
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn table(runs: &[Labeled]) -> Table {
    let several = runs.len() > 1;
    let mut columns = vec!["transaction"];
    if several {
        columns.push("run");
    }
    columns.extend([
        "count", "tps", "failed", "mean ms", "p50", "p90", "p99", "max",
    ]);
    let mut t = Table::new(&columns);
    let mut names: Vec<&str> = Vec::new();
    for l in runs {
        for tx in &l.run.transactions {
            if (tx.weight > 0 || tx.ok + tx.failed > 0) && !names.contains(&tx.name.as_str()) {
                names.push(&tx.name);
            }
        }
    }
    // The totals row is `None`: a type may itself be named `all`.
    for name in names.iter().copied().map(Some).chain([None]) {
        for l in runs {
            let r = &l.run;
            let mut row = vec![name.unwrap_or("all").to_string()];
            if several {
                row.push(l.label.clone());
            }
            let tx = name.map(|n| r.transactions.iter().find(|t| t.name == n));
            if tx.is_none() {
                let ok: u64 = r.transactions.iter().map(|t| t.ok).sum();
                let failed: u64 = r.transactions.iter().map(|t| t.failed).sum();
                row.extend([
                    ok.to_string(),
                    format!("{:.1}", r.tps()),
                    failed.to_string(),
                ]);
                if ok == 0 {
                    // No success in any type, no latency: `-` as in the type rows, not the
                    // 0 an empty histogram reads as, which would pass for "fast".
                    row.extend(std::iter::repeat_n("-".to_string(), 5));
                } else {
                    let max = all_stats(r).max;
                    let blank = |v: Option<f64>| v.map(|v| ms(at_most(v, max))).unwrap_or_default();
                    let p = all_percentiles(r);
                    row.extend([
                        ms(all_stats(r).mean()),
                        blank(p.map(|p| p.p50)),
                        blank(p.map(|p| p.p90)),
                        blank(p.map(|p| p.p99)),
                        ms(max),
                    ]);
                }
            } else if let Some(Some(tx)) = tx {
                let p = &tx.latency_ms;
                // No success, no latency: a blank, not a 0 that reads as "fast".
                let lat = |v: f64| if tx.ok > 0 { ms(v) } else { "-".into() };
                // The exact slowest success, as the "all" row's: the histogram's is the top
                // of its bucket, up to 0.1% above (a file without the statistics has only it).
                let max = if tx.latency_stats.sufficient.n > 0 {
                    tx.latency_stats.max
                } else {
                    p.max
                };
                row.extend([
                    tx.ok.to_string(),
                    format!("{:.1}", r.tps_of(&tx.name)),
                    tx.failed.to_string(),
                    lat(p.mean),
                    lat(at_most(p.p50, max)),
                    lat(at_most(p.p90, max)),
                    lat(at_most(p.p99, max)),
                    lat(max),
                ]);
            } else {
                row.extend(std::iter::repeat_n("-".to_string(), 8));
            }
            t.row(row);
        }
    }
    t
}

/// Every type's latency statistics together.
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
/// let all = slipstream_bench::report::all_stats(&run);
/// let ok: u64 = run.transactions.iter().map(|t| t.ok).sum();
/// assert_eq!(all.sufficient.n, ok);
/// assert!(all.min >= 2.0); // every transaction slept 2 ms
/// # Ok(()) }
/// ```
pub fn all_stats(r: &BenchRun) -> LatencyStats {
    let mut sums = LatencyStats::default();
    for t in &r.transactions {
        sums.merge(&t.latency_stats);
    }
    sums
}

/// Percentiles of every successful transaction of the run, from the sum of the types'
/// histograms; `None` when a type that succeeded has no histogram (a version 1 file).
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
/// let p = slipstream_bench::report::all_percentiles(&run).expect("the run has histograms");
/// assert!(p.p50 >= 2.0 && p.p50 <= p.p99);
/// # Ok(()) }
/// ```
pub fn all_percentiles(r: &BenchRun) -> Option<Percentiles> {
    let mut all = histogram::new();
    for t in &r.transactions {
        if t.ok > 0 && t.histogram.is_empty() {
            return None;
        }
        let h = histogram::decode(&t.histogram, &t.name).ok()?;
        histogram::add(&mut all, &h).ok()?;
    }
    Some(percentiles(&all, all_stats(r).mean()))
}

/// A percentile read from an HDR histogram (the top of its bucket, up to 0.1% above the
/// values in it) held at the exact slowest success printed beside it: no percentile of a set
/// of latencies is above its max. A row without exact statistics has the histogram's max,
/// which is never below its percentiles.
fn at_most(percentile: f64, max: f64) -> f64 {
    if max > 0.0 {
        percentile.min(max)
    } else {
        percentile
    }
}

pub(crate) fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Lines describing how a run was made, what a reader must know about it, and its context.
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
/// let lines = slipstream_bench::report::describe(&run);
/// assert!(lines[0].starts_with("nap: 2 users, closed loop"), "{}", lines[0]);
/// # Ok(()) }
/// ```
pub fn describe(r: &BenchRun) -> Vec<String> {
    let mut lines = describe_run(r);
    if let Some(c) = &r.context {
        lines.extend(context::lines(c));
    }
    // One line each, whatever a name from the file holds (a newline would forge a line).
    lines.into_iter().map(crate::table::printable).collect()
}

/// Seconds as a reader wants them: whole ones bare (`30`), others to a tenth (`0.5`, `2.5`),
/// so a window under a second does not read as none.
fn seconds(s: f64) -> String {
    if (s - s.round()).abs() < 0.05 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// `1 user`, `8 users`.
pub(crate) fn users(n: usize) -> String {
    if n == 1 {
        "1 user".into()
    } else {
        format!("{n} users")
    }
}

/// [`describe`] without the context (the HTML page shows that apart).
pub(crate) fn describe_run(r: &BenchRun) -> Vec<String> {
    let load = match r.load {
        Load::Closed => format!("closed loop, think {}", r.think),
        Load::Open { rate } => format!("open loop at {rate}/s"),
    };
    let mut lines = vec![format!(
        "{}: {}, {load}, {} s measured after {} s warm-up, started {} (PostgreSQL {})",
        r.workload,
        users(r.users),
        seconds(r.measured_s),
        seconds(r.warmup_s),
        r.started_at,
        r.environment.server_version.as_deref().unwrap_or("?")
    )];
    let e = &r.environment;
    let mut machine = format!("machine: {}, {} CPUs", e.os, e.cpus);
    if let Some(model) = &e.cpu_model {
        machine.push_str(&format!(" ({model})"));
    }
    machine.push_str(&format!(", slipstream {}", e.slipstream_version));
    if !e.database.is_empty() {
        machine.push_str(&format!("; database {}", e.database));
    }
    lines.push(machine);
    if let Some(how) = r.interruption() {
        lines.push(format!("interrupted {how}: the figures cover what ran"));
    }
    if r.unfinished > 0 {
        let by: Vec<String> = r
            .transactions
            .iter()
            .filter(|t| t.censored > 0)
            .map(|t| format!("{} {}", t.name, t.censored))
            .collect();
        // What the file can tell: a stop may have cut the drain short, and an open loop's
        // censored count includes arrivals that never started (counted apart in newer files),
        // queued or turned away by a full queue (told apart only by the run's warning).
        // Shown as given: `--grace 400ms` is not a "0 s" grace period.
        let grace = format!(
            "{:?}",
            std::time::Duration::from_millis((r.grace_s * 1e3).round() as u64)
        );
        let ended = if r.interrupted {
            format!("when the run was stopped, or after the {grace} grace period")
        } else {
            format!("after the {grace} grace period")
        };
        let queued = r.schedule.as_ref().and_then(|s| s.never_started);
        let why = match (r.load, queued) {
            (Load::Open { .. }, None) => format!(
                "in flight, or queued and never started, when the run ended (a stop, or the {grace} grace period)"
            ),
            (Load::Open { .. }, Some(q)) if q >= r.unfinished => {
                "queued and never started when the users stopped, or turned away by a full queue"
                    .to_string()
            }
            (Load::Open { .. }, Some(q)) if q > 0 => format!(
                "{} still running {ended}, {q} queued and never started or turned away by a full queue",
                r.unfinished - q
            ),
            _ => format!("still running {ended}"),
        };
        lines.push(format!(
            "{} transactions censored: {why} ({}); counted apart, in no latency figure",
            r.unfinished,
            by.join(", ")
        ));
    }
    let after: u64 = r
        .intervals
        .after_window
        .values()
        .map(|i| i.sufficient.n + i.failed)
        .sum();
    if after > 0 {
        lines.push(format!(
            "{after} transactions of the window ended after it, in the drain: in the counts and latencies, not in the TPS (successes that ended inside the window) nor the per-second series"
        ));
    }
    if !r.merged_from.is_empty() {
        let parts: Vec<String> = r
            .merged_from
            .iter()
            .map(|p| format!("{} ({}, seed {})", p.label, users(p.users), p.seed))
            .collect();
        lines.push(format!(
            "merged from {} load generators: {}",
            parts.len(),
            parts.join(", ")
        ));
    }
    if let Some(s) = &r.schedule {
        lines.push(format!(
            "schedule: {} arrivals, {} started more than {} ms late; lag p50 {} ms, p99 {} ms, max {} ms",
            s.arrivals,
            s.late,
            s.late_after_ms,
            ms(s.lag_ms.p50),
            ms(s.lag_ms.p99),
            ms(s.lag_ms.max)
        ));
    }
    for t in &r.transactions {
        if !t.failures.is_empty() {
            let by: Vec<String> = t
                .failures
                .iter()
                .map(|(c, n)| match t.failure_messages.get(c) {
                    Some(m) => format!("{c} x{n} (first: {m})"),
                    None => format!("{c} x{n}"),
                })
                .collect();
            lines.push(format!("{} failures: {}", t.name, by.join(", ")));
        }
    }
    lines
}
