//! The records a call keeps for the stages only some policies use, and the form they
//! are boxed with (see `extras`, which boxes them, and `spares`, which keeps the
//! boxes).

use crate::point::form::compiled::Compiled;

/// The records of one call for the stages only some policies use (0: none).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(in crate::point) struct Records {
    /// The end of the delay this call probes.
    pub(in crate::point) probe_of: u64,
    /// A classic breaker's ticket taken apart (`epoch << 1 | probe`), with
    /// [`Meta::BREAKER`](super::meta::Meta::BREAKER) on a classic breaker. An SRE
    /// breaker records nothing on the way in: its slow-call threshold is its slot's.
    pub(in crate::point) ticket: u64,
    /// The start of the call on the adaptive limit's clock, with
    /// [`Meta::ADAPTIVE`](super::meta::Meta::ADAPTIVE).
    pub(in crate::point) adaptive_start: u64,
    /// The fingerprint of the key whose slot the call holds, with
    /// [`Meta::KEY`](super::meta::Meta::KEY).
    pub(in crate::point) key_fp: u64,
}

/// A call's form with its records: what a boxed `Tail` points at.
#[derive(Debug)]
pub(in crate::point) struct Extras {
    pub(in crate::point) form: &'static Compiled,
    pub(in crate::point) records: Records,
}
