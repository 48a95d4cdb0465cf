//! `tls-server-end-point` channel-binding data (RFC 5929 section 4.1): a hash of the server's
//! DER certificate, with the hash function of the certificate's signature algorithm, except that
//! MD5 and SHA-1 are replaced by SHA-256.
//!
//! The server computes the same value from its own certificate (PostgreSQL's
//! `be_tls_get_certificate_hash`); both sides must pick the same hash, so the rule here must
//! follow PostgreSQL's: algorithms with no single hash (Ed25519, RSA-PSS) are refused there too.
//!
//! Only the certificate's outer `signatureAlgorithm` is read, with a few lines of DER walking
//! rather than a full X.509 parser: nothing else of the certificate is trusted or needed.

use sha2::Digest;

/// The channel-binding data for the server certificate `der`, or why there is none.
pub(crate) fn tls_server_end_point(der: &[u8]) -> Result<Vec<u8>, String> {
    let oid = signature_algorithm(der)
        .ok_or("the server certificate is not valid DER (no signature algorithm found)")?;
    Ok(match hash_for(oid)? {
        Hash::Sha224 => sha2::Sha224::digest(der).to_vec(),
        Hash::Sha256 => sha2::Sha256::digest(der).to_vec(),
        Hash::Sha384 => sha2::Sha384::digest(der).to_vec(),
        Hash::Sha512 => sha2::Sha512::digest(der).to_vec(),
    })
}

#[derive(Clone, Copy)]
enum Hash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// Signature algorithm OIDs (DER content octets) and the hash RFC 5929 picks for each.
const ALGORITHMS: &[(&[u8], Hash)] = &[
    // md5WithRSAEncryption, sha1WithRSAEncryption: upgraded to SHA-256.
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04],
        Hash::Sha256,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05],
        Hash::Sha256,
    ),
    // sha{256,384,512,224}WithRSAEncryption.
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b],
        Hash::Sha256,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c],
        Hash::Sha384,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d],
        Hash::Sha512,
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0e],
        Hash::Sha224,
    ),
    // ecdsa-with-SHA1: upgraded; ecdsa-with-SHA{224,256,384,512}.
    (&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01], Hash::Sha256),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x01],
        Hash::Sha224,
    ),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02],
        Hash::Sha256,
    ),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03],
        Hash::Sha384,
    ),
    (
        &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04],
        Hash::Sha512,
    ),
    // dsa-with-sha1: upgraded; dsa-with-sha224, dsa-with-sha256.
    (&[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03], Hash::Sha256),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x01],
        Hash::Sha224,
    ),
    (
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x02],
        Hash::Sha256,
    ),
];

const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const ED448: &[u8] = &[0x2b, 0x65, 0x71];
const RSASSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];

fn hash_for(oid: &[u8]) -> Result<Hash, String> {
    if let Some((_, hash)) = ALGORITHMS.iter().find(|(o, _)| *o == oid) {
        return Ok(*hash);
    }
    let name = match oid {
        ED25519 => "Ed25519",
        ED448 => "Ed448",
        RSASSA_PSS => "RSASSA-PSS",
        _ => "an unknown algorithm",
    };
    Err(format!(
        "the server certificate is signed with {name}, which has no single hash for \
         tls-server-end-point (PostgreSQL cannot bind to it either)"
    ))
}

/// The OID content octets of `Certificate.signatureAlgorithm.algorithm`:
/// `SEQUENCE { tbsCertificate SEQUENCE, signatureAlgorithm SEQUENCE { OID, ... }, BIT STRING }`.
fn signature_algorithm(der: &[u8]) -> Option<&[u8]> {
    let (tag, certificate, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (_, _, rest) = tlv(certificate)?; // tbsCertificate
    let (tag, algorithm, _) = tlv(rest)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, oid, _) = tlv(algorithm)?;
    (tag == 0x06).then_some(oid)
}

/// One DER tag-length-value (single-byte tags, definite lengths): (tag, value, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, input) = input.split_first()?;
    let (&first, mut input) = input.split_first()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || input.len() < n {
            return None;
        }
        let len = input[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        input = &input[n..];
        len
    };
    (input.len() >= len).then(|| (tag, &input[..len], &input[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_follows_the_signature_algorithm() {
        // rcgen's default key is ECDSA P-256 with SHA-256; P-384 signs with SHA-384.
        for (alg, len) in [
            (&rcgen::PKCS_ECDSA_P256_SHA256, 32),
            (&rcgen::PKCS_ECDSA_P384_SHA384, 48),
        ] {
            let key = rcgen::KeyPair::generate_for(alg).unwrap();
            let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            let cert = params.self_signed(&key).unwrap();
            let hash = tls_server_end_point(cert.der()).unwrap();
            assert_eq!(hash.len(), len);
            if len == 32 {
                assert_eq!(hash, sha2::Sha256::digest(cert.der()).to_vec());
            }
        }
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let e = tls_server_end_point(cert.der()).unwrap_err();
        assert!(e.contains("Ed25519"), "{e}");
    }

    #[test]
    fn truncated_or_garbage_input_is_an_error_not_a_panic() {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        let der = params.self_signed(&key).unwrap().der().to_vec();
        for cut in [0, 1, 2, 10, der.len() / 2, der.len() - 1] {
            // The outer SEQUENCE's length no longer fits: refused, whatever the cut.
            assert!(tls_server_end_point(&der[..cut]).is_err(), "cut at {cut}");
        }
        assert!(tls_server_end_point(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(tls_server_end_point(b"not a certificate").is_err());
    }
}
