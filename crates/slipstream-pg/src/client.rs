//! The connection handle users hold.

use crate::connection::{Connection, NoticeHandler, TransactionStatus};
use crate::statement_cache::StatementCache;
use crate::type_info::TypeCache;
use crate::{CancelToken, Config, DbError, Error, FetchSize, Notification};

/// A connection to a PostgreSQL server.
///
/// A `Client` owns its socket: every call takes `&mut self`, writes its request and reads its
/// reply on the caller's task, with no background task or channel in between. Share a
/// connection between tasks through a pool, not a mutex.
///
/// Dropping a call's future part-way (a timeout, `select!`) is safe: the connection discards the
/// rest of that reply before the next call. A dropped transaction is rolled back, a dropped
/// `COPY FROM STDIN` aborted, a dropped [`crate::Statement`] closed, each with the next request.
///
/// ```no_run
/// # async fn f() -> Result<(), slipstream_pg::Error> {
/// let mut client = slipstream_pg::connect("host=/var/run/postgresql user=postgres").await?;
/// client.batch_execute("CREATE TEMP TABLE t (id int PRIMARY KEY, name text)").await?;
/// client.execute("INSERT INTO t VALUES ($1, $2)", &[&1i32, &"one"]).await?;
/// for row in client.query("SELECT id, name FROM t", &[]).await? {
///     let (id, name): (i32, &str) = (row.get(0)?, row.get(1)?);
///     println!("{id} {name}");
/// }
/// client.close().await?;
/// # Ok(()) }
/// ```
pub struct Client {
    pub(crate) conn: Connection,
    pub(crate) id: u64,
    /// Numbers the statements this client prepares (see [`Client::next_statement_name`]).
    next_statement: u64,
    /// Numbers pipeline blocks, so an operation handle cannot be used with another block.
    pub(crate) next_pipeline: u64,
    pub(crate) cache: StatementCache,
    /// Types looked up in the catalogs (see `type_info.rs`); forgotten with the statement cache.
    pub(crate) types: TypeCache,
    pub(crate) fetch_size: FetchSize,
    pub(crate) max_result_buffer: Option<usize>,
    /// memopt's fast-lookup functions, once resolved (see `memopt.rs`).
    pub(crate) memopt: Option<crate::memopt::MemoptFunctions>,
    cancel: CancelToken,
}

impl Client {
    /// The server-side name of the next statement this client prepares. Upper case because
    /// SQL folds an unquoted name to lower case: an application's own `PREPARE s1 AS ...` (or
    /// `PREPARE S1`) then never takes a name the client will use, which only a quoted
    /// `PREPARE "S1"` could (pgjdbc's `S_1` relies on the same).
    pub(crate) fn next_statement_name(&mut self) -> String {
        self.next_statement += 1;
        format!("S{}", self.next_statement)
    }

    pub(crate) fn new(conn: Connection, id: u64, cancel: CancelToken, config: &Config) -> Client {
        Client {
            conn,
            id,
            next_statement: 0,
            next_pipeline: 0,
            cache: StatementCache::new(config.get_statement_cache_size()),
            types: TypeCache::default(),
            fetch_size: config.get_fetch_size(),
            max_result_buffer: config.get_max_result_buffer(),
            memopt: None,
            cancel,
        }
    }

    /// A token that cancels this connection's running statement from another task.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SqlState;
    /// let token = client.cancel_token();
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    ///     let _ = token.cancel().await;
    /// });
    /// let e = client.batch_execute("SELECT pg_sleep(60)").await.unwrap_err();
    /// assert_eq!(e.code(), Some(SqlState::QUERY_CANCELED));
    /// # Ok(()) }
    /// ```
    pub fn cancel_token(&self) -> CancelToken {
        self.cancel.clone()
    }

    /// A handle that closes this connection from another task (cancelling its running
    /// statement first); see [`AbortHandle`](crate::AbortHandle). Pools use it to reclaim a
    /// connection borrowed too long.
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) if the socket's descriptor cannot be duplicated
    /// (the process is out of file descriptors); the connection itself is unharmed, so
    /// [`Error::is_closed`](crate::Error::is_closed) is false.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let handle = client.abort_handle()?;
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    ///     handle.abort("held too long").await;
    /// });
    /// let e = client.batch_execute("SELECT pg_sleep(60)").await.unwrap_err();
    /// assert!(e.is_closed() && e.to_string().contains("held too long"));
    /// # Ok(()) }
    /// ```
    pub fn abort_handle(&self) -> Result<crate::AbortHandle, Error> {
        crate::AbortHandle::new(
            self.conn.socket(),
            self.cancel.clone(),
            self.conn.aborted.clone(),
        )
    }

    /// The server process id serving this connection (`pg_backend_pid()`).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0)?;
    /// assert_eq!(pid, client.backend_pid());
    /// # Ok(()) }
    /// ```
    pub fn backend_pid(&self) -> i32 {
        self.cancel.process_id
    }

    /// A run-time parameter the server reported (`server_version`, `TimeZone`,
    /// `in_hot_standby`, ...), kept current as the server sends changes. The name is matched
    /// exactly, as the server spells it (`TimeZone`, not `timezone`), as libpq's
    /// `PQparameterStatus` does; only the parameters the server reports are here (others:
    /// `SHOW`).
    ///
    /// ```no_run
    /// # fn f(client: &slipstream_pg::Client) {
    /// println!("server {}", client.parameter("server_version").unwrap_or("?"));
    /// assert!(client.parameter("TimeZone").is_some());
    /// assert_eq!(client.parameter("timezone"), None); // the server's spelling only
    /// # }
    /// ```
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.conn.parameters.get(name).map(String::as_str)
    }

    /// Whether the session is in a transaction block, as of the last `ReadyForQuery` read. After
    /// a call dropped part-way this may be stale until the next call (or [`Client::settle`])
    /// reads what is owed; [`Client::is_reusable`] accounts for that.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::TransactionStatus;
    /// let tx = client.transaction().await?;
    /// assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    /// tx.rollback().await?;
    /// assert_eq!(client.transaction_status(), TransactionStatus::Idle);
    /// # Ok(()) }
    /// ```
    pub fn transaction_status(&self) -> TransactionStatus {
        self.conn.tx_status
    }

    /// True once an I/O or protocol failure, or the server, ended the connection.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// if let Err(e) = client.batch_execute("SELECT 1").await {
    ///     if client.is_broken() {
    ///         // Reconnect: this connection is gone ({e} says why).
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_broken(&self) -> bool {
        self.conn.is_broken()
    }

    /// Looks, without waiting and without sending anything, at what the server sent while the
    /// connection sat idle, and says whether it is still usable (pgx's `CheckConn`). A server
    /// that ends a session (a fast shutdown, `pg_terminate_backend`, an idle timeout) sends a
    /// FATAL error and closes the socket: this reads them, marks the connection broken and
    /// returns that error, so the next statement is not the one to find out. Notices,
    /// notifications and parameter changes that arrived are handled as any call handles them.
    ///
    /// Costs no system call unless the socket has something to read. A connection with
    /// replies still owed (a call dropped part-way) is left to its next call, which reads
    /// them, and counts as usable here. A pool calls this before it lends an idle connection.
    ///
    /// ```no_run
    /// # async fn f(mut client: slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// if let Err(e) = client.check_idle() {
    ///     // The server closed it meanwhile ({e} says why): open a new connection.
    ///     client = slipstream_pg::connect("postgres://app@db/orders").await?;
    /// }
    /// client.batch_execute("SELECT 1").await?;
    /// # Ok(()) }
    /// ```
    pub fn check_idle(&mut self) -> Result<(), Error> {
        self.conn.check_idle()
    }

    /// True if the connection can serve another user as it is: not broken, settled (no reply
    /// of a dropped call still owed, no dropped COPY pending, no open sync group of a leaked
    /// pipeline block), and not inside a transaction (a
    /// dropped [`crate::Transaction`] has its `ROLLBACK` queued ahead of the next request,
    /// which counts as out: check [`Client::transaction_status`] too to know the server's
    /// session is out, as `slipstream-pool`'s `PgManager` does, since until that next request
    /// the session keeps the transaction and its locks). What a pool checks when a connection
    /// comes back.
    ///
    /// A call dropped part-way (a timeout, `select!`) leaves replies owed; until they are read
    /// the transaction status is not known (a dropped `BEGIN` may have run), so the answer is
    /// "no" rather than a guess from stale state. [`Client::settle`] reads them.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// client.batch_execute("BEGIN").await?;
    /// assert!(!client.is_reusable()); // the next user would inherit the transaction
    /// client.batch_execute("ROLLBACK").await?;
    /// assert!(client.is_reusable());
    /// # Ok(()) }
    /// ```
    pub fn is_reusable(&self) -> bool {
        !self.conn.is_broken()
            && self.conn.is_settled()
            && (self.conn.tx_status == TransactionStatus::Idle
                || self.conn.deferred.iter().any(|sql| sql == "ROLLBACK"))
    }

    /// Reads every reply that calls dropped part-way still owe, and runs what dropped handles
    /// deferred (the `ROLLBACK` of a dropped [`crate::Transaction`], the `CopyFail` of a
    /// dropped [`crate::CopyIn`], `Close`s), so that [`Client::transaction_status`] is the
    /// server's current one. Every call does this first by itself; a pool calls it before
    /// judging a returned connection. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use std::time::Duration;
    /// let _ = tokio::time::timeout(Duration::from_millis(1), client.batch_execute("BEGIN")).await;
    /// client.settle().await?;
    /// if client.transaction_status() != slipstream_pg::TransactionStatus::Idle {
    ///     client.batch_execute("ROLLBACK").await?; // the BEGIN ran after all
    /// }
    /// assert!(client.is_reusable());
    /// # Ok(()) }
    /// ```
    pub async fn settle(&mut self) -> Result<(), Error> {
        self.conn.settle().await
    }

    /// Whether no reply is owed: no dropped call left a request whose answer is still to be
    /// read (see [`Client::settle`]).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// if !client.is_settled() {
    ///     client.cancel_token().cancel().await?; // stop a long statement nobody waits for
    ///     client.settle().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_settled(&self) -> bool {
        self.conn.is_settled()
    }

    /// True if the connection is encrypted with TLS.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), slipstream_pg::Error> {
    /// let client = slipstream_pg::connect("host=db.example.com user=app sslmode=require").await?;
    /// assert!(client.is_tls());
    /// # Ok(()) }
    /// ```
    pub fn is_tls(&self) -> bool {
        self.conn.is_tls()
    }

    /// Replaces the handler called with each notice the server sends (default: a `tracing`
    /// event at INFO level on target `slipstream_pg::notice`).
    ///
    /// ```no_run
    /// # fn f(client: &mut slipstream_pg::Client) {
    /// client.set_notice_handler(|notice| eprintln!("{}: {}", notice.severity(), notice.message()));
    /// # }
    /// ```
    pub fn set_notice_handler(&mut self, handler: impl FnMut(&DbError) + Send + 'static) {
        self.conn.notice_handler = Box::new(handler) as NoticeHandler;
    }

    /// Forgets what one user of this connection left in the client itself: the notifications
    /// not yet taken, and the notice handler (back to the default). The server's session is
    /// untouched (see `DISCARD ALL` for that). A pool calls this before lending the connection
    /// to someone else, so that one borrower's handler never sees another's notices.
    ///
    /// ```no_run
    /// # fn f(client: &mut slipstream_pg::Client) {
    /// client.clear_client_state();
    /// assert!(client.take_notifications().is_empty());
    /// # }
    /// ```
    pub fn clear_client_state(&mut self) {
        self.conn.notifications.clear();
        self.conn.notice_handler = crate::connection::default_notice_handler();
    }

    /// Notifications received so far (during any call), oldest first.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// client.batch_execute("LISTEN jobs").await?;
    /// client.batch_execute("SELECT 1").await?; // notifications may arrive during any call
    /// for n in client.take_notifications() {
    ///     println!("{}: {}", n.channel(), n.payload());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn take_notifications(&mut self) -> Vec<Notification> {
        self.conn.notifications.drain(..).collect()
    }

    /// Waits for the next notification on a channel this connection `LISTEN`s on. Cancel-safe:
    /// wrap it in a timeout to poll.
    ///
    /// Inside a transaction block (a [`Transaction`](crate::Transaction), or a `BEGIN` sent as
    /// SQL), with no notification already received, it fails at once with
    /// [`ErrorKind::Usage`](crate::ErrorKind::Usage): PostgreSQL holds notifications until the
    /// transaction ends, so the wait could never end.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use std::time::Duration;
    /// client.batch_execute("LISTEN jobs").await?;
    /// match tokio::time::timeout(Duration::from_secs(1), client.wait_for_notification()).await {
    ///     Ok(n) => println!("got {}", n?.payload()),
    ///     Err(_) => println!("nothing within a second"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_notification(&mut self) -> Result<Notification, Error> {
        if let Some(n) = self.conn.notifications.pop_front() {
            return Ok(n);
        }
        self.conn.settle().await?;
        self.conn.check_can_wait_for_notifications()?;
        self.conn.next_notification().await
    }

    /// Closes the connection cleanly (sends `Terminate`). Dropping a `Client` does the same on
    /// a best-effort basis.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), slipstream_pg::Error> {
    /// let client = slipstream_pg::connect("host=/var/run/postgresql user=postgres").await?;
    /// client.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn close(mut self) -> Result<(), Error> {
        self.conn.terminate().await
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("backend_pid", &self.backend_pid())
            .field("transaction_status", &self.conn.tx_status)
            .field("broken", &self.conn.is_broken())
            .finish_non_exhaustive()
    }
}
