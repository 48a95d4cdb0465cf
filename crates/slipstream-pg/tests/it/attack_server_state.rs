//! Attacks that held (helper 32, session 42): server-side state the client's statement cache
//! relies on, a statement_timeout firing inside a row stream, and calls of every kind cut by
//! real timers of many lengths, each followed by a call whose answer must be its own.

use std::time::Duration;

use slipstream_pg::{Client, FetchSize, SqlState, TransactionStatus};

use super::engine::bounded;

/// Holds. Promise (docs/statement-cache.md): the same SQL text always runs against what it
/// means now. Steps: `SELECT * FROM t` cached under `search_path = a`, then run under `b`
/// (same columns, other rows), under `d` (other column types), and back, outside and inside a
/// transaction. PostgreSQL re-parses a prepared statement when `search_path` changed (9.3+):
/// same result type, new table; another result type is 0A000, which the client re-prepares
/// transparently outside a transaction and reports clearly inside one.
#[tokio::test]
async fn a_cached_statement_follows_search_path() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE SCHEMA a; CREATE SCHEMA b; CREATE SCHEMA d;
         CREATE TABLE a.t (x int); INSERT INTO a.t VALUES (1);
         CREATE TABLE b.t (x int); INSERT INTO b.t VALUES (2);
         CREATE TABLE d.t (x text); INSERT INTO d.t VALUES ('three');",
    )
    .await
    .unwrap();
    async fn read(c: &mut Client) -> Result<String, slipstream_pg::Error> {
        let row = c.query_one("SELECT * FROM t", &[]).await?;
        Ok(match row.get::<_, i32>(0) {
            Ok(v) => v.to_string(),
            Err(_) => row.get::<_, String>(0)?,
        })
    }
    for (path, want) in [
        ("a", "1"),
        ("b", "2"),
        ("a", "1"),
        ("d", "three"),
        ("a", "1"),
    ] {
        c.batch_execute(&format!("SET search_path = {path}"))
            .await
            .unwrap();
        assert_eq!(read(&mut c).await.unwrap(), want, "search_path {path}");
    }
    assert!(c.statement_cache_stats().reprepares >= 2);
    // Inside a transaction the change of result type cannot be retried: a clear error, then
    // the rerun works.
    let mut tx = c.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL search_path = d").await.unwrap();
    let e = read(&mut tx).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    assert!(e.to_string().contains("roll back"), "{e}");
    tx.rollback().await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL search_path = d").await.unwrap();
    assert_eq!(read(&mut tx).await.unwrap(), "three");
    tx.commit().await.unwrap();
    assert_eq!(
        read(&mut c).await.unwrap(),
        "1",
        "SET LOCAL ended with the transaction"
    );
}

/// Holds. Promise (docs/fetch-size.md "Errors"): a server error after some rows is returned
/// by `next()` after the rows before it, and the connection stays in step. Steps: a stream of
/// one row per fetch under `statement_timeout = 300ms`, paused past the timeout after its
/// first row (in the extended protocol the timeout runs until the stream's `Sync`), then read
/// on; then three calls whose answers are checked.
#[tokio::test]
async fn a_statement_timeout_inside_a_row_stream_is_its_error_and_leaves_the_connection_in_step() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    let mut rows = c
        .query_stream_with(
            "SELECT g FROM generate_series(1, 100) g",
            &[],
            FetchSize::Rows(1),
        )
        .await
        .unwrap();
    let first: i32 = rows.next().await.unwrap().unwrap().get(0).unwrap();
    assert_eq!(first, 1);
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut seen = vec![first];
    let error = loop {
        match bounded("the stream", rows.next()).await {
            Ok(Some(row)) => seen.push(row.get(0).unwrap()),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    drop(rows);
    let want: Vec<i32> = (1..=seen.len() as i32).collect();
    assert_eq!(seen, want, "rows in order, none lost or repeated");
    let e = error.expect("the timeout fired while the stream was open");
    assert_eq!(e.code(), Some(SqlState::QUERY_CANCELED), "{e}");
    for i in 0..3i32 {
        let row = bounded("next call", c.query_one("SELECT $1::int4", &[&i]))
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0).unwrap(), i);
    }
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
}

/// Holds. Promise (docs/client.md "Cancellation and timeouts"): every future can be dropped
/// part-way by a timeout; a call can never read another call's rows, and no transaction is
/// left that nobody opened. `cancellation.rs` drops at each poll; this cuts with real timers
/// of 300 lengths (0 to 0.9 ms, about as long as these calls take here), so drops also land in the middle of socket reads and writes.
/// Steps: each round runs one call kind whose every answer carries the round's marker,
/// under `tokio::time::timeout`; a call that completes must return its own marker; then the
/// next call (`SELECT $1`) must return the next marker and the session must be idle.
#[tokio::test]
async fn calls_cut_by_timers_of_every_length_never_answer_for_each_other() {
    use futures_util::TryStreamExt;
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE h (round int)").await.unwrap();
    let mut completed = 0;
    for round in 0..300i32 {
        let limit = Duration::from_micros((round as u64 * 3) % 900);
        let kind = round % 6;
        let c2 = &mut c;
        let call = async move {
            let got: Vec<i32> = match kind {
                0 => c2
                    .query("SELECT $1::int4 FROM generate_series(1, 2000)", &[&round])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect::<Result<_, _>>()?,
                1 | 2 => {
                    let mode = if kind == 1 {
                        slipstream_pg::PipelineMode::ContinueOnError
                    } else {
                        slipstream_pg::PipelineMode::AbortOnError
                    };
                    let mut p = c2.pipeline_with(slipstream_pg::PipelineOptions::new().mode(mode));
                    let mut ops = Vec::new();
                    for _ in 0..20 {
                        ops.push(
                            p.query_typed(
                                "SELECT $1",
                                &[(&round, slipstream_pg::types::Type::INT4)],
                            )
                            .await?,
                        );
                    }
                    let mut got = Vec::new();
                    for op in &ops {
                        got.push(p.process(op).await?[0].get(0)?);
                    }
                    p.end().await;
                    got
                }
                3 => {
                    let rows = c2
                        .query_stream_with(
                            "SELECT $1::int4 FROM generate_series(1, 500)",
                            &[&round],
                            FetchSize::Rows(50),
                        )
                        .await?;
                    let rows: Vec<slipstream_pg::Row> = rows.try_collect().await?;
                    rows.iter().map(|r| r.get(0)).collect::<Result<_, _>>()?
                }
                4 => {
                    let mut tx = c2.transaction().await?;
                    tx.execute("INSERT INTO h VALUES ($1)", &[&round]).await?;
                    let n: i64 = tx
                        .query_one("SELECT count(*) FROM h WHERE round = $1", &[&round])
                        .await?
                        .get(0)?;
                    tx.rollback().await?;
                    vec![round; n as usize]
                }
                _ => {
                    let mut out = c2
                        .copy_out(&format!(
                            "COPY (SELECT {round} FROM generate_series(1, 500)) TO STDOUT"
                        ))
                        .await?;
                    let mut got = Vec::new();
                    while let Some(line) = out.next().await? {
                        got.push(std::str::from_utf8(&line).unwrap().trim().parse().unwrap());
                    }
                    got
                }
            };
            Ok::<_, slipstream_pg::Error>(got)
        };
        if let Ok(result) = tokio::time::timeout(limit, call).await {
            let got = result.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(!got.is_empty(), "round {round}");
            assert!(
                got.iter().all(|&v| v == round),
                "round {round} (kind {kind}) read another call's answer: {got:?}"
            );
            completed += 1;
        }
        let marker = round * 7 + 3;
        let row = bounded(
            &format!("the call after round {round}"),
            c.query_one("SELECT $1::int4", &[&marker]),
        )
        .await
        .unwrap_or_else(|e| panic!("after round {round} (kind {kind}): {e}"));
        assert_eq!(row.get::<_, i32>(0).unwrap(), marker, "after round {round}");
        assert_eq!(
            c.transaction_status(),
            TransactionStatus::Idle,
            "round {round}"
        );
        assert!(c.is_reusable(), "round {round}");
    }
    let left: i64 = super::scalar(&mut c, "SELECT count(*) FROM h").await;
    assert_eq!(left, 0, "a rolled-back insert was kept");
    eprintln!("{completed} of 300 calls completed within their timer");
}
