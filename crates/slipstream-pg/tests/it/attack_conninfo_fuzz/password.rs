//! The password slipstream sends, as a fake server sees it. `Config` has no getter for the
//! password (and should not have one), so its value is compared where it matters: on the wire.
//! The fake server asks for a cleartext password after any startup message, records what
//! arrives and hangs up.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use slipstream_pg::{Config, Host};

/// A connection attempt to the fake server must end within this (it answers at once).
const LIMIT: Duration = Duration::from_secs(10);
/// The protocol codes of an SSLRequest and a GSSENCRequest, which the fake server declines.
const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;

pub(super) struct Catcher {
    port: u16,
    sent: Receiver<Vec<u8>>,
    rt: tokio::runtime::Runtime,
    /// How many passwords were compared, so a run shows the check is not always skipped.
    pub(super) compared: Cell<u32>,
}

impl Catcher {
    pub(super) fn start() -> Catcher {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, sent) = channel();
        // Ends with the test binary; it only ever blocks in accept or in a bounded read.
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(LIMIT));
                // Sent before the connection is dropped, so the client's error (the hang-up)
                // comes after it: the test finds it with a try_recv.
                if let Some(password) = catch(&mut conn)
                    && tx.send(password).is_err()
                {
                    return;
                }
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Catcher {
            port,
            sent,
            rt,
            compared: Cell::new(0),
        }
    }

    /// The password slipstream sends for `s`, whose reading it was given, connecting to the
    /// fake server instead of `s`'s hosts: `Some(None)` if it sends none. `None` if the
    /// redirection could not be added to `s` without changing its reading (a URL whose `?`
    /// is in its userinfo, a value ending in `\`): the case is then not checked.
    pub(super) fn sent_password(&self, s: &str, read: &Config) -> Option<Option<Vec<u8>>> {
        // Everything that could stop the client before it answers a cleartext request: TLS,
        // certificates, authentication requirements, keepalive values the kernel refuses; and
        // no password file.
        let port = self.port.to_string();
        let redirect = [
            ("host", "127.0.0.1"),
            ("port", port.as_str()),
            ("sslmode", "disable"),
            ("sslrootcert", ""),
            ("sslcert", ""),
            ("sslkey", ""),
            ("require_auth", ""),
            ("channel_binding", "disable"),
            ("gssencmode", "disable"),
            ("keepalives", "0"),
            ("target_session_attrs", "any"),
            ("passfile", "/nonexistent-attack-home/pgpass"),
        ];
        // As `Config::from_str` trims a URL: ASCII whitespace only.
        let trimmed = s.trim_matches(super::compare::c_space);
        let redirected = if trimmed.starts_with("postgres") {
            let pairs: Vec<String> = redirect.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let sep = match trimmed.contains('?') {
                true if trimmed.ends_with(['?', '&']) => "",
                true => "&",
                false => "?",
            };
            format!("{trimmed}{sep}{}", pairs.join("&"))
        } else {
            let pairs: Vec<String> = redirect.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
            format!("{s} {}", pairs.join(" "))
        };
        let config: Config = redirected.parse().ok()?;
        let same = config.get_hosts() == [Host::Tcp("127.0.0.1".into())]
            && config.get_ports() == [self.port]
            && config.has_password() == read.has_password()
            && config.get_user() == read.get_user();
        if !same {
            return None;
        }
        while self.sent.try_recv().is_ok() {}
        let outcome = self.rt.block_on(async {
            tokio::time::timeout(LIMIT, slipstream_pg::connect_config(&config)).await
        });
        assert!(outcome.is_ok(), "{s:?}: no answer within {LIMIT:?}");
        self.compared.set(self.compared.get() + 1);
        Some(self.sent.try_recv().ok())
    }
}

/// Reads the startup message (declining TLS and GSSAPI encryption), asks for a cleartext
/// password and returns it.
fn catch(conn: &mut TcpStream) -> Option<Vec<u8>> {
    loop {
        let mut len = [0u8; 4];
        conn.read_exact(&mut len).ok()?;
        let len = u32::from_be_bytes(len) as usize;
        if !(8..=1 << 16).contains(&len) {
            return None;
        }
        let mut body = vec![0; len - 4];
        conn.read_exact(&mut body).ok()?;
        match u32::from_be_bytes(body[..4].try_into().unwrap()) {
            SSL_REQUEST | GSSENC_REQUEST => conn.write_all(b"N").ok()?,
            _ => break,
        }
    }
    // AuthenticationCleartextPassword.
    conn.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).ok()?;
    let mut head = [0u8; 5];
    conn.read_exact(&mut head).ok()?;
    if head[0] != b'p' {
        return None;
    }
    let len = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
    let mut body = vec![0; len.checked_sub(4)?];
    conn.read_exact(&mut body).ok()?;
    // The message's string ends with a NUL.
    body.pop();
    Some(body)
}
