//! Connection configuration: the parameters, their `PG*` environment variables and libpq's
//! defaults. Parsing connection strings lives in `conninfo`.
//!
//! Precedence follows libpq: a parameter in the string wins over its environment variable, which
//! wins over the built-in default.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::auth::RequireAuth;
use crate::{ChannelBinding, Error, FetchSize, LoadBalanceHosts, TargetSessionAttrs};

/// libpq's `sslmode`: whether to use TLS and how much of the server's certificate to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
///
/// ```
/// use slipstream_pg::{Config, SslMode};
/// let config: Config = "host=db.example.com sslmode=verify-full sslrootcert=/etc/ssl/ca.pem".parse()?;
/// assert_eq!(config.get_ssl_mode(), SslMode::VerifyFull);
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
pub enum SslMode {
    /// Never use TLS.
    Disable,
    /// Use TLS if the server offers it, without checking its certificate (libpq's default).
    #[default]
    Prefer,
    /// Require TLS; check the certificate chain only if a root certificate is configured.
    Require,
    /// Require TLS and a certificate signed by a trusted CA.
    VerifyCa,
    /// Require TLS, a trusted certificate, and that it names the host we connected to.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<SslMode, Error> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::config(format!(
                    "invalid sslmode `{other}`: use disable, prefer, require, verify-ca or verify-full"
                )));
            }
        })
    }
}

/// One server address.
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// ```
/// use slipstream_pg::{Config, Host};
/// let config: Config = "host=/var/run/postgresql,db.example.com".parse()?;
/// assert_eq!(config.get_hosts()[0], Host::Unix("/var/run/postgresql".into()));
/// assert_eq!(config.get_hosts()[1], Host::Tcp("db.example.com".into()));
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
pub enum Host {
    /// A host name or IP address reached over TCP.
    Tcp(String),
    /// A directory holding the server's Unix-domain socket (`.s.PGSQL.<port>`), or, starting
    /// with `@`, a name in Linux's abstract socket namespace (`unix_socket_directories =
    /// '@name'` on the server; libpq 14+ reads `host=@name` alike).
    Unix(PathBuf),
}

impl Host {
    /// libpq's default: the Unix socket directory if it exists, else `localhost`.
    pub(crate) fn default_for_machine() -> Host {
        let socket_dir = std::path::Path::new(DEFAULT_SOCKET_DIR);
        if socket_dir.is_dir() {
            Host::Unix(socket_dir.to_path_buf())
        } else {
            Host::Tcp("localhost".into())
        }
    }

    pub(crate) fn parse(s: &str) -> Host {
        // libpq's is_unixsock_path: an absolute path, or `@` for the abstract namespace.
        if s.starts_with('/') || s.starts_with('@') {
            Host::Unix(PathBuf::from(s))
        } else {
            Host::Tcp(s.to_string())
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Tcp(h) => f.write_str(h),
            Host::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// How to reach and log in to a PostgreSQL server.
///
/// Parse a connection string with [`str::parse`] (both libpq forms), or build one field by field.
/// [`crate::connect`] also applies the `PG*` environment variables for whatever the string leaves
/// out, as libpq does.
///
/// ```
/// use slipstream_pg::{Config, SslMode};
/// let url: Config = "postgres://app:secret@db.example.com:6432/orders?sslmode=require".parse()?;
/// let kv: Config = "host=db.example.com port=6432 user=app password=secret dbname=orders sslmode=require".parse()?;
/// assert_eq!(url.get_dbname(), kv.get_dbname());
/// assert_eq!(url.get_ssl_mode(), SslMode::Require);
///
/// let built = Config::new().host("/var/run/postgresql").user("postgres").dbname("postgres");
/// assert_eq!(built.get_user(), Some("postgres"));
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Config {
    pub(crate) hosts: Vec<Host>,
    pub(crate) ports: Vec<u16>,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Vec<u8>>,
    pub(crate) dbname: Option<String>,
    pub(crate) application_name: Option<String>,
    pub(crate) fallback_application_name: Option<String>,
    pub(crate) options: Option<String>,
    /// `Some(None)`: given as 0 (wait forever), which keeps `PGCONNECT_TIMEOUT` out.
    pub(crate) connect_timeout: Option<Option<Duration>>,
    pub(crate) ssl_mode: Option<SslMode>,
    pub(crate) ssl_root_cert: Option<PathBuf>,
    pub(crate) ssl_cert: Option<PathBuf>,
    pub(crate) ssl_key: Option<PathBuf>,
    pub(crate) ssl_sni: Option<bool>,
    pub(crate) keepalives: Option<bool>,
    pub(crate) keepalives_idle: Option<Duration>,
    pub(crate) keepalives_interval: Option<Duration>,
    pub(crate) keepalives_count: Option<u32>,
    pub(crate) tcp_user_timeout: Option<Duration>,
    pub(crate) statement_cache_size: Option<usize>,
    pub(crate) fetch_size: Option<FetchSize>,
    pub(crate) max_result_buffer: Option<usize>,
    pub(crate) target_session_attrs: Option<TargetSessionAttrs>,
    pub(crate) load_balance_hosts: Option<LoadBalanceHosts>,
    pub(crate) passfile: Option<PathBuf>,
    pub(crate) require_auth: Option<RequireAuth>,
    pub(crate) channel_binding: Option<ChannelBinding>,
    /// Session settings libpq sends at startup from `PGDATESTYLE`, `PGTZ` and `PGGEQO`
    /// (`ENV_SETTINGS`), as (startup parameter, value); only `apply_env` fills it.
    pub(crate) env_settings: Vec<(&'static str, String)>,
    /// Whether `gssencmode` was given (`disable` or `prefer`: there is no GSSAPI encryption
    /// to apply, `require` is refused), so that a `PGGSSENCMODE` does not override it.
    pub(crate) gssencmode_given: bool,
    /// The parameters given empty whose field that leaves unset (`passfile=''`: the default
    /// file): given all the same, so no variable or service fills them.
    pub(crate) given_empty: Vec<&'static str>,
    /// The connection service (`service=`) whose section of a service file fills what the
    /// string leaves unset; see `service_file.rs`.
    pub(crate) service: Option<String>,
    /// True once `apply_vars` has read `service`'s section; false again when another service
    /// is named. `connect_config` refuses a service never read: connecting without its
    /// parameters would silently connect elsewhere.
    pub(crate) service_read: bool,
}

/// How many statements a connection caches unless told otherwise (as pgjdbc's
/// `preparedStatementCacheQueries`).
pub const DEFAULT_STATEMENT_CACHE_SIZE: usize = 256;

/// The port PostgreSQL listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 5432;

impl Config {
    /// An empty configuration: every parameter at its default, no environment applied.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new();
    /// assert!(config.get_hosts().is_empty() && config.get_user().is_none());
    /// ```
    pub fn new() -> Config {
        Config::default()
    }

    /// Adds a host: a name or address for TCP, an absolute directory path for a Unix socket, or
    /// `@name` for a Unix socket in Linux's abstract namespace. Several hosts are tried in
    /// order.
    ///
    /// ```
    /// use slipstream_pg::{Config, Host};
    /// let config = Config::new().host("db1.internal").host("/var/run/postgresql").host("@pg");
    /// assert_eq!(config.get_hosts()[0], Host::Tcp("db1.internal".into()));
    /// assert_eq!(config.get_hosts()[1], Host::Unix("/var/run/postgresql".into()));
    /// assert_eq!(config.get_hosts()[2], Host::Unix("@pg".into()));
    /// ```
    pub fn host(mut self, host: &str) -> Config {
        self.hosts.push(Host::parse(host));
        self
    }
    /// Adds a port; one port applies to every host, otherwise one per host.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().host("db1").host("db2").port(5433);
    /// assert_eq!(config.get_ports(), &[5433]); // for both hosts
    /// ```
    pub fn port(mut self, port: u16) -> Config {
        self.ports.push(port);
        self
    }
    /// The user name to log in as.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().user("app");
    /// assert_eq!(config.get_user(), Some("app"));
    /// ```
    pub fn user(mut self, user: &str) -> Config {
        self.user = Some(user.to_string());
        self
    }
    /// The password, used if the server asks for one.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().user("app").password("s3cret");
    /// assert!(config.has_password());
    /// assert!(!format!("{config:?}").contains("s3cret")); // never shown
    /// ```
    pub fn password(mut self, password: impl AsRef<[u8]>) -> Config {
        self.password = Some(password.as_ref().to_vec());
        self
    }
    /// The database name (default: the user name).
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().user("app").dbname("orders");
    /// assert_eq!(config.get_dbname(), Some("orders"));
    /// ```
    pub fn dbname(mut self, dbname: &str) -> Config {
        self.dbname = Some(dbname.to_string());
        self
    }
    /// Shown in `pg_stat_activity.application_name`.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().application_name("billing-worker");
    /// assert_eq!(config.get_application_name(), Some("billing-worker"));
    /// ```
    pub fn application_name(mut self, name: &str) -> Config {
        self.application_name = Some(name.to_string());
        self
    }
    /// Command-line options for the backend, e.g. `-c statement_timeout=5s`.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// let built = Config::new().options("-c statement_timeout=5s");
    /// let parsed: Config = "options='-c statement_timeout=5s'".parse()?;
    /// assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn options(mut self, options: &str) -> Config {
        self.options = Some(options.to_string());
        self
    }
    /// How long one connection attempt (TCP/socket, TLS, authentication) may take per host.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = slipstream_pg::Config::new().connect_timeout(Duration::from_secs(3));
    /// assert_eq!(config.get_connect_timeout(), Some(Duration::from_secs(3)));
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Config {
        self.connect_timeout = Some(Some(timeout));
        self
    }
    /// Whether and how to use TLS.
    ///
    /// ```
    /// use slipstream_pg::{Config, SslMode};
    /// let config = Config::new().host("db.example.com").ssl_mode(SslMode::VerifyFull);
    /// assert_eq!(config.get_ssl_mode(), SslMode::VerifyFull);
    /// ```
    pub fn ssl_mode(mut self, mode: SslMode) -> Config {
        self.ssl_mode = Some(mode);
        self
    }
    /// A PEM file of CA certificates that the server's certificate must chain to.
    ///
    /// ```
    /// use slipstream_pg::{Config, SslMode};
    /// let config = Config::new().ssl_mode(SslMode::VerifyCa).ssl_root_cert("/etc/ssl/pg-ca.pem");
    /// let parsed: Config = "sslmode=verify-ca sslrootcert=/etc/ssl/pg-ca.pem".parse()?;
    /// assert_eq!(format!("{config:?}"), format!("{parsed:?}"));
    /// // `system`: the operating system's trusted CAs, and verify-full unless told otherwise.
    /// assert_eq!(Config::new().ssl_root_cert("system").get_ssl_mode(), SslMode::VerifyFull);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn ssl_root_cert(mut self, path: impl Into<PathBuf>) -> Config {
        self.ssl_root_cert = Some(path.into());
        self
    }
    /// A PEM client certificate (and [`Config::ssl_key`]) for certificate authentication.
    ///
    /// ```
    /// use slipstream_pg::{Config, SslMode};
    /// let config = Config::new()
    ///     .ssl_mode(SslMode::Require)
    ///     .ssl_cert("/etc/app/client.crt")
    ///     .ssl_key("/etc/app/client.key");
    /// let parsed: Config =
    ///     "sslmode=require sslcert=/etc/app/client.crt sslkey=/etc/app/client.key".parse()?;
    /// assert_eq!(format!("{config:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn ssl_cert(mut self, path: impl Into<PathBuf>) -> Config {
        self.ssl_cert = Some(path.into());
        self
    }
    /// The PEM private key matching [`Config::ssl_cert`].
    ///
    /// ```
    /// let config = slipstream_pg::Config::new()
    ///     .ssl_cert("/etc/app/client.crt")
    ///     .ssl_key("/etc/app/client.key");
    /// assert!(format!("{config:?}").contains("client.key"));
    /// ```
    pub fn ssl_key(mut self, path: impl Into<PathBuf>) -> Config {
        self.ssl_key = Some(path.into());
        self
    }

    /// Whether TLS names the server in its handshake (Server Name Indication), as libpq's
    /// `sslsni`: on by default, and never for a host written as an address. A proxy that
    /// routes TLS connections by name needs it; turning it off keeps the host name out of
    /// the clear text.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// assert!(Config::new().get_ssl_sni());
    /// let parsed: Config = "sslsni=0".parse()?;
    /// assert!(!parsed.get_ssl_sni());
    /// assert_eq!(format!("{parsed:?}"), format!("{:?}", Config::new().ssl_sni(false)));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn ssl_sni(mut self, on: bool) -> Config {
        self.ssl_sni = Some(on);
        self
    }

    /// TCP keepalive probes on idle connections, so a peer that vanished is noticed (default on,
    /// with the operating system's timings unless set below).
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// let built = Config::new().keepalives(false);
    /// let parsed: Config = "keepalives=0".parse()?;
    /// assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn keepalives(mut self, on: bool) -> Config {
        self.keepalives = Some(on);
        self
    }
    /// Idle time before the first keepalive probe.
    ///
    /// ```
    /// use std::time::Duration;
    /// use slipstream_pg::Config;
    /// let built = Config::new().keepalives_idle(Duration::from_secs(30));
    /// let parsed: Config = "keepalives_idle=30".parse()?;
    /// assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn keepalives_idle(mut self, idle: Duration) -> Config {
        self.keepalives_idle = Some(idle);
        self
    }
    /// Time between unanswered keepalive probes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use slipstream_pg::Config;
    /// let built = Config::new().keepalives_interval(Duration::from_secs(5));
    /// let parsed: Config = "keepalives_interval=5".parse()?;
    /// assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn keepalives_interval(mut self, interval: Duration) -> Config {
        self.keepalives_interval = Some(interval);
        self
    }
    /// Unanswered probes before the connection is considered dead.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// let built = Config::new().keepalives_count(3);
    /// let parsed: Config = "keepalives_count=3".parse()?;
    /// assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn keepalives_count(mut self, count: u32) -> Config {
        self.keepalives_count = Some(count);
        self
    }
    /// How long sent data may stay unacknowledged before the connection is considered dead
    /// (Linux `TCP_USER_TIMEOUT`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use slipstream_pg::Config;
    /// let built = Config::new().tcp_user_timeout(Duration::from_secs(10));
    /// let parsed: Config = "tcp_user_timeout=10000".parse()?; // milliseconds, as libpq
    /// assert_eq!(format!("{built:?}"), format!("{parsed:?}"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn tcp_user_timeout(mut self, timeout: Duration) -> Config {
        self.tcp_user_timeout = Some(timeout);
        self
    }

    /// How many prepared statements each connection caches (`statement_cache_size`; 0 turns
    /// the cache off). See `docs/statement-cache.md`.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().statement_cache_size(0);
    /// assert_eq!(config.get_statement_cache_size(), 0);
    /// ```
    pub fn statement_cache_size(mut self, size: usize) -> Config {
        self.statement_cache_size = Some(size);
        self
    }

    /// How much a row stream fetches per round trip (`fetch_size`: `1000` rows or `64kB`).
    ///
    /// ```
    /// use slipstream_pg::{Config, FetchSize};
    /// let config = Config::new().fetch_size(FetchSize::Rows(1000));
    /// assert_eq!(config.get_fetch_size(), FetchSize::Rows(1000));
    /// ```
    pub fn fetch_size(mut self, size: FetchSize) -> Config {
        self.fetch_size = Some(size);
        self
    }

    /// The most bytes of rows a row stream holds in memory at once, plus one row
    /// (`max_result_buffer`). Unset: the fetch size in bytes mode, no cap in rows mode.
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().max_result_buffer(1 << 20);
    /// assert_eq!(config.get_max_result_buffer(), Some(1 << 20));
    /// ```
    pub fn max_result_buffer(mut self, bytes: usize) -> Config {
        self.max_result_buffer = Some(bytes);
        self
    }

    /// Which server of the host list to settle on (`target_session_attrs`, libpq 16): hosts
    /// that do not fit are closed and the next one is tried. See docs/client.md, "Routing".
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::{Config, TargetSessionAttrs};
    /// // Whichever of the two is the primary right now.
    /// let config = Config::new()
    ///     .host("db1").host("db2")
    ///     .user("app")
    ///     .target_session_attrs(TargetSessionAttrs::ReadWrite);
    /// let mut client = slipstream_pg::connect_config(&config).await?;
    /// client.batch_execute("INSERT INTO audit VALUES (now())").await?;
    /// # Ok(()) }
    /// ```
    pub fn target_session_attrs(mut self, attrs: TargetSessionAttrs) -> Config {
        self.target_session_attrs = Some(attrs);
        self
    }
    /// The order in which hosts are tried (`load_balance_hosts`, libpq 16).
    ///
    /// ```
    /// use slipstream_pg::{Config, LoadBalanceHosts};
    /// let config = Config::new().host("db1").host("db2").load_balance_hosts(LoadBalanceHosts::Random);
    /// assert_eq!(config.get_load_balance_hosts(), LoadBalanceHosts::Random);
    /// ```
    pub fn load_balance_hosts(mut self, order: LoadBalanceHosts) -> Config {
        self.load_balance_hosts = Some(order);
        self
    }
    /// The password file to read when no password is given (`passfile`; default `~/.pgpass`).
    /// libpq's format and rules; see docs/client.md, "The password file".
    ///
    /// ```
    /// let config = slipstream_pg::Config::new().passfile("/run/secrets/pgpass");
    /// assert_eq!(config.get_passfile(), Some(std::path::Path::new("/run/secrets/pgpass")));
    /// ```
    pub fn passfile(mut self, path: impl Into<PathBuf>) -> Config {
        self.passfile = Some(path.into());
        self
    }
    /// The connection service (libpq's `service`): [`Config::apply_env`] (and so
    /// [`crate::connect`]) fills every parameter still unset from the service's section of
    /// `PGSERVICEFILE` (else `~/.pg_service.conf`) or, failing that,
    /// `PGSYSCONFDIR/pg_service.conf`, before the `PG*` variables, as libpq 15 does. A service
    /// found in no file is an error, and so is [`crate::connect_config`] (or a pool) given a
    /// configuration whose service was never applied.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// let config = Config::new().service("orders").dbname("reports");
    /// assert_eq!(config.get_service(), Some("orders"));
    /// // A service that no file defines is an error naming it.
    /// let e = Config::new().service("no-such-service").apply_env().unwrap_err();
    /// assert!(e.to_string().contains("\"no-such-service\""), "{e}");
    /// ```
    pub fn service(mut self, name: &str) -> Config {
        self.service = Some(name.to_string());
        self.service_read = false;
        self
    }
    /// The authentication methods the server may ask for (`require_auth`, libpq 16): a
    /// comma-separated list of `password`, `md5`, `scram-sha-256`, `gss`, `sspi`, `none`, or a
    /// list of the same each negated with `!`.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// let config = Config::new().require_auth("scram-sha-256")?;
    /// assert_eq!(config.get_require_auth(), Some("scram-sha-256"));
    /// let bad = Config::new().require_auth("scram-sha-256,!md5").unwrap_err();
    /// assert!(bad.to_string().contains("cannot be mixed"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) if the list is not valid.
    pub fn require_auth(mut self, methods: &str) -> Result<Config, Error> {
        self.require_auth = Some(methods.parse()?);
        Ok(self)
    }
    /// Whether SCRAM binds itself to the TLS channel (`channel_binding`).
    ///
    /// ```
    /// use slipstream_pg::{ChannelBinding, Config, SslMode};
    /// let config = Config::new().ssl_mode(SslMode::Require).channel_binding(ChannelBinding::Require);
    /// assert_eq!(config.get_channel_binding(), ChannelBinding::Require);
    /// ```
    pub fn channel_binding(mut self, binding: ChannelBinding) -> Config {
        self.channel_binding = Some(binding);
        self
    }

    /// The routing requirement (default [`TargetSessionAttrs::Any`]).
    ///
    /// ```
    /// use slipstream_pg::{Config, TargetSessionAttrs};
    /// let config: Config = "host=db1,db2 target_session_attrs=read-write".parse()?;
    /// assert_eq!(config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
    /// assert_eq!(Config::new().get_target_session_attrs(), TargetSessionAttrs::Any);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_target_session_attrs(&self) -> TargetSessionAttrs {
        self.target_session_attrs.unwrap_or_default()
    }
    /// The host order (default [`LoadBalanceHosts::Disable`]).
    ///
    /// ```
    /// use slipstream_pg::{Config, LoadBalanceHosts};
    /// let config: Config = "host=db1,db2 load_balance_hosts=random".parse()?;
    /// assert_eq!(config.get_load_balance_hosts(), LoadBalanceHosts::Random);
    /// assert_eq!(Config::new().get_load_balance_hosts(), LoadBalanceHosts::Disable);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_load_balance_hosts(&self) -> LoadBalanceHosts {
        self.load_balance_hosts.unwrap_or_default()
    }
    /// The password file, if set (otherwise `~/.pgpass` is read).
    ///
    /// ```
    /// let config: slipstream_pg::Config = "passfile=/run/secrets/pgpass".parse()?;
    /// assert_eq!(config.get_passfile(), Some(std::path::Path::new("/run/secrets/pgpass")));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_passfile(&self) -> Option<&std::path::Path> {
        self.passfile.as_deref()
    }
    /// The connection service given (`service=` in the string, or [`Config::service`]), if
    /// any; `PGSERVICE` is read only by [`Config::apply_env`].
    ///
    /// ```
    /// let config: slipstream_pg::Config = "postgres:///?service=orders".parse()?;
    /// assert_eq!(config.get_service(), Some("orders"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_service(&self) -> Option<&str> {
        self.service.as_deref()
    }
    /// The `require_auth` list as given, if set.
    ///
    /// ```
    /// let config: slipstream_pg::Config = "require_auth=!password,!md5".parse()?;
    /// assert_eq!(config.get_require_auth(), Some("!password,!md5"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_require_auth(&self) -> Option<&str> {
        self.require_auth.as_ref().map(|r| r.text.as_str())
    }
    /// The channel-binding mode (default [`ChannelBinding::Prefer`]).
    ///
    /// ```
    /// use slipstream_pg::{ChannelBinding, Config};
    /// assert_eq!(Config::new().get_channel_binding(), ChannelBinding::Prefer);
    /// let config: Config = "sslmode=require channel_binding=require".parse()?;
    /// assert_eq!(config.get_channel_binding(), ChannelBinding::Require);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_channel_binding(&self) -> ChannelBinding {
        self.channel_binding.unwrap_or_default()
    }

    /// The statement cache size (default [`DEFAULT_STATEMENT_CACHE_SIZE`]).
    ///
    /// ```
    /// use slipstream_pg::{Config, DEFAULT_STATEMENT_CACHE_SIZE};
    /// assert_eq!(Config::new().get_statement_cache_size(), DEFAULT_STATEMENT_CACHE_SIZE);
    /// let config: Config = "statement_cache_size=0".parse()?;
    /// assert_eq!(config.get_statement_cache_size(), 0); // the cache is off
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_statement_cache_size(&self) -> usize {
        self.statement_cache_size
            .unwrap_or(DEFAULT_STATEMENT_CACHE_SIZE)
    }
    /// The fetch size (default 64 KiB in bytes mode).
    ///
    /// ```
    /// use slipstream_pg::{Config, FetchSize};
    /// let config: Config = "fetch_size=1000".parse()?;
    /// assert_eq!(config.get_fetch_size(), FetchSize::Rows(1000));
    /// let config: Config = "fetch_size=64kB".parse()?;
    /// assert_eq!(config.get_fetch_size(), FetchSize::Bytes(64 * 1024));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_fetch_size(&self) -> FetchSize {
        self.fetch_size.unwrap_or_default()
    }
    /// The cap on a row stream's buffered bytes, if set.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// assert_eq!(Config::new().get_max_result_buffer(), None);
    /// let config: Config = "max_result_buffer=1MB".parse()?;
    /// assert_eq!(config.get_max_result_buffer(), Some(1024 * 1024));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_max_result_buffer(&self) -> Option<usize> {
        self.max_result_buffer
    }

    /// The hosts, in the order they are tried.
    ///
    /// ```
    /// use slipstream_pg::{Config, Host};
    /// let config: Config = "postgres://app@db1:5432,db2:5433/orders".parse()?;
    /// assert_eq!(config.get_hosts(), &[Host::Tcp("db1".into()), Host::Tcp("db2".into())]);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_hosts(&self) -> &[Host] {
        &self.hosts
    }
    /// The ports as given.
    ///
    /// ```
    /// let config: slipstream_pg::Config = "postgres://app@db1:5432,db2:5433/orders".parse()?;
    /// assert_eq!(config.get_ports(), &[5432, 5433]);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_ports(&self) -> &[u16] {
        &self.ports
    }
    /// The user name, if set.
    ///
    /// ```
    /// let config: slipstream_pg::Config = "postgres://app@db/orders".parse()?;
    /// assert_eq!(config.get_user(), Some("app"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_user(&self) -> Option<&str> {
        self.user.as_deref()
    }
    /// The database name, if set.
    ///
    /// ```
    /// let config: slipstream_pg::Config = "postgres://app@db/orders".parse()?;
    /// assert_eq!(config.get_dbname(), Some("orders"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_dbname(&self) -> Option<&str> {
        self.dbname.as_deref()
    }
    /// The application name, if set.
    ///
    /// ```
    /// let config: slipstream_pg::Config = "host=db application_name=billing".parse()?;
    /// assert_eq!(config.get_application_name(), Some("billing"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_application_name(&self) -> Option<&str> {
        self.application_name.as_deref()
    }
    /// The connect timeout, if set.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config: slipstream_pg::Config = "host=db connect_timeout=10".parse()?;
    /// assert_eq!(config.get_connect_timeout(), Some(Duration::from_secs(10)));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout.flatten()
    }
    /// The TLS mode (default [`SslMode::Prefer`], or [`SslMode::VerifyFull`] with
    /// `sslrootcert=system`, as in libpq 16).
    ///
    /// ```
    /// use slipstream_pg::{Config, SslMode};
    /// assert_eq!(Config::new().get_ssl_mode(), SslMode::Prefer);
    /// let config: Config = "host=db sslmode=require".parse()?;
    /// assert_eq!(config.get_ssl_mode(), SslMode::Require);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn get_ssl_mode(&self) -> SslMode {
        match self.ssl_mode {
            Some(mode) => mode,
            None if self.uses_system_roots() => SslMode::VerifyFull,
            None => SslMode::default(),
        }
    }
    /// Whether TLS sends the server's name (Server Name Indication); see [`Config::ssl_sni`].
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// assert!(Config::new().get_ssl_sni());
    /// assert!(!Config::new().ssl_sni(false).get_ssl_sni());
    /// ```
    pub fn get_ssl_sni(&self) -> bool {
        self.ssl_sni.unwrap_or(true)
    }
    /// True with `sslrootcert=system`: the operating system's trusted CAs.
    pub(crate) fn uses_system_roots(&self) -> bool {
        self.ssl_root_cert
            .as_deref()
            .is_some_and(|p| p == std::path::Path::new("system"))
    }
    /// True if a password is set (the password itself is never shown).
    ///
    /// ```
    /// let config: slipstream_pg::Config = "postgres://app:s3cret@db/orders".parse()?;
    /// assert!(config.has_password());
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Fills every parameter still unset from the `PG*` environment variables (`PGHOST`,
    /// `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGAPPNAME`, `PGOPTIONS`,
    /// `PGCONNECT_TIMEOUT`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`,
    /// `PGTARGETSESSIONATTRS`, `PGLOADBALANCEHOSTS`, `PGPASSFILE`, `PGREQUIREAUTH`,
    /// `PGCHANNELBINDING`, `PGGSSENCMODE`, and `PGREQUIRESSL=1` as `sslmode=require` when
    /// neither the string nor `PGSSLMODE` sets it), and sends `PGDATESTYLE`, `PGTZ` and
    /// `PGGEQO` as the session's `DateStyle`, `TimeZone` and `geqo`, as libpq does. A variable
    /// naming something slipstream-pg cannot do (`PGHOSTADDR`, `PGSSLCRL`, `PGSSLCRLDIR`,
    /// `PGREQUIREPEER`, a `PGSSLMINPROTOCOLVERSION` above TLS 1.2 or a
    /// `PGSSLMAXPROTOCOLVERSION` below 1.3) is an error naming it, and so is a variable read
    /// for a parameter the string leaves unset whose value is not UTF-8.
    ///
    /// Before the variables, a connection service (`service=`, [`Config::service`], else
    /// `PGSERVICE`) fills what the configuration leaves unset from its section of
    /// `PGSERVICEFILE` (else `~/.pg_service.conf`) or `PGSYSCONFDIR/pg_service.conf`, as
    /// libpq 15 reads them: so a service's host wins over `PGHOST`, and the string's over both.
    ///
    /// ```
    /// // With PGHOST=db.internal in the environment, the string's host still wins:
    /// let config = "host=localhost".parse::<slipstream_pg::Config>()?.apply_env()?;
    /// assert_eq!(config.get_hosts(), &[slipstream_pg::Host::Tcp("localhost".into())]);
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn apply_env(self) -> Result<Config, Error> {
        // A value that is not UTF-8 would read as unset (`env::var(..).ok()`), and a PGUSER
        // or PGHOST of a Latin-1 locale connected as the OS user, or to the default host,
        // without a word (`tests/it/attack_libpq_env.rs`). libpq sends the bytes as they are;
        // a `String` cannot hold them, so such a variable is refused by name, but only if it
        // is read: one whose parameter the string gives is never read, as in libpq.
        let unreadable = std::cell::RefCell::new(None::<String>);
        let config = self.apply_vars(|name| match std::env::var(name) {
            Err(std::env::VarError::NotUnicode(_)) if name.starts_with("PG") => {
                unreadable
                    .borrow_mut()
                    .get_or_insert_with(|| name.to_string());
                None
            }
            value => value.ok(),
        });
        match unreadable.into_inner() {
            Some(name) => Err(Error::config(format!(
                "environment variable {name} is not valid UTF-8: slipstream-pg reads only \
                 UTF-8 values; set it in UTF-8, or give its parameter in the connection \
                 string and unset {name}"
            ))),
            None => config,
        }
    }

    /// Every environment variable [`Config::apply_env`] reads, in the order it reads them,
    /// then `HOME`: for a tool that must give another client the same environment (the lab
    /// hands the same variables to tokio-postgres), or show what a connection's settings came
    /// from. `HOME` is last because it is also read when connecting, not only here: it finds
    /// `~/.pg_service.conf` (with a service), `~/.pgpass` (without `passfile`) and
    /// `~/.postgresql/` (TLS files), as libpq's does; unset or empty, the passwd entry's home
    /// is used instead.
    ///
    /// ```
    /// let read = slipstream_pg::Config::environment_variables();
    /// assert!(read.iter().any(|v| v == "PGHOST") && read.iter().any(|v| v == "PGTZ"));
    /// assert_eq!(read.last().map(String::as_str), Some("HOME"));
    /// ```
    pub fn environment_variables() -> Vec<String> {
        // Asked of a configuration with nothing set, `apply_vars` reads every variable it
        // knows: each is read unless the string set its parameter, and none is set here.
        let read = std::cell::RefCell::new(Vec::new());
        let _ = Config::default().apply_vars(|name| {
            read.borrow_mut().push(name.to_string());
            None
        });
        // With no service the files are not looked for; with one they are read right after
        // PGSERVICE.
        let mut read = read.into_inner();
        let at = read
            .iter()
            .position(|v| v == "PGSERVICE")
            .map_or(read.len(), |i| i + 1);
        for (i, v) in crate::service_file::VARS.iter().enumerate() {
            read.insert(at + i, v.to_string());
        }
        read.push("HOME".to_string());
        read
    }

    /// [`Config::apply_env`] with the variables `var` returns instead of this process's
    /// environment (`None` is unset): for a tool that connects on behalf of another
    /// environment, or a test that must not touch the process's. Every variable is asked
    /// through `var`, `HOME` included (for `~/.pg_service.conf`).
    ///
    /// As libpq, a variable set to the empty string counts as given (`PGHOST=` is the default
    /// host, `PGCONNECT_TIMEOUT=` an error), and a parameter given empty is, for the ones where
    /// libpq reads empty as "not set" (user, password, dbname, the files), the default.
    ///
    /// ```
    /// use slipstream_pg::{Config, Host};
    /// let env = |name: &str| match name {
    ///     "PGHOST" => Some("db.internal".to_string()),
    ///     "PGPORT" => Some("6432".to_string()),
    ///     _ => None,
    /// };
    /// let config = "port=5433".parse::<Config>()?.apply_vars(env)?;
    /// assert_eq!(config.get_hosts(), &[Host::Tcp("db.internal".into())]);
    /// assert_eq!(config.get_ports(), &[5433]); // the string's port wins
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    pub fn apply_vars(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        // libpq connects to PGHOSTADDR (with or without a host, which then only names the
        // server); ignoring it would connect somewhere else.
        if let Some(addr) = var("PGHOSTADDR").filter(|v| !v.is_empty()) {
            return Err(Error::config(format!(
                "PGHOSTADDR={addr} is set, but slipstream-pg does not support hostaddr: set \
                 PGHOST={addr} (or host= in the connection string) instead, or unset PGHOSTADDR"
            )));
        }
        // rustls speaks TLS 1.2 and 1.3 only, and both: a floor of 1.2 or lower, or a ceiling
        // of 1.3, is what it does anyway; any other bound would be ignored (libpq 15 holds to
        // it, and refuses a TLS 1.2 server under a 1.3 floor).
        for (env, fits) in [
            (
                "PGSSLMINPROTOCOLVERSION",
                ["TLSv1", "TLSv1.1", "TLSv1.2"].as_slice(),
            ),
            ("PGSSLMAXPROTOCOLVERSION", ["TLSv1.3"].as_slice()),
        ] {
            let given = var(env).filter(|v| !v.is_empty());
            if let Some(value) = given.filter(|v| !fits.iter().any(|f| f.eq_ignore_ascii_case(v))) {
                return Err(Error::config(format!(
                    "{env}={value} is set, but slipstream-pg always offers TLS 1.2 and 1.3 and \
                     cannot narrow that, so it cannot connect as libpq would: unset {env} (or \
                     set it to {})",
                    fits.join(", ")
                )));
            }
        }
        // libpq's conninfo_add_defaults: the service's section first, for what the string
        // left unset, then the variables for what is still unset. A parameter the section gives
        // (even empty, which may leave its field unset) keeps its variable out, as in libpq.
        let mut from_service = Vec::new();
        let service = match self.service.clone() {
            Some(name) => Some((name, "service")),
            None => var("PGSERVICE").map(|name| (name, "PGSERVICE")),
        };
        if let Some((name, given_by)) = service {
            let entries = crate::service_file::lookup(&name, &var)
                .map_err(|e| e.context(format!("{given_by}={name}")))?;
            for entry in entries {
                if self.is_set(&entry.key) || from_service.contains(&entry.key) {
                    continue;
                }
                self.set(&entry.key, &entry.value)
                    .map_err(|e| e.context(format!("service \"{name}\" ({})", entry.origin)))?;
                from_service.push(entry.key);
            }
            self.service_read = true;
        }
        for (param, env) in ENV_VARS {
            if self.is_set(param) || from_service.iter().any(|k| k == param) {
                continue;
            }
            if let Some(value) = var(env) {
                self.set(param, &value)
                    .map_err(|e| e.context(format!("environment variable {env}")))?;
            }
        }
        // libpq's conninfo_add_defaults: after PGSSLMODE, a PGREQUIRESSL starting with "1" is
        // sslmode=require; any other value is ignored.
        if self.ssl_mode.is_none()
            && !from_service.iter().any(|k| k == "sslmode")
            && var("PGREQUIRESSL").is_some_and(|v| v.starts_with('1'))
        {
            self.ssl_mode = Some(SslMode::Require);
        }
        // libpq reads these for checks or sources slipstream does not have: ignoring one
        // would connect where libpq would not (a service file's host, a revoked certificate, a
        // socket's server run by another OS user). Each is refused only where libpq would use
        // it, now that the string, the service and the environment have said where and how to
        // connect: a revocation list only where TLS may be used, `requirepeer` only over a
        // Unix-domain socket (libpq ignores both otherwise, so refusing there turned away
        // connections libpq makes). Empty is libpq's "not set".
        for (env, what) in UNSUPPORTED_ENV_VARS {
            let Some(value) = var(env).filter(|v| !v.is_empty()) else {
                continue;
            };
            let used = match env {
                "PGSSLCRL" | "PGSSLCRLDIR" => self.ssl_mode != Some(SslMode::Disable),
                "PGREQUIREPEER" => {
                    let default = [Host::default_for_machine()];
                    let hosts = if self.hosts.is_empty() {
                        &default[..]
                    } else {
                        &self.hosts[..]
                    };
                    hosts.iter().any(|h| matches!(h, Host::Unix(_)))
                }
                _ => true,
            };
            if used {
                return Err(Error::config(format!(
                    "{env}={value} is set, but slipstream-pg does not support {what}, so it \
                     cannot connect as libpq would: give the parameters in the connection string \
                     (or their own PG* variables) instead, or unset {env}"
                )));
            }
        }
        // libpq's build_startup_packet sends these unless the value is "default" (any case).
        // Once: a configuration given the environment twice sends each setting once.
        for (param, env) in ENV_SETTINGS {
            if self.env_settings.iter().any(|(p, _)| *p == param) {
                continue;
            }
            if let Some(value) = var(env).filter(|v| !v.eq_ignore_ascii_case("default")) {
                self.env_settings.push((param, value));
            }
        }
        Ok(self)
    }

    /// An error if a service is named whose file was never read (see `service_read`).
    pub(crate) fn check_service_read(&self) -> Result<(), Error> {
        match &self.service {
            Some(name) if !self.service_read => Err(Error::config(format!(
                "service \"{name}\" is named but its service file was not read: call \
                 Config::apply_env() (or apply_vars) before connecting, or use \
                 slipstream_pg::connect, which does"
            ))),
            _ => Ok(()),
        }
    }

    /// Every parameter still unset gets libpq's default: the Unix socket directory if it exists
    /// (else `localhost`), port 5432, the OS user, dbname = user.
    pub(crate) fn with_defaults(mut self) -> Config {
        if self.hosts.is_empty() {
            self.hosts.push(Host::default_for_machine());
        }
        // libpq: an empty user, password or dbname is not set. The user defaults to the
        // effective uid's name, as libpq's getpwuid does, not $USER (which su and containers
        // leave pointing elsewhere, or unset).
        if self.user.as_deref().is_none_or(str::is_empty) {
            self.user = os_user();
        }
        if self.password.as_deref().is_some_and(<[u8]>::is_empty) {
            self.password = None;
        }
        if self.dbname.as_deref().is_none_or(str::is_empty) {
            self.dbname = self.user.clone();
        }
        if self.application_name.is_none() {
            self.application_name = self.fallback_application_name.take();
        }
        self
    }

    /// One configuration per host of a multi-host configuration, each with that host and its
    /// port only (libpq's pairing: one port for all hosts, or one per host). A pool uses them
    /// for its per-host sub-pools. With no host given, the one default target.
    ///
    /// ```
    /// use slipstream_pg::Config;
    /// let config: Config = "host=db1,db2 port=5432,5433 dbname=orders".parse()?;
    /// let hosts = config.per_host()?;
    /// assert_eq!(hosts.len(), 2);
    /// assert_eq!(hosts[1].get_ports(), &[5433]);
    /// assert_eq!(hosts[1].get_dbname(), Some("orders"));
    /// # Ok::<(), slipstream_pg::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) if the hosts and ports do not pair up.
    pub fn per_host(&self) -> Result<Vec<Config>, Error> {
        if self.hosts.is_empty() {
            return Ok(vec![self.clone()]);
        }
        Ok(self
            .targets()?
            .into_iter()
            .map(|(host, port)| Config {
                hosts: vec![host],
                ports: vec![port],
                ..self.clone()
            })
            .collect())
    }

    /// The (host, port) pairs to try, after checking that ports and hosts line up.
    pub(crate) fn targets(&self) -> Result<Vec<(Host, u16)>, Error> {
        let port_for = |i: usize| match self.ports.len() {
            0 => Ok(DEFAULT_PORT),
            1 => Ok(self.ports[0]),
            n if n == self.hosts.len() => Ok(self.ports[i]),
            n => Err(Error::config(format!(
                "{} hosts but {n} ports were given: give one port, or one per host",
                self.hosts.len()
            ))),
        };
        self.hosts
            .iter()
            .enumerate()
            .map(|(i, h)| Ok((h.clone(), port_for(i)?)))
            .collect()
    }

    fn is_set(&self, param: &str) -> bool {
        if self.given_empty.contains(&param) {
            return true;
        }
        match param {
            "host" => !self.hosts.is_empty(),
            "port" => !self.ports.is_empty(),
            "user" => self.user.is_some(),
            "password" => self.password.is_some(),
            "dbname" => self.dbname.is_some(),
            "application_name" => self.application_name.is_some(),
            "options" => self.options.is_some(),
            "connect_timeout" => self.connect_timeout.is_some(),
            "sslmode" => self.ssl_mode.is_some(),
            "sslrootcert" => self.ssl_root_cert.is_some(),
            "sslcert" => self.ssl_cert.is_some(),
            "sslkey" => self.ssl_key.is_some(),
            "sslsni" => self.ssl_sni.is_some(),
            "target_session_attrs" => self.target_session_attrs.is_some(),
            "load_balance_hosts" => self.load_balance_hosts.is_some(),
            "passfile" => self.passfile.is_some(),
            "require_auth" => self.require_auth.is_some(),
            "channel_binding" => self.channel_binding.is_some(),
            "gssencmode" => self.gssencmode_given,
            "fallback_application_name" => self.fallback_application_name.is_some(),
            "keepalives" => self.keepalives.is_some(),
            "keepalives_idle" => self.keepalives_idle.is_some(),
            "keepalives_interval" => self.keepalives_interval.is_some(),
            "keepalives_count" => self.keepalives_count.is_some(),
            "tcp_user_timeout" => self.tcp_user_timeout.is_some(),
            "service" => self.service.is_some(),
            _ => false,
        }
    }
}

/// The effective user's name from the password database, as libpq's `pg_fe_getauthname`.
fn os_user() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// Where Debian's (and most distributions') PostgreSQL puts its Unix socket.
pub(crate) const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// Environment variables libpq 15 reads for what slipstream-pg cannot do -> what that is.
const UNSUPPORTED_ENV_VARS: [(&str, &str); 3] = [
    ("PGSSLCRL", "certificate revocation lists (sslcrl=)"),
    ("PGSSLCRLDIR", "certificate revocation lists (sslcrldir=)"),
    (
        "PGREQUIREPEER",
        "checking the Unix socket peer's user (requirepeer=)",
    ),
];

/// Startup parameter -> the environment variable libpq sends it from.
const ENV_SETTINGS: [(&str, &str); 3] = [
    ("datestyle", "PGDATESTYLE"),
    ("timezone", "PGTZ"),
    ("geqo", "PGGEQO"),
];

/// libpq keyword -> environment variable.
const ENV_VARS: [(&str, &str); 19] = [
    ("host", "PGHOST"),
    ("port", "PGPORT"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("dbname", "PGDATABASE"),
    ("application_name", "PGAPPNAME"),
    ("options", "PGOPTIONS"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("sslsni", "PGSSLSNI"),
    ("target_session_attrs", "PGTARGETSESSIONATTRS"),
    ("load_balance_hosts", "PGLOADBALANCEHOSTS"),
    ("passfile", "PGPASSFILE"),
    ("require_auth", "PGREQUIREAUTH"),
    ("channel_binding", "PGCHANNELBINDING"),
    // `require` is refused by name, as the string's would be; a string's `disable` or
    // `prefer` wins over the variable, as in libpq.
    ("gssencmode", "PGGSSENCMODE"),
];

impl fmt::Debug for Config {
    /// Shows every parameter but the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("hosts", &self.hosts)
            .field("ports", &self.ports)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("dbname", &self.dbname)
            .field("application_name", &self.application_name)
            .field("fallback_application_name", &self.fallback_application_name)
            .field("options", &self.options)
            .field("connect_timeout", &self.connect_timeout)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_root_cert", &self.ssl_root_cert)
            .field("ssl_cert", &self.ssl_cert)
            .field("ssl_key", &self.ssl_key)
            .field("ssl_sni", &self.ssl_sni)
            .field("keepalives", &self.keepalives)
            .field("keepalives_idle", &self.keepalives_idle)
            .field("keepalives_interval", &self.keepalives_interval)
            .field("keepalives_count", &self.keepalives_count)
            .field("tcp_user_timeout", &self.tcp_user_timeout)
            .field("statement_cache_size", &self.statement_cache_size)
            .field("fetch_size", &self.fetch_size)
            .field("max_result_buffer", &self.max_result_buffer)
            .field("target_session_attrs", &self.target_session_attrs)
            .field("load_balance_hosts", &self.load_balance_hosts)
            .field("passfile", &self.passfile)
            .field("require_auth", &self.require_auth.as_ref().map(|r| &r.text))
            .field("channel_binding", &self.channel_binding)
            .field("env_settings", &self.env_settings)
            .field("gssencmode_given", &self.gssencmode_given)
            .field("given_empty", &self.given_empty)
            .field("service", &self.service)
            .field("service_read", &self.service_read)
            .finish()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The environment's session settings are sent once however often it is applied, and
    /// `PGREQUIRESSL=1` yields to an `sslmode` from the string or `PGSSLMODE` (libpq's
    /// `conninfo_add_defaults`).
    #[test]
    fn env_settings_are_taken_once_and_requiressl_yields_to_sslmode() {
        let env = |name: &str| match name {
            "PGTZ" => Some("UTC".to_string()),
            "PGREQUIRESSL" => Some("1".to_string()),
            _ => None,
        };
        let c = Config::new()
            .apply_vars(env)
            .unwrap()
            .apply_vars(env)
            .unwrap();
        assert_eq!(c.env_settings, vec![("timezone", "UTC".to_string())]);
        assert_eq!(c.get_ssl_mode(), SslMode::Require);
        let c: Config = "sslmode=disable".parse().unwrap();
        assert_eq!(c.apply_vars(env).unwrap().get_ssl_mode(), SslMode::Disable);
        let with_mode = |name: &str| match name {
            "PGSSLMODE" => Some("allow".to_string()),
            other => env(other),
        };
        let c = Config::new().apply_vars(with_mode).unwrap();
        assert_ne!(c.get_ssl_mode(), SslMode::Require);
    }

    /// `Debug` "shows every parameter but the password": before session 44 it left out
    /// eleven (the client certificate and key, the keepalives, `tcp_user_timeout`, the
    /// statement cache, fetch size and result buffer, the fallback application name), so a
    /// logged configuration hid the settings that explain a slow or dropped connection.
    #[test]
    fn debug_shows_every_parameter_but_the_password() {
        let config: Config = "host=db port=5433 user=app password=s3cret dbname=orders \
             application_name=a fallback_application_name=fb options=-cx=1 connect_timeout=3 \
             sslmode=require sslrootcert=/ca.pem sslcert=/c.crt sslkey=/c.key keepalives=1 \
             keepalives_idle=30 keepalives_interval=5 keepalives_count=3 tcp_user_timeout=10000 \
             statement_cache_size=7 fetch_size=100 max_result_buffer=1MB \
             target_session_attrs=any load_balance_hosts=random passfile=/p \
             require_auth=scram-sha-256 channel_binding=prefer"
            .parse()
            .unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        for (name, value) in [
            ("fallback_application_name", "\"fb\""),
            ("ssl_cert", "/c.crt"),
            ("ssl_key", "/c.key"),
            ("keepalives", "Some(true)"),
            ("keepalives_idle", "30s"),
            ("keepalives_interval", "5s"),
            ("keepalives_count", "Some(3)"),
            ("tcp_user_timeout", "10s"),
            ("statement_cache_size", "Some(7)"),
            ("fetch_size", "Rows(100)"),
            ("max_result_buffer", "Some(1048576)"),
            ("passfile", "/p"),
        ] {
            let at = shown
                .find(&format!("{name}: "))
                .unwrap_or_else(|| panic!("no {name} in {shown}"));
            let field = &shown[at..];
            let field = &field[..field.find(", ").unwrap_or(field.len())];
            assert!(field.contains(value), "{name}: {field} in {shown}");
        }
    }

    #[test]
    fn env_fills_only_what_the_string_left_out() {
        let env = |name: &str| match name {
            "PGHOST" => Some("envhost".to_string()),
            "PGUSER" => Some("envuser".to_string()),
            "PGPASSWORD" => Some("envpw".to_string()),
            "PGCONNECT_TIMEOUT" => Some("1".to_string()),
            _ => None,
        };
        let c = "user=me"
            .parse::<Config>()
            .unwrap()
            .apply_vars(env)
            .unwrap();
        assert_eq!(c.hosts, vec![Host::Tcp("envhost".into())]);
        assert_eq!(c.user.as_deref(), Some("me"));
        assert_eq!(c.password.as_deref(), Some(&b"envpw"[..]));
        assert_eq!(
            c.get_connect_timeout(),
            Some(Duration::from_secs(2)),
            "libpq raises 1 s to 2 s"
        );
        let env = |name: &str| {
            Some(
                match name {
                    "PGTARGETSESSIONATTRS" => "read-write",
                    "PGLOADBALANCEHOSTS" => "random",
                    "PGPASSFILE" => "/secrets/pgpass",
                    "PGREQUIREAUTH" => "scram-sha-256",
                    "PGCHANNELBINDING" => "require",
                    _ => return None,
                }
                .to_string(),
            )
        };
        let c = "target_session_attrs=standby"
            .parse::<Config>()
            .unwrap()
            .apply_vars(env)
            .unwrap();
        assert_eq!(c.get_target_session_attrs(), TargetSessionAttrs::Standby);
        assert_eq!(c.get_load_balance_hosts(), LoadBalanceHosts::Random);
        assert_eq!(
            c.get_passfile(),
            Some(std::path::Path::new("/secrets/pgpass"))
        );
        assert_eq!(c.get_require_auth(), Some("scram-sha-256"));
        assert_eq!(c.get_channel_binding(), ChannelBinding::Require);
        let bad = |name: &str| (name == "PGPORT").then(|| "x".to_string());
        let e = Config::new().apply_vars(bad).unwrap_err().to_string();
        assert!(e.contains("PGPORT"), "{e}");
    }

    #[test]
    fn debug_hides_the_password() {
        let c: Config = "password=hunter2".parse().unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
