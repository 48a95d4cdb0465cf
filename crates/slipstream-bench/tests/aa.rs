//! A/A on real runs: identical Order Entry runs against one server, compared the way
//! `slipstream compare` compares them. Nothing changed between the runs, so no verdict may
//! say "credibly different".
//!
//! The short form (in `make test`): six runs of 3 s, sides interleaved (A B A B A B, so drift
//! of the machine hits both sides alike), three a side, runs as the unit. It judges six real
//! runs recorded once in `tests/data/aa/`, not six fresh ones: compare is calibrated to call up
//! to about 5% of A/A rows different, so over its ten or so rows fresh runs failed the test
//! now and then on a correct program (CI, 2026-11-25), while recorded runs get the same
//! verdicts every time (compare's sampler is seeded). To record a new set (say, after a change
//! of the result file's schema that old files cannot follow):
//!
//! ```sh
//! SLIPSTREAM_AA_RECORD=1 cargo test -p slipstream-bench --test aa -- --nocapture
//! ```
//!
//! The full form measures the false-alarm rates recorded in docs/benchmarks.md:
//!
//! ```sh
//! SLIPSTREAM_AA_FULL=1 cargo test --release -p slipstream-lab --test aa -- --nocapture
//! ```
//!
//! Twelve runs of 12 s (4 users, scale 0.05, seeds 1-12, back to back, as in issue 20); every
//! consecutive pair compared with one run a side, and every window of six consecutive runs
//! compared three against three.

use std::path::Path;
use std::time::Duration;

use slipstream_bench::compare::{Metric, Outcome, Report, Unit, compare_sides};
use slipstream_bench::{self as bench, BenchRun, RunConfig, order_entry};
use slipstream_stats::CompareSettings;
use slipstream_testkit::Cluster;

struct Form {
    runs: usize,
    seconds: f64,
    scale: f64,
    /// Seeds 1, 2, 3 ... (the issue's protocol) rather than one seed for every run.
    seeds_vary: bool,
}

impl Form {
    /// Run i's seed. The short form repeats one seed, so its runs make the same choices:
    /// with seeds 1-6, odd-seeded runs were slower than even-seeded ones in three sets of
    /// three (a real difference of workload, which interleaved sides then line up with).
    fn seed(&self, i: usize) -> u64 {
        if self.seeds_vary { i as u64 + 1 } else { 1 }
    }
}

fn form() -> Form {
    if std::env::var_os("SLIPSTREAM_AA_FULL").is_some() {
        Form {
            runs: 12,
            seconds: 12.0,
            scale: 0.05,
            seeds_vary: true,
        }
    } else {
        Form {
            runs: 6,
            seconds: 3.0,
            scale: 0.01,
            seeds_vary: false,
        }
    }
}

fn runs(f: &Form) -> Vec<BenchRun> {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(order_entry::setup(&url, f.scale, |_| {}))
        .unwrap();
    // Identical runs need an identical start. Right after the bulk load, autovacuum and
    // autoanalyze visit the fresh tables and dirty buffers await a checkpoint: the first run
    // would pay for the load. Settle that once, and start every run after a checkpoint.
    let mut client = rt.block_on(slipstream_pg::connect(&url)).unwrap();
    rt.block_on(client.batch_execute("VACUUM ANALYZE")).unwrap();
    (0..f.runs)
        .map(|i| {
            rt.block_on(client.batch_execute("CHECKPOINT")).unwrap();
            let mut c = RunConfig::new(Some(url.clone()));
            c.users = 4;
            c.duration = Duration::from_secs_f64(f.seconds);
            c.warmup = Duration::from_secs(1);
            c.seed = f.seed(i);
            rt.block_on(bench::run(
                &order_entry::workload(),
                &c,
                std::future::pending::<()>(),
            ))
            .unwrap()
        })
        .collect()
}

/// The short form's six runs, read from `tests/data/aa/`; recorded there afresh first when
/// `SLIPSTREAM_AA_RECORD` is set.
fn recorded_runs(f: &Form) -> Vec<BenchRun> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aa");
    if std::env::var_os("SLIPSTREAM_AA_RECORD").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, r) in runs(f).iter().enumerate() {
            r.write_json(&dir.join(format!("run{}.json", i + 1)))
                .unwrap();
        }
    }
    (1..=f.runs)
        .map(|i| BenchRun::read_json(&dir.join(format!("run{i}.json"))).unwrap())
        .collect()
}

/// (credibly different rows, compared rows) among the per-type mean-latency rows, and among
/// every row.
fn alarms(r: &Report) -> ((usize, usize), (usize, usize)) {
    let compared = |mean_only: bool| {
        r.rows
            .iter()
            .filter(|row| row.verdict().is_some())
            .filter(move |row| !mean_only || (row.name.is_some() && row.metric == Metric::Mean))
    };
    let count = |mean_only: bool| {
        (
            compared(mean_only)
                .filter(|row| row.direction().is_some())
                .count(),
            compared(mean_only).count(),
        )
    };
    (count(true), count(false))
}

fn show(r: &Report) -> String {
    r.rows
        .iter()
        .map(|row| {
            let detail = match &row.outcome {
                Outcome::Compared(c) => format!(
                    " (A {:.3}, B {:.3}, B/A {:.3} .. {:.3})",
                    c.a.mean, c.b.mean, c.ratio.hdi.0, c.ratio.hdi.1
                ),
                _ => String::new(),
            };
            format!(
                "{} {}: {}{detail}",
                row.scope(),
                row.metric,
                row.verdict_text()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn identical_order_entry_runs_are_never_called_credibly_different() {
    let f = form();
    let all = if f.runs == 6 {
        recorded_runs(&f)
    } else {
        runs(&f)
    };
    let s = CompareSettings::default();
    // Interleaved sides: even-numbered runs are A, odd-numbered B.
    let window_by = |w: &[BenchRun], unit: Unit| -> Report {
        let a: Vec<BenchRun> = w.iter().step_by(2).cloned().collect();
        let b: Vec<BenchRun> = w.iter().skip(1).step_by(2).cloned().collect();
        compare_sides(&a, &b, None, unit, &s).unwrap()
    };
    let window = |w: &[BenchRun]| window_by(w, Unit::Auto);
    for (i, r) in all.iter().enumerate() {
        let p99: Vec<String> = r
            .transactions
            .iter()
            .filter(|t| t.ok > 0)
            .map(|t| {
                format!(
                    "{} {:.2}/{:.2}",
                    t.name,
                    t.latency_stats.mean(),
                    t.latency_ms.p99
                )
            })
            .collect();
        eprintln!(
            "run {}: {:.0} TPS; mean/p99 ms: {}",
            i + 1,
            r.tps(),
            p99.join(", ")
        );
    }
    let first = window(&all[..6]);
    assert_eq!(first.unit, Unit::Run);
    eprintln!("three a side, runs 1-6:\n{}", show(&first));
    if f.runs == 6 {
        // Calibrated means at most about 5% false alarms per row, not none: over the ten or
        // so rows compared here, one alarm now and then is what a calibrated compare gives
        // on fresh runs (CI saw one: browse-products p99, B/A 1.06-1.36, every mean row
        // undecided). Two or more, or any per-type mean, is not: a compare as miscalibrated
        // as the old default (20-44% per row in the full form) fails this about four times in
        // five. The recorded runs drift enough to tell: judged with every latency as an
        // independent value (the article's overconfident unit), per-type means of these very
        // runs come out credibly different.
        let overconfident = window_by(&all[..6], Unit::Transaction);
        let ((wrong, _), _) = alarms(&overconfident);
        assert!(
            wrong > 0,
            "the recorded runs no longer catch an overconfident compare; record new ones:\n{}",
            show(&overconfident)
        );
        let ((types, _), (any, compared)) = alarms(&first);
        assert_eq!(
            types,
            0,
            "a per-type mean called different:\n{}",
            show(&first)
        );
        assert!(
            any <= 1,
            "{any} of {compared} rows called different:\n{}",
            show(&first)
        );
        return;
    }

    // The full form: rates over every window and every consecutive pair.
    let (mut by_runs, mut by_runs_all) = ((0, 0), (0, 0));
    for w in all.windows(6) {
        let ((t, tn), (a, an)) = alarms(&window(w));
        by_runs = (by_runs.0 + t, by_runs.1 + tn);
        by_runs_all = (by_runs_all.0 + a, by_runs_all.1 + an);
    }
    let (mut single, mut single_all, mut pairs_alarmed) = ((0, 0), (0, 0), 0);
    for p in all.windows(2) {
        let r = compare_sides(&p[..1], &p[1..], None, Unit::Auto, &s).unwrap();
        let ((t, tn), (a, an)) = alarms(&r);
        single = (single.0 + t, single.1 + tn);
        single_all = (single_all.0 + a, single_all.1 + an);
        pairs_alarmed += usize::from(a > 0);
    }
    // The old default, for the record: per-second means of one run as independent values,
    // ROPE ±1% (what issue 20 measured).
    let (mut old, mut old_n) = (0, 0);
    let seconds = |r: &BenchRun, name: &str| -> slipstream_stats::Suff {
        let mut s = slipstream_stats::Suff::default();
        for iv in r.intervals.per_transaction[name]
            .iter()
            .filter(|i| i.sufficient.n > 0)
        {
            s.add(iv.sufficient.mean());
        }
        s
    };
    let old_settings = CompareSettings {
        rope: 0.01,
        ..Default::default()
    };
    for p in all.windows(2) {
        for t in p[0].transactions.iter().filter(|t| t.ok > 0) {
            let c = slipstream_stats::compare(
                &seconds(&p[0], &t.name),
                &seconds(&p[1], &t.name),
                &old_settings,
            );
            if let Ok(c) = c {
                old_n += 1;
                old += usize::from(c.verdict.is_different());
            }
        }
    }
    eprintln!(
        "old default (one run a side, seconds as independent values, ROPE ±1%): per-type means {old}/{old_n} credibly different"
    );
    let tps: Vec<String> = all.iter().map(|r| format!("{:.0}", r.tps())).collect();
    eprintln!(
        "A/A, {} Order Entry runs of {} s (TPS {}):\n\
         one run a side ({} pairs): per-type means {}/{} credibly different, all rows {}/{}, pairs with any {}\n\
         three a side ({} windows): per-type means {}/{} credibly different, all rows {}/{}",
        f.runs,
        f.seconds,
        tps.join(" "),
        f.runs - 1,
        single.0,
        single.1,
        single_all.0,
        single_all.1,
        pairs_alarmed,
        f.runs - 5,
        by_runs.0,
        by_runs.1,
        by_runs_all.0,
        by_runs_all.1
    );
    assert!(
        by_runs.0 * 20 <= by_runs.1,
        "three a side: {} of {} per-type verdicts credibly different",
        by_runs.0,
        by_runs.1
    );
}
