//! The cancellation harness (issue 17): every public async call is dropped after its k-th poll,
//! for every k until it completes. After each drop, the next call on the connection returns the
//! right answer, and the connection is inside no transaction the caller did not open.
//!
//! Futures are polled only when woken ([`DropAfter`]), so k counts real steps of the call (a
//! write, a read, a settle), not busy polls. Bounded: every call here completes within a few
//! dozen steps on a local server; [`MAX_POLLS`] turns a call that never completes into a
//! failure instead of an endless loop.

use std::future::Future;
use std::pin::Pin;

use slipstream_pg::{Client, Error, PipelineMode, PipelineOptions, TransactionStatus};

use super::engine::{DropAfter, bounded};

/// A type the client must look up in the catalogs (issue 24): the lookup is an internal
/// request, and dropping a call in the middle of it must not leave the connection out of step.
#[derive(Debug, PartialEq, slipstream_pg::types::ToSql, slipstream_pg::types::FromSql)]
#[postgres(name = "mood")]
enum Mood {
    #[postgres(name = "sad")]
    Sad,
    #[postgres(name = "happy")]
    Happy,
}

/// What the tests' connection needs: a table and a type to look up.
pub(super) const SCHEMA: &str =
    "CREATE TABLE h (id int); CREATE TYPE mood AS ENUM ('sad', 'happy')";

/// More steps than any call here takes; reaching it fails the test.
pub(super) const MAX_POLLS: usize = 400;

pub(super) type Call =
    for<'a> fn(&'a mut Client) -> Pin<Box<dyn Future<Output = Result<(), Error>> + 'a>>;

/// Every public async call, each as a complete use (a COPY written and finished, a stream read
/// to its end, a pipeline queued, processed and ended), in autocommit.
pub(super) fn calls() -> Vec<(&'static str, Call)> {
    vec![
        ("query", |c| {
            Box::pin(async move {
                // About 1 MB: many reads, so drops land in the middle of the reply.
                let rows = c
                    .query(
                        "SELECT g, repeat('x', 50) FROM generate_series(1, 20000) g",
                        &[],
                    )
                    .await?;
                assert_eq!(rows.len(), 20000);
                Ok(())
            })
        }),
        ("execute", |c| {
            Box::pin(async move {
                assert_eq!(c.execute("INSERT INTO h VALUES (1)", &[]).await?, 1);
                Ok(())
            })
        }),
        ("query_typed", |c| {
            Box::pin(async move {
                use slipstream_pg::types::Type;
                let rows = c
                    .query_typed("SELECT $1 + 1", &[(&1i32, Type::INT4)])
                    .await?;
                assert_eq!(rows[0].get::<_, i32>(0)?, 2);
                Ok(())
            })
        }),
        ("prepare", |c| {
            Box::pin(async move {
                let s = c.prepare("SELECT $1::int8").await?;
                assert_eq!(c.query_one(&s, &[&5i64]).await?.get::<_, i64>(0)?, 5);
                Ok(())
            })
        }),
        ("simple_query", |c| {
            Box::pin(async move {
                let m = c.simple_query("SELECT 1; SELECT 2").await?;
                assert_eq!(m.len(), 6);
                Ok(())
            })
        }),
        ("batch_execute", |c| {
            Box::pin(async move { c.batch_execute("INSERT INTO h VALUES (2); SELECT 1").await })
        }),
        ("transaction + commit", |c| {
            Box::pin(async move {
                let mut tx = c.transaction().await?;
                tx.execute("INSERT INTO h VALUES (3)", &[]).await?;
                tx.commit().await
            })
        }),
        ("transaction + rollback", |c| {
            Box::pin(async move {
                let mut tx = c.transaction().await?;
                tx.execute("INSERT INTO h VALUES (4)", &[]).await?;
                tx.rollback().await
            })
        }),
        ("savepoint", |c| {
            Box::pin(async move {
                let mut tx = c.transaction().await?;
                {
                    let mut sp = tx.savepoint("s").await?;
                    sp.execute("INSERT INTO h VALUES (5)", &[]).await?;
                    sp.rollback().await?;
                }
                let mut nested = tx.transaction().await?;
                nested.execute("INSERT INTO h VALUES (6)", &[]).await?;
                nested.commit().await?;
                tx.commit().await
            })
        }),
        ("copy_in", |c| {
            Box::pin(async move {
                let mut copy = c.copy_in("COPY h FROM STDIN").await?;
                for i in 0..2000 {
                    copy.write(format!("{i}\n").as_bytes()).await?;
                }
                assert_eq!(copy.finish().await?, 2000);
                Ok(())
            })
        }),
        ("copy_in abort", |c| {
            Box::pin(async move {
                let mut copy = c.copy_in("COPY h FROM STDIN").await?;
                copy.write(b"1\n").await?;
                copy.abort("changed my mind").await
            })
        }),
        ("copy_out", |c| {
            Box::pin(async move {
                let mut copy = c
                    .copy_out("COPY (SELECT g, repeat('x', 50) FROM generate_series(1, 20000) g) TO STDOUT")
                    .await?;
                let mut n = 0;
                while copy.next().await?.is_some() {
                    n += 1;
                }
                assert_eq!(n, 20000);
                Ok(())
            })
        }),
        ("query_stream", |c| {
            Box::pin(async move {
                let mut rows = c
                    .query_stream_with(
                        "SELECT g FROM generate_series(1, 1000) g",
                        &[],
                        slipstream_pg::FetchSize::Rows(100),
                    )
                    .await?;
                let mut n = 0;
                while rows.next().await?.is_some() {
                    n += 1;
                }
                assert_eq!(n, 1000);
                Ok(())
            })
        }),
        // Each forgets the looked-up types first, so every run looks `mood` up again.
        ("type lookup: query", |c| {
            Box::pin(async move {
                c.clear_statement_cache();
                let row = c
                    .query_one("SELECT 'happy'::mood, ARRAY['sad']::mood[]", &[])
                    .await?;
                assert_eq!(row.get::<_, Mood>(0)?, Mood::Happy);
                assert_eq!(row.get::<_, Vec<Mood>>(1)?, vec![Mood::Sad]);
                Ok(())
            })
        }),
        ("type lookup: prepare", |c| {
            Box::pin(async move {
                c.clear_statement_cache();
                let s = c.prepare("SELECT $1::mood").await?;
                let row = c.query_one(&s, &[&Mood::Sad]).await?;
                assert_eq!(row.get::<_, Mood>(0)?, Mood::Sad);
                Ok(())
            })
        }),
        ("type lookup: query_stream", |c| {
            Box::pin(async move {
                use futures_util::StreamExt;
                c.clear_statement_cache();
                let rows = c
                    .query_stream_with(
                        "SELECT 'happy'::mood FROM generate_series(1, 50)",
                        &[],
                        slipstream_pg::FetchSize::Rows(7),
                    )
                    .await?;
                let moods: Vec<Result<Mood, Error>> =
                    rows.map(|r| r.and_then(|r| r.get(0))).collect().await;
                assert_eq!(moods.len(), 50);
                for m in moods {
                    assert_eq!(m?, Mood::Happy);
                }
                Ok(())
            })
        }),
        ("type lookup: pipeline", |c| {
            Box::pin(async move {
                c.clear_statement_cache();
                let mut p = c.pipeline();
                p.query("SELECT 'sad'::mood", &[]).await?;
                let results = p.end().await;
                let Ok(slipstream_pg::Output::Rows(rows)) = &results[0] else {
                    panic!("{results:?}")
                };
                assert_eq!(rows[0].get::<_, Mood>(0)?, Mood::Sad);
                Ok(())
            })
        }),
        ("pipeline, continue on error", |c| {
            Box::pin(async move {
                let mut p = c.pipeline_with(
                    PipelineOptions::new()
                        .mode(PipelineMode::ContinueOnError)
                        .max_in_flight(8),
                );
                let mut ops = Vec::new();
                for i in 0..40i64 {
                    ops.push(
                        p.query_typed("SELECT $1", &[(&i, slipstream_pg::types::Type::INT8)])
                            .await?,
                    );
                }
                let first = p.process(&ops[3]).await?;
                assert_eq!(first[0].get::<_, i64>(0)?, 3);
                for r in p.end().await {
                    r?;
                }
                Ok(())
            })
        }),
        ("pipeline, abort on error, BEGIN ... COMMIT", |c| {
            Box::pin(async move {
                let mut p =
                    c.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
                p.execute("BEGIN", &[]).await?;
                let ins = p.execute("INSERT INTO h VALUES (7)", &[]).await?;
                p.commit().await?;
                assert_eq!(p.process(&ins).await?, 1);
                for r in p.end().await {
                    r?;
                }
                Ok(())
            })
        }),
    ]
}

/// The connection answers right and is inside no transaction.
pub(super) async fn check_clean(c: &mut Client, name: &str, k: usize) {
    let marker = (k as i32) * 7 + 1;
    let row = bounded(
        &format!("{name}: the call after dropping at poll {k}"),
        c.query_one("SELECT $1::int4", &[&marker]),
    )
    .await
    .unwrap_or_else(|e| panic!("{name}, dropped at poll {k}: next call failed: {e}"));
    assert_eq!(row.get::<_, i32>(0).unwrap(), marker, "{name} at poll {k}");
    assert_eq!(
        c.transaction_status(),
        TransactionStatus::Idle,
        "{name}, dropped at poll {k}: left inside a transaction nobody opened"
    );
    assert!(c.is_reusable(), "{name} at poll {k}");
}

#[tokio::test]
async fn every_call_dropped_at_every_poll_leaves_the_connection_in_step_and_idle() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(SCHEMA).await.unwrap();
    drop_at_every_poll(&mut c, calls()).await;
}

/// memopt's fast lookups (issue 22): a `FunctionCall` is answered by its own `ReadyForQuery`,
/// so a dropped one must be settled like any request, alone or pipelined beside others.
pub(super) fn memopt_calls() -> Vec<(&'static str, Call)> {
    vec![
        ("memopt_get", |c| {
            Box::pin(async move {
                let m = c.memopt_table("m").await?;
                let row = c.memopt_get(&m, &42i64).await?;
                assert_eq!(row.map(|r| r.get::<_, i64>(0)).transpose()?, Some(42));
                Ok(())
            })
        }),
        ("memopt_get_many", |c| {
            Box::pin(async move {
                let m = c.memopt_table("m").await?;
                let keys: Vec<i64> = (1..=100).collect();
                assert_eq!(c.memopt_get_many(&m, &keys).await?.len(), 100);
                Ok(())
            })
        }),
        (
            "pipeline, memopt_get between statements, abort on error",
            |c| {
                Box::pin(async move {
                    let m = c.memopt_table("m").await?;
                    let mut p = c.pipeline_with(
                        PipelineOptions::new()
                            .mode(PipelineMode::AbortOnError)
                            .max_in_flight(8),
                    );
                    let mut ops = Vec::new();
                    for i in 1..=30i64 {
                        p.execute("SELECT 1", &[]).await?;
                        ops.push(p.memopt_get(&m, &i).await?);
                    }
                    assert_eq!(p.process(&ops[2]).await?.len(), 1);
                    for r in p.end().await {
                        r?;
                    }
                    Ok(())
                })
            },
        ),
        (
            "pipeline, runs of memopt_get on two tables with duplicate keys and misses",
            |c| {
                Box::pin(async move {
                    let m = c.memopt_table("m").await?;
                    let w = c.memopt_table("w").await?;
                    // A small window: runs are cut at its size cap and flow control waits
                    // between them, so drops land inside runs in flight.
                    let mut p = c.pipeline_with(PipelineOptions::new().max_in_flight(16));
                    let mut ops = Vec::new();
                    for i in 0..60i64 {
                        let k = [i % 7 + 1, 1000, 3][(i % 3) as usize];
                        ops.push((Some(k), p.memopt_get(&m, &k).await?));
                        if i % 10 == 9 {
                            ops.push((None, p.memopt_get(&w, "b").await?));
                            p.execute("SELECT 1", &[]).await?;
                        }
                    }
                    for (k, op) in &ops {
                        let rows = p.process(op).await?;
                        match k {
                            Some(1000) => assert!(rows.is_empty()),
                            Some(k) => assert_eq!(rows[0].get::<_, i64>(0)?, *k),
                            None => assert_eq!(rows[0].get::<_, &str>(0)?, "b"),
                        }
                    }
                    for r in p.end().await {
                        r?;
                    }
                    Ok(())
                })
            },
        ),
    ]
}

#[tokio::test]
async fn memopt_calls_dropped_at_every_poll_leave_the_connection_in_step_and_idle() {
    let (_cluster, mut c) = super::memopt::memopt_setup().await;
    drop_at_every_poll(&mut c, memopt_calls()).await;
}

/// Runs each call, dropping it after its k-th poll for k = 1, 2, ... until it completes, and
/// checks the connection after every drop.
async fn drop_at_every_poll(c: &mut Client, calls: Vec<(&'static str, Call)>) {
    for (name, call) in calls {
        let mut completed = false;
        for k in 1..=MAX_POLLS {
            let outcome = bounded(name, DropAfter::new(call(c), k)).await;
            check_clean(c, name, k).await;
            if let Some(result) = outcome {
                result.unwrap_or_else(|e| panic!("{name} completed with an error: {e}"));
                // Every call here waits for the server at least once: dropped at poll 1, it
                // was abandoned part-way, which is what this test is about.
                assert!(
                    k > 1,
                    "{name} completed at its first poll: nothing was dropped"
                );
                eprintln!("{name}: dropped at polls 1..{k}, completed at poll {k}");
                completed = true;
                break;
            }
        }
        assert!(
            completed,
            "{name} did not complete within {MAX_POLLS} polls"
        );
    }
}

/// Inside a transaction the caller opened: a dropped call leaves that transaction open (or, if
/// the statement failed, failed) and the next call still answers in step.
#[tokio::test]
async fn calls_dropped_inside_the_callers_transaction_leave_it_the_callers() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(SCHEMA).await.unwrap();
    let names = [
        "query",
        "execute",
        "prepare",
        "simple_query",
        "query_stream",
        "copy_in",
        "type lookup: query",
        "type lookup: prepare",
        "type lookup: query_stream",
    ];
    for (name, call) in calls().into_iter().filter(|(n, _)| names.contains(n)) {
        for k in 1..=MAX_POLLS {
            let mut tx = c.transaction().await.unwrap();
            let outcome = bounded(name, DropAfter::new(call(&mut tx), k)).await;
            match bounded(name, tx.query_one("SELECT 1", &[])).await {
                Ok(row) => {
                    assert_eq!(row.get::<_, i32>(0).unwrap(), 1);
                    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
                    bounded(name, tx.commit()).await.unwrap();
                }
                // A COPY dropped part-way is aborted with CopyFail, and a failed statement
                // fails the caller's transaction, as any error does: the caller rolls back.
                Err(e) if name == "copy_in" && e.code().is_some_and(|c| c.code() == "25P02") => {
                    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
                    bounded(name, tx.rollback()).await.unwrap();
                }
                Err(e) => panic!("{name} dropped at poll {k}: {e}"),
            }
            assert_eq!(c.transaction_status(), TransactionStatus::Idle);
            if outcome.is_some() {
                break;
            }
            assert!(k < MAX_POLLS, "{name} did not complete");
        }
    }
    // Commit and rollback themselves, dropped at every poll: never a transaction left behind.
    for commit in [true, false] {
        for k in 1..=MAX_POLLS {
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO h VALUES (9)", &[]).await.unwrap();
            let outcome = match commit {
                true => bounded("commit", DropAfter::new(tx.commit(), k)).await,
                false => bounded("rollback", DropAfter::new(tx.rollback(), k)).await,
            };
            check_clean(&mut c, if commit { "commit" } else { "rollback" }, k).await;
            if let Some(r) = outcome {
                r.unwrap();
                break;
            }
        }
    }
}
