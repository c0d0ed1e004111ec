//! Breakers that know their peers: the quorum setting of a classic breaker and the
//! pure decision the heartbeat client applies when a pull brings the fleet's counts.
//!
//! Each instance's breaker stays the judge of its own calls. The console counts, per
//! point, how many live instances of the app have the point's breaker open by their
//! own rules, and returns it in every pull answer ([`FleetCount`]). A point whose
//! [`ClassicConfig::quorum`](super::ClassicConfig::quorum) is set reacts to that count
//! with [`quorum_step`]: when at least [`Quorum::open_at`] instances are open and its
//! own breaker is closed, it opens (or goes half-open) at once, before its own window
//! trips. Nothing else: it then recovers by its own rules (open wait, probes), and a
//! count below the quorum never closes it. See the guide's
//! [fleet chapter](crate::guide::fleet#breakers-that-know-their-peers).

use super::ClassicState;
use crate::error::FieldError;
use std::fmt;

/// What a closed breaker does when the fleet reaches its [`Quorum`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuorumAction {
    /// Open, as if it had tripped: wait the first open wait, then probe.
    Open,
    /// Go half-open at once: admit the usual probes, and close if they all succeed
    /// or open if one fails.
    HalfOpen,
}

impl QuorumAction {
    /// The action as the policy file writes it: `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuorumAction::Open => "open",
            QuorumAction::HalfOpen => "half_open",
        }
    }

    /// Reads `open` or `half_open`; `None` for anything else.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::breaker::QuorumAction;
    ///
    /// assert_eq!(QuorumAction::parse("half_open"), Some(QuorumAction::HalfOpen));
    /// assert_eq!(QuorumAction::parse("ajar"), None);
    /// ```
    pub fn parse(text: &str) -> Option<QuorumAction> {
        match text {
            "open" => Some(QuorumAction::Open),
            "half_open" => Some(QuorumAction::HalfOpen),
            _ => None,
        }
    }

    fn state(self) -> ClassicState {
        match self {
            QuorumAction::Open => ClassicState::Open,
            QuorumAction::HalfOpen => ClassicState::HalfOpen,
        }
    }
}

impl fmt::Display for QuorumAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fleet quorum of a classic breaker: when `open_at` live instances of the app
/// (this one included) have the point's breaker open by their own rules, a closed
/// breaker takes `action`. Set it with
/// [`ClassicConfigBuilder::quorum`](super::ClassicConfigBuilder::quorum) or
/// `quorum = { open_at = 2, action = "open" }` in a policy's breaker section; it
/// needs the heartbeat client (feature `heartbeat`), which applies it after each pull.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{ClassicConfig, Quorum, QuorumAction};
///
/// let config = ClassicConfig::builder()
///     .quorum(Quorum::new(2, QuorumAction::HalfOpen)?)
///     .build()?;
/// assert_eq!(config.quorum.map(|q| q.open_at), Some(2));
///
/// // One instance alone never opens the fleet.
/// let lonely = Quorum::new(1, QuorumAction::Open).unwrap_err();
/// assert_eq!(lonely.field, "quorum.open_at");
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Quorum {
    /// How many instances must be open (>= 2).
    pub open_at: u32,
    /// What a closed breaker does then.
    pub action: QuorumAction,
}

impl Quorum {
    /// A quorum of `open_at` instances.
    ///
    /// # Errors
    ///
    /// A [`FieldError`] on `quorum.open_at` when it is below 2.
    pub fn new(open_at: u32, action: QuorumAction) -> Result<Quorum, FieldError> {
        let q = Quorum { open_at, action };
        q.validate()?;
        Ok(q)
    }

    pub(crate) fn validate(&self) -> Result<(), FieldError> {
        if self.open_at < 2 {
            return Err(FieldError::new(
                "quorum.open_at",
                format!(
                    "must be at least 2 (one instance alone never opens the fleet), got {}",
                    self.open_at
                ),
            ));
        }
        Ok(())
    }
}

/// What the console counted for one point in its last pull answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct FleetCount {
    /// Live instances whose breaker on the point is open by its own rules (a breaker
    /// a quorum opened does not count, so the quorum cannot hold itself up).
    pub open: u32,
    /// Live instances that have a breaker on the point.
    pub instances: u32,
}

impl FleetCount {
    /// A count of `open` out of `instances`.
    pub fn new(open: u32, instances: u32) -> FleetCount {
        FleetCount { open, instances }
    }
}

/// The pure decision of a quorum: the state to move a breaker to now, or `None` to
/// leave it to its own rules.
///
/// `fleet` is `None` when there is no fresh count (the console did not answer the
/// last pull): then only the local rules apply. A breaker that is open or half-open
/// is never moved (it is recovering by its own rules), and a count below the quorum
/// never closes anything.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::{quorum_step, ClassicState, FleetCount, Quorum, QuorumAction};
///
/// let q = Quorum::new(2, QuorumAction::Open)?;
/// let closed = ClassicState::Closed;
/// assert_eq!(quorum_step(&q, Some(FleetCount::new(1, 3)), closed), None);
/// assert_eq!(quorum_step(&q, Some(FleetCount::new(2, 3)), closed), Some(ClassicState::Open));
/// assert_eq!(quorum_step(&q, None, closed), None); // console unreachable: local rules
/// # Ok::<(), resilience_runtime::FieldError>(())
/// ```
pub fn quorum_step(
    quorum: &Quorum,
    fleet: Option<FleetCount>,
    local: ClassicState,
) -> Option<ClassicState> {
    let fleet = fleet?;
    (local == ClassicState::Closed && fleet.open >= quorum.open_at.max(2))
        .then(|| quorum.action.state())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STATES: [ClassicState; 3] = [
        ClassicState::Closed,
        ClassicState::Open,
        ClassicState::HalfOpen,
    ];

    #[test]
    fn the_quorum_opens_or_half_opens_a_closed_breaker_only() {
        let open = Quorum::new(3, QuorumAction::Open).unwrap();
        let half = Quorum::new(3, QuorumAction::HalfOpen).unwrap();
        let reached = Some(FleetCount::new(3, 5));
        assert_eq!(
            quorum_step(&open, reached, ClassicState::Closed),
            Some(ClassicState::Open)
        );
        assert_eq!(
            quorum_step(&half, reached, ClassicState::Closed),
            Some(ClassicState::HalfOpen)
        );
        for s in [ClassicState::Open, ClassicState::HalfOpen] {
            assert_eq!(quorum_step(&open, reached, s), None);
            assert_eq!(quorum_step(&half, reached, s), None);
        }
        assert_eq!(
            quorum_step(&open, Some(FleetCount::new(2, 5)), ClassicState::Closed),
            None
        );
    }

    #[test]
    fn a_quorum_below_two_is_refused_naming_the_field() {
        for k in [0, 1] {
            let e = Quorum::new(k, QuorumAction::Open).unwrap_err();
            assert_eq!(e.field, "quorum.open_at");
            assert!(e.message.contains("at least 2"), "{}", e.message);
        }
        assert!(Quorum::new(2, QuorumAction::Open).is_ok());
    }

    #[test]
    fn actions_read_what_they_write() {
        for a in [QuorumAction::Open, QuorumAction::HalfOpen] {
            assert_eq!(QuorumAction::parse(a.as_str()), Some(a));
            assert_eq!(a.to_string(), a.as_str());
        }
        assert_eq!(QuorumAction::parse("Open"), None);
    }

    /// The policy file reads `quorum` in a classic breaker, writes it back the same,
    /// and names the field of a bad one.
    #[cfg(feature = "config")]
    #[test]
    fn the_policy_file_reads_and_writes_the_quorum() {
        use crate::config::{Format, PolicyFile};
        use crate::policy::BreakerPolicy;
        let text = r#"{"points": {"p": {"breaker": {"algorithm": "classic",
                       "quorum": {"open_at": 3, "action": "half_open"}}},
                       "q": {"breaker": {"algorithm": "classic", "quorum": {"open_at": 2}}}}}"#;
        let file = PolicyFile::parse(text, Format::Json).unwrap();
        let quorum = |name: &str| match file.points[name].breaker {
            Some(BreakerPolicy::Classic(c)) => c.quorum,
            ref other => panic!("{other:?}"),
        };
        assert_eq!(
            quorum("p"),
            Some(Quorum::new(3, QuorumAction::HalfOpen).unwrap())
        );
        assert_eq!(
            quorum("q"),
            Some(Quorum::new(2, QuorumAction::Open).unwrap())
        );
        let written = serde_json::to_value(&file.points["p"]).unwrap();
        assert_eq!(
            written["breaker"]["quorum"],
            serde_json::json!({"open_at": 3, "action": "half_open"})
        );
        for (bad, field) in [
            (r#"{"open_at": 1}"#, "breaker.quorum.open_at"),
            (r#"{"action": "open"}"#, "breaker.quorum.open_at"),
            (
                r#"{"open_at": 2, "action": "ajar"}"#,
                "breaker.quorum.action",
            ),
            (r#"{"open_at": 2, "when": 1}"#, "breaker.quorum.when"),
        ] {
            let text = format!(
                r#"{{"points": {{"p": {{"breaker": {{"algorithm": "classic", "quorum": {bad}}}}}}}}}"#
            );
            let e = PolicyFile::parse(&text, Format::Json).unwrap_err();
            let fields: Vec<_> = e
                .problems()
                .iter()
                .filter_map(|p| p.field.clone())
                .collect();
            assert_eq!(fields, [field], "{bad}: {e:?}");
        }
        // The SRE breaker has no quorum.
        let sre =
            r#"{"points": {"p": {"breaker": {"algorithm": "sre", "quorum": {"open_at": 2}}}}}"#;
        assert!(PolicyFile::parse(sre, Format::Json).is_err());
    }

    proptest! {
        /// The decision moves only a closed breaker, only with a fresh count at or
        /// over the quorum, only to the configured state; it never closes anything,
        /// and no count of one instance moves anything.
        #[test]
        fn the_decision_follows_its_rules(
            k in 0u32..8, open in 0u32..10, extra in 0u32..10,
            state in 0usize..3, half in any::<bool>(), fresh in any::<bool>(),
        ) {
            let action = if half { QuorumAction::HalfOpen } else { QuorumAction::Open };
            // The fields are public to read; a bad value must still not open alone.
            let q = Quorum { open_at: k, action };
            let local = STATES[state];
            let fleet = fresh.then(|| FleetCount::new(open, open + extra));
            let step = quorum_step(&q, fleet, local);
            prop_assert_ne!(step, Some(ClassicState::Closed));
            if let Some(to) = step {
                prop_assert!(fresh);
                prop_assert_eq!(local, ClassicState::Closed);
                prop_assert!(open >= k && open >= 2);
                prop_assert_eq!(to, action.state());
            } else {
                prop_assert!(!fresh || local != ClassicState::Closed || open < k.max(2));
            }
        }
    }
}
