//! Attacks on `PgPool`'s sizing timers against real servers (session 43, helper 46).
//! docs/pool.md: `min_size` is per server (`PgPoolBuilder::pool_config`); "`idle_timeout`
//! closes connections idle that long, never below `min_size`"; `max_lifetime` retires
//! connections "on return, or by the opener task when it is idle"; a drained server's "idle
//! connections close at once", and `resume` "brings it back".

mod common;

use std::time::Duration;

use slipstream_pool::{Config, PgPool};
use slipstream_testkit::Cluster;

/// Each server's (open, share) now.
fn open_and_share(pool: &PgPool) -> Vec<(usize, usize)> {
    pool.servers()
        .iter()
        .map(|s| (s.stats.open, s.stats.max_size))
        .collect()
}

/// Holds. Promise: each server keeps `min_size` connections open with no borrow at all:
/// opened at start, kept past `idle_timeout`, replaced after `max_lifetime` retires them, and
/// opened again when a drained server is resumed; a drained server keeps none.
///
/// Steps: two servers, `max_size` 4 (shares 2 + 2), `min_size` 2, `idle_timeout` 100 ms,
/// `max_lifetime` 600 ms, no borrow. Wait for 2 open on each; wait until both have retired
/// connections (lifetimes passed) and are back at 2 open, with no idle close; drain the
/// second: 0 open there; resume it: 2 open again. Each wait is bounded (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_keeps_min_size_open_across_timers_drain_and_resume() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .pool_config(Config {
            max_size: 4,
            min_size: 2,
            idle_timeout: Some(Duration::from_millis(100)),
            max_lifetime: Some(Duration::from_millis(600)),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let limit = Duration::from_secs(10);
    common::until(
        limit,
        "min_size open on each server",
        || open_and_share(&pool),
        |s| s == &[(2, 2), (2, 2)],
    )
    .await;
    common::until(
        limit,
        "lifetimes retire connections, and min_size is opened again",
        || pool.servers(),
        |s| {
            s.iter()
                .all(|s| s.stats.retired >= 2 && s.stats.open == 2 && s.stats.idle == 2)
        },
    )
    .await;
    for s in pool.servers() {
        assert_eq!(
            s.stats.idle_closed, 0,
            "idle_timeout closed below min_size: {s:?}"
        );
    }
    let second = pool.servers()[1].name.clone();
    pool.drain(&second).unwrap();
    common::until(
        limit,
        "a drained server keeps nothing open; the other keeps its min_size",
        || open_and_share(&pool),
        |s| s[1].0 == 0 && s[0].0 >= 2 && s[0].1 == 4,
    )
    .await;
    pool.resume(&second).unwrap();
    common::until(
        limit,
        "a resumed server opens its min_size again, with no borrow",
        || open_and_share(&pool),
        |s| s[1] == (2, 2) && s[0].1 == 2,
    )
    .await;
    assert_eq!(common::open_total(&pool), 4);
}

/// Promise (`PgPoolBuilder::pool_config`: "its `min_size` is per server"): a server whose
/// share grows to hold `min_size` keeps `min_size` open, even if its share at build was
/// smaller.
///
/// Steps: two servers, `max_size` 4 (shares 2 + 2), `min_size` 3, no borrow: each keeps 2
/// open (its whole share). `resize(8)` (shares 4 + 4): each should open a third. Bounded wait
/// (10 s).
///
/// Before the fix each sub-pool stored `min_size` clamped to its share at build (2), so it
/// kept 2 open after its share grew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_share_grows_keeps_the_min_size_asked_for() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .pool_config(Config {
            max_size: 4,
            min_size: 3,
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let limit = Duration::from_secs(10);
    common::until(
        limit,
        "each server opens its whole share, below min_size",
        || open_and_share(&pool),
        |s| s == &[(2, 2), (2, 2)],
    )
    .await;
    assert_eq!(pool.resize(8), 8);
    common::until(
        limit,
        "with a share of 4, each server keeps min_size 3 open",
        || open_and_share(&pool),
        |s| s == &[(3, 4), (3, 4)],
    )
    .await;
}
