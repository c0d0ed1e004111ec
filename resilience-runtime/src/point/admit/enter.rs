//! Admission (hot): every call asks here whether it may run.
//!
//! # The guarantees kept here
//!
//! - visits: passes in the window never exceed `max_visits` (`0` admits none), under
//!   any number of threads: the pass is counted by the same compare-and-swap that
//!   checks the limit ([`Flow::admit`]).
//! - concurrency: at most `max_concurrency` calls in flight, probes and calls spared by
//!   `downgrade_percentage` included: every admitted call takes its slot through the
//!   same compare-and-swap.
//! - token bucket: at most `capacity + rate * t` admissions over any interval `t`
//!   (see [`crate::limit`]).
//! - exceptions, exception rate, timeouts: no call is admitted once the window holds the
//!   threshold; calls already past the check may still finish and add their own.
//! - delay: one probe at a time, none before its time (see `delay`).
//! - queue: a call waits only under a policy with a queue, for a slot of the
//!   concurrency rule or for room under the adaptive limit, and is admitted by the
//!   same checks as any call once it looks again (see `queue`).

use crate::adaptive::LatencyPermit;
use crate::breaker::DroppingTransition;
use crate::clock::Instant;
use crate::keys::Refusal;
use crate::point::admit::attempt::{Entry, KEY_HELD, NO_WAIT, TOKEN_HELD, WAITER};
use crate::point::admit::health::{self, Health};
use crate::point::admit::meta::NO_HANG;
use crate::point::admit::permit::{fill, place, Outcome, Permit};
use crate::point::admit::taken::Taken;
use crate::point::form::compiled::{
    Compiled, Leaked, ACTIVE, COUNTED, MAY_ALL, MAY_BASIC, MAY_PLAIN, NOT_PLAIN, R_ADAPTIVE,
    R_BREAKER, R_BREAKER_TIMED, R_CONCURRENCY, R_DELAY, R_EXCEPTIONS, R_FINE, R_FLOW, R_QUEUE,
    R_RATE, R_SHADOW, R_TIMEOUTS, R_VISITS, R_WARM,
};
use crate::point::form::keys::KeyArg;
use crate::point::form::slots::{
    AdaptiveCall, AdaptiveImpl, BreakerCall, BreakerImpl, BreakerSlot,
};
use crate::point::state::flow::{Limits, Refused, NO_LIMIT};
use crate::point::state::hang::HangTable;
use crate::point::{state::delay, state::tally, Point};
use crate::sync::{AtomicU64, Ordering};
use crate::{window, BreakerChange, BreakerState, Downgraded, Reason};

impl Point {
    /// The entry of `#[breaker]`: installs the default breaker unless one was set
    /// (even `Disabled`), then enters like any call (see [`enter_in`](Self::enter_in)).
    #[inline]
    pub(crate) fn enter_breaker_in<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
    ) -> Result<(), Downgraded> {
        let c = self.compiled();
        if c.rules & (ACTIVE | R_BREAKER) == R_BREAKER {
            // The common case: a breaker and no policy.
            return self.enter_breaker_only(c, slot);
        }
        // A live breaker shows in the rule bits; only without one can the setting be
        // missing (or `Disabled`).
        if c.rules & R_BREAKER == 0 && !self.breaker_set.load(Ordering::Acquire) {
            self.ensure_breaker();
        }
        self.enter_in(slot)
    }

    /// The async entry of `#[breaker]` (see [`enter_breaker_in`](Self::enter_breaker_in)
    /// and [`enter_async_in`](Self::enter_async_in)).
    #[inline]
    pub(crate) fn enter_breaker_async_in<'p, 'a>(
        &'p self,
        slot: &'a mut Option<Permit<'p>>,
        done: Option<&'a mut bool>,
    ) -> crate::point::admit::queue::Admission<'a, 'p> {
        let c = self.compiled();
        if c.rules & (ACTIVE | R_BREAKER) == R_BREAKER {
            return crate::point::admit::queue::Admission::Ready(self.enter_breaker_only(c, slot));
        }
        if c.rules & R_BREAKER == 0 && !self.breaker_set.load(Ordering::Acquire) {
            self.ensure_breaker();
        }
        self.enter_async_in(slot, done)
    }

    /// [`enter_breaker_in`](Self::enter_breaker_in) of a call with a key.
    #[inline]
    pub(crate) fn enter_breaker_keyed_in<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        key: &KeyArg<'_>,
    ) -> Result<(), Downgraded> {
        let c = self.compiled();
        if c.rules & R_BREAKER == 0 && !self.breaker_set.load(Ordering::Acquire) {
            self.ensure_breaker();
        }
        self.enter_keyed_in(slot, key)
    }

    /// The async entry of `#[breaker]` with a key.
    #[inline]
    pub(crate) fn enter_breaker_async_keyed_in<'p, 'a>(
        &'p self,
        slot: &'a mut Option<Permit<'p>>,
        done: Option<&'a mut bool>,
        key: KeyArg<'a>,
    ) -> crate::point::admit::queue::Admission<'a, 'p> {
        let c = self.compiled();
        if c.rules & R_BREAKER == 0 && !self.breaker_set.load(Ordering::Acquire) {
            self.ensure_breaker();
        }
        self.enter_async_keyed_in(slot, done, Some(key))
    }

    /// Asks whether a call may run.
    ///
    /// On `Ok`, run the call and report its outcome through the [`Permit`] (dropping it
    /// counts as a cancelled call: no exception, slot released). On `Err`, do not run it.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let point = registry().point("docs.enter").unwrap();
    /// registry().set_policy("docs.enter", Policy::builder().max_concurrency(1).build().unwrap()).unwrap();
    /// let first = point.enter().expect("one slot is free");
    /// assert!(point.enter().is_err(), "the only slot is taken");
    /// first.finish(false);
    /// assert!(point.enter().is_ok());
    /// ```
    #[inline]
    pub fn enter<'p>(&'p self) -> Result<Permit<'p>, Downgraded> {
        let mut slot = None;
        self.enter_in(&mut slot)?;
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// [`enter`](Self::enter) that never waits: under a policy with a queue or a token
    /// bucket that waits, a call that would wait is refused at once
    /// ([`Reason::Concurrency`], [`Reason::TokenBucket`]), as without them.
    #[inline]
    pub fn try_enter<'p>(&'p self) -> Result<Permit<'p>, Downgraded> {
        let mut slot = None;
        self.try_enter_keyed_in(&mut slot, None)?;
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// [`try_enter`](Self::try_enter) of a call with a key, or without.
    #[inline(always)]
    pub(crate) fn try_enter_keyed_in<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        key: Option<&KeyArg<'_>>,
    ) -> Result<(), Downgraded> {
        if !self.sampler_armed() {
            self.arm_sampler();
        }
        match self.enter_once(slot, NO_WAIT, key) {
            Entry::Admitted => Ok(()),
            Entry::Refused(reason) => Err(reason.downgraded(self.name)),
            // A call that may not wait is never told to.
            wait => unreachable!("{wait:?} for a call that may not wait"),
        }
    }

    /// [`enter`](Self::enter) for async code: never blocks the thread. Under a policy
    /// with a queue ([`PolicyBuilder::queue`](crate::PolicyBuilder::queue)) and every
    /// slot taken, the call waits in the returned future (dropping it leaves the
    /// queue); otherwise it is ready at once. Waiting on the system clock needs the
    /// `tokio` feature (for the deadline); without it the call is refused for
    /// concurrency instead of waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder().max_concurrency(1).queue(4, Duration::from_secs(1)).build()?;
    /// registry().set_policy("docs.enter_async", policy)?;
    /// let point = registry().point("docs.enter_async")?;
    /// let permit = futures_executor::block_on(point.enter_async())?;
    /// permit.finish(false);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn enter_async<'p>(&'p self) -> Result<Permit<'p>, Downgraded> {
        let mut slot = None;
        match self.enter_async_in(&mut slot, None) {
            crate::point::admit::queue::Admission::Ready(r) => r?,
            crate::point::admit::queue::Admission::Wait(w) => w.await?,
        }
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// [`enter`](Self::enter) for the generated code: an admitted call's permit is
    /// written into `slot`, where it stays until [`Permit::finish_in`]. A permit moved
    /// around by value is copied through the stack in wide loads that stall on the
    /// narrower stores that built it; written in place, it is not moved at all. A call
    /// on a point without policy or breaker, which has nothing to complete but an
    /// exception, is admitted with the slot left empty: nothing is written at all.
    ///
    /// With a queue (see [`PolicyBuilder::queue`](crate::PolicyBuilder::queue)) and
    /// every slot taken, the thread waits here (parked) for a slot.
    #[inline(always)]
    pub(crate) fn enter_in<'p>(&'p self, slot: &mut Option<Permit<'p>>) -> Result<(), Downgraded> {
        self.enter_with(slot, None)
    }

    /// [`enter_in`](Self::enter_in) for a call of `key` (see
    /// [`enter_key`](Self::enter_key)): the permit in `slot` holds the key's slot.
    #[inline]
    pub(crate) fn enter_keyed_in<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        key: &KeyArg<'_>,
    ) -> Result<(), Downgraded> {
        self.enter_with(slot, Some(key))
    }

    /// [`enter_in`](Self::enter_in), with a key or without.
    #[inline(always)]
    fn enter_with<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        key: Option<&KeyArg<'_>>,
    ) -> Result<(), Downgraded> {
        if !self.sampler_armed() {
            self.arm_sampler();
        }
        match self.enter_once(slot, 0, key) {
            Entry::Admitted => Ok(()),
            entry => self.refused_or_waits(slot, entry, key),
        }
    }

    /// After [`enter_once`](Self::enter_once) did not admit the call: its refusal, or
    /// the wait it was told to make on this thread and what follows it.
    #[cold]
    #[inline(never)]
    fn refused_or_waits<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        first: Entry,
        key: Option<&KeyArg<'_>>,
    ) -> Result<(), Downgraded> {
        let mut entry = first;
        let mut flags = 0;
        loop {
            let ns = match entry {
                Entry::Admitted => return Ok(()),
                Entry::Refused(reason) => return Err(reason.downgraded(self.name)),
                Entry::WaitQueue => return self.wait_blocking(slot, flags | TOKEN_HELD, key),
                Entry::WaitToken(ns) => {
                    flags |= TOKEN_HELD;
                    ns
                }
                Entry::WaitKey(ns) => {
                    // The point's token was taken before the key's was reserved.
                    flags |= TOKEN_HELD | KEY_HELD;
                    ns
                }
            };
            // The clock's sleep: a manual clock is advanced instead.
            self.clock.sleep(std::time::Duration::from_nanos(ns));
            entry = self.enter_once(slot, flags, key);
        }
    }

    /// One look at the rules: the call is admitted, refused, or told to wait (for
    /// its token, or in the queue) and come back. A waiter asking again ([`WAITER`])
    /// does not queue behind the others; a call that holds its token already
    /// ([`TOKEN_HELD`]: it took or reserved one before it waited) does not take
    /// another, nor its key's ([`KEY_HELD`]).
    #[inline(always)]
    pub(in crate::point) fn enter_once<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        flags: u8,
        key: Option<&KeyArg<'_>>,
    ) -> Entry {
        let Some(c) = self.cfg.get() else {
            self.pass_untracked();
            if crate::point::state::durations::measuring_durations() {
                // Timed for the per-second durations: a permit with a start.
                self.time_untracked(slot);
            }
            return Entry::Admitted;
        };
        if c.rules & ACTIVE == 0 {
            self.enter_unpoliced(c, slot)
        } else if c.rules & R_FLOW == 0 {
            self.enter_lean(c, slot, flags, key)
        } else if let (Some(key), Some(_)) = (key, c.keys) {
            self.enter_keyed(c, slot, flags, key)
        } else if c.rules & !COUNTED == 0 && !crate::point::state::durations::measuring_durations()
        {
            self.enter_counted(c, slot)
        } else if c.rules & !MAY_BASIC == 0 && flags == 0 {
            // SDS's five rules, a call's first look (the flags are a constant there).
            self.enter_basic(c, slot)
        } else {
            self.enter_governed(c, slot, flags)
        }
    }

    /// [`enter_policy`](Self::enter_policy) of a call's first look (no flags) under a
    /// policy of SDS's five rules alone ([`MAY_BASIC`]): their leanest instance.
    #[inline(never)]
    pub(in crate::point) fn enter_basic<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
    ) -> Entry {
        self.enter_policy::<MAY_BASIC>(c, slot, 0, None)
    }

    /// [`enter_governed`](Self::enter_governed) of a call with a key under a policy
    /// with a `keys` section.
    #[inline(never)]
    pub(in crate::point) fn enter_keyed<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
        flags: u8,
        key: &KeyArg<'_>,
    ) -> Entry {
        if c.rules & NOT_PLAIN == 0 {
            self.enter_policy::<MAY_PLAIN>(c, slot, flags, Some(key))
        } else {
            self.enter_policy::<MAY_ALL>(c, slot, flags, Some(key))
        }
    }

    /// A point with a policy: the plain rules alone take a leaner instance of the same
    /// code, without the words and branches of the others (and a call's first look
    /// under SDS's five rules alone the leanest, [`enter_basic`](Self::enter_basic)).
    #[inline(never)]
    pub(in crate::point) fn enter_governed<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
        flags: u8,
    ) -> Entry {
        if c.rules & NOT_PLAIN == 0 {
            self.enter_policy::<MAY_PLAIN>(c, slot, flags, None)
        } else {
            self.enter_policy::<MAY_ALL>(c, slot, flags, None)
        }
    }

    /// A policy of the visits and concurrency rules alone, its calls untimed: the
    /// commit on the flow word is the whole decision ([`Flow::admit`] checks both
    /// limits on the word it replaces, so they hold exactly, as in
    /// [`enter_policy`](Self::enter_policy), which takes the same decisions with
    /// every other rule's stage in between).
    #[inline(never)]
    pub(in crate::point) fn enter_counted<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
    ) -> Entry {
        let now = self.clock.now_ns();
        let (_, limits) = self.window_limits(c, now, COUNTED);
        match self.flow.admit(limits) {
            Ok(entry) => {
                self.note_peak(entry.inflight);
                fill(slot, Permit::counted(self, entry.slot));
                Entry::Admitted
            }
            Err(refused) => {
                let reason = match refused {
                    Refused::Visits => Reason::Visits,
                    Refused::Concurrency => Reason::Concurrency,
                };
                Entry::of(place(self.refuse(c, reason, 0, false, now), slot))
            }
        }
    }

    /// Enters under the policy `c` (with [`ACTIVE`]), whose rule bits are all in `MAY`
    /// ([`MAY_ALL`], [`MAY_PLAIN`], [`MAY_BASIC`]): one code, whose instance for fewer
    /// rules has the stages of the others compiled out, not tested on each call.
    ///
    /// The rules are asked in SDS order on what the call sees (the visits and the
    /// calls in flight read once, before any token is taken); the call is then
    /// admitted by one compare-and-swap of the flow word that checks the visits and
    /// concurrency limits again on the word it replaces ([`Flow::admit`]), so those two
    /// bounds hold exactly under any number of threads. Only an admitted call counts a
    /// pass and holds a slot: nothing is taken and given back.
    #[inline(always)]
    pub(in crate::point) fn enter_policy<'p, const MAY: u64>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
        flags: u8,
        key: Option<&KeyArg<'_>>,
    ) -> Entry {
        debug_assert!(c.rules & ACTIVE != 0 && c.rules & !MAY == 0);
        // The instance's rules: a bit outside `MAY` is known clear, its stage gone.
        let rules = c.rules & MAY;
        let plain = MAY & NOT_PLAIN == 0;
        // One timeline reading per call; the tick counter only when some threshold is
        // too short for the timeline.
        let now = self.clock.now_ns();
        if let (false, Some(reason)) = (plain, c.forced()) {
            // A forced refusal (`testing`): before any rule, counted as the reason's.
            return Entry::refused(self.downgrade(reason, now, false).reason);
        }
        let fine = rules & R_FINE != 0;
        let stamp = self.stamp(fine, now);
        let (base, limits) = self.window_limits(c, now, MAY);
        // Timed for a rule, or for the per-second durations.
        let timed = rules & (R_TIMEOUTS | R_BREAKER_TIMED) != 0;
        let start = if timed || crate::point::state::durations::measuring_durations() {
            stamp
        } else {
            0
        };
        // What the call takes on its way in, given back by one guard if a later rule
        // refuses it or tells it to wait.
        let mut taken = Taken::new(self, fine);

        // Inside a delay, only the probe may go on to the rules (shadow policies never
        // start a real delay: that state would outlive the dry run).
        if rules & (R_DELAY | R_SHADOW) == R_DELAY {
            let until = self.delay.until();
            if delay::in_delay(now, until) {
                match self.delay.claim(now, until, c.retry_ns) {
                    Some(claimed) => taken.probe = Some((until, claimed)),
                    None => {
                        return Entry::of(place(
                            self.trip(c, Reason::Delay, start, fine, now),
                            slot,
                        ))
                    }
                }
            }
        }

        // Passes in the window so far, and calls in flight.
        let (passes, inflight) = self.flow.peek(limits.from);
        let tripped = 'chain: {
            if passes >= limits.passes {
                break 'chain Some(Reason::Visits);
            }
            // The bucket is there exactly with `R_TOKENS`: its test is the rule's.
            if let (Some(bucket), 0) = (c.bucket, flags & TOKEN_HELD) {
                // A warm-up refusal takes no token, and never waits.
                if rules & R_WARM != 0 && !self.warm_passes(c, now) {
                    break 'chain Some(Reason::TokenBucket);
                }
                if !bucket.take(stamp) {
                    // A bucket that waits reserves the call's token if it is close
                    // enough (one due at once is simply taken).
                    let wait = (c.token_wait != 0 && flags & NO_WAIT == 0)
                        .then(|| self.reserve_token(c, stamp, fine))
                        .flatten();
                    match wait {
                        None => break 'chain Some(Reason::TokenBucket),
                        Some(0) => {}
                        // The call's token is reserved: it comes back after `ns`
                        // (its probe, if it claimed one, goes back meanwhile).
                        Some(ns) => {
                            taken.give_back();
                            return Entry::WaitToken(ns);
                        }
                    }
                }
            }
            // With a queue, a call waits when every slot is taken or (a new call)
            // others already wait. Its token is taken: it waits holding it.
            if rules & R_QUEUE != 0
                && flags & NO_WAIT == 0
                && (inflight >= limits.inflight
                    || (flags & WAITER == 0 && self.flow.waiting() != 0))
            {
                taken.give_back();
                return Entry::WaitQueue;
            }
            if inflight >= limits.inflight {
                break 'chain Some(Reason::Concurrency);
            }
            // A probe asks whether the dependency recovered: it obeys every limit
            // but not the health rules whose trip the delay stands for.
            if rules & (R_TIMEOUTS | R_EXCEPTIONS | R_RATE) != 0 && (plain || taken.probe.is_none())
            {
                let count = |counter: &AtomicU64, i: usize| {
                    counter.load(Ordering::Relaxed).saturating_sub(base[i])
                };
                let h = Health {
                    passes,
                    downgrades: if rules & R_RATE != 0 {
                        count(&self.counters.downgrades, window::DOWNGRADES)
                    } else {
                        0
                    },
                    exceptions: count(&self.counters.exceptions, window::EXCEPTIONS),
                    timeouts: if rules & R_TIMEOUTS != 0 {
                        count(&self.counters.timeouts, window::TIMEOUTS)
                    } else {
                        0
                    },
                };
                if let Some(reason) = health::trips(h, c, rules) {
                    break 'chain Some(reason);
                }
            }
            if let (false, Some(cluster)) = (plain, c.cluster) {
                if !cluster.admits() {
                    break 'chain Some(cluster.reason);
                }
            }
            if rules & R_ADAPTIVE != 0 {
                match self.adaptive_admit(c) {
                    Some(call) => taken.adaptive = Some(call),
                    // With a queue, a call the limit has no room for waits for a call
                    // to end, as for a slot (the limit's room is freed before the
                    // slot, so the release that wakes it comes after).
                    None if rules & R_QUEUE != 0 && flags & NO_WAIT == 0 => {
                        taken.give_back();
                        return Entry::WaitQueue;
                    }
                    None => break 'chain Some(Reason::Overloaded),
                }
            }
            None
        };
        if let Some(reason) = tripped {
            // What was taken goes back first (the probe for the next call).
            taken.give_back();
            return Entry::of(place(self.refuse(c, reason, start, fine, now), slot));
        }
        // The breaker comes last: calls downgraded by a rule never reach it.
        if let (false, Some(b)) = (plain, c.breaker) {
            match self.breaker_admit(c.rules, b, now) {
                Some(call) => taken.breaker = Some(call),
                None => {
                    taken.give_back();
                    return Entry::refused(self.downgrade(Reason::BreakerOpen, now, false).reason);
                }
            }
        }
        // The key's rule, after the point's own (with a `keys` section and a key).
        let mut key_hold = None;
        if let (Some(key), Some(form)) = (key, c.keys) {
            // A dry run never waits, nor a call that may not, nor one that already
            // waited in the queue for its slot (its key refuses it at once).
            let may_wait = flags & (NO_WAIT | WAITER) == 0 && rules & R_SHADOW == 0;
            match form.0.admit(key, now, flags & KEY_HELD != 0, may_wait) {
                Ok(hold) => key_hold = hold,
                Err(refusal) => {
                    // Whatever else the call took goes back.
                    taken.give_back();
                    if let Refusal::Wait(ns) = refusal {
                        // The key's token is reserved: the call comes back after `ns`.
                        return Entry::WaitKey(ns);
                    }
                    // One key's refusal never starts the point's delay.
                    return Entry::of(place(
                        self.trip_keyed(c, Reason::HotKey, Some(key), start, fine, now),
                        slot,
                    ));
                }
            }
        }
        // The commit: the visits and concurrency limits checked again, exactly.
        let admitted = if rules & (R_VISITS | R_CONCURRENCY) != 0 {
            self.flow.admit(limits)
        } else {
            Ok(self.flow.admit_unlimited())
        };
        let entry = match admitted {
            Ok(entry) => entry,
            Err(refused) => {
                // Another call took the last pass or slot since the look above.
                taken.give_back();
                let reason = match refused {
                    Refused::Visits => Reason::Visits,
                    Refused::Concurrency if rules & R_QUEUE != 0 && flags & NO_WAIT == 0 => {
                        return Entry::WaitQueue;
                    }
                    Refused::Concurrency => Reason::Concurrency,
                };
                return Entry::of(place(self.refuse(c, reason, start, fine, now), slot));
            }
        };
        // Nothing below until the caller's slot is filled may unwind: the in-flight
        // slot taken above is only given back by a permit. Written with every field
        // known, in the caller's slot: never moved, and after the locked instructions.
        self.note_peak(entry.inflight);
        let hang = self.hang_slot(c.timeout, now);
        let kept = taken.keep();
        let permit = fill(
            slot,
            Permit::governed(
                self,
                c,
                start,
                fine,
                entry.slot,
                hang,
                kept.adaptive,
                kept.breaker,
            ),
        );
        if let Some((until, _)) = kept.probe {
            permit.attach_probe(c, until);
        }
        if let Some(hold) = key_hold {
            permit.attach_key(c, hold);
        }
        Entry::Admitted
    }

    /// Observes the cycle at `now` and reads the window's base counts, with the
    /// flow word's limits on them (without its rule, a threshold is `NO_LIMIT`).
    /// Only the counts the rules in `may` (a constant) look at are read: the
    /// passes always, the others for the health rules.
    #[inline(always)]
    fn window_limits(
        &self,
        c: &'static Compiled,
        now: u64,
        may: u64,
    ) -> ([u64; window::TRACKED], Limits) {
        self.observe_cycle(now);
        let mut want = [false; window::TRACKED];
        want[window::PASSES] = true;
        want[window::DOWNGRADES] = may & R_RATE != 0;
        want[window::EXCEPTIONS] = may & (R_EXCEPTIONS | R_RATE) != 0;
        want[window::TIMEOUTS] = may & R_TIMEOUTS != 0;
        let base = c
            .ring()
            .base_of(now, || self.counters.tracked(&self.flow), want);
        let limits = Limits {
            from: base[window::PASSES],
            passes: c.max_visits,
            inflight: c.max_concurrency,
        };
        (base, limits)
    }

    /// A rule refused a call (what it took is back already): the delay starts (if
    /// the policy has one), and the call is downgraded or spared.
    #[inline(never)]
    pub(in crate::point) fn refuse<'p>(
        &'p self,
        c: &'static Compiled,
        reason: Reason,
        start: u64,
        fine: bool,
        now: u64,
    ) -> Result<Permit<'p>, Downgraded> {
        if c.rules & (R_DELAY | R_SHADOW) == R_DELAY {
            self.delay
                .start(now, c.delay_ns, c.retry_ns, reason.index() as u8);
        }
        self.trip(c, reason, start, fine, now)
    }

    /// A point without policy but with a breaker, entered through
    /// [`enter_in`](Self::enter_in) (out of line, so that `enter_in` stays small enough
    /// to inline at every call site).
    #[inline(never)]
    pub(in crate::point) fn enter_unpoliced<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
    ) -> Entry {
        Entry::of(self.enter_breaker_only(c, slot))
    }

    /// A point without policy but with a breaker: the permit is written in the
    /// caller's `slot`. The closed path of an untimed SRE breaker stays in this small
    /// function and writes the permit once, in place; everything else is out of line.
    #[inline]
    pub(in crate::point) fn enter_breaker_only<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
    ) -> Result<(), Downgraded> {
        if let (R_BREAKER, Some(b)) = (c.rules & (R_BREAKER | R_BREAKER_TIMED), c.breaker) {
            if let BreakerImpl::Sre(sre) = &b.imp {
                if sre.accepts_surely(self.clock.now_ns()) {
                    self.pass_untracked();
                    fill(slot, Permit::with_breaker(self, c));
                    return Ok(());
                }
            }
        }
        place(self.enter_breaker_slow(c), slot)
    }

    /// The rest of [`enter_breaker_only`](Self::enter_breaker_only).
    #[inline(never)]
    pub(in crate::point) fn enter_breaker_slow<'p>(
        &'p self,
        c: &'static Compiled,
    ) -> Result<Permit<'p>, Downgraded> {
        let mut permit = Permit::untracked(self);
        if let Some(breaker) = c.breaker {
            let now = self.clock.now_ns();
            if c.rules & R_BREAKER_TIMED != 0 {
                let fine = c.rules & R_FINE != 0;
                permit.meta = permit.meta.with_fine(fine);
                permit.start = self.stamp(fine, now);
            }
            match self.breaker_admit(c.rules, breaker, now) {
                Some(call) => permit.attach_breaker(c, call),
                None => {
                    std::mem::forget(permit);
                    return Err(self.downgrade(Reason::BreakerOpen, now, false));
                }
            }
        }
        self.pass_untracked();
        Ok(permit)
    }

    /// Counts an exception of a call without policy or breaker.
    #[inline]
    pub(in crate::point) fn count_exception(&self) {
        self.counters.exceptions.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a cancelled call (see [`Outcome::Cancelled`]).
    #[inline]
    pub(in crate::point) fn count_cancelled(&self) {
        self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// The end of a call without a permit to complete (no policy, or an untimed
    /// breaker-only call): its exception, cancellation or deadline cut is counted.
    #[inline(always)]
    pub(in crate::point) fn count_untracked_end(&self, outcome: Outcome) {
        match outcome {
            Outcome::Ok => {}
            Outcome::Exception => self.count_exception(),
            Outcome::Cancelled => self.count_cancelled(),
            Outcome::TimedOut => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Gives a call without policy or breaker a permit with its start, so that its
    /// duration is measured (`measure_durations`). Cold: out of the way of the calls
    /// that are not timed (timing one costs more than the call's layout).
    #[cold]
    #[inline(never)]
    pub(in crate::point) fn time_untracked<'p>(&'p self, slot: &mut Option<Permit<'p>>) {
        let mut permit = Permit::untracked(self);
        permit.start = self.clock.now_ns().max(1);
        fill(slot, permit);
    }

    /// Counts the pass of a call without a policy: in this thread's own cell, without
    /// a read-modify-write (see `tally`).
    #[inline]
    pub(in crate::point) fn pass_untracked(&self) {
        if !tally::add_to_existing(self.id) {
            self.pass_untracked_slow();
        }
    }

    /// The rest of [`pass_untracked`](Self::pass_untracked): the thread's first count
    /// of the point's block, or a count of its own. Cold, so that the common count is
    /// a straight line at every call site.
    #[cold]
    #[inline(never)]
    fn pass_untracked_slow(&self) {
        if !tally::add_one_slow(self.id) {
            self.flow.pass();
        }
    }

    /// The start of a timed call in the unit its thresholds were compiled in: the
    /// timeline reading it already has, or the tick counter (never 0).
    #[inline]
    pub(in crate::point) fn stamp(&self, fine: bool, now: u64) -> u64 {
        if fine {
            self.clock.ticks().max(1)
        } else {
            now
        }
    }

    /// Registers an admitted call with a timeout in the hung-call table: its slot there,
    /// or [`NO_HANG`]. The table is made by the first timed call, and the sweep runs
    /// only while timed calls come (see `cycle`).
    /// With the slot's index, the slot itself (`None` with [`NO_HANG`]).
    #[inline]
    pub(in crate::point) fn hang_slot(&self, timeout: u64, now: u64) -> (u32, Option<&AtomicU64>) {
        if timeout == 0 {
            return (NO_HANG, None);
        }
        let table = match self.hang.get() {
            Some(table) => table,
            None => self.hang_table(),
        };
        // The table is on the timeline: sweeps are coarser than its resolution.
        let slot = table.register_slot_at(now);
        if !self.sweeping.is_armed() {
            self.arm_sweep();
        }
        slot
    }

    #[cold]
    #[inline(never)]
    fn hang_table(&self) -> &HangTable {
        self.hang.get_or_init(HangTable::new)
    }

    /// Asks the point's adaptive limiter; `None` means over the limit.
    pub(in crate::point) fn adaptive_admit(&self, c: &Compiled) -> Option<AdaptiveCall> {
        let slot = c.adaptive?.0;
        let start = match &slot.imp {
            AdaptiveImpl::Gradient(l) => l
                .try_acquire_for(l.now(), crate::priority::current)
                .ok()
                .map(LatencyPermit::into_start),
            AdaptiveImpl::Shedder(l) => l
                .try_acquire_for(l.now(), crate::priority::current)
                .ok()
                .map(LatencyPermit::into_start),
        };
        start.map(|start| AdaptiveCall { slot, start })
    }

    /// Asks the point's breaker; `None` means rejected (a drop is recorded).
    pub(in crate::point) fn breaker_admit(
        &self,
        rules: u64,
        breaker: Leaked<BreakerSlot>,
        now: u64,
    ) -> Option<BreakerCall> {
        let slot = breaker.0;
        match &slot.imp {
            BreakerImpl::Sre(b) if b.accepts_surely(now) => Some(BreakerCall {
                slot,
                word: slot.slow_or_zero(rules & R_FINE != 0),
            }),
            BreakerImpl::Sre(b) => {
                // Dropping: the lowest tier goes first (see `crate::priority`).
                let d = b.allow_priority(Instant::from_nanos(now), crate::priority::current());
                if let Some(t) = d.transition {
                    let (from, to) = match t {
                        DroppingTransition::Started => (BreakerState::Closed, BreakerState::Open),
                        DroppingTransition::Stopped => (BreakerState::Open, BreakerState::Closed),
                    };
                    self.breaker_changed(
                        now,
                        BreakerChange {
                            from,
                            to,
                            cause: None,
                        },
                    );
                }
                d.is_admitted().then_some(BreakerCall {
                    slot,
                    word: slot.slow_or_zero(rules & R_FINE != 0),
                })
            }
            BreakerImpl::Classic(b) => match b.allow(Instant::from_nanos(now)) {
                Ok(ticket) => {
                    if let Some(t) = ticket.transition() {
                        self.classic_changed(t);
                    }
                    let (epoch, _started, probe) = ticket.into_raw();
                    Some(BreakerCall {
                        slot,
                        word: epoch << 1 | u64::from(probe),
                    })
                }
                Err(_) => None,
            },
        }
    }

    /// A rule tripped: roll the downgrade percentage and either downgrade or let the
    /// call run anyway. A call that runs counts its pass and holds a slot like any
    /// admitted call, under the concurrency limit: a concurrency refusal is never
    /// spared (the limit holds whatever the percentage), and a spared call that finds
    /// no free slot is downgraded for concurrency. A shadow policy runs every call.
    pub(in crate::point) fn trip<'p>(
        &'p self,
        c: &'static Compiled,
        reason: Reason,
        start: u64,
        fine: bool,
        now: u64,
    ) -> Result<Permit<'p>, Downgraded> {
        self.trip_keyed(c, reason, None, start, fine, now)
    }

    /// [`trip`](Self::trip) of a call with a key (named in the listener event). A key's
    /// refusal is never spared by the downgrade percentage: the key's limits hold
    /// whatever it is.
    pub(in crate::point) fn trip_keyed<'p>(
        &'p self,
        c: &'static Compiled,
        reason: Reason,
        key: Option<&KeyArg<'_>>,
        start: u64,
        fine: bool,
        now: u64,
    ) -> Result<Permit<'p>, Downgraded> {
        let shadow = c.rules & R_SHADOW != 0;
        let mut reason = reason;
        if self.spares(c, reason, key, now) {
            let admitted = if !shadow && c.rules & R_CONCURRENCY != 0 {
                self.flow.admit(Limits {
                    from: 0,
                    passes: NO_LIMIT,
                    inflight: c.max_concurrency,
                })
            } else {
                Ok(self.flow.admit_unlimited())
            };
            match admitted {
                Ok(entry) => {
                    self.note_peak(entry.inflight);
                    let hang = self.hang_slot(c.timeout, now);
                    return Ok(Permit::governed(
                        self, c, start, fine, entry.slot, hang, None, None,
                    ));
                }
                Err(_) => reason = Reason::Concurrency,
            }
        }
        Err(self.downgrade_keyed(reason, key, now, false))
    }

    /// Whether a call refused for `reason` runs anyway: spared by the downgrade
    /// percentage, or under a dry run (counted and reported as what would have
    /// happened). A concurrency, queue or key refusal is never spared (those limits
    /// hold whatever the percentage); a dry run spares every refusal.
    pub(in crate::point) fn spares(
        &self,
        c: &Compiled,
        reason: Reason,
        key: Option<&KeyArg<'_>>,
        now: u64,
    ) -> bool {
        let shadow = c.rules & R_SHADOW != 0;
        let spared = c.percentage < 100
            && (c.percentage == 0 || crate::rand::below(100) >= c.percentage)
            && (shadow
                || !matches!(
                    reason,
                    Reason::Concurrency | Reason::QueueFull | Reason::QueueTimeout | Reason::HotKey
                ));
        if shadow && !spared {
            // Dry run: count and report what would have happened, then run it.
            self.counters.reason_cells().shadow[reason.index()].fetch_add(1, Ordering::Relaxed);
            self.event_keyed(reason, key, now, true);
        }
        spared || shadow
    }

    /// Takes a token from the policy's bucket at `stamp` (in the bucket's unit).
    #[inline]
    pub(in crate::point) fn take_token(&self, c: &Compiled, stamp: u64) -> bool {
        c.bucket.is_some_and(|b| b.take(stamp))
    }

    /// The warm-up before the token bucket (with `R_WARM`) lets the call through at
    /// `now` (timeline ns), counting it.
    #[inline]
    pub(in crate::point) fn warm_passes(&self, c: &Compiled, now: u64) -> bool {
        match c.bucket.and_then(|b| b.0.warm.as_ref()) {
            Some((w, cell)) => cell.try_pass(w, now),
            None => true,
        }
    }

    /// Reserves a token due within the policy's `token_wait` (the bucket had none a
    /// moment ago): the wait in nanoseconds (0 if the token is there now: taken), or
    /// `None` (nothing reserved: refused).
    #[cold]
    #[inline(never)]
    pub(in crate::point) fn reserve_token(
        &self,
        c: &Compiled,
        stamp: u64,
        fine: bool,
    ) -> Option<u64> {
        let b = c.bucket?;
        let g = &b.gcra;
        let (now, early) = b.at(stamp);
        let wait = b.cell.try_reserve(g, now, 1, g.scaled_span(c.token_wait))?;
        // Waited from the call's own reading: a call older than the bucket waits for
        // the bucket's start too.
        let wait = g.unscaled_ceil(wait.saturating_add(early));
        Some(if fine {
            self.clock.ticks_to_ns(wait)
        } else {
            wait
        })
    }

    #[inline]
    pub(in crate::point) fn note_peak(&self, inflight: u64) {
        if inflight > self.cycle_peak.load(Ordering::Relaxed) {
            self.cycle_peak.fetch_max(inflight, Ordering::Relaxed);
            self.peak.fetch_max(inflight, Ordering::Relaxed);
        }
    }
}
