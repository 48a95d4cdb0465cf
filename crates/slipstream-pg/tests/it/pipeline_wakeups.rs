//! Attacks on the continue-on-error pipeline's bulk reads: while many replies are owed, the
//! reader asks the kernel not to wake it until a lower bound of their bytes has arrived
//! (`SO_RCVLOWAT`). These check what must stay true whatever the bound: every reply is read,
//! small or failed replies never leave a reader waiting, a pipeline of one is answered, and a
//! mark left behind by a dropped future never delays a later call. No timing: a wait that
//! would never end is caught by the timeout, which no correct run comes near.

use std::future::Future;
use std::pin::pin;
use std::task::Context;
use std::time::Duration;

use slipstream_pg::{Output, PipelineMode, PipelineOptions, SqlState};

use crate::{scalar, setup};

/// Far past anything a correct run takes; reached only by a reader waiting for bytes that
/// never come.
const LIMIT: Duration = Duration::from_secs(60);

fn continue_mode() -> PipelineOptions {
    PipelineOptions::new().mode(PipelineMode::ContinueOnError)
}

/// Polls `f` once and reports whether it is still pending (then drops it).
fn poll_once<F: Future>(f: F) -> bool {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    f.as_mut().poll(&mut cx).is_pending()
}

#[tokio::test]
async fn an_error_in_the_middle_of_a_large_continue_batch_fails_alone() {
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT 100 / $1::int4").await.unwrap();
    let n = 3000i32;
    let results = tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(continue_mode());
        for i in 0..n {
            // Operation 1500 divides by zero: its reply is an ErrorResponse, not the rows the
            // others get, and the ones after it must still all be read.
            let divisor = if i == n / 2 { 0 } else { 1 + i % 7 };
            p.query(&stmt, &[&divisor]).await.unwrap();
        }
        p.end().await
    })
    .await
    .expect("every reply of the batch is read");
    assert_eq!(results.len(), n as usize);
    for (i, r) in results.into_iter().enumerate() {
        if i == n as usize / 2 {
            let err = r.expect_err("the division by zero fails");
            assert_eq!(err.code(), Some(SqlState::DIVISION_BY_ZERO), "{err}");
        } else {
            let Ok(Output::Rows(rows)) = r else {
                panic!("operation {i} runs on its own: {r:?}");
            };
            assert_eq!(rows[0].get::<_, i32>(0).unwrap(), 100 / (1 + i as i32 % 7));
        }
    }
    assert_eq!(scalar::<i32>(&mut c, "SELECT 7").await, 7);
}

#[tokio::test]
async fn a_batch_of_replies_smaller_than_any_row_is_read_to_its_end() {
    // Empty queries are answered with the smallest reply there is (BindComplete,
    // EmptyQueryResponse, ReadyForQuery): the bound must hold for them too.
    let (_cluster, mut c) = setup().await;
    let empty = c.prepare("").await.unwrap();
    let none = c.prepare("SELECT 1 WHERE false").await.unwrap();
    let results = tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(continue_mode());
        for i in 0..2000 {
            if i % 2 == 0 {
                p.execute(&empty, &[]).await.unwrap();
            } else {
                p.query(&none, &[]).await.unwrap();
            }
        }
        p.end().await
    })
    .await
    .expect("every small reply is read");
    assert_eq!(results.len(), 2000);
    for (i, r) in results.into_iter().enumerate() {
        match r.unwrap() {
            Output::Affected(0) => assert_eq!(i % 2, 0),
            Output::Rows(rows) => assert!(i % 2 == 1 && rows.is_empty()),
            other => panic!("operation {i}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_pipeline_of_one_is_answered_in_either_mode() {
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT $1::int4 + 1").await.unwrap();
    for mode in [PipelineMode::ContinueOnError, PipelineMode::AbortOnError] {
        for i in 0..50i32 {
            let got = tokio::time::timeout(LIMIT, async {
                let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
                let op = p.query(&stmt, &[&i]).await.unwrap();
                let rows = p.process(&op).await.unwrap();
                p.end().await;
                rows[0].get::<_, i32>(0).unwrap()
            })
            .await
            .expect("a pipeline of one is answered");
            assert_eq!(got, i + 1, "{mode:?}");
        }
    }
}

#[tokio::test]
async fn process_of_an_early_operation_does_not_wait_for_later_replies() {
    // Five operations are answered at once; the sixth sleeps on the server far longer than
    // the timeout, and thousands more wait behind it. `process` of an early one must return
    // with the replies in hand: a reader whose bound counted the later operations would
    // sleep until the timeout.
    let (_cluster, mut c) = setup().await;
    // A window wider than the block, so that queueing never waits for the sleeping one.
    let mut p = c.pipeline_with(continue_mode().max_in_flight(1 << 20));
    let mut early = Vec::new();
    for i in 0..5i32 {
        early.push(p.query(&format!("SELECT {i}") as &str, &[]).await.unwrap());
    }
    p.execute("SELECT pg_sleep(3600)", &[]).await.unwrap();
    for _ in 0..3000 {
        p.execute("SELECT 1", &[]).await.unwrap();
    }
    for (i, op) in early.iter().enumerate().rev() {
        let rows = tokio::time::timeout(LIMIT, p.process(op))
            .await
            .expect("an answered operation is returned without waiting for later ones")
            .unwrap();
        assert_eq!(rows[0].get::<_, i32>(0).unwrap(), i as i32);
    }
    assert_eq!(
        p.unfinished(),
        3001,
        "the sleeping operation and those behind it"
    );
}

#[tokio::test]
async fn a_dropped_wait_leaves_no_mark_on_a_later_small_reply() {
    // A wait for many replies raises the socket's low-water mark; its future is dropped
    // before they arrive. The next calls read small replies (the settled leftovers, then one
    // row): each must wake for them, not for the mark the dropped wait left.
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT $1::int4").await.unwrap();
    for round in 0..5i32 {
        {
            let mut p = c.pipeline_with(continue_mode());
            let mut last = None;
            for i in 0..3000i32 {
                last = Some(p.query(&stmt, &[&i]).await.unwrap());
            }
            let last = last.unwrap();
            // Pending: thousands of replies are owed and none has been read yet.
            poll_once(p.process(&last));
        }
        let got = tokio::time::timeout(LIMIT, scalar::<i32>(&mut c, &format!("SELECT {round}")))
            .await
            .expect("the next request is answered");
        assert_eq!(got, round);
    }
    // And a dropped `end()`: the pipeline goes with it.
    {
        let mut p = c.pipeline_with(continue_mode());
        for i in 0..3000i32 {
            p.query(&stmt, &[&i]).await.unwrap();
        }
        poll_once(p.end());
    }
    let mut p = c.pipeline_with(continue_mode());
    let op = p.query(&stmt, &[&9i32]).await.unwrap();
    let rows = tokio::time::timeout(LIMIT, p.process(&op))
        .await
        .expect("a pipeline after a dropped one is answered")
        .unwrap();
    assert_eq!(rows[0].get::<_, i32>(0).unwrap(), 9);
}

#[tokio::test]
async fn a_sliding_window_in_continue_mode_reads_every_reply() {
    let (_cluster, mut c) = setup().await;
    let stmt = c.prepare("SELECT $1::int4").await.unwrap();
    let total = 20_000i32;
    let sum = tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(continue_mode().max_in_flight(256));
        let mut ring = std::collections::VecDeque::new();
        let mut sum = 0i64;
        for i in 0..total {
            ring.push_back(p.query(&stmt, &[&i]).await.unwrap());
            if ring.len() > 300 {
                let op = ring.pop_front().unwrap();
                sum += p.process(&op).await.unwrap()[0].get::<_, i32>(0).unwrap() as i64;
            }
        }
        for r in p.end().await {
            if let Ok(Output::Rows(rows)) = r {
                sum += rows[0].get::<_, i32>(0).unwrap() as i64;
            }
        }
        sum
    })
    .await
    .expect("the window keeps moving");
    assert_eq!(sum, (0..total as i64).sum::<i64>());
}

/// The client socket's receive low-water mark (`SO_RCVLOWAT`), found among this process's
/// file descriptors by its local port (the server's `inet_client_port()`): unique on the
/// machine, so tests running side by side never read each other's socket.
fn rcvlowat_of_local_port(port: u16) -> i32 {
    let mut found = None;
    for entry in std::fs::read_dir("/proc/self/fd").expect("list /proc/self/fd") {
        let Ok(fd) = entry.unwrap().file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: sockaddr_in is plain data; getsockname writes at most `len` bytes into it
        // and fails harmlessly on a descriptor that is not an IPv4 socket (or was closed).
        let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: as above; `addr` and `len` outlive the call.
        let rc = unsafe {
            libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_in).cast(), &mut len)
        };
        if rc != 0 || addr.sin_family != libc::AF_INET as libc::sa_family_t {
            continue;
        }
        if u16::from_be(addr.sin_port) != port {
            continue;
        }
        let mut mark: libc::c_int = 0;
        let mut mlen = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `mark` is a live c_int and `mlen` says so.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut mark as *mut libc::c_int).cast(),
                &mut mlen,
            )
        };
        assert_eq!(rc, 0, "getsockopt(SO_RCVLOWAT)");
        assert!(found.is_none(), "two sockets on local port {port}");
        found = Some(mark);
    }
    found.unwrap_or_else(|| panic!("no socket of this process on local port {port}"))
}

/// The reply to a prepared `UPDATE` of one row in continue-on-error mode: BindComplete (5
/// bytes), CommandComplete "UPDATE 1" (14), ReadyForQuery (6). One flush each.
const UPDATE_REPLY: i32 = 25;

#[tokio::test]
async fn the_mark_over_small_replies_needs_few_packets_and_a_pipeline_of_one_none() {
    // Issue 23: with a mark sized from every owed reply, the reader slept below it while the
    // server, flushing one 25-byte packet per ReadyForQuery, ran out of congestion window
    // (10 packets, 4 while BBR probes): nothing was acknowledged until a delayed-ACK timer
    // or a loss probe fired, block after block. The mark must be reachable within a few
    // flushes (8), raised at all (or the bulk reads are gone), and never raised for one.
    let (cluster, mut c) = setup().await;
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, n int NOT NULL); INSERT INTO t VALUES (1, 0)",
    )
    .await
    .unwrap();
    let port = u16::try_from(scalar::<i32>(&mut c, "SELECT inet_client_port()").await).unwrap();
    let stmt = c
        .prepare("UPDATE t SET n = n + 1 WHERE id = 1")
        .await
        .unwrap();
    // Small replies teach the connection the size of one flush.
    {
        let mut p = c.pipeline_with(continue_mode());
        for _ in 0..10 {
            p.execute(&stmt, &[]).await.unwrap();
        }
        for r in p.end().await {
            r.unwrap();
        }
    }

    let mut cx = Context::from_waker(std::task::Waker::noop());
    {
        let mut p = c.pipeline_with(continue_mode());
        let op = p.execute(&stmt, &[]).await.unwrap();
        let mut one = pin!(p.process(&op));
        if one.as_mut().poll(&mut cx).is_pending() {
            assert_eq!(
                rcvlowat_of_local_port(port),
                1,
                "a pipeline of one waits for any byte"
            );
        }
        tokio::time::timeout(LIMIT, one)
            .await
            .expect("a pipeline of one is answered")
            .unwrap();
    }
    // One big reply between two blocks of small ones must not make the next block's mark
    // count on big packets: the estimate grows by an eighth per flush at most.
    let big: String = scalar(&mut c, "SELECT repeat('x', 200000)").await;
    assert_eq!(big.len(), 200_000);
    // Another session holds the row, so the block's replies cannot come before we look.
    let mut locker = slipstream_pg::connect(&cluster.url()).await.unwrap();
    locker
        .batch_execute("BEGIN; SELECT n FROM t WHERE id = 1 FOR UPDATE")
        .await
        .unwrap();
    let mut p = c.pipeline_with(continue_mode());
    for _ in 0..1000 {
        p.execute(&stmt, &[]).await.unwrap();
    }
    {
        let mut end = pin!(p.end());
        assert!(end.as_mut().poll(&mut cx).is_pending(), "the row is locked");
        let mark = rcvlowat_of_local_port(port);
        locker.batch_execute("COMMIT").await.unwrap();
        assert!(mark > 1, "1,000 owed replies raise the mark (it is {mark})");
        // 8 flushes, of an estimate at most an eighth (and a byte) above the last small one.
        let flush = UPDATE_REPLY + UPDATE_REPLY / 8 + 1;
        assert!(
            mark <= 8 * flush,
            "the mark ({mark} bytes) needs more than 8 flushes of about {flush} bytes"
        );
        let results = tokio::time::timeout(LIMIT, end)
            .await
            .expect("the block ends");
        assert_eq!(results.len(), 1000);
        for (i, r) in results.iter().enumerate() {
            assert!(matches!(r, Ok(Output::Affected(1))), "operation {i}: {r:?}");
        }
    }
    assert_eq!(scalar::<i32>(&mut c, "SELECT n FROM t").await, 1011);
    assert_eq!(
        rcvlowat_of_local_port(port),
        1,
        "a plain query puts the mark back"
    );
}

#[tokio::test]
async fn continue_mode_dml_blocks_of_a_thousand_finish() {
    // The lab's DML loop (an INSERT and four UPDATEs of it, in a transaction) in blocks of
    // 1,000 continue-on-error operations with the mark on. Before the cap, each block stalled
    // on delayed ACKs; a stall, not a slow run, is what the timeout catches.
    let (_cluster, mut c) = setup().await;
    c.batch_execute("CREATE SEQUENCE s; CREATE TABLE d (id bigint PRIMARY KEY, qty int NOT NULL)")
        .await
        .unwrap();
    let insert = c
        .prepare("INSERT INTO d (id, qty) VALUES (nextval('s'), 0)")
        .await
        .unwrap();
    let update = c
        .prepare("UPDATE d SET qty = qty + 1 WHERE id = (SELECT currval('s'))")
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, async {
        for _ in 0..10 {
            let mut p = c.pipeline_with(continue_mode());
            p.execute("BEGIN", &[]).await.unwrap();
            for _ in 0..200 {
                p.execute(&insert, &[]).await.unwrap();
                for _ in 0..4 {
                    p.execute(&update, &[]).await.unwrap();
                }
            }
            p.commit().await.unwrap();
            for r in p.end().await {
                r.unwrap();
            }
        }
    })
    .await
    .expect("ten blocks of 1,000 DML operations finish");
    assert_eq!(
        scalar::<i64>(&mut c, "SELECT count(*) FROM d WHERE qty = 4").await,
        2000
    );
}
