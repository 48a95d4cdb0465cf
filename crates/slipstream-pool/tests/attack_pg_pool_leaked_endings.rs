//! Attacks (helper h91) on what a future leaked (`std::mem::forget`, safe Rust) inside a
//! pooled connection leaves the pool's reset: slipstream-pg now writes a leaked `commit()`'s
//! rollback (`guard_ending`) and a leaked first run's unkept statement (`unkept`) down on the
//! connection, and the reset (`Reset::Rollback`, `Reset::Session`) must act on them before the
//! connection is lent again. docs/pool.md, "Resets"; docs/client.md, "Cancellation and
//! timeouts".

use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;

use slipstream_pg::TransactionStatus;
use slipstream_pool::{PgManager, Pool, Reset};
use slipstream_testkit::Cluster;

/// Polls `f` once, with a waker that does nothing, and returns whether it was still pending.
fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    f.poll(&mut cx).is_pending()
}

/// Held. Promise (client.md: a leaked `commit()` "never leaves a transaction nobody holds"
/// and never commits what the caller gave up; a call leaked during its type lookup leaves no
/// statement on the server the cache does not know; pool.md: a connection returned inside a
/// transaction is rolled back before it is lent), across the pool's reset.
///
/// Steps, for `Reset::Rollback` and `Reset::Session`, a one-connection pool: a borrower opens
/// a transaction (inserts -1) and savepoint `s` in it (inserts -2), drops a slow call with its
/// reply owed, leaks `s.commit()` and then the transaction's `commit()` at their first poll
/// (two leaks in a row, depth 1 then depth 0), then leaks a first run of new SQL naming an
/// enum at its third poll (its type lookup in flight), and returns the connection. The next borrower must get an
/// idle connection within 15 s that answers in step; another session must see neither -1
/// nor -2; the server must hold no more prepared statements than the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_endings_and_lookups_in_a_pooled_connection_are_undone_by_the_reset() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE t (x int); CREATE TYPE mood AS ENUM ('ok')")
        .await
        .unwrap();
    for reset in [Reset::Rollback, Reset::Session] {
        let manager = PgManager::new(cluster.url().parse().unwrap()).reset_on_return(reset);
        let pool = Pool::builder(manager).max_size(1).build();
        {
            let mut conn = pool.get().await.unwrap();
            let mut tx = conn.transaction().await.unwrap();
            tx.execute("INSERT INTO t VALUES (-1)", &[]).await.unwrap();
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES (-2)", &[]).await.unwrap();
            {
                let mut slow = Box::pin(sp.execute("SELECT pg_sleep(0.3)", &[]));
                assert!(poll_once(slow.as_mut()), "pg_sleep(0.3) answered at once");
            }
            let mut inner = Box::pin(sp.commit());
            assert!(poll_once(inner.as_mut()), "s.commit() settles first");
            std::mem::forget(inner);
            let mut outer = Box::pin(tx.commit());
            assert!(poll_once(outer.as_mut()), "commit() settles first");
            std::mem::forget(outer);
            let mut first_run = Box::pin(conn.query("SELECT $1::int4, 'ok'::mood", &[&1i32]));
            // Its first poll settles what the leaks left, the second sends the query once that
            // is read, the third its type lookup once the query's reply is in.
            for poll in 1..=3 {
                assert!(
                    poll_once(first_run.as_mut()),
                    "{reset:?}: the first run finished at poll {poll}, before its type lookup"
                );
                // The first wait outlasts the slow call's pg_sleep.
                let wait = if poll == 1 { 500 } else { 50 };
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            std::mem::forget(first_run);
        }
        let mut conn = tokio::time::timeout(Duration::from_secs(15), pool.get())
            .await
            .expect("the borrow after the leaks hung")
            .unwrap();
        assert_eq!(
            conn.transaction_status(),
            TransactionStatus::Idle,
            "{reset:?}: lent inside the transaction a leaked commit() left"
        );
        let one: i32 = conn
            .query_one("SELECT 1", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(one, 1);
        let kept: i64 = watcher
            .query_one("SELECT count(*) FROM t WHERE x < 0", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(
            kept, 0,
            "{reset:?}: work whose commit() was leaked was kept"
        );
        let on_server: i64 = conn
            .query_one("SELECT count(*) FROM pg_prepared_statements", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        let cached = conn.statement_cache_stats().size as i64;
        assert!(
            on_server <= cached,
            "{reset:?}: {on_server} statements on the server, {cached} in the cache"
        );
    }
}
