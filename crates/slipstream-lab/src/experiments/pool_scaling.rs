//! `pool-scaling`: article 002's benchmark. Six connections, T borrowers each looping borrow ->
//! hold -> return, T from 10 to 10,000; borrows per second, borrow-wait percentiles, the
//! longest wait and fairness per T, as OS threads (blocking API) and as tokio tasks (async
//! API), with hold times of 0 and 10 µs (a busy spin), and borrow + `SELECT 1` on real
//! connections. The in-memory connection is a trivial value, the same for every pool, so the
//! pools alone are measured.
//!
//! The harness treats every pool alike and stays out of the measurement:
//! - each borrower has one cache-padded counter it alone writes; waits go to one histogram
//!   shared by all, striped per OS thread (no 8 KiB histogram per borrower: at 10,000 tasks
//!   that was 80 MiB of cache misses on every pool's borrows);
//! - the rate and the fairness come from the counters' change over a measuring window that
//!   starts after a warm-up and ends before `stop` (the drain after stop is not counted);
//! - every point runs [`REPS`] rounds, each running every pool once (rotating which goes
//!   first); the median run by rate is reported, with the range of the rates and the waits of
//!   all runs, and ratios between pools pair the runs of one round (see [`Point::of`]).
//!
//! Tasks hold the connection across one `yield_now`: a task that never yields while holding
//! keeps its worker thread and starves the rest, and the benchmark would measure nothing.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::env_list;
use super::pg_peers::{B8Pg, DeadPg};

use crate::pool_peers::{B8, Dead, MutexPool, Ours, R2};
use crate::{Context, ExperimentResult, Summary, Table, paired_ratios};

pub(crate) const TITLE: &str = "Pool scaling: borrowers from 10 to 10,000 on six connections";

const CONNECTIONS: usize = 6;
/// The borrow timeout of the pools that cannot run without one (r2d2 and bb8): never reached in
/// a run, but not free either. bb8 wraps every `get` in `tokio::time::timeout`, so each borrow
/// that has to wait arms a timer; slipstream-pool, run with its default 30 s timeout, sets a
/// deadline for each borrow that waits too, and deadpool (no timeout by default) does not;
/// r2d2 waits on its condition variable until a deadline. The notes say so.
const GENEROUS: Duration = Duration::from_secs(120);
/// Runs per point; the median is reported.
const REPS: usize = 3;

/// Wait times in log-linear buckets: 16 per power of two of nanoseconds (about 4% wide).
#[derive(Clone)]
struct Waits {
    buckets: Vec<u64>,
    max_ns: u64,
}

const SUB: usize = 16;
const BUCKETS: usize = 64 * SUB;
/// Histogram stripes: each OS thread writes one (tasks: one per runtime worker).
const STRIPES: usize = 64;

impl Waits {
    #[cfg(test)]
    fn new() -> Waits {
        Waits {
            buckets: vec![0; BUCKETS],
            max_ns: 0,
        }
    }

    #[cfg(test)]
    fn record(&mut self, d: Duration) {
        let ns = (d.as_nanos() as u64).max(1);
        self.max_ns = self.max_ns.max(ns);
        self.buckets[bucket(ns)] += 1;
    }

    /// Adds `other`'s waits to these.
    fn merge(&mut self, other: &Waits) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The longest wait, in microseconds; NaN where no borrow completed, as [`Self::quantile_us`].
    fn max_us(&self) -> f64 {
        if self.buckets.iter().all(|&n| n == 0) {
            return f64::NAN;
        }
        self.max_ns as f64 / 1e3
    }

    /// The wait at quantile `q`, in microseconds (the bucket's upper edge); NaN, missing, when
    /// no borrow completed in the window: 0 would read as the shortest wait of all for a pool
    /// that stalled or whose every borrow failed.
    fn quantile_us(&self, q: f64) -> f64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return f64::NAN;
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

/// The histogram stripe of the calling OS thread.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static MINE: usize = NEXT.fetch_add(1, Relaxed) % STRIPES);
    MINE.with(|m| *m)
}

/// One borrower's counters, written by that borrower only.
#[derive(Default)]
struct Counter {
    borrows: AtomicU64,
    failures: AtomicU64,
}

/// What the borrowers of one run record into.
struct Record {
    counts: Box<[CachePadded<Counter>]>,
    /// `STRIPES` histograms of `BUCKETS` each, filled during the measuring window only.
    hist: Box<[AtomicU64]>,
    max_ns: AtomicU64,
    measuring: AtomicBool,
    stop: AtomicBool,
}

impl Record {
    fn new(borrowers: usize) -> Record {
        Record {
            counts: (0..borrowers).map(|_| CachePadded::default()).collect(),
            hist: (0..STRIPES * BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_ns: AtomicU64::new(0),
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    /// Borrower `me` finished one borrow that waited `wait` (`None`: it failed).
    #[inline]
    fn done(&self, me: usize, wait: Option<Duration>) {
        let c = &self.counts[me];
        let Some(wait) = wait else {
            c.failures.store(c.failures.load(Relaxed) + 1, Relaxed);
            return;
        };
        c.borrows.store(c.borrows.load(Relaxed) + 1, Relaxed);
        if self.measuring.load(Relaxed) {
            let ns = (wait.as_nanos() as u64).max(1);
            self.hist[stripe() * BUCKETS + bucket(ns)].fetch_add(1, Relaxed);
            if ns > self.max_ns.load(Relaxed) {
                self.max_ns.fetch_max(ns, Relaxed);
            }
        }
    }

    fn snapshot(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.borrows.load(Relaxed))
            .collect()
    }

    fn waits(&self) -> Waits {
        let mut buckets = vec![0; BUCKETS];
        for (i, n) in self.hist.iter().enumerate() {
            buckets[i % BUCKETS] += n.load(Relaxed);
        }
        Waits {
            buckets,
            max_ns: self.max_ns.load(Relaxed),
        }
    }

    fn failures(&self) -> u64 {
        self.counts.iter().map(|c| c.failures.load(Relaxed)).sum()
    }
}

/// How long a borrower holds the connection before returning it.
#[derive(Clone, Copy, PartialEq)]
enum Hold {
    Zero,
    /// A busy spin, as a short piece of work on the connection would be.
    Spin(Duration),
    /// A real `SELECT 1` (the PostgreSQL pools).
    Select1,
}

impl Hold {
    fn label(self) -> String {
        match self {
            Hold::Zero => "0".into(),
            Hold::Spin(d) => format!("{} µs", d.as_micros()),
            Hold::Select1 => "SELECT 1".into(),
        }
    }

    fn key(self) -> String {
        match self {
            Hold::Zero => String::new(),
            Hold::Spin(d) => format!("hold{}us_", d.as_micros()),
            Hold::Select1 => "select1_".into(),
        }
    }

    /// The spin hold in µs, as `SLIPSTREAM_POOL_SCALING_HOLDS` names it.
    fn micros(self) -> String {
        match self {
            Hold::Zero => "0".into(),
            Hold::Spin(d) => d.as_micros().to_string(),
            Hold::Select1 => "SELECT 1".into(),
        }
    }

    #[inline]
    fn spin(self) {
        if let Hold::Spin(d) = self {
            let t = Instant::now();
            while t.elapsed() < d {
                std::hint::spin_loop();
            }
        }
    }
}

/// Warm-up, then the measuring window.
#[derive(Clone, Copy)]
struct Timing {
    warmup: Duration,
    /// Added to the warm-up per borrower (see [`WARMUP_PER_BORROWER`]).
    warmup_per_borrower: Duration,
    window: Duration,
}

impl Timing {
    /// The timing of a run with `borrowers`: the warm-up grows with them.
    fn for_borrowers(self, borrowers: usize) -> Timing {
        let more = self
            .warmup_per_borrower
            .saturating_mul(u32::try_from(borrowers).unwrap_or(u32::MAX));
        Timing {
            warmup: self.warmup.max(more),
            ..self
        }
    }
}

/// The full form's warm-up per borrower, for every pool alike: 4 s at 10,000 borrowers, the
/// half-second floor up to 1,250. A run starts every borrower at once from a barrier, a
/// stampede a service in its steady state does not see, and a fair queue settles only after
/// every borrower has had a few turns. Measured on slipstream-pool at 10,000 threads
/// (docs/benchmarks.md, pool-scaling, "Threads: turns that no one cuts short"): 0.5 s of
/// warm-up measured 0.735x of 10 threads, 4 s 0.823x, the rate still rising at 2.5 s.
const WARMUP_PER_BORROWER: Duration = Duration::from_micros(400);

/// One (pool, T, hold) run.
#[derive(Clone)]
struct Run {
    pool: &'static str,
    borrowers: usize,
    per_sec: f64,
    /// The rates of all the point's runs, lowest to highest (filled in on the median run).
    rates: Vec<f64>,
    waits: Waits,
    zero: usize,
    min: u64,
    max: u64,
    jain: f64,
    failures: u64,
}

impl Run {
    /// The run's table row; `ours_over` is slipstream-pool's rate over this pool's, paired by
    /// round.
    fn cells(&self, kind: &str, hold: Hold, ours_over: f64) -> Vec<String> {
        let range = match (self.rates.first(), self.rates.last()) {
            (Some(lo), Some(hi)) => format!("{lo:.0} … {hi:.0}"),
            _ => String::new(),
        };
        vec![
            kind.into(),
            hold.label(),
            self.borrowers.to_string(),
            self.pool.into(),
            format!("{:.0}", self.per_sec),
            range,
            wait_cell(self.waits.quantile_us(0.5), 1),
            wait_cell(self.waits.quantile_us(0.99), 1),
            wait_cell(self.waits.quantile_us(0.999), 1),
            wait_cell(self.waits.max_us(), 0),
            self.zero.to_string(),
            format!("{} … {}", self.min, self.max),
            if self.jain.is_nan() {
                "missing (no borrows)".into()
            } else {
                format!("{:.3}", self.jain)
            },
            if ours_over.is_nan() {
                "missing (no pair of runs)".into()
            } else {
                format!("{ours_over:.2}x")
            },
        ]
    }
}

/// A wait in µs as the table shows it; NaN, no borrow completed in the window, says so.
fn wait_cell(us: f64, decimals: usize) -> String {
    if us.is_nan() {
        "missing (no borrow completed)".into()
    } else {
        format!("{us:.decimals$}")
    }
}

/// One point's runs reduced to what is reported: per pool, the median run by rate carrying the
/// waits of all its runs, and slipstream-pool's rate over each pool's paired by round.
struct Point {
    /// Per pool (slipstream-pool first): the median run by rate, with `rates` holding all its
    /// runs' rates in order, its `waits` merged over every run and its failures summed.
    medians: Vec<Run>,
    /// Per pool: the median over rounds of slipstream-pool's rate over that pool's in the same
    /// round (1 for slipstream-pool itself).
    ours_over: Vec<f64>,
    /// slipstream-pool's rate over the best eligible peer's in each round, summarized over the
    /// rounds; `None` when no peer is eligible.
    ours_over_best: Option<Summary>,
}

impl Point {
    /// `runs[pool][round]`, slipstream-pool first, every pool run once per round. With
    /// `fair_only`, a peer that left a borrower with no borrow in any of its runs is not
    /// eligible as the best peer.
    ///
    /// Ratios pair the runs of one round, which ran minutes apart from other rounds' but
    /// seconds apart from each other: this VM's speed moves by up to 2x between minutes, so a
    /// ratio of medians taken from different rounds measured the machine's phase as much as
    /// the pools (a 0.92x at 500 tasks, 2026-11-26, from medians one phase apart). The tail
    /// waits come from all runs of a pool, three times the samples of the median run alone.
    fn of(runs: [Vec<Run>; 3], fair_only: bool) -> Point {
        let rates: Vec<Vec<f64>> = runs
            .iter()
            .map(|rs| rs.iter().map(|r| r.per_sec).collect())
            .collect();
        let ours_over = rates
            .iter()
            .map(|theirs| paired_ratios(theirs, &rates[0]).p50)
            .collect();
        let eligible: Vec<&Vec<f64>> = rates[1..]
            .iter()
            .zip(&runs[1..])
            .filter(|(_, rs)| !fair_only || rs.iter().all(|r| r.zero == 0))
            .map(|(rates, _)| rates)
            .collect();
        let ours_over_best = (!eligible.is_empty()).then(|| {
            let best: Vec<f64> = (0..rates[0].len())
                .map(|i| eligible.iter().map(|p| p[i]).fold(0.0, f64::max))
                .collect();
            paired_ratios(&best, &rates[0])
        });
        let medians = runs
            .into_iter()
            .map(|mut rs| {
                let rates = rs.iter().map(|x| x.per_sec).collect();
                let mut waits = rs[0].waits.clone();
                for other in &rs[1..] {
                    waits.merge(&other.waits);
                }
                let failures = rs.iter().map(|x| x.failures).sum();
                rs.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
                let mut m = rs.swap_remove(rs.len() / 2);
                m.rates = rates;
                m.rates.sort_by(f64::total_cmp);
                m.waits = waits;
                m.failures = failures;
                m
            })
            .collect();
        Point {
            medians,
            ours_over,
            ours_over_best,
        }
    }
}

/// Jain's fairness index of `counts`: 1 when all are equal, 1/n when one borrower got all;
/// NaN, missing, when nobody borrowed: there are no shares to compare, and 0 (below the 1/n
/// floor of any real run) would read as the worst unfairness, not as a run that measured
/// nothing.
fn jain(counts: &[u64]) -> f64 {
    let total: f64 = counts.iter().map(|&c| c as f64).sum();
    let sum_sq: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if sum_sq > 0.0 {
        total.powi(2) / (counts.len() as f64 * sum_sq)
    } else {
        f64::NAN
    }
}

fn summarize(pool: &'static str, seconds: f64, before: &[u64], rec: &Record, after: &[u64]) -> Run {
    let counts: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let total: u64 = counts.iter().sum();
    Run {
        pool,
        borrowers: counts.len(),
        per_sec: total as f64 / seconds,
        rates: Vec::new(),
        waits: rec.waits(),
        zero: counts.iter().filter(|&&c| c == 0).count(),
        min: counts.iter().copied().min().unwrap_or(0),
        max: counts.iter().copied().max().unwrap_or(0),
        jain: jain(&counts),
        failures: rec.failures(),
    }
}

/// The window between a run's warm-up and its stop: the counters before, the time, and the
/// counters after.
fn window(rec: &Record, timing: Timing) -> (Vec<u64>, f64, Vec<u64>) {
    let before = rec.snapshot();
    let t = Instant::now();
    rec.measuring.store(true, Relaxed);
    std::thread::sleep(timing.window);
    rec.measuring.store(false, Relaxed);
    let after = rec.snapshot();
    (before, t.elapsed().as_secs_f64(), after)
}

// ---- threads ----

/// A pool as a blocking borrower uses it: borrow, hold, return; the wait, `None` on failure.
trait ThreadPool: Send + Sync + 'static {
    fn once(&self, hold: Hold) -> Option<Duration>;
}

impl ThreadPool for slipstream_pool::Pool<Ours> {
    fn once(&self, hold: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get_blocking().ok()?;
        let wait = t.elapsed();
        hold.spin();
        drop(c);
        Some(wait)
    }
}

impl ThreadPool for r2d2::Pool<R2> {
    fn once(&self, hold: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get().ok()?;
        let wait = t.elapsed();
        hold.spin();
        drop(c);
        Some(wait)
    }
}

impl ThreadPool for MutexPool {
    fn once(&self, hold: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get();
        let wait = t.elapsed();
        hold.spin();
        self.put(c);
        Some(wait)
    }
}

/// Runs `borrowers` OS threads on `pool` for the warm-up and the window.
fn threads<P: ThreadPool>(
    name: &'static str,
    pool: Arc<P>,
    borrowers: usize,
    hold: Hold,
    timing: Timing,
) -> anyhow::Result<Run> {
    let rec = Arc::new(Record::new(borrowers));
    // The start line is a flag and an unpark per thread, not a `Barrier`: a barrier's waiters
    // all leave through one mutex, and 1,000 threads convoying on it behind busy borrowers
    // took minutes on 2 cores. A park may return spuriously, hence the loop.
    let go = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::with_capacity(borrowers);
    for me in 0..borrowers {
        let (mine, line, pool) = (rec.clone(), go.clone(), pool.clone());
        let spawned = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                while !line.load(Acquire) {
                    std::thread::park();
                }
                while !mine.stop.load(Relaxed) {
                    mine.done(me, pool.once(hold));
                }
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                rec.stop.store(true, Relaxed);
                release(&go, &handles);
                for h in handles {
                    let _ = h.join();
                }
                return Err(anyhow::anyhow!("spawning borrower thread {me}: {e}"));
            }
        }
    }
    release(&go, &handles);
    std::thread::sleep(timing.warmup);
    let (before, seconds, after) = window(&rec, timing);
    rec.stop.store(true, Relaxed);
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a borrower thread panicked"))?;
    }
    Ok(summarize(name, seconds, &before, &rec, &after))
}

/// Lets the parked borrowers go.
fn release(go: &AtomicBool, handles: &[std::thread::JoinHandle<()>]) {
    go.store(true, Release);
    for h in handles {
        h.thread().unpark();
    }
}

// ---- tasks ----

/// A pool as an async borrower uses it: borrow, hold (and yield once), return; the wait,
/// `None` on failure.
trait TaskPool: Send + Sync + 'static {
    fn once(&self, hold: Hold) -> impl Future<Output = Option<Duration>> + Send;
}

impl TaskPool for slipstream_pool::Pool<Ours> {
    async fn once(&self, hold: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get().await.ok()?;
        let wait = t.elapsed();
        hold.spin();
        tokio::task::yield_now().await;
        drop(c);
        Some(wait)
    }
}

impl TaskPool for deadpool::managed::Pool<Dead> {
    async fn once(&self, hold: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get().await.ok()?;
        let wait = t.elapsed();
        hold.spin();
        tokio::task::yield_now().await;
        drop(c);
        Some(wait)
    }
}

impl TaskPool for bb8::Pool<B8> {
    async fn once(&self, hold: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get().await.ok()?;
        let wait = t.elapsed();
        hold.spin();
        tokio::task::yield_now().await;
        drop(c);
        Some(wait)
    }
}

impl TaskPool for slipstream_pool::Pool<slipstream_pool::PgManager> {
    async fn once(&self, _: Hold) -> Option<Duration> {
        let t = Instant::now();
        let mut c = self.get().await.ok()?;
        let wait = t.elapsed();
        c.query_one("SELECT 1", &[]).await.ok()?;
        Some(wait)
    }
}

impl TaskPool for deadpool::managed::Pool<DeadPg> {
    async fn once(&self, _: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get().await.ok()?;
        let wait = t.elapsed();
        c.query_one("SELECT 1").await.ok()?;
        Some(wait)
    }
}

impl TaskPool for bb8::Pool<B8Pg> {
    async fn once(&self, _: Hold) -> Option<Duration> {
        let t = Instant::now();
        let c = self.get().await.ok()?;
        let wait = t.elapsed();
        c.query_one("SELECT 1").await.ok()?;
        Some(wait)
    }
}

/// Runs `borrowers` tasks on `pool` for the warm-up and the window (called from outside the
/// runtime: the window is timed on this thread).
fn tasks<P: TaskPool>(
    rt: &tokio::runtime::Runtime,
    name: &'static str,
    pool: Arc<P>,
    borrowers: usize,
    hold: Hold,
    timing: Timing,
) -> anyhow::Result<Run> {
    let rec = Arc::new(Record::new(borrowers));
    let go = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::with_capacity(borrowers);
    for me in 0..borrowers {
        let (rec, go, started, pool) = (rec.clone(), go.clone(), started.clone(), pool.clone());
        handles.push(rt.spawn(async move {
            let notified = go.notified();
            if !started.load(Acquire) {
                notified.await;
            }
            while !rec.stop.load(Relaxed) {
                let wait = pool.once(hold).await;
                rec.done(me, wait);
            }
        }));
    }
    // Let every task reach its start line.
    std::thread::sleep(Duration::from_millis(20));
    started.store(true, Release);
    go.notify_waiters();
    std::thread::sleep(timing.warmup);
    let (before, seconds, after) = window(&rec, timing);
    rec.stop.store(true, Relaxed);
    rt.block_on(async {
        for h in handles {
            h.await
                .map_err(|e| anyhow::anyhow!("a borrower task failed: {e}"))?;
        }
        anyhow::Ok(())
    })?;
    Ok(summarize(name, seconds, &before, &rec, &after))
}

/// What borrows: OS threads or tasks on the trivial connection, or tasks on real PostgreSQL.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Threads,
    Tasks,
    Postgres,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Threads => "threads",
            Kind::Tasks => "tasks",
            Kind::Postgres => "tasks, SELECT 1",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Kind::Threads => "threads",
            Kind::Tasks => "tasks",
            Kind::Postgres => "postgres",
        }
    }

    /// The pools of this kind, slipstream-pool first.
    fn pools(self) -> [&'static str; 3] {
        match self {
            Kind::Threads => ["slipstream-pool", "r2d2", "Mutex + Condvar"],
            Kind::Tasks => ["slipstream-pool", "deadpool", "bb8"],
            Kind::Postgres => [
                "slipstream-pool + slipstream-pg",
                "deadpool + tokio-postgres",
                "bb8 + tokio-postgres",
            ],
        }
    }
}

/// One measurement in a round of a point.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// Pool `which` (an index into [`Kind::pools`]) at the point's T.
    Pool(usize),
    /// Our pool at the first T: the twin of our run at the last T, for flatness.
    Twin,
}

/// The measurements of round `rep` of a point: each pool in turn, a different one first in
/// each round; with `twin`, our pool's twin at the first T right after our run.
fn round(rep: usize, twin: bool) -> Vec<Step> {
    let mut steps = Vec::with_capacity(4);
    for k in 0..3 {
        let which = (rep + k) % 3;
        steps.push(Step::Pool(which));
        if twin && which == 0 {
            steps.push(Step::Twin);
        }
    }
    steps
}

/// One run of pool `which` (an index into [`Kind::pools`]) on a fresh pool.
fn measure_one(
    rt: &tokio::runtime::Runtime,
    url: &str,
    kind: Kind,
    which: usize,
    borrowers: usize,
    hold: Hold,
    timing: Timing,
) -> anyhow::Result<Run> {
    let name = kind.pools()[which];
    let timing = timing.for_borrowers(borrowers);
    let ours = || {
        rt.block_on(async {
            // The pool's defaults beyond its size (a borrow timeout, its waiter limit): what a
            // user who follows docs/pool.md gets. `borrow_timeout(Duration::MAX)` (no timer
            // per waiting borrow) is faster, and was measured instead of the default before.
            slipstream_pool::Pool::builder(Ours)
                .max_size(CONNECTIONS)
                .min_size(CONNECTIONS)
                .build_ready()
                .await
        })
    };
    match (kind, which) {
        (Kind::Threads, 0) => threads(name, Arc::new(ours()?), borrowers, hold, timing),
        (Kind::Threads, 1) => {
            let pool = r2d2::Pool::builder()
                .max_size(CONNECTIONS as u32)
                .connection_timeout(GENEROUS)
                .test_on_check_out(false)
                .build(R2)?;
            threads(name, Arc::new(pool), borrowers, hold, timing)
        }
        (Kind::Threads, _) => {
            let pool = MutexPool::new(CONNECTIONS);
            threads(name, Arc::new(pool), borrowers, hold, timing)
        }
        (Kind::Tasks, 0) => tasks(rt, name, Arc::new(ours()?), borrowers, hold, timing),
        (Kind::Tasks, 1) => {
            let pool: deadpool::managed::Pool<Dead> = deadpool::managed::Pool::builder(Dead)
                .max_size(CONNECTIONS)
                .runtime(deadpool::Runtime::Tokio1)
                .build()?;
            tasks(rt, name, Arc::new(pool), borrowers, hold, timing)
        }
        (Kind::Tasks, _) => {
            let pool = rt.block_on(
                bb8::Pool::builder()
                    .max_size(CONNECTIONS as u32)
                    .connection_timeout(GENEROUS)
                    .test_on_check_out(false)
                    .build(B8),
            )?;
            tasks(rt, name, Arc::new(pool), borrowers, hold, timing)
        }
        (Kind::Postgres, 0) => {
            let pool = rt.block_on(pg_ours(url))?;
            tasks(rt, name, Arc::new(pool), borrowers, hold, timing)
        }
        (Kind::Postgres, 1) => {
            let pool = pg_deadpool(url)?;
            tasks(rt, name, Arc::new(pool), borrowers, hold, timing)
        }
        (Kind::Postgres, _) => {
            let pool = rt.block_on(pg_bb8(url))?;
            tasks(rt, name, Arc::new(pool), borrowers, hold, timing)
        }
    }
}

/// slipstream-pool over slipstream-pg, as the `tasks, SELECT 1` rows run it.
async fn pg_ours(url: &str) -> anyhow::Result<slipstream_pool::Pool<slipstream_pool::PgManager>> {
    let config = super::client_config::slipstream_config(url)?;
    Ok(
        slipstream_pool::Pool::builder(slipstream_pool::PgManager::new(config))
            .max_size(CONNECTIONS)
            .min_size(CONNECTIONS)
            .build_ready()
            .await?,
    )
}

/// deadpool over tokio-postgres, as the `tasks, SELECT 1` rows run it.
fn pg_deadpool(url: &str) -> anyhow::Result<deadpool::managed::Pool<DeadPg>> {
    Ok(
        deadpool::managed::Pool::builder(DeadPg(super::client_config::tokio_postgres_config(url)?))
            .max_size(CONNECTIONS)
            .runtime(deadpool::Runtime::Tokio1)
            .build()?,
    )
}

/// bb8 over tokio-postgres, as the `tasks, SELECT 1` rows run it.
async fn pg_bb8(url: &str) -> anyhow::Result<bb8::Pool<B8Pg>> {
    Ok(bb8::Pool::builder()
        .max_size(CONNECTIONS as u32)
        .connection_timeout(GENEROUS)
        .test_on_check_out(false)
        .build(B8Pg(super::client_config::tokio_postgres_config(url)?))
        .await?)
}

pub(crate) fn run(ctx: &Context) -> anyhow::Result<ExperimentResult> {
    let (mut counts, mut pg_counts, timing): (Vec<usize>, Vec<usize>, Timing) = if ctx.quick {
        (
            vec![10, 100, 1000],
            vec![10, 100],
            Timing {
                warmup: Duration::from_millis(100),
                warmup_per_borrower: Duration::ZERO,
                window: Duration::from_millis(200),
            },
        )
    } else {
        (
            vec![10, 50, 100, 500, 1000, 5000, 10_000],
            vec![10, 100, 1000],
            Timing {
                warmup: Duration::from_millis(500),
                warmup_per_borrower: WARMUP_PER_BORROWER,
                window: Duration::from_secs(2),
            },
        )
    };
    // A subset, for a look at a few points: SLIPSTREAM_POOL_SCALING_T=10,10000,
    // SLIPSTREAM_POOL_SCALING_KINDS=threads,tasks,postgres and SLIPSTREAM_POOL_SCALING_HOLDS=0,10
    // (µs of the spin hold; threads and tasks only).
    if let Some(list) = env_list("SLIPSTREAM_POOL_SCALING_T") {
        let parsed: Result<Vec<usize>, _> = list.iter().map(|s| s.parse()).collect();
        counts = parsed.map_err(|e| {
            anyhow::anyhow!("SLIPSTREAM_POOL_SCALING_T must be numbers separated by commas: {e}")
        })?;
        pg_counts = counts.clone();
    }
    let mut kinds = vec![Kind::Tasks, Kind::Threads, Kind::Postgres];
    if let Some(list) = env_list("SLIPSTREAM_POOL_SCALING_KINDS") {
        kinds.retain(|k| list.iter().any(|s| s == k.key()));
        if kinds.is_empty() {
            anyhow::bail!("SLIPSTREAM_POOL_SCALING_KINDS names none of threads, tasks, postgres");
        }
    }
    let mut spin_holds = vec![Hold::Zero, Hold::Spin(Duration::from_micros(10))];
    if let Some(list) = env_list("SLIPSTREAM_POOL_SCALING_HOLDS") {
        spin_holds.retain(|h| list.iter().any(|s| *s == h.micros()));
        if spin_holds.is_empty() {
            anyhow::bail!("SLIPSTREAM_POOL_SCALING_HOLDS names none of 0, 10 (µs)");
        }
    }
    let mut r = ExperimentResult::new("pool-scaling", TITLE, ctx.quick);
    r.param("connections", CONNECTIONS);
    r.param("runs_per_point", REPS);
    r.param("warmup_seconds", timing.warmup.as_secs_f64());
    r.param(
        "warmup_per_borrower_us",
        timing.warmup_per_borrower.as_secs_f64() * 1e6,
    );
    r.param("window_seconds", timing.window.as_secs_f64());
    // slipstream-pool runs with its defaults beyond its size (see `measure_one`); the file
    // says which, as it says the peers' timeouts in the notes.
    let defaults = slipstream_pool::Config::default();
    r.param(
        "slipstream_pool_borrow_timeout_s",
        defaults.borrow_timeout.as_secs_f64(),
    );
    r.param("slipstream_pool_max_waiters", defaults.max_waiters);
    r.environment = slipstream_bench::capture_environment(&ctx.url, None);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let url = super::without_tls(&ctx.url);
    let mut table = Table::new(&[
        "kind",
        "hold",
        "borrowers",
        "pool",
        "borrows/s (median)",
        "range of runs",
        "p50 wait µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "got none",
        "min … max borrows",
        "Jain",
        "slipstream / this",
    ]);
    let mut all = Vec::new();
    for &kind in &kinds {
        let holds: &[Hold] = match kind {
            Kind::Postgres => &[Hold::Select1],
            _ => &spin_holds,
        };
        let ts = if kind == Kind::Postgres {
            &pg_counts
        } else {
            &counts
        };
        for &hold in holds {
            // Flatness pairs each of our runs at the last T with one at the first T right
            // beside it (`Step::Twin`): the points themselves run minutes apart in the full
            // form, longer than the VM's fast and slow phases last, so a ratio of their
            // medians measured the phase as much as the pool.
            let first_t = ts.first().copied().unwrap_or(0);
            let flat_pairs = kind != Kind::Postgres && ts.len() > 1;
            let (mut last_rates, mut twin_rates) = (Vec::new(), Vec::new());
            for &t in ts {
                let twin = flat_pairs && Some(&t) == ts.last();
                let mut runs: [Vec<Run>; 3] = Default::default();
                for rep in 0..REPS {
                    for step in round(rep, twin) {
                        match step {
                            Step::Pool(which) => runs[which]
                                .push(measure_one(&rt, &url, kind, which, t, hold, timing)?),
                            Step::Twin => twin_rates.push(
                                measure_one(&rt, &url, kind, 0, first_t, hold, timing)?.per_sec,
                            ),
                        }
                    }
                }
                if twin {
                    last_rates = runs[0].iter().map(|r| r.per_sec).collect();
                }
                // Against the best peer that left nobody with nothing (throughput bought by
                // starving borrowers does not count); with real connections, every peer.
                let point = Point::of(runs, kind != Kind::Postgres);
                for (run, ratio) in point.medians.iter().zip(&point.ours_over) {
                    table.row(run.cells(kind.label(), hold, *ratio));
                }
                let ours = &point.medians[0];
                let prefix = format!("{}_{}t{t}_slipstream", kind.key(), hold.key());
                if let Some(best) = point.ours_over_best {
                    let name = if kind == Kind::Postgres {
                        format!("postgres_t{t}_slipstream_over_best_peer")
                    } else {
                        format!("{prefix}_over_best_fair_peer")
                    };
                    r.ratios.insert(format!("{name}_min"), best.min);
                    r.ratios.insert(format!("{name}_max"), best.max);
                    r.ratios.insert(name, best.p50);
                }
                r.ratios
                    .insert(format!("{prefix}_borrowers_with_none"), ours.zero as f64);
                r.ratios.insert(format!("{prefix}_jain"), ours.jain);
                all.extend(point.medians.into_iter().map(|m| (kind, hold, m)));
            }
            if flat_pairs {
                let flat = paired_ratios(&twin_rates, &last_rates);
                let key = format!(
                    "{}_{}slipstream_flatness_last_over_first",
                    kind.key(),
                    hold.key()
                );
                r.ratios.insert(key.clone(), flat.p50);
                r.ratios.insert(format!("{key}_min"), flat.min);
                r.ratios.insert(format!("{key}_max"), flat.max);
            }
        }
    }
    r.table = table;
    for (kind, hold, run) in &all {
        if run.failures > 0 {
            r.notes.push(format!(
                "{} ({}, hold {}) at T = {}: {} borrows or queries failed over its runs (not counted as borrows)",
                run.pool,
                kind.label(),
                hold.label(),
                run.borrowers,
                run.failures
            ));
        }
    }
    r.notes.push(format!("each point: {REPS} runs, the pools interleaved; the median run by rate is shown, with the range of the rates; rate and fairness of that run from per-borrower counters over a {:.1} s window after a warm-up of {:.1} s or {:.1} ms per borrower, whichever is longer (every borrower starts at once; the queue's steady state comes after; the drain after stop is not counted); waits (borrow only, not the hold) from a histogram shared by all borrowers, striped per OS thread, merged over the point's runs", timing.window.as_secs_f64(), timing.warmup.as_secs_f64(), timing.warmup_per_borrower.as_secs_f64() * 1e3));
    r.notes.push(format!("flatness (`*_flatness_last_over_first` in the JSON, with its _min and _max): in each of the {REPS} rounds at the last T, our pool also runs at the first T right after its run there; the ratio is the median of those paired rounds' ratios, so both sides of each pair ran in the same phase of the machine"));
    r.notes.push("'tasks, SELECT 1' rows: six real connections to the database under test, each borrower runs SELECT 1 per borrow; each pool with its usual client (slipstream-pg; tokio-postgres for deadpool and bb8), each preparing SELECT 1 once per connection (slipstream-pg's statement cache; for tokio-postgres a statement prepared on first use, deadpool-postgres's prepare_cached): one round trip per borrow for every pool".into());
    r.notes.push("article 002: the wait-free pool stays flat (~370-384k borrows/s) from 10 to 10,000 borrowers; the old style falls from 179k to 15k".into());
    r.notes.push(format!("borrow timeouts, each pool as configured by default where it has one: slipstream-pool its default {} s (a deadline per borrow that waits, kept by the pool's deadline task: no timer per wait) and {} waiters at most; deadpool none (its default: no timer per wait); r2d2 and bb8 cannot run without one and have {} s, never reached, but bb8 wraps every borrow in a tokio timeout, so each borrow that waits arms a timer, and r2d2 waits on its condition variable until a deadline", defaults.borrow_timeout.as_secs(), defaults.max_waiters, GENEROUS.as_secs()));
    r.notes.push("the connection is a trivial in-memory value (the same for every pool); hold 0: threads return at once, tasks hold across one yield_now; hold 10 µs: a busy spin while holding (tasks then also yield once); 2 tokio worker threads".into());
    r.notes.push("'slipstream / this' compares borrows/s, run against run within each round (the median over rounds: the rounds run minutes apart, in different phases of the machine); the ratios in the JSON compare the same way against the round's best peer that left no borrower with nothing in any run (throughput bought by starving borrowers does not count), with their _min and _max over rounds".into());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trips per borrow + `SELECT 1` + return through `pool`, counted by `proxy` over
    /// 20 borrows after a few that may connect and prepare.
    async fn trips<P: TaskPool>(pool: P, proxy: &slipstream_testkit::DelayProxy) -> f64 {
        for _ in 0..3 {
            pool.once(Hold::Select1)
                .await
                .expect("a borrow and SELECT 1");
        }
        let before = proxy.round_trips();
        for _ in 0..20 {
            pool.once(Hold::Select1)
                .await
                .expect("a borrow and SELECT 1");
        }
        (proxy.round_trips() - before) as f64 / 20.0
    }

    /// The `tasks, SELECT 1` rows compare pools, each with its client: they must send the
    /// same conversation per borrow, or the ratio measures the clients' protocol use. The
    /// peers' `query_one(&str)` prepares an unnamed statement on every call (Parse + Describe,
    /// then Bind + Execute: two round trips) where slipstream-pg's statement cache sends one.
    #[test]
    fn every_postgres_pool_runs_select_1_in_the_same_round_trips() {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let url = super::super::without_tls(&cluster.url());
        let target = super::super::tcp_target(&url).unwrap();
        let proxy = slipstream_testkit::DelayProxy::start(target, Duration::ZERO).unwrap();
        let url = super::super::via_proxy(&url, proxy.port());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let per_pool = rt.block_on(async {
            [
                trips(pg_ours(&url).await.unwrap(), &proxy).await,
                trips(pg_deadpool(&url).unwrap(), &proxy).await,
                trips(pg_bb8(&url).await.unwrap(), &proxy).await,
            ]
        });
        assert_eq!(
            per_pool, [1.0; 3],
            "round trips per borrow + SELECT 1 (slipstream-pool, deadpool, bb8)"
        );
    }

    #[test]
    fn the_warm_up_grows_with_the_borrowers_above_its_floor() {
        let t = Timing {
            warmup: Duration::from_millis(500),
            warmup_per_borrower: WARMUP_PER_BORROWER,
            window: Duration::from_secs(2),
        };
        assert_eq!(t.for_borrowers(10).warmup, Duration::from_millis(500));
        assert_eq!(t.for_borrowers(10_000).warmup, Duration::from_secs(4));
        assert_eq!(t.for_borrowers(10_000).window, Duration::from_secs(2));
        let quick = Timing {
            warmup_per_borrower: Duration::ZERO,
            ..t
        };
        assert_eq!(
            quick.for_borrowers(10_000).warmup,
            Duration::from_millis(500)
        );
    }

    #[test]
    fn every_round_runs_each_pool_once_and_the_twin_right_after_ours() {
        for rep in 0..REPS {
            let plain = round(rep, false);
            for twin in [false, true] {
                let steps = round(rep, twin);
                for which in 0..3 {
                    let n = steps.iter().filter(|s| **s == Step::Pool(which)).count();
                    assert_eq!(n, 1, "round {rep}: pool {which} runs {n} times");
                }
                let twins = steps.iter().filter(|s| **s == Step::Twin).count();
                assert_eq!(twins, usize::from(twin), "round {rep}: {twins} twins");
                if twin {
                    let ours = steps.iter().position(|s| *s == Step::Pool(0));
                    assert_eq!(
                        steps.get(ours.map_or(usize::MAX, |i| i + 1)),
                        Some(&Step::Twin),
                        "round {rep}: the twin does not follow our run: {steps:?}"
                    );
                    // The peers keep the order they have without the twin.
                    let without: Vec<Step> =
                        steps.iter().copied().filter(|s| *s != Step::Twin).collect();
                    assert_eq!(without, plain);
                }
            }
        }
        let firsts: Vec<Step> = (0..3).map(|rep| round(rep, false)[0]).collect();
        assert_eq!(firsts, [Step::Pool(0), Step::Pool(1), Step::Pool(2)]);
    }

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

    /// A figure that is missing is said to be missing (docs/lab.md). Steps: a run in which no
    /// borrow completed inside the window (a stalled pool, or every borrow failing), its waits
    /// and its table row. Before the fix its p50, p99, p99.9 and max waits read 0.0 µs, the
    /// best waits of any pool.
    #[test]
    fn a_run_without_a_completed_borrow_shows_its_waits_missing_not_zero() {
        let rec = Record::new(2);
        let (before, seconds, after) = (rec.snapshot(), 0.2, rec.snapshot());
        rec.done(0, None);
        let run = summarize("stalled", seconds, &before, &rec, &after);
        let p999 = run.waits.quantile_us(0.999);
        assert!(
            p999.is_nan(),
            "p99.9 wait of a run with no completed borrow: {p999} µs"
        );
        let cells = run.cells("tasks", Hold::Zero, 1.0);
        for (column, cell) in ["p50", "p99", "p99.9", "max"].iter().zip(&cells[6..10]) {
            assert!(cell.starts_with("missing"), "{column} wait: {cell}");
        }
        // With borrows, figures as before.
        rec.measuring.store(true, Relaxed);
        rec.done(1, Some(Duration::from_micros(3)));
        let run = summarize("ok", seconds, &before, &rec, &rec.snapshot());
        assert_eq!(run.cells("tasks", Hold::Zero, 1.0)[9], "3");
    }

    #[test]
    fn the_window_counts_only_what_happened_inside_it() {
        let rec = Record::new(3);
        rec.done(0, Some(Duration::from_micros(5)));
        let before = rec.snapshot();
        rec.measuring.store(true, Relaxed);
        rec.done(1, Some(Duration::from_micros(7)));
        rec.done(1, Some(Duration::from_micros(900)));
        rec.done(2, None);
        rec.measuring.store(false, Relaxed);
        let after = rec.snapshot();
        rec.done(0, Some(Duration::from_secs(1)));
        let run = summarize("x", 1.0, &before, &rec, &after);
        assert_eq!(run.per_sec, 2.0);
        assert_eq!((run.zero, run.min, run.max), (2, 0, 2));
        assert_eq!(run.failures, 1);
        assert_eq!(run.waits.max_ns, 900_000);
        assert_eq!(run.waits.buckets.iter().sum::<u64>(), 2);
        assert!((run.jain - 1.0 / 3.0).abs() < 1e-9);
    }

    fn run(per_sec: f64, zero: usize, wait_us: u64) -> Run {
        let mut waits = Waits::new();
        waits.record(Duration::from_micros(wait_us));
        Run {
            pool: "x",
            borrowers: 10,
            per_sec,
            rates: Vec::new(),
            waits,
            zero,
            min: 0,
            max: 0,
            jain: 1.0,
            failures: 1,
        }
    }

    #[test]
    fn a_point_pairs_its_ratios_by_round_and_keeps_every_runs_waits() {
        // The machine ran fast in rounds 0 and 2 and slow in round 1; slipstream-pool ties the
        // fair peer in every round. The medians alone (150 against 200) would say 0.75x.
        let point = Point::of(
            [
                vec![run(200.0, 0, 1), run(100.0, 0, 2), run(150.0, 0, 900)],
                vec![run(200.0, 0, 1), run(100.0, 0, 1), run(200.0, 0, 1)],
                vec![run(400.0, 3, 1), run(400.0, 0, 1), run(400.0, 0, 1)],
            ],
            true,
        );
        let best = point.ours_over_best.expect("one peer is fair");
        assert_eq!((best.min, best.p50, best.max), (0.75, 1.0, 1.0));
        assert_eq!(point.ours_over, vec![1.0, 1.0, 0.375]);
        let ours = &point.medians[0];
        assert_eq!(ours.per_sec, 150.0);
        assert_eq!(ours.rates, vec![100.0, 150.0, 200.0]);
        assert_eq!(ours.failures, 3);
        assert_eq!(ours.waits.buckets.iter().sum::<u64>(), 3);
        assert_eq!(ours.waits.max_ns, 900_000);
        // Without the fairness rule the starving peer is the best one.
        let any = Point::of(
            [
                vec![run(1.0, 0, 1); 3],
                vec![run(1.0, 0, 1); 3],
                vec![run(4.0, 1, 1); 3],
            ],
            false,
        );
        assert_eq!(any.ours_over_best.map(|b| b.p50), Some(0.25));
        let none = Point::of(
            [
                vec![run(1.0, 0, 1); 3],
                vec![run(1.0, 2, 1); 3],
                vec![run(4.0, 1, 1); 3],
            ],
            true,
        );
        assert!(none.ours_over_best.is_none());
    }

    #[test]
    fn jain_is_one_for_equal_shares() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-12);
        assert!((jain(&[8, 0, 0, 0]) - 0.25).abs() < 1e-12);
    }

    /// A figure that is missing is said to be missing (docs/lab.md). Steps: the fairness of a
    /// run in which no borrower borrowed, and its table cell. Before the fix it was 0.000, an
    /// unfairness no run can have (the floor is 1/n), written into the JSON's `_jain` as such.
    #[test]
    fn the_fairness_of_a_run_without_borrows_is_missing_not_zero() {
        let j = jain(&[0, 0, 0]);
        assert!(j.is_nan(), "Jain of no borrows: {j}");
        let rec = Record::new(3);
        let run = summarize("stalled", 0.2, &rec.snapshot(), &rec, &rec.snapshot());
        let cell = &run.cells("tasks", Hold::Zero, 1.0)[12];
        assert!(cell.starts_with("missing"), "Jain cell: {cell}");
    }
}
