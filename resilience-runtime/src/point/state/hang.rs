//! Hung-call detection: a call under a timeout rule counts as a timeout as soon as its
//! deadline passes, not only when (if ever) it returns.
//!
//! Each point with a timeout rule gets a table of in-flight call slots holding start
//! times on the timeline. Each live thread owns one cache line of slots: it claims a
//! free one with a load and a store, and a call frees its slot, wherever it ends, with
//! one store if it ended well within its threshold (its permit holds the slot's
//! address), else with a load and a store (one swap if it ran past the threshold) that
//! tell whether a sweep counted it. Threads beyond the
//! owned lanes, and calls that find their lane full, claim shared slots by
//! compare-and-swap. A recurring timer of the process-wide timing wheel (`chores`)
//! sweeps the table every quarter of the threshold (between 10 ms and 1 s) and marks
//! every call older than the threshold as timed out, counting it once; the call, when
//! it returns, sees the mark and is not counted again. Points without a timeout rule
//! never touch any of this.
//!
//! The table (its 128 bytes of chunk pointers) is made by the point's first timed call,
//! and the lanes four at a time (a chunk of 256 bytes), by the first call that needs
//! one: a point called from one thread holds the table and one chunk, not all 4 KiB.
//!
//! When more calls are in flight than the table has room for, the extra calls are not
//! registered and are measured when they return, as before.

use super::chunks::Chunks;
use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;

/// Slots per cache line (a lane).
const LANE: usize = 8;
/// Lanes owned by one thread each: only the owner fills their slots, so claiming one
/// is a load and a store, no read-modify-write.
const OWNED_LANES: usize = 32;
/// Lanes shared (by compare-and-swap) by threads without a lane of their own and by
/// calls that find their own lane full.
const SHARED_LANES: usize = 32;
/// Slots per point.
#[cfg(any(test, loom))]
const SLOTS: usize = (OWNED_LANES + SHARED_LANES) * LANE;
/// Lanes per chunk: a table allocates its lanes a chunk at a time, on the first call
/// that needs one, so a point called from one thread holds one chunk, not all 64 lanes.
const CHUNK: usize = 4;
/// Chunks per table.
const CHUNKS: usize = (OWNED_LANES + SHARED_LANES) / CHUNK;
/// A slot whose call was counted as timed out by a sweep.
const SWEPT: u64 = u64::MAX;
/// No slot: the call is not registered (the table is full), or has no timeout.
pub(crate) const NO_SLOT: u32 = u32::MAX;

#[repr(align(64))]
#[derive(Debug)]
struct Lane([AtomicU64; LANE]);

/// [`CHUNK`] lanes, allocated together.
#[derive(Debug)]
struct Chunk([Lane; CHUNK]);

/// In-flight timed calls of one point: their start times on the timeline (0 = free).
///
/// The lanes live in chunks made on first use (see `chunks`): a slot number handed
/// out by [`register`](Self::register) always names a chunk that was made.
#[derive(Debug)]
pub(crate) struct HangTable {
    chunks: Chunks<Chunk, CHUNKS>,
}

/// The number of the thread that holds hung-call slot `slot` of an owned lane (the
/// lane's own number), or `None` for a shared slot (or [`NO_SLOT`]).
#[inline]
pub(crate) fn owner_of(slot: u32) -> Option<u32> {
    let lane = slot / LANE as u32;
    ((lane as usize) < OWNED_LANES).then_some(lane)
}

impl HangTable {
    pub(crate) fn new() -> HangTable {
        HangTable {
            chunks: Chunks::new(),
        }
    }

    /// Lane `lane` if its chunk was made.
    #[inline]
    fn lane(&self, lane: usize) -> Option<&Lane> {
        self.chunks.get(lane / CHUNK).map(|c| &c.0[lane % CHUNK])
    }

    /// Lane `lane`, its chunk made if needed.
    fn lane_or_make(&self, lane: usize) -> &Lane {
        let make = || {
            Chunk(std::array::from_fn(|_| {
                Lane(std::array::from_fn(|_| AtomicU64::new(0)))
            }))
        };
        &self.chunks.get_or_make(lane / CHUNK, make).0[lane % CHUNK]
    }

    /// Slot number `index` (the tests' and models' view; calls keep the slot itself).
    #[cfg(any(test, loom))]
    fn slot(&self, index: u32) -> Option<&AtomicU64> {
        // Masked into range: slot numbers come from `register`, so this changes
        // nothing but spares the bounds check.
        let i = index as usize & (SLOTS - 1);
        self.lane(i / LANE).map(|l| &l.0[i % LANE])
    }

    /// Registers a call that started at `start` (non-zero); returns its slot, or `None`
    /// if the table is full (the tests' and models' view of
    /// [`register_slot_at`](Self::register_slot_at)).
    #[cfg(any(test, loom))]
    pub(crate) fn register(&self, start: u64) -> Option<u32> {
        match self.register_slot_at(start).0 {
            NO_SLOT => None,
            slot => Some(slot),
        }
    }

    /// [`register`](Self::register) for the hot path: the slot's number, or [`NO_SLOT`]
    /// if the table is full, with the slot itself, which frees it
    /// ([`unregister_at`](Self::unregister_at), [`free_at`](Self::free_at)) without
    /// looking it up again (`None` with `NO_SLOT`). In line: the first slot of the
    /// thread's own lane, free unless the thread has another timed call of the point
    /// in flight.
    #[inline]
    pub(crate) fn register_slot_at(&self, start: u64) -> (u32, Option<&AtomicU64>) {
        // `UNKNOWN` and lanes past the owned ones fail the test.
        let lane = crate::lane::fast_lane();
        if (lane as usize) < OWNED_LANES {
            if let Some(own) = self.lane(lane as usize) {
                let first = &own.0[0];
                if first.load(Ordering::Relaxed) == 0 {
                    first.store(start, Ordering::Relaxed);
                    return (lane * LANE as u32, Some(first));
                }
            }
        }
        self.register_slow(start)
    }

    /// The rest of [`register_slot_at`](Self::register_slot_at), out of line.
    #[cold]
    #[inline(never)]
    fn register_slow(&self, start: u64) -> (u32, Option<&AtomicU64>) {
        match self.claim_as(crate::lane::thread_lane(), start) {
            Some((slot, at)) => (slot, Some(at)),
            None => (NO_SLOT, None),
        }
    }

    /// [`claim_as`](Self::claim_as)'s slot number alone (the tests' view).
    #[cfg(all(test, not(loom)))]
    fn register_as(&self, lane: u32, start: u64) -> Option<u32> {
        self.claim_as(lane, start).map(|(slot, _)| slot)
    }

    /// Claims a slot for a call that started at `start`, on the thread of lane `lane`:
    /// its number and the slot itself, or `None` if the table is full.
    #[inline]
    fn claim_as(&self, lane: u32, start: u64) -> Option<(u32, &AtomicU64)> {
        if (lane as usize) < OWNED_LANES {
            for (i, slot) in self.lane_or_make(lane as usize).0.iter().enumerate() {
                // Only this thread writes a start into its lane; others only free
                // slots (store 0) or mark them swept, so a free slot stays free.
                if slot.load(Ordering::Relaxed) == 0 {
                    slot.store(start, Ordering::Relaxed);
                    return Some(((lane as usize * LANE + i) as u32, slot));
                }
            }
        }
        self.claim_shared(lane, start)
    }

    #[cold]
    fn claim_shared(&self, lane: u32, start: u64) -> Option<(u32, &AtomicU64)> {
        let first = lane as usize % SHARED_LANES;
        for l in 0..SHARED_LANES {
            let index = OWNED_LANES + (first + l) % SHARED_LANES;
            for (i, slot) in self.lane_or_make(index).0.iter().enumerate() {
                if slot.load(Ordering::Relaxed) == 0
                    && slot
                        .compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    return Some(((index * LANE + i) as u32, slot));
                }
            }
        }
        None
    }

    /// Frees a slot; returns whether a sweep already counted the call as timed out.
    ///
    /// `late` says the caller measured the call as over the threshold: then the
    /// answer is exact (one swap). Otherwise a sweep can hardly have marked it, and a
    /// load and a store do: a sweep that marks it between the two has counted the call
    /// once (it was in flight past the threshold at the sweep's reading) and the call
    /// does not count it again.
    #[cfg(any(test, loom))]
    pub(crate) fn unregister(&self, slot: u32, late: bool) -> bool {
        let Some(slot) = self.slot(slot) else {
            // Never: a registered slot's chunk stays until the table goes.
            debug_assert!(false, "slot {slot} of a chunk never made");
            return false;
        };
        HangTable::unregister_at(slot, late)
    }

    /// [`unregister`](Self::unregister) of the slot [`register_slot_at`] gave.
    ///
    /// [`register_slot_at`]: Self::register_slot_at
    #[inline]
    pub(crate) fn unregister_at(slot: &AtomicU64, late: bool) -> bool {
        if late {
            return slot.swap(0, Ordering::AcqRel) == SWEPT;
        }
        let swept = slot.load(Ordering::Acquire) == SWEPT;
        HangTable::free_at(slot);
        swept
    }

    /// Frees the slot [`register_slot_at`] gave of a call that ended within its
    /// threshold, when the caller does not ask whether a sweep counted it (a sweep
    /// that marked it counted the call's timeout once, and only then): one store.
    ///
    /// [`register_slot_at`]: Self::register_slot_at
    #[inline]
    pub(crate) fn free_at(slot: &AtomicU64) {
        slot.store(0, Ordering::Release);
    }

    /// Marks every call older than `threshold` at `now`; returns how many were newly
    /// marked (the tests' and models' view of [`sweep_counting`](Self::sweep_counting)).
    #[cfg(any(test, loom))]
    pub(crate) fn sweep(&self, now: u64, threshold: u64) -> u64 {
        self.sweep_counting(now, threshold).0
    }

    /// [`sweep`](Self::sweep), also returning how many registered calls it left
    /// unmarked (still in flight, not yet past the threshold): while there are none,
    /// no further sweep is needed.
    pub(crate) fn sweep_counting(&self, now: u64, threshold: u64) -> (u64, u64) {
        let (mut hung, mut pending) = (0, 0);
        let made = self.chunks.made();
        for slot in made.flat_map(|c| c.0.iter()).flat_map(|l| l.0.iter()) {
            let start = slot.load(Ordering::Relaxed);
            if start == 0 || start == SWEPT {
                continue;
            }
            if now.saturating_sub(start) > threshold
                && slot
                    .compare_exchange(start, SWEPT, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                hung += 1;
            } else {
                pending += 1;
            }
        }
        (hung, pending)
    }

    /// The table (its pointer array, made with the table by the point's first timed
    /// call) and the chunks made.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<HangTable>() + self.chunks.heap_bytes()
    }
}

/// The sweep period for a threshold: a quarter of it, within 10 ms ..= 1 s.
pub(crate) fn period(threshold: Duration) -> Duration {
    (threshold / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn register_sweep_unregister() {
        let t = HangTable::new();
        let a = t.register(100).unwrap();
        let b = t.register(150).unwrap();
        assert_ne!(a, b);
        assert_eq!(
            t.sweep(200, 60),
            1,
            "only the call started at 100 is older than 60"
        );
        assert_eq!(t.sweep(200, 60), 0, "counted once");
        assert!(t.unregister(a, false), "the sweep already counted it");
        assert!(!t.unregister(b, true));
        assert_eq!(t.sweep(1_000, 60), 0, "free slots are never counted");
    }

    #[test]
    fn a_full_table_refuses_registration() {
        let t = HangTable::new();
        // Lane 3 may use its own lane and the shared ones, never another thread's.
        let room = LANE + SHARED_LANES * LANE;
        let slots: Vec<_> = (0..room).map(|_| t.register_as(3, 1).unwrap()).collect();
        let mut sorted = slots.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), room, "every slot handed out once");
        assert!(slots
            .iter()
            .all(|&s| s as usize / LANE == 3 || s as usize / LANE >= OWNED_LANES));
        assert_eq!(
            t.register_as(4, 1),
            Some(4 * LANE as u32),
            "lane 4 is still free"
        );
        assert!(
            slots[..LANE].iter().all(|&s| s as usize / LANE == 3),
            "the own lane first"
        );
        assert!(t.register_as(3, 1).is_none());
        assert!(t.register_as(u32::MAX, 1).is_none());
        t.unregister(slots[5], false);
        assert_eq!(t.register_as(3, 1), Some(slots[5]));
        t.unregister(slots[200], true);
        assert_eq!(
            t.register_as(3, 1),
            Some(slots[200]),
            "then the shared lanes"
        );
    }

    #[test]
    fn register_takes_the_first_slot_of_the_own_lane_in_line() {
        std::thread::spawn(|| {
            let t = HangTable::new();
            // Before the lane is known, the slow path claims it.
            let a = t.register(10).unwrap();
            let lane = crate::lane::thread_lane();
            if (lane as usize) >= OWNED_LANES {
                assert!(a as usize >= OWNED_LANES * LANE, "a shared slot");
                return;
            }
            assert_eq!(a, lane * LANE as u32, "the first slot of the own lane");
            let b = t.register(11).unwrap();
            assert_eq!(b, a + 1, "the next slot while the first is in flight");
            assert!(!t.unregister(a, false));
            assert_eq!(t.register(12), Some(a), "in line, the first slot again");
            assert_eq!(t.sweep(1_000, 100), 2, "both registered calls are seen");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn racing_threads_never_share_a_slot() {
        let t = crate::sync::Arc::new(HangTable::new());
        let handles: Vec<_> = (0..8u64)
            .map(|id| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for n in 0..20_000u64 {
                        let mark = (id << 32) | (n + 1);
                        let held: Vec<u32> =
                            (0..3).map(|_| t.register(mark).expect("room")).collect();
                        for &s in &held {
                            let slot = t.slot(s).expect("a made chunk");
                            assert_eq!(slot.load(Ordering::Relaxed), mark, "slot taken over");
                        }
                        for s in held {
                            assert!(!t.unregister(s, n % 2 == 0));
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(t.sweep(u64::MAX - 1, 0), 0, "every slot was freed");
    }

    #[test]
    fn chunks_are_made_by_the_calls_that_need_them() {
        let t = HangTable::new();
        let pointers = CHUNKS * std::mem::size_of::<usize>();
        assert_eq!(t.heap_bytes(), pointers, "no chunk before a call");
        let a = t.register_as(1, 5).unwrap();
        assert_eq!(t.heap_bytes(), pointers + std::mem::size_of::<Chunk>());
        let b = t.register_as(2, 5).unwrap();
        assert_eq!(
            t.heap_bytes(),
            pointers + std::mem::size_of::<Chunk>(),
            "lanes 1 and 2 share a chunk"
        );
        let c = t.register_as(9, 5).unwrap();
        assert_eq!(t.heap_bytes(), pointers + 2 * std::mem::size_of::<Chunk>());
        assert_eq!(t.sweep(100, 10), 3, "the sweep sees every chunk made");
        for s in [a, b, c] {
            assert!(t.unregister(s, false));
        }
        assert_eq!(std::mem::size_of::<Chunk>(), CHUNK * LANE * 8);
    }

    #[test]
    fn racing_threads_make_each_chunk_once() {
        let t = crate::sync::Arc::new(HangTable::new());
        let barrier = crate::sync::Arc::new(crate::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8u32)
            .map(|lane| {
                let (t, b) = (t.clone(), barrier.clone());
                std::thread::spawn(move || {
                    b.wait();
                    t.register_as(lane, 7).unwrap()
                })
            })
            .collect();
        let mut slots: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        slots.sort_unstable();
        assert_eq!(slots, (0..8).map(|l| l * LANE as u32).collect::<Vec<_>>());
        let pointers = CHUNKS * std::mem::size_of::<usize>();
        assert_eq!(t.heap_bytes(), pointers + 2 * std::mem::size_of::<Chunk>());
        assert_eq!(t.sweep(100, 10), 8, "no registration lost to a chunk race");
    }

    #[test]
    fn periods() {
        assert_eq!(period(Duration::from_millis(1)), Duration::from_millis(10));
        assert_eq!(
            period(Duration::from_millis(200)),
            Duration::from_millis(50)
        );
        assert_eq!(period(Duration::from_secs(60)), Duration::from_secs(1));
    }
}
