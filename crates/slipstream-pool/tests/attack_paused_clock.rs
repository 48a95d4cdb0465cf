//! An async borrow's timeout under tokio's paused clock (`#[tokio::test(start_paused =
//! true)]`, `tokio::time::pause`), the way users test timeouts without waiting for them. A
//! task's deadline is kept by the pool's deadline task, not by a timer per wait
//! (docs/pool.md, "Deadlines without a timer per wait"); it must keep tokio's clock as the
//! timer per wait did.

use std::time::Duration;

use slipstream_pool::PoolError;

mod common;

/// Promise: with tokio's clock paused, a borrow that waits fails with `PoolError::Timeout`
/// as soon as the runtime has nothing else to do, as any tokio timeout does (the clock jumps
/// to the next timer), not after the timeout in real time.
///
/// Steps: a pool of one connection with a 60 s borrow timeout, on a paused current-thread
/// runtime in a thread of its own; one borrow holds the connection and a second waits. The
/// test gives it 10 s of real time.
///
/// Before (the first form of the deadline task, 6c9fc45): the deadline task's timer fired at
/// once in paused time, while the waiter compared its deadline with the real clock and kept
/// waiting; the task looked again and again, a busy loop for 60 real seconds.
#[test]
fn a_borrow_times_out_in_paused_time_as_a_tokio_timeout_does() {
    let (got, waited) = common::in_paused_time(
        || async {
            let (pool, held) = common::one_held(Duration::from_secs(60)).await;
            let start = tokio::time::Instant::now();
            let got = pool.get().await.map(drop);
            drop(held);
            (got, start.elapsed())
        },
        "the borrow ends",
    );
    assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
    // In paused time the wait lasts its timeout exactly (the clock jumps to the deadline).
    assert!(
        waited >= Duration::from_secs(60),
        "timed out after {waited:?}"
    );
}
