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
//! cache miss:          Parse(S7) + Describe(S) + Bind + Execute + Sync  (one round trip; then cached)
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
//! # Types
//!
//! Enums, composites, domains, ranges and arrays of them are looked up in the server's
//! catalogs the first time a connection meets them (one query, cached per connection and
//! forgotten on `DISCARD ALL`), so types derived with postgres-types' `derive` feature work as
//! parameters and results:
//!
//! ```no_run
//! #[derive(Debug, postgres_types::ToSql, postgres_types::FromSql)]
//! #[postgres(name = "mood")] // CREATE TYPE mood AS ENUM ('sad', 'happy')
//! enum Mood {
//!     #[postgres(name = "sad")]
//!     Sad,
//!     #[postgres(name = "happy")]
//!     Happy,
//! }
//!
//! # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
//! client.execute("INSERT INTO people (name, mood) VALUES ($1, $2)", &[&"ann", &Mood::Happy]).await?;
//! let mood: Mood = client.query_one("SELECT mood FROM people", &[]).await?.get(0)?;
//! # Ok(()) }
//! ```
//!
//! # Streams
//!
//! [`RowStream`], [`CopyOut`] and [`Notifications`] are `futures::Stream`s, [`CopyIn`] a
//! `futures::Sink`: see `docs/client.md` for combinator examples.
//!
//! # TLS
//!
//! rustls with libpq's `sslmode` semantics (`disable`, `prefer` (default), `require`,
//! `verify-ca`, `verify-full`) and `sslrootcert`/`sslcert`/`sslkey`; `sslrootcert=system` for
//! the operating system's CAs. See [`SslMode`]. SCRAM binds to the TLS channel
//! (SCRAM-SHA-256-PLUS) when the server offers it; see [`ChannelBinding`].
//!
//! # Secrets and routing
//!
//! As libpq 16: the password file (`~/.pgpass`, [`Config::passfile`]), `require_auth`
//! ([`Config::require_auth`]) against servers that ask for more than they should, and over
//! several hosts [`TargetSessionAttrs`] and [`LoadBalanceHosts`]:
//!
//! ```no_run
//! # async fn f() -> Result<(), slipstream_pg::Error> {
//! let mut client = slipstream_pg::connect(
//!     "host=db1,db2 user=app sslmode=require channel_binding=require \
//!      require_auth=scram-sha-256 target_session_attrs=read-write",
//! ).await?;
//! # Ok(()) }
//! ```
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
mod auth;
mod cancel;
mod client;
mod config;
mod connect;
mod connection;
mod conninfo;
mod copy;
mod end_point;
mod error;
mod home;
mod memopt;
mod notification;
mod param_types;
mod pgpass;
mod pipeline;
mod query;
mod routing;
mod row;
mod row_stream;
mod service_file;
mod simple_query;
mod socket;
mod sqlstate;
mod statement;
mod statement_cache;
mod tls;
mod transaction;
mod type_info;

pub use abort::AbortHandle;
pub use auth::ChannelBinding;
pub use cancel::CancelToken;
pub use client::Client;
pub use config::{Config, DEFAULT_PORT, DEFAULT_STATEMENT_CACHE_SIZE, Host, SslMode};
pub use connect::{connect, connect_config};
pub use connection::{NoticeHandler, TransactionStatus};
pub use conninfo::redact_password;
pub use copy::{CopyIn, CopyOut};
pub use error::{DbError, Error, ErrorKind, ErrorPosition};
pub use memopt::{MemoptKey, MemoptTable};
pub use notification::{Notification, Notifications};
pub use pipeline::{FromOutput, Op, Output, Pipeline, PipelineMode, PipelineOptions};
pub use query::{Param, ToStatement, Uncached};
pub use routing::{LoadBalanceHosts, TargetSessionAttrs};
pub use row::{Row, RowIndex, SimpleRow};
pub use row_stream::{FetchSize, RowStream};
pub use simple_query::SimpleQueryMessage;
pub use sqlstate::SqlState;
pub use statement::{Column, Statement};
pub use statement_cache::CacheStats;
pub use transaction::{IsolationLevel, Transaction, TransactionBuilder};

/// PostgreSQL types and the `ToSql`/`FromSql` traits (the `postgres-types` crate).
pub use postgres_types as types;

/// The client's guides, compiled: `cargo test --doc -p slipstream-pg` builds every ```rust
/// block of README.md and the guides below (as `no_run` doctests), so a guide whose example no
/// longer compiles against today's API fails the tests instead of misleading a reader.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../../README.md")]
    mod readme {}
    #[doc = include_str!("../../../docs/client.md")]
    mod client {}
    #[doc = include_str!("../../../docs/pipelining.md")]
    mod pipelining {}
    #[doc = include_str!("../../../docs/statement-cache.md")]
    mod statement_cache {}
    #[doc = include_str!("../../../docs/fetch-size.md")]
    mod fetch_size {}
    #[doc = include_str!("../../../docs/memopt.md")]
    mod memopt {}
}
