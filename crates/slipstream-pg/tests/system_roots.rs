//! `sslrootcert=system` against a real TLS server whose CA is made the "operating system's"
//! trust store through `SSL_CERT_FILE` (honoured by rustls-native-certs as by OpenSSL). A test
//! binary of its own: it sets an environment variable, which no other test may race with.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use slipstream_pg::ErrorKind;
use slipstream_testkit::Cluster;

#[test]
fn sslrootcert_system_trusts_the_system_store_and_checks_the_name() {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "slipstream system-store test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca-bundle.pem");
    std::fs::write(&bundle, ca.pem()).unwrap();
    // SAFETY: this is the only test in this binary and no other thread has started yet (the
    // runtime below is built after this line), so nothing reads the environment concurrently.
    unsafe {
        std::env::set_var("SSL_CERT_FILE", &bundle);
        std::env::remove_var("SSL_CERT_DIR");
    }
    let cluster = Cluster::builder()
        .tls(cert.pem(), key.serialize_pem())
        .hba("local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
        .start()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let port = cluster.port();
        let mut client = slipstream_pg::connect(&format!(
            "host=localhost port={port} user=postgres dbname=postgres sslrootcert=system"
        ))
        .await
        .expect("the system store holds the CA; verify-full is implied");
        assert!(client.is_tls());
        client.batch_execute("SELECT 1").await.unwrap();
        // The name is checked: the certificate names localhost, not 127.0.0.1.
        let e = slipstream_pg::connect(&format!(
            "host=127.0.0.1 port={port} user=postgres dbname=postgres sslrootcert=system"
        ))
        .await
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    });
}
