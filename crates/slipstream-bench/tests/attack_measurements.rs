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
