//! The workload runner against real clusters: Order Entry's transactions and invariants, the
//! mix, failures by SQLSTATE, reconnecting, and open-loop latency under a server stall.

mod common;

use std::future::pending;
use std::time::Duration;

use common::rt;
use slipstream_bench::{
    self as bench, BenchRun, RunConfig, Session, Transaction, TxError, Workload, order_entry,
};
use slipstream_testkit::{Cluster, DelayProxy};

fn config(url: &str, users: usize, secs: f64) -> RunConfig {
    let mut c = RunConfig::new(Some(url.into()));
    c.users = users;
    c.duration = Duration::from_secs_f64(secs);
    c.seed = 42;
    c
}

fn run(workload: &Workload, config: &RunConfig) -> BenchRun {
    rt().block_on(bench::run(workload, config, pending::<()>()))
        .unwrap()
}

#[test]
fn order_entry_transactions_run_and_keep_the_invariants() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    let report = rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
    assert_eq!(report.rows["customers"], 10_000);
    assert_eq!(report.rows["orders"], 15_000);
    let mut client = rt.block_on(slipstream_pg::connect(&url)).unwrap();
    let broken = rt.block_on(order_entry::check(&mut client)).unwrap();
    assert!(broken.is_empty(), "after the load: {broken:?}");
    let mut count = |sql: &str| -> i64 {
        rt.block_on(client.query_one(sql, &[]))
            .unwrap()
            .get(0)
            .unwrap()
    };
    let customers0 = count("SELECT count(*) FROM soe.customers");
    let orders0 = count("SELECT count(*) FROM soe.orders");

    // Every type on, the reporting queries too, so each runs many times.
    let mut w = order_entry::workload();
    for q in order_entry::REPORTING {
        w.set_weight(q, 10).unwrap();
    }
    w.set_weight("process-orders", 20).unwrap();
    let r = run(&w, &config(&url, 4, 3.0));
    for t in &r.transactions {
        assert!(t.ok >= 5, "{} ran {} times", t.name, t.ok);
        assert_eq!(t.failed, 0, "{}: {:?}", t.name, t.failures);
        assert!(
            t.statements.total() >= t.ok,
            "{}: {:?}",
            t.name,
            t.statements
        );
    }
    let by = |name: &str| r.transactions.iter().find(|t| t.name == name).unwrap();
    // Each registration inserts a customer, address, card and logon; the logon commits on
    // its own (Swingbench's NewCustomerProcess).
    let reg = by("customer-registration");
    assert_eq!(reg.statements.inserts, 4 * reg.ok);
    assert_eq!(reg.statements.commits, 2 * reg.ok);
    assert_eq!(
        count("SELECT count(*) FROM soe.customers"),
        customers0 + reg.ok as i64
    );
    // Every order-products commits its logon; the orders that found stock commit again.
    let orders = by("order-products");
    assert!(orders.statements.commits > orders.ok);
    assert_eq!(
        count("SELECT count(*) FROM soe.orders"),
        orders0 + (orders.statements.commits - orders.ok) as i64
    );
    // Processing moved pending orders on (status 0-4 to 5-9; the load has none at 5-9).
    assert!(count("SELECT count(*) FROM soe.orders WHERE order_status BETWEEN 5 AND 9") > 0);
    let broken = rt.block_on(order_entry::check(&mut client)).unwrap();
    assert!(broken.is_empty(), "after the run: {broken:?}");
}

#[test]
fn the_mix_follows_the_weights() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    rt().block_on(order_entry::setup(&url, 0.01, |_| {}))
        .unwrap();
    let w = order_entry::workload();
    let r = run(&w, &config(&url, 4, 5.0));
    let n: u64 = r.transactions.iter().map(|t| t.ok + t.failed).sum();
    let total: u32 = w.weights().iter().map(|(_, w)| w).sum();
    // Enough for the test below to mean something (SOE's transactions are heavy: a loaded
    // machine runs a few hundred in 5 s), not a speed check.
    assert!(n >= 200, "only {n} transactions: too few to test the mix");
    for (t, (_, weight)) in r.transactions.iter().zip(w.weights()) {
        let p = f64::from(weight) / f64::from(total);
        let expected = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        let got = (t.ok + t.failed) as f64;
        // Five standard deviations: a false alarm about once in 3 million runs.
        assert!(
            (got - expected).abs() <= 5.0 * sd + 1e-9,
            "{}: {got} against {expected:.0} +- {sd:.1}",
            t.name
        );
    }
}

struct Sql(&'static str);

impl Transaction for Sql {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.client()?.simple_query(self.0).await?;
        s.count().selects += 1;
        Ok(())
    }
}

/// A proxy in front of `cluster` (no delay), and the URL through it.
fn proxied(cluster: &Cluster) -> (DelayProxy, String) {
    let target = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
    let proxy = DelayProxy::start(target, Duration::ZERO).unwrap();
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port()
    );
    (proxy, url)
}

#[test]
fn failures_are_counted_by_sqlstate_and_a_dropped_connection_is_replaced() {
    let cluster = Cluster::start().unwrap();
    let w = Workload::new("faults")
        .transaction("ok", 4, || Sql("SELECT 1"))
        .transaction("divide", 1, || Sql("SELECT 1/0"))
        .transaction("suicide", 1, || {
            Sql("SELECT pg_terminate_backend(pg_backend_pid())")
        });
    let r = run(&w, &config(&cluster.url(), 2, 1.0));
    let [ok, divide, suicide] = &r.transactions[..] else {
        panic!("{:?}", r.transactions)
    };
    assert!(ok.ok > 50 && ok.failed == 0, "{ok:?}");
    assert_eq!(divide.ok, 0);
    assert!(
        divide
            .failures
            .get("22012")
            .is_some_and(|&n| n == divide.failed && n > 0),
        "{divide:?}"
    );
    // Terminated backends fail with 57P01 (or as a closed connection); users reconnect and
    // go on, so later transactions of every type still run.
    assert!(suicide.failed > 5, "{suicide:?}");
    assert!(
        suicide
            .failures
            .keys()
            .all(|k| k == "57P01" || k.starts_with("client:")),
        "{:?}",
        suicide.failures
    );
}

#[test]
fn open_loop_latency_includes_a_server_stall_and_closed_loop_hides_it() {
    let cluster = Cluster::start().unwrap();
    let (proxy, url) = proxied(&cluster);
    let w = Workload::new("select-1").transaction("select-1", 1, || Sql("SELECT 1"));
    let stalled = |config: RunConfig| -> BenchRun {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(1500));
                proxy.set_stalled(true);
                std::thread::sleep(Duration::from_secs(1));
                proxy.set_stalled(false);
            });
            run(&w, &config)
        })
    };
    let mut open = config(&url, 4, 4.0);
    open.rate = Some(200.0);
    let open = stalled(open);
    let closed = stalled(config(&url, 4, 4.0));

    let o = &open.transactions[0];
    let c = &closed.transactions[0];
    // A quarter of the arrivals came during the stall and waited up to a second.
    assert!(
        o.latency_ms.p99 >= 500.0,
        "open loop p99 {:?}",
        o.latency_ms
    );
    let schedule = open.schedule.as_ref().unwrap();
    assert!(
        schedule.late as f64 >= 0.1 * schedule.arrivals as f64,
        "{schedule:?}"
    );
    // The closed-loop users sat out the stall: four slow samples among thousands.
    assert!(
        c.latency_ms.max >= 900.0,
        "the stall did not reach the closed loop: {:?}",
        c.latency_ms
    );
    assert!(
        c.latency_ms.p99 < 100.0,
        "closed loop p99 {:?}",
        c.latency_ms
    );
}

#[test]
fn the_example_workload_file_sets_up_and_runs_without_failures() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/key-value.toml");
    let mut file = bench::workload_file::load(&path).unwrap();
    let rt = rt();
    rt.block_on(async {
        let mut c = slipstream_pg::connect(&url).await.unwrap();
        c.batch_execute(file.setup.as_deref().unwrap())
            .await
            .unwrap();
    });
    file.workload.apply_mix("insert=5").unwrap();
    let r = run(&file.workload, &config(&url, 2, 1.0));
    for t in &r.transactions {
        assert!(t.ok > 0 && t.failed == 0, "{}: {:?}", t.name, t.failures);
    }
    // The write transaction is atomic: two statements and one commit each.
    let write = &r.transactions[1];
    assert_eq!(write.statements.updates, write.ok);
    assert_eq!(write.statements.commits, write.ok);
    // Every insert used a fresh id from the shared sequence.
    let insert = &r.transactions[2];
    let rows: i64 = rt.block_on(async {
        let mut c = slipstream_pg::connect(&url).await.unwrap();
        c.query_one("SELECT count(*) FROM kv WHERE k > 1000000", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap()
    });
    assert_eq!(rows as u64, insert.ok);
}

#[test]
fn order_entry_without_its_schema_says_how_to_load_it() {
    let cluster = Cluster::start().unwrap();
    let err = rt()
        .block_on(bench::run(
            &order_entry::workload(),
            &config(&cluster.url(), 1, 1.0),
            pending::<()>(),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("--setup"), "{err}");
}

/// A workload file's `intra_think` pauses between a transaction's statements, and a failed
/// atomic transaction counts the rollback the runner sends. Before (session 33's attacker),
/// the think time was recorded in the result and never applied (3,512 transactions a second
/// at 1 user where 50 ms would allow 20), and the rollbacks counted 0.
#[test]
fn a_files_intra_think_is_applied_and_its_rollbacks_counted() {
    let cluster = Cluster::start().unwrap();
    let file = bench::workload_file::parse(
        r#"
name = "steps"
intra_think = "40ms"
[[transaction]]
name = "thinks"
statements = ["SELECT 1", "SELECT 2"]
[[transaction]]
name = "fails"
statements = ["SELECT 1", "SELECT 1/0"]
"#,
        "steps.toml",
    )
    .unwrap();
    let mut c = config(&cluster.url(), 1, 1.0);
    c.warmup = Duration::ZERO;
    c.intra_think = file.intra_think.expect("the file's intra_think");
    let r = run(&file.workload, &c);
    let (thinks, fails) = (&r.transactions[0], &r.transactions[1]);
    let done = thinks.ok + thinks.failed + fails.ok + fails.failed;
    // Each transaction thinks 40 ms once: at most 25 in a second at 1 user.
    assert!((1..=30).contains(&done), "{done} transactions in 1 s");
    assert_eq!(fails.ok, 0);
    assert_eq!(
        fails.statements.rollbacks, fails.failed,
        "{:?}",
        fails.statements
    );
    // Not counted in the latency: the think is left out.
    assert!(thinks.latency_ms.p50 < 40.0, "{:?}", thinks.latency_ms);
}

fn warnings(r: &BenchRun) -> Vec<String> {
    r.context
        .as_ref()
        .map(|c| c.warnings.clone())
        .unwrap_or_default()
}

/// Backends still running the marked statement, other than the one asking.
fn sleepers(client: &mut slipstream_pg::Client, rt: &tokio::runtime::Runtime, mark: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%{mark}%' AND pid <> pg_backend_pid()"
    );
    rt.block_on(client.query_one(&sql, &[]))
        .unwrap()
        .get(0)
        .unwrap()
}

/// Polls for up to 10 s until no backend runs the marked statement; the count left.
fn sleepers_after_waiting(url: &str, mark: &str) -> i64 {
    let rt = rt();
    let mut client = rt.block_on(slipstream_pg::connect(url)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = sleepers(&mut client, &rt, mark);
        if n == 0 || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A transaction censored at the grace limit is cancelled on the server: the client lets it
/// go, but a backend notices a closed socket only when it next writes, so a 60 s statement ran
/// on for a minute after the run and loaded whatever ran next. Fails before the cancel
/// requests: both backends still sleep after 10 s.
#[test]
fn transactions_censored_at_the_grace_limit_are_cancelled_on_the_server() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let w = Workload::new("sleep").transaction("sleep", 1, || {
        Sql("SELECT pg_sleep(60) /* censored-at-grace */")
    });
    let mut c = config(&url, 2, 0.3);
    c.warmup = Duration::ZERO;
    c.grace = Duration::from_millis(200);
    let r = run(&w, &c);
    assert_eq!(r.unfinished, 2, "both users were cut off in their sleep");
    // The grace period as given: it read "the 0 s grace period" (session 34's attacker).
    let said = bench::report::describe(&r).join("\n");
    assert!(said.contains("after the 200ms grace period"), "{said}");
    let warnings = warnings(&r);
    assert!(
        !warnings.iter().any(|w| w.contains("cancel")),
        "{warnings:?}"
    );
    assert_eq!(
        sleepers_after_waiting(&url, "censored-at-grace"),
        0,
        "a censored statement still runs on the server"
    );
}

/// When the cancel requests do not reach the server, the result says so, with what to check,
/// rather than leaving statements running unannounced, and the run still ends (within the
/// cancels' 5 s limit).
#[test]
fn cancel_requests_that_fail_are_named_in_the_results_warnings() {
    let cluster = Cluster::start().unwrap();
    let (proxy, url) = proxied(&cluster);
    let w = Workload::new("sleep").transaction("sleep", 1, || {
        Sql("SELECT pg_sleep(60) /* cancel-unreachable */")
    });
    let mut c = config(&url, 1, 0.3);
    c.warmup = Duration::ZERO;
    c.grace = Duration::from_millis(300);
    let r = std::thread::scope(|scope| {
        let running = scope.spawn(|| run(&w, &c));
        // Once the statement runs, the proxy holds everything: the cancel request never
        // arrives. (Closing the proxy would cut the user's connection and fail the
        // transaction instead of censoring it.)
        let rt = rt();
        let mut client = rt.block_on(slipstream_pg::connect(&cluster.url())).unwrap();
        while sleepers(&mut client, &rt, "cancel-unreachable") == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        proxy.set_stalled(true);
        running.join().unwrap()
    });
    assert_eq!(r.unfinished, 1);
    let warnings = warnings(&r);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("1 of 1 were not confirmed within 5s")
                && w.contains("pg_stat_activity")),
        "{warnings:?}"
    );
    // The statement is left running; end it so the cluster stops at once.
    let rt = rt();
    let mut client = rt.block_on(slipstream_pg::connect(&cluster.url())).unwrap();
    rt.block_on(client.simple_query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%cancel-unreachable%' AND pid <> pg_backend_pid()",
    ))
    .unwrap();
}

/// A stopped Order Entry setup starts no further statement. A cancel request stops only the
/// statement running when it arrives: one that lands between two (an index built, the next
/// not begun) stops nothing, and the setup would go on to build the rest. Here the stop comes
/// before the first statement, the one moment a test can pin down; before the stop flag the
/// setup then loaded the whole schema.
#[test]
fn a_stopped_setup_starts_no_further_statement() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    let cancel = order_entry::SetupCancel::default();
    rt.block_on(cancel.cancel()).unwrap();
    let result = rt.block_on(order_entry::setup_with_cancel(&url, 0.01, |_| {}, &cancel));
    let Err(err) = result else {
        panic!("a stopped setup ran to its end")
    };
    assert!(err.to_string().contains("stopped"), "{err:#}");
    let schema = cluster
        .psql("SELECT to_regnamespace('soe') IS NULL")
        .unwrap();
    assert_eq!(schema.trim(), "t", "the stopped setup created the schema");
}

/// The server stops mid-run: the users' reconnects fail, and the failures that follow say
/// why. Before, the connect error was dropped and each failure read "this workload runs
/// without a database connection", which blamed the workload for a server that was gone.
#[test]
fn a_failed_reconnect_names_its_reason() {
    let mut cluster = Cluster::start().unwrap();
    let w = Workload::new("select-1").transaction("select-1", 1, || Sql("SELECT 1"));
    let mut c = config(&cluster.url(), 2, 2.0);
    c.grace = Duration::from_secs(1);
    let url = cluster.url();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            // Stopped once both users are connected and running, not at a fixed time: on a
            // loaded machine their connects took longer than the 700 ms this waited, and the
            // run failed at its start instead of losing its connections part-way.
            rt().block_on(until_sessions(&url, 2));
            std::thread::sleep(Duration::from_millis(300));
            cluster.stop().unwrap();
        });
        run(&w, &c)
    });
    let t = &r.transactions[0];
    assert!(t.ok > 0, "{t:?}");
    let said = t
        .failure_messages
        .get("client:no-connection")
        .unwrap_or_else(|| panic!("no failure for the lost connection: {t:?}"));
    assert!(said.starts_with("reconnect failed: "), "{said}");
    assert!(said.contains("connect"), "{said}");
    assert!(!said.contains("without a database"), "{said}");
}

/// Waits until `n` other client sessions are connected to the server at `url` (bounded: 60 s).
async fn until_sessions(url: &str, n: i64) {
    let mut client = slipstream_pg::connect(url).await.unwrap();
    for _ in 0..6000 {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0).unwrap() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} sessions never connected within 60 s");
}
