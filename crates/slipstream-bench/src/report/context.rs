//! The run's context in a report: a few lines for the terminal, tables for the HTML page.

use std::fmt::Write as _;

use crate::Table;
use crate::context::RunContext;
use crate::table::{esc, push_table};

/// `pg_stat_database` counters worth reading next to a run's figures, as (column, meaning).
const DATABASE_COUNTERS: &[(&str, &str)] = &[
    ("xact_commit", "commits"),
    ("xact_rollback", "rollbacks"),
    ("blks_read", "blocks read"),
    ("blks_hit", "blocks hit"),
    ("tup_inserted", "rows inserted"),
    ("tup_updated", "rows updated"),
    ("tup_deleted", "rows deleted"),
    ("deadlocks", "deadlocks"),
    ("conflicts", "conflicts"),
    ("temp_bytes", "temp bytes"),
];
/// Wait states listed in a report.
const WAITS_SHOWN: usize = 10;

fn count(v: f64) -> String {
    format!("{v:.0}")
}

/// A setting the run's own connection set (`client`, `session`), or one the server derives
/// itself (`override`: paths and computed values): noise beside the server's configuration.
pub(super) fn own_session(s: &crate::context::Setting) -> bool {
    matches!(s.source.as_str(), "client" | "session" | "override")
}

/// Terminal lines: version, scale, command, settings, the database's activity and the top
/// waits, and what could not be read.
pub(super) fn lines(c: &RunContext) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = &c.server_version {
        out.push(format!("server: {v}"));
    }
    if let Some(s) = c.scale {
        out.push(format!("scale: {s}"));
    }
    if !c.command_line.is_empty() {
        out.push(format!("command: {}", c.command_line.join(" ")));
    }
    if let Some(h) = &c.workload_sha256 {
        out.push(format!("workload file sha256: {h}"));
    }
    if !c.settings.is_empty() {
        let s: Vec<String> = c
            .settings
            .iter()
            .filter(|s| !own_session(s))
            .map(|s| format!("{}={}", s.name, s.value))
            .collect();
        out.push(format!(
            "non-default settings ({}): {}",
            s.len(),
            s.join(", ")
        ));
    }
    let deltas: Vec<String> = DATABASE_COUNTERS
        .iter()
        .filter_map(|(col, what)| Some(format!("{what} {}", count(c.database_delta(col)?))))
        .collect();
    if !deltas.is_empty() {
        out.push(format!("database during the run: {}", deltas.join(", ")));
    }
    if c.wait_samples > 0 {
        let w: Vec<String> = c
            .wait_events
            .iter()
            .filter(|w| w.state == "active")
            .take(5)
            .map(|w| format!("{}:{} {}", w.wait_event_type, w.wait_event, w.count))
            .collect();
        // Missing samples make the counts smaller than the run's waits: say so beside them.
        let missed = if c.wait_samples_missed > 0 {
            format!(" ({} sample times missed)", c.wait_samples_missed)
        } else {
            String::new()
        };
        out.push(format!(
            "active backends' waits over {} samples{missed}: {}",
            c.wait_samples,
            if w.is_empty() {
                "none seen".into()
            } else {
                w.join(", ")
            }
        ));
    }
    for w in &c.warnings {
        out.push(format!("context warning: {w}"));
    }
    out
}

/// The context as HTML: the lines above, then tables (database counters, waits, top
/// statements, settings) in collapsible sections.
pub(super) fn html(out: &mut String, c: &RunContext) {
    let _ = writeln!(out, "<div class=\"context\"><h4>Context</h4><ul>");
    for l in lines(c) {
        let _ = writeln!(out, "<li>{}</li>", esc(&l));
    }
    out.push_str("</ul>\n");
    let mut db = Table::new(&["pg_stat_database", "before", "after", "during the run"]);
    for (col, _) in DATABASE_COUNTERS {
        let get = |s: &Option<crate::context::ServerSnapshot>| {
            s.as_ref()
                .and_then(|s| s.database.as_ref()?.get(*col)?.as_f64())
                .map(count)
                .unwrap_or_default()
        };
        if let Some(d) = c.database_delta(col) {
            db.row(vec![
                col.to_string(),
                get(&c.before),
                get(&c.after),
                count(d),
            ]);
        }
    }
    details(out, "Database counters", &db);
    let mut waits = Table::new(&["state", "wait_event_type", "wait_event", "backends seen"]);
    for w in c.wait_events.iter().take(WAITS_SHOWN) {
        waits.row(vec![
            w.state.clone(),
            w.wait_event_type.clone(),
            w.wait_event.clone(),
            w.count.to_string(),
        ]);
    }
    details(
        out,
        &format!(
            "Wait events ({} samples during the run, {} sample times missed)",
            c.wait_samples, c.wait_samples_missed
        ),
        &waits,
    );
    if let Some(stmts) = c.after.as_ref().and_then(|a| a.statements.as_ref()) {
        let mut t = Table::new(&["query", "calls", "total ms", "mean ms", "rows"]);
        for s in stmts {
            let f = |k: &str| s.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
            t.row(vec![
                s.get("query")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string(),
                count(f("calls")),
                format!("{:.1}", f("total_exec_time")),
                format!("{:.3}", f("mean_exec_time")),
                count(f("rows")),
            ]);
        }
        details(
            out,
            "pg_stat_statements after the run (top by total time)",
            &t,
        );
    }
    let mut settings = Table::new(&["setting", "value", "source"]);
    for s in &c.settings {
        settings.row(vec![s.name.clone(), s.value.clone(), s.source.clone()]);
    }
    details(out, "Settings not at their default", &settings);
    out.push_str("</div>\n");
}

fn details(out: &mut String, title: &str, t: &Table) {
    if t.rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "<details><summary>{}</summary>", esc(title));
    push_table(out, t);
    out.push_str("</details>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{WaitEvent, WaitGap};

    /// The report's line of waits says how many sample times have no sample, beside the
    /// counts they make smaller, and the warning that names the periods follows it.
    #[test]
    fn the_waits_line_names_the_missed_samples() {
        let c = RunContext {
            wait_samples: 6,
            wait_samples_missed: 3,
            wait_gaps: vec![WaitGap {
                from_s: 1.0,
                to_s: None,
                missed: 3,
                reconnects_tried: 2,
                why: "could not connect: refused".into(),
            }],
            wait_events: vec![WaitEvent {
                state: "active".into(),
                wait_event_type: "CPU".into(),
                wait_event: "running".into(),
                count: 6,
            }],
            warnings: vec!["the wait-event sampler lost its connection 1 time".into()],
            ..Default::default()
        };
        let l = lines(&c);
        assert!(
            l.iter().any(|l| l
                == "active backends' waits over 6 samples (3 sample times missed): CPU:running 6"),
            "{l:?}"
        );
        assert!(l.iter().any(|l| l.contains("lost its connection")), "{l:?}");
    }
}
