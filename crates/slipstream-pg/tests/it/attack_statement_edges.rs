//! Attacks on statement edges: a COPY hidden behind an empty statement, outcomes after Sync,
//! statements after a COPY, the application's own prepared statements, nested BEGIN and the
//! cache after DDL. Each pins a promise the code once broke, by a test that failed before its fix.

use slipstream_pg::ErrorKind;

/// docs/pipelining.md: "queueing `COPY ... FROM STDIN` or `TO STDOUT` is refused with
/// `ErrorKind::Usage`". An empty statement before the COPY (`;COPY ...`) is still one statement
/// to the server, so the check must see through it as it sees through comments.
#[tokio::test]
async fn a_copy_behind_an_empty_statement_is_refused_when_queued() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    for sql in [
        ";COPY t FROM STDIN",
        " ; ;\n copy t to stdout",
        "/* load */ ; -- now\n COPY t FROM STDIN",
    ] {
        let mut p = c.pipeline();
        let before = p.query("SELECT 1", &[]).await.unwrap();
        let e = p.execute(sql, &[]).await.map(|op| op.id()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage, "{sql:?}: {e}");
        assert!(e.to_string().contains("copy_in"), "{e}");
        // The block goes on: the refused operation was never sent.
        assert_eq!(p.process(&before).await.unwrap().len(), 1, "{sql:?}");
        let after = p.query("SELECT 2", &[]).await.unwrap();
        assert_eq!(p.process(&after).await.unwrap().len(), 1, "{sql:?}");
        p.end().await;
    }
    let stmt = c.prepare(";COPY t FROM STDIN").await.unwrap();
    let mut p = c.pipeline();
    let e = p.execute(&stmt, &[]).await.map(|op| op.id()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    p.end().await;
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 1").await, 1);
}

/// docs/pipelining.md: "Call `process` on an operation after the block's `sync()`/`end()`
/// point ... when you need the committed outcome", and `PipelineMode::AbortOnError`: work
/// rolled back with its implicit transaction is "never reported as done". `process` returned
/// an operation's own reply without waiting for the `Sync` already queued behind it, so an
/// `INSERT` that a later failure or the commit itself rolled back read as `Ok(1)`.
#[tokio::test]
async fn process_after_sync_reports_the_committed_outcome_in_abort_mode() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "CREATE TABLE t (x int UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO t VALUES (1)",
    )
    .await
    .unwrap();

    // A later operation of the same implicit transaction fails.
    let mut p = c.pipeline();
    let insert = p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
    p.sync();
    let kept = p.execute("SELECT 3", &[]).await.unwrap();
    let e = p.process(&insert).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted, "{e}");
    assert_eq!(e.aborted_by(), Some(bad.id()), "{e}");
    assert_eq!(p.process(&kept).await.unwrap(), 1);
    p.end().await;

    // The commit at the Sync fails (a deferred unique constraint).
    let mut p = c.pipeline();
    let insert = p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    p.sync();
    let e = p.process(&insert).await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(slipstream_pg::SqlState::UNIQUE_VIOLATION),
        "{e}"
    );
    p.end().await;

    // What did commit is reported as done, and taken before the sync point it still is.
    let mut p = c.pipeline();
    let early = p.execute("INSERT INTO t VALUES (5)", &[]).await.unwrap();
    assert_eq!(
        p.process(&early).await.unwrap(),
        1,
        "ran, not yet committed"
    );
    let insert = p.execute("INSERT INTO t VALUES (4)", &[]).await.unwrap();
    p.sync();
    assert_eq!(p.process(&insert).await.unwrap(), 1);
    p.end().await;
    let xs: Vec<i32> = super::column(&mut c, "SELECT x FROM t ORDER BY x").await;
    assert_eq!(xs, vec![1, 4, 5]);
}

/// `CopyIn::finish`: "A server-side error ... is reported here; nothing is loaded then", and
/// docs/client.md: a `Protocol` error means the server broke the protocol. A COPY's SQL may
/// carry more statements (`COPY t FROM STDIN; SELECT 1` is one simple query, one implicit
/// transaction): their replies after the COPY's were taken for a protocol violation, so the
/// connection was closed and `finish` failed although the rows were loaded and committed.
#[tokio::test]
async fn statements_after_the_copy_in_its_sql_neither_break_the_connection_nor_hide_the_outcome() {
    use futures_util::{SinkExt, TryStreamExt};
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let count = async |c: &mut slipstream_pg::Client| -> i64 {
        super::scalar(c, "SELECT count(*) FROM t").await
    };

    let mut copy = c.copy_in("COPY t FROM STDIN; SELECT 1").await.unwrap();
    copy.write(b"1\n2\n").await.unwrap();
    assert_eq!(copy.finish().await.unwrap(), 2, "the COPY's own row count");
    assert_eq!(count(&mut c).await, 2);

    let mut copy = c.copy_in("COPY t FROM STDIN; SELECT 1; ;").await.unwrap();
    copy.send(bytes::Bytes::from_static(b"3\n")).await.unwrap();
    copy.close().await.unwrap();
    assert_eq!(copy.rows(), Some(1));
    drop(copy);
    assert_eq!(count(&mut c).await, 3);

    let copy = c.copy_out("COPY t TO STDOUT; SELECT 1").await.unwrap();
    let chunks: Vec<bytes::Bytes> = copy.try_collect().await.unwrap();
    assert_eq!(chunks.concat(), b"1\n2\n3\n");
    let mut copy = c
        .copy_out("COPY (SELECT 7) TO STDOUT; COPY t TO STDOUT")
        .await
        .unwrap();
    assert_eq!(&copy.next().await.unwrap().unwrap()[..], b"7\n");
    assert!(
        copy.next().await.unwrap().is_none(),
        "only the first COPY's data"
    );
    assert_eq!(copy.rows(), Some(1));
    drop(copy);

    // A second COPY FROM STDIN would wait for data nobody sends: it is failed, which rolls the
    // whole string back, and the call says so.
    let mut copy = c
        .copy_in("COPY t FROM STDIN; COPY t FROM STDIN")
        .await
        .unwrap();
    copy.write(b"4\n").await.unwrap();
    let e = copy.finish().await.unwrap_err();
    assert!(e.code().is_some(), "{e}");
    assert_eq!(count(&mut c).await, 3, "nothing loaded");
    let mut copy = c
        .copy_in("COPY t FROM STDIN; COPY t FROM STDIN")
        .await
        .unwrap();
    copy.send(bytes::Bytes::from_static(b"4\n")).await.unwrap();
    let e = copy.close().await.unwrap_err();
    assert!(e.code().is_some(), "{e}");
    assert_eq!(copy.rows(), None);
    drop(copy);
    assert_eq!(count(&mut c).await, 3, "nothing loaded");
    let copy = c
        .copy_out("COPY t TO STDOUT; COPY t FROM STDIN")
        .await
        .unwrap();
    let e = copy.try_collect::<Vec<_>>().await.unwrap_err();
    assert!(e.code().is_some(), "{e}");
    assert_eq!(count(&mut c).await, 3);
}

/// docs/statement-cache.md: every SQL string goes through the cache, which prepares it on its
/// first run; the application's own SQL (`DISCARD ALL`, `DEALLOCATE ALL`) is expected beside
/// it. The cache named its statements `s1`, `s2`, ..., the names an application's own
/// `PREPARE s1 AS ...` takes, so ordinary calls failed with 42P05 "prepared statement "s1"
/// already exists" while the same calls with the cache off worked.
#[tokio::test]
async fn the_applications_own_prepared_statements_do_not_collide_with_the_clients() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute(
        "PREPARE s1 AS SELECT 1; PREPARE S2 AS SELECT 2; PREPARE s3 AS SELECT 3; \
         PREPARE s4 AS SELECT 4; PREPARE s5 AS SELECT 5",
    )
    .await
    .unwrap();
    let row = c.query_one("SELECT $1::int4 + 1", &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 2);
    let stmt = c.prepare("SELECT 10").await.unwrap();
    assert_eq!(super::scalar::<i32>(&mut c, "SELECT 11").await, 11);
    let typed = c
        .prepare_typed("SELECT $1", &[slipstream_pg::types::Type::INT8])
        .await
        .unwrap();
    let mut p = c.pipeline();
    let op = p.prepare("SELECT 12").await.unwrap();
    let piped = p.process(&op).await.unwrap();
    p.end().await;
    assert_eq!(
        c.query_one(&stmt, &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap(),
        10
    );
    assert_eq!(
        c.query_one(&typed, &[&13i64])
            .await
            .unwrap()
            .get::<_, i64>(0)
            .unwrap(),
        13
    );
    assert_eq!(
        c.query_one(&piped, &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
            .unwrap(),
        12
    );
    // The application's statements are untouched.
    let rows = c.simple_query("EXECUTE s2").await.unwrap();
    assert!(!rows.is_empty());
}

/// docs/client.md: "A transaction dropped without `commit`/`rollback` is rolled back", and
/// `Transaction` is used "like the `Client` it borrows". Through that `Deref`, a transaction
/// could start another with `build_transaction()`: its `BEGIN` was only a warning to the
/// server, and dropping (or committing) it ended the *outer* transaction, whose later
/// statements then committed one by one while its own `rollback()` reported success.
#[tokio::test]
async fn a_transaction_cannot_be_begun_inside_another() {
    use slipstream_pg::TransactionStatus;
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    match tx.build_transaction().read_only(true).start().await {
        Ok(inner) => drop(inner),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
            assert!(e.to_string().contains("savepoint"), "{e}");
        }
    }
    tx.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
    assert_eq!(tx.transaction_status(), TransactionStatus::InTransaction);
    tx.rollback().await.unwrap();
    assert_eq!(
        super::scalar::<i64>(&mut c, "SELECT count(*) FROM t").await,
        0,
        "a rolled-back transaction left rows behind"
    );

    // The same for a BEGIN the application sent itself, found by settling first.
    c.batch_execute("BEGIN").await.unwrap();
    let e = c.transaction().await.map(drop).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    c.batch_execute("ROLLBACK").await.unwrap();
    // A dropped transaction's deferred ROLLBACK is not mistaken for an open one.
    drop(c.transaction().await.unwrap());
    c.transaction().await.unwrap().commit().await.unwrap();
}

/// docs/statement-cache.md, "After DDL": a string parameter keeps the type the server gave it
/// at the first run, and `clear_statement_cache()` is the remedy. This pins the remedy: after
/// it, the cached SQL stores what a quoted literal stores (before it, a `timestamp`-typed
/// parameter dropped the `+05` of a value stored into a column now `timestamptz`).
#[tokio::test]
async fn clearing_the_cache_after_ddl_gives_string_parameters_the_new_column_type() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("SET TimeZone = 'UTC'; CREATE TABLE t (id int, ts timestamp)")
        .await
        .unwrap();
    let insert = "INSERT INTO t VALUES ($1, $2)";
    let value = "2024-01-01 00:00:00+05";
    c.execute(insert, &[&1i32, &value]).await.unwrap();
    c.batch_execute("ALTER TABLE t ALTER ts TYPE timestamptz")
        .await
        .unwrap();
    c.clear_statement_cache();
    c.execute(insert, &[&2i32, &value]).await.unwrap();
    c.batch_execute(&format!("INSERT INTO t VALUES (3, '{value}')"))
        .await
        .unwrap();
    let stored: Vec<String> =
        super::column(&mut c, "SELECT ts::text FROM t WHERE id > 1 ORDER BY id").await;
    assert_eq!(stored, ["2023-12-31 19:00:00+00", "2023-12-31 19:00:00+00"]);
}
