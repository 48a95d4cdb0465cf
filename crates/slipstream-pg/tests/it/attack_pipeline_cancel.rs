//! Attacks on dropped and cancelled pipelines (helper h75): what a block abandoned part-way
//! commits, checked against what the server kept, when only part of the block reached the
//! socket.

use slipstream_pg::{Client, ErrorKind, PipelineMode, PipelineOptions};

use super::engine::{DropAfter, bounded};

fn abort_mode() -> PipelineOptions {
    PipelineOptions::new().mode(PipelineMode::AbortOnError)
}

/// Bytes of padding per row: 200 rows make 50 MiB of requests, far more than the kernel's
/// socket buffers on both sides (a few MiB on loopback) can take while the server waits.
const PAD: usize = 256 << 10;
const ROWS: i32 = 200;

/// Promise (docs/pipelining.md, "Failures, drops and cancellation"): an open abort-mode block
/// that is dropped is failed on purpose before its `Sync`; "a `COMMIT` in the block that the
/// server has already received has then committed the work before it". One it has not
/// received must not: the caller gave the block up, and none of it may commit.
///
/// Steps: another session holds an advisory lock; the block's first statement waits for it,
/// so the server stops reading and only the first part of 50 MiB of `INSERT`s reaches the
/// socket. A `COMMIT` is queued behind them, then an operation the client refuses (an `int8`
/// for an `int4` parameter), and the `?` drops the block with the `COMMIT` still in the
/// client's write buffer. The lock is released and the connection's next request settles the
/// block.
///
/// Before the fix: all 200 rows were committed. The drop appended its failing Execute
/// behind everything queued, so the next request sent the rest of the block, the `COMMIT`
/// the server never had when the block was dropped included, and it committed the rows.
#[tokio::test]
async fn a_dropped_block_commits_nothing_through_a_commit_the_server_never_received() {
    let (cluster, mut c) = super::setup().await;
    let mut holder = slipstream_pg::connect(&cluster.url()).await.unwrap();
    holder
        .batch_execute("SELECT pg_advisory_lock(7)")
        .await
        .unwrap();
    c.batch_execute("CREATE TABLE t (x int4, pad text)")
        .await
        .unwrap();
    let insert = c.prepare("INSERT INTO t VALUES ($1, $2)").await.unwrap();
    let pad = "x".repeat(PAD);
    async fn block(
        c: &mut Client,
        insert: &slipstream_pg::Statement,
        pad: &str,
    ) -> Result<(), slipstream_pg::Error> {
        // A window wide enough that queueing never waits for the blocked server; every 64
        // operations what is queued is written, as far as the socket takes it.
        let mut p = c.pipeline_with(abort_mode().max_in_flight_bytes(1 << 30));
        p.execute("SELECT pg_advisory_lock(7)", &[]).await?;
        for x in 0..ROWS {
            p.execute(insert, &[&x, &pad]).await?;
        }
        p.commit().await?;
        p.execute(insert, &[&1i64, &pad]).await?; // refused here: the block is dropped
        p.end().await;
        Ok(())
    }
    let e = bounded("the block", block(&mut c, &insert, &pad))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conversion, "{e}");
    holder
        .batch_execute("SELECT pg_advisory_unlock(7)")
        .await
        .unwrap();
    let marker = bounded("the next call", c.query_one("SELECT $1::int4", &[&77i32]))
        .await
        .unwrap();
    assert_eq!(marker.get::<_, i32>(0).unwrap(), 77);
    assert_eq!(
        c.transaction_status(),
        slipstream_pg::TransactionStatus::Idle
    );
    let kept: i64 = super::scalar(&mut holder, "SELECT count(*) FROM t").await;
    assert_eq!(
        kept, 0,
        "the dropped block committed {kept} rows through a COMMIT still in the client's buffer"
    );
}

/// Promise (docs/pipelining.md): a pipeline given up before its end commits nothing of its
/// open group, and "Dropping a process/end future (a timeout, `select!`)" is safe. An `end()`
/// that times out before its `Sync` reached the server gave the block up the same way: the
/// caller may retry it, and the first attempt must not commit behind the retry's back.
///
/// Steps: the block's first statement waits for an advisory lock another session holds, so
/// only the first part of 50 MiB of `INSERT`s reaches the socket; `end()` is polled once
/// (it writes what the socket takes and waits) and dropped, as a timeout drops it. The lock
/// is released and the caller retries the same block, which completes.
///
/// Before the fix: 400 rows, each row twice. `end()` had queued the block's `Sync` before it
/// was dropped; the retry's first request sent the rest of the abandoned block with it, and
/// the server committed both.
#[tokio::test]
async fn an_end_dropped_before_its_sync_was_sent_commits_nothing_and_a_retry_runs_once() {
    let (cluster, mut c) = super::setup().await;
    let mut holder = slipstream_pg::connect(&cluster.url()).await.unwrap();
    holder
        .batch_execute("SELECT pg_advisory_lock(7)")
        .await
        .unwrap();
    c.batch_execute("CREATE TABLE t (x int4, pad text)")
        .await
        .unwrap();
    let insert = c.prepare("INSERT INTO t VALUES ($1, $2)").await.unwrap();
    let pad = "x".repeat(PAD);
    async fn block(
        c: &mut Client,
        insert: &slipstream_pg::Statement,
        pad: &str,
        give_up: bool,
    ) -> Result<(), slipstream_pg::Error> {
        let mut p = c.pipeline_with(abort_mode().max_in_flight_bytes(1 << 30));
        p.execute("SELECT pg_advisory_lock(7), pg_advisory_unlock(7)", &[])
            .await?;
        for x in 0..ROWS {
            p.execute(insert, &[&x, &pad]).await?;
        }
        if give_up {
            let outcome = DropAfter::new(p.end(), 1).await;
            assert!(outcome.is_none(), "end() completed with the server blocked");
            return Ok(());
        }
        for r in p.end().await {
            r?;
        }
        Ok(())
    }
    bounded("the block", block(&mut c, &insert, &pad, true))
        .await
        .unwrap();
    holder
        .batch_execute("SELECT pg_advisory_unlock(7)")
        .await
        .unwrap();
    bounded("the retry", block(&mut c, &insert, &pad, false))
        .await
        .unwrap();
    assert_eq!(
        c.transaction_status(),
        slipstream_pg::TransactionStatus::Idle
    );
    let kept: i64 = super::scalar(&mut holder, "SELECT count(*) FROM t").await;
    assert_eq!(
        kept,
        i64::from(ROWS),
        "the block given up by a dropped end() committed too, beside its retry"
    );
}
