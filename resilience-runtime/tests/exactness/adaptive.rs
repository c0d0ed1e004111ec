//! Adaptive limits.
//!
//! * The backpressure `Gate`: never more than `capacity` permits out, as the holders
//!   count them, for capacity 1 and 3; and never more than 3 while another thread keeps
//!   resizing the gate between 2 and 3.
//! * The gradient limiter through a point: with `min_limit = max_limit =
//!   initial_limit = 3` the limit cannot move (its windows close every millisecond,
//!   so the estimator runs all along), and never more than 3 calls are in flight; with
//!   a queue whose waiters take the room given back while the policy is swapped, the
//!   same bound, and every waiter admitted, timed out or refused for a full queue.

use crate::support::*;
use resilience_runtime::adaptive::{Gate, GradientConfig};
use resilience_runtime::{AdaptiveLimit, Policy, Reason};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// ---- the gate -----------------------------------------------------------------------------

/// `threads` callers of a `Gate::new(capacity)` holding each permit briefly; with
/// `toggle`, another thread keeps setting the capacity to 2 and back to 3. At most
/// `bound` permits are out at once; every attempt is admitted or refused, and the
/// gate's refusals and slots agree with the callers'.
fn gate_case(v: &Verdicts, threads: usize, capacity: u64, toggle: bool) {
    let (rule, bound) = if toggle {
        ("Gate::new(3), capacity toggled 2 <-> 3".to_owned(), 3)
    } else {
        (format!("Gate::new({capacity})"), capacity)
    };
    // No policy here: the resizing is named in the rule.
    let case = Case::new(rule, Shape::Direct, threads, false);
    let gate = Gate::new(capacity).unwrap();
    let refused = AtomicU64::new(0);
    let call = |seen: &Seen, i: u64, load: Load| match gate.try_acquire() {
        Ok(permit) => {
            let inside = seen.inside();
            hold_sync(load.hold, i);
            drop(inside);
            drop(permit);
        }
        Err(_) => {
            refused.fetch_add(1, Ordering::Relaxed);
        }
    };
    let resize = || {
        gate.set_capacity(2).unwrap();
        gate.set_capacity(3).unwrap();
    };
    let seen = drive(
        Target::Call(&call),
        threads,
        Load::calls(threads, BRIEF),
        toggle.then_some(&resize as &(dyn Fn() + Sync)),
    );
    let refused = refused.load(Ordering::Relaxed);
    v.check(seen.max_inflight() <= bound, || {
        format!(
            "{case}: the holders saw {} permits out at once, at most {bound} may be",
            seen.max_inflight()
        )
    });
    v.check(seen.admitted() + refused == seen.calls(), || {
        format!(
            "{case}: {} calls, {} admitted + {refused} refused",
            seen.calls(),
            seen.admitted()
        )
    });
    v.check(gate.refused() == refused, || {
        format!(
            "{case}: the callers saw {refused} refusals, the gate counted {}",
            gate.refused()
        )
    });
    v.check(gate.active() == 0, || {
        format!("{case}: {} slots never came back", gate.active())
    });
    v.check(seen.admitted() > 0, || {
        format!("{case}: no call admitted of {}", seen.calls())
    });
}

#[test]
fn a_gate_never_has_more_than_its_capacity_out() {
    let v = Verdicts::default();
    for threads in THREADS {
        for capacity in [1, 3] {
            gate_case(&v, threads, capacity, false);
        }
    }
    v.conclude();
}

#[test]
fn a_gate_resized_between_2_and_3_never_has_more_than_3_out() {
    let v = Verdicts::default();
    for threads in THREADS {
        gate_case(&v, threads, 3, true);
    }
    v.conclude();
}

// ---- the gradient limiter through a point ---------------------------------------------------

/// The fixed limit of the gradient case.
const GRADIENT_LIMIT: u64 = 3;

/// A gradient limit that cannot move: min = max = initial = [`GRADIENT_LIMIT`], its
/// windows closing as often as possible, so that the estimator runs all along and
/// must keep the limit where min and max pin it.
fn pinned_gradient() -> GradientConfig {
    GradientConfig::builder()
        .initial_limit(GRADIENT_LIMIT)
        .min_limit(GRADIENT_LIMIT)
        .max_limit(GRADIENT_LIMIT)
        .sample_window(Duration::from_millis(1))
        .min_samples(1)
        .build()
        .unwrap()
}

/// `threads` callers of a point under the pinned gradient limit, alone (its refusals
/// `Overloaded`) or with `queue(16, 20ms)` while the policy is swapped (a call that
/// may wait is never refused `Overloaded`: it waits): never more than
/// [`GRADIENT_LIMIT`] in flight, and the books add up.
fn gradient_case(v: &Verdicts, threads: usize, queued: bool) {
    let limited = Policy::builder().adaptive(AdaptiveLimit::Gradient(pinned_gradient()));
    let (policy, other, rule, reasons) = if queued {
        let q = limited.queue(16, Duration::from_millis(20));
        (
            q.clone().build().unwrap(),
            q.max_visits(u64::MAX / 2).build().unwrap(),
            format!("adaptive gradient pinned at {GRADIENT_LIMIT}, queue(16, 20ms)"),
            &[Reason::QueueFull, Reason::QueueTimeout][..],
        )
    } else {
        let p = limited.build().unwrap();
        (
            p.clone(),
            p,
            format!("adaptive gradient, min = max = initial limit {GRADIENT_LIMIT}"),
            &[Reason::Overloaded][..],
        )
    };
    let n = GRADIENT_LIMIT;
    let reg = system_registry();
    let name = format!("gradient.{queued}.{threads}");
    let case = Case::new(rule, Shape::Enter, threads, queued);
    reg.set_policy(&name, policy.clone()).unwrap();
    let p = reg.point(&name).unwrap();
    let swapper = || {
        reg.set_policy(&name, other.clone()).unwrap();
        reg.set_policy(&name, policy.clone()).unwrap();
    };
    let seen = drive(
        Target::Enter(p),
        threads,
        Load::calls(threads, BRIEF),
        queued.then_some(&swapper as &(dyn Fn() + Sync)),
    );
    let s = p.stats();
    check_books(v, &case, &s, &seen);
    check_reasons(v, &case, &s, reasons);
    v.check(seen.max_inflight() <= n, || {
        format!(
            "{case}: the callers saw {} calls in flight at once, at most {n} may be",
            seen.max_inflight()
        )
    });
    if let Some(q) = s.queue {
        v.check(q.waiting == 0, || {
            format!("{case}: {} calls still waiting after the run", q.waiting)
        });
    }
    v.check(seen.admitted() > 0, || {
        format!("{case}: no call admitted of {}", seen.calls())
    });
}

#[test]
fn a_pinned_gradient_limit_is_never_exceeded_through_a_point() {
    let v = Verdicts::default();
    for threads in THREADS {
        gradient_case(&v, threads, false);
    }
    v.conclude();
}

#[test]
fn a_pinned_gradient_limit_with_a_queue_is_never_exceeded_while_the_policy_is_swapped() {
    let v = Verdicts::default();
    for threads in THREADS {
        gradient_case(&v, threads, true);
    }
    v.conclude();
}
