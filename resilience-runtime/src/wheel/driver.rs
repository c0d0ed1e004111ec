//! The threads behind a real-time [`TimingWheel`](super::TimingWheel): a ticker that
//! advances the wheel every interval (sleeping through the ticks where nothing is due
//! while it holds few timers) and a worker that runs the callbacks.
//!
//! Callbacks run on the worker, never on the ticker, so a slow or panicking callback
//! cannot delay or stop the ticks.

use super::{Execute, RawWheel, Shared};
use crate::sync::atomic::Ordering;
use crate::sync::mpsc::{Receiver, Sender};
use crate::sync::Arc;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::{Duration, Instant};

/// Due timers of one tick, sent from the ticker to the worker.
pub(super) type Batch<K, V> = Vec<(K, V)>;

/// Runs one callback, containing a panic so the caller's thread survives it.
///
/// The default panic hook still prints the panic message, which is how the user learns
/// of it. Under `panic = "abort"` nothing can be contained.
pub(super) fn run_callback<K, V>(execute: &Execute<K, V>, key: K, value: V) {
    let _ = catch_unwind(AssertUnwindSafe(|| execute(key, value)));
}

/// The ticker loop: tick every `interval` until the wheel is closed, sleeping
/// through the ticks where nothing is due while the wheel holds few timers (see
/// [`Pace`]).
///
/// Ticks are scheduled on absolute deadlines, so they do not drift. If the thread falls
/// more than one tick behind (the machine was suspended, say), it skips the missed
/// ticks, like Go's `time.Ticker` and so like go-zero, instead of firing a burst.
pub(super) fn run_ticker<K, V>(shared: Arc<Shared<K, V>>, tx: Sender<Batch<K, V>>)
where
    K: Eq + std::hash::Hash + Clone,
{
    // Before the first look at the wheel: a timer set from now on can wake us.
    let _ = shared.ticker.set(thread::current());
    loop {
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let (due, wait) = match shared.lock().as_mut() {
            Some(state) => state
                .pace
                .turn(&mut state.wheel, Instant::now(), shared.interval),
            None => return,
        };
        if !due.is_empty() {
            // The worker only goes away after this thread drops the sender, so this
            // cannot fail; if it somehow did, the batch is dropped and ticking goes on.
            let _ = tx.send(due);
        }
        // `stop` and a timer due sooner unpark us; spurious wake-ups just go round.
        match wait {
            Some(wait) => thread::park_timeout(wait),
            None => thread::park(),
        }
    }
}

/// At most this many timers, the ticker sleeps through the ticks where none is due
/// (finding the next one walks them all); with more, it ticks every interval.
const FEW: usize = 64;

/// When the real-time ticker ticks next: every interval, or, while the wheel holds
/// at most [`FEW`] timers, only on the ticks where one is due. An idle wheel costs no
/// wake-up at all, one with a timer an hour away one wake-up.
///
/// The wheel's tick count stays that of the ticker that ticks every interval: the
/// ticks slept through are skipped ([`RawWheel::skip_to`]) when the ticker wakes, and
/// when a timer is set meanwhile, first ([`catch_up`](Self::catch_up)), so its delay
/// counts from the tick it is set on.
pub(super) struct Pace {
    /// When the wheel's current tick ([`RawWheel::now`]) was due.
    at: Instant,
    /// `None` while ticking every interval; `Some(until)` while sleeping until tick
    /// `until` (nothing is due before it), or until a timer is set (`Some(None)`).
    sleep: Option<Option<u64>>,
}

impl Pace {
    pub(super) fn new() -> Pace {
        Pace {
            at: Instant::now(),
            sleep: None,
        }
    }

    /// The tick the ticker waits for, if any.
    fn target<K, V>(&self, wheel: &RawWheel<K, V>) -> Option<u64> {
        match self.sleep {
            None => Some(wheel.now().saturating_add(1)),
            Some(until) => until,
        }
    }

    /// When tick `tick` is due (`None` if too far to represent: never).
    fn instant_of<K, V>(
        &self,
        wheel: &RawWheel<K, V>,
        tick: u64,
        interval: Duration,
    ) -> Option<Instant> {
        let ticks = tick.saturating_sub(wheel.now());
        let ns = interval.as_nanos().checked_mul(u128::from(ticks))?;
        self.at
            .checked_add(Duration::from_nanos(u64::try_from(ns).ok()?))
    }

    /// One turn of the ticker at `now`: the tick it waits for, if it is due, and
    /// how long to wait for the next one (`None`: until woken).
    pub(super) fn turn<K: Eq + std::hash::Hash + Clone, V>(
        &mut self,
        wheel: &mut RawWheel<K, V>,
        now: Instant,
        interval: Duration,
    ) -> (Vec<(K, V)>, Option<Duration>) {
        let mut due = Vec::new();
        if let Some((target, at)) = self
            .target(wheel)
            .and_then(|t| Some((t, self.instant_of(wheel, t, interval)?)))
        {
            if now >= at {
                // Nothing is due before `target`: skip the ticks slept through.
                wheel.skip_to(target - 1);
                due = wheel.tick();
                // A tick or more late: the missed ticks are skipped, not fired.
                self.at = if now.duration_since(at) >= interval {
                    now
                } else {
                    at
                };
                self.plan(wheel);
            }
        }
        let wait = self
            .target(wheel)
            .and_then(|t| self.instant_of(wheel, t, interval))
            .map(|at| at.saturating_duration_since(now));
        (due, wait)
    }

    /// After a tick: tick every interval, or sleep until the next timer is due.
    fn plan<K, V>(&mut self, wheel: &RawWheel<K, V>) {
        self.sleep = if wheel.len() > FEW {
            None
        } else {
            match wheel.next_due() {
                Some(due) if due <= wheel.now().saturating_add(1) => None,
                until => Some(until),
            }
        };
    }

    /// Before a timer is set or moved: while sleeping, counts the ticks slept through
    /// so far (nothing is due in them), so the wheel's tick is the one of now.
    pub(super) fn catch_up<K, V>(
        &mut self,
        wheel: &mut RawWheel<K, V>,
        now: impl FnOnce() -> Instant,
        interval: Duration,
    ) {
        let Some(until) = self.sleep else {
            return;
        };
        let now = now();
        let elapsed = now.saturating_duration_since(self.at).as_nanos() / interval.as_nanos();
        let elapsed = u64::try_from(elapsed).unwrap_or(u64::MAX);
        // An overslept ticker fires `until` when it wakes: never skip past it.
        let to = wheel
            .now()
            .saturating_add(elapsed)
            .min(until.map_or(u64::MAX, |u| u - 1));
        if to > wheel.now() {
            let skipped = to - wheel.now();
            wheel.skip_to(to);
            self.at = u32::try_from(skipped)
                .ok()
                .and_then(|n| interval.checked_mul(n))
                .and_then(|d| self.at.checked_add(d))
                .unwrap_or(now);
        }
    }

    /// After a timer was set or moved `ticks` ahead: whether the sleeping ticker must
    /// wake (the timer is due before it would, or the wheel holds too many timers to
    /// sleep).
    pub(super) fn armed<K, V>(&mut self, wheel: &RawWheel<K, V>, ticks: u64) -> bool {
        let Some(until) = self.sleep else {
            return false;
        };
        if wheel.len() > FEW {
            self.sleep = None;
            return true;
        }
        let due = wheel.now().saturating_add(ticks.max(1));
        if until.is_none_or(|u| due < u) {
            self.sleep = Some(Some(due));
            return true;
        }
        false
    }
}

/// The worker loop: run each batch's callbacks in order until the ticker is gone.
pub(super) fn run_worker<K, V>(rx: Receiver<Batch<K, V>>, execute: Arc<Execute<K, V>>) {
    for batch in rx {
        for (key, value) in batch {
            run_callback(&*execute, key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A wheel and its pace at `t0`, as the ticker thread starts them.
    fn start(t0: Instant) -> (RawWheel<u32, u32>, Pace) {
        (
            RawWheel::new(8).unwrap(),
            Pace {
                at: t0,
                sleep: None,
            },
        )
    }

    /// What `TimingWheel::set_timer` does under the lock.
    fn set(
        wheel: &mut RawWheel<u32, u32>,
        pace: &mut Pace,
        now: Instant,
        key: u32,
        ticks: u64,
    ) -> bool {
        pace.catch_up(wheel, || now, TICK);
        wheel.set(key, key, ticks);
        pace.armed(wheel, ticks)
    }

    #[test]
    fn an_empty_wheel_parks_the_ticker_until_a_timer_is_set() {
        let t0 = Instant::now();
        let (mut wheel, mut pace) = start(t0);
        let (fired, wait) = pace.turn(&mut wheel, t0 + TICK, TICK);
        assert!(fired.is_empty());
        assert_eq!(wait, None, "nothing pending: parked");
        // 1 s later a timer is set 5 ticks ahead: the ticker is woken, and the wheel
        // counts the 100 ticks it slept through first.
        let t1 = t0 + ms(1_005);
        assert!(set(&mut wheel, &mut pace, t1, 7, 5));
        assert_eq!(wheel.now(), 100);
        let (fired, wait) = pace.turn(&mut wheel, t1, TICK);
        assert!(fired.is_empty());
        assert_eq!(
            wait,
            Some(ms(45)),
            "due at tick 105, 1.05 s after the start"
        );
        let (fired, _) = pace.turn(&mut wheel, t0 + ms(1_050), TICK);
        assert_eq!(fired, [(7, 7)]);
        assert_eq!(wheel.now(), 105);
    }

    #[test]
    fn few_timers_wake_the_ticker_only_when_due() {
        let t0 = Instant::now();
        let (mut wheel, mut pace) = start(t0);
        assert!(!set(&mut wheel, &mut pace, t0, 1, 300), "ticking: no wake");
        assert!(!set(&mut wheel, &mut pace, t0, 2, 30));
        // The first tick finds the next timer 29 ticks away: sleep until then.
        let (fired, wait) = pace.turn(&mut wheel, t0 + TICK, TICK);
        assert!(fired.is_empty());
        assert_eq!(wait, Some(ms(290)));
        // A turn before then (a spurious wake-up) changes nothing.
        let (fired, wait) = pace.turn(&mut wheel, t0 + ms(100), TICK);
        assert!(fired.is_empty());
        assert_eq!(wait, Some(ms(200)));
        assert_eq!(
            wheel.now(),
            1,
            "the ticks slept through are counted when due"
        );
        let (fired, wait) = pace.turn(&mut wheel, t0 + ms(300), TICK);
        assert_eq!(fired, [(2, 2)]);
        assert_eq!(wheel.now(), 30);
        assert_eq!(wait, Some(ms(2_700)));
        // A later timer does not wake it; a sooner one does, and keeps its delay.
        assert!(!set(&mut wheel, &mut pace, t0 + ms(400), 3, 500));
        assert!(set(&mut wheel, &mut pace, t0 + ms(1_000), 4, 20));
        assert_eq!(wheel.now(), 100);
        let (fired, wait) = pace.turn(&mut wheel, t0 + ms(1_001), TICK);
        assert!(fired.is_empty());
        assert_eq!(wait, Some(ms(199)));
        let (fired, _) = pace.turn(&mut wheel, t0 + ms(1_200), TICK);
        assert_eq!(fired, [(4, 4)]);
        let (fired, _) = pace.turn(&mut wheel, t0 + ms(3_000), TICK);
        assert_eq!(fired, [(1, 1)]);
        // Timer 3 was set on tick 40 (t0 + 400 ms), 500 ticks ahead.
        let (fired, wait) = pace.turn(&mut wheel, t0 + ms(5_400), TICK);
        assert_eq!(fired, [(3, 3)]);
        assert_eq!(wheel.now(), 540);
        assert_eq!(wait, None);
    }

    #[test]
    fn many_timers_tick_every_interval() {
        let t0 = Instant::now();
        let (mut wheel, mut pace) = start(t0);
        for k in 0..=FEW as u32 {
            set(&mut wheel, &mut pace, t0, k, 1_000);
        }
        for n in 1..=20u32 {
            let (fired, wait) = pace.turn(&mut wheel, t0 + TICK * n, TICK);
            assert!(fired.is_empty());
            assert_eq!(wait, Some(TICK), "tick {n}");
        }
        assert_eq!(wheel.now(), 20);
    }

    #[test]
    fn a_timer_set_while_sleeping_past_the_limit_ends_the_sleep() {
        let t0 = Instant::now();
        let (mut wheel, mut pace) = start(t0);
        set(&mut wheel, &mut pace, t0, 0, 1_000);
        let (_, wait) = pace.turn(&mut wheel, t0 + TICK, TICK);
        assert_eq!(wait, Some(TICK * 999));
        for k in 1..FEW as u32 {
            assert!(!set(&mut wheel, &mut pace, t0 + ms(15), k, 1_000));
        }
        assert!(
            set(&mut wheel, &mut pace, t0 + ms(15), FEW as u32, 1_000),
            "one timer too many: tick every interval"
        );
        let (_, wait) = pace.turn(&mut wheel, t0 + ms(15), TICK);
        assert_eq!(wait, Some(ms(5)));
    }

    #[test]
    fn an_overslept_ticker_fires_what_is_due_and_skips_the_missed_ticks() {
        let t0 = Instant::now();
        let (mut wheel, mut pace) = start(t0);
        set(&mut wheel, &mut pace, t0, 1, 10);
        set(&mut wheel, &mut pace, t0, 2, 12);
        pace.turn(&mut wheel, t0 + TICK, TICK);
        // Woken 1 s late: a timer set now is not counted from beyond the due one.
        assert!(!set(&mut wheel, &mut pace, t0 + ms(1_100), 3, 1));
        assert_eq!(wheel.now(), 9);
        let (fired, wait) = pace.turn(&mut wheel, t0 + ms(1_100), TICK);
        assert_eq!(fired, [(1, 1), (3, 3)]);
        assert_eq!(
            wait,
            Some(ms(20)),
            "the missed ticks are skipped, not fired"
        );
        let (fired, _) = pace.turn(&mut wheel, t0 + ms(1_120), TICK);
        assert_eq!(fired, [(2, 2)]);
    }
}
