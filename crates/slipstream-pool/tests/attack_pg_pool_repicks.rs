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

use slipstream_pool::{Config, Labeling, Labels, PgPool, PoolError, Role};
use slipstream_testkit::Cluster;
use tokio::sync::Notify;

/// Promise: `PgPool::get` fails with `PoolError::Timeout` once its borrow timeout has passed,
/// whichever servers it waited on.
///
/// Steps: two servers, one connection each, both held; a third borrow (1 s timeout) waits.
/// Every 300 ms the server it waits on is drained and the other resumed, so it picks the other
/// one again; the test waits for its answer at most five borrow timeouts.
///
/// Before the fix each pick started a fresh wait on the new server's sub-pool, with a fresh
/// borrow timeout: the borrow never failed while the servers kept changing (here it was
/// still waiting after 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_moved_between_servers_still_ends_at_its_borrow_timeout() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let timeout = Duration::from_secs(1);
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .pool_config(Config {
            max_size: 2,
            borrow_timeout: timeout,
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let held = (
        pool.get(Role::Any).await.unwrap(),
        pool.get(Role::Any).await.unwrap(),
    );
    assert_ne!(
        held.0.server(),
        held.1.server(),
        "one connection per server"
    );
    let p = pool.clone();
    let started = Instant::now();
    let mut borrow = tokio::spawn(async move { p.get(Role::Any).await.map(|_| ()) });
    common::until(
        Duration::from_secs(5),
        "the third borrow waits",
        || pool.servers(),
        |s| s.iter().map(|s| s.outstanding).sum::<usize>() == 3,
    )
    .await;
    let limit = timeout * 5;
    let mut moves = 0;
    let answer = loop {
        tokio::select! {
            answer = &mut borrow => break Some(answer.unwrap()),
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
        if started.elapsed() > limit {
            break None;
        }
        // The server it waits on counts it beside its held connection.
        let servers = pool.servers();
        if let Some(on) = servers.iter().find(|s| s.outstanding == 2) {
            for s in servers.iter().filter(|s| s.name != on.name && s.drained) {
                pool.resume(&s.name).unwrap();
            }
            pool.drain(&on.name).unwrap();
            moves += 1;
        }
    };
    let Some(answer) = answer else {
        panic!(
            "a borrow with a {timeout:?} borrow timeout still waited after {limit:?}, moved \
             {moves} times between servers: {:?}",
            pool.servers()
        );
    };
    assert!(
        matches!(answer, Err(PoolError::Timeout { .. })),
        "the borrow should have timed out: {answer:?}"
    );
    assert!(moves > 0, "the test never moved the borrow");
}

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

/// Promise (docs/pool.md, `PoolError`: each error "says what happened and what to do"): a
/// `PgPool` borrow that times out names the server it waited on, and its numbers say they are
/// that server's share of `max_size`, not the pool's.
///
/// Steps: two servers and `max_size` 2, so each has a share of one; both connections held; a
/// third borrow, by `get` and by `get_blocking`, times out.
///
/// Before the fix both said "no connection became free within 300ms (1 of 1 open, all in
/// use)": no server named, and a max_size of 1 the user never set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_borrow_names_its_server_and_says_the_numbers_are_its_share() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .pool_config(Config {
            max_size: 2,
            borrow_timeout: Duration::from_millis(300),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let held = (
        pool.get(Role::Any).await.unwrap(),
        pool.get(Role::Any).await.unwrap(),
    );
    let names = [held.0.server().to_string(), held.1.server().to_string()];
    let by_get = pool.get(Role::Any).await.map(|_| ()).unwrap_err();
    let p = pool.clone();
    let by_blocking = tokio::task::spawn_blocking(move || p.get_blocking(Role::Any).map(|_| ()))
        .await
        .unwrap()
        .unwrap_err();
    for (how, e) in [("get", by_get), ("get_blocking", by_blocking)] {
        let text = e.to_string();
        let PoolError::Timeout {
            server: Some(server),
            open,
            max_size,
            ..
        } = &e
        else {
            panic!("{how}: a timeout naming its server, got {e:?}");
        };
        assert!(
            names.contains(server),
            "{how}: {server} is not one of {names:?}"
        );
        assert_eq!((*open, *max_size), (1, 1), "{how}: {e:?}");
        assert!(
            text.contains(&format!("no connection to {server}"))
                && text.contains("share of the pool's max_size"),
            "{how}: {text}"
        );
    }
    drop(held);
}
