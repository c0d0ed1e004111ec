//! Unit tests of the point engine.

use super::admit::meta::{Meta, NO_HANG};
use super::admit::permit::Permit;
use super::form::compiled::{Compiled, Leaked, Parts, ACTIVE, R_VISITS};
#[cfg(feature = "redis")]
use super::form::slots::CLUSTER_GRACE;
use super::form::slots::{BreakerImpl, BreakerSlot};
use super::state::flow::Slot;
use super::*;
use crate::breaker::SreBreaker;
use crate::clock::nanos;
use crate::{AdaptiveLimit, Downgraded};
use std::time::Duration;

/// Runs `check` on `cases` random settings; it returns `None` when the policy
/// refuses the setting, else whether the point took it up. Fails on the first
/// setting accepted but not taken up, and unless both kinds make a tenth of cases.
fn for_accepted<S>(cases: u32, settings: S, check: impl Fn(S::Value) -> Option<bool>)
where
    S: proptest::strategy::Strategy,
    S::Value: Clone,
{
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let accepted = std::cell::Cell::new(0);
    runner
        .run(&settings, |setting| match check(setting.clone()) {
            None => Ok(()),
            Some(true) => {
                accepted.set(accepted.get() + 1);
                Ok(())
            }
            Some(false) => Err(TestCaseError::fail(format!(
                "accepted, but not taken up: {setting:?}"
            ))),
        })
        .unwrap();
    let accepted = accepted.get();
    assert!(
        accepted >= cases / 10 && cases - accepted >= cases / 10,
        "{accepted} of {cases} accepted"
    );
}

/// The in-place protocol of the generated code: an admitted call's permit is in
/// its slot until it is finished there (slot empty, slot of the limit back); a
/// downgraded call leaves the slot empty; a filled slot dropped is a cancelled call.
#[test]
fn permits_written_in_place_are_completed_in_place() {
    let (_manual, registry) = manual_registry();
    let point = registry.point("in_place").unwrap();
    registry
        .set_policy(
            "in_place",
            Policy::builder()
                .max_concurrency(1)
                .timeouts(Duration::from_secs(60), 100)
                .build()
                .unwrap(),
        )
        .unwrap();

    let mut first = None;
    assert!(point.enter_in(&mut first).is_ok());
    assert!(first.is_some(), "an admitted call's permit is in its slot");
    assert_eq!(point.stats().concurrency, 1);

    let mut second = None;
    let refused = point.enter_in(&mut second).unwrap_err();
    assert_eq!(refused.reason(), Reason::Concurrency);
    assert!(second.is_none(), "a downgraded call leaves its slot empty");

    Permit::finish_in(point, &mut first, true);
    assert!(first.is_none(), "a finished permit leaves its slot");
    let stats = point.stats();
    assert_eq!(stats.concurrency, 0, "the slot of the limit is back");
    assert_eq!(stats.totals.exceptions, 1);
    assert_eq!(stats.totals.passes, 1);
    assert_eq!(stats.totals.downgrades, 1);

    // Dropped while filled (a future dropped mid-flight): cancelled, nothing counted.
    let mut third = None;
    assert!(point.enter_in(&mut third).is_ok());
    drop(third);
    let stats = point.stats();
    assert_eq!(stats.concurrency, 0);
    assert_eq!(
        stats.totals.exceptions, 1,
        "a cancelled call is no exception"
    );

    // Without a policy the call is untracked: admitted with its slot left empty,
    // and finishing it counts exceptions only.
    registry.clear_policy("in_place").unwrap();
    let mut fourth = None;
    assert!(point.enter_in(&mut fourth).is_ok());
    assert!(fourth.is_none(), "nothing to complete, nothing written");
    Permit::finish_in(point, &mut fourth, true);
    assert!(fourth.is_none());
    let mut fifth = None;
    assert!(point.enter_in(&mut fifth).is_ok());
    Permit::finish_in(point, &mut fifth, false);
    let stats = point.stats();
    assert_eq!(
        stats.totals.exceptions, 2,
        "the untracked exception, and only it"
    );
    assert_eq!(
        stats.totals.passes, 4,
        "first, third (cancelled), fourth and fifth"
    );
    assert_eq!(stats.concurrency, 0);
    // The public API still hands out a permit, which counts the same way.
    point.enter().unwrap().finish(true);
    assert_eq!(point.stats().totals.exceptions, 3);
}

/// A registry of its own on a manual clock.
fn manual_registry() -> (crate::ManualClock, &'static crate::Registry) {
    let manual = crate::ManualClock::new();
    let registry = Box::leak(Box::new(crate::Registry::with_clock(Clock::manual(
        &manual,
    ))));
    (manual, registry)
}

/// Every adaptive limit that `Policy::build` accepts starts its limiter: the point
/// never runs without a limit its policy names.
#[test]
fn every_adaptive_limit_a_policy_accepts_starts_its_limiter() {
    use crate::adaptive::{AdaptiveConfig, GradientConfig};
    use proptest::prelude::*;
    let (_manual, registry) = manual_registry();
    let point = registry.point("adaptive.accepted").unwrap();
    // Mostly plausible values, sometimes edges and nonsense.
    let real = || {
        prop_oneof![
            6 => 0.01..0.99f64,
            2 => 1.0..100.0f64,
            1 => prop_oneof![
                Just(f64::NAN),
                Just(f64::INFINITY),
                Just(-1.0),
                Just(0.0),
                Just(1.0),
            ],
        ]
    };
    let span = || {
        prop_oneof![
            4 => (1u64..10_000).prop_map(Duration::from_millis),
            1 => (0u32..45).prop_map(|shift| Duration::from_nanos((1u64 << shift) - 1)),
        ]
    };
    let limits =
        (0u64..2_000, 0u64..2_000, 0u64..2_000, any::<bool>()).prop_map(|(a, b, c, ordered)| {
            let mut v = [a, b, c];
            if ordered {
                v.sort_unstable();
            }
            v
        });
    let gradient = (
        (limits, real(), real(), real()),
        (0u64..2_000, span(), 0u64..100),
    )
        .prop_map(
            |(([min, initial, max], smoothing, tolerance, queue), (long, sample, samples))| {
                AdaptiveLimit::Gradient(GradientConfig {
                    initial_limit: initial,
                    min_limit: min,
                    max_limit: max,
                    smoothing,
                    rtt_tolerance: tolerance,
                    queue_size: queue,
                    long_window: long,
                    sample_window: sample,
                    min_samples: samples,
                    critical_reserve: 0.0,
                })
            },
        );
    let shedder = (
        (span(), 0u64..2_000, 0u64..1_100),
        (span(), span(), real(), real()),
    )
        .prop_map(
            |((window, buckets, cpu), (cool_off, min_rt, beta, factor))| {
                AdaptiveLimit::Shedder(AdaptiveConfig {
                    window,
                    buckets,
                    cpu_threshold: cpu,
                    cool_off,
                    default_min_rt: min_rt,
                    flying_beta: beta,
                    min_overload_factor: factor,
                })
            },
        );
    for_accepted(500, prop_oneof![gradient, shedder], |limit| {
        let policy = Policy::builder().adaptive(limit).build().ok()?;
        registry.set_policy("adaptive.accepted", policy).unwrap();
        Some(point.compiled().adaptive.is_some())
    });
}

/// Every cluster limit that `Policy::build` accepts starts its lease: the point
/// never runs without a limit its policy names (as it did when the policy let
/// through a batch larger than the burst, or a period under a millisecond).
#[cfg(feature = "redis")]
#[test]
fn every_cluster_limit_a_policy_accepts_starts_its_lease() {
    use crate::ClusterLimit;
    use proptest::prelude::*;
    let (manual, registry) = manual_registry();
    let point = registry.point("cluster.accepted").unwrap();
    // Nothing listens there: a lease starts all the same (in fallback).
    let url = "redis://127.0.0.1:1/";
    // Durations around both ends of the range: sub-millisecond up to 20 years.
    let period = (0u32..64, 0u64..4).prop_map(|(shift, extra)| {
        Duration::from_nanos(
            (1u64 << shift)
                .saturating_add(extra)
                .min(20 * 365 * 86_400 * 1_000_000_000),
        )
    });
    let rate = prop_oneof![
        Just(f64::NAN),
        Just(0.0),
        Just(1e-9),
        0.001..1e9f64,
        Just(f64::INFINITY)
    ];
    let limit = prop_oneof![
        (period, 0u64..4, 0u64..6).prop_map(move |(period, quota, batch)| {
            ClusterLimit::Visits {
                url: url.into(),
                key: "k".into(),
                period,
                quota,
                batch,
            }
        }),
        (rate, 0u64..6, 0u64..8).prop_map(move |(rate, burst, batch)| {
            ClusterLimit::TokenBucket {
                url: url.into(),
                key: "k".into(),
                rate,
                burst,
                batch,
            }
        }),
    ];
    for_accepted(200, limit, |limit| {
        let policy = Policy::builder().cluster(limit).build().ok()?;
        registry.set_policy("cluster.accepted", policy).unwrap();
        let started = point.compiled().cluster.is_some();
        // Stop the lease before the next case.
        registry.clear_policy("cluster.accepted").unwrap();
        manual.advance(CLUSTER_GRACE);
        point.stop_retired_leases();
        Some(started)
    });
}

#[cfg(feature = "redis")]
#[test]
fn replaced_cluster_slots_stay_allocated_and_their_leases_stop_after_the_grace() {
    use crate::ClusterLimit;
    let (manual, registry) = manual_registry();
    // Nothing listens there: the leases fall back to local limits, which is enough
    // for the bookkeeping under test.
    let policy = |key: &str| {
        Policy::builder()
            .cluster(ClusterLimit::Visits {
                url: "redis://127.0.0.1:1/".into(),
                key: key.into(),
                period: Duration::from_secs(60),
                quota: 5,
                batch: 1,
            })
            .build()
            .unwrap()
    };
    registry.set_policy("cluster.slots", policy("a")).unwrap();
    let point = registry.point("cluster.slots").unwrap();
    let first = point.compiled().cluster.expect("started");

    registry.set_policy("cluster.slots", policy("b")).unwrap();
    let second = point.compiled().cluster.expect("started");
    assert!(second != first);
    {
        let settings = point.settings();
        let c = &settings.clusters;
        assert_eq!(c.replaced.len(), 1);
        assert!(!c.replaced[0].1.lease.is_stopped(), "still in its grace");
    }

    // The chore that stops replaced leases looks again when the grace is over...
    assert_eq!(point.stop_retired_leases(), Some(CLUSTER_GRACE));
    manual.advance(CLUSTER_GRACE / 4);
    assert_eq!(point.stop_retired_leases(), Some(CLUSTER_GRACE * 3 / 4));
    assert!(!point.settings().clusters.replaced[0].1.lease.is_stopped());
    // ...and then stops them, without any change of the point.
    manual.advance(CLUSTER_GRACE * 3 / 4);
    assert_eq!(point.stop_retired_leases(), None);
    {
        let settings = point.settings();
        let c = &settings.clusters;
        assert_eq!(c.replaced.len(), 1);
        assert!(c.replaced[0].1.lease.is_stopped());
        assert!(Leaked(c.replaced[0].1) == first);
    }
    // The same limit again changes nothing.
    registry.set_policy("cluster.slots", policy("b")).unwrap();
    assert!(point.compiled().cluster == Some(second));
    // A call that read the first policy long ago can still ask its slot.
    let _ = first.admits();

    // Every slot is counted in the point's memory.
    assert_eq!(point.cluster_slots(), 2);
    let bytes = point.memory_bytes();
    // Removing the limit retires the current slot in turn. A change after its
    // grace hands it to the chore (which the wheel may be running right now).
    registry.clear_policy("cluster.slots").unwrap();
    assert_eq!(point.memory_bytes(), bytes, "slots are kept, not freed");
    {
        let settings = point.settings();
        let c = &settings.clusters;
        assert!(c.current.is_none());
        let stopped: Vec<bool> = c
            .replaced
            .iter()
            .map(|(_, s)| s.lease.is_stopped())
            .collect();
        assert_eq!(stopped, [true, false], "the second is in its grace");
    }
    manual.advance(CLUSTER_GRACE);
    registry.clear_policy("cluster.slots").unwrap();
    assert_eq!(point.stop_retired_leases(), None);
    let settings = point.settings();
    let c = &settings.clusters;
    assert_eq!(c.replaced.len(), 2);
    assert!(c.replaced.iter().all(|(_, s)| s.lease.is_stopped()));
}

#[test]
fn the_policy_cell_publishes_kept_forms_and_reuses_equal_ones() {
    let cell = PolicyCell::<Compiled>::new();
    let mut kept = state::cell::Kept::new();
    assert!(cell.get().is_none(), "a new point has no rules");
    let ring: &'static Ring = Box::leak(Box::new(Ring::new(1, 1, 0, [0; TRACKED])));
    let form = |visits: u64| Compiled {
        rules: ACTIVE | R_VISITS,
        max_visits: visits,
        ring: Some(Leaked(ring)),
        ..Compiled::default()
    };
    cell.store(Some(form(5)), &mut kept);
    let five = cell.get().expect("published");
    assert_eq!((five.rules, five.max_visits), (ACTIVE | R_VISITS, 5));
    assert!(std::ptr::eq(five.ring(), ring));
    // Another ring is another form, whatever the thresholds.
    let other: &'static Ring = Box::leak(Box::new(Ring::new(1, 1, 0, [0; TRACKED])));
    assert!(
        form(5)
            != Compiled {
                ring: Some(Leaked(other)),
                ..form(5)
            }
    );
    let bytes = kept.heap_bytes();
    assert!(bytes >= std::mem::size_of::<Compiled>(), "{bytes}");
    cell.store(Some(form(6)), &mut kept);
    let six = cell.get().unwrap();
    assert_eq!(six.max_visits, 6);
    // A reader that loaded the first form still reads it, unchanged.
    assert_eq!(five.max_visits, 5);
    // Toggling back reuses the kept form instead of keeping another.
    cell.store(Some(form(5)), &mut kept);
    assert!(std::ptr::eq(cell.get().unwrap(), five));
    assert_eq!(kept.len(), 2);
    // Without rules the cell reads empty, and nothing more is kept.
    cell.store(None, &mut kept);
    assert!(cell.get().is_none());
    assert_eq!(kept.len(), 2);
    assert!(
        std::mem::size_of::<Compiled>() <= 160,
        "the guide (how it works): a kept form is about 160 bytes"
    );
}

#[test]
fn permit_meta_round_trips_every_field() {
    for slot in [Slot::None, Slot::Word, Slot::Spill] {
        for fine in [false, true] {
            for hang in [0, 7, 511, NO_HANG] {
                let m = Meta::new(slot, fine).with_hang(hang);
                assert_eq!((m.slot(), m.fine(), m.hang()), (slot, fine, hang));
                let m = m.with_slot(Slot::Word).with_fine(!fine);
                assert_eq!((m.slot(), m.fine(), m.hang()), (Slot::Word, !fine, hang));
            }
        }
    }
    assert_eq!(Meta::new(Slot::None, false).hang(), NO_HANG);
}

/// The guide (how it works): thresholds of 200 ms and more are measured on the timeline, shorter
/// ones (or a short burst span, or a short slow-call limit) on the tick counter.
#[test]
fn the_duration_unit_follows_the_shortest_threshold() {
    let clock = Clock::system();
    let fine = |p: Policy, slow: Option<Duration>| {
        let slot = slow.map(|d| BreakerSlot {
            imp: BreakerImpl::Sre(
                SreBreaker::new(Default::default(), crate::Instant::from_nanos(1)).unwrap(),
            ),
            slow_ns: Some(nanos(d)),
            slow_ticks: Some(clock.ns_to_ticks(nanos(d))),
            changed_at: crate::sync::AtomicU64::new(0),
            cancel_fails: false,
        });
        Compiled::needs_ticks(Some(&p), slot.as_ref())
    };
    let ms = Duration::from_millis;
    let timeouts = |t| Policy::builder().timeouts(t, 1).build().unwrap();
    let tokens = |rate, capacity| {
        Policy::builder()
            .token_bucket(rate, capacity)
            .build()
            .unwrap()
    };
    assert!(!fine(timeouts(ms(200)), None));
    assert!(fine(timeouts(ms(199)), None));
    assert!(!fine(tokens(1000.0, 200), None), "a 200 ms burst span");
    assert!(fine(tokens(1000.0, 199), None));
    assert!(!fine(timeouts(ms(500)), Some(ms(300))));
    assert!(
        fine(timeouts(ms(500)), Some(ms(50))),
        "a short slow-call limit"
    );
    // The thresholds are compiled in the chosen unit.
    let p = timeouts(ms(300));
    let ring: &'static Ring = Box::leak(Box::new(Ring::new(1, 1, 0, [0; TRACKED])));
    let compile = |p: &Policy| {
        let parts = Parts {
            ring: Some(ring),
            ..Parts::default()
        };
        Compiled::new(Some(p), parts, Compiled::needs_ticks(Some(p), None), &clock)
    };
    let c = compile(&p);
    assert_eq!(c.timeout, 300_000_000);
    let p = timeouts(ms(30));
    let c = compile(&p);
    assert_eq!(c.timeout, clock.ns_to_ticks(30_000_000));
}

#[test]
fn a_permit_is_five_words_and_its_result_no_larger() {
    // The point, the start, the hung-call slot, the form (through which the call's
    // end reaches the timeout, the breaker, the adaptive limit and the key's table
    // or override, and which the records of those stages box; see `extras`) and the
    // meta word: no space for a stage the policy does not use.
    assert_eq!(std::mem::size_of::<Permit<'static>>(), 40);
    assert_eq!(
        std::mem::size_of::<Result<Permit<'static>, Downgraded>>(),
        std::mem::size_of::<Downgraded>().max(40)
    );
}

/// A permit keeps its key's slot as two numbers (the key's fingerprint, and where
/// the slot is in its meta word) and rebuilds the hold from its form when the call
/// ends: every place a slot can be (under the key's override, in a tracked entry, in
/// the sketch of the keys past `max_keys`) is given back however the call ends, on
/// each entry that attaches a key (keys alone, with the plain rules, with a breaker).
#[test]
fn a_key_slot_goes_back_from_every_place_however_the_call_ends() {
    use crate::keys::{KeyOverride, KeyPolicy};
    let (_manual, registry) = manual_registry();
    let keys = || {
        KeyPolicy::builder()
            .max_concurrency(1)
            .max_keys(16)
            .override_rule("vip", KeyOverride::builder().max_concurrency(1).build())
            .build()
            .unwrap()
    };
    let sre = crate::BreakerPolicy::Sre {
        config: crate::breaker::SreConfig::default(),
        slow_call: None,
    };
    let names: Vec<String> = std::iter::once("vip".to_string())
        .chain((0..100).map(|i| format!("k{i}")))
        .collect();
    for (name, plain, breaker) in [
        ("unit.key_lean", false, false),
        ("unit.key_plain", true, false),
        ("unit.key_breaker", true, true),
    ] {
        let mut policy = Policy::builder().keys(keys());
        if plain {
            policy = policy.max_concurrency(1_000).max_exceptions(u64::MAX / 2);
        }
        registry.set_policy(name, policy.build().unwrap()).unwrap();
        if breaker {
            registry.set_breaker(name, sre).unwrap();
        }
        let p = registry.point(name).unwrap();
        // Failures would open the breaker, which then refuses calls before their keys.
        let ends: &[&str] = if breaker {
            &["ok", "cancelled"]
        } else {
            &["ok", "exception", "cancelled"]
        };
        for &end in ends {
            // A sketch cell may be shared by two keys: a key whose cells are taken is
            // refused, and only the others hold a slot.
            let held: Vec<(&String, Permit<'_>)> = names
                .iter()
                .filter_map(|k| p.enter_key(k.as_str()).ok().map(|permit| (k, permit)))
                .collect();
            let codes: Vec<u32> = held.iter().map(|(_, q)| q.meta.key_code()).collect();
            assert!(held.iter().all(|(_, q)| q.meta.has(Meta::KEY)), "{name}");
            assert_eq!(codes[0], 0, "{name}: vip holds under its override");
            assert!(codes.iter().any(|&c| c >= 2), "{name}: a tracked key");
            assert!(codes.contains(&1), "{name}: a key in the sketch");
            assert!(held.len() > 50, "{name}: {} keys held", held.len());
            for (k, _) in &held {
                assert!(
                    p.enter_key(k.as_str()).is_err(),
                    "{name}: {k} holds its slot"
                );
            }
            for (_, permit) in held {
                match end {
                    "ok" => permit.finish(false),
                    "exception" => permit.finish(true),
                    _ => drop(permit),
                }
            }
            // Every slot is back: each key runs again (and ends at once).
            for k in &names {
                let permit = p.enter_key(k.as_str());
                assert!(permit.is_ok(), "{name}, after {end}: {k} was given back");
            }
        }
    }
}

/// A point with a timeout rule and no traffic has no hung-call table and no sweep;
/// the first timed call makes both, and two empty sweeps in a row end the sweep again.
#[test]
fn the_hung_call_sweep_runs_only_while_timed_calls_come() {
    let (manual, registry) = manual_registry();
    let policy = Policy::builder()
        .timeouts(Duration::from_secs(4), 100)
        .build()
        .unwrap();
    registry.set_policy("sweep.idle", policy).unwrap();
    let point = registry.point("sweep.idle").unwrap();
    let state = || point.sweeping.state();
    assert!(point.hang.get().is_none(), "no table before a timed call");
    assert_eq!(
        state(),
        super::state::arming::IDLE,
        "no sweep without traffic"
    );
    let idle_bytes = point.memory_bytes();

    let permit = point.enter().unwrap();
    assert!(point.hang.get().is_some());
    assert_eq!(state(), super::state::arming::ARMED);
    assert!(
        point.memory_bytes() >= idle_bytes + 256,
        "the table and its first chunk are counted"
    );
    // A call in flight keeps it going; a hung one is counted once.
    assert_eq!(point.sweep_hung_calls(), Some(Duration::from_secs(1)));
    assert_eq!(state(), super::state::arming::ARMED);
    manual.advance(Duration::from_secs(5));
    // The sweep that marks the last call in flight finds none left: draining.
    assert!(point.sweep_hung_calls().is_some());
    assert_eq!(point.stats().totals.timeouts, 1);
    assert_eq!(state(), super::state::arming::DRAINING);
    permit.finish(false);
    assert_eq!(point.stats().totals.timeouts, 1, "not counted twice");
    // A timed call while draining keeps the sweep.
    let permit = point.enter().unwrap();
    assert_eq!(state(), super::state::arming::ARMED);
    assert!(point.sweep_hung_calls().is_some());
    permit.finish(false);
    assert!(point.sweep_hung_calls().is_some());
    assert_eq!(state(), super::state::arming::DRAINING);
    assert_eq!(point.sweep_hung_calls(), None);
    assert_eq!(state(), super::state::arming::IDLE);
    // The next timed call arms it from idle.
    point.enter().unwrap().finish(false);
    assert_eq!(state(), super::state::arming::ARMED);
    // Without a timeout rule the sweep ends at once.
    registry.clear_policy("sweep.idle").unwrap();
    assert_eq!(point.sweep_hung_calls(), None);
    assert_eq!(state(), super::state::arming::IDLE);
}

/// The sampler runs while calls come and stops after two empty samples; the next
/// call starts it again, and the calls made while it was stopped are not lost.
#[test]
fn the_sampler_stops_when_idle_and_loses_no_call() {
    use super::state::arming as state;
    let (manual, r) = manual_registry();
    let p = r.point("t.sampler").unwrap();
    assert_eq!(p.sampling.state(), state::IDLE);
    p.enter().unwrap().finish(false);
    assert_eq!(p.sampling.state(), state::ARMED);
    manual.advance(Duration::from_secs(1)); // samples second 0: one call
    assert_eq!(p.sampling.state(), state::ARMED);
    manual.advance(Duration::from_secs(1)); // nothing: draining
    assert_eq!(p.sampling.state(), state::DRAINING);
    manual.advance(Duration::from_secs(1)); // nothing again: stopped
    assert_eq!(p.sampling.state(), state::IDLE);
    // A call made after it stopped arms it again and lands in its own second.
    p.enter().unwrap().finish(true);
    manual.advance(Duration::from_secs(1));
    let visits: Vec<_> = p.seconds(4).iter().map(|s| s.visits).collect();
    assert_eq!(visits, [1, 0, 0, 1]);
    assert_eq!(p.seconds(4)[3].exceptions, 1);
    // A policy point's series agrees with its exact window.
    r.set_policy(
        "t.sampler",
        Policy::builder().max_visits(2).build().unwrap(),
    )
    .unwrap();
    for _ in 0..3 {
        let _ = p.enter().map(|permit| permit.finish(false));
    }
    manual.advance(Duration::from_secs(1));
    let last = p.seconds(1).pop().unwrap();
    assert_eq!((last.visits, last.passes, last.downgrades), (3, 2, 1));
    assert_eq!(last.downgrades_by_reason.get(crate::Reason::Visits), 1);
}

/// Issue of 2026-12-03 (100 000 points called once cost ~10% of a core, still 1.4%
/// 18 s later): once a point's timed calls have ended, its sweep has found nothing
/// twice and its sampler has closed its last second, the point holds no timer and no
/// hook of the clock, so it does no work however long the clock runs; a point never
/// called never arms anything. A hung call is still counted, and its sweep still
/// stops. The chores go to this test's own wheel, ticked with the manual clock.
#[test]
fn idle_points_hold_no_timer_and_do_no_work() {
    let (wheel, ticker) = observe::chores::capture();
    let (manual, registry) = manual_registry();
    let policy = Policy::builder()
        .timeouts(Duration::from_secs(1), 100)
        .build()
        .unwrap();
    let points = |prefix: &str| -> Vec<&'static Point> {
        (0..100)
            .map(|i| {
                let name = format!("{prefix}.{i}");
                registry.set_policy(&name, policy.clone()).unwrap();
                registry.point(&name).unwrap()
            })
            .collect()
    };
    let (never, once) = (points("idle.never"), points("idle.once"));
    let hooks = || once[0].clock.hooks_before_move();
    // Runs the clock and the wheel together for `ms`, in ticks of 10 ms; returns how
    // many timers fired.
    let run = |ms: u64| -> usize {
        (0..ms / 10)
            .map(|_| {
                manual.advance(Duration::from_millis(10));
                ticker.tick().unwrap()
            })
            .sum()
    };
    let idle = |p: &Point| {
        p.sampling.state() == super::state::arming::IDLE
            && p.sweeping.state() == super::state::arming::IDLE
    };

    assert_eq!(run(40_000), 0, "points never called arm no timer");
    assert_eq!((wheel.len(), hooks()), (0, 0));
    for p in never.iter().chain(&once) {
        assert!(idle(p) && p.hang.get().is_none(), "{}", p.name());
    }

    for p in &once {
        p.enter().unwrap().finish(false);
    }
    assert_eq!(wheel.len(), 100, "a sweep each");
    assert_eq!(hooks(), 100, "a sampler each, on the manual clock");
    // Two sweeps each (250 ms apart) find nothing and stop; the sampler closes the
    // call's second and stops after two empty samples.
    assert_eq!(run(1_000), 200);
    assert_eq!((wheel.len(), hooks()), (0, 0), "at {:?}", manual.now());
    assert!(once.iter().all(|p| idle(p)));
    for p in &once {
        let visits: u64 = p
            .seconds(Point::SECONDS_KEPT)
            .iter()
            .map(|s| s.visits)
            .sum();
        assert_eq!(visits, 1, "the call is in exactly one second");
    }
    assert_eq!(run(60_000), 0, "nothing runs for idle points");
    assert_eq!((wheel.len(), hooks()), (0, 0));
    assert!(never.iter().chain(&once).all(|p| idle(p)));

    // A hung call is counted while in flight; then the sweep stops, call or not.
    let p = once[0];
    let held = p.enter().unwrap();
    assert_eq!((wheel.len(), hooks()), (1, 1));
    let sweeps = run(3_000);
    assert!((2..=8).contains(&sweeps), "{sweeps} sweeps");
    assert_eq!(p.stats().totals.timeouts, 1, "counted before it returns");
    assert_eq!((wheel.len(), hooks()), (0, 0), "at {:?}", manual.now());
    held.finish(false);
    assert_eq!(p.stats().totals.timeouts, 1, "not counted twice");
    assert_eq!(run(10_000), 0);
    assert_eq!((wheel.len(), hooks()), (0, 0));
    // The next call arms both again.
    p.enter().unwrap().finish(false);
    assert_eq!((wheel.len(), hooks()), (1, 1));
}

/// The same on the system clock, where the sampler runs on the wheel: once stopped,
/// a point holds no timer of its own; the histories of all of them wait in one queue
/// behind one timer, and a point dropped meanwhile leaves it.
#[test]
fn stopped_samplers_share_one_timer_to_free_their_histories() {
    let (wheel, ticker) = observe::chores::capture();
    let expiry = super::observe::expiry::capture();
    let registry = crate::Registry::with_clock(Clock::system());
    let policy = Policy::builder()
        .timeouts(Duration::from_secs(1), 100)
        .build()
        .unwrap();
    let points: Vec<_> = (0..100)
        .map(|i| {
            let name = format!("idle.system.{i}");
            registry.set_policy(&name, policy.clone()).unwrap();
            let point = registry.point_handle(&name).unwrap();
            point.enter().unwrap().finish(false);
            point
        })
        .collect();
    assert_eq!(wheel.len(), 200, "a sweep and a sampler each");
    // Wheel time, not the system clock's: two sweeps each, then three samples each
    // (the call's, and two that see nothing).
    let fired = ticker.advance(400).unwrap();
    assert_eq!(fired, 500);
    assert_eq!(wheel.len(), 1, "the queue's one timer, for all of them");
    assert_eq!(expiry.0.lock().unwrap().live(), 100);
    assert!(points
        .iter()
        .all(|p| p.sampling.state() == super::state::arming::IDLE));
    // The queue's runs are due in 32 s of real time: here they find nothing due.
    assert!(ticker.advance(6_000).unwrap() <= 2);
    assert_eq!(wheel.len(), 1);
    // A run for a point frees its history (every second of it is old by then).
    let p = &points[0];
    let kept = |p: &Point| {
        let series = p.seconds.lock().unwrap();
        series.as_ref().map_or(0, |s| s.seconds_kept())
    };
    assert_eq!(kept(p), 1, "the call's second");
    let held = p.memory_bytes();
    p.expire_history();
    assert_eq!(kept(p), 0);
    assert!(
        p.memory_bytes() < held,
        "{} -> {} bytes",
        held,
        p.memory_bytes()
    );
    // Dropped points take their entries out.
    drop(points);
    drop(registry);
    assert_eq!(
        expiry.0.lock().unwrap().live(),
        1,
        "the one already run stays"
    );
}

/// Issue bound: an idle point (made by `registry.point(name)`, never configured or
/// called) holds at most 512 bytes, by `memory_bytes()`.
#[test]
fn an_idle_point_holds_at_most_512_bytes() {
    let registry: &'static crate::Registry = Box::leak(Box::new(crate::Registry::with_clock(
        crate::Clock::system(),
    )));
    let point = registry.point("an.idle.point").unwrap();
    let bytes = point.memory_bytes();
    eprintln!(
        "size_of::<Point>() = {}, idle memory_bytes = {bytes}",
        std::mem::size_of::<Point>()
    );
    assert!(bytes <= 512, "{bytes} bytes");
}

/// Issue bound: a point with every rule of the point set, once called (its hung-call
/// table and durations made, its per-second series sampled), holds at most 4 KiB by
/// `memory_bytes()`. The example `point_memory` prints the resident growth too.
#[test]
fn a_point_with_every_rule_holds_at_most_4_kib_once_called() {
    let (manual, registry) = manual_registry();
    let policy = Policy::builder()
        .max_visits(1_000)
        .max_concurrency(100)
        .max_exceptions(100)
        .exception_rate(0.5, 10)
        .timeouts(Duration::from_secs(1), 100)
        .token_bucket(1_000.0, 100)
        .downgrade_percentage(50)
        .delay(Duration::from_secs(10), Some(Duration::from_secs(1)))
        .build()
        .unwrap();
    registry.set_policy("every.rule", policy).unwrap();
    let point = registry.point("every.rule").unwrap();
    let configured = point.memory_bytes();
    point.enter().unwrap().finish(false);
    manual.advance(Duration::from_secs(2));
    let called = point.memory_bytes();
    assert!(point.hang.get().is_some());
    assert!(!point.seconds(2).is_empty(), "the series was sampled");
    eprintln!("every rule: {configured} B configured, {called} B once called");
    assert!(called > configured, "the call's tables are counted");
    assert!(called <= 4096, "{called} bytes");
}

/// The flow word shares its cache line only with fields no successful call touches:
/// whatever 64-byte line holds it, the fields read by every call lie outside it.
#[test]
fn flow_word_has_only_cold_neighbours() {
    use std::mem::{offset_of, size_of};
    let word = offset_of!(Point, flow);
    let hot_end = offset_of!(Point, durations)
        + size_of::<crate::sync::OnceLock<super::state::durations::Durations>>();
    assert_eq!(
        offset_of!(Point, counters),
        hot_end,
        "counters follow the hot fields"
    );
    assert!(
        word - hot_end >= 56,
        "{} cold bytes before the flow word",
        word - hot_end
    );
    let cold_end = offset_of!(Point, queue);
    assert!(
        cold_end - (word + 8) >= 56,
        "{} cold bytes after the flow word",
        cold_end - word - 8
    );
}

/// A call that only the default SRE breaker judged (no policy, untimed) takes the
/// in-line closed path: its permit says so, and every way it can end reaches the
/// breaker as on the other paths (a timeout and an exception are failures, a success
/// is a success, a cancellation in time is not an outcome).
#[test]
fn a_breaker_only_call_reports_every_outcome_to_its_breaker() {
    use super::admit::permit::Outcome;
    let (_manual, registry) = manual_registry();
    let p = registry.point("unit.breaker_only").unwrap();
    let window = |p: &Point| {
        let b = registry.stats(p.name()).unwrap().breaker.unwrap();
        (b.window_successes, b.window_failures)
    };
    let mut expected = (0, 0);
    for (outcome, success, failure) in [
        (Outcome::Ok, 1, 0),
        (Outcome::Exception, 0, 1),
        (Outcome::TimedOut, 0, 1),
        (Outcome::Cancelled, 0, 0),
    ] {
        let mut slot = None;
        p.enter_breaker_in(&mut slot).unwrap();
        let permit = slot.as_ref().expect("a breaker-only call holds a permit");
        assert_ne!(
            permit.meta.bits() & Meta::SRE_ONLY,
            0,
            "the closed path's permit"
        );
        Permit::end_in(p, &mut slot, outcome);
        assert!(slot.is_none());
        expected = (expected.0 + success, expected.1 + failure);
        assert_eq!(window(p), expected, "after {outcome:?}");
    }
}

/// A timed call under a policy of the plain rules alone ends by `settle_ok` when it
/// went well and by `settle_any` otherwise (the outcome known only at run time, as in
/// tower's future): each end, in time and past the threshold, counts as its own, and
/// every one gives its concurrency slot back.
#[test]
fn a_timed_call_on_a_plain_policy_counts_every_way_it_ends() {
    use super::admit::permit::Outcome;
    let (manual, registry) = manual_registry();
    registry
        .set_policy(
            "unit.plain_timed",
            crate::Policy::builder()
                .max_concurrency(1)
                .timeouts(Duration::from_millis(100), u64::MAX / 2)
                .build()
                .unwrap(),
        )
        .unwrap();
    let p = registry.point("unit.plain_timed").unwrap();
    let mut expected = (0, 0, 0);
    for late in [false, true] {
        for (outcome, exception, timeout, cancelled) in [
            (Outcome::Ok, 0, 0, 0),
            (Outcome::Exception, 1, 0, 0),
            (Outcome::Cancelled, 0, 0, 1),
            (Outcome::TimedOut, 0, 1, 0),
        ] {
            let mut slot = None;
            p.enter_in(&mut slot).unwrap();
            let permit = slot.as_ref().expect("a timed call holds a permit");
            assert_eq!(
                permit.meta.bits() & Meta::EXTRA,
                0,
                "the plain path's permit"
            );
            assert_ne!(permit.start, 0, "a timed permit");
            // With `max_concurrency(1)`, a second call finds the slot taken.
            assert!(p.enter().is_err(), "the slot is held while the call runs");
            manual.advance(Duration::from_millis(if late { 150 } else { 50 }));
            // The outcome read at run time, not folded by the compiler.
            Permit::end_in(p, &mut slot, std::hint::black_box(outcome));
            assert!(slot.is_none());
            let late_timeout = u64::from(late && outcome != Outcome::TimedOut);
            expected = (
                expected.0 + exception,
                expected.1 + timeout + late_timeout,
                expected.2 + cancelled,
            );
            let t = p.stats().totals;
            assert_eq!(
                (t.exceptions, t.timeouts, t.cancelled),
                expected,
                "after {outcome:?}, late: {late}"
            );
        }
    }
}

/// The end of a timed call that completed well, settled without a call in the common
/// case (a threshold on the timeline, durations not measured): at its threshold it is
/// in time, a nanosecond past it late (one timeout), and either way its hung-call slot
/// goes back, so a sweep long after finds nothing to mark.
#[test]
fn a_timed_call_ending_well_is_late_only_past_its_threshold_and_frees_its_hang_slot() {
    let (manual, registry) = manual_registry();
    registry
        .set_policy(
            "unit.timed_ok",
            crate::Policy::builder()
                .max_concurrency(4)
                .timeouts(Duration::from_secs(1), u64::MAX / 2)
                .build()
                .unwrap(),
        )
        .unwrap();
    let p = registry.point("unit.timed_ok").unwrap();
    for (ran, timeouts) in [
        (1_000_000_000, 0),
        (1_000_000_001, 1),
        (5, 1),
        (2_000_000_000, 2),
    ] {
        let mut slot = None;
        p.enter_in(&mut slot).unwrap();
        let permit = slot.as_ref().expect("a timed call holds a permit");
        assert!(!permit.meta.fine(), "a threshold on the timeline");
        assert_ne!(permit.meta.hang(), NO_HANG, "registered as a possible hang");
        manual.advance(Duration::from_nanos(ran));
        Permit::finish_in(p, &mut slot, false);
        assert_eq!(p.stats().totals.timeouts, timeouts, "after {ran} ns");
    }
    let table = p.hang.get().expect("made by the first timed call");
    assert_eq!(
        table.sweep(u64::MAX / 2, 1),
        0,
        "every call gave its hung-call slot back"
    );
    assert_eq!(p.flow.inflight(), 0);
}
