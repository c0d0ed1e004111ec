//! Background chores of points, run by one process-wide [`TimingWheel`]: sweeping the
//! hung calls of points with a timeout rule, and stopping the leases of replaced
//! cluster limits once their grace has passed. Each point has at most one pending
//! timer per chore; arming it again moves it. Chores run one after the other on the
//! wheel's thread: stopping a lease waits for its refill thread (at most one Redis
//! call, bounded by the lease's timeout), and delays the sweeps due meanwhile by as
//! much.

use super::Point;
use crate::wheel::TimingWheel;
use std::sync::OnceLock;
use std::time::Duration;

/// What a timer does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Chore {
    /// Count the calls that outlived the timeout threshold while still running.
    SweepHungCalls,
    /// Stop the leases of cluster limits replaced more than a grace period ago.
    #[cfg(feature = "redis")]
    StopRetiredLeases,
}

type Wheel = TimingWheel<(usize, Chore), (&'static Point, Chore)>;

fn wheel() -> Option<&'static Wheel> {
    static WHEEL: OnceLock<Option<Wheel>> = OnceLock::new();
    WHEEL
        .get_or_init(|| {
            TimingWheel::new(
                Duration::from_millis(10),
                128,
                |_, (point, chore): (&'static Point, Chore)| {
                    let again = match chore {
                        Chore::SweepHungCalls => point.sweep_hung_calls(),
                        #[cfg(feature = "redis")]
                        Chore::StopRetiredLeases => point.stop_retired_leases(),
                    };
                    if let Some(after) = again {
                        schedule(point, chore, after);
                    }
                },
            )
            .ok()
        })
        .as_ref()
}

/// Arms (or re-arms) `chore` of `point` after `after`. Without a wheel (its thread
/// could not start) chores are not run: hung calls are then measured when they
/// return, and replaced cluster leases keep their refill threads.
pub(crate) fn schedule(point: &'static Point, chore: Chore, after: Duration) {
    if let Some(wheel) = wheel() {
        let key = (point as *const Point as usize, chore);
        let _ = wheel.set_timer(key, (point, chore), after);
    }
}
