use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use slipstream_pg::ErrorKind;
use slipstream_testkit::Cluster;

struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

/// A test CA and a server certificate for `localhost` only.
fn pki() -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "slipstream test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
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
    Cluster::builder()
        .file("server.crt", &pki.cert_pem)
        .file("server.key", &pki.key_pem)
        .setting("ssl", "on")
        .setting("ssl_cert_file", "server.crt")
        .setting("ssl_key_file", "server.key")
        .hba("local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
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
