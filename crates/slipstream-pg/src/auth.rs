//! Authentication after the startup message: password, md5, SCRAM-SHA-256 and
//! SCRAM-SHA-256-PLUS, and the two client-side guards libpq 16 has against a server (or a man in
//! the middle) that asks for more than it should: `require_auth` and `channel_binding`.
//!
//! What must stay true (libpq 16, `fe-auth.c` `check_expected_areq` and `pg_SASL_init`):
//! - every authentication request is checked against `require_auth` *before* anything is sent
//!   in answer, so a refused cleartext request never sees the password;
//! - `AuthenticationOk` is refused under `require_auth` (without `none`) unless the client
//!   finished an exchange, and under `channel_binding=require` unless SCRAM-SHA-256-PLUS
//!   completed;
//! - over TLS, with channel binding not disabled, a client that picks plain SCRAM-SHA-256 says so
//!   (GS2 flag `y`): a server that does offer PLUS then detects that the offer was stripped.

use std::str::FromStr;

use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use std::path::Path;

use crate::config::Host;
use crate::connect::unexpected;
use crate::connection::Connection;
use crate::{DbError, Error, SqlState, pgpass};

/// libpq's `channel_binding`: whether SCRAM authentication binds itself to the TLS channel
/// (SCRAM-SHA-256-PLUS with `tls-server-end-point`), which proves the server that checked the
/// password is the one at the other end of the TLS connection, even without certificate checks.
///
/// ```
/// use slipstream_pg::{ChannelBinding, Config};
/// let config: Config = "host=db sslmode=require channel_binding=require".parse()?;
/// assert_eq!(config.get_channel_binding(), ChannelBinding::Require);
/// # Ok::<(), slipstream_pg::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelBinding {
    /// Never bind (plain SCRAM-SHA-256, GS2 flag `n`).
    Disable,
    /// Bind when the connection uses TLS and the server offers SCRAM-SHA-256-PLUS (the default).
    #[default]
    Prefer,
    /// Refuse to connect unless SCRAM-SHA-256-PLUS completes: no TLS, a server asking for another
    /// method, or one that lets the client in without authentication all fail.
    Require,
}

impl FromStr for ChannelBinding {
    type Err = Error;
    fn from_str(s: &str) -> Result<ChannelBinding, Error> {
        match s.trim() {
            "disable" => Ok(ChannelBinding::Disable),
            "prefer" => Ok(ChannelBinding::Prefer),
            "require" => Ok(ChannelBinding::Require),
            other => Err(Error::config(format!(
                "invalid channel_binding `{other}`: use disable, prefer or require"
            ))),
        }
    }
}

/// The authentication methods, as bits of a set.
const PASSWORD: u8 = 1 << 0;
const MD5: u8 = 1 << 1;
const GSS: u8 = 1 << 2;
const SSPI: u8 = 1 << 3;
const SCRAM: u8 = 1 << 4;
const ALL: u8 = PASSWORD | MD5 | GSS | SSPI | SCRAM;

/// libpq 16's `require_auth`: the authentication methods the server may ask for, as a list
/// (`scram-sha-256,md5`) or a list of exclusions (`!password,!md5`). `none` allows a server
/// that asks for nothing (trust); without it, a server that lets the client in without a
/// completed exchange is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequireAuth {
    /// As given, for messages.
    pub(crate) text: String,
    allowed: u8,
    /// False if `none` is allowed (or `!none` was not given in a negated list).
    auth_required: bool,
}

impl FromStr for RequireAuth {
    type Err = Error;
    /// libpq's parser (`connectOptions2`): all methods negated or none, no repeats.
    fn from_str(s: &str) -> Result<RequireAuth, Error> {
        let mut allowed = 0u8;
        let mut auth_required = true;
        let mut negated = false;
        for (i, part) in s.split(',').map(str::trim).enumerate() {
            let method = match part.strip_prefix('!') {
                Some(m) => {
                    if i == 0 {
                        // A negated list starts from everything and subtracts.
                        negated = true;
                        allowed = ALL;
                        auth_required = false;
                    } else if !negated {
                        return Err(Error::config(format!(
                            "negative require_auth method `{part}` cannot be mixed with non-negative methods"
                        )));
                    }
                    m
                }
                None if negated => {
                    return Err(Error::config(format!(
                        "require_auth method `{part}` cannot be mixed with negative methods"
                    )));
                }
                None => part,
            };
            let twice = || {
                Error::config(format!(
                    "require_auth method `{part}` is specified more than once"
                ))
            };
            let bits = match method {
                "password" => PASSWORD,
                "md5" => MD5,
                "gss" => GSS,
                "sspi" => SSPI,
                "scram-sha-256" => SCRAM,
                "none" => {
                    // `none` (or `!none`) toggles whether an exchange is required at all.
                    if auth_required != negated {
                        auth_required = !auth_required;
                        continue;
                    }
                    return Err(twice());
                }
                other => {
                    return Err(Error::config(format!(
                        "invalid require_auth method `{other}`: use password, md5, gss, sspi, \
                         scram-sha-256 or none, each optionally negated with `!`, comma-separated"
                    )));
                }
            };
            if negated {
                if allowed & bits == 0 {
                    return Err(twice());
                }
                allowed &= !bits;
            } else {
                if allowed & bits == bits {
                    return Err(twice());
                }
                allowed |= bits;
            }
        }
        Ok(RequireAuth {
            text: s.to_string(),
            allowed,
            auth_required,
        })
    }
}

/// What the server asked for, in the terms of `require_auth`.
#[derive(Clone, Copy)]
enum Request {
    Password,
    Md5,
    Gss,
    Sspi,
    Sasl,
}

impl Request {
    fn bits(self) -> u8 {
        match self {
            Request::Password => PASSWORD,
            Request::Md5 => MD5,
            Request::Gss => GSS,
            Request::Sspi => SSPI,
            Request::Sasl => SCRAM,
        }
    }

    /// libpq's `auth_method_description`.
    fn describe(self) -> &'static str {
        match self {
            Request::Password => "server requested a cleartext password",
            Request::Md5 => "server requested a hashed password",
            Request::Gss => "server requested GSSAPI authentication",
            Request::Sspi => "server requested SSPI authentication",
            Request::Sasl => "server requested SASL authentication",
        }
    }
}

/// What authentication needs from the connection.
pub(crate) struct AuthParams<'a> {
    pub(crate) user: &'a str,
    /// The password given in the configuration.
    pub(crate) password: Option<&'a [u8]>,
    /// Where to look for a password if none was given and the server asks for one.
    pub(crate) passfile: Option<PasswordFile<'a>>,
    pub(crate) require_auth: Option<&'a RequireAuth>,
    pub(crate) channel_binding: ChannelBinding,
    /// Over TLS: the `tls-server-end-point` data of the server's certificate, or why it cannot
    /// be computed. `None` without TLS.
    pub(crate) end_point: Option<Result<Vec<u8>, String>>,
}

/// The password file and the key to look up in it.
pub(crate) struct PasswordFile<'a> {
    pub(crate) path: &'a Path,
    pub(crate) host: &'a Host,
    pub(crate) port: u16,
    pub(crate) dbname: &'a str,
}

/// The password, read from the file only once a server asks for one: a trust login never
/// touches the file (and never warns about it).
struct Password<'a> {
    given: Option<&'a [u8]>,
    file: Option<&'a PasswordFile<'a>>,
    looked_up: Option<pgpass::Lookup>,
}

impl Password<'_> {
    fn get(&mut self, user: &str) -> Result<&[u8], Error> {
        if let Some(p) = self.given {
            return Ok(p);
        }
        let file = self.file;
        let found = self.looked_up.get_or_insert_with(|| match file {
            Some(f) => pgpass::lookup(f.path, f.host, f.port, f.dbname, user),
            None => pgpass::Lookup::NoMatch,
        });
        match found {
            pgpass::Lookup::Found(p) => Ok(p),
            other => {
                let mut m =
                    "the server asked for a password but none was given: set password=..., \
                             PGPASSWORD or a line in the password file (~/.pgpass or PGPASSFILE)"
                        .to_string();
                if let pgpass::Lookup::Ignored(warning) = other {
                    m.push_str(&format!(" ({warning})"));
                }
                Err(Error::auth(m))
            }
        }
    }

    /// The file the password came from, if it did.
    fn file_used(&self) -> Option<&Path> {
        match self.looked_up {
            Some(pgpass::Lookup::Found(_)) => self.file.map(|f| f.path),
            _ => None,
        }
    }
}

/// Where the exchange stands, for the checks on `AuthenticationOk`.
#[derive(Default)]
struct Progress {
    /// The client sent a password or completed a SASL exchange (libpq's `client_finished_auth`).
    finished: bool,
    /// SCRAM-SHA-256-PLUS completed, the server's signature verified.
    bound: bool,
}

pub(crate) async fn authenticate(conn: &mut Connection, p: &AuthParams<'_>) -> Result<(), Error> {
    let mut password = Password {
        given: p.password,
        file: p.passfile.as_ref(),
        looked_up: None,
    };
    let result = exchange(conn, p, &mut password).await;
    result.map_err(|e| match (password.file_used(), e.code()) {
        // libpq's pgpassfileWarning: say where a rejected password came from.
        (Some(path), Some(SqlState::INVALID_PASSWORD)) => e.context(format!(
            "password retrieved from file \"{}\"",
            path.display()
        )),
        _ => e,
    })
}

async fn exchange(
    conn: &mut Connection,
    p: &AuthParams<'_>,
    password: &mut Password<'_>,
) -> Result<(), Error> {
    let mut progress = Progress::default();
    loop {
        let message = conn.next_message().await.map_err(auth_failure)?;
        let request = match &message {
            Message::AuthenticationCleartextPassword => Some(Request::Password),
            Message::AuthenticationMd5Password(_) => Some(Request::Md5),
            Message::AuthenticationSasl(_) => Some(Request::Sasl),
            Message::AuthenticationKerberosV5 | Message::AuthenticationGss => Some(Request::Gss),
            Message::AuthenticationSspi => Some(Request::Sspi),
            _ => None,
        };
        if let Some(request) = request {
            check_request(p, request)?;
        }
        match message {
            Message::AuthenticationOk => return check_ok(p, &progress),
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password.get(p.user)?, &mut conn.wbuf)
                    .map_err(|e| Error::auth(e.to_string()))?;
                conn.flush().await?;
                progress.finished = true;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(p.user.as_bytes(), password.get(p.user)?, body.salt());
                frontend::password_message(hash.as_bytes(), &mut conn.wbuf)
                    .map_err(|e| Error::auth(e.to_string()))?;
                conn.flush().await?;
                progress.finished = true;
            }
            Message::AuthenticationSasl(body) => {
                let mut mechanisms = body.mechanisms();
                let (mut has_scram, mut has_plus) = (false, false);
                while let Some(m) = mechanisms
                    .next()
                    .map_err(|e| Error::protocol(e.to_string()))?
                {
                    has_scram |= m == sasl::SCRAM_SHA_256;
                    has_plus |= m == sasl::SCRAM_SHA_256_PLUS;
                }
                let binding = choose_binding(p, has_scram, has_plus)?;
                let plus = matches!(binding, Binding::Plus(_));
                scram(conn, password.get(p.user)?, binding).await?;
                progress.finished = true;
                progress.bound = plus;
            }
            Message::ErrorResponse(body) => {
                return Err(Error::auth_db(DbError::parse(&mut body.fields())?));
            }
            Message::AuthenticationKerberosV5
            | Message::AuthenticationScmCredential
            | Message::AuthenticationGss
            | Message::AuthenticationSspi => {
                return Err(Error::auth(
                    "server asked for GSSAPI/SSPI/Kerberos authentication, which slipstream does not support; \
                     use password, md5 or scram-sha-256 in pg_hba.conf",
                ));
            }
            m => return Err(unexpected(&m, "during authentication")),
        }
    }
}

/// `require_auth` and `channel_binding=require` on a request, before anything is answered.
fn check_request(p: &AuthParams<'_>, request: Request) -> Result<(), Error> {
    if let Some(req) = p.require_auth.filter(|r| r.allowed & request.bits() == 0) {
        return Err(Error::auth(format!(
            "authentication method requirement \"{}\" failed: {}; nothing was sent in answer",
            req.text,
            request.describe()
        )));
    }
    if p.channel_binding == ChannelBinding::Require && !matches!(request, Request::Sasl) {
        return Err(Error::auth(format!(
            "channel binding required but not supported by server's authentication request \
             ({}); nothing was sent in answer",
            request.describe()
        )));
    }
    Ok(())
}

/// `require_auth` and `channel_binding=require` on `AuthenticationOk`.
fn check_ok(p: &AuthParams<'_>, progress: &Progress) -> Result<(), Error> {
    if let Some(req) = p
        .require_auth
        .filter(|r| r.auth_required && !progress.finished)
    {
        return Err(Error::auth(format!(
            "authentication method requirement \"{}\" failed: server did not complete \
             authentication (add `none` to require_auth to allow trust)",
            req.text
        )));
    }
    if p.channel_binding == ChannelBinding::Require && !progress.bound {
        return Err(Error::auth(
            "channel binding required, but server authenticated client without channel binding \
             (the server's pg_hba.conf must use scram-sha-256 for this connection)",
        ));
    }
    Ok(())
}

enum Binding {
    /// GS2 `n`: no channel binding (no TLS, or disabled).
    No,
    /// GS2 `y`: the client could bind but the server did not offer PLUS.
    NotOffered,
    /// SCRAM-SHA-256-PLUS with this `tls-server-end-point` data.
    Plus(Vec<u8>),
}

/// libpq's `pg_SASL_init` choice of mechanism.
fn choose_binding(p: &AuthParams<'_>, has_scram: bool, has_plus: bool) -> Result<Binding, Error> {
    let tls = p.end_point.is_some();
    if has_plus && !tls {
        // The server cannot bind to a channel that does not exist: this is not PostgreSQL.
        return Err(Error::protocol(
            "server offered SCRAM-SHA-256-PLUS authentication over a non-SSL connection",
        ));
    }
    if has_plus && p.channel_binding != ChannelBinding::Disable {
        return match &p.end_point {
            Some(Ok(hash)) => Ok(Binding::Plus(hash.clone())),
            Some(Err(why)) => Err(Error::auth(format!(
                "cannot use SCRAM-SHA-256-PLUS: {why}; set channel_binding=disable to authenticate without it"
            ))),
            None => unreachable!("has_plus without TLS returned above"),
        };
    }
    if p.channel_binding == ChannelBinding::Require {
        return Err(Error::auth(if tls {
            "channel binding is required, but server did not offer an authentication method that \
             supports channel binding"
        } else {
            "channel binding is required, but the connection does not use TLS: set sslmode=require \
             (or verify-full) as well"
        }));
    }
    if !has_scram {
        return Err(Error::auth(
            "none of the server's SASL authentication mechanisms are supported (we support \
             SCRAM-SHA-256 and SCRAM-SHA-256-PLUS)",
        ));
    }
    Ok(if tls && p.channel_binding != ChannelBinding::Disable {
        Binding::NotOffered
    } else {
        Binding::No
    })
}

/// A FATAL `ErrorResponse` during authentication (wrong password, no pg_hba entry) is an
/// authentication failure, not a generic server error.
fn auth_failure(e: Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::auth_db(db.clone()),
        None => e,
    }
}

/// postgres-protocol's limit on the SCRAM iterations a server may ask for (its
/// `MAX_ITERATION_COUNT`, private there), checked here first to name the count in the error.
const MAX_SCRAM_ITERATIONS: u32 = 100_000;

/// The iteration count `i=` of a SCRAM server-first-message (`r=...,s=...,i=4096`), if any.
fn iterations(server_first: &[u8]) -> Option<u32> {
    std::str::from_utf8(server_first)
        .ok()?
        .split(',')
        .find_map(|attr| attr.strip_prefix("i="))?
        .parse()
        .ok()
}

async fn scram(conn: &mut Connection, password: &[u8], binding: Binding) -> Result<(), Error> {
    let (mechanism, binding) = match binding {
        Binding::No => (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unsupported()),
        Binding::NotOffered => (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unrequested()),
        Binding::Plus(hash) => (
            sasl::SCRAM_SHA_256_PLUS,
            sasl::ChannelBinding::tls_server_end_point(hash),
        ),
    };
    let mut scram = sasl::ScramSha256::new(password, binding);
    frontend::sasl_initial_response(mechanism, scram.message(), &mut conn.wbuf)
        .map_err(|e| Error::auth(e.to_string()))?;
    conn.flush().await?;
    match conn.next_message().await.map_err(auth_failure)? {
        Message::AuthenticationSaslContinue(body) => {
            if let Some(n) = iterations(body.data()).filter(|n| *n > MAX_SCRAM_ITERATIONS) {
                return Err(Error::auth(format!(
                    "the server asks for {n} SCRAM iterations, more than the \
                     {MAX_SCRAM_ITERATIONS} this client computes (a bound on the work a server, or \
                     an impostor, can demand before it proves anything): store the role's \
                     password with fewer, e.g. SET scram_iterations = 4096 (PostgreSQL 16+) then \
                     ALTER ROLE ... PASSWORD '...'; nothing was sent in answer"
                )));
            }
            scram
                .update(body.data())
                .map_err(|e| Error::auth(format!("invalid SCRAM server message: {e}")))?;
        }
        Message::ErrorResponse(body) => {
            return Err(Error::auth_db(DbError::parse(&mut body.fields())?));
        }
        m => return Err(unexpected(&m, "during SCRAM authentication")),
    }
    frontend::sasl_response(scram.message(), &mut conn.wbuf)
        .map_err(|e| Error::auth(e.to_string()))?;
    conn.flush().await?;
    match conn.next_message().await.map_err(auth_failure)? {
        Message::AuthenticationSaslFinal(body) => scram.finish(body.data()).map_err(|e| {
            Error::auth(format!(
                "the server failed to prove it knows the password: {e}"
            ))
        }),
        Message::ErrorResponse(body) => Err(Error::auth_db(DbError::parse(&mut body.fields())?)),
        m => Err(unexpected(&m, "during SCRAM authentication")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<RequireAuth, String> {
        s.parse::<RequireAuth>().map_err(|e| e.to_string())
    }

    #[test]
    fn require_auth_lists_follow_libpq() {
        let r = parse("scram-sha-256").unwrap();
        assert_eq!((r.allowed, r.auth_required), (SCRAM, true));
        let r = parse("password,md5,none").unwrap();
        assert_eq!((r.allowed, r.auth_required), (PASSWORD | MD5, false));
        let r = parse("!password,!md5").unwrap();
        assert_eq!((r.allowed, r.auth_required), (GSS | SSPI | SCRAM, false));
        let r = parse("!none").unwrap();
        assert_eq!((r.allowed, r.auth_required), (ALL, true));
        let r = parse("none").unwrap();
        assert_eq!((r.allowed, r.auth_required), (0, false));
        for (bad, says) in [
            ("md5,!password", "cannot be mixed with non-negative"),
            ("!md5,password", "cannot be mixed with negative"),
            ("md5,md5", "more than once"),
            ("!md5,!md5", "more than once"),
            ("none,none", "more than once"),
            ("!none,!none", "more than once"),
            ("kerberos", "invalid require_auth method `kerberos`"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    fn params(
        require_auth: Option<&RequireAuth>,
        channel_binding: ChannelBinding,
        tls: bool,
    ) -> AuthParams<'_> {
        AuthParams {
            user: "u",
            password: Some(b"pw"),
            passfile: None,
            require_auth,
            channel_binding,
            end_point: tls.then(|| Ok(vec![1, 2, 3])),
        }
    }

    #[test]
    fn a_refused_request_is_refused_before_an_answer() {
        let scram_only = parse("scram-sha-256").unwrap();
        let p = params(Some(&scram_only), ChannelBinding::Prefer, false);
        let e = check_request(&p, Request::Password)
            .unwrap_err()
            .to_string();
        assert!(e.contains("server requested a cleartext password"), "{e}");
        assert!(check_request(&p, Request::Sasl).is_ok());
        let e = check_ok(&p, &Progress::default()).unwrap_err().to_string();
        assert!(e.contains("did not complete authentication"), "{e}");

        let p = params(None, ChannelBinding::Require, true);
        let e = check_request(&p, Request::Md5).unwrap_err().to_string();
        assert!(e.contains("channel binding required"), "{e}");
        let finished_unbound = Progress {
            finished: true,
            bound: false,
        };
        assert!(check_ok(&p, &finished_unbound).is_err());
    }

    #[test]
    fn mechanism_choice_follows_libpq() {
        let pick = |cb, tls, scram, plus| {
            choose_binding(&params(None, cb, tls), scram, plus).map(|b| match b {
                Binding::No => "n",
                Binding::NotOffered => "y",
                Binding::Plus(_) => "p",
            })
        };
        use ChannelBinding::*;
        assert_eq!(pick(Prefer, true, true, true).unwrap(), "p");
        assert_eq!(pick(Prefer, true, true, false).unwrap(), "y");
        assert_eq!(pick(Disable, true, true, true).unwrap(), "n");
        assert_eq!(pick(Prefer, false, true, false).unwrap(), "n");
        assert!(pick(Require, true, true, false).is_err());
        assert!(pick(Require, false, true, false).is_err());
        assert!(pick(Prefer, false, true, true).is_err(), "PLUS without TLS");
    }
}
