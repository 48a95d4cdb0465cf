//! The PostgreSQL manager: slipstream-pg connections to one server.

use slipstream_pg::{Client, Config, Error, TransactionStatus};

use crate::{AbortFn, Manager};

/// What [`PgManager`] does to a connection returned to the pool before lending it again.
///
/// ```
/// use slipstream_pool::{PgManager, Reset};
/// assert_eq!(Reset::default(), Reset::Rollback);
/// let manager = PgManager::new("postgres://app@db/orders".parse()?).reset_on_return(Reset::None);
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Reset {
    /// Nothing; a connection returned inside a transaction, or with replies of a dropped call
    /// still owed (its transaction status unknown), is closed instead of lent again.
    None,
    /// Roll back a transaction left open (one round trip, only for such connections; the
    /// default). The labels of a connection rolled back are cleared, since the rollback may
    /// undo a `SET` their set-up made inside the transaction.
    #[default]
    Rollback,
    /// On every return: roll back, then `SET SESSION AUTHORIZATION DEFAULT; CLOSE ALL;
    /// RESET ALL; UNLISTEN *; SELECT
    /// pg_catalog.pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES` (one round trip). Prepared
    /// statements and their cached plans are kept, so the statement cache survives, unlike
    /// `DISCARD ALL` (which also runs `DEALLOCATE ALL` and `DISCARD PLANS`); so are
    /// those a borrower made with SQL `PREPARE name`, which the next borrower's `PREPARE` of
    /// the same name then fails on: `DEALLOCATE` them before returning the connection. Labels
    /// ([`crate::Pool::get_labeled`]) are cleared, since the reset undoes what their
    /// configure set: each labeled borrow configures again.
    Session,
}

/// How long a reset may take in all: the cancel request for a dropped call's statement, reading
/// the replies that call left owed, the `ROLLBACK` and the session reset. Each answers within a
/// round trip or two, so a connection still silent after this is closed rather than lent: its
/// server hung or the path to it was cut, and waiting for it held the slot, lent to no one,
/// for as long as the silence lasted (a cut path: the kernel's TCP timeout, minutes).
const RESET_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The session reset of [`Reset::Session`]: `DISCARD ALL` without `DEALLOCATE ALL` and
/// `DISCARD PLANS`, which would drop the statement cache's statements and their plans.
/// `RESET ALL` leaves a `SET ROLE` or `SET SESSION AUTHORIZATION` in place; `DISCARD ALL` does
/// not, so neither may we: the next borrower would run as the previous one's role.
const SESSION_RESET: &str = "SET SESSION AUTHORIZATION DEFAULT; CLOSE ALL; RESET ALL; UNLISTEN *; \
                             SELECT pg_catalog.pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES";

/// Whether `conn` may go back to the pool as it is: reusable, and outside a transaction on
/// the server too. `Client::is_reusable` counts a dropped `Transaction` as out, since its
/// `ROLLBACK` is queued ahead of the next request; but that request may be far off, and the
/// session sat in the pool inside the transaction until then, holding its locks (another
/// borrower's statement on those rows waited for it, maybe for ever). Such a connection is
/// reset now (the settle sends the queued `ROLLBACK`), or closed under [`Reset::None`].
fn clean(conn: &Client) -> bool {
    conn.is_reusable() && conn.transaction_status() == TransactionStatus::Idle
}

/// Opens slipstream-pg connections for a [`crate::Pool`]. A connection that comes back broken
/// is closed; one left inside a transaction is rolled back on the pool's task ([`Reset`]). The
/// statement cache of each connection survives from one borrower to the next. A connection the
/// pool reclaims ([`crate::Builder::time_to_live`]) has its statement cancelled and its socket
/// closed.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::{PgManager, Pool};
/// let pool = Pool::builder(PgManager::new("postgres://app@db/orders".parse()?))
///     .max_size(6)
///     .build();
/// let mut conn = pool.get().await?;
/// let one: i32 = conn.query_one("SELECT 1", &[]).await?.get(0)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgManager {
    config: Config,
    reset: Reset,
}

impl PgManager {
    /// Connections made with `config`.
    ///
    /// ```
    /// let manager = slipstream_pool::PgManager::new("postgres://app@db/orders".parse()?);
    /// assert_eq!(manager.config().get_dbname(), Some("orders"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn new(config: Config) -> PgManager {
        PgManager {
            config,
            reset: Reset::default(),
        }
    }

    /// What to do to returned connections (default [`Reset::Rollback`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::{PgManager, Pool, Reset};
    /// let manager = PgManager::new("postgres://app@db/orders".parse()?)
    ///     .reset_on_return(Reset::Session);
    /// let pool = Pool::builder(manager).build();
    /// # Ok(()) }
    /// ```
    pub fn reset_on_return(mut self, reset: Reset) -> PgManager {
        self.reset = reset;
        self
    }

    /// The configuration connections are made with.
    ///
    /// ```
    /// let manager = slipstream_pool::PgManager::new("postgres://app@db:5433/orders".parse()?);
    /// assert_eq!(manager.config().get_user(), Some("app"));
    /// assert_eq!(manager.config().get_ports(), [5433]);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn config(&self) -> &Config {
        &self.config
    }
}

impl Manager for PgManager {
    type Connection = Client;
    type Error = Error;

    async fn connect(&self) -> Result<Client, Error> {
        slipstream_pg::connect_config(&self.config).await
    }

    fn is_broken(&self, conn: &Client) -> bool {
        conn.is_broken() || (self.reset == Reset::None && !clean(conn))
    }

    /// What the server sent while the connection sat idle, read without waiting
    /// ([`Client::check_idle`]): a session it ended (a shutdown, a terminated backend, an idle
    /// timeout) is not lent, so no borrower's first statement is the one to find out.
    fn closed_while_idle(&self, conn: &mut Client) -> bool {
        conn.check_idle().is_err()
    }

    /// The borrower's notice handler and the notifications it did not take
    /// ([`Client::clear_client_state`]), on every return: the next borrower's notices must not
    /// reach the last one's handler, whatever the reset.
    fn returned(&self, conn: &mut Client) {
        conn.clear_client_state();
    }

    fn needs_reset(&self, conn: &Client) -> bool {
        match self.reset {
            Reset::None => false,
            Reset::Rollback => !clean(conn),
            Reset::Session => true,
        }
    }

    /// No reset keeps them. The session reset (`RESET ALL`, `SET SESSION AUTHORIZATION
    /// DEFAULT`, ...) undoes what a labeling set. A rollback (run only for a connection
    /// returned inside a transaction, or with a dropped call's replies owed) undoes a `SET`
    /// made inside that transaction: a borrower that switched `search_path` there and
    /// labeled the connection (`Pooled::set_labels`) left labels the session no longer
    /// matches, and the next labeled borrow, at cost 0, ran no configure and read another
    /// tenant's tables (`tests/attack_pg_labels.rs`). Clearing costs a connection rolled back
    /// one configure on its next labeled borrow.
    fn reset_keeps_labels(&self) -> bool {
        false
    }

    async fn reset(&self, conn: &mut Client) -> bool {
        // Judge from the server's state, not the one before a dropped call: read what is owed
        // and run what dropped handles deferred (a dropped BEGIN may have opened a transaction).
        // A dropped call's statement may still be running (a timeout around a long query):
        // cancel it rather than hold the slot for its whole run, or forever if it waits on a
        // lock, and bound the whole reset, the cancel request included; a connection not
        // reset in time is closed. (Outside the bound, the cancel request to a server that
        // stopped answering held the slot for its own connect timeout, 10 s without one,
        // before the 5 s bound even began: `tests/attack_stall.rs`.)
        let reset = async {
            if !conn.is_settled() {
                let _ = conn.cancel_token().cancel().await;
            }
            if conn.settle().await.is_err() {
                return false;
            }
            if conn.transaction_status() != TransactionStatus::Idle
                && conn.batch_execute("ROLLBACK").await.is_err()
            {
                return false;
            }
            match self.reset {
                Reset::Session => {
                    // After UNLISTEN: nothing queued before it may reach the next borrower.
                    let ok = conn.batch_execute(SESSION_RESET).await.is_ok();
                    conn.clear_client_state();
                    ok
                }
                _ => conn.is_reusable(),
            }
        };
        // A reset cut short leaves replies owed: the pool closes the connection on `false`.
        tokio::time::timeout(RESET_LIMIT, reset)
            .await
            .unwrap_or(false)
    }

    /// One round trip (`SELECT 1` on the simple protocol).
    async fn validate(&self, conn: &mut Client) -> bool {
        conn.batch_execute("SELECT 1").await.is_ok()
    }

    fn abort_handle(&self, conn: &Client) -> Option<AbortFn> {
        let handle = conn.abort_handle().ok()?;
        Some(Box::new(move |reason| {
            Box::pin(async move { handle.abort(&reason).await })
        }))
    }
}
