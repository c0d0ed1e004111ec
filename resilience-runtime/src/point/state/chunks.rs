//! A fixed array of blocks made on first use: the per-thread lanes of the hung-call
//! table and of the durations are allocated a few at a time, by the first call that
//! needs them, so a point called from one thread holds one block, not every lane.
//!
//! A block is published once, by a compare-and-swap from null (the loser frees its
//! own), and then never moved or freed until the array is dropped: a reference to it
//! lives as long as the array.

use crate::sync::{AtomicPtr, Ordering};
use std::fmt;

/// `N` blocks of `T`, each made by [`get_or_make`](Self::get_or_make) on first use.
pub(crate) struct Chunks<T, const N: usize>([AtomicPtr<T>; N]);

impl<T, const N: usize> Chunks<T, N> {
    pub(crate) fn new() -> Self {
        Chunks(std::array::from_fn(
            |_| AtomicPtr::new(std::ptr::null_mut()),
        ))
    }

    /// Block `i` (modulo `N`) if it was made.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        let p = self.0[i % N].load(Ordering::Acquire);
        // SAFETY: a non-null pointer was published by `get_or_make` from a leaked
        // `Box<T>` and is freed only by `drop`, which has `&mut self`.
        unsafe { p.as_ref() }
    }

    /// Block `i` (modulo `N`), made now with `make` if no call made it before.
    #[cold]
    pub(crate) fn get_or_make(&self, i: usize, make: impl FnOnce() -> T) -> &T {
        if let Some(block) = self.get(i) {
            return block;
        }
        let fresh = Box::into_raw(Box::new(make()));
        let p = match self.0[i % N].compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(theirs) => {
                // SAFETY: `fresh` was never published; it is ours to free.
                drop(unsafe { Box::from_raw(fresh) });
                theirs
            }
        };
        // SAFETY: as in `get`: published, freed only by `drop`.
        unsafe { &*p }
    }

    /// The blocks made, in order.
    pub(crate) fn made(&self) -> impl Iterator<Item = &T> {
        (0..N).filter_map(|i| self.get(i))
    }

    /// The pointer array (inline, for the caller to count where it lives) and the
    /// blocks made.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.made().count() * std::mem::size_of::<T>()
    }
}

/// One block made on first use ([`Chunks`] of one): read with a load and a test,
/// where a `OnceLock` of a box reads its state and then its pointer.
pub(crate) struct OnceBox<T>(Chunks<T, 1>);

impl<T> OnceBox<T> {
    pub(crate) fn new() -> Self {
        OnceBox(Chunks::new())
    }

    /// The block, if it was made.
    #[inline]
    pub(crate) fn get(&self) -> Option<&T> {
        self.0.get(0)
    }

    /// The block, made now with `make` if no call made it before.
    #[cold]
    pub(crate) fn get_or_init(&self, make: impl FnOnce() -> T) -> &T {
        self.0.get_or_make(0, make)
    }
}

impl<T: fmt::Debug> fmt::Debug for OnceBox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OnceBox").field(&self.get()).finish()
    }
}

impl<T, const N: usize> Drop for Chunks<T, N> {
    fn drop(&mut self) {
        for cell in self.0.iter() {
            let p = cell.swap(std::ptr::null_mut(), Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: published by `get_or_make` from a `Box`, and `&mut self`
                // means no reference into a block is alive.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

impl<T, const N: usize> fmt::Debug for Chunks<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunks")
            .field("made", &self.made().count())
            .field("of", &N)
            .finish()
    }
}
