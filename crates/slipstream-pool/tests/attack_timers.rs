//! Attacks on the pool's timers (session 41): `max_lifetime`, `idle_timeout`,
//! `validate_after`, `time_to_live` and `abandoned_timeout` at 1 ms, racing borrows and
//! returns of many tasks and threads. Each checks that no connection is lent to two holders,
//! none is lost or left open unaccounted (every connection object alive is one the pool counts
//! open, or one a reclaimed holder still has), and the pool lends again at the end.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use common::{Holds, all_back, two_workers};
use slipstream_pool::{Manager, Pool};

/// Numbered connections that count themselves alive, and validate after a yield (a round trip
/// stands in for).
struct Counted {
    next: AtomicU64,
    alive: Arc<AtomicI64>,
}

struct Conn {
    id: u64,
    alive: Arc<AtomicI64>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Manager for Counted {
    type Connection = Conn;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<Conn, std::io::Error> {
        self.alive.fetch_add(1, Ordering::SeqCst);
        Ok(Conn {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            alive: self.alive.clone(),
        })
    }
    async fn validate(&self, _conn: &mut Conn) -> bool {
        tokio::task::yield_now().await;
        true
    }
}

fn counted() -> (Counted, Arc<AtomicI64>) {
    let alive = Arc::new(AtomicI64::new(0));
    (
        Counted {
            next: AtomicU64::new(0),
            alive: alive.clone(),
        },
        alive,
    )
}

const LIMIT: Duration = Duration::from_secs(30);

/// Runs 30 tasks and 4 threads borrowing from `pool` for a second, each borrow held across a
/// yield or a short sleep; every borrow must succeed (the borrow timeout is long).
fn storm(rt: &tokio::runtime::Runtime, pool: &Pool<Counted>, holds: &Arc<Holds>) {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (pool, holds, stop) = (pool.clone(), holds.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let c = pool.get_blocking().expect("a blocking borrow failed");
                    holds.take(c.id);
                    n += 1;
                    if n.is_multiple_of(7) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    holds.give_back(c.id);
                }
            })
        })
        .collect();
    rt.block_on(async {
        let tasks: Vec<_> = (0..30u64)
            .map(|t| {
                let (pool, holds, stop) = (pool.clone(), holds.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut n = t;
                    while !stop.load(Ordering::Relaxed) {
                        let c = pool.get().await.expect("a borrow failed");
                        holds.take(c.id);
                        n += 1;
                        if n.is_multiple_of(5) {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        } else {
                            tokio::task::yield_now().await;
                        }
                        holds.give_back(c.id);
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            tokio::time::timeout(LIMIT, t)
                .await
                .unwrap_or_else(|_| panic!("a task hung: {:?}", pool.stats()))
                .unwrap();
        }
    });
    for t in threads {
        t.join().expect("a borrower thread panicked");
    }
}

/// Lifetime, idle and validation timers at 1 ms: every return may retire its connection, the
/// reaper claims idle ones while borrowers scan, and every borrow validates. No connection is
/// lent twice or held past `max_size`, and what stays alive is what the pool counts open.
#[test]
fn lifetime_idle_and_validation_timers_at_one_ms_lose_nothing() {
    const MAX: usize = 3;
    let rt = two_workers();
    let (manager, alive) = counted();
    let pool = rt.block_on(async {
        Pool::builder(manager)
            .max_size(MAX)
            .min_size(1)
            .max_lifetime(Duration::from_millis(2))
            .idle_timeout(Duration::from_millis(1))
            .validate_after(Duration::ZERO)
            .borrow_timeout(LIMIT)
            .build()
    });
    let holds = Arc::new(Holds::new(1 << 20, MAX));
    storm(&rt, &pool, &holds);
    rt.block_on(async {
        let s = all_back(&pool).await;
        assert!(s.retired > 0, "the lifetime never retired one: {s:?}");
        // The opener may be opening one more right now: wait for the counts to settle.
        common::until(
            LIMIT,
            "connections alive match the pool's count",
            || (alive.load(Ordering::SeqCst), pool.stats()),
            |(alive, s)| *alive == s.open as i64,
        )
        .await;
    });
    drop(pool);
    rt.block_on(common::until(
        LIMIT,
        "every connection closed with the pool",
        || alive.load(Ordering::SeqCst),
        |&a| a == 0,
    ));
}

/// Reclaims at 1 ms (time-to-live and abandoned timeouts) racing borrows, validations and
/// returns: a reclaimed holder keeps its connection object (this manager has no abort) but
/// never shares it, and once every guard is back, the connections alive are those open.
#[test]
fn reclaims_at_one_ms_racing_lifetime_and_validation_lose_nothing() {
    const MAX: usize = 3;
    let rt = two_workers();
    let (manager, alive) = counted();
    let pool = rt.block_on(async {
        Pool::builder(manager)
            .max_size(MAX)
            .min_size(MAX)
            .max_lifetime(Duration::from_millis(3))
            .validate_after(Duration::ZERO)
            .time_to_live(Duration::from_millis(1))
            .abandoned_timeout(Duration::from_millis(1))
            .borrow_timeout(LIMIT)
            .build()
    });
    // Reclaimed holders keep their connection past the reclaim: exclusivity by connection
    // holds, the bound on how many are held at once does not.
    let holds = Arc::new(Holds::new(1 << 20, usize::MAX));
    storm(&rt, &pool, &holds);
    rt.block_on(async {
        let s = all_back(&pool).await;
        common::until(
            LIMIT,
            "connections alive match the pool's count",
            || (alive.load(Ordering::SeqCst), pool.stats()),
            |(alive, s)| *alive == s.open as i64,
        )
        .await;
        let s2 = pool.stats();
        assert!(
            s.reclaimed_ttl + s.reclaimed_abandoned > 0 || s2.reclaimed_ttl > 0,
            "nothing was reclaimed: {s:?}"
        );
    });
    drop(pool);
    rt.block_on(common::until(
        LIMIT,
        "every connection closed with the pool",
        || alive.load(Ordering::SeqCst),
        |&a| a == 0,
    ));
}
