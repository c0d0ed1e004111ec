//! The classic three-state breaker: closed, open, half-open.

use super::config::ClassicConfig;
use super::state::{ClassicRefused, ClassicState, ClassicStats, Transition, TransitionReason};
use super::{nanos, roll};
use crate::clock::Instant;
use crate::error::FieldError;
use crate::rolling::{BucketCells, RollingWindow};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Mutex;
use crate::sync::Recover;
use std::fmt;
use std::time::Duration;

const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const KIND_MASK: u64 = 0b11;
const ADMITTED_SHIFT: u32 = 2;
const SUCCEEDED_SHIFT: u32 = 18;
const EPOCH_SHIFT: u32 = 34;
const COUNT_MASK: u64 = 0xFFFF;
const EPOCH_MASK: u64 = (1 << 30) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packed(u64);

impl Packed {
    fn new(kind: u64, admitted: u64, succeeded: u64, epoch: u64) -> Self {
        debug_assert!(admitted <= COUNT_MASK && succeeded <= admitted);
        Packed(
            kind | admitted << ADMITTED_SHIFT
                | succeeded << SUCCEEDED_SHIFT
                | (epoch & EPOCH_MASK) << EPOCH_SHIFT,
        )
    }
    fn kind(self) -> u64 {
        self.0 & KIND_MASK
    }
    fn admitted(self) -> u64 {
        self.0 >> ADMITTED_SHIFT & COUNT_MASK
    }
    fn succeeded(self) -> u64 {
        self.0 >> SUCCEEDED_SHIFT & COUNT_MASK
    }
    fn epoch(self) -> u64 {
        self.0 >> EPOCH_SHIFT
    }
    fn next_epoch(self) -> u64 {
        (self.epoch() + 1) & EPOCH_MASK
    }
    fn state(self) -> ClassicState {
        match self.kind() {
            CLOSED => ClassicState::Closed,
            OPEN => ClassicState::Open,
            _ => ClassicState::HalfOpen,
        }
    }
}

// ---- the window ---------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct CallRecord {
    failed: bool,
    slow: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct CallCounts {
    calls: u64,
    failures: u64,
    slow: u64,
}

#[derive(Debug, Default)]
struct CallCells {
    calls: AtomicU64,
    failures: AtomicU64,
    slow: AtomicU64,
}

impl BucketCells for CallCells {
    type Input = CallRecord;
    type Snapshot = CallCounts;

    fn add(&self, r: CallRecord) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if r.failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        if r.slow {
            self.slow.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        self.slow.store(0, Ordering::Relaxed);
    }

    fn snapshot(&self) -> CallCounts {
        CallCounts {
            calls: self.calls.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            slow: self.slow.load(Ordering::Relaxed),
        }
    }
}

/// The classic three-state circuit breaker.
///
/// * **Closed**: every call is admitted; completed calls are counted in a sliding
///   window. The breaker opens when the failure rate (or the slow-call rate) of the
///   window reaches its threshold once the window holds
///   [`minimum_calls`](ClassicConfig::minimum_calls) calls, or after
///   [`consecutive_failures`](ClassicConfig::consecutive_failures) failures in a row
///   (see [`ClassicConfig`]).
/// * **Open**: calls are rejected with [`ClassicRefused`] until the open wait
///   ([`Backoff`](crate::retry::Backoff)) has elapsed; the first call after that moves the
///   breaker to half-open and becomes a probe.
/// * **Half-open**: exactly [`half_open_probes`](ClassicConfig::half_open_probes)
///   probe slots; other calls are rejected. When all probes succeed the breaker closes
///   with an empty window and the backoff starts over; when one fails (or is slow) the
///   breaker opens again with the next, longer, wait. A probe whose ticket is dropped
///   without an outcome frees its slot for another call.
///
/// [`allow`](Self::allow) returns a [`ClassicPermit`]; the caller reports the outcome on
/// it. Every call that changes the state returns the [`Transition`]; the state and a
/// transition counter can also be read at any time.
///
/// # Concurrency
///
/// The state (kind, probe counters and an epoch) is one packed `AtomicU64` updated by
/// compare-and-swap: admitting a call, taking or releasing a probe slot, counting a
/// probe success and moving from open to half-open are lock-free. The two transitions
/// that must also update other fields (into open: the open deadline and the backoff
/// step; half-open to closed: clearing the window) run under a mutex taken only for
/// those rare transitions, never on the admission path. Outcomes of calls admitted
/// before a transition (an earlier epoch) are ignored.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
/// use resilience_runtime::retry::Backoff;
/// use std::time::Duration;
///
/// let config = ClassicConfig::builder()
///     .failure_rate(0.5)
///     .minimum_calls(4)
///     .open_wait(Backoff::fixed(Duration::from_secs(1)))
///     .half_open_probes(1)
///     .build()?;
/// let breaker = ClassicBreaker::new(config, Instant::from_nanos(0))?;
/// for ok in [true, false, true, false] {
///     let ticket = breaker.allow(Instant::from_nanos(0)).expect("closed");
///     if ok { ticket.success(Instant::from_nanos(0)); } else { ticket.failure(Instant::from_nanos(0)); }
/// }
/// assert_eq!(breaker.state(), ClassicState::Open);
/// assert!(breaker.allow(Instant::from_nanos(999_999_999)).is_err());
///
/// let probe = breaker.allow(Instant::from_nanos(1_000_000_000)).expect("the wait elapsed");
/// assert_eq!(breaker.state(), ClassicState::HalfOpen);
/// let closed = probe.success(Instant::from_nanos(1_000_000_100)).expect("all probes succeeded");
/// assert_eq!(closed.to, ClassicState::Closed);
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Debug)]
pub struct ClassicBreaker {
    config: ClassicConfig,
    state: AtomicU64,
    /// When open: when probes may start. Written before the state is published.
    open_until: AtomicU64,
    window: RollingWindow<CallCells>,
    consecutive: AtomicU64,
    transitions: AtomicU64,
    /// Serialises the transitions into open and into closed; holds the number of
    /// consecutive openings since the breaker last closed, minus one (the backoff step).
    rare: Mutex<u32>,
    /// The slow-call threshold in nanoseconds, when slow calls are tracked.
    slow_ns: Option<u64>,
    probes: u64,
}

impl ClassicBreaker {
    /// A closed breaker with an empty window starting at `now`.
    ///
    /// # Errors
    ///
    /// The [`FieldError`] [`ClassicConfigBuilder::build`](super::ClassicConfigBuilder::build) would give: the fields are
    /// public, so `config` is checked again.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    ///
    /// assert!(ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0)).is_ok());
    /// // The fields are public, so a configuration may have changed since it was built.
    /// let mut bad = ClassicConfig::default();
    /// bad.minimum_calls = 0;
    /// assert_eq!(ClassicBreaker::new(bad, Instant::from_nanos(0)).unwrap_err().field, "minimum_calls");
    /// ```
    pub fn new(config: ClassicConfig, now: Instant) -> Result<Self, FieldError> {
        config.validate()?;
        let window = RollingWindow::with_cells(config.buckets, config.bucket_width(), now)
            .map_err(|e| FieldError::new("buckets", e.to_string()))?;
        Ok(ClassicBreaker {
            config,
            state: AtomicU64::new(Packed::new(CLOSED, 0, 0, 0).0),
            open_until: AtomicU64::new(0),
            window,
            consecutive: AtomicU64::new(0),
            transitions: AtomicU64::new(0),
            rare: Mutex::new(0),
            slow_ns: config
                .slow_call_rate
                .map(|_| nanos(config.slow_call_duration)),
            probes: config.half_open_probes,
        })
    }

    /// The configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.config().half_open_probes, 3);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn config(&self) -> &ClassicConfig {
        &self.config
    }

    /// Asks to run a call at `now`.
    ///
    /// Closed: always admitted. Open: rejected until the wait has elapsed, then the
    /// breaker turns half-open and this call is its first probe (the ticket's
    /// [`transition`](ClassicPermit::transition) says so). Half-open: admitted while a
    /// probe slot is free.
    ///
    /// # Errors
    ///
    /// [`ClassicRefused`] when the breaker is open or every probe slot is taken.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// match b.allow(Instant::from_nanos(10)) {
    ///     Ok(ticket) => {
    ///         // ... run the call ...
    ///         ticket.success(Instant::from_nanos(20));
    ///     }
    ///     Err(rejected) => println!("{rejected}"),
    /// }
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn allow(&self, now: Instant) -> Result<ClassicPermit<'_>, ClassicRefused> {
        let now = now.as_nanos();
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let p = Packed(cur);
            match p.kind() {
                CLOSED => return Ok(self.ticket(false, p.epoch(), now, None)),
                OPEN => {
                    let until = self.open_until.load(Ordering::Relaxed);
                    if now < until {
                        return Err(ClassicRefused {
                            state: ClassicState::Open,
                            retry_at: Some(Instant::from_nanos(until)),
                        });
                    }
                    let epoch = p.next_epoch();
                    let next = Packed::new(HALF_OPEN, 1, 0, epoch);
                    match self.state.compare_exchange_weak(
                        cur,
                        next.0,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            self.transitions.fetch_add(1, Ordering::Relaxed);
                            let t = Transition {
                                from: ClassicState::Open,
                                to: ClassicState::HalfOpen,
                                reason: TransitionReason::WaitElapsed,
                                at: Instant::from_nanos(now),
                                open_until: None,
                            };
                            return Ok(self.ticket(true, epoch, now, Some(t)));
                        }
                        Err(actual) => cur = actual,
                    }
                }
                _ => {
                    if p.admitted() >= self.probes {
                        return Err(ClassicRefused {
                            state: ClassicState::HalfOpen,
                            retry_at: None,
                        });
                    }
                    match self.state.compare_exchange_weak(
                        cur,
                        cur + (1 << ADMITTED_SHIFT),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Ok(self.ticket(true, p.epoch(), now, None)),
                        Err(actual) => cur = actual,
                    }
                }
            }
        }
    }

    fn ticket(
        &self,
        probe: bool,
        epoch: u64,
        now: u64,
        transition: Option<Transition>,
    ) -> ClassicPermit<'_> {
        ClassicPermit {
            breaker: self,
            probe,
            epoch,
            started: now,
            transition,
            finished: false,
        }
    }

    /// The current state. Lazy: an open breaker whose wait has elapsed reads
    /// [`Open`](ClassicState::Open) until the next [`allow`](Self::allow).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.state(), ClassicState::Closed);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn state(&self) -> ClassicState {
        Packed(self.state.load(Ordering::Acquire)).state()
    }

    /// How many state changes happened since creation.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.transition_count(), 0);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn transition_count(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }

    /// A snapshot for statistics, the window read at `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.stats(Instant::from_nanos(0)).calls, 0);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn stats(&self, now: Instant) -> ClassicStats {
        let now = now.as_nanos();
        let p = Packed(self.state.load(Ordering::Acquire));
        let open_until = (p.kind() == OPEN).then(|| self.open_until.load(Ordering::Relaxed));
        let c = self.window_counts(now);
        ClassicStats {
            state: p.state(),
            calls: c.calls,
            failures: c.failures,
            slow_calls: c.slow,
            consecutive_failures: self.consecutive.load(Ordering::Relaxed),
            open_until: open_until.map(Instant::from_nanos),
            probes_admitted: p.admitted(),
            probes_succeeded: p.succeeded(),
            transitions: self.transition_count(),
        }
    }

    fn window_counts(&self, now: u64) -> CallCounts {
        let mut sum = CallCounts::default();
        self.window.reduce(Instant::from_nanos(now), |b| {
            sum.calls += b.calls;
            sum.failures += b.failures;
            sum.slow += b.slow;
        });
        sum
    }

    fn complete(
        &self,
        probe: bool,
        epoch: u64,
        now: u64,
        failed: bool,
        elapsed: Duration,
    ) -> Option<Transition> {
        let slow = self.slow_ns.is_some_and(|limit| nanos(elapsed) >= limit);
        if !probe {
            return self.record_closed(epoch, now, failed, slow);
        }
        if failed {
            self.trip(epoch, HALF_OPEN, now, TransitionReason::ProbeFailed)
        } else if slow {
            self.trip(epoch, HALF_OPEN, now, TransitionReason::ProbeSlow)
        } else {
            self.probe_succeeded(epoch, now)
        }
    }

    fn record_closed(&self, epoch: u64, now: u64, failed: bool, slow: bool) -> Option<Transition> {
        let p = Packed(self.state.load(Ordering::Acquire));
        if p.kind() != CLOSED || p.epoch() != epoch {
            return None; // admitted before the breaker opened: ignored
        }
        self.window
            .add(Instant::from_nanos(now), CallRecord { failed, slow });
        if failed {
            let run = self.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
            if self.config.consecutive_failures.is_some_and(|n| run >= n) {
                return self.trip(epoch, CLOSED, now, TransitionReason::ConsecutiveFailures);
            }
        } else if self.consecutive.load(Ordering::Relaxed) != 0 {
            self.consecutive.store(0, Ordering::Relaxed);
        }
        let c = self.window_counts(now);
        if c.calls < self.config.minimum_calls {
            return None;
        }
        let calls = c.calls as f64;
        if c.failures > 0 && c.failures as f64 / calls >= self.config.failure_rate {
            return self.trip(epoch, CLOSED, now, TransitionReason::FailureRate);
        }
        if let Some(rate) = self.config.slow_call_rate {
            if c.slow > 0 && c.slow as f64 / calls >= rate {
                return self.trip(epoch, CLOSED, now, TransitionReason::SlowCallRate);
            }
        }
        None
    }

    /// Closed or half-open (of `epoch`) → open. `None` if another call already moved
    /// the breaker on.
    fn trip(
        &self,
        epoch: u64,
        from: u64,
        now: u64,
        reason: TransitionReason,
    ) -> Option<Transition> {
        let mut step = self.rare.lock().recover();
        let mut cur = self.state.load(Ordering::Acquire);
        if Packed(cur).kind() != from || Packed(cur).epoch() != epoch {
            return None;
        }
        let next_step = if from == CLOSED {
            0
        } else {
            step.saturating_add(1)
        };
        let wait = &self.config.open_wait;
        let jitter = if wait.jitter > 0.0 { roll() } else { 0.0 };
        let until = now.saturating_add(nanos(wait.wait(u64::from(next_step), jitter)));
        let next = Packed::new(OPEN, 0, 0, Packed(cur).next_epoch());
        // Published by the release of the compare-and-swap below; nobody reads it
        // before the state says open.
        self.open_until.store(until, Ordering::Relaxed);
        loop {
            // Probe counters may still move (half-open) while we hold the lock.
            match self
                .state
                .compare_exchange_weak(cur, next.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => {
                    cur = actual;
                    if Packed(cur).kind() != from || Packed(cur).epoch() != epoch {
                        return None;
                    }
                }
            }
        }
        *step = next_step;
        self.transitions.fetch_add(1, Ordering::Relaxed);
        Some(Transition {
            from: Packed(cur).state(),
            to: ClassicState::Open,
            reason,
            at: Instant::from_nanos(now),
            open_until: Some(Instant::from_nanos(until)),
        })
    }

    /// Moves the breaker to `to` now, from any state (feature `testing`): `Open` as if
    /// it tripped from closed (it waits its first open wait, then probes), `HalfOpen`
    /// with every probe slot free, `Closed` with an empty window (a reset). The state
    /// word takes a new epoch, so the tickets of calls admitted before no longer move
    /// the breaker (their outcomes still count in the window). Serialised with the
    /// other transitions into open and closed by the same lock.
    #[cfg(feature = "testing")]
    pub(crate) fn force(&self, to: ClassicState, now: Instant) -> Transition {
        let step = self.rare.lock().recover();
        self.force_locked(step, to, TransitionReason::Forced, now)
    }

    /// Moves the breaker from `from` to `to` for a fleet quorum (feature `heartbeat`),
    /// as [`force`](Self::force) does, if it is still in `from` under the transition
    /// lock: a breaker that tripped or closed by its own rules meanwhile is left alone.
    #[cfg(feature = "heartbeat")]
    pub(crate) fn quorum_move(
        &self,
        from: ClassicState,
        to: ClassicState,
        now: Instant,
    ) -> Option<Transition> {
        let step = self.rare.lock().recover();
        // Out of closed, only transitions under this lock move the state word; a
        // breaker in another state is left to its own rules anyway.
        (Packed(self.state.load(Ordering::Acquire)).state() == from)
            .then(|| self.force_locked(step, to, TransitionReason::Quorum, now))
    }

    #[cfg(any(feature = "testing", feature = "heartbeat"))]
    fn force_locked(
        &self,
        mut step: crate::sync::MutexGuard<'_, u32>,
        to: ClassicState,
        reason: TransitionReason,
        now: Instant,
    ) -> Transition {
        let now = now.as_nanos();
        let kind = match to {
            ClassicState::Closed => CLOSED,
            ClassicState::Open => OPEN,
            ClassicState::HalfOpen => HALF_OPEN,
        };
        let mut open_until = None;
        match to {
            ClassicState::Open => {
                let wait = &self.config.open_wait;
                let jitter = if wait.jitter > 0.0 { roll() } else { 0.0 };
                let until = now.saturating_add(nanos(wait.wait(0, jitter)));
                // Published by the compare-and-swap below, as in `trip`.
                self.open_until.store(until, Ordering::Relaxed);
                open_until = Some(Instant::from_nanos(until));
                *step = 0;
            }
            ClassicState::Closed => {
                self.window.clear();
                self.consecutive.store(0, Ordering::Relaxed);
                *step = 0;
            }
            ClassicState::HalfOpen => {}
        }
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let next = Packed::new(kind, 0, 0, Packed(cur).next_epoch());
            match self
                .state
                .compare_exchange_weak(cur, next.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        drop(step);
        self.transitions.fetch_add(1, Ordering::Relaxed);
        Transition {
            from: Packed(cur).state(),
            to,
            reason,
            at: Instant::from_nanos(now),
            open_until,
        }
    }

    fn probe_succeeded(&self, epoch: u64, now: u64) -> Option<Transition> {
        let mut cur = self.state.load(Ordering::Acquire);
        let succeeded = loop {
            let p = Packed(cur);
            if p.kind() != HALF_OPEN || p.epoch() != epoch {
                return None;
            }
            let s = p.succeeded() + 1;
            let next = Packed::new(HALF_OPEN, p.admitted(), s, epoch);
            match self
                .state
                .compare_exchange_weak(cur, next.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break s,
                Err(actual) => cur = actual,
            }
        };
        if succeeded < self.probes {
            return None;
        }
        // This call completed the last probe: every slot is taken and succeeded, so no
        // other call can change the state until we close it (only a forced transition,
        // `testing`, can: then the swap below fails and the forced state stands).
        let mut step = self.rare.lock().recover();
        self.window.clear();
        self.consecutive.store(0, Ordering::Relaxed);
        *step = 0;
        let done = Packed::new(HALF_OPEN, self.probes, self.probes, epoch);
        let closed = Packed::new(CLOSED, 0, 0, done.next_epoch());
        let swapped =
            self.state
                .compare_exchange(done.0, closed.0, Ordering::AcqRel, Ordering::Acquire);
        debug_assert!(
            swapped.is_ok() || cfg!(feature = "testing"),
            "half-open state moved after the last probe"
        );
        if swapped.is_err() {
            return None;
        }
        self.transitions.fetch_add(1, Ordering::Relaxed);
        Some(Transition {
            from: ClassicState::HalfOpen,
            to: ClassicState::Closed,
            reason: TransitionReason::ProbesSucceeded,
            at: Instant::from_nanos(now),
            open_until: None,
        })
    }

    /// A probe ticket of `epoch` was dropped without an outcome: free its slot.
    fn release_probe(&self, epoch: u64) {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            let p = Packed(cur);
            if p.kind() != HALF_OPEN || p.epoch() != epoch {
                return;
            }
            debug_assert!(p.admitted() > p.succeeded());
            match self.state.compare_exchange_weak(
                cur,
                cur - (1 << ADMITTED_SHIFT),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// An admitted call of a [`ClassicBreaker`]; report its outcome with
/// [`success`](Self::success), [`failure`](Self::failure) or [`finish`](Self::finish).
///
/// Dropping a ticket without an outcome (the call panicked, or its future was dropped)
/// counts neither a success nor a failure; a half-open probe's slot is freed for
/// another call. The ticket remembers the `now` it was issued at, so the call's
/// duration (for slow-call accounting) is the difference of the two `now`s unless
/// [`finish`](Self::finish) is given one.
///
/// # Examples
///
/// ```
/// # use resilience_runtime::Instant;
/// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig, ClassicState};
/// use resilience_runtime::retry::Backoff;
/// use std::time::Duration;
///
/// let config = ClassicConfig::builder()
///     .consecutive_failures(1)
///     .open_wait(Backoff::fixed(Duration::from_nanos(100)))
///     .half_open_probes(1)
///     .build()?;
/// let breaker = ClassicBreaker::new(config, Instant::from_nanos(0))?;
/// breaker.allow(Instant::from_nanos(0)).unwrap().failure(Instant::from_nanos(0));
///
/// let probe = breaker.allow(Instant::from_nanos(100)).expect("first probe");
/// assert!(probe.is_probe());
/// assert!(breaker.allow(Instant::from_nanos(101)).is_err()); // the only slot is taken
/// drop(probe); // e.g. the call panicked
/// assert!(breaker.allow(Instant::from_nanos(102)).is_ok()); // the slot is free again
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[must_use = "dropping the ticket at once records nothing; report the call's outcome on it"]
pub struct ClassicPermit<'a> {
    breaker: &'a ClassicBreaker,
    probe: bool,
    epoch: u64,
    started: u64,
    transition: Option<Transition>,
    finished: bool,
}

impl fmt::Debug for ClassicPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClassicPermit")
            .field("probe", &self.probe)
            .field("epoch", &self.epoch)
            .field("started", &self.started)
            .field("transition", &self.transition)
            .finish_non_exhaustive()
    }
}

impl ClassicPermit<'_> {
    /// The call succeeded at `now`; its duration is `now` minus the `now` of
    /// [`allow`](ClassicBreaker::allow).
    ///
    /// Returns the transition this caused (half-open → closed after the last probe).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.allow(Instant::from_nanos(0)).unwrap().success(Instant::from_nanos(5)), None);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn success(self, now: Instant) -> Option<Transition> {
        let elapsed = Duration::from_nanos(now.as_nanos().saturating_sub(self.started));
        self.finish(now, false, elapsed)
    }

    /// The call failed at `now` (a panic is a failure if the caller catches it;
    /// otherwise drop the ticket).
    ///
    /// Returns the transition this caused (closed → open, half-open → open).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.allow(Instant::from_nanos(0)).unwrap().failure(Instant::from_nanos(5)), None); // one failure < minimum_calls
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn failure(self, now: Instant) -> Option<Transition> {
        let elapsed = Duration::from_nanos(now.as_nanos().saturating_sub(self.started));
        self.finish(now, true, elapsed)
    }

    /// The call completed at `now`, failed or not, and took `elapsed` (compared with
    /// [`slow_call_duration`](ClassicConfig::slow_call_duration) when slow calls are
    /// tracked).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// use std::time::Duration;
    ///
    /// let config = ClassicConfig::builder()
    ///     .slow_call_rate(1.0)
    ///     .slow_call_duration(Duration::from_millis(100))
    ///     .minimum_calls(1)
    ///     .build()?;
    /// let b = ClassicBreaker::new(config, Instant::from_nanos(0))?;
    /// let t = b.allow(Instant::from_nanos(0)).unwrap().finish(Instant::from_nanos(1), false, Duration::from_millis(150));
    /// assert!(t.is_some()); // 100% slow calls
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn finish(mut self, now: Instant, failed: bool, elapsed: Duration) -> Option<Transition> {
        let now = now.as_nanos();
        self.finished = true;
        self.breaker
            .complete(self.probe, self.epoch, now, failed, elapsed)
    }

    /// Whether this call is a half-open probe.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert!(!b.allow(Instant::from_nanos(0)).unwrap().is_probe());
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The `now` the ticket was issued at.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// let at = Instant::from_nanos(42);
    /// assert_eq!(b.allow(at).unwrap().started_at(), at);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn started_at(&self) -> Instant {
        Instant::from_nanos(self.started)
    }

    /// The transition [`allow`](ClassicBreaker::allow) caused by issuing this ticket
    /// (open → half-open for the first probe).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Instant;
    /// # use resilience_runtime::breaker::{ClassicBreaker, ClassicConfig};
    /// let b = ClassicBreaker::new(ClassicConfig::default(), Instant::from_nanos(0))?;
    /// assert_eq!(b.allow(Instant::from_nanos(0)).unwrap().transition(), None);
    /// # Ok::<(), resilience_runtime::FieldError>(())
    /// ```
    pub fn transition(&self) -> Option<Transition> {
        self.transition
    }
}

impl<'a> ClassicPermit<'a> {
    /// Splits the ticket into `(epoch, started, probe)` without releasing anything;
    /// [`ClassicBreaker::ticket_from_raw`] puts it back together. Lets a caller keep a
    /// running call in a few words.
    pub(crate) fn into_raw(mut self) -> (u64, u64, bool) {
        self.finished = true;
        (self.epoch, self.started, self.probe)
    }
}

impl ClassicBreaker {
    /// The ticket [`ClassicPermit::into_raw`] split.
    pub(crate) fn ticket_from_raw(
        &self,
        epoch: u64,
        started: u64,
        probe: bool,
    ) -> ClassicPermit<'_> {
        self.ticket(probe, epoch, started, None)
    }
}

impl Drop for ClassicPermit<'_> {
    fn drop(&mut self) {
        if !self.finished && self.probe {
            self.breaker.release_probe(self.epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instant `ns` nanoseconds into the timeline.
    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }
    use crate::retry::Backoff;

    const SECOND: u64 = 1_000_000_000;

    fn breaker(config: ClassicConfig) -> ClassicBreaker {
        ClassicBreaker::new(config, at(0)).unwrap()
    }

    #[test]
    fn packing_round_trips() {
        let p = Packed::new(HALF_OPEN, 65_535, 1_234, EPOCH_MASK);
        assert_eq!(
            (p.kind(), p.admitted(), p.succeeded(), p.epoch()),
            (HALF_OPEN, 65_535, 1_234, EPOCH_MASK)
        );
        assert_eq!(p.next_epoch(), 0);
        assert_eq!(p.state(), ClassicState::HalfOpen);
        let q = Packed(p.0 - (1 << ADMITTED_SHIFT));
        assert_eq!(
            (q.admitted(), q.succeeded(), q.epoch()),
            (65_534, 1_234, EPOCH_MASK)
        );
    }

    #[test]
    fn rate_needs_minimum_calls_and_a_failure() {
        let b = breaker(ClassicConfig {
            failure_rate: 0.0,
            minimum_calls: 3,
            ..ClassicConfig::default()
        });
        for _ in 0..10 {
            assert_eq!(b.allow(at(0)).unwrap().success(at(0)), None);
        }
        assert_eq!(b.state(), ClassicState::Closed);
        let t = b.allow(at(0)).unwrap().failure(at(0)).unwrap();
        assert_eq!(t.reason, TransitionReason::FailureRate);
    }

    #[test]
    fn success_completing_minimum_calls_can_trip() {
        let b = breaker(ClassicConfig {
            failure_rate: 0.5,
            minimum_calls: 4,
            ..ClassicConfig::default()
        });
        for _ in 0..2 {
            assert_eq!(b.allow(at(0)).unwrap().failure(at(0)), None);
        }
        assert_eq!(b.allow(at(0)).unwrap().success(at(0)), None);
        let t = b
            .allow(at(0))
            .unwrap()
            .success(at(0))
            .expect("2 of 4 failed");
        assert_eq!(t.reason, TransitionReason::FailureRate);
    }

    #[test]
    fn success_resets_the_failure_run() {
        let b = breaker(ClassicConfig {
            consecutive_failures: Some(3),
            failure_rate: 1.0,
            minimum_calls: 1_000,
            ..ClassicConfig::default()
        });
        for _ in 0..5 {
            assert_eq!(b.allow(at(0)).unwrap().failure(at(0)), None);
            assert_eq!(b.allow(at(0)).unwrap().failure(at(0)), None);
            assert_eq!(b.allow(at(0)).unwrap().success(at(0)), None);
        }
        assert_eq!(b.stats(at(0)).consecutive_failures, 0);
        b.allow(at(0)).unwrap().failure(at(0));
        b.allow(at(0)).unwrap().failure(at(0));
        let t = b.allow(at(0)).unwrap().failure(at(0)).unwrap();
        assert_eq!(t.reason, TransitionReason::ConsecutiveFailures);
    }

    #[test]
    fn stale_tickets_are_ignored() {
        let b = breaker(ClassicConfig {
            consecutive_failures: Some(1),
            open_wait: Backoff::fixed(Duration::from_secs(1)),
            half_open_probes: 1,
            ..ClassicConfig::default()
        });
        let slow_closed = b.allow(at(0)).unwrap();
        b.allow(at(0)).unwrap().failure(at(0)).unwrap();
        // Admitted while closed, completes while open: ignored.
        assert_eq!(slow_closed.failure(at(1)), None);
        assert_eq!(b.transition_count(), 1);
        let probe = b.allow(at(SECOND)).unwrap();
        assert_eq!(probe.success(at(SECOND)).unwrap().to, ClassicState::Closed);
        assert_eq!(b.stats(at(SECOND)).calls, 0, "closing clears the window");
    }

    #[test]
    fn slow_probe_reopens() {
        let b = breaker(ClassicConfig {
            consecutive_failures: Some(1),
            slow_call_rate: Some(1.0),
            slow_call_duration: Duration::from_millis(10),
            open_wait: Backoff::exponential(Duration::from_secs(1), 2.0, Duration::from_secs(10)),
            half_open_probes: 1,
            ..ClassicConfig::default()
        });
        b.allow(at(0)).unwrap().failure(at(0)).unwrap();
        let probe = b.allow(at(SECOND)).unwrap();
        let t = probe.success(at(SECOND + 10_000_000)).unwrap();
        assert_eq!(t.reason, TransitionReason::ProbeSlow);
        assert_eq!(t.open_until, Some(at(SECOND + 10_000_000 + 2 * SECOND)));
    }

    #[test]
    fn stats_report_probes() {
        let b = breaker(ClassicConfig {
            consecutive_failures: Some(1),
            open_wait: Backoff::fixed(Duration::from_secs(1)),
            half_open_probes: 3,
            ..ClassicConfig::default()
        });
        b.allow(at(0)).unwrap().failure(at(0)).unwrap();
        assert_eq!(b.stats(at(0)).open_until, Some(at(SECOND)));
        let p1 = b.allow(at(SECOND)).unwrap();
        let p2 = b.allow(at(SECOND)).unwrap();
        assert_eq!(p1.success(at(SECOND)), None);
        let s = b.stats(at(SECOND));
        assert_eq!(
            (s.state, s.probes_admitted, s.probes_succeeded),
            (ClassicState::HalfOpen, 2, 1)
        );
        drop(p2);
        assert_eq!(b.stats(at(SECOND)).probes_admitted, 1);
        assert_eq!(s.transitions, 2);
    }
}
