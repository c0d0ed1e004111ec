//! The token bucket shared by the point engine and the Redis limiters' local
//! fallback: the decision of the generic cell rate algorithm as a pure function
//! ([`gcra`]) and the one compare-and-swap loop around it ([`cell`]).
//! [`warmup`] is Sentinel's warm-up limit (a pure decision and its atomic cell).

/// The largest concurrency limit a policy accepts (the in-flight count shares a word
/// with the visit counter so that one atomic operation admits a call).
pub const MAX_CONCURRENCY: u64 = 1 << 22;

pub(crate) mod cell;
pub(crate) mod gcra;
pub(crate) mod warmup;

pub(crate) use cell::GcraCell;
pub(crate) use gcra::Gcra;
