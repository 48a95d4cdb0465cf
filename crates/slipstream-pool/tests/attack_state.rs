//! Attack tests (session 41) on session state crossing borrowers: what a connection's labels
//! say against what its session really is, after a session reset, an interrupted configure and
//! a reclaim; and a PgPool whose credentials change under its open sessions.

mod common;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use slipstream_pool::{Labeling, Labels, PgManager, PgPool, Pool, Reset, Role};
use slipstream_testkit::Cluster;

/// Three schemas, each with a table `t` whose one row names its schema.
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

fn pool(cluster: &Cluster, reset: Reset) -> Pool<PgManager> {
    let config = cluster.url().parse().expect("the testkit's URL parses");
    Pool::builder(PgManager::new(config).reset_on_return(reset))
        .max_size(1)
        .borrow_timeout(Duration::from_secs(10))
        .build()
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
        conn.batch_execute(&format!("SET search_path = {}", wanted["schema"]))
            .await
            .is_ok()
    }
}

/// Sets the `search_path`, then does more work that may not finish (the borrow is dropped
/// there) or fails by panicking.
struct SlowSearchPath {
    panic: bool,
}

impl Labeling<slipstream_pg::Client> for SlowSearchPath {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
        let set = format!("SET search_path = {}", wanted["schema"]);
        if conn.batch_execute(&set).await.is_err() {
            return false;
        }
        assert!(!self.panic, "configure panics, as the test asked");
        conn.batch_execute("SELECT pg_sleep(30)").await.is_ok()
    }
}

/// Which schema's `t` the connection reads.
async fn reads(conn: &mut slipstream_pg::Client) -> String {
    conn.query_one("SELECT s FROM t", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap()
}

// Reset::Session runs RESET ALL on every return, which undoes the `SET search_path` a
// labeling configured; the labels stayed, so the next borrow for the same labels got the
// connection at cost 0, not configured, and read another schema's table.
#[tokio::test]
async fn a_session_reset_does_not_keep_labels_it_undid() {
    let cluster = tenants();
    let pool = pool(&cluster, Reset::Session);
    {
        let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
        assert_eq!(reads(&mut conn).await, "a");
    }
    let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
    let labels = conn.labels();
    let read = reads(&mut conn).await;
    assert_eq!(
        read, "a",
        "a borrow labeled {labels:?} reads schema {read}: the session reset undid its setup"
    );
}

// A labeled borrow dropped inside `Labeling::configure` (a timeout, a `select!`, a PgPool
// borrow whose server went down) returned the connection half configured, still carrying its
// old labels: the next borrow for those labels got it at cost 0 and read the other tenant's
// table.
#[tokio::test]
async fn a_labeled_borrow_dropped_during_configure_leaves_no_mislabeled_connection() {
    let cluster = tenants();
    let pool = pool(&cluster, Reset::Rollback);
    {
        let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
        assert_eq!(reads(&mut conn).await, "a");
    }
    let slow = SlowSearchPath { panic: false };
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        pool.get_labeled(&schema("b"), &slow),
    )
    .await;
    assert!(dropped.is_err(), "expected the configure to be cut short");
    let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
    let labels = conn.labels();
    let read = reads(&mut conn).await;
    assert_eq!(
        read, "a",
        "a borrow labeled {labels:?} reads schema {read}: its configure for another label was \
         cut short and the old label kept"
    );
}

// The same through a panic in the caller's `configure`: the guard unwinds back to the pool.
#[tokio::test]
async fn a_labeled_borrow_whose_configure_panics_leaves_no_mislabeled_connection() {
    let cluster = tenants();
    let pool = pool(&cluster, Reset::Rollback);
    {
        let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
        assert_eq!(reads(&mut conn).await, "a");
    }
    let p = pool.clone();
    let panicked = tokio::spawn(async move {
        let slow = SlowSearchPath { panic: true };
        p.get_labeled(&schema("b"), &slow).await.map(drop)
    })
    .await;
    assert!(panicked.is_err_and(|e| e.is_panic()));
    let mut conn = pool.get_labeled(&schema("a"), &SearchPath).await.unwrap();
    let labels = conn.labels();
    let read = reads(&mut conn).await;
    assert_eq!(
        read, "a",
        "a borrow labeled {labels:?} reads schema {read}: its configure for another label \
         panicked and the old label was kept"
    );
}

/// Numbers whose labeling sets the number: `100 + tenant` once configured.
struct Tenant;

impl Labeling<u64> for Tenant {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut u64) -> bool {
        *conn = 100 + wanted["schema"].parse::<u64>().unwrap();
        true
    }
}

// A guard whose borrow was reclaimed (time-to-live) no longer owns its slot, which holds the
// replacement connection, lent to someone else. Its `set_labels` wrote the replacement's
// labels, so a borrow for those labels got the replacement at cost 0, never configured; and
// its `labels()` read the replacement's.
#[tokio::test]
async fn a_reclaimed_guard_does_not_label_the_replacement() {
    let pool = Pool::builder(common::Numbers(AtomicU64::new(0)))
        .max_size(1)
        .time_to_live(Duration::from_millis(100))
        .build();
    let kept = pool.get().await.unwrap();
    let other = tokio::time::timeout(Duration::from_secs(5), pool.get())
        .await
        .expect("the reclaim frees the slot")
        .unwrap();
    assert_eq!((*kept, *other), (0, 1));
    // The reclaimed holder labels "its" connection, as after setting it up for tenant 7.
    kept.set_labels(schema("7"));
    assert!(
        other.labels().is_empty(),
        "the reclaimed guard labeled the slot's new connection: {:?}",
        other.labels()
    );
    drop((kept, other));
    let conn = pool.get_labeled(&schema("7"), &Tenant).await.unwrap();
    assert_eq!(
        *conn, 107,
        "a connection never configured for tenant 7 was lent as one"
    );
}

// The pool's password rotated (or its role dropped) while a PgPool ran: the server answers
// and refuses new sessions, but the ones the pool has still work, as a full server's do.
// The first connect that failed had the server probed and marked down: its two healthy lent
// connections were closed as they came back and every borrow failed with NoServer, a
// credential change turned into an outage (a plain `Pool` keeps serving on them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_pool_keeps_serving_on_its_sessions_after_its_password_changes() {
    let cluster = Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .start()
        .unwrap();
    cluster
        .psql("CREATE ROLE app LOGIN PASSWORD 'old'")
        .unwrap();
    let url = format!(
        "host=127.0.0.1 port={} user=app password=old dbname=postgres sslmode=disable",
        cluster.port()
    );
    let pool = PgPool::builder(url.parse().unwrap())
        .pool_config(slipstream_pool::Config {
            max_size: 3,
            borrow_timeout: Duration::from_secs(1),
            ..slipstream_pool::Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let held = (
        pool.get(Role::Primary).await.unwrap(),
        pool.get(Role::Primary).await.unwrap(),
    );
    cluster.psql("ALTER ROLE app PASSWORD 'new'").unwrap();
    // A third session cannot be opened: the borrow fails, and says why.
    let err = pool.get(Role::Primary).await.map(drop).unwrap_err();
    assert!(err.to_string().contains("password"), "{err}");
    drop(held);
    // The two sessions that work still serve.
    for _ in 0..2 {
        let mut conn = pool.get(Role::Primary).await.unwrap_or_else(|e| {
            panic!(
                "no borrow after the password changed, with two working sessions: {e}; {:?}",
                pool.servers()
            )
        });
        conn.batch_execute("SELECT 1").await.unwrap();
    }
    let s = &pool.servers()[0];
    assert!(s.up && s.stats.closed_broken == 0, "{s:?}");
}

/// A set-up that never works (in real life: a schema or role that does not exist).
struct NeverConfigures;

impl Labeling<u64> for NeverConfigures {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, _: &Labels, _: &mut u64) -> bool {
        false
    }
}

// A labeled borrow whose configure always fails retried until the borrow timeout, opening and
// closing a connection per try (hundreds a second), and then failed with "no connection
// became free ... (0 of 2 open, all in use); return connections sooner, raise max_size": none
// was in use, and none of that advice helps.
#[tokio::test]
async fn a_configure_that_always_fails_is_named_not_a_timeout() {
    let pool = Pool::builder(common::numbers())
        .max_size(2)
        .borrow_timeout(Duration::from_secs(1))
        .build();
    let err = pool
        .get_labeled(&schema("missing"), &NeverConfigures)
        .await
        .map(drop)
        .unwrap_err();
    let s = pool.stats();
    let msg = err.to_string();
    assert!(
        msg.contains("configure") && msg.contains("missing"),
        "a failing configure reported as: {msg}; {s:?}"
    );
    assert!(s.opened <= 2, "connections opened for one borrow: {s:?}");
}
