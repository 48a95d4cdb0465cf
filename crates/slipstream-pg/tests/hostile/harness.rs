//! The hostile-server harness shared by the proptest fuzz target (`tests/hostile_fuzz.rs`) and
//! the cargo-fuzz target (`fuzz/fuzz_targets/server_bytes.rs`): a fake server on 127.0.0.1
//! that answers one connection with a script of raw bytes, the client calls it can be made to
//! run, and the properties every outcome must have.

use std::time::Duration;

use slipstream_pg::{Client, Config, SslMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// No case may take longer: the fake server always closes, so a case that waits this long is
/// a client that hangs.
pub const CASE_LIMIT: Duration = Duration::from_secs(30);
/// Given to the client, so that any error echoing it is caught.
pub const PASSWORD: &str = "fuzz-Pa55word-never-echoed";

/// What the client does once connected.
#[derive(Debug, Clone, Copy)]
pub enum Call {
    ConnectOnly,
    SimpleQuery,
    BatchExecute,
    Query,
    Execute,
    Prepare,
    Stream,
    CopyIn,
    CopyOut,
    Pipeline,
    Notification,
}

pub const CALLS: &[Call] = &[
    Call::ConnectOnly,
    Call::SimpleQuery,
    Call::BatchExecute,
    Call::Query,
    Call::Execute,
    Call::Prepare,
    Call::Stream,
    Call::CopyIn,
    Call::CopyOut,
    Call::Pipeline,
    Call::Notification,
];

/// Serves `script` to one connection: reads the startup packet, writes the script, closes its
/// sending side, and drains whatever the client writes until it leaves.
pub async fn serve(script: Vec<u8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let Ok((s, _)) = listener.accept().await else {
            return;
        };
        let (mut r, mut w) = s.into_split();
        let Ok(len) = r.read_u32().await else { return };
        let mut startup = vec![0u8; (len as usize).saturating_sub(4)];
        if r.read_exact(&mut startup).await.is_err() {
            return;
        }
        let drain = tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(1..) = r.read(&mut buf).await {}
        });
        let _ = w.write_all(&script).await;
        drop(w);
        let _ = drain.await;
    });
    port
}

pub async fn call(c: &mut Client, call: Call) -> Result<(), slipstream_pg::Error> {
    match call {
        Call::ConnectOnly => Ok(()),
        Call::SimpleQuery => c.simple_query("SELECT 1").await.map(drop),
        Call::BatchExecute => c.batch_execute("SELECT 1; SELECT 2").await,
        Call::Query => c.query("SELECT $1::text", &[&"x"]).await.map(drop),
        Call::Execute => c.execute("UPDATE t SET a = 1", &[]).await.map(drop),
        Call::Prepare => c.prepare("SELECT $1::int4").await.map(drop),
        Call::Stream => {
            let mut rows = c.query_stream("SELECT a FROM t", &[]).await?;
            while let Some(row) = rows.next().await? {
                let _ = row.get::<_, Option<&str>>(0);
            }
            Ok(())
        }
        Call::CopyIn => {
            let mut copy = c.copy_in("COPY t FROM STDIN").await?;
            copy.write(b"1\n2\n").await?;
            copy.finish().await.map(drop)
        }
        Call::CopyOut => {
            let mut out = c.copy_out("COPY t TO STDOUT").await?;
            while out.next().await?.is_some() {}
            Ok(())
        }
        Call::Pipeline => {
            let mut p = c.pipeline_with(
                slipstream_pg::PipelineOptions::new()
                    .mode(slipstream_pg::PipelineMode::ContinueOnError),
            );
            p.query("SELECT 1", &[]).await?;
            p.execute("SELECT 2", &[]).await?;
            p.query_typed("SELECT $1", &[(&1i32, slipstream_pg::types::Type::INT4)])
                .await?;
            for r in p.end().await {
                r?;
            }
            Ok(())
        }
        Call::Notification => c.wait_for_notification().await.map(drop),
    }
}

/// Runs `call` against a fake server that sends `script` (after reading the startup packet),
/// and checks what every outcome must satisfy. `Err` says which property broke; `Ok` is the
/// call's own result.
pub async fn exercise(
    script: Vec<u8>,
    which: Call,
) -> Result<Result<(), slipstream_pg::Error>, String> {
    let port = serve(script).await;
    let config = Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("fuzz")
        .password(PASSWORD)
        .ssl_mode(SslMode::Disable)
        .connect_timeout(Duration::from_secs(20));
    let outcome = tokio::time::timeout(CASE_LIMIT, async {
        let mut c = slipstream_pg::connect_config(&config).await?;
        let r = call(&mut c, which).await;
        // A failed call must leave the client able to say so again, not panic on reuse.
        if r.is_err() {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.simple_query("SELECT 1")).await;
        }
        r
    })
    .await
    .map_err(|_| format!("the call hung past {CASE_LIMIT:?}"))?;
    if let Err(e) = &outcome {
        let text = e.to_string();
        if text.contains("bug in slipstream-pg") {
            return Err(format!("server input was reported as a client bug: {text}"));
        }
        if text.contains(PASSWORD) {
            return Err(format!("the password leaked into an error: {text}"));
        }
        if text.trim().len() < 10 {
            return Err(format!("an error that names nothing: {text:?}"));
        }
    }
    Ok(outcome)
}
