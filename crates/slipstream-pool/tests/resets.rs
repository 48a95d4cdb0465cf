//! Attacks on the reset a returned connection goes through on the pool's runtime (found by
//! session 32's attacker): what happens to the pool while the reset runs must still hold when
//! it ends. A reset that ends after a shrink or an eviction closes its connection rather than
//! lending it again, and the last handle's going ends a reset that hangs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{all_back, two_workers};
use slipstream_pool::Pool;

const LIMIT: Duration = Duration::from_secs(30);

/// A connection counted live until dropped.
struct Conn {
    id: u64,
    live: Arc<AtomicI64>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every return needs a reset, which waits for `gate` (or, if `hang`, never ends).
struct Gated {
    next: AtomicU64,
    hang: bool,
    probe: Arc<Probe>,
}

/// What a test sees of a [`Gated`] manager, which the pool owns.
#[derive(Default)]
struct Probe {
    live: Arc<AtomicI64>,
    gate: tokio::sync::Notify,
    started: AtomicUsize,
    /// The manager was dropped: the pool's memory is gone.
    dropped: AtomicBool,
}

impl Drop for Gated {
    fn drop(&mut self) {
        self.probe.dropped.store(true, Ordering::SeqCst);
    }
}

impl slipstream_pool::Manager for Gated {
    type Connection = Conn;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<Conn, std::io::Error> {
        self.probe.live.fetch_add(1, Ordering::SeqCst);
        Ok(Conn {
            id: self.next.fetch_add(1, Ordering::SeqCst),
            live: self.probe.live.clone(),
        })
    }
    fn needs_reset(&self, _: &Conn) -> bool {
        true
    }
    fn reset(&self, _: &mut Conn) -> impl std::future::Future<Output = bool> + Send {
        let (probe, hang) = (self.probe.clone(), self.hang);
        async move {
            probe.started.fetch_add(1, Ordering::SeqCst);
            if hang {
                std::future::pending::<()>().await;
            }
            probe.gate.notified().await;
            true
        }
    }
}

/// A pool of `size` connections whose resets are gated (or hang), open on `rt`.
fn gated(rt: &tokio::runtime::Runtime, size: usize, hang: bool) -> (Pool<Gated>, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let manager = Gated {
        next: AtomicU64::new(0),
        hang,
        probe: probe.clone(),
    };
    let pool = rt.block_on(async {
        let pool = Pool::builder(manager).max_size(size).min_size(size).build();
        common::until(LIMIT, "the pool opens", || pool.stats(), |s| s.open >= size).await;
        pool
    });
    (pool, probe)
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + LIMIT;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A task borrows, sends the connection's id, and holds it until `release` is notified.
fn holding_waiter(
    rt: &tokio::runtime::Runtime,
    pool: &Pool<Gated>,
) -> (
    std::sync::mpsc::Receiver<u64>,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<()>,
) {
    let release = Arc::new(tokio::sync::Notify::new());
    let (tx, rx) = std::sync::mpsc::channel();
    let task = {
        let (pool, release) = (pool.clone(), release.clone());
        rt.spawn(async move {
            let c = pool.get().await.expect("no timeout is set");
            tx.send(c.id).expect("the test listens");
            release.notified().await;
            drop(c);
        })
    };
    wait_for("the task queues", || pool.stats().waiting == 1);
    (rx, release, task)
}

/// Shrunk to one connection while the other was being reset: when the reset ends, its
/// connection closes (counted as resized away) and is not handed to the waiting task. Before,
/// the size was checked only before the reset, and the waiter got a connection above the new
/// size: two lent with `max_size` 1.
#[test]
fn a_reset_that_ends_after_a_shrink_closes_its_connection() {
    let rt = two_workers();
    let (pool, probe) = gated(&rt, 2, false);
    let a = pool.try_get().expect("two idle");
    let b = pool.try_get().expect("two idle");
    // The pool fills slot 0 first, so the connection opened second sits in slot 1.
    let (low, high) = if a.id < b.id { (a, b) } else { (b, a) };
    drop(high);
    wait_for("the reset starts", || {
        probe.started.load(Ordering::SeqCst) == 1
    });
    assert_eq!(pool.resize(1), 1);
    let (got, release, task) = holding_waiter(&rt, &pool);
    probe.gate.notify_one();
    // The waiter is served by `low` only: the shrunk-away connection closed.
    wait_for("the reset ends", || pool.stats().resized_away == 1);
    let s = pool.stats();
    assert!(s.borrowed <= s.max_size, "more lent than max_size: {s:?}");
    let low_id = low.id;
    drop(low);
    probe.gate.notify_one();
    assert_eq!(got.recv_timeout(LIMIT).expect("served"), low_id);
    release.notify_one();
    rt.block_on(task).expect("the waiter ran");
    probe.gate.notify_one();
    rt.block_on(all_back(&pool));
}

/// Evicted while being reset: when the reset ends, the connection closes (retired) and the
/// waiter gets a new one. Before, the waiter got the evicted connection.
#[test]
fn a_reset_that_ends_after_an_eviction_closes_its_connection() {
    let rt = two_workers();
    let (pool, probe) = gated(&rt, 1, false);
    drop(pool.try_get().expect("one idle"));
    wait_for("the reset starts", || {
        probe.started.load(Ordering::SeqCst) == 1
    });
    pool.evict();
    let (got, release, task) = holding_waiter(&rt, &pool);
    probe.gate.notify_one();
    assert_ne!(
        got.recv_timeout(LIMIT).expect("served"),
        0,
        "the evicted connection was lent again"
    );
    assert_eq!(pool.stats().retired, 1);
    release.notify_one();
    rt.block_on(task).expect("the waiter ran");
    probe.gate.notify_one();
    rt.block_on(all_back(&pool));
}

/// The last handle goes while a reset hangs (the runtime still up): the reset is given up, its
/// connection closed and the pool's memory freed. Before, both lived as long as the reset hung.
#[test]
fn the_last_handle_going_ends_a_hung_reset() {
    let rt = two_workers();
    let (pool, probe) = gated(&rt, 1, true);
    // Borrowed and returned on a thread that then ends, so no thread keeps a cached reference
    // to the pool (`local_ref`).
    std::thread::scope(|t| {
        t.spawn(|| drop(pool.try_get().expect("one idle")));
    });
    wait_for("the reset starts", || {
        probe.started.load(Ordering::SeqCst) == 1
    });
    drop(pool);
    wait_for("the connection closes and the pool's memory goes", || {
        probe.live.load(Ordering::SeqCst) == 0 && probe.dropped.load(Ordering::SeqCst)
    });
}

/// Every return needs a reset, and the reset panics, as user code may.
struct PanickingReset(AtomicU64);

impl slipstream_pool::Manager for PanickingReset {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst))
    }
    fn needs_reset(&self, _: &u64) -> bool {
        true
    }
    async fn reset(&self, _: &mut u64) -> bool {
        panic!("the reset panics, as the test asked")
    }
}

/// A reset that panics closes its connection, frees its slot, and counts as a failed reset.
/// Before, the close was counted nowhere in the pool's stats.
#[test]
fn a_reset_that_panics_is_counted_and_frees_its_slot() {
    let rt = two_workers();
    let pool = rt.block_on(async {
        Pool::builder(PanickingReset(AtomicU64::new(0)))
            .max_size(1)
            .build()
    });
    let first = rt.block_on(pool.get()).expect("an empty pool opens one");
    assert_eq!(*first, 0);
    drop(first);
    wait_for("the failed reset is counted", || {
        pool.stats().failed_resets == 1
    });
    let again = rt.block_on(pool.get()).expect("the slot came back");
    assert_eq!(*again, 1, "a new connection in the freed slot");
}
