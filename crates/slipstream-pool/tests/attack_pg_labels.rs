//! Attacks on labels of `PgManager` connections against what the pool's reset does to the
//! session (helper h79).
//! docs/pool.md, "Labels": "Labels say how a connection is set up, so the pool drops them
//! when that may no longer be true: a reset that undoes a session's settings clears them";
//! `Pooled::set_labels` "labels a connection you set up yourself".

use std::time::Duration;

use slipstream_pool::{Labeling, Labels, PgManager, Pool, Reset};
use slipstream_testkit::Cluster;

/// A schema per tenant, each with a table `t` that names its schema.
fn tenants() -> Cluster {
    let cluster = Cluster::start().unwrap();
    cluster
        .psql(
            "CREATE SCHEMA a; CREATE SCHEMA b; \
             CREATE TABLE public.t AS SELECT 'public'::text AS s; \
             CREATE TABLE a.t AS SELECT 'a'::text AS s; \
             CREATE TABLE b.t AS SELECT 'b'::text AS s;",
        )
        .unwrap();
    cluster
}

fn schema(name: &str) -> Labels {
    Labels::from([("schema".to_string(), name.to_string())])
}

/// Labels are a `search_path`, as in `PgPool::get_labeled`'s example.
struct SearchPath;

impl Labeling<slipstream_pg::Client> for SearchPath {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        let sql = "SELECT set_config('search_path', quote_ident($1), false)";
        conn.execute(sql, &[&wanted["schema"]]).await.is_ok()
    }
}

/// Which schema's `t` the session reads.
async fn reads(conn: &mut slipstream_pg::Client) -> String {
    conn.query_one("SELECT s FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap()
}

/// Promise: a labeled borrow gets a session set up as its labels say, whatever the borrower
/// before did to it, under the default `Reset::Rollback` too.
///
/// Steps: a one-connection pool of `PgManager`; a labeled borrow for schema `a`; then a plain borrower
/// switches to schema `b` inside a transaction, labels the connection `b` and leaves
/// without committing (an early return, a `?` on the next statement's error): the pool's
/// reset rolls the transaction back, and with it the `SET`. A labeled borrow for `b` then
/// reads its schema's table.
///
/// Before the fix: the rollback reset kept the labels (`reset_keeps_labels` was true for
/// `Reset::Rollback`), so the borrow for `b` found a connection labeled `b` at cost 0, ran
/// no configure, and read tenant `a`'s table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_set_in_a_transaction_the_reset_rolls_back_are_dropped() {
    let cluster = tenants();
    let manager = PgManager::new(cluster.url().parse().unwrap()).reset_on_return(Reset::Rollback);
    let pool = Pool::builder(manager).max_size(1).build();
    let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
    assert_eq!(reads(&mut conn).await, "a");
    drop(conn);
    let mut conn = pool.get().await.unwrap();
    conn.batch_execute("BEGIN; SET search_path = b")
        .await
        .unwrap();
    assert_eq!(reads(&mut conn).await, "b");
    conn.set_labels(schema("b"));
    drop(conn);
    let mut conn = tokio::time::timeout(
        Duration::from_secs(15),
        pool.get_labeled(&schema("b"), &SearchPath),
    )
    .await
    .expect("the labeled borrow hung")
    .unwrap();
    assert_eq!(
        reads(&mut conn).await,
        "b",
        "a borrow labeled for schema b read another tenant's table (labels {:?})",
        conn.labels()
    );
}

/// Labeling that counts its configures, so a test can tell a connection found already set up
/// (cost 0, no configure) from one set up again.
struct CountingSearchPath(std::sync::atomic::AtomicUsize);

impl Labeling<slipstream_pg::Client> for CountingSearchPath {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        SearchPath.configure(wanted, conn).await
    }
}

/// Promise (docs/pool.md, "Labels": `set_labels` labels a connection you set up yourself,
/// for later labeled borrows to find; a `PgPool` has `get_labeled` as `Pool` does).
///
/// Steps: a one-server `PgPool` of one connection; a plain borrow sets `search_path` to `b`
/// itself, labels the connection and reads its labels back, then returns it; a labeled borrow
/// of `b` must get it without a configure and read `b.t`; a borrow marked `discard` must
/// not come back (the next borrow opens a new session).
///
/// Before the fix: `PgPooled` had no `labels`, `set_labels` or `discard`, so a `PgPool`
/// user could not label a connection set up by hand, nor drop one known to be unusable (this
/// file did not compile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_pool_connection_set_up_by_hand_can_be_labeled_and_discarded() {
    use slipstream_pool::{PgPool, Role};
    let cluster = tenants();
    let config = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        cluster.port()
    );
    let pool = PgPool::builder(config.parse().unwrap())
        .max_size(1)
        .build()
        .unwrap();
    let first_pid = {
        let mut conn = pool.get(Role::Any).await.unwrap();
        conn.batch_execute("SET search_path = b").await.unwrap();
        assert!(conn.labels().is_empty(), "a new connection has no labels");
        conn.set_labels(schema("b"));
        assert_eq!(*conn.labels(), schema("b"));
        conn.backend_pid()
    };
    let labeling = CountingSearchPath(Default::default());
    let mut conn = tokio::time::timeout(
        Duration::from_secs(20),
        pool.get_labeled(Role::Any, &schema("b"), &labeling),
    )
    .await
    .expect("the labeled borrow hung")
    .unwrap();
    assert_eq!(
        conn.backend_pid(),
        first_pid,
        "the labeled connection was lent"
    );
    assert_eq!(labeling.0.load(std::sync::atomic::Ordering::Relaxed), 0);
    let row = conn.query_one("SELECT s FROM t", &[]).await.unwrap();
    assert_eq!(row.get::<_, &str>(0).unwrap(), "b");
    conn.discard();
    let next = tokio::time::timeout(Duration::from_secs(20), pool.get(Role::Any))
        .await
        .expect("the borrow after a discard hung")
        .unwrap();
    assert_ne!(
        next.backend_pid(),
        first_pid,
        "a discarded connection came back"
    );
}
