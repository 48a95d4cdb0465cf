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

/// Promise (`Session::user`: "This user's number, from 0"): every message of the run names a
/// user by that number. A connect failure named user `n + 1` while a panic named user `n`, so
/// the same user had two numbers.
///
/// Steps: one user and a port nothing listens on: the only user is user 0.
///
/// Before the fix: "user 1 could not connect".
#[test]
fn a_connect_failure_names_the_user_by_its_session_number() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let w = Workload::new("nowhere").transaction("one", 1, || Insert);
    let mut c = RunConfig::new(Some(format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?connect_timeout=5"
    )));
    (c.users, c.threads) = (1, 1);
    let e = run_err(&w, &c);
    assert!(e.contains("user 0 could not connect"), "{e}");
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

/// Sleeps a random 0-15 ms (from the user's seeded random numbers); one in ten fails.
struct RandomSleep;

impl Transaction for RandomSleep {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        use rand::Rng;
        let us = s.rng().random_range(0..=15_000u64);
        let fail = s.rng().random_range(0..10) == 0;
        tokio::time::sleep(Duration::from_micros(us)).await;
        if fail {
            return Err(TxError::new("P0001", "one in ten"));
        }
        Ok(())
    }
}

/// One raw CSV line: (end µs, latency µs, failed).
fn raw_lines(path: &std::path::Path) -> Vec<(u64, u64, bool)> {
    let text = std::fs::read_to_string(path).expect("the raw CSV");
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                !f[5].is_empty(),
            )
        })
        .collect()
}

/// `got_ms` is the exact `q` order statistic of `sorted` (µs) within HDR's 3 significant
/// digits: the top of its bucket, at most 1/1024 above it (a raw latency of 0 µs is recorded
/// as 1).
fn within_hdr(what: &str, got_ms: f64, sorted: &[u64], q: f64) {
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    let want = sorted[rank - 1].max(1) as f64;
    let got = got_ms * 1e3;
    assert!(
        want - 0.5 <= got && got <= want + want / 1024.0 + 1.0,
        "{what}: reported {got} µs, the raw CSV's exact {want} µs ({} latencies)",
        sorted.len()
    );
}

/// Promise (docs/bench.md, The clock and The result file): per type, per second and per
/// stage, the counts are the transactions that ended there, the series plus `after_window`
/// add up to the totals, and the percentiles are read from HDR histograms (any value within
/// 0.1%). Holds.
///
/// Steps: a closed-loop run with a 1 s ramp-up and two 1 s stages (2 then 4 users) of
/// transactions sleeping 0-15 ms, one in ten failing, with `--raw`; each figure is held to
/// the raw CSV's lines: counts exactly (by their end time: a second's, a stage's, or the
/// drain's, which counts in the last stage), p50/p90/p99/p99.9 and each second's and
/// stage's p50/p99 within HDR precision of the exact order statistics, and the exact
/// minimum and maximum.
#[test]
fn counts_and_percentiles_per_type_second_and_stage_are_the_raw_csvs() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.csv");
    let w = Workload::new("random")
        .transaction("random", 1, || RandomSleep)
        .without_database();
    let mut c = RunConfig::new(None);
    (c.threads, c.seed) = (1, 17);
    c.ramp_up = Duration::from_secs(1);
    c.stages = vec!["1s:2".parse().unwrap(), "1s:4".parse().unwrap()];
    c.raw_csv = Some(raw.clone());
    let r = run(&w, &c);
    let lines = raw_lines(&raw);
    let t = &r.transactions[0];
    let ok_lat = |keep: &dyn Fn(u64) -> bool| {
        let mut v: Vec<u64> = lines
            .iter()
            .filter(|l| !l.2 && keep(l.0))
            .map(|l| l.1)
            .collect();
        v.sort_unstable();
        v
    };
    let failed =
        |keep: &dyn Fn(u64) -> bool| lines.iter().filter(|l| l.2 && keep(l.0)).count() as u64;

    // The run's figures.
    let all = ok_lat(&|_| true);
    assert_eq!((t.ok, t.failed), (all.len() as u64, failed(&|_| true)));
    assert!(
        t.ok > 200 && t.failed > 10,
        "{} ok, {} failed",
        t.ok,
        t.failed
    );
    let p = &t.latency_ms;
    for (key, got, q) in [
        ("p50", p.p50, 0.5),
        ("p90", p.p90, 0.9),
        ("p99", p.p99, 0.99),
        ("p99.9", p.p999, 0.999),
    ] {
        within_hdr(key, got, &all, q);
    }
    let (min, max) = (all[0] as f64, *all.last().unwrap() as f64);
    let s = &t.latency_stats;
    assert!(
        (min..min + 1.0).contains(&(s.min * 1e3)) && (max..max + 1.0).contains(&(s.max * 1e3)),
        "min/max {}/{} ms, raw {min}/{max} µs",
        s.min,
        s.max
    );

    // Each second, and the drain.
    let end_us = (r.measured_s * 1e6) as u64;
    let series = &r.intervals.per_transaction["random"];
    for (i, iv) in series.iter().enumerate() {
        let i = i as u64;
        let here = |e: u64| e / 1_000_000 == i && e < end_us;
        let lat = ok_lat(&here);
        assert_eq!(
            (iv.sufficient.n, iv.failed),
            (lat.len() as u64, failed(&here)),
            "second {i}"
        );
        if !lat.is_empty() {
            within_hdr(&format!("second {i} p50"), iv.p50_ms, &lat, 0.5);
            within_hdr(&format!("second {i} p99"), iv.p99_ms, &lat, 0.99);
        }
    }
    let drained = |e: u64| e >= end_us;
    let after = r.intervals.after_window.get("random");
    assert_eq!(
        after.map_or((0, 0), |a| (a.sufficient.n, a.failed)),
        (ok_lat(&drained).len() as u64, failed(&drained)),
        "after_window"
    );

    // Each stage: what ended in it; the drain's in the last.
    assert_eq!(r.stages.len(), 3);
    let last = r.stages.len() - 1;
    for (k, st) in r.stages.iter().enumerate() {
        let (from, to) = ((st.start_s * 1e6) as u64, (st.end_s * 1e6) as u64);
        let here = |e: u64| (from..to).contains(&e) || (k == last && e >= to);
        let lat = ok_lat(&here);
        let tx = &st.transactions[0];
        assert_eq!(
            (tx.ok, tx.failed),
            (lat.len() as u64, failed(&here)),
            "{}",
            st.name
        );
        within_hdr(&format!("{} p50", st.name), tx.latency_ms.p50, &lat, 0.5);
        within_hdr(&format!("{} p99", st.name), tx.latency_ms.p99, &lat, 0.99);
    }
}

/// Promise (docs/bench.md, Phases; Open loop): in an open run "the rate rises linearly from 0
/// to the first stage's rate" over the ramp-up, a stage then holds its rate, and a
/// transaction's latency runs from its intended start (so it is at least its schedule lag).
/// Holds.
///
/// Steps: a 2 s ramp-up to 2000 arrivals a second, then a 1 s stage at 2000, no-op
/// transactions on 2 users, with `--raw`. Each line's intended start is its end minus its
/// latency; the arrivals intended in each second are Poisson with means 500, 1500 and 2000
/// (the ramp's integral), each within 5 standard deviations; every latency is at least its
/// lag; and the schedule's arrivals are the lines (none censored).
#[test]
fn an_open_loop_ramp_up_rises_linearly_and_latency_runs_from_the_intended_start() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.csv");
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (2, 1, 23);
    c.ramp_up = Duration::from_secs(2);
    c.stages = vec!["1s:rate=2000".parse().unwrap()];
    c.raw_csv = Some(raw.clone());
    let r = run(&common::sleeping(0), &c);
    let text = std::fs::read_to_string(&raw).unwrap();
    let mut per_second = [0u64; 3];
    let mut lines = 0u64;
    for l in text.lines().skip(1) {
        let f: Vec<u64> = l
            .split(',')
            .skip(2)
            .take(3)
            .map(|v| v.parse().unwrap())
            .collect();
        let (end, latency, lag) = (f[0], f[1], f[2]);
        assert!(
            latency >= lag,
            "latency {latency} µs below its lag {lag} µs: {l}"
        );
        let intended = end - latency;
        per_second[(intended / 1_000_000).min(2) as usize] += 1;
        lines += 1;
    }
    for (i, (got, want)) in per_second
        .iter()
        .zip([500.0f64, 1500.0, 2000.0])
        .enumerate()
    {
        assert!(
            (*got as f64 - want).abs() < 5.0 * want.sqrt(),
            "arrivals intended in second {i}: {got}, the ramp's integral {want}"
        );
    }
    assert_eq!(r.unfinished, 0);
    assert_eq!(r.schedule.as_ref().unwrap().arrivals, lines);
}

/// Fails with the code it holds (an empty one included).
struct FailsWith(&'static str);

impl Transaction for FailsWith {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Err(TxError::new(self.0, "it failed"))
    }
}

/// Promise (docs/bench.md, `--raw`; docs/custom-transactions.md): "An `Err` is recorded as a
/// failure under its code", and the raw CSV has one line per recorded transaction whose
/// `failure` field is empty only for a success.
///
/// Steps: a transaction that fails with an empty code (`TxError::new("", ...)`); the result's
/// failures and the raw CSV's failed lines are compared.
///
/// Before the fix: the result counted the failures under the code "", and the raw CSV wrote
/// each of them with an empty failure field, which reads as a success: every failure was
/// lost from the raw data (and a report listed a failure code that was blank).
#[test]
fn a_failure_with_an_empty_code_is_a_failure_in_the_raw_csv_too() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw.csv");
    let w = Workload::new("blank")
        .transaction("blank", 1, || FailsWith(""))
        .without_database();
    let mut c = RunConfig::new(None);
    (c.users, c.threads) = (1, 1);
    c.duration = Duration::from_millis(300);
    c.raw_csv = Some(raw.clone());
    let r = run(&w, &c);
    let t = &r.transactions[0];
    assert!(t.failed > 0 && t.ok == 0, "{t:?}");
    let failed_lines = raw_lines(&raw).iter().filter(|l| l.2).count() as u64;
    assert_eq!(
        failed_lines, t.failed,
        "raw CSV lines with a failure against the result's failures {:?}",
        t.failures
    );
    assert!(
        t.failures.keys().all(|code| !code.trim().is_empty()),
        "a blank failure code: {:?}",
        t.failures
    );
}

/// Promise (docs/bench.md, The clock): every transaction started in the window is counted
/// once, as completed, failed or censored; nothing is lost. Holds, closed and open loop.
///
/// Steps: without a warm-up, every transaction the server ran is one of the window's, so the
/// rows the server inserted equal the result's ok + failed + censored, for a closed run with
/// a ramp-up and two stages, and for an open run at 500 arrivals a second (whose schedule's
/// arrivals are those rows too).
#[test]
fn the_server_ran_exactly_what_the_result_counts() {
    let (_cluster, url) = cluster_with_ran_table();
    let w = Workload::new("insert").transaction("insert", 1, || Insert);
    let counted = |r: &BenchRun| {
        let t = &r.transactions[0];
        (t.ok + t.failed + t.censored) as i64
    };

    let mut c = RunConfig::new(Some(url.clone()));
    (c.threads, c.seed) = (1, 29);
    c.ramp_up = Duration::from_millis(500);
    c.stages = vec!["500ms:3".parse().unwrap(), "500ms:1".parse().unwrap()];
    let closed = run(&w, &c);
    let stages: u64 = closed
        .stages
        .iter()
        .map(|s| s.transactions[0].ok + s.transactions[0].failed)
        .sum();
    assert_eq!(
        stages,
        closed.transactions[0].ok + closed.transactions[0].failed
    );
    let closed_rows = rows(&url);
    assert_eq!(
        closed_rows,
        counted(&closed),
        "closed loop: server rows against the result"
    );

    let mut c = RunConfig::new(Some(url.clone()));
    (c.users, c.threads, c.seed) = (2, 1, 31);
    c.rate = Some(500.0);
    c.duration = Duration::from_secs(1);
    let open = run(&w, &c);
    let open_rows = rows(&url) - closed_rows;
    assert_eq!(
        open_rows,
        counted(&open),
        "open loop: server rows against the result"
    );
    assert_eq!(open.schedule.as_ref().unwrap().arrivals as i64, open_rows);
}

/// Promise (docs/bench.md, the result file and Reports): the window's last interval, when it
/// is part of a second, holds only what ended before the end of the window, so a half-empty
/// last interval does not show a false drop; the report's "Over time" charts draw throughput
/// per second.
///
/// Steps: a 1.5 s window of 2 users sleeping 1 ms (no database). Its last interval covers
/// [1 s, 1.5 s). The throughput charts (all types and per type) must give it its successes
/// over the half second it covers, drawn where the window ended, 1.5 s.
///
/// Before the fix every interval was taken for a whole second: the last point sat at x = 2 s
/// with half the rate of the others, the false drop the recorder's trimming is there to
/// avoid (any Ctrl-C or `-d` that is not whole seconds ends a run so).
#[test]
fn the_last_part_second_is_drawn_at_its_own_rate() {
    let mut c = RunConfig::new(None);
    (c.users, c.threads, c.seed) = (2, 1, 3);
    c.duration = Duration::from_millis(1500);
    let r = run(&common::sleeping(1), &c);
    assert_eq!(r.measured_s, 1.5);
    let series = &r.intervals.per_transaction["sleep"];
    assert_eq!(series.len(), 2, "a whole second and a half one");
    let last_n = series[1].sufficient.n;
    assert!(last_n > 0, "nothing ended in the last half second");
    let expected = (1.5, last_n as f64 / 0.5);
    let labeled = [slipstream_bench::report::Labeled {
        label: "r".into(),
        run: r,
    }];
    let all = slipstream_bench::report::tps_series(&labeled);
    assert_eq!(all[0].points.last(), Some(&expected), "{:?}", all[0].points);
    assert_eq!(all[0].points[0].0, 1.0, "the whole second ends at 1 s");
}
