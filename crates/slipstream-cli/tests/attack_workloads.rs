//! Attacks on what `slipstream bench` promises about workload files and Order Entry's setup
//! (docs/bench.md, docs/custom-transactions.md; session 43, helper 47).

mod common;
use common::refused;

/// A workload file with setup SQL of its own.
const WITH_SETUP: &str = r#"
name = "kv"
setup = "CREATE TABLE IF NOT EXISTS kv (k int PRIMARY KEY)"
[[transaction]]
name = "read"
sql = "SELECT 1"
"#;

/// Promise (docs/bench.md, and `--scale`'s help: "Order Entry scale for --setup"): `--scale`
/// sizes Order Entry's load; given where it cannot apply, it is an error that says so (as
/// `--scale` without `--setup` is). Bad input is never silently dropped.
///
/// Steps: `bench FILE.toml --setup --scale 2` against a server that cannot be reached, so
/// nothing runs either way.
///
/// Before the fix: the scale was silently ignored; the command went on to connect for the
/// file's setup SQL (here: a connection error that says nothing of `--scale`; with a server,
/// it ran the file's setup and said "set up", at whatever size the file has).
#[test]
fn a_scale_given_with_a_workload_files_setup_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.toml");
    std::fs::write(&file, WITH_SETUP).unwrap();
    let said = refused(
        &[
            "bench",
            file.to_str().unwrap(),
            "--setup",
            "--scale",
            "2",
            "--url",
            "postgres://nobody@127.0.0.1:1/x",
        ],
        dir.path(),
        "--scale 2 applies only to Order Entry",
    );
    assert!(said.contains("Drop --scale"), "{said}");
}

/// Holds. Promise (docs/bench.md, "The run's context"): `slipstream bench` adds the command
/// line and, for a workload file, its SHA-256, so a result says which file made it.
///
/// Steps: two one-second runs of a file, the second after a comment is added to it. Each
/// result's `workload_sha256` is the file's SHA-256 as `sha256sum` computes it at the time
/// of the run (so the two differ), and its command line is the one given.
#[test]
fn the_workload_files_hash_is_the_files_and_follows_its_changes() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.toml");
    let mut hashes = Vec::new();
    for text in [WITH_SETUP.to_string(), format!("# changed\n{WITH_SETUP}")] {
        std::fs::write(&file, &text).unwrap();
        let sum = std::process::Command::new("sha256sum")
            .arg(&file)
            .output()
            .expect("sha256sum");
        let want = String::from_utf8(sum.stdout).unwrap();
        let want = want.split_whitespace().next().unwrap().to_string();
        let out = dir.path().join("run.json");
        let args = [
            "bench",
            file.to_str().unwrap(),
            "-u",
            "1",
            "-d",
            "1s",
            "-w",
            "0s",
            "-q",
            "--seed",
            "3",
            "--url",
            &cluster.url(),
            "-o",
            out.to_str().unwrap(),
        ];
        let o = common::slipstream(&args, dir.path());
        assert!(o.status.success(), "{}", common::text(&o));
        let run: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let ctx = &run["context"];
        assert_eq!(ctx["workload_sha256"].as_str(), Some(want.as_str()));
        let command: Vec<&str> = ctx["command_line"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(&command[1..], &args[..], "the command line as given");
        hashes.push(want);
    }
    assert_ne!(hashes[0], hashes[1]);
}

/// Promise (docs/bench.md: `--setup` "creates and loads the workload's schema instead of
/// running it"; bad input is never silently dropped): a flag that shapes a run, given with
/// `--setup`, is an error naming the flag and what to do, for Order Entry and for a file.
///
/// Steps: `bench W --setup FLAG` for every run-only flag, against a server that cannot be
/// reached, so nothing runs either way.
///
/// Before the fix (session 44): every one was ignored without a word; the command went on
/// to connect (here: a connection error that names none of them; with a server, it loaded
/// the schema and exited 0, and `--setup -u 64 -d 10m` looked like a run that had been made).
#[test]
fn run_only_flags_given_with_setup_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.toml");
    std::fs::write(&file, WITH_SETUP).unwrap();
    let nowhere = "postgres://nobody@127.0.0.1:1/x";
    let flags: [&[&str]; 16] = [
        &["-u", "64"],
        &["-d", "10m"],
        &["-w", "1s"],
        &["--ramp-up", "5s"],
        &["--stage", "10s:4"],
        &["-j", "2"],
        &["-r", "100"],
        &["--think", "1ms..2ms"],
        &["--intra-think", "1ms..2ms"],
        &["--mix", "read=1"],
        &["--reporting"],
        &["-o", "out.json"],
        &["--raw", "raw.csv"],
        &["--seed", "7"],
        &["--late-after", "5ms"],
        &["--grace", "1s"],
    ];
    for workload in ["order-entry", file.to_str().unwrap()] {
        for flag in flags {
            let mut args = vec!["bench", workload, "--setup", "--url", nowhere];
            args.extend(flag);
            let long = match flag[0] {
                "-u" => "--users",
                "-d" => "--duration",
                "-w" => "--warmup",
                "-j" => "--threads",
                "-r" => "--rate",
                "-o" => "--out",
                long => long,
            };
            let said = refused(
                &args,
                dir.path(),
                &format!("{long} applies to a run, not to --setup"),
            );
            assert!(said.contains("then run with"), "{said}");
        }
    }
}

/// Promise (bad input is never silently dropped; `--late-after`'s help: "Open loop: a
/// transaction starting later than this after its intended start is late"): in a closed-loop
/// run, which has no intended starts, `--late-after` is refused, naming it; with a rate (or
/// rate stages) it is taken.
///
/// Steps: `bench FILE.toml --late-after 5ms` without and with `-r`/`--stage D:rate=R`, against
/// a server that cannot be reached (the check comes before connecting).
///
/// Before the fix (session 51, found by helper h69): accepted without a word, changing
/// nothing.
#[test]
fn late_after_in_a_closed_loop_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.toml");
    std::fs::write(&file, WITH_SETUP).unwrap();
    let file = file.to_str().unwrap();
    let nowhere = "postgres://nobody@127.0.0.1:1/x?connect_timeout=2";
    let closed = [
        "bench",
        file,
        "--url",
        nowhere,
        "-d",
        "1s",
        "--late-after",
        "5ms",
    ];
    let said = refused(
        &closed,
        dir.path(),
        "--late-after applies to open-loop runs",
    );
    assert!(said.contains("drop --late-after"), "{said}");
    for open in [&["-r", "100"][..], &["--stage", "1s:rate=100"][..]] {
        let mut args = vec!["bench", file, "--url", nowhere, "--late-after", "5ms"];
        args.extend(open);
        let o = common::slipstream(&args, dir.path());
        let said = common::text(&o);
        assert!(!said.contains("--late-after applies"), "{args:?}: {said}");
    }
}

/// Promise (an error names what failed and what to do): a workload file's setup SQL runs as
/// one string of statements, and when one fails the error says which line of it.
///
/// Steps: `bench FILE --setup` with a mistake in the setup's third line.
///
/// Before the fix (session 51, found by helper h69): `the workload's setup SQL failed: type
/// "nosuchtype" does not exist`, leaving the user to find the statement.
#[test]
fn a_failing_setup_statement_is_named_by_its_line() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        r#"
name = "bad"
setup = """
CREATE TABLE IF NOT EXISTS a (x int);
CREATE TABLE IF NOT EXISTS b (x int);
CREATE TABLE IF NOT EXISTS c (y nosuchtype);
"""
[[transaction]]
name = "read"
sql = "SELECT 1"
"#,
    )
    .unwrap();
    let url = cluster.url();
    let said = refused(
        &["bench", file.to_str().unwrap(), "--setup", "--url", &url],
        dir.path(),
        "the workload's setup SQL failed at its line 3 (`CREATE TABLE IF NOT EXISTS c (y nosuchtype);`)",
    );
    assert!(said.contains("nosuchtype"), "{said}");
}

/// Promise (`--quiet`'s help: "No progress line"): with `--setup` it quiets the load's
/// progress lines, and is not refused as a run-only flag; the load's summary still prints.
///
/// Steps: Order Entry's smallest load with and without `--quiet`.
#[test]
fn quiet_quiets_the_setups_progress_lines() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.url();
    let load = |quiet: bool| {
        let mut args = vec!["bench", "order-entry", "--setup", "--scale", "0.0001"];
        args.extend(["--url", url.as_str()]);
        if quiet {
            args.push("-q");
        }
        let o = common::slipstream(&args, dir.path());
        assert!(o.status.success(), "{args:?}: {}", common::text(&o));
        let out = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out(&o.stdout), out(&o.stderr))
    };
    let (loud_out, loud_err) = load(false);
    let (quiet_out, quiet_err) = load(true);
    assert!(loud_err.contains("loading Order Entry"), "{loud_err}");
    assert!(!quiet_err.contains("loading"), "{quiet_err}");
    assert!(!quiet_err.contains("building indexes"), "{quiet_err}");
    for out in [loud_out, quiet_out] {
        assert!(
            out.starts_with("Order Entry loaded at scale 0.0001"),
            "{out}"
        );
    }
}
