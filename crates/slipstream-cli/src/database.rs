//! Which database a command uses: --url, DATABASE_URL, PG* variables, or the embedded cluster.

use std::path::PathBuf;

use anyhow::Context as _;
use slipstream_testkit::{Embedded, Status};

/// The variables that, when any is set, mean "use the environment's server".
const PG_VARS: [&str; 4] = ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER"];

/// The embedded cluster's state directory: `--home`, else `SLIPSTREAM_HOME` (an empty one is unset, as `DATABASE_URL` is), else the
/// user's data directory + `/slipstream`.
pub fn home(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(h) = flag {
        return Ok(h);
    }
    if let Some(h) = std::env::var_os("SLIPSTREAM_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    Ok(dirs::data_dir()
        .context("no data directory for this user: set SLIPSTREAM_HOME or --home")?
        .join("slipstream"))
}

/// Resolves the connection string for a command, starting the embedded cluster if nothing
/// else is configured. Says on stderr which one it chose when it is not obvious.
pub fn resolve(url: Option<String>, home_flag: Option<PathBuf>) -> anyhow::Result<String> {
    if let Some(url) = url {
        return Ok(url);
    }
    // Not `.ok()`: a value that is not UTF-8 read as unset, and the command ran against the
    // PG* variables' server or the embedded cluster instead of the one named
    // (`tests/attack_cli_edges.rs`).
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => return Ok(url),
        Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!(
            "DATABASE_URL is not valid UTF-8: write it in UTF-8, or give the connection string with --url"
        ),
        _ => {}
    }
    if PG_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        return Ok(from_pg_env());
    }
    let embedded = Embedded::new(home(home_flag)?);
    let was_running = matches!(embedded.status()?, Status::Running { .. });
    let url = embedded.start()?;
    if !was_running {
        eprintln!(
            "slipstream: started the embedded PostgreSQL at {url} (stop it with `slipstream db stop`)"
        );
    }
    Ok(url)
}

/// A key=value string from the PG* variables, so that peers that do not read the environment
/// (tokio-postgres, pgbench's argument) connect to the same server.
fn from_pg_env() -> String {
    let pairs = [
        ("host", "PGHOST"),
        ("port", "PGPORT"),
        ("user", "PGUSER"),
        ("password", "PGPASSWORD"),
        ("dbname", "PGDATABASE"),
        ("sslmode", "PGSSLMODE"),
    ];
    pairs
        .iter()
        .filter_map(|(k, v)| {
            std::env::var(v)
                .ok()
                .map(|val| format!("{k}='{}'", val.replace('\\', "\\\\").replace('\'', "\\'")))
        })
        .collect::<Vec<_>>()
        .join(" ")
}
