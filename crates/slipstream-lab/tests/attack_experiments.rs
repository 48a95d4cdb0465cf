//! Attacks on the lab's experiments: what they measure, how they divide it, and what their
//! result files say (docs/lab.md; the project's standard: "Measure what users run").

/// docs/lab.md: "A ratio that does not exist ... is `NaN` in the table ... and `null` in the
/// file ...: never a stand-in figure." Steps: paired measurements where no pair can be
/// divided (the divisor measured nothing in every round: a pool that completed no borrow in
/// any run, as `pool-scaling`'s "slipstream / this" and `*_over_best_fair_peer` divide), and
/// no pairs at all. Before the fix the median was 0: "0.00x", a figure nobody measured, which
/// reads as slipstream infinitely slower than a peer that did nothing.
#[test]
fn a_ratio_without_a_pair_is_missing_not_zero() {
    let none = slipstream_lab::paired_ratios(&[0.0, 0.0, 0.0], &[1.0e6, 2.0e6, 3.0e6]);
    assert_eq!(none.n, 0);
    assert!(none.p50.is_nan(), "median over no pair: {}", none.p50);
    assert!(none.min.is_nan() && none.max.is_nan(), "{none:?}");
    let empty = slipstream_lab::paired_ratios(&[], &[]);
    assert!(empty.p50.is_nan(), "median over no pair: {}", empty.p50);
    // Pairs that exist still divide as before.
    assert_eq!(
        slipstream_lab::paired_ratios(&[0.0, 2.0], &[5.0, 4.0]).p50,
        2.0
    );
}
