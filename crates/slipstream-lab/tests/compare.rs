//! `compare` on result files: what is compared, what is refused and why, and the A/B
//! experiment's verdicts against a real server.

use std::time::Duration;

use slipstream_lab::bench::compare::{Outcome, Unit, compare_runs};
use slipstream_lab::bench::{self, BenchRun, RunConfig, Session, Transaction, TxError, Workload};
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
    let mut c = RunConfig::new(None);
    c.duration = Duration::from_secs_f64(secs);
    c.threads = 1;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench::run(&w, &c, std::future::pending::<()>()))
        .unwrap()
}

#[test]
fn types_in_one_run_only_and_too_few_intervals_are_named() {
    let a = run("w", &["both", "only-a"], 4.0);
    let b = run("w", &["both", "only-b"], 4.0);
    let short = run("w", &["both"], 1.5);
    let s = CompareSettings::default();
    let out = compare_runs(&a, &b, None, Unit::Interval, &s).unwrap();
    let by = |name: &str| out.iter().find(|(n, _)| n == name).map(|(_, o)| o).unwrap();
    assert!(matches!(by("both"), Outcome::Compared(_)));
    assert!(matches!(by("only-a"), Outcome::Skipped(why) if why == "only in A"));
    assert!(matches!(by("only-b"), Outcome::Skipped(why) if why == "only in B"));

    // 1.5 s gives two intervals: too few per interval, enough per transaction.
    let out = compare_runs(&a, &short, Some("both"), Unit::Interval, &s).unwrap();
    assert!(
        matches!(&out[0].1, Outcome::Skipped(why) if why.contains("at least 3") && why.contains("intervals")),
        "{:?}",
        out[0].1
    );
    let out = compare_runs(&a, &short, Some("both"), Unit::Transaction, &s).unwrap();
    assert!(matches!(&out[0].1, Outcome::Compared(_)));

    let e = compare_runs(&a, &b, Some("nope"), Unit::Interval, &s).unwrap_err();
    assert!(e.to_string().contains("no transaction `nope`"), "{e}");
}
