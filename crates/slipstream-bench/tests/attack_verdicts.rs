//! Attacks on `slipstream compare`'s calibration (docs/compare.md, "Calibration"): A/A and A/B
//! pairs of synthetic result files whose truth is known, in each unit and each figure.

use std::collections::BTreeMap;
use std::path::Path;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Poisson};
use slipstream_bench::compare::{Metric, Outcome, Row, Unit, compare_sides};
use slipstream_bench::{BenchRun, Interval};
use slipstream_stats::{CompareSettings, Comparison, Suff, Verdict};

/// A recorded run, as the frame the synthetic ones are written into.
fn recorded() -> BenchRun {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aa");
    BenchRun::read_json(&dir.join("run1.json")).unwrap()
}

/// What one synthetic run is made of.
#[derive(Clone, Copy)]
struct Spec {
    secs: usize,
    /// Mean transactions a second (Poisson).
    rate: f64,
    /// Median latency (ms) and sd of its log.
    median: f64,
    sigma: f64,
    /// Each transaction fails with this probability.
    fail: f64,
}

/// One minute at about 200 transactions a second, 10 ms median latency, no failures.
const MINUTE: Spec = Spec {
    secs: 60,
    rate: 200.0,
    median: 10.0,
    sigma: 0.5,
    fail: 0.0,
};

/// A run of one type `t` as `spec` says, its latency scaled by `slow` and its rate by `speed`.
fn run(rng: &mut SmallRng, spec: Spec, slow: f64, speed: f64) -> BenchRun {
    let mut r = recorded();
    let mut t = r.transactions[0].clone();
    t.name = "t".into();
    let latency = LogNormal::new((spec.median * slow).ln(), spec.sigma).unwrap();
    let arrivals = Poisson::new(spec.rate * speed).unwrap();
    let mut all = Suff::default();
    let mut values = Vec::new();
    let mut failed = 0u64;
    let series: Vec<Interval> = (0..spec.secs)
        .map(|_| {
            let n = arrivals.sample(rng) as usize;
            let mut ok = Vec::new();
            for _ in 0..n {
                if rng.random::<f64>() < spec.fail {
                    failed += 1;
                } else {
                    ok.push(latency.sample(rng));
                }
            }
            let s = Suff::of(&ok);
            all.merge(&s);
            values.extend(ok);
            Interval {
                sufficient: s,
                ..Default::default()
            }
        })
        .collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    // The percentile curve as the recorder's histogram gives it: each value at its rank.
    t.percentile_curve = values
        .iter()
        .enumerate()
        .map(|(i, v)| (100.0 * (i + 1) as f64 / n as f64, *v))
        .collect();
    let q = |p: f64| values[((p * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1];
    if n > 0 {
        t.latency_ms.p99 = q(0.99);
        t.latency_ms.mean = all.mean();
    }
    t.ok = all.n;
    t.failed = failed;
    t.latency_stats.sufficient = all;
    r.transactions = vec![t];
    r.intervals.per_transaction = BTreeMap::from([("t".to_string(), series)]);
    r.intervals.seconds = 1.0;
    r.measured_s = spec.secs as f64;
    r.seed = rng.random();
    r
}

/// `r` with `change` made to each second's latencies (given its index), and the run's totals
/// made theirs again.
fn with_seconds(mut r: BenchRun, mut change: impl FnMut(usize, &mut Suff)) -> BenchRun {
    let mut all = Suff::default();
    let series = r.intervals.per_transaction.get_mut("t").unwrap();
    for (i, second) in series.iter_mut().enumerate() {
        change(i, &mut second.sufficient);
        all.merge(&second.sufficient);
    }
    r.transactions[0].ok = all.n;
    r.transactions[0].latency_stats.sufficient = all;
    r
}

/// `r` with each second stalled (no transaction ended in it: a lock queue, a checkpoint on a
/// slow disk) with probability `p`; the successes it loses are gone, as in a closed loop.
fn stalled(rng: &mut SmallRng, r: BenchRun, p: f64) -> BenchRun {
    with_seconds(r, |_, second| {
        if rng.random::<f64>() < p {
            *second = Suff::default();
        }
    })
}

/// Promise (docs/compare.md, "How to read a verdict" and "More than means"): with one run a
/// side the TPS row compares the runs' throughput, and a verdict of "practically equivalent"
/// says B / A of TPS is credibly inside the ROPE (±5%).
///
/// Steps: ten pairs of one-minute runs, one a side, at about 200 successes a second; in B,
/// each second stalls (no transaction ends in it: a lock queue, a checkpoint on a slow disk)
/// with probability 0.1, so B measures 5-14% fewer TPS than A. The TPS row's B / A and its
/// verdict are held against what the two runs measured.
///
/// Before the fix: every second with no success was left out of the throughput series
/// before batching (it read as "the whole mix stopped; it shows in latency"), so B's series
/// was its rate while it ran: B / A was shown at 0.98-1.02 against 0.86-0.96 measured, and
/// all ten pairs were called "practically equivalent".
#[test]
fn a_run_that_stalls_is_not_shown_at_the_rate_it_had_while_it_ran() {
    let mut rng = SmallRng::seed_from_u64(5);
    let spec = MINUTE;
    let tps = |r: &BenchRun| r.transactions[0].ok as f64 / r.measured_s;
    let (mut equivalent, mut worst) = (0u32, 0.0f64);
    for p in 0..10u64 {
        let a = run(&mut rng, spec, 1.0, 1.0);
        let b = run(&mut rng, spec, 1.0, 1.0);
        let b = stalled(&mut rng, b, 0.1);
        let mut s = CompareSettings::default();
        s.sampler.seed = p;
        let report = compare_sides(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            None,
            Unit::Auto,
            &s,
        )
        .unwrap();
        assert_eq!(report.unit, Unit::Interval);
        let row = report
            .rows
            .iter()
            .find(|r| r.metric == Metric::Tps)
            .expect("a TPS row");
        let Outcome::Compared(c) = &row.outcome else {
            panic!("pair {p}: the TPS row was not compared: {:?}", row.outcome)
        };
        // As the table shows it: B / A of TPS.
        let (shown, measured) = (1.0 / c.ratio.mean, tps(&b) / tps(&a));
        worst = worst.max((shown / measured - 1.0).abs());
        equivalent += u32::from(row.verdict() == Some(&Verdict::PracticallyEquivalent));
        eprintln!(
            "pair {p}: B / A measured {measured:.3}, shown {shown:.3} ({:.3} .. {:.3}), {}",
            1.0 / c.ratio.hdi.1,
            1.0 / c.ratio.hdi.0,
            row.verdict_text()
        );
    }
    assert_eq!(
        equivalent, 0,
        "{equivalent} of 10 pairs called practically equivalent with B 5-14% below A"
    );
    assert!(
        worst < 0.03,
        "B / A of TPS shown {:.1}% from what the runs measured",
        worst * 100.0
    );
}

/// `r` (made by [`run`] from `spec`) with each second slowed with probability `p`: its
/// latency `k` times longer, and, the users being a closed loop, `k` times fewer transactions
/// end in it.
fn bursty(rng: &mut SmallRng, r: BenchRun, spec: Spec, p: f64, k: f64) -> BenchRun {
    let latency = LogNormal::new(spec.median.ln(), spec.sigma).unwrap();
    with_seconds(r, |_, second| {
        let (rate, slow) = if rng.random::<f64>() < p {
            (spec.rate / k, k)
        } else {
            (spec.rate, 1.0)
        };
        let n = Poisson::new(rate).unwrap().sample(rng) as usize;
        *second = Suff::of(
            &(0..n)
                .map(|_| slow * latency.sample(rng))
                .collect::<Vec<_>>(),
        );
    })
}

/// Promise (docs/compare.md, "How to read a verdict"): a mean latency row compares A's and
/// B's mean latency, shows each side's estimate of it, and calls B credibly slower only when
/// B / A's 95% HDI lies above the ROPE.
///
/// Steps: ten pairs of one-minute runs, one a side (the interval unit), at about 200
/// transactions a second. B slows down in a tenth of its seconds (latency 5 times longer, and,
/// a closed loop, 5 times fewer transactions end in them); A never does, its latency set so
/// that both sides' transactions take the same time on average (B measured 0.94-1.04 times
/// A's mean). Each pair's mean-latency row is held against what the runs measured.
///
/// Before the fix: the batch means were means of per-second means, each second weighing the
/// same however few transactions ended in it, so B's slow seconds counted five times their
/// share: B was shown up to 45% above what it measured, B / A at 1.04-1.50, and both rows
/// (the type's and the mix's) "credibly slower" in 4 of the 10 pairs.
#[test]
fn a_mean_latency_is_the_mean_of_the_transactions_not_of_the_seconds() {
    let mut rng = SmallRng::seed_from_u64(11);
    let spec = MINUTE;
    // B's transactions' mean: (0.9 * 200 * L + 0.1 * 40 * 5 L) / (0.9 * 200 + 0.1 * 40).
    let same = 200.0 / 184.0;
    let mean = |r: &BenchRun| r.transactions[0].latency_stats.sufficient.mean();
    let (mut different, mut worst) = (0u32, 0.0f64);
    for p in 0..10u64 {
        let a = run(&mut rng, spec, same, 1.0);
        let b = run(&mut rng, spec, 1.0, 1.0);
        let b = bursty(&mut rng, b, spec, 0.1, 5.0);
        let mut s = CompareSettings::default();
        s.sampler.seed = p;
        let report = compare_sides(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            None,
            Unit::Auto,
            &s,
        )
        .unwrap();
        assert_eq!(report.unit, Unit::Interval);
        for row in report.rows.iter().filter(|r| r.metric == Metric::Mean) {
            let Outcome::Compared(c) = &row.outcome else {
                panic!(
                    "pair {p}: {} was not compared: {:?}",
                    row.scope(),
                    row.outcome
                )
            };
            worst = worst
                .max((c.a.mean / mean(&a) - 1.0).abs())
                .max((c.b.mean / mean(&b) - 1.0).abs());
            different += u32::from(row.direction().is_some());
            eprintln!(
                "pair {p} {}: measured A {:.2} B {:.2} ms (B / A {:.3}); shown A {:.2} B {:.2} \
                 (B / A {:.3}, {:.3} .. {:.3}), {}",
                row.scope(),
                mean(&a),
                mean(&b),
                mean(&b) / mean(&a),
                c.a.mean,
                c.b.mean,
                c.ratio.mean,
                c.ratio.hdi.0,
                c.ratio.hdi.1,
                row.verdict_text()
            );
        }
    }
    assert_eq!(
        different, 0,
        "{different} mean-latency rows called credibly different with B's transactions 0.94-1.04 times A's"
    );
    assert!(
        worst < 0.05,
        "a side's mean latency shown {:.0}% from what it measured",
        worst * 100.0
    );
}

/// Pairs in the bounded form (`SLIPSTREAM_ATTACK_FULL` for ten times as many).
fn pairs(bounded: u32) -> u32 {
    if std::env::var_os("SLIPSTREAM_ATTACK_FULL").is_some() {
        bounded * 10
    } else {
        bounded
    }
}

/// A calibration count over A/A pairs and pairs with a true shift: how often identical sides
/// were called different, how often the shift was found, and how often B / A's 95% HDI held
/// the truth (over both kinds of pair).
#[derive(Default)]
struct Calibration {
    pairs: u32,
    false_alarms: u32,
    found: u32,
    covered: u32,
}

impl Calibration {
    /// One compared row: `truth` is B / A as the row's ratio reads it (1.0 for an A/A pair).
    fn count(&mut self, row: &Row, c: &Comparison, truth: f64) {
        if truth == 1.0 {
            self.pairs += 1;
            self.false_alarms += u32::from(row.direction().is_some());
        } else {
            self.found += u32::from(row.verdict() == Some(&Verdict::CrediblySlower));
        }
        self.covered += u32::from(c.ratio.hdi.0 <= truth && truth <= c.ratio.hdi.1);
    }

    /// Prints the counts and holds them to the promise: at most 5% of A/A pairs called
    /// different, the HDI holding the truth in at least 90% of pairs and, when `powered`, the
    /// shift found in at least 90%.
    fn check(&self, what: &str, powered: bool) {
        let n = self.pairs;
        eprintln!(
            "{what}: A/A called different in {} of {n}; the shift found in {} of {n}; HDI covered the truth in {} of {}",
            self.false_alarms,
            self.found,
            self.covered,
            2 * n
        );
        assert!(
            self.false_alarms * 20 <= n,
            "{what}: A/A pairs called different in {} of {n}, more than 5%",
            self.false_alarms
        );
        assert!(
            self.covered * 10 >= 2 * n * 9,
            "{what}: the 95% HDI held the truth in {} of {}",
            self.covered,
            2 * n
        );
        assert!(
            !powered || self.found * 10 >= n * 9,
            "{what}: a 10% shift found in {} of {n}",
            self.found
        );
    }
}

/// Promise (docs/compare.md, "Calibration"): one run a side, batch means, ROPE ±5%: A/A
/// pairs are rarely called different, a true 10% shift is found, and B / A's 95% HDI holds
/// the truth. Held with latency batched by count, which the fix above brought in.
///
/// Steps: 40 pairs of one-minute runs, one a side, at about 200 transactions a second, first
/// steady, then with both sides slowing down five times in a tenth of their seconds (the
/// attack above's B); for each, an A/A pair and one with B's latency 10% longer. Counted on the
/// type's mean-latency row (`--transaction t`).
///
/// Printed: steady, 0 of 40 A/A pairs called different, the 10% found in 40 of 40, the HDI
/// holding the truth in 78 of 80; bursty, 0 of 40, 8 of 40 (bursts five times the latency
/// leave little power to one minute), 76 of 80. With batches cut by time (before f3c3cc0),
/// the bursty runs' A/A pairs were called different in 4 of 40 and the HDI held the truth in
/// 63 of 80.
#[test]
fn one_run_a_side_with_bursts_stays_calibrated_holds() {
    let n = pairs(40);
    let mut rng = SmallRng::seed_from_u64(23);
    let spec = MINUTE;
    for burst in [0.0, 0.1] {
        let mut tally = Calibration::default();
        for p in 0..n {
            for shift in [1.0, 1.1] {
                let slower = Spec {
                    median: spec.median * shift,
                    ..spec
                };
                let a = run(&mut rng, spec, 1.0, 1.0);
                let a = bursty(&mut rng, a, spec, burst, 5.0);
                let b = run(&mut rng, spec, 1.0, 1.0);
                let b = bursty(&mut rng, b, slower, burst, 5.0);
                let mut s = CompareSettings::default();
                s.sampler.seed = u64::from(p);
                let report = compare_sides(
                    std::slice::from_ref(&a),
                    std::slice::from_ref(&b),
                    Some("t"),
                    Unit::Auto,
                    &s,
                )
                .unwrap();
                let row = &report.rows[0];
                let Outcome::Compared(c) = &row.outcome else {
                    panic!("pair {p}: not compared: {:?}", row.outcome)
                };
                tally.count(row, c, shift);
            }
        }
        tally.check(&format!("bursts {burst}"), burst == 0.0);
    }
}

/// Promise (docs/compare.md, "Calibration" and "More than means"): with one run a side, the
/// TPS row rarely calls identical configurations different, finds a 10% drop in throughput,
/// and B / A's 95% HDI holds the truth, now that a stall's seconds count. Held.
///
/// Steps: 40 pairs of one-minute runs, one a side, at about 200 transactions a second, steady
/// and then with each second stalled with probability 0.1 on both sides; for each, an A/A
/// pair and one with B's rate 10% lower.
///
/// Printed: steady, 0 of 40 A/A pairs called different, the drop found in 40 of 40, the HDI
/// holding the truth in 78 of 80; stalling, 0 of 40, 2 of 40 (stalls leave a minute little
/// power), 78 of 80. At 2 TPS over five minutes, probed once (too slow for every run): 0 of
/// 40, 4-6 of 40, 77-79 of 80.
#[test]
fn the_tps_row_with_stalls_stays_calibrated_holds() {
    let n = pairs(40);
    let mut rng = SmallRng::seed_from_u64(29);
    let spec = MINUTE;
    for stall in [0.0, 0.1] {
        let mut tally = Calibration::default();
        for p in 0..n {
            for speed in [1.0, 0.9] {
                let a = run(&mut rng, spec, 1.0, 1.0);
                let a = stalled(&mut rng, a, stall);
                let b = run(&mut rng, spec, 1.0, speed);
                let b = stalled(&mut rng, b, stall);
                let mut s = CompareSettings::default();
                s.sampler.seed = u64::from(p);
                let report = compare_sides(&[a], &[b], None, Unit::Auto, &s).unwrap();
                let row = report
                    .rows
                    .iter()
                    .find(|r| r.metric == Metric::Tps)
                    .expect("a TPS row");
                let Outcome::Compared(c) = &row.outcome else {
                    panic!("pair {p}: the TPS row was not compared: {:?}", row.outcome)
                };
                // The row's ratio is of milliseconds per transaction: a drop in TPS is "credibly
                // slower".
                tally.count(row, c, 1.0 / speed);
            }
        }
        tally.check(&format!("stalls {stall}"), stall == 0.0);
    }
}

/// Promise: as for [`a_mean_latency_is_the_mean_of_the_transactions_not_of_the_seconds`],
/// in a run too short for batches of five times its busiest second (fifteen seconds at 200
/// transactions a second, the length of a quick check).
///
/// Steps: twenty pairs of fifteen-second runs, one a side, B slowing down five times in a
/// tenth of its seconds and A never, with the same mean per transaction (`--transaction t`).
///
/// Before the fix: such a run fell back to batches of equal time, the bias the fix above
/// removed for longer runs: a side shown up to 73% from what it measured, and 5 of 20 pairs
/// called credibly different (after: at most 11%, none).
#[test]
fn a_short_run_is_also_shown_at_its_transactions_mean() {
    let mut rng = SmallRng::seed_from_u64(13);
    let spec = Spec { secs: 15, ..MINUTE };
    let same = 200.0 / 184.0;
    let mean = |r: &BenchRun| r.transactions[0].latency_stats.sufficient.mean();
    let (mut worst, mut different) = (0.0f64, 0u32);
    for p in 0..20u64 {
        let a = run(&mut rng, spec, same, 1.0);
        let b = run(&mut rng, spec, 1.0, 1.0);
        let b = bursty(&mut rng, b, spec, 0.1, 5.0);
        let mut s = CompareSettings::default();
        s.sampler.seed = p;
        let report = compare_sides(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            Some("t"),
            Unit::Auto,
            &s,
        )
        .unwrap();
        let row = &report.rows[0];
        let Outcome::Compared(c) = &row.outcome else {
            panic!("pair {p}: not compared: {:?}", row.outcome)
        };
        worst = worst
            .max((c.a.mean / mean(&a) - 1.0).abs())
            .max((c.b.mean / mean(&b) - 1.0).abs());
        different += u32::from(row.direction().is_some());
    }
    eprintln!(
        "worst {:.1}% from measured; {different} of 20 pairs called different",
        worst * 100.0
    );
    assert_eq!(
        different, 0,
        "{different} of 20 pairs called different with the same mean per transaction"
    );
    assert!(
        worst < 0.2,
        "a side's mean latency shown {:.0}% from what it measured",
        worst * 100.0
    );
}

/// Promise: as for [`a_run_that_stalls_is_not_shown_at_the_rate_it_had_while_it_ran`], when
/// the stall is at the end of the run (a lock pile-up the run never recovered from).
///
/// Steps: ten pairs of one-minute runs, one a side, at about 200 transactions a second; B
/// commits nothing in its last 4 to 13 seconds. The TPS row's B / A is held against what the
/// two runs measured.
///
/// Before the fix: the groups the seconds are averaged in are longer than the stall, and a
/// trailing part group was dropped (and a trailing part batch of groups after it): most of a
/// stall at the end was never counted, and B / A was shown up to 30% above what was measured
/// (1.08 for 0.83, 0.95 for 0.75).
///
/// Fixed in two parts: the seconds are shared out over groups of nearly equal length, and the
/// batches of groups drop no part (batch values whose mean is the TPS measured: [200, 200,
/// 200, 40] for a 12 s stall at the end of a minute); and the gamma model's prior is flat on
/// s/m, not on s, so the posterior median of so few dispersed values sits near their mean
/// (with the old prior it sat up to a third above: B / A 1.56 for 0.83; `slipstream-stats`'
/// `attack_edges::the_gamma_median_of_a_few_dispersed_values_sits_near_their_mean`). After:
/// within 8.4% of what was measured, every HDI holding it, every verdict "undecided".
#[test]
fn a_stall_at_the_end_of_a_run_counts() {
    let mut rng = SmallRng::seed_from_u64(3);
    let spec = MINUTE;
    let tps = |r: &BenchRun| r.transactions[0].ok as f64 / r.measured_s;
    let mut worst = 0.0f64;
    for (p, last) in (4..14).enumerate() {
        let a = run(&mut rng, spec, 1.0, 1.0);
        let b = with_seconds(run(&mut rng, spec, 1.0, 1.0), |i, second| {
            if i >= spec.secs - last {
                *second = Suff::default();
            }
        });
        let mut s = CompareSettings::default();
        s.sampler.seed = p as u64;
        let report = compare_sides(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            None,
            Unit::Auto,
            &s,
        )
        .unwrap();
        let row = report
            .rows
            .iter()
            .find(|r| r.metric == Metric::Tps)
            .expect("a TPS row");
        let Outcome::Compared(c) = &row.outcome else {
            panic!(
                "B stalled for its last {last} s: the TPS row was not compared: {:?}",
                row.outcome
            )
        };
        let (shown, measured) = (1.0 / c.ratio.mean, tps(&b) / tps(&a));
        worst = worst.max((shown / measured - 1.0).abs());
        assert!(
            1.0 / c.ratio.hdi.1 <= measured && measured <= 1.0 / c.ratio.hdi.0,
            "B stalled for its last {last} s: the HDI of B / A misses the {measured:.3} measured"
        );
        eprintln!(
            "B stalled for its last {last} s: B / A measured {measured:.3}, shown {shown:.3} ({:.3} .. {:.3}), {}",
            1.0 / c.ratio.hdi.1,
            1.0 / c.ratio.hdi.0,
            row.verdict_text()
        );
    }
    // The figure shown is the model's estimate from four or five dispersed batch values, whose
    // HDI spans 0.3-3x: its median may sit a few percent from the runs' ratio (8.4% at most
    // here), not the 30% of a stall left uncounted.
    assert!(
        worst < 0.1,
        "B / A of TPS shown {:.1}% from what the runs measured",
        worst * 100.0
    );
}
