//! Atomics, cells and thread parking from `loom` under `cfg(loom)` (so the model checker sees
//! every access), from `std` otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current as current_thread, park, yield_now};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, current as current_thread, yield_now};

/// An `UnsafeCell` with loom's closure API, so the same code is checked by loom.
#[derive(Debug)]
pub(crate) struct Cell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> Cell<T> {
    pub(crate) fn new(value: T) -> Cell<T> {
        #[cfg(loom)]
        return Cell(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        return Cell(std::cell::UnsafeCell::new(value));
    }

    /// Runs `f` with a mutable pointer to the value. The caller must hold exclusive access.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        return f(self.0.get());
    }
}

/// A FIFO queue shared between threads: crossbeam's lock-free `SegQueue`, or under loom a
/// mutex-guarded `VecDeque` (loom cannot see `SegQueue`'s own synchronisation, so it would
/// report the hand-over of a queued value as a race; the mutex models the same linearizable
/// queue).
pub(crate) struct Queue<T>(
    #[cfg(loom)] loom::sync::Mutex<std::collections::VecDeque<T>>,
    #[cfg(not(loom))] crossbeam_queue::SegQueue<T>,
);

impl<T> Queue<T> {
    pub(crate) fn new() -> Queue<T> {
        #[cfg(loom)]
        return Queue(loom::sync::Mutex::new(std::collections::VecDeque::new()));
        #[cfg(not(loom))]
        return Queue(crossbeam_queue::SegQueue::new());
    }

    pub(crate) fn push(&self, value: T) {
        #[cfg(loom)]
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(value);
        #[cfg(not(loom))]
        self.0.push(value);
    }

    pub(crate) fn pop(&self) -> Option<T> {
        #[cfg(loom)]
        return self.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        #[cfg(not(loom))]
        return self.0.pop();
    }

    pub(crate) fn is_empty(&self) -> bool {
        #[cfg(loom)]
        return self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
        #[cfg(not(loom))]
        return self.0.is_empty();
    }
}
