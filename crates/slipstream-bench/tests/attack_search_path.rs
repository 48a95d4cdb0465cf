//! Attacks on the SQL the bench sends itself (the run context's reads, Order Entry's
//! statements) by a role with nothing more than CREATE on a schema of the default search_path
//! (`"$user", public`: PostgreSQL 14 and older grant it on `public` to everyone, and a
//! database owner has it anyway). `pg_catalog` is searched first, but a function in `public`
//! whose argument types match a call better than the built-in's still wins it: a
//! `public.nextval(text)` beats `pg_catalog.nextval(regclass)` for a string literal, a
//! `public.row_to_json(pg_stat_database)` beats `row_to_json(record)`, a `public.quote_ident(name)`
//! beats `quote_ident(text)` for a `name` column (the CVE-2018-1058 pattern). Such a function
//! runs with the rights of the bench's role, often a superuser, and answers what it likes.

mod common;

use std::future::pending;
use std::time::Duration;

use common::{rt, run_against};
use slipstream_bench::{self as bench, RunConfig, Workload, order_entry};
use slipstream_testkit::Cluster;

/// Runs `sql` on `cluster`'s `postgres` database as the superuser; `SET ROLE mallory` inside
/// it makes what follows mallory's.
fn psql(cluster: &Cluster, sql: &str) -> String {
    cluster.psql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Mallory: a login role with CREATE on `public` and nothing else, and a table anyone may
/// write, where her planted functions note each call and the role that made it.
const MALLORY: &str = "CREATE ROLE mallory LOGIN; \
    GRANT CREATE ON SCHEMA public TO mallory; \
    SET ROLE mallory; \
    CREATE TABLE public.mallory_calls (what text, caller text); \
    GRANT INSERT ON public.mallory_calls TO PUBLIC; \
    RESET ROLE;";

/// Promise (docs/bench.md, "The run's context"): the context records the server's own
/// non-default settings, this database's `pg_stat_database` row and the top
/// `pg_stat_statements` entries, as the server reports them.
///
/// Steps: mallory plants, in `public`, `row_to_json(pg_catalog.pg_stat_database)`,
/// `json_build_object(text, text, text, text, text, text)` and `(text, ..., text, integer)`
/// (the settings and the wait-event queries' argument types), `quote_ident(name)` answering `public`, and a view `public.pg_stat_statements` of
/// made-up statements; the real `pg_stat_statements` is created in a schema `stats` (not
/// preloaded, so it cannot be read). A one-user run of `SELECT 1` captures the
/// context as `slipstream bench` does.
///
/// Before the fix: the settings read `[planted]`, the wait events `planted` (1000 a sample), the
/// database row `{"xact_commit": -1}`,
/// and the statements mallory's `public.pg_stat_statements`, each function called as the
/// bench's role (`postgres`, a superuser); `quote_ident`'s answer was also spliced into the
/// statements query as SQL.
#[test]
fn functions_planted_in_public_cannot_write_the_run_context() {
    let cluster = Cluster::start().unwrap();
    psql(&cluster, MALLORY);
    psql(
        &cluster,
        "CREATE SCHEMA stats; CREATE EXTENSION pg_stat_statements SCHEMA stats; \
         SET ROLE mallory; \
         CREATE FUNCTION public.row_to_json(pg_catalog.pg_stat_database) RETURNS json \
           LANGUAGE sql AS $$ INSERT INTO public.mallory_calls SELECT 'row_to_json', current_user; \
           SELECT '{\"xact_commit\": -1}'::json $$; \
         CREATE FUNCTION public.json_build_object(text, text, text, text, text, text) RETURNS json \
           LANGUAGE sql AS $$ INSERT INTO public.mallory_calls SELECT 'json_build_object', current_user; \
           SELECT '{\"name\": \"planted\", \"value\": \"1\", \"source\": \"planted\"}'::json $$; \
         CREATE FUNCTION public.json_build_object(text, text, text, text, text, text, text, integer) \
           RETURNS json LANGUAGE sql AS $$ INSERT INTO public.mallory_calls SELECT 'json_build_object/8', current_user; \
           SELECT '{\"state\": \"planted\", \"wait_event_type\": \"planted\", \"wait_event\": \"planted\", \"count\": 1000}'::json $$; \
         CREATE FUNCTION public.quote_ident(name) RETURNS text \
           LANGUAGE sql AS $$ INSERT INTO public.mallory_calls SELECT 'quote_ident', current_user; \
           SELECT 'public'::text $$; \
         CREATE VIEW public.pg_stat_statements AS SELECT 1::bigint AS queryid, \
           'planted'::text AS query, 1::bigint AS calls, 1e9::float8 AS total_exec_time, \
           1e9::float8 AS mean_exec_time, 1::bigint AS rows, 0::bigint AS shared_blks_hit, \
           0::bigint AS shared_blks_read, oid AS dbid FROM pg_catalog.pg_database; \
         GRANT SELECT ON public.pg_stat_statements TO PUBLIC; \
         RESET ROLE;",
    );
    let run = run_against(&cluster.url(), 1);
    let ctx = run.context.as_ref().unwrap();
    let calls = psql(
        &cluster,
        "SELECT string_agg(DISTINCT what || ' as ' || caller, ', ') FROM public.mallory_calls",
    );
    assert_eq!(calls.trim(), "", "the context called mallory's functions");
    assert!(
        ctx.settings.iter().all(|s| s.source != "planted"),
        "settings: {:?}",
        ctx.settings
    );
    assert!(
        ctx.settings.iter().any(|s| s.name == "port"),
        "the cluster's own settings are missing: {:?}",
        ctx.settings
    );
    assert!(ctx.wait_samples > 0, "no wait-event sample was taken");
    assert!(
        ctx.wait_events.iter().all(|w| w.state != "planted"),
        "wait events: {:?}",
        ctx.wait_events
    );
    for snap in [&ctx.before, &ctx.after] {
        let snap = snap.as_ref().unwrap();
        let commits = snap.database.as_ref().unwrap()["xact_commit"].as_i64();
        assert!(
            commits.is_some_and(|n| n > 0),
            "database row: {:?}",
            snap.database
        );
        // The real pg_stat_statements is not preloaded: not readable, never mallory's.
        assert!(
            snap.statements.is_none(),
            "statements: {:?}",
            snap.statements
        );
    }
}

/// Promise (docs/bench.md, Order Entry): the workload runs Swingbench's statements on the
/// `soe` schema and nothing else.
///
/// Steps: Order Entry loaded at scale 0.01; mallory plants `public.nextval(text)`, which notes
/// the call and its caller and then does what `nextval` does; one user runs customer
/// registration (three `nextval`s and a logon's each time) for a second.
///
/// Before the fix: every `nextval('soe.…')` (a string literal, so `text` beat `regclass`)
/// called mallory's function as `postgres`, a superuser: her code ran with the bench's rights
/// in every measured transaction.
#[test]
fn a_nextval_planted_in_public_is_not_called_by_order_entry() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
    psql(&cluster, MALLORY);
    psql(
        &cluster,
        "SET ROLE mallory; \
         CREATE FUNCTION public.nextval(text) RETURNS bigint \
           LANGUAGE sql AS $$ INSERT INTO public.mallory_calls SELECT 'nextval', current_user; \
           SELECT pg_catalog.nextval($1::pg_catalog.regclass) $$; \
         RESET ROLE;",
    );
    let mut w: Workload = order_entry::workload();
    for (name, _) in w.weights() {
        w.set_weight(&name, u32::from(name == "customer-registration"))
            .unwrap();
    }
    let mut c = RunConfig::new(Some(url.clone()));
    (c.users, c.seed) = (1, 7);
    c.duration = Duration::from_secs(1);
    c.warmup = Duration::ZERO;
    c.progress = bench::Style::Quiet;
    let run = rt.block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    let t = run
        .transactions
        .iter()
        .find(|t| t.name == "customer-registration")
        .unwrap();
    assert!(
        t.ok > 0 && t.failed == 0,
        "ok {} failed {}: {:?}",
        t.ok,
        t.failed,
        t.failures
    );
    let calls = psql(
        &cluster,
        "SELECT count(*) || ' calls as ' || coalesce(string_agg(DISTINCT caller, ','), 'nobody') \
         FROM public.mallory_calls",
    );
    assert_eq!(
        calls.trim(),
        "0 calls as nobody",
        "Order Entry called mallory's nextval"
    );
}

/// Promise (docs/bench.md, Order Entry's invariants): `order_entry::check` reports each
/// violation found, and none on a consistent schema.
///
/// Steps: Order Entry loaded at scale 0.01 (consistent: `check` finds nothing); mallory plants
/// `public.*(numeric, integer)`, an exact match for `unit_price * quantity` where the built-in
/// `*(numeric, numeric)` needs a cast, answering 0; `check` runs on a superuser's connection
/// with the default search_path.
///
/// Before the fix: `check` said every order's total was not the sum of its lines (mallory's
/// operator summed them to 0), on a schema that holds every invariant; an operator answering
/// the order's total would as well have hidden real violations.
#[test]
fn an_operator_planted_in_public_cannot_decide_order_entrys_invariants() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
    psql(&cluster, MALLORY);
    psql(
        &cluster,
        "SET ROLE mallory; \
         CREATE FUNCTION public.times(numeric, integer) RETURNS numeric \
           LANGUAGE sql AS $$ INSERT INTO public.mallory_calls SELECT 'times', current_user; \
           SELECT 0::numeric $$; \
         CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.times); \
         RESET ROLE;",
    );
    let broken = rt
        .block_on(async {
            let mut client = slipstream_pg::connect(&url).await?;
            order_entry::check(&mut client).await
        })
        .unwrap();
    assert!(broken.is_empty(), "{broken:?}");
    let calls = psql(&cluster, "SELECT count(*) FROM public.mallory_calls");
    assert_eq!(calls.trim(), "0", "check called mallory's operator");
}

/// Reads `items` unqualified, and fails unless the session's search_path is the database's
/// `app, public` (naming the path it had: the cast of it to an integer fails; a constant such
/// as `1 / 0` would fail at plan time, whatever the path).
struct ReadsItsOwnPath;

impl bench::Transaction for ReadsItsOwnPath {
    async fn execute(&mut self, s: &mut bench::Session) -> Result<(), bench::TxError> {
        s.client()?
            .simple_query(
                "SELECT CASE WHEN current_setting('search_path') = 'app, public' THEN n \
                 ELSE current_setting('search_path')::int END FROM items",
            )
            .await?;
        Ok(())
    }
}

/// Promise (docs/bench.md, Order Entry's search path): only Order Entry's own sessions pin
/// `search_path`; the run context names its objects by schema instead, so a custom
/// workload's sessions keep the search_path the database (or role) gives them, and its
/// unqualified names resolve as the application's would.
///
/// Steps: Order Entry loaded (its loaders pin their own sessions); a table `app.items` and
/// `ALTER DATABASE postgres SET search_path = app, public`; a one-user run, context captured
/// as `slipstream bench` captures it, of a custom transaction that reads `items` unqualified
/// and fails unless its session's search_path is `app, public`.
///
/// Held: every transaction succeeded (on b0d9517's code and after).
#[test]
fn a_custom_workloads_sessions_keep_their_search_path() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
    psql(
        &cluster,
        "CREATE SCHEMA app; CREATE TABLE app.items AS SELECT 42 AS n; \
         ALTER DATABASE postgres SET search_path = app, public;",
    );
    let w = Workload::new("mine").transaction("read-items", 1, || ReadsItsOwnPath);
    let mut c = common::config(Some(url), 1, 3, Duration::from_millis(300));
    c.progress = bench::Style::Quiet;
    let run = rt.block_on(bench::run(&w, &c, pending::<()>())).unwrap();
    let t = &run.transactions[0];
    assert!(
        t.ok > 0 && t.failed == 0,
        "ok {} failed {}: {:?}",
        t.ok,
        t.failed,
        t.failure_messages
    );
    assert!(run.context.is_some(), "the run's context was captured");
}

/// Promise (docs/bench.md, Order Entry's search path): only Order Entry's own sessions pin
/// `search_path = pg_catalog, pg_temp`; a transaction of the user's is not run on a pinned
/// session, where its unqualified names would resolve elsewhere than the application's do.
///
/// Steps: Order Entry loaded; `app.items` and `ALTER DATABASE postgres SET search_path =
/// app, public`; the user's transaction (reads `items` unqualified, checks its path) added to
/// `order_entry::workload()` beside browse-products, each at weight 1; a one-user run.
///
/// Before the fix: the run went, its users' sessions shared by both types and pinned by
/// Order Entry's `init`, and the user's transaction failed every time (65 of 65, 42P01
/// relation "items" does not exist) beside browse-products' successes. Now the run is
/// refused before it starts, naming the type and what to do.
#[test]
fn a_transaction_added_to_order_entry_is_not_run_on_its_pinned_sessions() {
    let cluster = Cluster::start().unwrap();
    let url = cluster.url();
    let rt = rt();
    rt.block_on(order_entry::setup(&url, 0.01, |_| {})).unwrap();
    psql(
        &cluster,
        "CREATE SCHEMA app; CREATE TABLE app.items AS SELECT 42 AS n; \
         ALTER DATABASE postgres SET search_path = app, public;",
    );
    let mut w = order_entry::workload().transaction("read-items", 1, || ReadsItsOwnPath);
    for (name, _) in w.weights() {
        w.set_weight(
            &name,
            u32::from(name == "read-items" || name == "browse-products"),
        )
        .unwrap();
    }
    let mut c = common::config(Some(url), 1, 3, Duration::from_millis(300));
    c.progress = bench::Style::Quiet;
    let outcome = rt.block_on(bench::run(&w, &c, pending::<()>()));
    let run = match outcome {
        Err(e) => {
            let e = format!("{e:#}");
            assert!(
                e.contains("read-items") && e.contains("search_path"),
                "the refusal names the type and why: {e}"
            );
            return;
        }
        Ok(run) => run,
    };
    let said: Vec<String> = run
        .transactions
        .iter()
        .filter(|t| t.ok + t.failed > 0)
        .map(|t| {
            format!(
                "{} ok {} failed {} {:?}",
                t.name, t.ok, t.failed, t.failure_messages
            )
        })
        .collect();
    panic!("the run went on Order Entry's pinned sessions: {said:?}");
}
