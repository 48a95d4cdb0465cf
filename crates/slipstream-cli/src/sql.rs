//! `slipstream sql`: run SQL, print psql-style tables.

use std::time::{Duration, Instant};

use slipstream_lab::Table;
use slipstream_pg::{SimpleQueryMessage, SqlState};

use crate::interrupt::{INTERRUPTED, SAME_STOP};

/// How long a cancelled statement may take to end on the server before we stop waiting.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// How a `slipstream sql` run ended.
pub enum Ran {
    /// The statements' reply (also when a Ctrl-C's cancel came too late to stop them).
    Done(Vec<SimpleQueryMessage>),
    /// Interrupted by Ctrl-C: what happened to the statements, for stderr.
    Interrupted(String),
}

/// Runs `query` (one or more `;`-separated statements, one implicit transaction). A Ctrl-C
/// cancels the statement on the server, as psql's does: a dead client alone would leave the
/// server running it to its end, and committing it. A second Ctrl-C exits at once.
pub async fn run(url: &str, query: &str) -> anyhow::Result<Ran> {
    // Listening from the start takes SIGINT's default (exit) away for the whole run, so every
    // Ctrl-C goes through here.
    let first = tokio::signal::ctrl_c();
    tokio::pin!(first);
    let mut client = tokio::select! {
        c = slipstream_pg::connect(url) => c?,
        _ = &mut first => return Ok(Ran::Interrupted("interrupted while connecting".into())),
    };
    let token = client.cancel_token();
    let (reply, cancel_sent) = {
        let statement = client.simple_query(query);
        tokio::pin!(statement);
        tokio::select! {
            reply = &mut statement => (reply, false),
            _ = &mut first => {
                let pressed = Instant::now();
                eprintln!(
                    "cancelling the statement on the server (Ctrl-C again to exit now, leaving it to run)"
                );
                tokio::spawn(async move {
                    while tokio::signal::ctrl_c().await.is_ok() {
                        // One stop sent twice (`timeout -s INT` signals the process and then
                        // its group) is not a second Ctrl-C.
                        if pressed.elapsed() >= SAME_STOP {
                            std::process::exit(i32::from(INTERRUPTED));
                        }
                    }
                });
                if let Err(e) = token.cancel().await {
                    return Ok(Ran::Interrupted(format!(
                        "could not cancel the statement ({e}); it may still be running on the server: see pg_stat_activity"
                    )));
                }
                match tokio::time::timeout(CANCEL_WAIT, &mut statement).await {
                    Ok(reply) => (reply, true),
                    Err(_) => {
                        return Ok(Ran::Interrupted(format!(
                            "the server took the cancel but the statement had not ended {CANCEL_WAIT:?} later; it may still be running: see pg_stat_activity"
                        )));
                    }
                }
            }
        }
    };
    // After a cancel the statement either stopped, or had ended before the request arrived:
    // then it stands, and its reply is shown.
    match reply {
        Ok(reply) => {
            if cancel_sent {
                eprintln!("the statement had finished before the cancel reached the server");
            }
            client.close().await?;
            Ok(Ran::Done(reply))
        }
        Err(e) if cancel_sent && e.code() == Some(SqlState::QUERY_CANCELED) => {
            Ok(Ran::Interrupted(format!(
                "cancelled on the server, its transaction rolled back: {e}"
            )))
        }
        Err(e) => Err(e.into()),
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
