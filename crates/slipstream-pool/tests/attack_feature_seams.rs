//! Attacks (helper h83) on the seams between the pool and slipstream-pg's other features: what
//! a borrower leaves half done in a pipeline block reaches no next borrower (docs/pool.md,
//! docs/pipelining.md).

mod common;

use std::time::Duration;

use slipstream_pg::{PipelineMode, PipelineOptions};
use slipstream_pool::{PgManager, Pool, Reset};
use slipstream_testkit::Cluster;

fn pool(cluster: &Cluster, reset: Reset) -> Pool<PgManager> {
    let config = cluster.url().parse().expect("the testkit's URL parses");
    Pool::builder(PgManager::new(config).reset_on_return(reset))
        .max_size(1)
        .borrow_timeout(Duration::from_secs(30))
        .build()
}

/// Promise (pool.md: a borrower never inherits what a cancelled call left behind, and none of
/// its writes vanish into one; pipelining.md, "Dropping a pipeline": an abandoned abort-mode
/// block is all-or-nothing, never committed by a later request; `Client::is_reusable`: true
/// only if the connection "can serve another user as it is"). Leaking a pipeline block
/// (`std::mem::forget`, a cycle of `Rc`s) is safe Rust, as a leaked row stream is, which the
/// client already handles (`a_leaked_row_stream_does_not_hang_the_next_call`).
///
/// Steps: a one-connection pool, under each reset mode. Borrower A queues `INSERT INTO
/// leak VALUES (1)` and `SELECT 42` in an abort-mode block, leaks the block (small: still in
/// the write buffer), and returns the connection; borrower B runs `SELECT 1`. Then the same
/// with a block of 300 operations, of which the window sent part to the server before the
/// leak. B must read exactly its own row, every time, and A's abandoned writes never commit.
///
/// Before the fix: the block's open sync group had no reply owed on the connection, so it
/// counted as settled, reusable and outside a transaction; no reset ran, and B's `SELECT 1`
/// sent A's queued messages ahead of its own and returned `[42, 1]`, A's row first, while A's
/// `INSERT` committed with B's `Sync`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_pipeline_block_reaches_no_next_borrower() {
    let cluster = Cluster::start().unwrap();
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        let pool = pool(&cluster, reset);
        {
            let mut setup = pool.get().await.unwrap();
            setup
                .batch_execute("DROP TABLE IF EXISTS leak; CREATE TABLE leak (n int)")
                .await
                .unwrap();
        }
        for ops in [2usize, 300] {
            {
                let mut a = pool.get().await.unwrap();
                let mut p =
                    a.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
                p.execute("INSERT INTO leak VALUES (1)", &[]).await.unwrap();
                for _ in 1..ops {
                    p.query("SELECT 42", &[]).await.unwrap();
                }
                std::mem::forget(p);
            }
            common::until(
                Duration::from_secs(10),
                "the connection back",
                || pool.stats(),
                |s| s.borrowed == 0,
            )
            .await;
            let mut b = pool.get().await.unwrap();
            let mine: Vec<i32> =
                tokio::time::timeout(Duration::from_secs(10), b.query("SELECT 1", &[]))
                    .await
                    .expect("B's query answers within 10 s")
                    .unwrap_or_else(|e| {
                        panic!("{reset:?}, {ops} operations: B's query failed: {e}")
                    })
                    .iter()
                    .map(|r| r.get(0).unwrap())
                    .collect();
            assert_eq!(
                mine,
                [1],
                "{reset:?}, {ops} operations: B read another borrower's rows"
            );
            let committed: i64 = b
                .query_one("SELECT count(*) FROM leak", &[])
                .await
                .unwrap()
                .get(0)
                .unwrap();
            assert_eq!(
                committed, 0,
                "{reset:?}, {ops} operations: A's abandoned INSERT committed"
            );
        }
    }
}

/// Promise (pool.md: a returned connection with replies owed is settled, its statement
/// cancelled, within 5 s, and a borrower inherits nothing of it). Held under each reset mode
/// (a regression test): borrower A starts `COPY cp FROM STDIN`, writes a row and leaks the
/// `CopyIn` (`std::mem::forget`); borrower B's `SELECT 1` answers within 10 s with its own
/// row, and nothing was loaded. The pool's reset cancels the COPY, which bounded it before
/// slipstream-pg aborted a leaked `CopyIn` by itself; a plain client's next call waited for
/// ever (`a_leaked_copy_in_does_not_hang_the_next_call` in slipstream-pg).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_copy_in_reaches_no_next_borrower() {
    let cluster = Cluster::start().unwrap();
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        let pool = pool(&cluster, reset);
        {
            let mut setup = pool.get().await.unwrap();
            setup
                .batch_execute("DROP TABLE IF EXISTS cp; CREATE TABLE cp (n int)")
                .await
                .unwrap();
        }
        {
            let mut a = pool.get().await.unwrap();
            let mut copy = a.copy_in("COPY cp FROM STDIN").await.unwrap();
            copy.write(b"1\n").await.unwrap();
            std::mem::forget(copy);
        }
        let mut b = tokio::time::timeout(Duration::from_secs(10), pool.get())
            .await
            .expect("B borrows within 10 s")
            .unwrap();
        let row = tokio::time::timeout(Duration::from_secs(10), b.query_one("SELECT 1", &[]))
            .await
            .expect("B's query answers within 10 s")
            .unwrap();
        assert_eq!(row.get::<_, i32>(0).unwrap(), 1, "{reset:?}");
        let loaded: i64 = b
            .query_one("SELECT count(*) FROM cp", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(loaded, 0, "{reset:?}: a leaked COPY loaded its row");
    }
}

/// Promise (pool.md: a `CancelToken` taken from a borrowed connection names the server
/// session, not the borrow; kept past the return, it cancels the next borrower's statement:
/// "Drop it with the borrow"). The same holds for an `AbortHandle` a borrower takes
/// (`Client::abort_handle`), which pool.md did not say: held here as documented now.
///
/// Steps: a one-connection pool; borrower A takes an abort handle and returns the connection;
/// borrower B borrows it; A aborts. B's next call fails as closed, and the pool, seeing the
/// connection come back broken, lends C a working new one. An abort never reaches a socket
/// other than the session's (the handle holds a duplicate of its descriptor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_handle_kept_past_the_borrow_ends_the_next_borrowers_session() {
    let cluster = Cluster::start().unwrap();
    let pool = pool(&cluster, Reset::Rollback);
    let handle = {
        let a = pool.get().await.unwrap();
        a.abort_handle().unwrap()
    };
    common::until(
        Duration::from_secs(10),
        "the connection back",
        || pool.stats(),
        |s| s.borrowed == 0,
    )
    .await;
    let mut b = pool.get().await.unwrap();
    let pid = b.backend_pid();
    handle.abort("kept past its borrow").await;
    let e = b.batch_execute("SELECT 1").await.unwrap_err();
    assert!(e.is_closed(), "{e}");
    drop(b);
    let mut c = tokio::time::timeout(Duration::from_secs(10), pool.get())
        .await
        .expect("C borrows within 10 s")
        .unwrap();
    c.batch_execute("SELECT 1").await.unwrap();
    assert_ne!(c.backend_pid(), pid, "the aborted session was lent again");
}

/// Promise (pool.md, "Several servers: PgPool"): the monitor learns each server's role from
/// the server, and a `Role::Primary` borrow is served while the primary is up. The monitor's
/// role probe asks over an idle connection of the sub-pool, one a borrower has used; the
/// default reset (`Reset::Rollback`) keeps what the borrower set outside a transaction, its
/// `search_path` included.
///
/// Steps: a `PgPool` of one primary, one connection. A borrower plants
/// `evil.pg_is_in_recovery()` (answering true), sets `search_path = evil, pg_catalog` and
/// returns the connection. A `Role::Standby` borrow finds no standby, which has the monitor
/// probe the roles over the idle connection (as a failover does); then a `Role::Primary`
/// borrow.
///
/// Before the fix: the probe's unqualified `SELECT pg_is_in_recovery()` ran the planted
/// function, the primary was taken for a standby, and every `Role::Primary` borrow failed with
/// `NoServer` for as long as the connection kept that setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowers_search_path_cannot_make_the_monitor_take_a_primary_for_a_standby() {
    use slipstream_pool::{PgPool, Role, ServerRole};
    let primary = Cluster::start().unwrap();
    let pool = PgPool::builder(common::hosts(&[primary.port()], "").parse().unwrap())
        .max_size(1)
        .build_ready()
        .await
        .unwrap();
    {
        let mut conn = pool.get(Role::Primary).await.unwrap();
        conn.batch_execute(
            "CREATE SCHEMA evil;
             CREATE SEQUENCE evil.calls;
             CREATE FUNCTION evil.pg_is_in_recovery() RETURNS bool LANGUAGE sql
                 AS $$ SELECT nextval('evil.calls') > 0 $$;
             SET search_path = evil, pg_catalog",
        )
        .await
        .unwrap();
    }
    // A borrow that finds no server of its role has the monitor probe the roles at once, over
    // the idle connection: the one returned above.
    let none = tokio::time::timeout(Duration::from_secs(10), pool.get(Role::Standby)).await;
    assert!(matches!(none, Ok(Err(_))), "no standby to lend");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        pool.servers()[0].role,
        ServerRole::Primary,
        "{:?}",
        pool.servers()
    );
    let got = tokio::time::timeout(Duration::from_secs(10), pool.get(Role::Primary)).await;
    assert!(
        matches!(got, Ok(Ok(_))),
        "a Role::Primary borrow of an up primary: {:?}",
        got.map(|r| r.map(|_| ()))
    );
}

/// Promise (docs/pool.md): a borrow gets a working connection; one the server ended while it
/// sat idle in the pool is replaced, never lent. A role's `idle_session_timeout`
/// (`ALTER ROLE ... SET`, here `options=-c idle_session_timeout=200ms`, PostgreSQL 14+) ends
/// every connection that waits in the pool longer than that, which pooled connections do by
/// design.
///
/// Steps: a one-connection pool through that connection string, under each reset mode; a
/// borrow runs `SELECT 1` and returns, the pool rests 600 ms, and the next borrow's `SELECT 1`
/// must answer 1, three times over, each within 10 s.
///
/// Held: the client sees the server's FATAL and the closed socket while the connection is
/// idle, and the pool replaces it before lending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_ended_while_idle_in_the_pool_is_not_lent() {
    let cluster = Cluster::start().unwrap();
    let url = format!(
        "{}?options=-c%20idle_session_timeout%3D200ms",
        cluster.url()
    );
    for reset in [Reset::Rollback, Reset::Session, Reset::None] {
        let config = url.parse().expect("the URL parses");
        let pool = Pool::builder(PgManager::new(config).reset_on_return(reset))
            .max_size(1)
            .borrow_timeout(Duration::from_secs(10))
            .build();
        for round in 0..3 {
            let got = tokio::time::timeout(Duration::from_secs(10), async {
                let mut c = pool.get().await.map_err(|e| e.to_string())?;
                let row = c
                    .query_one("SELECT 1", &[])
                    .await
                    .map_err(|e| e.to_string())?;
                row.get::<_, i32>(0).map_err(|e| e.to_string())
            })
            .await
            .expect("the borrow and its query did not answer within 10 s");
            assert_eq!(got, Ok(1), "{reset:?}, round {round}");
            tokio::time::sleep(Duration::from_millis(600)).await;
        }
    }
}

/// The SQL `PgPool::get_labeled`'s example configures a tenant's connection with (users copy
/// it): read from the doc comment, so the test attacks what the documentation teaches.
fn documented_tenant_sql() -> String {
    let source = include_str!("../src/pg_pool.rs");
    let line = source
        .lines()
        .find(|l| l.contains("let sql = \"SELECT") && l.contains("search_path"))
        .expect("get_labeled's example sets search_path");
    let start = line.find('"').unwrap() + 1;
    let end = line.rfind('"').unwrap();
    line[start..end].to_string()
}

/// The labeling of `PgPool::get_labeled`'s example: a tenant's schema is its `search_path`.
struct Tenants(String);

impl slipstream_pool::Labeling<slipstream_pg::Client> for Tenants {
    fn cost(&self, wanted: &slipstream_pool::Labels, current: &slipstream_pool::Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(
        &self,
        wanted: &slipstream_pool::Labels,
        conn: &mut slipstream_pg::Client,
    ) -> bool {
        conn.execute(self.0.as_str(), &[&wanted["tenant"]])
            .await
            .is_ok()
    }
}

/// Promise (pool.md, "Labels"; `PgPool::get_labeled`'s example): a connection labeled for a
/// tenant runs with that tenant's `search_path`, whatever the tenant before it did.
///
/// Steps: a one-connection pool with the default reset (`Reset::Rollback`, which keeps a
/// borrower's `SET` made outside a transaction) and the example's labeling. Tenant `evil`
/// borrows, creates `evil.set_config(text, text, boolean)` that always sets `search_path` to
/// `evil`, sets `search_path = evil, pg_catalog` and returns the connection. Tenant `acme`
/// borrows it: the example's configure runs, then acme reads `t`.
///
/// Before the fix: the example's `SELECT set_config('search_path', quote_ident($1), false)`
/// called evil's `set_config`, and acme's borrower read (and would have written) `evil.t`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_tenant_labeling_cannot_be_steered_by_the_tenant_before() {
    let cluster = Cluster::start().unwrap();
    cluster
        .psql(
            "CREATE SCHEMA evil; CREATE TABLE evil.t (owner text); INSERT INTO evil.t VALUES ('evil');
             CREATE SCHEMA acme; CREATE TABLE acme.t (owner text); INSERT INTO acme.t VALUES ('acme');",
        )
        .unwrap();
    let pool = pool(&cluster, Reset::Rollback);
    let labeling = Tenants(documented_tenant_sql());
    let tenant = |t: &str| slipstream_pool::Labels::from([("tenant".to_string(), t.to_string())]);
    {
        let mut evil = pool.get_labeled(&tenant("evil"), &labeling).await.unwrap();
        evil.batch_execute(
            "CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql
                 AS $$ SELECT pg_catalog.set_config('search_path', 'evil', false) $$;
             SET search_path = evil, pg_catalog",
        )
        .await
        .unwrap();
    }
    let mut acme = pool.get_labeled(&tenant("acme"), &labeling).await.unwrap();
    let owner: String = acme
        .query_one("SELECT owner FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(owner, "acme", "acme's borrower read another tenant's table");
}
