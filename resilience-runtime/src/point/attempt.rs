//! What one attempt at entering a point carries: the flags of
//! `Point::enter_once` and the wait of the token it reserved.

/// [`Point::enter_once`] flag: a queue waiter asking again.
pub(super) const WAITER: u8 = 1;
/// [`Point::enter_once`] flag: the call holds its token already.
pub(super) const TOKEN_HELD: u8 = 2;
/// [`Point::enter_once`] flag: the call may not wait (a queue or a waiting token
/// bucket refuses it at once, as without them).
pub(super) const NO_WAIT: u8 = 4;
/// [`Point::enter_once`] flag: the call holds its key's token already (it waited for
/// it: the `keys` section's `max_wait`).
pub(super) const KEY_HELD: u8 = 8;

std::thread_local! {
    /// The wait of the token a call just reserved (see [`Point::enter_once`]), read once
    /// by [`take_token_wait`].
    pub(super) static TOKEN_WAIT_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The wait, in nanoseconds, of the token this thread's last entry reserved, if it
/// reserved one: `Err(Reason::TokenBucket)` (the point's bucket) or
/// `Err(Reason::HotKey)` (the call's key's) from [`Point::enter_once`] is then the
/// bucket's signal, not a refusal. Reading clears it.
pub(super) fn take_token_wait() -> Option<u64> {
    let ns = TOKEN_WAIT_NS.with(|w| w.replace(0));
    (ns != 0).then_some(ns)
}
