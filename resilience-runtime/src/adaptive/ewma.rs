//! Exponentially weighted moving averages, lock-free on one atomic word.

use crate::sync::atomic::{AtomicU64, Ordering};
use std::fmt;
use std::time::Duration;

/// The latency average of a [`Gate`](super::Gate): integer nanoseconds,
/// `new = (7 old + 3 sample) / 10`, the first sample stored as it is.
///
/// `0` means "no sample yet", so a first sample of exactly 0 ns leaves the average
/// unset and the next sample initialises it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::adaptive::LatencyEwma;
///
/// use std::time::Duration;
///
/// let avg = LatencyEwma::new();
/// assert_eq!(avg.get(), None);
/// avg.record(Duration::from_nanos(100));
/// assert_eq!(avg.get(), Some(Duration::from_nanos(100)));
/// avg.record(Duration::from_nanos(200));
/// assert_eq!(avg.get(), Some(Duration::from_nanos(130)));
/// ```
#[derive(Default)]
pub struct LatencyEwma {
    nanos: AtomicU64,
}

impl fmt::Debug for LatencyEwma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyEwma")
            .field("nanos", &self.nanos())
            .finish()
    }
}

impl LatencyEwma {
    /// An average without samples.
    pub const fn new() -> Self {
        LatencyEwma {
            nanos: AtomicU64::new(0),
        }
    }

    /// Folds in one latency sample (whole nanoseconds; one of over 584 years counts as
    /// that long).
    pub fn record(&self, sample: Duration) {
        self.record_nanos(u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX));
    }

    /// [`record`](Self::record) of a sample in nanoseconds.
    pub(crate) fn record_nanos(&self, sample_ns: u64) {
        // The closure always returns `Some`, so `fetch_update` cannot fail.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    sample_ns
                } else {
                    ((u128::from(old) * 7 + u128::from(sample_ns) * 3) / 10) as u64
                })
            });
    }

    /// The average in nanoseconds, `None` before the first (non-zero) sample.
    fn nanos(&self) -> Option<u64> {
        match self.nanos.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// The average as a [`Duration`].
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::adaptive::LatencyEwma;
    /// # use std::time::Duration;
    /// let avg = LatencyEwma::new();
    /// avg.record(Duration::from_millis(2));
    /// assert_eq!(avg.get(), Some(Duration::from_millis(2)));
    /// ```
    pub fn get(&self) -> Option<Duration> {
        self.nanos().map(Duration::from_nanos)
    }
}

/// An `f64` average `new = beta old + (1 - beta) sample` in one atomic word.
#[derive(Debug)]
pub(crate) struct AtomicEwma {
    bits: AtomicU64,
}

impl AtomicEwma {
    pub(crate) fn new(initial: f64) -> Self {
        AtomicEwma {
            bits: AtomicU64::new(initial.to_bits()),
        }
    }

    pub(crate) fn update(&self, sample: f64, beta: f64) -> f64 {
        let mut next = 0.0;
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                next = f64::from_bits(bits) * beta + sample * (1.0 - beta);
                Some(next.to_bits())
            });
        next
    }

    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    #[cfg(test)]
    pub(crate) fn set(&self, v: f64) {
        self.bits.store(v.to_bits(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_vectors() {
        let e = LatencyEwma::new();
        e.record(Duration::ZERO);
        assert_eq!(e.nanos(), None, "0 keeps the average unset");
        e.record(Duration::from_nanos(100));
        e.record(Duration::from_nanos(200));
        assert_eq!(e.nanos(), Some(130));
        e.record_nanos(130);
        assert_eq!(e.nanos(), Some(130));
        e.record(Duration::MAX);
        assert!(
            e.nanos().unwrap() > u64::MAX / 4,
            "no overflow, a huge sample saturates"
        );
    }

    #[test]
    fn float_average() {
        let e = AtomicEwma::new(0.0);
        assert!((e.update(10.0, 0.9) - 1.0).abs() < 1e-12);
        assert!((e.update(10.0, 0.9) - 1.9).abs() < 1e-12);
        e.set(5.0);
        assert_eq!(e.get(), 5.0);
    }
}
