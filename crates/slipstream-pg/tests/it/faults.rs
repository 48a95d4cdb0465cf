use std::time::{Duration, Instant};

use slipstream_pg::{ErrorKind, SqlState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A fake server: accepts one connection and answers with `script`, then holds it open.
async fn fake_server(script: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let script = script.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(&script).await;
                // Hold the connection open: a client that waits for more must time out.
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    let _ = n;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn garbage_from_the_server_is_an_error_within_the_connect_timeout() {
    let port = fake_server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec()).await;
    for sslmode in ["disable", "prefer"] {
        let start = Instant::now();
        let url = format!("host=127.0.0.1 port={port} user=x connect_timeout=2 sslmode={sslmode}");
        let err = slipstream_pg::connect(&url).await.unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{sslmode}: took {:?}",
            start.elapsed()
        );
        assert_eq!(err.kind(), ErrorKind::Protocol, "{sslmode}: {err}");
        assert!(
            err.to_string().contains("PostgreSQL server"),
            "{sslmode}: {err}"
        );
    }
}

#[tokio::test]
async fn a_huge_message_length_is_refused_without_allocating_it() {
    // A plausible tag with a 2 GiB length.
    let port = fake_server(vec![b'R', 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]).await;
    let url = format!("host=127.0.0.1 port={port} user=x connect_timeout=2 sslmode=disable");
    let err = slipstream_pg::connect(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let port = fake_server(Vec::new()).await;
    let start = Instant::now();
    let url = format!("host=127.0.0.1 port={port} user=x connect_timeout=2 sslmode=disable");
    let err = slipstream_pg::connect(&url).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(err.to_string().contains("connect_timeout"), "{err}");
}

#[tokio::test]
async fn garbage_after_startup_breaks_the_connection_cleanly() {
    // AuthenticationOk, ReadyForQuery(idle), then an unknown message tag once a query arrives.
    let mut script = vec![b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I'];
    script.extend_from_slice(&[b'!', 0, 0, 0, 4]);
    let port = fake_server(script).await;
    let mut c = slipstream_pg::connect(&format!(
        "host=127.0.0.1 port={port} user=x sslmode=disable"
    ))
    .await
    .unwrap();
    let err = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(c.is_broken());
    let err = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert!(err.to_string().contains("open a new connection"), "{err}");
}

#[tokio::test]
async fn a_closed_port_is_a_clear_error() {
    let port = slipstream_testkit::free_port().unwrap();
    let err = slipstream_pg::connect(&format!("postgres://x@127.0.0.1:{port}/db"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{port}")) && text.contains("is the server running"),
        "{text}"
    );
}

#[tokio::test]
async fn a_terminated_backend_mid_query_is_an_error_not_a_hang() {
    let (cluster, mut c) = super::setup().await;
    let mut killer = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let kill = tokio::spawn(async move {
        super::wait_until_active(&mut killer, pid).await;
        killer
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
    });
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        c.simple_query("SELECT pg_sleep(30)"),
    )
    .await;
    kill.await.unwrap();
    let err = result.expect("no hang").unwrap_err();
    assert!(err.is_closed(), "{err}");
    assert_eq!(err.code(), Some(SqlState::ADMIN_SHUTDOWN), "{err}");
    assert!(c.is_broken());
    let err = c.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert!(err.to_string().contains("terminat"), "says why: {err}");
}

/// Calls `check_idle` every millisecond, letting the runtime poll its I/O driver between
/// looks as any running application's does, until it finds the connection closed (10 s).
async fn until_check_idle_fails(c: &mut slipstream_pg::Client) -> slipstream_pg::Error {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Err(e) = c.check_idle() {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "check_idle never saw the server end the session"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The server ends a session while the connection sits idle: `check_idle` finds it, without
/// sending anything, and says why; the next call fails as on any broken connection.
#[tokio::test]
async fn check_idle_finds_a_backend_terminated_while_idle() {
    let (cluster, mut c) = super::setup().await;
    let mut killer = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.check_idle().expect("a live idle connection");
    let pid = c.backend_pid();
    killer
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let err = until_check_idle_fails(&mut c).await;
    assert_eq!(err.code(), Some(SqlState::ADMIN_SHUTDOWN), "{err}");
    assert!(c.is_broken());
    assert!(c.check_idle().is_err(), "it stays broken");
    let err = c.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert!(err.to_string().contains("terminat"), "says why: {err}");
}

/// What arrives on a live idle connection is taken in as any call takes it (a notification
/// is queued), and a connection that still owes a dropped call's reply is left to its next
/// call: `check_idle` never takes bytes a reply needs.
#[tokio::test]
async fn check_idle_keeps_notifications_and_leaves_owed_replies_alone() {
    let (cluster, mut c) = super::setup().await;
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("LISTEN idle_check").await.unwrap();
    other
        .batch_execute("NOTIFY idle_check, 'while idle'")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        c.check_idle().expect("a live idle connection");
        let n = c.take_notifications();
        if !n.is_empty() {
            break n;
        }
        assert!(Instant::now() < deadline, "the notification never came");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert_eq!(got[0].payload(), "while idle");

    // A call dropped part-way: its reply arrives while nobody reads.
    let dropped = tokio::time::timeout(
        Duration::from_millis(20),
        c.query_one("SELECT 7::int4, pg_sleep(0.2)", &[]),
    )
    .await;
    assert!(dropped.is_err(), "the call was still waiting");
    for _ in 0..50 {
        c.check_idle()
            .expect("a connection with a reply owed is left alone");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let row = c.query_one("SELECT 8::int4", &[]).await.unwrap();
    assert_eq!(
        row.get::<_, i32>(0).unwrap(),
        8,
        "in step after the owed reply"
    );
}

#[tokio::test]
async fn a_restarted_server_gives_an_io_error_then_closed() {
    let (mut cluster, mut c) = super::setup().await;
    cluster.restart().unwrap();
    let err = c.batch_execute("SELECT 1").await.unwrap_err();
    assert!(err.is_closed(), "{err}");
    let err = c.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    slipstream_pg::connect(&cluster.url())
        .await
        .unwrap()
        .batch_execute("SELECT 1")
        .await
        .unwrap();
}

#[tokio::test]
async fn server_errors_carry_their_fields() {
    let (_cluster, mut c) = super::setup().await;
    let err = c.simple_query("SELEC 1").await.unwrap_err();
    let db = err.as_db_error().unwrap();
    assert_eq!(db.code(), SqlState::SYNTAX_ERROR);
    assert_eq!(db.severity(), "ERROR");
    assert_eq!(
        db.position(),
        Some(&slipstream_pg::ErrorPosition::Original(1))
    );
    assert!(!err.is_closed());

    c.batch_execute("CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1)")
        .await
        .unwrap();
    let err = c
        .execute("INSERT INTO u VALUES (1)", &[])
        .await
        .unwrap_err();
    let db = err.as_db_error().unwrap();
    assert_eq!(db.code(), SqlState::UNIQUE_VIOLATION);
    assert_eq!(db.constraint(), Some("u_pkey"));
    assert_eq!(db.table(), Some("u"));
    assert!(db.detail().unwrap().contains("(id)=(1)"));
    assert!(err.to_string().contains("duplicate key"), "{err}");
}

#[tokio::test]
async fn a_connection_cut_mid_query_fails_every_call_instead_of_hanging() {
    let (cluster, proxy, mut c) = super::behind_proxy("").await;
    let pid = c.backend_pid();
    let query = tokio::spawn(async move {
        let r = c.simple_query("SELECT pg_sleep(30)").await;
        (r.map(drop), c)
    });
    // Cut once the statement runs on the server.
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    super::wait_until_active(&mut watcher, pid).await;
    proxy.cut_all();
    let (result, mut c) = tokio::time::timeout(Duration::from_secs(10), query)
        .await
        .expect("no hang")
        .unwrap();
    let err = result.unwrap_err();
    assert!(err.is_closed(), "{err}");
    assert!(c.is_broken());
    assert_eq!(
        c.batch_execute("SELECT 1").await.unwrap_err().kind(),
        ErrorKind::Closed
    );
}

#[tokio::test]
async fn a_stalled_network_is_bounded_by_a_timeout_and_the_connection_recovers() {
    let (_cluster, proxy, mut c) = super::behind_proxy("").await;
    proxy.set_stalled(true);
    let r = tokio::time::timeout(
        Duration::from_millis(300),
        c.query_one("SELECT 1::int4", &[]),
    )
    .await;
    assert!(
        r.is_err(),
        "the stalled query is still waiting when the timeout fires"
    );
    proxy.set_stalled(false);
    // The abandoned reply arrives first and is skipped; this call gets its own answer.
    let v: i32 = c
        .query_one("SELECT 2::int4", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(v, 2);
}
