//! Attacks on what the bench reads from the server through settings a user may change for
//! every connection a tool makes (`options=-c ...` in the connection string, `PGTZ`,
//! `PGDATESTYLE`, `ALTER ROLE ... SET`): the bench's own SQL and its parsing of the text
//! results must give the same answer under any of them.

mod common;

use std::future::pending;
use std::time::Duration;

use common::{Ping, rt, run_against};
use slipstream_bench::{self as bench, BenchRun, RunConfig};

/// The cluster's URL with `settings` (`name=value`) for every session, as a user's
/// connection string sets them (`options=-c name=value ...`).
fn with_settings(cluster: &slipstream_testkit::Cluster, settings: &[&str]) -> String {
    let options: Vec<String> = settings
        .iter()
        .map(|s| format!("-c%20{}", s.replace('=', "%3D")))
        .collect();
    format!("{}?options={}", cluster.url(), options.join("%20"))
}

/// Order Entry's setup at `scale` against `url`, bounded by `limit` (a hang fails the test).
fn set_up_within(
    url: &str,
    scale: f64,
    limit: Duration,
) -> anyhow::Result<bench::order_entry::SetupReport> {
    rt().block_on(async {
        tokio::time::timeout(limit, bench::order_entry::setup(url, scale, |_| {})).await
    })
    .unwrap_or_else(|_| panic!("the setup did not end within {limit:?}"))
}

/// Promise (docs/bench.md, "Several load generators"): parts that loaded one server at the
/// same time merge; only other servers, copies of a data directory, or a server restarted
/// between the parts are refused, by the context's `started_at` (the postmaster's start).
///
/// Steps: one cluster, two load generators against its `postgres` database at once, the
/// second with the session time zone and date style of another machine (`PGTZ` and
/// `PGDATESTYLE` there, here `options=-c TimeZone=Asia/Kolkata -c DateStyle=SQL,DMY`);
/// merged. Both contexts must also give `started_at` as one instant in RFC 3339, and their
/// snapshots' `taken_at` in RFC 3339 (held).
///
/// Before the fix: `started_at` was `pg_postmaster_start_time()::text`, written in the
/// session's `DateStyle` and `TimeZone`: `2026-11-30 02:29:12.861008+00` for one generator
/// and `30/11/2026 07:59:12.861008 IST` for the other, so the merge refused the two parts as "a
/// server started at ... and one started at ... (another copy of the same data directory,
/// or the server restarted between them)".
#[test]
fn load_generators_in_other_time_zones_merge_as_runs_of_one_server() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let utc = with_settings(&cluster, &["TimeZone=UTC"]);
    let elsewhere = with_settings(&cluster, &["TimeZone=Asia/Kolkata", "DateStyle=SQL,DMY"]);
    let (a, b) = (run_against(&utc, 1), run_against(&elsewhere, 2));
    let started = |r: &BenchRun| r.context.as_ref().unwrap().started_at.clone().unwrap();
    let (sa, sb) = (started(&a), started(&b));
    // Held: the snapshots' clock is written by to_char in UTC, whatever the session's.
    for r in [&a, &b] {
        let ctx = r.context.as_ref().unwrap();
        for snap in [&ctx.before, &ctx.after] {
            let taken = &snap.as_ref().unwrap().taken_at;
            assert!(
                chrono::DateTime::parse_from_rfc3339(taken).is_ok(),
                "taken_at {taken:?} is not RFC 3339"
            );
        }
    }
    let merged = bench::merge(&[("gen1.json".into(), a), ("gen2.json".into(), b)])
        .map_err(|e| e.to_string())
        .unwrap();
    assert_eq!(sa, sb);
    for s in [sa, sb] {
        assert!(
            chrono::DateTime::parse_from_rfc3339(&s).is_ok(),
            "started_at {s:?} is not RFC 3339"
        );
    }
    assert!(merged.transactions[0].ok > 0);
}

/// Promise (docs/bench.md, Order Entry's setup): `--scale` loads the schema, or fails naming
/// what failed; a database whose roles end idle sessions (`ALTER ROLE ... SET
/// idle_session_timeout`, here `options=-c idle_session_timeout=...`, PostgreSQL 14+) is an
/// ordinary one, and the load's own connections are never idle by choice of the user.
///
/// Steps: one cluster, Order Entry set up at scale 0.02 with `idle_session_timeout` of
/// 300 ms, shorter than the loader's own pauses (its lock-holding connection waits while the
/// others load and build the indexes); the setup must end loaded, within 120 s.
///
/// Before the fix: the loader's connections sit idle by design (the catalogue's while it
/// waits its turn, the one holding the load's lock while the others build the indexes), the
/// server ended one, and the setup failed: "COPY into soe.inventories failed to start: fatal
/// 57P05: terminating connection due to idle-session timeout".
#[test]
fn order_entry_loads_where_idle_sessions_are_ended() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["idle_session_timeout=300ms"]);
    let report = set_up_within(&url, 0.02, Duration::from_secs(120))
        .map_err(|e| e.to_string())
        .unwrap();
    assert_eq!(report.rows["customers"], report.sizes.customers as u64);
}

/// Promise (docs/bench.md, "The run's context"): wait events are sampled from
/// `pg_stat_activity` every 500 ms through the measured window, on a connection of the
/// bench's own; nothing of a role's settings may end it early.
///
/// Steps: a context captured against a cluster through a connection string with
/// `idle_session_timeout` of 200 ms (PostgreSQL 14+), shorter than the sampler's pause
/// between two samples; wait events sampled for 2.2 s. At least 3 samples must be taken,
/// with no warning about them.
///
/// Before the fix: the server ended the sampler's connection in its first pause, and the
/// run kept one sample and the warning "could not sample pg_stat_activity: ... terminating
/// connection due to idle-session timeout".
#[test]
fn wait_events_are_sampled_through_the_window_where_idle_sessions_are_ended() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["idle_session_timeout=200ms"]);
    let ctx = rt().block_on(async {
        let mut capture = bench::context::before(&url, "w").await;
        capture
            .sample_waits(tokio::time::sleep(Duration::from_millis(2200)))
            .await;
        capture.after().await
    });
    assert!(
        ctx.wait_samples >= 3,
        "{} samples: {:?}",
        ctx.wait_samples,
        ctx.warnings
    );
    assert!(ctx.warnings.is_empty(), "{:?}", ctx.warnings);
    // The role's value is what the context reports, not the sampler's own.
    assert!(
        ctx.settings
            .iter()
            .any(|s| s.name == "idle_session_timeout" && s.value == "200 ms"),
        "{:?}",
        ctx.settings
    );
}

/// Held (docs/bench.md): a setting that stops Order Entry's load fails it naming the step.
/// Steps: setup through `options=-c default_transaction_read_only=on`; the error must name
/// the schema's creation and the read-only transaction, within 60 s.
#[test]
fn order_entry_load_in_a_read_only_session_fails_naming_the_step() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["default_transaction_read_only=on"]);
    let err = set_up_within(&url, 0.001, Duration::from_secs(60))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("creating the soe schema failed") && err.contains("read-only transaction"),
        "{err}"
    );
}

/// Promise (docs/bench.md, "The run's context"): the context reads Order Entry's scale
/// from `soe.meta` (and the report shows it, and says when two runs' scales differ); the
/// snapshots keep `pg_stat_database` and `pg_stat_statements` numbers as the server counted
/// them. A session's `extra_float_digits` (-15 to 3) shapes how `float8` is written as text.
///
/// Steps: a database with `soe.meta.scale` = 0.125; its context read through
/// `options=-c extra_float_digits=-15` must give the scale 0.125.
///
/// Before the fix: `scale::text` was written with one significant digit, and the context
/// said 0.1: the report showed scale 0.1 and called the scale of a run of the same data
/// through another connection string different.
#[test]
fn the_context_reads_the_scale_whatever_the_sessions_extra_float_digits() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    rt().block_on(async {
        let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        c.batch_execute(
            "CREATE SCHEMA soe; CREATE TABLE soe.meta (scale float8 NOT NULL); \
             INSERT INTO soe.meta VALUES (0.125)",
        )
        .await
        .unwrap();
    });
    let url = with_settings(&cluster, &["extra_float_digits=-15"]);
    let ctx = rt().block_on(async {
        bench::context::before(&url, bench::order_entry::NAME)
            .await
            .after()
            .await
    });
    assert_eq!(ctx.scale, Some(0.125), "{:?}", ctx.warnings);
}

/// Promise (docs/bench.md, stages): a user a stage does not need yet waits with its
/// connection open and starts when its stage begins; the measured failures are the
/// workload's, not the bench's. A role's `idle_session_timeout` (here through
/// `options=-c idle_session_timeout=300ms`) shorter than that wait ends the waiting
/// connections.
///
/// Steps: `SELECT 1` in two stages, 1.2 s at 1 user then 1.2 s at 2: the second user waits
/// out the first stage. Every transaction of both stages must succeed.
#[test]
fn a_user_waiting_for_its_stage_is_not_ended_by_idle_session_timeout() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["idle_session_timeout=300ms"]);
    let mut c = RunConfig::new(Some(url));
    (c.users, c.threads, c.seed) = (2, 1, 1);
    c.warmup = Duration::ZERO;
    c.stages = vec!["1200ms:1".parse().unwrap(), "1200ms:2".parse().unwrap()];
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ping").transaction("ping", 1, || Ping);
    let run = rt()
        .block_on(bench::run(&workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert!(t.ok > 0);
    assert_eq!((t.failed, &t.failures), (0, &Default::default()));
}

/// Promise (docs/bench.md, open loop): the users of an open-loop run are the connections
/// that serve the arrivals, idle between them by the runner's design; an arrival's failures
/// are the workload's. A role's `idle_session_timeout` (here 200 ms, through the connection
/// string) shorter than a user's wait for the next arrival ends its connection.
///
/// Steps: `SELECT 1` arriving at 4 a second for 2.5 s, served by 2 users (each idle about
/// half a second between arrivals). Every arrival must succeed.
///
/// Before the fix: every arrival (7 of 7) found its user's connection ended and failed with
/// 57P05 (the repair after each failure reconnected, and the next wait ended that one too):
/// the run reported a workload that never succeeds.
#[test]
fn open_loop_users_idle_between_arrivals_are_not_ended_by_idle_session_timeout() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["idle_session_timeout=200ms"]);
    let mut c = RunConfig::new(Some(url));
    (c.users, c.threads, c.seed) = (2, 1, 1);
    c.warmup = Duration::ZERO;
    c.stages = vec!["2500ms:rate=4".parse().unwrap()];
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ping").transaction("ping", 1, || Ping);
    let run = rt()
        .block_on(bench::run(&workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert!(
        t.ok > 0,
        "{} ok, {} failed: {:?}",
        t.ok,
        t.failed,
        t.failures
    );
    assert_eq!((t.failed, &t.failures), (0, &Default::default()));
}

/// Promise (docs/bench.md, closed loop): a user thinks for `--think`, then runs its next
/// transaction; the failures measured are the workload's. The connection a user holds idle
/// through its think time is the runner's design (one connection per user, kept between
/// transactions), not the workload's: a role's `idle_session_timeout` (here 200 ms, through
/// the connection string) shorter than the think time ends it while nothing is in flight.
///
/// Steps: `SELECT 1` by 2 users thinking 400-500 ms, for 2.5 s. Every transaction must
/// succeed, and the think time must stay out of the latency (a reconnect is before the start).
///
/// Before the fix: every transaction after a think (10 of 10) found its user's connection ended
/// and failed with 57P05 "terminating connection due to idle-session timeout"; the run
/// reported a workload that never succeeds. After c3ed6b4 replaced those sessions, nothing
/// said the server was ending them (the last assertion fails on e15373e).
#[test]
fn a_user_thinking_is_not_ended_by_idle_session_timeout() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["idle_session_timeout=200ms"]);
    let mut c = common::config(Some(url), 2, 1, Duration::from_millis(2500));
    c.think = "400ms..500ms".parse().unwrap();
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ping").transaction("ping", 1, || Ping);
    let run = rt()
        .block_on(bench::run(&workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert!(
        t.ok > 0,
        "{} ok, {} failed: {:?}",
        t.ok,
        t.failed,
        t.failure_messages
    );
    assert_eq!((t.failed, &t.failures), (0, &Default::default()));
    // A reconnect (tens of ms) is outside the latency, and so is the think time.
    assert!(
        t.latency_stats.max < 400.0,
        "max {} ms",
        t.latency_stats.max
    );
    // Replaced, not hidden: the result says the server ended idle sessions, and why.
    let said = bench::report::describe(&run).join("\n");
    assert!(
        said.contains("sessions the server ended") && said.contains("idle-session timeout"),
        "{said}"
    );
}

/// Two autocommitted `SELECT 1`s with the session's intra-transaction think between them,
/// as Order Entry's browses read (docs/bench.md, "Autocommit for reads").
struct PingThinkPing;

impl bench::Transaction for PingThinkPing {
    async fn execute(&mut self, s: &mut bench::Session) -> Result<(), bench::TxError> {
        s.client()?.simple_query("SELECT 1").await?;
        s.think().await;
        s.client()?.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// Held. Promise (docs/bench.md, stages: "a session idle inside a transaction
/// (`--intra-think`) is the workload's"): the runner replaces only sessions ended in the waits
/// it makes; one ended in a think the transaction itself takes, in a block or between
/// autocommitted statements, fails that transaction, counted by its code with the server's
/// message, as the application's would.
///
/// Steps: `idle_session_timeout` 200 ms through the connection string; a transaction of two
/// autocommitted `SELECT 1`s with a 300 ms intra-think between; 2 users for 1.5 s. Every
/// transaction must fail with 57P05 naming the idle-session timeout, none be censored, and the
/// run go on (more than one failure per user).
#[test]
fn a_session_ended_in_a_transactions_own_think_fails_that_transaction() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(&cluster, &["idle_session_timeout=200ms"]);
    let mut c = common::config(Some(url), 2, 1, Duration::from_millis(1500));
    c.intra_think = "300ms".parse().unwrap();
    c.progress = bench::Style::Quiet;
    let workload = bench::Workload::new("ptp").transaction("ptp", 1, || PingThinkPing);
    let run = rt()
        .block_on(bench::run(&workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    assert!(t.failed > 2 && t.ok == 0, "{t:?}");
    assert_eq!(t.failures.get("57P05"), Some(&t.failed), "{:?}", t.failures);
    assert!(
        t.failure_messages["57P05"].contains("idle-session timeout"),
        "{:?}",
        t.failure_messages
    );
    assert_eq!(run.unfinished, 0);
}

/// Promise (docs/bench.md, workload files): a workload file's SQL is read as PostgreSQL reads
/// it (its `:name`s replaced outside literals only), or the run is refused saying why. The
/// file is read with `standard_conforming_strings = on`, PostgreSQL's default since 9.1; a
/// database or role may still set it off (`ALTER DATABASE ... SET`, here through
/// `options=-c standard_conforming_strings=off`), and then a backslash ends a `'...'`
/// literal somewhere else for the server.
///
/// Steps: a file inserting `'C:\'` and `:key`; run against a session with the setting off.
/// The run must either succeed with every transaction, or be refused before it starts with
/// an error that names `standard_conforming_strings`.
///
/// Before the fix: the run started and every transaction failed with the server's syntax
/// error (42601) about SQL the file never had, the literal's end moved past `$1`.
#[test]
fn a_workload_file_is_not_run_where_the_server_reads_its_literals_otherwise() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    rt().block_on(async {
        let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        c.batch_execute("CREATE TABLE paths (p text, k int)")
            .await
            .unwrap();
    });
    let file = bench::workload_file::parse(
        "name = \"paths\"\n[params]\nkey = { dist = \"sequence\", start = 1 }\n\
         [[transaction]]\nname = \"insert\"\nsql = \"INSERT INTO paths VALUES ('C:\\\\', :key)\"\n",
        "paths.toml",
    )
    .unwrap();
    let url = with_settings(&cluster, &["standard_conforming_strings=off"]);
    let mut c = common::config(Some(url), 1, 1, Duration::from_millis(300));
    c.progress = bench::Style::Quiet;
    match rt().block_on(bench::run(&file.workload, &c, pending::<()>())) {
        Ok(run) => {
            let t = &run.transactions[0];
            assert!(t.ok > 0 && t.failed == 0, "{} ok, {:?}", t.ok, t.failures);
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("standard_conforming_strings"), "{e}");
        }
    }
}

/// A run of `common::sleeping(0)` (no database) whose context names one cluster, database
/// and postmaster start as `started_at` text.
fn run_started_at(seed: u64, started_at: &str) -> BenchRun {
    let mut c = RunConfig::new(None);
    (c.threads, c.seed) = (1, seed);
    c.warmup = Duration::ZERO;
    c.duration = Duration::from_millis(200);
    c.progress = bench::Style::Quiet;
    let mut run = rt()
        .block_on(bench::run(&common::sleeping(0), &c, pending::<()>()))
        .unwrap();
    run.context = Some(bench::context::RunContext {
        system_identifier: Some("7300000000000000001".into()),
        started_at: Some(started_at.into()),
        database: Some("postgres".into()),
        ..Default::default()
    });
    run
}

/// Promise (docs/bench.md, "Several load generators"): parts against one server started
/// once merge, those against a server restarted between them are refused. Result files
/// saved before `started_at` was written in RFC 3339 hold PostgreSQL's `::text` of it
/// (`2026-11-30 02:29:12.861008+00` under the default `DateStyle`), and a test's load
/// generators may not all run one version of slipstream.
///
/// Steps: a part with the old text and one with the same instant in RFC 3339 (and in
/// another offset); merged. Then one a microsecond later, which must be refused.
///
/// Before the fix: the texts were compared, and the first pair was refused as a restarted
/// server.
#[test]
fn a_start_saved_as_postgresql_text_by_an_earlier_version_merges_with_the_same_instant() {
    let old = "2026-11-30 02:29:12.861008+00";
    for new in [
        "2026-11-30T02:29:12.861008Z",
        "2026-11-30T07:59:12.861008+05:30",
    ] {
        bench::merge(&[
            ("gen1.json".into(), run_started_at(1, old)),
            ("gen2.json".into(), run_started_at(2, new)),
        ])
        .map_err(|e| e.to_string())
        .unwrap();
    }
    let err = bench::merge(&[
        ("gen1.json".into(), run_started_at(1, old)),
        (
            "gen2.json".into(),
            run_started_at(2, "2026-11-30T02:29:12.861009Z"),
        ),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("started at"), "{err}");
}

/// Held. Promise (docs/bench.md, Order Entry): `--setup` loads the schema and every
/// transaction type runs without failing, whatever the session's formatting settings:
/// the load streams dates and times as COPY text, which the server reads under the
/// session's `DateStyle` and `TimeZone`.
///
/// Steps: setup at scale 0.002, then 2 s of the whole mix by 2 users, through a connection
/// string with `DateStyle=SQL,DMY`, `TimeZone=Pacific/Chatham`,
/// `IntervalStyle=sql_standard`, `extra_float_digits=-15` and `bytea_output=escape`; no
/// transaction may fail, and the context's scale must read 0.002.
#[test]
fn order_entry_loads_and_runs_under_any_formatting_settings() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let url = with_settings(
        &cluster,
        &[
            "DateStyle=SQL,DMY",
            "TimeZone=Pacific/Chatham",
            "IntervalStyle=sql_standard",
            "extra_float_digits=-15",
            "bytea_output=escape",
        ],
    );
    rt().block_on(bench::order_entry::setup(&url, 0.002, |_| {}))
        .map_err(|e| e.to_string())
        .unwrap();
    let mut c = common::config(Some(url), 2, 7, Duration::from_secs(2));
    c.progress = bench::Style::Quiet;
    let run = rt()
        .block_on(bench::run(
            &bench::order_entry::workload(),
            &c,
            pending::<()>(),
        ))
        .unwrap();
    for t in &run.transactions {
        assert_eq!(t.failed, 0, "{}: {:?}", t.name, t.failures);
    }
    assert!(run.transactions.iter().map(|t| t.ok).sum::<u64>() > 0);
    assert_eq!(run.context.unwrap().scale, Some(0.002));
}

/// `SELECT 1`; the first execution of the run also turns off `bencher`'s LOGIN, so every
/// later connection of the role is refused (28000).
struct PingThenNoLogin(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl bench::Transaction for PingThenNoLogin {
    async fn execute(&mut self, s: &mut bench::Session) -> Result<(), bench::TxError> {
        if !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            s.client()?
                .simple_query("ALTER ROLE bencher NOLOGIN")
                .await?;
        }
        s.client()?.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// Promise (docs/bench.md, closed loop; the result's warning): sessions the server ended while
/// their users waited idle "were replaced before the next transaction, and are in no failure
/// count". A session whose replacement failed was not replaced, and the transactions after it
/// fail (`client:no-connection`): the warning must not count it as replaced.
///
/// Steps: a superuser role `bencher` with `idle_session_timeout` 200 ms (`ALTER ROLE ... SET`);
/// 2 users of `SELECT 1` thinking 400-500 ms, for 1.5 s; the run's first transaction turns
/// off `bencher`'s LOGIN, so each session ended in a think cannot be replaced.
///
/// Before the fix: the warning said "2 sessions the server ended while their users waited idle
/// ... were replaced before the next transaction, and are in no failure count", beside 2
/// failures client:no-connection "reconnect failed: ... not permitted to log in".
#[test]
fn a_session_ended_in_a_think_whose_replacement_failed_is_not_said_replaced() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    cluster
        .psql(
            "CREATE ROLE bencher LOGIN SUPERUSER; \
             ALTER ROLE bencher SET idle_session_timeout = '200ms';",
        )
        .unwrap();
    let url = cluster.url_for("bencher", None);
    let mut c = common::config(Some(url), 2, 1, Duration::from_millis(1500));
    c.think = "400ms..500ms".parse().unwrap();
    c.progress = bench::Style::Quiet;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workload =
        bench::Workload::new("ping").transaction("ping", 1, move || PingThenNoLogin(done.clone()));
    let run = rt()
        .block_on(bench::run(&workload, &c, pending::<()>()))
        .unwrap();
    let t = &run.transactions[0];
    let no_connection = t.failures.get("client:no-connection").copied().unwrap_or(0);
    assert!(
        no_connection > 0,
        "the replacements were refused: {:?}",
        t.failure_messages
    );
    let said = bench::report::describe(&run).join("\n");
    let claim = said
        .lines()
        .find(|l| l.contains("sessions the server ended"))
        .unwrap_or_else(|| panic!("no word of the ended sessions in\n{said}"));
    assert!(
        !claim.contains("were replaced") || claim.contains("could not be replaced"),
        "{claim}"
    );
    assert!(claim.contains("not permitted to log in"), "{claim}");
}
