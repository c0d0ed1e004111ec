//! A permit's small fields in one word: its slots, the unit of its start and which
//! of the stages only some policies use it has.

use crate::point::state::flow::Slot;

/// No hung-call slot (the table's own "no slot").
pub(in crate::point) const NO_HANG: u32 = crate::point::state::hang::NO_SLOT;

/// The small fields of a [`Permit`](super::permit::Permit) packed in one word, so that a permit is always
/// written and read in whole words (a byte written next to a word that is then read
/// whole stalls the CPU's store forwarding): the hung-call slot in the low 32 bits, the
/// in-flight slot in bits 32-33, the unit of `start` in bit 34, whether the permit has
/// a breaker call, an adaptive flight or a probe in bit 35 (so that completion tells
/// the common calls from one word), whether it was judged by an SRE breaker alone in
/// bit 36, whether the permit has a breaker call, an adaptive flight and a key's slot
/// in bits 37, 38 and 39, where the key's slot is (its hold's code) in bits 40-56,
/// and bit 63 always set.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::point) struct Meta(std::num::NonZeroU64);

impl Meta {
    pub(in crate::point) const SET: u64 = 1 << 63;
    pub(in crate::point) const SLOT_SHIFT: u32 = 32;
    pub(in crate::point) const SLOT_MASK: u64 = 0b11 << Self::SLOT_SHIFT;
    /// [`SLOT_MASK`](Self::SLOT_MASK)'s bits of a slot in the flow word.
    pub(in crate::point) const WORD: u64 = 1 << Self::SLOT_SHIFT;
    pub(in crate::point) const FINE: u64 = 1 << 34;
    pub(in crate::point) const EXTRA: u64 = 1 << 35;
    /// Set with [`EXTRA`](Self::EXTRA) by [`Permit::with_breaker`](super::permit::Permit::with_breaker) alone: an untimed
    /// call that only an SRE breaker judged, completed by one counter of the breaker.
    pub(in crate::point) const SRE_ONLY: u64 = 1 << 36;
    /// The call has a record with the form's breaker (a classic breaker's ticket is
    /// in the permit's [`Records`](super::records::Records)).
    pub(in crate::point) const BREAKER: u64 = 1 << 37;
    /// The call's records hold its start with the form's adaptive limit.
    pub(in crate::point) const ADAPTIVE: u64 = 1 << 38;
    /// The call's records hold the key of a slot the call holds.
    pub(in crate::point) const KEY: u64 = 1 << 39;
    /// Where the key's slot is: the hold's code ([`KeyHold::into_parts`]).
    ///
    /// [`KeyHold::into_parts`]: crate::keys::KeyHold::into_parts
    const KEY_SHIFT: u32 = 40;
    const KEY_MASK: u64 = ((1 << crate::keys::HOLD_CODE_BITS) - 1) << Self::KEY_SHIFT;

    /// This word with [`KEY`](Self::KEY), [`EXTRA`](Self::EXTRA) and the code of the
    /// key's hold.
    #[inline]
    pub(in crate::point) fn with_key(self, code: u32) -> Meta {
        Meta::from_bits(
            self.bits() & !Self::KEY_MASK
                | Self::KEY
                | Self::EXTRA
                | (u64::from(code) << Self::KEY_SHIFT) & Self::KEY_MASK,
        )
    }

    /// The code of the key's hold (see [`KEY`](Self::KEY)).
    #[inline]
    pub(in crate::point) fn key_code(self) -> u32 {
        ((self.bits() & Self::KEY_MASK) >> Self::KEY_SHIFT) as u32
    }

    #[inline]
    pub(in crate::point) fn has(self, bit: u64) -> bool {
        self.bits() & bit != 0
    }

    #[inline]
    pub(in crate::point) fn from_bits(bits: u64) -> Meta {
        match std::num::NonZeroU64::new(bits | Self::SET) {
            Some(n) => Meta(n),
            None => unreachable!("bit 63 is set"),
        }
    }

    #[inline]
    pub(in crate::point) fn new(slot: Slot, fine: bool) -> Meta {
        Meta::from_bits(u64::from(NO_HANG))
            .with_slot(slot)
            .with_fine(fine)
    }

    #[inline]
    pub(in crate::point) fn bits(self) -> u64 {
        self.0.get()
    }

    #[inline]
    pub(in crate::point) fn hang(self) -> u32 {
        self.bits() as u32
    }

    #[inline]
    pub(in crate::point) fn with_hang(self, hang: u32) -> Meta {
        Meta::from_bits(self.bits() & !u64::from(u32::MAX) | u64::from(hang))
    }

    #[inline]
    pub(in crate::point) fn slot(self) -> Slot {
        match (self.bits() & Self::SLOT_MASK) >> Self::SLOT_SHIFT {
            0 => Slot::None,
            1 => Slot::Word,
            _ => Slot::Spill,
        }
    }

    #[inline]
    pub(in crate::point) fn with_slot(self, slot: Slot) -> Meta {
        let code: u64 = match slot {
            Slot::None => 0,
            Slot::Word => 1,
            Slot::Spill => 2,
        };
        Meta::from_bits(self.bits() & !Self::SLOT_MASK | code << Self::SLOT_SHIFT)
    }

    #[inline]
    pub(in crate::point) fn fine(self) -> bool {
        self.bits() & Self::FINE != 0
    }

    #[inline]
    pub(in crate::point) fn with_fine(self, fine: bool) -> Meta {
        Meta::from_bits(if fine {
            self.bits() | Self::FINE
        } else {
            self.bits() & !Self::FINE
        })
    }
}
