//! Opening a connection: socket, TLS negotiation, startup, authentication.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;

use crate::auth::{self, AuthParams, PasswordFile};
use crate::cancel::{CancelTarget, CancelToken, TlsTarget};
use crate::config::Host;
use crate::connection::Connection;
use crate::socket::Socket;
use crate::{Client, Config, DbError, Error, LoadBalanceHosts, end_point, pgpass, routing, tls};

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
/// order; `connect_timeout` bounds each attempt. A configuration naming a connection service
/// ([`Config::service`], `service=`) must have had [`Config::apply_env`] (or
/// [`Config::apply_vars`]) read its file first, or this is an error saying so.
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
    config.check_service_read()?;
    let config = config.clone().with_defaults();
    let mut targets = config.targets()?;
    // libpq never uses TLS on a Unix socket, so a socket-only list needs no certificates.
    let tls = if targets.iter().any(|(h, _)| matches!(h, Host::Tcp(_))) {
        tls::client_config(&config)?
    } else {
        None
    };
    let random = config.get_load_balance_hosts() == LoadBalanceHosts::Random;
    if random {
        routing::shuffle(&mut targets);
    }
    let passfile = pgpass::path(config.passfile.as_deref());
    let mut last_error: Option<Error> = None;
    let mut earlier = Vec::new();
    let attrs = config.get_target_session_attrs();
    for &want in attrs.passes() {
        for (host, port) in &targets {
            let attempt = async {
                let mut client = HostAttempt {
                    config: &config,
                    host,
                    port: *port,
                    shuffle_addresses: random,
                    passfile: passfile.as_deref(),
                }
                .connect(tls.clone())
                .await?;
                match routing::mismatch(&mut client, want).await? {
                    None => Ok(client),
                    Some(why) => {
                        // libpq closes a server that does not fit and moves on.
                        let _ = client.close().await;
                        Err(Error::session_attrs(format!(
                            "{why} (target_session_attrs={})",
                            attrs.name()
                        )))
                    }
                }
            };
            let result = match config.get_connect_timeout() {
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
                Err(e) if is_final(&e) => return Err(e.context(describe(host, *port))),
                Err(e) => {
                    if let Some(previous) = last_error.replace(e.context(describe(host, *port))) {
                        earlier.push(previous.to_string());
                    }
                }
            }
        }
    }
    // The last host's error, with every earlier host's reason above it.
    Err(last_error
        .map(|e| e.after(&earlier))
        .unwrap_or_else(|| Error::config("no host to connect to")))
}

/// Whether a host's failure ends the whole attempt, as in libpq: the server answered and
/// refused (a wrong password, a database that does not exist, too many connections), or the
/// client refused the server's authentication request. Only "cannot connect now" (a server
/// starting up, shutting down or in recovery without hot standby) moves on to the next host,
/// as do failures to reach or talk to a server at all.
fn is_final(e: &Error) -> bool {
    match e.as_db_error() {
        Some(db) => db.code() != crate::SqlState::CANNOT_CONNECT_NOW,
        None => e.kind() == crate::ErrorKind::Authentication,
    }
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

/// One host of the list, as the connection tries it.
struct HostAttempt<'a> {
    config: &'a Config,
    host: &'a Host,
    port: u16,
    shuffle_addresses: bool,
    passfile: Option<&'a Path>,
}

/// A host's failure, and whether `sslmode=prefer` tries the host again without TLS.
struct Failure {
    error: Error,
    retry_without_tls: bool,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            error,
            retry_without_tls: false,
        }
    }
}

impl HostAttempt<'_> {
    /// One host's connection. Under `sslmode=prefer` a TLS connection that failed, in its
    /// handshake or because the server refused it (`hostnossl` only, say), is tried once more
    /// without TLS, as libpq does (`allow` is taken as `prefer`).
    async fn connect(&self, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Client, Error> {
        match self.once(tls).await {
            Err(Failure {
                retry_without_tls: true,
                error,
            }) => self.once(None).await.map_err(|f| {
                f.error
                    .context(format!("over TLS: {error}; then without TLS"))
            }),
            r => r.map_err(|f| f.error),
        }
    }

    /// A TCP connection to `name`, with keepalives and, when `tls` is given, the TLS
    /// negotiation of the connection's `sslmode`.
    async fn tcp_socket(
        &self,
        name: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Opened, Failure> {
        let (stream, addr) = tcp_connect(name, self.port, self.shuffle_addresses).await?;
        set_keepalives(&stream, self.config)?;
        let Some(tls) = tls else {
            return Ok((Socket::Tcp(stream), CancelTarget::Tcp(addr), None));
        };
        let mode = self.config.get_ssl_mode();
        // Only verify-full checks the name; the others need some name for rustls, and the
        // address reached serves (no SNI is sent for an address), so a host written `127.1`
        // connects as it does with libpq.
        let server_name = match tls::server_name(name) {
            Err(_) if mode != crate::SslMode::VerifyFull => {
                rustls::pki_types::ServerName::IpAddress(addr.ip().into())
            }
            r => r?,
        };
        let tls_target = TlsTarget {
            config: tls,
            server_name,
        };
        // Under prefer, a failure here is the handshake's (a refused TLS is `N`).
        let socket = negotiate_tls(stream, &tls_target, mode)
            .await
            .map_err(|error| Failure {
                retry_without_tls: mode == crate::SslMode::Prefer,
                error,
            })?;
        let used = socket.is_tls().then_some(tls_target);
        Ok((socket, CancelTarget::Tcp(addr), used))
    }

    async fn once(&self, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Client, Failure> {
        let HostAttempt {
            config,
            host,
            port,
            passfile,
            ..
        } = *self;
        let (socket, target, tls_target) = match host {
            Host::Unix(dir) => unix_socket(dir, port).await?,
            Host::Tcp(name) => self.tcp_socket(name, tls).await?,
        };
        // Computed before the socket moves into the connection; used only if SCRAM-SHA-256-PLUS is.
        let end_point = match &socket {
            Socket::Tls(tls) => Some(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .ok_or_else(|| "the server presented no certificate".to_string())
                    .and_then(|cert| end_point::tls_server_end_point(cert)),
            ),
            _ => None,
        };
        let prefer_tls = socket.is_tls() && config.get_ssl_mode() == crate::SslMode::Prefer;
        let mut conn = Connection::new(socket);
        let (process_id, secret_key) = startup(&mut conn, config, host, port, passfile, end_point)
            .await
            .map_err(|error| Failure {
                // Retried without TLS: the server's refusal of the TLS session itself (pg_hba has
                // no `hostssl` line for it: SQLSTATE 28000 while authenticating), never one that
                // comes after credentials were sent or accepted. A wrong password, a database
                // that does not exist or a role's connection limit is the same without TLS, and
                // the retry would send the password again, in clear (libpq does; we do not).
                retry_without_tls: prefer_tls
                    && error.kind() == crate::ErrorKind::Authentication
                    && error.code() == Some(crate::SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
                error,
            })?;
        conn.startup_done();
        let cancel = CancelToken {
            target,
            tls: tls_target,
            process_id,
            secret_key,
            connect_timeout: config.get_connect_timeout(),
        };
        Ok(Client::new(
            conn,
            NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
            cancel,
            config,
        ))
    }
}

/// Connects to the first of `host`'s addresses that answers; with `shuffle`
/// (`load_balance_hosts=random`) in a random order, as libpq 16 does.
pub(crate) async fn tcp_connect(
    host: &str,
    port: u16,
    shuffle: bool,
) -> Result<(TcpStream, SocketAddr), Error> {
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Error::io(&format!("could not resolve host name `{host}`"), e))?
        .collect();
    if shuffle {
        routing::shuffle(&mut addrs);
    }
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
    let e =
        last.unwrap_or_else(|| std::io::Error::other(format!("`{host}` resolved to no address")));
    let hint = connect_hint(
        &e,
        "is the server running on that host and accepting TCP/IP connections?",
    );
    Err(Error::io("could not connect", e).hint(hint))
}

/// What to check after a failed connect: `server` (is it running?), unless the socket could
/// not be made at all for want of descriptors, which is this process's limit or the
/// system's: the server was never asked (libpq: "could not create socket", and no hint).
fn connect_hint(e: &std::io::Error, server: &'static str) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EMFILE) => {
            "this process has as many files open as it may: raise its open-file limit (ulimit -n) or open fewer connections"
        }
        Some(libc::ENFILE) => {
            "the system has as many files open as it may (fs.file-max): close files, or raise the limit; the process's own is ulimit -n"
        }
        _ => server,
    }
}

/// Applies libpq's keepalive parameters: on by default, the operating system's timings unless
/// the configuration sets them.
fn set_keepalives(stream: &TcpStream, config: &Config) -> Result<(), Error> {
    let socket = socket2::SockRef::from(stream);
    // The kernel refuses values out of its range with a bare EINVAL: name what was given.
    let failed = |given: &str| {
        let what = format!("could not set {given}");
        move |e| {
            Error::io(&what, e).hint(
                "Linux takes keepalives_idle and keepalives_interval of 1-32767 s, \
                 keepalives_count of 1-127 and tcp_user_timeout of 0-2147483647 ms",
            )
        }
    };
    if config.keepalives.unwrap_or(true) {
        let mut ka = socket2::TcpKeepalive::new();
        let mut given = Vec::new();
        if let Some(idle) = config.keepalives_idle {
            ka = ka.with_time(idle);
            given.push(format!("keepalives_idle={}", idle.as_secs()));
        }
        if let Some(interval) = config.keepalives_interval {
            ka = ka.with_interval(interval);
            given.push(format!("keepalives_interval={}", interval.as_secs()));
        }
        if let Some(count) = config.keepalives_count {
            ka = ka.with_retries(count);
            given.push(format!("keepalives_count={count}"));
        }
        let given = match given.is_empty() {
            true => "TCP keepalives".to_string(),
            false => given.join(" "),
        };
        socket.set_tcp_keepalive(&ka).map_err(failed(&given))?;
    }
    if let Some(timeout) = config.tcp_user_timeout {
        let given = format!("tcp_user_timeout={}", timeout.as_millis());
        socket
            .set_tcp_user_timeout(Some(timeout))
            .map_err(failed(&given))?;
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
                    let what = if tls::is_revocation(&e) {
                        "TLS handshake failed: the server's certificate is revoked, or has no \
                         current CRL, in ~/.postgresql/root.crl (libpq's default sslcrl, checked \
                         whenever a root certificate is)"
                    } else {
                        "TLS handshake failed (for certificate errors check sslrootcert, the host name, and sslmode)"
                    };
                    Error::tls(what, Some(Box::new(e)))
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
async fn startup(
    conn: &mut Connection,
    config: &Config,
    host: &Host,
    port: u16,
    passfile: Option<&std::path::Path>,
    end_point: Option<Result<Vec<u8>, String>>,
) -> Result<(i32, i32), Error> {
    let user = config.user.as_deref().ok_or_else(|| {
        Error::config("no user name: set user=... or PGUSER (this OS user has no name)")
    })?;
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
    // After `options`, as libpq: the server applies them in order, so these win.
    for (param, value) in &config.env_settings {
        params.push((param, value));
    }
    frontend::startup_message(params.iter().copied(), &mut conn.wbuf)
        .map_err(|e| Error::config(format!("invalid startup parameter: {e}")))?;
    conn.flush().await?;

    // libpq reads the password file per host, and only when no password was given; here only
    // once the server asks for one.
    let params = AuthParams {
        user,
        password: config.password.as_deref(),
        passfile: passfile.map(|path| PasswordFile {
            path,
            host,
            port,
            dbname: config.dbname.as_deref().unwrap_or(user),
        }),
        require_auth: config.require_auth.as_ref(),
        channel_binding: config.get_channel_binding(),
        end_point,
    };
    auth::authenticate(conn, &params).await?;

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

/// An open socket, where a cancel request for it goes, and the TLS it uses, if any.
type Opened = (Socket, CancelTarget, Option<TlsTarget>);

/// The address of the server's Unix socket for `port` in `dir`, as libpq forms it
/// (`UNIXSOCK_PATH`): for a `dir` of `@name`, the abstract name `name/.s.PGSQL.<port>`, which
/// tokio (on Linux) reads from a path starting with a NUL byte.
fn unix_socket_path(dir: &Path, port: u16) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    let path = dir.join(format!(".s.PGSQL.{port}"));
    match path.as_os_str().as_bytes().split_first() {
        Some((b'@', name)) => {
            let mut nul_name = vec![0u8];
            nul_name.extend_from_slice(name);
            PathBuf::from(std::ffi::OsString::from_vec(nul_name))
        }
        _ => path,
    }
}

/// A connection to the server's Unix socket for `port` in `dir`.
async fn unix_socket(dir: &Path, port: u16) -> Result<Opened, Error> {
    use std::os::unix::ffi::OsStrExt as _;
    let is_abstract = dir.as_os_str().as_bytes().first() == Some(&b'@');
    if is_abstract && cfg!(not(any(target_os = "linux", target_os = "android"))) {
        return Err(Error::config(format!(
            "host {} names an abstract Unix-domain socket, which exists only on Linux: give \
             the socket's directory or a host name",
            dir.display()
        )));
    }
    let path = unix_socket_path(dir, port);
    let s = UnixStream::connect(&path).await.map_err(|e| {
        let hint = connect_hint(
            &e,
            "is the server running locally and accepting connections on that socket?",
        );
        Error::io("could not connect", e).hint(hint)
    })?;
    Ok((Socket::Unix(s), CancelTarget::Unix(path), None))
}
