//! Row streams: fetch size in rows and bytes, autocommit and transactions, dropping part-way,
//! errors part-way.

use slipstream_pg::{Client, FetchSize, SqlState, TransactionStatus};

const N: i32 = 10_000;

/// Streams `SELECT g FROM generate_series(1, N)` and returns the values and round trips.
async fn stream_all(c: &mut Client, fetch: FetchSize) -> (Vec<i32>, u64) {
    let mut rows = c
        .query_stream_with("SELECT g FROM generate_series(1, $1) g", &[&N], fetch)
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Some(row) = rows.next().await.unwrap() {
        seen.push(row.get::<_, i32>(0).unwrap());
    }
    (seen, rows.round_trips())
}

#[tokio::test]
async fn every_row_arrives_exactly_once_in_rows_and_bytes_mode_in_autocommit_and_transactions() {
    let (_cluster, mut c) = super::setup().await;
    let expected: Vec<i32> = (1..=N).collect();
    for in_transaction in [false, true] {
        if in_transaction {
            c.batch_execute("BEGIN").await.unwrap();
        }
        for fetch in [
            FetchSize::Rows(1),
            FetchSize::Rows(7),
            FetchSize::Rows(1000),
            FetchSize::Rows(N as u32),
            FetchSize::Rows(0),
            FetchSize::Bytes(4096),
            FetchSize::Bytes(64 * 1024),
        ] {
            let (seen, trips) = stream_all(&mut c, fetch).await;
            assert_eq!(seen, expected, "{fetch} (in transaction: {in_transaction})");
            let want = match fetch {
                // One Execute per full batch, and one that finds the rest (or nothing).
                FetchSize::Rows(0) => 1,
                FetchSize::Rows(n) => N as u64 / n as u64 + 1,
                FetchSize::Bytes(_) => trips,
            };
            assert_eq!(trips, want, "{fetch}");
            let status = c.transaction_status();
            let expected_status = match in_transaction {
                true => TransactionStatus::InTransaction,
                false => TransactionStatus::Idle,
            };
            assert_eq!(status, expected_status, "{fetch}");
        }
        if in_transaction {
            c.batch_execute("COMMIT").await.unwrap();
        }
    }
}

#[tokio::test]
async fn bytes_mode_sizes_fetches_from_the_largest_row_seen() {
    let (_cluster, mut c) = super::setup().await;
    // Rows of about 1 KiB: 64 KiB per fetch is some 60 rows, whatever the first guess was.
    let mut rows = c
        .query_stream_with(
            "SELECT g, repeat('x', 1000) FROM generate_series(1, 2000) g",
            &[],
            FetchSize::Bytes(64 * 1024),
        )
        .await
        .unwrap();
    let mut n = 0;
    while let Some(_row) = rows.next().await.unwrap() {
        n += 1;
    }
    assert_eq!(n, 2000);
    let per_fetch = rows.rows_per_fetch();
    assert!((40..=64).contains(&per_fetch), "{per_fetch} rows per fetch");
    assert!(
        rows.peak_buffered_bytes() <= 64 * 1024 + 1100,
        "{}",
        rows.peak_buffered_bytes()
    );
}

#[tokio::test]
async fn a_stream_dropped_halfway_leaves_the_connection_usable() {
    let (_cluster, mut c) = super::setup().await;
    // In autocommit: the open portal's implicit transaction ends with the next request.
    let mut rows = c
        .query_stream_with(
            "SELECT g FROM generate_series(1, 100000) g",
            &[],
            FetchSize::Rows(100),
        )
        .await
        .unwrap();
    for want in 1..=150 {
        assert_eq!(
            rows.next()
                .await
                .unwrap()
                .unwrap()
                .get::<_, i32>(0)
                .unwrap(),
            want
        );
    }
    drop(rows);
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 42").await, 42);
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);

    // Inside a transaction: the transaction goes on and commits.
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let mut rows = tx
        .query_stream_with(
            "SELECT g FROM generate_series(1, 1000) g",
            &[],
            FetchSize::Rows(10),
        )
        .await
        .unwrap();
    rows.next().await.unwrap().unwrap();
    drop(rows);
    tx.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        super::scalar::<i64>(&mut c, "SELECT count(*) FROM t").await,
        2
    );

    // A stream dropped before its first row was read.
    let rows = c
        .query_stream_with(
            "SELECT g FROM generate_series(1, 1000) g",
            &[],
            FetchSize::Rows(10),
        )
        .await
        .unwrap();
    drop(rows);
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 7").await, 7);
}

#[tokio::test]
async fn an_error_part_way_comes_after_the_rows_before_it() {
    let (_cluster, mut c) = super::setup().await;
    let mut rows = c
        .query_stream_with(
            "SELECT 1 / (500 - g) FROM generate_series(1, 1000) g",
            &[],
            FetchSize::Rows(100),
        )
        .await
        .unwrap();
    let mut n = 0;
    let e = loop {
        match rows.next().await {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("the division by zero must fail the stream"),
            Err(e) => break e,
        }
    };
    assert_eq!(n, 499);
    assert_eq!(e.code(), Some(SqlState::DIVISION_BY_ZERO), "{e}");
    assert!(
        rows.next().await.unwrap().is_none(),
        "the error is reported once"
    );
    drop(rows);
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1").await, 1);

    // An error before any row is the call's error.
    let e = c
        .query_stream("SELECT * FROM missing", &[])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1").await, 1);
}

#[tokio::test]
async fn a_cancelled_next_leaves_the_connection_in_step() {
    let (_cluster, mut c) = super::setup().await;
    let mut rows = c
        .query_stream_with(
            "SELECT pg_sleep(0.05), g FROM generate_series(1, 100) g",
            &[],
            FetchSize::Rows(1),
        )
        .await
        .unwrap();
    // Time out a next() while the server sleeps, then give up on the stream.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(1), rows.next()).await;
    drop(rows);
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 5").await, 5);
}

#[tokio::test]
async fn fetch_size_comes_from_the_connection_string() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&format!("{}?fetch_size=250", cluster.url()))
        .await
        .unwrap();
    let mut rows = c
        .query_stream("SELECT g FROM generate_series(1, 1000) g", &[])
        .await
        .unwrap();
    while rows.next().await.unwrap().is_some() {}
    assert_eq!(rows.rows_per_fetch(), 250);
    assert_eq!(rows.round_trips(), 5);
    let e = slipstream_pg::connect(&format!("{}?fetch_size=lots", cluster.url()))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("fetch_size"), "{e}");
}
