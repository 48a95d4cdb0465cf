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

/// Tasks and threads on one starving pool take turns of the same size: while a task waits,
/// returns hand over (a thread head within its bound let the running threads barge) and a
/// thread handed a slot gets one borrow, not a slice. Before (session 31's attacker), a
/// thread's turn was a slice of up to 2 ms and a task's one borrow: 300 threads with 100
/// tasks on 2 slots gave each task 11 borrows in 2 s against 21,809 for each thread. With
/// slices denied alone (session 32's attacker), few threads still barged while a thread headed
/// the queue: 20 threads and 100 tasks, 3,882 borrows per task against 27,214 per thread.
#[test]
fn tasks_and_threads_on_a_starving_pool_get_turns_alike() {
    mixed(300, 100);
}

#[test]
fn few_threads_among_many_tasks_get_turns_alike() {
    mixed(20, 100);
}

#[test]
fn a_handful_of_threads_among_many_tasks_get_turns_alike() {
    mixed(5, 200);
}

/// `threads` threads and `tasks` tasks borrow from 2 slots with no hold (a task holds across
/// one `yield_now`); the means of each kind's borrows, counted over a window that starts once
/// every borrower has borrowed (so start-up does not weigh), must be within 2x of each other,
/// and nobody may go without.
fn mixed(threads: usize, tasks: usize) {
    let rt = two_workers();
    let pool: Pool<_> = rt.block_on(async {
        let pool = Pool::builder(numbers()).max_size(2).min_size(2).build();
        common::until(LIMIT, "the pool opens", || pool.stats(), |s| s.open >= 2).await;
        pool
    });
    let window = Window::default();
    let thread_handles: Vec<_> = (0..threads)
        .map(|_| {
            let (pool, window) = (pool.clone(), window.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let (mut mine, mut first) = (0u64, true);
                    while window.running() {
                        drop(pool.get_blocking().expect("no timeout is set"));
                        mine += window.borrowed(&mut first);
                    }
                    mine
                })
                .expect("spawn a borrower")
        })
        .collect();
    let task_handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (pool, window) = (pool.clone(), window.clone());
            rt.spawn(async move {
                let (mut mine, mut first) = (0u64, true);
                while window.running() {
                    let c = pool.get().await.expect("no timeout is set");
                    tokio::task::yield_now().await;
                    drop(c);
                    mine += window.borrowed(&mut first);
                }
                mine
            })
        })
        .collect();
    let deadline = Instant::now() + LIMIT;
    while window.started.load(Ordering::Relaxed) < (threads + tasks) as u64 {
        assert!(
            Instant::now() < deadline,
            "not every borrower got a first borrow: {:?}",
            pool.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    window.counting.store(true, Ordering::Relaxed);
    std::thread::sleep(storm_length());
    window.counting.store(false, Ordering::Relaxed);
    window.stop.store(true, Ordering::Relaxed);
    let by_thread = join_threads(&pool, thread_handles, deadline);
    let by_task: Vec<u64> = rt.block_on(async {
        let mut counts = Vec::new();
        for t in task_handles {
            let n = tokio::time::timeout_at(deadline.into(), t)
                .await
                .expect("a task hung in get")
                .expect("a borrower task panicked");
            counts.push(n);
        }
        counts
    });
    rt.block_on(all_back(&pool));
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
    let (threads_mean, tasks_mean) = (mean(&by_thread), mean(&by_task));
    eprintln!(
        "{threads} threads, {tasks} tasks: {tasks_mean:.0} borrows per task, {threads_mean:.0} per thread"
    );
    let starved = by_thread
        .iter()
        .chain(&by_task)
        .filter(|&&n| n == 0)
        .count();
    assert_eq!(starved, 0, "borrowers with no borrow in the window");
    assert!(
        tasks_mean >= 0.5 * threads_mean && threads_mean >= 0.5 * tasks_mean,
        "turns differ by kind: {tasks_mean:.0} borrows per task, {threads_mean:.0} per thread"
    );
}

/// What the borrowers of a counted window share: when to stop, whether the window is open,
/// and how many have borrowed at least once.
#[derive(Clone, Default)]
struct Window {
    stop: Arc<AtomicBool>,
    counting: Arc<AtomicBool>,
    started: Arc<AtomicU64>,
}

impl Window {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// After each borrow: 1 if the window is open (to count), and the borrower's first
    /// borrow (`first`) marks it started.
    fn borrowed(&self, first: &mut bool) -> u64 {
        if std::mem::take(first) {
            self.started.fetch_add(1, Ordering::Relaxed);
        }
        u64::from(self.counting.load(Ordering::Relaxed))
    }
}
