//! The token bucket's atomic shell: one word (the scaled theoretical arrival time) and
//! one compare-and-swap loop around the pure [`Gcra::take`].
//!
//! # The guarantee kept here
//!
//! Every token taken is one successful compare-and-swap from the arrival time the
//! decision was made on, so the takes form a sequence in the word's modification
//! order, each decided on its predecessor's result: under any number of threads the
//! admissions are exactly those of one thread taking them in that order, and over any
//! interval of length `t` at most `capacity + rate * t` tokens are taken. Relaxed
//! ordering suffices: the word publishes no other data.

use super::Gcra;
use crate::sync::{AtomicU64, Ordering};

/// The state of one token bucket.
#[derive(Debug)]
pub(crate) struct GcraCell {
    tat: AtomicU64,
}

impl GcraCell {
    /// A full bucket at `now` (scaled for `g`).
    pub(crate) fn new(g: &Gcra, now: u64) -> GcraCell {
        GcraCell {
            tat: AtomicU64::new(g.full(now)),
        }
    }

    /// Takes `n` tokens of `g` at `now` (scaled for `g`) if they are there.
    #[inline]
    pub(crate) fn try_take(&self, g: &Gcra, now: u64, n: u64) -> bool {
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let Some(next) = g.take(tat, now, n) else {
                return false;
            };
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }

    /// Reserves `n` tokens of `g` at `now` if they are there within `max_wait` (all
    /// scaled for `g`): the wait (0 if they are there now), or `None` (nothing
    /// reserved). One compare-and-swap per reservation, as [`try_take`](Self::try_take).
    #[inline]
    pub(crate) fn try_reserve(&self, g: &Gcra, now: u64, n: u64, max_wait: u64) -> Option<u64> {
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let (next, wait) = g.reserve(tat, now, n, max_wait)?;
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(wait),
                Err(seen) => tat = seen,
            }
        }
    }

    /// The arrival time now (for carrying the state into another bucket).
    pub(crate) fn tat(&self) -> u64 {
        self.tat.load(Ordering::Relaxed)
    }

    /// Replaces the arrival time (a bucket taking over another's deficit, before any
    /// call can reach it).
    pub(crate) fn set(&self, tat: u64) {
        self.tat.store(tat, Ordering::Relaxed);
    }
}
