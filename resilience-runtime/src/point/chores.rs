//! Background chores of points, run by one process-wide [`TimingWheel`]: sweeping the
//! hung calls of points with a timeout rule, stopping the leases of replaced
//! cluster limits once their grace has passed, and starting and dropping the leases
//! of hot keys (`key_leases`). Each point has at most one pending
//! timer per chore; arming it again moves it. Chores run one after the other on the
//! wheel's thread: stopping a lease waits for its refill thread (at most one Redis
//! call, bounded by the lease's timeout), and delays the sweeps due meanwhile by as
//! much.

use crate::sync::OnceLock;
use crate::wheel::TimingWheel;
use std::time::Duration;

/// What a timer does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Chore {
    /// Count the calls that outlived the timeout threshold while still running.
    SweepHungCalls,
    /// Sample the cumulative counters for the per-second series.
    SampleSeconds,
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

/// What has chores: a point (this file knows nothing else of it).
pub(crate) trait Chores: Sync {
    /// Runs `chore`; returns when to run it again, if ever.
    fn run(&'static self, chore: Chore) -> Option<Duration>;
}

type Wheel = TimingWheel<(usize, Chore), (&'static dyn Chores, Chore)>;

fn wheel() -> Option<&'static Wheel> {
    static WHEEL: OnceLock<Option<Wheel>> = OnceLock::new();
    WHEEL
        .get_or_init(|| {
            TimingWheel::new(
                Duration::from_millis(10),
                128,
                |_, (target, chore): (&'static dyn Chores, Chore)| {
                    if let Some(after) = target.run(chore) {
                        schedule(target, chore, after);
                    }
                },
            )
            .ok()
        })
        .as_ref()
}

/// Whether chores run: the wheel's thread started (or can still start).
#[cfg(feature = "redis")]
pub(crate) fn running() -> bool {
    wheel().is_some()
}

/// Arms (or re-arms) `chore` of `point` after `after`. Without a wheel (its thread
/// could not start) chores are not run: hung calls are then measured when they
/// return, and replaced cluster leases keep their refill threads.
pub(crate) fn schedule(target: &'static dyn Chores, chore: Chore, after: Duration) {
    if let Some(wheel) = wheel() {
        let key = (std::ptr::from_ref(target).cast::<()>() as usize, chore);
        let _ = wheel.set_timer(key, (target, chore), after);
    }
}
