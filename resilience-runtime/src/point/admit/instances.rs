//! The entry's instances agree: the copy compiled for SDS's five rules alone
//! ([`MAY_BASIC`], a call's first look) decides every call as the copy compiled for
//! every rule ([`MAY_ALL`]) does, on the same policy and the same history.
//!
//! Two points of one registry (one manual clock) get the same random policy of the
//! five rules; the same random run of calls (entries, ends with or without an
//! exception, time passing) goes through `enter_basic` on one and through the full
//! instance on the other. Every entry must be decided alike, and the points' totals
//! and windows must end equal.

use crate::point::admit::attempt::Entry;
use crate::point::admit::permit::Permit;
use crate::point::form::compiled::{MAY_ALL, MAY_BASIC};
use crate::point::Point;
use crate::{Clock, ManualClock, Policy, Registry};
use proptest::prelude::*;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Step {
    /// A call asks to run.
    Enter,
    /// The in-flight call at this index (modulo their number) ends.
    End { which: usize, exception: bool },
    /// Time passes, in milliseconds.
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Enter),
        3 => (any::<usize>(), proptest::bool::weighted(0.3))
            .prop_map(|(which, exception)| Step::End { which, exception }),
        1 => (1u64..1500).prop_map(Step::Wait),
    ]
}

/// A policy of the five rules, each present or not (one at least), with thresholds
/// small enough for a short run to reach.
fn policy() -> impl Strategy<Value = Policy> {
    (
        proptest::option::of(1u64..12),
        proptest::option::of(1u64..5),
        // Capacity over rate of 0.2 s and up: a shorter burst span is measured on the
        // tick counter, outside the five rules' instance.
        proptest::option::of((1u32..50, 1u32..=5)),
        proptest::option::of(1u64..6),
        proptest::option::of(1u64..4),
    )
        .prop_filter_map("one rule at least", |(v, c, b, e, t)| {
            let mut p = Policy::builder();
            if let Some(n) = v {
                p = p.max_visits(n);
            }
            if let Some(n) = c {
                p = p.max_concurrency(n);
            }
            if let Some((rate, fifths)) = b {
                let capacity = u64::from((rate * fifths).div_ceil(5));
                p = p.token_bucket(f64::from(rate), capacity);
            }
            if let Some(n) = e {
                p = p.max_exceptions(n);
            }
            if let Some(n) = t {
                // No call runs this long: the rule's hung-call slots are taken and
                // freed, and no sweep can count a timeout in one run and not the other.
                p = p.timeouts(Duration::from_secs(3600), n);
            }
            p.build().ok()
        })
}

/// One look at the rules through the instance `basic` names, as the first look of
/// a call (no flags, no key).
fn enter<'p>(point: &'p Point, basic: bool, slot: &mut Option<Permit<'p>>) -> Entry {
    let c = point.cfg.get().expect("a policy");
    assert_eq!(
        c.rules & !MAY_BASIC,
        0,
        "a policy for the five rules' instance"
    );
    if basic {
        point.enter_basic(c, slot)
    } else {
        point.enter_policy::<MAY_ALL>(c, slot, 0, None)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_five_rules_instance_decides_as_the_full_one(
        policy in policy(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let manual = ManualClock::new();
        let registry: &'static Registry =
            Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
        let points = [registry.point("instances.basic").unwrap(), registry.point("instances.all").unwrap()];
        for p in &points {
            registry.set_policy(p.name(), policy.clone()).unwrap();
        }
        let mut flying: [Vec<Option<Permit<'_>>>; 2] = [Vec::new(), Vec::new()];
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Enter => {
                    let mut entries = [Entry::Admitted, Entry::Admitted];
                    for (k, p) in points.iter().enumerate() {
                        let mut slot = None;
                        entries[k] = enter(p, k == 0, &mut slot);
                        if entries[k] == Entry::Admitted {
                            flying[k].push(slot);
                        }
                    }
                    prop_assert_eq!(entries[0], entries[1], "step {} of {:?}", i, steps);
                }
                Step::End { which, exception } => {
                    prop_assert_eq!(flying[0].len(), flying[1].len());
                    if flying[0].is_empty() {
                        continue;
                    }
                    let at = which % flying[0].len();
                    for (k, p) in points.iter().enumerate() {
                        let mut slot = flying[k].remove(at);
                        Permit::finish_in(p, &mut slot, exception);
                    }
                }
                Step::Wait(ms) => manual.advance(Duration::from_millis(ms)),
            }
        }
        for (k, p) in points.iter().enumerate() {
            for mut slot in flying[k].drain(..) {
                Permit::finish_in(p, &mut slot, false);
            }
        }
        let [a, b] = points.map(|p| p.stats());
        prop_assert_eq!(a.totals, b.totals);
        prop_assert_eq!(a.window, b.window);
        prop_assert_eq!(a.concurrency, 0);
        prop_assert_eq!(b.concurrency, 0);
    }
}
