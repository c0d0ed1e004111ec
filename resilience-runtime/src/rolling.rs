//! Rolling window with go-zero's semantics (`core/collection/rollingwindow.go`).
//!
//! This module owns one concern: a ring of `size` time buckets of `interval` each, fed
//! with values at a given time and read back, oldest bucket first. It never reads a
//! clock: every operation takes `now`, an [`Instant`] on a timeline chosen by the
//! caller, so the window is deterministic and trivial to test.
//!
//! # Semantics
//!
//! The arithmetic is go-zero's, bucket for bucket:
//!
//! * bucket boundaries are anchored at the creation time (`now` given to the
//!   constructor): bucket `i` covers `[start + i * interval, start + (i + 1) * interval)`;
//! * `span = (now - last) / interval`, capped at `size`, where `last` is the (aligned)
//!   time of the last [`add`](RollingWindow::add);
//! * `add` moves to the bucket of `now`, emptying the `span` buckets it skips over, and
//!   adds the value there; a step shorter than `interval` that crosses a boundary moves to
//!   the next bucket;
//! * [`reduce`](RollingWindow::reduce) visits `size - span` buckets (or `size - 1` when
//!   `span == 0` and the current bucket is ignored), oldest to newest, ending with the
//!   last-written bucket (or the one before it): the buckets that expired since the
//!   last add are skipped, and the window is never changed by a read.
//!
//! The "ignore the current bucket" option is **off** by default
//! ([`with_ignore_current`](RollingWindow::with_ignore_current)); go-zero's breaker
//! includes the current bucket, its adaptive shedder ignores it.
//!
//! # Concurrency
//!
//! go-zero takes a read/write lock on every call. Here buckets are reset lazily instead:
//! every slot carries the number of the bucket (the *tick*) it currently holds, and a
//! slot whose tick is not the one a reader expects reads as empty. An add is one load of
//! the newest tick, one load of the slot's tick and the atomic adds of the bucket itself.
//! When a slot is reused for a new tick, the thread that first notices locks *that slot
//! only* (its tick is set to a marker while the counters are zeroed, a few
//! instructions); other threads adding to the same slot spin meanwhile. Reads never
//! wait. The results are the ones go-zero gives for the same sequence of calls, with
//! two concurrency caveats inherent to lock-free counters:
//!
//! * a reader may see the fields of one bucket at slightly different moments (a count
//!   incremented whose sum is not yet);
//! * an add racing with a full lap of rotation (its thread paused for `size *
//!   interval`) may land in the newer bucket.
//!
//! Time is expected to move forward. A `now` older than the newest bucket already
//! written (a thread that read the clock, then was preempted while another moved the
//! window on) is treated as that newest bucket's time; go-zero reads its clock under
//! its lock, so it never sees time go back.
//!
//! # Buckets
//!
//! [`RollingWindow`] is generic over the atomic storage of one bucket, a
//! [`BucketCells`]. The default, [`SumCount`], is go-zero's `Bucket { Sum, Count }`; the
//! breakers use the same ring with their own counters
//! ([`OutcomeCells`](crate::breaker::OutcomeCells) counts successes, failures and drops).

use crate::clock::Instant;
use crate::sync::atomic::{fence, AtomicU64, Ordering};
use std::fmt;
use std::time::Duration;

/// The largest number of buckets a window may have.
pub const MAX_BUCKETS: u64 = 1 << 16;

/// Tick marker of a slot whose counters are being zeroed.
const LOCKED: u64 = u64::MAX;

/// The atomic storage of one bucket of a [`RollingWindow`].
///
/// Implement it to keep other statistics per bucket; the window handles time, rotation
/// and resets. `reset` is only called while no `add` runs on the same storage (the slot
/// is locked), but `snapshot` may run concurrently with `add` and `reset`.
///
/// # Examples
///
/// A bucket that keeps the maximum of the values added:
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::rolling::{BucketCells, RollingWindow};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
///
/// #[derive(Debug, Default)]
/// struct Max(AtomicU64);
///
/// impl BucketCells for Max {
///     type Input = u64;
///     type Snapshot = u64;
///     fn add(&self, v: u64) {
///         self.0.fetch_max(v, Ordering::Relaxed);
///     }
///     fn reset(&self) {
///         self.0.store(0, Ordering::Relaxed);
///     }
///     fn snapshot(&self) -> u64 {
///         self.0.load(Ordering::Relaxed)
///     }
/// }
///
/// let w = RollingWindow::<Max>::with_cells(4, Duration::from_millis(100), Instant::from_nanos(0))?;
/// w.add(Instant::from_nanos(0), 7);
/// w.add(Instant::from_nanos(150_000_000), 3);
/// let mut max = 0;
/// w.reduce(Instant::from_nanos(150_000_000), |b| max = max.max(*b));
/// assert_eq!(max, 7);
/// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
/// ```
pub trait BucketCells: Default + Send + Sync {
    /// What [`RollingWindow::add`] records.
    type Input;
    /// A plain copy of the bucket, handed to [`RollingWindow::reduce`]; its `Default` is
    /// the empty bucket.
    type Snapshot: Default;

    /// Records one input.
    fn add(&self, input: Self::Input);

    /// Empties the bucket (the window guarantees no concurrent `add`).
    fn reset(&self);

    /// Reads the bucket.
    fn snapshot(&self) -> Self::Snapshot;
}

/// One bucket of a [`RollingWindow<SumCount>`], as seen by
/// [`reduce`](RollingWindow::reduce): go-zero's `Bucket`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bucket {
    /// The sum of the values added to the bucket.
    pub sum: f64,
    /// How many values were added to the bucket.
    pub count: u64,
}

/// Atomic storage for a [`Bucket`]: a sum of `f64` values and a count.
///
/// This is the default storage of [`RollingWindow`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::rolling::{BucketCells, SumCount};
///
/// let cells = SumCount::default();
/// cells.add(1.5);
/// cells.add(2.0);
/// let b = cells.snapshot();
/// assert_eq!((b.sum, b.count), (3.5, 2));
/// ```
#[derive(Debug, Default)]
pub struct SumCount {
    /// `f64` bits; all-zero bits are `0.0`.
    sum: AtomicU64,
    count: AtomicU64,
}

impl BucketCells for SumCount {
    type Input = f64;
    type Snapshot = Bucket;

    fn add(&self, v: f64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        // The closure always returns `Some`, so `fetch_update` cannot fail.
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    fn reset(&self) {
        self.sum.store(0, Ordering::Relaxed);
        self.count.store(0, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Bucket {
        Bucket {
            sum: f64::from_bits(self.sum.load(Ordering::Relaxed)),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

/// Why a [`RollingWindow`] could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RollingWindowError {
    /// `size` was 0.
    ZeroSize,
    /// `size` was above [`MAX_BUCKETS`].
    TooManyBuckets {
        /// The size asked for.
        size: u64,
    },
    /// `interval` was zero.
    ZeroInterval,
}

impl fmt::Display for RollingWindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollingWindowError::ZeroSize => f.write_str("`size` must be at least 1"),
            RollingWindowError::TooManyBuckets { size } => {
                write!(f, "`size` must be at most {MAX_BUCKETS}, got {size}")
            }
            RollingWindowError::ZeroInterval => f.write_str("`interval` must be non-zero"),
        }
    }
}

impl std::error::Error for RollingWindowError {}

struct Slot<C> {
    /// The tick whose data the cells hold; `0` (never a valid tick) when empty,
    /// [`LOCKED`] while being reset.
    tick: AtomicU64,
    cells: C,
}

/// A ring of `size` buckets of `interval` each, with go-zero's `RollingWindow`
/// arithmetic (see the [module docs](self)).
///
/// # Examples
///
/// go-zero's `TestRollingWindowAdd`, with time driven by hand:
///
/// ```
/// use resilience_runtime::rolling::RollingWindow;
/// use resilience_runtime::Instant;
/// use std::time::Duration;
///
/// let step = Duration::from_millis(50); // one interval
/// let t0 = Instant::from_nanos(0);
/// let w = RollingWindow::new(3, step, t0)?;
/// let sums = |now| {
///     let mut v = Vec::new();
///     w.reduce(now, |b| v.push(b.sum));
///     v
/// };
/// w.add(t0, 1.0);
/// assert_eq!(sums(t0), [0.0, 0.0, 1.0]);
/// w.add(t0 + step, 2.0);
/// w.add(t0 + step, 3.0);
/// assert_eq!(sums(t0 + step), [0.0, 1.0, 5.0]);
/// for v in [4.0, 5.0, 6.0] {
///     w.add(t0 + 2 * step, v);
/// }
/// assert_eq!(sums(t0 + 2 * step), [1.0, 5.0, 15.0]);
/// w.add(t0 + 3 * step, 7.0);
/// assert_eq!(sums(t0 + 3 * step), [5.0, 15.0, 7.0]);
/// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
/// ```
pub struct RollingWindow<C: BucketCells = SumCount> {
    slots: Box<[Slot<C>]>,
    size: u64,
    interval_ns: u64,
    /// Creation time: bucket boundaries are `start + k * interval`.
    start: u64,
    ignore_current: bool,
    /// The newest tick an `add` moved to (go-zero's `lastTime`/`offset`).
    head: AtomicU64,
}

impl<C: BucketCells> fmt::Debug for RollingWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RollingWindow")
            .field("size", &self.size)
            .field("interval_ns", &self.interval_ns)
            .field("start", &self.start)
            .field("ignore_current", &self.ignore_current)
            .field("head", &self.head.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RollingWindow<SumCount> {
    /// A window of `size` buckets of `interval` each, starting at `now`, holding
    /// go-zero's [`Bucket`]s (sum and count).
    ///
    /// # Errors
    ///
    /// [`RollingWindowError`] when `size` is 0 or above [`MAX_BUCKETS`], or `interval`
    /// is zero.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::rolling::{RollingWindow, RollingWindowError};
    /// use std::time::Duration;
    ///
    /// assert!(RollingWindow::new(40, Duration::from_millis(250), Instant::from_nanos(0)).is_ok());
    /// assert_eq!(
    ///     RollingWindow::new(0, Duration::from_millis(250), Instant::from_nanos(0)).unwrap_err(),
    ///     RollingWindowError::ZeroSize
    /// );
    /// assert_eq!(
    ///     RollingWindow::new(4, Duration::ZERO, Instant::from_nanos(0)).unwrap_err(),
    ///     RollingWindowError::ZeroInterval
    /// );
    /// ```
    pub fn new(size: u64, interval: Duration, now: Instant) -> Result<Self, RollingWindowError> {
        Self::with_cells(size, interval, now)
    }
}

impl<C: BucketCells> RollingWindow<C> {
    /// Like [`RollingWindow::new`], with buckets of another [`BucketCells`] type.
    ///
    /// # Errors
    ///
    /// The same as [`RollingWindow::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{Outcome, OutcomeCells};
    /// use resilience_runtime::rolling::RollingWindow;
    /// use std::time::Duration;
    ///
    /// let w = RollingWindow::<OutcomeCells>::with_cells(40, Duration::from_millis(250), Instant::from_nanos(0))?;
    /// w.add(Instant::from_nanos(1), Outcome::Success);
    /// w.add(Instant::from_nanos(2), Outcome::Drop);
    /// let mut total = 0;
    /// w.reduce(Instant::from_nanos(3), |b| total += b.total());
    /// assert_eq!(total, 2);
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    pub fn with_cells(
        size: u64,
        interval: Duration,
        now: Instant,
    ) -> Result<Self, RollingWindowError> {
        let now = now.as_nanos();
        if size == 0 {
            return Err(RollingWindowError::ZeroSize);
        }
        if size > MAX_BUCKETS {
            return Err(RollingWindowError::TooManyBuckets { size });
        }
        if interval.is_zero() {
            return Err(RollingWindowError::ZeroInterval);
        }
        let interval_ns = crate::clock::nanos(interval);
        let slots = (0..size)
            .map(|_| Slot {
                tick: AtomicU64::new(0),
                cells: C::default(),
            })
            .collect();
        Ok(RollingWindow {
            slots,
            size,
            interval_ns,
            start: now,
            ignore_current: false,
            // Ticks are biased by `size` so that `tick + 1 - size` never underflows and
            // tick 0 is free to mean "empty slot".
            head: AtomicU64::new(size),
        })
    }

    /// Sets whether [`reduce`](Self::reduce) skips the current bucket (go-zero's
    /// `IgnoreCurrentBucket()` option). Off by default.
    ///
    /// # Examples
    ///
    /// go-zero's `TestRollingWindowReduce`: four buckets filled with `0`, `0+1`,
    /// `0+1+2` and `0+1+2+3` sum to 10, or to 4 without the current one.
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::rolling::RollingWindow;
    /// use std::time::Duration;
    ///
    /// let step = 10_000_000;
    /// for (ignore, expect) in [(false, 10.0), (true, 4.0)] {
    ///     let w = RollingWindow::new(4, Duration::from_nanos(step), Instant::from_nanos(0))?.with_ignore_current(ignore);
    ///     for x in 0..4u64 {
    ///         for i in 0..=x {
    ///             w.add(Instant::from_nanos(x * step), i as f64);
    ///         }
    ///     }
    ///     let mut sum = 0.0;
    ///     w.reduce(Instant::from_nanos(3 * step), |b| sum += b.sum);
    ///     assert_eq!(sum, expect);
    /// }
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    #[must_use]
    pub fn with_ignore_current(mut self, ignore: bool) -> Self {
        self.ignore_current = ignore;
        self
    }

    /// The number of buckets.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::rolling::RollingWindow;
    /// # use std::time::Duration;
    /// let w = RollingWindow::new(40, Duration::from_millis(250), Instant::from_nanos(0))?;
    /// assert_eq!(w.size(), 40);
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The width of one bucket.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::rolling::RollingWindow;
    /// # use std::time::Duration;
    /// let w = RollingWindow::new(40, Duration::from_millis(250), Instant::from_nanos(0))?;
    /// assert_eq!(w.interval(), Duration::from_millis(250));
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    /// Whether [`reduce`](Self::reduce) skips the current bucket.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::rolling::RollingWindow;
    /// # use std::time::Duration;
    /// let w = RollingWindow::new(4, Duration::from_millis(250), Instant::from_nanos(0))?;
    /// assert!(!w.ignores_current());
    /// assert!(w.with_ignore_current(true).ignores_current());
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    pub fn ignores_current(&self) -> bool {
        self.ignore_current
    }

    /// The (biased) tick of `now`.
    #[inline]
    fn tick(&self, now: u64) -> u64 {
        (now.saturating_sub(self.start) / self.interval_ns)
            .saturating_add(self.size)
            .min(LOCKED - 1)
    }

    /// Records `input` in the bucket of `now` (go-zero's `Add`).
    ///
    /// Moving to a later bucket empties the buckets skipped over. A `now` older than
    /// the newest bucket written counts in that newest bucket.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::rolling::RollingWindow;
    /// # use std::time::Duration;
    /// let w = RollingWindow::new(3, Duration::from_nanos(100), Instant::from_nanos(0))?;
    /// w.add(Instant::from_nanos(10), 1.0);
    /// w.add(Instant::from_nanos(20), 2.0);
    /// let mut buckets = Vec::new();
    /// w.reduce(Instant::from_nanos(20), |b| buckets.push((b.sum, b.count)));
    /// assert_eq!(buckets, [(0.0, 0), (0.0, 0), (3.0, 2)]);
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    #[inline]
    pub fn add(&self, now: Instant, input: C::Input) {
        let now = now.as_nanos();
        let mut tick = self.tick(now);
        let head = self.head.load(Ordering::Acquire);
        if tick > head {
            self.head.fetch_max(tick, Ordering::AcqRel);
        } else {
            tick = head;
        }
        self.slot_for_write(tick).cells.add(input);
    }

    /// The slot of `tick` (or of a later tick if this one was overtaken by a full lap),
    /// reset if it held an older tick.
    fn slot_for_write(&self, mut tick: u64) -> &Slot<C> {
        let mut spins = 0u32;
        loop {
            let slot = &self.slots[(tick % self.size) as usize];
            let held = slot.tick.load(Ordering::Acquire);
            if held == tick {
                return slot;
            }
            if held == LOCKED {
                backoff(&mut spins);
            } else if held < tick {
                if slot
                    .tick
                    .compare_exchange(held, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    slot.cells.reset();
                    slot.tick.store(tick, Ordering::Release);
                    return slot;
                }
            } else {
                // A later lap already took the slot: this caller is late, count it in
                // the newest bucket (`head >= held > tick`).
                tick = self.head.load(Ordering::Acquire).max(held);
            }
        }
    }

    /// Calls `f` on every bucket of the window at `now`, oldest first (go-zero's
    /// `Reduce`). Never changes the window.
    ///
    /// Visits `size - span` buckets, where `span` is the number of bucket boundaries
    /// crossed since the last [`add`](Self::add) (at most `size`), or `size - 1` buckets
    /// when no boundary was crossed and the current bucket is ignored. Buckets that
    /// received nothing are visited as empty buckets.
    ///
    /// # Examples
    ///
    /// go-zero's `TestRollingWindowReset`: with the current bucket ignored, the window
    /// empties as time passes.
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::rolling::RollingWindow;
    /// # use std::time::Duration;
    /// let w = RollingWindow::new(3, Duration::from_nanos(100), Instant::from_nanos(0))?.with_ignore_current(true);
    /// let sums = |now| {
    ///     let mut v = Vec::new();
    ///     w.reduce(Instant::from_nanos(now), |b| v.push(b.sum));
    ///     v
    /// };
    /// w.add(Instant::from_nanos(0), 1.0);
    /// assert_eq!(sums(100), [0.0, 1.0]);
    /// assert_eq!(sums(200), [1.0]);
    /// assert!(sums(300).is_empty());
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    pub fn reduce<F: FnMut(&C::Snapshot)>(&self, now: Instant, mut f: F) {
        let now = now.as_nanos();
        let head = self.head.load(Ordering::Acquire);
        let now_tick = self.tick(now).max(head);
        let last = if self.ignore_current {
            head.min(now_tick - 1)
        } else {
            head
        };
        let first = now_tick + 1 - self.size;
        for tick in first..=last {
            f(&self.read(tick));
        }
    }

    /// The content of the bucket of `tick`, empty if its slot holds another tick.
    fn read(&self, tick: u64) -> C::Snapshot {
        let slot = &self.slots[(tick % self.size) as usize];
        if slot.tick.load(Ordering::Acquire) != tick {
            return C::Snapshot::default();
        }
        let snapshot = slot.cells.snapshot();
        // Re-check (seqlock style) that the slot was not reused while being read.
        fence(Ordering::Acquire);
        if slot.tick.load(Ordering::Relaxed) != tick {
            return C::Snapshot::default();
        }
        snapshot
    }

    /// Empties every bucket. Not part of go-zero's API: the classic breaker uses it
    /// when it closes. Adds racing with `clear` may or may not survive it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::rolling::RollingWindow;
    /// # use std::time::Duration;
    /// let w = RollingWindow::new(3, Duration::from_nanos(100), Instant::from_nanos(0))?;
    /// w.add(Instant::from_nanos(0), 1.0);
    /// w.clear();
    /// let mut count = 0;
    /// w.reduce(Instant::from_nanos(0), |b| count += b.count);
    /// assert_eq!(count, 0);
    /// w.add(Instant::from_nanos(0), 2.0);
    /// w.reduce(Instant::from_nanos(0), |b| count += b.count);
    /// assert_eq!(count, 1);
    /// # Ok::<(), resilience_runtime::rolling::RollingWindowError>(())
    /// ```
    pub fn clear(&self) {
        for slot in self.slots.iter() {
            let mut spins = 0u32;
            loop {
                let held = slot.tick.load(Ordering::Acquire);
                if held == LOCKED {
                    backoff(&mut spins);
                    continue;
                }
                if slot
                    .tick
                    .compare_exchange(held, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    slot.cells.reset();
                    slot.tick.store(0, Ordering::Release);
                    break;
                }
            }
        }
    }
}

/// Waits for a slot being reset: spins briefly, then yields (the resetting thread may
/// have been preempted).
#[cold]
fn backoff(spins: &mut u32) {
    if *spins < 64 {
        std::hint::spin_loop();
        *spins += 1;
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instant `ns` nanoseconds into the timeline.
    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    const STEP: u64 = 50_000_000;

    fn window(size: u64) -> RollingWindow {
        RollingWindow::new(size, Duration::from_nanos(STEP), at(0)).unwrap()
    }

    fn sums<C: BucketCells<Snapshot = Bucket>>(w: &RollingWindow<C>, now: u64) -> Vec<f64> {
        let mut v = Vec::new();
        w.reduce(at(now), |b| v.push(b.sum));
        v
    }

    #[test]
    fn constructor_errors() {
        let d = Duration::from_millis(1);
        assert_eq!(
            RollingWindow::new(0, d, at(0)).unwrap_err(),
            RollingWindowError::ZeroSize
        );
        assert_eq!(
            RollingWindow::new(1, Duration::ZERO, at(0)).unwrap_err(),
            RollingWindowError::ZeroInterval
        );
        assert_eq!(
            RollingWindow::new(MAX_BUCKETS + 1, d, at(0)).unwrap_err(),
            RollingWindowError::TooManyBuckets {
                size: MAX_BUCKETS + 1
            }
        );
        assert!(RollingWindow::new(MAX_BUCKETS, d, at(0)).is_ok());
        assert!(RollingWindow::new(1, d, at(0)).is_ok());
    }

    #[test]
    fn fresh_window_has_size_empty_buckets() {
        let w = window(3);
        assert_eq!(sums(&w, 0), [0.0; 3]);
        // Reading later without adding: the last-written bucket ages out.
        assert_eq!(sums(&w, STEP), [0.0; 2]);
        assert!(sums(&w, 3 * STEP).is_empty());
        assert!(sums(&w, 100 * STEP).is_empty());
    }

    #[test]
    fn go_zero_add() {
        let w = window(3);
        w.add(at(0), 1.0);
        assert_eq!(sums(&w, 0), [0.0, 0.0, 1.0]);
        w.add(at(STEP), 2.0);
        w.add(at(STEP), 3.0);
        assert_eq!(sums(&w, STEP), [0.0, 1.0, 5.0]);
        for v in [4.0, 5.0, 6.0] {
            w.add(at(2 * STEP), v);
        }
        assert_eq!(sums(&w, 2 * STEP), [1.0, 5.0, 15.0]);
        w.add(at(3 * STEP), 7.0);
        assert_eq!(sums(&w, 3 * STEP), [5.0, 15.0, 7.0]);
    }

    #[test]
    fn span_is_capped_at_size_and_everything_resets() {
        let w = window(3);
        w.add(at(0), 1.0);
        w.add(at(STEP), 2.0);
        w.add(at(10 * STEP + 1), 3.0);
        assert_eq!(sums(&w, 10 * STEP + 1), [0.0, 0.0, 3.0]);
    }

    #[test]
    fn stale_now_counts_in_the_newest_bucket() {
        let w = window(3);
        w.add(at(2 * STEP), 1.0);
        w.add(at(STEP), 2.0); // older than the newest bucket
        w.add(at(0), 4.0);
        assert_eq!(sums(&w, 2 * STEP), [0.0, 0.0, 7.0]);
        // A stale read is a read at the newest bucket.
        assert_eq!(sums(&w, 0), [0.0, 0.0, 7.0]);
    }

    #[test]
    fn now_before_start_is_start() {
        let w = RollingWindow::new(2, Duration::from_nanos(STEP), at(1_000)).unwrap();
        w.add(at(0), 1.0);
        w.add(at(1_000 + STEP - 1), 1.0);
        assert_eq!(sums(&w, 1_000), [0.0, 2.0]);
    }

    #[test]
    fn reduce_does_not_advance() {
        let w = window(3);
        w.add(at(0), 1.0);
        // Reading far in the future shows nothing, but does not reset anything:
        assert!(sums(&w, 5 * STEP).is_empty());
        assert_eq!(sums(&w, 0), [0.0, 0.0, 1.0]);
    }

    #[test]
    fn ignore_current_after_span() {
        // When a boundary was crossed, the last-written bucket is already "previous"
        // and is included even when ignoring the current bucket.
        let w = window(3).with_ignore_current(true);
        w.add(at(0), 1.0);
        assert_eq!(sums(&w, 0), [0.0, 0.0]);
        assert_eq!(sums(&w, STEP), [0.0, 1.0]);
        w.add(at(STEP), 2.0);
        assert_eq!(sums(&w, STEP), [0.0, 1.0]);
        assert_eq!(sums(&w, 2 * STEP), [1.0, 2.0]);
    }

    #[test]
    fn single_bucket() {
        let w = window(1);
        w.add(at(0), 1.0);
        assert_eq!(sums(&w, 0), [1.0]);
        assert!(sums(&w, STEP).is_empty());
        w.add(at(STEP), 2.0);
        assert_eq!(sums(&w, STEP), [2.0]);
        let ignoring = window(1).with_ignore_current(true);
        ignoring.add(at(0), 1.0);
        assert!(sums(&ignoring, 0).is_empty());
    }

    #[test]
    fn clear_empties_and_keeps_working() {
        let w = window(3);
        w.add(at(0), 1.0);
        w.add(at(STEP), 2.0);
        w.clear();
        assert_eq!(sums(&w, STEP), [0.0; 3]);
        w.add(at(STEP), 3.0);
        w.add(at(2 * STEP), 4.0);
        assert_eq!(sums(&w, 2 * STEP), [0.0, 3.0, 4.0]);
    }

    #[test]
    fn huge_times_do_not_overflow() {
        let w = RollingWindow::new(4, Duration::from_nanos(1), at(0)).unwrap();
        w.add(at(u64::MAX), 1.0);
        w.add(at(u64::MAX), 1.0);
        assert_eq!(sums(&w, u64::MAX).iter().sum::<f64>(), 2.0);
        let w = RollingWindow::new(4, Duration::MAX, at(u64::MAX - 1)).unwrap();
        w.add(at(u64::MAX), 1.0);
        assert_eq!(sums(&w, u64::MAX), [0.0, 0.0, 0.0, 1.0]);
    }
}
