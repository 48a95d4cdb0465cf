use slipstream_pg::ErrorKind;
use slipstream_testkit::Cluster;

const HBA: &str = "local all all trust
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
