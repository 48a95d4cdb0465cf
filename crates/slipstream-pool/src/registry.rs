//! One pool per connection string for the whole process (ODP.NET's pool-per-connection-string
//! rule), so code that only has a connection string still shares connections.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::{PgPool, PgPoolBuilder, PoolError};

/// Pools keyed by connection string: the same string (byte for byte, surrounding whitespace
/// aside) gets the same [`PgPool`]; any other string, even one that differs only in the order
/// of its parameters, gets a pool of its own, as in ODP.NET.
///
/// ```no_run
/// # async fn f() -> Result<(), slipstream_pool::PoolError> {
/// use slipstream_pool::{Registry, Role};
/// let url = "postgres://app@db1,db2/orders";
/// let a = Registry::global().pool(url, |b| b.max_size(20))?;
/// let b = Registry::global().pool(url, |b| b)?; // the same pool: settings apply once
/// let mut conn = b.get(Role::Primary).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct Registry {
    pools: Mutex<HashMap<String, PgPool>>,
}

impl Registry {
    /// An empty registry (most programs use [`Registry::global`]).
    ///
    /// ```
    /// let registry = slipstream_pool::Registry::new();
    /// assert!(registry.is_empty());
    /// ```
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The process-wide registry.
    ///
    /// ```
    /// use slipstream_pool::Registry;
    /// assert!(std::ptr::eq(Registry::global(), Registry::global())); // one per process
    /// ```
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::new)
    }

    /// The pool for `conn_str`, built with `configure` on first use (in a tokio runtime, which
    /// must outlive it). Later calls with the same string return the same pool and ignore
    /// `configure`. The string is read as `slipstream_pg::connect` reads it: the environment
    /// (`PG*` variables, the connection service file, the password file) fills what it leaves
    /// unset, once, when the pool is built.
    ///
    /// # Errors
    /// [`PoolError::Config`] if the string does not parse or the environment it names cannot
    /// be applied (a service its file lacks), naming the problem, or (on first
    /// use) outside a tokio runtime, as [`crate::PgPoolBuilder::build`].
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// use slipstream_pool::{PoolError, Registry};
    /// let registry = Registry::new();
    /// let url = "postgres://app@127.0.0.1:1/orders";
    /// let a = registry.pool(url, |b| b.max_size(4))?;
    /// let b = registry.pool(&format!(" {url} "), |b| b.max_size(99))?; // the same pool
    /// assert_eq!(b.servers()[0].stats.max_size, 4);
    /// assert!(matches!(registry.pool("postgres://app@db:port/x", |b| b), Err(PoolError::Config(_))));
    /// # Ok(()) }
    /// ```
    pub fn pool(
        &self,
        conn_str: &str,
        configure: impl FnOnce(PgPoolBuilder) -> PgPoolBuilder,
    ) -> Result<PgPool, PoolError> {
        let key = conn_str.trim();
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pool) = pools.get(key) {
            return Ok(pool.clone());
        }
        // As `slipstream_pg::connect(str)` reads it: the environment (`PG*`, the connection
        // service file, the password file) fills what the string leaves unset. A caller
        // holding only a string has no other place to apply it.
        let config = key
            .parse::<slipstream_pg::Config>()
            .and_then(slipstream_pg::Config::apply_env)
            .map_err(|e| PoolError::Config(e.to_string()))?;
        let pool = configure(PgPool::builder(config)).build()?;
        pools.insert(key.to_string(), pool.clone());
        Ok(pool)
    }

    /// The number of pools held.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let registry = slipstream_pool::Registry::new();
    /// registry.pool("postgres://app@127.0.0.1:1/orders", |b| b)?;
    /// registry.pool("postgres://app@127.0.0.1:1/orders", |b| b)?;
    /// registry.pool("postgres://app@127.0.0.1:1/stock", |b| b)?;
    /// assert_eq!(registry.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True if no pool is held.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let registry = slipstream_pool::Registry::new();
    /// assert!(registry.is_empty());
    /// registry.pool("postgres://app@127.0.0.1:1/orders", |b| b)?;
    /// assert!(!registry.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
