//! Several PostgreSQL servers behind one pool: a sub-pool per server, each server's role
//! (primary or standby) learned from the server itself, borrows routed by role to the server
//! with the fewest outstanding borrows, failed servers taken out and brought back.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use slipstream_pg::Client;
use tokio::sync::Notify;

use crate::pool::{MAX_CONNECTIONS, runtime_gone};
use crate::{
    AbortFn, Builder, Config, Labeling, Labels, Manager, PgManager, Pool, PoolError, Pooled, Reset,
};

/// Which server a borrow wants.
///
/// ```
/// use slipstream_pool::Role;
/// assert_eq!(Role::PreferStandby.to_string(), "prefer-standby");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The server that takes writes.
    Primary,
    /// A hot standby (read-only).
    Standby,
    /// A standby if one is up, else the primary (reads that tolerate replication lag).
    PreferStandby,
    /// Any server that is up.
    Any,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Primary => "primary",
            Role::Standby => "standby",
            Role::PreferStandby => "prefer-standby",
            Role::Any => "any",
        })
    }
}

/// What a server said it is.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::{PgPool, ServerRole};
/// // Nothing listens on port 1: the server is never reached, so its role is not known.
/// let pool = PgPool::builder("host=127.0.0.1 port=1 user=app".parse()?).build()?;
/// assert_eq!(pool.servers()[0].role, ServerRole::Unknown);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRole {
    /// Not known yet: no connection has reached it.
    Unknown,
    /// Not in recovery: takes writes.
    Primary,
    /// In recovery (`in_hot_standby` on): read-only.
    Standby,
}

const UNKNOWN: u8 = 0;
const PRIMARY: u8 = 1;
const STANDBY: u8 = 2;

/// How quickly a down server is retried: the first probe after this, doubling up to
/// `MAX_PROBE_INTERVAL`. The cap is how late a restarted server can be found: at 2 s, a
/// standby back after a 1 s outage took its first read 381 ms after it accepted connections
/// (median, `lab run rebalance`). A refused connect every half second costs a down server
/// nothing; an unreachable one is probed no faster than its connect timeout anyway.
const FIRST_PROBE_INTERVAL: Duration = Duration::from_millis(100);
const MAX_PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// How often borrows that find no server of their role may have the roles asked: a
/// promotion is found this soon after it happens, and a caller retrying such a borrow in a
/// loop costs the servers one `pg_is_in_recovery()` per interval over an idle connection.
const ASKED_PROBE_INTERVAL: Duration = Duration::from_millis(5);
/// How often the monitor looks again while connections on a down or drained server hold part
/// of `max_size` back (a return also wakes it).
const HELD_BACK_RECHECK: Duration = Duration::from_millis(20);

/// One server's state, shared by its sub-pool's manager, the monitor and borrowers.
struct ServerState {
    name: String,
    role: AtomicU8,
    up: AtomicBool,
    /// Taken out of service by [`PgPool::drain`]: lends nothing until [`PgPool::resume`].
    draining: AtomicBool,
    /// A connection to it broke or failed to open: the monitor probes it at once.
    suspect: AtomicBool,
    /// Borrows out or waiting on this server's sub-pool (the load-balancing measure).
    outstanding: AtomicUsize,
    /// Why it is down.
    last_error: Mutex<Option<String>>,
    /// The last failure was a refusal of the pool's login (see [`refuses_login`]): retrying
    /// cannot help, and [`PoolError::NoServer`] says so.
    login_refused: AtomicBool,
    /// Woken when it is marked down: borrowers waiting on its sub-pool pick another server.
    went_down: Notify,
    /// Woken when its sub-pool fails to open a connection: a role probe waiting for one
    /// stops waiting (the sub-pool retries with back-off) and probes on its own.
    connect_failed: Notify,
    /// A probe of it is under way (each runs as a task of its own: a host that never answers
    /// holds up only its own probe, not the others' failover).
    probing: AtomicBool,
    /// When a down server is probed next, and the back-off after that: the monitor's and its
    /// probe tasks' only.
    schedule: Mutex<(Instant, Duration)>,
}

impl ServerState {
    /// Up and not drained: may lend.
    fn serving(&self) -> bool {
        self.up.load(Ordering::Relaxed) && !self.draining.load(Ordering::Relaxed)
    }

    fn role(&self) -> ServerRole {
        match self.role.load(Ordering::Relaxed) {
            PRIMARY => ServerRole::Primary,
            STANDBY => ServerRole::Standby,
            _ => ServerRole::Unknown,
        }
    }

    /// A promoted standby says so on its open connections (`in_hot_standby` is reported
    /// with the first reply after it changes): the role moves without waiting for a
    /// reconnect or a probe. Only that way: a connection that ran nothing since the
    /// promotion still carries the old report, and a primary becomes a standby only through
    /// a restart, which breaks its connections (the reconnect and the probe learn that).
    /// Called wherever the pool has a connection in hand after SQL ran on it: a return (and
    /// the end of its reset), and a borrow about to be lent (its validation or labeling may
    /// be the first to read the new report).
    fn learn_promotion(&self, conn: &Client) {
        if reported_role(conn) == Some(PRIMARY) && self.role.load(Ordering::Relaxed) == STANDBY {
            self.role.store(PRIMARY, Ordering::Relaxed);
        }
    }

    /// Records why the last connect to it failed, and whether that was a refused login.
    fn failed(&self, error: String, login_refused: bool) {
        let mut last = lock(&self.last_error);
        self.login_refused.store(login_refused, Ordering::Relaxed);
        *last = Some(error);
    }

    fn describe(&self) -> String {
        let up = self.up.load(Ordering::Relaxed);
        let why = lock(&self.last_error).clone();
        if self.draining.load(Ordering::Relaxed) {
            // Unlike a down server, one drained is not retried: say what brings it back.
            return format!(
                "{} drained (lends again once resumed: PgPool::resume)",
                self.name
            );
        }
        match (up, why) {
            (true, _) => format!("{} {:?}", self.name, self.role()).to_lowercase(),
            (false, Some(e)) => format!("{} down: {e}", self.name),
            (false, None) => format!("{} not reached yet", self.name),
        }
    }
}

/// A sub-pool's manager: a [`PgManager`] for one server that also learns the server's role
/// and reports failures to the monitor.
pub struct ServerManager {
    pg: PgManager,
    state: Arc<ServerState>,
    monitor: Arc<Notify>,
}

impl fmt::Debug for ServerManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerManager")
            .field("server", &self.state.name)
            .finish()
    }
}

/// The role in the server's latest `in_hot_standby` report (PostgreSQL 14+: sent at startup
/// and again whenever it changes, e.g. on promotion), if it sends one.
fn reported_role(conn: &Client) -> Option<u8> {
    match conn.parameter("in_hot_standby")? {
        "on" => Some(STANDBY),
        _ => Some(PRIMARY),
    }
}

/// The role a server reports: `in_hot_standby`, else `pg_is_in_recovery()`.
async fn learn_role(conn: &mut Client) -> Result<u8, slipstream_pg::Error> {
    match reported_role(conn) {
        Some(role) => Ok(role),
        None => {
            let row = conn
                .query_one("SELECT pg_catalog.pg_is_in_recovery()", &[])
                .await?;
            Ok(if row.get::<_, bool>(0)? {
                STANDBY
            } else {
                PRIMARY
            })
        }
    }
}

impl ServerManager {
    fn suspect(&self) {
        self.state.suspect.store(true, Ordering::Relaxed);
        self.monitor.notify_one();
    }
}

impl Manager for ServerManager {
    type Connection = Client;
    type Error = slipstream_pg::Error;

    async fn connect(&self) -> Result<Client, slipstream_pg::Error> {
        let attempt = async {
            let mut conn = self.pg.connect().await?;
            let role = learn_role(&mut conn).await?;
            Ok::<_, slipstream_pg::Error>((conn, role))
        };
        match attempt.await {
            Ok((conn, role)) => {
                self.state.role.store(role, Ordering::Relaxed);
                Ok(conn)
            }
            Err(e) => {
                self.state.failed(e.to_string(), refuses_login(&e));
                self.suspect();
                self.state.connect_failed.notify_waiters();
                Err(e)
            }
        }
    }

    fn closed_while_idle(&self, conn: &mut Client) -> bool {
        let closed = self.pg.closed_while_idle(conn);
        if closed {
            // As for a connection that comes back broken: maybe the server is gone.
            self.suspect();
        }
        closed
    }

    fn is_broken(&self, conn: &Client) -> bool {
        if conn.is_broken() {
            // Maybe the server is gone: the monitor probes it now.
            self.suspect();
            return true;
        }
        self.state.learn_promotion(conn);
        if !self.state.serving() {
            // Its share is held back from the others until its lent connections are closed:
            // the monitor gives it out again.
            self.monitor.notify_one();
        }
        // A connection to a server marked down or drained is closed on return.
        self.pg.is_broken(conn) || !self.state.serving()
    }

    fn returned(&self, conn: &mut Client) {
        self.pg.returned(conn);
    }

    fn needs_reset(&self, conn: &Client) -> bool {
        self.pg.needs_reset(conn)
    }

    fn reset_keeps_labels(&self) -> bool {
        self.pg.reset_keeps_labels()
    }

    async fn reset(&self, conn: &mut Client) -> bool {
        Manager::reset(&self.pg, conn).await
    }

    async fn validate(&self, conn: &mut Client) -> bool {
        self.pg.validate(conn).await
    }

    fn abort_handle(&self, conn: &Client) -> Option<AbortFn> {
        self.pg.abort_handle(conn)
    }
}

struct Server {
    state: Arc<ServerState>,
    pool: Pool<ServerManager>,
    /// Connects directly, for probes (not through the sub-pool).
    config: slipstream_pg::Config,
}

impl Server {
    /// Counts a borrow (out or waiting) against this server until dropped.
    fn count(&self) -> Outstanding {
        self.state.outstanding.fetch_add(1, Ordering::Relaxed);
        Outstanding(self.state.clone())
    }

    /// An idle connection, if one is there now: the lock-free fast path of every borrow.
    fn take_idle(&self) -> Option<Idle> {
        let mut conn = self.claim_idle()?;
        Some(if self.pool.needs_validation(&mut conn) {
            Idle::Due(conn)
        } else {
            Idle::Ready(self.lent(conn))
        })
    }

    /// Claims an idle connection of the sub-pool (`try_get` closes any it finds closed while
    /// idle). Whoever claims must then check that the server still serves the borrow's role
    /// (`PgPool::serves`) before lending it: a `drain` or a role change may have come between
    /// the borrow's pick and this claim, and `drain`'s sweep closes only what is idle.
    fn claim_idle(&self) -> Option<Pooled<ServerManager>> {
        let conn = self.pool.try_get()?;
        #[cfg(test)]
        tests::AFTER_IDLE_CLAIM.with(|hook| {
            if let Some(hook) = hook.borrow_mut().as_mut() {
                hook();
            }
        });
        Some(conn)
    }

    fn lent(&self, conn: Pooled<ServerManager>) -> PgPooled {
        PgPooled {
            conn,
            _counted: self.count(),
        }
    }
}

/// What a borrow's fast path found idle on a server.
enum Idle {
    /// Lendable as it is.
    Ready(PgPooled),
    /// Idle for longer than `validate_after`'s window: the borrow's wait validates it
    /// (`Pool::get_waiting`). Marked due, so dropped on any path before that it goes back
    /// still due, not as just returned (`Held::due`).
    Due(Pooled<ServerManager>),
}

struct Shared {
    servers: Vec<Server>,
    /// The most connections across all servers; shared among the servers that serve
    /// ([`PgPool::resize`] changes it).
    max_size: AtomicUsize,
    /// The largest total [`PgPool::resize`] may set (the sub-pools' slot arrays are this long).
    limit: usize,
    /// Serialises share changes (resize, drain, resume, the monitor's rebalance), so two of
    /// them never interleave their per-server sizes; borrows never take it.
    rebalancing: Mutex<()>,
    /// Wakes the monitor: a server is suspected, a borrow found no server of its role, part of
    /// `max_size` is held back. Only ever notified from outside the monitor task: a permit it
    /// left itself would turn its wait into a loop that never yields (`rebalance_shares`).
    monitor: Arc<Notify>,
    /// A borrow found no server of its role: the monitor re-probes the roles of the servers
    /// that are up (a failover may have promoted one that nobody has talked to since).
    reprobe_roles: AtomicBool,
    /// The last rebalance held part of `max_size` back for connections still open on down or
    /// drained servers, or above a serving server's share: the monitor rebalances again until
    /// none is (whoever rebalanced).
    held_back: AtomicBool,
    /// Woken after every monitor pass: borrows of a pool whose servers were not reached yet
    /// wait for it.
    looked: Notify,
    /// Set when the monitor task is dropped with the pool still in use: the runtime the pool
    /// was built on has shut down, and with it every task that opens connections.
    runtime_gone: Arc<AtomicBool>,
    /// The sub-pools' borrow timeout: bounds `get_blocking`'s wait for its answer.
    borrow_timeout: Duration,
    /// The sub-pools report leaks (`Config::leak_warning`): `get_blocking` captures its
    /// caller's backtrace for them.
    leak_warning: bool,
    /// The runtime the pool was built on (`get_blocking` runs its borrow there).
    runtime: tokio::runtime::Handle,
}

/// A pool over one or several PostgreSQL servers (a primary and its standbys), built from a
/// connection string that lists them (`host=db1,db2,db3`). Each server gets a sub-pool of the
/// wait-free [`Pool`]; a borrow names the [`Role`] it needs and gets a connection from the
/// server of that role with the fewest outstanding borrows.
///
/// Roles are learned from each server (`in_hot_standby`), not configured. A server whose
/// connections fail is probed at once; if it cannot be reached it is marked down: its idle
/// connections close at once, lent ones as they are returned, borrowers go to the others, and
/// its share of `max_size` moves to them. It is retried in the background (100 ms, doubling
/// to 0.5 s); when it answers again the shares are rebalanced and borrows spread back to it.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::{PgPool, Role};
/// let pool = PgPool::builder("postgres://app@db1,db2/orders".parse()?)
///     .max_size(20)
///     .build_ready()
///     .await?;
/// let mut writer = pool.get(Role::Primary).await?;
/// writer.execute("UPDATE stock SET n = n - 1 WHERE id = $1", &[&7i32]).await?;
/// let mut reader = pool.get(Role::PreferStandby).await?;
/// let rows = reader.query("SELECT * FROM stock", &[]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgPool {
    shared: Arc<Shared>,
}

/// Sets up a [`PgPool`]; see [`PgPool::builder`].
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::{PgPool, Reset};
/// let pool = PgPool::builder("host=127.0.0.1,127.0.0.2 port=1 user=app".parse()?)
///     .max_size(8)
///     .reset_on_return(Reset::Session)
///     .build()?;
/// assert_eq!(pool.servers().len(), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgPoolBuilder {
    config: slipstream_pg::Config,
    pool: Config,
    reset: Reset,
}

impl PgPoolBuilder {
    /// The most connections across all servers (default 10), shared evenly: among every
    /// server listed when the pool is built (no server has answered yet), then among the
    /// servers that are up, as the monitor finds servers down and back (`max_size` is never
    /// exceeded in the meantime).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::PgPool;
    /// let pool = PgPool::builder("host=127.0.0.1,127.0.0.2 port=1 user=app".parse()?)
    ///     .max_size(9)
    ///     .build()?;
    /// let shares: Vec<usize> = pool.servers().iter().map(|s| s.stats.max_size).collect();
    /// assert_eq!(shares, [5, 4]); // at build: the total split over both, as evenly as it goes
    /// # Ok(()) }
    /// ```
    pub fn max_size(mut self, n: usize) -> Self {
        self.pool.max_size = n;
        self
    }

    /// Every other setting of the sub-pools ([`Config`]: timeouts, lifetimes, validation);
    /// its `max_size` is the total across servers, and its `min_size` is per server (each
    /// server keeps that many open, or its whole share while the share is smaller), as is
    /// `max_waiters` (each server's queue takes that many). The borrow timeout is per borrow,
    /// however many servers it waits on.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use slipstream_pool::{Config, PgPool};
    /// let pool = PgPool::builder("postgres://app@db1,db2/orders".parse()?)
    ///     .pool_config(Config {
    ///         max_size: 20,
    ///         validate_after: Some(Duration::from_secs(5)),
    ///         ..Config::default()
    ///     })
    ///     .build();
    /// # Ok(()) }
    /// ```
    pub fn pool_config(mut self, config: Config) -> Self {
        self.pool = config;
        self
    }

    /// What returned connections go through (default [`Reset::Rollback`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::{PgPool, Reset};
    /// // Each borrower gets a session as if new (settings, temp tables, advisory locks undone).
    /// let pool = PgPool::builder("postgres://app@db1,db2/orders".parse()?)
    ///     .reset_on_return(Reset::Session)
    ///     .build_ready()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn reset_on_return(mut self, reset: Reset) -> Self {
        self.reset = reset;
        self
    }

    /// Creates the pool and its monitor task on the current tokio runtime, and starts probing
    /// every server. Does not wait; [`PgPoolBuilder::build_ready`] does.
    ///
    /// # Errors
    /// [`PoolError::Config`] if the hosts and ports of the connection string do not pair up,
    /// if it sets `target_session_attrs` to anything but `any` (each sub-pool would apply it
    /// to its one host and refuse every server of the other role: ask each borrow for its
    /// [`Role`] instead), and outside a tokio runtime.
    ///
    /// ```
    /// use slipstream_pool::{PgPool, PoolError};
    /// let config = "host=db1,db2,db3 user=app".parse()?;
    /// // Three servers need at least three connections.
    /// let err = PgPool::builder(config).max_size(2).build().unwrap_err();
    /// assert!(matches!(err, PoolError::Config(_)), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(self) -> Result<PgPool, PoolError> {
        // The monitor and every sub-pool's opener are tasks on this runtime: without one the
        // first sub-pool's build panicked in tokio, from a call that returns `Result` (and
        // from `Registry::pool`, holding the registry's lock).
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            PoolError::Config(
                "a PgPool must be built inside a tokio runtime, which runs its monitor and \
                 connection openers and must outlive the pool: build it from a task (e.g. \
                 under #[tokio::main]) or inside `Runtime::enter`"
                    .to_string(),
            )
        })?;
        refuse_session_attrs(&self.config)?;
        let configs = self
            .config
            .per_host()
            .map_err(|e| PoolError::Config(e.to_string()))?;
        // Every sub-pool allocates slots for the whole limit (a resize may give it all).
        let asked = self.pool.max_size.max(self.pool.resize_limit);
        if asked > MAX_CONNECTIONS {
            return Err(PoolError::Config(format!(
                "max_size / resize_limit {asked} is more than a pool can hold ({MAX_CONNECTIONS} \
                 connections across its servers; PostgreSQL itself serves a few thousand)"
            )));
        }
        let mut names: Vec<String> = configs.iter().map(server_name).collect();
        names.sort();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(PoolError::Config(format!(
                "server {} is listed twice: list each host:port once (a pool routes and drains \
                 by that name)",
                twice[0]
            )));
        }
        if self.pool.max_size < configs.len() {
            return Err(PoolError::Config(format!(
                "max_size {} is below the {} servers listed: each server needs at least one \
                 connection; raise max_size or list fewer hosts",
                self.pool.max_size,
                configs.len()
            )));
        }
        let monitor = Arc::new(Notify::new());
        let n = configs.len();
        let limit = match self.pool.resize_limit {
            0 => self.pool.max_size.max(64),
            l => l.max(self.pool.max_size),
        };
        let servers = configs
            .into_iter()
            .enumerate()
            .map(|(i, config)| {
                // Every connect bounded as a probe is: a sub-pool's one opener waits on its
                // connect, so a server that accepts and never answers would stop it for good
                // (it also reaps and reclaims), and the sub-pool would never lend again.
                let config = match config.get_connect_timeout() {
                    Some(_) => config,
                    None => config.connect_timeout(PROBE_TIMEOUT),
                };
                let state = Arc::new(ServerState {
                    name: server_name(&config),
                    role: AtomicU8::new(UNKNOWN),
                    up: AtomicBool::new(false),
                    draining: AtomicBool::new(false),
                    suspect: AtomicBool::new(false),
                    outstanding: AtomicUsize::new(0),
                    last_error: Mutex::new(None),
                    login_refused: AtomicBool::new(false),
                    went_down: Notify::new(),
                    connect_failed: Notify::new(),
                    probing: AtomicBool::new(false),
                    schedule: Mutex::new((Instant::now(), FIRST_PROBE_INTERVAL)),
                });
                let manager = ServerManager {
                    pg: PgManager::new(config.clone()).reset_on_return(self.reset),
                    state: state.clone(),
                    monitor: monitor.clone(),
                };
                let mut pool_config = self.pool.clone();
                pool_config.max_size = share(self.pool.max_size, n, i);
                pool_config.resize_limit = limit;
                let pool = Builder {
                    manager,
                    config: pool_config,
                    server: Some(state.name.clone()),
                }
                .build();
                // `min_size` is per server, whatever the share: the build clamped it to the
                // share at build, and kept it clamped when the share grew (a resize, a server
                // down or drained), so a server with room for `min_size` kept fewer open.
                // Stored as asked, it is clamped to the share of the moment.
                pool.set_min_size(self.pool.min_size);
                Server {
                    state,
                    pool,
                    config,
                }
            })
            .collect();
        let shared = Arc::new(Shared {
            servers,
            max_size: AtomicUsize::new(self.pool.max_size),
            limit,
            rebalancing: Mutex::new(()),
            monitor,
            reprobe_roles: AtomicBool::new(false),
            held_back: AtomicBool::new(false),
            looked: Notify::new(),
            runtime_gone: Arc::new(AtomicBool::new(false)),
            borrow_timeout: self.pool.borrow_timeout,
            leak_warning: self.pool.leak_warning.is_some(),
            runtime,
        });
        let weak = Arc::downgrade(&shared);
        let gone = RuntimeGone(Some(shared.runtime_gone.clone()));
        tokio::spawn(async move {
            monitor_task(weak).await;
            // Ended because the pool was dropped, not with its runtime.
            gone.disarm();
        });
        Ok(PgPool { shared })
    }

    /// [`PgPoolBuilder::build`], then waits until every server was reached or found down, and
    /// at least one is up.
    ///
    /// # Errors
    /// [`PoolError::NoServer`] naming each server's failure when none could be reached within
    /// the borrow timeout (at most 30 s), or as soon as every server has refused the pool's
    /// login (a wrong password, no such role or database: waiting would not change it).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::{PgPool, Role};
    /// let pool = PgPool::builder("postgres://app@db1,db2/orders".parse()?)
    ///     .build_ready()
    ///     .await?; // at least one server up; or PoolError::NoServer saying why each is not
    /// assert!(pool.servers().iter().any(|s| s.up));
    /// let conn = pool.get(Role::Any).await?;
    /// # Ok(()) }
    /// ```
    pub async fn build_ready(self) -> Result<PgPool, PoolError> {
        let timeout = self.pool.borrow_timeout.min(Duration::from_secs(30));
        let pool = self.build()?;
        let start = Instant::now();
        loop {
            let states = pool.shared.servers.iter().map(|s| &s.state);
            let settled = states
                .clone()
                .all(|s| s.up.load(Ordering::Acquire) || lock(&s.last_error).is_some());
            let any_up = states.clone().any(|s| s.up.load(Ordering::Acquire));
            // Every server refused the pool's login: waiting out the timeout changes nothing.
            let all_refused = states
                .clone()
                .all(|s| s.login_refused.load(Ordering::Relaxed));
            if (settled && (any_up || all_refused)) || start.elapsed() >= timeout {
                return if any_up {
                    Ok(pool)
                } else {
                    Err(pool.no_server(Role::Any))
                };
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl PgPool {
    /// Starts configuring a pool over the servers `config` lists.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::PgPool;
    /// let pool = PgPool::builder("host=127.0.0.1,127.0.0.2 port=1,2 user=app".parse()?).build()?;
    /// let names: Vec<String> = pool.servers().into_iter().map(|s| s.name).collect();
    /// assert_eq!(names, ["127.0.0.1:1", "127.0.0.2:2"]);
    /// # Ok(()) }
    /// ```
    pub fn builder(config: slipstream_pg::Config) -> PgPoolBuilder {
        PgPoolBuilder {
            config,
            pool: Config::default(),
            reset: Reset::default(),
        }
    }

    /// Borrows a connection to a server of `role`: the one, among those serving, with the
    /// fewest borrows outstanding, waiting there if it has none idle. A borrow whose server is
    /// drained or goes down while it waits picks another; it fails with
    /// [`PoolError::Timeout`] once the borrow timeout has passed since it began to wait,
    /// however often it picked.
    ///
    /// # Errors
    /// [`PoolError::NoServer`] at once if no server of that role is up, naming each server's
    /// state; otherwise as [`Pool::get`].
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::Role;
    /// let mut conn = pool.get(Role::Primary).await?;
    /// conn.execute("UPDATE stock SET n = n - 1 WHERE id = $1", &[&7i32]).await?;
    /// drop(conn); // back to the pool
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, role: Role) -> Result<PgPooled, PoolError> {
        self.borrow(role, true, None, |pool| pool.get()).await
    }

    /// Borrows as [`PgPool::get`] does, the idle connection of a `role` server cheapest to
    /// label `wanted` ([`Pool::get_labeled`]: Oracle UCP's connection labeling).
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), slipstream_pool::PoolError> {
    /// use slipstream_pool::{Labeling, Labels, Role};
    /// /// A session's `search_path` is its tenant's schema.
    /// struct Tenants;
    /// impl Labeling<slipstream_pg::Client> for Tenants {
    ///     fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
    ///         u32::from(wanted != current)
    ///     }
    ///     async fn configure(&self, wanted: &Labels, conn: &mut slipstream_pg::Client) -> bool {
    ///         // Bound, not spliced into the SQL: a label is data, and `quote_ident` makes it
    ///         // one schema name whatever it holds. Both named by schema: this runs under the
    ///         // previous tenant's search_path, and a `set_config` that tenant put first on it
    ///         // would otherwise choose the next tenant's schema.
    ///         let sql = "SELECT pg_catalog.set_config('search_path', pg_catalog.quote_ident($1), false)";
    ///         conn.execute(sql, &[&wanted["tenant"]]).await.is_ok()
    ///     }
    /// }
    /// let acme = Labels::from([("tenant".to_string(), "acme".to_string())]);
    /// let conn = pool.get_labeled(Role::Primary, &acme, &Tenants).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`PgPool::get`], and [`PoolError::Labeling`] as [`Pool::get_labeled`].
    pub async fn get_labeled<L: Labeling<Client>>(
        &self,
        role: Role,
        wanted: &Labels,
        labeling: &L,
    ) -> Result<PgPooled, PoolError> {
        self.borrow(role, false, None, |pool| pool.get_labeled(wanted, labeling))
            .await
    }

    /// Borrows an idle connection of a `role` server if one is idle now (no waiting, no
    /// validation): from the serving server with the fewest borrows outstanding (as
    /// [`PgPool::get`] picks), else from the first other serving server with one idle.
    ///
    /// ```no_run
    /// # fn f(pool: slipstream_pool::PgPool) {
    /// use slipstream_pool::Role;
    /// match pool.try_get(Role::PreferStandby) {
    ///     Some(conn) => println!("got one on {}", conn.server()),
    ///     None => println!("all busy: shed this request"),
    /// }
    /// # }
    /// ```
    pub fn try_get(&self, role: Role) -> Option<PgPooled> {
        let first = self.pick(role)?;
        // Lent only if its server still serves the role once claimed; else dropped, back to
        // a server that closes it (drained, down) or keeps it for the role it has now.
        let lend = |server: &Server| {
            let conn = server.claim_idle()?;
            self.serves(server, role).then(|| server.lent(conn))
        };
        lend(first).or_else(|| {
            self.candidates(role)
                .filter(|s| !std::ptr::eq(*s, first))
                .find_map(lend)
        })
    }

    /// Borrows as [`PgPool::get`] does, blocking the calling thread (for code outside the
    /// runtime, e.g. a thread pool of its own); the pool's tasks keep running on the runtime
    /// it was built on, and the wait itself runs there as an async borrow, so a server that
    /// goes down or is drained meanwhile is left for another at once. Do not call it from a
    /// task on that runtime (it blocks the worker thread).
    ///
    /// ```no_run
    /// # fn f(pool: slipstream_pool::PgPool) -> Result<(), slipstream_pool::PoolError> {
    /// use slipstream_pool::Role;
    /// let worker = std::thread::spawn(move || -> Result<String, slipstream_pool::PoolError> {
    ///     let conn = pool.get_blocking(Role::Primary)?;
    ///     Ok(conn.server().to_string())
    /// });
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`PgPool::get`]; [`Pool::get_blocking`] for the rest.
    pub fn get_blocking(&self, role: Role) -> Result<PgPooled, PoolError> {
        // A connection due for validation goes to the borrow, which validates it on the
        // runtime, with the server it was found on.
        let due = match self.pick(role).map(|s| (s, s.take_idle())) {
            // Its server may have been drained or changed role since the pick (`claim_idle`);
            // then it goes back and the borrow below picks again.
            Some((server, Some(Idle::Ready(conn)))) if self.serves(server, role) => {
                return Ok(conn);
            }
            // `pick` chose among the pool's servers, so the position is found; were it not,
            // the connection would go back to its sub-pool and the borrow validate another.
            Some((server, Some(Idle::Due(conn)))) => self
                .shared
                .servers
                .iter()
                .position(|s| std::ptr::eq(s, server))
                .map(|i| (i, conn)),
            _ => None,
        };
        // The async borrow, run on the pool's runtime: it re-picks when its server goes down
        // or is drained, where a thread parked on one sub-pool would sleep to the timeout.
        // The leak warning must name this caller, not the runtime's worker where the lend
        // happens: capture its backtrace here (only with `leak_warning` set, as a lend does)
        // and give it to the borrow.
        let site = self
            .shared
            .leak_warning
            .then(std::backtrace::Backtrace::force_capture);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let pool = self.clone();
        self.shared.runtime.spawn(async move {
            let due = due.map(|(i, conn)| (&pool.shared.servers[i], conn));
            let borrowed = pool.borrow(role, true, due, |pool| pool.get()).await;
            if let (Ok(conn), Some(site)) = (&borrowed, site) {
                conn.conn.borrowed_at(site);
            }
            let _ = tx.send(borrowed);
        });
        // Called inside the pool's own runtime (which the docs forbid from its tasks), this
        // thread may block the very worker that would answer, and the answer never comes: the
        // wait is bounded there. A thread outside it waits for the borrow's own answer.
        let inside = tokio::runtime::Handle::try_current()
            .is_ok_and(|here| here.id() == self.shared.runtime.id());
        if !inside {
            return rx.recv().unwrap_or_else(|_| Err(runtime_gone()));
        }
        let limit = self
            .shared
            .borrow_timeout
            .saturating_add(Duration::from_secs(1));
        match rx.recv_timeout(limit) {
            Ok(result) => result,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(runtime_gone()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(PoolError::Config(format!(
                "get_blocking had no answer from the pool's runtime within {limit:?}; it was \
                 called inside that runtime, where it can block the worker that would answer: \
                 use `pool.get(role).await` there"
            ))),
        }
    }

    /// The common borrow: the fast path takes an idle connection of the least-loaded server
    /// without touching any lock; otherwise waits on that server's sub-pool, and picks again
    /// if the server goes down meanwhile.
    /// `any_idle`: whether any idle connection will do (not for labeled borrows). `due`: a
    /// connection the caller's fast path found due for validation, and its server.
    async fn borrow<'a, F, Fut>(
        &'a self,
        role: Role,
        any_idle: bool,
        mut due: Option<(&'a Server, Pooled<ServerManager>)>,
        get: F,
    ) -> Result<PgPooled, PoolError>
    where
        F: Fn(&'a Pool<ServerManager>) -> Fut,
        Fut: std::future::Future<Output = Result<Pooled<ServerManager>, PoolError>>,
    {
        if self.shared.runtime_gone.load(Ordering::Acquire) {
            return Err(runtime_gone());
        }
        let mut first_look = None;
        // When the borrow gives up, whatever servers it waits on: fixed when it first waits (a
        // borrow served at once reads no clock), `None` inside for no timeout. Each pick waits
        // in a sub-pool whose own borrow timeout starts from that pick: a borrow moved from
        // server to server (drains, mark-downs, a role that changed under it) waited a fresh
        // timeout on each, and while they kept changing it never failed.
        let mut ends: Option<Option<Instant>> = None;
        loop {
            // The caller's connection due for validation, while its server still serves the
            // role (else it goes back: its server no longer lends it for this role).
            let (picked, mut first) = match due.take() {
                Some((server, conn)) if self.serves(server, role) => (Some(server), Some(conn)),
                // Given back still due (`Held::due`): the next borrow validates it.
                Some(_) | None => (self.pick(role), None),
            };
            let Some(server) = picked else {
                // A pool just built (e.g. by the registry), none of whose servers the monitor
                // has reached yet: wait for its first look (within the borrow timeout and a
                // probe's), not NoServer. Once any server is up, a role none serves fails at
                // once, as promised.
                let deadline = *first_look.get_or_insert_with(|| {
                    let now = Instant::now();
                    ends.get_or_insert(now.checked_add(self.shared.borrow_timeout));
                    now + self.shared.borrow_timeout.min(PROBE_TIMEOUT)
                });
                let looked = self.shared.looked.notified();
                let mut looked = std::pin::pin!(looked);
                looked.as_mut().enable();
                if self.pick(role).is_none() {
                    if !self.none_reached() || Instant::now() >= deadline {
                        return Err(self.no_server(role));
                    }
                    let _ = tokio::time::timeout_at(deadline.into(), looked).await;
                }
                continue;
            };
            let state = &server.state;
            let picked_as = state.role();
            // The server's role may have changed while the connection was on its way: a new
            // connection learns a restart as a standby (the manager records it), a returned one
            // a promotion. Such a connection goes back and the borrow picks again, so a
            // Role::Primary borrower never gets a standby, nor a Role::Standby one a primary.
            // Nor is it lent if the server stopped serving meanwhile: a drain (or a mark-down)
            // wakes the wait below, but `select!` polls its branches in random order, so a wait
            // that finished in the same poll (a validation's or a labeling's reply) won about
            // half the time and lent the drained server's connection after `drain` returned.
            // Dropped, it goes back to a server not serving and is closed.
            let fits =
                |conn: PgPooled| (state.serving() && state.role() == picked_as).then_some(conn);
            if first.is_none() && any_idle {
                match server.take_idle() {
                    Some(Idle::Ready(conn)) => match fits(conn) {
                        Some(conn) => return Ok(conn),
                        None => continue,
                    },
                    Some(Idle::Due(conn)) => first = Some(conn),
                    None => {}
                }
            }
            // Listen for the server going down before looking at it, so a mark-down between
            // the look and the wait is not missed.
            let went_down = state.went_down.notified();
            let mut went_down = std::pin::pin!(went_down);
            went_down.as_mut().enable();
            if !state.serving() {
                continue;
            }
            let counted = server.count();
            // The first wait is bounded by the sub-pool's own timeout, which starts with it (no
            // second timer); a later one by what is left of the borrow's.
            let until = match ends {
                Some(until) => until,
                None => {
                    ends = Some(Instant::now().checked_add(self.shared.borrow_timeout));
                    None
                }
            };
            let wait = async {
                let wait = async {
                    match first {
                        // Validated first (and, if it fails, the wait goes on as `get`'s).
                        Some(conn) => server.pool.get_waiting(Some(conn)).await,
                        None => get(&server.pool).await,
                    }
                };
                match until {
                    None => wait.await,
                    Some(until) => tokio::time::timeout_at(until.into(), wait)
                        .await
                        .unwrap_or_else(|_| Err(server.pool.timeout_error())),
                }
            };
            tokio::select! {
                conn = wait => {
                    // The connection's own latest report counts too: a validation or a
                    // labeling run in the wait may be the first to have read a promotion. (An
                    // idle one taken above ran nothing since its return, which learned it.)
                    let conn = conn.map_err(|e| e.on_server(&state.name))?;
                    state.learn_promotion(&conn);
                    if let Some(conn) = fits(PgPooled { conn, _counted: counted }) {
                        return Ok(conn);
                    }
                }
                // Its sub-pool will not serve this borrow: pick again (cancelling the wait
                // loses nothing).
                () = went_down => {}
            }
        }
    }

    /// Takes `server` out of service for planned maintenance: no new borrows go to it, its
    /// idle connections close at once and lent ones as they are returned, and its share of
    /// `max_size` moves to the others. [`PgPool::resume`] brings it back. `server` is
    /// `host:port` as [`ServerInfo::name`] gives it.
    ///
    /// ```no_run
    /// # fn f(pool: slipstream_pool::PgPool) -> Result<(), slipstream_pool::PoolError> {
    /// pool.drain("db2:5432")?;
    /// // ... restart db2 ...
    /// pool.resume("db2:5432")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`PoolError::Config`] naming the servers there are when `server` is not one of them.
    pub fn drain(&self, server: &str) -> Result<(), PoolError> {
        let s = self.server_named(server)?;
        s.state.draining.store(true, Ordering::Relaxed);
        // Borrowers waiting on it pick another server.
        s.state.went_down.notify_waiters();
        rebalance(&self.shared);
        Ok(())
    }

    /// Puts a server [`PgPool::drain`]ed back in service and rebalances the shares.
    ///
    /// # Errors
    /// As [`PgPool::drain`].
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::PgPool;
    /// let pool = PgPool::builder("host=127.0.0.1,127.0.0.2 port=1 user=app".parse()?).build()?;
    /// pool.drain("127.0.0.2:1")?;
    /// assert!(pool.servers()[1].drained);
    /// pool.resume("127.0.0.2:1")?;
    /// assert!(!pool.servers()[1].drained);
    /// assert!(pool.resume("db9:5432").is_err()); // not one of its servers
    /// # Ok(()) }
    /// ```
    pub fn resume(&self, server: &str) -> Result<(), PoolError> {
        let s = self.server_named(server)?;
        s.state.draining.store(false, Ordering::Relaxed);
        rebalance(&self.shared);
        Ok(())
    }

    /// Changes the most connections across all servers at run time and rebalances the
    /// shares; returns the size set, clamped between the number of servers and the resize
    /// limit ([`Config::resize_limit`]).
    ///
    /// ```no_run
    /// # fn f(pool: slipstream_pool::PgPool) {
    /// let set = pool.resize(40);
    /// assert_eq!(pool.servers().iter().map(|s| s.stats.max_size).sum::<usize>(), set);
    /// # }
    /// ```
    pub fn resize(&self, max_size: usize) -> usize {
        let size = max_size
            .max(self.shared.servers.len())
            .min(self.shared.limit);
        self.shared.max_size.store(size, Ordering::Relaxed);
        rebalance(&self.shared);
        size
    }

    fn server_named(&self, name: &str) -> Result<&Server, PoolError> {
        self.shared
            .servers
            .iter()
            .find(|s| s.state.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .shared
                    .servers
                    .iter()
                    .map(|s| s.state.name.as_str())
                    .collect();
                PoolError::Config(format!(
                    "no server named {name:?} in this pool; its servers are {names:?}"
                ))
            })
    }

    /// The serving servers that can serve `role` (for `PreferStandby`: the standbys, or the
    /// primaries when no standby serves).
    fn candidates(&self, role: Role) -> impl Iterator<Item = &Server> {
        let serving = |want: Option<ServerRole>| {
            self.shared
                .servers
                .iter()
                .filter(move |s| s.state.serving())
                .filter(move |s| want.is_none_or(|w| s.state.role() == w))
        };
        let want = match role {
            Role::Any => None,
            Role::Primary => Some(ServerRole::Primary),
            Role::Standby => Some(ServerRole::Standby),
            Role::PreferStandby if serving(Some(ServerRole::Standby)).next().is_some() => {
                Some(ServerRole::Standby)
            }
            Role::PreferStandby => Some(ServerRole::Primary),
        };
        // Two primaries at once (a standby promoted while the old primary still runs): writes
        // go to the first in the host list only, as libpq's read-write does with the list in
        // order, so one pool's writes never split over two diverging servers.
        let most = if want == Some(ServerRole::Primary) {
            1
        } else {
            usize::MAX
        };
        serving(want).take(most)
    }

    /// The serving server of `role` with the fewest outstanding borrows.
    /// Whether `server` is still one that a borrow for `role` may be lent from.
    fn serves(&self, server: &Server, role: Role) -> bool {
        self.candidates(role).any(|s| std::ptr::eq(s, server))
    }

    fn pick(&self, role: Role) -> Option<&Server> {
        self.candidates(role)
            .min_by_key(|s| s.state.outstanding.load(Ordering::Relaxed))
    }

    /// Whether no server is up yet and some has not been reached, nor found down: the
    /// monitor's first look is still to come.
    fn none_reached(&self) -> bool {
        let servers = &self.shared.servers;
        !servers.iter().any(|s| s.state.up.load(Ordering::Relaxed))
            && servers.iter().any(|s| lock(&s.state.last_error).is_none())
    }

    fn no_server(&self, role: Role) -> PoolError {
        if !self.shared.reprobe_roles.swap(true, Ordering::Relaxed) {
            self.shared.monitor.notify_one();
        }
        let servers = &self.shared.servers;
        let mut down = servers
            .iter()
            .filter(|s| !s.state.up.load(Ordering::Relaxed))
            .peekable();
        let some_down = down.peek().is_some();
        PoolError::NoServer {
            role: role.to_string(),
            servers: servers.iter().map(|s| s.state.describe()).collect(),
            login_refused: some_down
                && down.all(|s| {
                    lock(&s.state.last_error).is_some()
                        && s.state.login_refused.load(Ordering::Relaxed)
                }),
        }
    }

    /// Each server's name, role, whether it is up, its borrows outstanding and its
    /// sub-pool's counters.
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) {
    /// for s in pool.servers() {
    ///     println!("{} {:?} up={} out={} open={}", s.name, s.role, s.up, s.outstanding, s.stats.open);
    /// }
    /// # }
    /// ```
    pub fn servers(&self) -> Vec<ServerInfo> {
        self.shared
            .servers
            .iter()
            .map(|s| ServerInfo {
                name: s.state.name.clone(),
                role: s.state.role(),
                up: s.state.up.load(Ordering::Acquire),
                drained: s.state.draining.load(Ordering::Relaxed),
                outstanding: s.state.outstanding.load(Ordering::Relaxed),
                stats: s.pool.stats(),
            })
            .collect()
    }
}

impl fmt::Debug for PgPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgPool")
            .field("servers", &self.servers())
            .finish()
    }
}

/// One server of a [`PgPool`]; see [`PgPool::servers`].
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::PgPool;
/// let pool = PgPool::builder("host=127.0.0.1 port=1 user=app".parse()?).max_size(4).build()?;
/// let s = &pool.servers()[0];
/// assert_eq!((s.name.as_str(), s.up, s.outstanding), ("127.0.0.1:1", false, 0));
/// assert_eq!(s.stats.max_size, 4); // its share of the total
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerInfo {
    /// `host:port`.
    pub name: String,
    /// What it said it is.
    pub role: ServerRole,
    /// Reachable now.
    pub up: bool,
    /// Taken out of service by [`PgPool::drain`].
    pub drained: bool,
    /// Borrows out or waiting.
    pub outstanding: usize,
    /// Its sub-pool's counters (`max_size` is its current share).
    pub stats: crate::Stats,
}

/// Counts a borrow against its server until dropped.
struct Outstanding(Arc<ServerState>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection borrowed from a [`PgPool`]; derefs to [`Client`] and returns when dropped.
///
/// ```no_run
/// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::Role;
/// let mut conn = pool.get(Role::PreferStandby).await?; // a PgPooled
/// let rows = conn.query("SELECT id FROM stock", &[]).await?; // derefs to Client
/// println!("{} rows from {}", rows.len(), conn.server());
/// # Ok(()) }
/// ```
pub struct PgPooled {
    conn: Pooled<ServerManager>,
    _counted: Outstanding,
}

impl PgPooled {
    /// The server it is connected to (`host:port`).
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::Role;
    /// let conn = pool.get(Role::Standby).await?;
    /// assert!(pool.servers().iter().any(|s| s.name == conn.server()));
    /// # Ok(()) }
    /// ```
    pub fn server(&self) -> &str {
        &self._counted.0.name
    }

    /// The connection's labels ([`Pooled::labels`]).
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let conn = pool.get(slipstream_pool::Role::Any).await?;
    /// println!("{:?}", conn.labels());
    /// # Ok(()) }
    /// ```
    pub fn labels(&self) -> Arc<Labels> {
        self.conn.labels()
    }

    /// Labels the connection after setting it up that way yourself, for later
    /// [`PgPool::get_labeled`] borrows to find ([`Pooled::set_labels`]).
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::{Labels, Role};
    /// let mut conn = pool.get(Role::Primary).await?;
    /// conn.batch_execute("SET search_path = acme").await?;
    /// conn.set_labels(Labels::from([("tenant".to_string(), "acme".to_string())]));
    /// # Ok(()) }
    /// ```
    pub fn set_labels(&self, labels: Labels) {
        self.conn.set_labels(labels);
    }

    /// Closes the connection when this guard drops instead of returning it
    /// ([`Pooled::discard`]).
    ///
    /// ```no_run
    /// # async fn f(pool: slipstream_pool::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let conn = pool.get(slipstream_pool::Role::Any).await?;
    /// conn.discard(); // known unusable: the next borrow opens another
    /// # Ok(()) }
    /// ```
    pub fn discard(self) {
        self.conn.discard();
    }
}

impl Deref for PgPooled {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.conn
    }
}

impl DerefMut for PgPooled {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.conn
    }
}

impl fmt::Debug for PgPooled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgPooled")
            .field("server", &self.server())
            .finish()
    }
}

fn server_name(config: &slipstream_pg::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map_or_else(|| "localhost".to_string(), |h| h.to_string());
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(slipstream_pg::DEFAULT_PORT);
    format!("{host}:{port}")
}

/// Refuses a connection string that sets libpq's `target_session_attrs` to anything but
/// `any`. A pool splits the string into one configuration per host, so the setting would apply
/// to each host alone: with `read-write`, every connect to a standby is refused by the client
/// itself, the standby is marked down (probed again every 0.5 s for good) and `Role::Standby`
/// fails with `NoServer` saying to retry, which never helps; `read-only` and `standby` do
/// that to the primary, and `prefer-standby` connects to a primary twice per connection. A
/// pool picks the server by the `Role` each borrow asks for instead.
fn refuse_session_attrs(config: &slipstream_pg::Config) -> Result<(), PoolError> {
    use slipstream_pg::TargetSessionAttrs as Attrs;
    let (name, instead) = match config.get_target_session_attrs() {
        Attrs::Any => return Ok(()),
        Attrs::ReadWrite => ("read-write", "Role::Primary"),
        Attrs::Primary => ("primary", "Role::Primary"),
        Attrs::ReadOnly => ("read-only", "Role::Standby"),
        Attrs::Standby => ("standby", "Role::Standby"),
        Attrs::PreferStandby => ("prefer-standby", "Role::PreferStandby"),
    };
    Err(PoolError::Config(format!(
        "the configuration sets target_session_attrs={name} (in the connection string or \
         PGTARGETSESSIONATTRS), which a PgPool cannot honour: it connects to each host on its own, so the setting would refuse every server of the \
         other role and leave it marked down; remove it and borrow with {instead} \
         (pool.get({instead})), which picks the server by the Role each borrow asks for"
    )))
}

/// The `i`th of `n` serving servers' share of `max_size`: even, the remainder one each to the
/// first servers, so the shares add up to exactly `max_size`.
fn share(max_size: usize, n: usize, i: usize) -> usize {
    let n = n.max(1);
    max_size / n + usize::from(i < max_size % n)
}

/// The monitor: probes servers that are down or suspected (a connection to them broke), marks
/// them down or up, and rebalances the sub-pools' shares. Ends when the pool is dropped.
async fn monitor_task(shared: Weak<Shared>) {
    // While no serving server is a primary, the roles of those up are probed again (a
    // failover promotes a standby nobody may talk to), backing off like down servers' probes.
    let mut next_role_probe = Instant::now();
    let mut role_interval = FIRST_PROBE_INTERVAL;
    let mut last_asked = Instant::now() - ASKED_PROBE_INTERVAL;
    loop {
        let Some(pool) = shared.upgrade() else { return };
        let no_primary = !pool
            .servers
            .iter()
            .any(|s| s.state.serving() && s.state.role() == ServerRole::Primary);
        // A borrow that found no server of its role asks for the roles at once, but at most
        // once per ASKED_PROBE_INTERVAL: a caller retrying a failing borrow in a loop must not
        // turn into a storm on the servers (and a role probe opens no connection past the
        // first: see `probe_server`).
        let asked = pool.reprobe_roles.load(Ordering::Relaxed)
            && Instant::now() >= last_asked + ASKED_PROBE_INTERVAL;
        if asked {
            pool.reprobe_roles.store(false, Ordering::Relaxed);
            last_asked = Instant::now();
        }
        let roles_due = asked || (no_primary && Instant::now() >= next_role_probe);
        if roles_due {
            next_role_probe = Instant::now() + role_interval;
            role_interval = (role_interval * 2).min(MAX_PROBE_INTERVAL);
        }
        if !no_primary {
            role_interval = FIRST_PROBE_INTERVAL;
        }
        for (i, server) in pool.servers.iter().enumerate() {
            let state = &server.state;
            if state.probing.load(Ordering::Acquire) {
                continue;
            }
            let up = state.up.load(Ordering::Relaxed);
            let suspect = state.suspect.swap(false, Ordering::Relaxed);
            let due = !up && Instant::now() >= lock(&state.schedule).0;
            let unknown = up && state.role() == ServerRole::Unknown;
            let how = if due || suspect || unknown {
                Probe::Connect
            } else if up && roles_due {
                Probe::Role
            } else {
                continue;
            };
            state.probing.store(true, Ordering::Release);
            tokio::spawn(probe_task(shared.clone(), i, how));
        }
        // Connections still open on a down or drained server hold back part of max_size (see
        // `rebalance_shares`): give it out again as they close, rechecking soon while any is
        // (what this pass's rebalance found, not the flag it started from).
        let held_back = pool.held_back.load(Ordering::Relaxed) && rebalance_shares(&pool);
        let mut wait = pool
            .servers
            .iter()
            .filter(|s| !s.state.up.load(Ordering::Relaxed))
            .map(|s| {
                lock(&s.state.schedule)
                    .0
                    .saturating_duration_since(Instant::now())
            })
            .min()
            .unwrap_or(MAX_PROBE_INTERVAL);
        if held_back {
            wait = wait.min(HELD_BACK_RECHECK);
        }
        if no_primary {
            wait = wait.min(next_role_probe.saturating_duration_since(Instant::now()));
        }
        if pool.reprobe_roles.load(Ordering::Relaxed) {
            wait = wait
                .min((last_asked + ASKED_PROBE_INTERVAL).saturating_duration_since(Instant::now()));
        }
        let monitor = pool.monitor.clone();
        drop(pool);
        let _ = tokio::time::timeout(wait.max(Duration::from_millis(1)), monitor.notified()).await;
    }
}

/// Sets its flag when dropped armed: the monitor task was dropped mid-run, which happens only
/// when its runtime shuts down.
struct RuntimeGone(Option<Arc<AtomicBool>>);

impl RuntimeGone {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RuntimeGone {
    fn drop(&mut self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::Release);
        }
    }
}

/// A lock that a panic while it was held does not poison: every value under these locks is
/// whole after any single write.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One probe of server `i`, applied to its state; then the shares are rebalanced if it went
/// up or down, borrows waiting for a first look are woken, and so is the monitor.
async fn probe_task(shared: Weak<Shared>, i: usize, how: Probe) {
    let Some(pool) = shared.upgrade() else { return };
    let server = &pool.servers[i];
    let result = probe_server(server, how).await;
    let state = &server.state;
    let up = state.up.load(Ordering::Relaxed);
    let mut changed = false;
    match result {
        Probed::Role(role) => {
            state.role.store(role, Ordering::Relaxed);
            lock(&state.schedule).1 = FIRST_PROBE_INTERVAL;
            if !up {
                // Its share first, then `up`, under the rebalance's lock: whoever sees it up
                // sees its share (a server up with a share of 0 was seen under load, right
                // after `build_ready`, in `roles_route_balance_fail_over_and_rebalance`).
                mark_up(&pool, i);
            }
        }
        // Every connection of its share is lent: their returns report a promotion.
        Probed::Skipped => {}
        // Up, only refusing new sessions: marking it down would close its working connections.
        Probed::Refused(e, login) if up => state.failed(e, login),
        Probed::Refused(e, login) | Probed::Down(e, login) => {
            state.failed(e, login);
            if up {
                state.up.store(false, Ordering::Relaxed);
                state.went_down.notify_waiters();
                changed = true;
            }
            let mut schedule = lock(&state.schedule);
            *schedule = (
                Instant::now() + schedule.1,
                (schedule.1 * 2).min(MAX_PROBE_INTERVAL),
            );
        }
    }
    state.probing.store(false, Ordering::Release);
    if changed {
        rebalance_shares(&pool);
    }
    pool.looked.notify_waiters();
    pool.monitor.notify_one();
}

/// How long a probe may take when the connection string sets no `connect_timeout` (an
/// unreachable host would otherwise hold the monitor for the OS's TCP timeout, minutes).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How the monitor looks at a server.
#[derive(Clone, Copy)]
enum Probe {
    /// A connection of its own: the server is down, suspected, or its role unknown.
    Connect,
    /// Up: only its role, over an idle connection of its sub-pool (no connection beyond
    /// max_size), or a connection of its own if its share has room for one.
    Role,
}

enum Probed {
    Role(u8),
    Skipped,
    /// Answered, and refused a new session only: too many connections, or the pool's
    /// credentials (a password changed, the role dropped). Its sessions still work. The flag:
    /// a refused login ([`refuses_login`]).
    Refused(String, bool),
    Down(String, bool),
}

async fn probe_server(server: &Server, how: Probe) -> Probed {
    if let Probe::Role = how {
        let limit = server.config.get_connect_timeout().unwrap_or(PROBE_TIMEOUT);
        let idle = match server.pool.try_get() {
            Some(conn) => Some(conn),
            None if server.pool.held_count() < server.pool.max_size() => {
                // Opened through the sub-pool, within its share, and kept there idle: the
                // next role probe asks over it instead of opening another (a borrow loop
                // failing with NoServer asks for one every ASKED_PROBE_INTERVAL). A failed
                // open ends the wait (the sub-pool would retry with back-off, keeping a
                // server that refuses "up" meanwhile): the probe of its own below then says
                // whether the server is down. Listening before the borrow starts the open.
                let failed = server.state.connect_failed.notified();
                tokio::pin!(failed);
                failed.as_mut().enable();
                tokio::select! {
                    conn = tokio::time::timeout(limit, server.pool.get()) => {
                        conn.ok().and_then(Result::ok)
                    }
                    () = failed => None,
                }
            }
            None => return Probed::Skipped,
        };
        if let Some(mut conn) = idle {
            // Asked, not read from `in_hot_standby`: an idle connection's report predates a
            // promotion it has not run a statement since. Named by schema: the connection may
            // keep a borrower's `search_path` (`Reset::Rollback` does), and a function planted
            // there would answer for the server (tests/attack_feature_seams.rs).
            let asked = tokio::time::timeout(
                limit,
                conn.query_one("SELECT pg_catalog.pg_is_in_recovery()", &[]),
            );
            if let Ok(Ok(row)) = asked.await
                && let Ok(standby) = row.get::<_, bool>(0)
            {
                return Probed::Role(if standby { STANDBY } else { PRIMARY });
            }
            // A failure here is the connection's: the return breaks it and suspects the server.
            return Probed::Skipped;
        }
        // No connection through the sub-pool: a probe of its own says whether it is down.
    }
    match probe(&server.config).await {
        Ok(role) => Probed::Role(role),
        Err((e, true, login)) => Probed::Refused(e, login),
        Err((e, false, login)) => Probed::Down(e, login),
    }
}

/// Opens and closes one connection to learn whether the server is up, and its role. The
/// error says whether the server answered and refused only the new session: too many
/// connections (53300), or the pool's credentials (class 28: a password changed, the role
/// dropped or not allowed to log in). Either way the sessions it already has keep working, so
/// marking it down (closing them) would turn a server that cannot take more of the pool's
/// sessions into one that serves none.
/// The last flag: a refused login ([`refuses_login`]).
async fn probe(config: &slipstream_pg::Config) -> Result<u8, (String, bool, bool)> {
    let limit = config.get_connect_timeout().unwrap_or(PROBE_TIMEOUT);
    let attempt = async {
        let mut conn = slipstream_pg::connect_config(config).await?;
        let role = learn_role(&mut conn).await;
        let _ = conn.close().await;
        role
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(result) => result.map_err(|e| {
            let refused = e.code().is_some_and(|c| {
                c == slipstream_pg::SqlState::TOO_MANY_CONNECTIONS || c.code().starts_with("28")
            });
            (e.to_string(), refused, refuses_login(&e))
        }),
        Err(_) => Err((format!("no answer within {limit:?}"), false, false)),
    }
}

/// Whether the server refused the pool's login: class 28 (a wrong password, a role that may
/// not log in, no `pg_hba.conf` entry) or a database that does not exist (3D000); or the
/// client refused to connect as configured (`ErrorKind::Config`: a connection service whose
/// file was never read, a TLS file it cannot load), before or without asking the server.
/// Unlike a server that is down or full, one that says this from the start will say it again
/// to every retry until someone changes the connection string or the server's set-up (until
/// helper h79 a configuration error was "retried in the background, so retry shortly", and
/// `build_ready` waited out its timeout: `tests/attack_pg_pool_config_errors.rs`).
fn refuses_login(e: &slipstream_pg::Error) -> bool {
    e.kind() == slipstream_pg::ErrorKind::Config
        || e.code().is_some_and(|c| {
            c.code().starts_with("28") || c == slipstream_pg::SqlState::INVALID_CATALOG_NAME
        })
}

/// [`rebalance_shares`] for the callers outside the monitor (drain, resume, resize): when part
/// of `max_size` is held back, the monitor takes it from here, rechecking as those
/// connections close.
fn rebalance(shared: &Shared) {
    if rebalance_shares(shared) {
        shared.monitor.notify_one();
    }
}

/// Gives each serving server an even share of what `max_size` leaves after the connections
/// still open on down or drained servers (they close as they are returned, and the monitor
/// calls this again), and those servers none: their idle connections close at once, lent ones
/// as they return. So the connections open never pass `max_size`, and the shares add up to it
/// once the others are closed. Returns whether part of `max_size` is held back.
///
/// Never wakes the monitor itself: the monitor calls this on its passes, and a wake-up it
/// left for itself would end its next wait at once. While a connection stayed open on a
/// drained server it then looped without ever yielding, keeping its worker thread, the
/// sub-pools' tasks it had woken there (the openers that would close that connection) and,
/// with the other worker parked, every timer: borrows hung past their timeout (issue 19).
fn rebalance_shares(shared: &Shared) -> bool {
    rebalance_shares_and_mark_up(shared, None)
}

/// Marks server `i` up, after giving it its share (see `rebalance_shares`).
fn mark_up(shared: &Shared, i: usize) {
    rebalance_shares_and_mark_up(shared, Some(i));
}

/// `rebalance_shares`, counting server `coming_up` as up and marking it so once the shares
/// are set, before the lock is released: no rebalance runs between the two.
fn rebalance_shares_and_mark_up(shared: &Shared, coming_up: Option<usize>) -> bool {
    let _one_at_a_time = lock(&shared.rebalancing);
    // One look at who serves: a drain or mark-up meanwhile is this function's next caller's.
    let serving: Vec<bool> = shared
        .servers
        .iter()
        .enumerate()
        .map(|(k, s)| {
            s.state.serving() || (coming_up == Some(k) && !s.state.draining.load(Ordering::Relaxed))
        })
        .collect();
    // A shrunk sub-pool closes its idle surplus at once (`Pool::resize`): a second pass then
    // gives what those held to the others, so only connections still lent hold a share back.
    let (held, over, mut held_back) = share_out(shared, &serving);
    if over && held_counts(shared) != held {
        held_back = share_out(shared, &serving).2;
    }
    if let Some(k) = coming_up {
        // Release: pairs with the Acquire loads of `build_ready` and `servers`, which then
        // see the share set above.
        shared.servers[k].state.up.store(true, Ordering::Release);
    }
    held_back
}

/// Each sub-pool's count of connections held (open, or being opened).
fn held_counts(shared: &Shared) -> Vec<usize> {
    shared.servers.iter().map(|s| s.pool.held_count()).collect()
}

/// One pass of `rebalance_shares`: sets each server's share from what the servers hold now.
/// Returns those counts, whether a serving server held more than its even share, and whether
/// any share is held back (the monitor's cue to look again).
fn share_out(shared: &Shared, serving: &[bool]) -> (Vec<usize>, bool, bool) {
    let count = serving.iter().filter(|&&s| s).count();
    let held = held_counts(shared);
    let held_elsewhere: usize = held
        .iter()
        .zip(serving)
        .filter(|&(_, &serves)| !serves)
        .map(|(h, _)| h)
        .sum();
    let available = shared
        .max_size
        .load(Ordering::Relaxed)
        .saturating_sub(held_elsewhere);
    let mut i = 0;
    let even: Vec<usize> = serving
        .iter()
        .map(|&serves| {
            if serves {
                i += 1;
                share(available, count, i - 1)
            } else {
                0
            }
        })
        .collect();
    // A serving server holding more than its even share (its share just shrank: another came
    // back, or was resumed) keeps the surplus until those connections return and close; the
    // others share what is left, so the connections open never pass max_size meanwhile.
    let over: Vec<bool> = (0..even.len())
        .map(|k| serving[k] && held[k] > even[k])
        .collect();
    let held_over: usize = (0..even.len()).filter(|&k| over[k]).map(|k| held[k]).sum();
    let under = (0..even.len()).filter(|&k| serving[k] && !over[k]).count();
    let rest = available.saturating_sub(held_over);
    let mut j = 0;
    let sizes: Vec<usize> = (0..even.len())
        .map(|k| {
            if !serving[k] || over[k] {
                even[k]
            } else {
                j += 1;
                share(rest, under, j - 1).min(even[k])
            }
        })
        .collect();
    let any_over = over.iter().any(|&o| o);
    let held_back = held_elsewhere > 0 || any_over;
    shared.held_back.store(held_back, Ordering::Relaxed);
    // Shrink first, then grow: the sum of the shares never passes max_size on the way.
    for grow in [false, true] {
        for (s, &size) in shared.servers.iter().zip(&sizes) {
            if (size > s.pool.max_size()) == grow {
                s.pool.resize(size);
            }
        }
    }
    (held, any_over, held_back)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Runs on this thread between a fast path's claim of an idle connection and its
        /// check that the server still serves (`Server::claim_idle`): the window a `drain` or a
        /// role change on another thread can fall into, made deterministic.
        pub(super) static AFTER_IDLE_CLAIM: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// A real server, a one-worker runtime for the pool, and the server's connection string.
    fn one_server() -> (slipstream_testkit::Cluster, tokio::runtime::Runtime, String) {
        let cluster = slipstream_testkit::Cluster::start().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let url = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
            cluster.port()
        );
        (cluster, rt, url)
    }

    /// docs/pool.md: "A borrow still under way when `drain` returns ... is not handed that
    /// server's connection". Steps: one server with an idle connection; `try_get` and then
    /// `get_blocking` claim it, and `drain` of that server runs and returns right after the
    /// claim (the test hook), before the borrow hands the connection out. Before the fix both
    /// fast paths lent it (only the async borrow re-checked): "try_get lent a connection of
    /// 127.0.0.1:... after its drain had returned".
    #[test]
    fn a_fast_path_that_claimed_just_before_a_drain_does_not_lend_the_drained_servers() {
        let (_cluster, rt, url) = one_server();
        let pool = rt.block_on(async {
            let pool = PgPool::builder(url.parse().unwrap())
                .pool_config(Config {
                    max_size: 1,
                    ..Config::default()
                })
                .build_ready()
                .await
                .unwrap();
            drop(pool.get(Role::Primary).await.unwrap());
            pool
        });
        let name = pool.servers()[0].name.clone();
        let idle_again = |pool: &PgPool| {
            pool.resume(&name).unwrap();
            // Bounded, to catch a hang: the share comes back and a return's reset runs on
            // the runtime before the connection is idle.
            rt.block_on(async {
                for _ in 0..500 {
                    if pool.servers()[0].stats.idle == 1 {
                        return;
                    }
                    if let Ok(Ok(conn)) =
                        tokio::time::timeout(Duration::from_secs(1), pool.get(Role::Primary)).await
                    {
                        drop(conn);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("no idle connection after resume: {:?}", pool.servers());
            });
            let (pool, name) = (pool.clone(), name.clone());
            let mut once = Some(());
            AFTER_IDLE_CLAIM.with(|hook| {
                *hook.borrow_mut() = Some(Box::new(move || {
                    if once.take().is_some() {
                        pool.drain(&name).unwrap();
                    }
                }));
            });
        };
        idle_again(&pool);
        let lent = pool.try_get(Role::Primary).map(|c| c.server().to_string());
        assert_eq!(
            lent, None,
            "try_get lent a connection after its drain had returned"
        );
        idle_again(&pool);
        let lent = pool
            .get_blocking(Role::Primary)
            .map(|c| c.server().to_string());
        assert!(
            matches!(lent, Err(PoolError::NoServer { .. })),
            "get_blocking after the only server's drain had returned: {lent:?}"
        );
        AFTER_IDLE_CLAIM.with(|hook| hook.borrow_mut().take());
    }

    /// Promise (`Idle::Due`): a connection idle past `validate_after` is never lent without
    /// its validation. `get_blocking` takes one due on its own thread and hands it to the
    /// async borrow; if meanwhile its server stopped serving the role asked for (a promotion
    /// learned, here a role no server of the pool has), the borrow gives it back.
    ///
    /// Steps: one primary, `validate_after` 50 ms, a connection idle for 150 ms taken as due;
    /// a `Role::Standby` borrow is handed it (as `get_blocking` hands it, the role having
    /// changed in between) and fails with `NoServer`; then the connection on the idle list
    /// must still be due.
    ///
    /// Before the fix the borrow dropped it, which returned it stamped "just returned": the
    /// next borrow lent it at once, unvalidated, after it had sat idle past the window.
    #[test]
    fn a_due_connection_handed_to_a_borrow_that_cannot_use_it_is_not_made_fresh() {
        let (_cluster, rt, url) = one_server();
        rt.block_on(async {
            let pool = PgPool::builder(url.parse().unwrap())
                .pool_config(Config {
                    max_size: 1,
                    validate_after: Some(Duration::from_millis(50)),
                    ..Config::default()
                })
                .build_ready()
                .await
                .unwrap();
            drop(pool.get(Role::Primary).await.unwrap());
            tokio::time::sleep(Duration::from_millis(150)).await;
            let server = &pool.shared.servers[0];
            let Some(Idle::Due(conn)) = server.take_idle() else {
                panic!("the connection idle past validate_after is due");
            };
            let borrows = server.pool.stats().borrows;
            let e = pool
                .borrow(Role::Standby, true, Some((server, conn)), |p| p.get())
                .await
                .map(|_| ())
                .unwrap_err();
            assert!(matches!(e, PoolError::NoServer { .. }), "{e:?}");
            // A connection given back goes through its reset on the runtime first: wait until
            // it is idle again or closed (bounded, to catch a hang).
            for _ in 0..500 {
                let stats = server.pool.stats();
                if stats.borrowed == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // NoServer asks the monitor for a role probe, which may borrow the connection and
            // run a statement on it (validating it if due): then it is rightly fresh. Only a
            // connection no one borrowed since must still be due.
            let borrowed_since = server.pool.stats().borrows - borrows;
            if let Some(Idle::Ready(_)) = server.take_idle() {
                assert!(
                    borrowed_since > 0,
                    "the due connection came back as just returned, lendable unvalidated"
                );
            }
            assert_eq!(
                server.pool.stats().closed_broken,
                0,
                "nothing said it was broken"
            );
        });
    }
}
