//! Attacks on what `slipstream bench` and `slipstream report` write: the result, the raw CSV
//! and the HTML page, where they could cost a run or a file the user did not ask to replace
//! (session 42, helper 34).

use std::path::Path;
use std::process::Output;

use slipstream_testkit::Cluster;

mod common;
use common::{refused, slipstream, text};

/// A workload of two cheap types: a run of a second records thousands of transactions.
const WORKLOAD: &str = r#"
name = "kv"
[params]
n = { dist = "uniform", min = 1, max = 100 }
[[transaction]]
name = "read"
weight = 3
sql = "SELECT :n::int + 1"
[[transaction]]
name = "write"
sql = "SELECT :n::int * 2"
"#;

/// `slipstream bench WORKLOAD -u 2 -d 1s -w 0s -q --url URL` and `extra`.
fn bench(workload: &Path, extra: &[&str], url: &str, dir: &Path) -> Output {
    let mut args = vec![
        "bench",
        workload.to_str().unwrap(),
        "-u",
        "2",
        "-d",
        "1s",
        "-w",
        "0s",
        "-q",
        "--url",
        url,
    ];
    args.extend_from_slice(extra);
    slipstream(&args, dir)
}

/// Promise (docs/bench.md, "The result file"): a run's result is written; `-o` is checked
/// before the run so that the window's work is not lost at the end. `--raw` is an extra:
/// its failing must not cost the result.
///
/// Steps: a one-second run with `--raw /dev/full` (every write to it fails with ENOSPC once
/// the CSV's buffer fills, which thousands of lines do).
///
/// Before the fix: the run's whole window ran, then it failed with "writing the raw CSV
/// failed: No space left on device", exit 1, and no result file: the run was lost for its
/// side output. Now the result is written whole, with a warning naming the CSV and the error.
#[test]
fn a_raw_csv_that_cannot_be_written_does_not_cost_the_result() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let out = dir.path().join("kv.json");
    let o = bench(
        &workload,
        &["-o", out.to_str().unwrap(), "--raw", "/dev/full"],
        &cluster.url(),
        dir.path(),
    );
    assert!(
        o.status.success(),
        "a raw CSV that could not be written failed the run: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("/dev/full"),
        "the output does not name the raw CSV that failed: {}",
        text(&o)
    );
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).expect("no result written")).unwrap();
    let ok: u64 = run["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["ok"].as_u64().unwrap())
        .sum();
    assert!(ok > 0, "the result holds no transaction: {run}");
    let warnings = run["context"]["warnings"].to_string();
    assert!(
        warnings.contains("raw CSV") && warnings.contains("/dev/full"),
        "the result does not say its raw CSV is incomplete: {warnings}"
    );
}

/// Promise (docs/bench.md: "a result that cannot be written is a run lost"; the brief's "bad
/// input gives a clear error, never silent loss"): an output never replaces a file the
/// command reads, nor another of its own outputs.
///
/// Steps: `bench kv.toml -o kv.toml`, `bench kv.toml --raw kv.toml` and `bench kv.toml
/// -o r.json --raw ./r.json` against a server that does not exist (so nothing but the check
/// can refuse them first), the workload file compared byte for byte after each.
///
/// Before the fix: `-o kv.toml` ran and replaced the workload file with the result;
/// `--raw kv.toml` truncated the workload file before connecting (here: the connect error,
/// and the file gone); `-o r.json --raw r.json` ran and the result replaced the CSV, both
/// silently, exit 0.
#[test]
fn bench_refuses_an_output_that_names_its_workload_file_or_its_other_output() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let w = workload.to_str().unwrap();
    // `./r.json` and `r.json` from the same directory: one file spelled twice.
    let r = dir.path().join("r.json");
    let r_dotted = dir.path().join(".").join("r.json");
    let nowhere = "postgres://nobody@127.0.0.1:1/x";
    for (extra, want) in [
        (vec!["-o", w], "workload file"),
        (vec!["--raw", w, "-o", r.to_str().unwrap()], "workload file"),
        (
            vec![
                "-o",
                r.to_str().unwrap(),
                "--raw",
                r_dotted.to_str().unwrap(),
            ],
            "one file",
        ),
    ] {
        let o = bench(&workload, &extra, nowhere, dir.path());
        assert!(!o.status.success(), "{extra:?}: {}", text(&o));
        assert!(
            text(&o).contains(want) && !text(&o).contains("connect"),
            "{extra:?}: the error does not name the clash: {}",
            text(&o)
        );
        assert_eq!(
            std::fs::read_to_string(&workload).unwrap(),
            WORKLOAD,
            "{extra:?} changed the workload file"
        );
        assert!(!r.exists(), "{extra:?} wrote {}", r.display());
    }
}

/// Promise: as above, for `report`: `--html` never replaces a result it reads, nor the
/// merged result it writes with `-o`.
///
/// Steps: a real one-second run `a.json` (and a copy `b.json`); `report a.json --html
/// a.json`, and `report a.json b.json --merge -o all.json --html all.json`.
///
/// Before the fix: both succeeded, exit 0. The first replaced the run's only result with
/// the HTML page (the run lost); the second wrote the merged result and then the page over
/// it ("wrote all.json" twice).
#[test]
fn report_refuses_an_html_page_that_would_replace_a_result() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let a = dir.path().join("a.json");
    let o = bench(
        &workload,
        &["-o", a.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let b = dir.path().join("b.json");
    std::fs::copy(&a, &b).unwrap();
    let run = std::fs::read(&a).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let all = dir.path().join("all.json");
    let all = all.to_str().unwrap();
    for args in [
        vec!["report", a, "--html", a],
        vec!["report", a, b, "--merge", "-o", all, "--html", all],
    ] {
        refused(&args, dir.path(), "--html");
        assert_eq!(std::fs::read(a).unwrap(), run, "{args:?} replaced the run");
        assert!(!Path::new(all).exists(), "{args:?} wrote {all}");
    }
}

/// Promise (`lab run --help`: `--svg` defaults "with --json: beside it, as .svg"; the CLI
/// checks its outputs before an experiment runs, so a long one is not lost at the end): the
/// chart neither replaces the JSON result nor fails only after the run.
///
/// Steps, against a server that does not exist (the run itself would fail on connecting, so
/// only a check before it can give these errors): `--json r.json --svg r.json`; `--json
/// r.svg` (the chart's default name is then the JSON's own); `--json r.json` with a
/// directory `r.svg` where the chart would go.
///
/// Before the fix: none was refused before the run. Against a real server the first two ran,
/// wrote the JSON and then the chart over it ("wrote r.json" twice, exit 0: the result
/// lost), and the third wrote the JSON and then failed on the directory, exit 1.
#[test]
fn lab_run_refuses_a_chart_that_would_replace_its_result_or_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::create_dir(dir.path().join("d.svg")).unwrap();
    let nowhere = "postgres://nobody@127.0.0.1:1/x";
    for (outputs, want) in [
        (
            vec![
                "--json".to_string(),
                p("r.json"),
                "--svg".into(),
                p("r.json"),
            ],
            "--svg",
        ),
        (vec!["--json".into(), p("r.svg")], "--svg"),
        (vec!["--json".into(), p("d.json")], "is a directory"),
    ] {
        let mut args = vec!["lab", "run", "runner", "--quick", "--url", nowhere];
        args.extend(outputs.iter().map(String::as_str));
        let said = refused(&args, dir.path(), want);
        assert!(
            !said.contains("connect"),
            "{args:?}: not refused before the run: {said}"
        );
    }
}

/// Promise (an error names what failed and what to do): `demo --out` naming a file is refused
/// before anything runs, naming the flag and asking for a directory.
///
/// Before the fix (session 51, found by helper h69): "could not create FILE: Not a
/// directory", naming neither `--out` nor what it wants.
#[test]
fn demo_refuses_an_out_that_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    std::fs::write(&file, "mine").unwrap();
    let nowhere = "postgres://nobody@127.0.0.1:1/x";
    let said = refused(
        &["--url", nowhere, "demo", "--out", file.to_str().unwrap()],
        dir.path(),
        "is not a directory: the demo writes index.html",
    );
    assert!(said.contains("--out"), "{said}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}

/// Promise (`compare`'s exit codes: 1 when a `--fail-if` condition holds, 2 when nothing
/// could be compared; and the CLI's rule that outputs are checked before the work): a
/// `--plot` directory that cannot be made is refused before anything is read or sampled.
///
/// Steps: `compare a.json b.json --plot FILE`, where FILE is a regular file and neither
/// result exists: the first error must be the plot directory's.
///
/// Before the fix: the directory was made only after the comparison. Here the error was
/// "could not read a.json"; with real runs, the whole comparison ran and printed its
/// verdicts, then failed with exit 2, "nothing could be compared", hiding a `--fail-if`
/// that had tripped (exit 1 without `--plot`; seen with two 4 s runs and `--fail-if
/// different,undecided,unreliable`).
#[test]
fn compare_checks_its_plot_directory_before_comparing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let o = slipstream(
        &[
            "compare",
            &p("a.json"),
            &p("b.json"),
            "--plot",
            file.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--plot") && !text(&o).contains("could not read"),
        "the plot directory was not checked first: {}",
        text(&o)
    );
}

/// Holds. Promise (docs/bench.md, "The report": one self-contained page of the run's names
/// and figures): names from a workload file or a result's file name are text on the page,
/// never markup, in the tables, the notes and the charts' titles and legends alike.
///
/// Steps: a workload named `<script>...`, a type named `"><img ... onerror=...>` and one
/// named `fail</title><script>` that always fails (so it reaches the failure notes too),
/// run into a result file named `<i>run.json`; `report --html`; the page searched for any
/// of those tags unescaped, and for their escaped forms.
#[test]
fn report_html_shows_hostile_names_as_text() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("x.toml");
    std::fs::write(
        &workload,
        r#"
name = "<script>alert('w')</script>"
[[transaction]]
name = "\"><img src=x onerror=alert(1)>"
sql = "SELECT 1"
[[transaction]]
name = "fail</title><script>"
sql = "SELECT 1/0"
"#,
    )
    .unwrap();
    let out = dir.path().join("<i>run.json");
    let o = bench(
        &workload,
        &["-o", out.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let html = dir.path().join("r.html");
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
    for raw in ["<script", "<img", "<i>"] {
        assert!(!page.contains(raw), "{raw} is markup on the page");
    }
    for escaped in ["&lt;script&gt;", "&lt;img src=x", "&lt;i&gt;run"] {
        assert!(page.contains(escaped), "{escaped} is missing from the page");
    }
}

/// The JSON document `slipstream` wrote to its stdout, which must be all it wrote there: a
/// table after it would stop `| jq` with "trailing garbage".
fn json_alone(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the JSON alone ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// Promise (docs/bench.md, "The result file": "a path that is not a regular file
/// (`/dev/stdout`, a FIFO) is written in place"): `-o /dev/stdout` works when stdout is a
/// pipe, as under `slipstream bench ... -o /dev/stdout | jq` or a test's captured output;
/// so does `report --merge -o /dev/stdout`. The stream then holds the result alone, for `jq`
/// to read; the table goes to stderr.
///
/// Steps: `bench kv.toml -o /dev/stdout` with its stdout a pipe (`Command::output`), then
/// `report a.json b.json --merge -o /dev/stdout` the same way.
///
/// Before the fix: both refused at once, exit 1, "cannot write /dev/stdout: No such file or
/// directory": the link was followed by hand, `/proc/self/fd/1` reads `pipe:[N]`, which is
/// no path, and the write looked for a file of that name in /proc/self/fd to replace. It
/// worked only when stdout was a terminal or a file, and the table followed the JSON into
/// the same stream.
#[test]
fn results_are_written_to_dev_stdout_when_it_is_a_pipe() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let o = bench(
        &workload,
        &["-o", "/dev/stdout"],
        &cluster.url(),
        dir.path(),
    );
    assert!(
        o.status.success(),
        "-o /dev/stdout into a pipe: {}",
        text(&o)
    );
    let run = json_alone(&o);
    assert_eq!(run["workload"], "kv", "{run}");

    let a = dir.path().join("a.json");
    let o = bench(
        &workload,
        &["-o", a.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let b = dir.path().join("b.json");
    let o = bench(
        &workload,
        &["-o", b.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = slipstream(
        &["report", a, b, "--merge", "-o", "/dev/stdout"],
        dir.path(),
    );
    assert!(
        o.status.success(),
        "report --merge -o /dev/stdout into a pipe: {}",
        text(&o)
    );
    let merged = json_alone(&o);
    assert_eq!(
        merged["merged_from"].as_array().map(Vec::len),
        Some(2),
        "{merged}"
    );
}

/// Promise (docs/bench.md: a censored or failed transaction is "kept out of ... every
/// latency figure, where a made-up value would bias the percentiles"; the report's type rows
/// print `-` for a type without a success, "not a 0 that reads as fast"): a run without a
/// single success shows no latency in its `all` row either.
///
/// Steps: a one-second run of a workload whose only statement fails (`SELECT 1/0`): exit 2,
/// every transaction failed; then `report` of its result.
///
/// Before the fix: the type's row read `-` in every latency column, and the `all` row below
/// it `0.000` in each (mean, p50, p90, p99, max), in bench's output and in `report`'s: a run
/// that measured nothing read as the fastest possible.
#[test]
fn a_run_without_a_success_shows_no_latency_in_its_all_row() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("fail.toml");
    std::fs::write(
        &workload,
        "name = \"fail\"\n[[transaction]]\nname = \"divide\"\nsql = \"SELECT 1/0\"\n",
    )
    .unwrap();
    let out = dir.path().join("fail.json");
    let o = bench(
        &workload,
        &["-o", out.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let report = slipstream(&["report", out.to_str().unwrap()], dir.path());
    assert!(report.status.success(), "{}", text(&report));
    for (what, printed) in [("bench", text(&o)), ("report", text(&report))] {
        let all = printed
            .lines()
            .find(|l| l.starts_with("all "))
            .unwrap_or_else(|| panic!("{what}: no `all` row in: {printed}"));
        let cells: Vec<&str> = all.split_whitespace().collect();
        // all, count, tps, failed, then the five latency columns.
        assert_eq!(cells.len(), 9, "{what}: {all}");
        assert_eq!(cells[1], "0", "{what}: {all}");
        assert_eq!(
            cells[4..],
            ["-"; 5],
            "{what}: a latency where none was measured: {all}"
        );
    }
}

/// Promise (docs/bench.md: "a result that cannot be written is a run lost", hence `-o` is
/// checked before the run; the brief's "never silent loss of results"): when the write at
/// the end fails all the same (the disk filled during the run), the run's figures are still
/// printed, and the error says the file is missing and what to do.
///
/// Steps: a one-second run with `-o /dev/full` (a device: the check before the run trusts
/// it, as it must a FIFO, and every write to it fails with ENOSPC, as a full disk's does).
///
/// Before the fix: exit 1 and one line, "could not write /dev/full: No space left on
/// device": no table, no count, nothing of the run on the screen; an hour's run left
/// nothing to read.
#[test]
fn a_result_that_cannot_be_written_still_prints_the_runs_figures() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let o = bench(&workload, &["-o", "/dev/full"], &cluster.url(), dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let printed = text(&o);
    let all = printed
        .lines()
        .find(|l| l.starts_with("all "))
        .unwrap_or_else(|| panic!("the run's table was not printed: {printed}"));
    let count: u64 = all.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(count > 0, "{all}");
    assert!(
        printed.contains("/dev/full") && printed.contains("-o"),
        "the error does not name the file and the remedy: {printed}"
    );
}

/// Promise (docs/bench.md, "The report": "max is the exact slowest success in every row"; the
/// percentiles beside it are read from the HDR histogram, "any value within 0.1%"): no row
/// shows a percentile above its max, which no set of latencies has.
///
/// Steps: a two-second run at one user of six types that sleep 11 to 29 ms (about 15 of
/// each: p99 falls in the top value's HDR bucket), then every row of the table checked:
/// p50 <= p90 <= p99 <= max.
///
/// Before the fix: p90 and p99 printed the top of the slowest success's HDR bucket, up to
/// 0.1% above the exact max printed beside them (`short ... p99 25.65 max 25.64` for a
/// 20 ms sleep); in a real Order Entry run, `browse-orders ... p99 12.47 max 12.46`.
#[test]
fn no_percentile_in_the_table_is_above_its_rows_max() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("naps.toml");
    // Six types: each row's max falls at a random place in its HDR bucket (16 us wide
    // here), so about half the rows show the difference at the table's 10 us; six make a
    // row that hides it everywhere unlikely (1 in 64, and the `all` row can show it too).
    let naps = ["n11", "n13", "n17", "n19", "n23", "n29"];
    let mut file = String::from("name = \"naps\"\n");
    for n in naps {
        let ms = &n[1..];
        file.push_str(&format!(
            "[[transaction]]\nname = \"{n}\"\nsql = \"SELECT pg_sleep(0.0{ms})\"\n"
        ));
    }
    std::fs::write(&workload, file).unwrap();
    let out = dir.path().join("naps.json");
    let o = slipstream(
        &[
            "bench",
            workload.to_str().unwrap(),
            "-u",
            "1",
            "-d",
            "2s",
            "-w",
            "0s",
            "-q",
            "--url",
            &cluster.url(),
            "-o",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let printed = text(&o);
    let mut rows = 0;
    for line in printed.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let named = cells
            .first()
            .is_some_and(|c| naps.contains(c) || *c == "all");
        if !named || cells.len() != 9 {
            continue;
        }
        rows += 1;
        let v: Vec<f64> = cells[5..].iter().map(|c| c.parse().unwrap()).collect();
        assert!(
            v[0] <= v[1] && v[1] <= v[2] && v[2] <= v[3],
            "a percentile above the row's max (p50 p90 p99 max): {line}"
        );
    }
    assert_eq!(rows, naps.len() + 1, "{printed}");
}

/// Promise: as `bench -o /dev/stdout` (above), `lab run --json /dev/stdout` into a pipe
/// writes the result there, alone, for `jq` to read; the table goes to stderr.
///
/// Steps: `lab run proxy --quick --json /dev/stdout --svg proxy.svg` with stdout a pipe.
///
/// Before the fix: refused as bench's was ("cannot write /dev/stdout: No such file or
/// directory"); with write_atomically fixed, the table came first and the JSON after it.
#[test]
fn lab_run_writes_its_result_alone_to_dev_stdout() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("proxy.svg");
    let o = slipstream(
        &[
            "lab",
            "run",
            "proxy",
            "--quick",
            "--url",
            &cluster.url(),
            "--json",
            "/dev/stdout",
            "--svg",
            svg.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let result = json_alone(&o);
    assert_eq!(result["experiment"], "proxy", "{result}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("note:"),
        "the table went nowhere: {}",
        text(&o)
    );
}

/// Promise (`bench --help`: "-d, --duration <D> The measured window (e.g. 30s, 5m)"; the
/// duration parser takes `500ms` and `1.5s`): the run's first line says how long it measured.
///
/// Steps: `bench kv.toml -d 500ms -w 0s`.
///
/// Before the fix: "kv: 2 users, closed loop, think none, 0 s measured after 0 s warm-up":
/// the seconds were rounded to whole ones, so a half-second run read as none (and `-d 1.5s`
/// as 2 s), while the file said `measured_s` 0.5.
#[test]
fn a_window_of_a_fraction_of_a_second_is_described_as_measured() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let out = dir.path().join("kv.json");
    // `-d 500ms` after bench's own `-d 1s`: clap refuses a flag given twice, so the whole
    // command is spelled here.
    let o = slipstream(
        &[
            "bench",
            workload.to_str().unwrap(),
            "-u",
            "2",
            "-d",
            "500ms",
            "-w",
            "0s",
            "-q",
            "--url",
            &cluster.url(),
            "-o",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("0.5 s measured after 0 s warm-up"),
        "{}",
        text(&o)
    );
}

/// Promise (docs/bench.md: `-o FILE` and `--raw FILE` are a run's two outputs): both take a
/// path in a directory not made yet, as `-o` does (the result's write creates it).
///
/// Steps: `bench kv.toml -o out/a/r.json --raw out/b/r.csv` in an empty directory.
///
/// Before the fix: "could not create the raw CSV out/b/r.csv: No such file or directory",
/// exit 1, though `-o out/a/r.json` alone made its directory and ran.
#[test]
fn the_raw_csv_goes_into_a_directory_not_made_yet_as_the_result_does() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let out = dir.path().join("out/a/r.json");
    let raw = dir.path().join("out/b/r.csv");
    let o = bench(
        &workload,
        &["-o", out.to_str().unwrap(), "--raw", raw.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.is_file(), "no result at {}", out.display());
    let csv = std::fs::read_to_string(&raw).unwrap();
    assert!(csv.lines().count() > 1, "{csv}");
}

/// Promise (docs/bench.md, Progress and Ctrl-C, "Exit status"): 2 for a run whose result
/// "is written, but measures nothing" (every transaction failed, or none finished), so that
/// a script or a CI job does not take it for a result. A run in which no transaction started
/// at all measures nothing either.
///
/// Steps: an open loop at 0.01 arrivals a second for 1 s (no arrival with this seed: 0.01
/// expected), written with `-o`. The result must be written and say 0 arrivals; the exit
/// status must be 2, with a line that says nothing ran and what to change.
///
/// Before the fix: exit 0 and `all 0 0.0 0 - - - - -`: an empty run read as a successful
/// measurement.
#[test]
fn a_run_in_which_nothing_started_is_not_a_success() {
    let cluster = Cluster::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("kv.toml");
    std::fs::write(&workload, WORKLOAD).unwrap();
    let out = dir.path().join("none.json");
    let o = bench(
        &workload,
        &["-r", "0.01", "--seed", "1", "-o", out.to_str().unwrap()],
        &cluster.url(),
        dir.path(),
    );
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(run["schedule"]["arrivals"], 0, "{}", text(&o));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("no transaction started") && said.contains("--rate"),
        "{said}"
    );
}
