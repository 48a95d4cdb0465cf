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

use crate::{AbortFn, Builder, Config, Manager, PgManager, Pool, PoolError, Pooled, Reset};

/// Which server a borrow wants.
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
/// `MAX_PROBE_INTERVAL`.
const FIRST_PROBE_INTERVAL: Duration = Duration::from_millis(100);
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// One server's state, shared by its sub-pool's manager, the monitor and borrowers.
struct ServerState {
    name: String,
    role: AtomicU8,
    up: AtomicBool,
    /// A connection to it broke or failed to open: the monitor probes it at once.
    suspect: AtomicBool,
    /// Borrows out or waiting on this server's sub-pool (the load-balancing measure).
    outstanding: AtomicUsize,
    /// Why it is down.
    last_error: Mutex<Option<String>>,
    /// Woken when it is marked down: borrowers waiting on its sub-pool pick another server.
    went_down: Notify,
}

impl ServerState {
    fn role(&self) -> ServerRole {
        match self.role.load(Ordering::Relaxed) {
            PRIMARY => ServerRole::Primary,
            STANDBY => ServerRole::Standby,
            _ => ServerRole::Unknown,
        }
    }

    fn describe(&self) -> String {
        let up = self.up.load(Ordering::Relaxed);
        let why = self
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
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

/// The role a server reports: `in_hot_standby` (PostgreSQL 14+, sent at startup), else
/// `pg_is_in_recovery()`.
async fn learn_role(conn: &mut Client) -> Result<u8, slipstream_pg::Error> {
    match conn.parameter("in_hot_standby") {
        Some("on") => Ok(STANDBY),
        Some(_) => Ok(PRIMARY),
        None => {
            let row = conn.query_one("SELECT pg_is_in_recovery()", &[]).await?;
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
                *self
                    .state
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                self.suspect();
                Err(e)
            }
        }
    }

    fn is_broken(&self, conn: &Client) -> bool {
        if conn.is_broken() {
            // Maybe the server is gone: the monitor probes it now.
            self.suspect();
            return true;
        }
        // A connection to a server marked down is closed on return.
        self.pg.is_broken(conn) || !self.state.up.load(Ordering::Relaxed)
    }

    fn needs_reset(&self, conn: &Client) -> bool {
        self.pg.needs_reset(conn)
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

struct Shared {
    servers: Vec<Server>,
    /// The most connections across all servers; shared among the servers that are up.
    max_size: usize,
    monitor: Arc<Notify>,
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
/// to 2 s); when it answers again the shares are rebalanced and borrows spread back to it.
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
#[derive(Debug, Clone)]
pub struct PgPoolBuilder {
    config: slipstream_pg::Config,
    pool: Config,
    reset: Reset,
}

impl PgPoolBuilder {
    /// The most connections across all servers (default 10), shared evenly among the servers
    /// that are up.
    pub fn max_size(mut self, n: usize) -> Self {
        self.pool.max_size = n;
        self
    }

    /// Every other setting of the sub-pools ([`Config`]: timeouts, lifetimes, validation);
    /// its `max_size` is the total across servers, and its `min_size` is per server.
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
    pub fn reset_on_return(mut self, reset: Reset) -> Self {
        self.reset = reset;
        self
    }

    /// Creates the pool and its monitor task on the current tokio runtime, and starts probing
    /// every server. Does not wait; [`PgPoolBuilder::build_ready`] does.
    ///
    /// # Errors
    /// [`PoolError::Config`] if the hosts and ports of the connection string do not pair up.
    pub fn build(self) -> Result<PgPool, PoolError> {
        let configs = self
            .config
            .per_host()
            .map_err(|e| PoolError::Config(e.to_string()))?;
        let monitor = Arc::new(Notify::new());
        let share = share(self.pool.max_size, configs.len());
        let servers = configs
            .into_iter()
            .map(|config| {
                let state = Arc::new(ServerState {
                    name: server_name(&config),
                    role: AtomicU8::new(UNKNOWN),
                    up: AtomicBool::new(false),
                    suspect: AtomicBool::new(false),
                    outstanding: AtomicUsize::new(0),
                    last_error: Mutex::new(None),
                    went_down: Notify::new(),
                });
                let manager = ServerManager {
                    pg: PgManager::new(config.clone()).reset_on_return(self.reset),
                    state: state.clone(),
                    monitor: monitor.clone(),
                };
                let mut pool_config = self.pool.clone();
                pool_config.max_size = share;
                pool_config.resize_limit = pool_config.resize_limit.max(self.pool.max_size);
                let pool = Builder {
                    manager,
                    config: pool_config,
                }
                .build();
                Server {
                    state,
                    pool,
                    config,
                }
            })
            .collect();
        let shared = Arc::new(Shared {
            servers,
            max_size: self.pool.max_size,
            monitor,
        });
        tokio::spawn(monitor_task(Arc::downgrade(&shared)));
        Ok(PgPool { shared })
    }

    /// [`PgPoolBuilder::build`], then waits until every server was reached or found down, and
    /// at least one is up.
    ///
    /// # Errors
    /// [`PoolError::NoServer`] naming each server's failure when none could be reached within
    /// the borrow timeout (at most 30 s).
    pub async fn build_ready(self) -> Result<PgPool, PoolError> {
        let timeout = self.pool.borrow_timeout.min(Duration::from_secs(30));
        let pool = self.build()?;
        let start = Instant::now();
        loop {
            let states = pool.shared.servers.iter().map(|s| &s.state);
            let settled = states.clone().all(|s| {
                s.up.load(Ordering::Relaxed)
                    || s.last_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some()
            });
            let any_up = states.clone().any(|s| s.up.load(Ordering::Relaxed));
            if (settled && any_up) || start.elapsed() >= timeout {
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
    pub fn builder(config: slipstream_pg::Config) -> PgPoolBuilder {
        PgPoolBuilder {
            config,
            pool: Config::default(),
            reset: Reset::default(),
        }
    }

    /// Borrows a connection to a server of `role`: the one, among those up, with the fewest
    /// borrows outstanding, waiting there (up to the borrow timeout) if it has none idle.
    ///
    /// # Errors
    /// [`PoolError::NoServer`] at once if no server of that role is up, naming each server's
    /// state; otherwise as [`Pool::get`].
    pub async fn get(&self, role: Role) -> Result<PgPooled, PoolError> {
        loop {
            let server = self.pick(role).ok_or_else(|| self.no_server(role))?;
            let state = &server.state;
            // Listen for the server going down before looking at it, so a mark-down between
            // the look and the wait is not missed.
            let went_down = state.went_down.notified();
            let mut went_down = std::pin::pin!(went_down);
            went_down.as_mut().enable();
            if !state.up.load(Ordering::Relaxed) {
                continue;
            }
            state.outstanding.fetch_add(1, Ordering::Relaxed);
            let counted = Outstanding(state.clone());
            tokio::select! {
                conn = server.pool.get() => {
                    return Ok(PgPooled { conn: conn?, _counted: counted });
                }
                // Its sub-pool will not serve this borrow: pick again (cancelling the wait
                // loses nothing).
                () = went_down => {}
            }
        }
    }

    /// The up server of `role` with the fewest outstanding borrows.
    fn pick(&self, role: Role) -> Option<&Server> {
        let least = |want: Option<ServerRole>| {
            self.shared
                .servers
                .iter()
                .filter(|s| s.state.up.load(Ordering::Relaxed))
                .filter(|s| want.is_none_or(|w| s.state.role() == w))
                .min_by_key(|s| s.state.outstanding.load(Ordering::Relaxed))
        };
        match role {
            Role::Any => least(None),
            Role::Primary => least(Some(ServerRole::Primary)),
            Role::Standby => least(Some(ServerRole::Standby)),
            Role::PreferStandby => {
                least(Some(ServerRole::Standby)).or_else(|| least(Some(ServerRole::Primary)))
            }
        }
    }

    fn no_server(&self, role: Role) -> PoolError {
        PoolError::NoServer {
            role: role.to_string(),
            servers: self
                .shared
                .servers
                .iter()
                .map(|s| s.state.describe())
                .collect(),
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
                up: s.state.up.load(Ordering::Relaxed),
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
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerInfo {
    /// `host:port`.
    pub name: String,
    /// What it said it is.
    pub role: ServerRole,
    /// Reachable now.
    pub up: bool,
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
pub struct PgPooled {
    conn: Pooled<ServerManager>,
    _counted: Outstanding,
}

impl PgPooled {
    /// The server it is connected to (`host:port`).
    pub fn server(&self) -> &str {
        &self._counted.0.name
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

/// Each server's share of `max_size` among `up` servers (rounded up, at least 1).
fn share(max_size: usize, up: usize) -> usize {
    max_size.div_ceil(up.max(1)).max(1)
}

/// The monitor: probes servers that are down or suspected (a connection to them broke), marks
/// them down or up, and rebalances the sub-pools' shares. Ends when the pool is dropped.
async fn monitor_task(shared: Weak<Shared>) {
    let n = match shared.upgrade() {
        Some(s) => s.servers.len(),
        None => return,
    };
    let mut next_probe = vec![Instant::now(); n];
    let mut interval = vec![FIRST_PROBE_INTERVAL; n];
    loop {
        let Some(pool) = shared.upgrade() else { return };
        let mut changed = false;
        for (i, server) in pool.servers.iter().enumerate() {
            let state = &server.state;
            let up = state.up.load(Ordering::Relaxed);
            let suspect = state.suspect.swap(false, Ordering::Relaxed);
            let due = !up && Instant::now() >= next_probe[i];
            if !(due || suspect || (up && state.role() == ServerRole::Unknown)) {
                continue;
            }
            match probe(&server.config).await {
                Ok(role) => {
                    state.role.store(role, Ordering::Relaxed);
                    interval[i] = FIRST_PROBE_INTERVAL;
                    if !up {
                        state.up.store(true, Ordering::Relaxed);
                        changed = true;
                    }
                }
                Err(e) => {
                    *state.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    if up {
                        state.up.store(false, Ordering::Relaxed);
                        state.went_down.notify_waiters();
                        changed = true;
                    }
                    next_probe[i] = Instant::now() + interval[i];
                    interval[i] = (interval[i] * 2).min(MAX_PROBE_INTERVAL);
                }
            }
        }
        if changed {
            rebalance(&pool);
        }
        let wait = pool
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.state.up.load(Ordering::Relaxed))
            .map(|(i, _)| next_probe[i].saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(MAX_PROBE_INTERVAL);
        let monitor = pool.monitor.clone();
        drop(pool);
        let _ = tokio::time::timeout(wait.max(Duration::from_millis(1)), monitor.notified()).await;
    }
}

/// How long a probe may take when the connection string sets no `connect_timeout` (an
/// unreachable host would otherwise hold the monitor for the OS's TCP timeout, minutes).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens and closes one connection to learn whether the server is up, and its role.
async fn probe(config: &slipstream_pg::Config) -> Result<u8, String> {
    let limit = config.get_connect_timeout().unwrap_or(PROBE_TIMEOUT);
    let attempt = async {
        let mut conn = slipstream_pg::connect_config(config).await?;
        let role = learn_role(&mut conn).await;
        let _ = conn.close().await;
        role
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

/// Gives each up server an even share of `max_size`, and down servers none: a down server's
/// idle connections close at once, lent ones as they return.
fn rebalance(shared: &Shared) {
    let up = shared
        .servers
        .iter()
        .filter(|s| s.state.up.load(Ordering::Relaxed))
        .count();
    let share = share(shared.max_size, up);
    for s in &shared.servers {
        if s.state.up.load(Ordering::Relaxed) {
            s.pool.resize(share);
        } else {
            // Size 0: the reaper closes its idle connections now, returns close the others.
            s.pool.resize(0);
        }
    }
}
