//! Concurrency: `max_concurrency(n)` never has more than `n` calls in flight (the
//! callers' own count and `peak_concurrency`): plain, while the policy is swapped, and
//! with a delay rule whose probes arrive while the limit is still full, and with a
//! queue whose waiters take the freed slots while the policy is swapped (served oldest
//! first, and newest first while the order changes). Through
//! `enter`/`finish`, a sync `#[downgrade]` fn and an `async fn` with `#[downgrade]`.
//!
//! With a classic breaker offering more half-open probes than the limit has slots
//! (`max_concurrency(2)`, 5 probes): the calls racing for the probes never have more
//! than 2 in flight, exactly `min(2, T)` are admitted, the others are refused for
//! `Concurrency` or `BreakerOpen`, and the probes refused by the limit free their
//! breaker slots (the `5 - min(2, T)` probes left are admitted one by one and close
//! the breaker).

use crate::support::*;
use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::retry::Backoff;
use resilience_runtime::{
    downgrade, registry, BreakerPolicy, BreakerState, Point, Policy, QueueOrder, Reason,
};
use std::sync::Arc;
use std::time::Duration;

sync_points!(S_C1: s_c1_1 "fn.c1.1", s_c1_2 "fn.c1.2", s_c1_4 "fn.c1.4", s_c1_8 "fn.c1.8", s_c1_16 "fn.c1.16", s_c1_64 "fn.c1.64");
sync_points!(S_C3: s_c3_1 "fn.c3.1", s_c3_2 "fn.c3.2", s_c3_4 "fn.c3.4", s_c3_8 "fn.c3.8", s_c3_16 "fn.c3.16", s_c3_64 "fn.c3.64");
sync_points!(S_C1SWAP: s_c1swap_1 "fn.c1swap.1", s_c1swap_2 "fn.c1swap.2", s_c1swap_4 "fn.c1swap.4", s_c1swap_8 "fn.c1swap.8", s_c1swap_16 "fn.c1swap.16", s_c1swap_64 "fn.c1swap.64");
sync_points!(S_C3SWAP: s_c3swap_1 "fn.c3swap.1", s_c3swap_2 "fn.c3swap.2", s_c3swap_4 "fn.c3swap.4", s_c3swap_8 "fn.c3swap.8", s_c3swap_16 "fn.c3swap.16", s_c3swap_64 "fn.c3swap.64");
sync_points!(S_C1DELAY: s_c1delay_1 "fn.c1delay.1", s_c1delay_2 "fn.c1delay.2", s_c1delay_4 "fn.c1delay.4", s_c1delay_8 "fn.c1delay.8", s_c1delay_16 "fn.c1delay.16", s_c1delay_64 "fn.c1delay.64");
sync_points!(S_C3DELAY: s_c3delay_1 "fn.c3delay.1", s_c3delay_2 "fn.c3delay.2", s_c3delay_4 "fn.c3delay.4", s_c3delay_8 "fn.c3delay.8", s_c3delay_16 "fn.c3delay.16", s_c3delay_64 "fn.c3delay.64");
async_points!(A_C1: a_c1_1 "async.c1.1", a_c1_2 "async.c1.2", a_c1_4 "async.c1.4", a_c1_8 "async.c1.8", a_c1_16 "async.c1.16", a_c1_64 "async.c1.64");
async_points!(A_C3: a_c3_1 "async.c3.1", a_c3_2 "async.c3.2", a_c3_4 "async.c3.4", a_c3_8 "async.c3.8", a_c3_16 "async.c3.16", a_c3_64 "async.c3.64");
async_points!(A_C1SWAP: a_c1swap_1 "async.c1swap.1", a_c1swap_2 "async.c1swap.2", a_c1swap_4 "async.c1swap.4", a_c1swap_8 "async.c1swap.8", a_c1swap_16 "async.c1swap.16", a_c1swap_64 "async.c1swap.64");
async_points!(A_C3SWAP: a_c3swap_1 "async.c3swap.1", a_c3swap_2 "async.c3swap.2", a_c3swap_4 "async.c3swap.4", a_c3swap_8 "async.c3swap.8", a_c3swap_16 "async.c3swap.16", a_c3swap_64 "async.c3swap.64");
async_points!(A_C1DELAY: a_c1delay_1 "async.c1delay.1", a_c1delay_2 "async.c1delay.2", a_c1delay_4 "async.c1delay.4", a_c1delay_8 "async.c1delay.8", a_c1delay_16 "async.c1delay.16", a_c1delay_64 "async.c1delay.64");
async_points!(A_C3DELAY: a_c3delay_1 "async.c3delay.1", a_c3delay_2 "async.c3delay.2", a_c3delay_4 "async.c3delay.4", a_c3delay_8 "async.c3delay.8", a_c3delay_16 "async.c3delay.16", a_c3delay_64 "async.c3delay.64");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConcMode {
    /// `max_concurrency(n)` alone.
    Plain,
    /// Swapped with `max_concurrency(n).max_visits(u64::MAX / 2)` in a loop.
    Swap,
    /// `max_concurrency(n).delay(1 s, Some(10 ms))`: a trip starts a delay whose probes
    /// come every 10 ms, while the callers that filled the limit still hold it.
    Delay,
    /// `max_concurrency(n).queue(16, 20 ms)`: a call finding every slot taken waits
    /// for one (parked), swapped with the same plus `max_visits(u64::MAX / 2)`.
    Queue,
    /// The same queue served newest first, swapped with the same queue oldest first
    /// plus `max_visits(u64::MAX / 2)`: the waiters' order changes while they wait.
    NewestFirst,
}

/// `max_concurrency(n)`: at most `n` calls in flight, as the callers count them and as
/// the point's peak says.
fn concurrency_case(
    v: &Verdicts,
    at: At<'_>,
    target: impl FnOnce(&'static Point) -> Target<'static>,
    n: u64,
    mode: ConcMode,
) {
    let At {
        reg,
        name,
        shape,
        threads,
    } = at;
    let plain = Policy::builder().max_concurrency(n);
    let (policy, other, rule, load) = match mode {
        ConcMode::Plain | ConcMode::Swap => (
            plain.clone().build().unwrap(),
            plain.max_visits(u64::MAX / 2).build().unwrap(),
            format!("max_concurrency({n})"),
            Load::calls(threads, BRIEF),
        ),
        ConcMode::Queue => {
            let queued = plain.queue(16, Duration::from_millis(20));
            (
                queued.clone().build().unwrap(),
                queued.max_visits(u64::MAX / 2).build().unwrap(),
                format!("max_concurrency({n}).queue(16, 20ms)"),
                Load::calls(threads, BRIEF),
            )
        }
        ConcMode::NewestFirst => {
            let queued = plain.queue(16, Duration::from_millis(20));
            (
                queued
                    .clone()
                    .queue_order(QueueOrder::NewestFirst)
                    .build()
                    .unwrap(),
                queued.max_visits(u64::MAX / 2).build().unwrap(),
                format!("max_concurrency({n}).queue(16, 20ms).queue_order(NewestFirst)"),
                Load::calls(threads, BRIEF),
            )
        }
        ConcMode::Delay => {
            let p = plain
                .delay(Duration::from_secs(1), Some(RETRY))
                .build()
                .unwrap();
            (
                p.clone(),
                p,
                format!("max_concurrency({n}).delay(1s, Some({RETRY:?}))"),
                Load::timed(DELAY_RUN, DELAY_HOLD),
            )
        }
    };
    let swap = matches!(
        mode,
        ConcMode::Swap | ConcMode::Queue | ConcMode::NewestFirst
    );
    let case = Case::new(rule, shape, threads, swap);
    reg.set_policy(name, policy.clone()).unwrap();
    let p = reg.point(name).unwrap();
    let swapper = || {
        reg.set_policy(name, other.clone()).unwrap();
        reg.set_policy(name, policy.clone()).unwrap();
    };
    let seen = drive(
        target(p),
        threads,
        load,
        swap.then_some(&swapper as &(dyn Fn() + Sync)),
    );
    let s = p.stats();
    check_books(v, &case, &s, &seen);
    check_reasons(
        v,
        &case,
        &s,
        &[
            Reason::Concurrency,
            Reason::Delay,
            Reason::QueueFull,
            Reason::QueueTimeout,
        ],
    );
    if let Some(q) = s.queue {
        v.check(q.waiting == 0, || {
            format!("{case}: {} calls still waiting after the run", q.waiting)
        });
    }
    v.check(seen.max_inflight() <= n, || {
        format!(
            "{case}: the callers saw {} calls in flight at once, at most {n} may be",
            seen.max_inflight()
        )
    });
    v.check(s.peak_concurrency <= n, || {
        format!(
            "{case}: peak_concurrency {}, at most {n} may be",
            s.peak_concurrency
        )
    });
    if shape == Shape::AsyncMacro {
        v.check(s.totals.exceptions == 0, || {
            format!(
                "{case}: {} exceptions, but no call failed (dropped futures are cancelled calls)",
                s.totals.exceptions
            )
        });
    }
}

fn concurrency_enter(mode: ConcMode) {
    let v = Verdicts::default();
    for threads in THREADS {
        for n in [1, 3] {
            let reg = system_registry();
            let name = format!("concurrency.{mode:?}.{n}.{threads}");
            concurrency_case(
                &v,
                At {
                    reg,
                    name: &name,
                    shape: Shape::Enter,
                    threads,
                },
                Target::Enter,
                n,
                mode,
            );
        }
    }
    v.conclude();
}

#[test]
fn concurrency_is_never_exceeded() {
    concurrency_enter(ConcMode::Plain);
}

#[test]
fn concurrency_is_never_exceeded_while_the_policy_is_swapped() {
    concurrency_enter(ConcMode::Swap);
}

#[test]
fn concurrency_is_never_exceeded_by_delay_probes() {
    concurrency_enter(ConcMode::Delay);
}

#[test]
fn concurrency_is_never_exceeded_by_queue_waiters_while_the_policy_is_swapped() {
    concurrency_enter(ConcMode::Queue);
}

#[test]
fn concurrency_is_never_exceeded_by_newest_first_waiters_while_the_order_changes() {
    concurrency_enter(ConcMode::NewestFirst);
}

type MacroTable<F> = [(&'static [(F, &'static str); 6], u64, ConcMode); 6];

const SYNC_CONCURRENCY: MacroTable<SyncFn> = [
    (&S_C1, 1, ConcMode::Plain),
    (&S_C3, 3, ConcMode::Plain),
    (&S_C1SWAP, 1, ConcMode::Swap),
    (&S_C3SWAP, 3, ConcMode::Swap),
    (&S_C1DELAY, 1, ConcMode::Delay),
    (&S_C3DELAY, 3, ConcMode::Delay),
];

const ASYNC_CONCURRENCY: MacroTable<AsyncFn> = [
    (&A_C1, 1, ConcMode::Plain),
    (&A_C3, 3, ConcMode::Plain),
    (&A_C1SWAP, 1, ConcMode::Swap),
    (&A_C3SWAP, 3, ConcMode::Swap),
    (&A_C1DELAY, 1, ConcMode::Delay),
    (&A_C3DELAY, 3, ConcMode::Delay),
];

#[test]
fn downgrade_fn_concurrency_is_never_exceeded() {
    let v = Verdicts::default();
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, n, mode) in SYNC_CONCURRENCY {
            let (f, name) = table[k];
            concurrency_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::SyncMacro,
                    threads,
                },
                |_| Target::Sync(f),
                n,
                mode,
            );
        }
    }
    v.conclude();
}

#[test]
fn async_downgrade_concurrency_is_never_exceeded() {
    let v = Verdicts::default();
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, n, mode) in ASYNC_CONCURRENCY {
            let (f, name) = table[k];
            concurrency_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::AsyncMacro,
                    threads,
                },
                |_| Target::Async(f, rt),
                n,
                mode,
            );
        }
    }
    v.conclude();
}

// ---- concurrency and a half-open classic breaker ------------------------------------------

/// The slots of the half-open case: fewer than the breaker's probes.
const SLOTS: u64 = 2;
const PROBES: u64 = 5;
const FAILURES: u64 = 3;
const OPEN_WAIT: Duration = Duration::from_secs(5);

/// `max_concurrency(SLOTS)` and a classic breaker with `PROBES > SLOTS` half-open
/// probes, on a manual clock: `FAILURES` failures open the breaker, the open wait
/// passes, and `threads` calls race for the probes, each holding its permit until every
/// thread has tried. The concurrency rule is asked before the breaker and again by the
/// final compare-and-swap, after it; a probe refused there is cancelled, which frees
/// its half-open slot. So: at most `SLOTS` in flight, exactly `min(SLOTS, threads)`
/// admitted, every refusal `Concurrency` or `BreakerOpen`; after the probes succeed the
/// breaker is still half-open (it closes when all `PROBES` have succeeded), and exactly
/// the `PROBES - admitted` probes left are admitted one at a time, the last closing it.
fn half_open_case(v: &Verdicts, threads: usize) {
    let (reg, clock) = manual_registry();
    let name = format!("concurrency.half_open.{threads}");
    let case = Case::new(
        format!(
            "max_concurrency({SLOTS}) + classic breaker, {FAILURES} failures open it, {PROBES} half-open probes"
        ),
        Shape::Enter,
        threads,
        false,
    );
    reg.set_policy(
        &name,
        Policy::builder().max_concurrency(SLOTS).build().unwrap(),
    )
    .unwrap();
    reg.set_breaker(
        &name,
        BreakerPolicy::Classic(
            ClassicConfig::builder()
                .consecutive_failures(FAILURES)
                .open_wait(Backoff::fixed(OPEN_WAIT))
                .half_open_probes(PROBES)
                .build()
                .unwrap(),
        ),
    )
    .unwrap();
    let p = reg.point(&name).unwrap();
    let seen = Seen::default();
    let state = || p.stats().breaker.map(|b| b.state);
    for _ in 0..FAILURES {
        let r = one_call(p, &seen, true);
        v.check(r.is_ok(), || {
            format!("{case}: a closed breaker under a free limit refused a call: {r:?}")
        });
    }
    let open = one_call(p, &seen, false);
    v.check(open == Err(Reason::BreakerOpen), || {
        format!("{case}: after {FAILURES} failures the breaker must be open, the call got {open:?}")
    });
    clock.advance(OPEN_WAIT + Duration::from_millis(1));

    let race = race(p, threads, &seen);
    let want = SLOTS.min(threads as u64);
    let peak = p.stats().peak_concurrency;
    v.check(race.admitted() == want, || {
        format!(
            "{case}: {} of {threads} racing calls admitted half-open, exactly min({SLOTS}, {threads}) = {want} must be",
            race.admitted()
        )
    });
    v.check(seen.max_inflight() <= SLOTS, || {
        format!(
            "{case}: the callers saw {} calls in flight at once, at most {SLOTS} may be",
            seen.max_inflight()
        )
    });
    v.check(peak <= SLOTS, || {
        format!("{case}: peak_concurrency {peak}, at most {SLOTS} may be")
    });
    let (by_limit, by_breaker) = (
        race.refused_for(Reason::Concurrency),
        race.refused_for(Reason::BreakerOpen),
    );
    v.check(by_limit + by_breaker == race.refused.len() as u64, || {
        format!(
            "{case}: the racers were refused for {:?}, only Concurrency or BreakerOpen may refuse",
            race.refused
        )
    });
    race.finish(false);

    // `want` probes succeeded of `PROBES`: still half-open, with `PROBES - want` slots
    // left if every cancelled probe gave its slot back.
    let after = state();
    v.check(after == Some(BreakerState::HalfOpen), || {
        format!(
            "{case}: after {want} of {PROBES} probes succeeded the breaker must still be half-open, it is {after:?}"
        )
    });
    for k in want..PROBES {
        let r = one_call(p, &seen, false);
        v.check(r.is_ok(), || {
            format!(
                "{case}: probe {} of {PROBES}, alone, was refused ({r:?}): the {} cancelled probes did not all free their slots",
                k + 1,
                by_limit
            )
        });
        let now = state();
        let wanted = if k + 1 == PROBES {
            BreakerState::Closed
        } else {
            BreakerState::HalfOpen
        };
        v.check(now == Some(wanted), || {
            format!(
                "{case}: after {} of {PROBES} probes succeeded the breaker must be {wanted:?}, it is {now:?}",
                k + 1
            )
        });
    }
    let s = p.stats();
    check_books(v, &case, &s, &seen);
    check_reasons(v, &case, &s, &[Reason::Concurrency, Reason::BreakerOpen]);
}

#[test]
fn concurrency_holds_while_a_half_open_breaker_offers_more_probes_than_slots() {
    let v = Verdicts::default();
    for threads in THREADS {
        half_open_case(&v, threads);
    }
    v.conclude();
}
