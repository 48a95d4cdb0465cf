//! deadpool and bb8 managing tokio-postgres connections, as the experiments with real
//! connections run them: each peer pool with its usual client.

use std::collections::HashMap;
use std::sync::Mutex;

/// A tokio-postgres connection that prepares each statement once and reuses it, as
/// deadpool-postgres's `prepare_cached` does and as slipstream-pg's statement cache does by
/// default. `tokio_postgres::Client::query_one(&str)` prepares an unnamed statement on every
/// call, a second round trip per query: compared with slipstream-pg's one, a pool's figures
/// would measure that, not the pool.
pub(crate) struct TpConn {
    client: tokio_postgres::Client,
    /// Statements prepared on this connection, by SQL text.
    statements: Mutex<HashMap<String, tokio_postgres::Statement>>,
}

impl TpConn {
    async fn connect(config: &tokio_postgres::Config) -> Result<TpConn, tokio_postgres::Error> {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(TpConn {
            client,
            statements: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The one row `sql` (without parameters) returns, through the connection's prepared
    /// statement for it (prepared on first use).
    pub(crate) async fn query_one(
        &self,
        sql: &str,
    ) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
        let cached = self.cache().get(sql).cloned();
        let statement = match cached {
            Some(s) => s,
            None => {
                let s = self.client.prepare(sql).await?;
                self.cache().insert(sql.to_string(), s.clone());
                s
            }
        };
        self.client.query_one(&statement, &[]).await
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, tokio_postgres::Statement>> {
        self.statements.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// deadpool's manager of tokio-postgres connections, recycling any that is not closed
/// (deadpool-postgres's `RecyclingMethod::Fast`).
pub(crate) struct DeadPg(pub tokio_postgres::Config);
impl deadpool::managed::Manager for DeadPg {
    type Type = TpConn;
    type Error = tokio_postgres::Error;
    async fn create(&self) -> Result<TpConn, tokio_postgres::Error> {
        TpConn::connect(&self.0).await
    }
    async fn recycle(
        &self,
        c: &mut TpConn,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<tokio_postgres::Error> {
        if c.is_closed() {
            return Err(deadpool::managed::RecycleError::message("closed"));
        }
        Ok(())
    }
}

/// bb8's manager of tokio-postgres connections: a closed one is broken (bb8-postgres, without
/// its test on check-out).
pub(crate) struct B8Pg(pub tokio_postgres::Config);
impl bb8::ManageConnection for B8Pg {
    type Connection = TpConn;
    type Error = tokio_postgres::Error;
    async fn connect(&self) -> Result<TpConn, tokio_postgres::Error> {
        TpConn::connect(&self.0).await
    }
    async fn is_valid(&self, _: &mut TpConn) -> Result<(), tokio_postgres::Error> {
        Ok(())
    }
    fn has_broken(&self, c: &mut TpConn) -> bool {
        c.is_closed()
    }
}
