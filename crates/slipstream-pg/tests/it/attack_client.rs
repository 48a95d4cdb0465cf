//! Attacks on the client's promises: the statement cache under translated server messages and
//! statements deallocated behind its back.

use slipstream_pg::SqlState;
use slipstream_testkit::Cluster;

/// A server whose messages are in German once a session sets `lc_messages = 'C.UTF-8'`
/// (gettext honours `LANGUAGE` under any locale but plain `C`), as on a server run with
/// `lc_messages = 'de_DE.UTF-8'`.
fn german_cluster() -> Cluster {
    Cluster::builder().env("LANGUAGE", "de").start().unwrap()
}

/// "cached plan must not change result type" is translated like any server message; the
/// transparent re-prepare after DDL must not depend on the server's language.
#[tokio::test]
async fn ddl_is_handled_transparently_whatever_the_servers_language() {
    let cluster = german_cluster();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute(
        "SET lc_messages = 'C.UTF-8';
         CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)",
    )
    .await
    .unwrap();
    // The server really speaks German now.
    let e = c.batch_execute("SELECT 1/0").await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::DIVISION_BY_ZERO));
    assert!(e.to_string().contains("Division durch Null"), "{e}");

    super::statement_cache::reprepares_after_ddl(&mut c).await;
    let q = "SELECT * FROM t WHERE id = $1";

    // Inside a transaction: the clear error, also in German.
    c.batch_execute("BEGIN; ALTER TABLE t DROP COLUMN more")
        .await
        .unwrap();
    let e = c.query_one(q, &[&1i32]).await.unwrap_err();
    assert_eq!(e.code(), Some(SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    assert!(e.to_string().contains("roll back"), "{e}");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(c.query_one(q, &[&1i32]).await.unwrap().columns().len(), 3);
}

/// `DEALLOCATE ALL` run where the client cannot see its command tag (inside a `DO` block or a
/// function) drops every cached statement at once. Inside a transaction the first one to run
/// fails with "roll back and run the transaction again"; that advice must hold: the rerun must
/// not fail on the next cached statement, and the one after, one transaction per statement.
#[tokio::test]
async fn a_deallocate_all_the_client_cannot_see_costs_one_failed_transaction_not_one_per_statement()
{
    let (_cluster, mut c) = super::setup().await;
    let queries = [
        "SELECT $1::int4 + 1",
        "SELECT $1::int4 + 2",
        "SELECT $1::int4 + 3",
    ];
    for q in queries {
        c.query_one(q, &[&1i32]).await.unwrap();
    }
    c.batch_execute("DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$")
        .await
        .unwrap();

    let mut failed_transactions = 0;
    for _attempt in 0..queries.len() {
        c.batch_execute("BEGIN").await.unwrap();
        let mut ok = true;
        for (i, q) in queries.iter().enumerate() {
            match c.query_one(*q, &[&1i32]).await {
                Ok(row) => assert_eq!(row.get::<_, i32>(0).unwrap(), 2 + i as i32),
                Err(e) => {
                    assert_eq!(e.code(), Some(SqlState::INVALID_SQL_STATEMENT_NAME), "{e}");
                    assert!(e.to_string().contains("roll back"), "{e}");
                    ok = false;
                    break;
                }
            }
        }
        c.batch_execute(if ok { "COMMIT" } else { "ROLLBACK" })
            .await
            .unwrap();
        if ok {
            break;
        }
        failed_transactions += 1;
    }
    assert_eq!(
        failed_transactions, 1,
        "the advice 'run the transaction again' failed again on the next cached statement"
    );
}

/// A `COPY ... TO STDOUT` in a multi-statement string is refused, but the server cannot be
/// stopped: the COPY runs, and so do the statements after it, which commit. An error that
/// only says "use copy_out" reads as "nothing ran", and a caller who retries the string runs
/// its writes twice; the error must say what ran.
#[tokio::test]
async fn a_refused_copy_to_stdout_says_the_statements_around_it_ran() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (id int)").await.unwrap();
    let sql = "INSERT INTO t VALUES (1); COPY (SELECT 1) TO STDOUT; INSERT INTO t VALUES (2)";
    let e = c.batch_execute(sql).await.unwrap_err();
    assert!(e.to_string().contains("copy_out"), "{e}");
    let (reply, error) = c.simple_query_until_error(sql).await;
    let e2 = error.expect("still refused");
    let n: i64 = super::scalar(&mut c, "SELECT count(*) FROM t").await;
    assert_eq!(n, 4, "both runs of the string committed both inserts");
    let tags = reply
        .iter()
        .filter(|m| matches!(m, slipstream_pg::SimpleQueryMessage::CommandComplete { .. }))
        .count();
    assert_eq!(tags, 3, "INSERT, COPY and INSERT completed: {reply:?}");
    for e in [e, e2] {
        let text = e.to_string();
        assert!(
            text.contains("ran") && text.contains("after it"),
            "the error does not say the COPY and the statements after it ran: {text}"
        );
    }
}

/// Held: budgets of 0 and 1 byte still deliver every row (one per round trip) within the cap
/// plus one row, rows of many columns and rows whose size varies wildly included.
#[tokio::test]
async fn tiny_byte_budgets_deliver_every_row_within_the_cap() {
    let (_cluster, mut c) = super::setup().await;
    let sql = "SELECT g, repeat('x', (g % 7) * (g % 7) * 3000), 1, 2, 3, 4, 5, 6, 7, 8 \
               FROM generate_series(1, 200) g";
    for budget in [0, 1, 4096] {
        let mut rows = c
            .query_stream_with(sql, &[], slipstream_pg::FetchSize::Bytes(budget))
            .await
            .unwrap();
        let (mut n, mut widest) = (0, 0);
        while let Some(row) = rows.next().await.unwrap() {
            n += 1;
            assert_eq!(row.get::<_, i32>(0).unwrap(), n);
            widest = widest.max(row.get::<_, &str>(1).unwrap().len());
        }
        assert_eq!(n, 200, "budget {budget}");
        assert!(
            rows.peak_buffered_bytes() <= budget + widest + 1024,
            "budget {budget}: peak {}",
            rows.peak_buffered_bytes()
        );
    }
}

/// Held: 8000-byte notifications arriving during a pipeline and during
/// `simple_query_until_error` are kept, in order, and the calls' own results are unchanged.
#[tokio::test]
async fn notifications_arriving_during_pipelines_and_failing_strings_are_kept() {
    let (cluster, mut c) = super::setup().await;
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("LISTEN big").await.unwrap();
    let payload = "p".repeat(7999);
    let notify = format!("NOTIFY big, '{payload}'");
    other.batch_execute(&notify).await.unwrap();
    let mut p = c.pipeline_with(super::continue_on_error());
    p.query("SELECT 1", &[]).await.unwrap();
    p.query("SELECT pg_notify('big', $1)", &[&payload])
        .await
        .unwrap();
    for r in p.end().await {
        let slipstream_pg::Output::Rows(rows) = r.unwrap() else {
            panic!("not rows");
        };
        assert_eq!(rows.len(), 1);
    }
    other.batch_execute(&notify).await.unwrap();
    let (reply, e) = c
        .simple_query_until_error(&format!("SELECT 1; {notify}; SELECT 1/0; SELECT 2"))
        .await;
    assert!(e.is_some());
    assert_eq!(reply.len(), 4, "{reply:?}");
    other.batch_execute(&notify).await.unwrap();
    c.batch_execute("SELECT 1").await.unwrap();
    let got = c.take_notifications();
    // The failed string's own NOTIFY was rolled back with it.
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got.iter().all(|n| n.payload() == payload));
}
