//! Attacks on the pool across a server restart and a terminated session (session 41): the
//! server stops while connections are lent, while borrowers wait in the queue and while the
//! opener connects; a borrowed session is terminated in the middle of a transaction. Each
//! checks that every waiter gets a working connection or a clear error within its borrow
//! timeout (never a hang), that no borrower is lent a dead session, and that nothing leaks
//! (the pool's counts and the server's sessions agree at the end).

mod common;

use std::time::Duration;

use common::{until, until_waiting};
use slipstream_pool::{PgManager, Pool, PoolError};
use slipstream_testkit::Cluster;

const LIMIT: Duration = Duration::from_secs(20);

fn pool(cluster: &Cluster, max: usize, timeout: Duration) -> Pool<PgManager> {
    let config = cluster.url().parse().expect("the testkit's URL parses");
    Pool::builder(PgManager::new(config))
        .max_size(max)
        .borrow_timeout(timeout)
        .build()
}

/// Client sessions on the server other than the asking one.
async fn sessions(cluster: &Cluster) -> i64 {
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
         AND pid <> pg_backend_pid()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
    .unwrap()
}

/// Waits (bounded) until the server's client sessions are the pool's open connections: a
/// connect the opener started for a waiter served meanwhile may still be under way.
async fn sessions_match(cluster: &Cluster, pool: &Pool<PgManager>) {
    let start = std::time::Instant::now();
    loop {
        let (n, s) = (sessions(cluster).await, pool.stats());
        if n == s.open as i64 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{n} sessions on the server, the pool counts {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Spawns `n` borrowers that each borrow once and run `SELECT 1` on what they get.
fn waiters(
    pool: &Pool<PgManager>,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<Result<(), slipstream_pg::Error>, PoolError>>> {
    (0..n)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut conn = pool.get().await?;
                Ok(conn.batch_execute("SELECT 1").await)
            })
        })
        .collect()
}

/// The server stops while both connections are lent (one inside a transaction) and six
/// borrowers wait; the holders return them while it is down; it starts again. Every waiter
/// gets a working connection within its borrow timeout: neither returned session (both ended
/// by the shutdown) is lent, and the pool ends with no more sessions than `max_size`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_lent_and_waited_for_serves_every_waiter_a_live_session() {
    let mut cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 2, LIMIT);
    let mut a = pool.get().await.unwrap();
    let mut b = pool.get().await.unwrap();
    a.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    a.batch_execute("BEGIN; INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    b.batch_execute("SELECT 1").await.unwrap();
    let waiting = waiters(&pool, 6);
    until_waiting(&pool, 6).await;
    cluster.stop().unwrap();
    drop(a);
    drop(b);
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.restart().unwrap();
    for w in waiting {
        let got = tokio::time::timeout(LIMIT + Duration::from_secs(5), w)
            .await
            .unwrap_or_else(|_| panic!("a waiter hung: {:?}", pool.stats()))
            .unwrap();
        got.expect("a waiter got no connection")
            .expect("a waiter was lent a dead session");
    }
    let s = common::all_back(&pool).await;
    assert!(s.open <= 2, "{s:?}");
    sessions_match(&cluster, &pool).await;
    let mut c = pool.get().await.unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0, "the transaction the restart ended committed");
}

/// The server is down while borrowers queue, so the opener's connects fail; it comes back
/// within their borrow timeout, and every one of them is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrowers_queued_while_the_server_is_down_are_served_when_it_returns() {
    let mut cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 3, LIMIT);
    drop(pool.get().await.unwrap());
    cluster.stop().unwrap();
    let waiting = waiters(&pool, 8);
    until(
        Duration::from_secs(10),
        "the opener fails to connect",
        || pool.stats(),
        |s| s.connect_failures >= 2,
    )
    .await;
    cluster.restart().unwrap();
    for w in waiting {
        let got = tokio::time::timeout(LIMIT + Duration::from_secs(5), w)
            .await
            .unwrap_or_else(|_| panic!("a waiter hung: {:?}", pool.stats()))
            .unwrap();
        got.expect("a waiter got no connection")
            .expect("a waiter was lent a dead session");
    }
    common::all_back(&pool).await;
    sessions_match(&cluster, &pool).await;
}

/// The server stays down: the queued borrowers fail with a timeout that names the connect
/// error, within their borrow timeout, and the pool holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrowers_of_a_server_that_stays_down_fail_naming_why() {
    let mut cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 2, Duration::from_millis(1500));
    drop(pool.get().await.unwrap());
    cluster.stop().unwrap();
    for w in waiters(&pool, 4) {
        let got = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .unwrap_or_else(|_| panic!("a waiter hung: {:?}", pool.stats()))
            .unwrap();
        let e = got.expect_err("a waiter was served by a stopped server");
        assert!(matches!(e, PoolError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("opening"), "{e}");
    }
    let s = pool.stats();
    assert_eq!((s.open, s.borrowed, s.waiting), (0, 0, 0), "{s:?}");
}

/// A borrowed session terminated in the middle of a transaction, its guard dropped with or
/// without a statement having failed on it, and with a borrower already waiting: the slot is
/// freed and refilled, the next borrower gets a live session, and the transaction's write is
/// gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_terminated_mid_transaction_while_lent_is_replaced_not_lent() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 1, LIMIT);
    pool.get()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE t (x int)")
        .await
        .unwrap();
    for (round, use_it) in [(0, false), (1, true), (2, false), (3, true)] {
        let mut conn = pool.get().await.unwrap();
        conn.batch_execute("BEGIN; INSERT INTO t VALUES (1)")
            .await
            .unwrap();
        let pid = conn.backend_pid();
        let waiting = (round >= 2).then(|| waiters(&pool, 1));
        if waiting.is_some() {
            until_waiting(&pool, 1).await;
        }
        common::terminate(&cluster, pid).await;
        if use_it {
            conn.batch_execute("INSERT INTO t VALUES (2)")
                .await
                .expect_err("a statement on a terminated session succeeded");
        }
        drop(conn);
        for w in waiting.into_iter().flatten() {
            tokio::time::timeout(LIMIT, w)
                .await
                .expect("the waiter hung")
                .unwrap()
                .expect("the waiter got no connection")
                .expect("the waiter was lent the terminated session");
        }
        let mut next = pool.get().await.unwrap();
        assert_ne!(next.backend_pid(), pid, "round {round}");
        let n: i64 = next
            .query_one("SELECT count(*) FROM t", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(n, 0, "round {round}");
    }
    let s = common::all_back(&pool).await;
    assert_eq!(s.open, 1, "{s:?}");
    sessions_match(&cluster, &pool).await;
}
