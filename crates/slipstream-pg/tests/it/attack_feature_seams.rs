//! Attacks (helper h83) on the seams between the client's features: the statement cache, row
//! streams with a fetch size, transaction guards, pipelines and memopt handles, where one
//! feature's state meets another's promise (docs/statement-cache.md, docs/fetch-size.md,
//! docs/client.md).

use slipstream_pg::{Client, FetchSize, TransactionStatus};

/// Every row of `sql` through a row stream of one row per fetch, with its column count.
async fn stream_all(c: &mut Client, sql: &str) -> Result<(usize, usize), slipstream_pg::Error> {
    let mut s = c.query_stream_with(sql, &[], FetchSize::Rows(1)).await?;
    let mut n = 0;
    while s.next().await?.is_some() {
        n += 1;
    }
    Ok((n, s.columns().len()))
}

/// Promise (statement-cache.md, "After DDL"; fetch-size.md, "Statement cache"): outside a
/// transaction, a cached statement that DDL made stale is prepared again and retried once,
/// transparently, and SQL text streams through the cache "including the transparent
/// re-prepare after DDL". A dropped `Transaction` has its `ROLLBACK` sent ahead of the next
/// request (client.md), so that request runs outside any transaction.
///
/// Steps: cache `SELECT * FROM seam` through a row stream; `ALTER TABLE seam ADD COLUMN` (its
/// result type changes); open a `Transaction`, write in it and drop it (its `ROLLBACK` is now
/// queued, and `transaction_status()` still says `InTransaction`); stream the SQL again. Then
/// the same with `query` in place of the stream, which was right all along.
///
/// Before the fix: the stream judged "inside a transaction" from the status before its
/// request, which the queued `ROLLBACK` it sent first then ended. It failed with 0A000 and
/// "went stale inside a transaction ... roll back and run the transaction again" although the
/// caller ran no transaction (the status read `Idle` right after), and kept the SQL out of the
/// statement cache for the connection's life. `query` judges from the status that came with
/// the error, and retried.
#[tokio::test]
async fn a_stream_after_a_dropped_transaction_re_prepares_a_stale_statement() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE seam (id int PRIMARY KEY); INSERT INTO seam VALUES (1), (2)")
        .await
        .unwrap();
    let sql = "SELECT * FROM seam";
    assert_eq!(stream_all(&mut c, sql).await.unwrap(), (2, 1));
    c.batch_execute("ALTER TABLE seam ADD COLUMN extra int")
        .await
        .unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO seam VALUES (3)", &[])
            .await
            .unwrap();
    }
    assert_eq!(c.transaction_status(), TransactionStatus::InTransaction);
    let streamed = stream_all(&mut c, sql).await;
    assert_eq!(c.transaction_status(), TransactionStatus::Idle);
    assert_eq!(
        streamed.unwrap(),
        (2, 2),
        "the stream ran outside any transaction: the stale statement is prepared again"
    );
    let stats = c.statement_cache_stats();
    assert_eq!(stats.reprepares, 1, "{stats:?}");
    // Still cached: the next stream is a hit, not a statement kept out of the cache.
    stream_all(&mut c, sql).await.unwrap();
    assert_eq!(c.statement_cache_stats().hits, stats.hits + 1);

    // `query` on the same sequence, for comparison.
    let q = "SELECT * FROM seam WHERE id > 0";
    c.query(q, &[]).await.unwrap();
    c.batch_execute("ALTER TABLE seam ADD COLUMN more int")
        .await
        .unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO seam VALUES (3)", &[])
            .await
            .unwrap();
    }
    let rows = c.query(q, &[]).await.unwrap();
    assert_eq!((rows.len(), rows[0].len()), (2, 3));
}

/// Promise (pipelining.md, "Dropping a pipeline": an open abort-mode block given up is
/// all-or-nothing, nothing of it runs if none of it was written; `Client::is_reusable`: true
/// only if the connection can serve another user as it is). A block leaked instead of
/// dropped (`std::mem::forget`, a cycle of `Rc`s; safe Rust, which the client handles for a
/// row stream) never runs its `Drop`.
///
/// Steps: queue `INSERT INTO leak VALUES (1)` and `SELECT 42` in an abort-mode block, leak
/// it while still in the write buffer, run `SELECT 1`; the same after `process` sent the
/// whole block (the `INSERT`'s result read); then with 300 operations, of which the window
/// sent part before the leak.
///
/// Before the fix: the open group owed no reply, so the client was settled and reusable; the
/// next `SELECT 1` sent the leaked messages ahead of its own and returned `[42, 1]` (301 rows
/// for the large block), and the leaked `INSERT` committed with its `Sync`. Now the small
/// block is taken back (nothing of it runs), the processed one is failed on purpose before
/// its `Sync` (as a dropped block is), and the large one, part sent and part still in the
/// write buffer, closes the connection with an error that names the leak.
#[tokio::test]
async fn a_leaked_pipeline_block_neither_runs_nor_answers_the_next_call() {
    use slipstream_pg::{ErrorKind, PipelineMode, PipelineOptions};
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE leak (n int)").await.unwrap();
    let url = cluster.url();
    let leak = |ops: usize, processed: bool| {
        let url = url.clone();
        async move {
            let mut c = slipstream_pg::connect(&url).await.unwrap();
            let mut p = c.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
            let insert = p.execute("INSERT INTO leak VALUES (1)", &[]).await.unwrap();
            for _ in 1..ops {
                p.query("SELECT 42", &[]).await.unwrap();
            }
            if processed {
                assert_eq!(p.process(&insert).await.unwrap(), 1);
            }
            std::mem::forget(p);
            c
        }
    };

    for processed in [false, true] {
        let mut small = leak(2, processed).await;
        assert!(!small.is_reusable(), "a leaked open block is not reusable");
        let rows = small.query("SELECT 1", &[]).await.unwrap();
        let mine: Vec<i32> = rows.iter().map(|r| r.get(0).unwrap()).collect();
        assert_eq!(
            mine,
            [1],
            "processed: {processed}: the call read the leaked block's rows"
        );
        assert!(small.is_reusable());
    }

    let mut large = leak(300, false).await;
    let e = large.query("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("leaked"), "{e}");
    assert!(large.is_broken());
    drop(large);

    let n: i64 = c
        .query_one("SELECT count(*) FROM leak", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0, "a leaked block's INSERT committed");
}

/// `f`'s output, or a panic naming `what` after 10 s.
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
}

/// Promise (client.md, COPY: a `CopyIn` dropped part-way loads nothing and leaves the
/// connection usable; the client's own rule for a leaked row stream, which is safe Rust:
/// "must not leave the connection waiting for ever"). A `CopyIn` leaked instead
/// (`std::mem::forget`) never runs the `Drop` that queues its `CopyFail`.
///
/// Steps: `COPY cp FROM STDIN`, write a row, leak the `CopyIn`, run `SELECT 1` (bounded at
/// 10 s); then check that nothing was loaded. A leaked `CopyOut` beside it, which held.
///
/// Before the fix: the next call waited for ever. It settled the COPY's reply first, and the
/// server, in COPY mode, waited for data that never came.
#[tokio::test]
async fn a_leaked_copy_in_does_not_hang_the_next_call() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE cp (n int)").await.unwrap();
    let mut w = c.copy_in("COPY cp FROM STDIN").await.unwrap();
    w.write(b"1\n").await.unwrap();
    std::mem::forget(w);
    assert!(!c.is_reusable());
    let row = bounded(
        "the call after a leaked CopyIn",
        c.query_one("SELECT 1", &[]),
    )
    .await
    .unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 1);
    assert!(c.is_reusable());
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM cp").await;
    assert_eq!(n, 0, "a leaked COPY loaded its rows");

    let mut r = c
        .copy_out("COPY (SELECT g FROM generate_series(1, 100000) g) TO STDOUT")
        .await
        .unwrap();
    r.next().await.unwrap();
    std::mem::forget(r);
    let row = bounded(
        "the call after a leaked CopyOut",
        c.query_one("SELECT 2", &[]),
    )
    .await
    .unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 2);
}

#[derive(Debug, Clone, PartialEq, postgres_types::ToSql, postgres_types::FromSql)]
#[postgres(name = "pair")]
struct Pair {
    a: Option<i32>,
    b: Option<i32>,
}

/// A read of a `pair` against the server's own `(a, b)`: the same values, or an error.
fn never_swapped(what: &str, read: Result<Pair, slipstream_pg::Error>, truth: &Pair) {
    if let Ok(pair) = read {
        assert_eq!(&pair, truth, "{what}: read with the old field order");
    }
}

/// Promise (client.md, "Types"): the type cache is forgotten with `ALTER TYPE` run on this
/// connection "as statements of their own, through any call: the client sees their command
/// tags", so a composite whose attribute was dropped and added again is not read in its old
/// field order; a `Statement` held across it is refused until prepared again. pipelining.md:
/// result columns of such types are resolved from the type cache as replies arrive, and a
/// type the block cannot look up comes unresolved from `process` and resolved from `end()`.
///
/// Steps: `pair` is `(a int4, b int4)` and the connection has read it (cached). Then `ALTER
/// TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4` (now `(b, a)`) and `UPDATE tp SET p.a =
/// 7`, either as the first operations of a pipeline block (both modes) or by
/// `batch_execute` just before it; then the block reads `SELECT p FROM tp` as SQL (through
/// `process`, and through `end()` on a second operation) and through a `Statement`
/// prepared before. Each read must be the server's `(a = 7, b = 2)` or an error, and `end()`
/// must resolve the SQL's rows.
///
/// Before the fix: every SQL read in the block, and the held statement's read when the
/// `ALTER` ran inside the block, gave `Pair { a: Some(2), b: Some(7) }`, with no error. The
/// block neither forgot the cache for an `ALTER` it carried nor for one the connection had
/// seen before it (only the next non-pipelined call did).
#[tokio::test]
async fn an_alter_type_in_or_before_a_pipeline_block_never_swaps_fields_in_it() {
    use slipstream_pg::{Output, PipelineMode, PipelineOptions};
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let truth = Pair {
        a: Some(7),
        b: Some(2),
    };
    for (mode, in_block) in [
        (PipelineMode::AbortOnError, true),
        (PipelineMode::ContinueOnError, true),
        (PipelineMode::AbortOnError, false),
        (PipelineMode::ContinueOnError, false),
    ] {
        let case = format!("{mode:?}, ALTER in the block: {in_block}");
        let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        c.batch_execute(
            "DROP TABLE IF EXISTS tp; DROP TYPE IF EXISTS pair;
             CREATE TYPE pair AS (a int4, b int4); CREATE TABLE tp (p pair);
             INSERT INTO tp VALUES (ROW(1, 2))",
        )
        .await
        .unwrap();
        let select = c.prepare("SELECT p FROM tp").await.unwrap();
        let before: Pair = c
            .query_one("SELECT p FROM tp", &[])
            .await
            .unwrap()
            .get(0)
            .unwrap();
        assert_eq!(
            before,
            Pair {
                a: Some(1),
                b: Some(2)
            }
        );
        let alter = "ALTER TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4";
        let update = "UPDATE tp SET p.a = 7";
        if !in_block {
            c.batch_execute(&format!("{alter}; {update}"))
                .await
                .unwrap();
        }
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        if in_block {
            p.execute(alter, &[]).await.unwrap();
            p.execute(update, &[]).await.unwrap();
        }
        let by_process = p.query("SELECT p FROM tp", &[]).await.unwrap();
        let by_end = p.query("SELECT p FROM tp", &[]).await.unwrap();
        // Refused when queued is an answer too (the cache was forgotten before the block).
        let held = p.query(&select, &[]).await;
        let read = p
            .process(&by_process)
            .await
            .and_then(|rows| rows[0].get::<_, Pair>(0));
        never_swapped(&format!("{case}: SQL through process"), read, &truth);
        if let Ok(held) = &held {
            let read = p
                .process(held)
                .await
                .and_then(|rows| rows[0].get::<_, Pair>(0));
            never_swapped(&format!("{case}: held statement"), read, &truth);
        }
        let results = p.end().await;
        match &results[by_end.id() as usize] {
            Ok(Output::Rows(rows)) => assert_eq!(
                rows[0].get::<_, Pair>(0).unwrap(),
                truth,
                "{case}: SQL through end()"
            ),
            other => panic!("{case}: end() gave {other:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, postgres_types::ToSql, postgres_types::FromSql)]
#[postgres(name = "mood")]
enum Mood {
    #[postgres(name = "sad")]
    Sad,
    #[postgres(name = "happy")]
    Happy,
}

/// Promise (memopt.md, "Fast lookup": `memopt_get` returns "exactly the row `SELECT * FROM t
/// WHERE pk = key` returns", the client decoding it without a Describe; client.md, "Types":
/// enums and composites are looked up in the catalogs, so derived `FromSql` types read them,
/// and after an `ALTER TYPE` on the connection a composite is never read in its old field
/// order).
///
/// Steps: a memopt-enabled table `mp (id bigint PRIMARY KEY, m mood, p pair)`; read row 1
/// through `memopt_get` as `Mood` and `Pair`, and through a pipeline's `memopt_get` and
/// `end()`; then `ALTER TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4`, set `p.a = 7`,
/// and read it again through the same handle. Each read must equal the SQL row's.
///
/// Before the fix: `memopt_table` left the enum and composite columns as placeholders that
/// nothing ever resolved, so `memopt_get`'s rows could not be read as `Mood` or `Pair` at all
/// ("its type is not built in and has not been looked up (a pipeline's rows taken with
/// process before end ...): prepare the statement first", advice that does not apply to a
/// memopt lookup); only `Row::get_raw` read them.
#[tokio::test]
async fn memopt_rows_read_enum_and_composite_columns_as_sql_does() {
    let (_cluster, mut c) = super::memopt::memopt_setup().await;
    c.batch_execute(
        "CREATE TYPE mood AS ENUM ('sad', 'happy'); CREATE TYPE pair AS (a int4, b int4);
         CREATE TABLE mp (id bigint PRIMARY KEY, m mood, p pair);
         INSERT INTO mp VALUES (1, 'happy', ROW(1, 2));
         SELECT memopt.enable_read('mp')",
    )
    .await
    .unwrap();
    let mp = c.memopt_table("mp").await.unwrap();
    for round in ["before", "after ALTER TYPE"] {
        if round != "before" {
            c.batch_execute(
                "ALTER TYPE pair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4; UPDATE mp SET p.a = 7",
            )
            .await
            .unwrap();
        }
        let row = c.memopt_get(&mp, &1i64).await.unwrap().unwrap();
        let read = (row.get::<_, Mood>(1), row.get::<_, Pair>(2));
        // The SQL row, read after the lookup (a `query` forgets the type cache first).
        let sql = c
            .query_one("SELECT * FROM mp WHERE id = 1", &[])
            .await
            .unwrap();
        let want: (Mood, Pair) = (sql.get(1).unwrap(), sql.get(2).unwrap());
        assert_eq!(
            (read.0.unwrap(), read.1.unwrap()),
            want,
            "{round}: memopt_get's row against SQL's"
        );

        let mut p = c.pipeline();
        let op = p.memopt_get(&mp, &1i64).await.unwrap();
        let results = p.end().await;
        match &results[op.id() as usize] {
            Ok(slipstream_pg::Output::Rows(rows)) => assert_eq!(
                (
                    rows[0].get::<_, Mood>(1).unwrap(),
                    rows[0].get::<_, Pair>(2).unwrap()
                ),
                want,
                "{round}: a pipeline's memopt_get through end()"
            ),
            other => panic!("{round}: the pipeline's lookup gave {other:?}"),
        }
    }
}

/// Promise (fetch-size.md, "Dropping a stream part-way": safe, the rest of the reply is
/// discarded, "Inside a transaction the transaction continues"; client.md's rule that errors
/// name what failed, which the client keeps for a dropped savepoint guard's failed rollback
/// and an abandoned pipeline block). A stream sends its next `Execute` the moment a batch
/// arrives, so the server may already be producing rows the caller will never read.
///
/// Steps: in a `Transaction`, stream `SELECT 1/(g-3) FROM generate_series(1, 10) g` two rows
/// per fetch, read one row and drop the stream (the second batch, which divides by zero, is
/// already asked for); then `INSERT` and `commit()` in the transaction.
///
/// Before the fix: the discarded batch's error aborted the transaction without a word. The
/// `INSERT` failed with the server's bare 25P02 ("current transaction is aborted"), and the
/// commit said the transaction was rolled back "because a statement in it had failed", though
/// every statement the caller ran had succeeded as far as it was told. Now both name the
/// dropped stream and the division by zero, and the doc no longer says the transaction always
/// continues.
#[tokio::test]
async fn a_dropped_stream_whose_fetched_ahead_batch_failed_says_so() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (n int)").await.unwrap();
    let mut tx = c.transaction().await.unwrap();
    let mut rows = tx
        .query_stream_with(
            "SELECT 1/(g-3) FROM generate_series(1, 10) g",
            &[],
            FetchSize::Rows(2),
        )
        .await
        .unwrap();
    assert!(rows.next().await.unwrap().is_some());
    drop(rows);
    failure_is_named(
        tx,
        "INSERT INTO t VALUES (1)",
        "row stream",
        "the dropped stream",
    )
    .await;
}

/// In `tx`, which something the caller no longer holds has failed: `sql` must fail with
/// 25P02 and the commit with the rollback, each naming `cause` (what failed it, e.g. "row
/// stream") and its "division by zero", not the server's bare words alone.
async fn failure_is_named(tx: slipstream_pg::Transaction<'_>, sql: &str, cause: &str, what: &str) {
    let mut tx = tx;
    let e = tx.execute(sql, &[]).await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(slipstream_pg::SqlState::IN_FAILED_SQL_TRANSACTION)
    );
    let said = e.to_string();
    assert!(
        said.contains(cause) && said.contains("division by zero"),
        "the 25P02 names neither {what} nor its failure: {said}"
    );
    let said = tx.commit().await.unwrap_err().to_string();
    assert!(
        said.contains(cause) && said.contains("division by zero"),
        "the commit's rollback names neither {what} nor its failure: {said}"
    );
}

/// Promise (statement-cache.md, "Explicit statements": after DDL that changes its result, or a
/// `DEALLOCATE ALL` / `DISCARD ALL`, "each run fails with the server's error and a message
/// naming its SQL: prepare it again"). `Client::query` and row streams say so
/// (`a_callers_stale_prepared_statement_says_to_prepare_it_again`); a pipeline runs the same
/// statements.
///
/// Steps: prepare `SELECT * FROM st`; then (1) `DEALLOCATE ALL`, (2) on a fresh statement,
/// `ALTER TABLE st ADD COLUMN`; run the statement in a pipeline block, in both modes.
///
/// Before the fix: the pipeline's error was the server's alone, `prepared statement "S1" does
/// not exist` (a name the caller never chose) or `cached plan must not change result type`,
/// with neither the statement's SQL nor the remedy.
#[tokio::test]
async fn a_stale_prepared_statement_in_a_pipeline_says_to_prepare_it_again() {
    use slipstream_pg::{PipelineMode, PipelineOptions};
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE st (id int)").await.unwrap();
    let mut n = 0;
    for mode in [PipelineMode::AbortOnError, PipelineMode::ContinueOnError] {
        for change in ["DEALLOCATE ALL", "ALTER TABLE st ADD COLUMN c{n} int"] {
            n += 1;
            let sql = format!("SELECT * FROM st WHERE {n} = {n}");
            let stmt = c.prepare(&sql).await.unwrap();
            let change = change.replace("{n}", &n.to_string());
            c.batch_execute(&change).await.unwrap();
            let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
            let op = p.query(&stmt, &[]).await.unwrap();
            let e = p.process(&op).await.unwrap_err();
            drop(p.end().await);
            let said = e.to_string();
            assert!(
                said.contains(&sql) && said.contains("prepare it again"),
                "{mode:?}, after {change}: the error names neither the statement nor the remedy: \
                 {said}"
            );
            assert!(e.code().is_some(), "the server's code is kept: {e:?}");
        }
    }
}

/// Promise (fetch-size.md, "Dropping a stream part-way", as corrected above: run the stream in
/// a savepoint when the rest of its result may fail and the transaction must go on). Held:
/// in a `Transaction`, a savepoint; in it a stream whose fetched-ahead batch divides by zero,
/// read one row and dropped; the savepoint rolled back; then an `INSERT` and the commit
/// succeed and the row is there. The same with the savepoint guard dropped instead of rolled
/// back (its deferred `ROLLBACK TO SAVEPOINT` recovers the transaction).
#[tokio::test]
async fn a_savepoint_keeps_a_transaction_going_past_a_dropped_streams_failed_batch() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE ts (n int)").await.unwrap();
    for (n, roll_back) in [(1i32, true), (2, false)] {
        let mut tx = c.transaction().await.unwrap();
        let mut sp = tx.savepoint("reading").await.unwrap();
        let mut rows = sp
            .query_stream_with(
                "SELECT 1/(g-3) FROM generate_series(1, 10) g",
                &[],
                FetchSize::Rows(2),
            )
            .await
            .unwrap();
        assert!(rows.next().await.unwrap().is_some());
        drop(rows);
        if roll_back {
            sp.rollback().await.unwrap();
        } else {
            drop(sp);
        }
        tx.execute("INSERT INTO ts VALUES ($1)", &[&n])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM ts").await;
    assert_eq!(n, 2);
}

/// Promise (pipelining.md, "Dropping a pipeline": inside your own `BEGIN`, the abandoned
/// block fails that transaction, and the statements after it are refused with the server's
/// 25P02, which, then the `COMMIT`'s report of the rollback, say that a pipeline block
/// dropped before its `end()` failed it, "not that a statement failed"; continue-on-error
/// operations already queued still run). What the client says when an operation of the
/// dropped block fails on the server before the block's own marker could.
///
/// Steps: in a `Transaction`, a pipeline block (each mode) queues `SELECT 1/0` and 300 `SELECT
/// 1` (part of it sent by the window) and is dropped; then an `INSERT` and the commit.
///
/// Before the fix: the `INSERT` got the server's bare 25P02 and the commit said the
/// transaction was rolled back "because a statement in it had failed": nothing named the
/// dropped block or its division by zero.
#[tokio::test]
async fn a_dropped_pipeline_blocks_failed_operation_is_named_as_why_the_transaction_failed() {
    use slipstream_pg::{PipelineMode, PipelineOptions};
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE tb (n int)").await.unwrap();
    for mode in [PipelineMode::AbortOnError, PipelineMode::ContinueOnError] {
        let mut tx = c.transaction().await.unwrap();
        {
            let mut p = tx.pipeline_with(PipelineOptions::new().mode(mode));
            p.execute("SELECT 1/0", &[]).await.unwrap();
            for _ in 0..300 {
                p.execute("SELECT 1", &[]).await.unwrap();
            }
        }
        let what = format!("the dropped block ({mode:?})");
        failure_is_named(tx, "INSERT INTO tb VALUES (1)", "pipeline block", &what).await;
    }
}

/// Promise (docs/memopt.md, "Fast lookup"; README): `memopt_get` returns the row the normal
/// plan returns, by memopt's own function. The client resolves memopt's functions once per
/// connection and keeps their OIDs for its life, so whatever the first resolve found answers
/// every later lookup on the connection, a pool's later borrowers' included.
///
/// Steps: a session puts a schema of its own before `pg_catalog` (`SET search_path = evil,
/// pg_catalog, public`), where it has planted a `to_regprocedure(text)` that names its own
/// function, which logs the key it is given and answers NULL; it resolves a table. Then the
/// search path is reset (as a pool's session reset does, or another tenant's own setting) and a
/// key that exists is looked up.
///
/// Before the fix (h83's find, fixed by the lead): the resolve's unqualified
/// `to_regprocedure` (and `regclass`, `pg_class`, `=`, ...) took the planted one, the
/// connection kept the planted function's OID, and the lookup after the reset ran the planted
/// function with the caller's rights: it saw the key and answered "no row" for a row that
/// exists.
#[tokio::test]
async fn a_planted_search_path_cannot_choose_the_function_later_lookups_call() {
    let (_cluster, mut c) = super::memopt::memopt_setup().await;
    c.batch_execute(
        "CREATE TABLE kv (id bigint PRIMARY KEY, v text); INSERT INTO kv VALUES (1, 'one');
         SELECT memopt.enable_read('kv');
         CREATE SCHEMA evil;
         CREATE TABLE evil.seen (key bigint);
         CREATE FUNCTION evil.fake(regclass, bigint, bigint) RETURNS text LANGUAGE sql
             AS $$ INSERT INTO evil.seen VALUES ($2); SELECT NULL::text $$;
         CREATE FUNCTION evil.to_regprocedure(text) RETURNS pg_catalog.regprocedure
             LANGUAGE sql AS $$ SELECT 'evil.fake(regclass,bigint,bigint)'::pg_catalog.regprocedure $$;
         SET search_path = evil, pg_catalog, public",
    )
    .await
    .unwrap();
    let kv = c.memopt_table("kv").await.unwrap();
    c.batch_execute("RESET search_path").await.unwrap();
    let row = c.memopt_get(&kv, &1i64).await.unwrap();
    let seen: i64 = c
        .query_one("SELECT count(*) FROM evil.seen", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(seen, 0, "the planted function was called with the key");
    let row = row.expect("the row exists: SELECT * FROM kv WHERE id = 1 returns it");
    assert_eq!(row.get::<_, &str>("v").unwrap(), "one");
}
