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
    let mut c = common::config(Some(cluster.url()), 2, 5, Duration::from_secs(1));
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

/// Every transaction of the run's per-second series plus the drain's is in its totals, per
/// type (docs/bench.md, The clock).
fn check_series_add_up(run: &BenchRun) {
    for t in &run.transactions {
        let series = run.intervals.per_transaction.get(&t.name);
        let (ok, failed) = series.map_or((0, 0), |s| {
            s.iter()
                .fold((0, 0), |(o, f), i| (o + i.sufficient.n, f + i.failed))
        });
        let after = run.intervals.after_window.get(&t.name);
        let (ok_after, failed_after) = after.map_or((0, 0), |i| (i.sufficient.n, i.failed));
        assert_eq!(
            (ok + ok_after, failed + failed_after),
            (t.ok, t.failed),
            "{}: series + drain against the totals",
            t.name
        );
        assert_eq!(
            t.failures.values().sum::<u64>(),
            t.failed,
            "{}: failures without a code: {:?}",
            t.name,
            t.failures
        );
        for code in t.failures.keys() {
            assert!(
                t.failure_messages.contains_key(code),
                "{}: {code} has no message",
                t.name
            );
        }
    }
}

/// Held. Promise (docs/bench.md, The clock): a failed transaction is counted by SQLSTATE with its
/// first message, the user reconnects, "while the server cannot be reached, each transaction
/// fails at once as `client:no-connection`", and the run goes on; the counts add up.
///
/// Steps: 2 users running `SELECT pg_sleep(0.02)` for 4 s; 1 s in, the server is stopped
/// (fast shutdown: it ends every session, 57P01) and started again. The run must end on its
/// own within 60 s, count successes before and after the restart (ok in the last second),
/// failures only under codes that say what happened, and the series plus the drain must add
/// up to the totals, with nothing censored.
#[test]
fn a_server_restarted_mid_run_is_counted_and_survived() {
    let mut cluster = slipstream_testkit::Cluster::start().unwrap();
    let c = common::config(Some(cluster.url()), 2, 9, Duration::from_secs(4));
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        cluster.restart().unwrap();
        cluster
    });
    let run = rt()
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                bench::run(&server_sleep(20), &c, pending::<()>()),
            )
            .await
        })
        .expect("the run ends within 60 s")
        .unwrap();
    let _cluster = restarter.join().unwrap();
    let t = &run.transactions[0];
    assert!(t.failed > 0, "the restart failed nothing: {t:?}");
    let expected = ["57P01", "client:no-connection", "client:io", "57P03"];
    assert!(
        t.failures.keys().all(|k| expected.contains(&k.as_str())),
        "{:?}",
        t.failure_messages
    );
    check_series_add_up(&run);
    assert_eq!(run.unfinished, 0);
    let series = &run.intervals.per_transaction["sleep"];
    let last = series.last().unwrap();
    assert!(
        series.first().unwrap().sufficient.n > 0 && last.sufficient.n > 0,
        "no success before the restart or after it: {series:?}"
    );
}

/// Held. Promise (docs/bench.md, Order Entry's load and The clock): every setting of the role or
/// the connection string applies to the users' sessions; a failure is counted by SQLSTATE
/// with its first message, so the report says what failed. A role's `statement_timeout`
/// shorter than the transaction fails every one; the runner's own side connections (the
/// context's queries) must not be what fails.
///
/// Steps: `options=-c statement_timeout=100ms`; `SELECT pg_sleep(0.3)` by 2 users for 1 s.
/// The run must be written, every transaction failed with 57014 and the server's message,
/// none ok, none censored, and the report must name the code.
#[test]
fn a_roles_statement_timeout_fails_each_transaction_by_its_code() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = format!("{}?options=-c%20statement_timeout%3D100ms", cluster.url());
    let c = common::config(Some(url), 2, 9, Duration::from_secs(1));
    let run = rt()
        .block_on(bench::run(&server_sleep(300), &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert!(t.failed >= 2 && t.ok == 0, "{t:?}");
    assert_eq!(t.failures.get("57014"), Some(&t.failed), "{:?}", t.failures);
    assert!(
        t.failure_messages["57014"].contains("statement timeout"),
        "{:?}",
        t.failure_messages
    );
    assert_eq!(run.unfinished, 0);
    check_series_add_up(&run);
    let said = bench::report::describe(&run).join("\n");
    assert!(said.contains("57014"), "{said}");
}

/// Held. Promise (docs/bench.md, The clock and TPS): work that started in the window is recorded
/// when it ends; what ended in the drain is in the counts, not in the TPS, and the report says
/// so. A window shorter than one transaction measures what it can.
///
/// Steps: 2 users, `SELECT pg_sleep(0.3)`, a 50 ms window. Each user starts one transaction
/// in it, which ends in the drain: 2 ok, none in the series, TPS 0 (none ended inside the
/// window), and the report says the 2 ended after the window and are not in the TPS.
#[test]
fn a_window_shorter_than_one_transaction_counts_it_in_the_drain() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let c = common::config(Some(cluster.url()), 2, 9, Duration::from_millis(50));
    let run = rt()
        .block_on(bench::run(&server_sleep(300), &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert_eq!((t.ok, t.failed, t.censored), (2, 0, 0), "{t:?}");
    check_series_add_up(&run);
    assert_eq!(run.ok_in_window("sleep"), 0);
    assert_eq!(run.tps(), 0.0);
    let said = bench::report::describe(&run).join("\n");
    assert!(
        said.contains("2 transactions of the window ended after it") && said.contains("TPS"),
        "{said}"
    );
}

/// Held. Promise (docs/bench.md, open loop): `--rate R` schedules Poisson arrivals at R per second,
/// any positive R (a fraction too); every arrival of the window is counted, and the result
/// keeps the rate asked for.
///
/// Steps: a no-op workload (no database) at 0.5 arrivals a second for 6 s, and at 0.01 for
/// 1 s (most likely no arrival at all). Both must run; arrivals = done + censored, the load
/// says the rate; a run with no arrival must say so in its report rather than pass as a
/// measurement of nothing.
#[test]
fn a_fractional_rate_runs_and_counts_its_arrivals() {
    for (rate, secs) in [(0.5, 6.0), (0.01, 1.0)] {
        let mut c = RunConfig::new(None);
        (c.users, c.threads, c.seed) = (1, 1, 4);
        c.rate = Some(rate);
        c.duration = Duration::from_secs_f64(secs);
        let run = rt()
            .block_on(bench::run(&common::sleeping(1), &c, pending::<()>()))
            .unwrap();
        let schedule = run.schedule.as_ref().expect("open loop");
        assert_eq!(accounted(&run), schedule.arrivals, "rate {rate}");
        assert!(
            matches!(run.load, bench::Load::Open { rate: r } if r == rate),
            "{:?}",
            run.load
        );
        check_series_add_up(&run);
        if schedule.arrivals == 0 {
            let said = bench::report::describe(&run).join("\n");
            assert!(said.contains("0 arrivals"), "rate {rate}: {said}");
        }
    }
}

/// Promise (docs/bench.md, "The run's context": the database's counters over the run, from
/// snapshots before and after it; the report says what happened): a server that crashed and
/// restarted during the run lost its statistics (crash recovery resets them), so after minus
/// before is no count of the run's work.
///
/// Steps: 2 users running `SELECT pg_sleep(0.02)` for 4 s; 1 s in, the postmaster gets
/// SIGQUIT (an immediate shutdown, as after a crash: no statistics written) and is started
/// again. The result must say the server restarted during the run, and show no count of the
/// database's work over it that is negative or that spans the restart.
///
/// Before the fix: nothing said the server restarted (the context reads its start time only
/// before the run), and the report printed the reset counters' difference as the run's work:
/// "database during the run: commits -320, rollbacks 0, blocks read 20, blocks hit -8810, ...".
#[test]
fn a_server_that_crashed_mid_run_is_said_and_its_counters_not_passed_off() {
    let mut cluster = slipstream_testkit::Cluster::start().unwrap();
    // Work before the run, so that the counters a crash resets are well above the run's.
    for _ in 0..300 {
        cluster.psql("SELECT 1").unwrap();
    }
    let c = common::config(Some(cluster.url()), 2, 9, Duration::from_secs(4));
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        let pid = cluster.server_pid().expect("a running server");
        let killed = std::process::Command::new("kill")
            .args(["-QUIT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        cluster.restart().unwrap();
        cluster
    });
    let run = rt()
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                bench::run(&server_sleep(20), &c, pending::<()>()),
            )
            .await
        })
        .expect("the run ends within 60 s")
        .unwrap();
    let _cluster = restarter.join().unwrap();
    check_series_add_up(&run);
    let ctx = run.context.as_ref().expect("a context");
    let commits = ctx.database_delta("xact_commit");
    let said = bench::report::describe(&run).join("\n");
    assert!(
        said.contains("restarted during the run"),
        "nothing says the server restarted; commits over the run {commits:?}:\n{said}"
    );
    assert!(
        commits.is_none_or(|n| n >= 0.0) && !said.contains(" -"),
        "{said}"
    );
}

/// Promise (docs/bench.md, phases and TPS): `by stage:` gives each stage's TPS; the drain's
/// successes count in the last stage, and its TPS, like the run's, is of those that ended
/// inside the window.
///
/// Steps: a real server, `SELECT pg_sleep(0.01)` by 2 users (at most 200 a second), an open
/// loop in two stages, 500 ms at 50 a second, then 1 s at 600; grace 30 s. The last stage's
/// TPS in `stage_table` must stay under what 2 users could end in it (2 x 1 s / 10 ms, plus
/// the 2 in flight and those begun in the stage before).
///
/// Before the fix (fca34ea's `stage_table`, checked with phases.rs of c3ed6b4): the last
/// stage read 599 TPS (the backlog served in the drain, over the stage's 1 s) where 2 users
/// could end at most 204 in it.
#[test]
fn an_overloaded_open_loops_last_stage_reports_what_it_sustained() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = RunConfig::new(Some(cluster.url()));
    (c.users, c.threads, c.seed) = (2, 1, 7);
    c.warmup = Duration::ZERO;
    c.stages = vec![
        "500ms:rate=50".parse().unwrap(),
        "1s:rate=600".parse().unwrap(),
    ];
    c.grace = Duration::from_secs(30);
    let run = rt()
        .block_on(bench::run(&server_sleep(10), &c, pending::<()>()))
        .unwrap();
    assert_eq!(
        accounted(&run),
        run.schedule.as_ref().unwrap().arrivals,
        "arrivals lost"
    );
    let table = bench::stage_table(&run).expect("two stages").render();
    let last = table
        .lines()
        .find(|l| l.starts_with("stage 2"))
        .unwrap_or_else(|| panic!("no stage 2 in\n{table}"));
    // stage, from, to, load, transaction, count, tps, ...
    let cells: Vec<&str> = last.split_whitespace().collect();
    let tps: f64 = cells[7].parse().unwrap();
    let secs = run.stages[1].end_s - run.stages[1].start_s;
    let bound = 2.0 * secs / 0.010 + 4.0;
    assert!(
        tps * secs <= bound,
        "stage 2 at {tps} TPS over {secs} s: more than 2 users could end ({bound})\n{table}"
    );
}

/// Promise (docs/bench.md, open loop and The clock): every arrival of the window is counted
/// once: done, failed with a code, or censored (in flight at the grace limit, or queued). An
/// open-loop user that finds its idle connection gone reconnects before serving the arrival
/// it took from the queue; a reconnect can hang (a server that accepts and then says
/// nothing: a stalled host, a full backlog), and the grace limit then cuts it off.
///
/// Steps: through the testkit's proxy, `SELECT 1` arriving at 5 a second for 2 s, 1 user,
/// grace 500 ms; at 0.8 s every connection is cut (the user is idle between arrivals) and
/// the proxy stalls, so the next arrival's reconnect hangs. Arrivals must equal
/// ok + failed + censored, and the arrival in hand must be censored.
///
/// Before the fix: one arrival fewer was accounted than drawn: the arrival the user held
/// through its reconnect was no longer queued and not yet in flight, so the grace limit's
/// census (the users' in-flight flags, then the queue) missed it.
#[test]
fn an_arrival_held_through_a_hung_reconnect_is_censored_not_lost() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let target = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
    let proxy = slipstream_testkit::DelayProxy::start(target, Duration::ZERO).unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    let mut c = common::config(Some(url), 1, 3, Duration::from_secs(2));
    c.rate = Some(5.0);
    c.grace = Duration::from_millis(500);
    let workload = bench::Workload::new("ping").transaction("ping", 1, || common::Ping);
    let run = rt()
        .block_on(async {
            let run = bench::run(&workload, &c, pending::<()>());
            let attack = async {
                tokio::time::sleep(Duration::from_millis(800)).await;
                proxy.set_stalled(true);
                proxy.cut_all();
                std::future::pending::<()>().await
            };
            tokio::select! {
                r = tokio::time::timeout(Duration::from_secs(60), run) => r,
                _ = attack => unreachable!(),
            }
        })
        .expect("the run ends within 60 s")
        .unwrap();
    proxy.set_stalled(false);
    let schedule = run.schedule.as_ref().expect("open loop");
    let t = &run.transactions[0];
    assert!(schedule.arrivals >= 3, "{}", schedule.arrivals);
    assert!(
        t.censored >= 1,
        "nothing censored: {t:?}, {} arrivals",
        schedule.arrivals
    );
    assert_eq!(
        accounted(&run),
        schedule.arrivals,
        "arrivals lost: {} ok, {} failed, {} censored",
        t.ok,
        t.failed,
        t.censored
    );
}

/// Held. Promise (docs/bench.md, open loop and The clock): every arrival of the window is
/// counted once, done, failed with a code, or censored, whatever the server does; arrivals
/// while it is down fail at once as `client:no-connection`.
///
/// Steps: `SELECT pg_sleep(0.005)` arriving at 100 a second for 4 s, 2 users; 1 s in, the
/// server is stopped (fast shutdown) and started again. Arrivals must equal
/// ok + failed + censored, every failure must carry a code that says what happened, and
/// successes must come back after the restart.
#[test]
fn an_open_loop_through_a_server_restart_counts_every_arrival() {
    let mut cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = common::config(Some(cluster.url()), 2, 12, Duration::from_secs(4));
    c.rate = Some(100.0);
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        cluster.restart().unwrap();
        cluster
    });
    let run = rt()
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                bench::run(&server_sleep(5), &c, pending::<()>()),
            )
            .await
        })
        .expect("the run ends within 60 s")
        .unwrap();
    let _cluster = restarter.join().unwrap();
    let schedule = run.schedule.as_ref().expect("open loop");
    assert_eq!(accounted(&run), schedule.arrivals, "arrivals lost");
    check_series_add_up(&run);
    let t = &run.transactions[0];
    let expected = ["57P01", "client:no-connection", "client:io", "57P03"];
    assert!(
        t.failed > 0 && t.failures.keys().all(|k| expected.contains(&k.as_str())),
        "{:?}",
        t.failure_messages
    );
    let series = &run.intervals.per_transaction["sleep"];
    assert!(
        series.last().is_some_and(|i| i.sufficient.n > 0),
        "no success after the restart: {series:?}"
    );
}

/// `SELECT 1`; the run's first execution runs `first` before it (a statistics reset, as a
/// monitoring job or an operator may make during a run).
struct PingAfterFirst {
    first: &'static str,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Transaction for PingAfterFirst {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            s.client()?.simple_query(self.first).await?;
        }
        s.client()?.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// 2 users of `SELECT 1` for 1 s against `url`, the first transaction running `first`, the
/// context captured as `slipstream bench` captures it; every transaction must succeed.
fn ping_run_whose_first_transaction_runs(url: String, first: &'static str) -> bench::BenchRun {
    let mut c = common::config(Some(url), 2, 3, Duration::from_secs(1));
    c.progress = bench::Style::Quiet;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workload = bench::Workload::new("ping").transaction("ping", 1, move || PingAfterFirst {
        first,
        done: done.clone(),
    });
    let run = rt()
        .block_on(bench::run(&workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert!(t.ok > 0 && t.failed == 0, "{t:?}");
    run
}

/// Promise (docs/bench.md, the run's context): "database during the run" is the database's
/// counters after the run less those before it, the run's work; when they are not that (a
/// restart reset them), the result says so and leaves them out.
///
/// Steps: a real server; 2 users of `SELECT 1` for 1 s, the first transaction calling
/// `pg_stat_reset()` (no restart: the postmaster's start is unchanged); the context captured as
/// `slipstream bench` captures it.
///
/// Before the fix: nothing was said, and the report printed the reset counters' difference
/// as the run's work: "database during the run: commits 9640, ... blocks read -73, blocks hit
/// -1089" (the commits short by those before the reset).
#[test]
fn statistics_reset_mid_run_are_said_and_not_passed_off() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    // Commits before the run, so the reset leaves fewer after it than before.
    cluster
        .psql("DO $$ BEGIN FOR i IN 1..3 LOOP PERFORM 1; END LOOP; END $$")
        .unwrap();
    let run = ping_run_whose_first_transaction_runs(cluster.url(), "SELECT pg_stat_reset()");
    let ctx = run.context.as_ref().expect("a context");
    let said = bench::report::describe(&run).join("\n");
    assert!(
        ctx.warnings.iter().any(|w| w.contains("reset")),
        "no word of the reset in\n{said}"
    );
    assert_eq!(
        ctx.database_delta("xact_commit"),
        None,
        "the reset counters are passed off as the run's:\n{said}"
    );
}

/// Promise (docs/bench.md, the run's context): a change of `pg_stat_database.stats_reset`
/// over the run is a warning that says what happened, and errors name what failed.
///
/// Steps: a real server with a table `t`; 2 users of `SELECT 1` for 1 s, the first
/// transaction resetting `t`'s counters alone (`pg_stat_reset_single_table_counters`, which
/// in PostgreSQL 15 moves the database's `stats_reset` too but leaves its counters alone);
/// the context captured as `slipstream bench` captures it. The database's counters did not
/// go down (checked on the server after the run), so they were not reset.
///
/// Before the fix: the warning said "this database's statistics were reset during the run
/// (... pg_stat_reset(), by a monitoring job or an operator): its counters over the run are
/// not known ...; run again without the reset": nobody had reset them, and a reader looked
/// for a `pg_stat_reset()` that never ran, with no word of the reset that did.
#[test]
fn one_tables_reset_mid_run_is_not_said_a_reset_of_the_database() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    cluster
        .psql("CREATE TABLE public.t (i int); INSERT INTO public.t VALUES (1)")
        .unwrap();
    let run = ping_run_whose_first_transaction_runs(
        cluster.url(),
        "SELECT pg_stat_reset_single_table_counters('public.t'::regclass)",
    );
    let ctx = run.context.as_ref().expect("a context");
    let said = bench::report::describe(&run).join("\n");
    // The attack did what it says: stats_reset moved (else the test proves nothing) and the
    // database's commits did not go down.
    let before = ctx
        .before
        .as_ref()
        .and_then(|s| s.database.as_ref())
        .unwrap();
    let commits_before = before["xact_commit"].as_f64().unwrap();
    let now: f64 = cluster
        .psql("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(now >= commits_before, "the database's counters were reset");
    let w: Vec<&String> = ctx
        .warnings
        .iter()
        .filter(|w| w.contains("stats_reset"))
        .collect();
    assert_eq!(w.len(), 1, "no word of stats_reset moving in\n{said}");
    assert!(
        !w[0].contains("statistics were reset"),
        "a reset of one table said to be the database's:\n{said}"
    );
    assert!(
        w[0].contains("pg_stat_reset_single_table_counters"),
        "the reset that moves stats_reset without resetting the database's counters is not named:\n{said}"
    );
}

/// Held. Promise (docs/bench.md, the run's context): only a reset that moves this database's
/// `stats_reset` leaves its counters out; a reset of the cluster's shared statistics
/// (`pg_stat_reset_shared`) does not touch them, and the database's counters over the run
/// are kept and printed, with no warning of a reset. The database was never reset before
/// (`stats_reset` NULL before and after), the case a comparison of two NULLs could get wrong.
///
/// Steps: a real server; 2 users of `SELECT 1` for 1 s, the first transaction resetting the
/// `bgwriter` and `wal` statistics. The result must have no warning of `stats_reset`, both
/// rows' `stats_reset` NULL, and the database's commits over the run at least the run's
/// successes (each `SELECT 1` its own transaction).
#[test]
fn a_reset_of_shared_statistics_mid_run_keeps_the_databases_counters() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let run = ping_run_whose_first_transaction_runs(
        cluster.url(),
        "SELECT pg_stat_reset_shared('bgwriter'), pg_stat_reset_shared('wal')",
    );
    let t = &run.transactions[0];
    let ctx = run.context.as_ref().expect("a context");
    let said = bench::report::describe(&run).join("\n");
    assert!(
        !ctx.warnings.iter().any(|w| w.contains("stats_reset")),
        "a shared reset said to be the database's:\n{said}"
    );
    for s in [&ctx.before, &ctx.after] {
        let row = s.as_ref().and_then(|s| s.database.as_ref()).unwrap();
        assert_eq!(row["stats_reset"], serde_json::Value::Null, "{row}");
    }
    let commits = ctx
        .database_delta("xact_commit")
        .unwrap_or_else(|| panic!("no commits over the run:\n{said}"));
    assert!(
        commits >= t.ok as f64,
        "{commits} commits for {} successes",
        t.ok
    );
}
