//! Runs cut short and runs that cannot be timed (found by session 32's attacker; no database:
//! the transactions sleep or do nothing). Every arrival of an open-loop window ends in a
//! count, whether a Ctrl-C or the grace limit stops the run; a duration or rate no clock can
//! hold is an error or an empty schedule, never a panic.

mod common;

use std::future::pending;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{rt, sleeping};
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload,
};

/// Every arrival of the window, counted: done (ok or failed) or censored.
fn accounted(run: &BenchRun) -> u64 {
    run.transactions
        .iter()
        .map(|t| t.ok + t.failed + t.censored)
        .sum()
}

fn arrivals(run: &BenchRun) -> u64 {
    run.schedule.as_ref().expect("an open-loop run").arrivals
}

/// Stopped (a Ctrl-C) with a backlog queued: one user serves 20 ms transactions at 500
/// arrivals a second. The queued arrivals are censored. Before, the users left the queue on
/// the stop, the drain then finished, and the queue was censored only when the grace ran out:
/// 250 arrivals, 24 counted.
#[test]
fn a_run_stopped_with_arrivals_queued_censors_them() {
    let mut c = RunConfig::new(None);
    (c.threads, c.users, c.seed) = (1, 1, 9);
    c.rate = Some(500.0);
    c.duration = Duration::from_secs(30);
    let run = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(500));
            bench::run(&sleeping(20), &c, stop).await
        })
        .unwrap();
    assert!(run.interrupted);
    assert!(run.unfinished > 0, "a backlog was queued");
    assert_eq!(
        accounted(&run),
        arrivals(&run),
        "arrivals lost without a trace"
    );
    // The summary says what the count holds: most never started, and no grace ran out.
    // Before, it blamed the grace period alone (session 33's second attacker).
    let said = bench::report::describe(&run).join("\n");
    assert!(said.contains("queued and never started"), "{said}");
    // The queued ones are counted apart from the one in hand, which the drain finished.
    let queued = run.schedule.as_ref().and_then(|s| s.never_started);
    assert_eq!(
        queued,
        Some(run.unfinished),
        "all censored arrivals were queued"
    );
    // A file that claims more never started than were censored is refused when read.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.json");
    let mut v = serde_json::to_value(&run).unwrap();
    v["schedule"]["never_started"] = serde_json::json!(run.unfinished + 1);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = BenchRun::read_json(&path).unwrap_err().to_string();
    assert!(e.contains("never started"), "{e}");
}

/// The grace limit ends a run with a backlog while users are still running: each arrival is
/// counted once. Before, the in-flight and the queue were read while users still ran, so a
/// transaction could be censored and then recorded as done too (or taken from the emptied
/// queue and lost): one seed in five counted 3 arrivals twice.
#[test]
fn the_grace_limit_with_a_backlog_counts_every_arrival_once() {
    let mut wrong = Vec::new();
    for seed in 0..5 {
        let mut c = RunConfig::new(None);
        (c.threads, c.users, c.seed) = (2, 8, seed);
        c.rate = Some(20_000.0);
        c.duration = Duration::from_millis(300);
        c.grace = Duration::from_millis(50);
        let run = rt()
            .block_on(bench::run(&sleeping(1), &c, pending::<()>()))
            .unwrap();
        let queued = run.schedule.as_ref().and_then(|s| s.never_started);
        assert!(
            queued.is_some_and(|q| q <= run.unfinished && run.unfinished - q <= 8),
            "at most the 8 users' transactions in flight: {queued:?} of {}",
            run.unfinished
        );
        if accounted(&run) != arrivals(&run) {
            wrong.push((seed, arrivals(&run), accounted(&run)));
        }
    }
    assert!(
        wrong.is_empty(),
        "(seed, arrivals, ok + failed + censored): {wrong:?}"
    );
}

/// A duration the parser accepts but no clock can add: a clear error. Before: a panic,
/// "overflow when adding duration to instant".
#[test]
fn a_duration_too_long_to_time_is_an_error() {
    let mut c = RunConfig::new(None);
    c.duration = bench::parse_duration("3000000000000000h").expect("a number with a unit");
    let e = rt()
        .block_on(bench::run(&sleeping(0), &c, pending::<()>()))
        .expect_err("refused");
    assert!(e.to_string().contains("shorter"), "{e}");
}

/// Stages that each fit but together do not: a clear error. Before: a panic, "cannot convert
/// float seconds to Duration".
#[test]
fn stages_too_long_together_are_an_error() {
    let s: bench::Stage = "10000000000000000000s:1".parse().expect("a stage");
    let mut c = RunConfig::new(None);
    c.stages = vec![s, s];
    let e = rt()
        .block_on(bench::run(&sleeping(0), &c, pending::<()>()))
        .expect_err("refused");
    assert!(e.to_string().contains("shorter stages"), "{e}");
}

/// A rate so low that the first gap overflows any clock: no arrival, and no panicking
/// thread. Before, the arrival thread panicked ("cannot convert float seconds to Duration")
/// and the run still reported success.
#[test]
fn a_rate_near_zero_schedules_nothing_and_panics_nowhere() {
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    // The hook is the process's: count only the arrival thread's panics, not other tests'.
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("bench-arrivals") {
            PANICS.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
    let mut c = RunConfig::new(None);
    c.rate = Some(1e-300);
    c.duration = Duration::from_millis(300);
    let run = rt()
        .block_on(bench::run(&sleeping(0), &c, pending::<()>()))
        .expect("an empty schedule is a run");
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "the arrival thread panicked"
    );
    assert_eq!(arrivals(&run), 0);
}

/// Panics in its fifth execution on each user.
struct PanicsLater(u32);

impl Transaction for PanicsLater {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        self.0 += 1;
        assert!(self.0 < 5, "the transaction panics, as the test asked");
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    }
}

/// A user whose transaction panics fails the run, early, naming the user and the panic.
/// Before (session 33's attacker), the user vanished, the others ran on, and the result was
/// written with exit 0 as if fewer users had been asked for.
#[test]
fn a_user_that_panics_fails_the_run() {
    let w = Workload::new("panics")
        .transaction("p", 1, || PanicsLater(0))
        .without_database();
    let mut c = RunConfig::new(None);
    (c.threads, c.users) = (1, 2);
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_secs(30);
    let started = std::time::Instant::now();
    let e = rt()
        .block_on(bench::run(&w, &c, pending::<()>()))
        .expect_err("the run fails");
    assert!(
        e.to_string().contains("panicked: the transaction panics"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the run went on for its 30 s"
    );
}

/// A user count no server could serve is refused before anything is allocated for it.
/// Before, 10^8 users asked for 12.8 GB and aborted, and u64::MAX panicked.
#[test]
fn more_users_than_supported_are_refused() {
    for users in [bench::MAX_USERS + 1, usize::MAX] {
        let mut c = RunConfig::new(None);
        c.users = users;
        let e = rt()
            .block_on(bench::run(&sleeping(0), &c, pending::<()>()))
            .expect_err("refused");
        assert!(e.to_string().contains("at most 100000"), "{e}");
    }
}

/// Stopped in the warm-up: nothing measured, and the result's start is not the planned one,
/// which had not come (session 33's second attacker: it was written 3 s in the future).
#[test]
fn a_run_stopped_in_its_warm_up_started_measuring_no_later_than_the_stop() {
    let mut c = RunConfig::new(None);
    c.threads = 1;
    c.warmup = Duration::from_secs(30);
    let run = rt()
        .block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(200));
            bench::run(&sleeping(1), &c, stop).await
        })
        .unwrap();
    let started = chrono::DateTime::parse_from_rfc3339(&run.started_at).unwrap();
    assert!(run.interrupted && run.measured_s == 0.0, "{run:?}");
    assert!(
        started <= chrono::Utc::now(),
        "started_at {started} is in the future"
    );
}

/// Succeeds at once; counts its `close`, which a user runs once it has left its loop (a user
/// the run gave up on and aborted never does).
struct CountsClose(&'static AtomicUsize);

impl Transaction for CountsClose {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        Ok(())
    }

    async fn close(&mut self, _: &mut Session) -> Result<(), TxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A think time that runs past the window's end: a thinking user has nothing in flight, so
/// it stops at the window's end, and the drain does not wait the grace period out for it.
/// Before, the users slept their think time into the drain, the drain gave up on them at the
/// grace limit (10 s by default; `--grace 1h` an hour) and aborted them, and so their
/// transactions' `close` never ran.
#[test]
fn a_think_time_past_the_window_does_not_hold_the_drain() {
    static CLOSED: AtomicUsize = AtomicUsize::new(0);
    let w = Workload::new("thinks")
        .transaction("t", 1, || CountsClose(&CLOSED))
        .without_database();
    let mut c = RunConfig::new(None);
    (c.threads, c.users) = (1, 2);
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_millis(300);
    c.think = "1h".parse().unwrap();
    c.grace = Duration::from_secs(2);
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    assert!(!run.interrupted);
    assert_eq!(run.unfinished, 0, "nothing was in flight");
    assert_eq!(
        CLOSED.load(Ordering::SeqCst),
        2,
        "each user left its loop at the window's end and closed its transaction"
    );
}

/// Its `init` never ends: the users are never ready, so the window never opens.
struct NeverReady;
impl Transaction for NeverReady {
    async fn init(&mut self, _: &mut Session) -> Result<(), TxError> {
        pending::<()>().await;
        Ok(())
    }
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        Ok(())
    }
}

/// A stop while the users connect (here: run `init`, which never ends, as a connection to a
/// stalled server would not) ends the run at once with [`bench::Interrupted`]: nothing ran,
/// so there is no result. Before (found by the attack of 2026-11-28), `stop` was listened to
/// only once the window opened, so the run waited for users that never came.
#[test]
fn a_stop_while_the_users_connect_ends_the_run_at_once() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let w = Workload::new("never")
            .without_database()
            .transaction("never", 1, || NeverReady);
        let mut c = RunConfig::new(None);
        c.threads = 1;
        c.users = 2;
        let stop = async { tokio::time::sleep(Duration::from_millis(200)).await };
        let _ = tx.send(rt().block_on(bench::run(&w, &c, stop)).map(|_| ()));
    });
    // A hang check: it ends in milliseconds.
    let ended = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the run did not stop within 30 s of a stop while its users connected");
    let e = ended.expect_err("a run stopped before measuring has no result");
    assert_eq!(
        e.downcast_ref::<bench::Interrupted>(),
        Some(&bench::Interrupted {
            during: "connecting the users"
        }),
        "{e}"
    );
    assert!(e.to_string().contains("nothing ran"), "{e}");
}
