//! Attacks (helper h89) on futures leaked (`std::mem::forget`, safe Rust) part-way: unlike a
//! dropped one, a leaked future runs no `Drop` of what it holds (a guard, a pipeline block, a
//! stream), so whatever it owes the connection must already be written down there. After a
//! leak the next call must answer in step, the connection must be in no transaction the
//! caller does not hold, and nothing the caller gave up may commit (client.md, "Cancellation
//! and timeouts"; pipelining.md, "Leaking a pipeline").

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use slipstream_pg::{Client, TransactionStatus};

use super::cancellation::{MAX_POLLS, check_clean};
use super::engine::{DropAfter, bounded};
use super::ints;

/// Polls a future at most `polls` times, each time only when woken, then leaks it
/// (`std::mem::forget`) if it has not completed: `None` then. The future's `Drop`, and that
/// of everything it holds, never runs.
struct LeakAfter<'a, T> {
    fut: Option<Pin<Box<dyn Future<Output = T> + 'a>>>,
    left: usize,
}

impl<'a, T> LeakAfter<'a, T> {
    fn new(fut: impl Future<Output = T> + 'a, polls: usize) -> Self {
        assert!(polls > 0);
        LeakAfter {
            fut: Some(Box::pin(fut)),
            left: polls,
        }
    }
}

impl<T> Future for LeakAfter<'_, T> {
    type Output = Option<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let fut = self.fut.as_mut().expect("polled after it finished");
        match fut.as_mut().poll(cx) {
            Poll::Ready(v) => {
                self.fut = None;
                Poll::Ready(Some(v))
            }
            Poll::Pending => {
                self.left -= 1;
                if self.left > 0 {
                    return Poll::Pending;
                }
                std::mem::forget(self.fut.take());
                Poll::Ready(None)
            }
        }
    }
}

/// Held. Promise (`Transaction::savepoint`: "A future dropped before it returns leaves no
/// savepoint behind"; client.md, "No transaction nobody opened"), for a leaked future: the
/// `transaction()` future leaked while its `BEGIN` was in flight left the `BEGIN` standing
/// until helper h86, because the guard that owed the `ROLLBACK` lived inside it. A
/// `savepoint()` future's owed `RELEASE` is written on the connection before its
/// `SAVEPOINT` is read (`Connection::deferred`), so a leak leaves it there too.
///
/// Steps: for k = 1, 2, ...: a transaction inserts k; guard `s` inserts -k; a nested
/// `savepoint("s")` future is leaked after k polls (or completes, and its guard is
/// dropped); guard `s` inserts -1000 - k and rolls back; the transaction inserts 1000 + k and
/// commits. A leaked `SAVEPOINT s` left standing would take guard `s`'s `ROLLBACK TO` (the
/// newest of a name) and keep -k, and the transaction's later work would be inside it.
/// No negative row may be kept, and every positive one must be.
#[tokio::test]
async fn held_a_leaked_savepoint_future_leaves_no_savepoint_behind() {
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
            let inner = bounded("savepoint", LeakAfter::new(sp.savepoint("s"), k as usize)).await;
            completed = inner.is_some();
            drop(inner);
            sp.execute("INSERT INTO t VALUES ($1)", &[&(-1000 - k)])
                .await
                .unwrap();
            bounded("rollback", sp.rollback())
                .await
                .unwrap_or_else(|e| panic!("poll {k}: the savepoint's rollback failed: {e}"));
        }
        tx.execute("INSERT INTO t VALUES ($1)", &[&(1000 + k)])
            .await
            .unwrap();
        assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
        bounded("commit", tx.commit()).await.unwrap();
        assert_eq!(c.transaction_status(), TransactionStatus::Idle);
        let negative = ints(&mut c, "SELECT x FROM t WHERE x < 0 ORDER BY x").await;
        assert_eq!(
            negative, [0i32; 0],
            "leaked after {k} polls: guard s's rollback reported success, and this work of it \
             was committed"
        );
        let kept = c
            .query_one(
                "SELECT count(*)::int FROM t WHERE x IN ($1, 1000 + $1)",
                &[&k],
            )
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap();
        assert_eq!(
            kept, 2,
            "leaked after {k} polls: the transaction's own work was lost"
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

/// A call dropped after its first poll, its reply still owed: the next call settles (reads
/// it) before it writes, so that call's first polls are spent settling.
async fn leave_a_reply_owed(c: &mut Client) {
    let _ = DropAfter::new(c.execute("SELECT 1", &[]), 1).await;
}

/// Promise (client.md, "No transaction nobody opened": a dropped `Transaction` is rolled back
/// with the next request; `Transaction`: "dropped without either, it is rolled back with the
/// connection's next request"). `commit()` and `rollback()` take the guard by value: leaked
/// before they queue their `COMMIT` or `ROLLBACK` (while they settle what a dropped call
/// left owed), the guard inside them never drops, so neither it nor they end the
/// transaction.
///
/// Steps: for k = 1, 2, ...: a transaction inserts -k, a call is dropped with its reply owed,
/// and the transaction's `commit()` (or `rollback()`) is leaked after k polls. The client
/// then runs `SELECT 1` and inserts k. The client must be `Idle`; another session must see k
/// (it ran in autocommit). -k may be kept only if `commit()` completed or its `COMMIT` was
/// sent.
///
/// Before the fix: leaked at its first poll, the guard's `ROLLBACK` was never deferred: the
/// transaction stayed open with nobody holding it, the client reported `InTransaction`,
/// and k, written in it, was never committed (another session saw nothing).
#[tokio::test]
async fn a_leaked_commit_or_rollback_leaves_no_transaction_nobody_holds() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for commit in [false, true] {
        let what = if commit { "commit()" } else { "rollback()" };
        let mut completed = false;
        for k in 1..=MAX_POLLS as i32 {
            c.batch_execute("TRUNCATE t").await.unwrap();
            let mut tx = c.transaction().await.unwrap();
            tx.execute("INSERT INTO t VALUES ($1)", &[&-k])
                .await
                .unwrap();
            leave_a_reply_owed(&mut tx).await;
            let outcome = match commit {
                true => bounded(what, LeakAfter::new(tx.commit(), k as usize)).await,
                false => bounded(what, LeakAfter::new(tx.rollback(), k as usize)).await,
            };
            assert_eq!(
                bounded("SELECT 1", c.query_one("SELECT 1", &[]))
                    .await
                    .unwrap_or_else(|e| panic!("{what} leaked after {k} polls: SELECT 1: {e}"))
                    .get::<_, i32>(0)
                    .unwrap(),
                1
            );
            c.execute("INSERT INTO t VALUES ($1)", &[&k]).await.unwrap();
            assert_eq!(
                c.transaction_status(),
                TransactionStatus::Idle,
                "{what} leaked after {k} polls: the client is left in a transaction it no \
                 longer holds"
            );
            let seen = ints(&mut watcher, "SELECT x FROM t ORDER BY x").await;
            assert!(
                seen.contains(&k),
                "{what} leaked after {k} polls: the INSERT after it ran in a transaction \
                 nobody holds and was never committed (another session sees {seen:?})"
            );
            if !commit {
                assert!(
                    !seen.contains(&-k),
                    "{what} leaked after {k} polls: the rolled-back work was kept"
                );
            }
            if let Some(r) = outcome {
                r.unwrap();
                completed = true;
                break;
            }
        }
        assert!(completed, "{what} never completed within {MAX_POLLS} polls");
    }
}

/// Promise (as `a_leaked_commit_or_rollback_leaves_no_transaction_nobody_holds`), nested: a
/// savepoint's `rollback()` leaked while it settles must still undo the savepoint's work
/// before the enclosing transaction ends, also when that transaction's `commit()` is the
/// very next call (no request in between to notice the leak).
///
/// Steps: for k = 1, 2, ...: a transaction inserts k; savepoint `s` inserts -k; a call is
/// dropped with its reply owed; `s.rollback()` is leaked after k polls; the transaction
/// commits. k must be kept and -k not.
///
/// Before the fix: leaked at its first poll, the savepoint was never rolled back and the
/// transaction's `commit()` kept -k, the work the caller had rolled back.
#[tokio::test]
async fn a_leaked_savepoint_rollback_is_undone_before_the_enclosing_commit() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
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
        leave_a_reply_owed(&mut sp).await;
        let outcome = bounded("rollback", LeakAfter::new(sp.rollback(), k as usize)).await;
        bounded("commit", tx.commit())
            .await
            .unwrap_or_else(|e| panic!("rollback() leaked after {k} polls: commit: {e}"));
        assert_eq!(c.transaction_status(), TransactionStatus::Idle);
        let kept = ints(
            &mut c,
            &format!("SELECT x FROM t WHERE abs(x) = {k} ORDER BY x"),
        )
        .await;
        assert_eq!(
            kept,
            [k],
            "rollback() leaked after {k} polls: the savepoint's rolled-back work was committed, \
             or the transaction's own was lost"
        );
        if let Some(r) = outcome {
            r.unwrap();
            completed = true;
            break;
        }
    }
    assert!(
        completed,
        "rollback() never completed within {MAX_POLLS} polls"
    );
}

/// Held. Promise (client.md, "Cancellation and timeouts", for a leaked future as for a dropped
/// one): every public call of `tests/it/cancellation.rs`, leaked (`std::mem::forget`) after
/// its k-th poll for every k until it completes, leaves the next call answering in step and
/// the connection in no transaction. A leaked pipeline block whose open group reached the
/// server only in part may close the connection instead (pipelining.md, "Leaking a
/// pipeline"): then the next call must fail naming the leak, and the test goes on with a new
/// connection. Each runs twice: as it is, and after a call dropped with its reply owed, so
/// that its first polls settle that reply (a leak there must leave the settling, and nothing
/// else, to the next call). A call leaked while it holds a `Transaction` guard leaves that transaction
/// open, as a leaked guard does (client.md): the next call must still answer in step, and the
/// test then rolls the transaction back.
/// The calls of `tests/it/cancellation.rs` whose future holds a `Transaction` guard between
/// its polls.
fn holds_a_guard(name: &str) -> bool {
    name.starts_with("transaction") || name == "savepoint"
}

#[tokio::test]
async fn every_call_leaked_at_every_poll_leaves_the_connection_in_step_and_idle() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute(super::cancellation::SCHEMA).await.unwrap();
    for owed_first in [false, true] {
        for (name, call) in super::cancellation::calls() {
            let mut completed = false;
            for k in 1..=MAX_POLLS {
                if owed_first {
                    leave_a_reply_owed(&mut c).await;
                }
                let outcome = bounded(name, LeakAfter::new(call(&mut c), k)).await;
                if outcome.is_none() && name.starts_with("pipeline") {
                    let marker = k as i32;
                    match bounded(name, c.query_one("SELECT $1::int4", &[&marker])).await {
                        Ok(row) => assert_eq!(row.get::<_, i32>(0).unwrap(), marker),
                        Err(e) => {
                            assert!(
                                c.is_broken() && e.to_string().contains("leaked"),
                                "{name} leaked at poll {k}: {e}"
                            );
                            eprintln!("{name} leaked at poll {k}: the connection was closed");
                            c = slipstream_pg::connect(&cluster.url()).await.unwrap();
                        }
                    }
                }
                if outcome.is_none() && holds_a_guard(name) {
                    let marker = k as i32;
                    let row = bounded(name, c.query_one("SELECT $1::int4", &[&marker]))
                        .await
                        .unwrap_or_else(|e| panic!("{name} leaked at poll {k}: {e}"));
                    assert_eq!(row.get::<_, i32>(0).unwrap(), marker);
                    // A leaked guard keeps its transaction (client.md): nothing can tell it from a live one.
                    if c.transaction_status() != TransactionStatus::Idle {
                        c.batch_execute("ROLLBACK").await.unwrap();
                    }
                }
                check_clean(&mut c, name, k).await;
                if let Some(result) = outcome {
                    result.unwrap_or_else(|e| panic!("{name} completed with an error: {e}"));
                    eprintln!("{name}: leaked at polls 1..{k}, completed at poll {k}");
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
}

/// Held. Promise (client.md, "Cancellation and timeouts"), for leaked futures: memopt's fast
/// lookups (a `FunctionCall` answered by its own `ReadyForQuery`), alone and in pipeline
/// blocks beside statements, leaked at every poll in turn, leave the connection in step and
/// in no transaction. A leaked block whose open group reached the server only in part may
/// close the connection, naming the leak (pipelining.md); the test then reconnects.
#[tokio::test]
async fn memopt_calls_leaked_at_every_poll_leave_the_connection_in_step_and_idle() {
    let (cluster, mut c) = super::memopt::memopt_setup().await;
    for (name, call) in super::cancellation::memopt_calls() {
        let mut completed = false;
        for k in 1..=MAX_POLLS {
            let outcome = bounded(name, LeakAfter::new(call(&mut c), k)).await;
            if outcome.is_none() {
                let marker = k as i32;
                match bounded(name, c.query_one("SELECT $1::int4", &[&marker])).await {
                    Ok(row) => assert_eq!(row.get::<_, i32>(0).unwrap(), marker),
                    Err(e) if name.starts_with("pipeline") => {
                        assert!(
                            c.is_broken() && e.to_string().contains("leaked"),
                            "{name} leaked at poll {k}: {e}"
                        );
                        eprintln!("{name} leaked at poll {k}: the connection was closed");
                        c = slipstream_pg::connect(&cluster.url()).await.unwrap();
                    }
                    Err(e) => panic!("{name} leaked at poll {k}: {e}"),
                }
            }
            check_clean(&mut c, name, k).await;
            if let Some(result) = outcome {
                result.unwrap_or_else(|e| panic!("{name} completed with an error: {e}"));
                eprintln!("{name}: leaked at polls 1..{k}, completed at poll {k}");
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

/// Held. Promise (client.md, "Cancellation and timeouts"; `Transaction`), for leaked futures
/// nested in guards: a call leaked inside the caller's transaction, or inside a savepoint of
/// it, leaves that transaction the caller's: the next statement in it answers in step, and
/// the guards still end it. A leaked `COPY FROM STDIN` is aborted and fails the transaction,
/// as any error does (client.md): a savepoint's rollback then recovers it.
///
/// Steps: for each call of `tests/it/cancellation.rs` that opens no transaction itself, for
/// k = 1, 2, ...: a transaction (and, in the second round, savepoint `s` in it) runs the call
/// leaked after k polls; `SELECT 1` through the innermost guard must answer 1 (or, after a
/// leaked COPY, fail); the savepoint is released (or rolled back after a failure), the
/// transaction inserts k into `mark` and commits; `mark` must hold k.
#[tokio::test]
async fn calls_leaked_inside_a_transaction_or_savepoint_leave_it_the_callers() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(super::cancellation::SCHEMA).await.unwrap();
    c.batch_execute("CREATE TABLE mark (k int)").await.unwrap();
    let opens_a_transaction = |name: &str| holds_a_guard(name) || name.contains("BEGIN");
    for in_savepoint in [false, true] {
        for (name, call) in super::cancellation::calls() {
            if opens_a_transaction(name) {
                continue;
            }
            let mut completed = false;
            for k in 1..=MAX_POLLS as i32 {
                let mut tx = c.transaction().await.unwrap();
                if in_savepoint {
                    let mut sp = tx.savepoint("s").await.unwrap();
                    let outcome = bounded(name, LeakAfter::new(call(&mut sp), k as usize)).await;
                    completed = outcome.is_some();
                    match bounded(name, sp.query_one("SELECT 1", &[])).await {
                        Ok(row) => {
                            assert_eq!(row.get::<_, i32>(0).unwrap(), 1, "{name} at poll {k}");
                            bounded(name, sp.commit()).await.unwrap();
                        }
                        Err(e) if name.starts_with("copy_in") => {
                            assert_eq!(sp.transaction_status(), TransactionStatus::Failed, "{e}");
                            bounded(name, sp.rollback()).await.unwrap();
                        }
                        Err(e) => panic!("{name} leaked at poll {k} in a savepoint: {e}"),
                    }
                } else {
                    let outcome = bounded(name, LeakAfter::new(call(&mut tx), k as usize)).await;
                    completed = outcome.is_some();
                    match bounded(name, tx.query_one("SELECT 1", &[])).await {
                        Ok(row) => assert_eq!(row.get::<_, i32>(0).unwrap(), 1),
                        Err(e) if name.starts_with("copy_in") => {
                            assert_eq!(tx.transaction_status(), TransactionStatus::Failed, "{e}");
                            bounded(name, tx.rollback()).await.unwrap();
                            check_clean(&mut c, name, k as usize).await;
                            if completed {
                                break;
                            }
                            continue;
                        }
                        Err(e) => panic!("{name} leaked at poll {k}: {e}"),
                    }
                }
                assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
                tx.execute("INSERT INTO mark VALUES ($1)", &[&k])
                    .await
                    .unwrap();
                bounded(name, tx.commit())
                    .await
                    .unwrap_or_else(|e| panic!("{name} leaked at poll {k}: commit: {e}"));
                check_clean(&mut c, name, k as usize).await;
                let marked = ints(&mut c, &format!("SELECT k FROM mark WHERE k = {k}")).await;
                assert!(
                    !marked.is_empty(),
                    "{name} leaked at poll {k}: the commit kept nothing"
                );
                c.batch_execute("TRUNCATE mark").await.unwrap();
                if completed {
                    break;
                }
            }
            assert!(
                completed,
                "{name} did not complete within {MAX_POLLS} polls"
            );
        }
    }
}

/// Promise (client.md, "Cancellation and timeouts": a dropped call never leaves a statement
/// on the server that nothing will close; `attack_abandoned_calls.rs`'
/// `dropped_first_runs_during_a_type_lookup_do_not_leak_statements`), for leaked calls: a
/// first run of new SQL, or a `prepare`, leaked at any poll, its type lookup included, leaves
/// no named statement on the server beyond the statement cache's.
///
/// Steps: for k = 1..12: create enum `ek`; leak `query("SELECT $1::int4, 'a'::ek")` and
/// `prepare("SELECT $1::int4 + 1, 'a'::ek")` after k polls each, settling after each. Then
/// the server's `pg_prepared_statements` must hold no more than the cache does.
///
/// Before the fix: the guard that closes a statement whose call has not kept it yet (while it
/// looks its types up) lived in the future, so a call leaked there left its statement on the
/// server for the rest of the session (one more on the server than in the cache).
#[tokio::test]
async fn leaked_first_runs_during_a_type_lookup_do_not_leak_statements() {
    let (_cluster, mut c) = super::setup().await;
    for k in 1..=12usize {
        c.batch_execute(&format!("CREATE TYPE e{k} AS ENUM ('a')"))
            .await
            .unwrap();
        let sql = format!("SELECT $1::int4, 'a'::e{k}");
        let _ = LeakAfter::new(c.query(sql.as_str(), &[&1i32]), k).await;
        c.settle().await.unwrap();
        let prepared = format!("SELECT $1::int4 + 1, 'a'::e{k}");
        let _ = LeakAfter::new(c.prepare(&prepared), k).await;
        c.settle().await.unwrap();
    }
    c.query_one("SELECT 1", &[]).await.unwrap(); // settles, closing what is left
    let on_server: i64 = super::scalar(&mut c, "SELECT count(*) FROM pg_prepared_statements").await;
    let cached = c.statement_cache_stats().size as i64;
    assert!(
        on_server <= cached,
        "{} server-side statements leaked (cache holds {cached}, server has {on_server})",
        on_server - cached
    );
}
