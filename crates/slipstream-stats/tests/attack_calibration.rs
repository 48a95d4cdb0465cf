//! Calibration of the run unit under data that is not the model's own: heavy-tailed and
//! bimodal latencies, a rare stalled run, unequal numbers of runs, many runs, runs of
//! different lengths. Each scenario counts the A/A pairs called "credibly different" (the
//! docs promise at most about 5% per type) and, where it says so, the pairs that find a
//! true 10% slowdown. The bounded form runs in `cargo test`; `SLIPSTREAM_ATTACK_FULL=1` runs
//! ten times as many pairs.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal, Pareto};
use slipstream_stats::{CompareSettings, RunValue, Verdict, compare_runs};

/// Between-run drift of the whole run's latency (a share): checkpoints, the host's
/// neighbours, caches.
const RUN_DRIFT: f64 = 0.03;

/// How each transaction's latency (ms) is drawn.
#[derive(Clone, Copy)]
enum Shape {
    /// Pareto with tail index 1.5 (infinite variance), minimum 2 ms.
    Pareto,
    /// 90% around 5 ms, 10% around 50 ms (a cache miss).
    Bimodal,
}

/// One run: `n` transactions of `shape`, the run's drift factor, `scale` times; its mean and
/// the lab's floor under its error (cv / √n).
fn run(rng: &mut SmallRng, shape: Shape, n: usize, scale: f64) -> RunValue {
    let drift = Normal::new(0.0, RUN_DRIFT).unwrap().sample(rng).exp() * scale;
    let pareto = Pareto::<f64>::new(2.0, 1.5).unwrap();
    let jitter = Normal::<f64>::new(1.0, 0.2).unwrap();
    let (mut sum, mut sum_sq) = (0.0, 0.0);
    for _ in 0..n {
        let x = match shape {
            Shape::Pareto => pareto.sample(rng),
            Shape::Bimodal => {
                let centre: f64 = if rng.random::<f64>() < 0.1 { 50.0 } else { 5.0 };
                centre * jitter.sample(rng).max(0.05)
            }
        } * drift;
        sum += x;
        sum_sq += x * x;
    }
    let mean = sum / n as f64;
    let sd = (sum_sq / n as f64 - mean * mean).max(0.0).sqrt();
    RunValue {
        value: mean,
        se_log: sd / mean / (n as f64).sqrt(),
    }
}

fn pairs(bounded: u32) -> u32 {
    if std::env::var_os("SLIPSTREAM_ATTACK_FULL").is_some() {
        bounded * 10
    } else {
        bounded
    }
}

/// (A/A pairs called different, 10% slowdowns found) over `pairs` pairs of `side(rng, scale,
/// which)`.
fn rates(
    seed: u64,
    pairs: u32,
    side: impl Fn(&mut SmallRng, f64, usize) -> Vec<RunValue>,
) -> (u32, u32) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut alarms, mut found) = (0, 0);
    for p in 0..pairs {
        let mut s = CompareSettings::default();
        s.sampler.seed = u64::from(p);
        let a = side(&mut rng, 1.0, 0);
        let a2 = side(&mut rng, 1.0, 1);
        let b = side(&mut rng, 1.1, 1);
        let c = compare_runs(&a, &a2, &s).unwrap();
        assert!(
            !matches!(c.verdict, Verdict::Unreliable(_)),
            "{:?}",
            c.verdict
        );
        alarms += u32::from(c.verdict.is_different());
        found += u32::from(compare_runs(&a, &b, &s).unwrap().verdict == Verdict::CrediblySlower);
    }
    (alarms, found)
}

/// One side's runs: `(rng, scale, which side)`, side 0 being A.
type Side = dyn Fn(&mut SmallRng, f64, usize) -> Vec<RunValue>;

/// Promise: "at most 5% per type, as calibrated" under each shape, with the runs a reader
/// would make. Holds: every scenario stays at or under 5% (see the printed rates; the
/// assertion allows 7.5% for the binomial noise of the bounded form).
#[test]
fn the_run_unit_stays_calibrated_on_realistic_shapes_holds() {
    let n = pairs(100);
    let scenarios: Vec<(&str, Box<Side>)> = vec![
        (
            "Pareto(1.5) latencies, 2,000 a run, 3 a side",
            Box::new(|rng, scale, _| {
                (0..3)
                    .map(|_| run(rng, Shape::Pareto, 2000, scale))
                    .collect()
            }),
        ),
        (
            "bimodal latencies, 40 a run (a rare type), 3 a side",
            Box::new(|rng, scale, _| {
                (0..3)
                    .map(|_| run(rng, Shape::Bimodal, 40, scale))
                    .collect()
            }),
        ),
        (
            "2 runs against 10",
            Box::new(|rng, scale, which| {
                let k = if which == 0 { 2 } else { 10 };
                (0..k)
                    .map(|_| run(rng, Shape::Bimodal, 2000, scale))
                    .collect()
            }),
        ),
        (
            "20 runs a side",
            Box::new(|rng, scale, _| {
                (0..20)
                    .map(|_| run(rng, Shape::Bimodal, 2000, scale))
                    .collect()
            }),
        ),
        (
            "runs of 200 transactions against runs of 20,000",
            Box::new(|rng, scale, which| {
                let len = if which == 0 { 200 } else { 20_000 };
                (0..3)
                    .map(|_| run(rng, Shape::Pareto, len, scale))
                    .collect()
            }),
        ),
        (
            "a stalled run (3x) in one side of ten",
            Box::new(|rng, scale, _| {
                let mut v: Vec<RunValue> = (0..3)
                    .map(|_| run(rng, Shape::Bimodal, 2000, scale))
                    .collect();
                if rng.random::<f64>() < 0.1 {
                    v[0].value *= 3.0;
                }
                v
            }),
        ),
    ];
    let mut failed = Vec::new();
    for (i, (name, side)) in scenarios.iter().enumerate() {
        let (alarms, found) = rates(4000 + i as u64, n, side);
        eprintln!(
            "{name}: A/A {alarms} of {n} called different; a 10% slowdown found in {found} of {n}"
        );
        if alarms * 40 > n * 3 {
            failed.push(format!("{name}: {alarms} of {n}"));
        }
    }
    assert!(
        failed.is_empty(),
        "A/A called different too often: {failed:?}"
    );
}
