//! Attack tests (session 43, helper 45): the statement cache and row streams, the round-trip
//! savers of docs/statement-cache.md and docs/fetch-size.md, against a real server.

use slipstream_pg::{Client, FetchSize, SqlState, TransactionStatus, Uncached};

/// Statements the server holds for this session (read on the unnamed statement, so reading
/// changes nothing; the `Close`s queued by evictions go out ahead of it).
async fn on_server(c: &mut Client) -> Vec<String> {
    c.query(
        &Uncached("SELECT name FROM pg_prepared_statements ORDER BY name"),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<_, String>(0).unwrap())
    .collect()
}

/// Holds. Promise: with `statement_cache_size=1`, two statements run in turn evict each other
/// every time; each eviction's `Close` reaches the server (never more than one statement left
/// there) and the counters are exact: every run a miss, every run after the first an eviction.
#[tokio::test]
async fn a_cache_of_one_with_two_statements_in_turn_evicts_and_closes_every_time() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&format!("{}?statement_cache_size=1", cluster.url()))
        .await
        .unwrap();
    let sqls = ["SELECT $1::int4 + 1", "SELECT $1::int4 + 2"];
    for i in 0..20i32 {
        let j = (i % 2) as usize;
        let row = c.query_one(sqls[j], &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0).unwrap(), i + 1 + j as i32);
        let held = on_server(&mut c).await;
        assert_eq!(held.len(), 1, "run {i}: the server holds {held:?}");
    }
    let s = c.statement_cache_stats();
    assert_eq!(
        (s.hits, s.misses, s.evictions, s.size, s.capacity),
        (0, 20, 19, 1, 1)
    );
}

/// Holds. Promise: a statement whose `Parse` fails (a syntax error) is not cached and leaves no
/// statement on the server; the connection goes on, and the same text fixed runs and is cached.
#[tokio::test]
async fn a_statement_that_fails_to_parse_is_neither_cached_nor_left_on_the_server() {
    let (_cluster, mut c) = super::setup().await;
    for _ in 0..3 {
        let e = c.query("SELEC $1::int4", &[&1i32]).await.unwrap_err();
        assert_eq!(e.code(), Some(SqlState::SYNTAX_ERROR), "{e}");
        let e = c.query("SELEC 1", &[]).await.unwrap_err();
        assert_eq!(e.code(), Some(SqlState::SYNTAX_ERROR), "{e}");
    }
    assert_eq!(c.statement_cache_stats().size, 0);
    assert!(on_server(&mut c).await.is_empty());
    assert_eq!(
        c.query_one("SELECT $1::int4", &[&1i32])
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap(),
        1
    );
    assert_eq!(on_server(&mut c).await.len(), 1);
}

/// Promise (statement-cache.md, After DDL): outside a transaction the client drops the stale
/// statement, prepares it again and retries once, transparently.
///
/// Steps: cache `SELECT * FROM t WHERE id = $1` for an `i64`; run it once with a value whose
/// type the client cannot name and that the described `int8` refuses (the call fails, but the
/// statement it prepared is cached, bound as `int8` too); `ALTER TABLE t ADD COLUMN`; run it
/// with an `i64` again.
///
/// Before the fix the last call failed with `0A000 cached plan must not change result type`:
/// the retry dropped only the stale statement it had hit and found the other, just as stale.
/// Now every statement cached for the SQL is dropped, and the retry prepares afresh.
#[tokio::test]
async fn a_reprepare_is_transparent_with_two_entries_for_the_same_sql() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int8 PRIMARY KEY); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    // A value whose type the client cannot name, accepted as int4 only.
    #[derive(Debug)]
    struct Small(i32);
    impl postgres_types::ToSql for Small {
        fn to_sql(
            &self,
            _: &postgres_types::Type,
            out: &mut bytes::BytesMut,
        ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
            out.extend_from_slice(&self.0.to_be_bytes());
            Ok(postgres_types::IsNull::No)
        }
        fn accepts(ty: &postgres_types::Type) -> bool {
            ty.name() == "int4_but_not_named"
        }
        postgres_types::to_sql_checked!();
    }
    let q = "SELECT * FROM t WHERE id = $1";
    assert_eq!(c.query(q, &[&1i64]).await.unwrap().len(), 1);
    // Fails (the server says int8, which the value does not accept).
    let e = c.query(q, &[&Small(1)]).await.unwrap_err();
    assert!(e.to_string().contains("int8"), "{e}");
    assert_eq!(c.statement_cache_stats().size, 2);
    c.batch_execute("ALTER TABLE t ADD COLUMN note text DEFAULT 'x'")
        .await
        .unwrap();
    let rows = c.query(q, &[&1i64]).await.unwrap();
    assert_eq!(rows[0].get::<_, &str>("note").unwrap(), "x");
    let s = c.statement_cache_stats();
    assert_eq!((s.reprepares, s.size), (1, 1));
    assert_eq!(
        on_server(&mut c).await.len(),
        1,
        "the stale ones are closed"
    );
    // The same through a row stream.
    c.query(q, &[&Small(1)]).await.unwrap_err();
    c.batch_execute("ALTER TABLE t ADD COLUMN more int DEFAULT 7")
        .await
        .unwrap();
    let mut rows = c.query_stream(q, &[&1i64]).await.unwrap();
    let row = rows.next().await.unwrap().unwrap();
    assert_eq!(row.get::<_, i32>("more").unwrap(), 7);
    drop(rows);
    assert_eq!(c.statement_cache_stats().reprepares, 2);
}

/// Holds. Promise (fetch-size.md, Errors): a server error after some rows is returned by `next()`
/// once the rows before it have been taken: every one of them, in order, in bytes mode with
/// its cap, in autocommit and in a transaction.
#[tokio::test]
async fn an_error_at_row_5000_comes_after_every_row_before_it_in_bytes_mode() {
    let (_cluster, mut c) = super::setup().await;
    for in_transaction in [false, true] {
        if in_transaction {
            c.batch_execute("BEGIN").await.unwrap();
        }
        for fetch in [
            FetchSize::Bytes(1),
            FetchSize::Bytes(4096),
            FetchSize::Rows(333),
        ] {
            let mut rows = c
                .query_stream_with(
                    "SELECT g, repeat('x', (g * 7919) % 3000), 1 / (5000 - g) \
                     FROM generate_series(1, 10000) g",
                    &[],
                    fetch,
                )
                .await
                .unwrap();
            let mut seen = Vec::new();
            let e = loop {
                match rows.next().await {
                    Ok(Some(r)) => {
                        let g: i32 = r.get(0).unwrap();
                        assert_eq!(
                            r.get::<_, &str>(1).unwrap().len(),
                            ((g * 7919) % 3000) as usize
                        );
                        seen.push(g);
                    }
                    Ok(None) => panic!("{fetch}: the division by zero must fail the stream"),
                    Err(e) => break e,
                }
            };
            assert_eq!(seen, (1..5000).collect::<Vec<_>>(), "{fetch}");
            assert_eq!(e.code(), Some(SqlState::DIVISION_BY_ZERO), "{fetch}: {e}");
            assert!(rows.next().await.unwrap().is_none());
            drop(rows);
            if in_transaction {
                assert_eq!(c.transaction_status(), TransactionStatus::Failed);
                c.batch_execute("ROLLBACK; BEGIN").await.unwrap();
            } else {
                assert_eq!(c.transaction_status(), TransactionStatus::Idle);
            }
        }
        if in_transaction {
            c.batch_execute("ROLLBACK").await.unwrap();
        }
    }
}

/// Holds. Promise (fetch-size.md): every row delivered exactly once, whatever the fetch size,
/// rows of wildly varying widths, compared with a plain `query`; a stream dropped halfway
/// delivers none of its rows to the next stream.
#[tokio::test]
async fn rows_of_wildly_varying_widths_arrive_once_and_a_dropped_stream_leaves_none_behind() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TABLE w AS SELECT g AS id, repeat(chr(65 + g % 26), \
         CASE WHEN g % 97 = 0 THEN 300000 WHEN g % 5 = 0 THEN 2000 ELSE g % 13 END) AS data \
         FROM generate_series(1, 3000) g",
    )
    .await
    .unwrap();
    let q = "SELECT id, data FROM w ORDER BY id";
    let plain: Vec<(i32, String)> = c
        .query(q, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
        .collect();
    assert_eq!(plain.len(), 3000);
    for fetch in [
        FetchSize::Bytes(1),
        FetchSize::Bytes(1000),
        FetchSize::Bytes(64 * 1024),
        FetchSize::Rows(1),
        FetchSize::Rows(97),
    ] {
        // Half, dropped.
        let mut rows = c.query_stream_with(q, &[], fetch).await.unwrap();
        for _ in 0..1500 {
            rows.next().await.unwrap().unwrap();
        }
        drop(rows);
        let mut rows = c.query_stream_with(q, &[], fetch).await.unwrap();
        let mut streamed = Vec::new();
        while let Some(r) = rows.next().await.unwrap() {
            streamed.push((r.get::<_, i32>(0).unwrap(), r.get::<_, String>(1).unwrap()));
        }
        let peak = rows.peak_buffered_bytes();
        drop(rows);
        assert!(streamed == plain, "{fetch}: the streamed rows differ");
        if let FetchSize::Bytes(b) = fetch {
            assert!(
                peak <= b + 300_000 + 200,
                "{fetch}: held {peak} bytes of rows"
            );
        }
    }
}

/// Streams `stmt` (SQL or a prepared statement) at 64 KiB per fetch and returns the rows, the
/// round trips and the row count of the last `Execute`.
async fn stream_64k<T: slipstream_pg::ToStatement + ?Sized>(
    c: &mut Client,
    stmt: &T,
) -> (usize, u64, u32) {
    let mut rows = c
        .query_stream_with(stmt, &[], FetchSize::Bytes(64 * 1024))
        .await
        .unwrap();
    let mut n = 0;
    while rows.next().await.unwrap().is_some() {
        n += 1;
    }
    (n, rows.round_trips(), rows.rows_per_fetch())
}

/// Promise (fetch-size.md, How it works): in bytes mode the first fetch, before any row has
/// arrived, is the budget over "an estimate from the column types" (`int4` counts 4 bytes),
/// and a stream over a cached statement knows its types before it starts.
///
/// Steps: stream 300 `int4` rows at 64 KiB through an explicitly prepared statement (sized
/// from its types: one `Execute` takes them all), then the same SQL text twice (a first run,
/// not described yet, then a cache hit).
///
/// Before the fix the cache hit was sized like the first run, from the fixed guess for an
/// undescribed statement (a fifth of the rows its `int4` column gives): its first `Execute` was
/// written before the cache was consulted, so two round trips where one does.
#[tokio::test]
async fn a_cached_statements_first_fetch_is_sized_from_its_column_types() {
    let (_cluster, mut c) = super::setup().await;
    let sql = "SELECT g FROM generate_series(1, 300) g";
    let stmt = c.prepare(sql).await.unwrap();
    let (n, prepared_trips, prepared_rows) = stream_64k(&mut c, &stmt).await;
    assert_eq!(
        (n, prepared_trips),
        (300, 1),
        "{prepared_rows} rows per fetch"
    );
    // A first run's columns are not described when its first Execute is written.
    let (n, first_trips, _) = stream_64k(&mut c, sql).await;
    assert_eq!(
        (n, first_trips),
        (300, 2),
        "a first run is sized from a guess"
    );
    let (n, cached_trips, cached_rows) = stream_64k(&mut c, sql).await;
    assert_eq!(c.statement_cache_stats().hits, 1);
    assert_eq!(n, 300);
    assert_eq!(
        (cached_rows, cached_trips),
        (prepared_rows, prepared_trips),
        "a cached statement's first fetch must be sized from its column types, as a prepared one's"
    );
}
