//! The extended query protocol: prepare, bind, execute.

use std::sync::Arc;

use bytes::BytesMut;

use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use postgres_types::{ToSql, Type};

use crate::connect::unexpected;
use crate::connection::{Common, Owed};
use crate::param_types::{self, Wire};
use crate::row_stream::first_batch_rows;
use crate::statement::{parse_columns, parse_params};
use crate::statement_cache::CacheStats;
use crate::type_info::is_placeholder;
use crate::{
    Client, Column, DbError, Error, FetchSize, Row, SqlState, Statement, TransactionStatus,
};

/// A SQL string or a prepared [`Statement`]: what [`Client::query`] and friends accept.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::Uncached;
/// let sql = "SELECT relname FROM pg_class WHERE oid = $1";
/// let stmt = client.prepare(sql).await?;
/// let by_text = client.query_one(sql, &[&1259u32]).await?; // cached SQL
/// let by_stmt = client.query_one(&stmt, &[&1259u32]).await?; // a prepared statement
/// let uncached = client.query_one(&Uncached(sql), &[&1259u32]).await?; // past the cache
/// assert_eq!(by_text.get::<_, &str>(0)?, "pg_class");
/// # let _ = (by_stmt, uncached);
/// # Ok(()) }
/// ```
pub trait ToStatement: sealed::Sealed {
    #[doc(hidden)]
    fn source(&self) -> Source<'_>;
}

#[doc(hidden)]
pub enum Source<'a> {
    Sql(&'a str),
    Uncached(&'a str),
    Prepared(&'a Statement),
}

/// SQL that bypasses the statement cache (ODP.NET's `AddToStatementCache = false`): it runs on
/// the unnamed statement, in one round trip, and leaves nothing prepared behind.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::Uncached;
/// let before = client.statement_cache_stats();
/// client.execute(&Uncached("UPDATE jobs SET state = 'done' WHERE id = $1"), &[&7i64]).await?;
/// assert_eq!(client.statement_cache_stats().misses, before.misses);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Uncached<'a>(pub &'a str);

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
impl sealed::Sealed for Uncached<'_> {}
impl ToStatement for Uncached<'_> {
    fn source(&self) -> Source<'_> {
        Source::Uncached(self.0)
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
        let name = self.next_statement_name();
        let oids: Vec<u32> = types.iter().map(Type::oid).collect();
        self.prepare_as(name, sql, &oids).await
    }

    /// Prepares `sql` as `name`, naming the parameter types `oids` (0, or fewer OIDs than
    /// parameters: the server infers the type).
    async fn prepare_as(
        &mut self,
        name: String,
        sql: &str,
        oids: &[u32],
    ) -> Result<Statement, Error> {
        check_parameter_count(oids.len())?;
        self.conn.start_request().await?;
        let mark = self.conn.wbuf.len();
        let encoded = frontend::parse(&name, sql, oids.iter().copied(), &mut self.conn.wbuf)
            .and_then(|()| frontend::describe(b'S', &name, &mut self.conn.wbuf));
        if let Err(e) = encoded {
            self.conn.wbuf.truncate(mark);
            return Err(Error::usage(format!("cannot send this statement: {e}")));
        }
        self.conn.parsing(&name);
        frontend::sync(&mut self.conn.wbuf);
        self.conn.finish_request(Owed::Extended).await?;

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
        // The statement exists now (unless Parse failed): the type lookup's request must not
        // close it as a dropped call's, and a drop or a failure before the handle exists must.
        if !name.is_empty() {
            self.conn.claim_for_now(&name);
        }
        if let Some(db) = error {
            return Err(self.conn.explain_failed(Error::db(db)));
        }
        let (mut params, mut columns) = match (params, columns) {
            (Some(params), Some(columns)) => (params, columns),
            _ => {
                return Err(self.conn.poison(Error::protocol(
                    "server did not describe the prepared statement",
                )));
            }
        };
        let looked_up = self
            .look_up_types(columns.iter().map(Column::type_).chain(&params))
            .await;
        if let Err(e) = looked_up {
            return Err(
                e.context("preparing the statement succeeded, but looking up its types failed")
            );
        }
        self.conn.keep_unkept();
        self.types.resolve_params(&mut params);
        if let Some(resolved) = self.types.resolve_columns(&columns) {
            columns = resolved;
        }
        let stmt = Statement::new(
            name,
            sql.to_string(),
            params,
            columns,
            self.id,
            Arc::downgrade(&self.conn.closes),
        );
        stmt.mark_types_checked(self.types.generation());
        Ok(stmt)
    }

    /// A statement the caller holds keeps the definitions of the enums, composites and domains
    /// it was prepared with. After the type cache was cleared (an `ALTER TYPE` or `ALTER
    /// DOMAIN` the connection ran, `DISCARD ALL`, [`Client::clear_statement_cache`]) they may
    /// be stale: read by the old definition, a composite whose attribute was dropped and added
    /// again puts each value in another field, with no error. So its looked-up types are
    /// looked up again (one round trip, once per clearing) and compared: the same, it runs;
    /// changed or gone, it is refused, naming the type. Free for a statement whose types are
    /// all built in, or that was checked since the last clearing.
    ///
    /// A statement with types never looked up (a `Pipeline::prepare` taken with `process`
    /// before the block's `end`) has them looked up here, once for every handle.
    pub(crate) async fn check_statement_types(&mut self, stmt: &Statement) -> Result<(), Error> {
        // A call dropped or leaked with its reply unread may have altered a type: the tag that
        // makes the caches forget it is read only once that reply is settled. Judged before,
        // the statement would read the altered composite by its old field order. Settling
        // first costs a round trip only then, and only for a statement with looked-up types.
        if !self.conn.is_settled()
            && (stmt.has_placeholders() || stmt.looked_up_types().next().is_some())
        {
            self.conn.settle().await?;
        }
        self.forget_discarded();
        if stmt.has_placeholders() {
            self.look_up_types(&stmt.placeholders())
                .await
                .map_err(|e| e.context("looking up the prepared statement's types failed"))?;
            stmt.resolve_shared(&self.types);
        }
        if stmt.types_checked_at(self.types.generation()) {
            return Ok(());
        }
        let held: Vec<Type> = stmt.looked_up_types().cloned().collect();
        if !held.is_empty() {
            let again: Vec<Type> = held
                .iter()
                .map(|t| crate::type_info::placeholder(t.oid()))
                .collect();
            self.look_up_types(&again).await.map_err(|e| {
                e.context(
                    "looking up the prepared statement's types again (the type cache was \
                     cleared since it was prepared) failed",
                )
            })?;
            if let Some((t, _)) = held
                .iter()
                .zip(&again)
                .find(|(t, p)| self.types.resolve(p).as_ref() != Some(*t))
            {
                return Err(stale_statement_types(stmt, t, true, "prepare it again"));
            }
        }
        stmt.mark_types_checked(self.types.generation());
        Ok(())
    }

    /// Looks up the placeholders among `types` that the connection's type cache does not hold
    /// (one catalog query for all of them and what they refer to), as a request of its own:
    /// call it only with no reply of the caller's still to read. Costs nothing when every type
    /// is built in or already cached.
    pub(crate) async fn look_up_types<'t>(
        &mut self,
        types: impl IntoIterator<Item = &'t Type>,
    ) -> Result<(), Error> {
        self.forget_discarded();
        let missing = self.types.missing(types);
        if missing.is_empty() {
            return Ok(());
        }
        // Boxed: a lookup is rare (once per unknown type), and an inline one would make the
        // future of every query that might need one larger (see `send_sql`).
        Box::pin(self.look_up_missing(missing)).await
    }

    async fn look_up_missing(&mut self, missing: Vec<u32>) -> Result<(), Error> {
        let plan = Plan::OneOff {
            wires: vec![Wire::Binary(Type::OID_ARRAY)],
        };
        // The running call's statement, if it has not kept it yet, is not this request's to
        // close (see `Connection::unkept`).
        self.conn.lookup_request = true;
        self.conn.start_request().await?;
        encode_plan(
            &mut self.conn.wbuf,
            &plan,
            crate::type_info::LOOKUP_SQL,
            &[&missing],
            0,
        )?;
        let reply = self.read_reply(&plan, Rows::Keep).await?;
        match reply.error {
            Some(e) => Err(e),
            None => self.types.insert_rows(&reply.rows),
        }
    }

    /// After the session ran `DISCARD ALL` / `DEALLOCATE ALL` (the server has no statements
    /// left), or altered a type: forgets the cached statements and the looked-up types
    /// (a type may have changed since).
    pub(crate) fn forget_discarded(&mut self) {
        if std::mem::take(&mut self.conn.statements_discarded) {
            self.cache.clear();
            self.types.clear();
        }
    }

    /// Replaces the placeholder types in a complete reply (its columns, rows and described
    /// parameters), looking up those the cache does not hold. A failed statement returns no
    /// rows, so nothing is looked up for it. A lookup that fails leaves the placeholders (the
    /// values still read with `Row::get_raw`) and is logged: the statement itself ran, and its
    /// outcome is what the caller must hear about.
    pub(crate) async fn resolve_reply(&mut self, reply: &mut Reply) -> Result<(), Error> {
        // A prepared or cached statement's reply is not described again: its types were
        // resolved when it was prepared, and this costs it one branch.
        if !reply.described && reply.params.is_none() {
            return Ok(());
        }
        let columns = reply.columns();
        let placeholders = columns.iter().any(|c| is_placeholder(c.type_()))
            || reply.params.iter().flatten().any(is_placeholder);
        if !placeholders || reply.error.is_some() {
            return Ok(());
        }
        let types = columns.iter().map(Column::type_);
        if let Err(e) = self
            .look_up_types(types.chain(reply.params.iter().flatten()))
            .await
        {
            if self.conn.is_broken() {
                return Err(e);
            }
            tracing::warn!(
                target: "slipstream_pg::types",
                "looking up the result's types failed ({e}); the values read only with Row::get_raw"
            );
        }
        self.types.resolve_reply(reply);
        Ok(())
    }

    /// Runs a statement and returns all its rows.
    ///
    /// One round trip. A SQL string goes through the connection's statement cache: the first
    /// run prepares it (in the same round trip), later runs only bind and execute. Parameter
    /// types come from the Rust values (see `docs/statement-cache.md`); a value of a type the
    /// client cannot name (a custom `ToSql`) costs one more round trip for the server to say it.
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
        Ok(self.run(statement.source(), params, Rows::Keep).await?.0)
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
        // Only the count is returned: rows are read off the wire, never built.
        Ok(self.run(statement.source(), params, Rows::Count).await?.1)
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
        let (wires, values) = split_typed(params);
        let plan = Plan::OneOff { wires };
        self.conn.start_request().await?;
        encode_plan(&mut self.conn.wbuf, &plan, sql, &values, 0)?;
        Ok(self.run_plan(&plan, sql, Rows::Keep, &mut false).await?.0)
    }

    async fn run(
        &mut self,
        source: Source<'_>,
        params: &[Param<'_>],
        rows: Rows,
    ) -> Result<(Vec<Row>, u64), Error> {
        let (sql, use_cache) = match source {
            Source::Prepared(stmt) => {
                check_owner(stmt, self.id)?;
                self.check_statement_types(stmt).await?;
                self.conn.start_request().await?;
                let plan = Plan::Named {
                    stmt: stmt.clone(),
                    cached: false,
                };
                encode_plan(&mut self.conn.wbuf, &plan, stmt.sql(), params, 0)?;
                let mut stale = false;
                let result = self.run_plan(&plan, stmt.sql(), rows, &mut stale).await;
                return result.map_err(|e| if stale { stale_prepared(stmt, e) } else { e });
            }
            Source::Uncached(sql) => (sql, false),
            Source::Sql(sql) => (sql, self.cache.enabled()),
        };
        let plan = self.send_sql(sql, params, use_cache, None).await?;
        let mut stale = false;
        match self.run_plan(&plan, sql, rows, &mut stale).await {
            Err(e) if plan.is_cached() && stale => {
                // Judged from the status that came with the error, after every reply a dropped
                // call left owed was read: a transaction the error aborted reads as failed,
                // autocommit as idle. The status before the request may be stale.
                let in_transaction = self.conn.tx_status != TransactionStatus::Idle;
                self.stale(&plan, e, in_transaction)?;
                let plan = self.send_sql(sql, params, use_cache, None).await?;
                self.run_plan(&plan, sql, rows, &mut false).await
            }
            result => result,
        }
    }

    /// Handles a cached statement the server called stale: forgets it, and returns the error
    /// to report if it cannot be retried transparently (inside a transaction, which the error
    /// has aborted).
    pub(crate) fn stale(
        &mut self,
        plan: &Plan,
        e: Error,
        in_transaction: bool,
    ) -> Result<(), Error> {
        // A cached statement the server no longer has was deallocated behind the cache's back,
        // and what does that (a `DEALLOCATE ALL` or `DISCARD ALL` in a function or `DO` block,
        // whose command tag the client never sees) takes every statement: forget them all, or
        // the transaction the error tells the caller to run again fails on the next one, once
        // per cached statement. A single statement deallocated by name costs only re-prepares.
        let deallocated = e.code() == Some(SqlState::INVALID_SQL_STATEMENT_NAME);
        if deallocated {
            self.cache.clear();
        } else if let Plan::Named { stmt, .. } = plan {
            self.cache.remove(stmt);
        }
        // A dropped type may be cached here under its old OID, and a type recreated under the
        // same name has a new one: look every type up again (rare; one round trip).
        self.types.clear();
        if in_transaction {
            // Run again as the error says, a transaction that runs this SQL before and after
            // its own DDL would prepare it afresh before the DDL and find it stale after, on
            // every rerun: from now on it runs past the cache (one round trip all the same).
            // Not after a deallocation: the rerun prepares it once more and it stays, unless
            // the transaction itself deallocates behind the cache's back, which is rare enough
            // not to cost the SQL its cache.
            if let (Plan::Named { stmt, .. }, false) = (plan, deallocated) {
                self.cache.keep_out(stmt.sql());
            }
            let then = if deallocated {
                "the statement is then prepared afresh"
            } else {
                "this SQL then runs past the statement cache"
            };
            return Err(e.context(format!(
                "a cached prepared statement went stale inside a transaction (a schema change altered \
                 its result or dropped a type it uses, or it was deallocated); the transaction is aborted and cannot be retried \
                 transparently: roll back and run the transaction again ({then})",
            )));
        }
        self.cache.count_reprepare();
        Ok(())
    }

    /// Starts a request and appends `sql`'s messages up to its `Execute` (at most `fetch`'s
    /// first batch, see [`first_batch_rows`]; `None`: all rows), choosing how it runs: a cached
    /// statement whose parameter types the values fit, prepare-and-run in one request (then
    /// cached), or the unnamed statement. The caller appends `Sync` or `Flush`.
    ///
    /// Only when a parameter's type cannot be chosen from its Rust value does this talk to the
    /// server first (Parse + Describe, one round trip).
    pub(crate) async fn send_sql(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
        use_cache: bool,
        fetch: Option<FetchSize>,
    ) -> Result<Plan, Error> {
        self.conn.start_request().await?;
        self.forget_discarded();
        if use_cache {
            let wbuf = &mut self.conn.wbuf;
            let hit = self.cache.find(sql, |stmt, wires| {
                if wires.map_or(stmt.params().len(), <[Wire]>::len) != params.len() {
                    return Ok(false);
                }
                // A cached statement's columns are known: the first batch is sized from them.
                let max_rows = first_batch_rows(fetch, stmt.columns());
                match encode_named(wbuf, stmt, wires, params, max_rows) {
                    Ok(()) => Ok(true),
                    // The values do not fit this statement's types: look further.
                    Err(e) if e.is_wrong_type() => Ok(false),
                    Err(e) => Err(e),
                }
            })?;
            if let Some(stmt) = hit {
                return Ok(Plan::Named { stmt, cached: true });
            }
        }
        let use_cache = use_cache && !self.cache.is_kept_out(sql);
        let plan = match param_types::infer(params, &mut self.conn.wbuf) {
            Some(wires) if use_cache => Plan::Prepare {
                name: self.next_statement_name(),
                wires: wires.into(),
            },
            Some(wires) => Plan::OneOff { wires },
            None => {
                let name = match use_cache {
                    true => self.next_statement_name(),
                    false => String::new(),
                };
                // Only the values the client cannot name are left to the server: the others
                // are named and sent as without a custom value beside them (a string as text
                // for the server to infer, like a quoted literal; an `i32` as `int4`). Bound
                // as the server described them, a string for a `date` was refused.
                let known = param_types::infer_each(params, &mut self.conn.wbuf);
                let oids: Vec<u32> = known
                    .iter()
                    .map(|w| w.as_ref().map_or(0, Wire::oid))
                    .collect();
                // Boxed: this round trip is rare (a parameter whose type the client cannot
                // name), and inline its future would more than double the size of every
                // query's future (1.5 KiB: past the allocator's per-thread cache for the
                // runner's boxed transactions, about 400 instructions per transaction).
                let stmt = Box::pin(self.prepare_as(name, sql, &oids)).await?;
                // A statement with another parameter count than values given is bound by its
                // described types, which reports the mismatch before anything is sent.
                let wires: Option<Box<[Wire]>> = (stmt.params().len() == params.len()).then(|| {
                    known
                        .into_iter()
                        .zip(stmt.params())
                        .map(|(w, t)| w.unwrap_or_else(|| Wire::Binary(t.clone())))
                        .collect()
                });
                // Only a statement these values can bind is cached. With another parameter
                // count the call fails below; cached, each repeat of it would prepare and
                // cache one more copy (its lookup never finds one: the value count is not the
                // statement's), evicting statements that work. Dropped with the error, it is
                // closed with the next request.
                if use_cache && wires.is_some() {
                    self.cache.insert(stmt.clone(), wires.clone());
                }
                self.conn.start_request().await?;
                // Past the cache the statement was the unnamed one, and looking up a type
                // it names (in `prepare_as`) ran on the unnamed statement too, replacing it:
                // parse the SQL again in this request, its types now known.
                if let (false, Some(wires)) = (use_cache, &wires) {
                    let plan = Plan::OneOff {
                        wires: wires.to_vec(),
                    };
                    // Sized as for any statement not described yet: the stream reads its
                    // first batch by the same rule.
                    let max_rows = first_batch_rows(fetch, &[]);
                    encode_plan(&mut self.conn.wbuf, &plan, sql, params, max_rows)?;
                    return Ok(plan);
                }
                encode_named_now(
                    &mut self.conn.wbuf,
                    &stmt,
                    wires.as_deref(),
                    params,
                    first_batch_rows(fetch, stmt.columns()),
                )?;
                return Ok(Plan::Named {
                    stmt,
                    cached: use_cache,
                });
            }
        };
        // Not described yet: the first batch is sized from a guess.
        let max_rows = first_batch_rows(fetch, &[]);
        encode_plan(&mut self.conn.wbuf, &plan, sql, params, max_rows)?;
        if let Plan::Prepare { name, .. } = &plan {
            self.conn.parsing(name);
        }
        Ok(plan)
    }

    /// Ends the request in the write buffer with `Sync`, sends it and reads the whole reply,
    /// looking up any type it names that the client does not know. `stale` is set when the
    /// call failed because its statement no longer fits the server (see [`Reply::stale`]).
    async fn run_plan(
        &mut self,
        plan: &Plan,
        sql: &str,
        rows: Rows,
        stale: &mut bool,
    ) -> Result<(Vec<Row>, u64), Error> {
        let mut reply = self.read_reply(plan, rows).await?;
        *stale = reply.stale();
        // A first run's statement exists now: the type lookup's request must not close it as
        // a dropped call's, and a drop during the lookup must.
        if let Plan::Prepare { name, .. } = plan {
            self.conn.claim_for_now(name);
        }
        self.resolve_reply(&mut reply).await?;
        self.conn.keep_unkept();
        self.cache_prepared(plan, sql, &reply);
        match reply.error {
            Some(e) => Err(self.conn.explain_failed(e)),
            None => Ok((reply.rows, reply.affected)),
        }
    }

    /// Ends the request in the write buffer with `Sync`, sends it and reads the whole reply.
    async fn read_reply(&mut self, plan: &Plan, rows: Rows) -> Result<Reply, Error> {
        frontend::sync(&mut self.conn.wbuf);
        self.conn.finish_request(Owed::Extended).await?;
        let mut reply = Reply::new(plan.columns(), rows == Rows::Keep);
        loop {
            // Nearly every reply is these few kinds, taken in place from the read buffer.
            let message = match self.conn.next_common(rows == Rows::Keep)? {
                Common::Ack | Common::Skipped => continue,
                Common::Bound => {
                    reply.bound = true;
                    continue;
                }
                Common::NoData => Message::NoData,
                Common::Row(body) => Message::DataRow(body),
                Common::Complete(tag) => {
                    reply.complete(tag);
                    continue;
                }
                Common::Ready => break,
                Common::Partial => {
                    self.conn.read_more().await?;
                    continue;
                }
                Common::Other => match self.conn.recv_buffered()? {
                    Some(m) => m,
                    // Boxed: rare (a message of another kind cut by the socket's read), and
                    // inline it would grow every query's future by its 144 bytes.
                    None => Box::pin(self.conn.recv()).await?,
                },
            };
            match message {
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
        Ok(reply)
    }

    /// After a `Plan::Prepare` request: caches the statement if the server described it (even
    /// if running it then failed).
    pub(crate) fn cache_prepared(&mut self, plan: &Plan, sql: &str, reply: &Reply) {
        if let Plan::Prepare { name, .. } = plan {
            self.conn.claim(name);
        }
        if let (Plan::Prepare { name, wires }, Some(params), true) =
            (plan, &reply.params, reply.described)
        {
            // The SQL has more parameters than values were given: the Bind failed, and the
            // statement could never be bound this way. It exists on the server all the same:
            // close it with the next request. Likewise a statement whose types could not be
            // looked up: a cache hit gets no RowDescription to try again with.
            let columns = reply.columns();
            if params.len() != wires.len()
                || params.iter().any(is_placeholder)
                || columns.iter().any(|c| is_placeholder(c.type_()))
            {
                self.conn
                    .closes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(name.clone());
                return;
            }
            let stmt = Statement::new(
                name.clone(),
                sql.to_string(),
                params.clone(),
                reply.columns(),
                self.id,
                Arc::downgrade(&self.conn.closes),
            );
            self.cache.insert(stmt, Some(wires.clone()));
        }
    }

    /// What the statement cache has done on this connection.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let s = client.statement_cache_stats();
    /// println!("{} hits, {} misses, {} evictions of {} slots", s.hits, s.misses, s.evictions, s.capacity);
    /// # Ok(()) }
    /// ```
    pub fn statement_cache_stats(&self) -> CacheStats {
        let mut stats = self.cache.stats();
        // A `DISCARD ALL` / `DEALLOCATE ALL` (or `ALTER TYPE`) the connection saw empties the
        // cache at its next use (`forget_discarded`, which needs `&mut self`); no entry will
        // be used again, so "statements in the cache now" is none already.
        if self.conn.statements_discarded {
            stats.size = 0;
        }
        stats
    }

    /// Closes every cached statement (with the next request; no round trip of its own), and
    /// forgets the types looked up in the catalogs: call it after another connection's
    /// `ALTER TYPE` changed an enum or composite this connection has used (or this one's, run
    /// inside a function or `DO` block, whose command tag the client never sees), or after any
    /// `ALTER TABLE` changed a table whose row type it has used (`DISCARD ALL`, and `ALTER TYPE`
    /// or `ALTER DOMAIN` run on this connection, do the same by themselves).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// client.clear_statement_cache();
    /// assert_eq!(client.statement_cache_stats().size, 0);
    /// # Ok(()) }
    /// ```
    pub fn clear_statement_cache(&mut self) {
        self.cache.clear();
        self.types.clear();
    }
}

/// How a call runs its statement, decided before anything is sent.
pub(crate) enum Plan {
    /// A prepared statement: the caller's, or a cache hit.
    Named { stmt: Statement, cached: bool },
    /// Parse + Describe a new named statement and run it, in one request; cached afterwards.
    Prepare { name: String, wires: Box<[Wire]> },
    /// Parse + run the unnamed statement, in one request; nothing stays prepared.
    OneOff { wires: Vec<Wire> },
}

impl Plan {
    pub(crate) fn is_cached(&self) -> bool {
        matches!(self, Plan::Named { cached: true, .. })
    }

    /// The result columns, if known before the reply.
    pub(crate) fn columns(&self) -> Arc<[Column]> {
        match self {
            Plan::Named { stmt, .. } => stmt.columns_arc().clone(),
            _ => Arc::from(Vec::new()),
        }
    }
}

/// True for the errors a cached statement gets when it no longer fits the server: a schema
/// change altered its result type (0A000), it was deallocated (26000), or a type it names was
/// dropped (and perhaps created again under the same name, with a new OID): PostgreSQL 15
/// reports the last as an internal error (XX000) naming the old OID, on every later run.
///
/// The 0A000 is known by the routine that raises it, not its message: the message is
/// translated under the server's `lc_messages` ("gecachter Plan darf den Ergebnistyp nicht
/// ändern"), the routine never is (pgjdbc checks it the same way). The message is still
/// accepted for a server or proxy that leaves the routine out. The XX000 comes from an
/// `elog`, whose messages are never translated.
pub(crate) fn is_stale(e: &Error) -> bool {
    match e.as_db_error() {
        Some(db) => {
            (db.code() == SqlState::FEATURE_NOT_SUPPORTED
                && (db.routine() == Some("RevalidateCachedQuery")
                    || db
                        .message()
                        .contains("cached plan must not change result type")))
                || db.code() == SqlState::INVALID_SQL_STATEMENT_NAME
                || (db.code() == SqlState::INTERNAL_ERROR
                    && db.message().starts_with("cache lookup failed for type"))
        }
        None => false,
    }
}

/// Appends a plan's messages, with `Execute` returning at most `max_rows` rows (0: all), and
/// without `Sync`/`Flush`. On error nothing is left in `buf`.
pub(crate) fn encode_plan(
    buf: &mut BytesMut,
    plan: &Plan,
    sql: &str,
    params: &[Param<'_>],
    max_rows: i32,
) -> Result<(), Error> {
    all_or_nothing(buf, |buf| {
        match plan {
            Plan::Named { stmt, .. } => encode_bind(buf, stmt.name(), Types(stmt.params()), params),
            Plan::Prepare { name, wires } => encode_parse(buf, name, sql, wires)
                .and_then(|()| describe(buf, b'S', name))
                .and_then(|()| encode_bind(buf, name, Wires(wires), params)),
            Plan::OneOff { wires } => encode_parse(buf, "", sql, wires)
                .and_then(|()| encode_bind(buf, "", Wires(wires), params))
                .and_then(|()| describe(buf, b'P', "")),
        }
        .and_then(|()| {
            frontend::execute("", max_rows, buf).map_err(|e| Error::protocol(e.to_string()))
        })
    })
}

/// Runs the encoder `f` on `buf`, leaving nothing of what it wrote if it fails or panics. A
/// user's `ToSql` may panic part-way through a Bind; the half message left behind would be
/// sent with the next request and desynchronise the connection (and a pool would lend it).
fn all_or_nothing(
    buf: &mut BytesMut,
    f: impl FnOnce(&mut BytesMut) -> Result<(), Error>,
) -> Result<(), Error> {
    let mark = buf.len();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *buf))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            buf.truncate(mark);
            Err(e)
        }
        Err(panic) => {
            buf.truncate(mark);
            std::panic::resume_unwind(panic)
        }
    }
}

/// Appends Bind + Execute for a prepared statement whose values go as `wires` (`None`: binary,
/// as the statement's parameter types). On error nothing is left in `buf`.
fn encode_named(
    buf: &mut BytesMut,
    stmt: &Statement,
    wires: Option<&[Wire]>,
    params: &[Param<'_>],
    max_rows: i32,
) -> Result<(), Error> {
    if params.is_empty()
        && max_rows == 0
        && stmt.params().is_empty()
        && wires.is_none_or(<[Wire]>::is_empty)
    {
        let encoded = stmt.bind_without_values(|| {
            let mut bytes = BytesMut::new();
            encode_named_now(&mut bytes, stmt, wires, params, max_rows).ok()?;
            Some(bytes.to_vec().into_boxed_slice())
        });
        if let Some(bytes) = encoded {
            buf.extend_from_slice(bytes);
            return Ok(());
        }
    }
    encode_named_now(buf, stmt, wires, params, max_rows)
}

/// [`encode_named`], encoded afresh.
fn encode_named_now(
    buf: &mut BytesMut,
    stmt: &Statement,
    wires: Option<&[Wire]>,
    params: &[Param<'_>],
    max_rows: i32,
) -> Result<(), Error> {
    all_or_nothing(buf, |buf| {
        match wires {
            Some(wires) => encode_bind(buf, stmt.name(), Wires(wires), params),
            None => encode_bind(buf, stmt.name(), Types(stmt.params()), params),
        }
        .and_then(|()| {
            frontend::execute("", max_rows, buf).map_err(|e| Error::protocol(e.to_string()))
        })
    })
}

fn encode_parse(buf: &mut BytesMut, name: &str, sql: &str, wires: &[Wire]) -> Result<(), Error> {
    check_parameter_count(wires.len())?;
    frontend::parse(name, sql, wires.iter().map(Wire::oid), buf)
        .map_err(|e| Error::usage(format!("cannot send this statement: {e}")))
}

/// The protocol counts a statement's parameters in 16 bits (PostgreSQL, like libpq, takes up
/// to 65535): more would fail in the encoder as "value too large to transmit", which names
/// neither the count nor the way out.
pub(crate) fn check_parameter_count(n: usize) -> Result<(), Error> {
    if n > usize::from(u16::MAX) {
        return Err(Error::usage(format!(
            "{n} parameter values were given, but a statement takes at most {} (the \
             protocol's 16-bit count); send them as arrays (`= ANY($1)`, `unnest($1, $2)`) or \
             split the statement",
            u16::MAX
        )));
    }
    Ok(())
}

fn describe(buf: &mut BytesMut, kind: u8, name: &str) -> Result<(), Error> {
    frontend::describe(kind, name, buf).map_err(|e| Error::protocol(e.to_string()))
}

/// Splits `query_typed`'s (value, type) pairs into the wire form for `Parse`/`Bind` and the
/// values.
pub(crate) fn split_typed<'a>(params: &[(Param<'a>, Type)]) -> (Vec<Wire>, Vec<Param<'a>>) {
    params
        .iter()
        .map(|(p, t)| (Wire::Binary(t.clone()), *p))
        .unzip()
}

/// The error for a statement the caller holds whose type `t` changed (`changed`), or may have,
/// since it was prepared (see `Client::check_statement_types`), ending with what to do.
pub(crate) fn stale_statement_types(
    stmt: &Statement,
    t: &Type,
    changed: bool,
    remedy: &str,
) -> Error {
    Error::usage(format!(
        "the prepared statement `{}` holds the definition type {t} had when it was prepared, \
         and the type {} since (ALTER TYPE or ALTER DOMAIN, DISCARD ALL, or \
         clear_statement_cache after a change elsewhere): its values would be read and written \
         by the old definition (a composite's fields in their old order); {remedy}",
        stmt.sql(),
        if changed {
            "has changed"
        } else {
            "may have changed"
        },
    ))
}

/// The error of a statement the caller prepared that no longer fits the server (see
/// [`Reply::stale`]): the client prepares again only the statements it caches, so this says
/// which statement it is and what to do (the server names it by the client's `S<n>`, or not
/// at all).
pub(crate) fn stale_prepared(stmt: &Statement, e: Error) -> Error {
    e.context(format!(
        "the prepared statement `{}` no longer fits the server (a schema change altered its \
         result or dropped a type it uses, or it was deallocated by DEALLOCATE or DISCARD \
         ALL): prepare it again with Client::prepare, or run the SQL text, which the \
         statement cache prepares again by itself",
        stmt.sql()
    ))
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

/// Whether a reply's rows are built into [`Row`]s for the caller, or only counted (`execute`:
/// each `DataRow` is read off the wire and dropped, and the count comes from
/// `CommandComplete`, as without rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rows {
    Keep,
    Count,
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
    /// The command ended a transaction block (`COMMIT`, `ROLLBACK`, `PREPARE TRANSACTION`):
    /// the work before it is settled either way.
    pub(crate) ends_transaction: bool,
    /// The server's error, or our refusal of a COPY; reported once the reply is complete.
    pub(crate) error: Option<Error>,
    /// The parameter types, if the request described a statement.
    pub(crate) params: Option<Vec<Type>>,
    /// The request described its result (`RowDescription` or `NoData` arrived).
    pub(crate) described: bool,
    /// `BindComplete` arrived: the statement was found and fits the server, and an error
    /// after it comes from running it.
    pub(crate) bound: bool,
}

impl Reply {
    pub(crate) fn new(columns: Arc<[Column]>, keep_rows: bool) -> Reply {
        Reply {
            columns,
            keep_rows,
            rows: Vec::new(),
            affected: 0,
            rolled_back: false,
            ends_transaction: false,
            error: None,
            params: None,
            described: false,
            bound: false,
        }
    }

    /// The result columns, as described so far.
    pub(crate) fn columns(&self) -> Arc<[Column]> {
        self.columns.clone()
    }

    /// Replaces the columns (and those of the rows read so far) with the same ones whose
    /// types were looked up.
    pub(crate) fn set_columns(&mut self, columns: Arc<[Column]>) {
        crate::type_info::patch_rows(&mut self.rows, &columns);
        self.columns = columns;
    }

    pub(crate) fn columns_ref(&self) -> &[Column] {
        &self.columns
    }

    /// The statement failed because it no longer fits the server ([`is_stale`]), not while
    /// it ran. A cached statement changed under it (0A000) or deallocated (26000) fails its
    /// `Bind`; the same errors after `BindComplete` are raised by what the statement runs: a
    /// SQL `EXECUTE` of one of the application's own prepared statements, which DDL made
    /// stale or `DEALLOCATE` removed. Preparing the cache's statement again cannot help then,
    /// and must not forget the cache or tell the caller to run the transaction again.
    pub(crate) fn stale(&self) -> bool {
        self.error.as_ref().is_some_and(|e| {
            is_stale(e) && (!self.bound || e.code() == Some(SqlState::INTERNAL_ERROR))
        })
    }

    /// Takes the statement's `CommandComplete`.
    pub(crate) fn complete(&mut self, tag: CommandTag) {
        self.rolled_back = tag.rolled_back;
        self.ends_transaction = tag.ends_transaction;
        self.affected = tag.affected;
    }

    /// Takes the next message of the reply. An error means the server broke the protocol.
    pub(crate) fn apply(&mut self, message: Message) -> Result<Step, Error> {
        match message {
            Message::ParseComplete => {}
            Message::BindComplete => self.bound = true,
            Message::ParameterDescription(body) => self.params = Some(parse_params(&body)?),
            Message::NoData => self.described = true,
            Message::RowDescription(body) => {
                self.columns = parse_columns(Some(&body))?;
                self.described = true;
            }
            Message::DataRow(body) => {
                if self.keep_rows {
                    self.rows.push(Row::new(self.columns.clone(), body)?);
                }
            }
            Message::CommandComplete(body) => {
                self.complete(
                    body.tag()
                        .map_or(CommandTag::default(), |t| CommandTag::parse(t.as_bytes())),
                );
                return Ok(Step::Done);
            }
            Message::EmptyQueryResponse => return Ok(Step::Done),
            Message::ErrorResponse(body) => {
                // Our refusal of a COPY comes first and says what to do; the server's
                // "COPY from stdin failed" that follows it only echoes it.
                let db = Error::db(DbError::parse(&mut body.fields())?);
                self.error.get_or_insert(db);
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

/// Where `Bind` takes each parameter's type and format from.
trait ParamTypes {
    fn len(&self) -> usize;
    /// The type to encode parameter `i` as, and whether it goes as text.
    fn get(&self, i: usize) -> (&Type, bool);
}

/// The statement's own parameter types, values in their preferred format.
struct Types<'a>(&'a [Type]);
impl ParamTypes for Types<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> (&Type, bool) {
        (&self.0[i], false)
    }
}

/// Types chosen from the values (see [`param_types`]).
struct Wires<'a>(&'a [Wire]);
impl ParamTypes for Wires<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> (&Type, bool) {
        match &self.0[i] {
            // A value that accepts `text` writes its UTF-8 bytes for it: exactly its text form.
            Wire::Text => (&Type::TEXT, true),
            Wire::Binary(t) => (t, false),
        }
    }
}

fn encode_bind(
    buf: &mut BytesMut,
    statement: &str,
    types: impl ParamTypes,
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
    let formats = params.iter().enumerate().map(|(i, p)| match types.get(i) {
        (_, true) => 0,
        (t, false) => match p.encode_format(t) {
            postgres_types::Format::Text => 0,
            postgres_types::Format::Binary => 1,
        },
    });
    let result = frontend::bind(
        "",
        statement,
        formats,
        params.iter().enumerate(),
        |(i, param), buf| {
            failed_at = i + 1;
            match param.to_sql_checked(types.get(i).0, buf)? {
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
        Err(frontend::BindError::Conversion(e)) => {
            let ty = types.get(failed_at.saturating_sub(1)).0;
            // A placeholder accepts no Rust type: say why the type is unknown. Its schema is a
            // sentence, not a name: show its name (oid_N) alone.
            let (shown, why) = if is_placeholder(ty) {
                let why = format!(
                    " (OID {}: a type not built in whose lookup has not run, as for a statement \
                     prepared in a pipeline before its end, or failed: see the log); run the \
                     statement outside a pipeline, which looks it up, or prepare it with \
                     Client::prepare",
                    ty.oid()
                );
                (ty.name().to_string(), why)
            } else {
                (ty.to_string(), String::new())
            };
            Err(Error::conversion(
                format!("cannot encode parameter ${failed_at} as {shown}{why}"),
                Some(e),
            ))
        }
        Err(frontend::BindError::Serialization(e)) => {
            Err(Error::usage(format!("cannot encode parameters: {e}")))
        }
    }
}

/// What a `CommandComplete`'s tag says. A tag that is not UTF-8 says nothing (the default).
#[derive(Default)]
pub(crate) struct CommandTag {
    /// The row count at its end (see [`rows_affected`]).
    pub(crate) affected: u64,
    /// `ROLLBACK`: what a `COMMIT` of a failed transaction answers.
    pub(crate) rolled_back: bool,
    /// `COMMIT`, `ROLLBACK` or `PREPARE TRANSACTION`: the work before it is settled either way.
    /// Also a statement that cannot run inside a transaction block (see
    /// [`COMMITS_AT_ONCE`]): the server commits it the moment it completes, so it and the work
    /// before it are settled too, and what follows runs in a new implicit transaction.
    pub(crate) ends_transaction: bool,
}

impl CommandTag {
    pub(crate) fn parse(tag: &[u8]) -> CommandTag {
        CommandTag {
            affected: count_at_end(tag),
            rolled_back: tag == b"ROLLBACK",
            ends_transaction: matches!(tag, b"COMMIT" | b"ROLLBACK" | b"PREPARE TRANSACTION")
                || COMMITS_AT_ONCE.contains(&tag),
        }
    }
}

/// The command tags of statements that always refuse to run inside a transaction block
/// (PostgreSQL's `PreventInTransactionBlock`). Outside `BEGIN`, the extended protocol runs
/// such a statement only as the first of an implicit transaction (later in a pipeline it fails
/// "cannot be executed within a pipeline") and commits it as soon as it completes, so an
/// abort-on-error block that fails afterwards does not undo it. Tags that such statements share
/// with transactional ones (`CREATE INDEX` for `CREATE INDEX CONCURRENTLY`, `REINDEX`,
/// `CLUSTER`, `ALTER DATABASE`, `ALTER TABLE ... DETACH PARTITION CONCURRENTLY`, the
/// subscription commands) cannot say which ran, and are not listed (see docs/pipelining.md).
const COMMITS_AT_ONCE: &[&[u8]] = &[
    b"VACUUM",
    b"CREATE DATABASE",
    b"DROP DATABASE",
    b"CREATE TABLESPACE",
    b"DROP TABLESPACE",
    b"ALTER SYSTEM",
    b"DISCARD ALL",
    b"COMMIT PREPARED",
    b"ROLLBACK PREPARED",
];

/// The row count at the end of a command tag (`INSERT 0 5`, `UPDATE 2`, `SELECT 3`, `COPY 9`),
/// or 0 for tags without one.
pub(crate) fn rows_affected(tag: std::io::Result<&str>) -> u64 {
    tag.map_or(0, |t| count_at_end(t.as_bytes()))
}

/// The word after the tag's last space (the whole tag without one) read as `u64::from_str`
/// reads it (decimal digits, an optional `+`, nothing else, no overflow), else 0. On bytes, in
/// one pass: `&str` parsing cost a `SELECT 1` about 200 instructions (issue 21).
fn count_at_end(tag: &[u8]) -> u64 {
    let last = match tag.iter().rposition(|&b| b == b' ') {
        Some(i) => &tag[i + 1..],
        None => tag,
    };
    let digits = last.strip_prefix(b"+").unwrap_or(last);
    if digits.is_empty() {
        return 0;
    }
    let mut n: u64 = 0;
    for &b in digits {
        let next = b
            .is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten();
        match next {
            Some(next) => n = next,
            None => return 0,
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_tag_says_its_row_count_and_whether_it_ends_a_transaction() {
        for (tag, affected) in [
            ("SELECT 1", 1),
            ("INSERT 0 5", 5),
            ("UPDATE 0", 0),
            ("COPY 18446744073709551615", u64::MAX),
            ("MERGE 3", 3),
            ("BEGIN", 0),
            ("", 0),
            ("SELECT ", 0),
            ("SELECT 18446744073709551616", 0),
            ("SELECT +7", 7),
            ("SELECT +", 0),
            ("SELECT 1x", 0),
            ("SELECT -1", 0),
            ("SELECT 0012", 12),
            ("7", 7),
        ] {
            assert_eq!(
                CommandTag::parse(tag.as_bytes()).affected,
                affected,
                "{tag:?}"
            );
            assert_eq!(rows_affected(Ok(tag)), tag_parse(tag), "{tag:?}");
        }
        let ends = |t: &str| {
            let c = CommandTag::parse(t.as_bytes());
            (c.ends_transaction, c.rolled_back)
        };
        assert_eq!(ends("COMMIT"), (true, false));
        assert_eq!(ends("ROLLBACK"), (true, true));
        assert_eq!(ends("PREPARE TRANSACTION"), (true, false));
        assert_eq!(ends("BEGIN"), (false, false));
        assert_eq!(ends("VACUUM"), (true, false));
        assert_eq!(ends("CREATE DATABASE"), (true, false));
        assert_eq!(ends("ROLLBACK PREPARED"), (true, false));
        assert_eq!(ends("CREATE INDEX"), (false, false));
        assert_eq!(rows_affected(Err(std::io::Error::other("not UTF-8"))), 0);
    }

    /// What `rows_affected` returned when it parsed the last word as a `&str`.
    fn tag_parse(tag: &str) -> u64 {
        tag.rsplit(' ').next().unwrap_or(tag).parse().unwrap_or(0)
    }

    /// The byte reading agrees with `str::parse` on every short tag over a small alphabet.
    #[test]
    fn the_row_count_is_read_as_str_parse_reads_it() {
        let alphabet = ['0', '1', '9', '+', '-', ' ', 'S', '\u{e9}'];
        let mut tags = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = tags
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            tags.extend(longer);
        }
        tags.extend(
            [
                "18446744073709551615",
                "18446744073709551616",
                "99999999999999999999",
            ]
            .map(String::from),
        );
        for tag in &tags {
            assert_eq!(rows_affected(Ok(tag)), tag_parse(tag), "{tag:?}");
        }
    }
}
