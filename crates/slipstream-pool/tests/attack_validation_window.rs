//! Attack on `validate_after`'s window against the pool's coarse clock (session 43,
//! helper 46). docs/pool.md: "With `validate_after(window)`, an async borrow of a connection
//! idle longer than `window` first runs `Manager::validate`"; returns and borrows read "a
//! coarse pool clock the opener advances (at least every 100 ms while timers are set)".

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use slipstream_pool::{Manager, Pool};

/// Connections that count their validations.
struct Validations(Arc<AtomicU64>);

impl Manager for Validations {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
    async fn validate(&self, _conn: &mut u64) -> bool {
        self.0.fetch_add(1, Ordering::SeqCst);
        true
    }
}

const WINDOW: Duration = Duration::from_millis(50);
/// Three windows: a clock that steps at most every `WINDOW / 10` (or 100 ms) sees it as
/// idle past the window, with room for a late step.
const IDLE: Duration = Duration::from_millis(150);
const ROUNDS: u64 = 20;

/// Promise: a connection idle longer than the window is validated before it is lent.
///
/// Steps: a one-connection pool with `validate_after` 50 ms and no other timer; 20 rounds of
/// return, 150 ms idle, borrow. Every round's borrow must validate.
///
/// Before the fix: the pool clock, which stamps returns and measures idleness, stepped every
/// 500 ms when only `validate_after` was set (it is not one of the timers that make it step
/// every 100 ms or a tenth of the shortest); a connection idle 150 ms read as idle 0 ms unless
/// a step fell in between, so about 7 borrows in 10 were lent unvalidated. A window under
/// 500 ms was not kept at all, and a longer one was off by up to 500 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_idle_past_the_window_is_validated() {
    let count = Arc::new(AtomicU64::new(0));
    let pool = Pool::builder(Validations(count.clone()))
        .max_size(1)
        .min_size(1)
        .validate_after(WINDOW)
        .build_ready()
        .await
        .unwrap();
    drop(pool.get().await.unwrap());
    let before = count.load(Ordering::SeqCst);
    for _ in 0..ROUNDS {
        tokio::time::sleep(IDLE).await;
        drop(pool.get().await.unwrap());
    }
    let validated = count.load(Ordering::SeqCst) - before;
    assert_eq!(
        validated, ROUNDS,
        "borrows validated after {IDLE:?} idle with validate_after {WINDOW:?}"
    );
}
