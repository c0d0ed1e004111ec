//! Races at one instant: every thread calls `enter` once, and the admitted calls hold
//! their permits until every thread has tried; and single calls made by the case
//! itself, counted in the same [`Seen`].

use super::Seen;
use resilience_runtime::{Permit, Point, Reason};
use std::sync::atomic::Ordering;
use std::sync::Barrier;

/// What one race saw: the permits of the admitted calls (still held: the caller
/// finishes them) and the refusals, by reason.
pub(crate) struct Race {
    pub(crate) permits: Vec<Permit<'static>>,
    pub(crate) refused: Vec<Reason>,
}

impl Race {
    pub(crate) fn admitted(&self) -> u64 {
        self.permits.len() as u64
    }

    /// The refusals for `reason`.
    pub(crate) fn refused_for(&self, reason: Reason) -> u64 {
        self.refused.iter().filter(|r| **r == reason).count() as u64
    }

    /// Finishes every permit (`failed`: as an exception), in the caller's thread.
    pub(crate) fn finish(self, failed: bool) {
        for permit in self.permits {
            permit.finish(failed);
        }
    }
}

/// `threads` threads, started together by a barrier, each calling `p.enter()` once:
/// an admitted call is counted in flight ([`Seen::inside`]) until every thread has
/// tried, and its permit is then handed back, unfinished, in the [`Race`]. Every call
/// and refusal is counted in `seen`.
pub(crate) fn race(p: &'static Point, threads: usize, seen: &Seen) -> Race {
    let (start, tried) = (Barrier::new(threads), Barrier::new(threads));
    let outcomes: Vec<Result<Permit<'static>, Reason>> = std::thread::scope(|s| {
        let racers: Vec<_> = (0..threads)
            .map(|_| {
                let (start, tried) = (&start, &tried);
                s.spawn(move || {
                    start.wait();
                    let entered = p.enter().map_err(|d| d.reason());
                    let inside = match &entered {
                        Ok(_) => Some(seen.inside()),
                        Err(reason) => {
                            seen.refused(*reason);
                            None
                        }
                    };
                    seen.calls.fetch_add(1, Ordering::SeqCst);
                    // Every permit is held until every thread has tried.
                    tried.wait();
                    drop(inside);
                    entered
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let mut race = Race {
        permits: Vec::new(),
        refused: Vec::new(),
    };
    for outcome in outcomes {
        match outcome {
            Ok(permit) => race.permits.push(permit),
            Err(reason) => race.refused.push(reason),
        }
    }
    race
}

/// One call by the case itself, counted in `seen`: an admitted call finishes at once
/// (`failed`: as an exception); returns the refusal's reason.
pub(crate) fn one_call(p: &'static Point, seen: &Seen, failed: bool) -> Result<(), Reason> {
    seen.calls.fetch_add(1, Ordering::SeqCst);
    match p.enter() {
        Ok(permit) => {
            drop(seen.inside());
            permit.finish(failed);
            Ok(())
        }
        Err(d) => {
            seen.refused(d.reason());
            Err(d.reason())
        }
    }
}
