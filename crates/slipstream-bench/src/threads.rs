//! The threads users run on: one single-threaded tokio runtime per OS thread, users dealt out
//! round robin (pgbench's `-j`).
//!
//! Why not one multi-threaded runtime: on this 2-core machine, 8 users on tokio's work-stealing
//! scheduler reached 0.65-0.75x pgbench's `SELECT 1` rate, because a connection's wake-up often
//! lands on the other worker (or waits for the one parked in the I/O driver). A user that stays
//! on its thread answers its socket from that thread's own epoll, as pgbench's threads do.

use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

pub(crate) struct UserThreads {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl UserThreads {
    pub(crate) fn start(n: usize) -> anyhow::Result<UserThreads> {
        // The system's words alone ("Too many open files") name neither the threads nor the
        // flag that asked for them: each thread's event loop takes file descriptors of its
        // own, so `-j` can ask for more than the process may open.
        let cannot = |i: usize, e: &dyn std::fmt::Display| {
            anyhow::anyhow!(
                "could not start user thread {} of {n} (--threads): {e}; ask for fewer threads, or raise the process's limits (ulimit -n, ulimit -u)",
                i + 1
            )
        };
        let mut t = UserThreads {
            handles: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
        };
        for i in 0..n.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                // Before the thread sleeps in epoll_wait, give the CPU to whatever is runnable
                // (on a small machine, usually a backend about to answer one of this thread's
                // users): the reply then often lands while this thread is still runnable, so
                // neither side pays for waking a sleeper. Measured (`lab run runner`, SELECT 1,
                // 8 users, quiet): 0.91x pgbench without, 0.95x with (6 interleaved rounds).
                .on_thread_park(std::thread::yield_now)
                .build()
                .map_err(|e| cannot(i, &e))?;
            let (stop, stopped) = oneshot::channel::<()>();
            t.handles.push(rt.handle().clone());
            t.stops.push(stop);
            t.threads.push(
                std::thread::Builder::new()
                    .name(format!("bench-users-{i}"))
                    // Runs the user tasks until told to stop; dropping the runtime then drops
                    // any task still there (its recorder flushes on drop).
                    .spawn(move || rt.block_on(async { drop(stopped.await) }))
                    .map_err(|e| cannot(i, &e))?,
            );
        }
        Ok(t)
    }

    /// The runtime user `user` runs on.
    pub(crate) fn handle(&self, user: usize) -> &Handle {
        &self.handles[user % self.handles.len()]
    }
}

impl Drop for UserThreads {
    fn drop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
