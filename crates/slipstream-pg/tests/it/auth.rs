use slipstream_pg::ErrorKind;
use slipstream_testkit::Cluster;

const HBA: &str = "local all u_scram scram-sha-256
local all all trust
host all u_trust 127.0.0.1/32 trust
host all u_password 127.0.0.1/32 password
host all u_md5 127.0.0.1/32 md5
host all u_scram 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
";

fn cluster() -> Cluster {
    let cluster = Cluster::builder().hba(HBA).start().unwrap();
    cluster
        .psql(
            "SET password_encryption = 'md5';
             CREATE ROLE u_md5 LOGIN PASSWORD 'pw-md5';
             SET password_encryption = 'scram-sha-256';
             CREATE ROLE u_scram LOGIN PASSWORD 'pw-scram';
             CREATE ROLE u_password LOGIN PASSWORD 'pw-password';
             CREATE ROLE u_trust LOGIN;",
        )
        .unwrap();
    cluster
}

#[tokio::test]
async fn each_password_method_accepts_the_right_password_and_rejects_a_wrong_one() {
    let cluster = cluster();
    for (user, password) in [
        ("u_password", "pw-password"),
        ("u_md5", "pw-md5"),
        ("u_scram", "pw-scram"),
    ] {
        let mut client = slipstream_pg::connect(&cluster.url_for(user, Some(password)))
            .await
            .unwrap_or_else(|e| panic!("{user} with the right password: {e}"));
        let row = client
            .query_one("SELECT current_user::text", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, &str>(0).unwrap(), user);

        let err = slipstream_pg::connect(&cluster.url_for(user, Some("wrong")))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Authentication, "{user}: {err}");
        let message = err.to_string();
        assert!(
            message.contains("password authentication failed"),
            "{user}: {message}"
        );
        assert!(
            message.contains(&cluster.port().to_string()),
            "names the server: {message}"
        );

        let err = slipstream_pg::connect(&cluster.url_for(user, None))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Authentication);
        assert!(err.to_string().contains("none was given"), "{err}");
    }
}

#[tokio::test]
async fn trust_needs_no_password() {
    let cluster = cluster();
    let mut client = slipstream_pg::connect(&cluster.url_for("u_trust", None))
        .await
        .unwrap();
    client.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn unknown_role_is_a_clear_error() {
    let cluster = cluster();
    let err = slipstream_pg::connect(&cluster.url_for("nobody", None))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("role \"nobody\" does not exist"),
        "{err}"
    );
}

#[tokio::test]
async fn unix_socket_connections_work() {
    let cluster = cluster();
    let mut client = slipstream_pg::connect(&cluster.socket_conninfo())
        .await
        .unwrap();
    let row = client
        .query_one("SELECT inet_client_addr() IS NULL", &[])
        .await
        .unwrap();
    assert!(
        row.get::<_, bool>(0).unwrap(),
        "a Unix-socket session has no client address"
    );
}

// require_auth (libpq 16)

/// Connects as `user` with `password` and `require_auth=methods`.
async fn with_require_auth(
    cluster: &Cluster,
    user: &str,
    password: Option<&str>,
    methods: &str,
) -> Result<slipstream_pg::Client, slipstream_pg::Error> {
    slipstream_pg::connect(&format!(
        "{}?sslmode=disable&require_auth={methods}",
        cluster.url_for(user, password)
    ))
    .await
}

#[tokio::test]
async fn require_auth_refuses_the_methods_it_does_not_list() {
    let cluster = cluster();
    for (user, password, methods, ok) in [
        ("u_scram", Some("pw-scram"), "scram-sha-256", true),
        ("u_password", Some("pw-password"), "scram-sha-256", false),
        ("u_md5", Some("pw-md5"), "scram-sha-256", false),
        ("u_md5", Some("pw-md5"), "md5,scram-sha-256", true),
        ("u_password", Some("pw-password"), "!password", false),
        ("u_md5", Some("pw-md5"), "!password", true),
        ("u_scram", Some("pw-scram"), "!password,!md5", true),
        // trust: no exchange at all, refused unless `none` is allowed.
        ("u_trust", None, "scram-sha-256", false),
        ("u_trust", None, "scram-sha-256,none", true),
        ("u_trust", None, "!password", true),
        ("u_trust", None, "!none", false),
        ("u_scram", Some("pw-scram"), "none", false),
    ] {
        let result = with_require_auth(&cluster, user, password, methods).await;
        match (result, ok) {
            (Ok(_), true) => {}
            (Err(e), false) => {
                assert_eq!(e.kind(), ErrorKind::Authentication, "{user} {methods}: {e}");
                assert!(
                    e.to_string()
                        .contains(&format!("authentication method requirement \"{methods}\"")),
                    "{user} {methods}: {e}"
                );
            }
            (Ok(_), false) => panic!("{user} with require_auth={methods} connected"),
            (Err(e), true) => panic!("{user} with require_auth={methods}: {e}"),
        }
    }
    let e = with_require_auth(&cluster, "u_password", Some("pw-password"), "scram-sha-256")
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("server requested a cleartext password"),
        "{e}"
    );
}

/// A fake server: reads the startup message, sends `reply`, then returns everything the client
/// sends until it closes the connection.
async fn fake_server(reply: Vec<u8>) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let len = s.read_u32().await.unwrap() as usize;
        let mut startup = vec![0u8; len - 4];
        s.read_exact(&mut startup).await.unwrap();
        s.write_all(&reply).await.unwrap();
        let mut after = Vec::new();
        let _ = s.read_to_end(&mut after).await;
        after
    });
    (port, server)
}

/// An `Authentication` message with request code `code` and `body`.
fn auth_request(code: u32, body: &[u8]) -> Vec<u8> {
    let mut m = vec![b'R'];
    m.extend_from_slice(&(8 + body.len() as u32).to_be_bytes());
    m.extend_from_slice(&code.to_be_bytes());
    m.extend_from_slice(body);
    m
}

#[tokio::test]
async fn require_auth_never_sends_the_password_to_a_server_asking_for_cleartext() {
    // AuthenticationCleartextPassword.
    let (port, server) = fake_server(auth_request(3, b"")).await;
    let e = slipstream_pg::connect(&format!(
        "host=127.0.0.1 port={port} user=u password=hunter2-secret sslmode=disable \
         require_auth=scram-sha-256"
    ))
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(
        e.to_string()
            .contains("server requested a cleartext password"),
        "{e}"
    );
    let sent = server.await.unwrap();
    assert!(
        !sent.windows(7).any(|w| w == b"hunter2"),
        "the password went out: {sent:?}"
    );
    assert!(
        !sent.contains(&b'p'),
        "a PasswordMessage was sent: {sent:?}"
    );
}

#[tokio::test]
async fn a_server_skipping_authentication_or_offering_plus_without_tls_is_refused() {
    let connect = |port: u16, extra: &str| {
        let s = format!("host=127.0.0.1 port={port} user=u password=pw sslmode=disable {extra}");
        async move { slipstream_pg::connect(&s).await.unwrap_err() }
    };
    // AuthenticationOk at once: an impostor that skips the exchange it was required to run.
    for (extra, says) in [
        (
            "require_auth=scram-sha-256",
            "server did not complete authentication",
        ),
        ("channel_binding=require", "without channel binding"),
    ] {
        let (port, _server) = fake_server(auth_request(0, b"")).await;
        let e = connect(port, extra).await;
        assert_eq!(e.kind(), ErrorKind::Authentication, "{extra}: {e}");
        assert!(e.to_string().contains(says), "{extra}: {e}");
    }
    // SASL offering SCRAM-SHA-256-PLUS over plaintext: no real server does that.
    let (port, server) =
        fake_server(auth_request(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0")).await;
    let e = connect(port, "").await;
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("over a non-SSL connection"), "{e}");
    assert!(
        !server.await.unwrap().contains(&b'p'),
        "no SASL response was sent"
    );
}

// The password file (libpq's .pgpass)

fn passfile(dir: &tempfile::TempDir, contents: &str, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.path().join("pgpass");
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[tokio::test]
async fn the_password_file_supplies_a_missing_password() {
    let cluster = cluster();
    let port = cluster.port();
    let dir = tempfile::tempdir().unwrap();
    let file = passfile(
        &dir,
        &format!(
            "# comment\n\
             127.0.0.1:{port}:postgres:u_scram:pw-scram\n\
             *:*:*:u_md5:pw-md5\n\
             127.0.0.1:{port}:otherdb:u_password:wrong\n\
             127.0.0.1:{port}:postgres:u_password:pw\\:password-not-this\n\
             {}:{port}:postgres:u_scram:pw-scram\n",
            cluster.socket_dir().display()
        ),
        0o600,
    );
    let tcp = |user: &str| {
        format!(
            "host=127.0.0.1 port={port} user={user} dbname=postgres sslmode=disable passfile={}",
            file.display()
        )
    };
    for user in ["u_scram", "u_md5"] {
        let mut c = slipstream_pg::connect(&tcp(user))
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert_eq!(
            super::scalar::<String>(&mut c, "SELECT current_user::text").await,
            user
        );
    }
    // The Unix-socket directory is matched by its path (hba: scram for u_scram on local).
    slipstream_pg::connect(&format!(
        "host={} port={port} user=u_scram dbname=postgres passfile={}",
        cluster.socket_dir().display(),
        file.display()
    ))
    .await
    .expect("socket directory line");
    // A password in the string wins over the file.
    let e = slipstream_pg::connect(&format!("{} password=wrong", tcp("u_scram")))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("password authentication failed"),
        "{e}"
    );
    // A wrong password from the file says where it came from (libpq's pgpassfileWarning).
    let e = slipstream_pg::connect(&tcp("u_password"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(
        e.to_string().contains("password retrieved from file"),
        "{e}"
    );
}

#[tokio::test]
async fn a_password_file_others_can_read_is_ignored_with_a_warning() {
    let cluster = cluster();
    let port = cluster.port();
    let dir = tempfile::tempdir().unwrap();
    let file = passfile(&dir, "*:*:*:*:pw-scram\n", 0o644);
    let conninfo = format!(
        "host=127.0.0.1 port={port} user=u_scram dbname=postgres sslmode=disable passfile={}",
        file.display()
    );
    let warnings = Warnings::default();
    let e = {
        let _guard = tracing::subscriber::set_default(warnings.clone());
        // A server that asks for no password never makes the client read the file.
        slipstream_pg::connect(&conninfo.replace("user=u_scram", "user=u_trust"))
            .await
            .unwrap();
        assert!(warnings.0.lock().unwrap().is_empty());
        slipstream_pg::connect(&conninfo).await.unwrap_err()
    };
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(e.to_string().contains("group or world access"), "{e}");
    let logged = warnings.0.lock().unwrap().clone();
    assert!(
        logged.iter().any(|w| w.contains("group or world access")
            && w.contains(&file.display().to_string())),
        "{logged:?}"
    );
    // Fixing the permissions makes it count.
    passfile(&dir, "*:*:*:*:pw-scram\n", 0o600);
    slipstream_pg::connect(&conninfo).await.unwrap();
}

/// Collects the messages of WARN events (a minimal `tracing` subscriber).
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, _: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{value:?}"));
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut text = String::new();
            event.record(&mut Message(&mut text));
            self.0.lock().unwrap().push(text);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
