//! Helpers shared by the pool's integration tests (each test binary uses some of them).
#![allow(dead_code)]

use std::fmt::Debug;
use std::time::{Duration, Instant};

use slipstream_pool::{Manager, PgPool, Pool};
use slipstream_testkit::Cluster;

/// Polls `state` every 5 ms until `done` holds for it, failing with `what` and the last state
/// after `limit`; returns the time it took.
pub async fn until<S: Debug>(
    limit: Duration,
    what: &str,
    state: impl Fn() -> S,
    done: impl Fn(&S) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let s = state();
        if done(&s) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: {s:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `n` borrowers are queued on `pool` (so a return now hands over to them).
pub async fn until_waiting<M: Manager>(pool: &Pool<M>, n: usize) {
    until(
        Duration::from_secs(5),
        "the borrower queues",
        || pool.stats(),
        |s| s.waiting == n,
    )
    .await;
}

/// A PgPool URL over two independent primaries (no replication: for tests about shares and
/// routing, where any role will do).
pub fn two_primaries_url(a: &Cluster, b: &Cluster) -> String {
    format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres sslmode=disable",
        a.port(),
        b.port()
    )
}

/// The sum of the servers' shares of `max_size`.
pub fn shares_total(pool: &PgPool) -> usize {
    pool.servers().iter().map(|s| s.stats.max_size).sum()
}
