//! The process out of file descriptors. A test binary of its own: it exhausts the descriptors
//! of the whole process, which would fail any test running beside it.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use slipstream_testkit::Cluster;

/// Held by each test while it runs: each fills the whole process's descriptor table, which
/// would fail the other's opens if they ran at once on the harness's threads.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `abort_handle` in a process out of descriptors fails, says the connection is unharmed
/// (`is_closed` false) and what to do, and the connection goes on. Before, the `dup`'s EMFILE
/// was an I/O error with `is_closed` true, so the documented reconnect pattern threw a good
/// connection away.
#[tokio::test(flavor = "current_thread")]
async fn an_abort_handle_refused_for_want_of_descriptors_leaves_the_connection_usable() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start().unwrap();
    let mut c = slipstream_pg::connect(&cluster.url()).await.unwrap();
    // A low soft limit, so filling the table takes a few hundred opens, not a million.
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 256.min(soft), hard).unwrap();
    let mut held = Vec::new();
    let open_error = loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) => break e,
        }
    };
    assert_eq!(
        open_error.raw_os_error(),
        Some(libc::EMFILE),
        "{open_error}"
    );

    let refused = c.abort_handle().map(|_| ());
    drop(held);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();

    let e = refused.expect_err("no descriptor was free to duplicate");
    assert!(
        !e.is_closed(),
        "a refused dup said the connection is lost: {e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("abort handle") && text.contains("open-file limit"),
        "the error names neither what failed nor what to do: {text}"
    );
    let rows = c.query("SELECT 1", &[]).await.unwrap();
    assert_eq!(rows[0].get::<_, i32>(0).unwrap(), 1);
    c.abort_handle()
        .expect("a handle once descriptors are free again");
}

/// A connect in a process out of descriptors names the process's limit, not the server: the
/// socket was never made, so "is the server running ... accepting connections?" sends the
/// reader to a server that is fine. libpq says "could not create socket: Too many open
/// files" and no such hint. Found through `slipstream bench -u 60` under `ulimit -n 40`:
/// "user 26 could not connect: ... Too many open files (os error 24); is the server running
/// on that host and accepting TCP/IP connections?".
///
/// Steps: the descriptor table filled to a soft limit of 256, then a TCP connect and a
/// Unix-socket connect to a running cluster.
#[tokio::test(flavor = "current_thread")]
async fn a_connect_refused_for_want_of_descriptors_names_the_limit_not_the_server() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = Cluster::start().unwrap();
    let tcp = cluster.url();
    let socket = format!(
        "host={} port={} user=postgres dbname=postgres",
        cluster.socket_dir().display(),
        cluster.port()
    );
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 256.min(soft), hard).unwrap();
    let mut held = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        held.push(f);
    }
    let by_tcp = slipstream_pg::connect(&tcp).await.map(|_| ());
    let by_socket = slipstream_pg::connect(&socket).await.map(|_| ());
    drop(held);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();

    for (how, got) in [("TCP", by_tcp), ("Unix socket", by_socket)] {
        let text = got
            .expect_err("connected with no descriptor free")
            .to_string();
        assert!(
            text.contains("ulimit -n") && !text.contains("is the server running"),
            "{how}: the error blames the server, not the process's open-file limit: {text}"
        );
    }
}
