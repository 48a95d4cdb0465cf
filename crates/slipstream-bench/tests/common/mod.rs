//! What the runner's integration tests share.

/// A multi-threaded runtime with two workers (this machine's cores), timers on.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
