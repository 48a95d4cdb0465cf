//! Attacks on the pool's round trips to a server that stops answering (session 41): a hung
//! host or a cut network path, played by the testkit's proxy holding every byte. A borrow
//! must end within its borrow timeout whatever the server does, and a connection the pool
//! works on by itself (a reset) must not hold its slot for as long as the silence lasts.

mod common;

use std::time::Duration;

use common::until;
use slipstream_pool::{Labeling, Labels, PgManager, Pool, PoolError, Reset};
use slipstream_testkit::{Cluster, DelayProxy};

/// A proxy in front of `cluster` that adds nothing until stalled.
fn proxy(cluster: &Cluster) -> DelayProxy {
    DelayProxy::start(
        format!("127.0.0.1:{}", cluster.port()).parse().unwrap(),
        Duration::ZERO,
    )
    .unwrap()
}

fn pool_via(proxy: &DelayProxy, reset: Reset) -> slipstream_pool::Builder<PgManager> {
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    Pool::builder(PgManager::new(url.parse().unwrap()).reset_on_return(reset)).max_size(1)
}

/// A borrow that validates an idle connection (`validate_after`) over a path that stopped
/// answering fails with a timeout within its borrow timeout, async and blocking, and the
/// connection it could not validate is not lent afterwards. Before, the validation's round
/// trip had no bound: the borrow hung for as long as the silence (here, for ever), far past
/// its borrow timeout of 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_the_server_never_answers_ends_within_the_borrow_timeout() {
    let cluster = Cluster::start().unwrap();
    let proxy = proxy(&cluster);
    let pool = pool_via(&proxy, Reset::Rollback)
        .validate_after(Duration::ZERO)
        .borrow_timeout(Duration::from_secs(1))
        .build();
    drop(pool.get().await.unwrap());
    proxy.set_stalled(true);
    let got = tokio::time::timeout(Duration::from_secs(10), pool.get())
        .await
        .unwrap_or_else(|_| panic!("the borrow hung in validation: {:?}", pool.stats()));
    let err = got.expect_err("lent over a stalled path");
    assert!(matches!(err, PoolError::Timeout { .. }), "{err}");
    let s = pool.stats();
    assert_eq!(s.failed_validation, 1, "{s:?}");
    // The same through a thread's blocking borrow, on a new connection that validates.
    proxy.set_stalled(false);
    until(
        Duration::from_secs(10),
        "the unvalidated connection is closed",
        || pool.stats(),
        |s| s.borrowed == 0,
    )
    .await;
    drop(pool.get().await.unwrap());
    proxy.set_stalled(true);
    let blocking = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.get_blocking().map(|_| ()))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let got = common::join_threads(&pool, vec![blocking], deadline).remove(0);
    let err = got.expect_err("lent over a stalled path");
    assert!(matches!(err, PoolError::Timeout { .. }), "{err}");
    proxy.set_stalled(false);
    let mut conn = tokio::time::timeout(Duration::from_secs(10), pool.get())
        .await
        .expect("the pool lends again once the path answers")
        .unwrap();
    conn.batch_execute("SELECT 1").await.unwrap();
}

/// Labels are a `search_path`, set by `configure`.
struct SearchPath;

impl Labeling<slipstream_pg::Client> for SearchPath {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        conn.batch_execute(&format!("SET search_path = {}", wanted["schema"]))
            .await
            .is_ok()
    }
}

fn schema(name: &str) -> Labels {
    Labels::from([("schema".to_string(), name.to_string())])
}

/// A labeled borrow whose `Labeling::configure` runs over a path that stopped answering ends
/// within its borrow timeout, as a validation does ("counts against the borrow timeout"), and
/// the half-configured connection is not lent afterwards.
///
/// Steps (helper h71): one connection, configured for schema `a` and returned; the path
/// stalls; a borrow for schema `b` (borrow timeout 1 s) must configure it.
///
/// Before the fix: the borrow hung in `configure` for as long as the silence (here, until
/// the test gave up after 10 s): only the wait for a connection and its validation were
/// bounded by the borrow timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configure_the_server_never_answers_ends_within_the_borrow_timeout() {
    let cluster = Cluster::start().unwrap();
    cluster.psql("CREATE SCHEMA a; CREATE SCHEMA b").unwrap();
    let proxy = proxy(&cluster);
    let pool = pool_via(&proxy, Reset::Rollback)
        .borrow_timeout(Duration::from_secs(1))
        .build();
    drop(pool.get_labeled(&schema("a"), &SearchPath).await.unwrap());
    proxy.set_stalled(true);
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        pool.get_labeled(&schema("b"), &SearchPath),
    )
    .await
    .unwrap_or_else(|_| panic!("the labeled borrow hung in configure: {:?}", pool.stats()));
    let err = got.map(drop).expect_err("lent over a stalled path");
    assert!(matches!(err, PoolError::Timeout { .. }), "{err}");
    proxy.set_stalled(false);
    let mut conn = tokio::time::timeout(
        Duration::from_secs(20),
        pool.get_labeled(&schema("b"), &SearchPath),
    )
    .await
    .expect("the pool lends again once the path answers")
    .unwrap();
    let path: String = conn
        .query_one("SELECT current_setting('search_path')", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(path, "b");
}

/// A borrow that waits for ever (`borrow_timeout(Duration::MAX)`) and finds an idle
/// connection due for validation over a path that stopped answering gives that connection
/// up after `validation_timeout` and goes on: the connection is closed as failed, and the
/// borrow gets a new one once the path answers again, async and blocking alike.
///
/// Before the fix: a validation was bounded only by the borrow timeout, so with none the
/// borrow waited on the silent connection for as long as the silence lasted; here
/// `failed_validation` stayed 0 and the borrow hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_without_a_timeout_gives_up_a_validation_that_never_ends() {
    let cluster = Cluster::start().unwrap();
    let proxy = proxy(&cluster);
    let pool = pool_via(&proxy, Reset::Rollback)
        .validate_after(Duration::ZERO)
        .validation_timeout(Duration::from_millis(300))
        .borrow_timeout(Duration::MAX)
        .build();
    for (round, blocking) in [(1u64, false), (2, true)] {
        drop(pool.get().await.unwrap());
        proxy.set_stalled(true);
        let borrow = {
            let pool = pool.clone();
            tokio::spawn(async move {
                if blocking {
                    tokio::task::spawn_blocking(move || pool.get_blocking().map(|_| ()))
                        .await
                        .unwrap()
                } else {
                    pool.get().await.map(|_| ())
                }
            })
        };
        until(
            Duration::from_secs(10),
            "the validation that never ends is given up",
            || pool.stats(),
            |s| s.failed_validation == round,
        )
        .await;
        proxy.set_stalled(false);
        tokio::time::timeout(Duration::from_secs(10), borrow)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "round {round}: the borrow did not go on: {:?}",
                    pool.stats()
                )
            })
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
}

/// `validation_timeout(Duration::ZERO)` cannot fail every validation: a healthy connection
/// due for validation, 20 ms away, is validated and lent. Before the floor (250 ms), a zero bound ended
/// each validation before its round trip could, so each idle connection was closed as failed
/// in turn and the borrow ran out its timeout opening new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_validation_timeout_still_validates_a_healthy_connection() {
    let cluster = Cluster::start().unwrap();
    let proxy = proxy(&cluster);
    let pool = pool_via(&proxy, Reset::Rollback)
        .validate_after(Duration::ZERO)
        .validation_timeout(Duration::ZERO)
        .borrow_timeout(Duration::from_secs(5))
        .build();
    drop(pool.get().await.unwrap());
    // A round trip longer than the timer's 1 ms tick, as over any network: on loopback a
    // reply beats the tick, and a zero bound went unnoticed.
    proxy.set_rtt(Duration::from_millis(20));
    for _ in 0..3 {
        let mut conn = pool.get().await.expect("a healthy connection is lent");
        conn.batch_execute("SELECT 1").await.unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.failed_validation, 0, "{s:?}");
}

/// A connection returned inside a transaction is rolled back by the pool before it is lent
/// again; if the server stops answering meanwhile, the rollback gives up and the connection is
/// closed, freeing its slot (5 s, the reset's bound). Before, only the settling of owed
/// replies was bounded: the `ROLLBACK` (and `Reset::Session`'s reset) waited as long as the
/// silence, the slot lent to no one, and every borrower timed out on a pool "all in use".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_the_server_never_answers_frees_its_slot() {
    let cluster = Cluster::start().unwrap();
    for reset in [Reset::Rollback, Reset::Session] {
        let proxy = proxy(&cluster);
        let pool = pool_via(&proxy, reset)
            .borrow_timeout(Duration::from_secs(20))
            .build();
        let mut conn = pool.get().await.unwrap();
        conn.batch_execute("BEGIN; SELECT 1").await.unwrap();
        proxy.set_stalled(true);
        drop(conn);
        until(
            Duration::from_secs(15),
            "the reset gives up and frees the slot",
            || pool.stats(),
            |s| s.open == 0,
        )
        .await;
        assert_eq!(pool.stats().failed_resets, 1, "{reset:?}");
        proxy.set_stalled(false);
        let mut conn = pool.get().await.unwrap();
        conn.batch_execute("SELECT 1").await.unwrap();
    }
}

/// The same promise for a connection returned with a call's replies still owed (a timeout
/// around a long statement): "A reset takes at most 5 s in all". Its reset first cancels the
/// statement still running, over a new connection, and that cancel request is the first
/// thing the silence holds up. With `connect_timeout=60` in the connection string the slot
/// must still be freed in about 5 s (waited for up to 30 s here, against a hang).
///
/// Before the fix (helper h71): only the settling, rollback and session reset ran under the
/// 5 s bound; the cancel request before them had its own, the connection's `connect_timeout`
/// (10 s without one). The slot stayed lent to no one for that and 5 s more: over 30 s here,
/// and 15.0 s with no `connect_timeout` (measured).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_whose_cancel_the_server_never_answers_frees_its_slot() {
    let cluster = Cluster::start().unwrap();
    let proxy = proxy(&cluster);
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable&connect_timeout=60",
        proxy.port()
    );
    let pool = Pool::builder(PgManager::new(url.parse().unwrap()))
        .max_size(1)
        .borrow_timeout(Duration::from_secs(60))
        .build();
    let mut conn = pool.get().await.unwrap();
    let dropped = conn.batch_execute("SELECT pg_sleep(60)");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), dropped)
            .await
            .is_err()
    );
    assert!(!conn.is_settled(), "the dropped call still owes its reply");
    proxy.set_stalled(true);
    drop(conn);
    until(
        Duration::from_secs(30),
        "the reset gives up and frees the slot",
        || pool.stats(),
        |s| s.open == 0,
    )
    .await;
    assert_eq!(pool.stats().failed_resets, 1);
    proxy.set_stalled(false);
    let mut conn = pool.get().await.unwrap();
    conn.batch_execute("SELECT 1").await.unwrap();
}

/// The pool's task opens connections one at a time and also runs its timers; while a connect
/// hangs (a server that accepts and never answers, and a connection string with no
/// `connect_timeout`), the timers must keep running: here a connection lent past its
/// `time_to_live` is reclaimed while the opener waits on a connect for a queued borrower.
/// Before, the task awaited the connect alone, so nothing was reclaimed, reaped or reported
/// for as long as the connect hung (`PgPool` bounds its sub-pools' connects for this reason;
/// a plain `Pool` did not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_hangs_does_not_stop_the_pools_timers() {
    let cluster = Cluster::start().unwrap();
    let proxy = proxy(&cluster);
    let pool = pool_via(&proxy, Reset::Rollback)
        .max_size(2)
        .time_to_live(Duration::from_millis(300))
        .borrow_timeout(Duration::from_secs(30))
        .build();
    let held = pool.get().await.unwrap();
    proxy.set_stalled(true);
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.get().await.map(|_| ()) })
    };
    common::until_waiting(&pool, 1).await;
    until(
        Duration::from_secs(10),
        "the connection lent past its time_to_live is reclaimed",
        || pool.stats(),
        |s| s.reclaimed_ttl == 1,
    )
    .await;
    proxy.set_stalled(false);
    tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter hung")
        .unwrap()
        .expect("the waiter got no connection");
    drop(held);
}
