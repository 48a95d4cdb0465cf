//! A global allocator that counts live heap bytes and their peak, for measuring a client's
//! memory (the fetch-size experiments and the memory-cap tests).
//!
//! It wraps the system allocator and adds two atomic updates per allocation; install it in a
//! binary that wants the figures (it counts every thread of the process).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The counting allocator. Install with `#[global_allocator]`.
///
/// ```no_run
/// use slipstream_testkit::CountingAllocator;
/// #[global_allocator]
/// static ALLOC: CountingAllocator = CountingAllocator;
///
/// let base = CountingAllocator::reset_peak();
/// let v = vec![0u8; 1 << 20];
/// assert!(CountingAllocator::peak() - base >= 1 << 20);
/// # drop(v);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

impl CountingAllocator {
    /// Heap bytes allocated and not yet freed.
    pub fn current() -> usize {
        CURRENT.load(Ordering::Relaxed)
    }

    /// The most heap bytes live at once since the last [`CountingAllocator::reset_peak`].
    pub fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }

    /// Starts a new peak from the current level, and returns that level.
    pub fn reset_peak() -> usize {
        let now = CURRENT.load(Ordering::Relaxed);
        PEAK.store(now, Ordering::Relaxed);
        now
    }

    fn added(size: usize) {
        let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    fn removed(size: usize) {
        CURRENT.fetch_sub(size, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// GlobalAlloc contract holds as it does for `System`; the counters only observe sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Self::added(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Self::added(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) };
        Self::removed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` came from `System` with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            Self::removed(layout.size());
            Self::added(new_size);
        }
        p
    }
}
