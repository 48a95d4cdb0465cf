//! Helpers shared by the pool's integration tests (each test binary uses some of them).
#![allow(dead_code)]

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slipstream_pool::{Manager, PgPool, Pool};
use slipstream_testkit::Cluster;

/// Polls `state` every 5 ms until `done` holds for it, failing with `what` and the last state
/// after `limit`; returns the time it took.
pub async fn until<S: Debug>(
    limit: Duration,
    what: &str,
    state: impl Fn() -> S,
    done: impl Fn(&S) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let s = state();
        if done(&s) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: {s:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `n` borrowers are queued on `pool` (so a return now hands over to them).
pub async fn until_waiting<M: Manager>(pool: &Pool<M>, n: usize) {
    until(
        Duration::from_secs(5),
        "the borrower queues",
        || pool.stats(),
        |s| s.waiting == n,
    )
    .await;
}

/// A PgPool URL over two independent primaries (no replication: for tests about shares and
/// routing, where any role will do).
pub fn two_primaries_url(a: &Cluster, b: &Cluster) -> String {
    hosts(&[a.port(), b.port()], "")
}

/// A PgPool URL over the servers on `ports` of 127.0.0.1, as postgres without TLS, with
/// `extra` parameters.
pub fn hosts(ports: &[u16], extra: &str) -> String {
    let h: Vec<&str> = ports.iter().map(|_| "127.0.0.1").collect();
    let p: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!(
        "host={} port={} user=postgres dbname=postgres sslmode=disable {extra}",
        h.join(","),
        p.join(",")
    )
}

/// The sum of the servers' shares of `max_size`.
pub fn shares_total(pool: &PgPool) -> usize {
    pool.servers().iter().map(|s| s.stats.max_size).sum()
}

/// The connections open over all the servers.
pub fn open_total(pool: &PgPool) -> usize {
    pool.servers().iter().map(|s| s.stats.open).sum()
}

/// Watches the holders of a pool's connections (numbered by the manager, below `ids`): each
/// connection held by one holder at a time, and at most `max` held at once.
pub struct Holds {
    in_use: Vec<std::sync::atomic::AtomicBool>,
    now: std::sync::atomic::AtomicUsize,
    max: usize,
}

impl Holds {
    pub fn new(ids: usize, max: usize) -> Holds {
        Holds {
            in_use: (0..ids)
                .map(|_| std::sync::atomic::AtomicBool::new(false))
                .collect(),
            now: std::sync::atomic::AtomicUsize::new(0),
            max,
        }
    }

    /// Marks connection `id` held; panics if another holder has it or too many are held.
    pub fn take(&self, id: u64) {
        use std::sync::atomic::Ordering::SeqCst;
        let id = id as usize;
        assert!(
            id < self.in_use.len(),
            "connection {id}: more opened than the test allows"
        );
        assert!(
            !self.in_use[id].swap(true, SeqCst),
            "connection {id} lent to two holders at once"
        );
        let now = self.now.fetch_add(1, SeqCst) + 1;
        assert!(
            now <= self.max,
            "{now} connections held at once, max_size {}",
            self.max
        );
    }

    /// Marks connection `id` given back (call before dropping the guard).
    pub fn give_back(&self, id: u64) {
        use std::sync::atomic::Ordering::SeqCst;
        self.now.fetch_sub(1, SeqCst);
        assert!(self.in_use[id as usize].swap(false, SeqCst));
    }
}

/// After a run: waits (bounded) until nothing is lent or queued, then checks that the counts
/// add up (every open connection IDLE) and that every open connection can be borrowed at once.
pub async fn all_back<M: Manager>(pool: &Pool<M>) -> slipstream_pool::Stats {
    until(
        Duration::from_secs(10),
        "connections come back and the queue empties",
        || pool.stats(),
        |s| s.borrowed == 0 && s.waiting == 0,
    )
    .await;
    let s = pool.stats();
    assert_eq!(s.idle, s.open, "open but not idle: {s:?}");
    assert!(s.open <= s.max_size, "more open than max_size: {s:?}");
    assert_eq!(
        s.waits,
        s.wait_histogram_us.iter().sum::<u64>(),
        "the histogram does not sum to waits: {s:?}"
    );
    let held: Vec<_> = (0..s.open).map(|_| pool.try_get()).collect();
    assert!(
        held.iter().all(Option::is_some),
        "an idle connection could not be borrowed: {s:?}"
    );
    s
}

/// Joins OS threads that borrow with `get_blocking`, each by `deadline`; a thread still running
/// then is a hang, reported with the pool's stats. Returns what each thread returned, in order.
pub fn join_threads<M: Manager, T>(
    pool: &Pool<M>,
    threads: Vec<std::thread::JoinHandle<T>>,
    deadline: Instant,
) -> Vec<T> {
    threads
        .into_iter()
        .map(|t| {
            while !t.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "a thread hung in get_blocking: {:?}",
                    pool.stats()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            t.join().expect("a borrower thread panicked")
        })
        .collect()
}

/// A connection that is just a number (its opening order): the core's behaviour, no database.
pub struct Numbers(pub AtomicU64);
impl Manager for Numbers {
    type Connection = u64;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// A [`Numbers`] manager counting from 0.
pub fn numbers() -> Numbers {
    Numbers(AtomicU64::new(0))
}

/// A pool of one [`Numbers`] connection with `borrow_timeout`, and that connection, borrowed:
/// the next borrow waits.
pub async fn one_held(
    borrow_timeout: Duration,
) -> (Pool<Numbers>, slipstream_pool::Pooled<Numbers>) {
    let pool = Pool::builder(numbers())
        .max_size(1)
        .borrow_timeout(borrow_timeout)
        .build_ready()
        .await
        .expect("one connection opens");
    let held = pool.get().await.expect("the idle connection");
    (pool, held)
}

/// A multi-threaded runtime with two workers (this machine's cores), timers on.
pub fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Ends `pid`'s session from another connection, then gives the runtime time to poll its I/O
/// driver, as any running application's does between borrows.
pub async fn terminate(cluster: &Cluster, pid: i32) {
    let mut killer = slipstream_pg::connect(&cluster.url()).await.unwrap();
    killer
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(
        cluster
            .backend_gone_within(pid, Duration::from_secs(10))
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Runs the future `make` returns on a current-thread runtime whose clock starts paused
/// (`start_paused`, as users test timeouts), in a thread of its own, and returns its output.
/// Fails the test when that takes more than 10 s of real time; `what` says what should have
/// happened by then.
pub fn in_paused_time<T, F>(make: impl FnOnce() -> F + Send + 'static, what: &str) -> T
where
    T: Send + 'static,
    F: std::future::Future<Output = T>,
{
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let _ = done.send(rt.block_on(make()));
    });
    result
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{what} within 10 s of real time: {e}"))
}
