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
    /// The `breakers` object of a pull body: every point of `names` with a classic
    /// breaker, in at most `room` bytes (about): the breakers with a quorum or not
    /// closed first, so that a body never outgrows the console's limit and the
    /// states that matter are never the ones left out. `None` when there is none.
    pub(crate) fn report(
        &self,
        registry: &Registry,
        names: &[&'static str],
        room: usize,
    ) -> Option<Value> {
        let mut moved = self.moved.lock().recover();
        let mut first = Vec::new();
        let mut rest = Vec::new();
        for &name in names {
            let Some(view) = registry.point(name).ok().and_then(|p| p.quorum_view()) else {
                continue;
            };
            let by_quorum = moved.get(name) == Some(&view.transitions);
            if !by_quorum {
                // The breaker changed by its own rules since: its state is its own.
                moved.remove(name);
            }
            let entry = (name, state_str(view.state), by_quorum);
            if view.quorum.is_some() || view.state != ClassicState::Closed {
                first.push(entry);
            } else {
                rest.push(entry);
            }
        }
        let mut out = Map::new();
        let mut used = 0;
        for (name, state, by_quorum) in first.into_iter().chain(rest) {
            // `"name":{"state":"half_open","by_quorum":false},` and JSON escapes.
            used += name.len() + 48;
            if used > room {
                break;
            }
            out.insert(
                name.to_owned(),
                json!({"state": state, "by_quorum": by_quorum}),
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
    /// point of `names` that has one. An answer without `fleet` (an older console)
    /// applies none. Returns the points moved.
    pub(crate) fn pulled(
        &self,
        registry: &Registry,
        names: &[&'static str],
        answer: &[u8],
    ) -> Vec<&'static str> {
        let fleet = serde_json::from_slice::<Value>(answer)
            .ok()
            .and_then(|v| read_fleet(&v));
        let Some(fleet) = fleet else {
            self.forget();
            return Vec::new();
        };
        let mut moved = Vec::new();
        for &name in names {
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
    use crate::breaker::{ClassicConfig, Quorum, QuorumAction};
    use crate::policy::BreakerPolicy;

    /// The report fits its room, the breakers with a quorum first; SRE breakers and
    /// points without a breaker are left out.
    #[test]
    fn the_report_fits_its_room_quorum_breakers_first() {
        let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(
            crate::Clock::manual(&crate::ManualClock::new()),
        )));
        let plain = BreakerPolicy::Classic(ClassicConfig::default());
        let quorum = BreakerPolicy::Classic(
            ClassicConfig::builder()
                .quorum(Quorum::new(2, QuorumAction::Open).unwrap())
                .build()
                .unwrap(),
        );
        registry.set_breaker("a.plain", plain).unwrap();
        registry.set_breaker("b.plain", plain).unwrap();
        registry.set_breaker("z.quorum", quorum).unwrap();
        registry
            .set_breaker("sre", BreakerPolicy::default())
            .unwrap();
        registry.point("none").unwrap();
        let names = registry.point_names();
        let peers = Peers::default();
        let all = peers.report(registry, &names, usize::MAX).unwrap();
        let keys: Vec<&String> = all.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["a.plain", "b.plain", "z.quorum"]);
        assert_eq!(
            all["z.quorum"],
            json!({"state": "closed", "by_quorum": false})
        );
        let one = peers.report(registry, &names, 60).unwrap();
        let keys: Vec<&String> = one.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["z.quorum"]);
        assert_eq!(peers.report(registry, &names, 10), None);
    }

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
