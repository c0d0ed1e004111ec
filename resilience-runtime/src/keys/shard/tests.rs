//! The shard against plain references: tracked keys exact, no key ever admitted
//! beyond its own bucket, eviction order, the untracked error bound, heavy hitters.

use super::*;
use crate::keys::fingerprint;
use crate::keys::policy::{KeyPolicy, KeyRule};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000_000_000_000;

fn rule(limit: u64, burst: Option<u64>, conc: Option<u64>) -> Rule {
    let p = KeyPolicy::builder()
        .limit(limit.max(1), Duration::from_secs(1))
        .build()
        .unwrap();
    p.compile(&KeyRule {
        limit: Some(limit),
        burst,
        max_concurrency: conc,
    })
}

fn text() -> KeyText {
    KeyText::EMPTY
}

#[test]
fn tracked_keys_follow_their_own_bucket_exactly() {
    let r = rule(10, Some(5), None);
    let mut s = Shard::new(64);
    let mut reference: HashMap<u64, KeyState> = HashMap::new();
    for step in 0..20_000u64 {
        let key = fingerprint(&(step * 7919 % 50));
        let now = T0 + step * MS / 3;
        let want = reference.entry(key).or_default().admit(&r, now).is_ok();
        let got = s.admit(key, &r, now, text).is_ok();
        assert_eq!(got, want, "step {step}");
    }
    assert_eq!(s.len(), 50);
    assert_eq!(s.untracked_passes + s.untracked_refused, 0);
}

#[test]
fn concurrency_slots_are_per_key_and_given_back() {
    let r = rule(1_000_000, None, Some(2));
    let mut s = Shard::new(16);
    let a = fingerprint("a");
    let b = fingerprint("b");
    let pa1 = s.admit(a, &r, T0, text).unwrap().unwrap();
    let _pa2 = s.admit(a, &r, T0, text).unwrap().unwrap();
    assert_eq!(s.admit(a, &r, T0, text), Err(Refusal::Concurrency));
    assert!(s.admit(b, &r, T0, text).is_ok());
    s.release(a, pa1);
    assert!(s.admit(a, &r, T0, text).is_ok());
}

#[test]
fn the_coldest_scanned_entry_makes_room_for_a_hotter_key() {
    let r = rule(1_000_000, None, None);
    let mut s = Shard::new(64);
    let keys: Vec<u64> = (0..64u64).map(|i| fingerprint(&i)).collect();
    // Three calls each, but key 5: one.
    for (i, k) in keys.iter().enumerate() {
        for _ in 0..if i == 5 { 1 } else { 3 } {
            s.admit(*k, &r, T0, text).unwrap();
        }
    }
    assert_eq!(s.len(), 64);
    let new = fingerprint("new");
    // Each call of the new key: it gets in exactly when its frequency (this call
    // counted) is more than twice the coldest scanned entry's plus one, and then the
    // coldest leaves.
    let mut calls = 0;
    loop {
        let hand = s.hand;
        let coldest = (0..VICTIMS)
            .map(|i| (hand + i) % 64)
            .min_by_key(|n| (s.frequency(s.entries()[*n].fp), *n))
            .unwrap();
        let (coldest_fp, theirs) = (
            s.entries()[coldest].fp,
            s.frequency(s.entries()[coldest].fp),
        );
        let mine = s.frequency(new) + 1;
        s.admit(new, &r, T0, text).unwrap();
        calls += 1;
        let tracked = s.find(new).is_some();
        assert_eq!(
            tracked,
            mine > 2 * theirs + 1,
            "call {calls}: {mine} against {theirs}"
        );
        if tracked {
            assert!(
                s.find(coldest_fp).is_none(),
                "the coldest scanned entry left"
            );
            break;
        }
        assert!(calls < 20, "a key called {calls} times never got in");
    }
    assert_eq!(s.evictions, 1);
    assert_eq!(s.len(), 64);
}

#[test]
fn keys_calling_equally_often_do_not_churn_the_table() {
    let r = rule(1_000_000_000, None, None);
    let mut s = Shard::new(64);
    // 100 000 keys, each called about once: none is worth a slot more than another.
    let mut now = T0;
    for i in 0..200_000u64 {
        now += 1000;
        s.admit(fingerprint(&(i % 100_000)), &r, now, text).unwrap();
    }
    // Under 5%: a uniform load moves few keys.
    assert!(s.evictions < 10_000, "{} evictions", s.evictions);
}

#[test]
fn an_entry_with_a_call_in_flight_is_never_replaced() {
    let r = rule(1_000_000, None, Some(10));
    let mut s = Shard::new(2);
    let a = fingerprint("a");
    let b = fingerprint("b");
    let held_a = s.admit(a, &r, T0, text).unwrap().unwrap();
    let held_b = s.admit(b, &r, T0, text).unwrap().unwrap();
    for i in 0..1000u64 {
        let k = fingerprint(&i);
        for _ in 0..5 {
            if let Ok(Some(p)) = s.admit(k, &r, T0, text) {
                s.release(k, p);
            }
        }
    }
    assert!(s.find(a).is_some() && s.find(b).is_some());
    s.release(a, held_a);
    s.release(b, held_b);
}

/// Every key's admitted calls, replayed through a bucket of its own: each must be
/// admitted there too (the sketch only ever errs towards refusing).
fn check_never_beyond(calls: &[(u64, u64, bool)], r: &Rule) {
    let mut own: HashMap<u64, KeyState> = HashMap::new();
    for (i, &(key, now, admitted)) in calls.iter().enumerate() {
        if admitted {
            let st = own.entry(key).or_default();
            assert!(
                st.admit(r, now).is_ok(),
                "call {i}: key admitted beyond its bucket"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_key_is_ever_admitted_beyond_its_bucket(
        cap in 1usize..24,
        keys in 2u64..200,
        limit in 1u64..20,
        burst in 1u64..10,
        steps in prop::collection::vec((0u64..1000, 0u64..40), 1..3000),
    ) {
        let r = rule(limit, Some(burst), None);
        let mut s = Shard::new(cap);
        let mut now = T0;
        let mut calls = Vec::new();
        for (k, dt) in steps {
            now += dt * MS;
            // Skewed: low numbers far more often.
            let key = fingerprint(&((k * k / 1000) % keys));
            let ok = s.admit(key, &r, now, text).is_ok();
            calls.push((key, now, ok));
        }
        check_never_beyond(&calls, &r);
    }

    #[test]
    fn no_key_ever_has_more_calls_in_flight_than_its_limit(
        cap in 1usize..16,
        keys in 2u64..100,
        conc in 1u64..4,
        steps in prop::collection::vec((0u64..100, any::<bool>()), 1..3000),
    ) {
        let r = rule(1_000_000_000, None, Some(conc));
        let mut s = Shard::new(cap);
        let mut held: Vec<(u64, Place)> = Vec::new();
        let mut inflight: HashMap<u64, u32> = HashMap::new();
        for (i, (k, end)) in steps.into_iter().enumerate() {
            if end && !held.is_empty() {
                let (key, p) = held.swap_remove(i % held.len());
                s.release(key, p);
                *inflight.get_mut(&key).unwrap() -= 1;
                continue;
            }
            let key = fingerprint(&(k % keys));
            if let Ok(Some(p)) = s.admit(key, &r, T0, text) {
                held.push((key, p));
                let n = inflight.entry(key).or_default();
                *n += 1;
                prop_assert!(u64::from(*n) <= conc, "key with {n} in flight, limit {conc}");
            }
        }
    }

    #[test]
    fn the_index_finds_what_it_holds_after_any_evictions(
        cap in 1usize..40,
        steps in prop::collection::vec(0u64..500, 1..4000),
    ) {
        let r = rule(1_000_000_000, None, None);
        let mut s = Shard::new(cap);
        for k in steps {
            s.admit(fingerprint(&k), &r, T0, text).unwrap();
            prop_assert!(s.len() <= cap);
            for (n, e) in s.entries().iter().enumerate() {
                prop_assert_eq!(s.find(e.fp), Some(n));
            }
        }
    }
}

#[test]
fn heavy_keys_are_found_among_a_million_distinct_ones() {
    let r = rule(1_000_000_000, None, None);
    let mut s = Shard::new(256);
    let heavy: Vec<u64> = (0..10u64)
        .map(|i| fingerprint(&format!("heavy-{i}")))
        .collect();
    let mut now = T0;
    for i in 0..1_000_000u64 {
        now += 1000;
        // Every third call is one of ten heavy keys, the others all distinct.
        let key = if i % 3 == 0 {
            heavy[(i / 3 % 10) as usize]
        } else {
            fingerprint(&(i + 1_000_000))
        };
        s.admit(key, &r, now, text).unwrap();
    }
    for h in &heavy {
        assert!(s.find(*h).is_some(), "a heavy key is tracked");
    }
    assert_eq!(s.len(), 256);
}

#[test]
fn untracked_keys_are_refused_early_within_the_stated_bound() {
    // 16 entries and rows of 32 cells for 64 keys each calling 200 times a second
    // against a limit of 1000: 48 keys are not tracked. The documented bound: a key
    // shares a cell with (48 - 1) / 32 others on average and is refused early with
    // probability at most ((47 / 32) / (1000 / 200 - 1))^2 = 13.5 %; so at most that
    // share of the calls (a key not sharing an overloaded cell in some row is never
    // refused once past its burst).
    let limit = 1000u64;
    let r = rule(limit, Some(limit), None);
    let mut s = Shard::new(16);
    let keys = 64u64;
    let calls = 400_000u64;
    let mut refused = 0u64;
    for i in 0..calls {
        let now = T0 + i * 78_125; // 12 800 calls a second in all
        if s.admit(fingerprint(&(i % keys)), &r, now, text).is_err() {
            refused += 1;
        }
    }
    assert!(s.untracked_passes > calls / 2, "most calls are untracked");
    let bound: f64 = ((47.0 / 32.0) / (1000.0 / 200.0 - 1.0_f64)).powi(2);
    assert!(
        (refused as f64) <= bound * calls as f64,
        "{refused} of {calls} refused, bound {bound}"
    );
}
