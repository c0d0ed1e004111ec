//! MurmurHash3 x64_128, written out so the bloom filter needs no hashing dependency.
//!
//! The output is bit-for-bit that of the reference C++ `MurmurHash3_x64_128` and of
//! `github.com/spaolacci/murmur3` (which go-zero uses): `h1` is the first 64-bit half,
//! the one go-zero's `hash.Hash` (`murmur3.Sum64`) returns.

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

/// MurmurHash3 x64_128 of `data` with `seed`, as the two 64-bit halves `(h1, h2)`.
///
/// go-zero's `hash.Hash(data)` (spaolacci's `murmur3.Sum64`) is `h1` with seed 0.
/// A Rust API that returns the hash as one `u128` usually packs `h1` in the *low*
/// 64 bits; this function returns the halves separately so there is nothing to confuse.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::murmur3_x64_128;
///
/// assert_eq!(murmur3_x64_128(b"", 0).0, 0);
/// assert_eq!(murmur3_x64_128(b"hello", 0).0, 0xcbd8_a7b3_41bd_9b02);
/// ```
#[inline]
pub fn murmur3_x64_128(data: &[u8], seed: u32) -> (u64, u64) {
    let prefix = Prefix::new(data, seed);
    finish(prefix.h1, prefix.h2, prefix.rest, data.len() as u64)
}

/// The hash state after every full 16-byte block of a key.
///
/// go-zero hashes `key ++ [i]` for fourteen values of `i`; the blocks of `key` are the
/// same each time, so they are mixed once and only the tail is redone per `i`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prefix<'a> {
    h1: u64,
    h2: u64,
    /// The bytes after the last full block (0 to 15 of them).
    rest: &'a [u8],
    len: u64,
}

impl<'a> Prefix<'a> {
    #[inline]
    pub(crate) fn new(data: &'a [u8], seed: u32) -> Self {
        let (mut h1, mut h2) = (u64::from(seed), u64::from(seed));
        let mut blocks = data.chunks_exact(16);
        for block in &mut blocks {
            (h1, h2) = mix_block(h1, h2, block);
        }
        Prefix {
            h1,
            h2,
            rest: blocks.remainder(),
            len: data.len() as u64,
        }
    }

    /// `h1` of the hash of the key followed by the single byte `suffix`.
    #[inline]
    pub(crate) fn h1_with_suffix(&self, suffix: u8) -> u64 {
        let mut tail = [0u8; 16];
        let r = self.rest.len();
        tail[..r].copy_from_slice(self.rest);
        tail[r] = suffix;
        let len = self.len + 1;
        if r + 1 == 16 {
            // The suffix completes a block: mix it, and the tail is empty.
            let (h1, h2) = mix_block(self.h1, self.h2, &tail);
            finish(h1, h2, &[], len).0
        } else {
            finish(self.h1, self.h2, &tail[..=r], len).0
        }
    }
}

#[inline(always)]
fn read_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(buf)
}

#[inline(always)]
fn mix_k1(k1: u64) -> u64 {
    k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2)
}

#[inline(always)]
fn mix_k2(k2: u64) -> u64 {
    k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1)
}

#[inline(always)]
fn mix_block(mut h1: u64, mut h2: u64, block: &[u8]) -> (u64, u64) {
    let k1 = read_u64(&block[..8]);
    let k2 = read_u64(&block[8..16]);
    h1 ^= mix_k1(k1);
    h1 = h1
        .rotate_left(27)
        .wrapping_add(h2)
        .wrapping_mul(5)
        .wrapping_add(0x52dc_e729);
    h2 ^= mix_k2(k2);
    h2 = h2
        .rotate_left(31)
        .wrapping_add(h1)
        .wrapping_mul(5)
        .wrapping_add(0x3849_5ab5);
    (h1, h2)
}

/// Mixes the tail (fewer than 16 bytes) and finalises.
#[inline(always)]
fn finish(mut h1: u64, mut h2: u64, tail: &[u8], len: u64) -> (u64, u64) {
    debug_assert!(tail.len() < 16);
    if tail.len() > 8 {
        h2 ^= mix_k2(read_u64(&tail[8..]));
    }
    if !tail.is_empty() {
        h1 ^= mix_k1(read_u64(&tail[..tail.len().min(8)]));
    }
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

#[inline(always)]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaolacci_vectors() {
        let cases: [(&[u8], u64); 4] = [
            (b"", 0),
            (b"hello", 0xcbd8_a7b3_41bd_9b02),
            (b"hello, world", 0x342f_ac62_3a5e_bc8e),
            (
                b"The quick brown fox jumps over the lazy dog.",
                0xcd99_481f_9ee9_02c9,
            ),
        ];
        for (data, want) in cases {
            assert_eq!(murmur3_x64_128(data, 0).0, want, "{data:?}");
        }
    }

    #[test]
    fn suffix_hash_matches_hash_of_concatenation() {
        // Every tail length, including the one where the suffix completes a block.
        let data: Vec<u8> = (0u8..70).collect();
        for len in 0..data.len() {
            let key = &data[..len];
            let prefix = Prefix::new(key, 0);
            for suffix in [0u8, 7, 13, 255] {
                let mut joined = key.to_vec();
                joined.push(suffix);
                assert_eq!(
                    prefix.h1_with_suffix(suffix),
                    murmur3_x64_128(&joined, 0).0,
                    "len {len}, suffix {suffix}"
                );
            }
        }
    }
}
