//! `stop_every_cluster`, the stop a command runs on Ctrl-C before it exits (testkit.md), against
//! a real PostgreSQL. It stops every cluster of its process, so each case runs in a child
//! process of its own (this test binary, running only the case's helper).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use slipstream_testkit::Cluster;

const HELPER: &str = "SLIPSTREAM_TESTKIT_STOP_HELPER";

/// Runs helper test `name` in a child process and returns its `RESULT` line.
fn in_child(name: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(HELPER, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| {
            panic!(
                "{name} printed no result: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The server's own stop timeout: a stop that takes this long waited for a server that had
/// already exited.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Helper: a cluster whose handle is never dropped (as when a signal ends the process), then
/// the stop, timed.
#[test]
fn stop_helper_forgotten_cluster() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    let cluster = Cluster::start().unwrap();
    let data = cluster.data_dir().to_path_buf();
    std::mem::forget(cluster);
    let started = Instant::now();
    let stopped = slipstream_testkit::stop_every_cluster();
    println!(
        "RESULT stopped={stopped} ms={} left={}",
        started.elapsed().as_millis(),
        data.exists()
    );
}

/// Promise: `stop_every_cluster` stops and removes each cluster and returns once its server
/// has exited. The server is this process's child, and an exited child is a zombie until it
/// is reaped, which no one does on the way out; the stop took the zombie for a running server
/// and waited out its whole 10 s timeout for each cluster, so Ctrl-C during `lab run failover`
/// (two clusters) could take 20 s to exit.
///
/// Before the fix: "stopped=1 ms=10032 left=false".
#[test]
fn the_stop_does_not_wait_for_a_server_that_has_exited() {
    let result = in_child("stop_helper_forgotten_cluster");
    let ms: u128 = result
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{result}"));
    assert!(
        result.starts_with("stopped=1 ") && result.ends_with("left=false"),
        "{result}"
    );
    assert!(
        ms < STOP_TIMEOUT.as_millis(),
        "the stop waited out its timeout: {result}"
    );
}

/// The throwaway cluster directories this process made: `owner` holds its PID and start time
/// (a directory left by an earlier process with the same PID, not yet swept, is not ours).
fn my_roots() -> Vec<PathBuf> {
    let base = std::env::temp_dir().join(format!(
        "slipstream-testkit-{}",
        nix::unistd::geteuid().as_raw()
    ));
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // `starttime` is field 22; fields after the command name's closing parenthesis start at 3.
    let started = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap();
    let me = format!("{} {started}", std::process::id());
    std::fs::read_dir(base)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|d| std::fs::read_to_string(d.join("owner")).is_ok_and(|t| t.trim() == me))
                .collect()
        })
        .unwrap_or_default()
}

/// PIDs of the processes running `postgres` on data directory `data`.
fn servers_on(data: &Path) -> Vec<u32> {
    let needle = data.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            !stat.contains(") Z ")
                && String::from_utf8_lossy(&cmdline)
                    .split('\0')
                    .any(|arg| arg == needle)
        })
        .collect()
}

/// Helper: the stop lands while a cluster's server is starting, as soon as the server has
/// been spawned (its log file exists), mostly before it has written its `postmaster.pid`.
#[test]
fn stop_helper_during_a_start() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    let start = std::thread::spawn(Cluster::start);
    let deadline = Instant::now() + Duration::from_secs(60);
    let root = loop {
        let spawned = my_roots().into_iter().find(|root| {
            std::fs::read_dir(root).is_ok_and(|mut files| {
                files.any(|f| {
                    f.is_ok_and(|f| f.file_name().to_string_lossy().starts_with("server-"))
                })
            })
        });
        if let Some(root) = spawned {
            break root;
        }
        assert!(Instant::now() < deadline, "no server was spawned");
        std::thread::sleep(Duration::from_micros(200));
    };
    let data = root.join("data");
    let pid_file_then = data.join("postmaster.pid").exists();
    let stop_began = Instant::now();
    let stopped = slipstream_testkit::stop_every_cluster();
    let stop_ms = stop_began.elapsed().as_millis();
    // The start ends either way: refused, failed, or a cluster whose server is stopped.
    let started = start.join().unwrap();
    let outcome = match &started {
        Ok(_) => "started".to_string(),
        Err(e) => format!("failed ({})", e.to_string().lines().next().unwrap_or("")),
    };
    std::mem::forget(started);
    // A signalled server may still be in its immediate shutdown when the stop gives up waiting
    // (its 10 s bound, on a loaded machine); one never signalled runs on until its minute's
    // lock-file recheck finds the directory gone. Waiting up to 30 s tells the two apart.
    let counted = Instant::now();
    let mut servers = servers_on(&data).len();
    while servers > 0 && counted.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
        servers = servers_on(&data).len();
    }
    println!(
        "RESULT stopped={stopped} servers={servers} left={} pid_file_then={pid_file_then} \
         stop_ms={stop_ms} gone_after_ms={} start={outcome}",
        root.exists(),
        counted.elapsed().as_millis(),
    );
}

/// Promise: a command stopped by a signal leaves no server running, also when the signal
/// lands while a server is starting. Before its `postmaster.pid` is written, the directory
/// alone cannot say a server runs on it, so the stop now also knows the server it spawned.
/// (Held before this change too in the local runs tried: a server whose directory is removed
/// while it starts fails and exits.)
///
/// A race, so it runs only in the long form (`SLIPSTREAM_ATTACK_LONG=1`, 20 rounds): its one
/// CI run (session 49) found a server still running 0.5 s after a stop that had waited out its
/// 10 s bound (`stopped=1 servers=1 left=false pid_file_then=false start=started`), which 57
/// local rounds, quiet and under load, never showed. The rounds now wait up to 30 s for a
/// signalled server to finish its immediate shutdown, and report how long the stop took.
#[test]
fn a_stop_while_a_server_starts_leaves_no_server() {
    if std::env::var_os("SLIPSTREAM_ATTACK_LONG").is_none() {
        eprintln!("a race attack: run with SLIPSTREAM_ATTACK_LONG=1");
        return;
    }
    for _ in 0..20 {
        let result = in_child("stop_helper_during_a_start");
        assert!(
            result.starts_with("stopped=1 servers=0 left=false "),
            "{result}"
        );
    }
}
