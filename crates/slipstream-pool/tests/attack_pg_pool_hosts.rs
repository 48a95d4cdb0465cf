//! Second attack on the PgPool change (40bb2e7): hosts that never answer, TLS-only and full
//! servers, a resumed server's share, a new pool's borrow dropped at every poll. `break_*`
//! tests FAIL on 40bb2e7.

use std::time::{Duration, Instant};

use slipstream_pool::{PgPool, PoolError, Role};
use slipstream_testkit::Cluster;

mod common;

const T: Duration = Duration::from_secs(20);

/// A host that accepts TCP (the kernel's backlog) and never says a word.
fn black_hole() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn pool_over(primary: u16, hole: u16, borrow_timeout: Duration) -> PgPool {
    PgPool::builder(common::hosts(&[primary, hole], "").parse().unwrap())
        .max_size(2)
        .pool_config(slipstream_pool::Config {
            borrow_timeout,
            ..Default::default()
        })
        .build()
        .unwrap()
}

/// Promise (docs/pool.md, Failover): "a borrow for a role no server can serve fails at once
/// with `PoolError::NoServer`"; every borrow is bounded by the pool's borrow timeout; the
/// first-look wait (commit 40bb2e7) is for "servers the monitor has not looked at yet".
///
/// Steps: primary P and a black-hole host H (accepts TCP, never answers), borrow_timeout 1 s,
/// no connect_timeout; `build()`; wait until P is up (a `Role::Primary` borrow succeeds).
/// Then `get(Role::Standby)`.
/// Observed: the borrow sleeps until H's probe gives up (PROBE_TIMEOUT, 5 s) before saying
/// NoServer: 5x the borrow timeout, although P was already known not to be a standby. With
/// `connect_timeout=30` in the string H stays "not reached yet" for 30 s and every borrow in
/// that window waits 5 s. (Before 40bb2e7: NoServer at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_role_borrow_waits_past_the_borrow_timeout_for_an_unanswering_host() {
    let primary = Cluster::start().unwrap();
    let (_hole, hole) = black_hole();
    let pool = pool_over(primary.port(), hole, Duration::from_secs(1));
    let c = tokio::time::timeout(T, pool.get(Role::Primary))
        .await
        .unwrap()
        .expect("P serves Role::Primary");
    drop(c);
    let started = Instant::now();
    let r = tokio::time::timeout(T, pool.get(Role::Standby))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(matches!(r, Err(PoolError::NoServer { .. })), "{r:?}");
    assert!(
        took <= Duration::from_millis(1500),
        "get(Role::Standby) took {took:?} for borrow_timeout 1 s"
    );
}

/// Promise (docs/pool.md): `get_blocking(role)` is "from threads outside the runtime"; only
/// "called from a task of the pool's runtime it fails after the borrow timeout" with the
/// "called from a task of that runtime" error.
///
/// Steps: as above, but `get_blocking(Role::Standby)` from a plain std thread (the correct
/// use). Observed: after borrow_timeout + 1 s (2 s) it returns PoolError::Config "get_blocking
/// had no answer from the pool's runtime ... if it was called from a task of that runtime, it
/// blocked the worker that would answer" — a false diagnosis, while the async borrow it
/// spawned is still waiting on the first look (5 s) and would have said NoServer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_get_blocking_from_a_plain_thread_blames_the_runtime() {
    let primary = Cluster::start().unwrap();
    let (_hole, hole) = black_hole();
    let pool = pool_over(primary.port(), hole, Duration::from_secs(1));
    drop(
        tokio::time::timeout(T, pool.get(Role::Primary))
            .await
            .unwrap()
            .unwrap(),
    );
    let p = pool.clone();
    let r = tokio::time::timeout(
        T,
        tokio::task::spawn_blocking(move || {
            std::thread::spawn(move || p.get_blocking(Role::Standby).map(|_| ()))
                .join()
                .unwrap()
        }),
    )
    .await
    .unwrap()
    .unwrap();
    match r {
        Err(PoolError::NoServer { .. }) => {}
        other => panic!("from a plain thread: {other:?}"),
    }
}

/// Promise (docs/pool.md, Rebalance / Shares): "When one answers, the shares are even again
/// (`resize`), so the others shed their surplus as connections return, and new borrows spread
/// back by the fewest-outstanding rule"; a surplus is held back only "until they close".
///
/// Steps: two servers A and B (max_size 4, borrow_timeout 1 s), B drained so A holds all 4;
/// 12 tasks borrow `Role::Any` in a loop (hold 30 ms each). B is resumed under that load and
/// the load runs 3 s more.
/// Checked: B gets a share and serves borrows; borrows sent to B do not time out. HELD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_resumed_server_gets_its_share_under_load() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let pool = PgPool::builder(common::two_primaries_url(&a, &b).parse().unwrap())
        .max_size(4)
        .pool_config(slipstream_pool::Config {
            borrow_timeout: Duration::from_secs(1),
            ..Default::default()
        })
        .build_ready()
        .await
        .unwrap();
    let b_name = format!("127.0.0.1:{}", b.port());
    pool.drain(&b_name).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let on_b = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let resumed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (pool, stop, on_b, failed, resumed, b_name) = (
            pool.clone(),
            stop.clone(),
            on_b.clone(),
            failed.clone(),
            resumed.clone(),
            b_name.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(T, pool.get(Role::Any)).await.unwrap() {
                    Ok(conn) => {
                        if conn.server() == b_name {
                            on_b.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(30)).await;
                    }
                    Err(_) if resumed.load(Ordering::Relaxed) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    pool.resume(&b_name).unwrap();
    resumed.store(true, Ordering::Relaxed);
    let mut b_share_seen = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let s = pool.servers();
        let bs = s.iter().find(|s| s.name == b_name).unwrap();
        b_share_seen = b_share_seen.max(bs.stats.max_size);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let servers = pool.servers();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(T, t).await.unwrap().unwrap();
    }
    let summary: Vec<String> = servers
        .iter()
        .map(|s| {
            format!(
                "{} share {} open {} outstanding {} timeouts {}",
                s.name, s.stats.max_size, s.stats.open, s.outstanding, s.stats.timeouts
            )
        })
        .collect();
    assert!(
        b_share_seen >= 1
            && on_b.load(Ordering::Relaxed) > 0
            && failed.load(Ordering::Relaxed) == 0,
        "3 s after resume under load: B's largest share {b_share_seen}, borrows served by B {}, \
         borrows failed after resume {}; {summary:?}",
        on_b.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
}

/// A self-signed server certificate and key (PEM), made with the openssl CLI.
fn self_signed() -> (String, String) {
    let dir = tempfile_dir();
    let (crt, key) = (dir.join("s.crt"), dir.join("s.key"));
    let st = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    let r = (
        std::fs::read_to_string(&crt).unwrap(),
        std::fs::read_to_string(&key).unwrap(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "attack2-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Promise (docs/pool.md, Failover; commit 40bb2e7): "A server that refuses for too many
/// connections (SQLSTATE 53300) is full, not down: it keeps its share and its working
/// connections."
///
/// Breaks with the connecting change of 8ecbb12 (sslmode=prefer retries without TLS after a
/// server error over TLS): against a server that takes TLS only (`hostssl`, a common setup)
/// and the default sslmode (prefer), the refusal "too many clients" (53300) over TLS is
/// retried without TLS and refused by pg_hba (28000); the error the probe classifies is the
/// plain attempt's, so the full server is judged *down*.
///
/// Steps: the same as attack_multi_host's `a_full_server_is_not_marked_down_and_keeps_its_
/// healthy_connections`, except B has ssl=on and `hostssl` only, and the string does not say
/// sslmode (prefer). A and B; B max_connections 3, superuser_reserved_connections 0; another
/// client holds 2 of B's. Pool over A, B, max_size 4; one borrow on each held (fills B); two
/// more borrows (the one routed to B fails to connect).
/// HELD: "too many clients already" comes before authentication, so the plain retry meets the
/// same 53300. See the next test for the per-role limit, which comes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_full_tls_only_server_under_default_sslmode_max_connections() {
    full_server_case("hostssl", Full::MaxConnections).await;
}

/// Promise (docs/pool.md, Failover; commit 40bb2e7): "A server that refuses for too many
/// connections (SQLSTATE 53300) is full, not down: it keeps its share and its working
/// connections."
///
/// Breaks with the connecting change of 8ecbb12 (sslmode=prefer retries without TLS after a
/// server error over TLS): against a server that takes TLS only (`hostssl`, a common setup)
/// and the default sslmode (prefer), the refusal "too many clients" (53300) over TLS is
/// retried without TLS and refused by pg_hba (28000); the error the probe classifies is the
/// plain attempt's, so the full server is judged *down*.
///
/// Here the 53300 is "too many connections for role" (a role's CONNECTION LIMIT, checked after
/// AuthenticationOk): libpq would not retry (see slipstream-pg attack_connect2), slipstream-pg
/// does, and the plain attempt's 28000 is what the pool classifies.
///
/// Steps: the same as attack_multi_host's `a_full_server_is_not_marked_down_and_keeps_its_
/// healthy_connections`, except B has ssl=on and `hostssl` only, and the string does not say
/// sslmode (prefer). A and B; the pool's user `app` has CONNECTION LIMIT 3 on B; another
/// client holds 2 of B's as `app`. Pool over A, B, max_size 4; one borrow on each held (fills B); two
/// more borrows (the one routed to B fails to connect).
/// Observed: B is marked down, its healthy lent connection closed on return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_role_connection_limit_on_tls_only_server_marks_it_down() {
    full_server_case("hostssl", Full::RoleLimit).await;
}

/// Control for the test above: the same with `host` (TLS or not) in pg_hba. The plain retry
/// meets the same 53300 and B is kept, full. HELD: so it is the retry that breaks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_role_connection_limit_when_plain_is_allowed() {
    full_server_case("host", Full::RoleLimit).await;
}

/// How server B is full.
enum Full {
    /// `max_connections` reached ("too many clients already", before authentication).
    MaxConnections,
    /// The pool's role at its CONNECTION LIMIT (checked after AuthenticationOk).
    RoleLimit,
}

/// A and B, B with TLS and `kind` (`hostssl` or `host`) for TCP in pg_hba, made full as `full`
/// says while another client holds 2 of its connections; a pool over both (max_size 4) holds
/// one borrow on each and asks for two more: B must stay up, its lent connection kept.
async fn full_server_case(kind: &str, full: Full) {
    let (crt, key) = self_signed();
    let a = Cluster::start().unwrap();
    let mut b = Cluster::builder().tls(&crt, &key);
    if let Full::MaxConnections = full {
        b = b
            .setting("max_connections", "3")
            .setting("superuser_reserved_connections", "0");
    }
    let b = b
        .hba("local all all trust\nhost all all 127.0.0.1/32 reject\n")
        .start()
        .unwrap();
    // `kind` only for TCP (the reject line above is replaced: psql's setup used the socket).
    std::fs::write(
        b.data_dir().join("pg_hba.conf"),
        format!("local all all trust\n{kind} all all 127.0.0.1/32 trust\n"),
    )
    .unwrap();
    b.psql("SELECT pg_reload_conf()").unwrap();
    let user = match full {
        Full::MaxConnections => "postgres",
        Full::RoleLimit => {
            b.psql("CREATE ROLE app LOGIN CONNECTION LIMIT 3").unwrap();
            a.psql("CREATE ROLE app LOGIN").unwrap();
            "app"
        }
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one = |port: u16| format!("host=127.0.0.1 port={port} user={user} dbname=postgres");
    let other = (
        slipstream_pg::connect(&one(b.port())).await.unwrap(),
        slipstream_pg::connect(&one(b.port())).await.unwrap(),
    );
    let pool = PgPool::builder(
        format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user={user} dbname=postgres",
            a.port(),
            b.port()
        )
        .parse()
        .unwrap(),
    )
    .pool_config(slipstream_pool::Config {
        max_size: 4,
        borrow_timeout: Duration::from_secs(3),
        ..slipstream_pool::Config::default()
    })
    .build_ready()
    .await
    .unwrap();
    let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    assert!(pool.servers()[1].up);
    let x = tokio::time::timeout(T, pool.get(Role::Any))
        .await
        .unwrap()
        .unwrap();
    let mut y = tokio::time::timeout(T, pool.get(Role::Any))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(x.server(), y.server());
    let on_b = if y.server() == names[1] {
        &mut y
    } else {
        panic!("{:?}", pool.servers())
    };
    on_b.batch_execute("SELECT 1").await.unwrap();
    let p2 = pool.clone();
    let more = tokio::spawn(async move {
        let f = (
            tokio::time::timeout(Duration::from_secs(10), p2.get(Role::Any)),
            tokio::time::timeout(Duration::from_secs(10), p2.get(Role::Any)),
        );
        let (r1, r2) = tokio::join!(f.0, f.1);
        (r1.unwrap().map(|_| ()), r2.unwrap().map(|_| ()))
    });
    let more = tokio::time::timeout(T, more).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s = pool.servers();
    drop(x);
    drop(y);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = pool.servers();
    assert!(
        s[1].up && after[1].stats.open >= 1,
        "B, full but answering, was marked down and its healthy lent connection closed on \
         return: during {:?}; after the return {:?}; borrows {more:?}",
        s[1],
        after[1]
    );
    drop(other);
}

/// Polls a future at most `polls` times, then drops it: the borrower's cancellation at that
/// await point.
struct DropAfter<F> {
    inner: std::pin::Pin<Box<F>>,
    polls: usize,
}

impl<F: std::future::Future> std::future::Future for DropAfter<F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.polls == 0 {
            return std::task::Poll::Ready(None);
        }
        self.polls -= 1;
        match self.inner.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
            // The last allowed poll: dropped now, at the await it reached.
            std::task::Poll::Pending if self.polls == 0 => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// Promise (general): a dropped borrow never leaves the pool inconsistent. The first-look
/// wait (a pool just built, no server reached yet) and what follows it: a borrow dropped at
/// each of its polls in turn, on a fresh pool each time, leaves no borrow counted against the
/// server, and the pool then lends its whole max_size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrow_dropped_at_every_poll_of_a_new_pool_leaves_nothing_behind() {
    let cluster = Cluster::start().unwrap();
    let url = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        cluster.port()
    );
    let mut completed = false;
    for k in 1..=64 {
        let pool = PgPool::builder(url.parse().unwrap())
            .max_size(2)
            .build()
            .unwrap();
        let outcome = tokio::time::timeout(
            T,
            DropAfter {
                inner: Box::pin(pool.get(Role::Primary)),
                polls: k,
            },
        )
        .await
        .unwrap_or_else(|_| panic!("a borrow polled {k} times hung"));
        if let Some(result) = outcome {
            result.unwrap();
            completed = true;
        }
        let s = pool.servers();
        assert_eq!(s[0].outstanding, 0, "dropped at poll {k}: {s:?}");
        let both = tokio::time::timeout(T, async {
            (
                pool.get(Role::Primary).await.unwrap(),
                pool.get(Role::Primary).await.unwrap(),
            )
        })
        .await
        .unwrap_or_else(|_| panic!("after a borrow dropped at poll {k}, max_size not lent"));
        drop(both);
        if completed {
            assert!(
                k > 1,
                "the first borrow completed at its first poll: nothing was dropped"
            );
            eprintln!("dropped at polls 1..{k}, completed at poll {k}");
            return;
        }
    }
    panic!("the first borrow never completed within 64 polls");
}
