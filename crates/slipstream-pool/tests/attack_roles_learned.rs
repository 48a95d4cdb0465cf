//! Attacks on how a `PgPool` learns a promotion (docs/pool.md, "Several servers: PgPool",
//! "Promotion"): PostgreSQL reports `in_hot_standby` again with the first reply after it
//! changes, and the pool is promised to act on a connection that says `off`. These tests make
//! the pool's own SQL (a reset, a validation), not the borrower's, be the first to read that
//! report, on a primary and its streaming standby (testkit clusters).
//!
//! Each test says the promise, the steps and what happened before its fix (session 43).

use std::time::Duration;

use slipstream_pool::{Config, PgPool, Reset, Role, ServerRole};
use slipstream_testkit::Cluster;

mod common;
use common::hosts;

const T: Duration = Duration::from_secs(10);

/// Promotes `standby` and waits until it is out of recovery.
fn promote(standby: &Cluster) {
    let promoted = standby.psql("SELECT pg_promote(true, 30)").unwrap();
    assert!(promoted.contains('t'), "pg_promote said {promoted:?}");
}

/// Borrows for `Role::Standby` (bounded) and says whether the server it got is in recovery:
/// `Ok(false)` is a standby borrower served by a primary.
async fn standby_borrow_in_recovery(pool: &PgPool) -> Result<bool, String> {
    let mut conn = tokio::time::timeout(T, pool.get(Role::Standby))
        .await
        .map_err(|_| "the standby borrow hung".to_string())?
        .map_err(|e| e.to_string())?;
    eprintln!(
        "DEBUG lent with in_hot_standby={:?}",
        conn.parameter("in_hot_standby")
    );
    let row = conn
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get::<_, bool>(0).unwrap())
}

/// Waits until the standby's sub-pool has its connection back, idle (its reset done).
async fn until_idle_again(pool: &PgPool) {
    common::until(
        T,
        "the returned connection is idle again",
        || pool.servers(),
        |s| s[1].stats.borrowed == 0 && s[1].stats.idle == 1,
    )
    .await;
}

/// A standby borrow holding a connection that ran nothing since the promotion; `in_hot_standby`
/// on it still says `on`.
async fn held_over_a_promotion(pool: &PgPool, standby: &Cluster, begin: bool) {
    let mut held = pool.get(Role::Standby).await.unwrap();
    if begin {
        // Left open: the default reset (Rollback) runs a ROLLBACK on it.
        held.batch_execute("BEGIN").await.unwrap();
    }
    promote(standby);
    assert_eq!(held.parameter("in_hot_standby"), Some("on"));
    drop(held);
    until_idle_again(pool).await;
}

/// The reset's reply is the first to say `off`: the pool must act on it.
async fn a_promotion_learned_by_a_reset(reset: Reset, begin: bool) {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(
        hosts(&[primary.port(), standby.port()], "")
            .parse()
            .unwrap(),
    )
    .max_size(4)
    .reset_on_return(reset)
    .build_ready()
    .await
    .unwrap();
    held_over_a_promotion(&pool, &standby, begin).await;
    let got = standby_borrow_in_recovery(&pool).await;
    assert!(
        !matches!(got, Ok(false)),
        "a Role::Standby borrower was served a connection to the promoted server, whose \
         in_hot_standby=off the {reset:?} reset had read: {got:?}; {:?}",
        pool.servers()
    );
    let servers = pool.servers();
    assert_eq!(
        servers[1].role,
        ServerRole::Primary,
        "the returned connection reported off (read by its reset): {servers:?}"
    );
}

/// Holds.
///
/// Promise: "a returned connection that reports `off` makes its standby a primary" and
/// "`Role::Standby` never [gets] a primary".
///
/// Steps: primary P, standby S, max_size 4, the default `Reset::Rollback`. A `Role::Standby`
/// borrow runs `BEGIN` and holds its connection while S is promoted; it returns it without
/// running anything more, so its last report says `on` and the reset's `ROLLBACK` is the
/// first reply to say `off`. Then a `Role::Standby` borrow.
///
/// What happened: S is a primary in `servers()` and the `Role::Standby` borrow fails with
/// `NoServer`: the check of a connection at the end of its reset (`must_close`, the same
/// test as a return's) reads the reset's report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_read_by_a_rollback_reset_is_learned() {
    a_promotion_learned_by_a_reset(Reset::Rollback, true).await;
}

/// Holds, as above with `Reset::Session`, which runs its session reset on every return: a
/// connection that ran nothing since the promotion (no `BEGIN` needed) learns it from the
/// reset's reply, and the pool from the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_read_by_a_session_reset_is_learned() {
    a_promotion_learned_by_a_reset(Reset::Session, false).await;
}

/// BREAK (High: a standby borrower served by a primary).
///
/// Promise: "A borrow is handed a connection only if its server still has the role it was
/// picked for when the connection arrives ... `Role::Standby` never a primary"; a
/// validation (`validate_after`) runs a `SELECT 1` on the connection before it is lent.
///
/// Steps: primary P, standby S, max_size 4, `validate_after` 1 ms. A `Role::Standby` borrow
/// returns its connection (it says `on`); S is promoted; after the trust window a
/// `Role::Standby` borrow takes that connection, whose validation's reply is the first to
/// say `off`.
///
/// What happened (once `PgPool` borrows validated at all, the commit before): the borrow
/// checked the server's role as the pool knew it (still a standby) and lent the connection
/// whose validation had just read that it was on a primary (`pg_is_in_recovery()` false).
/// Now a connection's own report is read before the role check, so S becomes a primary and
/// the borrow fails with `NoServer`. A labeled borrow's `configure` is SQL on the way too,
/// and is covered by the same check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_read_by_a_validation_is_not_lent_as_a_standby() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(
        hosts(&[primary.port(), standby.port()], "")
            .parse()
            .unwrap(),
    )
    .pool_config(Config {
        max_size: 4,
        validate_after: Some(Duration::from_millis(1)),
        ..Config::default()
    })
    .build_ready()
    .await
    .unwrap();
    let conn = pool.get(Role::Standby).await.unwrap();
    drop(conn);
    until_idle_again(&pool).await;
    promote(&standby);
    // Past the trust window as the pool's coarse clock sees it (advanced every 500 ms when
    // no lifetime timer is set), so the next borrow validates.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let got = standby_borrow_in_recovery(&pool).await;
    assert!(
        !matches!(got, Ok(false)),
        "a Role::Standby borrower was served a connection to the promoted server, whose \
         in_hot_standby=off its validation had read: {got:?}; {:?}",
        pool.servers()
    );
}
