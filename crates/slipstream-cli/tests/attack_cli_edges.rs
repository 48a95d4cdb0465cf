//! Attacks on the command line's edges (helper h80): output streams whose reader has gone, a
//! SIGTERM where only Ctrl-C was handled, and values clap took for flags.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use slipstream_testkit::Cluster;

mod common;
use common::{command, text};

/// The write end of a pipe whose read end is already closed: a write to it fails with EPIPE,
/// as stdout does under `slipstream ... | head -1` once `head` has exited.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer.into()
}

/// The rows of `psql` output for a one-value query.
fn one_value(cluster: &Cluster, sql: &str) -> String {
    cluster.psql(sql).unwrap().trim().to_string()
}

/// Waits (up to a hang guard) until `sql` returns `want` on `cluster`.
fn wait_for(cluster: &Cluster, sql: &str, want: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while one_value(cluster, sql) != want {
        assert!(Instant::now() < deadline, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to a hang guard) for `child` to exit.
/// Sends SIGTERM to `child` once its statement marked `marker` (a comment in its text) runs on
/// the server, and returns what the child printed and how it exited, once that statement has
/// ended on the server too. `what` names the statement in a failure.
fn terminate_while_running(cluster: &Cluster, child: Child, marker: &str, what: &str) -> Output {
    let running = format!(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE query LIKE '%{marker}%' AND pid <> pg_backend_pid()"
    );
    wait_for(
        cluster,
        &running,
        "1",
        &format!("{what} running on the server"),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let o = wait_output(child);
    wait_for(
        cluster,
        &running,
        "0",
        &format!("{what} ending on the server"),
    );
    o
}

fn wait_output(child: Child) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("slipstream did not exit within 60 s");
        }
    }
}

/// `lab run --json` whose stdout cannot take the table (`| head -1` gone, `> /dev/full`)
/// still writes its result file: the table is a view of the result, the file is the result.
/// Before, the table was printed first and its failed write ended the command: with a closed
/// pipe it exited 0 having written nothing (the run, 27 s for `connect`, silently lost), with
/// `/dev/full` it exited 1 having written nothing.
#[test]
fn lab_run_writes_its_json_when_stdout_cannot_take_the_table() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
            .into()
    };
    for (name, stdout) in [("closed-pipe", closed_pipe()), ("dev-full", full())] {
        let json = dir.path().join(format!("{name}.json"));
        let o = command(
            &[
                "lab",
                "run",
                "proxy",
                "--quick",
                "--json",
                json.to_str().unwrap(),
                "--url",
                &cluster.url(),
            ],
            dir.path(),
        )
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
        let said = text(&o);
        assert!(
            json.exists(),
            "{name}: no result file; exit {:?}: {said}",
            o.status.code()
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["experiment"], "proxy", "{name}");
        if name == "dev-full" {
            // The table was lost, and the command says so.
            assert_eq!(o.status.code(), Some(1), "{name}: {said}");
            assert!(said.contains("stdout"), "{name}: {said}");
        }
    }
}

/// A notice whose stderr reader has gone (`slipstream sql ... 2>&1 | head -1`) does not
/// panic the command: its result is still printed and its status is the statements'. Before,
/// the notice handler's `eprintln!` panicked: exit 101, and the INSERT's committed result
/// never printed.
#[test]
fn sql_with_a_closed_stderr_prints_its_result() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = command(
        &[
            "sql",
            "DO $$ BEGIN RAISE NOTICE 'hello'; END $$; SELECT 41 + 1 AS answer",
            "--url",
            &cluster.url(),
        ],
        dir.path(),
    )
    .stdout(Stdio::piped())
    .stderr(closed_pipe())
    .output()
    .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "stdout: {out}");
    assert!(out.contains("42") && out.contains("(1 row)"), "{out}");
    // An error to a closed stderr: the status still says it failed.
    let o = command(&["sql", "SELECT 1/0", "--url", &cluster.url()], dir.path())
        .stdout(Stdio::piped())
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

/// A failed statement is a failure even when stdout has gone (`| head -1`): the reply of the
/// statements before it cannot be shown, but the exit status must not turn into success.
/// Before, the failed write of that reply ended the command as "broken pipe is success":
/// `slipstream sql "SELECT 1; SELECT 1/0" | true` exited 0.
#[test]
fn a_failed_statement_fails_with_a_closed_stdout() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = command(
        &["sql", "SELECT 1; SELECT 1/0", "--url", &cluster.url()],
        dir.path(),
    )
    .stdout(closed_pipe())
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("division by zero"), "{said}");
}

/// SIGTERM during `slipstream sql` (a CI job's timeout, `kill`) cancels the statement on the
/// server, as Ctrl-C does, and exits 130. Before, SIGTERM killed the process at once and the
/// server ran the statement to its end: the INSERT below committed its row after the command
/// was stopped.
#[test]
fn sigterm_during_sql_cancels_the_statement_on_the_server() {
    let cluster = Cluster::start().unwrap();
    cluster.psql("CREATE TABLE termed (n int)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let child = command(
        &[
            "sql",
            "INSERT INTO termed SELECT 1 FROM pg_sleep(3) /* sql-sigterm */",
            "--url",
            &cluster.url(),
        ],
        dir.path(),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Whatever the server does with the statement, it is over before its 3 s were up.
    let o = terminate_while_running(&cluster, child, "sql-sigterm", "the statement");
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert_eq!(
        one_value(&cluster, "SELECT count(*) FROM termed"),
        "0",
        "the INSERT stopped by SIGTERM committed: {}",
        text(&o)
    );
}

/// A negative value is refused with the flag's own message, not clap's tip to pass it after
/// `--` (which would make `-1s` the workload). Before, `bench x -d -1s` said "unexpected
/// argument '-1' found; tip: to pass '-1' as a value, use '-- -1'".
#[test]
fn a_negative_duration_or_rate_is_refused_with_what_to_give() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, want) in [
        ("-d", "-1s", "negative"),
        ("--duration", "-5m", "negative"),
        ("-w", "-1s", "negative"),
        ("--ramp-up", "-1s", "negative"),
        ("--grace", "-1s", "negative"),
        ("--late-after", "-1ms", "negative"),
        ("-r", "-5", "--rate"),
        ("--think", "-1ms..2ms", "--think"),
        ("--intra-think", "-1ms..2ms", "--intra-think"),
        ("--stage", "-1s:2", "--stage"),
        ("-u", "-1", "--users"),
        ("-j", "-1", "--threads"),
        ("--seed", "-1", "--seed"),
        ("--scale", "-1", "--scale"),
    ] {
        // A server that is not there: nothing here may need one.
        let args = [
            "bench",
            "order-entry",
            flag,
            value,
            "--url",
            "postgres://127.0.0.1:1/x",
        ];
        let o = command(&args, dir.path()).output().unwrap();
        let said = text(&o);
        assert!(!o.status.success(), "{flag} {value}: {said}");
        assert!(
            said.contains(want) && !said.contains("use '-- "),
            "{flag} {value}: no {want:?}, or clap's `--` tip, in: {said}"
        );
    }
}

/// A warm-up longer than the wall clock can count (chrono's range, about 292 million years)
/// is refused with what to change, as a run that long already was. Before, the check only
/// asked the monotonic clock, which counts further, and the run panicked (exit 101) once its
/// users had connected, adding the warm-up to the wall-clock start.
#[test]
fn a_warmup_past_the_wall_clocks_range_is_refused() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    let o = bench_select_one(
        dir.path(),
        &cluster.url(),
        "99999999999999h",
        &["-o", out.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let said = text(&o);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("--warmup"), "{said}");
}

/// SQL that starts with a comment (`-- what this checks` on its first line) is SQL, run as
/// psql's `-c` runs it. Before, clap took it for an unknown flag: "unexpected argument '--
/// comment' found", with a tip to use `--home`.
#[test]
fn sql_starting_with_a_comment_runs() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.url();
    for args in [
        ["sql", "-- the answer\nSELECT 42 AS answer", "--url", &url],
        ["sql", "--url", &url, "-- the answer\nSELECT 42 AS answer"],
    ] {
        let o = command(&args, dir.path()).output().unwrap();
        let said = text(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {said}");
        assert!(said.contains("42") && said.contains("(1 row)"), "{said}");
    }
    // `--help` is still help.
    let o = command(&["sql", "--help"], dir.path()).output().unwrap();
    assert!(
        o.status.success() && text(&o).contains("Usage"),
        "{}",
        text(&o)
    );
}

/// `lab run --json` to a stream (a FIFO here; `/dev/stdout`, which docs/lab.md names, is
/// the same) writes the JSON there and puts no chart "beside" it: there is no directory
/// entry to put one beside. Before, the default chart went to `<stream>.svg`: a file
/// created in /dev for root (`/dev/stdout.svg`, `/dev/null.svg`), and for anyone else
/// "cannot write /dev/stdout.svg: Permission denied", refusing the documented
/// `--json /dev/stdout` before the run.
#[test]
fn lab_run_json_to_a_stream_puts_no_chart_beside_it() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("stream");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let o = command(
        &[
            "lab",
            "run",
            "proxy",
            "--quick",
            "--json",
            fifo.to_str().unwrap(),
            "--url",
            &cluster.url(),
        ],
        dir.path(),
    )
    .output()
    .unwrap();
    let said = text(&o);
    if !o.status.success() {
        // Unblock the reader, which waits for a writer that never came.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
    }
    let json = reader.join().unwrap();
    assert!(o.status.success(), "{said}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["experiment"], "proxy");
    assert!(
        !dir.path().join("stream.svg").exists(),
        "a chart was written beside the stream: {said}"
    );
}

/// SIGTERM during `bench --setup` cancels the setup SQL on the server and exits 130, as
/// Ctrl-C does (docs/bench.md). Before 8e5bbfe, SIGTERM killed the process and the server
/// ran the SQL to its end, committing the table after the setup was stopped.
#[test]
fn sigterm_during_a_workload_setup_cancels_it_on_the_server() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("setup.toml");
    std::fs::write(
        &file,
        "name = \"made\"\nsetup = \"CREATE TABLE made (n int); INSERT INTO made SELECT 1 FROM pg_sleep(3) /* setup-sigterm */\"\n[[transaction]]\nname = \"one\"\nsql = \"SELECT 1\"\n",
    )
    .unwrap();
    let child = command(
        &[
            "bench",
            file.to_str().unwrap(),
            "--setup",
            "--url",
            &cluster.url(),
        ],
        dir.path(),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let o = terminate_while_running(&cluster, child, "setup-sigterm", "the setup SQL");
    let said = text(&o);
    assert_eq!(o.status.code(), Some(130), "{said}");
    assert!(said.contains("setup cancelled on the server"), "{said}");
    assert_eq!(
        one_value(&cluster, "SELECT to_regclass('made') IS NULL"),
        "t",
        "the setup stopped by SIGTERM committed its table: {said}"
    );
}

/// Destroys the embedded cluster of `home` when dropped, and kills `victim`.
struct Teardown {
    home: std::path::PathBuf,
    victim: Option<Child>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(v) = self.victim.as_mut() {
            let _ = v.kill();
            let _ = v.wait();
        }
        let _ = common::slipstream(&["db", "destroy"], &self.home);
    }
}

/// A stale `postmaster.pid` whose PID now belongs to a process that works in the data
/// directory (a shell `cd`'d there to read the files, after a reboot or a `kill -9`) is not
/// taken for the server: the module's promise is that a reused PID can neither make a
/// command report a server that is not there, nor get a process that is not ours signalled.
/// Before, "the PID works in the data directory" was the whole test of a postmaster: `db
/// status` said "running" on a port nothing listened on, and `db stop` had pg_ctl send that
/// process SIGINT.
#[test]
fn a_reused_pid_working_in_the_data_directory_is_not_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut teardown = Teardown {
        home: home.clone(),
        victim: None,
    };
    let start = common::slipstream(&["db", "start"], &home);
    assert!(start.status.success(), "{}", text(&start));
    let status = text(&common::slipstream(&["db", "status"], &home));
    let data = std::path::PathBuf::from(
        status
            .trim()
            .rsplit_once("(data ")
            .and_then(|(_, d)| d.strip_suffix(')'))
            .unwrap_or_else(|| panic!("no data directory in: {status}")),
    );
    let stop = common::slipstream(&["db", "stop"], &home);
    assert!(stop.status.success(), "{}", text(&stop));
    // Another process of the server's OS user (`postgres` when run as root), working in the
    // data directory, now has the PID the lock file names.
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("60").current_dir(&data);
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt as _;
        let postgres = nix::unistd::User::from_name("postgres")
            .unwrap()
            .expect("a postgres user");
        sleep.uid(postgres.uid.as_raw()).gid(postgres.gid.as_raw());
    }
    let victim = sleep.spawn().unwrap();
    let pid = victim.id();
    teardown.victim = Some(victim);
    std::fs::write(
        data.join("postmaster.pid"),
        format!(
            "{pid}\n{}\n1700000000\n1\n\n127.0.0.1\n  0 0\nready   \n",
            data.display()
        ),
    )
    .unwrap();
    let status = text(&common::slipstream(&["db", "status"], &home));
    let stop = common::slipstream(&["db", "stop"], &home);
    let victim_alive = matches!(teardown.victim.as_mut().unwrap().try_wait(), Ok(None));
    assert!(
        victim_alive,
        "`db stop` signalled process {pid}: {}",
        text(&stop)
    );
    assert!(status.starts_with("stopped"), "{status}");
    // And the cluster starts again, the stale lock file out of its way.
    let start = common::slipstream(&["db", "start"], &home);
    let sql = common::slipstream(&["sql", "SELECT 41 + 1"], &home);
    assert!(
        start.status.success() && text(&sql).contains("42"),
        "start: {}\nsql: {}",
        text(&start),
        text(&sql)
    );
}

/// `slipstream ARGS` with `home`, as the `postgres` user when run as root (so that the data,
/// and the Unix socket, go in the home, as for any user but root).
fn as_non_root(args: &[&str], home: &std::path::Path) -> Output {
    let mut cmd = command(args, home);
    cmd.current_dir(home.parent().unwrap());
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::process::CommandExt as _;
        let postgres = nix::unistd::User::from_name("postgres")
            .unwrap()
            .expect("a postgres user");
        cmd.uid(postgres.uid.as_raw()).gid(postgres.gid.as_raw());
    }
    cmd.output().unwrap()
}

/// Destroys the embedded cluster of a home [`as_non_root`] when dropped.
struct DestroyAsNonRoot(std::path::PathBuf);

impl Drop for DestroyAsNonRoot {
    fn drop(&mut self) {
        let _ = as_non_root(&["db", "destroy"], &self.0);
    }
}

/// A home whose path ends in a space starts, as any other path does. For a user other than
/// root the Unix socket goes in the home, through `unix_socket_directories`, a list whose
/// elements PostgreSQL trims. Before, the server looked for `/path/home` (no space), every
/// start failed with "could not create lock file \".../home/.s.PGSQL.<port>.lock\": No such
/// file or directory", and the advice was to destroy the data, which was whole.
#[test]
fn a_home_ending_in_a_space_starts() {
    let base = tempfile::tempdir().unwrap();
    if nix::unistd::geteuid().is_root() {
        let postgres = nix::unistd::User::from_name("postgres")
            .unwrap()
            .expect("a postgres user");
        std::os::unix::fs::chown(
            base.path(),
            Some(postgres.uid.as_raw()),
            Some(postgres.gid.as_raw()),
        )
        .unwrap();
    }
    let home = base.path().join("home ");
    let _destroy = DestroyAsNonRoot(home.clone());
    let start = as_non_root(&["db", "start"], &home);
    assert!(start.status.success(), "{}", text(&start));
    let sql = as_non_root(&["sql", "SELECT 41 + 1"], &home);
    assert!(text(&sql).contains("42"), "{}", text(&sql));
}

/// `--url` given to a `db` command, which manages only the embedded cluster, is refused
/// naming the flag, not silently ignored: `slipstream db status --url postgres://db:5432/x`
/// answered about the embedded cluster (and `db stop --url ...` stopped it), as if that were
/// the server named.
#[test]
fn a_db_command_refuses_url() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    // What a `db start` that took no notice of --url started.
    let _teardown = Teardown {
        home: home.clone(),
        victim: None,
    };
    for cmd in ["start", "stop", "status", "url", "destroy"] {
        let o = command(&["db", cmd, "--url", "postgres://127.0.0.1:1/x"], &home)
            .output()
            .unwrap();
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "db {cmd}: {said}");
        assert!(said.contains("--url"), "db {cmd}: {said}");
    }
    assert!(!home.exists(), "a refused db command made the home");
}

/// The throwaway cluster directories process `pid` made (the testkit marks each with its
/// maker in an `owner` file).
fn clusters_made_by(pid: u32) -> Vec<std::path::PathBuf> {
    let base = std::env::temp_dir().join(format!(
        "slipstream-testkit-{}",
        nix::unistd::geteuid().as_raw()
    ));
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|dir| {
            std::fs::read_to_string(dir.join("owner"))
                .is_ok_and(|t| t.split_whitespace().next() == Some(&pid.to_string()))
        })
        .collect()
}

/// SIGTERM during `lab run` whose stderr reader has gone (`2>&1 | head -1`) still stops the
/// experiment's private cluster and exits 130 (docs/lab.md). Before 0151a24, the stop
/// thread's `eprintln!` panicked once the clusters were down, before its `exit(130)`, and
/// the main thread, seeing the stop under way, waited for that exit forever: a hang.
#[test]
fn sigterm_during_lab_run_with_a_closed_stderr_exits_130() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let child = command(
        &[
            "lab",
            "run",
            "pk-lookup",
            "--quick",
            "--url",
            &cluster.url(),
        ],
        dir.path(),
    )
    .stdout(Stdio::piped())
    .stderr(closed_pipe())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let made = loop {
        let made = clusters_made_by(child.id());
        // Its server is up once postmaster.pid names a port (its fourth line).
        if made.iter().any(|d| {
            std::fs::read_to_string(d.join("data/postmaster.pid"))
                .is_ok_and(|t| t.lines().count() >= 4)
        }) {
            break made;
        }
        assert!(
            Instant::now() < deadline,
            "pk-lookup started no private cluster"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let o = wait_output(child);
    assert_eq!(o.status.code(), Some(130));
    for d in made {
        assert!(!d.exists(), "{} left behind", d.display());
    }
}

/// Holds (docs/testkit.md): `db stop` during a `bench` on the embedded cluster stops the
/// server under the run, which ends on time, writes its result and counts the transactions
/// the stop cost as failures (the server's 57P01, then `client:no-connection`), not as
/// successes or silence.
#[test]
fn holds_db_stop_during_a_bench_is_counted_in_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let _teardown = Teardown {
        home: home.clone(),
        victim: None,
    };
    let start = common::slipstream(&["db", "start"], &home);
    assert!(start.status.success(), "{}", text(&start));
    let workload = dir.path().join("nap.toml");
    std::fs::write(
        &workload,
        "name = \"nap\"\n[[transaction]]\nname = \"nap\"\nsql = \"SELECT pg_sleep(0.01) /* h80-nap */\"\n",
    )
    .unwrap();
    let out = dir.path().join("nap.json");
    let bench = command(
        &[
            "bench",
            workload.to_str().unwrap(),
            "-u",
            "2",
            "-d",
            "3s",
            "-w",
            "0s",
            "-q",
            "-o",
            out.to_str().unwrap(),
        ],
        &home,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = common::slipstream(
            &[
                "sql",
                "SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE '%h80-nap%' AND pid <> pg_backend_pid()",
            ],
            &home,
        );
        let said = text(&o);
        if said.lines().nth(2).is_some_and(|l| l.trim() != "0") {
            break;
        }
        assert!(Instant::now() < deadline, "the bench never ran: {said}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stop = common::slipstream(&["db", "stop"], &home);
    assert!(stop.status.success(), "{}", text(&stop));
    let o = wait_output(bench);
    let said = text(&o);
    assert!(matches!(o.status.code(), Some(0 | 2)), "{said}");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let failed: u64 = run["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["failed"].as_u64().unwrap())
        .sum();
    assert!(failed > 0, "the stop cost no transaction: {said}");
    assert!(
        said.contains("57P01") || said.contains("no-connection"),
        "{said}"
    );
}

/// `bench -o /dev/stdout` whose reader has gone (`| head -c 100`) is a closed pipe, as for
/// `lab run --json /dev/stdout`: no failure, and no advice about disk space. Before, it
/// exited 1 saying "free space there or give another -o".
#[test]
fn bench_to_a_closed_stdout_is_not_a_full_disk() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = bench_select_one(dir.path(), &cluster.url(), "0s", &["-o", "/dev/stdout"])
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = text(&o);
    assert!(!said.contains("free space"), "{said}");
    assert_eq!(o.status.code(), Some(0), "{said}");
}

/// A `bench` refused for its arguments (a misspelt workload, a flag `--setup` has no use
/// for) starts no database first: the embedded cluster is created and started only for a
/// command that will use it. Before, `slipstream bench order-entyr` created and started the
/// embedded cluster ("started the embedded PostgreSQL at ...") and then said the workload
/// was unknown.
#[test]
fn a_bench_refused_for_its_arguments_starts_no_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let _teardown = Teardown {
        home: home.clone(),
        victim: None,
    };
    for (args, want) in [
        (&["bench", "order-entyr"][..], "unknown workload"),
        (
            &["bench", "order-entry", "--setup", "-u", "4"][..],
            "--setup",
        ),
        (&["bench", "order-entry", "--scale", "1"][..], "--scale"),
    ] {
        let o = command(args, &home).output().unwrap();
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {said}");
        assert!(said.contains(want), "{args:?}: {said}");
        assert!(!said.contains("started the embedded"), "{args:?}: {said}");
    }
    assert!(!home.exists(), "the home was created");
}

/// `lab run --svg /dev/stdout > chart.svg` leaves a chart in chart.svg: the table goes to
/// stderr, as it does for `--json /dev/stdout` (docs/lab.md). Before, the table went to
/// stdout too, over the chart's first bytes: the file began "fetch-size: Fetch size: ..."
/// and was no SVG.
#[test]
fn lab_run_svg_to_stdout_holds_the_chart_alone() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let o = command(
        &[
            "lab",
            "run",
            "fetch-size",
            "--quick",
            "--svg",
            "/dev/stdout",
            "--url",
            &cluster.url(),
        ],
        dir.path(),
    )
    .stdout(std::fs::File::create(&chart).unwrap())
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.trim_start().starts_with('<') && svg.trim_end().ends_with("</svg>"),
        "not an SVG alone: {:?} ... {:?}",
        &svg[..svg.len().min(80)],
        &svg[svg.len().saturating_sub(80)..]
    );
    assert!(
        said.contains("fetch-size"),
        "the table went nowhere: {said}"
    );
}

/// `bench --raw /dev/stdout > raw.csv` leaves CSV alone in raw.csv: the table goes to stderr,
/// as it does for `-o /dev/stdout`. Before, the run's description and table followed the
/// CSV lines into the file.
#[test]
fn bench_raw_to_stdout_holds_the_csv_alone() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.csv");
    let out = dir.path().join("out.json");
    let o = bench_select_one(
        dir.path(),
        &cluster.url(),
        "0s",
        &["-o", out.to_str().unwrap(), "--raw", "/dev/stdout"],
    )
    .stdout(std::fs::File::create(&raw).unwrap())
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    let csv = std::fs::read_to_string(&raw).unwrap();
    assert!(
        !csv.contains("transaction  count"),
        "the table is in the CSV: {:?}",
        &csv[csv.len().saturating_sub(300)..]
    );
    assert!(
        said.contains("transaction  count"),
        "the table went nowhere: {said}"
    );
}

/// A psql meta-command (`\dt`, `\copy`) is named as one, with what to do, not answered with
/// the server's bare "syntax error at or near \"\\\"": `sql`'s own advice for COPY sends the
/// user to psql's `\copy`, which `sql` then could not say it does not run.
#[test]
fn a_psql_meta_command_is_named_as_one() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for query in ["\\dt", "  \\copy t to 'x'"] {
        let o = command(&["sql", query, "--url", &cluster.url()], dir.path())
            .output()
            .unwrap();
        let said = text(&o);
        assert_eq!(o.status.code(), Some(1), "{query}: {said}");
        assert!(
            said.contains("meta-command") && said.contains("psql"),
            "{query}: {said}"
        );
    }
}

/// An empty query, or one of comments and semicolons alone, prints nothing and succeeds, as
/// `psql -c ''` does. Before, `slipstream sql ''` printed an empty line.
#[test]
fn an_empty_query_prints_nothing() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for query in ["", " ; ", "-- nothing"] {
        let o = command(&["sql", "--url", &cluster.url(), query], dir.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{query:?}: {}", text(&o));
        assert!(
            o.stdout.is_empty(),
            "{query:?} printed {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

/// `slipstream bench` of a workload file (written in `dir`) whose one transaction is
/// `SELECT 1`: one user for one second after a warm-up of `warmup`, quiet, against `url`, with
/// `extra` arguments; the command, for the caller to set its streams.
fn bench_select_one(dir: &Path, url: &str, warmup: &str, extra: &[&str]) -> Command {
    let workload = dir.join("one.toml");
    std::fs::write(
        &workload,
        "name = \"one\"\n[[transaction]]\nname = \"one\"\nsql = \"SELECT 1\"\n",
    )
    .unwrap();
    let mut args = vec![
        "bench",
        workload.to_str().unwrap(),
        "-u",
        "1",
        "-d",
        "1s",
        "-w",
        warmup,
        "-q",
        "--url",
        url,
    ];
    args.extend_from_slice(extra);
    command(&args, dir)
}

/// Promise (README / `slipstream --help`: commands that need a database use `--url`, else
/// `DATABASE_URL`, else the PG* variables, else the embedded cluster): a `DATABASE_URL`
/// that is set is the database, or the command fails naming it. Its value need not be
/// UTF-8 (a Latin-1 locale's password or database name).
///
/// Steps: `slipstream sql "SELECT current_setting('port')"` with `DATABASE_URL` set to a
/// URL with a Latin-1 byte and a fresh `SLIPSTREAM_HOME`; it must fail naming
/// `DATABASE_URL`, and start no embedded cluster (within 60 s).
///
/// Before the fix: the value read as unset (`env::var(..).ok()`), and the command went on
/// without it (to the embedded cluster) and answered from another server, port 38737: a
/// bench would have measured a server the user never named.
#[test]
fn a_database_url_that_is_not_utf8_is_refused_not_passed_over() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&["sql", "SELECT current_setting('port')"], dir.path());
    cmd.env(
        "DATABASE_URL",
        std::ffi::OsStr::from_bytes(b"postgres://app@127.0.0.1:1/caf\xe9"),
    );
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no end within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let said = text(&out);
    // Stop an embedded cluster the old code started, whatever the verdict.
    let _ = common::slipstream(&["db", "stop"], dir.path());
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("DATABASE_URL") && !said.contains("embedded"),
        "{said}"
    );
}
