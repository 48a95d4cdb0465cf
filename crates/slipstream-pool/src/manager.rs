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
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, Self::Error>> + Send;

    /// True if a returned connection must be closed instead of lent again (e.g. its socket
    /// failed). Called on every return, so it must be cheap and must not block.
    fn is_broken(&self, _conn: &Self::Connection) -> bool {
        false
    }

    /// True if a returned connection must go through [`Manager::reset`] before it is lent
    /// again (e.g. it was returned inside a transaction). Called on every return after
    /// [`Manager::is_broken`]; cheap, never blocking.
    fn needs_reset(&self, _conn: &Self::Connection) -> bool {
        false
    }

    /// Puts a returned connection back into a clean state; runs on the pool's runtime, not in
    /// the returner's drop. `false` closes the connection.
    fn reset(&self, _conn: &mut Self::Connection) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }

    /// Whether a connection still has the set-up its labels describe ([`crate::Pool::get_labeled`],
    /// [`crate::Pooled::set_labels`]) after a [`Manager::reset`] that succeeded. `false` (the
    /// default): the pool clears the labels of every connection it resets, so a reset that
    /// undoes a session's set-up (as `RESET ALL` does a `SET search_path`) never leaves a
    /// label on a connection no longer set up that way; the next labeled borrow configures it
    /// again. Say `true` only if the reset leaves whatever a labeling configures in place.
    fn reset_keeps_labels(&self) -> bool {
        false
    }

    /// A look at an idle connection about to be lent, without waiting: `true` if it is
    /// closed (its server ended it while it sat idle), and the pool then closes it and the
    /// borrow takes another. Called on every borrow of an idle connection, before
    /// [`Manager::validate`], so it must be cheap and must not block; once it says `true` for
    /// a connection the pool never asks again about it.
    fn closed_while_idle(&self, _conn: &mut Self::Connection) -> bool {
        false
    }

    /// Checks a connection that sat idle longer than the pool's trust window
    /// ([`crate::Builder::validate_after`]) before it is lent (e.g. a round trip to the
    /// server). `false` closes it and the borrow takes another.
    fn validate(&self, _conn: &mut Self::Connection) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }

    /// A way to close `conn` while someone else holds it, used when the pool reclaims a
    /// connection borrowed too long ([`crate::Builder::abandoned_timeout`],
    /// [`crate::Builder::time_to_live`]). Asked once per connection, right after it opens.
    /// `None` (the default): a reclaimed connection is only taken out of the pool's count, and
    /// its holder can go on using it until it returns it.
    fn abort_handle(&self, _conn: &Self::Connection) -> Option<AbortFn> {
        None
    }
}
