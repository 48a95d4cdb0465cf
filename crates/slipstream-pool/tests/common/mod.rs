//! Helpers shared by the pool's integration tests.

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Polls `state` every 5 ms until `done` holds for it, failing with `what` and the last state
/// after `limit`; returns the time it took.
pub async fn until<S: Debug>(
    limit: Duration,
    what: &str,
    state: impl Fn() -> S,
    done: impl Fn(&S) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let s = state();
        if done(&s) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: {s:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
