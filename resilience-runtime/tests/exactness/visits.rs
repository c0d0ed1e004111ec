//! Visits: `max_visits(N)` in one window admits exactly `min(N, calls)`, and `N = 0`
//! (the kill switch) admits nothing; also while another thread keeps swapping the
//! policy between two forms that share the window. Through `enter`/`finish`, a sync
//! `#[downgrade]` fn and an `async fn` with `#[downgrade]`.

use crate::support::*;
use resilience_runtime::{downgrade, registry, Point, Policy, Reason};
use std::sync::Arc;

sync_points!(S_V0: s_v0_1 "fn.v0.1", s_v0_2 "fn.v0.2", s_v0_4 "fn.v0.4", s_v0_8 "fn.v0.8", s_v0_16 "fn.v0.16", s_v0_64 "fn.v0.64");
sync_points!(S_V1000: s_v1000_1 "fn.v1000.1", s_v1000_2 "fn.v1000.2", s_v1000_4 "fn.v1000.4", s_v1000_8 "fn.v1000.8", s_v1000_16 "fn.v1000.16", s_v1000_64 "fn.v1000.64");
sync_points!(S_VSWAP: s_vswap_1 "fn.vswap.1", s_vswap_2 "fn.vswap.2", s_vswap_4 "fn.vswap.4", s_vswap_8 "fn.vswap.8", s_vswap_16 "fn.vswap.16", s_vswap_64 "fn.vswap.64");
async_points!(A_V0: a_v0_1 "async.v0.1", a_v0_2 "async.v0.2", a_v0_4 "async.v0.4", a_v0_8 "async.v0.8", a_v0_16 "async.v0.16", a_v0_64 "async.v0.64");
async_points!(A_V1000: a_v1000_1 "async.v1000.1", a_v1000_2 "async.v1000.2", a_v1000_4 "async.v1000.4", a_v1000_8 "async.v1000.8", a_v1000_16 "async.v1000.16", a_v1000_64 "async.v1000.64");
async_points!(A_VSWAP: a_vswap_1 "async.vswap.1", a_vswap_2 "async.vswap.2", a_vswap_4 "async.vswap.4", a_vswap_8 "async.vswap.8", a_vswap_16 "async.vswap.16", a_vswap_64 "async.vswap.64");

fn visits_policy(max: u64, with_concurrency: bool) -> Policy {
    let b = Policy::builder().max_visits(max);
    let b = if with_concurrency {
        b.max_concurrency(10_000)
    } else {
        b
    };
    b.window(1, WINDOW).build().unwrap()
}

/// `max_visits(max)` in one window: exactly `min(max, calls)` admitted; with `swap`,
/// another thread keeps swapping the policy for one with the same visits rule and
/// window (plus a concurrency rule that never trips).
fn visits_case(
    v: &Verdicts,
    at: At<'_>,
    target: impl FnOnce(&'static Point) -> Target<'static>,
    max: u64,
    swap: bool,
) {
    let At {
        reg,
        name,
        shape,
        threads,
    } = at;
    let case = Case::new(format!("max_visits({max})"), shape, threads, swap);
    let (plain, other) = (visits_policy(max, false), visits_policy(max, true));
    in_one_window(v, &case, reg.clock(), || {
        reg.set_policy(name, plain.clone()).unwrap();
        let p = reg.point(name).unwrap();
        let swapper = || {
            reg.set_policy(name, other.clone()).unwrap();
            reg.set_policy(name, plain.clone()).unwrap();
        };
        let hold = if shape == Shape::AsyncMacro {
            Hold::Brief
        } else {
            Hold::None
        };
        let seen = drive(
            target(p),
            threads,
            Load::calls(threads, hold),
            swap.then_some(&swapper as &(dyn Fn() + Sync)),
        );
        let s = p.stats();
        check_books(v, &case, &s, &seen);
        check_reasons(v, &case, &s, &[Reason::Visits]);
        let want = max.min(seen.calls());
        v.check(seen.admitted() == want, || {
            format!(
                "{case}: {} of {} calls admitted, exactly {want} must be",
                seen.admitted(),
                seen.calls()
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
    });
}

#[test]
fn visits_admit_exactly_the_limit() {
    let v = Verdicts::default();
    for threads in THREADS {
        for max in [0, 1000] {
            let reg = system_registry();
            let name = format!("visits.{max}.{threads}");
            visits_case(
                &v,
                At {
                    reg,
                    name: &name,
                    shape: Shape::Enter,
                    threads,
                },
                Target::Enter,
                max,
                false,
            );
        }
    }
    v.conclude();
}

#[test]
fn visits_stay_exact_while_the_policy_is_swapped() {
    let v = Verdicts::default();
    for threads in THREADS {
        let reg = system_registry();
        let name = format!("visits.swap.{threads}");
        visits_case(
            &v,
            At {
                reg,
                name: &name,
                shape: Shape::Enter,
                threads,
            },
            Target::Enter,
            1000,
            true,
        );
    }
    v.conclude();
}

#[test]
fn downgrade_fn_visits_admit_exactly_the_limit() {
    let v = Verdicts::default();
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, max, swap) in [
            (&S_V0, 0, false),
            (&S_V1000, 1000, false),
            (&S_VSWAP, 1000, true),
        ] {
            let (f, name) = table[k];
            visits_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::SyncMacro,
                    threads,
                },
                |_| Target::Sync(f),
                max,
                swap,
            );
        }
    }
    v.conclude();
}

#[test]
fn async_downgrade_visits_admit_exactly_the_limit() {
    let v = Verdicts::default();
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(runtime()));
    for (k, threads) in THREADS.into_iter().enumerate() {
        for (table, max, swap) in [
            (&A_V0, 0, false),
            (&A_V1000, 1000, false),
            (&A_VSWAP, 1000, true),
        ] {
            let (f, name) = table[k];
            visits_case(
                &v,
                At {
                    reg: registry(),
                    name,
                    shape: Shape::AsyncMacro,
                    threads,
                },
                |_| Target::Async(f, rt),
                max,
                swap,
            );
        }
    }
    v.conclude();
}
