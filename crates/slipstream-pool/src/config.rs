//! A pool's settings and the builder that sets them.

use std::time::Duration;

use crate::Manager;
#[cfg(doc)]
use crate::{Pool, PoolError};

/// How a pool behaves. Build with [`Pool::builder`].
///
/// ```
/// use std::time::Duration;
/// let c = slipstream_pool::Config::default();
/// assert_eq!((c.max_size, c.min_size), (10, 0));
/// assert_eq!(c.borrow_timeout, Duration::from_secs(30));
/// assert_eq!((c.max_lifetime, c.idle_timeout), (None, None));
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// The most connections open at once (at most 65,536: more is taken as 65,536).
    pub max_size: usize,
    /// Connections kept open even when idle.
    pub min_size: usize,
    /// The most borrowers waiting at once; beyond it a borrow fails at once with
    /// [`PoolError::Full`] instead of queueing.
    pub max_waiters: usize,
    /// How long a borrow waits for a connection before failing with [`PoolError::Timeout`];
    /// `Duration::MAX` waits for ever. An async borrow's deadline on the pool's runtime arms
    /// no timer of its own: the pool's deadline task wakes it (docs/pool.md); one on another
    /// runtime arms one there.
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
    /// Connections idle longer than this are validated ([`Manager::validate`]) before a
    /// borrow gets them. `None`: never.
    pub validate_after: Option<Duration>,
    /// The longest one validation may take. One that takes longer fails: the connection is
    /// closed and the borrow goes on to another, within its own timeout.
    pub validation_timeout: Duration,
    /// A lent connection its holder has not used (dereferenced) for this long is reclaimed:
    /// aborted ([`Manager::abort_handle`]) and replaced. `None`: never.
    pub abandoned_timeout: Option<Duration>,
    /// A connection lent for longer than this is reclaimed, used or not. `None`: never.
    pub time_to_live: Option<Duration>,
    /// The largest `max_size` that [`Pool::resize`] may set: the pool's slot array is this
    /// long. 0 (the default) means `max_size.max(64)`. At most 65,536: more is taken as 65,536.
    pub resize_limit: usize,
    /// A lent connection held longer than this is reported once as a possible leak: a
    /// `tracing` WARN with the backtrace of the borrow (HikariCP's `leakDetectionThreshold`).
    /// Nothing is reclaimed. Costs one captured backtrace per borrow. `None` (the default):
    /// off.
    pub leak_warning: Option<Duration>,
    /// Publishes the pool's gauges, counters and borrow-wait histogram through the `metrics`
    /// crate with the label `pool` set to this name. `None` (the default): off.
    pub metrics_name: Option<String>,
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
            validation_timeout: Duration::from_secs(5),
            abandoned_timeout: None,
            time_to_live: None,
            resize_limit: 0,
            leak_warning: None,
            metrics_name: None,
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
    pub(crate) manager: M,
    pub(crate) config: Config,
    /// The server a [`PgPool`](crate::PgPool)'s sub-pool serves: its metrics' `server` label,
    /// and named by its leak warning.
    pub(crate) server: Option<String>,
}

impl<M: Manager> Builder<M> {
    /// The most connections open at once (default 10; at most 65,536, a larger size is taken
    /// as 65,536: the pool allocates a slot for each at build).
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
    /// assert_eq!(pool.stats().max_size, 4);
    /// # }
    /// ```
    pub fn max_size(mut self, n: usize) -> Self {
        self.config.max_size = n;
        self
    }
    /// Connections kept open even when idle (default 0). Above `max_size` it is taken as
    /// `max_size`, as HikariCP takes a `minimumIdle` above `maximumPoolSize` (r2d2 and bb8
    /// panic instead).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = slipstream_pool::Pool::builder(Numbers).min_size(2).build_ready().await?;
    /// assert_eq!(pool.stats().open, 2); // open before any borrow
    /// # Ok(()) }
    /// ```
    pub fn min_size(mut self, n: usize) -> Self {
        self.config.min_size = n;
        self
    }
    /// The most borrowers waiting at once (default 100,000).
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
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(1).min_size(1).max_waiters(0)
    ///     .build_ready().await?;
    /// let held = pool.get().await?;
    /// // No room to wait: refused at once rather than queued.
    /// assert!(matches!(pool.get().await, Err(PoolError::Full { .. })));
    /// # drop(held); Ok(()) }
    /// ```
    pub fn max_waiters(mut self, n: usize) -> Self {
        self.config.max_waiters = n;
        self
    }
    /// How long a borrow waits (default 30 s; `Duration::MAX`, or any time past the clock's
    /// range such as `Duration::from_secs(u64::MAX)`: for ever).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// use std::time::Duration;
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(1)
    ///     .borrow_timeout(Duration::from_millis(20)).build();
    /// let held = pool.get().await?;
    /// assert!(matches!(pool.get().await, Err(slipstream_pool::PoolError::Timeout { .. })));
    /// # drop(held); Ok(()) }
    /// ```
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
    /// // Two connections always open, others closed after ten idle minutes.
    /// let pool = slipstream_pool::Pool::builder(Numbers)
    ///     .min_size(2)
    ///     .idle_timeout(Duration::from_secs(600))
    ///     .build();
    /// # }
    /// ```
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.idle_timeout = Some(timeout);
        self
    }
    /// Validates a connection idle longer than `window` before lending it (default: never;
    /// blocking borrows run the check on the pool's runtime). With [`crate::PgManager`] that is one round trip, so a borrower after a
    /// server restart gets a working connection instead of a dead one. The check counts
    /// against the borrow timeout: a connection not validated by then is closed and the
    /// borrow fails with [`PoolError::Timeout`]. Each check is also bounded by
    /// [`Builder::validation_timeout`]. Idleness is read on the pool clock, which steps at
    /// least every 100 ms (or a tenth of the window) while this is set; a zero window
    /// validates every borrow.
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
    /// // A connection idle for more than 30 s is checked (Manager::validate) before it is lent.
    /// let pool = slipstream_pool::Pool::builder(Numbers)
    ///     .validate_after(Duration::from_secs(30))
    ///     .build();
    /// # }
    /// ```
    pub fn validate_after(mut self, window: Duration) -> Self {
        self.config.validate_after = Some(window);
        self
    }
    /// The longest one validation may take (default 5 s, HikariCP's `validationTimeout`). A
    /// connection not validated within it is closed as failed, and the borrow goes on to
    /// another connection within its own timeout, so a borrow that waits for ever
    /// (`borrow_timeout(Duration::MAX)`) is not held for ever by one server that stopped
    /// answering. Below 250 ms it is taken as 250 ms (HikariCP's least), as a bound shorter
    /// than a round trip would fail every validation.
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
    ///     .validate_after(Duration::from_secs(30))
    ///     .validation_timeout(Duration::from_secs(2))
    ///     .build();
    /// # }
    /// ```
    pub fn validation_timeout(mut self, timeout: Duration) -> Self {
        self.config.validation_timeout = timeout;
        self
    }
    /// Reclaims a lent connection its holder has not used for `timeout` (UCP's abandoned
    /// connection timeout; default: never). "Used" means dereferenced: a single statement
    /// running longer than `timeout` counts as unused, and so does the work done through a
    /// handle made from the guard (a `Transaction`, a pipeline, a row stream, a COPY), which
    /// dereferences it once: set it above your longest transaction or handle's life, not just
    /// your longest statement.
    /// The holder's next call fails with the reason (for [`crate::PgManager`]: the backend's
    /// statement is cancelled and the socket closed).
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
    ///     .abandoned_timeout(Duration::from_secs(60)) // forgotten in a drawer
    ///     .time_to_live(Duration::from_secs(600))     // held too long, busy or not
    ///     .build();
    /// # }
    /// ```
    pub fn abandoned_timeout(mut self, timeout: Duration) -> Self {
        self.config.abandoned_timeout = Some(timeout);
        self
    }
    /// Reclaims a connection lent for longer than `ttl`, busy or not (UCP's time-to-live
    /// connection timeout; default: never). Its holder's next call fails with the reason.
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
    /// // No borrow may keep its connection past ten minutes.
    /// let pool = slipstream_pool::Pool::builder(Numbers)
    ///     .time_to_live(Duration::from_secs(600))
    ///     .build();
    /// assert_eq!(pool.stats().reclaimed_ttl, 0);
    /// # }
    /// ```
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.config.time_to_live = Some(ttl);
        self
    }
    /// The largest size [`Pool::resize`] may set later (default: `max_size.max(64)`; at most
    /// 65,536, as `max_size`).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers).max_size(4).resize_limit(8).build();
    /// assert_eq!(pool.resize(100), 8); // clamped to the limit
    /// # }
    /// ```
    pub fn resize_limit(mut self, n: usize) -> Self {
        self.config.resize_limit = n;
        self
    }
    /// Reports a connection lent for longer than `threshold` as a possible leak, naming where
    /// it was borrowed (see [`Config::leak_warning`]).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// let pool = slipstream_pool::Pool::builder(Numbers)
    ///     .leak_warning(std::time::Duration::from_secs(10))
    ///     .build();
    /// assert_eq!(pool.stats().leaks_suspected, 0);
    /// # }
    /// ```
    pub fn leak_warning(mut self, threshold: Duration) -> Self {
        self.config.leak_warning = Some(threshold);
        self
    }
    /// Publishes the pool's metrics through the `metrics` crate, labelled `pool = name` (see
    /// docs/pool.md for the names). Install the recorder (exporter) before building the pool.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// // e.g. metrics_exporter_prometheus::PrometheusBuilder::new().install()?; first
    /// let pool = slipstream_pool::Pool::builder(Numbers).metrics("orders").build();
    /// # }
    /// ```
    pub fn metrics(mut self, name: &str) -> Self {
        self.config.metrics_name = Some(name.to_string());
        self
    }
    /// The shortest time between connection attempts (default 1 ms).
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
    /// // At most one connection attempt every 50 ms, however many borrowers arrive at once.
    /// let pool = slipstream_pool::Pool::builder(Numbers)
    ///     .connect_interval(Duration::from_millis(50))
    ///     .build();
    /// # }
    /// ```
    pub fn connect_interval(mut self, interval: Duration) -> Self {
        self.config.connect_interval = interval;
        self
    }
}
