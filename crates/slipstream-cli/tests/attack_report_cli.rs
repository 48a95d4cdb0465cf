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
    run_workload(cluster, dir, "ping", WORKLOAD, name)
}

/// `slipstream bench FILE.toml -u 1 -d 1s -w 0s -q` of workload `toml` (written to
/// `dir/FILE.toml`) against `cluster`, into `dir/NAME.json`; the run must succeed.
fn run_workload(cluster: &Cluster, dir: &Path, file: &str, toml: &str, name: &str) -> PathBuf {
    let workload = dir.join(format!("{file}.toml"));
    std::fs::write(&workload, toml).unwrap();
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

/// The cells of the first row after the header of the `n`th `<table>` of `page` whose first
/// cell is `first` (or the first data row when `first` is empty).
fn row(page: &str, n: usize, first: &str) -> Vec<String> {
    let table = page.split("<table>").nth(n + 1).unwrap();
    let table = &table[..table.find("</table>").unwrap()];
    table
        .split("<tr>")
        .skip(2)
        .map(|r| {
            r.split("<td")
                .skip(1)
                .map(|c| c[c.find('>').unwrap() + 1..c.find("</td>").unwrap()].to_string())
                .collect::<Vec<_>>()
        })
        .find(|cells| first.is_empty() || cells[0] == first)
        .unwrap()
}

/// Promise (docs/bench.md, "The report": "max is the exact slowest success in every row ...
/// and the percentiles, tops of their buckets too, are held at it"): the page's summary at
/// the top shows the same p99 as the table under it, never one above the slowest success.
///
/// Steps: a run of 20 ms sleeps at one user (about 45 successes, so the p99 is the slowest's
/// HDR bucket, 16 µs wide there, 32 µs if the slowest took over 32.768 ms); its exact slowest success edited to the bottom of that
/// bucket, where a run's could have been; `report --html`; the summary's p99 read against the
/// table's `all` row.
///
/// Before the fix: the summary printed the bucket's top (e.g. 20.11) above the table's p99
/// and max of 20.10: the same figure twice on one page, and a p99 above the max.
#[test]
fn the_pages_summary_holds_its_p99_at_the_slowest_success() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start().unwrap();
    let out = run_workload(
        &cluster,
        dir.path(),
        "nap",
        "name = \"nap\"\n[[transaction]]\nname = \"nap\"\nsql = \"SELECT pg_sleep(0.02)\"\n",
        "nap",
    );
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let tx = &mut v["transactions"][0];
    let ok = tx["ok"].as_u64().unwrap();
    assert!(
        (10..=99).contains(&ok),
        "{ok} successes: the p99 is not the slowest's"
    );
    // The top of the slowest's bucket in µs. At three significant digits a bucket between
    // 2^k and 2^(k+1) µs is 2^(k-10) wide: 16 µs from 16.384 to 32.768 ms, where a 20 ms
    // sleep lands on a quiet machine, 32 µs above (a loaded one's slowest sleep can be
    // 35 ms, which made a fixed 16 µs fail once).
    let top = (tx["latency_ms"]["max"].as_f64().unwrap() * 1e3).round();
    assert!(top >= 16_384.0, "slowest {top} µs");
    let width = 2f64.powi(top.log2().floor() as i32 - 10);
    let bottom = top - (width - 1.0);
    tx["latency_stats"]["max"] = (bottom / 1e3).into();
    std::fs::write(&out, serde_json::to_vec_pretty(&v).unwrap()).unwrap();

    let html = dir.path().join("nap.html");
    let o = slipstream(
        &[
            "report",
            out.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    let summary = row(&page, 0, "");
    let all = row(&page, 1, "all");
    // summary: run, TPS, transactions, errors, p50, p99, ...; all: ..., p99, max.
    let (p99, max) = (&summary[5], &all[all.len() - 1]);
    assert_eq!(
        p99,
        &all[all.len() - 2],
        "the summary's p99 is not the table's: {summary:?} / {all:?}"
    );
    assert!(
        p99.parse::<f64>().unwrap() <= max.parse::<f64>().unwrap(),
        "the summary's p99 {p99} is above the slowest success {max}"
    );
}

/// Promise (docs/bench.md, "Several load generators": "merge combines load generators that
/// ran at the same time"; `users` the sum, `measured_s` the span): a merge of runs whose
/// windows never overlapped says so, rather than presenting their users as one load.
///
/// Steps: two 1 s runs of one workload file made one after the other (the second starts
/// after the first's process has ended, so their windows cannot overlap); `report --merge`.
///
/// Before the fix: merged silently as "2 users" over the span of both: a load that never
/// ran, and a TPS over a window half of which each part was idle, with nothing to say so
/// (a run starting within its length plus a minute of the first is taken as clock skew).
#[test]
fn a_merge_of_runs_that_never_overlapped_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start().unwrap();
    let a = run(&cluster, dir.path(), "first");
    let b = run(&cluster, dir.path(), "second");
    let merged = dir.path().join("all.json");
    let o = slipstream(
        &[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--merge",
            "-o",
            merged.to_str().unwrap(),
        ],
        dir.path(),
    );
    let said = text(&o);
    assert!(
        said.contains("never ran together") && said.contains("first") && said.contains("second"),
        "the merge does not say its parts never overlapped: {said}"
    );
    if o.status.success() {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&merged).unwrap()).unwrap();
        assert!(
            v["context"]["warnings"]
                .to_string()
                .contains("never ran together"),
            "the merged file does not say so: {}",
            v["context"]["warnings"]
        );
    }
}

/// Holds. Promise (docs/bench.md, "The report": the page shows "failure codes with their
/// first message" and the run's context, settings included): what the server sends, its
/// error messages and its settings' values, is text on the page, never markup, as names
/// from files are (`attack_outputs.rs` holds those).
///
/// Steps: a cluster whose `cluster_name` is an `<img onerror>` tag; a workload whose
/// transaction raises an exception whose message is a `<script>` tag (with quotes and `&`);
/// `report --html`; the page searched for either tag unescaped, and for their escaped forms.
#[test]
fn holds_server_messages_and_settings_are_text_on_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::builder()
        .setting("cluster_name", "'<img src=x onerror=alert(1)>'")
        .start()
        .unwrap();
    let out = run_workload(
        &cluster,
        dir.path(),
        "raise",
        r#"
name = "raise"
[[transaction]]
name = "raise"
sql = "DO $$ BEGIN RAISE EXCEPTION '<script>alert(\"x\") & more</script>'; END $$"
[[transaction]]
name = "ok"
sql = "SELECT 1"
"#,
        "raise",
    );
    let html = dir.path().join("raise.html");
    let o = slipstream(
        &[
            "report",
            out.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    for raw in ["<script", "<img"] {
        assert!(!page.contains(raw), "{raw} is markup on the page");
    }
    for escaped in [
        "&lt;script&gt;alert(&quot;x&quot;) &amp; more&lt;/script&gt;",
        "&lt;img src=x onerror=alert(1)&gt;",
    ] {
        assert!(page.contains(escaped), "{escaped} is missing from the page");
    }
}

/// Promise (docs/bench.md, "The result file": "An output that would replace a file the
/// command reads or another of its outputs is refused before anything runs"): `report
/// --merge -o` naming one of the parts, however spelled, is refused, and the part is kept.
///
/// Steps: two runs; `report a.json b.json --merge -o ./a.json`; a.json compared byte for
/// byte after.
///
/// Before the fix: the merged result replaced a.json, exit 0: the load generator's own result
/// was gone, and the merged file left in its place held it twice for the next merge.
#[test]
fn report_merge_refuses_an_output_that_names_one_of_its_parts() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start().unwrap();
    let a = run(&cluster, dir.path(), "a");
    let b = run(&cluster, dir.path(), "b");
    let before = std::fs::read(&a).unwrap();
    let spelled = dir.path().join(".").join("a.json");
    let o = slipstream(
        &[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--merge",
            "-o",
            spelled.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(
        !o.status.success(),
        "the merge replaced one of its parts: {}",
        text(&o)
    );
    assert!(text(&o).contains("-o"), "{}", text(&o));
    assert_eq!(std::fs::read(&a).unwrap(), before, "a.json was changed");
}

/// Promise (docs/bench.md, "Several load generators": load generators loading one server;
/// "the context kept is the first file's (it describes the same server)"): parts that ran
/// against servers of other versions were not loading one server, and are refused, naming
/// both files and versions, rather than added into one load whose context describes one of
/// them.
///
/// Steps: two runs against one cluster; the second's file edited as a run against
/// a PostgreSQL 16 server writes it (`environment.server_version`); `report --merge`.
///
/// Before the fix: merged, exit 0, its context the first part's (PostgreSQL 15) alone.
#[test]
fn a_merge_of_runs_against_servers_of_other_versions_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start().unwrap();
    let a = run(&cluster, dir.path(), "pg15");
    let b = run(&cluster, dir.path(), "pg16");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&b).unwrap()).unwrap();
    v["environment"]["server_version"] = "16.4 (Debian 16.4-1.pgdg120+2)".into();
    std::fs::write(&b, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let merged = dir.path().join("all.json");
    let o = slipstream(
        &[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--merge",
            "-o",
            merged.to_str().unwrap(),
        ],
        dir.path(),
    );
    let said = text(&o);
    assert!(!o.status.success(), "merged: {said}");
    assert!(
        said.contains("pg15") && said.contains("pg16") && said.contains("16.4"),
        "{said}"
    );
    assert!(!merged.exists());
}
