//! Attacks on the runner's counting under load and server events: an open loop far past
//! what the server can serve, and (below) sessions the server ends or times out mid-run. In
//! every one the counts must add up (each transaction the window started is done, failed
//! with a code, or censored), and the TPS and the report must say what happened.

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
use slipstream_bench::{self as bench, BenchRun, RunConfig, Session, Transaction, TxError};

/// `SELECT pg_sleep(ms / 1000)`: a transaction the server holds for `ms`, so that `users`
/// connections can end at most `users / ms` of them a millisecond, whatever the client does.
struct ServerSleep(u64);

impl Transaction for ServerSleep {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        let sql = format!("SELECT pg_sleep({})", self.0 as f64 / 1000.0);
        s.client()?.simple_query(&sql).await?;
        Ok(())
    }
}

fn server_sleep(ms: u64) -> bench::Workload {
    bench::Workload::new("server-sleep").transaction("sleep", 1, move || ServerSleep(ms))
}

/// Every transaction of the window accounted for: done (ok or failed) or censored.
fn accounted(run: &BenchRun) -> u64 {
    run.transactions
        .iter()
        .map(|t| t.ok + t.failed + t.censored)
        .sum()
}

/// The "all" row's TPS in the report's table (its `tps` column).
fn table_tps(run: &BenchRun) -> f64 {
    let table = bench::report::table(&[bench::report::Labeled {
        label: "run".into(),
        run: run.clone(),
    }])
    .render();
    let all = table
        .lines()
        .find(|l| l.starts_with("all "))
        .unwrap_or_else(|| panic!("no `all` row in\n{table}"));
    all.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Promise (docs/bench.md, open loop and the clock): TPS is a throughput, what the server
/// sustained in the measured window, and the report says plainly how a backlog served after
/// the window is counted. Latency of an open loop runs from the intended start, so the
/// backlog's queueing is in the latency; it must not also lift the TPS to the rate asked for.
///
/// Steps: a real server; `SELECT pg_sleep(0.01)` by 2 users (at most 200 a second can end)
/// at 600 arrivals a second for 1 s, grace 30 s so the backlog is served. Physics bounds what
/// ended inside the window: 2 users x measured_s / 10 ms. The run's TPS, and the report's
/// table, must stay under that bound (plus the 2 in flight); the counts must add up to the
/// arrivals; the backlog must have been there (more successes than the bound), and the
/// report must say the backlog is out of the TPS.
///
/// Before the fix: TPS 606.0 (every arrival of the window, most served in the drain after
/// it, over the 1 s window), three times what 2 users could end in it (202), with only a
/// warning in `context.warnings` to say so.
#[test]
fn an_overloaded_open_loop_reports_the_throughput_the_server_sustained() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = RunConfig::new(Some(cluster.url()));
    (c.users, c.threads, c.seed) = (2, 1, 5);
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_secs(1);
    c.rate = Some(600.0);
    c.grace = Duration::from_secs(30);
    let run = rt()
        .block_on(bench::run(&server_sleep(10), &c, pending::<()>()))
        .unwrap();
    let schedule = run.schedule.as_ref().expect("an open-loop run");
    assert_eq!(accounted(&run), schedule.arrivals, "arrivals lost");
    assert_eq!(run.unfinished, 0, "the grace covers the backlog");
    let ok: u64 = run.transactions.iter().map(|t| t.ok).sum();
    let bound = 2.0 * run.measured_s / 0.010 + 2.0;
    assert!(
        ok as f64 > 1.5 * bound,
        "no backlog to attack: {ok} ok, bound {bound}"
    );
    assert!(
        run.tps() * run.measured_s <= bound,
        "TPS {:.1} over {} s: more than 2 users could end ({bound})",
        run.tps(),
        run.measured_s
    );
    assert!(
        table_tps(&run) * run.measured_s <= bound,
        "the report's TPS {} reads past the server's capacity",
        table_tps(&run)
    );
    let said = bench::report::describe(&run).join("\n");
    assert!(said.contains("not in the TPS"), "{said}");
}
