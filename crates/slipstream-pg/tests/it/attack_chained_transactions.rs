//! Attacks on a transaction guard whose transaction SQL ended and another began (helper h70):
//! client.md "Transactions" promises that "a transaction already ended by SQL the guard did
//! not send (a `COMMIT`, `ROLLBACK` or `PREPARE TRANSACTION` sent as a statement, or a
//! pipeline's `commit()`/`rollback()` inside it) makes `commit()` and `rollback()` fail with
//! `ErrorKind::Usage`, a savepoint guard's too (naming the savepoint)". The guard checked only
//! that the session was idle, so an end followed at once by a new transaction (`COMMIT AND
//! CHAIN`, `COMMIT; BEGIN`, a pipeline's `commit()` then `BEGIN`) passed the check, and the
//! guard ended the new transaction instead, reporting it as its own.

use slipstream_pg::{Client, ErrorKind, TransactionStatus};

async fn stored(c: &mut Client) -> Vec<i32> {
    super::ints(c, "SELECT a FROM ct ORDER BY a").await
}

/// Steps: in a guard, insert 1, run `COMMIT AND CHAIN` as SQL, insert 2, `rollback()`. Then
/// the same with `COMMIT` and `BEGIN` run as two statements, and with a pipeline's `commit()`
/// followed by `BEGIN` and the guard's `commit()`. Each end must be refused with a `Usage`
/// error, the work before the SQL `COMMIT` is as it left it (committed), the transaction
/// begun after it is not left open, and nothing of it is committed by the refused call.
///
/// Before the fix: `rollback()` returned `Ok(())` after `COMMIT AND CHAIN` although row 1 was
/// committed (it rolled back only the chained transaction), and the pipeline case's
/// `commit()` returned `Ok(())`, committing row 6 in a transaction the guard never began.
#[tokio::test]
async fn break_an_sql_commit_followed_by_a_new_transaction_is_not_noticed_by_the_guard() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE ct (a int)").await.unwrap();

    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO ct VALUES (1)", &[]).await.unwrap();
    tx.batch_execute("COMMIT AND CHAIN").await.unwrap();
    tx.execute("INSERT INTO ct VALUES (2)", &[]).await.unwrap();
    let e = tx
        .rollback()
        .await
        .expect_err("rollback after COMMIT AND CHAIN");
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("already ended"), "{e}");
    assert_eq!(stored(&mut c).await, [1]);
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);

    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO ct VALUES (3)", &[]).await.unwrap();
    tx.execute("COMMIT", &[]).await.unwrap();
    tx.execute("BEGIN", &[]).await.unwrap();
    tx.execute("INSERT INTO ct VALUES (4)", &[]).await.unwrap();
    let e = tx
        .rollback()
        .await
        .expect_err("rollback after COMMIT; BEGIN");
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(stored(&mut c).await, [1, 3]);
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);

    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO ct VALUES (5)", &[]).await.unwrap();
    {
        let mut p = tx.pipeline();
        p.commit().await.unwrap();
        p.execute("BEGIN", &[]).await.unwrap();
        let results = p.end().await;
        assert!(
            results.iter().all(|r| r.is_ok()),
            "{:?}",
            super::describe(&results)
        );
    }
    tx.execute("INSERT INTO ct VALUES (6)", &[]).await.unwrap();
    let e = tx
        .commit()
        .await
        .expect_err("commit after a pipelined COMMIT and BEGIN");
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(
        stored(&mut c).await,
        [1, 3, 5],
        "the refused commit committed"
    );
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
}

/// Steps: a savepoint guard inside a transaction guard; insert 7 in it, run `COMMIT AND
/// CHAIN` as SQL, then `rollback()` the savepoint and the transaction. The savepoint's
/// transaction ended, so both must be refused as `Usage` (the savepoint's naming it), and row
/// 7 stays committed.
///
/// Before the fix: the savepoint's rollback failed with the server's 3B001, explained as "a
/// RELEASE SAVEPOINT, or a ROLLBACK TO an earlier savepoint, sent as SQL ended it" (neither
/// happened), and the transaction's `rollback()` returned `Ok(())` with row 7 committed.
#[tokio::test]
async fn break_a_savepoint_guard_blames_a_release_for_an_sql_commit_and_chain() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE ct (a int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    {
        let mut sp = tx.savepoint("s").await.unwrap();
        sp.execute("INSERT INTO ct VALUES (7)", &[]).await.unwrap();
        sp.batch_execute("COMMIT AND CHAIN").await.unwrap();
        let e = sp.rollback().await.expect_err("savepoint rollback");
        assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
        assert!(e.to_string().contains("savepoint \"s\""), "{e}");
    }
    let e = tx.rollback().await.expect_err("transaction rollback");
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert_eq!(stored(&mut c).await, [7]);
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
}

/// Steps: as in the first test, a guard whose block `COMMIT AND CHAIN` ended, with row `k`
/// inserted before it and row `k + 1000` after it; its `commit()` (then its `rollback()`)
/// dropped after 1, 2, ... polls until one completes. Whatever the poll, the chained block is
/// rolled back (by the refused call, or by the dropped guard with the next request), the
/// connection ends idle, and only the rows before the `COMMIT AND CHAIN` are kept. Holds.
#[tokio::test]
async fn holds_a_refused_end_dropped_at_every_poll_leaves_no_transaction() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE ct (a int)").await.unwrap();
    let mut expected = Vec::new();
    for rollback in [false, true] {
        for polls in 1..=50 {
            let k = expected.len() as i32 + 1;
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO ct VALUES ($1)", &[&k])
                .await
                .unwrap();
            tx.batch_execute("COMMIT AND CHAIN").await.unwrap();
            tx.execute("INSERT INTO ct VALUES ($1)", &[&(k + 1000)])
                .await
                .unwrap();
            expected.push(k);
            let end = async move {
                if rollback {
                    tx.rollback().await
                } else {
                    tx.commit().await
                }
            };
            let outcome =
                super::engine::bounded("end", super::engine::DropAfter::new(end, polls)).await;
            assert_eq!(
                stored(&mut c).await,
                expected,
                "rollback {rollback}, {polls} polls"
            );
            assert_eq!(c.transaction_status(), TransactionStatus::Idle);
            if let Some(result) = outcome {
                let e = result.expect_err("a refusal");
                assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
                // Dropped at poll 1, it was abandoned part-way: what this test is about.
                assert!(
                    polls > 1,
                    "completed at its first poll: nothing was dropped"
                );
                eprintln!(
                    "rollback {rollback}: dropped after 1..{} polls, completed at {polls}",
                    polls - 1
                );
                break;
            }
        }
    }
}

/// Steps: in a guard, insert 8; a pipeline whose `rollback()` ends the block, then `BEGIN`;
/// insert 9; the guard's `commit()`. Then the same with the pipeline's `commit()` of the block
/// after a failed statement, which the server answers `ROLLBACK`. The pipeline sent a plain
/// `ROLLBACK` (or `COMMIT`) itself, so the client knows the block ended even though the tag is
/// `ROLLBACK`: the guard's `commit()` must be refused, and neither 8 nor 9 kept.
///
/// Before the fix: `commit()` returned `Ok(())` and committed row 9, in a transaction the
/// guard never began, after the pipeline had rolled back row 8 (the connection counted only
/// `COMMIT` tags, and `ROLLBACK` is also `ROLLBACK TO SAVEPOINT`'s).
#[tokio::test]
async fn break_a_pipelines_rollback_then_begin_is_not_noticed_by_the_guard() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE ct (a int)").await.unwrap();
    for failed_first in [false, true] {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO ct VALUES (8)", &[]).await.unwrap();
        if failed_first {
            tx.execute("SELECT 1/0", &[]).await.unwrap_err();
        }
        {
            let mut p = tx.pipeline_with(super::continue_on_error());
            if failed_first {
                p.commit().await.unwrap();
            } else {
                p.rollback().await.unwrap();
            }
            p.execute("BEGIN", &[]).await.unwrap();
            let results = p.end().await;
            assert!(
                results[1].is_ok(),
                "{failed_first}: {:?}",
                super::describe(&results)
            );
        }
        tx.execute("INSERT INTO ct VALUES (9)", &[]).await.unwrap();
        let e = tx
            .commit()
            .await
            .expect_err("commit after the pipeline ended the block");
        assert_eq!(e.kind(), ErrorKind::Usage, "{failed_first}: {e}");
        assert_eq!(stored(&mut c).await, Vec::<i32>::new(), "{failed_first}");
        assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    }
}
