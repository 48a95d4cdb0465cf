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
    /// The most connections the pool opens.
    pub max_size: usize,
    /// Connections open now.
    pub open: usize,
    /// Of those, idle.
    pub idle: usize,
    /// Of those, borrowed.
    pub borrowed: usize,
    /// Borrowers waiting now.
    pub waiting: usize,
    /// Borrows so far.
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
    /// Connections closed on return because the manager said they were broken.
    pub closed_broken: u64,
    /// Idle connections that failed validation before a borrow (and were closed).
    pub failed_validation: u64,
    /// Connections closed because they reached their maximum lifetime.
    pub retired: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// Borrows that waited, by wait: entry k counts waits of 2^k to 2^(k+1) microseconds.
    pub wait_histogram_us: Vec<u64>,
}
