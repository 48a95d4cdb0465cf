//! The comparison on synthetic data with known answers: coverage of the 95% HDI, false alarms
//! between runs of one process with realistic autocorrelation, and power against a 5% shift.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma, Normal};
use slipstream_stats::{CompareSettings, SamplerSettings, Suff, Verdict, compare};

fn settings() -> CompareSettings {
    CompareSettings {
        rope: 0.01,
        sampler: SamplerSettings::default(),
        model: slipstream_stats::Model::Gamma,
    }
}

/// n gamma values with the given mean and coefficient of variation.
fn gamma(rng: &mut SmallRng, n: usize, mean: f64, cv: f64) -> Suff {
    let shape = 1.0 / (cv * cv);
    let g = Gamma::new(shape, mean / shape).unwrap();
    Suff::of(&(0..n).map(|_| g.sample(rng)).collect::<Vec<_>>())
}

#[test]
fn the_hdi_of_the_difference_covers_the_truth_about_95_percent_of_the_time() {
    let mut rng = SmallRng::seed_from_u64(2026);
    // 400 replications: the binomial noise of the coverage (±1.1%) stays well inside 90-99%.
    let (reps, mut covered, mut unreliable) = (400u32, 0u32, 0u32);
    for r in 0..u64::from(reps) {
        let (ma, mb) = (10.0, 10.0 * rng.random_range(0.9..1.1));
        let a = gamma(&mut rng, 40, ma, 0.5);
        let b = gamma(&mut rng, 40, mb, 0.5);
        let mut s = settings();
        s.sampler.seed = r;
        let c = compare(&a, &b, &s).unwrap();
        if matches!(c.verdict, Verdict::Unreliable(_)) {
            unreliable += 1;
        }
        let truth = mb - ma;
        if c.diff.hdi.0 <= truth && truth <= c.diff.hdi.1 {
            covered += 1;
        }
    }
    let share = f64::from(covered) / f64::from(reps);
    eprintln!("coverage {share} over {reps} replications, {unreliable} unreliable");
    assert!((0.90..=0.99).contains(&share), "coverage {share}");
    assert!(unreliable <= 4, "{unreliable} unreliable results");
}

/// One synthetic run: `seconds` intervals of `rate` transactions whose latency drifts with an
/// AR(1) process (phi 0.98 per transaction: neighbours are alike, as on a real server) times
/// independent jitter; with `stalls`, every 20 s one second runs at 3x latency (a checkpoint),
/// at a random phase. Returns (per-interval means, every transaction).
fn run(rng: &mut SmallRng, seconds: usize, rate: usize, scale: f64, stalls: bool) -> (Suff, Suff) {
    let noise = Normal::new(0.0, 0.02).unwrap();
    let phase = rng.random_range(0..20);
    let mut x: f64 = 0.0;
    let (mut intervals, mut all) = (Suff::default(), Suff::default());
    for s in 0..seconds {
        let stall = if stalls && s % 20 == phase { 3.0 } else { 1.0 };
        let mut interval = Suff::default();
        for _ in 0..rate {
            x = 0.98 * x + noise.sample(rng);
            let y = scale * stall * (1.0 + x).max(0.2) * (0.8 + 0.4 * rng.random::<f64>());
            interval.add(y);
            all.add(y);
        }
        intervals.add(interval.mean());
    }
    (intervals, all)
}

#[test]
fn runs_of_one_process_are_rarely_called_different_and_a_5_percent_shift_is_found() {
    let mut rng = SmallRng::seed_from_u64(7);
    let pairs = 50u64;
    let (mut false_alarms, mut stall_alarms, mut per_transaction_alarms, mut found) = (0, 0, 0, 0);
    for p in 0..pairs {
        let mut s = settings();
        s.sampler.seed = p;
        let (a, a_all) = run(&mut rng, 60, 200, 1.0, false);
        let (b, b_all) = run(&mut rng, 60, 200, 1.0, false);
        if compare(&a, &b, &s).unwrap().verdict.is_different() {
            false_alarms += 1;
        }
        if compare(&a_all, &b_all, &s).unwrap().verdict.is_different() {
            per_transaction_alarms += 1;
        }
        let (sa, _) = run(&mut rng, 60, 200, 1.0, true);
        let (sb, _) = run(&mut rng, 60, 200, 1.0, true);
        if compare(&sa, &sb, &s).unwrap().verdict.is_different() {
            stall_alarms += 1;
        }
        let (shifted, _) = run(&mut rng, 60, 200, 1.05, false);
        if compare(&a, &shifted, &s).unwrap().verdict == Verdict::CrediblySlower {
            found += 1;
        }
    }
    eprintln!(
        "A/A alarms: {false_alarms}/{pairs} (with stalls {stall_alarms}), per-transaction unit {per_transaction_alarms}; 5% shift found {found}/{pairs}"
    );
    assert!(
        false_alarms * 10 <= pairs,
        "per-interval unit: {false_alarms} of {pairs} A/A pairs called different"
    );
    assert!(
        stall_alarms * 10 <= pairs,
        "per-interval unit with stalls: {stall_alarms} of {pairs} A/A pairs called different"
    );
    assert!(
        found * 10 >= pairs * 8,
        "a 5% shift found in {found} of {pairs}"
    );
    // The article's per-transaction unit treats 12,000 correlated latencies as independent:
    // it is overconfident, which is why it is not the default.
    assert!(
        per_transaction_alarms > 2 * false_alarms.max(1),
        "per-transaction unit: {per_transaction_alarms} alarms against {false_alarms}"
    );
}

#[test]
fn too_few_values_or_broken_statistics_are_refused() {
    let ok = Suff::of(&[1.0, 2.0, 3.0]);
    let e = compare(&Suff::of(&[1.0, 2.0]), &ok, &settings()).unwrap_err();
    assert!(e.to_string().contains("at least 3"), "{e}");
    let broken = Suff {
        n: 5,
        sum: f64::NAN,
        sum_sq: 1.0,
        sum_ln: 0.0,
        sum_ln_sq: 0.0,
    };
    let e = compare(&ok, &broken, &settings()).unwrap_err();
    assert!(e.to_string().contains("group B"), "{e}");
}
