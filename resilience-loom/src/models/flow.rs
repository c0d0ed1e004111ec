//! The flow word (`point/flow.rs`): the visits rule and the concurrency limit are
//! exact under every interleaving, because each admission is one compare-and-swap of
//! the word it decided on; a waiter of the queue never misses a freed slot, nor the
//! room an adaptive limit gives back before the slot.

use super::check;
use crate::flow::{Flow, Limits, Refused, Slot, NO_LIMIT};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// Runs `body` on three threads sharing `flow`; returns how many were admitted.
fn three(flow: &Arc<Flow>, body: impl Fn(&Flow) -> bool + Send + Sync + 'static) -> usize {
    let body = Arc::new(body);
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (flow, body) = (flow.clone(), body.clone());
            thread::spawn(move || body(&flow))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&admitted| admitted)
        .count()
}

/// What the admitted calls of a model share, under a concurrency limit of 1: how many
/// are inside, and data that the one call inside changes without synchronising. loom
/// checks every access to `data` against the happens-before relation, so a model
/// fails unless each release happens before the next admission (the release's
/// `Release`, the admission's `Acquire`): a limit of 1 is a lock.
struct Inside {
    running: AtomicUsize,
    data: UnsafeCell<u64>,
}

// SAFETY: `data` is only touched by an admitted call, and the flow admits one at a
// time; that is what the models check (loom panics on a concurrent access).
unsafe impl Sync for Inside {}

impl Inside {
    fn new() -> Arc<Inside> {
        Arc::new(Inside {
            running: AtomicUsize::new(0),
            data: UnsafeCell::new(0),
        })
    }

    /// The data's final value: one per call that got in.
    fn calls(&self) -> u64 {
        // SAFETY: every thread was joined.
        self.data.with(|n| unsafe { *n })
    }
}

/// A call under `limits` (at most 1 in flight): inside, it counts itself in `running`
/// (asserting the limit there) and changes the data, then releases its slot.
fn run_call(flow: &Flow, limits: Limits, inside: &Inside) -> bool {
    assert_eq!(limits.inflight, 1, "the data is for one call at a time");
    match flow.admit(limits) {
        Ok(e) => {
            assert_eq!(e.inflight, 1, "entry saw {}", e.inflight);
            // Relaxed: the counter must add no ordering of its own (a `SeqCst` or
            // `AcqRel` one would order the calls and hide a missing `Acquire` or
            // `Release` in the flow from the data check).
            let now = inside.running.fetch_add(1, Ordering::Relaxed) + 1;
            assert_eq!(now, 1, "{now} calls inside at once");
            // SAFETY: see `Inside`; loom checks it.
            inside.data.with_mut(|n| unsafe { *n += 1 });
            inside.running.fetch_sub(1, Ordering::Relaxed);
            flow.release(e.slot);
            true
        }
        Err(_) => false,
    }
}

/// A pass limit of 0 (the kill switch) admits nobody, and refusals change nothing.
#[test]
fn kill_switch_admits_none() {
    check(|| {
        let flow = Arc::new(Flow::new());
        let limits = Limits {
            from: 0,
            passes: 0,
            inflight: NO_LIMIT,
        };
        let admitted = three(&flow, move |f| match f.admit(limits) {
            Ok(_) => true,
            Err(r) => {
                assert_eq!(r, Refused::Visits);
                false
            }
        });
        assert_eq!(admitted, 0);
        assert_eq!(flow.peek(0), (0, 0));
    });
}

/// Three callers racing for a pass limit of 2: exactly two pass, and the count says 2.
#[test]
fn visits_admit_exactly_the_limit() {
    check(|| {
        let flow = Arc::new(Flow::new());
        let limits = Limits {
            from: 0,
            passes: 2,
            inflight: NO_LIMIT,
        };
        let admitted = three(&flow, move |f| f.admit(limits).is_ok());
        assert_eq!(admitted, 2);
        assert_eq!(flow.passes(), 2);
        assert_eq!(flow.inflight(), 2, "the admitted calls hold their slots");
    });
}

/// A concurrency limit of 1 with releases: never two calls inside at once, each
/// call's release happens before the next call's admission (see [`Inside`]), and
/// every slot comes back.
#[test]
fn concurrency_never_exceeds_the_limit() {
    check(|| {
        let flow = Arc::new(Flow::new());
        let inside = Inside::new();
        let limits = Limits {
            from: 0,
            passes: NO_LIMIT,
            inflight: 1,
        };
        let i = inside.clone();
        let admitted = three(&flow, move |f| run_call(f, limits, &i));
        assert!(admitted >= 1, "the first caller always gets in");
        assert_eq!(flow.passes(), admitted as u64);
        assert_eq!(inside.calls(), admitted as u64);
        assert_eq!(flow.inflight(), 0);
    });
}

/// Both limits at once (2 passes, 1 in flight), with releases: at most 2 pass, one at
/// a time (see [`Inside`]), and the counts match what happened.
#[test]
fn both_limits_at_once() {
    check(|| {
        let flow = Arc::new(Flow::new());
        let inside = Inside::new();
        let limits = Limits {
            from: 0,
            passes: 2,
            inflight: 1,
        };
        let i = inside.clone();
        let admitted = three(&flow, move |f| run_call(f, limits, &i));
        assert!((1..=2).contains(&admitted), "{admitted} admitted");
        assert_eq!(flow.passes(), admitted as u64);
        assert_eq!(inside.calls(), admitted as u64);
        assert_eq!(flow.inflight(), 0);
    });
}

/// A call frees the only slot while another starts waiting for it (the concurrency
/// queue): either the releaser sees the waiter (and wakes it) or the waiter's next
/// look sees the free slot, in every interleaving; never neither.
#[test]
fn a_release_and_a_new_waiter_never_miss_each_other() {
    check(|| {
        let flow = Arc::new(Flow::new());
        let limits = Limits {
            from: 0,
            passes: NO_LIMIT,
            inflight: 1,
        };
        let held = flow.admit(limits).unwrap();
        let releaser = {
            let flow = flow.clone();
            thread::spawn(move || flow.release(held.slot))
        };
        flow.wait_begin();
        let (_, inflight) = flow.peek(0);
        let saw_free = inflight == 0;
        let saw_waiter = releaser.join().unwrap();
        assert!(saw_free || saw_waiter, "a freed slot went unnoticed");
        flow.wait_end();
    });
}

/// Under an adaptive limit with a queue, the room a waiter needs is the limit's, given
/// back (the limiter's in-flight count, here an atomic with the orderings of
/// `GradientLimiter`: a `Release` decrement in `end_call`, a `Relaxed` first look in
/// `admit`) by a call that then calls `tell`: either `tell` sees the waiter (and the
/// call wakes it) or the waiter's look after `wait_begin` sees the room, in every
/// interleaving. `held` is the flow word's slot of the call, if it took one.
fn room_is_never_missed(took_slot: bool, tell: fn(&Flow, Option<Slot>) -> bool) {
    check(move || {
        let flow = Arc::new(Flow::new());
        // One call in flight under a limit of one.
        let in_flight = Arc::new(loom::sync::atomic::AtomicU64::new(1));
        let held = took_slot.then(|| flow.admit_unlimited().slot);
        let releaser = {
            let (flow, in_flight) = (flow.clone(), in_flight.clone());
            thread::spawn(move || {
                in_flight.fetch_sub(1, Ordering::Release);
                tell(&flow, held)
            })
        };
        flow.wait_begin();
        let saw_room = in_flight.load(Ordering::Relaxed) < 1;
        let saw_waiter = releaser.join().unwrap();
        assert!(saw_room || saw_waiter, "the limit's room went unnoticed");
        flow.wait_end();
    });
}

/// An ending call gives the limit's room back before it releases its slot of the flow
/// word (`Permit::complete_slow`): the release tells.
#[test]
fn a_limits_room_given_back_before_the_release_is_never_missed() {
    room_is_never_missed(true, |flow, slot| {
        flow.release(slot.expect("the call holds a slot"))
    });
}

/// A call that took the limit's room and goes no further (a later rule refused it)
/// holds no slot of the flow word: `Flow::given_back` tells (`Taken::give_back`).
#[test]
fn a_limits_room_given_back_by_a_refused_call_is_never_missed() {
    room_is_never_missed(false, |flow, _| flow.given_back());
}

/// Two waiters and one release: the release sees a waiter, or both waiters see the
/// free slot.
#[test]
fn a_release_reaches_one_of_two_waiters() {
    check(|| {
        let flow = Arc::new(Flow::new());
        let limits = Limits {
            from: 0,
            passes: NO_LIMIT,
            inflight: 1,
        };
        let held = flow.admit(limits).unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let flow = flow.clone();
                thread::spawn(move || {
                    flow.wait_begin();
                    flow.peek(0).1 == 0
                })
            })
            .collect();
        let saw_waiter = flow.release(held.slot);
        let saw_free = waiters
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>();
        assert!(
            saw_waiter || saw_free.iter().all(|f| *f),
            "a waiter missed the slot and the release missed the waiter"
        );
    });
}
