//! Pipelines: many operations in flight on one connection, their replies read later.
//!
//! # Protocol
//!
//! Each operation is its extended-protocol messages (`Bind`/`Execute`, or `Parse`/`Bind`/
//! `Describe`/`Execute`, or `Parse`/`Describe` for a prepare), appended to the connection's
//! write buffer without waiting. What separates operations is where the `Sync`s go:
//!
//! ```text
//! continue on error:  op1 Sync op2 Sync op3 Sync     each its own implicit transaction
//! abort on error:     op1 op2 op3 Sync               one implicit transaction; after an error
//!                                                    the server skips everything up to the Sync
//! ```
//!
//! The server holds its replies until a `Sync` or a `Flush`; before waiting for a reply in the
//! middle of an abort-mode block, a `Flush` is appended (OCI's `OCIPipelineProcess`).
//!
//! # State
//!
//! `expect` lists, oldest first, what the server still owes: one entry per operation and one per
//! `Sync`. A reply message always belongs to the front entry, because the server answers in
//! order. After an `ErrorResponse`, every operation entry up to the next `Sync` entry gets no
//! reply at all: those are completed at once as aborted.
//!
//! Invariants:
//! - Each `Sync` appended pushes an [`Owed::PipelineSync`] entry on the connection's owed queue,
//!   popped when its `ReadyForQuery` is read, here or, after the pipeline was dropped, by the
//!   next request, which settles the connection first; a dropped pipeline therefore never
//!   leaves the connection out of step.
//! - The first operation queued settles what earlier dropped calls left owed before it is
//!   written (see `Connection::start_request`); only the deferred work queued with it
//!   (`skip` entries) precedes the block's replies.
//! - In an abort-mode block outside a transaction block, operations between two sync points
//!   form one implicit transaction: when one fails and the `ReadyForQuery` says the session is
//!   idle, the operations before it in that implicit transaction (after any `COMMIT`/`ROLLBACK`
//!   in the block) were rolled back and are reported as aborted, naming the failed one.
//! - An abort-mode block with operations queued but not synced gets its `Sync` on `end()` or on
//!   drop: the server must never be left inside an unterminated extended-protocol sequence.
//! - Every piece of reading state lives in the pipeline, not in a future's locals, so a
//!   cancelled `process`/`end` loses nothing and can be called again.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use postgres_types::Type;

use crate::connect::unexpected;
use crate::connection::Owed;
use crate::memopt::{
    Callee, MemoptFunctions, check_table, decode, decode_each, encode_function_call,
    encode_key_element, encode_keys_header, function_value,
};
use crate::param_types;
use crate::query::{Plan, Reply, Source, Step, check_owner, encode_plan, split_typed};
use crate::statement::{parse_columns, parse_params};
use crate::{
    Client, Column, DbError, Error, MemoptKey, MemoptTable, Param, Row, Statement, ToStatement,
};

/// How a pipeline treats a failing operation.
///
/// The default is [`PipelineMode::AbortOnError`]: it costs the client about 1 µs and the
/// server about 5 µs per pipelined point `SELECT` here, where continue on error costs the
/// server a transaction and a flushed packet per operation (about 12 µs) and runs at 0.3-0.5x
/// the rate (see docs/pipelining.md). Choose continue on error when each operation must
/// commit or fail on its own.
///
/// ```
/// use slipstream_pg::PipelineMode;
/// assert_eq!(PipelineMode::default(), PipelineMode::AbortOnError);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PipelineMode {
    /// Every operation is followed by a `Sync`: outside a transaction block each runs in its own
    /// implicit transaction, and a failure affects only itself. Inside a `BEGIN` block the first
    /// failure aborts the transaction, so later operations fail with SQLSTATE 25P02 and a
    /// `COMMIT` reports the rollback.
    ///
    /// Each `Sync` costs the server a transaction and a flush of its own, and the client a
    /// wake-up and a read per reply packet: see [`PipelineMode`].
    ContinueOnError,
    /// One `Sync` per block (plus any [`Pipeline::sync`] points): after a failure the server
    /// skips every later operation up to the next sync point, and each of them fails with
    /// [`ErrorKind::Aborted`](crate::ErrorKind::Aborted) naming the failed one. Outside a
    /// transaction block the operations between two sync points form one implicit
    /// transaction, so the work of the ones before the failure is rolled back too: those are
    /// reported as aborted as well (by [`Pipeline::end`], or a later [`Pipeline::process`]),
    /// never as done. A result taken by `process` before the sync point says the statement
    /// ran, not that it was committed. The default.
    #[default]
    AbortOnError,
}

/// Settings for one pipeline block: the mode and the flow-control window.
///
/// ```
/// use slipstream_pg::{PipelineMode, PipelineOptions};
/// let opts = PipelineOptions::new()
///     .mode(PipelineMode::AbortOnError)
///     .max_in_flight(4096)
///     .max_in_flight_bytes(4 << 20);
/// assert_eq!(opts.get_max_in_flight(), 4096);
/// ```
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    mode: PipelineMode,
    max_ops: usize,
    max_bytes: usize,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            mode: PipelineMode::AbortOnError,
            max_ops: 1024,
            max_bytes: 1 << 20,
        }
    }
}

impl PipelineOptions {
    /// Abort on error, at most 1024 operations and 1 MiB of requests in flight.
    ///
    /// ```
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// let opts = PipelineOptions::new();
    /// assert_eq!(opts.get_mode(), PipelineMode::AbortOnError);
    /// assert_eq!((opts.get_max_in_flight(), opts.get_max_in_flight_bytes()), (1024, 1 << 20));
    /// ```
    pub fn new() -> PipelineOptions {
        PipelineOptions::default()
    }

    /// Sets the error mode.
    ///
    /// ```
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// let opts = PipelineOptions::new().mode(PipelineMode::ContinueOnError);
    /// assert_eq!(opts.get_mode(), PipelineMode::ContinueOnError);
    /// ```
    pub fn mode(mut self, mode: PipelineMode) -> PipelineOptions {
        self.mode = mode;
        self
    }

    /// Sets how many operations may be queued or in flight before queueing another waits for
    /// replies (a sliding window: it then reads until a sixteenth of it is free). At least 1.
    ///
    /// ```
    /// let opts = slipstream_pg::PipelineOptions::new().max_in_flight(0);
    /// assert_eq!(opts.get_max_in_flight(), 1); // at least one
    /// ```
    pub fn max_in_flight(mut self, ops: usize) -> PipelineOptions {
        self.max_ops = ops.max(1);
        self
    }

    /// Sets how many bytes of requests may be queued or in flight, as for
    /// [`PipelineOptions::max_in_flight`]. At least 1.
    ///
    /// ```
    /// let opts = slipstream_pg::PipelineOptions::new().max_in_flight_bytes(4 << 20);
    /// assert_eq!(opts.get_max_in_flight_bytes(), 4 << 20);
    /// ```
    pub fn max_in_flight_bytes(mut self, bytes: usize) -> PipelineOptions {
        self.max_bytes = bytes.max(1);
        self
    }

    /// The error mode.
    ///
    /// ```
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// assert_eq!(PipelineOptions::default().get_mode(), PipelineMode::AbortOnError);
    /// ```
    pub fn get_mode(&self) -> PipelineMode {
        self.mode
    }

    /// The bound on operations in flight.
    ///
    /// ```
    /// assert_eq!(slipstream_pg::PipelineOptions::new().max_in_flight(64).get_max_in_flight(), 64);
    /// ```
    pub fn get_max_in_flight(&self) -> usize {
        self.max_ops
    }

    /// The bound on request bytes in flight.
    ///
    /// ```
    /// assert_eq!(slipstream_pg::PipelineOptions::new().get_max_in_flight_bytes(), 1 << 20);
    /// ```
    pub fn get_max_in_flight_bytes(&self) -> usize {
        self.max_bytes
    }
}

/// A handle to a queued operation, typed by what [`Pipeline::process`] returns for it.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let mut p = client.pipeline();
/// let op = p.query("SELECT 1", &[]).await?;
/// assert_eq!(op.id(), 0);
/// let rows = p.process(&op).await?;
/// # Ok(()) }
/// ```
pub struct Op<T> {
    id: u64,
    /// The client and the block the operation was queued in: pipeline serials are per client.
    client: u64,
    pipeline: u64,
    _output: PhantomData<fn() -> T>,
}

impl<T> Op<T> {
    /// The operation's position in its pipeline block, from 0: its index in the vector
    /// [`Pipeline::end`] returns.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// let first = p.query("SELECT 1", &[]).await?;
    /// let second = p.query("SELECT 2", &[]).await?;
    /// assert_eq!((first.id(), second.id()), (0, 1));
    /// let results = p.end().await;
    /// assert!(results[second.id() as usize].is_ok());
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl<T> Clone for Op<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Op<T> {}

impl<T> std::fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Op({})", self.id)
    }
}

/// What one pipeline operation produced.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::Output;
/// let mut p = client.pipeline();
/// p.query("SELECT 1", &[]).await?;
/// p.execute("SELECT 1", &[]).await?;
/// for result in p.end().await {
///     match result? {
///         Output::Rows(rows) => println!("{} rows", rows.len()),
///         Output::Affected(n) => println!("{n} rows affected"),
///         other => println!("{other:?}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub enum Output {
    /// The rows of a [`Pipeline::query`] or [`Pipeline::query_typed`].
    Rows(Vec<Row>),
    /// The row count of a [`Pipeline::execute`].
    Affected(u64),
    /// The statement of a [`Pipeline::prepare`].
    Prepared(Statement),
    /// A [`Pipeline::commit`] or [`Pipeline::rollback`] that succeeded.
    Done,
    /// The result was already returned by [`Pipeline::process`].
    Taken,
}

mod sealed {
    pub trait Sealed {}
}

/// A type [`Pipeline::process`] can return: `Vec<Row>`, `u64`, [`Statement`] or `()`.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let mut p = client.pipeline();
/// let rows = p.query("SELECT 1", &[]).await?; // Op<Vec<Row>>
/// let n = p.execute("UPDATE jobs SET state = 'new'", &[]).await?; // Op<u64>
/// let stmt = p.prepare("SELECT $1::int4").await?; // Op<Statement>
/// let rows: Vec<slipstream_pg::Row> = p.process(&rows).await?;
/// let updated: u64 = p.process(&n).await?;
/// let stmt: slipstream_pg::Statement = p.process(&stmt).await?;
/// # let _ = (rows, updated, stmt);
/// # Ok(()) }
/// ```
pub trait FromOutput: sealed::Sealed + Sized {
    #[doc(hidden)]
    fn from_output(output: Output) -> Option<Self>;
}

macro_rules! from_output {
    ($t:ty, $p:pat => $v:expr) => {
        impl sealed::Sealed for $t {}
        impl FromOutput for $t {
            fn from_output(output: Output) -> Option<Self> {
                match output {
                    $p => Some($v),
                    _ => None,
                }
            }
        }
    };
}
from_output!(Vec<Row>, Output::Rows(rows) => rows);
from_output!(u64, Output::Affected(n) => n);
from_output!(Statement, Output::Prepared(s) => s);
from_output!((), Output::Done => ());

/// A pipeline block on a [`Client`]: operations are queued without waiting for their replies,
/// which are read by [`Pipeline::process`] (through one operation) or [`Pipeline::end`] (all).
///
/// Queueing is `async` only for flow control: when more than
/// [`PipelineOptions::max_in_flight`] operations (or bytes) are outstanding, the call sends
/// and reads until a sixteenth of the window is free, so the pipe stays full without growing
/// without bound. Writing and reading happen together, so no pipeline size can deadlock.
///
/// Dropping a pipeline is safe: continue-on-error operations already queued still run, an open
/// abort-mode block (the operations since its last sync point; with an [`Pipeline::end`]
/// dropped before its `Sync` was sent, the block's last group) is taken back where it has not
/// begun to reach the socket, and what has is failed on purpose so that none of it commits
/// after a `COMMIT` the server already received, and the replies are discarded before the
/// connection's next request.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let stmt = client.prepare("SELECT name FROM users WHERE id = $1").await?;
/// let mut p = client.pipeline();
/// let mut ops = Vec::new();
/// for id in 1..=100i32 {
///     ops.push(p.query(&stmt, &[&id]).await?);
/// }
/// let first = p.process(&ops[0]).await?; // the other 99 may still be on the wire
/// for result in p.end().await {
///     result?;
/// }
/// # Ok(()) }
/// ```
pub struct Pipeline<'c> {
    client: &'c mut Client,
    serial: u64,
    options: PipelineOptions,
    /// Owed entries queued before the block's first operation (deferred `ROLLBACK`/`Close`s of
    /// dropped handles): their replies come first and are discarded.
    skip: usize,
    /// The connection was settled and deferred work queued, by the first operation.
    started: bool,
    /// Abort mode: the first failed operation of the sync block being read, and the error to
    /// name as the cause of the rollback of the operations before it.
    group_failed: Option<(u64, Error)>,
    /// Abort mode: the first operation of the implicit transaction being read (the block's
    /// first, or the one after a `COMMIT`/`ROLLBACK` in it).
    implicit_from: u64,
    /// What the server still owes, oldest first (see the module docs).
    expect: VecDeque<Expect>,
    /// `(first, end)` of every `Expect::Sync` in `expect`, in the same order: where the
    /// owed sync points are, found by binary search. Scanning `expect` for them instead cost
    /// the rest of the sync group per reply while `process` waited in abort mode, quadratic
    /// in the group (40,000 operations: 1.9 s).
    syncs: VecDeque<(u64, u64)>,
    results: Vec<Slot>,
    /// Every operation below this id has had its `Sync` answered.
    synced_through: u64,
    in_flight_ops: usize,
    in_flight_bytes: usize,
    /// Abort mode: the first operation queued since the last `Sync`, if any.
    group_start: Option<u64>,
    /// Abort mode: the stream offset (see `Connection::written`) where that operation's
    /// messages begin. Everything from it to the end of the write buffer is the open group,
    /// and nothing of it reached the server while `written` is not past it (see `Drop`).
    group_offset: u64,
    /// Operations were appended since the last `Sync` or `Flush`: the server may hold their
    /// replies until it gets one.
    needs_flush: bool,
    /// Operations queued since the connection was last driven.
    unsent: usize,
    /// The running total of reply lower bounds over every entry pushed (see
    /// `Pipeline::due`).
    due_pushed: u64,
    /// Consecutive `memopt_get` calls not yet written: they go out as one `get_many` when
    /// anything else is queued, the block is processed, synced or ended, or at the size cap.
    /// Its operations' ids follow the last one in `results`, which gets theirs when it is
    /// written, so nothing else may be queued while it is held.
    run: Option<Run>,
    /// Abort mode, while `end()` waits: the group its `Sync` closed. Dropped before that
    /// `Sync` began on the socket (a timeout), the block was given up like one never ended
    /// (see `Drop`).
    ending: Option<Ending>,
    ended: bool,
    /// The first operation whose reply was read after the last change in the block to a
    /// type the cache may hold (see `complete`). Rows read before it whose types were not
    /// resolved as they arrived were written by a definition the server may no longer have
    /// when `end` looks the types up (an `ALTER TYPE` after them, or a `ROLLBACK` undoing
    /// one): `end` leaves them unresolved (an error to read as a custom type, the values
    /// still there for `Row::get_raw`) rather than read them by the later definition.
    resolvable_from: u64,
}

/// The abort-mode group that [`Pipeline::end`] closed, and what `end` queued from its `Sync`
/// on (that `Sync`, and a held run of lookups written after it), to be taken back if `end` is
/// dropped before any of it was written. Nothing of it can have been answered then, so its
/// entries are still the last of each queue.
struct Ending {
    /// The group's first operation, and where its messages begin (`Pipeline::group_offset`).
    first: u64,
    offset: u64,
    /// The stream offset of the group's `Sync`.
    sync_at: u64,
    /// How many entries `end` pushed on the connection's owed queue, on `expect` and on
    /// `syncs`.
    owed: usize,
    expect: usize,
    syncs: usize,
}

/// A run of [`Pipeline::memopt_get`] calls on one table with one key kind, held to be sent
/// as one `memopt.get_many`. The server answers it with one element per key, a NULL where a
/// key has no row, so element `i` is operation `first + i`'s row.
struct Run {
    table: MemoptTable,
    /// The `get_many` overload for the key kind (and the layout it checks).
    function: Callee,
    text: bool,
    /// The keys as `get_many`'s array elements (`encode_key_element`).
    keys: bytes::BytesMut,
    count: u64,
}

enum Expect {
    Op(Pending),
    /// The `Sync` that closes operations `first..end`.
    Sync {
        first: u64,
        end: u64,
        /// See [`Pending::due_end`].
        due_end: u64,
    },
}

impl Expect {
    /// The last operation whose result this entry completes: entries are in order of it.
    fn last_op(&self) -> u64 {
        match self {
            Expect::Op(p) => p.id + p.kind.ops() - 1,
            Expect::Sync { end, .. } => end - 1,
        }
    }

    fn due_end(&self) -> u64 {
        match self {
            Expect::Op(p) => p.due_end,
            Expect::Sync { due_end, .. } => *due_end,
        }
    }
}

struct Pending {
    id: u64,
    /// Stream offset just past the operation's last byte (see `Connection::written`).
    end: u64,
    kind: Kind,
    /// Request bytes, for the in-flight bound.
    bytes: usize,
    /// The running total of the block's reply lower bounds through this entry (see
    /// `Pipeline::due`).
    due_end: u64,
    reply: Reply,
    /// The type cache's generation when it was queued. A prepared statement's reply is not
    /// described, so its rows are read by the definitions the statement holds: if the cache
    /// was forgotten since (an `ALTER TYPE` earlier in this block), they may be stale.
    types_generation: u64,
    /// The caller's prepared statement it runs, if any: a stale one's error names its SQL.
    statement: Option<Statement>,
}

enum Kind {
    Query,
    Execute,
    Commit,
    Rollback,
    Prepare {
        name: String,
        sql: String,
        params: Option<Vec<Type>>,
    },
    /// memopt's fast lookup: a `FunctionCall`, its own sync point (see `memopt.rs`).
    FunctionCall {
        table: MemoptTable,
        many: bool,
    },
    /// A [`Run`] of `count` single-key lookups, sent as one `get_many` `FunctionCall`: the
    /// operations `id..id + count` of its `Pending`. `rows` holds the reply, one per key.
    LookupRun {
        table: MemoptTable,
        count: u64,
        rows: Vec<Option<Row>>,
    },
}

impl Kind {
    /// How many of the block's operations this entry answers.
    fn ops(&self) -> u64 {
        match self {
            Kind::LookupRun { count, .. } => *count,
            _ => 1,
        }
    }

    /// A `FunctionCall`: answered with its own `ReadyForQuery`, no `Sync` written.
    fn is_function_call(&self) -> bool {
        matches!(self, Kind::FunctionCall { .. } | Kind::LookupRun { .. })
    }
}

enum Slot {
    Waiting,
    Ready(Result<Output, Error>),
    Taken,
}

/// How far [`Pipeline::pump`] reads.
#[derive(Clone, Copy)]
enum Until {
    /// The operation's result is final.
    Op(u64),
    /// A sixteenth of the window free again. Reading only that much keeps the window nearly
    /// full: draining half of it before refilling would let the server idle for part of every
    /// round trip (at 5 ms RTT that halved the read-only rate).
    Window,
    /// Everything queued is answered.
    All,
}

/// `Sync` is five bytes on the wire.
const SYNC_BYTES: usize = 5;
/// The fewest bytes the server can answer a continue-on-error operation with, `Sync` not
/// included: every reply ends with at least one message, and the smallest message is its
/// 5-byte header (`BindComplete`, `EmptyQueryResponse`, ...; an `ErrorResponse` is larger).
/// A true lower bound whatever the statement, its rows or its failure: a bigger figure
/// could leave a reader waiting for bytes that never come (see `Pipeline::due`).
const MIN_OP_REPLY: u64 = 5;
/// A `Sync` is always answered by `ReadyForQuery`, exactly six bytes.
const READY_FOR_QUERY_BYTES: u64 = 6;

impl Client {
    /// Begins a pipeline block in abort-on-error mode (the default: see [`PipelineMode`])
    /// with the default window. For operations that must each commit or fail on their own,
    /// use [`Client::pipeline_with`] and [`PipelineMode::ContinueOnError`].
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// let a = p.execute("CREATE TEMP TABLE t (id int)", &[]).await?;
    /// let b = p.execute("INSERT INTO t VALUES (1), (2)", &[]).await?;
    /// let c = p.query("SELECT id FROM t ORDER BY id", &[]).await?;
    /// assert_eq!(p.process(&b).await?, 2);
    /// assert_eq!(p.process(&c).await?.len(), 2);
    /// p.end().await;
    /// # Ok(()) }
    /// ```
    pub fn pipeline(&mut self) -> Pipeline<'_> {
        self.pipeline_with(PipelineOptions::default())
    }

    /// Begins a pipeline block with the given mode and window.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    /// p.execute("INSERT INTO audit VALUES (now())", &[]).await?;
    /// p.execute("UPDATE counters SET n = n + 1", &[]).await?;
    /// // Both or neither: one implicit transaction, one Sync.
    /// for r in p.end().await {
    ///     r?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn pipeline_with(&mut self, options: PipelineOptions) -> Pipeline<'_> {
        self.next_pipeline += 1;
        let serial = self.next_pipeline;
        // The first operation queued settles the connection and queues the deferred work of
        // dropped handles; a broken connection is reported by it.
        Pipeline {
            client: self,
            serial,
            options,
            skip: 0,
            started: false,
            group_failed: None,
            implicit_from: 0,
            expect: VecDeque::new(),
            syncs: VecDeque::new(),
            results: Vec::new(),
            synced_through: 0,
            in_flight_ops: 0,
            in_flight_bytes: 0,
            group_start: None,
            group_offset: 0,
            needs_flush: false,
            unsent: 0,
            due_pushed: 0,
            run: None,
            ending: None,
            ended: false,
            resolvable_from: 0,
        }
    }
}

impl Pipeline<'_> {
    /// Queues a statement whose rows [`Pipeline::process`] returns. A SQL string runs on the
    /// unnamed statement, its parameter types chosen from the Rust values (not through the
    /// statement cache); a value of a custom `ToSql` type the client cannot name is refused:
    /// prepare the statement, or use [`Pipeline::query_typed`].
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT $1::int4 * 2").await?;
    /// let mut p = client.pipeline();
    /// let op = p.query(&stmt, &[&21i32]).await?;
    /// assert_eq!(p.process(&op).await?[0].get::<_, i32>(0)?, 42);
    /// # Ok(()) }
    /// ```
    pub async fn query<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<Op<Vec<Row>>, Error> {
        self.queue_statement(statement.source(), params, Kind::Query)
            .await
    }

    /// Queues a statement whose row count [`Pipeline::process`] returns; rows are discarded.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("UPDATE stock SET qty = qty - 1 WHERE item = $1").await?;
    /// let mut p = client.pipeline();
    /// let op = p.execute(&stmt, &[&7i32]).await?;
    /// let updated: u64 = p.process(&op).await?;
    /// # Ok(()) }
    /// ```
    pub async fn execute<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<Op<u64>, Error> {
        self.queue_statement(statement.source(), params, Kind::Execute)
            .await
    }

    /// Queues SQL with parameters whose types the caller states, returning rows.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::types::Type;
    /// let mut p = client.pipeline();
    /// let op = p.query_typed("SELECT $1 + 1", &[(&41i32, Type::INT4)]).await?;
    /// assert_eq!(p.process(&op).await?[0].get::<_, i32>(0)?, 42);
    /// # Ok(()) }
    /// ```
    pub async fn query_typed(
        &mut self,
        sql: &str,
        params: &[(Param<'_>, Type)],
    ) -> Result<Op<Vec<Row>>, Error> {
        self.start_op(sql).await?;
        let (wires, values) = split_typed(params);
        let mark = self.client.conn.wbuf.len();
        let plan = Plan::OneOff { wires };
        encode_plan(&mut self.client.conn.wbuf, &plan, sql, &values, 0)?;
        let id = self.push(Kind::Query, Arc::from(Vec::new()), mark);
        self.after_queue(1).await;
        Ok(self.handle(id))
    }

    /// Queues a `Parse` + `Describe` of a named statement; [`Pipeline::process`] returns the
    /// [`Statement`]. It can be used once its result is read (its parameter types are needed
    /// to encode values).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// let a = p.prepare("SELECT * FROM users WHERE id = $1").await?;
    /// let b = p.prepare("SELECT * FROM orders WHERE user_id = $1").await?;
    /// let (users, orders) = (p.process(&a).await?, p.process(&b).await?);
    /// # Ok(()) }
    /// ```
    pub async fn prepare(&mut self, sql: &str) -> Result<Op<Statement>, Error> {
        self.start_op(sql).await?;
        let name = self.client.next_statement_name();
        let buf = &mut self.client.conn.wbuf;
        let mark = buf.len();
        if let Err(e) = frontend::parse(&name, sql, std::iter::empty(), buf)
            .and_then(|()| frontend::describe(b'S', &name, buf))
        {
            buf.truncate(mark);
            return Err(Error::usage(format!("cannot send this statement: {e}")));
        }
        self.client.conn.parsing(&name);
        let kind = Kind::Prepare {
            name,
            sql: sql.to_string(),
            params: None,
        };
        let id = self.push(kind, Arc::from(Vec::new()), mark);
        self.after_queue(1).await;
        Ok(self.handle(id))
    }

    /// Queues a `COMMIT`. If the transaction had failed, the server rolls it back instead and
    /// this operation fails with [`ErrorKind::Aborted`](crate::ErrorKind::Aborted).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// p.execute("BEGIN", &[]).await?;
    /// p.execute("INSERT INTO t VALUES (1)", &[]).await?;
    /// let commit = p.commit().await?;
    /// p.process(&commit).await?; // Err if the INSERT failed
    /// # Ok(()) }
    /// ```
    pub async fn commit(&mut self) -> Result<Op<()>, Error> {
        self.queue_statement(Source::Sql("COMMIT"), &[], Kind::Commit)
            .await
    }

    /// Queues a `ROLLBACK`.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// p.execute("BEGIN", &[]).await?;
    /// p.execute("DELETE FROM t", &[]).await?;
    /// p.rollback().await?;
    /// p.end().await;
    /// # Ok(()) }
    /// ```
    pub async fn rollback(&mut self) -> Result<Op<()>, Error> {
        self.queue_statement(Source::Sql("ROLLBACK"), &[], Kind::Rollback)
            .await
    }

    /// Queues a fast primary-key lookup ([`Client::memopt_get`]); [`Pipeline::process`]
    /// returns the row found, if any, as a one- or zero-row `Vec`: what a lone
    /// `Client::memopt_get` at that point of the block returns.
    ///
    /// Consecutive lookups on the same [`MemoptTable`] (or a handle of the table resolved with
    /// the same columns: never one resolved on the other side of DDL that changed them) with
    /// the same key kind are coalesced:
    /// they are held and sent as one `memopt.get_many` call (one message, one reply, one
    /// `ReadyForQuery`) when anything else is queued, when the block is processed
    /// ([`Pipeline::process`]), synced or ended, or when a quarter of
    /// [`PipelineOptions::max_in_flight`] (or of its bytes) is held. The server returns one
    /// element per key, so each lookup gets its own row, a duplicate key included.
    ///
    /// Like a lone call, a run is a sync point in an abort-on-error block: the operations
    /// queued before it are given their `Sync` first (so it sees their writes), a failure
    /// before it does not skip it, and its failure does not skip what follows. It differs
    /// from as many lone calls in two ways: the run reads under one snapshot (outside a
    /// transaction block, lone calls would each take their own, and could see a row another
    /// session committed between two of them), and an error fails every lookup of the run,
    /// each with the server's error (e.g. permission denied on the table).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let users = client.memopt_table("users").await?;
    /// let mut p = client.pipeline();
    /// let ops: Vec<_> = {
    ///     let mut ops = Vec::new();
    ///     for id in 1..=100i64 {
    ///         ops.push(p.memopt_get(&users, &id).await?); // held: one get_many for all 100
    ///     }
    ///     ops
    /// };
    /// let first = p.process(&ops[0]).await?; // Vec<Row> of zero or one row
    /// p.end().await;
    /// # Ok(()) }
    /// ```
    pub async fn memopt_get<K: MemoptKey + ?Sized>(
        &mut self,
        table: &MemoptTable,
        key: &K,
    ) -> Result<Op<Vec<Row>>, Error> {
        let fns = self.functions(table).await?;
        let text = key.is_text();
        let function = fns.pick(text, true, table)?;
        if self
            .run
            .as_ref()
            .is_some_and(|r| !r.table.same_columns(table) || r.text != text)
        {
            self.flush_run();
        }
        self.client.conn.check_usable()?;
        self.settle().await?;
        let run = self.run.get_or_insert_with(|| Run {
            table: table.clone(),
            function,
            text,
            keys: bytes::BytesMut::new(),
            count: 0,
        });
        if let Err(e) = encode_key_element(&mut run.keys, key) {
            // A run is never empty: its reply is matched by count.
            if run.count == 0 {
                self.run = None;
            }
            return Err(e);
        }
        run.count += 1;
        let id = self.results.len() as u64 + run.count - 1;
        let full = run.count >= (self.options.max_ops as u64 / 4).max(1)
            || run.keys.len() >= self.options.max_bytes / 4;
        if full {
            let count = run.count as usize;
            self.flush_run();
            self.after_queue(count).await;
        }
        Ok(self.handle(id))
    }

    /// Queues a multi-key lookup ([`Client::memopt_get_many`]): the rows found, in the keys'
    /// order. A sync point, as [`Pipeline::memopt_get`].
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let users = client.memopt_table("users").await?;
    /// let mut p = client.pipeline();
    /// let op = p.memopt_get_many(&users, &[1i64, 2, 3]).await?;
    /// let rows = p.process(&op).await?;
    /// # Ok(()) }
    /// ```
    pub async fn memopt_get_many<K: MemoptKey>(
        &mut self,
        table: &MemoptTable,
        keys: &[K],
    ) -> Result<Op<Vec<Row>>, Error> {
        let function = self.functions(table).await?.pick(K::TEXT, true, table)?;
        self.start_op("").await?;
        let mark = self.client.conn.wbuf.len();
        self.client.conn.encode(|buf| {
            encode_function_call(buf, function, table.oid(), |buf| {
                crate::memopt::encode_keys(buf, keys, K::TEXT)
            })
        })?;
        // The open abort-mode group gets its `Sync` before the call, as before a run
        // (`flush_run`): after an error the server skips everything up to a `Sync`, a
        // FunctionCall too, whose reply and `ReadyForQuery` would then never come. Closed
        // only once the call is encoded, so a refused one leaves the group as it was.
        let call = self.client.conn.wbuf.split_off(mark);
        self.close_group();
        let mark = self.client.conn.wbuf.len();
        self.client.conn.wbuf.unsplit(call);
        let kind = Kind::FunctionCall {
            table: table.clone(),
            many: true,
        };
        let id = self.push(kind, Arc::from(Vec::new()), mark);
        self.after_queue(1).await;
        Ok(self.handle(id))
    }

    /// The memopt function OIDs for a lookup on `table`.
    async fn functions(&mut self, table: &MemoptTable) -> Result<MemoptFunctions, Error> {
        check_table(table, self.client.id)?;
        // The OIDs are resolved by a query of their own, which must come before the block's
        // first operation; afterwards (a DISCARD ALL inside the block) the caller is told.
        let pending_discard = self.client.conn.functions_discarded;
        match self.client.memopt {
            Some(f) if !pending_discard => Ok(f),
            _ if !self.started => self.client.memopt_functions().await,
            _ => Err(Error::usage(
                "the memopt functions are not resolved on this connection (DISCARD ALL ran in \
                 this pipeline block, or an earlier lookup in it found memopt dropped): end the \
                 block and call Client::memopt_table again",
            )),
        }
    }

    /// Writes the held run of lookups, if any, as one `get_many` `FunctionCall` and records
    /// it. If it cannot be written (the connection broke), each of its operations fails with
    /// the cause: their ids were handed out.
    fn flush_run(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        // After an error, the server skips every message up to the next Sync, a FunctionCall
        // too: the open abort-mode group must be closed first. That also makes the run see
        // the group's writes.
        self.close_group();
        let mark = self.client.conn.wbuf.len();
        let written = self.client.conn.check_usable().and_then(|()| {
            let n = i32::try_from(run.count)
                .map_err(|_| Error::usage("too many keys for one lookup"))?;
            self.client.conn.encode(|buf| {
                encode_function_call(buf, run.function, run.table.oid(), |buf| {
                    encode_keys_header(buf, n, run.text);
                    buf.extend_from_slice(&run.keys);
                    Ok(())
                })
            })
        });
        match written {
            Ok(()) => {
                let kind = Kind::LookupRun {
                    table: run.table,
                    count: run.count,
                    rows: Vec::new(),
                };
                self.push(kind, Arc::from(Vec::new()), mark);
            }
            Err(e) => {
                for _ in 0..run.count {
                    self.results.push(Slot::Ready(Err(e.duplicate())));
                }
            }
        }
    }

    /// Adds a sync point in an abort-on-error block: a failure before it does not skip the
    /// operations after it, and outside a transaction block the operations before it commit
    /// as one implicit transaction. Does nothing in continue-on-error mode, where every
    /// operation is already followed by a `Sync`.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    /// p.execute("SELECT 1/0", &[]).await?;
    /// let skipped = p.execute("SELECT 1", &[]).await?;
    /// p.sync();
    /// let runs = p.execute("SELECT 2", &[]).await?;
    /// assert!(p.process(&skipped).await.is_err());
    /// assert_eq!(p.process(&runs).await?, 1);
    /// # Ok(()) }
    /// ```
    pub fn sync(&mut self) {
        self.flush_run();
        self.close_group();
    }

    /// Gives the open abort-mode group, if any, its `Sync`.
    fn close_group(&mut self) {
        if let Some(first) = self.group_start.take() {
            self.push_sync(first);
            self.needs_flush = false;
            self.client.conn.open_group = None;
        }
    }

    /// Sends what is queued and reads replies until `op`'s result is in, then returns it.
    /// Later operations may still be unread. In continue-on-error mode this includes the
    /// operation's `Sync`, so a failure to commit its implicit transaction is reported here;
    /// in abort-on-error mode it does once a sync point after the operation is queued
    /// ([`Pipeline::sync`]), so the result is then the committed outcome (before that, it says
    /// the statement ran).
    /// If later operations are queued behind `op` and not yet sent, a `Flush` goes right after
    /// it (after its `Sync` in continue-on-error mode), so its reply comes as soon as it has
    /// run, whatever those operations do, on a server running pipeline_flush too.
    ///
    /// Cancel-safe: if the future is dropped, what was read stays read; call it again.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// let count = p.query("SELECT count(*) FROM pg_class", &[]).await?;
    /// let n: i64 = p.process(&count).await?[0].get(0)?;
    /// # Ok(()) }
    /// ```
    pub async fn process<T: FromOutput>(&mut self, op: &Op<T>) -> Result<T, Error> {
        self.unsent = 0;
        if op.pipeline != self.serial || op.client != self.client.id {
            return Err(Error::usage(
                "this operation belongs to another pipeline block",
            ));
        }
        let index = op.id as usize;
        if index >= self.results.len() || !self.is_final(op.id) {
            // A held lookup, or one to wait for: the server may as well have the run.
            self.flush_run();
        }
        if index >= self.results.len() {
            return Err(Error::usage(
                "this operation belongs to another pipeline block",
            ));
        }
        if !self.is_final(op.id) {
            self.flush_through(op.id);
            self.request_flush();
            self.pump(Until::Op(op.id)).await;
        }
        match std::mem::replace(&mut self.results[index], Slot::Taken) {
            Slot::Ready(Ok(output)) => T::from_output(output).ok_or_else(|| {
                Error::protocol("pipeline result of the wrong kind: this is a bug in slipstream-pg")
            }),
            Slot::Ready(Err(e)) => Err(e),
            Slot::Taken => Err(Error::usage(format!(
                "the result of pipeline operation {} was already returned by process",
                op.id
            ))),
            Slot::Waiting => Err(Error::protocol(format!(
                "pipeline operation {} has no result: this is a bug in slipstream-pg",
                op.id
            ))),
        }
    }

    /// Ends the block: sends what is queued (with the final `Sync` of an abort-mode block),
    /// reads every reply, and returns one result per operation in queue order (index =
    /// [`Op::id`]). Results already returned by [`Pipeline::process`] are [`Output::Taken`].
    ///
    /// If the connection fails, every operation not yet answered fails with the cause.
    ///
    /// Dropped before the block's final `Sync` began to reach the socket (a timeout on a
    /// server slow to read), the block is given up as if `end` had not been called: nothing
    /// of its last sync group commits. Once that `Sync` went out, the block runs as sent.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::ContinueOnError));
    /// p.execute("SELECT 1", &[]).await?;
    /// p.execute("SELECT * FROM missing", &[]).await?;
    /// let results = p.end().await;
    /// assert!(results[0].is_ok() && results[1].is_err());
    /// // In abort mode (the default) operation 0 would be reported as rolled back too.
    /// # Ok(()) }
    /// ```
    pub async fn end(mut self) -> Vec<Result<Output, Error>> {
        let open = self.group_start.map(|first| {
            let conn = &self.client.conn;
            let counts = (conn.owed.len(), self.expect.len(), self.syncs.len());
            (
                first,
                self.group_offset,
                conn.written + conn.wbuf.len() as u64,
                counts,
            )
        });
        self.sync();
        if let Some((first, offset, sync_at, (owed, expect, syncs))) = open {
            let owed = self.client.conn.owed.len() - owed;
            self.ending = Some(Ending {
                first,
                offset,
                sync_at,
                owed,
                expect: self.expect.len() - expect,
                syncs: self.syncs.len() - syncs,
            });
            // Until every reply is in, a leaked future gives the group up (see
            // `Connection::ending_sync`).
            self.client.conn.open_group = Some(offset);
            self.client.conn.ending_sync = Some((sync_at, owed));
        }
        self.pump(Until::All).await;
        // Before the type lookups: a request of its own must not take this `Sync` back.
        self.client.conn.open_group = None;
        self.client.conn.ending_sync = None;
        self.ended = true;
        self.look_up_types().await;
        std::mem::take(&mut self.results)
            .into_iter()
            .enumerate()
            .map(|(id, slot)| match slot {
                Slot::Ready(r) => r,
                Slot::Taken => Ok(Output::Taken),
                Slot::Waiting => Err(Error::protocol(format!(
                    "pipeline operation {id} has no result: this is a bug in slipstream-pg"
                ))),
            })
            .collect()
    }

    /// Once every reply is in: looks up the types of results that the connection's type cache
    /// did not hold when they arrived (no request can be sent while later operations are owed;
    /// see `type_info.rs`), and patches those results. A failed lookup leaves the placeholders
    /// (the values still read with `Row::get_raw`); a broken connection fails every result
    /// still to be returned.
    async fn look_up_types(&mut self) {
        let mut types = Vec::new();
        let from = self.resolvable_from as usize;
        for (id, slot) in self.results.iter().enumerate() {
            match slot {
                Slot::Ready(Ok(Output::Rows(rows))) if id >= from => types.extend(
                    rows.iter()
                        .take(1)
                        .flat_map(|r| r.columns())
                        .map(Column::type_),
                ),
                Slot::Ready(Ok(Output::Prepared(stmt))) => {
                    types.extend(stmt.params());
                    types.extend(stmt.columns().iter().map(Column::type_));
                }
                _ => {}
            }
        }
        let types: Vec<Type> = types.into_iter().cloned().collect();
        if !types.iter().any(crate::type_info::is_placeholder) {
            return;
        }
        // With every type in the cache, the placeholders are still patched: a memopt lookup's
        // rows are not resolved as their reply arrives, and a type the client path looked up
        // meanwhile is in the cache, not in them.
        if !self.client.types.missing(&types).is_empty()
            && let Err(e) = self.client.look_up_types(&types).await
        {
            tracing::warn!(
                target: "slipstream_pg::types",
                "looking up the pipeline results' types failed ({e}); the values read only with \
                 Row::get_raw"
            );
            return;
        }
        let cache = &self.client.types;
        for (id, slot) in self.results.iter_mut().enumerate() {
            match slot {
                Slot::Ready(Ok(Output::Rows(rows))) if id >= from => {
                    if let Some(columns) = rows
                        .first()
                        .and_then(|r| cache.resolve_columns(r.columns_arc()))
                    {
                        crate::type_info::patch_rows(rows, &columns);
                    }
                }
                Slot::Ready(Ok(Output::Prepared(stmt))) => stmt.resolve_types(cache),
                _ => {}
            }
        }
    }

    /// Operations queued in this block so far.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// p.query("SELECT 1", &[]).await?;
    /// p.query("SELECT 2", &[]).await?;
    /// assert_eq!(p.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.results.len() + self.held()
    }

    /// Lookups held in the run not yet written.
    fn held(&self) -> usize {
        self.run.as_ref().map_or(0, |r| r.count as usize)
    }

    /// True if nothing was queued yet.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let p = client.pipeline();
    /// assert!(p.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Operations whose replies have not been read yet.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut p = client.pipeline();
    /// p.execute("SELECT 1", &[]).await?;
    /// assert_eq!(p.unfinished(), 1);
    /// # Ok(()) }
    /// ```
    pub fn unfinished(&self) -> usize {
        self.results
            .iter()
            .filter(|s| matches!(s, Slot::Waiting))
            .count()
            + self.held()
    }

    async fn queue_statement<T>(
        &mut self,
        source: Source<'_>,
        params: &[Param<'_>],
        kind: Kind,
    ) -> Result<Op<T>, Error> {
        let sql = match &source {
            Source::Prepared(stmt) => stmt.sql(),
            Source::Sql(sql) | Source::Uncached(sql) => sql,
        };
        self.start_op(sql).await?;
        let mark = self.client.conn.wbuf.len();
        let columns = match source {
            Source::Prepared(stmt) => {
                check_owner(stmt, self.client.id)?;
                // Prepared in an earlier block and taken before its `end` looked its types up:
                // the cache may hold them now (no lookup can be sent from here).
                stmt.resolve_shared(&self.client.types);
                // A pipeline cannot look the types up again before the operation (the lookup
                // would be a request of its own in the middle of the block): a statement
                // whose types may be stale is refused here; `Client::query` and the others
                // check it with one lookup.
                if (self.client.conn.statements_discarded
                    || !stmt.types_checked_at(self.client.types.generation()))
                    && let Some(t) = stmt.looked_up_types().next()
                {
                    return Err(crate::query::stale_statement_types(
                        stmt,
                        t,
                        false,
                        "prepare it again, or run it once outside a pipeline (which looks its \
                         types up again)",
                    ));
                }
                let plan = Plan::Named {
                    stmt: stmt.clone(),
                    cached: false,
                };
                encode_plan(&mut self.client.conn.wbuf, &plan, stmt.sql(), params, 0)?;
                stmt.columns_arc().clone()
            }
            // Pipelined SQL runs on the unnamed statement, not through the statement cache: a
            // stale cached statement could not be re-prepared without breaking the pipeline's
            // order, and prepare-on-miss would need its description before later operations.
            Source::Sql(sql) | Source::Uncached(sql) => {
                let Some(wires) = param_types::infer(params, &mut self.client.conn.wbuf) else {
                    return Err(Error::usage(
                        "a parameter's PostgreSQL type cannot be chosen from its Rust type (a custom \
                         ToSql type?), and a pipeline cannot wait for the server to name it: prepare \
                         the statement first, or use Pipeline::query_typed",
                    ));
                };
                let plan = Plan::OneOff { wires };
                encode_plan(&mut self.client.conn.wbuf, &plan, sql, params, 0)?;
                Arc::from(Vec::new())
            }
        };
        let id = self.push(kind, columns, mark);
        if let Source::Prepared(stmt) = source {
            // Its entry, or none if it was skipped at once; in continue mode its `Sync`'s
            // entry follows it.
            let pending = self.expect.iter_mut().rev().take(2).find_map(|e| match e {
                Expect::Op(pending) if pending.id == id => Some(pending),
                _ => None,
            });
            if let Some(pending) = pending {
                pending.statement = Some(stmt.clone());
            }
        }
        self.after_queue(1).await;
        Ok(self.handle(id))
    }

    fn handle<T>(&self, id: u64) -> Op<T> {
        Op {
            id,
            client: self.client.id,
            pipeline: self.serial,
            _output: PhantomData,
        }
    }

    /// Checks that an operation may be queued: the connection works and it is not a COPY. The
    /// block's first operation settles the connection first (see the module docs). Writes
    /// the held run of lookups, which comes before this operation.
    async fn start_op(&mut self, sql: &str) -> Result<(), Error> {
        self.client.conn.check_usable()?;
        self.settle().await?;
        self.flush_run();
        if is_stream_copy(sql) {
            return Err(Error::usage(
                "COPY ... FROM STDIN / TO STDOUT cannot run in a pipeline (its data is a stream \
                 of its own): end the pipeline and use Client::copy_in or Client::copy_out",
            ));
        }
        Ok(())
    }

    /// The block's first operation settles the connection and queues deferred work first.
    async fn settle(&mut self) -> Result<(), Error> {
        if !self.started {
            self.client.conn.start_request().await?;
            // An `ALTER TYPE` (or `DISCARD ALL`) the connection ran before the block: no
            // reply in it may be read by the definitions it may have changed.
            self.client.forget_discarded();
            self.skip = self.client.conn.owed.len();
            self.started = true;
        }
        Ok(())
    }

    /// Records an entry whose messages were appended to the write buffer from `mark` on, and
    /// what closes it: in continue mode its `Sync`, for a `FunctionCall` its own
    /// `ReadyForQuery`. Returns its (first) operation's id. The one place an entry is pushed.
    fn push(&mut self, kind: Kind, columns: Arc<[Column]>, mark: usize) -> u64 {
        let id = self.results.len() as u64;
        if let Some(skip) = self.skipped_at_once(id, &kind) {
            // The server skips it without a reply, up to the group's `Sync`: its messages
            // need not go, and nothing may wait for its reply (its `ReadyForQuery` would be
            // read as that, and a full window would wait for ever).
            self.client.conn.wbuf.truncate(mark);
            if let Kind::Prepare { name, .. } = &kind {
                // Never created: see `complete`.
                self.client.conn.claim(name);
            }
            self.results.push(Slot::Ready(Err(skip)));
            return id;
        }
        let bytes = self.client.conn.wbuf.len() - mark;
        let keep_rows = !matches!(kind, Kind::Execute);
        let ops = kind.ops();
        let function = kind.is_function_call();
        self.results.extend((0..ops).map(|_| Slot::Waiting));
        let end = self.client.conn.written + self.client.conn.wbuf.len() as u64;
        // A FunctionCall is answered by a FunctionCallResponse or an error, then
        // ReadyForQuery: no less than any operation's reply and its Sync's (the lower bound
        // `due` sums).
        if self.options.mode == PipelineMode::ContinueOnError {
            self.due_pushed += MIN_OP_REPLY;
        }
        self.expect.push_back(Expect::Op(Pending {
            id,
            end,
            kind,
            bytes,
            due_end: self.due_pushed,
            reply: Reply::new(columns, keep_rows),
            types_generation: self.client.types.generation(),
            statement: None,
        }));
        self.in_flight_ops += ops as usize;
        self.in_flight_bytes += bytes;
        if function {
            // Its ReadyForQuery is read as a Sync's is: the same entry, with no Sync written.
            self.push_sync_entry(id, Owed::FunctionCall);
            return id;
        }
        match self.options.mode {
            PipelineMode::ContinueOnError => self.push_sync(id),
            PipelineMode::AbortOnError => {
                if self.group_start.is_none() {
                    self.group_start = Some(id);
                    self.group_offset = self.client.conn.written + mark as u64;
                    self.client.conn.open_group = Some(self.group_offset);
                }
                self.client.conn.open_group_last = (end, bytes);
                self.needs_flush = true;
            }
        }
        id
    }

    /// Abort mode: operation `id` joins a group whose failure was already read (the caller
    /// queued on after `process` returned it, or a sliding window read it): the server will
    /// skip it, so it fails at once as `complete` fails those queued before the failure was
    /// read. A `FunctionCall` closes the group first, so it is never skipped.
    fn skipped_at_once(&self, id: u64, kind: &Kind) -> Option<Error> {
        let first = self.group_start?;
        let (failed, cause) = self.group_failed.as_ref()?;
        if self.options.mode != PipelineMode::AbortOnError
            || kind.is_function_call()
            || *failed < first
        {
            return None;
        }
        let skip = Error::aborted(
            format!(
                "pipeline operation {id} was not run: operation {failed} failed earlier in the same sync block"
            ),
            *failed,
            cause,
        );
        Some(self.client.conn.explain_failed(skip))
    }

    /// Appends a `Sync` closing the operations from `first` to the last one queued.
    fn push_sync(&mut self, first: u64) {
        frontend::sync(&mut self.client.conn.wbuf);
        self.push_sync_entry(first, Owed::PipelineSync);
    }

    /// Records the `ReadyForQuery` owed for the operations from `first` to the last one
    /// queued (counted as a `Sync`'s five bytes in flight).
    fn push_sync_entry(&mut self, first: u64, owed: Owed) {
        self.client.conn.owed.push_back(owed);
        self.in_flight_bytes += SYNC_BYTES;
        if self.options.mode == PipelineMode::ContinueOnError {
            self.due_pushed += READY_FOR_QUERY_BYTES;
        }
        let end = self.results.len() as u64;
        self.expect.push_back(Expect::Sync {
            first,
            end,
            due_end: self.due_pushed,
        });
        self.syncs.push_back((first, end));
    }

    /// Makes the server send what it holds for an open abort-mode block.
    fn request_flush(&mut self) {
        if self.needs_flush {
            frontend::flush(&mut self.client.conn.wbuf);
            self.needs_flush = false;
        }
    }

    /// Makes the server send operation `id`'s reply as soon as it has run, by putting a
    /// `Flush` right after its messages (in continue-on-error mode, after its `Sync`) if they
    /// are still unsent: otherwise a later operation that blocks (on a lock, say) would hold
    /// the reply back. In an abort-mode block the server flushes nothing before the block's
    /// `Sync`; in continue-on-error mode it flushes at each `Sync`, unless it runs
    /// pipeline_flush (extension/pipeline_flush), which skips that flush while more input is
    /// buffered, so the `Flush` is what releases the reply there.
    fn flush_through(&mut self, id: u64) {
        let after_sync = self.options.mode == PipelineMode::ContinueOnError;
        let conn = &mut self.client.conn;
        let Some(end) = self.expect.iter().find_map(|e| match e {
            Expect::Op(p) if (p.id..p.id + p.kind.ops()).contains(&id) => {
                // A FunctionCall has no `Sync` of its own (its ReadyForQuery comes anyway).
                let sync = if after_sync && !p.kind.is_function_call() {
                    SYNC_BYTES as u64
                } else {
                    0
                };
                Some(p.end + sync)
            }
            _ => None,
        }) else {
            return;
        };
        let queued_end = conn.written + conn.wbuf.len() as u64;
        if end <= conn.written || end >= queued_end {
            // Already sent (the `Flush` that followed that write releases it), or the last
            // thing queued (`request_flush` appends one).
            return;
        }
        let at = (end - conn.written) as usize;
        let tail = conn.wbuf.split_off(at);
        frontend::flush(&mut conn.wbuf);
        let added = (conn.wbuf.len() - at) as u64;
        conn.wbuf.unsplit(tail);
        for e in &mut self.expect {
            if let Expect::Op(p) = e
                && p.end > end
            {
                p.end += added;
            }
        }
        if self.client.conn.open_group_last.0 > end {
            self.client.conn.open_group_last.0 += added;
        }
        if self.group_start.is_some() && self.group_offset >= end {
            self.group_offset += added;
            self.client.conn.open_group = Some(self.group_offset);
        }
    }

    /// The sliding window: past either bound, send and read until a sixteenth of it is free.
    /// Below it, every sixteenth of the window is sent as it fills, and whatever replies have
    /// arrived are read, without waiting: the server is never left idle while operations sit
    /// in our buffer.
    async fn after_queue(&mut self, ops: usize) {
        self.unsent += ops;
        if self.in_flight_ops > self.options.max_ops
            || self.in_flight_bytes > self.options.max_bytes
        {
            self.request_flush();
            self.unsent = 0;
            self.pump(Until::Window).await;
        } else if self.unsent >= (self.options.max_ops / 16).max(1) {
            self.request_flush();
            self.unsent = 0;
            poll_fn(|cx| match self.poll_pump(cx, Until::All) {
                Poll::Pending => Poll::Ready(()),
                ready => ready,
            })
            .await;
        }
    }

    fn is_final(&self, id: u64) -> bool {
        if matches!(self.results[id as usize], Slot::Waiting) {
            return false;
        }
        match self.options.mode {
            PipelineMode::ContinueOnError => self.synced_through > id,
            // Once a `Sync` closing `id` is queued, the caller has asked for the committed
            // outcome: a later failure in the implicit transaction, or the commit at the
            // `Sync`, still turns this result into an error when the `ReadyForQuery` is read.
            // Before that, the result says only that the statement ran (documented).
            PipelineMode::AbortOnError => self.synced_through > id || !self.sync_owed_for(id),
        }
    }

    /// Whether a `Sync` (or a FunctionCall's own `ReadyForQuery`) that closes operation `id`
    /// is queued and not yet answered.
    fn sync_owed_for(&self, id: u64) -> bool {
        // Sync points are queued in order of `end`: the first owed one past `id`.
        let i = self.syncs.partition_point(|&(_, end)| end <= id);
        self.syncs.get(i).is_some_and(|&(first, _)| first <= id)
    }

    fn reached(&self, until: Until) -> bool {
        match until {
            Until::Op(id) => self.is_final(id),
            Until::Window => {
                self.in_flight_ops <= self.options.max_ops - self.options.max_ops / 16
                    && self.in_flight_bytes <= self.options.max_bytes - self.options.max_bytes / 16
            }
            Until::All => self.expect.is_empty(),
        }
    }

    /// Writes what is queued while reading replies, until `until` holds or nothing more is
    /// owed. A connection failure completes every outstanding operation with the cause.
    async fn pump(&mut self, until: Until) {
        poll_fn(|cx| self.poll_pump(cx, until)).await
    }

    fn poll_pump(&mut self, cx: &mut Context<'_>, until: Until) -> Poll<()> {
        loop {
            if self.reached(until) || (self.expect.is_empty() && self.skip == 0) {
                return Poll::Ready(());
            }
            let Pipeline {
                client,
                options,
                skip,
                expect,
                in_flight_ops,
                ..
            } = &mut *self;
            let due = || due(expect, options, *skip, *in_flight_ops, until);
            match client.conn.poll_exchange(cx, due) {
                Poll::Ready(Ok(message)) => {
                    if let Err(e) = self.on_message(message) {
                        let e = self.client.conn.poison(e);
                        self.fail_all(&e);
                    }
                }
                Poll::Ready(Err(e)) => {
                    self.fail_all(&e);
                    return Poll::Ready(());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Applies one reply message to the operation it belongs to. An error means the
    /// connection can no longer be trusted.
    fn on_message(&mut self, message: Message) -> Result<(), Error> {
        if self.skip > 0 {
            // A reply to a request made before the block began, which nobody waits for: the
            // CopyFail `discard` may queue goes out with the next write.
            if matches!(message, Message::ReadyForQuery(_)) {
                self.skip -= 1;
            }
            self.client.conn.discard(&message)?;
            return Ok(());
        }
        let Some(front) = self.expect.front_mut() else {
            return Err(unexpected(
                &message,
                "after every pipeline operation was answered",
            ));
        };
        match front {
            Expect::Sync { first, end, .. } => {
                let (first, end) = (*first, *end);
                match message {
                    Message::ReadyForQuery(body) => {
                        self.client.conn.ready_for_query(body.status());
                        if let Some((failed, cause)) = self.group_failed.take()
                            && body.status() == b'I'
                        {
                            self.mark_rolled_back(first.max(self.implicit_from), failed, &cause);
                        }
                        self.implicit_from = end;
                        self.synced_through = end;
                        self.in_flight_bytes -= SYNC_BYTES;
                        self.expect.pop_front();
                        self.syncs.pop_front();
                    }
                    // Committing the implicit transaction failed (a deferred constraint, a
                    // serialization failure): the work of every operation in it is undone.
                    // It began after the last `COMMIT`/`ROLLBACK` of the block, if any
                    // (`implicit_from`): what came before that was already committed.
                    Message::ErrorResponse(body) => {
                        let db = DbError::parse(&mut body.fields())?;
                        for id in first.max(self.implicit_from)..end {
                            let slot = &mut self.results[id as usize];
                            if matches!(slot, Slot::Ready(Ok(_))) {
                                *slot = Slot::Ready(Err(Error::db(db.clone()).context(format!(
                                    "pipeline operation {id} was rolled back: committing its implicit transaction failed"
                                ))));
                            }
                        }
                    }
                    m => return Err(unexpected(&m, "in reply to a pipeline Sync")),
                }
            }
            Expect::Op(pending) => {
                let done = match &mut pending.kind {
                    Kind::FunctionCall { table, many } => match message {
                        Message::DataRow(body) => {
                            let value = function_value(&body)?;
                            match decode(table, *many, value.as_deref())? {
                                Ok(rows) => pending.reply.rows = rows,
                                Err(e) => pending.reply.error = Some(e),
                            }
                            true
                        }
                        Message::ErrorResponse(body) => {
                            pending.reply.error =
                                Some(Error::db(DbError::parse(&mut body.fields())?));
                            true
                        }
                        m => return Err(unexpected(&m, "in reply to a pipelined FunctionCall")),
                    },
                    Kind::LookupRun { table, count, rows } => match message {
                        Message::DataRow(body) => {
                            let value = function_value(&body)?;
                            match decode_each(table, *count as usize, value.as_deref())? {
                                Ok(each) => *rows = each,
                                Err(e) => pending.reply.error = Some(e),
                            }
                            true
                        }
                        Message::ErrorResponse(body) => {
                            pending.reply.error =
                                Some(Error::db(DbError::parse(&mut body.fields())?));
                            true
                        }
                        m => return Err(unexpected(&m, "in reply to a pipelined FunctionCall")),
                    },
                    Kind::Prepare { params, .. } => match message {
                        Message::ParseComplete => false,
                        Message::ParameterDescription(body) => {
                            *params = Some(parse_params(&body)?);
                            false
                        }
                        Message::RowDescription(body) => {
                            pending.reply = Reply::new(parse_columns(Some(&body))?, false);
                            pending.reply.described = true;
                            true
                        }
                        Message::NoData => true,
                        Message::ErrorResponse(body) => {
                            pending.reply.error =
                                Some(Error::db(DbError::parse(&mut body.fields())?));
                            true
                        }
                        m => return Err(unexpected(&m, "in reply to a pipelined Parse/Describe")),
                    },
                    _ => match pending.reply.apply(message)? {
                        Step::More => false,
                        Step::Done => true,
                        Step::Copy { inbound: false } => {
                            pending.reply.error.get_or_insert(Error::usage(
                                "COPY TO STDOUT returns data as a stream: use Client::copy_out outside a pipeline",
                            ));
                            false
                        }
                        // The server now takes everything we pipelined after the COPY as COPY
                        // input (and ignores the Syncs): nothing that follows can be matched.
                        Step::Copy { inbound: true } => {
                            return Err(Error::usage(
                                "a pipelined statement started COPY FROM STDIN, which consumes the operations \
                                 queued after it; the connection is closed. Use Client::copy_in outside a pipeline",
                            ));
                        }
                    },
                };
                if done {
                    self.complete();
                }
            }
        }
        Ok(())
    }

    /// Abort mode, outside a transaction block: operation `failed` failed, so the implicit
    /// transaction of operations `from..failed` was rolled back. Those reported as done are
    /// aborted instead (a result already taken by `process` cannot be recalled: see
    /// [`PipelineMode::AbortOnError`]).
    fn mark_rolled_back(&mut self, from: u64, failed: u64, cause: &Error) {
        for id in from..failed {
            let slot = &mut self.results[id as usize];
            if matches!(slot, Slot::Ready(Ok(_))) {
                *slot = Slot::Ready(Err(Error::aborted(
                    format!(
                        "pipeline operation {id} was rolled back: operation {failed} failed later in \
                         the same implicit transaction (an abort-on-error block outside BEGIN is one \
                         transaction up to its sync point; what no transaction undoes remains, \
                         such as session-level advisory locks and sequence increments)"
                    ),
                    failed,
                    cause,
                )));
            }
        }
    }

    /// Stores the front operation's result; after a failure, the server skips every operation
    /// up to the next `Sync`, so those are completed as aborted here.
    fn complete(&mut self) {
        let Some(Expect::Op(mut pending)) = self.expect.pop_front() else {
            return;
        };
        // Named now: the next `ReadyForQuery` of the block may end the transaction, and with
        // it the reason the server's 25P02 cannot give.
        // A prepared statement of the caller's that no longer fits the server (DDL, a
        // `DEALLOCATE`): the server names it by the client's `S<n>`, or not at all.
        let stale = pending.reply.stale();
        // A memopt function whose OID was resolved before the extension was dropped (and
        // maybe created again): forget the connection's OIDs, so that the next block (or lone
        // call) resolves them again, as `Client::memopt_get` does at once. Kept, they failed
        // every later pipelined lookup on the connection, a pool's for its life.
        if pending.kind.is_function_call()
            && pending
                .reply
                .error
                .as_ref()
                .is_some_and(|e| e.code() == Some(crate::SqlState::UNDEFINED_FUNCTION))
        {
            self.client.memopt = None;
        }
        if let Some(e) = pending.reply.error.take() {
            let e = match &pending.statement {
                Some(stmt) if stale => crate::query::stale_prepared(stmt, e),
                _ => e,
            };
            pending.reply.error = Some(self.client.conn.explain_failed(e));
        }
        self.in_flight_ops -= pending.kind.ops() as usize;
        self.in_flight_bytes -= pending.bytes;
        let id = pending.id;
        if self.options.mode == PipelineMode::AbortOnError {
            match &pending.reply.error {
                Some(e) if self.group_failed.is_none() => {
                    self.group_failed = Some((id, Error::aborted(e.to_string(), id, e)));
                }
                None if pending.reply.ends_transaction => self.implicit_from = id + 1,
                _ => {}
            }
        } else if pending.reply.error.is_none() && pending.reply.ends_transaction {
            // Its own `Sync` commits nothing more: settled even if that `ReadyForQuery` is
            // lost (see `fail_all`).
            self.implicit_from = id + 1;
        }
        if let Kind::Prepare { name, .. } = &pending.kind {
            // Read: the statement gets its handle below, or it was never created.
            self.client.conn.claim(name);
        }
        // An `ALTER TYPE`, `ALTER DOMAIN` or `DISCARD ALL` earlier in the block (its tag was
        // read before this reply, so it ran first) may have changed a type the cache holds:
        // forgotten now, the types of this reply and the later ones are looked up by `end`
        // rather than read by the old definition (a composite's fields in their old order).
        if self.client.conn.statements_discarded {
            self.client.forget_discarded();
            self.resolvable_from = id;
        }
        // Types looked up earlier on this connection replace their placeholders now; the
        // others wait for `end` (see `look_up_types`).
        self.client.types.resolve_reply(&mut pending.reply);
        if let Kind::Prepare {
            params: Some(params),
            ..
        } = &mut pending.kind
        {
            self.client.types.resolve_params(params);
        }
        if let Kind::LookupRun { count, rows, .. } = pending.kind {
            // One reply for `count` lookups: each gets its own key's row, or each the error.
            // Nothing follows it in its sync block, so nothing is skipped.
            match pending.reply.error {
                Some(e) => {
                    for i in 1..count {
                        self.results[(id + i) as usize] = Slot::Ready(Err(e.duplicate()));
                    }
                    self.results[id as usize] = Slot::Ready(Err(e));
                }
                None => {
                    for (i, row) in rows.into_iter().enumerate() {
                        let output = Output::Rows(row.into_iter().collect());
                        self.results[id as usize + i] = Slot::Ready(Ok(output));
                    }
                }
            }
            return;
        }
        // A prepared statement's rows, read by the definitions it held when the block queued
        // it, after the cache was forgotten (above) for a change earlier in the block.
        let stale_type = match pending.kind {
            Kind::Query
                if !pending.reply.described
                    && pending.types_generation != self.client.types.generation() =>
            {
                pending.reply.columns().iter().find_map(|c| {
                    let t = c.type_();
                    (Type::from_oid(t.oid()).is_none() && !crate::type_info::is_placeholder(t))
                        .then(|| t.name().to_string())
                })
            }
            _ => None,
        };
        let result = match pending.reply.error {
            Some(e) => Err(e),
            None if let Some(name) = stale_type => Err(Error::usage(format!(
                "pipeline operation {id}'s prepared statement returns type {name}, which may \
                 have changed earlier in this block (ALTER TYPE or ALTER DOMAIN, DISCARD ALL): \
                 its rows would be read by the old definition, so they are not returned. The \
                 statement ran; prepare it again, or run it once outside a pipeline"
            ))),
            None => Ok(match pending.kind {
                // (A run was completed above.)
                Kind::Query | Kind::FunctionCall { .. } | Kind::LookupRun { .. } => {
                    Output::Rows(pending.reply.rows)
                }
                Kind::Execute => Output::Affected(pending.reply.affected),
                Kind::Commit if pending.reply.rolled_back => {
                    // The block sent a plain COMMIT, so this `ROLLBACK` ended the transaction
                    // block, which the connection cannot tell from the tag alone (see
                    // `Connection::transaction_ends`).
                    self.client.conn.transaction_ends += 1;
                    // Read before this COMMIT's `ReadyForQuery` forgets it.
                    let why = match &self.client.conn.deferred_failure {
                        Some(failure) => failure.to_string(),
                        None => "a statement in it had failed".to_string(),
                    };
                    self.results[id as usize] = Slot::Ready(Err(Error::rolled_back(format!(
                        "COMMIT rolled the transaction back: {why}"
                    ))));
                    return;
                }
                Kind::Commit => Output::Done,
                Kind::Rollback => {
                    // A plain ROLLBACK, as above.
                    self.client.conn.transaction_ends += 1;
                    Output::Done
                }
                Kind::Prepare { name, sql, params } => {
                    let stmt = Statement::new(
                        name,
                        sql,
                        params.unwrap_or_default(),
                        pending.reply.columns(),
                        self.client.id,
                        Arc::downgrade(&self.client.conn.closes),
                    );
                    // Its types came from the cache as it is now (`resolve_reply` above).
                    stmt.mark_types_checked(self.client.types.generation());
                    Output::Prepared(stmt)
                }
            }),
        };
        if let Err(cause) = &result {
            while let Some(Expect::Op(skipped)) = self.expect.front() {
                // Never a run: a FunctionCall is written only after its group's Sync.
                let skipped_id = skipped.id;
                if let Kind::Prepare { name, .. } = &skipped.kind {
                    // Skipped, so never created: nothing to close, and a name left unclaimed
                    // would sit in front of the later ones each claim looks for.
                    self.client.conn.claim(name);
                }
                self.in_flight_ops -= skipped.kind.ops() as usize;
                self.in_flight_bytes -= skipped.bytes;
                let skip = Error::aborted(
                    format!(
                        "pipeline operation {skipped_id} was not run: operation {id} failed earlier in the same sync block"
                    ),
                    id,
                    cause,
                );
                // A skipped `commit()` leaves the transaction open and failed: it says why,
                // as the failed operation does.
                let skip = self.client.conn.explain_failed(skip);
                self.results[skipped_id as usize] = Slot::Ready(Err(skip));
                self.expect.pop_front();
            }
        }
        self.results[id as usize] = Slot::Ready(result);
    }

    /// The connection failed: every operation not yet answered fails with the cause.
    ///
    /// Whether an operation was sent decides what its error may say. One that went to the
    /// socket may have run and committed although its reply was never read: the server may
    /// have died after its commit, or answered while the client closed the connection itself
    /// (a `client_encoding` change, reported only at the block's next `ReadyForQuery`, after
    /// the operations sent behind it ran). Told "did not complete", a caller would retry it.
    ///
    /// An operation answered before its sync point's `ReadyForQuery` was read ran, but outside
    /// a transaction block its work was committed (or not) only at that `Sync`: it is not
    /// reported as done, nor as rolled back, unless that is known (a `COMMIT` in the block
    /// after it settled it; a failure before the `Sync` in abort mode rolled it back). Inside
    /// the caller's `BEGIN` nothing is marked, as when the block ends normally.
    fn fail_all(&mut self, cause: &Error) {
        self.syncs.clear();
        let outside_block = self.client.conn.tx_status == crate::TransactionStatus::Idle;
        // The open abort-mode group, whose `Sync` was never queued: its implicit transaction
        // ends as any other here, though no `Sync` entry stands for it.
        let open_group = self.group_start.take();
        if let Some((failed, why)) = self.group_failed.take()
            && outside_block
        {
            let first = self
                .expect
                .iter()
                .find_map(|expect| match expect {
                    Expect::Sync { first, end, .. } if (*first..*end).contains(&failed) => {
                        Some(*first)
                    }
                    _ => None,
                })
                .or(open_group.filter(|&first| failed >= first));
            if let Some(first) = first {
                self.mark_rolled_back(first.max(self.implicit_from), failed, &why);
            }
        }
        let implicit_from = self.implicit_from;
        // The client closed the connection itself on a `client_encoding` change (the only
        // `Usage` error a read can end in), which the server reports just before the
        // `ReadyForQuery` of the first `Sync` still owed: that sync point's transaction has
        // ended, and its operations' results stand.
        let mut front_settled = cause.kind() == crate::ErrorKind::Usage;
        let conn = &self.client.conn;
        let sent_until = conn.unsent_from.unwrap_or(conn.written);
        let results_len = self.results.len() as u64;
        let open = open_group.map(|first| Expect::Sync {
            first,
            end: results_len,
            due_end: 0,
        });
        for expect in self.expect.drain(..).chain(open) {
            if let Expect::Sync { first, end, .. } = expect {
                if std::mem::take(&mut front_settled) {
                    continue;
                }
                for id in first.max(implicit_from)..end {
                    let slot = &mut self.results[id as usize];
                    if outside_block && matches!(slot, Slot::Ready(Ok(_))) {
                        *slot = Slot::Ready(Err(Error::closed(format!(
                            "pipeline operation {id} ran, but the connection was lost before \
                             the end of its implicit transaction was read, so whether its work \
                             was committed is not known: {cause}"
                        ))));
                    }
                }
            }
            if let Expect::Op(pending) = expect {
                let sent = pending.end <= sent_until;
                for id in pending.id..pending.id + pending.kind.ops() {
                    let message = if sent {
                        format!(
                            "pipeline operation {id} was sent, but its reply was not read, so it \
                             may have run (and committed): {cause}"
                        )
                    } else {
                        format!("pipeline operation {id} was not sent: {cause}")
                    };
                    self.results[id as usize] = Slot::Ready(Err(Error::closed(message)));
                }
            }
        }
        self.in_flight_ops = 0;
        self.in_flight_bytes = 0;
        self.skip = 0;
        self.group_failed = None;
        self.group_start = None;
        self.client.conn.open_group = None;
        self.needs_flush = false;
    }
}

/// A portal that never exists: executing it fails an abandoned abort-mode block on purpose.
pub(crate) const ABANDONED_BLOCK: &str = "slipstream: abort-on-error block dropped before end()";

/// Whether `db` is the server's refusal of [`ABANDONED_BLOCK`]: the failure an abandoned
/// block was given on purpose, which inside a transaction aborts it while nobody reads.
pub(crate) fn is_abandoned_block(db: &DbError) -> bool {
    db.code() == crate::SqlState::INVALID_CURSOR_NAME && db.message().contains(ABANDONED_BLOCK)
}

impl Drop for Pipeline<'_> {
    fn drop(&mut self) {
        // An open abort-mode block must be closed so the server leaves its extended-protocol
        // sequence. It was abandoned (a `?` on a client-side error, a timeout), so none of it
        // may commit. If none of its messages has reached the server, they are taken back out
        // of the write buffer and nothing of it runs: failing it instead would still run a
        // `COMMIT` queued in it, which commits the work before it at once. Otherwise its
        // operations not yet begun on the socket are taken back likewise, an Execute of a
        // portal that does not exist fails what was sent before its Sync, and the server
        // rolls back what the block did since its last `COMMIT` it received (inside the
        // caller's BEGIN, that transaction fails and its COMMIT reports the rollback).
        // Continue-on-error operations still run, each on its own. Replies are read and
        // discarded by the next request, which settles the connection's owed queue first.
        // Held lookups were never sent and nobody can read their results: they are dropped
        // unsent (a lookup changes nothing, so nothing is lost).
        self.run = None;
        if !self.ended && !self.client.conn.is_broken() {
            let conn = &mut self.client.conn;
            if let Some(ending) = self.ending.take()
                && ending.sync_at >= conn.written
            {
                // `end()` was dropped (a timeout) before the server got the `Sync` it
                // queued: the caller gave the block up, and may retry it. Sent with the next
                // request, that `Sync` would commit the group behind the retry's back, so the
                // group is open again, and abandoned below. What `end` queued is the last
                // thing in the buffer and the last owed (a held run of lookups, which
                // changes nothing, goes with it).
                conn.wbuf.truncate((ending.sync_at - conn.written) as usize);
                conn.owed.truncate(conn.owed.len() - ending.owed);
                self.expect.truncate(self.expect.len() - ending.expect);
                self.syncs.truncate(self.syncs.len() - ending.syncs);
                self.group_start = Some(ending.first);
                self.group_offset = ending.offset;
            }
            if self.options.mode == PipelineMode::AbortOnError && self.group_start.is_some() {
                let conn = &mut self.client.conn;
                if self.group_offset >= conn.written {
                    // The open group is the end of the buffer, and owes no `ReadyForQuery`
                    // (a group's owed entry is pushed with its `Sync`; a FunctionCall closes
                    // the group before it). A prepare's name left unclaimed is closed with
                    // the next request, which is harmless for a statement never created.
                    conn.wbuf
                        .truncate((self.group_offset - conn.written) as usize);
                    self.group_start = None;
                    self.needs_flush = false;
                } else {
                    // Part of the group reached the socket. The operations that did not
                    // begin to are taken back (one the socket has begun must go whole):
                    // sent later, a `COMMIT` among them would commit the work before it,
                    // although the server never had it when the block was given up. An
                    // operation's messages are its last `bytes` before its `end` (a `Flush`
                    // that `flush_through` put before it is not among them).
                    let written = conn.written;
                    let cut = self.expect.iter().find_map(|e| match e {
                        Expect::Op(p) if p.end >= written => {
                            let start = p.end - p.bytes as u64;
                            Some(if start >= written { start } else { p.end })
                        }
                        _ => None,
                    });
                    if let Some(cut) = cut {
                        conn.wbuf.truncate((cut - written) as usize);
                    }
                    let _ = frontend::execute(ABANDONED_BLOCK, 0, &mut conn.wbuf);
                }
            }
            self.sync();
        }
        // Whatever became of the group, it is not a leaked one (see `Connection::open_group`).
        self.client.conn.open_group = None;
        self.client.conn.ending_sync = None;
    }
}

/// Whether `sql` is a COPY that streams data through the connection, which a pipeline cannot
/// carry. A COPY to or from a server-side file or program is an ordinary statement.
fn is_stream_copy(sql: &str) -> bool {
    // PostgreSQL's parser drops empty statements, so `;COPY t FROM STDIN` is one statement,
    // which Parse accepts: leading semicolons hide nothing, like whitespace and comments.
    fn skip(s: &str) -> &str {
        s.trim_start_matches(|c: char| c.is_whitespace() || c == ';')
    }
    let mut rest = skip(sql);
    loop {
        if let Some(r) = rest.strip_prefix("--") {
            rest = skip(r.split_once('\n').map_or("", |(_, r)| r));
        } else if rest.starts_with("/*") {
            rest = skip(after_block_comment(rest));
        } else {
            break;
        }
    }
    // The keyword ends where an identifier could not go on: `COPY(SELECT ...)` and
    // `COPY"t"` are COPY statements too.
    let starts_with_copy = rest
        .get(..4)
        .is_some_and(|w| w.eq_ignore_ascii_case("copy"))
        && !rest[4..].starts_with(ident_cont);
    if !starts_with_copy {
        return false;
    }
    match copy_target(&rest[4..]) {
        Some(target) => target == CopyTarget::Stream,
        // Text this scanner cannot read with certainty (a backslash in a plain literal means
        // different things under `standard_conforming_strings` on and off; an unterminated
        // quote or comment): any mention of a stream is taken as one. A stream COPY let
        // through would make the server take every operation queued after it as COPY data.
        None => {
            let lower = rest.to_ascii_lowercase();
            lower.contains("stdin") || lower.contains("stdout")
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum CopyTarget {
    /// `STDIN` or `STDOUT`: the data flows through the connection.
    Stream,
    /// A server-side file (a string constant) or `PROGRAM`: an ordinary statement.
    ServerSide,
}

/// Where the COPY whose text after the keyword is `sql` reads or writes. PostgreSQL's grammar
/// puts the direction at the first `FROM` or `TO` outside parentheses: before it come only
/// `BINARY`, a (possibly quoted and qualified) table name and a parenthesised column list, or
/// a parenthesised query, and `FROM` and `TO` are reserved words, so no unquoted name is
/// spelled so. After the direction comes `STDIN`, `STDOUT`, `PROGRAM` or a string constant.
/// `None` when the text cannot be read with certainty.
fn copy_target(sql: &str) -> Option<CopyTarget> {
    let bytes = sql.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    let mut after_direction = false;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if sql[i..].starts_with("--") {
            i = sql[i..].find('\n').map_or(bytes.len(), |n| i + n + 1);
            continue;
        }
        if sql[i..].starts_with("/*") {
            let rest = after_block_comment(&sql[i..]);
            if rest.is_empty() && !sql.ends_with("*/") {
                return None;
            }
            i = bytes.len() - rest.len();
            continue;
        }
        // A string constant: '...', $tag$...$tag$ (not a parameter such as $1), or one with a
        // prefix: E'...', U&'...', B'...', X'...', N'...'.
        let literal_start = match c {
            b'\'' => Some(i),
            b'$' if !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => Some(i),
            _ if c.is_ascii_alphabetic() => {
                let prefix = if bytes.len() > i + 2 && bytes[i..i + 2].eq_ignore_ascii_case(b"u&") {
                    2
                } else {
                    1
                };
                (bytes.get(i + prefix) == Some(&b'\'')).then_some(i + prefix)
            }
            _ => None,
        };
        if let Some(start) = literal_start {
            if after_direction {
                return Some(CopyTarget::ServerSide);
            }
            let escapes = start == i + 1 && c.eq_ignore_ascii_case(&b'e');
            i = end_of_literal(sql, start, escapes)?;
            continue;
        }
        if c == b'"' {
            if after_direction {
                return Some(CopyTarget::Stream);
            }
            // A quoted identifier: `""` inside is one quote.
            let mut j = i + 1;
            loop {
                match bytes.get(j)? {
                    b'"' if bytes.get(j + 1) == Some(&b'"') => j += 2,
                    b'"' => break,
                    _ => j += 1,
                }
            }
            i = j + 1;
            continue;
        }
        if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 {
            // Never empty: the character at `i` continues an identifier, so the scan moves on.
            let end = sql[i..]
                .find(|ch: char| !ident_cont(ch))
                .map_or(bytes.len(), |n| i + n);
            let word = &sql[i..end];
            if after_direction {
                // STDIN, STDOUT, or a syntax error the server reports: refused either way.
                return Some(if word.eq_ignore_ascii_case("program") {
                    CopyTarget::ServerSide
                } else {
                    CopyTarget::Stream
                });
            }
            if depth == 0 && (word.eq_ignore_ascii_case("from") || word.eq_ignore_ascii_case("to"))
            {
                after_direction = true;
            }
            i = end;
            continue;
        }
        if after_direction {
            return Some(CopyTarget::Stream);
        }
        match c {
            b'(' => depth += 1,
            b')' => depth = depth.checked_sub(1)?,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index just past the string constant whose opening quote (or dollar tag) is at
/// `start`; `escapes` for an `E'...'` constant, where a backslash escapes the next byte.
/// `None` for an unterminated constant, or for a backslash in a plain one: whether it escapes
/// depends on the session's `standard_conforming_strings`.
fn end_of_literal(sql: &str, start: usize, escapes: bool) -> Option<usize> {
    let bytes = sql.as_bytes();
    if bytes[start] == b'$' {
        // $tag$ ... $tag$, the tag empty or an identifier without `$`.
        let tag_len = sql[start + 1..].find('$')?;
        let tag = &sql[start + 1..start + 1 + tag_len];
        if tag.starts_with(|c: char| c.is_ascii_digit())
            || !tag.chars().all(|c| c != '$' && ident_cont(c))
        {
            return None;
        }
        let open = &sql[start..start + tag_len + 2];
        let body = start + open.len();
        return sql[body..].find(open).map(|n| body + n + open.len());
    }
    let mut j = start + 1;
    loop {
        match bytes.get(j)? {
            b'\\' if escapes => j += 2,
            b'\\' => return None,
            b'\'' if bytes.get(j + 1) == Some(&b'\'') => j += 2,
            b'\'' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// Whether PostgreSQL's lexer takes `c` into an identifier after its first character (its
/// `ident_cont`): ASCII letters and digits, `_`, `$`, and every non-ASCII character, since it
/// takes each byte from 0x80 up. `char::is_alphanumeric` is not it: `t·x` and `€` are
/// identifiers too, and a scan that stopped before such a character never moved past it.
fn ident_cont(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$' || !c.is_ascii()
}

/// What follows the block comment `sql` starts with. PostgreSQL's block comments nest, so
/// `/* a /* b */ c */` is one comment; an unterminated one runs to the end.
fn after_block_comment(sql: &str) -> &str {
    let bytes = sql.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return &sql[i..];
                }
            }
            _ => i += 1,
        }
    }
    ""
}

/// A true lower bound on the reply bytes still to come before `until` can hold (front
/// entry excluded: part of its reply may already be read), for the connection's receive
/// low-water mark: the reader then sleeps through the many small packets of a
/// continue-on-error block (the server flushes each `ReadyForQuery`) instead of waking
/// for each. Only continue-on-error entries count: an abort-mode operation after a
/// failure gets no reply at all, and its replies come in large flushes anyway.
fn due(
    expect: &VecDeque<Expect>,
    options: &PipelineOptions,
    skip: usize,
    in_flight_ops: usize,
    until: Until,
) -> usize {
    if options.mode != PipelineMode::ContinueOnError || skip > 0 {
        return 0;
    }
    let Some(front) = expect.front() else {
        return 0;
    };
    let last_op = match until {
        Until::All => u64::MAX,
        Until::Op(id) => id,
        Until::Window => {
            let keep = options.max_ops - options.max_ops / 16;
            let Some(ops) = in_flight_ops.checked_sub(keep).filter(|&n| n > 0) else {
                return 0;
            };
            let first = match front {
                Expect::Op(p) => p.id,
                Expect::Sync { end, .. } => *end,
            };
            first + ops as u64 - 1
        }
    };
    // Entries are in order of the operation they complete, so the target is the last
    // one completing an operation up to `last_op`.
    let through = expect.partition_point(|e| e.last_op() <= last_op);
    let Some(target) = through.checked_sub(1).and_then(|i| expect.get(i)) else {
        return 0;
    };
    usize::try_from(target.due_end().saturating_sub(front.due_end())).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod leak_tests;

#[cfg(test)]
mod tests {
    use super::is_stream_copy;

    #[test]
    fn stream_copies_are_recognised() {
        assert!(is_stream_copy("COPY t FROM STDIN"));
        assert!(is_stream_copy(
            "  -- load\n/* fast */ copy t (a) to stdout (format csv)"
        ));
        assert!(!is_stream_copy("COPY t FROM '/tmp/data.csv'"));
        assert!(!is_stream_copy("SELECT 'copy from stdin'"));
        assert!(!is_stream_copy("COPYRIGHT"));
        assert!(!is_stream_copy(""));
        assert!(is_stream_copy(
            "/* a /* nested */ comment */ COPY t FROM STDIN"
        ));
        assert!(!is_stream_copy(
            "/* a /* nested */ COPY t FROM STDIN */ SELECT 1"
        ));
        assert!(is_stream_copy("COPY(SELECT 1) TO STDOUT"));
        assert!(is_stream_copy("copy\"t\" from stdin"));
        assert!(!is_stream_copy("COPY_t"));
        assert!(!is_stream_copy("/* never closed COPY t FROM STDIN"));
        assert!(is_stream_copy(";COPY t FROM STDIN"));
        assert!(is_stream_copy(" ; /* x */ ;\n-- y\n; copy t to stdout"));
        assert!(!is_stream_copy("; SELECT 'copy from stdin'"));
    }

    /// A name, path or query that merely mentions stdin or stdout is not a stream: only the
    /// word after the direction decides.
    #[test]
    fn server_side_copies_that_mention_a_stream_are_not_refused() {
        for sql in [
            "COPY t FROM '/srv/stdin.csv'",
            "COPY logs (stdout_text, stdin_text) FROM '/srv/logs.csv' (FORMAT csv)",
            "COPY (SELECT stdout FROM jobs) TO '/tmp/jobs.txt'",
            "COPY (SELECT 'to stdout', ')' FROM jobs) TO '/tmp/jobs.txt'",
            "COPY stdin FROM '/srv/x'",
            r#"COPY "from stdin" TO '/tmp/x'"#,
            "copy t from program 'gunzip -c /srv/stdin.gz'",
            "COPY t TO PROGRAM 'cat > /tmp/stdout'",
            r"COPY t FROM E'/srv/a\\stdin'",
            r"COPY t FROM e'/srv/\'stdin'",
            "COPY t FROM $$/srv/stdin$$",
            "COPY t FROM $p$/srv/$$stdin$p$",
            "COPY t FROM U&'/srv/stdin'",
            "COPY t /* from stdin */ FROM '/srv/x'",
            "COPY t -- to stdout\n FROM '/srv/x'",
            "COPY (SELECT $1::text AS stdin) TO '/tmp/x'",
            r#"COPY s."T""x" (a) FROM '/srv/x' WHERE a <> 'stdin'"#,
            "COPY été FROM '/srv/stdin'",
            "COPY t·x FROM '/srv/stdin'",
            "COPY € (a) FROM '/srv/x'",
            "COPY t FROM $€$/srv/stdin$€$",
        ] {
            assert!(!is_stream_copy(sql), "{sql}");
        }
    }

    /// Every stream COPY is still caught, also where the text is hard to read: a stream let
    /// through would make the server swallow the operations queued after it.
    #[test]
    fn stream_copies_in_hard_text_are_still_refused() {
        for sql in [
            "COPY t FROM STDIN",
            "COPY BINARY t FROM stdin",
            "COPY t (a, b) FROM STDIN WITH (FORMAT csv)",
            "COPY (SELECT 'x FROM ''/f''' FROM t) TO STDOUT",
            r#"COPY (SELECT ')', "(" FROM t) TO STDOUT"#,
            r#"COPY "a""b" FROM STDIN"#,
            "COPY t FROM /* '/f' */ STDIN",
            "COPY t FROM\n-- '/f'\nSTDIN",
            "COPY (SELECT $$ to '/f' $$) TO STDOUT",
            "COPY (SELECT $q$ ) to '/f' $q$) TO STDOUT",
            r"COPY (SELECT E'\' FROM ''/f''' ) TO STDOUT",
            "COPY (SELECT $1 FROM t) TO STDOUT",
            // A backslash in a plain literal reads two ways: the mention decides.
            r"COPY (SELECT 'a\' FROM t WHERE '' = ' ') TO STDOUT",
            // Unterminated or unbalanced text: the mention decides.
            "COPY (SELECT 'x) TO '/f' FROM STDIN",
            "COPY t) FROM '/f' STDIN",
            r#"COPY "t FROM '/f' STDIN"#,
            "COPY t /* FROM '/f' STDIN",
            "COPY t· FROM STDIN",
            "COPY (SELECT 1 AS €, 2 AS 😀) TO STDOUT",
        ] {
            assert!(is_stream_copy(sql), "{sql}");
        }
    }

    /// Promise: building a pipeline never hangs on a statement's text. The COPY scan stopped
    /// at an identifier character that `char::is_alphanumeric` does not take (`·`, `€`, an
    /// emoji) without moving past it, and spun forever. Before the fix: "the COPY check of
    /// `COPY t· FROM '/x'` did not finish in 60 s".
    #[test]
    fn the_copy_check_ends_on_any_text() {
        let (done, finished) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            use proptest::strategy::{Strategy, ValueTree};
            let named = [
                "COPY t· FROM '/x'",
                "COPY (SELECT 1 AS €) TO STDOUT",
                "COPY 😀",
            ];
            for sql in named {
                let _ = done.send(Err(sql.to_string()));
                is_stream_copy(sql);
            }
            // Arbitrary text after the keyword, any Unicode, built from SQL's own delimiters
            // and characters of every class.
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let parts = proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(vec![
                        " ", "'", "\"", "$", "$$", "$a$", "(", ")", "--", "/*", "*/", "\n", "\\",
                        "E'", "U&'", "from", "TO", "stdin", "program", "·", "€", "é", "😀", "1",
                        "_", ";",
                    ])
                    .prop_map(str::to_string),
                    proptest::arbitrary::any::<char>().prop_map(String::from),
                ],
                0..24,
            );
            for _ in 0..5_000 {
                let sql = format!(
                    "COPY {}",
                    parts.new_tree(&mut runner).unwrap().current().concat()
                );
                let _ = done.send(Err(sql.clone()));
                is_stream_copy(&sql);
            }
            let _ = done.send(Ok(()));
        });
        let mut last = String::new();
        loop {
            match finished.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(Ok(())) => break,
                Ok(Err(sql)) => last = sql,
                Err(_) => panic!("the COPY check of `{last}` did not finish in 60 s"),
            }
        }
        worker.join().unwrap();
    }

    proptest::proptest! {
        /// COPY statements put together from parts whose answer is known, with names, literals
        /// and comments that mention the other answer everywhere but the target.
        #[test]
        fn the_target_alone_decides(
            seps in proptest::collection::vec(proptest::sample::select(SEPARATORS), 4),
            source in proptest::sample::select(SOURCES),
            direction in proptest::sample::select(&["FROM", "from", "To", "TO"][..]),
            (target, stream) in proptest::sample::select(TARGETS),
            tail in proptest::sample::select(TAILS),
        ) {
            let sql = format!(
                "{}COPY{}{source}{}{direction}{}{target}{}{tail}",
                seps[0].trim_start_matches(' '), seps[1], seps[2], seps[3], seps[1]
            );
            proptest::prop_assert_eq!(is_stream_copy(&sql), stream, "{}", sql);
        }
    }

    const SEPARATORS: &[&str] = &[
        " ",
        "\n\t",
        " /* from stdin */ ",
        " /* to /* nested */ '/f' */ ",
        " -- to stdout\n",
        " --\n",
    ];

    const SOURCES: &[&str] = &[
        "t",
        "stdin",
        "stdout",
        r#""from stdin""#,
        r#""a""b" (stdin, "to")"#,
        "s.t (stdout)",
        "BINARY t",
        "été",
        "(SELECT 'to stdout' FROM t)",
        "(SELECT $$ ) to '/f' $$)",
        "(SELECT $q$ from stdin $q$ AS stdout)",
        r"(SELECT E'\' ) TO ''/f''', E'\\' FROM t)",
        "(SELECT $1, 'x''y) to stdin' FROM t WHERE (a) = (b))",
        r#"(SELECT ")" FROM t)"#,
    ];

    const TARGETS: &[(&str, bool)] = &[
        ("STDIN", true),
        ("stdout", true),
        ("StdOut", true),
        ("'/srv/stdin.csv'", false),
        (r"E'/srv/\'stdout'", false),
        ("$$/srv/stdin$$", false),
        ("$p$/srv/$$stdout$p$", false),
        ("U&'/srv/stdin'", false),
        ("PROGRAM 'cat /srv/stdin'", false),
        ("program $$gzip > stdout$$", false),
    ];

    const TAILS: &[&str] = &[
        "",
        " (FORMAT csv)",
        " WITH (FORMAT csv, DELIMITER ';')",
        " WHERE stdin <> 'stdout'",
        ";",
    ];
}
