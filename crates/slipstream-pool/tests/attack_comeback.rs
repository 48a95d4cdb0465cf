//! A server that comes back under 10,000 waiting borrowers (helper h71; holds). docs/pool.md: no
//! borrower starves, timeouts fire as documented, a timeout names why connections could not
//! be opened, and `max_size` is never exceeded.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use slipstream_pool::{PgManager, Pool, PoolError};
use slipstream_testkit::Cluster;

const WAITERS: usize = 10_000;
/// Borrowers that give up while the server is still down.
const IMPATIENT: usize = 1_000;
/// Only against a hang.
const HANG: Duration = Duration::from_secs(300);

/// Promise: 10,000 borrowers queued on a pool whose server is down are all served once it is
/// back, within their (generous) borrow timeout; 1,000 with a 1 s timeout that ends while it
/// is down give up (and a pool's own timeout then names the connect error); at most `max_size`
/// connections are ever lent at once; nothing is left waiting or lent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_waiters_are_served_when_the_server_comes_back() {
    let mut cluster = Cluster::start().unwrap();
    let config = cluster.url().parse().unwrap();
    let pool = Pool::builder(PgManager::new(config))
        .max_size(4)
        .min_size(4)
        .borrow_timeout(Duration::from_secs(240))
        .build_ready()
        .await
        .unwrap();
    cluster.stop().unwrap();
    // The idle connection's session ended with the shutdown: it is closed at the next borrow.
    let lent = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut patient = Vec::new();
    for _ in 0..WAITERS {
        let (pool, lent, most) = (pool.clone(), lent.clone(), most.clone());
        patient.push(tokio::spawn(async move {
            let mut conn = pool.get().await?;
            let now = lent.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let r = conn.batch_execute("SELECT 1").await;
            lent.fetch_sub(1, Ordering::SeqCst);
            drop(conn);
            Ok::<_, PoolError>(r.map_err(|e| e.to_string()))
        }));
    }
    let mut impatient = Vec::new();
    for _ in 0..IMPATIENT {
        let pool = pool.clone();
        impatient.push(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(1), pool.get())
                .await
                .map(|r| r.map(drop))
        }));
    }
    // The impatient ones above time out by the caller's timeout; what the pool's own says
    // meanwhile, from a second pool on the same server with a 1 s borrow timeout:
    let short = Pool::builder(PgManager::new(cluster.url().parse().unwrap()))
        .max_size(1)
        .borrow_timeout(Duration::from_secs(1))
        .build();
    let said = short.get().await.map(drop).unwrap_err().to_string();
    for t in impatient {
        let r = tokio::time::timeout(HANG, t)
            .await
            .expect("no hang")
            .unwrap();
        assert!(r.is_err(), "served while the server was down: {r:?}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart().unwrap();
    let mut failed = Vec::new();
    for t in patient {
        match tokio::time::timeout(HANG, t)
            .await
            .expect("no hang")
            .unwrap()
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("statement: {e}")),
            Err(e) => failed.push(format!("borrow: {e}")),
        }
    }
    let s = pool.stats();
    eprintln!("{s:?}\nshort pool said: {said}");
    assert!(
        said.contains("opening one failed") && said.contains("could not connect"),
        "a timeout while the server is down names the connect error: {said}"
    );
    // The connect error ends with libpq's question ("is the server running on that host and
    // accepting TCP/IP connections?"); before the fix the timeout's advice followed it as
    // "connections?. Check that the database is reachable".
    assert!(!said.contains("?."), "punctuation doubled: {said}");
    assert!(
        failed.is_empty(),
        "{} failed, first: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(most.load(Ordering::SeqCst) <= 4, "lent at once: {most:?}");
    assert_eq!((s.waiting, s.borrowed), (0, 0), "{s:?}");
    assert!(s.open <= 4, "{s:?}");
}
