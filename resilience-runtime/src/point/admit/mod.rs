//! Admission and completion: every call asks here whether it may run, and reports
//! how it ended. `enter` (the policy's stages on the flow word) and `lean` (a policy
//! without it) answer with an `attempt::Entry`; `taken` gives back what a refused call
//! took; `queue` is the concurrency rule's waiting room; `health` decides the health
//! rules; `permit` and `pending` complete a call, `meta` packs a permit's small fields
//! in one word, `extras` boxes the `records` of the stages only some policies use (a
//! probe, a classic breaker's ticket, an adaptive start, a key) and `spares` keeps a
//! few such boxes per thread; `report` counts and tells refusals and breaker changes;
//! `call`, `key_entry` and `breaker_wait` are the manual entries; `force` forces
//! states for tests; `quorum` moves a breaker for its fleet quorum; the tests of
//! `instances` check that the entry's copies for fewer rules decide as the full one.

pub(in crate::point) mod attempt;
#[cfg(feature = "tower")]
pub(in crate::point) mod breaker_wait;
pub(in crate::point) mod call;
pub(in crate::point) mod enter;
pub(in crate::point) mod extras;
#[cfg(feature = "testing")]
pub(in crate::point) mod force;
pub(in crate::point) mod health;
#[cfg(all(test, not(loom)))]
mod instances;
pub(in crate::point) mod key_entry;
pub(in crate::point) mod lean;
pub(crate) mod meta;
pub(crate) mod pending;
pub(crate) mod permit;
pub(crate) mod queue;
#[cfg(feature = "heartbeat")]
pub(crate) mod quorum;
pub(in crate::point) mod records;
pub(in crate::point) mod report;
mod spares;
pub(in crate::point) mod taken;
