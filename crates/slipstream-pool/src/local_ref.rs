//! This thread's spare strong reference to a pool: a borrow takes it instead of cloning the
//! pool's `Arc`, and the guard's drop keeps it again, so a borrow and its return on one thread
//! write no reference count that other threads write too.
//!
//! # Implementation details
//!
//! A guard owns a strong reference to its pool (it must find the pool to return its slot,
//! whoever dropped the pool's handles meanwhile). Taking it by `Arc::clone` and dropping it at
//! the return were two read-modify-writes per borrow of the one cache line that holds the
//! count, written by every borrower on every CPU: at 10 threads on two CPUs that line bounced
//! on every borrow, and cost a quarter to two thirds of the rate (docs/benchmarks.md,
//! pool-scaling, "the shared reference count").
//!
//! The cache holds at most one reference per thread, for the pool this thread last returned a
//! guard to; a borrow from another pool, or a second guard held at once, clones as before. A
//! `thread_local!` cannot be generic, so the reference is kept type-erased: the pointer from
//! `Arc::into_raw`, the `TypeId` of what it points to, and the function that turns it back
//! into that `Arc` and drops it. A reference is handed out only to a caller asking for the
//! same allocation (the same address, which no two live allocations share) as the same type,
//! so the `Arc` rebuilt is the one that was put in.
//!
//! A reference cached here keeps the pool's memory alive until the thread takes it, replaces
//! it or exits; it does not keep connections open: the pool closes them when its last handle
//! is dropped (`Pool`'s drop), not when its memory is freed.

use std::any::TypeId;
use std::cell::Cell;
use std::sync::Arc;

/// A strong reference, type-erased.
struct Cached {
    /// From `Arc::<T>::into_raw`.
    ptr: *const (),
    /// `TypeId::of::<T>()`.
    type_id: TypeId,
    /// `release::<T>`.
    release: unsafe fn(*const ()),
}

impl Drop for Cached {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Arc::<T>::into_raw` and `release` is `release::<T>` for
        // the same `T` (both set together in `keep`); a `Cached` is dropped at most once and
        // its reference was not handed out (`take` forgets the `Cached` it hands out).
        unsafe { (self.release)(self.ptr) }
    }
}

/// Drops the reference `ptr`, from `Arc::<T>::into_raw`.
///
/// # Safety
/// `ptr` must come from `Arc::<T>::into_raw`, and its reference must not be released twice.
unsafe fn release<T>(ptr: *const ()) {
    // SAFETY: the caller's promise.
    drop(unsafe { Arc::from_raw(ptr.cast::<T>()) });
}

thread_local!(static CACHE: Cell<Option<Cached>> = const { Cell::new(None) });

/// A strong reference to `pool`'s allocation: this thread's cached one if it is for `pool`,
/// otherwise a clone (the cached one, for another pool, stays).
#[inline]
pub(crate) fn take<T: Send + Sync + 'static>(pool: &Arc<T>) -> Arc<T> {
    let want = Arc::as_ptr(pool).cast::<()>();
    let cached = CACHE.try_with(|c| match c.take() {
        Some(k) if k.ptr == want && k.type_id == TypeId::of::<T>() => {
            let ptr = k.ptr;
            // The reference moves to the caller: `k`'s drop must not release it.
            std::mem::forget(k);
            // SAFETY: `ptr` is `Arc::into_raw` of an `Arc` to the allocation `pool` points at
            // (live: `pool` holds it), put in as an `Arc<T>` (`type_id`), and its reference
            // was owned by the cache entry just forgotten, so it is released once, by the
            // `Arc` returned.
            Some(unsafe { Arc::from_raw(ptr.cast::<T>()) })
        }
        other => {
            c.set(other);
            None
        }
    });
    match cached {
        Ok(Some(pool)) => pool,
        // None cached for this pool, or this thread's cache is gone (it is exiting).
        _ => Arc::clone(pool),
    }
}

/// Keeps `pool` as this thread's cached reference; the one it replaces is dropped. On a thread
/// that is exiting (its cache already gone) the reference is dropped at once.
#[inline]
pub(crate) fn keep<T: Send + Sync + 'static>(pool: Arc<T>) {
    let new = Cached {
        ptr: Arc::into_raw(pool).cast::<()>(),
        type_id: TypeId::of::<T>(),
        release: release::<T>,
    };
    // If the closure does not run, `new` is dropped with it, releasing the reference. The old
    // entry is dropped after `replace` returns: a pool freed by that drop may reach this cache
    // again (a `Cell`, so it sees the new entry, not a half-done update).
    let _ = CACHE.try_with(move |c| drop(c.replace(Some(new))));
}

#[cfg(test)]
mod tests {
    //! Run under Miri too (`make miri`): every path that rebuilds or drops a reference.
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Counts its drops.
    struct Counted(&'static AtomicUsize);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn a_kept_reference_is_taken_back_without_a_clone() {
        let pool = Arc::new(7u64);
        let lent = take(&pool);
        assert_eq!(Arc::strong_count(&pool), 2, "nothing cached yet: a clone");
        keep(lent);
        assert_eq!(Arc::strong_count(&pool), 2, "the cache holds it");
        let again = take(&pool);
        assert!(Arc::ptr_eq(&again, &pool));
        assert_eq!(
            Arc::strong_count(&pool),
            2,
            "taken from the cache, not cloned"
        );
        drop(again);
        assert_eq!(Arc::strong_count(&pool), 1);
    }

    #[test]
    fn another_pool_or_type_gets_a_clone_and_the_cache_keeps_its_own() {
        let a = Arc::new(1u64);
        let b = Arc::new(2u64);
        keep(Arc::clone(&a));
        let from_b = take(&b);
        assert_eq!(*from_b, 2);
        assert_eq!(Arc::strong_count(&a), 2, "a's cached reference stays");
        // The same address asked for as another type is not handed out: a `u32` pool whose
        // allocation cannot be `a`'s while `a` lives, so a clone.
        let c = Arc::new(3u32);
        let from_c = take(&c);
        assert_eq!(*from_c, 3);
        assert_eq!(Arc::strong_count(&a), 2);
        keep(from_b);
        assert_eq!(Arc::strong_count(&a), 1, "replaced: a's reference dropped");
        assert_eq!(Arc::strong_count(&b), 2);
        drop(take(&b));
        assert_eq!(Arc::strong_count(&b), 1);
        drop(from_c);
    }

    #[test]
    fn the_last_reference_in_a_cache_is_dropped_when_its_thread_exits() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        let pool = Arc::new(Counted(&DROPS));
        let moved = Arc::clone(&pool);
        std::thread::spawn(move || {
            let lent = take(&moved);
            drop(moved);
            keep(lent);
        })
        .join()
        .unwrap();
        assert_eq!(
            Arc::strong_count(&pool),
            1,
            "the exited thread's cache let go"
        );
        drop(pool);
        assert_eq!(DROPS.load(SeqCst), 1);
    }

    #[test]
    fn a_reference_kept_on_one_thread_and_taken_on_another_is_cloned() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        let pool = Arc::new(Counted(&DROPS));
        keep(Arc::clone(&pool));
        let other = Arc::clone(&pool);
        let count = std::thread::spawn(move || {
            let lent = take(&other);
            let n = Arc::strong_count(&other);
            drop(lent);
            n
        })
        .join()
        .unwrap();
        assert_eq!(count, 4, "the other thread's cache is empty: a clone");
        drop(take(&pool));
        drop(pool);
        assert_eq!(DROPS.load(SeqCst), 1, "every reference released once");
    }
}
