//! Attacks on the multi-host pool `PgPool` (docs/pool.md, "Several servers: PgPool"): roles
//! learned, failover, drain, shares, the monitor's probes and the registry. Every test runs
//! against real servers (testkit clusters); a small TCP forwarder of our own stands between
//! the pool and a server where a test needs to delay, black-hole or count connections.
//!
//! Each test says the promise, the steps and what happened on main (bdecdec). Tests marked
//! "BREAK" fail on main; those marked "holds" passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use slipstream_pool::{PgPool, PoolError, Registry, Role, ServerRole};
use slipstream_testkit::Cluster;

mod common;
use common::{hosts, open_total, shares_total as shares};

const T: Duration = Duration::from_secs(10);

/// A TCP forwarder on 127.0.0.1 to a server's port, on a runtime of its own: counts the
/// connections it accepts, can delay each connect upstream, or black-hole new ones (accept,
/// never answer), and can cut every connection it carries.
struct Forwarder {
    port: u16,
    target: Arc<AtomicU16>,
    accepts: Arc<AtomicUsize>,
    delay_ms: Arc<AtomicU64>,
    black_hole: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    fn start(target: u16) -> Forwarder {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let accepts = Arc::new(AtomicUsize::new(0));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let black_hole = Arc::new(AtomicBool::new(false));
        let (cut, cut_rx) = tokio::sync::watch::channel(0u64);
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (t, a, d, b) = (
            target.clone(),
            accepts.clone(),
            delay_ms.clone(),
            black_hole.clone(),
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept_loop = async {
                    loop {
                        let Ok((mut down, _)) = listener.accept().await else {
                            continue;
                        };
                        a.fetch_add(1, Ordering::SeqCst);
                        let mut cut_rx = cut_rx.clone();
                        cut_rx.borrow_and_update();
                        let hole = b.load(Ordering::SeqCst);
                        let delay = Duration::from_millis(d.load(Ordering::SeqCst));
                        let port = t.load(Ordering::SeqCst);
                        tokio::spawn(async move {
                            let carry = async {
                                if hole {
                                    // Accept and never answer.
                                    std::future::pending::<()>().await;
                                }
                                tokio::time::sleep(delay).await;
                                let Ok(mut up) =
                                    tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                                else {
                                    return;
                                };
                                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                            };
                            tokio::select! {
                                () = carry => {}
                                _ = cut_rx.changed() => {}
                            }
                        });
                    }
                };
                tokio::select! {
                    () = accept_loop => {}
                    _ = stop_rx => {}
                }
            });
        });
        Forwarder {
            port,
            target,
            accepts,
            delay_ms,
            black_hole,
            cut,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    fn set_delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }

    fn set_black_hole(&self, on: bool) {
        self.black_hole.store(on, Ordering::SeqCst);
    }

    #[allow(dead_code)]
    fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }

    #[allow(dead_code)]
    fn cut_all(&self) {
        self.cut.send_modify(|g| *g += 1);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Backends on `cluster` whose application_name is `app` (psql's own session is not one).
fn backends(cluster: &Cluster, app: &str) -> usize {
    cluster
        .psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'"
        ))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// BREAK (High: wrong role served).
///
/// Promise (docs/pool.md, Promotion): "a primary becomes a standby only through a restart,
/// which the reconnect learns"; routing: `Role::Primary` borrows go to "the server that
/// takes writes".
///
/// Steps: a primary P and its standby S, max_size 4, `build_ready` (which only probes: P's
/// sub-pool has no connection yet). P is stopped and started again as a hot standby
/// (`standby.signal` in its data directory; a demotion through a restart). Then
/// `get(Role::Primary)`.
///
/// What happened: the pool still thinks P is the primary, so the borrow waits on P's
/// sub-pool, which opens a new connection. `ServerManager::connect` learns "standby" from it
/// and records it, but hands that very connection to the `Role::Primary` borrower: the write
/// fails with "cannot execute CREATE TABLE in a read-only transaction". The next
/// `get(Role::Primary)` correctly fails with NoServer, so the first borrow is the one served
/// a standby. A waiter queued on P's sub-pool for `Role::Primary` is served the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_restarted_as_a_standby_is_not_lent_for_role_primary() {
    let mut primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = ready_pool(&[primary.port(), standby.port()], 4).await;
    let s = pool.servers();
    assert_eq!(
        (s[0].role, s[1].role),
        (ServerRole::Primary, ServerRole::Standby)
    );

    primary.stop().unwrap();
    std::fs::write(primary.data_dir().join("standby.signal"), "").unwrap();
    primary.restart().unwrap();
    assert_eq!(primary.psql("SELECT pg_is_in_recovery()").unwrap(), "t");

    let mut wrong = Vec::new();
    for _ in 0..3 {
        match tokio::time::timeout(T, pool.get(Role::Primary))
            .await
            .unwrap()
        {
            Ok(mut conn) => {
                let server = conn.server().to_string();
                if let Err(e) = conn
                    .batch_execute("CREATE TABLE IF NOT EXISTS attack_w (x int)")
                    .await
                {
                    wrong.push(format!("{server}: {e}"));
                }
            }
            Err(PoolError::NoServer { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert!(
        wrong.is_empty(),
        "Role::Primary borrows were served a standby connection: {wrong:?}; {:?}",
        pool.servers()
    );
}

/// BREAK (Medium: a wait where a fast failure is promised).
///
/// Promise (Failover): "a connection that comes back broken ... makes the monitor task probe
/// that server at once ... a borrow for a role no server can serve fails at once with
/// `PoolError::NoServer`"; "measured in the test, the move takes 1-2 ms after the server
/// stops (connection refused; an unreachable host takes up to its `connect_timeout`)".
///
/// Steps: three hosts: one that accepts TCP and never answers (a hung machine), a primary and
/// its standby; no `connect_timeout` in the string. After `build_ready` (5 s: the black hole's
/// probe times out), wait 300 ms (the monitor is then probing the black hole again), stop the
/// standby, and time how long `get(Role::Standby)` takes to fail with NoServer (each attempt
/// runs a statement, so the broken connection is returned and reported).
///
/// What happened: the monitor probes servers one after the other in one task, so while it
/// waits on the black hole (PROBE_TIMEOUT, 5 s, retried every 0.1-2 s) the stopped standby
/// is not probed: Role::Standby borrows keep failing with connection errors (new connects
/// refused) for seconds instead of NoServer within milliseconds. One unreachable host delays
/// the failover of every other host by up to 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_host_does_not_hold_up_failover_of_the_others() {
    let primary = Cluster::start().unwrap();
    let mut standby = primary.start_standby().unwrap();
    let hole = Forwarder::start(1);
    hole.set_black_hole(true);
    let pool = ready_pool(&[hole.port, primary.port(), standby.port()], 6).await;
    {
        let _warm = (
            pool.get(Role::Standby).await.unwrap(),
            pool.get(Role::Standby).await.unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    standby.stop().unwrap();
    let start = Instant::now();
    let mut errors = 0;
    loop {
        let r = tokio::time::timeout(T, async {
            let mut c = pool.get(Role::Standby).await?;
            c.batch_execute("SELECT 1")
                .await
                .map_err(|e| PoolError::Config(e.to_string()))
        })
        .await
        .unwrap();
        match r {
            Err(PoolError::NoServer { .. }) => break,
            Ok(()) => panic!("the standby is stopped"),
            Err(_) => errors += 1,
        }
        assert!(start.elapsed() < T, "{:?}", pool.servers());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "Role::Standby failed over only after {took:?} and {errors} failed borrows; \
         the monitor was waiting on the black-hole host's probe"
    );
}

/// BREAK (Medium: the documented example fails).
///
/// Promise (Registry docs, registry.rs): `Registry::global().pool(url, |b| b)?` and then
/// `b.get(Role::Primary).await?` borrows a connection (docs/pool.md shows the same).
///
/// Steps: `Registry::new().pool(url, |b| b)` over one running server, then at once
/// `get(Role::Primary)`.
///
/// What happened: the registry builds with `build()`, which does not wait for the first
/// probe; the borrow finds no server up yet and fails at once with `NoServer` ("not reached
/// yet") although the server is up. Every process's first borrow through the registry fails.
/// (`tests/multi_host.rs`'s registry test works around it by borrowing twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_pool_lends_on_its_first_borrow() {
    let cluster = Cluster::start().unwrap();
    let registry = Registry::new();
    let pool = registry
        .pool(&hosts(&[cluster.port()], ""), |b| b.max_size(2))
        .unwrap();
    let r = tokio::time::timeout(T, pool.get(Role::Primary))
        .await
        .unwrap();
    assert!(
        r.is_ok(),
        "the first borrow from a registry pool failed: {}",
        r.err().unwrap()
    );
}

/// BREAK (High: connections beyond max_size; connection storm).
///
/// Promise: "Shares add up to max_size, and so do the connections open"; "a borrow that
/// finds no server of its role asks for a probe at once"; down/role probes back off
/// "100 ms, doubling to 2 s".
///
/// Steps: a pool over one hot standby only (a read-replica pool), max_size 1,
/// application_name set; one `Role::Standby` connection is borrowed and held. A caller then
/// retries `get(Role::Primary)` in a loop for 2 s (each fails with NoServer at once, as
/// promised). Count the TCP connections the server is sent (through a forwarder) and sample
/// the pool's backends in `pg_stat_activity`.
///
/// What happened: every NoServer sets `reprobe_roles` and wakes the monitor, which opens a
/// probe connection to every up server at once, with no back-off: 890 NoServer answers made
/// 484 connections to the standby in 2 s (each a fork and an authentication on the server),
/// and up to 3 of the pool's backends were seen at once for max_size 1 (the held connection
/// plus probes). Without any borrow, such a pool (no primary: a read-replica pool, or the
/// primary drained) also re-probes every server every 2 s forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_primary_borrows_do_not_storm_the_servers_with_probes() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let fwd = Forwarder::start(standby.port());
    let pool = standby_only_pool(&fwd, 1).await;
    let held = pool.get(Role::Standby).await.unwrap();
    let before = fwd.accepts();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let mut sampler = Sampler::start(&standby);
        std::thread::spawn(move || {
            let mut max = 0;
            while !stop.load(Ordering::SeqCst) {
                max = max.max(sampler.count());
            }
            max
        })
    };
    let failures = fail_primary_borrows_for(&pool, Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let max_backends = sampler.join().unwrap();
    let probes = fwd.accepts() - before;
    drop(held);
    eprintln!(
        "{failures} NoServer answers; {probes} connections opened; max backends {max_backends}"
    );
    assert!(
        probes <= 10 && max_backends <= 1,
        "{failures} failed Role::Primary borrows in 2 s made the pool open {probes} \
         connections to the standby (max_size 1); up to {max_backends} of the pool's \
         backends seen at once"
    );
}

/// The same storm with room in the server's share: role probes are asked for every few
/// milliseconds now (a promotion is found that soon), so each must not open a connection of
/// its own. The first opens one through the sub-pool and the rest ask over it. Before, with
/// the 100 ms limit, this loop made a probe connection about every 100 ms (20 in 2 s); with
/// the 5 ms limit and a connection per probe it would make hundreds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_primary_borrows_with_room_in_the_share_open_one_connection() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let fwd = Forwarder::start(standby.port());
    let pool = standby_only_pool(&fwd, 2).await;
    let held = pool.get(Role::Standby).await.unwrap();
    let before = fwd.accepts();
    let failures = fail_primary_borrows_for(&pool, Duration::from_secs(2)).await;
    let probes = fwd.accepts() - before;
    let open = pool.servers()[0].stats.open;
    drop(held);
    eprintln!("{failures} NoServer answers; {probes} connections opened; {open} open");
    assert!(
        probes <= 1 && open <= 2,
        "{failures} failed Role::Primary borrows in 2 s made the pool open {probes} \
         connections to the standby (max_size 2, one lent); {open} open at the end"
    );
}

/// A pool over the servers on `ports` (127.0.0.1), every one probed.
async fn ready_pool(ports: &[u16], max_size: usize) -> PgPool {
    PgPool::builder(hosts(ports, "").parse().unwrap())
        .max_size(max_size)
        .build_ready()
        .await
        .unwrap()
}

/// A pool over one standby only (a read-replica pool) through `fwd`, its backends named
/// attack_storm.
async fn standby_only_pool(fwd: &Forwarder, max_size: usize) -> PgPool {
    PgPool::builder(
        hosts(&[fwd.port], "application_name=attack_storm")
            .parse()
            .unwrap(),
    )
    .max_size(max_size)
    .build_ready()
    .await
    .unwrap()
}

/// Retries `get(Role::Primary)` every millisecond for `how_long`, each failing at once with
/// NoServer (anything else panics); how many failed.
async fn fail_primary_borrows_for(pool: &PgPool, how_long: Duration) -> usize {
    let start = Instant::now();
    let mut failures = 0;
    while start.elapsed() < how_long {
        match tokio::time::timeout(T, pool.get(Role::Primary))
            .await
            .unwrap()
        {
            Err(PoolError::NoServer { .. }) => failures += 1,
            other => panic!("{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    failures
}

/// Counts the pool's backends (application_name attack_storm) on a server over one psql
/// session kept open (a fresh psql per sample is too slow); the session ends when dropped.
struct Sampler {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Sampler {
    fn start(cluster: &Cluster) -> Sampler {
        let mut child = cluster
            .install()
            .command("psql")
            .args(["-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-d", "postgres", "-p", &cluster.port().to_string()])
            .env("PGAPPNAME", "attack_sampler")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        Sampler { child, stdin, out }
    }

    fn count(&mut self) -> usize {
        use std::io::{BufRead, Write};
        writeln!(
            self.stdin,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'attack_storm';"
        )
        .unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().parse().unwrap_or(0)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// BREAK (High: connections beyond max_size).
///
/// Promise: "Connections still open on a down or drained server ... hold their part of
/// max_size back from the others until they close"; "So the connections open never pass
/// max_size" (rebalance_shares); drain: "its share moved to the others".
///
/// Steps: two servers A and B (independent primaries), max_size 2 (1 + 1), B behind a
/// forwarder that delays each connect by 600 ms (a slow network or a busy server). A borrow
/// is held on A; a second `Role::Any` borrow goes to B and starts B's connect. While it is in
/// flight, `drain(B)`: the waiting borrower re-picks A. Count the pool's backends on both
/// servers while B's connect completes.
///
/// What happened: a connect in flight is not counted in `open_count` (it is counted at
/// install), so the drain hands B's whole share to A (A: 2) while B's connection still
/// arrives: two connections on A and one on B, three backends for max_size 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_in_flight_on_a_drained_server_counts_against_max_size() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let fwd = Forwarder::start(b.port());
    fwd.set_delay(Duration::from_millis(600));
    let pool = PgPool::builder(
        hosts(&[a.port(), fwd.port], "application_name=attack_drain")
            .parse()
            .unwrap(),
    )
    .max_size(2)
    .build_ready()
    .await
    .unwrap();
    let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    let first = tokio::time::timeout(T, pool.get(Role::Any))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.server(), names[0]);
    let p2 = pool.clone();
    let second = tokio::spawn(async move { tokio::time::timeout(T, p2.get(Role::Any)).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(pool.servers()[1].outstanding, 1, "{:?}", pool.servers());
    pool.drain(&names[1]).unwrap();
    let second = second.await.unwrap().unwrap().unwrap();
    assert_eq!(second.server(), names[0]);
    // B's connect is still in flight; sample the pool's own count of open connections (and
    // the backends on both servers) until it has landed and settled.
    let start = Instant::now();
    let mut worst_open = 0;
    let mut worst_at = None;
    while start.elapsed() < Duration::from_millis(1500) {
        let s = pool.servers();
        let open: usize = s.iter().map(|s| s.stats.open).sum();
        if open > worst_open {
            worst_open = open;
            worst_at = Some(s);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let backends_now = backends(&a, "attack_drain") + backends(&b, "attack_drain");
    drop((first, second));
    eprintln!("worst {worst_open}: {worst_at:?}; backends at the end {backends_now}");
    assert!(
        worst_open <= 2,
        "max_size 2, but the pool had {worst_open} connections open at once: {worst_at:?}"
    );
    assert_eq!(shares(&pool), 2);
}

/// holds. A write inside a transaction whose statement was cancelled (future dropped) and
/// whose guard was dropped mid-transaction is rolled back; the next borrower of that
/// connection is outside any transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_dropped_mid_statement_is_rolled_back() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    primary.psql("CREATE TABLE attack_tx (x int)").unwrap();
    let pool = ready_pool(&[primary.port(), standby.port()], 2).await;
    for _ in 0..5 {
        let mut c = pool.get(Role::Primary).await.unwrap();
        c.batch_execute("BEGIN; INSERT INTO attack_tx VALUES (1)")
            .await
            .unwrap();
        let _ = tokio::time::timeout(
            Duration::from_millis(20),
            c.batch_execute("INSERT INTO attack_tx SELECT 2 FROM pg_sleep(0.5)"),
        )
        .await;
        drop(c);
        let mut c = tokio::time::timeout(T, pool.get(Role::Primary))
            .await
            .unwrap()
            .unwrap();
        // SAVEPOINT fails outside a transaction block.
        assert!(
            c.batch_execute("SAVEPOINT attack").await.is_err(),
            "the next borrower is inside a transaction"
        );
    }
    assert_eq!(primary.psql("SELECT count(*) FROM attack_tx").unwrap(), "0");
}

/// holds. A host name that does not resolve is marked down with the resolver's error, the
/// others serve, and the pool still lends max_size connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_does_not_resolve_is_down_and_named() {
    let a = Cluster::start().unwrap();
    let pool = PgPool::builder(
        format!(
            "host=127.0.0.1,no-such-host.invalid port={},5432 user=postgres dbname=postgres \
             sslmode=disable",
            a.port()
        )
        .parse()
        .unwrap(),
    )
    .max_size(3)
    .build_ready()
    .await
    .unwrap();
    let s = pool.servers();
    assert!(s[0].up && !s[1].up, "{s:?}");
    let err = pool.get(Role::Standby).await.unwrap_err();
    assert!(err.to_string().contains("no-such-host.invalid"), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held: Vec<_> = futures_util::future::join_all((0..3).map(|_| pool.get(Role::Any)))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(held.len(), 3);
}

/// BREAK (High: lost slots, borrows wait to their timeout on a server marked up).
///
/// Promise (Failover, Rebalance): a server that stops answering is marked down (a probe
/// "takes up to its connect_timeout", 5 s without one), borrowers go to the others, and when
/// it answers again "the shares are even again" and borrows spread back to it; general: no
/// hang, no lost slot.
///
/// Steps: servers A and B (independent primaries), B behind a forwarder; max_size 4,
/// borrow_timeout 8 s, no connect_timeout. Both warmed (2 connections each). B then hangs:
/// the forwarder cuts its connections and accepts new ones without ever answering (a hung
/// machine). 10 `Role::Any` borrows, each running `SELECT 1`; then B answers again (its hung
/// connects stay hung, as TCP connections to a machine that froze do), and once B is up, 4
/// borrows held at once.
///
/// What happened: while B hung, borrows were held up to 5 s (the probe's timeout: as
/// documented). But the connects B's sub-pool started while B hung never end (the sub-pool's
/// own connects have no time limit when the string sets no connect_timeout; only probes
/// have PROBE_TIMEOUT), so its slots stay OPENING for good. The monitor's probes succeed, B
/// is marked up with a share of 2, borrows are routed to it, and they wait their whole
/// borrow timeout: "no connection became free within 6s (0 of 2 open, all in use)" (a
/// misleading message too: nothing is open or in use), every time, never re-picked to A.
/// A frozen server (a SIGSTOPped postmaster, a paused VM whose kernel still accepts
/// connections) does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_and_comes_back_lends_again() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let fwd = Forwarder::start(b.port());
    let pool = PgPool::builder(hosts(&[a.port(), fwd.port], "").parse().unwrap())
        .pool_config(slipstream_pool::Config {
            max_size: 4,
            borrow_timeout: Duration::from_secs(6),
            ..slipstream_pool::Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    {
        let held: Vec<_> = futures_util::future::join_all((0..4).map(|_| pool.get(Role::Any)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            held.iter()
                .filter(|c| c.server() != held[0].server())
                .count(),
            2
        );
    }
    fwd.set_black_hole(true);
    fwd.cut_all();
    let mut slowest = Duration::ZERO;
    let mut failures = Vec::new();
    for _ in 0..3 {
        let round = futures_util::future::join_all((0..4).map(|_| async {
            let t = Instant::now();
            let r = tokio::time::timeout(Duration::from_secs(15), async {
                let mut c = pool.get(Role::Any).await.map_err(|e| e.to_string())?;
                c.batch_execute("SELECT 1")
                    .await
                    .map_err(|e| format!("{}: {e}", c.server()))?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, String>(())
            })
            .await
            .expect("a borrow hung past 15 s");
            (t.elapsed(), r)
        }))
        .await;
        for (took, r) in round {
            slowest = slowest.max(took);
            if let Err(e) = r {
                failures.push(e);
            }
        }
    }
    eprintln!("while B hung: slowest borrow {slowest:?}; failures {failures:?}");
    assert!(
        failures.len() <= 2 && slowest < Duration::from_secs(6),
        "while B hung: slowest borrow {slowest:?}, failures {failures:?}"
    );
    fwd.set_black_hole(false);
    common_until(Duration::from_secs(12), "B back up", || {
        pool.servers()[1].up
    })
    .await;
    let t = Instant::now();
    let held: Vec<_> = futures_util::future::join_all((0..4).map(|_| {
        tokio::time::timeout(Duration::from_secs(3), async {
            let mut c = pool.get(Role::Any).await.map_err(|e| e.to_string())?;
            c.batch_execute("SELECT 1")
                .await
                .map_err(|e| format!("{}: {e}", c.server()))?;
            Ok::<_, String>(c)
        })
    }))
    .await;
    let took = t.elapsed();
    let held: Vec<_> = held
        .into_iter()
        .map(|r| r.unwrap_or_else(|_| Err("no connection within 3 s".to_string())))
        .collect();
    let errs: Vec<String> = held
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(
        errs.is_empty() && took < Duration::from_secs(2),
        "after B came back, 4 borrows took {took:?}: {errs:?}; {:?}",
        pool.servers()
    );
}

async fn common_until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    common::until(limit, what, || (), |()| done()).await;
}

/// BREAK (Medium: a healthy server taken out, its working connections closed).
///
/// Promise (Failover): a server is marked down when "it cannot connect", i.e. it is gone; a
/// server that is up keeps its connections.
///
/// Steps: A, and B with max_connections 3 (superuser_reserved_connections 0); another client
/// holds 2 of B's connections. Pool over A and B, max_size 4 (2 + 2). Two `Role::Any`
/// borrows held (one on A, one on B, which fills B); two more: the one routed to B fails to
/// connect ("too many clients").
///
/// What happened: the failed connect makes the monitor probe B; the probe is refused for the
/// same reason ("sorry, too many clients already"), so B, up and serving its lent connection
/// fine, is marked down: its share goes to 0 and the healthy lent connection is closed when
/// returned (closed_broken 1). A server at its connection limit (a common, transient state)
/// is treated as a dead one, and the pool gives up the very connections it had there; its
/// load moves to the others. (The borrowers themselves re-picked A and got connections.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_not_marked_down_and_keeps_its_healthy_connections() {
    let a = Cluster::start().unwrap();
    let b = Cluster::builder()
        .setting("max_connections", "3")
        .setting("superuser_reserved_connections", "0")
        .start()
        .unwrap();
    let other = (
        slipstream_pg::connect(&hosts(&[b.port()], ""))
            .await
            .unwrap(),
        slipstream_pg::connect(&hosts(&[b.port()], ""))
            .await
            .unwrap(),
    );
    let pool = PgPool::builder(hosts(&[a.port(), b.port()], "").parse().unwrap())
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
    let x = pool.get(Role::Any).await.unwrap();
    let mut y = pool.get(Role::Any).await.unwrap();
    assert_ne!(x.server(), y.server());
    let on_b = if y.server() == names[1] {
        &mut y
    } else {
        panic!("{:?}", pool.servers())
    };
    on_b.batch_execute("SELECT 1").await.unwrap();
    let more = futures_util::future::join_all(
        (0..2).map(|_| tokio::time::timeout(Duration::from_secs(10), pool.get(Role::Any))),
    )
    .await;
    let errs: Vec<String> = more
        .iter()
        .filter_map(|r| r.as_ref().unwrap().as_ref().err().map(|e| e.to_string()))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let s = pool.servers();
    eprintln!("borrow errors: {errs:?}; {s:?}");
    drop(more);
    drop(x);
    drop(y);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = pool.servers();
    assert!(
        s[1].up && after[1].stats.open >= 1,
        "B, full but answering, was marked down and its healthy lent connection closed on \
         return: during {:?}; after the return {:?}; borrow errors {errs:?}",
        s[1],
        after[1]
    );
    drop(other);
}

/// BREAK (High: wrong role served; the same family as the restart-as-standby test, through
/// the waiting path).
///
/// Promise (Routing, Promotion): `Role::Standby` borrows go to a hot standby; "a returned
/// connection that reports `off` makes its standby a primary" (and it then stops taking
/// standby borrows: attack3's test of that holds for new borrows).
///
/// Steps: primary P and standby S, max_size 4 (S's share 2). Two `Role::Standby` borrows are
/// held; a third waits on S's sub-pool. S is promoted (`pg_promote`); one held connection
/// runs a statement (so it reads in_hot_standby=off) and is returned.
///
/// What happened: the return teaches the pool that S is a primary, and the same return hands
/// the connection to the queued `Role::Standby` waiter, which now holds a connection to a
/// primary (`pg_is_in_recovery()` false). A role change does not wake the waiters the way a
/// mark-down does (`went_down`), and a hand-off does not look at the role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_waiter_is_not_handed_a_connection_to_a_promoted_server() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = ready_pool(&[primary.port(), standby.port()], 4).await;
    let mut a = pool.get(Role::Standby).await.unwrap();
    let b = pool.get(Role::Standby).await.unwrap();
    let p2 = pool.clone();
    let waiter = tokio::spawn(async move {
        let mut c = tokio::time::timeout(T, p2.get(Role::Standby))
            .await
            .map_err(|_| "hung".to_string())?
            .map_err(|e| e.to_string())?;
        let row = c
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(|e| e.to_string())?;
        Ok::<bool, String>(row.get::<_, bool>(0).unwrap())
    });
    common_until(Duration::from_secs(5), "the waiter queues", || {
        pool.servers()[1].stats.waiting == 1
    })
    .await;
    standby.psql("SELECT pg_promote(true, 30)").unwrap();
    a.batch_execute("SELECT 1").await.unwrap();
    assert_eq!(a.parameter("in_hot_standby"), Some("off"));
    drop(a);
    let got = waiter.await.unwrap();
    drop(b);
    assert!(
        !matches!(got, Ok(false)),
        "a Role::Standby borrower was served a connection to a primary: {got:?}; {:?}",
        pool.servers()
    );
}

/// BREAK (Medium: a confusing error after a wait).
///
/// Promise (Registry): "one pool per connection string for the whole process", built "in a
/// tokio runtime, which must outlive it"; general: misuse gets a clear error, never a hang.
/// (`get_blocking` does name it: "the runtime the pool was built on has shut down".)
///
/// Steps: `Registry::new()` shared by two runtimes, as a process-wide registry is by two
/// `#[tokio::test]`s: the first builds the pool and borrows; its runtime ends. The second
/// asks the registry for the same string and borrows twice (borrow_timeout 2 s).
///
/// What happened: no hang past the borrow timeout, but the second borrow waits all of it
/// (the sub-pool's opener ran on the dead runtime) and then fails with "no connection became
/// free within 2s (1 of 2 open, all in use); return connections sooner, raise max_size, or
/// raise the borrow timeout": nothing is in use, and the advice is wrong. With the default
/// borrow timeout every borrow of a test's registry pool waits 30 s.
#[test]
fn a_registry_pool_outliving_its_runtime_fails_clearly() {
    let cluster = Cluster::start().unwrap();
    let registry = Registry::new();
    let url = hosts(&[cluster.port()], "");
    {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let pool = registry
                .pool(&url, |b| {
                    b.pool_config(slipstream_pool::Config {
                        max_size: 2,
                        borrow_timeout: Duration::from_secs(2),
                        ..slipstream_pool::Config::default()
                    })
                })
                .unwrap();
            common_until(Duration::from_secs(5), "up", || pool.servers()[0].up).await;
            let c = pool.get(Role::Any).await.unwrap();
            drop(c);
        });
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(async {
        let pool = registry.pool(&url, |b| b.max_size(2)).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), async {
            let a = pool.get(Role::Any).await?;
            let b = pool.get(Role::Any).await?;
            Ok::<_, PoolError>((a, b))
        })
        .await;
        match got {
            Err(_) => Err("two borrows hung for 5 s".to_string()),
            Ok(Err(e)) => Ok(format!("error: {e}")),
            Ok(Ok(_)) => Ok("served".to_string()),
        }
    });
    eprintln!("{r:?}");
    assert!(
        r.as_ref().is_ok_and(|m| m.contains("runtime")),
        "{r:?}: after the pool's runtime ended, borrows wait their whole borrow timeout and \
         then blame the caller (\"all in use\"), where get_blocking names the runtime"
    );
}

/// Low (undocumented): two servers that both say they are primaries (a standby promoted
/// while the old primary still runs: split brain). docs/pool.md does not say what the pool
/// does; attack3 accepts "Role::Primary may go to either". This test shows writes from one
/// pool land on both, diverging, with nothing reported. It fails to ask for a decision: a
/// documented rule (refuse Role::Primary while two primaries are seen, or prefer the first
/// listed, or a warning), not silently spreading writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_does_not_spread_writes_over_two_primaries_silently() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    primary.psql("CREATE TABLE attack_sb (x int)").unwrap();
    common_until(Duration::from_secs(5), "replicated", || {
        standby
            .psql("SELECT count(*) FROM pg_class WHERE relname = 'attack_sb'")
            .unwrap()
            == "1"
    })
    .await;
    let pool = ready_pool(&[primary.port(), standby.port()], 4).await;
    standby.psql("SELECT pg_promote(true, 30)").unwrap();
    // Any borrow that reads the new in_hot_standby teaches the pool (or the role probe does).
    match pool.get(Role::Standby).await {
        Ok(mut c) => c.batch_execute("SELECT 1").await.unwrap(),
        // The pool learned the promotion already.
        Err(PoolError::NoServer { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    common_until(Duration::from_secs(5), "the promotion is learned", || {
        pool.servers()[1].role == ServerRole::Primary
    })
    .await;
    for i in 0..4 {
        let held: Vec<_> = futures_util::future::join_all((0..2).map(|_| pool.get(Role::Primary)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        for mut c in held {
            c.batch_execute(&format!("INSERT INTO attack_sb VALUES ({i})"))
                .await
                .unwrap();
        }
    }
    let (on_p, on_s) = (
        primary.psql("SELECT count(*) FROM attack_sb").unwrap(),
        standby.psql("SELECT count(*) FROM attack_sb").unwrap(),
    );
    assert!(
        on_p == "0" || on_s == "0",
        "8 writes of one pool split over two primaries: {on_p} on the old, {on_s} on the \
         promoted one; servers {:?}",
        pool.servers()
            .iter()
            .map(|s| (&s.name, s.role))
            .collect::<Vec<_>>()
    );
}

/// BREAK (High: connections beyond max_size).
///
/// Promise: "Shares add up to max_size, and so do the connections open"; the monitor gives a
/// down or drained server's part out "as they close" (`rebalance_shares`: "So the
/// connections open never pass `max_size`"); on return "the others shed their surplus as
/// connections return".
///
/// Steps: A and B (independent primaries), max_size 4, application_name set. B is drained:
/// A's share is 4, and 4 `Role::Any` borrows are held, all on A. B is resumed (or comes back
/// after a failover: the same rebalance): A's share is 2, B's 2. Two more `Role::Any`
/// borrows (fewest outstanding: B) are held.
///
/// What happened: only a down or drained server's open connections are held back; a serving
/// server's surplus above its new share is not, so B opens its whole share at once while A
/// still has 4 lent: 6 connections open (pool stats and pg_stat_activity) for max_size 4,
/// until A's borrowers return theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_server_does_not_open_past_max_size() {
    let a = Cluster::start().unwrap();
    let b = Cluster::start().unwrap();
    let pool = PgPool::builder(
        hosts(&[a.port(), b.port()], "application_name=attack_resume")
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
    pool.drain(&names[1]).unwrap();
    let mut held: Vec<_> = Vec::new();
    for _ in 0..4 {
        held.push(
            tokio::time::timeout(T, pool.get(Role::Any))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(held.iter().all(|c| c.server() == names[0]));
    pool.resume(&names[1]).unwrap();
    for _ in 0..2 {
        match tokio::time::timeout(T, pool.get(Role::Any)).await.unwrap() {
            Ok(c) => held.push(c),
            Err(e) => eprintln!("{e}"),
        }
    }
    let open = open_total(&pool);
    let backends = backends(&a, "attack_resume") + backends(&b, "attack_resume");
    let s = pool.servers();
    drop(held);
    assert!(
        open <= 4 && backends <= 4,
        "max_size 4, but {open} connections open ({backends} backends): {:?}",
        s.iter()
            .map(|s| (&s.name, s.stats.max_size, s.stats.open))
            .collect::<Vec<_>>()
    );
}

/// BREAK (Low: input accepted that the pool cannot manage).
///
/// A host listed twice (`host=h,h port=p,p`, e.g. a copy-paste in a config) is two "servers"
/// with the same name, each with half of max_size. `drain(name)` drains only the first
/// (`[true, false]`), and `Role::Any` still lends connections to that same server through its
/// twin: planned maintenance of that server does not take it out. Expected: refused at build
/// (naming the duplicate), or merged; at least drain/resume all servers of that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_listed_twice_is_refused_or_merged() {
    let a = Cluster::start().unwrap();
    let r = PgPool::builder(hosts(&[a.port(), a.port()], "").parse().unwrap())
        .max_size(4)
        .build_ready()
        .await;
    if let Ok(pool) = r {
        let s = pool.servers();
        let name = s[0].name.clone();
        pool.drain(&name).unwrap();
        let s = pool.servers();
        let drained: Vec<bool> = s.iter().map(|s| s.drained).collect();
        // Role::Any still lends from the "drained" server through its twin.
        let c = pool.get(Role::Any).await.unwrap();
        panic!(
            "{name} listed twice: {} servers of that name; drain({name:?}) drained {drained:?}, \
             and a borrow still went to {}",
            s.len(),
            c.server()
        );
    }
}

/// holds. Promise (Failover): "Bound: a borrower sees at most one failed statement per idle
/// connection it held to the failed server"; waiting borrowers "re-pick another server".
///
/// Steps: primary P and standby S, max_size 8 (S's share 4). S warmed with 4 idle
/// connections, then stopped. 16 concurrent `Role::PreferStandby` borrowers, each borrowing
/// and running one statement until one succeeds (at most 10 tries each). Count every failed
/// statement and failed borrow across all of them; the idle connections to S were 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_borrowers_see_at_most_one_failure_per_idle_connection() {
    let primary = Cluster::start().unwrap();
    let mut standby = primary.start_standby().unwrap();
    let pool = ready_pool(&[primary.port(), standby.port()], 8).await;
    {
        let held: Vec<_> =
            futures_util::future::join_all((0..4).map(|_| pool.get(Role::Standby))).await;
        assert!(held.iter().all(Result::is_ok));
    }
    assert_eq!(pool.servers()[1].stats.idle, 4);
    standby.stop().unwrap();
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let pool = pool.clone();
            let failures = failures.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let r = tokio::time::timeout(T, async {
                        let mut c = pool
                            .get(Role::PreferStandby)
                            .await
                            .map_err(|e| e.to_string())?;
                        c.batch_execute("SELECT 1")
                            .await
                            .map_err(|e| format!("{}: {e}", c.server()))?;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        Ok::<_, String>(())
                    })
                    .await
                    .expect("a borrow hung");
                    match r {
                        Ok(()) => return,
                        Err(e) => failures.lock().unwrap().push(e),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let f = failures.lock().unwrap().clone();
    assert!(
        f.len() <= 4,
        "{} failures for 4 idle connections: {f:#?}",
        f.len()
    );
}

/// holds. Promise (general): a dropped (cancelled) borrow never leaves the pool inconsistent (no
/// leaked share or slot, outstanding counts back to 0), across failover, drain, resume and
/// resize; after it all settles the pool lends max_size connections, the shares add up, and
/// no connection is left open beyond max_size (pg_stat_activity).
///
/// Steps: primary P and standby S, max_size 6, borrow_timeout 3 s, application_name set.
/// 12 tasks borrow in a loop with random roles, cancelling each borrow after 0-3 ms or
/// running a statement (a write on Role::Primary) and holding 0-2 ms, while the main task
/// stops S, drains P, resumes P, restarts S, resizes to 9, 3 and 6. Then the checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_borrows_across_failover_drain_and_resize_lose_nothing() {
    let primary = Cluster::start().unwrap();
    let mut standby = primary.start_standby().unwrap();
    primary.psql("CREATE TABLE attack_c (x int)").unwrap();
    let pool = PgPool::builder(
        hosts(
            &[primary.port(), standby.port()],
            "application_name=attack_cancel",
        )
        .parse()
        .unwrap(),
    )
    .pool_config(slipstream_pool::Config {
        max_size: 6,
        borrow_timeout: Duration::from_secs(3),
        ..slipstream_pool::Config::default()
    })
    .build_ready()
    .await
    .unwrap();
    let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let wrong = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let tasks: Vec<_> = (0..12u64)
        .map(|i| {
            let pool = pool.clone();
            let stop = stop.clone();
            let wrong = wrong.clone();
            tokio::spawn(async move {
                let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                while !stop.load(Ordering::Relaxed) {
                    let role = [Role::Primary, Role::Standby, Role::PreferStandby, Role::Any]
                        [(next() % 4) as usize];
                    if next() % 2 == 0 {
                        let _ = tokio::time::timeout(
                            Duration::from_micros(next() % 3000),
                            pool.get(role),
                        )
                        .await;
                        tokio::task::yield_now().await;
                        continue;
                    }
                    let Ok(Ok(mut c)) =
                        tokio::time::timeout(Duration::from_secs(10), pool.get(role)).await
                    else {
                        // NoServer answers at once: yield, or this loop never does.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    };
                    if role == Role::Primary {
                        if let Err(e) = c.batch_execute("INSERT INTO attack_c VALUES (1)").await
                            && e.to_string().contains("read-only")
                        {
                            wrong.lock().unwrap().push(format!("{}: {e}", c.server()));
                        }
                    } else {
                        let _ = c.batch_execute("SELECT 1").await;
                    }
                    tokio::time::sleep(Duration::from_micros(next() % 2000)).await;
                }
            })
        })
        .collect();
    let pause = || tokio::time::sleep(Duration::from_millis(300));
    pause().await;
    standby.stop().unwrap();
    pause().await;
    pool.drain(&names[0]).unwrap();
    pause().await;
    pool.resize(9);
    pool.resume(&names[0]).unwrap();
    pause().await;
    standby.restart().unwrap();
    pause().await;
    pool.resize(3);
    pause().await;
    pool.resize(6);
    pause().await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(T, t)
            .await
            .expect("a task hung")
            .unwrap();
    }
    common_until(Duration::from_secs(8), "settled", || {
        let s = pool.servers();
        s.iter()
            .all(|s| s.up && s.outstanding == 0 && s.stats.waiting == 0)
            && shares(&pool) == 6
            && s.iter().all(|s| s.stats.open <= s.stats.max_size)
    })
    .await;
    let held: Vec<_> = futures_util::future::join_all(
        (0..6).map(|_| tokio::time::timeout(Duration::from_secs(5), pool.get(Role::Any))),
    )
    .await
    .into_iter()
    .map(|r| r.expect("hung").expect("a borrow failed"))
    .collect();
    let n = backends(&primary, "attack_cancel") + backends(&standby, "attack_cancel");
    assert!(n <= 6, "{n} backends for max_size 6: {:?}", pool.servers());
    drop(held);
    let w = wrong.lock().unwrap().clone();
    assert!(w.is_empty(), "writes sent to a standby: {w:?}");
}

/// holds. Wrong password on one host only: that host is down with the server's message, the
/// others serve every role they can, and the pool still lends max_size connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_on_one_host_leaves_it_down_and_named() {
    let a = Cluster::start().unwrap();
    let b = Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .start()
        .unwrap();
    b.psql("ALTER ROLE postgres PASSWORD 'right'").unwrap();
    let pool = PgPool::builder(
        hosts(&[a.port(), b.port()], "password=wrong")
            .parse()
            .unwrap(),
    )
    .max_size(4)
    .build_ready()
    .await
    .unwrap();
    let s = pool.servers();
    assert!(s[0].up && !s[1].up, "{s:?}");
    let err = pool.get(Role::Standby).await.unwrap_err();
    assert!(err.to_string().contains("password"), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held: Vec<_> = futures_util::future::join_all(
        (0..4).map(|_| tokio::time::timeout(Duration::from_secs(5), pool.get(Role::Primary))),
    )
    .await
    .into_iter()
    .map(|r| r.expect("hung").expect("a borrow failed"))
    .collect();
    assert!(held.iter().all(|c| c.server() == s[0].name));
}

/// Runs the ignored test `name` of this binary in a child process (for a build that may
/// abort the process); returns its success and output.
fn run_child(name: &str) -> (bool, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "status {:?}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// BREAK (High: bad input aborts the process).
///
/// Promise (general): bad input gets a clear error, never a panic; `PgPoolBuilder::build`
/// returns `PoolError::Config` for a bad pool ("max_size is below the servers listed" is
/// refused that way).
///
/// Steps (in a child process): `PgPool::builder(two hosts).max_size(usize::MAX).build()`,
/// and `max_size(1 << 40)`, on a runtime. Nothing is connected.
///
/// What happened: every sub-pool allocates a slot array as long as the total (`max(max_size,
/// 64)`, the resize limit), so the build panics with "capacity overflow" (usize::MAX) or
/// aborts the whole process: "memory allocation of 422212465065984 bytes failed" (2^40,
/// 384 bytes a slot), instead of a `PoolError::Config` naming a limit. Each of N sub-pools
/// gets the whole total's slots: N times the memory (max_size 10 million over 3 hosts asks
/// for about 11.5 GB).
#[test]
fn a_huge_max_size_is_refused_not_a_crash() {
    for name in ["huge_max_size_child_max", "huge_max_size_child_2_40"] {
        let (ok, out) = run_child(name);
        assert!(ok, "{name}: the build crashed:\n{out}");
    }
}

fn huge_build(n: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = PgPool::builder(hosts(&[1, 2], "").parse().unwrap())
            .max_size(n)
            .build();
        match r {
            Err(PoolError::Config(m)) => eprintln!("refused: {m}"),
            Err(e) => panic!("other error {e}"),
            Ok(_) => panic!("accepted max_size {n}"),
        }
    });
}

#[test]
#[ignore = "run by a_huge_max_size_is_refused_not_a_crash in a child process"]
fn huge_max_size_child_max() {
    huge_build(usize::MAX);
}

#[test]
#[ignore = "run by a_huge_max_size_is_refused_not_a_crash in a child process"]
fn huge_max_size_child_2_40() {
    huge_build(1 << 40);
}

/// BREAK (Medium: misuse hangs instead of a clear error).
///
/// Promise (general): bad input or misuse gets a clear error, never a hang. `get_blocking`
/// says "Do not call it from a task on that runtime (it blocks the worker thread)".
///
/// Steps: a pool over one server built on a current-thread runtime; from a task on that
/// runtime, the pool's single connection held, `get_blocking(Role::Any)` (borrow_timeout
/// 1 s). The test waits 5 s for an answer.
///
/// What happened: no answer, ever: the borrow runs as a task on the runtime whose only
/// thread `get_blocking` is blocking, so neither it nor its borrow timeout can run. A
/// one-line check (`tokio::runtime::Handle::try_current()` is the pool's runtime, or any
/// runtime: tokio's own `block_on` panics there with a clear message) would turn this into
/// an error. (The thread stays blocked; the test leaves it.)
#[test]
fn get_blocking_inside_the_pools_runtime_fails_instead_of_hanging() {
    let cluster = Cluster::start().unwrap();
    let url = hosts(&[cluster.port()], "");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let pool = PgPool::builder(url.parse().unwrap())
                .pool_config(slipstream_pool::Config {
                    max_size: 1,
                    borrow_timeout: Duration::from_secs(1),
                    ..slipstream_pool::Config::default()
                })
                .build_ready()
                .await
                .unwrap();
            let _held = pool.get(Role::Any).await.unwrap();
            let r = pool.get_blocking(Role::Any).map(|_| ());
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
    });
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok(r) => eprintln!("answered: {r:?}"),
        Err(_) => panic!(
            "get_blocking from a task on the pool's own runtime hung (no answer in 5 s; \
             borrow_timeout 1 s)"
        ),
    }
}

/// holds (first write 4-5 ms after the promotion).
///
/// Promise (Promotion): "a borrow that finds no server of its role asks for a probe at once".
/// After the primary stops and the standby is promoted (pg_promote waited for), how long
/// until a `Role::Primary` borrow (retried every 10 ms) gets a connection that takes writes?
/// Expected well under a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_is_found_at_once_by_a_primary_borrow() {
    let mut primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = ready_pool(&[primary.port(), standby.port()], 4).await;
    drop(pool.get(Role::Primary).await.unwrap());
    primary.stop().unwrap();
    // The pool learns the primary is down.
    if let Ok(mut c) = pool.get(Role::Primary).await {
        let _ = c.batch_execute("SELECT 1").await;
    }
    common_until(Duration::from_secs(5), "primary down", || {
        !pool.servers()[0].up
    })
    .await;
    standby.psql("SELECT pg_promote(true, 30)").unwrap();
    let start = Instant::now();
    let mut errors = Vec::new();
    loop {
        match tokio::time::timeout(T, pool.get(Role::Primary))
            .await
            .unwrap()
        {
            Ok(mut c) => match c.batch_execute("CREATE TABLE attack_p (x int)").await {
                Ok(()) => break,
                Err(e) => errors.push(e.to_string()),
            },
            Err(e) => errors.push(e.to_string()),
        }
        assert!(start.elapsed() < T, "{errors:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    eprintln!("first write after {took:?}, {} failed tries", errors.len());
    assert!(took < Duration::from_millis(500), "{took:?}: {errors:?}");
}

/// BREAK (High: connections beyond max_size), the failover form of
/// `resuming_a_server_does_not_open_past_max_size`.
///
/// Steps: A and B (independent primaries), max_size 4. B stops; once it is marked down and
/// its connections are closed, A's share is 4 and 4 `Role::Any` borrows are held on A. B
/// restarts; once it is back up, two more `Role::Any` borrows (they go to B).
///
/// What happened: as with resume, B opens its new share at once while A keeps its 4 lent:
/// 6 connections open for max_size 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_back_from_failover_does_not_open_past_max_size() {
    let a = Cluster::start().unwrap();
    let mut b = Cluster::start().unwrap();
    let pool = PgPool::builder(
        hosts(&[a.port(), b.port()], "application_name=attack_back")
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
    {
        // Two connections on each.
        let held: Vec<_> = futures_util::future::join_all((0..4).map(|_| pool.get(Role::Any)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(held.iter().filter(|c| c.server() == names[1]).count(), 2);
    }
    b.stop().unwrap();
    // Borrows that land on B find their connections broken: the monitor probes it.
    for _ in 0..4 {
        let got = futures_util::future::join_all((0..4).map(|_| async {
            if let Ok(Ok(mut c)) =
                tokio::time::timeout(Duration::from_secs(5), pool.get(Role::Any)).await
            {
                let _ = c.batch_execute("SELECT 1").await;
            }
        }));
        got.await;
        if !pool.servers()[1].up {
            break;
        }
    }
    common_until(Duration::from_secs(5), "B down, A's share 4", || {
        let s = pool.servers();
        !s[1].up && s[0].stats.max_size == 4
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(
            tokio::time::timeout(T, pool.get(Role::Any))
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(held.iter().all(|c| c.server() == names[0]));
    b.restart().unwrap();
    common_until(Duration::from_secs(10), "B back up", || {
        pool.servers()[1].up
    })
    .await;
    for _ in 0..2 {
        match tokio::time::timeout(T, pool.get(Role::Any)).await.unwrap() {
            Ok(c) => held.push(c),
            Err(e) => eprintln!("{e}"),
        }
    }
    let open = open_total(&pool);
    let n = backends(&a, "attack_back") + backends(&b, "attack_back");
    let s = pool.servers();
    drop(held);
    assert!(
        open <= 4 && n <= 4,
        "max_size 4, but {open} connections open ({n} backends): {:?}",
        s.iter()
            .map(|s| (&s.name, s.stats.max_size, s.stats.open))
            .collect::<Vec<_>>()
    );
}

/// Promise (docs/pool.md, "Failover"): a failed connect makes the monitor probe that server
/// at once; if it cannot connect it is marked down and "a borrow for a role no server can
/// serve fails at once with `PoolError::NoServer`"; the move "takes 1-2 ms after the server
/// stops (connection refused; an unreachable host takes up to its `connect_timeout`)".
///
/// Steps: a pool over one primary, nothing borrowed yet (its sub-pool holds no connection).
/// The server stops (connection refused from then on). A `Role::Standby` borrow fails with
/// `NoServer`, which asks for a role probe. Then a `Role::Primary` borrow.
///
/// What happened: the role probe found no idle connection and room in the share, so it
/// waited in the sub-pool's queue (`server.pool.get()` under a 5 s timeout) while the
/// sub-pool's opener was refused again and again. Its `probing` flag kept the monitor from
/// running the connect probe the refusals asked for, so the stopped server stayed "up" for
/// the whole 5 s, and the `Role::Primary` borrow waited on it ~5 s instead of failing at
/// once with `NoServer`. Before 7f02240 the role probe opened a probe connection of its
/// own, was refused, and marked the server down at once. (Session 36's attacker; fixed by
/// ending the probe's wait when the sub-pool's open fails.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn break_a_role_probe_waiting_in_the_sub_pool_keeps_a_stopped_server_up() {
    let mut primary = Cluster::start().unwrap();
    let pool = PgPool::builder(hosts(&[primary.port()], "").parse().unwrap())
        .max_size(4)
        .build_ready()
        .await
        .unwrap();
    assert_eq!(pool.servers()[0].stats.open, 0, "{:?}", pool.servers());
    primary.stop().unwrap();
    // A borrow for a role no server serves: NoServer, and a role probe asked for.
    match pool.get(Role::Standby).await {
        Err(PoolError::NoServer { .. }) => {}
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(20), pool.get(Role::Primary))
        .await
        .expect("the borrow hung for 20 s");
    let took = start.elapsed();
    eprintln!("Role::Primary on a stopped server: {got:?} after {took:?}");
    assert!(
        matches!(got, Err(PoolError::NoServer { .. })) && took < Duration::from_millis(500),
        "a Role::Primary borrow of a pool whose only server had stopped (connection refused) \
         answered {got:?} after {took:?}, not NoServer at once; servers {:?}",
        pool.servers()
    );
}

/// Holds: with role probes asked every 5 ms (a `Role::Primary` loop failing with NoServer
/// after the primary stopped), `Role::Standby` borrowers cancelled at every poll and others
/// holding briefly, and resizes between 2 and 5: nothing lent is lost (outstanding and
/// borrowed go back to 0), the connections open stay within max_size once returns settle,
/// and no `Role::Primary` borrow gets the standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_cancelled_borrows_and_resizes_under_asked_probes() {
    use std::future::Future;
    use std::task::Poll;
    let mut primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let pool = ready_pool(&[primary.port(), standby.port()], 4).await;
    primary.stop().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..3 {
        let (pool, stop) = (pool.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                if k == 0 {
                    match pool.get(Role::Primary).await {
                        Err(PoolError::NoServer { .. }) => {}
                        Ok(c) => panic!("Role::Primary got {}", c.server()),
                        Err(e) => panic!("{e:?}"),
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                } else if n.is_multiple_of(2) {
                    // Cancelled at its first poll.
                    let mut f = Box::pin(pool.get(Role::Standby));
                    let _ = std::future::poll_fn(|cx| {
                        let _ = f.as_mut().poll(cx);
                        Poll::Ready(())
                    })
                    .await;
                    tokio::task::yield_now().await;
                } else if let Ok(Ok(mut c)) =
                    tokio::time::timeout(Duration::from_secs(10), pool.get(Role::Standby)).await
                {
                    let _ = c.simple_query("SELECT 1").await;
                }
            }
        }));
    }
    for size in [2, 5, 3, 2, 5, 2, 4] {
        pool.resize(size);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    common_until(
        Duration::from_secs(5),
        "nothing outstanding or lent, open within max_size",
        || {
            let s = pool.servers();
            s.iter()
                .all(|s| s.outstanding == 0 && s.stats.borrowed == 0)
                && s.iter().map(|s| s.stats.open).sum::<usize>() <= 4
        },
    )
    .await;
}
