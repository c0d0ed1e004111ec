//! The publication of a compiled policy: one pointer to an immutable, kept form.
//!
//! # The guarantee kept here
//!
//! A reader loads the pointer (acquire) and reads a form that is never freed, moved
//! or changed, so a call sees one whole policy, never a torn mix of two; the next call
//! after a store sees the new form.

use super::compiled::{Compiled, EMPTY};
use crate::sync::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// A point's compiled policy behind one pointer: a reader loads it (acquire) and reads
/// an immutable [`Compiled`] in place, one load and nothing copied, never a torn policy.
///
/// A published form is never freed nor moved, because a call that loaded it may still
/// be reading it. Forms are kept per point and an equal one is reused, so a point keeps
/// one form (`size_of::<Compiled>()` bytes plus a pointer) per distinct setting it has
/// had: a policy toggled between two values keeps two.
#[derive(Debug)]
pub(super) struct PolicyCell {
    /// The current form, or null for a point without rules and breaker.
    pub(super) current: AtomicPtr<Compiled>,
    /// Every form published (settings change rarely: searched in order).
    pub(super) kept: Mutex<Vec<&'static Compiled>>,
}

impl PolicyCell {
    pub(super) fn new() -> PolicyCell {
        PolicyCell {
            current: AtomicPtr::new(std::ptr::null_mut()),
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The current form, or `None` for a point without rules and breaker.
    #[inline(always)]
    pub(super) fn get(&self) -> Option<&'static Compiled> {
        let c = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a form leaked by `store`, never freed.
        unsafe { c.cast_const().as_ref() }
    }

    /// The current form ([`EMPTY`] for a point without rules and breaker).
    #[inline]
    pub(super) fn load(&self) -> &'static Compiled {
        self.get().unwrap_or(&EMPTY)
    }

    /// Publishes `c` for the next call on every thread. Callers serialise writes (the
    /// point's policy mutex).
    pub(super) fn store(&self, c: Compiled) {
        let ptr = if c.rules == 0 {
            std::ptr::null_mut()
        } else {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            let form: &'static Compiled = match kept.iter().find(|k| ***k == c) {
                Some(k) => k,
                None => {
                    let form = Box::leak(Box::new(c));
                    kept.push(form);
                    form
                }
            };
            std::ptr::from_ref(form).cast_mut()
        };
        self.current.store(ptr, Ordering::Release);
    }

    /// Bytes of the kept forms and their list.
    pub(super) fn heap_bytes(&self) -> usize {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.capacity() * std::mem::size_of::<&Compiled>()
            + kept.len() * std::mem::size_of::<Compiled>()
    }
}
