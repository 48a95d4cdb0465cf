//! The borrowed-connection guard, and what happens when it is dropped.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::core::{Lease, Owned};
use crate::pool::Inner;
use crate::{Labels, Manager};

/// A borrowed connection; returns to the pool when dropped.
///
/// ```
/// # struct Numbers;
/// # impl slipstream_pool::Manager for Numbers {
/// #     type Connection = u64;
/// #     type Error = std::io::Error;
/// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
/// # }
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = slipstream_pool::Pool::builder(Numbers).build();
/// let mut conn = pool.get().await?;
/// *conn += 1; // a `Pooled` derefs to the connection
/// # Ok(()) }
/// ```
pub struct Pooled<M: Manager> {
    pool: Arc<Inner<M>>,
    pub(crate) slot: usize,
    /// The guard's hold on the slot; `None` once dropped.
    lent: Option<Lent>,
    /// `Some` until dropped.
    conn: Option<Box<M::Connection>>,
    /// Close the connection on drop instead of returning it (it failed validation, or was too
    /// costly to relabel).
    pub(crate) discard: bool,
}

impl<M: Manager> Pooled<M> {
    pub(crate) fn new(
        pool: Arc<Inner<M>>,
        slot: usize,
        lent: Lent,
        conn: Option<Box<M::Connection>>,
    ) -> Pooled<M> {
        Pooled {
            pool,
            slot,
            lent: Some(lent),
            conn,
            discard: false,
        }
    }

    /// The connection's labels ([`crate::Pool::get_labeled`]); empty for a new connection.
    pub fn labels(&self) -> Arc<Labels> {
        self.pool.attachments[self.slot].labels()
    }

    /// Labels the connection (after setting it up that way yourself), for later labeled
    /// borrows to find.
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use slipstream_pool::Labels;
    /// let pool = slipstream_pool::Pool::builder(Numbers).build();
    /// let conn = pool.get().await?;
    /// conn.set_labels(Labels::from([("role".into(), "reporting".into())]));
    /// assert_eq!(conn.labels()["role"], "reporting");
    /// # Ok(()) }
    /// ```
    pub fn set_labels(&self, labels: Labels) {
        self.pool.attachments[self.slot].set_labels(Arc::new(labels));
    }

    /// Closes the connection when this guard drops, instead of returning it to the pool (for a
    /// connection the caller knows is unusable).
    pub fn discard(mut self) {
        self.discard = true;
    }

    /// Records that the holder is using the connection (for the abandoned timeout).
    fn touch(&self) {
        let slot = &self.pool.core.slots[self.slot];
        // A holder whose borrow was reclaimed no longer owns the slot: leave its times alone.
        if let Some(Lent::Leased(l)) = &self.lent {
            if slot.lease.load(Ordering::Relaxed) != l.value() {
                return;
            }
        }
        slot.active_ms.store(self.pool.now(), Ordering::Relaxed);
    }
}

impl<M: Manager> Deref for Pooled<M> {
    type Target = M::Connection;
    fn deref(&self) -> &M::Connection {
        self.touch();
        // The expect cannot fire: `conn` is taken only in `drop`.
        self.conn
            .as_ref()
            .expect("a lent guard holds its connection")
    }
}

impl<M: Manager> DerefMut for Pooled<M> {
    fn deref_mut(&mut self) -> &mut M::Connection {
        self.touch();
        // The expect cannot fire, as in `deref`.
        self.conn
            .as_mut()
            .expect("a lent guard holds its connection")
    }
}

impl<M: Manager> Drop for Pooled<M> {
    fn drop(&mut self) {
        let (Some(conn), Some(lent)) = (self.conn.take(), self.lent.take()) else {
            return;
        };
        let pool = &self.pool;
        let slot = &pool.core.slots[self.slot];
        let owned = match lent {
            Lent::Owned(o) => o,
            Lent::Leased(l) => match pool.core.end_lease(l) {
                Some(o) => o,
                // Reclaimed: the slot is no longer this guard's, and the connection was aborted.
                None => return,
            },
        };
        let i = owned.index();
        let now = pool.now();
        let lent_for = now.saturating_sub(slot.borrowed_ms.load(Ordering::Relaxed));
        slot.busy_ms.store(
            slot.busy_ms.load(Ordering::Relaxed) + lent_for,
            Ordering::Relaxed,
        );
        if pool.watches_leaks {
            pool.attachments[i].borrow_site.returned(i);
        }
        let c = &pool.counters;
        if self.discard || pool.manager.is_broken(&conn) {
            c.closed_broken.fetch_add(1, Ordering::Relaxed);
            drop(conn);
            pool.free(owned);
        } else if pool.expired(i, now) {
            c.retired.fetch_add(1, Ordering::Relaxed);
            drop(conn);
            pool.free(owned);
        } else if i >= pool.core.limit() {
            c.resized_away.fetch_add(1, Ordering::Relaxed);
            drop(conn);
            pool.free(owned);
        } else if pool.manager.needs_reset(&conn) {
            // The reset is async (a round trip, for PostgreSQL): run it on the pool's runtime;
            // the slot stays owned, and so out of reach of borrowers, until it is done.
            let pool = pool.clone();
            self.pool.runtime.spawn(async move {
                let mut conn = conn;
                if pool.manager.reset(&mut conn).await {
                    pool.counters.resets.fetch_add(1, Ordering::Relaxed);
                    pool.put_back(owned, conn);
                } else {
                    pool.counters.failed_resets.fetch_add(1, Ordering::Relaxed);
                    drop(conn);
                    pool.free(owned);
                }
            });
        } else {
            pool.put_back(owned, conn);
        }
    }
}

/// A guard's hold on its slot: owned outright, or a lease the pool's reclaimer may end first.
pub(crate) enum Lent {
    Owned(Owned),
    Leased(Lease),
}

impl<M: Manager> fmt::Debug for Pooled<M>
where
    M::Connection: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pooled")
            .field("slot", &self.slot)
            .field("connection", &self.conn)
            .finish()
    }
}
