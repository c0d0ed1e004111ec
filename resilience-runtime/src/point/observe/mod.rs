//! What a point tells about itself, and the background work that keeps it current:
//! `cycle` (the 10 s cycle), `seconds` (the per-second series), `snapshot` (statistics
//! and memory), `chores` (the timers of the timing wheel), `expiry` (freeing the
//! history of idle points).

pub(crate) mod chores;
pub(in crate::point) mod cycle;
pub(in crate::point) mod expiry;
pub(in crate::point) mod seconds;
pub(in crate::point) mod snapshot;
