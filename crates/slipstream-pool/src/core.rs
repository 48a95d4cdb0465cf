//! The slot state machine and the hand-off to waiters: the part of the pool that must be right
//! under every interleaving, checked by loom (`RUSTFLAGS="--cfg loom" cargo test -p
//! slipstream-pool --release --lib loom`).
//!
//! # Slots
//!
//! ```text
//!   EMPTY --open claim--> OPENING --connected--> (hand-off or IDLE)
//!   IDLE  --borrow CAS--> BORROWED --return--> (hand-off or IDLE)
//!   BORROWED --broken--> EMPTY
//! ```
//!
//! A slot's connection is touched only by whoever moved the slot out of IDLE or EMPTY with a
//! successful compare-and-swap: that is the whole of the mutual exclusion. Borrowing scans the
//! slots from a rotating start and skips busy ones; it never waits on a slot.
//!
//! # Waiting and hand-off
//!
//! Only a borrower that found no IDLE slot waits. It counts itself in `waiting`, queues a
//! [`Waiter`], then scans once more. A returning holder first offers its slot to queued waiters
//! (a waiter takes it with a CAS on its own state, so a waiter that gave up is skipped); if none
//! takes it, the holder marks the slot IDLE and then reads `waiting`: if someone queued in the
//! meantime, it takes the slot back (if still IDLE) and offers again. Both sides touch the
//! count and the slot state with read-modify-writes, which read the latest value: either the
//! returner sees the new waiter or the waiter's second scan sees the IDLE slot, so no wake-up
//! is lost.
//!
//! Invariants (what loom checks):
//! - a slot is lent to at most one holder at a time (the cell is never accessed concurrently);
//! - a returned slot is either IDLE or handed to exactly one waiter, never lost;
//! - a waiter whose slot was handed to it is woken.

use crate::sync::{AtomicU8, AtomicU64, AtomicUsize, Cell, Ordering::*, Queue, Thread};

pub(crate) const EMPTY: u8 = 0;
pub(crate) const OPENING: u8 = 1;
pub(crate) const IDLE: u8 = 2;
pub(crate) const BORROWED: u8 = 3;

/// One connection's place in the pool.
pub(crate) struct Slot<C> {
    pub(crate) state: AtomicU8,
    /// Times this slot was lent: written by its owner only, so no borrow touches a counter
    /// shared with the other slots.
    pub(crate) borrows: AtomicU64,
    /// The pool clock (ms) when the connection was opened, last lent, last used by its holder
    /// and last returned, and the age (ms) at which it retires (`u64::MAX`: never). Written by
    /// the slot's owner.
    pub(crate) opened_ms: AtomicU64,
    pub(crate) borrowed_ms: AtomicU64,
    pub(crate) active_ms: AtomicU64,
    pub(crate) returned_ms: AtomicU64,
    pub(crate) retire_after_ms: AtomicU64,
    /// Total ms the connection spent lent out, added at each return by the returner.
    pub(crate) busy_ms: AtomicU64,
    /// The pool's eviction generation when the connection opened; older than the pool's
    /// current one means evicted (closed when next seen idle or returned).
    pub(crate) generation: AtomicU64,
    /// Odd while lent to a holder that the pool may reclaim: the holder returns with a CAS
    /// from the odd value it was lent with, the reclaimer takes the slot with a CAS from the
    /// same value; whichever wins owns the slot (see `Pooled`'s drop).
    pub(crate) lease: AtomicU64,
    conn: Cell<Option<C>>,
}

// SAFETY: the connection in `conn` is accessed only by the single owner that won the CAS moving
// the slot out of IDLE/EMPTY (see the module docs), so sharing a `Slot` between threads shares
// no access to `C`; moving `C` between threads needs `C: Send`.
unsafe impl<C: Send> Sync for Slot<C> {}

impl<C> Slot<C> {
    fn new() -> Slot<C> {
        Slot {
            state: AtomicU8::new(EMPTY),
            borrows: AtomicU64::new(0),
            opened_ms: AtomicU64::new(0),
            borrowed_ms: AtomicU64::new(0),
            active_ms: AtomicU64::new(0),
            returned_ms: AtomicU64::new(0),
            retire_after_ms: AtomicU64::new(u64::MAX),
            busy_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            lease: AtomicU64::new(0),
            conn: Cell::new(None),
        }
    }

    /// Runs `f` on the slot's connection.
    ///
    /// # Safety
    /// The caller must own the slot: it moved it to BORROWED, OPENING or CLOSING itself, or was
    /// handed it, and has not released it.
    pub(crate) unsafe fn with<R>(&self, f: impl FnOnce(&mut Option<C>) -> R) -> R {
        // SAFETY: the caller owns the slot, so no one else accesses the cell (module docs).
        self.conn.with_mut(|p| f(unsafe { &mut *p }))
    }
}

/// How a waiting borrower is woken.
pub(crate) enum Wake {
    /// A blocked thread: unparked.
    Thread(Thread),
    /// An async task: its waker, registered on every poll.
    Task(futures_util::task::AtomicWaker),
}

const WAITING: usize = usize::MAX;
const GAVE_UP: usize = usize::MAX - 1;

/// A borrower waiting for a slot. `state` is WAITING until a returner hands it slot `i` (state
/// = i) or it gives up (GAVE_UP): whichever CAS comes first wins.
pub(crate) struct Waiter {
    state: AtomicUsize,
    pub(crate) wake: Wake,
}

impl Waiter {
    pub(crate) fn new(wake: Wake) -> Waiter {
        Waiter {
            state: AtomicUsize::new(WAITING),
            wake,
        }
    }

    /// The slot handed to this waiter, if any.
    pub(crate) fn given(&self) -> Option<usize> {
        match self.state.load(Acquire) {
            WAITING | GAVE_UP => None,
            i => Some(i),
        }
    }

    /// Stops waiting. `Err(i)`: too late, slot `i` was handed over and now belongs to the
    /// caller.
    pub(crate) fn give_up(&self) -> Result<(), usize> {
        match self
            .state
            .compare_exchange(WAITING, GAVE_UP, AcqRel, Acquire)
        {
            Ok(_) => Ok(()),
            Err(i) => Err(i),
        }
    }

    /// Offers slot `i`; true if the waiter took it (and was woken).
    fn offer(&self, i: usize) -> bool {
        if self
            .state
            .compare_exchange(WAITING, i, AcqRel, Acquire)
            .is_err()
        {
            return false;
        }
        match &self.wake {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake(),
        }
        true
    }
}

/// The slots and the queue of waiters.
pub(crate) struct Core<C> {
    pub(crate) slots: Box<[Slot<C>]>,
    waiters: Queue<std::sync::Arc<Waiter>>,
    /// Borrowers counted as waiting (queued or about to be); see the module docs.
    pub(crate) waiting: AtomicUsize,
    /// Slots in use: borrows and opens look at `slots[..limit]` only (the pool's current
    /// maximum size; `resize` moves it).
    pub(crate) limit: AtomicUsize,
}

impl<C> Core<C> {
    /// A core of `capacity` slots, of which the first `limit` are used.
    pub(crate) fn new(capacity: usize, limit: usize) -> Core<C> {
        Core {
            slots: (0..capacity).map(|_| Slot::new()).collect(),
            waiters: Queue::new(),
            waiting: AtomicUsize::new(0),
            limit: AtomicUsize::new(limit.min(capacity)),
        }
    }

    /// The number of slots in use now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Relaxed).min(self.slots.len())
    }

    /// Claims an IDLE slot without waiting: one pass over the slots, busy ones skipped (a
    /// plain load first, so a busy slot costs no cache-line write).
    pub(crate) fn try_claim(&self) -> Option<usize> {
        self.scan(true)
    }

    /// The scan a waiter makes after queueing: a compare-and-swap on every slot, which reads the
    /// latest state where a plain load might not (see [`Core::release`]).
    pub(crate) fn try_claim_after_queueing(&self) -> Option<usize> {
        self.scan(false)
    }

    fn scan(&self, skip_busy_by_load: bool) -> Option<usize> {
        let n = self.limit();
        if n == 0 {
            return None;
        }
        let start = scan_start() % n;
        for k in 0..n {
            let i = (start + k) % n;
            let state = &self.slots[i].state;
            if skip_busy_by_load && state.load(Relaxed) != IDLE {
                continue;
            }
            if state
                .compare_exchange(IDLE, BORROWED, SeqCst, Relaxed)
                .is_ok()
            {
                return Some(i);
            }
        }
        None
    }

    /// Claims slot `i` if it is IDLE, as a borrow would (the reaper looks at idle connections
    /// this way, so it needs no transition of its own).
    pub(crate) fn claim_idle(&self, i: usize) -> bool {
        self.slots[i]
            .state
            .compare_exchange(IDLE, BORROWED, SeqCst, Relaxed)
            .is_ok()
    }

    /// Claims an EMPTY slot to open a connection in.
    pub(crate) fn claim_empty(&self) -> Option<usize> {
        (0..self.limit()).find(|&i| {
            self.slots[i]
                .state
                .compare_exchange(EMPTY, OPENING, AcqRel, Relaxed)
                .is_ok()
        })
    }

    /// Queues `waiter`; the caller then scans again with [`Core::try_claim`] before sleeping.
    pub(crate) fn enqueue(&self, waiter: std::sync::Arc<Waiter>) {
        self.waiting.fetch_add(1, SeqCst);
        self.waiters.push(waiter);
    }

    /// A waiter gave up waiting ([`Waiter::give_up`] returned `Ok`): it found a slot itself,
    /// timed out or was cancelled. (A waiter handed a slot is counted out by the returner.)
    pub(crate) fn done_waiting(&self) {
        self.waiting.fetch_sub(1, AcqRel);
    }

    /// Returns owned slot `i`, which holds a usable connection: to a waiter if one takes it,
    /// else IDLE.
    pub(crate) fn release(&self, i: usize) {
        loop {
            while let Some(w) = self.waiters.pop() {
                if w.offer(i) {
                    // Counted out here, not by the waiter: a woken waiter that has not run
                    // yet must not make other returners spin below.
                    self.waiting.fetch_sub(1, AcqRel);
                    return;
                }
            }
            // Either this read sees the waiter's count, or the waiter's scan (a CAS) sees the
            // slot IDLE: the swap, this read, the waiter's increment and its CAS are all
            // read-modify-writes, each reading the latest value (see `waiting_now`).
            self.slots[i].state.swap(IDLE, SeqCst);
            if waiting_now(&self.waiting) == 0 {
                return;
            }
            // Someone is waiting, or about to queue: its scan after queueing may already have
            // missed this slot. Take the slot back, unless a borrower got it (then it is
            // served, and the waiter gets the next return), and offer it again.
            if self.slots[i]
                .state
                .compare_exchange(IDLE, BORROWED, AcqRel, Relaxed)
                .is_err()
            {
                return;
            }
            if self.waiters.is_empty() {
                // Counted but not queued yet (or just leaving): let it move.
                crate::sync::yield_now();
            }
        }
    }

    /// Puts a newly opened connection into service: slot `i` (claimed EMPTY -> OPENING by
    /// the caller, now holding a connection) counts as lent until [`Core::release`] hands it to
    /// a waiter (it stays BORROWED, lent to them) or marks it IDLE.
    pub(crate) fn opened(&self, i: usize) {
        self.slots[i].state.store(BORROWED, SeqCst);
        self.release(i);
    }

    /// Starts a reclaimable lease on owned slot `i` as it is lent: even -> odd. Release, so a
    /// reclaimer that reads this lease also reads the borrow's times written before it.
    pub(crate) fn begin_lease(&self, i: usize) -> u64 {
        let lease = &self.slots[i].lease;
        let odd = lease.load(Relaxed) + 1;
        lease.store(odd, Release);
        odd
    }

    /// Ends lease `lease` on slot `i`, for the holder returning it or for a reclaimer taking
    /// it: odd -> even by compare-and-swap, so exactly one of the two wins and owns the slot
    /// afterwards. False: the other side won (the holder was reclaimed, or it returned first).
    pub(crate) fn end_lease(&self, i: usize, lease: u64) -> bool {
        self.slots[i]
            .lease
            .compare_exchange(lease, lease + 1, AcqRel, Relaxed)
            .is_ok()
    }

    /// The lease a reclaimer may end on slot `i`: `Some` while the slot is lent reclaimably.
    pub(crate) fn current_lease(&self, i: usize) -> Option<u64> {
        let lease = self.slots[i].lease.load(Acquire);
        (lease % 2 == 1).then_some(lease)
    }

    /// Gives up owned slot `i` (its connection was closed): EMPTY, for an opener to refill.
    pub(crate) fn vacate(&self, i: usize) {
        self.slots[i].state.store(EMPTY, Release);
    }
}

/// The waiter count as seen by a returner right after it marked a slot IDLE: a
/// read-modify-write, which reads the latest value in any memory model, so the code loom
/// checks is the code that runs. (A SeqCst load would also be correct under the C++ model, but
/// loom does not model SeqCst's store-load ordering and reports it as a lost wake-up; measured,
/// the RMW costs nothing visible: 21 ns uncontended borrow + return either way.)
fn waiting_now(waiting: &AtomicUsize) -> usize {
    waiting.fetch_add(0, SeqCst)
}

/// Where this thread's next scan starts: a per-thread counter, so borrowers spread over the
/// slots without sharing (and bouncing) a counter's cache line.
#[cfg(not(loom))]
fn scan_start() -> usize {
    thread_local!(static NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
    NEXT.with(|n| {
        let v = n.get().wrapping_add(1);
        n.set(v);
        // Threads start at different places: mix in the thread-local's address.
        v.wrapping_add(n as *const _ as usize >> 6)
    })
}

#[cfg(loom)]
fn scan_start() -> usize {
    0
}

/// Borrows a slot on the calling thread, parking until one is handed over: the blocking
/// borrower's protocol, shared by the pool and the loom model.
pub(crate) fn claim_blocking<C>(
    core: &Core<C>,
    deadline: Option<std::time::Instant>,
) -> Option<usize> {
    if let Some(i) = core.try_claim() {
        return Some(i);
    }
    let w = std::sync::Arc::new(Waiter::new(Wake::Thread(crate::sync::current_thread())));
    core.enqueue(w.clone());
    loop {
        if let Some(i) = w.given() {
            return Some(i);
        }
        if let Some(i) = core.try_claim_after_queueing() {
            return Some(keep_one(core, &w, i));
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => {
                    return match w.give_up() {
                        Ok(()) => {
                            core.done_waiting();
                            None
                        }
                        Err(j) => Some(j),
                    };
                }
            },
            None => None,
        };
        park_for(left);
    }
}

/// A waiter that claimed slot `i` by itself stops waiting; if a returner handed it a slot
/// meanwhile, it keeps that one and returns `i`. Returns the slot it keeps.
pub(crate) fn keep_one<C>(core: &Core<C>, w: &Waiter, i: usize) -> usize {
    match w.give_up() {
        Ok(()) => {
            core.done_waiting();
            i
        }
        Err(j) => {
            core.release(i);
            j
        }
    }
}

#[cfg(not(loom))]
fn park_for(left: Option<std::time::Duration>) {
    match left {
        Some(d) => std::thread::park_timeout(d),
        None => std::thread::park(),
    }
}

#[cfg(loom)]
fn park_for(_: Option<std::time::Duration>) {
    crate::sync::park();
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// A core with `n` slots, each holding connection value 0.
    fn filled(n: usize) -> Arc<Core<u32>> {
        let core = Arc::new(Core::new(n, n));
        while let Some(i) = core.claim_empty() {
            // SAFETY: claim_empty made this thread the slot's owner.
            unsafe { core.slots[i].with(|c| *c = Some(0)) };
            core.opened(i);
        }
        core
    }

    /// `borrowers` threads each borrow once, touch the connection (loom flags any concurrent
    /// access to the cell) and return it.
    fn run(slots: usize, borrowers: usize) {
        loom::model(move || {
            let core = filled(slots);
            let handles: Vec<_> = (0..borrowers)
                .map(|_| {
                    let core = core.clone();
                    thread::spawn(move || {
                        let i = claim_blocking(&core, None).expect("no deadline");
                        // SAFETY: claim_blocking returned an owned slot.
                        unsafe { core.slots[i].with(|c| *c.as_mut().unwrap() += 1) };
                        core.release(i);
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let mut total = 0;
            for slot in core.slots.iter() {
                assert_eq!(slot.state.load(SeqCst), IDLE, "a slot was lost");
                // SAFETY: every borrower has finished.
                total += unsafe { slot.with(|c| c.unwrap()) };
            }
            assert_eq!(total as usize, borrowers, "every borrow got a connection");
            assert_eq!(core.waiting.load(SeqCst), 0);
        });
    }

    /// A waiter gives up (a timeout, a dropped future) while the holder returns the slot: the
    /// slot ends IDLE whichever wins, never lost and never lent twice.
    #[test]
    fn loom_a_waiter_giving_up_never_loses_the_slot() {
        loom::model(|| {
            let core = filled(1);
            let held = core.try_claim().expect("one idle slot");
            let waiter = {
                let core = core.clone();
                thread::spawn(move || {
                    let w = std::sync::Arc::new(Waiter::new(Wake::Thread(
                        crate::sync::current_thread(),
                    )));
                    core.enqueue(w.clone());
                    let got = match core.try_claim_after_queueing() {
                        Some(i) => Some(keep_one(&core, &w, i)),
                        None => match w.give_up() {
                            Ok(()) => {
                                core.done_waiting();
                                None
                            }
                            Err(j) => Some(j),
                        },
                    };
                    if let Some(i) = got {
                        // SAFETY: the slot was claimed or handed to this thread.
                        unsafe { core.slots[i].with(|c| *c.as_mut().unwrap() += 1) };
                        core.release(i);
                    }
                })
            };
            // SAFETY: `held` was claimed by this thread.
            unsafe { core.slots[held].with(|c| *c.as_mut().unwrap() += 1) };
            core.release(held);
            waiter.join().unwrap();
            assert_eq!(core.slots[0].state.load(SeqCst), IDLE);
            assert_eq!(core.waiting.load(SeqCst), 0);
        });
    }

    /// A holder returns a slot while the reclaimer takes it (time-to-live): exactly one wins;
    /// the slot ends IDLE (the holder won) or EMPTY (reclaimed), never both, never lost.
    #[test]
    fn loom_a_return_racing_a_reclaim_has_one_winner() {
        loom::model(|| {
            let core = filled(1);
            let i = core.try_claim().expect("one idle slot");
            let lease = core.begin_lease(i);
            let reclaimer = {
                let core = core.clone();
                thread::spawn(move || match core.current_lease(0) {
                    Some(l) if core.end_lease(0, l) => {
                        // SAFETY: winning the lease made this thread the slot's owner.
                        unsafe { core.slots[0].with(|c| *c = None) };
                        core.vacate(0);
                        true
                    }
                    _ => false,
                })
            };
            let returned = core.end_lease(i, lease);
            if returned {
                // SAFETY: the holder won the lease and owns the slot.
                unsafe { core.slots[i].with(|c| *c.as_mut().unwrap() += 1) };
                core.release(i);
            }
            let reclaimed = reclaimer.join().unwrap();
            assert!(returned != reclaimed, "exactly one side owns the slot");
            let state = core.slots[0].state.load(SeqCst);
            assert_eq!(state, if returned { IDLE } else { EMPTY });
        });
    }

    #[test]
    fn loom_two_borrowers_one_slot() {
        run(1, 2);
    }

    #[test]
    fn loom_three_borrowers_one_slot() {
        run(1, 3);
    }

    #[test]
    fn loom_three_borrowers_two_slots() {
        run(2, 3);
    }
}
