//! Installing configuration (cold): a policy or breaker setting is turned into slots
//! and a compiled form, and published for the next call. Nothing here resets the
//! counters, the window, the delay or the calls in flight.

use crate::adaptive::{AdaptiveLimiter, GradientLimiter, SystemCpu};
use crate::breaker::{ClassicBreaker, SreBreaker};
use crate::clock::nanos;
use crate::limit::{Gcra, GcraCell};
use crate::point::form::compiled::{Compiled, Parts};
#[cfg(feature = "redis")]
use crate::point::form::slots::Clusters;
use crate::point::form::slots::{
    AdaptiveImpl, AdaptiveSlot, BreakerImpl, BreakerSlot, BucketSlot, Buckets, ClusterSlot,
};
#[cfg(feature = "redis")]
use crate::point::observe::chores::{self, Chore};
use crate::point::{Point, Settings};
use crate::sync::Arc;
use crate::sync::{AtomicU64, Ordering};
use crate::window::Ring;
#[cfg(feature = "redis")]
use crate::Reason;
use crate::{AdaptiveLimit, BreakerPolicy, Policy, WindowConfig};
#[cfg(feature = "redis")]
use std::time::Duration;

impl Point {
    pub(crate) fn apply(&self, policy: Option<Policy>) {
        let mut settings = self.settings();
        if policy.is_some() && settings.policy.is_none() {
            // Calls admitted without a policy are not tracked in flight: start the
            // cycle's peak concurrency from now.
            self.observe_cycle(self.clock.now_ns());
        }
        settings.policy = policy;
        self.recompile(&mut settings);
        drop(settings);
        // Waiting calls ask the new policy (a raised limit, a queue gone).
        self.wake_all_waiters();
    }

    /// Sets (or, with `None`, removes) the breaker. A new breaker starts empty.
    pub(crate) fn apply_breaker(&self, breaker: Option<BreakerPolicy>) {
        let mut settings = self.settings();
        self.install_breaker(&mut settings, breaker);
    }

    pub(in crate::point) fn install_breaker(
        &self,
        settings: &mut Settings,
        breaker: Option<BreakerPolicy>,
    ) {
        let cancel_fails = match breaker {
            Some(BreakerPolicy::Sre { config, .. }) => config.cancellations_are_failures,
            Some(BreakerPolicy::Classic(config)) => config.cancellations_are_failures,
            _ => false,
        };
        let slot = match breaker {
            Some(BreakerPolicy::Sre { config, slow_call }) => {
                SreBreaker::new(config, self.clock.now())
                    .ok()
                    .map(|b| (BreakerImpl::Sre(b), slow_call))
            }
            Some(BreakerPolicy::Classic(config)) => {
                let slow = config
                    .slow_call_rate
                    .is_some()
                    .then_some(config.slow_call_duration);
                ClassicBreaker::new(config, self.clock.now())
                    .ok()
                    .map(|b| (BreakerImpl::Classic(b), slow))
            }
            Some(BreakerPolicy::Disabled) | None => None,
        };
        if let Some((imp, slow)) = slot {
            let slot: &'static BreakerSlot = Box::leak(Box::new(BreakerSlot {
                imp,
                slow_ns: slow.map(nanos),
                slow_ticks: slow.map(|d| self.clock.ns_to_ticks(nanos(d))),
                changed_at: AtomicU64::new(self.clock.now_ns()),
                cancel_fails,
            }));
            settings.breakers.push(slot);
        }
        self.breaker_set.store(breaker.is_some(), Ordering::Release);
        settings.breaker = breaker.map(Box::new);
        self.recompile(settings);
    }

    #[cold]
    pub(in crate::point) fn ensure_breaker(&self) {
        let mut settings = self.settings();
        if settings.breaker.is_none() {
            self.install_breaker(&mut settings, Some(BreakerPolicy::default()));
        }
    }

    pub(in crate::point) fn recompile(&self, settings: &mut Settings) {
        let Settings {
            policy,
            breaker,
            buckets,
            breakers,
            adaptives,
            #[cfg(feature = "redis")]
            clusters,
            rings,
            retry_forms: _,
            keys,
            forms,
            forced,
        } = settings;
        let policy = policy.as_ref();
        let ring = policy.map(|p| self.ring_for(rings, p.window));
        let breaker = match breaker.as_deref() {
            Some(BreakerPolicy::Sre { .. } | BreakerPolicy::Classic(_)) => breakers.last(),
            _ => None,
        };
        let adaptive = match policy.and_then(Policy::adaptive) {
            // An unchanged configuration keeps its limiter and what it learned.
            Some(a) if adaptives.last().is_some_and(|s| s.config == a) => adaptives.last(),
            Some(a) => {
                let clock = self.clock.clone();
                let imp = match a {
                    AdaptiveLimit::Gradient(c) => {
                        GradientLimiter::with_clock(c, clock).map(AdaptiveImpl::Gradient)
                    }
                    AdaptiveLimit::Shedder(c) => {
                        AdaptiveLimiter::with_parts(c, Arc::new(SystemCpu), clock)
                            .map(AdaptiveImpl::Shedder)
                    }
                };
                // `build()` validated the configuration, so this cannot fail.
                match imp {
                    Ok(imp) => {
                        adaptives.push(Box::leak(Box::new(AdaptiveSlot { config: a, imp })));
                        adaptives.last()
                    }
                    Err(_) => None,
                }
            }
            None => None,
        };
        #[cfg(feature = "redis")]
        let cluster = self.cluster_for(clusters, policy);
        #[cfg(not(feature = "redis"))]
        let cluster = self.cluster_for(policy);
        // One unit for every duration of the point: ticks if any threshold is too
        // short for the timeline's resolution.
        let breaker = breaker.copied();
        let fine = Compiled::needs_ticks(policy, breaker);
        let parts = Parts {
            ring,
            bucket: self.bucket_for(buckets, policy, fine),
            breaker,
            adaptive: adaptive.copied(),
            cluster,
            keys: policy
                .and_then(Policy::keys)
                .map(|k| keys.form_for(k, &self.clock, &self.owner())),
        };
        // A form without rules or breaker is none: such a point takes the fast path.
        let mut c = Compiled::new(policy, parts, fine, &self.clock);
        if let Some(reason) = *forced {
            c = c.forcing(reason);
        }
        self.cfg.store((c.rules != 0).then_some(c), forms);
    }

    /// The bucket slot for a policy's token bucket in the unit `fine` says. A setting
    /// the point has had before gets its slot back; when the bucket in use changes, the
    /// new one takes over the deficit of the last (tokens taken and not yet refilled,
    /// at most its capacity), so a raised capacity is there at once, a lowered one
    /// clamps and a changed rate applies from the next call. A call that read the
    /// replaced policy just before the change may still take a token from the old
    /// bucket: at most one per thread calling at that instant.
    pub(in crate::point) fn bucket_for(
        &self,
        buckets: &mut Buckets,
        policy: Option<&Policy>,
        fine: bool,
    ) -> Option<&'static BucketSlot> {
        let tb = policy?.token_bucket?;
        // The tick counter has no exact ratio to nanoseconds: its interval is rounded
        // up. A manual clock's ticks are nanoseconds.
        let gcra = if fine && !self.clock.is_manual() {
            let ns = (1e9 / tb.rate).ceil();
            let ticks = if tb.rate > 0.0 && ns < u64::MAX as f64 {
                self.clock.ns_to_ticks(ns as u64).saturating_add(1) as f64
            } else {
                0.0
            };
            Gcra::with_interval(ticks, tb.capacity)
        } else {
            Gcra::per_second(tb.rate, tb.capacity)
        };
        // Read from the OS, not the cache: a bucket started (or carried over) at a
        // cached reading up to a millisecond old would be credited that much refill
        // before it existed. Later calls read the cache, which is never ahead of it.
        let time = |fine: bool| {
            if fine {
                self.clock.ticks()
            } else {
                self.clock.precise_now_ns()
            }
        };
        // Validated with the policy: a rate above 0 and parameters in range.
        let warm = policy
            .and_then(|p| p.warm_up)
            .and_then(|w| crate::limit::warmup::WarmUp::new(tb.rate, w.period, w.cold_factor).ok());
        let slot = match buckets
            .kept
            .iter()
            .find(|b| b.gcra == gcra && b.fine == fine && b.warm.as_ref().map(|w| w.0) == warm)
        {
            Some(b) => *b,
            None => {
                let born = gcra.scaled(time(fine));
                let slot: &'static BucketSlot = Box::leak(Box::new(BucketSlot {
                    gcra,
                    fine,
                    cell: GcraCell::new(&gcra, born),
                    born: AtomicU64::new(born),
                    warm: warm.map(|w| {
                        let cell =
                            crate::limit::warmup::WarmUpCell::new(&w, self.clock.precise_now_ns());
                        (w, cell)
                    }),
                }));
                buckets.kept.push(slot);
                slot
            }
        };
        if let Some(last) = buckets.last.filter(|l| !std::ptr::eq(*l, slot)) {
            let then = last.gcra.scaled(time(last.fine));
            let now = slot.gcra.scaled(time(slot.fine));
            // A reused bucket takes over from now: calls of an older cached reading
            // are taken to come now.
            slot.born.store(now, Ordering::Relaxed);
            slot.cell
                .set(slot.gcra.carry(&last.gcra, last.cell.tat(), then, now));
        }
        buckets.last = Some(slot);
        Some(slot)
    }

    /// The cluster slot for a policy, building a lease when the setting changed.
    #[cfg(feature = "redis")]
    pub(in crate::point) fn cluster_for(
        &self,
        clusters: &mut Clusters,
        policy: Option<&Policy>,
    ) -> Option<&'static ClusterSlot> {
        let now = self.clock.now_ns();
        let wanted = policy.and_then(|p| p.cluster().cloned());
        let same = match (&wanted, clusters.current) {
            (Some(w), Some(c)) => *w == c.config,
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let Some(old) = clusters.current.take() {
                clusters.replaced.push((now, old));
            }
            clusters.current = wanted.and_then(|w| self.build_cluster(w));
        }
        // Leases are stopped by the chore, on its thread: stopping one waits for a
        // Redis call, too long to hold the point's locks for.
        match clusters.due(now) {
            (due, _) if !due.is_empty() => {
                chores::schedule(self.owner(), self, Chore::StopRetiredLeases, Duration::ZERO)
            }
            (_, Some(next)) => chores::schedule(self.owner(), self, Chore::StopRetiredLeases, next),
            _ => {}
        }
        clusters.current
    }

    /// Stops the leases of cluster limits replaced more than [`CLUSTER_GRACE`] ago
    /// (a chore, see `chores`), holding none of the point's locks while it waits for
    /// them; returns when to look again, if some are still young.
    #[cfg(feature = "redis")]
    pub(crate) fn stop_retired_leases(&self) -> Option<Duration> {
        let settings = self.settings();
        let (due, next) = settings.clusters.due(self.clock.now_ns());
        drop(settings);
        for slot in due {
            slot.lease.stop();
        }
        next
    }

    /// Without the `redis` feature, policies have no cluster limit.
    #[cfg(not(feature = "redis"))]
    pub(in crate::point) fn cluster_for(
        &self,
        _policy: Option<&Policy>,
    ) -> Option<&'static ClusterSlot> {
        None
    }

    #[cfg(feature = "redis")]
    pub(in crate::point) fn build_cluster(
        &self,
        config: crate::policy::ClusterLimit,
    ) -> Option<&'static ClusterSlot> {
        use crate::policy::ClusterLimit;
        let reason = match &config {
            ClusterLimit::Visits { .. } => Reason::ClusterVisits,
            ClusterLimit::TokenBucket { .. } => Reason::ClusterTokenBucket,
        };
        // `Policy::build` validated every field, so only a failed thread spawn can end
        // here; the point then runs without its cluster limit, and says so.
        match crate::point::form::shared::make_shared(&config)? {
            // Leaked: see `Clusters`.
            Ok(lease) => Some(Box::leak(Box::new(ClusterSlot {
                config,
                lease,
                reason,
            }))),
            Err(_e) => {
                #[cfg(feature = "tracing")]
                tracing::warn!(point = self.name, error = %_e, "resilience: cluster limit not started");
                None
            }
        }
    }

    pub(in crate::point) fn ring_for(
        &self,
        rings: &mut Vec<&'static Ring>,
        w: WindowConfig,
    ) -> &'static Ring {
        let width = nanos(w.bucket_width);
        let buckets = w.buckets;
        if let Some(r) = rings
            .last()
            .filter(|r| r.width_ns == width && r.buckets() == buckets)
        {
            return r;
        }
        let now = self.clock.now_ns();
        let ring: &'static Ring = match rings
            .iter()
            .position(|r| r.width_ns == width && r.buckets() == buckets)
        {
            Some(i) => {
                // A new geometry restarts the window; totals are kept.
                let r = rings.remove(i);
                r.reset(now, self.counters.tracked(&self.flow));
                r
            }
            None => Box::leak(Box::new(Ring::new(
                w.buckets,
                width,
                now,
                self.counters.tracked(&self.flow),
            ))),
        };
        // The last ring is the one in use.
        rings.push(ring);
        ring
    }
}
