//! Attacks on the promises client.md "Transactions" and "Cancellation and timeouts" make about
//! transaction and savepoint guards (helper-57, session 46): futures dropped at each await
//! point of `transaction()`, `savepoint()`, `commit()` and `rollback()`, nested guards, and a
//! connection handed back mid-transaction. Each test checks what the server kept, not only
//! what the client reported.

use slipstream_pg::{Client, ErrorKind, SqlState, TransactionStatus};

use super::engine::{DropAfter, bounded};
use super::ints;

/// More steps than any call here takes; reaching it fails the test.
const MAX_POLLS: usize = 200;

/// Promise (client.md "Transactions": `sp.rollback()` "undoes only the savepoint", i.e. all of
/// it; a `savepoint()` future dropped after its `SAVEPOINT` ran "does no harm ... work done
/// after the drop is kept or undone with the enclosing transaction, as without the
/// savepoint"). Nested guards may share a name (a recursive helper that opens
/// `savepoint("retry")` at each level): while every guard lives, each `RELEASE`/`ROLLBACK TO`
/// finds its own. A nested `savepoint("s")` future dropped inside guard `s` must not make
/// guard `s`'s rollback stop short.
///
/// Steps: for k = 1, 2, ...: a transaction inserts k; guard `s` inserts -k; its
/// `savepoint("s")` future is dropped after k polls (or completes, and its guard is dropped);
/// guard `s` inserts -1000 - k and rolls back; the transaction commits. No negative row may
/// be kept.
#[tokio::test]
async fn a_savepoint_future_dropped_inside_a_same_named_guard_does_not_cut_its_rollback_short() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut completed = false;
    for k in 1..=MAX_POLLS as i32 {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES ($1)", &[&k])
            .await
            .unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES ($1)", &[&-k])
                .await
                .unwrap();
            let inner = bounded("savepoint", DropAfter::new(sp.savepoint("s"), k as usize)).await;
            completed = inner.is_some();
            drop(inner);
            sp.execute("INSERT INTO t VALUES ($1)", &[&(-1000 - k)])
                .await
                .unwrap();
            bounded("rollback", sp.rollback())
                .await
                .unwrap_or_else(|e| panic!("poll {k}: the savepoint's rollback failed: {e}"));
        }
        assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
        bounded("commit", tx.commit()).await.unwrap();
        let kept = ints(&mut c, "SELECT x FROM t WHERE x < 0 ORDER BY x").await;
        assert_eq!(
            kept, [0i32; 0],
            "dropped after {k} polls: guard s's rollback reported success, and this work of it \
             was committed"
        );
        if completed {
            break;
        }
    }
    assert!(
        completed,
        "savepoint() never completed within {MAX_POLLS} polls"
    );
}

/// Holds. Follows `a_savepoint_future_dropped_inside_a_same_named_guard_does_not_cut_its_rollback_short`,
/// whose fix releases the savepoint of a dropped `savepoint()` future with the next request:
/// in a failed transaction the server refuses both the `SAVEPOINT` and that `RELEASE`, and
/// neither may touch the enclosing guard of the same name or be blamed for the failure.
///
/// Steps: for k = 1, 2, ...: a transaction inserts k; guard `s` inserts -k, then a statement
/// in it fails; its `savepoint("s")` future is dropped after k polls; the next statement's
/// error must be the caller's own 25P02 (no dropped guard named); guard `s`'s rollback must
/// recover the transaction, which then commits k alone.
#[tokio::test]
async fn holds_a_savepoint_future_dropped_in_a_failed_savepoint_leaves_its_guard_to_recover() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut completed = false;
    for k in 1..=MAX_POLLS as i32 {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES ($1)", &[&k])
            .await
            .unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES ($1)", &[&-k])
                .await
                .unwrap();
            sp.execute("SELECT 1/0", &[]).await.unwrap_err();
            let inner = bounded("savepoint", DropAfter::new(sp.savepoint("s"), k as usize))
                .await
                .map(|r| r.err().and_then(|e| e.code()));
            completed = inner.is_some();
            if let Some(code) = inner {
                // Refused: a savepoint cannot be opened in a failed transaction.
                assert_eq!(code, Some(SqlState::IN_FAILED_SQL_TRANSACTION), "poll {k}");
            }
            let e = sp.execute("SELECT 1", &[]).await.unwrap_err();
            assert_eq!(e.code(), Some(SqlState::IN_FAILED_SQL_TRANSACTION), "{e}");
            assert!(!e.to_string().contains("dropped"), "poll {k}: {e}");
            bounded("rollback", sp.rollback())
                .await
                .unwrap_or_else(|e| panic!("poll {k}: the savepoint's rollback failed: {e}"));
        }
        assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
        bounded("commit", tx.commit())
            .await
            .unwrap_or_else(|e| panic!("poll {k}: {e}"));
        if completed {
            break;
        }
    }
    assert!(
        completed,
        "savepoint() never completed within {MAX_POLLS} polls"
    );
    let kept = ints(&mut c, "SELECT x FROM t WHERE x < 0").await;
    assert_eq!(kept, [0i32; 0]);
}

/// Promise (pipelining.md: a pipeline dropped part-way "inside your own `BEGIN`, the abandoned
/// block fails that transaction and its `COMMIT` reports the rollback"; client.md "Errors":
/// errors name what failed and what to do). The block is failed on purpose, by an error the
/// caller never sees: what the caller is told next must say so, not blame a statement.
///
/// Steps: a transaction inserts 1; an abort-mode block inserts 2 (processed, so the block
/// reached the server) and queues 3, and is dropped before `end()`; the next statement must
/// be the server's 25P02 naming the dropped block and saying to roll back; the commit must be
/// an `Aborted` error naming it; nothing is kept.
///
/// Before the fix: `error 25P02: current transaction is aborted, commands ignored until end
/// of transaction block`, then "COMMIT rolled the transaction back because a statement in it
/// had failed", while every statement the caller saw had succeeded.
#[tokio::test]
async fn a_pipeline_block_dropped_part_way_in_a_transaction_is_named_by_what_follows() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    {
        let mut p = tx.pipeline();
        let first = p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        assert_eq!(bounded("process", p.process(&first)).await.unwrap(), 1);
        p.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    }
    let e = bounded("execute", tx.execute("SELECT 1", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(SqlState::IN_FAILED_SQL_TRANSACTION), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("pipeline block") && text.contains("roll the transaction back"),
        "{text}"
    );
    let e = bounded("commit", tx.commit()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(e.to_string().contains("pipeline block"), "{e}");
    assert_eq!(ints(&mut c, "SELECT x FROM t").await, [0i32; 0]);

    // Outside a transaction block the abandoned block's own implicit transaction ends with
    // it: nothing is noted, and a later transaction's failure is its own.
    {
        let mut p = c.pipeline();
        let first = p.execute("INSERT INTO t VALUES (4)", &[]).await.unwrap();
        bounded("process", p.process(&first)).await.unwrap();
        p.execute("INSERT INTO t VALUES (5)", &[]).await.unwrap();
    }
    let mut tx = c.transaction().await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = tx.execute("SELECT 1", &[]).await.unwrap_err();
    assert!(!e.to_string().contains("pipeline block"), "{e}");
    tx.rollback().await.unwrap();
    assert_eq!(ints(&mut c, "SELECT x FROM t").await, [0i32; 0]);
}

/// A call dropped after its first poll, its reply still owed: the next call must settle
/// (read it) before it writes, so a future dropped at its first polls is dropped there.
async fn leave_a_reply_owed(c: &mut Client) {
    let _ = DropAfter::new(c.execute("SELECT 1", &[]), 1).await;
}

/// Holds. Promise (client.md "Transactions": a guard dropped without `commit`/`rollback` is
/// rolled back with the next request; "Cancellation and timeouts": every future can be
/// dropped part-way). A `rollback()` future dropped at any poll either has its rollback
/// queued or leaves it to the guard's drop: the work is undone either way, never kept.
/// `tests/it/cancellation.rs` checks the connection is idle and in step afterwards, not what
/// the server kept.
///
/// Steps: for k = 1, 2, ...: (a) a transaction inserts -k, a savepoint inserts -1000 - k, a
/// call is dropped with its reply owed (so the rollback settles first, and a drop there
/// leaves the rollback to the guard's `Drop`), and the savepoint's `rollback()` is dropped
/// after k polls; the transaction must still be open, insert k and
/// commit; (b) the same for a transaction's own `rollback()`, its insert -2000 - k. No negative row may be kept but the transactions' own -k.
#[tokio::test]
async fn holds_a_rollback_dropped_at_every_poll_still_undoes_the_work() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut done = [false, false];
    for k in 1..=MAX_POLLS as i32 {
        if !done[0] {
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO t VALUES ($1)", &[&-k])
                .await
                .unwrap();
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES ($1)", &[&(-1000 - k)])
                .await
                .unwrap();
            leave_a_reply_owed(&mut sp).await;
            let outcome = bounded("rollback", DropAfter::new(sp.rollback(), k as usize)).await;
            tx.execute("INSERT INTO t VALUES ($1)", &[&k])
                .await
                .unwrap();
            assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
            bounded("commit", tx.commit()).await.unwrap();
            if let Some(r) = outcome {
                r.unwrap();
                done[0] = true;
            }
        }
        if !done[1] {
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO t VALUES ($1)", &[&(-2000 - k)])
                .await
                .unwrap();
            leave_a_reply_owed(&mut tx).await;
            let outcome = bounded("rollback", DropAfter::new(tx.rollback(), k as usize)).await;
            assert_eq!(
                super::scalar::<i32>(&mut c, "SELECT 1").await,
                1,
                "poll {k}: the next call"
            );
            assert_eq!(c.transaction_status(), TransactionStatus::Idle);
            if let Some(r) = outcome {
                r.unwrap();
                done[1] = true;
            }
        }
        let undone = ints(&mut c, "SELECT x FROM t WHERE x <= -1000").await;
        assert_eq!(
            undone, [0i32; 0],
            "dropped after {k} polls: rolled-back work kept"
        );
        if done == [true, true] {
            assert!(k > 1, "completed at the first poll: nothing was dropped");
            break;
        }
    }
    assert_eq!(
        done,
        [true, true],
        "never completed within {MAX_POLLS} polls"
    );
}
