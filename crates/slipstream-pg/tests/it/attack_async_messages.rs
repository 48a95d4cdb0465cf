//! Attacks on reading a real server's replies with asynchronous messages between any two of
//! them (helper h70). The protocol lets a server send a `NoticeResponse`, a `ParameterStatus`
//! or a `NotificationResponse` at any time once the session is up; docs/client.md promises
//! that notices reach the handler, notifications are kept until read, parameters are kept
//! current, and that no call ever reads another's reply.
//!
//! Method: a proxy between the client and a real PostgreSQL 15 passes what the client sends
//! unchanged and, after every whole message the server sends once authentication is done,
//! inserts one of each asynchronous kind; it also re-cuts the server's byte stream at seeded
//! random places, so messages arrive split across reads. The same workload (simple and
//! extended queries, the statement cache, row streams, pipelines in both modes, COPY in and
//! out, transactions and savepoints, LISTEN/NOTIFY) runs directly and through the proxy, and
//! what each call returned must be the same; every inserted notice must reach the handler and
//! every inserted notification must be kept.
//!
//! The same proxy also cuts the connection after any byte of the server's output (every
//! byte under `SLIPSTREAM_ATTACK_LONG=1`, a seeded sample otherwise): each call before the
//! cut must return what it returns intact, and the calls it ends must say that the connection
//! was lost. That sweep found the pipeline reporting an operation whose reply was read, but
//! whose implicit transaction's end was lost, as done (an `INSERT` in an abort-mode block
//! whose later operation failed: `Ok(Affected(1))` instead of rolled back); see
//! `attack_pipeline_lost_commit.rs`. Both hold since that fix.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::TryStreamExt;
use slipstream_pg::{Client, FetchSize, Output, Uncached};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::seeded::Rng;

/// Counts of what the proxy inserted.
#[derive(Default)]
struct Inserted {
    notices: AtomicU64,
    notifications: AtomicU64,
    /// Bytes of the server's output passed after authentication.
    bytes: AtomicU64,
}

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// The asynchronous messages inserted after message number `n`.
fn inserts(n: u64, kinds: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if kinds.contains('N') {
        out.extend(msg(
            b'N',
            format!("SNOTICE\0VNOTICE\0C00000\0Minserted {n}\0\0").as_bytes(),
        ));
    }
    if kinds.contains('S') {
        out.extend(msg(b'S', format!("slipstream_inserted\0{n}\0").as_bytes()));
    }
    if kinds.contains('A') {
        let mut body = 4242u32.to_be_bytes().to_vec();
        body.extend_from_slice(format!("inserted\0{n}\0").as_bytes());
        out.extend(msg(b'A', &body));
    }
    out
}

/// Starts the proxy in front of `server_port`; `kinds` says which messages to insert.
/// With `cut_at`, the proxy closes both connections once it has passed that many bytes of
/// the server's output after authentication (counting insertions).
async fn start_proxy(
    server_port: u16,
    seed: u64,
    kinds: &'static str,
    cut_at: Option<usize>,
) -> (u16, Arc<Inserted>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let counts = Arc::new(Inserted::default());
    let counts2 = counts.clone();
    tokio::spawn(async move {
        let mut conn_no = 0u64;
        while let Ok((client, _)) = listener.accept().await {
            conn_no += 1;
            let counts = counts2.clone();
            let seed = seed.wrapping_add(conn_no).max(1);
            tokio::spawn(async move {
                let server = TcpStream::connect(("127.0.0.1", server_port))
                    .await
                    .unwrap();
                client.set_nodelay(true).unwrap();
                server.set_nodelay(true).unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let upstream = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    let _ = sw.shutdown().await;
                });
                let mut passed = 0usize;
                let mut rng = Rng(seed);
                let mut pending: Vec<u8> = Vec::new();
                let mut out: Vec<u8> = Vec::new();
                let mut authed = false;
                let mut n = 0u64;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let got = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => k,
                    };
                    pending.extend_from_slice(&buf[..got]);
                    // Whole messages: forward each, then the insertions.
                    loop {
                        if pending.len() < 5 {
                            break;
                        }
                        let len = u32::from_be_bytes(pending[1..5].try_into().unwrap()) as usize;
                        if pending.len() < 1 + len {
                            break;
                        }
                        let m: Vec<u8> = pending.drain(..1 + len).collect();
                        if m[0] == b'R' && m[5..9] == [0, 0, 0, 0] {
                            authed = true;
                        }
                        out.extend_from_slice(&m);
                        if authed {
                            n += 1;
                            out.extend(inserts(n, kinds));
                            if kinds.contains('N') {
                                counts.notices.fetch_add(1, Ordering::SeqCst);
                            }
                            if kinds.contains('A') {
                                counts.notifications.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    // Send in random cuts: 1 byte to all of it.
                    while !out.is_empty() {
                        let mut cut = if rng.next().is_multiple_of(4) {
                            1 + (rng.next() as usize % 7).min(out.len() - 1)
                        } else {
                            out.len()
                        };
                        let limit = cut_at
                            .filter(|_| authed)
                            .map(|at| at.saturating_sub(passed));
                        if let Some(left) = limit {
                            cut = cut.min(left);
                        }
                        let part: Vec<u8> = out.drain(..cut).collect();
                        passed += if authed { part.len() } else { 0 };
                        counts.bytes.store(passed as u64, Ordering::SeqCst);
                        if cw.write_all(&part).await.is_err() {
                            return;
                        }
                        if limit == Some(cut) {
                            // The cut: both directions end here.
                            upstream.abort();
                            return;
                        }
                    }
                }
                let _ = cw.shutdown().await;
            });
        }
    });
    (port, counts)
}

/// The transcript of a workload, kept outside it so that a run that panics part-way (a call
/// failing after a cut) leaves what it did.
#[derive(Clone, Default)]
struct Log(Arc<std::sync::Mutex<Vec<String>>>);

impl Log {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Runs the workload on `c`, writing what every call returned to `t`.
async fn workload(c: &mut Client, t: Log) {
    c.batch_execute(
        "CREATE TEMP TABLE w (id int PRIMARY KEY, v text);
         INSERT INTO w SELECT g, 'v' || g FROM generate_series(1, 50) g;
         CREATE TEMP TABLE d (id int, v text)",
    )
    .await
    .unwrap();
    // Simple protocol.
    let r = c
        .simple_query("SELECT 1; SELECT 'a', NULL; SELECT 1/0")
        .await;
    t.push(format!(
        "simple: {:?}",
        r.map(|v| v.len()).map_err(|e| e.to_string())
    ));
    // Cached, uncached, typed, prepared.
    for id in [1i32, 2, 3] {
        let row = c
            .query_one("SELECT v FROM w WHERE id = $1", &[&id])
            .await
            .unwrap();
        t.push(format!("cached {id}: {}", row.get::<_, String>(0).unwrap()));
    }
    let n = c
        .execute(
            &Uncached("UPDATE w SET v = v || '!' WHERE id < $1"),
            &[&10i32],
        )
        .await
        .unwrap();
    t.push(format!("uncached: {n}"));
    let stmt = c
        .prepare("SELECT count(*) FROM w WHERE id > $1")
        .await
        .unwrap();
    let k: i64 = c.query_one(&stmt, &[&25i32]).await.unwrap().get(0).unwrap();
    t.push(format!("prepared: {k}"));
    let e = c.query("SELECT 1/0", &[]).await.unwrap_err();
    t.push(format!("error: {e}"));
    // Reprepare after DDL.
    c.batch_execute("ALTER TABLE w ADD COLUMN x int DEFAULT 7")
        .await
        .unwrap();
    let rows = c
        .query("SELECT * FROM w WHERE id = $1", &[&4i32])
        .await
        .unwrap();
    t.push(format!("after ddl: {} columns", rows[0].len()));
    // Row streams: whole, an error part-way, and one dropped part-way.
    let rows: Vec<i32> = c
        .query_stream_with("SELECT id FROM w ORDER BY id", &[], FetchSize::Rows(7))
        .await
        .unwrap()
        .map_ok(|r| r.get::<_, i32>(0).unwrap())
        .try_collect()
        .await
        .unwrap();
    t.push(format!("stream: {rows:?}"));
    let mut s = c
        .query_stream_with(
            "SELECT 10 / (20 - g) FROM generate_series(1, 30) g",
            &[],
            FetchSize::Bytes(64),
        )
        .await
        .unwrap();
    let mut got = 0;
    let end = loop {
        match s.next().await {
            Ok(Some(_)) => got += 1,
            Ok(None) => break "end".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    drop(s);
    t.push(format!("stream error after {got}: {end}"));
    let mut s = c
        .query_stream_with(
            "SELECT g FROM generate_series(1, 1000) g",
            &[],
            FetchSize::Rows(5),
        )
        .await
        .unwrap();
    s.next().await.unwrap();
    drop(s);
    let k: i64 = c
        .query_one("SELECT count(*) FROM w", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    t.push(format!("after dropped stream: {k}"));
    // Pipelines, both modes, with a failure.
    for mode in [
        slipstream_pg::PipelineMode::AbortOnError,
        slipstream_pg::PipelineMode::ContinueOnError,
    ] {
        let mut p = c.pipeline_with(slipstream_pg::PipelineOptions::new().mode(mode));
        let a = p
            .query("SELECT v FROM w WHERE id = $1", &[&5i32])
            .await
            .unwrap();
        p.execute("INSERT INTO d VALUES ($1, 'p')", &[&1i32])
            .await
            .unwrap();
        p.execute("SELECT 1/0", &[]).await.unwrap();
        p.query("SELECT $1::int + 1", &[&41i32]).await.unwrap();
        let first = p.process(&a).await.map(|r| r.len());
        let results = p.end().await;
        t.push(format!("pipeline {mode:?}: first {first:?}"));
        for r in results {
            t.push(match r {
                Ok(Output::Rows(rows)) => format!("  rows {}", rows.len()),
                Ok(o) => format!("  {o:?}"),
                Err(e) => format!("  {:?}: {e}", e.kind()),
            });
        }
    }
    // A block that opens and commits a transaction block of its own, then goes on.
    for mode in [
        slipstream_pg::PipelineMode::AbortOnError,
        slipstream_pg::PipelineMode::ContinueOnError,
    ] {
        let mut p = c.pipeline_with(slipstream_pg::PipelineOptions::new().mode(mode));
        p.execute("BEGIN", &[]).await.unwrap();
        p.execute("INSERT INTO d VALUES ($1, 'b')", &[&2i32])
            .await
            .unwrap();
        p.commit().await.unwrap();
        p.execute("INSERT INTO d VALUES ($1, 'a')", &[&3i32])
            .await
            .unwrap();
        let results = p.end().await;
        t.push(format!("pipeline with BEGIN {mode:?}:"));
        for r in results {
            t.push(match r {
                Ok(o) => format!("  {o:?}"),
                Err(e) => format!("  {:?}: {e}", e.kind()),
            });
        }
    }
    // COPY in and out.
    let mut copy = c.copy_in("COPY d FROM STDIN").await.unwrap();
    for i in 0..200 {
        copy.write(format!("{i}\tc{i}\n").as_bytes()).await.unwrap();
    }
    t.push(format!("copy in: {}", copy.finish().await.unwrap()));
    let mut copy = c.copy_in("COPY d FROM STDIN").await.unwrap();
    copy.write(b"1\tok\nx\tbad\n").await.unwrap();
    t.push(format!("copy in bad: {}", copy.finish().await.unwrap_err()));
    let chunks: Vec<bytes::Bytes> = c
        .copy_out("COPY (SELECT id, v FROM d ORDER BY id, v) TO STDOUT")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    t.push(format!(
        "copy out: {} chunks, {} bytes",
        chunks.len(),
        chunks.iter().map(|b| b.len()).sum::<usize>()
    ));
    // Transactions and savepoints.
    {
        let mut tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO d VALUES (1000, 't')", &[])
            .await
            .unwrap();
        {
            let mut sp = tx.savepoint("s").await.unwrap();
            sp.execute("INSERT INTO d VALUES (1001, 's')", &[])
                .await
                .unwrap();
            let e = sp.execute("SELECT 1/0", &[]).await.unwrap_err();
            t.push(format!("in savepoint: {e}"));
            sp.rollback().await.unwrap();
        }
        tx.commit().await.unwrap();
    }
    let k: i64 = c
        .query_one("SELECT count(*) FROM d WHERE id >= 1000", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    t.push(format!("after transaction: {k}"));
    // LISTEN/NOTIFY in this session.
    c.batch_execute("LISTEN jobs; NOTIFY jobs, 'one'; NOTIFY jobs, 'two'")
        .await
        .unwrap();
    c.check_idle().unwrap();
    t.push(format!("status: {:?}", c.transaction_status()));
}

/// Notifications on channel `jobs` among `all`, and how many were inserted ones.
fn split(all: &[slipstream_pg::Notification]) -> (Vec<String>, usize) {
    let jobs = all
        .iter()
        .filter(|n| n.channel() == "jobs")
        .map(|n| n.payload().to_string())
        .collect();
    (
        jobs,
        all.iter().filter(|n| n.channel() == "inserted").count(),
    )
}

#[tokio::test]
async fn holds_asynchronous_messages_between_any_two_server_messages_change_no_result() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    let mut direct = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let log = Log::default();
    workload(&mut direct, log.clone()).await;
    let expected = log.lines();
    let (jobs, _) = split(&direct.take_notifications());
    assert_eq!(jobs, ["one", "two"]);
    for (seed, kinds) in [(1u64, "N"), (2, "S"), (3, "A"), (4, "NSA"), (5, "NSA")] {
        let (port, counts) = start_proxy(cluster.port(), seed, kinds, None).await;
        let mut c = slipstream_pg::connect(&format!(
            "postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
        ))
        .await
        .unwrap();
        // The startup's notices went to the default handler; the one inserted after its
        // ReadyForQuery may reach this one.
        let before = counts.notices.load(Ordering::SeqCst);
        let seen = Arc::new(AtomicU64::new(0));
        let seen2 = seen.clone();
        c.set_notice_handler(move |n| {
            if n.message().starts_with("inserted ") {
                seen2.fetch_add(1, Ordering::SeqCst);
            }
        });
        // Bounded against a hang only.
        let log = Log::default();
        tokio::time::timeout(
            std::time::Duration::from_secs(120),
            workload(&mut c, log.clone()),
        )
        .await
        .unwrap_or_else(|_| panic!("seed {seed} {kinds}: the workload hung"));
        let got = log.lines();
        assert_eq!(got, expected, "seed {seed}, inserting {kinds}");
        // Everything the server sent has been read (the last call settled), so every
        // insertion so far has been seen.
        let (jobs, inserted) = split(&c.take_notifications());
        assert_eq!(jobs, ["one", "two"], "seed {seed} {kinds}");
        // The insertions after the last message read may not have been read yet.
        let notices = seen.load(Ordering::SeqCst);
        let sent = counts.notices.load(Ordering::SeqCst) - before;
        assert!(
            notices + 1 >= sent && notices <= sent + 1,
            "seed {seed} {kinds}: {notices} of {sent} inserted notices reached the handler"
        );
        let sent_a = counts.notifications.load(Ordering::SeqCst);
        assert!(
            inserted as u64 + 1 >= sent_a && inserted as u64 <= sent_a,
            "seed {seed} {kinds}: {inserted} of {sent_a} inserted notifications kept"
        );
        if kinds.contains('S') {
            assert!(c.parameter("slipstream_inserted").is_some());
        }
    }
}

/// The server's output cut at many places (every byte under `SLIPSTREAM_ATTACK_LONG=1`),
/// with and without notices and parameter changes between its messages: every call up to the
/// cut returns what it returns on an intact connection, the call the cut falls in fails with
/// an error saying the connection is gone (or, for a reply already whole, succeeds), and
/// nothing panics inside the client or hangs.
#[tokio::test]
async fn holds_a_connection_cut_anywhere_in_a_reply_fails_cleanly() {
    let cluster = slipstream_testkit::Cluster::start().unwrap();
    for kinds in ["", "NS"] {
        cut_sweep(&cluster, kinds).await;
    }
}

async fn cut_sweep(cluster: &slipstream_testkit::Cluster, kinds: &'static str) {
    let log = Log::default();
    let (port, counts) = start_proxy(cluster.port(), 9, kinds, None).await;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let mut c = slipstream_pg::connect(&url).await.unwrap();
    workload(&mut c, log.clone()).await;
    let expected = log.lines();
    drop(c);
    let total = counts.bytes.load(Ordering::SeqCst) as usize;
    let cuts: Vec<usize> = if std::env::var_os("SLIPSTREAM_ATTACK_LONG").is_some() {
        (0..=total).collect()
    } else {
        let mut rng = Rng(77);
        (0..200).map(|_| rng.next() as usize % total).collect()
    };
    for cut in cuts {
        let (port, _) = start_proxy(cluster.port(), cut as u64 + 1, kinds, Some(cut)).await;
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
        let log = Log::default();
        let run = tokio::spawn({
            let log = log.clone();
            async move {
                let mut c = match slipstream_pg::connect(&url).await {
                    Ok(c) => c,
                    Err(e) => {
                        log.push(format!("connect failed: {e}"));
                        return;
                    }
                };
                workload(&mut c, log).await;
            }
        });
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(60), run)
            .await
            .unwrap_or_else(|_| panic!("{kinds} cut at {cut}: the workload hung"));
        let got = log.lines();
        if let Err(e) = outcome {
            let panic = e.into_panic();
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            assert!(
                text.contains("called `Result::unwrap()` on an `Err`")
                    && (text.contains("kind: Closed") || text.contains("kind: Io")),
                "{kinds} cut at {cut}: a panic that is not a lost connection: {text}"
            );
        }
        // Every line matches the intact run's, unless it reports the loss (the call the cut
        // fell in, and a pipeline's results after it).
        for (i, line) in got.iter().enumerate() {
            if i < expected.len() && *line == expected[i] {
                continue;
            }
            let lower = line.to_lowercase();
            let lost = ["closed", "connection", "could not send"];
            assert!(
                lost.iter().any(|l| lower.contains(l)),
                "{kinds} cut at {cut}: line {i} is {line:?}, intact run had {:?}",
                expected.get(i)
            );
        }
    }
}
