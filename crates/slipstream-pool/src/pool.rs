//! The pool users hold: borrowing (async and blocking), returning, the opener task.

use std::fmt;
use std::future::{Future, poll_fn};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

use crate::core::{Core, Waiter, Wake, claim_blocking, keep_one};
use crate::{PoolError, Stats};

/// Opens, checks and closes the connections of one pool.
///
/// ```
/// use slipstream_pool::Manager;
///
/// /// A stand-in connection: a number.
/// struct Numbers;
/// impl Manager for Numbers {
///     type Connection = u64;
///     type Error = std::io::Error;
///     async fn connect(&self) -> Result<u64, std::io::Error> {
///         Ok(42)
///     }
/// }
/// ```
pub trait Manager: Send + Sync + 'static {
    /// The pooled connection.
    type Connection: Send + 'static;
    /// What opening one can fail with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Opens a connection. Runs on the pool's opener task, never on a borrower.
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, Self::Error>> + Send;

    /// True if a returned connection must be closed instead of lent again (e.g. its socket
    /// failed). Called on every return, so it must be cheap and must not block.
    fn is_broken(&self, _conn: &Self::Connection) -> bool {
        false
    }

    /// Checks a connection that sat idle longer than the pool's trust window
    /// ([`Builder::validate_after`]) before it is lent (e.g. a round trip to the server).
    /// `false` closes it and the borrow takes another. Async borrows only.
    fn validate(&self, _conn: &mut Self::Connection) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }
}

/// How a pool behaves. Build with [`Pool::builder`].
#[derive(Debug, Clone)]
pub struct Config {
    /// The most connections open at once.
    pub max_size: usize,
    /// Connections kept open even when idle.
    pub min_size: usize,
    /// The most borrowers waiting at once; beyond it a borrow fails at once with
    /// [`PoolError::Full`] instead of queueing.
    pub max_waiters: usize,
    /// How long a borrow waits for a connection before failing with [`PoolError::Timeout`];
    /// `Duration::MAX` waits for ever (and spares the timer).
    pub borrow_timeout: Duration,
    /// The shortest time between two connection attempts (a cap on the connect rate, so a
    /// burst of borrowers does not storm the server).
    pub connect_interval: Duration,
    /// Connections older than this are closed when returned or found idle, each at its own
    /// age between 90% and 100% of it (jitter, so a pool's connections do not all retire
    /// together). `None`: no limit.
    pub max_lifetime: Option<Duration>,
    /// Connections idle longer than this are closed, down to `min_size`. `None`: kept.
    pub idle_timeout: Option<Duration>,
    /// Connections idle longer than this are validated ([`Manager::validate`]) before an async
    /// borrow gets them. `None`: never.
    pub validate_after: Option<Duration>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_size: 10,
            min_size: 0,
            max_waiters: 100_000,
            borrow_timeout: Duration::from_secs(30),
            connect_interval: Duration::from_millis(1),
            max_lifetime: None,
            idle_timeout: None,
            validate_after: None,
        }
    }
}

/// Sets up a [`Pool`].
///
/// ```
/// # struct Numbers;
/// # impl slipstream_pool::Manager for Numbers {
/// #     type Connection = u64;
/// #     type Error = std::io::Error;
/// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
/// # }
/// # #[tokio::main] async fn main() {
/// use std::time::Duration;
/// let pool = slipstream_pool::Pool::builder(Numbers)
///     .max_size(6)
///     .min_size(2)
///     .borrow_timeout(Duration::from_secs(5))
///     .build();
/// # }
/// ```
#[derive(Debug)]
pub struct Builder<M> {
    manager: M,
    config: Config,
}

impl<M: Manager> Builder<M> {
    /// The most connections open at once (default 10).
    pub fn max_size(mut self, n: usize) -> Self {
        self.config.max_size = n;
        self
    }
    /// Connections kept open even when idle (default 0).
    pub fn min_size(mut self, n: usize) -> Self {
        self.config.min_size = n;
        self
    }
    /// The most borrowers waiting at once (default 100,000).
    pub fn max_waiters(mut self, n: usize) -> Self {
        self.config.max_waiters = n;
        self
    }
    /// How long a borrow waits (default 30 s; `Duration::MAX`: for ever).
    pub fn borrow_timeout(mut self, timeout: Duration) -> Self {
        self.config.borrow_timeout = timeout;
        self
    }
    /// Closes connections after about this age (90-100% of it, jittered; default: never).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// use std::time::Duration;
    /// let pool = slipstream_pool::Pool::builder(Numbers)
    ///     .max_lifetime(Duration::from_secs(30 * 60))
    ///     .idle_timeout(Duration::from_secs(10 * 60))
    ///     .build();
    /// # }
    /// ```
    pub fn max_lifetime(mut self, lifetime: Duration) -> Self {
        self.config.max_lifetime = Some(lifetime);
        self
    }
    /// Closes connections idle longer than this, never going below `min_size` (default:
    /// never).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.idle_timeout = Some(timeout);
        self
    }
    /// Validates a connection idle longer than `window` before lending it (async borrows;
    /// default: never). With [`crate::PgManager`] that is one round trip, so a borrower after a
    /// server restart gets a working connection instead of a dead one.
    pub fn validate_after(mut self, window: Duration) -> Self {
        self.config.validate_after = Some(window);
        self
    }
    /// The shortest time between connection attempts (default 1 ms).
    pub fn connect_interval(mut self, interval: Duration) -> Self {
        self.config.connect_interval = interval;
        self
    }

    /// [`Builder::build`], then waits until `min_size` connections are open, failing with
    /// the connect error if the first attempts fail.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::{PgManager, Pool};
    /// let pool = Pool::builder(PgManager::new("postgres://app@db/orders".parse()?))
    ///     .min_size(4)
    ///     .build_ready()
    ///     .await?; // four connections open, or the reason they are not
    /// # Ok(()) }
    /// ```
    pub async fn build_ready(self) -> Result<Pool<M>, PoolError> {
        let timeout = self.config.borrow_timeout;
        let pool = self.build();
        let start = Instant::now();
        loop {
            if pool.inner.open.load(Ordering::Acquire) >= pool.inner.config.min_size {
                return Ok(pool);
            }
            if start.elapsed() >= timeout.min(Duration::from_secs(60)) {
                return Err(pool.timeout_error());
            }
            if pool.inner.counters.connect_failures.load(Ordering::Relaxed) >= 3 {
                return Err(pool.timeout_error());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Creates the pool and starts its opener task on the current tokio runtime, which must
    /// outlive the pool. `min_size` connections open in the background; `build` does not wait.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn build(self) -> Pool<M> {
        let mut config = self.config;
        config.min_size = config.min_size.min(config.max_size);
        let inner = Arc::new(Inner {
            core: Core::new(config.max_size),
            manager: self.manager,
            config,
            open: AtomicUsize::new(0),
            opener: Notify::new(),
            last_connect_error: Mutex::new(None),
            counters: Counters::default(),
            epoch: Instant::now(),
            clock_ms: AtomicU64::new(0),
        });
        tokio::spawn(opener(Arc::downgrade(&inner)));
        inner.opener.notify_one();
        Pool { inner }
    }
}

/// A pool of connections. Cheap to clone (all clones share the pool).
///
/// Borrowing takes an idle connection with one compare-and-swap, skipping busy ones, and
/// returning puts it back (or hands it straight to the longest waiting borrower): no lock on
/// either path. A borrower waits only when no connection is idle. Connections are opened by the
/// pool's own task, never by a borrower.
///
/// ```
/// # struct Numbers;
/// # impl slipstream_pool::Manager for Numbers {
/// #     type Connection = u64;
/// #     type Error = std::io::Error;
/// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
/// # }
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = slipstream_pool::Pool::builder(Numbers).max_size(4).build();
/// let conn = pool.get().await?;     // waits while the first connection opens
/// assert_eq!(*conn, 1);
/// drop(conn);                        // back to the pool
/// assert_eq!(pool.stats().idle, 1);
/// # Ok(()) }
/// ```
pub struct Pool<M: Manager> {
    inner: Arc<Inner<M>>,
}

impl<M: Manager> Clone for Pool<M> {
    fn clone(&self) -> Self {
        Pool {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<M: Manager> {
    core: Core<M::Connection>,
    manager: M,
    config: Config,
    /// Slots holding a connection (IDLE or BORROWED); the opener fills EMPTY ones.
    open: AtomicUsize,
    /// Wakes the opener: a borrower began waiting, or a connection was closed.
    opener: Notify,
    /// Why the last connection attempt failed, for the timeout error. Touched by the opener
    /// and by borrowers that time out only.
    last_connect_error: Mutex<Option<String>>,
    counters: Counters,
    /// The pool clock: ms since `epoch`, advanced by the opener task on each wake-up (at
    /// least every 100 ms while timers are set). Returns read it instead of the system clock.
    epoch: Instant,
    clock_ms: AtomicU64,
}

impl<M: Manager> Inner<M> {
    fn tick(&self) -> u64 {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.clock_ms.store(now, Ordering::Relaxed);
        now
    }

    /// True if the connection in owned slot `i` has outlived its lifetime at `now`.
    fn expired(&self, i: usize, now: u64) -> bool {
        let slot = &self.core.slots[i];
        now.saturating_sub(slot.opened_ms.load(Ordering::Relaxed))
            >= slot.retire_after_ms.load(Ordering::Relaxed)
    }

    /// Closes the connection in owned slot `i` and frees the slot for the opener.
    fn close(&self, i: usize) {
        let slot = &self.core.slots[i];
        // SAFETY: the caller owns slot `i` (a borrower returning it, or the reaper that
        // claimed it).
        let conn = unsafe { slot.with(Option::take) };
        drop(conn);
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.core.vacate(i);
        self.opener.notify_one();
    }

    /// Closes idle connections past their lifetime, or idle too long above `min_size`.
    fn reap(&self, now: u64) {
        let idle_ms = self.config.idle_timeout.map(|d| d.as_millis() as u64);
        for i in 0..self.core.slots.len() {
            let slot = &self.core.slots[i];
            let idle_for = now.saturating_sub(slot.returned_ms.load(Ordering::Relaxed));
            let too_idle = idle_ms.is_some_and(|limit| idle_for >= limit);
            let old = now.saturating_sub(slot.opened_ms.load(Ordering::Relaxed))
                >= slot.retire_after_ms.load(Ordering::Relaxed);
            if !(too_idle || old) || !self.core.claim_idle(i) {
                continue;
            }
            let above_min = self.open.load(Ordering::Acquire) > self.config.min_size;
            if self.expired(i, now) {
                self.counters.retired.fetch_add(1, Ordering::Relaxed);
                self.close(i);
            } else if too_idle && above_min {
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                self.close(i);
            } else {
                self.core.release(i);
            }
        }
    }
}

#[derive(Default)]
struct Counters {
    waits: AtomicU64,
    timeouts: AtomicU64,
    rejected: AtomicU64,
    opened: AtomicU64,
    connect_failures: AtomicU64,
    closed_broken: AtomicU64,
    failed_validation: AtomicU64,
    retired: AtomicU64,
    idle_closed: AtomicU64,
    /// Borrows that waited, by wait time: bucket k counts waits of 2^k to 2^(k+1) µs.
    wait_buckets: [AtomicU64; 32],
}

impl<M: Manager> Pool<M> {
    /// Starts configuring a pool of `manager`'s connections.
    pub fn builder(manager: M) -> Builder<M> {
        Builder {
            manager,
            config: Config::default(),
        }
    }

    /// Borrows a connection, waiting up to the borrow timeout if none is idle. Cancel-safe:
    /// dropping the future while it waits gives up its place and loses no connection.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// use slipstream_pool::PoolError;
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(1)
    ///     .borrow_timeout(std::time::Duration::from_millis(10)).build();
    /// let held = pool.get().await?;
    /// // The only connection is held: the second borrow times out, saying so.
    /// assert!(matches!(pool.get().await, Err(PoolError::Timeout { .. })));
    /// # drop(held); Ok(()) }
    /// ```
    pub async fn get(&self) -> Result<Pooled<M>, PoolError> {
        let Some(window) = self.inner.config.validate_after else {
            return self.claim().await;
        };
        let window = window.as_millis() as u64;
        loop {
            let mut conn = self.claim().await?;
            let slot = &self.inner.core.slots[conn.slot];
            let now = self.inner.clock_ms.load(Ordering::Relaxed);
            let idle = now.saturating_sub(slot.returned_ms.load(Ordering::Relaxed));
            if idle < window || self.inner.manager.validate(&mut conn).await {
                return Ok(conn);
            }
            self.inner
                .counters
                .failed_validation
                .fetch_add(1, Ordering::Relaxed);
            conn.discard = true;
        }
    }

    /// Borrows a slot, without validation.
    async fn claim(&self) -> Result<Pooled<M>, PoolError> {
        let inner = &self.inner;
        if let Some(i) = inner.core.try_claim() {
            return Ok(self.lend(i));
        }
        let start = Instant::now();
        self.check_room()?;
        let waiter = Arc::new(Waiter::new(Wake::Task(AtomicWaker::new())));
        inner.core.enqueue(waiter.clone());
        self.wake_opener_if_useful();
        let mut place = Place {
            core: &inner.core,
            waiter: &waiter,
            done: false,
        };
        let wait = poll_fn(|cx| {
            if let Wake::Task(w) = &waiter.wake {
                w.register(cx.waker());
            }
            if let Some(i) = waiter.given() {
                return Poll::Ready(i);
            }
            match inner.core.try_claim_after_queueing() {
                Some(i) => Poll::Ready(keep_one(&inner.core, &waiter, i)),
                None => Poll::Pending,
            }
        });
        // No timer at all without a timeout: registering one costs a trip through tokio's
        // timer wheel for every borrow that waits.
        let waited = if inner.config.borrow_timeout == Duration::MAX {
            Ok(wait.await)
        } else {
            tokio::time::timeout(inner.config.borrow_timeout, wait).await
        };
        match waited {
            Ok(i) => {
                place.done = true;
                self.waited(start);
                Ok(self.lend(i))
            }
            Err(_) => {
                place.done = true;
                match waiter.give_up() {
                    Ok(()) => {
                        inner.core.done_waiting();
                        Err(self.timeout_error())
                    }
                    // Handed a connection at the last moment: take it.
                    Err(i) => Ok(self.lend(i)),
                }
            }
        }
    }

    /// Borrows a connection on a thread that may block (not an async task), waiting up to the
    /// borrow timeout.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers).build();
    /// let worker = std::thread::spawn(move || -> Result<u64, slipstream_pool::PoolError> {
    ///     let conn = pool.get_blocking()?;
    ///     Ok(*conn)
    /// });
    /// # let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    /// # }
    /// ```
    pub fn get_blocking(&self) -> Result<Pooled<M>, PoolError> {
        let inner = &self.inner;
        if let Some(i) = inner.core.try_claim() {
            return Ok(self.lend(i));
        }
        let start = Instant::now();
        self.check_room()?;
        self.wake_opener_if_useful();
        let deadline = (inner.config.borrow_timeout != Duration::MAX)
            .then(|| start + inner.config.borrow_timeout);
        match claim_blocking(&inner.core, deadline) {
            Some(i) => {
                self.waited(start);
                Ok(self.lend(i))
            }
            None => Err(self.timeout_error()),
        }
    }

    /// Borrows an idle connection if there is one, without waiting.
    pub fn try_get(&self) -> Option<Pooled<M>> {
        self.inner.core.try_claim().map(|i| self.lend(i))
    }

    /// What the pool has done so far and holds now.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        let core = &self.inner.core;
        let (mut idle, mut borrowed) = (0, 0);
        for slot in core.slots.iter() {
            match slot.state.load(Ordering::Relaxed) {
                crate::core::IDLE => idle += 1,
                crate::core::BORROWED => borrowed += 1,
                _ => {}
            }
        }
        Stats {
            max_size: self.inner.config.max_size,
            open: self.inner.open.load(Ordering::Relaxed),
            idle,
            borrowed,
            waiting: core.waiting.load(Ordering::Relaxed),
            borrows: core
                .slots
                .iter()
                .map(|s| s.borrows.load(Ordering::Relaxed))
                .sum(),
            waits: c.waits.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            opened: c.opened.load(Ordering::Relaxed),
            connect_failures: c.connect_failures.load(Ordering::Relaxed),
            closed_broken: c.closed_broken.load(Ordering::Relaxed),
            failed_validation: c.failed_validation.load(Ordering::Relaxed),
            retired: c.retired.load(Ordering::Relaxed),
            idle_closed: c.idle_closed.load(Ordering::Relaxed),
            wait_histogram_us: c
                .wait_buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// A snapshot of every open connection's attributes (times from the pool's coarse clock,
    /// which the opener advances at least every 500 ms).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = slipstream_pool::Pool::builder(Numbers).build();
    /// drop(pool.get().await?);
    /// for c in pool.connections() {
    ///     println!("slot {}: {} borrows, {:?} old, busy: {}", c.slot, c.borrows, c.age, c.borrowed);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let now = self.inner.clock_ms.load(Ordering::Relaxed);
        let ms = |t: u64| Duration::from_millis(now.saturating_sub(t));
        self.inner
            .core
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let state = s.state.load(Ordering::Acquire);
                if state != crate::core::IDLE && state != crate::core::BORROWED {
                    return None;
                }
                Some(ConnectionInfo {
                    slot: i,
                    borrowed: state == crate::core::BORROWED,
                    borrows: s.borrows.load(Ordering::Relaxed),
                    age: ms(s.opened_ms.load(Ordering::Relaxed)),
                    since_returned: ms(s.returned_ms.load(Ordering::Relaxed)),
                })
            })
            .collect()
    }

    fn lend(&self, slot: usize) -> Pooled<M> {
        let count = &self.inner.core.slots[slot].borrows;
        // Only the owner writes it: a plain load and store, no read-modify-write.
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Pooled {
            pool: self.inner.clone(),
            slot,
            discard: false,
        }
    }

    /// Wakes the opener when a waiting borrower could use another connection; with every
    /// connection open there is nothing for it to do, and waking it costs a lock.
    fn wake_opener_if_useful(&self) {
        if self.inner.open.load(Ordering::Relaxed) < self.inner.config.max_size {
            self.inner.opener.notify_one();
        }
    }

    fn check_room(&self) -> Result<(), PoolError> {
        let waiting = self.inner.core.waiting.load(Ordering::Relaxed);
        if waiting >= self.inner.config.max_waiters {
            self.inner.counters.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(PoolError::Full {
                waiting,
                max_waiters: self.inner.config.max_waiters,
            });
        }
        Ok(())
    }

    fn waited(&self, start: Instant) {
        let c = &self.inner.counters;
        c.waits.fetch_add(1, Ordering::Relaxed);
        let us = start.elapsed().as_micros().max(1) as u64;
        let bucket = (63 - us.leading_zeros() as usize).min(c.wait_buckets.len() - 1);
        c.wait_buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn timeout_error(&self) -> PoolError {
        self.inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        PoolError::Timeout {
            waited: self.inner.config.borrow_timeout,
            open: self.inner.open.load(Ordering::Relaxed),
            max_size: self.inner.config.max_size,
            last_connect_error: self
                .inner
                .last_connect_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

impl<M: Manager> fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A waiting async borrower's place in the queue: if the borrow future is dropped while
/// waiting, gives the place up, and returns a connection handed over meanwhile.
struct Place<'a, C> {
    core: &'a Core<C>,
    waiter: &'a Waiter,
    done: bool,
}

impl<C> Drop for Place<'_, C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        match self.waiter.give_up() {
            Ok(()) => self.core.done_waiting(),
            Err(i) => self.core.release(i),
        }
    }
}

/// A borrowed connection; returns to the pool when dropped.
///
/// ```
/// # struct Numbers;
/// # impl slipstream_pool::Manager for Numbers {
/// #     type Connection = u64;
/// #     type Error = std::io::Error;
/// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
/// # }
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = slipstream_pool::Pool::builder(Numbers).build();
/// let mut conn = pool.get().await?;
/// *conn += 1; // a `Pooled` derefs to the connection
/// # Ok(()) }
/// ```
pub struct Pooled<M: Manager> {
    pool: Arc<Inner<M>>,
    slot: usize,
    /// Close the connection on drop instead of returning it (it failed validation).
    discard: bool,
}

impl<M: Manager> Deref for Pooled<M> {
    type Target = M::Connection;
    fn deref(&self) -> &M::Connection {
        // SAFETY: this guard owns the slot (it was claimed or handed to it) until dropped, and
        // an owned slot lent out always holds a connection.
        let conn = unsafe { self.pool.core.slots[self.slot].with(|c| c as *mut Option<_>) };
        // SAFETY: as above; the reference lives no longer than `&self`, during which no one
        // else touches the slot.
        // The expect cannot fire: a slot is lent only after `Core::opened` put a connection in
        // it, and the connection is taken out only by `Inner::close`, which its owner calls
        // instead of lending it again (no user input or socket state reaches this).
        unsafe { (*conn).as_ref().expect("a lent slot holds a connection") }
    }
}

impl<M: Manager> DerefMut for Pooled<M> {
    fn deref_mut(&mut self) -> &mut M::Connection {
        // SAFETY: as in `deref`; `&mut self` makes the access unique on this side too.
        let conn = unsafe { self.pool.core.slots[self.slot].with(|c| c as *mut Option<_>) };
        // SAFETY: as in `deref`. The expect cannot fire, as in `deref`.
        unsafe { (*conn).as_mut().expect("a lent slot holds a connection") }
    }
}

impl<M: Manager> Drop for Pooled<M> {
    fn drop(&mut self) {
        let pool = &self.pool;
        let slot = &pool.core.slots[self.slot];
        // SAFETY: this guard owns the slot until the release or vacate below.
        let broken = self.discard
            // SAFETY: as above.
            || unsafe { slot.with(|c| c.as_ref().is_some_and(|c| pool.manager.is_broken(c))) };
        let now = pool.clock_ms.load(Ordering::Relaxed);
        if broken {
            pool.counters.closed_broken.fetch_add(1, Ordering::Relaxed);
            pool.close(self.slot);
        } else if pool.expired(self.slot, now) {
            pool.counters.retired.fetch_add(1, Ordering::Relaxed);
            pool.close(self.slot);
        } else {
            slot.returned_ms.store(now, Ordering::Relaxed);
            pool.core.release(self.slot);
        }
    }
}

impl<M: Manager> fmt::Debug for Pooled<M>
where
    M::Connection: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pooled")
            .field("slot", &self.slot)
            .field("connection", &**self)
            .finish()
    }
}

/// The opener task: keeps `min_size` connections open, and opens more (up to `max_size`)
/// while borrowers wait. One attempt at a time, at most one per `connect_interval`; after a
/// failure it backs off exponentially up to a second. Ends when the pool is dropped.
async fn opener<M: Manager>(pool: std::sync::Weak<Inner<M>>) {
    let mut backoff = Duration::ZERO;
    loop {
        let pause = {
            let Some(inner) = pool.upgrade() else { return };
            let now = inner.tick();
            if inner.config.max_lifetime.is_some() || inner.config.idle_timeout.is_some() {
                inner.reap(now);
            }
            let needed = {
                let open = inner.open.load(Ordering::Acquire);
                open < inner.config.max_size
                    && (open < inner.config.min_size
                        || inner.core.waiting.load(Ordering::Acquire) > 0)
            };
            if !needed {
                None
            } else if let Some(slot) = inner.core.claim_empty() {
                match inner.manager.connect().await {
                    Ok(conn) => {
                        backoff = Duration::ZERO;
                        // SAFETY: claim_empty made this task the slot's owner.
                        unsafe { inner.core.slots[slot].with(|c| *c = Some(conn)) };
                        let now = inner.tick();
                        let s = &inner.core.slots[slot];
                        s.opened_ms.store(now, Ordering::Relaxed);
                        s.returned_ms.store(now, Ordering::Relaxed);
                        s.retire_after_ms.store(
                            inner
                                .config
                                .max_lifetime
                                .map_or(u64::MAX, |d| jittered_ms(d, slot)),
                            Ordering::Relaxed,
                        );
                        inner.open.fetch_add(1, Ordering::AcqRel);
                        inner.counters.opened.fetch_add(1, Ordering::Relaxed);
                        *inner
                            .last_connect_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) = None;
                        inner.core.opened(slot);
                    }
                    Err(e) => {
                        inner.core.vacate(slot);
                        inner
                            .counters
                            .connect_failures
                            .fetch_add(1, Ordering::Relaxed);
                        *inner
                            .last_connect_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
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
                let period = match inner.config.max_lifetime.or(inner.config.idle_timeout) {
                    // Timers are checked at least every 100 ms (or a tenth of the shortest).
                    Some(_) => Duration::from_millis(100).min(shortest_timer(&inner.config) / 10),
                    None => Duration::from_millis(500),
                };
                let _ = tokio::time::timeout(
                    period.max(Duration::from_millis(1)),
                    inner.opener.notified(),
                )
                .await;
            }
        }
    }
}

/// The shortest of the configured timers.
fn shortest_timer(config: &Config) -> Duration {
    [config.max_lifetime, config.idle_timeout]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Duration::MAX)
}

/// A lifetime in ms between 90% and 100% of `lifetime`, spread by slot (deterministic, so a
/// test can bound it; different for neighbouring slots).
fn jittered_ms(lifetime: Duration, slot: usize) -> u64 {
    let ms = lifetime.as_millis() as u64;
    // A multiplicative hash of the slot index, mapped onto the last tenth of the lifetime.
    let spread = (slot as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1023
    ms - ms / 10 * spread / 1023
}

/// One open connection's attributes; see [`Pool::connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// Its slot in the pool.
    pub slot: usize,
    /// Lent out now.
    pub borrowed: bool,
    /// Times it was lent.
    pub borrows: u64,
    /// Time since it was opened.
    pub age: Duration,
    /// Time since it was last returned (or opened): how long it has been idle, if it is.
    pub since_returned: Duration,
}
