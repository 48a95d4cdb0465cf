//! Result rows.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::DataRowBody;
use postgres_types::{FromSql, WrongType};

use crate::{Column, Error};

mod sealed {
    pub trait Sealed {}
}

/// A column index: a position (`usize`) or a name (`&str`).
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let row = client.query_one("SELECT 1::int4 AS one, 'two' AS two", &[]).await?;
/// let one: i32 = row.get(0)?; // by position
/// let two: &str = row.get("two")?; // by name
/// assert_eq!((one, two), (1, "two"));
/// # Ok(()) }
/// ```
pub trait RowIndex: sealed::Sealed + fmt::Display {
    #[doc(hidden)]
    fn find<T>(&self, columns: &[T], name: impl Fn(&T) -> &str) -> Option<usize>;
}

impl sealed::Sealed for usize {}
impl RowIndex for usize {
    fn find<T>(&self, columns: &[T], _: impl Fn(&T) -> &str) -> Option<usize> {
        (*self < columns.len()).then_some(*self)
    }
}

impl sealed::Sealed for str {}
impl RowIndex for str {
    fn find<T>(&self, columns: &[T], name: impl Fn(&T) -> &str) -> Option<usize> {
        // Exact match first, then case-insensitive as unquoted SQL identifiers are.
        columns.iter().position(|c| name(c) == self).or_else(|| {
            columns
                .iter()
                .position(|c| name(c).eq_ignore_ascii_case(self))
        })
    }
}

impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {}
impl<T: RowIndex + ?Sized> RowIndex for &T {
    fn find<U>(&self, columns: &[U], name: impl Fn(&U) -> &str) -> Option<usize> {
        (**self).find(columns, name)
    }
}

/// Where each value of a row lies in its message. The callers close the connection on an error:
/// a server that sent one malformed row cannot be trusted with the next.
pub(crate) fn ranges(body: &DataRowBody) -> Result<Vec<Option<Range<usize>>>, Error> {
    body.ranges().collect().map_err(|e| {
        Error::protocol(format!(
            "server sent a malformed DataRow (a value's length runs past the end of the message: \
             {e}; protocol violation); the connection is closed"
        ))
    })
}

/// A row whose value count is not its description's column count.
fn mismatch(values: usize, columns: usize) -> Error {
    Error::protocol(format!(
        "server sent a DataRow of {values} columns for a RowDescription of {columns} (protocol \
         violation); the connection is closed"
    ))
}

/// One row of a query result, decoded on access with [`postgres_types::FromSql`].
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let row = client.query_one("SELECT 1::int8 AS id, 'x'::text AS name, NULL::text AS note", &[]).await?;
/// let id: i64 = row.get(0)?;
/// let name: &str = row.get("name")?;
/// let note: Option<String> = row.get("note")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Row {
    columns: Arc<[Column]>,
    body: DataRowBody,
    ranges: Vec<Option<Range<usize>>>,
}

impl Row {
    pub(crate) fn new(columns: Arc<[Column]>, body: DataRowBody) -> Result<Row, Error> {
        let ranges = ranges(&body)?;
        if ranges.len() != columns.len() {
            return Err(mismatch(ranges.len(), columns.len()));
        }
        Ok(Row {
            columns,
            body,
            ranges,
        })
    }

    /// Replaces the columns with the same ones whose types were looked up after the row
    /// arrived (see `type_info.rs`).
    pub(crate) fn set_columns(&mut self, columns: Arc<[Column]>) {
        debug_assert_eq!(columns.len(), self.columns.len());
        self.columns = columns;
    }

    pub(crate) fn columns_arc(&self) -> &Arc<[Column]> {
        &self.columns
    }

    /// The columns.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let row = client.query_one("SELECT 1::int4 AS one, now() AS at", &[]).await?;
    /// assert_eq!(row.columns()[1].name(), "at");
    /// assert_eq!(row.columns()[1].type_(), &slipstream_pg::types::Type::TIMESTAMPTZ);
    /// # Ok(()) }
    /// ```
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The number of values.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let row = client.query_one("SELECT 1, 2, 3", &[]).await?;
    /// assert_eq!(row.len(), 3);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True if the row has no columns.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let row = client.query_one("SELECT", &[]).await?; // a row of no columns
    /// assert!(row.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Decodes a value. Fails with [`crate::ErrorKind::Column`] if the column does not exist and
    /// [`crate::ErrorKind::Conversion`] if `T` cannot hold the column's type (or the value is
    /// NULL and `T` is not an `Option`).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::ErrorKind;
    /// let row = client.query_one("SELECT 42::int8 AS n, NULL::text AS note", &[]).await?;
    /// assert_eq!(row.get::<_, i64>("n")?, 42);
    /// assert_eq!(row.get::<_, Option<String>>("note")?, None);
    /// assert_eq!(row.get::<_, i32>("n").unwrap_err().kind(), ErrorKind::Conversion); // int8 is not i32
    /// assert_eq!(row.get::<_, i64>("nope").unwrap_err().kind(), ErrorKind::Column);
    /// # Ok(()) }
    /// ```
    pub fn get<'a, I, T>(&'a self, idx: I) -> Result<T, Error>
    where
        I: RowIndex,
        T: FromSql<'a>,
    {
        let i = idx
            .find(&self.columns, |c| c.name())
            .ok_or_else(|| Error::column(format!("no column {idx} in this row")))?;
        let ty = self.columns[i].type_();
        if crate::type_info::is_placeholder(ty) && !T::accepts(ty) {
            return Err(Error::conversion(
                format!(
                    "cannot read column {idx} as {}: its type (OID {}) is not built in and has \
                     not been looked up (a pipeline's rows taken with process before end, or \
                     the lookup failed: see the log); prepare the statement first, or read the \
                     value with Row::get_raw",
                    std::any::type_name::<T>(),
                    ty.oid()
                ),
                Some(Box::new(WrongType::new::<T>(ty.clone()))),
            ));
        }
        if !T::accepts(ty) {
            return Err(Error::conversion(
                format!(
                    "cannot read column {idx} of type {ty} as {}",
                    std::any::type_name::<T>()
                ),
                Some(Box::new(WrongType::new::<T>(ty.clone()))),
            ));
        }
        let raw = self.ranges[i].clone().map(|r| &self.body.buffer()[r]);
        FromSql::from_sql_nullable(ty, raw)
            .map_err(|e| Error::conversion(format!("cannot decode column {idx} ({ty})"), Some(e)))
    }

    /// The raw bytes of a value in PostgreSQL's binary format, `None` for NULL.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// // An enum's binary form is its label's text.
    /// let row = client.query_one("SELECT 'happy'::mood", &[]).await?;
    /// assert_eq!(row.get_raw(0)?, Some(&b"happy"[..]));
    /// # Ok(()) }
    /// ```
    pub fn get_raw<I: RowIndex>(&self, idx: I) -> Result<Option<&[u8]>, Error> {
        let i = idx
            .find(&self.columns, |c| c.name())
            .ok_or_else(|| Error::column(format!("no column {idx} in this row")))?;
        Ok(self.ranges[i].clone().map(|r| &self.body.buffer()[r]))
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Row")
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

/// One row of a simple-protocol result: every value as text, as psql shows it.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::SimpleQueryMessage;
/// for message in client.simple_query("SELECT 1 AS a, NULL AS b; SELECT now()").await? {
///     if let SimpleQueryMessage::Row(row) = message {
///         println!("{:?}", row.get(0)?);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SimpleRow {
    columns: Arc<[String]>,
    body: DataRowBody,
    ranges: Vec<Option<Range<usize>>>,
}

impl SimpleRow {
    pub(crate) fn new(columns: Arc<[String]>, body: DataRowBody) -> Result<SimpleRow, Error> {
        let ranges = ranges(&body)?;
        if ranges.len() != columns.len() {
            return Err(mismatch(ranges.len(), columns.len()));
        }
        Ok(SimpleRow {
            columns,
            body,
            ranges,
        })
    }

    /// The column names.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SimpleQueryMessage;
    /// let row = client.simple_query("SELECT 1 AS one, 2 AS two").await?.into_iter().find_map(|m| match m {
    ///     SimpleQueryMessage::Row(row) => Some(row),
    ///     _ => None,
    /// }).expect("one row");
    /// assert_eq!(row.columns(), ["one", "two"]);
    /// # Ok(()) }
    /// ```
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The number of values.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SimpleQueryMessage;
    /// let row = client.simple_query("SELECT 1, 2").await?.into_iter().find_map(|m| match m {
    ///     SimpleQueryMessage::Row(row) => Some(row),
    ///     _ => None,
    /// }).expect("one row");
    /// assert_eq!(row.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True if the row has no columns.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SimpleQueryMessage;
    /// let row = client.simple_query("SELECT").await?.into_iter().find_map(|m| match m {
    ///     SimpleQueryMessage::Row(row) => Some(row),
    ///     _ => None,
    /// }).expect("one row");
    /// assert!(row.is_empty()); // a row of no columns
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// A value as text, `None` for NULL.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SimpleQueryMessage;
    /// let row = client.simple_query("SELECT 1.50::numeric AS price, NULL AS note").await?.into_iter().find_map(|m| match m {
    ///     SimpleQueryMessage::Row(row) => Some(row),
    ///     _ => None,
    /// }).expect("one row");
    /// assert_eq!(row.get("price")?, Some("1.50")); // text, as the server printed it
    /// assert_eq!(row.get(1)?, None); // NULL
    /// # Ok(()) }
    /// ```
    pub fn get<I: RowIndex>(&self, idx: I) -> Result<Option<&str>, Error> {
        let i = idx
            .find(&self.columns, |c| c.as_str())
            .ok_or_else(|| Error::column(format!("no column {idx} in this row")))?;
        match self.ranges[i].clone() {
            None => Ok(None),
            Some(r) => std::str::from_utf8(&self.body.buffer()[r])
                .map(Some)
                .map_err(|e| {
                    Error::conversion(
                        format!("column {idx} is not valid UTF-8"),
                        Some(Box::new(e)),
                    )
                }),
        }
    }
}

impl fmt::Debug for SimpleRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimpleRow")
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}
