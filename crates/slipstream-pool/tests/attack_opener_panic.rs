//! Attacks on the pool's own task with a `Manager::connect` that panics (helper h71). The
//! pool runs the manager's code on its task (docs/pool.md, "Opening is the pool's own task,
//! never a borrower"); a panic in the manager's code during a return, or in a waker, loses
//! neither a slot nor the pool ("A return that panics", "wakers that panic"). A borrower that
//! times out "is told why the last attempt failed", and no borrower starves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use slipstream_pool::{Manager, Pool, PoolError};

/// `connect` panics on its first `panics` calls, then connects.
struct Panics {
    panics: u64,
    calls: AtomicU64,
}

impl Manager for Panics {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(n >= self.panics, "connect panics, as the test asked");
        Ok(n)
    }
}

fn pool(panics: u64, borrow_timeout: Duration) -> Pool<Panics> {
    let manager = Panics {
        panics,
        calls: AtomicU64::new(0),
    };
    Pool::builder(manager)
        .max_size(2)
        .borrow_timeout(borrow_timeout)
        .build()
}

/// Promise: a connect that panics once is a failed connect, like one that returns an error:
/// the pool tries again and the borrow gets a connection.
///
/// Steps: a new pool whose manager's first `connect` panics; `get` with a 20 s timeout.
///
/// Before the fix: the panic ended the pool's task, with the slot it was opening still
/// claimed. No connection was ever opened again, and no timer ran: the borrow, and every
/// later one, timed out ("0 of 2 open; connections were still opening: raise the borrow
/// timeout"), with `connect_failures` 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_panics_once_does_not_stop_the_pool() {
    let pool = pool(1, Duration::from_secs(20));
    let got = pool.get().await.map(|c| *c);
    assert_eq!(got, Ok(1), "{:?}", pool.stats());
    assert_eq!(pool.stats().connect_failures, 1);
}

/// Promise: a borrow that times out names why the last connect failed, here a panic.
///
/// Steps: a new pool whose manager's `connect` always panics; `get` with a 1 s timeout.
///
/// Before the fix: the timeout named no connect error (`last_connect_error` `None`) and told
/// the reader that connections "were still opening".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_always_panics_is_named_by_the_timeout() {
    let pool = pool(u64::MAX, Duration::from_secs(1));
    let err = pool.get().await.map(drop).unwrap_err();
    let PoolError::Timeout {
        last_connect_error, ..
    } = &err
    else {
        panic!("not a timeout: {err}");
    };
    assert!(
        last_connect_error
            .as_deref()
            .is_some_and(|e| e.contains("panicked") && e.contains("as the test asked")),
        "{err}"
    );
}
