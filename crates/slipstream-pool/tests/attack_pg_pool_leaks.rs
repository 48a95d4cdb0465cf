//! Attacks on `PgPool`'s leak warning and its gauges against a real server (session 43,
//! helper 46). docs/pool.md, "Metrics and leak warnings": with `leak_warning(t)`, a connection
//! lent for longer than `t` is reported once "with the backtrace of the borrow".

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slipstream_pool::{Config, PgPool, Role};
use slipstream_testkit::Cluster;

mod common;

/// A `tracing` writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The borrow whose site the warning must name: a blocking borrow from a plain thread.
#[inline(never)]
fn borrow_from_a_thread_h46(pool: &PgPool) -> slipstream_pool::PgPooled {
    pool.get_blocking(Role::Primary).unwrap()
}

/// Promise: the leak warning gives "the backtrace of the borrow" (docs/pool.md), for every
/// borrow call (`PgPool::get_blocking` is one). Steps: a one-connection `PgPool` with a 50 ms
/// `leak_warning`; the test holds the connection, so a plain thread's `get_blocking` must wait
/// (its slow path); the connection is then returned, handed to the thread, which holds it past
/// the threshold. The warning must name the thread's borrow function.
///
/// Before the fix: `get_blocking`'s wait runs as an async borrow spawned on the pool's runtime,
/// and the lend captured the backtrace there: the warning showed only tokio's worker frames
/// (`tokio::runtime::task::...`), nothing of the caller's thread or function.
// One thread: the pools' tasks run where the subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn a_blocking_borrow_that_waited_is_reported_with_the_callers_site() {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let cluster = Cluster::start().unwrap();
    let pool = PgPool::builder(common::hosts(&[cluster.port()], "").parse().unwrap())
        .pool_config(Config {
            max_size: 1,
            leak_warning: Some(Duration::from_millis(50)),
            borrow_timeout: Duration::from_secs(10),
            ..Config::default()
        })
        .build_ready()
        .await
        .unwrap();
    let first = pool.get(Role::Primary).await.unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let thread = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            let conn = borrow_from_a_thread_h46(&pool);
            // Held until the test has seen the warning.
            let _ = rx.recv();
            drop(conn);
        })
    };
    let sub = &pool.servers()[0].stats;
    assert_eq!(sub.max_size, 1, "{sub:?}");
    common::until(
        Duration::from_secs(10),
        "the thread's borrow waits",
        || pool.servers()[0].stats.waiting,
        |&n| n == 1,
    )
    .await;
    drop(first);
    // The test's own borrow may have been reported already (one runtime thread: no report of
    // it can come after its return).
    let before = pool.servers()[0].stats.leaks_suspected;
    common::until(
        Duration::from_secs(10),
        "the thread's borrow is reported as a possible leak",
        || pool.servers()[0].stats.leaks_suspected,
        |&n| n > before,
    )
    .await;
    tx.send(()).unwrap();
    tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    let text = out.text();
    let warning = text
        .split("WARN")
        .last()
        .filter(|w| w.contains("may have leaked"))
        .unwrap_or_else(|| panic!("no leak warning in {text}"));
    assert!(
        warning.contains("borrow_from_a_thread_h46"),
        "the warning names the blocking borrow's caller: {warning}"
    );
    // And, with several servers to choose among, which one the leaked connection is to
    // (session 44: before, a PgPool's warning did not say).
    let server = &pool.servers()[0].name;
    assert!(
        warning.contains(&format!("a pooled connection to {server} has been lent")),
        "the warning names the server: {warning}"
    );
}
