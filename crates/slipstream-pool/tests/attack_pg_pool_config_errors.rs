//! Attacks on what a `PgPool` says when its connection string cannot connect as given (helper
//! h79). docs/pool.md, "Failover": "while every server down refused the login (class 28, or a
//! database that does not exist) `NoServer` says that retrying will not help and what to fix,
//! and `build_ready` fails as soon as each has answered rather than after the borrow
//! timeout"; errors name what failed and what to do.

mod common;

use std::time::Duration;

use slipstream_pool::{PgPool, PoolError, Registry, Role};
use slipstream_testkit::Cluster;

/// Promise: a server the pool's configuration cannot connect to at all (here a connection
/// service whose file was never read, which slipstream-pg refuses before it dials, for every
/// attempt alike) is reported as a problem to fix, not one that retrying solves, and
/// `build_ready` says so once each server has answered, not after the borrow timeout.
///
/// Steps: a running server; a `PgPool` from a string naming `service=nosuch` and the
/// server's host and port, as `PgPool::builder` (borrow, and `build_ready`) and as
/// `Registry::pool`, which applies the environment as `connect` does and so refuses it at once.
///
/// Before the fix: `NoServer` ended "down servers are retried in the background, so retry
/// shortly", though every retry fails the same way, and `build_ready` waited out the whole
/// borrow timeout (30 s by default) before saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_that_cannot_connect_says_to_fix_it_not_to_retry() {
    let cluster = Cluster::start().unwrap();
    let conninfo = common::hosts(&[cluster.port()], "service=nosuch");
    let built = PgPool::builder(conninfo.parse().unwrap())
        .max_size(2)
        .build()
        .unwrap();
    // The registry reads the string as `slipstream_pg::connect` does, service file included,
    // so it refuses the service at once (tests/registry_env.rs has one it finds).
    let err = Registry::new()
        .pool(&conninfo, |b| b.max_size(2))
        .expect_err("a service no file defines");
    assert!(
        matches!(&err, PoolError::Config(m) if m.contains("nosuch")),
        "{err}"
    );
    let err = tokio::time::timeout(Duration::from_secs(20), built.get(Role::Primary))
        .await
        .expect("the borrow hung")
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PoolError::NoServer { .. }), "{text}");
    assert!(
        text.contains("service"),
        "the error names the cause: {text}"
    );
    assert!(!text.contains("retry shortly"), "{text}");
    let ready = PgPool::builder(conninfo.parse().unwrap())
        .max_size(2)
        .build_ready();
    let err = tokio::time::timeout(Duration::from_secs(20), ready)
        .await
        .expect("build_ready waited out its borrow timeout for a configuration that cannot connect")
        .unwrap_err();
    assert!(!err.to_string().contains("retry shortly"), "{err}");
}
