//! Attacks on what a pipeline reports for each operation, checked against what the server
//! really kept (helper 32, session 42): work a `COMMIT` in the block, or a statement that
//! commits at once, already made durable is never reported as rolled back, and a dropped
//! abort-on-error block commits none of its open group.

use slipstream_pg::{Client, ErrorKind, Output, PipelineMode, PipelineOptions, SqlState};

use super::engine::bounded;
use super::{describe, ints};

fn abort_mode() -> PipelineOptions {
    PipelineOptions::new().mode(PipelineMode::AbortOnError)
}

/// Promise (docs/pipelining.md): "A commit can fail at the `Sync` itself (a deferred
/// constraint ...): every operation of that implicit transaction whose result has not been
/// taken gets the error", and a `COMMIT` queued in the block ends the implicit transaction
/// before it.
///
/// Steps: an abort-mode block `INSERT 1; COMMIT; INSERT 2; INSERT 2` on a table whose unique
/// constraint is deferred, so the duplicate fails only when the `Sync` commits. Row 1 was
/// committed by the block's `COMMIT`.
///
/// Before the fix: operations 0 and 1 (the committed `INSERT 1` and the `COMMIT` itself) were
/// reported as "rolled back: committing its implicit transaction failed" while row 1 was in
/// the table: every operation since the sync point was marked, not those after the `COMMIT`.
#[tokio::test]
async fn a_commit_failing_at_the_sync_spares_what_a_commit_in_the_block_saved() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE u (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        .await
        .unwrap();
    let mut p = c.pipeline_with(abort_mode());
    p.execute("INSERT INTO u VALUES (1)", &[]).await.unwrap();
    p.commit().await.unwrap();
    p.execute("INSERT INTO u VALUES (2)", &[]).await.unwrap();
    p.execute("INSERT INTO u VALUES (2)", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    let kept = ints(&mut c, "SELECT x FROM u ORDER BY x").await;
    assert_eq!(kept, [1], "what the server kept");
    let seen = describe(&results);
    assert!(
        matches!(results[0], Ok(Output::Affected(1))),
        "row 1 was committed by the block's COMMIT: {seen:#?}"
    );
    assert!(matches!(results[1], Ok(Output::Done)), "{seen:#?}");
    for r in &results[2..] {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.code(), Some(SqlState::UNIQUE_VIOLATION), "{seen:#?}");
    }
}

/// Promise (docs/pipelining.md, `PipelineMode::AbortOnError`): the operations before a failure
/// are reported as rolled back because they were: "never as done", and never the reverse.
///
/// Steps: an abort-mode block `CREATE DATABASE; INSERT; SELECT 1/0`. PostgreSQL runs a
/// statement that cannot be inside a transaction block (CREATE DATABASE, VACUUM, ALTER SYSTEM,
/// ...) only as the first of an implicit transaction, and commits it as soon as it completes;
/// the `INSERT` runs in a new implicit transaction, which the failure rolls back.
///
/// Before the fix: operation 0 was reported as `Aborted` ("was rolled back: operation 2 failed
/// later in the same implicit transaction") while the database existed: a caller retrying the
/// block would then fail on "database already exists".
#[tokio::test]
async fn a_statement_that_commits_at_once_is_not_reported_as_rolled_back() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut p = c.pipeline_with(abort_mode());
    p.execute("CREATE DATABASE made_in_a_block", &[])
        .await
        .unwrap();
    p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
    let results = bounded("end", p.end()).await;
    let seen = describe(&results);
    let databases: i64 = super::scalar(
        &mut c,
        "SELECT count(*) FROM pg_database WHERE datname = 'made_in_a_block'",
    )
    .await;
    let rows: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!((databases, rows), (1, 0), "what the server kept");
    assert!(
        matches!(results[0], Ok(Output::Affected(0))),
        "the database was created and committed: {seen:#?}"
    );
    let rolled_back = results[1].as_ref().unwrap_err();
    assert_eq!(rolled_back.kind(), ErrorKind::Aborted, "{seen:#?}");
    assert_eq!(rolled_back.aborted_by(), Some(bad.id()));
}

/// Promise (`Pipeline` rustdoc, docs/pipelining.md "Dropping a pipeline"): "an open abort-mode
/// block is failed on purpose so that none of it commits", which is what makes
/// `p.execute(..)?` safe when a later operation fails on the client.
///
/// Steps: an abort-mode block `INSERT 10; sync()` (a group of its own, which commits), then
/// `BEGIN; INSERT 1; COMMIT; INSERT <an i64 for an int4 parameter>`: the last is refused on
/// the client, and the `?` drops the block with its open group unsent. Then the table, the
/// transaction status and the next call's answer are checked.
///
/// Before the fix: row 1 was committed. The drop appended an Execute of a missing portal to
/// fail the group, but behind the group's own `COMMIT`, which the server runs (and commits the
/// work before it) as soon as it reads it.
#[tokio::test]
async fn a_dropped_block_commits_nothing_of_its_open_group_even_with_a_commit_in_it() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int4)").await.unwrap();
    let insert = c.prepare("INSERT INTO t VALUES ($1)").await.unwrap();
    async fn block(
        c: &mut Client,
        insert: &slipstream_pg::Statement,
    ) -> Result<(), slipstream_pg::Error> {
        let mut p = c.pipeline_with(abort_mode());
        p.execute(insert, &[&10i32]).await?;
        p.sync();
        p.execute("BEGIN", &[]).await?;
        p.prepare("SELECT 1").await?;
        p.execute(insert, &[&1i32]).await?;
        p.commit().await?;
        p.execute(insert, &[&2i64]).await?; // refused here: the block is dropped
        p.end().await;
        Ok(())
    }
    let e = bounded("the block", block(&mut c, &insert))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conversion, "{e}");
    let marker = bounded("the next call", c.query_one("SELECT $1::int4", &[&77i32]))
        .await
        .unwrap();
    assert_eq!(marker.get::<_, i32>(0).unwrap(), 77);
    assert_eq!(
        c.transaction_status(),
        slipstream_pg::TransactionStatus::Idle
    );
    assert!(c.is_reusable());
    let kept = ints(&mut c, "SELECT x FROM t ORDER BY x").await;
    assert_eq!(
        kept,
        [10],
        "the synced group commits; nothing of the dropped open group may"
    );
    let leaked: i64 = super::scalar(
        &mut c,
        "SELECT count(*) FROM pg_prepared_statements WHERE statement = 'SELECT 1'",
    )
    .await;
    assert_eq!(leaked, 0, "the dropped block's prepare stays on the server");
}
