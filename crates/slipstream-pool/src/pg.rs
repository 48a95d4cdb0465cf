//! The PostgreSQL manager: slipstream-pg connections to one server.

use slipstream_pg::{Client, Config, Error};

use crate::Manager;

/// Opens slipstream-pg connections for a [`crate::Pool`]. A connection that comes back broken
/// or inside a transaction is closed, not lent again; the statement cache of each connection
/// survives from one borrower to the next.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use slipstream_pool::{PgManager, Pool};
/// let pool = Pool::builder(PgManager::new("postgres://app@db/orders".parse()?))
///     .max_size(6)
///     .build();
/// let mut conn = pool.get().await?;
/// let one: i32 = conn.query_one("SELECT 1", &[]).await?.get(0)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgManager {
    config: Config,
}

impl PgManager {
    /// Connections made with `config`.
    pub fn new(config: Config) -> PgManager {
        PgManager { config }
    }
}

impl Manager for PgManager {
    type Connection = Client;
    type Error = Error;

    async fn connect(&self) -> Result<Client, Error> {
        slipstream_pg::connect_config(&self.config).await
    }

    fn is_broken(&self, conn: &Client) -> bool {
        !conn.is_reusable()
    }

    /// One round trip (`SELECT 1` on the simple protocol).
    async fn validate(&self, conn: &mut Client) -> bool {
        conn.batch_execute("SELECT 1").await.is_ok()
    }
}
