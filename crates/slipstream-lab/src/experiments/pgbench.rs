//! Running pgbench as a peer: a script in a private directory, its output, its CPU time.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;

use super::children_cpu;

/// What one pgbench run left behind.
pub(crate) struct PgbenchRun {
    pub stdout: String,
    /// pgbench's own CPU time (it runs as a child process).
    pub cpu: Duration,
    /// The per-transaction log lines (`-l`), when asked for.
    pub logs: String,
}

/// Runs `pgbench -n -f SCRIPT ARGS... URL` from a fresh directory (where `-l` writes its logs).
pub(crate) fn run(url: &str, script: &str, args: &[String]) -> anyhow::Result<PgbenchRun> {
    run_with_settings(url, script, args, &[])
}

/// [`run`], every session of pgbench started with these server settings (`-c name=value` in
/// `PGOPTIONS`, after any the caller's environment gives, so these win).
pub(crate) fn run_with_settings(
    url: &str,
    script: &str,
    args: &[String],
    settings: &[(&str, &str)],
) -> anyhow::Result<PgbenchRun> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let install = slipstream_testkit::Install::find()?;
    let dir = std::env::temp_dir().join(format!(
        "slipstream-lab-pgbench-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("script.sql");
    std::fs::write(&file, script)?;
    let before = children_cpu();
    let mut command = Command::new(install.bindir().join("pgbench"));
    if !settings.is_empty() {
        let mut options = std::env::var("PGOPTIONS").unwrap_or_default();
        for (name, value) in settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        command.env("PGOPTIONS", options.trim_start());
    }
    let out = command
        .arg("-n")
        .args(args)
        .arg("-f")
        .arg(&file)
        .arg(url)
        .current_dir(&dir)
        .output()
        .context("could not run pgbench");
    let cpu = children_cpu().saturating_sub(before);
    let logs = read_logs(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    anyhow::ensure!(
        out.status.success(),
        "pgbench failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(PgbenchRun {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        cpu,
        logs,
    })
}

/// The `tps = ...` figure pgbench printed.
pub(crate) fn tps(stdout: &str) -> anyhow::Result<f64> {
    stdout
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse::<f64>().ok())
        .context("pgbench printed no tps line")
}

/// The per-transaction log lines pgbench `-l` wrote into `dir` (one file per thread).
fn read_logs(dir: &std::path::Path) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("pgbench_log") {
                text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    text
}
