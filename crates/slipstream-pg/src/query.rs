//! The extended query protocol: prepare, bind, execute.

use std::sync::Arc;

use bytes::BytesMut;

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use postgres_types::{ToSql, Type};

use crate::connect::unexpected;
use crate::statement::{parse_columns, parse_params};
use crate::{Client, Column, DbError, Error, Row, Statement};

/// A SQL string or a prepared [`Statement`]: what [`Client::query`] and friends accept.
pub trait ToStatement: sealed::Sealed {
    #[doc(hidden)]
    fn source(&self) -> Source<'_>;
}

#[doc(hidden)]
pub enum Source<'a> {
    Sql(&'a str),
    Prepared(&'a Statement),
}

mod sealed {
    pub trait Sealed {}
}

impl sealed::Sealed for str {}
impl ToStatement for str {
    fn source(&self) -> Source<'_> {
        Source::Sql(self)
    }
}
impl sealed::Sealed for String {}
impl ToStatement for String {
    fn source(&self) -> Source<'_> {
        Source::Sql(self)
    }
}
impl sealed::Sealed for Statement {}
impl ToStatement for Statement {
    fn source(&self) -> Source<'_> {
        Source::Prepared(self)
    }
}

/// A query parameter: anything `postgres_types` can encode.
pub type Param<'a> = &'a (dyn ToSql + Sync);

impl Client {
    /// Prepares a named server-side statement; the server infers the parameter types.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT $1::text || '!'").await?;
    /// let row = client.query_one(&stmt, &[&"hi"]).await?;
    /// assert_eq!(row.get::<_, String>(0)?, "hi!");
    /// # Ok(()) }
    /// ```
    pub async fn prepare(&mut self, sql: &str) -> Result<Statement, Error> {
        self.prepare_typed(sql, &[]).await
    }

    /// Prepares a named statement with the given parameter types (fewer types than parameters:
    /// the server infers the rest).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::types::Type;
    /// let stmt = client.prepare_typed("SELECT $1", &[Type::INT8]).await?;
    /// assert_eq!(stmt.params(), &[Type::INT8]);
    /// # Ok(()) }
    /// ```
    pub async fn prepare_typed(&mut self, sql: &str, types: &[Type]) -> Result<Statement, Error> {
        self.next_statement += 1;
        let name = format!("s{}", self.next_statement);
        self.prepare_as(name, sql, types).await
    }

    async fn prepare_as(
        &mut self,
        name: String,
        sql: &str,
        types: &[Type],
    ) -> Result<Statement, Error> {
        self.conn.start_request()?;
        let mark = self.conn.wbuf.len();
        let encoded = frontend::parse(&name, sql, types.iter().map(Type::oid), &mut self.conn.wbuf)
            .and_then(|()| frontend::describe(b'S', &name, &mut self.conn.wbuf));
        if let Err(e) = encoded {
            self.conn.wbuf.truncate(mark);
            return Err(Error::usage(format!("cannot send this statement: {e}")));
        }
        frontend::sync(&mut self.conn.wbuf);
        self.conn.finish_request().await?;

        let mut params = None;
        let mut columns = None;
        let mut error = None;
        loop {
            match self.conn.recv().await? {
                Message::ParseComplete => {}
                Message::ParameterDescription(body) => params = Some(parse_params(&body)?),
                Message::RowDescription(body) => columns = Some(parse_columns(Some(&body))?),
                Message::NoData => columns = Some(parse_columns(None)?),
                Message::ErrorResponse(body) => error = Some(DbError::parse(&mut body.fields())?),
                Message::ReadyForQuery(_) => break,
                m => {
                    return Err(self
                        .conn
                        .poison(unexpected(&m, "in reply to Parse/Describe")));
                }
            }
        }
        if let Some(db) = error {
            return Err(Error::db(db));
        }
        match (params, columns) {
            (Some(params), Some(columns)) => Ok(Statement::new(
                name,
                sql.to_string(),
                params,
                columns,
                self.id,
                Arc::downgrade(&self.conn.closes),
            )),
            _ => Err(self.conn.poison(Error::protocol(
                "server did not describe the prepared statement",
            ))),
        }
    }

    /// Runs a statement and returns all its rows.
    ///
    /// A SQL string without parameters costs one round trip. A SQL string with parameters costs
    /// two (the server must first say the parameter types); prepare it once, or use
    /// [`Client::query_typed`], to pay one.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let rows = client.query("SELECT generate_series(1, $1)", &[&3i32]).await?;
    /// assert_eq!(rows.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn query<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, Error> {
        Ok(self.run(statement.source(), params).await?.0)
    }

    /// Runs a statement that must return exactly one row.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let n: i64 = client.query_one("SELECT count(*) FROM pg_class", &[]).await?.get(0)?;
    /// # Ok(()) }
    /// ```
    pub async fn query_one<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<Row, Error> {
        let mut rows = self.query(statement, params).await?;
        match rows.len() {
            1 => Ok(rows.remove(0)),
            n => Err(Error::row_count(format!(
                "query returned {n} rows; exactly one was expected"
            ))),
        }
    }

    /// Runs a statement that must return zero or one row.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let row = client.query_opt("SELECT 1 WHERE false", &[]).await?;
    /// assert!(row.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn query_opt<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<Option<Row>, Error> {
        let mut rows = self.query(statement, params).await?;
        match rows.len() {
            0 => Ok(None),
            1 => Ok(Some(rows.remove(0))),
            n => Err(Error::row_count(format!(
                "query returned {n} rows; at most one was expected"
            ))),
        }
    }

    /// Runs a statement and returns the number of rows it affected (inserted, updated, deleted,
    /// selected, copied).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let n = client.execute("UPDATE accounts SET balance = 0 WHERE id = $1", &[&7i64]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn execute<T: ToStatement + ?Sized>(
        &mut self,
        statement: &T,
        params: &[Param<'_>],
    ) -> Result<u64, Error> {
        Ok(self.run(statement.source(), params).await?.1)
    }

    /// Runs SQL with parameters whose types the caller states: one round trip, no prepared
    /// statement left behind.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::types::Type;
    /// let rows = client.query_typed("SELECT $1 + 1", &[(&41i32, Type::INT4)]).await?;
    /// assert_eq!(rows[0].get::<_, i32>(0)?, 42);
    /// # Ok(()) }
    /// ```
    pub async fn query_typed(
        &mut self,
        sql: &str,
        params: &[(Param<'_>, Type)],
    ) -> Result<Vec<Row>, Error> {
        let (types, values) = split_typed(params);
        Ok(self.run_unprepared(sql, &types, &values).await?.0)
    }

    async fn run(
        &mut self,
        source: Source<'_>,
        params: &[Param<'_>],
    ) -> Result<(Vec<Row>, u64), Error> {
        match source {
            Source::Prepared(stmt) => self.run_prepared(stmt, params).await,
            Source::Sql(sql) if params.is_empty() => self.run_unprepared(sql, &[], &[]).await,
            Source::Sql(sql) => {
                let stmt = self.prepare_as(String::new(), sql, &[]).await?;
                self.run_prepared(&stmt, params).await
            }
        }
    }

    /// Bind + Execute + Sync on a prepared statement: one round trip.
    async fn run_prepared(
        &mut self,
        stmt: &Statement,
        params: &[Param<'_>],
    ) -> Result<(Vec<Row>, u64), Error> {
        check_owner(stmt, self.id)?;
        self.conn.start_request()?;
        encode_prepared(&mut self.conn.wbuf, stmt, params)?;
        frontend::sync(&mut self.conn.wbuf);
        self.conn.finish_request().await?;
        self.read_results(stmt.columns_arc().clone()).await
    }

    /// Parse + Bind + Describe + Execute + Sync on the unnamed statement: one round trip.
    async fn run_unprepared(
        &mut self,
        sql: &str,
        types: &[Type],
        params: &[Param<'_>],
    ) -> Result<(Vec<Row>, u64), Error> {
        self.conn.start_request()?;
        encode_unprepared(&mut self.conn.wbuf, sql, types, params)?;
        frontend::sync(&mut self.conn.wbuf);
        self.conn.finish_request().await?;
        self.read_results(Arc::from(Vec::new())).await
    }

    /// Reads one request's reply up to `ReadyForQuery`, collecting rows. A server error is
    /// returned after the reply is fully read, so the connection stays in step.
    async fn read_results(&mut self, columns: Arc<[Column]>) -> Result<(Vec<Row>, u64), Error> {
        let mut reply = Reply::new(columns, true);
        loop {
            match self.conn.recv().await? {
                Message::ReadyForQuery(_) => break,
                m => match reply.apply(m) {
                    Ok(Step::Copy { inbound }) => {
                        let refused = self.conn.refuse_copy(inbound).await?;
                        reply.error.get_or_insert(refused);
                    }
                    Ok(Step::More | Step::Done) => {}
                    Err(e) => return Err(self.conn.poison(e)),
                },
            }
        }
        match reply.error {
            Some(e) => Err(e),
            None => Ok((reply.rows, reply.affected)),
        }
    }
}

/// Splits `query_typed`'s (value, type) pairs into the types for `Parse` and the values for
/// `Bind`.
pub(crate) fn split_typed<'a>(params: &[(Param<'a>, Type)]) -> (Vec<Type>, Vec<Param<'a>>) {
    params.iter().map(|(p, t)| (t.clone(), *p)).unzip()
}

/// A statement prepared on another connection names nothing on this one.
pub(crate) fn check_owner(stmt: &Statement, client_id: u64) -> Result<(), Error> {
    if stmt.client_id() == client_id {
        Ok(())
    } else {
        Err(Error::usage(
            "this statement was prepared on another connection; prepare it on this one",
        ))
    }
}

/// Appends Bind + Execute for a prepared statement, without `Sync`. On error nothing is left
/// in `buf`.
pub(crate) fn encode_prepared(
    buf: &mut BytesMut,
    stmt: &Statement,
    params: &[Param<'_>],
) -> Result<(), Error> {
    let mark = buf.len();
    let encoded = encode_bind(buf, stmt.name(), stmt.params(), params)
        .and_then(|()| frontend::execute("", 0, buf).map_err(|e| Error::protocol(e.to_string())));
    if encoded.is_err() {
        buf.truncate(mark);
    }
    encoded
}

/// Appends Parse + Bind + Describe + Execute on the unnamed statement, without `Sync`. On
/// error nothing is left in `buf`.
pub(crate) fn encode_unprepared(
    buf: &mut BytesMut,
    sql: &str,
    types: &[Type],
    params: &[Param<'_>],
) -> Result<(), Error> {
    let mark = buf.len();
    let encoded = frontend::parse("", sql, types.iter().map(Type::oid), buf)
        .map_err(|e| Error::usage(format!("cannot send this statement: {e}")))
        .and_then(|()| encode_bind(buf, "", types, params))
        .and_then(|()| {
            frontend::describe(b'P', "", buf)
                .and_then(|()| frontend::execute("", 0, buf))
                .map_err(|e| Error::protocol(e.to_string()))
        });
    if encoded.is_err() {
        buf.truncate(mark);
    }
    encoded
}

/// What the caller must do after a message given to [`Reply::apply`].
pub(crate) enum Step {
    /// The statement's reply goes on.
    More,
    /// The statement finished (`CommandComplete`, `EmptyQueryResponse` or `ErrorResponse`).
    Done,
    /// The statement turned out to be a COPY, which the caller did not ask for.
    Copy { inbound: bool },
}

/// One statement's reply as it arrives: from `ParseComplete`/`BindComplete` to its
/// `CommandComplete`, `EmptyQueryResponse` or `ErrorResponse`.
pub(crate) struct Reply {
    columns: Arc<[Column]>,
    keep_rows: bool,
    pub(crate) rows: Vec<Row>,
    pub(crate) affected: u64,
    /// The command tag was `ROLLBACK`: what a `COMMIT` of a failed transaction answers.
    pub(crate) rolled_back: bool,
    /// The server's error, or our refusal of a COPY; reported once the reply is complete.
    pub(crate) error: Option<Error>,
}

impl Reply {
    pub(crate) fn new(columns: Arc<[Column]>, keep_rows: bool) -> Reply {
        Reply {
            columns,
            keep_rows,
            rows: Vec::new(),
            affected: 0,
            rolled_back: false,
            error: None,
        }
    }

    /// The result columns, as described so far.
    pub(crate) fn columns(&self) -> Arc<[Column]> {
        self.columns.clone()
    }

    /// Takes the next message of the reply. An error means the server broke the protocol.
    pub(crate) fn apply(&mut self, message: Message) -> Result<Step, Error> {
        match message {
            Message::ParseComplete | Message::BindComplete | Message::NoData => {}
            Message::RowDescription(body) => self.columns = parse_columns(Some(&body))?,
            Message::DataRow(body) => {
                if self.keep_rows {
                    self.rows.push(Row::new(self.columns.clone(), body)?);
                }
            }
            Message::CommandComplete(body) => {
                let tag = body.tag();
                self.rolled_back = matches!(tag, Ok("ROLLBACK"));
                self.affected = rows_affected(tag);
                return Ok(Step::Done);
            }
            Message::EmptyQueryResponse => return Ok(Step::Done),
            Message::ErrorResponse(body) => {
                self.error = Some(Error::db(DbError::parse(&mut body.fields())?));
                return Ok(Step::Done);
            }
            Message::CopyInResponse(_) => return Ok(Step::Copy { inbound: true }),
            Message::CopyOutResponse(_) => return Ok(Step::Copy { inbound: false }),
            // The data of a COPY TO STDOUT we refused.
            Message::CopyData(_) | Message::CopyDone => {}
            m => return Err(unexpected(&m, "in reply to Execute")),
        }
        Ok(Step::More)
    }
}

fn encode_bind(
    buf: &mut BytesMut,
    statement: &str,
    types: &[Type],
    params: &[Param<'_>],
) -> Result<(), Error> {
    if types.len() != params.len() {
        return Err(Error::usage(format!(
            "the statement has {} parameters but {} values were given",
            types.len(),
            params.len()
        )));
    }
    let mut failed_at = 0;
    let formats = params
        .iter()
        .zip(types)
        .map(|(p, t)| match p.encode_format(t) {
            postgres_types::Format::Text => 0,
            postgres_types::Format::Binary => 1,
        });
    let result = frontend::bind(
        "",
        statement,
        formats,
        params.iter().zip(types).enumerate(),
        |(i, (param, ty)), buf| {
            failed_at = i + 1;
            match param.to_sql_checked(ty, buf)? {
                postgres_types::IsNull::Yes => Ok(postgres_protocol::IsNull::Yes),
                postgres_types::IsNull::No => Ok(postgres_protocol::IsNull::No),
            }
        },
        // One result format code applies to every column: binary.
        Some(1),
        buf,
    );
    match result {
        Ok(()) => Ok(()),
        Err(frontend::BindError::Conversion(e)) => Err(Error::conversion(
            format!(
                "cannot encode parameter ${failed_at} as {}",
                types[failed_at.saturating_sub(1)]
            ),
            Some(e),
        )),
        Err(frontend::BindError::Serialization(e)) => {
            Err(Error::usage(format!("cannot encode parameters: {e}")))
        }
    }
}

/// The row count at the end of a command tag (`INSERT 0 5`, `UPDATE 2`, `SELECT 3`, `COPY 9`),
/// or 0 for tags without one.
pub(crate) fn rows_affected(tag: std::io::Result<&str>) -> u64 {
    tag.ok()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
