//! The 10 s statistics cycle and the hung-call sweep: the background side of the
//! point's counting.

use super::chores;
use super::chores::{Chore, Chores};
use super::compiled::{R_FINE, R_TIMEOUTS};
use super::{hang, Point, CYCLE_NS};
use crate::sync::Ordering;
use crate::{window, CycleStats, ReasonCounts};
use std::time::Duration;

impl Point {
    /// The timeout rule's threshold in nanoseconds, if the policy has one.
    fn timeout_ns(&self) -> Option<u64> {
        let c = self.compiled();
        (c.rules & R_TIMEOUTS != 0).then(|| {
            if c.rules & R_FINE != 0 {
                self.clock.ticks_to_ns(c.timeout)
            } else {
                c.timeout
            }
        })
    }

    /// Arms the hung-call sweep (a timed call found it idle or draining).
    #[cold]
    #[inline(never)]
    pub(super) fn arm_sweep(&'static self) {
        if self.sweeping.arm() {
            if let Some(ns) = self.timeout_ns() {
                let period = hang::period(Duration::from_nanos(ns));
                chores::schedule(self, Chore::SweepHungCalls, period);
            }
        }
    }

    /// Counts the calls that outlived the timeout threshold while still running.
    /// Returns when to sweep again: `None` once the point has no timeout rule, or when
    /// two sweeps in a row found no timed call in flight (see `arming`), so an idle
    /// point costs no background work.
    pub(crate) fn sweep_hung_calls(&self) -> Option<Duration> {
        let Some(threshold_ns) = self.timeout_ns() else {
            self.sweeping.stop();
            return None;
        };
        let pending = match self.hang.get() {
            Some(table) => {
                let (hung, pending) = table.sweep_counting(self.clock.now(), threshold_ns);
                if hung > 0 {
                    self.counters.timeouts.fetch_add(hung, Ordering::Relaxed);
                }
                pending
            }
            None => 0,
        };
        let again = hang::period(Duration::from_nanos(threshold_ns));
        // Two sweeps in a row without a timed call in flight stop it (`arming`).
        self.sweeping.after_run(pending > 0).then_some(again)
    }

    /// Rolls the statistics cycle if `now` is in a later one. Never blocks: if another
    /// thread is rolling, this call leaves it to that thread.
    #[inline]
    pub(super) fn observe_cycle(&self, now: u64) {
        if now >= self.next_cycle_at.load(Ordering::Relaxed) {
            self.roll_cycle(self.clock.wall_nanos(now) / CYCLE_NS);
        }
    }

    #[cold]
    pub(super) fn roll_cycle(&self, id: u64) {
        let Ok(mut guard) = self.cycle.try_lock() else {
            return;
        };
        // Made by the first cycle a policy point rolls: idle points do not hold it.
        let st = guard.get_or_insert_with(Box::default);
        let prev = self.cycle_id.load(Ordering::Relaxed);
        if id <= prev {
            // Another thread rolled it between our check and the lock.
            return;
        }
        let now_counts = self.counters.tracked(&self.flow);
        let now_reasons = self.counters.reasons().0;
        let inflight = self.flow.inflight();
        let peak = self.cycle_peak.swap(inflight, Ordering::Relaxed);
        st.last = Some(if prev != 0 && prev + 1 == id {
            let diff = |i: usize| now_counts[i].saturating_sub(st.start[i]);
            let passes = diff(window::PASSES);
            let downgrades = diff(window::DOWNGRADES);
            CycleStats {
                start: self.clock_cycle_start(prev),
                visits: passes + downgrades,
                passes,
                downgrades,
                exceptions: diff(window::EXCEPTIONS),
                timeouts: diff(window::TIMEOUTS),
                peak_concurrency: peak,
                downgrades_by_reason: ReasonCounts(std::array::from_fn(|i| {
                    now_reasons[i].saturating_sub(st.start_reasons[i])
                })),
            }
        } else {
            // The previous cycle saw no call at all (or the point is new).
            CycleStats {
                start: self.clock_cycle_start(id - 1),
                peak_concurrency: inflight,
                ..CycleStats::default()
            }
        });
        st.start = now_counts;
        st.start_reasons = now_reasons;
        self.cycle_id.store(id, Ordering::Relaxed);
        self.next_cycle_at.store(
            self.clock
                .timeline_at_wall((id + 1).saturating_mul(CYCLE_NS)),
            Ordering::Relaxed,
        );
    }

    pub(super) fn clock_cycle_start(&self, id: u64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_nanos(id.saturating_mul(CYCLE_NS))
    }
}

impl Chores for Point {
    fn run(&'static self, chore: Chore) -> Option<Duration> {
        match chore {
            Chore::SweepHungCalls => self.sweep_hung_calls(),
            Chore::SampleSeconds => self.sample_seconds(),
            #[cfg(feature = "redis")]
            Chore::StopRetiredLeases => self.stop_retired_leases(),
        }
    }
}
