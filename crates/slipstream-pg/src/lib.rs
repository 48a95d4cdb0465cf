//! An async PostgreSQL client for tokio that owns its socket.
//!
//! # Example
//!
//! ```no_run
//! # async fn f() -> Result<(), slipstream_pg::Error> {
//! let mut client = slipstream_pg::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
//! let stmt = client.prepare("SELECT $1::int4 * 2").await?;
//! let doubled: i32 = client.query_one(&stmt, &[&21i32]).await?.get(0)?;
//! assert_eq!(doubled, 42);
//! # Ok(()) }
//! ```
//!
//! # Behavior
//!
//! A [`Client`] is one connection. Its methods take `&mut self` and run on the caller's task:
//! the request is encoded into the connection's write buffer, written, and the reply read and
//! decoded, with no background task or channel in between. That is why a round trip costs less
//! client CPU than a design that hands each request to a connection task.
//!
//! Every future is cancel-safe in the sense that matters: dropping one (a timeout, a `select!`)
//! never leaves the connection out of step. The server's replies to abandoned requests are
//! discarded before the next request's reply is read; a dropped [`Transaction`] is rolled back
//! and a dropped [`CopyIn`] aborted, both with the connection's next request.
//!
//! After an I/O failure, a protocol violation, or a FATAL error from the server (e.g. the backend
//! was terminated), the connection is marked broken; every later call fails with
//! [`ErrorKind::Closed`] saying why.
//!
//! # Protocol
//!
//! ```text
//! prepared or cached:  Bind + Execute + Sync                           -> BindComplete, DataRow*, CommandComplete, ReadyForQuery
//! cache miss:          Parse(s7) + Describe(S) + Bind + Execute + Sync  (one round trip; then cached)
//! uncached one-off:    Parse("") + Bind + Describe(P) + Execute + Sync  (one round trip, nothing left behind)
//! row stream:          ... + Execute(n) + Flush, Execute(n) + Flush ...  then Sync when the rows run out
//! ```
//!
//! Parameter types for SQL text are chosen from the Rust values (strings go as text for the
//! server to infer), so none of these needs a round trip to learn them; see
//! `docs/statement-cache.md`.
//!
//! Messages are encoded and decoded by [`postgres_protocol`]; values by [`postgres_types`]
//! (re-exported as [`types`]), so every type with a `ToSql`/`FromSql` implementation works.
//!
//! # TLS
//!
//! rustls with libpq's `sslmode` semantics (`disable`, `prefer` (default), `require`,
//! `verify-ca`, `verify-full`) and `sslrootcert`/`sslcert`/`sslkey`. See [`SslMode`].
//!
//! # Features
//!
//! | feature | enables |
//! |---|---|
//! | `with-chrono-0_4` | `chrono` date/time types |
//! | `with-uuid-1` | `uuid::Uuid` |
//! | `with-serde_json-1` | `serde_json::Value` for `json`/`jsonb` |
#![warn(missing_docs, rust_2018_idioms)]

mod abort;
mod cancel;
mod client;
mod config;
mod connect;
mod connection;
mod conninfo;
mod copy;
mod error;
mod memopt;
mod notification;
mod param_types;
mod pipeline;
mod query;
mod row;
mod row_stream;
mod simple_query;
mod socket;
mod sqlstate;
mod statement;
mod statement_cache;
mod tls;
mod transaction;

pub use abort::AbortHandle;
pub use cancel::CancelToken;
pub use client::Client;
pub use config::{Config, DEFAULT_PORT, DEFAULT_STATEMENT_CACHE_SIZE, Host, SslMode};
pub use connect::{connect, connect_config};
pub use connection::{NoticeHandler, TransactionStatus};
pub use copy::{CopyIn, CopyOut};
pub use error::{DbError, Error, ErrorKind, ErrorPosition};
pub use memopt::{MemoptKey, MemoptTable};
pub use notification::Notification;
pub use pipeline::{FromOutput, Op, Output, Pipeline, PipelineMode, PipelineOptions};
pub use query::{Param, ToStatement, Uncached};
pub use row::{Row, RowIndex, SimpleRow};
pub use row_stream::{FetchSize, RowStream};
pub use simple_query::SimpleQueryMessage;
pub use sqlstate::SqlState;
pub use statement::{Column, Statement};
pub use statement_cache::CacheStats;
pub use transaction::{IsolationLevel, Transaction, TransactionBuilder};

/// PostgreSQL types and the `ToSql`/`FromSql` traits (the `postgres-types` crate).
pub use postgres_types as types;
