//! Atomics, cells and thread parking from `loom` under `cfg(loom)` (so the model checker sees
//! every access), from `std` otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, current as current_thread, park, yield_now};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
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
