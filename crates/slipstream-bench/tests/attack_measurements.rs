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
