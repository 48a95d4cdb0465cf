//! The crate's one error type.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::io;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::ErrorFields;

use crate::SqlState;

type BoxError = Box<dyn StdError + Send + Sync>;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
///
/// ```no_run
/// # async fn f() {
/// use slipstream_pg::ErrorKind;
/// match slipstream_pg::connect("postgres://app:wrong@127.0.0.1/db").await {
///     Err(e) if e.kind() == ErrorKind::Authentication => eprintln!("check the password: {e}"),
///     Err(e) if e.kind() == ErrorKind::Io => eprintln!("is the server up? {e}"),
///     Err(e) => eprintln!("{e}"),
///     Ok(_) => {}
/// }
/// # }
/// ```
pub enum ErrorKind {
    /// The server answered with an `ErrorResponse`; see [`Error::as_db_error`].
    Db,
    /// Reading or writing the socket failed (refused, reset, closed by the server), or the
    /// caller's reader or writer did in [`CopyIn::write_from`](crate::CopyIn::write_from) /
    /// [`CopyOut::write_to`](crate::CopyOut::write_to): [`Error::is_closed`] tells which (the
    /// connection is unharmed by the latter).
    Io,
    /// The server sent bytes that are not the PostgreSQL protocol, or a message that is not
    /// valid in the current state. The connection is broken afterwards.
    Protocol,
    /// Authentication failed or the server asked for a method we do not support.
    Authentication,
    /// The TLS handshake or certificate verification failed.
    Tls,
    /// A deadline (e.g. `connect_timeout`) passed.
    Timeout,
    /// The connection string or configuration is invalid.
    Config,
    /// Every host was reached, but none had the session attributes `target_session_attrs`
    /// asks for (e.g. `read-write` and every server is a standby).
    TargetSessionAttrs,
    /// The connection was closed or broken by an earlier failure.
    Closed,
    /// A Rust value could not be converted to or from the PostgreSQL type.
    Conversion,
    /// The query returned a different number of rows than the call expects.
    RowCount,
    /// A column index or name does not exist in the row.
    Column,
    /// The call does not fit the connection's state (e.g. a statement from another connection).
    Usage,
    /// A pipeline operation was not run, or its work was rolled back, because an earlier
    /// operation failed; see [`Error::aborted_by`].
    Aborted,
}

/// An error from slipstream-pg.
///
/// Display gives a one-line, lowercase summary that names what failed and, where there is one,
/// what to do. Server errors carry the full [`DbError`] (SQLSTATE, severity, detail, hint,
/// position).
///
/// ```
/// # async fn f(client: &mut slipstream_pg::Client) {
/// use slipstream_pg::SqlState;
/// match client.simple_query("SELECT * FROM missing").await {
///     Err(e) if e.code() == Some(SqlState::UNDEFINED_TABLE) => println!("no table: {e}"),
///     Err(e) => println!("other failure: {e}"),
///     Ok(_) => {}
/// }
/// # }
/// ```
pub struct Error(Box<Inner>);

struct Inner {
    kind: ErrorKind,
    message: Option<String>,
    /// What to do about it, shown after the cause (libpq's "Is the server running ...?"), or
    /// why the server refused when its error cannot say (see [`Error::note`]).
    hint: Option<Cow<'static, str>>,
    db: Option<DbError>,
    source: Option<BoxError>,
    /// For [`ErrorKind::Aborted`]: the pipeline operation whose failure caused it.
    aborted_by: Option<u64>,
    /// For [`ErrorKind::Io`]: the I/O that failed was the caller's reader or writer, not the
    /// socket, so the connection is unharmed (`is_closed()` is false).
    local_io: bool,
}

impl Error {
    fn new(kind: ErrorKind, message: Option<String>, source: Option<BoxError>) -> Error {
        Error(Box::new(Inner {
            kind,
            message,
            hint: None,
            db: None,
            source,
            aborted_by: None,
            local_io: false,
        }))
    }

    /// What kind of failure this is.
    ///
    /// ```
    /// use slipstream_pg::{Config, ErrorKind};
    /// let e = "port=fifty".parse::<Config>().unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Config);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The server's error, if the server sent one.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// // CREATE TABLE orders (id int PRIMARY KEY) holding id 1:
    /// let e = client.batch_execute("INSERT INTO orders VALUES (1)").await.unwrap_err();
    /// let db = e.as_db_error().expect("the server refused it");
    /// assert_eq!(db.constraint(), Some("orders_pkey"));
    /// assert!("port=x".parse::<slipstream_pg::Config>().unwrap_err().as_db_error().is_none());
    /// # }
    /// ```
    pub fn as_db_error(&self) -> Option<&DbError> {
        self.0.db.as_ref()
    }

    /// The SQLSTATE, if the server sent an error.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SqlState;
    /// match client.execute("INSERT INTO orders VALUES ($1)", &[&1i32]).await {
    ///     Err(e) if e.code() == Some(SqlState::UNIQUE_VIOLATION) => { /* already there */ }
    ///     Err(e) => return Err(e),
    ///     Ok(_) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub fn code(&self) -> Option<SqlState> {
        self.0.db.as_ref().map(|db| db.code)
    }

    /// True when the connection can no longer be used: closed, broken by an I/O or protocol
    /// failure, or terminated by the server.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// match client.batch_execute("SELECT 1").await {
    ///     Err(e) if e.is_closed() => { /* reconnect and retry if the work is idempotent */ }
    ///     Err(e) => return Err(e),
    ///     Ok(()) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_closed(&self) -> bool {
        match self.0.kind {
            ErrorKind::Io => !self.0.local_io,
            ErrorKind::Protocol | ErrorKind::Closed => true,
            ErrorKind::Db => self.0.db.as_ref().is_some_and(DbError::is_fatal),
            _ => false,
        }
    }

    /// For an operation a pipeline skipped ([`ErrorKind::Aborted`]): the id of the operation
    /// whose failure made the server skip it. That operation's server error, if it had one, is
    /// [`Error::as_db_error`].
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::{PipelineMode, PipelineOptions};
    /// let mut p = client.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    /// let bad = p.execute("SELECT 1/0", &[]).await?;
    /// let skipped = p.execute("SELECT 1", &[]).await?;
    /// let e = p.process(&skipped).await.unwrap_err();
    /// assert_eq!(e.aborted_by(), Some(bad.id()));
    /// # Ok(()) }
    /// ```
    pub fn aborted_by(&self) -> Option<u64> {
        self.0.aborted_by
    }

    /// True when a deadline passed.
    ///
    /// ```no_run
    /// # async fn f() {
    /// // A host behind a firewall that drops packets: the attempt runs into connect_timeout.
    /// let e = slipstream_pg::connect("host=192.0.2.1 connect_timeout=1").await.unwrap_err();
    /// assert!(e.is_timeout());
    /// # }
    /// ```
    pub fn is_timeout(&self) -> bool {
        self.0.kind == ErrorKind::Timeout
    }

    pub(crate) fn db(db: DbError) -> Error {
        let mut e = Error::new(ErrorKind::Db, None, None);
        e.0.db = Some(db);
        e
    }

    pub(crate) fn auth_db(db: DbError) -> Error {
        let mut e = Error::new(ErrorKind::Authentication, None, None);
        e.0.db = Some(db);
        e
    }

    pub(crate) fn io(context: &str, e: io::Error) -> Error {
        Error::new(ErrorKind::Io, Some(context.to_string()), Some(Box::new(e)))
    }

    /// An I/O error outside the connection (the caller's reader or writer in a COPY, or the
    /// process out of file descriptors): the connection is unharmed, so [`Error::is_closed`]
    /// is false and `hint` says what to do.
    pub(crate) fn local_io(context: &str, e: io::Error, hint: &'static str) -> Error {
        let mut e = Error::io(context, e).hint(hint);
        e.0.local_io = true;
        e
    }

    /// Adds advice on what to do, shown after the cause.
    pub(crate) fn hint(mut self, hint: &'static str) -> Error {
        self.0.hint = Some(Cow::Borrowed(hint));
        self
    }

    /// Adds why it happened and what to do, shown after the cause, when the cause cannot say
    /// (a server error that names nothing the caller did). Kind, SQLSTATE and the server's
    /// error stay as they are, for code that matches on them.
    pub(crate) fn note(mut self, note: String) -> Error {
        self.0.hint = Some(match self.0.hint.take() {
            Some(hint) => Cow::Owned(format!("{note}; {hint}")),
            None => Cow::Owned(note),
        });
        self
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, Some(message.into()), None)
    }

    pub(crate) fn auth(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Authentication, Some(message.into()), None)
    }

    pub(crate) fn tls(message: impl Into<String>, source: Option<BoxError>) -> Error {
        Error::new(ErrorKind::Tls, Some(message.into()), source)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Timeout, Some(message.into()), None)
    }

    pub(crate) fn session_attrs(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::TargetSessionAttrs, Some(message.into()), None)
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, Some(message.into()), None)
    }

    /// An operation skipped or rolled back because operation `by` failed with `cause`.
    pub(crate) fn aborted(message: impl Into<String>, by: u64, cause: &Error) -> Error {
        let mut e = Error::new(ErrorKind::Aborted, Some(message.into()), None);
        e.0.aborted_by = Some(by);
        e.0.db = cause.0.db.clone();
        if e.0.db.is_none() {
            e.0.source = Some(cause.to_string().into());
        }
        e
    }

    /// The same failure again, for another operation it fails too (one reply that answers
    /// several pipelined operations): kind, message, hint and the server's error; an I/O
    /// or other source is kept as its text.
    pub(crate) fn duplicate(&self) -> Error {
        let source: Option<BoxError> = self.0.source.as_ref().map(|s| s.to_string().into());
        let mut e = Error::new(self.0.kind, self.0.message.clone(), source);
        e.0.hint = self.0.hint.clone();
        e.0.db = self.0.db.clone();
        e.0.aborted_by = self.0.aborted_by;
        e.0.local_io = self.0.local_io;
        e
    }

    /// A `COMMIT` the server answered with `ROLLBACK`.
    pub(crate) fn rolled_back(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Aborted, Some(message.into()), None)
    }

    pub(crate) fn closed(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Closed, Some(message.into()), None)
    }

    pub(crate) fn conversion(message: impl Into<String>, source: Option<BoxError>) -> Error {
        Error::new(ErrorKind::Conversion, Some(message.into()), source)
    }

    pub(crate) fn row_count(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::RowCount, Some(message.into()), None)
    }

    pub(crate) fn column(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Column, Some(message.into()), None)
    }

    pub(crate) fn usage(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Usage, Some(message.into()), None)
    }

    /// True for a value that does not accept the type it was encoded as (postgres-types'
    /// `WrongType`), as opposed to one that accepts it but failed to encode.
    pub(crate) fn is_wrong_type(&self) -> bool {
        self.0.kind == ErrorKind::Conversion
            && self
                .0
                .source
                .as_ref()
                .is_some_and(|s| s.is::<postgres_types::WrongType>())
    }

    /// Prefixes the message with where the failure happened (e.g. the host being tried).
    /// The failures that came before this one, each on its own line above it (libpq's way of
    /// reporting every host it tried).
    pub(crate) fn after(mut self, earlier: &[String]) -> Error {
        if !earlier.is_empty() {
            let mine = self.0.message.take().unwrap_or_default();
            self.0.message = Some(format!("{}\n{mine}", earlier.join("\n")));
        }
        self
    }

    pub(crate) fn context(mut self, context: impl fmt::Display) -> Error {
        self.0.message = Some(match self.0.message.take() {
            Some(m) => format!("{context}: {m}"),
            None => context.to_string(),
        });
        self
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("message", &self.0.message)
            .field("db", &self.0.db)
            .field("source", &self.0.source)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(m) = &self.0.message {
            f.write_str(m)?;
            sep = ": ";
        }
        if let Some(db) = &self.0.db {
            write!(f, "{sep}{db}")?;
        } else if let Some(s) = &self.0.source {
            write!(f, "{sep}{s}")?;
        }
        if let Some(hint) = &self.0.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

/// `source()` is `None`: Display already ends with the cause (the server's error or the I/O
/// error), and reporters that walk the chain (`anyhow`'s `{:#}`) would print it twice. The
/// server's error is [`Error::as_db_error`].
impl StdError for Error {}

/// Where in the query text an error points, as the server reports it (1-based characters).
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) {
/// use slipstream_pg::ErrorPosition;
/// let e = client.batch_execute("SELECT nope FROM pg_class").await.unwrap_err();
/// if let Some(ErrorPosition::Original(at)) = e.as_db_error().and_then(|db| db.position()) {
///     assert_eq!(*at, 8); // `nope` starts at the 8th character
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorPosition {
    /// A position in the query the client sent.
    Original(u32),
    /// A position in an internally generated query (e.g. inside a PL/pgSQL function).
    Internal {
        /// The position.
        position: u32,
        /// The internal query.
        query: String,
    },
}

/// An error or notice sent by the server, with every field it carried.
///
/// Its `Display` (and so an [`Error`]'s) reads as libpq's default verbosity does: severity,
/// SQLSTATE and message, then the detail, the hint and, for an error (not a notice), the
/// context (where in a function, trigger or COPY it happened) when the server sent them.
///
/// ```
/// # fn f(e: &slipstream_pg::Error) {
/// if let Some(db) = e.as_db_error() {
///     println!("{} {}: {}", db.severity(), db.code(), db.message());
///     if let Some(hint) = db.hint() { println!("hint: {hint}"); }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DbError {
    severity: String,
    code: SqlState,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
    position: Option<ErrorPosition>,
    where_: Option<String>,
    schema: Option<String>,
    table: Option<String>,
    column: Option<String>,
    datatype: Option<String>,
    constraint: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    routine: Option<String>,
}

impl DbError {
    pub(crate) fn parse(fields: &mut ErrorFields<'_>) -> Result<DbError, Error> {
        let mut severity = None;
        let mut localized = None;
        let mut code = None;
        let mut message = None;
        let mut db = DbError {
            severity: String::new(),
            code: SqlState::SUCCESSFUL_COMPLETION,
            message: String::new(),
            detail: None,
            hint: None,
            position: None,
            where_: None,
            schema: None,
            table: None,
            column: None,
            datatype: None,
            constraint: None,
            file: None,
            line: None,
            routine: None,
        };
        let mut normal_pos = None;
        let mut internal_pos = None;
        let mut internal_query = None;
        let bad =
            |e: io::Error| Error::protocol(format!("malformed error message from server: {e}"));
        while let Some(field) = fields.next().map_err(bad)? {
            let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
            match field.type_() {
                b'V' => severity = Some(value),
                b'S' => localized = Some(value),
                b'C' => code = Some(SqlState::from_code(&value)),
                b'M' => message = Some(value),
                b'D' => db.detail = Some(value),
                b'H' => db.hint = Some(value),
                b'P' => normal_pos = value.parse::<u32>().ok(),
                b'p' => internal_pos = value.parse::<u32>().ok(),
                b'q' => internal_query = Some(value),
                b'W' => db.where_ = Some(value),
                b's' => db.schema = Some(value),
                b't' => db.table = Some(value),
                b'c' => db.column = Some(value),
                b'd' => db.datatype = Some(value),
                b'n' => db.constraint = Some(value),
                b'F' => db.file = Some(value),
                b'L' => db.line = value.parse().ok(),
                b'R' => db.routine = Some(value),
                _ => {} // The protocol says unknown field types must be ignored.
            }
        }
        db.severity = severity
            .or(localized)
            .ok_or_else(|| Error::protocol("server sent an error or notice without a severity (protocol violation); the connection is closed"))?;
        db.code = code.ok_or_else(|| Error::protocol("server sent an error or notice without a SQLSTATE (protocol violation); the connection is closed"))?;
        db.message =
            message.ok_or_else(|| Error::protocol("server sent an error or notice without a message (protocol violation); the connection is closed"))?;
        db.position = match (normal_pos, internal_pos) {
            (Some(p), _) => Some(ErrorPosition::Original(p)),
            (None, Some(position)) => Some(ErrorPosition::Internal {
                position,
                query: internal_query.unwrap_or_default(),
            }),
            _ => None,
        };
        Ok(db)
    }

    /// `ERROR`, `FATAL`, `PANIC` (errors) or `WARNING`, `NOTICE`, `DEBUG`, `INFO`, `LOG` (notices).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("SELEKT 1").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().severity(), "ERROR");
    /// # }
    /// ```
    pub fn severity(&self) -> &str {
        &self.severity
    }
    /// The SQLSTATE.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// use slipstream_pg::SqlState;
    /// let e = client.batch_execute("SELEKT 1").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().code(), SqlState::SYNTAX_ERROR);
    /// # }
    /// ```
    pub fn code(&self) -> SqlState {
        self.code
    }
    /// The primary message.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("SELECT 1/0").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().message(), "division by zero");
    /// # }
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Optional secondary message with more detail.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// // A second INSERT of id 1 into orders (id int PRIMARY KEY):
    /// let e = client.batch_execute("INSERT INTO orders VALUES (1)").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().detail(), Some("Key (id)=(1) already exists."));
    /// # }
    /// ```
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
    /// Optional suggestion of what to do.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("SELECT length(1)").await.unwrap_err();
    /// let hint = e.as_db_error().unwrap().hint().unwrap_or_default();
    /// assert!(hint.contains("explicit type casts"), "{hint}");
    /// # }
    /// ```
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }
    /// Where in the query the error points.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// use slipstream_pg::ErrorPosition;
    /// let e = client.batch_execute("SELECT nope FROM pg_class").await.unwrap_err();
    /// // 1-based characters: `nope` starts at the 8th.
    /// assert_eq!(e.as_db_error().unwrap().position(), Some(&ErrorPosition::Original(8)));
    /// # }
    /// ```
    pub fn position(&self) -> Option<&ErrorPosition> {
        self.position.as_ref()
    }
    /// The call stack context (e.g. PL/pgSQL function and line).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client
    ///     .batch_execute("DO $$ BEGIN PERFORM 1/0; END $$")
    ///     .await
    ///     .unwrap_err();
    /// assert!(e.as_db_error().unwrap().where_().unwrap().contains("PL/pgSQL"));
    /// # }
    /// ```
    pub fn where_(&self) -> Option<&str> {
        self.where_.as_deref()
    }
    /// The schema of the object involved.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// // public.orders (id int PRIMARY KEY) already holds id 1:
    /// let e = client.batch_execute("INSERT INTO orders VALUES (1)").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().schema(), Some("public"));
    /// # }
    /// ```
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }
    /// The table involved.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("INSERT INTO orders VALUES (1)").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().table(), Some("orders"));
    /// # }
    /// ```
    pub fn table(&self) -> Option<&str> {
        self.table.as_deref()
    }
    /// The column involved.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// // CREATE TABLE items (id int, name text NOT NULL):
    /// let e = client.batch_execute("INSERT INTO items VALUES (1, NULL)").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().column(), Some("name"));
    /// # }
    /// ```
    pub fn column(&self) -> Option<&str> {
        self.column.as_deref()
    }
    /// The data type involved.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// // CREATE DOMAIN positive AS int CHECK (VALUE > 0):
    /// let e = client.batch_execute("SELECT (-1)::positive").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().datatype(), Some("positive"));
    /// # }
    /// ```
    pub fn datatype(&self) -> Option<&str> {
        self.datatype.as_deref()
    }
    /// The constraint involved.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("INSERT INTO orders VALUES (1)").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().constraint(), Some("orders_pkey"));
    /// # }
    /// ```
    pub fn constraint(&self) -> Option<&str> {
        self.constraint.as_deref()
    }
    /// The server source file that raised the error.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("SELECT 1/0").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().file(), Some("int.c"));
    /// # }
    /// ```
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }
    /// The server source line that raised the error.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("SELECT 1/0").await.unwrap_err();
    /// assert!(e.as_db_error().unwrap().line().is_some()); // where in int.c
    /// # }
    /// ```
    pub fn line(&self) -> Option<u32> {
        self.line
    }
    /// The server routine that raised the error.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// let e = client.batch_execute("SELECT 1/0").await.unwrap_err();
    /// assert_eq!(e.as_db_error().unwrap().routine(), Some("int4div"));
    /// # }
    /// ```
    pub fn routine(&self) -> Option<&str> {
        self.routine.as_deref()
    }
    /// True for `FATAL` and `PANIC`: the server closes the connection after sending it.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client, other: &mut slipstream_pg::Client) {
    /// // Another session ends this one: the server sends FATAL 57P01 and closes it.
    /// let pid = client.backend_pid();
    /// other.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
    /// let e = client.batch_execute("SELECT 1").await.unwrap_err();
    /// assert!(e.as_db_error().is_some_and(|db| db.is_fatal()) && e.is_closed());
    /// # }
    /// ```
    pub fn is_fatal(&self) -> bool {
        matches!(self.severity.as_str(), "FATAL" | "PANIC")
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.severity.to_lowercase(),
            self.code,
            self.message
        )?;
        if let Some(detail) = &self.detail {
            write!(f, " (detail: {detail})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        // What libpq's default verbosity prints as CONTEXT: the PL/pgSQL function and line, or
        // the SQL function, trigger or COPY line, where the error happened. Without it an error
        // raised in a function reads the same as one raised by the statement itself, and a
        // logged `{e}` cannot say where to look. One line per frame from the server, innermost
        // first; joined so that the message stays one line in a log. Errors only, as libpq
        // shows it by default (PQSHOW_CONTEXT_ERRORS): every `RAISE NOTICE` has a context,
        // and the notice handler's log would repeat "PL/pgSQL function ... at RAISE".
        let is_error = matches!(self.severity.as_str(), "ERROR" | "FATAL" | "PANIC");
        if let Some(context) = self.where_.as_ref().filter(|_| is_error) {
            f.write_str(" (context: ")?;
            for (i, frame) in context.lines().enumerate() {
                if i > 0 {
                    f.write_str("; ")?;
                }
                f.write_str(frame)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl StdError for DbError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_reads_context_then_cause_then_hint() {
        let e = Error::io(
            "could not connect",
            io::Error::new(io::ErrorKind::ConnectionRefused, "refused"),
        )
        .hint("is the server running?")
        .context("connection to server at h:1 failed");
        assert_eq!(
            e.to_string(),
            "connection to server at h:1 failed: could not connect: refused; is the server running?"
        );
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(
            std::error::Error::source(&e).is_none(),
            "Display already ends with the cause; a source would print it twice in a chain"
        );
    }
}
