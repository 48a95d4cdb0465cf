//! The differential fuzzer of issue 18: random sessions write and read an enabled table while
//! every read is compared with the normal plan's answer on the same snapshot.
//!
//! Several concurrent sessions run random mixes of single- and multi-row INSERT, UPDATE
//! (primary-key changes included), DELETE and upserts, reads inside the writing statement
//! (RETURNING a volatile PL/pgSQL function that reads by key, BEFORE and AFTER row triggers
//! that read), savepoints with partial rollback, ROLLBACK, deferred foreign keys failing at
//! COMMIT, TRUNCATE, primary-key and column DDL (committed and rolled back), VACUUM FULL,
//! populate, forced parallel plans and prepared statements under every `plan_cache_mode`.
//! The `schema` module says how each read is compared.
//!
//! The seed fixes each session's stream of operations; the interleaving of sessions is up to
//! the scheduler, so the log of the run (not the seed) is the reproducer. At the first
//! mismatch every session stops, the log is shrunk by replaying it on a fresh server, and the
//! failure carries the seed and the reproducing SQL.
//!
//! ```no_run
//! # async fn demo() {
//! let config = memopt_check::fuzz::Config::from_env(20_000);
//! match memopt_check::fuzz::run(&config).await {
//!     Ok(report) => println!("{report}"),
//!     Err(failure) => panic!("{failure}"),
//! }
//! # }
//! ```

mod schema;
mod session;
mod shrink;
mod step;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use session::{Session, Shared};
use step::Conn;

/// What a run does.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seeds every session's random stream; printed with every result.
    pub seed: u64,
    /// Reads compared on the client before the run ends (reads inside writes come on top).
    pub reads: u64,
    /// Concurrent sessions.
    pub sessions: usize,
    /// Keys 1..=keys: few keys make sessions collide and reads hit recently written rows.
    pub keys: i32,
    /// Time allowed for shrinking a failure.
    pub shrink_budget: Duration,
    /// Features left out, to look past a known bug: `returning` (reads in RETURNING),
    /// `triggers` (reads in row triggers), `ddl` (primary-key and column changes), `client`
    /// (fast lookups by the client's FunctionCall path, single and pipelined).
    pub skip: Vec<String>,
    /// `memopt.pool_size` of the cluster (None: memopt's default); a small pool with many keys
    /// makes the clock sweep evict while sessions write.
    pub pool_size: Option<String>,
}

impl Config {
    /// `reads` reads, unless `MEMOPT_FUZZ_READS` says otherwise; the seed from
    /// `MEMOPT_FUZZ_SEED` or the clock; `MEMOPT_FUZZ_SESSIONS` (default 3) and
    /// `MEMOPT_FUZZ_KEYS` (default 300); `MEMOPT_FUZZ_SKIP` (comma-separated features to
    /// leave out, see [`Config::skip`]); `MEMOPT_FUZZ_SHRINK_SECS` (default 120);
    /// `MEMOPT_FUZZ_POOL_SIZE` (`memopt.pool_size`, e.g. `300kB`).
    pub fn from_env(reads: u64) -> Config {
        fn var<T: std::str::FromStr>(name: &str) -> Option<T> {
            let v = std::env::var(name).ok()?;
            match v.parse() {
                Ok(x) => Some(x),
                Err(_) => panic!("{name}={v:?} is not a number; unset it or give a number"),
            }
        }
        let seed = var("MEMOPT_FUZZ_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        Config {
            seed,
            reads: var("MEMOPT_FUZZ_READS").unwrap_or(reads),
            sessions: var("MEMOPT_FUZZ_SESSIONS").unwrap_or(3),
            keys: var("MEMOPT_FUZZ_KEYS").unwrap_or(300),
            shrink_budget: Duration::from_secs(var("MEMOPT_FUZZ_SHRINK_SECS").unwrap_or(120)),
            skip: std::env::var("MEMOPT_FUZZ_SKIP")
                .unwrap_or_default()
                .split(',')
                .map(|f| f.trim().to_string())
                .filter(|f| !f.is_empty())
                .inspect(|f| {
                    assert!(
                        ["returning", "triggers", "ddl", "client"].contains(&f.as_str()),
                        "MEMOPT_FUZZ_SKIP: unknown feature {f:?}; use returning, triggers, ddl \
                         or client"
                    )
                })
                .collect(),
            pool_size: std::env::var("MEMOPT_FUZZ_POOL_SIZE").ok(),
        }
    }
}

/// A run without mismatches.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Reads compared: by the client plus two per `chk` call (RETURNING and triggers).
    pub reads: u64,
    /// Of those, reads through memopt.get / memopt.get_many (the fast lookup): by the client
    /// plus one per `chk` call.
    pub fast_reads: u64,
    /// Of those, reads by the client's FunctionCall path (`Client::memopt_get`, one per key,
    /// or pipelined lookups coalesced into one `get_many`).
    pub client_reads: u64,
    /// Lookups through memopt's node with memopt on (the normal-plan side excluded).
    pub memopt_lookups: u64,
    /// Of those, hits: answers served from the store.
    pub hits: u64,
    /// Statements sent.
    pub steps: usize,
    /// Statements that failed (expected: conflicts, deadlocks, doomed commits...).
    pub errors: u64,
    /// Wall time of the run.
    pub duration: Duration,
}

impl Report {
    /// hits / memopt lookups.
    pub fn hit_ratio(&self) -> f64 {
        self.hits as f64 / self.memopt_lookups.max(1) as f64
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memopt fuzz: seed {}, {} reads compared ({} through memopt.get, {} of them by FunctionCall), 0 mismatches; \
             {} memopt lookups, {} hits ({:.1}%); {} statements ({} failed as expected); {:.1} s",
            self.seed,
            self.reads,
            self.fast_reads,
            self.client_reads,
            self.memopt_lookups,
            self.hits,
            100.0 * self.hit_ratio(),
            self.steps,
            self.errors,
            self.duration.as_secs_f64()
        )
    }
}

/// A mismatch (or a run that could not be carried out).
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// What disagreed.
    pub message: String,
    /// SQL reproducing it from the schema below (shrunk if `reproduced`).
    pub reproducer: String,
    /// What replaying the reproducer on a fresh server showed (None: the replay agreed
    /// everywhere; the steps are then the run's own, unshrunk).
    pub reproduced: Option<String>,
    /// The schema the reproducer starts from.
    pub schema: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "memopt fuzz: seed {}: {}", self.seed, self.message)?;
        writeln!(
            f,
            "{} (rerun with MEMOPT_FUZZ_SEED={}; the interleaving may differ)",
            if self.reproduced.is_some() {
                "reproducer, shrunk and replayed on a fresh server:"
            } else {
                "the steps before the mismatch (a sequential replay did not reproduce it: \
                 it needs the concurrency of the run):"
            },
            self.seed
        )?;
        if let Some(m) = &self.reproduced {
            writeln!(f, "the replay of the reproducer shows, at {m}")?;
        }
        writeln!(f, "---- schema ----\n{}", self.schema.trim())?;
        writeln!(f, "---- steps ----\n{}", self.reproducer.trim_end())?;
        // Again at the end: a CI log cut to its tail still names the mismatch.
        write!(f, "---- end: seed {}: {}", self.seed, self.message)
    }
}

/// A cluster with memopt preloaded and the run's settings. Deadlocks between sessions are
/// part of the workload: detect them quickly.
fn start_cluster(
    config: &Config,
) -> Result<slipstream_testkit::Cluster, slipstream_testkit::Error> {
    let mut settings = vec![("deadlock_timeout", "50ms")];
    if let Some(size) = &config.pool_size {
        settings.push(("memopt.pool_size", size.as_str()));
    }
    crate::cluster(&settings)
}

fn setup_failure(config: &Config, what: &str, e: impl fmt::Display) -> Failure {
    Failure {
        seed: config.seed,
        message: format!("{what}: {e} (is memopt installed? run extension/memopt/test/run)"),
        reproducer: String::new(),
        reproduced: None,
        schema: String::new(),
    }
}

/// Runs the fuzzer on a throwaway cluster with memopt preloaded.
pub async fn run(config: &Config) -> Result<Report, Failure> {
    eprintln!(
        "memopt fuzz: seed {} (MEMOPT_FUZZ_SEED), {} reads, {} sessions, {} keys, skipping {:?}",
        config.seed, config.reads, config.sessions, config.keys, config.skip
    );
    let cluster =
        start_cluster(config).map_err(|e| setup_failure(config, "cannot start a cluster", e))?;
    let url = cluster.url();
    let mut admin = slipstream_pg::connect(&url)
        .await
        .map_err(|e| setup_failure(config, "cannot connect", e))?;
    admin
        .batch_execute(&schema::setup(config.keys))
        .await
        .map_err(|e| setup_failure(config, "cannot create the schema", e))?;

    let shared = Arc::new(Shared {
        keys: config.keys,
        target: config.reads,
        reads: AtomicU64::new(0),
        fast_reads: AtomicU64::new(0),
        client_reads: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        log: Mutex::new(Vec::new()),
        failure: Mutex::new(None),
        pk_is_b: AtomicBool::new(false),
        skip: config.skip.clone(),
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for id in 0..config.sessions {
        let conn = Conn::connect(&url)
            .await
            .map_err(|e| setup_failure(config, "cannot connect", e))?;
        let (shared, seed) = (shared.clone(), config.seed);
        tasks.push(tokio::spawn(async move {
            Session::new(id, seed, conn, &shared).run().await
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| setup_failure(config, "a session panicked", e))?;
    }
    let duration = started.elapsed();

    let failure = shared
        .failure
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let log = std::mem::take(&mut *shared.log.lock().unwrap_or_else(|p| p.into_inner()));
    if let Some((failing, message)) = failure {
        drop(admin);
        drop(cluster);
        eprintln!(
            "memopt fuzz: seed {}: {message}; shrinking ({} steps)",
            config.seed,
            failing + 1
        );
        let fresh = start_cluster(config)
            .map_err(|e| setup_failure(config, "cannot start a cluster to shrink on", e))?;
        let (steps, reproduced, replays) = shrink::shrink(
            &fresh.url(),
            config.keys,
            &log,
            failing,
            config.shrink_budget,
        )
        .await;
        eprintln!("memopt fuzz: {replays} replays, {} steps left", steps.len());
        return Err(Failure {
            seed: config.seed,
            message,
            reproducer: step::render(&steps),
            reproduced,
            schema: schema::setup(config.keys),
        });
    }

    if let Ok(msgs) = admin
        .simple_query("SELECT row_to_json(s) FROM memopt.stats s WHERE \"table\" = 't'::regclass")
        .await
    {
        for m in msgs {
            if let slipstream_pg::SimpleQueryMessage::Row(r) = m {
                eprintln!(
                    "memopt fuzz: memopt.stats {}",
                    r.get(0).ok().flatten().unwrap_or("")
                );
            }
        }
    }
    let row = admin
        .query_one(
            "SELECT s.hits, s.lookups - s.misses_disabled,
                    (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM fuzz_reads),
                    (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM fuzz_fast_reads)
               FROM memopt.stats s WHERE s.\"table\" = 't'::regclass",
            &[],
        )
        .await
        .map_err(|e| setup_failure(config, "cannot read memopt.stats", e))?;
    let hits: i64 = row.get(0).map_err(|e| setup_failure(config, "stats", e))?;
    let lookups: i64 = row.get(1).map_err(|e| setup_failure(config, "stats", e))?;
    let chk_calls: i64 = row.get(2).map_err(|e| setup_failure(config, "stats", e))?;
    let chk_fast: i64 = row.get(3).map_err(|e| setup_failure(config, "stats", e))?;
    let errors = shared.errors.load(Ordering::Relaxed);
    Ok(Report {
        seed: config.seed,
        reads: shared.reads.load(Ordering::Relaxed) + 2 * chk_calls as u64 + chk_fast as u64,
        fast_reads: shared.fast_reads.load(Ordering::Relaxed) + chk_fast as u64,
        client_reads: shared.client_reads.load(Ordering::Relaxed),
        memopt_lookups: lookups as u64,
        hits: hits as u64,
        steps: log.len(),
        errors,
        duration,
    })
}

#[cfg(test)]
mod tests {
    use super::Failure;

    #[test]
    fn a_failure_names_its_seed_and_mismatch_first_and_last() {
        let failure = Failure {
            seed: 42,
            message: "key 108: memopt (108, y61) against the normal plan (108)".into(),
            reproducer: "s1: BEGIN\ns1: SELECT ...\n".into(),
            reproduced: None,
            schema: "CREATE TABLE t (k bigint PRIMARY KEY)".into(),
        };
        let text = failure.to_string();
        let first = text.lines().next().unwrap_or_default();
        let last = text.lines().last().unwrap_or_default();
        for line in [first, last] {
            assert!(
                line.contains("seed 42") && line.contains("key 108: memopt (108, y61)"),
                "{line:?} in\n{text}"
            );
        }
    }
}
