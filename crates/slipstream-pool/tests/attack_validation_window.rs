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

/// A pool of one connection with `validate_after` WINDOW, that connection opened, lent once
/// and returned.
async fn one_connection<M: Manager>(manager: M) -> Pool<M> {
    let pool = Pool::builder(manager)
        .max_size(1)
        .min_size(1)
        .validate_after(WINDOW)
        .build_ready()
        .await
        .unwrap();
    drop(pool.get().await.unwrap());
    pool
}

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
    let pool = one_connection(Validations(count.clone())).await;
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

/// The same promise for `get_blocking`, from a thread outside the runtime. Its fast path
/// claims an idle connection and, finding it due, leaves it to the waiting path.
///
/// Before the fix the fast path dropped the due connection, which gave it back stamped as
/// just returned; the waiting path then claimed it again and lent it unvalidated: 0 of 20
/// borrows validated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_blocking_borrow_of_a_connection_idle_past_the_window_validates() {
    let count = Arc::new(AtomicU64::new(0));
    let pool = one_connection(Validations(count.clone())).await;
    let before = count.load(Ordering::SeqCst);
    let borrower = pool.clone();
    tokio::task::spawn_blocking(move || {
        for _ in 0..ROUNDS {
            std::thread::sleep(IDLE);
            drop(borrower.get_blocking().unwrap());
        }
    })
    .await
    .unwrap();
    let validated = count.load(Ordering::SeqCst) - before;
    assert_eq!(
        validated, ROUNDS,
        "blocking borrows validated after {IDLE:?} idle with validate_after {WINDOW:?}"
    );
}

/// Connections whose validation hangs while `hang` is set, counting validations begun.
struct Hangs {
    begun: Arc<AtomicU64>,
    hang: Arc<std::sync::atomic::AtomicBool>,
}

impl Manager for Hangs {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(1)
    }
    async fn validate(&self, _conn: &mut u64) -> bool {
        self.begun.fetch_add(1, Ordering::SeqCst);
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        true
    }
}

/// A borrow dropped while it validates a connection idle past the window (the caller's own
/// timeout, a `select!` that chose another branch) leaves that connection unvalidated: the
/// next borrow must validate it, not take it as just returned.
///
/// Before the fix the dropped borrow gave the connection back stamped as just returned, and
/// the next borrow lent it without a validation: 1 validation begun where 2 are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_dropped_while_it_validates_leaves_the_connection_due() {
    let begun = Arc::new(AtomicU64::new(0));
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pool = one_connection(Hangs {
        begun: begun.clone(),
        hang: hang.clone(),
    })
    .await;
    tokio::time::sleep(IDLE).await;
    hang.store(true, Ordering::SeqCst);
    let cut = tokio::time::timeout(Duration::from_millis(50), pool.get()).await;
    assert!(
        cut.is_err(),
        "the validation hangs, so the borrow is cut short"
    );
    assert_eq!(begun.load(Ordering::SeqCst), 1);
    hang.store(false, Ordering::SeqCst);
    drop(pool.get().await.unwrap());
    assert_eq!(
        begun.load(Ordering::SeqCst),
        2,
        "validations begun: the borrow after the dropped one lent the connection unvalidated"
    );
}
