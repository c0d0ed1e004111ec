//! Hung-call detection: a call under a timeout rule counts as a timeout as soon as its
//! deadline passes, not only when (if ever) it returns.
//!
//! Each point with a timeout rule gets a table of in-flight call slots. A timed call
//! claims a free slot with its start time (one compare-and-swap, no lock) and frees it
//! when it ends (one swap). A recurring timer of the process-wide [`TimingWheel`]
//! sweeps the table every quarter of the threshold (between 10 ms and 1 s) and marks
//! every call older than the threshold as timed out, counting it once; the call, when
//! it returns, sees the mark and is not counted again. Points without a timeout rule
//! never touch any of this.
//!
//! When more calls are in flight than the table has slots (512), the extra calls are
//! not registered and are measured when they return, as before.

use crate::point::Point;
use crate::sync::{AtomicU64, Ordering};
use crate::wheel::TimingWheel;
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

/// Slots per point.
const SLOTS: usize = 512;
/// A slot whose call was counted as timed out by a sweep.
const SWEPT: u64 = u64::MAX;
/// Threads start their search this many slots apart, a cache line each.
const STRIDE: usize = 8;

/// In-flight timed calls of one point: their start times in clock ticks (0 = free).
#[derive(Debug)]
pub(crate) struct HangTable {
    slots: Box<[AtomicU64]>,
}

thread_local! {
    static HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn hint() -> usize {
    HINT.with(|h| {
        if h.get() == usize::MAX {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed) as usize;
            h.set(n.wrapping_mul(STRIDE) % SLOTS);
        }
        h.get()
    })
}

impl HangTable {
    pub(crate) fn new() -> HangTable {
        HangTable {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Registers a call that started at `start` (ticks, non-zero); returns its slot,
    /// or `None` if the table is full.
    #[inline]
    pub(crate) fn register(&self, start: u64) -> Option<u32> {
        let first = hint();
        for i in 0..SLOTS {
            let idx = (first + i) % SLOTS;
            let slot = &self.slots[idx];
            if slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                return Some(idx as u32);
            }
        }
        None
    }

    /// Frees a slot; returns whether a sweep already counted the call as timed out.
    #[inline]
    pub(crate) fn unregister(&self, slot: u32) -> bool {
        self.slots[slot as usize].swap(0, Ordering::AcqRel) == SWEPT
    }

    /// Marks every call older than `threshold` ticks at `now`; returns how many were
    /// newly marked.
    pub(crate) fn sweep(&self, now: u64, threshold: u64) -> u64 {
        let mut hung = 0;
        for slot in self.slots.iter() {
            let start = slot.load(Ordering::Relaxed);
            if start != 0
                && start != SWEPT
                && now.saturating_sub(start) > threshold
                && slot
                    .compare_exchange(start, SWEPT, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                hung += 1;
            }
        }
        hung
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        SLOTS * std::mem::size_of::<AtomicU64>()
    }
}

type Sweeper = TimingWheel<usize, &'static Point>;

fn sweeper() -> Option<&'static Sweeper> {
    static WHEEL: OnceLock<Option<Sweeper>> = OnceLock::new();
    WHEEL
        .get_or_init(|| {
            TimingWheel::new(
                Duration::from_millis(10),
                128,
                |_, point: &'static Point| {
                    if let Some(period) = point.sweep_hung_calls() {
                        schedule(point, period);
                    }
                },
            )
            .ok()
        })
        .as_ref()
}

/// The sweep period for a threshold: a quarter of it, within 10 ms ..= 1 s.
pub(crate) fn period(threshold: Duration) -> Duration {
    (threshold / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Arms (or re-arms) the sweep of `point` after `after`.
pub(crate) fn schedule(point: &'static Point, after: Duration) {
    if let Some(wheel) = sweeper() {
        let key = point as *const Point as usize;
        let _ = wheel.set_timer(key, point, after);
    }
}

#[cfg(test)]
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
        assert!(t.unregister(a), "the sweep already counted it");
        assert!(!t.unregister(b));
        assert_eq!(t.sweep(1_000, 60), 0, "free slots are never counted");
    }

    #[test]
    fn a_full_table_refuses_registration() {
        let t = HangTable::new();
        let slots: Vec<_> = (0..SLOTS).map(|_| t.register(1).unwrap()).collect();
        assert!(t.register(1).is_none());
        t.unregister(slots[7]);
        assert_eq!(t.register(1), Some(slots[7]));
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
