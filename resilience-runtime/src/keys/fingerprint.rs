//! Key identity: a 64-bit fingerprint of a key's `Hash`, the same for every integer
//! type of equal value, and the fingerprints a policy's override text stands for.
//!
//! A tracked key is identified by its fingerprint alone (the table stores no key
//! values): two values with the same fingerprint share one state. The hash is keyed by
//! a random per-process seed, so collisions cannot be chosen from outside; for `n`
//! distinct keys the chance of any collision is below `n² / 2⁶⁵` (3·10⁻⁸ for a million
//! keys).

use std::hash::{Hash, Hasher};

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The process's hash seed (never 0), chosen on first use; fixed in unit tests, so
/// that what hashes where is the same on every run.
#[cfg(test)]
fn seed() -> u64 {
    0x2545_f491_4f6c_dd1d
}

/// The process's hash seed (never 0), chosen on first use.
#[cfg(not(test))]
fn seed() -> u64 {
    static SEED: crate::sync::OnceLock<u64> = crate::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let mut s = 0u64;
        for _ in 0..4 {
            s = s.rotate_left(16) ^ crate::rand::below(1 << 16);
        }
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        (s ^ t.rotate_left(17)) | 1
    })
}

/// Folded multiply: the high and low halves of the 128-bit product, xored.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

/// The key hasher: every integer write, of any width and signedness, hashes its value
/// as one 64-bit word (so `42u8`, `42i64` and a newtype deriving `Hash` over `42u32`
/// agree; a negative value is sign-extended, so `-1i64` and `u64::MAX` agree too);
/// byte strings are hashed eight bytes at a time.
pub(crate) struct KeyHasher {
    h: u64,
}

impl KeyHasher {
    #[inline(always)]
    pub(crate) fn new() -> KeyHasher {
        KeyHasher { h: seed() }
    }

    #[inline(always)]
    fn word(&mut self, w: u64) {
        self.h = fold(self.h ^ w, K);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        }
        let rest = chunks.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        // The length tells apart byte strings that differ only in trailing zeros.
        self.word(u64::from_le_bytes(last) ^ ((bytes.len() as u64) << 56));
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.word(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.word(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.word(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.word(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.word(i as u64);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        match u64::try_from(i) {
            Ok(small) => self.word(small),
            Err(_) => {
                self.word(i as u64);
                self.word((i >> 64) as u64 ^ K);
            }
        }
    }
    #[inline]
    fn write_i8(&mut self, i: i8) {
        self.word(i64::from(i) as u64);
    }
    #[inline]
    fn write_i16(&mut self, i: i16) {
        self.word(i64::from(i) as u64);
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.word(i64::from(i) as u64);
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.word(i as u64);
    }
    #[inline]
    fn write_isize(&mut self, i: isize) {
        self.word(i as i64 as u64);
    }
    #[inline]
    fn write_i128(&mut self, i: i128) {
        match i64::try_from(i) {
            Ok(small) => self.word(small as u64),
            Err(_) => self.write_u128(i as u128),
        }
    }
    #[inline]
    fn finish(&self) -> u64 {
        // murmur3's finaliser: every input bit reaches every output bit.
        let mut x = self.h;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x
    }
}

/// A key's fingerprint (never 0, the table's empty mark).
#[inline]
pub(crate) fn fingerprint<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = KeyHasher::new();
    key.hash(&mut h);
    h.finish().max(1)
}

/// The fingerprints an override's text stands for: the string itself, and the
/// integer (or boolean) it spells, if it spells one. A string key `"42"` and an
/// integer key `42` thus both match an override named `42`.
pub(crate) fn text_fingerprints(text: &str) -> Vec<u64> {
    let mut out = vec![fingerprint(text)];
    if let Ok(i) = text.parse::<i128>() {
        out.push(fingerprint(&i));
    } else if let Ok(u) = text.parse::<u128>() {
        out.push(fingerprint(&u));
    } else if let Ok(b) = text.parse::<bool>() {
        out.push(fingerprint(&b));
    }
    out.dedup();
    out
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn integers_of_every_width_agree_and_strings_differ() {
        let f = fingerprint(&42u64);
        assert_eq!(fingerprint(&42u8), f);
        assert_eq!(fingerprint(&42i32), f);
        assert_eq!(fingerprint(&42i128), f);
        assert_eq!(fingerprint(&42usize), f);
        assert_ne!(fingerprint("42"), f);
        assert_eq!(fingerprint(&-7i8), fingerprint(&-7i64));
    }

    #[test]
    fn strings_and_owned_strings_agree() {
        assert_eq!(fingerprint("vip-42"), fingerprint(&String::from("vip-42")));
        assert_eq!(fingerprint(&"vip-42"), fingerprint("vip-42"));
        assert_ne!(fingerprint("a"), fingerprint("a\0"));
        assert_ne!(fingerprint(""), fingerprint("\0"));
    }

    #[test]
    fn newtypes_match_their_field() {
        #[derive(Hash)]
        struct Tenant(u32);
        #[derive(Hash)]
        struct Name(String);
        assert_eq!(fingerprint(&Tenant(7)), fingerprint(&7u64));
        assert_eq!(fingerprint(&Name("x".into())), fingerprint("x"));
    }

    #[test]
    fn override_text_names_strings_and_integers() {
        let fps = text_fingerprints("42");
        assert!(fps.contains(&fingerprint("42")));
        assert!(fps.contains(&fingerprint(&42u16)));
        assert!(text_fingerprints("-3").contains(&fingerprint(&-3i32)));
        assert!(text_fingerprints("true").contains(&fingerprint(&true)));
        assert_eq!(text_fingerprints("vip-42"), vec![fingerprint("vip-42")]);
    }

    #[test]
    fn a_million_keys_spread_over_every_bit() {
        let mut ones = [0u32; 64];
        let mut seen = std::collections::HashSet::new();
        for i in 0..1_000_000u64 {
            let f = fingerprint(&i);
            assert!(seen.insert(f), "collision at {i}");
            for (b, one) in ones.iter_mut().enumerate() {
                *one += ((f >> b) & 1) as u32;
            }
        }
        for (b, one) in ones.iter().enumerate() {
            assert!((495_000..505_000).contains(one), "bit {b}: {one}");
        }
    }
}
