//! Row streams: a query's rows fetched a bounded amount per round trip, with a cap on the
//! memory they hold.
//!
//! # Protocol
//!
//! ```text
//! open:   [Parse + Describe] + Bind(portal "") + Execute(n) + Flush
//!         -> [ParseComplete, ParameterDescription, RowDescription], BindComplete, DataRow * n, PortalSuspended
//! fetch:  Execute(n) + Flush, sent the moment PortalSuspended arrives (the next batch travels
//!         while the caller works through this one)
//! end:    CommandComplete (or ErrorResponse) -> Sync -> ReadyForQuery
//! lookup: Parse("") + Bind(portal "slipstream_type_lookup") + Describe + Execute + Close + Flush,
//!         queued the moment a RowDescription names a type the connection does not know; its
//!         replies follow the first batch's end, and the rows wait until they are in
//! ```
//!
//! No `Sync` is sent until the rows run out, so in autocommit the implicit transaction (and its
//! snapshot) stays open for the life of the stream, which is what keeps the portal alive.
//!
//! Invariants:
//! - While a stream is open, the connection's `owed` queue already holds the stream's entry. The
//!   `Sync` is sent when the rows run out, or queued by `Drop` if the stream is dropped first,
//!   so a dropped stream's remaining replies are discarded like any abandoned request's.
//! - The buffer holds at most `cap` bytes of rows plus one row: reading stops there until the
//!   caller has taken rows. Rows not yet read wait in the socket and the server.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_util::Stream;

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use postgres_types::Type;

use crate::connection::Owed;
use crate::conninfo::parse_bytes;
use crate::query::{Plan, Reply, Source, Step, check_owner, encode_plan, stale_prepared};
use crate::{Client, Column, Error, Param, Row, Statement, ToStatement, TransactionStatus};

/// How much a [`RowStream`] fetches per round trip.
///
/// In a connection string: `fetch_size=1000` (rows) or `fetch_size=64kB` (bytes; `B`, `kB`,
/// `MB`, `GB`, units of 1024).
///
/// ```
/// use slipstream_pg::FetchSize;
/// assert_eq!("1000".parse::<FetchSize>()?, FetchSize::Rows(1000));
/// assert_eq!("64kB".parse::<FetchSize>()?, FetchSize::Bytes(65536));
/// assert_eq!(FetchSize::default(), FetchSize::Bytes(64 * 1024));
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchSize {
    /// This many rows per round trip; 0 fetches everything in one.
    Rows(u32),
    /// About this many bytes per round trip: the row count is this divided by the largest row
    /// of the previous fetch (before the first row: an estimate from the column types of a
    /// prepared or cached statement, a guess for SQL on its first run). Unless
    /// `max_result_buffer` says otherwise, also the cap on the bytes a stream holds.
    Bytes(usize),
}

impl Default for FetchSize {
    /// 64 KiB, as ODP.NET.
    fn default() -> FetchSize {
        FetchSize::Bytes(64 * 1024)
    }
}

impl FromStr for FetchSize {
    type Err = Error;

    fn from_str(s: &str) -> Result<FetchSize, Error> {
        let s = s.trim();
        if let Ok(rows) = s.parse::<u32>() {
            return Ok(FetchSize::Rows(rows));
        }
        // A bare number is a row count, however large: read as bytes (as `parse_bytes` reads
        // one without a unit), a count past `u32` silently became a byte budget.
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::config(format!(
                "invalid fetch_size `{s}`: at most {} rows per round trip (0 fetches all rows \
                 in one); for a byte budget give a unit (e.g. 64kB)",
                u32::MAX
            )));
        }
        match parse_bytes(s) {
            Some(bytes) if bytes > 0 => Ok(FetchSize::Bytes(bytes)),
            _ => Err(Error::config(format!(
                "invalid fetch_size `{s}`: give rows (e.g. 1000) or bytes with a unit (e.g. 64kB)"
            ))),
        }
    }
}

impl fmt::Display for FetchSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchSize::Rows(n) => write!(f, "{n} rows"),
            FetchSize::Bytes(b) if b % (1 << 20) == 0 => write!(f, "{}MB", b >> 20),
            FetchSize::Bytes(b) if b % (1 << 10) == 0 => write!(f, "{}kB", b >> 10),
            FetchSize::Bytes(b) => write!(f, "{b}B"),
        }
    }
}

impl Client {
    /// Runs a query whose rows arrive as they are read, a bounded amount per round trip (the
    /// connection's fetch size, default 64 KiB). Works in autocommit and in transactions.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut rows = client.query_stream("SELECT g FROM generate_series(1, 1000000) g", &[]).await?;
    /// let mut sum = 0i64;
    /// while let Some(row) = rows.next().await? {
    ///     sum += row.get::<_, i32>(0)? as i64;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn query_stream<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<RowStream<'_>, Error> {
        let fetch = self.fetch_size;
        self.query_stream_with(statement, params, fetch).await
    }

    /// [`Client::query_stream`] with this call's own fetch size.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::FetchSize;
    /// let mut rows = client
    ///     .query_stream_with("SELECT * FROM fetch_test", &[], FetchSize::Rows(1000))
    ///     .await?;
    /// while let Some(row) = rows.next().await? {
    ///     let _id: i32 = row.get(0)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn query_stream_with<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
        fetch: FetchSize,
    ) -> Result<RowStream<'_>, Error> {
        let (sql, use_cache, prepared) = match statement.source() {
            Source::Prepared(stmt) => {
                check_owner(stmt, self.id)?;
                self.check_statement_types(stmt).await?;
                (stmt.sql(), false, Some(stmt))
            }
            Source::Sql(sql) => (sql, self.cache.enabled(), None),
            Source::Uncached(sql) => (sql, false, None),
        };
        let cap = self.max_result_buffer.unwrap_or(match fetch {
            FetchSize::Bytes(b) => b,
            FetchSize::Rows(_) => usize::MAX,
        });
        let columns = prepared
            .map(|s| s.columns_arc().clone())
            .unwrap_or_default();
        let mut stream = RowStream {
            client: self,
            reply: Reply::new(columns, false),
            buffer: VecDeque::new(),
            buffered: 0,
            peak: 0,
            cap,
            fetch,
            largest_row: 0,
            state: State::Done,
            sync_sent: true,
            round_trips: 0,
            rows_per_fetch: 0,
            lookup: Lookup::None,
            described: false,
            terminated: false,
            filling: false,
        };
        let plan = stream.start(sql, prepared, params, use_cache).await?;
        let stale = stream.buffer.is_empty() && stream.reply.stale();
        if plan.is_cached()
            && stale
            && let Some(e) = stream.reply.error.take()
        {
            // Judged from the status that came with the error, as `Client::run` does: the
            // request began with what dropped handles deferred (a dropped `Transaction`'s
            // `ROLLBACK`), so the status before it may name a transaction that request ended.
            // An error with no row read was followed by its `Sync`'s `ReadyForQuery`; were it
            // not, the status is not known, and a retry is not risked.
            let in_transaction = stream.state != State::Done
                || stream.client.conn.tx_status != TransactionStatus::Idle;
            stream.client.stale(&plan, e, in_transaction)?;
            stream.start(sql, None, params, use_cache).await?;
        }
        if stream.buffer.is_empty()
            && let Some(e) = stream.reply.error.take()
        {
            let e = match prepared {
                Some(stmt) if stale => stale_prepared(stmt, e),
                _ => e,
            };
            return Err(stream.client.conn.explain_failed(e));
        }
        Ok(stream)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Rows may still come; the stream's `Sync` is owed.
    Fetching,
    /// `ReadyForQuery` arrived: nothing more comes from the server.
    Done,
}

/// The rows of a query, fetched as they are read; see [`Client::query_stream`].
///
/// Holds the connection until dropped. Dropping it part-way is safe: the rest of the reply is
/// discarded with the connection's next request.
///
/// Also a [`Stream`] of `Result<Row, Error>` (ending after the first error), for
/// `futures::StreamExt`/`TryStreamExt` combinators:
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use futures_util::TryStreamExt;
/// let rows = client.query_stream("SELECT g FROM generate_series(1, 100) g", &[]).await?;
/// let total = rows.try_fold(0i64, |sum, row| async move { Ok(sum + row.get::<_, i32>(0)? as i64) }).await?;
/// assert_eq!(total, 5050);
/// # Ok(()) }
/// ```
///
/// With the inherent [`RowStream::next`]:
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let mut rows = client.query_stream("SELECT g FROM generate_series(1, 10) g", &[]).await?;
/// if let Some(first) = rows.next().await? {
///     println!("{}", first.get::<_, i32>(0)?);
/// }
/// drop(rows); // the other nine are skipped
/// assert_eq!(client.query_one("SELECT 1", &[]).await?.get::<_, i32>(0)?, 1);
/// # Ok(()) }
/// ```
pub struct RowStream<'a> {
    client: &'a mut Client,
    reply: Reply,
    buffer: VecDeque<(Row, usize)>,
    /// Bytes of the rows in `buffer` (see [`row_cost`]).
    buffered: usize,
    peak: usize,
    cap: usize,
    fetch: FetchSize,
    largest_row: usize,
    state: State,
    sync_sent: bool,
    round_trips: u64,
    rows_per_fetch: i32,
    /// The catalog lookup of the result's types, when the client did not know one.
    lookup: Lookup,
    /// The `RowDescription` has been checked for types to look up.
    described: bool,
    /// An error was returned through `Stream::poll_next`: it ends the stream.
    terminated: bool,
    /// A fill has started and not finished (its poll was pending): it finishes before rows
    /// are handed out, so a batch is read whole, as the fetch size and the cap promise.
    filling: bool,
}

/// A row stream's type lookup (see `type_info.rs`): queued behind the stream's first
/// `Execute`, so its replies follow the end of the stream's first batch.
enum Lookup {
    None,
    Queued {
        /// The stream's batch ahead of it has ended: what arrives now is the lookup's.
        after_batch: bool,
        reply: Reply,
    },
}

impl RowStream<'_> {
    /// The next row, or `None` after the last. A server error after some rows is returned once
    /// the rows before it have been taken.
    ///
    /// ```no_run
    /// # async fn f(mut rows: slipstream_pg::RowStream<'_>) -> Result<(), slipstream_pg::Error> {
    /// while let Some(row) = rows.next().await? {
    ///     println!("{:?}", row);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Result<Option<Row>, Error> {
        std::future::poll_fn(|cx| self.poll_next_row(cx)).await
    }

    fn poll_next_row(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Row>, Error>> {
        // A fill can end with nothing buffered: the cap stopped the previous one just before
        // a batch's PortalSuspended. Rows wait while their types are looked up.
        while (self.buffer.is_empty() || self.filling || self.lookup_pending())
            && self.state == State::Fetching
        {
            ready!(self.poll_fill(cx))?;
        }
        if let Some((row, cost)) = self.buffer.pop_front() {
            self.buffered -= cost;
            return Poll::Ready(Ok(Some(row)));
        }
        Poll::Ready(match self.reply.error.take() {
            Some(e) => Err(e),
            None => Ok(None),
        })
    }

    fn lookup_pending(&self) -> bool {
        matches!(self.lookup, Lookup::Queued { .. })
    }

    /// The result columns.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let rows = client.query_stream("SELECT oid, relname FROM pg_class", &[]).await?;
    /// assert_eq!(rows.columns()[1].name(), "relname"); // known before the first row is read
    /// # Ok(()) }
    /// ```
    pub fn columns(&self) -> &[Column] {
        self.reply.columns_ref()
    }

    /// Round trips so far (each `Execute` sent).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::FetchSize;
    /// let sql = "SELECT g FROM generate_series(1, 1000) g";
    /// let mut rows = client.query_stream_with(sql, &[], FetchSize::Rows(100)).await?;
    /// while rows.next().await?.is_some() {}
    /// assert_eq!(rows.round_trips(), 11); // ten full batches, then the one that finds the end
    /// println!("{} rows per fetch, {} bytes held at most", rows.rows_per_fetch(), rows.peak_buffered_bytes());
    /// # Ok(()) }
    /// ```
    pub fn round_trips(&self) -> u64 {
        self.round_trips
    }

    /// The row count the last `Execute` asked for (0: all).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::FetchSize;
    /// let sql = "SELECT g FROM generate_series(1, 1000) g";
    /// let mut rows = client.query_stream_with(sql, &[], FetchSize::Rows(100)).await?;
    /// rows.next().await?;
    /// assert_eq!(rows.rows_per_fetch(), 100);
    /// # Ok(()) }
    /// ```
    pub fn rows_per_fetch(&self) -> u32 {
        self.rows_per_fetch as u32
    }

    /// The most bytes of rows the stream has held at once.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::FetchSize;
    /// let sql = "SELECT repeat('x', 1000) FROM generate_series(1, 10000)";
    /// let mut rows = client.query_stream_with(sql, &[], FetchSize::Bytes(64 * 1024)).await?;
    /// while rows.next().await?.is_some() {}
    /// // The byte budget, plus at most one row past it:
    /// assert!(rows.peak_buffered_bytes() <= 64 * 1024 + 2000);
    /// # Ok(()) }
    /// ```
    pub fn peak_buffered_bytes(&self) -> usize {
        self.peak
    }

    /// Sends the statement and reads the first batch.
    async fn start(
        &mut self,
        sql: &str,
        prepared: Option<&Statement>,
        params: &[Param<'_>],
        use_cache: bool,
    ) -> Result<Plan, Error> {
        self.lookup = Lookup::None;
        self.described = false;
        let plan = match prepared {
            Some(stmt) => {
                let rows = first_batch_rows(Some(self.fetch), stmt.columns());
                self.client.conn.start_request().await?;
                let plan = Plan::Named {
                    stmt: stmt.clone(),
                    cached: false,
                };
                encode_plan(&mut self.client.conn.wbuf, &plan, sql, params, rows)?;
                plan
            }
            None => {
                let fetch = Some(self.fetch);
                self.client.send_sql(sql, params, use_cache, fetch).await?
            }
        };
        // What `send_sql` asked for: sized from the columns if the statement was known.
        let rows = first_batch_rows(Some(self.fetch), plan.columns().as_ref());
        self.reply = Reply::new(plan.columns(), false);
        let conn = &mut self.client.conn;
        frontend::flush(&mut conn.wbuf);
        // From here the stream owes a Sync (see the module docs); no await in between.
        conn.owed.push_back(Owed::Stream);
        conn.stream_sync_owed = true;
        self.state = State::Fetching;
        self.sync_sent = false;
        self.round_trips += 1;
        self.rows_per_fetch = rows;
        conn.flush().await?;
        self.fill().await?;
        // Cached, a statement gets no RowDescription again: its types must be known first.
        while self.lookup_pending() && self.state == State::Fetching {
            self.fill().await?;
        }
        self.client.cache_prepared(&plan, sql, &self.reply);
        Ok(plan)
    }

    async fn fill(&mut self) -> Result<(), Error> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// Reads until the current batch is in, the buffer reaches its cap, the reply ends, or a
    /// type lookup completes. Everything it sends is queued in `wbuf` and written while it
    /// reads (the next batch's `Execute` at once), so all its state is in the stream: a
    /// dropped poll loses nothing.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.filling = true;
        let filled = self.poll_fill_batch(cx);
        if filled.is_ready() {
            self.filling = false;
        }
        filled
    }

    fn poll_fill_batch(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        while self.state == State::Fetching {
            // While a lookup is queued, the rows ahead of its reply are read past the cap:
            // at most the first batch.
            if self.buffered >= self.cap && !self.buffer.is_empty() && !self.lookup_pending() {
                return Poll::Ready(Ok(()));
            }
            let message = match self.client.conn.recv_buffered()? {
                Some(m) => m,
                None => ready!(self.client.conn.poll_recv(cx))?,
            };
            if let Lookup::Queued {
                after_batch: true, ..
            } = self.lookup
            {
                if self.on_lookup_message(message)? {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            match message {
                Message::DataRow(body) => {
                    let columns = self.reply.columns();
                    let cost = row_cost(body.buffer().len(), columns.len());
                    let row = Row::new(columns, body).map_err(|e| self.client.conn.poison(e))?;
                    self.largest_row = self.largest_row.max(cost);
                    self.buffered += cost;
                    self.peak = self.peak.max(self.buffered);
                    self.buffer.push_back((row, cost));
                }
                Message::PortalSuspended => {
                    self.batch_ended();
                    self.request_next_batch(cx)?;
                    return Poll::Ready(Ok(()));
                }
                Message::ReadyForQuery(_) => {
                    self.state = State::Done;
                    self.lookup = Lookup::None;
                }
                m => match self.reply.apply(m) {
                    Ok(Step::More) => {
                        if self.reply.described && !self.described {
                            self.described = true;
                            self.queue_lookup()?;
                        }
                    }
                    Ok(Step::Done) => {
                        self.batch_ended();
                        self.send_sync(cx)?;
                    }
                    Ok(Step::Copy { inbound }) => {
                        let refused = self.client.conn.queue_refuse_copy(inbound)?;
                        self.reply.error.get_or_insert(refused);
                    }
                    Err(e) => return Poll::Ready(Err(self.client.conn.poison(e))),
                },
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The result was just described: replaces the placeholder types the connection already
    /// knows, and queues a lookup of the others behind the stream's `Execute`.
    fn queue_lookup(&mut self) -> Result<(), Error> {
        let types = &self.client.types;
        self.reply
            .params
            .iter_mut()
            .for_each(|p| types.resolve_params(p));
        let columns = self.reply.columns();
        let missing = types.missing(
            columns
                .iter()
                .map(Column::type_)
                .chain(self.reply.params.iter().flatten()),
        );
        if let Some(resolved) = types.resolve_columns(&columns) {
            self.reply.set_columns(resolved);
        }
        if missing.is_empty() {
            return Ok(());
        }
        crate::type_info::encode_stream_lookup(&mut self.client.conn.wbuf, &missing)?;
        self.lookup = Lookup::Queued {
            after_batch: false,
            reply: Reply::new(Arc::from(Vec::new()), true),
        };
        Ok(())
    }

    /// The stream's current batch ended: a queued lookup's replies come next.
    fn batch_ended(&mut self) {
        if let Lookup::Queued { after_batch, .. } = &mut self.lookup {
            *after_batch = true;
        }
    }

    /// Takes one message of the lookup's reply; true once the lookup is over.
    fn on_lookup_message(&mut self, message: Message) -> Result<bool, Error> {
        let Lookup::Queued { reply, .. } = &mut self.lookup else {
            return Ok(true);
        };
        match message {
            Message::CloseComplete => {
                let rows = std::mem::take(&mut reply.rows);
                self.lookup = Lookup::None;
                self.client
                    .types
                    .insert_rows(&rows)
                    .map_err(|e| self.client.conn.poison(e))?;
                let types = &self.client.types;
                if let Some(columns) = types.resolve_columns(&self.reply.columns()) {
                    for (row, _) in &mut self.buffer {
                        row.set_columns(columns.clone());
                    }
                    self.reply.set_columns(columns);
                }
                self.reply
                    .params
                    .iter_mut()
                    .for_each(|p| types.resolve_params(p));
                Ok(true)
            }
            // The stream failed before the lookup ran, so the server skipped it.
            Message::ReadyForQuery(_) => {
                self.state = State::Done;
                self.lookup = Lookup::None;
                Ok(true)
            }
            m => match reply.apply(m) {
                Ok(Step::More) => Ok(false),
                Ok(Step::Done) => match reply.error.take() {
                    // The lookup failed: the server now skips everything up to a Sync, so the
                    // stream ends with this error (its transaction is aborted).
                    Some(e) => {
                        self.lookup = Lookup::None;
                        self.reply.error.get_or_insert(e.context(
                            "looking up the types of the stream's columns failed; the stream's \
                             transaction is aborted",
                        ));
                        frontend_sync(self);
                        Ok(true)
                    }
                    None => Ok(false),
                },
                Ok(Step::Copy { .. }) | Err(_) => Err(self.client.conn.poison(Error::protocol(
                    "server sent an unexpected reply to the type lookup (protocol violation); \
                     the connection is closed",
                ))),
            },
        }
    }

    fn request_next_batch(&mut self, cx: &mut Context<'_>) -> Result<(), Error> {
        let rows = self.next_fetch_rows();
        // Size each fetch from the batch before it, not the widest row ever: one 10 MB row must
        // not make the rest of a narrow result travel a row per round trip. The cap, not the
        // estimate, is what bounds memory.
        self.largest_row = 0;
        let conn = &mut self.client.conn;
        frontend::execute("", rows, &mut conn.wbuf).map_err(|e| Error::protocol(e.to_string()))?;
        frontend::flush(&mut conn.wbuf);
        self.round_trips += 1;
        self.rows_per_fetch = rows;
        // The next batch travels while the caller works through this one: write now if the
        // socket has room (what is left goes with the next read).
        send_now(conn, cx)
    }

    fn send_sync(&mut self, cx: &mut Context<'_>) -> Result<(), Error> {
        frontend_sync(self);
        send_now(&mut self.client.conn, cx)
    }

    fn next_fetch_rows(&self) -> i32 {
        match (self.fetch, self.largest_row) {
            (FetchSize::Bytes(budget), seen @ 1..) => fetch_rows(budget / seen),
            (fetch, _) => first_batch_rows(Some(fetch), self.reply.columns_ref()),
        }
    }
}

/// The row count of a stream's first `Execute` for a statement with result `columns` (empty:
/// not described yet), before any row has been seen: in bytes mode the budget over the
/// estimate from the column types. `None`: all rows (0), for calls that are not streams.
///
/// A cached statement's columns are known before its first `Execute` is written, so the cache
/// lookup sizes it from them (the first batch of a cached narrow result was sized from the
/// guess for an undescribed one, five times fewer rows than its types give).
pub(crate) fn first_batch_rows(fetch: Option<FetchSize>, columns: &[Column]) -> i32 {
    match fetch {
        None => 0,
        // 0 stays 0: all rows in one.
        Some(FetchSize::Rows(n)) => n.min(i32::MAX as u32) as i32,
        Some(FetchSize::Bytes(budget)) => fetch_rows(budget / estimate_row_cost(columns)),
    }
}

/// A row count in bytes mode for `Execute`: at least one (0 would mean all), at most what it
/// can carry.
fn fetch_rows(rows: usize) -> i32 {
    rows.clamp(1, i32::MAX as usize) as i32
}

impl Drop for RowStream<'_> {
    fn drop(&mut self) {
        if self.state == State::Fetching && !self.sync_sent {
            // Goes out with the connection's next request; `owed` already holds its entry.
            frontend::sync(&mut self.client.conn.wbuf);
            self.client.conn.stream_sync_owed = false;
        }
    }
}

impl fmt::Debug for RowStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowStream")
            .field("fetch", &self.fetch)
            .field("buffered_rows", &self.buffer.len())
            .field("buffered_bytes", &self.buffered)
            .field("round_trips", &self.round_trips)
            .field("done", &(self.state == State::Done))
            .finish()
    }
}

/// Queues the stream's `Sync` (once).
fn frontend_sync(stream: &mut RowStream<'_>) {
    if !stream.sync_sent {
        frontend::sync(&mut stream.client.conn.wbuf);
        stream.sync_sent = true;
        stream.client.conn.stream_sync_owed = false;
    }
}

/// Writes what `wbuf` holds as far as the socket takes it without waiting.
fn send_now(conn: &mut crate::connection::Connection, cx: &mut Context<'_>) -> Result<(), Error> {
    match conn.poll_send(cx) {
        Poll::Ready(Err(e)) => Err(e),
        _ => Ok(()),
    }
}

impl Stream for RowStream<'_> {
    type Item = Result<Row, Error>;

    /// The rows as a [`Stream`]: the same as [`RowStream::next`], ending after the first error.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.terminated {
            return Poll::Ready(None);
        }
        match ready!(this.poll_next_row(cx)) {
            Ok(row) => Poll::Ready(row.map(Ok)),
            Err(e) => {
                this.terminated = true;
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}

/// The memory a buffered row takes: its values plus the `Row` and its per-column ranges.
fn row_cost(body_len: usize, columns: usize) -> usize {
    body_len
        + std::mem::size_of::<(Row, usize)>()
        + columns * std::mem::size_of::<Option<std::ops::Range<usize>>>()
}

/// A row's cost guessed from its column types, before any row has arrived: fixed-size types
/// by their size, `varchar(n)`/`char(n)` by `n`, other variable-size types 64 bytes.
fn estimate_row_cost(columns: &[Column]) -> usize {
    if columns.is_empty() {
        return row_cost(256, 4);
    }
    let values: usize = columns
        .iter()
        .map(|c| {
            4 + match *c.type_() {
                Type::BOOL | Type::CHAR => 1,
                Type::INT2 => 2,
                Type::INT4 | Type::FLOAT4 | Type::DATE | Type::OID => 4,
                Type::INT8 | Type::FLOAT8 | Type::TIMESTAMP | Type::TIMESTAMPTZ | Type::TIME => 8,
                Type::UUID | Type::INTERVAL => 16,
                Type::VARCHAR | Type::BPCHAR if c.type_modifier() >= 4 => {
                    c.type_modifier() as usize - 4
                }
                _ => 64,
            }
        })
        .sum();
    row_cost(2 + values, columns.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_size_parses_rows_and_bytes_and_refuses_the_rest() {
        assert_eq!("0".parse::<FetchSize>().unwrap(), FetchSize::Rows(0));
        assert_eq!("512B".parse::<FetchSize>().unwrap(), FetchSize::Bytes(512));
        assert_eq!(
            "4MB".parse::<FetchSize>().unwrap(),
            FetchSize::Bytes(4 << 20)
        );
        assert_eq!(
            "1 KiB".parse::<FetchSize>().unwrap(),
            FetchSize::Bytes(1024)
        );
        for bad in ["", "ten", "-1", "0kB", "12 parsecs"] {
            let e = bad.parse::<FetchSize>().unwrap_err();
            assert!(e.to_string().contains("fetch_size"), "{bad}: {e}");
        }
        assert_eq!(FetchSize::Bytes(65536).to_string(), "64kB");
        assert_eq!(FetchSize::Rows(10).to_string(), "10 rows");
    }

    /// A bare number is rows (`fetch_size=1000`); one too large for a row count
    /// (4294967296 and up) was taken as a byte budget of that many bytes, without a word: a
    /// setting that meant "all the rows in one go" became a 4 GiB cap on memory instead.
    #[test]
    fn a_row_count_too_large_is_refused_not_read_as_bytes() {
        for big in ["4294967296", "5000000000", "99999999999999999999"] {
            let e = big.parse::<FetchSize>().unwrap_err();
            let message = e.to_string();
            assert!(
                message.contains("fetch_size") && message.contains("4294967295"),
                "{big}: {message}"
            );
        }
        assert_eq!(
            "4294967295".parse::<FetchSize>().unwrap(),
            FetchSize::Rows(u32::MAX)
        );
        assert_eq!(
            "5000000000B".parse::<FetchSize>().unwrap(),
            FetchSize::Bytes(5_000_000_000)
        );
    }
}
