//! The borrowed-connection guard, and what happens when it is dropped.

use std::fmt;
use std::mem::ManuallyDrop;
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
    /// The pool, kept alive while the connection is lent. Taken from the borrowing thread's
    /// cached reference and given to the returning thread's ([`crate::local_ref`]): not
    /// dropped with the guard but handed on in `drop`.
    pool: ManuallyDrop<Arc<Inner<M>>>,
    /// The connection and this borrow's state; `None` once dropped.
    held: Option<Box<Held<M::Connection>>>,
}

/// A connection and the state of its current borrow, boxed together: the box moves between
/// its slot (idle) and a guard (lent), so a guard is two pointers.
///
/// Why two: a guard is returned through `Option`, `Result` and `Poll` on every borrow, and a
/// guard of several words (this state kept inline, with a `bool`) was copied between them in
/// pieces of different sizes, each copy a store-to-load forwarding stall; two pointers travel
/// in registers. The state lives with the connection, not the slot, because only the box is
/// this holder's alone: after a reclaim the slot is someone else's while the holder still
/// holds the (aborted) connection.
pub(crate) struct Held<C> {
    pub(crate) conn: C,
    /// The slot it belongs to.
    pub(crate) slot: usize,
    /// The holder's hold on the slot while lent; `None` while idle in the slot.
    lent: Option<Lent>,
    /// Close the connection on return instead of putting it back, and whether that close is
    /// counted there.
    discard: Discard,
    /// Found idle past `validate_after` and not validated since. Such a connection goes back
    /// (however its borrow ended: dropped, cancelled, handed on and given up) with the time
    /// it was last returned, not now, so it is still due for the next borrow: stamped as just
    /// returned, it would be lent unvalidated (`Pool::put_back`).
    pub(crate) due: bool,
    /// The wait-histogram bucket this borrow's claim was counted in, if it waited
    /// (`Pool::waited`): a claim that lends nothing takes its wait back with its borrow.
    pub(crate) waited: Option<u8>,
}

/// Whether a lent connection goes back into service when it returns.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Discard {
    /// It goes back, unless the return finds a reason to close it.
    Keep,
    /// It closes, counted as broken (its holder said it is unusable, or it could not be
    /// relabeled).
    Unusable,
    /// It closes, its reason already counted where it was found (a failed validation, a
    /// close while idle, a relabel too costly): `closed_broken` must not count it again.
    Counted,
}

impl<C> Held<C> {
    /// A newly opened connection for slot `slot`.
    pub(crate) fn new(conn: C, slot: usize) -> Held<C> {
        Held {
            conn,
            slot,
            lent: None,
            discard: Discard::Keep,
            due: false,
            waited: None,
        }
    }
}

impl<M: Manager> Pooled<M> {
    /// A guard for `held`, taken out of its slot, lent as `lent`.
    #[inline(always)]
    pub(crate) fn new(
        pool: Arc<Inner<M>>,
        mut held: Box<Held<M::Connection>>,
        lent: Lent,
    ) -> Pooled<M> {
        // `discard` is `Keep` here: a discarded connection is closed, never put back.
        held.lent = Some(lent);
        held.waited = None;
        Pooled {
            pool: ManuallyDrop::new(pool),
            held: Some(held),
        }
    }

    #[inline(always)]
    fn held(&self) -> &Held<M::Connection> {
        // The expect cannot fire: `held` is taken only in `drop`.
        self.held
            .as_deref()
            .expect("a lent guard holds its connection")
    }

    #[inline(always)]
    fn held_mut(&mut self) -> &mut Held<M::Connection> {
        // The expect cannot fire, as in `held`.
        self.held
            .as_deref_mut()
            .expect("a lent guard holds its connection")
    }

    /// The slot the connection belongs to.
    #[inline(always)]
    pub(crate) fn slot(&self) -> usize {
        self.held().slot
    }

    /// Closes the connection when this guard drops instead of returning it.
    pub(crate) fn set_discard(&mut self, how: Discard) {
        self.held_mut().discard = how;
    }

    /// Marks the connection due for validation, or validated (see `Held::due`).
    pub(crate) fn set_due(&mut self, due: bool) {
        self.held_mut().due = due;
    }

    /// Records the wait-histogram bucket this borrow's claim was counted in (see
    /// `Held::waited`).
    pub(crate) fn set_waited(&mut self, bucket: u8) {
        self.held_mut().waited = Some(bucket);
    }

    /// The bucket recorded by [`Pooled::set_waited`], taken so it is given back once.
    pub(crate) fn take_waited(&mut self) -> Option<u8> {
        self.held_mut().waited.take()
    }

    /// True once [`Pooled::set_discard`] was called.
    pub(crate) fn is_discarded(&self) -> bool {
        self.held().discard != Discard::Keep
    }

    /// The connection's labels ([`crate::Pool::get_labeled`]); empty for a new connection,
    /// and for one the pool reclaimed from this guard ([`crate::Builder::time_to_live`]).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = slipstream_pool::Pool::builder(Numbers).build();
    /// let conn = pool.get().await?;
    /// assert!(conn.labels().is_empty()); // a new connection has none
    /// # Ok(()) }
    /// ```
    pub fn labels(&self) -> Arc<Labels> {
        let attachment = &self.pool.attachments[self.slot()];
        let labels = attachment.labels();
        // Read before the check: a reclaim after it frees the slot, and the labels read are
        // still this connection's.
        if self.owns_slot() {
            labels
        } else {
            Arc::default()
        }
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
    ///
    /// A guard whose borrow the pool reclaimed ([`crate::Builder::time_to_live`],
    /// [`crate::Builder::abandoned_timeout`]) no longer owns its slot, which holds another
    /// connection: labeling it is then a no-op.
    pub fn set_labels(&self, labels: Labels) {
        // Checked under the labels' lock: a reclaim that ends the lease after the check clears
        // the labels after this write (`Inner::free`, under the same lock), and one before it
        // is seen by the check (the reclaim's lease CAS comes before its unlock, which happens
        // before this lock, so the relaxed load in `owns_slot` reads it).
        self.pool.attachments[self.slot()].set_labels_if(Arc::new(labels), || self.owns_slot());
    }

    /// Records `at` as where this borrow was made, for the leak warning
    /// ([`crate::Builder::leak_warning`]): a borrow made on another thread on the caller's
    /// behalf would otherwise be reported with that thread's frames, not the caller's. A no-op
    /// without `leak_warning`, or once the pool reclaimed the borrow (the slot's site is then
    /// another borrow's).
    pub(crate) fn borrowed_at(&self, at: std::backtrace::Backtrace) {
        if self.pool.watches_leaks && self.owns_slot() {
            let i = self.slot();
            // Written only by the slot's owner, which this guard is: its own lend's count.
            let borrow = self.pool.core.slots[i].borrows.load(Ordering::Relaxed);
            self.pool.attachments[i].borrow_site.borrowed_at(borrow, at);
        }
    }

    /// Closes the connection when this guard drops, instead of returning it to the pool (for a
    /// connection the caller knows is unusable).
    ///
    /// ```
    /// # struct Numbers;
    /// # impl slipstream_pool::Manager for Numbers {
    /// #     type Connection = u64;
    /// #     type Error = std::io::Error;
    /// #     async fn connect(&self) -> Result<u64, std::io::Error> { Ok(1) }
    /// # }
    /// # #[tokio::main] async fn main() -> Result<(), slipstream_pool::PoolError> {
    /// let pool = slipstream_pool::Pool::builder(Numbers).build();
    /// let conn = pool.get().await?;
    /// conn.discard(); // closed, not returned
    /// assert_eq!((pool.stats().open, pool.stats().idle), (0, 0));
    /// # Ok(()) }
    /// ```
    pub fn discard(mut self) {
        self.set_discard(Discard::Unusable);
    }

    /// False once the pool reclaimed this borrow: the slot is no longer this guard's (it
    /// holds a replacement, maybe lent to someone else), only the connection object is.
    #[inline(always)]
    fn owns_slot(&self) -> bool {
        let held = self.held();
        match &held.lent {
            Some(Lent::Leased(l)) => {
                self.pool.core.slots[held.slot]
                    .lease
                    .load(Ordering::Relaxed)
                    == l.value()
            }
            _ => true,
        }
    }

    /// Records that the holder is using the connection (for the abandoned timeout).
    #[inline(always)]
    fn touch(&self) {
        // A holder whose borrow was reclaimed no longer owns the slot: leave its times alone.
        if self.owns_slot() {
            let slot = &self.pool.core.slots[self.held().slot];
            slot.active_ms.store(self.pool.now(), Ordering::Relaxed);
        }
    }
}

impl<M: Manager> Deref for Pooled<M> {
    type Target = M::Connection;
    fn deref(&self) -> &M::Connection {
        self.touch();
        &self.held().conn
    }
}

impl<M: Manager> DerefMut for Pooled<M> {
    fn deref_mut(&mut self) -> &mut M::Connection {
        self.touch();
        &mut self.held_mut().conn
    }
}

impl<M: Manager> Drop for Pooled<M> {
    fn drop(&mut self) {
        // Taken before any user code runs (the manager's `is_broken` or `needs_reset`, the
        // connection's drop): if that code panics, unwinding drops this `Arc`, where a
        // reference left in the `ManuallyDrop` field would never be released and the pool's
        // memory would outlive every handle, guard and thread.
        // SAFETY: `drop` runs once, and `self.pool` is not used after this line.
        let pool = unsafe { ManuallyDrop::take(&mut self.pool) };
        if let Some(held) = self.held.take() {
            give_back(&pool, held);
        }
        crate::local_ref::keep(pool);
    }
}

/// Returns the connection in `held` to its slot, or closes it: everything a guard's drop does
/// but handing on its reference to the pool.
fn give_back<M: Manager>(pool: &Arc<Inner<M>>, mut held: Box<Held<M::Connection>>) {
    // Always `Some` (`Pooled::new` sets it); a guard without one owns no slot.
    let Some(lent) = held.lent.take() else {
        return;
    };
    let slot = &pool.core.slots[held.slot];
    let owned = match lent {
        Lent::Owned(o) => o,
        Lent::Leased(l) => match pool.core.end_lease(l) {
            Some(o) => o,
            // Reclaimed: the slot is no longer this guard's, and the connection was aborted.
            None => return,
        },
    };
    let i = owned.index();
    let returning = Returning::new(&**pool, owned, Abandoned::Return);
    let now = pool.now();
    let lent_for = now.saturating_sub(slot.borrowed_ms.load(Ordering::Relaxed));
    slot.busy_ms.store(
        slot.busy_ms.load(Ordering::Relaxed) + lent_for,
        Ordering::Relaxed,
    );
    if pool.watches_leaks {
        pool.attachments[i].borrow_site.returned(i);
    }
    if must_close(pool, &held, i, now) {
        returning.close(held);
        return;
    }
    // What the borrower left in the connection object (for PostgreSQL: its notice handler,
    // its unread notifications) goes now, reset or not: a clean connection under a rollback
    // reset gets none, and the next borrower's notices reached this one's handler.
    pool.manager.returned(&mut held.conn);
    if pool.manager.needs_reset(&held.conn) {
        // The reset is async (a round trip, for PostgreSQL): run it on the pool's runtime;
        // the slot stays owned, and so out of reach of borrowers, until it is done. The task
        // carries the slot in a `Returning`, so a task dropped before it ends (the runtime
        // shut down, even before its first poll; a panic in the reset) frees the slot.
        let returning = Returning::new(Arc::clone(pool), returning.done(), Abandoned::Reset);
        pool.runtime.spawn(async move {
            let mut held = held;
            let pool = &returning.pool;
            // The last handle's going ends a reset still running (one that hangs would keep
            // the connection open, and the pool's memory, for as long as it hangs).
            let reset = tokio::select! {
                ok = pool.manager.reset(&mut held.conn) => Some(ok),
                () = pool.until_shut() => None,
            };
            let keep = match reset {
                Some(true) => {
                    pool.counters.resets.fetch_add(1, Ordering::Relaxed);
                    if !pool.manager.reset_keeps_labels() {
                        // The reset may have undone what the labels say was set up (a session
                        // reset's RESET ALL undoes a labeling's `SET search_path`): the next
                        // labeled borrow configures it again rather than trust them.
                        pool.attachments[i].set_labels(Arc::default());
                    }
                    // Asked again: a resize or an eviction may have come during the reset,
                    // and the slot is handed over, not re-checked, once released.
                    !must_close(pool, &held, i, pool.now())
                }
                Some(false) => {
                    pool.counters.failed_resets.fetch_add(1, Ordering::Relaxed);
                    false
                }
                // Shut down: no one can borrow it, and no count is read any more.
                None => false,
            };
            if keep {
                returning.finish(|pool, o| pool.put_back(o, held));
            } else {
                returning.close(held);
            }
        });
    } else {
        pool.put_back(returning.done(), held);
    }
}

/// Whether the connection in `held`, back from a borrow of slot `i`, must close rather than
/// go back into service; if so, the reason is counted.
fn must_close<M: Manager>(pool: &Inner<M>, held: &Held<M::Connection>, i: usize, now: u64) -> bool {
    if held.discard == Discard::Counted {
        return true;
    }
    let c = &pool.counters;
    let why = if held.discard == Discard::Unusable || pool.manager.is_broken(&held.conn) {
        &c.closed_broken
    } else if pool.expired(i, now) {
        &c.retired
    } else if i >= pool.core.limit() {
        &c.resized_away
    } else {
        return false;
    };
    why.fetch_add(1, Ordering::Relaxed);
    true
}

/// A slot being returned, freed for the opener if this is dropped before [`Returning::done`]:
/// a panic in the manager's or the connection's code during a return closes that connection
/// (unwinding drops it) and must not take the slot out of the pool for good. `P` is how it
/// reaches the pool: a borrow in the guard's drop, an `Arc` in a reset task.
struct Returning<M: Manager, P: Deref<Target = Inner<M>>> {
    pool: P,
    owned: Option<Owned>,
    abandoned: Abandoned,
}

/// Which count a connection closed by a [`Returning`] dropped unfinished goes to.
#[derive(Clone, Copy)]
enum Abandoned {
    /// The manager's code panicked in a return: `closed_broken`, as when it says so.
    Return,
    /// The reset panicked, or its task was dropped (the runtime shut down): `failed_resets`.
    Reset,
}

impl<M: Manager, P: Deref<Target = Inner<M>>> Returning<M, P> {
    fn new(pool: P, owned: Owned, abandoned: Abandoned) -> Returning<M, P> {
        Returning {
            pool,
            owned: Some(owned),
            abandoned,
        }
    }

    /// The slot, for the caller to put back or free.
    fn done(mut self) -> Owned {
        self.take()
    }

    /// Gives the slot to `f` (to put back or free) with the pool it belongs to.
    fn finish(mut self, f: impl FnOnce(&Inner<M>, Owned)) {
        let o = self.take();
        f(&self.pool, o)
    }

    /// Closes the connection `held` and frees the slot for the opener.
    fn close(self, held: Box<Held<M::Connection>>) {
        drop(held);
        self.finish(Inner::free);
    }

    fn take(&mut self) -> Owned {
        // The expect cannot fire: `owned` is `Some` from `new` until `done` or `finish`
        // consumes `self`.
        self.owned
            .take()
            .expect("a Returning gives its slot up once")
    }
}

impl<M: Manager, P: Deref<Target = Inner<M>>> Drop for Returning<M, P> {
    fn drop(&mut self) {
        if let Some(o) = self.owned.take() {
            let c = &self.pool.counters;
            match self.abandoned {
                Abandoned::Return => &c.closed_broken,
                Abandoned::Reset => &c.failed_resets,
            }
            .fetch_add(1, Ordering::Relaxed);
            self.pool.free(o);
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
            .field("slot", &self.held.as_ref().map(|h| h.slot))
            .field("connection", &self.held.as_ref().map(|h| &h.conn))
            .finish()
    }
}
