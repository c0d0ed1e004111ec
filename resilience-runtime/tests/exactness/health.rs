//! Exceptions and timeouts: `max_exceptions(N)` / `timeouts(_, N)` with `T` threads
//! (or tasks) doing one call at a time record at least `N` and at most `N - 1 + T`:
//! through `enter`/`finish`, also while another thread keeps swapping the policy for
//! one with the same rule and window (plus a concurrency rule that never trips); and,
//! for `max_exceptions`, through a sync `#[downgrade]` fn and an `async fn` with
//! `#[downgrade]` whose bodies return `Err` on every call (an async future dropped
//! mid-flight is a cancelled call, not an exception).

use crate::support::*;
use resilience_runtime::{downgrade, registry, Point, PointStats, Policy, PolicyBuilder, Reason};
use std::sync::Arc;
use std::time::{Duration, Instant};

sync_points!(failing S_E100: s_e100_1 "fn.e100.1", s_e100_2 "fn.e100.2", s_e100_4 "fn.e100.4", s_e100_8 "fn.e100.8", s_e100_16 "fn.e100.16", s_e100_64 "fn.e100.64");
async_points!(failing A_E100: a_e100_1 "async.e100.1", a_e100_2 "async.e100.2", a_e100_4 "async.e100.4", a_e100_8 "async.e100.8", a_e100_16 "async.e100.16", a_e100_64 "async.e100.64");

/// A rule counted by every admitted call that completes: its name and limit, the
/// policy with it in one window (and the same plus `max_concurrency(1_000_000)`, to
/// swap with), the reason it refuses with and what it counts.
struct Rule {
    name: &'static str,
    n: u64,
    policy: Policy,
    other: Policy,
    reason: Reason,
    counted: fn(&PointStats) -> u64,
}

impl Rule {
    fn new(
        name: &'static str,
        n: u64,
        rule: PolicyBuilder,
        reason: Reason,
        counted: fn(&PointStats) -> u64,
    ) -> Rule {
        Rule {
            name,
            n,
            policy: rule.clone().window(1, WINDOW).build().unwrap(),
            other: rule
                .max_concurrency(1_000_000)
                .window(1, WINDOW)
                .build()
                .unwrap(),
            reason,
            counted,
        }
    }
}

const EXCEPTIONS: u64 = 100;
const TIMEOUTS: u64 = 50;

fn exceptions_rule() -> Rule {
    Rule::new(
        "max_exceptions",
        EXCEPTIONS,
        Policy::builder().max_exceptions(EXCEPTIONS),
        Reason::Exceptions,
        |s| s.totals.exceptions,
    )
}

fn timeouts_rule() -> Rule {
    Rule::new(
        "timeouts(50us)",
        TIMEOUTS,
        Policy::builder().timeouts(Duration::from_micros(50), TIMEOUTS),
        Reason::Timeouts,
        |s| s.totals.timeouts,
    )
}

/// `rule` with limit `n` in one window, every admitted call that completes counted by
/// the rule (an exception or a timeout): with `threads` callers doing one call at a
/// time, the window ends with at least `n` and at most `n - 1 + threads` of them. With
/// `swap`, another thread keeps swapping the policy with `rule.other`.
fn counted_rule_case<'t>(
    v: &Verdicts,
    at: At<'_>,
    rule: &Rule,
    target: impl FnOnce(&'static Point) -> Target<'t>,
    swap: bool,
) {
    let At {
        reg,
        name,
        shape,
        threads,
    } = at;
    let (n, reason) = (rule.n, rule.reason);
    let case = Case::new(format!("{}({n})", rule.name), shape, threads, swap);
    in_one_window(v, &case, reg.clock(), || {
        reg.set_policy(name, rule.policy.clone()).unwrap();
        let p = reg.point(name).unwrap();
        let swapper = || {
            reg.set_policy(name, rule.other.clone()).unwrap();
            reg.set_policy(name, rule.policy.clone()).unwrap();
        };
        let seen = drive(
            target(p),
            threads,
            Load::calls(threads, BRIEF),
            swap.then_some(&swapper as &(dyn Fn() + Sync)),
        );
        let s = p.stats();
        check_books(v, &case, &s, &seen);
        check_reasons(v, &case, &s, &[reason]);
        let got = (rule.counted)(&s);
        let most = n - 1 + threads as u64;
        v.check((n..=most).contains(&got), || {
            format!(
                "{case}: the window holds {got} {reason:?}, it must hold {n}..={most} (N - 1 + T)"
            )
        });
        match shape {
            Shape::Enter | Shape::SyncMacro => {
                v.check(got == seen.admitted(), || {
                    format!(
                        "{case}: every one of the {} admitted calls is counted by the rule, but {got} are",
                        seen.admitted()
                    )
                });
                v.check(shape == Shape::Enter || seen.completed() == got, || {
                    format!(
                        "{case}: {} calls returned the body's Err, {got} exceptions counted",
                        seen.completed()
                    )
                });
            }
            _ => {
                // The futures dropped mid-flight were admitted but are not exceptions.
                v.check(got == seen.completed(), || {
                    format!(
                        "{case}: {} calls returned the body's Err (of {} admitted), {got} exceptions counted",
                        seen.completed(),
                        seen.admitted()
                    )
                });
            }
        }
    });
}

/// The exceptions rule's call through `enter`: every admitted call fails.
fn failing_call(p: &'static Point, seen: &Seen) {
    match p.enter() {
        Ok(permit) => {
            let inside = seen.inside();
            hold_sync(Hold::Brief, 0);
            drop(inside);
            permit.finish(true);
        }
        Err(d) => seen.refused(d.reason()),
    }
}

/// The timeouts rule's call through `enter`: every admitted call takes 200 µs.
fn slow_call(p: &'static Point, seen: &Seen) {
    match p.enter() {
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
    }
}

fn enter_case(rule: Rule, call: fn(&'static Point, &Seen), swap: bool) {
    let v = Verdicts::default();
    for threads in THREADS {
        let reg = system_registry();
        let name = format!("{}.{swap}.{threads}", rule.name);
        let p = reg.point(&name).unwrap();
        let call = move |seen: &Seen, _: u64, _: Load| call(p, seen);
        counted_rule_case(
            &v,
            At {
                reg,
                name: &name,
                shape: Shape::Enter,
                threads,
            },
            &rule,
            |_| Target::Call(&call),
            swap,
        );
    }
    v.conclude();
}

#[test]
fn exceptions_stop_at_the_limit_plus_calls_in_flight() {
    enter_case(exceptions_rule(), failing_call, false);
}

#[test]
fn exceptions_stop_at_the_limit_plus_calls_in_flight_while_the_policy_is_swapped() {
    enter_case(exceptions_rule(), failing_call, true);
}

#[test]
fn timeouts_stop_at_the_limit_plus_calls_in_flight() {
    enter_case(timeouts_rule(), slow_call, false);
}

#[test]
fn timeouts_stop_at_the_limit_plus_calls_in_flight_while_the_policy_is_swapped() {
    enter_case(timeouts_rule(), slow_call, true);
}

#[test]
fn downgrade_fn_exceptions_stop_at_the_limit_plus_calls_in_flight() {
    let v = Verdicts::default();
    let rule = exceptions_rule();
    for (k, threads) in THREADS.into_iter().enumerate() {
        let (f, name) = S_E100[k];
        counted_rule_case(
            &v,
            At {
                reg: registry(),
                name,
                shape: Shape::SyncMacro,
                threads,
            },
            &rule,
            |_| Target::Sync(f),
            false,
        );
    }
    v.conclude();
}

#[test]
fn async_downgrade_exceptions_stop_at_the_limit_plus_calls_in_flight() {
    let v = Verdicts::default();
    let rule = exceptions_rule();
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    for (k, threads) in THREADS.into_iter().enumerate() {
        let (f, name) = A_E100[k];
        counted_rule_case(
            &v,
            At {
                reg: registry(),
                name,
                shape: Shape::AsyncMacro,
                threads,
            },
            &rule,
            |_| Target::Async(f, rt),
            false,
        );
    }
    v.conclude();
}
