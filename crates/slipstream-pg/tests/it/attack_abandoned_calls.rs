//! Attack tests (review of issue 17): scenarios the engine/cancellation/hostile suites do not
//! cover. Each asserts the promised behaviour, so a failing test is a confirmed break.

use std::time::Duration;

use slipstream_pg::{
    Client, ErrorKind, PipelineMode, PipelineOptions, TransactionStatus, Uncached,
};

use super::engine::{DropAfter, bounded};

async fn count(c: &mut Client, sql: &str) -> i64 {
    bounded(sql, c.query_one(&Uncached(sql), &[]))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
        .unwrap()
}

/// Polls `fut` once and drops it; panics if it completed.
async fn abandon<T>(fut: impl std::future::Future<Output = T>) {
    assert!(
        DropAfter::new(fut, 1).await.is_none(),
        "completed in one poll: nothing was abandoned"
    );
}

// A1. SQL containing a NUL byte through the simple protocol: the call is refused with a usage
// error, but `frontend::query` has already appended 'Q' and a zeroed length to wbuf. The
// connection says it is reusable, and the *next* call (maybe another borrower's) fails.
#[tokio::test]
async fn attack_nul_in_simple_sql_does_not_break_the_next_call() {
    let (_cluster, mut c) = super::setup().await;
    let e = c.batch_execute("SELECT 1 -- \0").await.unwrap_err();
    eprintln!("batch_execute: {e} (kind {:?})", e.kind());
    assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
    eprintln!("is_reusable after the refusal: {}", c.is_reusable());
    let next = bounded("next call", c.query_one("SELECT 1", &[])).await;
    assert!(
        next.is_ok(),
        "the call after a refused NUL-containing SQL failed: {}",
        next.unwrap_err()
    );
}

// A1b. The same through copy_in and a savepoint name.
#[tokio::test]
async fn attack_nul_in_copy_sql_or_savepoint_name_does_not_break_the_next_call() {
    let (_cluster, mut c) = super::setup().await;
    let e = c.copy_in("COPY t FROM STDIN -- \0").await.unwrap_err();
    eprintln!("copy_in: {e}");
    let next = bounded("after copy_in", c.query_one("SELECT 1", &[])).await;
    assert!(next.is_ok(), "after copy_in refusal: {}", next.unwrap_err());

    let (_cluster2, mut c) = super::setup().await;
    {
        let mut tx = c.transaction().await.unwrap();
        let e = tx.savepoint("a\0b").await.unwrap_err();
        eprintln!("savepoint: {e}");
        let next = bounded("in tx after savepoint", tx.query_one("SELECT 1", &[])).await;
        assert!(
            next.is_ok(),
            "after savepoint refusal: {}",
            next.unwrap_err()
        );
    }
}

// A2. CopyIn::abort with a reason containing NUL: `finished` is set before queue_copy_fail
// fails, so the Drop does not flag the abort, and a partial CopyFail header stays in wbuf.
#[tokio::test]
async fn attack_copy_abort_with_nul_reason_neither_hangs_nor_breaks() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE t (x int)").await.unwrap();
    let mut copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    copy.write(b"1\n2\n").await.unwrap();
    // The reason's NUL is escaped (it is only for the server's log), so the abort goes through.
    copy.abort("bad input\0here").await.unwrap();
    eprintln!("is_reusable: {} broken: {}", c.is_reusable(), c.is_broken());
    let next = tokio::time::timeout(Duration::from_secs(10), c.query_one("SELECT 1", &[])).await;
    match &next {
        Err(_) => panic!("the call after CopyIn::abort(NUL) hung (10 s)"),
        Ok(Err(e)) => panic!("the call after CopyIn::abort(NUL) failed: {e}"),
        Ok(Ok(_)) => {}
    }
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM t").await,
        0,
        "aborted COPY loaded rows"
    );
}

// A3. A dropped first run of new SQL (Plan::Prepare: Parse of a named statement in the same
// request) leaves a named statement on the server that nothing will ever close: the statement
// cache's bound on server-side statements is bypassed, one leak per timeout.
#[tokio::test]
async fn attack_dropped_first_runs_do_not_leak_server_side_statements() {
    let (_cluster, mut c) = super::setup().await;
    for i in 0..20i32 {
        let r = tokio::time::timeout(
            Duration::from_millis(30),
            c.query("SELECT $1::int4 FROM pg_sleep(0.2)", &[&i]),
        )
        .await;
        assert!(r.is_err(), "the query was expected to time out");
        c.settle().await.unwrap();
    }
    // The explicit prepare dropped after its request went out.
    for _ in 0..5 {
        abandon(c.prepare("SELECT 42 WHERE $1::int4 > 0")).await;
        c.settle().await.unwrap();
    }
    // A pipeline prepare whose result was never read.
    {
        let mut p = c.pipeline_with(crate::continue_on_error());
        p.prepare("SELECT 43 WHERE $1::int4 > 0").await.unwrap();
        drop(p);
    }
    c.query_one("SELECT 1", &[]).await.unwrap(); // settles
    let cached = c.statement_cache_stats().size as i64;
    let on_server = count(&mut c, "SELECT count(*) FROM pg_prepared_statements").await;
    for r in c
        .query(
            &Uncached("SELECT name, statement FROM pg_prepared_statements ORDER BY prepare_time"),
            &[],
        )
        .await
        .unwrap()
    {
        eprintln!(
            "  {} {}",
            r.get::<_, &str>(0).unwrap(),
            r.get::<_, &str>(1).unwrap()
        );
    }
    eprintln!("cached {cached}, on the server {on_server}");
    assert!(
        on_server <= cached,
        "{} server-side statements leaked (cache holds {cached}, server has {on_server})",
        on_server - cached
    );
}

// A3 with a type that is not built in: after the first run's reply the call looks its types up
// in a request of its own; a call dropped at any poll, the lookup included, leaves no statement.
#[tokio::test]
async fn dropped_first_runs_during_a_type_lookup_do_not_leak_statements() {
    let (_cluster, mut c) = super::setup().await;
    for k in 1..=12usize {
        c.batch_execute(&format!("CREATE TYPE e{k} AS ENUM ('a')"))
            .await
            .unwrap();
        let sql = format!("SELECT $1::int4, 'a'::e{k}");
        let _ = DropAfter::new(c.query(sql.as_str(), &[&1i32]), k).await;
        c.settle().await.unwrap();
        let prepared = format!("SELECT $1::int4 + 1, 'a'::e{k}");
        let _ = DropAfter::new(c.prepare(&prepared), k).await;
        c.settle().await.unwrap();
    }
    c.query_one("SELECT 1", &[]).await.unwrap(); // settles, closing what is left
    let on_server = count(&mut c, "SELECT count(*) FROM pg_prepared_statements").await;
    let cached = c.statement_cache_stats().size as i64;
    assert!(
        on_server <= cached,
        "{} server-side statements leaked (cache holds {cached}, server has {on_server})",
        on_server - cached
    );
}

// A3's counterpart: closing what dropped calls left must never close a statement that a
// completed call still uses. Every path that parses a named statement (a first run, a failed
// first run, prepare(), a row stream's first run, a pipeline prepare) completes, and then each
// statement still runs without the cache having to prepare it again.
#[tokio::test]
async fn completed_first_runs_keep_their_server_side_statements() {
    let (_cluster, mut c) = super::setup().await;
    c.query("SELECT $1::int4 + 1", &[&1i32]).await.unwrap();
    let failed = c.query("SELECT 1 / $1::int4", &[&0i32]).await;
    assert_eq!(
        failed.unwrap_err().code(),
        Some(slipstream_pg::SqlState::DIVISION_BY_ZERO)
    );
    let prepared = c.prepare("SELECT $1::int4 + 2").await.unwrap();
    {
        let mut rows = c
            .query_stream("SELECT $1::int4 + 3", &[&1i32])
            .await
            .unwrap();
        while rows.next().await.unwrap().is_some() {}
    }
    let piped = {
        let mut p = c.pipeline();
        let op = p.prepare("SELECT $1::int4 + 4").await.unwrap();
        p.process(&op).await.unwrap()
    };
    for _ in 0..2 {
        c.query("SELECT $1::int4 + 1", &[&1i32]).await.unwrap();
        c.query("SELECT 1 / $1::int4", &[&1i32]).await.unwrap();
        c.query(&prepared, &[&1i32]).await.unwrap();
        c.query("SELECT $1::int4 + 3", &[&1i32]).await.unwrap();
        c.query(&piped, &[&1i32]).await.unwrap();
    }
    assert_eq!(
        c.statement_cache_stats().reprepares,
        0,
        "a live statement was closed"
    );
    let on_server = count(&mut c, "SELECT count(*) FROM pg_prepared_statements").await;
    let cached = c.statement_cache_stats().size as i64;
    assert_eq!(
        on_server,
        cached + 2,
        "the cache's statements and the two prepared by hand"
    );
}

// A4. Abort mode outside BEGIN reports earlier operations "rolled back"; a session-level
// advisory lock taken by one of them is not rolled back and stays held.
#[tokio::test]
async fn attack_abort_mode_rolled_back_report_vs_nontransactional_effects() {
    let (_cluster, mut c) = super::setup().await;
    let mut p = c.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
    p.query("SELECT pg_advisory_lock(42)", &[]).await.unwrap();
    p.execute("SELECT 1/0", &[]).await.unwrap();
    let results = p.end().await;
    let first = results[0]
        .as_ref()
        .map(|_| ())
        .map_err(|e| (e.kind(), e.to_string()));
    eprintln!("op 0: {first:?}");
    let held = count(
        &mut c,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
    )
    .await;
    eprintln!("advisory locks held after the 'rolled back' report: {held}");
    // The lock is held (PostgreSQL does not release session-level advisory locks on
    // rollback), so a report of "rolled back" must say that such effects remain.
    if let (Err((_, text)), true) = (&first, held > 0) {
        assert!(
            text.contains("advisory locks"),
            "op 0 was reported rolled back without a word on what remains, yet its advisory \
             lock is held: {text}"
        );
    }
}

// A5. run()/query_stream compute "in a transaction" before settling: after a dropped
// batch_execute("BEGIN"), a stale cached statement is retried as if in autocommit.
#[tokio::test]
async fn attack_stale_statement_after_a_dropped_begin() {
    let (cluster, mut c) = super::setup().await;
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE st (a int); INSERT INTO st VALUES (1)")
        .await
        .unwrap();
    c.query("SELECT * FROM st", &[]).await.unwrap(); // cached
    other
        .batch_execute("ALTER TABLE st ADD COLUMN b int")
        .await
        .unwrap();
    abandon(c.batch_execute("BEGIN")).await;
    assert_eq!(c.transaction_status(), TransactionStatus::Idle); // stale
    let r = bounded("query", c.query("SELECT * FROM st", &[])).await;
    eprintln!("status now {:?}", c.transaction_status());
    match r {
        Ok(_) => {}
        Err(e) => {
            eprintln!("error: {e}");
            assert!(
                e.to_string().contains("went stale inside a transaction"),
                "a stale statement inside the (dropped) BEGIN's transaction was retried as if \
                 in autocommit: {e}"
            );
        }
    }
}

// A6. Notifications and notices interleaved with an abandoned COPY OUT and an abandoned row
// stream inside a transaction: none lost, connection in step.
#[tokio::test]
async fn attack_notifications_survive_abandoned_copy_out_and_stream() {
    let (cluster, mut c) = super::setup().await;
    let mut other = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("LISTEN ch").await.unwrap();
    other.batch_execute("NOTIFY ch, 'n1'").await.unwrap();
    {
        let mut out = c
            .copy_out("COPY (SELECT g, pg_notify('ch', 'g' || g) FROM generate_series(1, 5000) g) TO STDOUT")
            .await
            .unwrap();
        out.next().await.unwrap();
    }
    other.batch_execute("NOTIFY ch, 'n2'").await.unwrap();
    {
        let mut tx = c.transaction().await.unwrap();
        {
            let mut s = tx
                .query_stream_with(
                    "SELECT g FROM generate_series(1, 100000) g",
                    &[],
                    slipstream_pg::FetchSize::Rows(10),
                )
                .await
                .unwrap();
            s.next().await.unwrap();
        }
        assert_eq!(
            tx.query_one("SELECT 7", &[])
                .await
                .unwrap()
                .get::<_, i32>(0)
                .unwrap(),
            7
        );
        tx.commit().await.unwrap();
    }
    let mut got: Vec<String> = c
        .take_notifications()
        .into_iter()
        .map(|n| n.payload().to_string())
        .collect();
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(300), c.wait_for_notification()).await
    {
        got.push(n.payload().to_string());
    }
    eprintln!("{} notifications", got.len());
    assert!(got.contains(&"n1".to_string()) && got.contains(&"n2".to_string()));
    assert!(c.is_reusable());
}

// A7. A server (or proxy) that sends one ReadyForQuery too many: the extra one is read as the
// answer to the *next* request, which returns nothing, and every later call reads the reply of
// the call before it. The hostile-server promise is "an error, never a silent wrong answer".
mod extra_ready {
    use std::time::Duration;

    use slipstream_pg::{Config, SimpleQueryMessage, SslMode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }
    fn ready() -> Vec<u8> {
        msg(b'Z', b"I")
    }
    fn reply(value: &str) -> Vec<u8> {
        let mut rd = 1u16.to_be_bytes().to_vec();
        rd.extend_from_slice(b"v\0");
        rd.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        rd.extend_from_slice(&25u32.to_be_bytes());
        rd.extend_from_slice(&(-1i16).to_be_bytes());
        rd.extend_from_slice(&(-1i32).to_be_bytes());
        rd.extend_from_slice(&0u16.to_be_bytes());
        let mut dr = 1u16.to_be_bytes().to_vec();
        dr.extend_from_slice(&(value.len() as i32).to_be_bytes());
        dr.extend_from_slice(value.as_bytes());
        [
            msg(b'T', &rd),
            msg(b'D', &dr),
            msg(b'C', b"SELECT 1\0"),
            ready(),
        ]
        .concat()
    }

    #[tokio::test]
    async fn attack_an_extra_ready_for_query_is_an_error_not_a_shifted_reply() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let len = s.read_u32().await.unwrap() as usize;
            let mut body = vec![0u8; len - 4];
            s.read_exact(&mut body).await.unwrap();
            let auth_ok = msg(b'R', &0u32.to_be_bytes());
            let key = msg(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]);
            s.write_all(&[auth_ok, key, ready()].concat())
                .await
                .unwrap();
            let mut buf = [0u8; 4096];
            // Each request gets its reply; the first gets one ReadyForQuery too many.
            for (i, v) in ["a", "b", "c"].iter().enumerate() {
                if s.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                let mut out = reply(v);
                if i == 0 {
                    out.extend(ready());
                }
                s.write_all(&out).await.unwrap();
            }
            while let Ok(1..) = s.read(&mut buf).await {}
        });
        let config = Config::new()
            .host("127.0.0.1")
            .port(port)
            .user("u")
            .ssl_mode(SslMode::Disable)
            .connect_timeout(Duration::from_secs(10));
        let mut c = slipstream_pg::connect_config(&config).await.unwrap();
        let mut answers = Vec::new();
        for q in ["SELECT 'a'", "SELECT 'b'", "SELECT 'c'"] {
            let r = tokio::time::timeout(Duration::from_secs(5), c.simple_query(q)).await;
            let answer = match r {
                Err(_) => "hang".to_string(),
                Ok(Err(e)) => format!("error: {e}"),
                Ok(Ok(msgs)) => msgs
                    .iter()
                    .filter_map(|m| match m {
                        SimpleQueryMessage::Row(r) => r.get(0).ok().flatten().map(str::to_string),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            };
            eprintln!("{q} -> {answer:?}");
            answers.push(answer);
        }
        // Acceptable: the right answers, or an error from the point the extra message is seen.
        let wrong = answers
            .iter()
            .zip(["a", "b", "c"])
            .any(|(got, want)| !got.starts_with("error") && got != want);
        assert!(
            !wrong,
            "a call silently returned another call's answer: {answers:?}"
        );
    }
}

// A8. An abort-on-error block is all-or-nothing ("Both or neither: one implicit transaction").
// When a later operation fails on the client (a value its statement cannot take) the call
// returns Err, the natural `?` drops the pipeline, and Drop appends the block's Sync: the
// operations queued before it commit without it.
#[tokio::test]
async fn attack_abort_mode_block_dropped_after_a_client_side_failure_commits_nothing() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE ledger (x int4)")
        .await
        .unwrap();
    let credit = c.prepare("INSERT INTO ledger VALUES ($1)").await.unwrap();
    async fn transfer(
        c: &mut Client,
        credit: &slipstream_pg::Statement,
    ) -> Result<(), slipstream_pg::Error> {
        let mut p = c.pipeline_with(PipelineOptions::new().mode(PipelineMode::AbortOnError));
        p.execute("INSERT INTO ledger VALUES (-100)", &[]).await?; // debit
        p.execute(credit, &[&100i64]).await?; // int8 value for an int4 parameter: refused here
        for r in p.end().await {
            r?;
        }
        Ok(())
    }
    let r = transfer(&mut c, &credit).await;
    eprintln!(
        "transfer: {:?}",
        r.as_ref().map_err(|e| (e.kind(), e.to_string()))
    );
    assert!(r.is_err());
    let rows = count(&mut c, "SELECT count(*) FROM ledger").await;
    assert_eq!(
        rows, 0,
        "half of an abort-on-error block was committed: {rows} row(s)"
    );
}

// A9. Same block, dropped by a timeout on a later queue call (the sliding window waits).
#[tokio::test]
async fn attack_abort_mode_block_dropped_by_a_timeout_informational() {
    let (_cluster, mut c) = super::setup().await;
    c.batch_execute("CREATE TABLE ledger (x int4)")
        .await
        .unwrap();
    {
        let mut p = c.pipeline_with(
            PipelineOptions::new()
                .mode(PipelineMode::AbortOnError)
                .max_in_flight(1),
        );
        p.execute("INSERT INTO ledger VALUES (-100)", &[])
            .await
            .unwrap();
        let _ = tokio::time::timeout(
            Duration::from_millis(50),
            p.execute("SELECT pg_sleep(0.5)", &[]),
        )
        .await;
        // The caller gives up on the block: its future timed out.
    }
    let rows = count(&mut c, "SELECT count(*) FROM ledger").await;
    eprintln!("rows after abandoning the block: {rows}");
}

// A10. A ToSql that panics while its Bind is being encoded straight into the write buffer: the
// unwinding skips the truncate, leaving a Bind with a zero length. The connection still says it
// is reusable (a pool's guard, dropped while the task unwinds, puts it back), and the next
// call, maybe another borrower's, fails.
mod panicking_param {
    use futures_util::FutureExt;
    use postgres_types::{IsNull, ToSql, Type, to_sql_checked};

    use super::super::engine::bounded;

    #[derive(Debug)]
    struct Boom;
    impl ToSql for Boom {
        fn to_sql(
            &self,
            _: &Type,
            _: &mut bytes::BytesMut,
        ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
            panic!("a bug in a ToSql impl")
        }
        fn accepts(_: &Type) -> bool {
            true
        }
        to_sql_checked!();
    }

    #[tokio::test]
    async fn attack_a_panicking_to_sql_leaves_nothing_for_the_next_call() {
        let (_cluster, mut c) = super::super::setup().await;
        let stmt = c.prepare("SELECT $1::int4").await.unwrap();
        let caught = std::panic::AssertUnwindSafe(c.query(&stmt, &[&Boom]))
            .catch_unwind()
            .await;
        assert!(caught.is_err(), "the ToSql panicked");
        let reusable = c.is_reusable();
        eprintln!(
            "after the panic: reusable {reusable} broken {}",
            c.is_broken()
        );
        let next = bounded("next call", c.query_one("SELECT 1", &[])).await;
        assert!(
            next.is_ok() || !reusable,
            "a connection judged reusable failed its next call: {}",
            next.unwrap_err()
        );
        assert!(
            next.is_ok(),
            "next call after a panicking ToSql: {}",
            next.unwrap_err()
        );
    }
}

// A11. A statement-cache eviction's Close owed while the next request fails (client-side and
// server-side): the Close still goes out, nothing leaks, the connection stays in step.
#[tokio::test]
async fn attack_eviction_close_survives_a_failing_next_request() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&format!("{}?statement_cache_size=1", cluster.url()))
        .await
        .unwrap();
    c.query("SELECT $1::int4", &[&1i32]).await.unwrap();
    c.query("SELECT $1::int4 + 1", &[&1i32]).await.unwrap(); // evicts the first: Close owed
    let stmt = c.prepare("SELECT $1::int4 * 2").await.unwrap();
    let e = c.query(&stmt, &[&1i64]).await.unwrap_err(); // refused before anything is sent
    eprintln!("client-side failure: {e}");
    c.query("SELECT $1::int4 - 1", &[&1i32]).await.unwrap(); // evicts again
    let e = c.query("SELECT 1/0", &[]).await.unwrap_err();
    eprintln!("server-side failure: {e}");
    drop(stmt);
    c.query_one("SELECT 1", &[]).await.unwrap();
    let on_server = count(&mut c, "SELECT count(*) FROM pg_prepared_statements").await;
    assert_eq!(on_server, 1, "statements left: {on_server} (cache size 1)");
    assert!(c.is_reusable());
}

// A12. settle() hitting a dead socket while a dropped call is owed: an error, the connection
// broken, never judged reusable.
#[tokio::test]
async fn attack_settle_on_a_dead_socket() {
    let (cluster, mut c) = super::setup().await;
    let mut admin = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    abandon(c.query("SELECT pg_sleep(5)", &[])).await;
    admin
        .query("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let r = bounded("settle", c.settle()).await;
    eprintln!("settle: {r:?}");
    assert!(r.is_err());
    assert!(c.is_broken() && !c.is_reusable());
}
