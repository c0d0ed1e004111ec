//! The bloom filter's error type.

use std::fmt;

/// Why a bloom filter could not be sized, built or imported.
///
/// Each variant names the parameter at fault, so a configuration error can be traced
/// back to the setting that caused it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::{BloomError, BloomFilter};
///
/// let err = BloomFilter::with_rate(1_000, 1.5).unwrap_err();
/// assert_eq!(err, BloomError::InvalidRate(1.5));
/// assert!(err.to_string().contains("false_positive_rate"));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BloomError {
    /// `bits` was 0.
    ZeroBits,
    /// `hashes` was 0.
    ZeroHashes,
    /// `expected_items` was 0.
    ZeroItems,
    /// `false_positive_rate` was not strictly between 0 and 1 (or was NaN).
    InvalidRate(f64),
    /// The requested size does not fit in a `u64` number of bits or in this platform's
    /// address space.
    TooLarge,
    /// Allocating the bit array failed.
    OutOfMemory {
        /// The number of bytes that could not be allocated.
        bytes: u64,
    },
    /// A [`BloomConfigBuilder`](super::BloomConfigBuilder) setting is missing or
    /// does not go with the others (such as `bits` beside `expected_items`).
    Setting {
        /// The setting at fault.
        field: &'static str,
        /// What is wrong with it.
        message: &'static str,
    },
    /// An imported bitmap is longer than the filter.
    BitmapTooLong {
        /// Length of the bitmap given, in bytes.
        len: usize,
        /// The most bytes a filter of this many bits can have.
        max: u64,
    },
    /// An imported bitmap sets a bit at or beyond `bits`, so it belongs to a larger
    /// filter.
    BitOutOfRange {
        /// The first offending bit offset (in Redis `SETBIT` numbering).
        offset: u64,
        /// The number of bits of the filter.
        bits: u64,
    },
}

impl fmt::Display for BloomError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BloomError::ZeroBits => f.write_str("`bits` must be at least 1"),
            BloomError::ZeroHashes => f.write_str("`hashes` must be at least 1"),
            BloomError::ZeroItems => f.write_str("`expected_items` must be at least 1"),
            BloomError::InvalidRate(p) => write!(
                f,
                "`false_positive_rate` must be strictly between 0 and 1, got {p}"
            ),
            BloomError::TooLarge => {
                f.write_str("`bits` is too large for this platform's address space")
            }
            BloomError::Setting { field, message } => write!(f, "`{field}` {message}"),
            BloomError::OutOfMemory { bytes } => {
                write!(f, "could not allocate {bytes} bytes for the bloom filter")
            }
            BloomError::BitmapTooLong { len, max } => write!(
                f,
                "bitmap of {len} bytes is longer than the filter's {max} bytes"
            ),
            BloomError::BitOutOfRange { offset, bits } => write!(
                f,
                "bitmap sets bit {offset}, outside a filter of {bits} bits"
            ),
        }
    }
}

impl std::error::Error for BloomError {}
