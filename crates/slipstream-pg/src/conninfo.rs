//! Parsing connection strings: libpq's URL form (`postgres://user:pass@host:port/db?k=v`) and
//! its `key=value` form, into a [`Config`].

use std::str::FromStr;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::config::Host;
use crate::{Config, Error};

impl Config {
    /// Sets one libpq parameter by its keyword.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
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
            "keepalives" => {
                self.keepalives = Some(match value.trim() {
                    "1" => true,
                    "0" => false,
                    _ => {
                        return Err(Error::config(format!(
                            "invalid keepalives `{value}`: use 1 or 0"
                        )));
                    }
                })
            }
            "keepalives_idle" => self.keepalives_idle = Some(seconds("keepalives_idle", value)?),
            "keepalives_interval" => {
                self.keepalives_interval = Some(seconds("keepalives_interval", value)?)
            }
            "keepalives_count" => {
                self.keepalives_count = Some(value.trim().parse().map_err(|_| {
                    Error::config(format!(
                        "invalid keepalives_count `{value}`: expected a whole number"
                    ))
                })?)
            }
            "tcp_user_timeout" => {
                let ms: u64 = value.trim().parse().map_err(|_| {
                    Error::config(format!(
                        "invalid tcp_user_timeout `{value}`: expected milliseconds"
                    ))
                })?;
                self.tcp_user_timeout = (ms > 0).then(|| Duration::from_millis(ms));
            }
            "statement_cache_size" => {
                self.statement_cache_size = Some(value.trim().parse().map_err(|_| {
                    Error::config(format!(
                        "invalid statement_cache_size `{value}`: expected a whole number (0 turns the cache off)"
                    ))
                })?)
            }
            "fetch_size" => self.fetch_size = Some(value.parse()?),
            "max_result_buffer" => {
                self.max_result_buffer = Some(parse_bytes(value).ok_or_else(|| {
                    Error::config(format!(
                        "invalid max_result_buffer `{value}`: expected bytes, e.g. 1048576, 512kB or 4MB"
                    ))
                })?)
            }
            // Accepted so that libpq strings work unchanged: client_encoding is always UTF8 here.
            "client_encoding" | "fallback_application_name" => {}
            "target_session_attrs" => self.target_session_attrs = Some(value.parse()?),
            "load_balance_hosts" => self.load_balance_hosts = Some(value.parse()?),
            "passfile" => self.passfile = Some(value.into()),
            "require_auth" => self.require_auth = Some(value.parse()?),
            "channel_binding" => self.channel_binding = Some(value.parse()?),
            // No GSSAPI encryption: `prefer` falls back to TLS or plain, as libpq built without
            // GSSAPI does; `require` is refused rather than silently not applied.
            "gssencmode" => refuse_gssencmode(value)?,
            other => {
                return Err(Error::config(format!(
                    "unknown connection parameter `{other}` (supported: host, port, user, password, \
                     dbname, application_name, options, connect_timeout, sslmode, sslrootcert, sslcert, sslkey, \
                     keepalives, keepalives_idle, keepalives_interval, keepalives_count, tcp_user_timeout, \
                     statement_cache_size, fetch_size, max_result_buffer, target_session_attrs, \
                     load_balance_hosts, passfile, require_auth, channel_binding, gssencmode)"
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
            let key = decode(k)?;
            if key == "password" {
                // A password is bytes, as in the userinfo part: any encoding works.
                config.password = Some(percent_decode_str(v).collect());
                continue;
            }
            let value = percent_decode_str(v).decode_utf8().map_err(|_| {
                // The value may be a secret (a password): never echo it.
                Error::config(format!(
                    "the value of URL query parameter `{key}` is not valid UTF-8 after \
                     percent-decoding; percent-encode its UTF-8 bytes"
                ))
            })?;
            config.set(&key, &value)?;
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

/// A byte count as PostgreSQL writes memory settings: `65536`, `65536B`, `64kB`, `4MB`, `1GB`
/// (units of 1024, case-insensitive; `KiB`/`MiB`/`GiB` too). `None` if it is not one.
pub(crate) fn parse_bytes(value: &str) -> Option<usize> {
    let value = value.trim();
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    let number: usize = number.parse().ok()?;
    let scale: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "kib" => 1 << 10,
        "mb" | "mib" => 1 << 20,
        "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale)
}

/// Accepts `gssencmode=disable|prefer` (there is no GSSAPI encryption to prefer) and refuses
/// `require`: a protection silently not applied would be worse than a refusal.
fn refuse_gssencmode(value: &str) -> Result<(), Error> {
    match value.trim() {
        "disable" | "prefer" => Ok(()),
        "require" => Err(Error::config(
            "gssencmode=require is not supported by slipstream-pg (it has no GSSAPI encryption), \
             so the connection is refused; use TLS (sslmode=verify-full) instead, or \
             gssencmode=disable",
        )),
        other => Err(Error::config(format!(
            "invalid gssencmode `{other}`: use disable, prefer or require"
        ))),
    }
}

fn seconds(key: &str, value: &str) -> Result<Duration, Error> {
    value
        .trim()
        .parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| Error::config(format!("invalid {key} `{value}`: expected whole seconds")))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SslMode;

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
    fn cache_and_fetch_settings_parse_and_bad_values_say_what_is_expected() {
        let c: Config = "statement_cache_size=0 fetch_size=500 max_result_buffer=4MB"
            .parse()
            .unwrap();
        assert_eq!(c.get_statement_cache_size(), 0);
        assert_eq!(c.get_fetch_size(), crate::FetchSize::Rows(500));
        assert_eq!(c.get_max_result_buffer(), Some(4 << 20));
        let c: Config = "postgres://h/db?fetch_size=128kB".parse().unwrap();
        assert_eq!(c.get_fetch_size(), crate::FetchSize::Bytes(128 << 10));
        assert_eq!(
            c.get_statement_cache_size(),
            crate::DEFAULT_STATEMENT_CACHE_SIZE
        );
        for (bad, says) in [
            ("statement_cache_size=-1", "0 turns the cache off"),
            ("fetch_size=lots", "64kB"),
            ("max_result_buffer=4parsecs", "4MB"),
        ] {
            let e = bad.parse::<Config>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(parse_bytes("1 GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("64KB"), Some(64 << 10));
        assert_eq!(parse_bytes("MB"), None);
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
    fn keepalive_parameters() {
        let c: Config = "keepalives=1 keepalives_idle=30 keepalives_interval=5 keepalives_count=3 tcp_user_timeout=9000"
            .parse()
            .unwrap();
        assert_eq!(c.keepalives, Some(true));
        assert_eq!(c.keepalives_idle, Some(Duration::from_secs(30)));
        assert_eq!(c.keepalives_interval, Some(Duration::from_secs(5)));
        assert_eq!(c.keepalives_count, Some(3));
        assert_eq!(c.tcp_user_timeout, Some(Duration::from_millis(9000)));
        assert!("keepalives=yes".parse::<Config>().is_err());
        assert!(
            "keepalives_idle=soon"
                .parse::<Config>()
                .unwrap_err()
                .to_string()
                .contains("keepalives_idle")
        );
    }
}
