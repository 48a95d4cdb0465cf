//! `compare` on result files: what is compared, what is refused and why.

use std::time::Duration;

use slipstream_bench::compare::{Metric, Outcome, Report, Unit, compare_sides};
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload,
};
use slipstream_stats::CompareSettings;

struct Spin(u32);

impl Transaction for Spin {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        // A little work so latencies are not all the clock's resolution.
        let mut x = 0u64;
        for i in 0..self.0 {
            x = x.wrapping_add(u64::from(i) * 31);
        }
        std::hint::black_box(x);
        Ok(())
    }
}

fn run(name: &str, types: &[&'static str], secs: f64) -> BenchRun {
    let mut w = Workload::new(name).without_database();
    for t in types {
        w = w.transaction(*t, 1, || Spin(2000));
    }
    run_for(&w, secs)
}

/// Runs `w` on one thread for `secs`.
fn run_for(w: &Workload, secs: f64) -> BenchRun {
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_secs_f64(secs);
    c.threads = 1;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench::run(w, &c, std::future::pending::<()>()))
        .unwrap()
}

fn mean_row<'a>(r: &'a Report, name: &str) -> &'a Outcome {
    &r.rows
        .iter()
        .find(|row| row.name.as_deref() == Some(name) && row.metric == Metric::Mean)
        .unwrap()
        .outcome
}

#[test]
fn types_in_one_run_only_and_too_few_intervals_are_named() {
    let a = run("w", &["both", "only-a"], 4.0);
    let b = run("w", &["both", "only-b"], 4.0);
    let short = run("w", &["both"], 1.5);
    let s = CompareSettings::default();
    let one = |x: &BenchRun| std::slice::from_ref(x).to_vec();
    let out = compare_sides(&one(&a), &one(&b), None, Unit::Auto, &s).unwrap();
    assert_eq!(out.unit, Unit::Interval);
    assert!(matches!(mean_row(&out, "both"), Outcome::Compared(_)));
    assert!(matches!(mean_row(&out, "only-a"), Outcome::Skipped(why) if why == "only in A"));
    assert!(matches!(mean_row(&out, "only-b"), Outcome::Skipped(why) if why == "only in B"));
    // One run a side: the reader is told that between-run variance is invisible.
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("cannot see the variance between runs")),
        "{:?}",
        out.warnings
    );
    // The whole mix is compared too.
    assert!(
        out.rows
            .iter()
            .any(|r| r.name.is_none() && r.metric == Metric::Tps)
    );

    // 1.5 s gives two intervals: too few per interval, enough per transaction.
    let out = compare_sides(&one(&a), &one(&short), Some("both"), Unit::Interval, &s).unwrap();
    assert!(
        matches!(mean_row(&out, "both"), Outcome::Skipped(why) if why.contains("fewer than 3 seconds")),
        "{:?}",
        mean_row(&out, "both")
    );
    let out = compare_sides(&one(&a), &one(&short), Some("both"), Unit::Transaction, &s).unwrap();
    assert!(matches!(mean_row(&out, "both"), Outcome::Compared(_)));

    let e = compare_sides(&one(&a), &one(&b), Some("nope"), Unit::Auto, &s).unwrap_err();
    assert!(e.to_string().contains("no transaction `nope`"), "{e}");
}

#[test]
fn runs_as_the_unit_need_two_runs_a_side_and_compare_p99_and_throughput() {
    let runs: Vec<BenchRun> = (0..3).map(|_| run("w", &["t"], 2.0)).collect();
    let s = CompareSettings::default();
    let e = compare_sides(&runs[..1], &runs[1..], None, Unit::Auto, &s).unwrap_err();
    assert!(
        e.to_string().contains("A has 1 run(s) and B has 2")
            && e.to_string().contains("--unit interval"),
        "{e}"
    );
    let e = compare_sides(&runs[..1], &runs[1..], None, Unit::Run, &s).unwrap_err();
    assert!(e.to_string().contains("at least 2 on each side"), "{e}");
    let four: Vec<BenchRun> = runs.iter().chain(&runs[..1]).cloned().collect();
    let out = compare_sides(&four[..2], &four[2..], None, Unit::Auto, &s).unwrap();
    assert_eq!(out.unit, Unit::Run);
    for metric in [Metric::Mean, Metric::P99] {
        assert!(
            out.rows.iter().any(|r| r.name.as_deref() == Some("t")
                && r.metric == metric
                && matches!(r.outcome, Outcome::Compared(_))),
            "{metric}: {:?}",
            out.rows
        );
    }
    assert!(
        out.rows
            .iter()
            .any(|r| r.name.is_none() && r.metric == Metric::Tps)
    );
    let json = out.to_json();
    assert_eq!(json["schema"], "slipstream-lab/compare");
    assert_eq!(json["unit"], "run");
    assert!(json["rows"].as_array().unwrap().len() >= 4, "{json}");
    // The chance note's 5% per type is calibrated with runs as the unit only; the JSON says
    // which (it gave 0.05 in every unit, as if calibrated in all).
    assert_eq!(json["chance"]["calibrated"], true, "{json}");
    let one = compare_sides(&runs[..1], &runs[1..2], None, Unit::Interval, &s).unwrap();
    let json = one.to_json();
    assert_eq!(json["unit"], "interval");
    assert_eq!(json["chance"]["calibrated"], false, "{json}");
    // A run with no success in its window is left out of the TPS row, and the notes say so
    // (session 37's attacker: it was dropped in silence, while the header's mean TPS, which
    // counts every run, disagreed with the row).
    let mut empty = runs[2].clone();
    for t in &mut empty.transactions {
        t.ok = 0;
    }
    let b = [runs[1].clone(), runs[2].clone(), empty];
    let out = compare_sides(&runs[..2], &b, None, Unit::Run, &s).unwrap();
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("B's run 3") && n.contains("leaves it out")),
        "{:?}",
        out.notes
    );
}

/// `run` rewritten as a file could hold it: its one type `t` with `ok` successes (of about
/// 1 ms) and `failed` failures, and a window long enough for them. It passes the checks
/// `read_json` makes: each file alone is a run that could have been.
fn huge(run: &BenchRun, dir: &std::path::Path, i: usize, ok: u64, failed: u64) -> BenchRun {
    use base64::Engine as _;
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
    let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    h.record_n(1000, ok).unwrap();
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(&h, &mut bytes)
        .unwrap();
    let mut v = serde_json::to_value(run).unwrap();
    let t = &mut v["transactions"][0];
    t["ok"] = ok.into();
    t["failed"] = failed.into();
    t["failures"] = serde_json::json!({ "40001": failed });
    t["histogram"] = base64::engine::general_purpose::STANDARD
        .encode(&bytes)
        .into();
    // Means of 1 ms and a little more, so that the runs differ and the mean is compared.
    let (n, mean) = (ok as f64, 1.0 + i as f64 / 100.0);
    t["latency_stats"] = serde_json::json!({
        "n": ok, "sum": n * mean, "sum_sq": n * mean * mean, "sum_ln": n * mean.ln(),
        "sum_ln_sq": n * mean.ln() * mean.ln(), "min": 1.0, "max": mean
    });
    v["measured_s"] = 1e11.into();
    v["seed"] = (i as u64).into();
    let path = dir.join(format!("huge-{i}.json"));
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    BenchRun::read_json(&path).expect("each file alone is readable")
}

/// Counts that each file holds but a side's files together overflow: the rows that add them
/// over the runs say so, and the rest is still compared. Before, the failure-rate row and the
/// transaction unit added them unchecked: a panic ("attempt to add with overflow") in a
/// debug build, and in a release build a total wrapped to a small number, a failure rate
/// made up.
#[test]
fn counts_that_overflow_when_a_sides_runs_are_added_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let base = run("w", &["t"], 1.0);
    let big = 7_000_000_000_000_000_000;
    let a: Vec<BenchRun> = (0..3).map(|i| huge(&base, dir.path(), i, big, 1)).collect();
    let b: Vec<BenchRun> = (3..6)
        .map(|i| huge(&base, dir.path(), i, big - 1, 2))
        .collect();
    let s = CompareSettings::default();
    let overflows = |o: &Outcome| matches!(o, Outcome::Skipped(why) if why.contains("overflow"));
    for unit in [Unit::Run, Unit::Transaction] {
        let out = compare_sides(&a, &b, None, unit, &s).unwrap();
        // The type's failure rate and the whole mix's.
        let failures: Vec<&Outcome> = out
            .rows
            .iter()
            .filter(|r| r.metric == Metric::FailureRate)
            .map(|r| &r.outcome)
            .collect();
        assert!(
            failures.len() == 2 && failures.iter().all(|o| overflows(o)),
            "{unit}: {:?}",
            out.rows
        );
    }
    // The transaction unit adds every run's latencies into one set: their count overflows.
    let out = compare_sides(&a, &b, None, Unit::Transaction, &s).unwrap();
    assert!(overflows(mean_row(&out, "t")), "{:?}", mean_row(&out, "t"));
}

/// Fails every time.
struct Fails;

impl Transaction for Fails {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        tokio::task::yield_now().await;
        Err(TxError::new(
            "57P01",
            "terminating connection due to administrator command",
        ))
    }
}

/// A type that ran on both sides but never succeeded on one (B's change breaks it) is not
/// "only in A": it ran in B, and its failure rate is compared, credibly worse. Before, a type
/// counted as run only with a success, so the row said "only in A" and the type's
/// failure-rate row was never made: `--transaction t` compared nothing, and `--fail-if
/// slower` had no row of the type to trip on.
#[test]
fn a_type_that_failed_every_time_on_one_side_is_compared_by_its_failures() {
    let fails = || {
        let w = Workload::new("w")
            .transaction("t", 1, || Fails)
            .without_database();
        run_for(&w, 0.5)
    };
    let a = vec![run("w", &["t"], 1.0), run("w", &["t"], 1.0)];
    let b = vec![fails(), fails()];
    assert!(
        b.iter()
            .all(|r| r.transactions[0].ok == 0 && r.transactions[0].failed > 0)
    );
    let s = CompareSettings::default();
    for only in [None, Some("t")] {
        let out = compare_sides(&a, &b, only, Unit::Run, &s).unwrap();
        let why = match mean_row(&out, "t") {
            Outcome::Skipped(why) => why.clone(),
            o => panic!("{o:?}"),
        };
        assert!(
            !why.contains("only in") && why.contains("B") && why.contains("failed"),
            "{why}"
        );
        let failures = out
            .rows
            .iter()
            .find(|r| r.name.as_deref() == Some("t") && r.metric == Metric::FailureRate)
            .unwrap_or_else(|| panic!("{only:?}: no failure-rate row of t: {:?}", out.rows));
        assert_eq!(
            failures.verdict(),
            Some(&slipstream_stats::Verdict::CrediblySlower),
            "{:?}",
            failures.outcome
        );
    }
}
