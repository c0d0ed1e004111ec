//! The passes and the calls in flight of a point, in one atomic word, so that a single
//! compare-and-swap admits a call under both the visits rule and the concurrency limit
//! (and a single atomic operation releases it).
//!
//! # Layout
//!
//! The low 24 bits hold the calls in flight, the high 40 bits the passes (admitted
//! calls) modulo 2^40. Full 64-bit totals are rebuilt from a base that the call
//! crossing each 2^32 boundary moves up, so they stay exact as long as fewer than
//! 2^40 - 2^32 (about 10^12) calls pass while that one call is between its increment
//! and its update. Concurrency limits go up to 2^22; calls admitted without a limit
//! that would push the in-flight field past 2^23 are counted in a separate spill
//! counter instead, so the field can never carry into the passes.
//!
//! # The guarantee kept here
//!
//! [`Flow::admit`] decides with [`decide`] on the word it read and commits with a
//! compare-and-swap of that very word, so a call is admitted only if, at the instant
//! of its commit, fewer than `limits.passes` calls had passed and fewer than
//! `limits.inflight` were in flight. Every admission is one step of the word's total
//! modification order, so under any number of threads the passes never exceed the
//! pass limit and the calls in flight never exceed the concurrency limit: exact, not
//! "about". A refusal changes nothing.

use crate::sync::{AtomicU64, Ordering};

const INFLIGHT_BITS: u32 = 24;
/// One pass in the word.
const PASS: u64 = 1 << INFLIGHT_BITS;
const INFLIGHT_MASK: u64 = PASS - 1;
const PASS_MASK: u64 = (1 << (64 - INFLIGHT_BITS)) - 1;
/// The base moves each time the low 32 bits of the pass field wrap.
const BASE_STEP_MASK: u64 = (1 << 32) - 1;
/// Unlimited admissions beyond this many calls in flight go to the spill counter.
const SPILL_AT: u64 = 1 << 23;
/// No limit (the largest value a limit can have).
pub(crate) const NO_LIMIT: u64 = u64::MAX;

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
    /// Calls in flight right after this one took its slot.
    pub(crate) inflight: u64,
    /// The slot taken.
    pub(crate) slot: Slot,
}

/// The limits one admission is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The pass total the window starts from (its base).
    pub(crate) from: u64,
    /// Admit only while fewer than this many calls passed since `from` (the visits
    /// threshold), or [`NO_LIMIT`].
    pub(crate) passes: u64,
    /// Admit only while fewer than this many calls are in flight (at most 2^22), or
    /// [`NO_LIMIT`].
    pub(crate) inflight: u64,
}

/// Why [`decide`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The pass limit is reached (the visits rule).
    Visits,
    /// Every slot is taken (the concurrency rule).
    Concurrency,
}

/// The pure decision: may one more call pass when `passes` have passed in the window
/// and `inflight` are in flight? The visits rule is checked first, as SDS orders its
/// rules.
#[inline(always)]
pub(crate) fn decide(passes: u64, inflight: u64, limits: Limits) -> Result<(), Refused> {
    if passes >= limits.passes {
        Err(Refused::Visits)
    } else if inflight >= limits.inflight {
        Err(Refused::Concurrency)
    } else {
        Ok(())
    }
}

/// Passes and calls in flight of one point: the word every call writes, beside two
/// words written only on a wrap of the pass field or past `SPILL_AT` calls in flight.
///
/// Not aligned to a cache line of its own: a point is allocated on its own (so that
/// it can be freed), and a 64-byte-aligned allocation costs about 180 bytes more per
/// point than the line would save. The fields that share the word's line are read
/// by every call anyway (the policy pointer, the clock) or written only rarely.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Flow {
    word: AtomicU64,
    /// A full pass total at most 2^40 below the true one (see the module docs).
    base: AtomicU64,
    spill: AtomicU64,
    /// Calls waiting in the concurrency rule's queue (see `queue`).
    waiting: AtomicU64,
}

impl Flow {
    pub(crate) fn new() -> Flow {
        Flow::starting_at(0)
    }

    /// A flow whose pass total starts at `passes` (tests of the wrap-around).
    pub(crate) fn starting_at(passes: u64) -> Flow {
        Flow {
            word: AtomicU64::new((passes & PASS_MASK) << INFLIGHT_BITS),
            base: AtomicU64::new(passes),
            spill: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    /// Counts a pass that takes no slot (a call that is not tracked in flight).
    #[inline]
    pub(crate) fn pass(&self) {
        let old = self.word.fetch_add(PASS, Ordering::Relaxed);
        self.crossed(old);
    }

    /// Admits a call under `limits`: counts its pass and takes its slot in one step,
    /// or refuses and changes nothing (see the module docs for the guarantee). Without
    /// any limit, [`admit_unlimited`](Self::admit_unlimited) does the same in one
    /// atomic addition.
    #[inline(always)]
    pub(crate) fn admit(&self, limits: Limits) -> Result<Entry, Refused> {
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            let inflight = cur & INFLIGHT_MASK;
            decide(Flow::since(cur, limits.from), inflight, limits)?;
            if inflight >= SPILL_AT {
                // Only without a concurrency limit (limits are at most 2^22).
                // The limits go as words: a struct passed by reference to a call
                // would be written to memory on the common path too.
                return self.admit_spilled(cur, limits.from, limits.passes, limits.inflight);
            }
            match self.word.compare_exchange_weak(
                cur,
                cur.wrapping_add(PASS + 1),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.crossed(cur);
                    return Ok(Entry {
                        inflight: inflight + 1,
                        slot: Slot::Word,
                    });
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Admits a call whatever the counts: one atomic addition.
    #[inline]
    pub(crate) fn admit_unlimited(&self) -> Entry {
        let old = self.word.fetch_add(PASS + 1, Ordering::Acquire);
        self.crossed(old);
        let inflight = (old & INFLIGHT_MASK) + 1;
        if inflight <= SPILL_AT {
            return Entry {
                inflight,
                slot: Slot::Word,
            };
        }
        self.word.fetch_sub(1, Ordering::Relaxed);
        self.spill_one()
    }

    /// [`admit`](Self::admit) past [`SPILL_AT`] calls in flight: the pass goes into the
    /// word (still under the pass limit), the slot into the spill counter.
    #[cold]
    #[inline(never)]
    fn admit_spilled(
        &self,
        mut cur: u64,
        from: u64,
        passes: u64,
        inflight: u64,
    ) -> Result<Entry, Refused> {
        let limits = Limits {
            from,
            passes,
            inflight,
        };
        loop {
            decide(Flow::since(cur, limits.from), 0, limits)?;
            match self.word.compare_exchange_weak(
                cur,
                cur.wrapping_add(PASS),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.crossed(cur);
                    return Ok(self.spill_one());
                }
                Err(seen) => cur = seen,
            }
        }
    }

    /// Takes a slot in the spill counter.
    #[cold]
    fn spill_one(&self) -> Entry {
        let spilled = self.spill.fetch_add(1, Ordering::Acquire) + 1;
        Entry {
            inflight: SPILL_AT + spilled,
            slot: Slot::Spill,
        }
    }

    /// Gives a slot back; `true` if calls are waiting for one (the caller then wakes
    /// one: see [`wait_begin`](Self::wait_begin)).
    #[inline]
    pub(crate) fn release(&self, slot: Slot) -> bool {
        match slot {
            Slot::None => return false,
            Slot::Word => {
                self.word.fetch_sub(1, Ordering::AcqRel);
            }
            Slot::Spill => {
                self.spill.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.waiting.load(Ordering::Relaxed) != 0
    }

    /// Room of another kind was given back (an adaptive limit's, by a call that goes
    /// no further): `true` if calls are waiting, seen as [`release`](Self::release)
    /// sees them, after a read-modify-write of the word, so that a waiter either sees
    /// the room in its next look or is seen here (see [`wait_begin`](Self::wait_begin);
    /// loom model `models/flow.rs`).
    #[inline]
    pub(crate) fn given_back(&self) -> bool {
        self.word.fetch_add(0, Ordering::AcqRel);
        self.waiting.load(Ordering::Relaxed) != 0
    }

    /// A call starts waiting for a slot. After this, either the waiter's next look at
    /// the word sees every slot released before, or the releaser sees the waiter.
    ///
    /// The waiter counts itself, then makes a read-modify-write of the word (and of
    /// the spill counter) that changes nothing; a release is a read-modify-write of
    /// the same word. Read-modify-writes of one word are totally ordered: if the
    /// release comes first, the waiter's reads the released word, and its later loads
    /// see at least that; if the waiter's comes first, the release reads what it wrote
    /// (acquire from release), so the count the waiter made before is visible to the
    /// releaser's load of `waiting`. Either way no slot freed while a call waits goes
    /// unnoticed by both (loom model `models/flow.rs`).
    pub(crate) fn wait_begin(&self) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.word.fetch_add(0, Ordering::AcqRel);
        self.spill.fetch_add(0, Ordering::AcqRel);
    }

    /// A waiting call stopped waiting (admitted, refused, timed out or cancelled).
    pub(crate) fn wait_end(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
    }

    /// Calls waiting now.
    #[inline]
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The passes since the total `from` and the calls in flight in the word now (the
    /// spill counter aside): what [`admit`](Self::admit) would decide on.
    #[inline]
    pub(crate) fn peek(&self, from: u64) -> (u64, u64) {
        let w = self.word.load(Ordering::Relaxed);
        (Flow::since(w, from), w & INFLIGHT_MASK)
    }

    /// The passes counted in `word` since the total `from` (at most 2^40 - 1 of them:
    /// counted in the word's own field, without the base).
    #[inline(always)]
    fn since(word: u64, from: u64) -> u64 {
        (word >> INFLIGHT_BITS).wrapping_sub(from) & PASS_MASK
    }

    /// The pass total.
    pub(crate) fn passes(&self) -> u64 {
        self.extend(self.word.load(Ordering::Relaxed) >> INFLIGHT_BITS)
    }

    /// Calls in flight.
    pub(crate) fn inflight(&self) -> u64 {
        (self.word.load(Ordering::Relaxed) & INFLIGHT_MASK) + self.spill.load(Ordering::Relaxed)
    }

    /// Moves the base when the increment that returned `old` crossed a 2^32 boundary.
    #[inline]
    fn crossed(&self, old: u64) {
        let field = ((old >> INFLIGHT_BITS) + 1) & PASS_MASK;
        if field & BASE_STEP_MASK == 0 {
            self.advance(field);
        }
    }

    /// The full total of a pass field (`PASS_MASK` bits, or more: masked here).
    #[inline]
    fn extend(&self, field: u64) -> u64 {
        let field = field & PASS_MASK;
        let base = self.base.load(Ordering::Relaxed);
        base.wrapping_add(field.wrapping_sub(base) & PASS_MASK)
    }

    #[cold]
    fn advance(&self, field: u64) {
        let full = self.extend(field);
        self.base.fetch_max(full, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicU64 as StdU64;
    use crate::sync::Arc;

    const fn limits(passes: u64, inflight: u64) -> Limits {
        Limits {
            from: 0,
            passes,
            inflight,
        }
    }

    #[test]
    fn counts_passes_and_slots() {
        let f = Flow::new();
        f.pass();
        let e = f.admit(limits(NO_LIMIT, 1)).unwrap();
        assert_eq!((e.inflight, e.slot), (1, Slot::Word));
        assert_eq!(
            f.admit(limits(NO_LIMIT, 1)).unwrap_err(),
            Refused::Concurrency
        );
        assert_eq!(
            f.admit(limits(2, 5)).unwrap_err(),
            Refused::Visits,
            "2 passed"
        );
        let e = f.admit_unlimited();
        assert_eq!((e.inflight, e.slot), (2, Slot::Word));
        assert_eq!(f.peek(0), (3, 2), "refusals changed nothing");
        assert_eq!(f.peek(1), (2, 2), "passes since a base");
        assert_eq!((f.passes(), f.inflight()), (3, 2));
        f.release(Slot::Word);
        f.release(Slot::Word);
        f.release(Slot::None);
        assert_eq!((f.passes(), f.inflight()), (3, 0));
        assert_eq!(
            f.admit(limits(NO_LIMIT, 0)).unwrap_err(),
            Refused::Concurrency,
            "a limit of 0 admits none"
        );
        assert_eq!(
            f.admit(limits(3, 0)).unwrap_err(),
            Refused::Visits,
            "visits first"
        );
    }

    #[test]
    fn pass_totals_survive_the_40_bit_wrap() {
        let start = (1u64 << 40) - 3;
        let f = Flow::starting_at(start);
        let window = Limits {
            from: start,
            passes: 10,
            inflight: NO_LIMIT,
        };
        for i in 1..=10 {
            f.admit(window).unwrap();
            assert_eq!(f.passes(), start + i);
        }
        assert_eq!(
            f.admit(window).unwrap_err(),
            Refused::Visits,
            "the limit holds across the wrap"
        );
        assert_eq!(f.inflight(), 10, "the in-flight field never carried");
        // Far past several wraps, with the base moved at each 2^32 boundary.
        let f = Flow::starting_at((5u64 << 40) + (1 << 32) - 2);
        f.pass();
        assert_eq!(f.passes(), (5u64 << 40) + (1 << 32) - 1);
        f.pass();
        assert_eq!(f.base.load(Ordering::Relaxed), (5u64 << 40) + (1 << 32));
        f.admit_unlimited();
        assert_eq!(f.passes(), (5u64 << 40) + (1 << 32) + 1);
    }

    #[test]
    fn unlimited_admissions_spill_instead_of_carrying() {
        let f = Flow::new();
        f.word.fetch_add(SPILL_AT - 1, Ordering::Relaxed);
        let e = f.admit_unlimited();
        assert_eq!((e.inflight, e.slot), (SPILL_AT, Slot::Word));
        let e = f.admit_unlimited();
        assert_eq!((e.inflight, e.slot), (SPILL_AT + 1, Slot::Spill));
        let e = f.admit(limits(100, NO_LIMIT)).unwrap();
        assert_eq!((e.inflight, e.slot), (SPILL_AT + 2, Slot::Spill));
        assert_eq!(f.inflight(), SPILL_AT + 2);
        assert_eq!(f.passes(), 3);
        assert_eq!(f.admit(limits(3, NO_LIMIT)).unwrap_err(), Refused::Visits);
        f.release(Slot::Spill);
        f.release(Slot::Spill);
        f.release(Slot::Word);
        assert_eq!(f.inflight(), SPILL_AT - 1);
    }

    #[test]
    fn racing_threads_never_exceed_either_limit() {
        const SLOTS: u64 = 3;
        const PASSES: u64 = 50_000;
        let f = Arc::new(Flow::new());
        let running = Arc::new(StdU64::new(0));
        let peak = Arc::new(StdU64::new(0));
        let admitted = Arc::new(StdU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (f, running, peak, admitted) =
                    (f.clone(), running.clone(), peak.clone(), admitted.clone());
                std::thread::spawn(move || {
                    for _ in 0..50_000u32 {
                        if let Ok(e) = f.admit(limits(PASSES, SLOTS)) {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            assert!(e.inflight <= SLOTS);
                            admitted.fetch_add(1, Ordering::Relaxed);
                            running.fetch_sub(1, Ordering::SeqCst);
                            f.release(e.slot);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= SLOTS);
        assert_eq!(f.passes(), admitted.load(Ordering::Relaxed));
        assert!(f.passes() <= PASSES);
        assert_eq!(f.inflight(), 0);
    }
}

#[cfg(all(test, not(loom)))]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// The plain reference: the visits rule, then the concurrency rule.
    fn reference(passes: u64, inflight: u64, max_passes: u64, max_inflight: u64) -> &'static str {
        if passes >= max_passes {
            "visits"
        } else if inflight >= max_inflight {
            "concurrency"
        } else {
            "admit"
        }
    }

    proptest! {
        #[test]
        fn decide_matches_the_reference(
            passes in 0u64..1000, inflight in 0u64..64,
            max_passes in prop_oneof![0u64..1000, Just(NO_LIMIT)],
            max_inflight in prop_oneof![0u64..64, Just(NO_LIMIT)],
        ) {
            let got = match decide(passes, inflight, Limits { from: 0, passes: max_passes, inflight: max_inflight }) {
                Ok(()) => "admit",
                Err(Refused::Visits) => "visits",
                Err(Refused::Concurrency) => "concurrency",
            };
            prop_assert_eq!(got, reference(passes, inflight, max_passes, max_inflight));
        }

        /// A sequence of admissions and releases on one flow keeps both counts where
        /// the reference keeps them.
        #[test]
        fn admissions_follow_the_reference(
            ops in proptest::collection::vec(any::<bool>(), 1..200),
            max_passes in 0u64..100, max_inflight in 0u64..8,
        ) {
            let f = Flow::new();
            let (mut passes, mut held) = (0u64, Vec::new());
            for admit in ops {
                if admit {
                    let want = reference(passes, held.len() as u64, max_passes, max_inflight);
                    match f.admit(Limits { from: 0, passes: max_passes, inflight: max_inflight }) {
                        Ok(e) => {
                            prop_assert_eq!(want, "admit");
                            passes += 1;
                            held.push(e.slot);
                        }
                        Err(Refused::Visits) => prop_assert_eq!(want, "visits"),
                        Err(Refused::Concurrency) => prop_assert_eq!(want, "concurrency"),
                    }
                } else if let Some(slot) = held.pop() {
                    f.release(slot);
                }
                prop_assert_eq!(f.peek(0), (passes, held.len() as u64));
            }
        }
    }
}
