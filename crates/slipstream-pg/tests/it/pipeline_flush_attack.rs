//! Attacks on pipeline_flush (extension/pipeline_flush): a hostile client written as raw
//! protocol bytes on a socket, against a real server with and without the module loaded,
//! checking the module's promises: results never change (the reply bytes are identical),
//! nothing is lost when the backend ends, no hang the stock server would not have, and an
//! explicit Flush always flushes. Each test runs the same bytes through a stock session first,
//! so a difference is the module's. Default run bounded (seconds); `SLIPSTREAM_ATTACK_LONG=1`
//! runs the differential fuzzer for many more bursts.

use std::time::Duration;

use slipstream_pg::Client;
use slipstream_testkit::Cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::engine::bounded;

// ---------------------------------------------------------------------------------------
// Frontend messages, built by hand: the hostile client controls every byte and every write.

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn query(sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, sql);
    msg(b'Q', &b)
}

fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, name);
    cstr(&mut b, sql);
    b.extend_from_slice(&0i16.to_be_bytes());
    msg(b'P', &b)
}

/// Binds statement `stmt` (no parameters, text results) to `portal`.
fn bind(portal: &str, stmt: &str) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    cstr(&mut b, stmt);
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes());
    msg(b'B', &b)
}

fn describe(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name);
    msg(b'D', &b)
}

fn execute(portal: &str, max_rows: i32) -> Vec<u8> {
    let mut b = Vec::new();
    cstr(&mut b, portal);
    b.extend_from_slice(&max_rows.to_be_bytes());
    msg(b'E', &b)
}

fn close(kind: u8, name: &str) -> Vec<u8> {
    let mut b = vec![kind];
    cstr(&mut b, name);
    msg(b'C', &b)
}

fn sync() -> Vec<u8> {
    msg(b'S', &[])
}

fn flush() -> Vec<u8> {
    msg(b'H', &[])
}

fn terminate() -> Vec<u8> {
    msg(b'X', &[])
}

fn copy_data(data: &[u8]) -> Vec<u8> {
    msg(b'd', data)
}

fn copy_done() -> Vec<u8> {
    msg(b'c', &[])
}

/// Parse, Bind, Execute of `sql` through the unnamed statement and portal (no Sync).
fn unsynced(sql: &str) -> Vec<u8> {
    [parse("", sql), bind("", ""), execute("", 0)].concat()
}

// ---------------------------------------------------------------------------------------
// A raw session.

struct Raw {
    s: TcpStream,
    /// Bytes read and not yet taken as whole messages.
    buf: Vec<u8>,
    pid: i32,
}

/// One backend message, whole (tag, length and body), as the server sent it.
type Message = Vec<u8>;

impl Raw {
    /// Connects as `postgres` (trust), reads through the first ReadyForQuery, and loads the
    /// module when `module`.
    async fn connect(cluster: &Cluster, module: bool) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", cluster.port()))
            .await
            .expect("connect");
        s.set_nodelay(true).unwrap();
        let mut r = Raw {
            s,
            buf: Vec::new(),
            pid: 0,
        };
        let mut body = 196608i32.to_be_bytes().to_vec();
        for kv in ["user", "postgres", "database", "postgres"] {
            cstr(&mut body, kv);
        }
        body.push(0);
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend_from_slice(&body);
        r.s.write_all(&startup).await.unwrap();
        for m in bounded("the startup", r.until_ready(1)).await {
            if m[0] == b'K' {
                r.pid = i32::from_be_bytes(m[5..9].try_into().unwrap());
            }
            assert_ne!(
                m[0],
                b'E',
                "startup failed: {}",
                String::from_utf8_lossy(&m)
            );
        }
        if module {
            r.s.write_all(&query(&format!("LOAD '{}'", library())))
                .await
                .unwrap();
            let got = bounded("LOAD", r.until_ready(1)).await;
            assert!(
                got.iter().all(|m| m[0] != b'E'),
                "pipeline_flush is not installed: run `make -C extension/pipeline_flush install \
                 PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config` ({})",
                String::from_utf8_lossy(&got.concat())
            );
        }
        r
    }

    /// The next whole message, or None at end of stream.
    async fn next(&mut self) -> Option<Message> {
        loop {
            if self.buf.len() >= 5 {
                let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() > len {
                    return Some(self.buf.drain(..=len).collect());
                }
            }
            let mut chunk = [0u8; 8192];
            let n = self.s.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Messages through the `n`th ReadyForQuery; panics at end of stream.
    async fn until_ready(&mut self, n: usize) -> Vec<Message> {
        let mut out = Vec::new();
        let mut seen = 0;
        while seen < n {
            let m = self
                .next()
                .await
                .unwrap_or_else(|| panic!("end of stream after {out:?}"));
            seen += usize::from(m[0] == b'Z');
            out.push(m);
        }
        out
    }

    /// Messages through the next ReadyForQuery if it arrives within `limit`; otherwise None,
    /// and whatever did arrive stays buffered for the next read (nothing is dropped).
    async fn ready_within(&mut self, limit: Duration) -> Option<Vec<Message>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let mut at = 0;
            while self.buf.len() >= at + 5 {
                let len = i32::from_be_bytes(self.buf[at + 1..at + 5].try_into().unwrap());
                let end = at + 1 + len as usize;
                if self.buf.len() < end {
                    break;
                }
                if self.buf[at] == b'Z' {
                    let whole: Vec<u8> = self.buf.drain(..end).collect();
                    return Some(split_messages(&whole));
                }
                at = end;
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout_at(deadline, self.s.read(&mut chunk)).await {
                Err(_) => return None,
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                Ok(r) => panic!("connection ended while waiting for replies: {r:?}"),
            }
        }
    }

    /// Every message until the server closes the connection.
    async fn until_closed(&mut self) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(m) = self.next().await {
            out.push(m);
        }
        out
    }
}

/// A byte stream of whole backend messages, as messages.
fn split_messages(mut b: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    while b.len() >= 5 {
        let len = i32::from_be_bytes(b[1..5].try_into().unwrap()) as usize;
        out.push(b[..=len].to_vec());
        b = &b[len + 1..];
    }
    out
}

/// The module to LOAD: the installed one, or a private build named by
/// `SLIPSTREAM_PIPELINE_FLUSH_LIB` (an absolute path the postgres user can read) to test a
/// change without overwriting the machine-wide library.
fn library() -> String {
    std::env::var("SLIPSTREAM_PIPELINE_FLUSH_LIB").unwrap_or_else(|_| "pipeline_flush".into())
}

fn tags(ms: &[Message]) -> String {
    ms.iter().map(|m| m[0] as char).collect()
}

/// Waits until backend `pid` has `sql` as its statement in the state `state` says (a
/// `pg_stat_activity` condition), polling: the condition itself, not a guess of how long.
async fn until_activity(watcher: &mut Client, pid: i32, sql: &str, state: &str) {
    let check =
        format!("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query = $2 AND {state}");
    bounded(&format!("backend {pid} to show {state}"), async {
        loop {
            let n: i64 = watcher
                .query_one(&check, &[&pid, &sql])
                .await
                .unwrap()
                .get(0)
                .unwrap();
            if n == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Waits until backend `pid` has consumed all its input and waits in a read on its socket
/// for more (`ClientRead`) with `sql` as its last statement: every reply it will send before
/// more input arrives has been sent, and on loopback is already in our receive queue.
async fn until_reading(watcher: &mut Client, pid: i32, sql: &str) {
    until_activity(watcher, pid, sql, "wait_event = 'ClientRead'").await
}

/// How long to look for replies the server has already sent (they are in the socket's
/// receive queue by then): a hang detector with a wide margin, not a timing measurement.
const LOOK: Duration = Duration::from_secs(3);

/// Sends `burst` in one write, waits until the backend reads for more input after running
/// `last_sql`, then says whether the first ReadyForQuery's replies have arrived.
async fn replies_while_reading(
    r: &mut Raw,
    watcher: &mut Client,
    burst: &[u8],
    last_sql: &str,
) -> Option<Vec<Message>> {
    r.s.write_all(burst).await.unwrap();
    until_reading(watcher, r.pid, last_sql).await;
    r.ready_within(LOOK).await
}

// ---------------------------------------------------------------------------------------
// Promise 2: nothing is lost when the backend ends.

/// A client that sends its last statements and a Terminate in one write, then reads until
/// the server closes (a script piped into a client, a pool closing a connection after a
/// fire-and-forget batch): the stock server flushes at each ReadyForQuery, so every reply
/// arrives before it reads the Terminate. The module skips that flush because the Terminate
/// is already buffered, and the backend then exits without flushing its send buffer.
#[tokio::test]
async fn replies_before_a_terminate_in_the_same_write_reach_the_client() {
    let cluster = Cluster::start().unwrap();
    let mut admin = slipstream_pg::connect(&cluster.url()).await.unwrap();
    admin
        .batch_execute("CREATE TABLE landed (id int)")
        .await
        .unwrap();
    let burst = [
        query("INSERT INTO landed VALUES (1)"),
        unsynced("INSERT INTO landed VALUES (2)"),
        sync(),
        terminate(),
    ]
    .concat();
    let mut got = Vec::new();
    for module in [false, true] {
        let mut r = Raw::connect(&cluster, module).await;
        r.s.write_all(&burst).await.unwrap();
        got.push(tags(
            &bounded("the replies, to the end", r.until_closed()).await,
        ));
    }
    // Both sessions' inserts ran: the database has them, so the client must hear of them.
    let n: i64 = admin
        .query_one("SELECT count(*) FROM landed", &[])
        .await
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(got[0], "CZ12CZ", "stock server");
    assert_eq!(
        got[1], got[0],
        "with the module: replies to committed statements lost at Terminate"
    );
}

/// The same with the client half-closing its socket instead of a Terminate (end of input):
/// a burst that ends with complete but unsynced messages after a Sync. The stock server
/// sends the replies through the Sync's ReadyForQuery and drops the replies to the unsynced
/// tail when it exits; the module must send at least as much (a module that flushes held
/// replies before the backend blocks may send some of the tail's replies too, which the
/// client asked for: more, never less).
#[tokio::test]
async fn replies_before_end_of_input_reach_the_client() {
    let cluster = Cluster::start().unwrap();
    let burst = [query("SELECT 'one'"), unsynced("SELECT 'two'")].concat();
    let mut got = Vec::new();
    for module in [false, true] {
        let mut r = Raw::connect(&cluster, module).await;
        r.s.write_all(&burst).await.unwrap();
        r.s.shutdown().await.unwrap();
        got.push(tags(
            &bounded("the replies, to the end", r.until_closed()).await,
        ));
    }
    assert_eq!(got[0], "TDCZ", "stock server");
    assert!(
        got[1].starts_with(&got[0]),
        "with the module: replies lost at end of input: {:?}, stock {:?}",
        got[1],
        got[0]
    );
}

// ---------------------------------------------------------------------------------------
// Promise 3: no hang the stock server would not have.

/// A burst whose tail is complete messages without a Sync or Flush after them: libpq's
/// pipeline mode produces exactly this (PQpipelineSync, then PQsendQueryParams queued, then
/// PQgetResult, which flushes the queued messages before it waits for the synced results).
/// The stock server flushes at the Sync; with the module the replies stay in its send buffer
/// while it waits in a read for the next Sync, which the client sends only after it has its
/// results: a hang with only complete messages buffered, not the documented partial-message
/// case.
#[tokio::test]
async fn a_complete_unsynced_tail_does_not_hold_the_replies_before_it() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let tail = "SELECT 'tail'";
    let burst = [unsynced("SELECT 'head'"), sync(), unsynced(tail)].concat();
    let mut prompt = Vec::new();
    for module in [false, true] {
        let mut r = Raw::connect(&cluster, module).await;
        let early = replies_while_reading(&mut r, &mut watcher, &burst, tail).await;
        prompt.push(early.is_some());
        // The client's next Sync releases everything: nothing lost either way.
        r.s.write_all(&sync()).await.unwrap();
        let rest = bounded(
            "the rest",
            r.until_ready(if early.is_some() { 1 } else { 2 }),
        )
        .await;
        let all = [early.unwrap_or_default(), rest].concat();
        assert_eq!(tags(&all), "12DCZ12DCZ", "module {module}");
    }
    assert!(
        prompt[0],
        "stock server: the Sync's replies while it reads for more"
    );
    assert!(
        prompt[1],
        "with the module: the Sync's replies are held while the server waits in a read for \
         input the client sends only after it has them (a hang)"
    );
}

/// COPY FROM STDIN with a bad row, the data streamed as libpq streams it (CopyData messages
/// and the CopyDone, then wait for the result): the error aborts the COPY with CopyData
/// still buffered, and the server skips those messages silently in its main loop. The stock
/// server flushes the ReadyForQuery after the error; with the module it is held (more input
/// was buffered), the skipped messages put nothing, and the server then waits in a read for
/// input the client will send only after its ReadyForQuery: a hang, with only complete
/// messages sent.
#[tokio::test]
async fn a_copy_that_fails_with_data_still_buffered_does_not_hold_its_ready_for_query() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE copied (a int)")
        .await
        .unwrap();
    let copy = "COPY copied FROM STDIN";
    let data = [
        copy_data(b"1\n"),
        copy_data(b"not a number\n"),
        copy_data(b"3\n"),
        copy_data(b"4\n"),
        copy_done(),
    ]
    .concat();
    let mut outcome = Vec::new();
    for module in [false, true] {
        let mut r = Raw::connect(&cluster, module).await;
        r.s.write_all(&query(copy)).await.unwrap();
        let started = bounded("CopyInResponse", r.next()).await.unwrap();
        assert_eq!(started[0], b'G', "module {module}");
        let early = replies_while_reading(&mut r, &mut watcher, &data, copy).await;
        outcome.push(early.as_deref().map(tags));
        if early.is_none() {
            // Any further input releases the held replies: nothing is lost, only late.
            r.s.write_all(&query("SELECT 1")).await.unwrap();
            let late = bounded("the held replies", r.until_ready(2)).await;
            assert_eq!(tags(&late), "EZTDCZ", "module {module}");
        }
    }
    assert_eq!(outcome[0].as_deref(), Some("EZ"), "stock server");
    // (The ErrorResponse itself is flushed with the module too: only the ReadyForQuery after
    // it is held, and a client waits for that.)
    assert_eq!(
        outcome[1], outcome[0],
        "with the module: the failed COPY's ReadyForQuery is held while the server waits \
         for input (a hang)"
    );
}

/// The documented hazard: a partial message left unsent while the client waits for the
/// replies to an earlier Sync. The stock server has flushed them; with the module they wait
/// for the rest of the message. (Confirms the documented behaviour; it changes if the module
/// learns to flush before it blocks in a read.)
#[tokio::test]
async fn documented_hazard_a_partial_message_holds_the_replies_before_it() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let head = "SELECT 'head'";
    let next = query("SELECT 'next'");
    let (part, rest) = next.split_at(7);
    let burst = [query(head), part.to_vec()].concat();
    let mut prompt = Vec::new();
    for module in [false, true] {
        let mut r = Raw::connect(&cluster, module).await;
        let early = replies_while_reading(&mut r, &mut watcher, &burst, head).await;
        prompt.push(early.is_some());
        r.s.write_all(rest).await.unwrap();
        let later = bounded(
            "the rest",
            r.until_ready(if early.is_some() { 1 } else { 2 }),
        )
        .await;
        let all = [early.unwrap_or_default(), later].concat();
        assert_eq!(tags(&all), "TDCZTDCZ", "module {module}");
    }
    assert_eq!(
        prompt,
        [true, false],
        "[stock, module]: replies while a message is partial"
    );
}

// ---------------------------------------------------------------------------------------
// Promise 4: an explicit Flush always flushes.

/// A Flush right after a Sync releases the Sync's replies even though more input (an
/// unsynced tail that never completes a round trip) follows: the module skips only the
/// flush after ReadyForQuery.
#[tokio::test]
async fn a_flush_after_a_sync_always_releases_its_replies() {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let tail = "SELECT 'tail'";
    for module in [false, true] {
        let burst = [unsynced("SELECT 'head'"), sync(), flush(), unsynced(tail)].concat();
        let mut r = Raw::connect(&cluster, module).await;
        let early = replies_while_reading(&mut r, &mut watcher, &burst, tail).await;
        let early = early.unwrap_or_else(|| panic!("module {module}: Flush did not flush"));
        assert_eq!(tags(&early), "12DCZ", "module {module}");
        r.s.write_all(&sync()).await.unwrap();
        assert_eq!(
            tags(&bounded("the rest", r.until_ready(1)).await),
            "12DCZ",
            "module {module}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Promise 1 (and 5 for parallel workers): a differential fuzzer comparing reply bytes.

/// Statements for the simple and extended protocols: rows, counts, errors (parse, execution,
/// in the extended protocol's skip-until-Sync state), notices, COPY out, replies wider than
/// the 8 kB send buffer, transactions, and the module's own setting toggled mid-burst. Each
/// session has its own temporary table, so both sessions see the same state.
const STATEMENTS: &[&str] = &[
    "SELECT 1",
    "SELECT 1/0",
    "SELEC 1",
    "SELECT generate_series(1, 5)",
    "DO $$BEGIN RAISE NOTICE 'notice %', 42; END$$",
    "CREATE TEMP TABLE IF NOT EXISTS tt (a int)",
    "INSERT INTO tt VALUES (1), (2)",
    "SELECT count(*), sum(a) FROM tt",
    "DELETE FROM tt WHERE a = 2",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT s",
    "SELECT repeat('x', 9000)",
    "COPY (SELECT generate_series(1, 30)) TO STDOUT",
    "SET pipeline_flush.enabled = off",
    "SET pipeline_flush.enabled = on",
    // An expression, not the column: a RowDescription names a column's table by OID, and
    // each session's temporary table has its own.
    "SELECT a + 0 FROM tt ORDER BY 1",
    "",
];

/// A seeded generator (the same on every run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

/// One burst of random messages, ending with a Sync and a marker query whose row tells the
/// reader where the burst's replies end. Every burst ends with complete messages and a
/// Query, so neither server has a reason to wait for the client.
fn burst(rng: &mut Lcg, marker: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let names = ["", "s1", "s2"];
    for _ in 0..1 + rng.below(25) {
        let sql = STATEMENTS[rng.below(STATEMENTS.len())];
        let name = names[rng.below(names.len())];
        let part = match rng.below(12) {
            0 | 1 => query(sql),
            2 => query(&format!(
                "{sql}; {}",
                STATEMENTS[rng.below(STATEMENTS.len())]
            )),
            3 => parse(name, sql),
            4 => bind(name, name),
            5 => describe(if rng.below(2) == 0 { b'S' } else { b'P' }, name),
            6 => execute(name, [0, 1, 2][rng.below(3)]),
            7 => sync(),
            8 => flush(),
            9 => close(if rng.below(2) == 0 { b'S' } else { b'P' }, name),
            10 => [
                query("COPY tt FROM STDIN"),
                copy_data(b"7\n8\n"),
                copy_done(),
            ]
            .concat(),
            _ => [unsynced(sql), sync()].concat(),
        };
        out.extend(part);
    }
    out.extend(sync());
    // ROLLBACK first: a burst may leave a failed transaction, which would refuse the marker.
    out.extend(query(&format!("ROLLBACK; SELECT '{marker}'")));
    out
}

/// Replies through the marker's row and the ReadyForQuery after it.
async fn through_marker(r: &mut Raw, marker: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut marked = false;
    loop {
        let m = r
            .next()
            .await
            .unwrap_or_else(|| panic!("end of stream before marker {marker}"));
        let done = marked && m[0] == b'Z';
        if m[0] == b'D' && m.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            marked = true;
        }
        out.extend_from_slice(&m);
        if done {
            return out;
        }
    }
}

/// Writes `bytes` in a few random pieces (messages split across writes: the server sees
/// partial messages between them, which the client completes without waiting for replies).
async fn write_in_pieces(r: &mut Raw, rng: &mut Lcg, bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        let n = 1 + rng.below((bytes.len() - at).min(600));
        r.s.write_all(&bytes[at..at + n]).await.unwrap();
        at += n;
        if rng.below(4) == 0 {
            tokio::task::yield_now().await;
        }
    }
}

async fn differential(setup: &str, seed: u64, bursts: usize) {
    let cluster = Cluster::start().unwrap();
    let mut stock = Raw::connect(&cluster, false).await;
    let mut with = Raw::connect(&cluster, true).await;
    for r in [&mut stock, &mut with] {
        r.s.write_all(&query(setup)).await.unwrap();
        let got = bounded("setup", r.until_ready(1)).await;
        assert!(got.iter().all(|m| m[0] != b'E'), "{setup}: {got:?}");
    }
    let mut rng = Lcg(seed);
    for k in 0..bursts {
        let marker = format!("end of burst {k}");
        let bytes = burst(&mut rng, &marker);
        let mut replies = Vec::new();
        for (who, r) in [("stock", &mut stock), ("module", &mut with)] {
            // The same pieces for both sessions.
            let mut split = Lcg(seed ^ k as u64);
            write_in_pieces(r, &mut split, &bytes).await;
            let what = format!("seed {seed}, burst {k}, {who} session's replies");
            replies.push(bounded(&what, through_marker(r, &marker)).await);
        }
        if replies[0] != replies[1] {
            let (a, b) = (split_messages(&replies[0]), split_messages(&replies[1]));
            let at = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            let show = |m: Option<&Message>| {
                m.map(|m| String::from_utf8_lossy(&m[..m.len().min(300)]).replace('\0', "~"))
            };
            panic!(
                "seed {seed}, burst {k}: reply bytes differ at message {at}\n\
                 stock tags:  {}\nmodule tags: {}\nstock:  {:?}\nmodule: {:?}",
                tags(&a),
                tags(&b),
                show(a.get(at)),
                show(b.get(at))
            );
        }
    }
}

fn bursts() -> usize {
    if std::env::var_os("SLIPSTREAM_ATTACK_LONG").is_some() {
        3000
    } else {
        60
    }
}

/// Random message sequences through a stock session and a session with the module: the
/// reply byte streams are identical (only packetization may differ, and the comparison is of
/// the streams).
#[tokio::test]
async fn random_message_sequences_get_the_same_reply_bytes() {
    differential("SET client_min_messages = notice", 11, bursts()).await;
}

/// The same with every query run by a parallel worker (`force_parallel_mode`, PostgreSQL
/// 15's name) and plans free to go parallel: the module leaves the workers' message queues
/// alone and the leader's replies are unchanged.
#[tokio::test]
async fn parallel_workers_behind_the_module_give_the_same_reply_bytes() {
    differential(
        "SET force_parallel_mode = on; SET parallel_setup_cost = 0; \
         SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0",
        12,
        bursts() / 2,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Promise 2 with server-side endings: timeouts and notifications inside a held burst.

/// Runs `setup` (a simple query), then writes `burst` in one write and reads through `ready`
/// ReadyForQuery messages, or to the end of the stream when `ready` is None; in a stock
/// session and one with the module. NotificationResponse sender PIDs are zeroed (each
/// session has its own); everything else is compared byte for byte.
async fn both(setup: &str, burst: &[u8], ready: Option<usize>) -> [Vec<u8>; 2] {
    let cluster = Cluster::start().unwrap();
    let mut out: [Vec<u8>; 2] = Default::default();
    for (k, module) in [false, true].into_iter().enumerate() {
        let mut r = Raw::connect(&cluster, module).await;
        r.s.write_all(&query(setup)).await.unwrap();
        let got = bounded("setup", r.until_ready(1)).await;
        assert!(got.iter().all(|m| m[0] != b'E'), "{setup}: {got:?}");
        r.s.write_all(burst).await.unwrap();
        let got = match ready {
            Some(n) => bounded("the burst's replies", r.until_ready(n)).await,
            None => bounded("the burst's replies, to the end", r.until_closed()).await,
        };
        for mut m in got {
            if m[0] == b'A' {
                m[5..9].fill(0);
            }
            out[k].extend_from_slice(&m);
        }
    }
    out
}

fn assert_same(got: &[Vec<u8>; 2], want_tags: &str, what: &str) {
    let (stock, module) = (split_messages(&got[0]), split_messages(&got[1]));
    assert_eq!(tags(&stock), want_tags, "{what}: stock server");
    assert!(
        got[0] == got[1],
        "{what}: with the module the replies differ: {:?}, stock {:?}",
        tags(&module),
        tags(&stock)
    );
}

/// statement_timeout cancels a statement that runs while the replies before it are held:
/// the ErrorResponse's flush carries them, and the statements after it run as without the
/// module.
#[tokio::test]
async fn a_statement_timeout_inside_a_held_burst_changes_nothing() {
    let burst = [
        unsynced("SELECT 'before'"),
        sync(),
        query("SELECT pg_sleep(30)"),
        unsynced("SELECT 'after'"),
        sync(),
    ]
    .concat();
    let got = both("SET statement_timeout = '200ms'", &burst, Some(3)).await;
    assert_same(&got, "12DCZTEZ12DCZ", "statement_timeout");
}

/// idle_session_timeout ends a session whose replies are held behind a partial message
/// (the documented hazard): the FATAL error is flushed with the held replies before it.
#[tokio::test]
async fn idle_session_timeout_behind_a_partial_message_loses_nothing() {
    let next = query("SELECT 'never completed'");
    let burst = [query("SELECT 'held'"), next[..6].to_vec()].concat();
    let got = both("SET idle_session_timeout = '300ms'", &burst, None).await;
    assert_same(&got, "TDCZE", "idle_session_timeout");
}

/// Notifications to the session itself are put just before ReadyForQuery: pipelined, they
/// arrive with the same payloads, in the same place, with and without the module.
#[tokio::test]
async fn notifications_in_a_pipelined_burst_arrive_as_without_the_module() {
    let burst = [
        unsynced("NOTIFY ch, 'one'"),
        sync(),
        query("NOTIFY ch, 'two'; SELECT 'between'"),
        unsynced("NOTIFY ch, 'three'"),
        sync(),
        unsynced("SELECT 'last'"),
        sync(),
    ]
    .concat();
    let got = both("LISTEN ch", &burst, Some(4)).await;
    assert_same(&got, "12CAZCTDCAZ12CAZ12DCZ", "NOTIFY");
}

// ---------------------------------------------------------------------------------------
// Promise 2 when a backend dies without an error report.

/// Waits until backend `pid` runs `sql`.
async fn until_running(watcher: &mut Client, pid: i32, sql: &str) {
    until_activity(watcher, pid, sql, "state = 'active'").await
}

/// A stock session and one with the module each commit an INSERT and then sleep (and a
/// statement after), in one write (the module holds the INSERT's replies while the sleep runs); then backend `victim`
/// (0: the stock one, 1: the module's) is killed with SIGKILL, a crash: the postmaster
/// ends every other backend with SIGQUIT. What each session received, to the end.
async fn crash_while_held(victim: usize) -> [String; 2] {
    let cluster = Cluster::start().unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    watcher
        .batch_execute("CREATE TABLE landed (id int)")
        .await
        .unwrap();
    let sleep = "SELECT pg_sleep(60)";
    // A statement after the sleep: the input is not used up while the sleep runs, so the
    // module still holds the INSERT's replies (it flushes them at the first reply put once
    // the buffered input is used up).
    let burst = [
        query("INSERT INTO landed VALUES (1)"),
        query(sleep),
        query("SELECT 'after'"),
    ]
    .concat();
    let mut sessions = Vec::new();
    for module in [false, true] {
        let mut r = Raw::connect(&cluster, module).await;
        r.s.write_all(&burst).await.unwrap();
        until_running(&mut watcher, r.pid, sleep).await;
        sessions.push(r);
    }
    let status = std::process::Command::new("kill")
        .args(["-KILL", &sessions[victim].pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut out: [String; 2] = Default::default();
    for (k, r) in sessions.iter_mut().enumerate() {
        out[k] = tags(&bounded("the replies, to the end", r.until_closed()).await);
    }
    out
}

/// Another backend crashes while the module holds replies: the SIGQUIT handler's warning
/// to the client is flushed, and the held replies with it.
#[tokio::test]
async fn a_crash_of_another_backend_loses_no_held_reply() {
    let [stock, module] = crash_while_held(0).await;
    assert_eq!(
        stock, "CZ",
        "the killed stock backend had sent the INSERT's replies"
    );
    assert_eq!(
        module, "CZTN",
        "with the module: the INSERT's replies and the crash warning"
    );
}

/// Documented hazard: a backend that dies without an error report (SIGKILL, the OOM
/// killer, a crash) loses the replies it holds, including the CommandComplete and
/// ReadyForQuery of a transaction that committed; the stock server had sent them. The
/// client cannot tell whether the INSERT committed. (Asserts the hazard as it stands.)
#[tokio::test]
async fn documented_hazard_a_killed_backend_loses_its_held_replies() {
    let [stock, module] = crash_while_held(1).await;
    assert_eq!(
        stock, "CZTN",
        "the stock session: its replies, then the crash warning"
    );
    assert_eq!(
        module, "",
        "the killed backend with the module: the held replies are lost"
    );
}

// ---------------------------------------------------------------------------------------
// Loading: a setting that says "on" must mean the module acts.

/// `shared_preload_libraries` loads the module in the postmaster, where there is no client
/// socket to wrap, and backends inherit that state without running `_PG_init` again. If its
/// setting exists there and says `on`, the module must act in the session (observable: the
/// replies before a partial message are held, as with LOAD); otherwise the setting must not
/// claim it is on. (A preloaded module could wrap the socket from a per-backend hook such as
/// ClientAuthentication_hook, or refuse shared_preload_libraries with a clear message.)
#[tokio::test]
async fn a_module_preloaded_for_the_server_acts_when_its_setting_says_on() {
    let cluster = Cluster::builder()
        .setting("shared_preload_libraries", &library())
        .start()
        .unwrap();
    let mut watcher = slipstream_pg::connect(&cluster.url()).await.unwrap();
    let shown = watcher
        .query_one(
            "SELECT current_setting('pipeline_flush.enabled', true)",
            &[],
        )
        .await
        .unwrap()
        .get::<_, Option<String>>(0)
        .unwrap();
    let head = "SELECT 'head'";
    let next = query("SELECT 'next'");
    let burst = [query(head), next[..7].to_vec()].concat();
    let mut r = Raw::connect(&cluster, false).await;
    let held = replies_while_reading(&mut r, &mut watcher, &burst, head)
        .await
        .is_none();
    r.s.write_all(&next[7..]).await.unwrap();
    bounded("the rest", r.until_ready(if held { 2 } else { 1 })).await;
    assert_eq!(
        held,
        shown.as_deref() == Some("on"),
        "pipeline_flush.enabled shows {shown:?} under shared_preload_libraries, but the module \
         {} the session's replies",
        if held { "holds" } else { "does not hold" }
    );
}

// ---------------------------------------------------------------------------------------
// Promises 2 and 3, fuzzed: bursts that end with an unsynced tail, or with a Terminate.

/// Random groups (a Query alone, or extended messages and a Sync: each gives exactly one
/// ReadyForQuery, errors included), then a random tail of extended messages with no Sync.
/// Returns the bytes of the groups, the tail, and the number of groups.
fn groups_and_tail(rng: &mut Lcg) -> (Vec<u8>, Vec<u8>, usize) {
    let names = ["", "s1"];
    let extended = |rng: &mut Lcg, out: &mut Vec<u8>| {
        for _ in 0..1 + rng.below(5) {
            let sql = STATEMENTS[rng.below(STATEMENTS.len())];
            let name = names[rng.below(names.len())];
            out.extend(match rng.below(5) {
                0 => parse(name, sql),
                1 => bind(name, name),
                2 => describe(b'P', name),
                3 => execute(name, 0),
                _ => close(b'S', name),
            });
        }
    };
    let mut groups = Vec::new();
    let n = 1 + rng.below(6);
    for _ in 0..n {
        if rng.below(3) == 0 {
            groups.extend(query(STATEMENTS[rng.below(STATEMENTS.len())]));
        } else {
            extended(rng, &mut groups);
            groups.extend(sync());
        }
    }
    let mut tail = Vec::new();
    extended(rng, &mut tail);
    (groups, tail, n)
}

/// Groups and an unsynced tail in one write: every group's ReadyForQuery arrives without
/// more input (the stock server flushed each), and once the client syncs, the whole stream
/// is the stock server's byte for byte.
#[tokio::test]
async fn random_unsynced_tails_never_hold_the_replies_before_them() {
    let cluster = Cluster::start().unwrap();
    let mut rng = Lcg(21);
    let mut sessions = [
        Raw::connect(&cluster, false).await,
        Raw::connect(&cluster, true).await,
    ];
    for k in 0..bursts() {
        let (groups, tail, n) = groups_and_tail(&mut rng);
        let marker = format!("end of burst {k}");
        let mut streams: [Vec<u8>; 2] = Default::default();
        for (who, r) in sessions.iter_mut().enumerate() {
            r.s.write_all(&[groups.clone(), tail.clone()].concat())
                .await
                .unwrap();
            // A hang detector with a wide margin: the stock server has sent these already.
            let got = tokio::time::timeout(Duration::from_secs(10), r.until_ready(n))
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "burst {k}, {}: the groups' replies are held behind an unsynced tail \
                         (a hang)",
                        ["stock", "module"][who]
                    )
                });
            streams[who] = got.concat();
            r.s.write_all(&[sync(), query(&format!("ROLLBACK; SELECT '{marker}'"))].concat())
                .await
                .unwrap();
            streams[who].extend(bounded("the rest", through_marker(r, &marker)).await);
        }
        assert!(
            streams[0] == streams[1],
            "burst {k}: streams differ: stock {:?}, module {:?}",
            tags(&split_messages(&streams[0])),
            tags(&split_messages(&streams[1]))
        );
    }
}

/// Groups, an optional unsynced tail and a Terminate in one write, read to the end: the
/// module's stream starts with everything the stock server sent (it may add replies to the
/// tail, which the stock server drops at exit).
#[tokio::test]
async fn random_bursts_ending_in_terminate_lose_nothing() {
    let cluster = Cluster::start().unwrap();
    let mut rng = Lcg(22);
    for k in 0..bursts() / 6 {
        let (groups, tail, _) = groups_and_tail(&mut rng);
        let tail = if rng.below(2) == 0 { tail } else { Vec::new() };
        let bytes = [groups, tail, terminate()].concat();
        let mut streams: [Vec<u8>; 2] = Default::default();
        for (who, module) in [false, true].into_iter().enumerate() {
            let mut r = Raw::connect(&cluster, module).await;
            r.s.write_all(&bytes).await.unwrap();
            streams[who] = bounded("the replies, to the end", r.until_closed())
                .await
                .concat();
        }
        assert!(
            streams[1].starts_with(&streams[0]),
            "burst {k}: with the module replies are lost at Terminate: stock {:?}, module {:?}",
            tags(&split_messages(&streams[0])),
            tags(&split_messages(&streams[1]))
        );
    }
}
