//! The registry in scope on a thread (feature `testing`): where the call sites and
//! [`registry()`](crate::registry) look first, and what
//! [`TestRegistry`](crate::testing::TestRegistry) sets. Kept with the registry, which
//! reads it, so that the testing module builds on the registry and not the other way.

use super::Registry;
use crate::sync::atomic::{AtomicBool, Ordering};
use std::cell::Cell;

/// Whether any scope was ever entered in this process: until then a call site's
/// check is this one relaxed load, not a thread-local access.
static EVER_SCOPED: AtomicBool = AtomicBool::new(false);

std::thread_local! {
    /// The registry in scope on this thread, if any.
    static CURRENT: Cell<Option<&'static Registry>> = const { Cell::new(None) };
}

/// The registry in scope on this thread, if a test entered one.
#[inline]
pub(crate) fn scoped() -> Option<&'static Registry> {
    if !EVER_SCOPED.load(Ordering::Relaxed) {
        return None;
    }
    CURRENT.with(Cell::get)
}

/// Puts `registry` in scope on this thread until the returned value is given back
/// to [`leave`].
pub(crate) fn enter(registry: &'static Registry) -> Option<&'static Registry> {
    EVER_SCOPED.store(true, Ordering::Relaxed);
    CURRENT.with(|c| c.replace(Some(registry)))
}

/// Restores the scope that [`enter`] replaced.
pub(crate) fn leave(previous: Option<&'static Registry>) {
    CURRENT.with(|c| c.set(previous));
}
