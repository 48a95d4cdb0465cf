//! Attacks on what the client says when the session changes under it mid-call (helper h63):
//! `client_encoding` set by the application's own SQL part-way through a pipeline, and the
//! server ending the session during a row stream, a COPY, a transaction and a pipeline.
//! Each checks what the server kept against what the client reported.

use slipstream_pg::{Client, Error, FetchSize, Output};
use std::time::Duration;

/// Longer than any call here takes; reaching it fails the test (a hang).
const LIMIT: Duration = Duration::from_secs(20);

/// What the table `te` holds, read by another connection.
async fn stored(peer: &tokio_postgres::Client) -> Vec<String> {
    peer.query("SELECT t FROM te ORDER BY t", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Promise (pipelining.md, "Failures, drops and cancellation": "an operation that ran and
/// committed is never reported as not run"; client.md: a `SET client_encoding` to anything
/// but UTF8 "closes the connection with an `ErrorKind::Usage` error"). PostgreSQL 14+ reports
/// a changed setting only before its next `ReadyForQuery`, so in a continue-on-error block
/// the operations sent after the `SET` run under the new encoding (an "é" sent is stored as
/// "Ã©") and commit before the client learns of it. The client cannot stop that, but it must
/// not tell the caller that those operations did not run: a caller that retries them on a
/// new connection writes them twice.
///
/// Before the fix: both `INSERT`s were stored, and each was reported as `Closed: pipeline
/// operation 1 did not complete: the session's client_encoding was set to LATIN1, ...`.
#[tokio::test]
async fn operations_that_ran_after_a_client_encoding_change_are_not_reported_as_not_run() {
    let (cluster, mut c) = super::setup().await;
    let peer = super::peer(&cluster).await;
    c.batch_execute("CREATE TABLE te (t text)").await.unwrap();
    let mut p = c.pipeline_with(super::continue_on_error());
    let set = p
        .execute("SET client_encoding = 'LATIN1'", &[])
        .await
        .unwrap();
    let literal = p
        .execute("INSERT INTO te VALUES ('é1')", &[])
        .await
        .unwrap();
    let param = p
        .execute("INSERT INTO te VALUES ($1)", &[&"é2"])
        .await
        .unwrap();
    let results = tokio::time::timeout(LIMIT, p.end())
        .await
        .expect("the block ends");
    assert!(
        matches!(results[set.id() as usize], Ok(Output::Affected(_))),
        "{:?}",
        super::describe(&results)
    );
    // The client stopped reading at the `SET`'s reply, but its socket is still open, so the
    // server runs what was sent: wait until it is idle after the last `INSERT` (the condition,
    // not a guess of how long it takes), then see what it kept.
    let pid = c.backend_pid();
    tokio::time::timeout(LIMIT, async {
        while peer
            .query_opt(
                "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'idle' \
                 AND query = 'INSERT INTO te VALUES ($1)'",
                &[&pid],
            )
            .await
            .unwrap()
            .is_none()
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the server runs what was sent");
    let kept = stored(&peer).await;
    // The server ran both, converting their text from LATIN1.
    assert_eq!(kept, ["Ã©1", "Ã©2"], "{:?}", super::describe(&results));
    for op in [literal.id(), param.id()] {
        let e = results[op as usize]
            .as_ref()
            .expect_err("a result read under another encoding is not returned");
        let text = e.to_string();
        assert!(
            text.contains("may have run") && !text.contains("did not complete"),
            "operation {op} ran and committed, and was told: {text}"
        );
        assert!(text.contains("client_encoding"), "{text}");
    }
    assert!(c.is_broken());
    let next = c.query("SELECT 1", &[]).await.unwrap_err();
    assert!(next.is_closed(), "{next}");
}

/// Holds, within what the protocol allows. A row stream whose query changes
/// `client_encoding` part-way (`set_config` in the select list) gets its later rows converted
/// before the server reports the change, which it does only before the `ReadyForQuery` after
/// the stream's `Sync` (client.md says so). The caller must still learn of it: the stream
/// ends with the `Usage` error naming `client_encoding`, never with a clean end, and the
/// connection is closed.
#[tokio::test]
async fn holds_a_stream_whose_query_changes_client_encoding_ends_with_its_error() {
    let (_cluster, mut c) = super::setup().await;
    let mut s = c
        .query_stream_with(
            "SELECT g, CASE WHEN g = 3 THEN set_config('client_encoding', 'LATIN1', false) END \
             FROM generate_series(1, 10) g",
            &[],
            FetchSize::Rows(2),
        )
        .await
        .unwrap();
    let end = tokio::time::timeout(LIMIT, async {
        loop {
            match s.next().await {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .expect("the stream ends");
    let e = end.expect_err("a stream read under another encoding does not end cleanly");
    assert_eq!(e.kind(), slipstream_pg::ErrorKind::Usage, "{e}");
    assert!(e.to_string().contains("client_encoding"), "{e}");
    drop(s);
    assert!(c.is_broken());
}

/// Terminates backend `pid` from `w`.
async fn kill(w: &mut Client, pid: i32) {
    let done: bool = w
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert!(done);
}

/// Asserts that `r` is the server's end of the session: a `Closed` error saying `says`, never
/// a success or a hang.
fn ended<T: std::fmt::Debug>(what: &str, r: Result<T, Error>, says: &str) {
    let e = r.expect_err(what);
    assert!(e.is_closed(), "{what}: {e}");
    assert!(e.to_string().contains(says), "{what}: {e}");
}

/// Holds. Promise (client.md, "Errors": "after `Io`, `Protocol` or a FATAL server error the
/// connection is broken: every later call fails with `Closed` and the original cause"; no
/// hang; a transaction's `commit()` never reports an outcome that did not happen). The
/// server ends the session (`pg_terminate_backend`, `idle_in_transaction_session_timeout`) in
/// the middle of a row stream, a COPY OUT, a COPY IN and a transaction.
#[tokio::test]
async fn holds_a_session_ended_by_the_server_mid_call_ends_that_call_and_the_connection() {
    let (cluster, mut w) = super::setup().await;
    w.batch_execute(
        "CREATE TABLE big AS SELECT g, repeat('x', 1000) AS pad FROM generate_series(1, 20000) g; \
         CREATE TABLE sink (g int)",
    )
    .await
    .unwrap();
    // A backend terminated while it sends (a stream, a COPY OUT) may be cut mid-message
    // before its FATAL goes out: "server closed the connection unexpectedly in the middle of
    // a message (... the backend may have been terminated ...)". Either says "terminat".
    let killed = "terminat";

    // A row stream part-way: the rows already fetched arrive, then the error, in order.
    let mut c: Client = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let mut s = c
        .query_stream_with("SELECT g FROM big ORDER BY g", &[], FetchSize::Rows(100))
        .await
        .unwrap();
    let mut seen = 0;
    for _ in 0..150 {
        s.next().await.unwrap().unwrap();
        seen += 1;
    }
    kill(&mut w, pid).await;
    let end = tokio::time::timeout(LIMIT, async {
        loop {
            match s.next().await {
                Ok(Some(row)) => {
                    seen += 1;
                    assert_eq!(row.get::<_, i32>(0).unwrap(), seen, "rows in order");
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .expect("the stream ends");
    ended("row stream", end, killed);
    assert!(
        seen < 20000,
        "every row arrived after the session ended: {seen}"
    );
    drop(s);
    assert!(c.is_broken() && !c.is_reusable());
    ended("the call after", c.query("SELECT 1", &[]).await, killed);

    // COPY OUT part-way.
    let mut c: Client = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let mut out = c.copy_out("COPY big TO STDOUT").await.unwrap();
    for _ in 0..10 {
        out.next().await.unwrap().unwrap();
    }
    kill(&mut w, pid).await;
    let end = tokio::time::timeout(LIMIT, async {
        while out.next().await?.is_some() {}
        Ok(())
    })
    .await
    .expect("the COPY OUT ends");
    ended("COPY OUT", end, killed);
    drop(out);
    assert!(c.is_broken());

    // COPY IN part-way: nothing is loaded, and finish() says why.
    let mut c: Client = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let mut copy = c.copy_in("COPY sink FROM STDIN").await.unwrap();
    copy.write(b"1\n2\n").await.unwrap();
    kill(&mut w, pid).await;
    let end = tokio::time::timeout(LIMIT, async {
        for k in 0..2000 {
            copy.write(format!("{k}\n").as_bytes()).await?;
        }
        copy.finish().await
    })
    .await
    .expect("the COPY IN ends");
    ended("COPY IN", end, killed);
    let loaded: i64 = super::scalar(&mut w, "SELECT count(*) FROM sink").await;
    assert_eq!(loaded, 0);

    // A transaction whose session ended: commit() is an error, not a success.
    let mut c: Client = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let pid = c.backend_pid();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO sink VALUES (1)", &[])
        .await
        .unwrap();
    kill(&mut w, pid).await;
    ended("commit after a kill", tx.commit().await, killed);

    // The same through idle_in_transaction_session_timeout.
    let mut c: Client = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("SET idle_in_transaction_session_timeout = '50ms'")
        .await
        .unwrap();
    let pid = c.backend_pid();
    let mut tx = c.transaction().await.unwrap();
    tx.execute("INSERT INTO sink VALUES (2)", &[])
        .await
        .unwrap();
    // The condition itself (the backend is gone), not a guess of how long it takes.
    assert!(cluster.backend_gone_within(pid, LIMIT).unwrap());
    ended(
        "commit after the idle timeout",
        tx.commit().await,
        "idle-in-transaction timeout",
    );
    let kept: i64 = super::scalar(&mut w, "SELECT count(*) FROM sink").await;
    assert_eq!(kept, 0);
}
