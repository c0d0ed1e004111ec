//! Adaptive backpressure: admission limits that size themselves from what the service
//! does, so excess calls fail fast instead of queueing.
//!
//! This module owns admission by concurrency, independent of the registry's points:
//!
//! * [`Gate`]: a fixed non-blocking semaphore of capacity `L` with an exponentially
//!   weighted average of the latency of the calls it admitted (the latency EWMA is
//!   [`LatencyEwma`], `new = 0.7 old + 0.3 sample`). Size it with Little's law,
//!   [`littles_law`]: `L = arrival rate x latency` (20 000 req/s x 20 ms = 400).
//! * [`AdaptiveLimiter`]: go-zero's adaptive load shedder. It drops a call only while
//!   the CPU is over a threshold (or was, during a cool-off) *and* both the average and
//!   the current number of calls in flight exceed the flight the service sustained
//!   recently: the peak number of completions per bucket times the lowest bucket
//!   latency (Little's law again). Its CPU signal is a [`CpuSource`]; [`SystemCpu`]
//!   samples the process's cgroup (v2, then v1) or `/proc/stat` every 250 ms in a
//!   background thread started on first use.
//! * [`GradientLimiter`]: a latency-gradient limit in the style of Netflix's
//!   `Gradient2`: the limit grows while the short-term latency stays within
//!   `rtt_tolerance` of the no-load latency (measured by short probes, as Envoy's
//!   adaptive concurrency measures `minRTT`) and shrinks as queueing inflates it, so
//!   it settles near the service's real concurrency. It needs no CPU signal.
//!
//! Each decision is a value: [`GateRefused`] or [`LimitRefused`], which the tower
//! layer (feature `tower`) maps to HTTP 429. Permits are RAII guards: dropping one
//! (early return, panic, cancelled future) releases its slot.
//!
//! Time: the limiter and the gradient take `now` (an [`Instant`](crate::Instant) on the limiter's
//! timeline, [`AdaptiveLimiter::now`]) so they are deterministic under test; each type
//! also reads its [`Clock`] where a guard must measure a duration by
//! itself. With [`Clock::manual`](crate::Clock::manual) every reading is the manual
//! clock's.
//!
//! The workspace's `examples` crate holds a deterministic discrete-event simulation
//! of an overloaded service (`examples::sim`, run by the `adaptive_sim` example) that
//! compares these limits.
//!
//! Files: `gate.rs` (the gate), `ewma.rs` (averages), `shedder.rs` (the go-zero
//! limiter), `cpu.rs` (CPU sources and the sampler), `gradient.rs`, `error.rs`
//! (configuration errors and refusals).

mod cpu;
mod error;
mod ewma;
mod gate;
mod gradient;
mod permit;
mod shedder;

use crate::error::FieldError;
pub use cpu::{CpuError, CpuSampler, CpuSampling, CpuSource, FixedCpu, SystemCpu, CPU_MAX};
pub use error::{GateRefused, LimitRefused};
pub use ewma::LatencyEwma;
pub use gate::{Gate, GatePermit};
pub use gradient::{GradientConfig, GradientConfigBuilder, GradientLimiter};
pub use permit::{LatencyLimiter, LatencyPermit};
pub use shedder::{
    AdaptiveConfig, AdaptiveConfigBuilder, AdaptiveLimiter, AdaptiveStats, CoolOff, ShedderRules,
    ShedderWindow,
};

use crate::clock::Clock;
use crate::sync::OnceLock;
use std::time::Duration;

/// The concurrency limit `L` that Little's law gives for an arrival rate (calls per
/// second) and a latency: `L = rate x latency`, rounded up, at least 1.
///
/// This is the number of calls in flight a service holds when it serves `rate` calls
/// per second that each take `latency`; admitting more only makes them wait.
///
/// # Errors
///
/// A [`FieldError`] naming `arrival_rate` when it is not a positive finite number (or
/// the limit does not fit in a `u64`), or `latency` when it is zero.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::littles_law;
/// use std::time::Duration;
///
/// assert_eq!(littles_law(20_000.0, Duration::from_millis(20))?, 400);
/// assert_eq!(littles_law(10.0, Duration::from_millis(1))?, 1);
/// assert_eq!(littles_law(-1.0, Duration::from_millis(1)).unwrap_err().field, "arrival_rate");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
pub fn littles_law(arrival_rate: f64, latency: Duration) -> Result<u64, FieldError> {
    if !arrival_rate.is_finite() || arrival_rate <= 0.0 {
        return Err(FieldError::new(
            "arrival_rate",
            format!("must be a positive finite number of calls per second, got {arrival_rate}"),
        ));
    }
    if latency.is_zero() {
        return Err(FieldError::new("latency", "must be non-zero"));
    }
    let exact = arrival_rate * latency.as_nanos() as f64 / 1e9;
    let mut limit = exact.ceil();
    // `20_000.0 * 0.02` style products can land a hair above an integer; do not round
    // such a value up to the next one.
    if limit - exact > 1.0 - 1e-9 {
        limit -= 1.0;
    }
    if limit >= u64::MAX as f64 {
        return Err(FieldError::new(
            "arrival_rate",
            format!("gives a limit too large for a u64 ({exact})"),
        ));
    }
    Ok((limit as u64).max(1))
}

/// Nanosecond readings of a [`Clock`]: the manual clock's reading, or the system
/// clock's tick counter scaled to nanoseconds (the timeline proper has a resolution of
/// a few milliseconds, too coarse for call latencies).
#[derive(Clone, Debug)]
pub(crate) struct Timer {
    clock: Clock,
    origin: u64,
    ns_per_tick: f64,
}

/// Where a system timer starts, so that `0` stays free to mean "unset".
const TIMER_START_NS: u64 = 1_000_000_000;

impl Timer {
    pub(crate) fn new(clock: Clock) -> Timer {
        let origin = clock.ticks();
        let per_sec = clock.ns_to_ticks(1_000_000_000).max(1);
        Timer {
            clock,
            origin,
            ns_per_tick: 1e9 / per_sec as f64,
        }
    }

    /// A timer on the process-wide system clock.
    pub(crate) fn system() -> Timer {
        static SYSTEM: OnceLock<Clock> = OnceLock::new();
        Timer::new(SYSTEM.get_or_init(Clock::system).clone())
    }

    #[inline]
    pub(crate) fn now(&self) -> u64 {
        if self.clock.is_manual() {
            return self.clock.now_ns();
        }
        let ticks = self.clock.ticks().saturating_sub(self.origin);
        ((ticks as f64 * self.ns_per_tick) as u64).saturating_add(TIMER_START_NS)
    }
}

pub(crate) use crate::clock::nanos;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn littles_law_rounds_up_but_not_float_noise() {
        assert_eq!(
            littles_law(20_000.0, Duration::from_millis(20)).unwrap(),
            400
        );
        assert_eq!(littles_law(1000.0, Duration::from_micros(1500)).unwrap(), 2);
        assert_eq!(littles_law(3.0, Duration::from_millis(100)).unwrap(), 1);
        assert_eq!(littles_law(0.3 * 3.0, Duration::from_secs(10)).unwrap(), 9);
        assert_eq!(
            littles_law(f64::NAN, Duration::from_millis(1))
                .unwrap_err()
                .field,
            "arrival_rate"
        );
        assert_eq!(
            littles_law(0.0, Duration::from_millis(1))
                .unwrap_err()
                .field,
            "arrival_rate"
        );
        assert_eq!(
            littles_law(1.0, Duration::ZERO).unwrap_err().field,
            "latency"
        );
        assert_eq!(
            littles_law(1e300, Duration::from_secs(1))
                .unwrap_err()
                .field,
            "arrival_rate"
        );
    }

    #[test]
    fn timer_reads_manual_clock_and_moves_with_system_clock() {
        let manual = ManualClock::new();
        let t = Timer::new(Clock::manual(&manual));
        let a = t.now();
        manual.advance(Duration::from_nanos(123));
        assert_eq!(t.now() - a, 123);

        let s = Timer::system();
        let a = s.now();
        std::thread::sleep(Duration::from_millis(5));
        let d = s.now() - a;
        assert!(
            (4_000_000..500_000_000).contains(&d),
            "{d} ns for a 5 ms sleep"
        );
    }
}
