//! A wait-free connection pool, after Oracle UCP's: borrowing claims an idle connection with a
//! compare-and-swap and skips busy ones instead of waiting on them, and returning marks it idle;
//! neither takes a lock while no one waits. Borrowers wait only when no connection is free;
//! a return then wakes one of them, and hands the connection straight to the longest-waiting
//! one once it has waited past a fairness bound. Connections are opened by the pool's own task.
//!
//! ```
//! use slipstream_pool::{Manager, Pool};
//!
//! struct Numbers;
//! impl Manager for Numbers {
//!     type Connection = u64;
//!     type Error = std::io::Error;
//!     async fn connect(&self) -> Result<u64, std::io::Error> {
//!         Ok(7)
//!     }
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
//! let pool = Pool::builder(Numbers).max_size(6).build();
//! let conn = pool.get().await?;
//! assert_eq!(*conn, 7);
//! # Ok(()) }
//! ```
//!
//! The slot state machine and the hand-off are checked with loom:
//! `RUSTFLAGS="--cfg loom" cargo test -p slipstream-pool --release --lib loom`.
#![warn(missing_docs, rust_2018_idioms)]
// Under loom only the core is built; the pool's uses of it are not.
#![cfg_attr(loom, allow(dead_code))]

#[cfg(not(loom))]
mod config;
mod core;
mod error;
#[cfg(not(loom))]
mod get;
mod labels;
#[cfg(not(loom))]
mod local_ref;
#[cfg(not(loom))]
mod maintenance;
mod manager;
#[cfg(not(loom))]
mod observe;
#[cfg(not(loom))]
mod pg;
#[cfg(not(loom))]
mod pg_pool;
#[cfg(not(loom))]
mod pool;
#[cfg(not(loom))]
mod pooled;
#[cfg(not(loom))]
mod registry;
mod stats;
mod sync;

#[cfg(not(loom))]
pub use config::{Builder, Config};
pub use error::PoolError;
pub use labels::{Labeling, Labels, TOO_COSTLY};
pub use manager::{AbortFn, Manager};
#[cfg(not(loom))]
pub use pg::{PgManager, Reset};
#[cfg(not(loom))]
pub use pg_pool::{PgPool, PgPoolBuilder, PgPooled, Role, ServerInfo, ServerManager, ServerRole};
#[cfg(not(loom))]
pub use pool::{ConnectionInfo, Pool};
#[cfg(not(loom))]
pub use pooled::Pooled;
#[cfg(not(loom))]
pub use registry::Registry;
pub use stats::Stats;

/// The guide, compiled: `cargo test --doc -p slipstream-pool` builds every ```rust block of
/// docs/pool.md, so a guide whose example no longer compiles against today's API fails the tests
/// instead of misleading a reader.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/pool.md")]
mod pool_guide {}
