//! The atomic words of a point and the pure decisions beside them, each a small
//! protocol with its "guarantee kept here" doc: `flow` (passes and calls in flight in
//! one word), `delay` (a delay's end and its one probe), `hang` (hung-call slots),
//! `arming` (whether a chore is armed), `chunks` and `durations` (per-lane cells),
//! `cell` (a compiled form's publication), `tally` (per-thread counts of calls
//! without a window). The `resilience-loom` crate model-checks these files.

pub(in crate::point) mod arming;
pub(in crate::point) mod cell;
pub(in crate::point) mod chunks;
pub(in crate::point) mod delay;
pub(crate) mod durations;
pub(in crate::point) mod flow;
pub(in crate::point) mod hang;
pub(crate) mod tally;
