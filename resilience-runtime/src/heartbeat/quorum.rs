//! Breakers that know their peers, on the client's side: each JSON pull carries the
//! state of every classic breaker, the answer carries the console's count of open
//! breakers per point (`fleet`), and the points whose breaker has a
//! [`Quorum`](crate::breaker::Quorum) react to it with the pure
//! [`quorum_step`] (see the guide's
//! [fleet chapter](crate::guide::fleet#breakers-that-know-their-peers)).
//!
//! Pull body: `"breakers": {"<point>": {"state": "closed" | "open" | "half_open",
//! "by_quorum": bool}}`, absent when no point has a classic breaker. `by_quorum` says
//! the state is the one a quorum moved the breaker to and it has not changed by its
//! own rules since: the console does not count it, so a quorum cannot hold itself up.
//!
//! Answer: `"fleet": {"<point>": {"open": k, "instances": n}}`, `k` live instances with
//! the point's breaker open by their own rules out of `n` with a breaker on it.
//!
//! Everything here runs on the heartbeat's thread, after a pull; guarded calls never
//! see it.

use crate::breaker::{quorum_step, ClassicState, FleetCount};
use crate::registry::Registry;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Mutex, Recover};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

/// What the client remembers of the quorum.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    /// The points a quorum moved, each with the point's breaker changes right after
    /// the move: while the count is the same, the state is the quorum's.
    moved: Mutex<HashMap<&'static str, u64>>,
    /// The console's counts of the last pull; empty when it failed.
    fleet: Mutex<BTreeMap<String, FleetCount>>,
    /// Breakers moved by a quorum so far.
    pub(crate) moves: AtomicU64,
}

/// A classic breaker's state as the wire writes it.
fn state_str(s: ClassicState) -> &'static str {
    match s {
        ClassicState::Closed => "closed",
        ClassicState::Open => "open",
        ClassicState::HalfOpen => "half_open",
    }
}

impl Peers {
    /// The `breakers` object of a pull body: every point with a classic breaker;
    /// `None` when there is none.
    pub(crate) fn report(&self, registry: &Registry) -> Option<Value> {
        let mut moved = self.moved.lock().recover();
        let mut out = Map::new();
        for name in registry.point_names() {
            let Some(view) = registry.point(name).ok().and_then(|p| p.quorum_view()) else {
                continue;
            };
            let by_quorum = moved.get(name) == Some(&view.transitions);
            if !by_quorum {
                // The breaker changed by its own rules since: its state is its own.
                moved.remove(name);
            }
            out.insert(
                name.to_owned(),
                json!({"state": state_str(view.state), "by_quorum": by_quorum}),
            );
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }

    /// The console's counts of the last pull that succeeded and carried them.
    pub(crate) fn fleet(&self) -> BTreeMap<String, FleetCount> {
        self.fleet.lock().recover().clone()
    }

    /// A pull failed: no count is fresh any more, so only the local rules apply.
    pub(crate) fn forget(&self) {
        self.fleet.lock().recover().clear();
    }

    /// A pull answered `answer`: keeps its counts and applies the quorum of every
    /// point that has one. An answer without `fleet` (an older console) applies none.
    /// Returns the points moved.
    pub(crate) fn pulled(&self, registry: &Registry, answer: &[u8]) -> Vec<&'static str> {
        let fleet = serde_json::from_slice::<Value>(answer)
            .ok()
            .and_then(|v| read_fleet(&v));
        let Some(fleet) = fleet else {
            self.forget();
            return Vec::new();
        };
        let mut moved = Vec::new();
        for name in registry.point_names() {
            let Some(point) = registry.point(name).ok() else {
                continue;
            };
            let Some(view) = point.quorum_view() else {
                continue;
            };
            let Some(quorum) = view.quorum else {
                continue;
            };
            // A point the console did not count has no open peer it knows of.
            let count = fleet.get(name).copied().unwrap_or_default();
            let Some(to) = quorum_step(&quorum, Some(count), view.state) else {
                continue;
            };
            if let Some(after) = point.quorum_move(to) {
                self.moved.lock().recover().insert(name, after);
                self.moves.fetch_add(1, Ordering::Relaxed);
                moved.push(name);
            }
        }
        *self.fleet.lock().recover() = fleet;
        moved
    }
}

/// The `fleet` object of a pull answer; `None` when absent or malformed (then the
/// quorum is not applied: local rules only).
pub(crate) fn read_fleet(answer: &Value) -> Option<BTreeMap<String, FleetCount>> {
    let fleet = answer.get("fleet")?.as_object()?;
    let count = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_u64)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    fleet
        .iter()
        .map(|(point, v)| {
            Some((
                point.clone(),
                FleetCount::new(count(v, "open")?, count(v, "instances")?),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_counts_are_read_and_a_malformed_answer_applies_nothing() {
        let v =
            json!({"fleet": {"a": {"open": 2, "instances": 3}, "b": {"open": 0, "instances": 1}}});
        let f = read_fleet(&v).unwrap();
        assert_eq!(f["a"], FleetCount::new(2, 3));
        assert_eq!(f["b"], FleetCount::new(0, 1));
        assert_eq!(read_fleet(&json!({"version": 1})), None);
        assert_eq!(
            read_fleet(&json!({"fleet": {"a": {"open": -1, "instances": 3}}})),
            None
        );
        assert_eq!(read_fleet(&json!({"fleet": {"a": {"open": 1}}})), None);
        assert_eq!(read_fleet(&json!({"fleet": [1]})), None);
    }
}
