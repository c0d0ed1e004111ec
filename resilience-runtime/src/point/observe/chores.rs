//! Background chores of points, run by one process-wide [`TimingWheel`]: sweeping the
//! hung calls of points with a timeout rule, sampling the per-second series, freeing
//! the histories of stopped samplers (`expiry`, one timer for every point), stopping
//! the leases of replaced cluster limits once their grace has passed, and starting
//! and dropping the leases of hot keys (`key_leases`). Each point has at most one
//! pending timer per chore; arming it again moves it. A point's chores stop once they
//! have nothing left to do, so idle points hold no timer: the wheel's work follows
//! the traffic, not the number of points that ever had some. Chores run one after
//! the other on the wheel's thread: stopping a lease waits for its refill thread (at
//! most one Redis call, bounded by the lease's timeout), and delays the sweeps due
//! meanwhile by as much.

use crate::sync::{OnceLock, Weak};
use crate::wheel::TimingWheel;
use std::any::Any;
use std::time::Duration;

/// What a timer does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Chore {
    /// Count the calls that outlived the timeout threshold while still running.
    SweepHungCalls,
    /// Sample the cumulative counters for the per-second series.
    SampleSeconds,
    /// Free the histories of the samplers that stopped `seconds::KEEP` seconds ago
    /// (the chore of `expiry`'s queue, never a point's).
    ExpireHistories,
    /// Stop the leases of cluster limits replaced more than a grace period ago.
    #[cfg(feature = "redis")]
    StopRetiredLeases,
    /// Start the keys' leases that calls asked for, and stop the dropped ones (a
    /// chore of a `keys` section's lease map, see `key_leases`).
    #[cfg(feature = "redis")]
    StartKeyLeases,
    /// Drop the leases of keys that went cold (same).
    #[cfg(feature = "redis")]
    DropColdKeyLeases,
}

/// What has chores: a point, or a part a point keeps until it is dropped (this file
/// knows nothing else of them).
pub(crate) trait Chores: Sync {
    /// Runs `chore`; returns when to run it again, if ever.
    fn run(&self, chore: Chore) -> Option<Duration>;
}

/// The owner of a chore's target: the point, held weakly, so that a timer never
/// keeps a point alive, and a point dropped meanwhile just skips the chore.
pub(crate) type Owner = Weak<dyn Any + Send + Sync>;

/// A timer's target: run only while its owner lives.
pub(crate) struct Target {
    owner: Owner,
    /// The point or a part of it, read only while `owner` is upgraded.
    part: *const (dyn Chores + 'static),
}

// SAFETY: `part` is `Sync` (see `Chores`) and read only while its owner is upgraded
// (so alive): sending the pointer to the wheel's thread shares a `Sync` value.
unsafe impl Send for Target {}

type Wheel = TimingWheel<(usize, Chore), (Target, Chore)>;
/// A test's hand on its own wheel (see [`capture`]).
#[cfg(test)]
pub(crate) type Ticker = crate::wheel::ManualTicker<(usize, Chore), (Target, Chore)>;

/// The wheel, made by the first chore armed.
static WHEEL: OnceLock<Option<Wheel>> = OnceLock::new();

/// The wheel's tick and size: a sweep's period is at least one tick, a sample's
/// delay within a second, one turn.
const TICK: Duration = Duration::from_millis(10);
const SLOTS: usize = 128;

#[cfg(test)]
std::thread_local! {
    /// A test's own wheel, ticked by hand: the chores armed on its thread go there
    /// (see [`capture`]).
    static CAPTURED: std::cell::Cell<Option<&'static Wheel>> = const { std::cell::Cell::new(None) };
}

fn wheel() -> Option<&'static Wheel> {
    #[cfg(test)]
    if let Some(captured) = CAPTURED.get() {
        return Some(captured);
    }
    WHEEL
        .get_or_init(|| TimingWheel::new(TICK, SLOTS, fire).ok())
        .as_ref()
}

/// The wheel if it was made (what removing a timer needs).
fn made() -> Option<&'static Wheel> {
    #[cfg(test)]
    if let Some(captured) = CAPTURED.get() {
        return Some(captured);
    }
    WHEEL.get().and_then(Option::as_ref)
}

/// A timer fired: runs its chore if the owner lives, and arms it again if asked.
fn fire(_: (usize, Chore), (target, chore): (Target, Chore)) {
    let Some(alive) = target.owner.upgrade() else {
        return;
    };
    // SAFETY: the owner keeps `part` (itself or a part it frees only when dropped),
    // and `alive` holds the owner for this run.
    let part = unsafe { &*target.part };
    if let Some(after) = part.run(chore) {
        arm(target, chore, after);
    }
    drop(alive);
}

/// Sends the chores armed on this thread to a wheel of its own, ticked by hand with
/// the returned ticker (inline: the chores run on this thread, and so re-arm there),
/// until the thread ends. The wheel is leaked (a test's).
#[cfg(test)]
pub(crate) fn capture() -> (&'static Wheel, Ticker) {
    let (wheel, ticker) = TimingWheel::with_ticker(TICK, SLOTS, fire).expect("a valid wheel");
    let wheel: &'static Wheel = Box::leak(Box::new(wheel));
    CAPTURED.set(Some(wheel));
    (wheel, ticker)
}

/// Whether chores run: the wheel's thread started (or can still start).
#[cfg(feature = "redis")]
pub(crate) fn running() -> bool {
    wheel().is_some()
}

/// The timer key of `part`'s `chore`: one timer per target and chore.
fn key(part: *const (dyn Chores + 'static), chore: Chore) -> (usize, Chore) {
    (part.cast::<()>() as usize, chore)
}

/// Arms (or re-arms) `chore` of `part`, which `owner` keeps, after `after`. Without a
/// wheel (its thread could not start) chores are not run: hung calls are then
/// measured when they return, and replaced cluster leases keep their refill threads.
pub(crate) fn schedule(owner: Owner, part: &(dyn Chores + 'static), chore: Chore, after: Duration) {
    let part = std::ptr::from_ref(part);
    arm(Target { owner, part }, chore, after);
}

fn arm(target: Target, chore: Chore, after: Duration) {
    if let Some(wheel) = wheel() {
        let _ = wheel.set_timer(key(target.part, chore), (target, chore), after);
    }
}

/// Removes the timers of `part` for `chores` (its owner is being dropped: this returns
/// the owner's memory at once instead of when the timers would have fired).
pub(crate) fn cancel(part: &(dyn Chores + 'static), chores: &[Chore]) {
    if let Some(wheel) = made() {
        for chore in chores {
            let _ = wheel.remove_timer(&key(std::ptr::from_ref(part), *chore));
        }
    }
}
