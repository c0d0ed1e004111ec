//! Token bucket.
//!
//! * On a manual clock: a frozen bucket admits exactly its capacity, also while
//!   another thread keeps swapping the policy for one with the same bucket (plus a
//!   concurrency rule that never trips); a clock advanced by `T` while the calls run
//!   admits at most `capacity + floor(rate * T)`; refill is exact; a new, larger bucket
//!   admits the very next call.
//! * Through a sync `#[downgrade]` fn and an `async fn` with `#[downgrade]` (the global
//!   registry, on the system clock): `token_bucket(0.001, 500)`, one token per 1000 s
//!   and so no refill while the case runs, admits exactly 500, with and without the
//!   policy swapped. The async futures dropped mid-flight took their tokens: the
//!   admissions are counted inside the body and must be the point's passes.

use crate::support::*;
use resilience_runtime::{downgrade, registry, Point, Policy, Reason};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

sync_points!(S_T500: s_t500_1 "fn.t500.1", s_t500_2 "fn.t500.2", s_t500_4 "fn.t500.4", s_t500_8 "fn.t500.8", s_t500_16 "fn.t500.16", s_t500_64 "fn.t500.64");
sync_points!(S_T500SWAP: s_t500swap_1 "fn.t500swap.1", s_t500swap_2 "fn.t500swap.2", s_t500swap_4 "fn.t500swap.4", s_t500swap_8 "fn.t500swap.8", s_t500swap_16 "fn.t500swap.16", s_t500swap_64 "fn.t500swap.64");
async_points!(A_T500: a_t500_1 "async.t500.1", a_t500_2 "async.t500.2", a_t500_4 "async.t500.4", a_t500_8 "async.t500.8", a_t500_16 "async.t500.16", a_t500_64 "async.t500.64");
async_points!(A_T500SWAP: a_t500swap_1 "async.t500swap.1", a_t500swap_2 "async.t500swap.2", a_t500swap_4 "async.t500swap.4", a_t500swap_8 "async.t500swap.8", a_t500swap_16 "async.t500swap.16", a_t500swap_64 "async.t500swap.64");

fn take(p: &'static Point) -> bool {
    p.enter().map(|permit| permit.finish(false)).is_ok()
}

/// `token_bucket(rate, capacity)`, and the same with `max_concurrency(1_000_000)` (the
/// same bucket: a swap between the two keeps it).
fn bucket_policies(rate: f64, capacity: u64) -> (Policy, Policy) {
    let b = Policy::builder().token_bucket(rate, capacity);
    (
        b.clone().build().unwrap(),
        b.max_concurrency(1_000_000).build().unwrap(),
    )
}

/// A bucket that cannot refill while the case runs admits exactly its `capacity`;
/// with `swap`, another thread keeps swapping the policy between
/// [`bucket_policies`]. The admissions are counted by the callers (inside the body for
/// the `#[downgrade]` shapes).
fn bucket_case(
    v: &Verdicts,
    at: At<'_>,
    target: impl FnOnce(&'static Point) -> Target<'static>,
    (rate, capacity): (f64, u64),
    swap: bool,
) {
    let At {
        reg,
        name,
        shape,
        threads,
    } = at;
    let clock = if reg.clock().is_manual() {
        "frozen clock"
    } else {
        "system clock"
    };
    let case = Case::new(
        format!("token_bucket({rate}, {capacity}), {clock}"),
        shape,
        threads,
        swap,
    );
    let (plain, other) = bucket_policies(rate, capacity);
    reg.set_policy(name, plain.clone()).unwrap();
    let p = reg.point(name).unwrap();
    let swapper = || {
        reg.set_policy(name, other.clone()).unwrap();
        reg.set_policy(name, plain.clone()).unwrap();
    };
    let seen = drive(
        target(p),
        threads,
        Load::calls(threads, BRIEF),
        swap.then_some(&swapper as &(dyn Fn() + Sync)),
    );
    let s = p.stats();
    check_books(v, &case, &s, &seen);
    check_reasons(v, &case, &s, &[Reason::TokenBucket]);
    v.check(seen.admitted() == capacity, || {
        format!(
            "{case}: {} of {} calls admitted, exactly {capacity} must be",
            seen.admitted(),
            seen.calls()
        )
    });
    if shape == Shape::AsyncMacro {
        // Every admitted future ran its body up to its first await (where the
        // admission is counted) and took a token; some were then dropped there.
        let cancelled = seen.admitted() - seen.completed().min(seen.admitted());
        v.check(seen.completed() < seen.admitted(), || {
            format!(
                "{case}: {} futures admitted, {} completed: none was dropped mid-flight \
                 holding its token, the case tests nothing",
                seen.admitted(),
                seen.completed()
            )
        });
        v.check(s.totals.passes == capacity, || {
            format!(
                "{case}: {} passes, exactly {capacity} tokens ({} completed calls + \
                 {cancelled} futures dropped mid-flight)",
                s.totals.passes,
                seen.completed()
            )
        });
        v.check(s.totals.exceptions == 0, || {
            format!(
                "{case}: {} exceptions, but no call failed (dropped futures are cancelled calls)",
                s.totals.exceptions
            )
        });
    }
}

fn frozen(swap: bool) {
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let name = format!("tokens.frozen.{swap}.{threads}");
        bucket_case(
            &v,
            At {
                reg,
                name: &name,
                shape: Shape::Enter,
                threads,
            },
            Target::Enter,
            (100.0, 50),
            swap,
        );
    }
    v.conclude();
}

#[test]
fn a_frozen_token_bucket_admits_exactly_its_capacity() {
    frozen(false);
}

#[test]
fn a_frozen_token_bucket_admits_exactly_its_capacity_while_the_policy_is_swapped() {
    frozen(true);
}

/// One token per 1000 s: no refill while a case runs.
const SLOW_BUCKET: (f64, u64) = (0.001, 500);

#[test]
fn downgrade_fn_token_bucket_admits_exactly_its_capacity() {
    let v = Verdicts::default();
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, swap) in [(&S_T500, false), (&S_T500SWAP, true)] {
            let (f, name) = table[k];
            bucket_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::SyncMacro,
                    threads,
                },
                |_| Target::Sync(f),
                SLOW_BUCKET,
                swap,
            );
        }
    }
    v.conclude();
}

#[test]
fn async_downgrade_token_bucket_admits_exactly_its_capacity() {
    let v = Verdicts::default();
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, swap) in [(&A_T500, false), (&A_T500SWAP, true)] {
            let (f, name) = table[k];
            bucket_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::AsyncMacro,
                    threads,
                },
                |_| Target::Async(f, rt),
                SLOW_BUCKET,
                swap,
            );
        }
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

/// `token_bucket(50_000, 20_000)` on the system clock, driven through `enter` for
/// about 200 ms at 1 to 16 threads, several rounds each, alone and beside threads
/// that keep every core busy: it never admits more than `capacity + rate * t`, with
/// `t` measured on the OS clock from just before the policy is set (the bucket
/// starts full then) to just after the last call. The bound is the `policy` module's, on real
/// time: the engine's cached millisecond timeline must never credit the bucket with
/// time that has not passed.
#[test]
fn a_refilling_token_bucket_on_the_system_clock_admits_at_most_capacity_plus_refill() {
    const ROUNDS: usize = 3;
    let (rate, capacity) = (50_000u64, 20_000u64);
    let v = Verdicts::default();
    for hungry in [0usize, 2] {
        // CPU-hungry neighbours: they spin until the cases are done.
        let busy = AtomicBool::new(true);
        std::thread::scope(|s| {
            for _ in 0..hungry {
                let busy = &busy;
                s.spawn(move || {
                    let mut x = 0u64;
                    while busy.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                });
            }
            for threads in [1usize, 2, 4, 8, 16] {
                for round in 0..ROUNDS {
                    let reg = system_registry();
                    let name = format!("tokens.system.{hungry}.{threads}.{round}");
                    let p = reg.point(&name).unwrap();
                    let admitted = AtomicU64::new(0);
                    let t0 = std::time::Instant::now();
                    reg.set_policy(
                        &name,
                        Policy::builder()
                            .token_bucket(rate as f64, capacity)
                            .build()
                            .unwrap(),
                    )
                    .unwrap();
                    // At least 200 ms, and on until the bucket has refused a call (it
                    // was emptied): on a loaded machine the threads may get too little
                    // of the CPU in 200 ms to empty it.
                    let until = t0 + Duration::from_millis(200);
                    let refused = AtomicBool::new(false);
                    std::thread::scope(|s| {
                        for _ in 0..threads {
                            let (admitted, refused) = (&admitted, &refused);
                            s.spawn(move || {
                                while std::time::Instant::now() < until
                                    || !refused.load(Ordering::Relaxed)
                                {
                                    if take(p) {
                                        admitted.fetch_add(1, Ordering::Relaxed);
                                    } else {
                                        refused.store(true, Ordering::Relaxed);
                                    }
                                }
                            });
                        }
                    });
                    let t = t0.elapsed();
                    let refill =
                        u64::try_from(u128::from(rate) * t.as_nanos() / 1_000_000_000).unwrap();
                    let bound = capacity + refill;
                    let admitted = admitted.load(Ordering::Relaxed);
                    v.check(admitted <= bound, || {
                        format!(
                            "token_bucket({rate}, {capacity}) [enter, {threads} threads, {hungry} \
                             hungry neighbours, round {round}]: {admitted} admitted over {t:?}, \
                             at most {capacity} + {refill} = {bound} may be ({} over)",
                            admitted - bound
                        )
                    });
                    v.check(admitted >= capacity, || {
                        format!("{threads} threads: only {admitted} admitted, the full bucket holds {capacity}")
                    });
                }
            }
            busy.store(false, Ordering::Relaxed);
        });
    }
    v.conclude();
}
