//! pipeline_flush, the server module that flushes once per pipelined burst rather than at
//! every `Sync` (extension/pipeline_flush, docs/pipelining.md): what it must never change
//! (every result, row and error, and the tables after, for slipstream-pg and tokio-postgres),
//! what it does change (a reply already followed by more input waits for that input), and
//! that nothing is lost when a session ends with replies held. Needs the module installed:
//! `make test` installs it (`make -C extension/pipeline_flush install`).

use std::time::Duration;

use futures_util::future::join_all;
use slipstream_pg::{Client, Error, Output, PipelineMode, PipelineOptions};
use slipstream_testkit::Cluster;

use super::engine::bounded;
use super::scalar;

/// Loads the module into `c`'s backend (LOAD: superuser, as the testkit's user is).
async fn load(c: &mut Client) {
    if let Err(e) = c.batch_execute("LOAD 'pipeline_flush'").await {
        panic!(
            "pipeline_flush is not installed ({e}): run `make -C extension/pipeline_flush \
             install PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config` (make test does)"
        );
    }
    assert_eq!(
        scalar::<String>(c, "SHOW pipeline_flush.enabled").await,
        "on"
    );
}

/// A connection whose statements use schema `schema`, with or without the module.
async fn session(cluster: &Cluster, schema: &str, module: bool) -> Client {
    let mut c = slipstream_pg::connect(&cluster.url())
        .await
        .expect("connect");
    if module {
        load(&mut c).await;
    }
    c.batch_execute(&format!("SET search_path = {schema}"))
        .await
        .unwrap();
    c
}

/// Schemas `names`, each with an identical table `t (id int PRIMARY KEY, v int)` holding the
/// ids 1..=300 not divisible by 3 (so some inserts succeed and some reads find nothing).
async fn schemas(c: &mut Client, names: &[&str]) {
    for s in names {
        c.batch_execute(&format!(
            "CREATE SCHEMA {s};
             CREATE TABLE {s}.t (id int PRIMARY KEY, v int);
             INSERT INTO {s}.t SELECT g, g FROM generate_series(1, 300) g WHERE g % 3 <> 0;"
        ))
        .await
        .unwrap();
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Read(i32),
    Bump(i32),
    Insert(i32),
    /// `100 / (n % 5)`: division by zero for multiples of 5.
    Divide(i32),
    /// A row of `40 * n` bytes: replies past the server's 8 kB send buffer mid-burst.
    Wide(i32),
}

impl Op {
    fn sql(self) -> &'static str {
        match self {
            Op::Read(_) => "SELECT v::text FROM t WHERE id = $1",
            Op::Bump(_) => "UPDATE t SET v = v + 1 WHERE id = $1",
            Op::Insert(_) => "INSERT INTO t VALUES ($1, 0)",
            Op::Divide(_) => "SELECT (100 / ($1 % 5))::text",
            Op::Wide(_) => "SELECT repeat('x', $1 * 40)",
        }
    }

    fn param(self) -> i32 {
        match self {
            Op::Read(n) | Op::Bump(n) | Op::Insert(n) | Op::Divide(n) | Op::Wide(n) => n,
        }
    }

    fn writes(self) -> bool {
        matches!(self, Op::Bump(_) | Op::Insert(_))
    }
}

/// `n` operations from a seeded generator (a linear congruential one: the same on every run).
fn ops(seed: u64, n: usize) -> Vec<Op> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as i32;
            let id = 1 + r.rem_euclid(320);
            match (x >> 20) % 10 {
                0..=3 => Op::Read(id),
                4 | 5 => Op::Bump(id),
                6 => Op::Insert(id),
                7 | 8 => Op::Divide(id),
                _ => Op::Wide(1 + r.rem_euclid(300)),
            }
        })
        .collect()
}

/// What a reader compares: the rows' text, the count, or the SQLSTATE.
fn outcome(r: Result<Output, Error>) -> String {
    match r {
        Ok(Output::Rows(rows)) => {
            let cells: Vec<String> = rows
                .iter()
                .map(|r| format!("{:?}", r.get::<_, Option<String>>(0).unwrap()))
                .collect();
            format!("rows [{}]", cells.join(", "))
        }
        Ok(Output::Affected(n)) => format!("affected {n}"),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error {:?}", e.code().map(|c| c.code().to_string())),
    }
}

/// Runs `ops` as one pipeline block in `mode` (abort mode: a sync point every 7 operations),
/// one outcome per operation.
async fn run(c: &mut Client, mode: PipelineMode, ops: &[Op]) -> Vec<String> {
    let mut p = c.pipeline_with(PipelineOptions::new().mode(mode));
    for (k, op) in ops.iter().enumerate() {
        let param = op.param();
        if op.writes() {
            p.execute(op.sql(), &[&param]).await.unwrap();
        } else {
            p.query(op.sql(), &[&param]).await.unwrap();
        }
        if mode == PipelineMode::AbortOnError && k % 7 == 6 {
            p.sync();
        }
    }
    bounded("the pipeline block", p.end())
        .await
        .into_iter()
        .map(outcome)
        .collect()
}

async fn table(c: &mut Client, schema: &str) -> String {
    scalar(
        c,
        &format!("SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM {schema}.t"),
    )
    .await
}

/// The same operations, in both error modes, through a session with the module and one
/// without: the same outcome for every operation, and the same tables after. Blocks of 600
/// operations (about 30 kB of requests, well past the server's 8 kB receive buffer) with
/// errors scattered through them and replies past its 8 kB send buffer.
#[tokio::test]
async fn every_result_and_every_row_are_the_same_with_and_without_the_module() {
    let cluster = Cluster::start().unwrap();
    let mut admin = slipstream_pg::connect(&cluster.url()).await.unwrap();
    schemas(&mut admin, &["with_module", "stock"]).await;
    let mut with = session(&cluster, "with_module", true).await;
    let mut stock = session(&cluster, "stock", false).await;
    for (seed, mode) in [
        (1, PipelineMode::ContinueOnError),
        (2, PipelineMode::AbortOnError),
        (3, PipelineMode::ContinueOnError),
    ] {
        let ops = ops(seed, 600);
        let a = run(&mut with, mode, &ops).await;
        let b = run(&mut stock, mode, &ops).await;
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(
                x, y,
                "operation {k} ({:?}) in {mode:?}, seed {seed}",
                ops[k]
            );
        }
        assert_eq!(a.len(), ops.len());
        assert!(
            a.iter().any(|o| o.starts_with("error")) && a.iter().any(|o| o.starts_with("rows")),
            "the block should mix errors and rows: {:?}",
            &a[..10]
        );
    }
    assert_eq!(
        table(&mut admin, "with_module").await,
        table(&mut admin, "stock").await
    );
}

/// tokio-postgres (a `Sync` per statement, its futures polled together) through a session
/// with the module gets what slipstream-pg gets without it: the module does not depend on
/// how a client writes.
#[tokio::test]
async fn another_client_gets_the_same_results_through_the_module() {
    let cluster = Cluster::start().unwrap();
    let mut admin = slipstream_pg::connect(&cluster.url()).await.unwrap();
    schemas(&mut admin, &["peer", "stock"]).await;
    let mut stock = session(&cluster, "stock", false).await;
    let peer = super::peer(&cluster).await;
    peer.batch_execute("LOAD 'pipeline_flush'; SET search_path = peer")
        .await
        .unwrap();
    let ops = ops(4, 600);
    let theirs: Vec<String> = bounded(
        "tokio-postgres's statements",
        join_all(ops.iter().map(|op| {
            let peer = &peer;
            async move {
                let param = op.param();
                let r = if op.writes() {
                    peer.execute(op.sql(), &[&param])
                        .await
                        .map(|n| format!("affected {n}"))
                } else {
                    peer.query(op.sql(), &[&param]).await.map(|rows| {
                        let cells: Vec<String> = rows
                            .iter()
                            .map(|r| format!("{:?}", r.get::<_, Option<String>>(0)))
                            .collect();
                        format!("rows [{}]", cells.join(", "))
                    })
                };
                r.unwrap_or_else(|e| format!("error {:?}", e.code().map(|c| c.code().to_string())))
            }
        })),
    )
    .await;
    let ours = run(&mut stock, PipelineMode::ContinueOnError, &ops).await;
    for (k, (x, y)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(x, y, "operation {k} ({:?})", ops[k]);
    }
    assert_eq!(
        table(&mut admin, "peer").await,
        table(&mut admin, "stock").await
    );
}

/// Waits until backend `pid` waits for a lock (polling `pg_locks`: the condition itself).
async fn until_blocked(watcher: &mut Client, pid: i32) {
    bounded("the statement to wait for the lock", async {
        loop {
            let n: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted",
                    &[&pid],
                )
                .await
                .unwrap()
                .get(0)
                .unwrap();
            if n > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// What the module changes, and how a client keeps its replies prompt. Statement 0 (a
/// `SELECT 1`) is sent with statement 1, which waits for a row lock, in one write:
/// - asked for (`process`) before it is sent, its reply comes at once, with or without the
///   module: slipstream-pg puts a `Flush` after its `Sync`, which the module never skips;
/// - sent first and asked for only once statement 1 waits, its reply comes at once without
///   the module (the flush at each `Sync`), and with it only after statement 1 has run (the
///   module holds replies while more input is buffered): a wait bounded by what was sent
///   after it, never a hang, and `SET pipeline_flush.enabled = off` restores the flush.
#[tokio::test]
async fn a_reply_followed_by_more_input_waits_for_it_unless_asked_for_first() {
    let cluster = Cluster::start().unwrap();
    let mut admin = slipstream_pg::connect(&cluster.url()).await.unwrap();
    schemas(&mut admin, &["s"]).await;
    let mut locker = session(&cluster, "s", false).await;
    let mut watcher = session(&cluster, "s", false).await;
    // (module loaded, module enabled, asked for first) -> does the reply come while blocked?
    for (module, enabled, asked_first, prompt) in [
        (true, true, true, true),
        (false, false, true, true),
        (false, false, false, true),
        (true, true, false, false),
        (true, false, false, true),
    ] {
        let mut c = session(&cluster, "s", module).await;
        if module && !enabled {
            c.batch_execute("SET pipeline_flush.enabled = off")
                .await
                .unwrap();
        }
        let pid: i32 = scalar(&mut c, "SELECT pg_backend_pid()").await;
        locker
            .batch_execute("BEGIN; SELECT v FROM t WHERE id = 1 FOR UPDATE")
            .await
            .unwrap();
        let case = format!("module {module}, enabled {enabled}, asked first {asked_first}");
        let mut p = c.pipeline_with(PipelineOptions::new().mode(PipelineMode::ContinueOnError));
        let first = p.query("SELECT 1::text", &[]).await.unwrap();
        let blocked = p
            .execute("UPDATE t SET v = v + 1 WHERE id = 1", &[])
            .await
            .unwrap();
        let early = if asked_first {
            // Sends both, with a Flush between: the reply is released whatever follows.
            let r = tokio::time::timeout(Duration::from_secs(30), p.process(&first)).await;
            until_blocked(&mut watcher, pid).await;
            r.is_ok()
        } else {
            // Sends both in one write, as a window or a batch does; waits for the lock.
            let r = tokio::time::timeout(Duration::from_millis(50), p.process(&blocked)).await;
            assert!(r.is_err(), "{case}: the UPDATE ran through the lock");
            until_blocked(&mut watcher, pid).await;
            // Held replies stay held: a short wait shows it, however long it is.
            let limit = if prompt { 30_000 } else { 300 };
            tokio::time::timeout(Duration::from_millis(limit), p.process(&first))
                .await
                .is_ok()
        };
        assert_eq!(
            early, prompt,
            "{case}: reply while the next statement waits"
        );
        locker.batch_execute("COMMIT").await.unwrap();
        // Released: everything arrives, none of it lost.
        let results = bounded("the block after the lock is released", p.end()).await;
        let outcomes: Vec<String> = results.into_iter().map(outcome).collect();
        let expected_first = if early {
            "Taken".to_string()
        } else {
            "rows [Some(\"1\")]".to_string()
        };
        assert_eq!(
            outcomes,
            [expected_first, "affected 1".to_string()],
            "{case}"
        );
    }
}

/// A backend ended while it holds replies (its statements committed, their replies not yet
/// flushed): the FATAL message is flushed behind them, so the client still learns that they
/// committed. Nothing the server did goes unreported.
#[tokio::test]
async fn replies_held_when_the_backend_is_terminated_still_reach_the_client() {
    let cluster = Cluster::start().unwrap();
    let mut admin = slipstream_pg::connect(&cluster.url()).await.unwrap();
    schemas(&mut admin, &["s"]).await;
    let mut locker = session(&cluster, "s", false).await;
    let mut c = session(&cluster, "s", true).await;
    let pid: i32 = scalar(&mut c, "SELECT pg_backend_pid()").await;
    locker
        .batch_execute("BEGIN; SELECT v FROM t WHERE id = 1 FOR UPDATE")
        .await
        .unwrap();
    let mut p = c.pipeline_with(PipelineOptions::new().mode(PipelineMode::ContinueOnError));
    p.execute("INSERT INTO t VALUES (100001, 7)", &[])
        .await
        .unwrap();
    p.execute("INSERT INTO t VALUES (100002, 7)", &[])
        .await
        .unwrap();
    let blocked = p
        .execute("UPDATE t SET v = v + 1 WHERE id = 1", &[])
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_millis(50), p.process(&blocked)).await;
    assert!(r.is_err(), "the UPDATE ran through the lock");
    until_blocked(&mut admin, pid).await;
    let ended: bool = scalar(&mut admin, &format!("SELECT pg_terminate_backend({pid})")).await;
    assert!(ended);
    let outcomes: Vec<String> = bounded("the block of a terminated backend", p.end())
        .await
        .into_iter()
        .map(outcome)
        .collect();
    assert_eq!(outcomes[..2], ["affected 1", "affected 1"], "{outcomes:?}");
    assert!(outcomes[2].starts_with("error"), "{outcomes:?}");
    locker.batch_execute("ROLLBACK").await.unwrap();
    let committed: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM s.t WHERE id IN (100001, 100002)",
    )
    .await;
    assert_eq!(committed, 2);
}

/// Preloaded for every session (`session_preload_libraries`), walsenders included: they keep
/// PostgreSQL's own flushing (the module leaves them alone), so a standby streams as before,
/// and client sessions get the module.
#[tokio::test]
async fn a_standby_streams_from_a_primary_that_preloads_the_module() {
    let primary = Cluster::builder()
        .setting("session_preload_libraries", "pipeline_flush")
        .start()
        .unwrap();
    let standby = primary.start_standby().unwrap();
    let mut c = slipstream_pg::connect(&primary.url()).await.unwrap();
    assert_eq!(
        scalar::<String>(&mut c, "SHOW pipeline_flush.enabled").await,
        "on"
    );
    c.batch_execute("CREATE TABLE r (id int); INSERT INTO r SELECT generate_series(1, 1000)")
        .await
        .unwrap();
    // The insert position, past the commit record: the testkit runs with synchronous_commit
    // off, so the write position (pg_current_wal_lsn) can still be before it, and a standby
    // that replayed up to there may not see the table yet (CI failed so).
    let lsn: String = scalar(&mut c, "SELECT pg_current_wal_insert_lsn()::text").await;
    let mut s = slipstream_pg::connect(&standby.url()).await.unwrap();
    bounded("the standby to replay the primary's writes", async {
        loop {
            let caught_up: bool = scalar(
                &mut s,
                &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"),
            )
            .await;
            if caught_up {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(scalar::<i64>(&mut s, "SELECT count(*) FROM r").await, 1000);
}
