//! One statement a session sends, how it is judged, and how it is printed in a reproducer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use slipstream_pg::{Client, Error, SimpleQueryMessage, Statement};

/// What a step sends and how its answer is checked.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// Statements whose reads (RETURNING `chk`, trigger reads) report mismatches by NOTICE.
    Exec(String),
    /// One statement whose rows are (memopt, normal plan) pairs read on one snapshot.
    Compare(String),
    /// A prepared statement (`$1` = key) whose one row is a (memopt, normal plan) pair.
    Prepared { sql: String, key: i32 },
    /// The memopt read and the normal-plan read as two statements. Sound only where the row
    /// cannot change between them: in REPEATABLE READ, or for a key whose row this
    /// transaction has written (and so holds locked until it ends).
    Split { fast: String, slow: String },
}

/// A step of one session, numbered in the order steps completed across sessions.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub session: usize,
    pub kind: Kind,
    /// Session settings: kept when a reproducer is shrunk.
    pub pinned: bool,
}

/// What happened when a step ran.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The server's error, if the step failed (often expected: conflicts, deadlocks, doomed
    /// commits, statements in an aborted transaction).
    pub error: Option<Error>,
    /// A description of the first disagreement between memopt and the normal plan.
    pub mismatch: Option<String>,
    /// (memopt, normal plan) pairs compared on the client (reads by `chk` are counted by the
    /// server's `fuzz_reads` sequence).
    pub reads: u64,
    /// Rows affected by the last statement (for single-key writes: did it lock the row?).
    pub rows: u64,
}

/// A connection plus what the fuzzer keeps beside it.
pub(crate) struct Conn {
    pub client: Client,
    notices: Arc<Mutex<Vec<String>>>,
    prepared: HashMap<String, Statement>,
}

/// Marks the NOTICE `chk` raises on a mismatch.
const MISMATCH_NOTICE: &str = "memopt-fuzz mismatch";

impl Conn {
    pub async fn connect(url: &str) -> Result<Conn, Error> {
        let mut client = slipstream_pg::connect(url).await?;
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        client.set_notice_handler(move |n| {
            if n.message().starts_with(MISMATCH_NOTICE) {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(n.message().to_string());
            }
        });
        Ok(Conn {
            client,
            notices,
            prepared: HashMap::new(),
        })
    }

    pub async fn run(&mut self, kind: &Kind) -> Outcome {
        let mut out = Outcome::default();
        match kind {
            Kind::Exec(sql) => match self.client.simple_query(sql).await {
                Ok(msgs) => out.rows = last_count(&msgs),
                Err(e) => out.error = Some(e),
            },
            Kind::Compare(sql) => match self.client.simple_query(sql).await {
                Ok(msgs) => {
                    for m in &msgs {
                        if let SimpleQueryMessage::Row(row) = m {
                            let cells: Vec<Option<String>> = (0..row.len())
                                .map(|i| row.get(i).ok().flatten().map(str::to_string))
                                .collect();
                            compare_pairs(&cells, &mut out);
                        }
                    }
                }
                Err(e) => out.error = Some(e),
            },
            Kind::Prepared { sql, key } => {
                let stmt = match self.prepared.get(sql) {
                    Some(s) => Ok(s.clone()),
                    None => self.client.prepare(sql).await,
                };
                match stmt {
                    Ok(stmt) => {
                        self.prepared.insert(sql.clone(), stmt.clone());
                        match self.client.query(&stmt, &[key]).await {
                            Ok(rows) => {
                                for row in &rows {
                                    let cells: Vec<Option<String>> = (0..row.len())
                                        .map(|i| row.get::<_, Option<String>>(i).ok().flatten())
                                        .collect();
                                    compare_pairs(&cells, &mut out);
                                }
                            }
                            Err(e) => out.error = Some(e),
                        }
                    }
                    Err(e) => out.error = Some(e),
                }
            }
            Kind::Split { fast, slow } => {
                let f = self.client.simple_query(fast).await.map(|m| first_cell(&m));
                match f {
                    Ok(f) => match self.client.simple_query(slow).await.map(|m| first_cell(&m)) {
                        Ok(s) => compare_pairs(&[f, s], &mut out),
                        Err(e) => out.error = Some(e),
                    },
                    Err(e) => out.error = Some(e),
                }
            }
        }
        let notices = std::mem::take(&mut *self.notices.lock().unwrap_or_else(|p| p.into_inner()));
        if out.mismatch.is_none() {
            out.mismatch = notices.into_iter().next();
        }
        out
    }
}

/// Compares cells (0, 1), (2, 3), ...: memopt's answer, then the normal plan's.
fn compare_pairs(cells: &[Option<String>], out: &mut Outcome) {
    for pair in cells.chunks_exact(2) {
        out.reads += 1;
        if pair[0] != pair[1] && out.mismatch.is_none() {
            out.mismatch = Some(format!(
                "memopt returned {}, the normal plan {}",
                show(&pair[0]),
                show(&pair[1])
            ));
        }
    }
}

fn show(cell: &Option<String>) -> String {
    cell.as_ref()
        .map_or_else(|| "no row".to_string(), |s| format!("'{s}'"))
}

fn first_cell(msgs: &[SimpleQueryMessage]) -> Option<String> {
    msgs.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => Some(r.get(0).ok().flatten().map(str::to_string)),
        _ => None,
    })?
}

fn last_count(msgs: &[SimpleQueryMessage]) -> u64 {
    msgs.iter()
        .rev()
        .find_map(|m| match m {
            SimpleQueryMessage::CommandComplete { rows, .. } => Some(*rows),
            _ => None,
        })
        .unwrap_or(0)
}

/// The steps as a psql script: each step under a comment naming its session, in completion
/// order. Run each session's lines in its own psql, in the order shown.
pub(crate) fn render(steps: &[Step]) -> String {
    let mut out = String::new();
    let mut prepared: Vec<(usize, String)> = Vec::new();
    for s in steps {
        let _ = writeln!(out, "-- session {}", s.session + 1);
        match &s.kind {
            Kind::Exec(sql) | Kind::Compare(sql) => {
                let _ = writeln!(out, "{sql};");
            }
            Kind::Prepared { sql, key } => {
                let name = match prepared
                    .iter()
                    .position(|p| p.0 == s.session && &p.1 == sql)
                {
                    Some(i) => format!("p{i}"),
                    None => {
                        prepared.push((s.session, sql.clone()));
                        let name = format!("p{}", prepared.len() - 1);
                        let _ = writeln!(out, "PREPARE {name}(int) AS {sql};");
                        name
                    }
                };
                let _ = writeln!(out, "EXECUTE {name}({key});");
            }
            Kind::Split { fast, slow } => {
                let _ = writeln!(out, "{fast};\n{slow};");
            }
        }
    }
    out
}
