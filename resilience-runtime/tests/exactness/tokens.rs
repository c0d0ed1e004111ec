//! Token bucket, on a manual clock: a frozen bucket admits exactly its capacity; a
//! clock advanced by `T` while the calls run admits at most `capacity + floor(rate *
//! T)`; refill is exact; a new, larger bucket admits the very next call.

use crate::support::*;
use resilience_runtime::{Point, Policy, Reason};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

fn take(p: &'static Point) -> bool {
    p.enter().map(|permit| permit.finish(false)).is_ok()
}

#[test]
fn a_frozen_token_bucket_admits_exactly_its_capacity() {
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let name = format!("tokens.frozen.{threads}");
        reg.set_policy(
            &name,
            Policy::builder().token_bucket(100.0, 50).build().unwrap(),
        )
        .unwrap();
        let p = reg.point(&name).unwrap();
        let case = Case::new(
            "token_bucket(100, 50), frozen clock",
            Shape::Enter,
            threads,
            false,
        );
        let seen = drive(Target::Enter(p), threads, Load::calls(threads, BRIEF), None);
        let s = p.stats();
        check_books(&v, &case, &s, &seen);
        check_reasons(&v, &case, &s, &[Reason::TokenBucket]);
        v.check(seen.admitted() == 50, || {
            format!(
                "{case}: {} of {} calls admitted, exactly 50 must be",
                seen.admitted(),
                seen.calls()
            )
        });
    }
    v.conclude();
}

#[test]
fn a_refilling_token_bucket_admits_at_most_capacity_plus_refill() {
    const STEP: Duration = Duration::from_millis(1);
    const STEPS: u64 = 200;
    const CALLS_PER_STEP: u64 = CALLS / STEPS;
    let (rate, capacity) = (100u64, 50u64);
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, clock) = manual_registry();
        let name = format!("tokens.refill.{threads}");
        reg.set_policy(
            &name,
            Policy::builder()
                .token_bucket(rate as f64, capacity)
                .build()
                .unwrap(),
        )
        .unwrap();
        let p = reg.point(&name).unwrap();
        let case = Case::new(
            format!("token_bucket({rate}, {capacity}), clock advancing by {STEP:?} steps"),
            Shape::Enter,
            threads,
            false,
        );
        let seen = Seen::default();
        let stop = AtomicBool::new(false);
        let made = AtomicU64::new(0);
        let start = Barrier::new(threads + 1);
        let load = Load::calls(threads, Hold::None);
        let advanced = std::thread::scope(|s| {
            for _ in 0..threads {
                let (seen, stop, made, start) = (&seen, &stop, &made, &start);
                s.spawn(move || {
                    start.wait();
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        made.fetch_add(1, Ordering::Relaxed);
                        enter_call(p, seen, i, load);
                        i += 1;
                    }
                    seen.calls.fetch_add(i, Ordering::SeqCst);
                });
            }
            // The clock moves one step per `CALLS_PER_STEP` calls, so that calls are
            // made all along.
            start.wait();
            let mut advanced = Duration::ZERO;
            for step in 1..=STEPS {
                while made.load(Ordering::Relaxed) < step * CALLS_PER_STEP {
                    std::thread::yield_now();
                }
                clock.advance(STEP);
                advanced += STEP;
            }
            stop.store(true, Ordering::Relaxed);
            advanced
        });
        let s = p.stats();
        check_books(&v, &case, &s, &seen);
        check_reasons(&v, &case, &s, &[Reason::TokenBucket]);
        let refill = u64::try_from(u128::from(rate) * advanced.as_nanos() / 1_000_000_000).unwrap();
        let bound = capacity + refill;
        v.check(seen.admitted() <= bound, || {
            format!(
                "{case}: {} of {} calls admitted over {advanced:?}, at most {capacity} + {refill} = {bound} may be",
                seen.admitted(),
                seen.calls()
            )
        });
        v.check(seen.admitted() >= capacity, || {
            format!(
                "{case}: only {} of {} calls admitted, the full bucket alone holds {capacity}",
                seen.admitted(),
                seen.calls()
            )
        });
    }
    v.conclude();
}

#[test]
fn token_refill_is_exact() {
    let (reg, clock) = manual_registry();
    reg.set_policy(
        "tokens.exact",
        Policy::builder().token_bucket(15.0, 3).build().unwrap(),
    )
    .unwrap();
    let p = reg.point("tokens.exact").unwrap();
    let first: Vec<bool> = (0..4).map(|_| take(p)).collect();
    clock.advance(Duration::from_millis(200));
    let second: Vec<bool> = (0..4).map(|_| take(p)).collect();
    assert_eq!(
        (first.as_slice(), second.as_slice()),
        (&[true, true, true, false][..], &[true, true, true, false][..]),
        "token_bucket(15, 3) [enter/finish, 1 thread]: 3 tokens, 4th refused; then exactly 200 ms refill 15/s x 0.2 s = 3 tokens, 4th refused"
    );
    let s = p.stats();
    assert_eq!(
        (
            s.totals.visits,
            s.totals.passes,
            s.totals.downgrades,
            s.concurrency
        ),
        (8, 6, 2, 0),
        "token_bucket(15, 3) [enter/finish, 1 thread]: books"
    );
}

#[test]
fn a_larger_token_bucket_admits_the_very_next_call() {
    let (reg, _clock) = manual_registry();
    let name = "tokens.rate_change";
    reg.set_policy(
        name,
        Policy::builder().token_bucket(1.0, 1).build().unwrap(),
    )
    .unwrap();
    let p = reg.point(name).unwrap();
    let drained = (take(p), take(p));
    assert_eq!(
        drained,
        (true, false),
        "token_bucket(1, 1) [enter/finish, 1 thread]: one token, then empty"
    );
    reg.set_policy(
        name,
        Policy::builder()
            .token_bucket(1e9, 1_000_000_000)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert!(
        take(p),
        "token_bucket(1, 1) exhausted, then token_bucket(1e9, 1e9) [enter/finish, 1 thread, clock not advanced]: the very next call was refused"
    );
    let s = p.stats();
    assert_eq!(
        (
            s.totals.visits,
            s.totals.passes + s.totals.downgrades,
            s.concurrency
        ),
        (3, 3, 0),
        "rate change [enter/finish, 1 thread]: books"
    );
}
