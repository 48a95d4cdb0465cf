//! Running the `slipstream` binary from the CLI's tests.

#![allow(dead_code)] // each test crate uses its own share of these

use std::path::Path;
use std::process::{Command, Output};

/// The `slipstream ARGS` command with `home` as its `SLIPSTREAM_HOME` and none of the
/// environment that would point it at a server the test did not choose.
pub fn command(args: &[&str], home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slipstream"));
    cmd.args(args)
        .env("SLIPSTREAM_HOME", home)
        .env_remove("DATABASE_URL")
        .env_remove("PGHOST")
        .env_remove("PGPORT")
        .env_remove("PGDATABASE")
        .env_remove("PGUSER");
    cmd
}

/// Runs [`command`] to its end.
pub fn slipstream(args: &[&str], home: &Path) -> Output {
    command(args, home).output().expect("run slipstream")
}

/// Everything the command printed, stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `slipstream ARGS`, which must fail with a message containing `want`; returns what it
/// printed.
pub fn refused(args: &[&str], home: &Path, want: &str) -> String {
    let o = slipstream(args, home);
    let said = text(&o);
    assert!(!o.status.success(), "{args:?} succeeded: {said}");
    assert!(said.contains(want), "{args:?}: no {want:?} in: {said}");
    said
}
