//! The future [`Pool::get`] returns.
//!
//! An uncontended borrow is one compare-and-swap, a few stores and a pointer bump; what it
//! costs beyond that is the code around it. Written as an `async fn`, `get` kept the borrowed
//! guard in its state machine while it might await a validation, and its poll (holding the
//! whole waiting path) was too big to be inlined into the caller: the guard went out through
//! memory, written in pieces of different sizes and read back at once in wider ones, which the
//! CPU cannot forward from its store buffer (a stall of tens of cycles each time, several per
//! borrow; before and after in docs/benchmarks.md, "Uncontended borrow + return").
//!
//! So the first poll tries the fast path itself (an idle connection that needs no
//! validation) and returns the guard straight away; this poll is small and inlined, so the
//! guard stays in registers. Everything else (validation, waiting, timeouts) is the
//! `async fn` [`Pool::get_waiting`], built only when needed and polled out of line. Like an
//! `async fn`, the future does nothing until first polled, and dropping it at any point gives
//! up its place in the queue and loses no connection (the waiting future's own guarantee).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Manager, Pool, PoolError, Pooled};

pin_project_lite::pin_project! {
    pub(crate) struct Get<'a, M, W, F>
    where
        M: Manager,
    {
        pool: &'a Pool<M>,
        // Builds the waiting future: `Some` until the first poll.
        start: Option<W>,
        // The waiting future: `Some` once the first poll found no usable idle connection.
        #[pin]
        waiting: Option<F>,
    }
}

impl<'a, M, W, F> Get<'a, M, W, F>
where
    M: Manager,
    W: FnOnce(&'a Pool<M>, Option<Pooled<M>>) -> F,
    F: Future<Output = Result<Pooled<M>, PoolError>>,
{
    /// A borrow from `pool` that, if the first try does not serve it, continues as
    /// `waiting(pool, first)`.
    pub(crate) fn new(pool: &'a Pool<M>, waiting: W) -> Self {
        Get {
            pool,
            start: Some(waiting),
            waiting: None,
        }
    }
}

impl<'a, M, W, F> Future for Get<'a, M, W, F>
where
    M: Manager,
    W: FnOnce(&'a Pool<M>, Option<Pooled<M>>) -> F,
    F: Future<Output = Result<Pooled<M>, PoolError>>,
{
    type Output = Result<Pooled<M>, PoolError>;

    // Always: LLVM's heuristics left it out of line (the borrow's code is long, if simple).
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(start) = this.start.take() {
            let pool: &'a Pool<M> = this.pool;
            let first = match pool.try_get_unless_starving() {
                Some(mut conn) => {
                    if pool.lendable(&mut conn) {
                        return Poll::Ready(Ok(conn));
                    }
                    Some(conn)
                }
                None => None,
            };
            this.waiting.set(Some(start(pool, first)));
        }
        poll_waiting(this.waiting, cx)
    }
}

/// Polls the waiting future: out of line, so the first poll stays small enough to inline.
#[inline(never)]
fn poll_waiting<F: Future>(waiting: Pin<&mut Option<F>>, cx: &mut Context<'_>) -> Poll<F::Output> {
    match waiting.as_pin_mut() {
        Some(f) => f.poll(cx),
        None => panic!("`Pool::get`'s future polled after it completed"),
    }
}
