//! Throwaway PostgreSQL for tests, the lab and the CLI.
//!
//! - [`Cluster`]: a private cluster in a temporary directory on a free port, removed on drop.
//!   Fast: `initdb` runs once per machine into a cached template that each cluster copies.
//! - [`Embedded`]: the CLI's persistent local cluster (`slipstream db start`).
//! - [`CountingAllocator`]: how far the heap grows over a piece of work, for memory figures.
//! - [`DelayProxy`]: a TCP proxy adding latency per direction and cutting or stalling
//!   connections on command; [`measure_overhead`] says what it adds by itself.
//!
//! As root, `initdb` and `postgres` run as the `postgres` OS user (PostgreSQL refuses root), on
//! directories handed to that user.
//!
//! ```no_run
//! let cluster = slipstream_testkit::Cluster::builder()
//!     .setting("shared_buffers", "16MB")
//!     .hba("host all all 127.0.0.1/32 scram-sha-256\nlocal all all trust\n")
//!     .start()?;
//! cluster.psql("CREATE ROLE app LOGIN PASSWORD 'secret'")?;
//! let url = cluster.url_for("app", Some("secret"));
//! # Ok::<(), slipstream_testkit::Error>(())
//! ```
#![warn(missing_docs, rust_2018_idioms)]

mod alloc;
mod cluster;
mod embedded;
mod error;
mod install;
mod pin;
mod postmaster;
mod proxy;

pub use alloc::{CountingAllocator, HeapGrowth};
pub use cluster::{Cluster, ClusterBuilder, stop_every_cluster};
pub use embedded::{Embedded, Status};
pub use error::Error;
pub use install::{INSTALL_HINT, Install, free_port};
pub use pin::{pin_current_thread, pin_process, unpin_current_thread, unpin_process};
pub use proxy::{DelayProxy, ProxyOverhead, measure_overhead};

/// The guide, compiled: `cargo test --doc -p slipstream-testkit` builds every ```rust block of
/// docs/testkit.md, so a guide whose example no longer compiles against today's API fails the tests
/// instead of misleading a reader.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/testkit.md")]
mod testkit_guide {}
