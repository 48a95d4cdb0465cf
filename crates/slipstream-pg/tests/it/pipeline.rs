use std::time::Duration;

use slipstream_pg::types::Type;
use slipstream_pg::{
    Client, ErrorKind, Output, PipelineMode, PipelineOptions, SqlState, TransactionStatus,
};

use crate::{scalar, setup, wait_until_active};

fn abort_mode() -> PipelineOptions {
    PipelineOptions::new().mode(PipelineMode::AbortOnError)
}

async fn table(c: &mut Client) {
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        .await
        .unwrap();
}

async fn ids(c: &mut Client) -> Vec<i32> {
    c.query("SELECT id FROM t ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect()
}

#[tokio::test]
async fn results_come_back_in_queue_order() {
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT $1::int4 * 10").await.unwrap();
    for mode in [PipelineMode::ContinueOnError, PipelineMode::AbortOnError] {
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        for i in 0..200i32 {
            match i % 3 {
                0 => p.query(&stmt, &[&i]).await.unwrap(),
                1 => p
                    .query_typed("SELECT $1 + 0", &[(&(i * 10), Type::INT4)])
                    .await
                    .unwrap(),
                _ => p
                    .query(&format!("SELECT {} * 10", i) as &str, &[])
                    .await
                    .unwrap(),
            };
        }
        let results = p.end().await;
        assert_eq!(results.len(), 200);
        for (i, r) in results.into_iter().enumerate() {
            let Output::Rows(rows) = r.unwrap() else {
                panic!("operation {i}: not rows");
            };
            assert_eq!(rows[0].get::<_, i32>(0).unwrap(), i as i32 * 10, "{mode:?}");
        }
    }
}

#[tokio::test]
async fn continue_mode_runs_every_operation_after_a_failing_one() {
    let (_cluster, mut c) = setup().await;
    table(&mut c).await;
    let insert = c.prepare("INSERT INTO t VALUES ($1, 'x')").await.unwrap();
    let mut p = c.pipeline_with(crate::continue_on_error());
    let a = p.execute(&insert, &[&1i32]).await.unwrap();
    let dup = p.execute(&insert, &[&1i32]).await.unwrap();
    let b = p.execute(&insert, &[&2i32]).await.unwrap();
    let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
    let c3 = p.execute(&insert, &[&3i32]).await.unwrap();
    assert_eq!(p.process(&a).await.unwrap(), 1);
    assert_eq!(
        p.process(&dup).await.unwrap_err().code(),
        Some(SqlState::UNIQUE_VIOLATION)
    );
    assert_eq!(p.process(&b).await.unwrap(), 1);
    assert_eq!(
        p.process(&bad).await.unwrap_err().code(),
        Some(SqlState::DIVISION_BY_ZERO)
    );
    assert_eq!(p.process(&c3).await.unwrap(), 1);
    p.end().await;
    assert_eq!(ids(&mut c).await, vec![1, 2, 3]);
}

#[tokio::test]
async fn abort_mode_skips_later_operations_up_to_the_sync_and_names_the_failure() {
    let (_cluster, mut c) = setup().await;
    table(&mut c).await;
    let insert = c.prepare("INSERT INTO t VALUES ($1, 'x')").await.unwrap();
    let mut p = c.pipeline_with(abort_mode());
    p.execute(&insert, &[&1i32]).await.unwrap();
    let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
    p.execute(&insert, &[&2i32]).await.unwrap();
    p.commit().await.unwrap();
    p.sync();
    p.execute(&insert, &[&4i32]).await.unwrap();
    let results = p.end().await;

    // Row 1 was inserted, then rolled back with the block's implicit transaction: not Ok.
    let rolled_back = results[0].as_ref().unwrap_err();
    assert_eq!(rolled_back.kind(), ErrorKind::Aborted, "{rolled_back}");
    assert_eq!(rolled_back.aborted_by(), Some(bad.id()));
    assert!(
        rolled_back.to_string().contains("rolled back"),
        "{rolled_back}"
    );
    let failure = results[1].as_ref().unwrap_err();
    assert_eq!(failure.code(), Some(SqlState::DIVISION_BY_ZERO));
    for skipped in &results[2..4] {
        let e = skipped.as_ref().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
        assert_eq!(e.aborted_by(), Some(bad.id()));
        assert_eq!(
            e.code(),
            Some(SqlState::DIVISION_BY_ZERO),
            "carries the cause"
        );
        assert!(e.to_string().contains("operation 1 failed"), "{e}");
    }
    assert!(
        results[4].is_ok(),
        "after the sync point operations run again"
    );
    // The block before the sync was one implicit transaction: row 1 was rolled back with it.
    assert_eq!(ids(&mut c).await, vec![4]);
}

#[tokio::test]
async fn abort_mode_inside_begin_leaves_a_failed_transaction_to_roll_back() {
    let (_cluster, mut c) = setup().await;
    table(&mut c).await;
    let mut p = c.pipeline_with(abort_mode());
    p.execute("BEGIN", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    p.execute("SELECT 1/0", &[]).await.unwrap();
    let commit = p.commit().await.unwrap();
    let results = p.end().await;
    assert_eq!(
        results[commit.id() as usize].as_ref().unwrap_err().kind(),
        ErrorKind::Aborted
    );
    assert_eq!(c.transaction_status(), TransactionStatus::Failed);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert!(ids(&mut c).await.is_empty());
}

#[tokio::test]
async fn a_commit_of_a_failed_transaction_reports_the_rollback() {
    let (_cluster, mut c) = setup().await;
    table(&mut c).await;
    let mut p = c.pipeline_with(crate::continue_on_error());
    p.execute("BEGIN", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    let after = p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    let commit = p.commit().await.unwrap();
    assert_eq!(
        p.process(&after).await.unwrap_err().code(),
        Some(SqlState::IN_FAILED_SQL_TRANSACTION)
    );
    let e = p.process(&commit).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted);
    assert!(e.to_string().contains("rolled the transaction back"), "{e}");
    p.end().await;
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    assert!(ids(&mut c).await.is_empty());
}

/// `process(op)` returns while a later operation is still blocked on the server (on an
/// advisory lock another session holds), so its reply cannot have been read.
#[tokio::test]
async fn process_returns_an_operation_while_later_ones_are_still_unread() {
    let (cluster, mut c) = setup().await;
    let mut holder = slipstream_pg::connect(&cluster.url()).await.unwrap();
    for mode in [PipelineMode::ContinueOnError, PipelineMode::AbortOnError] {
        holder
            .batch_execute("SELECT pg_advisory_lock(42)")
            .await
            .unwrap();
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        let first = p.query("SELECT 'first'", &[]).await.unwrap();
        let blocked = p
            .query("SELECT pg_advisory_lock(42), 'blocked'", &[])
            .await
            .unwrap();
        let last = p.query("SELECT 'last'", &[]).await.unwrap();
        let rows = p.process(&first).await.unwrap();
        assert_eq!(rows[0].get::<_, &str>(0).unwrap(), "first");
        assert_eq!(p.unfinished(), 2, "{mode:?}");

        // A cancelled process() loses nothing: the lock is still held, so this times out.
        let waited = tokio::time::timeout(Duration::from_millis(50), p.process(&blocked)).await;
        assert!(
            waited.is_err(),
            "{mode:?}: the blocked operation cannot finish yet"
        );

        holder
            .batch_execute("SELECT pg_advisory_unlock(42)")
            .await
            .unwrap();
        let rows = p.process(&blocked).await.unwrap();
        assert_eq!(rows[0].get::<_, &str>(1).unwrap(), "blocked");
        let rows = p.process(&last).await.unwrap();
        assert_eq!(rows[0].get::<_, &str>(0).unwrap(), "last");
        p.end().await;
        c.batch_execute("SELECT pg_advisory_unlock_all()")
            .await
            .unwrap();
    }
}

/// With no window, all 100,000 requests are written before any reply is read by the caller:
/// only reading while writing keeps both socket buffers from filling.
#[tokio::test]
async fn a_pipeline_of_100000_operations_with_large_results_does_not_deadlock() {
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT repeat('x', $1)").await.unwrap();
    for options in [
        PipelineOptions::new()
            .max_in_flight(usize::MAX)
            .max_in_flight_bytes(usize::MAX),
        abort_mode()
            .max_in_flight(usize::MAX)
            .max_in_flight_bytes(usize::MAX),
        PipelineOptions::new(),
    ] {
        let run = async {
            let mut p = c.pipeline_with(options.clone());
            for _ in 0..100_000 {
                p.execute(&stmt, &[&1000i32]).await.unwrap();
            }
            p.end().await
        };
        let results = tokio::time::timeout(Duration::from_secs(300), run)
            .await
            .expect("the pipeline deadlocked");
        assert_eq!(results.len(), 100_000);
        assert!(
            results.iter().all(|r| matches!(r, Ok(Output::Affected(1)))),
            "{options:?}"
        );
    }
    assert_eq!(scalar::<i32>(&mut c, "SELECT 7").await, 7);
}

#[tokio::test]
async fn killing_the_backend_fails_every_pending_operation() {
    let (cluster, mut c) = setup().await;
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let mut p = c.pipeline_with(crate::continue_on_error());
    p.execute("SELECT pg_sleep(60)", &[]).await.unwrap();
    for i in 0..20 {
        p.query(&format!("SELECT {i}") as &str, &[]).await.unwrap();
    }
    let kill = async {
        wait_until_active(&mut watcher, pid).await;
        watcher
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
    };
    let (results, ()) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(p.end(), kill)
    })
    .await
    .expect("pending operations must fail, not hang");
    assert_eq!(results.len(), 21);
    for r in &results {
        let e = r.as_ref().unwrap_err();
        assert!(e.is_closed(), "{e}");
        assert!(e.to_string().contains("terminat"), "names the cause: {e}");
    }
    assert!(c.is_broken());
    let e = c
        .pipeline_with(crate::continue_on_error())
        .execute("SELECT 1", &[])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
}

#[tokio::test]
async fn a_dropped_pipeline_leaves_the_connection_usable() {
    let (_cluster, mut c) = setup().await;
    table(&mut c).await;
    let insert = c.prepare("INSERT INTO t VALUES ($1)").await.unwrap();

    // Continue mode, dropped with replies unread.
    {
        let mut p = c.pipeline_with(crate::continue_on_error());
        let mut ops = Vec::new();
        for i in 1..=10i32 {
            ops.push(p.execute(&insert, &[&i]).await.unwrap());
        }
        p.process(&ops[2]).await.unwrap();
    }
    assert_eq!(scalar::<i32>(&mut c, "SELECT 42").await, 42);

    // Abort mode, dropped before its Sync was even queued: the drop closes the block, and
    // an abandoned block commits nothing (all or nothing, even when abandoned).
    {
        let mut p = c.pipeline_with(abort_mode());
        for i in 11..=20i32 {
            p.execute(&insert, &[&i]).await.unwrap();
        }
    }
    assert_eq!(scalar::<i32>(&mut c, "SELECT 43").await, 43);
    assert_eq!(ids(&mut c).await, (1..=10).collect::<Vec<_>>());

    // A dropped pipeline followed directly by another one.
    {
        let mut p = c.pipeline_with(crate::continue_on_error());
        p.query("SELECT 1", &[]).await.unwrap();
    }
    let mut p = c.pipeline_with(crate::continue_on_error());
    let op = p.query("SELECT 44", &[]).await.unwrap();
    assert_eq!(
        p.process(&op).await.unwrap()[0].get::<_, i32>(0).unwrap(),
        44
    );
}

#[tokio::test]
async fn copy_is_refused_with_a_clear_error() {
    let (_cluster, mut c) = setup().await;
    table(&mut c).await;
    let mut p = c.pipeline_with(crate::continue_on_error());
    let e = p.execute("COPY t FROM STDIN", &[]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage);
    assert!(e.to_string().contains("copy_in"), "{e}");
    let op = p.query("SELECT 1", &[]).await.unwrap();
    assert_eq!(p.process(&op).await.unwrap().len(), 1);
    p.end().await;
}

/// COPY to and from a server-side file is an ordinary statement, and runs in a pipeline even
/// where its table, columns or path mention stdin or stdout (they were refused as streams).
#[tokio::test]
async fn server_side_copies_naming_stdin_or_stdout_run_in_a_pipeline() {
    let (cluster, mut c) = setup().await;
    c.batch_execute("CREATE TABLE stdin (id int, stdout text)")
        .await
        .unwrap();
    let path = cluster.data_dir().join("stdout.csv");
    let path = path.to_str().unwrap();
    let mut p = c.pipeline();
    p.execute(
        &format!("COPY (SELECT 1 AS id, 'to stdout' AS stdout) TO '{path}' (FORMAT csv)"),
        &[],
    )
    .await
    .unwrap();
    let load = p
        .execute(
            &format!("COPY stdin (id, stdout) FROM '{path}' (FORMAT csv)"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(p.process(&load).await.unwrap(), 1);
    p.end().await;
    let row = c
        .query_one("SELECT id, stdout FROM stdin", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 1);
    assert_eq!(row.get::<_, &str>(1).unwrap(), "to stdout");
}

/// Promise: a pipeline never hangs on a statement's text. An identifier character that is not
/// alphanumeric to Rust (`·`, `€`; PostgreSQL takes every non-ASCII character into names) made
/// the COPY check spin forever inside `execute`, a loop no timeout future can interrupt, so
/// the case runs on a thread of its own and is waited for with a bound. Before the fix: "the
/// pipeline's COPY check hung".
#[test]
fn copies_with_any_identifier_characters_are_checked_without_hanging() {
    let (done, finished) = std::sync::mpsc::channel();
    let case = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (cluster, mut c) = setup().await;
            c.batch_execute("CREATE TABLE t· (€ int)").await.unwrap();
            let path = cluster.data_dir().join("euro.csv");
            let path = path.to_str().unwrap();
            let mut p = c.pipeline();
            let out = p
                .execute(&format!("COPY (SELECT 7 AS €) TO '{path}'"), &[])
                .await
                .unwrap();
            let load = p
                .execute(&format!("COPY t· (€) FROM '{path}'"), &[])
                .await
                .unwrap();
            let stream = p.execute("COPY (SELECT 1 AS €) TO STDOUT", &[]).await;
            assert!(
                stream.is_err_and(|e| e.to_string().contains("cannot run in a pipeline")),
                "a stream COPY must still be refused"
            );
            assert_eq!(p.process(&out).await.unwrap(), 1);
            assert_eq!(p.process(&load).await.unwrap(), 1);
            p.end().await;
            let row = c.query_one("SELECT € FROM t·", &[]).await.unwrap();
            assert_eq!(row.get::<_, i32>(0).unwrap(), 7);
        });
        let _ = done.send(());
    });
    match finished.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the pipeline's COPY check hung")
        }
        // The case panicked: its own message says what failed.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(case.join().unwrap_err())
        }
    }
}

#[tokio::test]
async fn statements_prepared_in_a_pipeline_work_in_the_next_one() {
    let (_cluster, mut c) = setup().await;
    let mut p = c.pipeline_with(crate::continue_on_error());
    let a = p.prepare("SELECT $1::text || '!'").await.unwrap();
    let bad = p.prepare("SELECT * FROM missing").await.unwrap();
    let stmt = p.process(&a).await.unwrap();
    assert_eq!(
        p.process(&bad).await.unwrap_err().code(),
        Some(SqlState::UNDEFINED_TABLE)
    );
    p.end().await;
    assert_eq!(stmt.params(), &[Type::TEXT]);

    let mut p = c.pipeline_with(crate::continue_on_error());
    let op = p.query(&stmt, &[&"hi"]).await.unwrap();
    assert_eq!(
        p.process(&op).await.unwrap()[0].get::<_, &str>(0).unwrap(),
        "hi!"
    );
}

#[tokio::test]
async fn misuse_is_an_error_not_a_panic() {
    let (_cluster, mut c) = setup().await;
    // A value whose PostgreSQL type cannot be chosen from its Rust type cannot be pipelined
    // as SQL text: the server would have to name the type first.
    #[derive(Debug, postgres_types::ToSql)]
    #[postgres(name = "mood")]
    enum Mood {
        #[allow(dead_code)]
        Happy,
    }
    let mut p = c.pipeline_with(crate::continue_on_error());
    let e = p
        .query("SELECT $1::mood", &[&Mood::Happy])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage);
    assert!(e.to_string().contains("query_typed"), "{e}");
    let op = p.query("SELECT 1", &[]).await.unwrap();
    p.process(&op).await.unwrap();
    assert_eq!(
        p.process(&op).await.unwrap_err().kind(),
        ErrorKind::Usage,
        "a result is returned once"
    );
    let results = p.end().await;
    assert!(matches!(results[0], Ok(Output::Taken)));

    let mut other = c.pipeline_with(crate::continue_on_error());
    assert_eq!(
        other.process(&op).await.unwrap_err().kind(),
        ErrorKind::Usage,
        "a handle from another block"
    );
}

/// `process` on the first operation of one long abort-mode sync group must wait for the
/// group's `Sync`, reading every reply in between. It looked for that `Sync` by scanning the
/// rest of the group after each reply: quadratic, 1.9 s at 40,000 operations in a release
/// build and minutes at 200,000 in a debug one. Now linear (well under a second per 100,000
/// in release); the timeout only tells a hang from a slow machine.
#[tokio::test]
async fn process_in_a_long_abort_group_reads_its_replies_in_linear_time() {
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT 1").await.unwrap();
    let mut p = c.pipeline_with(
        abort_mode()
            .max_in_flight(usize::MAX)
            .max_in_flight_bytes(usize::MAX),
    );
    let first = p.execute(&stmt, &[]).await.unwrap();
    for _ in 1..200_000 {
        p.execute(&stmt, &[]).await.unwrap();
    }
    p.sync();
    let affected = tokio::time::timeout(Duration::from_secs(120), p.process(&first))
        .await
        .expect("process waited minutes for replies already on their way");
    assert_eq!(affected.unwrap(), 1);
    let results = p.end().await;
    assert_eq!(results.len(), 200_000);
    assert!(
        results[1..]
            .iter()
            .all(|r| matches!(r, Ok(Output::Affected(1))))
    );
}

/// Every prepare of a block leaves its statement's name with the connection until its reply
/// is read (so that a dropped call's statements get closed), and reading the reply takes the
/// name back. The names were a `Vec` searched from the front and emptied with `swap_remove`,
/// which put the newest name first, so the k-th reply searched past about k others: quadratic
/// in a wide window of prepares (80,000 in a release build: 3.0 s, against 0.46 s now; 100,000
/// here in a debug build: 26 s against 1.9 s). The prepares fail at Parse so that the server
/// holds no statement for them; their names are kept and taken back all the same. The
/// timeout only tells a hang from a slow machine.
#[tokio::test]
async fn a_wide_window_of_prepares_takes_its_names_back_in_linear_time() {
    let (_cluster, mut c) = setup().await;
    let mut p = c.pipeline_with(
        PipelineOptions::new()
            .mode(PipelineMode::ContinueOnError)
            .max_in_flight(usize::MAX)
            .max_in_flight_bytes(usize::MAX),
    );
    let mut ops = Vec::new();
    for _ in 0..300_000 {
        ops.push(p.prepare("SELECT * FROM no_such_table").await.unwrap());
    }
    let read_all = async {
        for op in &ops {
            // Each error is dropped as it is read: 300,000 kept would cost 100 MB.
            let e = p.process(op).await.unwrap_err();
            assert_eq!(e.code(), Some(SqlState::UNDEFINED_TABLE), "{e}");
        }
    };
    tokio::time::timeout(Duration::from_secs(120), read_all)
        .await
        .expect("the replies took minutes: each one searched the names of the others");
    assert!(p.end().await.iter().all(|r| matches!(r, Ok(Output::Taken))));
    assert_eq!(scalar::<i32>(&mut c, "SELECT 1").await, 1);
}

/// A failed abort-mode group skips its later prepares, so their statements never exist; their
/// names stayed with the connection until its next request, in front of the names that the
/// block's later prepares take back, and every later reply searched past all of them:
/// quadratic in a block of failing groups. The timeout only tells a hang from a slow machine.
#[tokio::test]
async fn prepares_a_failed_group_skipped_are_not_searched_by_later_replies() {
    let (_cluster, mut c) = setup().await;
    let mut p = c.pipeline_with(
        abort_mode()
            .max_in_flight(usize::MAX)
            .max_in_flight_bytes(usize::MAX),
    );
    let mut ops = Vec::new();
    for _ in 0..200_000 {
        ops.push(p.prepare("SELECT * FROM no_such_table").await.unwrap());
        ops.push(p.prepare("SELECT 1").await.unwrap());
        p.sync();
    }
    let read_all = async {
        for pair in ops.chunks(2) {
            // Each error is dropped as it is read: 400,000 kept would cost 100 MB.
            let failed = p.process(&pair[0]).await.unwrap_err();
            assert_eq!(failed.code(), Some(SqlState::UNDEFINED_TABLE), "{failed}");
            let skipped = p.process(&pair[1]).await.unwrap_err();
            assert_eq!(skipped.kind(), ErrorKind::Aborted, "{skipped}");
        }
    };
    tokio::time::timeout(Duration::from_secs(120), read_all)
        .await
        .expect("the replies took minutes: each one searched the names of the skipped prepares");
    assert!(p.end().await.iter().all(|r| matches!(r, Ok(Output::Taken))));
    assert_eq!(scalar::<i32>(&mut c, "SELECT 1").await, 1);
}
