//! A point's `retry` section ([`RetryPolicy`]) as its retrying calls read it: one
//! pointer load per call, no lock.
//!
//! Each distinct section is leaked once, with the point's own budget if it sets one,
//! and kept in the point's settings for reuse (a point holds one per distinct section
//! it has had, like its compiled forms): a call may still hold a replaced one.

use crate::point::{Point, Settings};
use crate::retry::{Retry, RetryBudget, RetryPolicy};
use crate::sync::{AtomicPtr, Ordering};

/// A retry section, ready for calls.
#[derive(Debug)]
pub(crate) struct RetryForm {
    pub(crate) policy: RetryPolicy,
    /// The point's own budget, if the section sets one.
    pub(crate) budget: Option<&'static RetryBudget>,
}

/// The retry sections a point has had, and its own budget (made by the first section
/// that sets a budget, reconfigured by the later ones).
#[derive(Debug, Default)]
pub(in crate::point) struct RetryForms {
    kept: Vec<&'static RetryForm>,
    own_budget: Option<&'static RetryBudget>,
}

impl RetryForms {
    /// None kept.
    pub(in crate::point) const EMPTY: RetryForms = RetryForms {
        kept: Vec::new(),
        own_budget: None,
    };
}

impl Drop for RetryForms {
    fn drop(&mut self) {
        // SAFETY: forms and the own budget came from `Box::leak` in `form_for`, are
        // listed once, and go with their point (see `Settings`).
        unsafe {
            self.kept.drain(..).for_each(|f| crate::util::reclaim(f));
            if let Some(own) = self.own_budget.take() {
                crate::util::reclaim(own);
            }
        }
    }
}

/// The pointer to the section in force (null: none).
pub(in crate::point) type RetryCell = AtomicPtr<RetryForm>;

impl Point {
    /// The retry section in force, if any layer sets one.
    #[inline]
    pub(crate) fn retry_form(&self) -> Option<&'static RetryForm> {
        let form = self.retry.load(Ordering::Acquire);
        // SAFETY: `retry` only ever holds null or a pointer from `Box::leak` in
        // `apply_retry`, never freed.
        unsafe { form.cast_const().as_ref() }
    }

    /// The retry section in force, as set (see [`RetryPolicy`]).
    pub fn retry_policy(&self) -> Option<RetryPolicy> {
        self.retry_form().map(|f| f.policy)
    }

    /// The budget of the point's own that its retry section in force sets, if any
    /// (see [`RetryPolicy::budget`]).
    pub fn retry_budget(&self) -> Option<&RetryBudget> {
        self.retry_form().and_then(|f| f.budget)
    }

    /// The attempts and backoff a retrying call of this point uses: the section's,
    /// else `code`'s (the attribute's or the argument's).
    #[inline]
    pub(crate) fn effective_retry(&self, code: impl FnOnce() -> Retry) -> Retry {
        match self.retry_form() {
            Some(form) => form.policy.retry,
            None => code(),
        }
    }

    /// The budget a retrying call of this point uses: the section's own, else the
    /// code's.
    #[inline]
    pub(crate) fn effective_budget<'a>(
        &self,
        code: Option<&'a RetryBudget>,
    ) -> Option<&'a RetryBudget> {
        match self.retry_form() {
            Some(RetryForm {
                budget: Some(own), ..
            }) => Some(*own),
            _ => code,
        }
    }

    /// Installs (or, with `None`, removes) the retry section. `retry` is valid (the
    /// layers check it before).
    pub(crate) fn apply_retry(&self, retry: Option<RetryPolicy>) {
        let mut settings = self.settings();
        let form = retry.map(|policy| form_for(self, &mut settings, policy));
        let ptr = form.map_or(std::ptr::null_mut(), |f| std::ptr::from_ref(f).cast_mut());
        self.retry.store(ptr, Ordering::Release);
    }
}

/// The form of `policy`: a kept one if equal, else made (and kept).
fn form_for(point: &Point, settings: &mut Settings, policy: RetryPolicy) -> &'static RetryForm {
    let forms = &mut settings.retry_forms;
    if let Some(f) = forms.kept.iter().find(|f| f.policy == policy) {
        if let (Some(config), Some(own)) = (policy.budget, f.budget) {
            // Another section may have changed the shared own budget since.
            let _ = own.reconfigure(config);
        }
        return f;
    }
    let budget = policy.budget.and_then(|config| match forms.own_budget {
        Some(own) => own.reconfigure(config).ok().map(|()| own),
        None => {
            let own: &'static RetryBudget = Box::leak(Box::new(
                RetryBudget::new(config, point.clock.clone()).ok()?,
            ));
            forms.own_budget = Some(own);
            Some(own)
        }
    });
    let form: &'static RetryForm = Box::leak(Box::new(RetryForm { policy, budget }));
    forms.kept.push(form);
    form
}
