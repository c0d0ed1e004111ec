//! The publication of a compiled policy: one pointer to an immutable, kept form.
//!
//! # The guarantee kept here
//!
//! A reader loads the pointer (acquire) and reads a form that is never freed, moved
//! or changed, so a call sees one whole form as it was stored, never a torn mix of two,
//! and everything the writer did before the store (the slots the form names, their
//! seeded state); the next load after a store sees the new form or a later one.

use crate::sync::{AtomicPtr, Mutex, Ordering};

/// One form behind one pointer: a reader loads it (acquire) and reads an immutable `T`
/// in place, one load and nothing copied.
///
/// A published form is never freed nor moved, because a call that loaded it may still
/// be reading it. Forms are kept and an equal one is reused, so a cell keeps one form
/// (`size_of::<T>()` bytes plus a pointer) per distinct value it has had: a policy
/// toggled between two settings keeps two.
#[derive(Debug)]
pub(crate) struct PolicyCell<T: 'static> {
    /// The current form, or null for none.
    current: AtomicPtr<T>,
    /// Every form published (settings change rarely: searched in order).
    kept: Mutex<Vec<&'static T>>,
}

impl<T: PartialEq> PolicyCell<T> {
    pub(crate) fn new() -> PolicyCell<T> {
        PolicyCell {
            current: AtomicPtr::new(std::ptr::null_mut()),
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The current form, or `None`.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<&'static T> {
        let c = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a form leaked by `store`, never freed.
        unsafe { c.cast_const().as_ref() }
    }

    /// Publishes `form` (or none) for the next load on every thread. Callers serialise
    /// writes (the point's settings mutex).
    pub(crate) fn store(&self, form: Option<T>) {
        let ptr = match form {
            None => std::ptr::null_mut(),
            Some(form) => {
                let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
                let form: &'static T = match kept.iter().find(|k| ***k == form) {
                    Some(k) => k,
                    None => {
                        let form = Box::leak(Box::new(form));
                        kept.push(form);
                        form
                    }
                };
                std::ptr::from_ref(form).cast_mut()
            }
        };
        self.current.store(ptr, Ordering::Release);
    }

    /// How many forms are kept.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Bytes of the kept forms and their list.
    pub(crate) fn heap_bytes(&self) -> usize {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.capacity() * std::mem::size_of::<&T>() + kept.len() * std::mem::size_of::<T>()
    }
}
