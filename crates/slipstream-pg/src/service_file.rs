//! Connection service files (`service=`, `PGSERVICE`, `PGSERVICEFILE`, `PGSYSCONFDIR`), read as
//! libpq 15 reads them (`fe-connect.c`, `parseServiceInfo` and `parseServiceFile`), checked
//! against the installed libpq in `tests/it/attack_service_file.rs`.
//!
//! What must stay true:
//! - the files, in order: `PGSERVICEFILE` (even empty; missing is an error), else
//!   `$HOME/.pg_service.conf` (the passwd entry's home when `HOME` is unset or empty; missing
//!   is skipped); then, only if the service was not found there,
//!   `$PGSYSCONFDIR/pg_service.conf` (else the compiled [`SYSCONFDIR`]; missing is skipped). A
//!   service in neither is an error;
//! - lines are read as C's `fgets` into a 1024-byte buffer: a line of 1023 bytes or more
//!   (counting its newline) is an error in any section, and a NUL ends what libpq sees of it;
//! - C-locale whitespace is trimmed at both ends of a line, but not around `=`
//!   (`host = x` is the unknown keyword `host `); `#` starts a comment only as a line's first
//!   character after that trimming;
//! - a header matches when it starts with `[name]` (so `[name]junk` matches); the section
//!   ends at the next header, so a second section of the same name is never read;
//! - in the matched section only: a line without `=`, a keyword libpq 15 does not know, and
//!   `service=` (nested) are errors naming the file and line; a line starting with `ldap` is an
//!   LDAP lookup, refused here; a keyword given twice keeps its first value;
//! - outside the matched section nothing but the line length is checked.

use std::path::PathBuf;

use crate::Error;
use crate::conninfo::is_c_space;

/// libpq 15's compiled system configuration directory on Debian (`pg_config --sysconfdir`),
/// read when `PGSYSCONFDIR` is unset.
pub(crate) const SYSCONFDIR: &str = "/etc/postgresql-common";

/// The variables read to find the files, besides `PGSERVICE` and `HOME`.
pub(crate) const VARS: [&str; 2] = ["PGSERVICEFILE", "PGSYSCONFDIR"];

/// `fgets`' buffer in libpq 15's `parseServiceFile` (`MAXBUFSIZE`).
const LINE_BUFFER: usize = 1024;

/// The keywords libpq 15 knows (`PQconndefaults`); any other in a service file is a syntax
/// error there, even one slipstream-pg accepts in a string (`require_auth` is libpq 16's).
const LIBPQ_15_KEYWORDS: [&str; 36] = [
    "service",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "dbname",
    "host",
    "hostaddr",
    "port",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "sslmode",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "gssencmode",
    "krbsrvname",
    "gsslib",
    "replication",
    "target_session_attrs",
];

/// True if libpq 15 knows `key`.
fn known(key: &str) -> bool {
    LIBPQ_15_KEYWORDS.contains(&key)
}

/// One `key=value` line of the service's section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) value: String,
    /// Where it was read, for errors: `service file "..." line N`.
    pub(crate) origin: String,
}

/// The section of service `name`, first value of each keyword only, in file order.
/// `var` reads the environment (`PGSERVICEFILE`, `HOME`, `PGSYSCONFDIR`).
pub(crate) fn lookup(
    name: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Entry>, Error> {
    let user_file = match var("PGSERVICEFILE") {
        Some(file) => {
            // libpq opens PGSERVICEFILE without looking first: missing is an error.
            let found = read(&file, name)?.ok_or_else(|| {
                Error::config(format!(
                    "service file \"{file}\" (PGSERVICEFILE) not found: create it, or point \
                     PGSERVICEFILE at the file that defines service \"{name}\""
                ))
            })?;
            Some(found)
        }
        None => match crate::home::dir_from(var("HOME").map(Into::into)) {
            Some(home) => read(&format!("{}/.pg_service.conf", home.display()), name)?,
            None => None,
        },
    };
    if let Some(Some(entries)) = user_file {
        return Ok(entries);
    }
    // As libpq, an empty PGSYSCONFDIR is the root directory, not the compiled default.
    let dir = var("PGSYSCONFDIR").unwrap_or_else(|| SYSCONFDIR.to_string());
    if let Some(Some(entries)) = read(&format!("{dir}/pg_service.conf"), name)? {
        return Ok(entries);
    }
    Err(Error::config(format!(
        "definition of service \"{name}\" not found: add a [{name}] section to \
         ~/.pg_service.conf (or the file PGSERVICEFILE names) or to {dir}/pg_service.conf, or \
         name another service"
    )))
}

/// `None` if `file` is missing; `Some(None)` if it does not define the service;
/// `Some(Some(entries))` if it does.
#[allow(clippy::type_complexity)]
fn read(file: &str, name: &str) -> Result<Option<Option<Vec<Entry>>>, Error> {
    let path = PathBuf::from(file);
    match std::fs::read(&path) {
        Ok(bytes) => parse(&bytes, file, name).map(Some),
        // libpq stats the file, then `fopen`s it: a directory opens, and `fgets` then reads
        // nothing from it, so it defines no service.
        Err(_) if path.is_dir() => Ok(Some(None)),
        // A file that exists but cannot be opened is an error in libpq ("not found"), not a
        // file to skip: skipping it would read the system file's service instead.
        Err(e) if path.exists() => Err(Error::config(format!(
            "service file \"{file}\" could not be read ({e}): make it readable by this user, or \
             point PGSERVICEFILE elsewhere"
        ))),
        Err(_) => Ok(None),
    }
}

/// The section of `name` in a file's bytes, `None` if there is none.
pub(crate) fn parse(bytes: &[u8], file: &str, name: &str) -> Result<Option<Vec<Entry>>, Error> {
    let mut section: Option<Vec<Entry>> = None;
    let mut rest = bytes;
    let mut line_no = 0usize;
    while !rest.is_empty() {
        // One `fgets` call: up to and with the newline, at most LINE_BUFFER - 1 bytes.
        let take = rest
            .iter()
            .take(LINE_BUFFER - 1)
            .position(|b| *b == b'\n')
            .map_or(rest.len().min(LINE_BUFFER - 1), |i| i + 1);
        let (chunk, after) = rest.split_at(take);
        rest = after;
        line_no += 1;
        let seen = chunk.split(|b| *b == 0).next().unwrap_or_default();
        if seen.len() >= LINE_BUFFER - 1 {
            return Err(Error::config(format!(
                "line {line_no} too long in service file \"{file}\": libpq reads lines of up to \
                 {} bytes; shorten it",
                LINE_BUFFER - 2
            )));
        }
        let line = trim_c_space(seen);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        if line[0] == b'[' {
            if section.is_some() {
                // The service's section ends here; the rest of the file is not read.
                return Ok(section);
            }
            let header = &line[1..];
            if header.starts_with(name.as_bytes()) && header.get(name.len()) == Some(&b']') {
                section = Some(Vec::new());
            }
            continue;
        }
        let Some(entries) = section.as_mut() else {
            continue;
        };
        let origin = format!("service file \"{file}\", line {line_no}");
        if line.starts_with(b"ldap") {
            return Err(Error::config(format!(
                "{origin}: slipstream-pg does not support LDAP service lookups (a line starting \
                 with `ldap`): write the connection parameters into the section instead"
            )));
        }
        let Some(eq) = line.iter().position(|b| *b == b'=') else {
            return Err(Error::config(format!(
                "syntax error in {origin}: expected keyword=value (no spaces around `=`)"
            )));
        };
        let text = |part: &[u8]| {
            String::from_utf8(part.to_vec()).map_err(|_| {
                Error::config(format!(
                    "{origin} is not valid UTF-8: write it in UTF-8 (slipstream-pg's \
                     connection parameters are text)"
                ))
            })
        };
        let (key, value) = (text(&line[..eq])?, text(&line[eq + 1..])?);
        if key == "service" {
            return Err(Error::config(format!(
                "nested service specifications not supported in {origin}: remove the \
                 `service=` line and copy that service's parameters here"
            )));
        }
        if !known(&key) {
            return Err(Error::config(format!(
                "syntax error in {origin}: `{key}` is not a connection parameter libpq 15 \
                 knows (keywords are lowercase, with no spaces around `=`); give it in the \
                 connection string instead"
            )));
        }
        // libpq sets each keyword only while it is unset: the first value wins.
        if !entries.iter().any(|e| e.key == key) {
            entries.push(Entry { key, value, origin });
        }
    }
    Ok(section)
}

/// `bytes` without C whitespace at either end (the standard library's `trim_ascii` leaves
/// `\x0b` in).
fn trim_c_space(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !is_c_space(*b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_c_space(*b))
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(file: &str, name: &str) -> Result<Option<Vec<(String, String)>>, Error> {
        parse(file.as_bytes(), "f", name)
            .map(|s| s.map(|e| e.into_iter().map(|e| (e.key, e.value)).collect()))
    }

    #[test]
    fn first_value_wins_and_the_section_ends_at_the_next_header() {
        let file = "junk\n[a]x\n  # c\n\nport=1\nport=2\n\tuser= u \n[a]\nhost=/never\n";
        let got = section(file, "a").unwrap().unwrap();
        assert_eq!(
            got,
            [("port".into(), "1".into()), ("user".into(), " u".into())]
        );
        assert_eq!(section(file, "b").unwrap(), None);
        assert_eq!(section("[]\nhost=/e\n", "").unwrap().unwrap().len(), 1);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        for (file, expect) in [
            (
                "[a]\nhost = x\n",
                "syntax error in service file \"f\", line 2",
            ),
            ("[a]\nfoo\n", "syntax error in service file \"f\", line 2"),
            ("[a]\nservice=b\n", "nested service specifications"),
            ("[a]\nrequire_auth=md5\n", "line 2: `require_auth`"),
            ("[a]\nldap://x\n", "LDAP"),
        ] {
            let e = section(file, "a").unwrap_err().to_string();
            assert!(e.contains(expect), "{file:?}: {e}");
        }
        let long = format!("[z]\n{}\n[a]\n", "x".repeat(1022));
        let e = section(&long, "a").unwrap_err().to_string();
        assert!(e.contains("line 2 too long"), "{e}");
        let fits = format!("[a]\nhost=/{}\n", "x".repeat(1021 - 6));
        assert!(section(&fits, "a").unwrap().is_some());
    }

    /// libpq passes a value's bytes on; slipstream's parameters are text, so a value that is
    /// not UTF-8 is refused naming the line, only in the service's section.
    #[test]
    fn a_value_that_is_not_utf8_is_refused_in_the_section_only() {
        let file = b"[b]\nhost=\xff\n[a]\nport=1\nhost=/\xff\n";
        assert!(parse(file, "f", "b").is_err());
        let e = parse(file, "f", "a").unwrap_err().to_string();
        assert!(e.contains("line 5") && e.contains("UTF-8"), "{e}");
        assert_eq!(parse(b"[c]\n", "f", "a").unwrap(), None);
        assert!(parse(&file[..9], "f", "a").unwrap().is_none());
    }
}
