//! The key table (`keys/table.rs` around `keys/shard.rs`): calls of one key that race
//! are admitted exactly as one thread would admit them in some order, tracked or
//! not, and a key's calls in flight never pass its limit.

use super::check;
use crate::keys::rule::{Rule, NO_INFLIGHT_LIMIT};
use crate::keys::table::{KeyTable, OverrideCell};
use crate::keys::text::KeyText;
use crate::limit::Gcra;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const NOW: u64 = 5_000_000_000;

/// A bucket of one token a minute holding `burst` (frozen: no refill in a model).
fn rule(burst: u64, max_inflight: u32) -> Rule {
    Rule {
        gcra: Some(Gcra::per_second(1.0 / 60.0, burst)),
        max_inflight,
        max_wait: 0,
        held: false,
    }
}

fn table() -> &'static KeyTable {
    Box::leak(Box::new(KeyTable::new(16)))
}

/// `threads` calls of key `fp` at once; returns how many were admitted.
fn race(t: &'static KeyTable, fp: u64, r: Rule, threads: usize) -> usize {
    let handles: Vec<_> = (0..threads)
        .map(|_| thread::spawn(move || t.admit(fp, &r, NOW, || KeyText::EMPTY).is_ok()))
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|ok| *ok)
        .count()
}

/// Three calls of a tracked key with a burst of two: exactly two are admitted.
#[test]
fn a_tracked_key_admits_exactly_its_burst() {
    check(|| {
        crate::sync::new_execution();
        let t = table();
        // Tracked already: one call admitted before the race.
        assert!(t
            .admit(7, &rule(3, NO_INFLIGHT_LIMIT), NOW, || KeyText::EMPTY)
            .is_ok());
        assert_eq!(race(t, 7, rule(3, NO_INFLIGHT_LIMIT), 3), 2);
    });
}

/// A key not tracked (the table is full of hotter keys): still never more than its
/// burst.
#[test]
fn an_untracked_key_never_passes_its_burst() {
    check(|| {
        crate::sync::new_execution();
        let t = table();
        let r = rule(2, NO_INFLIGHT_LIMIT);
        for k in 100..116u64 {
            for _ in 0..3 {
                let _ = t.admit(k << 32 | k, &r, NOW, || KeyText::EMPTY);
            }
        }
        let admitted = race(t, 1 << 40 | 9, r, 3);
        assert_eq!(admitted, 2, "{admitted} admitted");
        assert_eq!(t.stats().tracked, 16);
        assert_eq!(
            t.stats().untracked_passes,
            2,
            "the raced key was not tracked"
        );
    });
}

/// Two threads enter and leave a key with one slot, twice each: never two in
/// flight, and the slot is back at the end.
#[test]
fn a_key_never_has_more_calls_in_flight_than_its_limit() {
    check(|| {
        crate::sync::new_execution();
        let t = table();
        let r = Rule {
            gcra: None,
            max_inflight: 1,
            max_wait: 0,
            held: false,
        };
        let inside = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let inside = inside.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        if let Ok(Some(place)) = t.admit(3, &r, NOW, || KeyText::EMPTY) {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two in flight");
                            inside.fetch_sub(1, Ordering::SeqCst);
                            t.release(3, place);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(matches!(
            t.admit(3, &r, NOW, || KeyText::EMPTY),
            Ok(Some(_))
        ));
    });
}

/// An overridden value: its own cell, exactly its burst across threads.
#[test]
fn an_override_admits_exactly_its_burst() {
    check(|| {
        crate::sync::new_execution();
        let cell: &'static OverrideCell = Box::leak(Box::new(OverrideCell::new("vip")));
        let r = rule(2, NO_INFLIGHT_LIMIT);
        let handles: Vec<_> = (0..3)
            .map(|_| thread::spawn(move || cell.admit(&r, NOW).is_ok()))
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|ok| *ok)
            .count();
        assert_eq!(admitted, 2);
    });
}

/// Three calls of a key with a burst of one that may wait 150 s for a token coming
/// every 60 s: one runs at once and the two others get the next two tokens, one each
/// (waits of 60 s and 120 s), whatever the order.
#[test]
fn waiting_calls_reserve_distinct_tokens() {
    use crate::keys::rule::Refusal;
    check(|| {
        crate::sync::new_execution();
        let t = table();
        let r = Rule {
            max_wait: 150_000_000_000,
            ..rule(1, NO_INFLIGHT_LIMIT)
        };
        let handles: Vec<_> = (0..3)
            .map(|_| thread::spawn(move || t.admit(5, &r, NOW, || KeyText::EMPTY)))
            .collect();
        let mut got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort_by_key(|g| match g {
            Ok(_) => 0,
            Err(Refusal::Wait(ns)) => *ns,
            Err(_) => u64::MAX,
        });
        assert_eq!(
            got,
            [
                Ok(None),
                Err(Refusal::Wait(60_000_000_000)),
                Err(Refusal::Wait(120_000_000_000))
            ]
        );
    });
}
