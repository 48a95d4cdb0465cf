//! The pool's own task: opens connections, closes idle and old ones, reclaims ones borrowed too
//! long. Borrowers never open or close a connection themselves (HikariCP's rule).

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::core::{Owned, Wakes};
use crate::pool::Inner;
use crate::{Config, Manager};

/// The opener task: keeps `min_size` connections open, and opens more (up to the maximum)
/// while borrowers wait. One attempt at a time, at most one per `connect_interval`; after a
/// failure it backs off exponentially up to a second. On each wake-up it also runs the timers,
/// and keeps running them while a connect is under way (a connect may hang: a server that
/// accepts and never answers, with no `connect_timeout`). Ends when the pool is dropped.
pub(crate) fn opener<M: Manager>(pool: Weak<Inner<M>>) -> impl Future<Output = ()> {
    // Made now, not when the task first runs: a runtime shut down before it polled the task
    // drops the future unpolled, and with it this guard, which then still flags the pool
    // (CI's loaded machine did exactly that, and the borrow timed out "still opening").
    let gone = RuntimeGone(pool.clone());
    async move {
        let _gone = gone;
        open_and_tend(pool).await;
    }
}

async fn open_and_tend<M: Manager>(pool: Weak<Inner<M>>) {
    let mut backoff = Duration::ZERO;
    loop {
        let pause = {
            let Some(inner) = pool.upgrade() else { return };
            // Relaxed: a late look only runs one more pass, which opens nothing (below).
            if inner.closed.load(Ordering::Relaxed) {
                return;
            }
            inner.upkeep();
            let needed = {
                let open = inner.open.load(Ordering::Acquire);
                open < inner.core.limit()
                    && (open < inner.min_size() || inner.core.q.count(Ordering::Acquire) > 0)
            };
            if !needed {
                None
            } else if let Some(slot) = inner.core.claim_empty() {
                // Held from the claim: a connect that succeeds stays held until it is freed.
                inner.held.fetch_add(1, Ordering::AcqRel);
                let Some(connected) = inner.connect_with_upkeep().await else {
                    // The last handle went while the connect was under way.
                    inner.held.fetch_sub(1, Ordering::AcqRel);
                    inner.core.vacate(slot);
                    return;
                };
                match connected {
                    Ok(conn) => {
                        backoff = Duration::ZERO;
                        let i = slot.index();
                        inner.install(slot, conn);
                        // Opened while the last handle went: closed at once.
                        inner.close_if_shut(i);
                    }
                    Err(e) => {
                        inner.held.fetch_sub(1, Ordering::AcqRel);
                        inner.core.vacate(slot);
                        inner
                            .counters
                            .connect_failures
                            .fetch_add(1, Ordering::Relaxed);
                        *inner
                            .last_connect_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) = Some(e);
                        backoff = (backoff * 2)
                            .max(Duration::from_millis(10))
                            .min(Duration::from_secs(1));
                    }
                }
                Some(backoff.max(inner.config.connect_interval))
            } else {
                // Every slot is taken (one is being closed): look again shortly.
                Some(inner.config.connect_interval.max(Duration::from_millis(1)))
            }
        };
        match pause {
            Some(pause) => tokio::time::sleep(pause).await,
            None => {
                let Some(inner) = pool.upgrade() else { return };
                // A notify that came since the check above left a permit, so this returns at
                // once. The periodic wake-up ends the task soon after the pool is dropped
                // (this strong reference is the last one then).
                let _ = tokio::time::timeout(upkeep_period(&inner.config), inner.opener.notified())
                    .await;
            }
        }
    }
}

/// The deadline task: wakes each async borrower whose borrow timeout has passed, so that a
/// wait arms no timer of its own (a timer per wait cost about 0.4 µs per waiting borrow:
/// docs/benchmarks.md, pool-scaling). It sleeps until the earliest deadline queued, or else
/// for a borrow timeout but at least [`IDLE_LOOK_MIN`]; a borrower queued meanwhile and due
/// sooner wakes it ([`Core::expire`](crate::core::Core::expire)). Ends when the pool is shut
/// down; dropped before that, its runtime shut down (as the opener's, [`RuntimeGone`]).
pub(crate) fn deadlines<M: Manager>(pool: Weak<Inner<M>>) -> impl Future<Output = ()> {
    let gone = RuntimeGone(pool.clone());
    async move {
        let _gone = gone;
        let mut wakes = Wakes::default();
        loop {
            let Some(inner) = pool.upgrade() else { return };
            // Relaxed: `shut_down` stores it before it wakes this task, and the wake orders
            // the two.
            if inner.closed.load(Ordering::Relaxed) {
                return;
            }
            // Tokio's clock, which its timer below keeps: a test that pauses it (`start_paused`)
            // sees borrows time out as its timers fire, as with a timer per wait.
            let now = crate::pool::runtime_now();
            let idle_look = now.checked_add(inner.config.borrow_timeout.max(IDLE_LOOK_MIN));
            let next = inner.core.expire(now, idle_look, &mut wakes);
            // After the queue's lock: a waker is user code. One that panics is the borrower's
            // executor's fault; the others are still woken and this task goes on, or every
            // later deadline would pass unkept.
            if let Some(panic) = wakes.wake() {
                tracing::warn!(
                    "a waiting borrow's waker panicked when its borrow timeout passed: {}",
                    panic_message(&*panic)
                );
            }
            // Holds the pool while it sleeps: `shut_down` wakes it, and it ends then.
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => {}
                        () = inner.deadlines.notified() => {}
                    }
                }
                None => inner.deadlines.notified().await,
            }
        }
    }
}

/// The least time the deadline task sleeps while no deadline is queued. Its next look is a
/// borrow timeout away, before which no borrower queued from now on is due, so none need tell
/// it; but a timeout of 0 (fail at once) or of a few ms woke it every millisecond for the
/// pool's whole life, and made a paused clock (`start_paused`) step through every millisecond
/// of a test's sleep: an hour took longer than an hour (`tests/attack_deadlines.rs`). With
/// this floor, a borrower due before it tells the task (`Queued::sooner`),
/// once per look: the first of a wave.
const IDLE_LOOK_MIN: Duration = Duration::from_secs(1);

/// Dropped with the opener task and with the deadline task. Each ends by itself only once the
/// last handle has gone (`closed`, or the pool's memory freed); dropped before that and not by
/// a panic, its runtime shut down: it flags the pool, whose borrows that must wait then say so
/// (`Inner::runtime_gone`, `tests/attack_runtime_gone.rs`), and wakes the tasks waiting
/// already (on another runtime), which no deadline would end any more.
struct RuntimeGone<M: Manager>(Weak<Inner<M>>);

impl<M: Manager> Drop for RuntimeGone<M> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(inner) = self.0.upgrade()
            && !inner.closed.load(Ordering::Relaxed)
        {
            // Release: pairs with the borrowers' Acquire loads.
            inner.runtime_gone.store(true, Ordering::Release);
            let mut wakes = Wakes::default();
            inner.core.every_task(&mut wakes);
            // As in the deadline task: every task is still woken, and the panic reported.
            if let Some(panic) = wakes.wake() {
                tracing::warn!(
                    "a waiting borrow's waker panicked when the pool's runtime shut down: {}",
                    panic_message(&*panic)
                );
            }
        }
    }
}

/// The message a panic was raised with, if it is text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// How often the opener runs the timers: at least every 100 ms while any is set (or a tenth of
/// the shortest), else every 500 ms (the pool clock, leak checks and metrics).
fn upkeep_period(config: &Config) -> Duration {
    let period = match shortest_timer(config) {
        Some(t) => Duration::from_millis(100).min(t / 10),
        None => Duration::from_millis(500),
    };
    period.max(Duration::from_millis(1))
}

impl<M: Manager> Inner<M> {
    /// The opener's periodic work: advances the pool clock, closes idle connections due to
    /// close, reclaims overdue borrows, reports leaks and publishes the metrics.
    fn upkeep(&self) {
        let now = self.tick();
        self.reap(now);
        if self.reclaims {
            self.reclaim_overdue(now);
        }
        if let Some(threshold) = self.config.leak_warning {
            self.check_leaks(threshold);
        }
        if let Some(published) = self.published.as_ref().filter(|p| p.publish_due(now)) {
            published.publish(&crate::Pool::stats_of(self));
        }
    }

    /// Opens a connection, running the timers meanwhile ([`Inner::upkeep`]): awaited alone, a
    /// connect that hung (a server that accepts and never answers, with no connect timeout)
    /// stopped every reclaim, reap, leak report and clock tick for as long as it hung.
    /// `None`: the last handle went meanwhile, and the connect was given up. The error is the
    /// manager's, or says that its `connect` panicked: a panic there is a failed connect,
    /// not the end of this task (which would open nothing again, with the slot it was
    /// opening still claimed, and run no timer; `tests/attack_opener_panic.rs`).
    async fn connect_with_upkeep(&self) -> Option<Result<M::Connection, String>> {
        let connect = self.manager.connect();
        let mut connect = std::pin::pin!(connect);
        // The manager's code, polled on this task: its panic is caught here. Unwind-safe: a
        // connect that panicked is dropped, never polled again.
        let mut connect = std::future::poll_fn(|cx| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                connect.as_mut().poll(cx)
            })) {
                Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
                Ok(std::task::Poll::Ready(connected)) => {
                    std::task::Poll::Ready(connected.map_err(|e| e.to_string()))
                }
                Err(panic) => std::task::Poll::Ready(Err(format!(
                    "the manager's connect panicked: {}",
                    panic_message(&*panic)
                ))),
            }
        });
        let period = upkeep_period(&self.config);
        loop {
            tokio::select! {
                connected = &mut connect => return Some(connected),
                () = tokio::time::sleep(period) => {
                    // Relaxed: as the opener's own look at it; a late look costs a period.
                    if self.closed.load(Ordering::Relaxed) {
                        return None;
                    }
                    self.upkeep();
                }
            }
        }
    }

    /// Advances the pool clock.
    fn tick(&self) -> u64 {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.clock_ms.store(now, Ordering::Relaxed);
        now
    }

    /// Puts newly opened `conn` into slot `slot` (claimed EMPTY -> OPENING by this task) and
    /// into service.
    fn install(&self, owned: Owned, conn: M::Connection) {
        let slot = owned.index();
        self.attachments[slot].set_abort(self.manager.abort_handle(&conn));
        let held = Box::new(crate::pooled::Held::new(conn, slot));
        self.core.conn(&owned, |c| *c = Some(held));
        let now = self.tick();
        let s = &self.core.slots[slot];
        s.opened_ms.store(now, Ordering::Relaxed);
        s.lends_before_open.store(s.lends(), Ordering::Relaxed);
        s.returned_ms.store(now, Ordering::Relaxed);
        s.busy_ms.store(0, Ordering::Relaxed);
        s.generation
            .store(self.generation.load(Ordering::Relaxed), Ordering::Relaxed);
        s.retire_after_ms.store(
            self.config
                .max_lifetime
                .map_or(u64::MAX, |d| jittered_ms(d, slot)),
            Ordering::Relaxed,
        );
        self.open.fetch_add(1, Ordering::AcqRel);
        self.counters.opened.fetch_add(1, Ordering::Relaxed);
        *self
            .last_connect_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.core.opened(owned);
    }

    /// Closes the idle connections in slots at or above the pool's current maximum, on the
    /// caller's thread: a shrink (`Pool::resize`) does this at once, so that whoever reads the
    /// pool's count of connections right after it (`PgPool`'s rebalance) sees them gone.
    pub(crate) fn shed_above_limit(&self) {
        let limit = self.core.limit();
        for i in limit..self.core.slots.len() {
            let slot = &self.core.slots[i];
            if slot.state.load(Ordering::Relaxed) != crate::core::IDLE {
                continue;
            }
            if let Some(o) = self.core.claim_idle(i) {
                self.counters.resized_away.fetch_add(1, Ordering::Relaxed);
                self.close(o);
            }
        }
    }

    /// Closes idle connections above the pool's current maximum (one a return put back after
    /// a shrink), past their lifetime, or idle too long above `min_size`.
    fn reap(&self, now: u64) {
        self.shed_above_limit();
        let idle_ms = self.config.idle_timeout.map(|d| d.as_millis() as u64);
        let limit = self.core.limit();
        for i in 0..limit.min(self.core.slots.len()) {
            let slot = &self.core.slots[i];
            if slot.state.load(Ordering::Relaxed) != crate::core::IDLE {
                continue;
            }
            let idle_for = now.saturating_sub(slot.returned_ms.load(Ordering::Relaxed));
            let too_idle = idle_ms.is_some_and(|limit| idle_for >= limit);
            let candidate = too_idle || self.expired(i, now);
            let Some(o) = candidate.then(|| self.core.claim_idle(i)).flatten() else {
                continue;
            };
            let above_min = self.open.load(Ordering::Acquire) > self.min_size();
            if self.expired(i, now) {
                self.counters.retired.fetch_add(1, Ordering::Relaxed);
                self.close(o);
            } else if too_idle && above_min {
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                self.close(o);
            } else {
                // Kept; `shut_down` may have passed this slot while it was claimed here.
                self.release_open(o);
            }
        }
    }

    /// Reclaims lent connections past the time-to-live or abandoned timeout: takes the slot
    /// from the holder (the lease CAS), frees it for a new connection, and aborts the old one
    /// on a task of its own (a cancel request is a round trip).
    fn reclaim_overdue(&self, now: u64) {
        let ttl = self.config.time_to_live;
        let abandoned = self.config.abandoned_timeout;
        let ms = |d: Duration| d.as_millis() as u64;
        for i in 0..self.core.slots.len() {
            let slot = &self.core.slots[i];
            // Acquire (in current_lease): the times below are this borrow's.
            let Some(lease) = self.core.current_lease(i) else {
                continue;
            };
            let lent = now.saturating_sub(slot.borrowed_ms.load(Ordering::Relaxed));
            let unused = now.saturating_sub(slot.active_ms.load(Ordering::Relaxed));
            let (counter, reason) = if let Some(t) = ttl.filter(|&t| lent >= ms(t)) {
                (
                    &self.counters.reclaimed_ttl,
                    format!("reclaimed after {lent} ms lent, over the pool's time_to_live ({t:?})"),
                )
            } else if let Some(t) = abandoned.filter(|&t| unused >= ms(t)) {
                (
                    &self.counters.reclaimed_abandoned,
                    // "Unused" is the guard not dereferenced: a holder busy through a
                    // handle made from it (a Transaction, a pipeline, a stream, a COPY) looks
                    // idle, and must be told so, with the remedy.
                    format!(
                        "reclaimed after {unused} ms unused while lent (its guard not \
                         dereferenced: work through a Transaction, pipeline, row stream or COPY \
                         made from it counts as one use), over the pool's abandoned_timeout \
                         ({t:?}); raise abandoned_timeout above the longest transaction or \
                         statement you run on a borrowed connection"
                    ),
                )
            } else {
                continue;
            };
            let Some(owned) = self.core.end_lease(lease) else {
                continue; // returned meanwhile: nothing to reclaim
            };
            counter.fetch_add(1, Ordering::Relaxed);
            // This task owns the slot now; the holder keeps the connection object but will
            // find the slot gone when it drops it.
            let abort = self.attachments[i].take_abort();
            self.free(owned);
            if let Some(abort) = abort {
                tokio::spawn(abort(reason));
            }
        }
    }
}

/// The shortest of the configured timers. `validate_after` is one: its window is measured on
/// the pool clock too (the return's stamp against the borrow's reading), and a clock that
/// stepped every 500 ms lent connections idle for up to 500 ms past the window unvalidated.
fn shortest_timer(config: &Config) -> Option<Duration> {
    [
        config.max_lifetime,
        config.idle_timeout,
        // A zero window validates every borrow: nothing to measure, no reason to step often.
        config.validate_after.filter(|w| !w.is_zero()),
        config.abandoned_timeout,
        config.time_to_live,
        config.leak_warning,
    ]
    .into_iter()
    .flatten()
    .min()
}

/// A lifetime in ms between 90% and 100% of `lifetime`, spread by slot (deterministic, so a
/// test can bound it; different for neighbouring slots).
fn jittered_ms(lifetime: Duration, slot: usize) -> u64 {
    let ms = lifetime.as_millis() as u64;
    // A multiplicative hash of the slot index, mapped onto the last tenth of the lifetime.
    let spread = (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1023
    ms - ms / 10 * spread / 1023
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::{Duration, Instant};

    use crate::{Manager, Pool};

    /// Counts the closes (drops) of its connections.
    struct Closes(Arc<AtomicUsize>);

    struct Conn(Arc<AtomicUsize>);

    impl Drop for Conn {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    impl Manager for Closes {
        type Connection = Conn;
        type Error = std::io::Error;
        async fn connect(&self) -> Result<Conn, std::io::Error> {
            Ok(Conn(self.0.clone()))
        }
    }

    /// The reaper claims an idle connection to look at it, and puts it back when it keeps it
    /// (idle too long, but at `min_size`). If the last handle went in between, `shut_down`'s
    /// scan passed the claimed slot: the connection put back must close then, or it stays open
    /// as long as anything keeps the pool's memory (a guard, a thread's spare reference).
    /// Replayed here by marking the pool closed, as that scan does, before the reaper runs.
    /// Failed before `reap` put it back through `release_open` (found by an attacker).
    #[tokio::test]
    async fn a_connection_the_reaper_keeps_after_the_last_handle_went_is_closed() {
        let closes = Arc::new(AtomicUsize::new(0));
        let pool = Pool::builder(Closes(closes.clone()))
            .max_size(1)
            .min_size(1)
            .idle_timeout(Duration::from_millis(1))
            .build();
        let start = Instant::now();
        while pool.stats().open < 1 {
            assert!(start.elapsed() < Duration::from_secs(5), "min_size opened");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let inner = Arc::clone(&pool.inner);
        inner.closed.store(true, SeqCst);
        // Idle long past the timeout; kept, since it is the last one.
        inner.reap(inner.now() + 60_000);
        assert_eq!(closes.load(SeqCst), 1, "the kept connection is still open");
        assert_eq!(inner.open.load(SeqCst), 0);
        drop(pool);
        assert_eq!(closes.load(SeqCst), 1, "closed once");
    }
}
