//! A pool's counters.

/// What a pool has done so far and holds now; see [`crate::Pool::stats`].
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
/// let s = pool.stats();
/// println!("{} of {} open, {} idle, {} waiting", s.open, s.max_size, s.idle, s.waiting);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// The most connections the pool opens (now: see [`crate::Pool::resize`]).
    pub max_size: usize,
    /// Connections kept open even when idle.
    pub min_size: usize,
    /// Connections open now.
    pub open: usize,
    /// Of those, idle.
    pub idle: usize,
    /// Of those, borrowed: lent out, or back from a borrower and still in the manager's
    /// return (a `PgManager` reset's rollback), which is not idle until it ends (as
    /// HikariCP's active count includes a connection being reset in its `close()`).
    pub borrowed: usize,
    /// Borrowers waiting now.
    pub waiting: usize,
    /// Borrows so far: connections lent. A connection a borrow claimed and closed instead
    /// (found closed, failing validation, not relabeled) counts in `failed_validation`,
    /// `label_closes` or `closed_broken`, not here.
    pub borrows: u64,
    /// Borrows that had to wait.
    pub waits: u64,
    /// Borrows that timed out.
    pub timeouts: u64,
    /// Borrows rejected because too many were waiting.
    pub rejected: u64,
    /// Connections opened.
    pub opened: u64,
    /// Failed attempts to open one.
    pub connect_failures: u64,
    /// Connections closed on return because the manager said they were broken (or its code
    /// panicked during the return).
    pub closed_broken: u64,
    /// Idle connections that failed validation before a borrow, or that the manager found
    /// closed by their server while idle ([`crate::Manager::closed_while_idle`]); each was
    /// closed, not lent.
    pub failed_validation: u64,
    /// Connections closed because they reached their maximum lifetime.
    pub retired: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// Connections closed because the pool was resized below their slot.
    pub resized_away: u64,
    /// Lent connections reclaimed after the abandoned timeout.
    pub reclaimed_abandoned: u64,
    /// Lent connections reclaimed after the time-to-live.
    pub reclaimed_ttl: u64,
    /// Returned connections reset ([`crate::Manager::reset`]) before being lent again.
    pub resets: u64,
    /// Resets that failed, panicked or were cut off by the runtime's shutdown (the connection
    /// was closed).
    pub failed_resets: u64,
    /// Labeled borrows that configured the connection they got.
    pub label_configures: u64,
    /// Connections closed because they were too costly for a labeled borrow.
    pub label_closes: u64,
    /// Borrows reported as possible leaks (lent past [`Config::leak_warning`](crate::Config)).
    pub leaks_suspected: u64,
    /// Borrows that waited, by wait: entry k counts waits of 2^k to 2^(k+1) microseconds.
    pub wait_histogram_us: Vec<u64>,
}
