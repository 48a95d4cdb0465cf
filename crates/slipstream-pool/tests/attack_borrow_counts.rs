//! Attacks on the pool's borrow counts: `Stats::borrows` is "borrows so far" and
//! `ConnectionInfo::borrows` the "times it was lent" (docs/pool.md, "Metrics and leak
//! warnings"; `slipstream_pool_borrows_total` is the same figure). A borrow claims an idle
//! connection before it knows whether it can lend it: one found closed while idle, failing
//! validation, too costly to relabel or failing its `configure` is closed and the borrow goes
//! on. Such a claim lent nothing and must not count.
//!
//! Found by helper h71 (session 51) after a server restart: 10,004 borrows counted for 10,000
//! served. The manager here is an in-memory one whose "server hung up" flag the test sets, as
//! a socket's EOF would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use slipstream_pool::{Labeling, Labels, Manager, Pool, TOO_COSTLY};

/// A connection: its number and its "the server hung up" flag.
#[derive(Default)]
struct Conn {
    hung_up: Arc<AtomicBool>,
}

#[derive(Default)]
struct Watched {
    opened: AtomicU64,
}

impl Manager for Watched {
    type Connection = Conn;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<Conn, std::io::Error> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(Conn::default())
    }
    fn closed_while_idle(&self, conn: &mut Conn) -> bool {
        conn.hung_up.load(Ordering::SeqCst)
    }
}

fn pool(max: usize) -> Pool<Watched> {
    Pool::builder(Watched::default())
        .max_size(max)
        .borrow_timeout(Duration::from_secs(30))
        .build()
}

/// Promise: a borrow that finds the idle connections closed, closes them and lends a fresh
/// one counts once, and the fresh connection has been lent once.
///
/// Steps: two connections borrowed at once and returned (2 borrows); the server "hangs up"
/// both while they sit idle; one more borrow.
///
/// Before the fix: that borrow claimed both dead connections, and each claim was counted as a
/// borrow: `Stats::borrows` 5 for 3 served, and the fresh connection, opened into a slot that
/// had been lent twice, said it had been lent 3 times (the slot's count, not the connection's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_dead_idle_connection_is_not_a_borrow() {
    let pool = pool(2);
    let (a, b) = (pool.get().await.unwrap(), pool.get().await.unwrap());
    let flags = [Arc::clone(&a.hung_up), Arc::clone(&b.hung_up)];
    drop((a, b));
    for f in &flags {
        f.store(true, Ordering::SeqCst);
    }

    let fresh = pool.get().await.unwrap();
    assert!(!fresh.hung_up.load(Ordering::SeqCst), "a live connection");
    let s = pool.stats();
    assert_eq!(s.failed_validation, 2, "both dead ones were found: {s:?}");
    assert_eq!(s.borrows, 3, "three borrows were served: {s:?}");
    let lent: Vec<_> = pool
        .connections()
        .into_iter()
        .filter(|c| c.borrowed)
        .map(|c| c.borrows)
        .collect();
    assert_eq!(lent, [1], "the fresh connection was lent once");
}

/// Promise: `Stats::waits` counts borrows that waited and got a connection, so it never
/// passes `Stats::borrows` (docs/pool.md: "the rest are `borrows_total - waits_total`").
///
/// Steps: a one-connection pool, its connection lent; a second borrower queues; the server
/// "hangs up" the lent connection, which is returned and handed to the waiter, who finds it
/// closed and waits again for a fresh one.
///
/// Before the fix: 3 borrows and 3 waits for 2 borrows served; with the borrow count alone
/// fixed, 2 borrows and 3 waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_handed_a_dead_connection_waits_once() {
    let pool = pool(1);
    let first = pool.get().await.unwrap();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.get().await.map(|c| c.hung_up.load(Ordering::SeqCst)) })
    };
    let queued = tokio::time::timeout(Duration::from_secs(30), async {
        while pool.stats().waiting == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(queued.is_ok(), "the second borrower queued");
    first.hung_up.store(true, Ordering::SeqCst);
    drop(first);
    assert_eq!(
        waiter.await.unwrap(),
        Ok(false),
        "the waiter got a live connection"
    );
    let s = pool.stats();
    assert_eq!(s.failed_validation, 1, "{s:?}");
    assert_eq!(
        (s.borrows, s.waits),
        (2, 2),
        "both borrows waited once: {s:?}"
    );
}

/// Wants "tenant" set; an unlabeled connection can be configured for any tenant, one set up
/// for another tenant never; the first `fail_first` configures fail.
struct Tenants {
    fail_first: u64,
    configures: AtomicU64,
}

impl Labeling<Conn> for Tenants {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        match () {
            _ if wanted == current => 0,
            _ if current.is_empty() => 1,
            _ => TOO_COSTLY,
        }
    }
    async fn configure(&self, _wanted: &Labels, _conn: &mut Conn) -> bool {
        self.configures.fetch_add(1, Ordering::SeqCst) >= self.fail_first
    }
}

fn tenant(t: &str) -> Labels {
    Labels::from([("tenant".to_string(), t.to_string())])
}

/// Promise: a labeled borrow whose connection is closed for being too costly to relabel
/// counts once.
///
/// Steps: a one-connection pool; a borrow for tenant a (1 borrow); a borrow for tenant b,
/// which takes the only connection, finds it too costly, closes it and configures a fresh one.
///
/// Before the fix: `Stats::borrows` 3 for 2 served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_as_too_costly_is_not_a_borrow() {
    let pool = pool(1);
    let labeling = Tenants {
        fail_first: 0,
        configures: AtomicU64::new(0),
    };
    drop(pool.get_labeled(&tenant("a"), &labeling).await.unwrap());
    let b = pool.get_labeled(&tenant("b"), &labeling).await.unwrap();
    assert_eq!(*b.labels(), tenant("b"));
    let s = pool.stats();
    assert_eq!(s.label_closes, 1, "{s:?}");
    assert_eq!(s.borrows, 2, "two borrows were served: {s:?}");
    assert_eq!(pool.connections()[0].borrows, 1, "b's connection is new");
}

/// Promise: a labeled borrow whose first `configure` fails (the connection is closed and the
/// borrow tries again) counts once.
///
/// Before the fix: `Stats::borrows` 3 for 2 served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_configure_failed_is_not_a_borrow() {
    let pool = pool(1);
    drop(pool.get().await.unwrap());
    let labeling = Tenants {
        fail_first: 1,
        configures: AtomicU64::new(0),
    };
    let conn = pool.get_labeled(&tenant("a"), &labeling).await.unwrap();
    assert_eq!(labeling.configures.load(Ordering::SeqCst), 2);
    drop(conn);
    let s = pool.stats();
    assert_eq!(s.borrows, 2, "two borrows were served: {s:?}");
}
