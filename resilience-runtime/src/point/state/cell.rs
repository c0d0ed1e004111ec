//! The publication of a compiled policy: one pointer to an immutable, kept form.
//!
//! # The guarantee kept here
//!
//! A reader loads the pointer (acquire) and reads a form that is never freed, moved
//! or changed, so a call sees one whole form as it was stored, never a torn mix of two,
//! and everything the writer did before the store (the slots the form names, their
//! seeded state); the next load after a store sees the new form or a later one.

use crate::sync::{AtomicPtr, Ordering};

/// One form behind one pointer: a reader loads it (acquire) and reads an immutable `T`
/// in place, one load and nothing copied.
///
/// A published form is never freed nor moved while its owner lives, because a call
/// that loaded it may still be reading it; the [`Kept`] list frees them all with the
/// owner (a point, when its registry and every handle to it are gone). Forms are kept (in a [`Kept`] list the writer holds beside the cell,
/// so that a cell never written holds nothing but its pointer) and an equal one is
/// reused, so a cell keeps one form (`size_of::<T>()` bytes plus a pointer) per
/// distinct value it has had: a policy toggled between two settings keeps two.
#[derive(Debug)]
pub(crate) struct PolicyCell<T: 'static> {
    /// The current form, or null for none.
    current: AtomicPtr<T>,
}

/// Every form a [`PolicyCell`] has published (settings change rarely: searched in
/// order). Held by the cell's writer, under the lock that serialises its writes.
#[derive(Debug)]
pub(crate) struct Kept<T: 'static>(Vec<&'static T>);

impl<T> Default for Kept<T> {
    fn default() -> Kept<T> {
        Kept::new()
    }
}

impl<T> Drop for Kept<T> {
    /// Frees the forms: the owner of the cell and of this list is being dropped, so no
    /// reader holds a form any more.
    fn drop(&mut self) {
        for form in self.0.drain(..) {
            // SAFETY: each form came from `Box::leak` in `store`, is listed once, and
            // the cell it was published in goes with its owner.
            drop(unsafe { Box::from_raw(std::ptr::from_ref(form).cast_mut()) });
        }
    }
}

impl<T> Kept<T> {
    pub(crate) const fn new() -> Kept<T> {
        Kept(Vec::new())
    }

    /// How many forms are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Bytes of the kept forms and their list.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.capacity() * std::mem::size_of::<&T>() + self.0.len() * std::mem::size_of::<T>()
    }
}

impl<T: PartialEq> PolicyCell<T> {
    pub(crate) fn new() -> PolicyCell<T> {
        PolicyCell {
            current: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The current form, or `None`.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<&'static T> {
        let c = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a form leaked by `store`, freed only by the
        // `Kept` list that goes with this cell's owner; the owner's users never keep
        // a form past their borrow of the owner (see `point`'s "Slots and their
        // lifetimes").
        unsafe { c.cast_const().as_ref() }
    }

    /// Publishes `form` (or none) for the next load on every thread, keeping it in
    /// `kept` (or reusing an equal form from there). Callers serialise writes (the
    /// point's settings mutex, which also guards `kept`).
    pub(crate) fn store(&self, form: Option<T>, kept: &mut Kept<T>) {
        let ptr = match form {
            None => std::ptr::null_mut(),
            Some(form) => {
                let form: &'static T = match kept.0.iter().find(|k| ***k == form) {
                    Some(k) => k,
                    None => {
                        let form = Box::leak(Box::new(form));
                        kept.0.push(form);
                        form
                    }
                };
                std::ptr::from_ref(form).cast_mut()
            }
        };
        self.current.store(ptr, Ordering::Release);
    }
}
