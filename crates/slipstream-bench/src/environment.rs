//! Capturing what a run ran on.

use serde::{Deserialize, Serialize};

/// What the run ran on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Environment {
    /// slipstream's version.
    pub slipstream_version: String,
    /// Operating system and architecture.
    pub os: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// CPU model name, if known.
    pub cpu_model: Option<String>,
    /// The server's `server_version`.
    pub server_version: Option<String>,
    /// The database URL with any password removed.
    pub database: String,
    /// tokio-postgres version used as a peer.
    pub tokio_postgres_version: String,
}

/// The tokio-postgres version the lab measures against (kept in step with Cargo.lock).
const TOKIO_POSTGRES_VERSION: &str = "0.7";

/// Describes this machine and the server behind `url`.
pub fn capture(url: &str, server_version: Option<String>) -> Environment {
    Environment {
        slipstream_version: env!("CARGO_PKG_VERSION").into(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        cpu_model: std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        }),
        server_version,
        database: redact(url),
        tokio_postgres_version: TOKIO_POSTGRES_VERSION.into(),
    }
}

/// Removes a password from a URL or key=value connection string, wherever the client reads
/// one: a URL's userinfo (split from the hosts at the last `@`, as the client does) and its
/// `password` query parameter; a key=value string's `password`, with or without spaces
/// around `=`, quoted or not.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => redact_url(scheme, rest),
        None => redact_key_value(url),
    }
}

fn redact_url(scheme: &str, rest: &str) -> String {
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(q) = query {
        let pairs: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if percent_decoded(k) == "password" => format!("{k}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

/// `s` with its `%XX` escapes decoded (a query's key may be written `pass%77ord`).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The client's spaces between pairs and around `=` (libpq's `isspace`).
fn is_space(c: &char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

/// A key=value string with `password`'s value replaced, read as the client reads it: spaces
/// may surround `=`, and a value may be quoted (`'...'`, with `\` escapes). Pairs are
/// written back `key=value`, one space apart.
fn redact_key_value(s: &str) -> String {
    let mut chars = s.chars().peekable();
    let mut pairs = Vec::new();
    loop {
        while chars.next_if(is_space).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !is_space(c)) {
            key.push(c);
        }
        while chars.next_if(is_space).is_some() {}
        if chars.next_if_eq(&'=').is_none() {
            // Not a connection string the client reads: keep the word as it was.
            pairs.push(key);
            continue;
        }
        while chars.next_if(is_space).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            value.push('\'');
            while let Some(c) = chars.next() {
                value.push(c);
                match c {
                    '\'' => break,
                    '\\' => value.extend(chars.next()),
                    _ => {}
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !is_space(c)) {
                value.push(c);
                if c == '\\' {
                    value.extend(chars.next());
                }
            }
        }
        if key == "password" {
            value = "***".into();
        }
        pairs.push(format!("{key}={value}"));
    }
    pairs.join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact("postgres://u:secret@h:5/db"),
            "postgres://u:***@h:5/db"
        );
        assert_eq!(
            super::redact("host=h password=secret user=u"),
            "host=h password=*** user=u"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
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
            let got = super::redact(given);
            assert_eq!(got, want, "{given}");
            assert!(
                !got.contains("secret") && !got.contains("cret"),
                "{given} -> {got}"
            );
        }
    }
}
