//! The protocol engine under a [`Client`](crate::Client): the socket, its buffers and the
//! state that keeps requests and responses matched.
//!
//! # Staying in step when callers stop listening
//!
//! Every request ends with a `Sync` (extended protocol) or is one `Query` (simple protocol), so
//! the server answers each with exactly one `ReadyForQuery`. `owed` is the queue of those
//! answers still to come, oldest first, each entry saying what it answers ([`Owed`]): a simple
//! query, an extended request and its `Sync`, a COPY, a row stream, a pipeline sync point, or
//! the deferred `ROLLBACK`/`Close` of a dropped handle. Every `ReadyForQuery` read pops the
//! front entry, wherever it is read.
//!
//! A call whose future was dropped (a timeout, a `select!`) leaves its entry behind. Before the
//! next request is written, [`Connection::start_request`] reads every such reply to its end
//! ("settles" the connection), handling what the entry says: a request that turned out to be
//! `COPY FROM STDIN` gets `CopyFail`, followed by `Sync` if it came through the extended
//! protocol (the server ignored the request's own `Sync` while it waited for data, and skips
//! everything up to the next one after the failure). Settling first, rather than writing the
//! new request behind the abandoned one, is what keeps these promises by construction:
//! - the new request cannot land inside a COPY the server is still waiting on (it would be
//!   taken as COPY data, or lose protocol synchronisation);
//! - the server is never blocked writing an abandoned result while we write a large request
//!   and read nothing (a deadlock once both socket buffers are full);
//! - the transaction status is read from the server, not remembered from before the dropped
//!   call ([`Connection::is_settled`] says whether it is current).
//!
//! Every write reads while it writes ([`Connection::poll_send`]): bytes the server sends while
//! our request waits for socket room are buffered, so no path can deadlock on full buffers.
//!
//! Requests are appended to `wbuf` whole, before any `.await`, and `wbuf` survives a cancelled
//! flush: a request is either entirely queued or not at all.
//!
//! Invariants:
//! - An entry is pushed to `owed` exactly when a request's final `Sync`/`Query`/`FunctionCall`
//!   is appended to `wbuf` (a row stream's when its first `Execute` is: its `Sync` is owed from
//!   then on), and
//!   popped when its `ReadyForQuery` is read.
//! - Only the newest entry can belong to a caller still reading; older ones are abandoned.
//! - After an I/O or protocol failure, or a FATAL error from the server, `broken` is set and
//!   every later call fails with [`ErrorKind::Closed`](crate::ErrorKind::Closed).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use postgres_protocol::message::backend::{DataRowBody, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::query::CommandTag;
use crate::socket::Socket;
use crate::{DbError, Error, Notification};

/// Largest message we accept once connected. PostgreSQL's own limit for a field is 1 GiB; a
/// whole `DataRow` can exceed it only slightly.
pub(crate) const MAX_MESSAGE: usize = 1 << 30;
/// Largest message we accept before authentication completes: a real server sends small
/// messages there, so anything bigger is a peer that does not speak the protocol.
pub(crate) const MAX_STARTUP_MESSAGE: usize = 64 * 1024;
/// The largest message length taken on trust: a message claiming up to this many bytes gets
/// its whole buffer as soon as its header arrives; a bigger one gets memory as its bytes
/// arrive (see `Connection::make_room`). So the most one length prefix can make a client
/// allocate is this, whatever it claims.
pub(crate) const TRUSTED_LENGTH: usize = 16 << 20;
/// Distinct `ParameterStatus` names we keep. PostgreSQL 15 reports 13, 16 reports 14 (and a
/// few more for extensions' GUC_REPORT settings); a server that keeps inventing names is not
/// growing the map without end.
const MAX_PARAMETERS: usize = 1024;
/// Read at least this much at a time: one read usually holds a whole small response.
const READ_CHUNK: usize = 16 * 1024;
/// A message bigger than this gets an allocation of its own (see `parse_buffered`).
const BIG_MESSAGE: usize = 4 * READ_CHUNK;
/// Below this many bytes known to be due, a receive low-water mark is not worth its system
/// call (see `Connection::set_rcvlowat`): a pipeline of one never pays for one.
const MIN_RCVLOWAT: usize = 64;
/// The most flushes a reader sleeps through (see `Connection::set_rcvlowat`). The server
/// flushes every `ReadyForQuery`, so a continue-on-error block's replies come one small
/// packet each; while the reader sleeps below its mark the kernel sends no ACK for them (it
/// acknowledges at once only past a full segment as it last measured one: 536 bytes to 64
/// KiB on loopback, 2 KiB in the stalled runs), and the sender
/// may have no more than its congestion window of packets unacknowledged: 10 at the start,
/// 4 while BBR probes the round trip. A mark that needs more packets than that waits for a
/// delayed-ACK timer or a loss probe (10-40 ms) every time: an uncapped mark ran a DML
/// block twelve times slower than no mark at all (issue 23). A mark reached within this
/// many flushes wakes the reader while the sender can still send.
const MARK_FLUSHES: usize = 8;
/// The most a read waits to gather: a read of this much is already cheap per byte, and the
/// kernel needs receive-buffer room for at least the mark (Linux grows the buffer to about
/// twice the mark), so the server is never blocked sending while we sleep below it.
const MAX_RCVLOWAT: usize = 32 * 1024;

/// `into` with `bytes` appended.
fn moved_to(mut into: BytesMut, bytes: &[u8]) -> BytesMut {
    into.extend_from_slice(bytes);
    into
}

/// Whether the session is inside a transaction block, as the last `ReadyForQuery` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::TransactionStatus;
/// if client.transaction_status() == TransactionStatus::Failed {
///     client.batch_execute("ROLLBACK").await?;
/// }
/// # Ok(()) }
/// ```
pub enum TransactionStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block: every statement fails until `ROLLBACK`.
    Failed,
}

/// What one owed `ReadyForQuery` answers (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owed {
    /// A simple-protocol `Query` (`simple_query`, `batch_execute`).
    Simple,
    /// An extended-protocol request ended by its `Sync` (prepare, query, execute).
    Extended,
    /// A `COPY` started by `copy_in`/`copy_out` (a simple-protocol `Query`).
    Copy,
    /// A row stream: extended protocol, its `Sync` sent when the rows run out (or on drop).
    Stream,
    /// A pipeline sync point; the operations before it were pipelined behind each other.
    PipelineSync,
    /// The `ROLLBACK` (or `ROLLBACK TO SAVEPOINT`) of a dropped transaction, or the `RELEASE
    /// SAVEPOINT` of a dropped `savepoint()` future.
    Rollback,
    /// `Close` of statements whose last handle was dropped.
    Close,
    /// A `FunctionCall` (memopt's fast lookup): answered by its own `ReadyForQuery`, with no
    /// `Sync`. Written only where no extended-protocol sequence is open (see `memopt.rs`).
    FunctionCall,
}

impl Owed {
    /// Whether the request went through the extended protocol, where a `CopyFail` must be
    /// followed by a `Sync` for the server to answer.
    fn is_extended(self) -> bool {
        matches!(
            self,
            Owed::Extended | Owed::Stream | Owed::PipelineSync | Owed::Close
        )
    }
}

/// Called with each notice (`NOTICE`, `WARNING`, ...) the server sends.
pub type NoticeHandler = Box<dyn FnMut(&DbError) + Send>;

pub(crate) struct Connection {
    socket: Socket,
    rbuf: BytesMut,
    pub(crate) wbuf: BytesMut,
    max_message: usize,
    /// `ReadyForQuery` messages still to come, oldest first, each with what it answers (see
    /// the module docs).
    pub(crate) owed: VecDeque<Owed>,
    broken: Option<String>,
    /// Bytes went to the socket since its last flush (matters for TLS only).
    unflushed: bool,
    /// A write of `poll_exchange` failed: what to report once the replies already on their
    /// way have been read (see `Connection::write_failed`).
    write_error: Option<Error>,
    /// The socket's receive low-water mark (`SO_RCVLOWAT`) as last set: 1 except while a
    /// pipeline waits for replies it knows are due (see `Connection::set_rcvlowat`).
    rcvlowat: usize,
    /// Bytes parsed since the last `ReadyForQuery`, and a running estimate of how many bytes
    /// the server sends per `ReadyForQuery` (one flush: see `MARK_FLUSHES`). The estimate
    /// follows a smaller flush at once and a larger one slowly (an eighth of the gap, and
    /// at most an eighth of itself, per flush), so the mark errs on the side of waking
    /// early. 0 until one is seen.
    since_ready: usize,
    flush_bytes: usize,
    /// Bytes written to the socket since the connection opened: `written + wbuf.len()` is the
    /// stream offset just past the last queued byte.
    pub(crate) written: u64,
    /// Where the first failed write left the stream: bytes from here on were counted into
    /// `written` (see `write_failed`) but never reached the socket.
    pub(crate) unsent_from: Option<u64>,
    pub(crate) tx_status: TransactionStatus,
    pub(crate) parameters: HashMap<String, String>,
    pub(crate) notifications: VecDeque<Notification>,
    pub(crate) notice_handler: NoticeHandler,
    /// A `CopyIn` was dropped mid-stream: send `CopyFail` before anything else.
    pub(crate) copy_in_abort: bool,
    /// A `CopyIn` exists: its `Drop` clears this (and sets `copy_in_abort` if it had not
    /// ended). Set when a request starts, the `CopyIn` was leaked (`mem::forget`) and the
    /// server still waits for its data: the request aborts the COPY as the drop would have,
    /// rather than wait for a reply that never comes. (A `CopyFail` that reaches a server no
    /// longer in COPY mode, the COPY ended or failed already, is ignored by it.)
    pub(crate) copy_in_live: bool,
    /// A row stream is open and its `Sync` is not queued yet. A stream queues it when its rows
    /// run out or when it is dropped, and clears this; set when a request starts, the stream
    /// was leaked (`mem::forget`) and its `Drop` never ran. The server, in the middle of the
    /// stream's exchange, answers nothing until that `Sync` comes, so the request queues it
    /// (the stream's reply is then discarded like any abandoned one).
    pub(crate) stream_sync_owed: bool,
    /// An abort-mode pipeline block's open sync group: the stream offset (see `written`) where
    /// its messages begin. The group owes no reply until its `Sync` is queued, so without this
    /// the connection would look settled. The block keeps it up to date and clears it when it
    /// queues the `Sync` or is dropped; set when a request starts, the block was leaked
    /// (`mem::forget`): its messages, ahead of the request's, would run in one implicit
    /// transaction with it and their replies be read as its own (see `abandon_leaked_group`).
    pub(crate) open_group: Option<u64>,
    /// While `open_group` is set: where the group's last operation's messages end (a stream
    /// offset) and how many bytes they are. Every byte the group queued after them is a
    /// `Flush`, so a leaked group the socket stopped in or just before that operation can
    /// still be cut where an operation starts (see `abandon_leaked_group`).
    pub(crate) open_group_last: (u64, usize),
    /// While `end()` runs: where the `Sync` it queued for the open group begins (a stream
    /// offset) and how many owed entries it pushed from there on (that `Sync`'s, and a held
    /// run of lookups'). `open_group` stays set meanwhile: an `end()` future leaked before
    /// that `Sync` began to reach the socket gave the block up as a dropped one does, so the
    /// next request takes the `Sync` back and abandons the group; sent, it would commit what
    /// the caller gave up. Cleared when `end()` has read every reply, and by the block's
    /// `Drop`.
    pub(crate) ending_sync: Option<(u64, usize)>,
    /// A `Transaction`'s `BEGIN` is queued and the future that sent it has not handed out the
    /// guard yet (whose `Drop` defers the `ROLLBACK`). Set when a request starts, that future
    /// was leaked (`mem::forget`), so neither it nor a guard will end the transaction: the
    /// request defers the `ROLLBACK` itself, or its statements would run in a transaction
    /// nobody holds and never commit.
    pub(crate) begin_unguarded: bool,
    /// A `Transaction`'s `commit()` or `rollback()` is settling the connection before it
    /// queues its `COMMIT`, `RELEASE` or `ROLLBACK`: the guard's depth and its rollback. Those
    /// futures own the guard, so one leaked (`mem::forget`) while it settles drops no guard
    /// and ends nothing: the next request defers the rollback (`start_request`), as the
    /// guard's `Drop` would have, or the caller's next statements would run in a transaction
    /// nobody holds and never commit. Cleared when the settling ends, and by a guard's `Drop`
    /// (which defers its own rollback, and a deeper guard's left here by a leak).
    pub(crate) guard_ending: Option<(u32, String)>,
    /// Statements to run, results discarded, before the next request (e.g. the `ROLLBACK` of a
    /// dropped transaction).
    pub(crate) deferred: Vec<String>,
    /// A failure that aborted the transaction while no caller was reading ([`Unseen`]): what
    /// the caller is told next names it ([`Connection::explain_failed`], and every way to end
    /// the transaction) instead of the server's 25P02 or "a statement in it had failed",
    /// which blame nothing the caller did. Kept while the transaction stays failed, and only
    /// then: a note about a transaction that ended or recovered would blame the caller's own
    /// failures on it.
    pub(crate) deferred_failure: Option<Unseen>,
    /// Names of server-side statements whose last handle was dropped; closed with the next
    /// request, in the same write.
    pub(crate) closes: Arc<Mutex<Vec<String>>>,
    /// Named statements whose `Parse` is written but for which no handle exists yet. The call
    /// that wrote it claims the name once it has read the reply (a handle is made, or the
    /// statement never came to exist). Whatever is unclaimed when the next request starts was
    /// written by a dropped call and is closed with that request, so a dropped call never
    /// leaves a statement on the server that nothing will close. (A `Close` of a statement
    /// that does not exist is not an error, so closing a name whose `Parse` failed is safe.)
    /// Oldest first: a pipeline's prepares are claimed in the order they were written, so the
    /// name claimed is at the front and leaves in O(1) (a `Vec` with `swap_remove` moved the
    /// newest name to the front and made each claim scan further: quadratic in a block of
    /// prepares, 3.0 s for 80,000 of them).
    pub(crate) unclaimed: VecDeque<String>,
    /// A named statement the running call's `Parse` created and that it has not kept yet: it
    /// looks the statement's types up first, in a request of its own (see
    /// [`Connection::claim_for_now`]). Closed with the next request unless that request is
    /// the lookup's (`lookup_request`), so a call dropped or leaked (`mem::forget`) before
    /// it keeps the statement never leaves it on the server. It lives here, not in the
    /// call's future, because a leaked future runs no `Drop`.
    unkept: Option<String>,
    /// The request being started is the running call's type lookup, which must leave
    /// `unkept` alone. Set right before that request starts; taken as it does.
    pub(crate) lookup_request: bool,
    /// The session ran `DISCARD ALL` or `DEALLOCATE ALL` (every prepared statement is gone), or
    /// altered a type or domain (a type looked up in the catalogs may have changed, and the
    /// cached statements hold it): the statement cache and the type cache must forget their
    /// entries before their next use.
    pub(crate) statements_discarded: bool,
    /// An `ALTER TYPE` or `ALTER DOMAIN` ran in the transaction still open: a rollback (a
    /// `ROLLBACK` tag, `ROLLBACK TO SAVEPOINT`'s too, or the transaction's end, which may be
    /// one) puts the old definition back, so the caches, which may have looked the new one
    /// up since, are forgotten again then (read by it, a composite's fields would be
    /// swapped). Cleared when the session is outside a transaction block.
    types_altered_in_tx: bool,
    /// How many `COMMIT` and `PREPARE TRANSACTION` command tags the session has sent: each
    /// ended a transaction block, also when the session is in one again when the reply ends
    /// (`COMMIT AND CHAIN`, `COMMIT; BEGIN`, a pipeline's `COMMIT` then `BEGIN`), which the
    /// transaction status alone cannot show. A [`Transaction`](crate::Transaction) guard
    /// compares it with its value when its block began (see `check_still_open`). A `ROLLBACK`
    /// tag is not counted here: `ROLLBACK TO SAVEPOINT` has the same tag and ends nothing; a
    /// pipeline counts those of the plain `ROLLBACK` and `COMMIT` it sent itself.
    pub(crate) transaction_ends: u64,
    /// The same for the memopt function OIDs a client resolved (a separate flag: each cache
    /// takes its own).
    pub(crate) functions_discarded: bool,
    /// Set by an [`AbortHandle`](crate::AbortHandle) before it shuts the socket: why the
    /// connection was closed from outside, reported instead of the bare I/O error that follows.
    pub(crate) aborted: Arc<Mutex<Option<String>>>,
}

impl Connection {
    pub(crate) fn new(socket: Socket) -> Connection {
        Connection {
            socket,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            wbuf: BytesMut::with_capacity(READ_CHUNK),
            max_message: MAX_STARTUP_MESSAGE,
            owed: VecDeque::new(),
            broken: None,
            unflushed: false,
            write_error: None,
            rcvlowat: 1,
            since_ready: 0,
            flush_bytes: 0,
            written: 0,
            unsent_from: None,
            tx_status: TransactionStatus::Idle,
            parameters: HashMap::new(),
            notifications: VecDeque::new(),
            notice_handler: default_notice_handler(),
            copy_in_abort: false,
            copy_in_live: false,
            open_group: None,
            open_group_last: (0, 0),
            ending_sync: None,
            begin_unguarded: false,
            guard_ending: None,
            types_altered_in_tx: false,
            stream_sync_owed: false,
            deferred: Vec::new(),
            deferred_failure: None,
            closes: Arc::new(Mutex::new(Vec::new())),
            unclaimed: VecDeque::new(),
            unkept: None,
            lookup_request: false,
            statements_discarded: false,
            transaction_ends: 0,
            functions_discarded: false,
            aborted: Arc::new(Mutex::new(None)),
        }
    }

    pub(crate) fn startup_done(&mut self) {
        self.max_message = MAX_MESSAGE;
    }

    pub(crate) fn socket(&self) -> &Socket {
        &self.socket
    }

    pub(crate) fn is_tls(&self) -> bool {
        self.socket.is_tls()
    }

    pub(crate) fn is_broken(&self) -> bool {
        // A failed write that the exchange has not yet read past is as final as a poison.
        self.broken.is_some() || self.write_error.is_some()
    }

    pub(crate) fn check_usable(&self) -> Result<(), Error> {
        match &self.broken {
            Some(cause) => Err(Error::closed(format!(
                "connection is broken ({cause}); open a new connection"
            ))),
            None => Ok(()),
        }
    }

    /// Marks the connection broken by `e` (the first cause is kept) and returns `e`.
    pub(crate) fn poison(&mut self, e: Error) -> Error {
        let aborted = self
            .aborted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let e = match aborted {
            Some(reason) => Error::closed(format!(
                "connection closed by its pool: {reason}; the statement was cancelled, borrow \
                 another connection"
            )),
            None => e,
        };
        if self.broken.is_none() {
            self.broken = Some(e.to_string());
        }
        e
    }

    /// Starts a request: checks the connection, settles whatever dropped calls left owed (see
    /// the module docs), and queues what dropped handles left to do (roll back a transaction,
    /// close statements) ahead of the request, in the same write. The caller then appends its
    /// messages, ending with `Sync`/`Query`, and calls [`Connection::finish_request`].
    ///
    /// Cancel-safe: a dropped future leaves the settling to the next call.
    pub(crate) async fn start_request(&mut self) -> Result<(), Error> {
        if !std::mem::take(&mut self.lookup_request)
            && let Some(name) = self.unkept.take()
        {
            // The call that made it was dropped or leaked before it kept it.
            self.unclaimed.push_back(name);
        }
        if let Some((_, rollback)) = self.guard_ending.take() {
            self.defer_rollback(rollback);
        }
        self.start_request_keeping_guard_ending().await
    }

    /// Settles the connection for the `commit()` or `rollback()` of the guard at `depth`,
    /// whose rollback is `rollback`: a future leaked meanwhile leaves that rollback to the
    /// next request (see `guard_ending`). Once this returns, the caller queues its end
    /// without an await.
    pub(crate) async fn settle_to_end(
        &mut self,
        depth: u32,
        rollback: String,
    ) -> Result<(), Error> {
        // A deeper guard's, left by a leaked future: it ends first, as its Drop would have.
        if let Some((_, earlier)) = self.guard_ending.replace((depth, rollback)) {
            self.defer_rollback(earlier);
        }
        // Leaked from here, the rollback is deferred only by the next request, and a call may
        // judge a held statement's types before its request starts (`check_statement_types`):
        // it would read rows of a rolled-back `ALTER TYPE` by the altered definition. So the
        // caches are forgotten now, as `defer_rollback` does. An end that completes forgets
        // them anyway (the transaction that altered a type ends), but for a savepoint's
        // `RELEASE`, which costs one more lookup.
        if self.types_altered_in_tx {
            self.statements_discarded = true;
        }
        let settled = async {
            self.start_request_keeping_guard_ending().await?;
            self.settle_owed().await
        }
        .await;
        self.guard_ending = None;
        settled
    }

    /// [`Connection::start_request`] but for what a leaked guard's end left (`guard_ending`).
    async fn start_request_keeping_guard_ending(&mut self) -> Result<(), Error> {
        self.check_usable()?;
        let ending_sync = self.ending_sync.take();
        if let Some(offset) = self.open_group.take() {
            match ending_sync {
                // The leaked `end()`'s `Sync` began to reach the socket: the block runs as
                // sent, as it would had the future been dropped.
                Some((sync_at, _)) if sync_at < self.written => {}
                Some((sync_at, owed)) => {
                    self.wbuf.truncate((sync_at - self.written) as usize);
                    self.owed.truncate(self.owed.len() - owed);
                    self.abandon_leaked_group(offset)?;
                }
                None => self.abandon_leaked_group(offset)?,
            }
        }
        if std::mem::take(&mut self.begin_unguarded) {
            self.deferred.push("ROLLBACK".to_string());
        }
        if std::mem::take(&mut self.copy_in_live) {
            self.copy_in_abort = true;
        }
        if std::mem::take(&mut self.stream_sync_owed) {
            frontend::sync(&mut self.wbuf);
        }
        if !self.owed.is_empty() || self.copy_in_abort {
            self.settle_owed().await?;
        } else if !self.rbuf.is_empty() {
            self.check_unsolicited()?;
        }
        self.queue_deferred()
    }

    /// What a leaked pipeline block's open sync group (from stream offset `offset`) leaves,
    /// as the block's `Drop` would have: if none of it reached the server, it is taken back out
    /// of the write buffer and nothing of it runs. If the socket has taken it through its
    /// next-to-last operation (a `process` sent it, and at most its last operation or the
    /// `Flush` after it are left), the operation the socket has begun goes whole, one it has
    /// not is taken back, and the group is failed on purpose before its `Sync` (the Execute
    /// of a portal that does not exist), so none of it commits; its replies are discarded
    /// under that `Sync`'s entry. A `Flush` left in the buffer runs nothing, and one the socket
    /// has begun must go whole. If the socket stopped in an earlier operation, what remains
    /// would have to be cut where an operation starts, which only the block knew: sent, a
    /// `COMMIT` among it would commit the work before it. The connection is closed instead (a
    /// pool then opens another).
    fn abandon_leaked_group(&mut self, offset: u64) -> Result<(), Error> {
        if offset >= self.written {
            self.wbuf.truncate((offset - self.written) as usize);
            return Ok(());
        }
        let (last_end, last_bytes) = self.open_group_last;
        let last_start = last_end - last_bytes as u64;
        if self.written >= last_start {
            if self.written == last_start {
                // Not begun: it is taken back, with the `Flush`es after it.
                self.wbuf.clear();
            } else if last_end > self.written {
                // Begun: its rest goes, the `Flush`es after it need not.
                self.wbuf.truncate((last_end - self.written) as usize);
            }
            frontend::execute(crate::pipeline::ABANDONED_BLOCK, 0, &mut self.wbuf)
                .map_err(|e| Error::protocol(e.to_string()))?;
            frontend::sync(&mut self.wbuf);
            self.owed.push_back(Owed::PipelineSync);
            return Ok(());
        }
        Err(self.poison(Error::usage(
            "a pipeline block was leaked (std::mem::forget, a cycle of Rcs) after part of its \
             open sync group reached the server: its work cannot be abandoned nor its replies \
             told from this call's, so the connection is closed. Let pipeline blocks drop, or \
             end() them",
        )))
    }

    /// Sends the first `n` bytes of the write buffer and no more, as a socket that took only
    /// those would: tests set where a write stopped with it.
    #[cfg(test)]
    pub(crate) async fn send_now(&mut self, n: usize) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.socket.write_all(&self.wbuf[..n]).await?;
        self.wbuf.advance(n);
        self.written += n as u64;
        Ok(())
    }

    /// With no reply owed, the server may have sent only asynchronous messages (notices,
    /// notifications, parameter changes). Anything else, such as a second `ReadyForQuery`,
    /// would be read as the next request's reply and shift every later answer by one call.
    fn check_unsolicited(&mut self) -> Result<(), Error> {
        loop {
            let message = match self.parse_buffered() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.poison(e)),
            };
            if self.absorb_async(message)?.is_some() {
                return Err(self.poison(Error::protocol(
                    "server sent a reply when none was owed (protocol violation); \
                     the connection is closed",
                )));
            }
        }
    }

    /// Runs one message encoder on `wbuf`, leaving it as it was if the encoder fails: an
    /// encoder that stops part-way (a NUL in a string) would leave a header that the server
    /// then reads as the start of our next message, desynchronising the connection.
    pub(crate) fn encode<E>(
        &mut self,
        f: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    ) -> Result<(), E> {
        let mark = self.wbuf.len();
        f(&mut self.wbuf).inspect_err(|_| self.wbuf.truncate(mark))
    }

    /// Defers `sql`, the rollback of a dropped guard, to the next request. If the
    /// transaction altered a type, the rollback puts the old definition back: the caches are
    /// forgotten now, before the next call resolves anything by them (see
    /// `types_altered_in_tx`); the rollback's own tag comes too late for that call.
    pub(crate) fn defer_rollback(&mut self, sql: String) {
        if self.types_altered_in_tx {
            self.statements_discarded = true;
        }
        self.deferred.push(sql);
    }

    /// Appends the deferred `ROLLBACK`s and `Close`s, each with its owed entry. No await.
    pub(crate) fn queue_deferred(&mut self) -> Result<(), Error> {
        // Settled, the status is the server's: a transaction whose BEGIN never ran (its
        // future was dropped first) or that has ended needs no ROLLBACK.
        let rollbacks = std::mem::take(&mut self.deferred);
        if self.owed.is_empty() && self.tx_status == TransactionStatus::Idle {
            drop(rollbacks);
        } else {
            for sql in rollbacks {
                // A savepoint name with a NUL never reached the server, so there is nothing
                // to roll back to; the message is not sent rather than sent in part.
                if self.encode(|buf| frontend::query(&sql, buf)).is_ok() {
                    self.owed.push_back(Owed::Rollback);
                }
            }
        }
        let mut closes =
            std::mem::take(&mut *self.closes.lock().unwrap_or_else(|p| p.into_inner()));
        // Every call that wrote these has been dropped: only one call runs at a time, and each
        // claims its names before it returns (see `unclaimed`).
        closes.extend(self.unclaimed.drain(..));
        if !closes.is_empty() {
            for name in &closes {
                frontend::close(b'S', name, &mut self.wbuf)
                    .map_err(|e| Error::protocol(e.to_string()))?;
            }
            frontend::sync(&mut self.wbuf);
            self.owed.push_back(Owed::Close);
        }
        Ok(())
    }

    /// Records that a `Parse` creating `name` is in the write buffer (see `unclaimed`).
    pub(crate) fn parsing(&mut self, name: &str) {
        if !name.is_empty() {
            self.unclaimed.push_back(name.to_string());
        }
    }

    /// The call that wrote `name`'s `Parse` has read its reply: the statement has a handle now,
    /// or was never created.
    pub(crate) fn claim(&mut self, name: &str) {
        if let Some(i) = self.unclaimed.iter().position(|n| n == name) {
            self.unclaimed.remove(i);
        }
    }

    /// Like [`Connection::claim`] for a call that still has requests of its own to make before
    /// it keeps the statement (looking up its types): the next request that is not that
    /// lookup closes the statement (see `unkept`) unless the call keeps it first
    /// ([`Connection::keep_unkept`]).
    pub(crate) fn claim_for_now(&mut self, name: &str) {
        self.claim(name);
        self.unkept = Some(name.to_string());
    }

    /// The running call now keeps the statement [`Connection::claim_for_now`] claimed (caches
    /// it, or makes a handle that closes it).
    pub(crate) fn keep_unkept(&mut self) {
        self.unkept = None;
    }

    /// Reads every owed reply to its end (a dropped `CopyIn` first gets its `CopyFail`). The
    /// transaction status is then the server's current one.
    async fn settle_owed(&mut self) -> Result<(), Error> {
        if self.copy_in_abort {
            self.queue_copy_fail(
                "COPY cancelled: the client dropped the copy before finishing it",
            )?;
            self.copy_in_abort = false;
        }
        self.flush().await?;
        self.read_past_abandoned(false).await.map(drop)
    }

    /// True when no reply is owed and no dropped COPY waits for its `CopyFail`: the transaction
    /// status is the server's current one. (Deferred `ROLLBACK`s and `Close`s may be pending;
    /// they go out ahead of the next request.)
    pub(crate) fn is_settled(&self) -> bool {
        self.owed.is_empty()
            && !self.copy_in_abort
            && !self.copy_in_live
            && self.open_group.is_none()
    }

    /// Records that a complete request (ending in `Sync` or `Query`) answering as `what` is in
    /// `wbuf`, and sends it.
    pub(crate) async fn finish_request(&mut self, what: Owed) -> Result<(), Error> {
        self.owed.push_back(what);
        self.flush().await
    }

    /// Writes all of `wbuf`, reading while it writes (see [`Connection::poll_send`]).
    /// Cancel-safe: unsent bytes stay queued for the next flush.
    pub(crate) async fn flush(&mut self) -> Result<(), Error> {
        std::future::poll_fn(|cx| self.poll_send(cx)).await
    }

    /// Writes `wbuf` (and flushes TLS). While the socket has no room, reads what the server
    /// sends into `rbuf` without parsing it: a server blocked on its own full send buffer reads
    /// nothing, so a writer that did not read could wait for ever (issue 17's deadlock). The
    /// bytes read are parsed by whoever reads next, in order.
    pub(crate) fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if let Err(e) = self.check_usable() {
            return Poll::Ready(Err(e));
        }
        loop {
            if self.wbuf.is_empty() {
                if !self.unflushed {
                    return Poll::Ready(Ok(()));
                }
                // TLS buffers records in the stream; a plain socket's flush is a no-op.
                return match Pin::new(&mut self.socket).poll_flush(cx) {
                    Poll::Ready(Ok(())) => {
                        self.unflushed = false;
                        Poll::Ready(Ok(()))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(
                        self.poison(Error::io("could not send data to the server", e))
                    )),
                    Poll::Pending => Poll::Pending,
                };
            }
            match Pin::new(&mut self.socket).poll_write(cx, &self.wbuf) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(self.poison(Error::closed(
                        "server closed the connection while we were writing",
                    ))));
                }
                Poll::Ready(Ok(n)) => {
                    self.wbuf.advance(n);
                    self.written += n as u64;
                    self.unflushed = true;
                }
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(
                        self.poison(Error::io("could not send data to the server", e))
                    ));
                }
                Poll::Pending => {
                    if let Err(e) = ready!(self.poll_read_more(cx, 0)) {
                        return Poll::Ready(Err(e));
                    }
                }
            }
        }
    }

    /// Reads the next message, of any kind. Cancel-safe: partial messages stay in `rbuf`.
    pub(crate) async fn read_message(&mut self) -> Result<Message, Error> {
        loop {
            match self.parse_buffered() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => {}
                Err(e) => return Err(self.poison(e)),
            }
            self.read_more().await?;
        }
    }

    fn parse_buffered(&mut self) -> Result<Option<Message>, Error> {
        // Check the length before the parser reserves room for it: garbage must not make us
        // allocate a gigabyte.
        let big = match self.pending_len() {
            Some(len) if len > self.max_message => {
                let tag = self.rbuf[0];
                return Err(Error::protocol(format!(
                    "server sent a message of {len} bytes ({}), more than the {} allowed {}; \
                     the connection is closed. Is this a PostgreSQL server?",
                    message_type(tag),
                    self.max_message,
                    if self.max_message == MAX_STARTUP_MESSAGE {
                        "before authentication completes"
                    } else {
                        "for one message"
                    },
                )));
            }
            // Not whole yet. The parser is not asked: it would reserve the claimed length.
            Some(len) if len > self.rbuf.len() => return Ok(None),
            Some(len) => len > BIG_MESSAGE,
            None => return Ok(None),
        };
        let tag = self.rbuf[0];
        if tag == b'V' && self.owed.contains(&Owed::FunctionCall) {
            return self.parse_function_response(big).map(Some);
        }
        let len = self.pending_len().unwrap_or(0);
        let message = Message::parse(&mut self.rbuf).map_err(|e| invalid(tag, &e))?;
        if let Some(m) = &message {
            check_structure(m).map_err(|e| invalid(tag, &e))?;
            self.count_flush(len, matches!(m, Message::ReadyForQuery(_)));
        }
        if big && message.is_some() {
            // Leave the big allocation to the message alone: the read buffer moves what
            // follows into a small one, so the memory goes when the row does instead of
            // staying with the connection for good.
            self.rbuf = moved_to(BytesMut::with_capacity(READ_CHUNK), &self.rbuf);
        }
        Ok(message)
    }

    /// Counts a parsed message of `len` bytes toward the flush estimate (`flush_bytes`).
    fn count_flush(&mut self, len: usize, ready: bool) {
        self.since_ready = self.since_ready.saturating_add(len);
        if ready {
            let n = std::mem::take(&mut self.since_ready);
            // Up by at most an eighth per flush: one big reply between blocks of small ones
            // (a report query, a large row) must not size the next block's mark for packets
            // it will not get; a workload whose replies really grew gets there in a few
            // dozen flushes.
            self.flush_bytes = if self.flush_bytes == 0 || n <= self.flush_bytes {
                n
            } else {
                self.flush_bytes + ((n - self.flush_bytes) / 8).clamp(1, self.flush_bytes / 8 + 1)
            };
        }
    }

    /// A whole `FunctionCallResponse` ('V': a value's length, -1 for NULL, and its bytes) at the
    /// front of `rbuf`, as the one-column `DataRow` with the same value, which every reply
    /// path already reads (`postgres-protocol` has no parser for 'V'; see `memopt.rs`).
    fn parse_function_response(&mut self, big: bool) -> Result<Message, Error> {
        let len = self.pending_len().unwrap_or(0);
        if len < 9 || len > self.rbuf.len() {
            return Err(invalid(b'V', &"shorter than a value's length"));
        }
        let v = self.rbuf.split_to(len);
        if big {
            self.rbuf = moved_to(BytesMut::with_capacity(READ_CHUNK), &self.rbuf);
        }
        // Tag, length, then the value's length and bytes; a DataRow adds a column count.
        let mut row = BytesMut::with_capacity(len + 2);
        row.extend_from_slice(b"D");
        let Some(body_len) = u32::from_be_bytes([v[1], v[2], v[3], v[4]]).checked_add(2) else {
            return Err(invalid(b'V', &"length out of range"));
        };
        row.extend_from_slice(&body_len.to_be_bytes());
        row.extend_from_slice(&1u16.to_be_bytes());
        row.extend_from_slice(&v[5..]);
        match Message::parse(&mut row) {
            Ok(Some(m)) if row.is_empty() => Ok(m),
            _ => Err(invalid(b'V', &"not one value of the length it claims")),
        }
    }

    /// The whole length (tag included) of the message at the front of `rbuf`, once its header
    /// has arrived.
    fn pending_len(&self) -> Option<usize> {
        match self.rbuf[..] {
            // The length field counts itself but not the tag; the parser rejects one below 4.
            [_, a, b, c, d, ..] => Some(u32::from_be_bytes([a, b, c, d]) as usize + 1),
            _ => None,
        }
    }

    /// Makes room in `rbuf` for the next read, once `parse_buffered` found no whole message.
    ///
    /// A big message gets a buffer of exactly its size and a read's worth after it: a row keeps
    /// its message's whole allocation alive, and BytesMut's own doubling would let a 10 MB row
    /// hold 20 MB. But a length is the server's claim, not bytes we hold: it is taken on trust
    /// only up to [`TRUSTED_LENGTH`]. Past that, the buffer grows with what has arrived
    /// (doubling, capped at the claim), so one length prefix cannot make us allocate a
    /// gigabyte. Each step grows the buffer in place (see [`Connection::grow_read_buffer`]).
    fn make_room(&mut self) {
        let spare = self.rbuf.capacity() - self.rbuf.len();
        if let Some(len) = self.pending_len().filter(|&len| len > BIG_MESSAGE) {
            let whole = len + READ_CHUNK;
            if whole > self.rbuf.capacity() {
                let room = if len <= TRUSTED_LENGTH {
                    whole
                } else if spare < READ_CHUNK / 4 {
                    whole.min((self.rbuf.len() * 2).max(TRUSTED_LENGTH))
                } else {
                    return;
                };
                self.grow_read_buffer(room);
                return;
            }
        }
        if spare < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
    }

    /// Gives `rbuf` room for `room` bytes, exactly, keeping what it holds. Once it is a big
    /// message's own buffer it is reallocated, which for an allocation this large remaps its
    /// pages instead of copying them: allocating the next buffer and copying into it held
    /// the message's bytes twice at each step, and a 100 MB row peaked at 167 MB (fetch-size.md
    /// promises the cap plus one row). A buffer still shared with rows read before is copied,
    /// as the few bytes of the message that arrived with them are all it holds.
    fn grow_read_buffer(&mut self, room: usize) {
        let mut buf = Vec::from(std::mem::take(&mut self.rbuf));
        buf.reserve_exact(room.saturating_sub(buf.len()));
        // Through `Bytes`, which takes the allocation as it is (no `From<Vec<u8>>` here).
        self.rbuf = BytesMut::from(bytes::Bytes::from(buf));
    }

    /// Writes what it can of `wbuf` without waiting, then returns the next message that is not
    /// asynchronous, reading if none is buffered. `Pending` means no message has arrived yet;
    /// the read waker is registered, and the write waker too while `wbuf` still holds bytes.
    ///
    /// Writing and reading in the same poll is what lets a pipeline of any size make progress:
    /// while our writes wait for room in the socket, the replies that free that room (the
    /// server blocks on its own full send buffer until we read) are still being read.
    /// Cancel-safe: unsent bytes stay in `wbuf`, partial messages in `rbuf`.
    ///
    /// `due` gives a true lower bound on the bytes of replies still to come, counted from the
    /// first unparsed byte: the read sleeps until that much could have arrived (see
    /// [`Connection::set_rcvlowat`]). 0 when nothing is known. It is asked only before a
    /// read, not for each buffered message: a pipeline's bound is a search of what it is
    /// owed, and asking it per message cost a continue-on-error statement about 650
    /// instructions (a fifth of the client's extra work in that mode).
    pub(crate) fn poll_exchange(
        &mut self,
        cx: &mut Context<'_>,
        due: impl Fn() -> usize,
    ) -> Poll<Result<Message, Error>> {
        if let Err(e) = self.check_usable() {
            return Poll::Ready(Err(e));
        }
        loop {
            while !self.wbuf.is_empty() {
                match Pin::new(&mut self.socket).poll_write(cx, &self.wbuf) {
                    Poll::Ready(Ok(0)) => self.write_failed(Error::closed(
                        "server closed the connection while we were writing",
                    )),
                    Poll::Ready(Ok(n)) => {
                        self.wbuf.advance(n);
                        self.written += n as u64;
                        self.unflushed = true;
                    }
                    Poll::Ready(Err(e)) => {
                        self.write_failed(Error::io("could not send data to the server", e));
                    }
                    Poll::Pending => break,
                }
            }
            // TLS buffers records in the stream; a plain socket's flush is a no-op.
            if self.wbuf.is_empty() && self.unflushed {
                match Pin::new(&mut self.socket).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.unflushed = false,
                    Poll::Ready(Err(e)) => {
                        self.write_failed(Error::io("could not send data to the server", e));
                    }
                    Poll::Pending => {}
                }
            }
            match self.parse_buffered() {
                Ok(Some(message)) => match self.absorb_async(message) {
                    Ok(Some(m)) => return Poll::Ready(Ok(m)),
                    Ok(None) => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                },
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(self.poison(e))),
            }
            // After a failed write no mark: the reads left are the last ones.
            let due = if self.write_error.is_some() { 0 } else { due() };
            if let Err(e) = ready!(self.poll_read_more(cx, due)) {
                return Poll::Ready(Err(e));
            }
        }
    }

    /// A write of [`Connection::poll_exchange`] failed with `e`: the bytes not yet sent are
    /// dropped (they can never go), and the exchange goes on reading. A server that ends a
    /// connection (a FATAL error, a terminated backend) has often answered part of a pipeline
    /// first, and those replies, and its own error, sit in our receive buffer: reported as
    /// "did not complete", an operation that ran and committed could be retried by its caller.
    /// So they are read first, and `e` is the connection's error only once the stream ends
    /// (libpq's `pqSendSome` reads on after a failed send for the same reason). No read waits
    /// for ever on this: on TCP every write error (a reset, a broken pipe, a timeout) also ends
    /// the receiving side, and a Unix socket whose peer is gone reads what was left, then EOF.
    fn write_failed(&mut self, e: Error) {
        self.write_error.get_or_insert(e);
        self.unsent_from.get_or_insert(self.written);
        // Counted as written: `written + wbuf.len()` stays the stream position a pipeline
        // keeps its operations' ends in (`Pipeline::flush_through` splits `wbuf` by it).
        self.written += self.wbuf.len() as u64;
        self.wbuf.clear();
        self.unflushed = false;
    }

    /// Reads what the socket has into `rbuf`. The end of the stream or an I/O error poisons
    /// the connection. A `read_buf` future changes the buffer only when it completes, so
    /// dropping a pending one loses nothing.
    ///
    /// `due` is as for [`Connection::poll_exchange`]; every other read passes 0, which puts
    /// the low-water mark back to 1 before it waits, so a mark left by a pipeline whose future
    /// was dropped never delays a later reply.
    fn poll_read_more(&mut self, cx: &mut Context<'_>, due: usize) -> Poll<Result<(), Error>> {
        if let Err(e) = self.set_rcvlowat(due.saturating_sub(self.rbuf.len())) {
            return Poll::Ready(Err(e));
        }
        self.make_room();
        // After a failed write (`write_failed`), the stream's end is reported as that write.
        match ready!(pin!(self.socket.read_buf(&mut self.rbuf)).poll(cx)) {
            Ok(0) => {
                let e = match self.write_error.take() {
                    Some(e) => e,
                    None => closed_by_server(&self.rbuf),
                };
                Poll::Ready(Err(self.poison(e)))
            }
            Ok(_) => Poll::Ready(Ok(())),
            Err(e) => {
                let e = match self.write_error.take() {
                    Some(w) => w,
                    None => Error::io("could not receive data from the server", e),
                };
                Poll::Ready(Err(self.poison(e)))
            }
        }
    }

    /// Asks the kernel not to report the socket readable until `bytes` have arrived
    /// (`SO_RCVLOWAT`), when that many are certainly on their way: a continue-on-error
    /// pipeline's replies each end in a `ReadyForQuery` the server flushes on its own, and
    /// waking once per small packet cost more client CPU than the statements themselves.
    ///
    /// What must stay true, or a reply could wait for bytes that never come:
    /// - `bytes` is a lower bound of what the server will send without hearing from us
    ///   again (the caller's job: see `Pipeline::due`); a closed or reset connection wakes
    ///   the reader whatever the mark;
    /// - every other wait sets it back to 1 first (`poll_read_more(cx, 0)`);
    /// - it stays below the receive buffer (`MAX_RCVLOWAT`), so the server is never blocked
    ///   on a full buffer that has not yet reached the mark;
    /// - it is reached within `MARK_FLUSHES` of the server's flushes as last measured
    ///   (`flush_bytes`), so it never asks for more packets than the sender may have
    ///   unacknowledged: the kernel does not ACK small packets while we sleep below it. No
    ///   mark until a `ReadyForQuery` has been measured.
    ///
    /// Linux honours the mark in `poll`/`epoll` for TCP (and re-checks readiness when it is
    /// lowered, so lowering never loses a wake-up); a non-blocking read still returns what
    /// is there. Unix-domain sockets ignore it for `poll`, and TLS buffers records of its
    /// own, so both are left at 1. A failure to raise the mark only costs wake-ups; a
    /// failure to lower it breaks the connection rather than risk waiting for ever.
    fn set_rcvlowat(&mut self, bytes: usize) -> Result<(), Error> {
        let cap = MARK_FLUSHES
            .saturating_mul(self.flush_bytes)
            .min(MAX_RCVLOWAT);
        let want = bytes.min(cap);
        let want = if want < MIN_RCVLOWAT { 1 } else { want };
        // A mark at or below what is due is safe to keep: only raise it when that halves
        // the wake-ups, which saves a system call on most reads.
        if want == self.rcvlowat
            || (self.rcvlowat > 1 && self.rcvlowat <= want && want < 2 * self.rcvlowat)
        {
            return Ok(());
        }
        let Socket::Tcp(stream) = &self.socket else {
            return Ok(());
        };
        let value = want as libc::c_int;
        // SAFETY: `stream` owns an open socket for the duration of the call; the option value
        // points at a live c_int and its length says so.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(stream),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            self.rcvlowat = want;
        } else if want < self.rcvlowat {
            let e = std::io::Error::last_os_error();
            return Err(self.poison(Error::io(
                "could not lower the socket's receive low-water mark",
                e,
            )));
        }
        Ok(())
    }

    /// Reads the next message that is not asynchronous: notices go to the handler, notifications
    /// to the queue, parameter changes to the map. A FATAL error breaks the connection.
    pub(crate) async fn next_message(&mut self) -> Result<Message, Error> {
        loop {
            let message = self.read_message().await?;
            if let Some(m) = self.absorb_async(message)? {
                return Ok(m);
            }
        }
    }

    /// Waits for a notification on an idle connection.
    /// Refuses a wait for notifications inside a transaction block. PostgreSQL delivers a
    /// notification only while the session is outside one (one that arrives during a
    /// transaction waits for its end, and a `LISTEN` in it starts only at its commit), so such
    /// a wait could end only with the connection: a hang, not a wait. Call when settled: the
    /// status is then the server's.
    pub(crate) fn check_can_wait_for_notifications(&self) -> Result<(), Error> {
        if self.tx_status != TransactionStatus::Idle {
            return Err(Error::usage(
                "cannot wait for notifications inside a transaction block: PostgreSQL delivers \
                 them only once the transaction has ended, so the wait would never end; commit \
                 or roll back first (nothing is lost: they are delivered then)",
            ));
        }
        Ok(())
    }

    pub(crate) async fn next_notification(&mut self) -> Result<Notification, Error> {
        loop {
            if let Some(n) = self.notifications.pop_front() {
                return Ok(n);
            }
            let message = self.read_message().await?;
            self.absorb_idle(message)?;
        }
    }

    /// Hands the whole asynchronous messages (notices, notifications, parameter changes) at
    /// the front of `rbuf` to their handlers, stopping at the first message of another kind,
    /// which stays for whoever reads the reply. A long COPY FROM STDIN reads the server's
    /// output only while its writes wait for room (see [`Connection::poll_send`]), and nothing
    /// parses it until the COPY ends: without this, a trigger's notice per row would pile up
    /// in `rbuf` for the whole load (about 100 bytes a row), and reach the handler only then.
    pub(crate) fn absorb_buffered_async(&mut self) -> Result<(), Error> {
        // Backend message tags: NoticeResponse, NotificationResponse, ParameterStatus.
        while let Some(b'N' | b'A' | b'S') = self.rbuf.first() {
            let message = match self.parse_buffered() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()), // not whole yet
                Err(e) => return Err(self.poison(e)),
            };
            if let Some(m) = self.absorb_async(message)? {
                let name = crate::connect::message_name(&m);
                return Err(self.poison(Error::protocol(format!(
                    "a {name} message was taken for an asynchronous one: this is a bug in \
                     slipstream-pg; the connection is closed"
                ))));
            }
        }
        Ok(())
    }

    /// Between the writes of a COPY FROM STDIN: reads what the server has sent, without
    /// waiting (as [`Connection::check_idle`] does), hands notices to their handler, and
    /// returns the server's error if it has failed the COPY already (bad data, a constraint).
    /// The server then discards every further `CopyData`, so the rest of the data would be
    /// sent for nothing (libpq's `PQputCopyData` stops likewise). Any other message stays
    /// for the COPY's end.
    pub(crate) fn copy_in_failure(&mut self) -> Result<Option<DbError>, Error> {
        // As in `check_idle`: a read that would wait registers this no-op waker, and the next
        // real wait registers its own.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            self.absorb_buffered_async()?;
            let whole = self.pending_len().is_some_and(|len| len <= self.rbuf.len());
            match self.rbuf.first() {
                Some(b'E') if whole => {
                    return match self.parse_buffered() {
                        Ok(Some(Message::ErrorResponse(body))) => {
                            let db =
                                DbError::parse(&mut body.fields()).map_err(|e| self.poison(e))?;
                            if db.is_fatal() {
                                return Err(self.poison(Error::db(db)));
                            }
                            Ok(Some(db))
                        }
                        Ok(_) => Err(self.poison(Error::protocol(
                            "an ErrorResponse did not parse as one: this is a bug in \
                             slipstream-pg; the connection is closed",
                        ))),
                        Err(e) => Err(self.poison(e)),
                    };
                }
                Some(_) if whole => return Ok(None),
                _ => {} // nothing, or part of a message: read what has arrived
            }
            match self.poll_read_more(&mut cx, 0) {
                Poll::Pending => return Ok(None),
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(e),
            }
        }
    }

    /// Takes in a message that arrived while nothing was asked of the server: only an
    /// asynchronous one may (see `absorb_async`); anything else breaks the connection.
    fn absorb_idle(&mut self, message: Message) -> Result<(), Error> {
        match self.absorb_async(message)? {
            None => Ok(()),
            Some(m) => {
                let name = crate::connect::message_name(&m);
                Err(self.poison(Error::protocol(format!(
                    "server sent an unexpected {name} message while the connection was idle"
                ))))
            }
        }
    }

    /// Reads, without waiting, what the server sent while nothing was asked of it (see
    /// `Client::check_idle`). A connection with replies owed is not idle: its next call reads
    /// them, and this leaves it alone.
    pub(crate) fn check_idle(&mut self) -> Result<(), Error> {
        self.check_usable()?;
        if !self.is_settled() {
            return Ok(());
        }
        // A read that would wait registers this no-op waker with the I/O driver in place of
        // none: nobody waits on an idle connection, and the next real wait registers its own.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            loop {
                match self.parse_buffered() {
                    Ok(Some(message)) => self.absorb_idle(message)?,
                    Ok(None) => break,
                    Err(e) => return Err(self.poison(e)),
                }
            }
            // Pending costs no system call when the driver has seen nothing arrive.
            match self.poll_read_more(&mut cx, 0) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(e),
            }
        }
    }

    /// Handles an asynchronous message and returns `None`, or returns any other message.
    fn absorb_async(&mut self, message: Message) -> Result<Option<Message>, Error> {
        match message {
            Message::NoticeResponse(body) => {
                let notice = DbError::parse(&mut body.fields()).map_err(|e| self.poison(e))?;
                (self.notice_handler)(&notice);
            }
            Message::NotificationResponse(body) => {
                let n = Notification::from_body(&body).map_err(|e| self.poison(e))?;
                self.notifications.push_back(n);
            }
            Message::ParameterStatus(body) => {
                let (name, value) = match (body.name(), body.value()) {
                    (Ok(n), Ok(v)) => (n.to_string(), v.to_string()),
                    _ => {
                        return Err(
                            self.poison(Error::protocol("malformed ParameterStatus message"))
                        );
                    }
                };
                if self.parameters.len() >= MAX_PARAMETERS && !self.parameters.contains_key(&name) {
                    return Err(self.poison(Error::protocol(format!(
                        "server reported more than {MAX_PARAMETERS} distinct parameters \
                         (ParameterStatus); the connection is closed. Is this a PostgreSQL server?"
                    ))));
                }
                // Text goes both ways as UTF-8 bytes, converted by the server from and to the
                // client encoding: under any other, a `String` would be stored mis-encoded
                // ("é" as "Ã©" under LATIN1) and read back the same, with no error anywhere.
                if name == "client_encoding" && !value.eq_ignore_ascii_case("UTF8") {
                    return Err(self.poison(Error::usage(format!(
                        "the session's client_encoding was set to {value}, but slipstream-pg \
                         sends and reads text as UTF-8 only (text would be stored and read \
                         mis-encoded); the connection is closed. Leave client_encoding as UTF8"
                    ))));
                }
                self.parameters.insert(name, value);
            }
            Message::ErrorResponse(body) => {
                let db = DbError::parse(&mut body.fields()).map_err(|e| self.poison(e))?;
                if db.is_fatal() {
                    return Err(self.poison(Error::db(db)));
                }
                return Ok(Some(Message::ErrorResponse(body)));
            }
            Message::CommandComplete(body) => {
                // Every reply path passes here, so this is the one place that sees a user's
                // DISCARD ALL / DEALLOCATE ALL, whichever protocol ran it.
                if let Ok(tag) = body.tag() {
                    self.forget(Forget::after(tag.as_bytes()));
                    self.count_end(tag.as_bytes());
                }
                return Ok(Some(Message::CommandComplete(body)));
            }
            m => return Ok(Some(m)),
        }
        Ok(None)
    }

    /// Reads the next message of the most recent request, first discarding what belongs to
    /// earlier, abandoned requests. Updates the transaction status on `ReadyForQuery`.
    pub(crate) async fn recv(&mut self) -> Result<Message, Error> {
        if let Some(m) = self.recv_buffered()? {
            return Ok(m);
        }
        match self.read_past_abandoned(true).await? {
            Some(m) => Ok(m),
            None => Err(Error::protocol(
                "no reply is owed: this is a bug in slipstream-pg",
            )),
        }
    }

    /// [`Connection::recv`] as a poll: what `wbuf` holds is written while waiting, and the
    /// replies of abandoned requests ahead of the caller's are discarded. Cancel-safe (all
    /// state is in the connection). For the `Stream`/`Sink` implementations, which cannot hold
    /// a future borrowing the client.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Message, Error>> {
        loop {
            if let Some(m) = self.recv_buffered()? {
                return Poll::Ready(Ok(m));
            }
            if self.owed.is_empty() {
                return Poll::Ready(Err(Error::protocol(
                    "no reply is owed: this is a bug in slipstream-pg",
                )));
            }
            let message = ready!(self.poll_exchange(cx, || 0))?;
            if self.owed.len() > 1 {
                // A CopyFail `discard` queues is written by the next `poll_exchange`.
                self.discard(&message)?;
                continue;
            }
            if let Message::ReadyForQuery(body) = &message {
                self.ready_for_query(body.status());
            }
            return Poll::Ready(Ok(message));
        }
    }

    /// [`Connection::recv`]'s common case without an await: the next message of the most
    /// recent request when it is already in `rbuf` and no abandoned reply comes before it (a
    /// multi-row reply). `None` when the slow path is needed.
    pub(crate) fn recv_buffered(&mut self) -> Result<Option<Message>, Error> {
        if self.owed.len() > 1 {
            return Ok(None);
        }
        loop {
            let message = match self.parse_buffered() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(None),
                Err(e) => return Err(self.poison(e)),
            };
            if let Message::DataRow(_) = message {
                return Ok(Some(message));
            }
            if let Some(m) = self.absorb_async(message)? {
                if let Message::ReadyForQuery(body) = &m {
                    self.ready_for_query(body.status());
                }
                return Ok(Some(m));
            }
        }
    }

    /// The next message of the newest request's reply, taken from `rbuf` in place when it is
    /// one of the kinds nearly every extended-protocol reply is made of: no `BytesMut` split
    /// and no `Message` for an acknowledgement, a command tag or a `ReadyForQuery` (a
    /// `DataRow` is split off: its row keeps those bytes). The bookkeeping is `recv`'s: the
    /// flush estimate, `DISCARD ALL`, the transaction status and `owed`.
    ///
    /// Everything else is `Other`, left whole in `rbuf` for `recv_buffered`, which checks and
    /// reports it as it always has: another kind of message, an odd length or status byte, a
    /// tag that is not UTF-8, a message bigger than `BIG_MESSAGE` (it gets its own buffer
    /// there), or an older request's reply still owed ahead of this one. So this path
    /// accepts only what the general one accepts, and reads it the same way.
    /// `Partial`: the message at the front has not all arrived ([`Connection::read_more`]).
    ///
    /// A single pass with no await: `read_reply` spent about 2,000 instructions per `SELECT 1`
    /// parsing, dispatching and awaiting its four small messages one by one (issue 21).
    ///
    /// `keep_rows` false: a `DataRow` is passed over (`Skipped`) without being split off or
    /// parsed; the parser would read only its column count, which the length already covers.
    pub(crate) fn next_common(&mut self, keep_rows: bool) -> Result<Common, Error> {
        #[cfg(test)]
        if GENERAL_ONLY.get() {
            return Ok(Common::Other);
        }
        if self.owed.len() != 1 {
            return Ok(Common::Other);
        }
        let Some(len) = self.pending_len() else {
            return Ok(Common::Partial);
        };
        if len > BIG_MESSAGE {
            return Ok(Common::Other);
        }
        if len > self.rbuf.len() {
            return Ok(Common::Partial);
        }
        let tag = self.rbuf[0];
        let mut forget = Forget::Nothing;
        let mut ended = false;
        let common = match (tag, len) {
            (b'1', 5) => Common::Ack,
            (b'2', 5) => Common::Bound,
            (b'n', 5) => Common::NoData,
            (b'Z', 6) if matches!(self.rbuf[5], b'I' | b'T' | b'E') => Common::Ready,
            (b'C', 6..) => match command_tag(&self.rbuf[5..len]) {
                Some(text) => {
                    forget = Forget::after(text);
                    ended = ends_transaction_block(text);
                    Common::Complete(CommandTag::parse(text))
                }
                None => return Ok(Common::Other),
            },
            (b'D', 7..) if !keep_rows => Common::Skipped,
            // A column count is all the parser reads; the values are the row's to check.
            (b'D', 7..) => {
                self.count_flush(len, false);
                return match Message::parse(&mut self.rbuf) {
                    Ok(Some(Message::DataRow(body))) => Ok(Common::Row(body)),
                    // The message is whole and holds its count, so the parser cannot refuse
                    // it; if it ever did, its bytes are gone and the connection is out of step.
                    Ok(_) => Err(self.poison(invalid(tag, &"not a whole row"))),
                    Err(e) => Err(self.poison(invalid(tag, &e))),
                };
            }
            _ => return Ok(Common::Other),
        };
        self.forget(forget);
        self.transaction_ends += u64::from(ended);
        self.count_flush(len, tag == b'Z');
        if let Common::Ready = common {
            self.ready_for_query(self.rbuf[5]);
        }
        self.rbuf.advance(len);
        Ok(common)
    }

    /// Marks what a completed command made stale, to be forgotten before the caches' next use.
    fn forget(&mut self, forget: Forget) {
        match forget {
            Forget::Nothing => {}
            // The memopt function OIDs too: the statements that hold them are gone.
            Forget::Prepared => {
                self.statements_discarded = true;
                self.functions_discarded = true;
            }
            Forget::Types => {
                self.statements_discarded = true;
                self.types_altered_in_tx = true;
            }
            Forget::Rollback if self.types_altered_in_tx => self.statements_discarded = true,
            Forget::Rollback => {}
        }
    }

    /// Counts a command tag that ended a transaction block (see `transaction_ends`).
    fn count_end(&mut self, tag: &[u8]) {
        self.transaction_ends += u64::from(ends_transaction_block(tag));
    }

    /// Reads what the socket has into `rbuf`, once what is there holds no whole message (no
    /// receive low-water mark). Cancel-safe, as `poll_read_more` is.
    pub(crate) async fn read_more(&mut self) -> Result<(), Error> {
        std::future::poll_fn(|cx| self.poll_read_more(cx, 0)).await
    }

    /// Accounts for a `ReadyForQuery` with transaction status byte `status`.
    pub(crate) fn ready_for_query(&mut self, status: u8) {
        self.owed.pop_front();
        if status == b'I' && std::mem::take(&mut self.types_altered_in_tx) {
            // The transaction that altered a type ended, maybe rolled back (an implicit
            // one by an error after the ALTER): its definition may be the old one again.
            self.statements_discarded = true;
        }
        self.tx_status = match status {
            b'T' => TransactionStatus::InTransaction,
            b'E' => TransactionStatus::Failed,
            _ => TransactionStatus::Idle,
        };
        if self.tx_status != TransactionStatus::Failed {
            // Ended, or recovered (rolled back to a savepoint): no longer why it fails.
            self.deferred_failure = None;
        }
    }

    /// `e`, an error of the caller's request, with why the transaction is failed when the
    /// server refused a statement because it is (25P02) and a dropped savepoint guard's failed
    /// rollback, not a statement of the caller's, failed it (see `deferred_failure`). Call it
    /// with the error of the reply it came in, before a later `ReadyForQuery` could forget the
    /// reason (a pipeline's next operation may end the transaction).
    pub(crate) fn explain_failed(&self, e: Error) -> Error {
        match &self.deferred_failure {
            Some(failure) if e.code() == Some(crate::SqlState::IN_FAILED_SQL_TRANSACTION) => e
                .note(format!(
                    // Not "rather than by a statement of yours": one may have failed first,
                    // and the guard's rollback was what would have undone it.
                    "the transaction is aborted because {failure}: roll the transaction back"
                )),
            _ => e,
        }
    }

    /// Settles the connection: answers everything dropped calls left owed, runs what dropped
    /// handles deferred (a `ROLLBACK`, `Close`s), and reads it all, so that the transaction
    /// status is the server's current one.
    pub(crate) async fn settle(&mut self) -> Result<(), Error> {
        self.start_request().await?;
        self.settle_owed().await
    }

    /// With `keep_last`, returns the first message of the most recent request; without, treats
    /// every queued request as abandoned and returns `None` once all are answered.
    async fn read_past_abandoned(&mut self, keep_last: bool) -> Result<Option<Message>, Error> {
        loop {
            if self.owed.is_empty() {
                return Ok(None);
            }
            let message = self.next_message().await?;
            let abandoned = !keep_last || self.owed.len() > 1;
            if !abandoned {
                if let Message::ReadyForQuery(body) = &message {
                    self.ready_for_query(body.status());
                }
                return Ok(Some(message));
            }
            if self.discard(&message)? {
                self.flush().await?;
            }
        }
    }

    /// Accounts for a message of a reply nobody waits for any more: its `ReadyForQuery`
    /// settles the request, and an abandoned COPY FROM STDIN, which would wait for data that
    /// will never come, gets a `CopyFail` (and a `Sync` after an extended-protocol request:
    /// see the module docs). Returns true if something was queued to send.
    pub(crate) fn discard(&mut self, message: &Message) -> Result<bool, Error> {
        match message {
            Message::ReadyForQuery(body) => self.ready_for_query(body.status()),
            // The failures nobody reads that abort a transaction: a savepoint's deferred
            // rollback (its savepoint gone), the error that fails an abandoned pipeline block
            // on purpose, and a dropped row stream's batch fetched ahead of its reader (the
            // next `Execute` goes out as each batch arrives, so rows the caller never asked
            // for may fail). The first is the one that aborted it. A deferred RELEASE (of a
            // `savepoint()` future dropped) refused because the transaction had already
            // failed did not.
            Message::ErrorResponse(body)
                if matches!(
                    self.owed.front(),
                    Some(Owed::Rollback | Owed::PipelineSync | Owed::Stream | Owed::Copy)
                ) && self.deferred_failure.is_none() =>
            {
                let db = DbError::parse(&mut body.fields()).map_err(|e| self.poison(e))?;
                self.deferred_failure = match self.owed.front() {
                    Some(Owed::Rollback)
                        if db.code() != crate::SqlState::IN_FAILED_SQL_TRANSACTION =>
                    {
                        Some(Unseen::DroppedGuard(Box::new(db)))
                    }
                    Some(Owed::Stream)
                        if db.code() != crate::SqlState::IN_FAILED_SQL_TRANSACTION =>
                    {
                        Some(Unseen::DroppedStream(Box::new(db)))
                    }
                    Some(Owed::Stream) => None,
                    // A COPY whose handle was dropped or leaked before it ended: the
                    // `CopyFail` this connection sent for it, or the COPY's own failure.
                    Some(Owed::Copy) if db.code() != crate::SqlState::IN_FAILED_SQL_TRANSACTION => {
                        Some(Unseen::DroppedCopy(Box::new(db)))
                    }
                    Some(Owed::Copy) => None,
                    _ if crate::pipeline::is_abandoned_block(&db) => Some(Unseen::AbandonedBlock),
                    // An operation of the dropped block failed first (the server then skips
                    // the marker): what failed the transaction is still the dropped block.
                    Some(Owed::PipelineSync)
                        if db.code() != crate::SqlState::IN_FAILED_SQL_TRANSACTION =>
                    {
                        Some(Unseen::DroppedBlockFailure(Box::new(db)))
                    }
                    _ => None,
                };
            }
            Message::CopyInResponse(_) => {
                let what = self.owed.front().copied();
                if what == Some(Owed::PipelineSync) {
                    // The operations pipelined after it went to the server as COPY data.
                    return Err(self.poison(Error::protocol(
                        "an abandoned pipeline operation started COPY FROM STDIN, which consumed the \
                         operations after it; the connection is closed",
                    )));
                }
                self.queue_copy_fail("COPY cancelled by the client")?;
                if what.is_some_and(Owed::is_extended) {
                    frontend::sync(&mut self.wbuf);
                }
                return Ok(true);
            }
            _ => {}
        }
        Ok(false)
    }

    /// Appends a `CopyFail` with `reason` (which the server reports back in its error).
    pub(crate) fn queue_copy_fail(&mut self, reason: &str) -> Result<(), Error> {
        // A NUL cannot travel in the protocol's strings; the reason is only for the log.
        let reason = reason.replace('\0', "\\0");
        self.encode(|buf| frontend::copy_fail(&reason, buf))
            .map_err(|e| Error::usage(format!("cannot send this COPY failure reason: {e}")))
    }

    /// Handles the start of a COPY that arrived in reply to a call that is not a COPY call:
    /// a server waiting for COPY data gets `CopyFail` at once (it would otherwise wait forever),
    /// and COPY TO STDOUT's data will be skipped. Returns the error to report.
    pub(crate) async fn refuse_copy(&mut self, inbound: bool) -> Result<Error, Error> {
        let refused = self.queue_refuse_copy(inbound)?;
        self.flush().await?;
        Ok(refused)
    }

    /// [`Connection::refuse_copy`] without the flush: what it sends is queued in `wbuf`.
    pub(crate) fn queue_refuse_copy(&mut self, inbound: bool) -> Result<Error, Error> {
        if inbound {
            self.queue_copy_fail("use Client::copy_in for COPY FROM STDIN")?;
            // The request's own Sync was ignored while the server waited for data; after the
            // failure it skips everything up to the next one. A row stream sends its Sync when
            // the error arrives.
            if self.owed.back() == Some(&Owed::Extended) {
                frontend::sync(&mut self.wbuf);
            }
            Ok(Error::usage(
                "COPY FROM STDIN takes its data as a stream: use Client::copy_in",
            ))
        } else {
            // Nothing the client can send stops a COPY TO STDOUT (CopyFail is for COPY FROM
            // STDIN), so the server runs it to its end, and a simple query's string goes on
            // with the statements after it, which commit: the error must not read as "nothing
            // ran", or a caller who retries runs the string's writes twice.
            Ok(Error::usage(
                "COPY TO STDOUT returns data as a stream: use Client::copy_out. The COPY ran \
                 (its data was discarded), and so did any statements after it in the same \
                 string",
            ))
        }
    }

    /// Sends `Terminate` and closes the socket.
    pub(crate) async fn terminate(&mut self) -> Result<(), Error> {
        if self.broken.is_some() {
            return Ok(());
        }
        frontend::terminate(&mut self.wbuf);
        self.flush().await?;
        let _ = self.socket.shutdown().await;
        self.broken = Some("the connection was closed".into());
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Tell the server we are leaving, so it does not log an unexpected EOF. Best effort.
        if self.broken.is_none() && self.wbuf.is_empty() {
            let mut buf = BytesMut::new();
            frontend::terminate(&mut buf);
            self.socket.try_write_plain(&buf);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Sends every message to the general reader: the reference `common_reply_tests` compares
    /// the fast path with.
    static GENERAL_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
mod common_reply_tests;

/// What [`Connection::next_common`] found at the front of `rbuf`.
pub(crate) enum Common {
    /// `ParseComplete`.
    Ack,
    /// `BindComplete`.
    Bound,
    /// `NoData`.
    NoData,
    Row(DataRowBody),
    /// A `DataRow` the caller does not keep, passed over.
    Skipped,
    /// `CommandComplete`.
    Complete(CommandTag),
    /// `ReadyForQuery`, accounted for: the reply is over.
    Ready,
    /// A whole message for [`Connection::recv_buffered`].
    Other,
    /// Part of a message.
    Partial,
}

/// The tag of a `CommandComplete` body: its NUL last and no other (as the parser requires),
/// and ASCII, as PostgreSQL's tags are. `None` for anything else, which the general reader
/// then reads (a tag of other UTF-8) or reports.
fn command_tag(body: &[u8]) -> Option<&[u8]> {
    match body.split_last() {
        Some((0, text)) if text.iter().all(|&b| b != 0 && b.is_ascii()) => Some(text),
        _ => None,
    }
}

/// Whether a command tag is one only the end of a transaction block sends: `COMMIT` (also
/// `COMMIT AND CHAIN`) and `PREPARE TRANSACTION`. A `COMMIT` of a failed transaction answers
/// `ROLLBACK`, which is also `ROLLBACK TO SAVEPOINT`'s tag, so it is not one of them.
fn ends_transaction_block(tag: &[u8]) -> bool {
    matches!(tag, b"COMMIT" | b"PREPARE TRANSACTION")
}

/// What a command, by its tag, makes the client's caches forget.
enum Forget {
    Nothing,
    /// `DISCARD ALL`, `DEALLOCATE ALL`: the session's prepared statements are gone.
    Prepared,
    /// `ALTER TYPE`, `ALTER DOMAIN`: a type looked up in the catalogs may have changed under its
    /// OID (a label or attribute added, renamed, or dropped and added again, which reorders a
    /// composite's fields). Read by the old definition, a composite's values of one type land
    /// in each other's fields without any error, so the types and the statements that hold them
    /// are looked up again. Not `ALTER TABLE`: it is frequent, and the statements it makes
    /// stale are prepared again when the server says so; a table's row type and a change made
    /// through another connection need `Client::clear_statement_cache`.
    Types,
    /// `ROLLBACK`, `ROLLBACK TO SAVEPOINT`: undoes an `ALTER TYPE` the transaction ran (see
    /// `Connection::types_altered_in_tx`).
    Rollback,
}

impl Forget {
    fn after(tag: &[u8]) -> Forget {
        match tag {
            b"DISCARD ALL" | b"DEALLOCATE ALL" => Forget::Prepared,
            b"ALTER TYPE" | b"ALTER DOMAIN" => Forget::Types,
            b"ROLLBACK" => Forget::Rollback,
            _ => Forget::Nothing,
        }
    }
}

/// A failure that aborted the transaction while no caller was reading (see
/// `Connection::deferred_failure`). Its `Display` is why the transaction failed, the one
/// wording every message uses (`explain_failed`, the commits).
#[derive(Debug)]
pub(crate) enum Unseen {
    /// A dropped savepoint guard's deferred rollback failed with this error.
    DroppedGuard(Box<DbError>),
    /// A pipeline block dropped before its `end()`, with part of it sent, was failed on
    /// purpose so that none of it commits (see `Pipeline`'s `Drop`).
    AbandonedBlock,
    /// A row stream dropped part-way had already asked for its next batch, and the server
    /// failed producing it with this error.
    DroppedStream(Box<DbError>),
    /// An operation of a pipeline block dropped before its `end()` failed with this error
    /// (before the block's own marker, or in continue-on-error mode, where none is sent).
    DroppedBlockFailure(Box<DbError>),
    /// A `CopyIn` or `CopyOut` dropped (or leaked) before its COPY ended: the COPY failed
    /// with this error, the abort the client sent for it or its own, read by the next request.
    DroppedCopy(Box<DbError>),
}

impl std::fmt::Display for Unseen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unseen::DroppedGuard(db) => {
                // The rollback fails this way only when its savepoint is gone; anything else
                // (a cancel that hit it) is left to the server's words.
                let why = match db.code() {
                    crate::SqlState::S_E_INVALID_SPECIFICATION => {
                        ": SQL the guard did not send had ended that savepoint"
                    }
                    _ => "",
                };
                write!(
                    f,
                    "the rollback of a savepoint whose guard was dropped had failed ({db}{why})"
                )
            }
            Unseen::AbandonedBlock => f.write_str(
                "a pipeline block dropped before its end() had been failed on purpose, so that \
                 none of its unfinished work would commit",
            ),
            Unseen::DroppedBlockFailure(db) => write!(
                f,
                "an operation of a pipeline block dropped before its end() had failed ({db}), \
                 its error unread"
            ),
            Unseen::DroppedCopy(db) => write!(
                f,
                "a COPY whose CopyIn or CopyOut was dropped (or leaked) before it ended had \
                 failed ({db}), its error unread"
            ),
            Unseen::DroppedStream(db) => write!(
                f,
                "a row stream dropped part-way had already asked for its next rows (a stream \
                 fetches ahead of its reader), and producing them failed ({db})"
            ),
        }
    }
}

/// The notice handler of a new connection: a `tracing` event at INFO level.
pub(crate) fn default_notice_handler() -> NoticeHandler {
    Box::new(|notice| tracing::info!(target: "slipstream_pg::notice", "{notice}"))
}

/// The end of the stream, with what `rbuf` (the bytes read but not yet a whole message) says
/// about where it came: between messages, or in the middle of one.
fn closed_by_server(rbuf: &[u8]) -> Error {
    let cut = match rbuf {
        [] => String::new(),
        [tag, a, b, c, d, ..] => format!(
            " in the middle of a message ({}, {} of {} bytes arrived)",
            message_type(*tag),
            rbuf.len(),
            u32::from_be_bytes([*a, *b, *c, *d]) as u64 + 1
        ),
        [tag, ..] => format!(
            " in the middle of a message ({}, {} bytes of its header arrived)",
            message_type(*tag),
            rbuf.len()
        ),
    };
    Error::io(
        &format!(
            "server closed the connection unexpectedly{cut} (the backend may have been terminated \
             or the server restarted); the connection is closed"
        ),
        std::io::ErrorKind::UnexpectedEof.into(),
    )
}

/// The protocol's name for a backend message tag and the tag (`DataRow 'D'`), for error
/// messages.
fn message_type(tag: u8) -> String {
    let name = match tag {
        b'R' => "Authentication",
        b'K' => "BackendKeyData",
        b'2' => "BindComplete",
        b'3' => "CloseComplete",
        b'C' => "CommandComplete",
        b'd' => "CopyData",
        b'c' => "CopyDone",
        b'G' => "CopyInResponse",
        b'H' => "CopyOutResponse",
        b'W' => "CopyBothResponse",
        b'D' => "DataRow",
        b'I' => "EmptyQueryResponse",
        b'E' => "ErrorResponse",
        b'v' => "NegotiateProtocolVersion",
        b'n' => "NoData",
        b'N' => "NoticeResponse",
        b'A' => "NotificationResponse",
        b't' => "ParameterDescription",
        b'S' => "ParameterStatus",
        b'1' => "ParseComplete",
        b's' => "PortalSuspended",
        b'Z' => "ReadyForQuery",
        b'T' => "RowDescription",
        _ => return format!("unknown type {}", printable(tag)),
    };
    format!("{name} {}", printable(tag))
}

/// Walks the parts of a message that the parser leaves for later, so that a malformed one is
/// refused here, where the connection is closed on any error, instead of in whichever call
/// decodes it. `DataRow` is left to [`crate::Row`]: it is the hot path, and every caller that
/// builds rows closes the connection when one is malformed.
fn check_structure(message: &Message) -> std::io::Result<()> {
    use fallible_iterator::FallibleIterator;
    match message {
        Message::RowDescription(body) => body.fields().for_each(|_| Ok(())),
        Message::ParameterDescription(body) => body.parameters().for_each(|_| Ok(())),
        Message::CopyInResponse(body) => body.column_formats().for_each(|_| Ok(())),
        Message::CopyOutResponse(body) => body.column_formats().for_each(|_| Ok(())),
        Message::AuthenticationSasl(body) => body.mechanisms().for_each(|_| Ok(())),
        Message::ErrorResponse(body) => body.fields().for_each(|_| Ok(())),
        Message::NoticeResponse(body) => body.fields().for_each(|_| Ok(())),
        // Anything else would be read as idle, and a pool would lend a connection that is
        // inside a transaction.
        Message::ReadyForQuery(body) if !matches!(body.status(), b'I' | b'T' | b'E') => {
            Err(std::io::Error::other(format!(
                "transaction status {} is none of 'I', 'T', 'E'",
                printable(body.status())
            )))
        }
        _ => Ok(()),
    }
}

/// A message tag as the protocol documents it (`'D'`), or its value if it is not a letter.
fn printable(tag: u8) -> String {
    if tag.is_ascii_graphic() {
        format!("'{}'", tag as char)
    } else {
        format!("{tag:#04x}")
    }
}

/// A message whose body does not parse: `tag` says which kind it claimed to be.
fn invalid(tag: u8, e: &dyn std::fmt::Display) -> Error {
    Error::protocol(format!(
        "server sent an invalid message ({}: {e}); the connection is closed. Is this a \
         PostgreSQL server?",
        message_type(tag),
    ))
}
