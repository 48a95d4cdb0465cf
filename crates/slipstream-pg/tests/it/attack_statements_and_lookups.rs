//! Attack tests (review of issues 19 and 24): named statements and type lookups under calls
//! dropped at every poll, types recreated or hidden from search_path, lookups in failed
//! transactions, DEALLOCATE ALL inside a pipeline, and the streams and sinks. Each asserts the
//! promise, so a failing test is a confirmed break (marked ignored with what was seen).

use futures_util::{SinkExt, StreamExt};
use slipstream_pg::types::{FromSql, Kind, ToSql};
use slipstream_pg::{Client, Uncached};

use super::custom_types::Mood;
use super::engine::{DropAfter, bounded};

async fn count(c: &mut Client, sql: &str) -> i64 {
    bounded(sql, c.query_one(&Uncached(sql), &[]))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
        .unwrap()
}

/// No server-side statement that the cache does not account for (what dropped calls left must
/// have been closed), and the connection answers correctly.
async fn no_leak_and_in_step(c: &mut Client) {
    bounded("settle", c.settle()).await.unwrap();
    let one: i32 = bounded("SELECT 1", c.query_one("SELECT 1", &[]))
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(one, 1, "out of step");
    let on_server = count(c, "SELECT count(*) FROM pg_prepared_statements").await;
    let cached = c.statement_cache_stats().size as i64;
    if on_server > cached {
        for r in c
            .query(
                &Uncached("SELECT name, statement FROM pg_prepared_statements"),
                &[],
            )
            .await
            .unwrap()
        {
            eprintln!(
                "  {} {}",
                r.get::<_, &str>(0).unwrap(),
                r.get::<_, &str>(1).unwrap()
            );
        }
    }
    assert!(
        on_server <= cached,
        "{} server-side statements leaked (cache holds {cached}, server has {on_server})",
        on_server - cached
    );
}

// 1. A row stream and a pipeline whose first run needs a type lookup, dropped at every poll.
#[tokio::test]
async fn row_streams_and_pipelines_dropped_at_every_poll_during_a_lookup_leak_nothing() {
    let (_cluster, mut c) = super::setup().await;
    let mut abandoned = 0;
    for k in 1..=10usize {
        c.batch_execute(&format!(
            "CREATE TYPE s{k} AS ENUM ('a'); CREATE TYPE p{k} AS ENUM ('a')"
        ))
        .await
        .unwrap();
        let sql =
            format!("SELECT $1::int4, 'a'::s{k}, ARRAY['a'::s{k}] FROM generate_series(1, 3)");
        let stream = async {
            let mut rows = c.query_stream(sql.as_str(), &[&1i32]).await?;
            let mut n = 0;
            while rows.next().await?.is_some() {
                n += 1;
            }
            Ok::<_, slipstream_pg::Error>(n)
        };
        if DropAfter::new(stream, k).await.is_none() {
            abandoned += 1;
        }
        c.settle().await.unwrap();
        let sql = format!("SELECT $1::int4, 'a'::p{k}");
        let piped = async {
            let mut p = c.pipeline();
            let op = p.query(sql.as_str(), &[&1i32]).await?;
            let rows = p.process(&op).await?;
            Ok::<_, slipstream_pg::Error>(rows.len())
        };
        if DropAfter::new(piped, k).await.is_none() {
            abandoned += 1;
        }
        no_leak_and_in_step(&mut c).await;
    }
    assert!(
        abandoned > 0,
        "nothing was abandoned: the test proved nothing"
    );
    // And every statement still runs, its types known, with no re-prepare.
    for k in 1..=10usize {
        let n = c
            .query(
                format!("SELECT $1::int4, 'a'::s{k}, ARRAY['a'::s{k}] FROM generate_series(1, 3)")
                    .as_str(),
                &[&1i32],
            )
            .await
            .unwrap()
            .len();
        assert_eq!(n, 3);
    }
    assert_eq!(
        c.statement_cache_stats().reprepares,
        0,
        "a live statement was closed"
    );
}

// 2. A stale statement re-prepared after DDL (its result type changed to a new enum column),
// the call dropped at every poll: no leak, and the next run sees the new column.
#[tokio::test]
async fn a_stale_reprepare_dropped_at_every_poll_leaks_nothing() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE s (a int4); INSERT INTO s VALUES (1)")
        .await
        .unwrap();
    c.query("SELECT * FROM s", &[]).await.unwrap();
    let mut abandoned = 0;
    for k in 1..=10usize {
        c.batch_execute(&format!(
            "CREATE TYPE r{k} AS ENUM ('x'); ALTER TABLE s ADD COLUMN c{k} r{k} DEFAULT 'x'"
        ))
        .await
        .unwrap();
        if DropAfter::new(c.query("SELECT * FROM s", &[]), k)
            .await
            .is_none()
        {
            abandoned += 1;
        }
        no_leak_and_in_step(&mut c).await;
        let rows = bounded("the stale query", c.query("SELECT * FROM s", &[]))
            .await
            .unwrap();
        assert_eq!(rows[0].len(), k + 1, "the re-prepared statement's columns");
        assert!(matches!(rows[0].columns()[k].type_().kind(), Kind::Enum(_)));
    }
    assert!(abandoned > 0, "nothing was abandoned");
    no_leak_and_in_step(&mut c).await;
}

// 3. A type dropped and recreated with the same name (a new OID, labels in another order): the
// statement that used the old one runs again with the new one.
#[tokio::test]
async fn a_type_recreated_with_the_same_name_is_looked_up_again() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    let row = c.query_one("SELECT $1::mood", &[&Mood::Ok]).await.unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Ok);
    c.batch_execute("DROP TYPE mood; CREATE TYPE mood AS ENUM ('happy', 'ok', 'sad')")
        .await
        .unwrap();
    // Twice: a first failure the cache learns from would still be a break, but a lasting one
    // makes the SQL unusable on this connection until its cache is cleared.
    let mut errors = Vec::new();
    for _ in 0..2 {
        match bounded(
            "after the type was recreated",
            c.query_one("SELECT $1::mood", &[&Mood::Happy]),
        )
        .await
        {
            Ok(row) => assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy),
            Err(e) => errors.push(format!("{e} (kind {:?})", e.kind())),
        }
    }
    assert!(
        errors.is_empty(),
        "the statement using a recreated type failed: {errors:?}"
    );
    no_leak_and_in_step(&mut c).await;
}

// 4. The first use of a type inside a failed transaction: the lookup cannot run; the call
// fails saying the transaction is aborted, and after ROLLBACK the type works.
#[tokio::test]
async fn a_lookup_inside_a_failed_transaction_fails_cleanly_then_works() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    assert!(c.batch_execute("SELECT 1/0").await.is_err());
    let e = bounded(
        "a lookup in a failed transaction",
        c.query_one("SELECT $1::mood", &[&Mood::Sad]),
    )
    .await
    .unwrap_err();
    eprintln!("in the failed transaction: {e}");
    assert_eq!(
        e.code().map(|s| s.code().to_string()).as_deref(),
        Some("25P02"),
        "{e}"
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    let row = bounded(
        "after ROLLBACK",
        c.query_one("SELECT $1::mood", &[&Mood::Sad]),
    )
    .await
    .unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Sad);
    // A type created inside a transaction, used, and rolled back: the name is then free for
    // another type, and the connection must not keep the rolled-back one.
    c.batch_execute("BEGIN; CREATE TYPE gone AS ENUM ('sad')")
        .await
        .unwrap();
    c.query("SELECT 'sad'::gone", &[]).await.unwrap();
    c.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("DROP TYPE mood; CREATE TYPE mood AS ENUM ('ok', 'happy', 'sad')")
        .await
        .unwrap();
    let row = c.query_one("SELECT 'happy'::mood", &[]).await.unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy);
    no_leak_and_in_step(&mut c).await;
}

// 5. A type in a schema that is not on search_path, next to a same-named one that is, and
// many types in one statement.
#[tokio::test]
async fn types_off_search_path_and_many_in_one_statement() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE SCHEMA hidden; CREATE TYPE hidden.mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TYPE mood AS ENUM ('x', 'y')",
    )
    .await
    .unwrap();
    let row = c
        .query_one("SELECT 'happy'::hidden.mood, 'x'::mood", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy);
    match row.columns()[1].type_().kind() {
        Kind::Enum(labels) => assert_eq!(labels, &["x".to_string(), "y".to_string()]),
        k => panic!("public.mood looked up as {k:?}"),
    }
    let n = 60;
    let mut ddl = String::new();
    let mut cols = Vec::new();
    for i in 0..n {
        ddl += &format!("CREATE TYPE m{i} AS ENUM ('v{i}'); CREATE TYPE c{i} AS (f m{i}[]);");
        cols.push(format!("ROW(ARRAY['v{i}'::m{i}])::c{i}"));
    }
    c.batch_execute(&ddl).await.unwrap();
    let sql = format!("SELECT {}", cols.join(", "));
    // Dropped at every poll first, then run whole.
    for k in 1..=6 {
        let _ = DropAfter::new(c.query(sql.as_str(), &[]), k).await;
        c.settle().await.unwrap();
    }
    let row = bounded("many types", c.query_one(sql.as_str(), &[]))
        .await
        .unwrap();
    assert_eq!(row.len(), n);
    for i in 0..n {
        match row.columns()[i].type_().kind() {
            Kind::Composite(f) => assert!(
                matches!(f[0].type_().kind(), Kind::Array(e) if matches!(e.kind(), Kind::Enum(l) if l == &[format!("v{i}")])),
                "column {i}: {:?}",
                f[0].type_()
            ),
            k => panic!("column {i} looked up as {k:?}"),
        }
    }
    no_leak_and_in_step(&mut c).await;
}

// 6. DEALLOCATE ALL and DISCARD ALL through a pipeline, then cached statements and types used
// again: the next calls must work (the cache and the types invalidated).
#[tokio::test]
async fn deallocate_all_in_a_pipeline_invalidates_the_cache() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    for cmd in ["DEALLOCATE ALL", "DISCARD ALL"] {
        c.query_one("SELECT $1::mood", &[&Mood::Ok]).await.unwrap();
        {
            let mut p = c.pipeline();
            p.execute(cmd, &[]).await.unwrap();
            let results = bounded(cmd, p.end()).await;
            for r in results {
                r.unwrap_or_else(|e| panic!("{cmd} in a pipeline: {e}"));
            }
        }
        let row = bounded("after it", c.query_one("SELECT $1::mood", &[&Mood::Happy]))
            .await
            .unwrap_or_else(|e| panic!("the cached statement after {cmd} in a pipeline: {e}"));
        assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy);
        no_leak_and_in_step(&mut c).await;
    }
}

// 7. A CopyIn sink dropped part-way through `send` at every poll, and one that fails
// mid-sink: the next call is correct and nothing of the aborted COPY is kept.
#[tokio::test]
async fn a_copy_in_sink_dropped_at_every_poll_keeps_the_connection_in_step() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int4)").await.unwrap();
    let big = bytes::Bytes::from("1\n".repeat(200_000));
    for k in 1..=6usize {
        let sink = async {
            let mut copy = c.copy_in("COPY t FROM STDIN").await?;
            copy.send(big.clone()).await?;
            copy.send(big.clone()).await?;
            copy.close().await?;
            Ok::<_, slipstream_pg::Error>(())
        };
        let _ = DropAfter::new(sink, k).await;
        let one: i32 = bounded("after the dropped sink", c.query_one("SELECT 1", &[]))
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(one, 1);
        let rows = count(&mut c, "SELECT count(*) FROM t").await;
        assert!(
            rows == 0 || rows == 400_000,
            "a partial COPY was kept: {rows} rows"
        );
        c.batch_execute("TRUNCATE t").await.unwrap();
    }
    // Bad data with more sends after it: the error surfaces by close at the latest.
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    let mut failed = copy
        .send(bytes::Bytes::from_static(b"oops\n"))
        .await
        .is_err();
    for _ in 0..50 {
        if failed {
            break;
        }
        failed = copy.send(big.clone()).await.is_err();
    }
    if !failed {
        failed = copy.close().await.is_err();
    }
    assert!(failed, "bad COPY data was never reported");
    drop(copy);
    assert_eq!(count(&mut c, "SELECT count(*) FROM t").await, 0);
    assert!(c.is_reusable());
}

// 8. The notifications stream dropped at every poll while a notification is on its way: none
// is lost, and the connection serves statements again.
#[tokio::test]
async fn a_notifications_stream_dropped_at_every_poll_loses_nothing() {
    let (cluster, mut l) = super::setup().await;
    let mut sender = slipstream_pg::connect(&cluster.url()).await.unwrap();
    l.batch_execute("LISTEN ch").await.unwrap();
    for k in 1..=5usize {
        sender
            .batch_execute(&format!("NOTIFY ch, 'n{k}'"))
            .await
            .unwrap();
        let got = DropAfter::new(
            async {
                let mut s = l.notifications().await?;
                Ok::<_, slipstream_pg::Error>(
                    s.next().await.map(|n| n.map(|n| n.payload().to_string())),
                )
            },
            k,
        )
        .await;
        let payload = match got {
            Some(r) => r.unwrap().unwrap().unwrap(),
            None => {
                // Abandoned: the notification must still come.
                let mut s = l.notifications().await.unwrap();
                bounded("the notification after a dropped stream", s.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .payload()
                    .to_string()
            }
        };
        assert_eq!(payload, format!("n{k}"));
        assert_eq!(super::scalar::<i32>(&mut l, "SELECT 7").await, 7);
    }
}

// 12. The first use of a type inside a pipeline's failed transaction, and through a row stream
// in a failed transaction: errors, no hang, no desync, and after the rollback the type works.
#[tokio::test]
async fn type_lookups_in_failed_transactions_through_pipelines_and_row_streams() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    for mode in [
        slipstream_pg::PipelineMode::AbortOnError,
        slipstream_pg::PipelineMode::ContinueOnError,
    ] {
        {
            let mut p = c.pipeline_with(slipstream_pg::PipelineOptions::new().mode(mode));
            p.execute("BEGIN", &[]).await.unwrap();
            p.execute("SELECT 1/0", &[]).await.unwrap();
            p.query("SELECT 'ok'::mood", &[]).await.unwrap();
            p.execute("ROLLBACK", &[]).await.unwrap();
            let results = bounded("pipeline", p.end()).await;
            eprintln!(
                "{mode:?}: {:?}",
                results
                    .iter()
                    .map(|r| r.as_ref().map(|_| ()).map_err(|e| e.to_string()))
                    .collect::<Vec<_>>()
            );
            assert!(
                results[2].is_err(),
                "{mode:?}: the op in the failed transaction succeeded"
            );
        }
        // Abort mode skips the ROLLBACK too (same sync block): the transaction stays failed.
        if c.transaction_status() != slipstream_pg::TransactionStatus::Idle {
            assert_eq!(mode, slipstream_pg::PipelineMode::AbortOnError);
            c.batch_execute("ROLLBACK").await.unwrap();
        }
        let row = bounded("after", c.query_one("SELECT $1::mood", &[&Mood::Happy]))
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: after the pipeline: {e}"));
        assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy);
        c.clear_statement_cache();
    }
    // A row stream whose lookup would run inside a failed transaction.
    c.clear_statement_cache();
    c.batch_execute("BEGIN").await.unwrap();
    assert!(c.batch_execute("SELECT 1/0").await.is_err());
    let r = bounded("stream", async {
        let mut s = c.query_stream("SELECT 'ok'::mood", &[]).await?;
        s.next().await.map(|r| r.is_some())
    })
    .await;
    assert!(r.is_err(), "a row stream ran in a failed transaction");
    c.batch_execute("ROLLBACK").await.unwrap();
    let mut s = c.query_stream("SELECT 'ok'::mood", &[]).await.unwrap();
    let row = bounded("stream after", s.next()).await.unwrap().unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Ok);
    drop(s);
    no_leak_and_in_step(&mut c).await;
}

// 13. The same SQL run again right after a dropped first run of it (no settle between): the
// close of what the dropped call left must not close the statement the next call prepared,
// whichever poll the drop came at, for plain queries, row streams and typed results.
#[tokio::test]
async fn a_rerun_right_after_a_dropped_first_run_keeps_its_statement() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    let mut abandoned = 0;
    for k in 1..=8usize {
        for (i, sql) in [
            format!("SELECT $1::int4 + {k}"),
            format!("SELECT $1::int4 + {k}, 'ok'::mood"),
        ]
        .iter()
        .enumerate()
        {
            if DropAfter::new(c.query(sql.as_str(), &[&1i32]), k)
                .await
                .is_none()
            {
                abandoned += 1;
            }
            // At once, the same SQL: by query or by a row stream.
            if i == 0 {
                bounded("rerun", c.query(sql.as_str(), &[&1i32]))
                    .await
                    .unwrap();
            } else {
                let mut s = c.query_stream(sql.as_str(), &[&1i32]).await.unwrap();
                while bounded("rerun stream", s.next()).await.unwrap().is_some() {}
            }
            // And once more: it must be a cache hit on a statement the server still has.
            let before = c.statement_cache_stats();
            let row = bounded("third run", c.query_one(sql.as_str(), &[&1i32]))
                .await
                .unwrap_or_else(|e| panic!("poll {k}, {sql}: {e}"));
            assert_eq!(row.get::<_, i32>(0).unwrap(), 1 + k as i32);
            let after = c.statement_cache_stats();
            assert_eq!(
                after.reprepares, before.reprepares,
                "poll {k}, {sql}: the rerun's statement was closed under it"
            );
        }
    }
    assert!(abandoned > 0, "nothing was abandoned");
    no_leak_and_in_step(&mut c).await;
}

// 14. A cache of two with evictions under drops at every poll (first runs with a type lookup,
// row streams, pipelines): the server never holds more than the cache accounts for, and every
// completed call is right.
#[tokio::test]
async fn evictions_racing_dropped_calls_leak_nothing_and_close_nothing_live() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&format!("{}?statement_cache_size=2", cluster.url()))
        .await
        .unwrap();
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    let sqls: Vec<String> = (0..5)
        .map(|j| format!("SELECT $1::int4 + {j}, 'ok'::mood"))
        .collect();
    let mut abandoned = 0;
    for i in 0..40usize {
        let sql = &sqls[i % 5];
        let k = 1 + i % 7;
        let dropped = match i % 3 {
            0 => DropAfter::new(c.query(sql.as_str(), &[&1i32]), k)
                .await
                .is_none(),
            1 => DropAfter::new(
                async {
                    let mut s = c.query_stream(sql.as_str(), &[&1i32]).await?;
                    while s.next().await?.is_some() {}
                    Ok::<_, slipstream_pg::Error>(())
                },
                k,
            )
            .await
            .is_none(),
            _ => DropAfter::new(
                async {
                    let mut p = c.pipeline();
                    let a = p.query(sql.as_str(), &[&1i32]).await?;
                    let b = p.query(sqls[(i + 1) % 5].as_str(), &[&1i32]).await?;
                    p.process(&a).await?;
                    p.process(&b).await?;
                    Ok::<_, slipstream_pg::Error>(())
                },
                k,
            )
            .await
            .is_none(),
        };
        if dropped {
            abandoned += 1;
        }
        let other = &sqls[(i + 2) % 5];
        let row = bounded("completed", c.query_one(other.as_str(), &[&10i32]))
            .await
            .unwrap_or_else(|e| panic!("iteration {i}: {e}"));
        assert_eq!(row.get::<_, i32>(0).unwrap(), 10 + ((i + 2) % 5) as i32);
        assert_eq!(row.get::<_, Mood>(1).unwrap(), Mood::Ok);
    }
    assert!(abandoned > 0);
    no_leak_and_in_step(&mut c).await;
    eprintln!("{:?}", c.statement_cache_stats());
    assert_eq!(
        c.statement_cache_stats().reprepares,
        0,
        "a live statement was closed"
    );
}

// 15. The type lookup's catalog query says it is schema-qualified throughout, so nothing in a
// user's schema changes it. `unnest` is not qualified: a `public.unnest(oid[])` is a closer
// match than `pg_catalog.unnest(anyarray)` and wins even with pg_catalog first on the path, so
// a user who can create functions in `public` runs code in every session that looks a type up
// (CVE-2018-1058's pattern) and decides what the lookup sees.
#[tokio::test]
async fn the_type_lookup_cannot_be_hijacked_through_public_functions() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE hijack (x int);
         CREATE FUNCTION public.unnest(oid[]) RETURNS SETOF oid LANGUAGE sql AS
           $$ INSERT INTO hijack VALUES (1); SELECT x FROM pg_catalog.unnest($1) AS x $$;",
    )
    .await
    .unwrap();
    let r = bounded("lookup", c.query_one("SELECT 'ok'::mood", &[])).await;
    let ran = count(&mut c, "SELECT count(*) FROM hijack").await;
    eprintln!(
        "lookup: {:?}; impostor ran {ran} times",
        r.as_ref().map(|_| ()).map_err(|e| e.to_string())
    );
    assert_eq!(
        ran, 0,
        "the lookup ran public.unnest (a user's function) in this session"
    );
    assert_eq!(r.unwrap().get::<_, Mood>(0).unwrap(), Mood::Ok);
}

// 16. A cached statement whose *result* is a type dropped and recreated (no parameter of it):
// the server re-plans it, and the client must decode by the new type.
#[tokio::test]
async fn a_result_type_recreated_under_a_cached_statement_decodes_by_the_new_one() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    let row = c.query_one("SELECT 'happy'::mood", &[]).await.unwrap();
    assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy);
    c.batch_execute("DROP TYPE mood; CREATE TYPE mood AS ENUM ('happy', 'sad', 'ok')")
        .await
        .unwrap();
    let mut errors = Vec::new();
    for _ in 0..2 {
        match bounded("after", c.query_one("SELECT 'happy'::mood", &[])).await {
            Ok(row) => assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Happy),
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert!(
        errors.is_empty(),
        "the cached statement after the type was recreated: {errors:?}"
    );
    no_leak_and_in_step(&mut c).await;
}

// 17. Row streams (as futures::Stream, fetching 2 rows at a time inside a transaction) and
// CopyOut streams dropped at every poll: the next call is right and the transaction intact.
#[tokio::test]
async fn row_and_copy_out_streams_dropped_at_every_poll_keep_the_connection_in_step() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    let mut abandoned = 0;
    for k in 1..=12usize {
        c.batch_execute("BEGIN; CREATE TEMP TABLE IF NOT EXISTS w (x int)")
            .await
            .unwrap();
        let rows = async {
            let s = c
                .query_stream_with(
                    "SELECT g, 'ok'::mood FROM generate_series(1, 9) g",
                    &[],
                    slipstream_pg::FetchSize::Rows(2),
                )
                .await?;
            let all: Vec<_> = s.collect().await;
            Ok::<_, slipstream_pg::Error>(all.len())
        };
        if DropAfter::new(rows, k).await.is_none() {
            abandoned += 1;
        }
        bounded(
            "insert in the tx",
            c.execute("INSERT INTO w VALUES (1)", &[]),
        )
        .await
        .unwrap_or_else(|e| panic!("poll {k}: {e}"));
        let copied = async {
            let s = c
                .copy_out("COPY (SELECT generate_series(1, 5000)) TO STDOUT")
                .await?;
            let chunks: Vec<_> = s.into_stream().collect().await;
            Ok::<_, slipstream_pg::Error>(chunks.len())
        };
        if DropAfter::new(copied, k).await.is_none() {
            abandoned += 1;
        }
        assert_eq!(
            c.transaction_status(),
            slipstream_pg::TransactionStatus::InTransaction,
            "poll {k}: the transaction was lost"
        );
        c.batch_execute("COMMIT").await.unwrap();
        let n = count(&mut c, "SELECT count(*) FROM w").await;
        assert_eq!(n, k as i64, "poll {k}: committed rows");
    }
    assert!(abandoned > 0);
    no_leak_and_in_step(&mut c).await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSql, FromSql)]
#[postgres(name = "mood")]
enum Mood4 {
    #[postgres(name = "sad")]
    Sad,
    #[postgres(name = "ok")]
    Ok,
    #[postgres(name = "happy")]
    Happy,
    #[postgres(name = "ecstatic")]
    Ecstatic,
}

// 18. DEALLOCATE ALL (simple protocol, and extended) forgets looked-up types as DISCARD ALL
// does: after ALTER TYPE ... ADD VALUE, the enum is looked up again with its new label.
#[tokio::test]
async fn deallocate_all_forgets_looked_up_types() {
    for how in ["simple", "extended"] {
        let (_cluster, mut c) = super::setup().await;
        c.batch_execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
            .await
            .unwrap();
        let row = c.query_one("SELECT 'ok'::mood", &[]).await.unwrap();
        assert_eq!(row.get::<_, Mood>(0).unwrap(), Mood::Ok);
        c.batch_execute("ALTER TYPE mood ADD VALUE 'ecstatic'")
            .await
            .unwrap();
        if how == "simple" {
            c.batch_execute("DEALLOCATE ALL").await.unwrap();
        } else {
            c.execute(&Uncached("DEALLOCATE ALL"), &[]).await.unwrap();
        }
        let row = bounded(how, c.query_one("SELECT 'ecstatic'::mood, 'ok'::mood", &[]))
            .await
            .unwrap_or_else(|e| panic!("{how}: {e}"));
        let got = row.get::<_, Mood4>(0);
        assert_eq!(
            got.as_ref().map_err(|e| e.to_string()),
            Ok(&Mood4::Ecstatic),
            "{how}: the enum's labels were not looked up again"
        );
        no_leak_and_in_step(&mut c).await;
    }
}
