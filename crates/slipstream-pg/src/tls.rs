//! TLS with rustls, following libpq's `sslmode` semantics:
//!
//! | sslmode     | TLS                     | certificate check                              |
//! |-------------|-------------------------|------------------------------------------------|
//! | disable     | never                   | -                                              |
//! | prefer      | if the server offers it | chain only if a root certificate is configured; a failed handshake retries without TLS |
//! | require     | always                  | chain only if a root certificate is configured |
//! | verify-ca   | always                  | chain to `sslrootcert`                         |
//! | verify-full | always                  | chain, and the certificate names the host      |
//!
//! The root certificate defaults to `~/.postgresql/root.crt`, and the client certificate and
//! key to `~/.postgresql/postgresql.crt` and `.key` when that certificate exists, as in libpq. `sslrootcert=system`
//! trusts the operating system's CAs instead (as libpq 16 does: found the way OpenSSL finds them,
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` first, via `rustls-native-certs`) and then demands
//! `verify-full`: a public CA signs certificates for anyone, so only the name check makes the
//! chain mean something.
//!
//! The checks give libpq's (OpenSSL's) verdicts where webpki alone is stricter: a certificate of
//! the root file presented as the server's own (the self-signed certificate PostgreSQL's
//! documentation makes, marked CA) is trusted as it is, and a host named only in the Common
//! Name counts when the certificate has no subjectAltName of the host's kind (`name.rs`).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::{Config, Error, SslMode};

mod name;

/// How much of the server's certificate to check, after applying libpq's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// Builds the rustls client configuration for `config`, or `None` when TLS is disabled.
pub(crate) fn client_config(config: &Config) -> Result<Option<Arc<ClientConfig>>, Error> {
    let mode = config.get_ssl_mode();
    let system = config.uses_system_roots();
    if system && mode != SslMode::VerifyFull {
        return Err(Error::config(format!(
            "weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")",
            mode_name(mode)
        )));
    }
    let root_path = config.ssl_root_cert.clone().or_else(default_root_cert);
    let check = match mode {
        SslMode::Disable => return Ok(None),
        // libpq: "if a root CA file exists, sslmode=require behaves like verify-ca"; so does
        // prefer, whose failed handshake is then tried again without TLS (connect.rs).
        SslMode::Prefer | SslMode::Require if root_path.as_deref().is_some_and(Path::exists) => {
            Check::Chain
        }
        SslMode::Prefer | SslMode::Require => Check::Nothing,
        SslMode::VerifyCa => Check::Chain,
        SslMode::VerifyFull => Check::ChainAndName,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::tls("could not set up TLS", Some(Box::new(e))))?;
    let builder = if check == Check::Nothing {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCheck(provider)))
    } else {
        let path = root_path.ok_or_else(|| {
            Error::config(format!(
                "sslmode={} needs a root certificate to check the server against: set sslrootcert=/path/to/ca.crt \
                 (libpq's default ~/.postgresql/root.crt does not exist)",
                mode_name(mode)
            ))
        })?;
        let (roots, own) = if system {
            (system_roots()?, Vec::new())
        } else {
            let certs = load_certs(&path, "sslrootcert").map_err(|e| e.hint(SSLROOTCERT_HINT))?;
            (load_roots(&path, &certs)?, certs)
        };
        let mut webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider);
        // libpq loads ~/.postgresql/root.crl whenever it checks against a root file (not the
        // system store), and then needs a current CRL for every certificate of the chain
        // (OpenSSL's CRL_CHECK_ALL); one it cannot read is ignored.
        let crls = default_crls().filter(|_| !system);
        let revocation_checked = crls.is_some();
        if let Some(crls) = crls {
            webpki = webpki.with_crls(crls).enforce_revocation_expiration();
        }
        let webpki = webpki.build().map_err(|e| {
            Error::tls(
                format!("could not use root certificates from {}", path.display()),
                Some(Box::new(e)),
            )
        })?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Libpq {
                webpki,
                roots: own,
                revocation_checked,
                check_name: check == Check::ChainAndName,
            }))
    };
    // libpq's defaults: ~/.postgresql/postgresql.crt if it exists, with the key given or
    // ~/.postgresql/postgresql.key.
    let cert = config
        .ssl_cert
        .clone()
        .or_else(|| default_file("postgresql.crt").filter(|p| p.exists()));
    let key = match (&cert, &config.ssl_key) {
        (Some(_), None) => default_file("postgresql.key"),
        (_, key) => key.clone(),
    };
    let tls = match (&cert, &key) {
        (Some(cert), Some(key)) => {
            let certs = load_certs(cert, "sslcert").map_err(|e| e.hint(SSLCERT_HINT))?;
            let key_der = load_key(key)?;
            builder.with_client_auth_cert(certs, key_der).map_err(|e| {
                Error::tls(
                    format!(
                        "the sslkey file {} is not the private key of the sslcert certificate {}",
                        key.display(),
                        cert.display()
                    ),
                    Some(Box::new(e)),
                )
                .hint(SSLKEY_HINT)
            })?
        }
        (Some(_), None) => {
            return Err(Error::config(
                "sslcert needs its key: set sslkey (no home directory was found, so there is no default ~/.postgresql/postgresql.key)",
            ));
        }
        (None, Some(_)) => {
            return Err(Error::config(
                "sslkey was given without sslcert (and ~/.postgresql/postgresql.crt does not exist): set sslcert too",
            ));
        }
        (None, None) => builder.with_no_client_auth(),
    };
    // rustls never names an address; this turns the name off for host names too.
    let mut tls = tls;
    tls.enable_sni = config.get_ssl_sni();
    Ok(Some(Arc::new(tls)))
}

/// The name to present in SNI and to check the certificate against.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(host.to_string())
        .map_err(|_| Error::config(format!("`{host}` is not a valid host name for TLS")))
}

fn mode_name(mode: SslMode) -> &'static str {
    match mode {
        SslMode::Disable => "disable",
        SslMode::Prefer => "prefer",
        SslMode::Require => "require",
        SslMode::VerifyCa => "verify-ca",
        SslMode::VerifyFull => "verify-full",
    }
}

fn default_root_cert() -> Option<PathBuf> {
    default_file("root.crt")
}

/// A file in `~/.postgresql`, where libpq looks for certificates and keys by default.
fn default_file(name: &str) -> Option<PathBuf> {
    crate::home::dir().map(|home| home.join(".postgresql").join(name))
}

/// The revocation lists of `~/.postgresql/root.crl`, libpq's default `sslcrl`, if that file
/// exists and holds any (libpq silently goes without a file it cannot load, too).
fn default_crls() -> Option<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>> {
    let file = File::open(default_file("root.crl")?).ok()?;
    let crls = rustls_pemfile::crls(&mut BufReader::new(file))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    (!crls.is_empty()).then_some(crls)
}

/// What to do about a root certificate file that cannot be used. A missing or unreadable file
/// is never skipped under verify-ca/verify-full: there would be nothing to check against.
const SSLROOTCERT_HINT: &str = "set sslrootcert to the PEM file of the CA that signed the \
    server's certificate (or sslrootcert=system for the operating system's CAs)";
const SSLCERT_HINT: &str =
    "set sslcert to your client certificate (PEM), or leave it out to send no certificate";
const SSLKEY_HINT: &str = "set sslkey to the private key (PEM) of the sslcert certificate";

/// Opens the file of parameter `param` (`sslrootcert`, `sslcert`, `sslkey`); the error names
/// the parameter, since the path alone does not say which setting to fix (it may be a default
/// under ~/.postgresql that the user never wrote).
fn open(path: &Path, param: &str) -> Result<File, Error> {
    File::open(path).map_err(|e| {
        Error::config(format!(
            "could not open the {param} file {}: {e}",
            path.display()
        ))
    })
}

fn load_certs(path: &Path, param: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = rustls_pemfile::certs(&mut BufReader::new(open(path, param)?))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::config(format!(
                "could not read certificates from the {param} file {}: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::config(format!(
            "the {param} file {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// The client's private key from `path`, refused as libpq refuses it: a file others may read
/// (so that an exposed key is noticed, as with the password file), and one encrypted with a
/// passphrase, which slipstream cannot ask for (no `sslpassword`).
fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let mut file = open(path, "sslkey").map_err(|e| e.hint(SSLKEY_HINT))?;
    let meta = file.metadata().map_err(|e| {
        Error::config(format!(
            "could not read the sslkey file {}: {e}",
            path.display()
        ))
    })?;
    if !meta.is_file() {
        return Err(Error::config(format!(
            "the sslkey file {} is not a regular file",
            path.display()
        ))
        .hint(SSLKEY_HINT));
    }
    // libpq (fe-secure-openssl.c): root-owned files may be group-readable (0640), so that a
    // group can share a system-wide key; anyone else's must be 0600 or less.
    let mode = meta.mode();
    let loose = if meta.uid() == 0 {
        mode & (libc::S_IWGRP | libc::S_IXGRP | libc::S_IRWXO)
    } else {
        mode & (libc::S_IRWXG | libc::S_IRWXO)
    };
    if loose != 0 {
        return Err(Error::config(format!(
            "private key file {} has group or world access; file must have permissions u=rw \
             (0600) or less if owned by the current user, or permissions u=rw,g=r (0640) or \
             less if owned by root: chmod 600 it",
            path.display()
        )));
    }
    let mut pem = Vec::new();
    file.read_to_end(&mut pem).map_err(|e| {
        Error::config(format!(
            "could not read the sslkey file {}: {e}",
            path.display()
        ))
    })?;
    let text = String::from_utf8_lossy(&pem);
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
    {
        return Err(Error::config(format!(
            "the sslkey file {} holds an encrypted private key, and slipstream cannot ask for \
             its passphrase (sslpassword is not supported): store it decrypted, e.g. \
             `openssl pkey -in {0} -out {0}.plain` and `chmod 600 {0}.plain`, then set sslkey to \
             that file",
            path.display()
        )));
    }
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| {
            Error::config(format!(
                "could not read the sslkey file {}: {e}",
                path.display()
            ))
            .hint(SSLKEY_HINT)
        })?
        .ok_or_else(|| {
            Error::config(format!(
                "the sslkey file {} holds no private key",
                path.display()
            ))
            .hint(SSLKEY_HINT)
        })
}

/// The operating system's trusted CAs (`sslrootcert=system`).
fn system_roots() -> Result<RootCertStore, Error> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    // Like OpenSSL, a certificate the parser rejects is skipped, not fatal.
    let (added, _skipped) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(Error::config(format!(
            "sslrootcert=system found no trusted CA certificates in the operating system's \
             store{why}; install ca-certificates, set SSL_CERT_FILE, or give sslrootcert=/path/to/ca.pem"
        )));
    }
    Ok(roots)
}

fn load_roots(path: &Path, certs: &[CertificateDer<'static>]) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert.clone()).map_err(|e| {
            Error::tls(
                format!("invalid root certificate in {}", path.display()),
                Some(Box::new(e)),
            )
        })?;
    }
    Ok(roots)
}

/// sslmode=prefer/require: encrypt, but accept any certificate (libpq does the same). The
/// handshake signatures are still checked, so the peer must hold the certificate's key.
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain check against root certificates (verify-ca; verify-full adds the name; require
/// and prefer when a root certificate exists), with libpq's verdicts where webpki's are
/// stricter than OpenSSL's:
/// - a certificate of the root file presented as the server's own is trusted as it is, within
///   its validity period (OpenSSL does; webpki refuses one marked CA, `CaUsedAsEndEntity`,
///   which is how PostgreSQL's documented self-signed certificate is made);
/// - a name is checked by libpq's rules ([`name::libpq_names_host`]: the Common Name counts
///   when the certificate has no subjectAltName of the host's kind).
#[derive(Debug)]
struct Libpq {
    webpki: Arc<WebPkiServerVerifier>,
    /// The root file's certificates (none for `sslrootcert=system`).
    roots: Vec<CertificateDer<'static>>,
    /// `~/.postgresql/root.crl` is in force: OpenSSL then needs a CRL for the directly trusted
    /// certificate too (one it issued itself), which this client cannot check, so such a
    /// certificate is refused rather than trusted unchecked.
    revocation_checked: bool,
    check_name: bool,
}

/// Whether a failed handshake's error `e` is a revocation list's verdict (root.crl).
pub(crate) fn is_revocation(e: &std::io::Error) -> bool {
    matches!(
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::Revoked
                | CertificateError::UnknownRevocationStatus
                | CertificateError::ExpiredRevocationList
                | CertificateError::ExpiredRevocationListContext { .. }
        ))
    )
}

/// Whether webpki's objection `e` to a certificate of the root file, presented as the
/// server's own, is one OpenSSL does not make to a certificate it trusts directly: that it is
/// marked CA (`CaUsedAsEndEntity`) or of a form webpki will not take for a server
/// (`Other`), or has no issuer webpki could find. Every other verdict (revoked, expired, the
/// wrong purpose, a bad signature) stands.
fn overridden_by_direct_trust(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(
            CertificateError::Other(_) | CertificateError::UnknownIssuer
        )
    )
}

impl ServerCertVerifier for Libpq {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name_ok = || {
            !self.check_name
                || ParsedCertificate::try_from(end_entity)
                    .is_ok_and(|cert| verify_server_name(&cert, server_name).is_ok())
                || name::libpq_names_host(end_entity, server_name)
        };
        let not_valid_for_name =
            || rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            // The chain is good (webpki checks the name last).
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if name_ok() => Ok(ServerCertVerified::assertion()),
            Err(e)
                if overridden_by_direct_trust(&e)
                    && self.roots.iter().any(|r| r.as_ref() == end_entity.as_ref()) =>
            {
                name::valid_at(end_entity, now).map_err(rustls::Error::InvalidCertificate)?;
                name::for_servers(end_entity).map_err(rustls::Error::InvalidCertificate)?;
                if !name_ok() {
                    return Err(not_valid_for_name());
                }
                if self.revocation_checked {
                    return Err(rustls::Error::InvalidCertificate(
                        CertificateError::UnknownRevocationStatus,
                    ));
                }
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
