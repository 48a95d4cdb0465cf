//! Attacks on the server parameters the client tracks from `ParameterStatus`
//! (`Client::parameter`): every way a reported setting changes mid-session, checked against
//! what the server says it is.

use slipstream_pg::Client;

/// The setting as the server has it now (`current_setting`, which `ParameterStatus` reports).
async fn server(c: &mut Client, name: &str) -> String {
    c.query_one("SELECT current_setting($1)", &[&name])
        .await
        .unwrap()
        .get(0)
        .unwrap()
}

/// `parameter(name)` must be the server's value once a call has returned.
async fn agrees(c: &mut Client, name: &str, step: &str) {
    let want = server(c, name).await;
    assert_eq!(
        c.parameter(name),
        Some(&*want),
        "{name} after {step}: the client kept another value"
    );
}

/// Promise (docs/client.md, "Notifications, notices, parameters"; `Client::parameter`):
/// a reported parameter is "kept current from ParameterStatus". Steps: change `TimeZone`,
/// `DateStyle`, `IntervalStyle` and `application_name` by `SET` (simple and extended
/// protocol), by `set_config()` in a `SELECT`, by `SET LOCAL` and `SET` in transactions that
/// commit and roll back, in a savepoint rolled back, in a failing simple-query string (its
/// implicit transaction rolls the `SET` back), in a pipeline, in a call dropped part-way
/// (reflected once settled), by `RESET ALL` and `DISCARD ALL`; after each, compare
/// `parameter()` with `current_setting()`. Holds.
#[tokio::test]
async fn every_way_a_reported_setting_changes_is_reflected() {
    let (_cluster, mut c) = super::setup().await;
    let c = &mut c;
    for name in ["TimeZone", "DateStyle", "IntervalStyle", "application_name"] {
        agrees(c, name, "connecting").await;
    }
    c.batch_execute("SET TimeZone = 'Asia/Kolkata'")
        .await
        .unwrap();
    agrees(c, "TimeZone", "SET (simple)").await;
    c.execute("SET DateStyle = 'SQL, DMY'", &[]).await.unwrap();
    agrees(c, "DateStyle", "SET (extended)").await;
    c.query_one("SELECT set_config('IntervalStyle', 'iso_8601', false)", &[])
        .await
        .unwrap();
    agrees(c, "IntervalStyle", "set_config in a SELECT").await;

    let mut tx = c.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL TimeZone = 'Pacific/Chatham'")
        .await
        .unwrap();
    assert_eq!(tx.parameter("TimeZone"), Some("Pacific/Chatham"));
    tx.commit().await.unwrap();
    agrees(c, "TimeZone", "SET LOCAL, committed").await;

    let mut tx = c.transaction().await.unwrap();
    tx.batch_execute("SET application_name = 'in tx'")
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    agrees(c, "application_name", "SET, rolled back").await;

    let mut tx = c.transaction().await.unwrap();
    let mut sp = tx.savepoint("s").await.unwrap();
    sp.batch_execute("SET TimeZone = 'America/St_Johns'")
        .await
        .unwrap();
    sp.rollback().await.unwrap();
    agrees(&mut tx, "TimeZone", "SET in a savepoint rolled back").await;
    tx.commit().await.unwrap();

    let e = c
        .batch_execute("SET DateStyle = 'German'; SELECT 1/0")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("division by zero"), "{e}");
    agrees(c, "DateStyle", "a failing string").await;

    let mut p = c.pipeline();
    p.execute("SET TimeZone = 'Europe/Lisbon'", &[])
        .await
        .unwrap();
    p.execute("SELECT 1/0", &[]).await.unwrap();
    drop(p.end().await);
    agrees(c, "TimeZone", "a pipeline block that failed").await;
    let mut p = c.pipeline();
    p.execute("SET TimeZone = 'Europe/Lisbon'", &[])
        .await
        .unwrap();
    drop(p.end().await);
    agrees(c, "TimeZone", "a pipeline").await;

    // Dropped after its first poll: the SET runs; the next call reads its reply.
    let mut call = Box::pin(c.batch_execute("SET application_name = 'dropped'"));
    let _ = futures_util::poll!(call.as_mut());
    drop(call);
    c.settle().await.unwrap();
    agrees(c, "application_name", "a dropped call, settled").await;

    c.batch_execute("RESET ALL").await.unwrap();
    for name in ["TimeZone", "DateStyle", "IntervalStyle", "application_name"] {
        agrees(c, name, "RESET ALL").await;
    }
    c.batch_execute("SET TimeZone = 'UTC'; SET application_name = 'x'")
        .await
        .unwrap();
    c.batch_execute("DISCARD ALL").await.unwrap();
    for name in ["TimeZone", "application_name"] {
        agrees(c, name, "DISCARD ALL").await;
    }
}

/// The same promise for changes made row by row inside a row stream (`set_config` in the
/// select list): PostgreSQL reports them when the stream's `Sync` is answered, after its
/// rows; read whole, or dropped part-way (the next call reads the rest), `parameter()` ends
/// as the server's value. Holds.
#[tokio::test]
async fn settings_changed_inside_a_row_stream_are_reflected_after_it() {
    use futures_util::StreamExt;
    let (_cluster, mut c) = super::setup().await;
    const SQL: &str = "SELECT set_config('application_name', 'row ' || g, false) \
                       FROM generate_series(1, 500) g";
    let rows = c
        .query_stream_with(SQL, &[], slipstream_pg::FetchSize::Rows(7))
        .await
        .unwrap();
    assert_eq!(rows.count().await, 500);
    agrees(&mut c, "application_name", "a row stream read whole").await;
    assert_eq!(c.parameter("application_name"), Some("row 500"));

    let rows = c
        .query_stream_with(SQL, &[], slipstream_pg::FetchSize::Rows(7))
        .await
        .unwrap();
    let first: Vec<_> = rows.take(10).collect().await;
    assert_eq!(first.len(), 10);
    agrees(&mut c, "application_name", "a row stream dropped part-way").await;
}
