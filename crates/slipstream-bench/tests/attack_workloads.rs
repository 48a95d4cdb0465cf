//! Attacks on what docs/custom-transactions.md and docs/bench.md promise about workload files,
//! seeded runs, the run's context and Order Entry under contention, checked from the server's
//! side (session 43, helper 47).

mod common;

use std::collections::BTreeMap;
use std::future::pending;
use std::time::{Duration, Instant};

use common::rt;
use slipstream_bench::{self as bench, BenchRun, RunConfig, order_entry, workload_file};
use slipstream_pg::Client;
use slipstream_testkit::Cluster;

/// Two types that log what they drew, with the backend that ran them: a user's stream of
/// picks and parameters can be read back from the server.
const LOGGING: &str = r#"
name = "logging"
[params]
key = { dist = "uniform", min = 1, max = 1000000000 }
word = { dist = "string", min_len = 6, max_len = 6 }
[[transaction]]
name = "a"
weight = 3
sql = "INSERT INTO drawn (pid, kind, k, w) VALUES (pg_backend_pid(), 'a', :key, :word)"
[[transaction]]
name = "b"
sql = "INSERT INTO drawn (pid, kind, k, w) VALUES (pg_backend_pid(), 'b', :key, :word)"
"#;

const DRAWN: &str =
    "CREATE TABLE drawn (id bigserial PRIMARY KEY, pid int, kind text, k bigint, w text)";

/// A cluster that preloads pg_stat_statements (not yet created in any database), a runtime,
/// and a connection to it.
fn preloading_pg_stat_statements() -> (Cluster, tokio::runtime::Runtime, Client) {
    let cluster = Cluster::builder()
        .setting("shared_preload_libraries", "pg_stat_statements")
        .start()
        .unwrap();
    let rt = rt();
    let c = rt.block_on(slipstream_pg::connect(&cluster.url())).unwrap();
    (cluster, rt, c)
}

fn config(url: &str, users: usize, secs: f64, seed: u64) -> RunConfig {
    let mut c = RunConfig::new(Some(url.into()));
    c.users = users;
    c.threads = 2;
    c.duration = Duration::from_secs_f64(secs);
    c.seed = seed;
    c
}

/// Order Entry with every type at weight 1: each is picked often enough, even in a short
/// run on a loaded machine, to be checked (the reporting queries' weight of 2 in 127 may
/// not come up in a few hundred transactions).
fn every_type_equally() -> bench::Workload {
    let mut workload = order_entry::workload();
    for (name, _) in workload.weights() {
        workload.set_weight(&name, 1).unwrap();
    }
    workload
}

fn int(rt: &tokio::runtime::Runtime, c: &mut Client, sql: &str) -> i64 {
    rt.block_on(c.query_one(sql, &[])).unwrap().get(0).unwrap()
}

/// Each backend's stream of (kind, key, word), in the order the server stored them; the
/// table is emptied for the next run.
fn streams(rt: &tokio::runtime::Runtime, c: &mut Client) -> Vec<Vec<(String, i64, String)>> {
    let rows = rt
        .block_on(c.query("SELECT pid, kind, k, w FROM drawn ORDER BY id", &[]))
        .unwrap();
    let mut by_pid: BTreeMap<i32, Vec<(String, i64, String)>> = BTreeMap::new();
    for r in rows {
        by_pid.entry(r.get(0).unwrap()).or_default().push((
            r.get(1).unwrap(),
            r.get(2).unwrap(),
            r.get(3).unwrap(),
        ));
    }
    rt.block_on(c.batch_execute("TRUNCATE drawn")).unwrap();
    by_pid.into_values().collect()
}

/// Holds. Promise (docs/custom-transactions.md, "What a transaction gets": the user's random
/// numbers are "seeded from `RunConfig::seed` and the user number"; `RunConfig::seed`: "the
/// same seed repeats the same choices per user"): a run is reproducible with `--seed`, and
/// two users draw different streams.
///
/// Steps: a file whose two types (weights 3 and 1) insert their draws and
/// `pg_backend_pid()`; four users for 0.6 s with seed 7, twice, and once with seed 8. From
/// the server: each user's stream (picks, integers, strings) of the second run is a prefix
/// of, or extends, one of the first run's (runs differ only in how far each user got); the
/// four streams of one run differ; seed 8 repeats none of seed 7's.
#[test]
fn a_seeded_run_repeats_each_users_picks_and_parameters() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    let mut c = rt.block_on(slipstream_pg::connect(&url)).unwrap();
    rt.block_on(c.batch_execute(DRAWN)).unwrap();
    let file = workload_file::parse(LOGGING, "logging.toml").unwrap();
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let r = rt
            .block_on(bench::run(
                &file.workload,
                &config(&url, 4, 0.6, seed),
                pending::<()>(),
            ))
            .unwrap();
        let ok: u64 = r.transactions.iter().map(|t| t.ok).sum();
        let s = streams(&rt, &mut c);
        assert_eq!(s.len(), 4, "four users, four backends");
        assert_eq!(
            s.iter().map(Vec::len).sum::<usize>() as u64,
            ok,
            "every success is a row, and nothing else is"
        );
        assert!(
            s.iter().all(|u| u.len() >= 20),
            "too few transactions to compare: {:?}",
            s.iter().map(Vec::len).collect::<Vec<_>>()
        );
        runs.push(s);
    }
    let same = |a: &[(String, i64, String)], b: &[(String, i64, String)]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    for user in &runs[1] {
        let matches = runs[0].iter().filter(|u| same(u, user)).count();
        assert_eq!(
            matches,
            1,
            "a user of the second run with seed 7 repeats {matches} users of the first (want exactly 1); starts with {:?}",
            &user[..3]
        );
    }
    for run in &runs {
        for (i, a) in run.iter().enumerate() {
            for b in &run[i + 1..] {
                assert_ne!(
                    a[..10],
                    b[..10],
                    "two users of one run drew the same stream"
                );
            }
        }
    }
    for user in &runs[2] {
        assert!(
            runs[0].iter().all(|u| u[..10] != user[..10]),
            "seed 8 repeated a stream of seed 7: {:?}",
            &user[..3]
        );
    }
    // The picks follow the weights 3:1 over all the rows of the three runs (a binomial
    // bound of 6 standard deviations; the seeds are fixed).
    let picks: Vec<&String> = runs.iter().flatten().flatten().map(|(k, _, _)| k).collect();
    let n = picks.len() as f64;
    let a = picks.iter().filter(|k| k.as_str() == "a").count() as f64;
    let sd = (n * 0.75 * 0.25).sqrt();
    assert!(
        (a - 0.75 * n).abs() < 6.0 * sd,
        "{a} of {n} picks were `a`, weight 3 of 4 wants {} +- {:.0}",
        0.75 * n,
        6.0 * sd
    );
}

/// Promise (docs/bench.md, "The run's context"): the context holds `version()`, every
/// setting whose `pg_settings.source` is not `default`, and this database's
/// `pg_stat_database` row and top `pg_stat_statements` entries before the users connect and
/// after the drain, so that `report` can show "the database's counters over the run".
///
/// Steps: a cluster with pg_stat_statements preloaded and installed; two users insert rows
/// for 1 s. Compared with what the server says afterwards: the version; every setting from
/// the configuration file, as the server lists it; `tup_inserted` over the run equal to the
/// rows inserted (nothing else inserts); `xact_commit` over the run at least the successes;
/// the INSERT's `calls` in pg_stat_statements over the run equal to the successes.
#[test]
fn the_runs_context_matches_what_the_server_says() {
    let (cluster, rt, mut c) = preloading_pg_stat_statements();
    let url = cluster.url();
    rt.block_on(c.batch_execute(&format!("CREATE EXTENSION pg_stat_statements; {DRAWN}")))
        .unwrap();
    let file = workload_file::parse(LOGGING, "logging.toml").unwrap();
    let r: BenchRun = rt
        .block_on(bench::run(
            &file.workload,
            &config(&url, 2, 1.0, 1),
            pending::<()>(),
        ))
        .unwrap();
    let ok: u64 = r.transactions.iter().map(|t| t.ok).sum();
    assert!(ok > 0 && r.transactions.iter().all(|t| t.failed == 0));
    let ctx = r
        .context
        .as_ref()
        .expect("a run against a database has a context");
    assert!(ctx.warnings.is_empty(), "{:?}", ctx.warnings);

    let version: String = rt
        .block_on(c.query_one("SELECT version()", &[]))
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(ctx.server_version.as_deref(), Some(version.as_str()));
    let rows = rt
        .block_on(c.query(
            "SELECT name, setting || coalesce(' ' || unit, ''), source FROM pg_settings \
             WHERE source = 'configuration file' ORDER BY name",
            &[],
        ))
        .unwrap();
    assert!(
        rows.len() >= 5,
        "the testkit sets fsync and more in its file"
    );
    for row in rows {
        let (name, value, source): (String, String, String) = (
            row.get(0).unwrap(),
            row.get(1).unwrap(),
            row.get(2).unwrap(),
        );
        assert!(
            ctx.settings
                .iter()
                .any(|s| s.name == name && s.value == value && s.source == source),
            "{name} = {value} ({source}) is not in the context's settings"
        );
    }

    let inserted = int(&rt, &mut c, "SELECT count(*) FROM drawn");
    assert_eq!(inserted as u64, ok);
    assert_eq!(
        ctx.database_delta("tup_inserted"),
        Some(inserted as f64),
        "pg_stat_database.tup_inserted over the run against the {inserted} rows the run inserted"
    );
    let commits = ctx
        .database_delta("xact_commit")
        .expect("xact_commit before and after");
    assert!(
        commits >= ok as f64,
        "xact_commit rose {commits} over a run of {ok} autocommitted inserts"
    );
    let calls = |snap: &Option<bench::context::ServerSnapshot>| -> f64 {
        snap.as_ref()
            .and_then(|s| s.statements.as_ref())
            .expect("pg_stat_statements is installed")
            .iter()
            .filter(|s| {
                s["query"]
                    .as_str()
                    .is_some_and(|q| q.starts_with("INSERT INTO drawn"))
            })
            .map(|s| s["calls"].as_f64().unwrap())
            .sum()
    };
    assert_eq!(calls(&ctx.after) - calls(&ctx.before), ok as f64);
}

/// Promise (docs/bench.md, "Order Entry": the invariants hold "after a run with every type";
/// "How the runner treats a transaction": an `Err` is recorded under its code, never lost;
/// "The run's context": Order Entry's scale): Order Entry under contention.
///
/// Steps: scale 0.01 (10 warehouses, so orders, stock and pending orders collide), every
/// type on (the reporting queries too), 16 users for 3 s. Then: the invariants hold; each
/// type's failures by code add up to its `failed`, each code with its message; the
/// server's `pg_stat_database.deadlocks` rose by exactly the 40P01 failures recorded (read
/// once the users' backends have gone, which flushes their counters); the logons added lie
/// between the successes of the three types that log on and those plus their failures and
/// censored ones (a failed transaction may have committed its logon first); the context's
/// scale is 0.01.
#[test]
fn order_entry_with_sixteen_users_on_ten_warehouses_keeps_its_invariants_and_counts() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
    let mut c = rt.block_on(slipstream_pg::connect(&url)).unwrap();
    const DEADLOCKS: &str =
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()";
    const LOGONS: &str = "SELECT count(*) FROM soe.logon";
    let deadlocks0 = int(&rt, &mut c, DEADLOCKS);
    let logons0 = int(&rt, &mut c, LOGONS);
    let workload = every_type_equally();
    let r = rt
        .block_on(bench::run(
            &workload,
            &config(&url, 16, 3.0, 5),
            pending::<()>(),
        ))
        .unwrap();
    for t in &r.transactions {
        assert!(
            t.ok > 0,
            "{} never succeeded: {:?}",
            t.name,
            t.failure_messages
        );
        assert_eq!(t.failures.values().sum::<u64>(), t.failed, "{}", t.name);
        for code in t.failures.keys() {
            assert!(
                t.failure_messages.contains_key(code),
                "{}: {code} has no message",
                t.name
            );
        }
    }
    let broken = rt.block_on(order_entry::check(&mut c)).unwrap();
    assert!(broken.is_empty(), "invariants broken: {broken:?}");

    let recorded: u64 = r
        .transactions
        .iter()
        .map(|t| t.failures.get("40P01").copied().unwrap_or(0))
        .sum();
    // The users' backends flush their counters as they exit, just after the run.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut deadlocks = int(&rt, &mut c, DEADLOCKS) - deadlocks0;
    while (deadlocks as u64) < recorded && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        rt.block_on(c.batch_execute("SELECT pg_stat_clear_snapshot()"))
            .unwrap();
        deadlocks = int(&rt, &mut c, DEADLOCKS) - deadlocks0;
    }
    assert_eq!(
        deadlocks as u64, recorded,
        "deadlocks on the server against 40P01 failures recorded"
    );

    let logging = ["customer-registration", "order-products", "browse-orders"];
    let of = |f: fn(&bench::TxResult) -> u64| -> u64 {
        r.transactions
            .iter()
            .filter(|t| logging.contains(&t.name.as_str()))
            .map(f)
            .sum()
    };
    let (ok, at_most) = (of(|t| t.ok), of(|t| t.ok + t.failed + t.censored));
    let logons = (int(&rt, &mut c, LOGONS) - logons0) as u64;
    assert!(
        (ok..=at_most).contains(&logons),
        "{logons} logons added; the runs that log on: {ok} succeeded, {at_most} in all"
    );
    let ctx = r.context.as_ref().unwrap();
    assert_eq!(ctx.scale, Some(0.01), "{:?}", ctx.warnings);
}

/// Holds. Promise (`Sizes::for_scale`: scales "from 0.0001 to 1000"): the smallest scale
/// loads and runs. At 0.0001 there are 100 customers and 150 orders, so most customers
/// have no order and a name looked up is rarely found: each type must still succeed, fail
/// nothing, and leave the invariants whole.
///
/// Steps: setup at 0.0001, every type on at weight 1, 4 users for 1.5 s; then `order_entry::check`.
#[test]
fn order_entry_at_its_smallest_scale_runs_every_type_without_failures() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    let report = rt
        .block_on(order_entry::setup(&url, 0.0001, |_| {}))
        .unwrap();
    assert_eq!(report.sizes.customers, 100);
    let workload = every_type_equally();
    let r = rt
        .block_on(bench::run(
            &workload,
            &config(&url, 4, 1.5, 9),
            pending::<()>(),
        ))
        .unwrap();
    for t in &r.transactions {
        assert!(
            t.ok > 0 && t.failed == 0,
            "{}: {} ok, failures {:?}",
            t.name,
            t.ok,
            t.failure_messages
        );
    }
    let mut c = rt.block_on(slipstream_pg::connect(&url)).unwrap();
    let broken = rt.block_on(order_entry::check(&mut c)).unwrap();
    assert!(broken.is_empty(), "invariants broken: {broken:?}");
}

/// Promise (docs/bench.md, "The run's context"): with pg_stat_statements installed, the
/// context holds its top entries before and after the run. The extension may live in any
/// schema (`CREATE EXTENSION ... SCHEMA`), not only one on the `search_path`.
///
/// Steps: pg_stat_statements preloaded and created in a schema whose name needs quoting,
/// off the `search_path`; the context read before and after a statement.
///
/// Before the fix (session 44): the snapshot read `pg_stat_statements` unqualified, so the
/// context had no entries and a warning that it "could not be read (relation does not
/// exist); is it in shared_preload_libraries?", which sends the user after a setting that
/// was right.
#[test]
fn pg_stat_statements_in_a_schema_off_the_search_path_is_read() {
    let (cluster, rt, mut c) = preloading_pg_stat_statements();
    let url = cluster.url();
    rt.block_on(c.batch_execute(
        "CREATE SCHEMA \"Stats Ext\"; CREATE EXTENSION pg_stat_statements SCHEMA \"Stats Ext\"",
    ))
    .unwrap();
    let ctx = rt.block_on(async {
        let capture = bench::context::before(&url, "kv").await;
        // Slow enough to rank among the top entries by total time, above the context's own
        // quick statements (a bare `SELECT 12345` ranked below ten of them).
        c.batch_execute("SELECT 12345, pg_sleep(0.05)")
            .await
            .unwrap();
        capture.after().await
    });
    assert!(ctx.warnings.is_empty(), "{:?}", ctx.warnings);
    let entries = |snap: &Option<bench::context::ServerSnapshot>| {
        snap.as_ref()
            .and_then(|s| s.statements.clone())
            .expect("pg_stat_statements is installed and preloaded")
    };
    assert!(!entries(&ctx.before).is_empty());
    assert!(
        entries(&ctx.after)
            .iter()
            .any(|s| s["query"].as_str() == Some("SELECT $1, pg_sleep($2)")),
        "{:?}",
        entries(&ctx.after)
    );
}

/// Promise (README: "commands run at once on one home share one server"; docs/bench.md:
/// "`--setup` drops and recreates" the `soe` schema): two Order Entry loads started together
/// on one database (two load generators each running `--setup`, or two terminals) leave one
/// whole load, not two half ones in the same tables.
///
/// Steps: `order_entry::setup` twice at once on one cluster, scale 0.001; both must succeed,
/// and the schema must then hold one load's rows with its invariants whole.
///
/// Before the fix: here the second failed at once, "creating the soe schema failed: error
/// 23505: duplicate key value violates unique constraint \"pg_namespace_nspname_index\"";
/// two `slipstream bench order-entry --setup` processes both created the schema and copied
/// into the same tables, then both failed on the first primary key ("could not create unique
/// index \"customers_pkey\" ... Key (customer_id)=(2501) is duplicated"), each saying to run
/// `--setup` again, with nothing naming the other load as the cause.
#[test]
fn two_order_entry_loads_at_once_leave_one_whole_load() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    let (first, second) = rt.block_on(async {
        tokio::join!(
            order_entry::setup(&url, 0.001, |_| {}),
            order_entry::setup(&url, 0.001, |_| {}),
        )
    });
    let first = first.expect("the first load failed");
    let second = second.expect("the second load failed");
    assert_eq!(first.rows, second.rows);
    let mut c = rt.block_on(slipstream_pg::connect(&url)).unwrap();
    let customers: i64 = rt
        .block_on(c.query_one("SELECT count(*) FROM soe.customers", &[]))
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(customers as u64, first.rows["customers"]);
    let metas: i64 = rt
        .block_on(c.query_one("SELECT count(*) FROM soe.meta", &[]))
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(metas, 1, "soe.meta holds {metas} rows");
    let broken = rt.block_on(order_entry::check(&mut c)).unwrap();
    assert!(broken.is_empty(), "invariants broken: {broken:?}");
}
