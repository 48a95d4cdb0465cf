//! Parsing connection strings: libpq's URL form (`postgres://user:pass@host:port/db?k=v`) and
//! its `key=value` form, into a [`Config`].

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::config::Host;
use crate::{Config, Error};

impl Config {
    /// Sets one libpq parameter by its keyword.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.set_value(key, value)?;
        // A file or `require_auth` given empty is libpq's default, so its field stays unset;
        // but it was given, which keeps its variable and a service's value out (libpq's
        // conninfo_add_defaults fills only what is NULL, and an empty string is not).
        if let Some(param) = EMPTY_IS_DEFAULT.iter().find(|p| **p == key) {
            self.given_empty.retain(|p| p != param);
            if value.is_empty() {
                self.given_empty.push(param);
            }
        }
        Ok(())
    }

    fn set_value(&mut self, key: &str, value: &str) -> Result<(), Error> {
        // The startup packet and the password message are NUL-terminated strings: a NUL would
        // fail the connection later, naming no parameter (libpq's strings cannot hold one).
        // The value is not shown: it may be the password.
        if value.contains('\0') {
            return Err(Error::config(format!(
                "the value of `{key}` contains a NUL byte, which no connection parameter can \
                 carry: remove it"
            )));
        }
        match key {
            // libpq's lists: an empty entry is the default host or port (`host=,db2`,
            // `port=5433,`), and a value given empty (`host=''`) is one default entry, which
            // keeps PGHOST out as any given value does.
            "host" => {
                self.hosts = value
                    .split(',')
                    .map(|h| {
                        if h.is_empty() {
                            Host::default_for_machine()
                        } else {
                            Host::parse(h)
                        }
                    })
                    .collect();
            }
            "port" => {
                self.ports = value
                    .split(',')
                    .map(port_entry)
                    .collect::<Result<_, _>>()?;
            }
            "user" => self.user = Some(value.into()),
            "password" => self.password = Some(value.as_bytes().to_vec()),
            "dbname" => self.dbname = Some(value.into()),
            "application_name" => self.application_name = Some(value.into()),
            "options" => self.options = Some(value.into()),
            "connect_timeout" => {
                let secs = c_int(value).ok_or_else(|| {
                    Error::config(format!(
                        "invalid connect_timeout `{value}`: expected whole seconds, up to {}",
                        i32::MAX
                    ))
                })?;
                // libpq: zero or negative means wait forever (and that, once given, keeps
                // PGCONNECT_TIMEOUT out); 1 is raised to 2.
                self.connect_timeout =
                    Some((secs > 0).then(|| Duration::from_secs(secs.max(2) as u64)));
            }
            "sslmode" => self.ssl_mode = Some(value.parse()?),
            // Empty is libpq's "not set": the default file under ~/.postgresql.
            "sslrootcert" => self.ssl_root_cert = non_empty(value).map(PathBuf::from),
            "sslcert" => self.ssl_cert = non_empty(value).map(PathBuf::from),
            "sslkey" => self.ssl_key = non_empty(value).map(PathBuf::from),
            "keepalives" => {
                // libpq: any integer, non-zero meaning on.
                let n = c_int(value).ok_or_else(|| {
                    Error::config(format!(
                        "invalid keepalives `{value}`: use 1 (on) or 0 (off)"
                    ))
                })?;
                self.keepalives = Some(n != 0);
            }
            "keepalives_idle" => self.keepalives_idle = Some(seconds("keepalives_idle", value)?),
            "keepalives_interval" => {
                self.keepalives_interval = Some(seconds("keepalives_interval", value)?)
            }
            "keepalives_count" => {
                // As libpq: a C int, a negative one taken as 0 (which the kernel refuses when
                // connecting, naming the parameter).
                let n = c_int(value).ok_or_else(|| {
                    Error::config(format!(
                        "invalid keepalives_count `{value}`: expected a whole number up to {}",
                        i32::MAX
                    ))
                })?;
                self.keepalives_count = Some(n.max(0) as u32);
            }
            "tcp_user_timeout" => {
                // libpq reads a C int and takes a negative one as 0, the system's default.
                let ms = c_int(value).ok_or_else(|| {
                    Error::config(format!(
                        "invalid tcp_user_timeout `{value}`: expected milliseconds, a whole number up to {}",
                        i32::MAX
                    ))
                })?;
                self.tcp_user_timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
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
            "client_encoding" => {}
            // libpq asks OpenSSL for compression, which no current build offers; rustls never
            // compresses. Accepted, as libpq accepts it, with either value.
            "sslcompression" => {}
            // libpq 15 reads a value starting with `1` as SNI on, anything else as off.
            "sslsni" => self.ssl_sni = Some(value.starts_with('1')),
            // libpq's old spelling, stored as `sslmode` in its place (so the later of the two
            // wins): a value starting with `1` is `require`, anything else `prefer`.
            "requiressl" => {
                self.ssl_mode = Some(if value.starts_with('1') {
                    crate::SslMode::Require
                } else {
                    crate::SslMode::Prefer
                })
            }
            "fallback_application_name" => self.fallback_application_name = Some(value.into()),
            // Looked up in the service files when the environment is applied (`apply_env`).
            "service" => {
                self.service = Some(value.into());
                self.service_read = false;
            }
            "target_session_attrs" => {
                self.target_session_attrs = Some(exact(key, value)?.parse()?)
            }
            "load_balance_hosts" => self.load_balance_hosts = Some(exact(key, value)?.parse()?),
            // Empty is libpq's "not set": ~/.pgpass, and any method.
            "passfile" => self.passfile = non_empty(value).map(PathBuf::from),
            "require_auth" => {
                self.require_auth = non_empty(value).map(str::parse).transpose()?;
            }
            "channel_binding" => self.channel_binding = Some(exact(key, value)?.parse()?),
            // No GSSAPI encryption: `prefer` falls back to TLS or plain, as libpq built without
            // GSSAPI does; `require` is refused rather than silently not applied.
            "gssencmode" => {
                refuse_gssencmode(value)?;
                self.gssencmode_given = true;
            }
            other => {
                return Err(Error::config(format!(
                    "unknown connection parameter `{other}` (supported: host, port, user, password, \
                     dbname, application_name, options, connect_timeout, sslmode, sslrootcert, sslcert, sslkey, \
                     sslsni, sslcompression, requiressl, \
                     keepalives, keepalives_idle, keepalives_interval, keepalives_count, tcp_user_timeout, \
                     statement_cache_size, fetch_size, max_result_buffer, target_session_attrs, \
                     load_balance_hosts, passfile, require_auth, channel_binding, gssencmode, \
                     client_encoding, fallback_application_name, service)"
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
        let UrlParts {
            userinfo,
            hosts: hostlist,
            path,
            query,
        } = split_url(rest);
        let (path, query) = (path.unwrap_or(""), query.unwrap_or(""));
        let mut config = Config::new();
        let mut pending = LastWins::default();
        if let Some(userinfo) = userinfo {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                config.user = Some(decode(user)?);
            }
            // An empty one (`u:@h`) is not set, as in libpq, so PGPASSWORD still applies.
            if let Some(p) = password.filter(|p| !p.is_empty()) {
                config.password = Some(uri_decode(p, "the URL's password")?);
            }
        }
        // As libpq: the hosts and the ports written after them make two comma lists, position
        // by position (an entry left out is empty: the default), each set only if it says
        // anything. So `h1,h2:7777` gives h1 the default port, and two port-less hosts both
        // get 5432 (PGPORT applies only where no port list is set at all).
        let read_hosts = |config: &mut Config, pending: &mut LastWins| -> Result<(), Error> {
            let (mut hosts, mut ports) = (Vec::new(), Vec::new());
            if !hostlist.is_empty() {
                for part in hostlist.split(',') {
                    let (host, port) = split_host_port(part)?;
                    hosts.push(host);
                    ports.push(port.unwrap_or(""));
                }
            }
            let (hosts, ports) = (hosts.join(","), ports.join(","));
            if !hosts.is_empty() {
                pending.set(config, "host", &decode(&hosts)?);
            }
            if !ports.is_empty() {
                pending.set(config, "port", &decode(&ports)?);
            }
            Ok(())
        };
        // An `@` after the host list means a password with a `/` in it, which ended the
        // host list early (as in libpq): what was read as `host:port` is `user:` and the
        // password's start, so the error must not show it (nor wait for a later `?port=`).
        let misplaced_at = userinfo.is_none() && (path.contains('@') || query.contains('@'));
        let hosts_read = read_hosts(&mut config, &mut pending);
        if misplaced_at && (hosts_read.is_err() || pending.failed()) {
            return Err(Error::config(
                "cannot read the URL's hosts, and an `@` follows them: if the password \
                 contains `/`, percent-encode it as %2F",
            ));
        }
        hosts_read?;
        if !path.is_empty() {
            config.dbname = Some(decode(path)?);
        }
        // As libpq (`conninfo_uri_parse_params`): one `&` between pairs, allowed once at the
        // end (and a bare `?`), and exactly one `=` in each pair. Skipping an empty pair or
        // reading `a=b=c` as `a` = `b=c` would accept strings libpq refuses.
        let mut pairs: Vec<&str> = query.split('&').collect();
        if pairs.last() == Some(&"") {
            pairs.pop();
        }
        for pair in pairs {
            if pair.is_empty() {
                return Err(Error::config(
                    "empty URL query parameter (`?&` or `&&`): expected key=value pairs \
                     separated by one `&`",
                ));
            }
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::config(format!(
                    "invalid URL query parameter `{pair}`: expected key=value"
                ))
            })?;
            let key = decode(k)?;
            if v.contains('=') {
                // The value may be a secret: name the key only.
                return Err(Error::config(format!(
                    "a second `=` in the value of URL query parameter `{key}`; \
                     percent-encode it as %3D"
                )));
            }
            // The value may be a secret (a password): errors name the key, never the value.
            let what = format!("the value of URL query parameter `{key}`");
            if key == "password" {
                // A password is bytes, as in the userinfo part: any encoding works.
                config.password = Some(uri_decode(v, &what)?);
                continue;
            }
            let value = String::from_utf8(uri_decode(v, &what)?).map_err(|_| {
                Error::config(format!(
                    "the value of URL query parameter `{key}` is not valid UTF-8 after \
                     percent-decoding; percent-encode its UTF-8 bytes"
                ))
            })?;
            // libpq's one JDBC spelling, in URLs only and only exactly `ssl=true`: a URL
            // copied from a JDBC configuration asks for TLS, and must not be refused (or, worse,
            // be read as anything weaker than `require`).
            if key == "ssl" && value == "true" {
                pending.set(&mut config, "sslmode", "require");
                continue;
            }
            pending.set(&mut config, &key, &value);
        }
        pending.finish()?;
        Ok(config)
    }

    fn parse_key_value(s: &str) -> Result<Config, Error> {
        let mut config = Config::new();
        let mut pending = LastWins::default();
        for pair in key_value_pairs(s)? {
            pending.set(&mut config, &pair.key, &pair.value);
        }
        pending.finish()?;
        Ok(config)
    }
}

/// Parameters set in the order a string gives them, where only the last value of each counts,
/// as in libpq: it keeps the last and checks that one when connecting. So `sslmode=bogus
/// sslmode=require` is `require`, and `postgres://h:0/db?port=5432` uses port 5432; refusing
/// an overridden value would refuse strings libpq connects with. An unknown parameter is
/// refused wherever it is (libpq refuses it while reading the string).
#[derive(Default)]
struct LastWins {
    /// (parameter, why its last value was refused), in the order given.
    refused: Vec<(String, Error)>,
}

impl LastWins {
    fn set(&mut self, config: &mut Config, key: &str, value: &str) {
        // libpq stores `requiressl` as `sslmode`: the later of the two wins.
        let slot = if key == "requiressl" { "sslmode" } else { key };
        self.refused.retain(|(k, _)| k != slot);
        // `Config::set` changes nothing when it refuses, so an earlier value stays in place
        // until the refusal is reported.
        if let Err(e) = config.set(key, value) {
            self.refused.push((slot.to_string(), e));
        }
    }

    fn failed(&self) -> bool {
        !self.refused.is_empty()
    }

    /// The first refusal still standing, if any.
    fn finish(self) -> Result<(), Error> {
        match self.refused.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }
}

/// A URL's parts after `scheme://`, split where libpq's `conninfo_uri_parse_options` splits
/// them. The one splitter, for reading and for [`redact_password`].
struct UrlParts<'a> {
    userinfo: Option<&'a str>,
    /// Up to the first `/` or `?` after the userinfo.
    hosts: &'a str,
    /// After that `/`, up to the next `?`.
    path: Option<&'a str>,
    /// After the `?`.
    query: Option<&'a str>,
}

fn split_url(rest: &str) -> UrlParts<'_> {
    // libpq looks for the userinfo's `@` up to the first `/` only: a `?` before it does not
    // stop the search (`postgres://u:pa?ss@h` has the password `pa?ss`, and
    // `postgres://h?application_name=a@b` the user `h?application_name=a` and the host `b`).
    // libpq takes the first `@`; the client takes the last one before the host list's `/` or
    // `?` (docs/client.md: a password may hold an unencoded `@`), and only when there is
    // none, libpq's first `@` after a `?`.
    let slash = rest.find('/').unwrap_or(rest.len());
    let host_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let at = rest[..host_end]
        .rfind('@')
        .or_else(|| rest[..slash].find('@'));
    let (userinfo, rest) = match at {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (path, query) = match tail.strip_prefix('/') {
        Some(after) => match after.split_once('?') {
            Some((path, query)) => (Some(path), Some(query)),
            None => (Some(after), None),
        },
        None => (None, tail.strip_prefix('?')),
    };
    UrlParts {
        userinfo,
        hosts,
        path,
        query,
    }
}

/// The URL in `s`, if `s` is one: it starts with `postgres://` or `postgresql://` once the
/// ASCII whitespace around it is dropped. libpq refuses a URL after whitespace and keeps
/// whitespace at its end in its last part; the client drops both (docs/client.md lists the
/// difference), so a URL read from a file with its newline still works. A `key=value` string
/// is not trimmed: its reader skips whitespace as libpq's does, and a no-break space or an
/// escaped trailing space is part of a value.
fn as_url(s: &str) -> Option<&str> {
    let t = s.trim_matches(|c| is_space(&c));
    (t.starts_with("postgres://") || t.starts_with("postgresql://")).then_some(t)
}

/// One pair of a `key=value` connection string, as the client reads it.
struct Pair<'a> {
    key: String,
    /// Unquoted and unescaped.
    value: String,
    /// The value as written (quotes and escapes included).
    written: &'a str,
}

/// The pairs of a `key=value` connection string, read as libpq reads them: spaces may surround
/// `=`, and a value may be quoted (`'...'`) and hold `\` escapes. The one reader of this form,
/// for connecting and for [`redact_password`].
fn key_value_pairs(s: &str) -> Result<Vec<Pair<'_>>, Error> {
    let mut pairs = Vec::new();
    let mut chars = s.char_indices().peekable();
    let space = |&(_, c): &(usize, char)| is_space(&c);
    let at = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        chars.peek().map_or(s.len(), |&(i, _)| i)
    };
    loop {
        while chars.next_if(space).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|&(_, c)| c != '=' && !is_space(&c)) {
            key.push(c);
        }
        while chars.next_if(space).is_some() {}
        if chars.next().map(|(_, c)| c) != Some('=') {
            // A URL whose scheme the client does not take (`POSTGRES://`, `jdbc:postgresql://`)
            // lands here whole: echoing it would echo its password.
            if let Some((scheme, _)) = key.split_once("://") {
                return Err(Error::config(format!(
                    "`{scheme}://...` is not a connection string slipstream-pg reads: a URL \
                     starts with postgres:// or postgresql:// (in lower case, as for libpq); \
                     otherwise give key=value pairs"
                )));
            }
            return Err(Error::config(format!(
                "missing `=` after `{key}` in connection string: expected key=value pairs"
            )));
        }
        while chars.next_if(space).is_some() {}
        let start = at(&mut chars);
        let mut value = String::new();
        if chars.next_if(|&(_, c)| c == '\'').is_some() {
            let unterminated = || {
                Error::config(format!(
                    "unterminated quoted value for `{key}` in connection string"
                ))
            };
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('\'') => break,
                    Some('\\') => value.push(chars.next().ok_or_else(unterminated)?.1),
                    Some(c) => value.push(c),
                    None => return Err(unterminated()),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|&(_, c)| !is_space(&c)) {
                if c == '\\' {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                } else {
                    value.push(c);
                }
            }
        }
        let end = at(&mut chars);
        pairs.push(Pair {
            key,
            value,
            written: &s[start..end],
        });
    }
    Ok(pairs)
}

/// A connection string (a URL or `key=value` pairs) with its password replaced by `***`,
/// wherever the client reads one: a URL's userinfo (split from the hosts at the last `@`, as
/// the client splits it) and its `password` query parameter (percent-encoded or not); a
/// `key=value` string's `password`, with or without spaces around `=`, quoted or not. For
/// logs and result files. A `key=value` string the client cannot read is not echoed if it
/// holds the word `password`.
///
/// ```
/// use slipstream_pg::redact_password;
/// assert_eq!(redact_password("postgres://u:secret@h/db"), "postgres://u:***@h/db");
/// assert_eq!(redact_password("postgres://h/db?password=secret"), "postgres://h/db?password=***");
/// assert_eq!(redact_password("host=h password = 'my secret'"), "host=h password=***");
/// ```
pub fn redact_password(conninfo: &str) -> String {
    // A URL exactly when `Config::from_str` reads one: a `://` inside a key=value string's
    // value does not make it a URL.
    let trimmed = as_url(conninfo).unwrap_or_default();
    for scheme in ["postgres", "postgresql"] {
        if let Some(rest) = trimmed
            .strip_prefix(scheme)
            .and_then(|r| r.strip_prefix("://"))
        {
            return redact_url(scheme, &misplaced_password_cut(trimmed, rest));
        }
    }
    match key_value_pairs(conninfo) {
        Ok(pairs) => pairs
            .iter()
            .map(|p| match p.key.as_str() {
                "password" => "password=***".to_string(),
                key => format!("{key}={}", p.written),
            })
            .collect::<Vec<_>>()
            .join(" "),
        // Without the word, no pair could have been the password; without an `@`, no
        // userinfo of a URL of another scheme either.
        Err(_) if !conninfo.contains("password") && !conninfo.contains('@') => conninfo.to_string(),
        Err(_) => "(a connection string the client cannot read; not shown)".into(),
    }
}

/// `rest` (a URL after its `scheme://`) with the span from its first `:` to its last `@`
/// replaced by `:***`, when the URL does not parse because of an `@` after its host list: a
/// password with an unencoded `/` or `?` (see `parse_url`). A URL that parses is never
/// touched, so an `@` in a valid URL's path or query stays as written.
fn misplaced_password_cut(url: &str, rest: &str) -> String {
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let cut = || {
        let at = rest.rfind('@').filter(|&at| at > authority_end)?;
        let colon = rest[..authority_end].find(':')?;
        url.parse::<Config>()
            .is_err()
            .then(|| format!("{}:***{}", &rest[..colon], &rest[at..]))
    };
    cut().unwrap_or_else(|| rest.to_string())
}

fn redact_url(scheme: &str, rest: &str) -> String {
    let parts = split_url(rest);
    let mut out = format!("{scheme}://");
    match parts.userinfo.map(|u| (u, u.split_once(':'))) {
        Some((_, Some((user, _)))) => out.push_str(&format!("{user}:***@")),
        Some((user, None)) => out.push_str(&format!("{user}@")),
        None => {}
    }
    out.push_str(parts.hosts);
    if let Some(path) = parts.path {
        out.push('/');
        out.push_str(path);
    }
    if let Some(q) = parts.query {
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if percent_decode_str(k).decode_utf8_lossy() == "password" => {
                    format!("{k}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// libpq's separator in `key=value` strings: C's `isspace` in the C locale. Unicode spaces (a
/// no-break space, U+2028) are part of a value there, as they must be here: splitting on them
/// would let a value that was checked for spaces carry another parameter.
fn is_space(c: &char) -> bool {
    c.is_ascii() && is_c_space(*c as u8)
}

/// C's `isspace` in the C locale, for every reader of libpq's text formats (strings, service
/// files).
pub(crate) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// One entry of a port list: empty is the default port, as in libpq.
fn port_entry(p: &str) -> Result<u16, Error> {
    if p.is_empty() {
        return Ok(crate::config::DEFAULT_PORT);
    }
    // libpq's `strtol` skips C whitespace around the number, but a port of whitespace alone
    // is no number (it is not the empty entry), and a no-break space makes it invalid.
    let p = p.trim_matches(|c| is_space(&c));
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Error::config(format!(
            "invalid port `{p}`: expected a number 1-65535"
        ))),
    }
}

/// `value` if no whitespace surrounds it. libpq compares these parameters' values exactly
/// (`' any'` is not `any`, and is refused), while their parsers also serve callers that trim.
fn exact<'a>(key: &str, value: &'a str) -> Result<&'a str, Error> {
    if value.trim() == value {
        Ok(value)
    } else {
        Err(Error::config(format!(
            "invalid {key} `{value}`: remove the whitespace around the value (libpq takes it \
             exactly as written)"
        )))
    }
}

/// Parameters whose empty value is libpq's default and leaves the field unset.
const EMPTY_IS_DEFAULT: [&str; 5] = [
    "sslrootcert",
    "sslcert",
    "sslkey",
    "passfile",
    "require_auth",
];

fn non_empty(value: &str) -> Option<&str> {
    (!value.is_empty()).then_some(value)
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
    match exact("gssencmode", value)? {
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

/// A keepalive time as libpq reads it: a C int of seconds, a negative one taken as 0 (which
/// the kernel refuses when connecting, naming the parameter).
fn seconds(key: &str, value: &str) -> Result<Duration, Error> {
    c_int(value)
        .map(|n| Duration::from_secs(n.max(0) as u64))
        .ok_or_else(|| {
            Error::config(format!(
                "invalid {key} `{value}`: expected whole seconds, up to {}",
                i32::MAX
            ))
        })
}

/// An integer parameter as libpq's `parse_int_param` reads it: C whitespace around it, an
/// optional sign, and a value that fits a C `int` (libpq refuses a larger one, so reading it
/// into a wider type would accept strings libpq refuses).
fn c_int(value: &str) -> Option<i32> {
    value.trim_matches(|c| is_space(&c)).parse().ok()
}

/// A URL part that is not secret (user, hosts, ports, database, a query key), decoded as
/// [`uri_decode`] decodes and then read as UTF-8; errors quote the part as written.
fn decode(s: &str) -> Result<String, Error> {
    String::from_utf8(uri_decode(s, &format!("`{s}`"))?)
        .map_err(|_| Error::config(format!("`{s}` is not valid UTF-8 after percent-decoding")))
}

/// Percent-decodes one part of a URL as libpq's `conninfo_uri_decode` does: a `%` must be
/// followed by two hex digits, and `%00` is refused (no parameter can hold a NUL: the startup
/// packet and the password message are NUL-terminated strings). A lenient decoder would keep
/// a bad token as written, so `postgres://u:100%@h` would connect with a password libpq never
/// sends. `what` names the part in errors; for a secret it must not contain the value.
fn uri_decode(s: &str, what: &str) -> Result<Vec<u8>, Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == 0 {
            // Written as is rather than as %00: refused alike (see `Config::set`).
            return Err(Error::config(format!(
                "{what} contains a NUL byte, which no connection parameter can carry: remove it"
            )));
        }
        if bytes[i] != b'%' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        // Checked digit by digit: `u8::from_str_radix` would also take a sign (`%+1`).
        let hex = match bytes.get(i + 1..i + 3) {
            Some(&[h, l]) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => {
                (hex_value(h) << 4) | hex_value(l)
            }
            _ => {
                return Err(Error::config(format!(
                    "invalid percent-encoding in {what}: `%` must be followed by two hex \
                     digits; write a literal `%` as %25"
                )));
            }
        };
        if hex == 0 {
            return Err(Error::config(format!(
                "invalid percent-encoding in {what}: %00 (a NUL byte) cannot be sent to the \
                 server in any parameter"
            )));
        }
        out.push(hex);
        i += 3;
    }
    Ok(out)
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

/// Splits `host:port`, `[v6]:port`, `host` or `:port`, as libpq's `conninfo_uri_parse`: an
/// IPv6 address must be in brackets (and not empty), and an unbracketed host ends at its first
/// `:`, so `::1` or `h:1:2` are refused rather than split at a guessed colon.
fn split_host_port(s: &str) -> Result<(&str, Option<&str>), Error> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| Error::config(format!("unterminated `[` in host `{s}`")))?;
        if host.is_empty() {
            return Err(Error::config(format!(
                "empty IPv6 address `[]` in URL host `{s}`: write the address in the brackets, \
                 or leave the host out for the default"
            )));
        }
        return match after.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(Error::config(format!(
                "unexpected `{after}` after the IPv6 address in host `{s}`: expected `:port`, `,`, `/` or the end"
            ))),
        };
    }
    Ok(match s.split_once(':') {
        Some((_, p)) if p.contains(':') => {
            return Err(Error::config(format!(
                "more than one `:` in URL host `{s}`: write an IPv6 address in brackets, \
                 e.g. postgres://[::1]:5432/db"
            )));
        }
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    })
}

impl FromStr for Config {
    type Err = Error;

    /// Parses a URL (`postgres://user:pass@host:port/db?sslmode=require`) or a libpq key=value
    /// string (`host=... port=... user=...`). No environment variables are applied.
    fn from_str(s: &str) -> Result<Config, Error> {
        match as_url(s) {
            Some(url) => Config::parse_url(url),
            None => Config::parse_key_value(s),
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
        assert_eq!(c.get_connect_timeout(), Some(Duration::from_secs(7)));
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
    fn lists_follow_libpq_position_by_position() {
        let c: Config = "postgres://a,b:7777/db".parse().unwrap();
        assert_eq!(
            c.targets().unwrap(),
            vec![(Host::Tcp("a".into()), 5432), (Host::Tcp("b".into()), 7777)],
            "a URL's port belongs to the host it follows"
        );
        let c: Config = "postgres://a,b/db".parse().unwrap();
        assert_eq!(
            c.ports,
            vec![5432, 5432],
            "two port-less hosts: the port list is set"
        );
        let c: Config = "postgres://a/db".parse().unwrap();
        assert!(
            c.ports.is_empty(),
            "one port-less host leaves the port to PGPORT"
        );
        let c: Config = "host=a,b port=7777,".parse().unwrap();
        assert_eq!(
            c.ports,
            vec![7777, 5432],
            "an empty port entry is the default"
        );
        let c: Config = "host=,b port=1,2".parse().unwrap();
        assert_eq!(c.hosts.len(), 2, "an empty host entry is the default host");
        assert_eq!(c.hosts[0], Host::default_for_machine());
        let c: Config = "host=''".parse().unwrap();
        assert_eq!(c.hosts, vec![Host::default_for_machine()]);
        assert!("port=0".parse::<Config>().is_err());
        assert!("postgres://[::1]junk:6000/db".parse::<Config>().is_err());
        assert!("application_name='abc\\".parse::<Config>().is_err());
    }

    #[test]
    fn only_ascii_whitespace_separates_pairs() {
        let c: Config = "user=nobody\u{a0}user=postgres".parse().unwrap();
        assert_eq!(c.user.as_deref(), Some("nobody\u{a0}user=postgres"));
        let c: Config = "user=a\x0bdbname=b".parse().unwrap();
        assert_eq!(
            (c.user.as_deref(), c.dbname.as_deref()),
            (Some("a"), Some("b"))
        );
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
        // libpq takes a negative timeout as 0, the system's default, and refuses what is not
        // a C int. Before session 48 `-1` was refused here while libpq connected with it.
        let c: Config = "tcp_user_timeout=-1".parse().unwrap();
        assert_eq!(c.tcp_user_timeout, None);
        let e = "tcp_user_timeout=3000000000".parse::<Config>().unwrap_err();
        assert!(e.to_string().contains("tcp_user_timeout"), "{e}");
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

#[cfg(test)]
mod redact_tests {
    /// Other values are kept as written (quotes, escapes), so the text still connects the same
    /// way; a string the client cannot read is not echoed, in case it held a password.
    #[test]
    fn other_values_stay_as_written_and_an_unreadable_string_is_not_shown() {
        let given = "application_name='a b' password=x dbname=d\\ b";
        let redacted = super::redact_password(given);
        assert_eq!(redacted, "application_name='a b' password=*** dbname=d\\ b");
        let (before, after): (super::Config, super::Config) =
            (given.parse().unwrap(), redacted.parse().unwrap());
        assert_eq!(before.application_name, after.application_name);
        assert_eq!(before.dbname, after.dbname);
        for unreadable in ["password='unterminated secret", "secret password=x host=h"] {
            let shown = super::redact_password(unreadable);
            assert!(!shown.contains("secret"), "{unreadable} -> {shown}");
        }
        for (given, shown) in [
            // Without the word, nothing to hide: a label such as the bench's "(no database)".
            ("(no database)", "(no database)"),
            // A `://` in a key=value value is not a URL (the client reads the string as
            // pairs); before, this was treated as one and came back whole.
            ("host=h password=se://cret@x", "host=h password=***"),
            ("  postgres://u:secret@h/db", "postgres://u:***@h/db"),
        ] {
            assert_eq!(super::redact_password(given), shown, "{given}");
        }
        let other = super::redact_password("mysql://u:secret@h/db");
        assert!(!other.contains("secret"), "{other}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact_password("postgres://u:secret@h:5/db"),
            "postgres://u:***@h:5/db"
        );
        assert_eq!(
            super::redact_password("host=h password=secret user=u"),
            "host=h password=*** user=u"
        );
        assert_eq!(
            super::redact_password("postgres://u@h/db"),
            "postgres://u@h/db"
        );
    }

    /// Every form the client reads a password from (found by the attack of 2026-11-27: each
    /// of these kept the secret, or part of it, in the result file's `environment.database`
    /// and `context.command_line`).
    #[test]
    fn passwords_are_redacted_in_every_form_the_client_reads() {
        for (given, want) in [
            // A URL's query sets the password as its userinfo does.
            (
                "postgres://h/db?password=secret&sslmode=disable",
                "postgres://h/db?password=***&sslmode=disable",
            ),
            (
                "postgresql://h/db?PASSWORD=x&password=secret",
                "postgresql://h/db?PASSWORD=x&password=***",
            ),
            (
                "postgres://h/db?pass%77ord=secret",
                "postgres://h/db?pass%77ord=***",
            ),
            // The client splits userinfo from hosts at the last `@`.
            ("postgres://u:se@cret@h/db", "postgres://u:***@h/db"),
            // An `@` in the query is not userinfo.
            (
                "postgres://h/db?application_name=a@b:c",
                "postgres://h/db?application_name=a@b:c",
            ),
            // key=value: spaces around `=`, quoted values with spaces and escapes.
            (
                "host=h password = secret user=u",
                "host=h password=*** user=u",
            ),
            ("password='my secret' host=h", "password=*** host=h"),
            ("password='it\\'s secret' host=h", "password=*** host=h"),
        ] {
            let got = super::redact_password(given);
            assert_eq!(got, want, "{given}");
            assert!(
                !got.contains("secret") && !got.contains("cret"),
                "{given} -> {got}"
            );
        }
    }
}
