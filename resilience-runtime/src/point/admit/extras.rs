//! What a permit keeps for the stages only some policies use: the delay a probe
//! ends, a classic breaker's ticket, the adaptive limit's start and the key's
//! fingerprint.
//!
//! A permit has one word for the form its call entered under ([`Tail`]). A call that
//! has any of these records has that word point instead at a box that holds the form
//! and them, made when the first record is written and freed when the call ends. A
//! call whose policy uses none of these stages (the five rules, a `#[breaker]` on an
//! SRE breaker, no policy at all) has no space for them in its permit and writes none
//! of them; the calls that use them pay for the box (see `spares` for what that costs).
//!
//! Guarantee kept here: a [`Tail`] is empty, the address of a form (which lives as
//! long as its point), or the address of a box it owns, told apart by the word's low
//! bit; the box is freed once, by [`Tail::unbox`] or by the tail's drop, never read
//! after.

use super::records::{Extras, Records};
use super::spares;
use crate::point::form::compiled::Compiled;

/// The low bit of a [`Tail`] that holds a box (forms and boxes are 8-byte aligned).
const BOXED: usize = 1;

/// A permit's form, or a box of its [`Extras`] (which holds the form), in one word.
pub(in crate::point) struct Tail(*const ());

// SAFETY: a tail is a shared reference to a form (`Compiled` is `Sync`) or an owned
// box of plain data and such a reference: sending or sharing it is sending or
// sharing those.
unsafe impl Send for Tail {}
// SAFETY: as above; a shared tail is only read.
unsafe impl Sync for Tail {}

const _: () = assert!(std::mem::align_of::<Compiled>() > BOXED);
const _: () = assert!(std::mem::align_of::<Extras>() > BOXED);

impl Tail {
    /// No form.
    pub(in crate::point) const NONE: Tail = Tail(std::ptr::null());

    /// The form `c`, without records.
    #[inline(always)]
    pub(in crate::point) fn of(c: &'static Compiled) -> Tail {
        Tail(Tail::word_of(c))
    }

    /// The word of an unboxed tail with form `c`. (Tails are changed by their word:
    /// assigning a whole tail would drop the old one, box included.)
    #[inline(always)]
    fn word_of(c: &'static Compiled) -> *const () {
        std::ptr::from_ref(c).cast()
    }

    /// Whether the tail holds a box of records.
    #[inline(always)]
    pub(in crate::point) fn is_boxed(&self) -> bool {
        self.0.addr() & BOXED != 0
    }

    #[inline(always)]
    fn boxed(&self) -> Option<*mut Extras> {
        self.is_boxed()
            .then(|| self.0.map_addr(|a| a & !BOXED).cast_mut().cast())
    }

    /// The form, boxed or not.
    #[inline(always)]
    pub(in crate::point) fn form(&self) -> Option<&'static Compiled> {
        match self.boxed() {
            // SAFETY: the box is this tail's, alive until `unbox` or drop.
            Some(b) => Some(unsafe { &*b }.form),
            // SAFETY: an unboxed tail is null or the address of a form, which lives as
            // long as its point, and the point outlives every permit.
            None => unsafe { self.0.cast::<Compiled>().as_ref() },
        }
    }

    /// The form of a tail that is not boxed, read without testing that it is not.
    ///
    /// # Safety
    /// The tail is not boxed: a permit's tail is boxed only by
    /// [`records_mut`](Self::records_mut), which the permit reaches only while setting
    /// [`Meta::EXTRA`](super::meta::Meta::EXTRA), and that bit is never cleared, so a
    /// permit without it has an unboxed tail.
    #[inline(always)]
    pub(in crate::point) unsafe fn form_unboxed(&self) -> Option<&'static Compiled> {
        debug_assert!(!self.is_boxed(), "a boxed tail read as unboxed");
        // SAFETY: unboxed (the caller's promise), so null or the address of a form,
        // which lives as long as its point, and the point outlives every permit.
        unsafe { self.0.cast::<Compiled>().as_ref() }
    }

    /// The call's records (all 0 when it has none).
    #[inline]
    pub(in crate::point) fn records(&self) -> Records {
        match self.boxed() {
            // SAFETY: as in `form`.
            Some(b) => unsafe { &*b }.records,
            None => Records::default(),
        }
    }

    /// The records, to write, of a call under `c`: the tail is boxed first if it
    /// was not (a tail has one form: `c`, or none yet).
    #[inline]
    pub(in crate::point) fn records_mut(&mut self, c: &'static Compiled) -> &mut Records {
        let b = match self.boxed() {
            Some(b) => b,
            None => {
                debug_assert!(
                    self.form().is_none_or(|f| std::ptr::eq(f, c)),
                    "one form per permit"
                );
                let b = Box::into_raw(spares::take(Extras {
                    form: c,
                    records: Records::default(),
                }));
                self.0 = b.cast_const().cast::<()>().map_addr(|a| a | BOXED);
                b
            }
        };
        // SAFETY: the box is this tail's, and `&mut self` borrows it exclusively.
        &mut unsafe { &mut *b }.records
    }

    /// Points an empty tail at `c`; a tail with a form keeps it (it is `c`).
    #[inline(always)]
    pub(in crate::point) fn set_form(&mut self, c: &'static Compiled) {
        debug_assert!(
            self.form().is_none_or(|f| std::ptr::eq(f, c)),
            "one form per permit"
        );
        if self.0.is_null() {
            self.0 = Tail::word_of(c);
        }
    }

    /// Frees the box, if any, and returns its records; the tail keeps the form.
    #[inline]
    pub(in crate::point) fn unbox(&mut self) -> Records {
        match self.boxed() {
            Some(b) => {
                // SAFETY: the box is this tail's (from `Box::into_raw` in
                // `records_mut`); the tail stops pointing at it below, so it is taken
                // back once.
                let extras = spares::give_back(unsafe { Box::from_raw(b) });
                self.0 = Tail::word_of(extras.form);
                extras.records
            }
            None => Records::default(),
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        // A permit unboxes its tail when it completes, so this frees a box only for
        // a tail dropped on its own (the tests) or a permit that never completed.
        self.unbox();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::point::form::compiled::EMPTY;

    #[test]
    fn a_tail_is_one_word_and_keeps_its_form_boxed_or_not() {
        assert_eq!(std::mem::size_of::<Tail>(), 8);
        assert_eq!(
            std::mem::size_of::<Extras>(),
            40,
            "the box's size the guide states"
        );
        let c: &'static Compiled = &EMPTY;
        let mut tail = Tail::NONE;
        assert!(tail.form().is_none());
        tail.set_form(c);
        assert!(tail.form().is_some_and(|f| std::ptr::eq(f, c)));
        assert_eq!(tail.records(), Records::default());
        tail.records_mut(c).key_fp = 7;
        tail.records_mut(c).probe_of = 9;
        assert!(
            tail.form().is_some_and(|f| std::ptr::eq(f, c)),
            "boxed, the form stays"
        );
        let records = tail.records();
        assert_eq!((records.key_fp, records.probe_of), (7, 9));
        assert_eq!(tail.unbox(), records);
        assert!(
            tail.form().is_some_and(|f| std::ptr::eq(f, c)),
            "unboxed, the form stays"
        );
        assert_eq!(tail.unbox(), Records::default(), "the box was freed once");
    }

    #[test]
    fn a_dropped_tail_gives_its_box_back() {
        let c: &'static Compiled = &EMPTY;
        let before = spares::held();
        let mut tail = Tail::of(c);
        tail.records_mut(c).ticket = 3;
        assert_eq!(
            spares::held(),
            before.saturating_sub(1),
            "a spare was taken"
        );
        drop(tail);
        assert_eq!(spares::held(), before.max(1), "and given back");
    }
}
