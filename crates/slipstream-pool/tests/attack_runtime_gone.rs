//! Attacks on a generic `Pool` kept past the runtime it was built on (helper h71).
//! docs/pool.md says a `PgPool` in that state "says so at once" (`attack_pg_pool_runtime.rs`);
//! every error is to name what failed and what to do. `Pool::build` starts the pool's task
//! on the current runtime, "which must outlive the pool".

use std::time::Duration;

use slipstream_pool::{Manager, Pool, PoolError};

struct Numbers;

impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
}

/// A pool with no connection open, built on a runtime that has since shut down. A
/// current-thread runtime never ran the pool's task (nothing is polled outside `block_on`),
/// so it is dropped unpolled: on CI's loaded machine a two-worker runtime did that by chance,
/// and the guard made inside the task never existed to flag the pool.
fn orphan() -> Pool<Numbers> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = rt.block_on(async {
        Pool::builder(Numbers)
            .max_size(2)
            .borrow_timeout(Duration::from_secs(1))
            .build()
    });
    drop(rt);
    pool
}

fn names_the_runtime(e: &PoolError) -> bool {
    matches!(e, PoolError::Config(m) if m.contains("runtime") && m.contains("shut down"))
}

/// Promise: a borrow that needs a new connection from a pool whose runtime has shut down
/// fails saying so, as a `PgPool`'s does.
///
/// Steps: a pool built on a runtime that is then dropped; `get` on another runtime, and
/// `get_blocking` on a thread.
///
/// Before the fix: each waited out its borrow timeout and failed with "no connection became
/// free within 1s (0 of 2 open); connections were still opening: raise the borrow timeout, or
/// open min_size before the first borrow with build_ready": no connection was opening (the
/// opener task was gone with its runtime), and neither remedy helps.
#[test]
fn a_borrow_from_a_pool_whose_runtime_is_gone_says_so() {
    let pool = orphan();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got = rt.block_on(async { pool.get().await.map(drop) });
    let e = got.unwrap_err();
    assert!(names_the_runtime(&e), "get: {e}");
    let got = std::thread::spawn(move || pool.get_blocking().map(drop))
        .join()
        .unwrap();
    let e = got.unwrap_err();
    assert!(names_the_runtime(&e), "get_blocking: {e}");
}

/// Promise: a borrow waiting on a pool whose runtime then shuts down fails saying so, at
/// once, and never outlives its deadline. A task's deadline is kept by the pool's own
/// deadline task (no timer per wait), which goes with that runtime: as it goes, it wakes the
/// waiting tasks to read why.
///
/// Steps: a pool of one connection built on a runtime of its own; on a second runtime, one
/// borrow holds the connection and a second waits (borrow timeout 60 s); the first runtime is
/// shut down.
///
/// Without the wake, the waiting borrow would wait for ever: its deadline had no one left to
/// keep it. (Before the deadline task, it waited out its 60 s timer and then blamed a full
/// pool.)
#[test]
fn a_borrow_waiting_when_the_pools_runtime_shuts_down_is_told_at_once() {
    let home = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let pool = home.block_on(async {
        Pool::builder(Numbers)
            .max_size(1)
            .borrow_timeout(Duration::from_secs(60))
            .build_ready()
            .await
    });
    let pool = pool.expect("one connection opens");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got = rt.block_on(async move {
        let held = pool.get().await.expect("the idle connection");
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.get().await.map(drop) }
        });
        // Queued: the pool counts it.
        while pool.stats().waiting == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::task::spawn_blocking(move || home.shutdown_timeout(Duration::from_secs(5)))
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        drop(held);
        got
    });
    let e = got
        .expect("told within 10 s, not left waiting")
        .unwrap()
        .unwrap_err();
    assert!(names_the_runtime(&e), "{e}");
}
