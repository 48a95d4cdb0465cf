//! Attacks on what a pipeline reports when the connection is lost between an operation's
//! reply and its sync point (helper h70). docs/pipelining.md promises "Rolled-back work is
//! never reported as done": outside `BEGIN`, an operation's work is committed only at its
//! sync point, and `end()` reports the committed outcome ("In continue-on-error mode
//! `process(op)` reads through the operation's own `Sync`, so the commit's outcome is always
//! part of its result").
//!
//! Method: a deferred constraint trigger ends the session (`pg_terminate_backend` of its own
//! backend) when the implicit transaction commits at the `Sync`, after the `INSERT`'s
//! `CommandComplete` has been sent. The server's FATAL error then ends the connection, the
//! `INSERT` is rolled back with its transaction, and another connection checks what was kept.
//! The same happens when a server crashes at commit, or the network fails after the reply.

use slipstream_pg::{Output, PipelineMode, PipelineOptions};

/// Steps: a table whose deferred trigger terminates the inserting backend at commit; a
/// pipeline block (abort-on-error, then continue-on-error, each on a new connection) that
/// inserts one row; `end()`. The row is not stored, so the `INSERT` must not be reported as
/// `Ok(Affected(1))`: its outcome is an error saying the connection was lost before the
/// commit was known.
///
/// Before the fix: in both modes `end()` returned `Ok(Affected(1))` for the `INSERT`, and the
/// table was empty. Only operations whose reply had not been read were failed ("may have run
/// (and committed)"); one whose reply was read kept its result although its transaction's end
/// was never read.
#[tokio::test]
async fn break_an_operation_whose_commit_was_lost_is_reported_as_done() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut w = slipstream_pg::connect(&cluster.url()).await.unwrap();
    w.batch_execute(
        "CREATE TABLE lost (a int);
         CREATE FUNCTION end_session() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON lost
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_session()",
    )
    .await
    .unwrap();
    for mode in [PipelineMode::AbortOnError, PipelineMode::ContinueOnError] {
        let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        let insert = p.execute("INSERT INTO lost VALUES (1)", &[]).await.unwrap();
        let results = tokio::time::timeout(std::time::Duration::from_secs(60), p.end())
            .await
            .expect("end() hung");
        let stored: i64 = w
            .query_one("SELECT count(*) FROM lost", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(stored, 0, "{mode:?}: the trigger let the commit through");
        let outcome = &results[insert.id() as usize];
        assert!(
            !matches!(outcome, Ok(Output::Affected(_))),
            "{mode:?}: an INSERT that was rolled back is reported as done: {:?}",
            super::describe(&results)
        );
        let e = outcome.as_ref().unwrap_err();
        assert!(e.is_closed(), "{mode:?}: {e}");
        assert!(
            e.to_string().contains("terminat"),
            "{mode:?}: names the cause: {e}"
        );
    }
}
