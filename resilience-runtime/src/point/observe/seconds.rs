//! The per-second series of every point, with or without a policy: the timing wheel
//! samples the point's cumulative counters once a second while the point is active,
//! and the difference between two samples is the traffic of the second the later one
//! closes. Nothing is counted per call for it: a call only checks (one relaxed load)
//! that the sampler is running, and starts it if not.
//!
//! Every call is in exactly one second (the differences add up to the totals), and
//! a point's 10-s cycles are the sums of their seconds. Under a policy, the first call
//! of each second closes the second before, exactly (the wheel's sample then only
//! closes a second no call did). Without a policy, a
//! call is attributed to the second whose sample follows it, so one made during the
//! sampler's lag after a boundary (at most [`LAG`] plus the wheel's backlog) counts in
//! the second before, and the traffic of seconds the sampler missed (the wheel was
//! late) lands in the first second sampled after them.
//!
//! The sampler stops after two samples in a row saw nothing (`arming`), and then
//! holds no timer: an idle point costs no background work. Its history is freed
//! `KEEP` seconds later with those of the other points that stopped (`expiry`: one
//! queue and one timer for all of them); a point then keeps only its last sample,
//! about 200 bytes. On a manual clock the sampler's hook leaves the clock when it
//! stops, and the call that starts it again hooks it again. A call racing that stop
//! (it found the sampler armed, and its count landed after the last sample) is in the
//! totals and the window at once, and in the series from the next sample, which the
//! point's next call starts: it may then count in a later second than it happened.

use crate::point::observe::chores::{self, Chore};
use crate::point::state::durations::{Durations, Total};
use crate::point::{observe::expiry, state::tally, Point, REASONS};
use crate::stats::{CycleStats, ReasonCounts, WindowCounts};
use crate::sync::Ordering;
use crate::sync::Recover;
use crate::window::{self, TRACKED};
use std::collections::VecDeque;
use std::time::Duration;

/// How long after a second's boundary its closing sample is due.
pub(crate) const LAG: Duration = Duration::from_millis(20);
/// Seconds of history kept: the current and the previous cycle, and slack.
pub(crate) const KEEP: u64 = 32;
const SECOND_NS: u64 = 1_000_000_000;
/// The statistics cycle in whole seconds.
const CYCLE_SECONDS: u64 = crate::stats::CYCLE.as_secs();
// Two whole cycles fit in the history, and a cycle is whole seconds.
const _: () = assert!(2 * CYCLE_SECONDS < KEEP);
const _: () = assert!(crate::stats::CYCLE.subsec_nanos() == 0);

/// Counts of a point: cumulative (a sample) or a difference (a second).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Passes, downgrades, exceptions and timeouts (`window::PASSES`, ...).
    pub(crate) tracked: [u64; TRACKED],
    /// Downgrades per reason (`Reason::ALL` order).
    pub(crate) reasons: [u64; REASONS],
    /// A sample's cumulative count and sum of call durations, packed (see
    /// `durations`; a difference of samples decodes into the fields below).
    pub(crate) timed: Total,
    /// Of a second (a difference): calls whose duration was measured...
    pub(crate) calls: u64,
    /// ...the sum of those durations in microseconds...
    pub(crate) sum_us: u64,
    /// ...and the longest of them.
    pub(crate) max_us: u64,
}

impl Default for Counts {
    fn default() -> Counts {
        Counts {
            tracked: [0; TRACKED],
            reasons: [0; REASONS],
            timed: Total(0),
            calls: 0,
            sum_us: 0,
            max_us: 0,
        }
    }
}

impl Counts {
    /// The difference of two samples (the max is added by the caller).
    fn minus(&self, earlier: &Counts) -> Counts {
        let (calls, sum_us) = self.timed.since(earlier.timed);
        Counts {
            tracked: std::array::from_fn(|i| self.tracked[i].saturating_sub(earlier.tracked[i])),
            reasons: std::array::from_fn(|i| self.reasons[i].saturating_sub(earlier.reasons[i])),
            timed: Total(0),
            calls,
            sum_us,
            max_us: 0,
        }
    }

    fn add(&mut self, other: &Counts) {
        for (a, b) in self.tracked.iter_mut().zip(other.tracked) {
            *a += b;
        }
        for (a, b) in self.reasons.iter_mut().zip(other.reasons) {
            *a += b;
        }
        self.calls += other.calls;
        self.sum_us += other.sum_us;
        self.max_us = self.max_us.max(other.max_us);
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.tracked.iter().chain(&self.reasons).all(|&n| n == 0) && self.calls == 0
    }

    /// Of a second: calls measured, the sum and the max of their durations, in
    /// microseconds.
    pub(crate) fn durations(&self) -> (u64, u64, u64) {
        (self.calls, self.sum_us, self.max_us)
    }

    pub(crate) fn visits(&self) -> u64 {
        self.tracked[window::PASSES] + self.tracked[window::DOWNGRADES]
    }

    /// The counts as a window's.
    fn as_window(&self) -> WindowCounts {
        WindowCounts {
            visits: self.visits(),
            passes: self.tracked[window::PASSES],
            downgrades: self.tracked[window::DOWNGRADES],
            exceptions: self.tracked[window::EXCEPTIONS],
            timeouts: self.tracked[window::TIMEOUTS],
            cancelled: self.tracked[window::CANCELLED],
        }
    }
}

/// The sampled series: the last sample and the seconds it and its predecessors
/// closed (ascending, sparse: a second without traffic has no entry).
#[derive(Debug, Default)]
pub(crate) struct Series {
    last: Counts,
    /// The last second closed by a sample.
    closed: u64,
    seconds: VecDeque<(u64, Counts)>,
    /// The point's ticket in the `expiry` queue and the second it had closed when
    /// queued, while it is queued.
    queued: Option<(u64, u64)>,
}

impl Series {
    /// Records a sample of the cumulative counts, taken in second `current`, that
    /// closes second `closing`; returns whether anything happened since the previous
    /// sample.
    ///
    /// What happened since the previous sample belongs to the seconds after the last
    /// one closed, up to `closing`, and is counted in `closing` (seconds missed land in
    /// the first one sampled). A sample that closes nothing new (the boundary's own
    /// sample came first, or a manual clock moves within a second) counts it in the
    /// open second it was taken in. `max_of(second)` is the longest call that ended
    /// in a second (see `durations`), merged into the second counted.
    pub(crate) fn record(
        &mut self,
        closing: u64,
        current: u64,
        now: Counts,
        max_of: impl Fn(u64) -> u64,
    ) -> bool {
        let mut delta = now.minus(&self.last);
        self.last = now;
        // The calls since the last sample ended in the seconds after the last closed
        // one; a late sample also reads the max of the second before the one it
        // counts them in (the max words tell the seconds they hold).
        let first = self.closed + 1;
        let second = if closing > self.closed {
            self.closed = closing;
            closing
        } else {
            current.max(self.closed + 1)
        };
        let moved = !delta.is_zero();
        if moved {
            if delta.calls > 0 {
                let from = first.max(second.saturating_sub(1)).min(second);
                let mut max = (from..=second).map(&max_of).max().unwrap_or(0);
                let mean = delta.sum_us.div_ceil(delta.calls);
                if max < mean {
                    // A call counted after the sample of the second it ended in (its
                    // thread was preempted between its end and its count) has its
                    // max in that earlier second: take it along, and never show a
                    // max below the mean.
                    max = max.max(max_of(from.saturating_sub(1))).max(mean);
                }
                delta.max_us = max;
            }
            match self.seconds.back_mut() {
                Some((s, counts)) if *s >= second => counts.add(&delta),
                _ => {
                    // Most points have one busy second now and then: no spare room.
                    if self.seconds.capacity() == 0 {
                        self.seconds.reserve_exact(1);
                    }
                    self.seconds.push_back((second, delta));
                }
            }
        }
        // Seconds go once they are `KEEP` old by the clock.
        let now_second = current.max(closing);
        while self
            .seconds
            .front()
            .is_some_and(|(s, _)| s + KEEP <= now_second)
        {
            self.seconds.pop_front();
        }
        moved
    }

    /// The sum of the seconds in `from..to`.
    pub(crate) fn sum(&self, from: u64, to: u64) -> Counts {
        let mut c = Counts::default();
        for (_, counts) in self.seconds.iter().filter(|(s, _)| (from..to).contains(s)) {
            c.add(counts);
        }
        c
    }

    /// Each second of `from..to`, zero where nothing happened.
    pub(crate) fn each(&self, from: u64, to: u64) -> Vec<Counts> {
        (from..to).map(|s| self.sum(s, s + 1)).collect()
    }

    /// Bytes held, the series itself included.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Series>()
            + self.seconds.capacity() * std::mem::size_of::<(u64, Counts)>()
    }

    /// The cumulative counts of the last sample.
    pub(crate) fn last(&self) -> Counts {
        self.last
    }

    /// How many seconds with traffic it holds.
    #[cfg(test)]
    pub(crate) fn seconds_kept(&self) -> usize {
        self.seconds.len()
    }
}

/// The second a sample taken at wall time `wall_ns`, `lag` after the boundary it is
/// due at, closes.
pub(crate) fn closing_second(wall_ns: u64, lag: Duration) -> u64 {
    wall_ns.saturating_sub(crate::clock::nanos(lag)) / SECOND_NS
}

/// When the next closing sample is due after wall time `wall_ns`.
fn next_sample_in(wall_ns: u64) -> Duration {
    let into = wall_ns % SECOND_NS;
    let lag = crate::clock::nanos(LAG);
    let wait = if into < lag {
        lag - into
    } else {
        SECOND_NS - into + lag
    };
    Duration::from_nanos(wait)
}

impl Point {
    /// Whether the sampler runs (the check every call makes: one relaxed load).
    #[inline(always)]
    pub(in crate::point) fn sampler_armed(&self) -> bool {
        self.sampling.is_armed()
    }

    /// Starts the sampler if it is not running (a call found it not `ARMED`).
    #[cold]
    #[inline(never)]
    pub(in crate::point) fn arm_sampler(&self) {
        if !self.entered.load(Ordering::Relaxed) {
            self.entered.store(true, Ordering::Relaxed);
        }
        if !self.sampling.arm() {
            // Still scheduled.
            return;
        }
        if !self.clock.is_manual() {
            let wall = self.clock.wall_nanos(self.clock.now_ns());
            chores::schedule(
                self.owner(),
                self,
                Chore::SampleSeconds,
                next_sample_in(wall),
            );
        } else if !self.sampler_hooked.swap(true, Ordering::AcqRel) {
            // A manual clock samples just before it moves: every second is exact.
            let me = self.me.clone();
            self.clock.before_move(move |_to| {
                me.upgrade().is_some_and(|point| point.sample_before_move())
            });
        }
    }

    /// The sampler's hook on a manual clock, just before it moves: one sample; returns
    /// whether to stay hooked. A stopped sampler leaves the clock, so that a point that
    /// is not called costs a move nothing; the call that starts it again hooks it
    /// again.
    fn sample_before_move(&self) -> bool {
        if self.sampling_scheduled() {
            // Everything since the last sample happened in the current second (the
            // clock has not moved yet); it closes nothing, so the first call of the
            // next second under a policy still closes it with the counts it reads for
            // the cycle.
            let second = self.clock.wall_nanos(self.clock.now_ns()) / SECOND_NS;
            if self.sample_closing(0, second) {
                return true;
            }
        }
        // Stopped: unhook. A call that armed the sampler before this swap and found
        // the hook still there did not hook it again: the swap reads what its swap
        // wrote, so the load below sees it armed, and the hook stays (unless another
        // call hooked it since, and this one goes).
        self.sampler_hooked.swap(false, Ordering::AcqRel);
        self.sampling_scheduled() && !self.sampler_hooked.swap(true, Ordering::AcqRel)
    }

    /// The end of a measured call at `now` (timeline), `ns` long, holding hung-call
    /// slot `hang`: its exception (if `exception`) and its duration (see
    /// `durations`). Under a policy (`close`), the first event of a second closes the
    /// one before, ends included, so that both count in the second the call ended in.
    #[inline(never)]
    pub(in crate::point) fn end_measured(
        &self,
        now: u64,
        ns: u64,
        hang: u32,
        exception: bool,
        close: bool,
    ) {
        if close {
            self.observe_cycle(now);
        }
        if exception {
            self.counters.exceptions.fetch_add(1, Ordering::Relaxed);
        }
        // The owner of an owned hung-call lane is this thread: no thread-local read.
        let lane =
            crate::point::state::hang::owner_of(hang).unwrap_or_else(crate::lane::thread_lane);
        let second = self.clock.wall_nanos(now) / SECOND_NS;
        self.durations
            .get_or_init(Durations::new)
            .record(lane, second, ns / 1_000);
    }

    /// The longest measured call that ended in wall-clock `second`, in µs.
    fn max_duration_of(&self, second: u64) -> u64 {
        self.durations.get().map_or(0, |d| d.max_of(second))
    }

    /// The cumulative counts now (totals of every call, with or without a policy).
    fn cumulative(&self) -> Counts {
        let mut tracked = self.counters.tracked(&self.flow);
        tracked[window::PASSES] += tally::total(self.id);
        Counts {
            tracked,
            reasons: self.counters.reasons().0,
            timed: self.durations.get().map_or(Total(0), |d| d.total()),
            ..Counts::default()
        }
    }

    /// One sample (the wheel's chore); returns when to sample again, if ever.
    pub(crate) fn sample_seconds(&self) -> Option<Duration> {
        // From the OS: a read of the cached timeline would keep its thread ticking
        // for a second or two after the last call (see `ticker`).
        let wall = self.clock.wall_nanos(self.clock.precise_now_ns());
        if self.sample_closing(closing_second(wall, LAG), wall / SECOND_NS) {
            return Some(next_sample_in(wall));
        }
        // Stopped: the point holds no timer any more; its history goes `KEEP` seconds
        // from now, with the other points' (`expiry`).
        self.queue_expiry();
        None
    }

    /// Queues the point's history to be freed `KEEP` seconds from now, unless it has
    /// none or is queued already.
    fn queue_expiry(&self) {
        let mut series = self.seconds.lock().recover();
        let Some(s) = series.as_mut() else {
            return;
        };
        if s.queued.is_some() {
            return;
        }
        if s.seconds.is_empty() {
            s.seconds = VecDeque::new();
            return;
        }
        // Under the series' lock (then the queue's), so the ticket is in the series
        // before the entry can come out.
        let ticket = expiry::queue(self.me.clone(), Duration::from_secs(KEEP));
        s.queued = Some((ticket, s.closed));
    }

    /// `expiry`'s run for this point, `KEEP` seconds after its sampler stopped: frees
    /// the seconds it had then, all too old to be shown by now. A point sampled since
    /// keeps its later seconds and, if its sampler stopped again, is queued again (a
    /// running sampler queues it when it stops).
    pub(crate) fn expire_history(&self) {
        let mut series = self.seconds.lock().recover();
        let Some(s) = series.as_mut() else {
            return;
        };
        let Some((_, closed)) = s.queued.take() else {
            return;
        };
        if s.closed == closed {
            // Nothing sampled since: every second kept is older than the history shown.
            s.seconds = VecDeque::new();
            return;
        }
        let now = self.clock.wall_nanos(self.clock.precise_now_ns()) / SECOND_NS;
        s.seconds.retain(|(second, _)| second + KEEP > now);
        if s.seconds.is_empty() {
            s.seconds = VecDeque::new();
        } else if self.sampling.is_idle() {
            let ticket = expiry::queue(self.me.clone(), Duration::from_secs(KEEP));
            s.queued = Some((ticket, s.closed));
        }
    }

    /// Takes the point out of the `expiry` queue (it is being dropped).
    pub(in crate::point) fn leave_expiry(&mut self) {
        let series = self
            .seconds
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((ticket, _)) = series.as_ref().and_then(|s| s.queued) {
            expiry::cancel(ticket);
        }
    }

    /// One sample that closes second `closing` (or none, if it is closed already) in
    /// the current second `current`; returns whether to sample again: two samples in a
    /// row without traffic stop the sampler (`arming`).
    fn sample_closing(&self, closing: u64, current: u64) -> bool {
        let moved = {
            let mut series = self.seconds.lock().recover();
            // Read under the lock: samples record non-decreasing counts.
            let now = self.cumulative();
            series
                .get_or_insert_with(Box::default)
                .record(closing, current, now, |s| self.max_duration_of(s))
        };
        self.sampling.after_run(moved)
    }

    /// The sample a call under a policy takes when it is the first of second `second`
    /// (before it counts itself): it closes the second before exactly.
    pub(in crate::point) fn close_second(&self, second: u64) {
        let mut series = self.seconds.lock().recover();
        // Read under the lock: samples record non-decreasing counts.
        let now = self.cumulative();
        series.get_or_insert_with(Box::default).record(
            second.saturating_sub(1),
            second,
            now,
            |s| self.max_duration_of(s),
        );
    }

    /// Whether any call ever entered the point (with or without a policy): a point
    /// that none did has nothing but zeros to report.
    #[cfg(any(feature = "prometheus", feature = "metrics", feature = "opentelemetry"))]
    pub(crate) fn ever_entered(&self) -> bool {
        self.entered.load(Ordering::Relaxed)
    }

    /// Whether the sampler is scheduled (armed or draining).
    fn sampling_scheduled(&self) -> bool {
        !self.sampling.is_idle()
    }

    /// The traffic of each second of `from..to` (wall-clock seconds since the Unix
    /// epoch), zero where there was none or the point was not sampled.
    pub(crate) fn seconds_between(&self, from: u64, to: u64) -> Vec<Counts> {
        let series = self.seconds.lock().recover();
        let n = to.saturating_sub(from) as usize;
        series
            .as_ref()
            .map_or_else(|| vec![Counts::default(); n], |s| s.each(from, to))
    }

    /// The traffic of each of the last `count` closed wall-clock seconds, oldest
    /// first (at most [`SECONDS_KEPT`](Self::SECONDS_KEPT)), with or without a
    /// policy.
    ///
    /// Every call is counted in exactly one second: the series is sampled from the
    /// point's exact totals once a second while the point is active (on the timing
    /// wheel, about 20 ms after each boundary; a manual clock samples just before it
    /// moves), so a call made between a boundary and its sample counts in the second
    /// before, and the traffic of seconds the sampler missed lands in the next one
    /// sampled.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{Clock, ManualClock, Registry};
    /// use std::time::Duration;
    ///
    /// let manual = ManualClock::new();
    /// let registry: &'static Registry =
    ///     Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    /// let point = registry.point("docs.seconds")?; // no policy at all
    /// for _ in 0..3 {
    ///     point.enter().unwrap().finish(false);
    /// }
    /// manual.advance(Duration::from_secs(1));
    /// point.enter().unwrap().finish(true);
    /// manual.advance(Duration::from_secs(1));
    /// let seconds: Vec<_> = point.seconds(2).iter().map(|s| (s.visits, s.exceptions)).collect();
    /// assert_eq!(seconds, [(3, 0), (1, 1)]);
    /// assert_eq!(point.stats().window.unwrap().visits, 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seconds(&self, count: usize) -> Vec<crate::SecondStats> {
        let now = self.clock.wall_nanos(self.clock.now_ns()) / SECOND_NS;
        let count = count.min(KEEP as usize) as u64;
        let from = now.saturating_sub(count);
        self.seconds_between(from, now)
            .into_iter()
            .zip(from..)
            .map(|(c, s)| {
                let w = c.as_window();
                let (measured, sum_us, max_us) = c.durations();
                let us = |n: u64| (measured > 0).then(|| Duration::from_micros(n));
                crate::SecondStats {
                    measured,
                    mean_duration: us(sum_us / measured.max(1)),
                    max_duration: us(max_us),
                    start: std::time::UNIX_EPOCH + Duration::from_secs(s),
                    visits: w.visits,
                    passes: w.passes,
                    downgrades: w.downgrades,
                    exceptions: w.exceptions,
                    timeouts: w.timeouts,
                    cancelled: w.cancelled,
                    downgrades_by_reason: ReasonCounts(c.reasons),
                }
            })
            .collect()
    }

    /// How many seconds [`seconds`](Self::seconds) can return.
    pub const SECONDS_KEPT: usize = KEEP as usize;

    /// The window of a point without a policy: the last 10 seconds of its series (this
    /// second and the nine before it, as a policy's ring of ten 1 s buckets),
    /// plus what happened since the last sample. `None` if it was never sampled.
    pub(in crate::point) fn sampled_window(&self, wall_ns: u64) -> Option<WindowCounts> {
        let series = self.seconds.lock().recover();
        let s = series.as_ref()?;
        let second = wall_ns / SECOND_NS;
        let mut c = s.sum((second + 1).saturating_sub(CYCLE_SECONDS), second + 1);
        c.add(&self.cumulative().minus(&s.last()));
        Some(c.as_window())
    }

    /// The last closed cycle ([`CYCLE`](crate::CYCLE)), from the series (with the calls not sampled yet if
    /// its last second is still open). `None` if the point was never sampled.
    pub(in crate::point) fn sampled_cycle(&self, wall_ns: u64) -> Option<CycleStats> {
        let series = self.seconds.lock().recover();
        let s = series.as_ref()?;
        let cycle_start = (wall_ns / crate::point::CYCLE_NS).checked_sub(1)? * CYCLE_SECONDS;
        let mut c = s.sum(cycle_start, cycle_start + CYCLE_SECONDS);
        if s.closed < cycle_start + CYCLE_SECONDS - 1 {
            c.add(&self.cumulative().minus(&s.last()));
        }
        let w = c.as_window();
        Some(CycleStats {
            start: std::time::UNIX_EPOCH + Duration::from_secs(cycle_start),
            visits: w.visits,
            passes: w.passes,
            downgrades: w.downgrades,
            exceptions: w.exceptions,
            timeouts: w.timeouts,
            cancelled: w.cancelled,
            peak_concurrency: 0,
            downgrades_by_reason: ReasonCounts(c.reasons),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counts(passes: u64, exceptions: u64) -> Counts {
        let mut c = Counts::default();
        c.tracked[window::PASSES] = passes;
        c.tracked[window::EXCEPTIONS] = exceptions;
        c
    }

    #[test]
    fn seconds_are_differences_of_samples() {
        let mut s = Series::default();
        assert!(s.record(100, 100, counts(3, 1), |_| 0));
        assert!(!s.record(101, 101, counts(3, 1), |_| 0));
        assert!(s.record(102, 102, counts(10, 1), |_| 0));
        // A second sample of second 102, closed already: what came since is in the
        // open second after it, which the sample closing 103 adds to.
        assert!(s.record(102, 102, counts(12, 2), |_| 0));
        assert!(s.record(103, 103, counts(13, 2), |_| 0));
        assert_eq!(
            s.each(100, 104),
            [counts(3, 1), counts(0, 0), counts(7, 0), counts(3, 1)]
        );
        assert_eq!(s.sum(0, u64::MAX), counts(13, 2));
        // Old seconds go.
        s.record(100 + KEEP, 100 + KEEP, counts(14, 2), |_| 0);
        assert_eq!(s.sum(0, 100 + KEEP), counts(10, 1));
    }

    #[test]
    fn samples_close_the_second_before_their_lag() {
        assert_eq!(closing_second(5 * SECOND_NS + 19_000_000, LAG), 4);
        assert_eq!(closing_second(5 * SECOND_NS + 20_000_000, LAG), 5);
        assert_eq!(closing_second(5 * SECOND_NS, Duration::ZERO), 5);
        assert_eq!(next_sample_in(5 * SECOND_NS), LAG);
        assert_eq!(
            next_sample_in(5 * SECOND_NS + 500_000_000),
            Duration::from_millis(520)
        );
    }

    proptest! {
        /// The seconds add up to the growth of the samples (nothing lost, nothing
        /// counted twice) over any sequence of samples, as long as no second is
        /// older than `KEEP`.
        #[test]
        fn seconds_add_up_to_the_totals(
            steps in proptest::collection::vec((0u64..3, 0u64..50, 0u64..5), 1..25)
        ) {
            let mut s = Series::default();
            let (mut second, mut passes, mut exceptions) = (1_000, 0, 0);
            for (dt, dp, de) in steps {
                second += dt;
                passes += dp;
                exceptions += de;
                s.record(second, second, counts(passes, exceptions), |_| 0);
            }
            prop_assume!(second < 1_000 + KEEP);
            prop_assert_eq!(s.sum(0, u64::MAX), counts(passes, exceptions));
        }
    }
}
