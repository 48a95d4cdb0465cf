//! Attacks on the promises of client.md's "Transactions" and "COPY" sections (helper-48):
//! a failed or dropped transaction leaves no transaction behind, `commit`/`rollback` never
//! report an outcome that did not happen, and a COPY that fails or is dropped inside a
//! transaction leaves the connection in step and the transaction the caller's.

use slipstream_pg::{Client, ErrorKind, IsolationLevel, TransactionStatus};
use slipstream_testkit::Cluster;

use super::engine::{DropAfter, bounded};

/// More steps than any call here takes; reaching it fails the test.
const MAX_POLLS: usize = 400;

async fn one(c: &mut Client, what: &str) {
    let row = bounded(what, c.query_one("SELECT 1", &[]))
        .await
        .unwrap_or_else(|e| panic!("{what}: the next call failed: {e}"));
    assert_eq!(row.get::<_, i32>(0).unwrap(), 1, "{what}");
}

/// Holds. Promise (client.md "Transactions", "Cancellation and timeouts": no transaction
/// nobody opened): a `transaction()` whose options the server refuses leaves no transaction
/// behind.
///
/// Steps: on a hot standby, start a SERIALIZABLE transaction, then a READ WRITE one (the
/// standby refuses both options after `BEGIN` has opened the block); check the error names the
/// refusal, and that the connection is idle and answers. tokio-postgres, on the same standby,
/// is the reference. (PostgreSQL aborts a block whose `BEGIN` fails outright, so `start()`'s
/// "no transaction was opened" is right.)
#[tokio::test]
async fn holds_begin_refused_by_a_standby_leaves_no_failed_transaction() {
    let primary = Cluster::start().unwrap();
    let standby = primary.start_standby().unwrap();
    let mut c = slipstream_pg::connect(&standby.url()).await.unwrap();

    let e = c
        .build_transaction()
        .isolation_level(IsolationLevel::Serializable)
        .start()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Db, "{e}");
    assert!(e.to_string().contains("serializable"), "{e}");
    assert_eq!(
        c.transaction_status(),
        TransactionStatus::Idle,
        "a refused SERIALIZABLE BEGIN left a transaction open: {e}"
    );
    assert!(c.is_reusable());
    one(&mut c, "after a refused SERIALIZABLE BEGIN").await;

    let e = c
        .build_transaction()
        .read_only(false)
        .start()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Db, "{e}");
    assert!(e.to_string().contains("read-write"), "{e}");
    assert_eq!(
        c.transaction_status(),
        TransactionStatus::Idle,
        "a refused READ WRITE BEGIN left a transaction open: {e}"
    );
    one(&mut c, "after a refused READ WRITE BEGIN").await;
    // And a transaction the standby can run still starts.
    let tx = c
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // The reference: tokio-postgres rolls the failed BEGIN's block back.
    let mut peer = super::peer(&standby).await;
    let refused = peer
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::Serializable)
        .start()
        .await;
    assert!(refused.is_err(), "the standby refuses SERIALIZABLE");
    drop(refused);
    peer.simple_query("SELECT 1")
        .await
        .expect("tokio-postgres's next statement runs");
}

/// Promise (client.md "Transactions"; `Transaction::commit`'s rustdoc: "returns an error then
/// instead of pretending the work was saved"; `rollback`'s: "nothing was deleted").
///
/// Steps: inside a `Transaction`, end the transaction through SQL the guard does not see
/// (a pipeline's `rollback()`/`commit()`, as `tx.pipeline()` allows), then call the guard's
/// `commit()` (resp. `rollback()`).
///
/// Before the fix: `commit()` returned `Ok(())` after the pipeline had rolled the
/// transaction's insert back (the server only warns "there is no transaction in progress"),
/// and `rollback()` returned `Ok(())` after the pipeline had committed the delete: each
/// reported the opposite of what happened to the data.
#[tokio::test]
async fn attack_commit_or_rollback_after_the_transaction_ended_through_sql_is_an_error() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (0)")
        .await
        .unwrap();

    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let mut p = tx.pipeline();
    p.rollback().await.unwrap();
    for r in p.end().await {
        r.unwrap();
    }
    let e = tx.commit().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("already ended"), "{e}");
    let xs: Vec<i32> = super::column(&mut c, "SELECT x FROM t ORDER BY x").await;
    assert_eq!(xs, vec![0], "the insert was rolled back, as the error says");

    let mut tx = c.transaction().await.unwrap();
    tx.execute("DELETE FROM t", &[]).await.unwrap();
    let mut p = tx.pipeline();
    p.commit().await.unwrap();
    for r in p.end().await {
        r.unwrap();
    }
    let e = tx.rollback().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("already ended"), "{e}");
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0, "the delete was committed, as the error says");
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    one(&mut c, "after the refused commit and rollback").await;
}

/// Holds. Promise (client.md "Transactions"): `build_transaction()` sets isolation level,
/// read-only and deferrable; each option (and its opposite) reaches the server.
///
/// Steps: start transactions with each level, READ WRITE over a session whose default is read
/// only, and DEFERRABLE alone; read the settings back inside each.
#[tokio::test]
async fn holds_every_transaction_option_reaches_the_server() {
    let (_cluster, mut c) = super::setup().await;
    for (level, name) in [
        (IsolationLevel::ReadCommitted, "read committed"),
        (IsolationLevel::RepeatableRead, "repeatable read"),
        (IsolationLevel::Serializable, "serializable"),
    ] {
        c.batch_execute("SET default_transaction_isolation = 'serializable'")
            .await
            .unwrap();
        let mut tx = c
            .build_transaction()
            .isolation_level(level)
            .start()
            .await
            .unwrap();
        let got: String = super::scalar(&mut tx, "SHOW transaction_isolation").await;
        assert_eq!(got, name);
        tx.commit().await.unwrap();
    }
    c.batch_execute(
        "SET default_transaction_isolation = 'read committed'; \
         SET default_transaction_read_only = on",
    )
    .await
    .unwrap();
    let mut tx = c
        .build_transaction()
        .read_only(false)
        .start()
        .await
        .unwrap();
    let got: String = super::scalar(&mut tx, "SHOW transaction_read_only").await;
    assert_eq!(got, "off");
    tx.execute("CREATE TEMP TABLE w (x int)", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = c
        .build_transaction()
        .deferrable(true)
        .start()
        .await
        .unwrap();
    let got: String = super::scalar(&mut tx, "SHOW transaction_deferrable").await;
    assert_eq!(got, "on");
    let got: String = super::scalar(&mut tx, "SHOW transaction_read_only").await;
    assert_eq!(got, "on", "the session default applies to what was not set");
    tx.rollback().await.unwrap();
}

/// Holds. Promise (client.md "Transactions" and "Cancellation and timeouts"): a `Transaction`
/// dropped by a panic is rolled back with the next request, and the connection is reusable
/// (what a pool asks) before that request.
///
/// Steps: insert in a transaction, panic while holding it (`catch_unwind`), then check
/// `is_reusable`, the table and the status.
#[tokio::test]
async fn holds_a_transaction_dropped_by_a_panic_is_rolled_back() {
    use futures_util::FutureExt;
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let caught = std::panic::AssertUnwindSafe(async {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        let mut sp = tx.savepoint("inner").await.unwrap();
        sp.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        panic!("the caller's code failed mid-transaction");
    })
    .catch_unwind()
    .await;
    assert!(caught.is_err());
    assert!(c.is_reusable(), "the rollback is owed: a pool may lend it");
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0, "nothing of the panicked transaction was committed");
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
}

/// Holds. Promise (client.md "Transactions", pipelining.md): a pipeline inside a transaction
/// is part of it; in abort-on-error mode a failure skips the rest of the block and fails the
/// transaction, whose `commit()` then reports that nothing was saved.
#[tokio::test]
async fn holds_a_failed_pipeline_inside_a_transaction_makes_commit_report_nothing_saved() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let mut p = tx.pipeline_with(
        slipstream_pg::PipelineOptions::new().mode(slipstream_pg::PipelineMode::AbortOnError),
    );
    p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    p.execute("SELECT 1/0", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (3)", &[]).await.unwrap();
    let results = p.end().await;
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(
        results[1].as_ref().unwrap_err().code().unwrap().code(),
        "22012"
    );
    assert_eq!(results[2].as_ref().unwrap_err().kind(), ErrorKind::Aborted);
    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
    let e = tx.commit().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);
}

/// Holds. Promise (client.md "COPY"): COPY on a connection in a failed transaction is refused
/// by the server with 25P02, without a hang, and the caller's transaction stays theirs to roll
/// back; a COPY TO STDOUT that fails part-way (an error in row 5000) reports the server's
/// error after the rows sent before it, fails the transaction, and leaves the connection in
/// step.
#[tokio::test]
async fn holds_copy_in_a_failed_transaction_and_copy_out_failing_mid_stream() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = bounded(
        "copy_in in a failed transaction",
        tx.copy_in("COPY t FROM STDIN"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "25P02", "{e}");
    let e = bounded(
        "copy_out in a failed transaction",
        tx.copy_out("COPY t TO STDOUT"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "25P02", "{e}");
    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
    tx.rollback().await.unwrap();

    let mut tx = c.transaction().await.unwrap();
    let mut out = tx
        .copy_out("COPY (SELECT 10000 / (5000 - g) FROM generate_series(1, 9999) g) TO STDOUT")
        .await
        .unwrap();
    let mut chunks = 0;
    let e = loop {
        match bounded("copy_out failing mid-stream", out.next()).await {
            Ok(Some(_)) => chunks += 1,
            Ok(None) => panic!("the COPY ended without its error after {chunks} chunks"),
            Err(e) => break e,
        }
    };
    assert_eq!(chunks, 4999, "every row before the failing one arrives");
    assert_eq!(e.code().unwrap().code(), "22012", "{e}");
    assert_eq!(out.rows(), None);
    drop(out);
    assert_eq!(tx.transaction_status(), TransactionStatus::Failed);
    tx.rollback().await.unwrap();
    one(&mut c, "after a failed COPY TO STDOUT").await;
}

/// Holds. Promise (client.md "COPY", "Streams"): a COPY inside a savepoint that is aborted,
/// or dropped, is undone with the savepoint; the outer transaction goes on and commits the
/// rest; a finished COPY in a rolled-back transaction loads nothing.
#[tokio::test]
async fn holds_copy_inside_savepoints_and_rolled_back_transactions() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    let mut copy = tx.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"1\n2\n").await.unwrap();
    assert_eq!(copy.finish().await.unwrap(), 2);
    {
        let mut sp = tx.savepoint("aborted copy").await.unwrap();
        let mut copy = sp.copy_in("COPY t FROM STDIN").await.unwrap();
        copy.write(b"3\n").await.unwrap();
        copy.abort("not this one").await.unwrap();
        assert_eq!(sp.transaction_status(), TransactionStatus::Failed);
        sp.rollback().await.unwrap();
    }
    {
        let mut sp = tx.transaction().await.unwrap();
        let mut copy = sp.copy_in("COPY t FROM STDIN").await.unwrap();
        copy.write(b"4\n").await.unwrap();
        drop(copy);
        // The savepoint guard dropped too: both are undone with the next request.
    }
    let mut copy = tx.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"5\n").await.unwrap();
    assert_eq!(copy.finish().await.unwrap(), 1);
    tx.commit().await.unwrap();
    let ids: Vec<i32> = super::column(&mut c, "SELECT id FROM t ORDER BY id").await;
    assert_eq!(ids, vec![1, 2, 5]);

    let mut tx = c.transaction().await.unwrap();
    let mut copy = tx.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"6\n").await.unwrap();
    copy.finish().await.unwrap();
    tx.rollback().await.unwrap();
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 3);
}

/// Holds. Promise (client.md "Cancellation and timeouts": a dropped `CopyOut` is discarded):
/// inside the caller's transaction, a `COPY TO STDOUT` dropped after each of its polls in turn
/// leaves that transaction open (not failed) and the next call in step. cancellation.rs runs
/// `copy_out` at every poll in autocommit only.
#[tokio::test]
async fn holds_copy_out_dropped_at_every_poll_inside_a_transaction() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut completed = false;
    for k in 1..=MAX_POLLS {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        let outcome = bounded(
            "copy_out",
            DropAfter::new(
                async {
                    let mut out = tx
                        .copy_out(
                            "COPY (SELECT g, repeat('x', 50) FROM generate_series(1, 20000) g) \
                             TO STDOUT (FORMAT binary)",
                        )
                        .await?;
                    let mut bytes = 0;
                    while let Some(chunk) = out.next().await? {
                        bytes += chunk.len();
                    }
                    Ok::<_, slipstream_pg::Error>((bytes, out.rows()))
                },
                k,
            ),
        )
        .await;
        let row = bounded(
            "the call after the drop",
            tx.query_one("SELECT $1::int4", &[&(k as i32)]),
        )
        .await
        .unwrap_or_else(|e| panic!("copy_out dropped at poll {k}: next call failed: {e}"));
        assert_eq!(row.get::<_, i32>(0).unwrap(), k as i32);
        assert_eq!(
            tx.transaction_status(),
            TransactionStatus::InTransaction,
            "poll {k}"
        );
        tx.commit().await.unwrap();
        if let Some(r) = outcome {
            let (bytes, rows) = r.unwrap();
            assert_eq!(rows, Some(20000));
            assert!(bytes > 20000 * 50, "{bytes}");
            completed = true;
            break;
        }
    }
    assert!(
        completed,
        "copy_out did not complete within {MAX_POLLS} polls"
    );
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert!(
        n >= 2,
        "every transaction around a dropped COPY committed its insert"
    );
}

/// Holds. Promise (client.md "COPY": data in the format the statement names): a binary COPY
/// TO STDOUT fed back through a binary COPY FROM STDIN copies every value exactly, NULLs,
/// empty strings and a 24 MiB row included (past the 16 MiB a length prefix is trusted for,
/// so its memory grows as its bytes arrive: client.md "Limits").
#[tokio::test]
async fn holds_binary_copy_round_trips_every_value() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TABLE a (id int, v text, b bytea); CREATE TABLE b (LIKE a); \
         INSERT INTO a VALUES (1, NULL, NULL), (2, '', ''), (3, repeat('é', 12 * 1024 * 1024), \
         decode(repeat('00ff', 1000), 'hex'))",
    )
    .await
    .unwrap();
    let mut out = c
        .copy_out("COPY a TO STDOUT (FORMAT binary)")
        .await
        .unwrap();
    let mut data = Vec::new();
    while let Some(chunk) = out.next().await.unwrap() {
        data.extend_from_slice(&chunk);
    }
    assert_eq!(out.rows(), Some(3));
    let mut copy = c
        .copy_in("COPY b FROM STDIN (FORMAT binary)")
        .await
        .unwrap();
    copy.write(&data).await.unwrap();
    assert_eq!(copy.finish().await.unwrap(), 3);
    let differ: i64 = super::scalar(
        &mut c,
        "SELECT count(*) FROM ((TABLE a EXCEPT TABLE b) UNION ALL (TABLE b EXCEPT TABLE a)) d",
    )
    .await;
    assert_eq!(differ, 0);
    let nulls: i64 = super::scalar(&mut c, "SELECT count(*) FROM b WHERE v IS NULL").await;
    assert_eq!(nulls, 1);
}

/// Promise (`Transaction::commit`'s rustdoc: "Commits (or releases the savepoint). If a
/// statement in the transaction failed, PostgreSQL turns `COMMIT` into a rollback; this
/// returns an error then"; client.md: a savepoint "undoes only the savepoint"): committing a
/// savepoint in which a statement failed undoes that savepoint, reports that nothing of it was
/// saved, and leaves the enclosing transaction usable, as committing a failed transaction
/// rolls it back.
///
/// Steps: in a transaction, insert 1; in a savepoint, insert 2 and fail a statement; commit the
/// savepoint; insert 3 and commit the transaction.
///
/// Before the fix: the savepoint's `RELEASE` was refused with 25P02 ("current transaction is
/// aborted"), which neither named the savepoint nor undid it, and the guard was spent: the
/// enclosing transaction stayed failed, so inserting 3 failed with 25P02 and the outer
/// `commit()` lost row 1 too. (tokio-postgres behaves as the old code did; PostgreSQL does not
/// turn a refused `RELEASE` into a rollback as it does a `COMMIT`.)
#[tokio::test]
async fn attack_committing_a_failed_savepoint_rolls_it_back_not_the_whole_transaction() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let mut sp = tx.savepoint("risky part").await.unwrap();
    sp.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    sp.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = sp.commit().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert!(
        e.to_string().contains("risky part"),
        "names the savepoint: {e}"
    );
    assert!(e.to_string().contains("nothing"), "says what was kept: {e}");
    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    tx.execute("INSERT INTO t VALUES (3)", &[])
        .await
        .expect("the enclosing transaction goes on");
    tx.commit().await.unwrap();
    let xs: Vec<i32> = super::column(&mut c, "SELECT x FROM t ORDER BY x").await;
    assert_eq!(xs, vec![1, 3]);

    // A nested transaction (generated name) the same way, and one whose commit is refused
    // for another reason (its savepoint released by hand) still reports the server's error.
    let mut tx = c.transaction().await.unwrap();
    let mut nested = tx.transaction().await.unwrap();
    nested
        .execute("INSERT INTO t VALUES (4)", &[])
        .await
        .unwrap();
    nested.execute("SELECT 1/0", &[]).await.unwrap_err();
    let e = nested.commit().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    let mut sp = tx.savepoint("by hand").await.unwrap();
    sp.batch_execute("RELEASE SAVEPOINT \"by hand\"")
        .await
        .unwrap();
    let e = sp.commit().await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "3B001", "{e}");
    tx.rollback().await.unwrap();
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 2);
}

/// How long the notification attack waits before calling a wait a hang. Only bounds the
/// failure: a fixed client answers at once.
const HANG: std::time::Duration = std::time::Duration::from_secs(5);

/// Promise (client.md "Notifications": `wait_for_notification` "cancel-safe: wrap in a
/// timeout to poll"; the brief's "never a hang"): waiting for a notification inside a
/// transaction, where PostgreSQL holds every notification until the transaction ends, is a
/// clear error, not a wait that can only end with the connection; nothing is lost.
///
/// Steps: LISTEN; open a `Transaction` (then a `BEGIN` sent as SQL, then a failed one);
/// another session NOTIFYs; call `tx.wait_for_notification()` and pull from
/// `tx.notifications()`; end the transaction and wait again.
///
/// Before the fix: both waited until the timeout ([`HANG`]), though the notification had
/// been sent: the server delivers it only after the transaction.
#[tokio::test]
async fn attack_waiting_for_a_notification_inside_a_transaction_is_refused_not_a_hang() {
    use futures_util::StreamExt;
    let (cluster, mut c) = super::setup().await;
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("LISTEN jobs").await.unwrap();

    let mut tx = c.transaction().await.unwrap();
    other.batch_execute("NOTIFY jobs, 'one'").await.unwrap();
    let e = tokio::time::timeout(HANG, tx.wait_for_notification())
        .await
        .unwrap_or_else(|_| panic!("wait_for_notification in a transaction hung ({HANG:?})"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("transaction"), "{e}");
    {
        let mut stream = tx.notifications().await.unwrap();
        let next = tokio::time::timeout(HANG, stream.next())
            .await
            .unwrap_or_else(|_| panic!("a notification stream in a transaction hung ({HANG:?})"));
        assert_eq!(next.unwrap().unwrap_err().kind(), ErrorKind::Usage);
        assert!(
            stream.next().await.is_none(),
            "the stream ends after its error"
        );
    }
    tx.commit().await.unwrap();
    let n = bounded(
        "the notification after the commit",
        c.wait_for_notification(),
    )
    .await
    .unwrap();
    assert_eq!(n.payload(), "one", "delivered once the transaction ended");

    // The same after a BEGIN sent as SQL, and in a failed transaction.
    c.batch_execute("BEGIN").await.unwrap();
    let e = tokio::time::timeout(HANG, c.wait_for_notification())
        .await
        .unwrap_or_else(|_| panic!("wait_for_notification after BEGIN hung ({HANG:?})"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    c.batch_execute("SELECT 1/0").await.unwrap_err();
    let e = tokio::time::timeout(HANG, c.wait_for_notification())
        .await
        .unwrap_or_else(|_| panic!("wait_for_notification in a failed transaction hung"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    c.batch_execute("ROLLBACK").await.unwrap();
    other.batch_execute("NOTIFY jobs, 'two'").await.unwrap();
    let n = bounded(
        "a notification outside a transaction",
        c.wait_for_notification(),
    )
    .await
    .unwrap();
    assert_eq!(n.payload(), "two");
}

/// Holds. Promise (pipelining.md, "a block dropped part-way": "Inside your own BEGIN, the
/// abandoned block fails that transaction and its COMMIT reports the rollback"; a block still
/// wholly in the write buffer is taken back and nothing of it runs): a `Transaction`'s
/// abort-on-error block abandoned by a `?` on a client-side failure never lets part of the
/// block commit with the transaction.
///
/// Steps: for a small block (still buffered) and a large one (sent): in a transaction, insert
/// 1; queue inserts of 2 in a block, then a value its statement cannot take, and drop the
/// block; commit the transaction.
#[tokio::test]
async fn holds_a_block_abandoned_inside_a_transaction_never_commits_in_part() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int4)").await.unwrap();
    let credit = c.prepare("INSERT INTO t VALUES ($1)").await.unwrap();
    for block in [1usize, 5000] {
        c.batch_execute("TRUNCATE t").await.unwrap();
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        let queued: Result<(), slipstream_pg::Error> = async {
            let mut p = tx.pipeline_with(
                slipstream_pg::PipelineOptions::new()
                    .mode(slipstream_pg::PipelineMode::AbortOnError),
            );
            for _ in 0..block {
                p.execute("INSERT INTO t VALUES (2)", &[]).await?;
            }
            p.execute(&credit, &[&100i64]).await?; // int8 for an int4 parameter: refused
            p.end().await;
            Ok(())
        }
        .await;
        assert_eq!(queued.unwrap_err().kind(), ErrorKind::Conversion);
        let committed = tx.commit().await;
        eprintln!("block of {block}: commit {committed:?}");
        let xs: Vec<i32> = super::column(&mut c, "SELECT DISTINCT x FROM t ORDER BY x").await;
        match committed {
            // Nothing of the block ran: the transaction's own insert commits.
            Ok(()) => assert_eq!(xs, vec![1], "block of {block}"),
            // The block ran and was failed on purpose: the whole transaction rolled back.
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Aborted, "block of {block}: {e}");
                assert!(xs.is_empty(), "block of {block}: {xs:?}");
            }
        }
        assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    }
}

/// A reader that gives `good` bytes, then fails; a writer that fails at once.
struct Failing {
    good: Vec<u8>,
}

impl tokio::io::AsyncRead for Failing {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.good.is_empty() {
            return std::task::Poll::Ready(Err(std::io::Error::other("disk read error")));
        }
        let n = self.good.len().min(buf.remaining());
        buf.put_slice(&self.good[..n]);
        self.good.drain(..n);
        std::task::Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Failing {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Err(std::io::Error::other("disk full")))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Promise (`Error::is_closed`: "True when the connection can no longer be used"; client.md
/// "Errors": "After `Io` ... the connection is broken"; its example reconnects on
/// `is_closed()`): the error of a failing *caller's* reader or writer in
/// `CopyIn::write_from` / `CopyOut::write_to` does not claim the connection is lost, and the
/// COPY can still be aborted (or its rest discarded) on the same connection.
///
/// Steps: `write_from` a reader that fails after two rows; check the error, abort, check the
/// table and the connection. Then `write_to` a writer that fails; drop the `CopyOut`; check
/// the connection.
///
/// Before the fix: both errors were `ErrorKind::Io` with `is_closed() == true` ("connection
/// lost: reconnect" by the documented pattern), although the connection and the COPY were
/// fine: a pool user would throw away a good connection, and the error did not say the COPY
/// was still open.
#[tokio::test]
async fn attack_a_failing_copy_reader_or_writer_does_not_claim_the_connection_is_lost() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    let e = copy
        .write_from(Failing {
            good: b"1\n2\n".to_vec(),
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("disk read error"), "{e}");
    assert!(!e.is_closed(), "the connection is not lost: {e}");
    assert!(e.to_string().contains("abort"), "says what to do: {e}");
    copy.abort("the input file could not be read")
        .await
        .unwrap();
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);

    let mut out = c
        .copy_out("COPY (SELECT generate_series(1, 1000)) TO STDOUT")
        .await
        .unwrap();
    let e = out
        .write_to(Failing { good: Vec::new() })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("disk full"), "{e}");
    assert!(!e.is_closed(), "the connection is not lost: {e}");
    drop(out);
    one(&mut c, "after a failing COPY writer").await;
    assert!(c.is_reusable());
}

/// Promise (client.md "COPY": "bad data is a server error here"; the brief's "errors name
/// what failed"): a COPY FROM STDIN refused for bad data names the line and column that
/// failed, as psql shows it (the server sends them as the error's CONTEXT), through `finish()`
/// and through the `Sink`.
///
/// Steps: load five lines whose third has a bad number, by `finish()` and by closing the sink;
/// read the error's text.
///
/// Before the fix: the text was only `error 22P02: invalid input syntax for type integer:
/// "x"`, which does not say where in a file of a million lines the bad value is (the context
/// was only in `as_db_error().where_()`).
#[tokio::test]
async fn attack_a_copy_data_error_names_its_line() {
    use futures_util::SinkExt;
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int, name text)")
        .await
        .unwrap();
    let data = b"1\ta\n2\tb\nx\tc\n4\td\n5\te\n";
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(data).await.unwrap();
    let e = copy.finish().await.unwrap_err();
    assert_eq!(e.code().unwrap().code(), "22P02", "{e}");
    assert!(e.to_string().contains("line 3, column id"), "{e}");
    eprintln!("{e}");

    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.send(bytes::Bytes::from_static(data)).await.unwrap();
    let e = copy.close().await.unwrap_err();
    assert!(e.to_string().contains("line 3, column id"), "{e}");
    drop(copy);
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);
}

/// Rows (of about 1 KiB) written before the notice attack gives up: 100 times what the
/// socket buffers on both sides hold, so the client's writes have waited for room, and read
/// what the server sent, long before.
const NOTICE_ROWS_LIMIT: usize = 200_000;

/// Promise (client.md "Limits": what the server sends never makes the client allocate without
/// bound, except data the application asked for and has not read; notices go to the notice
/// handler): the notices a long COPY FROM STDIN raises (a trigger's `RAISE NOTICE` per row)
/// reach the handler while the COPY runs, instead of piling up unparsed in the client's read
/// buffer until `finish()`.
///
/// Steps: a table whose trigger raises a notice per row; a handler that counts; write rows of
/// 1 KiB, 100 at a time, until the handler has seen a notice, or give up at
/// [`NOTICE_ROWS_LIMIT`].
///
/// Before the fix: the writes read the server's output into the read buffer only to keep the
/// socket from deadlocking, and nothing parsed it until `finish()`: the handler saw nothing
/// while 200,000 rows were written, and the buffer grew by every notice read (about 100 bytes
/// a row: 1 GB for a ten-million-row load).
#[tokio::test]
async fn attack_notices_raised_during_a_copy_in_reach_the_handler_while_it_runs() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TABLE t (id int, pad text); \
         CREATE FUNCTION tell() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE NOTICE 'row %', NEW.id; RETURN NEW; END $$; \
         CREATE TRIGGER tell BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION tell()",
    )
    .await
    .unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    // Relaxed: the count is read on the same task that runs the handler.
    c.set_notice_handler(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    let mut written = 0;
    let mut batch = String::new();
    let pad = "x".repeat(1000);
    while seen.load(Ordering::Relaxed) == 0 {
        assert!(
            written < NOTICE_ROWS_LIMIT,
            "no notice reached the handler while {written} rows were written: they are held \
             unread in memory until finish()"
        );
        batch.clear();
        for i in written..written + 100 {
            batch.push_str(&format!("{i}\t{pad}\n"));
        }
        written += 100;
        copy.write(batch.as_bytes()).await.unwrap();
    }
    eprintln!("first notice after {written} rows written");
    assert_eq!(copy.finish().await.unwrap(), written as u64);
    assert_eq!(
        seen.load(Ordering::Relaxed),
        written,
        "every row's notice, once"
    );
}

/// Promise (`CopyIn::abort`: "Returns once the server has confirmed"; client.md "Errors":
/// after a FATAL server error the connection is broken and later calls fail with `Closed`):
/// an abort whose session was ended by the server (`pg_terminate_backend`) reports that, not
/// success, so the caller knows to reconnect instead of reading the next call's `Closed` as a
/// new failure.
///
/// Steps: start a COPY; terminate its backend from another session and wait until it is gone;
/// `abort()`.
///
/// Before the fix: `abort()` took any server error as the expected confirmation of its
/// `CopyFail`, the FATAL "terminating connection due to administrator command" included, and
/// returned `Ok(())` on a connection that was closed.
#[tokio::test]
async fn attack_an_abort_whose_session_was_terminated_is_not_a_success() {
    let (cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"1\n").await.unwrap();
    other
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    assert!(
        cluster
            .backend_gone_within(pid, std::time::Duration::from_secs(30))
            .unwrap(),
        "backend {pid} still there"
    );
    let r = bounded(
        "abort on a terminated session",
        copy.abort("changed my mind"),
    )
    .await;
    let e = r.expect_err("abort reported success on a session the server had ended");
    assert!(e.is_closed(), "{e}");
    let e = c.batch_execute("SELECT 1").await.unwrap_err();
    assert!(e.is_closed(), "{e}");
    let n: i64 = super::scalar(&mut other, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);
}

/// Holds. Promise (client.md "Streams": "a `CopyIn` sink dropped before it is closed aborts the
/// COPY"; "COPY": dropping a `CopyIn` loads nothing): a COPY fed through the `Sink` (`forward`,
/// which closes it) and dropped after each of its polls in turn loads all of its rows or none,
/// never part, and the next call answers in step. cancellation.rs drops `write()`/`finish()`
/// at every poll, not the `Sink`'s `poll_ready`/`poll_flush`/`poll_close`.
#[tokio::test]
async fn holds_a_copy_sink_dropped_at_every_poll_loads_all_or_nothing() {
    use futures_util::{StreamExt, stream};
    const ROWS: usize = 20_000;
    let pad = "x".repeat(1000);
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE UNLOGGED TABLE t (id int, name text)")
        .await
        .unwrap();
    let mut completed = false;
    for k in 1..=MAX_POLLS {
        c.batch_execute("TRUNCATE t").await.unwrap();
        let outcome = bounded(
            "copy_in through the sink",
            DropAfter::new(
                async {
                    // 1 KiB rows, 20 MiB in all: far past the socket buffers, so the sink
                    // waits for room many times, and is dropped there too.
                    let lines = stream::iter(0..ROWS)
                        .map(|i| Ok(bytes::Bytes::from(format!("{i}\t{pad}\n"))));
                    let mut copy = c.copy_in("COPY t FROM STDIN").await?;
                    lines.forward(&mut copy).await?;
                    Ok::<_, slipstream_pg::Error>(copy.rows())
                },
                k,
            ),
        )
        .await;
        let n: i64 = bounded(
            "the count after the drop",
            c.query_one("SELECT count(*) FROM t", &[]),
        )
        .await
        .unwrap_or_else(|e| panic!("sink dropped at poll {k}: next call failed: {e}"))
        .get(0)
        .unwrap();
        assert!(
            n == 0 || n == ROWS as i64,
            "sink dropped at poll {k}: {n} of {ROWS} rows loaded"
        );
        assert_eq!(c.transaction_status(), TransactionStatus::Idle);
        if let Some(r) = outcome {
            assert_eq!(r.unwrap(), Some(ROWS as u64));
            assert_eq!(n, ROWS as i64);
            eprintln!("completed at poll {k}");
            completed = true;
            break;
        }
    }
    assert!(
        completed,
        "the sink did not complete within {MAX_POLLS} polls"
    );
}

/// Bytes of COPY data the mid-COPY failure attack writes before it gives up: far more than
/// the socket buffers hold, so a client that looks at what the server sent has seen its error
/// long before.
const FAILED_COPY_BYTES_LIMIT: usize = 64 << 20;

/// Promise (client.md "COPY": "bad data is a server error"; the brief's "server errors
/// mid-COPY"): once the server has failed a COPY FROM STDIN (a unique violation in its second
/// row), the client's writes return that error instead of sending data the server only
/// discards, `finish()` returns it too, nothing is loaded and the connection is in step.
/// libpq's `PQputCopyData` stops likewise.
///
/// Steps: a table with a primary key; write a duplicate key, then rows of 1 KiB until a write
/// fails or [`FAILED_COPY_BYTES_LIMIT`] bytes were written; `finish()`.
///
/// Before the fix: every write succeeded: the client never read the server's error until
/// `finish()`, and sent all 64 MiB (a whole multi-gigabyte file, in real use) to a server that
/// threw it away.
#[tokio::test]
async fn attack_writes_after_the_server_failed_the_copy_return_its_error() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
        .await
        .unwrap();
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"1\ta\n1\tb\n").await.unwrap();
    let pad = "x".repeat(1000);
    let (mut written, mut i) = (0, 2);
    let e = loop {
        assert!(
            written < FAILED_COPY_BYTES_LIMIT,
            "{written} bytes written after the server failed the COPY, and no write said so"
        );
        let mut batch = String::new();
        for _ in 0..64 {
            batch.push_str(&format!("{i}\t{pad}\n"));
            i += 1;
        }
        written += batch.len();
        if let Err(e) = copy.write(batch.as_bytes()).await {
            break e;
        }
    };
    eprintln!("the write after {written} bytes failed: {e}");
    assert_eq!(e.code().unwrap().code(), "23505", "{e}");
    let again = copy.write(b"9\tz\n").await.unwrap_err();
    assert_eq!(again.code().unwrap().code(), "23505", "{again}");
    let e = bounded("finish after the failure", copy.finish())
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "23505", "{e}");
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 0);

    // abort() and a drop after the failure are quiet and leave the connection in step.
    for abort in [true, false] {
        let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
        copy.write(b"1\ta\n1\tb\n").await.unwrap();
        // Rows, not one endless line: COPY checks the key when it flushes its buffered rows.
        let mut failed = false;
        for j in 0..(FAILED_COPY_BYTES_LIMIT / (64 * 1000)) {
            let batch: String = (0..64)
                .map(|k| format!("{}\t{pad}\n", 2 + j * 64 + k))
                .collect();
            if copy.write(batch.as_bytes()).await.is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "no write reported the failed COPY");
        if abort {
            bounded("abort after the failure", copy.abort("stop"))
                .await
                .unwrap();
        } else {
            drop(copy);
        }
        one(&mut c, "after a failed COPY ended by abort or drop").await;
    }
}

/// Promise (bad input gets an error that names what failed and what to do): beginning a
/// transaction on a connection whose transaction has failed says it failed and to roll it
/// back. Steps: `BEGIN; SELECT 1/0` sent as SQL, then `Client::transaction`; then `ROLLBACK`
/// and `Client::transaction` again.
/// Before (session 44, helper-48 noticed): "a transaction is already open ... use
/// Transaction::transaction() or Transaction::savepoint()", which would only fail again.
#[tokio::test]
async fn beginning_inside_a_failed_transaction_says_to_roll_it_back() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("SELECT 1/0").await.unwrap_err();
    let e = c.transaction().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("failed transaction") && text.contains("roll it back"),
        "{text}"
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    c.transaction().await.unwrap().commit().await.unwrap();
}
