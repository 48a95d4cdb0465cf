//! The simple query protocol: SQL text in, text rows out, several statements per call.

use std::sync::Arc;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use crate::connect::unexpected;
use crate::connection::Owed;
use crate::query::rows_affected;
use crate::{Client, DbError, Error, SimpleRow};

/// One item of a simple query's reply, in the order the server sent it.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::SimpleQueryMessage;
/// for message in client.simple_query("SELECT 1 AS one; UPDATE t SET x = 0").await? {
///     match message {
///         SimpleQueryMessage::RowDescription(names) => println!("columns: {names:?}"),
///         SimpleQueryMessage::Row(row) => println!("one = {:?}", row.get("one")?),
///         SimpleQueryMessage::CommandComplete { tag, rows } => println!("{tag}: {rows} rows"),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SimpleQueryMessage {
    /// The column names of the rows that follow.
    RowDescription(Arc<[String]>),
    /// A row.
    Row(SimpleRow),
    /// A statement finished: its command tag (`INSERT 0 1`, `SELECT 3`) and row count.
    CommandComplete {
        /// The command tag.
        tag: String,
        /// The number of rows affected or returned, 0 if the tag has none.
        rows: u64,
    },
}

impl Client {
    /// Runs one or more `;`-separated statements with the simple protocol and returns every row
    /// as text. No parameters: never build this SQL from untrusted input.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SimpleQueryMessage;
    /// let reply = client.simple_query("CREATE TEMP TABLE t(x int); INSERT INTO t VALUES (1), (2); SELECT x FROM t").await?;
    /// let rows = reply.iter().filter(|m| matches!(m, SimpleQueryMessage::Row(_))).count();
    /// assert_eq!(rows, 2);
    /// # Ok(()) }
    /// ```
    pub async fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        let mut out = Vec::new();
        self.run_simple(sql, Some(&mut out)).await?;
        Ok(out)
    }

    /// [`Client::simple_query`] that keeps, when a statement fails, what the statements
    /// before it returned, as psql shows it. Those statements ran: a `COMMIT` among them
    /// committed, whatever failed after it. The error, if any, comes with them; rows the failed
    /// statement sent before its error are there too, with no `CommandComplete` after them.
    /// One refusal is the client's, not the server's: a `COPY ... TO STDOUT` in the string
    /// (use [`Client::copy_out`]). The server runs it, and the statements after it, whatever
    /// the client does, so the reply then holds what those later statements returned too, and
    /// the error says they ran.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// use slipstream_pg::SimpleQueryMessage;
    /// let (reply, error) = client
    ///     .simple_query_until_error("BEGIN; CREATE TABLE t1(x int); COMMIT; SELECT 1/0")
    ///     .await;
    /// let tags: Vec<&str> = reply
    ///     .iter()
    ///     .filter_map(|m| match m {
    ///         SimpleQueryMessage::CommandComplete { tag, .. } => Some(tag.as_str()),
    ///         _ => None,
    ///     })
    ///     .collect();
    /// assert_eq!(tags, ["BEGIN", "CREATE TABLE", "COMMIT"]); // t1 exists
    /// assert!(error.is_some()); // division by zero
    /// # }
    /// ```
    pub async fn simple_query_until_error(
        &mut self,
        sql: &str,
    ) -> (Vec<SimpleQueryMessage>, Option<Error>) {
        let mut out = Vec::new();
        let error = self.run_simple(sql, Some(&mut out)).await.err();
        (out, error)
    }

    /// Runs one or more `;`-separated statements and discards their rows.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// client.batch_execute("CREATE TEMP TABLE a(x int); CREATE TEMP TABLE b(y int)").await?;
    /// # Ok(()) }
    /// ```
    pub async fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.run_simple(sql, None).await.map(drop)
    }

    /// Runs simple-protocol SQL; returns the last command tag.
    pub(crate) async fn run_simple(
        &mut self,
        sql: &str,
        out: Option<&mut Vec<SimpleQueryMessage>>,
    ) -> Result<String, Error> {
        self.conn.start_request().await?;
        self.queue_simple(sql)?;
        self.read_simple(out).await
    }

    /// Appends `sql` as a simple query, its reply owed, without an await: once it returns, the
    /// query goes to the server even if the caller's future is dropped, so a caller can arm
    /// what such a drop must undo before its first await. Call after `start_request`.
    pub(crate) fn queue_simple(&mut self, sql: &str) -> Result<(), Error> {
        self.conn
            .encode(|buf| frontend::query(sql, buf))
            .map_err(|e| Error::usage(format!("cannot send this SQL: {e}")))?;
        self.conn.owed.push_back(Owed::Simple);
        Ok(())
    }

    /// Sends what [`Client::queue_simple`] queued and reads its reply; returns the last command
    /// tag.
    pub(crate) async fn read_simple(
        &mut self,
        mut out: Option<&mut Vec<SimpleQueryMessage>>,
    ) -> Result<String, Error> {
        self.conn.flush().await?;

        let mut columns: Arc<[String]> = Arc::from(Vec::new());
        let mut last_tag = String::new();
        let mut error = None;
        loop {
            match self.conn.recv().await? {
                Message::RowDescription(body) => {
                    let names: Vec<String> = body
                        .fields()
                        .map(|f| Ok(f.name().to_string()))
                        .collect()
                        .map_err(|e| {
                            self.conn
                                .poison(Error::protocol(format!("malformed RowDescription: {e}")))
                        })?;
                    columns = names.into();
                    if let Some(out) = out.as_deref_mut() {
                        out.push(SimpleQueryMessage::RowDescription(columns.clone()));
                    }
                }
                Message::DataRow(body) => {
                    if let Some(out) = out.as_deref_mut() {
                        let row = SimpleRow::new(columns.clone(), body)
                            .map_err(|e| self.conn.poison(e))?;
                        out.push(SimpleQueryMessage::Row(row));
                    }
                }
                Message::CommandComplete(body) => {
                    let tag = body.tag().unwrap_or_default().to_string();
                    if let Some(out) = out.as_deref_mut() {
                        out.push(SimpleQueryMessage::CommandComplete {
                            rows: rows_affected(Ok(&tag)),
                            tag: tag.clone(),
                        });
                    }
                    last_tag = tag;
                }
                Message::EmptyQueryResponse => {}
                // A refused COPY FROM STDIN's own error is the cause; the server's that follows
                // ("COPY from stdin failed", SQLSTATE 57014 like a cancel) only reports the
                // CopyFail we sent.
                Message::ErrorResponse(body) => {
                    error.get_or_insert(Error::db(DbError::parse(&mut body.fields())?));
                }
                m @ (Message::CopyInResponse(_) | Message::CopyOutResponse(_)) => {
                    let refused = self
                        .conn
                        .refuse_copy(matches!(m, Message::CopyInResponse(_)))
                        .await?;
                    error.get_or_insert(refused);
                }
                Message::CopyData(_) | Message::CopyDone => {}
                Message::ReadyForQuery(_) => break,
                m => {
                    return Err(self
                        .conn
                        .poison(unexpected(&m, "in reply to a simple query")));
                }
            }
        }
        match error {
            Some(e) => Err(self.conn.explain_failed(e)),
            None => Ok(last_tag),
        }
    }
}
