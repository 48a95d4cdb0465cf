//! Query cancellation: PostgreSQL's `CancelRequest`, sent on a new connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::connect::negotiate_tls;
use crate::socket::Socket;
use crate::{Error, SslMode};

/// How long a cancel request may take when the connection had no `connect_timeout`.
const DEFAULT_CANCEL_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the server to cancel whatever our connection's backend is running.
///
/// A token is cheap to clone and can be used from any task while the connection is busy. The
/// cancelled statement fails with SQLSTATE 57014 ([`crate::SqlState::QUERY_CANCELED`]); if the
/// backend is idle by the time the request arrives, nothing happens (the protocol cannot say
/// which statement to cancel).
///
/// ```no_run
/// # async fn f(mut client: slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let token = client.cancel_token();
/// tokio::spawn(async move {
///     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
///     let _ = token.cancel().await;
/// });
/// let err = client.simple_query("SELECT pg_sleep(30)").await.unwrap_err();
/// assert_eq!(err.code(), Some(slipstream_pg::SqlState::QUERY_CANCELED));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CancelToken {
    pub(crate) target: CancelTarget,
    pub(crate) tls: Option<TlsTarget>,
    pub(crate) process_id: i32,
    pub(crate) secret_key: i32,
    pub(crate) connect_timeout: Option<Duration>,
}

#[derive(Clone)]
pub(crate) enum CancelTarget {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[derive(Clone)]
pub(crate) struct TlsTarget {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) server_name: ServerName<'static>,
}

impl CancelToken {
    /// The server process id of the connection this token cancels.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) {
    /// assert_eq!(client.cancel_token().process_id(), client.backend_pid());
    /// # }
    /// ```
    pub fn process_id(&self) -> i32 {
        self.process_id
    }

    /// Sends the cancel request and waits until the server has read it (it closes the
    /// connection once it has).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let token = client.cancel_token();
    /// let (slow, cancelled) = tokio::join!(client.batch_execute("SELECT pg_sleep(60)"), async {
    ///     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    ///     token.cancel().await
    /// });
    /// cancelled?;
    /// assert_eq!(slow.unwrap_err().code(), Some(slipstream_pg::SqlState::QUERY_CANCELED));
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self) -> Result<(), Error> {
        let limit = self.connect_timeout.unwrap_or(DEFAULT_CANCEL_TIMEOUT);
        tokio::time::timeout(limit, self.send())
            .await
            .map_err(|_| Error::timeout("the cancel request did not complete in time"))?
    }

    async fn send(&self) -> Result<(), Error> {
        let mut socket = match &self.target {
            CancelTarget::Unix(path) => Socket::Unix(
                UnixStream::connect(path)
                    .await
                    .map_err(|e| Error::io("could not connect to send a cancel request", e))?,
            ),
            CancelTarget::Tcp(addr) => {
                let stream = TcpStream::connect(addr)
                    .await
                    .map_err(|e| Error::io("could not connect to send a cancel request", e))?;
                match &self.tls {
                    Some(tls) => negotiate_tls(stream, tls, SslMode::Require).await?,
                    None => Socket::Tcp(stream),
                }
            }
        };
        let mut buf = BytesMut::new();
        frontend::cancel_request(self.process_id, self.secret_key, &mut buf);
        socket
            .write_all(&buf)
            .await
            .map_err(|e| Error::io("could not send the cancel request", e))?;
        socket
            .flush()
            .await
            .map_err(|e| Error::io("could not send the cancel request", e))?;
        // The server answers nothing and closes; reading to EOF tells us it got the request.
        let mut sink = [0u8; 64];
        loop {
            match socket.read(&mut sink).await {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("process_id", &self.process_id)
            .finish_non_exhaustive()
    }
}
