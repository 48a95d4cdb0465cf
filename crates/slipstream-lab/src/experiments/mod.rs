//! The experiments, one module each.

pub(crate) mod connect;
pub(crate) mod pipeline;
pub(crate) mod proxy;
pub(crate) mod roundtrip;

use std::time::Duration;

use cpu_time::ThreadTime;

/// A single-threaded runtime: every client's work, including tokio-postgres's connection
/// task, runs on this thread, so its CPU time is the clients' CPU time.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Wall and CPU time of a piece of work.
pub(crate) struct Timing {
    pub wall: Duration,
    pub cpu: Duration,
}

/// Starts a wall + CPU stopwatch. CPU is the calling thread's: the current-thread runtime
/// runs every client future there, while the delay proxy's threads, which live in the same
/// process, are not the clients' cost.
pub(crate) struct Stopwatch {
    wall: std::time::Instant,
    cpu: ThreadTime,
}

impl Stopwatch {
    pub(crate) fn start() -> Stopwatch {
        Stopwatch {
            wall: std::time::Instant::now(),
            cpu: ThreadTime::now(),
        }
    }

    pub(crate) fn stop(&self) -> Timing {
        Timing {
            wall: self.wall.elapsed(),
            cpu: self.cpu.elapsed(),
        }
    }
}

/// Forces TLS off in a connection string for both clients, so connection costs compare like
/// with like (tokio-postgres is measured with `NoTls`). Keeps the caller's choice if it made one.
pub(crate) fn without_tls(url: &str) -> String {
    if url.contains("sslmode") {
        return url.to_string();
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}sslmode=disable")
    } else {
        format!("{url} sslmode=disable")
    }
}

/// CPU time used by finished child processes (pgbench), for peers that run out of process.
pub(crate) fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(u) => {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tls_is_turned_off_only_when_unspecified() {
        assert_eq!(
            super::without_tls("postgres://h/db"),
            "postgres://h/db?sslmode=disable"
        );
        assert_eq!(
            super::without_tls("postgres://h/db?x=1"),
            "postgres://h/db?x=1&sslmode=disable"
        );
        assert_eq!(super::without_tls("host=h"), "host=h sslmode=disable");
        assert_eq!(
            super::without_tls("host=h sslmode=require"),
            "host=h sslmode=require"
        );
    }
}
