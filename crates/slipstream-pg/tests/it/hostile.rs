//! Hostile servers: a fake server on 127.0.0.1 speaks raw bytes (truncated, garbage, oversized
//! or out-of-order frames) in each phase of a connection (startup, authentication, query, COPY,
//! pipeline). Every case must end in an error that names the cause, within the caller's
//! timeout, without a panic; a connection that saw a protocol violation is closed.
//!
//! The byte builders below write backend messages by hand on purpose: the point is to send
//! what no encoder would.

use std::time::Duration;

use slipstream_pg::{Client, Config, ErrorKind, Output, SslMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fake server does, in order.
#[derive(Clone)]
enum Step {
    /// Reads one untagged startup-phase packet (startup message or SSLRequest).
    Startup,
    /// Reads whatever the client sent next (at least one byte).
    Recv,
    /// Reads the client's SASLInitialResponse and answers with a well-formed server-first
    /// message that extends the client's nonce (so the exchange gets to the final message).
    ScramFirst,
    /// Writes these bytes.
    Send(Vec<u8>),
    /// Reads until the client has sent this many `Sync` messages (so that closing then does
    /// not reset the connection under data it has not read).
    RecvSyncs(usize),
    /// Writes these bytes one per write, with Nagle off: each its own segment.
    Trickle(Vec<u8>),
    /// Waits this long.
    Pause(Duration),
    /// Ends the connection with a reset (`SO_LINGER` 0), as a backend that exits with input
    /// unread does: the client's next write fails.
    Reset,
}

/// The caller's bound on each call: every case must end well before it.
const LIMIT: Duration = Duration::from_secs(20);
const PASSWORD: &str = "s3cret-Pa55word";

/// Starts a fake server that runs `script` on one connection, then holds the connection open
/// (`hold_open`) or closes it. Returns its port.
async fn fake(script: Vec<Step>, hold_open: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        for step in script {
            if run(&mut s, step).await.is_err() {
                return;
            }
        }
        if hold_open {
            // A client that waits for more than the script sent must be bounded by its own
            // timeout; the socket stays open until the client goes.
            let mut buf = [0u8; 4096];
            while let Ok(1..) = s.read(&mut buf).await {}
        }
    });
    port
}

async fn run(s: &mut TcpStream, step: Step) -> std::io::Result<()> {
    match step {
        Step::RecvSyncs(n) => {
            const SYNC: [u8; 5] = [b'S', 0, 0, 0, 4];
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while seen.windows(5).filter(|w| *w == SYNC).count() < n {
                let got = s.read(&mut buf).await?;
                if got == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                seen.extend_from_slice(&buf[..got]);
            }
        }
        Step::Trickle(bytes) => {
            s.set_nodelay(true)?;
            for b in bytes {
                s.write_all(&[b]).await?;
            }
        }
        Step::Startup => {
            let len = s.read_u32().await? as usize;
            let mut body = vec![0u8; len.saturating_sub(4)];
            s.read_exact(&mut body).await?;
        }
        Step::Recv => {
            let mut buf = [0u8; 4096];
            if s.read(&mut buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Step::ScramFirst => {
            let tag = s.read_u8().await?;
            assert_eq!(tag, b'p', "SASLInitialResponse");
            let len = s.read_u32().await? as usize;
            let mut body = vec![0u8; len - 4];
            s.read_exact(&mut body).await?;
            let text = String::from_utf8_lossy(&body).into_owned();
            // The nonce is the attribute after the empty user name ("n,,n=,r=<nonce>"), and
            // may itself hold "r=" (24 of 93 printable characters, never ','): split at the
            // first ",r=". Splitting at every "r=" cut the nonce short in about 1 of 370
            // connections (23 places, 1/93 each for 'r' and '='), and the test failed.
            let (_, nonce) = text.split_once(",r=").expect("client nonce");
            let first = format!("r={nonce}srv,s=c2FsdHNhbHQ=,i=4096");
            s.write_all(&auth(11, first.as_bytes())).await?;
        }
        Step::Send(bytes) => s.write_all(&bytes).await?,
        Step::Pause(d) => tokio::time::sleep(d).await,
        Step::Reset => {
            s.set_zero_linger()?;
            // The caller's stream is dropped when the script ends; stop here so it is.
            return Err(std::io::ErrorKind::ConnectionReset.into());
        }
    }
    Ok(())
}

// ---- backend messages, byte by byte -------------------------------------------------------

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn auth(code: u32, rest: &[u8]) -> Vec<u8> {
    let mut body = code.to_be_bytes().to_vec();
    body.extend_from_slice(rest);
    msg(b'R', &body)
}

fn auth_ok() -> Vec<u8> {
    auth(0, &[])
}

fn ready() -> Vec<u8> {
    msg(b'Z', b"I")
}

/// AuthenticationOk, BackendKeyData, ReadyForQuery: a connection a client accepts.
fn hello() -> Vec<u8> {
    [auth_ok(), msg(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]), ready()].concat()
}

fn row_description(columns: &[&str]) -> Vec<u8> {
    let mut body = (columns.len() as u16).to_be_bytes().to_vec();
    for name in columns {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // table oid, column number
        body.extend_from_slice(&25u32.to_be_bytes()); // text
        body.extend_from_slice(&(-1i16).to_be_bytes());
        body.extend_from_slice(&(-1i32).to_be_bytes());
        body.extend_from_slice(&0u16.to_be_bytes()); // text format
    }
    msg(b'T', &body)
}

fn data_row(values: &[&[u8]]) -> Vec<u8> {
    let mut body = (values.len() as u16).to_be_bytes().to_vec();
    for v in values {
        body.extend_from_slice(&(v.len() as i32).to_be_bytes());
        body.extend_from_slice(v);
    }
    msg(b'D', &body)
}

fn command_complete(tag: &str) -> Vec<u8> {
    msg(b'C', format!("{tag}\0").as_bytes())
}

/// Parse/Describe/Bind answers for a one-column text query, without the rows.
fn described(columns: &[&str]) -> Vec<u8> {
    [
        msg(b'1', &[]),
        msg(b't', &[0, 0]),
        row_description(columns),
        msg(b'2', &[]),
    ]
    .concat()
}

fn config(port: u16) -> Config {
    Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("u")
        .password(PASSWORD)
        .ssl_mode(SslMode::Disable)
        .connect_timeout(Duration::from_secs(10))
}

// ---- what each case checks ---------------------------------------------------------------

/// The error of a call that must fail: within [`LIMIT`], naming its cause with every one of
/// `words`, never echoing the password.
#[track_caller]
fn check(
    what: &str,
    r: Result<Result<impl std::fmt::Debug, slipstream_pg::Error>, tokio::time::error::Elapsed>,
    kind: ErrorKind,
    words: &[&str],
) -> slipstream_pg::Error {
    let err = r
        .unwrap_or_else(|_| panic!("{what}: hung past {LIMIT:?}"))
        .expect_err(what);
    let text = err.to_string();
    assert_eq!(err.kind(), kind, "{what}: {text}");
    for w in words {
        assert!(text.contains(w), "{what}: `{w}` missing from: {text}");
    }
    assert!(
        !text.contains(PASSWORD),
        "{what}: the password leaked: {text}"
    );
    err
}

async fn connect_err(script: Vec<Step>, kind: ErrorKind, words: &[&str]) {
    let port = fake(script, true).await;
    let r = tokio::time::timeout(LIMIT, slipstream_pg::connect_config(&config(port))).await;
    check("connect", r.map(|r| r.map(drop)), kind, words);
}

/// A connected client whose server then runs `after` (which starts by reading its request).
async fn connected(after: Vec<Step>, hold_open: bool) -> Client {
    let mut script = vec![Step::Startup, Step::Send(hello())];
    script.extend(after);
    let port = fake(script, hold_open).await;
    slipstream_pg::connect_config(&config(port)).await.unwrap()
}

/// After a protocol violation the connection is closed, and says so on the next call.
async fn closed_after(c: &mut Client) {
    assert!(
        c.is_broken(),
        "a connection that saw a bad message is closed"
    );
    let err = tokio::time::timeout(LIMIT, c.simple_query("SELECT 1"))
        .await
        .expect("no hang")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    assert!(err.to_string().contains("open a new connection"), "{err}");
}

// ---- startup ------------------------------------------------------------------------------

#[tokio::test]
async fn a_bad_ssl_answer_byte_is_named() {
    let port = fake(vec![Step::Startup, Step::Send(b"X".to_vec())], true).await;
    let r = tokio::time::timeout(
        LIMIT,
        slipstream_pg::connect_config(&config(port).ssl_mode(SslMode::Require)),
    )
    .await;
    check(
        "ssl",
        r.map(|r| r.map(drop)),
        ErrorKind::Protocol,
        &["SSL request", "0x58"],
    );
}

#[tokio::test]
async fn a_frame_cut_before_authentication_ok_names_the_cut() {
    // Nine bytes promised, six sent, then the server hangs up.
    let mut cut = auth_ok();
    cut.truncate(6);
    let port = fake(vec![Step::Startup, Step::Send(cut)], false).await;
    let r = tokio::time::timeout(LIMIT, slipstream_pg::connect_config(&config(port))).await;
    check(
        "cut",
        r.map(|r| r.map(drop)),
        ErrorKind::Io,
        &[
            "closed the connection",
            "in the middle of a message",
            "Authentication 'R', 6 of 9 bytes",
        ],
    );
    // A server that leaves instead of answering at all.
    let port = fake(vec![Step::Startup], false).await;
    let r = tokio::time::timeout(LIMIT, slipstream_pg::connect_config(&config(port))).await;
    check(
        "close",
        r.map(|r| r.map(drop)),
        ErrorKind::Io,
        &["closed the connection"],
    );
}

#[tokio::test]
async fn an_oversized_frame_before_authentication_is_refused_by_its_header() {
    connect_err(
        vec![
            Step::Startup,
            Step::Send(vec![b'R', 0x00, 0x10, 0x00, 0x00]),
        ],
        ErrorKind::Protocol,
        &["1048577 bytes", "'R'", "65536", "before authentication"],
    )
    .await;
}

#[tokio::test]
async fn garbage_after_authentication_ok_is_a_protocol_error() {
    connect_err(
        vec![
            Step::Startup,
            Step::Send([auth_ok(), msg(b'!', b"??")].concat()),
        ],
        ErrorKind::Protocol,
        &["invalid message (unknown type '!'", "PostgreSQL server"],
    )
    .await;
}

#[tokio::test]
async fn a_server_that_closes_after_authentication_ok_without_ready_for_query() {
    let mut script = vec![Step::Startup, Step::Send(auth_ok())];
    script.push(Step::Send(msg(b'S', b"server_version\x0015\0")));
    let port = fake(script, false).await;
    let r = tokio::time::timeout(LIMIT, slipstream_pg::connect_config(&config(port))).await;
    check(
        "close",
        r.map(|r| r.map(drop)),
        ErrorKind::Io,
        &["closed the connection"],
    );
}

#[tokio::test]
async fn malformed_asynchronous_messages_during_startup() {
    // ParameterStatus without its terminating NUL.
    connect_err(
        vec![
            Step::Startup,
            Step::Send([auth_ok(), msg(b'S', b"TimeZone\0UTC")].concat()),
        ],
        ErrorKind::Protocol,
        &["invalid message (ParameterStatus 'S'"],
    )
    .await;
    // A NoticeResponse whose field runs off the end.
    connect_err(
        vec![
            Step::Startup,
            Step::Send([auth_ok(), msg(b'N', b"SNOTICE")].concat()),
        ],
        ErrorKind::Protocol,
        &["invalid message (NoticeResponse 'N'"],
    )
    .await;
    // An ErrorResponse without SQLSTATE or message.
    connect_err(
        vec![
            Step::Startup,
            Step::Send([auth_ok(), msg(b'E', b"SFATAL\0\0")].concat()),
        ],
        ErrorKind::Protocol,
        &["SQLSTATE"],
    )
    .await;
}

// ---- authentication -------------------------------------------------------------------------

#[tokio::test]
async fn an_unknown_authentication_method_is_named() {
    connect_err(
        vec![Step::Startup, Step::Send(auth(99, &[]))],
        ErrorKind::Protocol,
        &["invalid message (Authentication 'R'", "99"],
    )
    .await;
}

#[tokio::test]
async fn a_truncated_md5_salt_is_a_protocol_error() {
    connect_err(
        vec![Step::Startup, Step::Send(auth(5, &[1, 2]))],
        ErrorKind::Protocol,
        &["invalid message (Authentication 'R'"],
    )
    .await;
}

#[tokio::test]
async fn sasl_without_scram_is_refused() {
    connect_err(
        vec![Step::Startup, Step::Send(auth(10, b"OTHER-MECH\0\0"))],
        ErrorKind::Authentication,
        &["SCRAM-SHA-256"],
    )
    .await;
}

#[tokio::test]
async fn a_garbage_scram_server_first_message_is_refused() {
    connect_err(
        vec![
            Step::Startup,
            Step::Send(auth(10, b"SCRAM-SHA-256\0\0")),
            Step::Recv,
            Step::Send(auth(11, b"\xff\xfe not scram")),
        ],
        ErrorKind::Authentication,
        &["invalid SCRAM server message"],
    )
    .await;
    // Well-formed, but a nonce that does not extend ours (a replayed or forged exchange).
    connect_err(
        vec![
            Step::Startup,
            Step::Send(auth(10, b"SCRAM-SHA-256\0\0")),
            Step::Recv,
            Step::Send(auth(11, b"r=forged,s=c2FsdA==,i=4096")),
        ],
        ErrorKind::Authentication,
        &["invalid SCRAM server message", "nonce"],
    )
    .await;
}

#[tokio::test]
async fn a_bad_scram_server_final_message_is_refused() {
    for final_message in [&b"v=AAAA"[..], b"garbage", b"e=invalid-proof"] {
        connect_err(
            vec![
                Step::Startup,
                Step::Send(auth(10, b"SCRAM-SHA-256\0\0")),
                Step::ScramFirst,
                Step::Recv,
                Step::Send(auth(12, final_message)),
            ],
            ErrorKind::Authentication,
            &["the server failed to prove it knows the password"],
        )
        .await;
    }
}

#[tokio::test]
async fn authentication_ok_in_the_middle_of_scram_is_refused() {
    // A server that skips the proof of knowing the password must not be trusted.
    connect_err(
        vec![
            Step::Startup,
            Step::Send(auth(10, b"SCRAM-SHA-256\0\0")),
            Step::Recv,
            Step::Send(hello()),
        ],
        ErrorKind::Protocol,
        &["unexpected", "SCRAM"],
    )
    .await;
}

// ---- query --------------------------------------------------------------------------------

#[tokio::test]
async fn a_data_row_with_the_wrong_column_count_is_named() {
    for simple in [false, true] {
        let reply = if simple {
            [row_description(&["a", "b"]), data_row(&[b"1", b"2", b"3"])].concat()
        } else {
            [described(&["a", "b"]), data_row(&[b"1", b"2", b"3"])].concat()
        };
        let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
        let r = if simple {
            tokio::time::timeout(LIMIT, c.simple_query("SELECT a, b"))
                .await
                .map(|r| r.map(drop))
        } else {
            tokio::time::timeout(LIMIT, c.query("SELECT a, b", &[]))
                .await
                .map(|r| r.map(drop))
        };
        check(
            "row",
            r,
            ErrorKind::Protocol,
            &[
                "DataRow of 3 columns",
                "RowDescription of 2",
                "connection is closed",
            ],
        );
        closed_after(&mut c).await;
    }
}

#[tokio::test]
async fn a_data_row_value_past_the_end_of_its_frame_is_named() {
    // One value that claims 1000 bytes in a frame of 7.
    let bad_row = msg(b'D', &[0, 1, 0, 0, 0x03, 0xe8, b'x']);
    for simple in [false, true] {
        let reply = if simple {
            [row_description(&["a"]), bad_row.clone()].concat()
        } else {
            [described(&["a"]), bad_row.clone()].concat()
        };
        let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
        let r = if simple {
            tokio::time::timeout(LIMIT, c.simple_query("SELECT a"))
                .await
                .map(|r| r.map(drop))
        } else {
            tokio::time::timeout(LIMIT, c.query("SELECT a", &[]))
                .await
                .map(|r| r.map(drop))
        };
        check(
            "value",
            r,
            ErrorKind::Protocol,
            &["malformed DataRow", "connection is closed"],
        );
        closed_after(&mut c).await;
    }
}

#[tokio::test]
async fn a_bad_row_description_is_named() {
    // Two columns announced, one described.
    let mut bad = row_description(&["a"]);
    bad[6] = 2;
    for simple in [false, true] {
        let reply = if simple {
            bad.clone()
        } else {
            [msg(b'1', &[]), msg(b't', &[0, 0]), bad.clone()].concat()
        };
        let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
        let r = if simple {
            tokio::time::timeout(LIMIT, c.simple_query("SELECT a"))
                .await
                .map(|r| r.map(drop))
        } else {
            tokio::time::timeout(LIMIT, c.query("SELECT a", &[]))
                .await
                .map(|r| r.map(drop))
        };
        check(
            "description",
            r,
            ErrorKind::Protocol,
            &[
                "invalid message (RowDescription 'T'",
                "connection is closed",
            ],
        );
        closed_after(&mut c).await;
    }
}

#[tokio::test]
async fn a_malformed_error_response_in_a_query_closes_the_connection() {
    let reply = [msg(b'1', &[]), msg(b'E', b"SERROR\0\0")].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, c.execute("SELECT 1", &[])).await;
    check("error", r, ErrorKind::Protocol, &["SQLSTATE"]);
    closed_after(&mut c).await;
}

#[tokio::test]
async fn a_reply_without_ready_for_query_then_close_is_an_error() {
    let reply = [
        described(&["a"]),
        data_row(&[b"1"]),
        command_complete("SELECT 1"),
    ]
    .concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], false).await;
    let r = tokio::time::timeout(LIMIT, c.query("SELECT a", &[])).await;
    check("close", r, ErrorKind::Io, &["closed the connection"]);
    assert!(c.is_broken());
}

#[tokio::test]
async fn an_oversized_frame_after_startup_is_refused_by_its_header() {
    // A DataRow claiming 2 GiB: over the 1 GiB cap, refused before a byte of it is buffered.
    let reply = [described(&["a"]), vec![b'D', 0x7f, 0xff, 0xff, 0xff, 0, 1]].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, c.query("SELECT a", &[])).await;
    check(
        "oversized",
        r,
        ErrorKind::Protocol,
        &["2147483648 bytes", "'D'", "1073741824"],
    );
    closed_after(&mut c).await;
}

#[tokio::test]
async fn a_big_claimed_frame_cut_short_is_an_error() {
    // Claims 512 MiB (under the cap), sends a few bytes, hangs up.
    let reply = [described(&["a"]), vec![b'D', 0x20, 0, 0, 0, 0, 1, 0, 0]].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], false).await;
    let r = tokio::time::timeout(LIMIT, c.query("SELECT a", &[])).await;
    check(
        "cut",
        r,
        ErrorKind::Io,
        &[
            "in the middle of a message",
            "DataRow 'D', 9 of 536870913 bytes",
        ],
    );
}

#[tokio::test]
async fn a_message_that_does_not_belong_in_a_reply_is_named() {
    let reply = [msg(b'1', &[]), msg(b'K', &[0, 0, 0, 1, 0, 0, 0, 2])].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, c.execute("SELECT 1", &[])).await;
    check(
        "unexpected",
        r,
        ErrorKind::Protocol,
        &["unexpected BackendKeyData"],
    );
    closed_after(&mut c).await;
}

// ---- COPY ---------------------------------------------------------------------------------

fn copy_response(tag: u8) -> Vec<u8> {
    msg(tag, &[0, 0, 1, 0, 0])
}

#[tokio::test]
async fn copy_in_response_then_garbage() {
    let reply = [copy_response(b'G'), b"\xde\xad\xbe\xef garbage".to_vec()].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, async {
        let mut copy = c.copy_in("COPY t FROM STDIN").await?;
        copy.write(b"1\n").await?;
        copy.finish().await
    })
    .await;
    check("copy in", r, ErrorKind::Protocol, &["PostgreSQL server"]);
    closed_after(&mut c).await;
}

#[tokio::test]
async fn a_truncated_copy_in_response_is_named() {
    // Says 3 columns, describes one: the server would then wait for data in a shape we
    // cannot know.
    let reply = msg(b'G', &[0, 0, 3, 0, 0]);
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, async {
        let copy = c.copy_in("COPY t FROM STDIN").await?;
        copy.finish().await
    })
    .await;
    check(
        "copy in",
        r,
        ErrorKind::Protocol,
        &["invalid message (CopyInResponse 'G'"],
    );
    closed_after(&mut c).await;
}

#[tokio::test]
async fn copy_out_data_then_close() {
    let reply = [copy_response(b'H'), msg(b'd', b"1\n"), msg(b'd', b"2\n")].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], false).await;
    let r = tokio::time::timeout(LIMIT, async {
        let mut out = c.copy_out("COPY t TO STDOUT").await?;
        let mut n = 0;
        while let Some(chunk) = out.next().await? {
            n += chunk.len();
        }
        Ok::<_, slipstream_pg::Error>(n)
    })
    .await;
    check("copy out", r, ErrorKind::Io, &["closed the connection"]);
    assert!(c.is_broken());
}

#[tokio::test]
async fn copy_out_then_garbage() {
    let reply = [
        copy_response(b'H'),
        msg(b'd', b"1\n"),
        vec![b'd', 0xff, 0xff, 0xff, 0xff],
    ]
    .concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, async {
        let mut out = c.copy_out("COPY t TO STDOUT").await?;
        while out.next().await?.is_some() {}
        Ok::<_, slipstream_pg::Error>(())
    })
    .await;
    check("copy out", r, ErrorKind::Protocol, &["'d'", "more than"]);
    closed_after(&mut c).await;
}

// ---- pipeline -----------------------------------------------------------------------------

#[tokio::test]
async fn a_connection_closed_mid_pipeline_fails_every_operation_in_flight() {
    // The first operation's reply arrives whole, the second's is cut, the third never comes.
    let first = [
        described(&["a"]),
        data_row(&[b"1"]),
        command_complete("SELECT 1"),
        ready(),
    ]
    .concat();
    let second = [msg(b'1', &[]), msg(b't', &[0, 0])].concat();
    let mut c = connected(
        vec![Step::Recv, Step::Send([first, second].concat())],
        false,
    )
    .await;
    let results = tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(crate::continue_on_error());
        p.query("SELECT 1", &[]).await.unwrap();
        p.query("SELECT 2", &[]).await.unwrap();
        p.query("SELECT 3", &[]).await.unwrap();
        p.end().await
    })
    .await
    .expect("the pipeline ends instead of hanging");
    assert_eq!(results.len(), 3);
    match &results[0] {
        Ok(Output::Rows(rows)) => assert_eq!(rows[0].get::<_, &str>(0).unwrap(), "1"),
        other => panic!("the whole first reply is a result: {other:?}"),
    }
    for (i, r) in results.iter().enumerate().skip(1) {
        let err = r
            .as_ref()
            .expect_err("an operation without its reply fails");
        assert!(err.is_closed(), "operation {i}: {err}");
        assert!(
            err.to_string().contains("closed the connection"),
            "operation {i}: {err}"
        );
    }
    assert!(c.is_broken());
}

#[tokio::test]
async fn replies_before_a_reset_are_results_though_the_next_write_fails() {
    // The server answers the first two operations, ends with a FATAL error and resets the
    // connection (a backend that exits, as on `pg_terminate_backend` or a COPY in a pipeline).
    // The client writes a third operation before it reads: that write fails, and the two
    // replies in its receive buffer must still be results, not "did not complete": those
    // operations ran, and a caller told otherwise may run a write twice.
    let fatal = msg(b'E', b"SFATAL\0C57P01\0Mterminating connection\0\0");
    let replies = [select_reply("0"), select_reply("1"), fatal].concat();
    let mut c = connected(
        vec![
            Step::RecvSyncs(2),
            Step::Pause(Duration::from_secs(1)),
            Step::Send(replies),
            Step::Reset,
        ],
        false,
    )
    .await;
    let results = tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(crate::continue_on_error());
        p.query("SELECT a", &[]).await.unwrap();
        let second = p.query("SELECT a", &[]).await.unwrap();
        // Sent; no reply yet (the server pauses), so nothing is read.
        let early = tokio::time::timeout(Duration::from_millis(50), p.process(&second)).await;
        assert!(
            early.is_err(),
            "answered before the server's pause: {early:?}"
        );
        // The replies and the reset arrive while nobody reads.
        tokio::time::sleep(Duration::from_secs(2)).await;
        p.query("SELECT a", &[]).await.unwrap();
        p.end().await
    })
    .await
    .expect("the pipeline ends instead of hanging");
    assert_eq!(results.len(), 3);
    for (i, r) in results.iter().take(2).enumerate() {
        match r {
            Ok(Output::Rows(rows)) => {
                assert_eq!(rows[0].get::<_, &str>(0).unwrap(), i.to_string())
            }
            other => panic!("operation {i} was answered before the reset: {other:?}"),
        }
    }
    let err = results[2].as_ref().expect_err("never sent");
    assert!(err.is_closed(), "{err}");
    assert!(err.to_string().contains("terminating connection"), "{err}");
    // Its write failed, so it cannot have run, and it says so (a retry is safe).
    assert!(err.to_string().contains("was not sent"), "{err}");
    closed_after(&mut c).await;
}

#[tokio::test]
async fn garbage_mid_pipeline_fails_every_operation_in_flight() {
    let first = [described(&["a"]), data_row(&[b"1", b"2"])].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(first)], true).await;
    let results = tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(crate::continue_on_error());
        p.query("SELECT 1", &[]).await.unwrap();
        p.query("SELECT 2", &[]).await.unwrap();
        p.end().await
    })
    .await
    .expect("the pipeline ends instead of hanging");
    assert_eq!(results.len(), 2);
    let err = results[0].as_ref().expect_err("bad row");
    assert!(err.is_closed(), "{err}");
    assert!(err.to_string().contains("DataRow of 2 columns"), "{err}");
    let err = results[1].as_ref().expect_err("never answered");
    assert!(err.is_closed(), "{err}");
    closed_after(&mut c).await;
}

#[tokio::test]
async fn a_row_longer_than_the_trusted_length_still_arrives_whole() {
    // 40 MiB: past the 16 MiB taken on trust, so the read buffer grows as the bytes arrive.
    let value: Vec<u8> = (0..40u32 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    let reply = [
        described(&["a"]),
        data_row(&[&value]),
        command_complete("SELECT 1"),
        ready(),
    ]
    .concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let rows = tokio::time::timeout(LIMIT, c.query("SELECT a", &[]))
        .await
        .expect("no hang")
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].get::<_, &str>(0).unwrap().as_bytes() == value);
    assert!(!c.is_broken());
}

#[tokio::test]
async fn a_ready_for_query_with_an_unknown_transaction_status_is_refused() {
    // Read as idle, it would let a pool lend a connection inside a transaction.
    connect_err(
        vec![
            Step::Startup,
            Step::Send([auth_ok(), msg(b'Z', b"X")].concat()),
        ],
        ErrorKind::Protocol,
        &["ReadyForQuery 'Z'", "transaction status 'X'"],
    )
    .await;
    let reply = [msg(b'1', &[]), msg(b'I', &[]), msg(b'Z', b"?")].concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, c.execute("", &[])).await;
    check(
        "status",
        r,
        ErrorKind::Protocol,
        &["transaction status '?'"],
    );
    closed_after(&mut c).await;
}

#[tokio::test]
async fn a_server_that_invents_parameters_without_end_is_cut_off() {
    let flood: Vec<u8> = (0..5000)
        .flat_map(|i| msg(b'S', format!("p{i}\0v\0").as_bytes()))
        .collect();
    connect_err(
        vec![Step::Startup, Step::Send([auth_ok(), flood].concat())],
        ErrorKind::Protocol,
        &["more than 1024 distinct parameters"],
    )
    .await;
}

#[tokio::test]
async fn garbage_instead_of_a_tls_handshake_is_a_tls_error() {
    let port = fake(
        vec![
            Step::Startup,
            Step::Send(b"SHTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
        ],
        true,
    )
    .await;
    let r = tokio::time::timeout(
        LIMIT,
        slipstream_pg::connect_config(&config(port).ssl_mode(SslMode::Require)),
    )
    .await;
    check(
        "tls",
        r.map(|r| r.map(drop)),
        ErrorKind::Tls,
        &["TLS handshake failed"],
    );
}

#[tokio::test]
async fn a_bad_row_in_a_row_stream_ends_the_stream_with_a_named_error() {
    let reply = [
        described(&["a"]),
        data_row(&[b"1"]),
        data_row(&[b"2", b"3"]),
    ]
    .concat();
    let mut c = connected(vec![Step::Recv, Step::Send(reply)], true).await;
    let r = tokio::time::timeout(LIMIT, async {
        let mut rows = c.query_stream("SELECT a FROM t", &[]).await?;
        let mut n = 0;
        while rows.next().await?.is_some() {
            n += 1;
        }
        Ok::<_, slipstream_pg::Error>(n)
    })
    .await;
    check(
        "stream",
        r,
        ErrorKind::Protocol,
        &[
            "DataRow of 2 columns for a RowDescription of 1",
            "connection is closed",
        ],
    );
    closed_after(&mut c).await;
}

// ---- continue-on-error bulk reads (the receive low-water mark) ---------------------------

/// Operations in the batches below: enough that the reader's lower bound of owed reply bytes
/// is far above the smallest one that raises the socket's low-water mark.
const MANY: usize = 300;

/// The whole reply to one pipelined `SELECT` of SQL text (Parse, Bind, Describe, Execute,
/// Sync) returning `value`.
fn select_reply(value: &str) -> Vec<u8> {
    [
        msg(b'1', &[]),
        msg(b'2', &[]),
        row_description(&["a"]),
        data_row(&[value.as_bytes()]),
        command_complete("SELECT 1"),
        ready(),
    ]
    .concat()
}

async fn many_selects(c: &mut Client) -> Vec<Result<Output, slipstream_pg::Error>> {
    let options =
        slipstream_pg::PipelineOptions::new().mode(slipstream_pg::PipelineMode::ContinueOnError);
    tokio::time::timeout(LIMIT, async {
        let mut p = c.pipeline_with(options);
        for _ in 0..MANY {
            p.query("SELECT a", &[]).await.unwrap();
        }
        p.end().await
    })
    .await
    .expect("the pipeline ends instead of hanging")
}

#[tokio::test]
async fn replies_arriving_byte_by_byte_are_all_read() {
    let replies: Vec<u8> = (0..MANY)
        .flat_map(|i| select_reply(&i.to_string()))
        .collect();
    let mut c = connected(vec![Step::RecvSyncs(MANY), Step::Trickle(replies)], true).await;
    let results = many_selects(&mut c).await;
    for (i, r) in results.into_iter().enumerate() {
        let Ok(Output::Rows(rows)) = r else {
            panic!("operation {i}: {r:?}");
        };
        assert_eq!(rows[0].get::<_, &str>(0).unwrap(), i.to_string());
    }
    assert!(!c.is_broken());
}

#[tokio::test]
async fn the_smallest_legal_replies_are_all_read() {
    // Each operation fails at Parse: an ErrorResponse with only the fields the protocol
    // requires, then ReadyForQuery. Far smaller than a row, and the server then waits: a
    // bound above these bytes would wait with it.
    let error = msg(b'E', b"SERROR\0C42601\0Mx\0\0");
    let replies: Vec<u8> = (0..MANY)
        .flat_map(|_| [error.clone(), ready()].concat())
        .collect();
    let mut c = connected(vec![Step::RecvSyncs(MANY), Step::Send(replies)], true).await;
    let results = many_selects(&mut c).await;
    for (i, r) in results.into_iter().enumerate() {
        let err = r.expect_err("each operation failed");
        assert_eq!(err.kind(), ErrorKind::Db, "operation {i}: {err}");
    }
    assert!(!c.is_broken());
}

#[tokio::test]
async fn fewer_bytes_than_the_bound_then_close_fails_the_rest() {
    // One whole reply and the start of the next, far fewer bytes than the reader's bound for
    // the batch, then the server goes: the close must wake the reader whatever it waits for.
    let sent = [select_reply("0"), msg(b'1', &[])[..3].to_vec()].concat();
    let mut c = connected(vec![Step::RecvSyncs(MANY), Step::Send(sent)], false).await;
    let results = many_selects(&mut c).await;
    assert_eq!(results.len(), MANY);
    assert!(
        matches!(&results[0], Ok(Output::Rows(_))),
        "{:?}",
        results[0]
    );
    for (i, r) in results.iter().enumerate().skip(1) {
        let err = r
            .as_ref()
            .expect_err("an operation without its reply fails");
        assert!(err.is_closed(), "operation {i}: {err}");
        assert!(
            err.to_string().contains("closed the connection"),
            "operation {i}: {err}"
        );
    }
    closed_after(&mut c).await;
}
