//! The generic pool with a trivial in-memory connection (no database: these test the pool's
//! own guarantees). Each connection carries an "in use" flag that a second concurrent holder
//! would trip.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use slipstream_pool::{Manager, Pool, PoolError};

#[derive(Debug)]
struct Conn {
    id: u64,
    in_use: AtomicBool,
    broken: AtomicBool,
    /// Counts this connection's close (its drop) in the manager's counters.
    counts: Arc<Counting>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.counts.closed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Conn {
    /// Marks the connection held; panics if someone else holds it.
    fn enter(&self) {
        assert!(
            !self.in_use.swap(true, Ordering::AcqRel),
            "connection {} lent twice",
            self.id
        );
    }
    fn leave(&self) {
        self.in_use.store(false, Ordering::Release);
    }
}

#[derive(Debug, Default)]
struct Counting {
    next: AtomicU64,
    refuse: AtomicBool,
    /// Connections dropped (closed).
    closed: AtomicU64,
    /// `is_broken` panics, as user code may.
    panic_in_is_broken: AtomicBool,
}

/// The manager: shares its counters with the test.
#[derive(Clone)]
struct Mgr(Arc<Counting>);

impl Manager for Mgr {
    type Connection = Conn;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<Conn, std::io::Error> {
        if self.0.refuse.load(Ordering::Relaxed) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused by the test",
            ));
        }
        Ok(Conn {
            id: self.0.next.fetch_add(1, Ordering::Relaxed),
            in_use: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            counts: self.0.clone(),
        })
    }
    fn is_broken(&self, conn: &Conn) -> bool {
        assert!(
            !self.0.panic_in_is_broken.load(Ordering::Relaxed),
            "is_broken panics, as the test asked"
        );
        conn.broken.load(Ordering::Relaxed)
    }
}

fn pool(max: usize) -> (Pool<Mgr>, Arc<Counting>) {
    let m = Arc::new(Counting::default());
    let p = Pool::builder(Mgr(m.clone()))
        .max_size(max)
        .borrow_timeout(Duration::from_secs(30))
        .build();
    (p, m)
}

#[tokio::test]
async fn a_returned_connection_is_lent_again() {
    let (pool, _) = pool(4);
    let id = pool.get().await.unwrap().id;
    let again = pool.get().await.unwrap();
    assert_eq!(again.id, id);
    drop(again);
    let s = pool.stats();
    assert_eq!((s.opened, s.open, s.idle, s.borrows), (1, 1, 1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tasks_never_share_a_connection() {
    let (pool, _) = pool(4);
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    let conn = pool.get().await.unwrap();
                    conn.enter();
                    // Hold it across an await, as real work does.
                    tokio::task::yield_now().await;
                    conn.leave();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let s = pool.stats();
    assert_eq!(s.borrows, 100_000);
    assert!(s.opened <= 4, "{s:?}");
    assert_eq!((s.waiting, s.borrowed, s.idle as u64), (0, 0, s.opened));
}

#[tokio::test]
async fn ten_thousand_threads_never_share_a_connection() {
    let (pool, _) = pool(6);
    // Open the six first, so every thread competes for them.
    let held: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(pool.get().await.unwrap());
        }
        v
    };
    drop(held);
    let threads: Vec<_> = (0..10_000)
        .map(|_| {
            let pool = pool.clone();
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut got = 0u64;
                    for _ in 0..20 {
                        let conn = pool.get_blocking().unwrap();
                        conn.enter();
                        std::thread::yield_now();
                        conn.leave();
                        got += 1;
                    }
                    got
                })
                .unwrap()
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 200_000);
    let s = pool.stats();
    assert_eq!((s.opened, s.idle, s.waiting), (6, 6, 0), "{s:?}");
}

#[tokio::test]
async fn a_timeout_says_why_and_loses_nothing() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m))
        .max_size(1)
        .borrow_timeout(Duration::from_millis(20))
        .build();
    let held = pool.get().await.unwrap();
    let e = pool.get().await.unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::Timeout {
                open: 1,
                max_size: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("raise max_size"), "{e}");
    let e = tokio::task::spawn_blocking({
        let pool = pool.clone();
        move || pool.get_blocking().unwrap_err()
    })
    .await
    .unwrap();
    assert!(matches!(e, PoolError::Timeout { .. }), "{e:?}");
    drop(held);
    assert!(pool.get().await.is_ok());
    let s = pool.stats();
    assert_eq!((s.timeouts, s.waiting, s.idle), (2, 0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiting_borrows_lose_no_connection() {
    let (pool, _) = pool(2);
    let a = pool.get().await.unwrap();
    let b = pool.get().await.unwrap();
    // Fifty borrowers wait; each gives up after a different short time, some while the held
    // connections are being returned.
    let waiters: Vec<_> = (0..50u64)
        .map(|k| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_micros(50 * k), pool.get()).await;
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1)).await;
    drop(a);
    drop(b);
    for w in waiters {
        w.await.unwrap();
    }
    // Both connections are back: two borrows succeed at once.
    let x = pool.try_get().expect("first connection idle");
    let y = pool.try_get().expect("second connection idle");
    assert_ne!(x.id, y.id);
    assert_eq!(pool.stats().waiting, 0);
}

#[tokio::test]
async fn too_many_waiters_are_rejected_at_once() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m)).max_size(1).max_waiters(2).build();
    let held = pool.get().await.unwrap();
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.get().await.map(|c| c.id) })
        })
        .collect();
    while pool.stats().waiting < 2 {
        tokio::task::yield_now().await;
    }
    let e = pool.get().await.unwrap_err();
    assert!(
        matches!(
            e,
            PoolError::Full {
                waiting: 2,
                max_waiters: 2
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("max_waiters"), "{e}");
    drop(held);
    for w in waiting {
        assert!(w.await.unwrap().is_ok());
    }
    assert_eq!(pool.stats().rejected, 1);
}

#[tokio::test]
async fn connect_failures_show_in_the_timeout_error() {
    let m = Arc::new(Counting::default());
    m.refuse.store(true, Ordering::Relaxed);
    let pool = Pool::builder(Mgr(m.clone()))
        .borrow_timeout(Duration::from_millis(100))
        .build();
    let e = pool.get().await.unwrap_err();
    assert!(
        e.to_string().contains("connection refused by the test"),
        "{e}"
    );
    assert!(pool.stats().connect_failures >= 1);
    // When the database comes back, borrowers get connections again.
    m.refuse.store(false, Ordering::Relaxed);
    let pool2 = pool.clone();
    let conn = tokio::time::timeout(Duration::from_secs(5), async move {
        loop {
            if let Ok(c) = pool2.get().await {
                return c.id;
            }
        }
    })
    .await
    .expect("a connection once connecting works");
    let _ = conn;
}

#[tokio::test]
async fn a_broken_connection_is_closed_on_return_and_replaced() {
    let (pool, _) = pool(1);
    let conn = pool.get().await.unwrap();
    let first = conn.id;
    conn.broken.store(true, Ordering::Relaxed);
    drop(conn);
    let conn = pool.get().await.unwrap();
    assert_ne!(conn.id, first);
    let s = pool.stats();
    assert_eq!((s.closed_broken, s.opened, s.open), (1, 2, 1));
}

/// The last handle closes the pool's connections (idle ones at once, a lent one on its
/// return, none opened again), although guards and this thread's cached reference to the pool
/// (returns keep one, so a borrow clones no shared count) keep its memory alive.
#[tokio::test]
async fn dropping_the_last_handle_closes_every_connection() {
    let (pool, counts) = pool(3);
    let held = [
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
    ];
    let [a, b, lent] = held;
    // Returned on this thread: it now caches a reference to the pool.
    drop((a, b));
    let closed = || counts.closed.load(Ordering::Relaxed);
    drop(pool.clone());
    assert_eq!(closed(), 0, "another handle lives: nothing closes");
    drop(pool);
    assert_eq!(
        closed(),
        2,
        "the idle connections close with the last handle"
    );
    drop(lent);
    assert_eq!(closed(), 3, "the lent one closes as it comes back");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        counts.next.load(Ordering::Relaxed),
        3,
        "nothing opened since"
    );
}

/// A panic in the manager's code while a guard returns its connection (here `is_broken`)
/// closes that connection and frees its slot for a new one; and once the handle, the guard
/// and the thread are gone, so is the pool (the manager's reference to the test's counters).
/// Failed before: the guard's reference to the pool was released only after the return's user
/// code, so the panic leaked the pool for good (found by an attacker); the slot was lost too.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_panic_while_returning_loses_neither_the_slot_nor_the_pool() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m.clone()))
        .max_size(1)
        .borrow_timeout(Duration::from_secs(5))
        .build();
    let counts = m.clone();
    let borrower = std::thread::spawn(move || {
        let conn = pool.get_blocking().expect("an idle pool lends");
        counts.panic_in_is_broken.store(true, Ordering::Relaxed);
        let returned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(conn)));
        counts.panic_in_is_broken.store(false, Ordering::Relaxed);
        assert!(returned.is_err(), "is_broken panicked");
        assert_eq!(
            counts.closed.load(Ordering::Relaxed),
            1,
            "closed on the way"
        );
        // And counted (before session 33 it was not: the stats lost a close).
        assert_eq!(pool.stats().closed_broken, 1, "the close is counted");
        // Its slot is free: with max_size 1, this is a new connection, not a timeout.
        let again = pool.get_blocking().expect("the slot came back");
        assert_eq!(again.id, 1);
    });
    borrower.join().expect("the borrower's checks");
    let start = std::time::Instant::now();
    // The pool's task lets go of it as it ends.
    while Arc::strong_count(&m) > 1 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the pool's memory is still held: {} references to its manager's counters",
            Arc::strong_count(&m)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(m.closed.load(Ordering::Relaxed), 2);
}

/// A thread borrowing from a pool with nothing open wakes the opener once it has queued, so
/// the connection is opened at once. Until session 42 it woke the opener before queueing
/// (before its spins and yields, even), the opener's look found no waiter and went back to
/// sleep, and the thread waited for the opener's next periodic look, 500 ms later: 36 of 40
/// first borrows did (`loom_a_blocking_borrower_wakes_the_opener_once_queued` models the
/// order). Each borrow here has 400 ms, under that period, for an instant connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_waiting_for_a_first_connection_does_not_wait_for_the_openers_timer() {
    for round in 0..10 {
        let pool = Pool::builder(Mgr(Arc::default()))
            .max_size(2)
            .borrow_timeout(Duration::from_millis(400))
            .build();
        let got = tokio::task::spawn_blocking(move || pool.get_blocking().map(|c| c.id))
            .await
            .expect("the borrowing thread ends");
        assert!(
            got.is_ok(),
            "round {round}: the borrow waited out its 400 ms for an instant connect: {got:?}"
        );
    }
}

#[tokio::test]
async fn min_size_connections_open_in_the_background() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m)).max_size(5).min_size(3).build();
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.stats().open < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("three connections open without any borrower");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        pool.stats().open,
        3,
        "no more than min_size without borrowers"
    );
}

#[tokio::test]
async fn connections_retire_at_their_lifetime_idle_or_returned() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m))
        .max_size(1)
        .max_lifetime(Duration::from_millis(50))
        .build();
    let first = pool.get().await.unwrap().id;
    // Idle past its lifetime: the reaper closes it and the next borrow gets a new one.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let conn = pool.get().await.unwrap();
    assert_ne!(conn.id, first);
    let second = conn.id;
    // Held past its lifetime: closed when returned.
    tokio::time::sleep(Duration::from_millis(80)).await;
    drop(conn);
    let third = pool.get().await.unwrap().id;
    assert_ne!(third, second);
    assert!(pool.stats().retired >= 2, "{:?}", pool.stats());
}

#[tokio::test]
async fn idle_connections_close_after_the_timeout_but_not_below_min_size() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m))
        .max_size(3)
        .min_size(1)
        .idle_timeout(Duration::from_millis(50))
        .build();
    let held: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(pool.get().await.unwrap());
        }
        v
    };
    assert_eq!(pool.stats().open, 3);
    drop(held);
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.stats().open > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("idle connections close down to min_size");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let s = pool.stats();
    assert_eq!((s.open, s.idle_closed), (1, 2), "{s:?}");
}

#[tokio::test]
async fn connection_attributes_count_borrows_and_show_who_is_busy() {
    let (pool, _) = pool(2);
    let a = pool.get().await.unwrap();
    let b = pool.get().await.unwrap();
    drop(b);
    for _ in 0..3 {
        drop(pool.get().await.unwrap());
    }
    let infos = pool.connections();
    assert_eq!(infos.len(), 2);
    assert_eq!(infos.iter().filter(|c| c.borrowed).count(), 1);
    assert_eq!(infos.iter().map(|c| c.borrows).sum::<u64>(), 5);
    drop(a);
    assert!(pool.connections().iter().all(|c| !c.borrowed));
}

mod common;

/// Waits until the pool's stats satisfy `done`, failing after 10 s.
async fn until(pool: &Pool<Mgr>, what: &str, done: impl Fn(&slipstream_pool::Stats) -> bool) {
    common::until(Duration::from_secs(10), what, || pool.stats(), done).await;
}

#[tokio::test]
async fn resizing_grows_at_once_and_shrinks_as_connections_come_back() {
    let (pool, _) = pool(2);
    let held: Vec<_> = vec![pool.get().await.unwrap(), pool.get().await.unwrap()];
    assert!(pool.try_get().is_none());
    assert_eq!(pool.resize(4), 4);
    // A waiting borrow makes the opener use the new room.
    let (c, d) = (pool.get().await.unwrap(), pool.get().await.unwrap());
    assert_eq!(pool.stats().open, 4);
    // Shrink to 1: idle connections above it close at once, lent ones when returned.
    drop(c);
    pool.resize(1);
    until(&pool, "idle connections above the new size close", |s| {
        s.open == 3
    })
    .await;
    drop(d);
    drop(held);
    until(&pool, "one connection left", |s| s.open == 1).await;
    let s = pool.stats();
    assert_eq!((s.max_size, s.resized_away), (1, 3), "{s:?}");
    // The survivor still works, and only one borrow at a time gets it.
    let only = pool.get().await.unwrap();
    assert!(pool.try_get().is_none());
    drop(only);
    // Past the resize limit (64 by default), the size is capped.
    assert_eq!(pool.resize(1000), 64);
}

#[tokio::test]
async fn a_connection_held_past_its_time_to_live_frees_its_slot_for_others() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m))
        .max_size(1)
        .time_to_live(Duration::from_millis(100))
        .build();
    let kept = pool.get().await.unwrap();
    let id = kept.id;
    // The only connection is held for ever; a second borrower still gets one, soon.
    let other = tokio::time::timeout(Duration::from_secs(5), pool.get())
        .await
        .expect("the reclaim frees the slot")
        .unwrap();
    assert_ne!(other.id, id);
    // Returning the reclaimed guard does not disturb the slot's new holder.
    drop(kept);
    assert!(pool.try_get().is_none(), "the slot is `other`'s");
    drop(other);
    let s = pool.stats();
    assert_eq!((s.reclaimed_ttl, s.open, s.idle), (1, 1, 1), "{s:?}");
}

#[tokio::test]
async fn attributes_track_borrow_time_and_activity() {
    let m = Arc::new(Counting::default());
    let pool = Pool::builder(Mgr(m))
        .max_size(1)
        .abandoned_timeout(Duration::from_secs(60)) // a timer, so the clock ticks often
        .build();
    let conn = pool.get().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = conn.id; // use it
    tokio::time::sleep(Duration::from_millis(150)).await;
    let info = &pool.connections()[0];
    assert!(info.borrowed);
    assert!(
        info.since_borrowed >= Duration::from_millis(300),
        "{info:?}"
    );
    assert!(info.since_active < info.since_borrowed, "{info:?}");
    drop(conn);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let info = &pool.connections()[0];
    assert!(info.busy_total >= Duration::from_millis(350), "{info:?}");
    assert!(
        info.since_returned >= Duration::from_millis(100),
        "{info:?}"
    );
}

/// Labels name a number; a connection can switch numbers unless it is labeled "sealed".
struct Numbered;

impl slipstream_pool::Labeling<Conn> for Numbered {
    fn cost(&self, wanted: &slipstream_pool::Labels, current: &slipstream_pool::Labels) -> u32 {
        if current.contains_key("sealed") {
            slipstream_pool::TOO_COSTLY
        } else if wanted == current {
            0
        } else {
            1 + current.len() as u32
        }
    }
    async fn configure(&self, _wanted: &slipstream_pool::Labels, _conn: &mut Conn) -> bool {
        true
    }
}

fn label(k: &str, v: &str) -> slipstream_pool::Labels {
    slipstream_pool::Labels::from([(k.to_string(), v.to_string())])
}

#[tokio::test]
async fn labeled_borrows_pick_the_cheapest_and_replace_too_costly_ones() {
    let (pool, _) = pool(3);
    let (a, b, c) = (
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
    );
    a.set_labels(label("n", "1"));
    b.set_labels(label("n", "2"));
    c.set_labels(label("sealed", "yes"));
    let (ida, idb, idc) = (a.id, b.id, c.id);
    drop((a, b, c));
    // Exact matches cost 0.
    assert_eq!(
        pool.get_labeled(&label("n", "2"), &Numbered)
            .await
            .unwrap()
            .id,
        idb
    );
    assert_eq!(
        pool.get_labeled(&label("n", "1"), &Numbered)
            .await
            .unwrap()
            .id,
        ida
    );
    // No exact match: the cheapest reusable (cost 2, not the sealed one), reconfigured.
    let three = pool.get_labeled(&label("n", "3"), &Numbered).await.unwrap();
    assert!(three.id == ida || three.id == idb);
    assert_eq!(*three.labels(), label("n", "3"));
    // With only the sealed one idle, a labeled borrow closes it and gets a fresh connection.
    let other = pool.get_labeled(&label("n", "5"), &Numbered).await.unwrap();
    assert_ne!(other.id, idc);
    let fresh = pool.get_labeled(&label("n", "4"), &Numbered).await.unwrap();
    assert!(![ida, idb, idc].contains(&fresh.id), "{}", fresh.id);
    let s = pool.stats();
    assert_eq!((s.label_closes, s.label_configures), (1, 3), "{s:?}");
}
