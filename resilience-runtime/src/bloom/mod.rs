//! Bloom filters: a lock-free in-memory [`BloomFilter`], go-zero compatible hashing and
//! a cache-penetration [`PenetrationGuard`].
//!
//! A bloom filter answers "have I seen this key?" with *no* false negatives and a
//! tunable rate of false positives, in a fixed number of bits. Size it from the number
//! of keys you expect and the false-positive rate you can live with
//! ([`BloomFilter::with_rate`]); the seed material suggests 0.1% where wrong answers
//! are costly (payments), 1% for ordinary work (sessions, spam) and 10% where they
//! hardly matter (traffic statistics, crawler de-duplication).
//!
//! Two hashing schemes are available ([`HashScheme`]):
//!
//! - [`HashScheme::DoubleHashing`] (default): one MurmurHash3 x64_128 per key,
//!   positions by Kirsch–Mitzenmacher double hashing;
//! - [`HashScheme::GoZero`]: bit-for-bit go-zero's `core/bloom`, so a Rust service can
//!   share a Redis bitmap with go-zero services.
//!
//! [`BloomConfig::positions`] is the one definition of where a key's bits are, shared by
//! every storage backend, and [`BloomFilter::to_bitmap_bytes`] /
//! [`BloomFilter::from_bitmap_bytes`] convert to and from the byte layout Redis uses for
//! `SETBIT` offsets.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::bloom::BloomFilter;
//!
//! let filter = BloomFilter::with_rate(10_000, 0.01)?;
//! filter.insert(b"user:42");
//! assert!(filter.contains(b"user:42"));
//! assert!(!filter.contains(b"user:43")); // true with probability about 99%
//! # Ok::<(), resilience_runtime::bloom::BloomError>(())
//! ```

mod config;
mod error;
mod guard;
mod murmur3;

pub use config::{BloomConfig, BloomConfigBuilder, HashScheme, Positions, GO_ZERO_HASHES};
pub use error::BloomError;
pub use guard::{GuardStats, PenetrationGuard};
pub use murmur3::murmur3_x64_128;

use crate::sync::{AtomicU64, Ordering};

/// A fixed-size bloom filter in memory, safe to share between threads without a lock.
///
/// Bits live in `AtomicU64` words: [`insert`](Self::insert) sets them with `fetch_or`
/// and [`contains`](Self::contains) reads them, so any number of threads may insert
/// and query at once (share it with an `Arc`). A key whose `insert` has returned is
/// found by every `contains` that happens after it: there are never false negatives.
/// Neither call allocates.
///
/// Keys are byte strings, passed as anything that is `AsRef<[u8]>`: `&str`,
/// `String`, `&[u8]`, `Vec<u8>`, byte arrays and references to them.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::BloomFilter;
/// use std::sync::Arc;
///
/// let filter = Arc::new(BloomFilter::with_rate(1_000, 0.001)?);
/// let writers: Vec<_> = (0..4)
///     .map(|t| {
///         let filter = Arc::clone(&filter);
///         std::thread::spawn(move || {
///             for i in 0..100 {
///                 filter.insert(format!("{t}-{i}"));
///             }
///         })
///     })
///     .collect();
/// for w in writers {
///     w.join().unwrap();
/// }
/// assert!((0..4).all(|t| (0..100).all(|i| filter.contains(format!("{t}-{i}")))));
/// # Ok::<(), resilience_runtime::bloom::BloomError>(())
/// ```
///
/// A go-zero compatible filter, with the offsets go-zero would `SETBIT`:
///
/// ```
/// use resilience_runtime::bloom::BloomFilter;
///
/// let filter = BloomFilter::go_zero(1024)?;
/// filter.insert("hello");
/// let offsets: Vec<u64> = filter.positions(b"hello").collect();
/// assert_eq!(offsets[..3], [307, 802, 866]);
/// # Ok::<(), resilience_runtime::bloom::BloomError>(())
/// ```
pub struct BloomFilter {
    config: BloomConfig,
    /// Bit `j` is bit `j % 64` of word `j / 64`.
    words: Box<[AtomicU64]>,
}

impl std::fmt::Debug for BloomFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bits themselves would flood the output.
        f.debug_struct("BloomFilter")
            .field("config", &self.config)
            .field("ones", &self.count_ones())
            .finish()
    }
}

impl BloomFilter {
    /// An empty filter of the given shape.
    ///
    /// # Errors
    ///
    /// [`BloomError::TooLarge`] if the bit array cannot be addressed on this platform,
    /// [`BloomError::OutOfMemory`] if it cannot be allocated (reported, not aborted).
    pub fn new(config: BloomConfig) -> Result<Self, BloomError> {
        let words =
            usize::try_from(config.bits().div_ceil(64)).map_err(|_| BloomError::TooLarge)?;
        let mut vec = Vec::new();
        vec.try_reserve_exact(words)
            .map_err(|_| BloomError::OutOfMemory {
                bytes: (words as u64).saturating_mul(8),
            })?;
        vec.resize_with(words, || AtomicU64::new(0));
        Ok(BloomFilter {
            config,
            words: vec.into_boxed_slice(),
        })
    }

    /// An empty filter of `bits` bits and `hashes` positions per key
    /// ([`HashScheme::DoubleHashing`]): a [`BloomConfig::builder`] with `bits` and `hashes`.
    ///
    /// # Errors
    ///
    /// As [`BloomConfigBuilder::build`] and [`BloomFilter::new`].
    pub fn with_bits(bits: u64, hashes: u32) -> Result<Self, BloomError> {
        Self::new(BloomConfig::new(bits, hashes)?)
    }

    /// An empty filter sized for `expected_items` keys at `false_positive_rate`
    /// ([`HashScheme::DoubleHashing`]): a [`BloomConfig::builder`] with `expected_items` and
    /// `false_positive_rate`.
    ///
    /// # Errors
    ///
    /// As [`BloomConfigBuilder::build`] and [`BloomFilter::new`].
    pub fn with_rate(expected_items: u64, false_positive_rate: f64) -> Result<Self, BloomError> {
        Self::new(BloomConfig::with_rate(expected_items, false_positive_rate)?)
    }

    /// An empty go-zero compatible filter of `bits` bits: a [`BloomConfig::builder`]
    /// with `bits` and [`HashScheme::GoZero`].
    ///
    /// # Errors
    ///
    /// As [`BloomConfigBuilder::build`] and [`BloomFilter::new`].
    pub fn go_zero(bits: u64) -> Result<Self, BloomError> {
        Self::new(BloomConfig::go_zero(bits)?)
    }

    /// The filter's shape.
    #[inline]
    pub fn config(&self) -> &BloomConfig {
        &self.config
    }

    /// The bit positions of `key` in this filter; see [`BloomConfig::positions`].
    #[inline]
    pub fn positions<'k>(&self, key: &'k [u8]) -> Positions<'k> {
        self.config.positions(key)
    }

    /// Adds `key`. Returns `true` if this set at least one new bit, `false` if every
    /// bit was already set (the key was possibly present already).
    ///
    /// Lock-free and allocation-free; safe to call from many threads at once.
    #[inline]
    pub fn insert<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.insert_bytes(key.as_ref())
    }

    #[inline]
    fn insert_bytes(&self, key: &[u8]) -> bool {
        let positions = self.config.positions(key);
        let mut changed = false;
        for i in 0..self.config.hashes() {
            let (word, mask) = locate(positions.at(i));
            // Release pairs with the Acquire in `contains`: whoever sees the bits also
            // sees what the inserting thread wrote before inserting (say, a database row).
            let old = self.words[word].fetch_or(mask, Ordering::Release);
            changed |= old & mask == 0;
        }
        changed
    }

    /// Whether `key` may have been inserted: `false` means it certainly was not,
    /// `true` means it was, or is a false positive.
    ///
    /// Stops at the first unset bit, so absent keys are usually cheaper than present
    /// ones. Lock-free and allocation-free.
    #[inline]
    pub fn contains<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.contains_bytes(key.as_ref())
    }

    #[inline]
    fn contains_bytes(&self, key: &[u8]) -> bool {
        let positions = self.config.positions(key);
        (0..self.config.hashes()).all(|i| {
            let (word, mask) = locate(positions.at(i));
            self.words[word].load(Ordering::Acquire) & mask != 0
        })
    }

    /// The number of bits set.
    ///
    /// Reads each word once; with concurrent inserts the count is somewhere between
    /// the counts before and after them.
    pub fn count_ones(&self) -> u64 {
        self.words
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// The theoretical false-positive rate after `items` distinct inserts; see
    /// [`BloomConfig::expected_fpr`].
    pub fn expected_fpr(&self, items: u64) -> f64 {
        self.config.expected_fpr(items)
    }

    /// The bits as bytes in Redis `SETBIT` order: bit offset `j` is the bit with mask
    /// `0x80 >> (j % 8)` of byte `j / 8` (most significant bit first).
    ///
    /// The result is `ceil(bits / 8)` bytes long, which is what `GET` returns for a
    /// Redis bitmap whose last bit was touched; a Redis string can be shorter (missing
    /// bytes are zero), which [`from_bitmap_bytes`](Self::from_bitmap_bytes) accepts.
    /// With concurrent inserts, each 64-bit word is read once, so the snapshot may
    /// contain part of a concurrent insert.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::bloom::{BloomConfig, BloomFilter};
    ///
    /// let filter = BloomFilter::go_zero(16)?;
    /// filter.insert(b"hello");
    /// let bytes = filter.to_bitmap_bytes();
    /// assert_eq!(bytes.len(), 2);
    /// // Bit offset 2 (one of "hello"'s positions modulo 16) is mask 0x20 of byte 0.
    /// assert!(filter.positions(b"hello").any(|p| p == 2));
    /// assert_eq!(bytes[0] & 0x20, 0x20);
    ///
    /// let copy = BloomFilter::from_bitmap_bytes(*filter.config(), &bytes)?;
    /// assert!(copy.contains(b"hello"));
    /// # Ok::<(), resilience_runtime::bloom::BloomError>(())
    /// ```
    pub fn to_bitmap_bytes(&self) -> Vec<u8> {
        let len = bitmap_len(self.config.bits());
        let mut out = Vec::with_capacity(len);
        for word in self.words.iter() {
            // Little-endian bytes put bits 0..8 first; reversing each byte turns "bit 0
            // is the least significant" into Redis's "bit 0 is the most significant".
            for byte in word.load(Ordering::Acquire).to_le_bytes() {
                out.push(byte.reverse_bits());
            }
        }
        out.truncate(len);
        out
    }

    /// A filter of shape `config` whose bits are `bytes`, in the layout of
    /// [`to_bitmap_bytes`](Self::to_bitmap_bytes) (Redis `SETBIT` order).
    ///
    /// `bytes` may be shorter than `ceil(bits / 8)`: the missing bytes are zero, as in
    /// Redis.
    ///
    /// # Errors
    ///
    /// [`BloomError::BitmapTooLong`] if `bytes` has more than `ceil(bits / 8)` bytes,
    /// [`BloomError::BitOutOfRange`] if it sets a bit at an offset `>= bits` (both mean
    /// the bitmap belongs to a larger filter), and the errors of
    /// [`BloomFilter::new`].
    pub fn from_bitmap_bytes(config: BloomConfig, bytes: &[u8]) -> Result<Self, BloomError> {
        let bits = config.bits();
        let max = bits.div_ceil(8);
        if bytes.len() as u64 > max {
            return Err(BloomError::BitmapTooLong {
                len: bytes.len(),
                max,
            });
        }
        if bytes.len() as u64 == max && !bits.is_multiple_of(8) {
            let last = bytes[bytes.len() - 1];
            // Offsets bits..(8 * max) are the low `8 - bits % 8` bits of the last byte.
            let stray = last & (0xffu8 >> (bits % 8));
            if stray != 0 {
                let offset = (max - 1) * 8 + u64::from(stray.leading_zeros());
                return Err(BloomError::BitOutOfRange { offset, bits });
            }
        }
        let filter = Self::new(config)?;
        for (word, chunk) in filter.words.iter().zip(bytes.chunks(8)) {
            let mut le = [0u8; 8];
            for (dst, src) in le.iter_mut().zip(chunk) {
                *dst = src.reverse_bits();
            }
            word.store(u64::from_le_bytes(le), Ordering::Relaxed);
        }
        Ok(filter)
    }
}

/// Word index and mask of bit `pos`.
#[inline(always)]
fn locate(pos: u64) -> (usize, u64) {
    // `pos < bits` and the word count fits a usize (checked in `new`), so the cast is
    // lossless.
    ((pos >> 6) as usize, 1u64 << (pos & 63))
}

fn bitmap_len(bits: u64) -> usize {
    // Fits: `new` checked that bits / 64 fits a usize, and bytes = words * 8 is
    // addressable because the words were allocated.
    bits.div_ceil(8) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_round_trip_across_word_boundaries() {
        let filter = BloomFilter::with_bits(131, 3).unwrap();
        for key in 0u32..20 {
            filter.insert(key.to_le_bytes());
        }
        let bytes = filter.to_bitmap_bytes();
        assert_eq!(bytes.len(), 17);
        let copy = BloomFilter::from_bitmap_bytes(*filter.config(), &bytes).unwrap();
        assert_eq!(copy.to_bitmap_bytes(), bytes);
        assert_eq!(copy.count_ones(), filter.count_ones());
    }

    #[test]
    fn bitmap_byte_order_is_most_significant_first() {
        let config = BloomConfig::new(70, 1).unwrap();
        let mut bytes = vec![0u8; 9];
        bytes[0] = 0x80; // offset 0
        bytes[8] = 0x40 | 0x01; // offsets 65 and 71 (71 is out of range)
        assert_eq!(
            BloomFilter::from_bitmap_bytes(config, &bytes).unwrap_err(),
            BloomError::BitOutOfRange {
                offset: 71,
                bits: 70
            }
        );
        bytes[8] = 0x40;
        let filter = BloomFilter::from_bitmap_bytes(config, &bytes).unwrap();
        assert_eq!(filter.words[0].load(Ordering::Relaxed), 1);
        assert_eq!(filter.words[1].load(Ordering::Relaxed), 1 << 1);
        assert_eq!(filter.to_bitmap_bytes(), bytes);
    }

    #[test]
    fn short_and_long_bitmaps() {
        let config = BloomConfig::new(64, 1).unwrap();
        let filter = BloomFilter::from_bitmap_bytes(config, &[0xff]).unwrap();
        assert_eq!(filter.count_ones(), 8);
        assert_eq!(
            BloomFilter::from_bitmap_bytes(config, &[0; 9]).unwrap_err(),
            BloomError::BitmapTooLong { len: 9, max: 8 }
        );
    }

    #[test]
    fn too_large_is_an_error_not_an_abort() {
        let err = BloomFilter::with_bits(u64::MAX, 1).unwrap_err();
        assert!(
            matches!(err, BloomError::TooLarge | BloomError::OutOfMemory { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn insert_reports_new_bits() {
        let filter = BloomFilter::with_bits(1024, 4).unwrap();
        assert!(filter.insert("a"));
        assert!(!filter.insert("a"));
    }
}
