//! What the runner's integration tests share (each test binary uses some of it).
#![allow(dead_code)]

use std::time::Duration;

use slipstream_bench::{Session, Transaction, TxError, Workload};

/// A multi-threaded runtime with two workers (this machine's cores), timers on.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Sleeps for its milliseconds (0: returns at once), then succeeds.
pub struct Sleep(pub u64);

impl Transaction for Sleep {
    async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
        if self.0 > 0 {
            tokio::time::sleep(Duration::from_millis(self.0)).await;
        }
        Ok(())
    }
}

/// A workload of one type, `sleep`, that sleeps `ms` and needs no database.
pub fn sleeping(ms: u64) -> Workload {
    Workload::new("sleep")
        .transaction("sleep", 1, move || Sleep(ms))
        .without_database()
}

/// `SELECT 1` on the simple protocol.
pub struct Ping;

impl Transaction for Ping {
    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        s.client()?.simple_query("SELECT 1").await?;
        Ok(())
    }
}

/// A run of `users` users on one thread, seeded `seed`, measuring for `duration` with no
/// warm-up: the shape most runner tests start from.
pub fn config(
    url: Option<String>,
    users: usize,
    seed: u64,
    duration: Duration,
) -> slipstream_bench::RunConfig {
    let mut c = slipstream_bench::RunConfig::new(url);
    (c.users, c.threads, c.seed) = (users, 1, seed);
    c.warmup = Duration::ZERO;
    c.duration = duration;
    c
}

/// A short run of `SELECT 1` by one user against `url`, its context captured as
/// `slipstream bench` captures it.
pub fn run_against(url: &str, seed: u64) -> slipstream_bench::BenchRun {
    let mut c = config(Some(url.into()), 1, seed, Duration::from_millis(200));
    c.progress = slipstream_bench::Style::Quiet;
    let workload = Workload::new("ping").transaction("ping", 1, || Ping);
    rt().block_on(slipstream_bench::run(
        &workload,
        &c,
        std::future::pending::<()>(),
    ))
    .unwrap()
}
