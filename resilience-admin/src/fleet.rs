//! Breakers that know their peers, on the console's side.
//!
//! Every pull in our JSON protocol may carry the state of each classic breaker of the
//! instance and its pull period:
//!
//! ```json
//! {"breakers": {"order.create": {"state": "open", "by_quorum": false}},
//!  "pull_period_ms": 5000}
//! ```
//!
//! `state` is `closed`, `open` or `half_open`; `by_quorum` says a fleet quorum moved
//! the breaker there and it has not changed by its own rules since. The console keeps
//! the latest per instance (the `breakers` column of the instances table) and answers
//! every pull that carried `breakers` with the counts of the app's fresh instances (a
//! pull without them is answered as before):
//!
//! ```json
//! {"fleet": {"order.create": {"open": 2, "half_open": 0, "by_quorum": 1, "instances": 3}}}
//! ```
//!
//! `open` counts the instances whose breaker is open **by its own rules** (the one a
//! quorum opened is in `by_quorum` instead, so a quorum cannot hold itself up);
//! `instances` those that have a breaker on the point. An instance is fresh while its
//! last pull is at most three of its pull periods old (clamped to
//! [`MIN_FRESH_MS`]..=[`MAX_FRESH_MS`]): a stopped instance leaves the counts within
//! a few periods. The points list shows the same counts per point.

use crate::store::BreakerReports;
use crate::wire::InputError;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The shortest time an instance's breaker states count after its pull.
pub const MIN_FRESH_MS: i64 = 1_000;
/// The longest time an instance's breaker states count after its pull (the live
/// limit of the points list, [`crate::enforcement::LIVE_MS`]).
pub const MAX_FRESH_MS: i64 = crate::enforcement::LIVE_MS;
/// The pull period assumed of a client that does not say (the runtime's default).
const DEFAULT_PERIOD_MS: i64 = 5_000;

/// A breaker's state as an instance reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Calls run.
    Closed,
    /// Calls are refused.
    Open,
    /// Probes run.
    HalfOpen,
}

impl State {
    fn parse(text: &str) -> Option<State> {
        match text {
            "closed" => Some(State::Closed),
            "open" => Some(State::Open),
            "half_open" => Some(State::HalfOpen),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
        }
    }
}

/// One breaker of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its state.
    pub state: State,
    /// A fleet quorum put it there.
    pub by_quorum: bool,
}

/// The breaker states of one pull.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reported {
    /// The instance's pull period, if it said.
    pub pull_period_ms: Option<u64>,
    /// Per point.
    pub breakers: BTreeMap<String, Seen>,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> InputError {
    InputError {
        field: field.into(),
        message: message.into(),
    }
}

impl Reported {
    /// Reads `breakers` and `pull_period_ms` from a JSON pull; `None` when it has no
    /// `breakers` (an older client, or no classic breaker).
    ///
    /// # Errors
    ///
    /// Every malformed field, by path (`breakers.p.state`).
    pub fn read(pull: &Value) -> Result<Option<Reported>, Vec<InputError>> {
        let Some(breakers) = pull.get("breakers") else {
            return Ok(None);
        };
        let mut errors = Vec::new();
        let pull_period_ms = match pull.get("pull_period_ms") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(ms) => Some(ms),
                None => {
                    errors.push(bad(
                        "pull_period_ms",
                        "expected milliseconds (an integer >= 0)",
                    ));
                    None
                }
            },
        };
        let mut out = BTreeMap::new();
        match breakers.as_object() {
            None => errors.push(bad("breakers", "expected an object of points")),
            Some(map) => {
                for (point, v) in map {
                    let field = format!("breakers.{point}");
                    if let Err(m) = crate::wire::check_name(point) {
                        errors.push(bad(&field, format!("not a point name: {m}")));
                        continue;
                    }
                    let state = v.get("state").and_then(Value::as_str);
                    let Some(state) = state.and_then(State::parse) else {
                        errors.push(bad(
                            format!("{field}.state"),
                            "expected `closed`, `open` or `half_open`",
                        ));
                        continue;
                    };
                    let by_quorum = match v.get("by_quorum") {
                        None | Some(Value::Null) => false,
                        Some(Value::Bool(b)) => *b,
                        Some(_) => {
                            errors.push(bad(format!("{field}.by_quorum"), "expected a boolean"));
                            continue;
                        }
                    };
                    out.insert(point.clone(), Seen { state, by_quorum });
                }
            }
        }
        if errors.is_empty() {
            Ok(Some(Reported {
                pull_period_ms,
                breakers: out,
            }))
        } else {
            Err(errors)
        }
    }

    /// The text the store keeps.
    pub fn to_stored(&self) -> String {
        let breakers: Map<String, Value> = self
            .breakers
            .iter()
            .map(|(p, s)| {
                (
                    p.clone(),
                    json!({"state": s.state.as_str(), "by_quorum": s.by_quorum}),
                )
            })
            .collect();
        json!({"pull_period_ms": self.pull_period_ms, "breakers": breakers}).to_string()
    }

    /// Reads what [`to_stored`](Self::to_stored) wrote; `None` if it is not that.
    pub fn from_stored(text: &str) -> Option<Reported> {
        let v: Value = serde_json::from_str(text).ok()?;
        Reported::read(&v).ok().flatten()
    }

    /// How long these states count after the pull that carried them.
    fn fresh_ms(&self) -> i64 {
        let period = self
            .pull_period_ms
            .map_or(DEFAULT_PERIOD_MS, |p| i64::try_from(p).unwrap_or(i64::MAX));
        period.saturating_mul(3).clamp(MIN_FRESH_MS, MAX_FRESH_MS)
    }
}

/// The fleet's breakers on one point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FleetCount {
    /// Fresh instances whose breaker is open by its own rules.
    pub open: u64,
    /// Fresh instances whose breaker is half-open by its own rules.
    pub half_open: u64,
    /// Fresh instances whose breaker a quorum opened or moved to half-open.
    pub by_quorum: u64,
    /// Fresh instances with a breaker on the point.
    pub instances: u64,
}

/// Counts the breakers of the instances that are fresh at `now_ms`, per point.
/// Unreadable stored states are skipped.
pub fn count(reports: &[BreakerReports], now_ms: i64) -> BTreeMap<String, FleetCount> {
    let mut out: BTreeMap<String, FleetCount> = BTreeMap::new();
    for r in reports {
        let Some(reported) = Reported::from_stored(&r.breakers) else {
            continue;
        };
        if now_ms.saturating_sub(r.pulled_ms) > reported.fresh_ms() {
            continue;
        }
        for (point, seen) in reported.breakers {
            let c = out.entry(point).or_default();
            c.instances += 1;
            match (seen.state, seen.by_quorum) {
                (State::Closed, _) => {}
                (_, true) => c.by_quorum += 1,
                (State::Open, false) => c.open += 1,
                (State::HalfOpen, false) => c.half_open += 1,
            }
        }
    }
    out
}

/// The time from which stored states may still be fresh at `now_ms`.
pub fn oldest_fresh(now_ms: i64) -> i64 {
    now_ms.saturating_sub(MAX_FRESH_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(instance: &str, pulled_ms: i64, period: Option<u64>, v: Value) -> BreakerReports {
        let mut pull = json!({"breakers": v});
        if let Some(p) = period {
            pull["pull_period_ms"] = json!(p);
        }
        BreakerReports {
            instance: instance.into(),
            pulled_ms,
            breakers: Reported::read(&pull).unwrap().unwrap().to_stored(),
        }
    }

    #[test]
    fn counts_leave_out_stale_instances_and_tell_quorum_states_apart() {
        let now = 100_000;
        let reports = [
            stored(
                "a",
                now - 1_000,
                Some(1_000),
                json!({"p": {"state": "open"}}),
            ),
            stored(
                "b",
                now - 2_000,
                Some(1_000),
                json!({"p": {"state": "open", "by_quorum": true}, "q": {"state": "half_open"}}),
            ),
            stored("c", now - 500, None, json!({"p": {"state": "closed"}})),
            // Three periods and more: stale.
            stored(
                "d",
                now - 3_001,
                Some(1_000),
                json!({"p": {"state": "open"}}),
            ),
        ];
        let c = count(&reports, now);
        assert_eq!(
            c["p"],
            FleetCount {
                open: 1,
                half_open: 0,
                by_quorum: 1,
                instances: 3
            }
        );
        assert_eq!((c["q"].half_open, c["q"].instances), (1, 1));
    }

    #[test]
    fn malformed_states_are_named() {
        let errors = Reported::read(&json!({"breakers": {"p": {"state": "ajar"},
                                                          "q": {"state": "open", "by_quorum": 1}},
                                            "pull_period_ms": -1}))
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["pull_period_ms", "breakers.p.state", "breakers.q.by_quorum"]
        );
        assert_eq!(Reported::read(&json!({"version": 1})), Ok(None));
        assert!(Reported::read(&json!({"breakers": []})).is_err());
        assert_eq!(Reported::from_stored("not json"), None);
    }
}
