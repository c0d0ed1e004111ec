//! What one attempt at entering a point carries and answers: the flags of
//! `Point::enter_once` and its [`Entry`].

/// [`Point::enter_once`] flag: a queue waiter asking again.
pub(in crate::point) const WAITER: u8 = 1;
/// [`Point::enter_once`] flag: the call holds its token already.
pub(in crate::point) const TOKEN_HELD: u8 = 2;
/// [`Point::enter_once`] flag: the call may not wait (a queue or a waiting token
/// bucket refuses it at once, as without them).
pub(in crate::point) const NO_WAIT: u8 = 4;
/// [`Point::enter_once`] flag: the call holds its key's token already (it waited for
/// it: the `keys` section's `max_wait`).
pub(in crate::point) const KEY_HELD: u8 = 8;

/// What one look at the rules decided ([`Point::enter_once`]): a value, never a side
/// channel, and a refusal only when it is one.
///
/// [`Point::enter_once`]: crate::point::Point::enter_once
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Admitted: its permit, if it has one, is in the caller's slot.
    Admitted,
    /// Refused for this reason (counted and reported already).
    Refused(RefusedFor),
    /// The point's token is reserved for the call: it may run after this many
    /// nanoseconds, holding it ([`TOKEN_HELD`]).
    WaitToken(u64),
    /// The call's key's token is reserved (the point's token is held): it may run
    /// after this many nanoseconds ([`TOKEN_HELD`] and [`KEY_HELD`]).
    WaitKey(u64),
    /// Every slot is taken (or, for a new call, others wait) under a policy with a
    /// queue: the call may wait in it.
    WaitQueue,
}

impl Entry {
    /// The entry of a step that admits (its permit in the slot) or refuses.
    #[inline(always)]
    pub(in crate::point) fn of(entered: Result<(), crate::Downgraded>) -> Entry {
        match entered {
            Ok(()) => Entry::Admitted,
            Err(d) => Entry::refused(d.reason()),
        }
    }

    /// Refused for `reason`.
    #[inline(always)]
    pub(in crate::point) fn refused(reason: crate::Reason) -> Entry {
        Entry::Refused(RefusedFor::new(reason))
    }
}

/// The reason of a refusal, a word wide: with it every payload of an [`Entry`] is one
/// word in the same place, so that an `Entry` is a pair of words, which a function
/// returns in two registers rather than through memory (the hot path's return).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefusedFor(u64);

impl RefusedFor {
    #[inline(always)]
    pub(in crate::point) fn new(reason: crate::Reason) -> RefusedFor {
        RefusedFor(reason.index() as u64)
    }

    /// The refusal as a caller of point `point` sees it.
    #[inline]
    pub(in crate::point) fn downgraded(self, point: &'static str) -> crate::Downgraded {
        crate::Downgraded {
            point,
            reason: self.reason(),
        }
    }

    /// The reason.
    #[inline]
    pub(crate) fn reason(self) -> crate::Reason {
        // Only `new` makes one, from a reason's own index.
        crate::Reason::from_index(self.0 as u8).unwrap_or(crate::Reason::Deadline)
    }
}

impl std::fmt::Debug for RefusedFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.reason().fmt(f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Reason;

    /// Every reason, refusal or not, comes back out of the word it is carried in.
    #[test]
    fn a_refusal_carries_its_reason_in_a_word() {
        for reason in Reason::ALL.into_iter().chain([Reason::Deadline]) {
            assert_eq!(RefusedFor::new(reason).reason(), reason);
            let d = RefusedFor::new(reason).downgraded("unit.refused");
            assert_eq!((d.point(), d.reason()), ("unit.refused", reason));
            assert_eq!(
                Entry::refused(reason),
                Entry::Refused(RefusedFor::new(reason))
            );
        }
        assert_eq!(std::mem::size_of::<Entry>(), 16, "two words");
    }
}
