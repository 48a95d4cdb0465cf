//! Attacks on `slipstream compare` with result files whose truth is known: synthetic runs
//! built from a recorded one, their per-second series drawn from chosen distributions.

use std::collections::BTreeMap;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, Poisson};
use slipstream_bench::compare::{Metric, Outcome, Report, Unit, compare_sides};
use slipstream_bench::{BenchRun, Interval};
use slipstream_stats::{CompareSettings, Comparison, Suff};

/// A recorded run, as the frame the synthetic ones are written into.
fn recorded() -> BenchRun {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aa");
    BenchRun::read_json(&dir.join("run1.json")).unwrap()
}

/// A run of one type `t` for `secs` seconds: Poisson(`rate`) successes a second, each a gamma
/// latency of mean 10 ms (cv 0.5).
fn run(rng: &mut SmallRng, secs: usize, rate: f64) -> BenchRun {
    let mut r = recorded();
    let mut t = r.transactions[0].clone();
    t.name = "t".into();
    let latency = Gamma::new(4.0, 2.5).unwrap();
    let arrivals = Poisson::new(rate).unwrap();
    let mut all = Suff::default();
    let series: Vec<Interval> = (0..secs)
        .map(|_| {
            let n = arrivals.sample(rng) as usize;
            let s = Suff::of(&(0..n).map(|_| latency.sample(rng)).collect::<Vec<_>>());
            all.merge(&s);
            Interval {
                sufficient: s,
                ..Default::default()
            }
        })
        .collect();
    t.ok = all.n;
    t.failed = 0;
    t.latency_stats.sufficient = all;
    r.transactions = vec![t];
    r.intervals.per_transaction = BTreeMap::from([("t".to_string(), series)]);
    r.intervals.seconds = 1.0;
    r.measured_s = secs as f64;
    r.seed = rng.random();
    r
}

/// The whole mix's TPS row.
fn tps_row(r: &Report) -> &Comparison {
    let row = r
        .rows
        .iter()
        .find(|row| row.name.is_none() && row.metric == Metric::Tps)
        .expect("a TPS row");
    match &row.outcome {
        Outcome::Compared(c) => c,
        o => panic!("the TPS row was not compared: {o:?}"),
    }
}

/// Promise (docs/compare.md, "More than means"): with one run a side, the TPS row compares the
/// runs' throughput, its per-second series batched like latency, and shows A's and B's TPS
/// with the ratio B / A and its 95% HDI.
///
/// Steps: twelve pairs of five-minute runs, one a side, at 2 and 3 successes a second
/// (Poisson: a mix with think time and a few users); the true TPS ratio is 1.5.
///
/// Before the fix: each second's value was 1000 / its count of successes, seconds with none
/// left out, and their mean is not 1000 / TPS (Jensen, and the empty seconds): A read 1.71
/// TPS on average for a true 2, B / A about 1.34, and the HDI held the true 1.5 in 5 of the
/// twelve pairs (after: 12, A 1.99 on average).
#[test]
fn throughput_at_a_few_transactions_a_second_is_read_without_bias() {
    let mut rng = SmallRng::seed_from_u64(37);
    let (pairs, mut covered, mut shown_a) = (12u32, 0u32, 0.0);
    for p in 0..pairs {
        let (a, b) = (run(&mut rng, 300, 2.0), run(&mut rng, 300, 3.0));
        let mut s = CompareSettings::default();
        s.sampler.seed = u64::from(p);
        let report = compare_sides(&[a], &[b], None, Unit::Auto, &s).unwrap();
        assert_eq!(report.unit, Unit::Interval);
        let c = tps_row(&report);
        // As `slipstream compare` shows it: TPS, and B / A of TPS.
        let (lo, hi) = (1.0 / c.ratio.hdi.1, 1.0 / c.ratio.hdi.0);
        covered += u32::from(lo <= 1.5 && 1.5 <= hi);
        shown_a += 1000.0 / c.a.mean / f64::from(pairs);
        eprintln!(
            "pair {p}: A {:.3} TPS, B {:.3} TPS, B / A {:.3} ({lo:.3} .. {hi:.3})",
            1000.0 / c.a.mean,
            1000.0 / c.b.mean,
            1.0 / c.ratio.mean
        );
    }
    assert!(
        covered * 4 >= pairs * 3,
        "the 95% HDI of B / A held the true 1.5 in {covered} of {pairs} pairs"
    );
    assert!(
        (shown_a - 2.0).abs() < 0.1,
        "A's TPS read {shown_a:.3} on average for a true 2"
    );
}
