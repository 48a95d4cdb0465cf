//! Prepared statements and their result columns.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ParameterDescriptionBody, RowDescriptionBody};
use postgres_types::Type;

use crate::Error;

/// A server-side prepared statement: parsed and planned once, executed many times with
/// different parameters.
///
/// Cheap to clone. When the last clone is dropped, the server-side statement is closed with the
/// connection's next request (no extra round trip).
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let stmt = client.prepare("SELECT name FROM users WHERE id = $1").await?;
/// for id in [1i32, 2, 3] {
///     if let Some(row) = client.query_opt(&stmt, &[&id]).await? {
///         println!("{}", row.get::<_, &str>("name")?);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Statement(Arc<Inner>);

struct Inner {
    name: String,
    sql: String,
    params: Vec<Type>,
    columns: Arc<[Column]>,
    client_id: u64,
    closes: Weak<Mutex<Vec<String>>>,
    /// `Bind` + `Execute` of all rows, for a statement run without values: the same bytes every
    /// time, so they are encoded once (`SELECT 1`, `SELECT now()`, ...).
    bind_without_values: OnceLock<Box<[u8]>>,
    /// The connection's type-cache generation ([`TypeCache::generation`]) at which the types
    /// in `params` and `columns` that were looked up in the catalogs were last known to match
    /// the cache (`UNCHECKED`: never). The statement keeps the definitions it was prepared
    /// with, and after an `ALTER TYPE` (the cache is cleared, its generation moves on) they
    /// may be stale: a composite's fields in their old order would put each value in another
    /// field without an error. A statement the caller holds is checked again before it runs
    /// (`Client::check_statement_types`).
    ///
    /// Relaxed: a hint read and written only by the client that owns the statement (checked
    /// by `check_owner`) under `&mut Client`; whatever hands that client to another thread
    /// orders these accesses too.
    ///
    /// [`TypeCache::generation`]: crate::type_info::TypeCache::generation
    types_checked: AtomicU64,
    /// Some of `params` and `columns` are placeholders (types not looked up when the statement
    /// was made: a `Pipeline::prepare` taken with `process` before the block's `end`).
    placeholders: bool,
    /// `params` and `columns` with every placeholder replaced, once the type cache could
    /// replace them all (`Statement::resolve_shared`). A handle the caller holds cannot be
    /// changed in place, and without this its values could never be encoded nor its rows
    /// read (a placeholder accepts no Rust type).
    resolved: OnceLock<(Vec<Type>, Arc<[Column]>)>,
}

/// [`Inner::types_checked`] of a statement whose looked-up types were never checked.
const UNCHECKED: u64 = u64::MAX;

impl Statement {
    pub(crate) fn new(
        name: String,
        sql: String,
        params: Vec<Type>,
        columns: Arc<[Column]>,
        client_id: u64,
        closes: Weak<Mutex<Vec<String>>>,
    ) -> Statement {
        let placeholders = any_placeholder(&params, &columns);
        Statement(Arc::new(Inner {
            name,
            sql,
            params,
            columns,
            placeholders,
            resolved: OnceLock::new(),
            client_id,
            closes,
            bind_without_values: OnceLock::new(),
            types_checked: AtomicU64::new(UNCHECKED),
        }))
    }

    /// The types of its parameters and columns that were looked up in the catalogs: neither
    /// built in (those never change) nor placeholders (never looked up; read raw only).
    pub(crate) fn looked_up_types(&self) -> impl Iterator<Item = &Type> {
        self.types()
            .filter(|t| Type::from_oid(t.oid()).is_none() && !crate::type_info::is_placeholder(t))
    }

    /// Its parameter types, then its columns' types.
    fn types(&self) -> impl Iterator<Item = &Type> {
        self.params()
            .iter()
            .chain(self.columns().iter().map(Column::type_))
    }

    /// Whether some of its types were never looked up (see [`Inner::placeholders`]).
    pub(crate) fn has_placeholders(&self) -> bool {
        self.0.placeholders && self.0.resolved.get().is_none()
    }

    /// The placeholders among its types.
    pub(crate) fn placeholders(&self) -> Vec<Type> {
        self.types()
            .filter(|t| crate::type_info::is_placeholder(t))
            .cloned()
            .collect()
    }

    /// Replaces its placeholders for every handle, if the cache holds all of them (see
    /// [`Inner::resolved`]); true if none is left.
    pub(crate) fn resolve_shared(&self, cache: &crate::type_info::TypeCache) -> bool {
        if !self.has_placeholders() {
            return true;
        }
        let mut params = self.0.params.clone();
        cache.resolve_params(&mut params);
        let columns = cache
            .resolve_columns(&self.0.columns)
            .unwrap_or_else(|| self.0.columns.clone());
        if any_placeholder(&params, &columns) {
            return false;
        }
        // Its other looked-up types are as old as before: `types_checked` is left alone.
        let _ = self.0.resolved.set((params, columns));
        true
    }

    /// Whether its looked-up types are known to match the type cache of `generation`.
    pub(crate) fn types_checked_at(&self, generation: u64) -> bool {
        self.0.types_checked.load(Ordering::Relaxed) == generation
    }

    /// Records that its looked-up types match the type cache of `generation`.
    pub(crate) fn mark_types_checked(&self, generation: u64) {
        self.0.types_checked.store(generation, Ordering::Relaxed);
    }

    /// Replaces the placeholder types the cache holds, if this is the only handle (a statement
    /// not yet given to the caller).
    pub(crate) fn resolve_types(&mut self, cache: &crate::type_info::TypeCache) {
        if let Some(inner) = Arc::get_mut(&mut self.0) {
            cache.resolve_params(&mut inner.params);
            if let Some(columns) = cache.resolve_columns(&inner.columns) {
                inner.columns = columns;
            }
            inner.placeholders = any_placeholder(&inner.params, &inner.columns);
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }

    /// The SQL text it was prepared from.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT $1::int4 + 1").await?;
    /// assert_eq!(stmt.sql(), "SELECT $1::int4 + 1");
    /// # Ok(()) }
    /// ```
    pub fn sql(&self) -> &str {
        &self.0.sql
    }

    /// The bytes `encode` makes (it is called once, on first use); `None` if it fails.
    pub(crate) fn bind_without_values(
        &self,
        encode: impl FnOnce() -> Option<Box<[u8]>>,
    ) -> Option<&[u8]> {
        if let Some(bytes) = self.0.bind_without_values.get() {
            return Some(bytes);
        }
        let bytes = encode()?;
        Some(self.0.bind_without_values.get_or_init(|| bytes))
    }

    pub(crate) fn client_id(&self) -> u64 {
        self.0.client_id
    }

    pub(crate) fn columns_arc(&self) -> &Arc<[Column]> {
        self.0.resolved.get().map_or(&self.0.columns, |(_, c)| c)
    }

    /// The parameter types the server inferred (or that were given).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::types::Type;
    /// let stmt = client.prepare("SELECT * FROM pg_class WHERE relname = $1 LIMIT $2").await?;
    /// assert_eq!(stmt.params(), &[Type::NAME, Type::INT8]);
    /// # Ok(()) }
    /// ```
    pub fn params(&self) -> &[Type] {
        self.0.resolved.get().map_or(&self.0.params, |(p, _)| p)
    }

    /// The result columns (empty for statements that return no rows).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT oid, relname FROM pg_class").await?;
    /// let names: Vec<&str> = stmt.columns().iter().map(|c| c.name()).collect();
    /// assert_eq!(names, ["oid", "relname"]);
    /// assert!(client.prepare("SET work_mem = '64MB'").await?.columns().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn columns(&self) -> &[Column] {
        self.columns_arc()
    }
}

/// Whether some of these parameter or column types were never looked up.
fn any_placeholder(params: &[Type], columns: &[Column]) -> bool {
    params
        .iter()
        .chain(columns.iter().map(Column::type_))
        .any(crate::type_info::is_placeholder)
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The unnamed statement needs no Close: the next Parse replaces it.
        if self.name.is_empty() {
            return;
        }
        if let Some(closes) = self.closes.upgrade() {
            closes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(std::mem::take(&mut self.name));
        }
    }
}

impl fmt::Debug for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Statement")
            .field("name", &self.0.name)
            .field("sql", &self.0.sql)
            .field("params", &self.params())
            .field("columns", &self.columns())
            .finish()
    }
}

/// A result column: its name and type.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let stmt = client.prepare("SELECT 1::int4 AS one").await?;
/// assert_eq!(stmt.columns()[0].name(), "one");
/// assert_eq!(stmt.columns()[0].type_(), &slipstream_pg::types::Type::INT4);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Column {
    name: String,
    type_: Type,
    table_oid: Option<u32>,
    column_id: Option<i16>,
    type_modifier: i32,
}

impl Column {
    pub(crate) fn new(
        name: String,
        type_: Type,
        table_oid: Option<u32>,
        column_id: Option<i16>,
        type_modifier: i32,
    ) -> Column {
        Column {
            name,
            type_,
            table_oid,
            column_id,
            type_modifier,
        }
    }

    /// The column's name (its alias, if the query gave one).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT relname AS table_name FROM pg_class").await?;
    /// assert_eq!(stmt.columns()[0].name(), "table_name");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The column's type.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT now()").await?;
    /// assert_eq!(stmt.columns()[0].type_(), &slipstream_pg::types::Type::TIMESTAMPTZ);
    /// # Ok(()) }
    /// ```
    pub fn type_(&self) -> &Type {
        &self.type_
    }
    /// The OID of the table the column comes from, if it is a plain table column.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT relname, 1 AS one FROM pg_class").await?;
    /// assert_eq!(stmt.columns()[0].table_oid(), Some(1259)); // pg_class's own OID
    /// assert_eq!(stmt.columns()[1].table_oid(), None); // computed, not a table's column
    /// # Ok(()) }
    /// ```
    pub fn table_oid(&self) -> Option<u32> {
        self.table_oid
    }
    /// The column's attribute number in that table.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT relnamespace, relname FROM pg_class").await?;
    /// assert_eq!(stmt.columns()[1].column_id(), Some(2)); // relname is pg_class's 2nd attribute
    /// # Ok(()) }
    /// ```
    pub fn column_id(&self) -> Option<i16> {
        self.column_id
    }
    /// The type modifier (`atttypmod`): e.g. 36 for `varchar(32)` (length + 4), -1 for none.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let stmt = client.prepare("SELECT 'x'::varchar(32), 'y'::text").await?;
    /// assert_eq!(stmt.columns()[0].type_modifier(), 36);
    /// assert_eq!(stmt.columns()[1].type_modifier(), -1);
    /// # Ok(()) }
    /// ```
    pub fn type_modifier(&self) -> i32 {
        self.type_modifier
    }

    /// The same column with its type looked up.
    pub(crate) fn with_type(&self, type_: Type) -> Column {
        Column {
            type_,
            ..self.clone()
        }
    }
}

/// Maps an OID to a type. Types that are not built in (enums, composites, domains, extensions'
/// types) get a placeholder, replaced once the reply is in (see `type_info.rs`).
pub(crate) fn type_for(oid: u32) -> Type {
    Type::from_oid(oid).unwrap_or_else(|| crate::type_info::placeholder(oid))
}

pub(crate) fn parse_columns(body: Option<&RowDescriptionBody>) -> Result<Arc<[Column]>, Error> {
    let Some(body) = body else {
        return Ok(Arc::from(Vec::new()));
    };
    let mut fields = body.fields();
    let mut columns = Vec::new();
    while let Some(f) = fields
        .next()
        .map_err(|e| Error::protocol(format!("malformed RowDescription: {e}")))?
    {
        columns.push(Column {
            name: f.name().to_string(),
            type_: type_for(f.type_oid()),
            table_oid: (f.table_oid() != 0).then_some(f.table_oid()),
            column_id: (f.column_id() != 0).then_some(f.column_id()),
            type_modifier: f.type_modifier(),
        });
    }
    Ok(columns.into())
}

pub(crate) fn parse_params(body: &ParameterDescriptionBody) -> Result<Vec<Type>, Error> {
    body.parameters()
        .map(|oid| Ok(type_for(oid)))
        .collect()
        .map_err(|e| Error::protocol(format!("malformed ParameterDescription: {e}")))
}
