//! slipstream's reading of a connection string, and its comparison with libpq's: what counts
//! as reading alike, and the differences docs/client.md lists ([`Known`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use slipstream_pg::{ChannelBinding, Config, Host, SslMode, TargetSessionAttrs};

use super::oracle::{Oracle, Theirs};
use super::password::Catcher;

// ---- slipstream's reading -------------------------------------------------------------------

/// `Config::from_str`, and the host/port pairing libpq checks before connecting (slipstream
/// checks it when connecting, through the same code as `per_host`, after giving a
/// configuration without hosts the default one).
fn ours(s: &str) -> Result<Config, String> {
    let config: Config = s.parse().map_err(|e: slipstream_pg::Error| e.to_string())?;
    // libpq's connection attempts look a `service=` up, in the oracle's environment (no
    // PGSERVICEFILE, a home without files: the system file only); slipstream does when the
    // environment is applied, here the same one. attack_service_file.rs tests the lookup.
    let config = match config.get_service() {
        Some(_) => config
            .apply_vars(|name| (name == "HOME").then(|| "/nonexistent-attack-home".into()))
            .map_err(|e| e.to_string())?,
        None => config,
    };
    let with_host = match config.get_hosts() {
        [] => config.clone().host("/var/run/postgresql"),
        _ => config.clone(),
    };
    with_host.per_host().map_err(|e| e.to_string())?;
    Ok(config)
}

// ---- the differences docs/client.md lists ---------------------------------------------------

/// A difference from libpq 15 that docs/client.md lists, recognised by the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Known {
    /// "`hostaddr` is not supported", "No CRLs, `requirepeer` or TLS version bounds", "No GSSAPI" (`krbsrvname`, `gsslib`), and `replication`, `sslpassword`:
    /// refused, naming the parameter.
    Unsupported,
    /// "`gssencmode=require` is refused (no GSSAPI)", naming it.
    GssEncRequire,
    /// slipstream's own parameters (`statement_cache_size`, `fetch_size`,
    /// `max_result_buffer`) and libpq 16's (`load_balance_hosts`, `require_auth`), which
    /// libpq 15 refuses as unknown.
    NewerParameters,
    /// "A URL's userinfo ends at its last `@`": libpq splits at the first.
    UserinfoEndsAtLastAt,
    /// `sslrootcert=system` implies `verify-full`, as in libpq 16 (libpq 15 reads a file
    /// named `system`).
    SystemRoots,
    /// A URL part other than the password that is not UTF-8 once percent-decoded is refused;
    /// libpq passes the bytes on.
    NotUtf8,
    /// Whitespace around a URL is dropped: libpq refuses a URL after whitespace, and keeps
    /// whitespace at its end in its last part.
    WhitespaceAroundUrl,
    /// With `keepalives=0`, libpq 15 neither reads nor applies `keepalives_idle`,
    /// `keepalives_interval`, `keepalives_count` and `tcp_user_timeout`; slipstream checks
    /// them when reading the string (and applies `tcp_user_timeout`).
    CheckedWithKeepalivesOff,
}

/// libpq 15 parameters slipstream refuses by name (docs/client.md lists each).
const UNSUPPORTED: [&str; 10] = [
    "hostaddr",
    "sslcrl",
    "sslcrldir",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "replication",
    "sslpassword",
];

/// Parameters slipstream reads that libpq 15 does not know.
pub(super) const NEWER: [&str; 5] = [
    "statement_cache_size",
    "fetch_size",
    "max_result_buffer",
    "load_balance_hosts",
    "require_auth",
];

/// Whether `s` is a URL whose userinfo libpq and slipstream end at different `@`s: two or
/// more before the end of the host list.
fn userinfo_ends_differ(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("postgresql://")
        .or_else(|| s.strip_prefix("postgres://"))
    else {
        return false;
    };
    let end = rest.find('/').unwrap_or(rest.len());
    rest[..end].matches('@').count() >= 2
}

// ---- the comparison ---------------------------------------------------------------------------

/// `Ok(None)` when both read `s` alike, `Ok(Some(k))` when they differ as docs/client.md says
/// they do, `Err(what)` for any other difference.
fn compare(
    s: &str,
    theirs: &Theirs,
    ours: &Result<Config, String>,
) -> Result<Option<Known>, String> {
    let known_url_split = userinfo_ends_differ(s).then_some(Known::UserinfoEndsAtLastAt);
    match (theirs, ours) {
        (Theirs::Refused(_), Err(_)) => Ok(None),
        (Theirs::Refused(t), Ok(c)) => {
            if NEWER.iter().any(|k| {
                t.contains(&format!("invalid connection option \"{k}\""))
                    || t.contains(&format!("invalid URI query parameter: \"{k}\""))
            }) {
                return Ok(Some(Known::NewerParameters));
            }
            known_url_split
                .map(Some)
                .ok_or_else(|| format!("libpq refuses it ({}), slipstream reads {c:?}", t.trim()))
        }
        (
            Theirs::Read {
                refusal: Some(_), ..
            },
            Err(_),
        ) => Ok(None),
        // The kernel refuses a keepalive setting libpq passes it (`keepalives_idle=0`), and
        // slipstream passes it the same values when connecting, reporting the refusal then,
        // naming them (or refuses the string earlier).
        (
            Theirs::Read {
                refusal: Some(r), ..
            },
            Ok(_),
        ) if r.contains("setsockopt(") => Ok(None),
        (
            Theirs::Read {
                opts,
                refusal: None,
            },
            Err(e),
        ) => {
            if UNSUPPORTED
                .iter()
                .any(|k| opts.contains_key(*k) && e.contains(&format!("`{k}`")))
            {
                return Ok(Some(Known::Unsupported));
            }
            let keepalives_off = opts
                .get("keepalives")
                .and_then(|v| std::str::from_utf8(v).ok())
                .is_some_and(|v| v.trim_matches(c_space).parse::<i32>() == Ok(0));
            let timing = [
                "keepalives_idle",
                "keepalives_interval",
                "keepalives_count",
                "tcp_user_timeout",
            ];
            if keepalives_off && timing.iter().any(|k| e.contains(&format!("invalid {k} "))) {
                return Ok(Some(Known::CheckedWithKeepalivesOff));
            }
            if opts.get("gssencmode").map(Vec::as_slice) == Some(b"require")
                && e.contains("gssencmode=require")
            {
                return Ok(Some(Known::GssEncRequire));
            }
            // (Or hidden behind the refusal of a host list a password's `/` ended early.)
            let refused_text = e.contains("UTF-8") || e.contains("an `@` follows them");
            if refused_text && opts.values().any(|v| std::str::from_utf8(v).is_err()) {
                return Ok(Some(Known::NotUtf8));
            }
            known_url_split
                .map(Some)
                .ok_or_else(|| format!("libpq reads {}, slipstream refuses: {e}", show(opts)))
        }
        (
            Theirs::Read {
                opts,
                refusal: Some(r),
            },
            Ok(c),
        ) => known_url_split.map(Some).ok_or_else(|| {
            format!(
                "libpq reads {} but refuses a value when connecting ({r}); slipstream reads {c:?}",
                show(opts)
            )
        }),
        (
            Theirs::Read {
                opts,
                refusal: None,
            },
            Ok(c),
        ) => match fields_differ(opts, c) {
            None => Ok(None),
            Some(_) if opts.get("sslrootcert").map(Vec::as_slice) == Some(b"system") => {
                Ok(Some(Known::SystemRoots))
            }
            Some(diff) => known_url_split.map(Some).ok_or_else(|| {
                format!("libpq reads {}, slipstream reads {c:?}: {diff}", show(opts))
            }),
        },
    }
}

/// libpq's options as text, the password's value hidden.
fn show(opts: &BTreeMap<String, Vec<u8>>) -> String {
    let shown: Vec<String> = opts
        .iter()
        .map(|(k, v)| match k.as_str() {
            "password" => "password=<hidden>".to_string(),
            _ => format!("{k}={:?}", String::from_utf8_lossy(v)),
        })
        .collect();
    format!("{{{}}}", shown.join(" "))
}

/// C's `isspace` in the C locale, which libpq's `strtol` skips.
pub(super) fn c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

/// An integer as libpq's `parse_int_param` reads one (only called on values libpq accepted).
fn c_int(v: &str) -> i64 {
    v.trim_matches(c_space).parse().unwrap()
}

/// The first field that a user of slipstream would see differently from what libpq read.
fn fields_differ(opts: &BTreeMap<String, Vec<u8>>, c: &Config) -> Option<String> {
    let text = |k: &str| opts.get(k).map(|v| String::from_utf8(v.clone()).unwrap());
    let shown = format!("{c:?}");
    let debug_has = |field: &str, want: String| {
        let needle = format!(" {field}: {want}");
        let found = [",", " }"]
            .iter()
            .any(|end| shown.contains(&format!("{needle}{end}")));
        (!found).then(|| format!("expected `{needle}` in Debug"))
    };
    let check = |what: &str, same: bool, want: String| {
        (!same).then(|| format!("{what}: libpq's reading is {want}"))
    };

    let hosts: Vec<Host> = match text("host") {
        None => vec![],
        Some(list) => list
            .split(',')
            .map(|h| match h {
                "" if std::path::Path::new("/var/run/postgresql").is_dir() => {
                    Host::Unix("/var/run/postgresql".into())
                }
                "" => Host::Tcp("localhost".into()),
                // libpq's is_unixsock_path: `@` is Linux's abstract namespace.
                h if h.starts_with('/') || h.starts_with('@') => Host::Unix(h.into()),
                h => Host::Tcp(h.into()),
            })
            .collect(),
    };
    let ports: Vec<u16> = match text("port") {
        None => vec![],
        Some(list) => list
            .split(',')
            .map(|p| if p.is_empty() { 5432 } else { c_int(p) as u16 })
            .collect(),
    };
    let timeout = text("connect_timeout").and_then(|t| match c_int(&t) {
        n if n <= 0 => None,
        n => Some(Duration::from_secs(n.max(2) as u64)),
    });
    let ssl_mode = match text("sslmode").as_deref() {
        None => SslMode::Prefer,
        Some("disable") => SslMode::Disable,
        // docs/client.md: "`sslmode=allow` is `prefer`".
        Some("allow" | "prefer") => SslMode::Prefer,
        Some("require") => SslMode::Require,
        Some("verify-ca") => SslMode::VerifyCa,
        Some("verify-full") => SslMode::VerifyFull,
        Some(other) => return Some(format!("libpq took sslmode {other:?}")),
    };
    let tsa = match text("target_session_attrs").as_deref() {
        None | Some("any") => TargetSessionAttrs::Any,
        Some("read-write") => TargetSessionAttrs::ReadWrite,
        Some("read-only") => TargetSessionAttrs::ReadOnly,
        Some("primary") => TargetSessionAttrs::Primary,
        Some("standby") => TargetSessionAttrs::Standby,
        Some("prefer-standby") => TargetSessionAttrs::PreferStandby,
        Some(other) => return Some(format!("libpq took target_session_attrs {other:?}")),
    };
    let binding = match text("channel_binding").as_deref() {
        None | Some("prefer") => ChannelBinding::Prefer,
        Some("disable") => ChannelBinding::Disable,
        Some("require") => ChannelBinding::Require,
        Some(other) => return Some(format!("libpq took channel_binding {other:?}")),
    };
    let path = |k: &str| format!("{:?}", text(k).filter(|v| !v.is_empty()).map(PathBuf::from));
    let secs = |k: &str| {
        format!(
            "{:?}",
            text(k).map(|v| Duration::from_secs(c_int(&v).max(0) as u64))
        )
    };

    check("hosts", c.get_hosts() == hosts, format!("{hosts:?}"))
        .or_else(|| check("ports", c.get_ports() == ports, format!("{ports:?}")))
        .or_else(|| {
            check(
                "user",
                c.get_user() == text("user").as_deref(),
                format!("{:?}", text("user")),
            )
        })
        .or_else(|| {
            check(
                "dbname",
                c.get_dbname() == text("dbname").as_deref(),
                format!("{:?}", text("dbname")),
            )
        })
        .or_else(|| {
            check(
                "application_name",
                c.get_application_name() == text("application_name").as_deref(),
                format!("{:?}", text("application_name")),
            )
        })
        .or_else(|| {
            check(
                "password set",
                c.has_password() == opts.contains_key("password"),
                format!("{}", opts.contains_key("password")),
            )
        })
        .or_else(|| {
            check(
                "connect_timeout",
                c.get_connect_timeout() == timeout,
                format!("{timeout:?}"),
            )
        })
        .or_else(|| {
            check(
                "sslmode",
                c.get_ssl_mode() == ssl_mode,
                format!("{ssl_mode:?}"),
            )
        })
        .or_else(|| {
            let sni = text("sslsni").is_none_or(|v| v.starts_with('1'));
            check("sslsni", c.get_ssl_sni() == sni, format!("{sni}"))
        })
        .or_else(|| {
            check(
                "target_session_attrs",
                c.get_target_session_attrs() == tsa,
                format!("{tsa:?}"),
            )
        })
        .or_else(|| {
            check(
                "channel_binding",
                c.get_channel_binding() == binding,
                format!("{binding:?}"),
            )
        })
        .or_else(|| {
            let passfile = text("passfile")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from);
            check(
                "passfile",
                c.get_passfile() == passfile.as_deref(),
                format!("{passfile:?}"),
            )
        })
        .or_else(|| debug_has("options", format!("{:?}", text("options"))))
        .or_else(|| {
            debug_has(
                "fallback_application_name",
                format!("{:?}", text("fallback_application_name")),
            )
        })
        .or_else(|| debug_has("ssl_root_cert", path("sslrootcert")))
        .or_else(|| debug_has("ssl_cert", path("sslcert")))
        .or_else(|| debug_has("ssl_key", path("sslkey")))
        .or_else(|| {
            debug_has(
                "keepalives",
                format!("{:?}", text("keepalives").map(|v| c_int(&v) != 0)),
            )
        })
        .or_else(|| debug_has("keepalives_idle", secs("keepalives_idle")))
        .or_else(|| debug_has("keepalives_interval", secs("keepalives_interval")))
        .or_else(|| {
            debug_has(
                "keepalives_count",
                format!("{:?}", text("keepalives_count").map(|v| c_int(&v).max(0))),
            )
        })
        .or_else(|| {
            debug_has(
                "tcp_user_timeout",
                format!(
                    "{:?}",
                    text("tcp_user_timeout")
                        .map(|v| c_int(&v))
                        .filter(|&ms| ms > 0)
                        .map(|ms| Duration::from_millis(ms as u64))
                ),
            )
        })
        .or_else(|| {
            debug_has(
                "gssencmode_given",
                format!("{}", opts.contains_key("gssencmode")),
            )
        })
}

/// One string through both parsers: the verdicts and fields agree, or differ as
/// docs/client.md says; where both read a password, slipstream sends libpq's (to `catcher`);
/// no panic; no error shows the password libpq read.
pub(super) fn one_case(
    oracle: &mut Oracle,
    catcher: &Catcher,
    s: &str,
) -> Result<Option<Known>, String> {
    // A URL with whitespace around it is compared with libpq's reading of the URL alone
    // (docs/client.md: the whitespace is dropped).
    let trimmed = s.trim_matches(c_space);
    let is_url = trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://");
    let (asked, around) = match is_url && trimmed != s {
        true => (trimmed, Some(Known::WhitespaceAroundUrl)),
        false => (s, None),
    };
    let theirs = oracle.read(asked);
    let ours = std::panic::catch_unwind(|| ours(s))
        .map_err(|_| format!("slipstream panicked reading {s:?}"))?;
    if let (Err(e), Theirs::Read { opts, .. }) = (&ours, &theirs)
        && let Some(password) = opts.get("password").filter(|p| p.len() >= 3)
        && e.as_bytes()
            .windows(password.len())
            .any(|w| w == password.as_slice())
    {
        return Err(format!("{s:?}: the error shows the password: {e}"));
    }
    // redact_password hides the password wherever libpq reads one (checked where its text
    // appears once in the string, as written, so that no other part can be the match).
    if let Theirs::Read { opts, .. } = &theirs
        && let Some(password) = opts.get("password").filter(|p| p.len() >= 4)
        && let Ok(password) = std::str::from_utf8(password)
        && s.matches(password).count() == 1
        && slipstream_pg::redact_password(s).contains(password)
    {
        return Err(format!(
            "{s:?}: redact_password shows the password: {}",
            slipstream_pg::redact_password(s)
        ));
    }
    let known = compare(asked, &theirs, &ours).map_err(|d| format!("{s:?}: {d}"))?;
    if let (
        None,
        Theirs::Read {
            opts,
            refusal: None,
        },
        Ok(read),
    ) = (known, &theirs, &ours)
        && (read.has_password() || opts.contains_key("password"))
        // Where the userinfo ends at another `@`, the password differs as documented.
        && !userinfo_ends_differ(asked)
        && let Some(sent) = catcher.sent_password(s, read)
    {
        // An empty password is none to libpq: the password file is asked instead (and here
        // there is none).
        let want = opts.get("password").filter(|p| !p.is_empty());
        if sent.as_ref() != want {
            let shown = |p: Option<&Vec<u8>>| p.map(|p| String::from_utf8_lossy(p).into_owned());
            return Err(format!(
                "{s:?}: slipstream sends the password {:?}, libpq reads {:?}",
                shown(sent.as_ref()),
                shown(want)
            ));
        }
    }
    Ok(known.or(around))
}
