//! The runner's counts held to what the server saw: rows a workload inserted and committed,
//! against the successes the result reports (helper h77: "nothing is lost and every count is
//! true").

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload,
};
use slipstream_testkit::Cluster;

/// A cluster with the table `ran` (one row per committed execution) and its URL.
fn cluster_with_ran_table() -> (Cluster, String) {
    let cluster = Cluster::start().unwrap();
    cluster
        .psql("CREATE TABLE ran (at timestamptz NOT NULL DEFAULT clock_timestamp())")
        .unwrap();
    let url = cluster.url();
    (cluster, url)
}

/// The rows the server holds in `ran`: what was committed.
fn rows(url: &str) -> u64 {
    let rt = rt();
    let mut client = rt.block_on(slipstream_pg::connect(url)).unwrap();
    let n: i64 = rt
        .block_on(client.query_one("SELECT count(*) FROM ran", &[]))
        .unwrap()
        .get(0)
        .unwrap();
    n as u64
}

fn file_run(toml: &str, url: &str, users: usize, secs: f64) -> BenchRun {
    let file = bench::workload_file::parse(toml, "attack.toml").unwrap();
    let mut c = RunConfig::new(Some(url.to_string()));
    (c.users, c.threads, c.seed) = (users, 1, 7);
    c.duration = Duration::from_secs_f64(secs);
    c.warmup = Duration::ZERO;
    rt().block_on(bench::run(&file.workload, &c, pending::<()>()))
        .unwrap()
}

/// Promise (docs/bench.md, the result file: `ok` counts a type's successes; the brief: every
/// count is true): a transaction counted as a success did its work. pgbench ends a client
/// whose script "ended without completing the last transaction" rather than count it.
///
/// Steps: a workload file whose one transaction opens a block of its own and inserts a row,
/// never committing (`atomic = false`, statements `BEGIN` and the INSERT), run for a second
/// at two users; then the rows the server holds against the successes the result reports.
///
/// Before the fix: every execution was counted `ok` (4425 at 4425 TPS from the CLI, exit 0,
/// no failure, no warning) while the server held no row: each user's inserts piled up in one
/// transaction that the server rolled back when the user's connection closed.
#[test]
fn a_transaction_that_leaves_its_block_open_is_not_counted_as_committed() {
    let (_cluster, url) = cluster_with_ran_table();
    let run = file_run(
        r#"
name = "never-commits"
[[transaction]]
name = "insert"
atomic = false
statements = ["BEGIN", "INSERT INTO ran DEFAULT VALUES"]
"#,
        &url,
        2,
        1.0,
    );
    let t = &run.transactions[0];
    let committed = rows(&url);
    assert!(
        t.ok <= committed,
        "the result counts {} successful inserts (and {} failed: {:?}), the server holds {committed} rows",
        t.ok,
        t.failed,
        t.failures
    );
    assert!(
        t.failed > 0,
        "an insert never committed is not reported: {t:?}"
    );
}

/// Inserts a row inside a `Transaction` guard and drops the guard: a rollback the code chose
/// (tokio-postgres's idiom), whose `ROLLBACK` the client queues for its next call.
struct DroppedGuard;

impl Transaction for DroppedGuard {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        {
            let mut tx = s.client()?.transaction().await?;
            tx.execute("INSERT INTO ran DEFAULT VALUES", &[]).await?;
        }
        s.count().inserts += 1;
        Ok(())
    }
}

/// Holds (with the fix above): a transaction that rolls back by dropping its guard is a
/// success, as its code meant, not `client:open-transaction`; and its queued ROLLBACK runs,
/// so no later transaction runs inside its block (the server holds no row).
#[test]
fn holds_a_dropped_transaction_guard_is_a_rollback_not_a_failure() {
    let (_cluster, url) = cluster_with_ran_table();
    let w = Workload::new("guard").transaction("dropped", 1, || DroppedGuard);
    let mut c = RunConfig::new(Some(url.clone()));
    (c.users, c.threads, c.seed) = (2, 1, 7);
    c.duration = Duration::from_millis(500);
    let run = rt().block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    let t = &run.transactions[0];
    assert!(t.ok > 0 && t.failed == 0, "{t:?}");
    assert_eq!(rows(&url), 0);
}

/// The rows the server committed with a time before `end` (RFC 3339, the window's end by the
/// same clock: client and server run on this machine).
fn rows_before(url: &str, end: &str) -> u64 {
    let rt = rt();
    let mut client = rt.block_on(slipstream_pg::connect(url)).unwrap();
    let sql = format!("SELECT count(*) FROM ran WHERE at < '{end}'::timestamptz");
    let n: i64 = rt
        .block_on(client.query_one(sql.as_str(), &[]))
        .unwrap()
        .get(0)
        .unwrap();
    n as u64
}

/// Promise (`BenchRun::tps`: "Successful transactions per second over the measured window";
/// docs/bench.md, open loop: the queue is reported; the brief: does the reported TPS ever
/// exceed what the server committed?).
///
/// Steps: an open loop at 300 arrivals/s for 1 s served by one user whose transaction inserts
/// a row after a 10 ms sleep (at most 100 a second); the grace period lets the drain serve the
/// backlog. The server's rows stamped before the window's end are what it committed in the
/// window.
///
/// Before the fix: the result (and the CLI's table: `ins 282 282.0 ...`) gave a TPS of the
/// arrivals over the 1 s window, about three times what the server committed in it (the
/// backlog was served in the 2 s after it), and nothing said the figure was the rate asked
/// for rather than one the server sustained; only a line counting "transactions started in
/// the window and ended after it" hinted at it.
#[test]
fn an_open_loop_backlog_served_after_the_window_is_not_passed_off_as_throughput() {
    let (_cluster, url) = cluster_with_ran_table();
    let file = bench::workload_file::parse(
        r#"
name = "slow-insert"
[[transaction]]
name = "insert"
sql = "INSERT INTO ran SELECT clock_timestamp() FROM pg_sleep(0.01)"
"#,
        "attack.toml",
    )
    .unwrap();
    let mut c = RunConfig::new(Some(url.clone()));
    (c.users, c.threads, c.seed) = (1, 1, 3);
    c.rate = Some(300.0);
    c.duration = Duration::from_secs(1);
    c.grace = Duration::from_secs(15);
    let run = rt()
        .block_on(bench::run(&file.workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert_eq!((t.failed, t.censored), (0, 0), "{t:?}");
    let end = chrono::DateTime::parse_from_rfc3339(&run.started_at).unwrap()
        + chrono::Duration::microseconds((run.measured_s * 1e6) as i64);
    let in_window = rows_before(&url, &end.to_rfc3339());
    // Every success is a committed row, and the server committed no more than that in all.
    assert_eq!(rows(&url), t.ok);
    if run.tps() * run.measured_s <= (in_window + run.users as u64) as f64 {
        return; // the TPS is what the server committed in the window (give or take in-flight)
    }
    let warnings = run
        .context
        .as_ref()
        .map(|c| c.warnings.clone())
        .unwrap_or_default();
    let said = warnings.iter().find(|w| w.contains("after the window")).unwrap_or_else(|| {
        panic!(
            "TPS {:.1} over the {:.2} s window, where the server committed {in_window} rows in it ({} in all), and no warning says so: {warnings:?}",
            run.tps(),
            run.measured_s,
            t.ok
        )
    });
    // The figure it gives is the window's: no more than the server committed in it.
    let sustained: u64 = said
        .split(" succeeded within the window")
        .next()
        .and_then(|before| before.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no '<n> succeeded within the window' in {said:?}"));
    assert!(
        sustained <= in_window,
        "{said}: the server committed {in_window} in the window"
    );
}

/// Promise (docs/custom-transactions.md, Transactions: "An atomic transaction adds one commit,
/// or one rollback when it fails"): a file's atomic transaction that fails at its COMMIT (a
/// deferred constraint here; a serializable transaction's 40001 comes there too) was rolled
/// back by the server, and its statements say so.
///
/// Steps: a deferred unique key already holding 1, and an atomic transaction inserting 1 then
/// reading: every COMMIT fails with 23505. The type's rollbacks against its failures, and
/// against the server's own count of rollbacks over the run.
///
/// Before the fix: 0 rollbacks and 0 commits for 826 failed transactions, beside a server that
/// counted 826 rollbacks: the COMMIT's failure was returned before any count, and the runner
/// sends no ROLLBACK for a block the server has already ended.
#[test]
fn an_atomic_transaction_that_fails_at_its_commit_counts_its_rollback() {
    let cluster = Cluster::start().unwrap();
    cluster
        .psql("CREATE TABLE d (k int, CONSTRAINT u UNIQUE (k) DEFERRABLE INITIALLY DEFERRED); INSERT INTO d VALUES (1)")
        .unwrap();
    let url = cluster.url();
    let run = file_run(
        r#"
name = "deferred"
[[transaction]]
name = "late"
statements = ["INSERT INTO d VALUES (1)", "SELECT 1"]
"#,
        &url,
        1,
        0.5,
    );
    let t = &run.transactions[0];
    assert!(t.failed > 0 && t.ok == 0, "{t:?}");
    assert_eq!(t.failures.get("23505"), Some(&t.failed), "{:?}", t.failures);
    assert_eq!(
        (t.statements.commits, t.statements.rollbacks),
        (0, t.failed),
        "{} transactions rolled back by the server at their COMMIT",
        t.failed
    );
}
