//! Attacks on what the pool's errors say (session 41): a server that refuses the pool's login
//! from the start, and borrows that time out with no connection open. An error must name the
//! cause and what to do; one that blames connections "all in use" when none is open, claims a
//! wait that did not happen, or says to retry when retrying cannot help sends its reader the
//! wrong way.

mod common;

use std::time::{Duration, Instant};

use slipstream_pool::{PgManager, PgPool, Pool, PoolError, Role};
use slipstream_testkit::Cluster;

/// A cluster that asks for a password over TCP, the superuser's being `right`.
fn password_cluster() -> Cluster {
    let cluster = Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .start()
        .unwrap();
    cluster
        .psql("ALTER ROLE postgres PASSWORD 'right'")
        .unwrap();
    cluster
}

/// `Pool::build_ready` against a server that refuses the password fails after its first
/// attempts, a fraction of the borrow timeout. Before, the error said that no connection
/// "became free within 30s (0 of 10 open, all in use)": a wait that never happened, and
/// connections in use that were never opened; and its advice, "check that the database is
/// reachable", pointed away from the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_ready_refused_a_password_says_what_happened() {
    let cluster = password_cluster();
    let url = cluster.url_for("postgres", Some("wrong"));
    let start = Instant::now();
    let err = Pool::builder(PgManager::new(url.parse().unwrap()))
        .min_size(2)
        .borrow_timeout(Duration::from_secs(30))
        .build_ready()
        .await
        .unwrap_err();
    let took = start.elapsed();
    let PoolError::Timeout { waited, open, .. } = &err else {
        panic!("not a timeout: {err}");
    };
    assert!(
        *waited <= took,
        "says it waited {waited:?}, returned after {took:?}: {err}"
    );
    assert_eq!(*open, 0, "{err}");
    let text = err.to_string();
    assert!(!text.contains("all in use"), "{text}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(text.contains("credentials"), "{text}");
}

/// A borrow that times out while the pool cannot open its first connection: not "all in use".
/// The timeout must outlast one refused login (a SCRAM exchange, whose key derivation runs
/// unoptimized in a debug build): at 300 ms a loaded CI machine timed out before the first
/// refusal came back, and the error rightly said connections were still opening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_with_nothing_open_does_not_blame_connections_in_use() {
    let cluster = password_cluster();
    let url = cluster.url_for("postgres", Some("wrong"));
    let pool = Pool::builder(PgManager::new(url.parse().unwrap()))
        .borrow_timeout(Duration::from_secs(10))
        .build();
    let err = pool.get().await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PoolError::Timeout { open: 0, .. }), "{text}");
    assert!(!text.contains("all in use"), "{text}");
    assert!(text.contains("credentials"), "{text}");
}

/// A `PgPool` whose every server refuses its login from the start: `NoServer` names the
/// refusal and says to fix the login, not that "down servers are retried in the background,
/// so retry shortly" (retrying cannot help), and `build_ready` says so once every server has
/// answered, rather than after the whole borrow timeout (the default, 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_pool_refused_its_login_says_to_fix_it_not_to_retry() {
    let cluster = password_cluster();
    let wrong_password = common::hosts(&[cluster.port()], "password=wrong");
    let no_database = format!(
        "host=127.0.0.1 port={} user=postgres password=right dbname=nope sslmode=disable",
        cluster.port()
    );
    for conninfo in [wrong_password, no_database] {
        let pool = PgPool::builder(conninfo.parse().unwrap())
            .max_size(2)
            .build()
            .unwrap();
        let err = pool.get(Role::Primary).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PoolError::NoServer { .. }), "{text}");
        assert!(!text.contains("retry shortly"), "{text}");
        assert!(text.contains("login"), "{text}");
        let ready = PgPool::builder(conninfo.parse().unwrap())
            .max_size(2)
            .build_ready();
        let err = tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .expect("build_ready waited out its borrow timeout for a refused login")
            .unwrap_err();
        assert!(!err.to_string().contains("retry shortly"), "{err}");
    }
}

/// A server that is only down (connection refused) is still worth retrying: the advice stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_pool_whose_server_is_down_still_says_to_retry() {
    let mut cluster = Cluster::start().unwrap();
    let conninfo = common::hosts(&[cluster.port()], "");
    cluster.stop().unwrap();
    let pool = PgPool::builder(conninfo.parse().unwrap())
        .max_size(2)
        .build()
        .unwrap();
    let err = pool.get(Role::Primary).await.unwrap_err();
    assert!(err.to_string().contains("retry shortly"), "{err}");
}

/// Promise (STYLE.md, `PoolError`: "each says what happened and what to do"): a `NoServer`
/// because the servers of a role are drained says how they come back.
///
/// Steps: two servers, both drained; a borrow fails with `NoServer`.
///
/// Before the fix it said "no server can serve role any now (127.0.0.1:... drained; ...
/// drained); down servers are retried in the background, so retry shortly or ask for another
/// role": retrying never helps a drained server, only `PgPool::resume` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_pool_whose_servers_are_drained_says_they_need_resuming() {
    let (a, b) = (Cluster::start().unwrap(), Cluster::start().unwrap());
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .max_size(2)
        .build_ready()
        .await
        .unwrap();
    let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    for name in &names {
        pool.drain(name).unwrap();
    }
    let err = pool.get(Role::Any).await.unwrap_err();
    assert!(matches!(err, PoolError::NoServer { .. }), "{err}");
    let text = err.to_string();
    assert!(
        names.iter().all(|n| text.contains(n.as_str())) && text.contains("resume"),
        "a NoServer for drained servers should name them and say they come back with \
         PgPool::resume: {text}"
    );
}
