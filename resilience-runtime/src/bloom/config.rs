//! Bloom filter sizing and hashing: [`BloomConfig`], [`HashScheme`] and the bit
//! [`Positions`] of a key.
//!
//! The positions are kept apart from storage on purpose: the in-memory
//! [`BloomFilter`](super::BloomFilter) and a Redis-backed filter (`SETBIT`/`GETBIT` on
//! the same offsets) compute them with the same code, so the two agree bit for bit.

use super::error::BloomError;
use super::murmur3::{murmur3_x64_128, Prefix};
use std::f64::consts::LN_2;
use std::iter::FusedIterator;

/// The number of hash positions per key in [`HashScheme::GoZero`] mode (go-zero's
/// `maps` constant).
pub const GO_ZERO_HASHES: u32 = 14;

/// How a key is turned into bit positions.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::{BloomConfig, HashScheme};
///
/// assert_eq!(BloomConfig::new(1024, 7)?.scheme(), HashScheme::DoubleHashing);
/// assert_eq!(BloomConfig::go_zero(1024)?.scheme(), HashScheme::GoZero);
/// # Ok::<(), resilience_runtime::bloom::BloomError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HashScheme {
    /// The default: hash the key once with MurmurHash3 x64_128 (seed 0) into two
    /// 64-bit halves `h1`, `h2`, and derive position `i` from `g_i = h1 + i * h2`
    /// (wrapping), Kirsch and Mitzenmacher's double hashing, which keeps the false
    /// positive rate of `k` independent hashes asymptotically. `g_i` is mapped onto
    /// `0..bits` with a multiply-shift (`g_i * bits >> 64`) instead of a division.
    ///
    /// Hashing once makes an insert or lookup cost one hash whatever `k` is.
    DoubleHashing,
    /// go-zero's `core/bloom` scheme, for filters shared with go-zero services:
    /// position `i` (for `i` in `0..14`) is
    /// `murmur3_x64_128(key ++ [i], seed 0).h1 % bits`, always
    /// [`GO_ZERO_HASHES`] positions.
    ///
    /// The full 16-byte blocks of the key are mixed once and only the tail is rehashed
    /// per position, but it is still about fourteen times the hashing work of
    /// [`HashScheme::DoubleHashing`].
    GoZero,
}

/// A validated bloom filter shape: number of bits, number of hashes and hash scheme.
///
/// Build one with [`BloomConfig::new`] (explicit bits and hashes),
/// [`BloomConfig::with_rate`] (from expected items and a target false-positive rate)
/// or [`BloomConfig::go_zero`] (go-zero compatible); all of them reject invalid
/// values with a [`BloomError`] and never panic.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::BloomConfig;
///
/// // 1% false positives for 1 000 keys: 9 586 bits and 7 hashes.
/// let config = BloomConfig::with_rate(1_000, 0.01)?;
/// assert_eq!((config.bits(), config.hashes()), (9_586, 7));
/// assert!((config.expected_fpr(1_000) - 0.01).abs() < 0.001);
/// # Ok::<(), resilience_runtime::bloom::BloomError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BloomConfig {
    bits: u64,
    hashes: u32,
    scheme: HashScheme,
}

impl BloomConfig {
    /// A filter of `bits` bits and `hashes` positions per key, with
    /// [`HashScheme::DoubleHashing`].
    ///
    /// # Errors
    ///
    /// [`BloomError::ZeroBits`] or [`BloomError::ZeroHashes`].
    pub fn new(bits: u64, hashes: u32) -> Result<Self, BloomError> {
        if bits == 0 {
            return Err(BloomError::ZeroBits);
        }
        if hashes == 0 {
            return Err(BloomError::ZeroHashes);
        }
        Ok(BloomConfig {
            bits,
            hashes,
            scheme: HashScheme::DoubleHashing,
        })
    }

    /// The optimal filter for `expected_items` keys at `false_positive_rate`, with
    /// [`HashScheme::DoubleHashing`].
    ///
    /// Uses `m = ceil(-n ln p / (ln 2)^2)` bits and `k = round(m / n * ln 2)` hashes
    /// (at least one of each), which gives a false-positive rate of about `p` once `n`
    /// keys are in.
    ///
    /// # Errors
    ///
    /// [`BloomError::ZeroItems`] if `expected_items` is 0,
    /// [`BloomError::InvalidRate`] unless `0 < false_positive_rate < 1`, and
    /// [`BloomError::TooLarge`] if the bit count overflows a `u64`.
    pub fn with_rate(expected_items: u64, false_positive_rate: f64) -> Result<Self, BloomError> {
        if expected_items == 0 {
            return Err(BloomError::ZeroItems);
        }
        let p = false_positive_rate;
        // Written so that NaN fails too.
        if !(p > 0.0 && p < 1.0) {
            return Err(BloomError::InvalidRate(p));
        }
        let n = expected_items as f64;
        let m = (-n * p.ln() / (LN_2 * LN_2)).ceil();
        // 2^64 as f64 is exact; anything at or above it does not fit.
        if !m.is_finite() || m >= 18_446_744_073_709_551_616.0 {
            return Err(BloomError::TooLarge);
        }
        let bits = (m as u64).max(1);
        let k = (bits as f64 / n * LN_2).round();
        // `as` saturates, so an absurd k becomes u32::MAX rather than wrapping.
        let hashes = (k as u32).max(1);
        Ok(BloomConfig {
            bits,
            hashes,
            scheme: HashScheme::DoubleHashing,
        })
    }

    /// A go-zero compatible filter of `bits` bits: [`HashScheme::GoZero`] with
    /// [`GO_ZERO_HASHES`] positions per key.
    ///
    /// go-zero's own sizing advice is `bits = 20 * expected_items`, which with 14
    /// hashes gives a false-positive rate under 1e-4.
    ///
    /// # Errors
    ///
    /// [`BloomError::ZeroBits`] (where go-zero would panic on a modulo by zero).
    pub fn go_zero(bits: u64) -> Result<Self, BloomError> {
        if bits == 0 {
            return Err(BloomError::ZeroBits);
        }
        Ok(BloomConfig {
            bits,
            hashes: GO_ZERO_HASHES,
            scheme: HashScheme::GoZero,
        })
    }

    /// The number of bits.
    #[inline]
    pub fn bits(&self) -> u64 {
        self.bits
    }

    /// The number of positions per key.
    #[inline]
    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// The hash scheme.
    #[inline]
    pub fn scheme(&self) -> HashScheme {
        self.scheme
    }

    /// The theoretical false-positive rate once `items` distinct keys are in:
    /// `(1 - e^(-k n / m))^k`.
    pub fn expected_fpr(&self, items: u64) -> f64 {
        let k = f64::from(self.hashes);
        (1.0 - (-k * items as f64 / self.bits as f64).exp()).powf(k)
    }

    /// The bit positions of `key`, in `0..bits`, in hash order (they may repeat).
    ///
    /// This is the single definition of where a key lives: the in-memory filter uses
    /// it, and a Redis-backed filter passes the same numbers to `SETBIT`/`GETBIT`.
    /// Computing them does not allocate.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::bloom::BloomConfig;
    ///
    /// let config = BloomConfig::go_zero(64)?;
    /// let positions: Vec<u64> = config.positions(b"hello").collect();
    /// assert_eq!(positions, [51, 34, 34, 19, 23, 2, 10, 0, 20, 32, 13, 25, 51, 53]);
    /// # Ok::<(), resilience_runtime::bloom::BloomError>(())
    /// ```
    #[inline]
    pub fn positions<'k>(&self, key: &'k [u8]) -> Positions<'k> {
        let hasher = match self.scheme {
            HashScheme::DoubleHashing => {
                let (h1, h2) = murmur3_x64_128(key, 0);
                Hasher::Double { h1, h2 }
            }
            HashScheme::GoZero => Hasher::GoZero(Prefix::new(key, 0)),
        };
        Positions {
            hasher,
            bits: self.bits,
            next: 0,
            hashes: self.hashes,
        }
    }
}

/// The bit positions of one key: an iterator returned by [`BloomConfig::positions`]
/// and [`BloomFilter::positions`](super::BloomFilter::positions).
#[derive(Clone, Debug)]
pub struct Positions<'k> {
    hasher: Hasher<'k>,
    bits: u64,
    next: u32,
    hashes: u32,
}

#[derive(Clone, Copy, Debug)]
enum Hasher<'k> {
    Double { h1: u64, h2: u64 },
    GoZero(Prefix<'k>),
}

impl Positions<'_> {
    /// Position `i` of the key. Only called with `i < hashes`, so in go-zero mode
    /// `i < 14` and the suffix byte is exact.
    #[inline(always)]
    pub(crate) fn at(&self, i: u32) -> u64 {
        match &self.hasher {
            Hasher::Double { h1, h2 } => {
                let g = h1.wrapping_add(u64::from(i).wrapping_mul(*h2));
                // Lemire's multiply-shift maps g uniformly onto 0..bits without a division.
                ((u128::from(g) * u128::from(self.bits)) >> 64) as u64
            }
            Hasher::GoZero(prefix) => prefix.h1_with_suffix(i as u8) % self.bits,
        }
    }
}

impl Iterator for Positions<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.next >= self.hashes {
            return None;
        }
        let pos = self.at(self.next);
        self.next += 1;
        Some(pos)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.hashes - self.next) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Positions<'_> {}

impl FusedIterator for Positions<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimal_sizes() {
        let c = BloomConfig::with_rate(100_000, 0.01).unwrap();
        assert_eq!((c.bits(), c.hashes()), (958_506, 7));
        let c = BloomConfig::with_rate(100_000, 0.001).unwrap();
        assert_eq!((c.bits(), c.hashes()), (1_437_759, 10));
        let c = BloomConfig::with_rate(100_000, 0.1).unwrap();
        assert_eq!((c.bits(), c.hashes()), (479_253, 3));
        // Tiny filters still get one bit and one hash.
        let c = BloomConfig::with_rate(1, 0.99).unwrap();
        assert_eq!((c.bits(), c.hashes()), (1, 1));
    }

    #[test]
    fn invalid_sizes_are_errors() {
        assert_eq!(BloomConfig::new(0, 3), Err(BloomError::ZeroBits));
        assert_eq!(BloomConfig::new(8, 0), Err(BloomError::ZeroHashes));
        assert_eq!(BloomConfig::go_zero(0), Err(BloomError::ZeroBits));
        assert_eq!(BloomConfig::with_rate(0, 0.1), Err(BloomError::ZeroItems));
        for p in [0.0, 1.0, -0.5, 2.0, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(
                BloomConfig::with_rate(10, p),
                Err(BloomError::InvalidRate(p))
            );
        }
        assert!(matches!(
            BloomConfig::with_rate(10, f64::NAN),
            Err(BloomError::InvalidRate(p)) if p.is_nan()
        ));
        assert_eq!(
            BloomConfig::with_rate(u64::MAX, 1e-300),
            Err(BloomError::TooLarge)
        );
    }

    #[test]
    fn positions_are_in_range_and_exact_size() {
        for config in [
            BloomConfig::new(1, 5).unwrap(),
            BloomConfig::new(77, 9).unwrap(),
            BloomConfig::new(u64::MAX, 4).unwrap(),
            BloomConfig::go_zero(3).unwrap(),
        ] {
            for key in [&b""[..], b"a", b"0123456789abcdef0123"] {
                let pos = config.positions(key);
                assert_eq!(pos.len(), config.hashes() as usize);
                assert!(pos.clone().all(|p| p < config.bits()));
            }
        }
    }
}
