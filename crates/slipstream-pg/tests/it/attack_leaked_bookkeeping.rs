//! Attacks (helper h91) on the connection's bookkeeping for leaked (`std::mem::forget`, safe
//! Rust) futures: `Connection::guard_ending` (a `commit()` or `rollback()` leaked while it
//! settles), `unkept` / `lookup_request` (a call leaked during its type lookup), combined
//! with requests of other kinds. client.md, "Cancellation and timeouts" and "Types".

use std::future::Future;
use std::task::{Context, Waker};

use slipstream_pg::Client;

use super::engine::{DropAfter, bounded};

/// Polls `f` once, with a waker that does nothing, and returns whether it was still pending.
fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    f.poll(&mut cx).is_pending()
}

/// A call dropped after its first poll whose reply takes a while: the next call's first poll
/// is spent settling it, so a future leaked there has queued nothing of its own.
async fn leave_a_slow_reply_owed(c: &mut Client) {
    let dropped = DropAfter::new(c.execute("SELECT pg_sleep(0.3)", &[]), 1).await;
    assert!(
        dropped.is_none(),
        "pg_sleep(0.3) answered at its first poll"
    );
}

#[derive(Debug, Clone, PartialEq, postgres_types::FromSql)]
#[postgres(name = "lpair")]
struct LPair {
    a: Option<i32>,
    b: Option<i32>,
}

/// Promise (client.md, "Types": "a composite is never read in its old field order", also
/// after an `ALTER TYPE` rolled back; `a_rolled_back_alter_type_never_swaps_fields` holds it
/// for a guard rolled back or dropped), for a `rollback()` leaked while it settles: the
/// connection then holds the guard's rollback (`guard_ending`) until the next request, and a
/// statement the caller holds, prepared by the altered definition, must not be read by it
/// once that rollback ran.
///
/// Steps: `lpair` is `(a int4, b int4)`, `lp` holds `(1, 2)`. For a transaction and for a
/// savepoint in one: `ALTER TYPE lpair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4` (now `(b, a)`),
/// prepare `SELECT p FROM lp` (by the new definition), drop a slow call with its reply owed,
/// poll the guard's `rollback()` once (it settles) and leak it. Then run the held statement
/// (through the enclosing transaction for the savepoint): the server sends `(1, 2)` in the
/// old order, so it must read `a = 1, b = 2` or be refused.
///
/// Before the fix: the rollback was deferred only when the next request started, after the
/// held statement's types were judged current: it read `a = 2, b = 1`, with no error.
#[tokio::test]
async fn a_leaked_rollback_of_an_alter_type_never_swaps_a_held_statements_fields() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TYPE lpair AS (a int4, b int4); CREATE TABLE lp (p lpair);
         INSERT INTO lp VALUES (ROW(1, 2))",
    )
    .await
    .unwrap();
    let truth = LPair {
        a: Some(1),
        b: Some(2),
    };
    let alter = "ALTER TYPE lpair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4";
    for in_savepoint in [false, true] {
        let what = if in_savepoint {
            "savepoint"
        } else {
            "transaction"
        };
        let mut tx = c.transaction().await.unwrap();
        let read = if in_savepoint {
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.batch_execute(alter).await.unwrap();
            let held = sp.prepare("SELECT p FROM lp").await.unwrap();
            leave_a_slow_reply_owed(&mut sp).await;
            let mut rollback = Box::pin(sp.rollback());
            assert!(poll_once(rollback.as_mut()), "rollback() settles first");
            std::mem::forget(rollback);
            let read = bounded(what, tx.query_one(&held, &[])).await;
            tx.rollback().await.unwrap();
            read
        } else {
            tx.batch_execute(alter).await.unwrap();
            let held = tx.prepare("SELECT p FROM lp").await.unwrap();
            leave_a_slow_reply_owed(&mut tx).await;
            let mut rollback = Box::pin(tx.rollback());
            assert!(poll_once(rollback.as_mut()), "rollback() settles first");
            std::mem::forget(rollback);
            bounded(what, c.query_one(&held, &[])).await
        };
        if let Ok(row) = read
            && let Ok(v) = row.get::<_, LPair>(0)
        {
            assert_eq!(
                v, truth,
                "{what}: a held statement read the rolled-back definition's field order"
            );
        }
        let now: LPair = super::scalar(&mut c, "SELECT p FROM lp").await;
        assert_eq!(now, truth, "{what}: a fresh read");
    }
}

/// Promise (client.md, "Types": after an `ALTER TYPE` run on the connection, "a composite is
/// never read in its old field order"), when the `ALTER TYPE` was a call dropped (a timeout,
/// `select!`) or leaked after it was sent: its command tag, which makes the client forget the
/// type, is read only when the next request settles it. A statement the caller holds must not
/// be judged current by the definition from before.
///
/// Steps: `lpair3` is `(a int4, b int4)`, `lp3` holds `(1, 2)`; prepare `SELECT p FROM lp3`
/// and read it once. `batch_execute("ALTER TYPE lpair3 DROP ATTRIBUTE a, ADD ATTRIBUTE a
/// int4")` is polled once and dropped (or leaked); the server now sends `(b = 2, a = NULL)`.
/// Run the held statement (by `query_one`, and, after a dropped `ALTER`, by `query_stream`):
/// it must read `a = NULL, b = 2`, or be refused.
///
/// Before the fix: the held statement's types were judged before its request settled the
/// dropped call's reply: it read `a = 2, b = NULL`, with no error.
#[tokio::test]
async fn a_dropped_or_leaked_alter_type_never_swaps_a_held_statements_fields() {
    #[derive(Debug, Clone, PartialEq, postgres_types::FromSql)]
    #[postgres(name = "lpair3")]
    struct LPair3 {
        a: Option<i32>,
        b: Option<i32>,
    }
    let (_cluster, mut c) = super::setup().await;
    for (leak, stream) in [(false, false), (true, false), (false, true)] {
        c.batch_execute(
            "DROP TABLE IF EXISTS lp3; DROP TYPE IF EXISTS lpair3;
             CREATE TYPE lpair3 AS (a int4, b int4); CREATE TABLE lp3 (p lpair3);
             INSERT INTO lp3 VALUES (ROW(1, 2))",
        )
        .await
        .unwrap();
        let held = c.prepare("SELECT p FROM lp3").await.unwrap();
        let before = c.query_one(&held, &[]).await.unwrap();
        assert_eq!(
            before.get::<_, LPair3>(0).unwrap(),
            LPair3 {
                a: Some(1),
                b: Some(2)
            }
        );
        let mut alter =
            Box::pin(c.batch_execute("ALTER TYPE lpair3 DROP ATTRIBUTE a, ADD ATTRIBUTE a int4"));
        assert!(
            poll_once(alter.as_mut()),
            "the ALTER cannot be answered yet"
        );
        if leak {
            std::mem::forget(alter);
        } else {
            drop(alter);
        }
        let read = if stream {
            bounded("the held statement, streamed", async {
                let mut rows = c.query_stream(&held, &[]).await?;
                let row = rows.next().await?;
                while rows.next().await?.is_some() {}
                Ok::<_, slipstream_pg::Error>(row.expect("lp3 has a row"))
            })
            .await
        } else {
            bounded("the held statement", c.query_one(&held, &[])).await
        };
        if let Ok(row) = read
            && let Ok(v) = row.get::<_, LPair3>(0)
        {
            assert_eq!(
                v,
                LPair3 {
                    a: None,
                    b: Some(2)
                },
                "leak {leak}, stream {stream}: a held statement read the altered type by its old \
                 field order"
            );
        }
    }
}

/// Inserts `x` into `t` through `c` by a request of kind `kind`: a statement, simple-protocol
/// SQL, a pipeline block, a COPY, a row stream.
async fn insert_by(c: &mut Client, kind: &str, x: i32) {
    match kind {
        "query" => {
            c.execute("INSERT INTO t VALUES ($1)", &[&x]).await.unwrap();
        }
        "simple" => c
            .batch_execute(&format!("INSERT INTO t VALUES ({x})"))
            .await
            .unwrap(),
        "pipeline" => {
            let mut p = c.pipeline();
            p.execute("INSERT INTO t VALUES ($1)", &[&x]).await.unwrap();
            for r in p.end().await {
                r.unwrap();
            }
        }
        "copy" => {
            let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
            copy.write(format!("{x}\n").as_bytes()).await.unwrap();
            copy.finish().await.unwrap();
        }
        "stream" => {
            let mut rows = c
                .query_stream("INSERT INTO t VALUES ($1) RETURNING x", &[&x])
                .await
                .unwrap();
            while rows.next().await.unwrap().is_some() {}
        }
        _ => unreachable!("{kind}"),
    }
}

/// Held. Promise (client.md, "Cancellation and timeouts": a `commit()` or `rollback()` leaked
/// while it settles leaves its rollback to the next request; "an enclosing guard's end runs a
/// deeper guard's leftover rollback first"), for a next request of every kind made through
/// the enclosing guard, and for that guard's own `Drop`: the leaked savepoint's work is never
/// kept, the enclosing transaction's work (before and after the leak) is kept by its commit,
/// and the rollback never runs at the enclosing transaction's depth.
///
/// Steps, for each kind (a statement, simple SQL, a pipeline block, a COPY, a row stream, a
/// nested savepoint, or none and the transaction dropped): a transaction inserts 1; savepoint
/// `s` inserts -1; a slow call is dropped with its reply owed; `s.commit()` (and, second
/// round, `s.rollback()`) is polled once and leaked; the transaction inserts 2 by that kind
/// and commits (or, for none, is dropped). Another session must see `[1, 2]` (none: `[]`).
#[tokio::test]
async fn a_leaked_savepoint_ending_is_rolled_back_before_a_request_of_every_kind() {
    let (cluster, mut c) = super::setup().await;
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let kinds = [
        "query",
        "simple",
        "pipeline",
        "copy",
        "stream",
        "savepoint",
        "drop",
    ];
    for commit in [true, false] {
        for kind in kinds {
            c.batch_execute("TRUNCATE t").await.unwrap();
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
            {
                let mut sp = tx.savepoint("s").await.unwrap();
                sp.execute("INSERT INTO t VALUES (-1)", &[]).await.unwrap();
                leave_a_slow_reply_owed(&mut sp).await;
                if commit {
                    let mut end = Box::pin(sp.commit());
                    assert!(poll_once(end.as_mut()), "commit() settles first");
                    std::mem::forget(end);
                } else {
                    let mut end = Box::pin(sp.rollback());
                    assert!(poll_once(end.as_mut()), "rollback() settles first");
                    std::mem::forget(end);
                }
            }
            if kind == "drop" {
                drop(tx);
            } else if kind == "savepoint" {
                // Through the enclosing guard: a savepoint of it, committed.
                let mut sp = bounded(kind, tx.savepoint("again")).await.unwrap();
                sp.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
                sp.commit().await.unwrap();
                bounded(kind, tx.commit()).await.unwrap();
            } else {
                bounded(kind, insert_by(&mut tx, kind, 2)).await;
                bounded(kind, tx.commit())
                    .await
                    .unwrap_or_else(|e| panic!("{kind} (commit {commit}): {e}"));
            }
            let seen = super::ints(&mut watcher, "SELECT x FROM t ORDER BY x").await;
            let want: &[i32] = if kind == "drop" { &[] } else { &[1, 2] };
            assert_eq!(
                seen,
                want,
                "savepoint {} leaked, then {kind}: what committed",
                if commit { "commit()" } else { "rollback()" }
            );
            assert_eq!(
                c.query_one("SELECT 3", &[])
                    .await
                    .unwrap()
                    .get::<_, i32>(0)
                    .unwrap(),
                3
            );
            assert_eq!(
                c.transaction_status(),
                slipstream_pg::TransactionStatus::Idle
            );
        }
    }
}

/// Held. Promise (client.md, "Cancellation and timeouts": a leaked `commit()` never commits
/// what the caller gave up and never hangs the next call; errors name what failed), when the
/// next request fails: the backend is terminated from another session while the leaked
/// `commit()`'s rollback waits for that request, or the request itself times out
/// (`statement_timeout`).
///
/// Steps: a transaction inserts -1 (and sets a local `statement_timeout` of 200 ms); a slow
/// call is dropped with its reply owed; `commit()` is polled once and leaked. Then either
/// another session runs `pg_terminate_backend` on it and the client runs `SELECT 1` (it must
/// fail within 10 s, the connection broken, naming the server's termination or the closed
/// connection), or the client runs `SELECT pg_sleep(1)` (it must answer, in autocommit after
/// the leaked transaction's rollback, without the timeout of the rolled-back `SET LOCAL`).
/// Another session must never see -1.
#[tokio::test]
async fn a_leaked_commit_whose_next_request_fails_commits_nothing() {
    let (cluster, mut c) = super::setup().await;
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for kill in [true, false] {
        let mut tx = c.transaction().await.unwrap();
        tx.batch_execute("INSERT INTO t VALUES (-1); SET LOCAL statement_timeout = 200")
            .await
            .unwrap();
        leave_a_slow_reply_owed(&mut tx).await;
        let mut end = Box::pin(tx.commit());
        assert!(poll_once(end.as_mut()), "commit() settles first");
        std::mem::forget(end);
        if kill {
            let pid = c.backend_pid();
            watcher
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
            let e = bounded("SELECT 1 after the kill", c.query_one("SELECT 1", &[]))
                .await
                .expect_err("the backend was terminated");
            assert!(
                c.is_broken(),
                "kill: the connection is not marked broken: {e}"
            );
            let text = e.to_string();
            assert!(
                text.contains("terminat") || text.contains("closed"),
                "kill: the error does not say the server ended the session: {text}"
            );
            c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        } else {
            let row = bounded("pg_sleep(1)", c.query_one("SELECT pg_sleep(1)::text", &[]))
                .await
                .unwrap_or_else(|e| {
                    panic!("the rolled-back SET LOCAL statement_timeout still applied: {e}")
                });
            assert_eq!(row.get::<_, &str>(0).unwrap(), "");
            assert_eq!(
                c.transaction_status(),
                slipstream_pg::TransactionStatus::Idle
            );
        }
        let kept = super::ints(&mut watcher, "SELECT x FROM t").await;
        assert!(kept.is_empty(), "kill {kill}: kept {kept:?}");
    }
}
