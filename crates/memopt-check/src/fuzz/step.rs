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
    /// the normal plan (`slow_rows`). The FunctionCall runs on a snapshot of its own, judged
    /// as [`judge`] says: every key when no transaction ended between the two reads, else
    /// only keys whose row both reads found alike, with the table's shape unchanged.
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
        self.client_read_around(keys, pipelined, out, async |_| ())
            .await
    }

    /// [`Conn::client_read`], calling `between` after the first normal-plan read
    /// ([`Around::BeforeLookup`]) and after the lookup ([`Around::AfterLookup`]): a test's way
    /// to commit DDL or writes from another session exactly there.
    pub(crate) async fn client_read_around(
        &mut self,
        keys: &[i64],
        pipelined: bool,
        out: &mut Outcome,
        mut between: impl AsyncFnMut(Around),
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
        between(Around::BeforeLookup).await;
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
        between(Around::AfterLookup).await;
        let after = self.slow_rows(keys).await?;
        judge(keys, pipelined, &before, &fast, &after, out);
        Ok(())
    }

    /// Each key's row by the normal plan, as raw column values (`None`: no row), and the
    /// table's shape on the same snapshot. The row is read as one composite (`record_send`,
    /// which leaves dropped columns out as the fast lookup's reply does) and split here: a
    /// set-returning function of `t` fails once a column of `t` was dropped. The CASE keeps
    /// memopt's node out of it as well.
    ///
    /// Outside a transaction block the statement takes its snapshot after it has locked `t`
    /// (Bind locks, the portal's start takes the snapshot), so the shape it reads from the
    /// catalog is the one its rows were formed with; inside one, the lock taken by the first
    /// read holds until the end, so both reads see one shape. `pg_current_snapshot` is the
    /// statement's own snapshot.
    async fn slow_rows(&mut self, keys: &[i64]) -> Result<SlowRead, Error> {
        self.client
            .batch_execute("SET memopt.enabled = off")
            .await?;
        let rows = self
            .client
            .query(
                "SELECT (SELECT t FROM t WHERE CASE WHEN pg_get_indexdef(to_regclass('t_pkey')) \
                 LIKE '%(a)' THEN a = u.k ELSE b = u.k END), \
                 (SELECT relnatts FROM pg_class WHERE oid = 't'::regclass), \
                 to_regclass('t_pkey')::oid, pg_current_snapshot()::text \
                 FROM unnest($1::bigint[]) WITH ORDINALITY AS u(k, o) ORDER BY u.o",
                &[&keys],
            )
            .await;
        let reset = self.client.batch_execute("RESET memopt.enabled").await;
        let rows = rows?;
        reset?;
        let (shape, snapshot) = match rows.first() {
            Some(r) => (
                Some(Shape {
                    attributes: r.get(1)?,
                    primary_key: r.get(2)?,
                }),
                Snapshot::parse(r.get(3)?),
            ),
            None => (None, None),
        };
        let rows = rows
            .iter()
            .map(|r| Ok(r.get_raw(0)?.map(record_cells)))
            .collect::<Result<_, Error>>()?;
        Ok(SlowRead {
            rows,
            shape,
            snapshot,
        })
    }
}

/// Where [`Conn::client_read_around`] calls its hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Around {
    /// After the first normal-plan read, before the lookup.
    BeforeLookup,
    /// After the lookup, before the second normal-plan read.
    AfterLookup,
}

/// What fixes the meaning of a stored row apart from its values: the attribute numbers in use
/// (`relnatts` only grows: every ADD COLUMN raises it, a DROP leaves it) and the primary key's
/// index (a new OID each time the key moves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    attributes: i16,
    primary_key: Option<u32>,
}

/// A read's MVCC snapshot (`pg_current_snapshot`): transactions from `xmax` on, and those in
/// `running`, had not ended when it was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    xmax: u64,
    running: Vec<u64>,
}

impl Snapshot {
    /// `xmin:xmax:xip,...` as PostgreSQL prints a snapshot; `None` if it is not one.
    fn parse(text: &str) -> Option<Snapshot> {
        let mut parts = text.split(':');
        let _xmin: u64 = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let running = match parts.next()? {
            "" => Vec::new(),
            xip => xip
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?,
        };
        parts.next().is_none().then_some(Snapshot { xmax, running })
    }

    /// No transaction ended between `self` and `later`: every snapshot taken in between sees
    /// what both see. `xmax` is the latest ended transaction's id plus one, so it moves when
    /// any transaction ends; one that began before `self` and ends before `later` leaves
    /// the running set.
    fn quiet_until(&self, later: &Snapshot) -> bool {
        self.xmax == later.xmax && self.running.iter().all(|x| later.running.contains(x))
    }
}

/// One normal-plan read of a client step's keys.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlowRead {
    rows: Vec<Cells>,
    /// `None` when there were no keys.
    shape: Option<Shape>,
    /// `None` when there were no keys (or it did not parse: then no window counts as quiet).
    snapshot: Option<Snapshot>,
}

/// The verdict on a client lookup between two normal-plan reads.
///
/// When no transaction ended between the two reads, the lookup's snapshot (taken in between)
/// sees what they see: every key is judged. Otherwise only a key whose row both reads found
/// alike, with the table's shape unchanged, is judged:
/// - DDL committed after the first read and undone before the second (a column added then
///   dropped, the key moved and moved back) rightly gives the lookup a row neither read saw;
/// - a key with no row in either read may have been inserted and deleted by others around
///   the lookup (or refilled by TRUNCATE), which the lookup then rightly finds;
/// - a row changed and changed back to equal values in between would be the one false alarm
///   left (`x` and the random `v` make it unlikely).
fn judge(
    keys: &[i64],
    pipelined: bool,
    before: &SlowRead,
    fast: &[Cells],
    after: &SlowRead,
    out: &mut Outcome,
) {
    let quiet = match (&before.snapshot, &after.snapshot) {
        (Some(b), Some(a)) => b.quiet_until(a),
        _ => false,
    };
    if !quiet && before.shape != after.shape {
        return; // DDL around the lookup: no verdict
    }
    let counts = [before.rows.len(), fast.len(), after.rows.len()];
    if counts.iter().any(|&n| n != keys.len()) {
        out.mismatch.get_or_insert_with(|| {
            format!(
                "{} keys looked up by FunctionCall gave {counts:?} answers (normal plan, \
                 memopt, normal plan): one per key was expected",
                keys.len()
            )
        });
        return;
    }
    for (k, ((b, f), a)) in keys
        .iter()
        .zip(before.rows.iter().zip(fast).zip(&after.rows))
    {
        if b != a || (!quiet && b.is_none()) {
            continue; // changed, or may have, around the lookup: no verdict
        }
        out.reads += 1;
        if f != b && out.mismatch.is_none() {
            out.mismatch = Some(format!(
                "memopt.get(t, {k}) by FunctionCall{} returned {:?}, the normal plan {:?} \
                 before and after it",
                if pipelined { " (pipelined run)" } else { "" },
                f,
                b
            ));
        }
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

/// The judge of client lookups, against a real server: DDL committed around a lookup by
/// another session gives the lookup a row neither normal-plan read saw, which is no mismatch.
/// Errors are returned, not unwrapped: a failed set-up fails the test with its message.
#[cfg(test)]
mod tests {
    use super::*;

    type Fallible = Result<(), Box<dyn std::error::Error>>;
    const KEYS: i32 = 20;

    /// A cluster with the fuzzer's schema, a fuzzer connection and a second session.
    async fn setup()
    -> Result<(slipstream_testkit::Cluster, Conn, Client), Box<dyn std::error::Error>> {
        // No autovacuum: its transactions would end inside the windows the tests call quiet.
        let cluster = crate::cluster(&[("autovacuum", "off")])?;
        let mut other = slipstream_pg::connect(&cluster.url()).await?;
        other
            .batch_execute(&super::super::schema::setup(KEYS))
            .await?;
        let conn = Conn::connect(&cluster.url()).await?;
        Ok((cluster, conn, other))
    }

    /// `client_read_around` with `sql[0]` committed by the other session before the lookup
    /// and `sql[1]` after it, both lookup paths.
    async fn read_around(
        conn: &mut Conn,
        other: &mut Client,
        keys: &[i64],
        pipelined: bool,
        sql: [&str; 2],
    ) -> Result<Outcome, Error> {
        let mut out = Outcome::default();
        let mut failed = None;
        conn.client_read_around(keys, pipelined, &mut out, async |at| {
            let sql = if at == Around::BeforeLookup {
                sql[0]
            } else {
                sql[1]
            };
            if let Err(e) = other.batch_execute(sql).await {
                failed.get_or_insert(e);
            }
        })
        .await?;
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// `read_around` with `sql` committed around the lookup, which then rightly returns what
    /// neither read saw: no key may be judged, and so no mismatch reported.
    async fn no_verdict_around(
        conn: &mut Conn,
        other: &mut Client,
        keys: &[i64],
        pipelined: bool,
        sql: [&str; 2],
    ) -> Fallible {
        let out = read_around(conn, other, keys, pipelined, sql).await?;
        assert_eq!(
            (out.reads, &out.mismatch),
            (0, &None),
            "pipelined: {pipelined}, around: {sql:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_column_added_and_dropped_around_a_lookup_is_refused_not_a_mismatch() -> Fallible {
        let (_cluster, mut conn, mut other) = setup().await?;
        let keys = [3, 7, 12];
        for pipelined in [false, true] {
            // The lookup's table is resolved while y exists, as in the run that failed.
            other
                .batch_execute("ALTER TABLE t ADD COLUMN y text DEFAULT 'y1'")
                .await?;
            let out = read_around(&mut conn, &mut other, &keys, pipelined, ["", ""]).await?;
            assert_eq!((out.reads, &out.mismatch), (3, &None));
            other.batch_execute("ALTER TABLE t DROP COLUMN y").await?;
            // y comes back for the lookup only: it sees a column neither read around it saw.
            // The new y has another column number than the y the table was resolved with, so
            // memopt 1.1 refuses the lookup ("resolve it again"); it must not be judged either.
            let refused = read_around(
                &mut conn,
                &mut other,
                &keys,
                pipelined,
                [
                    "ALTER TABLE t ADD COLUMN y text DEFAULT 'y61'",
                    "ALTER TABLE t DROP COLUMN y",
                ],
            )
            .await;
            match refused {
                Err(e) => assert!(e.to_string().contains("resolve it again"), "{e}"),
                Ok(out) => panic!("pipelined: {pipelined}: served under a stale layout: {out:?}"),
            }
            // The refusal ended the read before its second statement ran.
            other
                .batch_execute("ALTER TABLE t DROP COLUMN IF EXISTS y")
                .await?;
            conn.table = None;
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_primary_key_moved_and_back_around_a_lookup_is_no_mismatch() -> Fallible {
        let (_cluster, mut conn, mut other) = setup().await?;
        // Key 3 of b is the row of a = 18: the lookup, by b, returns another row.
        no_verdict_around(
            &mut conn,
            &mut other,
            &[3],
            true,
            [
                "ALTER TABLE t DROP CONSTRAINT t_pkey, ADD CONSTRAINT t_pkey PRIMARY KEY (b)",
                "ALTER TABLE t DROP CONSTRAINT t_pkey, ADD CONSTRAINT t_pkey PRIMARY KEY (a)",
            ],
        )
        .await
    }

    #[tokio::test]
    async fn in_a_quiet_window_every_key_is_judged_else_only_rows_alike() -> Fallible {
        let (_cluster, mut conn, mut other) = setup().await?;
        // Nothing ends between the reads: key 40 (no row) is judged too.
        let out = read_around(&mut conn, &mut other, &[1, 2, 40], false, ["", ""]).await?;
        assert_eq!((out.reads, &out.mismatch), (3, &None));
        // A row written around the lookup is left out, and so is the key without a row (a
        // row may have come and gone); key 1, alike in both reads, is judged.
        let out = read_around(
            &mut conn,
            &mut other,
            &[1, 2, 40],
            true,
            ["", "UPDATE t SET x = x + 1 WHERE a = 2"],
        )
        .await?;
        assert_eq!((out.reads, &out.mismatch), (1, &None));
        Ok(())
    }

    #[tokio::test]
    async fn a_row_inserted_and_deleted_around_a_lookup_is_no_mismatch() -> Fallible {
        let (_cluster, mut conn, mut other) = setup().await?;
        for pipelined in [false, true] {
            no_verdict_around(
                &mut conn,
                &mut other,
                &[40],
                pipelined,
                [
                    "INSERT INTO t (a, b, v, p) VALUES (40, -19, 'i40', 1)",
                    "DELETE FROM t WHERE a = 40",
                ],
            )
            .await?;
        }
        Ok(())
    }

    /// A read of `rows` with `attributes` in the table, its snapshot `xmax` with `running`.
    fn read(rows: Vec<Cells>, attributes: i16, xmax: u64, running: &[u64]) -> SlowRead {
        SlowRead {
            rows,
            shape: Some(Shape {
                attributes,
                primary_key: Some(16400),
            }),
            snapshot: Some(Snapshot {
                xmax,
                running: running.to_vec(),
            }),
        }
    }

    #[test]
    fn snapshots_parse_and_a_window_is_quiet_only_if_nothing_ended() {
        let s = |t: &str| Snapshot::parse(t);
        assert_eq!(
            s("740:752:740,745"),
            Some(Snapshot {
                xmax: 752,
                running: vec![740, 745]
            })
        );
        assert_eq!(
            s("752:752:"),
            Some(Snapshot {
                xmax: 752,
                running: vec![]
            })
        );
        for bad in ["", "1:2", "1:2:3:4", "a:2:", "1:2:3,x"] {
            assert_eq!(s(bad), None, "{bad:?}");
        }
        let quiet = |a: &str, b: &str| s(a).zip(s(b)).map(|(a, b)| a.quiet_until(&b));
        assert_eq!(quiet("740:752:740,745", "740:752:740,745"), Some(true));
        // A transaction that began meanwhile and still runs: quiet.
        assert_eq!(quiet("740:752:740,745", "740:752:740,745,752"), Some(true));
        // One that was running ended (745), or a new one ended (xmax moved): not quiet.
        assert_eq!(quiet("740:752:740,745", "740:752:740"), Some(false));
        assert_eq!(quiet("740:752:740,745", "740:754:740,745,752"), Some(false));
    }

    #[test]
    fn a_lookup_that_differs_from_both_agreeing_reads_is_a_mismatch() {
        let row = |v: u8| Some(vec![Some(vec![0, 0, 0, 1]), Some(vec![v])]);
        let mut out = Outcome::default();
        let (before, after) = (
            read(vec![row(1), row(2)], 5, 10, &[]),
            read(vec![row(1), row(2)], 5, 11, &[]),
        );
        judge(&[1, 2], true, &before, &[row(1), row(9)], &after, &mut out);
        assert_eq!(out.reads, 2);
        assert!(
            out.mismatch
                .as_deref()
                .is_some_and(|m| m.starts_with("memopt.get(t, 2) by FunctionCall (pipelined run)")),
            "{:?}",
            out.mismatch
        );
        // The same lookup with the shape changed around it: no verdict.
        let mut out = Outcome::default();
        judge(
            &[1, 2],
            true,
            &before,
            &[row(1), row(9)],
            &read(vec![row(1), row(2)], 6, 11, &[]),
            &mut out,
        );
        assert_eq!((out.reads, out.mismatch), (0, None));
        // A key with no row in either read that the lookup finds: a mismatch when nothing
        // ended in between, no verdict otherwise (a row may have come and gone).
        for (xmax, verdict) in [(10, true), (11, false)] {
            let mut out = Outcome::default();
            let (before, after) = (read(vec![None], 5, 10, &[]), read(vec![None], 5, xmax, &[]));
            judge(&[7], false, &before, &[row(7)], &after, &mut out);
            assert_eq!(
                (out.reads, out.mismatch.is_some()),
                (verdict as u64, verdict)
            );
        }
        // One answer missing is reported, never skipped.
        let mut out = Outcome::default();
        judge(&[1, 2], false, &before, &[row(1)], &after, &mut out);
        assert!(
            out.mismatch
                .is_some_and(|m| m.contains("[2, 1, 2] answers"))
        );
    }
}
