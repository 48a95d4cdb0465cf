//! Attacks on a `PgPool` kept past the runtime it was built on (session 45, helper-55).
//! docs/pool.md: "A pool whose runtime has shut down (a registry pool kept past it) says so
//! at once."

mod common;

use std::time::Duration;

use slipstream_pool::{Config, PgPool, Role};
use slipstream_testkit::Cluster;

/// A one-server pool built on a runtime that has ended since, with one idle connection left
/// in it (opened, lent and returned on that runtime).
fn pool_past_its_runtime(cluster: &Cluster) -> PgPool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
            .pool_config(Config {
                max_size: 2,
                borrow_timeout: Duration::from_secs(2),
                ..Config::default()
            })
            .build_ready()
            .await
            .unwrap();
        drop(pool.get(Role::Any).await.unwrap());
        assert_eq!(pool.servers()[0].stats.idle, 1);
        pool
    })
}

/// Holds. Promise: every borrow of a pool whose runtime has shut down says so, `get_blocking`
/// (the borrow of threads outside any runtime) included, whose fast path takes an idle
/// connection before it looks at the runtime (the idle one is found closed with its
/// runtime's reactor, and the wait then names the runtime).
///
/// Steps: a pool built on a runtime that then ends, with an idle connection; a plain thread
/// calls `get_blocking`, then uses what it got on a runtime of its own.
#[test]
fn get_blocking_past_the_pools_runtime_says_so_even_with_a_connection_idle() {
    let cluster = Cluster::start().unwrap();
    let pool = pool_past_its_runtime(&cluster);
    match pool.get_blocking(Role::Any) {
        Err(e) => {
            eprintln!("{e}");
            assert!(e.to_string().contains("runtime"), "{e}")
        }
        Ok(mut conn) => {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let used = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), conn.simple_query("SELECT 1")).await
            });
            panic!(
                "get_blocking lent a connection of a pool whose runtime has shut down; using \
                 it gave {used:?}"
            );
        }
    }
}

/// Holds. Promise: `try_get` lends only a connection that can be used ("an idle connection now or
/// `None`"): after the pool's runtime has shut down, what it returns must work on a runtime of
/// the caller's.
#[test]
fn try_get_past_the_pools_runtime_lends_nothing_unusable() {
    let cluster = Cluster::start().unwrap();
    let pool = pool_past_its_runtime(&cluster);
    if let Some(mut conn) = pool.try_get(Role::Any) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let used = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), conn.simple_query("SELECT 1")).await
        });
        assert!(
            matches!(used, Ok(Ok(_))),
            "try_get lent a connection of a pool whose runtime has shut down, and it does not \
             work: {used:?}"
        );
    }
}
