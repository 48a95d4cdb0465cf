//! One statement a session sends, how it is judged, and how it is printed in a reproducer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use slipstream_pg::{Client, Error, MemoptTable, SimpleQueryMessage, Statement};

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
    /// Keys looked up by the client's fast path (`Client::memopt_get` per key, or pipelined
    /// `Pipeline::memopt_get`s coalesced into one `get_many`: issue 22), between two reads of
    /// the normal plan (`slow_rows`). The FunctionCall runs on a snapshot of its own, so a
    /// key is judged only where both normal-plan reads agree: the row did not change around
    /// the lookup (a row deleted and inserted again with equal values in between would be
    /// the one false alarm: `x` and the random `v` make that unlikely). A lookup that differs
    /// from both agreeing reads is a mismatch.
    Client { keys: Vec<i64>, pipelined: bool },
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
    /// `t` resolved for the fast lookup; forgotten after any failed lookup (DDL).
    table: Option<MemoptTable>,
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
            table: None,
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
            Kind::Client { keys, pipelined } => {
                if let Err(e) = self.client_read(keys, *pipelined, &mut out).await {
                    self.table = None;
                    out.error = Some(e);
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

impl Conn {
    /// See [`Kind::Client`].
    async fn client_read(
        &mut self,
        keys: &[i64],
        pipelined: bool,
        out: &mut Outcome,
    ) -> Result<(), Error> {
        let t = match &self.table {
            Some(t) => t.clone(),
            None => {
                let t = self.client.memopt_table("t").await?;
                self.table = Some(t.clone());
                t
            }
        };
        let before = self.slow_rows(keys).await?;
        let fast: Vec<Cells> = if pipelined {
            let mut p = self.client.pipeline();
            let mut ops = Vec::with_capacity(keys.len());
            for k in keys {
                ops.push(p.memopt_get(&t, k).await?);
            }
            let mut fast = Vec::with_capacity(keys.len());
            for op in &ops {
                fast.push(cells(p.process(op).await?.first())?);
            }
            for r in p.end().await {
                r?;
            }
            fast
        } else {
            let mut fast = Vec::with_capacity(keys.len());
            for k in keys {
                fast.push(cells(self.client.memopt_get(&t, k).await?.as_ref())?);
            }
            fast
        };
        let after = self.slow_rows(keys).await?;
        for (i, k) in keys.iter().enumerate() {
            if before[i] != after[i] {
                continue; // changed around the lookup: no verdict
            }
            out.reads += 1;
            if fast[i] != before[i] && out.mismatch.is_none() {
                out.mismatch = Some(format!(
                    "memopt.get(t, {k}) by FunctionCall{} returned {:?}, the normal plan {:?} \
                     before and after it",
                    if pipelined { " (pipelined run)" } else { "" },
                    fast[i],
                    before[i]
                ));
            }
        }
        Ok(())
    }

    /// Each key's row by the normal plan, as raw column values (`None`: no row). The row is
    /// read as one composite (`record_send`, which leaves dropped columns out as the fast
    /// lookup's reply does) and split here: a set-returning function of `t` fails once a
    /// column of `t` was dropped. The CASE keeps memopt's node out of it as well.
    async fn slow_rows(&mut self, keys: &[i64]) -> Result<Vec<Cells>, Error> {
        self.client
            .batch_execute("SET memopt.enabled = off")
            .await?;
        let rows = self
            .client
            .query(
                "SELECT (SELECT t FROM t WHERE CASE WHEN pg_get_indexdef(to_regclass('t_pkey')) \
                 LIKE '%(a)' THEN a = u.k ELSE b = u.k END) \
                 FROM unnest($1::bigint[]) WITH ORDINALITY AS u(k, o) ORDER BY u.o",
                &[&keys],
            )
            .await;
        let reset = self.client.batch_execute("RESET memopt.enabled").await;
        let rows = rows?;
        reset?;
        rows.iter()
            .map(|r| Ok(r.get_raw(0)?.map(record_cells)))
            .collect()
    }
}

/// The column values of a composite in `record_send`'s format (a count, then each column's
/// type OID, length and bytes). The server's own output: a malformed one would be a bug there,
/// shown as a mismatch rather than a panic.
fn record_cells(mut v: &[u8]) -> Vec<Option<Vec<u8>>> {
    fn take<'a>(v: &mut &'a [u8], n: usize) -> &'a [u8] {
        let n = n.min(v.len());
        let (head, rest) = v.split_at(n);
        *v = rest;
        head
    }
    fn int(v: &mut &[u8]) -> i32 {
        let b = take(v, 4);
        b.try_into().map_or(-1, i32::from_be_bytes)
    }
    let n = int(&mut v).max(0);
    let mut cells = Vec::new();
    for _ in 0..n {
        let _oid = int(&mut v);
        let len = int(&mut v);
        cells.push(
            usize::try_from(len)
                .ok()
                .map(|len| take(&mut v, len).to_vec()),
        );
    }
    cells
}

/// A row's values, raw (the binary format of either path; `None`: no row).
type Cells = Option<Vec<Option<Vec<u8>>>>;

fn cells(row: Option<&slipstream_pg::Row>) -> Result<Cells, Error> {
    let Some(row) = row else {
        return Ok(None);
    };
    (0..row.len())
        .map(|i| Ok(row.get_raw(i)?.map(<[u8]>::to_vec)))
        .collect::<Result<Vec<_>, Error>>()
        .map(Some)
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
            Kind::Client { keys, pipelined } => {
                let keys = keys
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                let how = if *pipelined {
                    "one pipelined run (get_many)"
                } else {
                    "one FunctionCall per key"
                };
                let _ = writeln!(
                    out,
                    "-- by the client's fast path, {how}; in psql the equivalent:\n\
                     SELECT slow_row(k) FROM unnest('{{{keys}}}'::bigint[]) k;\n\
                     SELECT memopt.get('t', k)::text FROM unnest('{{{keys}}}'::bigint[]) k;\n\
                     SELECT slow_row(k) FROM unnest('{{{keys}}}'::bigint[]) k;"
                );
            }
        }
    }
    out
}
