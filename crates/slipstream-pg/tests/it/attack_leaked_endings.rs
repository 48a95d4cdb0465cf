//! Attacks (helper h86) on what a leaked (`std::mem::forget`, safe Rust) future or guard of
//! the pipeline and COPY engine leaves the connection's next call: that call must read
//! exactly its own result, and nothing the caller gave up may commit (docs/pipelining.md,
//! "Dropping a pipeline"; docs/client.md, "Cancellation and timeouts").

use std::future::Future;
use std::task::{Context, Waker};

use slipstream_pg::{PipelineMode, PipelineOptions};

/// Polls `f` once, with a waker that does nothing, and returns whether it was still pending.
fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    f.poll(&mut cx).is_pending()
}

/// `f`'s output, or a panic naming `what` after 10 s.
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
}

/// Promise (pipelining.md, "Dropping a pipeline"; `Pipeline::end`): `end()` given up before
/// the block's final `Sync` began to reach the socket gives the block up as if `end` had
/// not been called, so nothing of its last sync group commits. The lead's rule for a leaked
/// block (its open group is taken back, or failed on purpose, or the connection closed)
/// must hold for a leaked `end()` future too: it is as safe to write, and it never runs the
/// block's `Drop`.
///
/// Steps: another session holds an `ACCESS EXCLUSIVE` lock on `gate`, so the server stops
/// reading while it runs the block's first group: `SELECT count(*) FROM gate` and a 32 MB
/// parameter, closed by `sync()`. The last group is `INSERT INTO given_up VALUES (1)`.
/// `end()` is polled once (the socket fills long before its `Sync`) and leaked; the lock is
/// released and the client runs `SELECT 7`. It must read `7` (or fail and close the
/// connection), within 10 s, and the `INSERT` must not have committed.
///
/// Before the fix: `end()` had cleared the open group's mark, so the next call sent the
/// rest of the buffer with the group's `Sync`, and the `INSERT` the caller gave up
/// committed.
#[tokio::test]
async fn a_leaked_end_commits_nothing_of_the_last_group_unsent() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE gate (n int); CREATE TABLE given_up (n int)")
        .await
        .unwrap();
    other
        .batch_execute("BEGIN; LOCK TABLE gate IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let big = "x".repeat(32 << 20);
    {
        let mut p = c.pipeline_with(
            PipelineOptions::new()
                .mode(PipelineMode::AbortOnError)
                .max_in_flight_bytes(1 << 30),
        );
        p.query("SELECT count(*) FROM gate", &[]).await.unwrap();
        p.query("SELECT length($1::text)", &[&big]).await.unwrap();
        p.sync();
        p.execute("INSERT INTO given_up VALUES (1)", &[])
            .await
            .unwrap();
        let mut end = Box::pin(p.end());
        assert!(
            poll_once(end.as_mut()),
            "end() cannot finish while gate is locked"
        );
        std::mem::forget(end);
    }
    super::wait_until_active(&mut watcher, c.backend_pid()).await;
    other.batch_execute("ROLLBACK").await.unwrap();
    match bounded(
        "the call after a leaked end()",
        c.query_one("SELECT 7", &[]),
    )
    .await
    {
        Ok(row) => assert_eq!(row.get::<_, i32>(0).unwrap(), 7),
        Err(e) => assert!(
            c.is_broken(),
            "an error that leaves the connection open: {e}"
        ),
    }
    let n: i64 = super::scalar(&mut watcher, "SELECT count(*) FROM given_up").await;
    assert_eq!(
        n, 0,
        "the INSERT of a block whose end() was given up committed"
    );
}

/// Promise (client.md, "Cancellation and timeouts": "No transaction nobody opened. A dropped
/// `Transaction`, or a `transaction()` dropped while its `BEGIN` is in flight, is rolled back
/// with the next request"). A `transaction()` future leaked (`std::mem::forget`, safe Rust)
/// while its `BEGIN` is in flight hands out no guard either: the caller holds no transaction.
///
/// Steps: poll `client.transaction()` once (its `BEGIN` is sent, its reply unread) and leak
/// the future; `INSERT INTO autocommit VALUES (1)` through the client, then check from
/// another session that the row is there (an `INSERT` outside any transaction commits at
/// once), and that the client's status is `Idle`.
///
/// Before the fix: the guard whose `Drop` defers the `ROLLBACK` lived inside the future and
/// never dropped, so the `BEGIN` held: the `INSERT` ran inside a transaction nobody held, the
/// other session saw no row, and the client reported `InTransaction` (a pool would have
/// reset it and the write was lost).
#[tokio::test]
async fn a_leaked_transaction_future_opens_no_transaction_nobody_holds() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE autocommit (n int)")
        .await
        .unwrap();
    {
        let mut begin = Box::pin(c.transaction());
        assert!(poll_once(begin.as_mut()), "BEGIN's reply cannot be in yet");
        std::mem::forget(begin);
    }
    bounded(
        "the INSERT after a leaked transaction()",
        c.execute("INSERT INTO autocommit VALUES (1)", &[]),
    )
    .await
    .unwrap();
    assert_eq!(
        c.transaction_status(),
        slipstream_pg::TransactionStatus::Idle,
        "the client is left in a transaction it never handed out"
    );
    let n: i64 = super::scalar(&mut watcher, "SELECT count(*) FROM autocommit").await;
    assert_eq!(n, 1, "the INSERT ran inside a transaction nobody holds");
}

/// A `ToSql` with a bug: it writes a whole `Sync` message into the buffer it is given, then
/// panics.
#[derive(Debug)]
struct WritesThenPanics;

impl postgres_types::ToSql for WritesThenPanics {
    fn to_sql(
        &self,
        _: &postgres_types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&[b'S', 0, 0, 0, 4]);
        panic!("a bug in a ToSql impl, after it wrote")
    }
    fn accepts(_: &postgres_types::Type) -> bool {
        true
    }
    postgres_types::to_sql_checked!();
}

/// Promise (query.rs, `all_or_nothing`; client.md, "Cancellation and timeouts": the
/// connection stays in step, a call never reads another call's rows): a user's `ToSql` that
/// panics part-way leaves nothing in the write buffer, or the half it wrote is sent with the
/// next request (and a pool, whose guard drops while the task unwinds, lends the connection).
/// That held for the `Bind` (attack_abandoned_calls' A10); the parameter-type inference of a
/// cache miss, a one-off statement and a pipelined SQL operation also encodes each value, into
/// the end of the write buffer, to learn which types it accepts.
///
/// Steps: `query("SELECT $1::text", &[&WritesThenPanics])` (SQL text: a cache miss), the panic
/// caught; then `SELECT 1`, `SELECT 2` must read `1`, `2`. The same through a pipeline's
/// `query` (its block then dropped while unwinding).
///
/// Before the fix: the `Sync` the value wrote stayed in the write buffer and went out ahead of
/// the next request; its extra `ReadyForQuery` was read as that request's reply.
#[tokio::test]
async fn a_panicking_to_sql_leaves_nothing_from_type_inference() {
    use futures_util::FutureExt;
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    for pipelined in [false, true] {
        let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
        let caught = if pipelined {
            std::panic::AssertUnwindSafe(async {
                let mut p = c.pipeline();
                p.query("SELECT $1::text", &[&WritesThenPanics])
                    .await
                    .map(drop)
            })
            .catch_unwind()
            .await
        } else {
            std::panic::AssertUnwindSafe(c.query("SELECT $1::text", &[&WritesThenPanics]))
                .catch_unwind()
                .await
                .map(|r| r.map(drop))
        };
        assert!(caught.is_err(), "the ToSql panicked");
        for want in [1, 2] {
            let got = bounded(
                "the call after a panicking ToSql",
                c.query(&*format!("SELECT {want}"), &[]),
            )
            .await;
            let got: Vec<i32> = match got {
                Ok(rows) => rows.iter().map(|r| r.get(0).unwrap()).collect(),
                Err(e) => panic!("pipelined {pipelined}: SELECT {want} failed: {e}"),
            };
            assert_eq!(
                got,
                [want],
                "pipelined {pipelined}: a call read another's reply"
            );
        }
    }
}

/// Held (pipelining.md, "Leaking a pipeline"; client.md, "Transactions": a failure nobody
/// read is named, and a savepoint keeps the transaction going past it). A leaked abort-mode
/// block whose open group `process` had sent whole, inside a savepoint inside a
/// `Transaction`, is failed on purpose by the next request: nothing of it commits, the
/// statement after it names the abandoned block, and rolling the savepoint back lets the
/// transaction commit its own work only.
///
/// Steps: `BEGIN` (a guard), `INSERT 1`, savepoint `s`, an abort-mode block with `INSERT 2`
/// and `SELECT 42`, `process` the `INSERT`, leak the block; `SELECT 1` in the savepoint must
/// fail naming the pipeline block; roll `s` back, `INSERT 3`, commit; the table must hold 1
/// and 3. The same with the block leaked while still in the write buffer (nothing of it
/// sent), where `SELECT 1` must read `1` and the savepoint be released.
#[tokio::test]
async fn a_leaked_block_in_a_savepoint_commits_nothing_and_is_named() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    for processed in [true, false] {
        c.batch_execute("DROP TABLE IF EXISTS sp_leak; CREATE TABLE sp_leak (n int)")
            .await
            .unwrap();
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO sp_leak VALUES (1)", &[])
            .await
            .unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            {
                let mut p =
                    sp.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
                let insert = p
                    .execute("INSERT INTO sp_leak VALUES (2)", &[])
                    .await
                    .unwrap();
                p.query("SELECT 42", &[]).await.unwrap();
                if processed {
                    assert_eq!(p.process(&insert).await.unwrap(), 1);
                }
                std::mem::forget(p);
            }
            let next = bounded("the call after the leak", sp.query("SELECT 1", &[])).await;
            if processed {
                let e = next.expect_err("the leaked block failed the transaction");
                assert!(
                    e.to_string().contains("pipeline block"),
                    "the error does not name the abandoned block: {e}"
                );
                sp.rollback().await.unwrap();
            } else {
                let rows = next.unwrap();
                let got: Vec<i32> = rows.iter().map(|r| r.get(0).unwrap()).collect();
                assert_eq!(got, [1], "the call read the leaked block's rows");
                sp.commit().await.unwrap();
            }
        }
        tx.execute("INSERT INTO sp_leak VALUES (3)", &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let rows = watcher
            .query("SELECT n FROM sp_leak ORDER BY n", &[])
            .await
            .unwrap();
        let got: Vec<i32> = rows.iter().map(|r| r.get(0).unwrap()).collect();
        assert_eq!(got, [1, 3], "processed {processed}: what committed");
        assert!(c.is_reusable());
    }
}

/// Promise (client.md, "Errors": where the server's error blames nothing the caller did, a
/// 25P02 after a failure nobody read, the client's note says why and what to do; the same
/// note was given today to a dropped row stream's and a dropped pipeline block's failures).
/// A `CopyIn` dropped part-way, or leaked (`std::mem::forget`), inside a transaction is
/// aborted by the next request, which reads the COPY's error away unseen: the transaction is
/// then failed by something no statement of the caller's reported.
///
/// Steps: in a `Transaction`, `INSERT 1`, `COPY cpt FROM STDIN`, write a row, drop (then, in a
/// second round, leak) the `CopyIn`; `SELECT 1` in the transaction must fail naming the COPY,
/// and so must `commit()`; nothing may have been saved.
///
/// Before the fix: `SELECT 1` failed with the server's bare 25P02 ("current transaction is
/// aborted") and `commit()` with "a statement in it had failed", naming neither the COPY nor
/// what to do.
#[tokio::test]
async fn a_dropped_or_leaked_copy_in_is_named_as_why_the_transaction_failed() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE cpt (n int)").await.unwrap();
    for leak in [false, true] {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO cpt VALUES (1)", &[]).await.unwrap();
        let mut w = tx.copy_in("COPY cpt FROM STDIN").await.unwrap();
        w.write(b"2\n").await.unwrap();
        if leak {
            std::mem::forget(w)
        } else {
            drop(w)
        }
        let e = bounded("the statement after the COPY", tx.query("SELECT 1", &[]))
            .await
            .expect_err("the aborted COPY failed the transaction");
        assert!(
            e.to_string().contains("COPY"),
            "leak {leak}: the 25P02 does not name the aborted COPY: {e}"
        );
        let e = tx.commit().await.expect_err("nothing can be committed");
        assert!(
            e.to_string().contains("COPY"),
            "leak {leak}: commit does not name the aborted COPY: {e}"
        );
        let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM cpt").await;
        assert_eq!(n, 0, "leak {leak}: something was saved");
    }
}

#[derive(Debug, Clone, PartialEq, postgres_types::ToSql, postgres_types::FromSql)]
#[postgres(name = "rpair")]
struct RPair {
    a: Option<i32>,
    b: Option<i32>,
}

/// `tp2`'s one value, or the error reading it.
async fn read(c: &mut slipstream_pg::Client) -> Result<RPair, slipstream_pg::Error> {
    c.query_one("SELECT p FROM tp2", &[])
        .await?
        .get::<_, RPair>(0)
}

/// Promise (client.md, "Types": after an `ALTER TYPE` run on the connection, "a composite is
/// never read in its old field order"; the cache is forgotten on its command tag). An
/// `ALTER TYPE` inside a transaction that is then rolled back changes the type twice: once
/// with its tag, and back again with the `ROLLBACK`, whose tag forgets nothing.
///
/// Steps: `rpair` is `(a int4, b int4)`, `tp2` holds `(1, 2)`, read once (cached). In a
/// `Transaction`: `ALTER TYPE rpair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4` (now `(b, a)`),
/// read `tp2` (the client looks the new definition up), roll back (the type is `(a, b)`
/// again); read `tp2` again. It must be `(a = 1, b = 2)` or an error; the same with the
/// guard dropped instead of rolled back, and with a savepoint rolled back to; a `Statement`
/// prepared in the transaction after the `ALTER` must be refused or read right after it.
///
/// Before the fix: the read after the rollback gave `a = 2, b = 1`, with no error: the
/// client kept the rolled-back definition.
#[tokio::test]
async fn a_rolled_back_alter_type_never_swaps_fields() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute(
        "CREATE TYPE rpair AS (a int4, b int4); CREATE TABLE tp2 (p rpair);
         INSERT INTO tp2 VALUES (ROW(1, 2))",
    )
    .await
    .unwrap();
    let truth = RPair {
        a: Some(1),
        b: Some(2),
    };
    assert_eq!(read(&mut c).await.unwrap(), truth);
    let alter = "ALTER TYPE rpair DROP ATTRIBUTE a, ADD ATTRIBUTE a int4";
    let mut held = None;
    for how in ["rollback", "drop", "savepoint"] {
        {
            let mut tx = c.transaction().await.unwrap();
            if how == "savepoint" {
                let mut sp = tx.savepoint("s").await.unwrap();
                sp.batch_execute(alter).await.unwrap();
                let inside = read(&mut sp).await.unwrap();
                assert_eq!(
                    inside,
                    RPair {
                        a: None,
                        b: Some(2)
                    }
                );
                sp.rollback().await.unwrap();
                let after = read(&mut tx).await;
                if let Ok(v) = &after {
                    assert_eq!(v, &truth, "{how}: read in the rolled-back type's order");
                }
                tx.rollback().await.unwrap();
            } else {
                tx.batch_execute(alter).await.unwrap();
                let inside = read(&mut tx).await.unwrap();
                assert_eq!(
                    inside,
                    RPair {
                        a: None,
                        b: Some(2)
                    }
                );
                held = Some(tx.prepare("SELECT p FROM tp2").await.unwrap());
                if how == "rollback" {
                    tx.rollback().await.unwrap();
                }
            }
        }
        if let Some(stmt) = held.take() {
            // Prepared by the rolled-back definition: refused, or read right.
            if let Ok(row) = c.query_one(&stmt, &[]).await
                && let Ok(v) = row.get::<_, RPair>(0)
            {
                assert_eq!(
                    v, truth,
                    "{how}: a statement prepared in the rolled-back type"
                );
            }
        }
        let after = read(&mut c).await;
        if let Ok(v) = &after {
            assert_eq!(v, &truth, "{how}: read in the rolled-back type's order");
        }
        assert_eq!(read(&mut c).await.unwrap(), truth, "{how}: a second read");
    }
}

/// Promise (client.md, "Types"; pipelining.md: in a block, the rows of operations after an
/// `ALTER TYPE` come from `end()` resolved, and a composite is never read in its old field
/// order). A block that alters a type and rolls the change back holds rows of both
/// definitions; `end()` resolves them after the block, by the definition the server has then.
///
/// Steps: `rpair2` is `(a int4, b int4)`, `tp3` holds `(1, 2)`, read once (cached). One block
/// (each mode): `BEGIN`, `ALTER TYPE rpair2 DROP ATTRIBUTE a, ADD ATTRIBUTE a int4`, `SELECT p
/// FROM tp3` (server: `(b = 2, a = NULL)`), `ROLLBACK`, `SELECT p FROM tp3` (server: `(a = 1,
/// b = 2)`), `end()`. Each read must be the server's value or an error.
#[tokio::test]
async fn a_block_that_alters_a_type_and_rolls_it_back_never_swaps_fields() {
    #[derive(Debug, Clone, PartialEq, postgres_types::FromSql)]
    #[postgres(name = "rpair2")]
    struct RPair2 {
        a: Option<i32>,
        b: Option<i32>,
    }
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute(
        "CREATE TYPE rpair2 AS (a int4, b int4); CREATE TABLE tp3 (p rpair2);
         INSERT INTO tp3 VALUES (ROW(1, 2))",
    )
    .await
    .unwrap();
    let row = c.query_one("SELECT p FROM tp3", &[]).await.unwrap();
    assert_eq!(
        row.get::<_, RPair2>(0).unwrap(),
        RPair2 {
            a: Some(1),
            b: Some(2)
        }
    );
    for mode in [PipelineMode::AbortOnError, PipelineMode::ContinueOnError] {
        let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
        p.execute("BEGIN", &[]).await.unwrap();
        p.execute(
            "ALTER TYPE rpair2 DROP ATTRIBUTE a, ADD ATTRIBUTE a int4",
            &[],
        )
        .await
        .unwrap();
        let inside = p.query("SELECT p FROM tp3", &[]).await.unwrap();
        p.execute("ROLLBACK", &[]).await.unwrap();
        let after = p.query("SELECT p FROM tp3", &[]).await.unwrap();
        let mut results = p.end().await;
        let mut value = |id: u64| -> Option<RPair2> {
            match std::mem::replace(&mut results[id as usize], Ok(slipstream_pg::Output::Taken)) {
                Ok(slipstream_pg::Output::Rows(rows)) => rows[0].get::<_, RPair2>(0).ok(),
                _ => None,
            }
        };
        if let Some(v) = value(inside.id()) {
            assert_eq!(
                v,
                RPair2 {
                    a: None,
                    b: Some(2)
                },
                "{mode:?}: the row read inside the transaction, by the rolled-back definition"
            );
        }
        if let Some(v) = value(after.id()) {
            assert_eq!(
                v,
                RPair2 {
                    a: Some(1),
                    b: Some(2)
                },
                "{mode:?}: after the ROLLBACK"
            );
        }
    }
}
