//! Locks that outlive a panic: the one rule every lock of the product follows.
//!
//! A thread that panics while holding a lock (a listener, a test's assertion, a
//! user's callback) poisons it. Everything behind the product's locks stays
//! consistent at every unlock, so the next holder takes the lock as it is instead of
//! failing too: a panic in one call never wedges the registry or the console.
//!
//! The runtime and the admin console each keep this file (`src/lock.rs`); the
//! workspace's `checks` crate tests that the copies are equal.

use std::sync::{LockResult, PoisonError};

/// The result of taking a lock, recovered from poisoning (see the module docs).
pub(crate) trait Recover<G> {
    /// The guard, whether or not a holder panicked.
    fn recover(self) -> G;
}

impl<G> Recover<G> for LockResult<G> {
    #[inline]
    fn recover(self) -> G {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::Recover;
    use std::sync::Mutex;

    #[test]
    fn a_poisoned_lock_is_taken_as_it_is() {
        let m = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _held = m.lock().recover();
            panic!("poisons the lock");
        });
        assert!(m.is_poisoned());
        *m.lock().recover() += 1;
        assert_eq!(*m.lock().recover(), 2);
    }
}
