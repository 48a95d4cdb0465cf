//! `slipstream sql`: run SQL, print psql-style tables.

use slipstream_lab::Table;
use slipstream_pg::{ErrorKind, SimpleQueryMessage, SqlState};

use crate::interrupt::{CANCEL_WAIT, Cancelled, CtrlC};

/// How a `slipstream sql` run ended. `reply` is what the statements that ran returned: all of
/// them, or those before a failure or an interruption (they ran, and a `COMMIT` among them
/// committed), so it is shown either way.
pub enum Ran {
    /// The statements' reply (also when a Ctrl-C's cancel came too late to stop them).
    Done(Vec<SimpleQueryMessage>),
    /// A statement failed: the reply of those before it, and the error.
    Failed {
        reply: Vec<SimpleQueryMessage>,
        error: anyhow::Error,
    },
    /// Interrupted by Ctrl-C: the reply so far, and what happened to the statements, for
    /// stderr.
    Interrupted {
        reply: Vec<SimpleQueryMessage>,
        what: String,
    },
}

/// Refuses what is not SQL before anything connects: a psql meta-command (`\dt`, `\copy`),
/// which the server would answer with a bare syntax error at the backslash.
pub fn check(query: &str) -> anyhow::Result<()> {
    let q = query.trim_start();
    if q.starts_with('\\') {
        let command = q.split_whitespace().next().unwrap_or(q);
        anyhow::bail!(
            "`{command}` is a psql meta-command, not SQL: slipstream sql runs SQL only; run it in psql, or write the SQL it stands for (for \\dt: SELECT * FROM pg_tables)"
        );
    }
    Ok(())
}

/// Runs `query` (one or more `;`-separated statements, one implicit transaction). A Ctrl-C
/// (or SIGTERM) cancels the statement on the server, as psql's does: a dead client alone would leave the
/// server running it to its end, and committing it. A second Ctrl-C exits at once.
pub async fn run(url: &str, query: &str) -> anyhow::Result<Ran> {
    let mut ctrl_c = CtrlC::listen()?;
    let Some(client) = ctrl_c.or(slipstream_pg::connect(url)).await else {
        return Ok(Ran::Interrupted {
            reply: Vec::new(),
            what: "interrupted while connecting".into(),
        });
    };
    let mut client = client?;
    // As psql shows them: a `RAISE NOTICE` or a warning is part of the answer. Escaped: the
    // text is the server's, and must not drive the terminal.
    client.set_notice_handler(|n| {
        eprintln!(
            "{}:  {}",
            n.severity(),
            slipstream_bench::table::printable(n.message().to_string())
        )
    });
    let token = client.cancel_token();
    let ran = ctrl_c
        .cancelling(
            "the statement",
            client.simple_query_until_error(query),
            || token.cancel(),
        )
        .await;
    // After a cancel the statement either stopped, or had ended before the request arrived:
    // then it stands, and its reply is shown.
    let ((reply, error), cancel_sent) = match ran {
        Cancelled::Ran(ran) => (ran, false),
        Cancelled::AfterCancel(ran) => (ran, true),
        Cancelled::NotSent(e) => {
            return Ok(Ran::Interrupted {
                reply: Vec::new(),
                what: format!(
                    "could not cancel the statement ({e}); it may still be running on the server: see pg_stat_activity"
                ),
            });
        }
        Cancelled::NotEnded => {
            return Ok(Ran::Interrupted {
                reply: Vec::new(),
                what: format!(
                    "the server took the cancel but the statement had not ended {CANCEL_WAIT:?} later; it may still be running: see pg_stat_activity"
                ),
            });
        }
    };
    match error {
        None => {
            if cancel_sent {
                eprintln!("the statement had finished before the cancel reached the server");
            }
            client.close().await?;
            Ok(Ran::Done(reply))
        }
        Some(e) if cancel_sent && e.code() == Some(SqlState::QUERY_CANCELED) => {
            Ok(Ran::Interrupted {
                reply,
                what: format!("cancelled on the server, its transaction rolled back: {e}"),
            })
        }
        // The client's own advice names its Rust API, which a command-line user cannot call.
        Some(e) if e.kind() == ErrorKind::Usage && e.to_string().contains("COPY") => {
            Ok(Ran::Failed {
                reply,
                error: anyhow::anyhow!(
                    "slipstream sql does not stream COPY ... TO STDOUT or FROM STDIN; use psql's \\copy, or COPY to or from a file on the server"
                ),
            })
        }
        Some(e) => Ok(Ran::Failed {
            reply,
            error: e.into(),
        }),
    }
}

/// Renders a simple-query reply: a table per result set with its row count, and the command
/// tag of each statement that returns no rows.
pub fn render(reply: &[SimpleQueryMessage]) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let mut table: Option<Table> = None;
    for message in reply {
        match message {
            SimpleQueryMessage::RowDescription(columns) => {
                let names: Vec<&str> = columns.iter().map(String::as_str).collect();
                table = Some(Table::new(&names));
            }
            SimpleQueryMessage::Row(row) => {
                if let Some(t) = table.as_mut() {
                    let cells = (0..row.len())
                        .map(|i| row.get(i).map(|v| v.unwrap_or("").to_string()))
                        .collect::<Result<Vec<_>, _>>()?;
                    t.row(cells);
                }
            }
            SimpleQueryMessage::CommandComplete { tag, rows } => match table.take() {
                Some(t) => out.push(format!(
                    "{}\n({rows} row{})",
                    t.render(),
                    if *rows == 1 { "" } else { "s" }
                )),
                None => out.push(tag.clone()),
            },
            _ => {}
        }
    }
    Ok(out.join("\n\n"))
}

/// Prints the reply of the statements that ran before a failure or an interruption, if they
/// returned anything: they ran (a `COMMIT` among them committed), and the error alone would
/// not say so.
pub fn show_partial(reply: &[SimpleQueryMessage]) -> anyhow::Result<()> {
    let shown = render(reply)?;
    if !shown.is_empty() {
        crate::say(&shown)?;
    }
    Ok(())
}
