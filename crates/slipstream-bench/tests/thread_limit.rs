//! User threads the system will not give (`-j` past what the process may open): a test binary
//! of its own, since it lowers the process's open-file limit.

mod common;

use std::future::pending;
use std::process::Command;
use std::time::Duration;

use common::{rt, sleeping};
use slipstream_bench::{self as bench, RunConfig};

/// Sets this process's soft open-file limit (`prlimit`, util-linux), returning the old one.
fn set_nofile(soft: &str) -> String {
    let pid = std::process::id().to_string();
    let old = Command::new("prlimit")
        .args([
            "--pid",
            &pid,
            "--nofile",
            "--raw",
            "--noheadings",
            "--output=SOFT",
        ])
        .output()
        .expect("prlimit (util-linux) runs");
    let status = Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={soft}:")])
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit failed");
    String::from_utf8(old.stdout).unwrap().trim().to_string()
}

/// Each user thread has an event loop of its own, which takes file descriptors: with more
/// threads than the process may open, the run failed with the system's words alone ("Too
/// many open files"), naming neither the threads nor what to do. It names both now.
#[test]
fn user_threads_that_cannot_start_are_named_with_what_to_do() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads) = (200, 200);
    c.duration = Duration::from_millis(100);
    c.warmup = Duration::ZERO;
    let rt = rt();
    let old = set_nofile("64");
    let got = rt.block_on(bench::run(&sleeping(0), &c, pending::<()>()));
    set_nofile(&old);
    let e = format!("{:#}", got.map(drop).expect_err("200 threads on 64 files"));
    assert!(
        e.contains("--threads") && e.contains("200") && e.contains("open files"),
        "{e}"
    );
}
