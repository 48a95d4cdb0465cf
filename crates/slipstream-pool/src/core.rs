//! The slot state machine and the queue of waiting borrowers: the part of the pool that must be
//! right under every interleaving, checked by loom (`make loom`; `make loom-full` after a change
//! here).
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
//! successful compare-and-swap, or was handed the slot by a returner: that is the whole of the
//! mutual exclusion. Borrowing scans the slots (starting at the slot this thread last
//! returned) and skips busy ones; it never waits on a slot.
//!
//! # Waiting: barging with eventual fairness
//!
//! A borrower that finds no IDLE slot rescans a few times (spinning, then yielding), and only
//! then queues an entry in the wait queue (a slab under a mutex: entries are reused, so a wait
//! allocates nothing once the queue has grown to the most waiters seen), counts itself in
//! `waiting` and, if it is the head, scans once more before it sleeps (a waiter behind
//! another leaves that to the head: see `Wait::begin`). A returner that hands a slot over puts it
//! in the waiter's mailbox and frees the entry, so a served waiter reads its mailbox and takes
//! no lock. The mailbox is in the waiter's own pinned node ([`Wait`]: a task's future, or on a
//! blocked thread's stack), which the entry points at: the node's drop leaves the queue under
//! the lock, so the queue never points at a dead mailbox, and the hand-off's store is the last
//! touch of the waiter's memory.
//!
//! A returner marks its slot IDLE and reads `waiting`: zero (the common case) and it is done,
//! with no lock. Otherwise it wakes the head waiter, unless a woken waiter has not looked yet
//! (at most one wake is in flight). The woken waiter scans like any borrower and may lose the
//! slot to a running borrower ("barging", as parking_lot's and Go's locks do: no context
//! switch per borrow); it then keeps its place at the head and sleeps again. Once the head
//! has waited longer than the fairness bound (`fair_after`, 1 ms in the pool), the pool turns
//! strict: returners hand their slot straight to the head (the slot never becomes IDLE, so no
//! one can barge) until the head has waited less than the bound.
//!
//! A thread handed a slot that way gets a slice (a count of borrows, sized so that each
//! waiter's turn comes round within about `ROUND`, the sizing corrected by the rounds
//! measured: `next_scale`): its returns during the slice go the barging way (IDLE, at most
//! one wake), so it takes the slot straight back, and only the return that ends the slice
//! hands over. While a waiter starves, that IDLE slot is its slice holder's alone: a thread's
//! blocking borrow then queues at once unless it is in its slice, and then claims only the
//! slot it returned (`Core::try_claim_blocking`); a waiter queued behind the head does not
//! scan; and a dozing head (below) claims only a slot it saw IDLE and unborrowed on two looks
//! a doze apart (`Core::look_twice`), which then starts its turn. Before, any scan took such a
//! slot in the moment between its holder's return and next borrow, and the holder, its slice
//! cut short, queued and took the next holder's slot on its own look: thousands of cut
//! slices a second at 10,000 threads, and turns of unequal length. While a woken waiter has yet to look, such a return
//! takes no lock: the `WOKEN` bit in `waiting` says so, and the woken waiter's look will see
//! the slot (see `sync_woken`). A blocked thread woken at the head of a starving queue that
//! finds nothing stays the woken waiter and dozes: it parks with a timeout (`DOZE`, 0.5 ms,
//! doubled after each doze that finds nothing, up to `MAX_DOZE`, 4 ms) and looks again, so
//! slice returns keep taking no lock and waking no one, and a slot they left IDLE is found
//! within a doze once its holder stops borrowing. Before, each such return
//! woke the head only for it to lose the slot to the slice holder and park again.
//! A thread that has handed its slot to a starving waiter queues at its next borrow instead
//! of taking a slot another slice holder just left IDLE: the back of the line, not a barge.
//! Without slices, every borrow under starvation paid a futex wake and a context switch (at
//! 10,000 threads, a hand-off per borrow); with them, one per slice. A slice's returns take
//! the same path as returns when no one starves (or stop short of its lock, above), and a
//! thread that queues at once follows a failed scan's path, so the no-lost-wake-up argument
//! below covers them. Loom runs slices' returns (their sizes and clocks are not modelled) in
//! `loom_a_hand_off_to_the_woken_waiter_passes_its_look_on` and
//! `loom_a_waiter_is_served_when_slice_holders_stop`.
//!
//! No return ever waits for another thread to make progress: it takes the queue's mutex only
//! while someone waits, for a few instructions, and never spins.
//!
//! Both sides touch `waiting` with read-modify-writes: the returner marks its slot IDLE and
//! then reads `waiting` with an RMW (adding 0), the waiter counts itself with an RMW and then
//! scans. RMWs on one location are totally ordered: either the returner's comes later and
//! reads the waiter's count (it wakes or hands over), or it comes earlier, and the waiter's
//! RMW reads from its release sequence, so the returner's IDLE store happens before the
//! waiter's scan, which therefore sees IDLE (or a later borrower's claim). No wake-up is lost,
//! and the scan needs only loads, with a CAS on the IDLE slots it finds. A waiter queued
//! behind another skips that scan: the waiters ahead were counted before it, so such a
//! return either read them and woke the head (or found a woken waiter yet to look), or came
//! before the head's own scan; a head that leaves or is handed a slot wakes the next one if a
//! slot is IDLE (`leave`, `hand_to_head`), so the slot is found by whoever is head.
//!
//! Invariants (what loom checks):
//! - a slot is lent to at most one holder at a time (the cell is never accessed concurrently);
//! - a returned slot is either IDLE or handed to exactly one waiter, never lost;
//! - a waiter whose slot was handed to it is woken, and one that gives up (a timeout, a
//!   dropped future) returns a slot handed to it meanwhile and passes its wake-up on;
//! - a dozing head finds a slot left IDLE by returns that skipped their wake for it (loom
//!   models its timed park as a yield: it may run again before anyone unparks it).

use std::future::Future;
use std::marker::PhantomPinned;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::sync::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Cell, Mutex, Ordering::*, Thread,
};

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
    /// Of those, claims that lent nothing: a borrow claims an idle connection before it knows
    /// it can lend it, and one found closed, failing validation or not relabeled is closed
    /// instead. Kept apart because `borrows` is also the stamp that tells a thread whether
    /// its slot was borrowed since it returned it, and a stamp taken back could repeat.
    /// Written by the slot's owner.
    pub(crate) unlent: AtomicU64,
    /// The slot's lends (`borrows - unlent`) before its connection opened: a slot outlives
    /// its connections, and a connection's count starts at its open.
    pub(crate) lends_before_open: AtomicU64,
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
    /// Borrows that waited and got this slot, by wait: bucket k counts waits of 2^k to
    /// 2^(k+1) µs. Written by the slot's owner.
    pub(crate) wait_buckets: [AtomicU64; WAIT_BUCKETS],
    conn: Cell<Option<C>>,
}

/// Buckets of the wait histogram: the last one takes every wait from 2^31 µs (36 minutes).
pub(crate) const WAIT_BUCKETS: usize = 32;

// SAFETY: the connection in `conn` is accessed only by the single owner that won the CAS moving
// the slot out of IDLE/EMPTY (see the module docs), so sharing a `Slot` between threads shares
// no access to `C`; moving `C` between threads needs `C: Send`.
unsafe impl<C: Send> Sync for Slot<C> {}

impl<C> Slot<C> {
    /// Connections this slot has lent (claims that lent nothing left out).
    pub(crate) fn lends(&self) -> u64 {
        // Relaxed: a statistic; `unlent` never passes `borrows` (it counts a subset of its
        // claims), and a stale pair only lags.
        let unlent = self.unlent.load(Relaxed);
        self.borrows.load(Relaxed).saturating_sub(unlent)
    }

    fn new() -> Slot<C> {
        Slot {
            state: AtomicU8::new(EMPTY),
            borrows: AtomicU64::new(0),
            unlent: AtomicU64::new(0),
            lends_before_open: AtomicU64::new(0),
            opened_ms: AtomicU64::new(0),
            borrowed_ms: AtomicU64::new(0),
            active_ms: AtomicU64::new(0),
            returned_ms: AtomicU64::new(0),
            retire_after_ms: AtomicU64::new(u64::MAX),
            busy_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            lease: AtomicU64::new(0),
            wait_buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            conn: Cell::new(None),
        }
    }

    /// Runs `f` on the slot's connection. Owners go through [`Core::conn`], which takes the
    /// proof of ownership; this is for the loom models' final check, after every thread ended.
    ///
    /// # Safety
    /// No one else may access the slot's connection meanwhile.
    pub(crate) unsafe fn with<R>(&self, f: impl FnOnce(&mut Option<C>) -> R) -> R {
        // SAFETY: the caller owns the slot, so no one else accesses the cell (module docs).
        self.conn.with_mut(|p| f(unsafe { &mut *p }))
    }
}

/// How a waiting borrower is woken.
pub(crate) enum Wake {
    /// A blocked thread: unparked.
    Thread(Thread),
    /// An async task: the waker of its latest poll.
    Task(Waker),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake(),
        }
    }
}

const NIL: usize = usize::MAX;

/// An empty mailbox: no slot handed over (yet).
const NONE: usize = usize::MAX;
/// A mailbox that says the waiter's deadline passed: the deadline task took its entry out of
/// the queue ([`Core::expire`]), as a hand-off does, with no slot. Never a slot's index (the
/// pool has at most `MAX_CONNECTIONS` slots).
const EXPIRED: usize = usize::MAX - 1;

/// One waiting borrower's entry in the queue.
struct Entry {
    prev: usize,
    next: usize,
    /// Linked in the queue (false once handed a slot, or free).
    queued: bool,
    /// Where a returner puts the slot it hands over (the waiter owns it from then on): the
    /// mailbox inside the waiter's pinned [`Wait`], so the waiter reads it without the lock.
    /// Dereferenced only under the lock while the entry is queued; see [`Core::enqueue`] for
    /// why it is valid then.
    mailbox: *const AtomicUsize,
    /// When it has waited past its fairness bound.
    due: Due,
    /// An async task (else a blocked thread): while one is queued, returns hand over and
    /// threads get no slices (`head_starving`, `start_slice`).
    task: bool,
    /// When a task's borrow gives up: the pool's deadline task wakes it then
    /// ([`Core::expire`]). `None` for a blocked thread, which times its own park.
    deadline: Option<Instant>,
    wake: Option<Wake>,
}

/// When a waiter has waited past its fairness bound.
#[derive(Clone, Copy)]
enum Due {
    /// Never: no bound (it would overflow the clock).
    Never,
    /// From the start: a zero bound (tasks by default), known without reading the clock,
    /// which costs a returner about 30 ns a read on this project's machines.
    Now,
    At(Instant),
}

impl Due {
    fn after(bound: Duration) -> Due {
        if bound.is_zero() {
            return Due::Now;
        }
        match Instant::now().checked_add(bound) {
            Some(at) => Due::At(at),
            None => Due::Never,
        }
    }

    fn passed(self) -> bool {
        match self {
            Due::Never => false,
            Due::Now => true,
            Due::At(at) => Instant::now() >= at,
        }
    }
}

/// The waiting borrowers, oldest first: a doubly linked list in a slab, so leaving from the
/// middle (a timeout) costs O(1) and a wait allocates only while the slab grows.
struct WaitQueue {
    entries: Vec<Entry>,
    /// Free entries, reused last freed first (its line is the likeliest to be in a cache
    /// still): an entry holds nothing of its last waiter once freed, so any is as good.
    free: Vec<usize>,
    head: usize,
    tail: usize,
    /// The entry woken and not yet looked at the slots: at most one wake is in flight.
    woken: usize,
    /// Queued entries that are tasks.
    tasks: usize,
    /// When the deadline task will next look at the deadlines, at the latest (`None`: not
    /// until told to). A task queued with an earlier deadline tells it ([`Queued::sooner`]);
    /// one queued with a later deadline, the common case, costs it nothing.
    looks_by: Option<Instant>,
}

// SAFETY: the only field that is not `Send` is each entry's `mailbox` pointer, to an
// `AtomicUsize` (which is `Sync`) in a waiter's pinned `Wait`; it is dereferenced only by the
// holder of the queue's lock while the entry is queued, when the `Wait` is alive whichever
// thread it lives on (`Core::enqueue`).
unsafe impl Send for WaitQueue {}

impl WaitQueue {
    fn new() -> WaitQueue {
        WaitQueue {
            entries: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            woken: NIL,
            tasks: 0,
            looks_by: None,
        }
    }

    /// Queues a waiter at the tail: its entry's id.
    fn push(
        &mut self,
        wake: Wake,
        due: Due,
        deadline: Option<Instant>,
        mailbox: *const AtomicUsize,
    ) -> usize {
        let tail = self.tail;
        let task = matches!(wake, Wake::Task(_));
        self.tasks += usize::from(task);
        let id = match self.free.pop() {
            Some(id) => {
                let e = &mut self.entries[id];
                e.mailbox = mailbox;
                e.prev = tail;
                e.next = NIL;
                e.queued = true;
                e.due = due;
                e.task = task;
                e.deadline = deadline;
                e.wake = Some(wake);
                id
            }
            None => {
                self.entries.push(Entry {
                    prev: tail,
                    next: NIL,
                    queued: true,
                    mailbox,
                    due,
                    task,
                    deadline,
                    wake: Some(wake),
                });
                self.entries.len() - 1
            }
        };
        match self.tail {
            NIL => self.head = id,
            t => self.entries[t].next = id,
        }
        self.tail = id;
        id
    }

    fn unlink(&mut self, id: usize) {
        let (prev, next) = (self.entries[id].prev, self.entries[id].next);
        match prev {
            NIL => self.head = next,
            p => self.entries[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.entries[n].prev = prev,
        }
        let e = &mut self.entries[id];
        e.queued = false;
        e.prev = NIL;
        e.next = NIL;
        self.tasks -= usize::from(e.task);
        if self.woken == id {
            self.woken = NIL;
        }
    }

    /// Frees entry `id`: its waker, for the caller to drop outside the lock (user code).
    fn release_entry(&mut self, id: usize) -> Option<Wake> {
        let e = &mut self.entries[id];
        e.mailbox = std::ptr::null();
        let wake = e.wake.take();
        self.free.push(id);
        wake
    }

    /// Marks the head woken and returns how to wake it, unless a wake is already in flight.
    fn wake_head(&mut self) -> Option<Wake> {
        if self.woken != NIL || self.head == NIL {
            return None;
        }
        // Cloned before the head is marked woken: the clone is user code and may panic, and a
        // head marked woken that no one woke would hold every later wake back.
        let wake = clone_wake(&self.entries[self.head].wake);
        self.woken = self.head;
        wake
    }
}

fn clone_wake(w: &Option<Wake>) -> Option<Wake> {
    match w {
        Some(Wake::Thread(t)) => Some(Wake::Thread(t.clone())),
        Some(Wake::Task(w)) => Some(Wake::Task(w.clone())),
        None => None,
    }
}

/// Proof that its holder owns slot `index()`: it moved the slot out of IDLE or EMPTY with a
/// compare-and-swap, was handed the slot by a returner, or won the slot's lease. Made only in
/// this module, never cloned, and consumed by [`Core::release`], [`Core::opened`] and
/// [`Core::vacate`] (or turned into a [`Lease`] while lent reclaimably), so "the caller owns
/// slot i" is checked by the compiler rather than by a comment.
#[must_use = "an owned slot must be released, vacated or lent"]
pub(crate) struct Owned(usize);

impl Owned {
    pub(crate) fn index(&self) -> usize {
        self.0
    }
}

/// A reclaimable loan of a slot: the holder (returning) and the reclaimer each try to end it;
/// exactly one gets the slot's [`Owned`] back ([`Core::end_lease`]).
pub(crate) struct Lease {
    slot: usize,
    value: u64,
}

impl Lease {
    /// The lease counter's value while this loan lasts (odd).
    pub(crate) fn value(&self) -> u64 {
        self.value
    }
}

/// A queued waiter's state, borrowed from its pinned [`Wait`] by the queue operations.
///
/// The entry `id` is the waiter's while its mailbox is empty: a returner that hands it a
/// slot fills the mailbox and frees the entry in one step under the lock. So a waiter reads
/// its mailbox without the lock (a served waiter takes no lock at all), and under the lock
/// an empty mailbox proves the entry is still its own. The mailbox is the waiter's own (in
/// its pinned [`Wait`]), borrowed for `'w`.
///
/// The operations record what they did here (the entry freed, a slot got) before any user
/// code runs: a waker's clone, wake or drop, which may panic. So a panic leaves this state
/// true, and the `Wait`'s drop finishes the job: it leaves the queue if still queued and
/// returns a slot got and not yet passed to its caller. Without this, a waker that panicked
/// on drop left an entry pointing at a freed mailbox (tests/attack_waiter_node.rs).
pub(crate) struct Ticket<'w> {
    /// The queue entry while queued; cleared when the entry is freed (by this waiter, under
    /// the lock; by a returner's hand-off, seen in the mailbox).
    id: &'w mut Option<usize>,
    /// A slot this waiter owns and has not yet passed to its caller.
    got: &'w mut Option<Owned>,
    mailbox: &'w AtomicUsize,
    /// A dozing head's last look: the first IDLE slot it saw and that slot's borrow count.
    seen: &'w mut Option<(usize, u64)>,
    /// Its deadline passed: the deadline task took it out of the queue ([`EXPIRED`]).
    expired: &'w mut bool,
}

impl Ticket<'_> {
    /// Takes the slot handed to this waiter, if any, into `got`: true if there was one (its
    /// entry was freed with the hand-off). Acquire: pairs with the returner's release store,
    /// so the connection it put back is visible.
    fn take_given(&mut self) -> bool {
        match self.mailbox.load(Acquire) {
            NONE => false,
            EXPIRED => {
                // The entry is freed, as with a hand-off; nothing was handed.
                self.mailbox.store(NONE, Relaxed);
                *self.id = None;
                *self.expired = true;
                true
            }
            i => {
                // Emptied so the slot is taken once; no returner writes here any more (the
                // entry is freed), so a plain store suffices.
                self.mailbox.store(NONE, Relaxed);
                *self.id = None;
                *self.got = Some(Owned(i));
                true
            }
        }
    }
}

/// User code that a queue operation leaves for after the lock, once the queue and the
/// waiter's own state are whole again: waking another waiter, dropping this waiter's waker.
/// Either may panic.
#[must_use = "a wake left for later must be run"]
/// The wakes a return owes, made after the queue's lock: the waiter handed a slot (if any),
/// then a head woken to look at an IDLE slot.
struct Woken {
    handed: Option<Wake>,
    next: Option<Wake>,
}

impl Woken {
    fn wake(self) {
        // The handed waiter first: it holds a slot, and a panic in the other wake (a task's
        // waker is user code) must not leave it asleep.
        if let Some(w) = self.handed {
            w.wake();
        }
        if let Some(w) = self.next {
            w.wake();
        }
    }
}

struct Later {
    wake: Option<Wake>,
    old: Option<Wake>,
}

impl Later {
    fn run(self) {
        let Later { wake, old } = self;
        // The other waiter's wake first: a panic in dropping this waiter's waker must not
        // lose it.
        if let Some(w) = wake {
            w.wake();
        }
        drop(old);
    }
}

/// The count of waiters, the hint that the head starves, and the queue.
pub(crate) struct Waiters {
    /// Borrowers queued, times [`ONE_WAITER`], plus [`WOKEN`] while a woken waiter has not
    /// looked yet (see the module docs). One word, so a returner's one read-modify-write reads
    /// both. Changed only under `queue`'s lock; read by [`Waiters::count`].
    waiting: AtomicUsize,
    /// The head waiter has waited past `fair_after`: returners hand over instead of marking
    /// IDLE. A hint read without the lock; the lock's holder decides.
    starving: AtomicBool,
    /// A task is queued: a thread handed a slot then gets one borrow, not a slice, since a
    /// task's turn is one borrow and slices would give threads hundreds of times the tasks'
    /// share (`start_slice`). A hint read without the lock, stored under it when it changes.
    tasks_queued: AtomicBool,
    /// Wall nanoseconds per borrow in the last slice that ended (0: none yet); sizes the next
    /// slice (`slice_len`). Written once per slice.
    borrow_ns: AtomicU64,
    /// The factor on slices' lengths (an `f32`'s bits) that makes a round of the queue last
    /// [`ROUND`]: learnt from how long the threads handed a slot waited (`next_scale`).
    /// Written once per slice.
    round_scale: AtomicU32,
    queue: Mutex<WaitQueue>,
}

/// `Waiters::waiting`'s unit: one queued borrower.
const ONE_WAITER: usize = 2;
/// `Waiters::waiting`'s low bit: a waiter was woken and has not looked at the slots yet, so
/// it will (the queue's `woken`, readable without the lock).
const WOKEN: usize = 1;

impl Waiters {
    /// Borrowers queued now.
    pub(crate) fn count(&self, order: std::sync::atomic::Ordering) -> usize {
        self.waiting.load(order) / ONE_WAITER
    }
}

/// The slots and the queue of waiters.
pub(crate) struct Core<C> {
    /// Cache-padded: a borrow's CAS on one slot does not invalidate its neighbours' lines.
    pub(crate) slots: Box<[CachePadded<Slot<C>>]>,
    /// The waiters: together on one pair of cache lines, since a returner that finds waiters
    /// reads the count and the hint and takes the lock, and each line missed under the lock
    /// holds the other worker up (measured: docs/benchmarks.md, pool-scaling).
    pub(crate) q: CachePadded<Waiters>,
    /// The fairness bounds: how long a head waiter (a thread, a task) may wait before
    /// hand-off turns strict.
    fair_after_thread: Duration,
    fair_after_task: Duration,
    /// Slots in use: borrows and opens look at `slots[..limit]` only (the pool's current
    /// maximum size; `resize` moves it).
    pub(crate) limit: AtomicUsize,
}

/// The fairness bound for threads: about parking_lot's fair timeout (0.5 ms) and Go's
/// starvation threshold (1 ms).
pub(crate) const FAIR_AFTER: Duration = Duration::from_millis(1);

/// The bound for tasks: none, every return hands over while tasks wait. Measured (docs/
/// benchmarks.md, pool-scaling): with the thread bound, a returning task re-borrows its own
/// slot at once (it does not yield between return and borrow), so barging let a few tasks
/// keep the slots (Jain 0.65 at T = 1,000), and a hand-off costs a task no context switch.
pub(crate) const TASK_FAIR_AFTER: Duration = Duration::ZERO;

impl<C> Core<C> {
    /// A core of `capacity` slots, of which the first `limit` are used.
    pub(crate) fn new(capacity: usize, limit: usize) -> Core<C> {
        Core::with_fairness(capacity, limit, FAIR_AFTER, TASK_FAIR_AFTER)
    }

    pub(crate) fn with_fairness(
        capacity: usize,
        limit: usize,
        fair_after_thread: Duration,
        fair_after_task: Duration,
    ) -> Core<C> {
        Core {
            slots: (0..capacity)
                .map(|_| CachePadded::new(Slot::new()))
                .collect(),
            q: CachePadded::new(Waiters {
                waiting: AtomicUsize::new(0),
                starving: AtomicBool::new(false),
                tasks_queued: AtomicBool::new(false),
                borrow_ns: AtomicU64::new(0),
                round_scale: AtomicU32::new(1.0f32.to_bits()),
                queue: Mutex::new(WaitQueue::new()),
            }),
            fair_after_thread,
            fair_after_task,
            limit: AtomicUsize::new(limit.min(capacity)),
        }
    }

    /// The number of slots in use now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Relaxed).min(self.slots.len())
    }

    /// Claims an IDLE slot without waiting: one pass over the slots, busy ones skipped (a
    /// plain load first, so a busy slot costs no cache-line write).
    #[inline]
    pub(crate) fn try_claim(&self) -> Option<Owned> {
        self.scan()
    }

    /// [`Core::try_claim`] for a borrower that will queue if it finds nothing: none while a
    /// waiter starves, without looking. Returns then hand slots straight to the queue's head,
    /// so a scan would read every slot's line (written by the other workers) to find nothing
    /// but a slot in flight, which the scan after queueing finds. (For a thread's blocking
    /// borrow, see [`Core::try_claim_blocking`].)
    #[inline]
    pub(crate) fn try_claim_unless_starving(&self) -> Option<Owned> {
        // Relaxed: a hint; missing an IDLE slot here only sends the borrower to queue.
        if self.q.starving.load(Relaxed) {
            return None;
        }
        self.scan()
    }

    /// [`Core::try_claim`] for a thread's blocking borrow. While a waiter starves, only a
    /// thread in its slice claims, and only the slot it last returned: every other slot that
    /// is IDLE then is another slice holder's, between its return and its next borrow, and
    /// taking it would cut that slice short (its holder then queued, and its own first look
    /// took yet another holder's slot: measured, a cascade of several thousand cut slices a
    /// second at 10,000 threads, docs/benchmarks.md, pool-scaling). Everyone else queues.
    #[inline]
    pub(crate) fn try_claim_blocking(&self) -> Option<Owned> {
        // Relaxed: a hint; a stale "starving" sends the borrower to queue (whose look finds
        // an IDLE slot if no one starves), a stale "not starving" lets it barge once.
        if self.q.starving.load(Relaxed) {
            return self.reclaim_own();
        }
        self.scan()
    }

    /// The slot this thread last returned, if it is in a slice here, the slot is IDLE and no
    /// one has borrowed it since. (A slot of another pool's, or one the dozing head took while
    /// this thread stopped mid-slice and that is now another slice holder's, is not its own.)
    fn reclaim_own(&self) -> Option<Owned> {
        if !in_slice_here(self) {
            return None;
        }
        let i = last_returned(self)?;
        if i >= self.limit() {
            return None;
        }
        // SeqCst, as in `scan`.
        self.slots[i]
            .state
            .compare_exchange(IDLE, BORROWED, SeqCst, Relaxed)
            .is_ok()
            .then_some(Owned(i))
    }

    #[inline]
    fn scan(&self) -> Option<Owned> {
        let n = self.limit();
        if n == 0 {
            return None;
        }
        // A compare first: the remainder is a division on every borrow (about 1 ns of an
        // uncontended one, measured), needed only for a thread's first scan or after a shrink.
        let start = match scan_start() {
            s if s < n => s,
            s => s % n,
        };
        for k in 0..n {
            let i = if start + k >= n {
                start + k - n
            } else {
                start + k
            };
            let state = &self.slots[i].state;
            // Relaxed load: only a hint; the CAS decides.
            if state.load(Relaxed) != IDLE {
                continue;
            }
            // SeqCst: pairs with the returner's SeqCst swap to IDLE and its read of `waiting`
            // (module docs); success also acquires the connection the returner put back.
            if state
                .compare_exchange(IDLE, BORROWED, SeqCst, Relaxed)
                .is_ok()
            {
                return Some(Owned(i));
            }
        }
        None
    }

    fn any_idle(&self) -> bool {
        (0..self.limit()).any(|i| self.slots[i].state.load(Relaxed) == IDLE)
    }

    /// Claims slot `i` if it is IDLE, as a borrow would (the reaper looks at idle connections
    /// this way, so it needs no transition of its own).
    pub(crate) fn claim_idle(&self, i: usize) -> Option<Owned> {
        self.slots[i]
            .state
            .compare_exchange(IDLE, BORROWED, SeqCst, Relaxed)
            .is_ok()
            .then_some(Owned(i))
    }

    /// Runs `f` on the connection in owned slot `o`.
    pub(crate) fn conn<R>(&self, o: &Owned, f: impl FnOnce(&mut Option<C>) -> R) -> R {
        // SAFETY: `o` proves the caller owns the slot (see `Owned`), so no one else accesses
        // its cell until `o` is consumed.
        unsafe { self.slots[o.0].with(f) }
    }

    /// Claims an EMPTY slot to open a connection in.
    pub(crate) fn claim_empty(&self) -> Option<Owned> {
        (0..self.limit())
            .find(|&i| {
                // Acquire: pairs with `vacate`'s release, so the cell's last use happened before.
                self.slots[i]
                    .state
                    .compare_exchange(EMPTY, OPENING, AcqRel, Relaxed)
                    .is_ok()
            })
            .map(Owned)
    }

    /// Queues a waiter woken by `wake`, with `mailbox` (empty) for a returner to hand it a
    /// slot, and a task's `deadline` for the deadline task ([`Core::expire`]). It then calls
    /// [`Core::poll_served`] until served, or [`Core::cancel`]. Only [`Wait`] calls it, with
    /// the mailbox inside itself. `Err(waiting)`: `max_waiters` already wait, so it is not
    /// queued.
    ///
    /// # Safety
    /// `mailbox` must stay where it is, alive, until the waiter is served (its mailbox read
    /// non-empty) or has left the queue (`look` claiming a slot, or `cancel`). A returner
    /// writes to it (under the lock) until then, and never after: the hand-off frees the entry
    /// as it fills the mailbox, and leaving unlinks the entry under the lock.
    unsafe fn enqueue(
        &self,
        wake: Wake,
        mailbox: &AtomicUsize,
        max_waiters: usize,
        deadline: Option<Instant>,
    ) -> Result<Queued, usize> {
        let bound = match wake {
            Wake::Thread(_) => self.fair_after_thread,
            Wake::Task(_) => self.fair_after_task,
        };
        let due = Due::after(bound);
        let mut q = lock(&self.q.queue);
        // The room check, here rather than before the lock: every change of the count is made
        // under this lock, so this read is exact, and the count shares the lock's lines, so it
        // costs no trip of its own to a line the returners write.
        let waiting = self.q.count(Relaxed);
        if waiting >= max_waiters {
            drop(q);
            // Dropped outside the lock: a waker's drop is user code.
            drop(wake);
            return Err(waiting);
        }
        let behind = q.head != NIL;
        // A thread's deadline is its own park's; only a task's is the deadline task's.
        let deadline = deadline.filter(|_| matches!(wake, Wake::Task(_)));
        // The deadline task looks by `looks_by`, which it sets to the earliest deadline
        // queued or else to its look plus the borrow timeout (at least a second): a task
        // queued now with the pool's timeout is due no sooner, and tells it nothing. Only an
        // earlier one (a borrow waiting again on its first deadline, after a failed
        // validation; the first of a wave when the timeout is under a second) moves the look
        // forward, once: later ones compare with the deadline it set.
        let sooner = deadline.is_some_and(|d| q.looks_by.is_none_or(|by| d < by));
        if sooner {
            q.looks_by = deadline;
        }
        let id = q.push(wake, due, deadline, mailbox);
        if q.entries[id].task {
            // Returns hand over from now on (`head_starving`), and threads stop barging. (A
            // thread's entry changes neither hint.)
            self.update_hints(&q);
        }
        // SeqCst RMW, after queueing and before the waiter's scan: the waiter's half of the
        // no-lost-wake-up argument (module docs).
        self.q.waiting.fetch_add(ONE_WAITER, SeqCst);
        Ok(Queued { id, behind, sooner })
    }

    /// The deadline task's look at `now`: takes each queued task whose deadline has passed
    /// out of the queue, as a hand-off would but with [`EXPIRED`] in its mailbox, so the task
    /// itself never reads a clock and the deadline task's clock (tokio's, which a test may
    /// pause) alone decides. Its wake, and the next head's if a slot is IDLE (as any leave),
    /// go into `wakes`, to make after the lock: a waker is user code. Returns when to look
    /// next: at the earliest deadline still queued, else at `idle_look` (this look plus the
    /// borrow timeout, at least a second: a task queued from now on and due before it says
    /// so, [`Queued::sooner`]). `None`: no look is
    /// needed until a task queues with a deadline (which then says so, [`Queued::sooner`]).
    pub(crate) fn expire(
        &self,
        now: Instant,
        idle_look: Option<Instant>,
        wakes: &mut Wakes,
    ) -> Option<Instant> {
        let mut q = lock(&self.q.queue);
        let mut next: Option<Instant> = None;
        let mut id = q.head;
        while id != NIL {
            let e = &q.entries[id];
            // Read before the entry leaves: leaving changes its neighbours' links, not the
            // next entry's place in the queue.
            let after = e.next;
            match e.deadline {
                Some(d) if d <= now => {
                    let mailbox = e.mailbox;
                    let Later { wake, old } = self.leave(&mut q, id);
                    // Release: pairs with the waiter's Acquire read (`take_given`). The last
                    // touch of the waiter's memory, as a hand-off's store is.
                    // SAFETY: the entry was queued and we hold the lock, so its waiter has
                    // neither read its mailbox nor left the queue, and its `Wait`, pinned, is
                    // still alive where it was queued (`Core::enqueue`).
                    unsafe { (*mailbox).store(EXPIRED, Release) };
                    wakes.0.extend(old);
                    wakes.0.extend(wake);
                }
                Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                None => {}
            }
            id = after;
        }
        q.looks_by = next.or(idle_look);
        q.looks_by
    }

    /// Every queued task's wake, into `wakes`, to make after the lock: the pool's runtime has
    /// shut down, and with it the deadline task, so each task must look at the pool's state
    /// now rather than wait for a deadline no one keeps any more.
    pub(crate) fn every_task(&self, wakes: &mut Wakes) {
        let q = lock(&self.q.queue);
        let mut id = q.head;
        while id != NIL {
            if let Some(Wake::Task(w)) = &q.entries[id].wake {
                wakes.0.push(Wake::Task(w.clone()));
            }
            id = q.entries[id].next;
        }
    }

    /// Looks for a slot for queued waiter `t`: one handed to it, or claimed by it as a dozing
    /// head ([`Core::look_twice`]), either of which starts its turn (`Ok(true)`), else an
    /// IDLE one it claims (`Ok(false)`); the slot is left in `t.got`. `Err(doze)`: none; the waiter
    /// keeps its place (and `waker`, if given, is the one woken next). `doze`: it is a
    /// blocked thread dozing at the head of a starving queue, which must look again after a
    /// timed park ([`DOZE`] to [`MAX_DOZE`]) without being woken (see this function's body).
    fn poll_served(
        &self,
        t: &mut Ticket<'_>,
        id: usize,
        waker: Option<&Waker>,
    ) -> Result<bool, bool> {
        // Served: the returner already freed the entry; no lock.
        if t.take_given() {
            return Ok(true);
        }
        let mut doze = false;
        let old = {
            let mut q = lock(&self.q.queue);
            // Served between the read above and the lock.
            if t.take_given() {
                return Ok(true);
            }
            // The new waker is cloned before anything changes (a clone is user code and may
            // panic); the old one is dropped after the lock.
            let old = match waker {
                Some(w) => match &mut q.entries[id].wake {
                    Some(Wake::Task(old)) if old.will_wake(w) => None,
                    slot => slot.replace(Wake::Task(w.clone())),
                },
                None => None,
            };
            if q.woken == id {
                if waker.is_none() && q.head == id && head_starving(&q) {
                    // Dozing: a blocked thread at the head of a starving queue stays the woken
                    // waiter, so returns in a slice keep skipping their lock and wake (their
                    // slots are the head's to find), and it looks again after each doze
                    // (its caller parks with a timeout) until it is handed a slot or
                    // leaves. Without this, each such return woke it only to lose the slot
                    // to the slice holder: two context switches per turn at 10,000 threads
                    // (docs/benchmarks.md, pool-scaling). The RMW stands in for
                    // `sync_woken`'s: a return that read WOKEN set with an earlier RMW is
                    // seen by the scan below, a later one by the next look.
                    waiting_now(&self.q.waiting);
                    doze = true;
                } else {
                    // It is looking now: the next return may wake someone (maybe this waiter
                    // again).
                    q.woken = NIL;
                    self.sync_woken(&q);
                }
            }
            old
        };
        // The waiter is still queued and its state true: a panic here leaves nothing behind
        // that its `Wait`'s drop does not clean up.
        drop(old);
        if doze {
            // A slot a dozing head claims is its turn, as a hand-off would have been.
            return if self.look_twice(t, id) {
                Ok(true)
            } else {
                Err(true)
            };
        }
        *t.seen = None;
        if self.look(t, id) {
            Ok(false)
        } else {
            Err(doze)
        }
    }

    /// A dozing head's look: it claims a slot only if it saw it IDLE, with the same borrow
    /// count, on its last look too (`t.seen`, at least a doze ago). Otherwise the slot is
    /// most likely a slice holder's, between its return and its next borrow, and taking it
    /// would cut that slice short; a slot whose holder stopped borrowing stays IDLE and
    /// unborrowed, and is taken on the next look. (The count is the pool's, stamped at each
    /// lend; where nothing stamps it, as in the loom models, a second look claims.)
    fn look_twice(&self, t: &mut Ticket<'_>, id: usize) -> bool {
        let mut first = None;
        for i in 0..self.limit() {
            // Relaxed, both: what was seen only decides whether to try the claim, and the
            // claim's SeqCst CAS decides.
            if self.slots[i].state.load(Relaxed) != IDLE {
                continue;
            }
            let stamp = self.slots[i].borrows.load(Relaxed);
            if *t.seen == Some((i, stamp)) && self.claim_for(t, id, i) {
                *t.seen = None;
                return true;
            }
            first.get_or_insert((i, stamp));
        }
        *t.seen = first;
        false
    }

    /// A queued waiter's scan for an IDLE slot, right after [`Core::enqueue`] (its waker is
    /// the one queued, and it cannot have been woken by a hand-off it has not seen: a slot
    /// handed meanwhile is found by its next [`Core::poll_served`], after that wake) or after
    /// [`Core::poll_served`]'s look at the queue. The lock only when it found one. True: it
    /// got a slot (in `t.got`) and has left the queue. `id` is the waiter's entry (`t.id`).
    fn look(&self, t: &mut Ticket<'_>, id: usize) -> bool {
        // Loads suffice: the queueing RMW on `waiting` ordered any return that missed this
        // waiter's count before this scan (module docs).
        let Some(i) = self.scan() else {
            return false;
        };
        self.leave_with(t, id, i);
        true
    }

    /// Claims slot `i` if it is IDLE, for queued waiter `t`, which then leaves the queue with
    /// it (or with one handed over meanwhile); false: the slot was not IDLE.
    fn claim_for(&self, t: &mut Ticket<'_>, id: usize, i: usize) -> bool {
        match self.claim_idle(i) {
            Some(o) => {
                self.leave_with(t, id, o);
                true
            }
            None => false,
        }
    }

    /// Queued waiter `t` claimed slot `i`: it leaves the queue with it, in `t.got`.
    fn leave_with(&self, t: &mut Ticket<'_>, id: usize, i: Owned) {
        let mut q = lock(&self.q.queue);
        if t.take_given() {
            drop(q);
            if t.got.is_none() {
                // Its deadline passed while it claimed `i`, and the deadline task took its
                // entry: the claim stands, a borrow served in time.
                *t.got = Some(i);
                *t.expired = false;
                return;
            }
            // Handed one while claiming another: keep the handed one (already in `t.got`,
            // so a panic in the release's wake loses neither), release the other.
            self.release(i);
            return;
        }
        *t.got = Some(i);
        *t.id = None;
        let later = self.leave(&mut q, id);
        drop(q);
        later.run();
    }

    /// Gives up waiting (a timeout, a dropped future); a slot handed over meanwhile is left in
    /// `t.got`, now the caller's. Nothing to do if `t` is no longer queued.
    fn cancel(&self, t: &mut Ticket<'_>) {
        let Some(id) = *t.id else {
            return;
        };
        let mut q = lock(&self.q.queue);
        if t.take_given() {
            return;
        }
        *t.id = None;
        let later = self.leave(&mut q, id);
        drop(q);
        later.run();
    }

    /// Takes queued entry `id` out of the queue and frees it. Left for later: its waker, to
    /// drop, and the waiter to wake in its stead when an IDLE slot may have gone unnoticed (a
    /// wake that was in flight for it, or returns that found a wake in flight and woke no one).
    fn leave(&self, q: &mut WaitQueue, id: usize) -> Later {
        q.unlink(id);
        let old = q.release_entry(id);
        self.q.waiting.fetch_sub(ONE_WAITER, SeqCst);
        // WOKEN cleared (if this was the woken waiter) before the scan below: a return that
        // skipped its wake because of it is seen by that scan.
        self.sync_woken(q);
        self.update_hints(q);
        let wake = if q.head != NIL && self.any_idle() {
            q.wake_head()
        } else {
            None
        };
        self.sync_woken(q);
        Later { wake, old }
    }

    /// Makes `waiting`'s [`WOKEN`] bit say whether `q` has a woken waiter that has not looked
    /// (under the lock, after every change of `q.woken`). A read-modify-write, SeqCst: a
    /// returner that read the bit set with its own RMW (`release`) skipped its wake, so the
    /// RMW that clears it must come after in the word's order and be followed by a scan (the
    /// woken waiter's look, or `leave`'s), which then sees that returner's IDLE slot.
    fn sync_woken(&self, q: &WaitQueue) {
        let woken = q.woken != NIL;
        // Relaxed: the bit changes only under the lock, which the caller holds.
        if (self.q.waiting.load(Relaxed) & WOKEN != 0) != woken {
            if woken {
                self.q.waiting.fetch_or(WOKEN, SeqCst);
            } else {
                self.q.waiting.fetch_and(!WOKEN, SeqCst);
            }
        }
    }

    /// Re-reads both hints after the queue's entries changed: whether the head starves, and
    /// whether a task is queued.
    fn update_hints(&self, q: &WaitQueue) {
        self.update_starving(q);
        let queued = q.tasks > 0;
        // Relaxed: a hint that sizes turns; stored only when it changes, as `starving` is.
        if self.q.tasks_queued.load(Relaxed) != queued {
            self.q.tasks_queued.store(queued, Relaxed);
        }
    }

    /// Re-reads whether the (new) head has waited past the fairness bound.
    fn update_starving(&self, q: &WaitQueue) {
        let starving = head_starving(q);
        // Relaxed: a hint; `release` re-checks under the lock. Stored only when it changes:
        // every return reads it, and a store would take its line from their caches.
        if self.q.starving.load(Relaxed) != starving {
            self.q.starving.store(starving, Relaxed);
        }
    }

    /// Hands owned slot `i` to the head waiter (under the lock); `None` if no one is queued.
    /// Also wakes the next head if the one served was the woken waiter and a slot is IDLE:
    /// returns that skipped their wake for it (`release`) counted on its look, which a
    /// waiter handed a slot never takes.
    fn hand_to_head(&self, q: &mut WaitQueue, i: usize) -> Option<Woken> {
        let head = q.head;
        if head == NIL {
            return None;
        }
        let was_woken = q.woken == head;
        q.unlink(head);
        let mailbox = q.entries[head].mailbox;
        // Release: the connection put back happens before the waiter's acquire read. The
        // entry is freed with it: from here the waiter needs only its mailbox, and this store
        // is the returner's last touch of the waiter's memory (once it reads the slot, the
        // waiter may end and free its `Wait`).
        // SAFETY: the entry is queued and we hold the lock, so its waiter has neither read a
        // slot from the mailbox nor left the queue, and its `Wait`, pinned, is still alive
        // where it was queued (`Core::enqueue`).
        unsafe { (*mailbox).store(i, Release) };
        let handed = q.release_entry(head);
        self.q.waiting.fetch_sub(ONE_WAITER, SeqCst);
        // WOKEN cleared (if the head was the woken waiter) before the scan below.
        self.sync_woken(q);
        self.update_hints(q);
        let next = if was_woken && q.head != NIL && self.any_idle() {
            let next = q.wake_head();
            self.sync_woken(q);
            next
        } else {
            None
        };
        Some(Woken { handed, next })
    }

    /// Returns owned slot `i`, which holds a usable connection: IDLE, waking at most one
    /// waiter, or straight to the head waiter once it has waited past the fairness bound.
    /// Never waits on another thread's progress.
    pub(crate) fn release(&self, o: Owned) {
        let Owned(i) = o;
        set_last_returned(self, i);
        // A thread in its slice returns as if no one starved: IDLE, at most one wake. Asked at
        // most once (it spends a borrow of the slice), and only under contention: the
        // uncontended return reads no thread-local.
        let in_slice = std::cell::OnceCell::new();
        let in_slice = || *in_slice.get_or_init(|| use_slice(self));
        // Relaxed: a hint; the decision is made under the lock.
        if self.q.starving.load(Relaxed) && !in_slice() {
            let mut q = lock(&self.q.queue);
            let strict = head_starving(&q);
            if strict {
                // The slot stays BORROWED, now lent to the head: no one can barge.
                let woken = self.hand_to_head(&mut q, i);
                queue_next(self);
                drop(q);
                if let Some(w) = woken {
                    w.wake();
                }
                return;
            }
            self.update_starving(&q);
        }
        // SeqCst swap, then a SeqCst RMW read of `waiting`: the returner's half of the
        // no-lost-wake-up argument; the swap also publishes the connection put back.
        self.slots[i].state.swap(IDLE, SeqCst);
        let waiting = waiting_now(&self.q.waiting);
        if waiting / ONE_WAITER == 0 {
            return;
        }
        // A thread in its slice would take the lock below only to find a wake in flight and
        // wake no one: at 10,000 threads and a 0 hold that was a lock per borrow. The woken
        // waiter clears WOKEN with an RMW after this one and then scans, so it sees this IDLE
        // slot (`sync_woken`).
        if waiting & WOKEN != 0 && in_slice() {
            return;
        }
        let mut q = lock(&self.q.queue);
        if q.head == NIL {
            // Counted out since: the waiter left or was served.
            return;
        }
        let wake = if head_starving(&q) && !in_slice() {
            if !self.q.starving.load(Relaxed) {
                self.q.starving.store(true, Relaxed);
            }
            // Take the slot back for the starving head, unless a borrower already has it
            // (then its return hands over).
            if self.slots[i]
                .state
                .compare_exchange(IDLE, BORROWED, SeqCst, Relaxed)
                .is_ok()
            {
                queue_next(self);
                self.hand_to_head(&mut q, i)
            } else {
                None
            }
        } else {
            let next = q.wake_head();
            self.sync_woken(&q);
            Some(Woken { handed: None, next })
        };
        drop(q);
        if let Some(w) = wake {
            w.wake();
        }
    }

    /// Puts a newly opened connection into service: slot `i` (claimed EMPTY -> OPENING by
    /// the caller, now holding a connection) counts as lent until [`Core::release`] hands it to
    /// a waiter (it stays BORROWED, lent to them) or marks it IDLE.
    pub(crate) fn opened(&self, o: Owned) {
        self.slots[o.0].state.store(BORROWED, SeqCst);
        self.release(o);
    }

    /// Starts a reclaimable lease on owned slot `i` as it is lent: even -> odd. Release, so a
    /// reclaimer that reads this lease also reads the borrow's times written before it.
    pub(crate) fn begin_lease(&self, o: Owned) -> Lease {
        let lease = &self.slots[o.0].lease;
        let odd = lease.load(Relaxed) + 1;
        lease.store(odd, Release);
        Lease {
            slot: o.0,
            value: odd,
        }
    }

    /// Ends lease `lease` on slot `i`, for the holder returning it or for a reclaimer taking
    /// it: odd -> even by compare-and-swap, so exactly one of the two wins and owns the slot
    /// afterwards. False: the other side won (the holder was reclaimed, or it returned first).
    pub(crate) fn end_lease(&self, l: Lease) -> Option<Owned> {
        // AcqRel: the winner acquires the other side's writes to the slot's times.
        self.slots[l.slot]
            .lease
            .compare_exchange(l.value, l.value + 1, AcqRel, Relaxed)
            .is_ok()
            .then_some(Owned(l.slot))
    }

    /// The lease a reclaimer may end on slot `i`: `Some` while the slot is lent reclaimably.
    pub(crate) fn current_lease(&self, i: usize) -> Option<Lease> {
        let value = self.slots[i].lease.load(Acquire);
        (value % 2 == 1).then_some(Lease { slot: i, value })
    }

    /// Gives up owned slot `i` (its connection was closed): EMPTY, for an opener to refill.
    pub(crate) fn vacate(&self, o: Owned) {
        // Release: the cell's last use happens before the next opener's claim.
        self.slots[o.0].state.store(EMPTY, Release);
    }
}

/// Whether returns must hand over: the head has waited past its bound, or a task is queued
/// (a task's bound is none, and a thread head within its bound would otherwise let running
/// threads barge past every task behind it: with 20 threads and 100 tasks on two slots, 7
/// times a task's borrows per thread).
fn head_starving(q: &WaitQueue) -> bool {
    q.head != NIL && (q.tasks > 0 || q.entries[q.head].due.passed())
}

fn lock<T>(m: &Mutex<T>) -> crate::sync::MutexGuard<'_, T> {
    // A panic while holding the queue's lock leaves it consistent (no operation panics
    // half-way through a list update), so a poisoned lock is taken as it is.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The waiter count as seen by a returner right after it marked a slot IDLE: a
/// read-modify-write, which reads the latest value in any memory model, so the code loom
/// checks is the code that runs. (A SeqCst load would also be correct under the C++ model, but
/// loom does not model SeqCst's store-load ordering and reports it as a lost wake-up; measured,
/// the RMW costs nothing visible: 21 ns uncontended borrow + return either way.)
#[inline]
fn waiting_now(waiting: &AtomicUsize) -> usize {
    waiting.fetch_add(0, SeqCst)
}

#[cfg(not(loom))]
thread_local!(
    /// The slot this thread last returned: (its core's address, the slot, the slot's borrow
    /// count then). The count is stamped at each lend, so an unchanged count says no one has
    /// borrowed the slot since.
    static LAST: std::cell::Cell<(usize, usize, u64)> =
        const { std::cell::Cell::new((0, usize::MAX, 0)) }
);

/// Where this thread's next scan starts: the slot it last returned (HikariCP's thread-local
/// list: that slot is likely still IDLE and its line still in this core's cache); a thread
/// that has returned nothing yet starts at a place derived from its thread-local's address,
/// so threads spread over the slots.
#[cfg(not(loom))]
#[inline]
fn scan_start() -> usize {
    LAST.with(|n| match n.get() {
        (_, usize::MAX, _) => n as *const _ as usize >> 6,
        // Of any pool: a hint where to start.
        (_, i, _) => i,
    })
}

#[cfg(not(loom))]
#[inline]
fn set_last_returned<C>(core: &Core<C>, i: usize) {
    // Relaxed: this thread's own stamp, from its own lend.
    let stamp = core.slots[i].borrows.load(Relaxed);
    LAST.with(|n| n.set((core as *const _ as usize, i, stamp)));
}

/// The slot this thread last returned to `core`, if it did and no one has borrowed it since.
#[cfg(not(loom))]
#[inline]
fn last_returned<C>(core: &Core<C>) -> Option<usize> {
    let (at, i, stamp) = LAST.with(|n| n.get());
    // Relaxed: a changed count rules the slot out; an unchanged one lets the caller try its
    // CAS, which decides.
    (at == core as *const _ as usize && core.slots.get(i)?.borrows.load(Relaxed) == stamp)
        .then_some(i)
}

/// A slice: after a hand-off, a thread's returns go the barging way (IDLE, at most one wake;
/// it may take the slot straight back) for a number of borrows, and only the return that
/// ends the slice hands over. So the hand-off's cost (a futex wake and a context switch for
/// the thread it goes to) is paid once per slice instead of once per borrow.
///
/// The count is sized so that every waiter's turn comes round within about `ROUND`: the
/// slice is worth `min(ROUND * scale / waiting, MAX_TURN)` of wall time, in borrows at the
/// rate the last slice on this core ran (`Waiters::borrow_ns`), where `scale` is learnt from
/// the rounds measured (`next_scale`). A count, not a time: turns of equal counts are what
/// keeps per-thread borrows equal (a time slice holds as many borrows as the OS lets it run).
/// Few waiters get long slices (fewer hand-offs), many get short ones (the round stays
/// bounded).
///
/// Why a second: each turn costs a hand-off (at 10,000 threads on two CPUs, about 40 µs of
/// the machine's time, measured), so a round of 10,000 turns costs a fifth of the machine
/// per second of round at a 0 hold: 0.3 s rounds held the rate to 0.6-0.75x of 10 threads,
/// 1 s rounds to about 0.8x, and 1.5 s no better; a round of a second still gives every
/// thread two turns in any two seconds (Jain's index over 2 s windows 0.97-0.99, against
/// 0.89 at 1.5 s). Measured in docs/benchmarks.md, pool-scaling ("Threads: turns that
/// no one cuts short").
pub(crate) const ROUND: Duration = Duration::from_secs(1);
/// The longest slice, in wall time at the last measured rate; a slice also ends once it has
/// run `2 * MAX_TURN`, whatever its count (for holds that grew since the rate was measured).
pub(crate) const MAX_TURN: Duration = Duration::from_millis(1);
/// The slice before any has been measured on a core.
pub(crate) const FIRST_SLICE: u32 = 32;

/// Where this thread stands with one core after a hand-off.
#[cfg(not(loom))]
#[derive(Clone, Copy)]
enum Turn {
    None,
    /// Handed a slot at `begun`: `left` borrows of its slice to go, `used` spent; it ends at
    /// `end` whatever its count.
    Slice {
        left: u32,
        used: u32,
        begun: Instant,
        end: Instant,
    },
    /// Handed its slot to a starving waiter: its next blocking borrow queues at once.
    BackOfLine,
}

#[cfg(not(loom))]
thread_local!(
    /// (the core's address, this thread's turn there)
    static TURN: std::cell::Cell<(usize, Turn)> = const { std::cell::Cell::new((0, Turn::None)) }
);

/// This thread's turn on `core` is updated by `f` (a turn on another core counts as none
/// here, and stays unless `f` starts one on this core).
#[cfg(not(loom))]
#[inline]
fn with_turn<C, R>(core: &Core<C>, f: impl FnOnce(Turn) -> (Turn, R)) -> R {
    let at = core as *const _ as usize;
    TURN.with(|t| {
        let (was_at, turn) = t.get();
        let here = was_at == at;
        let (next, r) = f(if here { turn } else { Turn::None });
        if here || !matches!(next, Turn::None) {
            t.set((at, next));
        }
        r
    })
}

/// The borrows in a slice that starts with `waiting` queued behind it, at `borrow_ns` wall
/// nanoseconds per borrow (0: not measured yet).
/// `scale` is the round's correction ([`next_scale`]). Also whether the length is held at
/// [`MAX_TURN`] (the correction then has nothing to act on).
fn slice_len(borrow_ns: u64, waiting: usize, scale: f32) -> (u32, bool) {
    if borrow_ns == 0 {
        return (FIRST_SLICE, true);
    }
    let want = ROUND.as_nanos() as f64 * f64::from(scale) / waiting.max(1) as f64;
    let capped = want >= MAX_TURN.as_nanos() as f64;
    let budget = want.min(MAX_TURN.as_nanos() as f64);
    // A float to integer cast saturates: at least one borrow, at most `u32::MAX`.
    ((budget / borrow_ns as f64).max(1.0) as u32, capped)
}

/// How much of a round's error one hand-off corrects, spread over the waiters: a round holds
/// about `waiting` hand-offs, and a change shows in the waits a round later, so correcting
/// half the error per round converges without overshooting. Rounds too long are corrected
/// in full ([`ROUND_GAIN_LONG`]): a round past twice `ROUND` leaves threads with no turn in a
/// two-second window (seen when the VM's speed halved), and a full correction per round,
/// with one round's delay, still does not swing past.
const ROUND_GAIN: f32 = 0.5;
const ROUND_GAIN_LONG: f32 = 1.0;
/// The correction's range: slices from a sixteenth to sixteen times `ROUND / waiting`.
const MAX_SCALE: f32 = 16.0;

/// The correction after a thread was handed a slot having waited `waited` with `waiting`
/// behind it. A thread queues at the back after its turn, so its wait is about one round of
/// the queue, and the slices' lengths set the round: `ROUND / waiting` of wall time each
/// would give a round of `ROUND` only if one slice ran at a time, but several slots' slices
/// run at once (as many as there are CPUs for them, or slots), by an amount the pool cannot
/// know. Measured without it: rounds of 0.3 s for a 0.5 s `ROUND` at 10,000 threads on two
/// CPUs, so twice the hand-offs needed (docs/benchmarks.md, pool-scaling).
fn next_scale(scale: f32, waited: Duration, waiting: usize) -> f32 {
    let error = (ROUND.as_secs_f32() / waited.as_secs_f32().max(1e-6)).ln();
    // A wait far off (a first turn, a burst of arrivals) moves the scale by at most e^2 in a
    // round.
    let gain = if error < 0.0 {
        ROUND_GAIN_LONG
    } else {
        ROUND_GAIN
    };
    let step = gain * error.clamp(-2.0, 2.0) / waiting.max(1) as f32;
    (scale.ln() + step).exp().clamp(1.0 / MAX_SCALE, MAX_SCALE)
}

/// Starts a slice for this thread on `core`: it was just handed a slot after waiting since
/// `queued`.
#[cfg(not(loom))]
fn start_slice<C>(core: &Core<C>, queued: Instant) {
    // A task's turn is one borrow; while one waits, so is a thread's (the round's scale is
    // left alone: it learns from rounds of slices).
    if core.q.tasks_queued.load(Relaxed) {
        with_turn(core, |_| (Turn::None, ()));
        return;
    }
    let begun = Instant::now();
    // Relaxed, all: they size a slice; a stale value gives a slice of another length, never
    // a wrong hand-off. Two threads' updates of the scale may race and one be lost: a step
    // lost of the many a round takes.
    let waiting = core.q.count(Relaxed);
    let scale = f32::from_bits(core.q.round_scale.load(Relaxed));
    let (left, capped) = slice_len(core.q.borrow_ns.load(Relaxed), waiting, scale);
    if !capped && waiting > 0 {
        let next = next_scale(scale, begun.saturating_duration_since(queued), waiting);
        core.q.round_scale.store(next.to_bits(), Relaxed);
    }
    let turn = match begun.checked_add(2 * MAX_TURN) {
        Some(end) => Turn::Slice {
            left,
            used: 0,
            begun,
            end,
        },
        None => Turn::None,
    };
    with_turn(core, |_| (turn, ()));
}

/// Spends one return of this thread's slice on `core`; false when it has none there. The
/// return that ends a slice records the slice's rate for the next one.
#[cfg(not(loom))]
#[inline]
fn use_slice<C>(core: &Core<C>) -> bool {
    with_turn(core, |turn| match turn {
        // The clock is read every 8th return: at a 0 hold a read is a sizeable part of a
        // borrow, and the time bound is a backstop, not the slice's measure.
        Turn::Slice {
            left,
            used,
            begun,
            end,
        } if left > 0 && (used % 8 != 0 || Instant::now() < end) => (
            Turn::Slice {
                left: left - 1,
                used: used + 1,
                begun,
                end,
            },
            true,
        ),
        Turn::Slice { used, begun, .. } => {
            // The slice held `used + 1` borrows (the handed one and those its returns kept).
            let per = begun.elapsed().as_nanos() / u128::from(used + 1);
            core.q
                .borrow_ns
                .store(per.clamp(1, u128::from(u64::MAX)) as u64, Relaxed);
            (Turn::None, false)
        }
        other => (other, false),
    })
}

/// Whether this thread is in a slice on `core` (with borrows left or not: the borrow after its
/// last counted return is still its own, and that borrow's return ends the slice).
#[cfg(not(loom))]
#[inline]
fn in_slice_here<C>(core: &Core<C>) -> bool {
    with_turn(core, |turn| (turn, matches!(turn, Turn::Slice { .. })))
}

#[cfg(loom)]
fn in_slice_here<C>(_: &Core<C>) -> bool {
    LOOM_IN_SLICE.with(|s| s.get())
}

/// This thread handed its slot to a starving waiter of `core`: its next blocking borrow there
/// queues at once.
#[cfg(not(loom))]
fn queue_next<C>(core: &Core<C>) {
    with_turn(core, |_| (Turn::BackOfLine, ()));
}

/// Whether this thread's borrow from `core` must queue at once (see [`queue_next`]); clears it.
#[cfg(not(loom))]
#[inline]
fn must_queue<C>(core: &Core<C>) -> bool {
    with_turn(core, |turn| match turn {
        Turn::BackOfLine => (Turn::None, true),
        other => (other, false),
    })
}

#[cfg(loom)]
fn queue_next<C>(_: &Core<C>) {}

#[cfg(loom)]
fn must_queue<C>(_: &Core<C>) -> bool {
    false
}

#[cfg(loom)]
fn start_slice<C>(_: &Core<C>, _: Instant) {}

// Under loom a thread is in a slice for every return once its model says so: slices' sizes
// and clocks are not what loom checks, the returns they make (which may skip the lock) are.
#[cfg(loom)]
loom::thread_local!(static LOOM_IN_SLICE: std::cell::Cell<bool> = std::cell::Cell::new(false));

#[cfg(loom)]
fn use_slice<C>(_: &Core<C>) -> bool {
    LOOM_IN_SLICE.with(|s| s.get())
}

#[cfg(loom)]
fn scan_start() -> usize {
    0
}

// Under loom the scan always starts at slot 0 (the models are small), but a slice holder's
// claim of the slot it returned is modelled.
#[cfg(loom)]
loom::thread_local!(static LOOM_LAST: std::cell::Cell<usize> = std::cell::Cell::new(usize::MAX));

#[cfg(loom)]
fn set_last_returned<C>(_: &Core<C>, i: usize) {
    LOOM_LAST.with(|n| n.set(i));
}

#[cfg(loom)]
fn last_returned<C>(_: &Core<C>) -> Option<usize> {
    Some(LOOM_LAST.with(|n| n.get())).filter(|&i| i != usize::MAX)
}

/// Rescans before queueing: a few spins, then a few yields (each a chance for a holder to
/// return). Bounded: past this the borrower queues and sleeps.
const SPINS: u32 = 3;
const YIELDS: u32 = 2;

fn claim_spinning<C>(core: &Core<C>) -> Option<Owned> {
    if cfg!(loom) {
        return None;
    }
    for k in 0..SPINS + YIELDS {
        if k < SPINS {
            for _ in 0..(16 << k) {
                std::hint::spin_loop();
            }
        } else {
            crate::sync::yield_now();
        }
        if let Some(i) = core.try_claim() {
            return Some(i);
        }
    }
    None
}

/// Borrows a slot on the calling thread, parking until one is free or handed over: the
/// blocking borrower's protocol, shared by the pool and the loom models. `None`: the
/// deadline passed.
pub(crate) fn claim_blocking<C>(
    core: &Core<C>,
    deadline: Option<Instant>,
    max_waiters: usize,
    on_queued: &(dyn Fn(bool) + Sync),
) -> Result<Owned, Refused> {
    // A thread that just handed its slot to a starving waiter goes to the back of the line
    // rather than taking a slot that a slice holder's return left IDLE; while a waiter
    // starves, so does everyone but a slice holder taking back its own slot.
    if !must_queue(core) {
        if let Some(i) = core.try_claim_blocking() {
            return Ok(i);
        }
        // Relaxed: a hint, as in `try_claim_blocking`.
        if !core.q.starving.load(Relaxed)
            && let Some(i) = claim_spinning(core)
        {
            return Ok(i);
        }
    }
    // The waiter's node on this thread's stack: pinned, and its drop (on a panic too) leaves
    // the queue, so the queue never points at a dead mailbox.
    let mut wait = std::pin::pin!(Wait::new(core, max_waiters).on_queued(on_queued));
    let begun = wait
        .as_mut()
        .begin(Wake::Thread(crate::sync::current_thread()));
    if let Some(i) = begun.map_err(Refused::Full)? {
        return Ok(i);
    }
    // When it queued: a slice's length learns from the wait (`next_scale`).
    let queued = Instant::now();
    // The next doze's length when the last look found nothing while dozing: doubled after
    // each doze that ended with nothing (slots held long), back to `DOZE` otherwise.
    let mut doze = None;
    let mut nap = DOZE;
    loop {
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => return wait.as_mut().cancel().ok_or(Refused::TimedOut),
            },
            None => None,
        };
        park_for(left, doze);
        match wait.as_mut().poll_slot(None) {
            Ok((i, turn)) => {
                if turn {
                    start_slice(core, queued);
                }
                return Ok(i);
            }
            Err(true) => {
                doze = Some(nap);
                nap = (nap * 2).min(MAX_DOZE);
            }
            Err(false) => {
                doze = None;
                nap = DOZE;
            }
        }
    }
}

/// Wakes owed by the deadline task's look ([`Core::expire`], [`Core::every_task`]), made
/// after the queue's lock by [`Wakes::wake`]: a waker is user code.
#[derive(Default)]
pub(crate) struct Wakes(Vec<Wake>);

impl Wakes {
    /// Makes every wake owed, even when one panics (a waker is user code): each task woken
    /// here is out of the queue already ([`Core::expire`]) or must read the pool's state
    /// ([`Core::every_task`]), and a wake left unmade leaves it asleep for ever. Until helper
    /// h81 the first panic dropped the rest unmade and ended the deadline task
    /// (`tests/attack_deadlines.rs`). Returns the first panic's payload, for the caller to
    /// report: the deadline task has no caller to pass it to, and must go on.
    pub(crate) fn wake(&mut self) -> Option<Box<dyn std::any::Any + Send>> {
        let mut panicked = None;
        for w in self.0.drain(..) {
            // Unwind-safe: the waker is consumed whether or not its wake returns, and nothing
            // else is touched.
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.wake()))
            {
                panicked.get_or_insert(panic);
            }
        }
        panicked
    }
}

/// A waiter's place in the queue ([`Core::enqueue`]).
pub(crate) struct Queued {
    /// Its entry.
    id: usize,
    /// It queued behind another waiter.
    behind: bool,
    /// Its deadline is earlier than the deadline task's next look: the task must be told,
    /// or the wait would outlast its deadline.
    pub(crate) sooner: bool,
}

/// Why a borrower got no slot.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Its deadline passed.
    TimedOut,
    /// The queue was full: this many waited (`max_waiters` or more).
    Full(usize),
}

/// A borrower's wait, the waiter's node: its mailbox lives here, not in the queue, so a wait
/// allocates nothing and shares no reference count with the returners (tokio's semaphore
/// keeps its waiter nodes in the waiting futures the same way). The queue's entry points at
/// the mailbox while queued, so the node is pinned (`!Unpin`) and its drop leaves the queue.
///
/// As a future (tasks): queues on first poll and scans once, then polls the queue each time
/// it is woken (it does not scan before queueing: its callers have just scanned). Dropping it
/// (a cancelled borrow) gives the place up and passes on a slot handed over meanwhile.
/// Output: the owned slot. A blocking borrower drives it by hand ([`claim_blocking`]).
///
/// A task's deadline ([`Wait::until`]) arms no timer: the entry carries it, and the pool's
/// deadline task ([`Core::expire`]) takes the waiter out of the queue once it has passed and
/// wakes it, so the waiter never reads a clock. A timer per wait (tokio's `timeout_at`) cost
/// about 0.4 µs per waiting borrow, two trips through the timer wheel's lock
/// (docs/benchmarks.md, pool-scaling, session 54).
pub(crate) struct Wait<'a, C> {
    core: &'a Core<C>,
    /// Where a returner puts the slot it hands over ([`NONE`]: none yet).
    mailbox: AtomicUsize,
    /// The queue entry while queued (`None`: not queued yet, or done).
    id: Option<usize>,
    /// A slot got and not yet passed to the caller: set only while user code (a waker) runs
    /// between the two, so the drop returns it if that code panics.
    got: Option<Owned>,
    /// What a dozing head saw IDLE on its last look ([`Core::look_twice`]).
    seen: Option<(usize, u64)>,
    /// Queued once: polled again after completing is a caller's bug.
    started: bool,
    /// Refused a place when this many wait already.
    max_waiters: usize,
    /// When a task's wait gives up ([`Wait::until`]).
    deadline: Option<Instant>,
    /// The deadline task took it out of the queue: its deadline passed.
    expired: bool,
    /// Called once the entry is in the queue (where the pool's opener looks for waiters):
    /// a wake given before then can be consumed by an opener that then finds no waiter and
    /// sleeps through this one's wait ([`Wait::on_queued`]).
    on_queued: Option<&'a (dyn Fn(bool) + Sync)>,
    _pinned: PhantomPinned,
}

impl<'a, C> Wait<'a, C> {
    pub(crate) fn new(core: &'a Core<C>, max_waiters: usize) -> Wait<'a, C> {
        Wait {
            core,
            mailbox: AtomicUsize::new(NONE),
            id: None,
            got: None,
            seen: None,
            started: false,
            max_waiters,
            deadline: None,
            expired: false,
            on_queued: None,
            _pinned: PhantomPinned,
        }
    }

    /// A task's wait that gives up at `deadline` (`None`: never), woken then by the pool's
    /// deadline task, which [`Wait::on_queued`]'s call must tell when it is `true` (see
    /// [`Queued::sooner`]). A blocked thread's deadline is its caller's to keep.
    pub(crate) fn until(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Calls `f` once this waiter is queued (not if it is refused a place), with whether its
    /// deadline is sooner than the deadline task's next look: the pool wakes its opener there,
    /// and its deadline task if so. The opener counts the queued waiters after each wake-up and sleeps
    /// when there are none, so a wake given before queueing could be spent on a look that
    /// missed this waiter, which would then wait out the opener's sleep (100-500 ms) for a
    /// connection nobody opens.
    pub(crate) fn on_queued(mut self, f: &'a (dyn Fn(bool) + Sync)) -> Self {
        self.on_queued = Some(f);
        self
    }

    /// The core, the waiter's state as a [`Ticket`], and whether it has queued, for a method
    /// of the pinned node.
    fn parts(self: Pin<&mut Self>) -> (&'a Core<C>, Ticket<'_>, &mut bool) {
        // SAFETY: nothing is moved out of the node; the mailbox is only ever borrowed, so it
        // stays where it was pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let t = Ticket {
            id: &mut this.id,
            got: &mut this.got,
            mailbox: &this.mailbox,
            seen: &mut this.seen,
            expired: &mut this.expired,
        };
        (this.core, t, &mut this.started)
    }

    /// Queues this waiter, woken by `wake` (it has just scanned and found nothing).
    /// `Ok((entry id, behind another waiter))`; `Err(waiting)`: the queue is full.
    fn queue(self: Pin<&mut Self>, wake: Wake) -> Result<Queued, usize> {
        let (max_waiters, deadline) = (self.max_waiters, self.deadline);
        let (core, t, started) = self.parts();
        assert!(!*started, "a wait queues once");
        *started = true;
        // SAFETY: the node is pinned, so the mailbox stays where it is; its drop (`Drop`
        // below: pinned memory is dropped before it is reused) cancels while `id` is set, and
        // `id` is set from here (no user code runs in between) until the entry is freed.
        let queued = unsafe { core.enqueue(wake, t.mailbox, max_waiters, deadline) }?;
        *t.id = Some(queued.id);
        Ok(queued)
    }

    /// Queues, and scans once more if it is the head; `Some`: it got a slot (and is done).
    /// `Err(waiting)`: the queue is full.
    ///
    /// A waiter queued behind another does not scan: a slot a return left IDLE without
    /// seeing this waiter counted was either seen by the waiters ahead (the head's own scan
    /// after queueing, or a wake the return gave the head), or is found by the head a leave
    /// or a hand-off wakes (`leave`, `hand_to_head`). Its scan would only take a slot the
    /// head is about to look at, or that a slice holder is between two borrows of: a barge
    /// past the whole queue.
    fn begin(mut self: Pin<&mut Self>, wake: Wake) -> Result<Option<Owned>, usize> {
        let Queued { id, behind, sooner } = self.as_mut().queue(wake)?;
        if let Some(f) = self.on_queued {
            f(sooner);
        }
        if behind {
            return Ok(None);
        }
        let (core, mut t, _) = self.parts();
        Ok(if core.look(&mut t, id) {
            t.got.take()
        } else {
            None
        })
    }

    /// Looks for a slot after a wake ([`Core::poll_served`]); `waker`, if given, is the one
    /// woken next. `Ok((slot, turn))`: it got one (and is done); `turn`: handed over, or
    /// claimed as a dozing head, so a thread starts a slice. `Err(doze)`: not yet;
    /// `doze` (blocked threads only): look again after a timed park even if not woken.
    fn poll_slot(self: Pin<&mut Self>, waker: Option<&Waker>) -> Result<(Owned, bool), bool> {
        let (core, mut t, _) = self.parts();
        // A slot got by a poll that then panicked (a waker's code), polled again.
        if let Some(i) = t.got.take() {
            return Ok((i, false));
        }
        // Every caller stops polling once it has its slot (an `async fn`, `claim_blocking`),
        // as the `Future` contract asks: no entry here is a bug in this crate, not a user's.
        let Some(id) = *t.id else {
            panic!("a wait polled after it completed");
        };
        let handed = core.poll_served(&mut t, id, waker)?;
        // `poll_served` left the slot in `got`.
        t.got.take().map(|i| (i, handed)).ok_or(false)
    }

    /// Gives up waiting; `Some`: a slot handed over meanwhile, now the caller's.
    fn cancel(self: Pin<&mut Self>) -> Option<Owned> {
        let (core, mut t, _) = self.parts();
        core.cancel(&mut t);
        t.got.take()
    }
}

impl<C> Future for Wait<'_, C> {
    /// `Err(Full(waiting))`: the queue was full (`max_waiters`), so it never queued;
    /// `Err(TimedOut)`: its deadline passed.
    type Output = Result<Owned, Refused>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Owned, Refused>> {
        if !self.started {
            return match self.as_mut().begin(Wake::Task(cx.waker().clone())) {
                Ok(Some(i)) => Poll::Ready(Ok(i)),
                Ok(None) => Poll::Pending,
                Err(waiting) => Poll::Ready(Err(Refused::Full(waiting))),
            };
        }
        if let Ok((i, _)) = self.as_mut().poll_slot(Some(cx.waker())) {
            return Poll::Ready(Ok(i));
        }
        if self.expired {
            return Poll::Ready(Err(Refused::TimedOut));
        }
        Poll::Pending
    }
}

impl<C> Drop for Wait<'_, C> {
    fn drop(&mut self) {
        let core = self.core;
        // SAFETY: `drop` runs on the pinned node in place, and nothing is moved out of it.
        let this = unsafe { Pin::new_unchecked(self) };
        if let Some(i) = this.cancel() {
            core.release(i);
        }
    }
}

/// How long a dozing head waiter ([`Core::poll_served`]) first sleeps between its looks: a
/// slot that a slice holder's return left IDLE waits about this long for it (once the holder
/// stops borrowing; while it borrows, the slice's end hands over and wakes the head at once).
/// Tried at 0.5 to 4 ms (docs/benchmarks.md, pool-scaling): the shortest was best.
pub(crate) const DOZE: Duration = Duration::from_micros(500);
/// The longest doze: each doze that ends with nothing doubles the next, up to this, so a head
/// beside slots held for seconds wakes 250 times a second, not 2,000.
pub(crate) const MAX_DOZE: Duration = Duration::from_millis(4);

/// Parks the calling thread until unparked or `left` has passed, and for at most `doze`.
#[cfg(not(loom))]
fn park_for(left: Option<Duration>, doze: Option<Duration>) {
    match (left, doze) {
        (Some(d), Some(z)) => std::thread::park_timeout(d.min(z)),
        (None, Some(z)) | (Some(z), None) => std::thread::park_timeout(z),
        (None, None) => std::thread::park(),
    }
}

/// Under loom a deadline's timeout is not modelled (the models set none), and a doze's is a
/// yield: the thread may run again before anyone unparks it, as its timer would let it.
#[cfg(loom)]
fn park_for(_: Option<Duration>, doze: Option<Duration>) {
    if doze.is_some() {
        crate::sync::yield_now();
    } else {
        crate::sync::park();
    }
}

// The `unwrap`s and `expect`s in the two test modules below (the unit tests and the loom
// models) are the tests' own checks: a panic is a test failing (under loom, with the
// interleaving reported). Both are compiled only for tests; no user input or socket reaches
// them.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The deadline task is told of exactly the deadlines it would otherwise look at too
    /// late: the first one queued (it has no look planned), and one earlier than its next
    /// look; not one that comes later (the common case, a borrow queued with the pool's
    /// timeout), nor a blocked thread's, which its own park keeps. Its look takes the tasks
    /// due out of the queue (their mailboxes say so), wakes them, and plans the next look at
    /// the earliest deadline left, or at its idle look.
    #[test]
    fn the_deadline_task_is_told_only_of_deadlines_sooner_than_its_next_look() {
        let core = Core::<u32>::new(1, 1);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let waker = futures_util::task::noop_waker();
        let mut waits: Vec<_> = [1000, 1500, 400, 450, 10]
            .map(|ms| Box::pin(Wait::new(&core, usize::MAX).until(Some(at(ms)))))
            .into_iter()
            .collect();
        let mut queue = |i: usize, wake: Wake| {
            let w: &mut Pin<Box<Wait<'_, u32>>> = &mut waits[i];
            w.as_mut().queue(wake).expect("no room limit").sooner
        };
        assert!(queue(0, Wake::Task(waker.clone())), "no look planned yet");
        let mut wakes = Wakes::default();
        assert_eq!(core.expire(t0, Some(at(1000)), &mut wakes), Some(at(1000)));
        assert!(wakes.0.is_empty(), "nothing is due yet");
        assert!(
            !queue(1, Wake::Task(waker.clone())),
            "due after the next look"
        );
        assert!(
            queue(2, Wake::Task(waker.clone())),
            "due before the next look"
        );
        assert!(
            !queue(3, Wake::Task(waker.clone())),
            "the look moved to 400"
        );
        let thread = Wake::Thread(std::thread::current());
        assert!(!queue(4, thread), "a thread's deadline is its own");
        // At 1200 the tasks due at 400, 450 and 1000 leave; the next look is at 1500.
        assert_eq!(
            core.expire(at(1200), Some(at(2200)), &mut wakes),
            Some(at(1500))
        );
        assert_eq!(wakes.0.len(), 3, "the tasks due, and not the thread");
        let expired: Vec<bool> = waits
            .iter()
            .map(|w| w.mailbox.load(SeqCst) == EXPIRED)
            .collect();
        assert_eq!(expired, [true, false, true, true, false]);
        assert_eq!(
            core.q.count(SeqCst),
            2,
            "the task due at 1500 and the thread wait"
        );
        drop(waits);
        wakes.0.clear();
        // With no one queued, the next look is the idle one, or none at all.
        assert_eq!(
            core.expire(at(1200), Some(at(2200)), &mut wakes),
            Some(at(2200))
        );
        assert_eq!(core.expire(at(1200), None, &mut wakes), None);
        assert!(wakes.0.is_empty());
    }

    #[test]
    fn while_a_waiter_starves_only_a_slice_holder_takes_back_its_own_slot() {
        let core = Core::<u32>::with_fairness(2, 2, Duration::ZERO, Duration::ZERO);
        while let Some(o) = core.claim_empty() {
            core.conn(&o, |c| *c = Some(0));
            core.opened(o);
        }
        let a = core.try_claim().expect("two idle slots");
        let b = core.try_claim().expect("two idle slots");
        {
            // Two waiters, as threads that never look (their wakes unpark this thread, which
            // does not park): nothing looks at the slots but the test. Threads, since a
            // queued task would deny this thread its slice.
            let mut first = std::pin::pin!(Wait::new(&core, usize::MAX));
            let mut second = std::pin::pin!(Wait::new(&core, usize::MAX));
            for w in [first.as_mut(), second.as_mut()] {
                w.queue(Wake::Thread(std::thread::current()))
                    .expect("no room limit");
            }
            // A strict return (not in a slice): `a` goes to the first, and the second starves.
            core.release(a);
            assert!(core.q.starving.load(SeqCst), "the second waiter starves");
            // This thread, in a slice, returns `b`: IDLE, but its own to take back.
            start_slice(&core, Instant::now());
            let mine = b.index();
            core.release(b);
            let other = std::thread::scope(|s| {
                s.spawn(|| core.try_claim_blocking().map(|o| o.index()))
                    .join()
                    .unwrap()
            });
            assert_eq!(
                other, None,
                "a thread not in a slice took the slice holder's slot"
            );
            let again = core
                .try_claim_blocking()
                .expect("the slice holder takes its slot back");
            assert_eq!(again.index(), mine);
            with_turn(&core, |_| (Turn::None, ()));
            core.release(again);
        }
        // The waiters' drops gave back what they were handed.
        assert!(core.slots.iter().all(|s| s.state.load(SeqCst) == IDLE));
    }

    /// Three slots, two waiters (threads that never look) queued and the first served by a
    /// strict hand-off of one slot; `f` runs with the second waiter still starving and the
    /// other two slots lent to the test.
    fn starving_with_two_lent(f: impl FnOnce(&Core<u32>, Owned, Owned)) {
        let core = Core::<u32>::with_fairness(3, 3, Duration::ZERO, Duration::ZERO);
        while let Some(o) = core.claim_empty() {
            core.conn(&o, |c| *c = Some(0));
            core.opened(o);
        }
        let lent: Vec<Owned> = (0..3).filter_map(|_| core.try_claim()).collect();
        let [x, y, z] = <[Owned; 3]>::try_from(lent).ok().expect("three idle slots");
        {
            let mut waiters = [
                std::pin::pin!(Wait::new(&core, usize::MAX)),
                std::pin::pin!(Wait::new(&core, usize::MAX)),
            ];
            for w in waiters.iter_mut() {
                w.as_mut()
                    .queue(Wake::Thread(std::thread::current()))
                    .expect("no room limit");
            }
            core.release(x);
            assert!(core.q.starving.load(SeqCst), "the second waiter starves");
            f(&core, y, z);
            with_turn(&core, |_| (Turn::None, ()));
        }
    }

    /// A slice holder's slot that someone borrowed since (the dozing head, say, while the
    /// holder stopped mid-slice) is that borrower's now, between two of its borrows: taking it
    /// "back" would cut the new holder's turn short. (Before, any IDLE slot at the index this
    /// thread last returned was taken.)
    #[test]
    fn a_slice_holder_does_not_take_back_a_slot_borrowed_since() {
        starving_with_two_lent(|core, y, z| {
            start_slice(core, Instant::now());
            let mine = y.index();
            core.release(y);
            // Lent to another and returned: the pool stamps each lend.
            core.slots[mine].borrows.fetch_add(1, SeqCst);
            assert!(
                core.q.starving.load(SeqCst),
                "the second waiter still starves"
            );
            assert!(
                core.try_claim_blocking().is_none(),
                "took back a slot borrowed by another since"
            );
            core.release(z);
        });
    }

    /// The slot index this thread last returned to another pool says nothing of this one: a
    /// slice holder here must not take this pool's slot at that index, another slice holder's.
    #[test]
    fn a_slice_holder_does_not_take_a_slot_at_the_index_it_returned_in_another_pool() {
        starving_with_two_lent(|core, y, z| {
            let theirs = y.index();
            std::thread::scope(|s| {
                s.spawn(|| {
                    start_slice(core, Instant::now());
                    core.release(y);
                });
            });
            start_slice(core, Instant::now());
            core.release(z);
            let other = Core::<u32>::new(3, 3);
            while let Some(o) = other.claim_empty() {
                other.conn(&o, |c| *c = Some(0));
                other.opened(o);
            }
            let o = other.claim_idle(theirs).expect("idle in the other pool");
            other.release(o);
            assert!(
                core.q.starving.load(SeqCst),
                "the second waiter still starves"
            );
            let got = core.try_claim_blocking().map(|o| o.index());
            assert_ne!(got, Some(theirs), "took another slice holder's slot");
            if let Some(i) = got {
                core.release(Owned(i));
            }
        });
    }

    /// The hint that a task waits follows the queue whichever way a task leaves it (served by
    /// a hand-off, or giving up), and a thread left queued does not hold it: a hint stuck on
    /// would deny threads their slices for good.
    #[test]
    fn the_task_hint_follows_the_queue_whichever_way_a_task_leaves() {
        let core = Core::<u32>::with_fairness(1, 1, Duration::ZERO, Duration::ZERO);
        let o = core.claim_empty().expect("one empty slot");
        core.conn(&o, |c| *c = Some(0));
        core.opened(o);
        let held = core.try_claim().expect("one idle slot");
        let task = || Wake::Task(Waker::noop().clone());
        let hint = || core.q.tasks_queued.load(SeqCst);
        {
            let mut a = std::pin::pin!(Wait::new(&core, usize::MAX));
            let mut b = std::pin::pin!(Wait::new(&core, usize::MAX));
            a.as_mut().queue(task()).expect("no room limit");
            assert!(hint(), "a task is queued");
            b.as_mut()
                .queue(Wake::Thread(std::thread::current()))
                .expect("no room limit");
            core.release(held);
            assert!(!hint(), "the task was handed the slot; only a thread waits");
            let (got, _) = a.as_mut().poll_slot(None).expect("handed the slot");
            {
                let mut c = std::pin::pin!(Wait::new(&core, usize::MAX));
                c.as_mut().queue(task()).expect("no room limit");
                assert!(hint(), "a task is queued again");
            }
            assert!(!hint(), "the task gave up its place");
            core.release(got);
        }
        assert!(!hint());
        assert!(core.slots.iter().all(|s| s.state.load(SeqCst) == IDLE));
    }

    #[test]
    fn a_round_of_the_right_length_leaves_the_scale_alone() {
        assert_eq!(next_scale(1.0, ROUND, 1000), 1.0);
        assert!(
            next_scale(1.0, ROUND * 2, 1000) < 1.0,
            "too long a round: shorter slices"
        );
        assert!(
            next_scale(1.0, ROUND / 2, 1000) > 1.0,
            "too short: longer slices"
        );
    }

    /// The correction's loop as the pool runs it: a round holds `waiting` hand-offs, each
    /// thread's wait is the round that slices of the last round's scale made, and the true
    /// round is the scale times what it would be at 1 (here 0.3 s, as measured at 10,000
    /// threads before the correction, or 3 s). It must settle within a few rounds on
    /// `ROUND`, without swinging past it.
    #[test]
    fn the_scale_settles_on_rounds_of_round() {
        for unscaled in [0.3, 3.0] {
            let waiting = 10_000;
            let mut scale = 1.0f32;
            let mut rounds = Vec::new();
            for _ in 0..8 {
                let round = Duration::from_secs_f32(unscaled * scale);
                for _ in 0..waiting {
                    scale = next_scale(scale, round, waiting);
                }
                rounds.push(round.as_secs_f32());
            }
            let last = rounds[rounds.len() - 1];
            assert!((last - 1.0).abs() < 0.05, "{unscaled}: rounds {rounds:?}");
            let overshoot = if unscaled < 1.0 {
                rounds.iter().any(|&r| r > 1.05)
            } else {
                rounds.iter().any(|&r| r < 0.95)
            };
            assert!(!overshoot, "{unscaled}: rounds {rounds:?}");
        }
    }

    #[test]
    fn the_scale_stays_in_its_range() {
        let mut scale = 1.0;
        for _ in 0..100 {
            scale = next_scale(scale, Duration::from_nanos(1), 1);
        }
        assert_eq!(scale, MAX_SCALE);
        for _ in 0..100 {
            scale = next_scale(scale, Duration::from_secs(3600), 1);
        }
        assert_eq!(scale, 1.0 / MAX_SCALE);
    }

    #[test]
    fn a_slice_is_a_share_of_the_round_up_to_the_longest_turn() {
        assert_eq!(
            slice_len(0, 10, 1.0),
            (FIRST_SLICE, true),
            "nothing measured yet"
        );
        // 1 s over 10,000 waiters: 100 µs, at 100 ns a borrow.
        assert_eq!(slice_len(100, 10_000, 1.0), (1_000, false));
        assert_eq!(slice_len(100, 10_000, 2.0), (2_000, false));
        // 1 s over 100 waiters is 10 ms: held at the longest turn, 1 ms.
        assert_eq!(slice_len(100, 100, 1.0), (10_000, true));
        // A hold longer than the turn still gets one borrow.
        assert_eq!(slice_len(10_000_000, 10_000, 1.0), (1, false));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// Wakes a loom thread parked in [`block_on`].
    struct Unpark(loom::thread::Thread);

    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }

    /// Runs `f` to completion on this loom thread, parking between polls (loom sees the
    /// park and the unpark, so it explores the wake-up's interleavings).
    fn block_on<F: Future>(f: F) -> F::Output {
        let waker = Waker::from(std::sync::Arc::new(Unpark(loom::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            loom::thread::park();
        }
    }

    /// A blocked thread's wait, queued and polled once, then given up: the slot it got, by a
    /// hand-off or its own claim, or none.
    fn queue_poll_cancel(core: &Core<u32>) -> Option<Owned> {
        let mut w = std::pin::pin!(Wait::new(core, usize::MAX));
        w.as_mut()
            .queue(Wake::Thread(crate::sync::current_thread()))
            .expect("no room limit");
        match w.as_mut().poll_slot(None) {
            Ok((i, _)) => Some(i),
            Err(_) => w.as_mut().cancel(),
        }
    }

    /// A core with `n` slots, each holding connection value 0.
    fn filled(n: usize, fair_after: Duration) -> Arc<Core<u32>> {
        let core = Arc::new(Core::with_fairness(n, n, fair_after, fair_after));
        while let Some(o) = core.claim_empty() {
            core.conn(&o, |c| *c = Some(0));
            core.opened(o);
        }
        core
    }

    /// A filled two-slot core with both slots claimed (a fresh core's slots are all IDLE, so
    /// both claims succeed).
    fn both_claimed(fair_after: Duration) -> (Arc<Core<u32>>, Owned, Owned) {
        let core = filled(2, fair_after);
        let a = core.try_claim().expect("two idle slots");
        let b = core.try_claim().expect("two idle slots");
        (core, a, b)
    }

    /// Touches the connection in owned slot `o` (loom flags any concurrent access to the
    /// cell).
    fn touch(core: &Core<u32>, o: &Owned) {
        core.conn(o, |c| *c.as_mut().unwrap() += 1);
    }

    /// A thread that uses held slot `o` once and returns it.
    fn spawn_return(core: &Arc<Core<u32>>, o: Owned) -> thread::JoinHandle<()> {
        let core = core.clone();
        thread::spawn(move || {
            touch(&core, &o);
            core.release(o);
        })
    }

    /// A thread that borrows once (blocking), uses the slot and returns it.
    fn spawn_blocking_borrower(core: &Arc<Core<u32>>) -> thread::JoinHandle<()> {
        let core = core.clone();
        thread::spawn(move || {
            let o = claim_blocking(&core, None, usize::MAX, &|_| {})
                .expect("no deadline, no room limit");
            touch(&core, &o);
            core.release(o);
        })
    }

    /// Two threads that each borrow (blocking) and keep their slot until both are served:
    /// a wake not passed on to the second is then a deadlock loom reports. Returns once both
    /// are queued, so the caller's returns come after they wait.
    fn spawn_waiters_holding_until_both_served(
        core: &Arc<Core<u32>>,
    ) -> Vec<thread::JoinHandle<()>> {
        let served = Arc::new((loom::sync::Mutex::new(0usize), loom::sync::Condvar::new()));
        let waiters = (0..2)
            .map(|_| {
                let (core, served) = (core.clone(), served.clone());
                thread::spawn(move || {
                    let o = claim_blocking(&core, None, usize::MAX, &|_| {})
                        .expect("no deadline, no room limit");
                    touch(&core, &o);
                    let (n, cv) = &*served;
                    let mut n = n.lock().unwrap();
                    *n += 1;
                    cv.notify_all();
                    while *n < 2 {
                        n = cv.wait(n).unwrap();
                    }
                    drop(n);
                    core.release(o);
                })
            })
            .collect::<Vec<_>>();
        while core.q.count(SeqCst) < 2 {
            thread::yield_now();
        }
        waiters
    }

    fn check_all_idle(core: &Core<u32>, borrows: usize) {
        let mut total = 0;
        for slot in core.slots.iter() {
            assert_eq!(slot.state.load(SeqCst), IDLE, "a slot was lost");
            // SAFETY: every borrower has finished.
            total += unsafe { slot.with(|c| c.unwrap()) };
        }
        assert_eq!(total as usize, borrows, "every borrow got a connection");
        assert_eq!(core.q.count(SeqCst), 0);
        let q = lock(&core.q.queue);
        assert_eq!(q.head, NIL, "the queue is empty");
        assert_eq!(q.woken, NIL);
    }

    /// `borrowers` threads each borrow once (blocking), touch the connection and return it.
    /// `fair_after`: ZERO makes every hand-off strict, MAX never (barging only).
    fn run(slots: usize, borrowers: usize, fair_after: Duration) {
        loom::model(move || {
            let core = filled(slots, fair_after);
            let handles: Vec<_> = (0..borrowers)
                .map(|_| spawn_blocking_borrower(&core))
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            check_all_idle(&core, borrowers);
        });
    }

    /// A slice holder's return skips the lock while a waiter is woken, counting on that
    /// waiter's look; then a strict return hands its slot to that same waiter, which therefore
    /// never looks. The hand-off must wake the next waiter in its stead, or it sleeps beside
    /// the IDLE slot: each waiter keeps its slot until both are served, so a wake not passed
    /// on is a deadlock loom reports (it did, before `hand_to_head` passed it on).
    #[test]
    fn loom_a_hand_off_to_the_woken_waiter_passes_its_look_on() {
        loom::model(|| {
            let (core, a, b) = both_claimed(Duration::ZERO);
            let waiters = spawn_waiters_holding_until_both_served(&core);
            // The slice holder: returns `a` (IDLE, waking the head), takes it back if it is
            // still IDLE, and returns it again (skipping the lock if the head has not looked).
            let holder = {
                let core = core.clone();
                thread::spawn(move || {
                    LOOM_IN_SLICE.with(|s| s.set(true));
                    touch(&core, &a);
                    core.release(a);
                    if let Some(o) = core.try_claim_blocking() {
                        touch(&core, &o);
                        core.release(o);
                    }
                })
            };
            // Not in a slice: a strict return, straight to the head.
            touch(&core, &b);
            core.release(b);
            holder.join().unwrap();
            for w in waiters {
                w.join().unwrap();
            }
            let q = lock(&core.q.queue);
            assert_eq!(q.head, NIL, "the queue is empty");
            drop(q);
            for slot in core.slots.iter() {
                assert_eq!(slot.state.load(SeqCst), IDLE, "a slot was lost");
            }
        });
    }

    /// A slice holder returns its slot (IDLE, waking the head) and borrows it back, then
    /// returns it once more and stops: that last return may skip its wake, since the head,
    /// woken and starving, dozes (looks again after `DOZE`, here a yield). The head must
    /// still get the slot: a doze that were an untimed park would sleep beside the IDLE slot,
    /// a deadlock loom reports.
    #[test]
    fn loom_a_dozing_head_finds_the_slot_a_slice_left_idle() {
        loom::model(|| {
            let core = filled(1, Duration::ZERO);
            let a = core.try_claim().expect("one idle slot");
            let waiter = spawn_blocking_borrower(&core);
            while core.q.count(SeqCst) < 1 {
                thread::yield_now();
            }
            LOOM_IN_SLICE.with(|s| s.set(true));
            touch(&core, &a);
            core.release(a);
            let again = core.try_claim_blocking().map(|o| {
                touch(&core, &o);
                core.release(o);
            });
            waiter.join().unwrap();
            check_all_idle(&core, 2 + again.is_some() as usize);
        });
    }

    /// Two slice holders each return their slot and take it back once (while the waiter
    /// starves, only their own: `try_claim_blocking`), then return it for good, while a
    /// waiter queues (at once, if it sees the queue starving): whether a return woke it or
    /// skipped the wake, it must get a slot once they stop, from a wake, a look or a dozing
    /// head's second look.
    #[test]
    fn loom_a_waiter_is_served_when_slice_holders_stop() {
        loom::model(|| {
            let (core, a, b) = both_claimed(Duration::ZERO);
            let again = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
            let waiter = spawn_blocking_borrower(&core);
            let holders: Vec<_> = [a, b]
                .into_iter()
                .map(|o| {
                    let (core, again) = (core.clone(), again.clone());
                    thread::spawn(move || {
                        LOOM_IN_SLICE.with(|s| s.set(true));
                        touch(&core, &o);
                        core.release(o);
                        if let Some(o) = core.try_claim_blocking() {
                            again.fetch_add(1, SeqCst);
                            touch(&core, &o);
                            core.release(o);
                        }
                    })
                })
                .collect();
            for h in holders {
                h.join().unwrap();
            }
            waiter.join().unwrap();
            check_all_idle(&core, 3 + again.load(SeqCst));
        });
    }

    #[test]
    fn loom_two_borrowers_one_slot_barging() {
        run(1, 2, Duration::MAX);
    }

    #[test]
    fn loom_two_borrowers_one_slot_strict() {
        run(1, 2, Duration::ZERO);
    }

    #[test]
    fn loom_three_borrowers_one_slot_barging() {
        run(1, 3, Duration::MAX);
    }

    #[test]
    fn loom_three_borrowers_two_slots_strict() {
        run(2, 3, Duration::ZERO);
    }

    /// Two slots returned while the first woken waiter has not looked yet: the second return
    /// wakes no one (one wake in flight), so the woken waiter, once served, must pass the wake
    /// on, or the second waiter sleeps beside an IDLE slot. Here each waiter keeps its slot
    /// until both are served, so a wake not passed on is a deadlock loom reports.
    #[test]
    fn loom_a_served_waiter_passes_the_wake_on() {
        loom::model(|| {
            let (core, a, b) = both_claimed(Duration::MAX);
            let waiters = spawn_waiters_holding_until_both_served(&core);
            touch(&core, &a);
            core.release(a);
            touch(&core, &b);
            core.release(b);
            for w in waiters {
                w.join().unwrap();
            }
            check_all_idle(&core, 4);
        });
    }

    /// A waiter gives up (a timeout) while the holder returns the slot: the slot ends IDLE
    /// whichever wins, never lost and never lent twice; the queue ends empty.
    fn giving_up(fair_after: Duration) {
        loom::model(move || {
            let core = filled(1, fair_after);
            let held = core.try_claim().expect("one idle slot");
            let waiter = {
                let core = core.clone();
                thread::spawn(move || {
                    let got = queue_poll_cancel(&core);
                    let served = got.is_some();
                    if let Some(o) = got {
                        touch(&core, &o);
                        core.release(o);
                    }
                    served
                })
            };
            touch(&core, &held);
            core.release(held);
            let served = waiter.join().unwrap();
            check_all_idle(&core, 1 + served as usize);
        });
    }

    #[test]
    fn loom_a_waiter_giving_up_never_loses_the_slot_barging() {
        giving_up(Duration::MAX);
    }

    #[test]
    fn loom_a_waiter_giving_up_never_loses_the_slot_strict() {
        giving_up(Duration::ZERO);
    }

    /// The async wait: a task blocked on [`Wait`] is served by a return (handed over or by
    /// its own scan after the wake).
    fn async_wait(fair_after: Duration) {
        loom::model(move || {
            let core = filled(1, fair_after);
            let held = core.try_claim().expect("one idle slot");
            let task = {
                let core = core.clone();
                thread::spawn(move || {
                    let o = block_on(Wait::new(&core, usize::MAX)).expect("no room limit");
                    touch(&core, &o);
                    core.release(o);
                })
            };
            touch(&core, &held);
            core.release(held);
            task.join().unwrap();
            check_all_idle(&core, 2);
        });
    }

    /// The deadline task's wake racing a return: a task whose deadline has passed is woken
    /// by [`Core::expire`] (maintenance.rs's `deadlines` task) while the holder returns the
    /// one slot (a hand-off, or IDLE and a wake). The task gets the slot or gives up; either
    /// way it is never left asleep, and the slot ends IDLE, never lost. With a strict bound
    /// every return hands over, so a task that gives up must pass a handed slot on.
    fn deadline_racing_a_return(fair_after: Duration) {
        loom::model(move || {
            let core = filled(1, fair_after);
            let held = core.try_claim().expect("one idle slot");
            // Passed before the task queues, so the deadline task's look finds it due.
            let deadline = Instant::now();
            let task = {
                let core = core.clone();
                thread::spawn(move || {
                    match block_on(Wait::new(&*core, usize::MAX).until(Some(deadline))) {
                        Ok(o) => {
                            touch(&core, &o);
                            core.release(o);
                            true
                        }
                        Err(Refused::TimedOut) => false,
                        Err(Refused::Full(_)) => panic!("no room limit"),
                    }
                })
            };
            let expirer = {
                let core = core.clone();
                thread::spawn(move || {
                    let mut wakes = Wakes::default();
                    core.expire(Instant::now(), None, &mut wakes);
                    wakes.wake();
                })
            };
            touch(&core, &held);
            core.release(held);
            expirer.join().unwrap();
            let served = task.join().unwrap();
            check_all_idle(&core, 1 + usize::from(served));
        });
    }

    #[test]
    fn loom_a_task_past_its_deadline_racing_a_return_barging() {
        deadline_racing_a_return(Duration::MAX);
    }

    #[test]
    fn loom_a_task_past_its_deadline_racing_a_return_strict() {
        deadline_racing_a_return(Duration::ZERO);
    }

    /// The pool's opener as it waits for work (maintenance.rs's `opener`): it counts the
    /// queued waiters after each wake-up and sleeps when there are none. A wake is a permit, as
    /// `tokio::sync::Notify::notify_one` leaves one when no one is waiting yet. The real opener
    /// also wakes on a timer (100-500 ms); the model's does not, so a wake it missed is a
    /// deadlock loom reports.
    #[derive(Default)]
    struct OpenerWake(loom::sync::Mutex<bool>, loom::sync::Condvar);

    impl OpenerWake {
        fn give(&self) {
            *self.0.lock().unwrap() = true;
            self.1.notify_one();
        }

        fn take(&self) {
            let mut given = self.0.lock().unwrap();
            while !*given {
                given = self.1.wait(given).unwrap();
            }
            *given = false;
        }
    }

    /// An opener for a one-slot core with nothing open: it opens the slot's connection once
    /// a waiter is queued, looking (Acquire, as the real one does) before each sleep.
    fn spawn_opener(core: &Arc<Core<u32>>, wake: &Arc<OpenerWake>) -> thread::JoinHandle<()> {
        let (core, wake) = (core.clone(), wake.clone());
        thread::spawn(move || {
            loop {
                if core.q.count(Acquire) > 0 {
                    let o = core.claim_empty().expect("one empty slot");
                    core.conn(&o, |c| *c = Some(0));
                    core.opened(o);
                    return;
                }
                wake.take();
            }
        })
    }

    /// A borrower that finds nothing open wakes the opener: once queued, so the opener's
    /// count after the wake sees it. Woken before queueing (as the pool did until session 42),
    /// the opener can spend the wake on a count of zero and sleep while the borrower waits
    /// for a connection no one opens: loom reports that deadlock when `on_queued`'s call in
    /// `Wait::begin` is moved before `queue`.
    #[test]
    fn loom_a_blocking_borrower_wakes_the_opener_once_queued() {
        loom::model(|| {
            let core = Arc::new(Core::with_fairness(1, 1, Duration::ZERO, Duration::ZERO));
            let wake = Arc::new(OpenerWake::default());
            let opener = spawn_opener(&core, &wake);
            let o = claim_blocking(&core, None, usize::MAX, &|_| wake.give())
                .expect("no deadline, no room limit");
            touch(&core, &o);
            core.release(o);
            opener.join().unwrap();
            check_all_idle(&core, 1);
        });
    }

    /// The same for a task's wait ([`Wait`] as a future, as `Pool::get` awaits it).
    #[test]
    fn loom_an_async_borrower_wakes_the_opener_once_queued() {
        loom::model(|| {
            let core = Arc::new(Core::with_fairness(1, 1, Duration::ZERO, Duration::ZERO));
            let wake = Arc::new(OpenerWake::default());
            let opener = spawn_opener(&core, &wake);
            let give = |_| wake.give();
            let o = block_on(Wait::new(&core, usize::MAX).on_queued(&give)).expect("no room limit");
            touch(&core, &o);
            core.release(o);
            opener.join().unwrap();
            check_all_idle(&core, 1);
        });
    }

    #[test]
    fn loom_async_wait_is_served_barging() {
        async_wait(Duration::MAX);
    }

    #[test]
    fn loom_async_wait_is_served_strict() {
        async_wait(Duration::ZERO);
    }

    /// A waiting future dropped (a cancelled borrow or a timeout) while the holder returns:
    /// a slot handed to it meanwhile is passed on, not lost.
    #[test]
    fn loom_a_dropped_async_wait_passes_the_slot_on() {
        loom::model(|| {
            let core = filled(1, Duration::ZERO);
            let held = core.try_claim().expect("one idle slot");
            let task = {
                let core = core.clone();
                thread::spawn(move || {
                    let mut wait = Box::pin(Wait::new(&core, usize::MAX));
                    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
                    match wait.as_mut().poll(&mut cx) {
                        Poll::Ready(o) => {
                            let o = o.expect("no room limit");
                            touch(&core, &o);
                            core.release(o);
                            true
                        }
                        Poll::Pending => false,
                    }
                })
            };
            touch(&core, &held);
            core.release(held);
            let served = task.join().unwrap();
            check_all_idle(&core, 1 + served as usize);
        });
    }

    /// A served waiter polled again (a spurious wake) while the entry the hand-off freed is
    /// reused by the next waiter: under the lock the poll must see its mailbox filled and
    /// leave the entry alone. Taking it as its own would put this waiter's waker in the next
    /// waiter's entry, and that one, once handed the slot, would never be woken (a deadlock
    /// loom reports: checked by removing `poll_served`'s second look at the mailbox).
    #[test]
    fn loom_a_served_waiter_polled_again_leaves_its_reused_entry_alone() {
        loom::model(|| {
            let core = filled(1, Duration::ZERO);
            let held = core.try_claim().expect("one idle slot");
            // The waiter under test runs on this thread, polled by hand: woken, it unparks.
            let waker = Waker::from(std::sync::Arc::new(Unpark(loom::thread::current())));
            let mut a = std::pin::pin!(Wait::new(&*core, usize::MAX));
            a.as_mut()
                .queue(Wake::Task(waker.clone()))
                .expect("no room limit");
            let returned = std::sync::Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let returner = {
                let (core, returned) = (core.clone(), returned.clone());
                thread::spawn(move || {
                    touch(&core, &held);
                    core.release(held);
                    returned.store(true, SeqCst);
                })
            };
            let next = spawn_blocking_borrower(&core);
            // Its first poll races the hand-off and the next waiter's queueing.
            let o = loop {
                match a.as_mut().poll_slot(Some(&waker)) {
                    Ok((o, _)) => break o,
                    Err(_) => loom::thread::park(),
                }
            };
            touch(&core, &o);
            core.release(o);
            // Served by a poll that found the mailbox filled, this thread may still be owed
            // the returner's wake (it wakes after it unlocks). Loom resumes a thread blocked in
            // `join` when it is unparked, and then fails its own check, where std's `join`
            // ignores an unpark: so no `join` until the returner is past its wake.
            while !returned.load(SeqCst) {
                loom::thread::yield_now();
            }
            returner.join().unwrap();
            next.join().unwrap();
            check_all_idle(&core, 3);
        });
    }

    /// A waiter's node dropped (a cancelled borrow) after a returner may have handed it the
    /// slot, before it read its mailbox: the drop finds the slot in the mailbox and returns
    /// it, or leaves the queue; the returner never writes to the node after the drop.
    #[test]
    fn loom_a_served_waiter_dropped_before_reading_returns_the_slot() {
        loom::model(|| {
            let core = filled(1, Duration::ZERO);
            let held = core.try_claim().expect("one idle slot");
            let task = {
                let core = core.clone();
                thread::spawn(move || {
                    let mut w = Box::pin(Wait::new(&*core, usize::MAX));
                    w.as_mut()
                        .queue(Wake::Task(futures_util::task::noop_waker()))
                        .expect("no room limit");
                    drop(w);
                })
            };
            touch(&core, &held);
            core.release(held);
            task.join().unwrap();
            check_all_idle(&core, 1);
        });
    }

    /// Two holders return while two waiters (a task and a thread) wait, every return a
    /// hand-off: each waiter gets one slot, through its own mailbox, and both slots end IDLE.
    #[test]
    fn loom_two_waiters_two_returners_strict() {
        loom::model(|| {
            let (core, a, b) = both_claimed(Duration::ZERO);
            let task = {
                let core = core.clone();
                thread::spawn(move || {
                    let o = block_on(Wait::new(&*core, usize::MAX)).expect("no room limit");
                    touch(&core, &o);
                    core.release(o);
                })
            };
            let blocked = spawn_blocking_borrower(&core);
            let returner = spawn_return(&core, b);
            touch(&core, &a);
            core.release(a);
            returner.join().unwrap();
            task.join().unwrap();
            blocked.join().unwrap();
            check_all_idle(&core, 4);
        });
    }

    /// A holder's return races the reclaimer (time-to-live) while a borrower waits: exactly
    /// one of holder and reclaimer owns the slot; the waiter gets it only if the holder
    /// returned it; the slot ends IDLE (returned) or EMPTY (reclaimed), never lost.
    #[test]
    fn loom_a_reclaim_racing_a_return_and_a_waiter() {
        loom::model(|| {
            let core = filled(1, Duration::ZERO);
            let o = core.try_claim().expect("one idle slot");
            let lease = core.begin_lease(o);
            let reclaimer = {
                let core = core.clone();
                thread::spawn(
                    move || match core.current_lease(0).and_then(|l| core.end_lease(l)) {
                        Some(o) => {
                            core.conn(&o, |c| *c = None);
                            core.vacate(o);
                            true
                        }
                        None => false,
                    },
                )
            };
            let waiter = {
                let core = core.clone();
                thread::spawn(move || {
                    let got = queue_poll_cancel(&core);
                    let served = got.is_some();
                    if let Some(o) = got {
                        touch(&core, &o);
                        core.release(o);
                    }
                    served
                })
            };
            let returned = match core.end_lease(lease) {
                Some(o) => {
                    touch(&core, &o);
                    core.release(o);
                    true
                }
                None => false,
            };
            let reclaimed = reclaimer.join().unwrap();
            let served = waiter.join().unwrap();
            assert!(returned != reclaimed, "exactly one side owns the slot");
            assert!(!(reclaimed && served), "a reclaimed slot is lent to no one");
            let state = core.slots[0].state.load(SeqCst);
            assert_eq!(state, if returned { IDLE } else { EMPTY });
            assert_eq!(core.q.count(SeqCst), 0);
        });
    }
}
