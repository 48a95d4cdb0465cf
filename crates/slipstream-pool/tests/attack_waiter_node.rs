//! Attacks on the waiter's node rewritten on 2026-11-24 (session 21): the mailbox is a field of
//! the pinned `Wait` (inside the `get` future, or on a blocked thread's stack), the queue entry
//! holds a raw pointer to it, free entries are reused last-in first-out, and `max_waiters` is
//! checked under the queue's lock. A dangling entry shows as a connection lost (never back
//! IDLE), a waiter count that never returns to 0, or a crash. Each test is bounded;
//! `SLIPSTREAM_ATTACK_LONG=1` runs the storms for 20 s instead of 2 s.

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::time::{Duration, Instant};

use common::{Holds, Numbers, all_back, numbers, two_workers};
use slipstream_pool::{Pool, PoolError, Pooled};

const LIMIT: Duration = Duration::from_secs(30);

fn storm_length() -> Duration {
    match std::env::var("SLIPSTREAM_ATTACK_LONG").as_deref() {
        Ok("1") => Duration::from_secs(20),
        _ => Duration::from_secs(2),
    }
}

/// A pool of `n` connections, all open; no borrow timeout (so no timer holds a waker: the
/// queue's copy of a waker can be its last).
async fn ready(n: usize, max_waiters: usize) -> Pool<Numbers> {
    let pool = Pool::builder(numbers())
        .max_size(n)
        .min_size(n)
        .max_waiters(max_waiters)
        .borrow_timeout(Duration::MAX)
        .build();
    // Idle, not only open: the opener counts a connection before it puts it in its slot, and
    // a `try_get` in between finds none.
    common::until(LIMIT, "the pool opens", || pool.stats(), |s| s.idle >= n).await;
    pool
}

type GetFut<'a> = Pin<Box<dyn Future<Output = Result<Pooled<Numbers>, PoolError>> + Send + 'a>>;

fn poll_with<F: Future + ?Sized>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

/// A waker whose last reference panics when dropped (safe code: `Wake` plus a `Drop`), once
/// armed: the pool runs a user's waker code (its clone, wake and drop) and must stay sound
/// when that code panics.
struct PanicsOnDrop(AtomicBool);
impl Wake for PanicsOnDrop {
    fn wake(self: Arc<Self>) {}
}
impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if self.0.load(Ordering::SeqCst) && !std::thread::panicking() {
            panic!("the waker's drop panics");
        }
    }
}

/// Queues a `get` on `pool` (its only connection held) with a waker whose only reference is
/// then the queue's copy, armed to panic when that copy is dropped.
fn queued_with_panicking_waker(pool: &Pool<Numbers>) -> GetFut<'_> {
    let w = Arc::new(PanicsOnDrop(AtomicBool::new(true)));
    let waker = Waker::from(w);
    let mut f: GetFut<'_> = Box::pin(pool.get());
    assert!(poll_with(f.as_mut(), &waker).is_pending());
    assert_eq!(pool.stats().waiting, 1);
    // From here the queue's clone is the waker's last reference.
    drop(waker);
    f
}

/// A queued `get` polled again with another waker drops the old one under the queue's lock;
/// when that drop panics, the poll panics. The future is then dropped: the queue must not keep
/// an entry pointing at the dead node (the next return would write into freed memory and the
/// connection would be lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waker_that_panics_when_replaced_leaves_no_entry_pointing_at_the_dead_wait() {
    let pool = ready(1, 100).await;
    let held = pool.try_get().expect("the only connection");
    let mut f = queued_with_panicking_waker(&pool);
    let repoll = catch_unwind(AssertUnwindSafe(|| {
        poll_with(f.as_mut(), Waker::noop()).is_pending()
    }));
    assert!(
        repoll.is_err(),
        "the waker's drop did not run on the re-poll"
    );
    drop(f);
    // Whatever the poll did, the dropped future has given up its place.
    assert_eq!(pool.stats().waiting, 0, "{:?}", pool.stats());
    drop(held);
    let c = pool.get().await.expect("the connection comes back");
    drop(c);
    all_back(&pool).await;
}

/// A queued `get` dropped (cancelled) drops its waker as it leaves the queue; when that drop
/// panics, the waiter must still be counted out and its entry freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waker_that_panics_when_a_cancelled_wait_leaves_still_counts_it_out() {
    let pool = ready(1, 1).await;
    let held = pool.try_get().expect("the only connection");
    let f = queued_with_panicking_waker(&pool);
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(f)));
    assert!(dropped.is_err(), "the waker's drop did not run on cancel");
    assert_eq!(pool.stats().waiting, 0, "{:?}", pool.stats());
    // max_waiters 1: the place given up is free again.
    let mut again: GetFut<'_> = Box::pin(pool.get());
    assert!(poll_with(again.as_mut(), Waker::noop()).is_pending());
    drop(held);
    let c = match poll_with(again.as_mut(), Waker::noop()) {
        Poll::Ready(r) => r.expect("served"),
        Poll::Pending => panic!("not served: {:?}", pool.stats()),
    };
    drop(c);
    drop(again);
    all_back(&pool).await;
}

/// A waker whose clone panics (the pool clones a new waker into the queue under its lock).
fn panics_on_clone() -> Waker {
    fn clone(_: *const ()) -> RawWaker {
        panic!("the waker's clone panics")
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    // SAFETY: every function of the vtable ignores the data pointer (null), and none of them
    // breaks the waker contract beyond panicking, which is what is being attacked.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// A queued `get` re-polled with a waker whose clone panics: the poll panics (the pool's
/// `async fn` is then done, its wait dropped as the panic unwinds), and the wait must have left
/// the queue whole: no entry left pointing at the dropped node, the connection lent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waker_that_panics_when_cloned_leaves_no_entry_behind() {
    let pool = ready(1, 1).await;
    let held = pool.try_get().expect("the only connection");
    let mut f: GetFut<'_> = Box::pin(pool.get());
    assert!(poll_with(f.as_mut(), Waker::noop()).is_pending());
    let bad = panics_on_clone();
    let repoll = catch_unwind(AssertUnwindSafe(|| {
        poll_with(f.as_mut(), &bad).is_pending()
    }));
    assert!(
        repoll.is_err(),
        "the waker's clone did not run on the re-poll"
    );
    drop(f);
    assert_eq!(pool.stats().waiting, 0, "{:?}", pool.stats());
    // max_waiters 1: the place is free again, and the return serves the new waiter.
    let mut again: GetFut<'_> = Box::pin(pool.get());
    assert!(poll_with(again.as_mut(), Waker::noop()).is_pending());
    drop(held);
    match poll_with(again.as_mut(), Waker::noop()) {
        Poll::Ready(r) => drop(r.expect("served")),
        Poll::Pending => panic!("not served: {:?}", pool.stats()),
    }
    drop(again);
    all_back(&pool).await;
}

/// A waker whose wake panics.
struct PanicsOnWake;
impl Wake for PanicsOnWake {
    fn wake(self: Arc<Self>) {
        panic!("the waker's wake panics")
    }
}

/// A return that wakes a waiter whose wake panics: the return panics in the caller, but only
/// after the connection was put back (handed to that waiter): nothing is lost, and the waiter
/// gets it when polled, or passes it on when dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waker_that_panics_when_woken_loses_no_connection() {
    let pool = ready(1, 100).await;
    for served in [true, false] {
        let held = pool.try_get().expect("the only connection");
        let bad = Waker::from(Arc::new(PanicsOnWake));
        let mut f: GetFut<'_> = Box::pin(pool.get());
        assert!(poll_with(f.as_mut(), &bad).is_pending());
        let returned = catch_unwind(AssertUnwindSafe(|| drop(held)));
        assert!(returned.is_err(), "the return did not wake the waiter");
        if served {
            match poll_with(f.as_mut(), Waker::noop()) {
                Poll::Ready(r) => drop(r.expect("served")),
                Poll::Pending => panic!("not served: {:?}", pool.stats()),
            }
        }
        drop(f);
        let s = all_back(&pool).await;
        assert_eq!(s.waiting, 0, "{s:?}");
    }
}

/// Futures polled on one thread, their boxes moved to another thread and polled or dropped
/// there (queued, woken but not re-polled, served but not re-polled), while holders return:
/// every connection lent once, none lost.
#[test]
fn boxed_waits_moved_and_dropped_on_other_threads_lose_nothing() {
    const N: usize = 3;
    let rt = two_workers();
    let pool = Arc::new(rt.block_on(ready(N, 100_000)));
    let holds = Arc::new(Holds::new(N, N));
    let end = Instant::now() + storm_length();
    let (tx, rx) = std::sync::mpsc::sync_channel::<(GetFut<'static>, u64)>(64);
    // 'static futures: each borrows a clone of the Arc'd pool, kept alive in the box.
    fn boxed(pool: Arc<Pool<Numbers>>) -> GetFut<'static> {
        Box::pin(async move { pool.get().await })
    }
    let producers: Vec<_> = (0..2)
        .map(|k| {
            let (pool, holds, tx) = (pool.clone(), holds.clone(), tx.clone());
            std::thread::spawn(move || {
                let mut n = k as u64;
                while Instant::now() < end {
                    n += 1;
                    let mut f = boxed(pool.clone());
                    match poll_with(f.as_mut(), Waker::noop()) {
                        Poll::Ready(r) => {
                            let c = r.expect("borrow");
                            holds.take(*c);
                            std::thread::yield_now();
                            holds.give_back(*c);
                        }
                        Poll::Pending => tx.send((f, n)).unwrap(),
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let consumer = {
        let holds = holds.clone();
        std::thread::spawn(move || {
            let mut kept: Vec<GetFut<'static>> = Vec::new();
            for (mut f, n) in rx {
                match n % 4 {
                    // Dropped here, never polled on this thread.
                    0 => drop(f),
                    // Polled here once (maybe served), then dropped.
                    1 => {
                        if let Poll::Ready(r) = poll_with(f.as_mut(), Waker::noop()) {
                            let c = r.expect("borrow");
                            holds.take(*c);
                            holds.give_back(*c);
                        }
                    }
                    // Kept a while (maybe served but not re-polled), moved, then dropped.
                    _ => {
                        kept.push(f);
                        if kept.len() > 8 {
                            let f = kept.swap_remove((n as usize) % kept.len());
                            let moved = Box::new(f);
                            drop(moved);
                        }
                    }
                }
            }
            drop(kept);
        })
    };
    for p in producers {
        p.join().unwrap();
    }
    consumer.join().unwrap();
    rt.block_on(all_back(&pool));
}

/// `max_waiters` N and N + K borrowers released at once against a pool with nothing idle: at
/// no moment are more than N queued, exactly K are refused `Full`, and the N served later.
#[test]
fn max_waiters_is_exact_under_a_barrier_of_borrowers() {
    const N: usize = 6;
    const K: usize = 5;
    let rounds = if storm_length() > Duration::from_secs(2) {
        200
    } else {
        20
    };
    let rt = two_workers();
    let pool = Arc::new(rt.block_on(ready(1, N)));
    for _ in 0..rounds {
        let held = pool.try_get().expect("the only connection");
        let stop = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicUsize::new(0));
        let watcher = {
            let (pool, stop, most) = (pool.clone(), stop.clone(), most.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    most.fetch_max(pool.stats().waiting, Ordering::SeqCst);
                }
            })
        };
        let barrier = Arc::new(Barrier::new(N + K));
        let full = Arc::new(AtomicUsize::new(0));
        // Half blocking threads, half tasks.
        let mut threads = Vec::new();
        for i in 0..N + K {
            let (pool, barrier, full) = (pool.clone(), barrier.clone(), full.clone());
            if i % 2 == 0 {
                threads.push(std::thread::spawn(move || {
                    barrier.wait();
                    match pool.get_blocking() {
                        Ok(c) => drop(c),
                        Err(PoolError::Full { .. }) => {
                            full.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }));
            } else {
                let handle = rt.handle().clone();
                threads.push(std::thread::spawn(move || {
                    barrier.wait();
                    handle.block_on(async {
                        match pool.get().await {
                            Ok(c) => drop(c),
                            Err(PoolError::Full { .. }) => {
                                full.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    })
                }));
            }
        }
        rt.block_on(common::until(
            LIMIT,
            "the borrowers queue or are refused",
            || (pool.stats().waiting, full.load(Ordering::SeqCst)),
            |&(w, f)| w + f == N + K,
        ));
        assert_eq!(full.load(Ordering::SeqCst), K, "{:?}", pool.stats());
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        watcher.join().unwrap();
        let most = most.load(Ordering::SeqCst);
        assert!(most <= N, "{most} queued at once with max_waiters {N}");
        rt.block_on(all_back(&pool));
    }
}

/// Many borrows raced in one task (the first served wins, the others are dropped, some of them
/// already handed a connection), with a second such task and holders returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_borrows_raced_in_one_task_lose_nothing() {
    const N: usize = 2;
    let pool = Arc::new(ready(N, 100_000).await);
    let holds = Arc::new(Holds::new(N, N));
    let end = Instant::now() + storm_length();
    let racers: Vec<_> = (0..3)
        .map(|_| {
            let (pool, holds) = (pool.clone(), holds.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let gets: Vec<_> = (0..8).map(|_| Box::pin(pool.get())).collect();
                    let (got, _, rest) = futures_select_all(gets).await;
                    let c = got.expect("borrow");
                    holds.take(*c);
                    tokio::task::yield_now().await;
                    holds.give_back(*c);
                    drop(c);
                    drop(rest);
                }
            })
        })
        .collect();
    for r in racers {
        r.await.unwrap();
    }
    all_back(&pool).await;
}

/// `select_all` without the futures crate: polls each in turn, returns the first ready with
/// the rest (not yet dropped: the caller drops them after using the winner).
async fn futures_select_all<F: Future + Unpin>(mut fs: Vec<F>) -> (F::Output, usize, Vec<F>) {
    std::future::poll_fn(move |cx| {
        for i in 0..fs.len() {
            if let Poll::Ready(out) = Pin::new(&mut fs[i]).poll(cx) {
                drop(fs.swap_remove(i));
                return Poll::Ready((out, i, std::mem::take(&mut fs)));
            }
        }
        Poll::Pending
    })
    .await
}

/// Thousands of queued futures dropped in a scattered order while another thread returns
/// connections (hand-offs and cancellations in the same instants, entries reused last-in
/// first-out by the next borrowers).
#[test]
fn mass_cancellation_racing_returns_loses_nothing() {
    const N: usize = 4;
    const W: usize = 2000;
    let rt = two_workers();
    let pool = Arc::new(rt.block_on(ready(N, 100_000)));
    let rounds = if storm_length() > Duration::from_secs(2) {
        50
    } else {
        5
    };
    for round in 0..rounds {
        let held: Vec<_> = (0..N).map(|_| pool.try_get().expect("idle")).collect();
        let mut fs: Vec<GetFut<'_>> = (0..W)
            .map(|_| -> GetFut<'_> { Box::pin(pool.get()) })
            .collect();
        for f in fs.iter_mut() {
            assert!(poll_with(f.as_mut(), Waker::noop()).is_pending());
        }
        assert_eq!(pool.stats().waiting, W);
        std::thread::scope(|s| {
            let pool = &pool;
            s.spawn(move || {
                for c in held {
                    drop(c);
                    std::thread::yield_now();
                }
                // Borrow and return in a loop: each return hands over or wakes.
                for _ in 0..200 {
                    if let Some(c) = pool.try_get() {
                        drop(c);
                    }
                }
            });
            let mut k = round as usize + 1;
            while !fs.is_empty() {
                k = (k * 7919 + 13) % fs.len().max(1);
                let mut f = fs.swap_remove(k % fs.len());
                if k.is_multiple_of(3) {
                    // Re-polled before the drop: maybe served, then dropped unused.
                    let _ = poll_with(f.as_mut(), Waker::noop());
                }
                drop(f);
                if k.is_multiple_of(5) && fs.len() > 100 {
                    // A new borrower takes a freed entry at once (LIFO reuse).
                    let mut g: GetFut<'_> = Box::pin(pool.get());
                    let _ = poll_with(g.as_mut(), Waker::noop());
                    fs.push(g);
                }
            }
        });
        rt.block_on(all_back(&pool));
    }
}
