//! The permit of an admitted call and its completion: the outcome counted, the
//! duration measured, the slot given back, the breaker, adaptive limiter and delay
//! told. A permit is written once in the caller's slot and completed there.

use super::extras::Tail;
use super::meta::{Meta, NO_HANG};
use super::records::Records;
use crate::clock::Instant;
use crate::point::form::compiled::Compiled;
use crate::point::form::slots::{sre_outcome, AdaptiveCall, BreakerCall, BreakerImpl};
use crate::point::state::delay::ProbeEnd;
use crate::point::state::flow::Slot;
use crate::point::state::hang::HangTable;
use crate::point::Point;
use crate::sync::{AtomicU64, Ordering};
use crate::Downgraded;
use std::fmt;
use std::mem::ManuallyDrop;
use std::time::Duration;

/// Permission to run one call, returned by [`Point::enter`].
///
/// Report the outcome with [`finish`](Permit::finish) or [`panicked`](Permit::panicked).
/// Dropping it without either means the call was cancelled (an async future dropped
/// mid-flight): it is counted in [`Totals::cancelled`](crate::Totals::cancelled), its
/// concurrency slot is released, and if it ran past the timeout rule's threshold (or
/// the breaker's slow-call threshold) it counts as a timeout (a slow call) and a
/// breaker failure, as if it had returned then; otherwise the breaker does not see
/// it. Either way the slot can never leak, which SDS's `downgradeFinally` could.
#[must_use = "dropping a permit records the call as cancelled; call `finish`"]
pub struct Permit<'a> {
    pub(in crate::point) point: &'a Point,
    /// Start of a timed call (ticks or timeline, see `meta`), else 0.
    pub(in crate::point) start: u64,
    /// The call's slot in the point's hung-call table (its number is in `meta`), if
    /// it has one: freed at the end without looking it up again.
    pub(in crate::point) hang_at: Option<&'a AtomicU64>,
    /// The compiled form the call was admitted under, for what the call's end needs
    /// of it (the timeout, the breaker's and the adaptive limit's slots, the key's
    /// table or override; see `meta`), or none when it needs nothing. Forms are kept
    /// as long as their point, which outlives the permit. A call with records of the
    /// stages only some policies use (a probe, a classic breaker's ticket, an
    /// adaptive start, a key) has them boxed here with its form (see `extras`).
    pub(in crate::point) tail: Tail,
    /// The in-flight slot, the unit of `start`, the hung-call slot and which of the
    /// form's parts and of the records the call has, in one word.
    pub(in crate::point) meta: Meta,
}

/// Writes `permit` into the caller's empty slot and returns it there, to be
/// completed in place.
#[inline(always)]
pub(in crate::point) fn fill<'s, 'a>(
    slot: &'s mut Option<Permit<'a>>,
    permit: Permit<'a>,
) -> &'s mut Permit<'a> {
    debug_assert!(slot.is_none(), "a permit slot is filled once");
    // The old value is `None`: forgetting it skips the check a drop would make.
    std::mem::forget(slot.replace(permit));
    match slot {
        Some(permit) => permit,
        None => unreachable!("just filled"),
    }
}

/// Writes the permit of an entry that returns one into the caller's empty slot (see
/// [`Point::enter_in`]).
#[inline(always)]
pub(in crate::point) fn place<'a>(
    entered: Result<Permit<'a>, Downgraded>,
    slot: &mut Option<Permit<'a>>,
) -> Result<(), Downgraded> {
    fill(slot, entered?);
    Ok(())
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("point", &self.point.name)
            .field("probe", &(self.tail.records().probe_of != 0))
            .field("breaker", &self.meta.has(Meta::BREAKER))
            .finish_non_exhaustive()
    }
}

/// How an admitted call ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Outcome {
    /// Returned, not an exception.
    Ok,
    /// Returned a counted `Err`, or panicked.
    Exception,
    /// Never reported: its future or permit was dropped. Counted as cancelled, and as
    /// a timeout (and a breaker failure) if it ran past the timeout threshold, or as a
    /// slow call past the breaker's slow-call threshold, as if it had returned then.
    Cancelled,
    /// Cut at its deadline (`timeout = "..."`, `call_timeout`): a timeout, and a
    /// failure for the breaker.
    TimedOut,
}

impl Outcome {
    #[inline(always)]
    pub(in crate::point) fn of(exception: bool) -> Outcome {
        if exception {
            Outcome::Exception
        } else {
            Outcome::Ok
        }
    }
}

impl<'a> Permit<'a> {
    /// A permit of `point` with nothing but its meta word: no start, form, probe,
    /// breaker, adaptive flight or key.
    #[inline(always)]
    fn bare(point: &'a Point, meta: Meta) -> Permit<'a> {
        Permit {
            point,
            start: 0,
            hang_at: None,
            tail: Tail::NONE,
            meta,
        }
    }

    /// The permit of a call admitted under the policy `c`, holding `slot`, with
    /// every field known (written once, in the caller's slot). `adaptive` and
    /// `breaker` are the calls of `c`'s own adaptive limit and breaker.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(in crate::point) fn governed(
        point: &'a Point,
        c: &'static Compiled,
        start: u64,
        fine: bool,
        slot: Slot,
        (hang, hang_at): (u32, Option<&'a AtomicU64>),
        adaptive: Option<AdaptiveCall>,
        breaker: Option<BreakerCall>,
    ) -> Permit<'a> {
        debug_assert!(
            adaptive.is_none_or(|a| c.adaptive.is_some_and(|s| std::ptr::eq(s.0, a.slot)))
        );
        debug_assert!(breaker.is_none_or(|b| c.breaker.is_some_and(|s| std::ptr::eq(s.0, b.slot))));
        let mut permit = Permit {
            point,
            start,
            hang_at,
            tail: Tail::of(c),
            meta: Meta::new(slot, fine).with_hang(hang),
        };
        if let Some(a) = adaptive {
            permit.attach_adaptive(c, a);
        }
        if let Some(b) = breaker {
            permit.attach_breaker(c, b);
        }
        permit
    }

    /// Gives the permit its breaker call, one of `c`'s breaker. With
    /// [`attach_adaptive`](Self::attach_adaptive), [`attach_probe`](Self::attach_probe),
    /// [`attach_key`](Self::attach_key), [`with_breaker`](Self::with_breaker) and the
    /// governed entry's constructor, the only writers of the fields that
    /// [`Meta::EXTRA`] stands for, so the bit always follows them.
    #[inline]
    pub(in crate::point) fn attach_breaker(&mut self, c: &'static Compiled, call: BreakerCall) {
        debug_assert!(c.breaker.is_some_and(|s| std::ptr::eq(s.0, call.slot)));
        if let BreakerImpl::Classic(_) = &call.slot.imp {
            self.tail.records_mut(c).ticket = call.word;
        } else {
            debug_assert_eq!(call.word, call.slot.slow_or_zero(self.meta.fine()));
        }
        self.attach_form(c, Meta::BREAKER);
    }

    /// Gives the permit its flight under `c`'s adaptive limit.
    #[inline]
    pub(in crate::point) fn attach_adaptive(&mut self, c: &'static Compiled, call: AdaptiveCall) {
        debug_assert!(c.adaptive.is_some_and(|s| std::ptr::eq(s.0, call.slot)));
        self.tail.records_mut(c).adaptive_start = call.start;
        self.attach_form(c, Meta::ADAPTIVE);
    }

    /// Gives the permit its key's slot, taken under `c`'s `keys` section, given back
    /// when the call ends.
    #[inline]
    pub(in crate::point) fn attach_key(
        &mut self,
        c: &'static Compiled,
        hold: crate::keys::KeyHold<'static>,
    ) {
        debug_assert!(c.keys.is_some());
        let (fp, code) = hold.into_parts();
        self.tail.records_mut(c).key_fp = fp;
        self.tail.set_form(c);
        self.meta = self.meta.with_key(code);
    }

    /// Points the permit at `c` (the one form a permit has) and sets `bits` and
    /// [`Meta::EXTRA`] in its meta word.
    #[inline]
    fn attach_form(&mut self, c: &'static Compiled, bits: u64) {
        self.tail.set_form(c);
        self.meta = Meta::from_bits(self.meta.bits() | bits | Meta::EXTRA);
    }

    /// Gives back the slot the call holds under its key, if any (its fingerprint in
    /// `records`).
    fn release_key(&mut self, records: &Records) {
        if !self.meta.has(Meta::KEY) {
            return;
        }
        self.meta = Meta::from_bits(self.meta.bits() & !Meta::KEY);
        let form = self.tail.form().and_then(|c| c.keys);
        match form.and_then(|k| k.0.hold(records.key_fp, self.meta.key_code())) {
            // Dropped: the slot goes back.
            Some(hold) => drop(hold),
            None => debug_assert!(false, "a key's hold without its form's table or override"),
        }
    }

    /// Makes the permit, admitted under `c`, the probe of the delay period ending at
    /// `until`.
    #[inline]
    pub(in crate::point) fn attach_probe(&mut self, c: &'static Compiled, until: u64) {
        debug_assert_ne!(until, 0);
        self.tail.records_mut(c).probe_of = until;
        self.meta = Meta::from_bits(self.meta.bits() | Meta::EXTRA);
    }

    #[inline]
    pub(in crate::point) fn untracked(point: &'a Point) -> Permit<'a> {
        Permit::bare(point, Meta::new(Slot::None, false))
    }

    /// The permit of an untimed call holding a slot of the flow word, and nothing
    /// else (see [`Point::enter_counted`]).
    #[inline(always)]
    pub(in crate::point) fn counted(point: &'a Point, slot: Slot) -> Permit<'a> {
        Permit::bare(point, Meta::new(slot, false))
    }

    /// The permit of an untimed call that only `c`'s breaker judged, closed (an SRE
    /// breaker's call records nothing on the way in).
    #[inline(always)]
    pub(in crate::point) fn with_breaker(point: &'a Point, c: &'static Compiled) -> Permit<'a> {
        debug_assert!(c.breaker.is_some());
        let mut permit = Permit::bare(point, Meta::new(Slot::None, false));
        permit.attach_form(c, Meta::SRE_ONLY | Meta::BREAKER);
        permit
    }

    /// The breaker's record of this call, if it has one (a classic breaker's ticket
    /// from `records`; an SRE breaker's slow-call threshold from its slot).
    #[inline(always)]
    pub(in crate::point) fn breaker(&self, records: &Records) -> Option<BreakerCall> {
        match (self.tail.form(), self.meta.has(Meta::BREAKER)) {
            (Some(c), true) => c.breaker.map(|slot| BreakerCall {
                slot: slot.0,
                word: match &slot.0.imp {
                    BreakerImpl::Sre(_) => slot.0.slow_or_zero(self.meta.fine()),
                    BreakerImpl::Classic(_) => records.ticket,
                },
            }),
            _ => None,
        }
    }

    /// The adaptive limit's record of this call, if it has one (its start from
    /// `records`).
    #[inline]
    pub(in crate::point) fn adaptive(&self, records: &Records) -> Option<AdaptiveCall> {
        match (self.tail.form(), self.meta.has(Meta::ADAPTIVE)) {
            (Some(c), true) => c.adaptive.map(|slot| AdaptiveCall {
                slot: slot.0,
                start: records.adaptive_start,
            }),
            _ => None,
        }
    }

    /// The point this permit belongs to.
    pub fn point(&self) -> &'a Point {
        self.point
    }

    /// Records that the call finished; `exception` says whether it failed.
    #[inline(always)]
    pub fn finish(self, exception: bool) {
        let mut this = ManuallyDrop::new(self);
        this.complete(Outcome::of(exception));
    }

    /// Records that the call panicked (counted as an exception).
    pub fn panicked(self) {
        self.finish(true);
    }

    /// [`finish`](Self::finish) for a call that [`Point::enter_in`] admitted on `point`,
    /// its permit completed where it is; the slot is left empty. An empty slot is an
    /// untracked call: only an exception is counted.
    #[inline(always)]
    pub(crate) fn finish_in(point: &'a Point, slot: &mut Option<Permit<'a>>, exception: bool) {
        Permit::end_in(point, slot, Outcome::of(exception));
    }

    /// Records how a call that [`Point::enter_in`] admitted on `point` ended, its
    /// permit completed where it is; the slot is left empty. An empty slot is an
    /// untracked call: only exceptions, cancellations and timeouts are counted.
    #[inline(always)]
    pub(crate) fn end_in(point: &'a Point, slot: &mut Option<Permit<'a>>, outcome: Outcome) {
        match slot {
            Some(permit) => permit.complete(outcome),
            None => point.count_untracked_end(outcome),
        }
        std::mem::forget(slot.take());
    }

    /// Records the outcome. Calls without policy or breaker, and calls under a policy
    /// alone (no breaker, adaptive limit or delay probe), are settled here, in line at
    /// every call site; the others in [`complete_tracked`](Self::complete_tracked).
    #[inline(always)]
    pub(in crate::point) fn complete(&mut self, outcome: Outcome) {
        debug_assert_eq!(
            self.meta.has(Meta::EXTRA),
            self.meta.has(Meta::BREAKER)
                || self.meta.has(Meta::ADAPTIVE)
                || self.tail.records().probe_of != 0
                || self.meta.has(Meta::KEY),
            "the extra bit follows the permit's fields"
        );
        let meta = self.meta.bits();
        if meta & (Meta::SLOT_MASK | Meta::EXTRA) == Meta::WORD {
            // The common call under a policy alone: its slot in the flow word, given
            // back without looking at which it is.
            self.settle_plain(outcome, meta);
            if self.point.flow.release(Slot::Word) {
                self.point.wake_waiter();
            }
            return;
        }
        if meta & Meta::EXTRA == 0 {
            if meta & Meta::SLOT_MASK == 0 {
                // Without policy or breaker only exceptions, cancellations and timeouts
                // are counted, and a duration if the call was timed for the series.
                if self.start != 0 {
                    return self.end_timed_untracked(outcome);
                }
                return self.point.count_untracked_end(outcome);
            }
            // Its slot in the spill counter.
            self.settle_plain(outcome, meta);
            if self.point.flow.release(self.meta.slot()) {
                self.point.wake_waiter();
            }
            return;
        }
        if meta & Meta::SRE_ONLY != 0 && outcome == Outcome::Ok {
            // An untimed call only an SRE breaker judged, done well: its success. Such
            // a permit has no records, so no box to free.
            debug_assert!(
                !self.tail.is_boxed(),
                "an SRE breaker's call has no records"
            );
            if let Some(slot) = self.tail.form().and_then(|c| c.breaker.map(|s| s.0)) {
                if let BreakerImpl::Sre(b) = &slot.imp {
                    return b.record_admitted(crate::breaker::Outcome::Success);
                }
            }
        }
        self.complete_tracked(outcome);
    }

    /// Settles a call with nothing extra (no breaker, adaptive flight, probe or key)
    /// but its slot, which the caller gives back: no [`Meta::EXTRA`], so its tail is not
    /// boxed.
    #[inline(always)]
    fn settle_plain(&self, outcome: Outcome, meta: u64) {
        if self.start == 0 && meta as u32 == NO_HANG {
            // Untimed and never registered as hung: only the outcome is counted.
            self.point.count_untracked_end(outcome);
        } else if outcome == Outcome::Ok {
            // The common end, settled by a copy that knows it (a caller such as
            // tower's future, whose outcome is only known at run time, would
            // otherwise test every other outcome on every call).
            self.settle_ok();
        } else {
            self.settle_any(outcome);
        }
    }

    /// The end of a call without policy or breaker timed for the per-second durations
    /// (see [`Point::time_untracked`]).
    #[inline(never)]
    fn end_timed_untracked(&mut self, outcome: Outcome) {
        let p = self.point;
        if outcome == Outcome::Cancelled || !crate::point::state::durations::measuring_durations() {
            return p.count_untracked_end(outcome);
        }
        let now = p.clock.now_ns();
        let ns = now.saturating_sub(self.start);
        // Not closing the second: without a policy, the sampler attributes calls.
        p.end_measured(now, ns, NO_HANG, outcome == Outcome::Exception, false);
        if outcome == Outcome::TimedOut {
            p.count_untracked_end(outcome);
        }
    }

    /// The rest of [`complete`](Self::complete), out of line.
    #[inline(never)]
    pub(in crate::point) fn complete_tracked(&mut self, outcome: Outcome) {
        // The records out of their box, freed now: before anything below could unwind
        // (a breaker's listener), and once.
        let records = self.tail.unbox();
        if self.meta.bits() & Meta::SRE_ONLY != 0 && outcome != Outcome::Cancelled {
            if let Some(BreakerCall { slot, .. }) = self.breaker(&records) {
                if let BreakerImpl::Sre(b) = &slot.imp {
                    b.record_admitted(sre_outcome(outcome != Outcome::Ok));
                    return self.point.count_untracked_end(outcome);
                }
            }
        }
        if self.meta.slot() != Slot::None
            || self.meta.has(Meta::ADAPTIVE)
            || self.meta.has(Meta::KEY)
        {
            return self.complete_slow(outcome, &records);
        }
        match self.breaker(&records) {
            None => {}
            // An untimed call of a breaker-only point: one counter of the breaker.
            Some(BreakerCall { slot, word: 0 }) if outcome != Outcome::Cancelled => {
                match &slot.imp {
                    BreakerImpl::Sre(b) => b.record_admitted(sre_outcome(outcome != Outcome::Ok)),
                    BreakerImpl::Classic(_) => return self.complete_slow(outcome, &records),
                }
            }
            Some(_) => return self.complete_slow(outcome, &records),
        }
        self.point.count_untracked_end(outcome);
    }

    /// [`settle`](Self::settle) for a call that completed well. The common case (a
    /// start on the timeline, durations not measured, the call in time) is settled
    /// here without a call or a spill; the rest by `settle`.
    #[inline(never)]
    fn settle_ok(&self) {
        let p = self.point;
        if let (false, false, Some(now)) = (
            self.meta.fine(),
            crate::point::state::durations::measuring_durations(),
            p.clock.now_ns_without_call(),
        ) {
            // SAFETY: settle_ok is only reached for a permit without `Meta::EXTRA`
            // (through `settle_plain`), whose tail is not boxed.
            let form = unsafe { self.tail.form_unboxed() };
            if !past_timeout(form, now.saturating_sub(self.start)) {
                // In time: only its hung-call slot goes back (if a sweep marked it, the
                // sweep counted the timeout already).
                if let Some(at) = self.hang_at {
                    HangTable::free_at(at);
                }
                return;
            }
        }
        self.settle_ok_rest();
    }

    /// Whether a call that ran `elapsed` (in the unit of `start`) is late for the
    /// timeout rule: strictly past its threshold.
    #[inline(always)]
    fn ran_past_timeout(&self, elapsed: u64) -> bool {
        past_timeout(self.tail.form(), elapsed)
    }

    /// [`settle`](Self::settle) for a call that completed well, any case.
    #[inline(never)]
    fn settle_ok_rest(&self) {
        let _ = self.settle(Outcome::Ok);
    }

    /// [`settle`](Self::settle) for any other end.
    #[inline(never)]
    fn settle_any(&self, outcome: Outcome) {
        let _ = self.settle(outcome);
    }

    /// Counts the exception, measures the call, frees its hung-call slot and counts a
    /// timeout; returns whether the call failed (exception or timeout) and how long it
    /// took (in the unit of `start`; 0 when not measured).
    #[inline(always)]
    pub(in crate::point) fn settle(&self, outcome: Outcome) -> (bool, u64) {
        let p = self.point;
        let mut failed = outcome == Outcome::Exception;
        let mut elapsed = 0;
        let mut counted = false;
        if self.start != 0 {
            // The duration, in the unit of `start`, and in nanoseconds for the series.
            let (now, ns) = if self.meta.fine() {
                elapsed = p.clock.ticks().saturating_sub(self.start);
                (p.clock.now_ns(), p.clock.ticks_to_ns(elapsed))
            } else {
                let now = p.clock.now_ns();
                elapsed = now.saturating_sub(self.start);
                (now, elapsed)
            };
            if outcome != Outcome::Cancelled
                && crate::point::state::durations::measuring_durations()
            {
                // Only a call on the flow word closes its second (see `observe_cycle`):
                // the others' seconds are the sampler's.
                let close = self.meta.slot() != Slot::None;
                p.end_measured(now, ns, self.meta.hang(), failed, close);
                counted = true;
            }
        }
        if failed && !counted {
            p.counters.exceptions.fetch_add(1, Ordering::Relaxed);
        }
        if outcome == Outcome::Cancelled {
            p.count_cancelled();
        }
        let late = outcome == Outcome::TimedOut || self.ran_past_timeout(elapsed);
        let swept = self
            .hang_at
            .is_some_and(|at| HangTable::unregister_at(at, late || outcome == Outcome::Cancelled));
        if swept {
            // A sweep saw it hang and counted the timeout already.
            failed = true;
        } else if late {
            p.counters.timeouts.fetch_add(1, Ordering::Relaxed);
            failed = true;
        }
        (failed, elapsed)
    }

    /// The rest of [`complete_tracked`](Self::complete_tracked), with the call's
    /// `records` out of their box.
    pub(in crate::point) fn complete_slow(&mut self, outcome: Outcome, records: &Records) {
        // The key's slot first: the call is over for its key whatever follows.
        self.release_key(records);
        let p = self.point;
        let (failed, elapsed) = self.settle(outcome);
        if let Some(call) = self.breaker(records) {
            p.breaker_outcome(call, outcome, failed, elapsed, self.meta.fine());
        }
        // A latency sample only from calls that completed well; failures and
        // cancellations just leave the flight.
        if let Some(a) = self.adaptive(records) {
            a.end(outcome == Outcome::Ok && !failed);
        }
        if self.meta.slot() == Slot::None {
            return;
        }
        if records.probe_of != 0 {
            let end = match outcome {
                Outcome::Ok if !failed => ProbeEnd::Succeeded,
                Outcome::Cancelled => ProbeEnd::Cancelled,
                _ => ProbeEnd::Failed,
            };
            let retry_ns = p.compiled().retry_ns;
            p.delay
                .probe_ended(records.probe_of, p.clock.now_ns(), end, retry_ns);
        }
        if p.flow.release(self.meta.slot()) {
            p.wake_waiter();
        }
    }
}

/// Whether a call under `form` that ran `elapsed` (in the unit of its start) is late
/// for the timeout rule: strictly past its threshold. Without the rule the form's
/// threshold is 0 (and so is it without a form).
#[inline(always)]
fn past_timeout(form: Option<&'static Compiled>, elapsed: u64) -> bool {
    let timeout = form.map_or(0, |c| c.timeout);
    timeout != 0 && elapsed > timeout
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        // Dropped without `finish`: a cancelled call.
        self.complete(Outcome::Cancelled);
    }
}

impl Point {
    /// Reports a finished call to the breaker that admitted it. A call cancelled
    /// before any threshold is not an outcome: the SRE breaker records nothing and a
    /// classic ticket is dropped, which frees its half-open probe slot; one cancelled
    /// past the timeout or slow-call threshold counts as if it had returned then.
    pub(in crate::point) fn breaker_outcome(
        &self,
        call: BreakerCall,
        outcome: Outcome,
        failed: bool,
        elapsed: u64,
        fine: bool,
    ) {
        match &call.slot.imp {
            BreakerImpl::Sre(b) => {
                // Into the bucket the window reached when the call was admitted (or
                // later): no clock read on the way out.
                let slow = call.word;
                let failed = failed
                    || (slow != 0 && elapsed > slow)
                    || (outcome == Outcome::Cancelled && call.slot.cancel_fails);
                if outcome == Outcome::Cancelled && !failed {
                    // Cancelled in time: not an outcome.
                    return;
                }
                b.record_admitted(sre_outcome(failed));
            }
            BreakerImpl::Classic(b) => {
                // The start is not needed: the duration comes from the permit.
                let ticket = b.ticket_from_raw(call.word >> 1, 0, call.word & 1 == 1);
                let slow = call.slot.slow(fine).is_some_and(|t| elapsed > t);
                let failed = failed || (outcome == Outcome::Cancelled && call.slot.cancel_fails);
                if outcome == Outcome::Cancelled && !failed && !slow {
                    // Cancelled in time: not an outcome. Dropping the rebuilt ticket
                    // frees a half-open probe slot.
                    drop(ticket);
                    return;
                }
                let now = self.clock.now_ns();
                let elapsed = match call.slot.slow(fine) {
                    None => Duration::ZERO,
                    Some(_) if fine => Duration::from_nanos(self.clock.ticks_to_ns(elapsed)),
                    Some(_) => Duration::from_nanos(elapsed),
                };
                if let Some(t) = ticket.finish(Instant::from_nanos(now), failed, elapsed) {
                    self.classic_changed(t);
                }
            }
        }
    }
}
