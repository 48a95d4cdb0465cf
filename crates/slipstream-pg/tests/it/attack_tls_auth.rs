//! Attacks on the client's TLS and authentication promises (docs/client.md: TLS, client
//! certificates, require_auth, channel binding), with libpq as the reference where the docs
//! promise its behaviour.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use slipstream_testkit::Cluster;

use super::attack_connect::{landed, libpq, ours_env};

const HOSTSSL_TRUST: &str = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n";

/// A self-signed server certificate as PostgreSQL's documentation makes one
/// (`openssl req -new -x509 -nodes -subj "/CN=localhost"`): the host's name only in the
/// subject's CN, no subjectAltName, and OpenSSL's default `v3_ca` extensions (CA:TRUE). The
/// documentation then copies it to the client as its root certificate.
fn docs_self_signed(cn: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Runs `kv` through libpq and slipstream (each with an empty HOME) and lists where either
/// differs from `ok`.
async fn compare(cases: &[(String, bool)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (kv, ok) in cases {
        let theirs = libpq(kv, &[]).await;
        let o = ours_env(kv, &[]).await;
        if theirs.is_ok() != *ok || o.is_ok() != *ok {
            wrong.push(format!(
                "{kv}: expected ok={ok}, libpq {theirs:?}, ours {o:?}"
            ));
        }
    }
    wrong
}

/// Promise: TLS, "verify-ca: the chain, against sslrootcert; verify-full: the chain and that
/// the certificate names the host", libpq's sslmode semantics. Input: the self-signed
/// certificate PostgreSQL's documentation ("Creating Certificates") tells you to make, given
/// to the client as its own root (`sslrootcert=server.crt`). libpq (OpenSSL) trusts it under
/// verify-ca, verify-full (host `localhost`, its CN) and require. slipstream refused all three
/// ("invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))"): webpki will not accept
/// a CA certificate as the server's, nor a name found only in the CN.
#[tokio::test]
async fn a_self_signed_certificate_made_as_postgresqls_docs_show_is_trusted_as_its_own_root() {
    let (cert, key) = docs_self_signed("localhost");
    let c = Cluster::builder()
        .tls(&cert, &key)
        .hba(HOSTSSL_TRUST)
        .start()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("server.crt");
    std::fs::write(&root, &cert).unwrap();
    // Another self-signed certificate of the same name: trusts nothing but itself.
    let (stranger, _) = docs_self_signed("localhost");
    let other = dir.path().join("other.crt");
    std::fs::write(&other, &stranger).unwrap();
    let kv = |host: &str, mode: &str, root: &std::path::Path| {
        format!(
            "host={host} port={} user=postgres dbname=postgres sslmode={mode} sslrootcert={}",
            c.port(),
            root.display()
        )
    };
    let wrong = compare(&[
        (kv("localhost", "verify-ca", &root), true),
        (kv("localhost", "verify-full", &root), true),
        (kv("localhost", "require", &root), true),
        // The name is still checked, and the certificate must still be the trusted one.
        (kv("127.0.0.1", "verify-full", &root), false),
        (kv("localhost", "verify-ca", &other), false),
        (kv("localhost", "require", &other), false),
    ])
    .await;
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(
        ours_env(&kv("localhost", "verify-full", &root), &[]).await,
        Ok(landed(c.port(), "postgres"))
    );
}

/// Promise: verify-full checks "that the certificate names the host", as libpq. Input: a
/// CA-signed server certificate that names its host only in the subject's CN (no
/// subjectAltName), as `openssl req -subj /CN=...` makes it. libpq accepts it for that host
/// (it reads the CN when there is no subjectAltName of the host's kind) and refuses another
/// name; slipstream refused it for every name ("NotValidForName").
#[tokio::test]
async fn verify_full_accepts_a_host_named_only_in_the_common_name_as_libpq_does() {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "attack CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &ca).unwrap();
    let c = Cluster::builder()
        .tls(cert.pem(), key.serialize_pem())
        .hba(HOSTSSL_TRUST)
        .start()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ca.crt");
    std::fs::write(&root, ca.pem()).unwrap();
    let kv = |host: &str| {
        format!(
            "host={host} port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={}",
            c.port(),
            root.display()
        )
    };
    let wrong = compare(&[(kv("localhost"), true), (kv("127.0.0.1"), false)]).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}
