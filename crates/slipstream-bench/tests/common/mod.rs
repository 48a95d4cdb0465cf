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
