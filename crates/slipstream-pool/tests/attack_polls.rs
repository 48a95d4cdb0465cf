//! Attacks by dropping futures at every poll (session 41): `get_labeled` (through validation,
//! waiting and `configure`) and `build_ready`. After each drop, no slot is lost, no connection
//! is left open unaccounted, no wake-up is lost (a later borrow succeeds), nothing panics.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use slipstream_pool::{Labeling, Labels, Manager, Pool};

/// Polls a future at most `polls` times, then drops it.
struct DropAfter<F> {
    inner: Pin<Box<F>>,
    polls: usize,
}

impl<F: Future> Future for DropAfter<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            return Poll::Ready(None);
        }
        self.polls -= 1;
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending if self.polls == 0 => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn drop_after<F: Future>(f: F, polls: usize) -> DropAfter<F> {
    DropAfter {
        inner: Box::pin(f),
        polls,
    }
}

/// Connections that count themselves alive; connecting and validating take a few polls.
struct Slow {
    next: AtomicU64,
    alive: Arc<AtomicI64>,
}

struct Conn {
    tenant: u64,
    alive: Arc<AtomicI64>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn yields(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

impl Manager for Slow {
    type Connection = Conn;
    type Error = std::io::Error;
    async fn connect(&self) -> Result<Conn, std::io::Error> {
        yields(3).await;
        self.next.fetch_add(1, Ordering::Relaxed);
        self.alive.fetch_add(1, Ordering::SeqCst);
        Ok(Conn {
            tenant: 0,
            alive: self.alive.clone(),
        })
    }
    async fn validate(&self, _conn: &mut Conn) -> bool {
        yields(2).await;
        true
    }
}

fn slow() -> (Slow, Arc<AtomicI64>) {
    let alive = Arc::new(AtomicI64::new(0));
    (
        Slow {
            next: AtomicU64::new(0),
            alive: alive.clone(),
        },
        alive,
    )
}

/// A connection's tenant; switching costs 1 and takes a few polls.
struct Tenants;
impl Labeling<Conn> for Tenants {
    fn cost(&self, wanted: &Labels, current: &Labels) -> u32 {
        u32::from(wanted != current)
    }
    async fn configure(&self, wanted: &Labels, conn: &mut Conn) -> bool {
        yields(3).await;
        conn.tenant = wanted["tenant"].parse().unwrap();
        true
    }
}

fn tenant(n: u64) -> Labels {
    Labels::from([("tenant".to_string(), n.to_string())])
}

const LIMIT: Duration = Duration::from_secs(20);

/// `get_labeled` dropped at each of its polls in turn, while another holder has the only
/// connection for a few polls (so the borrow validates, waits and configures): afterwards the
/// pool lends its connection, correctly labeled, and counts it right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_labeled_dropped_at_every_poll_loses_nothing() {
    let (manager, alive) = slow();
    let pool = Pool::builder(manager)
        .max_size(1)
        .validate_after(Duration::ZERO)
        .borrow_timeout(LIMIT)
        .build();
    let mut completed = false;
    for polls in 0..200 {
        let wanted = tenant(polls as u64 % 3 + 1);
        let held = pool.get().await.unwrap();
        let holder = tokio::spawn(async move {
            yields(4).await;
            drop(held);
        });
        let got = drop_after(pool.get_labeled(&wanted, &Tenants), polls).await;
        holder.await.unwrap();
        if let Some(got) = got {
            let conn = got.expect("a labeled borrow failed");
            assert_eq!(conn.tenant.to_string(), wanted["tenant"], "polls {polls}");
            completed = true;
        }
        let s = common::all_back(&pool).await;
        assert!(s.open <= 1, "polls {polls}: {s:?}");
        let conn = tokio::time::timeout(LIMIT, pool.get_labeled(&wanted, &Tenants))
            .await
            .unwrap_or_else(|_| panic!("polls {polls}: the next borrow hung: {s:?}"))
            .unwrap();
        assert_eq!(conn.tenant.to_string(), wanted["tenant"], "polls {polls}");
        assert_eq!(*conn.labels(), wanted, "polls {polls}");
        drop(conn);
        common::until(
            LIMIT,
            "connections alive match the pool's count",
            || (alive.load(Ordering::SeqCst), pool.stats()),
            |(a, s)| *a == s.open as i64,
        )
        .await;
        if completed && polls > 60 {
            break;
        }
    }
    assert!(completed, "no borrow completed within the polls tried");
}

/// `build_ready` dropped at each of its polls: the pool it built goes with it, and every
/// connection it had opened (or was opening) closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_ready_dropped_at_every_poll_leaves_no_connection_open() {
    for polls in 0..40 {
        let (manager, alive) = slow();
        let got = drop_after(
            Pool::builder(manager)
                .max_size(4)
                .min_size(3)
                .borrow_timeout(LIMIT)
                .build_ready(),
            polls,
        )
        .await;
        if let Some(pool) = got {
            let pool = pool.expect("build_ready failed");
            assert!(pool.stats().open >= 3, "polls {polls}");
        }
        common::until(
            LIMIT,
            "every connection of the dropped pool closes",
            || alive.load(Ordering::SeqCst),
            |&a| a == 0,
        )
        .await;
    }
}
