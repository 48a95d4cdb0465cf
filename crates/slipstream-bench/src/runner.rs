//! Running a workload: closed loop (users with think time, Swingbench's model) or open loop
//! (Poisson arrivals served by the users, latency from the intended start).
//!
//! # Implementation details
//!
//! Every user is a tokio task with its own connection and its own instance of every transaction
//! type, on one of a few single-threaded runtimes (see `threads.rs`). Users connect and run `init` first; the clock starts only when all are ready, so the
//! warm-up is not eaten by connecting. Then:
//!
//! ```text
//!  t0 ──warm-up──▶ w ──────measured window──────▶ e ──drain (≤ grace)──▶ results
//!       not recorded   recorded if started ≥ w      in-flight work finishes and is recorded
//! ```
//!
//! Closed loop: a user thinks, picks a type by weight, runs it, and records it if it started in
//! the window. Open loop: an OS thread draws exponential inter-arrival gaps and queues
//! `(intended start, type)`; idle users take arrivals in order. A transaction's latency runs
//! from its *intended* start, so time spent waiting for a free user (the server stalled, all
//! users busy) is counted rather than omitted (Gil Tene's coordinated omission); the queueing
//! part is also reported on its own as schedule lag.
//!
//! The queue holds at most [`QUEUE_LIMIT`] arrivals, so memory is bounded whatever the rate
//! (unbounded, `-r 1e9` stored 0.7 GB a second until the run was killed). An arrival that
//! finds it full is not stored but counted, per type, and censored as never started, like an
//! arrival still queued at the end; the run then warns that the users could not keep up. The
//! arrival thread never blocks on a full queue: blocking would leave the rest of the schedule
//! undrawn, arrivals in no count at all. The arrival thread sleeps with
//! `std::thread::sleep` (microseconds), not tokio's millisecond timer, so dispatch adds tens of
//! microseconds, not up to a millisecond.
//!
//! Arrivals intended inside the window are all served after it closes. `stop` and `quit` are
//! listened to from the start: before the window opens (the context read, users connecting)
//! they end the run with [`Interrupted`] and no result. Ctrl-C (the `stop`
//! future) ends the window at once; users finish the transaction in hand, and whatever has not
//! finished after the grace period is counted as unfinished.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use slipstream_pg::{CancelToken, Client, TransactionStatus};
use tokio::sync::{mpsc, watch};

use crate::phases::{Plan, Stage, StageTotals};
use crate::progress::{Clock, Live, LiveLog, ProgressLine, Style};
use crate::recorder::{Failure, Recorder, Sample, UserLog};
use crate::run_result::{BenchRun, Load};
use crate::think::ThinkTime;
use crate::threads::UserThreads;
use crate::transaction::{DynTransaction, Session};
use crate::workload::{Picker, Workload};

/// How long users get to finish in-flight work after the window closes.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// A closed-loop user yields to the scheduler this often when its transactions never wait
/// (a no-op workload), so timers and other users still run.
const YIELD_EVERY: u32 = 64;
/// Users connect this many at a time: enough to be quick, few enough not to storm the server.
const CONNECT_CONCURRENCY: usize = 8;
/// Open loop: the most arrivals waiting for a free user. About 26 bytes each in the channel's
/// blocks, so about 27 MB at most. It is this large so that a legitimate backlog (a stall of tens
/// of seconds at tens of thousands of arrivals a second) is kept and its latency measured: an
/// arrival turned away is censored, in no latency figure, and turning away a stall's backlog
/// would hide the stall.
pub const QUEUE_LIMIT: usize = 1 << 20;

/// How to run a workload.
///
/// ```
/// use std::time::Duration;
/// let mut c = slipstream_bench::RunConfig::new(Some("postgres://postgres@127.0.0.1/postgres".into()));
/// c.users = 8;
/// c.duration = Duration::from_secs(30);
/// c.rate = Some(2000.0); // open loop
/// ```
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The database; `None` only for workloads built `without_database`.
    pub url: Option<String>,
    /// Concurrent users, each with its own connection.
    pub users: usize,
    /// OS threads the users run on (default: one per CPU).
    pub threads: usize,
    /// The measured window.
    pub duration: Duration,
    /// Run before measuring, not recorded.
    pub warmup: Duration,
    /// Open loop at this many arrivals per second; `None` for closed loop.
    pub rate: Option<f64>,
    /// Closed loop: think time before each transaction.
    pub think: ThinkTime,
    /// Think time inside transactions ([`Session::think`]), not counted in latency.
    pub intra_think: ThinkTime,
    /// Seed for every random choice; the same seed repeats the same choices per user.
    pub seed: u64,
    /// Open loop: a transaction that starts later than this after its intended start is late.
    pub late_after: Duration,
    /// How long to wait for in-flight work at the end.
    pub grace: Duration,
    /// Write one CSV line per recorded transaction here. A file that cannot be created fails
    /// the run before it starts; one whose writing fails later (a full disk) is a warning in
    /// the result's `context.warnings`, and the result keeps every transaction.
    pub raw_csv: Option<PathBuf>,
    /// The progress line.
    pub progress: Style,
    /// Users (closed loop) or the arrival rate (open loop) rise evenly from nothing to the
    /// first stage's over this period, recorded as a stage of its own (`ramp-up`). Excludes a
    /// warm-up.
    pub ramp_up: Duration,
    /// Stages run one after the other, each with its own user count or rate; empty means one
    /// stage of `duration` at `users` or `rate`. With stages, `duration` and `rate` are not
    /// used, and `users` is the pool serving an open-loop run's arrivals.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut c = slipstream_bench::RunConfig::new(Some("postgres://postgres@127.0.0.1/postgres".into()));
    /// c.warmup = Duration::ZERO;
    /// c.ramp_up = Duration::from_secs(10); // users 1..8 start over 10 s
    /// c.stages = vec!["30s:8".parse().unwrap(), "30s:16".parse().unwrap()];
    /// ```
    pub stages: Vec<Stage>,
}

impl RunConfig {
    /// One user, 10 s, no warm-up, closed loop, no think time, a seed from the clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use slipstream_bench::{DEFAULT_GRACE, RunConfig, ThinkTime};
    /// let c = RunConfig::new(Some("postgres://app@db/orders".into()));
    /// assert_eq!((c.users, c.duration, c.warmup), (1, Duration::from_secs(10), Duration::ZERO));
    /// assert_eq!((c.rate, c.think, c.grace), (None, ThinkTime::NONE, DEFAULT_GRACE));
    /// ```
    pub fn new(url: Option<String>) -> RunConfig {
        RunConfig {
            url,
            users: 1,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            rate: None,
            think: ThinkTime::NONE,
            intra_think: ThinkTime::NONE,
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
            late_after: Duration::from_millis(1),
            grace: DEFAULT_GRACE,
            raw_csv: None,
            progress: Style::Quiet,
            ramp_up: Duration::ZERO,
            stages: Vec::new(),
        }
    }

    /// The phases resolved and checked.
    fn plan(&self) -> anyhow::Result<Plan> {
        Plan::new(
            self.users,
            self.rate,
            self.duration,
            self.warmup,
            self.ramp_up,
            &self.stages,
        )
    }

    fn check(&self, workload: &Workload) -> anyhow::Result<Plan> {
        anyhow::ensure!(self.users >= 1, "--users must be at least 1");
        anyhow::ensure!(self.threads >= 1, "--threads must be at least 1");
        let plan = self.plan()?;
        // Each user is a connection and a task with its own state: past PostgreSQL's own
        // reach, a count is a typo, and honouring it would exhaust memory before the first
        // connect could fail.
        anyhow::ensure!(
            plan.users() <= MAX_USERS,
            "{} users asked for (by --users or a stage); at most {MAX_USERS} are supported, each with its own connection",
            plan.users()
        );
        if plan.is_open() {
            anyhow::ensure!(
                self.think == ThinkTime::NONE,
                "--think does not apply to an open-loop run (rate stages): arrivals are scheduled, not paced by users; drop one of them"
            );
        }
        if let Some(rate) = self.rate {
            anyhow::ensure!(
                rate.is_finite() && rate > 0.0,
                "--rate must be a positive number of transactions per second"
            );
            anyhow::ensure!(
                self.think == ThinkTime::NONE,
                "--think does not apply to an open-loop run (--rate): arrivals are scheduled, not paced by users; drop one of them"
            );
        }
        anyhow::ensure!(
            self.url.is_some() || !workload.needs_database(),
            "workload {} needs a database",
            workload.name()
        );
        workload.check().map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            Instant::now()
                .checked_add(self.warmup)
                .and_then(|t| t.checked_add(plan.total()))
                .and_then(|t| t.checked_add(self.grace))
                .is_some()
                // The wall-clock start is the warm-up's end too, and chrono counts less far
                // (about 292 million years) than the monotonic clock.
                && chrono::TimeDelta::from_std(self.warmup)
                    .ok()
                    .and_then(|w| chrono::Utc::now().checked_add_signed(w))
                    .is_some(),
            "the warm-up, the run ({:?}) and the grace period add up to more than the clock can count; give a shorter --duration, --warmup or --grace",
            plan.total()
        );
        Ok(plan)
    }
}

/// A run stopped (by `stop` or `quit`) before measuring started: while the server's context
/// was read or the users connected. Nothing ran, so there is no result; the CLI says so and
/// exits as for any stop (130). Find it with `error.downcast_ref::<Interrupted>()`.
///
/// ```no_run
/// # async fn f(workload: slipstream_bench::Workload, config: slipstream_bench::RunConfig) -> anyhow::Result<()> {
/// use slipstream_bench::Interrupted;
/// match slipstream_bench::run(&workload, &config, tokio::signal::ctrl_c()).await {
///     Ok(run) => run.write_json("run.json".as_ref())?,
///     Err(e) if e.downcast_ref::<Interrupted>().is_some() => eprintln!("{e}"), // no result
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted {
    /// What the run was doing: `reading the server's context` or `connecting the users`.
    pub during: &'static str,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stopped before measuring started ({}): nothing ran, so no result is written",
            self.during
        )
    }
}

impl std::error::Error for Interrupted {}

/// The most users a run may have.
pub const MAX_USERS: usize = 100_000;

/// The clock of one run.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// Measuring starts.
    from: Instant,
    /// Measuring ends.
    to: Instant,
}

#[derive(Debug, Clone, Copy)]
enum Go {
    Wait,
    Run(Window),
    Abort,
}

/// What every user task shares.
struct Shared {
    url: Option<String>,
    workload: Workload,
    picker: Picker,
    recorder: Arc<Recorder>,
    think: ThinkTime,
    /// Set when the window ends early (Ctrl-C) or the run gives up: stop starting work.
    stop: AtomicBool,
    stop_signal: watch::Sender<bool>,
    /// Who runs when (closed loop), the rate when (open loop).
    plan: Arc<Plan>,
    /// The progress line's figures, warm-up included.
    live: Arc<Live>,
    /// Per user: the type + 1 of a recorded transaction in flight, 0 when none (for the
    /// censored counts). A line each: every transaction writes its user's cell twice, and
    /// users on different threads sharing a line made each write a cache-line transfer.
    busy: Vec<CachePadded<AtomicU32>>,
    /// Per user: how to cancel what its connection runs, so a transaction censored at the
    /// grace limit does not run on in the server after the client has let it go. Replaced on
    /// a reconnect; written only between a user's transactions, read after the users stopped.
    cancel: Vec<std::sync::Mutex<Option<CancelToken>>>,
    /// Open loop only; at most [`QUEUE_LIMIT`] arrivals.
    queue: Option<tokio::sync::Mutex<mpsc::Receiver<(Instant, usize)>>>,
    /// The first user that panicked, and why: the run then fails rather than report the
    /// survivors' figures as the whole.
    panicked: std::sync::Mutex<Option<String>>,
    /// Sessions the server ended while their users waited idle, replaced by
    /// [`replace_if_ended`], and the first one's error: the result says so, since the
    /// replacement keeps them out of the failures.
    idle_ended: std::sync::atomic::AtomicU64,
    idle_ended_why: std::sync::OnceLock<String>,
    /// Of those, the ones whose replacement failed (the reconnect was refused, or the run
    /// stopped first), and the first reconnect's error: not replaced, and the transactions
    /// that follow fail (`client:no-connection`), so the warning must not call them replaced.
    idle_unreplaced: std::sync::atomic::AtomicU64,
    idle_unreplaced_why: std::sync::OnceLock<String>,
}

/// Runs `workload` as configured until the window ends or `stop` completes (Ctrl-C), and
/// returns what was measured.
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// use slipstream_bench::{RunConfig, order_entry};
/// let mut config = RunConfig::new(Some("postgres://postgres@127.0.0.1/postgres".into()));
/// config.users = 4;
/// let run = slipstream_bench::run(&order_entry::workload(), &config, tokio::signal::ctrl_c()).await?;
/// println!("{:.0} TPS", run.tps());
/// # Ok(()) }
/// ```
pub async fn run<S: Future + Send>(
    workload: &Workload,
    config: &RunConfig,
    stop: S,
) -> anyhow::Result<BenchRun> {
    run_until(workload, config, stop, std::future::pending::<()>()).await
}

/// [`run`], with a second signal: `quit` ends the run at once, window or drain, without
/// waiting out the grace period. What is in flight then is censored, and cancelled on the
/// server, as at the grace limit. (The CLI's second Ctrl-C: a user who will not wait for the
/// drain still gets the result, and no statement left running.)
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// use slipstream_bench::{RunConfig, order_entry};
/// let config = RunConfig::new(Some("postgres://postgres@127.0.0.1/postgres".into()));
/// let first = tokio::signal::ctrl_c();
/// let second = async {
///     tokio::time::sleep(std::time::Duration::from_secs(60)).await;
/// };
/// let run = slipstream_bench::run_until(&order_entry::workload(), &config, first, second).await?;
/// println!("{} unfinished", run.unfinished);
/// # Ok(()) }
/// ```
pub async fn run_until<S: Future + Send, Q: Future + Send>(
    workload: &Workload,
    config: &RunConfig,
    stop: S,
    quit: Q,
) -> anyhow::Result<BenchRun> {
    let plan = Arc::new(config.check(workload)?);
    let user_count = plan.users();
    let names: Vec<String> = workload.kinds.iter().map(|k| k.name.clone()).collect();
    let recorder = Arc::new(Recorder::new(
        names.clone(),
        plan.is_open().then_some(config.late_after),
        config.raw_csv.as_deref(),
    )?);
    recorder.set_stages(StageTotals::new(plan.ends(), names.len()));
    let live = Arc::new(Live::new());
    let (queue_tx, queue_rx) = match plan.is_open() {
        true => {
            let (tx, rx) = mpsc::channel(QUEUE_LIMIT);
            (Some(tx), Some(tokio::sync::Mutex::new(rx)))
        }
        false => (None, None),
    };
    let (stop_signal, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        url: config.url.clone(),
        workload: workload.clone(),
        picker: workload.picker(),
        recorder: recorder.clone(),
        think: config.think,
        stop: AtomicBool::new(false),
        stop_signal,
        plan: plan.clone(),
        live: live.clone(),
        busy: (0..user_count)
            .map(|_| CachePadded::new(AtomicU32::new(0)))
            .collect(),
        cancel: (0..user_count).map(|_| Default::default()).collect(),
        queue: queue_rx,
        panicked: std::sync::Mutex::new(None),
        idle_ended: Default::default(),
        idle_ended_why: Default::default(),
        idle_unreplaced: Default::default(),
        idle_unreplaced_why: Default::default(),
    });

    // Listened to from here on, not only once the window opens: reading the context from a
    // stalled server, or connecting users to it, can take as long as the server stalls.
    tokio::pin!(stop);
    tokio::pin!(quit);
    let capture = match &config.url {
        Some(url) => tokio::select! {
            c = crate::context::before(url, workload.name()) => Some(c),
            _ = &mut stop => return Err(Interrupted { during: READING_CONTEXT }.into()),
            _ = &mut quit => return Err(Interrupted { during: READING_CONTEXT }.into()),
        },
        None => None,
    };

    // Connect and init every user before the clock starts.
    let (go_tx, go_rx) = watch::channel(Go::Wait);
    let (ready_tx, mut ready_rx) = mpsc::channel::<anyhow::Result<Option<String>>>(user_count);
    let connect_slots = Arc::new(tokio::sync::Semaphore::new(CONNECT_CONCURRENCY));
    let threads = UserThreads::start(config.threads.min(user_count))?;
    let mut users = tokio::task::JoinSet::new();
    for user in 0..user_count {
        let shared = shared.clone();
        let go = go_rx.clone();
        let ready = ready_tx.clone();
        let slots = connect_slots.clone();
        let session_seed = config.seed;
        let intra = config.intra_think;
        users.spawn_on(
            async move {
                let prepared = {
                    let _slot = slots.acquire().await;
                    prepare_user(&shared, user, intra, session_seed).await
                };
                let (session, txs, version) = match prepared {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = ready.send(Err(e)).await;
                        return;
                    }
                };
                let _ = ready.send(Ok(version)).await;
                drop(ready);
                // A panic (in a transaction's code, or ours) ends only this user: caught here
                // and kept, so the run can say so instead of reporting fewer users' work.
                let main =
                    std::panic::AssertUnwindSafe(user_main(shared.clone(), user, session, txs, go));
                if let Err(panic) = futures_util::FutureExt::catch_unwind(main).await {
                    let why = panic_message(&*panic);
                    let mut first = shared.panicked.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert(format!("user {user} panicked: {why}"));
                    shared.stop.store(true, Ordering::Release);
                    let _ = shared.stop_signal.send(true);
                }
            },
            threads.handle(user),
        );
    }
    drop(ready_tx);
    let mut server_version = None;
    for _ in 0..user_count {
        let ready = tokio::select! {
            r = ready_rx.recv() => r,
            _ = &mut stop => Some(Err(Interrupted { during: CONNECTING }.into())),
            _ = &mut quit => Some(Err(Interrupted { during: CONNECTING }.into())),
        };
        match ready {
            Some(Ok(v)) => server_version = server_version.or(v),
            Some(Err(e)) => {
                let _ = go_tx.send(Go::Abort);
                users.shutdown().await;
                return Err(e);
            }
            None => anyhow::bail!("a user task ended before it was ready"),
        }
    }

    let t0 = Instant::now();
    let window = Window {
        from: t0 + config.warmup,
        to: t0 + config.warmup + plan.total(),
    };
    let mut started_at = chrono::Utc::now() + config.warmup;
    recorder.plan_window(plan.total());
    let _ = go_tx.send(Go::Run(window));
    let arrivals = match queue_tx {
        Some(tx) => Some(spawn_arrivals(shared.clone(), tx, config.seed, t0, window)?),
        None => None,
    };
    let sampler = capture.map(|mut capture| {
        let mut stopped = shared.stop_signal.subscribe();
        tokio::spawn(async move {
            // The waits are the window's, as everything else the run measures: the warm-up's
            // (a cold cache's IO:DataFileRead, a load's own) were read as the run's, and a
            // warm-up of WAIT_SAMPLES_MAX sample times or more left none for the window. A
            // run stopped in its warm-up measured nothing, and samples nothing either.
            let warmed_up = tokio::select! {
                _ = tokio::time::sleep_until(window.from.into()) => true,
                _ = stopped.wait_for(|s| *s) => false,
            };
            if !warmed_up {
                return capture;
            }
            let window_ends = async move {
                tokio::select! {
                    _ = tokio::time::sleep_until(window.to.into()) => {}
                    _ = stopped.wait_for(|s| *s) => {}
                }
            };
            capture.sample_waits(window_ends).await;
            capture
        })
    });
    let progress = ProgressLine::start(
        config.progress,
        Clock {
            t0,
            from: window.from,
            to: window.to,
            plan: plan.clone(),
        },
        live.clone(),
        recorder.clone(),
    );

    // The window: until its end, or until stopped. (`stop` and `quit` are polled only while
    // they have not completed: an async block must not be polled again.)
    let mut interrupted = false;
    let mut quitting = false;
    let mut stopped = false;
    // A user that panicked stops the run early too (it fails below).
    let mut halted = shared.stop_signal.subscribe();
    tokio::select! {
        _ = tokio::time::sleep_until(window.to.into()) => {}
        _ = &mut stop => (interrupted, stopped) = (true, true),
        _ = &mut quit => (interrupted, quitting) = (true, true),
        _ = halted.wait_for(|s| *s) => interrupted = true,
    }
    let closed_at = recorder.close_window(window.from, window.to);
    if closed_at < window.from {
        // Stopped in the warm-up: measuring never started, and the planned start lies in
        // the future. The (empty) window is the moment of the stop.
        started_at = chrono::Utc::now();
    }
    if interrupted {
        shared.stop.store(true, Ordering::Release);
        let _ = shared.stop_signal.send(true);
    }
    let measured = closed_at.saturating_duration_since(window.from);

    // Drain: users finish what the window gave them, within the grace period, or until a
    // Ctrl-C (the first one, if the window ended on its own) or `quit` cuts it short. (`stop`
    // and `quit` are polled only if they have not completed: an async block must not be
    // polled again. `stop` has not when the window ended on its own, or on a panic.)
    let drain = tokio::time::timeout(config.grace, async {
        while users.join_next().await.is_some() {}
    });
    let drained = if quitting {
        drop(drain);
        false
    } else {
        tokio::select! {
            r = drain => r.is_ok(),
            _ = &mut stop, if !stopped => {
                (interrupted, stopped) = (true, true);
                false
            }
            _ = &mut quit => {
                (interrupted, quitting) = (true, true);
                false
            }
        }
    };
    shared.stop.store(true, Ordering::Release);
    let _ = shared.stop_signal.send(true);
    let mut unfinished = 0;
    let mut cancel_warning = None;
    if !drained {
        // Censored at the grace limit (or the Ctrl-C): what was in flight. The users are shut
        // down first, so none records a transaction counted here, or takes one from the queue
        // after it is emptied below. (A user's busy flag and its record change with no await
        // between them, so an aborted user's flag says what it had in hand.)
        users.shutdown().await;
        let mut in_flight = Vec::new();
        for (user, b) in shared.busy.iter().enumerate() {
            let k = b.load(Ordering::Acquire);
            if k > 0 {
                recorder.censor(k as usize - 1);
                unfinished += 1;
                in_flight.extend(token_of(&shared, user));
            }
        }
        cancel_warning = cancel_all(in_flight).await;
    }
    let mut warnings = Vec::new();
    let idle_ended = shared.idle_ended.load(Ordering::Relaxed);
    if idle_ended > 0 {
        let unreplaced = shared.idle_unreplaced.load(Ordering::Relaxed);
        let replaced = idle_ended - unreplaced.min(idle_ended);
        // Only those replaced are out of the failures; a failed reconnect left its user
        // without a connection, and what followed failed.
        let not_replaced = if unreplaced > 0 {
            format!(
                " {unreplaced} could not be replaced: the reconnect failed ({}), and the transactions that followed, if any, failed with client:no-connection.",
                shared.idle_unreplaced_why.get().map_or("", String::as_str)
            )
        } else {
            String::new()
        };
        warnings.push(format!(
            "{idle_ended} sessions the server ended while their users waited idle between transactions (think time, a stage's wait, the next arrival); {replaced} were replaced before the next transaction, and are in no failure count.{not_replaced} The first ended with: {}. That is the server's doing (idle_session_timeout on the role or database, pg_terminate_backend, a restart), not the workload's: to keep the sessions, set idle_session_timeout above the longest of those waits (--think's maximum, a stage's wait for its users, the gap between arrivals)",
            shared.idle_ended_why.get().map_or("", String::as_str)
        ));
    }
    if let Some(a) = arrivals {
        // A panic in the arrival thread is a bug; its arrivals are then in no count, which
        // the warning below says as it says for a generator that fell behind.
        let drawn = a.join().unwrap_or_else(|_| Drawn {
            turned_away: Vec::new(),
            reached: window.from,
        });
        let turned_away: u64 = drawn.turned_away.iter().sum();
        for (kind, &n) in drawn.turned_away.iter().enumerate() {
            recorder.censor_queued(kind, n);
        }
        unfinished += turned_away;
        if turned_away > 0 {
            warnings.push(format!(
                "the users could not keep up with the rate asked for: {turned_away} arrivals of the window found {QUEUE_LIMIT} already waiting for a free user and never started (censored, and counted in never_started); lower --rate or add --users"
            ));
        }
        if drawn.reached < closed_at {
            warnings.push(format!(
                "the load generator could not keep up with the rate asked for: when the run ended it had drawn the arrivals up to {:.3} s into the window, of {:.3} s measured; those after were never drawn and are in no count (arrivals included); lower --rate, or split it across load generators and --merge their results",
                seconds_since(window.from, drawn.reached).max(0.0),
                measured.as_secs_f64()
            ));
        }
    }
    // Open loop: arrivals still queued were never served, whether the grace ran out or the
    // users left on a Ctrl-C; those of the window are censored. Read after the users and the
    // arrivals have stopped, so the count is exact.
    if let Some(q) = &shared.queue
        && let Ok(mut rx) = q.try_lock()
    {
        while let Ok((intended, kind)) = rx.try_recv() {
            if intended >= window.from {
                recorder.censor_queued(kind, 1);
                unfinished += 1;
            }
        }
    }
    drop(threads);
    drop(progress);

    // The snapshot after, unless a stop comes first: its queries wait up to 5 s on a
    // stalled server, and a stop (SIGTERM's sender may send SIGKILL next) waits for nothing.
    let mut context = match sampler {
        Some(s) => match s.await {
            Ok(mut capture) => {
                let took = tokio::select! {
                    _ = capture.take_after() => true,
                    _ = &mut stop, if !stopped => false,
                    _ = &mut quit, if !quitting => false,
                };
                if !took {
                    interrupted = true;
                    capture.warn("the server's counters after the run were not read: the run was stopped while reading them");
                }
                Some(capture.finish())
            }
            Err(e) => Some(crate::context::RunContext {
                warnings: vec![format!("the wait-event sampler failed: {e}")],
                ..Default::default()
            }),
        },
        None => None,
    };
    warnings.extend(cancel_warning);
    // A raw CSV that could not be written to the end (a full disk) is said in the result,
    // not made the run's error: the figures do not depend on it, and failing here would lose
    // the window's result for a side file.
    if let Some(e) = recorder.close_raw() {
        warnings.push(format!(
            "the raw CSV {} is incomplete: writing it failed ({e}), so it holds only the lines before that; the result holds every transaction",
            config
                .raw_csv
                .as_deref()
                .map_or_else(String::new, |p| p.display().to_string())
        ));
    }
    if !warnings.is_empty() {
        context
            .get_or_insert_with(Default::default)
            .warnings
            .extend(warnings);
    }
    if let Some(why) = shared
        .panicked
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        anyhow::bail!(
            "{why}; the run is stopped and no result is written, since it would miss that user's work (a bug in the transaction's code, or in slipstream: please report it)"
        );
    }
    let weights = workload.weights();
    let finished = recorder.finish(&weights, measured);
    if plan.is_open()
        && let Some(w) = backlog_warning(
            &finished.transactions,
            &finished.intervals,
            user_count,
            measured,
        )
    {
        context
            .get_or_insert_with(Default::default)
            .warnings
            .push(w);
    }
    let stages = recorder
        .take_stages()
        .map(|t| plan.results(&t, &names, measured.as_secs_f64()))
        .unwrap_or_default();
    Ok(BenchRun {
        schema: super::RUN_SCHEMA.into(),
        schema_version: super::RUN_SCHEMA_VERSION,
        workload: workload.name().into(),
        load: match plan.first_rate() {
            Some(rate) => Load::Open { rate },
            None => Load::Closed,
        },
        users: user_count,
        think: config.think.to_string(),
        intra_think: config.intra_think.to_string(),
        weights,
        duration_s: plan.total().as_secs_f64(),
        warmup_s: config.warmup.as_secs_f64(),
        measured_s: measured.as_secs_f64(),
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        interrupted,
        unfinished,
        grace_s: config.grace.as_secs_f64(),
        seed: config.seed,
        environment: crate::environment::capture(
            config.url.as_deref().unwrap_or("(no database)"),
            server_version,
        ),
        transactions: finished.transactions,
        intervals: finished.intervals,
        schedule: finished.schedule,
        context,
        merged_from: Vec::new(),
        stages,
    })
}

/// Open loop: a warning when the drain served a backlog. Arrivals of the window count in its
/// totals however late they are served, so a backlog the users worked off after the window
/// is in `ok` and the latencies (from the intended starts), and out of the TPS, which counts
/// what ended inside the window ([`BenchRun::tps`]): the warning says why `ok` over the
/// window is so far above the TPS, and that the rate asked for was more than was sustained.
/// More completions after the window than there are users cannot be work that was merely in
/// flight at its end (each user has one transaction in hand): it is a queue. One under
/// [`BACKLOG_SHARE`] of the window's is not worth a warning (a user's thread held up for a
/// few milliseconds at the window's end by a busy machine queues a few arrivals).
fn backlog_warning(
    transactions: &[crate::run_result::TxResult],
    intervals: &crate::run_result::Intervals,
    users: usize,
    measured: Duration,
) -> Option<String> {
    let after: u64 = intervals
        .after_window
        .values()
        .map(|i| i.sufficient.n + i.failed)
        .sum();
    let ok: u64 = transactions.iter().map(|t| t.ok).sum();
    let done: u64 = ok + transactions.iter().map(|t| t.failed).sum::<u64>();
    if after <= users as u64 || (after as f64) <= BACKLOG_SHARE * done as f64 {
        return None;
    }
    let ok_after: u64 = intervals
        .after_window
        .values()
        .map(|i| i.sufficient.n)
        .sum();
    let within = ok - ok_after.min(ok);
    let secs = measured.as_secs_f64();
    let rate = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    Some(format!(
        "{after} of the window's {done} transactions were served after the window, in the drain: the users could not keep up with the rate asked for, and a queue built up. {within} succeeded within the window: the TPS ({:.1}/s over the {secs:.3} s window) counts only those, what was sustained; the {ok_after} successes after it are in the counts and in the latencies (from their intended starts), which they lengthen by their wait. Lower --rate or add --users to measure latency at a rate that is sustained",
        rate(within)
    ))
}

/// The share of a window's transactions served after it above which [`backlog_warning`]
/// warns: the TPS is then that much above what ended within the window.
const BACKLOG_SHARE: f64 = 0.05;

/// [`Interrupted::during`]'s phases.
const READING_CONTEXT: &str = "reading the server's context";
const CONNECTING: &str = "connecting the users";

type Prepared = (Session, Vec<Box<dyn DynTransaction>>, Option<String>);

async fn prepare_user(
    shared: &Shared,
    user: usize,
    intra: ThinkTime,
    seed: u64,
) -> anyhow::Result<Prepared> {
    let client = match &shared.url {
        Some(url) => Some(connect_user(url, user).await?),
        None => None,
    };
    let version = client
        .as_ref()
        .and_then(|c| c.parameter("server_version").map(str::to_owned));
    set_token(shared, user, client.as_ref());
    let mut session = Session::new(user, client, intra, seed);
    let mut txs: Vec<Box<dyn DynTransaction>> =
        shared.workload.kinds.iter().map(|k| (k.make)()).collect();
    init_all(&shared.workload, &mut txs, &mut session).await?;
    Ok((session, txs, version))
}

fn set_token(shared: &Shared, user: usize, client: Option<&Client>) {
    *shared.cancel[user]
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = client.map(Client::cancel_token);
}

fn token_of(shared: &Shared, user: usize) -> Option<CancelToken> {
    shared.cancel[user]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// How many cancel requests are in flight at once, and how long they may take in all: a
/// server that does not answer must not hold the run's end for long.
const CANCEL_CONCURRENCY: usize = 16;
const CANCEL_LIMIT: Duration = Duration::from_secs(5);

/// Sends a cancel request for each token (the users' connections are closed by now, but a
/// backend notices a closed socket only when it next writes, so a long statement would run
/// on). Returns a warning for the run's context when any failed or was not confirmed in time.
async fn cancel_all(tokens: Vec<CancelToken>) -> Option<String> {
    use futures_util::StreamExt as _;
    let count = tokens.len();
    // Kept outside the stream, so what finished is known when the time limit cuts it off.
    let finished = std::sync::Mutex::new(Vec::<Option<String>>::new());
    let sent = futures_util::stream::iter(tokens)
        .map(|t| async move { t.cancel().await.err().map(|e| e.to_string()) })
        .buffer_unordered(CANCEL_CONCURRENCY)
        .for_each(|outcome| {
            finished
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(outcome);
            std::future::ready(())
        });
    let timed_out = tokio::time::timeout(CANCEL_LIMIT, sent).await.is_err();
    let finished = finished.into_inner().unwrap_or_else(|p| p.into_inner());
    let unconfirmed = count - finished.len();
    let failures: Vec<String> = finished.into_iter().flatten().collect();
    let mut parts = Vec::new();
    if let Some(why) = failures.first() {
        parts.push(format!("{} of {count} failed ({why})", failures.len()));
    }
    if timed_out && unconfirmed > 0 {
        // A cancel is done when the server has read it, which it confirms by closing the
        // connection: one not confirmed may still have worked.
        parts.push(format!(
            "{unconfirmed} of {count} were not confirmed within {CANCEL_LIMIT:?}"
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "cancel requests for transactions censored at the grace limit: {}; their statements may still run on the server: check pg_stat_activity before the next run",
            parts.join(", ")
        )
    })
}

async fn connect_user(url: &str, user: usize) -> anyhow::Result<Client> {
    slipstream_pg::connect(url).await.map_err(|e| {
        // The server's own refusal for want of slots; other failures carry their own hint
        // (a client out of descriptors is told of ulimit -n, not of the server).
        if e.code() == Some(slipstream_pg::SqlState::TOO_MANY_CONNECTIONS) {
            anyhow::anyhow!(
                "user {user} could not connect: {e}; with many users check the server's \
                 max_connections"
            )
        } else {
            anyhow::anyhow!("user {user} could not connect: {e}")
        }
    })
}

/// A panic's message, as `panic!` gave it.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// An `init` that panicked: the error [`init_all`] returns for it.
#[derive(Debug)]
struct InitPanicked {
    user: usize,
    /// Where, and the panic's message.
    what: String,
}

impl std::fmt::Display for InitPanicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "user {} panicked {}", self.user, self.what)
    }
}

impl std::error::Error for InitPanicked {}

/// Runs every type's `init`. A panic in one is caught and returned as [`InitPanicked`],
/// naming the user and the transaction: before the clock starts no user has said it is
/// ready, and a panic there ended the run with "a user task ended before it was ready",
/// naming nothing. (After a reconnect, `repair` panics on with it, so the run stops as for
/// any panic of the user's code.)
async fn init_all(
    workload: &Workload,
    txs: &mut [Box<dyn DynTransaction>],
    session: &mut Session,
) -> anyhow::Result<()> {
    let user = session.user();
    for (k, tx) in txs.iter_mut().enumerate() {
        let init = std::panic::AssertUnwindSafe(tx.init(session));
        let name = &workload.kinds[k].name;
        match futures_util::FutureExt::catch_unwind(init).await {
            Ok(r) => r.map_err(|e| {
                anyhow::anyhow!(
                    "transaction {name} of workload {} failed to initialise: {e}",
                    workload.name()
                )
            })?,
            Err(panic) => {
                let what = format!(
                    "in the init of transaction {name} of workload {}: {}",
                    workload.name(),
                    panic_message(&*panic)
                );
                return Err(InitPanicked { user, what }.into());
            }
        }
    }
    Ok(())
}

async fn user_main(
    shared: Arc<Shared>,
    user: usize,
    mut session: Session,
    mut txs: Vec<Box<dyn DynTransaction>>,
    mut go: watch::Receiver<Go>,
) {
    let window = loop {
        match *go.borrow_and_update() {
            Go::Run(w) => break w,
            Go::Abort => return,
            Go::Wait => {}
        }
        if go.changed().await.is_err() {
            return;
        }
    };
    let mut log = Logs {
        recorded: UserLog::new(shared.recorder.clone()),
        live: LiveLog::new(shared.live.clone()),
    };
    if shared.queue.is_some() {
        serve_arrivals(&shared, user, &mut session, &mut txs, &mut log, window).await;
    } else {
        closed_loop(&shared, user, &mut session, &mut txs, &mut log, window).await;
    }
    drop(log);
    for tx in txs.iter_mut() {
        let _ = tx.close(&mut session).await;
    }
}

async fn closed_loop(
    shared: &Shared,
    user: usize,
    session: &mut Session,
    txs: &mut [Box<dyn DynTransaction>],
    log: &mut Logs,
    window: Window,
) {
    let mut stopped = shared.stop_signal.subscribe();
    let mut since_yield = 0u32;
    let mut active_until: Option<Instant> = None;
    // The user may have waited idle for the others to connect.
    replace_if_ended(shared, user, session, txs).await;
    while !shared.stop.load(Ordering::Acquire) {
        let think = session.draw(|rng| shared.think.draw(rng));
        if !think.is_zero() {
            // Until the window's end at the latest: a thinking user has nothing in flight,
            // and sleeping on into the drain would hold it to the grace limit for nothing.
            let wake = Instant::now()
                .checked_add(think)
                .map_or(window.to, |t| t.min(window.to));
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = stopped.wait_for(|s| *s) => break,
            }
            // The connection idled through the think by the runner's design (one held per
            // user), as through a stage wait: a session the server ended in it is replaced
            // before the next start, so it is neither a failure nor in the latency. (Not for
            // a think cut off at the window's end: no transaction follows it.)
            if Instant::now() < window.to {
                replace_if_ended(shared, user, session, txs).await;
            }
        }
        let kind = session.draw(|rng| shared.picker.pick(rng));
        let start = Instant::now();
        if start >= window.to {
            break;
        }
        // Between transactions only, so a user a stage drops finishes the one in hand. A
        // user's turn changes only at a segment's end (or its start in a ramp-up), so the plan
        // is asked once per segment, not per transaction.
        if active_until.is_none_or(|until| start >= until) {
            let t = seconds_since(window.from, start);
            match shared.plan.next_active(user, t) {
                Some(at) if at <= t => {
                    active_until =
                        Some(window.from + Duration::from_secs_f64(shared.plan.segment_end(t)));
                }
                Some(at) => {
                    let wake = window.from + Duration::from_secs_f64(at);
                    if wake >= window.to {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake.into()) => {}
                        _ = stopped.wait_for(|s| *s) => break,
                    }
                    replace_if_ended(shared, user, session, txs).await;
                    continue;
                }
                None => break,
            }
        }
        let recorded = start >= window.from;
        let job = Job {
            kind,
            intended: start,
            start,
            recorded,
        };
        run_one(shared, user, session, txs, log, job, window.from).await;
        since_yield += 1;
        if since_yield == YIELD_EVERY {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
}

async fn serve_arrivals(
    shared: &Shared,
    user: usize,
    session: &mut Session,
    txs: &mut [Box<dyn DynTransaction>],
    log: &mut Logs,
    window: Window,
) {
    let Some(queue) = &shared.queue else { return };
    let mut stopped = shared.stop_signal.subscribe();
    loop {
        let next = tokio::select! {
            next = async { queue.lock().await.recv().await } => next,
            _ = stopped.wait_for(|s| *s) => None,
        };
        let Some((intended, kind)) = next else { break };
        let recorded = intended >= window.from;
        if recorded {
            // In hand from here, no longer in the queue: a reconnect below that hangs to the
            // grace limit (a stalled host) must leave it censored, not in no count at all.
            // Release: pairs with the Acquire read when the run gives up on stragglers.
            shared.busy[user].store(kind as u32 + 1, Ordering::Release);
        }
        // Before `start`: a reconnect is the arrival's wait (in its latency and lag from
        // `intended`, as a server that ends idle sessions costs an open system).
        replace_if_ended(shared, user, session, txs).await;
        let start = Instant::now();
        let job = Job {
            kind,
            intended,
            start,
            recorded,
        };
        run_one(shared, user, session, txs, log, job, window.from).await;
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
    }
}

/// Replaces, before the user's next transaction starts, a connection
/// the server ended while the user waited idle by the runner's design: for the others to
/// connect, for its turn in a ramp-up or a later stage, or (open loop) for the next arrival.
/// A role's `idle_session_timeout` shorter than that wait ended it, and the transaction after
/// the wait was recorded as a failure (57P05) the workload never made: a stage's first, or
/// every arrival of a slow open-loop run (`tests/attack_session_settings.rs`), or every
/// transaction after a closed-loop user's `--think`. The runner leaves the role's
/// `idle_session_timeout` as it is (it does set it to 0 on its own side connections, the
/// context's and the loader's, `context::NO_IDLE_TIMEOUT`): the users' sessions are the
/// system under test and keep every setting the role gives them; only the idle gaps the
/// runner makes are its to mend. Idle *in a transaction* (`Session::think` inside a block)
/// is the workload's, and `idle_in_transaction_session_timeout` still fails it.
async fn replace_if_ended(
    shared: &Shared,
    user: usize,
    session: &mut Session,
    txs: &mut [Box<dyn DynTransaction>],
) {
    if let Some(c) = session.client_slot()
        && let Err(e) = c.check_idle()
    {
        // Relaxed: read only after every user has ended (joined or shut down), which
        // orders it.
        shared.idle_ended.fetch_add(1, Ordering::Relaxed);
        let _ = shared.idle_ended_why.set(e.to_string());
        repair(shared, user, session, txs).await;
        if session.client_slot().as_ref().is_none_or(|c| c.is_broken()) {
            // Relaxed: as idle_ended.
            shared.idle_unreplaced.fetch_add(1, Ordering::Relaxed);
            let why = session
                .lost()
                .unwrap_or("the run stopped before the reconnect");
            let _ = shared.idle_unreplaced_why.set(why.to_string());
        }
    }
}

/// Seconds from `from` to `now`, negative before it (the warm-up).
fn seconds_since(from: Instant, now: Instant) -> f64 {
    if now >= from {
        (now - from).as_secs_f64()
    } else {
        -(from - now).as_secs_f64()
    }
}

/// One transaction to run.
#[derive(Debug, Clone, Copy)]
struct Job {
    kind: usize,
    /// When it should start: its arrival (open loop) or its actual start (closed loop).
    intended: Instant,
    start: Instant,
    /// It belongs to the measured window.
    recorded: bool,
}

/// A user's two logs: the recorder's (measured window only) and the progress line's (all).
struct Logs {
    recorded: UserLog,
    live: LiveLog,
}

/// Runs one transaction, records it when it belongs to the window (`origin` is the window's
/// start), and repairs the session after a failure.
async fn run_one(
    shared: &Shared,
    user: usize,
    session: &mut Session,
    txs: &mut [Box<dyn DynTransaction>],
    log: &mut Logs,
    job: Job,
    origin: Instant,
) {
    let Job {
        kind,
        intended,
        start,
        recorded,
    } = job;
    if recorded {
        // Release: pairs with the Acquire read when the run gives up on stragglers.
        shared.busy[user].store(kind as u32 + 1, Ordering::Release);
    }
    let result = txs[kind].execute(session).await;
    let end = Instant::now();
    let result = match result {
        Ok(()) => left_open(session).await.map_or(Ok(()), Err),
        failed => failed,
    };
    let thought = session.take_thought();
    let counts = session.take_counts();
    let latency = end
        .saturating_duration_since(intended)
        .saturating_sub(thought);
    log.live.push(latency, result.is_err(), end);
    if recorded {
        log.recorded.statements(kind, &counts);
        log.recorded.push(
            Sample {
                kind: kind as u32,
                user: user as u32,
                end: end.saturating_duration_since(origin),
                latency,
                lag: start.saturating_duration_since(intended),
                failure: result.as_ref().err().map(|e| Failure {
                    code: e.code().into(),
                    message: e.message().into(),
                }),
            },
            end,
        );
        shared.busy[user].store(0, Ordering::Release);
    }
    // The rollback a repair sends is the transaction's statement too. A connection broken
    // under a transaction that returned Ok (an error its code ignored) is repaired as well:
    // left as it is, the next transaction, of whatever type, failed on it and was charged
    // with the failure.
    let broken = session
        .client_slot()
        .as_ref()
        .is_some_and(Client::is_broken);
    if (result.is_err() || broken) && repair(shared, user, session, txs).await && recorded {
        let rollback = crate::transaction::StatementCounts {
            rollbacks: 1,
            ..Default::default()
        };
        log.recorded.statements(kind, &rollback);
    }
}

/// The failure of a transaction that returned `Ok` inside a transaction block of its own (a
/// `BEGIN` without its `COMMIT`): nothing it wrote is committed, and the next transaction
/// would run inside the same block, which the server rolls back when the connection closes.
/// Counted as a success, each insert of a run showed in `ok` while the server kept none; pgbench
/// aborts such a client ("end of script reached without completing the last transaction").
/// [`repair`] then rolls the block back. A dropped `slipstream_pg::Transaction` guard is a
/// rollback its code chose: its queued `ROLLBACK` is run here (outside the latency, which
/// ended when `execute` returned), and the transaction stands.
async fn left_open(session: &mut Session) -> Option<crate::TxError> {
    let client = session.client_slot().as_mut()?;
    if client.is_broken() || client.transaction_status() == TransactionStatus::Idle {
        return None;
    }
    // A failure here breaks the connection, which ends the block on the server as well; the
    // next transaction finds it broken.
    client.settle().await.ok()?;
    let why = match client.transaction_status() {
        TransactionStatus::Idle => return None,
        // An error the code ignored aborted the block; its COMMIT would only roll back.
        TransactionStatus::Failed => {
            "the transaction returned inside a transaction block an error had aborted (an error its code ignored), so none of its work was committed; the runner rolled it back. Return the error, or end the block"
        }
        _ => {
            "the transaction returned inside a transaction block it never ended (a BEGIN without its COMMIT), so none of its work was committed; the runner rolled it back. End every block it opens: COMMIT, or ROLLBACK"
        }
    };
    Some(crate::TxError::new(OPEN_TRANSACTION, why))
}

/// The code of [`left_open`]'s failure.
const OPEN_TRANSACTION: &str = "client:open-transaction";

/// How long a user waits after a reconnect that failed (to connect, or in `init`) before its
/// next transaction, which fails at once and tries again: long enough not to hammer a server
/// with connections, short enough to come back soon after it does.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// Rolls back a transaction left open by a failure, and reconnects (and re-runs `init`) when
/// the connection broke. A failed reconnect leaves the session without a client; its next
/// transaction fails with `client:no-connection`, whose message is the reconnect's error, and
/// the reconnect is tried again. True when it rolled a transaction back.
async fn repair(
    shared: &Shared,
    user: usize,
    session: &mut Session,
    txs: &mut [Box<dyn DynTransaction>],
) -> bool {
    let Some(url) = &shared.url else {
        return false;
    };
    let mut rolled_back = false;
    let broken = match session.client_slot() {
        Some(c) if c.is_broken() => true,
        Some(c) => {
            if c.transaction_status() != TransactionStatus::Idle {
                rolled_back = c.simple_query("ROLLBACK").await.is_ok();
                !rolled_back
            } else {
                false
            }
        }
        None => true,
    };
    if !broken || shared.stop.load(Ordering::Acquire) {
        return rolled_back;
    }
    // The token goes with its connection: a cancel for a backend gone would only be noise in
    // the server's log.
    *session.client_slot() = None;
    set_token(shared, user, None);
    match slipstream_pg::connect(url).await {
        Ok(client) => {
            set_token(shared, user, Some(&client));
            session.reconnected(Ok(client));
            if let Err(e) = init_all(&shared.workload, txs, session).await {
                if let Some(panicked) = e.downcast_ref::<InitPanicked>() {
                    // A panic of the user's code stops the run, here as anywhere: the
                    // user's catch names it (resumed, so the panic hook does not print it
                    // again).
                    std::panic::resume_unwind(Box::new(panicked.what.clone()));
                }
                set_token(shared, user, None);
                session.reconnected(Err(format!("reconnect failed: {e}")));
                // As for a failed connect: each retry is a new connection, and without the
                // pause a user made one every few milliseconds (174 in a 1 s run).
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
        Err(e) => {
            // Kept for the next transaction's failure: the only place this error is reported.
            session.reconnected(Err(format!("reconnect failed: {e}")));
            // Back off so a down server is not hammered by every user in a tight loop.
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
    rolled_back
}

/// The longest the arrival thread sleeps without looking at the stop flag: a stop (Ctrl-C,
/// SIGTERM, a panicked user) waits at most this long for it, whatever the rate. Sleeping
/// until the next arrival in one go held a stopped run at 0.02 arrivals a second for 110 s.
/// The sleep's last slice still ends at the arrival's time, so precision is kept.
const ARRIVAL_STOP_CHECK: Duration = Duration::from_millis(5);

/// Sleeps until `at` (at once if it has passed), or until the run stops; false if it stopped
/// first.
fn sleep_until_or_stopped(at: Instant, stop: &AtomicBool) -> bool {
    loop {
        let now = Instant::now();
        if now >= at {
            return true;
        }
        // Acquire: pairs with the runner's Release store when the window is stopped.
        if stop.load(Ordering::Acquire) {
            return false;
        }
        std::thread::sleep((at - now).min(ARRIVAL_STOP_CHECK));
    }
}

/// What the arrival thread drew that the queue does not hold.
struct Drawn {
    /// Per type: arrivals of the window that found the queue full, never started.
    turned_away: Vec<u64>,
    /// The intended time of the last arrival drawn: the window's end or past it, unless the
    /// run stopped the thread while it was behind its schedule.
    reached: Instant,
}

/// Open loop: draws arrivals at the plan's highest rate and keeps each with probability
/// `rate(t) / highest` (thinning), so stages and the ramp-up's rise are exact Poisson processes.
fn spawn_arrivals(
    shared: Arc<Shared>,
    tx: mpsc::Sender<(Instant, usize)>,
    seed: u64,
    t0: Instant,
    window: Window,
) -> anyhow::Result<std::thread::JoinHandle<Drawn>> {
    let rate = shared.plan.max_rate();
    let gap = Exp::new(rate).map_err(|e| anyhow::anyhow!("--rate {rate}: {e}"))?;
    let handle = std::thread::Builder::new()
        .name("bench-arrivals".into())
        .spawn(move || {
            let mut rng = SmallRng::seed_from_u64(seed.rotate_left(17) ^ 0xA5A5_5A5A);
            let mut next = t0;
            let mut measured = 0u64;
            let mut turned_away = vec![0u64; shared.workload.kinds.len()];
            loop {
                let Some(n) = Duration::try_from_secs_f64(gap.sample(&mut rng))
                    .ok()
                    .and_then(|g| next.checked_add(g))
                else {
                    // A gap no clock can hold (a rate near zero) is past any window's end:
                    // the schedule is drawn to its end.
                    next = window.to;
                    break;
                };
                next = n;
                if next >= window.to || shared.stop.load(Ordering::Acquire) {
                    break;
                }
                let keep = shared.plan.rate_at(seconds_since(window.from, next)) / rate;
                if keep < 1.0 && rng.random::<f64>() >= keep {
                    continue;
                }
                if !sleep_until_or_stopped(next, &shared.stop) {
                    // Stopped before this arrival's time: it is after the window's end, so it
                    // is neither counted nor queued (and `reached`, past the stop, warns of
                    // nothing).
                    break;
                }
                let kind = shared.picker.pick(&mut rng);
                let in_window = next >= window.from;
                if in_window {
                    measured += 1;
                }
                match tx.try_send((next, kind)) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        // A warm-up arrival is in no count, as when it is still queued at the end.
                        if in_window {
                            turned_away[kind] += 1;
                        }
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
            shared.recorder.add_arrivals(measured);
            Drawn {
                turned_away,
                reached: next,
            }
        })?;
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Transaction, TxError};

    struct Noop;
    impl Transaction for Noop {
        async fn execute(&mut self, _: &mut Session) -> Result<(), TxError> {
            Ok(())
        }
    }

    struct Fails;
    impl Transaction for Fails {
        async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
            s.count().rollbacks += 1;
            Err(TxError::new("40001", "serialization failure"))
        }
    }

    fn noop_workload() -> Workload {
        Workload::new("noop")
            .transaction("heavy", 3, || Noop)
            .transaction("light", 1, || Fails)
            .transaction("off", 0, || Noop)
            .without_database()
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn closed_loop_honours_weights_and_counts_failures() {
        let mut config = RunConfig::new(None);
        config.users = 2;
        config.duration = Duration::from_millis(500);
        config.warmup = Duration::from_millis(100);
        config.seed = 7;
        let run = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap();
        let [heavy, light, off] = &run.transactions[..] else {
            panic!("{:?}", run.transactions)
        };
        let n = (heavy.ok + light.failed) as f64;
        assert!(n > 10_000.0, "only {n} transactions");
        // Binomial(n, 1/4): the light share lies within 5 standard deviations.
        let share = light.failed as f64 / n;
        let sd = (0.25 * 0.75 / n).sqrt();
        assert!((share - 0.25).abs() < 5.0 * sd, "share {share}, sd {sd}");
        assert_eq!((off.ok, off.failed), (0, 0));
        assert_eq!(light.failures.get("40001"), Some(&light.failed));
        assert_eq!(light.statements.rollbacks, light.failed);
        assert_eq!(heavy.latency_stats.sufficient.n, heavy.ok);
        // The intervals and the drain hold every recorded transaction once.
        let in_intervals: u64 = run.intervals.per_transaction["heavy"]
            .iter()
            .map(|i| i.sufficient.n)
            .sum();
        let drained = run
            .intervals
            .after_window
            .get("heavy")
            .map_or(0, |i| i.sufficient.n);
        assert_eq!(in_intervals + drained, heavy.ok);
        assert!(!run.interrupted);
        assert_eq!(run.unfinished, 0);
        assert!((run.measured_s - 0.5).abs() < 0.01, "{}", run.measured_s);
    }

    #[test]
    fn open_loop_keeps_its_rate() {
        let mut config = RunConfig::new(None);
        config.users = 2;
        config.duration = Duration::from_secs(1);
        config.rate = Some(2000.0);
        config.seed = 11;
        let run = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap();
        let done: u64 = run.transactions.iter().map(|t| t.ok + t.failed).sum();
        let schedule = run.schedule.as_ref().unwrap();
        assert_eq!(
            done, schedule.arrivals,
            "every arrival in the window is served"
        );
        // Poisson(2000): within 5 standard deviations.
        assert!(
            (done as f64 - 2000.0).abs() < 5.0 * 2000f64.sqrt(),
            "{done}"
        );
        assert!(matches!(run.load, Load::Open { rate } if rate == 2000.0));
    }

    /// A rate the users keep up with warns of nothing: the queue never fills, and the arrival
    /// thread draws the whole schedule.
    #[test]
    fn open_loop_within_reach_warns_of_nothing() {
        let mut config = RunConfig::new(None);
        config.users = 2;
        config.duration = Duration::from_millis(500);
        config.rate = Some(2000.0);
        config.seed = 13;
        let run = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap();
        assert_eq!(run.unfinished, 0);
        assert_eq!(run.schedule.and_then(|s| s.never_started), Some(0));
        assert_eq!(run.context.map(|c| c.warnings), None);
    }

    #[test]
    fn open_loop_stages_keep_their_own_rates() {
        let mut config = RunConfig::new(None);
        config.users = 2;
        config.stages = vec![
            "1s:rate=300".parse().unwrap(),
            "1s:rate=1500".parse().unwrap(),
        ];
        config.seed = 3;
        let run = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap();
        let n = |i: usize| -> f64 {
            run.stages[i]
                .transactions
                .iter()
                .map(|t| t.ok + t.failed)
                .sum::<u64>() as f64
        };
        // Poisson: each within 5 standard deviations of its stage's rate.
        assert!((n(0) - 300.0).abs() < 5.0 * 300f64.sqrt(), "{}", n(0));
        assert!((n(1) - 1500.0).abs() < 5.0 * 1500f64.sqrt(), "{}", n(1));
        assert_eq!(run.stages[1].rate, Some(1500.0));
        assert!(matches!(run.load, Load::Open { rate } if rate == 300.0));
    }

    #[test]
    fn the_raw_csv_has_a_line_per_recorded_transaction() {
        let dir = std::env::temp_dir().join(format!("slipstream-raw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("raw.csv");
        let mut config = RunConfig::new(None);
        config.duration = Duration::from_millis(200);
        config.raw_csv = Some(path.clone());
        let run = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let recorded: u64 = run.transactions.iter().map(|t| t.ok + t.failed).sum();
        assert_eq!(text.lines().count() as u64, recorded + 1);
        assert!(text.starts_with("transaction,user,end_us,latency_us,lag_us,failure\n"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("light,") && l.ends_with(",40001"))
        );
    }

    #[test]
    fn stopping_early_marks_the_run_interrupted() {
        let mut config = RunConfig::new(None);
        config.duration = Duration::from_secs(60);
        let run = rt()
            .block_on(async {
                let stop = tokio::time::sleep(Duration::from_millis(300));
                run(&noop_workload(), &config, stop).await
            })
            .unwrap();
        assert!(run.interrupted);
        assert!(run.measured_s < 1.0, "{}", run.measured_s);
        assert!(run.transactions[0].ok > 0);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let mut config = RunConfig::new(None);
        config.users = 0;
        let err = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap_err();
        assert!(err.to_string().contains("--users"), "{err}");
        let mut config = RunConfig::new(None);
        config.rate = Some(10.0);
        config.think = "1ms".parse().unwrap();
        let err = rt()
            .block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            .unwrap_err();
        assert!(err.to_string().contains("--think"), "{err}");
        let needs_db = Workload::new("db").transaction("x", 1, || Noop);
        let err = rt()
            .block_on(run(
                &needs_db,
                &RunConfig::new(None),
                std::future::pending::<()>(),
            ))
            .unwrap_err();
        assert!(err.to_string().contains("needs a database"), "{err}");
    }

    /// `RunConfig::stages` is public, so a library may build stages the `--stage` parser
    /// would refuse: none of them may run (a run of no users or no arrivals would write a
    /// result that measured nothing as if it had measured something), each is refused
    /// naming the stage.
    #[test]
    fn stages_the_parser_would_refuse_are_refused_from_a_library_too() {
        use crate::phases::{Stage, StageLoad};
        let (second, zero) = (Duration::from_secs(1), Duration::ZERO);
        let bad = [
            (second, StageLoad::Users(0), "at least 1 user"),
            (zero, StageLoad::Users(2), "longer than 0"),
            (second, StageLoad::Rate(0.0), "rate"),
            (second, StageLoad::Rate(-5.0), "rate"),
            (second, StageLoad::Rate(f64::NAN), "rate"),
            (second, StageLoad::Rate(f64::INFINITY), "rate"),
        ];
        let mut wrong = Vec::new();
        for (duration, load, says) in bad {
            let stage = Stage { duration, load };
            let mut config = RunConfig::new(None);
            config.duration = Duration::ZERO;
            config.stages = vec![stage];
            let got = std::panic::catch_unwind(|| {
                rt().block_on(run(&noop_workload(), &config, std::future::pending::<()>()))
            });
            match got {
                Err(_) => wrong.push(format!("{stage:?} panicked the run")),
                Ok(Ok(r)) => wrong.push(format!(
                    "{stage:?} ran: {} transactions in {} s",
                    r.transactions.iter().map(|t| t.ok + t.failed).sum::<u64>(),
                    r.measured_s
                )),
                Ok(Err(e))
                    if !(e.to_string().contains("stage 1") && e.to_string().contains(says)) =>
                {
                    wrong.push(format!("{stage:?}: {e}"))
                }
                Ok(Err(_)) => {}
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
