//! deadpool and bb8 managing tokio-postgres connections, as the experiments with real
//! connections run them: each peer pool with its usual client.

/// deadpool's manager of tokio-postgres connections, recycling any that is not closed
/// (deadpool-postgres's `RecyclingMethod::Fast`).
pub(crate) struct DeadPg(pub tokio_postgres::Config);
impl deadpool::managed::Manager for DeadPg {
    type Type = tokio_postgres::Client;
    type Error = tokio_postgres::Error;
    async fn create(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, connection) = self.0.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }
    async fn recycle(
        &self,
        c: &mut tokio_postgres::Client,
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
    type Connection = tokio_postgres::Client;
    type Error = tokio_postgres::Error;
    async fn connect(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, connection) = self.0.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }
    async fn is_valid(&self, _: &mut tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
        Ok(())
    }
    fn has_broken(&self, c: &mut tokio_postgres::Client) -> bool {
        c.is_closed()
    }
}
