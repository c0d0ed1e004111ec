//! The overridden values of a `keys` section by fingerprint: open addressing from
//! each fingerprint a value's text stands for (see `fingerprint::text_fingerprints`)
//! to the value's number in the section's override list.

use super::fingerprint::text_fingerprints;
use super::policy::KeyPolicy;

/// Fingerprint to override number; empty without overrides.
#[derive(Debug, Default)]
pub(crate) struct OverrideIndex {
    /// `(fingerprint, number)`, fingerprint 0 for an empty slot.
    slots: Box<[(u64, u32)]>,
}

impl OverrideIndex {
    /// The index of `p`'s overrides, numbered in their order in `p`.
    pub(crate) fn of(p: &KeyPolicy) -> OverrideIndex {
        let fps: Vec<(u64, u32)> = p
            .overrides
            .iter()
            .enumerate()
            .flat_map(|(n, (value, _))| {
                text_fingerprints(value)
                    .into_iter()
                    .map(move |f| (f, n as u32))
            })
            .collect();
        if fps.is_empty() {
            return OverrideIndex::default();
        }
        let len = (fps.len() * 2).next_power_of_two();
        let mut slots = vec![(0u64, 0u32); len];
        let mask = len - 1;
        for (fp, n) in fps {
            let mut i = (fp >> 7) as usize & mask;
            loop {
                match slots[i] {
                    (0, _) => {
                        slots[i] = (fp, n);
                        break;
                    }
                    // Two values spelling one key (the string `"7"` and the integer
                    // of `"7"` are two keys; `"07"` spells no integer of its own):
                    // the first wins.
                    (f, _) if f == fp => break,
                    _ => i = (i + 1) & mask,
                }
            }
        }
        OverrideIndex {
            slots: slots.into_boxed_slice(),
        }
    }

    /// The number of the override of the key `fp`, if it has one.
    #[inline]
    pub(crate) fn get(&self, fp: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = (fp >> 7) as usize & mask;
        loop {
            match self.slots[i] {
                (0, _) => return None,
                (f, n) if f == fp => return Some(n as usize),
                _ => i = (i + 1) & mask,
            }
        }
    }
}
