//! A borrow that has to wait allocates nothing once the pool has seen as many waiters before
//! (issue 19: each wait used to allocate its own queue node). A counting global allocator,
//! per thread, so the runtime's and the test harness's own threads do not count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use slipstream_pool::{Manager, Pool};

struct Counting;

thread_local!(static ALLOCATIONS: Cell<u64> = const { Cell::new(0) });

// SAFETY: every call is forwarded to the system allocator unchanged; counting touches only a
// const-initialised thread-local `Cell` (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|a| a.get())
}

struct Numbers;
impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(7)
    }
}

fn one_connection(rt: &tokio::runtime::Runtime) -> Pool<Numbers> {
    rt.block_on(async {
        Pool::builder(Numbers)
            .max_size(1)
            .min_size(1)
            .borrow_timeout(Duration::MAX)
            .build_ready()
            .await
            .expect("one connection")
    })
}

/// Waits until one borrower is queued.
fn until_waiting(pool: &Pool<Numbers>) {
    while pool.stats().waiting == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_blocking_wait_allocates_nothing() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let pool = one_connection(&rt);
    let (go, next) = std::sync::mpsc::channel::<()>();
    let (served, done) = std::sync::mpsc::channel::<()>();
    let waiter = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            let mut per_wait = Vec::new();
            while next.recv().is_ok() {
                let before = allocations();
                let conn = pool.get_blocking().expect("no timeout");
                per_wait.push(allocations() - before);
                drop(conn);
                served.send(()).expect("the test is listening");
            }
            per_wait
        })
    };
    for _ in 0..3 {
        // Each round: hold the only connection, let the waiter queue, return it.
        let held = pool.try_get().expect("idle between rounds");
        go.send(()).expect("the waiter is listening");
        until_waiting(&pool);
        drop(held);
        done.recv().expect("served");
    }
    drop(go);
    let per_wait = waiter.join().expect("the waiter");
    // The first wait may grow the pool's queue; later ones reuse it.
    assert_eq!(
        &per_wait[1..],
        &[0, 0],
        "allocations per wait: {per_wait:?}"
    );
    assert_eq!(pool.stats().waits, 3, "{:?}", pool.stats());
}

#[test]
fn an_async_wait_allocates_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let pool = one_connection(&rt);
    let mut per_wait = Vec::new();
    for _ in 0..3 {
        rt.block_on(async {
            let held = pool.get().await.expect("idle");
            let mut waiting = std::pin::pin!(pool.get());
            let before = allocations();
            // The second borrow queues behind the first...
            assert!(futures_util::poll!(waiting.as_mut()).is_pending());
            // ...and is served by its return.
            drop(held);
            let conn = waiting.await.expect("handed over");
            per_wait.push(allocations() - before);
            drop(conn);
        });
    }
    assert_eq!(
        &per_wait[1..],
        &[0, 0],
        "allocations per wait: {per_wait:?}"
    );
}
