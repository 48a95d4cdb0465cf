//! Where the measuring window ends: each completion is in the window's per-second intervals
//! or in `after_window`, split at the exact end, whether the window ran its length or a
//! Ctrl-C cut it short, and a stage cut short keeps the transactions that ended in the drain
//! (found by session 32's attacker; no database: the transactions sleep).

mod common;

use std::time::Duration;

use common::{rt, sleeping};
use slipstream_bench::{self as bench, BenchRun, RunConfig};

/// The raw CSV's completion times (µs from the start of measuring).
fn raw_ends(path: &std::path::Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).expect("the raw CSV");
    text.lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).expect("an end_us column"))
        .map(|v| v.parse().expect("a number"))
        .collect()
}

/// Checks the split against the raw CSV, which has every completion's time: the intervals
/// hold exactly those before `measured_s`, `after_window` exactly the rest. Returns how many
/// ended in the drain.
fn check_split(run: &BenchRun, raw: &std::path::Path) -> u64 {
    let end_us = (run.measured_s * 1e6) as u64;
    let ends = raw_ends(raw);
    let in_window = ends.iter().filter(|&&e| e < end_us).count() as u64;
    let drained = ends.len() as u64 - in_window;
    let series: u64 = run.intervals.per_transaction["sleep"]
        .iter()
        .map(|i| i.sufficient.n)
        .sum();
    let after = run
        .intervals
        .after_window
        .get("sleep")
        .map_or(0, |i| i.sufficient.n);
    assert_eq!(
        (series, after),
        (in_window, drained),
        "(intervals, after_window) against the raw CSV's (before, after) the end at {} s",
        run.measured_s
    );
    assert_eq!(series + after, run.transactions[0].ok);
    drained
}

/// A window of 1.5 s: the transactions four users started before its end and finished in the
/// drain (up to 1.9 s) are the drain's. Before, they were counted in the window's last
/// interval (1-2 s), which covers 0.5 s of window and 0.4 s of drain.
#[test]
fn a_window_that_ends_inside_a_second_keeps_the_drain_out_of_its_last_interval() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.csv");
    let mut c = RunConfig::new(None);
    (c.threads, c.users, c.seed) = (1, 4, 3);
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_millis(1500);
    c.raw_csv = Some(raw.clone());
    let run = rt()
        .block_on(bench::run(&sleeping(400), &c, std::future::pending::<()>()))
        .unwrap();
    assert!(!run.interrupted);
    assert!(
        check_split(&run, &raw) > 0,
        "the users were busy at the end"
    );
}

/// Three stages of a second; a Ctrl-C at 1.9 s, in the second. Two users' 700 ms
/// transactions started at 1.4 s end at 2.1 s, in the drain: they belong to the stage the
/// Ctrl-C cut short. Before, they went to the third stage, which never ran and is left out
/// of `stages[]`, so the stages' counts fell short of the run's.
#[test]
fn a_stage_cut_short_keeps_the_transactions_that_ended_in_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.csv");
    let mut c = RunConfig::new(None);
    (c.threads, c.users, c.seed) = (1, 2, 5);
    c.warmup = Duration::ZERO;
    c.stages = vec!["1s:2".parse().unwrap(); 3];
    c.raw_csv = Some(raw.clone());
    let run = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(1900));
            bench::run(&sleeping(700), &c, stop).await
        })
        .unwrap();
    assert!(run.interrupted);
    assert_eq!(run.stages.len(), 2, "{:?}", run.stages);
    let by_stage: u64 = run.stages.iter().map(|s| s.transactions[0].ok).sum();
    assert_eq!(by_stage, run.transactions[0].ok, "{:?}", run.stages);
    assert!(
        check_split(&run, &raw) > 0,
        "the users were busy at the stop"
    );
}

/// Promise (docs/bench.md, TPS and phases): the TPS counts the successes that ended inside
/// the window, and every figure that claims them agrees: the per-second series add up to
/// `ok_in_window`, the series and `after_window` to `ok`, the stages' `ok` to `ok` and their
/// `drained` to `after_window`, so the stages' in-window successes (each stage's TPS over its
/// length, `StageResult::tps`) add up to the run's TPS over the window.
///
/// Steps: 4 users of a 300 ms transaction in three 1 s stages of 4, 2 and 4 users, stopped (a
/// Ctrl-C) 1.5 s in, in stage 2, so the drain holds the transactions in flight then.
///
/// Held (with d91bec7's `drained`; `StageResult::tps` counted the drain before it, which only
/// the docs said).
#[test]
fn every_figure_of_the_in_window_successes_agrees_in_a_run_stopped_in_a_stage() {
    let mut c = RunConfig::new(None);
    (c.threads, c.users, c.seed) = (1, 4, 8);
    c.warmup = Duration::ZERO;
    c.stages = vec![
        "1s:users=4".parse().unwrap(),
        "1s:users=2".parse().unwrap(),
        "1s:users=4".parse().unwrap(),
    ];
    let run = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(1500));
            bench::run(&sleeping(300), &c, stop).await
        })
        .unwrap();
    assert!(run.interrupted && run.stages.len() == 2, "{:?}", run.stages);
    let t = &run.transactions[0];
    let series: u64 = run.intervals.per_transaction["sleep"]
        .iter()
        .map(|i| i.sufficient.n)
        .sum();
    let drained = run
        .intervals
        .after_window
        .get("sleep")
        .map_or(0, |i| i.sufficient.n);
    assert!(drained > 0, "the users were busy at the stop");
    assert_eq!(series, run.ok_in_window("sleep"));
    assert_eq!(series + drained, t.ok);
    let stage_ok: u64 = run.stages.iter().map(|s| s.transactions[0].ok).sum();
    let stage_drained: u64 = run
        .stages
        .iter()
        .map(|s| s.transactions[0].drained.expect("saved since d91bec7"))
        .sum();
    assert_eq!(
        (stage_ok, stage_drained),
        (t.ok, drained),
        "{:?}",
        run.stages
    );
    assert_eq!(
        run.stages[0].transactions[0].drained,
        Some(0),
        "the drain is in the stage the window ended in"
    );
    let stage_in_window: f64 = run
        .stages
        .iter()
        .map(|s| s.tps() * (s.end_s - s.start_s))
        .sum();
    let run_in_window = run.tps() * run.measured_s;
    assert!(
        (stage_in_window - run_in_window).abs() < 1e-6,
        "stages {stage_in_window}, run {run_in_window}"
    );
}
