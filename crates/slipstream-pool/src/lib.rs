//! A wait-free connection pool, after Oracle UCP's: borrowing claims an idle connection with a
//! compare-and-swap and skips busy ones instead of waiting on them, returning hands the
//! connection straight to the longest-waiting borrower, and neither takes a lock. Borrowers
//! wait only when no connection is free; connections are opened by the pool's own task.
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

mod core;
mod error;
#[cfg(not(loom))]
mod pg;
#[cfg(not(loom))]
mod pool;
mod stats;
mod sync;

pub use error::PoolError;
#[cfg(not(loom))]
pub use pg::PgManager;
#[cfg(not(loom))]
pub use pool::{Builder, Config, ConnectionInfo, Manager, Pool, Pooled};
pub use stats::Stats;
