use std::time::{Duration, Instant};

use slipstream_pg::SqlState;

#[tokio::test]
async fn a_long_query_is_cancelled_within_two_seconds() {
    let (_cluster, mut c) = super::setup().await;
    let token = c.cancel_token();
    let mut watcher = slipstream_pg::connect(&_cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let start = Instant::now();
    let canceller = tokio::spawn(async move {
        super::wait_until_active(&mut watcher, pid).await;
        token.cancel().await.unwrap();
    });
    let err = c.simple_query("SELECT pg_sleep(30)").await.unwrap_err();
    let elapsed = start.elapsed();
    canceller.await.unwrap();
    assert_eq!(err.code(), Some(SqlState::QUERY_CANCELED), "{err}");
    assert!(
        elapsed < Duration::from_secs(2),
        "cancelled after {elapsed:?}"
    );
    assert!(!c.is_broken());
    c.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn a_dropped_query_future_does_not_desynchronise_the_connection() {
    let (_cluster, mut c) = super::setup().await;
    let r = tokio::time::timeout(
        Duration::from_millis(50),
        c.query("SELECT pg_sleep(0.3), 1::int4", &[]),
    )
    .await;
    assert!(r.is_err(), "the timeout fired first");
    // The reply to the abandoned query arrives first and must be skipped.
    let v: i32 = super::scalar(&mut c, "SELECT 2::int4").await;
    assert_eq!(v, 2);
    // Many abandoned requests in a row.
    for _ in 0..5 {
        let _ = tokio::time::timeout(Duration::ZERO, c.query("SELECT 3::int4", &[])).await;
    }
    let v: i32 = super::scalar(&mut c, "SELECT 4::int4").await;
    assert_eq!(v, 4);
}

#[tokio::test]
async fn an_abort_handle_ends_a_running_statement_and_names_the_reason() {
    let (cluster, mut c) = super::setup().await;
    let handle = c.abort_handle().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let aborter = tokio::spawn(async move {
        super::wait_until_active(&mut watcher, pid).await;
        handle.abort("borrowed for longer than 5 s").await;
        assert!(handle.is_aborted());
        watcher
    });
    let err = c.simple_query("SELECT pg_sleep(30)").await.unwrap_err();
    assert_eq!(err.kind(), slipstream_pg::ErrorKind::Closed, "{err}");
    assert!(
        err.to_string().contains("borrowed for longer than 5 s"),
        "{err}"
    );
    // Every later call fails the same way, at once.
    let again = c.batch_execute("SELECT 1").await.unwrap_err();
    assert!(again.to_string().contains("closed by its pool"), "{again}");
    // The backend stopped its statement and went away (the cancel, not the socket, ends it).
    let watcher = aborter.await.unwrap();
    drop(watcher);
    assert!(
        cluster
            .backend_gone_within(pid, Duration::from_secs(10))
            .unwrap(),
        "backend {pid} still there"
    );
}
