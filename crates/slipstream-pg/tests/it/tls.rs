use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use slipstream_pg::ErrorKind;
use slipstream_testkit::Cluster;

pub(super) struct Pki {
    pub(super) ca_pem: String,
    pub(super) cert_pem: String,
    pub(super) key_pem: String,
}

/// A test CA and a server certificate for `localhost` only.
pub(super) fn pki() -> Pki {
    pki_signed_with(&rcgen::PKCS_ECDSA_P256_SHA256)
}

/// As [`pki`], with a CA key of algorithm `alg`: the server certificate's signature algorithm
/// is the CA's (ECDSA P-384 signs with SHA-384).
fn pki_signed_with(alg: &'static rcgen::SignatureAlgorithm) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "slipstream test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate_for(alg).unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&server_key, &ca).unwrap();
    Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: server_key.serialize_pem(),
    }
}

fn tls_cluster(pki: &Pki) -> Cluster {
    tls_cluster_with(
        pki,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
}

/// A cluster with TLS on, serving `pki`'s certificate, with `hba` as its pg_hba.conf.
pub(super) fn tls_cluster_with(pki: &Pki, hba: &str) -> Cluster {
    Cluster::builder()
        .tls(&pki.cert_pem, &pki.key_pem)
        .hba(hba)
        .start()
        .unwrap()
}

#[tokio::test]
async fn verify_full_accepts_the_right_host_and_rejects_another_name() {
    let pki = pki();
    let cluster = tls_cluster(&pki);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let port = cluster.port();

    let ok = format!(
        "host=localhost port={port} user=postgres sslmode=verify-full sslrootcert={}",
        ca.display()
    );
    let mut client = slipstream_pg::connect(&ok).await.unwrap();
    assert!(client.is_tls());
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0).unwrap(), "the server sees TLS");

    // The certificate names `localhost`, not `127.0.0.1`.
    let wrong = format!(
        "host=127.0.0.1 port={port} user=postgres sslmode=verify-full sslrootcert={}",
        ca.display()
    );
    let err = slipstream_pg::connect(&wrong).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(format!("{err:?}").contains("NotValidForName"), "{err:?}");

    // verify-ca checks the chain but not the name.
    let ca_only = format!(
        "host=127.0.0.1 port={port} user=postgres sslmode=verify-ca sslrootcert={}",
        ca.display()
    );
    slipstream_pg::connect(&ca_only).await.unwrap();
}

#[tokio::test]
async fn verify_full_rejects_a_certificate_from_another_ca() {
    let pki = pki();
    let cluster = tls_cluster(&pki);
    let other = self::pki();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("other-ca.pem");
    std::fs::write(&ca, &other.ca_pem).unwrap();
    let url = format!(
        "host=localhost port={} user=postgres sslmode=verify-full sslrootcert={}",
        cluster.port(),
        ca.display()
    );
    let err = slipstream_pg::connect(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
}

#[tokio::test]
async fn require_and_prefer_against_servers_with_and_without_tls() {
    let pki = pki();
    let tls = tls_cluster(&pki);
    let mut c = slipstream_pg::connect(&format!(
        "{}?sslmode=require&sslrootcert=/nonexistent",
        tls.url()
    ))
    .await
    .unwrap();
    assert!(
        c.is_tls(),
        "require encrypts without checking the certificate"
    );
    c.batch_execute("SELECT 1").await.unwrap();

    let plain = Cluster::start().unwrap();
    let c = slipstream_pg::connect(&format!("{}?sslmode=prefer", plain.url()))
        .await
        .unwrap();
    assert!(!c.is_tls(), "prefer falls back to plaintext");
    let err = slipstream_pg::connect(&format!("{}?sslmode=require", plain.url()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls);
    assert!(err.to_string().contains("does not support TLS"), "{err}");
}

#[tokio::test]
async fn verify_full_without_a_root_certificate_says_what_to_set() {
    let err = slipstream_pg::connect(
        "host=localhost sslmode=verify-full sslrootcert=/nonexistent/ca.pem",
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
}

// SCRAM-SHA-256-PLUS and channel_binding

/// A TLS cluster where `u_scram` logs in with SCRAM over TLS and without, and everyone else is
/// trusted over TLS.
fn scram_tls_cluster(pki: &Pki) -> Cluster {
    let cluster = Cluster::builder()
        .tls(&pki.cert_pem, &pki.key_pem)
        .hba(
            "local all all trust\n\
             host all u_scram 127.0.0.1/32 scram-sha-256\n\
             hostssl all all 127.0.0.1/32 trust\n",
        )
        .start()
        .unwrap();
    cluster
        .psql("SET password_encryption = 'scram-sha-256'; CREATE ROLE u_scram LOGIN PASSWORD 'pw-scram';")
        .unwrap();
    cluster
}

#[tokio::test]
async fn channel_binding_require_succeeds_with_scram_plus_over_tls() {
    // P-256 certificates are signed with SHA-256, P-384 ones with SHA-384: RFC 5929 binds with
    // the certificate's own hash, so the second case fails if the client always used SHA-256.
    for alg in [
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
    ] {
        scram_plus_over_tls(alg).await;
    }
}

async fn scram_plus_over_tls(alg: &'static rcgen::SignatureAlgorithm) {
    let pki = pki_signed_with(alg);
    let cluster = scram_tls_cluster(&pki);
    let url = |params: &str| format!("{}?{params}", cluster.url_for("u_scram", Some("pw-scram")));
    // The server checks the client's channel-binding data against the hash of its own
    // certificate: success proves the tls-server-end-point hash is the one PostgreSQL computes.
    for params in [
        "sslmode=require&channel_binding=require",
        "sslmode=require&channel_binding=prefer",
        "sslmode=require&channel_binding=disable",
    ] {
        let mut c = slipstream_pg::connect(&url(params))
            .await
            .unwrap_or_else(|e| panic!("{params}: {e}"));
        assert!(c.is_tls());
        assert_eq!(
            super::scalar::<String>(&mut c, "SELECT current_user::text").await,
            "u_scram"
        );
    }
    // verify-full and channel binding together.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    slipstream_pg::connect(&format!(
        "host=localhost port={} user=u_scram password=pw-scram dbname=postgres \
         sslmode=verify-full sslrootcert={} channel_binding=require",
        cluster.port(),
        ca.display()
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn channel_binding_require_fails_clearly_without_tls_or_with_trust() {
    let pki = pki();
    let cluster = scram_tls_cluster(&pki);
    // No TLS: SCRAM is offered without PLUS.
    let e = slipstream_pg::connect(&format!(
        "{}?sslmode=disable&channel_binding=require",
        cluster.url_for("u_scram", Some("pw-scram"))
    ))
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(e.to_string().contains("channel binding is required"), "{e}");
    assert!(e.to_string().contains("does not use TLS"), "{e}");
    // The same without channel binding required works: the refusal is channel_binding's.
    slipstream_pg::connect(&format!(
        "{}?sslmode=disable",
        cluster.url_for("u_scram", Some("pw-scram"))
    ))
    .await
    .unwrap();

    // Trust over TLS: the server lets the client in without proving anything.
    let e = slipstream_pg::connect(&format!(
        "{}?sslmode=require&channel_binding=require",
        cluster.url()
    ))
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(
        e.to_string()
            .contains("server authenticated client without channel binding"),
        "{e}"
    );
}

#[tokio::test]
async fn sslrootcert_system_demands_verify_full() {
    for mode in ["require", "verify-ca", "prefer", "disable"] {
        let e = slipstream_pg::connect(&format!(
            "host=localhost user=u sslrootcert=system sslmode={mode}"
        ))
        .await
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{mode}: {e}");
        assert!(
            e.to_string().contains(&format!("weak sslmode \"{mode}\"")),
            "{mode}: {e}"
        );
    }
    let config: slipstream_pg::Config = "host=h sslrootcert=system".parse().unwrap();
    assert_eq!(
        config.get_ssl_mode(),
        slipstream_pg::SslMode::VerifyFull,
        "verify-full is the default with sslrootcert=system"
    );
}
