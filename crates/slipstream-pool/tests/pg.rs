//! The pool over real PostgreSQL connections (testkit clusters).

use std::time::Duration;

use slipstream_pool::{PgManager, Pool};
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
async fn a_connection_returned_inside_a_transaction_is_closed_not_lent() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, 1);
    let mut conn = pool.get().await.unwrap();
    let first = conn.backend_pid();
    conn.batch_execute("BEGIN").await.unwrap();
    drop(conn);
    let mut conn = pool.get().await.unwrap();
    assert_ne!(
        conn.backend_pid(),
        first,
        "a fresh connection, not the one mid-transaction"
    );
    assert_eq!(
        conn.transaction_status(),
        slipstream_pg::TransactionStatus::Idle
    );
    conn.batch_execute("SELECT 1").await.unwrap();
    assert_eq!(pool.stats().closed_broken, 1);

    // A dropped Transaction guard queues its ROLLBACK: that connection is kept.
    let pid = conn.backend_pid();
    {
        let tx = conn.transaction().await.unwrap();
        drop(tx);
    }
    drop(conn);
    let conn = pool.get().await.unwrap();
    assert_eq!(conn.backend_pid(), pid);
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
