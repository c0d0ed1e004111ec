//! Exceptions and timeouts: `max_exceptions(N)` / `timeouts(_, N)` with `T` threads
//! doing one call at a time record at least `N` and at most `N - 1 + T`.

use crate::support::*;
use resilience_runtime::{Point, PointStats, Policy, Reason};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// `rule` with limit `n` in one window, every admitted call counted by the rule (an
/// exception or a timeout): with `threads` callers doing one call at a time, the
/// window ends with at least `n` and at most `n - 1 + threads` of them.
fn counted_rule_case(
    v: &Verdicts,
    rule: &str,
    policy: Policy,
    n: u64,
    reason: Reason,
    call: fn(&'static Point, &Seen),
    counted: fn(&PointStats) -> u64,
) {
    for threads in THREADS {
        let reg = system_registry();
        let name = format!("{rule}.{threads}");
        let case = Case::new(format!("{rule}({n})"), Shape::Enter, threads, false);
        in_one_window(v, &case, reg.clock(), || {
            reg.set_policy(&name, policy.clone()).unwrap();
            let p = reg.point(&name).unwrap();
            let seen = Arc::new(Seen::default());
            let start = Barrier::new(threads);
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let (seen, start) = (&*seen, &start);
                    s.spawn(move || {
                        start.wait();
                        let calls = CALLS / threads as u64;
                        for _ in 0..calls {
                            call(p, seen);
                        }
                        seen.calls.fetch_add(calls, Ordering::SeqCst);
                    });
                }
            });
            let s = p.stats();
            check_books(v, &case, &s, &seen);
            check_reasons(v, &case, &s, &[reason]);
            let got = counted(&s);
            let most = n - 1 + threads as u64;
            v.check((n..=most).contains(&got), || {
                format!(
                    "{case}: the window holds {got} {reason:?}, it must hold {n}..={most} (N - 1 + T)"
                )
            });
            v.check(got == seen.admitted(), || {
                format!(
                    "{case}: every one of the {} admitted calls is counted by the rule, but {got} are",
                    seen.admitted()
                )
            });
        });
    }
}

#[test]
fn exceptions_stop_at_the_limit_plus_calls_in_flight() {
    const N: u64 = 100;
    let v = Verdicts::default();
    counted_rule_case(
        &v,
        "max_exceptions",
        Policy::builder()
            .max_exceptions(N)
            .window(1, WINDOW)
            .build()
            .unwrap(),
        N,
        Reason::Exceptions,
        |p, seen| match p.enter() {
            Ok(permit) => {
                let inside = seen.inside();
                hold_sync(Hold::Brief, 0);
                drop(inside);
                permit.finish(true);
            }
            Err(d) => seen.refused(d.reason()),
        },
        |s| s.totals.exceptions,
    );
    v.conclude();
}

#[test]
fn timeouts_stop_at_the_limit_plus_calls_in_flight() {
    const N: u64 = 50;
    let v = Verdicts::default();
    counted_rule_case(
        &v,
        "timeouts(50us)",
        Policy::builder()
            .timeouts(Duration::from_micros(50), N)
            .window(1, WINDOW)
            .build()
            .unwrap(),
        N,
        Reason::Timeouts,
        |p, seen| match p.enter() {
            Ok(permit) => {
                let inside = seen.inside();
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
                drop(inside);
                permit.finish(false);
            }
            Err(d) => seen.refused(d.reason()),
        },
        |s| s.totals.timeouts,
    );
    v.conclude();
}
