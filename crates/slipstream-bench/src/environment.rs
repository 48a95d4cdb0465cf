//! Capturing what a run ran on.

use serde::{Deserialize, Serialize};

/// What the run ran on.
///
/// ```
/// let env = slipstream_bench::capture_environment("postgres://app:secret@db/orders", None);
/// assert!(env.cpus >= 1);
/// assert!(!env.database.contains("secret"));
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Environment {
    /// slipstream's version.
    pub slipstream_version: String,
    /// Operating system and architecture.
    pub os: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model name, if known.
    pub cpu_model: Option<String>,
    /// The server's `server_version`.
    pub server_version: Option<String>,
    /// The database URL with any password removed.
    pub database: String,
    /// tokio-postgres version used as a peer.
    pub tokio_postgres_version: String,
}

/// The tokio-postgres version the lab measures against (kept in step with Cargo.lock).
const TOKIO_POSTGRES_VERSION: &str = "0.7";

/// Describes this machine and the server behind `url`.
///
/// ```
/// let env = slipstream_bench::capture_environment(
///     "postgres://app:secret@db/orders",
///     Some("16.2".into()),
/// );
/// assert_eq!(env.server_version.as_deref(), Some("16.2"));
/// assert_eq!(env.os, format!("{} {}", std::env::consts::OS, std::env::consts::ARCH));
/// assert!(!env.database.contains("secret")); // the password is removed
/// ```
pub fn capture(url: &str, server_version: Option<String>) -> Environment {
    Environment {
        slipstream_version: env!("CARGO_PKG_VERSION").into(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        cpu_model: std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        }),
        server_version,
        database: slipstream_pg::redact_password(url),
        tokio_postgres_version: TOKIO_POSTGRES_VERSION.into(),
    }
}
