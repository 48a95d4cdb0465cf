//! Attacks on `PgPool` and the sub-pools' `validate_after` (session 43, helper 46).
//! docs/pool.md, "Validation after a trust window": "with `validate_after(window)`, an async
//! borrow of a connection idle longer than `window` first runs `Manager::validate`
//! (`PgManager`: one `SELECT 1`) ... Blocking borrows run the check on the pool's runtime while
//! the thread waits." `PgPool::pool_config` passes `validate_after` to every server's sub-pool.

mod common;

use std::time::Duration;

use slipstream_pool::{Config, PgPool, Role};
use slipstream_testkit::{Cluster, DelayProxy};

/// How long the test lets a connection sit idle: well past the window below, and past the
/// pool clock's coarsest step (500 ms) as well.
const IDLE: Duration = Duration::from_millis(1200);
const WINDOW: Duration = Duration::from_millis(50);

/// A one-connection `PgPool` over a proxy in front of `cluster` (adds no delay; counts round
/// trips), validating connections idle longer than `WINDOW`.
async fn pool_via(proxy: &DelayProxy) -> PgPool {
    PgPool::builder(common::hosts(&[proxy.port()], "").parse().unwrap())
        .pool_config(Config {
            max_size: 1,
            validate_after: Some(WINDOW),
            borrow_timeout: Duration::from_secs(10),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap()
}

/// Promise: a borrow of a connection idle longer than `validate_after`'s window validates it
/// first (one `SELECT 1`, one round trip), through `PgPool::get` and `PgPool::get_blocking`
/// alike; and each borrow counts once in its server's `borrows`.
///
/// Steps: a one-connection `PgPool` through a round-trip-counting proxy, `validate_after`
/// 50 ms; the connection is used once, left idle 1.2 s, borrowed and used for one statement:
/// two round trips (the validation and the statement). Then the same with `get_blocking` from
/// a plain thread.
///
/// Before the fix: one round trip, no validation. `PgPool`'s lock-free fast path claimed the
/// idle connection, saw it due for validation and dropped it back into its sub-pool, which
/// stamped it as just returned; the wait that followed took it again, fresh, and lent it
/// unvalidated (and counted two borrows). A connection to a server that vanished without a
/// word was lent, its borrower's statement the one to find out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_past_the_window_is_validated_before_it_is_lent() {
    let cluster = Cluster::start().unwrap();
    let proxy = DelayProxy::start(
        format!("127.0.0.1:{}", cluster.port()).parse().unwrap(),
        Duration::ZERO,
    )
    .unwrap();
    let pool = pool_via(&proxy).await;
    pool.get(Role::Primary)
        .await
        .unwrap()
        .batch_execute("SELECT 1")
        .await
        .unwrap();

    // Async.
    tokio::time::sleep(IDLE).await;
    let (trips, borrows) = (proxy.round_trips(), pool.servers()[0].stats.borrows);
    {
        let mut conn = pool.get(Role::Primary).await.unwrap();
        conn.batch_execute("SELECT 2").await.unwrap();
    }
    let async_trips = proxy.round_trips() - trips;
    let async_borrows = pool.servers()[0].stats.borrows - borrows;

    // Blocking, from a thread outside the runtime.
    tokio::time::sleep(IDLE).await;
    let (trips, borrows) = (proxy.round_trips(), pool.servers()[0].stats.borrows);
    let p = pool.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut conn = p.get_blocking(Role::Primary).unwrap();
        handle.block_on(conn.batch_execute("SELECT 3")).unwrap();
    })
    .await
    .unwrap();
    let blocking_trips = proxy.round_trips() - trips;
    let blocking_borrows = pool.servers()[0].stats.borrows - borrows;

    assert_eq!(
        (async_trips, blocking_trips),
        (2, 2),
        "round trips of a borrow + one statement after {IDLE:?} idle (validate_after \
         {WINDOW:?}): the validation's and the statement's, async and blocking"
    );
    assert_eq!(
        (async_borrows, blocking_borrows),
        (1, 1),
        "each PgPool borrow counts once in its server's borrows"
    );
    assert_eq!(pool.servers()[0].stats.failed_validation, 0);
}
