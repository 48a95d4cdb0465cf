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

/// docs/lab.md: "a ratio is the median of the per-pair ratios, written `peer / slipstream`".
/// Steps: `roundtrip`'s quick form on a fresh cluster; for every placement, the per-round
/// times of both clients from the result's series (µs per statement, round by round), their
/// per-round ratios tokio-postgres / slipstream-pg, and the median of those, against the
/// ratio the file names; then the file written and read back, with the fields lab.md lists.
/// Held: the ratio is that median, to rounding.
#[test]
fn holds_roundtrip_ratios_are_the_median_of_its_per_round_ratios() {
    let _serial = serial();
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let ctx = slipstream_lab::Context {
        url: cluster.url(),
        quick: true,
    };
    let r = slipstream_lab::run("roundtrip", &ctx).unwrap();
    let rounds = r.parameters["rounds"].as_u64().unwrap() as usize;
    let mut checked = 0;
    for s in r
        .series
        .iter()
        .filter(|s| s.name.starts_with("slipstream-pg, "))
    {
        let placement = &s.name["slipstream-pg, ".len()..];
        let peer = r
            .series
            .iter()
            .find(|p| p.name == format!("tokio-postgres, {placement}"))
            .expect("a tokio-postgres series beside slipstream-pg's");
        assert_eq!((s.points.len(), peer.points.len()), (rounds, rounds));
        let mut ratios: Vec<f64> = s
            .points
            .iter()
            .zip(&peer.points)
            .map(|(ours, theirs)| {
                assert_eq!(ours.0, theirs.0, "paired by round");
                theirs.1 / ours.1
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let median = if n % 2 == 1 {
            ratios[n / 2]
        } else {
            (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
        };
        let key = format!(
            "roundtrip_time_tokio_postgres_over_slipstream_{}",
            placement.replace(' ', "_").to_lowercase()
        );
        let said = r.ratios[&key];
        assert!(
            (said - median).abs() <= 1e-9 * median,
            "{key}: {said}, the median of the per-round ratios is {median}"
        );
        checked += 1;
    }
    assert!(checked >= 1, "no placement measured: {:?}", r.series);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.json");
    r.write_json(&path).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for field in [
        "schema",
        "schema_version",
        "experiment",
        "title",
        "quick",
        "started_at",
        "duration_s",
        "parameters",
        "environment",
        "table",
        "series",
        "ratios",
        "notes",
    ] {
        assert!(file.get(field).is_some(), "{field} missing from the file");
    }
    assert_eq!(file["schema"], "slipstream-lab/experiment");
    assert_eq!(file["experiment"], "roundtrip");
    assert_eq!(file["quick"], true);
    assert!(file["duration_s"].as_f64().unwrap() > 0.0);
    for field in ["statements_per_round", "rounds", "query"] {
        assert!(file["parameters"].get(field).is_some(), "parameter {field}");
    }
    assert!(
        file["environment"]["server_version"]
            .as_str()
            .is_some_and(|v| v.starts_with("15")),
        "{}",
        file["environment"]
    );
    // Read back to the last bit or so (serde_json's float parsing is not exact to the ULP).
    let back = slipstream_lab::ExperimentResult::read_json(&path).unwrap();
    assert_eq!(
        back.ratios.keys().collect::<Vec<_>>(),
        r.ratios.keys().collect::<Vec<_>>()
    );
    for (key, said) in &r.ratios {
        let read = back.ratios[key];
        assert!(
            (read - said).abs() <= 1e-12 * said.abs(),
            "{key}: {said} read back as {read}"
        );
    }
}

/// The standard: failures are reported, never silently dropped. Steps: `runner`'s quick form
/// through the testkit's proxy; once slipstream bench's 8 users are connected (it runs first
/// in the round), every connection through the proxy is reset, so transactions of its
/// `SELECT 1` run fail; then the result. Before the fix the run's failed transactions were
/// left out of its rate with no word: the table and the ratio read as a clean, slower run.
#[test]
fn runner_reports_the_select_1_transactions_that_failed() {
    let _serial = serial();
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let target = format!("127.0.0.1:{}", cluster.port()).parse().unwrap();
    let proxy = slipstream_testkit::DelayProxy::start(target, std::time::Duration::ZERO).unwrap();
    let ctx = slipstream_lab::Context {
        url: format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            proxy.port()
        ),
        quick: true,
    };
    let runner = std::thread::spawn(move || slipstream_lab::run("runner", &ctx));
    // The no-op run opens no connection; the first eight are the bench's users, running once
    // a thousand round trips have gone through (their connects take a few each).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while proxy.connection_count() < 8 || proxy.round_trips() < 1000 {
        assert!(
            std::time::Instant::now() < deadline && !runner.is_finished(),
            "the bench's users never connected"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    proxy.cut_all();
    let r = match runner.join().unwrap() {
        // Failing the whole experiment reports the failure too.
        Err(e) => {
            eprintln!("the experiment failed, as it may: {e:#}");
            return;
        }
        Ok(r) => r,
    };
    let said = r
        .notes
        .iter()
        .chain(r.table.rows.iter().flatten())
        .any(|n| n.contains("failed"));
    assert!(
        said,
        "transactions failed and nothing says so: {:?} {:?}",
        r.table.rows, r.notes
    );
}
