//! A pool over a primary and its streaming standby (testkit clusters): role routing, balance,
//! failover and rebalance.

use std::time::{Duration, Instant};

use slipstream_pool::{Labeling, Labels, PgPool, PoolError, Registry, Role, ServerRole};
use slipstream_testkit::Cluster;

fn url(primary: &Cluster, standby: &Cluster) -> String {
    format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres sslmode=disable",
        primary.port(),
        standby.port()
    )
}

async fn in_recovery(pool: &PgPool, role: Role) -> Result<bool, String> {
    let mut conn = pool.get(role).await.map_err(|e| e.to_string())?;
    let row = conn
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map_err(|e| e.to_string())?;
    row.get(0).map_err(|e| e.to_string())
}

mod common;

/// Waits until `done` holds for the pool, failing after `limit`; returns the time it took.
async fn until(
    pool: &PgPool,
    limit: Duration,
    what: &str,
    done: impl Fn(&PgPool) -> bool,
) -> Duration {
    common::until(limit, what, || pool.servers(), |_| done(pool)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_route_balance_fail_over_and_rebalance() {
    let primary = Cluster::start().unwrap();
    let mut standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    let servers = pool.servers();
    assert_eq!(servers[0].role, ServerRole::Primary, "{servers:?}");
    assert_eq!(servers[1].role, ServerRole::Standby, "{servers:?}");
    assert!(
        servers.iter().all(|s| s.up && s.stats.max_size == 2),
        "{servers:?}"
    );

    // Routing by role.
    assert_eq!(in_recovery(&pool, Role::Primary).await, Ok(false));
    assert_eq!(in_recovery(&pool, Role::Standby).await, Ok(true));
    assert_eq!(in_recovery(&pool, Role::PreferStandby).await, Ok(true));

    // Balance: with one borrow out on a server, the next `Any` goes to the other.
    let a = pool.get(Role::Any).await.unwrap();
    let b = pool.get(Role::Any).await.unwrap();
    assert_ne!(a.server(), b.server());
    drop((a, b));

    // Failover: the standby stops. Reads that prefer it move to the primary; a borrower sees
    // at most one failed statement per connection it had to the standby.
    {
        let _warm = (
            pool.get(Role::Standby).await.unwrap(),
            pool.get(Role::Standby).await.unwrap(),
        );
    }
    standby.stop().unwrap();
    let start = Instant::now();
    let mut failures = 0;
    loop {
        match in_recovery(&pool, Role::PreferStandby).await {
            Ok(false) => break,
            Ok(true) => panic!("the standby is stopped"),
            Err(e) => {
                failures += 1;
                assert!(failures <= 2, "too many failures: {e}");
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            pool.servers()
        );
    }
    let moved = start.elapsed();
    eprintln!("prefer-standby moved to the primary after {moved:?} and {failures} failures");
    // The primary's share grows by what the stopped standby's connections give back: until its
    // idle ones are closed (by its sub-pool's task, soon after the mark-down) they hold their
    // part of max_size, so the two never add up past it.
    let servers = pool.servers();
    assert!(!servers[1].up, "{servers:?}");
    assert!(
        servers[0].stats.max_size + servers[1].stats.open <= 4,
        "{servers:?}"
    );
    until(
        &pool,
        Duration::from_secs(5),
        "the standby's connections close",
        |p| p.servers()[1].stats.open == 0,
    )
    .await;
    until(
        &pool,
        Duration::from_secs(1),
        "the primary takes the whole share",
        |p| p.servers()[0].stats.max_size == 4,
    )
    .await;
    // Asking for the stopped role fails at once, saying why.
    let start = Instant::now();
    let err = pool.get(Role::Standby).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(100));
    assert!(matches!(err, PoolError::NoServer { .. }), "{err}");
    assert!(err.to_string().contains("down"), "{err}");
    assert_eq!(in_recovery(&pool, Role::Any).await, Ok(false));

    // Rebalance: the standby comes back on the same port; the monitor finds it, shares are
    // even again and standby reads return to it.
    standby.restart().unwrap();
    let back = until(&pool, Duration::from_secs(10), "the standby is back", |p| {
        p.servers()[1].up
    })
    .await;
    eprintln!("standby seen up {back:?} after its restart");
    let servers = pool.servers();
    assert!(servers.iter().all(|s| s.stats.max_size == 2), "{servers:?}");
    assert_eq!(in_recovery(&pool, Role::PreferStandby).await, Ok(true));
    let a = pool.get(Role::Any).await.unwrap();
    let b = pool.get(Role::Any).await.unwrap();
    assert_ne!(a.server(), b.server(), "borrows spread over both again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_primary_down_writes_fail_fast_and_reads_go_to_the_standby() {
    let mut primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    assert_eq!(in_recovery(&pool, Role::Primary).await, Ok(false));
    primary.stop().unwrap();
    // The idle connection to the primary fails once; then the primary is marked down.
    let _ = in_recovery(&pool, Role::Primary).await;
    until(
        &pool,
        Duration::from_secs(5),
        "the primary marked down",
        |p| !p.servers()[0].up,
    )
    .await;
    let err = pool.get(Role::Primary).await.unwrap_err();
    assert!(
        err.to_string().contains("no server can serve role primary"),
        "{err}"
    );
    assert_eq!(in_recovery(&pool, Role::Any).await, Ok(true));
    assert_eq!(in_recovery(&pool, Role::PreferStandby).await, Ok(true));
}

#[tokio::test]
async fn the_registry_gives_the_same_string_the_same_pool() {
    let cluster = Cluster::start().unwrap();
    let registry = Registry::new();
    let url = cluster.url();
    let a = registry.pool(&url, |b| b.max_size(3)).unwrap();
    let b = registry
        .pool(&format!("  {url} "), |b| b.max_size(99))
        .unwrap();
    assert_eq!(registry.len(), 1);
    let held = a.get(Role::Any).await;
    // Built once, with the first call's settings; `b` is the same pool and sees `a`'s borrow.
    until(&b, Duration::from_secs(5), "the server is probed", |p| {
        p.servers()[0].up
    })
    .await;
    let held = match held {
        Ok(c) => c,
        Err(_) => a.get(Role::Any).await.unwrap(),
    };
    let servers = b.servers();
    assert_eq!(
        (servers[0].stats.max_size, servers[0].outstanding),
        (3, 1),
        "{servers:?}"
    );
    drop(held);
    // Another string, another pool.
    let _c = registry
        .pool(&format!("{url}?application_name=other"), |b| b)
        .unwrap();
    assert_eq!(registry.len(), 2);
    let err = registry.pool("postgres://[bad", |b| b).unwrap_err();
    assert!(matches!(err, PoolError::Config(_)), "{err}");
}

fn shares(pool: &PgPool) -> usize {
    pool.servers().iter().map(|s| s.stats.max_size).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_add_up_to_max_size_and_resize_rebalances_them() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    // Two servers cannot share one connection: refused, saying what to do.
    let err = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(1)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("raise max_size"), "{err}");
    // An odd total: 3 + 2, not 3 + 3.
    let pool = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(5)
        .build_ready()
        .await
        .unwrap();
    assert_eq!(shares(&pool), 5, "{:?}", pool.servers());
    assert_eq!(pool.resize(7), 7);
    assert_eq!(shares(&pool), 7, "{:?}", pool.servers());
    // Clamped to one connection per server.
    assert_eq!(pool.resize(1), 2);
    assert_eq!(shares(&pool), 2, "{:?}", pool.servers());
    pool.resize(4);
    let a = pool.get(Role::Any).await.unwrap();
    let b = pool.get(Role::Any).await.unwrap();
    assert_ne!(
        a.server(),
        b.server(),
        "both servers lend after the resizes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_get_blocking_and_labeled_borrows_follow_the_role() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    // Nothing idle yet on the standby: try_get does not wait or open.
    let opened = pool.servers()[1].stats.opened;
    if pool.servers()[1].stats.idle == 0 {
        assert!(pool.try_get(Role::Standby).is_none());
    }
    drop(pool.get(Role::Standby).await.unwrap());
    let got = pool
        .try_get(Role::Standby)
        .expect("an idle standby connection");
    assert_eq!(got.server(), names[1]);
    drop(got);
    assert!(pool.servers()[1].stats.opened >= opened);

    let blocking = pool.clone();
    let server = tokio::task::spawn_blocking(move || {
        blocking
            .get_blocking(Role::Primary)
            .map(|c| c.server().to_string())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(server, names[0]);

    struct AppName;
    impl Labeling<slipstream_pg::Client> for AppName {
        fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
            u32::from(wanted != current)
        }
        async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
            let sql = format!("SET application_name = '{}'", wanted["app"]);
            conn.simple_query(&sql).await.is_ok()
        }
    }
    let wanted = Labels::from([("app".to_string(), "reports".to_string())]);
    let mut conn = pool
        .get_labeled(Role::Standby, &wanted, &AppName)
        .await
        .unwrap();
    assert_eq!(conn.server(), names[1]);
    let row = conn
        .query_one(
            "SELECT current_setting('application_name'), pg_is_in_recovery()",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0).unwrap(), "reports");
    assert!(row.get::<_, bool>(1).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_server_lends_nothing_until_resumed() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    let standby_name = pool.servers()[1].name.clone();
    let lent = pool.get(Role::Standby).await.unwrap();
    drop(pool.get(Role::Standby).await.unwrap());

    let err = pool.drain("nowhere:1").unwrap_err();
    assert!(err.to_string().contains(&standby_name), "{err}");
    pool.drain(&standby_name).unwrap();
    let servers = pool.servers();
    assert!(servers[1].drained && servers[1].up, "{servers:?}");
    // Its share moves to the primary, less what its connections still open hold back (the
    // idle one closes at once, the lent one on return).
    assert!(
        servers[0].stats.max_size >= 2 && servers[0].stats.max_size + servers[1].stats.open <= 4,
        "{servers:?}"
    );
    // Reads that prefer a standby go to the primary; a standby-only borrow fails at once.
    assert_eq!(in_recovery(&pool, Role::PreferStandby).await, Ok(false));
    let err = pool.get(Role::Standby).await.unwrap_err();
    assert!(err.to_string().contains("drained"), "{err}");
    assert!(pool.try_get(Role::Standby).is_none());
    // The lent connection still works and closes on return; the idle one closes now.
    let mut lent = lent;
    lent.simple_query("SELECT 1").await.unwrap();
    drop(lent);
    until(
        &pool,
        Duration::from_secs(5),
        "the drained server's connections close",
        |p| p.servers()[1].stats.open == 0,
    )
    .await;
    until(
        &pool,
        Duration::from_secs(5),
        "the whole share moves",
        |p| p.servers()[0].stats.max_size == 4,
    )
    .await;

    pool.resume(&standby_name).unwrap();
    assert!(!pool.servers()[1].drained);
    assert_eq!(shares(&pool), 4);
    assert_eq!(in_recovery(&pool, Role::PreferStandby).await, Ok(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_standby_is_a_primary_as_soon_as_a_connection_comes_back() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = PgPool::builder(url(&primary, &standby).parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    let mut conn = pool.get(Role::Standby).await.unwrap();
    let opened = pool.servers()[1].stats.opened;
    let row = conn
        .query_one("SELECT pg_promote(true)", &[])
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0).unwrap());
    // The server reports in_hot_standby=off with the next statement's reply.
    conn.simple_query("SELECT 1").await.unwrap();
    assert_eq!(conn.parameter("in_hot_standby"), Some("off"));
    drop(conn);
    // No probe, no reconnect: the returned connection told the pool.
    let servers = pool.servers();
    assert_eq!(servers[1].role, ServerRole::Primary, "{servers:?}");
    assert_eq!(
        servers[1].stats.opened, opened,
        "no new connection was needed"
    );
    assert!(pool.get(Role::Standby).await.is_err(), "no standby is left");
}
