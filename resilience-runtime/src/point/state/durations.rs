//! Call durations of a point, per wall-clock second: how many calls ended, the sum of
//! their durations and the longest one, for the per-second series (mean and max
//! duration in the console's live charts).
//!
//! Every call admitted is measured when it ends (finished or panicked; a cancelled
//! call is not a duration), with or without a policy; a point with only an untimed
//! breaker is not. Recording one must cost about a
//! nanosecond, so nothing is a read-modify-write shared by threads: each live thread
//! owns a lane (its number from the hung-call table's thread numbering) and writes it
//! with plain loads and stores; threads beyond the owned lanes share one lane with
//! atomic read-modify-writes. A reader adds the lanes up.
//!
//! # What is kept, exactly
//!
//! - **Count and sum**: one cumulative word per lane, `count + sum_us << 24`, wrapping.
//!   Adding such words adds both fields (the packing is linear modulo 2^64), and the
//!   difference of two readings decodes to exact counts and sums as long as fewer
//!   than 2^24 calls ended between them ([`Total::since`]): the series samples once a
//!   second, so up to 16 million calls a second per point. Durations are in whole
//!   microseconds, clamped to 2^32 - 1 (71 minutes). Calls measured on the cached
//!   timeline (thresholds of 200 ms and more, or none) read a clock of about a
//!   millisecond's resolution: a call shorter than that reads 0 or 1 ms, with the
//!   chance of 1 ms in proportion to its length, so sums and means stay unbiased.
//! - **Max**: per lane, two words, for even and odd seconds, holding
//!   `second << 32 | max_us` of the calls that ended in that second. The max of
//!   second `s` is exact once `s` is over and until a call ends in `s + 2` (the
//!   sampler reads it about 20 ms after `s` ends), except for a call whose owner
//!   thread is between its load and its store exactly when the reader passes
//!   (nanoseconds): its duration is then in the count and sum but may be missing from
//!   the max. The shared lane's max is kept by compare-and-swap and has no such gap.

use super::chunks::Chunks;
use crate::sync::{AtomicU64, Ordering};

/// Whether calls are measured (see [`measure_durations`]).
#[cfg(not(loom))]
static MEASURING: crate::sync::atomic::AtomicBool = crate::sync::atomic::AtomicBool::new(false);

/// Turns the measuring of call durations on or off, process-wide.
///
/// While on, every call admitted that finishes or panics is measured (with or
/// without a policy; not on a point whose only setting is a breaker without a
/// slow-call threshold), and each second of [`Point::seconds`] has the
/// count, mean and max of the durations of the calls that ended in it
/// ([`SecondStats::measured`], [`mean_duration`](crate::SecondStats::mean_duration),
/// [`max_duration`](crate::SecondStats::max_duration)). The heartbeat client turns it
/// on (the console charts them); it is off by default because it costs a few
/// nanoseconds a call (two clock readings and a few owner-written stores; see the
/// hot-path bench's `durations measured` row). Calls under a timeout rule or a
/// slow-call breaker are timed either way, for their rules; this only says whether
/// their durations go into the series.
///
/// [`Point::seconds`]: crate::Point::seconds
/// [`SecondStats::measured`]: crate::SecondStats::measured
///
/// # Examples
///
/// ```
/// use resilience_runtime::{measure_durations, registry, Policy};
///
/// measure_durations(true);
/// registry().set_policy("docs.durations", Policy::builder().build()?)?;
/// let point = registry().point("docs.durations")?;
/// point.enter().unwrap().finish(false);
/// assert!(resilience_runtime::measuring_durations());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(not(loom))]
pub fn measure_durations(on: bool) {
    MEASURING.store(on, Ordering::Relaxed);
}

/// Whether call durations are measured (see [`measure_durations`]).
#[cfg(not(loom))]
#[inline]
pub fn measuring_durations() -> bool {
    MEASURING.load(Ordering::Relaxed)
}

/// Lanes owned by one thread each (threads numbered from 0, lowest free first).
pub(crate) const OWNED: usize = 16;
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The longest duration recorded, in microseconds (71 minutes).
pub(crate) const MAX_US: u64 = u32::MAX as u64;

/// Cumulative count and sum of durations, packed (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Total(pub(crate) u64);

impl Total {
    /// The total after one more call of `us` microseconds.
    #[inline]
    pub(crate) fn plus(self, us: u64) -> Total {
        Total(self.0.wrapping_add(1 + (us.min(MAX_US) << COUNT_BITS)))
    }

    /// The sum of two totals (of two lanes, or two stretches of time).
    #[inline]
    pub(crate) fn add(self, other: Total) -> Total {
        Total(self.0.wrapping_add(other.0))
    }

    /// What ended between `earlier` and `self`: `(calls, sum_us)`, exact while fewer
    /// than 2^24 calls ended in between.
    pub(crate) fn since(self, earlier: Total) -> (u64, u64) {
        let d = self.0.wrapping_sub(earlier.0);
        (d & COUNT_MASK, d >> COUNT_BITS)
    }
}

/// The max word of a call of `us` microseconds ending in `second`, given the word it
/// finds: `Some(new word)` if the word must change (another second's, or a shorter
/// max), else `None`. Pure: the decision of both the owned and the shared lanes.
#[inline]
pub(crate) fn merge_max(word: u64, second: u64, us: u64) -> Option<u64> {
    let stamp = second as u32 as u64;
    let us = us.min(MAX_US);
    if word >> 32 != stamp || us > word & MAX_US {
        Some(stamp << 32 | us)
    } else {
        None
    }
}

/// The max a word holds for `second` (0 if it holds another second's).
#[inline]
pub(crate) fn max_in(word: u64, second: u64) -> u64 {
    if word >> 32 == second as u32 as u64 {
        word & MAX_US
    } else {
        0
    }
}

#[repr(align(64))]
#[derive(Debug)]
struct Lane {
    total: AtomicU64,
    /// For even and odd seconds.
    max: [AtomicU64; 2],
}

impl Lane {
    fn new() -> Lane {
        Lane {
            total: AtomicU64::new(0),
            // No second is `u32::MAX`'s (the year 2106): reads as empty.
            max: [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)],
        }
    }
}

/// Owned lanes per chunk: a point's lanes are made two at a time (see `chunks`), by
/// the first call of a thread whose lane is in a chunk not yet made.
const CHUNK: usize = 2;

/// [`CHUNK`] lanes, allocated together.
#[derive(Debug)]
struct Chunk([Lane; CHUNK]);

impl Chunk {
    fn new() -> Chunk {
        Chunk(std::array::from_fn(|_| Lane::new()))
    }
}

/// Chunks of owned lanes, then one for the shared lane (its first).
const CHUNKS: usize = OWNED / CHUNK + 1;

/// The durations of one point's calls, made by its first measured call.
#[derive(Debug)]
pub(crate) struct Durations {
    /// `OWNED` owned lanes, then (the first lane of the last chunk) the shared one;
    /// boxed, so that a point holds one pointer until a call is measured.
    chunks: Box<Chunks<Chunk, CHUNKS>>,
}

impl Default for Durations {
    fn default() -> Durations {
        Durations::new()
    }
}

impl Durations {
    pub(crate) fn new() -> Durations {
        Durations {
            chunks: Box::new(Chunks::new()),
        }
    }

    /// Records a call of `us` microseconds that ended in wall-clock `second`, made by
    /// the thread numbered `lane` (its own lane below [`OWNED`], else the shared one).
    #[inline]
    pub(crate) fn record(&self, lane: u32, second: u64, us: u64) {
        let lane = lane as usize;
        if lane >= OWNED {
            return self.record_shared(second, us);
        }
        let own = match self.chunks.get(lane / CHUNK) {
            Some(chunk) => &chunk.0[lane % CHUNK],
            None => &self.chunks.get_or_make(lane / CHUNK, Chunk::new).0[lane % CHUNK],
        };
        // Only this thread writes its lane: a load and a store each.
        let t = Total(own.total.load(Ordering::Relaxed)).plus(us);
        own.total.store(t.0, Ordering::Relaxed);
        let max = &own.max[(second & 1) as usize];
        if let Some(w) = merge_max(max.load(Ordering::Relaxed), second, us) {
            max.store(w, Ordering::Relaxed);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_shared(&self, second: u64, us: u64) {
        let shared = &self.chunks.get_or_make(CHUNKS - 1, Chunk::new).0[0];
        shared
            .total
            .fetch_add(Total(0).plus(us).0, Ordering::Relaxed);
        let max = &shared.max[(second & 1) as usize];
        let _ = max.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            merge_max(w, second, us)
        });
    }

    /// Every lane made (a lane of a chunk not made holds nothing).
    fn lanes(&self) -> impl Iterator<Item = &Lane> {
        self.chunks.made().flat_map(|c| c.0.iter())
    }

    /// The cumulative total of every lane.
    pub(crate) fn total(&self) -> Total {
        self.lanes().fold(Total(0), |t, l| {
            t.add(Total(l.total.load(Ordering::Relaxed)))
        })
    }

    /// The longest call, in microseconds, that ended in `second` (0 if none did, or
    /// the second is older than the one before the last a call ended in).
    pub(crate) fn max_of(&self, second: u64) -> u64 {
        self.lanes()
            .map(|l| max_in(l.max[(second & 1) as usize].load(Ordering::Relaxed), second))
            .max()
            .unwrap_or(0)
    }

    /// Bytes held, the table itself included.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Durations>()
            + std::mem::size_of::<Chunks<Chunk, CHUNKS>>()
            + self.chunks.heap_bytes()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn totals_add_and_decode() {
        let t = Total(0).plus(5).plus(7).plus(MAX_US + 10);
        assert_eq!(t.since(Total(0)), (3, 12 + MAX_US));
        // Wrapping: a long-running total still decodes the difference exactly.
        let old = Total(u64::MAX - 3);
        assert_eq!(old.plus(9).plus(1).since(old), (2, 10));
    }

    #[test]
    fn max_words_are_per_second() {
        let w = merge_max(u64::MAX, 100, 7).unwrap();
        assert_eq!(max_in(w, 100), 7);
        assert_eq!(max_in(w, 102), 0);
        assert_eq!(merge_max(w, 100, 3), None);
        assert_eq!(max_in(merge_max(w, 100, 9).unwrap(), 100), 9);
        // Another second's word is replaced, even by a shorter call.
        assert_eq!(max_in(merge_max(w, 102, 1).unwrap(), 102), 1);
    }

    #[test]
    fn owned_and_shared_lanes_add_up() {
        let d = Durations::new();
        d.record(0, 10, 100);
        d.record(3, 10, 300);
        d.record(OWNED as u32, 10, 500);
        d.record(u32::MAX, 11, 50);
        assert_eq!(d.total().since(Total(0)), (4, 950));
        assert_eq!(d.max_of(10), 500);
        assert_eq!(d.max_of(11), 50);
        assert_eq!(d.max_of(12), 0);
    }

    #[test]
    fn lanes_are_made_by_the_threads_that_record() {
        let d = Durations::new();
        let chunk = std::mem::size_of::<Chunk>();
        let base = d.heap_bytes();
        assert_eq!(
            base,
            std::mem::size_of::<Durations>() + CHUNKS * 8,
            "no lane yet"
        );
        d.record(0, 10, 100);
        d.record(1, 10, 100);
        assert_eq!(d.heap_bytes(), base + chunk, "lanes 0 and 1 share a chunk");
        d.record(5, 10, 100);
        assert_eq!(d.heap_bytes(), base + 2 * chunk);
        d.record(OWNED as u32 + 7, 10, 100);
        assert_eq!(d.heap_bytes(), base + 3 * chunk, "the shared lane's chunk");
        assert_eq!(d.total().since(Total(0)), (4, 400), "every chunk is read");
    }

    #[test]
    fn racing_threads_lose_no_call() {
        let d = std::sync::Arc::new(Durations::new());
        let threads: Vec<_> = (0..(OWNED as u32 + 8))
            .map(|lane| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000u64 {
                        d.record(lane, 50, i % 100 + u64::from(lane));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = OWNED as u64 + 8;
        let per_thread: u64 = (0..2_000u64).map(|i| i % 100).sum();
        let lanes: u64 = (0..n).sum::<u64>() * 2_000;
        // Lanes past `OWNED` share one lane: many threads, no call lost.
        assert_eq!(
            d.total().since(Total(0)),
            (n * 2_000, n * per_thread + lanes)
        );
        assert_eq!(d.max_of(50), 99 + n - 1);
    }

    proptest! {
        /// Against a plain reference: counts and sums are exact, and the max of a
        /// second read before any call ended two seconds later is exact.
        #[test]
        fn matches_a_reference(
            calls in proptest::collection::vec((0u32..20, 0u64..3, 0u64..5_000), 0..60)
        ) {
            let d = Durations::new();
            let mut second = 1_000u64;
            let mut reference: std::collections::BTreeMap<u64, (u64, u64, u64)> = Default::default();
            for (lane, dt, us) in calls {
                // Read the max of the second before before the clock passes it by two.
                if dt > 0 {
                    for s in second.saturating_sub(1)..=second {
                        let want = reference.get(&s).map_or(0, |r| r.2);
                        prop_assert_eq!(d.max_of(s), want);
                    }
                }
                second += dt;
                d.record(lane, second, us);
                let r = reference.entry(second).or_default();
                r.0 += 1;
                r.1 += us;
                r.2 = r.2.max(us);
            }
            let calls: u64 = reference.values().map(|r| r.0).sum();
            let sum: u64 = reference.values().map(|r| r.1).sum();
            prop_assert_eq!(d.total().since(Total(0)), (calls, sum));
        }
    }
}
