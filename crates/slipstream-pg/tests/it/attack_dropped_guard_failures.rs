//! Attacks on what the caller is told after a dropped savepoint guard's deferred rollback
//! failed (helper-57, session 46): client.md "Transactions" ("such a guard dropped instead has
//! its deferred `ROLLBACK TO` fail the same way, unseen; the enclosing transaction's `commit()`
//! then names that failure") and "Errors" (messages name what failed and what to do).
//!
//! The failure aborts the enclosing transaction while no caller is reading: every statement
//! after it is refused with 25P02, and every way to end the transaction sees a transaction it
//! did nothing to fail. Each test checks the text the caller gets and what the server kept.

use slipstream_pg::types::Type;
use slipstream_pg::{Client, Error, ErrorKind, Output, PipelineMode, PipelineOptions, SqlState};
use slipstream_pg::{Transaction, TransactionStatus, Uncached};

use super::engine::bounded;

/// A savepoint guard `s` whose savepoint SQL ends behind its back, dropped: its deferred
/// `ROLLBACK TO SAVEPOINT s` goes out with the next request, fails with 3B001 and aborts the
/// transaction.
async fn drop_a_released_guard(tx: &mut Transaction<'_>) {
    let mut sp = tx.savepoint("s").await.unwrap();
    sp.batch_execute("RELEASE SAVEPOINT s").await.unwrap();
}

/// What an error must say once a dropped guard's failed rollback is why the transaction is
/// failed: the guard and the server's error for its rollback, and, while the transaction is
/// still open (`advice`), to roll it back. `None` if it does.
fn unnamed(e: &Error, advice: bool) -> Option<String> {
    let text = e.to_string();
    let names = text.contains("dropped")
        && text.contains("savepoint \"s\" does not exist")
        && (!advice || text.contains("roll the transaction back"));
    (!names).then(|| format!("{:?}: {text}", e.kind()))
}

/// A statement refused because the transaction is failed must still be the server's 25P02,
/// for code that matches on it, with the dropped guard named.
fn check_refused(what: &str, e: Option<Error>, wrong: &mut Vec<String>) {
    let Some(e) = e else {
        wrong.push(format!("{what}: succeeded in a failed transaction"));
        return;
    };
    if e.code() != Some(SqlState::IN_FAILED_SQL_TRANSACTION)
        || e.as_db_error().map(|db| db.code()) != Some(SqlState::IN_FAILED_SQL_TRANSACTION)
    {
        wrong.push(format!("{what}: not the server's 25P02: {e}"));
    }
    if let Some(text) = unnamed(&e, true) {
        wrong.push(format!("{what}: does not name the dropped guard: {text}"));
    }
}

fn pipelines() -> [(&'static str, PipelineOptions); 2] {
    [
        ("abort on error", PipelineOptions::new()),
        (
            "continue on error",
            PipelineOptions::new().mode(PipelineMode::ContinueOnError),
        ),
    ]
}

/// Promise (client.md "Errors": an error names what failed and what to do; "Transactions": a
/// dropped guard's failed rollback is named). After a dropped savepoint guard's deferred
/// rollback failed, every call the caller makes in the transaction is refused with 25P02,
/// which blames nothing the caller did.
///
/// Steps: a transaction prepares a statement, drops a guard whose savepoint SQL released,
/// then runs each call (query, query_one, execute, query_typed, an `Uncached` statement, the
/// prepared statement, prepare, batch_execute, simple_query, simple_query_until_error,
/// query_stream, copy_in, copy_out, savepoint, transaction): each must be refused with the
/// server's 25P02 (`code()` and `as_db_error()`), and its text must name the dropped guard,
/// the server's 3B001 and "roll the transaction back". A `build_transaction()` through the
/// transaction is the client's Usage error, which must name it too (it said "a statement in
/// it failed"). Nothing is kept after the rollback. The same when a statement of the
/// caller's failed inside the guard before it was dropped to undo that failure.
///
/// Before the fix: `error 25P02: current transaction is aborted, commands ignored until end
/// of transaction block` from every call, naming nothing.
#[tokio::test]
async fn every_statement_after_a_dropped_guards_failed_rollback_names_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    let stmt = tx.prepare("INSERT INTO t VALUES ($1)").await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    drop_a_released_guard(&mut tx).await;
    let mut wrong = Vec::new();
    let e = tx.execute("INSERT INTO t VALUES (2)", &[]).await.err();
    check_refused(
        "execute (the first, which sent the rollback)",
        e,
        &mut wrong,
    );
    let e = tx.query("SELECT 1", &[]).await.err();
    check_refused("query", e, &mut wrong);
    let e = tx.query_one("SELECT 1", &[]).await.err();
    check_refused("query_one", e, &mut wrong);
    let e = tx.query_typed("SELECT $1", &[(&1i32, Type::INT4)]).await;
    check_refused("query_typed", e.err(), &mut wrong);
    let e = tx.execute(&Uncached("SELECT 1"), &[]).await.err();
    check_refused("an Uncached statement", e, &mut wrong);
    let e = tx.execute(&stmt, &[&3i32]).await.err();
    check_refused("a prepared statement", e, &mut wrong);
    let e = tx.prepare("SELECT 2").await.err();
    check_refused("prepare", e, &mut wrong);
    let e = tx.batch_execute("SELECT 1").await.err();
    check_refused("batch_execute", e, &mut wrong);
    let e = tx.simple_query("SELECT 1").await.err();
    check_refused("simple_query", e, &mut wrong);
    let (_, e) = tx.simple_query_until_error("SELECT 1").await;
    check_refused("simple_query_until_error", e, &mut wrong);
    let e = tx.query_stream("SELECT 1", &[]).await.err();
    check_refused("query_stream", e, &mut wrong);
    let e = tx.copy_in("COPY t FROM STDIN").await.err();
    check_refused("copy_in", e, &mut wrong);
    let e = tx.copy_out("COPY t TO STDOUT").await.err();
    check_refused("copy_out", e, &mut wrong);
    let e = tx.savepoint("again").await.err();
    check_refused("savepoint", e, &mut wrong);
    let e = tx.transaction().await.err();
    check_refused("a nested transaction", e, &mut wrong);
    // Refused by the client (a BEGIN inside a transaction), saying why the transaction failed.
    let e = tx.build_transaction().start().await.err();
    match e {
        Some(e) if e.kind() == ErrorKind::Usage && unnamed(&e, false).is_none() => {}
        e => wrong.push(format!("build_transaction: {e:?}")),
    }
    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
    bounded("rollback", tx.rollback()).await.unwrap();

    // A statement of the caller's failed inside the guard first, and the guard was dropped to
    // undo it: its rollback's failure is why the transaction stays failed, and is named.
    let mut tx = c.transaction().await.unwrap();
    {
        let mut sp = tx.savepoint("s").await.unwrap();
        sp.batch_execute("RELEASE SAVEPOINT s").await.unwrap();
        sp.execute("SELECT 1/0", &[]).await.unwrap_err();
    }
    let e = tx.execute("INSERT INTO t VALUES (4)", &[]).await.err();
    check_refused(
        "after a failure the dropped guard was to undo",
        e,
        &mut wrong,
    );
    tx.rollback().await.unwrap();
    assert!(wrong.is_empty(), "{wrong:#?}");
    let kept: Vec<i32> = super::column(&mut c, "SELECT x FROM t").await;
    assert_eq!(kept, [0i32; 0]);
}

/// Follows `every_statement_after_a_dropped_guards_failed_rollback_names_it`: the note is
/// forgotten once the transaction ends or recovers, as the commit's is. A 25P02 caused by
/// the caller's own failed statement must not blame a dropped guard.
///
/// Steps: (1) the failure, then `rollback()`; a new transaction fails on `SELECT 1/0`, and
/// its next statement's 25P02 must not mention a dropped guard. The same when the guard and
/// its transaction are dropped together, for the commit too. (2) Savepoint `o` opened
/// through SQL; the guard's failure; `ROLLBACK TO SAVEPOINT o` recovers; `SELECT 1/0`; the
/// next 25P02 must not mention it either.
#[tokio::test]
async fn a_dropped_guards_failure_is_forgotten_when_its_transaction_ends_or_recovers() {
    let (_cluster, mut c) = super::setup().await;
    let mut tx = c.transaction().await.unwrap();
    drop_a_released_guard(&mut tx).await;
    let e = tx.execute("SELECT 1", &[]).await.unwrap_err();
    assert!(e.to_string().contains("dropped"), "{e}");
    tx.rollback().await.unwrap();

    let mut tx = c.transaction().await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = tx.execute("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::IN_FAILED_SQL_TRANSACTION), "{e}");
    assert!(
        !e.to_string().contains("dropped"),
        "after the rollback: {e}"
    );
    tx.rollback().await.unwrap();

    // The guard and its transaction both dropped: their deferred rollbacks go out together,
    // the guard's fails, the transaction's ends it.
    let mut tx = c.transaction().await.unwrap();
    drop_a_released_guard(&mut tx).await;
    drop(tx);
    let mut tx = c.transaction().await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = tx.execute("SELECT 1", &[]).await.unwrap_err();
    assert!(
        !e.to_string().contains("dropped"),
        "after a dropped transaction: {e}"
    );
    let e = tx.commit().await.unwrap_err();
    assert!(
        !e.to_string().contains("dropped"),
        "after a dropped transaction: {e}"
    );

    let mut tx = c.transaction().await.unwrap();
    tx.batch_execute("SAVEPOINT o").await.unwrap();
    drop_a_released_guard(&mut tx).await;
    tx.batch_execute("ROLLBACK TO SAVEPOINT o").await.unwrap();
    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = tx.query("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::IN_FAILED_SQL_TRANSACTION), "{e}");
    assert!(!e.to_string().contains("dropped"), "after recovering: {e}");
    tx.rollback().await.unwrap();
}

/// Promise (as `every_statement_after_a_dropped_guards_failed_rollback_names_it`, for a
/// pipeline block's statements; pipelining.md: inside `BEGIN` "later operations fail with
/// 25P02").
///
/// Steps: in each mode, and with the guard dropped either right before the block (its
/// rollback travels ahead of the block's first operation) or before a statement that read
/// the failure: a block of execute, query, query_typed, the prepared statement and prepare.
/// Every result must be an error carrying the server's 25P02 that names the dropped guard (in
/// abort mode the ones after the first are skipped: they name it too).
///
/// Before the fix: `error 25P02: current transaction is aborted, ...` (and in abort mode
/// "pipeline operation 1 was not run: operation 0 failed earlier ...: error 25P02: ..."),
/// naming nothing.
#[tokio::test]
async fn a_pipeline_after_a_dropped_guards_failed_rollback_names_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut wrong = Vec::new();
    for (mode, options) in pipelines() {
        for read_first in [false, true] {
            let case = format!("{mode}, failure read first {read_first}");
            let mut tx = c.transaction().await.unwrap();
            let stmt = tx.prepare("INSERT INTO t VALUES ($1)").await.unwrap();
            drop_a_released_guard(&mut tx).await;
            if read_first {
                tx.execute("SELECT 1", &[]).await.unwrap_err();
            }
            let mut p = tx.pipeline_with(options.clone());
            p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
            p.query("SELECT 1", &[]).await.unwrap();
            p.query_typed("SELECT $1", &[(&1i32, Type::INT4)])
                .await
                .unwrap();
            p.execute(&stmt, &[&2i32]).await.unwrap();
            p.prepare("SELECT 2").await.unwrap();
            let results = bounded("end", p.end()).await;
            for (i, r) in results.into_iter().enumerate() {
                check_refused(&format!("{case}: operation {i}"), r.err(), &mut wrong);
            }
            assert_eq!(tx.transaction_status(), TransactionStatus::Failed, "{case}");
            tx.rollback().await.unwrap();
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let kept: Vec<i32> = super::column(&mut c, "SELECT x FROM t").await;
    assert_eq!(kept, [0i32; 0]);
}

/// The result of a commit that must fail, naming the dropped guard (and, if the transaction
/// is still open, `advice`: to roll it back); `None` if it does.
fn commit_unnamed(case: &str, r: Result<Output, Error>, advice: bool) -> Option<String> {
    match r {
        Ok(o) => Some(format!("{case}: the commit succeeded: {o:?}")),
        Err(e) if e.kind() != ErrorKind::Aborted => {
            Some(format!("{case}: not Aborted: {:?}: {e}", e.kind()))
        }
        Err(e) => unnamed(&e, advice).map(|text| format!("{case}: {text}")),
    }
}

/// Promise (client.md "Transactions": the enclosing transaction's `commit()` names the
/// dropped guard's failure; `Transaction::commit` never reports an outcome that did not happen
/// and says why). Every way to end a transaction that a dropped guard's failed rollback
/// aborted must say so, as `Transaction::commit` does.
///
/// Steps, each in a fresh transaction that inserted 1 and dropped a released guard:
/// - a pipelined `commit()` as the block's first operation (each mode, and after a statement
///   read the failure): an `Aborted` error naming it; the transaction is over, nothing kept,
///   and the guard's own `commit()` is then the Usage error "already ended";
/// - a pipelined `commit()` behind a statement (each mode): named; in abort mode it was
///   skipped, so the transaction is still open and failed;
/// - the transaction's own `commit()` after a continue-on-error block holding statements was
///   dropped unread, and after a statement read the failure: named.
///
/// Before the fix: the pipelined commit said "COMMIT rolled the transaction back: a statement
/// in it had failed" (or, skipped, "pipeline operation 1 was not run: ...: error 25P02: ...");
/// the transaction's own commit already named it.
#[tokio::test]
async fn every_way_to_end_a_transaction_failed_by_a_dropped_guard_names_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut wrong = Vec::new();
    async fn begin(c: &mut Client) -> Transaction<'_> {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        drop_a_released_guard(&mut tx).await;
        tx
    }

    for (mode, options) in pipelines() {
        for read_first in [false, true] {
            let case = format!("commit() first in a {mode} block, failure read first {read_first}");
            let mut tx = begin(&mut c).await;
            if read_first {
                tx.execute("SELECT 1", &[]).await.unwrap_err();
            }
            let mut p = tx.pipeline_with(options.clone());
            let commit = p.commit().await.unwrap();
            let r = bounded("process", p.process(&commit)).await;
            wrong.extend(commit_unnamed(&case, r.map(|()| Output::Done), false));
            bounded("end", p.end()).await;
            assert_eq!(tx.transaction_status(), TransactionStatus::Idle, "{case}");
            let e = bounded("commit", tx.commit()).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Usage, "{case}: {e}");
        }

        let case = format!("commit() behind a statement in a {mode} block");
        let mut tx = begin(&mut c).await;
        let mut p = tx.pipeline_with(options.clone());
        p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        p.commit().await.unwrap();
        let mut results = bounded("end", p.end()).await;
        // Skipped in abort mode: the transaction is still open, and failed.
        let status = match options.get_mode() {
            PipelineMode::AbortOnError => TransactionStatus::Failed,
            PipelineMode::ContinueOnError => TransactionStatus::Idle,
        };
        let open = status == TransactionStatus::Failed;
        wrong.extend(commit_unnamed(&case, results.pop().unwrap(), open));
        assert_eq!(tx.transaction_status(), status, "{case}");
        if status == TransactionStatus::Failed {
            tx.rollback().await.unwrap();
        }
    }

    let case = "the transaction's commit() after a dropped block";
    let mut tx = begin(&mut c).await;
    let mut p = tx.pipeline_with(PipelineOptions::new().mode(PipelineMode::ContinueOnError));
    p.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (4)", &[]).await.unwrap();
    drop(p);
    let r = bounded("commit", tx.commit()).await;
    wrong.extend(commit_unnamed(case, r.map(|()| Output::Done), false));

    let case = "the transaction's commit() after a statement read the failure";
    let mut tx = begin(&mut c).await;
    tx.execute("SELECT 1", &[]).await.unwrap_err();
    let r = bounded("commit", tx.commit()).await;
    wrong.extend(commit_unnamed(case, r.map(|()| Output::Done), false));

    assert!(wrong.is_empty(), "{wrong:#?}");
    let kept: Vec<i32> = super::column(&mut c, "SELECT x FROM t").await;
    assert_eq!(kept, [0i32; 0]);
}

/// Promise (as `every_statement_after_a_dropped_guards_failed_rollback_names_it`, for
/// memopt's fast lookups, which are `FunctionCall`s and not statements): a lookup, lone or
/// pipelined, in a transaction a dropped guard's failed rollback aborted names it.
///
/// Before the fix: `error 25P02: current transaction is aborted, ...`, naming nothing.
#[tokio::test]
async fn a_memopt_lookup_after_a_dropped_guards_failed_rollback_names_it() {
    let (_cluster, mut c) = super::memopt::memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    let mut wrong = Vec::new();
    let mut tx = c.transaction().await.unwrap();
    drop_a_released_guard(&mut tx).await;
    let e = bounded("memopt_get", tx.memopt_get(&m, &1i64)).await.err();
    check_refused("memopt_get", e, &mut wrong);
    let e = bounded("memopt_get_many", tx.memopt_get_many(&m, &[1i64, 2])).await;
    check_refused("memopt_get_many", e.err(), &mut wrong);
    let mut p = tx.pipeline();
    p.memopt_get(&m, &1i64).await.unwrap();
    p.memopt_get(&m, &2i64).await.unwrap();
    p.memopt_get_many(&m, &[3i64]).await.unwrap();
    for (i, r) in bounded("end", p.end()).await.into_iter().enumerate() {
        check_refused(&format!("pipelined lookup {i}"), r.err(), &mut wrong);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    tx.rollback().await.unwrap();
}
