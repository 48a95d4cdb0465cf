//! COPY FROM STDIN and COPY TO STDOUT as streams.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use futures_util::{Sink, Stream};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::connect::unexpected;
use crate::connection::{Connection, Owed};
use crate::query::rows_affected;
use crate::{Client, DbError, Error};

/// Data is sent in `CopyData` messages of about this size: large enough that the 5-byte header
/// and the syscall are noise, small enough to keep client memory flat.
const COPY_CHUNK: usize = 64 * 1024;

/// The largest `CopyData` a single large write is cut into (psycopg cuts at a few MiB too):
/// the server takes a message of up to 1 GiB, and smaller pieces let it parse while more
/// arrive.
const COPY_MESSAGE_MAX: usize = 1024 * 1024;

/// What to do when the caller's writer fails in [`CopyOut::write_to`].
const WRITE_TO_HINT: &str =
    "the connection is unharmed: drop the CopyOut to discard the rest of the data";

impl Client {
    /// Starts `COPY ... FROM STDIN`. Write the data with [`CopyIn::write`] and end with
    /// [`CopyIn::finish`]; dropping the `CopyIn` instead aborts the COPY (nothing is loaded).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut copy = client.copy_in("COPY items (id, name) FROM STDIN").await?;
    /// for i in 0..1000 {
    ///     copy.write(format!("{i}\titem {i}\n").as_bytes()).await?;
    /// }
    /// let rows = copy.finish().await?;
    /// assert_eq!(rows, 1000);
    /// # Ok(()) }
    /// ```
    pub async fn copy_in(&mut self, sql: &str) -> Result<CopyIn<'_>, Error> {
        self.start_copy(sql, true).await?;
        self.conn.copy_in_live = true;
        Ok(CopyIn {
            client: self,
            buf: BytesMut::with_capacity(COPY_CHUNK),
            finished: false,
            end: End::default(),
        })
    }

    /// Starts `COPY ... TO STDOUT` and returns its data as a stream of chunks (one row each in
    /// text and CSV formats).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut copy = client.copy_out("COPY items TO STDOUT (FORMAT csv)").await?;
    /// let mut bytes = 0;
    /// while let Some(chunk) = copy.next().await? {
    ///     bytes += chunk.len();
    /// }
    /// println!("{bytes} bytes, {:?} rows", copy.rows());
    /// # Ok(()) }
    /// ```
    pub async fn copy_out(&mut self, sql: &str) -> Result<CopyOut<'_>, Error> {
        self.start_copy(sql, false).await?;
        Ok(CopyOut {
            client: self,
            done: false,
            rows: None,
            error: None,
            terminated: false,
        })
    }

    async fn start_copy(&mut self, sql: &str, inbound: bool) -> Result<(), Error> {
        self.conn.start_request().await?;
        self.conn
            .encode(|buf| frontend::query(sql, buf))
            .map_err(|e| Error::usage(format!("cannot send this SQL: {e}")))?;
        self.conn.finish_request(Owed::Copy).await?;
        let mut error = None;
        loop {
            match self.conn.recv().await? {
                Message::CopyInResponse(_) if inbound => return Ok(()),
                Message::CopyOutResponse(_) if !inbound => return Ok(()),
                Message::CopyInResponse(_) => {
                    self.conn
                        .queue_copy_fail("copy_out was called with COPY FROM STDIN")?;
                    self.conn.flush().await?;
                    error = Some(Error::usage(
                        "copy_out needs a COPY ... TO STDOUT statement; use copy_in",
                    ));
                }
                // A COPY TO STDOUT cannot be stopped: it runs (its data is discarded here), and
                // so does the rest of the string, as through `query`.
                Message::CopyOutResponse(_) => {
                    error = Some(Error::usage(
                        "copy_in needs a COPY ... FROM STDIN statement; use copy_out. The COPY \
                         ran (its data was discarded), and so did any statements after it in \
                         the same string",
                    ));
                }
                Message::ErrorResponse(body) => {
                    error.get_or_insert(Error::db(DbError::parse(&mut body.fields())?));
                }
                Message::ReadyForQuery(_) => {
                    return Err(match error {
                        Some(e) => self.conn.explain_failed(e),
                        // The simple protocol ran the SQL before its reply could show that
                        // it is not the COPY asked for: say so, or a caller retries a DELETE.
                        None => Error::usage(format!(
                            "the statement is not a COPY {}, and the server ran it as ordinary \
                             SQL (committed, unless a transaction block is open): nothing was \
                             copied; use batch_execute for it, and do not simply run it again",
                            if inbound { "FROM STDIN" } else { "TO STDOUT" }
                        )),
                    });
                }
                _ => {} // rows or tags of a statement that is not the COPY we expected
            }
        }
    }
}

/// An open `COPY ... FROM STDIN`. See [`Client::copy_in`].
///
/// Also a [`Sink`] of byte chunks ([`Bytes`]), so a stream of data can be
/// [`forward`](futures_util::StreamExt::forward)ed into it; closing the sink ends the COPY
/// (as [`CopyIn::finish`]), after which [`CopyIn::rows`] says how many rows were loaded.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use futures_util::{SinkExt, StreamExt, stream};
/// let lines = stream::iter(0..1000).map(|i| Ok(bytes::Bytes::from(format!("{i}\titem {i}\n"))));
/// let mut copy = client.copy_in("COPY items (id, name) FROM STDIN").await?;
/// lines.forward(&mut copy).await?; // sends everything, then closes: the COPY ends
/// assert_eq!(copy.rows(), Some(1000));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CopyIn<'a> {
    client: &'a mut Client,
    buf: BytesMut,
    /// `CopyDone` or `CopyFail` is queued, or the server failed the COPY and left COPY mode
    /// (its `ReadyForQuery` is all that is still owed): dropping no longer aborts.
    finished: bool,
    /// How the COPY ended, read by [`Sink::poll_close`]. `end.error` is also set when a write
    /// finds the server has failed the COPY already (see [`CopyIn::check_server`]).
    end: End,
}

/// What the server said at the end of a COPY closed as a [`Sink`].
#[derive(Debug, Default)]
struct End {
    rows: Option<u64>,
    error: Option<Error>,
    /// `ReadyForQuery` arrived.
    done: bool,
}

impl CopyIn<'_> {
    /// Queues data in the COPY format the statement named; sends it once 64 KiB are buffered
    /// (a large write goes out in messages of up to 1 MiB).
    ///
    /// Once the server has failed the COPY (bad data, a constraint violation), the next write
    /// that sends returns the server's error, and so does every later one, instead of sending
    /// data the server discards; [`CopyIn::finish`] returns it too. Nothing is loaded then.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut copy = client.copy_in("COPY items (id, name) FROM STDIN").await?;
    /// for id in 1..=1000 {
    ///     copy.write(format!("{id}\tpen {id}\n").as_bytes()).await?;
    /// }
    /// assert_eq!(copy.finish().await?, 1000);
    /// # Ok(()) }
    /// ```
    pub async fn write(&mut self, data: &[u8]) -> Result<(), Error> {
        self.check_failed()?;
        self.buf.extend_from_slice(data);
        if self.buf.len() >= COPY_CHUNK {
            self.send_buffered().await?;
        }
        Ok(())
    }

    /// Copies everything from `reader`; returns the number of bytes read.
    ///
    /// If `reader` fails, the error is [`ErrorKind::Io`](crate::ErrorKind::Io) with
    /// [`Error::is_closed`] false: the connection and the COPY are unharmed, and what was read
    /// before the failure is still buffered or sent, so abort the COPY rather than finish it.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let file = tokio::fs::File::open("items.csv").await?;
    /// let mut copy = client.copy_in("COPY items FROM STDIN (FORMAT csv)").await?;
    /// copy.write_from(file).await?;
    /// copy.finish().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_from<R: AsyncRead + Unpin>(&mut self, mut reader: R) -> Result<u64, Error> {
        self.check_failed()?;
        let mut total = 0;
        loop {
            self.buf.reserve(COPY_CHUNK);
            let n = reader.read_buf(&mut self.buf).await.map_err(|e| {
                Error::local_io(
                    "could not read the data to copy",
                    e,
                    "the connection and the COPY are unharmed: abort() the COPY (or drop it) \
                         rather than finish it with part of the data",
                )
            })?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
            if self.buf.len() >= COPY_CHUNK {
                self.send_buffered().await?;
            }
        }
    }

    async fn send_buffered(&mut self) -> Result<(), Error> {
        self.queue_buffered()?;
        self.client.conn.flush().await?;
        self.check_server()
    }

    /// The server's error, if a write found it had failed the COPY.
    fn check_failed(&self) -> Result<(), Error> {
        match &self.end.error {
            Some(e) => Err(e.duplicate()),
            None => Ok(()),
        }
    }

    /// After a send: what the server said meanwhile reaches the notice handler now, not at the
    /// end of the COPY, and an error that failed the COPY is kept and returned (see
    /// `Connection::copy_in_failure`).
    fn check_server(&mut self) -> Result<(), Error> {
        if self.end.error.is_none()
            && let Some(db) = self.client.conn.copy_in_failure()?
        {
            // The server has left COPY mode: only its ReadyForQuery is owed, and a CopyFail
            // on drop would be ignored.
            self.finished = true;
            self.end.error = Some(Error::db(db));
        }
        self.check_failed()
    }

    /// Moves the buffered data into the write buffer as `CopyData` messages of at most
    /// [`COPY_MESSAGE_MAX`] bytes (a message's length field is an `i32`, so one message of a
    /// single write past 1 GiB would be refused). All of it is queued before any is sent: a write
    /// whose future is dropped still goes out whole with the next call, or not at all.
    fn queue_buffered(&mut self) -> Result<(), Error> {
        while !self.buf.is_empty() {
            let chunk = self
                .buf
                .split_to(self.buf.len().min(COPY_MESSAGE_MAX))
                .freeze();
            frontend::CopyData::new(chunk)
                .map_err(|e| Error::usage(format!("copy chunk too large: {e}")))?
                .write(&mut self.client.conn.wbuf);
        }
        Ok(())
    }

    /// The number of rows the server loaded, once the COPY has been closed as a [`Sink`]
    /// (`None` before, or if it failed).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use futures_util::SinkExt;
    /// let mut copy = client.copy_in("COPY items (id, name) FROM STDIN").await?;
    /// copy.send(bytes::Bytes::from_static(b"1\tfirst\n")).await?;
    /// copy.close().await?;
    /// assert_eq!(copy.rows(), Some(1));
    /// # Ok(()) }
    /// ```
    pub fn rows(&self) -> Option<u64> {
        self.end.rows
    }

    /// Ends the COPY and returns the number of rows the server loaded. A server-side error
    /// (bad data, constraint violation) is reported here; nothing is loaded then. Its text
    /// starts with the line (and column) of the data that failed, from the server's CONTEXT.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut copy = client.copy_in("COPY items (id) FROM STDIN").await?;
    /// copy.write(b"1\n2\nthree\n").await?;
    /// let e = copy.finish().await.unwrap_err(); // nothing was loaded
    /// assert!(e.to_string().contains("line 3"), "{e}");
    /// # Ok(()) }
    /// ```
    pub async fn finish(mut self) -> Result<u64, Error> {
        // An error that failed the COPY itself is returned below, once its ReadyForQuery is in.
        if self.end.error.is_none()
            && !self.finished
            && let Err(e) = self.send_buffered().await
            && self.end.error.is_none()
        {
            return Err(e);
        }
        if let Some(e) = self.end.error.take() {
            // The server failed the COPY during a write (or a sink's close read its error
            // and was dropped) and left COPY mode: its ReadyForQuery is all that is left
            // (`finished` is set, so a drop sends nothing).
            read_copy_end(self.client).await?;
            return Err(e);
        }
        if self.finished {
            // Closed as a Sink already: its outcome, or the rest of its reply.
            return match (self.end.done, self.end.rows) {
                (true, Some(rows)) => Ok(rows),
                (true, None) => Err(Error::usage(
                    "this COPY already ended with an error, returned when the sink was closed",
                )),
                (false, _) => read_copy_end(self.client).await,
            };
        }
        // From here a dropped future must not abort: CopyDone is queued and will be sent.
        self.finished = true;
        frontend::copy_done(&mut self.client.conn.wbuf);
        self.client.conn.flush().await?;
        read_copy_end(self.client).await
    }

    /// Aborts the COPY: the server loads nothing. Returns once the server has confirmed.
    ///
    /// The server takes the abort as the COPY's error, so inside a transaction it fails the
    /// transaction (later statements get 25P02): roll back, or run the COPY in a savepoint.
    /// A session the server ended meanwhile (a FATAL error, a lost connection) is an error
    /// with [`Error::is_closed`] true, not a confirmation.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut copy = client.copy_in("COPY items FROM STDIN").await?;
    /// copy.write(b"1\tfirst\n").await?;
    /// copy.abort("the input file was truncated").await?; // nothing is loaded
    /// # Ok(()) }
    /// ```
    pub async fn abort(mut self, reason: &str) -> Result<(), Error> {
        if self.end.error.is_some() {
            // A write found the server had failed the COPY: nothing was loaded, and only its
            // ReadyForQuery is left to read.
            return read_copy_end(self.client).await.map(drop);
        }
        if self.finished {
            return Err(Error::usage(
                "this COPY has already ended (the sink was closed): there is nothing to abort",
            ));
        }
        self.client.conn.queue_copy_fail(reason)?;
        self.finished = true;
        self.client.conn.flush().await?;
        match read_copy_end(self.client).await {
            // The expected "COPY from stdin failed" (or the data error that had already failed
            // the COPY). Not a FATAL one: the session was ended, not the COPY aborted, and the
            // caller must learn that here rather than from the next call's `Closed`.
            Err(e) if e.code().is_some() && !e.is_closed() => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Err(Error::protocol("server accepted a COPY the client aborted")),
        }
    }
}

impl Sink<Bytes> for CopyIn<'_> {
    type Error = Error;

    /// Ready once less than a chunk (64 KiB) waits to be sent.
    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        this.check_failed()?;
        if this.finished {
            return Poll::Ready(Err(Error::usage("this COPY has already ended")));
        }
        if this.buf.len() >= COPY_CHUNK {
            this.queue_buffered()?;
        }
        if !this.client.conn.wbuf.is_empty() {
            ready!(this.client.conn.poll_send(cx))?;
            this.check_server()?;
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: Bytes) -> Result<(), Error> {
        let this = self.get_mut();
        this.check_failed()?;
        if this.finished {
            return Err(Error::usage("this COPY has already ended"));
        }
        this.buf.extend_from_slice(&item);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        if !this.finished {
            this.queue_buffered()?;
        }
        ready!(this.client.conn.poll_send(cx))?;
        Poll::Ready(this.check_server())
    }

    /// Ends the COPY (`CopyDone`) and waits for the server's verdict, as [`CopyIn::finish`].
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        if !this.finished {
            this.queue_buffered()?;
            // From here a dropped future must not abort: CopyDone is queued and will be sent.
            frontend::copy_done(&mut this.client.conn.wbuf);
            this.finished = true;
        }
        while !this.end.done {
            let m = ready!(this.client.conn.poll_recv(cx))?;
            if after_the_copy(&mut this.client.conn, &m)? {
                continue;
            }
            match m {
                Message::CommandComplete(body) => {
                    this.end.rows.get_or_insert(rows_affected(body.tag()));
                }
                Message::ErrorResponse(body) => {
                    this.end.error = Some(Error::db(DbError::parse(&mut body.fields())?));
                }
                Message::ReadyForQuery(_) => this.end.done = true,
                m => {
                    return Poll::Ready(Err(this
                        .client
                        .conn
                        .poison(unexpected(&m, "at the end of a COPY"))));
                }
            }
        }
        match this.end.error.take() {
            Some(e) => {
                this.end.rows = None;
                Poll::Ready(Err(e))
            }
            None => Poll::Ready(Ok(())),
        }
    }
}

impl Drop for CopyIn<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.client.conn.copy_in_abort = true;
        }
        self.client.conn.copy_in_live = false;
    }
}

/// Reads a COPY's completion up to `ReadyForQuery`; returns the row count.
async fn read_copy_end(client: &mut Client) -> Result<u64, Error> {
    let mut rows = None;
    let mut error = None;
    loop {
        let m = client.conn.recv().await?;
        if after_the_copy(&mut client.conn, &m)? {
            client.conn.flush().await?;
            continue;
        }
        match m {
            Message::CommandComplete(body) => {
                rows.get_or_insert(rows_affected(body.tag()));
            }
            Message::ErrorResponse(body) => {
                error = Some(Error::db(DbError::parse(&mut body.fields())?))
            }
            Message::ReadyForQuery(_) => break,
            m => return Err(client.conn.poison(unexpected(&m, "at the end of a COPY"))),
        }
    }
    error.map_or(Ok(rows.unwrap_or(0)), Err)
}

/// Takes a message that may belong to the statements after the COPY in its SQL string
/// (`COPY t FROM STDIN; SELECT 1` is one simple query): their rows and a later COPY TO
/// STDOUT's data are skipped, so the call reports the COPY's own outcome (the first
/// `CommandComplete`, left to the caller). A later COPY FROM STDIN would wait for data nobody
/// sends: it gets `CopyFail` (queued: the caller writes it before it waits again), whose error rolls
/// the whole string back and is reported. Returns whether the message was taken.
fn after_the_copy(conn: &mut Connection, m: &Message) -> Result<bool, Error> {
    match m {
        Message::CopyInResponse(_) => {
            conn.queue_copy_fail(
                "a COPY call runs one COPY FROM STDIN; the statement string held another",
            )?;
            Ok(true)
        }
        Message::RowDescription(_)
        | Message::DataRow(_)
        | Message::EmptyQueryResponse
        | Message::CopyOutResponse(_)
        | Message::CopyData(_)
        | Message::CopyDone => Ok(true),
        _ => Ok(false),
    }
}

/// An open `COPY ... TO STDOUT`. See [`Client::copy_out`]. Dropping it part-way is safe: the
/// rest of the data is discarded before the connection's next request.
///
/// Also a [`Stream`] of chunks, ending after the first error:
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use futures_util::StreamExt;
/// let copy = client.copy_out("COPY (SELECT g FROM generate_series(1, 10) g) TO STDOUT").await?;
/// let first_three: Vec<_> = copy.take(3).collect().await; // the rest is skipped
/// assert_eq!(first_three.len(), 3);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CopyOut<'a> {
    client: &'a mut Client,
    done: bool,
    rows: Option<u64>,
    /// The server's error, returned once its `ReadyForQuery` is in.
    error: Option<Error>,
    /// An error was returned through `Stream::poll_next`: it ends the stream.
    terminated: bool,
}

impl<'a> CopyOut<'a> {
    /// The next chunk of data, or `None` at the end.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut out = client.copy_out("COPY (SELECT g FROM generate_series(1, 3) g) TO STDOUT").await?;
    /// let mut text = Vec::new();
    /// while let Some(chunk) = out.next().await? {
    ///     text.extend_from_slice(&chunk);
    /// }
    /// assert_eq!(text, b"1\n2\n3\n");
    /// assert_eq!(out.rows(), Some(3));
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Result<Option<Bytes>, Error> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Error>> {
        if self.done {
            return Poll::Ready(Ok(None));
        }
        loop {
            let m = ready!(self.client.conn.poll_recv(cx))?;
            // The COPY's own data ends with its `CommandComplete`: what follows is the rest of
            // the statement string's.
            if let Message::CopyData(body) = m {
                if self.rows.is_none() {
                    return Poll::Ready(Ok(Some(body.into_bytes())));
                }
                continue;
            }
            if after_the_copy(&mut self.client.conn, &m)? {
                continue;
            }
            match m {
                Message::CommandComplete(body) => {
                    self.rows.get_or_insert(rows_affected(body.tag()));
                }
                Message::ErrorResponse(body) => {
                    self.error = Some(Error::db(DbError::parse(&mut body.fields())?))
                }
                Message::ReadyForQuery(_) => {
                    self.done = true;
                    return Poll::Ready(self.error.take().map_or(Ok(None), Err));
                }
                m => {
                    return Poll::Ready(Err(self
                        .client
                        .conn
                        .poison(unexpected(&m, "during COPY TO STDOUT"))));
                }
            }
        }
    }

    /// The number of rows copied, once the stream has ended.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut out = client.copy_out("COPY (SELECT 1) TO STDOUT").await?;
    /// assert_eq!(out.rows(), None); // not ended yet
    /// while out.next().await?.is_some() {}
    /// assert_eq!(out.rows(), Some(1));
    /// # Ok(()) }
    /// ```
    pub fn rows(&self) -> Option<u64> {
        self.rows
    }

    /// Writes all the data to `writer`; returns the number of rows copied.
    ///
    /// If `writer` fails, the error is [`ErrorKind::Io`](crate::ErrorKind::Io) with
    /// [`Error::is_closed`] false: the connection is unharmed (drop the `CopyOut` to discard
    /// the rest).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let file = tokio::fs::File::create("items.csv").await?;
    /// let mut copy = client.copy_out("COPY items TO STDOUT (FORMAT csv, HEADER)").await?;
    /// let rows = copy.write_to(file).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_to<W: AsyncWrite + Unpin>(&mut self, mut writer: W) -> Result<u64, Error> {
        while let Some(chunk) = self.next().await? {
            writer.write_all(&chunk).await.map_err(|e| {
                Error::local_io("could not write the copied data", e, WRITE_TO_HINT)
            })?;
        }
        writer
            .flush()
            .await
            .map_err(|e| Error::local_io("could not write the copied data", e, WRITE_TO_HINT))?;
        Ok(self.rows.unwrap_or(0))
    }

    /// The data as a [`Stream`] of chunks.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use futures_util::TryStreamExt;
    /// let copy = client.copy_out("COPY items TO STDOUT").await?;
    /// let chunks: Vec<bytes::Bytes> = copy.into_stream().try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, Error>> + 'a {
        self
    }
}

impl Stream for CopyOut<'_> {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.terminated {
            return Poll::Ready(None);
        }
        match ready!(this.poll_chunk(cx)) {
            Ok(chunk) => Poll::Ready(chunk.map(Ok)),
            Err(e) => {
                this.terminated = true;
                Poll::Ready(Some(Err(e)))
            }
        }
    }
}
