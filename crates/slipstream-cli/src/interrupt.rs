//! What every command does with Ctrl-C in common.

use std::time::{Duration, Instant};

use tokio::signal::unix::{Signal, SignalKind, signal};

/// Exit status of a command stopped by Ctrl-C (128 + SIGINT).
pub const INTERRUPTED: u8 = 130;

/// A SIGINT this soon after the first is the same stop, not a second Ctrl-C.
pub const SAME_STOP: Duration = Duration::from_millis(250);

/// How long cancelled work may take to end on the server before we stop waiting.
pub const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// How often the cancel is sent again while the work has not ended.
const CANCEL_AGAIN: Duration = Duration::from_secs(1);

/// Ctrl-C, and SIGTERM (`kill`, a CI job's timeout), listened for from creation: from then on
/// neither kills the process, so work on the server is cancelled, not left running behind a
/// dead client (a `CREATE INDEX` or `pg_sleep` runs to its end, and commits, when only its
/// socket closes). Either is a stop; a second one of either exits at once.
pub struct CtrlC {
    int: Signal,
    term: Signal,
}

/// How work run by [`CtrlC::cancelling`] ended.
pub enum Cancelled<T> {
    /// No Ctrl-C came: its own output.
    Ran(T),
    /// A Ctrl-C came, the cancel was sent, and the work then ended, cancelled or (when it had
    /// already finished) not: its output says which.
    AfterCancel(T),
    /// The cancel request could not be sent; the work may still run on the server.
    NotSent(slipstream_pg::Error),
    /// The server took the cancel but the work had not ended [`CANCEL_WAIT`] later.
    NotEnded,
}

impl<T> Cancelled<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Cancelled<U> {
        match self {
            Cancelled::Ran(t) => Cancelled::Ran(f(t)),
            Cancelled::AfterCancel(t) => Cancelled::AfterCancel(f(t)),
            Cancelled::NotSent(e) => Cancelled::NotSent(e),
            Cancelled::NotEnded => Cancelled::NotEnded,
        }
    }
}

impl CtrlC {
    pub fn listen() -> anyhow::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The next Ctrl-C or SIGTERM.
    async fn stop(&mut self) {
        tokio::select! {
            _ = next(&mut self.int) => {}
            _ = next(&mut self.term) => {}
        }
    }

    /// `work`'s output, or `None` if Ctrl-C came first (`work` is then dropped).
    pub async fn or<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            out = work => Some(out),
            _ = self.stop() => None,
        }
    }

    /// Runs `work`. On Ctrl-C or SIGTERM, sends `cancel()` to the server and waits up to
    /// [`CANCEL_WAIT`] for `work` to end, as psql does, sending it again every
    /// [`CANCEL_AGAIN`]: a cancel request stops only what runs when it arrives, and one that
    /// overtakes the statement it was meant for is lost. `what` names the work on stderr. A
    /// second Ctrl-C exits at once, leaving the work to the server.
    pub async fn cancelling<T, F>(
        &mut self,
        what: &str,
        work: impl Future<Output = T>,
        cancel: impl Fn() -> F,
    ) -> Cancelled<T>
    where
        F: Future<Output = Result<(), slipstream_pg::Error>>,
    {
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => return Cancelled::Ran(out),
            _ = self.stop() => {}
        }
        let pressed = Instant::now();
        eprintln!("cancelling {what} on the server (Ctrl-C again to exit now, leaving it to run)");
        let after_cancel = async {
            if let Err(e) = cancel().await {
                return Cancelled::NotSent(e);
            }
            let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
            loop {
                let again = (tokio::time::Instant::now() + CANCEL_AGAIN).min(deadline);
                match tokio::time::timeout_at(again, &mut work).await {
                    Ok(out) => return Cancelled::AfterCancel(out),
                    Err(_) if again >= deadline => return Cancelled::NotEnded,
                    Err(_) => {
                        let _ = cancel().await;
                    }
                }
            }
        };
        let second = async {
            loop {
                self.stop().await;
                // One stop sent twice (`timeout -s INT` signals the process and then its
                // group) is not a second Ctrl-C.
                if pressed.elapsed() >= SAME_STOP {
                    return;
                }
            }
        };
        tokio::select! {
            c = after_cancel => c,
            _ = second => std::process::exit(i32::from(INTERRUPTED)),
        }
    }
}

/// The next SIGINT; never, if the listener closed.
async fn next(signal: &mut Signal) {
    if signal.recv().await.is_none() {
        std::future::pending::<()>().await;
    }
}

/// For commands whose stop needs nothing but a clean exit (`lab run`, `demo`): from this call
/// on, Ctrl-C or SIGTERM stops the throwaway PostgreSQL clusters the process started (an
/// experiment's private servers) and removes their directories, then exits with
/// [`INTERRUPTED`]. Killed by the signal's default action, the process left those servers
/// running, each with its data directory, until some later process's sweep. The experiment
/// under way is lost either way: it writes its result only at its end.
pub fn stop_clusters_on_signal() -> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Registered before this returns: a signal from now on is handled, not fatal.
    let (mut int, mut term) = runtime.block_on(async {
        anyhow::Ok((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })?;
    std::thread::Builder::new()
        .name("stop-on-signal".into())
        .spawn(move || {
            let what = runtime.block_on(async {
                tokio::select! {
                    _ = next(&mut int) => "Ctrl-C",
                    _ = next(&mut term) => "SIGTERM",
                }
            });
            // Before the clusters stop: whatever fails because they do (a start waiting for
            // its server, a query on it) must find the stop under way and leave the exit to us.
            STOPPING.store(true, Ordering::SeqCst);
            let stopped = slipstream_testkit::stop_every_cluster();
            eprintln!(
                "slipstream: stopped by {what}; the experiment under way wrote no result{}",
                match stopped {
                    0 => String::new(),
                    1 => "; the private PostgreSQL cluster it had started is stopped and removed"
                        .into(),
                    n => format!(
                        "; the {n} private PostgreSQL clusters it had started are stopped and removed"
                    ),
                }
            );
            std::process::exit(i32::from(INTERRUPTED));
        })?;
    Ok(())
}

/// Set by [`stop_clusters_on_signal`]'s thread when a signal came, before it stops anything.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Never returns while a stop on a signal is under way: the thread doing it exits the process
/// with [`INTERRUPTED`] once the clusters are down. The command's own outcome then is a
/// failure the stop caused ("postgres did not start", a closed connection), which would
/// otherwise win the race to exit, with status 1 and a misleading error.
pub fn defer_to_a_stop_under_way() {
    if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}
