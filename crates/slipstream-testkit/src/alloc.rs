//! A global allocator that measures how far the heap grows over a piece of work, for a client's
//! memory figures (the fetch-size experiments and the memory-cap tests).
//!
//! It wraps the system allocator and counts only while a [`HeapGrowth`] measurement is alive.
//! Outside one, an allocation costs one relaxed load of a flag no thread writes, so a process
//! that installs it for a few measurements (the `slipstream` binary) does not pay for it
//! elsewhere: counting always made every allocation and free two read-modify-writes of one
//! cache line all threads share, a transfer between cores each time two threads allocate (the
//! bench runner's user threads do, every transaction). On this 2-vCPU VM the difference to the
//! bench runner's `SELECT 1` was within run-to-run noise (median user CPU 5.1 against 5.3 µs
//! per transaction over six alternating runs each); the cost is structural, not measured.
//!
//! Invariant: `LIVE` changes only while `MEASURING > 0`, so it is not the live heap but the net
//! bytes allocated while measuring; a measurement reads it relative to its own start, which
//! is all a growth figure needs. A block allocated before a measurement and freed during it
//! lowers `LIVE` below the start, as it lowers the real heap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

/// Measurements alive now.
static MEASURING: AtomicUsize = AtomicUsize::new(0);
/// Net bytes allocated while measuring (see the module's invariant).
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The highest `LIVE` since the latest measurement started.
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// This allocator served an allocation made while measuring: it is the global allocator.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The counting allocator. Install with `#[global_allocator]`, then measure with
/// [`CountingAllocator::measure`].
///
/// ```no_run
/// use slipstream_testkit::CountingAllocator;
/// #[global_allocator]
/// static ALLOC: CountingAllocator = CountingAllocator;
///
/// let growth = CountingAllocator::measure();
/// let v = vec![0u8; 1 << 20];
/// assert!(growth.peak() >= Some(1 << 20));
/// # drop(v);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

/// One measurement of heap growth, from [`CountingAllocator::measure`] until it is dropped.
///
/// Measurements are meant one at a time: a second one started while the first lives restarts
/// the peak that both read.
///
/// ```no_run
/// use slipstream_testkit::CountingAllocator;
/// #[global_allocator]
/// static ALLOC: CountingAllocator = CountingAllocator;
///
/// let growth = CountingAllocator::measure(); // a HeapGrowth
/// let rows: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
/// println!("reading the rows grew the heap by {:?} bytes", growth.peak());
/// # drop(rows);
/// ```
#[derive(Debug)]
#[must_use = "counting stops when the measurement is dropped"]
pub struct HeapGrowth {
    base: isize,
}

impl CountingAllocator {
    /// Starts counting every thread's allocations, and returns the measurement that reads the
    /// heap's peak growth from now on.
    ///
    /// Allocations on other threads are counted once those threads see the start: a thread
    /// that learns of the work after this call (a spawned task, a channel message) does.
    ///
    /// ```
    /// let growth = slipstream_testkit::CountingAllocator::measure();
    /// // Not installed as the global allocator in this doctest: nothing to report.
    /// assert_eq!(growth.peak(), None);
    /// ```
    pub fn measure() -> HeapGrowth {
        MEASURING.fetch_add(1, Ordering::Relaxed);
        // An allocation of our own, so `INSTALLED` is set before anything is measured even if
        // the work allocates nothing.
        drop(std::hint::black_box(Box::new(0u64)));
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        HeapGrowth { base }
    }

    fn added(size: usize) {
        let size = size as isize;
        let now = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
        if !INSTALLED.load(Ordering::Relaxed) {
            INSTALLED.store(true, Ordering::Relaxed);
        }
    }

    fn removed(size: usize) {
        LIVE.fetch_sub(size as isize, Ordering::Relaxed);
    }

    /// Whether allocations are being counted now.
    fn counting() -> bool {
        MEASURING.load(Ordering::Relaxed) > 0
    }
}

impl HeapGrowth {
    /// The most the heap grew above its size at the start of this measurement, in bytes; `None`
    /// when [`CountingAllocator`] is not the global allocator.
    ///
    /// ```no_run
    /// # use slipstream_testkit::CountingAllocator;
    /// let growth = CountingAllocator::measure();
    /// let v = vec![0u8; 4096];
    /// drop(v);
    /// assert!(growth.peak() >= Some(4096));
    /// ```
    pub fn peak(&self) -> Option<usize> {
        if !INSTALLED.load(Ordering::Relaxed) {
            return None;
        }
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(self.base);
        Some(peak.max(0) as usize)
    }
}

impl Drop for HeapGrowth {
    fn drop(&mut self) {
        MEASURING.fetch_sub(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// GlobalAlloc contract holds as it does for `System`; the counters only observe sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && Self::counting() {
            Self::added(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && Self::counting() {
            Self::added(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) };
        if Self::counting() {
            Self::removed(layout.size());
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` came from `System` with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && Self::counting() {
            Self::removed(layout.size());
            Self::added(new_size);
        }
        p
    }
}
