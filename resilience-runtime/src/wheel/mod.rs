//! Timing wheel: many keyed timers with O(1) set, move and remove, go-zero's
//! `TimingWheel` semantics without its quirks.
//!
//! A [`TimingWheel`] has `slots` slots of `interval` each. A timer with delay `d`
//! fires on exactly the `floor(d / interval)`-th tick after it was set (at least the
//! next tick); longer delays than one turn of the wheel wait the extra turns. There is
//! one timer per key: setting a key again replaces its value and delay. Due timers are
//! handed to the `execute` callback as `(key, value)`.
//!
//! The parts:
//!
//! - [`RawWheel`]: the data structure alone, driven by [`RawWheel::tick`], with no
//!   lock, thread or clock;
//! - [`TimingWheel::new`]: a shared wheel ticked by a background thread every
//!   `interval`, callbacks run on a worker thread (no async runtime needed);
//! - [`TimingWheel::with_ticker`]: the same wheel ticked by hand through a
//!   [`ManualTicker`], for deterministic tests.
//!
//! # Differences from go-zero
//!
//! - Moving a timer to a delay shorter than one interval schedules it for the next
//!   tick, like setting one; go-zero runs the task at once *and* leaves the old entry
//!   scheduled, so it fires twice.
//! - A timer moved after some ticks have passed fires on the new delay; go-zero can
//!   fire it a turn early (its circle count is computed from the wheel's position but
//!   compared at the entry's old slot).
//! - [`TimingWheel::drain`] forgets the drained keys; in go-zero a later set of a
//!   drained key could update a detached entry that never fires.
//! - [`TimingWheel::stop`] is idempotent (a second `Stop` panics in Go), and every call
//!   after it returns [`WheelError::Closed`].
//! - A zero delay is accepted and means "next tick" (go-zero rejects `delay <= 0`);
//!   `Duration` cannot be negative.
//! - Calls do not go through a channel to a run loop: they take a short lock.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::wheel::TimingWheel;
//! use std::sync::mpsc;
//! use std::time::{Duration, Instant};
//!
//! let (tx, rx) = mpsc::channel();
//! let wheel = TimingWheel::new(Duration::from_millis(10), 16, move |key: &'static str, value: u32| {
//!     let _ = tx.send((key, value));
//! })?;
//! wheel.set_timer("session:1", 42, Duration::from_millis(30))?;
//! assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), ("session:1", 42));
//! wheel.stop();
//! # Ok::<(), resilience_runtime::wheel::WheelError>(())
//! ```

mod driver;
mod error;
mod raw;

pub use error::WheelError;
pub use raw::RawWheel;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Recover;
use crate::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

type Execute<K, V> = dyn Fn(K, V) + Send + Sync;

/// State shared by the wheel handle, its ticker thread and a manual ticker.
struct Shared<K, V> {
    interval: Duration,
    slots: usize,
    /// `None` once stopped.
    state: Mutex<Option<State<K, V>>>,
    /// Set by `stop`, so the ticker thread can notice without taking the lock.
    closed: AtomicBool,
    /// The ticker thread, set by itself before it first looks at the wheel: a timer
    /// set while it sleeps wakes it if it is due sooner than the ticker would wake.
    ticker: OnceLock<thread::Thread>,
}

/// The wheel and, for the thread ticker, when it ticks next.
struct State<K, V> {
    wheel: RawWheel<K, V>,
    pace: driver::Pace,
}

impl<K, V> Shared<K, V> {
    /// Locks the wheel state.
    ///
    /// A panic under this lock can only come from the key's `Hash`, `Eq` or `Clone`,
    /// and `RawWheel` makes those calls before changing its own links, so the state is
    /// still consistent and poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Option<State<K, V>>> {
        self.state.lock().recover()
    }

    /// Wakes the ticker thread (a timer is due before it would wake).
    fn wake_ticker(&self) {
        if let Some(ticker) = self.ticker.get() {
            ticker.unpark();
        }
    }

    /// Marks the wheel closed and drops its pending timers (outside the lock, since
    /// dropping a value runs user code).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let pending = self.lock().take();
        drop(pending);
    }
}

/// A hashed timing wheel of keyed timers, safe to share between threads.
///
/// Build it with [`TimingWheel::new`] (a background thread ticks it every `interval`)
/// or [`TimingWheel::with_ticker`] (you tick it by hand). Then:
///
/// - [`set_timer`](Self::set_timer) schedules `execute(key, value)` after a delay,
///   replacing any timer of the same key;
/// - [`move_timer`](Self::move_timer) reschedules a key, keeping its value;
/// - [`remove_timer`](Self::remove_timer) cancels it;
/// - [`drain`](Self::drain) takes every pending timer out;
/// - [`stop`](Self::stop) shuts the wheel down (also done on drop).
///
/// # Timing
///
/// A timer with delay `d` fires on exactly the `n = max(1, floor(d / interval))`-th
/// tick after the call, so in real time between `(n - 1) * interval` and
/// `n * interval` after it, plus the time to reach the callback. Delays are rounded
/// down to whole intervals, as in go-zero.
///
/// # Callbacks
///
/// With the thread ticker, callbacks run on one worker thread, one after another in the
/// order they fell due; a slow callback delays the ones after it (hand long work off),
/// but never the ticks. A panicking callback is caught and the wheel carries on (the
/// panic hook still prints it). Callbacks may call back into the wheel, for instance to
/// re-arm a timer: no lock is held while they run. With a [`ManualTicker`], callbacks
/// run inline in [`ManualTicker::tick`].
///
/// # Cost
///
/// A `Mutex` guards the wheel; each call holds it for one hash-map operation and a few
/// list-link updates, so `set_timer`, `move_timer` and `remove_timer` are O(1) whatever
/// the number of timers. A tick holds it while walking one slot, which also visits the
/// slot's timers for later turns: choose `slots` so that `slots * interval` covers the
/// usual delay.
///
/// The ticker thread wakes every interval only while the wheel holds many timers (more
/// than 64). With fewer, it sleeps through the ticks where none is due (they are still
/// counted, so delays keep their exact tick), and with none it sleeps until a timer is
/// set: an idle wheel costs no wake-up. Setting or moving a timer due before the
/// sleeping ticker would wake unparks it.
///
/// # Examples
///
/// Deterministic, with a manual ticker:
///
/// ```
/// use resilience_runtime::wheel::TimingWheel;
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// let fired = Arc::new(Mutex::new(Vec::new()));
/// let log = Arc::clone(&fired);
/// let (wheel, ticker) = TimingWheel::with_ticker(Duration::from_secs(1), 5, move |k: u32, v: &'static str| {
///     log.lock().unwrap().push((k, v));
/// })?;
///
/// wheel.set_timer(1, "a", Duration::from_secs(3))?;
/// wheel.set_timer(2, "b", Duration::from_secs(7))?; // more than one turn
/// wheel.move_timer(&1, Duration::from_secs(2))?;
/// assert_eq!(ticker.advance(2)?, 1);
/// assert_eq!(*fired.lock().unwrap(), [(1, "a")]);
/// assert_eq!(ticker.advance(5)?, 1);
/// assert_eq!(*fired.lock().unwrap(), [(1, "a"), (2, "b")]);
/// # Ok::<(), resilience_runtime::wheel::WheelError>(())
/// ```
pub struct TimingWheel<K, V> {
    shared: Arc<Shared<K, V>>,
    /// The ticker thread, if any; taken by the first `stop`.
    ticker: Mutex<Option<JoinHandle<()>>>,
}

/// Advances a [`TimingWheel`] built with [`TimingWheel::with_ticker`] by hand.
///
/// [`tick`](Self::tick) advances one slot and runs the due callbacks *inline*, on the
/// calling thread, before returning, so a test knows exactly which timers fired on
/// which tick without sleeping. A panicking callback is caught, as with the thread
/// ticker, and the remaining callbacks of the tick still run.
pub struct ManualTicker<K, V> {
    shared: Arc<Shared<K, V>>,
    execute: Box<Execute<K, V>>,
}

impl<K, V> TimingWheel<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Send + 'static,
{
    /// A wheel of `slots` slots of `interval`, ticked by a background thread, calling
    /// `execute(key, value)` for each timer that fires.
    ///
    /// Spawns two threads: the ticker and the worker that runs the callbacks. Both end
    /// after [`stop`](Self::stop) (or drop); the worker first finishes the callbacks
    /// already handed to it.
    ///
    /// # Errors
    ///
    /// [`WheelError::ZeroInterval`], [`WheelError::ZeroSlots`],
    /// [`WheelError::TooManySlots`], or [`WheelError::Spawn`] if a thread could not be
    /// started.
    pub fn new<F>(interval: Duration, slots: usize, execute: F) -> Result<Self, WheelError>
    where
        F: Fn(K, V) + Send + Sync + 'static,
    {
        let shared = Self::shared(interval, slots)?;
        let (tx, rx) = mpsc::channel();
        let execute: Arc<Execute<K, V>> = Arc::new(execute);
        thread::Builder::new()
            .name("timing-wheel-worker".into())
            .spawn(move || driver::run_worker(rx, execute))
            .map_err(|e| WheelError::spawn(&e))?;
        // If this spawn fails, `tx` is dropped with the closure and the worker ends.
        let ticker = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("timing-wheel-ticker".into())
                .spawn(move || driver::run_ticker(shared, tx))
                .map_err(|e| WheelError::spawn(&e))?
        };
        Ok(TimingWheel {
            shared,
            ticker: Mutex::new(Some(ticker)),
        })
    }

    /// A wheel of `slots` slots of `interval` that only moves when the returned
    /// [`ManualTicker`] ticks it; no thread is started.
    ///
    /// `interval` still converts delays into ticks: a delay `d` fires on the
    /// `max(1, floor(d / interval))`-th call to [`ManualTicker::tick`].
    ///
    /// # Errors
    ///
    /// [`WheelError::ZeroInterval`], [`WheelError::ZeroSlots`] or
    /// [`WheelError::TooManySlots`].
    pub fn with_ticker<F>(
        interval: Duration,
        slots: usize,
        execute: F,
    ) -> Result<(Self, ManualTicker<K, V>), WheelError>
    where
        F: Fn(K, V) + Send + Sync + 'static,
    {
        let shared = Self::shared(interval, slots)?;
        let ticker = ManualTicker {
            shared: Arc::clone(&shared),
            execute: Box::new(execute),
        };
        let wheel = TimingWheel {
            shared,
            ticker: Mutex::new(None),
        };
        Ok((wheel, ticker))
    }

    fn shared(interval: Duration, slots: usize) -> Result<Arc<Shared<K, V>>, WheelError> {
        if interval.is_zero() {
            return Err(WheelError::ZeroInterval);
        }
        Ok(Arc::new(Shared {
            interval,
            slots,
            state: Mutex::new(Some(State {
                wheel: RawWheel::new(slots)?,
                pace: driver::Pace::new(),
            })),
            closed: AtomicBool::new(false),
            ticker: OnceLock::new(),
        }))
    }

    /// Whole ticks in `delay`, at least 1.
    fn ticks(&self, delay: Duration) -> u64 {
        let ticks = delay.as_nanos() / self.shared.interval.as_nanos();
        u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
    }

    /// Schedules `execute(key, value)` after `delay`; see the type docs for the exact
    /// tick. If `key` already has a timer, its value and delay are replaced and the old
    /// value is returned.
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`stop`](Self::stop).
    pub fn set_timer(&self, key: K, value: V, delay: Duration) -> Result<Option<V>, WheelError> {
        let ticks = self.ticks(delay);
        let (old, wake) = match self.shared.lock().as_mut() {
            Some(state) => {
                // While the ticker sleeps, the ticks it sleeps through are counted
                // when it wakes: count those past now, so the delay starts here.
                state
                    .pace
                    .catch_up(&mut state.wheel, Instant::now, self.shared.interval);
                let old = state.wheel.set(key, value, ticks);
                (old, state.pace.armed(&state.wheel, ticks))
            }
            None => return Err(WheelError::Closed),
        };
        if wake {
            self.shared.wake_ticker();
        }
        Ok(old)
    }

    /// Reschedules the timer of `key` to fire after `delay` from now, keeping its
    /// value. Returns whether `key` had a timer (an unknown key is left alone).
    ///
    /// A delay shorter than one interval means the next tick, and the timer still
    /// fires only once.
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`stop`](Self::stop).
    pub fn move_timer<Q>(&self, key: &Q, delay: Duration) -> Result<bool, WheelError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let ticks = self.ticks(delay);
        let (moved, wake) = match self.shared.lock().as_mut() {
            Some(state) => {
                state
                    .pace
                    .catch_up(&mut state.wheel, Instant::now, self.shared.interval);
                let moved = state.wheel.move_to(key, ticks);
                (moved, moved && state.pace.armed(&state.wheel, ticks))
            }
            None => return Err(WheelError::Closed),
        };
        if wake {
            self.shared.wake_ticker();
        }
        Ok(moved)
    }

    /// Cancels the timer of `key` and returns its value (`None` if it had no timer).
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`stop`](Self::stop).
    pub fn remove_timer<Q>(&self, key: &Q) -> Result<Option<V>, WheelError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.shared.lock().as_mut() {
            Some(state) => Ok(state.wheel.remove(key)),
            None => Err(WheelError::Closed),
        }
    }

    /// Takes every pending timer out of the wheel, forgetting the keys, and calls
    /// `f(key, value)` for each on the calling thread. Returns how many there were.
    ///
    /// The timers are taken out under the lock in one step and `f` runs after it is
    /// released, so timers set while `f` runs are not drained (and `f` may set them).
    /// The order is unspecified. If `f` panics, the rest of the drained timers are
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`stop`](Self::stop).
    pub fn drain<F>(&self, mut f: F) -> Result<usize, WheelError>
    where
        F: FnMut(K, V),
    {
        let drained = match self.shared.lock().as_mut() {
            Some(state) => state.wheel.drain(),
            None => return Err(WheelError::Closed),
        };
        let n = drained.len();
        for (key, value) in drained {
            f(key, value);
        }
        Ok(n)
    }
}

impl<K, V> TimingWheel<K, V> {
    /// The tick interval.
    pub fn interval(&self) -> Duration {
        self.shared.interval
    }

    /// The number of slots.
    pub fn slots(&self) -> usize {
        self.shared.slots
    }

    /// The number of pending timers (0 once stopped).
    pub fn len(&self) -> usize {
        self.shared.lock().as_ref().map_or(0, |s| s.wheel.len())
    }

    /// Whether no timer is pending (`true` once stopped).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Stops the wheel: pending timers are dropped without firing, the ticker thread
    /// is stopped and joined, and every later call returns [`WheelError::Closed`].
    ///
    /// Idempotent: calling it again does nothing. Callbacks already handed to the
    /// worker thread still run (`stop` does not wait for them, so it may be called from
    /// a callback). To fire or keep the pending timers, [`drain`](Self::drain) first.
    /// Dropping the wheel stops it.
    pub fn stop(&self) {
        self.shared.close();
        let handle = self.ticker.lock().recover().take();
        if let Some(handle) = handle {
            // Joining ourselves would deadlock; that can only happen if a value dropped
            // on the ticker thread stops its own wheel, and the thread exits anyway.
            if handle.thread().id() != thread::current().id() {
                handle.thread().unpark();
                let _ = handle.join();
            }
        }
    }
}

impl<K, V> Drop for TimingWheel<K, V> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<K, V> fmt::Debug for TimingWheel<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("interval", &self.shared.interval)
            .field("slots", &self.shared.slots)
            .field("pending", &self.len())
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl<K, V> ManualTicker<K, V>
where
    K: Eq + Hash + Clone,
{
    /// Advances the wheel one slot and runs the callbacks of the timers due on it,
    /// inline, in the order they were scheduled. Returns how many fired.
    ///
    /// The wheel's lock is released before the callbacks run, so they may call the
    /// wheel.
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`TimingWheel::stop`].
    pub fn tick(&self) -> Result<usize, WheelError> {
        let due = match self.shared.lock().as_mut() {
            Some(state) => state.wheel.tick(),
            None => return Err(WheelError::Closed),
        };
        let n = due.len();
        for (key, value) in due {
            driver::run_callback(&*self.execute, key, value);
        }
        Ok(n)
    }

    /// Calls [`tick`](Self::tick) `ticks` times; returns how many timers fired in all.
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`TimingWheel::stop`].
    pub fn advance(&self, ticks: u64) -> Result<usize, WheelError> {
        let mut fired = 0;
        for _ in 0..ticks {
            fired += self.tick()?;
        }
        Ok(fired)
    }

    /// The number of ticks so far.
    ///
    /// # Errors
    ///
    /// [`WheelError::Closed`] after [`TimingWheel::stop`].
    pub fn now(&self) -> Result<u64, WheelError> {
        match self.shared.lock().as_ref() {
            Some(state) => Ok(state.wheel.now()),
            None => Err(WheelError::Closed),
        }
    }
}

impl<K, V> fmt::Debug for ManualTicker<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = self.shared.lock().as_ref().map(|s| s.wheel.now());
        f.debug_struct("ManualTicker")
            .field("now", &now)
            .finish_non_exhaustive()
    }
}
