//! Attacks on `slipstream report` over runs made apart: on other machines, against servers
//! set otherwise (docs/bench.md, "The report" and "The run's context"). Written by helper h74.

use std::path::{Path, PathBuf};

use slipstream_testkit::Cluster;

mod common;
use common::{slipstream, text};

const WORKLOAD: &str = r#"
name = "ping"
[[transaction]]
name = "ping"
sql = "SELECT 1"
"#;

/// `slipstream bench ping.toml -u 1 -d 1s -w 0s -q` against `cluster`, into `dir/NAME.json`.
fn run(cluster: &Cluster, dir: &Path, name: &str) -> PathBuf {
    let workload = dir.join("ping.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let out = dir.join(format!("{name}.json"));
    let o = slipstream(
        &[
            "bench",
            workload.to_str().unwrap(),
            "-u",
            "1",
            "-d",
            "1s",
            "-w",
            "0s",
            "-q",
            "--url",
            &cluster.url(),
            "-o",
            out.to_str().unwrap(),
        ],
        dir,
    );
    assert!(o.status.success(), "{}", text(&o));
    out
}

/// Promise (docs/bench.md: the result file records its `environment`, "machine, CPUs,
/// PostgreSQL version, database URL", and its `context`, the server's settings; `report`
/// shows "several side by side"): a report of runs made on other machines, or against
/// servers set otherwise, says what differs between them, so a reader does not take a
/// machine's or a setting's difference for the workload's.
///
/// Steps: one run against a cluster at its defaults, one against a cluster with `work_mem =
/// 64MB`; the second's file edited as a run on another machine writes it (64 CPUs, another
/// CPU model). `report a.json b.json` and `report --html`.
///
/// Before the fix: neither the table nor the page showed the machine at all (the CPUs, the
/// CPU model and the OS are in each file, and nowhere in the report), and the two runs'
/// settings were only in each run's own list of sixteen, `work_mem=64MB` in one of them and
/// absent from the other, with nothing to say the runs differ there.
#[test]
fn report_says_what_differs_between_runs_from_other_machines_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Cluster::start().unwrap();
    let tuned = Cluster::builder()
        .setting("work_mem", "64MB")
        .start()
        .unwrap();
    let a = run(&plain, dir.path(), "a");
    let b = run(&tuned, dir.path(), "b");
    drop((plain, tuned));
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&b).unwrap()).unwrap();
    let here = v["environment"]["cpus"].as_u64().unwrap();
    let many = if here == 64 { 96 } else { 64 };
    v["environment"]["cpus"] = many.into();
    v["environment"]["cpu_model"] = "Some Other CPU @ 3.0GHz".into();
    std::fs::write(&b, serde_json::to_vec_pretty(&v).unwrap()).unwrap();

    let html = dir.path().join("r.html");
    let o = slipstream(
        &[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let said = text(&o);
    let page = std::fs::read_to_string(&html).unwrap();
    for (what, out) in [("the text report", &said), ("the page", &page)] {
        let differs = out
            .lines()
            .filter(|l| l.contains("differ"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            out.contains("Some Other CPU @ 3.0GHz"),
            "{what} does not show b's machine: {out}"
        );
        assert!(
            differs.contains("CPUs")
                && differs.contains(&here.to_string())
                && differs.contains(&many.to_string()),
            "{what} does not say the runs' CPUs differ ({here} and {many}): {differs}"
        );
        assert!(
            differs.contains("work_mem") && differs.contains("65536 kB"),
            "{what} does not say work_mem differs: {differs}"
        );
    }
    // One run: its machine is shown, and no line says anything differs.
    let o = slipstream(&["report", a.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{here} CPUs")) && !text(&o).contains("differ"),
        "{}",
        text(&o)
    );
}
