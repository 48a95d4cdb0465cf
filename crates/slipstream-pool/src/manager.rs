//! What a pool needs from its connection type: opening, checking, resetting and aborting one.

use std::future::Future;
use std::pin::Pin;

/// Closes a lent connection from outside its holder; see [`Manager::abort_handle`]. Called at
/// most once, with the reason the holder will be told.
pub type AbortFn = Box<dyn FnOnce(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Opens, checks and closes the connections of one pool.
///
/// Only [`Manager::connect`] is required; the other methods have defaults that suit a
/// connection with nothing to check.
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
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use slipstream_pool::{Manager, Pool};
    /// /// Connections numbered in the order they open.
    /// struct Counter(AtomicU64);
    /// impl Manager for Counter {
    ///     type Connection = u64;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<u64, std::io::Error> {
    ///         Ok(self.0.fetch_add(1, Ordering::Relaxed))
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Counter(AtomicU64::new(0))).min_size(2).build_ready().await?;
    /// assert_eq!(pool.stats().opened, 2);
    /// # Ok(()) }
    /// ```
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, Self::Error>> + Send;

    /// True if a returned connection must be closed instead of lent again (e.g. its socket
    /// failed). Called on every return, so it must be cheap and must not block.
    ///
    /// ```
    /// use slipstream_pool::{Manager, Pool};
    /// struct Sockets;
    /// impl Manager for Sockets {
    ///     type Connection = Option<u64>; // None: the socket failed
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<Option<u64>, std::io::Error> { Ok(Some(1)) }
    ///     fn is_broken(&self, conn: &Option<u64>) -> bool {
    ///         conn.is_none()
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Sockets).build();
    /// let mut conn = pool.get().await?;
    /// *conn = None; // it broke while lent
    /// drop(conn);
    /// assert_eq!((pool.stats().closed_broken, pool.stats().open), (1, 0));
    /// # Ok(()) }
    /// ```
    fn is_broken(&self, _conn: &Self::Connection) -> bool {
        false
    }

    /// True if a returned connection must go through [`Manager::reset`] before it is lent
    /// again (e.g. it was returned inside a transaction). Called on every return after
    /// [`Manager::is_broken`]; cheap, never blocking.
    ///
    /// ```
    /// use slipstream_pool::{Manager, Pool};
    /// /// A connection's "open transaction" flag.
    /// struct Sessions;
    /// impl Manager for Sessions {
    ///     type Connection = bool;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<bool, std::io::Error> { Ok(false) }
    ///     fn needs_reset(&self, in_transaction: &bool) -> bool {
    ///         *in_transaction
    ///     }
    ///     async fn reset(&self, in_transaction: &mut bool) -> bool {
    ///         *in_transaction = false; // "ROLLBACK"
    ///         true
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Sessions).max_size(1).build();
    /// drop(pool.get().await?); // clean: back at once, no reset
    /// *pool.get().await? = true; // returned inside a transaction
    /// assert!(!*pool.get().await?); // the next borrower gets it rolled back
    /// assert_eq!(pool.stats().resets, 1);
    /// # Ok(()) }
    /// ```
    fn needs_reset(&self, _conn: &Self::Connection) -> bool {
        false
    }

    /// Forgets what the borrower left in the connection object itself that must not reach
    /// the next borrower, whatever the server's session keeps (a callback it installed, data
    /// received for it and not taken). Called on every return of a connection that goes back
    /// into service, before [`Manager::needs_reset`], so with or without a reset; cheap, never
    /// blocking. Default: nothing. [`crate::PgManager`] drops the notice handler and the
    /// unread notifications (`Client::clear_client_state`): until helper h79 only its session
    /// reset did, so under the default rollback reset one borrower's handler got the next
    /// borrower's notices (`tests/attack_pg_client_state.rs`).
    ///
    /// ```
    /// use slipstream_pool::{Manager, Pool};
    /// /// A connection with a scratch buffer its borrower may fill.
    /// struct Buffers;
    /// impl Manager for Buffers {
    ///     type Connection = Vec<u8>;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<Vec<u8>, std::io::Error> { Ok(Vec::new()) }
    ///     fn returned(&self, buffer: &mut Vec<u8>) {
    ///         buffer.clear();
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Buffers).max_size(1).build();
    /// pool.get().await?.extend_from_slice(b"mine");
    /// assert!(pool.get().await?.is_empty()); // the next borrower sees none of it
    /// # Ok(()) }
    /// ```
    fn returned(&self, _conn: &mut Self::Connection) {}

    /// Puts a returned connection back into a clean state; runs on the pool's runtime, not in
    /// the returner's drop. `false` closes the connection.
    ///
    /// ```
    /// use slipstream_pool::{Manager, Pool};
    /// /// A connection's count of session settings made by its borrower.
    /// struct Sessions;
    /// impl Manager for Sessions {
    ///     type Connection = u32;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<u32, std::io::Error> { Ok(0) }
    ///     fn needs_reset(&self, settings: &u32) -> bool { *settings > 0 }
    ///     async fn reset(&self, settings: &mut u32) -> bool {
    ///         *settings = 0; // "RESET ALL"; `false` would close the connection instead
    ///         true
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Sessions).max_size(1).build();
    /// *pool.get().await? += 3;
    /// assert_eq!(*pool.get().await?, 0);
    /// # Ok(()) }
    /// ```
    fn reset(&self, _conn: &mut Self::Connection) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }

    /// Whether a connection still has the set-up its labels describe ([`crate::Pool::get_labeled`],
    /// [`crate::Pooled::set_labels`]) after a [`Manager::reset`] that succeeded. `false` (the
    /// default): the pool clears the labels of every connection it resets, so a reset that
    /// undoes a session's set-up (as `RESET ALL` does a `SET search_path`) never leaves a
    /// label on a connection no longer set up that way; the next labeled borrow configures it
    /// again. Say `true` only if the reset leaves whatever a labeling configures in place,
    /// including set-up made inside a transaction that the reset rolls back
    /// ([`crate::PgManager`] says `false` for its rollback reset too).
    ///
    /// ```
    /// use slipstream_pool::Manager;
    /// /// A reset that only rolls back: a labeling's `SET search_path` survives it.
    /// struct RollbackOnly;
    /// impl Manager for RollbackOnly {
    ///     type Connection = bool;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<bool, std::io::Error> { Ok(false) }
    ///     fn needs_reset(&self, in_transaction: &bool) -> bool { *in_transaction }
    ///     async fn reset(&self, in_transaction: &mut bool) -> bool {
    ///         *in_transaction = false;
    ///         true
    ///     }
    ///     fn reset_keeps_labels(&self) -> bool {
    ///         true
    ///     }
    /// }
    /// # assert!(RollbackOnly.reset_keeps_labels());
    /// ```
    fn reset_keeps_labels(&self) -> bool {
        false
    }

    /// A look at an idle connection about to be lent, without waiting: `true` if it is
    /// closed (its server ended it while it sat idle), and the pool then closes it and the
    /// borrow takes another. Called on every borrow of an idle connection, before
    /// [`Manager::validate`], so it must be cheap and must not block; once it says `true` for
    /// a connection the pool never asks again about it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use slipstream_pool::{Manager, Pool};
    /// /// The connection's "server hung up" flag, set from outside (as a socket's EOF would be).
    /// struct Watched;
    /// impl Manager for Watched {
    ///     type Connection = Arc<AtomicBool>;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<Arc<AtomicBool>, std::io::Error> { Ok(Default::default()) }
    ///     fn closed_while_idle(&self, hung_up: &mut Arc<AtomicBool>) -> bool {
    ///         hung_up.load(Ordering::Relaxed)
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Watched).build();
    /// let conn = pool.get().await?;
    /// let flag = Arc::clone(&conn);
    /// drop(conn);
    /// flag.store(true, Ordering::Relaxed); // the server ended it while it sat idle
    /// let fresh = pool.get().await?;
    /// assert!(!fresh.load(Ordering::Relaxed));
    /// assert_eq!(pool.stats().failed_validation, 1);
    /// # Ok(()) }
    /// ```
    fn closed_while_idle(&self, _conn: &mut Self::Connection) -> bool {
        false
    }

    /// Checks a connection that sat idle longer than the pool's trust window
    /// ([`crate::Builder::validate_after`]) before it is lent (e.g. a round trip to the
    /// server). `false` closes it and the borrow takes another.
    ///
    /// ```
    /// use slipstream_pool::{Manager, Pool};
    /// /// Connections numbered by the opener; "the server" has forgotten the first.
    /// struct Checked;
    /// impl Manager for Checked {
    ///     type Connection = u64;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<u64, std::io::Error> {
    ///         static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    ///         Ok(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    ///     }
    ///     async fn validate(&self, conn: &mut u64) -> bool {
    ///         *conn != 0 // with PostgreSQL: a round trip, e.g. an empty query
    ///     }
    /// }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = Pool::builder(Checked)
    ///     .validate_after(std::time::Duration::ZERO) // check every idle connection lent
    ///     .build();
    /// drop(pool.get().await?);
    /// assert_eq!(*pool.get().await?, 1); // connection 0 failed its check and was closed
    /// assert_eq!(pool.stats().failed_validation, 1);
    /// # Ok(()) }
    /// ```
    fn validate(&self, _conn: &mut Self::Connection) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }

    /// A way to close `conn` while someone else holds it, used when the pool reclaims a
    /// connection borrowed too long ([`crate::Builder::abandoned_timeout`],
    /// [`crate::Builder::time_to_live`]). Asked once per connection, right after it opens.
    /// `None` (the default): a reclaimed connection is only taken out of the pool's count, and
    /// its holder can go on using it until it returns it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use slipstream_pool::{AbortFn, Manager};
    /// /// A connection with a shared "closed" flag: aborting sets it, and its holder's next use fails.
    /// struct Abortable;
    /// impl Manager for Abortable {
    ///     type Connection = Arc<AtomicBool>;
    ///     type Error = std::io::Error;
    ///     async fn connect(&self) -> Result<Arc<AtomicBool>, std::io::Error> { Ok(Default::default()) }
    ///     fn abort_handle(&self, conn: &Arc<AtomicBool>) -> Option<AbortFn> {
    ///         let closed = Arc::clone(conn);
    ///         Some(Box::new(move |why: String| {
    ///             Box::pin(async move {
    ///                 eprintln!("reclaimed: {why}");
    ///                 closed.store(true, Ordering::Relaxed);
    ///             })
    ///         }))
    ///     }
    /// }
    /// # let conn = Arc::new(AtomicBool::new(false));
    /// # let abort = Abortable.abort_handle(&conn).unwrap();
    /// # tokio::runtime::Runtime::new().unwrap().block_on(abort("time to live".into()));
    /// # assert!(conn.load(Ordering::Relaxed));
    /// ```
    fn abort_handle(&self, _conn: &Self::Connection) -> Option<AbortFn> {
        None
    }
}
