//! Reports on bench results: a table per run or side by side (charbench's fields and more),
//! and an HTML page with throughput-over-time and latency-percentile charts.

use std::fmt::Write as _;
use std::path::Path;

use crate::run_result::{BenchRun, Load};
use crate::table::{esc, push_table};
use crate::{Series, Table, line_chart_svg, percentile_chart_svg, write_atomically};

/// One run and the label it is shown under (usually its file name).
#[derive(Debug, Clone)]
pub struct Labeled {
    /// How the run is named in tables and legends.
    pub label: String,
    /// The run.
    pub run: BenchRun,
}

/// Per transaction type (those that ran or have a weight), one row per run: count, TPS,
/// failures and latency in ms. With several runs they sit side by side, type by type.
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
    for name in names.iter().copied().chain(std::iter::once("all")) {
        for l in runs {
            let r = &l.run;
            let secs = r.measured_s.max(f64::MIN_POSITIVE);
            let mut row = vec![name.to_string()];
            if several {
                row.push(l.label.clone());
            }
            if name == "all" {
                let ok: u64 = r.transactions.iter().map(|t| t.ok).sum();
                let failed: u64 = r.transactions.iter().map(|t| t.failed).sum();
                let mut sums = super::Sums::default();
                for t in &r.transactions {
                    sums.merge(&t.stats);
                }
                row.extend([
                    ok.to_string(),
                    format!("{:.1}", ok as f64 / secs),
                    failed.to_string(),
                    ms(sums.mean()),
                    "".into(),
                    "".into(),
                    "".into(),
                    ms(sums.max),
                ]);
            } else if let Some(tx) = r.transactions.iter().find(|t| t.name == name) {
                let p = &tx.latency_ms;
                row.extend([
                    tx.ok.to_string(),
                    format!("{:.1}", tx.ok as f64 / secs),
                    tx.failed.to_string(),
                    ms(p.mean),
                    ms(p.p50),
                    ms(p.p90),
                    ms(p.p99),
                    ms(p.max),
                ]);
            } else {
                row.extend(std::iter::repeat_n("-".to_string(), 8));
            }
            t.row(row);
        }
    }
    t
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// One line describing how a run was made, and what a reader must know about it.
pub fn describe(r: &BenchRun) -> Vec<String> {
    let load = match r.load {
        Load::Closed => format!("closed loop, think {}", r.think),
        Load::Open { rate } => format!("open loop at {rate}/s"),
    };
    let mut lines = vec![format!(
        "{}: {} users, {load}, {:.0} s measured after {:.0} s warm-up, started {} (PostgreSQL {})",
        r.workload,
        r.users,
        r.measured_s,
        r.warmup_s,
        r.started_at,
        r.environment.server_version.as_deref().unwrap_or("?")
    )];
    if r.interrupted {
        lines.push(format!(
            "interrupted after {:.1} s of the {:.0} s asked for: the figures cover what ran",
            r.measured_s, r.duration_s
        ));
    }
    if r.unfinished > 0 {
        lines.push(format!(
            "{} transactions had not finished when the run stopped waiting: they are in no figure",
            r.unfinished
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
                .map(|(c, n)| format!("{c} x{n}"))
                .collect();
            lines.push(format!("{} failures: {}", t.name, by.join(", ")));
        }
    }
    lines
}

/// Successful transactions per second over time, all types together: one series per run.
pub fn tps_series(runs: &[Labeled]) -> Vec<Series> {
    runs.iter()
        .map(|l| {
            let iv = &l.run.intervals;
            let len = iv.per_transaction.values().map(Vec::len).max().unwrap_or(0);
            let points = (0..len)
                .map(|i| {
                    let n: u64 = iv
                        .per_transaction
                        .values()
                        .filter_map(|v| v.get(i))
                        .map(|x| x.values.n)
                        .sum();
                    (
                        (i as f64 + 1.0) * iv.seconds,
                        n as f64 / iv.seconds.max(1e-9),
                    )
                })
                .collect();
            Series {
                name: l.label.clone(),
                x_label: "seconds".into(),
                y_label: "transactions/s".into(),
                points,
            }
        })
        .collect()
}

/// Writes an HTML page: per run its description, the table, TPS over time, and one
/// latency-percentile chart per transaction type with every run on it.
pub fn write_html(runs: &[Labeled], path: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(!runs.is_empty(), "no runs to report");
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>slipstream bench report</title><style>\
         body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}\
         table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px}\
         td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}\
         .note{color:#8a5a00}</style></head><body>\n<h1>slipstream bench report</h1>\n",
    );
    for l in runs {
        let _ = writeln!(html, "<h3>{}</h3>", esc(&l.label));
        for line in describe(&l.run) {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", esc(&line));
        }
    }
    push_table(&mut html, &table(runs));
    for l in runs {
        if let Some(t) = crate::stage_table(&l.run) {
            let _ = writeln!(html, "<h3>{} by stage</h3>", esc(&l.label));
            push_table(&mut html, &t);
        }
    }
    html.push_str(&line_chart_svg("Throughput over time", &tps_series(runs))?);
    let mut names: Vec<String> = Vec::new();
    for l in runs {
        for t in &l.run.transactions {
            if !t.percentile_curve.is_empty() && !names.contains(&t.name) {
                names.push(t.name.clone());
            }
        }
    }
    for name in names {
        let series: Vec<Series> = runs
            .iter()
            .filter_map(|l| {
                let t = l.run.transactions.iter().find(|t| t.name == name)?;
                (!t.percentile_curve.is_empty()).then(|| Series {
                    name: l.label.clone(),
                    x_label: "percentile".into(),
                    y_label: "latency (ms)".into(),
                    points: t.percentile_curve.clone(),
                })
            })
            .collect();
        html.push_str(&percentile_chart_svg(
            &format!("{name}: latency by percentile"),
            &series,
        )?);
    }
    html.push_str("</body></html>\n");
    write_atomically(path, html.as_bytes())
}
