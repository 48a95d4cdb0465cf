//! PgPool's monitor task shares the runtime with the borrowers and the sub-pools' tasks: it
//! must wait between its passes, never loop without yielding.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use slipstream_pool::{PgPool, Role};
use slipstream_testkit::Cluster;

mod common;

/// A connection lent on a drained server holds its part of `max_size` back until it returns;
/// the monitor rechecks for that every 20 ms. Each recheck's rebalance used to notify the
/// monitor itself, so its wait returned at once and it looped without ever yielding: on a
/// runtime of one thread nothing else ran again (here: the borrow after the drain never
/// finished). On two workers it held one worker for as long as the connection stayed lent;
/// the sub-pools' openers it woke sat in that worker's LIFO slot, which the other worker cannot
/// steal, and with the other worker parked away from the driver no timer fired either:
/// `drain_unknown_names_every_server_and_loops` (attack_pg_pool_shares.rs) hung past its borrow timeout.
#[test]
fn the_monitor_yields_while_a_drained_servers_connection_is_lent() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let url = common::two_primaries_url(&a, &b);
    let (done, finished) = mpsc::channel();
    // One thread, so a task that never yields keeps everything else (this scenario included)
    // off it for good, whatever the timing; the test thread watches from outside.
    let scenario = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(lend_across_a_drain(url));
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => scenario.join().unwrap(),
        Err(RecvTimeoutError::Disconnected) => match scenario.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the scenario reports before it ends"),
        },
        // Taking a second for something that takes milliseconds would be slow; 60 s is stuck.
        Err(RecvTimeoutError::Timeout) => panic!(
            "the scenario's runtime (one thread) did not come back to it within 60 s: a task \
             on it (the pool's monitor) stopped yielding"
        ),
    }
}

async fn lend_across_a_drain(url: String) {
    let pool = PgPool::builder(url.parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    let held = pool.get(Role::Any).await.unwrap();
    let drained = held.server().to_string();
    pool.drain(&drained).unwrap();
    // The lent connection holds its part back until it returns.
    assert_eq!(common::shares_total(&pool), 3, "{:?}", pool.servers());
    // Every wait below hands the thread to the monitor (and the sub-pools' openers) meanwhile.
    let other = pool.get(Role::Any).await.unwrap();
    assert_ne!(other.server(), drained);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(common::shares_total(&pool), 3, "{:?}", pool.servers());
    // Closed on return (its server is drained); the monitor's next recheck gives its part out.
    drop(held);
    common::until(
        Duration::from_secs(5),
        "the returned connection's part moves to the serving server",
        || pool.servers(),
        |s| {
            s.iter()
                .all(|s| s.stats.max_size == if s.drained { 0 } else { 4 })
        },
    )
    .await;
    drop(other);
    pool.resume(&drained).unwrap();
    assert_eq!(common::shares_total(&pool), 4, "{:?}", pool.servers());
    let s = pool.servers();
    assert!(
        s.iter().all(|s| !s.drained && s.stats.max_size == 2),
        "{s:?}"
    );
}
