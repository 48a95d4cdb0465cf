//! The process out of file descriptors. A test binary of its own: it exhausts the descriptors
//! of the whole process, which would fail any test running beside it.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use slipstream_testkit::Cluster;

/// `abort_handle` in a process out of descriptors fails, says the connection is unharmed
/// (`is_closed` false) and what to do, and the connection goes on. Before, the `dup`'s EMFILE
/// was an I/O error with `is_closed` true, so the documented reconnect pattern threw a good
/// connection away.
#[tokio::test(flavor = "current_thread")]
async fn an_abort_handle_refused_for_want_of_descriptors_leaves_the_connection_usable() {
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
