//! A server listening in Linux's abstract socket namespace (`unix_socket_directories =
//! '@name'`), reached as libpq 14+ reaches it: `host=@name`. Until this was supported every
//! form of `@name` was refused when read (the string forms) or looked up in DNS (the builder).

use std::time::Duration;

use slipstream_pg::{Config, Host, SqlState};
use slipstream_testkit::Cluster;

/// A cluster that also listens on the abstract socket `@<name>`, and that name.
fn cluster_with_abstract_socket() -> (Cluster, String) {
    let mut cluster = Cluster::start().unwrap();
    // Abstract names are global to the network namespace: the port keeps them apart between
    // concurrent tests, the pid between test processes.
    let name = format!("slipstream-it-{}-{}", std::process::id(), cluster.port());
    cluster
        .psql(&format!(
            "ALTER SYSTEM SET unix_socket_directories = '{}', '@{name}'",
            cluster.socket_dir().display()
        ))
        .unwrap();
    cluster.restart().unwrap();
    (cluster, name)
}

/// Each way of naming the socket reaches the server over it, and nothing else: the
/// configuration names no directory and no TCP host.
#[tokio::test]
async fn every_form_of_an_abstract_host_connects_over_it() {
    let (cluster, name) = cluster_with_abstract_socket();
    let port = cluster.port();
    let forms = [
        format!("host=@{name} port={port} user=postgres dbname=postgres"),
        format!("postgresql://%40{name}:{port}/postgres?user=postgres"),
        format!("postgresql:///postgres?host=@{name}&port={port}&user=postgres"),
    ];
    for form in &forms {
        let config: Config = form.parse().unwrap();
        assert_eq!(
            config.get_hosts(),
            &[Host::Unix(format!("@{name}").into())],
            "{form}"
        );
        let mut c = slipstream_pg::connect_config(&config)
            .await
            .unwrap_or_else(|e| panic!("{form}: {e}"));
        // NULL over a Unix-domain socket; an address over TCP.
        let over_tcp: bool = c
            .query_one("SELECT inet_server_addr() IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert!(!over_tcp, "{form}");
    }
    let built = Config::new()
        .host(&format!("@{name}"))
        .port(port)
        .user("postgres")
        .dbname("postgres");
    let mut c = slipstream_pg::connect_config(&built).await.unwrap();
    c.batch_execute("SELECT 1").await.unwrap();
}

/// A cancel request goes where the connection went: to the abstract socket.
#[tokio::test]
async fn a_query_over_an_abstract_socket_can_be_cancelled() {
    let (cluster, name) = cluster_with_abstract_socket();
    let url = format!(
        "host=@{name} port={} user=postgres dbname=postgres",
        cluster.port()
    );
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    let token = c.cancel_token();
    let mut watcher = slipstream_pg::connect(&url).await.unwrap();
    let pid = c.backend_pid();
    let canceller = tokio::spawn(async move {
        super::wait_until_active(&mut watcher, pid).await;
        token.cancel().await.unwrap();
    });
    // Bounded only against a hang: a cancel that never arrives leaves 60 s of sleep.
    let err = tokio::time::timeout(
        Duration::from_secs(50),
        c.simple_query("SELECT pg_sleep(60)"),
    )
    .await
    .expect("the cancel request over the abstract socket never ended the query")
    .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.code(), Some(SqlState::QUERY_CANCELED), "{err}");
    c.batch_execute("SELECT 1").await.unwrap();
}

/// A name nobody listens on fails as a missing socket directory does, naming the socket as
/// libpq does (`@name/.s.PGSQL.<port>`), not a host name DNS could not find.
#[tokio::test]
async fn an_abstract_socket_nobody_listens_on_is_named_in_the_error() {
    let (cluster, name) = cluster_with_abstract_socket();
    let missing = format!("@{name}-missing");
    let e = slipstream_pg::connect(&format!(
        "host={missing} port={} user=postgres connect_timeout=10",
        cluster.port()
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&format!("socket {missing}/.s.PGSQL.{}", cluster.port()))
            && e.contains("refused"),
        "{e}"
    );
}
