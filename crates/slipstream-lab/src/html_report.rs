//! The HTML report: every experiment's table and chart on one page.

use std::fmt::Write;
use std::path::Path;

use slipstream_bench::table::{esc, push_table};
use slipstream_bench::write_atomically;

use crate::ExperimentResult;

/// Writes `index.html` into `dir`, embedding each result's SVG chart (`<name>.svg` in `dir`)
/// so the page stands alone.
/// ```
/// let dir = tempfile::tempdir()?;
/// let mut r = slipstream_lab::ExperimentResult::new("demo", "A demo", true);
/// r.table = slipstream_lab::Table::new(&["client", "ops/s"]);
/// r.table.row(vec!["ours".into(), "1200".into()]);
/// slipstream_lab::write_report(dir.path(), &[r])?;
/// let html = std::fs::read_to_string(dir.path().join("index.html"))?;
/// assert!(html.contains("demo: A demo") && html.contains("1200"));
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn write_report(dir: &Path, results: &[ExperimentResult]) -> anyhow::Result<()> {
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>slipstream lab report</title><style>\
         body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}\
         table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px}\
         td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}\
         .note{color:#8a5a00}.env{color:#666;font-size:90%}</style></head><body>\n<h1>slipstream lab report</h1>\n",
    );
    if let Some(first) = results.first() {
        let e = &first.environment;
        let _ = writeln!(
            html,
            "<p class=\"env\">{} · {} CPUs{} · PostgreSQL {} · slipstream {} · {}</p>",
            esc(&e.os),
            e.cpus,
            e.cpu_model
                .as_deref()
                .map(|m| format!(" ({})", esc(m)))
                .unwrap_or_default(),
            esc(e.server_version.as_deref().unwrap_or("?")),
            esc(&e.slipstream_version),
            esc(&first.started_at)
        );
    }
    for r in results {
        let _ = writeln!(
            html,
            "<h2 id=\"{0}\">{0}: {1}</h2>",
            esc(&r.experiment),
            esc(&r.title)
        );
        push_table(&mut html, &r.table);
        for note in &r.notes {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", esc(note));
        }
        if let Ok(svg) = std::fs::read_to_string(dir.join(format!("{}.svg", r.experiment))) {
            html.push_str(&svg);
        }
        let _ = writeln!(
            html,
            "<p><a href=\"{0}.json\">{0}.json</a> ({1:.1} s)</p>",
            esc(&r.experiment),
            r.duration_s
        );
    }
    html.push_str("</body></html>\n");
    write_atomically(&dir.join("index.html"), html.as_bytes())
}
