//! Attacks on borrow timeouts too long for the clock (helper h71). docs/pool.md:
//! `borrow_timeout(Duration::MAX)` waits for ever, with no timer, and bad input never causes
//! a panic. `Duration::from_secs(u64::MAX)`, the other common way to write "for ever", is
//! not `Duration::MAX` (its nanoseconds are 0) and lies past the end of `Instant`'s range.

use std::time::Duration;

use slipstream_pool::{Labeling, Labels, Manager, Pool};

struct Numbers;

impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
}

/// Any connection will do, as it is.
struct AnyLabels;

impl Labeling<u64> for AnyLabels {
    fn cost(&self, _wanted: &Labels, _current: &Labels) -> u32 {
        0
    }
    async fn configure(&self, _wanted: &Labels, _conn: &mut u64) -> bool {
        true
    }
}

/// "For ever", as many write it.
const FOR_EVER: Duration = Duration::from_secs(u64::MAX);
/// Only against a hang.
const HANG: Duration = Duration::from_secs(30);

/// A new pool with a borrow timeout of `FOR_EVER`: its first borrow waits for the opener's
/// first connection.
fn new_pool() -> Pool<Numbers> {
    Pool::builder(Numbers)
        .max_size(1)
        .borrow_timeout(FOR_EVER)
        .build()
}

/// Promise: a borrow with a timeout of `Duration::from_secs(u64::MAX)` waits as long as it
/// must (here, for the first connection) and does not panic.
///
/// Steps: a new pool with that borrow timeout; `get`.
///
/// Before the fix: the borrow panicked with "overflow when adding duration to instant" as
/// soon as it had to wait (`Deadline::from` added the timeout to `Instant::now()` unchecked;
/// only `Duration::MAX` itself was taken as no timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_borrow_with_a_timeout_past_the_clocks_end_waits() {
    let pool = new_pool();
    let got = tokio::spawn(async move { pool.get().await.map(|c| *c) });
    let got = tokio::time::timeout(HANG, got).await.expect("no hang");
    assert_eq!(got.expect("the borrow does not panic").unwrap(), 1);
}

/// The same for `get_blocking` on a thread.
///
/// Before the fix: the blocking borrow panicked the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_borrow_with_a_timeout_past_the_clocks_end_waits() {
    let pool = new_pool();
    let got = tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || pool.get_blocking().map(|c| *c)).join()
    });
    let got = tokio::time::timeout(HANG, got).await.expect("no hang");
    assert_eq!(got.unwrap().expect("the borrow does not panic").unwrap(), 1);
}

/// The same for `get_labeled`.
///
/// Before the fix: the labeled borrow panicked the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labeled_borrow_with_a_timeout_past_the_clocks_end_waits() {
    let pool = new_pool();
    let got = tokio::spawn(async move {
        pool.get_labeled(&Labels::new(), &AnyLabels)
            .await
            .map(|c| *c)
    });
    let got = tokio::time::timeout(HANG, got).await.expect("no hang");
    assert_eq!(got.expect("the borrow does not panic").unwrap(), 1);
}
