//! Attacks on threads' slices (the turns a starving pool gives a thread it hands a slot to,
//! sized to the queue) and on the returns inside a slice that skip the queue's lock while a
//! woken waiter has yet to look (or a dozing head will look again after its timed park):
//! many threads on few slots with a 0 hold, the shape of
//! pool-scaling's 10,000 threads, must all finish once told to stop, with nothing lost.
//! `SLIPSTREAM_ATTACK_LONG=1` runs each storm for 20 s instead of 2 s.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{all_back, join_threads, numbers, two_workers};
use slipstream_pool::Pool;

/// A lost wake-up shows as this bound passing, not as a hang.
const LIMIT: Duration = Duration::from_secs(30);

fn storm_length() -> Duration {
    match std::env::var("SLIPSTREAM_ATTACK_LONG").as_deref() {
        Ok("1") => Duration::from_secs(20),
        _ => Duration::from_secs(2),
    }
}

/// `threads` threads borrow and return at once (no hold) from `slots` connections for the
/// storm's length, then stop: every thread must finish, every borrow come back, and the
/// counts add up.
fn storm(threads: usize, slots: usize) {
    let rt = two_workers();
    let pool: Pool<_> = rt.block_on(async {
        let pool = Pool::builder(numbers())
            .max_size(slots)
            .min_size(slots)
            .build();
        common::until(
            LIMIT,
            "the pool opens",
            || pool.stats(),
            |s| s.open >= slots,
        )
        .await;
        pool
    });
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (pool, stop, served) = (pool.clone(), stop.clone(), served.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut mine = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        drop(pool.get_blocking().expect("no timeout is set"));
                        mine += 1;
                    }
                    served.fetch_add(mine, Ordering::Relaxed);
                    mine
                })
                .expect("spawn a borrower")
        })
        .collect();
    std::thread::sleep(storm_length());
    stop.store(true, Ordering::Relaxed);
    let counts = join_threads(&pool, handles, Instant::now() + LIMIT);
    let none = counts.iter().filter(|&&n| n == 0).count();
    let s = rt.block_on(all_back(&pool));
    assert_eq!(s.borrows, served.load(Ordering::Relaxed), "{s:?}");
    assert_eq!(s.waiting, 0, "{s:?}");
    // Fairness is the experiment's to measure; here only that the queue moved at all.
    assert!(none < threads, "no thread was served: {s:?}");
}

#[test]
fn many_threads_few_slots_zero_hold_all_finish() {
    storm(500, 2);
}

#[test]
fn ten_thousand_threads_six_slots_zero_hold_all_finish() {
    storm(10_000, 6);
}
