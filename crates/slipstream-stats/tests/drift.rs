//! Calibration under minute-scale drift: runs of one process whose per-second mean latency
//! wanders (AR(1), φ = 0.95 at 1 s: a time constant of 20 s), slows down for 5 s every 30 s (a
//! checkpoint) and stalls now and then (a second at 3x). Between-run variance is then real and
//! invisible from inside one run, which is what made the old default cry wolf.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, Normal};
use slipstream_stats::{
    CompareSettings, RunValue, Suff, Verdict, batch_means, compare, compare_runs,
};

/// Per-second correlation of the drift.
const PHI: f64 = 0.95;
/// Stationary standard deviation of the drift (a share of the mean).
const DRIFT_SD: f64 = 0.035;
/// The checkpoint: every `PERIOD` s, `SLOW_FOR` s at `SLOW` times the latency.
const PERIOD: usize = 30;
const SLOW_FOR: usize = 5;
const SLOW: f64 = 1.10;
/// A stalled second: this likely, this many times slower.
const STALL_P: f64 = 0.002;
const STALL: f64 = 3.0;
/// Transactions per second, each with this coefficient of variation.
const RATE: f64 = 100.0;
const TX_CV: f64 = 0.5;
/// Seconds per run: five minutes, so the drift's time constant fits many times into a run.
const SECONDS: usize = 300;

/// One run's per-second mean latencies (ms), around `scale`.
fn run(rng: &mut SmallRng, scale: f64) -> Vec<f64> {
    let innovation = Normal::new(0.0, DRIFT_SD * (1.0 - PHI * PHI).sqrt()).unwrap();
    // Each run starts wherever the drift happens to be, and at a random checkpoint phase.
    let mut x = Normal::new(0.0, DRIFT_SD).unwrap().sample(rng);
    let phase = rng.random_range(0..PERIOD);
    // The mean of RATE transactions of the given cv: gamma with cv / sqrt(RATE).
    let shape = RATE / (TX_CV * TX_CV);
    let sampling = Gamma::new(shape, 1.0 / shape).unwrap();
    (0..SECONDS)
        .map(|s| {
            x = PHI * x + innovation.sample(rng);
            let slow = if (s + phase) % PERIOD < SLOW_FOR {
                SLOW
            } else {
                1.0
            };
            let stall = if rng.random::<f64>() < STALL_P {
                STALL
            } else {
                1.0
            };
            scale * (1.0 + x).max(0.2) * slow * stall * sampling.sample(rng)
        })
        .collect()
}

/// The old default: one run per side, per-second means as independent values, ROPE ±1%.
#[test]
fn the_old_per_second_default_cries_wolf_under_drift() {
    let mut rng = SmallRng::seed_from_u64(20);
    let pairs = 60u64;
    let mut alarms = 0;
    for p in 0..pairs {
        let (a, b) = (run(&mut rng, 10.0), run(&mut rng, 10.0));
        let mut s = CompareSettings {
            rope: 0.01,
            ..Default::default()
        };
        s.sampler.seed = p;
        if compare(&Suff::of(&a), &Suff::of(&b), &s)
            .unwrap()
            .verdict
            .is_different()
        {
            alarms += 1;
        }
    }
    eprintln!(
        "old default (per-second unit, one run per side, ROPE 1%): {alarms}/{pairs} A/A pairs called different"
    );
    assert!(
        alarms * 20 > pairs,
        "{alarms} of {pairs}: the drift is too weak to test anything"
    );
}

/// A run's mean latency, as a result file gives it (every second carries the same count
/// here), with the floor the lab puts under its error: the transactions' cv / √n.
fn run_mean(rng: &mut SmallRng, scale: f64) -> RunValue {
    let r = run(rng, scale);
    RunValue {
        value: r.iter().sum::<f64>() / r.len() as f64,
        se_log: TX_CV / (RATE * SECONDS as f64).sqrt(),
    }
}

/// The acceptance criterion: runs as the unit, three a side, the default ROPE (±5%). Each pair
/// is one transaction type's comparison, so the rates are per type.
#[test]
fn three_runs_a_side_rarely_cry_wolf_and_find_a_10_percent_shift() {
    let mut rng = SmallRng::seed_from_u64(2020);
    let pairs = 200u32;
    let (mut alarms, mut found, mut unreliable, mut flagged) = (0u32, 0u32, 0u32, 0u32);
    for p in 0..pairs {
        let mut s = CompareSettings::default();
        s.sampler.seed = u64::from(p);
        let side = |rng: &mut SmallRng, scale: f64| -> Vec<RunValue> {
            (0..3).map(|_| run_mean(rng, scale)).collect()
        };
        let (a, a2) = (side(&mut rng, 10.0), side(&mut rng, 10.0));
        let c = compare_runs(&a, &a2, &s).unwrap();
        alarms += u32::from(c.verdict.is_different());
        unreliable += u32::from(matches!(c.verdict, Verdict::Unreliable(_)));
        flagged += u32::from(!c.warnings.is_empty());
        let b = side(&mut rng, 11.0);
        let c = compare_runs(&a, &b, &s).unwrap();
        found += u32::from(c.verdict == Verdict::CrediblySlower);
    }
    eprintln!(
        "runs as the unit, 3 a side, ROPE ±5%: A/A {alarms}/{pairs} called different ({flagged} with a predictive-check warning, {unreliable} without a verdict); a 10% shift found in {found}/{pairs}"
    );
    assert!(
        alarms * 20 <= pairs,
        "{alarms} of {pairs} A/A pairs called different"
    );
    assert!(
        found * 10 >= pairs * 8,
        "a 10% shift found in {found} of {pairs}"
    );
    assert_eq!(unreliable, 0);
}

/// One run a side, its per-second series cut into batch means by its autocorrelation: better
/// than treating seconds as independent, but a run still cannot see the drift between runs.
#[test]
fn one_run_a_side_by_batch_means_is_measured() {
    let mut rng = SmallRng::seed_from_u64(21);
    let pairs = 60u32;
    let (mut alarms, mut found, mut batch) = (0u32, 0u32, 0usize);
    for p in 0..pairs {
        let mut s = CompareSettings::default();
        s.sampler.seed = u64::from(p);
        let (a, a2, b) = (
            run(&mut rng, 10.0),
            run(&mut rng, 10.0),
            run(&mut rng, 11.0),
        );
        let [ba, ba2, bb] = [&a, &a2, &b].map(|r| batch_means(r).unwrap());
        batch += ba.batch;
        alarms += u32::from(
            compare(&ba.values, &ba2.values, &s)
                .unwrap()
                .verdict
                .is_different(),
        );
        found += u32::from(
            compare(&ba.values, &bb.values, &s).unwrap().verdict == Verdict::CrediblySlower,
        );
    }
    eprintln!(
        "one run a side, batch means (mean batch {} s), ROPE ±5%: A/A {alarms}/{pairs} called different; a 10% shift found in {found}/{pairs}",
        batch / pairs as usize
    );
    assert!(
        alarms * 20 <= pairs,
        "{alarms} of {pairs} A/A pairs called different"
    );
}
