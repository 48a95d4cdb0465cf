//! The workload runner (`slipstream bench`): Swingbench-style closed-loop users or open-loop
//! Poisson arrivals running a weighted mix of transactions, recorded per transaction type into
//! a versioned JSON result.
//!
//! A workload is built from [`Transaction`]s in Rust ([`Workload::transaction`]), read from a
//! TOML file ([`workload_file`]), or is the built-in [`order_entry`]. A run's result is a
//! [`BenchRun`]; [`report`] draws it as HTML and [`compare`] says whether two sets of runs
//! really differ.
//!
//! The crate depends on the client (`slipstream-pg`) and the statistics (`slipstream-stats`)
//! only: a custom transaction never pulls in the lab's peers.
//!
//! ```no_run
//! use slipstream_bench::{self as bench, RunConfig, Session, Transaction, TxError, Workload};
//!
//! struct Ping;
//! impl Transaction for Ping {
//!     async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
//!         s.client()?.simple_query("SELECT 1").await?;
//!         s.count().selects += 1;
//!         Ok(())
//!     }
//! }
//!
//! # async fn f() -> anyhow::Result<()> {
//! let workload = Workload::new("ping").transaction("ping", 1, || Ping);
//! let mut config = RunConfig::new(Some("postgres://postgres@127.0.0.1/postgres".into()));
//! config.users = 8;
//! let run = bench::run(&workload, &config, std::future::pending::<()>()).await?;
//! run.write_json("ping.json".as_ref())?;
//! # Ok(()) }
//! ```

#![warn(missing_docs, rust_2018_idioms)]

mod atomic_file;
pub mod chart;
pub mod compare;
pub mod context;
mod environment;
mod file_name;
mod generators;
mod histogram;
mod merge;
pub mod order_entry;
mod phases;
mod progress;
mod recorder;
pub mod report;
mod run_result;
mod runner;
pub mod table;
mod text_file;
mod think;
mod threads;
mod transaction;
mod workload;
pub mod workload_file;

pub use atomic_file::{check_writable, write_atomically};
pub use chart::{
    Mark, Series, line_chart, line_chart_svg, percentile_chart_svg, posterior_chart_svg,
};
pub use environment::{Environment, capture as capture_environment};
pub use file_name::file_stem;
pub use merge::merge;
pub use phases::{Stage, StageLoad, StageResult, StageTx, stage_table};
pub use progress::Style;
pub use run_result::{
    BenchRun, Interval, Intervals, LatencyStats, Load, MergedPart, Percentiles, RUN_SCHEMA,
    RUN_SCHEMA_OLDEST_READABLE, RUN_SCHEMA_VERSION, Schedule, TxResult, refuse_repeated_runs,
};
pub use runner::{DEFAULT_GRACE, Interrupted, MAX_USERS, QUEUE_LIMIT, RunConfig, run, run_until};
pub use table::Table;
pub use think::{ThinkTime, parse_duration};
pub use transaction::{Session, StatementCounts, Transaction, TxError};
pub use workload::Workload;

/// The guide, compiled: `cargo test --doc -p slipstream-bench` builds every ```rust block of
/// docs/custom-transactions.md, so a guide whose example no longer compiles against today's API fails the tests
/// instead of misleading a reader.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/custom-transactions.md")]
mod custom_transactions_guide {}
