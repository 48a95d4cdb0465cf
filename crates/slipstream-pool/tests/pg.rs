//! The pool over real PostgreSQL connections (testkit clusters).

use std::time::Duration;

use slipstream_pool::{Labeling, Labels, PgManager, Pool, Reset};
use slipstream_testkit::Cluster;

fn pool(cluster: &Cluster, max: usize) -> Pool<PgManager> {
    let config = cluster.url().parse().expect("the testkit's URL parses");
    Pool::builder(PgManager::new(config))
        .max_size(max)
        .borrow_timeout(Duration::from_secs(10))
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_tasks_share_four_connections_and_their_statement_caches() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 4);
    let tasks: Vec<_> = (0..50)
        .map(|k| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for i in 0..20i32 {
                    let mut conn = pool.get().await.unwrap();
                    let row = conn
                        .query_one("SELECT $1::int4 + $2", &[&k, &i])
                        .await
                        .unwrap();
                    assert_eq!(row.get::<_, i32>(0).unwrap(), k + i);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.borrows, 1000);
    assert!(s.opened <= 4, "{s:?}");
    // Each connection prepared the statement once and reused it for later borrowers.
    let conn = pool.get().await.unwrap();
    let cache = conn.statement_cache_stats();
    assert_eq!(cache.misses, 1, "{cache:?}");
    assert!(cache.hits > 0, "{cache:?}");
}

#[tokio::test]
async fn a_connection_returned_inside_a_transaction_is_rolled_back_then_lent() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 1);
    let mut conn = pool.get().await.unwrap();
    conn.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let first = conn.backend_pid();
    conn.batch_execute("BEGIN; INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    drop(conn);
    let mut conn = pool.get().await.unwrap();
    assert_eq!(
        conn.backend_pid(),
        first,
        "the same connection, rolled back"
    );
    assert_eq!(
        conn.transaction_status(),
        slipstream_pg::TransactionStatus::Idle
    );
    let n: i64 = conn
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0, "the insert was rolled back");
    let s = pool.stats();
    assert_eq!((s.resets, s.closed_broken), (1, 0), "{s:?}");
}

#[tokio::test]
async fn without_reset_a_connection_left_in_a_transaction_is_closed_not_lent() {
    let cluster = Cluster::start().unwrap();
    let manager = PgManager::new(cluster.url().parse().unwrap()).reset_on_return(Reset::None);
    let pool = Pool::builder(manager).max_size(1).build();
    let mut conn = pool.get().await.unwrap();
    let first = conn.backend_pid();
    conn.batch_execute("BEGIN").await.unwrap();
    drop(conn);
    let mut conn = pool.get().await.unwrap();
    assert_ne!(conn.backend_pid(), first, "a fresh connection");
    conn.batch_execute("SELECT 1").await.unwrap();
    assert_eq!(pool.stats().closed_broken, 1);

    // A dropped Transaction guard queues its ROLLBACK in the client, but the session is still
    // inside the transaction (holding its locks) until that goes out: closed too. (Until
    // session 43 it was kept, and sat in the pool inside the transaction:
    // tests/attack_pg_pool_resets.rs.)
    let pid = conn.backend_pid();
    {
        let tx = conn.transaction().await.unwrap();
        drop(tx);
    }
    drop(conn);
    let conn = pool.get().await.unwrap();
    assert_ne!(conn.backend_pid(), pid, "a fresh connection");
    assert_eq!(pool.stats().closed_broken, 2);
}

#[tokio::test]
async fn a_session_reset_clears_settings_but_keeps_the_statement_cache() {
    let cluster = Cluster::start().unwrap();
    let manager = PgManager::new(cluster.url().parse().unwrap()).reset_on_return(Reset::Session);
    let pool = Pool::builder(manager).max_size(1).build();
    let mut conn = pool.get().await.unwrap();
    conn.batch_execute("SET work_mem = '7MB'; CREATE TEMP TABLE scratch (x int)")
        .await
        .unwrap();
    let _: i32 = conn
        .query_one("SELECT $1::int4", &[&1i32])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    drop(conn);
    let mut conn = pool.get().await.unwrap();
    let work_mem: String = conn
        .query_one("SHOW work_mem", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(work_mem, "4MB", "RESET ALL ran");
    let temp: i64 = conn
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = 'scratch'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(temp, 0, "DISCARD TEMP ran");
    // The statement prepared by the first borrower is still there for the second.
    let _: i32 = conn
        .query_one("SELECT $1::int4", &[&2i32])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    let cache = conn.statement_cache_stats();
    assert_eq!((cache.hits, cache.reprepares), (1, 0), "{cache:?}");
    assert_eq!(pool.stats().resets, 1);
}

mod common;

/// Waits until `pool`'s stats satisfy `done`, failing after 10 s.
async fn until(pool: &Pool<PgManager>, what: &str, done: impl Fn(&slipstream_pool::Stats) -> bool) {
    common::until(Duration::from_secs(10), what, || pool.stats(), done).await;
}

#[tokio::test]
async fn a_connection_held_past_its_time_to_live_is_cancelled_closed_and_replaced() {
    let cluster = Cluster::start().unwrap();
    let pool = Pool::builder(PgManager::new(cluster.url().parse().unwrap()))
        .max_size(1)
        .time_to_live(Duration::from_millis(300))
        .build();
    let mut conn = pool.get().await.unwrap();
    let pid = conn.backend_pid();
    let start = std::time::Instant::now();
    // Busy the whole time: time-to-live does not care.
    let err = conn.batch_execute("SELECT pg_sleep(30)").await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), slipstream_pg::ErrorKind::Closed, "{err}");
    assert!(err.to_string().contains("time_to_live"), "{err}");
    let again = conn.batch_execute("SELECT 1").await.unwrap_err();
    assert!(again.to_string().contains("time_to_live"), "{again}");
    // The slot was freed while the guard was still held: a new connection is lent now.
    let mut fresh = pool.get().await.unwrap();
    assert_ne!(fresh.backend_pid(), pid);
    fresh.batch_execute("SELECT 1").await.unwrap();
    // The old backend is gone (cancelled, then saw its socket closed).
    assert!(
        cluster
            .backend_gone_within(pid, Duration::from_secs(10))
            .unwrap(),
        "backend {pid} lives on"
    );
    drop(conn); // returning a reclaimed guard does not touch the slot it lost
    drop(fresh);
    let s = pool.stats();
    assert_eq!((s.reclaimed_ttl, s.open, s.idle), (1, 1, 1), "{s:?}");
}

#[tokio::test]
async fn an_abandoned_connection_is_reclaimed_but_a_busy_one_is_not() {
    let cluster = Cluster::start().unwrap();
    let pool = Pool::builder(PgManager::new(cluster.url().parse().unwrap()))
        .max_size(2)
        .abandoned_timeout(Duration::from_millis(300))
        .build();
    let mut forgotten = pool.get().await.unwrap();
    forgotten.batch_execute("SELECT 1").await.unwrap();
    let mut busy = pool.get().await.unwrap();
    // `busy` runs short statements back to back for a second: never idle for 300 ms.
    for _ in 0..10 {
        busy.batch_execute("SELECT pg_sleep(0.1)").await.unwrap();
    }
    until(&pool, "the forgotten connection reclaimed", |s| {
        s.reclaimed_abandoned == 1
    })
    .await;
    let err = forgotten.batch_execute("SELECT 1").await.unwrap_err();
    assert!(err.to_string().contains("abandoned_timeout"), "{err}");
    busy.batch_execute("SELECT 1").await.unwrap();
    let attrs = pool.connections();
    assert!(
        attrs
            .iter()
            .any(|c| c.borrowed && c.since_active < Duration::from_millis(300))
    );
    assert_eq!(pool.stats().reclaimed_abandoned, 1);
}

/// Labels are a `search_path`: reconfiguring costs a `SET`.
struct SearchPath;

impl Labeling<slipstream_pg::Client> for SearchPath {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        if wanted == current { 0 } else { 1 }
    }
    async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        let schema = &wanted["schema"];
        conn.batch_execute(&format!("SET search_path = {schema}"))
            .await
            .is_ok()
    }
}

fn schema(name: &str) -> Labels {
    Labels::from([("schema".to_string(), name.to_string())])
}

#[tokio::test]
async fn a_labeled_borrow_gets_the_connection_already_set_up_for_it() {
    let cluster = Cluster::start().unwrap();
    cluster
        .psql(
            "CREATE SCHEMA a; CREATE SCHEMA b; CREATE TABLE a.t AS SELECT 'a'::text AS s; \
               CREATE TABLE b.t AS SELECT 'b'::text AS s;",
        )
        .unwrap();
    let pool = Pool::builder(PgManager::new(cluster.url().parse().unwrap()))
        .max_size(2)
        .build();
    let (mut first, mut second) = (
        pool.get_labeled(&schema("a"), &SearchPath).await.unwrap(),
        pool.get_labeled(&schema("b"), &SearchPath).await.unwrap(),
    );
    let (pid_a, pid_b) = (first.backend_pid(), second.backend_pid());
    let a: String = first
        .query_one("SELECT s FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    let b: String = second
        .query_one("SELECT s FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("a", "b"));
    drop((first, second));
    assert_eq!(pool.stats().label_configures, 2);
    // Each schema's borrow now finds its own connection at cost 0, whatever order.
    for _ in 0..5 {
        let conn = pool.get_labeled(&schema("b"), &SearchPath).await.unwrap();
        assert_eq!(conn.backend_pid(), pid_b);
        drop(conn);
        let conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
        assert_eq!(conn.backend_pid(), pid_a);
    }
    assert_eq!(pool.stats().label_configures, 2, "no reconfiguration");
    // With `a`'s connection held, a borrow for `a` takes `b`'s and reconfigures it.
    let held = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
    let mut other = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
    assert_eq!(other.backend_pid(), pid_b);
    let s: String = other
        .query_one("SELECT s FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(s, "a");
    assert_eq!(*other.labels(), schema("a"));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_borrows_validate_too() {
    let mut cluster = Cluster::start().unwrap();
    let pool = Pool::builder(PgManager::new(cluster.url().parse().unwrap()))
        .max_size(1)
        .validate_after(Duration::ZERO)
        .build();
    pool.get()
        .await
        .unwrap()
        .batch_execute("SELECT 1")
        .await
        .unwrap();
    cluster.restart().unwrap();
    let p = pool.clone();
    let pid = tokio::task::spawn_blocking(move || p.get_blocking().map(|c| c.backend_pid()))
        .await
        .unwrap()
        .unwrap();
    let mut conn = pool.get().await.unwrap();
    assert_eq!(conn.backend_pid(), pid);
    conn.batch_execute("SELECT 1")
        .await
        .expect("a validated connection");
    assert_eq!(pool.stats().failed_validation, 1);
}

#[tokio::test]
async fn the_pool_survives_a_server_restart() {
    let mut cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 2);
    {
        let (mut a, mut b) = (pool.get().await.unwrap(), pool.get().await.unwrap());
        a.batch_execute("SELECT 1").await.unwrap();
        b.batch_execute("SELECT 1").await.unwrap();
    }
    cluster.restart().unwrap();
    // The idle connections died with the old server: each fails once, clearly, and is
    // replaced when it comes back broken. Nothing hangs.
    let mut failures = 0;
    let mut ok = false;
    for _ in 0..5 {
        let mut conn = pool.get().await.unwrap();
        match conn.batch_execute("SELECT 1").await {
            Ok(()) => {
                ok = true;
                break;
            }
            Err(e) => {
                assert!(
                    e.is_closed()
                        || e.kind() == slipstream_pg::ErrorKind::Io
                        || e.as_db_error().is_some(),
                    "{e}"
                );
                failures += 1;
            }
        }
    }
    assert!(ok, "a query succeeds again after {failures} failures");
    assert!(
        failures <= 2,
        "at most one failure per stale connection: {failures}"
    );
    assert!(pool.stats().closed_broken as usize >= failures);
}

#[tokio::test]
async fn with_validation_a_borrower_never_sees_a_connection_killed_by_a_restart() {
    let mut cluster = Cluster::start().unwrap();
    let config = cluster.url().parse().expect("the testkit's URL parses");
    let pool = Pool::builder(PgManager::new(config))
        .max_size(2)
        .validate_after(Duration::ZERO)
        .borrow_timeout(Duration::from_secs(10))
        .build();
    {
        let (mut a, mut b) = (pool.get().await.unwrap(), pool.get().await.unwrap());
        a.batch_execute("SELECT 1").await.unwrap();
        b.batch_execute("SELECT 1").await.unwrap();
    }
    cluster.restart().unwrap();
    for _ in 0..4 {
        let mut conn = pool.get().await.unwrap();
        conn.batch_execute("SELECT 1")
            .await
            .expect("validation replaced the dead connection before lending it");
    }
    assert_eq!(pool.stats().failed_validation, 2, "{:?}", pool.stats());
}

/// The server ends an idle connection's session (`pg_terminate_backend`; a shutdown or an
/// idle timeout does the same): the pool does not lend it, so no borrower's first statement
/// is the one to find out. Before the pool looked (`Manager::closed_while_idle`), each borrow
/// path below lent the dead connection and its first statement failed with 57P01.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_session_ended_while_idle_is_not_lent() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 1);
    for (round, how) in ["get", "get_blocking", "try_get"].into_iter().enumerate() {
        let pid = pool.get().await.unwrap().backend_pid();
        common::terminate(&cluster, pid).await;
        let mut conn = match how {
            "get" => pool.get().await.unwrap(),
            "get_blocking" => {
                let p = pool.clone();
                tokio::task::spawn_blocking(move || p.get_blocking())
                    .await
                    .unwrap()
                    .unwrap()
            }
            _ => {
                // The only connection was found closed: none idle now; the opener brings a
                // fresh one.
                assert!(pool.try_get().is_none(), "try_get lent a closed connection");
                pool.get().await.unwrap()
            }
        };
        assert_ne!(conn.backend_pid(), pid, "{how}");
        conn.batch_execute("SELECT 1")
            .await
            .unwrap_or_else(|e| panic!("{how} lent a connection the server had closed: {e}"));
        assert_eq!(pool.stats().failed_validation, round as u64 + 1, "{how}");
        // Counted once, as what it was: not also as a broken connection returned (session
        // 37's attacker saw closed_broken 113 and failed_validation 113 for 113 closes).
        assert_eq!(pool.stats().closed_broken, 0, "{how}");
    }
}

/// PgPool: the same, and the server stays in rotation (the probe that the closed connection
/// asks for finds it up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pool_does_not_lend_a_connection_whose_session_ended_while_idle() {
    let cluster = Cluster::start().unwrap();
    let pool = slipstream_pool::PgPool::builder(cluster.url().parse().unwrap())
        .max_size(1)
        .build_ready()
        .await
        .unwrap();
    let pid = pool
        .get(slipstream_pool::Role::Any)
        .await
        .unwrap()
        .backend_pid();
    common::terminate(&cluster, pid).await;
    let mut conn = pool.get(slipstream_pool::Role::Any).await.unwrap();
    assert_ne!(conn.backend_pid(), pid);
    conn.batch_execute("SELECT 1")
        .await
        .expect("PgPool lent a connection the server had closed");
    drop(conn);
    assert!(pool.servers().iter().all(|s| s.up), "{:?}", pool.servers());
}
