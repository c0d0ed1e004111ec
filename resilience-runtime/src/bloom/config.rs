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
/// let config = BloomConfig::builder().bits(1024).hashes(7).build()?;
/// assert_eq!(config.scheme(), HashScheme::DoubleHashing);
/// let go_zero = BloomConfig::builder().bits(1024).scheme(HashScheme::GoZero).build()?;
/// assert_eq!(go_zero.hashes(), 14);
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
/// Build one with [`BloomConfig::builder`]: explicit [`bits`](BloomConfigBuilder::bits)
/// and [`hashes`](BloomConfigBuilder::hashes), or
/// [`expected_items`](BloomConfigBuilder::expected_items) and a target
/// [`false_positive_rate`](BloomConfigBuilder::false_positive_rate), or
/// [`HashScheme::GoZero`] and `bits` (go-zero compatible); invalid values are a
/// [`BloomError`], never a panic.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::BloomConfig;
///
/// // 1% false positives for 1 000 keys: 9 586 bits and 7 hashes.
/// let config = BloomConfig::builder().expected_items(1_000).false_positive_rate(0.01).build()?;
/// assert_eq!((config.bits(), config.hashes()), (9_586, 7));
/// assert!((config.expected_fpr(1_000) - 0.01).abs() < 0.001);
/// # Ok::<(), resilience_runtime::bloom::BloomError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BloomConfig {
    bits: u64,
    hashes: u32,
    scheme: HashScheme,
}

impl BloomConfig {
    /// Starts a filter shape: set `bits` and `hashes`, or `expected_items` and
    /// `false_positive_rate`; the scheme is [`HashScheme::DoubleHashing`] unless set.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::bloom::{BloomConfig, BloomError, HashScheme};
    ///
    /// let explicit = BloomConfig::builder().bits(1 << 20).hashes(7).build()?;
    /// assert_eq!(explicit.bits(), 1 << 20);
    /// // go-zero's own sizing advice is 20 bits per expected item.
    /// let go_zero = BloomConfig::builder().bits(20 * 1_000).scheme(HashScheme::GoZero).build()?;
    /// assert_eq!(go_zero.hashes(), 14);
    ///
    /// assert_eq!(BloomConfig::builder().bits(0).hashes(7).build(), Err(BloomError::ZeroBits));
    /// let both = BloomConfig::builder().bits(1024).expected_items(10).false_positive_rate(0.01).build();
    /// assert!(both.unwrap_err().to_string().starts_with("`bits`"));
    /// # Ok::<(), BloomError>(())
    /// ```
    pub fn builder() -> BloomConfigBuilder {
        BloomConfigBuilder {
            bits: None,
            hashes: None,
            scheme: HashScheme::DoubleHashing,
            expected_items: None,
            false_positive_rate: None,
        }
    }

    /// A filter of `bits` bits and `hashes` positions per key, with
    /// [`HashScheme::DoubleHashing`]: [`BloomError::ZeroBits`] or
    /// [`BloomError::ZeroHashes`].
    pub(crate) fn new(bits: u64, hashes: u32) -> Result<Self, BloomError> {
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
    /// Errors: [`BloomError::ZeroItems`] if `expected_items` is 0,
    /// [`BloomError::InvalidRate`] unless `0 < false_positive_rate < 1`, and
    /// [`BloomError::TooLarge`] if the bit count overflows a `u64`.
    pub(crate) fn with_rate(
        expected_items: u64,
        false_positive_rate: f64,
    ) -> Result<Self, BloomError> {
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
    /// [`GO_ZERO_HASHES`] positions per key; [`BloomError::ZeroBits`] (where go-zero
    /// would panic on a modulo by zero).
    pub(crate) fn go_zero(bits: u64) -> Result<Self, BloomError> {
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
    /// use resilience_runtime::bloom::{BloomConfig, HashScheme};
    ///
    /// let config = BloomConfig::builder().bits(64).scheme(HashScheme::GoZero).build()?;
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

/// Builds a [`BloomConfig`]; start from [`BloomConfig::builder`].
///
/// A filter is sized one of two ways, never both:
///
/// * explicitly: [`bits`](Self::bits) and [`hashes`](Self::hashes);
/// * from its load: [`expected_items`](Self::expected_items) and
///   [`false_positive_rate`](Self::false_positive_rate) give the optimal bits and
///   hashes, `m = ceil(-n ln p / (ln 2)^2)` and `k = round(m / n * ln 2)` (at least
///   one of each), for a false-positive rate of about `p` once `n` keys are in.
///
/// With [`HashScheme::GoZero`] (see [`scheme`](Self::scheme)) only `bits` is set: a
/// go-zero filter always has [`GO_ZERO_HASHES`] positions per key.
#[derive(Clone, Copy, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct BloomConfigBuilder {
    bits: Option<u64>,
    hashes: Option<u32>,
    scheme: HashScheme,
    expected_items: Option<u64>,
    false_positive_rate: Option<f64>,
}

impl BloomConfigBuilder {
    /// The number of bits (at least 1; at most 2^32 for a
    /// [`RedisBloom`](crate::redis::RedisBloom)).
    #[must_use = "a setter returns the changed builder"]
    pub fn bits(mut self, bits: u64) -> Self {
        self.bits = Some(bits);
        self
    }

    /// The number of positions per key (at least 1), with [`bits`](Self::bits).
    #[must_use = "a setter returns the changed builder"]
    pub fn hashes(mut self, hashes: u32) -> Self {
        self.hashes = Some(hashes);
        self
    }

    /// How a key is turned into bit positions (default
    /// [`HashScheme::DoubleHashing`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn scheme(mut self, scheme: HashScheme) -> Self {
        self.scheme = scheme;
        self
    }

    /// The number of keys the filter is sized for (at least 1), with
    /// [`false_positive_rate`](Self::false_positive_rate).
    #[must_use = "a setter returns the changed builder"]
    pub fn expected_items(mut self, expected_items: u64) -> Self {
        self.expected_items = Some(expected_items);
        self
    }

    /// The false-positive rate once [`expected_items`](Self::expected_items) keys are
    /// in (strictly between 0 and 1).
    #[must_use = "a setter returns the changed builder"]
    pub fn false_positive_rate(mut self, false_positive_rate: f64) -> Self {
        self.false_positive_rate = Some(false_positive_rate);
        self
    }

    /// Checks the settings and sizes the filter.
    ///
    /// # Errors
    ///
    /// [`BloomError::ZeroBits`], [`BloomError::ZeroHashes`],
    /// [`BloomError::ZeroItems`], [`BloomError::InvalidRate`] (not strictly between 0
    /// and 1, or NaN), [`BloomError::TooLarge`] (the bit count overflows a `u64`), or
    /// [`BloomError::Setting`] naming a setting that is missing or that does not go
    /// with the others.
    pub fn build(self) -> Result<BloomConfig, BloomError> {
        let setting = |field, message| Err(BloomError::Setting { field, message });
        let by_load = self.expected_items.is_some() || self.false_positive_rate.is_some();
        if self.scheme == HashScheme::GoZero {
            if self.expected_items.is_some() {
                return setting(
                    "expected_items",
                    "cannot size a go-zero filter: set `bits` (go-zero advises 20 per item)",
                );
            }
            if self.false_positive_rate.is_some() {
                return setting(
                    "false_positive_rate",
                    "cannot size a go-zero filter: set `bits` (go-zero advises 20 per item)",
                );
            }
            if self.hashes.is_some_and(|k| k != GO_ZERO_HASHES) {
                return setting("hashes", "of a go-zero filter is always 14");
            }
            return match self.bits {
                Some(bits) => BloomConfig::go_zero(bits),
                None => setting("bits", "is needed to size a go-zero filter"),
            };
        }
        if by_load {
            const BY_LOAD: &str =
                "cannot be set with `expected_items` and `false_positive_rate`, which size \
                 the filter";
            if self.bits.is_some() {
                return setting("bits", BY_LOAD);
            }
            if self.hashes.is_some() {
                return setting("hashes", BY_LOAD);
            }
            let Some(items) = self.expected_items else {
                return setting("expected_items", "is needed with `false_positive_rate`");
            };
            let Some(rate) = self.false_positive_rate else {
                return setting("false_positive_rate", "is needed with `expected_items`");
            };
            return BloomConfig::with_rate(items, rate);
        }
        match (self.bits, self.hashes) {
            (Some(bits), Some(hashes)) => BloomConfig::new(bits, hashes),
            (None, _) => setting(
                "bits",
                "is needed: size the filter with `bits` and `hashes`, or with \
                 `expected_items` and `false_positive_rate`",
            ),
            (Some(_), None) => setting("hashes", "is needed with `bits`"),
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
    fn the_builder_sizes_one_way_and_names_the_setting_at_fault() {
        let b = BloomConfig::builder;
        assert_eq!(b().bits(64).hashes(3).build(), BloomConfig::new(64, 3));
        assert_eq!(
            b().expected_items(1000).false_positive_rate(0.01).build(),
            BloomConfig::with_rate(1000, 0.01)
        );
        let go_zero = BloomConfig::go_zero(64);
        assert_eq!(b().bits(64).scheme(HashScheme::GoZero).build(), go_zero);
        assert_eq!(
            b().bits(64).hashes(14).scheme(HashScheme::GoZero).build(),
            go_zero
        );
        // Out-of-range values keep their own errors.
        assert_eq!(b().bits(0).hashes(3).build(), Err(BloomError::ZeroBits));
        assert_eq!(b().bits(8).hashes(0).build(), Err(BloomError::ZeroHashes));
        let zero_items = b().expected_items(0).false_positive_rate(0.1).build();
        assert_eq!(zero_items, Err(BloomError::ZeroItems));
        let rate = b().expected_items(10).false_positive_rate(1.0).build();
        assert_eq!(rate, Err(BloomError::InvalidRate(1.0)));
        // A missing setting, or one that does not go with the others.
        let field = |r: Result<BloomConfig, BloomError>| match r {
            Err(BloomError::Setting { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(b().build()), "bits");
        assert_eq!(field(b().bits(64).build()), "hashes");
        assert_eq!(field(b().hashes(3).build()), "bits");
        assert_eq!(field(b().expected_items(10).build()), "false_positive_rate");
        assert_eq!(
            field(b().false_positive_rate(0.1).build()),
            "expected_items"
        );
        let both = b().bits(64).expected_items(10).false_positive_rate(0.1);
        assert_eq!(field(both.build()), "bits");
        assert_eq!(field(both.hashes(2).bits(0).build()), "bits");
        let by_load = b().hashes(2).expected_items(10).false_positive_rate(0.1);
        assert_eq!(field(by_load.build()), "hashes");
        let go = b().scheme(HashScheme::GoZero);
        assert_eq!(field(go.build()), "bits");
        assert_eq!(field(go.bits(64).hashes(7).build()), "hashes");
        assert_eq!(
            field(go.bits(64).expected_items(10).build()),
            "expected_items"
        );
        let e = go.bits(64).false_positive_rate(0.1).build().unwrap_err();
        assert_eq!(field(Err(e.clone())), "false_positive_rate");
        assert!(e
            .to_string()
            .starts_with("`false_positive_rate` cannot size a go-zero filter"));
    }

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
