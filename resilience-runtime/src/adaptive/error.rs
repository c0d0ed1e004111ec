//! Errors of the adaptive limits: an invalid configuration, a refused call.

use std::fmt;

/// A [`Gate`](super::Gate) refused a call: all of its `capacity` slots were taken.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::{GateRefused, Gate};
///
/// let gate = Gate::new(1)?;
/// let _held = gate.try_acquire()?;
/// assert_eq!(gate.try_acquire().unwrap_err(), GateRefused { capacity: 1 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateRefused {
    /// The gate's capacity when the call was refused.
    pub capacity: u64,
}

impl fmt::Display for GateRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capacity limit reached: {} calls in flight, backpressure triggered",
            self.capacity
        )
    }
}

impl std::error::Error for GateRefused {}

/// An adaptive limit ([`AdaptiveLimiter`](super::AdaptiveLimiter) or
/// [`GradientLimiter`](super::GradientLimiter)) refused a call because the service is
/// overloaded.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::LimitRefused;
///
/// let o = LimitRefused { in_flight: 12, limit: 10.0, cpu: Some(950) };
/// assert_eq!(o.to_string(), "service overloaded: 12 calls in flight, limit 10.0, cpu 95.0%");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitRefused {
    /// Calls in flight when the call was refused.
    pub in_flight: u64,
    /// The limit they exceeded (for the shedder: the sustainable flight times the
    /// overload factor).
    pub limit: f64,
    /// The CPU usage in millicores of the quota (0 ..= 1000) when the decision used it.
    pub cpu: Option<u64>,
}

impl fmt::Display for LimitRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "service overloaded: {} calls in flight, limit {:.1}",
            self.in_flight, self.limit
        )?;
        if let Some(cpu) = self.cpu {
            write!(f, ", cpu {:.1}%", cpu as f64 / 10.0)?;
        }
        Ok(())
    }
}

impl std::error::Error for LimitRefused {}
