//! Attacks on `Pool::get_blocking` called from a task on the pool's own runtime (helper
//! h71). `PgPool::get_blocking` promises that there it "fails after the borrow timeout and a
//! second instead of hanging" (docs/pool.md, "The single-pool calls, per role"), and "bad
//! input never causes a hang". The generic pool's `get_blocking` validates a connection idle
//! past `validate_after` by spawning the check on the pool's runtime and blocking the thread
//! until it answers.

use std::sync::mpsc;
use std::time::Duration;

use slipstream_pool::{Manager, Pool, PoolError};

/// Connections that always validate.
struct Numbers;

impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
    async fn validate(&self, _conn: &mut u64) -> bool {
        true
    }
}

const BORROW_TIMEOUT: Duration = Duration::from_secs(1);
/// Only against a hang: many times the borrow timeout.
const HANG: Duration = Duration::from_secs(30);

/// On a new runtime of `flavor` on its own thread: a one-connection pool with
/// `validate_after` 10 ms, its connection lent once and left idle 100 ms, then borrowed with
/// `get_blocking` from a task of that runtime. The answer, or `None` if none came within
/// `HANG` (the thread is left blocked).
fn blocking_borrow_of_a_due_connection_inside(
    flavor: tokio::runtime::RuntimeFlavor,
) -> Option<Result<(), String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = match flavor {
            tokio::runtime::RuntimeFlavor::CurrentThread => {
                tokio::runtime::Builder::new_current_thread()
            }
            _ => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
        }
        .enable_all()
        .build()
        .unwrap();
        rt.block_on(async move {
            let pool = Pool::builder(Numbers)
                .max_size(1)
                .min_size(1)
                .validate_after(Duration::from_millis(10))
                .borrow_timeout(BORROW_TIMEOUT)
                .build_ready()
                .await
                .unwrap();
            drop(pool.get().await.unwrap());
            tokio::time::sleep(Duration::from_millis(100)).await;
            // In a task (not `block_on`'s own future), as application code would run.
            let answer = tokio::spawn(async move {
                pool.get_blocking()
                    .map(drop)
                    .map_err(|e: PoolError| e.to_string())
            });
            let _ = tx.send(answer.await.unwrap());
        });
    });
    rx.recv_timeout(HANG).ok()
}

/// Promise: a blocking borrow inside the pool's runtime ends with an answer (a connection or
/// an error saying why), as `PgPool::get_blocking`'s does, and never hangs.
///
/// Steps: a current-thread runtime; a pool of one connection with `validate_after` 10 ms and
/// a 1 s borrow timeout; the connection idle 100 ms (due for validation); `get_blocking` from
/// a task of that runtime.
///
/// Before the fix: no answer within 30 s. `get_blocking` claimed the due connection, spawned
/// its validation on the pool's runtime and waited on a channel with no bound; the runtime's
/// only thread was the one waiting, so the validation never ran. The wait for a free
/// connection is bounded by the borrow timeout; this one was not.
#[test]
fn a_blocking_borrow_validating_inside_a_current_thread_runtime_answers() {
    let answer =
        blocking_borrow_of_a_due_connection_inside(tokio::runtime::RuntimeFlavor::CurrentThread);
    assert!(
        answer.is_some(),
        "get_blocking of a connection due for validation, called inside the pool's \
         current-thread runtime, hung (no answer in {HANG:?}, borrow timeout {BORROW_TIMEOUT:?})"
    );
}

/// The same on a two-worker runtime, where another worker is free to run the validation.
///
/// Before the fix: no answer within 30 s either. A task spawned from a worker thread goes to
/// that worker's LIFO slot, which the other worker does not steal, and the worker is the one
/// blocked in `get_blocking`.
#[test]
fn a_blocking_borrow_validating_inside_a_multi_thread_runtime_answers() {
    let answer =
        blocking_borrow_of_a_due_connection_inside(tokio::runtime::RuntimeFlavor::MultiThread);
    assert!(
        answer.is_some(),
        "get_blocking of a connection due for validation, called inside the pool's two-worker \
         runtime, hung (no answer in {HANG:?}, borrow timeout {BORROW_TIMEOUT:?})"
    );
}
