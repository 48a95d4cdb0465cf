//! What a throwaway cluster leaves behind when the process that owns it dies without unwinding
//! (a CI job's timeout kill, the OOM killer, `kill -9`): against a real PostgreSQL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use slipstream_testkit::Cluster;

const HELPER: &str = "SLIPSTREAM_ATTACK_KILLED_OWNER_HELPER";

/// Run in a child process by the test below: starts a cluster, says where, and waits.
#[test]
fn killed_owner_helper() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    let cluster = Cluster::start().unwrap();
    println!(
        "ATTACK data={} pid={}",
        cluster.data_dir().display(),
        cluster.server_pid().unwrap()
    );
    std::thread::sleep(Duration::from_secs(120));
}

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// Promise (testkit.md): a cluster's server gets an immediate shutdown and its directory is
/// deleted when the cluster is dropped, even while a test panics. A test process killed with
/// SIGKILL never drops it; the next cluster started (by any later test process of the same
/// user) stops that orphan's server and removes its directory. Before, the server ran on for
/// good (holding its port, memory and a 39 MB data directory) and no later run reclaimed it.
#[test]
fn a_killed_test_process_leaves_no_server_behind_the_next_cluster() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_owner_helper",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(HELPER, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    // libtest may print "test killed_owner_helper ... " before it on the same line.
    while !line.contains("ATTACK ") {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "helper ended early"
        );
    }
    let data = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("data="))
        .unwrap()
        .to_string();
    let pid: i32 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .unwrap()
        .parse()
        .unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // This process's first cluster sweeps the orphans of dead test processes.
    let next = Cluster::start().unwrap();
    drop(next);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let still_running = alive(pid);
    // Clean up what the helper left.
    if still_running {
        let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
        std::thread::sleep(Duration::from_secs(1));
    }
    let root = std::path::Path::new(&data).parent().unwrap().to_path_buf();
    let left = root.exists();
    let _ = std::fs::remove_dir_all(&root);
    assert!(
        !left,
        "the dead test process's cluster directory {} is left",
        root.display()
    );
    assert!(
        !still_running,
        "the server (pid {pid}, data {data}) still runs after its test process was killed and another cluster started"
    );
}
