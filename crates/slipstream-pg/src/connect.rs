//! Opening a connection: socket, TLS negotiation, startup, authentication.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;

use crate::cancel::{CancelTarget, CancelToken, TlsTarget};
use crate::config::Host;
use crate::connection::Connection;
use crate::socket::Socket;
use crate::{Client, Config, DbError, Error, tls};

/// Connects with a connection string (URL or `key=value`), filling what it leaves out from the
/// `PG*` environment variables, as libpq does.
///
/// ```no_run
/// # async fn f() -> Result<(), slipstream_pg::Error> {
/// let mut client = slipstream_pg::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
/// let row = client.query_one("SELECT $1::int + 1", &[&41i32]).await?;
/// assert_eq!(row.get::<_, i32>(0)?, 42);
/// # Ok(()) }
/// ```
pub async fn connect(conninfo: &str) -> Result<Client, Error> {
    let config = conninfo.parse::<Config>()?.apply_env()?;
    connect_config(&config).await
}

/// Connects with a [`Config`] as it is (no environment variables applied). Hosts are tried in
/// order; `connect_timeout` bounds each attempt.
///
/// ```no_run
/// # async fn f() -> Result<(), slipstream_pg::Error> {
/// use std::time::Duration;
/// let config = slipstream_pg::Config::new()
///     .host("/var/run/postgresql")
///     .user("postgres")
///     .connect_timeout(Duration::from_secs(5));
/// let client = slipstream_pg::connect_config(&config).await?;
/// # Ok(()) }
/// ```
pub async fn connect_config(config: &Config) -> Result<Client, Error> {
    let config = config.clone().with_defaults();
    let tls = tls::client_config(&config)?;
    let mut last_error = None;
    for (host, port) in config.targets()? {
        let attempt = connect_host(&config, tls.clone(), &host, port);
        let result = match config.connect_timeout {
            Some(limit) => match tokio::time::timeout(limit, attempt).await {
                Ok(r) => r,
                Err(_) => Err(Error::timeout(format!(
                    "connect_timeout of {} s passed before the server completed the connection",
                    limit.as_secs()
                ))),
            },
            None => attempt.await,
        };
        match result {
            Ok(client) => return Ok(client),
            // A wrong password is final: trying the next host with it helps no one.
            Err(e) if e.kind() == crate::ErrorKind::Authentication => {
                return Err(e.context(describe(&host, port)));
            }
            Err(e) => last_error = Some(e.context(describe(&host, port))),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::config("no host to connect to")))
}

fn describe(host: &Host, port: u16) -> String {
    match host {
        Host::Tcp(h) => format!("connection to server at {h}:{port} failed"),
        Host::Unix(dir) => format!(
            "connection to server on socket {}/.s.PGSQL.{port} failed",
            dir.display()
        ),
    }
}

static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);

async fn connect_host(
    config: &Config,
    tls: Option<Arc<rustls::ClientConfig>>,
    host: &Host,
    port: u16,
) -> Result<Client, Error> {
    let (socket, target, tls_target) = match host {
        Host::Unix(dir) => {
            let path: PathBuf = dir.join(format!(".s.PGSQL.{port}"));
            let s = UnixStream::connect(&path).await.map_err(|e| {
                Error::io("could not connect", e)
                    .hint("is the server running locally and accepting connections on that socket?")
            })?;
            (Socket::Unix(s), CancelTarget::Unix(path), None)
        }
        Host::Tcp(name) => {
            let (stream, addr) = tcp_connect(name, port).await?;
            set_keepalives(&stream, config)?;
            match tls {
                Some(tls) => {
                    let server_name = tls::server_name(name)?;
                    let tls_target = TlsTarget {
                        config: tls,
                        server_name,
                    };
                    let socket = negotiate_tls(stream, &tls_target, config.get_ssl_mode()).await?;
                    let used = socket.is_tls().then_some(tls_target);
                    (socket, CancelTarget::Tcp(addr), used)
                }
                None => (Socket::Tcp(stream), CancelTarget::Tcp(addr), None),
            }
        }
    };
    let mut conn = Connection::new(socket);
    let (process_id, secret_key) = startup(&mut conn, config).await?;
    conn.startup_done();
    let cancel = CancelToken {
        target,
        tls: tls_target,
        process_id,
        secret_key,
        connect_timeout: config.connect_timeout,
    };
    Ok(Client::new(
        conn,
        NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
        cancel,
        config,
    ))
}

pub(crate) async fn tcp_connect(host: &str, port: u16) -> Result<(TcpStream, SocketAddr), Error> {
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Error::io(&format!("could not resolve host name `{host}`"), e))?;
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                // Requests are whole messages written at once; Nagle would only add latency.
                s.set_nodelay(true)
                    .map_err(|e| Error::io("could not set TCP_NODELAY", e))?;
                return Ok((s, addr));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::io(
        "could not connect",
        last.unwrap_or_else(|| std::io::Error::other(format!("`{host}` resolved to no address"))),
    )
    .hint("is the server running on that host and accepting TCP/IP connections?"))
}

/// Applies libpq's keepalive parameters: on by default, the operating system's timings unless
/// the configuration sets them.
fn set_keepalives(stream: &TcpStream, config: &Config) -> Result<(), Error> {
    let socket = socket2::SockRef::from(stream);
    let failed = |e| Error::io("could not set TCP keepalive options", e);
    if config.keepalives.unwrap_or(true) {
        let mut ka = socket2::TcpKeepalive::new();
        if let Some(idle) = config.keepalives_idle {
            ka = ka.with_time(idle);
        }
        if let Some(interval) = config.keepalives_interval {
            ka = ka.with_interval(interval);
        }
        if let Some(count) = config.keepalives_count {
            ka = ka.with_retries(count);
        }
        socket.set_tcp_keepalive(&ka).map_err(failed)?;
    }
    if let Some(timeout) = config.tcp_user_timeout {
        socket.set_tcp_user_timeout(Some(timeout)).map_err(failed)?;
    }
    Ok(())
}

/// Sends `SSLRequest` and, if the server agrees, performs the TLS handshake.
pub(crate) async fn negotiate_tls(
    mut stream: TcpStream,
    target: &TlsTarget,
    mode: crate::SslMode,
) -> Result<Socket, Error> {
    let mut buf = BytesMut::new();
    frontend::ssl_request(&mut buf);
    stream
        .write_all(&buf)
        .await
        .map_err(|e| Error::io("could not send SSL negotiation packet", e))?;
    // Read exactly one byte: anything the server sent after it, before the handshake, would be
    // unauthenticated plaintext (CVE-2021-23222).
    let answer = stream
        .read_u8()
        .await
        .map_err(|e| Error::io("server closed the connection during SSL negotiation", e))?;
    match answer {
        b'S' => {
            let tls = TlsConnector::from(target.config.clone())
                .connect(target.server_name.clone(), stream)
                .await
                .map_err(|e| {
                    Error::tls(
                        "TLS handshake failed (for certificate errors check sslrootcert, the host name, and sslmode)",
                        Some(Box::new(e)),
                    )
                })?;
            Ok(Socket::Tls(Box::new(tls)))
        }
        b'N' if mode == crate::SslMode::Prefer => Ok(Socket::Tcp(stream)),
        b'N' => Err(Error::tls(
            "server does not support TLS, but sslmode requires it: enable ssl on the server or use sslmode=prefer",
            None,
        )),
        other => Err(Error::protocol(format!(
            "server answered the SSL request with byte {other:#04x} instead of 'S' or 'N'; is this a PostgreSQL server?"
        ))),
    }
}

/// Sends the startup packet, authenticates, and reads up to the first `ReadyForQuery`.
/// Returns the backend's process id and cancel key.
async fn startup(conn: &mut Connection, config: &Config) -> Result<(i32, i32), Error> {
    let user = config
        .user
        .as_deref()
        .ok_or_else(|| Error::config("no user name: set user=..., PGUSER or USER"))?;
    let mut params: Vec<(&str, &str)> = vec![("user", user), ("client_encoding", "UTF8")];
    if let Some(db) = &config.dbname {
        params.push(("database", db));
    }
    if let Some(app) = &config.application_name {
        params.push(("application_name", app));
    }
    if let Some(options) = &config.options {
        params.push(("options", options));
    }
    frontend::startup_message(params.iter().copied(), &mut conn.wbuf)
        .map_err(|e| Error::config(format!("invalid startup parameter: {e}")))?;
    conn.flush().await?;
    authenticate(conn, config, user).await?;

    let mut key = None;
    loop {
        match conn.next_message().await? {
            Message::BackendKeyData(body) => key = Some((body.process_id(), body.secret_key())),
            Message::ReadyForQuery(_) => break,
            Message::ErrorResponse(body) => {
                return Err(Error::db(DbError::parse(&mut body.fields())?));
            }
            m => return Err(unexpected(&m, "after authentication")),
        }
    }
    // A server without BackendKeyData (some poolers) just cannot be cancelled.
    Ok(key.unwrap_or((0, 0)))
}

async fn authenticate(conn: &mut Connection, config: &Config, user: &str) -> Result<(), Error> {
    let password = || {
        config.password.as_deref().ok_or_else(|| {
            Error::auth("the server asked for a password but none was given: set password=... or PGPASSWORD")
        })
    };
    loop {
        match conn.next_message().await.map_err(auth_failure)? {
            Message::AuthenticationOk => return Ok(()),
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password()?, &mut conn.wbuf)
                    .map_err(|e| Error::auth(e.to_string()))?;
                conn.flush().await?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(user.as_bytes(), password()?, body.salt());
                frontend::password_message(hash.as_bytes(), &mut conn.wbuf)
                    .map_err(|e| Error::auth(e.to_string()))?;
                conn.flush().await?;
            }
            Message::AuthenticationSasl(body) => {
                let mut mechanisms = body.mechanisms();
                let mut has_scram = false;
                while let Some(m) = mechanisms
                    .next()
                    .map_err(|e| Error::protocol(e.to_string()))?
                {
                    has_scram |= m == sasl::SCRAM_SHA_256;
                }
                if !has_scram {
                    return Err(Error::auth(
                        "server offered no SASL mechanism we support (we support SCRAM-SHA-256)",
                    ));
                }
                scram(conn, password()?).await?;
            }
            Message::ErrorResponse(body) => {
                return Err(Error::auth_db(DbError::parse(&mut body.fields())?));
            }
            Message::AuthenticationKerberosV5
            | Message::AuthenticationScmCredential
            | Message::AuthenticationGss
            | Message::AuthenticationSspi => {
                return Err(Error::auth(
                    "server asked for GSSAPI/SSPI/Kerberos authentication, which slipstream does not support; \
                     use password, md5 or scram-sha-256 in pg_hba.conf",
                ));
            }
            m => return Err(unexpected(&m, "during authentication")),
        }
    }
}

/// A FATAL `ErrorResponse` during authentication (wrong password, no pg_hba entry) is an
/// authentication failure, not a generic server error.
fn auth_failure(e: Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::auth_db(db.clone()),
        None => e,
    }
}

async fn scram(conn: &mut Connection, password: &[u8]) -> Result<(), Error> {
    // Channel binding (SCRAM-SHA-256-PLUS) is not offered; the exchange still proves both sides
    // know the password and, over TLS, runs inside the encrypted channel.
    let mut scram = sasl::ScramSha256::new(password, sasl::ChannelBinding::unsupported());
    frontend::sasl_initial_response(sasl::SCRAM_SHA_256, scram.message(), &mut conn.wbuf)
        .map_err(|e| Error::auth(e.to_string()))?;
    conn.flush().await?;
    match conn.next_message().await.map_err(auth_failure)? {
        Message::AuthenticationSaslContinue(body) => {
            scram
                .update(body.data())
                .map_err(|e| Error::auth(format!("invalid SCRAM server message: {e}")))?;
        }
        Message::ErrorResponse(body) => {
            return Err(Error::auth_db(DbError::parse(&mut body.fields())?));
        }
        m => return Err(unexpected(&m, "during SCRAM authentication")),
    }
    frontend::sasl_response(scram.message(), &mut conn.wbuf)
        .map_err(|e| Error::auth(e.to_string()))?;
    conn.flush().await?;
    match conn.next_message().await.map_err(auth_failure)? {
        Message::AuthenticationSaslFinal(body) => scram.finish(body.data()).map_err(|e| {
            Error::auth(format!(
                "the server failed to prove it knows the password: {e}"
            ))
        }),
        Message::ErrorResponse(body) => Err(Error::auth_db(DbError::parse(&mut body.fields())?)),
        m => Err(unexpected(&m, "during SCRAM authentication")),
    }
}

/// A message that has no place where it arrived. Every caller closes the connection: the
/// client and the server no longer agree on where they are.
pub(crate) fn unexpected(message: &Message, when: &str) -> Error {
    Error::protocol(format!(
        "server sent an unexpected {} message {when} (protocol violation); the connection is \
         closed",
        message_name(message)
    ))
}

pub(crate) fn message_name(message: &Message) -> &'static str {
    match message {
        Message::AuthenticationOk
        | Message::AuthenticationCleartextPassword
        | Message::AuthenticationMd5Password(_)
        | Message::AuthenticationSasl(_)
        | Message::AuthenticationSaslContinue(_)
        | Message::AuthenticationSaslFinal(_) => "Authentication",
        Message::BackendKeyData(_) => "BackendKeyData",
        Message::BindComplete => "BindComplete",
        Message::CloseComplete => "CloseComplete",
        Message::CommandComplete(_) => "CommandComplete",
        Message::CopyData(_) => "CopyData",
        Message::CopyDone => "CopyDone",
        Message::CopyInResponse(_) => "CopyInResponse",
        Message::CopyOutResponse(_) => "CopyOutResponse",
        Message::DataRow(_) => "DataRow",
        Message::EmptyQueryResponse => "EmptyQueryResponse",
        Message::ErrorResponse(_) => "ErrorResponse",
        Message::NoData => "NoData",
        Message::ParameterDescription(_) => "ParameterDescription",
        Message::ParseComplete => "ParseComplete",
        Message::PortalSuspended => "PortalSuspended",
        Message::ReadyForQuery(_) => "ReadyForQuery",
        Message::RowDescription(_) => "RowDescription",
        _ => "other",
    }
}
