//! Fixing where client and server run, when the server is on this machine.
//!
//! On a small VM, a round trip between a client and a backend on the same CPU (a context
//! switch) and on different CPUs (a cross-CPU wake-up) differ several-fold. Left alone, the
//! kernel places each backend by chance, so a comparison of two clients, each with its own
//! backend, would measure that chance. When the database is local, experiments pin the client
//! thread and every backend it uses to chosen CPUs, and report each placement.

use slipstream_testkit::{pin_current_thread, pin_process, unpin_current_thread, unpin_process};

/// Where the client and the backends run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    pub name: &'static str,
    pub client_cpu: usize,
    pub server_cpu: usize,
}

/// Same CPU, then different CPUs; empty on a one-CPU machine.
pub(crate) fn placements() -> Vec<Placement> {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if cpus < 2 {
        return Vec::new();
    }
    vec![
        Placement {
            name: "same CPU",
            client_cpu: 0,
            server_cpu: 0,
        },
        Placement {
            name: "cross CPU",
            client_cpu: 1,
            server_cpu: 0,
        },
    ]
}

/// True if `url` names a server on this machine (loopback or Unix socket).
pub(crate) fn is_local(url: &str) -> bool {
    let Ok(config) = url.parse::<slipstream_pg::Config>() else {
        return false;
    };
    let hosts = config.get_hosts();
    !hosts.is_empty()
        && hosts.iter().all(|h| match h {
            slipstream_pg::Host::Unix(_) => true,
            slipstream_pg::Host::Tcp(name) => {
                name == "localhost" || name == "::1" || name.starts_with("127.")
            }
        })
}

/// Pins the calling thread and the given backends. Fails (and pins nothing more) if a pid is
/// not a local `postgres` process.
pub(crate) fn apply(p: Placement, backends: &[i32]) -> anyhow::Result<()> {
    for &pid in backends {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        anyhow::ensure!(
            comm.trim() == "postgres",
            "backend {pid} is not a local postgres process"
        );
    }
    for &pid in backends {
        pin_process(pid as u32, &[p.server_cpu])?;
    }
    pin_current_thread(&[p.client_cpu])?;
    Ok(())
}

/// For experiments that measure one placement: pins the calling thread and `backends` to the
/// same CPU when the server is local. Returns a note saying what was done, for the result.
/// Call [`release`] afterwards.
pub(crate) fn pin_same_cpu(url: &str, backends: &[i32]) -> String {
    if !is_local(url) {
        return "the server is not local: client and backends were left where the kernel put them"
            .into();
    }
    let Some(p) = placements().into_iter().next() else {
        return "one CPU: nothing to pin".into();
    };
    match apply(p, backends) {
        Ok(()) => format!(
            "client thread and backends pinned to CPU {} (same CPU), so backend placement does not decide the comparison",
            p.server_cpu
        ),
        Err(e) => {
            release(backends);
            format!("could not fix CPU placement ({e}); measured unpinned")
        }
    }
}

/// Lets the calling thread and the backends run anywhere again. Not by counting CPUs with
/// `available_parallelism`: for a pinned thread that counts only its own CPU, so the thread
/// would stay pinned, and every experiment run after it in the process (`slipstream demo`),
/// with every thread it spawns, would share that one CPU.
pub(crate) fn release(backends: &[i32]) {
    let _ = unpin_current_thread();
    for &pid in backends {
        let _ = unpin_process(pid as u32);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_loopback_and_sockets_are_local() {
        assert!(super::is_local("postgres://u@127.0.0.1:5/db"));
        assert!(super::is_local("host=/tmp port=5"));
        assert!(super::is_local("postgres://u@localhost/db"));
        assert!(!super::is_local("postgres://u@db.example.com/db"));
        assert!(!super::is_local("postgres://u@127.0.0.1,db.example.com/db"));
    }

    /// `roundtrip` measures the cross-CPU placement last, so `release` starts from a thread
    /// pinned to one CPU: it must not take that thread's one CPU for the machine's, or every
    /// later experiment of `slipstream demo` (and the threads they spawn) stays on it.
    #[test]
    fn release_lets_a_pinned_thread_run_on_every_cpu_again() {
        let cpus = || std::thread::available_parallelism().map_or(1, |n| n.get());
        let before = cpus();
        let Some(cross) = super::placements().into_iter().nth(1) else {
            return; // one CPU: nothing to release
        };
        slipstream_testkit::pin_current_thread(&[cross.client_cpu]).unwrap();
        assert_eq!(cpus(), 1);
        super::release(&[]);
        assert_eq!(cpus(), before, "the thread is still pinned after release");
    }
}
