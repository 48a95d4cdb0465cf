//! Attacks on `report --merge`'s refusals: parts that must not be added into one result
//! (docs/bench.md, "Several load generators").

mod common;

use std::future::pending;
use std::time::Duration;

use common::{rt, run_against};
use slipstream_bench::{self as bench, BenchRun, RunConfig};

/// A run of `common::sleeping(0)` (no database) whose context names `sha256` as its
/// workload file's hash, as `slipstream bench FILE` saves it.
fn run_of_file(seed: u64, sha256: Option<&str>) -> BenchRun {
    let mut c = RunConfig::new(None);
    (c.threads, c.seed) = (1, seed);
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_millis(200);
    c.progress = bench::Style::Quiet;
    let mut run = rt()
        .block_on(bench::run(&common::sleeping(0), &c, pending::<()>()))
        .unwrap();
    run.context = Some(bench::context::RunContext {
        workload_sha256: sha256.map(str::to_owned),
        ..Default::default()
    });
    run
}

/// Promise (docs/bench.md "Several load generators"): "Runs of different workloads ... are
/// refused". A workload file is the workload: its SHA-256 is saved in the context so a run
/// can be tied to the file that made it.
///
/// Steps: two runs of one workload name and mix, whose contexts hold different file hashes
/// (two generators given different versions of `kv.toml`: other key ranges, other SQL),
/// merged; then the same with equal hashes, and with one part that has none (a run from a
/// library, or an older file).
///
/// Before the fix: the merge compared only the workload's name and weights, and added the
/// two files' transactions into one result that stated the first file's hash.
#[test]
fn runs_of_different_workload_files_are_not_merged() {
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    let err = bench::merge(&[
        ("gen1.json".into(), run_of_file(1, Some(&a))),
        ("gen2.json".into(), run_of_file(2, Some(&b))),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("gen1.json")
            && err.contains("gen2.json")
            && err.contains("workload file")
            && err.contains(&a[..12])
            && err.contains(&b[..12]),
        "{err}"
    );
    for second in [Some(a.as_str()), None] {
        let merged = bench::merge(&[
            ("gen1.json".into(), run_of_file(1, Some(&a))),
            ("gen2.json".into(), run_of_file(2, second)),
        ])
        .unwrap();
        assert_eq!(
            merged.context.unwrap().workload_sha256.as_deref(),
            Some(a.as_str())
        );
    }
}

/// Promise (docs/bench.md "Several load generators"): load generators of one test load one
/// server, and parts that loaded other servers are refused; a merged result describes one
/// server's run.
///
/// Steps: two private clusters of the same PostgreSQL version (copies of one template data
/// directory, so they share a system identifier too), one run against each, merged;
/// then a run against another database of the first server; then two runs against the
/// first server's `postgres` database (one test, two generators), which must merge.
///
/// Before the fix: only the server's version was compared, so runs against two servers of
/// one version, or two databases of one server, were added into one result that described
/// the first part's server.
#[test]
fn runs_against_other_servers_or_databases_of_one_version_are_not_merged() {
    let (one, two) = (
        slipstream_testkit::Cluster::start().unwrap(),
        slipstream_testkit::Cluster::start().unwrap(),
    );
    rt().block_on(async {
        let mut c = slipstream_pg::connect(&one.url()).await.unwrap();
        c.batch_execute("CREATE DATABASE other").await.unwrap();
    });
    let url = one.url();
    let (server, database) = url.rsplit_once('/').expect("the URL names its database");
    assert_eq!(database, "postgres");
    let other = format!("{server}/other");
    for (label, url) in [("gen2.json", two.url()), ("gen2.json", other)] {
        let Err(err) = bench::merge(&[
            ("gen1.json".into(), run_against(&one.url(), 1)),
            (label.into(), run_against(&url, 2)),
        ]) else {
            panic!("runs against {url} and {} were merged", one.url());
        };
        let err = err.to_string();
        assert!(
            err.contains("gen1.json") && err.contains("gen2.json") && err.contains("different"),
            "{err}"
        );
    }
    let merged = bench::merge(&[
        ("gen1.json".into(), run_against(&one.url(), 1)),
        ("gen2.json".into(), run_against(&one.url(), 2)),
    ])
    .unwrap();
    assert!(merged.transactions[0].ok > 0);
}

/// Promise (docs/bench.md, "Several load generators"): a part that started k intervals after
/// the earliest has its series shifted by k (rounded); the report's charts over time draw
/// successes per second of the time each interval covers.
///
/// Steps: a 1.5 s run of 2 users sleeping 1 ms (no database), and a copy of it that started
/// 0.6 s later (another seed): merged, the copy is shifted one interval, so the merged series
/// has three, and the last holds the copy's half second alone. Its point in the throughput
/// chart is at 2.5 s (the copy's window's end on the series' time line), at that half
/// second's count over half a second.
///
/// Before the fix every interval was taken whole (the last point at x = 3, half the rate);
/// the window's end taken from `measured_s` (2.1 s, from the true offset) would have given
/// the last interval 0.1 s, five times its rate.
#[test]
fn a_merged_series_ends_where_its_latest_part_ends_on_its_time_line() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (2, 1, 7);
    c.duration = Duration::from_millis(1500);
    let a = rt()
        .block_on(bench::run(&common::sleeping(1), &c, pending::<()>()))
        .unwrap();
    let mut b = a.clone();
    b.seed = 8;
    let start = chrono::DateTime::parse_from_rfc3339(&a.started_at).unwrap();
    b.started_at = (start + chrono::Duration::milliseconds(600))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let merged = bench::merge(&[("a.json".into(), a), ("b.json".into(), b.clone())]).unwrap();
    assert!(
        (merged.measured_s - 2.1).abs() < 1e-9,
        "{}",
        merged.measured_s
    );
    let series = &merged.intervals.per_transaction["sleep"];
    assert_eq!(series.len(), 3);
    assert_eq!(merged.interval_span(2), (2.5, 0.5));
    let last_n = b.intervals.per_transaction["sleep"][1].sufficient.n;
    assert_eq!(
        series[2].sufficient.n, last_n,
        "the copy's half second alone"
    );
    let points = &bench::report::tps_series(&[bench::report::Labeled {
        label: "all".into(),
        run: merged,
    }])[0]
        .points;
    assert_eq!(
        points.last(),
        Some(&(2.5, last_n as f64 / 0.5)),
        "{points:?}"
    );
}

/// Promise (docs/bench.md, Progress and Ctrl-C, and the report): an interrupted run's result
/// says after how long it was stopped, of the window asked for ("interrupted after 1.0 s of
/// the 2 s asked for"), and compare warns of it the same way; a merged result states each
/// part's figures (`merged_from`).
///
/// Steps: two load generators asked for 2 s, one of them stopped (a Ctrl-C) after 1 s,
/// merged; what the report's description and compare's warning say of the interruption.
///
/// Before the fix both took the merged span for the stop: "interrupted after 2.0 s of the 2 s
/// asked for", a run cut short at the very length it was asked for, with no word of which
/// generator was stopped, or when.
#[test]
fn a_merged_result_says_which_part_was_interrupted_and_when() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (2, 1, 9);
    c.duration = Duration::from_secs(2);
    let full = rt()
        .block_on(bench::run(&common::sleeping(1), &c, pending::<()>()))
        .unwrap();
    c.seed = 10;
    // A Ctrl-C after 1 s: the stop future `run` is given.
    let stopped = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_secs(1));
            bench::run(&common::sleeping(1), &c, stop).await
        })
        .unwrap();
    assert!(
        stopped.interrupted && stopped.measured_s < 1.5,
        "{}",
        stopped.measured_s
    );
    let mut stopped_together = stopped.clone();
    stopped_together.started_at = full.started_at.clone();
    let merged = bench::merge(&[
        ("gen1.json".into(), full.clone()),
        ("gen2.json".into(), stopped_together),
    ])
    .unwrap();
    let said = bench::report::describe(&merged).join("\n");
    eprintln!("{said}");
    let part = format!("gen2.json after {:.1} s", stopped.measured_s);
    assert!(
        said.contains(&part) && !said.contains("after 2.0 s of the 2 s"),
        "{said}"
    );
    let report = bench::compare::compare_sides(
        std::slice::from_ref(&merged),
        std::slice::from_ref(&full),
        None,
        bench::compare::Unit::Auto,
        &Default::default(),
    )
    .unwrap();
    let warning = report
        .warnings
        .iter()
        .find(|w| w.contains("interrupted"))
        .expect("an interrupted-run warning");
    assert!(warning.contains(&part), "{warning}");
}

/// Each stage's successes that ended inside the window, as `stage_table` shows them: its
/// count, and its TPS times its length (the TPS has one decimal).
fn stage_counts(run: &BenchRun) -> Vec<(u64, f64)> {
    let table = bench::stage_table(run).expect("two stages").render();
    run.stages
        .iter()
        .map(|s| {
            let row = table
                .lines()
                .find(|l| l.starts_with(&s.name))
                .unwrap_or_else(|| panic!("no {} in\n{table}", s.name));
            // ..., load, transaction, count, tps, ...: the cells after the type's name.
            let cells: Vec<&str> = row.split_whitespace().collect();
            let at = cells.iter().position(|c| *c == "sleep").unwrap();
            let tps: f64 = cells[at + 2].parse().unwrap();
            (cells[at + 1].parse().unwrap(), tps * (s.end_s - s.start_s))
        })
        .collect()
}

/// Promise (docs/bench.md, phases and TPS; merge.rs: stages add by position, a part stopped
/// early may have fewer stages): a stage's TPS in `by stage:` counts the successes that ended
/// inside its window, the drain's left out, so a merged result's stage holds, in its TPS,
/// the sum of its parts' in-window successes in that stage.
///
/// Steps: two load generators of a closed loop of 20 users, 300 ms a transaction, two 1 s
/// stages (each user has one in flight at the window's end, which ends in the drain); the
/// second is stopped (a Ctrl-C) 0.65 s into stage 1, so its 20 drained successes are in its
/// stage 1. Merged, each stage's in-window successes (TPS x length) must be the parts' own,
/// added.
///
/// Before the fix, `stage_table` took every part's drain off the merged result's last stage:
/// the stopped part's drain (20) stayed in stage 1's TPS and was taken off stage 2's,
/// which read fewer than its parts had ended there.
#[test]
fn a_merged_stage_counts_each_parts_drain_where_that_part_ended() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (20, 1, 21);
    c.warmup = Duration::ZERO;
    c.stages = vec![
        "1s:users=20".parse().unwrap(),
        "1s:users=20".parse().unwrap(),
    ];
    c.grace = Duration::from_secs(30);
    c.progress = bench::Style::Quiet;
    let full = rt()
        .block_on(bench::run(&common::sleeping(300), &c, pending::<()>()))
        .unwrap();
    c.seed = 22;
    let stopped = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(650));
            bench::run(&common::sleeping(300), &c, stop).await
        })
        .unwrap();
    let drained = |r: &BenchRun| {
        r.intervals
            .after_window
            .get("sleep")
            .map_or(0, |i| i.sufficient.n)
    };
    assert!(
        stopped.interrupted && stopped.stages.len() == 1 && drained(&stopped) > 5,
        "the stopped part must end in stage 1 with a backlog: {} stages, {} drained",
        stopped.stages.len(),
        drained(&stopped)
    );
    // A part with one stage has no `by stage:` table: its stage's in-window successes are
    // the run's.
    let mut parts_in_window = vec![0.0, 0.0];
    for (i, (_, in_window)) in stage_counts(&full).into_iter().enumerate() {
        parts_in_window[i] += in_window;
    }
    parts_in_window[0] += stopped.ok_in_window("sleep") as f64;
    let mut stopped_together = stopped.clone();
    stopped_together.started_at = full.started_at.clone();
    let merged = bench::merge(&[
        ("gen1.json".into(), full.clone()),
        ("gen2.json".into(), stopped_together),
    ])
    .unwrap();
    let table = bench::stage_table(&merged).unwrap().render();
    let merged_counts = stage_counts(&merged);
    let mut sum = 0.0;
    for (i, ((_, got), want)) in merged_counts.iter().zip(&parts_in_window).enumerate() {
        // The TPS's one decimal over stages of about 1 s, in each part and the merged.
        assert!(
            (got - want).abs() <= 0.5,
            "stage {}: {got:.1} in-window successes merged, where its parts had {want:.1}\n{table}",
            i + 1
        );
        sum += got;
    }
    let all = merged.ok_in_window("sleep") as f64;
    assert!(
        (sum - all).abs() <= 0.5,
        "stages {sum:.1}, run {all}\n{table}"
    );
}

/// Promise (docs/bench.md, merging; `StageTx::drained`: a file without it "keeps the old
/// reading", its drain in its last stage listed): a merge of a part written before `drained`
/// was saved with a part written since counts each part's drain where that part ended it.
///
/// Steps: as `a_merged_stage_counts_each_parts_drain_where_that_part_ended`, but the full
/// part's stages lose their `drained` (an older file): its drain is all in its stage 2, as
/// the old reading has it. The stopped part (this version) ended its 20 drained in stage 1.
/// Merged, each stage's in-window successes (TPS x length) must be the parts' own, added.
///
/// Before the fix: one part without `drained` left the merged stages without it, and the
/// merged result fell back to the old reading for both: every part's drain taken off stage 2
/// (the stopped part's too, which it never ran), and the stopped part's drain left in stage
/// 1's TPS: the fault `a_merged_stage_counts_each_parts_drain_where_that_part_ended` fixed,
/// back for any merge with one older file.
#[test]
fn a_merge_with_an_older_part_counts_each_parts_drain_where_that_part_ended() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (20, 1, 21);
    c.warmup = Duration::ZERO;
    c.stages = vec![
        "1s:users=20".parse().unwrap(),
        "1s:users=20".parse().unwrap(),
    ];
    c.grace = Duration::from_secs(30);
    c.progress = bench::Style::Quiet;
    let mut full = rt()
        .block_on(bench::run(&common::sleeping(300), &c, pending::<()>()))
        .unwrap();
    for s in &mut full.stages {
        for t in &mut s.transactions {
            t.drained = None;
        }
    }
    c.seed = 22;
    let stopped = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(650));
            bench::run(&common::sleeping(300), &c, stop).await
        })
        .unwrap();
    let drained = stopped
        .intervals
        .after_window
        .get("sleep")
        .map_or(0, |i| i.sufficient.n);
    assert!(
        stopped.interrupted && stopped.stages.len() == 1 && drained > 5,
        "the stopped part must end in stage 1 with a backlog: {} stages, {drained} drained",
        stopped.stages.len(),
    );
    let mut parts_in_window = vec![0.0, 0.0];
    for (i, (_, in_window)) in stage_counts(&full).into_iter().enumerate() {
        parts_in_window[i] += in_window;
    }
    parts_in_window[0] += stopped.ok_in_window("sleep") as f64;
    let mut stopped_together = stopped.clone();
    stopped_together.started_at = full.started_at.clone();
    let merged = bench::merge(&[
        ("gen1.json".into(), full.clone()),
        ("gen2.json".into(), stopped_together),
    ])
    .unwrap();
    let table = bench::stage_table(&merged).unwrap().render();
    for (i, ((_, got), want)) in stage_counts(&merged)
        .iter()
        .zip(&parts_in_window)
        .enumerate()
    {
        assert!(
            (got - want).abs() <= 0.5,
            "stage {}: {got:.1} in-window successes merged, where its parts had {want:.1}\n{table}",
            i + 1
        );
    }
}
