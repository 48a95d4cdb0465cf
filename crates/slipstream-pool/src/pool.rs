//! The pool users hold: building it, borrowing (async, blocking, labeled), resizing, counters.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::core::{BORROWED, Core, IDLE, Owned, Refused, WAIT_BUCKETS, Wait, claim_blocking};
use crate::labels::{Labeling, Labels, TOO_COSTLY};
use crate::maintenance::{deadlines, opener};
use crate::manager::AbortFn;
use crate::pooled::{Discard, Held, Lent};
use crate::{Builder, Config, Manager, PoolError, Pooled, Stats};

impl<M: Manager> Builder<M> {
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
            if pool.inner.open.load(Ordering::Acquire) >= pool.inner.min_size() {
                return Ok(pool);
            }
            // The time it waited, not the borrow timeout: after three failed connects it
            // gives up long before that, and an error claiming 30 s sent readers looking for
            // a slow server.
            if start.elapsed() >= timeout.min(Duration::from_secs(60))
                || pool.inner.counters.connect_failures.load(Ordering::Relaxed) >= 3
            {
                return Err(pool.timeout_error_after(start.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Creates the pool and starts its opener task on the current tokio runtime, which must
    /// outlive the pool. `min_size` connections open in the background; `build` does not wait.
    /// A pool kept past its runtime lends what is idle, and a borrow that would wait fails at
    /// once with [`PoolError::Config`] saying the runtime has shut down.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(3).min_size(5).build();
    /// let s = pool.stats();
    /// assert_eq!((s.max_size, s.min_size), (3, 3)); // min_size taken as max_size
    /// # }
    /// ```
    pub fn build(self) -> Pool<M> {
        let mut config = self.config;
        // The pool allocates a slot per connection up to the resize limit: `usize::MAX`
        // ("no limit") panicked allocating them (`tests/attack_huge_sizes.rs`).
        config.max_size = config.max_size.min(MAX_CONNECTIONS);
        config.resize_limit = config.resize_limit.min(MAX_CONNECTIONS);
        config.min_size = config.min_size.min(config.max_size);
        // A round trip cannot end inside a bound of zero: every validation would fail and every
        // idle connection be closed in turn.
        config.validation_timeout = config.validation_timeout.max(MIN_VALIDATION_TIMEOUT);
        let capacity = match config.resize_limit {
            0 => config.max_size.max(64),
            n => n.max(config.max_size),
        };
        config.resize_limit = capacity;
        // Calibrated here, not in the first borrow that waits.
        std::sync::LazyLock::force(&WAIT_CLOCK);
        let inner = Arc::new(Inner {
            core: Core::new(capacity, config.max_size),
            manager: self.manager,
            reclaims: config.abandoned_timeout.is_some() || config.time_to_live.is_some(),
            watches_leaks: config.leak_warning.is_some(),
            min_size: AtomicUsize::new(config.min_size),
            published: config
                .metrics_name
                .as_deref()
                .map(|name| Box::new(crate::observe::Published::new(name, self.server.as_deref()))),
            config,
            open: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            opener: Notify::new(),
            deadlines: Notify::new(),
            last_connect_error: Mutex::new(None),
            counters: Counters::default(),
            epoch: Instant::now(),
            clock_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            attachments: (0..capacity).map(|_| Attachment::default()).collect(),
            runtime: tokio::runtime::Handle::current(),
            runtime_gone: AtomicBool::new(false),
            handles: AtomicUsize::new(1),
            closed: AtomicBool::new(false),
            shut: Notify::new(),
            server: self.server,
        });
        tokio::spawn(opener(Arc::downgrade(&inner)));
        tokio::spawn(deadlines(Arc::downgrade(&inner)));
        inner.opener.notify_one();
        Pool { inner }
    }
}

/// A pool of connections. Cheap to clone (all clones share the pool).
///
/// Borrowing takes an idle connection with one compare-and-swap, skipping busy ones, and
/// returning puts it back: no lock on either path while no one waits. A borrower waits only
/// when no connection is idle; a return then wakes one waiter, and hands the connection
/// straight to the longest-waiting one once it has waited past a fairness bound (1 ms for
/// blocking borrowers, at once for async ones). Connections are opened by the
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
    pub(crate) inner: Arc<Inner<M>>,
}

impl<M: Manager> Clone for Pool<M> {
    fn clone(&self) -> Self {
        // Relaxed: as `Arc::clone`; a new handle comes from a live one, so the count is not
        // zero meanwhile.
        self.inner.handles.fetch_add(1, Ordering::Relaxed);
        Pool {
            inner: self.inner.clone(),
        }
    }
}

impl<M: Manager> Drop for Pool<M> {
    /// The last handle shuts the pool down: its connections close (idle ones now, lent ones
    /// as they return) and its task ends. Guards still lent, and threads' cached references
    /// (`local_ref`), keep its memory until they let go.
    fn drop(&mut self) {
        // AcqRel, as `Arc`'s drop: the shutdown sees what every other handle did before its
        // own drop.
        if self.inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.shut_down();
        }
    }
}

/// What the pool keeps per slot besides the connection: touched only when a connection opens
/// or closes, by labeled borrows and by the reclaimer, never on the plain borrow path.
#[derive(Default)]
pub(crate) struct Attachment {
    /// Closes the slot's connection from outside (from [`Manager::abort_handle`]).
    pub(crate) abort: Mutex<Option<AbortFn>>,
    pub(crate) labels: Mutex<Arc<Labels>>,
    /// Where the current borrow came from (only with `leak_warning` set).
    pub(crate) borrow_site: crate::observe::BorrowSite,
}

impl Attachment {
    pub(crate) fn labels(&self) -> Arc<Labels> {
        self.labels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_labels(&self, labels: Arc<Labels>) {
        *self.labels.lock().unwrap_or_else(|p| p.into_inner()) = labels;
    }

    /// Sets the labels if `still_ours`, asked under their lock (see [`crate::Pooled::set_labels`]).
    pub(crate) fn set_labels_if(&self, labels: Arc<Labels>, still_ours: impl FnOnce() -> bool) {
        let mut current = self.labels.lock().unwrap_or_else(|p| p.into_inner());
        if still_ours() {
            *current = labels;
        }
    }

    pub(crate) fn take_abort(&self) -> Option<AbortFn> {
        self.abort.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn set_abort(&self, abort: Option<AbortFn>) {
        *self.abort.lock().unwrap_or_else(|p| p.into_inner()) = abort;
    }
}

pub(crate) struct Inner<M: Manager> {
    /// Connections are boxed (with their borrow's state) so lending and returning one moves a
    /// pointer, not the connection.
    pub(crate) core: Core<Box<Held<M::Connection>>>,
    pub(crate) manager: M,
    pub(crate) config: Config,
    /// The abandoned or time-to-live timer is set: lends and returns keep the slot's lease.
    pub(crate) reclaims: bool,
    /// `leak_warning` is set: lends note where they come from. A plain bool beside
    /// `reclaims`: testing the `Option<Duration>` in the config on every borrow and return
    /// cost 10 ns of a 39 ns uncontended borrow (criterion, pool_uncontended).
    pub(crate) watches_leaks: bool,
    pub(crate) min_size: AtomicUsize,
    /// Slots holding a connection (IDLE or BORROWED); the opener fills EMPTY ones.
    pub(crate) open: AtomicUsize,
    /// Slots with a connection or a connect under way (`open` plus at most the opener's one):
    /// a connect's server-side connection may already exist, so a multi-server pool counts it
    /// against `max_size`. One counter, so that a connect ending is never seen twice or not at
    /// all (two counters read one after the other can be).
    pub(crate) held: AtomicUsize,
    /// Wakes the opener: a borrower began waiting, or a connection was closed.
    pub(crate) opener: Notify,
    /// Wakes the deadline task: a task began waiting with a deadline sooner than its next
    /// look ([`Core::expire`]), or the pool shut down.
    pub(crate) deadlines: Notify,
    /// The metric handles, when [`Config::metrics_name`] is set.
    /// Boxed: the handles are a few hundred bytes that would push the hot fields after them
    /// apart (measured: +10 ns per uncontended borrow unboxed).
    pub(crate) published: Option<Box<crate::observe::Published>>,
    /// Why the last connection attempt failed, for the timeout error. Touched by the opener
    /// and by borrowers that time out only.
    pub(crate) last_connect_error: Mutex<Option<String>>,
    pub(crate) counters: Counters,
    /// The pool clock: ms since `epoch`, advanced by the opener task on each wake-up (at
    /// least every 100 ms while timers are set). Returns read it instead of the system clock.
    pub(crate) epoch: Instant,
    pub(crate) clock_ms: AtomicU64,
    /// Bumped by [`Pool::evict`]: connections opened under an older generation are closed.
    pub(crate) generation: AtomicU64,
    pub(crate) attachments: Box<[Attachment]>,
    /// Where resets and blocking validations run.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Set when the opener task was dropped mid-run, which happens only when `runtime` shut
    /// down: no connection will be opened again, and a borrow that must wait says so at once
    /// rather than time out blaming connections "still opening".
    pub(crate) runtime_gone: AtomicBool,
    /// [`Pool`] handles alive. Not the `Arc`'s count: guards and threads' cached references
    /// (`local_ref`) hold the `Arc` too, so its memory may outlive the last handle, and the
    /// connections must not.
    pub(crate) handles: AtomicUsize,
    /// Set by the last handle's drop: no borrower can come any more, so every connection
    /// closes (idle ones at once, lent ones on return) and the opener ends.
    pub(crate) closed: AtomicBool,
    /// Notified (all waiters) when `closed` is set: a reset in progress gives up and closes
    /// its connection, which a hung reset would otherwise keep open with the pool's memory.
    pub(crate) shut: Notify,
    /// The server of a [`PgPool`](crate::PgPool)'s sub-pool, which its leak warning names.
    pub(crate) server: Option<String>,
}

impl<M: Manager> Inner<M> {
    pub(crate) fn now(&self) -> u64 {
        self.clock_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn min_size(&self) -> usize {
        self.min_size.load(Ordering::Relaxed).min(self.core.limit())
    }

    /// True if the connection in owned slot `i` has outlived its lifetime at `now`, or was
    /// evicted.
    pub(crate) fn expired(&self, i: usize, now: u64) -> bool {
        let slot = &self.core.slots[i];
        now.saturating_sub(slot.opened_ms.load(Ordering::Relaxed))
            >= slot.retire_after_ms.load(Ordering::Relaxed)
            || slot.generation.load(Ordering::Relaxed) < self.generation.load(Ordering::Relaxed)
    }

    /// Closes the connection in owned slot `o` (one the reaper claimed idle) and frees the slot.
    pub(crate) fn close(&self, o: Owned) {
        let conn = self.core.conn(&o, Option::take);
        drop(conn);
        self.free(o);
    }

    /// Frees owned slot `o`, whose connection is closed or gone elsewhere, for the opener.
    pub(crate) fn free(&self, o: Owned) {
        let i = o.index();
        // Dropping the abort handle releases what it holds (a duplicated socket descriptor).
        self.attachments[i].set_abort(None);
        self.attachments[i].set_labels(Arc::default());
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.held.fetch_sub(1, Ordering::AcqRel);
        self.core.vacate(o);
        self.opener.notify_one();
    }

    /// Puts connection `conn` back into owned slot `o` and releases the slot: to a waiter, or
    /// IDLE.
    pub(crate) fn put_back(&self, o: Owned, mut conn: Box<Held<M::Connection>>) {
        let i = o.index();
        // A connection due for validation and not validated keeps the time it was last
        // returned, so the next borrow finds it due (and marks it again).
        if !std::mem::take(&mut conn.due) {
            self.core.slots[i]
                .returned_ms
                .store(self.now(), Ordering::Relaxed);
        }
        // The cell is empty while the connection is lent.
        self.core.conn(&o, |c| *c = Some(conn));
        self.release_open(o);
    }

    /// Releases owned slot `o`, its open connection in the cell: to a waiter, or IDLE, and
    /// closed at once if the pool was shut down meanwhile.
    pub(crate) fn release_open(&self, o: Owned) {
        let i = o.index();
        self.core.release(o);
        self.close_if_shut(i);
    }

    /// Closes slot `i`'s connection, just made IDLE by the caller, if the last handle has
    /// gone: `shut_down`'s scan may have passed the slot while the caller owned it. Every path
    /// that makes an open slot IDLE (a return, the reaper keeping a connection, the opener
    /// installing one) ends here, or the connection stays open as long as the pool's memory.
    pub(crate) fn close_if_shut(&self, i: usize) {
        // SeqCst, after the release's SeqCst swap to IDLE: pairs with `shut_down`'s store and
        // scan, so either this load sees the pool closed or that scan sees this slot IDLE.
        // (No one waits once it is closed, so the release did not hand the slot over.)
        if self.closed.load(Ordering::SeqCst)
            && let Some(o) = self.core.claim_idle(i)
        {
            self.close(o);
        }
    }

    /// Returns once the last handle has gone (at once if it has).
    pub(crate) async fn until_shut(&self) {
        let notified = self.shut.notified();
        let mut notified = std::pin::pin!(notified);
        // Enabled before the flag is read: a `shut_down` after the read notifies it.
        notified.as_mut().enable();
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }

    /// The last handle is gone: closes the idle connections and ends the opener; lent ones
    /// close on return ([`Inner::close_if_shut`]).
    fn shut_down(&self) {
        // SeqCst: see `close_if_shut`.
        self.closed.store(true, Ordering::SeqCst);
        self.shut.notify_waiters();
        for i in 0..self.core.slots.len() {
            if let Some(o) = self.core.claim_idle(i) {
                self.close(o);
            }
        }
        self.opener.notify_one();
        self.deadlines.notify_one();
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) timeouts: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) opened: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) closed_broken: AtomicU64,
    pub(crate) failed_validation: AtomicU64,
    pub(crate) retired: AtomicU64,
    pub(crate) idle_closed: AtomicU64,
    pub(crate) resized_away: AtomicU64,
    pub(crate) reclaimed_abandoned: AtomicU64,
    pub(crate) reclaimed_ttl: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) failed_resets: AtomicU64,
    pub(crate) label_configures: AtomicU64,
    pub(crate) label_closes: AtomicU64,
    pub(crate) leaks_suspected: AtomicU64,
}

impl<M: Manager> Pool<M> {
    /// Starts configuring a pool of `manager`'s connections.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers).build(); // the defaults
    /// assert_eq!((pool.stats().max_size, pool.stats().min_size), (10, 0));
    /// # }
    /// ```
    pub fn builder(manager: M) -> Builder<M> {
        Builder {
            manager,
            config: Config::default(),
            server: None,
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
    /// // min_size 1 and build_ready: the connection is open before the first borrow, so the
    /// // short timeout below applies only to the borrow that must wait.
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(1).min_size(1)
    ///     .borrow_timeout(std::time::Duration::from_millis(10)).build_ready().await?;
    /// let held = pool.get().await?;
    /// // The only connection is held: the second borrow times out, saying so.
    /// assert!(matches!(pool.get().await, Err(PoolError::Timeout { .. })));
    /// # drop(held); Ok(()) }
    /// ```
    // Not an `async fn`: the returned future serves the uncontended borrow in its first poll,
    // which is small enough to be inlined into the caller, and polls the rest out of line
    // (see get.rs for what that saves).
    pub fn get(&self) -> impl Future<Output = Result<Pooled<M>, PoolError>> + '_ {
        crate::get::Get::new(self, Self::get_waiting)
    }

    /// The rest of [`Pool::get`], after its first try found no idle connection (`first`:
    /// `None`) or one due for validation: validates `first` if given, then claims, waiting as
    /// needed, until a connection passes validation.
    pub(crate) async fn get_waiting(
        &self,
        first: Option<Pooled<M>>,
    ) -> Result<Pooled<M>, PoolError> {
        // `get`'s first try found no idle connection: no need to look again at once.
        let mut scanned = first.is_none();
        let mut deadline = Deadline::Unset;
        if let Some(conn) = first
            && let Some(conn) = self.validated(conn, &mut deadline).await?
        {
            return Ok(conn);
        }
        loop {
            let conn = self
                .claim(&mut deadline, std::mem::take(&mut scanned))
                .await?;
            if let Some(conn) = self.validated(conn, &mut deadline).await? {
                return Ok(conn);
            }
        }
    }

    /// Borrows the idle connection cheapest to turn into one labeled `wanted` (by
    /// `labeling`'s cost), configures it if its cost is above 0, and labels it `wanted` (Oracle
    /// UCP's connection labeling). With no idle connection below [`TOO_COSTLY`], it borrows as
    /// [`Pool::get`] does; a connection lent that way that is too costly is closed, and the
    /// pool opens a fresh one for the next try. Fails as `get` does when the borrow timeout
    /// passes (`configure` counts against it: one cut short closes its connection), and with
    /// [`PoolError::Labeling`] when `configure` fails on two connections.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(0) }
    /// # }
    /// use slipstream_pool::{Labeling, Labels};
    ///
    /// /// A connection's number is its tenant; any connection can switch, at a cost.
    /// struct Tenants;
    /// impl Labeling<u64> for Tenants {
    ///     fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
    ///         if wanted == current { 0 } else { 1 }
    ///     }
    ///     async fn configure(&self, wanted: &Labels, conn: &mut u64) -> bool {
    ///         *conn = wanted["tenant"].parse().unwrap_or(0);
    ///         true
    ///     }
    /// }
    ///
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = slipstream_pool::Pool::builder(Numbers).build();
    /// let seven = Labels::from([("tenant".to_string(), "7".to_string())]);
    /// let conn = pool.get_labeled(&seven, &Tenants).await?;
    /// assert_eq!(*conn, 7);
    /// assert_eq!(*conn.labels(), seven);
    /// # Ok(()) }
    /// ```
    pub async fn get_labeled<L: Labeling<M::Connection>>(
        &self,
        wanted: &Labels,
        labeling: &L,
    ) -> Result<Pooled<M>, PoolError> {
        let mut deadline = Deadline::Unset;
        let mut failed_configures = 0;
        loop {
            let conn = match self.claim_cheapest(wanted, labeling) {
                Some(conn) => conn,
                None => self.claim(&mut deadline, false).await?,
            };
            let Some(mut conn) = self.validated(conn, &mut deadline).await? else {
                continue;
            };
            let current = conn.labels();
            let cost = labeling.cost(wanted, &current);
            if cost == 0 {
                return Ok(conn);
            }
            if cost == TOO_COSTLY {
                self.inner
                    .counters
                    .label_closes
                    .fetch_add(1, Ordering::Relaxed);
                conn.set_discard(Discard::Counted);
                self.lent_nothing(&mut conn);
                continue;
            }
            self.inner
                .counters
                .label_configures
                .fetch_add(1, Ordering::Relaxed);
            // Until `configure` says it is done, the connection is half set up, whatever its
            // labels say: if this borrow is dropped meanwhile (a timeout, a `select!`) or the
            // configure panics, it is closed on return, not lent again under its old labels.
            conn.set_discard(Discard::Unusable);
            // Counts against the borrow timeout, as a validation does: a configure whose
            // server stopped answering (a hung host, a cut path) held the borrow for as long
            // as the silence (`tests/attack_stall.rs`). Cut short, the connection closes.
            let configure = labeling.configure(wanted, &mut conn);
            // On tokio's clock, as the borrow's waits keep its deadline.
            let configured = match deadline.on_runtime_clock(self.inner.config.borrow_timeout) {
                None => configure.await,
                Some(d) => match tokio::time::timeout_at(d.into(), configure).await {
                    Ok(configured) => configured,
                    Err(_) => {
                        self.lent_nothing(&mut conn);
                        return Err(self.timeout_error());
                    }
                },
            };
            if configured {
                conn.set_discard(Discard::Keep);
                conn.set_labels(wanted.clone());
                return Ok(conn);
            }
            self.lent_nothing(&mut conn);
            // One failure may be the connection's; more are the set-up's (a schema or role
            // that does not exist): retrying until the borrow timeout opened and closed
            // connections as fast as the server took them, then said they were "all in use".
            failed_configures += 1;
            if failed_configures == CONFIGURE_TRIES {
                return Err(PoolError::Labeling {
                    wanted: format!("{wanted:?}"),
                    tries: failed_configures,
                    server: None,
                });
            }
        }
    }

    /// Claims the idle connection with the lowest cost below [`TOO_COSTLY`], if any.
    fn claim_cheapest<L: Labeling<M::Connection>>(
        &self,
        wanted: &Labels,
        labeling: &L,
    ) -> Option<Pooled<M>> {
        let core = &self.inner.core;
        let mut candidates: Vec<(u32, usize)> = (0..core.limit())
            .filter(|&i| core.slots[i].state.load(Ordering::Relaxed) == IDLE)
            .map(|i| {
                let labels = self.inner.attachments[i].labels();
                (labeling.cost(wanted, &labels), i)
            })
            .filter(|&(cost, _)| cost != TOO_COSTLY)
            .collect();
        candidates.sort_unstable();
        // Another borrower may take a candidate first: then the next cheapest.
        candidates
            .into_iter()
            .find_map(|(_, i)| core.claim_idle(i))
            .map(|o| self.lend(o))
    }

    /// Validates a connection idle longer than the trust window; `None` if it failed (it is
    /// closed on drop). The validation counts against the borrow's `deadline` (set here if the
    /// borrow has not waited yet): a connection whose server stopped answering (a hung host,
    /// a cut path: what validation is there to find) would otherwise hold the borrow for as
    /// long as the silence, past any borrow timeout. One not validated by the deadline is
    /// closed, and the borrow fails with [`PoolError::Timeout`]; one not validated within
    /// `validation_timeout`, before the deadline, failed (`None`), and the borrow goes on.
    async fn validated(
        &self,
        mut conn: Pooled<M>,
        deadline: &mut Deadline,
    ) -> Result<Option<Pooled<M>>, PoolError> {
        if !self.still_open(&mut conn) {
            return Ok(None);
        }
        if !self.needs_validation(&mut conn) {
            return Ok(Some(conn));
        }
        let (until, borrow_ends) = self.validation_bound(deadline, runtime_now());
        let validation = self.inner.manager.validate(&mut conn);
        let ok = match tokio::time::timeout_at(until.into(), validation).await {
            Ok(ok) => ok,
            Err(_) if borrow_ends => {
                self.validation_failed(&mut conn);
                return Err(self.timeout_error());
            }
            Err(_) => false,
        };
        if ok {
            conn.set_due(false);
            return Ok(Some(conn));
        }
        self.validation_failed(&mut conn);
        Ok(None)
    }

    /// When a validation starting now must end: at the borrow's deadline or after
    /// `validation_timeout`, whichever comes first; and whether that is the borrow's end.
    /// `Duration::MAX` for either means no bound from it; a far-off bound stands for none.
    /// `now` is on the clock the borrow's waits keep its deadline on, if this sets it: an
    /// async borrow's [`runtime_now`] (set on the real clock, it was an hour early or late for
    /// the deadline task under a paused clock an hour off, `tests/attack_deadlines.rs`), a
    /// blocked thread's the real clock, its park's.
    fn validation_bound(&self, deadline: &mut Deadline, now: Instant) -> (Instant, bool) {
        let ends = deadline.on_clock(self.inner.config.borrow_timeout, || now);
        let limit = now
            .checked_add(self.inner.config.validation_timeout)
            .unwrap_or_else(|| now + FAR_OFF);
        match ends {
            Some(d) if d <= limit => (d, true),
            _ => (limit, false),
        }
    }

    /// Whether a connection just claimed idle may be lent at once: still open
    /// ([`Pool::still_open`]) and not due for validation. One that is not goes on to
    /// [`Pool::validated`], which closes or validates it.
    #[inline(always)]
    pub(crate) fn lendable(&self, conn: &mut Pooled<M>) -> bool {
        self.still_open(conn) && !self.needs_validation(conn)
    }

    /// False, and the connection marked to close as it drops, if the manager found it closed
    /// while it sat idle ([`Manager::closed_while_idle`], asked once per connection).
    #[inline(always)]
    fn still_open(&self, conn: &mut Pooled<M>) -> bool {
        if conn.is_discarded() {
            return false;
        }
        if self.inner.manager.closed_while_idle(conn) {
            self.validation_failed(conn);
            return false;
        }
        true
    }

    /// Whether `conn`, just claimed, sat idle past `validate_after`; if so it is marked due
    /// (`Held::due`) until validated, so no way its borrow ends makes it look fresh.
    #[inline]
    pub(crate) fn needs_validation(&self, conn: &mut Pooled<M>) -> bool {
        let Some(window) = self.inner.config.validate_after else {
            return false;
        };
        let slot = &self.inner.core.slots[conn.slot()];
        let idle = self
            .inner
            .now()
            .saturating_sub(slot.returned_ms.load(Ordering::Relaxed));
        let due = idle >= window.as_millis() as u64;
        if due {
            conn.set_due(true);
        }
        due
    }

    fn validation_failed(&self, conn: &mut Pooled<M>) {
        self.inner
            .counters
            .failed_validation
            .fetch_add(1, Ordering::Relaxed);
        conn.set_discard(Discard::Counted);
        self.lent_nothing(conn);
    }

    /// Takes back the borrow count of `conn`'s claim, and its wait if it waited: the
    /// connection, just claimed, is closed instead of lent (called once per claim, as it is
    /// marked to close). So `borrows` counts connections lent, and `waits` (borrows that
    /// waited and got a connection) never passes it. A wait already published to `metrics`
    /// stays there.
    #[cold]
    fn lent_nothing(&self, conn: &mut Pooled<M>) {
        let slot = &self.inner.core.slots[conn.slot()];
        // Read-modify-writes although the slot's owner writes these: a cold path, and one
        // that may run after a reclaim made the slot another's.
        slot.unlent.fetch_add(1, Ordering::Relaxed);
        if let Some(bucket) = conn.take_waited() {
            slot.wait_buckets[usize::from(bucket)].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Borrows a slot, without validation, waiting until `deadline` (set on the first wait).
    /// `scanned`: the caller has just found no idle slot, so it queues without looking again
    /// (unless the queue is full: `get`'s first try skips its scan while a waiter starves, and
    /// "full" is said only after a scan found no idle connection).
    async fn claim(&self, deadline: &mut Deadline, scanned: bool) -> Result<Pooled<M>, PoolError> {
        let inner = &self.inner;
        if !scanned && let Some(o) = inner.core.try_claim() {
            return Ok(self.lend(o));
        }
        // Acquire: pairs with the opener guard's Release store.
        if inner.runtime_gone.load(Ordering::Acquire) {
            return Err(runtime_gone());
        }
        let start = WAIT_CLOCK.raw();
        let deadline = deadline.on_runtime_clock(inner.config.borrow_timeout);
        // A task on another runtime keeps its deadline with a timer of its own there, as
        // every wait did before the deadline task: that task runs only while the pool's
        // runtime runs its tasks, which a current-thread runtime does only inside `block_on`,
        // and a borrow waiting meanwhile hung past its timeout (`tests/attack_deadlines.rs`).
        // Outside any runtime (another executor) there is no timer to arm: the deadline task
        // keeps it.
        let own_timer = match tokio::runtime::Handle::try_current() {
            Ok(here) if here.id() != inner.runtime.id() => deadline,
            _ => None,
        };
        // It checks for room (`max_waiters`) as it queues, under the queue's lock, and wakes
        // the opener once queued, where the opener looks for waiters. On the pool's runtime
        // its deadline arms no timer: the pool's deadline task wakes it (and is told when it
        // must look sooner).
        let wake = |sooner: bool| {
            self.wake_opener_if_useful();
            if sooner {
                inner.deadlines.notify_one();
            }
        };
        let wait = Wait::new(&inner.core, inner.config.max_waiters)
            .until(deadline.filter(|_| own_timer.is_none()))
            .on_queued(&wake);
        let mut wait = std::pin::pin!(wait);
        // A wait on another runtime outlives the pool's: the deadline task that would end it
        // is gone, and wakes every waiter as it goes, to read this flag. Acquire: pairs with
        // `RuntimeGone`'s Release store.
        let waited = std::future::poll_fn(|cx| match wait.as_mut().poll(cx) {
            Poll::Pending if inner.runtime_gone.load(Ordering::Acquire) => Poll::Ready(None),
            polled => polled.map(Some),
        });
        let waited = match own_timer {
            None => waited.await,
            // Dropped when the timer fires, the wait gives up its place and passes on a
            // connection handed to it meanwhile.
            Some(d) => tokio::time::timeout_at(d.into(), waited)
                .await
                .unwrap_or(Some(Err(Refused::TimedOut))),
        };
        let Some(waited) = waited else {
            return Err(runtime_gone());
        };
        match waited {
            Ok(o) => {
                let bucket = self.waited(start, &o);
                let mut conn = self.lend(o);
                conn.set_waited(bucket);
                Ok(conn)
            }
            Err(Refused::Full(waiting)) => {
                // "Full" only after a scan found no idle connection: `get`'s first try skips
                // its scan while a waiter starves.
                if scanned && let Some(o) = inner.core.try_claim() {
                    return Ok(self.lend(o));
                }
                Err(self.full_error(waiting))
            }
            Err(Refused::TimedOut) => Err(self.timeout_error()),
        }
    }

    /// Borrows a connection on a thread that may block (not an async task), waiting up to the
    /// borrow timeout. A connection due for validation is validated on the pool's runtime
    /// while this thread waits. Called from a task of that runtime (do not: it blocks the
    /// worker), such a validation may never run: the borrow then fails with
    /// [`PoolError::Config`] a second after the validation's bound instead of hanging.
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
    #[inline(always)]
    pub fn get_blocking(&self) -> Result<Pooled<M>, PoolError> {
        // As in `get`: the fast path inlined into the caller, where the guard stays in
        // registers; the rest out of line.
        if let Some(mut conn) = self.inner.core.try_claim_blocking().map(|o| self.lend(o))
            && self.lendable(&mut conn)
        {
            return Ok(conn);
        }
        self.get_blocking_waiting()
    }

    /// The rest of [`Pool::get_blocking`]: claims, waiting as needed, and validates.
    #[inline(never)]
    fn get_blocking_waiting(&self) -> Result<Pooled<M>, PoolError> {
        let mut deadline = Deadline::Unset;
        loop {
            let mut conn = self.claim_blocking(&mut deadline)?;
            if !self.still_open(&mut conn) {
                continue;
            }
            if !self.needs_validation(&mut conn) {
                return Ok(conn);
            }
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let pool = self.clone();
            // Bounded as an async borrow's validation is (`Pool::validated`): `None`, it did
            // not end in time.
            let (until, borrow_ends) = self.validation_bound(&mut deadline, Instant::now());
            self.inner.runtime.spawn(async move {
                let mut conn = conn;
                let validation = pool.inner.manager.validate(&mut conn);
                let ok = tokio::time::timeout_at(until.into(), validation).await.ok();
                let _ = tx.send((conn, ok));
            });
            let answer = if self.inside_runtime() {
                // Called from a task of the pool's own runtime (which the docs forbid), this
                // thread may be the one that would run the validation: a current-thread
                // runtime's only thread, or a worker whose LIFO slot the task went to, which
                // no other worker steals. Bounded, as `PgPool::get_blocking` is there; the
                // connection goes back still due whenever the task runs.
                let limit = until
                    .saturating_duration_since(Instant::now())
                    .saturating_add(INSIDE_SLACK);
                match rx.recv_timeout(limit) {
                    Ok(answer) => Ok(answer),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(()),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        return Err(PoolError::Config(format!(
                            "get_blocking had no answer from the pool's runtime within \
                             {limit:?} while it validated a connection; it was called inside \
                             that runtime, where it can block the thread that would answer: \
                             use `pool.get().await` there"
                        )));
                    }
                }
            } else {
                rx.recv().map_err(drop)
            };
            match answer {
                Ok((mut conn, Some(true))) => {
                    conn.set_due(false);
                    return Ok(conn);
                }
                Ok((mut conn, Some(false))) => self.validation_failed(&mut conn),
                Ok((mut conn, None)) if !borrow_ends => self.validation_failed(&mut conn),
                Ok((mut conn, None)) => {
                    self.validation_failed(&mut conn);
                    return Err(self.timeout_error());
                }
                // The runtime is gone (the connection went back with the dropped task).
                Err(_) => return Err(runtime_gone()),
            }
        }
    }

    /// Whether the calling thread is in the pool's own runtime.
    fn inside_runtime(&self) -> bool {
        tokio::runtime::Handle::try_current().is_ok_and(|here| here.id() == self.inner.runtime.id())
    }

    fn claim_blocking(&self, deadline: &mut Deadline) -> Result<Pooled<M>, PoolError> {
        let inner = &self.inner;
        if let Some(o) = inner.core.try_claim_blocking() {
            return Ok(self.lend(o));
        }
        // Acquire: as in `claim`.
        if inner.runtime_gone.load(Ordering::Acquire) {
            return Err(runtime_gone());
        }
        let start = WAIT_CLOCK.raw();
        let deadline = deadline.from(inner.config.borrow_timeout);
        // A thread's deadline is its own park's: the deadline task is never told.
        let wake = |_sooner: bool| self.wake_opener_if_useful();
        match claim_blocking(&inner.core, deadline, inner.config.max_waiters, &wake) {
            Ok(o) => {
                let bucket = self.waited(start, &o);
                let mut conn = self.lend(o);
                conn.set_waited(bucket);
                Ok(conn)
            }
            Err(Refused::TimedOut) => Err(self.timeout_error()),
            Err(Refused::Full(waiting)) => Err(self.full_error(waiting)),
        }
    }

    /// [`Pool::try_get`] for `get`'s first try: none while a waiter starves (it queues).
    #[inline]
    pub(crate) fn try_get_unless_starving(&self) -> Option<Pooled<M>> {
        self.inner
            .core
            .try_claim_unless_starving()
            .map(|o| self.lend(o))
    }

    /// Borrows an idle connection if there is one, without waiting (and without validation).
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
    /// assert!(pool.try_get().is_none()); // nothing open yet, and it does not wait for a connect
    /// drop(pool.get().await?);
    /// assert_eq!(pool.try_get().as_deref(), Some(&1)); // the idle one
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn try_get(&self) -> Option<Pooled<M>> {
        // Each connection found closed is closed as it drops, so this ends.
        loop {
            let mut conn = self.inner.core.try_claim().map(|o| self.lend(o))?;
            if self.still_open(&mut conn) {
                return Some(conn);
            }
        }
    }

    /// Changes the pool's maximum size at run time, up to its resize limit
    /// ([`Builder::resize_limit`]); returns the size set. Growing lets the opener open more as
    /// borrowers wait; shrinking closes idle connections above the new size at once and lent
    /// ones as they return. `min_size` is lowered with it if needed.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(4).build();
    /// assert_eq!(pool.resize(16), 16);
    /// assert_eq!(pool.stats().max_size, 16);
    /// # }
    /// ```
    pub fn resize(&self, max_size: usize) -> usize {
        let size = max_size.min(self.inner.config.resize_limit);
        self.inner.core.limit.store(size, Ordering::Relaxed);
        self.inner.shed_above_limit();
        self.inner.opener.notify_one();
        size
    }

    /// Closes every connection: idle ones at once (by the pool's task), lent ones when they
    /// are returned. New ones open as needed (HikariCP's soft eviction), e.g. after a failover
    /// or a credentials change.
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
    /// let conn = pool.get().await?;
    /// pool.evict();
    /// drop(conn); // closed, not kept
    /// assert_eq!(pool.stats().retired, 1);
    /// # Ok(()) }
    /// ```
    pub fn evict(&self) {
        self.inner.generation.fetch_add(1, Ordering::Relaxed);
        self.inner.opener.notify_one();
    }

    /// Changes the number of connections kept open even when idle (clamped to the maximum).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(4).build();
    /// pool.set_min_size(2);
    /// assert_eq!(pool.stats().min_size, 2);
    /// pool.set_min_size(100);
    /// assert_eq!(pool.stats().min_size, 4);
    /// # }
    /// ```
    pub fn set_min_size(&self, min_size: usize) {
        self.inner.min_size.store(min_size, Ordering::Relaxed);
        self.inner.opener.notify_one();
    }

    /// Connections open now and connects under way: what this pool may hold on its server
    /// a moment from now, for a multi-server pool's share of `max_size`.
    pub(crate) fn held_count(&self) -> usize {
        self.inner.held.load(Ordering::Acquire)
    }

    /// The current maximum size (as [`Pool::stats`] reports it).
    pub(crate) fn max_size(&self) -> usize {
        self.inner.core.limit()
    }

    /// What the pool has done so far and holds now.
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
    /// let conn = pool.get().await?;
    /// let s = pool.stats();
    /// assert_eq!((s.open, s.borrowed, s.idle, s.borrows), (1, 1, 0, 1));
    /// drop(conn);
    /// assert_eq!(pool.stats().idle, 1);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> Stats {
        Self::stats_of(&self.inner)
    }

    pub(crate) fn stats_of(inner: &Inner<M>) -> Stats {
        let c = &inner.counters;
        let core = &inner.core;
        let (mut idle, mut borrowed) = (0, 0);
        for slot in core.slots.iter() {
            match slot.state.load(Ordering::Relaxed) {
                IDLE => idle += 1,
                BORROWED => borrowed += 1,
                _ => {}
            }
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let wait_histogram_us: Vec<u64> = (0..WAIT_BUCKETS)
            .map(|k| core.slots.iter().map(|s| load(&s.wait_buckets[k])).sum())
            .collect();
        Stats {
            max_size: core.limit(),
            min_size: inner.min_size(),
            open: inner.open.load(Ordering::Relaxed),
            idle,
            borrowed,
            waiting: core.q.count(Ordering::Relaxed),
            borrows: core.slots.iter().map(|s| s.lends()).sum(),
            waits: wait_histogram_us.iter().sum(),
            timeouts: load(&c.timeouts),
            rejected: load(&c.rejected),
            opened: load(&c.opened),
            connect_failures: load(&c.connect_failures),
            closed_broken: load(&c.closed_broken),
            failed_validation: load(&c.failed_validation),
            retired: load(&c.retired),
            idle_closed: load(&c.idle_closed),
            resized_away: load(&c.resized_away),
            reclaimed_abandoned: load(&c.reclaimed_abandoned),
            reclaimed_ttl: load(&c.reclaimed_ttl),
            resets: load(&c.resets),
            failed_resets: load(&c.failed_resets),
            label_configures: load(&c.label_configures),
            label_closes: load(&c.label_closes),
            leaks_suspected: load(&c.leaks_suspected),
            wait_histogram_us,
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
    ///     println!("slot {}: {} borrows, {:?} old, {:?} lent in all, busy: {}",
    ///         c.slot, c.borrows, c.age, c.busy_total, c.borrowed);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let now = self.inner.now();
        let ms = |t: u64| Duration::from_millis(now.saturating_sub(t));
        let core = &self.inner.core;
        core.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let state = s.state.load(Ordering::Acquire);
                if state != IDLE && state != BORROWED {
                    return None;
                }
                let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
                Some(ConnectionInfo {
                    slot: i,
                    borrowed: state == BORROWED,
                    borrows: s.lends().saturating_sub(load(&s.lends_before_open)),
                    age: ms(load(&s.opened_ms)),
                    since_borrowed: ms(load(&s.borrowed_ms)),
                    since_active: ms(load(&s.active_ms)),
                    since_returned: ms(load(&s.returned_ms)),
                    busy_total: Duration::from_millis(load(&s.busy_ms)),
                    labels: self.inner.attachments[i].labels(),
                })
            })
            .collect()
    }

    /// Lends owned slot `i`: takes its connection out and stamps the borrow.
    // Always inlined: with the leak note's call in it (cold, out of line), LLVM stopped
    // inlining it into `get`, which cost 10 ns of a 39 ns uncontended borrow (criterion).
    #[inline(always)]
    fn lend(&self, o: Owned) -> Pooled<M> {
        let i = o.index();
        let slot = &self.inner.core.slots[i];
        let held = self
            .inner
            .core
            .conn(&o, Option::take)
            .expect("an idle slot holds its connection");
        let now = self.inner.now();
        // Only the owner writes these: plain loads and stores, no read-modify-write.
        let borrow = slot.borrows.load(Ordering::Relaxed) + 1;
        slot.borrows.store(borrow, Ordering::Relaxed);
        slot.borrowed_ms.store(now, Ordering::Relaxed);
        slot.active_ms.store(now, Ordering::Relaxed);
        if self.inner.watches_leaks {
            self.inner.attachments[i].borrow_site.note(borrow);
        }
        let lent = if self.inner.reclaims {
            Lent::Leased(self.inner.core.begin_lease(o))
        } else {
            Lent::Owned(o)
        };
        Pooled::new(crate::local_ref::take(&self.inner), held, lent)
    }

    /// Wakes the opener when a waiting borrower could use another connection; with every
    /// connection open there is nothing for it to do, and waking it costs a lock.
    fn wake_opener_if_useful(&self) {
        if self.inner.open.load(Ordering::Relaxed) < self.inner.core.limit() {
            self.inner.opener.notify_one();
        }
    }

    /// A borrow refused a place in the queue: `waiting` borrowers were queued already.
    fn full_error(&self, waiting: usize) -> PoolError {
        self.inner.counters.rejected.fetch_add(1, Ordering::Relaxed);
        PoolError::Full {
            waiting,
            max_waiters: self.inner.config.max_waiters,
        }
    }

    /// Records a borrow that waited from `start` and got owned slot `o`: in the slot's own
    /// histogram (written by its owner only, so a wait touches no counter that the other
    /// workers write: a shared one cost a contended read-modify-write per wait, measured in
    /// docs/benchmarks.md, pool-scaling). Returns the bucket.
    fn waited(&self, start: u64, o: &Owned) -> u8 {
        let clock = &*WAIT_CLOCK;
        let waited = clock.delta(start, clock.raw());
        if let Some(published) = &self.inner.published {
            published.record_wait(waited);
        }
        let us = waited.as_micros().max(1) as u64;
        let bucket = (63 - us.leading_zeros() as usize).min(WAIT_BUCKETS - 1);
        let count = &self.inner.core.slots[o.index()].wait_buckets[bucket];
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        bucket as u8
    }

    pub(crate) fn timeout_error(&self) -> PoolError {
        self.timeout_error_after(self.inner.config.borrow_timeout)
    }

    /// [`PoolError::Timeout`] for a wait of `waited`.
    fn timeout_error_after(&self, waited: Duration) -> PoolError {
        self.inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        PoolError::Timeout {
            waited,
            open: self.inner.open.load(Ordering::Relaxed),
            max_size: self.inner.core.limit(),
            last_connect_error: self
                .inner
                .last_connect_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            server: None,
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

/// How many connections a labeled borrow tries [`Labeling::configure`] on before it fails with
/// [`PoolError::Labeling`]: a second, so one connection in a bad state does not fail the borrow.
const CONFIGURE_TRIES: u32 = 2;

/// How much longer than its validation's own bound a `get_blocking` called inside the pool's
/// runtime waits for the validation's answer before giving up with an error (as
/// `PgPool::get_blocking` waits its borrow timeout and a second there): room for a runtime
/// that is merely busy to answer.
const INSIDE_SLACK: Duration = Duration::from_secs(1);

/// Times the waits for the wait histogram: the CPU's counter where it is invariant (about
/// 10 ns a read here, where `Instant::now` costs 25: two reads per wait were 0.3% of a borrow
/// held 10 µs; docs/benchmarks.md, pool-scaling), else the monotonic clock. One per process,
/// not a field of the pool's `Inner`: its calibration is per process anyway, and a field would
/// move the hot ones. Calibrated (about 0.6 ms) when the first pool is built.
static WAIT_CLOCK: std::sync::LazyLock<quanta::Clock> =
    std::sync::LazyLock::new(quanta::Clock::new);

/// When a borrow gives up: fixed when it first has to wait, so a borrow served at once never
/// reads the clock, and one that waits more than once (after a failed validation) keeps its
/// first deadline.
#[derive(Clone, Copy)]
enum Deadline {
    Unset,
    At(Option<Instant>),
}

/// The shortest `validation_timeout` taken (HikariCP's least `validationTimeout`).
pub(crate) const MIN_VALIDATION_TIMEOUT: Duration = Duration::from_millis(250);

/// What a borrow that must wait on a pool whose runtime has shut down says (a `PgPool`'s too).
pub(crate) fn runtime_gone() -> PoolError {
    PoolError::Config(
        "the runtime the pool was built on has shut down; build the pool on a runtime \
         that outlives its borrowers"
            .to_string(),
    )
}

/// The most connections a pool is built for (a `PgPool`: across its servers). A larger
/// `max_size` or `resize_limit` is taken as this: each is a slot allocated at build, and
/// PostgreSQL itself serves a few thousand.
pub(crate) const MAX_CONNECTIONS: usize = 1 << 16;

/// Stands for "no time limit" where an `Instant` is needed: about 30 years.
const FAR_OFF: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

impl Deadline {
    /// The deadline, setting it to now + `timeout` if unset (`None`: no timeout, and no
    /// clock read for `Duration::MAX`). A timeout past the end of the clock's range
    /// (`Duration::from_secs(u64::MAX)`, another way to write "for ever") is none too: added
    /// unchecked, it panicked every borrow that waited (`tests/attack_huge_timeouts.rs`).
    fn from(&mut self, timeout: Duration) -> Option<Instant> {
        self.on_clock(timeout, Instant::now)
    }

    /// [`Deadline::from`] on tokio's clock, for an async wait, whose deadline the pool's
    /// deadline task keeps on that clock: in a test that pauses it, the wait then lasts its
    /// timeout in paused time, as a tokio timeout does (`tests/attack_paused_clock.rs`).
    fn on_runtime_clock(&mut self, timeout: Duration) -> Option<Instant> {
        self.on_clock(timeout, runtime_now)
    }

    fn on_clock(&mut self, timeout: Duration, now: impl FnOnce() -> Instant) -> Option<Instant> {
        if let Deadline::Unset = self {
            *self = Deadline::At(
                (timeout != Duration::MAX)
                    .then(now)
                    .and_then(|now| now.checked_add(timeout)),
            );
        }
        match *self {
            Deadline::At(d) => d,
            Deadline::Unset => None,
        }
    }
}

/// Now on tokio's clock, as a std `Instant`: the clock of async borrows' deadlines, which the
/// deadline task keeps with tokio's timer, so that a test that pauses it (`start_paused`)
/// sees them pass as its own timers do.
pub(crate) fn runtime_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// One open connection's attributes; see [`Pool::connections`].
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
/// let conn = pool.get().await?;
/// let info = &pool.connections()[0];
/// assert!(info.borrowed && info.labels.is_empty());
/// assert_eq!(info.borrows, 1);
/// # drop(conn); Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// Its slot in the pool.
    pub slot: usize,
    /// Lent out now.
    pub borrowed: bool,
    /// Times it was lent (this connection, not others before it in its slot).
    pub borrows: u64,
    /// Time since it was opened.
    pub age: Duration,
    /// Time since it was last lent.
    pub since_borrowed: Duration,
    /// Time since its holder last used it (dereferenced the [`Pooled`] guard), or since it
    /// was lent.
    pub since_active: Duration,
    /// Time since it was last returned (or opened): how long it has been idle, if it is.
    pub since_returned: Duration,
    /// Time spent lent out, over all its borrows (up to its last return).
    pub busy_total: Duration,
    /// Its labels ([`Pool::get_labeled`]).
    pub labels: Arc<Labels>,
}
