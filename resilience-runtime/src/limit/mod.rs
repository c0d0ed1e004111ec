//! The token bucket shared by the point engine and the Redis limiters' local
//! fallback: the decision of the generic cell rate algorithm as a pure function
//! ([`gcra`]) and the one compare-and-swap loop around it ([`cell`]).

pub(crate) mod cell;
pub(crate) mod gcra;

pub(crate) use cell::GcraCell;
pub(crate) use gcra::Gcra;
