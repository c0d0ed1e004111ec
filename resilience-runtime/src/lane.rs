//! Lane numbers of threads: each live thread gets a small number, the lowest free
//! one, returned when it exits, so that per-thread lanes of a table (the hung-call
//! table, the durations, the retry budgets' counters) go to live threads.

use crate::sync::Recover;
use crate::sync::{thread_local, Mutex};
use std::cell::Cell;

/// Lane numbers of live threads; a thread's number is returned when it exits.
struct LaneNumbers {
    next: u32,
    free: Vec<u32>,
}

static NUMBERS: Mutex<LaneNumbers> = Mutex::new(LaneNumbers {
    next: 0,
    free: Vec::new(),
});

/// This thread's lane number, unique among live threads.
struct ThreadLane(u32);

impl LaneNumbers {
    /// The lowest free number, so that owned lanes go to live threads.
    fn take(&mut self) -> u32 {
        match self.free.iter().enumerate().min_by_key(|(_, v)| **v) {
            Some((i, _)) => self.free.swap_remove(i),
            None => {
                self.next = self.next.saturating_add(1);
                self.next - 1
            }
        }
    }

    fn give_back(&mut self, number: u32) {
        self.free.push(number);
    }
}

impl ThreadLane {
    fn claim() -> ThreadLane {
        ThreadLane(NUMBERS.lock().recover().take())
    }
}

impl Drop for ThreadLane {
    fn drop(&mut self) {
        LANE_FAST.set(UNKNOWN);
        NUMBERS.lock().recover().give_back(self.0);
    }
}

/// `LANE_FAST` before `THREAD_LANE` exists and once it is gone.
const UNKNOWN: u32 = u32::MAX;

thread_local! {
    static THREAD_LANE: ThreadLane = ThreadLane::claim();
    /// `THREAD_LANE`'s number, readable without the lazy-initialisation check
    /// ([`UNKNOWN`] until it exists and once it is gone).
    static LANE_FAST: Cell<u32> = const { Cell::new(UNKNOWN) };
}

/// This thread's lane number (unique among live threads, lowest free first); `u32::MAX`
/// while thread-locals are being torn down.
#[inline]
pub(crate) fn thread_lane() -> u32 {
    match LANE_FAST.get() {
        UNKNOWN => thread_lane_slow(),
        n => n,
    }
}

/// This thread's lane number as [`thread_lane`] last read it: `u32::MAX` before the
/// thread's first [`thread_lane`] and once its thread-locals are torn down. One
/// thread-local read, for hot paths that fall back to [`thread_lane`].
#[inline]
pub(crate) fn fast_lane() -> u32 {
    LANE_FAST.get()
}

#[cold]
#[inline(never)]
fn thread_lane_slow() -> u32 {
    THREAD_LANE
        .try_with(|l| {
            LANE_FAST.set(l.0);
            l.0
        })
        .unwrap_or(u32::MAX)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lane_numbers_are_reused_lowest_first() {
        let mut n = LaneNumbers {
            next: 0,
            free: Vec::new(),
        };
        let taken: Vec<u32> = (0..5).map(|_| n.take()).collect();
        assert_eq!(taken, [0, 1, 2, 3, 4]);
        n.give_back(3);
        n.give_back(1);
        assert_eq!(n.take(), 1);
        assert_eq!(n.take(), 3);
        assert_eq!(n.take(), 5);
    }

    #[test]
    fn the_cached_lane_is_the_claimed_one() {
        std::thread::spawn(|| {
            assert_eq!(fast_lane(), UNKNOWN, "nothing cached before the first call");
            let first = thread_lane();
            assert_eq!(fast_lane(), first);
            assert_eq!(THREAD_LANE.with(|l| l.0), first);
            assert_eq!(thread_lane(), first, "the cached number is stable");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn live_threads_have_distinct_lanes() {
        let barrier = crate::sync::Arc::new(crate::sync::Barrier::new(5));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let b = barrier.clone();
                std::thread::spawn(move || {
                    let lane = thread_lane();
                    b.wait();
                    lane
                })
            })
            .collect();
        let here = thread_lane();
        barrier.wait();
        let mut lanes: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        lanes.push(here);
        lanes.sort_unstable();
        lanes.dedup();
        assert_eq!(lanes.len(), 5, "{lanes:?}");
    }
}
