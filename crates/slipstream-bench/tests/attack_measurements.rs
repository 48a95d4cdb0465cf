//! The runner's measurements held to references the test controls: the server's own count of
//! what ran (a table each transaction inserts into), the raw CSV, and the plan asked for
//! (session 42's attacker, helper 35).

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload,
};
use slipstream_testkit::Cluster;

/// Inserts one row into `ran` (autocommit), so the server counts every execution.
struct Insert;

impl Transaction for Insert {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.client()?
            .simple_query("INSERT INTO ran DEFAULT VALUES")
            .await?;
        s.count().inserts += 1;
        Ok(())
    }
}

/// A cluster with the table `ran` (one row per execution, its time) and its URL.
fn cluster_with_ran_table() -> (Cluster, String) {
    let cluster = Cluster::start().unwrap();
    cluster
        .psql("CREATE TABLE ran (at timestamptz NOT NULL DEFAULT clock_timestamp())")
        .unwrap();
    let url = cluster.url();
    (cluster, url)
}

fn rows(url: &str) -> i64 {
    let rt = rt();
    let mut client = rt.block_on(slipstream_pg::connect(url)).unwrap();
    rt.block_on(client.query_one("SELECT count(*) FROM ran", &[]))
        .unwrap()
        .get(0)
        .unwrap()
}

fn run(w: &Workload, c: &RunConfig) -> BenchRun {
    rt().block_on(bench::run(w, c, pending::<()>())).unwrap()
}

/// Promise (docs/bench.md, The clock; phases.rs): the warm-up runs the workload at the first
/// stage's load, unrecorded, before the measured window.
///
/// Steps: a closed-loop run of 2 users, 1 s warm-up and 1 s window, each transaction inserting
/// a row; the server's row count minus the recorded transactions is what the warm-up ran.
///
/// Before the fix: the plan put every user to sleep until the window opened (the first
/// stage starts at 0, and the warm-up's times are negative), so the server had exactly the
/// recorded rows: the warm-up (5 s by default in the CLI) warmed nothing.
#[test]
fn a_closed_loop_warm_up_runs_the_workload() {
    let (_cluster, url) = cluster_with_ran_table();
    let w = Workload::new("insert").transaction("insert", 1, || Insert);
    let mut c = RunConfig::new(Some(url.clone()));
    (c.users, c.threads, c.seed) = (2, 1, 5);
    c.warmup = Duration::from_secs(1);
    c.duration = Duration::from_secs(1);
    let r = run(&w, &c);
    let t = &r.transactions[0];
    assert_eq!((t.failed, t.censored), (0, 0), "{:?}", t.failures);
    let recorded = t.ok as i64;
    let warm_up = rows(&url) - recorded;
    // As long as the window, at the same load: it ran a share of the window's count, not
    // nothing (a quarter leaves room for a slow start on a shared machine).
    assert!(
        warm_up >= recorded / 4,
        "the server ran {warm_up} transactions in the 1 s warm-up, against {recorded} recorded in the 1 s window"
    );
}

/// Thinks `THINKS` times and does nothing else, adding to `work_ns` what its own clock saw
/// outside the thinks (the call to `think` timed around it, so all the pause is left out).
struct Thinker(std::sync::Arc<std::sync::atomic::AtomicU64>);

const THINKS: usize = 10;

impl Transaction for Thinker {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        let start = std::time::Instant::now();
        let mut paused = Duration::ZERO;
        for _ in 0..THINKS {
            let t = std::time::Instant::now();
            s.think().await;
            paused += t.elapsed();
        }
        let work = start.elapsed() - paused;
        self.0
            .fetch_add(work.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// Promise (docs/custom-transactions.md, `Session::think`): the intra-transaction think time
/// is left out of the latency; "the sleep is not part of the transaction's recorded latency".
///
/// Steps: a transaction that only calls `s.think()` ten times at `--intra-think 1ms`, timing
/// each call itself. What it did outside its thinks (nothing: its clock reads) is the
/// reference; the recorded latency may exceed it only by the runner's own clock reads, far
/// below a think, whatever tokio's timer does.
///
/// Before the fix: the session subtracted the think it drew (1 ms), not the sleep it took:
/// tokio's timer wakes on its next millisecond tick, so each think left up to a millisecond
/// and more in the latency (a mean of about 8 ms recorded for a transaction that did nothing).
#[test]
fn the_whole_intra_think_pause_is_left_out_of_the_latency() {
    let work_ns = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w2 = work_ns.clone();
    let w = Workload::new("thinks")
        .transaction("think", 1, move || Thinker(w2.clone()))
        .without_database();
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (2, 1, 9);
    c.duration = Duration::from_secs(1);
    c.intra_think = "1ms".parse().unwrap();
    let r = run(&w, &c);
    let t = &r.transactions[0];
    assert_eq!(t.censored, 0);
    let n = t.ok as f64;
    assert!(n > 0.0, "nothing ran");
    let recorded_ms = t.latency_stats.sufficient.sum / n;
    // The reference counts every transaction that ran: the drain's too, as the result does;
    // none ran in a warm-up (there is none).
    let own_ms = work_ns.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6 / n;
    assert!(
        recorded_ms - own_ms < 0.1,
        "a transaction that only thinks ({THINKS} x 1 ms) recorded a mean latency of {recorded_ms:.3} ms; its own work outside the thinks took {own_ms:.3} ms"
    );
}

/// Panics in `init` (user 1 only, or every user) or in `execute` (user 1, on its 50th
/// transaction), succeeding otherwise.
struct Panicky {
    in_init: Option<usize>,
    in_execute: bool,
    done: u32,
}

impl Transaction for Panicky {
    async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
        if self
            .in_init
            .is_some_and(|u| u == usize::MAX || u == s.user())
        {
            panic!("init exploded");
        }
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        self.done += 1;
        if self.in_execute && s.user() == 1 && self.done == 50 {
            panic!("execute exploded");
        }
        tokio::task::yield_now().await;
        Ok(())
    }
}

fn panicky(in_init: Option<usize>, in_execute: bool) -> Workload {
    Workload::new("panicky")
        .transaction("p", 1, move || Panicky {
            in_init,
            in_execute,
            done: 0,
        })
        .without_database()
}

fn run_err(w: &Workload, c: &RunConfig) -> String {
    let r = rt().block_on(bench::run(w, c, pending::<()>()));
    format!("{:#}", r.expect_err("the run should fail"))
}

/// Promise (docs/bench.md, Limits): "A user whose code panics stops the run, which then fails
/// with the user and the panic named, and writes no result". Holds for a panic in `execute`,
/// in the window and in the warm-up: the error names user 1 and the panic's message.
#[test]
fn a_panic_in_execute_fails_the_run_naming_the_user_and_the_panic() {
    for warmup in [Duration::ZERO, Duration::from_secs(30)] {
        let mut c = RunConfig::new(None);
        (c.users, c.threads) = (3, 1);
        c.warmup = warmup;
        c.duration = Duration::from_secs(30);
        let e = run_err(&panicky(None, true), &c);
        assert!(
            e.contains("user 1 panicked") && e.contains("execute exploded"),
            "warm-up {warmup:?}: {e}"
        );
    }
}

/// Promise (docs/bench.md, Limits; docs/custom-transactions.md: "An `init` that fails stops
/// the run before it starts, naming the transaction"): a user whose `init` panics fails the
/// run, naming the user, the transaction and the panic, like any other panic of its code.
///
/// Steps: three users, user 1's `init` panics; then every user's does.
///
/// Before the fix: the panic ended the user's task before it said it was ready, and the run
/// failed with "a user task ended before it was ready", naming neither the user, nor the
/// transaction, nor the panic.
#[test]
fn a_panic_in_init_fails_the_run_naming_the_user_the_transaction_and_the_panic() {
    for who in [1, usize::MAX] {
        let mut c = RunConfig::new(None);
        (c.users, c.threads) = (3, 1);
        let e = run_err(&panicky(Some(who), false), &c);
        assert!(
            e.contains("panicked") && e.contains("init exploded") && e.contains("transaction p"),
            "init panicking in user {who}: {e}"
        );
        if who == 1 {
            assert!(e.contains("user 1 panicked"), "{e}");
        }
    }
}

/// Its `init` panics the second time it runs (after a reconnect); each `execute` ends its
/// own connection, so the runner reconnects and runs `init` again.
struct PanicsOnReinit(u32);

impl Transaction for PanicsOnReinit {
    async fn init(&mut self, _: &mut Session) -> Result<(), TxError> {
        self.0 += 1;
        if self.0 == 2 {
            panic!("reinit exploded");
        }
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.client()?
            .simple_query("SELECT pg_terminate_backend(pg_backend_pid())")
            .await?;
        Ok(())
    }
}

/// Promise (docs/bench.md, Limits): a panic of the user's code stops the run naming the user
/// and the panic, here in the `init` the runner reruns after a reconnect: the panic `init_all`
/// now catches is resumed there, not turned into a failed reconnect retried for the rest of
/// the run.
///
/// Before the fix: the run stopped, naming the panic but not the `init` or the transaction.
#[test]
fn a_panic_in_init_after_a_reconnect_fails_the_run() {
    let cluster = Cluster::start().unwrap();
    let w = Workload::new("reinit").transaction("r", 1, || PanicsOnReinit(0));
    let mut c = RunConfig::new(Some(cluster.url()));
    (c.users, c.threads) = (1, 1);
    c.duration = Duration::from_secs(30);
    let e = run_err(&w, &c);
    assert!(
        e.contains("user 0 panicked")
            && e.contains("init of transaction r")
            && e.contains("reinit exploded"),
        "{e}"
    );
}

/// Promise (docs/bench.md, Progress and Ctrl-C): "The first Ctrl-C ends the window at once
/// ... and the result file is written"; SIGTERM's sender "may send SIGKILL soon, so nothing
/// is waited for". Open loop at a low rate: 0.02 arrivals a second (one every 50 s on
/// average), a window of 1000 s, stopped after 300 ms. The run must return promptly (a
/// bounded wait of 10 s), with no arrival after the stop counted.
///
/// Before the fix: the arrival thread slept until its next arrival (110 s away for this
/// seed) without looking at the stop, and the runner joined it, so the run returned 112 s
/// after the stop, and the arrival it then drew, long after the window had closed, was
/// counted and censored as one of the window's (arrivals 1, unfinished 1, measured 0.3 s).
#[test]
fn a_stop_does_not_wait_for_the_next_open_loop_arrival() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (1, 1, 1);
    c.rate = Some(0.02);
    c.duration = Duration::from_secs(1000);
    let w = common::sleeping(0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let run = rt().block_on(async {
            let stop = tokio::time::sleep(Duration::from_millis(300));
            bench::run(&w, &c, stop).await
        });
        let _ = tx.send(run);
    });
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a run stopped after 300 ms had not returned 10 s later")
        .unwrap();
    assert!(r.interrupted);
    let s = r.schedule.expect("an open-loop schedule");
    assert_eq!(
        (s.arrivals, r.unfinished),
        (0, 0),
        "an arrival after the stop was counted; measured {} s",
        r.measured_s
    );
}
