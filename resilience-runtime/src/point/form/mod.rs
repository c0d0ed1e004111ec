//! A policy compiled for the hot path and the slots it names: `compiled` (the form),
//! `slots` (breakers, adaptive limiters, token buckets, cluster limits), `configure`
//! (turning settings into slots and a form, cold), `keys` (the `keys` section's forms),
//! `key_leases` and `shared` (limits shared beyond the process, through a trait the
//! engine owns).

pub(in crate::point) mod compiled;
pub(in crate::point) mod configure;
#[cfg(feature = "redis")]
pub(in crate::point) mod key_leases;
pub(crate) mod keys;
#[cfg(feature = "redis")]
pub(crate) mod shared;
pub(in crate::point) mod slots;
