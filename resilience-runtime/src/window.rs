//! The sliding window of a point: constant-time window sums over cumulative counters.
//!
//! The point keeps cumulative counters (passes, downgrades, exceptions, timeouts) that
//! only ever grow. The window stores, for each bucket, the value the counters had when
//! that bucket began. The sum over the window is then `counter_now - snapshot[oldest]`:
//! two loads, whatever the number of buckets, and no per-call write to the window at all.
//! Rotation (writing the snapshot of a bucket that begins) happens once per bucket width,
//! done by the first thread that notices, without blocking the others.
//!
//! # The guarantee kept here
//!
//! A reader never takes a snapshot newer than its window's start as the base: that
//! would make the window look emptier than it is, and let the visits and health rules
//! admit too much. The bucket that begins is written into the slot of the window's
//! oldest bucket, so a rotation (one at a time: the claim word holds a busy bit) first
//! publishes the new window (whose own base slot already holds its snapshot, or one
//! older, which is only conservative) and only then overwrites the old base, behind a
//! release fence. A reader checks, after an acquire fence, that no rotation published
//! since it picked its base slot, and reads again if one did: a seqlock whose sequence
//! counts rotations, in the same word as the slot. A thread that finds a rotation running goes on with the window
//! last published: older, so again only conservative.

use crate::sync::{atomic, AtomicU64, Ordering};

/// Number of cumulative counters the window follows.
pub(crate) const TRACKED: usize = 5;
/// Calls admitted; a window's visits are its passes plus its downgrades.
pub(crate) const PASSES: usize = 0;
pub(crate) const DOWNGRADES: usize = 1;
pub(crate) const EXCEPTIONS: usize = 2;
pub(crate) const TIMEOUTS: usize = 3;
/// Calls admitted that never reported an outcome (future dropped, permit dropped).
pub(crate) const CANCELLED: usize = 4;

#[derive(Debug)]
struct Slot<const K: usize>([AtomicU64; K]);

/// A ring of bucket-start snapshots of `K` cumulative counters, with a fixed geometry.
#[derive(Debug)]
pub(crate) struct Ring<const K: usize = TRACKED> {
    pub(crate) width_ns: u64,
    /// The number of slots: private, as the pass path's unchecked slot index rests on
    /// it (see [`base_of`](Self::base_of)).
    buckets: u64,
    /// Where the tick after the newest published one begins: the pass path compares
    /// against it instead of dividing.
    next_boundary: AtomicU64,
    /// The slot of the oldest tick in the window ending at the newest published tick
    /// (the low [`SLOT_BITS`] bits), and the number of rotations published (the rest):
    /// a reader's base is good if this word did not move while it read the slot.
    published: AtomicU64,
    /// The newest tick rotated to, with [`BUSY`] while a rotation runs.
    claim: AtomicU64,
    slots: Box<[Slot<K>]>,
}

/// Set in the claim word while a rotation runs.
const BUSY: u64 = 1 << 63;
/// Bits of the base slot in the published word: rings have at most 2^16 buckets, and
/// the 2^48 rotations left are more than a reader can ever sleep through.
const SLOT_BITS: u32 = 16;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

impl<const K: usize> Ring<K> {
    pub(crate) fn new(buckets: u64, width_ns: u64, now: u64, current: [u64; K]) -> Ring<K> {
        assert!(buckets <= SLOT_MASK + 1, "at most 2^16 buckets");
        let slots = (0..buckets)
            .map(|_| Slot(current.map(AtomicU64::new)))
            .collect();
        let tick = now / width_ns;
        let ring = Ring {
            width_ns,
            buckets,
            next_boundary: AtomicU64::new(0),
            published: AtomicU64::new(0),
            claim: AtomicU64::new(tick),
            slots,
        };
        ring.publish(tick);
        ring
    }

    /// The number of buckets.
    pub(crate) fn buckets(&self) -> u64 {
        self.buckets
    }

    /// Empties the window (used when a ring is reused after a geometry change): every
    /// slot starts at `current`, as a window that begins now.
    pub(crate) fn reset(&self, now: u64, current: [u64; K]) {
        let tick = now / self.width_ns;
        // Wait out a rotation in progress (a few stores), then hold the claim.
        loop {
            let claimed = self.claim.load(Ordering::Relaxed);
            if claimed & BUSY == 0
                && self
                    .claim
                    .compare_exchange(claimed, tick | BUSY, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
            std::hint::spin_loop();
        }
        self.publish(tick);
        atomic::fence(Ordering::Release);
        for slot in self.slots.iter() {
            for (cell, v) in slot.0.iter().zip(current) {
                cell.store(v, Ordering::Relaxed);
            }
        }
        self.claim.store(tick, Ordering::Release);
    }

    /// Publishes the window ending at `tick` (the caller holds the claim).
    fn publish(&self, tick: u64) {
        let count = (self.published.load(Ordering::Relaxed) >> SLOT_BITS).wrapping_add(1);
        self.published.store(
            (count << SLOT_BITS) | ((tick + 1) % self.buckets),
            Ordering::Release,
        );
        self.next_boundary.store(
            tick.saturating_add(1).saturating_mul(self.width_ns),
            Ordering::Release,
        );
    }

    /// Brings the window up to `now` and returns the counter values at the start of the
    /// oldest bucket in the window. `read` gives the current cumulative counters and is
    /// called only when a bucket boundary was crossed.
    #[inline]
    pub(crate) fn base(&self, now: u64, read: impl FnOnce() -> [u64; K]) -> [u64; K] {
        self.base_of(now, read, [true; K])
    }

    /// [`base`](Self::base) of the counters marked in `want` alone, the others 0: a
    /// caller that knows which it needs (a constant, once in line) loads no other.
    #[inline(always)]
    pub(crate) fn base_of(
        &self,
        now: u64,
        read: impl FnOnce() -> [u64; K],
        want: [bool; K],
    ) -> [u64; K] {
        if now >= self.next_boundary.load(Ordering::Acquire) {
            self.rotate(now / self.width_ns, read);
        }
        loop {
            // The oldest tick of the window ending at tick `h` is `h - (buckets - 1)`,
            // whose slot is `(h + 1) % buckets`.
            let published = self.published.load(Ordering::Acquire);
            let i = (published & SLOT_MASK) as usize;
            debug_assert!(i < self.slots.len());
            // SAFETY: `publish`, the only writer of `published`, stores a slot
            // `(tick + 1) % buckets`, and `slots` has `buckets` elements (`new`).
            let slot = unsafe { self.slots.get_unchecked(i) };
            let base = std::array::from_fn(|i| {
                if want[i] {
                    slot.0[i].load(Ordering::Relaxed)
                } else {
                    0
                }
            });
            // Pairs with the rotation's release fence: a value written after a newer
            // window was published shows that rotation's count here.
            atomic::fence(Ordering::Acquire);
            if self.published.load(Ordering::Relaxed) == published {
                return base;
            }
        }
    }

    #[cold]
    fn rotate(&self, tick: u64, read: impl FnOnce() -> [u64; K]) {
        let claimed = self.claim.load(Ordering::Relaxed);
        if claimed & BUSY != 0
            || claimed >= tick
            || self
                .claim
                .compare_exchange(claimed, tick | BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            // Another thread is rotating; use the window it last published.
            return;
        }
        // Nothing observed the ticks since `claimed`, so every bucket that began in
        // between starts with today's counters (they saw no calls).
        let current = read();
        // The new window's base slot holds its snapshot already (or, after a gap of a
        // whole window, an older one: only conservative), so publish it first; the
        // slots written below are outside it.
        self.publish(tick);
        atomic::fence(Ordering::Release);
        let first = (claimed + 1).max(tick.saturating_sub(self.buckets - 1));
        for t in first..=tick {
            let slot = &self.slots[(t % self.buckets) as usize];
            for (cell, v) in slot.0.iter().zip(current) {
                cell.store(v, Ordering::Relaxed);
            }
        }
        self.claim.store(tick, Ordering::Release);
    }

    /// Calls `f` with the counts of every bucket of the window, oldest first, given the
    /// current cumulative counters. Call [`base`](Ring::base) first to bring the window
    /// up to date. `O(buckets)`: for slow paths only.
    pub(crate) fn for_each_bucket(&self, current: [u64; K], mut f: impl FnMut([u64; K])) {
        let n = self.slots.len();
        let first = (self.published.load(Ordering::Acquire) & SLOT_MASK) as usize;
        let load = |i: usize| {
            self.slots[i % n]
                .0
                .each_ref()
                .map(|c| c.load(Ordering::Relaxed))
        };
        let mut start = load(first);
        for i in 0..n {
            let end = if i + 1 < n {
                load(first + i + 1)
            } else {
                current
            };
            f(std::array::from_fn(|k| end[k].saturating_sub(start[k])));
            start = end;
        }
    }

    /// Approximate heap size in bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<K>>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A counter model fed by the test.
    fn sums(ring: &Ring<TRACKED>, now: u64, cum: [u64; TRACKED]) -> [u64; TRACKED] {
        let base = ring.base(now, || cum);
        std::array::from_fn(|i| cum[i] - base[i])
    }

    #[test]
    fn window_slides_bucket_by_bucket() {
        let ring = Ring::new(3, S, 10 * S, [0; TRACKED]);
        let mut cum = [0u64; TRACKED];
        // one visit in each of ticks 10, 11, 12, 13
        for (i, tick) in (10..14).enumerate() {
            let now = tick * S + S / 2;
            // rotation happens before the visit is counted
            let _ = ring.base(now, || cum);
            cum[PASSES] += 1;
            let v = sums(&ring, now, cum)[PASSES];
            assert_eq!(v, (i as u64 + 1).min(3), "tick {tick}");
        }
        // after a long idle period the window is empty
        assert_eq!(sums(&ring, 100 * S, cum)[PASSES], 0);
    }

    /// `base_of` reads the counts asked for exactly as `base` does, and 0 for the others.
    #[test]
    fn a_base_of_some_counts_matches_the_whole_base() {
        let ring = Ring::new(4, S, 0, [0; TRACKED]);
        let mut cum = [0u64; TRACKED];
        for tick in 0..12u64 {
            cum = std::array::from_fn(|i| cum[i] + (tick + 1) * (i as u64 + 1));
            let now = tick * S + S / 3;
            let whole = ring.base(now, || cum);
            let want = [true, false, true, true, false];
            let some = ring.base_of(now, || cum, want);
            for i in 0..TRACKED {
                assert_eq!(
                    some[i],
                    if want[i] { whole[i] } else { 0 },
                    "tick {tick}, count {i}"
                );
            }
        }
    }

    #[test]
    fn gap_shorter_than_the_window_keeps_old_buckets() {
        let ring = Ring::new(10, S, 0, [0; TRACKED]);
        let mut cum = [0u64; TRACKED];
        cum[EXCEPTIONS] = 5; // five exceptions in tick 0
        assert_eq!(sums(&ring, 9 * S, cum)[EXCEPTIONS], 5);
        assert_eq!(sums(&ring, 10 * S, cum)[EXCEPTIONS], 0);
    }

    #[test]
    fn buckets_are_reconstructed_from_snapshots() {
        let ring = Ring::<1>::new(3, S, 0, [0]);
        let mut cum = 0;
        let mut seen = Vec::new();
        for (tick, n) in [(0, 2), (1, 3), (2, 5), (3, 7)] {
            let _ = ring.base(tick * S, || [cum]);
            cum += n;
            seen.clear();
            ring.for_each_bucket([cum], |b| seen.push(b[0]));
        }
        assert_eq!(seen, [3, 5, 7]);
        let _ = ring.base(5 * S, || [cum]);
        seen.clear();
        ring.for_each_bucket([cum], |b| seen.push(b[0]));
        assert_eq!(seen, [7, 0, 0]);
    }

    #[test]
    fn cost_does_not_depend_on_bucket_count() {
        // Not a timing test: the base of a 600-bucket ring is one slot read.
        let ring = Ring::new(600, S, 0, [7; 4]);
        assert_eq!(ring.base(S / 2, || [9; 4]), [7; 4]);
        assert_eq!(ring.heap_bytes(), 600 * 32);
    }
}
