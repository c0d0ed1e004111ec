//! Delay: at most one probe per retry interval, whatever the number of threads asking
//! at the same instant, on a manual clock.
//!
//! `max_exceptions(1).delay(10 s, Some(100 ms))` in one window: one failing call, then
//! the next call trips the rule and starts the delay (as in `tests/strategies.rs`).
//! Then `T` threads at a time each call `enter` once and hold their permits until every
//! thread has tried: 1 ns before the probe time none is admitted; at it exactly one
//! (the probe), the others refused for `Delay`; that probe fails; half an interval and
//! 1 ns short of an interval after the failure none; a full interval after it exactly
//! one, which succeeds and ends the delay.
//!
//! With `max_concurrency(1)` added, a call admitted before the delay (not a probe)
//! holds the only slot, and the next call, refused for `Concurrency`, starts the delay
//! (a failing call cannot: with one slot, the holder could not have been admitted
//! after it). At the probe time the probe is claimed and refused by the full limit,
//! and given back each time: none admitted, every refusal `Concurrency` (the
//! claimants, at least one) or `Delay`. Once the holder finished (which does not end
//! the delay) exactly one of `T` threads at the same instant is admitted: the probe
//! was not lost. It succeeds and ends the delay.

use crate::support::*;
use resilience_runtime::{ManualClock, Point, Policy, Reason};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Duration;

const DELAY: Duration = Duration::from_secs(10);
/// The retry interval: one probe per interval.
const EVERY: Duration = Duration::from_millis(100);
const NS: Duration = Duration::from_nanos(1);

/// The delay policy, with `max_concurrency(1)` if `one_slot`.
fn policy(one_slot: bool) -> Policy {
    let b = Policy::builder().max_exceptions(1);
    let b = if one_slot { b.max_concurrency(1) } else { b };
    b.delay(DELAY, Some(EVERY))
        .window(1, WINDOW)
        .build()
        .unwrap()
}

/// A case's point on a manual clock, its name in failure messages, and what its
/// callers saw.
struct DelayCase {
    case: Case,
    clock: ManualClock,
    p: &'static Point,
    seen: Seen,
    threads: usize,
    /// The time since the delay started, for failure messages.
    at: Cell<Duration>,
}

impl DelayCase {
    fn new(rule: &str, name: String, one_slot: bool, threads: usize) -> DelayCase {
        let (reg, clock) = manual_registry();
        reg.set_policy(&name, policy(one_slot)).unwrap();
        DelayCase {
            case: Case::new(rule, Shape::Enter, threads, false),
            clock,
            p: reg.point(&name).unwrap(),
            seen: Seen::default(),
            threads,
            at: Cell::new(Duration::ZERO),
        }
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
        self.at.set(self.at.get() + d);
    }

    fn in_delay(&self) -> bool {
        self.p.stats().in_delay
    }

    /// `T` threads at this instant, each calling `enter` once and holding its permit:
    /// exactly `admitted` of them are, and the other refusals are `Delay`, except the
    /// `Concurrency` refusals `by_limit` allows (returned with the race).
    fn race(&self, v: &Verdicts, what: &str, admitted: u64, by_limit: bool) -> Race {
        let threads = self.threads;
        let r = race(self.p, threads, &self.seen);
        let (case, at) = (&self.case, self.at.get());
        v.check(r.admitted() == admitted, || {
            format!(
                "{case}: {what} (+{at:?} since the delay started): {} of {threads} calls \
                 admitted, exactly {admitted} must be (refusals: {:?})",
                r.admitted(),
                r.refused
            )
        });
        let limit = if by_limit {
            r.refused_for(Reason::Concurrency)
        } else {
            0
        };
        v.check(
            r.refused_for(Reason::Delay) + limit == r.refused.len() as u64,
            || {
                format!(
                    "{case}: {what} (+{at:?}): refused for {:?}, only Delay{} may refuse",
                    r.refused,
                    if by_limit { " or Concurrency" } else { "" }
                )
            },
        );
        r
    }

    /// The books, and one probe (or holder) in flight at a time.
    fn conclude(&self, v: &Verdicts, allowed: &[Reason]) {
        let (case, s) = (&self.case, self.p.stats());
        check_books(v, case, &s, &self.seen);
        check_reasons(v, case, &s, allowed);
        v.check(self.seen.max_inflight() <= 1, || {
            format!(
                "{case}: the callers saw {} calls in flight at once, at most one (the probe) may be",
                self.seen.max_inflight()
            )
        });
        v.check(s.peak_concurrency <= 1, || {
            format!(
                "{case}: peak_concurrency {}, at most one (the probe) may be",
                s.peak_concurrency
            )
        });
    }
}

fn one_probe_per_interval(v: &Verdicts, threads: usize) {
    let d = DelayCase::new(
        &format!("max_exceptions(1).delay({DELAY:?}, Some({EVERY:?}))"),
        format!("delay.probe.{threads}"),
        false,
        threads,
    );
    let case = &d.case;
    let first = one_call(d.p, &d.seen, true);
    let trip = one_call(d.p, &d.seen, false);
    v.check(first.is_ok() && trip == Err(Reason::Exceptions), || {
        format!("{case}: one failing call, then the trip: got {first:?}, {trip:?}")
    });
    v.check(d.in_delay(), || {
        format!("{case}: the trip started no delay")
    });
    d.advance(EVERY - NS);
    d.race(v, "1 ns before the first probe time", 0, false);
    d.advance(NS);
    let probe = d.race(v, "at the first probe time", 1, false);
    probe.finish(true);
    d.advance(EVERY / 2);
    d.race(v, "half an interval after the failed probe", 0, false);
    d.advance(EVERY / 2 - NS);
    d.race(
        v,
        "1 ns short of an interval after the failed probe",
        0,
        false,
    );
    d.advance(NS);
    let probe = d.race(v, "a full interval after the failed probe", 1, false);
    probe.finish(false);
    let (case, s) = (&d.case, d.p.stats());
    v.check(!s.in_delay, || {
        format!("{case}: the succeeding probe did not end the delay")
    });
    v.check(s.totals.exceptions == 2, || {
        format!(
            "{case}: {} exceptions, exactly 2 (the first call and the failed probe) must be",
            s.totals.exceptions
        )
    });
    d.conclude(v, &[Reason::Exceptions, Reason::Delay]);
}

fn a_probe_refused_by_the_limit_comes_back(v: &Verdicts, threads: usize) {
    let d = DelayCase::new(
        &format!("max_exceptions(1).max_concurrency(1).delay({DELAY:?}, Some({EVERY:?})), a non-probe holding the slot"),
        format!("delay.held.{threads}"),
        true,
        threads,
    );
    let case = &d.case;
    d.seen.calls.fetch_add(1, Ordering::SeqCst);
    let holder = d.p.enter();
    let inside = holder.as_ref().ok().map(|_| d.seen.inside());
    v.check(holder.is_ok(), || {
        format!(
            "{case}: the first call was refused: {:?}",
            holder.as_ref().err()
        )
    });
    let trip = one_call(d.p, &d.seen, false);
    v.check(trip == Err(Reason::Concurrency), || {
        format!("{case}: with the only slot held the next call must be refused for Concurrency, got {trip:?}")
    });
    v.check(d.in_delay(), || {
        format!("{case}: the Concurrency refusal started no delay")
    });
    d.advance(EVERY);
    let full = d.race(v, "at the probe time, the slot held", 0, true);
    v.check(full.refused_for(Reason::Concurrency) >= 1, || {
        format!(
            "{case}: at the probe time no call claimed the probe (refusals {:?}): the first \
             claimant must be refused for Concurrency",
            full.refused
        )
    });
    drop(inside);
    if let Ok(permit) = holder {
        permit.finish(false);
    }
    v.check(d.in_delay(), || {
        format!("{case}: the holder (not a probe) finishing ended the delay")
    });
    let probe = d.race(v, "the slot free again, at the same instant", 1, false);
    probe.finish(false);
    v.check(!d.in_delay(), || {
        format!("{case}: the succeeding probe did not end the delay")
    });
    d.conclude(v, &[Reason::Concurrency, Reason::Delay]);
}

#[test]
fn a_delay_admits_at_most_one_probe_per_retry_interval() {
    let v = Verdicts::default();
    for threads in THREADS {
        one_probe_per_interval(&v, threads);
    }
    v.conclude();
}

#[test]
fn a_delay_probe_refused_by_a_full_limit_is_given_back() {
    let v = Verdicts::default();
    for threads in THREADS {
        a_probe_refused_by_the_limit_comes_back(&v, threads);
    }
    v.conclude();
}
