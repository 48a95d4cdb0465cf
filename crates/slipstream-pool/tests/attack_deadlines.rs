//! Attacks on the pool's deadline task (helper h81): an async borrow's deadline arms no timer
//! of its own; the pool's one deadline task, on the runtime the pool was built on, wakes the
//! borrowers due (docs/pool.md, "Deadlines without a timer per wait"). The promise is
//! `Config::borrow_timeout`'s: a borrow that waits fails with `PoolError::Timeout` once the
//! timeout has passed since it first waited, never hangs past it and never fails long before.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{Holds, all_back, join_threads, numbers};
use slipstream_pool::{Config, Manager, PgPool, Pool, PoolError, Role};
use slipstream_testkit::Cluster;

/// Promise: a borrow that waits on a runtime other than the pool's times out after its
/// borrow timeout, whether or not the pool's runtime is running tasks at that moment.
///
/// Steps: a pool of one connection with a 200 ms borrow timeout, built on a current-thread
/// runtime (`#[tokio::test]`'s kind), which runs its tasks only inside `block_on`; the
/// connection is borrowed there and held, and the runtime is kept, not driven (as a test's
/// runtime is while its thread joins a worker). A thread with a runtime of its own borrows.
/// The test gives it 10 s.
///
/// Before the fix: the borrow hung for as long as the pool's runtime was not driven (for ever
/// here): only the pool's deadline task, which runs on that runtime, could end it. Before the
/// deadline task (e878c83) it timed out after 200 ms on its own runtime's timer.
#[test]
fn a_borrow_on_another_runtime_times_out_while_the_pools_runtime_is_idle() {
    let home = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (pool, held) = home.block_on(common::one_held(Duration::from_millis(200)));
    let (done, result) = mpsc::channel();
    let borrower = pool.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async { borrower.get().await.map(drop) });
        let _ = done.send(got);
    });
    let got = result
        .recv_timeout(Duration::from_secs(10))
        .expect("the borrow ends within 10 s");
    assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
    drop(held);
    drop(pool);
    drop(home);
}

/// Fails every validation once `failing` is set; opens one connection, then hangs on every
/// later connect, so a borrow whose connection failed validation waits until its deadline.
struct FailsValidation {
    opened: AtomicBool,
    failing: Arc<AtomicBool>,
    /// How long a failing validation takes (in tokio's clock, paused in these tests).
    takes: Duration,
}

impl FailsValidation {
    /// A builder of a pool of one connection validated on every borrow, whose validations
    /// take `takes` and fail once the returned switch is set.
    fn pool(takes: Duration) -> (slipstream_pool::Builder<Self>, Arc<AtomicBool>) {
        let failing = Arc::new(AtomicBool::new(false));
        let builder = Pool::builder(FailsValidation {
            opened: AtomicBool::new(false),
            failing: failing.clone(),
            takes,
        })
        .max_size(1)
        .validate_after(Duration::ZERO);
        (builder, failing)
    }
}

impl Manager for FailsValidation {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        if self.opened.swap(true, SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(1)
    }
    async fn validate(&self, _conn: &mut u64) -> bool {
        if !self.failing.load(SeqCst) {
            return true;
        }
        if !self.takes.is_zero() {
            tokio::time::sleep(self.takes).await;
        }
        false
    }
}

/// Promise: with tokio's clock paused, a borrow times out as a tokio timeout would: after its
/// borrow timeout in paused time, including a borrow whose first connection failed
/// validation and which then waits (its deadline fixed as the validation started).
///
/// Steps: on a paused current-thread runtime, a pool of one connection that validates every
/// borrow (`validate_after(0)`) and never opens a second, with a 60 s borrow timeout; one
/// borrow takes and returns the connection. The clock is then moved an hour ahead (a
/// `sleep(1 h)`, as a test of something else would), so tokio's clock and the real one
/// differ, and validations start failing. A borrow validates the idle connection, which
/// fails, and waits.
///
/// Before the fix: the validation set the borrow's deadline on the real clock, an hour behind
/// tokio's, and the deadline task, judging on tokio's clock, found it long past: the borrow
/// failed with `Timeout` at once (0 s of paused time) instead of after 60 s.
#[test]
fn a_borrow_waiting_after_a_failed_validation_times_out_in_paused_time() {
    let (got, waited, failed) = common::in_paused_time(
        || async {
            let (builder, failing) = FailsValidation::pool(Duration::ZERO);
            let pool = builder
                .borrow_timeout(Duration::from_secs(60))
                .build_ready()
                .await
                .expect("one connection opens");
            // Borrowed once, so the next borrow finds it idle and validates it before any wait.
            drop(pool.get().await.expect("the connection, validated"));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            failing.store(true, SeqCst);
            let start = tokio::time::Instant::now();
            let got = pool.get().await.map(drop);
            (got, start.elapsed(), pool.stats().failed_validation)
        },
        "the borrow ends",
    );
    assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
    assert_eq!(failed, 1, "the one connection failed its validation");
    assert!(
        waited >= Duration::from_secs(60),
        "timed out after {waited:?} of paused time"
    );
}

/// A waker whose wake panics (an executor's bug; the pool runs a waker's code, and
/// `tests/attack_waiter_node.rs` holds it to staying sound when that code panics).
struct PanicsOnWake;

impl Wake for PanicsOnWake {
    fn wake(self: Arc<Self>) {
        panic!("the waker's wake panics")
    }
}

/// Promise: a borrow that waits fails with `PoolError::Timeout` after its borrow timeout,
/// whatever another borrower's waker does.
///
/// Steps: a pool of one connection, held, with a 200 ms borrow timeout, on a two-worker
/// runtime. A `get` polled by hand with a waker that panics when woken queues first; a spawned
/// `get` queues behind it. Both deadlines pass; the test gives the spawned borrow 10 s, then
/// makes a third borrow, also given 10 s, and returns the connection, which the next borrow
/// gets.
///
/// Before the fix: the deadline task took both out of the queue and woke the first, whose
/// wake panicked; the panic ended the task and dropped the second's wake unmade. The second,
/// out of the queue and never woken, hung for ever, and so did every later borrow that
/// waited: no deadline task was left to end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waker_that_panics_when_its_deadline_passes_strands_no_other_borrow() {
    let (pool, held) = common::one_held(Duration::from_millis(200)).await;
    let bad = Waker::from(Arc::new(PanicsOnWake));
    let mut first = Box::pin(pool.get());
    assert!(
        first
            .as_mut()
            .poll(&mut Context::from_waker(&bad))
            .is_pending()
    );
    let behind = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.get().await.map(drop) })
    };
    let got = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the borrow behind ends within 10 s")
        .expect("the task ran");
    assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
    let later = tokio::time::timeout(Duration::from_secs(10), pool.get())
        .await
        .expect("a later borrow ends within 10 s")
        .map(drop);
    assert!(matches!(later, Err(PoolError::Timeout { .. })), "{later:?}");
    // The first, polled again, gave up too, and holds no place.
    match first.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => assert!(matches!(r, Err(PoolError::Timeout { .. })), "{r:?}"),
        Poll::Pending => panic!("the first borrow still waits: {:?}", pool.stats()),
    }
    drop(first);
    drop(held);
    let again = tokio::time::timeout(Duration::from_secs(10), pool.get())
        .await
        .expect("the connection comes back");
    drop(again.expect("the returned connection"));
    let s = pool.stats();
    assert_eq!((s.open, s.idle, s.waiting), (1, 1, 0), "{s:?}");
}

/// How a storm borrow ended.
enum Ended {
    Served,
    TimedOut,
    Dropped,
}

/// Promise (held): among thousands of async borrows timing out while others are served, each
/// borrow is served or fails with `Timeout` no sooner than its timeout after it was made and
/// within 5 s after; a connection is never lent to two holders; a dropped `get` leaves nothing
/// queued; afterwards every connection is back IDLE, nothing waits, and the counters agree
/// with what the borrowers saw (`borrows`, `timeouts`).
///
/// Steps: a pool of 4 connections with a 20 ms borrow timeout on a two-worker runtime. Ten
/// waves of 400 tasks, 3 ms apart, each borrowing once and holding for 0-2 ms; every fifth
/// task gives up after 10 ms (its `get` dropped inside `tokio::time::timeout`). Meanwhile two
/// threads borrow with `get_blocking` in a loop (they get no slices while tasks wait, so most
/// of them time out too). Then the pool is checked (`all_back`).
///
/// Held on 5f0cea4: no connection lost or double-lent, every count agreed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_timeouts_among_served_borrows_loses_nothing() {
    const N: usize = 4;
    const T: Duration = Duration::from_millis(20);
    const SLACK: Duration = Duration::from_secs(5);
    let pool = Pool::builder(numbers())
        .max_size(N)
        .min_size(N)
        .borrow_timeout(T)
        .build_ready()
        .await
        .expect("the connections open");
    let holds = Arc::new(Holds::new(N, N));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (pool, holds, stop) = (pool.clone(), holds.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut served, mut timed_out) = (0u64, 0u64);
                while !stop.load(SeqCst) {
                    let start = Instant::now();
                    match pool.get_blocking() {
                        Ok(c) => {
                            holds.take(*c);
                            holds.give_back(*c);
                            drop(c);
                            served += 1;
                        }
                        Err(PoolError::Timeout { .. }) => {
                            let waited = start.elapsed();
                            assert!(waited >= T, "a thread timed out after {waited:?}");
                            assert!(waited < T + SLACK, "a thread timed out after {waited:?}");
                            timed_out += 1;
                        }
                        Err(e) => panic!("get_blocking: {e}"),
                    }
                }
                (served, timed_out)
            })
        })
        .collect();
    let mut tasks = Vec::new();
    for wave in 0..10u64 {
        for k in 0..400u64 {
            let (pool, holds) = (pool.clone(), holds.clone());
            tasks.push(tokio::spawn(async move {
                let start = Instant::now();
                let got = if k % 5 == 0 {
                    match tokio::time::timeout(T / 2, pool.get()).await {
                        Ok(got) => got,
                        Err(_) => return Ended::Dropped,
                    }
                } else {
                    pool.get().await
                };
                let waited = start.elapsed();
                match got {
                    Ok(c) => {
                        holds.take(*c);
                        tokio::time::sleep(Duration::from_millis((wave + k) % 3)).await;
                        holds.give_back(*c);
                        drop(c);
                        Ended::Served
                    }
                    Err(PoolError::Timeout { .. }) => {
                        assert!(waited >= T, "a task timed out after {waited:?}");
                        assert!(waited < T + SLACK, "a task timed out after {waited:?}");
                        Ended::TimedOut
                    }
                    Err(e) => panic!("get: {e}"),
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let (mut served, mut timed_out, mut dropped) = (0u64, 0u64, 0u64);
    for t in tasks {
        match tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("every borrow ends within 30 s")
            .expect("a borrower task panicked")
        {
            Ended::Served => served += 1,
            Ended::TimedOut => timed_out += 1,
            Ended::Dropped => dropped += 1,
        }
    }
    stop.store(true, SeqCst);
    for (s, t) in join_threads(&pool, threads, Instant::now() + Duration::from_secs(30)) {
        served += s;
        timed_out += t;
    }
    let s = all_back(&pool).await;
    assert!(
        timed_out > 0 && dropped > 0,
        "no storm: {timed_out} timed out, {dropped} dropped"
    );
    assert_eq!((s.open, s.waiting), (N, 0), "{s:?}");
    assert_eq!(s.timeouts, timed_out, "{s:?}");
    assert_eq!(s.borrows, served, "{s:?}");
    eprintln!("served {served}, timed out {timed_out}, dropped {dropped}: {s:?}");
}

/// Promise (held): a borrow that waits again after a failed validation ends by its first
/// deadline, also when the deadline task looked while it was out of the queue validating and
/// set its next look past that deadline (the borrow must then tell it: `Queued::sooner`).
///
/// Steps, in paused time (exact, so a late timeout shows): a pool of one connection, borrow
/// timeout 10 s, `validate_after(0)`, validations that take 5 s and fail, no second connect
/// ever ends. The deadline task looks at 0 s (next look at 10 s). At 5 s a borrow waits
/// (deadline 15 s); at 6 s the connection is returned and handed to it, and it validates until
/// 11 s. The deadline task's look at 10 s finds the queue empty and sets its next look to
/// 20 s. At 11 s the validation fails and the borrow waits again, on its deadline of 15 s.
///
/// Held on a4defe8: it fails with `Timeout` 10 s after it was made (at 15 s), not at 20 s.
#[test]
fn a_rewait_after_a_failed_validation_ends_by_its_first_deadline() {
    let (got, waited, stats) = common::in_paused_time(
        || async {
            let (builder, failing) = FailsValidation::pool(Duration::from_secs(5));
            let pool = builder
                .validation_timeout(Duration::from_secs(8))
                .borrow_timeout(Duration::from_secs(10))
                .build_ready()
                .await
                .expect("one connection opens");
            let held = pool.get().await.expect("the connection, validated");
            failing.store(true, SeqCst);
            tokio::time::sleep(Duration::from_secs(5)).await;
            let borrower = {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let start = tokio::time::Instant::now();
                    let got = pool.get().await.map(drop);
                    (got, start.elapsed())
                })
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(pool.stats().waiting, 1, "the borrow waits");
            drop(held);
            let (got, waited) = borrower.await.expect("the borrower ran");
            (got, waited, pool.stats())
        },
        "the borrow ends",
    );
    assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
    assert_eq!(stats.failed_validation, 1, "{stats:?}");
    assert_eq!(stats.waiting, 0, "{stats:?}");
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_millis(10_500),
        "timed out after {waited:?} of paused time"
    );
}

/// Promise (held): a `PgPool` borrow that waits (its first wait on the server's pool's
/// deadline, a later one, after a failed validation or a resize, under `timeout_at`) is served
/// or fails with `Timeout` no sooner than its timeout and within 5 s after, from the pool's
/// runtime and from another; afterwards nothing waits or is lent, and the next borrow is
/// served.
///
/// Steps: a real PostgreSQL server; a `PgPool` of 2 connections with a 300 ms borrow timeout
/// and `validate_after(0)` (a `SELECT 1` per borrow), built on the test's runtime. 200 tasks on
/// that runtime and 200 on a second runtime borrow and hold for 0-20 ms (`pg_sleep`), while
/// the pool is shrunk to 1 and grown back to 2 every 50 ms.
///
/// Held on 258daeb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_pool_borrows_time_out_in_time_from_two_runtimes() {
    const T: Duration = Duration::from_millis(300);
    const SLACK: Duration = Duration::from_secs(5);
    let cluster = Cluster::start().unwrap();
    let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
        .max_size(2)
        .pool_config(Config {
            max_size: 2,
            borrow_timeout: T,
            validate_after: Some(Duration::ZERO),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    async fn borrow(pool: PgPool, k: u64) -> bool {
        let start = Instant::now();
        match pool.get(Role::Primary).await {
            Ok(mut c) => {
                let secs = (k % 3) as f64 / 100.0;
                c.execute("SELECT pg_sleep($1)", &[&secs]).await.unwrap();
                true
            }
            Err(PoolError::Timeout { .. }) => {
                let waited = start.elapsed();
                assert!(waited >= T, "timed out after {waited:?}");
                assert!(waited < T + SLACK, "timed out after {waited:?}");
                false
            }
            Err(e) => panic!("get: {e}"),
        }
    }
    let other = common::two_workers();
    let mut here = Vec::new();
    let mut there = Vec::new();
    for k in 0..200u64 {
        here.push(tokio::spawn(borrow(pool.clone(), k)));
        there.push(other.spawn(borrow(pool.clone(), k + 1)));
    }
    for round in 0..10 {
        pool.resize(1 + round % 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pool.resize(2);
    let (mut served, mut timed_out) = (0, 0);
    for t in here.into_iter().chain(there) {
        let ok = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("every borrow ends within 30 s")
            .expect("a borrower task panicked");
        if ok {
            served += 1;
        } else {
            timed_out += 1;
        }
    }
    assert!(
        served > 0 && timed_out > 0,
        "{served} served, {timed_out} timed out"
    );
    for s in pool.servers() {
        assert_eq!(
            (s.stats.waiting, s.stats.borrowed, s.outstanding),
            (0, 0, 0),
            "{s:?}"
        );
    }
    let c = tokio::time::timeout(Duration::from_secs(10), pool.get(Role::Primary))
        .await
        .expect("the next borrow ends within 10 s");
    drop(c.expect("the next borrow is served"));
    drop(pool);
    other.shutdown_background();
}

/// Promise (held): with tokio's clock paused and moved by hand (`tokio::time::advance`), a
/// waiting borrow times out as a tokio timeout would: not while less than its timeout has
/// passed, and as soon as it has.
///
/// Steps: a paused current-thread runtime (no auto-advance while the test's task is busy);
/// a pool of one connection, held, borrow timeout 10 s. A spawned borrow waits; the clock is
/// moved 9.999 s, then the runtime is yielded to a few times: the borrow must still wait. The
/// clock is moved 2 ms more: the borrow ends with `Timeout`, 10.001 s of paused time after it
/// was made, and the connection, returned, is the next borrower's.
///
/// Held on c4322d6.
#[tokio::test(start_paused = true)]
async fn a_borrow_times_out_when_the_paused_clock_is_moved_past_its_deadline() {
    let (pool, held) = common::one_held(Duration::from_secs(10)).await;
    let start = tokio::time::Instant::now();
    let borrower = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.get().await.map(drop) })
    };
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(pool.stats().waiting, 1, "the borrow waits");
    tokio::time::advance(Duration::from_millis(9_999)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!borrower.is_finished(), "ended before its timeout");
    tokio::time::advance(Duration::from_millis(2)).await;
    let got = borrower.await.expect("the borrower ran");
    assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
    assert_eq!(start.elapsed(), Duration::from_millis(10_001));
    drop(held);
    drop(pool.get().await.expect("the returned connection"));
    assert_eq!(pool.stats().waiting, 0);
}

/// Promise (held): borrows waiting while the pool is shrunk to nothing fail with `Timeout`
/// after their timeout, neither sooner nor later; borrows waiting while it grows again are
/// served; afterwards nothing waits and every connection is IDLE.
///
/// Steps, in paused time: a pool of 2 connections, both held, borrow timeout 10 s. 20 tasks
/// wait; the pool is resized to 0 and the 2 returned (closed, above the limit); all 20 must
/// time out exactly 10 s after they began. 20 more wait; the pool is resized to 2 one second
/// later; all 20 must be served (each holding 1 ms).
///
/// Held on e30da3b.
#[tokio::test(start_paused = true)]
async fn borrows_waiting_through_a_resize_time_out_or_are_served() {
    const T: Duration = Duration::from_secs(10);
    let pool = Pool::builder(numbers())
        .max_size(2)
        .min_size(2)
        .borrow_timeout(T)
        .build_ready()
        .await
        .expect("the connections open");
    let held = [pool.get().await.unwrap(), pool.get().await.unwrap()];
    let spawn_borrowers = |n: usize| -> Vec<_> {
        (0..n)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    let start = tokio::time::Instant::now();
                    let got = pool.get().await;
                    if got.is_ok() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    (got.map(drop), start.elapsed())
                })
            })
            .collect()
    };
    let waiting = spawn_borrowers(20);
    tokio::task::yield_now().await;
    pool.resize(0);
    drop(held);
    for t in waiting {
        let (got, waited) = t.await.unwrap();
        assert!(matches!(got, Err(PoolError::Timeout { .. })), "{got:?}");
        assert_eq!(waited, T, "timed out after {waited:?}");
    }
    assert_eq!(pool.stats().timeouts, 20, "{:?}", pool.stats());
    let waiting = spawn_borrowers(20);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(pool.stats().waiting, 20, "{:?}", pool.stats());
    pool.resize(2);
    for t in waiting {
        let (got, waited) = t.await.unwrap();
        assert!(got.is_ok(), "{got:?} after {waited:?}: {:?}", pool.stats());
    }
    let s = all_back(&pool).await;
    assert_eq!((s.open, s.timeouts), (2, 20), "{s:?}");
}

/// Promise: a pool costs a paused clock nothing while no one waits, as a timer per wait did:
/// a test that pauses tokio's clock and sleeps (`start_paused`, the way users test timeouts)
/// sees the clock jump to its timer, whatever the pool's borrow timeout.
///
/// Steps: on a paused current-thread runtime in a thread of its own, a pool with a borrow
/// timeout of 0 (fail at once rather than wait) and one of 1 ms, no one borrowing; the test's
/// task sleeps 1 h of paused time. It is given 10 s of real time.
///
/// Before the fix: the deadline task looked again a borrow timeout after each look even with
/// no one queued, so the paused clock stepped through every millisecond of the hour (the
/// runtime advances only to the next timer): 10 min of paused time took more than 10 min of
/// real time.
#[test]
fn an_idle_pool_with_a_short_timeout_lets_a_paused_clock_jump() {
    common::in_paused_time(
        || async {
            let mut pools = Vec::new();
            for t in [Duration::ZERO, Duration::from_millis(1)] {
                let pool = Pool::builder(numbers())
                    .max_size(1)
                    .borrow_timeout(t)
                    .build_ready()
                    .await
                    .expect("one connection opens");
                pools.push(pool);
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(pools);
        },
        "1 h of paused time passes",
    );
}

/// Promise (held): a borrow timeout shorter than the deadline task's idle sleep (a second) is
/// kept: the borrow, queued after the task went to sleep, tells it, and times out after its
/// timeout, not at the task's next look.
///
/// Steps, in paused time: pools with borrow timeouts of 0, 20 ms and 999 ms, each with its one
/// connection held; the clock moves 5 s (the deadline tasks asleep, next looks up to a second
/// away); one borrow on each must time out exactly its timeout later (to the millisecond:
/// tokio's timers round up to one).
///
/// Held on 3da2be6 (which put that floor on the idle look); with `Queued::sooner` forced
/// false, the 0 s timeout ended after 695 ms, at the task's next look.
#[tokio::test(start_paused = true)]
async fn a_timeout_shorter_than_the_idle_look_is_kept() {
    for t in [
        Duration::ZERO,
        Duration::from_millis(20),
        Duration::from_millis(999),
    ] {
        let pool = Pool::builder(numbers())
            .max_size(1)
            .min_size(1)
            .borrow_timeout(t)
            .build();
        // Not `build_ready`, which waits for its connections within the borrow timeout.
        common::until(
            Duration::from_secs(10),
            "the connection opens",
            || pool.stats(),
            |s| s.idle == 1,
        )
        .await;
        let held = pool.try_get().expect("the idle connection");
        tokio::time::sleep(Duration::from_millis(5_300)).await;
        let start = tokio::time::Instant::now();
        let got = pool.get().await.map(drop);
        let waited = start.elapsed();
        assert!(
            matches!(got, Err(PoolError::Timeout { .. })),
            "{t:?}: {got:?}"
        );
        assert!(
            waited >= t && waited <= t + Duration::from_millis(1),
            "a {t:?} timeout ended after {waited:?}"
        );
        drop(held);
    }
}
