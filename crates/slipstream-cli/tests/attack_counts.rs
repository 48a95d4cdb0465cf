//! `slipstream bench`'s exit status held to what its result counts (helper h77: "nothing is
//! lost and every count is true").

mod common;

/// Promise (docs/bench.md, "Exit status": 2 when every transaction of the window failed, "the
/// result is written, but measures nothing"; the CLI's own comment: "a run in which nothing
/// succeeded measured nothing: a script or a CI job must not take it for a result").
///
/// Steps: a workload whose one transaction sleeps 30 s on the server (a stalled server, or a
/// table a forgotten session keeps locked, does the same), run for 1 s at two users with a
/// 300 ms grace period: both users' transactions are censored, nothing succeeds or fails.
///
/// Before the fix: exit status 0 and a table of 0 TPS, so a CI job took a run that measured
/// nothing for a result; only a run whose transactions all failed exited 2.
#[test]
fn a_run_whose_every_transaction_was_cut_off_is_not_a_success() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stalled.toml");
    std::fs::write(
        &file,
        "name = \"stalled\"\n[[transaction]]\nname = \"sleep\"\nsql = \"SELECT pg_sleep(30)\"\n",
    )
    .unwrap();
    let out = dir.path().join("run.json");
    let url = cluster.url();
    let o = common::slipstream(
        &[
            "bench",
            file.to_str().unwrap(),
            "-u",
            "2",
            "-d",
            "1s",
            "-w",
            "0s",
            "--grace",
            "300ms",
            "-q",
            "--url",
            &url,
            "-o",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    let said = common::text(&o);
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("the result is written"))
            .unwrap();
    let t = &run["transactions"][0];
    assert_eq!(
        (
            t["ok"].as_u64(),
            t["failed"].as_u64(),
            run["unfinished"].as_u64()
        ),
        (Some(0), Some(0), Some(2)),
        "{said}"
    );
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("nothing finished"), "{said}");
}
