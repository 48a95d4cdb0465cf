//! Connection configuration: libpq's connection strings (URL and `key=value`) and `PG*`
//! environment variables.
//!
//! Precedence follows libpq: a parameter in the string wins over its environment variable, which
//! wins over the built-in default.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::Error;

/// libpq's `sslmode`: whether to use TLS and how much of the server's certificate to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
pub enum Host {
    /// A host name or IP address reached over TCP.
    Tcp(String),
    /// A directory holding the server's Unix-domain socket (`.s.PGSQL.<port>`).
    Unix(PathBuf),
}

impl Host {
    fn parse(s: &str) -> Host {
        if s.starts_with('/') {
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
    pub(crate) options: Option<String>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) ssl_mode: Option<SslMode>,
    pub(crate) ssl_root_cert: Option<PathBuf>,
    pub(crate) ssl_cert: Option<PathBuf>,
    pub(crate) ssl_key: Option<PathBuf>,
}

/// The port PostgreSQL listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 5432;

impl Config {
    /// An empty configuration: every parameter at its default, no environment applied.
    pub fn new() -> Config {
        Config::default()
    }

    /// Adds a host: a name or address for TCP, or an absolute directory path for a Unix socket.
    /// Several hosts are tried in order.
    pub fn host(mut self, host: &str) -> Config {
        self.hosts.push(Host::parse(host));
        self
    }
    /// Adds a port; one port applies to every host, otherwise one per host.
    pub fn port(mut self, port: u16) -> Config {
        self.ports.push(port);
        self
    }
    /// The user name to log in as.
    pub fn user(mut self, user: &str) -> Config {
        self.user = Some(user.to_string());
        self
    }
    /// The password, used if the server asks for one.
    pub fn password(mut self, password: impl AsRef<[u8]>) -> Config {
        self.password = Some(password.as_ref().to_vec());
        self
    }
    /// The database name (default: the user name).
    pub fn dbname(mut self, dbname: &str) -> Config {
        self.dbname = Some(dbname.to_string());
        self
    }
    /// Shown in `pg_stat_activity.application_name`.
    pub fn application_name(mut self, name: &str) -> Config {
        self.application_name = Some(name.to_string());
        self
    }
    /// Command-line options for the backend, e.g. `-c statement_timeout=5s`.
    pub fn options(mut self, options: &str) -> Config {
        self.options = Some(options.to_string());
        self
    }
    /// How long one connection attempt (TCP/socket, TLS, authentication) may take per host.
    pub fn connect_timeout(mut self, timeout: Duration) -> Config {
        self.connect_timeout = Some(timeout);
        self
    }
    /// Whether and how to use TLS.
    pub fn ssl_mode(mut self, mode: SslMode) -> Config {
        self.ssl_mode = Some(mode);
        self
    }
    /// A PEM file of CA certificates that the server's certificate must chain to.
    pub fn ssl_root_cert(mut self, path: impl Into<PathBuf>) -> Config {
        self.ssl_root_cert = Some(path.into());
        self
    }
    /// A PEM client certificate (and [`Config::ssl_key`]) for certificate authentication.
    pub fn ssl_cert(mut self, path: impl Into<PathBuf>) -> Config {
        self.ssl_cert = Some(path.into());
        self
    }
    /// The PEM private key matching [`Config::ssl_cert`].
    pub fn ssl_key(mut self, path: impl Into<PathBuf>) -> Config {
        self.ssl_key = Some(path.into());
        self
    }

    /// The hosts, in the order they are tried.
    pub fn get_hosts(&self) -> &[Host] {
        &self.hosts
    }
    /// The ports as given.
    pub fn get_ports(&self) -> &[u16] {
        &self.ports
    }
    /// The user name, if set.
    pub fn get_user(&self) -> Option<&str> {
        self.user.as_deref()
    }
    /// The database name, if set.
    pub fn get_dbname(&self) -> Option<&str> {
        self.dbname.as_deref()
    }
    /// The application name, if set.
    pub fn get_application_name(&self) -> Option<&str> {
        self.application_name.as_deref()
    }
    /// The connect timeout, if set.
    pub fn get_connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout
    }
    /// The TLS mode (default [`SslMode::Prefer`]).
    pub fn get_ssl_mode(&self) -> SslMode {
        self.ssl_mode.unwrap_or_default()
    }
    /// True if a password is set (the password itself is never shown).
    pub fn has_password(&self) -> bool {
        self.password.is_some()
    }

    /// Fills every parameter still unset from the `PG*` environment variables (`PGHOST`,
    /// `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGAPPNAME`, `PGOPTIONS`,
    /// `PGCONNECT_TIMEOUT`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`).
    pub fn apply_env(self) -> Result<Config, Error> {
        self.apply_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    fn apply_vars(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        for (param, env) in ENV_VARS {
            if self.is_set(param) {
                continue;
            }
            if let Some(value) = var(env) {
                self.set(param, &value)
                    .map_err(|e| e.context(format!("environment variable {env}")))?;
            }
        }
        Ok(self)
    }

    /// Every parameter still unset gets libpq's default: the Unix socket directory if it exists
    /// (else `localhost`), port 5432, the OS user, dbname = user.
    pub(crate) fn with_defaults(mut self) -> Config {
        if self.hosts.is_empty() {
            let socket_dir = std::path::Path::new(DEFAULT_SOCKET_DIR);
            self.hosts.push(if socket_dir.is_dir() {
                Host::Unix(socket_dir.to_path_buf())
            } else {
                Host::Tcp("localhost".into())
            });
        }
        if self.user.is_none() {
            self.user = std::env::var("USER")
                .ok()
                .or_else(|| std::env::var("LOGNAME").ok());
        }
        if self.dbname.is_none() {
            self.dbname = self.user.clone();
        }
        self
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
            _ => false,
        }
    }

    /// Sets one libpq parameter by its keyword.
    fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match key {
            "host" => {
                self.hosts = value
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(Host::parse)
                    .collect();
            }
            "port" => {
                self.ports = value
                    .split(',')
                    .map(|p| {
                        p.trim().parse::<u16>().map_err(|_| {
                            Error::config(format!("invalid port `{p}`: expected a number 1-65535"))
                        })
                    })
                    .collect::<Result<_, _>>()?;
            }
            "user" => self.user = Some(value.into()),
            "password" => self.password = Some(value.as_bytes().to_vec()),
            "dbname" => self.dbname = Some(value.into()),
            "application_name" => self.application_name = Some(value.into()),
            "options" => self.options = Some(value.into()),
            "connect_timeout" => {
                let secs: i64 = value.trim().parse().map_err(|_| {
                    Error::config(format!(
                        "invalid connect_timeout `{value}`: expected whole seconds"
                    ))
                })?;
                // libpq: zero or negative means wait forever; 1 is raised to 2.
                self.connect_timeout = (secs > 0).then(|| Duration::from_secs(secs.max(2) as u64));
            }
            "sslmode" => self.ssl_mode = Some(value.parse()?),
            "sslrootcert" => self.ssl_root_cert = Some(value.into()),
            "sslcert" => self.ssl_cert = Some(value.into()),
            "sslkey" => self.ssl_key = Some(value.into()),
            // Accepted for compatibility with libpq strings; they do not change our behaviour.
            "client_encoding"
            | "fallback_application_name"
            | "keepalives"
            | "keepalives_idle"
            | "target_session_attrs"
            | "gssencmode"
            | "channel_binding" => {}
            other => {
                return Err(Error::config(format!(
                    "unknown connection parameter `{other}` (supported: host, port, user, password, \
                     dbname, application_name, options, connect_timeout, sslmode, sslrootcert, sslcert, sslkey)"
                )));
            }
        }
        Ok(())
    }

    fn parse_url(s: &str) -> Result<Config, Error> {
        let rest = s
            .strip_prefix("postgresql://")
            .or_else(|| s.strip_prefix("postgres://"))
            .ok_or_else(|| Error::config("a URL must start with postgres:// or postgresql://"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let mut config = Config::new();
        if let Some(userinfo) = userinfo {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                config.user = Some(decode(user)?);
            }
            if let Some(p) = password {
                config.password = Some(percent_decode_str(p).collect());
            }
        }
        for part in hostlist.split(',').filter(|p| !p.is_empty()) {
            let (host, port) = split_host_port(part)?;
            if !host.is_empty() {
                config.hosts.push(Host::parse(&decode(host)?));
            }
            if let Some(port) = port {
                config.set_port_entry(port)?;
            }
        }
        if !path.is_empty() {
            config.dbname = Some(decode(path)?);
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::config(format!(
                    "invalid URL query parameter `{pair}`: expected key=value"
                ))
            })?;
            config.set(&decode(k)?, &decode(v)?)?;
        }
        Ok(config)
    }

    fn set_port_entry(&mut self, port: &str) -> Result<(), Error> {
        let p = port.parse::<u16>().map_err(|_| {
            Error::config(format!("invalid port `{port}`: expected a number 1-65535"))
        })?;
        self.ports.push(p);
        Ok(())
    }

    fn parse_key_value(s: &str) -> Result<Config, Error> {
        let mut config = Config::new();
        let mut chars = s.chars().peekable();
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.peek().is_none() {
                break;
            }
            let mut key = String::new();
            while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
                key.push(c);
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            if chars.next() != Some('=') {
                return Err(Error::config(format!(
                    "missing `=` after `{key}` in connection string: expected key=value pairs"
                )));
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let mut value = String::new();
            if chars.next_if_eq(&'\'').is_some() {
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => value.push(c),
                            None => break,
                        },
                        Some(c) => value.push(c),
                        None => {
                            return Err(Error::config(format!(
                                "unterminated quoted value for `{key}` in connection string"
                            )));
                        }
                    }
                }
            } else {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    if c == '\\' {
                        if let Some(escaped) = chars.next() {
                            value.push(escaped);
                        }
                    } else {
                        value.push(c);
                    }
                }
            }
            config.set(&key, &value)?;
        }
        Ok(config)
    }
}

/// Where Debian's (and most distributions') PostgreSQL puts its Unix socket.
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// libpq keyword -> environment variable.
const ENV_VARS: [(&str, &str); 12] = [
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
];

fn decode(s: &str) -> Result<String, Error> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::config(format!("`{s}` is not valid UTF-8 after percent-decoding")))
}

/// Splits `host:port`, `[v6]:port`, `host` or `:port`.
fn split_host_port(s: &str) -> Result<(&str, Option<&str>), Error> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| Error::config(format!("unterminated `[` in host `{s}`")))?;
        return Ok((host, after.strip_prefix(':')));
    }
    Ok(match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    })
}

impl FromStr for Config {
    type Err = Error;

    /// Parses a URL (`postgres://user:pass@host:port/db?sslmode=require`) or a libpq key=value
    /// string (`host=... port=... user=...`). No environment variables are applied.
    fn from_str(s: &str) -> Result<Config, Error> {
        let s = s.trim();
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Config::parse_url(s)
        } else {
            Config::parse_key_value(s)
        }
    }
}

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
            .field("options", &self.options)
            .field("connect_timeout", &self.connect_timeout)
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_root_cert", &self.ssl_root_cert)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_with_everything() {
        let c: Config =
            "postgresql://us%40er:p%3Ass@h1:5433,[::1]:5434/my%20db?sslmode=verify-full&application_name=x&connect_timeout=7"
                .parse()
                .unwrap();
        assert_eq!(c.user.as_deref(), Some("us@er"));
        assert_eq!(c.password.as_deref(), Some(&b"p:ss"[..]));
        assert_eq!(
            c.hosts,
            vec![Host::Tcp("h1".into()), Host::Tcp("::1".into())]
        );
        assert_eq!(c.ports, vec![5433, 5434]);
        assert_eq!(c.dbname.as_deref(), Some("my db"));
        assert_eq!(c.get_ssl_mode(), SslMode::VerifyFull);
        assert_eq!(c.application_name.as_deref(), Some("x"));
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(7)));
    }

    #[test]
    fn url_with_unix_socket_host() {
        let c: Config = "postgres://%2Fvar%2Frun%2Fpostgresql/db".parse().unwrap();
        assert_eq!(c.hosts, vec![Host::Unix("/var/run/postgresql".into())]);
        let c: Config = "postgres:///db?host=/tmp&port=5444".parse().unwrap();
        assert_eq!(c.hosts, vec![Host::Unix("/tmp".into())]);
        assert_eq!(
            c.targets().unwrap(),
            vec![(Host::Unix("/tmp".into()), 5444)]
        );
    }

    #[test]
    fn key_value_with_quotes_and_escapes() {
        let c: Config = r"host=localhost port = 5433 password='it\'s a \\ secret' dbname=x options='-c search_path=a'"
            .parse()
            .unwrap();
        assert_eq!(c.password.as_deref(), Some(&br"it's a \ secret"[..]));
        assert_eq!(c.options.as_deref(), Some("-c search_path=a"));
        assert_eq!(c.ports, vec![5433]);
    }

    #[test]
    fn bad_input_names_the_problem() {
        let e = "host=x bogus=1".parse::<Config>().unwrap_err().to_string();
        assert!(e.contains("unknown connection parameter `bogus`"), "{e}");
        let e = "port=99999".parse::<Config>().unwrap_err().to_string();
        assert!(e.contains("invalid port `99999`"), "{e}");
        let e = "password='open".parse::<Config>().unwrap_err().to_string();
        assert!(e.contains("unterminated"), "{e}");
        let e = "sslmode=maybe".parse::<Config>().unwrap_err().to_string();
        assert!(e.contains("invalid sslmode"), "{e}");
        let e = "hostonly".parse::<Config>().unwrap_err().to_string();
        assert!(e.contains("missing `=`"), "{e}");
        let c: Config = "host=a,b,c port=1,2".parse().unwrap();
        assert!(
            c.targets()
                .unwrap_err()
                .to_string()
                .contains("3 hosts but 2 ports")
        );
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
            c.connect_timeout,
            Some(Duration::from_secs(2)),
            "libpq raises 1 s to 2 s"
        );
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
