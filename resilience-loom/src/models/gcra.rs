//! The token bucket's cell (`limit/cell.rs` around `limit/gcra.rs`): concurrent takes
//! are exactly those of one thread taking them in some order, so the bucket never
//! hands out more than `capacity` plus what it refilled.

use super::check;
use crate::limit::cell::GcraCell;
use crate::limit::Gcra;
use loom::sync::Arc;
use loom::thread;

const NS: u64 = 1_000_000_000;
/// Some instant on the clock (ns).
const NOW: u64 = 5 * NS;
/// The first nanosecond at which a bucket of 15 a second has refilled one token:
/// 1/15 s is 66 666 666.67 ns (the bucket is exact: 200 000 000 units of 1/3 ns).
const ONE_TOKEN_LATER: u64 = NOW + 66_666_667;

/// 15 tokens a second, holding 2.
fn bucket() -> Gcra {
    Gcra::per_second(15.0, 2)
}

/// Three threads take one token each at the given times (ns) from a bucket full at
/// [`NOW`]; returns who got one, and the cell.
fn take_at(times: [u64; 3]) -> ([bool; 3], Arc<GcraCell>) {
    let g = bucket();
    let cell = Arc::new(GcraCell::new(&g, g.scaled(NOW)));
    let handles = times.map(|t| {
        let cell = cell.clone();
        thread::spawn(move || cell.try_take(&g, g.scaled(t), 1))
    });
    (handles.map(|h| h.join().unwrap()), cell)
}

/// What one thread taking them in `order` gets: who got a token, and the final arrival
/// time.
fn sequential(times: [u64; 3], order: [usize; 3]) -> ([bool; 3], u64) {
    let g = bucket();
    let mut tat = g.full(g.scaled(NOW));
    let mut got = [false; 3];
    for i in order {
        if let Some(next) = g.take(tat, g.scaled(times[i]), 1) {
            tat = next;
            got[i] = true;
        }
    }
    (got, tat)
}

const ORDERS: [[usize; 3]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

/// Three takes at the same instant from a bucket holding 2: exactly two succeed.
#[test]
fn same_instant_takes_exactly_the_capacity() {
    check(|| {
        let (got, cell) = take_at([NOW; 3]);
        assert_eq!(got.iter().filter(|&&g| g).count(), 2, "{got:?}");
        assert_eq!(bucket().take(cell.tat(), bucket().scaled(NOW), 1), None);
    });
}

/// Two takes at [`NOW`] and one a token's refill later: the outcome (who got a token,
/// and the arrival time left) is that of one thread taking them in some order, so at
/// most capacity + 1 = 3 pass (all three if the late take comes last, one if it comes
/// first: a take never refills the bucket for an earlier instant).
#[test]
fn takes_at_different_times_are_some_sequential_order() {
    let times = [NOW, NOW, ONE_TOKEN_LATER];
    // The rule the model checks against, on its own: in order, all three pass.
    assert_eq!(sequential(times, [0, 1, 2]).0, [true; 3]);
    check(move || {
        let (got, cell) = take_at(times);
        let outcome = (got, cell.tat());
        assert!(
            ORDERS.iter().any(|&o| sequential(times, o) == outcome),
            "{outcome:?} is no sequential order's"
        );
        assert!(got.iter().filter(|&&g| g).count() <= 3);
    });
}
