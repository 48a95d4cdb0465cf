//! Attack on what a `PgPool` labeled borrow says when the labeling fails on one of its
//! servers (helper h79). docs/pool.md: a second failed `configure` "fails it with
//! `PoolError::Labeling`, naming the labels"; errors name what failed and what to do, and a
//! `PgPool` timeout names "the server the borrow waited on last".

mod common;

use slipstream_pool::{Labeling, Labels, PgPool, PoolError, Role};
use slipstream_testkit::Cluster;

/// A set-up that works on a primary only: a hot standby refuses `CREATE TEMP TABLE`.
struct TempTable;

impl Labeling<slipstream_pg::Client> for TempTable {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, _wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        conn.batch_execute("CREATE TEMP TABLE IF NOT EXISTS scratch (x int)")
            .await
            .is_ok()
    }
}

/// Promise: a labeled borrow that fails on a server of a multi-server pool says which server.
///
/// Steps: a primary and its standby in one `PgPool`; one primary connection held, so a
/// `Role::Any` borrow picks the standby (the fewest outstanding); a labeled borrow whose
/// `configure` creates a temp table.
///
/// Before the fix: "the labeling's configure failed for labels {"t": "x"} on 2 connections
/// in a row (each was closed); check what it runs for these labels", with nothing to say
/// that both were the standby's, nor which of the pool's servers that was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labeling_that_fails_on_one_server_names_that_server() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(
        common::hosts(&[primary.port(), standby.port()], "")
            .parse()
            .unwrap(),
    )
    .max_size(4)
    .build_ready()
    .await
    .unwrap();
    let _held = pool.get(Role::Primary).await.unwrap();
    let wanted = Labels::from([("t".to_string(), "x".to_string())]);
    let err = pool
        .get_labeled(Role::Any, &wanted, &TempTable)
        .await
        .expect_err("configure fails on the standby");
    let text = err.to_string();
    assert!(matches!(err, PoolError::Labeling { .. }), "{text}");
    let standby_name = format!("127.0.0.1:{}", standby.port());
    assert!(
        text.contains(&standby_name),
        "the error should name the server the configure failed on ({standby_name}): {text}"
    );
}
