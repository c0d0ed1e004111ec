//! The 10 s statistics cycle and the hung-call sweep: the background side of the
//! point's counting.

use crate::point::form::compiled::{R_FINE, R_TIMEOUTS};
use crate::point::observe::chores;
use crate::point::observe::chores::{Chore, Chores};
use crate::point::{state::hang, Point, CYCLE_NS};
use crate::sync::Ordering;

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
    pub(in crate::point) fn arm_sweep(&self) {
        if self.sweeping.arm() {
            if let Some(ns) = self.timeout_ns() {
                let period = hang::period(Duration::from_nanos(ns));
                chores::schedule(self.owner(), self, Chore::SweepHungCalls, period);
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
                let (hung, pending) = table.sweep_counting(self.clock.now_ns(), threshold_ns);
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

    /// At the first call of each second: closes the second before in the per-second
    /// series and, at a cycle's boundary, rolls the 10 s cycle, both from one reading
    /// of the counters. Never blocks: one thread wins each boundary.
    #[inline]
    pub(in crate::point) fn observe_cycle(&self, now: u64) {
        let next = self.next_second_at.load(Ordering::Relaxed);
        if now >= next {
            self.roll_second(now, next);
        }
    }

    #[cold]
    fn roll_second(&self, now: u64, seen: u64) {
        let wall = self.clock.wall_nanos(now);
        let second = wall / 1_000_000_000;
        let next = self
            .clock
            .timeline_at_wall((second + 1).saturating_mul(1_000_000_000));
        if self
            .next_second_at
            .compare_exchange(seen, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            // Another thread took this boundary.
            return;
        }
        self.close_second(second);
        self.roll_cycle(wall / CYCLE_NS);
    }

    /// At a cycle's boundary: keeps the cycle's peak concurrency (its counts are the
    /// sums of its seconds).
    #[cold]
    fn roll_cycle(&self, id: u64) {
        let Ok(mut guard) = self.cycle.try_lock() else {
            return;
        };
        let prev = self.cycle_id.load(Ordering::Relaxed);
        if id <= prev {
            // Still the same cycle, or another thread rolled it.
            return;
        }
        let inflight = self.flow.inflight();
        let peak = self.cycle_peak.swap(inflight, Ordering::Relaxed);
        // Made by the first cycle a policy point rolls: idle points do not hold it.
        let st = guard.get_or_insert_with(Box::default);
        st.last_peak = if prev != 0 && prev + 1 == id {
            (id - 1, peak)
        } else {
            // The previous cycle saw no call at all (or the point is new).
            (id - 1, inflight)
        };
        self.cycle_id.store(id, Ordering::Relaxed);
    }
}

impl Chores for Point {
    fn run(&self, chore: Chore) -> Option<Duration> {
        match chore {
            Chore::SweepHungCalls => self.sweep_hung_calls(),
            Chore::SampleSeconds => self.sample_seconds(),
            // The chore of `expiry`'s queue, never a point's.
            Chore::ExpireHistories => None,
            #[cfg(feature = "redis")]
            Chore::StopRetiredLeases => self.stop_retired_leases(),
            // Chores of a `keys` section's lease map, never a point's.
            #[cfg(feature = "redis")]
            Chore::StartKeyLeases | Chore::DropColdKeyLeases => None,
        }
    }
}
