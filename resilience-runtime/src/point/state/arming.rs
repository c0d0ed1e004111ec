//! A background job that runs only while work comes: the work arms it, and it stops
//! after two runs in a row found nothing (the hung-call sweep, the per-second
//! sampler). The decision is this small protocol on one byte; the jobs themselves
//! are elsewhere.
//!
//! A caller that finds the job not [`ARMED`] arms it and schedules it if it was
//! [`IDLE`]. A run that finds nothing moves `ARMED` to [`DRAINING`] and runs once
//! more, a period later, so that work registered while that run read is seen; the
//! second empty run stops it (`IDLE`) unless a caller armed it in between. So the
//! job is never armed without being scheduled, and a scheduled job is never
//! scheduled twice.

use crate::sync::{AtomicU8, Ordering};

/// Not running and not scheduled.
pub(crate) const IDLE: u8 = 0;
/// Scheduled, and work came since the last run.
pub(crate) const ARMED: u8 = 1;
/// Scheduled for a last run.
pub(crate) const DRAINING: u8 = 2;

/// The state byte of one job.
#[derive(Debug)]
pub(crate) struct Arming(AtomicU8);

impl Arming {
    pub(crate) fn new() -> Arming {
        Arming(AtomicU8::new(IDLE))
    }

    /// Whether the job is armed (the check each piece of work makes first).
    #[inline(always)]
    pub(crate) fn is_armed(&self) -> bool {
        self.0.load(Ordering::Relaxed) == ARMED
    }

    /// Arms the job; `true` if it was stopped and the caller must schedule it.
    pub(crate) fn arm(&self) -> bool {
        self.0.swap(ARMED, Ordering::AcqRel) == IDLE
    }

    /// After a run that found work (`busy`) or not: whether to run again.
    pub(crate) fn after_run(&self, busy: bool) -> bool {
        if busy {
            let _ = self
                .0
                .compare_exchange(DRAINING, ARMED, Ordering::AcqRel, Ordering::Relaxed);
            return true;
        }
        let state = self.0.load(Ordering::Acquire);
        let (from, to) = match state {
            ARMED => (ARMED, DRAINING),
            DRAINING => (DRAINING, IDLE),
            _ => return false,
        };
        match self
            .0
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => to != IDLE,
            // A caller armed it meanwhile.
            Err(_) => true,
        }
    }

    /// Whether the job is stopped (not scheduled).
    pub(crate) fn is_idle(&self) -> bool {
        self.0.load(Ordering::Acquire) == IDLE
    }

    /// Stops the job (it has nothing to do any more, whatever comes).
    pub(crate) fn stop(&self) {
        self.0.store(IDLE, Ordering::Release);
    }

    /// The state, for tests.
    #[cfg(test)]
    pub(crate) fn state(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}
