//! Attacks on the waiting path rewritten on 2026-11-24 (session 20): the mailbox hand-off (a
//! served waiter reads its slot without the lock; its queue entry is freed and reused at once),
//! the first look after queueing without the lock, `get`'s first try skipped while a waiter
//! starves, and the per-slot wait histogram. Each test is bounded and checks at the end that
//! nothing was lost: every connection back IDLE, the counts adding up, no waiter left queued.
//! `SLIPSTREAM_ATTACK_LONG=1` runs the storms for 20 s instead of 2 s.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{Holds, Numbers, all_back, join_threads, numbers, two_workers, until_waiting};
use slipstream_pool::{Pool, PoolError, Pooled};

/// Builds the pool and waits (bounded) until its `min_size` connections are open; unlike
/// `build_ready`, not bounded by a short borrow timeout.
async fn ready(b: slipstream_pool::Builder<Numbers>) -> Pool<Numbers> {
    let pool = b.build();
    let min = pool.stats().min_size;
    // Idle, not only open: a connection is counted open a moment before its slot is lent out
    // as idle, and a borrow in that moment waits (a full test run saw one more wait than the
    // test's own).
    common::until(
        LIMIT,
        "the pool opens",
        || pool.stats(),
        |s| s.open >= min && s.idle >= min,
    )
    .await;
    pool
}

/// A lost wake-up shows as this bound passing, not as a hang.
const LIMIT: Duration = Duration::from_secs(30);

fn storm_length() -> Duration {
    match std::env::var("SLIPSTREAM_ATTACK_LONG").as_deref() {
        Ok("1") => Duration::from_secs(20),
        _ => Duration::from_secs(2),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    two_workers()
}

/// A small deterministic generator (xorshift), one per borrower.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Polls `f` once with `waker`.
fn poll_with<F: Future + ?Sized>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

type GetFut<'a> = Pin<Box<dyn Future<Output = Result<Pooled<Numbers>, PoolError>> + Send + 'a>>;

/// A `get` polled once with a no-op waker: queued (pending) unless a connection was idle.
fn queued_get(pool: &Pool<Numbers>) -> GetFut<'_> {
    let mut f: GetFut<'_> = Box::pin(pool.get());
    assert!(
        poll_with(f.as_mut(), Waker::noop()).is_pending(),
        "the pool had an idle connection: {:?}",
        pool.stats()
    );
    f
}

/// Polls a `get` that must be served by now.
fn served(f: &mut GetFut<'_>) -> Pooled<Numbers> {
    match poll_with(f.as_mut(), Waker::noop()) {
        Poll::Ready(r) => r.expect("served"),
        Poll::Pending => panic!("a waiter handed a connection was not served"),
    }
}

/// Counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);
impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// How a task's borrow is cancelled (or not) in the storm.
async fn task_borrow(
    pool: &Pool<Numbers>,
    rng: &mut Rng,
) -> Option<Result<Pooled<Numbers>, PoolError>> {
    match rng.below(6) {
        // A timeout of 0-50 µs around the whole borrow.
        0 => tokio::time::timeout(Duration::from_micros(rng.below(51)), pool.get())
            .await
            .ok(),
        // Raced against a yield: cancelled at its first await point, or served at once.
        1 => tokio::select! {
            biased;
            r = pool.get() => Some(r),
            _ = tokio::task::yield_now() => None,
        },
        // Dropped after 1-4 polls, with a no-op waker between the task's own polls: a waiter
        // that is never woken through the waker the queue holds.
        2 => {
            let mut f: GetFut<'_> = Box::pin(pool.get());
            for _ in 0..1 + rng.below(4) {
                if let Poll::Ready(r) = poll_with(f.as_mut(), Waker::noop()) {
                    return Some(r);
                }
                tokio::task::yield_now().await;
            }
            None
        }
        _ => Some(pool.get().await),
    }
}

/// Holds connection `c` for a random short while, checking it is this holder's alone.
async fn hold_task(holds: &Holds, c: Pooled<Numbers>, rng: &mut Rng) {
    holds.take(*c);
    match rng.below(4) {
        0 => {}
        1 => tokio::task::yield_now().await,
        2 => tokio::time::sleep(Duration::from_micros(rng.below(50))).await,
        _ => {
            for _ in 0..rng.below(2000) {
                std::hint::spin_loop();
            }
        }
    }
    holds.give_back(*c);
    drop(c);
}

#[derive(Default)]
struct Tally {
    served: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
    other: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn note_err(&self, who: &str, e: PoolError) {
        match e {
            PoolError::Timeout { .. } => {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            e => self.other.lock().unwrap().push(format!("{who}: {e}")),
        }
    }
}

/// Tasks and threads on one pool, random holds, a third of the task borrows cancelled in
/// different ways (timeouts of 0-50 µs, `select!` against a yield, dropped after a few polls
/// with a no-op waker). `timeout`: the pool's borrow timeout (short: timeouts race hand-offs).
/// Returns the tally and the stats after everything came back.
fn storm(
    max: usize,
    threads: usize,
    tasks: usize,
    timeout: Duration,
) -> (Arc<Tally>, slipstream_pool::Stats) {
    let rt = runtime();
    let pool = rt.block_on(async {
        ready(
            Pool::builder(numbers())
                .max_size(max)
                .min_size(max)
                .borrow_timeout(timeout),
        )
        .await
    });
    let holds = Arc::new(Holds::new(64, max));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..threads as u64)
        .map(|t| {
            let (pool, holds, tally, stop) =
                (pool.clone(), holds.clone(), tally.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + t);
                while !stop.load(Ordering::Relaxed) {
                    let r = if rng.below(4) == 0 {
                        // try_get beside the blocking borrows: the scan that races hand-offs.
                        match pool.try_get() {
                            Some(c) => Ok(c),
                            None => continue,
                        }
                    } else {
                        pool.get_blocking()
                    };
                    match r {
                        Ok(c) => {
                            tally.served.fetch_add(1, Ordering::Relaxed);
                            holds.take(*c);
                            match rng.below(3) {
                                0 => {}
                                1 => std::thread::yield_now(),
                                _ => std::thread::sleep(Duration::from_micros(rng.below(50))),
                            }
                            holds.give_back(*c);
                            drop(c);
                        }
                        Err(e) => tally.note_err("thread", e),
                    }
                }
            })
        })
        .collect();
    rt.block_on(async {
        let handles: Vec<_> = (0..tasks as u64)
            .map(|t| {
                let (pool, holds, tally, stop) =
                    (pool.clone(), holds.clone(), tally.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut rng = Rng(0x5851_f42d + t);
                    while !stop.load(Ordering::Relaxed) {
                        match task_borrow(&pool, &mut rng).await {
                            Some(Ok(c)) => {
                                tally.served.fetch_add(1, Ordering::Relaxed);
                                hold_task(&holds, c, &mut rng).await;
                            }
                            Some(Err(e)) => tally.note_err("task", e),
                            None => {
                                tally.cancelled.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(storm_length()).await;
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            tokio::time::timeout(LIMIT, h)
                .await
                .unwrap_or_else(|_| panic!("a task hung: {:?}", pool.stats()))
                .unwrap();
        }
    });
    join_threads(&pool, threads, Instant::now() + LIMIT);
    let s = rt.block_on(all_back(&pool));
    let other = tally.other.lock().unwrap().clone();
    assert!(other.is_empty(), "borrows failed: {other:?}");
    // Every lend reached a holder: a borrow is counted when lent, and no future here can be
    // dropped between the lend and its completion.
    assert_eq!(
        s.borrows,
        tally.served.load(Ordering::Relaxed),
        "borrows != served: {s:?}"
    );
    assert_eq!(s.timeouts, tally.timeouts.load(Ordering::Relaxed), "{s:?}");
    assert!(s.waits <= s.borrows, "more waits than borrows: {s:?}");
    assert!(
        tally.cancelled.load(Ordering::Relaxed) > 0,
        "no borrow was cancelled"
    );
    assert!(
        s.waits > 0,
        "no borrow waited: the queue was not exercised: {s:?}"
    );
    (tally, s)
}

#[test]
fn tasks_and_threads_with_random_cancellations_lend_each_connection_once() {
    let (tally, s) = storm(3, 4, 8, Duration::from_secs(20));
    eprintln!(
        "served {}, cancelled {}: {s:?}",
        tally.served.load(Ordering::Relaxed),
        tally.cancelled.load(Ordering::Relaxed)
    );
    assert_eq!(
        s.timeouts, 0,
        "a borrow timed out while connections turned over: {s:?}"
    );
}

#[test]
fn one_connection_many_borrowers_lose_nothing() {
    storm(1, 3, 12, Duration::from_secs(20));
}

/// Borrow timeouts of 1 ms: waiters give up at the moment returns hand them connections.
#[test]
fn borrow_timeouts_racing_mailbox_hand_offs_lose_nothing() {
    let (_, s) = storm(2, 3, 8, Duration::from_millis(1));
    eprintln!("{s:?}");
}

/// A waiter handed a connection that has not yet read its mailbox, while its freed queue entry
/// is reused by later waiters (twice): each waiter gets the connection handed to it, no two the
/// same; a served waiter dropped unread passes its connection on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_reused_before_their_served_waiter_reads_the_mailbox() {
    let pool = ready(
        Pool::builder(numbers())
            .max_size(2)
            .min_size(2)
            .borrow_timeout(Duration::from_secs(20)),
    )
    .await;
    let a = pool.get().await.unwrap();
    let b = pool.get().await.unwrap();
    let (id_a, id_b) = (*a, *b);
    let mut f1 = queued_get(&pool);
    drop(a); // handed to f1 (tasks: at once); f1's entry is freed, its mailbox still shared
    let mut f2 = queued_get(&pool); // reuses f1's entry (its mailbox is its own)
    let mut f3 = queued_get(&pool);
    assert_eq!(pool.stats().waiting, 2, "{:?}", pool.stats());
    drop(b); // handed to f2
    let mut f4 = queued_get(&pool); // reuses the entry again
    let mut f5 = queued_get(&pool);
    assert_eq!(pool.stats().waiting, 3, "{:?}", pool.stats());
    let c1 = served(&mut f1);
    let c2 = served(&mut f2);
    assert_eq!(
        (*c1, *c2),
        (id_a, id_b),
        "each waiter gets the connection handed to it"
    );
    // f3, f4, f5 still wait; a spurious poll of each finds nothing.
    for f in [&mut f3, &mut f4, &mut f5] {
        assert!(poll_with(f.as_mut(), Waker::noop()).is_pending());
    }
    drop(f3); // gives up its place: the next return goes to f4
    drop(c1);
    assert_eq!(pool.stats().waiting, 1, "{:?}", pool.stats());
    drop(c2); // handed to f5
    drop(f5); // served but never polled: its connection is passed on (IDLE, no one waits)
    let c4 = served(&mut f4);
    assert_eq!(*c4, id_a);
    assert_eq!(pool.stats().waiting, 0, "{:?}", pool.stats());
    let again = pool
        .try_get()
        .expect("the connection f5 dropped unread came back");
    assert_eq!(*again, id_b);
    drop((c4, again, f1, f2, f4));
    let s = all_back(&pool).await;
    // f1, f2, f4 waited and were served; f3 and f5 gave up.
    assert_eq!(s.waits, 3, "{s:?}");
}

/// Entries churned by the hundreds: waiters queued, served or cancelled in every order while
/// served ones sit unread, against a model of who must get what (tasks: FIFO hand-off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_reuse_under_churn_follows_fifo_and_loses_nothing() {
    const MAX: usize = 3;
    let pool = ready(
        Pool::builder(numbers())
            .max_size(MAX)
            .min_size(MAX)
            .borrow_timeout(Duration::from_secs(20)),
    )
    .await;
    let mut held: Vec<Pooled<Numbers>> = (0..MAX).map(|_| pool.try_get().unwrap()).collect();
    // Queued waiters, oldest first, and waiters served but not yet polled (with the
    // connection they must find).
    let mut queue: std::collections::VecDeque<GetFut<'_>> = Default::default();
    let mut unread: Vec<(GetFut<'_>, u64)> = Vec::new();
    let mut rng = Rng(42);
    let mut waited = 0u64;
    for step in 0..3000 {
        match rng.below(5) {
            0 | 1 if queue.len() < 40 => match pool.try_get() {
                // Returns with no one queued leave connections idle: take them first.
                Some(c) => held.push(c),
                None => queue.push_back(queued_get(&pool)),
            },
            2 if !held.is_empty() => {
                let c = held.swap_remove(rng.below(held.len() as u64) as usize);
                let id = *c;
                drop(c);
                match queue.pop_front() {
                    // Tasks are handed connections in queue order.
                    Some(f) => unread.push((f, id)),
                    None => assert!(pool.stats().idle > 0, "step {step}"),
                }
            }
            3 if !unread.is_empty() => {
                let (mut f, id) = unread.swap_remove(rng.below(unread.len() as u64) as usize);
                if rng.below(4) == 0 {
                    // Served but dropped unread: passed on to the next waiter, if any.
                    drop(f);
                    if let Some(next) = queue.pop_front() {
                        unread.push((next, id));
                    }
                } else {
                    let c = served(&mut f);
                    assert_eq!(*c, id, "step {step}: a waiter got another's connection");
                    waited += 1;
                    held.push(c);
                }
            }
            4 if !queue.is_empty() => {
                // A waiter in the middle gives up.
                let k = rng.below(queue.len() as u64) as usize;
                drop(queue.remove(k));
            }
            _ => {
                if held.len() + unread.len() < MAX
                    && queue.is_empty()
                    && let Some(c) = pool.try_get()
                {
                    held.push(c);
                }
            }
        }
        let s = pool.stats();
        assert_eq!(s.waiting, queue.len(), "step {step}: {s:?}");
        assert!(held.len() + unread.len() <= MAX, "step {step}");
    }
    drop(queue);
    for (mut f, id) in unread {
        let c = served(&mut f);
        assert_eq!(*c, id);
        waited += 1;
    }
    drop(held);
    let s = all_back(&pool).await;
    assert_eq!(
        s.waits, waited,
        "waits counts the served waiters only: {s:?}"
    );
}

/// A queued waiter polled again and again (from other wakers, as a future moved between
/// tasks or polled by `select!`) keeps one place; the return wakes the waker of its latest
/// poll; it is served once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_polled_spuriously_keeps_one_place_and_is_woken_through_its_latest_waker() {
    let pool = ready(
        Pool::builder(numbers())
            .max_size(1)
            .min_size(1)
            .borrow_timeout(Duration::from_secs(20)),
    )
    .await;
    let held = pool.get().await.unwrap();
    let mut f = queued_get(&pool);
    let mut second = queued_get(&pool);
    let wakers: Vec<Arc<Counting>> = (0..50).map(|_| Arc::default()).collect();
    for w in &wakers {
        assert!(poll_with(f.as_mut(), &Waker::from(w.clone())).is_pending());
        assert_eq!(pool.stats().waiting, 2, "{:?}", pool.stats());
    }
    drop(held);
    let latest = wakers.last().unwrap();
    assert_eq!(
        latest.0.load(Ordering::SeqCst),
        1,
        "the latest waker was not woken"
    );
    let woken_before: usize = wakers[..49]
        .iter()
        .map(|w| w.0.load(Ordering::SeqCst))
        .sum();
    assert_eq!(woken_before, 0, "a stale waker was woken");
    let c = served(&mut f);
    drop(c); // handed to `second`
    let c = served(&mut second);
    drop((c, f, second));
    let s = all_back(&pool).await;
    assert_eq!(s.waits, 2, "{s:?}");
}

/// `max_waiters` at the edge, tasks and threads: the borrow past it is rejected at once, a
/// place given up is free again, and the queued tasks are served in queue order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_waiters_at_the_edge_rejects_exactly_past_it_and_serves_in_order() {
    let pool = ready(
        Pool::builder(numbers())
            .max_size(1)
            .min_size(1)
            .max_waiters(3)
            .borrow_timeout(Duration::from_secs(20)),
    )
    .await;
    let held = pool.get().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for k in 0..2 {
        let (p, order) = (pool.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let c = p.get().await.unwrap();
            order.lock().unwrap().push(k);
            tokio::task::yield_now().await;
            drop(c);
        }));
        until_waiting(&pool, k + 1).await;
    }
    // The third place taken by a future polled once, so it can give the place up.
    let third = queued_get(&pool);
    assert_eq!(pool.stats().waiting, 3);
    assert!(matches!(
        pool.get().await,
        Err(PoolError::Full {
            waiting: 3,
            max_waiters: 3
        })
    ));
    let p = pool.clone();
    let blocking = tokio::task::spawn_blocking(move || p.get_blocking().map(drop))
        .await
        .unwrap();
    assert!(
        matches!(blocking, Err(PoolError::Full { .. })),
        "{blocking:?}"
    );
    assert_eq!(pool.stats().rejected, 2);
    // A place given up is free again: a blocking thread takes it.
    drop(third);
    let thread = {
        let pool = pool.clone();
        let order = order.clone();
        std::thread::spawn(move || {
            let c = pool.get_blocking().unwrap();
            order.lock().unwrap().push(2);
            drop(c);
        })
    };
    until_waiting(&pool, 3).await;
    drop(held);
    for w in waiters {
        tokio::time::timeout(LIMIT, w)
            .await
            .expect("a waiter hung")
            .unwrap();
    }
    let deadline = Instant::now() + LIMIT;
    while !thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the thread hung: {:?}",
            pool.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    thread.join().unwrap();
    // The two tasks in queue order; the thread queued last and is served after them.
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    let s = all_back(&pool).await;
    assert_eq!(s.rejected, 2, "{s:?}");
    assert_eq!(s.waits, 3, "{s:?}");
}

/// Waits, timeouts and cancellations counted apart: `waits` counts the borrows that waited
/// and were served (tasks and threads), never the ones that timed out or were dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_count_served_waiters_only() {
    let pool = ready(
        Pool::builder(numbers())
            .max_size(1)
            .min_size(1)
            .borrow_timeout(Duration::from_secs(20)),
    )
    .await;
    let held = pool.get().await.unwrap();
    // Two that time out, one cancelled after a poll, one cancelled after being handed the
    // connection: none of them waited and was served.
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_millis(5), pool.get()).await;
        assert!(r.is_err());
    }
    drop(queued_get(&pool));
    let unread = queued_get(&pool);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move { drop(pool.get().await.unwrap()) }));
    }
    until_waiting(&pool, 4).await;
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || drop(pool.get_blocking().unwrap()))
        })
        .collect();
    until_waiting(&pool, 6).await;
    drop(held); // handed to `unread`
    drop(unread); // passes it on
    for t in tasks {
        tokio::time::timeout(LIMIT, t)
            .await
            .expect("a waiter hung")
            .unwrap();
    }
    let deadline = Instant::now() + LIMIT;
    for t in threads {
        while !t.is_finished() {
            assert!(
                Instant::now() < deadline,
                "a thread hung: {:?}",
                pool.stats()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        t.join().unwrap();
    }
    let s = all_back(&pool).await;
    assert_eq!(s.waits, 5, "{s:?}");
    assert_eq!(s.borrows, 6, "{s:?}");
    assert_eq!(
        s.timeouts, 0,
        "timeouts by the caller's own timer are not the pool's: {s:?}"
    );
}

/// The pool's own borrow timeout: a waiter that cannot be served fails with `Timeout` near
/// its deadline and is not counted as a wait; others queued behind it are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrow_timeouts_fail_in_time_and_leave_the_queue_working() {
    let pool = ready(
        Pool::builder(numbers())
            .max_size(1)
            .min_size(1)
            .borrow_timeout(Duration::from_millis(30)),
    )
    .await;
    let held = pool.get().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..4 {
        let pool = pool.clone();
        waiters.push(tokio::spawn(async move { pool.get().await.map(drop) }));
    }
    let p = pool.clone();
    let thread = std::thread::spawn(move || p.get_blocking().map(drop));
    for w in waiters {
        let r = tokio::time::timeout(LIMIT, w)
            .await
            .expect("a waiter hung")
            .unwrap();
        assert!(matches!(r, Err(PoolError::Timeout { .. })), "{r:?}");
    }
    let r = thread.join().unwrap();
    assert!(matches!(r, Err(PoolError::Timeout { .. })), "{r:?}");
    assert_eq!(pool.stats().waiting, 0);
    drop(held);
    // The queue still serves: one waiter queued after the timeouts is handed a return.
    let held = pool.get().await.unwrap();
    let mut f = queued_get(&pool);
    drop(held);
    drop(served(&mut f));
    let s = all_back(&pool).await;
    assert_eq!(s.timeouts, 5, "{s:?}");
    assert_eq!(s.waits, 1, "timeouts are not waits: {s:?}");
}

/// Resized to 0 and back while tasks and threads borrow with a short timeout: borrows time
/// out or are served, none hangs, and once it is back every waiter is served and nothing is
/// lost.
#[test]
fn resize_to_zero_and_back_under_load() {
    let rt = runtime();
    let pool = rt.block_on(async {
        ready(
            Pool::builder(numbers())
                .max_size(3)
                .min_size(3)
                .borrow_timeout(Duration::from_millis(50)),
        )
        .await
    });
    let holds = Arc::new(Holds::new(1 << 16, 3));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (pool, holds, stop) = (pool.clone(), holds.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(7 + t);
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(c) = pool.get_blocking() {
                        holds.take(*c);
                        std::thread::sleep(Duration::from_micros(rng.below(100)));
                        holds.give_back(*c);
                    }
                }
            })
        })
        .collect();
    rt.block_on(async {
        let tasks: Vec<_> = (0..6u64)
            .map(|t| {
                let (pool, holds, stop) = (pool.clone(), holds.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut rng = Rng(99 + t);
                    while !stop.load(Ordering::Relaxed) {
                        match task_borrow(&pool, &mut rng).await {
                            Some(Ok(c)) => hold_task(&holds, c, &mut rng).await,
                            Some(Err(PoolError::Timeout { .. })) | None => {}
                            Some(Err(e)) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        let end = Instant::now() + storm_length();
        let mut k = 0;
        while Instant::now() < end {
            pool.resize([0, 3, 1, 0, 2, 3][k % 6]);
            k += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pool.resize(3);
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            tokio::time::timeout(LIMIT, t)
                .await
                .unwrap_or_else(|_| panic!("a task hung: {:?}", pool.stats()))
                .unwrap();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    let s = rt.block_on(async {
        // Connections closed by the shrinks reopen in the background.
        common::until(
            LIMIT,
            "the pool reopens",
            || pool.stats(),
            |s| s.open == 3 && s.borrowed == 0,
        )
        .await;
        all_back(&pool).await
    });
    assert!(
        s.resized_away + s.idle_closed > 0,
        "no shrink closed anything: {s:?}"
    );
}

/// Borrowers waiting on a runtime that is shut down (their futures dropped by the shutdown,
/// one of them after being handed the connection): their places are given up, the connection
/// comes back, and the pool (on another runtime) serves the next borrower.
#[test]
fn waiters_on_a_runtime_shut_down_give_up_their_places() {
    let rt = runtime();
    let pool = rt.block_on(async {
        ready(
            Pool::builder(numbers())
                .max_size(1)
                .min_size(1)
                .borrow_timeout(Duration::from_secs(20)),
        )
        .await
    });
    let held = pool.try_get().expect("one idle connection");
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let served = Arc::new(AtomicBool::new(false));
    for _ in 0..4 {
        let (pool, served) = (pool.clone(), served.clone());
        other.spawn(async move {
            let _c = pool.get().await;
            served.store(true, Ordering::SeqCst);
        });
    }
    // A current-thread runtime runs its tasks only inside block_on.
    other.block_on(async {
        common::until(
            Duration::from_secs(10),
            "the waiters queue",
            || pool.stats(),
            |s| s.waiting == 4,
        )
        .await;
    });
    drop(held); // handed to the first waiter, whose task never runs again
    assert_eq!(pool.stats().waiting, 3);
    drop(other);
    assert!(!served.load(Ordering::SeqCst));
    let s = pool.stats();
    assert_eq!((s.waiting, s.idle, s.borrowed), (0, 1, 0), "{s:?}");
    rt.block_on(async {
        let c = tokio::time::timeout(LIMIT, pool.get())
            .await
            .expect("hung")
            .unwrap();
        drop(c);
        all_back(&pool).await;
    });
}

/// A [`Numbers`] connection that always needs a reset on return, which takes one poll.
struct AlwaysReset(Numbers);
impl slipstream_pool::Manager for AlwaysReset {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        slipstream_pool::Manager::connect(&self.0).await
    }
    fn needs_reset(&self, _: &u64) -> bool {
        true
    }
}

/// A connection returned for a reset after the pool's runtime has shut down: the reset task is
/// dropped unpolled, and its slot must be freed (the connection closed), not left lent to no
/// one for good. (Before, the task carried the bare slot, and dropping it lost the slot.)
#[test]
fn a_reset_the_shut_down_runtime_never_runs_frees_its_slot() {
    let rt = runtime();
    let pool = rt.block_on(async {
        let pool = Pool::builder(AlwaysReset(numbers()))
            .max_size(1)
            .min_size(1)
            .build();
        // Idle, not only open: the opener counts the connection before it puts it in its
        // slot, and a `try_get` in between finds none (this failed once in CI).
        common::until(LIMIT, "the pool opens", || pool.stats(), |s| s.idle == 1).await;
        pool
    });
    let held = pool.try_get().expect("one idle connection");
    drop(rt);
    drop(held);
    let s = pool.stats();
    assert_eq!(
        (s.open, s.idle, s.borrowed),
        (0, 0, 0),
        "the slot of a reset that never ran is still held: {s:?}"
    );
}

/// Reclaims (abandoned timeout, time-to-live) racing waiters and returns: tasks and threads
/// borrow with cancellations, some holding past the timers (their connections are taken back
/// and reopened while they still hold the old object). No connection is lent to two holders,
/// waiters are served by the reopened connections, and everything comes back.
#[test]
fn reclaims_racing_waiters_lose_nothing() {
    const MAX: usize = 2;
    let rt = runtime();
    let pool = rt.block_on(ready(
        Pool::builder(numbers())
            .max_size(MAX)
            .min_size(MAX)
            .abandoned_timeout(Duration::from_millis(20))
            .time_to_live(Duration::from_millis(40))
            .borrow_timeout(Duration::from_secs(20)),
    ));
    // Reclaimed holders keep their (dead) connection object past the reclaim: the bound on
    // how many are held at once does not apply, exclusivity by connection does.
    let holds = Arc::new(Holds::new(1 << 16, usize::MAX));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (pool, holds, tally, stop) =
                (pool.clone(), holds.clone(), tally.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(31 + t);
                while !stop.load(Ordering::Relaxed) {
                    match pool.get_blocking() {
                        Ok(c) => {
                            holds.take(*c);
                            // Now and then past the abandoned timeout.
                            let hold = match rng.below(10) {
                                0 => Duration::from_millis(60),
                                _ => Duration::from_micros(rng.below(200)),
                            };
                            std::thread::sleep(hold);
                            holds.give_back(*c);
                        }
                        Err(e) => tally.note_err("thread", e),
                    }
                }
            })
        })
        .collect();
    rt.block_on(async {
        let tasks: Vec<_> = (0..6u64)
            .map(|t| {
                let (pool, holds, tally, stop) =
                    (pool.clone(), holds.clone(), tally.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut rng = Rng(131 + t);
                    while !stop.load(Ordering::Relaxed) {
                        match task_borrow(&pool, &mut rng).await {
                            Some(Ok(c)) if rng.below(12) == 0 => {
                                holds.take(*c);
                                tokio::time::sleep(Duration::from_millis(60)).await;
                                holds.give_back(*c);
                            }
                            Some(Ok(c)) => hold_task(&holds, c, &mut rng).await,
                            Some(Err(e)) => tally.note_err("task", e),
                            None => {}
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(storm_length()).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            tokio::time::timeout(LIMIT, t)
                .await
                .unwrap_or_else(|_| panic!("a task hung: {:?}", pool.stats()))
                .unwrap();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    let other = tally.other.lock().unwrap().clone();
    assert!(other.is_empty(), "borrows failed: {other:?}");
    assert_eq!(tally.timeouts.load(Ordering::Relaxed), 0);
    let s = rt.block_on(async {
        common::until(
            LIMIT,
            "the pool reopens",
            || pool.stats(),
            |s| s.open == MAX && s.borrowed == 0,
        )
        .await;
        all_back(&pool).await
    });
    assert!(
        s.reclaimed_abandoned + s.reclaimed_ttl > 0,
        "nothing was reclaimed: {s:?}"
    );
}

/// PgPool over two servers, one drained and resumed after the other while tasks (with
/// cancellations of every kind) and threads borrow: no backend is lent to two holders at
/// once, no borrow fails but for a server being away, and every sub-pool's counts add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pool_waiters_cancelled_across_drains_lose_nothing() {
    use slipstream_pool::{Config, PgPool, Role};
    use std::collections::HashSet;
    const MAX: usize = 4;
    let (a, b) = (
        slipstream_testkit::Cluster::start().unwrap(),
        slipstream_testkit::Cluster::start().unwrap(),
    );
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .pool_config(Config {
            max_size: MAX,
            borrow_timeout: Duration::from_secs(20),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let names: Vec<String> = pool.servers().iter().map(|s| s.name.clone()).collect();
    // (server, backend pid) of every connection held now.
    let held = Arc::new(std::sync::Mutex::new(HashSet::<(String, i32)>::new()));
    let take = |held: &std::sync::Mutex<HashSet<(String, i32)>>, c: &slipstream_pool::PgPooled| {
        let key = (c.server().to_string(), c.backend_pid());
        assert!(
            held.lock().unwrap().insert(key.clone()),
            "{key:?} lent twice"
        );
        key
    };
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let ok = |r: &Result<slipstream_pool::PgPooled, PoolError>| match r {
        Ok(_) | Err(PoolError::NoServer { .. }) => None,
        Err(e) => Some(e.to_string()),
    };
    let mut tasks = Vec::new();
    for t in 0..6u64 {
        let (pool, held, stop, failures) =
            (pool.clone(), held.clone(), stop.clone(), failures.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(77 + t);
            while !stop.load(Ordering::Relaxed) {
                let r = match rng.below(4) {
                    0 => tokio::time::timeout(
                        Duration::from_micros(rng.below(51)),
                        pool.get(Role::Any),
                    )
                    .await
                    .ok(),
                    1 => tokio::select! {
                        biased;
                        r = pool.get(Role::Any) => Some(r),
                        _ = tokio::task::yield_now() => None,
                    },
                    _ => Some(pool.get(Role::Any).await),
                };
                let Some(r) = r else { continue };
                if let Some(e) = ok(&r) {
                    failures.lock().unwrap().push(e);
                }
                let Ok(mut c) = r else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let key = take(&held, &c);
                if rng.below(3) == 0 {
                    c.simple_query("SELECT 1").await.unwrap();
                } else {
                    tokio::task::yield_now().await;
                }
                assert!(held.lock().unwrap().remove(&key));
            }
        }));
    }
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (pool, held, stop, failures) =
                (pool.clone(), held.clone(), stop.clone(), failures.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = pool.get_blocking(Role::Any);
                    if let Some(e) = ok(&r) {
                        failures.lock().unwrap().push(e);
                    }
                    match r {
                        Ok(c) => {
                            let key = take(&held, &c);
                            std::thread::yield_now();
                            assert!(held.lock().unwrap().remove(&key));
                        }
                        Err(_) => std::thread::yield_now(),
                    }
                }
            })
        })
        .collect();
    let end = Instant::now() + storm_length();
    let mut n = 0;
    while Instant::now() < end {
        pool.drain(&names[n % 2]).unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
        pool.resume(&names[n % 2]).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(LIMIT, t)
            .await
            .unwrap_or_else(|_| panic!("a task hung: {:?}", pool.servers()))
            .unwrap();
    }
    let deadline = Instant::now() + LIMIT;
    for t in threads {
        while !t.is_finished() {
            assert!(
                Instant::now() < deadline,
                "a thread hung: {:?}",
                pool.servers()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        t.join().unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "borrows failed: {failures:?}");
    common::until(
        LIMIT,
        "every sub-pool settles",
        || pool.servers(),
        |s| {
            s.iter().all(|s| {
                s.outstanding == 0
                    && s.stats.borrowed == 0
                    && s.stats.waiting == 0
                    && s.stats.idle == s.stats.open
            }) && s.iter().map(|s| s.stats.open).sum::<usize>() <= MAX
        },
    )
    .await;
    // No connection lost: all MAX borrowable at once.
    let mut all = Vec::new();
    for _ in 0..MAX {
        let c = tokio::time::timeout(LIMIT, pool.get(Role::Any))
            .await
            .expect("hung")
            .unwrap();
        take(&held, &c);
        all.push(c);
    }
    assert!(pool.try_get(Role::Any).is_none());
}
