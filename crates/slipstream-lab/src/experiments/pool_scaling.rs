//! `pool-scaling`: article 002's benchmark. Six connections, T borrowers each looping borrow ->
//! return, T from 10 to 10,000; borrows per second, borrow-wait percentiles and fairness per
//! T, as OS threads (blocking API) and as tokio tasks (async API). The connection is a trivial
//! in-memory value, the same for every pool, so the pools alone are measured.
//!
//! Tasks hold the connection across one `yield_now`: a task that never yields while holding
//! keeps its worker thread and starves the rest, and the benchmark would measure nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::pool_peers::{B8, Dead, MutexPool, Ours, R2};
use crate::{Context, ExperimentResult, Table, environment};

pub(crate) const TITLE: &str = "Pool scaling: borrowers from 10 to 10,000 on six connections";

const CONNECTIONS: usize = 6;
const GENEROUS: Duration = Duration::from_secs(120);

/// Wait times in log-linear buckets: 16 per power of two of nanoseconds (about 4% wide).
#[derive(Clone)]
struct Waits {
    buckets: Vec<u64>,
    max_ns: u64,
}

const SUB: usize = 16;

impl Waits {
    fn new() -> Waits {
        Waits {
            buckets: vec![0; 64 * SUB],
            max_ns: 0,
        }
    }

    fn record(&mut self, d: Duration) {
        let ns = (d.as_nanos() as u64).max(1);
        self.max_ns = self.max_ns.max(ns);
        self.buckets[bucket(ns)] += 1;
    }

    fn merge(&mut self, other: &Waits) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The wait at quantile `q`, in microseconds (the bucket's upper edge).
    fn quantile_us(&self, q: f64) -> f64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let want = ((total as f64) * q).ceil() as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return upper_edge(i) as f64 / 1e3;
            }
        }
        self.max_ns as f64 / 1e3
    }
}

fn bucket(ns: u64) -> usize {
    let p = 63 - ns.leading_zeros() as usize;
    if p < 4 {
        return ns as usize;
    }
    let sub = ((ns >> (p - 4)) & (SUB as u64 - 1)) as usize;
    p * SUB + sub
}

fn upper_edge(i: usize) -> u64 {
    let (p, sub) = (i / SUB, i % SUB);
    if p < 4 {
        return i as u64 + 1;
    }
    ((SUB + sub + 1) as u64) << (p - 4)
}

/// One borrower's record.
struct Borrower {
    borrows: u64,
    /// Borrows (or their query) that failed: not counted in `borrows`.
    failures: u64,
    waits: Waits,
}

/// One (pool, T) run.
struct Run {
    pool: &'static str,
    borrowers: usize,
    per_sec: f64,
    waits: Waits,
    zero: usize,
    min: u64,
    max: u64,
    jain: f64,
    failures: u64,
}

impl Run {
    /// The run's table row; `ours` is slipstream-pool's rate at the same T.
    fn cells(&self, kind: &str, ours: f64) -> Vec<String> {
        vec![
            kind.into(),
            self.borrowers.to_string(),
            self.pool.into(),
            format!("{:.0}", self.per_sec),
            format!("{:.1}", self.waits.quantile_us(0.5)),
            format!("{:.1}", self.waits.quantile_us(0.99)),
            format!("{:.1}", self.waits.quantile_us(0.999)),
            format!("{:.0}", self.waits.max_ns as f64 / 1e3),
            self.zero.to_string(),
            format!("{} … {}", self.min, self.max),
            format!("{:.3}", self.jain),
            format!("{:.2}x", ours / self.per_sec.max(1e-9)),
        ]
    }
}

fn summarize(pool: &'static str, seconds: f64, records: Vec<Borrower>) -> Run {
    let mut waits = Waits::new();
    for r in &records {
        waits.merge(&r.waits);
    }
    let counts: Vec<u64> = records.iter().map(|r| r.borrows).collect();
    let total: u64 = counts.iter().sum();
    let failures = records.iter().map(|r| r.failures).sum();
    let sum_sq: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    Run {
        pool,
        borrowers: counts.len(),
        per_sec: total as f64 / seconds,
        waits,
        zero: counts.iter().filter(|&&c| c == 0).count(),
        min: counts.iter().copied().min().unwrap_or(0),
        max: counts.iter().copied().max().unwrap_or(0),
        jain: if sum_sq > 0.0 {
            (total as f64).powi(2) / (counts.len() as f64 * sum_sq)
        } else {
            0.0
        },
        failures,
    }
}

// ---- threads ----

/// Runs `borrowers` OS threads, each looping `borrow` (which borrows and returns once) for
/// `duration` after a common start.
fn threads(
    borrowers: usize,
    duration: Duration,
    borrow: Arc<dyn Fn() -> bool + Send + Sync>,
) -> anyhow::Result<(f64, Vec<Borrower>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(borrowers + 1));
    let mut handles = Vec::with_capacity(borrowers);
    for _ in 0..borrowers {
        let (stop, start, borrow) = (stop.clone(), start.clone(), borrow.clone());
        handles.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut me = Borrower {
                        borrows: 0,
                        failures: 0,
                        waits: Waits::new(),
                    };
                    start.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        if borrow() {
                            me.waits.record(t.elapsed());
                            me.borrows += 1;
                        } else {
                            me.failures += 1;
                        }
                    }
                    me
                })?,
        );
    }
    start.wait();
    let t = Instant::now();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut records = Vec::with_capacity(borrowers);
    for h in handles {
        records.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a borrower thread panicked"))?,
        );
    }
    Ok((t.elapsed().as_secs_f64(), records))
}

// ---- tasks ----

async fn tasks<F, Fut>(
    borrowers: usize,
    duration: Duration,
    borrow: F,
) -> anyhow::Result<(f64, Vec<Borrower>)>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::with_capacity(borrowers);
    for _ in 0..borrowers {
        let (stop, go, started, borrow) =
            (stop.clone(), go.clone(), started.clone(), borrow.clone());
        handles.push(tokio::spawn(async move {
            let mut me = Borrower {
                borrows: 0,
                failures: 0,
                waits: Waits::new(),
            };
            let notified = go.notified();
            if !started.load(Ordering::Acquire) {
                notified.await;
            }
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if borrow().await {
                    me.waits.record(t.elapsed());
                    me.borrows += 1;
                } else {
                    me.failures += 1;
                }
            }
            me
        }));
    }
    // Let every task reach its start line.
    tokio::time::sleep(Duration::from_millis(20)).await;
    started.store(true, Ordering::Release);
    go.notify_waiters();
    let t = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut records = Vec::with_capacity(borrowers);
    for h in handles {
        records.push(
            h.await
                .map_err(|e| anyhow::anyhow!("a borrower task failed: {e}"))?,
        );
    }
    Ok((t.elapsed().as_secs_f64(), records))
}

// ---- real PostgreSQL connections: each pool with its usual client ----

struct DeadPg(tokio_postgres::Config);
impl deadpool::managed::Manager for DeadPg {
    type Type = tokio_postgres::Client;
    type Error = tokio_postgres::Error;
    async fn create(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, connection) = self.0.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }
    async fn recycle(
        &self,
        c: &mut tokio_postgres::Client,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<tokio_postgres::Error> {
        if c.is_closed() {
            return Err(deadpool::managed::RecycleError::message("closed"));
        }
        Ok(())
    }
}

struct B8Pg(tokio_postgres::Config);
impl bb8::ManageConnection for B8Pg {
    type Connection = tokio_postgres::Client;
    type Error = tokio_postgres::Error;
    async fn connect(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, connection) = self.0.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }
    async fn is_valid(&self, _: &mut tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
        Ok(())
    }
    fn has_broken(&self, c: &mut tokio_postgres::Client) -> bool {
        c.is_closed()
    }
}

/// Borrow, `SELECT 1`, return, as tasks, for each pool and its client.
fn real_postgres(
    rt: &tokio::runtime::Runtime,
    url: &str,
    counts: &[usize],
    duration: Duration,
) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    let tp_config: tokio_postgres::Config = url.parse()?;
    for &t in counts {
        let config: slipstream_pg::Config = url.parse()?;
        let ours = rt.block_on(async {
            slipstream_pool::Pool::builder(slipstream_pool::PgManager::new(config))
                .max_size(CONNECTIONS)
                .min_size(CONNECTIONS)
                .borrow_timeout(Duration::MAX)
                .build_ready()
                .await
        })?;
        let pool = ours.clone();
        let (s, rec) = rt.block_on(tasks(t, duration, move || {
            let pool = pool.clone();
            async move {
                match pool.get().await {
                    Ok(mut c) => c.query_one("SELECT 1", &[]).await.is_ok(),
                    Err(_) => false,
                }
            }
        }))?;
        runs.push(summarize("slipstream-pool + slipstream-pg", s, rec));

        let dead: deadpool::managed::Pool<DeadPg> =
            deadpool::managed::Pool::builder(DeadPg(tp_config.clone()))
                .max_size(CONNECTIONS)
                .build()?;
        let pool = dead.clone();
        let (s, rec) = rt.block_on(tasks(t, duration, move || {
            let pool = pool.clone();
            async move {
                match pool.get().await {
                    Ok(c) => c.query_one("SELECT 1", &[]).await.is_ok(),
                    Err(_) => false,
                }
            }
        }))?;
        runs.push(summarize("deadpool + tokio-postgres", s, rec));

        let b8 = rt.block_on(
            bb8::Pool::builder()
                .max_size(CONNECTIONS as u32)
                .connection_timeout(GENEROUS)
                .test_on_check_out(false)
                .build(B8Pg(tp_config.clone())),
        )?;
        let pool = b8.clone();
        let (s, rec) = rt.block_on(tasks(t, duration, move || {
            let pool = pool.clone();
            async move {
                match pool.get().await {
                    Ok(c) => c.query_one("SELECT 1", &[]).await.is_ok(),
                    Err(_) => false,
                }
            }
        }))?;
        runs.push(summarize("bb8 + tokio-postgres", s, rec));
    }
    Ok(runs)
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let (counts, duration): (&[usize], Duration) = if ctx.quick {
        (&[10, 100, 1000], Duration::from_millis(300))
    } else {
        (
            &[10, 50, 100, 500, 1000, 5000, 10_000],
            Duration::from_secs(2),
        )
    };
    let mut r = ExperimentResult::new("pool-scaling", TITLE, ctx.quick);
    r.param("connections", CONNECTIONS);
    r.param("seconds_per_run", duration.as_secs_f64());
    r.environment = environment::capture(&ctx.url, None);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut runs_tasks = Vec::new();
    let mut runs_threads = Vec::new();
    for &t in counts {
        // Tasks: slipstream-pool, deadpool, bb8.
        let ours = rt.block_on(async {
            slipstream_pool::Pool::builder(Ours)
                .max_size(CONNECTIONS)
                .min_size(CONNECTIONS)
                // No timeout, as deadpool's default: no timer per waiting borrow.
                .borrow_timeout(Duration::MAX)
                .max_waiters(1_000_000)
                .build_ready()
                .await
        })?;
        let pool = ours.clone();
        let (s, rec) = rt.block_on(tasks(t, duration, move || {
            let pool = pool.clone();
            async move {
                let Ok(c) = pool.get().await else {
                    return false;
                };
                tokio::task::yield_now().await;
                drop(c);
                true
            }
        }))?;
        runs_tasks.push(summarize("slipstream-pool", s, rec));

        let dead: deadpool::managed::Pool<Dead> = deadpool::managed::Pool::builder(Dead)
            .max_size(CONNECTIONS)
            .build()?;
        let pool = dead.clone();
        let (s, rec) = rt.block_on(tasks(t, duration, move || {
            let pool = pool.clone();
            async move {
                let Ok(c) = pool.get().await else {
                    return false;
                };
                tokio::task::yield_now().await;
                drop(c);
                true
            }
        }))?;
        runs_tasks.push(summarize("deadpool", s, rec));

        let b8 = rt.block_on(
            bb8::Pool::builder()
                .max_size(CONNECTIONS as u32)
                .connection_timeout(GENEROUS)
                .test_on_check_out(false)
                .build(B8),
        )?;
        let pool = b8.clone();
        let (s, rec) = rt.block_on(tasks(t, duration, move || {
            let pool = pool.clone();
            async move {
                let Ok(c) = pool.get().await else {
                    return false;
                };
                tokio::task::yield_now().await;
                drop(c);
                true
            }
        }))?;
        runs_tasks.push(summarize("bb8", s, rec));

        // Threads: slipstream-pool (blocking API), r2d2, Mutex + Condvar.
        let pool = ours.clone();
        let (s, rec) = threads(t, duration, Arc::new(move || pool.get_blocking().is_ok()))?;
        runs_threads.push(summarize("slipstream-pool", s, rec));

        let r2 = r2d2::Pool::builder()
            .max_size(CONNECTIONS as u32)
            .connection_timeout(GENEROUS)
            .test_on_check_out(false)
            .build(R2)?;
        let (s, rec) = threads(t, duration, Arc::new(move || r2.get().is_ok()))?;
        runs_threads.push(summarize("r2d2", s, rec));

        let old = Arc::new(MutexPool::new(CONNECTIONS));
        let (s, rec) = threads(
            t,
            duration,
            Arc::new(move || {
                let c = old.get();
                old.put(c);
                true
            }),
        )?;
        runs_threads.push(summarize("Mutex + Condvar", s, rec));
    }

    let mut table = Table::new(&[
        "kind",
        "borrowers",
        "pool",
        "borrows/s",
        "p50 wait µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "got none",
        "min … max borrows",
        "Jain",
        "slipstream / this",
    ]);
    for (kind, runs) in [("tasks", &runs_tasks), ("threads", &runs_threads)] {
        for chunk in runs.chunks(3) {
            let ours = chunk[0].per_sec;
            for run in chunk {
                table.row(run.cells(kind, ours));
            }
            // Against the best peer that left nobody with nothing.
            let best_fair = chunk[1..]
                .iter()
                .filter(|p| p.zero == 0)
                .map(|p| p.per_sec)
                .fold(0.0, f64::max);
            if best_fair > 0.0 {
                r.ratios.insert(
                    format!(
                        "{kind}_t{}_slipstream_over_best_fair_peer",
                        chunk[0].borrowers
                    ),
                    ours / best_fair,
                );
            }
            r.ratios.insert(
                format!(
                    "{kind}_t{}_slipstream_borrowers_with_none",
                    chunk[0].borrowers
                ),
                chunk[0].zero as f64,
            );
        }
        let first = runs.first().map(|x| x.per_sec).unwrap_or(0.0);
        let last = runs
            .iter()
            .rev()
            .find(|x| x.pool == "slipstream-pool")
            .map(|x| x.per_sec)
            .unwrap_or(0.0);
        if first > 0.0 {
            r.ratios.insert(
                format!("{kind}_slipstream_flatness_last_over_first"),
                last / first,
            );
        }
    }
    // The second table: real connections to the database under test.
    let pg_counts: &[usize] = if ctx.quick {
        &[10, 100]
    } else {
        &[10, 100, 1000]
    };
    let url = super::without_tls(&ctx.url);
    let pg_runs = real_postgres(&rt, &url, pg_counts, duration)?;
    for chunk in pg_runs.chunks(3) {
        let ours = chunk[0].per_sec;
        for run in chunk {
            table.row(run.cells("tasks, SELECT 1", ours));
        }
        let best = chunk[1..].iter().map(|p| p.per_sec).fold(0.0, f64::max);
        if best > 0.0 {
            r.ratios.insert(
                format!("postgres_t{}_slipstream_over_best_peer", chunk[0].borrowers),
                ours / best,
            );
        }
    }
    r.table = table;
    for run in runs_tasks.iter().chain(&runs_threads).chain(&pg_runs) {
        if run.failures > 0 {
            r.notes.push(format!(
                "{} at T = {}: {} borrows or queries failed (not counted as borrows)",
                run.pool, run.borrowers, run.failures
            ));
        }
    }
    r.notes.push("'tasks, SELECT 1' rows: six real connections to the database under test, each borrower runs SELECT 1 per borrow; each pool with its usual client (slipstream-pg; tokio-postgres for deadpool and bb8); wait = borrow + query".into());
    r.notes.push("article 002: the wait-free pool stays flat (~370-384k borrows/s) from 10 to 10,000 borrowers; the old style falls from 179k to 15k".into());
    r.notes.push("the connection is a trivial in-memory value (the same for every pool); tasks hold it across one yield_now, threads borrow and return at once; 2 tokio worker threads".into());
    r.notes.push("'slipstream / this' compares borrows/s; the ratios in the JSON compare against the best peer that left no borrower with nothing (throughput bought by starving borrowers does not count)".into());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_buckets_are_ordered_and_tight() {
        let mut last = 0;
        for ns in [1u64, 2, 15, 16, 17, 100, 1000, 12_345, 1 << 30] {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            assert!(
                upper_edge(b) >= ns,
                "{ns} above its bucket's edge {}",
                upper_edge(b)
            );
            assert!(upper_edge(b) as f64 <= ns as f64 * 1.07 + 1.0, "{ns}");
            last = b;
        }
        let mut w = Waits::new();
        for us in 1..=1000u64 {
            w.record(Duration::from_micros(us));
        }
        let p50 = w.quantile_us(0.5);
        assert!((480.0..=540.0).contains(&p50), "{p50}");
    }
}
