//! Attacks on what a `PgPool` connection carries from one borrower to the next (session 43,
//! helper 46). docs/pool.md: a connection left inside a transaction is rolled back before it
//! is lent again (`Reset::Rollback`), or also session-reset (`Reset::Session`), or closed
//! (`Reset::None`); one "returned with replies still owed ... is never judged on the
//! transaction status from before that call": the reset cancels, settles, then rolls back.

mod common;

use std::time::Duration;

use slipstream_pg::{FetchSize, TransactionStatus};
use slipstream_pool::{PgPool, Reset, Role};
use slipstream_testkit::Cluster;

/// Many rows, fetched ten per round trip: a stream read once is far from its end.
const ROWS: &str = "SELECT g FROM generate_series(1, 200000) g";

/// How a borrower leaves its connection.
#[derive(Debug, Clone, Copy)]
enum Left {
    /// A row stream read once and dropped, in autocommit (its implicit transaction and
    /// portal still open on the server).
    HalfReadStream,
    /// The same inside an explicit `BEGIN`.
    HalfReadStreamInTransaction,
    /// A transaction failed by an error and left so.
    FailedTransaction,
    /// A half-read stream inside a `BEGIN`, and the borrowing task panics.
    PanicHoldingAStream,
}

async fn leave(pool: &PgPool, left: Left) {
    let mut conn = pool.get(Role::Primary).await.unwrap();
    match left {
        Left::HalfReadStream => {
            let mut rows = conn
                .query_stream_with(ROWS, &[], FetchSize::Rows(10))
                .await
                .unwrap();
            assert!(rows.next().await.unwrap().is_some());
        }
        Left::HalfReadStreamInTransaction => {
            conn.batch_execute("BEGIN").await.unwrap();
            let mut rows = conn
                .query_stream_with(ROWS, &[], FetchSize::Rows(10))
                .await
                .unwrap();
            assert!(rows.next().await.unwrap().is_some());
        }
        Left::FailedTransaction => {
            conn.batch_execute("BEGIN").await.unwrap();
            assert!(conn.batch_execute("SELECT 1/0").await.is_err());
            assert_eq!(conn.transaction_status(), TransactionStatus::Failed);
        }
        Left::PanicHoldingAStream => {
            drop(conn);
            let pool = pool.clone();
            let panicked = tokio::spawn(async move {
                let mut conn = pool.get(Role::Primary).await.unwrap();
                conn.batch_execute("BEGIN").await.unwrap();
                let mut rows = conn
                    .query_stream_with(ROWS, &[], FetchSize::Rows(10))
                    .await
                    .unwrap();
                assert!(rows.next().await.unwrap().is_some());
                panic!("the borrower panics holding a half-read stream in a transaction");
            })
            .await;
            assert!(panicked.unwrap_err().is_panic());
        }
    }
}

/// Holds. Promise: whatever the reset mode, the next borrower gets a connection with no
/// transaction, no portal and no snapshot of the last one's, and no reply left to read; under
/// `Rollback` and `Session` it is the same session (reset, not closed), under `None` a new one.
///
/// Steps: a one-connection `PgPool` per mode; for each way of leaving a connection (a row
/// stream read once and dropped in autocommit and in a `BEGIN`, a failed transaction, a task
/// panicking with a half-read stream in a `BEGIN`), the next borrower checks its transaction
/// status, `pg_cursors` (named portals: a stream's), that its transaction began after the last borrower left
/// (`now()` against the server's clock read then), and its backend pid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_read_stream_or_failed_transaction_reaches_no_next_borrower() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
            .max_size(1)
            .reset_on_return(reset)
            .build_ready()
            .await
            .unwrap();
        for left in [
            Left::HalfReadStream,
            Left::HalfReadStreamInTransaction,
            Left::FailedTransaction,
            Left::PanicHoldingAStream,
        ] {
            let pid = pool.get(Role::Primary).await.unwrap().backend_pid();
            tokio::time::timeout(Duration::from_secs(30), leave(&pool, left))
                .await
                .unwrap_or_else(|_| panic!("{reset:?} {left:?}: leaving hung"));
            // The server's clock once the borrower has left: a transaction the next borrower
            // starts is later.
            let left_at: String = watcher
                .query_one("SELECT clock_timestamp()::text", &[])
                .await
                .unwrap()
                .get(0)
                .unwrap();
            let mut conn = tokio::time::timeout(Duration::from_secs(30), pool.get(Role::Primary))
                .await
                .unwrap_or_else(|_| panic!("{reset:?} {left:?}: the next borrow hung"))
                .unwrap();
            assert!(conn.is_reusable(), "{reset:?} {left:?}");
            assert_eq!(
                conn.transaction_status(),
                TransactionStatus::Idle,
                "{reset:?} {left:?}"
            );
            let row = conn
                .query_one(
                    // The unnamed portal is this query's own.
                    "SELECT (SELECT count(*) FROM pg_cursors WHERE name <> ''), \
                     now() > $1::text::timestamptz, \
                     (SELECT string_agg(name || ': ' || statement, '; ') FROM pg_cursors \
                      WHERE name <> '')",
                    &[&left_at],
                )
                .await
                .unwrap_or_else(|e| panic!("{reset:?} {left:?}: the next borrower's query: {e}"));
            let (portals, fresh): (i64, bool) = (row.get(0).unwrap(), row.get(1).unwrap());
            let which: Option<String> = row.get(2).unwrap();
            assert_eq!(
                portals, 0,
                "{reset:?} {left:?}: portals left open: {which:?}"
            );
            assert!(
                fresh,
                "{reset:?} {left:?}: the next borrower ran inside an older transaction"
            );
            let same_session = conn.backend_pid() == pid;
            assert_eq!(
                same_session,
                reset != Reset::None,
                "{reset:?} {left:?}: kept (reset) under Rollback and Session, closed under None"
            );
        }
        // The last return's reset runs on the pool's task; its slot counts as borrowed until
        // it ends.
        common::until(
            Duration::from_secs(10),
            "every connection back, none waiting",
            || pool.servers()[0].stats.clone(),
            |s| (s.borrowed, s.waiting, s.open) == (0, 0, 1),
        )
        .await;
    }
}

/// The number of other sessions idle inside a transaction.
async fn idle_in_transaction(watcher: &mut slipstream_pg::Client) -> i64 {
    watcher
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
        .unwrap()
}

/// Promise (docs/pool.md): a connection "left inside a transaction is rolled back on the
/// pool's task before it is lent again (`Reset::Rollback`, the default)"; under `Reset::None`
/// such a connection "is closed instead of lent again". Either way, no session sits in the pool
/// inside the last borrower's transaction, holding its locks.
///
/// Steps: a two-connection `PgPool` per mode; a borrower updates a row in a
/// `Client::transaction` and drops it uncommitted (an early return, a `?`), then returns the
/// connection. Within 10 s no session may be idle in a transaction, and another session's
/// update of that row (lock_timeout 5 s) must go through.
///
/// Before the fix: the dropped `Transaction` queues its `ROLLBACK` in the client, to go out
/// with the connection's next request, and `Client::is_reusable` counts that as out of the
/// transaction; so the pool put the connection back idle with no reset (or, under `None`,
/// kept it). The server session stayed "idle in transaction" holding the row lock for as long
/// as the connection sat in the pool: here for ever, the other session's update failing on
/// its lock timeout (a borrower of the other pooled connection would wait the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_holds_no_lock_while_its_connection_sits_in_the_pool() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, n int); INSERT INTO t VALUES (1, 0)")
        .await
        .unwrap();
    for reset in [Reset::Rollback, Reset::None] {
        let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
            .max_size(2)
            .reset_on_return(reset)
            .build_ready()
            .await
            .unwrap();
        {
            let mut conn = pool.get(Role::Primary).await.unwrap();
            let mut tx = conn.transaction().await.unwrap();
            tx.execute("UPDATE t SET n = n + 1 WHERE id = 1", &[])
                .await
                .unwrap();
            // Dropped uncommitted, then the connection goes back.
        }
        let mut left = idle_in_transaction(&mut watcher).await;
        for _ in 0..200 {
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = idle_in_transaction(&mut watcher).await;
        }
        let update = watcher
            .batch_execute(
                "SET lock_timeout = '5s'; UPDATE t SET n = n + 10 WHERE id = 1; \
                 RESET lock_timeout",
            )
            .await;
        assert!(
            left == 0 && update.is_ok(),
            "{reset:?}: a returned connection sits in the pool inside its dropped \
             transaction ({left} idle in transaction), holding its row lock: {update:?}"
        );
        let n: i32 = watcher
            .query_one("SELECT n FROM t WHERE id = 1", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(
            n % 10,
            0,
            "{reset:?}: the dropped transaction's update was kept"
        );
        // The pool still lends.
        pool.get(Role::Primary)
            .await
            .unwrap()
            .batch_execute("SELECT 1")
            .await
            .unwrap();
    }
}
