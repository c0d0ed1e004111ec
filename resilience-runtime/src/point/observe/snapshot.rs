//! Snapshots of a point: its statistics and the memory it holds.

use crate::clock::Instant;
use crate::point::form::compiled::{Compiled, R_DELAY, R_FLOW};
use crate::point::form::slots::{
    classic_state, AdaptiveSlot, BreakerImpl, BreakerSlot, ClusterSlot,
};
use crate::point::state::hang::HangTable;
use crate::point::{state::delay, state::tally, Point};
use crate::sync::Ordering;
use crate::sync::Recover;
use crate::window::Ring;
use crate::{window, BreakerState, BreakerStats, PointStats, Totals, WindowCounts};

impl Point {
    /// A snapshot of the point's statistics.
    ///
    /// Totals are exact. With a policy, the window and the last cycle are exact too.
    /// Without one, they come from the point's per-second series (sampled once a
    /// second from the totals, see the guide's "Statistics and listeners"): the window is the last
    /// 10 seconds, and both are `None` until the point's first sample.
    pub fn stats(&self) -> PointStats {
        self.snapshot(true, tally::total(self.id))
    }

    /// [`stats`](Self::stats) without the window and the last cycle (`None`), which
    /// exporters of totals do not need and which cost most of a snapshot, with the
    /// per-thread counts read from `tally`.
    #[cfg(any(feature = "prometheus", feature = "metrics", feature = "opentelemetry"))]
    pub(crate) fn stats_without_windows(&self, tally: &tally::Reader) -> PointStats {
        self.snapshot(false, tally.total(self.id))
    }

    fn snapshot(&self, windows: bool, untracked: u64) -> PointStats {
        let c = self.compiled();
        let now = self.clock.now_ns();
        let tracked = self.counters.tracked(&self.flow);
        // Passes under a policy are in the flow word, the others in per-thread cells;
        // every visit is a pass or a downgrade.
        let passes = tracked[window::PASSES] + untracked;
        let visits = passes + tracked[window::DOWNGRADES];
        // A policy on the flow word has an exact window and cycle; the others (none, a
        // breaker alone, a lean policy) are sampled into the per-second series.
        let policed = c.rules & R_FLOW != 0;
        let wall = self.clock.wall_nanos(now);
        let window = if !windows {
            None
        } else if !policed {
            self.sampled_window(wall)
        } else {
            Some({
                let base = c.ring().base(now, || self.counters.tracked(&self.flow));
                let d = |i: usize| tracked[i].saturating_sub(base[i]);
                WindowCounts {
                    visits: d(window::PASSES) + d(window::DOWNGRADES),
                    passes: d(window::PASSES),
                    downgrades: d(window::DOWNGRADES),
                    exceptions: d(window::EXCEPTIONS),
                    timeouts: d(window::TIMEOUTS),
                    cancelled: d(window::CANCELLED),
                }
            })
        };
        let last_cycle = if !windows {
            None
        } else if policed {
            self.observe_cycle(now);
            let peak = self.cycle.lock().recover().as_ref().map(|c| c.last_peak);
            self.sampled_cycle(wall).map(|mut cycle| {
                let id = wall / crate::point::CYCLE_NS - 1;
                cycle.peak_concurrency = peak.filter(|(i, _)| *i == id).map_or(0, |(_, p)| p);
                cycle
            })
        } else {
            self.sampled_cycle(wall)
        };
        PointStats {
            name: self.name,
            totals: Totals {
                visits,
                passes,
                downgrades: tracked[window::DOWNGRADES],
                exceptions: tracked[window::EXCEPTIONS],
                timeouts: tracked[window::TIMEOUTS],
                cancelled: tracked[window::CANCELLED],
                downgrades_by_reason: self.counters.reasons(),
            },
            window,
            last_cycle,
            concurrency: self.flow.inflight(),
            peak_concurrency: self.peak.load(Ordering::Relaxed),
            in_delay: c.rules & R_DELAY != 0 && delay::in_delay(now, self.delay.until()),
            dropped_events: self.counters.dropped_events.load(Ordering::Relaxed),
            shadow_downgrades_by_reason: self.counters.shadow_reasons(),
            breaker: self.breaker_stats(c, now),
            retry: self.retry_stats(),
            queue: self.queue_stats(),
            hot_keys: if c.keys.is_some() {
                self.hot_keys(crate::keys::STATS_HOT_KEYS)
            } else {
                Vec::new()
            },
            key_table: c.keys.and_then(|_| self.key_stats()),
        }
    }

    pub(in crate::point) fn breaker_stats(&self, c: &Compiled, now: u64) -> Option<BreakerStats> {
        let slot = c.breaker?.0;
        let transitions = self.counters.breaker_transitions.load(Ordering::Relaxed);
        let since = self
            .clock
            .system_time(Instant::from_nanos(slot.changed_at.load(Ordering::Relaxed)));
        Some(match &slot.imp {
            BreakerImpl::Sre(b) => {
                let h = b.history(Instant::from_nanos(now));
                BreakerStats {
                    kind: "sre",
                    state: if b.is_dropping() {
                        BreakerState::Open
                    } else {
                        BreakerState::Closed
                    },
                    window_successes: h.accepts,
                    window_failures: h.failures,
                    window_drops: Some(h.drops),
                    transitions,
                    since,
                }
            }
            BreakerImpl::Classic(b) => {
                let st = b.stats(Instant::from_nanos(now));
                BreakerStats {
                    kind: "classic",
                    state: classic_state(st.state),
                    window_successes: st.calls.saturating_sub(st.failures),
                    window_failures: st.failures,
                    window_drops: None,
                    transitions,
                    since,
                }
            }
        })
    }

    /// Approximate memory held by this point, in bytes: the point itself, its window
    /// rings, breakers, adaptive limiters, cluster-limit slots and hung-call table
    /// (not the heap of a limiter's own state, nor a cluster lease's thread).
    pub fn memory_bytes(&self) -> usize {
        let configured = {
            let settings = self.settings();
            let rings = &settings.rings;
            let held = if settings.0.is_some() {
                std::mem::size_of::<crate::point::Settings>()
                    + settings.forms.heap_bytes()
                    + settings
                        .breaker
                        .as_ref()
                        .map_or(0, |_| std::mem::size_of::<crate::BreakerPolicy>())
            } else {
                0
            };
            rings
                .iter()
                .map(|r| std::mem::size_of::<Ring>() + r.heap_bytes())
                .sum::<usize>()
                + rings.capacity() * std::mem::size_of::<usize>()
                + settings
                    .breakers
                    .iter()
                    .map(|b| {
                        std::mem::size_of::<BreakerSlot>()
                            + match &b.imp {
                                BreakerImpl::Sre(s) => s.heap_bytes(),
                                BreakerImpl::Classic(_) => 0,
                            }
                    })
                    .sum::<usize>()
                + settings.adaptives.len() * std::mem::size_of::<AdaptiveSlot>()
                + held
        };
        // The point lives in an `Arc`: its two counts come before it, padded to its
        // alignment.
        let counts =
            (2 * std::mem::size_of::<usize>()).next_multiple_of(std::mem::align_of::<Point>());
        counts
            + std::mem::size_of::<Point>()
            + configured
            + self.cluster_slots() * std::mem::size_of::<ClusterSlot>()
            + self.hang.get().map_or(0, HangTable::heap_bytes)
            + self.durations.get().map_or(0, |d| d.heap_bytes())
            + self.name.len()
            + self.lazy_bytes()
    }

    /// What the parts made on first use hold (the settings are counted above): the
    /// cycle state, the per-reason counters and the per-second series.
    fn lazy_bytes(&self) -> usize {
        let held = |present: bool, size: usize| if present { size } else { 0 };
        held(
            self.cycle.lock().recover().is_some(),
            std::mem::size_of::<crate::point::CycleState>(),
        ) + held(
            self.counters.by_reason.get().is_some(),
            std::mem::size_of::<crate::point::ReasonCells>(),
        ) + self
            .seconds
            .lock()
            .recover()
            .as_ref()
            .map_or(0, |s| s.heap_bytes())
    }

    /// Cluster-limit slots this point has had.
    pub(in crate::point) fn cluster_slots(&self) -> usize {
        #[cfg(feature = "redis")]
        {
            let settings = self.settings();
            let c = &settings.clusters;
            usize::from(c.current.is_some()) + c.replaced.len()
        }
        #[cfg(not(feature = "redis"))]
        0
    }
}
