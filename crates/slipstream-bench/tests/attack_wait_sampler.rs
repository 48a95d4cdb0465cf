//! Attacks on the context's wait-event sampler (docs/bench.md, "The run's context"): its
//! connection may end mid-run (`pg_terminate_backend`, a restart, a server that stays down);
//! the sampler must reconnect with a bounded backoff, go on sampling, never hold the run's
//! end, and say in the result how many samples and which periods are missing, and why.

mod common;

use std::time::{Duration, Instant};

use common::rt;
use slipstream_bench::{self as bench, context::RunContext};

/// How long each attack samples for: long enough for several samples on either side of the
/// fault at 500 ms each.
const WINDOW: Duration = Duration::from_millis(4500);

/// Samples wait events against `url` for `window` and returns the context (no snapshot
/// after: the attacks read only the sampling).
fn sample(url: &str, window: Duration) -> (RunContext, Duration) {
    rt().block_on(async {
        let mut capture = bench::context::before(url, "w").await;
        let t = Instant::now();
        capture.sample_waits(tokio::time::sleep(window)).await;
        let took = t.elapsed();
        (capture.after().await, took)
    })
}

/// `workload` run as configured, which must end within `limit` (a hang fails the test).
fn run_within(
    workload: &bench::Workload,
    c: &bench::RunConfig,
    limit: Duration,
) -> bench::BenchRun {
    rt().block_on(async {
        tokio::time::timeout(limit, bench::run(workload, c, std::future::pending::<()>())).await
    })
    .unwrap_or_else(|_| panic!("the run did not end within {limit:?}"))
    .unwrap()
}

/// The warnings that speak of the sampler.
fn sampler_warnings(ctx: &RunContext) -> Vec<&String> {
    ctx.warnings
        .iter()
        .filter(|w| w.contains("wait-event") || w.contains("pg_stat_activity"))
        .collect()
}

/// Promise: the sampler goes on after the server ends its connection, and the result says
/// which period has no samples, and why, in one warning.
///
/// Steps: a cluster; wait events sampled for 4.5 s; at 1.2 s another session terminates
/// the sampler's backend, found by what it runs (`pg_stat_activity`, the sampler's query).
/// At least 6 samples of the about 9 must be taken (at most 3 fall before the termination),
/// one warning speaks of the sampler, and it names the termination.
///
/// Before the fix: the sampler stopped for good at the termination: 3 samples, and the
/// warning "could not sample pg_stat_activity: ... terminating connection due to
/// administrator command".
#[test]
fn wait_sampler_reconnects_after_its_backend_is_terminated() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = cluster.url();
    let killer = std::thread::spawn({
        let url = url.clone();
        move || {
            std::thread::sleep(Duration::from_millis(1200));
            rt().block_on(async {
                let mut c = slipstream_pg::connect(&url).await.unwrap();
                let row = c
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity \
                         WHERE pid <> pg_backend_pid() AND query LIKE '%pg_stat_activity%'",
                        &[],
                    )
                    .await
                    .unwrap();
                row.get::<_, i32>(0).unwrap()
            })
        }
    });
    let (ctx, _) = sample(&url, WINDOW);
    assert_eq!(
        killer.join().unwrap(),
        1,
        "the sampler's backend was not found"
    );
    assert!(
        ctx.wait_samples >= 6,
        "{} samples: {:?}",
        ctx.wait_samples,
        ctx.warnings
    );
    let said = sampler_warnings(&ctx);
    assert_eq!(said.len(), 1, "{:?}", ctx.warnings);
    assert!(said[0].contains("administrator command"), "{said:?}");
    // The period is kept: from the last sample before the termination to the first after.
    let [gap] = ctx.wait_gaps.as_slice() else {
        panic!("{:?}", ctx.wait_gaps)
    };
    let to = gap.to_s.expect("no sample after the termination");
    // The termination comes 1.2 s after the test's start (later on a loaded machine).
    assert!(gap.from_s >= 0.9 && to > gap.from_s, "{gap:?}");
    assert_eq!(ctx.wait_samples_missed, gap.missed);
}

/// Promise: the sampler goes on after a server restart mid-run.
///
/// Steps: a cluster; wait events sampled for 4.5 s; at 1.2 s the testkit restarts the
/// server (fast shutdown, start on the same port). At least one sample after the restart
/// must be taken: at least 4 of the about 9 (3 fall before it; the restart itself takes
/// under 1 s here), one warning speaks of the sampler, and every period without samples
/// ended with a sample (a restart quick enough may leave no sample time out: the period is
/// still kept, as the connection was lost).
///
/// Before the fix: the sampler stopped for good at the restart: 3 samples.
#[test]
fn wait_sampler_goes_on_after_a_server_restart() {
    let mut cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = cluster.url();
    let (ctx, _) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1200));
            cluster.restart().unwrap();
        });
        sample(&url, WINDOW)
    });
    assert!(
        ctx.wait_samples >= 4,
        "{} samples: {:?}",
        ctx.wait_samples,
        ctx.warnings
    );
    let said = sampler_warnings(&ctx);
    assert_eq!(said.len(), 1, "{:?}", ctx.warnings);
    assert!(
        !ctx.wait_gaps.is_empty() && ctx.wait_gaps.iter().all(|g| g.to_s.is_some()),
        "{:?}",
        ctx.wait_gaps
    );
}

/// Promise: a server that goes down mid-run and stays down holds neither the run's end nor
/// the result, and the result says the sampler had no samples from then on, and why.
///
/// Steps: a cluster; wait events sampled for 3 s; at 1.2 s the testkit stops the server,
/// which stays down. Sampling must end within 1 s of the window's end (a bound on a hang,
/// not a speed), and one warning must say the samples are missing from then to the end.
///
/// Before the fix: the warning was "could not sample pg_stat_activity: ..." with no word of
/// the period left unsampled.
#[test]
fn wait_sampler_says_when_the_server_stayed_down_to_the_end() {
    let mut cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = cluster.url();
    let window = Duration::from_secs(3);
    let (ctx, took) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1200));
            cluster.stop().unwrap();
        });
        sample(&url, window)
    });
    assert!(
        took < window + Duration::from_secs(1),
        "sampling took {took:?}"
    );
    let said = sampler_warnings(&ctx);
    assert_eq!(said.len(), 1, "{:?}", ctx.warnings);
    assert!(said[0].contains("to the end"), "{said:?}");
    let gap = ctx.wait_gaps.last().unwrap();
    assert_eq!(gap.to_s, None, "{:?}", ctx.wait_gaps);
    assert!((0.9..=2.6).contains(&gap.from_s), "{gap:?}");
    // Never hammering a down server: 1.8 s down, with pauses of 0.5, 1, 2 s between tries
    // (a fixed 100 ms pause, as the users', would try about 18 times).
    assert!(gap.reconnects_tried <= 4, "{gap:?}");
    assert!(ctx.wait_samples_missed >= 2, "{:?}", ctx.wait_gaps);
}

/// Promise: in a run (`bench::run`, as `slipstream bench` runs it), the sampler shows as
/// `application_name` `slipstream-bench wait-event sampler`, reconnects after its backend
/// is terminated, and the run's result keeps the period and says it once; the users are
/// not touched.
///
/// Steps: a cluster; one user pinging for 4 s, its context captured; at 1.2 s another
/// session terminates every backend of that application_name (exactly one). The result
/// must have a period without samples that ended with a sample, one warning of the
/// sampler, at least 5 samples, and no failed transaction.
///
/// Added with the fix (before it the sampler set no application_name, and the run kept 3
/// samples: see the tests above).
#[test]
fn a_run_keeps_sampling_after_its_sampler_is_terminated() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = cluster.url();
    let killer = std::thread::spawn({
        let url = url.clone();
        move || {
            std::thread::sleep(Duration::from_millis(1200));
            terminate_sampler(&url)
        }
    });
    let mut c = common::config(Some(url.clone()), 1, 3, Duration::from_secs(4));
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ping").transaction("ping", 1, || common::Ping);
    let run = run_within(&workload, &c, Duration::from_secs(60));
    assert_eq!(
        killer.join().unwrap(),
        1,
        "the sampler was not found by its name"
    );
    let ctx = run.context.as_ref().unwrap();
    assert!(
        !ctx.wait_gaps.is_empty() && ctx.wait_gaps.iter().all(|g| g.to_s.is_some()),
        "{:?}",
        ctx.wait_gaps
    );
    assert!(ctx.wait_samples >= 5, "{} samples", ctx.wait_samples);
    assert_eq!(sampler_warnings(ctx).len(), 1, "{:?}", ctx.warnings);
    let t = &run.transactions[0];
    assert!(t.ok > 0 && t.failed == 0, "{t:?}");
}

/// A proxy in front of `cluster` (no delay), and the URL through it.
fn proxied(cluster: &slipstream_testkit::Cluster) -> (slipstream_testkit::DelayProxy, String) {
    let target = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
    let proxy = slipstream_testkit::DelayProxy::start(target, Duration::ZERO).unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    (proxy, url)
}

/// Held. Promise: a server that stops answering (a stall longer than a sample's 5 s
/// timeout) costs the samples of the stall, not the rest of the run: the sampler gives up
/// on that connection, reconnects once the server answers, and keeps the period.
///
/// Steps: a cluster behind a proxy; wait events sampled for 10 s; the proxy holds all
/// traffic from 1.2 s to 7 s (the sample in flight times out at about 6.5 s, and the
/// reconnect waits for the stall's end). A period must start at about 1 s, end with a
/// sample, name the timeout, and at least 3 samples must come after it.
///
/// Written after the fix; on c7d9cb3's code the first timeout ended the sampling ("reading
/// pg_stat_activity timed out after 5 s, so the rest of the context during the window was
/// not read").
#[test]
fn wait_sampler_goes_on_after_a_stall_longer_than_a_sample_timeout() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let (proxy, url) = proxied(&cluster);
    let (ctx, took) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1200));
            proxy.set_stalled(true);
            std::thread::sleep(Duration::from_millis(5800));
            proxy.set_stalled(false);
        });
        sample(&url, Duration::from_secs(10))
    });
    assert!(took < Duration::from_secs(11), "sampling took {took:?}");
    let [gap] = ctx.wait_gaps.as_slice() else {
        panic!("{:?} {:?}", ctx.wait_gaps, ctx.warnings)
    };
    let to = gap.to_s.expect("no sample after the stall");
    // The stall's end is on this test's clock, a little after the sampling's start.
    assert!(gap.from_s >= 0.9 && to >= 6.5, "{gap:?}");
    assert!(gap.why.contains("timed out"), "{gap:?}");
    assert!(ctx.wait_samples >= 3 + 3, "{} samples", ctx.wait_samples);
    assert_eq!(sampler_warnings(&ctx).len(), 1, "{:?}", ctx.warnings);
}

/// Promise: a server that stalls from before the run to its end holds neither the run's
/// end nor its result, and the result says the sampler had no samples: a connect that
/// hangs gives way to the end of the sampling.
///
/// Steps: a cluster behind a proxy that holds all traffic after the context was read;
/// wait events sampled for 2 s. Sampling must end within 1 s of the window's end, with one
/// period from the start to the end and no sample.
///
/// Before the fix (d844114, and c7d9cb3 alike): sampling ended on time, but with no sample,
/// no period and no warning: the end cut the hanging connect short and said nothing, so the
/// result read as a run whose sampler saw nothing rather than one it never reached.
#[test]
fn wait_sampler_connecting_to_a_stalled_server_does_not_hold_the_end() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let (proxy, url) = proxied(&cluster);
    let window = Duration::from_secs(2);
    let (ctx, took) = rt().block_on(async {
        let capture = bench::context::before(&url, "w").await;
        proxy.set_stalled(true);
        let mut capture = capture;
        let t = Instant::now();
        capture.sample_waits(tokio::time::sleep(window)).await;
        let took = t.elapsed();
        proxy.set_stalled(false);
        (capture.after().await, took)
    });
    assert!(
        took < window + Duration::from_secs(1),
        "sampling took {took:?}"
    );
    assert_eq!(ctx.wait_samples, 0);
    let [gap] = ctx.wait_gaps.as_slice() else {
        panic!("{:?}", ctx.wait_gaps)
    };
    assert_eq!((gap.from_s, gap.to_s), (0.0, None), "{gap:?}");
    assert!(gap.missed >= 4, "{gap:?}");
}

/// Terminates, in a session of its own, every backend named as the sampler; returns how
/// many.
fn terminate_sampler(url: &str) -> i32 {
    rt().block_on(async {
        let mut c = slipstream_pg::connect(url).await.unwrap();
        let row = c
            .query_one(
                "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity \
                 WHERE application_name = 'slipstream-bench wait-event sampler'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i32>(0).unwrap()
    })
}

/// Held. Promise: however many times the connection ends, the result keeps each period and
/// says them all in one warning (not one per failure).
///
/// Steps: a cluster; wait events sampled for 4.5 s; the sampler's backend terminated at
/// 1.2 s and again at 2.7 s. Two periods, both ended by a sample, and exactly one warning
/// of the sampler, which says 2 times.
#[test]
fn two_terminations_are_two_periods_in_one_warning() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = cluster.url();
    let killer = std::thread::spawn({
        let url = url.clone();
        move || {
            std::thread::sleep(Duration::from_millis(1200));
            let first = terminate_sampler(&url);
            std::thread::sleep(Duration::from_millis(1500));
            (first, terminate_sampler(&url))
        }
    });
    let (ctx, _) = sample(&url, WINDOW);
    assert_eq!(killer.join().unwrap(), (1, 1));
    assert_eq!(ctx.wait_gaps.len(), 2, "{:?}", ctx.wait_gaps);
    assert!(
        ctx.wait_gaps.iter().all(|g| g.to_s.is_some()),
        "{:?}",
        ctx.wait_gaps
    );
    let said = sampler_warnings(&ctx);
    assert_eq!(said.len(), 1, "{:?}", ctx.warnings);
    assert!(said[0].contains("lost its connection 2 times"), "{said:?}");
}

/// Held. Promise: a run whose server goes down and stays down ends on time and writes its
/// result, which says the sampler had no samples from then on.
///
/// Steps: a cluster; one user pinging for 3 s (grace 300 ms), its context captured; at
/// 1.2 s the testkit stops the server for good. The run must end within 15 s (a bound on a
/// hang: the users' reconnects and the context's connect after the run each fail at once on
/// a refused port), and its context must end with a period to the end.
#[test]
fn a_run_whose_server_stays_down_ends_and_says_the_sampling_stopped() {
    let mut cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = cluster.url();
    let mut c = common::config(Some(url.clone()), 1, 3, Duration::from_secs(3));
    c.progress = bench::Style::Quiet;
    c.grace = Duration::from_millis(300);
    let workload = bench::Workload::new("ping").transaction("ping", 1, || common::Ping);
    let run = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1200));
            cluster.stop().unwrap();
        });
        run_within(&workload, &c, Duration::from_secs(15))
    });
    let ctx = run.context.as_ref().unwrap();
    let gap = ctx.wait_gaps.last().expect("no period without samples");
    assert_eq!(gap.to_s, None, "{:?}", ctx.wait_gaps);
    assert!(gap.missed >= 2, "{gap:?}");
    let said = sampler_warnings(ctx);
    assert_eq!(said.len(), 1, "{:?}", ctx.warnings);
    assert!(said[0].contains("to the end"), "{said:?}");
}

/// `SELECT pg_sleep(0.1)` for its first second (the warm-up's work, a wait event of its
/// own: `Timeout:PgSleep`), `SELECT 1` after it.
struct SleepsThenPings(std::sync::Arc<std::sync::OnceLock<Instant>>);

impl bench::Transaction for SleepsThenPings {
    async fn execute(&mut self, s: &mut bench::Session) -> Result<(), bench::TxError> {
        let first = *self.0.get_or_init(Instant::now);
        let sql = if first.elapsed() < Duration::from_secs(1) {
            "SELECT pg_sleep(0.1)"
        } else {
            "SELECT 1"
        };
        s.client()?.simple_query(sql).await?;
        Ok(())
    }
}

/// Promise (`RunContext::wait_events`: "seen in `pg_stat_activity` ... during the window";
/// docs/bench.md: the warm-up is excluded from what a run measures): the waits of a run
/// are those of its measured window, not of its warm-up.
///
/// Steps: a cluster; 2 users, a 2.5 s warm-up and a 1.5 s window; the users' transaction
/// sleeps on the server (`pg_sleep`, wait event `Timeout:PgSleep`) for its first second only,
/// well inside the warm-up, and runs `SELECT 1` after. No sample of the window can see a
/// `PgSleep`.
///
/// Before the fix: the sampler started with the warm-up, and the result's waits (and the
/// report's "active backends' waits over N samples") held `Timeout:PgSleep` seen only in the
/// warm-up, beside the window's: a warm-up's cold-cache `IO:DataFileRead` is read as the
/// run's, and a warm-up of 5 minutes or more filled all 600 samples before the window opened.
#[test]
fn the_waits_are_the_windows_not_the_warm_ups() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = common::config(Some(cluster.url()), 2, 3, Duration::from_millis(1500));
    c.warmup = Duration::from_millis(2500);
    c.progress = bench::Style::Quiet;
    let first = std::sync::Arc::new(std::sync::OnceLock::new());
    let workload = bench::Workload::new("sleep-then-ping")
        .transaction("t", 1, move || SleepsThenPings(first.clone()));
    let run = run_within(&workload, &c, Duration::from_secs(60));
    let t = &run.transactions[0];
    assert!(t.ok > 0 && t.failed == 0, "{t:?}");
    let ctx = run.context.as_ref().unwrap();
    assert!(ctx.wait_samples >= 2, "{} samples", ctx.wait_samples);
    let said = bench::report::describe(&run).join("\n");
    assert!(
        !ctx.wait_events.iter().any(|w| w.wait_event == "PgSleep"),
        "the warm-up's waits are in the run's:\n{said}"
    );
}

/// `SELECT 1`; its first execution tells `first` (the window's start, to the test's killer).
struct PingTelling(std::sync::Arc<std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>>);

impl bench::Transaction for PingTelling {
    async fn execute(&mut self, s: &mut bench::Session) -> Result<(), bench::TxError> {
        if let Some(tx) = self.0.lock().unwrap().take() {
            let _ = tx.send(());
        }
        s.client()?.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// Promise (docs/bench.md, the run's context: the sampler is the bench's own look at the
/// server, beside the system under test): the wait-event sampler's reconnect does not take
/// a connection the users need; a server (or role) at its connection limit keeps its
/// connections for the users.
///
/// Steps: a role `bencher` (LOGIN, not superuser) with `CONNECTION LIMIT 1`; one user of
/// `SELECT 1` thinking 6 s, for 14 s (transactions at 6 s and 12 s). The user holds the
/// role's one connection, so the sampler is refused from the start (53300) and retries with
/// its growing pause (about 0 s, 1 s, 2.5 s, 5 s, 9.5 s). 0.8 s after the first transaction,
/// another session terminates the user's backend (in its think). The user replaces it
/// before its next transaction, at 12 s.
///
/// Before the fix: the sampler's next try (at about 9.5 s) took the freed connection and
/// kept it: the user's replacement was refused ("too many connections for role"), and the
/// transaction after it failed with client:no-connection, for the bench's own sampler.
#[test]
fn the_sampler_does_not_take_the_connection_a_user_needs() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    cluster
        .psql("CREATE ROLE bencher LOGIN CONNECTION LIMIT 1")
        .unwrap();
    let admin = cluster.url();
    let (tx, rx) = std::sync::mpsc::channel();
    let killer = std::thread::spawn(move || {
        rx.recv_timeout(Duration::from_secs(30)).ok()?;
        std::thread::sleep(Duration::from_millis(800));
        Some(rt().block_on(async {
            let mut c = slipstream_pg::connect(&admin).await.unwrap();
            c.query_one(
                "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity \
                 WHERE usename = 'bencher' \
                 AND application_name <> 'slipstream-bench wait-event sampler'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap()
        }))
    });
    let mut c = common::config(
        Some(cluster.url_for("bencher", None)),
        1,
        1,
        Duration::from_secs(14),
    );
    c.think = "6s..6s".parse().unwrap();
    c.progress = bench::Style::Quiet;
    let tell = std::sync::Arc::new(std::sync::Mutex::new(Some(tx)));
    let workload =
        bench::Workload::new("ping").transaction("ping", 1, move || PingTelling(tell.clone()));
    let run = run_within(&workload, &c, Duration::from_secs(60));
    assert_eq!(
        killer.join().unwrap(),
        Some(1),
        "the user's backend was not terminated"
    );
    let t = &run.transactions[0];
    let said = bench::report::describe(&run).join("\n");
    assert!(t.ok >= 2, "{t:?}\n{said}");
    assert_eq!(
        t.failed, 0,
        "the user lost its connection to the sampler:\n{said}"
    );
    let ctx = run.context.as_ref().unwrap();
    let w = sampler_warnings(ctx);
    assert!(
        w.len() == 1 && w[0].contains("stopped trying"),
        "the result does not say the sampler gave way:\n{said}"
    );
}

/// Held. Promise (docs/bench.md: neither a connect nor a sample holds the run's end; a
/// Ctrl-C ends the run at once and still writes what was measured): a stop while the
/// sampler is backing off between refused reconnects ends the run at once, with the
/// period to the end in the result.
///
/// Steps: a role `bencher` (LOGIN, superuser); one user pinging for a 20 s window. Once the
/// user has run, the role loses LOGIN (the user's session goes on) and the sampler's backend
/// is terminated: each reconnect is refused (28000), with a growing pause. The run is
/// stopped 3 s after it started (as a Ctrl-C does); it must end within 8 s of its start
/// (the 20 s window not waited out), interrupted, with the sampler's period lasting to the
/// end.
#[test]
fn a_stop_while_the_sampler_backs_off_ends_the_run_at_once() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    cluster.psql("CREATE ROLE bencher LOGIN SUPERUSER").unwrap();
    let admin = cluster.url();
    let (tx, rx) = std::sync::mpsc::channel();
    let killer = std::thread::spawn(move || {
        rx.recv_timeout(Duration::from_secs(30)).ok()?;
        std::thread::sleep(Duration::from_millis(300));
        rt().block_on(async {
            let mut c = slipstream_pg::connect(&admin).await.unwrap();
            c.simple_query("ALTER ROLE bencher NOLOGIN").await.unwrap();
            Some(
                c.query_one(
                    "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity \
                     WHERE application_name = 'slipstream-bench wait-event sampler'",
                    &[],
                )
                .await
                .unwrap()
                .get::<_, i32>(0)
                .unwrap(),
            )
        })
    });
    let mut c = common::config(
        Some(cluster.url_for("bencher", None)),
        1,
        1,
        Duration::from_secs(20),
    );
    c.progress = bench::Style::Quiet;
    let tell = std::sync::Arc::new(std::sync::Mutex::new(Some(tx)));
    let workload =
        bench::Workload::new("ping").transaction("ping", 1, move || PingTelling(tell.clone()));
    let t = Instant::now();
    let run = rt()
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                bench::run(&workload, &c, tokio::time::sleep(Duration::from_secs(3))),
            )
            .await
        })
        .expect("the run ends within 60 s")
        .unwrap();
    let took = t.elapsed();
    assert_eq!(
        killer.join().unwrap(),
        Some(1),
        "the sampler was not terminated"
    );
    let said = bench::report::describe(&run).join("\n");
    assert!(
        took < Duration::from_secs(8),
        "the stopped run took {took:?}:\n{said}"
    );
    assert!(run.interrupted, "{said}");
    let ctx = run.context.as_ref().unwrap();
    let last = ctx
        .wait_gaps
        .last()
        .unwrap_or_else(|| panic!("no gap:\n{said}"));
    assert!(
        last.to_s.is_none() && last.reconnects_tried >= 1,
        "{last:?}"
    );
    assert!(last.why.contains("terminat"), "{last:?}");
}

/// Held. Promise (docs/bench.md: wait events every 500 ms during the window, the first at
/// its start; the periods without samples said): a window shorter than one sample interval
/// still has its one sample time sampled, or the result says it was missed.
///
/// Steps: a cluster; one user pinging for a 150 ms window. The result must have a sample, or
/// a period without one that counts the missed sample time.
#[test]
fn a_window_shorter_than_a_sample_interval_is_sampled_or_says_not() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = common::config(Some(cluster.url()), 1, 1, Duration::from_millis(150));
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ping").transaction("ping", 1, || common::Ping);
    let run = rt()
        .block_on(bench::run(&workload, &c, std::future::pending::<()>()))
        .unwrap();
    let ctx = run.context.as_ref().unwrap();
    assert!(
        ctx.wait_samples + ctx.wait_samples_missed >= 1,
        "no sample and none missed: {} samples, gaps {:?}, warnings {:?}",
        ctx.wait_samples,
        ctx.wait_gaps,
        ctx.warnings
    );
}

/// Promise (as `a_window_shorter_than_a_sample_interval_is_sampled_or_says_not`): a window
/// shorter than the sampler takes to connect (a distant server: 50 ms a round trip) has its
/// one sample time missed, and the result says so.
///
/// Steps: a cluster behind a proxy adding 50 ms a round trip; one user pinging for a 150 ms
/// window (the sampler's connect and session setup take several round trips). The result
/// must have a sample, or a period without one that counts the missed sample time.
#[test]
fn a_window_shorter_than_the_samplers_connect_says_its_sample_was_missed() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let (proxy, url) = proxied(&cluster);
    proxy.set_rtt(Duration::from_millis(50));
    let mut c = common::config(Some(url), 1, 1, Duration::from_millis(150));
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ping").transaction("ping", 1, || common::Ping);
    let run = rt()
        .block_on(bench::run(&workload, &c, std::future::pending::<()>()))
        .unwrap();
    let ctx = run.context.as_ref().unwrap();
    let said = bench::report::describe(&run).join("\n");
    assert!(
        ctx.wait_samples + ctx.wait_samples_missed >= 1,
        "no sample and none missed: {} samples, gaps {:?}\n{said}",
        ctx.wait_samples,
        ctx.wait_gaps,
    );
}
