//! Attacks on a `PgPool` borrow that picks a server again while it waits (session 45,
//! helper-55): its server drained or marked down under it. Two promises:
//!
//! - `PgPool::get` waits "up to the borrow timeout": a borrow moved from server to server is
//!   still one borrow, with one timeout.
//! - `drain`: "no new borrows go to it": a borrow that is still running when `drain` returns
//!   is not handed a connection of the drained server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use slipstream_pool::{Config, Labeling, Labels, PgPool, Role};
use slipstream_testkit::Cluster;
use tokio::sync::Notify;

/// A labeling whose `configure` runs its statement, says so, then finishes when the test
/// lets it (as a `SET` whose reply arrives when the test chooses).
struct Gated {
    started: Arc<AtomicBool>,
    release: Arc<Notify>,
}

impl Labeling<slipstream_pg::Client> for Gated {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, _wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        let ok = conn.simple_query("SELECT 1").await.is_ok();
        self.started.store(true, Ordering::SeqCst);
        self.release.notified().await;
        ok
    }
}

/// Promise: after `drain(server)` returns, no borrow is handed a connection of that server.
///
/// Steps (20 rounds, on a one-thread runtime so the order is the test's): a labeled borrow
/// starts its `configure` on one server; the test drains that server and then lets the
/// configure finish, so when the borrow is next polled both its drained-server wake-up and its
/// configured connection are ready.
///
/// Before the fix the borrow's `select!` took whichever branch it polled first (at random):
/// in about half the rounds it returned the drained server's connection.
#[tokio::test]
async fn a_borrow_finishing_after_a_drain_gets_no_connection_of_the_drained_server() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .pool_config(Config {
            max_size: 4,
            borrow_timeout: Duration::from_secs(10),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    const ROUNDS: usize = 20;
    let mut handed = Vec::new();
    for round in 0..ROUNDS {
        let started = Arc::new(AtomicBool::new(false));
        let release = Arc::new(Notify::new());
        let labeling = Gated {
            started: started.clone(),
            release: release.clone(),
        };
        // New labels each round: every borrow configures.
        let wanted = Labels::from([("round".to_string(), round.to_string())]);
        let p = pool.clone();
        let borrow = tokio::spawn(async move {
            p.get_labeled(Role::Any, &wanted, &labeling)
                .await
                .map(|c| c.server().to_string())
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !started.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "round {round}: configure never ran"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let on = pool
            .servers()
            .into_iter()
            .find(|s| s.outstanding == 1)
            .expect("the borrow is counted on its server")
            .name;
        pool.drain(&on).unwrap();
        // A configure on the other server (after a re-pick) finishes at once.
        release.notify_one();
        let got = tokio::time::timeout(Duration::from_secs(20), async {
            let mut borrow = borrow;
            loop {
                tokio::select! {
                    got = &mut borrow => break got,
                    () = tokio::time::sleep(Duration::from_millis(1)) => release.notify_one(),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("round {round}: the borrow hung"))
        .unwrap()
        .unwrap_or_else(|e| panic!("round {round}: the borrow failed: {e}"));
        if got == on {
            handed.push(round);
        }
        pool.resume(&on).unwrap();
    }
    assert!(
        handed.is_empty(),
        "borrows handed a connection of the server drained before they ended, in rounds \
         {handed:?} of {ROUNDS}"
    );
}
