//! What a borrow can fail with.

use std::fmt;
use std::time::Duration;

/// Why a borrow failed. Each says what happened and what to do.
///
/// ```
/// use slipstream_pool::PoolError;
/// let e = PoolError::Full { waiting: 10, max_waiters: 10 };
/// assert!(e.to_string().contains("max_waiters"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// No connection became free within the borrow timeout.
    ///
    /// Fields may be added: match it with `{ .. }`.
    #[non_exhaustive]
    Timeout {
        /// How long the borrow waited.
        waited: Duration,
        /// Connections open when it gave up (of a [`crate::PgPool`]: on [`Self::Timeout::server`]).
        open: usize,
        /// The pool's maximum; of a [`crate::PgPool`], the share of its `max_size` that
        /// [`Self::Timeout::server`] had when the borrow gave up.
        max_size: usize,
        /// Why the last attempt to open a connection failed, if it did.
        last_connect_error: Option<String>,
        /// The server (`host:port`) a [`crate::PgPool`] borrow waited on last, as
        /// [`crate::PgPool::servers`] names it; `None` for a [`crate::Pool`].
        server: Option<String>,
    },
    /// Too many borrowers were already waiting: rejected at once.
    Full {
        /// Borrowers waiting.
        waiting: usize,
        /// The limit.
        max_waiters: usize,
    },
    /// The pool's configuration is invalid (e.g. a connection string that does not parse).
    Config(String),
    /// [`crate::Labeling::configure`] returned `false` for every connection a labeled borrow
    /// tried ([`crate::Pool::get_labeled`]); each was closed.
    ///
    /// Fields may be added: match it with `{ .. }`.
    #[non_exhaustive]
    Labeling {
        /// The labels asked for, as `{"name": "value"}`.
        wanted: String,
        /// How many connections it failed on.
        tries: u32,
        /// The server (`host:port`) of a [`crate::PgPool`] whose connections they were, as
        /// [`crate::PgPool::servers`] names it; `None` for a [`crate::Pool`]. A set-up may
        /// fail on one server only (a hot standby refuses writes, a role or schema missing on
        /// one host).
        server: Option<String>,
    },
    /// No server of a multi-host pool can serve the requested role now.
    NoServer {
        /// The role asked for (`primary`, `standby`, ...).
        role: String,
        /// Each server and its state (`db1:5432 down: connection refused`).
        servers: Vec<String>,
        /// Every server that is down refused the pool's login (a wrong password, a role that
        /// may not log in, no `pg_hba.conf` entry, a database that does not exist), or cannot
        /// be connected to as configured (a connection service never read, a TLS file that
        /// cannot be loaded): retrying cannot help until the connection string or the
        /// server's set-up is fixed.
        login_refused: bool,
    },
}

impl PoolError {
    /// A sub-pool's error as a [`crate::PgPool`] borrow reports it: a timeout names the
    /// server it waited on, a failed labeling the server whose connections it failed on.
    pub(crate) fn on_server(mut self, name: &str) -> PoolError {
        if let PoolError::Timeout { server, .. } | PoolError::Labeling { server, .. } = &mut self {
            *server = Some(name.to_string());
        }
        self
    }
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Timeout {
                waited,
                open,
                max_size,
                last_connect_error,
                server,
            } => {
                // "All in use" only when they are: with fewer open than max_size, the pool
                // could not open more (the connect error says why) or was still opening them.
                let full = open >= max_size;
                let all_in_use = if full { ", all in use" } else { "" };
                match server {
                    // A multi-host pool's numbers are one server's: without its name and
                    // "share", "1 of 1 open" reads as a pool of one the user never configured.
                    Some(server) => write!(
                        f,
                        "no connection to {server} became free within {waited:?} ({open} open \
                         of {max_size}, {server}'s share of the pool's max_size{all_in_use})"
                    )?,
                    None => write!(
                        f,
                        "no connection became free within {waited:?} ({open} of {max_size} \
                         open{all_in_use})"
                    )?,
                }
                match last_connect_error {
                    Some(e) => write!(
                        f,
                        "; opening {} failed: {e}{} Check that the database is reachable and \
                         accepts the pool's credentials (user, password, database); the pool \
                         keeps trying in the background",
                        if *open == 0 { "one" } else { "another" },
                        // A connect error may end a sentence of its own (libpq's "is the
                        // server running ...?"): no "?." after it.
                        if e.ends_with(['.', '?', '!']) {
                            ""
                        } else {
                            "."
                        }
                    ),
                    None if full => write!(
                        f,
                        "; return connections sooner, raise max_size, or raise the borrow timeout"
                    ),
                    None => write!(
                        f,
                        "; connections were still opening: raise the borrow timeout, or open \
                         min_size before the first borrow with build_ready"
                    ),
                }
            }
            PoolError::Full {
                waiting,
                max_waiters,
            } => write!(
                f,
                "pool overloaded: {waiting} borrowers already waiting (max_waiters = {max_waiters}); \
                 rejected at once rather than queued. Shed load or raise max_waiters"
            ),
            PoolError::Config(e) => write!(f, "invalid pool configuration: {e}"),
            PoolError::Labeling {
                wanted,
                tries,
                server,
            } => {
                let on = server
                    .as_ref()
                    .map(|s| format!(" to {s}"))
                    .unwrap_or_default();
                write!(
                    f,
                    "the labeling's configure failed for labels {wanted} on {tries} \
                     connections{on} in a row (each was closed); check what it runs for these \
                     labels{}",
                    if server.is_some() {
                        " on that server"
                    } else {
                        ""
                    }
                )
            }
            PoolError::NoServer {
                role,
                servers,
                login_refused,
            } => {
                write!(
                    f,
                    "no server can serve role {role} now ({})",
                    servers.join("; ")
                )?;
                if *login_refused {
                    write!(
                        f,
                        "; the servers down refused the pool's login, or cannot be connected \
                         to as configured (each one's error says which), so retrying will not \
                         help: fix the user, password, database, service or TLS files in the \
                         connection string, or the server's roles and pg_hba.conf"
                    )
                } else {
                    write!(
                        f,
                        "; down servers are retried in the background, so retry shortly or ask \
                         for another role"
                    )
                }
            }
        }
    }
}

impl std::error::Error for PoolError {}
