//! The password file (`~/.pgpass`, `PGPASSFILE`, `passfile=`), read as libpq 16 reads it
//! (`fe-connect.c`, `passwordFromFile` and `pwdfMatchesString`).
//!
//! What must stay true:
//! - lines are `host:port:dbname:user:password`; `*` matches anything in the first four fields;
//!   `\` escapes `:` and `\`; lines starting with `#` are comments; the first match wins;
//! - a Unix-socket host equal to the default socket directory, or no host, is `localhost`;
//! - a file readable or writable by group or others is ignored with a warning, and so is one
//!   that is not a plain file; a missing file is silently ignored.
//!
//! libpq writes the warning to stderr. A library should not write to its users' stderr, so the
//! warning is a `tracing` event at WARN level (target `slipstream_pg::pgpass`), and the same
//! text is added to the error if the server then asks for a password the client does not have.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::config::{DEFAULT_SOCKET_DIR, Host};

/// The file to read: `passfile` (or `PGPASSFILE`, applied into it), else `~/.pgpass`.
pub(crate) fn path(passfile: Option<&Path>) -> Option<PathBuf> {
    match passfile {
        Some(p) => Some(p.to_path_buf()),
        None => crate::home::dir().map(|home| home.join(".pgpass")),
    }
}

/// The outcome of a look-up.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Found(Vec<u8>),
    NoMatch,
    /// The file exists but was not read; the warning says why.
    Ignored(String),
}

/// The password for (host, port, dbname, user) in `file`.
pub(crate) fn lookup(file: &Path, host: &Host, port: u16, dbname: &str, user: &str) -> Lookup {
    if dbname.is_empty() || user.is_empty() {
        return Lookup::NoMatch;
    }
    let Ok(meta) = std::fs::metadata(file) else {
        return Lookup::NoMatch;
    };
    if !meta.is_file() {
        return ignored(format!(
            "password file \"{}\" is not a plain file",
            file.display()
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // libpq: S_IRWXG | S_IRWXO.
        if meta.permissions().mode() & 0o077 != 0 {
            return ignored(format!(
                "password file \"{}\" has group or world access; permissions should be u=rw \
                 (0600) or less",
                file.display()
            ));
        }
    }
    let Ok(f) = std::fs::File::open(file) else {
        return Lookup::NoMatch;
    };
    let host = match host {
        Host::Tcp(h) if h.is_empty() => "localhost".to_string(),
        Host::Tcp(h) => h.clone(),
        Host::Unix(dir) if dir == Path::new(DEFAULT_SOCKET_DIR) => "localhost".to_string(),
        Host::Unix(dir) => dir.display().to_string(),
    };
    let port = port.to_string();
    let keys = [
        host.as_bytes(),
        port.as_bytes(),
        dbname.as_bytes(),
        user.as_bytes(),
    ];
    // Lines are bytes: a password need not be UTF-8. A read error ends the scan, as in libpq.
    for line in std::io::BufReader::new(f).split(b'\n') {
        let Ok(mut line) = line else { break };
        while line.last().is_some_and(|b| *b == b'\r' || *b == b'\n') {
            line.pop();
        }
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        if let Some(password) = matches(&line, &keys) {
            return Lookup::Found(password);
        }
    }
    Lookup::NoMatch
}

fn ignored(warning: String) -> Lookup {
    tracing::warn!(target: "slipstream_pg::pgpass", "{warning}");
    Lookup::Ignored(warning)
}

/// The de-escaped password if the line's first four fields match `keys`.
fn matches(line: &[u8], keys: &[&[u8]; 4]) -> Option<Vec<u8>> {
    let mut rest = line;
    for key in keys {
        rest = field_matches(rest, key)?;
    }
    // The password runs to the first unescaped `:` (libpq ignores anything after it).
    let mut password = Vec::new();
    let mut i = 0;
    while i < rest.len() && rest[i] != b':' {
        if rest[i] == b'\\' && i + 1 < rest.len() {
            i += 1;
        }
        password.push(rest[i]);
        i += 1;
    }
    Some(password)
}

/// libpq's `pwdfMatchesString`: the rest of the line after a field matching `token`.
fn field_matches<'a>(buf: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
    if buf.starts_with(b"*:") {
        return Some(&buf[2..]);
    }
    let (mut b, mut t) = (0, 0);
    while b < buf.len() {
        let mut escaped = false;
        if buf[b] == b'\\' {
            b += 1;
            escaped = true;
            if b == buf.len() {
                return None;
            }
        }
        if buf[b] == b':' && t == token.len() && !escaped {
            return Some(&buf[b + 1..]);
        }
        if t == token.len() || buf[b] != token[t] {
            return None;
        }
        b += 1;
        t += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(contents: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    fn tcp(h: &str) -> Host {
        Host::Tcp(h.into())
    }

    #[test]
    fn first_matching_line_wins_with_wildcards_and_escapes() {
        let (_d, f) = file(
            "# comment\n\
             db1:5432:app:alice:first\n\
             db1:5432:app:alice:second\n\
             *:5433:*:bob:wild\\:card\\\\\n\
             h\\:x:5432:app:carol:escaped-host\r\n\
             localhost:5432:app:dave:local:ignored-after-colon\n",
            0o600,
        );
        let get = |h: Host, port, db, user| lookup(&f, &h, port, db, user);
        assert_eq!(
            get(tcp("db1"), 5432, "app", "alice"),
            Lookup::Found(b"first".to_vec())
        );
        assert_eq!(
            get(tcp("anything"), 5433, "x", "bob"),
            Lookup::Found(b"wild:card\\".to_vec())
        );
        assert_eq!(
            get(tcp("h:x"), 5432, "app", "carol"),
            Lookup::Found(b"escaped-host".to_vec())
        );
        assert_eq!(get(tcp("db1"), 5433, "app", "alice"), Lookup::NoMatch);
        assert_eq!(
            get(tcp("db"), 5432, "app", "alice"),
            Lookup::NoMatch,
            "no prefix match"
        );
        // The default socket directory is `localhost`; another one is its path.
        assert_eq!(
            get(Host::Unix(DEFAULT_SOCKET_DIR.into()), 5432, "app", "dave"),
            Lookup::Found(b"local".to_vec())
        );
        assert_eq!(
            get(Host::Unix("/tmp".into()), 5432, "app", "dave"),
            Lookup::NoMatch
        );
    }

    #[test]
    fn a_socket_directory_matches_by_its_path() {
        let (_d, f) = file("/tmp/sock:5432:*:*:by-path\n", 0o600);
        assert_eq!(
            lookup(&f, &Host::Unix("/tmp/sock".into()), 5432, "db", "u"),
            Lookup::Found(b"by-path".to_vec())
        );
    }

    #[test]
    fn group_or_world_access_ignores_the_file_with_a_warning() {
        for mode in [0o640, 0o604, 0o660, 0o700 | 0o010] {
            let (_d, f) = file("*:*:*:*:secret\n", mode);
            match lookup(&f, &tcp("h"), 5432, "db", "u") {
                Lookup::Ignored(w) => {
                    assert!(w.contains("group or world access"), "{w}")
                }
                other => panic!("mode {mode:o}: {other:?}"),
            }
        }
        let (_d, f) = file("*:*:*:*:secret\n", 0o400);
        assert_eq!(
            lookup(&f, &tcp("h"), 5432, "db", "u"),
            Lookup::Found(b"secret".to_vec())
        );
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            lookup(dir.path(), &tcp("h"), 5432, "db", "u"),
            Lookup::Ignored(w) if w.contains("not a plain file")
        ));
        assert_eq!(
            lookup(&dir.path().join("missing"), &tcp("h"), 5432, "db", "u"),
            Lookup::NoMatch
        );
    }
}
