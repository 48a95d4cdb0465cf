//! Attacks on a `PgPool` borrower dropped at every await point of its work (helper h79).
//! docs/pool.md: a connection returned in a bad state (an open or failed transaction, a
//! half-read stream, a COPY in progress, a pipeline dropped mid-flight, replies still owed) is
//! reset or closed before the next borrower sees it; a write made through a pooled connection
//! is never silently dropped or repeated; a borrow never hangs past its timeout.
//!
//! The borrower's work (borrow, session dirt, autocommit insert, transaction with a half-read
//! stream, COPY in, a pipeline group, a pipeline group run but dropped unsynced, a stream left
//! half read) is wrapped in a future dropped
//! after its n-th poll, for every n until the work completes, on a one-connection pool, so
//! the drop lands at each await point in turn and the guard goes with the future. After each
//! drop the next borrower asks the server what it inherited.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use slipstream_pg::{FetchSize, TransactionStatus};
use slipstream_pool::{PgPool, Reset, Role};
use slipstream_testkit::Cluster;

/// A future dropped (with everything it holds) after its `polls`-th poll if still pending.
struct DropAfter<F> {
    inner: Pin<Box<F>>,
    polls: usize,
}

impl<F: Future> Future for DropAfter<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            return Poll::Ready(None);
        }
        self.polls -= 1;
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending if self.polls == 0 => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The writes of one run, and how many rows each leaves when it commits.
const WRITES: [(&str, i64); 4] = [("auto", 1), ("tx", 2), ("copy", 3), ("pipe", 2)];

/// Many rows, fetched ten per round trip: a stream read once is far from its end.
const ROWS: &str = "SELECT g FROM generate_series(1, 200000) g";

/// One borrower's work for run `run`; each write whose call returned `Ok` is pushed on `done`.
async fn work(pool: &PgPool, run: i32, done: &Mutex<Vec<&'static str>>) {
    let mut conn = pool.get(Role::Primary).await.unwrap();
    conn.batch_execute(
        "SET application_name = 'dirty'; LISTEN dirt; SELECT pg_advisory_lock(7); \
         CREATE TEMP TABLE IF NOT EXISTS dirt (x int)",
    )
    .await
    .unwrap();
    conn.execute("INSERT INTO w VALUES ($1, 'auto')", &[&run])
        .await
        .unwrap();
    done.lock().unwrap().push("auto");
    {
        let mut tx = conn.transaction().await.unwrap();
        tx.execute("INSERT INTO w VALUES ($1, 'tx')", &[&run])
            .await
            .unwrap();
        tx.execute("SET LOCAL work_mem = '7MB'", &[]).await.unwrap();
        {
            let mut rows = tx
                .query_stream_with(ROWS, &[], FetchSize::Rows(10))
                .await
                .unwrap();
            assert!(rows.next().await.unwrap().is_some());
        }
        tx.execute("INSERT INTO w VALUES ($1, 'tx')", &[&run])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    done.lock().unwrap().push("tx");
    {
        let mut copy = conn.copy_in("COPY w FROM STDIN").await.unwrap();
        for _ in 0..3 {
            copy.write(format!("{run}\tcopy\n").as_bytes())
                .await
                .unwrap();
        }
        assert_eq!(copy.finish().await.unwrap(), 3);
    }
    done.lock().unwrap().push("copy");
    {
        let mut p = conn.pipeline();
        p.execute("INSERT INTO w VALUES ($1, 'pipe')", &[&run])
            .await
            .unwrap();
        p.execute("SELECT pg_sleep(0.001)", &[]).await.unwrap();
        p.execute("INSERT INTO w VALUES ($1, 'pipe')", &[&run])
            .await
            .unwrap();
        for r in p.end().await {
            r.unwrap();
        }
    }
    done.lock().unwrap().push("pipe");
    {
        // An abort-mode group run on the server (its reply read) but never synced, then the
        // block dropped before `end`: abandoned, so none of it may ever commit.
        let mut p = conn.pipeline();
        let op = p
            .execute("INSERT INTO w VALUES ($1, 'open')", &[&run])
            .await
            .unwrap();
        assert_eq!(p.process(&op).await.unwrap(), 1);
    }
    conn.batch_execute("BEGIN; LOCK TABLE w IN SHARE MODE")
        .await
        .unwrap();
    let mut rows = conn
        .query_stream_with(ROWS, &[], FetchSize::Rows(10))
        .await
        .unwrap();
    assert!(rows.next().await.unwrap().is_some());
}

/// What the next borrower's session carries of the last one's, as the server sees it.
async fn inherited(pool: &PgPool, reset: Reset, left_at: &str) -> Vec<String> {
    let mut conn = tokio::time::timeout(Duration::from_secs(15), pool.get(Role::Primary))
        .await
        .expect("the next borrow hung")
        .expect("the next borrow failed");
    let mut dirt = Vec::new();
    if !conn.is_reusable() || conn.transaction_status() != TransactionStatus::Idle {
        dirt.push(format!(
            "client: reusable {} status {:?}",
            conn.is_reusable(),
            conn.transaction_status()
        ));
    }
    let row = conn
        .query_one(
            "SELECT now() > $1::text::timestamptz, \
             (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() \
              AND (locktype IN ('advisory', 'transactionid') \
                   OR relation = 'w'::regclass)), \
             (SELECT count(*) FROM pg_cursors WHERE name <> ''), \
             current_setting('application_name'), \
             (SELECT count(*) FROM pg_listening_channels()), \
             (SELECT count(*) FROM pg_class WHERE relname = 'dirt' AND relpersistence = 't' \
              AND pg_table_is_visible(oid)), \
             current_setting('work_mem')",
            &[&left_at],
        )
        .await
        .unwrap_or_else(|e| panic!("the next borrower's query failed: {e}"));
    let fresh: bool = row.get(0).unwrap();
    let locks: i64 = row.get(1).unwrap();
    let portals: i64 = row.get(2).unwrap();
    let app: String = row.get(3).unwrap();
    let listening: i64 = row.get(4).unwrap();
    let temp: i64 = row.get(5).unwrap();
    let work_mem: String = row.get(6).unwrap();
    if !fresh {
        dirt.push("ran inside an older transaction".into());
    }
    if work_mem != "4MB" {
        dirt.push(format!(
            "work_mem {work_mem} (a SET LOCAL outlived its transaction)"
        ));
    }
    if portals != 0 {
        dirt.push(format!("{portals} portals open"));
    }
    // The session's own state: only a session reset promises to clear it.
    let session = [
        (locks != 0, format!("{locks} locks held")),
        (app == "dirty", "application_name still set".into()),
        (listening != 0, "still listening".into()),
        (temp != 0, "temp table still there".into()),
    ];
    for (dirty, what) in session {
        if dirty && (reset == Reset::Session || what.contains("locks")) {
            // A rollback reset leaves session-level advisory locks by design; the relation
            // and transaction locks of a transaction are the last borrower's to lose.
            if reset != Reset::Session && what.contains("locks") {
                let held: i64 = conn
                    .query_one(
                        "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() \
                         AND (locktype = 'transactionid' OR relation = 'w'::regclass)",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0)
                    .unwrap();
                if held == 0 {
                    continue;
                }
            }
            dirt.push(what);
        }
    }
    dirt
}

/// Holds. Promise (docs/pool.md): whatever state a borrower's connection is in when the
/// borrower is dropped, the next borrower gets a session outside any transaction, with no
/// portal or transaction lock of the last one's, and under `Reset::Session` none of its
/// session state (settings, LISTEN, advisory locks, temp tables); each write that reported
/// `Ok` is there, and every write is there whole or not at all, never twice; a pipeline
/// group dropped unsynced never commits, whether the pool's reset or the work's end sends
/// what the client queued to abandon it.
///
/// Steps: a one-connection `PgPool` per reset mode; the work above dropped after its n-th
/// poll for n = 1, 2, ... until it completes; after each drop the next borrower checks its
/// session against the server, and the table is checked against what the work reported done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_a_borrower_dropped_at_every_await_point_leaves_nothing_to_the_next() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE w (run int, kind text)")
        .await
        .unwrap();
    let mut run = 0;
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
            .max_size(1)
            .reset_on_return(reset)
            .build_ready()
            .await
            .unwrap();
        let mut polls = 1;
        loop {
            run += 1;
            let done = Arc::new(Mutex::new(Vec::new()));
            let finished = tokio::time::timeout(
                Duration::from_secs(15),
                DropAfter {
                    inner: Box::pin(work(&pool, run, &done)),
                    polls,
                },
            )
            .await
            .unwrap_or_else(|_| panic!("{reset:?} run {run}: the work hung"))
            .is_some();
            // Every drop's reset has ended once the connection is back idle; the server's
            // clock then is earlier than any transaction the next borrower starts.
            common::until(
                Duration::from_secs(10),
                "the dropped borrower's connection back",
                || pool.servers()[0].stats.clone(),
                |s| s.borrowed == 0 && s.waiting == 0,
            )
            .await;
            let left_at: String = watcher
                .query_one("SELECT clock_timestamp()::text", &[])
                .await
                .unwrap()
                .get(0)
                .unwrap();
            let dirt = inherited(&pool, reset, &left_at).await;
            assert!(
                dirt.is_empty(),
                "{reset:?}, dropped after {polls} polls: the next borrower inherited {dirt:?}"
            );
            let done = done.lock().unwrap().clone();
            for (kind, whole) in WRITES {
                let n: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM w WHERE run = $1 AND kind = $2",
                        &[&run, &kind],
                    )
                    .await
                    .unwrap()
                    .get(0)
                    .unwrap();
                assert!(
                    n == 0 || n == whole,
                    "{reset:?}, dropped after {polls} polls: {n} of {whole} '{kind}' rows"
                );
                if done.contains(&kind) {
                    assert_eq!(
                        n, whole,
                        "{reset:?}, dropped after {polls} polls: '{kind}' reported done, lost"
                    );
                }
            }
            let open: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM w WHERE run = $1 AND kind = 'open'",
                    &[&run],
                )
                .await
                .unwrap()
                .get(0)
                .unwrap();
            assert_eq!(
                open, 0,
                "{reset:?}, dropped after {polls} polls: an abandoned pipeline group committed"
            );
            if finished {
                break;
            }
            polls += 1;
            assert!(polls < 400, "{reset:?}: the work never completes");
        }
        assert!(polls > 10, "{reset:?}: the work took only {polls} polls");
    }
}
