//! The HTML report: a summary at the top (throughput, p50/p99 per type, errors, context), then
//! charts over time (throughput, throughput per type, latency per type, errors, open-loop lag)
//! and latency-percentile curves. Charts are inline SVG, so the page is one file.

use std::fmt::Write as _;
use std::path::Path;

use super::series::{active_types, errors_per_type, p50_p99, tps_per_type, tps_series};
use super::{Labeled, all_percentiles, all_stats, at_most, context, describe_run, ms, table};
use crate::table::{esc, push_table};
use crate::{Series, Table, line_chart_svg, percentile_chart_svg, write_atomically};

const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}\
    table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px}\
    td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}\
    .note{color:#8a5a00;margin:.3em 0}.headline td{font-size:1.1em}\
    details{margin:.5em 0}summary{cursor:pointer;font-weight:bold}\
    .context li{margin:.2em 0}";

/// Writes an HTML page for `runs` (several side by side): summary, context, charts.
///
/// ```no_run
/// use slipstream_bench::{BenchRun, report};
/// let run = BenchRun::read_json("a.json".as_ref())?;
/// report::write_html(&[report::Labeled { label: "a".into(), run }], "a.html".as_ref())?;
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn write_html(runs: &[Labeled], path: &Path) -> anyhow::Result<()> {
    write_atomically(path, render(runs)?.as_bytes())
}

pub(super) fn render(runs: &[Labeled]) -> anyhow::Result<String> {
    anyhow::ensure!(!runs.is_empty(), "no runs to report");
    let mut html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>slipstream bench report</title>\
         <style>{STYLE}</style></head><body>\n<h1>slipstream bench report</h1>\n"
    );
    html.push_str("<h2>Summary</h2>\n");
    push_table(&mut html, &headline(runs));
    push_table(&mut html, &table(runs));
    let differ = super::differences(runs);
    if !differ.is_empty() {
        html.push_str("<p class=\"note\">These runs differ in what they ran on:</p><ul>\n");
        for line in differ {
            let _ = writeln!(html, "<li class=\"note\">differs: {}</li>", esc(&line));
        }
        html.push_str("</ul>\n");
    }
    for l in runs {
        let _ = writeln!(html, "<h3>{}</h3>", esc(&l.label));
        for line in describe_run(&l.run) {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", esc(&line));
        }
        if let Some(c) = &l.run.context {
            context::html(&mut html, c);
        }
    }
    for l in runs {
        if let Some(t) = crate::stage_table(&l.run) {
            let _ = writeln!(html, "<h3>{} by stage</h3>", esc(&l.label));
            push_table(&mut html, &t);
        }
    }

    html.push_str("<h2>Over time</h2>\n");
    chart(
        &mut html,
        "Throughput over time, all types",
        &tps_series(runs),
    )?;
    for l in runs {
        chart(
            &mut html,
            &format!("{}: throughput per type", l.label),
            &tps_per_type(&l.run),
        )?;
    }
    let mut names: Vec<&str> = Vec::new();
    for l in runs {
        for n in active_types(&l.run) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    for name in &names {
        let series: Vec<Series> = runs
            .iter()
            .filter_map(|l| {
                let v = l.run.intervals.per_transaction.get(*name)?;
                let label = if runs.len() > 1 { l.label.as_str() } else { "" };
                Some(p50_p99(label, v, &l.run))
            })
            .flatten()
            .collect();
        chart(
            &mut html,
            &format!("{name}: latency p50 / p99 per second"),
            &series,
        )?;
    }
    for l in runs {
        let errors = errors_per_type(&l.run);
        if errors.is_empty() {
            let _ = writeln!(html, "<p>{}: no errors.</p>", esc(&l.label));
        } else {
            chart(
                &mut html,
                &format!("{}: errors over time", l.label),
                &errors,
            )?;
        }
    }
    let lag: Vec<Series> = runs
        .iter()
        .filter(|l| !l.run.intervals.schedule_lag.is_empty())
        .flat_map(|l| {
            p50_p99(
                &format!("{} lag", l.label),
                &l.run.intervals.schedule_lag,
                &l.run,
            )
        })
        .collect();
    chart(
        &mut html,
        "Open loop: schedule lag (start minus intended start)",
        &lag,
    )?;

    html.push_str("<h2>Latency by percentile</h2>\n");
    for name in &names {
        let series: Vec<Series> = runs
            .iter()
            .filter_map(|l| {
                let t = l.run.transactions.iter().find(|t| t.name == *name)?;
                (!t.percentile_curve.is_empty()).then(|| Series {
                    name: l.label.clone(),
                    x_label: "percentile".into(),
                    y_label: "latency (ms)".into(),
                    points: t.percentile_curve.clone(),
                })
            })
            .collect();
        if !series.is_empty() {
            html.push_str(&percentile_chart_svg(
                &format!("{name}: latency by percentile"),
                &series,
            )?);
        }
    }
    html.push_str("</body></html>\n");
    Ok(html)
}

/// One row per run: what a reader looks at first.
fn headline(runs: &[Labeled]) -> Table {
    let mut t = Table::new(&[
        "run",
        "TPS",
        "transactions",
        "errors",
        "p50 ms",
        "p99 ms",
        "users",
        "measured s",
    ]);
    for l in runs {
        let r = &l.run;
        let ok: u64 = r.transactions.iter().map(|t| t.ok).sum();
        let failed: u64 = r.transactions.iter().map(|t| t.failed).sum();
        // No success, no latency: `-`, not the 0 an empty histogram reads as. Held at the
        // exact slowest success, as the table's "all" row below holds them.
        let p = all_percentiles(r).filter(|_| ok > 0);
        let max = all_stats(r).max;
        let lat = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| ms(at_most(v, max)));
        t.row(vec![
            l.label.clone(),
            format!("{:.1}", r.tps()),
            ok.to_string(),
            failed.to_string(),
            lat(p.map(|p| p.p50)),
            lat(p.map(|p| p.p99)),
            r.users.to_string(),
            format!("{:.1}", r.measured_s),
        ]);
    }
    t
}

/// A line chart of the series that have points; nothing when none has.
fn chart(html: &mut String, title: &str, series: &[Series]) -> anyhow::Result<()> {
    let drawn: Vec<Series> = series
        .iter()
        .filter(|s| !s.points.is_empty())
        .cloned()
        .collect();
    if !drawn.is_empty() {
        html.push_str(&line_chart_svg(title, &drawn)?);
        html.push('\n');
    }
    Ok(())
}
