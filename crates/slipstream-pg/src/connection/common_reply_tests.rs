//! `Connection::next_common` against the general reader it short-cuts: the same server bytes,
//! arriving in the same pieces, must give the same results, errors and connection state
//! whichever reads them. A fake server on 127.0.0.1 answers a `query` and then an `execute`
//! of the same (now cached) statement with a generated reply: well-formed messages of the
//! kinds the fast path takes, asynchronous ones between them, and the edge cases it must
//! leave to the general reader (odd lengths and status bytes, tags that are not UTF-8 or have
//! a NUL inside, short and oversized rows, errors, a cut stream).
//!
//! Bounded by default; the long form: `SLIPSTREAM_DIFF_CASES=20000 cargo test -p slipstream-pg
//! --lib common_reply`.
//!
//! A `#[cfg(test)]` module: its `unwrap`s and `expect`s are the test's own checks (the fake
//! server's bind and socket option on 127.0.0.1, its scripted startup, `get_raw` of an index
//! below the row's `len()`, the runtime). No user input or real socket reaches them; a panic
//! here is the test failing.

use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestCaseError, TestRunner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{BIG_MESSAGE, GENERAL_ONLY};
use crate::{Client, Config, SslMode};

const DEFAULT_CASES: u32 = 300;
/// Every case ends well within this: the fake server closes after its last reply.
const CASE_LIMIT: Duration = Duration::from_secs(10);

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(s: &[u8]) -> Vec<u8> {
    [s, &[0]].concat()
}

fn row(values: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut body = (values.len() as u16).to_be_bytes().to_vec();
    for v in values {
        match v {
            Some(v) => {
                body.extend_from_slice(&(v.len() as i32).to_be_bytes());
                body.extend_from_slice(v);
            }
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    msg(b'D', &body)
}

fn row_description(columns: usize) -> Vec<u8> {
    let mut body = (columns as u16).to_be_bytes().to_vec();
    for i in 0..columns {
        body.extend(cstr(format!("c{i}").as_bytes()));
        body.extend_from_slice(&0u32.to_be_bytes()); // table
        body.extend_from_slice(&0u16.to_be_bytes()); // column number
        body.extend_from_slice(&25u32.to_be_bytes()); // text
        body.extend_from_slice(&(-1i16).to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&1u16.to_be_bytes()); // binary
    }
    msg(b'T', &body)
}

fn error(severity: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (code, value) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', "XX000"),
        (b'M', "boom"),
    ] {
        body.push(code);
        body.extend(cstr(value.as_bytes()));
    }
    body.push(0);
    msg(b'E', &body)
}

/// Messages the server may send at any time.
fn asynchronous() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(msg(
            b'N',
            &[&b"SNOTICE\0VNOTICE\0C00000\0Mhello\0"[..], &[0]].concat()
        )),
        Just(msg(b'S', b"application_name\0x\0")),
        Just(msg(b'A', &[&[0, 0, 0, 9][..], b"chan\0payload\0"].concat())),
    ]
}

const TAGS: &[&[u8]] = &[
    b"SELECT 2",
    b"UPDATE 3",
    b"INSERT 0 7",
    b"DISCARD ALL",
    b"DEALLOCATE ALL",
    b"COMMIT",
    b"ROLLBACK",
    b"BEGIN",
    b"",
    // UTF-8 beyond ASCII: the fast path leaves it to the general reader.
    "S\u{c9}LECT 4".as_bytes(),
    b"SELECT +5",
];

fn tag_text() -> impl Strategy<Value = &'static [u8]> {
    proptest::sample::select(TAGS)
}

/// A message the fast path must leave to the general reader, or take exactly as it would.
fn edge() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(msg(b'2', &[0])),
        Just(msg(b'1', b"xy")),
        Just(msg(b'n', &[1])),
        proptest::sample::select(&[b'X', b'i', 0, b'Z'][..]).prop_map(|s| msg(b'Z', &[s])),
        Just(msg(b'Z', b"II")),
        Just(msg(b'Z', b"")),
        Just(msg(b'C', b"SELECT 1")),
        Just(msg(b'C', b"SELECT\x001\x00")),
        Just(msg(b'C', b"SELECT \xff\xfe\x00")),
        Just(msg(b'C', b"")),
        Just(msg(b'D', &[])),
        Just(msg(b'D', &[0])),
        Just(msg(b'D', &[0, 1, 0, 0, 0, 9, 1])),
        Just(row(&[Some(vec![7u8; BIG_MESSAGE + 10])])),
        Just(error("ERROR")),
        Just(error("FATAL")),
        Just(msg(b's', &[])),
        Just(msg(b'I', &[])),
        // A header whose length lies: bigger than the fast path takes, or below 4.
        Just(
            [
                &[b'D'][..],
                &(BIG_MESSAGE as u32 * 2).to_be_bytes()[..],
                &[0, 1]
            ]
            .concat()
        ),
        Just([&[b'2'][..], &2u32.to_be_bytes()[..]].concat()),
    ]
}

fn values(columns: usize) -> impl Strategy<Value = Vec<Option<Vec<u8>>>> {
    vec(
        proptest::option::of(vec(any::<u8>(), 0..12)),
        columns..=columns,
    )
}

/// A reply to `Parse`/`Describe`/`Bind`/`Execute`/`Sync`, and one to `Bind`/`Execute`/`Sync`.
fn replies() -> impl Strategy<Value = [Vec<Vec<u8>>; 2]> {
    (0usize..3)
        .prop_flat_map(|columns| {
            (
                Just(columns),
                vec(values(columns), 0..4),
                tag_text(),
                proptest::sample::select(&[b'I', b'T', b'E'][..]),
                vec(values(columns), 0..3),
                tag_text(),
                proptest::sample::select(&[b'I', b'T', b'E'][..]),
            )
        })
        .prop_map(|(columns, rows1, tag1, z1, rows2, tag2, z2)| {
            let mut first = vec![msg(b'1', &[]), msg(b't', &[0, 1, 0, 0, 0, 25])];
            first.push(match columns {
                0 => msg(b'n', &[]),
                n => row_description(n),
            });
            first.push(msg(b'2', &[]));
            first.extend(rows1.iter().map(|r| row(r)));
            first.push(msg(b'C', &cstr(tag1)));
            first.push(msg(b'Z', &[z1]));
            let mut second = vec![msg(b'2', &[])];
            second.extend(rows2.iter().map(|r| row(r)));
            second.push(msg(b'C', &cstr(tag2)));
            second.push(msg(b'Z', &[z2]));
            [first, second]
        })
}

#[derive(Debug, Clone)]
enum Change {
    Insert(prop::sample::Index, Vec<u8>),
    Replace(prop::sample::Index, Vec<u8>),
    Remove(prop::sample::Index),
}

#[derive(Debug, Clone)]
struct Case {
    /// The server's answer to each request, sent once the request's `Sync` has arrived.
    replies: [Vec<Vec<u8>>; 2],
    /// Whether the changes, pauses and cut went to the second reply. When they go to the first,
    /// the stream ends after it: a first reply that never ends (its `ReadyForQuery` removed, a
    /// length that lies) would otherwise leave the client waiting for it and the server for
    /// the second request.
    second: bool,
    /// Where the server pauses within the changed reply: the client reads partial messages.
    pauses: Vec<prop::sample::Index>,
    /// Where the stream ends within the changed reply.
    cut: Option<prop::sample::Index>,
}

impl Case {
    /// The replies the server sends, each in the pieces it writes them in.
    fn pieces(&self) -> Vec<Vec<Vec<u8>>> {
        let changed = usize::from(self.second);
        let mut script: Vec<u8> = self.replies[changed].concat();
        if let Some(at) = &self.cut {
            script.truncate(at.index(script.len() + 1));
        }
        let mut at: Vec<usize> = self
            .pauses
            .iter()
            .map(|i| i.index(script.len() + 1))
            .collect();
        at.sort_unstable();
        at.dedup();
        let mut pieces = Vec::new();
        let mut from = 0;
        for a in at.into_iter().chain([script.len()]) {
            pieces.push(script[from..a].to_vec());
            from = a;
        }
        match self.second {
            true => vec![vec![self.replies[0].concat()], pieces],
            false => vec![pieces],
        }
    }
}

fn case() -> impl Strategy<Value = Case> {
    let change = prop_oneof![
        (any::<prop::sample::Index>(), asynchronous()).prop_map(|(i, m)| Change::Insert(i, m)),
        (any::<prop::sample::Index>(), edge()).prop_map(|(i, m)| Change::Insert(i, m)),
        (any::<prop::sample::Index>(), edge()).prop_map(|(i, m)| Change::Replace(i, m)),
        any::<prop::sample::Index>().prop_map(Change::Remove),
    ];
    (
        replies(),
        any::<bool>(),
        vec(change, 0..4),
        vec(any::<prop::sample::Index>(), 0..4),
        proptest::option::weighted(0.15, any::<prop::sample::Index>()),
    )
        .prop_map(|(mut replies, second, changes, pauses, cut)| {
            let messages = &mut replies[usize::from(second)];
            for c in changes {
                match c {
                    Change::Insert(i, m) => messages.insert(i.index(messages.len() + 1), m),
                    Change::Replace(i, m) if !messages.is_empty() => {
                        let i = i.index(messages.len());
                        messages[i] = m;
                    }
                    Change::Remove(i) if !messages.is_empty() => {
                        messages.remove(i.index(messages.len()));
                    }
                    _ => {}
                }
            }
            Case {
                replies,
                second,
                pauses,
                cut,
            }
        })
}

/// Serves one connection: a clean startup, then each reply once a request's `Sync` has
/// arrived, in its pieces with a pause after each; then EOF.
async fn serve(replies: Vec<Vec<Vec<u8>>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let Ok((s, _)) = listener.accept().await else {
            return;
        };
        s.set_nodelay(true).unwrap();
        let (mut r, mut w) = s.into_split();
        let Ok(len) = r.read_u32().await else { return };
        let mut startup = vec![0u8; (len as usize).saturating_sub(4)];
        if r.read_exact(&mut startup).await.is_err() {
            return;
        }
        let (syncs, mut synced) = tokio::sync::mpsc::unbounded_channel();
        let read = tokio::spawn(async move {
            // Frontend messages, one at a time: each `Sync` lets the next reply go.
            while let (Ok(tag), Ok(len)) = (r.read_u8().await, r.read_u32().await) {
                let mut body = vec![0u8; (len as usize).saturating_sub(4)];
                if r.read_exact(&mut body).await.is_err() {
                    return;
                }
                if tag == b'S' {
                    let _ = syncs.send(());
                }
            }
        });
        let hello = [
            msg(b'R', &[0; 4]),
            msg(b'K', &[0, 0, 0, 1, 0, 0, 0, 2]),
            msg(b'Z', b"I"),
        ];
        if w.write_all(&hello.concat()).await.is_err() {
            return;
        }
        for pieces in replies {
            if synced.recv().await.is_none() {
                return;
            }
            for p in pieces {
                if w.write_all(&p).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        drop(w);
        let _ = read.await;
    });
    port
}

/// Everything a caller or the next request can see of how the reply was read.
#[derive(Debug, PartialEq)]
struct Seen {
    rows: Result<Vec<Vec<Option<Vec<u8>>>>, String>,
    affected: Result<u64, String>,
    status: crate::TransactionStatus,
    broken: bool,
    owed: usize,
    statements_discarded: bool,
    parameters: Vec<(String, String)>,
    notifications: usize,
}

async fn observe(pieces: Vec<Vec<Vec<u8>>>, general_only: bool) -> Seen {
    GENERAL_ONLY.set(general_only);
    let port = serve(pieces).await;
    let config = Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("diff")
        .ssl_mode(SslMode::Disable)
        .connect_timeout(Duration::from_secs(10));
    let mut c: Client = crate::connect_config(&config)
        .await
        .expect("the fake server's startup is clean");
    let sql = "SELECT $1::text";
    let rows = c.query(sql, &[&"x"]).await.map_or_else(
        |e| Err(e.to_string()),
        |rows| {
            Ok(rows
                .iter()
                .map(|r| {
                    (0..r.len())
                        .map(|i| r.get_raw(i).unwrap().map(<[u8]>::to_vec))
                        .collect()
                })
                .collect())
        },
    );
    let affected = c.execute(sql, &[&"x"]).await.map_err(|e| e.to_string());
    let mut parameters: Vec<_> = c.conn.parameters.clone().into_iter().collect();
    parameters.sort();
    Seen {
        rows,
        affected,
        status: c.transaction_status(),
        broken: c.is_broken(),
        owed: c.conn.owed.len(),
        statements_discarded: c.conn.statements_discarded,
        parameters,
        notifications: c.conn.notifications.len(),
    }
}

#[test]
fn the_fast_reply_reader_reads_every_reply_as_the_general_one_does() {
    let cases = std::env::var("SLIPSTREAM_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        rng_seed: RngSeed::Fixed(23),
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let fast_ok = std::cell::Cell::new(0);
    let result = runner.run(&case(), |case| {
        let run = |general_only| {
            rt.block_on(async {
                tokio::time::timeout(CASE_LIMIT, observe(case.pieces(), general_only)).await
            })
            .map_err(|_| {
                TestCaseError::fail(format!(
                    "the {} reader hung",
                    if general_only { "general" } else { "fast" }
                ))
            })
        };
        let general = run(true)?;
        let fast = run(false)?;
        if fast.rows.is_ok() && fast.affected.is_ok() {
            fast_ok.set(fast_ok.get() + 1);
        }
        if fast != general {
            return Err(TestCaseError::fail(format!(
                "fast path: {fast:#?}\ngeneral path: {general:#?}"
            )));
        }
        Ok(())
    });
    GENERAL_ONLY.set(false);
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator must reach whole, successful replies, not only broken ones.
    assert!(
        fast_ok.get() * 10 >= cases,
        "only {} of {cases} cases read both replies successfully",
        fast_ok.get()
    );
}
