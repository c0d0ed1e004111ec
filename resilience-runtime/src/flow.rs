//! The visit counter and the in-flight count of a point, in one atomic word, so that
//! a single atomic operation both counts a call and admits it under a concurrency
//! limit (and a single one releases it).
//!
//! The low 24 bits hold the calls in flight, the high 40 bits the visits modulo 2^40.
//! Full 64-bit visit totals are rebuilt from a base that the call crossing each 2^32
//! boundary moves up, so they stay exact as long as fewer than 2^40 - 2^32 (about
//! 10^12) calls happen while that one call is between its increment and its update.
//! Concurrency limits go up to 2^22; calls admitted without a limit that would push
//! the in-flight field past 2^23 are counted in a separate spill counter instead, so
//! the field can never carry into the visits.

use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

const INFLIGHT_BITS: u32 = 24;
/// One visit in the word.
const VISIT: u64 = 1 << INFLIGHT_BITS;
const INFLIGHT_MASK: u64 = VISIT - 1;
const VISIT_MASK: u64 = (1 << (64 - INFLIGHT_BITS)) - 1;
/// The base moves each time the low 32 bits of the visit field wrap.
const BASE_STEP_MASK: u64 = (1 << 32) - 1;
/// Unlimited admissions beyond this many calls in flight go to the spill counter.
const SPILL_AT: u64 = 1 << 23;

/// Where an admitted call holds its in-flight slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// No slot: the call is not tracked.
    None,
    /// In the flow word.
    Word,
    /// In the spill counter.
    Spill,
}

/// What one admission saw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// The call's visit number: the point's visit total including this call.
    pub(crate) visit: u64,
    /// Calls in flight right after this one took its slot (without one: before it).
    pub(crate) inflight: u64,
    /// The slot taken, if any.
    pub(crate) slot: Slot,
}

/// Visits and calls in flight of one point.
#[derive(Debug)]
pub(crate) struct Flow {
    word: CachePadded<AtomicU64>,
    /// A full visit total at most 2^40 below the true one (see the module docs).
    base: AtomicU64,
    spill: AtomicU64,
}

impl Flow {
    pub(crate) fn new() -> Flow {
        Flow::starting_at(0)
    }

    /// A flow whose visit total starts at `visits` (tests of the wrap-around).
    pub(crate) fn starting_at(visits: u64) -> Flow {
        Flow {
            word: CachePadded::new(AtomicU64::new((visits & VISIT_MASK) << INFLIGHT_BITS)),
            base: AtomicU64::new(visits),
            spill: AtomicU64::new(0),
        }
    }

    /// Counts a visit without taking a slot; returns the visit number.
    #[inline]
    pub(crate) fn visit(&self) -> u64 {
        let old = self.word.fetch_add(VISIT, Ordering::Relaxed);
        self.number(old)
    }

    /// Counts a visit and takes a slot if fewer than `max` calls are in flight (`max`
    /// at most 2^22).
    #[inline]
    pub(crate) fn visit_limited(&self, max: u64) -> Entry {
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            let inflight = cur & INFLIGHT_MASK;
            if inflight >= max {
                let old = self.word.fetch_add(VISIT, Ordering::Relaxed);
                return Entry {
                    visit: self.number(old),
                    inflight: old & INFLIGHT_MASK,
                    slot: Slot::None,
                };
            }
            match self.word.compare_exchange_weak(
                cur,
                cur + VISIT + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Entry {
                        visit: self.number(cur),
                        inflight: inflight + 1,
                        slot: Slot::Word,
                    }
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Counts a visit and takes a slot whatever the count.
    #[inline]
    pub(crate) fn visit_forced(&self) -> Entry {
        let old = self.word.fetch_add(VISIT + 1, Ordering::Acquire);
        let visit = self.number(old);
        let inflight = (old & INFLIGHT_MASK) + 1;
        if inflight <= SPILL_AT {
            return Entry {
                visit,
                inflight,
                slot: Slot::Word,
            };
        }
        let (inflight, slot) = self.spill_one();
        Entry {
            visit,
            inflight,
            slot,
        }
    }

    /// Takes a slot for an already counted visit, whatever the count; returns the
    /// calls in flight after it and the slot.
    #[inline]
    pub(crate) fn acquire_forced(&self) -> (u64, Slot) {
        let inflight = (self.word.fetch_add(1, Ordering::Acquire) & INFLIGHT_MASK) + 1;
        if inflight <= SPILL_AT {
            return (inflight, Slot::Word);
        }
        self.spill_one()
    }

    /// Moves a slot just taken in the word to the spill counter.
    #[cold]
    fn spill_one(&self) -> (u64, Slot) {
        self.word.fetch_sub(1, Ordering::Relaxed);
        let spilled = self.spill.fetch_add(1, Ordering::Acquire) + 1;
        (SPILL_AT + spilled, Slot::Spill)
    }

    /// Gives a slot back.
    #[inline]
    pub(crate) fn release(&self, slot: Slot) {
        match slot {
            Slot::None => {}
            Slot::Word => {
                self.word.fetch_sub(1, Ordering::Release);
            }
            Slot::Spill => {
                self.spill.fetch_sub(1, Ordering::Release);
            }
        }
    }

    /// The visit total.
    pub(crate) fn visits(&self) -> u64 {
        self.extend((self.word.load(Ordering::Relaxed) >> INFLIGHT_BITS) & VISIT_MASK)
    }

    /// Calls in flight.
    pub(crate) fn inflight(&self) -> u64 {
        (self.word.load(Ordering::Relaxed) & INFLIGHT_MASK) + self.spill.load(Ordering::Relaxed)
    }

    /// The visit number of the call whose increment returned `old`.
    #[inline]
    fn number(&self, old: u64) -> u64 {
        let field = ((old >> INFLIGHT_BITS) + 1) & VISIT_MASK;
        if field & BASE_STEP_MASK == 0 {
            self.advance(field);
        }
        self.extend(field)
    }

    #[inline]
    fn extend(&self, field: u64) -> u64 {
        let base = self.base.load(Ordering::Relaxed);
        base.wrapping_add(field.wrapping_sub(base) & VISIT_MASK)
    }

    #[cold]
    fn advance(&self, field: u64) {
        let full = self.extend(field);
        self.base.fetch_max(full, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64 as StdU64;
    use std::sync::Arc;

    #[test]
    fn counts_visits_and_slots() {
        let f = Flow::new();
        assert_eq!(f.visit(), 1);
        let e = f.visit_limited(1);
        assert_eq!((e.visit, e.inflight, e.slot), (2, 1, Slot::Word));
        let e = f.visit_limited(1);
        assert_eq!((e.visit, e.inflight, e.slot), (3, 1, Slot::None), "full");
        let e = f.visit_forced();
        assert_eq!((e.visit, e.inflight, e.slot), (4, 2, Slot::Word));
        assert_eq!(f.acquire_forced(), (3, Slot::Word));
        assert_eq!((f.visits(), f.inflight()), (4, 3));
        for _ in 0..3 {
            f.release(Slot::Word);
        }
        f.release(Slot::None);
        assert_eq!((f.visits(), f.inflight()), (4, 0));
        assert_eq!(
            f.visit_limited(0).slot,
            Slot::None,
            "a limit of 0 admits none"
        );
    }

    #[test]
    fn visit_totals_survive_the_40_bit_wrap() {
        let start = (1u64 << 40) - 3;
        let f = Flow::starting_at(start);
        let mut last = start;
        for _ in 0..10 {
            let n = f.visit_forced().visit;
            assert_eq!(n, last + 1);
            last = n;
        }
        assert_eq!(f.visits(), start + 10);
        assert_eq!(f.inflight(), 10, "the in-flight field never carried");
        // Far past several wraps, with the base moved at each 2^32 boundary.
        let f = Flow::starting_at((5u64 << 40) + (1 << 32) - 2);
        assert_eq!(f.visit(), (5u64 << 40) + (1 << 32) - 1);
        assert_eq!(f.visit(), (5u64 << 40) + (1 << 32));
        assert_eq!(f.base.load(Ordering::Relaxed), (5u64 << 40) + (1 << 32));
        assert_eq!(f.visit(), (5u64 << 40) + (1 << 32) + 1);
    }

    #[test]
    fn unlimited_admissions_spill_instead_of_carrying() {
        let f = Flow::new();
        f.word.fetch_add(SPILL_AT - 1, Ordering::Relaxed);
        let e = f.visit_forced();
        assert_eq!((e.inflight, e.slot), (SPILL_AT, Slot::Word));
        let e = f.visit_forced();
        assert_eq!((e.inflight, e.slot), (SPILL_AT + 1, Slot::Spill));
        assert_eq!(f.acquire_forced(), (SPILL_AT + 2, Slot::Spill));
        assert_eq!(f.inflight(), SPILL_AT + 2);
        assert_eq!(f.visits(), 2);
        f.release(Slot::Spill);
        f.release(Slot::Spill);
        f.release(Slot::Word);
        assert_eq!(f.inflight(), SPILL_AT - 1);
    }

    #[test]
    fn racing_threads_never_exceed_the_limit_and_counts_add_up() {
        const LIMIT: u64 = 3;
        let f = Arc::new(Flow::new());
        let running = Arc::new(StdU64::new(0));
        let admitted = Arc::new(StdU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (f, running, admitted) = (f.clone(), running.clone(), admitted.clone());
                std::thread::spawn(move || {
                    for i in 0..50_000u32 {
                        let e = if i % 5 == 0 {
                            f.visit_forced()
                        } else {
                            f.visit_limited(LIMIT)
                        };
                        if e.slot == Slot::Word && i % 5 != 0 {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= LIMIT + 4, "{now} in flight");
                            assert!(e.inflight <= LIMIT);
                            admitted.fetch_add(1, Ordering::Relaxed);
                            running.fetch_sub(1, Ordering::SeqCst);
                        }
                        f.release(e.slot);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(f.visits(), 200_000);
        assert_eq!(f.inflight(), 0);
        assert!(admitted.load(Ordering::Relaxed) > 0);
    }
}
