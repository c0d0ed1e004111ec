//! A call's key as the engine takes it: its fingerprint (its identity) and its text
//! (how statistics show it), borrowed for the entry, or owned while an async call
//! waits.

use super::{fingerprint, HotKey, KeyText};
use std::fmt;

/// A call's key as a point's entry takes it: the key's fingerprint (its identity) and
/// its text (how statistics show it), borrowed for the entry.
///
/// `key = expr` of the macros makes one from the value of `expr`, which must be a
/// [`HotKey`] (a value that is not is a compile error at `expr`, naming
/// [`KeyArg::new`]); [`Point::enter_key`](crate::Point::enter_key) makes one from its
/// `key` the same way.
///
/// # Examples
///
/// ```
/// use resilience_runtime::keys::KeyArg;
///
/// let user = "ann";
/// let key = KeyArg::new(&user);
/// assert_eq!(format!("{key:?}"), "KeyArg(ann)");
/// ```
#[derive(Clone, Copy)]
pub struct KeyArg<'k> {
    pub(crate) fp: u64,
    pub(crate) text: &'k dyn fmt::Display,
}

impl<'k> KeyArg<'k> {
    /// The key `*key`, any [`HotKey`]: `key` is a reference to the caller's reference,
    /// so that an unsized key such as `str` is shown through it.
    #[inline]
    pub fn new<K: HotKey + ?Sized>(key: &'k &K) -> KeyArg<'k> {
        KeyArg {
            fp: fingerprint(*key),
            text: key,
        }
    }
}

/// The key of an async call that waits (see `WaitFuture`): its fingerprint and its text
/// as reports show it, owned, so that the wait holds no borrow of a `dyn Display`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitingKey {
    pub(crate) fp: u64,
    pub(crate) text: KeyText,
}

impl WaitingKey {
    /// Copies `key` (its text cut as every report cuts it: nothing is lost).
    pub(crate) fn of(key: &KeyArg<'_>) -> WaitingKey {
        WaitingKey {
            fp: key.fp,
            text: KeyText::of(key.text),
        }
    }

    /// The key again, for an entry.
    pub(crate) fn arg(&self) -> KeyArg<'_> {
        KeyArg {
            fp: self.fp,
            text: &self.text,
        }
    }
}

impl fmt::Debug for KeyArg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyArg({})", self.text)
    }
}
