//! Attacks on connecting (review of issues 19 and 24): routing past hosts that are down or
//! hang, the password file matched per host, and `channel_binding=require` against a server
//! that offers SCRAM without channel binding. Each asserts the promise.

use slipstream_pg::Client;

use super::engine::bounded;
/// A port nothing listens on (bound, then released).
fn down_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A server that accepts connections and never says a word (a host that hangs).
async fn silent_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    port
}

async fn server_port(c: &mut Client) -> u16 {
    super::scalar::<i32>(c, "SELECT inet_server_port()").await as u16
}

// 9. Routing past a host that is down and one that hangs: with connect_timeout each is given
// up and the next tried, for every target_session_attrs that the real server satisfies, and
// with load_balance_hosts=random in any order. The timeout also bounds the real server's
// connection: 1 s (a 2 s floor, as libpq's) was exceeded once on a loaded machine (helper h72).
#[tokio::test]
async fn routing_skips_a_host_that_is_down_or_hangs() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let real = cluster.port();
    let (down, silent) = (down_port(), silent_port().await);
    // The hanging host only once (it costs the timeout); the down one for every value.
    for (attrs, middle) in [
        ("read-write", silent),
        ("any", down),
        ("primary", down),
        ("prefer-standby", down),
    ] {
        let info = format!(
            "host=127.0.0.1,127.0.0.1,127.0.0.1 port={down},{middle},{real} user=postgres \
             dbname=postgres sslmode=disable connect_timeout=4 target_session_attrs={attrs}"
        );
        let mut c = bounded(attrs, slipstream_pg::connect(&info))
            .await
            .unwrap_or_else(|e| panic!("{attrs}: {e}"));
        assert_eq!(server_port(&mut c).await, real, "{attrs}");
    }
    for _ in 0..8 {
        let info = format!(
            "host=127.0.0.1,127.0.0.1,127.0.0.1 port={down},{real},{down} user=postgres \
             dbname=postgres sslmode=disable load_balance_hosts=random"
        );
        let mut c = bounded("random", slipstream_pg::connect(&info))
            .await
            .unwrap_or_else(|e| panic!("random: {e}"));
        assert_eq!(server_port(&mut c).await, real);
    }
    // None satisfies `standby` (nor read-only): an error naming the requirement, not a hang.
    let info = format!(
        "host=127.0.0.1,127.0.0.1,127.0.0.1 port={down},{silent},{real} user=postgres \
         dbname=postgres sslmode=disable connect_timeout=4 target_session_attrs=standby"
    );
    let Err(e) = bounded("standby", slipstream_pg::connect(&info)).await else {
        panic!("no standby in the list");
    };
    eprintln!("standby: {e}");
    assert!(e.to_string().contains("standby"), "{e}");
}

// 10. The password file is matched per host: with the first host down, the second host's line
// supplies the password (and the first host's line is not used for it).
#[tokio::test]
async fn the_password_file_is_matched_per_host_when_routing() {
    let cluster = slipstream_testkit::Cluster::builder()
        .hba(
            "local all all trust\nhost all u_scram 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 trust\n",
        )
        .start()
        .unwrap();
    cluster
        .psql("SET password_encryption = 'scram-sha-256'; CREATE ROLE u_scram LOGIN PASSWORD 'pw';")
        .unwrap();
    let real = cluster.port();
    let down = down_port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgpass");
    let write = |contents: String| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    let info = format!(
        "host=localhost,127.0.0.1 port={down},{real} user=u_scram dbname=postgres \
         sslmode=disable passfile={}",
        path.display()
    );
    write(format!(
        "localhost:{down}:*:u_scram:wrong\n127.0.0.1:{real}:*:u_scram:pw\n"
    ));
    let mut c = bounded("per-host line", slipstream_pg::connect(&info))
        .await
        .unwrap_or_else(|e| panic!("the second host's line was not used: {e}"));
    assert_eq!(server_port(&mut c).await, real);
    // Only the first (down) host's line has the right password: the second host has none.
    write(format!(
        "localhost:{down}:*:u_scram:pw\n127.0.0.1:{real}:*:u_scram:wrong\n"
    ));
    let Err(e) = bounded("wrong line", slipstream_pg::connect(&info)).await else {
        panic!("the first host's password was used for the second");
    };
    eprintln!("wrong line: {e}");
    assert!(
        e.kind() == slipstream_pg::ErrorKind::Authentication
            || e.code().is_some_and(|c| c.code() == "28P01"),
        "{e}"
    );
}

// 11. channel_binding=require against a TLS server that offers only SCRAM-SHA-256 (the PLUS
// mechanism stripped, as a man in the middle would): refused before anything is answered, so
// the server never sees a SASL initial response.
#[tokio::test]
async fn channel_binding_require_refuses_scram_without_plus_over_tls_sending_nothing() {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = key.cert.der().clone();
    let pkcs8 = rustls::pki_types::PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], pkcs8)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut ssl_request = [0u8; 8];
        tcp.read_exact(&mut ssl_request).await.unwrap();
        tcp.write_all(b"S").await.unwrap();
        let mut tls = acceptor.accept(tcp).await.unwrap();
        let mut len = [0u8; 4];
        tls.read_exact(&mut len).await.unwrap();
        let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
        tls.read_exact(&mut startup).await.unwrap();
        // AuthenticationSASL offering SCRAM-SHA-256 only.
        let body = b"\0\0\0\x0aSCRAM-SHA-256\0\0";
        let mut msg = vec![b'R'];
        msg.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        msg.extend_from_slice(body);
        tls.write_all(&msg).await.unwrap();
        tls.flush().await.unwrap();
        // Whatever the client sends now (a 'p' would be the answer that must not come).
        let mut got = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), tls.read_to_end(&mut got))
            .await;
        got
    });
    let info = format!(
        "host=127.0.0.1 port={port} user=u dbname=d password=secret sslmode=require \
         channel_binding=require"
    );
    let Err(e) = bounded("channel binding", slipstream_pg::connect(&info)).await else {
        panic!("connected without channel binding");
    };
    eprintln!("{e}");
    assert_eq!(e.kind(), slipstream_pg::ErrorKind::Authentication, "{e}");
    assert!(e.to_string().contains("channel binding"), "{e}");
    let got = bounded("the fake server", server).await.unwrap();
    assert!(
        !got.contains(&b'p'),
        "the client answered the SASL request: {got:?}"
    );
}
