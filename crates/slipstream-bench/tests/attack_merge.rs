//! Attacks on `report --merge`'s refusals: parts that must not be added into one result
//! (docs/bench.md, "Several load generators").

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
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
