//! Attacks on `slipstream compare` as a pipeline runs it: `--json` for CI and the exit status
//! a gate reads (docs/compare.md, "For CI: `--json` and `--fail-if`"). Written by helper h74.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use slipstream_testkit::Cluster;

mod common;
use common::{command, slipstream, text};

/// Two workload files of the same transaction types under two workload names.
const KV: &str = r#"
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

/// Result files made once for every test here: `kv-1.json` and `kv-2.json` (two runs of
/// `kv`), and `kv2.json` (a run of the same types under the workload name `kv2`); each 3 s
/// at 2 users against a throwaway cluster.
fn files() -> &'static (tempfile::TempDir, Vec<PathBuf>) {
    static FILES: OnceLock<(tempfile::TempDir, Vec<PathBuf>)> = OnceLock::new();
    FILES.get_or_init(|| {
        let cluster = Cluster::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kv = dir.path().join("kv.toml");
        std::fs::write(&kv, KV).unwrap();
        let kv2 = dir.path().join("kv2.toml");
        std::fs::write(&kv2, KV.replace("name = \"kv\"", "name = \"kv2\"")).unwrap();
        // The three runs at once: each has its own connections, and they take 3 s, not 9.
        let mut running = Vec::new();
        for (workload, name) in [(&kv, "kv-1"), (&kv, "kv-2"), (&kv2, "kv2")] {
            let file = dir.path().join(format!("{name}.json"));
            let child = command(
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
                    "--url",
                    &cluster.url(),
                    "-o",
                    file.to_str().unwrap(),
                ],
                dir.path(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
            running.push((file, child));
        }
        let mut out = Vec::new();
        for (file, child) in running {
            let o = child.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", text(&o));
            out.push(file);
        }
        (dir, out)
    })
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Promise (docs/compare.md, "What gets a message instead of a number": "Different
/// workloads. A warning"; "For CI": `--json` "prints the report: ... the warnings"): what a
/// reader must know first is in the JSON a pipeline reads, as it is in the table.
///
/// Steps: `compare --json` of a run of `kv` against a run of `kv2` (same types, another
/// workload), and of a run marked interrupted (its file edited to `"interrupted": true`, as a
/// Ctrl-C writes it) against another.
///
/// Before the fix: the text said "warning: A ran kv and B ran kv2" and "note: a run of B was
/// interrupted", but the JSON's `warnings` and `notes` held neither: a CI job reading
/// `--json` compared two workloads, or a cut-short run, without a word of it.
#[test]
fn compare_json_keeps_the_warnings_the_table_prints() {
    let (dir, f) = files();
    let o = slipstream(&["compare", "--json", arg(&f[0]), arg(&f[2])], dir.path());
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "compare failed: {}",
        text(&o)
    );
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let warnings = json["warnings"].to_string();
    assert!(
        warnings.contains("A ran kv and B ran kv2"),
        "the JSON does not warn that the workloads differ: {warnings}"
    );

    let run = std::fs::read_to_string(&f[1]).unwrap();
    let cut = dir.path().join("kv-cut.json");
    std::fs::write(
        &cut,
        run.replacen("\"interrupted\": false", "\"interrupted\": true", 1),
    )
    .unwrap();
    let o = slipstream(&["compare", "--json", arg(&f[0]), arg(&cut)], dir.path());
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let said = format!("{} {}", json["warnings"], json["notes"]);
    assert!(
        said.contains("a run of B was interrupted"),
        "the JSON does not say B's run was interrupted: {said}"
    );
    // The table still says both.
    let o = slipstream(&["compare", arg(&f[0]), arg(&cut)], dir.path());
    assert!(
        text(&o).contains("a run of B was interrupted"),
        "{}",
        text(&o)
    );
}

/// Promise (docs/compare.md, "For CI": exit status 0 compared and nothing tripped, 1 a
/// `--fail-if` condition met, 2 nothing could be compared; STYLE.md: a closed pipe is not a
/// failure): a reader that stops reading (`| head`, `| grep -q`) does not turn the gate's
/// answer into "nothing could be compared".
///
/// Steps: `compare --fail-if ...` of two runs, once with its output read, once with its
/// stdout a pipe whose reading end is already closed (what `| grep -q` leaves once it has
/// matched); the same files and seed give the same verdicts, so the status must be the same.
///
/// Before the fix: the second exited 2 with "error: writing to stdout: Broken pipe", where the
/// first exited 0 or 1: under `set -o pipefail` a CI step read "nothing could be compared",
/// and a `--fail-if` that tripped was hidden.
#[test]
fn compare_into_a_closed_pipe_keeps_its_exit_status() {
    let (dir, f) = files();
    let args = [
        "compare",
        "--fail-if",
        "undecided,different",
        arg(&f[0]),
        arg(&f[1]),
    ];
    let read = slipstream(&args, dir.path());
    let want = read.status.code();
    assert!(matches!(want, Some(0 | 1)), "{}", text(&read));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let closed = command(&args, dir.path())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        closed.status.code(),
        want,
        "with its stdout closed, compare exited otherwise: {}",
        String::from_utf8_lossy(&closed.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&closed.stderr).contains("Broken pipe"),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );
}

/// Promise (docs/bench.md, "The result file": reading a file refuses one that cannot be what
/// a run wrote, "(from version 2) ... a second ... whose histogram does not hold its count";
/// "per type, the series plus `after_window` add up to the totals"; the brief's "a
/// hand-edited file gives a clear error, never a nonsense verdict").
///
/// Steps: a real run's file with every second's successes (and their sums) multiplied by a
/// thousand and its per-second histograms emptied, as an edit that keeps the JSON valid would
/// leave it; its totals untouched. `compare` against the original, and `report`.
///
/// Before the fix: read as sound (an empty histogram passed as "an older file's", though
/// version 2 files always hold them, and the series was never held to the totals):
/// `compare` put B's throughput in the hundreds of thousands of TPS beside a header reading
/// the same TPS for both, exit 0, and `report` drew it.
#[test]
fn a_series_edited_past_its_totals_is_refused() {
    let (dir, f) = files();
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&f[0]).unwrap()).unwrap();
    for series in v["intervals"]["per_transaction"]
        .as_object_mut()
        .unwrap()
        .values_mut()
    {
        for iv in series.as_array_mut().unwrap() {
            for k in ["n", "sum", "sum_sq", "sum_ln", "sum_ln_sq"] {
                let x = &iv[k];
                iv[k] = if k == "n" {
                    (x.as_u64().unwrap() * 1000).into()
                } else {
                    (x.as_f64().unwrap() * 1000.0).into()
                };
            }
            iv["histogram"] = "".into();
        }
    }
    // Another start: not the same run given twice.
    let start = v["started_at"].as_str().unwrap().replacen("20", "19", 1);
    v["started_at"] = start.into();
    let edited = dir.path().join("kv-edited.json");
    std::fs::write(&edited, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let o = slipstream(&["compare", arg(&f[0]), arg(&edited)], dir.path());
    assert_eq!(
        o.status.code(),
        Some(2),
        "an edited file was compared: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("kv-edited.json") && text(&o).contains("interval"),
        "{}",
        text(&o)
    );
    let o = slipstream(&["report", arg(&edited)], dir.path());
    assert!(
        !o.status.success(),
        "an edited file was reported: {}",
        text(&o)
    );
}

/// Promise (docs/compare.md: "Side A's files, then `--`, then side B's files"; "Two files
/// without `--` are one run a side"; exit status 2 for bad arguments): A's files followed by
/// a `--` with nothing after it are A's files and no B side, not a comparison of A's files
/// with each other. A CI step `compare --fail-if slower base-*.json -- $NEW` whose `$NEW`
/// came out empty (a bench that wrote nothing, a glob under `nullglob`) must not pass.
///
/// Steps: `compare --fail-if slower kv-1.json kv-2.json --`.
///
/// Before the fix: clap drops a trailing `--`, and two files with no B side were read as one
/// run a side: kv-1 was compared with kv-2 (A's two runs, the baseline against itself) and
/// the gate passed, exit 0.
#[test]
fn a_double_dash_with_no_b_files_is_refused_not_read_as_one_run_a_side() {
    let (dir, f) = files();
    let o = slipstream(
        &[
            "compare",
            "--fail-if",
            "slower",
            arg(&f[0]),
            arg(&f[1]),
            "--",
        ],
        dir.path(),
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "A's two files were compared with each other: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("no B") && text(&o).contains("after `--`"),
        "{}",
        text(&o)
    );
    // Without the `--`, two files are still one run a side.
    let o = slipstream(&["compare", arg(&f[0]), arg(&f[1])], dir.path());
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
}

/// The text of every `<text>` element of an SVG file, trimmed.
fn svg_texts(path: &Path) -> Vec<String> {
    let svg = std::fs::read_to_string(path).unwrap();
    svg.split("<text")
        .skip(1)
        .map(|t| {
            t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()]
                .trim()
                .to_string()
        })
        .collect()
}

/// Promise (docs/compare.md, "Reading the figures": `NAME-ratio.svg` is "the posterior of B /
/// A with the HDI's bounds", and "rows other than the mean latency get the metric in the
/// name (`all-types-TPS-ratio.svg`)"): the TPS row's figures show what its row shows, TPS
/// and B / A of TPS, in the row's words.
///
/// Steps: `compare --plot DIR` of two runs; the TPS row's two figures read for their axis
/// labels and title against the table's TPS row.
///
/// Before the fix: `all-types-TPS-means.svg` drew milliseconds per transaction on an axis
/// labelled "mean (ms)" (0.1-0.3, where the table read about 10,000 TPS), and
/// `all-types-TPS-ratio.svg` the ratio of those, the inverse of the table's B / A, titled in
/// latency's words ("credibly faster" where the row said "credibly higher").
#[test]
fn the_tps_rows_figures_show_tps() {
    let (dir, f) = files();
    let plots = tempfile::tempdir().unwrap();
    let o = slipstream(
        &[
            "compare",
            "--plot",
            arg(plots.path()),
            arg(&f[0]),
            arg(&f[1]),
        ],
        dir.path(),
    );
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    let row = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.starts_with("all types") && l.contains(" TPS "))
        .unwrap_or_else(|| panic!("no TPS row: {}", text(&o)))
        .to_string();
    let means = svg_texts(&plots.path().join("all-types-TPS-means.svg"));
    assert!(
        means.iter().any(|t| t.contains("TPS")) && !means.iter().any(|t| t.contains("(ms)")),
        "the TPS means figure is not in TPS: {means:?}"
    );
    let ratio = svg_texts(&plots.path().join("all-types-TPS-ratio.svg"));
    let title = &ratio[0];
    let verdict = title[title.rfind('(').unwrap() + 1..title.rfind(')').unwrap()].to_string();
    assert!(
        row.trim_end().ends_with(&verdict),
        "the figure's verdict ({title}) is not the row's: {row}"
    );
    assert!(
        ratio.iter().any(|t| t.contains("TPS")),
        "the TPS ratio figure does not say it is a ratio of TPS: {ratio:?}"
    );
}
