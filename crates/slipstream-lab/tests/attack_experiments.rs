//! Attacks on the lab's experiments: what they measure, how they divide it, and what their
//! result files say (docs/lab.md; the project's standard: "Measure what users run").
//!
//! The experiments run one at a time (`SERIAL`): each measures, and two at once would take CPU
//! from each other on a small machine; the pool-scaling test also narrows its run through the
//! environment, which no other test may read meanwhile.

use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

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

/// The standard: "A benchmark measures the code path a user gets by following the README (the
/// default mode ...), and states its mode; a faster non-default path is reported beside it,
/// not instead of it." Steps: `pool-scaling`'s quick form, narrowed to tasks at 10 borrowers
/// and hold 0; the settings it says slipstream-pool ran with, against the pool's defaults
/// (`Config::default()`: a 30 s borrow timeout, 100,000 waiters). Before the fix
/// slipstream-pool ran with `borrow_timeout(Duration::MAX)` (no timer per waiting borrow, a
/// cost the default pays and the notes charge bb8 with) and `max_waiters(1_000_000)`, against
/// deadpool in its default mode, and the result file named neither.
#[test]
fn pool_scaling_measures_slipstream_pool_as_configured_by_default() {
    let _serial = serial();
    // SAFETY: every test in this binary holds `SERIAL` while it runs an experiment, so no
    // other thread of ours reads the environment meanwhile.
    unsafe {
        std::env::set_var("SLIPSTREAM_POOL_SCALING_T", "10");
        std::env::set_var("SLIPSTREAM_POOL_SCALING_KINDS", "tasks");
        std::env::set_var("SLIPSTREAM_POOL_SCALING_HOLDS", "0");
    }
    let ctx = slipstream_lab::Context {
        url: "postgres://postgres@127.0.0.1/postgres".into(),
        quick: true,
    };
    let r = slipstream_lab::run("pool-scaling", &ctx);
    // SAFETY: as above, `SERIAL` is still held.
    unsafe {
        std::env::remove_var("SLIPSTREAM_POOL_SCALING_T");
        std::env::remove_var("SLIPSTREAM_POOL_SCALING_KINDS");
        std::env::remove_var("SLIPSTREAM_POOL_SCALING_HOLDS");
    }
    let r = r.unwrap();
    let defaults = slipstream_pool::Config::default();
    let param = |name: &str| r.parameters.get(name).and_then(|v| v.as_f64());
    assert_eq!(
        param("slipstream_pool_borrow_timeout_s"),
        Some(defaults.borrow_timeout.as_secs_f64()),
        "the borrow timeout slipstream-pool ran with: {:?}",
        r.parameters
    );
    assert_eq!(
        param("slipstream_pool_max_waiters"),
        Some(defaults.max_waiters as f64),
        "the waiters slipstream-pool allowed: {:?}",
        r.parameters
    );
    assert!(
        !r.notes
            .iter()
            .any(|n| n.contains("none for slipstream-pool")),
        "{:?}",
        r.notes
    );
}
