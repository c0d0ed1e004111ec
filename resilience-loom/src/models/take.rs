//! The retry budget's step (`retry/take.rs`): takes that race never pass the limit,
//! and every take that says yes is counted.

use super::check;
use crate::retry::take::take_below;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Three threads take at once with these limits (each asks with the allowance it
/// computed); returns who got one, and the final count.
fn race(start: u64, limits: [u64; 3]) -> ([bool; 3], u64) {
    let counter = Arc::new(AtomicU64::new(start));
    let handles = limits.map(|limit| {
        let counter = counter.clone();
        thread::spawn(move || take_below(&counter, limit))
    });
    let got = handles.map(|h| h.join().unwrap());
    (got, counter.load(Ordering::Relaxed))
}

/// Three retries ask a budget with room for two: exactly two are allowed.
#[test]
fn room_for_two_allows_exactly_two() {
    check(|| {
        let (got, count) = race(5, [7, 7, 7]);
        assert_eq!(got.iter().filter(|g| **g).count(), 2);
        assert_eq!(count, 7);
    });
}

/// Askers that computed different allowances (calls deposited between their reads):
/// the count never passes the largest, every yes is counted, and an asker whose
/// allowance was already used up is refused.
#[test]
fn different_allowances_never_pass_the_largest() {
    check(|| {
        let limits = [1, 2, 3];
        let (got, count) = race(0, limits);
        let yes = got.iter().filter(|g| **g).count() as u64;
        assert_eq!(yes, count, "every yes is one taken");
        assert!(count <= 3);
        // The asker with the largest allowance is never refused while below it.
        assert!(got[2], "{got:?}");
    });
}

/// No room: nobody is allowed and nothing is counted.
#[test]
fn no_room_allows_none() {
    check(|| {
        let (got, count) = race(4, [4, 3, 0]);
        assert_eq!(got, [false; 3]);
        assert_eq!(count, 4);
    });
}
