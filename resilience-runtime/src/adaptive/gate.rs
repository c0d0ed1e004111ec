//! The backpressure gate: a fail-fast semaphore of capacity `L` with a latency average.

use super::error::GateRefused;
use super::ewma::LatencyEwma;
use super::{littles_law, Timer};
use crate::clock::Clock;
use crate::clock::Instant;
use crate::error::FieldError;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Arc;
use crossbeam_utils::CachePadded;
use std::fmt;
use std::ops::Deref;
use std::time::Duration;

/// A non-blocking semaphore of `capacity` slots: a call either takes a slot at once or
/// is refused with [`GateRefused`] (HTTP 429), never queued.
///
/// The gate counts the calls in flight and keeps a [`LatencyEwma`] of the time each
/// admitted call held its slot. Size it with Little's law
/// ([`Gate::from_littles_law`]): the calls a service can hold is its arrival rate
/// times its latency; more only wait.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::Gate;
/// use std::time::Duration;
///
/// let gate = Gate::from_littles_law(20_000.0, Duration::from_millis(20))?;
/// assert_eq!(gate.capacity(), 400);
/// {
///     let _permit = gate.try_acquire()?;
///     assert_eq!(gate.active(), 1);
/// } // released (and timed) here
/// assert_eq!(gate.active(), 0);
/// assert!(gate.average_latency().is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Gate {
    active: CachePadded<AtomicU64>,
    capacity: AtomicU64,
    latency: LatencyEwma,
    refused: AtomicU64,
    timer: Timer,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("capacity", &self.capacity())
            .field("active", &self.active())
            .field("average_latency", &self.average_latency())
            .field("refused", &self.refused())
            .finish_non_exhaustive()
    }
}

fn check_capacity(capacity: u64) -> Result<(), FieldError> {
    if capacity == 0 {
        return Err(FieldError::new("capacity", "must be at least 1"));
    }
    Ok(())
}

impl Gate {
    /// A gate of `capacity` slots that times calls with the system clock.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming `capacity` when it is 0.
    pub fn new(capacity: u64) -> Result<Gate, FieldError> {
        Gate::build(capacity, Timer::system())
    }

    /// A gate that times calls with `clock` (a [`ManualClock`](crate::ManualClock) in
    /// tests).
    ///
    /// # Errors
    ///
    /// As [`Gate::new`].
    ///
    /// # Examples
    ///
    /// The latency average of the seed: 100 ns, then 200 ns, averages 130 ns.
    ///
    /// ```
    /// use resilience_runtime::adaptive::Gate;
    /// use resilience_runtime::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let gate = Gate::with_clock(4, Clock::manual(&clock))?;
    /// for ns in [100, 200] {
    ///     let permit = gate.try_acquire()?;
    ///     clock.advance(Duration::from_nanos(ns));
    ///     drop(permit);
    /// }
    /// assert_eq!(gate.average_latency(), Some(Duration::from_nanos(130)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(capacity: u64, clock: Clock) -> Result<Gate, FieldError> {
        Gate::build(capacity, Timer::new(clock))
    }

    /// A gate sized by [`littles_law`]: `capacity = arrival_rate x latency`.
    ///
    /// # Errors
    ///
    /// As [`littles_law`].
    pub fn from_littles_law(arrival_rate: f64, latency: Duration) -> Result<Gate, FieldError> {
        Gate::new(littles_law(arrival_rate, latency)?)
    }

    fn build(capacity: u64, timer: Timer) -> Result<Gate, FieldError> {
        check_capacity(capacity)?;
        Ok(Gate {
            active: CachePadded::new(AtomicU64::new(0)),
            capacity: AtomicU64::new(capacity),
            latency: LatencyEwma::new(),
            refused: AtomicU64::new(0),
            timer,
        })
    }

    /// Takes a slot, or fails at once when all are taken.
    ///
    /// The slot is released when the returned permit is dropped, whatever the path
    /// (return, `?`, panic, a cancelled future); the time it was held is folded into
    /// the latency average.
    ///
    /// # Errors
    ///
    /// [`GateRefused`] when `capacity` calls are in flight.
    #[inline]
    pub fn try_acquire(&self) -> Result<GatePermit<&Gate>, GateRefused> {
        self.take()?;
        Ok(GatePermit {
            start: self.timer.now(),
            gate: self,
        })
    }

    /// Like [`try_acquire`](Gate::try_acquire), with a permit that owns a reference
    /// count of the gate, for futures and tasks that must be `'static`.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Gate::try_acquire).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::adaptive::Gate;
    /// use std::sync::Arc;
    ///
    /// let gate = Arc::new(Gate::new(1)?);
    /// let permit = gate.try_acquire_owned()?;
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(gate.active(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_owned(self: &Arc<Self>) -> Result<GatePermit<Arc<Gate>>, GateRefused> {
        self.take()?;
        Ok(GatePermit {
            start: self.timer.now(),
            gate: Arc::clone(self),
        })
    }

    #[inline]
    fn take(&self) -> Result<(), GateRefused> {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let mut current = self.active.load(Ordering::Relaxed);
        loop {
            if current >= capacity {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(GateRefused { capacity });
            }
            match self.active.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => current = seen,
            }
        }
    }

    /// The number of slots.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Changes the number of slots, for a gate resized at run time (for example from
    /// [`littles_law`] with a fresh rate and [`average_latency`](Gate::average_latency)).
    /// Calls in flight keep their slots; when shrinking, new calls are refused until
    /// enough of them finish.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] naming `capacity` when it is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::Gate;
    /// let gate = Gate::new(2)?;
    /// let a = gate.try_acquire()?;
    /// gate.set_capacity(1)?;
    /// assert!(gate.try_acquire().is_err());
    /// drop(a);
    /// assert!(gate.try_acquire().is_ok());
    /// assert_eq!(gate.set_capacity(0).unwrap_err().field, "capacity");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_capacity(&self, capacity: u64) -> Result<(), FieldError> {
        check_capacity(capacity)?;
        self.capacity.store(capacity, Ordering::Relaxed);
        Ok(())
    }

    /// Calls in flight.
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// The latency average of the calls admitted so far, `None` before the first one
    /// finished.
    pub fn average_latency(&self) -> Option<Duration> {
        self.latency.get()
    }

    /// How many calls were refused since the gate was created.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The current time on the gate's clock, in nanoseconds.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.timer.now())
    }
}

/// A slot of a [`Gate`], released (and its holding time recorded) on drop.
///
/// `G` is `&Gate` from [`Gate::try_acquire`] or `Arc<Gate>` from
/// [`Gate::try_acquire_owned`].
#[must_use = "dropping the permit releases the slot at once"]
pub struct GatePermit<G: Deref<Target = Gate>> {
    gate: G,
    start: u64,
}

impl<G: Deref<Target = Gate>> fmt::Debug for GatePermit<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatePermit")
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

impl<G: Deref<Target = Gate>> GatePermit<G> {
    /// The gate the slot belongs to.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
}

impl<G: Deref<Target = Gate>> Drop for GatePermit<G> {
    fn drop(&mut self) {
        let gate = &*self.gate;
        // Every release is a sample, cancelled and panicking calls included: the slot
        // was held that long either way.
        gate.latency
            .record_nanos(gate.timer.now().saturating_sub(self.start));
        gate.active.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn exact_capacity_under_threads() {
        let gate = Arc::new(Gate::new(3).unwrap());
        let admitted = AtomicU64::new(0);
        let peak = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        if let Ok(p) = gate.try_acquire() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            peak.fetch_max(gate.active(), Ordering::Relaxed);
                            drop(p);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Relaxed) <= 3);
        assert_eq!(gate.active(), 0);
        assert_eq!(
            admitted.load(Ordering::Relaxed) + gate.refused(),
            80_000,
            "every attempt is either admitted or counted as refused"
        );
    }

    #[test]
    fn panicking_holder_releases() {
        let clock = ManualClock::new();
        let gate = Gate::with_clock(1, Clock::manual(&clock)).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _p = gate.try_acquire().unwrap();
            clock.advance(Duration::from_micros(5));
            panic!("boom");
        }));
        assert!(r.is_err());
        assert_eq!(gate.active(), 0);
        assert_eq!(gate.average_latency(), Some(Duration::from_micros(5)));
    }
}
