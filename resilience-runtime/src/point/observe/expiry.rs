//! The histories of stopped samplers, freed `seconds::KEEP` seconds after each stopped:
//! one process-wide queue and one chore for every point, instead of a timer per
//! point.
//!
//! A per-point timer kept every point that was called once on the wheel for `KEEP`
//! seconds, and each tick of the wheel walks the timers of its slot, later turns
//! included: 100 000 points called once cost about 0.5% of a core for half a
//! minute, then a burst of 100 000 runs (issue of 2026-12-03). Here a stopping
//! sampler queues its point (in the order they stop, so by due time), one timer
//! wakes when the first is due, and each run frees at most a batch, so that a crowd
//! of points stopping together is freed over some seconds rather than in one burst.
//! A point is queued at most once (its series remembers its ticket), and a point
//! dropped meanwhile takes its entry out, so the queue never keeps its memory.

use crate::point::observe::chores::{self, Chore, Chores};
use crate::point::Point;
use crate::sync::{Arc, Mutex, OnceLock, Recover, Weak};
use std::collections::VecDeque;
use std::time::Duration;

/// Entries freed by one run at least...
const MIN_BATCH: usize = 2_048;
/// ...or this share of the queue, if more (so a long queue still drains in about as
/// many runs).
const BATCH_SHARE: usize = 32;
/// The pause between two runs while entries are overdue.
const PACE: Duration = Duration::from_secs(1);

/// The queue itself: entries in the order they were queued, each due at a
/// monotonic reading (ns) and numbered by a ticket. A pure structure: `now` is
/// always an argument.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    /// (due, item); the item is `None` once cancelled.
    entries: VecDeque<(u64, Option<T>)>,
    /// The ticket of the front entry.
    head: u64,
    /// Whether the chore is scheduled (it runs until the queue is empty).
    scheduled: bool,
}

impl<T> Queue<T> {
    pub(crate) const fn new() -> Queue<T> {
        Queue {
            entries: VecDeque::new(),
            head: 0,
            scheduled: false,
        }
    }

    /// Queues `item` due at `due` (not before the entries queued earlier's: due times
    /// are a constant after a monotonic reading); returns its ticket, and whether the
    /// caller must schedule the chore (it was not) to run in how long.
    pub(crate) fn push(&mut self, now: u64, due: u64, item: T) -> (u64, Option<u64>) {
        let ticket = self.head + self.entries.len() as u64;
        self.entries.push_back((due, Some(item)));
        let schedule = !std::mem::replace(&mut self.scheduled, true);
        (ticket, schedule.then(|| due.saturating_sub(now)))
    }

    /// Takes the item of `ticket` out (its owner is going), if it is still queued.
    pub(crate) fn cancel(&mut self, ticket: u64) -> Option<T> {
        let index = usize::try_from(ticket.checked_sub(self.head)?).ok()?;
        self.entries.get_mut(index)?.1.take()
    }

    /// One run of the chore at `now`: the items due, at most a batch of them, and in
    /// how many ns to run again (`None`: the queue is empty, the chore stops).
    pub(crate) fn take_due(&mut self, now: u64) -> (Vec<T>, Option<u64>) {
        let batch = MIN_BATCH.max(self.entries.len() / BATCH_SHARE);
        let mut due = Vec::new();
        while let Some(&(at, _)) = self.entries.front() {
            if at > now || due.len() == batch {
                break;
            }
            let (_, item) = self.entries.pop_front().expect("a front entry");
            self.head += 1;
            due.extend(item);
        }
        let again = match self.entries.front() {
            None => {
                self.scheduled = false;
                // Give the memory of a long queue back.
                self.entries = VecDeque::new();
                None
            }
            Some(&(at, _)) if at <= now => Some(crate::clock::nanos(PACE)),
            Some(&(at, _)) => Some(at - now),
        };
        (due, again)
    }

    /// Entries queued (cancelled ones included).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Entries queued and not cancelled.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.entries
            .iter()
            .filter(|(_, item)| item.is_some())
            .count()
    }
}

/// The process-wide queue, the owner of its chore.
#[derive(Debug)]
pub(crate) struct Expiry(pub(crate) Mutex<Queue<Weak<Point>>>);

impl Chores for Expiry {
    fn run(&self, _: Chore) -> Option<Duration> {
        let (due, again) = self.0.lock().recover().take_due(now());
        // Outside the lock: a point's run may queue it again.
        for point in due {
            if let Some(point) = point.upgrade() {
                point.expire_history();
            }
        }
        again.map(Duration::from_nanos)
    }
}

/// The queue, made by the first point queued; never freed (a static owns it).
fn expiry() -> &'static Arc<Expiry> {
    #[cfg(test)]
    if let Some(captured) = CAPTURED.get() {
        return captured;
    }
    static EXPIRY: OnceLock<Arc<Expiry>> = OnceLock::new();
    EXPIRY.get_or_init(|| Arc::new(Expiry(Mutex::new(Queue::new()))))
}

#[cfg(test)]
std::thread_local! {
    /// A test's own queue (see [`capture`]).
    static CAPTURED: std::cell::Cell<Option<&'static Arc<Expiry>>> = const { std::cell::Cell::new(None) };
}

/// Gives this thread a queue of its own (leaked), for a test that ticks its own wheel
/// (`chores::capture`): its chore is armed there, not on the process's wheel.
#[cfg(test)]
pub(crate) fn capture() -> &'static Expiry {
    let captured: &'static Arc<Expiry> =
        Box::leak(Box::new(Arc::new(Expiry(Mutex::new(Queue::new())))));
    CAPTURED.set(Some(captured));
    captured
}

fn now() -> u64 {
    crate::ticker::precise_monotonic()
}

/// Queues `point` to have its history freed `after` from now; returns its ticket.
pub(crate) fn queue(point: Weak<Point>, after: Duration) -> u64 {
    let expiry = expiry();
    let now = now();
    let due = now.saturating_add(crate::clock::nanos(after));
    let (ticket, schedule) = expiry.0.lock().recover().push(now, due, point);
    if let Some(ns) = schedule {
        let owner: Arc<Expiry> = Arc::clone(expiry);
        let owner: chores::Owner = Arc::downgrade(&owner) as chores::Owner;
        chores::schedule(
            owner,
            &**expiry,
            Chore::ExpireHistories,
            Duration::from_nanos(ns),
        );
    }
    ticket
}

/// Takes the entry of `ticket` out of the queue (its point is being dropped).
pub(crate) fn cancel(ticket: u64) {
    // Dropped outside the lock (a `Weak` of the point being dropped: no user code
    // runs, but nothing need run under the lock either).
    let item = expiry().0.lock().recover().cancel(ticket);
    drop(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn entries_come_out_when_due_in_the_order_queued() {
        let mut q = Queue::new();
        assert_eq!(
            q.push(0, 32 * S, 'a'),
            (0, Some(32 * S)),
            "schedules the chore"
        );
        assert_eq!(q.push(S, 33 * S, 'b'), (1, None), "scheduled already");
        assert_eq!(q.push(2 * S, 34 * S, 'c'), (2, None));
        assert_eq!(q.take_due(32 * S), (vec!['a'], Some(S)));
        // A dropped point's entry goes without a run for it.
        assert_eq!(q.cancel(1), Some('b'));
        assert_eq!(q.cancel(1), None);
        assert_eq!(q.cancel(0), None, "gone already");
        assert_eq!(q.cancel(9), None, "never queued");
        assert_eq!(q.take_due(33 * S), (vec![], Some(S)));
        assert_eq!(
            q.take_due(40 * S),
            (vec!['c'], None),
            "empty: the chore stops"
        );
        assert_eq!(q.len(), 0);
        // The next push schedules it again; tickets go on.
        assert_eq!(q.push(50 * S, 82 * S, 'd'), (3, Some(32 * S)));
        assert_eq!(q.cancel(3), Some('d'));
    }

    #[test]
    fn a_crowd_is_freed_in_batches_a_second_apart() {
        let mut q = Queue::new();
        let n = 100_000u32;
        for i in 0..n {
            q.push(0, 32 * S, i);
        }
        let mut runs = Vec::new();
        let mut now = 32 * S;
        loop {
            let (due, again) = q.take_due(now);
            runs.push(due.len());
            match again {
                Some(ns) => {
                    assert_eq!(ns, S, "overdue entries: the next batch a second later");
                    now += ns;
                }
                None => break,
            }
        }
        assert_eq!(runs.iter().sum::<usize>(), n as usize);
        assert!(runs.iter().all(|&r| r <= 3_125), "{runs:?}");
        assert!(runs.len() <= 50, "{} runs", runs.len());
    }
}
