//! Attacks on dropped and cancelled pipelines (helper h75): what a block abandoned part-way
//! commits, checked against what the server kept, when only part of the block reached the
//! socket.

use slipstream_pg::{Client, Error, ErrorKind, PipelineMode, PipelineOptions};

use super::engine::{DropAfter, bounded};

fn abort_mode() -> PipelineOptions {
    PipelineOptions::new().mode(PipelineMode::AbortOnError)
}

/// Bytes of padding per row: 200 rows make 50 MiB of requests, far more than the kernel's
/// socket buffers on both sides (a few MiB on loopback) can take while the server waits.
const PAD: usize = 256 << 10;
const ROWS: i32 = 200;

/// What the tests of a block stuck behind a lock share: a second session `holder` holds
/// advisory lock 7 (so a block that first takes it waits, and only the socket's worth of what
/// follows reaches the server), a table `t`, its prepared insert, and a row's padding.
struct Stuck {
    holder: Client,
    insert: slipstream_pg::Statement,
    pad: String,
}

async fn stuck_behind_a_lock(cluster: &slipstream_testkit::Cluster, c: &mut Client) -> Stuck {
    let mut holder = slipstream_pg::connect(&cluster.url()).await.unwrap();
    holder
        .batch_execute("SELECT pg_advisory_lock(7)")
        .await
        .unwrap();
    c.batch_execute("CREATE TABLE t (x int4, pad text)")
        .await
        .unwrap();
    let insert = c.prepare("INSERT INTO t VALUES ($1, $2)").await.unwrap();
    Stuck {
        holder,
        insert,
        pad: "x".repeat(PAD),
    }
}

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
    let Stuck {
        mut holder,
        insert,
        pad,
    } = stuck_behind_a_lock(&cluster, &mut c).await;
    async fn block(
        c: &mut Client,
        insert: &slipstream_pg::Statement,
        pad: &str,
    ) -> Result<(), slipstream_pg::Error> {
        // A window wide enough that queueing never waits for the blocked server; every 64
        // operations what is queued is written, as far as the socket takes it.
        let mut p = c.pipeline_with(abort_mode().max_in_flight_bytes(1 << 30));
        p.execute("SELECT pg_advisory_lock(7)", &[]).await?;
        p.prepare("SELECT 'sent'").await?;
        for x in 0..ROWS {
            p.execute(insert, &[&x, &pad]).await?;
        }
        p.commit().await?;
        p.prepare("SELECT 'kept back'").await?;
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
    let left: i64 = super::scalar(
        &mut c,
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT ''%'",
    )
    .await;
    assert_eq!(
        left, 0,
        "a prepare of the dropped block stays on the server"
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
    let Stuck {
        mut holder,
        insert,
        pad,
    } = stuck_behind_a_lock(&cluster, &mut c).await;
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

/// One block to drop at every poll: it queues rows into `t` and counts in `queued` each
/// operation whose queueing call returned.
type Block =
    for<'a> fn(
        &'a mut Client,
        &'a std::cell::Cell<i64>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + 'a>>;

/// What may be in `t` after the block was dropped with `queued` operations handed out.
type Kept = fn(kept: i64, queued: i64) -> bool;

const BLOCK_ROWS: i64 = 30;

fn all_or_nothing(kept: i64, _: i64) -> bool {
    kept == 0 || kept == BLOCK_ROWS
}

/// Each block, what may be kept after a drop, and what is kept once it completes.
fn blocks() -> Vec<(&'static str, Block, Kept, i64)> {
    vec![
        (
            "abort on error, a process in the middle, a small window",
            |c, queued| {
                Box::pin(async move {
                    let mut p = c.pipeline_with(abort_mode().max_in_flight(8));
                    let mut ops = Vec::new();
                    for x in 0..BLOCK_ROWS {
                        ops.push(p.execute("INSERT INTO t VALUES ($1)", &[&x]).await?);
                        queued.set(queued.get() + 1);
                        if x == 12 {
                            assert_eq!(p.process(&ops[5]).await?, 1);
                        }
                    }
                    p.sync();
                    assert_eq!(p.process(&ops[20]).await?, 1);
                    for r in p.end().await {
                        r?;
                    }
                    Ok(())
                })
            },
            all_or_nothing,
            BLOCK_ROWS,
        ),
        (
            "abort on error, BEGIN, a savepoint rolled back to, COMMIT",
            |c, queued| {
                Box::pin(async move {
                    let mut p = c.pipeline_with(abort_mode().max_in_flight(8));
                    p.execute("BEGIN", &[]).await?;
                    for x in 0..BLOCK_ROWS {
                        p.execute("INSERT INTO t VALUES ($1)", &[&x]).await?;
                        queued.set(queued.get() + 1);
                    }
                    p.execute("SAVEPOINT s", &[]).await?;
                    p.execute("INSERT INTO t VALUES (-1)", &[]).await?;
                    p.execute("ROLLBACK TO SAVEPOINT s", &[]).await?;
                    let commit = p.commit().await?;
                    p.process(&commit).await?;
                    for r in p.end().await {
                        r?;
                    }
                    Ok(())
                })
            },
            all_or_nothing,
            BLOCK_ROWS,
        ),
        (
            "abort on error, queued on after a failure was read, then a sync point",
            |c, queued| {
                Box::pin(async move {
                    let mut p = c.pipeline_with(abort_mode().max_in_flight(8));
                    let bad = p.execute("SELECT 1/0", &[]).await?;
                    assert!(p.process(&bad).await.is_err());
                    for x in 0..10i64 {
                        p.execute("INSERT INTO t VALUES ($1)", &[&x]).await?;
                    }
                    p.sync();
                    for x in 0..10i64 {
                        p.execute("INSERT INTO t VALUES ($1)", &[&x]).await?;
                        queued.set(queued.get() + 1);
                    }
                    let results = p.end().await;
                    let failed = results.iter().filter(|r| r.is_err()).count();
                    assert_eq!(failed, 10, "{:?}", super::describe(&results));
                    Ok(())
                })
            },
            // The skipped group writes nothing; the group after the sync point, all or none.
            |kept, _| kept == 0 || kept == 10,
            10,
        ),
        (
            "continue on error, a failing operation every seventh",
            |c, queued| {
                Box::pin(async move {
                    let mut p = c.pipeline_with(super::continue_on_error().max_in_flight(8));
                    let mut ops = Vec::new();
                    for x in 0..BLOCK_ROWS {
                        // Every seventh divides by zero: it fails alone, and writes nothing.
                        let d = i64::from(x % 7 != 3);
                        ops.push(
                            p.execute("INSERT INTO t VALUES ($1 / $2)", &[&x, &d])
                                .await?,
                        );
                        queued.set(queued.get() + 1);
                    }
                    assert_eq!(p.process(&ops[2]).await?, 1);
                    let results = p.end().await;
                    let failed = results.iter().filter(|r| r.is_err()).count();
                    assert_eq!(failed, 4, "{:?}", super::describe(&results));
                    Ok(())
                })
            },
            // Every operation handed out runs (one more may have been queued when its call
            // was dropped), and the failing ones write nothing.
            |kept, queued| {
                let rows = |n: i64| (0..n).filter(|x| x % 7 != 3).count() as i64;
                kept == rows(queued) || kept == rows(queued + 1)
            },
            26,
        ),
    ]
}

/// Promise (docs/pipelining.md, "Failures, drops and cancellation", and README: "Dropping a
/// future part-way never desynchronises the connection"): a block dropped at any await point,
/// a queueing call waiting on the window, a `process`, or `end`, leaves the connection in step
/// and commits all or nothing of an abort-mode group, and in continue-on-error mode exactly
/// the operations queued. Checked against the table with another connection, directly and
/// through the delay proxy, whose chunked delivery puts more await points in every block.
/// (`cancellation.rs` drops pipelines at every poll too, but checks only the next call.)
#[tokio::test]
async fn holds_blocks_dropped_at_every_poll_keep_all_or_nothing_and_stay_in_step() {
    let (cluster, proxy, mut slow) = super::behind_proxy("").await;
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE t (x int8)")
        .await
        .unwrap();
    proxy.set_rtt(std::time::Duration::from_micros(200));
    for (client, via) in [(&mut c, "direct"), (&mut slow, "through the proxy")] {
        for (name, block, allowed, done) in blocks() {
            let mut completed = false;
            for k in 1..=400 {
                let queued = std::cell::Cell::new(0);
                let what = format!("{name} ({via}), dropped at poll {k}");
                let outcome = bounded(&what, DropAfter::new(block(client, &queued), k)).await;
                let marker = k as i32;
                match bounded(&what, client.query_one("SELECT $1::int4", &[&marker])).await {
                    Ok(row) => {
                        assert_eq!(row.get::<_, i32>(0).unwrap(), marker, "{what}");
                        assert_eq!(
                            client.transaction_status(),
                            slipstream_pg::TransactionStatus::Idle,
                            "{what}"
                        );
                    }
                    // The block's own BEGIN was open when it was dropped: the drop failed
                    // that transaction on purpose, and the next call must say so.
                    Err(e) => {
                        assert_eq!(
                            e.code(),
                            Some(slipstream_pg::SqlState::IN_FAILED_SQL_TRANSACTION),
                            "{what}: {e}"
                        );
                        assert!(
                            e.to_string().contains("dropped before its end()"),
                            "{what}: {e}"
                        );
                        assert!(!client.is_reusable(), "{what}");
                        client.batch_execute("ROLLBACK").await.unwrap();
                    }
                }
                let kept: i64 = super::scalar(&mut watcher, "SELECT count(*) FROM t").await;
                assert!(
                    allowed(kept, queued.get()),
                    "{what}: {kept} rows kept, {} operations queued",
                    queued.get()
                );
                watcher.batch_execute("TRUNCATE t").await.unwrap();
                if let Some(result) = outcome {
                    result.unwrap_or_else(|e| panic!("{name} ({via}) failed: {e}"));
                    assert_eq!(kept, done, "{what}");
                    eprintln!("{name} ({via}): completed at poll {k}");
                    completed = true;
                    break;
                }
            }
            assert!(completed, "{name} ({via}) did not complete in 400 polls");
        }
    }
}

/// The same promise when the block ends with memopt lookups still held (they are written
/// after the group's `Sync`, as a sync point of their own): an `end()` dropped before that
/// `Sync` was sent commits nothing.
///
/// Before the fix: 200 rows. `end()` wrote the held run, which closes the group first, so it
/// saw no open group to give up.
#[tokio::test]
async fn an_end_dropped_with_lookups_held_commits_nothing_of_a_group_it_never_sent() {
    let (cluster, mut c) = super::memopt::memopt_setup().await;
    let Stuck {
        mut holder,
        insert,
        pad,
    } = stuck_behind_a_lock(&cluster, &mut c).await;
    let m = c.memopt_table("m").await.unwrap();
    {
        let mut p = c.pipeline_with(abort_mode().max_in_flight_bytes(1 << 30));
        p.execute("SELECT pg_advisory_lock(7)", &[]).await.unwrap();
        for x in 0..ROWS {
            p.execute(&insert, &[&x, &pad]).await.unwrap();
        }
        p.memopt_get(&m, &1i64).await.unwrap();
        let outcome = bounded("end", DropAfter::new(p.end(), 1)).await;
        assert!(outcome.is_none(), "end() completed with the server blocked");
    }
    holder
        .batch_execute("SELECT pg_advisory_unlock(7)")
        .await
        .unwrap();
    let marker = bounded("the next call", c.query_one("SELECT $1::int4", &[&77i32]))
        .await
        .unwrap();
    assert_eq!(marker.get::<_, i32>(0).unwrap(), 77);
    assert!(c.is_reusable());
    let kept: i64 = super::scalar(&mut holder, "SELECT count(*) FROM t").await;
    assert_eq!(kept, 0, "the block given up by a dropped end() committed");
    // The connection still looks up in step.
    let row = c.memopt_get(&m, &2i64).await.unwrap().unwrap();
    assert_eq!(row.get::<_, i64>(0).unwrap(), 2);
}

/// docs/pipelining.md, "Rolled-back work is never reported as done": a `BEGIN` queued in the
/// middle of an abort-mode group takes the operations before it since the sync point into its
/// transaction (PostgreSQL turns the implicit transaction into the block), so they share its
/// fate, unmarked like the operations after it; a `sync()` before the `BEGIN` commits them on
/// their own. Checked with another connection after the caller's `ROLLBACK`.
#[tokio::test]
async fn holds_a_begin_in_mid_group_takes_the_work_before_it_into_its_transaction() {
    let (cluster, mut c) = super::setup().await;
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (x int8)").await.unwrap();
    for synced in [false, true] {
        let mut p = c.pipeline_with(abort_mode());
        let before = p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
        if synced {
            p.sync();
        }
        p.execute("BEGIN", &[]).await.unwrap();
        p.execute("INSERT INTO t VALUES (2)", &[]).await.unwrap();
        p.execute("SELECT 1/0", &[]).await.unwrap();
        p.commit().await.unwrap();
        let results = p.end().await;
        let what = super::describe(&results);
        assert!(
            matches!(
                results[before.id() as usize],
                Ok(slipstream_pg::Output::Affected(1))
            ),
            "{what:?}"
        );
        assert_eq!(
            c.transaction_status(),
            slipstream_pg::TransactionStatus::Failed,
            "{what:?}"
        );
        c.batch_execute("ROLLBACK").await.unwrap();
        let kept: i64 = super::scalar(&mut watcher, "SELECT count(*) FROM t").await;
        assert_eq!(kept, i64::from(synced), "synced: {synced}, {what:?}");
        watcher.batch_execute("TRUNCATE t").await.unwrap();
    }
}

/// Promise (docs/pipelining.md, modes table): in an abort-mode block, after a failure "later
/// operations up to the next sync point are skipped and fail with `ErrorKind::Aborted`, naming
/// the failed one"; a sync point starts afresh; the connection stays in step.
///
/// Steps: the failure's reply is read before more operations join its group: (a) the caller
/// takes it with `process`, then queues on; (b) a sliding window (16 in flight) reads it
/// while queueing 100 more, with no `process` at all. Then a `sync()` and one more.
///
/// Before the fix: (a) the server skipped the later operation without a reply, and its
/// `ReadyForQuery` was taken as that operation's reply: "server sent an unexpected
/// ReadyForQuery message in reply to Execute (protocol violation); the connection is
/// closed", the operation reported as "may have run (and committed)". (b) hung: the window
/// waited for replies to operations the server skips.
#[tokio::test]
async fn operations_queued_after_a_failure_was_read_are_skipped_not_a_broken_connection() {
    let (_cluster, mut c) = super::setup().await;
    for window in [false, true] {
        let options = if window {
            abort_mode().max_in_flight(16)
        } else {
            abort_mode()
        };
        let mut p = c.pipeline_with(options);
        let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
        if !window {
            let e = p.process(&bad).await.unwrap_err();
            assert_eq!(e.code(), Some(slipstream_pg::SqlState::DIVISION_BY_ZERO));
        }
        let mut later = Vec::new();
        for i in 0..if window { 100 } else { 1 } {
            let op = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                p.query("SELECT $1::int4", &[&i]),
            )
            .await
            .unwrap_or_else(|_| panic!("window {window}: queueing operation {} hung", i + 1))
            .unwrap();
            later.push(op);
        }
        p.sync();
        let fresh = p.query("SELECT 42", &[]).await.unwrap();
        let results = bounded("end", p.end()).await;
        let what = super::describe(&results);
        for op in &later {
            let e = results[op.id() as usize].as_ref().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Aborted, "window {window}: {what:?}");
            assert_eq!(e.aborted_by(), Some(bad.id()), "window {window}: {what:?}");
        }
        assert!(
            matches!(&results[fresh.id() as usize], Ok(slipstream_pg::Output::Rows(r)) if r.len() == 1),
            "window {window}: {what:?}"
        );
        let row = bounded("the next call", c.query_one("SELECT $1::int4", &[&7i32]))
            .await
            .unwrap_or_else(|e| panic!("window {window}: {e}"));
        assert_eq!(row.get::<_, i32>(0).unwrap(), 7);
    }
}

/// docs/pipelining.md, "The connection dies": every operation not yet answered fails with
/// `Closed` naming the cause. Here the server ends the session itself, between two sync
/// groups of one block, on `idle_in_transaction_session_timeout`: the block opened a
/// transaction, the caller read through its sync point, and queued on only after the backend
/// had gone (watched in `pg_stat_activity`, not slept for). (In the middle of a sync group the
/// server arms no idle timeout: it sent no `ReadyForQuery`, so such a block can hold its
/// transaction open without limit.)
#[tokio::test]
async fn holds_a_block_whose_session_timed_out_idle_between_its_groups_fails_naming_it() {
    let (cluster, mut c) = super::setup().await;
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (x int8); SET idle_in_transaction_session_timeout = '100ms'")
        .await
        .unwrap();
    let pid = c.backend_pid();
    let mut p = c.pipeline_with(abort_mode());
    p.execute("BEGIN", &[]).await.unwrap();
    let first = p.execute("INSERT INTO t VALUES (1)", &[]).await.unwrap();
    p.sync();
    assert_eq!(bounded("process", p.process(&first)).await.unwrap(), 1);
    // The condition itself (the backend is gone), not a guess of how long it takes.
    assert!(
        cluster
            .backend_gone_within(pid, super::engine::LIMIT)
            .unwrap()
    );
    let second = p.execute("INSERT INTO t VALUES (2)", &[]).await;
    let results = bounded("end", p.end()).await;
    let what = super::describe(&results);
    assert!(
        matches!(
            results[first.id() as usize],
            Ok(slipstream_pg::Output::Taken)
        ),
        "{what:?}"
    );
    match second {
        Ok(second) => {
            let e = results[second.id() as usize].as_ref().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Closed, "{what:?}");
            assert!(e.to_string().contains("idle-in-transaction"), "{what:?}");
        }
        Err(e) => assert!(e.to_string().contains("idle-in-transaction"), "{e}"),
    }
    let e = c.query_one("SELECT 1", &[]).await.unwrap_err();
    assert!(e.is_closed(), "{e}");
    assert!(e.to_string().contains("idle-in-transaction"), "{e}");
    let kept: i64 = super::scalar(&mut watcher, "SELECT count(*) FROM t").await;
    assert_eq!(kept, 0);
}

/// Promise (docs/pipelining.md, memopt in a pipeline): "A lookup is therefore a sync point in
/// either mode: in an abort-mode block the operations queued before it get their `Sync` first
/// (after an error the server would skip an unsynced FunctionCall), a failure before it does
/// not skip it".
///
/// Steps: an abort-mode block `SELECT 1/0`, `memopt_get_many(m, [1, 2])`, `SELECT 3`.
///
/// Before the fix: `end()` hung. `memopt_get_many` wrote its FunctionCall with no `Sync`
/// before it (`memopt_get`'s held runs get one), so the server skipped it after the error,
/// and the client waited for two `ReadyForQuery`s where one came.
#[tokio::test]
async fn memopt_get_many_after_a_failure_in_its_block_is_a_sync_point_not_a_hang() {
    let (_cluster, mut c) = super::memopt::memopt_setup().await;
    let m = c.memopt_table("m").await.unwrap();
    let mut p = c.pipeline_with(abort_mode());
    let bad = p.execute("SELECT 1/0", &[]).await.unwrap();
    let look = p.memopt_get_many(&m, &[1i64, 2]).await.unwrap();
    let after = p.query("SELECT 3", &[]).await.unwrap();
    let results = tokio::time::timeout(std::time::Duration::from_secs(10), p.end())
        .await
        .expect("end() hung");
    let what = super::describe(&results);
    assert_eq!(
        results[bad.id() as usize].as_ref().unwrap_err().code(),
        Some(slipstream_pg::SqlState::DIVISION_BY_ZERO),
        "{what:?}"
    );
    assert!(
        matches!(&results[look.id() as usize], Ok(slipstream_pg::Output::Rows(r)) if r.len() == 2),
        "{what:?}"
    );
    assert!(
        matches!(&results[after.id() as usize], Ok(slipstream_pg::Output::Rows(r)) if r.len() == 1),
        "{what:?}"
    );
    let row = bounded("the next call", c.query_one("SELECT $1::int4", &[&5i32]))
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0).unwrap(), 5);
}

/// Promise (docs/pipelining.md, "Rolled-back work is never reported as done"): "A connection
/// lost before a sync point's `ReadyForQuery` ... leaves the outcome of the operations before
/// it unknown even where their replies were read: outside `BEGIN`, `end()` reports each with a
/// `Closed` error saying that whether its work was committed is not known, never as done".
///
/// Steps: an abort-mode block with a small window reads the replies of five `INSERT`s of its
/// open group (no `Sync` queued yet); the backend is terminated from another session; the
/// caller queues on until a queueing call reports the broken connection, then ends the block.
///
/// Before the fix: operations 0-3 were `Ok(Affected(1))` and the table was empty. The failure
/// was found while the group had no `Sync` entry, and only the operations of queued sync
/// points were marked.
#[tokio::test]
async fn a_connection_lost_inside_an_open_group_reports_no_operation_of_it_as_done() {
    let (cluster, mut c) = super::setup().await;
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    c.batch_execute("CREATE TABLE t (x int8)").await.unwrap();
    let pid = c.backend_pid();
    let mut p = c.pipeline_with(abort_mode().max_in_flight(16));
    let mut ops = Vec::new();
    for x in 0..5i64 {
        ops.push(p.execute("INSERT INTO t VALUES ($1)", &[&x]).await.unwrap());
    }
    assert_eq!(bounded("process", p.process(&ops[4])).await.unwrap(), 1);
    let killed: bool =
        super::scalar(&mut watcher, &format!("SELECT pg_terminate_backend({pid})")).await;
    assert!(killed);
    assert!(
        cluster
            .backend_gone_within(pid, super::engine::LIMIT)
            .unwrap()
    );
    // Each queueing call writes and reads what has come (the window's sixteenth is one
    // operation): within a few the broken connection is found.
    let mut tries = 0;
    while bounded("queueing", p.execute("INSERT INTO t VALUES (9)", &[]))
        .await
        .is_ok()
    {
        tries += 1;
        assert!(tries < 10_000, "the broken connection was never found");
        tokio::task::yield_now().await;
    }
    let results = bounded("end", p.end()).await;
    let what = super::describe(&results);
    let kept: i64 = super::scalar(&mut watcher, "SELECT count(*) FROM t").await;
    assert_eq!(kept, 0);
    for (id, r) in results.iter().enumerate() {
        match r {
            Ok(slipstream_pg::Output::Taken) => assert_eq!(id, 4),
            Ok(o) => panic!("operation {id} reported done ({o:?}), none committed: {what:?}"),
            Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "{what:?}"),
        }
    }
}
