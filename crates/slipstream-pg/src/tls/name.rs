//! libpq's rules for whether a server certificate names the host (`verify-full`), and
//! OpenSSL's acceptance of a root certificate presented as the server's own.
//!
//! webpki follows RFC 6125 strictly: only the subjectAltName counts. libpq 15
//! (`pgtls_verify_peer_name_matches_certificate_guts`, `fe-secure-common.c`) reads the
//! subject's Common Name when the certificate has no subjectAltName of the host's kind (a DNS
//! name for a host name, an address for an address), which is how `openssl req -subj
//! /CN=db.example.com` (PostgreSQL's own documented recipe) makes certificates. These rules
//! only ever widen webpki's verdict to libpq's; the chain is checked by webpki first.

use std::net::IpAddr;

use rustls::CertificateError;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::prelude::{ASN1Time, FromDer, GeneralName, X509Certificate};

/// Whether `cert` names `host` by libpq's rules: any subjectAltName DNS entry that matches
/// the host as written, any address entry equal to an address host, and, when there is no
/// entry of the host's kind, the subject's first Common Name.
pub(super) fn libpq_names_host(cert: &CertificateDer<'_>, host: &ServerName<'_>) -> bool {
    let Ok((_, cert)) = X509Certificate::from_der(cert.as_ref()) else {
        return false;
    };
    let (text, address) = match host {
        ServerName::DnsName(name) => (name.as_ref().to_string(), None),
        ServerName::IpAddress(ip) => {
            let ip = IpAddr::from(*ip);
            (ip.to_string(), Some(ip))
        }
        _ => return false,
    };
    let mut check_cn = true;
    // A malformed or repeated extension: libpq (OpenSSL) would not read it either.
    let Ok(san) = cert.subject_alternative_name() else {
        return false;
    };
    for name in san.iter().flat_map(|san| &san.value.general_names) {
        match name {
            GeneralName::DNSName(pattern) => {
                check_cn &= address.is_some();
                if name_matches(pattern, &text) {
                    return true;
                }
            }
            GeneralName::IPAddress(bytes) => {
                check_cn &= address.is_none();
                let matches = match address {
                    Some(IpAddr::V4(a)) => *bytes == a.octets(),
                    Some(IpAddr::V6(a)) => *bytes == a.octets(),
                    None => false,
                };
                if matches {
                    return true;
                }
            }
            _ => {}
        }
    }
    check_cn
        && cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .is_some_and(|cn| name_matches(cn, &text))
}

/// libpq's `pq_verify_peer_name_matches_certificate_name` and `wildcard_certificate_match`:
/// equal ignoring ASCII case, or `*.rest` matching one leading label of `host` (no dot in
/// what the `*` covers). A name holding a NUL never matches (libpq refuses it).
fn name_matches(pattern: &str, host: &str) -> bool {
    if pattern.contains('\0') {
        return false;
    }
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    let Some(suffix) = pattern.strip_prefix('*') else {
        return false;
    };
    if !suffix.starts_with('.') || suffix.len() < 2 || pattern.len() > host.len() {
        return false;
    }
    let Some(start) = host.len().checked_sub(suffix.len()) else {
        return false;
    };
    match (host.get(..start), host.get(start..)) {
        (Some(label), Some(rest)) => rest.eq_ignore_ascii_case(suffix) && !label.contains('.'),
        _ => false,
    }
}

/// Whether `cert`, found byte for byte in the root certificate file and so trusted as it is
/// (as OpenSSL trusts a self-signed server certificate copied to the client), is within its
/// validity period at `now`: `Expired` or `NotValidYet` if not (or if it cannot be read).
pub(super) fn valid_at(cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), CertificateError> {
    let Ok((_, cert)) = X509Certificate::from_der(cert.as_ref()) else {
        return Err(CertificateError::BadEncoding);
    };
    let now = i64::try_from(now.as_secs())
        .ok()
        .and_then(|secs| ASN1Time::from_timestamp(secs).ok())
        .ok_or(CertificateError::Expired)?;
    let validity = cert.validity();
    if now < validity.not_before {
        Err(CertificateError::NotValidYet)
    } else if now > validity.not_after {
        Err(CertificateError::Expired)
    } else {
        Ok(())
    }
}

/// OpenSSL's check of a server certificate's purpose (`check_purpose_ssl_server`), which it
/// makes of a directly trusted certificate too: an extended key usage, if any, must allow
/// `serverAuth`, and a key usage, if any, a TLS key exchange (digital signature, key
/// encipherment or agreement).
pub(super) fn for_servers(cert: &CertificateDer<'_>) -> Result<(), CertificateError> {
    let Ok((_, cert)) = X509Certificate::from_der(cert.as_ref()) else {
        return Err(CertificateError::BadEncoding);
    };
    let eku_ok = match cert.extended_key_usage() {
        Ok(None) => true,
        Ok(Some(eku)) => eku.value.server_auth,
        Err(_) => false,
    };
    let ku_ok = match cert.key_usage() {
        Ok(None) => true,
        Ok(Some(ku)) => {
            ku.value.digital_signature() || ku.value.key_encipherment() || ku.value.key_agreement()
        }
        Err(_) => false,
    };
    match eku_ok && ku_ok {
        true => Ok(()),
        false => Err(CertificateError::InvalidPurpose),
    }
}

#[cfg(test)]
mod tests {
    use super::name_matches;

    #[test]
    fn names_match_as_in_libpq() {
        for (pattern, host, ok) in [
            ("localhost", "localhost", true),
            ("LocalHost", "localhost", true),
            ("db.example.com", "db.example.org", false),
            ("*.example.com", "db.example.com", true),
            ("*.example.com", "DB.Example.COM", true),
            ("*.example.com", "a.b.example.com", false),
            ("*.example.com", "example.com", false),
            ("*.example.com", ".example.com", false),
            ("*example.com", "dbexample.com", false),
            ("*.", "a.", false),
            ("db*.example.com", "db1.example.com", false),
            ("local\0host", "local", false),
            ("*.é.com", "x.é.com", true),
            ("*.com", "é.com", true),
        ] {
            assert_eq!(name_matches(pattern, host), ok, "{pattern:?} vs {host:?}");
        }
    }
}
