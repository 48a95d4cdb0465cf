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
    self_signed_with(cn, |_| {})
}

/// [`docs_self_signed`] with `adjust` applied to its parameters (a validity, a key usage).
fn self_signed_with(cn: &str, adjust: impl FnOnce(&mut CertificateParams)) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    adjust(&mut params);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A cluster serving `cert` over TLS only, and a directory holding `cert` as the client's root
/// file (`server.crt`, its path returned), as PostgreSQL's documentation sets one up.
fn serving_its_own_root(cert: &str, key: &str) -> (Cluster, tempfile::TempDir, std::path::PathBuf) {
    let cluster = Cluster::builder()
        .tls(cert, key)
        .hba(HOSTSSL_TRUST)
        .start()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("server.crt");
    std::fs::write(&root, cert).unwrap();
    (cluster, dir, root)
}

/// A conninfo for `localhost` on `c` with `sslmode` and `sslrootcert`.
fn to_localhost(c: &Cluster, mode: &str, root: &std::path::Path) -> String {
    format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode={mode} sslrootcert={}",
        c.port(),
        root.display()
    )
}

/// A self-signed CA named `cn`, for signing test certificates and revocation lists.
fn test_ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
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
    let (c, dir, root) = serving_its_own_root(&cert, &key);
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
    let ca = test_ca("attack CA");
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

/// A server that lets `postgres` in over TLS only with a client certificate of its CA, and
/// that certificate and its key in a directory of their own.
struct CertAuth {
    cluster: Cluster,
    dir: tempfile::TempDir,
}

impl CertAuth {
    fn start() -> CertAuth {
        let ca = test_ca("attack CA");
        let server_key = KeyPair::generate().unwrap();
        let mut sp = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        sp.distinguished_name.push(DnType::CommonName, "localhost");
        let server_cert = sp.signed_by(&server_key, &ca).unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut cp = CertificateParams::new(Vec::<String>::new()).unwrap();
        cp.distinguished_name.push(DnType::CommonName, "postgres");
        let client_cert = cp.signed_by(&client_key, &ca).unwrap();
        let cluster = Cluster::builder()
            .tls(server_cert.pem(), server_key.serialize_pem())
            .file("ca.crt", ca.pem())
            .setting("ssl_ca_file", "ca.crt")
            .hba("local all all trust\nhostssl all all 127.0.0.1/32 cert\n")
            .start()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("client.crt"), client_cert.pem()).unwrap();
        let key = dir.path().join("plain.key");
        std::fs::write(&key, client_key.serialize_pem()).unwrap();
        set_mode(&key, 0o600);
        CertAuth { cluster, dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// The connection string with the client certificate and the key file `key`.
    fn conninfo(&self, key: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=require sslcert={} sslkey={}",
            self.cluster.port(),
            self.path("client.crt").display(),
            self.path(key).display()
        )
    }

    /// `openssl <args> -in plain.key -out <name>`, mode 0600.
    fn openssl(&self, name: &str, args: &[&str]) {
        let out = std::process::Command::new("openssl")
            .args(args)
            .arg("-in")
            .arg(self.path("plain.key"))
            .arg("-out")
            .arg(self.path(name))
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
        set_mode(&self.path(name), 0o600);
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Promise: "An error must name what failed and what to do"; `sslpassword` is documented as
/// unsupported. Input: the client's key encrypted with a passphrase, as PKCS#8
/// (`BEGIN ENCRYPTED PRIVATE KEY`) and in OpenSSL's traditional form (`Proc-Type:
/// 4,ENCRYPTED`). libpq asks for the passphrase and fails "could not load private key file".
/// slipstream said the file "holds no private key" (PKCS#8) or "InvalidCharacter(45)" (the
/// traditional form): neither says the key is encrypted, nor that it must be decrypted.
#[tokio::test]
async fn an_encrypted_client_key_is_refused_saying_it_is_encrypted_and_how_to_decrypt_it() {
    let s = CertAuth::start();
    assert_eq!(
        ours_env(&s.conninfo("plain.key"), &[]).await,
        Ok(landed(s.cluster.port(), "postgres"))
    );
    s.openssl(
        "pkcs8.key",
        &[
            "pkcs8",
            "-topk8",
            "-v2",
            "aes-256-cbc",
            "-passout",
            "pass:pw",
        ],
    );
    s.openssl("traditional.key", &["ec", "-aes256", "-passout", "pass:pw"]);
    for key in ["pkcs8.key", "traditional.key"] {
        let kv = s.conninfo(key);
        assert!(libpq(&kv, &[]).await.is_err(), "libpq took {key}");
        let e = ours_env(&kv, &[]).await.unwrap_err();
        for says in [key, "encrypted", "openssl pkey"] {
            assert!(e.contains(says), "{key}: {e:?} does not say {says:?}");
        }
    }
}

/// Promise: client certificates as libpq takes them. Input: a client key file that others
/// may read (0644, 0604). libpq refuses it ("private key file ... has group or world access;
/// file must have permissions u=rw (0600) or less ..."), as it ignores such a password file,
/// so that an exposed key is noticed. slipstream used it and connected. Mode 0640 is allowed
/// by libpq only for a file owned by root; both must agree on it whoever runs the test.
#[tokio::test]
async fn a_client_key_others_can_read_is_refused_as_libpq_refuses_it() {
    let s = CertAuth::start();
    let mut wrong = Vec::new();
    for mode in [0o600, 0o400, 0o644, 0o604, 0o640, 0o660] {
        set_mode(&s.path("plain.key"), mode);
        let kv = s.conninfo("plain.key");
        let theirs = libpq(&kv, &[]).await;
        let o = ours_env(&kv, &[]).await;
        let refused_by_both = theirs.is_err()
            && o.as_ref()
                .is_err_and(|e| e.contains("has group or world access") && e.contains("0600"));
        if !(refused_by_both || theirs.is_ok() && o.is_ok()) {
            wrong.push(format!("mode {mode:o}: libpq {theirs:?}, ours {o:?}"));
        }
        if mode == 0o644 && theirs.is_ok() {
            wrong.push("libpq took a world-readable key".to_string());
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Promise: an error names what failed and what to do. Input: an `sslkey` that is a valid key,
/// but not the `sslcert` certificate's (another EC key; an RSA key). libpq names the key file
/// ("could not load private key file \"...\": key values mismatch"). slipstream said only "the
/// client certificate and key do not match: keys may not be consistent: KeyMismatch": which
/// files (either may be a default under ~/.postgresql the user never wrote), and what to set?
#[tokio::test]
async fn a_client_key_of_another_certificate_is_refused_naming_both_files() {
    let s = CertAuth::start();
    std::fs::write(
        s.path("other.key"),
        KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    set_mode(&s.path("other.key"), 0o600);
    let out = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-out"])
        .arg(s.path("rsa.key"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    set_mode(&s.path("rsa.key"), 0o600);
    for key in ["other.key", "rsa.key"] {
        let kv = s.conninfo(key);
        assert!(libpq(&kv, &[]).await.is_err(), "libpq took {key}");
        let e = ours_env(&kv, &[]).await.unwrap_err();
        let cert = s.path("client.crt").display().to_string();
        let key_path = s.path(key).display().to_string();
        for says in [cert.as_str(), key_path.as_str(), "set sslkey"] {
            assert!(e.contains(says), "{key}: {e:?} does not say {says:?}");
        }
    }
}

/// Promise: root certificates are used as libpq uses them ("nothing, unless a root certificate
/// exists: then the chain (as libpq)"), and CRLs are "refused ... where libpq would use them"
/// rather than ignored. Input: `~/.postgresql/root.crl` beside `~/.postgresql/root.crt`,
/// revoking the server's certificate. libpq loads that file by default whenever it checks the
/// chain (every sslmode but disable, once root.crt exists) and refuses the revoked certificate.
/// slipstream ignored the file and connected: a revoked server certificate was trusted,
/// silently.
#[tokio::test]
async fn the_default_root_crl_revokes_a_server_certificate_as_in_libpq() {
    use rcgen::{
        CertificateRevocationListParams, KeyIdMethod, RevokedCertParams, SerialNumber,
        date_time_ymd,
    };
    let ca = test_ca("attack CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.serial_number = Some(SerialNumber::from(4242u64));
    let cert = params.signed_by(&key, &ca).unwrap();
    let crl = |revoked: u64| {
        CertificateRevocationListParams {
            this_update: date_time_ymd(2020, 1, 1),
            next_update: date_time_ymd(2999, 1, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: vec![RevokedCertParams {
                serial_number: SerialNumber::from(revoked),
                revocation_time: date_time_ymd(2021, 1, 1),
                reason_code: None,
                invalidity_date: None,
            }],
            key_identifier_method: KeyIdMethod::Sha256,
        }
        .signed_by(&ca)
        .unwrap()
        .pem()
        .unwrap()
    };
    let c = Cluster::builder()
        .tls(cert.pem(), key.serialize_pem())
        .hba(HOSTSSL_TRUST)
        .start()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let dot = home.path().join(".postgresql");
    std::fs::create_dir(&dot).unwrap();
    std::fs::write(dot.join("root.crt"), ca.pem()).unwrap();
    let h = home.path().to_str().unwrap().to_string();
    let env = [("HOME", h.as_str())];
    let mut wrong = Vec::new();
    for (revoked, ok) in [(4242, false), (7, true)] {
        std::fs::write(dot.join("root.crl"), crl(revoked)).unwrap();
        for mode in ["require", "verify-ca", "verify-full"] {
            let kv = format!(
                "host=localhost port={} user=postgres dbname=postgres sslmode={mode}",
                c.port()
            );
            let theirs = libpq(&kv, &env).await;
            let o = ours_env(&kv, &env).await;
            if theirs.is_ok() != ok || o.is_ok() != ok {
                wrong.push(format!(
                    "CRL revoking {revoked}, {mode}: expected ok={ok}, libpq {theirs:?}, ours {o:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Promise (docs/client.md, Limits): a server may ask for at most 100 000 SCRAM iterations, and
/// errors name what failed and what to do. Input: a role whose SCRAM secret was stored with
/// 100 001 iterations (PostgreSQL takes a pre-hashed secret with any count; PostgreSQL 16's
/// `scram_iterations` makes them, OWASP advises 600 000). libpq does the work, and connects
/// with the right password.
/// slipstream refuses, as documented, but said only "invalid SCRAM server message: SCRAM
/// iteration count exceeds the maximum allowed": not the count, not the limit, not that the
/// server is fine and the role's secret is what to change.
#[tokio::test]
async fn too_many_scram_iterations_are_refused_saying_how_many_and_what_to_change() {
    let c = Cluster::builder()
        .hba("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        .start()
        .unwrap();
    // A well-formed secret (salt, StoredKey, ServerKey); the client refuses before any of it
    // matters.
    let b64 = |n: usize| "A".repeat(n);
    c.psql(&format!(
        "CREATE ROLE many LOGIN PASSWORD 'SCRAM-SHA-256$100001:{}==${}=:{}='",
        b64(22),
        b64(43),
        b64(43)
    ))
    .unwrap();
    let Err(e) = slipstream_pg::connect(&c.url_for("many", Some("pw"))).await else {
        panic!("100 001 iterations were accepted");
    };
    assert_eq!(e.kind(), slipstream_pg::ErrorKind::Authentication, "{e}");
    let e = e.to_string();
    for says in ["100001", "100000", "scram_iterations", "ALTER ROLE"] {
        assert!(e.contains(says), "{e:?} does not say {says:?}");
    }
}

/// Holds: a root-file certificate presented as the server's own is trusted only within its
/// validity period, and only for its own name, as OpenSSL (libpq) trusts it: an expired copy
/// of PostgreSQL's documented self-signed certificate is refused by both.
#[tokio::test]
async fn holds_an_expired_self_signed_root_is_refused_as_in_libpq() {
    let (cert, key) = self_signed_with("localhost", |params| {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    });
    let (c, _dir, root) = serving_its_own_root(&cert, &key);
    let kv = |mode: &str| to_localhost(&c, mode, &root);
    let wrong = compare(&[(kv("verify-ca"), false), (kv("verify-full"), false)]).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
    let e = ours_env(&kv("verify-full"), &[]).await.unwrap_err();
    assert!(e.contains("expired"), "{e}");
}

/// Promise: `~/.postgresql/root.crl` is used as libpq uses it, which needs a CRL for every
/// certificate of the chain. Input: PostgreSQL's documented self-signed certificate as its own
/// root, with a root.crl from another CA beside it (nothing says whether this certificate is
/// revoked). libpq (OpenSSL's CRL_CHECK_ALL) refuses ("certificate verify failed"). The
/// direct trust of a root-file certificate (4fad58d) took webpki's "unknown revocation
/// status" for one more objection it overrides, and connected.
#[tokio::test]
async fn a_self_signed_root_without_a_crl_in_root_crl_is_refused_as_in_libpq() {
    use rcgen::{CertificateRevocationListParams, KeyIdMethod, SerialNumber, date_time_ymd};
    let (cert, key) = docs_self_signed("localhost");
    let c = Cluster::builder()
        .tls(&cert, &key)
        .hba(HOSTSSL_TRUST)
        .start()
        .unwrap();
    let other = test_ca("another CA");
    let crl = CertificateRevocationListParams {
        this_update: date_time_ymd(2020, 1, 1),
        next_update: date_time_ymd(2999, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: Vec::new(),
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&other)
    .unwrap()
    .pem()
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let dot = home.path().join(".postgresql");
    std::fs::create_dir(&dot).unwrap();
    std::fs::write(dot.join("root.crt"), &cert).unwrap();
    std::fs::write(dot.join("root.crl"), crl).unwrap();
    let h = home.path().to_str().unwrap().to_string();
    let env = [("HOME", h.as_str())];
    let mut wrong = Vec::new();
    for mode in ["require", "verify-ca", "verify-full"] {
        let kv = format!(
            "host=localhost port={} user=postgres dbname=postgres sslmode={mode}",
            c.port()
        );
        let theirs = libpq(&kv, &env).await;
        let o = ours_env(&kv, &env).await;
        if theirs.is_ok() || o.is_ok() {
            wrong.push(format!("{mode}: libpq {theirs:?}, ours {o:?}"));
        }
        // The user may never have heard of that file: the refusal must name it.
        if o.as_ref().is_err_and(|e| !e.contains("root.crl")) {
            wrong.push(format!("{mode}: the refusal does not name root.crl: {o:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Promise: verify-ca checks the chain as libpq does. Input: PostgreSQL's documented self-signed
/// certificate given as its own root, but with an extended key usage for clients only. libpq
/// (OpenSSL's purpose check) refuses it under verify-ca and verify-full; the direct trust of
/// 4fad58d took it, since webpki's first objection is that it is a CA. Trusting a root-file
/// certificate as the server's own must override only what OpenSSL does not object to.
#[tokio::test]
async fn a_self_signed_root_for_client_use_only_is_refused_as_in_libpq() {
    let (cert, key) = self_signed_with("localhost", |params| {
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    });
    let (c, _dir, root) = serving_its_own_root(&cert, &key);
    let kv = |mode: &str| to_localhost(&c, mode, &root);
    let wrong = compare(&[(kv("verify-ca"), false), (kv("verify-full"), false)]).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}
