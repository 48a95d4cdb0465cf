//! Fast primary-key lookups through the memopt extension (issue 22): `memopt.get` and
//! `memopt.get_many` called with the protocol's `FunctionCall` message, with no parse, plan or
//! portal on the server.
//!
//! # Protocol
//!
//! A `FunctionCall` ('F') is answered by a `FunctionCallResponse` ('V', or an `ErrorResponse`)
//! and then its own `ReadyForQuery`, with no `Sync`: for the owed queue it is a request of its
//! own ([`Owed::FunctionCall`]). The server runs it in its own implicit transaction, or in the
//! open transaction block. After an error inside an extended-protocol sequence the server skips
//! every message up to the next `Sync`, an 'F' included, so a function call is only ever
//! written where no such sequence is open: alone, or in a pipeline after the open abort-mode
//! group was given its `Sync` (a pipelined call is a sync point of its own).
//!
//! `postgres-protocol` has neither an encoder for 'F' nor a parser for 'V': the message is
//! encoded here ([`encode_function_call`], the one place) and the connection rewrites a 'V'
//! into the one-column `DataRow` with the same value bytes before parsing it (it does so only
//! while a function call is owed), so every reply path reads it as an ordinary message.
//!
//! The value is the row as a composite datum in binary (`record_send`: a column count, then
//! each column's type OID and value), or for `get_many` an array of them (`array_send`). The
//! names come from [`MemoptTable`], resolved once. The reply has no names or column numbers,
//! so on memopt 1.1 the table is resolved with `memopt.columns`, which returns the columns and
//! a hash of them (their layout) read together under the table's lock, and every call passes
//! that layout to the three-argument `get`/`get_many`: the server refuses the call once the
//! columns differ (a rename, or a column dropped and one of the same type added, which keep
//! the sequence of types). On memopt 1.0 the two-argument forms are called and only the
//! reply's column count and type OIDs are checked, so such DDL goes unseen there. Either way a
//! value is never decoded as another type.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use postgres_protocol::message::backend::{DataRowBody, Message};

use crate::connect::unexpected;
use crate::connection::Owed;
use crate::statement::type_for;
use crate::type_info::is_placeholder;
use crate::{Client, Column, DbError, Error, Row, SqlState};

mod sealed {
    pub trait Sealed {}
}

/// A primary-key value [`Client::memopt_get`] takes: an integer (`i16`, `i32`, `i64`; sent as
/// `bigint`, for `smallint`, `integer` and `bigint` keys) or text (`&str`, `String`; for `text`
/// and `varchar` keys). The server refuses a key of the other kind with a clear error.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let items = client.memopt_table("items").await?; // items (id int PRIMARY KEY, ...)
/// let row = client.memopt_get(&items, &42i32).await?;
/// let tags = client.memopt_table("tags").await?; // tags (name text PRIMARY KEY, ...)
/// let tag = client.memopt_get(&tags, "rust").await?;
/// # let _ = (row, tag);
/// # Ok(()) }
/// ```
pub trait MemoptKey: sealed::Sealed + Sync {
    /// Text (true) or an integer: which overload a key calls, known from the type alone so
    /// that an empty batch calls the right one too.
    #[doc(hidden)]
    const TEXT: bool;
    #[doc(hidden)]
    fn is_text(&self) -> bool {
        Self::TEXT
    }
    #[doc(hidden)]
    fn put(&self, buf: &mut BytesMut);
}

macro_rules! int_key {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl MemoptKey for $t {
            const TEXT: bool = false;
            fn put(&self, buf: &mut BytesMut) {
                buf.put_i64(i64::from(*self));
            }
        }
    )*};
}
int_key!(i16, i32, i64);

impl sealed::Sealed for str {}
impl MemoptKey for str {
    const TEXT: bool = true;
    fn put(&self, buf: &mut BytesMut) {
        buf.put_slice(self.as_bytes());
    }
}

impl sealed::Sealed for String {}
impl MemoptKey for String {
    const TEXT: bool = true;
    fn put(&self, buf: &mut BytesMut) {
        buf.put_slice(self.as_bytes());
    }
}

impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {}
impl<T: MemoptKey + ?Sized> MemoptKey for &T {
    const TEXT: bool = T::TEXT;
    fn put(&self, buf: &mut BytesMut) {
        (**self).put(buf)
    }
}

/// The OIDs of the lookup functions, resolved once per connection (forgotten on `DISCARD ALL`,
/// with the statement cache, and by `Client::memopt_table` while they lack the 1.1 forms): `get(regclass, bigint)`, `get(regclass, text)`,
/// `get_many(regclass, bigint[])` and `get_many(regclass, text[])`, each with and (from memopt
/// 1.1) without a third argument, the caller's layout of the table's columns.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemoptFunctions {
    plain: [u32; 4],
    checked: Option<[u32; 4]>,
}

/// One function to call and, for a three-argument form, the layout to pass it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Callee {
    function: u32,
    layout: Option<i64>,
}

impl MemoptFunctions {
    /// The form to call on `table`: the checked one where the table was resolved with its
    /// layout. A table resolved with a layout is never called unchecked: where the functions
    /// no longer have the checked forms (the extension was created again at 1.0), its names
    /// may be stale with nothing to tell, so it must be resolved again.
    pub(crate) fn pick(
        &self,
        text: bool,
        many: bool,
        table: &MemoptTable,
    ) -> Result<Callee, Error> {
        let i = usize::from(text) + 2 * usize::from(many);
        match (self.checked, table.0.layout) {
            (Some(checked), Some(layout)) => Ok(Callee {
                function: checked[i],
                layout: Some(layout),
            }),
            (None, Some(_)) => Err(Error::usage(format!(
                "memopt table {} was resolved with memopt 1.1's column check, which memopt in \
                 this database no longer has: resolve it again with Client::memopt_table",
                table.0.name
            ))),
            (_, None) => Ok(Callee {
                function: self.plain[i],
                layout: None,
            }),
        }
    }
}

/// A memoptimized table resolved on one connection for [`Client::memopt_get`]: its OID, the
/// names and types of its columns and (memopt 1.1) their layout, which every call passes so
/// that the server refuses it once the columns changed ("resolve it again"). Cheap to clone.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let items = client.memopt_table("items").await?;
/// assert_eq!(items.columns()[0].name(), "id");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoptTable(Arc<TableInner>);

#[derive(Debug)]
struct TableInner {
    name: String,
    oid: u32,
    columns: Arc<[Column]>,
    /// `memopt.columns`' hash of `columns`, which the server compares with the table's own on
    /// every call; `None` where the extension is 1.0 (no check).
    layout: Option<i64>,
    client: u64,
    /// Some column's type is not built in: a lookup's rows get its definition from the type
    /// cache (`Client::resolve_row_types`). Known once, so a table of built-in types pays
    /// nothing per call.
    custom_types: bool,
}

impl MemoptTable {
    /// The table's name as given to [`Client::memopt_table`].
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let items = client.memopt_table("items").await?;
    /// assert_eq!(items.name(), "items");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The table's OID.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let items = client.memopt_table("items").await?;
    /// let oid: u32 = client.query_one("SELECT 'items'::regclass::oid", &[]).await?.get(0)?;
    /// assert_eq!(items.oid(), oid);
    /// # Ok(()) }
    /// ```
    pub fn oid(&self) -> u32 {
        self.0.oid
    }

    /// The columns every returned row has, in the table's order.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// // CREATE TABLE items (id int PRIMARY KEY, name text), enabled for memopt:
    /// let items = client.memopt_table("items").await?;
    /// let names: Vec<&str> = items.columns().iter().map(|c| c.name()).collect();
    /// assert_eq!(names, ["id", "name"]);
    /// # Ok(()) }
    /// ```
    pub fn columns(&self) -> &[Column] {
        &self.0.columns
    }

    /// Whether lookups through `self` and `other` may share one call: the server checks one
    /// layout per call and the reply is decoded with one set of names, so two handles of one
    /// table resolved on either side of a rename must not (the stale one would be answered
    /// under the fresh one's names, or the fresh one refused with the stale one).
    pub(crate) fn same_columns(&self, other: &MemoptTable) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.oid == other.0.oid
                && self.0.layout == other.0.layout
                // memopt 1.0 (no layout): the names, numbers and types as resolved.
                && self.0.columns.len() == other.0.columns.len()
                && self.0.columns.iter().zip(other.0.columns.iter()).all(|(a, b)| {
                    a.name() == b.name()
                        && a.column_id() == b.column_id()
                        && a.type_() == b.type_()
                        && a.type_modifier() == b.type_modifier()
                }))
    }
}

// Every name in these queries is schema-qualified (functions, types, catalogs, operators),
// as in the type cache's (type_info.rs): the function OIDs are kept for the connection's life,
// and a session whose `search_path` puts a schema of its own before `pg_catalog` (`SET
// search_path = mine, pg_catalog`) could otherwise plant a `to_regprocedure`, a `regclass`
// type or a `pg_class` there and have every later lookup on the connection, by any later
// borrower of a pool, call a function of its choosing with that borrower's rights
// (tests/it/attack_feature_seams.rs).

/// One function's OID, found by name and argument types, where it is a member of the
/// extension memopt (`member` in `RESOLVE_FUNCTIONS`); NULL otherwise.
macro_rules! memopt_member {
    ($signature:literal) => {
        concat!(
            "(SELECT m.oid FROM member m WHERE m.oid OPERATOR(pg_catalog.=) \
             pg_catalog.to_regprocedure('",
            $signature,
            "')::pg_catalog.oid)"
        )
    };
}

// Only the extension's own functions: a name and argument types are anyone's to take where
// memopt is not installed (a database owner may create a schema `memopt`, and a function's
// return type is not part of what `to_regprocedure` matches), and a `memopt.get` of theirs
// was called with the caller's rights and its rows taken for the table's
// (tests/it/attack_extension_sql.rs).
const RESOLVE_FUNCTIONS: &str = concat!(
    "WITH member(oid) AS (SELECT d.objid FROM pg_catalog.pg_depend d \
       JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
      WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
        AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass \
        AND d.deptype OPERATOR(pg_catalog.=) 'e' \
        AND e.extname OPERATOR(pg_catalog.=) 'memopt') SELECT ",
    memopt_member!("memopt.get(pg_catalog.regclass,pg_catalog.int8)"),
    ", ",
    memopt_member!("memopt.get(pg_catalog.regclass,pg_catalog.text)"),
    ", ",
    memopt_member!("memopt.get_many(pg_catalog.regclass,pg_catalog.int8[])"),
    ", ",
    memopt_member!("memopt.get_many(pg_catalog.regclass,pg_catalog.text[])"),
    ", ",
    memopt_member!("memopt.get(pg_catalog.regclass,pg_catalog.int8,pg_catalog.int8)"),
    ", ",
    memopt_member!("memopt.get(pg_catalog.regclass,pg_catalog.text,pg_catalog.int8)"),
    ", ",
    memopt_member!("memopt.get_many(pg_catalog.regclass,pg_catalog.int8[],pg_catalog.int8)"),
    ", ",
    memopt_member!("memopt.get_many(pg_catalog.regclass,pg_catalog.text[],pg_catalog.int8)"),
);

/// memopt 1.1: the columns and their layout, read together under the table's lock.
const RESOLVE_COLUMNS: &str = "SELECT r.oid::pg_catalog.oid, c.name, c.type, c.typmod, c.attnum, \
     c.layout FROM (SELECT $1::pg_catalog.text::pg_catalog.regclass AS oid) r, \
     memopt.columns(r.oid) c ORDER BY c.attnum";

/// memopt 1.0: the columns from the catalog, with no layout to check calls against.
const RESOLVE_TABLE: &str = "SELECT c.oid, a.attname::pg_catalog.text, a.atttypid, a.atttypmod, \
     a.attnum, NULL::pg_catalog.int8 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a \
     ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
     WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass \
     AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped ORDER BY a.attnum";

impl Client {
    /// Resolves `table` (a name as SQL takes it, e.g. `"public.items"`) for fast lookups on
    /// this connection: one query for its columns (`memopt.columns`, which also gives their
    /// layout, on memopt 1.1; the catalog on 1.0) and, the first time on a connection, one
    /// for the memopt functions. Fails if memopt is not installed in the database, or (1.1)
    /// if `table` is not a table or the user may not read it. A table dropped and created again
    /// under the name while the resolve waited for its lock is the one resolved, as `SELECT`
    /// would find it.
    ///
    /// After DDL on the table, calls through a handle resolved before are refused with
    /// SQLSTATE 0A000 ("resolve it again"): resolve it again and repeat the call. (On memopt
    /// 1.0 they are not checked; a handle resolved after `ALTER EXTENSION memopt UPDATE` is,
    /// on any connection.)
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let items = client.memopt_table("items").await?;
    /// if let Some(row) = client.memopt_get(&items, &42i64).await? {
    ///     let name: &str = row.get("name")?;
    ///     println!("{name}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn memopt_table(&mut self, table: &str) -> Result<MemoptTable, Error> {
        // Functions resolved on memopt 1.0 are looked up again: the extension may have been
        // updated since (their OIDs stay, so no call fails to tell), and a handle resolved
        // on 1.1 without its layout would never be checked. One query per resolve on 1.0.
        if self.memopt.is_some_and(|f| f.checked.is_none()) {
            self.memopt = None;
        }
        let fns = self.memopt_functions().await?;
        let sql = if fns.checked.is_some() {
            RESOLVE_COLUMNS
        } else {
            RESOLVE_TABLE
        };
        let rows = match self.query(sql, &[&table]).await {
            // The name is looked up before memopt.columns locks the OID it found: a table
            // dropped (and maybe created again under the name) while the lock was awaited
            // leaves no relation. Look the name up again, as SQL does after a lock wait;
            // once, where no transaction block would be left failed.
            Err(e)
                if e.code() == Some(SqlState::UNDEFINED_TABLE)
                    && self.transaction_status() == crate::TransactionStatus::Idle =>
            {
                self.query(sql, &[&table]).await?
            }
            rows => rows?,
        };
        let mut oid = 0;
        let mut layout = None;
        let mut columns = Vec::with_capacity(rows.len());
        for row in &rows {
            oid = row.get::<_, u32>(0)?;
            layout = row.get::<_, Option<i64>>(5)?;
            columns.push(Column::new(
                row.get::<_, String>(1)?,
                type_for(row.get::<_, u32>(2)?),
                Some(oid),
                Some(row.get::<_, i16>(4)?),
                row.get::<_, i32>(3)?,
            ));
        }
        if rows.is_empty() {
            return Err(Error::usage(format!(
                "table {table} has no columns: memopt lookups return whole rows of a table"
            )));
        }
        let custom_types = columns.iter().any(|c| is_placeholder(c.type_()));
        Ok(MemoptTable(Arc::new(TableInner {
            name: table.to_string(),
            oid,
            columns: columns.into(),
            layout,
            client: self.id,
            custom_types,
        })))
    }

    /// Looks one row up by primary key through memopt's fast path: one `FunctionCall`, no
    /// parse, plan or portal. `None` when no row has the key. The row is the one
    /// `SELECT * FROM table WHERE pk = key` returns in the same transaction: served from
    /// memopt's store only where its scan would serve it, else read from the primary-key index.
    ///
    /// The server checks SELECT privilege and refuses tables with row-level security, tables
    /// not enabled with `memopt.enable_read`, composite keys and keys of the wrong kind.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let users = client.memopt_table("users").await?;
    /// let row = client.memopt_get(&users, &7i64).await?.expect("user 7 exists");
    /// let email: &str = row.get("email")?;
    /// let by_name = client.memopt_table("tags").await?;
    /// let tag = client.memopt_get(&by_name, "rust").await?;
    /// # Ok(()) }
    /// ```
    pub async fn memopt_get<K: MemoptKey + ?Sized>(
        &mut self,
        table: &MemoptTable,
        key: &K,
    ) -> Result<Option<Row>, Error> {
        let mut rows = self
            .memopt_call(table, false, key.is_text(), |buf| encode_key(buf, key))
            .await?;
        Ok(rows.pop())
    }

    /// Looks several rows up in one `FunctionCall` (`memopt.get_many`): the rows found, in the
    /// order of `keys` (a key given twice gives its row twice; a key without a row gives none).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let users = client.memopt_table("users").await?;
    /// let rows = client.memopt_get_many(&users, &[1i64, 2, 3]).await?;
    /// for row in &rows {
    ///     let id: i64 = row.get("id")?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn memopt_get_many<K: MemoptKey>(
        &mut self,
        table: &MemoptTable,
        keys: &[K],
    ) -> Result<Vec<Row>, Error> {
        self.memopt_call(table, true, K::TEXT, |buf| encode_keys(buf, keys, K::TEXT))
            .await
    }

    /// The function OIDs, resolving them first if this connection has not (or ran
    /// `DISCARD ALL` since).
    pub(crate) async fn memopt_functions(&mut self) -> Result<MemoptFunctions, Error> {
        if std::mem::take(&mut self.conn.functions_discarded) {
            self.memopt = None;
        }
        if let Some(f) = self.memopt {
            return Ok(f);
        }
        let row = self.query_one(RESOLVE_FUNCTIONS, &[]).await?;
        let mut plain = [0u32; 4];
        for (i, oid) in plain.iter_mut().enumerate() {
            *oid = row.get::<_, Option<u32>>(i)?.ok_or_else(|| {
                Error::usage(
                    "memopt.get is not installed in this database: CREATE EXTENSION memopt \
                     (version with fast lookups), with memopt in shared_preload_libraries",
                )
            })?;
        }
        let mut checked = [None; 4];
        for (i, oid) in checked.iter_mut().enumerate() {
            *oid = row.get::<_, Option<u32>>(4 + i)?;
        }
        let f = MemoptFunctions {
            plain,
            // All four or none: an extension between versions is not one we call checked.
            checked: checked
                .iter()
                .all(Option::is_some)
                .then(|| checked.map(Option::unwrap_or_default)),
        };
        self.memopt = Some(f);
        Ok(f)
    }

    async fn memopt_call(
        &mut self,
        table: &MemoptTable,
        many: bool,
        text: bool,
        key: impl Fn(&mut BytesMut) -> Result<(), Error>,
    ) -> Result<Vec<Row>, Error> {
        check_table(table, self.id)?;
        let mut retried = false;
        loop {
            let fns = self.memopt_functions().await?;
            match self
                .function_call(fns.pick(text, many, table)?, table, &key)
                .await?
            {
                Ok(value) => {
                    let mut rows = decode(table, many, value.as_deref())
                        .map_err(|e| self.conn.poison(e))??;
                    self.resolve_row_types(table, &mut rows).await?;
                    return Ok(rows);
                }
                // The extension was dropped and created again since the OIDs were resolved:
                // resolve once more, where no transaction block would be left failed.
                Err(e)
                    if !retried
                        && e.code() == Some(SqlState::UNDEFINED_FUNCTION)
                        && self.transaction_status() == crate::TransactionStatus::Idle =>
                {
                    retried = true;
                    self.memopt = None;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives `rows` of `table` the definitions of their columns' types that are not built in
    /// (an enum, a composite, a domain), from the type cache, looked up first where it lacks
    /// them (one round trip, the first time and after each clearing). A handle keeps only
    /// their OIDs: the cache is what an `ALTER TYPE` on this connection clears, so a
    /// definition held in the handle could read a composite by its old field order. A failed
    /// lookup leaves the values readable with `Row::get_raw`, as after a query.
    async fn resolve_row_types(
        &mut self,
        table: &MemoptTable,
        rows: &mut [Row],
    ) -> Result<(), Error> {
        let columns = &table.0.columns;
        if rows.is_empty() || !table.0.custom_types {
            return Ok(());
        }
        self.forget_discarded();
        let types = columns.iter().map(Column::type_);
        if !self.types.missing(types.clone()).is_empty()
            && let Err(e) = self.look_up_types(types).await
        {
            if self.conn.is_broken() {
                return Err(e);
            }
            tracing::warn!(
                target: "slipstream_pg::types",
                "looking up the types of memopt table {}'s columns failed ({e}); the values read \
                 only with Row::get_raw",
                table.0.name
            );
            return Ok(());
        }
        if let Some(resolved) = self.types.resolve_columns(columns) {
            for row in rows {
                row.set_columns(resolved.clone());
            }
        }
        Ok(())
    }

    /// Sends one `FunctionCall` and reads its reply. The outer error is the connection's; the
    /// inner one the server's answer.
    async fn function_call(
        &mut self,
        function: Callee,
        table: &MemoptTable,
        key: &impl Fn(&mut BytesMut) -> Result<(), Error>,
    ) -> Result<Result<Option<Vec<u8>>, Error>, Error> {
        self.conn.start_request().await?;
        let oid = table.oid();
        self.conn
            .encode(|buf| encode_function_call(buf, function, oid, key))?;
        self.conn.finish_request(Owed::FunctionCall).await?;
        let mut value = None;
        let mut error = None;
        loop {
            match self.conn.recv().await? {
                Message::DataRow(body) => value = Some(function_value(&body)?),
                Message::ErrorResponse(body) => {
                    error = Some(Error::db(DbError::parse(&mut body.fields())?));
                }
                Message::ReadyForQuery(_) => break,
                m => {
                    return Err(self
                        .conn
                        .poison(unexpected(&m, "in reply to a FunctionCall")));
                }
            }
        }
        Ok(match error {
            Some(e) => Err(self.conn.explain_failed(e)),
            None => Ok(value.flatten()),
        })
    }
}

pub(crate) fn check_table(table: &MemoptTable, client: u64) -> Result<(), Error> {
    if table.0.client == client {
        Ok(())
    } else {
        Err(Error::usage(
            "this memopt table was resolved on another connection; resolve it on this one \
             with Client::memopt_table",
        ))
    }
}

/// Appends a `FunctionCall` of `function(regclass, key)`, or `function(regclass, key, layout)`
/// for a checked form, with binary arguments and a binary result. `key` appends the key
/// argument's bytes. The one encoder of the message.
pub(crate) fn encode_function_call(
    buf: &mut BytesMut,
    function: Callee,
    table: u32,
    key: impl FnOnce(&mut BytesMut) -> Result<(), Error>,
) -> Result<(), Error> {
    let start = buf.len();
    buf.put_u8(b'F');
    buf.put_i32(0); // the length, filled in below
    buf.put_u32(function.function);
    buf.put_i16(1); // one format code for all arguments:
    buf.put_i16(1); // binary
    buf.put_i16(if function.layout.is_some() { 3 } else { 2 }); // arguments
    buf.put_i32(4);
    buf.put_u32(table);
    let len_at = buf.len();
    buf.put_i32(0);
    key(buf)?;
    let key_len = buf.len() - len_at - 4;
    if let Some(layout) = function.layout {
        buf.put_i32(8);
        buf.put_i64(layout);
    }
    buf.put_i16(1); // binary result
    let len = buf.len() - start - 1;
    let (Ok(len), Ok(key_len)) = (i32::try_from(len), i32::try_from(key_len)) else {
        return Err(Error::usage(
            "the keys do not fit in one protocol message (1 GiB): look them up in smaller batches",
        ));
    };
    buf[start + 1..start + 5].copy_from_slice(&len.to_be_bytes());
    buf[len_at..len_at + 4].copy_from_slice(&key_len.to_be_bytes());
    Ok(())
}

fn encode_key<K: MemoptKey + ?Sized>(buf: &mut BytesMut, key: &K) -> Result<(), Error> {
    key.put(buf);
    Ok(())
}

/// A one-dimensional `bigint[]` or `text[]` in `array_send`'s format.
pub(crate) fn encode_keys<K: MemoptKey>(
    buf: &mut BytesMut,
    keys: &[K],
    text: bool,
) -> Result<(), Error> {
    let n = i32::try_from(keys.len()).map_err(|_| Error::usage("too many keys for one lookup"))?;
    encode_keys_header(buf, n, text);
    for k in keys {
        encode_key_element(buf, k)?;
    }
    Ok(())
}

/// The header of [`encode_keys`]' array, for `n` keys whose elements follow
/// ([`encode_key_element`]).
pub(crate) fn encode_keys_header(buf: &mut BytesMut, n: i32, text: bool) {
    buf.put_i32(i32::from(n > 0)); // dimensions
    buf.put_i32(0); // no NULLs
    buf.put_u32(if text { 25 } else { 20 }); // text, int8
    if n > 0 {
        buf.put_i32(n);
        buf.put_i32(1); // lower bound
    }
}

/// One key of [`encode_keys`]' array: its length, then its bytes.
pub(crate) fn encode_key_element<K: MemoptKey + ?Sized>(
    buf: &mut BytesMut,
    key: &K,
) -> Result<(), Error> {
    let at = buf.len();
    buf.put_i32(0);
    key.put(buf);
    let len = i32::try_from(buf.len() - at - 4).map_err(|_| {
        buf.truncate(at);
        Error::usage("a key is longer than 1 GiB")
    })?;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// The value of a `FunctionCallResponse`, which the connection delivers as a one-column
/// `DataRow`.
pub(crate) fn function_value(body: &DataRowBody) -> Result<Option<Vec<u8>>, Error> {
    let ranges = crate::row::ranges(body)?;
    match ranges.as_slice() {
        [value] => Ok(value.clone().map(|r| body.buffer()[r].to_vec())),
        _ => Err(Error::protocol(
            "a FunctionCallResponse carried other than one value: this is a bug in slipstream-pg",
        )),
    }
}

/// The rows of a reply. Outer error: the server sent something malformed (the connection is
/// closed); inner: the table changed since it was resolved.
pub(crate) fn decode(
    table: &MemoptTable,
    many: bool,
    value: Option<&[u8]>,
) -> Result<Result<Vec<Row>, Error>, Error> {
    let Some(v) = value else {
        return Ok(Ok(Vec::new()));
    };
    if !many {
        return Ok(record_row(table, v)?.map(|r| vec![r]));
    }
    let mut rows = Vec::new();
    // No row for a key: a NULL element, skipped.
    for element in array_elements(v)?.into_iter().flatten() {
        match record_row(table, element)? {
            Ok(row) => rows.push(row),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(rows))
}

/// The reply to a coalesced run of `keys` single-key lookups sent as one `get_many`: element
/// `i` is the row of key `i`, `None` where it has none. The server returns exactly one element
/// per key (a NULL for a miss), so any other count is malformed: a row must never be given to
/// another key's lookup. Errors as [`decode`].
pub(crate) fn decode_each(
    table: &MemoptTable,
    keys: usize,
    value: Option<&[u8]>,
) -> Result<Result<Vec<Option<Row>>, Error>, Error> {
    let Some(v) = value else {
        return Err(malformed("no array for a run of lookups"));
    };
    let elements = array_elements(v)?;
    if elements.len() != keys {
        return Err(malformed(&format!(
            "{} rows or NULLs for {keys} keys",
            elements.len()
        )));
    }
    let mut rows = Vec::with_capacity(keys);
    for element in elements {
        match element.map(|e| record_row(table, e)).transpose()? {
            None => rows.push(None),
            Some(Ok(row)) => rows.push(Some(row)),
            Some(Err(e)) => return Ok(Err(e)),
        }
    }
    Ok(Ok(rows))
}

/// The elements of a one-dimensional array (`array_send`), `None` for a NULL.
fn array_elements(mut v: &[u8]) -> Result<Vec<Option<&[u8]>>, Error> {
    let ndim = take_i32(&mut v)?;
    let _flags = take_i32(&mut v)?;
    let _element_type = take_i32(&mut v)?;
    if ndim == 0 {
        return Ok(Vec::new());
    }
    if ndim != 1 {
        return Err(malformed("an array of rows with other than one dimension"));
    }
    let n = take_i32(&mut v)?;
    let _lower = take_i32(&mut v)?;
    let mut elements = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(v.len() / 4));
    for _ in 0..n.max(0) {
        let len = take_i32(&mut v)?;
        elements.push(match usize::try_from(len) {
            Ok(len) => Some(take(&mut v, len)?),
            Err(_) => None,
        });
    }
    Ok(elements)
}

/// One composite value (`record_send`) as a [`Row`] with the table's columns.
fn record_row(table: &MemoptTable, mut v: &[u8]) -> Result<Result<Row, Error>, Error> {
    let columns = &table.0.columns;
    let n = take_i32(&mut v)?;
    if n < 0 {
        return Err(malformed("a row with a negative column count"));
    }
    let mut data = BytesMut::with_capacity(v.len() + 7);
    data.put_u8(b'D');
    data.put_i32(0);
    data.put_i16(i16::try_from(n).map_err(|_| malformed("a row of too many columns"))?);
    let mut changed = n as usize != columns.len();
    for i in 0..n as usize {
        let oid = take_i32(&mut v)? as u32;
        changed |= columns.get(i).is_none_or(|c| c.type_().oid() != oid);
        let len = take_i32(&mut v)?;
        data.put_i32(len);
        if len > 0 {
            data.put_slice(take(&mut v, len as usize)?);
        }
    }
    if changed {
        return Ok(Err(Error::usage(format!(
            "the columns of table {} changed since Client::memopt_table resolved it (DDL): \
             resolve it again",
            table.name()
        ))));
    }
    let len = i32::try_from(data.len() - 1).map_err(|_| malformed("a row over 2 GiB"))?;
    data[1..5].copy_from_slice(&len.to_be_bytes());
    match Message::parse(&mut data) {
        Ok(Some(Message::DataRow(body))) => Ok(Row::new(columns.clone(), body)
            .map_err(|_| malformed("a row whose values do not match its column count"))),
        _ => Err(malformed("a row that does not parse")),
    }
}

fn take_i32(v: &mut &[u8]) -> Result<i32, Error> {
    let b = take(v, 4)?;
    Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn take<'a>(v: &mut &'a [u8], n: usize) -> Result<&'a [u8], Error> {
    if v.len() < n {
        return Err(malformed("a value shorter than its length says"));
    }
    let (head, rest) = v.split_at(n);
    *v = rest;
    Ok(head)
}

fn malformed(what: &str) -> Error {
    Error::protocol(format!(
        "server sent a malformed memopt lookup result ({what}; protocol violation); the \
         connection is closed"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use postgres_types::Type;

    fn table() -> MemoptTable {
        MemoptTable(Arc::new(TableInner {
            name: "t".into(),
            oid: 9,
            columns: vec![
                Column::new("id".into(), Type::INT8, Some(9), Some(1), -1),
                Column::new("v".into(), Type::TEXT, Some(9), Some(2), -1),
            ]
            .into(),
            layout: None,
            client: 1,
            custom_types: false,
        }))
    }

    /// `record_send` of (id bigint, v text) with the given type OIDs and values.
    fn record(oids: &[u32], values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i32(oids.len() as i32);
        for (oid, v) in oids.iter().zip(values) {
            b.put_u32(*oid);
            match v {
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v);
                }
                None => b.put_i32(-1),
            }
        }
        b.to_vec()
    }

    #[test]
    fn a_function_call_is_encoded_as_the_protocol_describes() {
        // The two-argument form, and the checked one with the layout as a third, int8 argument.
        for (layout, len) in [(None, 36i32), (Some(-3i64), 48)] {
            let mut buf = BytesMut::new();
            let callee = Callee {
                function: 7,
                layout,
            };
            encode_function_call(&mut buf, callee, 9, |b| encode_key(b, &5i64)).unwrap();
            let mut want = vec![b'F'];
            want.extend(len.to_be_bytes()); // itself, OID, 3 counts/codes, the arguments, result code
            want.extend(7u32.to_be_bytes());
            want.extend([0, 1, 0, 1, 0, 2 + u8::from(layout.is_some())]);
            want.extend(4i32.to_be_bytes());
            want.extend(9u32.to_be_bytes());
            want.extend(8i32.to_be_bytes());
            want.extend(5i64.to_be_bytes());
            if let Some(layout) = layout {
                want.extend(8i32.to_be_bytes());
                want.extend(layout.to_be_bytes());
            }
            want.extend([0, 1]);
            assert_eq!(want.len() - 1, len as usize);
            assert_eq!(&buf[..], &want[..]);
        }
    }

    #[test]
    fn a_record_becomes_a_row_with_the_tables_columns() {
        let v = record(&[20, 25], &[Some(&42i64.to_be_bytes()), None]);
        let rows = decode(&table(), false, Some(&v)).unwrap().unwrap();
        assert_eq!(rows[0].get::<_, i64>("id").unwrap(), 42);
        assert_eq!(rows[0].get::<_, Option<&str>>("v").unwrap(), None);
        assert!(decode(&table(), false, None).unwrap().unwrap().is_empty());
    }

    #[test]
    fn a_changed_table_is_reported_and_a_malformed_value_closes_the_connection() {
        // Another type in column 2, or a column more: the table changed.
        let v = record(&[20, 23], &[Some(&1i64.to_be_bytes()), Some(&[0, 0, 0, 1])]);
        let e = decode(&table(), false, Some(&v)).unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage);
        let v = record(&[20, 25, 25], &[Some(&1i64.to_be_bytes()), None, None]);
        assert!(decode(&table(), false, Some(&v)).unwrap().is_err());
        // A value longer than the message, a negative count, a truncated array.
        let mut v = record(&[20, 25], &[Some(&1i64.to_be_bytes()), Some(b"x")]);
        v.truncate(v.len() - 1);
        assert_eq!(
            decode(&table(), false, Some(&v)).unwrap_err().kind(),
            ErrorKind::Protocol
        );
        let v = (-1i32).to_be_bytes();
        assert_eq!(
            decode(&table(), false, Some(&v)).unwrap_err().kind(),
            ErrorKind::Protocol
        );
        let v = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 2];
        assert_eq!(
            decode(&table(), true, Some(&v)).unwrap_err().kind(),
            ErrorKind::Protocol
        );
    }

    #[test]
    fn an_array_of_records_keeps_the_rows_in_order_and_skips_nulls() {
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i32(1);
        b.put_u32(16400);
        b.put_i32(3);
        b.put_i32(1);
        for id in [Some(3i64), None, Some(1)] {
            match id {
                Some(id) => {
                    let r = record(&[20, 25], &[Some(&id.to_be_bytes()), Some(b"x")]);
                    b.put_i32(r.len() as i32);
                    b.put_slice(&r);
                }
                None => b.put_i32(-1),
            }
        }
        let rows = decode(&table(), true, Some(&b)).unwrap().unwrap();
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0).unwrap()).collect();
        assert_eq!(ids, [3, 1]);
        // A coalesced run keeps every key's place, and its element count must be the keys'.
        let each = decode_each(&table(), 3, Some(&b)).unwrap().unwrap();
        let ids: Vec<Option<i64>> = each
            .iter()
            .map(|r| r.as_ref().map(|r| r.get(0).unwrap()))
            .collect();
        assert_eq!(ids, [Some(3), None, Some(1)]);
        for keys in [2, 4] {
            let e = decode_each(&table(), keys, Some(&b)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        }
        assert!(decode_each(&table(), 1, None).is_err());
    }
}
