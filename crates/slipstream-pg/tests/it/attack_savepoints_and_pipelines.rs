//! Attacks on transactions, savepoints and pipelines used together (helper-53, session 45):
//! client.md "Transactions", "Cancellation and timeouts", "Errors" and "Notifications", and
//! pipelining.md's table of what a failure does inside `BEGIN`. Each test checks the outcome
//! against what the server kept, never only against what the client reported.

use slipstream_pg::{Client, ErrorKind, Output, PipelineMode, PipelineOptions, SqlState};
use slipstream_pg::{Error, TransactionStatus};

use super::engine::{DropAfter, bounded};
use super::{describe, ints};

/// More steps than any call here takes; reaching it fails the test.
const MAX_POLLS: usize = 200;

/// Promise (client.md "Errors", the `DbError` docs): an error's `Display` shows the server's
/// error as libpq's default verbosity does, context included: where in a PL/pgSQL function
/// the error happened. A user reading a logged `{e}` must be able to find the function and
/// line.
///
/// Steps: a function `inner()` that divides by zero on its third line, called from `outer()`;
/// run `SELECT outer()`; the error's text must name both functions and the line, on one line.
/// A notice's text leaves its context out (libpq's default shows it for errors only).
///
/// Before the fix: the text was `error 22012: division by zero`, the same as a bare
/// `SELECT 1/0`: `DbError::where_` held the context, but nothing printed it.
#[tokio::test]
async fn an_error_raised_in_a_function_says_where_in_its_display() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE FUNCTION inner_f(d int) RETURNS int LANGUAGE plpgsql AS $$
         BEGIN
           RETURN 1 / d;
         END $$;
         CREATE FUNCTION outer_f() RETURNS int LANGUAGE plpgsql AS $$
         BEGIN
           RETURN inner_f(0);
         END $$;",
    )
    .await
    .unwrap();
    let e = c.query_one("SELECT outer_f()", &[]).await.unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code(), SqlState::DIVISION_BY_ZERO);
    let where_ = db.where_().expect("the server sent a context");
    let text = e.to_string();
    for frame in where_.lines() {
        assert!(
            text.contains(frame),
            "the error's text leaves out the context frame {frame:?}: {text}"
        );
    }
    assert!(
        text.contains("inner_f(integer) line 3") && text.contains("outer_f()"),
        "the error's text does not say where the error happened: {text}"
    );
    assert!(!text.contains('\n'), "one line in a log: {text:?}");

    // A plain statement's error has no context, and says nothing more.
    let e = c.query_one("SELECT 1/0", &[]).await.unwrap_err();
    assert!(e.as_db_error().unwrap().where_().is_none());
    assert!(!e.to_string().contains("context"), "{e}");

    // A notice's context is left out, as libpq does by default: every RAISE has one.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    c.set_notice_handler(move |n| {
        let has_context = n.where_().is_some();
        sink.lock().unwrap().push((has_context, n.to_string()));
    });
    c.batch_execute("DO $$ BEGIN RAISE NOTICE 'hello'; END $$")
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].0, "the server sent the notice's context");
    assert!(!seen[0].1.contains("context"), "{:?}", seen[0].1);
}

/// Holds. Promise (client.md "Transactions"; pipelining.md, "inside `BEGIN`"): a savepoint in
/// which a statement failed is rolled back by its `commit()`, with an `Aborted` error naming
/// it, and the enclosing transaction goes on. Here the failure came from a pipeline run inside
/// the savepoint, in each mode.
///
/// Steps: for each mode, in a transaction that inserted 1, open savepoint `s`; run a block
/// `INSERT 2; INSERT 1/0; INSERT 3` through it; `commit()` the savepoint; insert 4 in the
/// transaction and commit it. Only 1 and 4 must be in the table.
#[tokio::test]
async fn holds_a_savepoint_committed_after_its_pipeline_failed_rolls_back_to_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for mode in [PipelineMode::AbortOnError, PipelineMode::ContinueOnError] {
        c.batch_execute("TRUNCATE t").await.unwrap();
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            let mut p = sp.pipeline_with(PipelineOptions::new().mode(mode));
            p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
            let bad = p.execute("INSERT INTO t VALUES (1/0)", &[]).await.unwrap();
            let after = p.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
            let results = bounded("end", p.end()).await;
            let seen = describe(&results);
            let e = results[bad.id() as usize].as_ref().unwrap_err();
            assert_eq!(
                e.code(),
                Some(SqlState::DIVISION_BY_ZERO),
                "{mode:?}: {seen:#?}"
            );
            assert!(results[after.id() as usize].is_err(), "{mode:?}: {seen:#?}");
            assert_eq!(
                sp.transaction_status(),
                TransactionStatus::Failed,
                "{mode:?}"
            );
            let e = bounded("savepoint commit", sp.commit()).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Aborted, "{mode:?}: {e}");
            assert!(e.to_string().contains("\"s\""), "{mode:?}: {e}");
        }
        assert_eq!(
            tx.transaction_status(),
            TransactionStatus::InTransaction,
            "{mode:?}: the enclosing transaction goes on"
        );
        tx.execute("INSERT INTO t VALUES (4)", &[]).await.unwrap();
        bounded("commit", tx.commit()).await.unwrap();
        assert_eq!(
            ints(&mut c, "SELECT x FROM t ORDER BY x").await,
            [1, 4],
            "{mode:?}"
        );
    }
}

/// Holds. Promise (client.md "Transactions", `Transaction::commit`/`rollback` and `Drop`):
/// savepoints nest; each guard's `commit` releases, `rollback` undoes only its own work and
/// what was nested in it, a failure at any depth is rolled back by that depth's `commit` (an
/// `Aborted` error) and the levels above go on, and a guard dropped without either is rolled
/// back with the next request.
///
/// Steps: three levels of `tx.transaction()` (`sp_1` .. `sp_3`), each inserting its depth
/// times 10 plus a case number; a failure at depth 3, 2 and 1 in turn (after the deeper levels
/// committed), inner guards dropped, and an outer rollback. The table must hold exactly the
/// work of the levels that were committed up to the top.
#[tokio::test]
async fn holds_three_deep_savepoints_fail_commit_and_drop_at_each_depth() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();

    async fn insert(c: &mut Client, x: i32) {
        c.execute("INSERT INTO t VALUES ($1)", &[&x]).await.unwrap();
    }
    async fn fail(c: &mut Client) {
        let e = c
            .execute("INSERT INTO t VALUES (1/0)", &[])
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(SqlState::DIVISION_BY_ZERO), "{e}");
    }
    fn aborted(r: Result<(), Error>, name: &str) {
        let e = r.expect_err("a failed savepoint's commit is an error");
        assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
        assert!(e.to_string().contains(name), "names {name}: {e}");
    }

    // Case 1: failure at depth 3; 2 and 1 commit.
    {
        let mut tx = c.transaction().await.unwrap();
        insert(&mut tx, 1).await;
        let mut sp1 = tx.transaction().await.unwrap();
        insert(&mut sp1, 11).await;
        let mut sp2 = sp1.transaction().await.unwrap();
        insert(&mut sp2, 21).await;
        let mut sp3 = sp2.transaction().await.unwrap();
        insert(&mut sp3, 31).await;
        fail(&mut sp3).await;
        aborted(sp3.commit().await, "sp_3");
        insert(&mut sp2, 22).await;
        sp2.commit().await.unwrap();
        sp1.commit().await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(
        ints(&mut c, "SELECT x FROM t ORDER BY x").await,
        [1, 11, 21, 22]
    );

    // Case 2: depth 3 commits, then depth 2 fails: 3's released work goes with 2's.
    c.batch_execute("TRUNCATE t").await.unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        insert(&mut tx, 2).await;
        let mut sp1 = tx.transaction().await.unwrap();
        insert(&mut sp1, 12).await;
        let mut sp2 = sp1.transaction().await.unwrap();
        insert(&mut sp2, 22).await;
        let mut sp3 = sp2.transaction().await.unwrap();
        insert(&mut sp3, 32).await;
        sp3.commit().await.unwrap();
        fail(&mut sp2).await;
        aborted(sp2.commit().await, "sp_2");
        insert(&mut sp1, 13).await;
        sp1.commit().await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(
        ints(&mut c, "SELECT x FROM t ORDER BY x").await,
        [2, 12, 13]
    );

    // Case 3: 3 and 2 commit, then depth 1 fails: only the top level's work is kept.
    c.batch_execute("TRUNCATE t").await.unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        insert(&mut tx, 3).await;
        let mut sp1 = tx.transaction().await.unwrap();
        insert(&mut sp1, 13).await;
        let mut sp2 = sp1.transaction().await.unwrap();
        insert(&mut sp2, 23).await;
        let mut sp3 = sp2.transaction().await.unwrap();
        insert(&mut sp3, 33).await;
        sp3.commit().await.unwrap();
        sp2.commit().await.unwrap();
        fail(&mut sp1).await;
        aborted(sp1.commit().await, "sp_1");
        insert(&mut tx, 4).await;
        tx.commit().await.unwrap();
    }
    assert_eq!(ints(&mut c, "SELECT x FROM t ORDER BY x").await, [3, 4]);

    // Case 4: depth 3 fails and is dropped, depth 2 is dropped, depth 1 commits: the drops
    // roll back (innermost first) with the commit's request.
    c.batch_execute("TRUNCATE t").await.unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        insert(&mut tx, 5).await;
        let mut sp1 = tx.transaction().await.unwrap();
        insert(&mut sp1, 15).await;
        {
            let mut sp2 = sp1.transaction().await.unwrap();
            insert(&mut sp2, 25).await;
            {
                let mut sp3 = sp2.transaction().await.unwrap();
                insert(&mut sp3, 35).await;
                fail(&mut sp3).await;
            }
        }
        sp1.commit().await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_eq!(ints(&mut c, "SELECT x FROM t ORDER BY x").await, [5, 15]);

    // Case 5: everything committed inside, then the top rolls back: nothing is kept.
    c.batch_execute("TRUNCATE t").await.unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        insert(&mut tx, 6).await;
        let mut sp1 = tx.transaction().await.unwrap();
        let mut sp2 = sp1.transaction().await.unwrap();
        let mut sp3 = sp2.transaction().await.unwrap();
        insert(&mut sp3, 36).await;
        sp3.commit().await.unwrap();
        sp2.commit().await.unwrap();
        sp1.commit().await.unwrap();
        tx.rollback().await.unwrap();
    }
    assert_eq!(ints(&mut c, "SELECT x FROM t ORDER BY x").await, [0i32; 0]);
    assert!(c.is_reusable());
}

/// Holds. Promise (client.md "Cancellation and timeouts": a dropped future never
/// desynchronises the connection; "Transactions": a dropped guard is rolled back): a
/// `savepoint()` future dropped at any poll, also after its `SAVEPOINT` ran on the server but
/// before the guard was returned, leaves the enclosing transaction open and usable, and never
/// keeps work done inside the savepoint.
///
/// Steps: for k = 1, 2, ...: a transaction inserts k; a future opens savepoint `s`, inserts
/// -k in it and rolls it back, dropped after k polls; then the transaction must be open, a
/// fresh savepoint must roll back its own insert (1000 + k) only, and the commit keeps k. At
/// the end the table holds exactly 1..=k.
#[tokio::test]
async fn holds_a_savepoint_future_dropped_at_every_poll_leaves_the_transaction_whole() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut last = None;
    for k in 1..=MAX_POLLS as i32 {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES ($1)", &[&k])
            .await
            .unwrap();
        let outcome = bounded(
            "savepoint",
            DropAfter::new(
                async {
                    let mut sp = tx.savepoint("s").await?;
                    sp.execute("INSERT INTO t VALUES ($1)", &[&-k]).await?;
                    sp.rollback().await
                },
                k as usize,
            ),
        )
        .await;
        let status = bounded("settle", tx.settle()).await;
        status.unwrap_or_else(|e| panic!("poll {k}: settling failed: {e}"));
        assert_eq!(
            tx.transaction_status(),
            TransactionStatus::InTransaction,
            "poll {k}: the enclosing transaction must stay open"
        );
        {
            let mut sp = tx.savepoint("s2").await.unwrap();
            sp.execute("INSERT INTO t VALUES ($1)", &[&(1000 + k)])
                .await
                .unwrap();
            sp.rollback().await.unwrap();
        }
        bounded("commit", tx.commit())
            .await
            .unwrap_or_else(|e| panic!("poll {k}: commit failed: {e}"));
        if let Some(r) = outcome {
            r.unwrap();
            last = Some(k);
            break;
        }
    }
    let k = last.expect("the savepoint future never completed within MAX_POLLS polls");
    assert!(
        k > 1,
        "the future completed at its first poll: nothing was dropped"
    );
    assert_eq!(
        ints(&mut c, "SELECT x FROM t ORDER BY x").await,
        (1..=k).collect::<Vec<_>>(),
        "only the transactions' own inserts are kept"
    );
    assert!(c.is_reusable());
}

/// Holds. Promise (pipelining.md, "How this differs from Oracle": inside `BEGIN` "use
/// `SAVEPOINT`s in the pipeline if you need statement-level recovery"; the mode table: in
/// continue-on-error mode "later operations run").
///
/// Steps: in a `Transaction`, a continue-on-error block `INSERT 1; SAVEPOINT p; INSERT 1/0;
/// ROLLBACK TO SAVEPOINT p; INSERT 3`; then the guard commits. Each result must be what the
/// server did (only the division failed), and 1 and 3 must be kept.
#[tokio::test]
async fn holds_a_savepoint_in_a_continue_mode_block_recovers_inside_a_transaction() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    let mut p = tx.pipeline_with(super::continue_on_error());
    p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    p.execute("SAVEPOINT p", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (1/0)", &[]).await.unwrap();
    p.execute("ROLLBACK TO SAVEPOINT p", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    let seen = describe(&results);
    assert!(matches!(results[0], Ok(Output::Affected(1))), "{seen:#?}");
    assert!(results[1].is_ok(), "{seen:#?}");
    assert_eq!(
        results[2].as_ref().unwrap_err().code(),
        Some(SqlState::DIVISION_BY_ZERO),
        "{seen:#?}"
    );
    assert!(results[3].is_ok(), "{seen:#?}");
    assert!(matches!(results[4], Ok(Output::Affected(1))), "{seen:#?}");
    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    bounded("commit", tx.commit()).await.unwrap();
    assert_eq!(ints(&mut c, "SELECT x FROM t ORDER BY x").await, [1, 3]);
}

/// Holds. Promise (client.md "Notifications": PostgreSQL delivers notifications between
/// transactions, and a `LISTEN` starts at its commit; pipelining.md: an abort-mode block's
/// operations up to a sync point are one implicit transaction, rolled back whole by a failure).
///
/// Steps: (1) an abort-mode block `LISTEN ch; NOTIFY ch, 'one'; SELECT 1`: after `end()` the
/// notification must arrive. (2) An abort-mode block `LISTEN other; NOTIFY ch, 'two';
/// SELECT 1/0`: everything is rolled back, so no `two` arrives and `other` is not listened to
/// (a NOTIFY on it from another session stays unseen). (3) A continue-mode block `LISTEN
/// other; SELECT 1/0; NOTIFY ch, 'three'`: the LISTEN and the NOTIFY committed on their own.
#[tokio::test]
async fn holds_notifications_follow_a_pipelines_implicit_transactions() {
    let (cluster, mut c) = super::setup().await;
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();

    let mut p = c.pipeline();
    p.execute("LISTEN ch", &[]).await.unwrap();
    p.execute("NOTIFY ch, 'one'", &[]).await.unwrap();
    p.execute("SELECT 1", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    assert!(
        results.iter().all(Result::is_ok),
        "{:#?}",
        describe(&results)
    );
    let n = bounded("notification one", c.wait_for_notification())
        .await
        .unwrap();
    assert_eq!((n.channel(), n.payload()), ("ch", "one"));

    let mut p = c.pipeline();
    p.execute("LISTEN other", &[]).await.unwrap();
    p.execute("NOTIFY ch, 'two'", &[]).await.unwrap();
    p.execute("SELECT 1/0", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    assert!(
        results.iter().all(Result::is_err),
        "{:#?}",
        describe(&results)
    );
    other.batch_execute("NOTIFY other, 'unseen'").await.unwrap();
    // A NOTIFY committed by another session is sent before its COMMIT's reply; a round trip
    // after it here reads whatever this session was sent.
    other.batch_execute("NOTIFY ch, 'marker'").await.unwrap();
    let n = bounded("marker", c.wait_for_notification()).await.unwrap();
    assert_eq!(
        (n.channel(), n.payload()),
        ("ch", "marker"),
        "the rolled-back NOTIFY or LISTEN took effect"
    );
    c.query_one("SELECT 1", &[]).await.unwrap();
    let rest: Vec<_> = c
        .take_notifications()
        .iter()
        .map(|n| format!("{} {}", n.channel(), n.payload()))
        .collect();
    assert!(rest.is_empty(), "rolled back, yet delivered: {rest:?}");

    let mut p = c.pipeline_with(super::continue_on_error());
    p.execute("LISTEN other", &[]).await.unwrap();
    p.execute("SELECT 1/0", &[]).await.unwrap();
    p.execute("NOTIFY ch, 'three'", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    assert!(
        results[0].is_ok() && results[2].is_ok(),
        "{:#?}",
        describe(&results)
    );
    let n = bounded("notification three", c.wait_for_notification())
        .await
        .unwrap();
    assert_eq!((n.channel(), n.payload()), ("ch", "three"));
    other.batch_execute("NOTIFY other, 'seen'").await.unwrap();
    let n = bounded("notification seen", c.wait_for_notification())
        .await
        .unwrap();
    assert_eq!((n.channel(), n.payload()), ("other", "seen"));
}

/// Holds. Promise (statement-cache.md: `DISCARD ALL` run through any call empties the cache;
/// a `Statement` from `Client::prepare` lives until dropped; client.md: bad input gives a
/// clear error, never a desync): a held statement used after a `DISCARD ALL` sent in a block
/// fails with the server's "does not exist" and nothing else goes wrong: cached SQL is
/// prepared again, and the connection stays in step. Inside a transaction `DISCARD ALL` is
/// refused and the statement keeps working after the rollback.
#[tokio::test]
async fn holds_a_held_statement_after_discard_all_in_a_block_errors_clearly() {
    let (_cluster, mut c) = super::setup().await;
    let stmt = c.prepare("SELECT $1::int4 + 1").await.unwrap();
    let cached: i32 = c
        .query_one("SELECT 40 + 2", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(cached, 42);

    let mut p = c.pipeline_with(super::continue_on_error());
    p.execute("DISCARD ALL", &[]).await.unwrap();
    let used = p.query(&stmt, &[&1i32]).await.unwrap();
    p.query("SELECT 7", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    let seen = describe(&results);
    assert!(results[0].is_ok(), "{seen:#?}");
    let e = results[used.id() as usize].as_ref().unwrap_err();
    assert_eq!(
        e.code(),
        Some(SqlState::INVALID_SQL_STATEMENT_NAME),
        "{seen:#?}"
    );
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(
        matches!(&results[2], Ok(Output::Rows(r)) if r.len() == 1),
        "{seen:#?}"
    );

    let e = c.query_one(&stmt, &[&1i32]).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::INVALID_SQL_STATEMENT_NAME), "{e}");
    // The cached statement was forgotten and is prepared again, not run by a stale name.
    let cached: i32 = c
        .query_one("SELECT 40 + 2", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(cached, 42);
    drop(stmt);

    let stmt = c.prepare("SELECT $1::int4 + 1").await.unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        let mut p = tx.pipeline_with(super::continue_on_error());
        p.execute("DISCARD ALL", &[]).await.unwrap();
        let results = bounded("end", p.end()).await;
        let e = results[0].as_ref().unwrap_err();
        assert_eq!(e.code(), Some(SqlState::ACTIVE_SQL_TRANSACTION), "{e}");
        tx.rollback().await.unwrap();
    }
    let v: i32 = c.query_one(&stmt, &[&1i32]).await.unwrap().get(0).unwrap();
    assert_eq!(v, 2, "the refused DISCARD ALL took the statement away");
    assert!(c.is_reusable());
}

/// Promise (`Transaction::commit`/`rollback`: they never report an outcome that did not
/// happen, and their errors say what failed and what to do; STYLE.md "Errors"): a savepoint
/// ended behind its guard's back (a `RELEASE SAVEPOINT` sent as SQL) makes the guard's
/// `commit()` and `rollback()` fail, and the error says that the savepoint no longer exists
/// and that the failed statement aborted the enclosing transaction (PostgreSQL fails the
/// block on the guard's `RELEASE`/`ROLLBACK TO`), so the caller knows to roll it back rather
/// than going on and losing the rest of its work at `COMMIT`.
///
/// Steps: for `commit` and `rollback`: a transaction inserts 1, a savepoint `s` inserts 2,
/// then `RELEASE SAVEPOINT s` through the guard; end the guard; check the error and the
/// status; the transaction's `commit()` must then report that nothing was saved, and the
/// table must be empty.
///
/// Before the fix: the error was only the server's `error 3B001: savepoint "s" does not
/// exist`, which reads as if nothing happened to the enclosing transaction.
#[tokio::test]
async fn a_savepoint_released_behind_its_guards_back_says_the_transaction_failed() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for end in ["commit", "rollback"] {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
            sp.batch_execute("RELEASE SAVEPOINT s").await.unwrap();
            let r = match end {
                "commit" => bounded("commit", sp.commit()).await,
                _ => bounded("rollback", sp.rollback()).await,
            };
            let e = r.expect_err("the savepoint no longer exists");
            assert_eq!(
                e.code(),
                Some(SqlState::S_E_INVALID_SPECIFICATION),
                "{end}: {e}"
            );
            let text = e.to_string();
            assert!(
                text.contains("\"s\"") && text.contains("no longer exists"),
                "{end}: the error does not say the savepoint was already ended: {text}"
            );
            assert!(
                text.contains("aborted the enclosing transaction") && text.contains("roll"),
                "{end}: the error does not say the transaction is now failed: {text}"
            );
        }
        assert_eq!(tx.transaction_status(), TransactionStatus::Failed, "{end}");
        let e = bounded("commit", tx.commit()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Aborted, "{end}: {e}");
        assert_eq!(ints(&mut c, "SELECT x FROM t").await, [0i32; 0], "{end}");
    }
}

/// Holds. Promise (client.md "COPY": an aborted or failed COPY inside a transaction fails it
/// like any failed statement, "run the COPY in a savepoint and roll back to it"; "Transactions":
/// a failed savepoint's `commit()` rolls back to it and the enclosing transaction goes on).
///
/// Steps: in a transaction that inserted 1, savepoint `c`; a COPY whose second row breaks the
/// primary key, finished (the server's error) or aborted after the server failed it (a
/// `CopyFail` after the error); `commit()` the savepoint (an `Aborted` error) or roll it back;
/// insert 2 and commit. Only 1 and 2 must be kept, in each of the four combinations.
#[tokio::test]
async fn holds_a_copy_failed_by_the_server_inside_a_savepoint_is_undone_with_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int PRIMARY KEY)")
        .await
        .unwrap();
    for (abort, commit) in [(false, true), (false, false), (true, true), (true, false)] {
        let case = format!("abort {abort}, commit {commit}");
        c.batch_execute("TRUNCATE t").await.unwrap();
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        {
            let mut sp = tx.savepoint("c").await.unwrap();
            let mut copy = sp.copy_in("COPY t FROM STDIN").await.unwrap();
            // 1 is already in the table: the server fails the COPY at its second row.
            copy.write(b"10\n1\n11\n").await.unwrap();
            if abort {
                // Let the server's error arrive first: the abort comes after the failure.
                write_until_the_server_fails(&mut copy).await;
                bounded("abort", copy.abort("giving up")).await.unwrap();
            } else {
                let e = bounded("finish", copy.finish()).await.unwrap_err();
                assert_eq!(e.code(), Some(SqlState::UNIQUE_VIOLATION), "{case}: {e}");
            }
            assert_eq!(sp.transaction_status(), TransactionStatus::Failed, "{case}");
            if commit {
                let e = bounded("commit", sp.commit()).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Aborted, "{case}: {e}");
            } else {
                bounded("rollback", sp.rollback()).await.unwrap();
            }
        }
        assert_eq!(
            tx.transaction_status(),
            TransactionStatus::InTransaction,
            "{case}"
        );
        tx.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        bounded("commit", tx.commit()).await.unwrap();
        assert_eq!(
            ints(&mut c, "SELECT x FROM t ORDER BY x").await,
            [1, 2],
            "{case}"
        );
    }
}

/// Writes single rows until a write reports the server's failure of the COPY (the duplicate
/// key already sent), within a bound.
async fn write_until_the_server_fails(copy: &mut slipstream_pg::CopyIn<'_>) {
    for i in 0..100_000 {
        if let Err(e) = copy.write(format!("{}\n", 1000 + i).as_bytes()).await {
            assert_eq!(e.code(), Some(SqlState::UNIQUE_VIOLATION), "{e}");
            return;
        }
        if i % 100 == 99 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    panic!("no write reported the server's failure of the COPY");
}

/// Promise (client.md "Transactions": a guard dropped without `commit`/`rollback` is rolled
/// back with the next request; `commit()` never reports an outcome that did not happen, and
/// errors say what failed). A dropped savepoint guard whose savepoint SQL already ended (a
/// `RELEASE SAVEPOINT` sent through it) has its deferred `ROLLBACK TO` fail, which aborts the
/// enclosing transaction: its `commit()` must then say that this is what failed.
///
/// Steps: a transaction inserts 1; savepoint `s` inserts 2 and is released through SQL; the
/// guard is dropped; the transaction's `commit()` must be an `Aborted` error naming the
/// dropped savepoint's failed rollback, and nothing must be kept. The same one level down,
/// where the enclosing savepoint's `commit()` must name it.
///
/// Before the fix: "COMMIT rolled the transaction back because a statement in it had failed",
/// while every statement the caller ran had succeeded: the failure of the deferred rollback
/// was read and thrown away with the next request.
#[tokio::test]
async fn a_dropped_savepoint_whose_rollback_failed_is_named_by_the_commit() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    {
        let mut sp = tx.savepoint("s").await.unwrap();
        sp.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        sp.batch_execute("RELEASE SAVEPOINT s").await.unwrap();
    }
    let e = bounded("commit", tx.commit()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("dropped") && text.contains("savepoint \"s\" does not exist"),
        "the commit's error does not say what failed: {text}"
    );
    assert_eq!(ints(&mut c, "SELECT x FROM t").await, [0i32; 0]);

    // One level down: the enclosing savepoint's commit rolls back to it and names the same
    // failure; the transaction goes on and keeps what it did outside.
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    {
        let mut outer = tx.savepoint("o").await.unwrap();
        {
            let mut sp = outer.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES (4)", &[]).await.unwrap();
            sp.batch_execute("RELEASE SAVEPOINT s").await.unwrap();
        }
        let e = bounded("savepoint commit", outer.commit())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("\"o\"") && text.contains("savepoint \"s\" does not exist"),
            "the savepoint's error does not say what failed: {text}"
        );
    }
    bounded("commit", tx.commit()).await.unwrap();
    assert_eq!(ints(&mut c, "SELECT x FROM t").await, [3]);

    // The failure is forgotten with its transaction: the next one's failure is its own.
    let mut tx = c.transaction().await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = bounded("commit", tx.commit()).await.unwrap_err();
    assert!(!e.to_string().contains("dropped"), "{e}");
}

/// Promise (`Transaction::commit`: "A transaction already ended through SQL the guard did not
/// send ... is an `ErrorKind::Usage` error: that statement decided the outcome", and for a
/// savepoint "RELEASE or ROLLBACK TO fails by itself outside a block, naming the savepoint").
///
/// Steps: for a pipelined `commit()` and `rollback()` queued inside a savepoint (they end the
/// whole transaction), then the savepoint's `commit()` or `rollback()`: the error must be a
/// `Usage` error naming the savepoint and saying the transaction had ended; the rows must be
/// as the pipeline's statement left them.
///
/// Before the fix: the server's `error 25P01: RELEASE SAVEPOINT can only be used in
/// transaction blocks` (or `ROLLBACK TO SAVEPOINT ...`), which names no savepoint and does not
/// say that the work the caller meant to undo was committed.
#[tokio::test]
async fn a_savepoint_whose_transaction_a_pipeline_ended_says_so() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for (pipelined_commit, guard_commit) in
        [(true, true), (true, false), (false, true), (false, false)]
    {
        let case = format!("pipeline commit {pipelined_commit}, guard commit {guard_commit}");
        c.batch_execute("TRUNCATE t").await.unwrap();
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            let mut p = sp.pipeline();
            p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
            if pipelined_commit {
                p.commit().await.unwrap();
            } else {
                p.rollback().await.unwrap();
            }
            let results = bounded("end", p.end()).await;
            assert!(
                results.iter().all(Result::is_ok),
                "{case}: {:#?}",
                describe(&results)
            );
            let r = match guard_commit {
                true => bounded("commit", sp.commit()).await,
                false => bounded("rollback", sp.rollback()).await,
            };
            let e = r.expect_err("the transaction had ended");
            assert_eq!(e.kind(), ErrorKind::Usage, "{case}: {e}");
            let text = e.to_string();
            assert!(
                text.contains("\"s\"") && text.contains("already ended"),
                "{case}: {text}"
            );
        }
        assert_eq!(tx.transaction_status(), TransactionStatus::Idle, "{case}");
        let e = bounded("commit", tx.commit()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage, "{case}: {e}");
        let kept = ints(&mut c, "SELECT x FROM t ORDER BY x").await;
        let expected: &[i32] = if pipelined_commit { &[1, 2] } else { &[] };
        assert_eq!(kept, expected, "{case}");
    }
}

/// Holds. Promise (client.md "Cancellation and timeouts": a dropped future never
/// desynchronises, and leaves no transaction nobody opened; "Transactions": a failed
/// savepoint's `commit()` rolls back to it and the enclosing transaction goes on): the
/// `commit()` (or `rollback()`) of a savepoint in which a statement failed, dropped at any
/// poll, still leaves the savepoint rolled back and the enclosing transaction open and usable.
///
/// Steps: for k = 1, 2, ... and both ends: a transaction inserts k; savepoint `s` inserts -k,
/// then fails; its `commit()`/`rollback()` is dropped after k polls; the transaction must be
/// open (not failed), insert 1000 + k and commit. At the end no negative row is kept.
#[tokio::test]
async fn holds_a_failed_savepoints_commit_dropped_at_every_poll_still_rolls_back_to_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for commit in [true, false] {
        let mut completed = false;
        for k in 1..=MAX_POLLS as i32 {
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO t VALUES ($1)", &[&k])
                .await
                .unwrap();
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO t VALUES ($1)", &[&-k])
                .await
                .unwrap();
            sp.execute("SELECT 1/0", &[]).await.unwrap_err();
            let outcome = bounded(
                "end the savepoint",
                DropAfter::new(
                    async move {
                        match commit {
                            true => sp.commit().await,
                            false => sp.rollback().await,
                        }
                    },
                    k as usize,
                ),
            )
            .await;
            let row = bounded("the next call", tx.query_one("SELECT $1::int4", &[&k]))
                .await
                .unwrap_or_else(|e| panic!("commit {commit}, poll {k}: next call failed: {e}"));
            assert_eq!(row.get::<_, i32>(0).unwrap(), k);
            assert_eq!(
                tx.transaction_status(),
                TransactionStatus::InTransaction,
                "commit {commit}, poll {k}: the enclosing transaction must go on"
            );
            tx.execute("INSERT INTO t VALUES ($1)", &[&(1000 + k)])
                .await
                .unwrap();
            bounded("commit", tx.commit())
                .await
                .unwrap_or_else(|e| panic!("commit {commit}, poll {k}: {e}"));
            if let Some(r) = outcome {
                match commit {
                    true => assert_eq!(r.unwrap_err().kind(), ErrorKind::Aborted),
                    false => r.unwrap(),
                }
                completed = true;
                break;
            }
        }
        assert!(
            completed,
            "commit {commit}: never completed within {MAX_POLLS} polls"
        );
    }
    let negative: i64 = super::scalar(&mut c, "SELECT count(*) FROM t WHERE x < 0").await;
    assert_eq!(negative, 0, "work of a failed savepoint was kept");
    let kept: i64 = super::scalar(&mut c, "SELECT count(*) FROM t WHERE x > 0").await;
    assert!(kept >= 4, "{kept}");
}

/// Follows the fix of `a_dropped_savepoint_whose_rollback_failed_is_named_by_the_commit`:
/// the failed rollback of a dropped savepoint guard is named only while it is why the
/// transaction is failed. Steps: savepoint `o` opened through SQL; a guard `s` released through
/// SQL and dropped (its rollback fails); `ROLLBACK TO SAVEPOINT o` recovers the transaction;
/// then a statement of its own fails: the commit must not blame the dropped guard. Before:
/// the failure was kept until the transaction ended, and the commit blamed the guard.
#[tokio::test]
async fn a_recovered_dropped_savepoint_failure_is_not_blamed_later() {
    let (_cluster, mut c) = super::setup().await;
    let mut tx = c.transaction().await.unwrap();
    tx.batch_execute("SAVEPOINT o").await.unwrap();
    {
        let mut sp = tx.savepoint("s").await.unwrap();
        sp.batch_execute("RELEASE SAVEPOINT s").await.unwrap();
    }
    tx.batch_execute("ROLLBACK TO SAVEPOINT o").await.unwrap();
    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = bounded("commit", tx.commit()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(!e.to_string().contains("dropped"), "{e}");
}

/// Holds. Promise (bad input gives a clear error, never a panic, a hang or a desync;
/// "Transactions": a savepoint's failure leaves the enclosing transaction to the caller): a
/// savepoint name the protocol cannot carry (a NUL) or the server refuses (empty) is an error
/// that says what is wrong; the NUL one never reaches the server, so the transaction stays
/// open, and after either the connection answers.
#[tokio::test]
async fn holds_a_savepoint_name_that_cannot_be_used_is_a_clear_error() {
    let (_cluster, mut c) = super::setup().await;
    let mut tx = c.transaction().await.unwrap();
    let e = bounded("nul name", tx.savepoint("a\0b")).await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("nul"), "{e}");
    assert_eq!(
        tx.transaction_status(),
        TransactionStatus::InTransaction,
        "{e}"
    );
    let e = bounded("empty name", tx.savepoint("")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Db, "{e}");
    assert!(e.to_string().contains("zero-length"), "{e}");
    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
    tx.rollback().await.unwrap();
    assert!(c.is_reusable());
    let one: i32 = super::scalar(&mut c, "SELECT 1").await;
    assert_eq!(one, 1);
}
