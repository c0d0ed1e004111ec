//! What the instances of an app enforce, judged against the console: per instance
//! whether it drifts from the console, and per point the summaries the points list
//! shows (who enforces a policy and from which sources, drift, breaker states).
//!
//! # Drift
//!
//! An instance's report for a point **drifts** when either:
//!
//! - **`local_override`**: the console's *current* policy document has the point, and
//!   at least one section the instance enforces for it (rules, window, shadow,
//!   adaptive, cluster, breaker, retry) comes from another source than the console (a policy
//!   file or the program's code). Local settings of a point the console does not
//!   manage are not drift: they are the only policy of that point.
//! - **`digest_mismatch`**: every section the instance enforces comes from the
//!   console, at version `v`, and the instance's digest of its effective settings
//!   differs from the digest of the console's own settings for the point in version
//!   `v` (computed here with the runtime's `PointConfig::digest`; `none` when version
//!   `v` has no settings for the point). The instance does not enforce what the
//!   version it says it holds says.
//! - **`unknown_version`**: the instance enforces sections from a console version this
//!   console never had (a console whose database was replaced).
//!
//! An instance that still holds an older console version and enforces exactly what
//! that version says does not drift: it is behind (the instances table shows the
//! version each holds), and catches up at its next pull.

use crate::model::{EnforcementRow, Enforcing, InstanceInfo, SectionOrigin};
use crate::policy::Document;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Instances whose last heartbeat is older than this (six cycles) are left out of
/// the summaries of the points list: a stopped instance's open breaker is no longer
/// news. The point's instance list still shows them, marked `live: false`.
pub const LIVE_MS: i64 = 60_000;

/// The digests of the points of one console version.
#[derive(Clone, Debug)]
enum Version {
    Points(BTreeMap<String, String>),
    /// The console has no such version.
    Missing,
    /// The stored version does not validate with this server's runtime.
    Unreadable,
}

/// What the console knows: the points of its current version, and the digests of
/// the points of the versions the instances hold.
#[derive(Clone, Debug, Default)]
pub struct Console {
    /// The console's current policy version (0: none).
    pub current_version: u64,
    /// The points that have settings in the current version.
    pub current_points: BTreeSet<String>,
    versions: BTreeMap<u64, Version>,
}

/// The digest of each point's settings in a document.
pub fn digests(doc: &Document) -> BTreeMap<String, String> {
    doc.file
        .points
        .iter()
        .map(|(name, config)| (name.clone(), config.digest()))
        .collect()
}

impl Console {
    /// The console at its current version and document.
    pub fn new(current_version: u64, current: &Document) -> Console {
        let mut versions = BTreeMap::new();
        versions.insert(current_version, Version::Points(digests(current)));
        Console {
            current_version,
            current_points: current.point_names(),
            versions,
        }
    }

    /// Whether the digests of `version` still have to be added.
    pub fn needs(&self, version: u64) -> bool {
        !self.versions.contains_key(&version)
    }

    /// Adds the document of another version: `None` if the console has no such
    /// version, `Some(Err(()))` if it does not validate.
    pub fn add_version(&mut self, version: u64, doc: Option<Result<Document, ()>>) {
        let v = match doc {
            None if version == 0 => Version::Points(BTreeMap::new()),
            None => Version::Missing,
            Some(Ok(d)) => Version::Points(digests(&d)),
            Some(Err(())) => Version::Unreadable,
        };
        self.versions.insert(version, v);
    }

    /// The digest of the console's settings for `point` in `version`: `Ok(None)` if
    /// it cannot be known (unreadable version), `Err(())` if there is no such
    /// version.
    fn expected(&self, version: u64, point: &str) -> Result<Option<String>, ()> {
        match self.versions.get(&version) {
            Some(Version::Points(p)) => Ok(Some(
                p.get(point).cloned().unwrap_or_else(|| "none".to_owned()),
            )),
            Some(Version::Unreadable) => Ok(None),
            Some(Version::Missing) | None => Err(()),
        }
    }
}

/// The console version an entry's console sections come from (the highest, should
/// they differ), `None` if no section comes from the console.
pub fn console_version(e: &Enforcing) -> Option<u64> {
    e.origins
        .values()
        .filter(|o| o.is_console())
        .map(|o| o.version)
        .max()
}

/// How an instance's report for a point compares with the console.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Whether it drifts (see the module docs).
    pub drift: bool,
    /// Why: `local_override`, `digest_mismatch`, `unknown_version`.
    pub drift_reasons: Vec<&'static str>,
    /// The sections that come from another source than the console.
    pub local_sections: Vec<String>,
    /// The console version its console sections come from.
    pub console_version: Option<u64>,
    /// The digest of the console's settings for the point at that version.
    pub expected_digest: Option<String>,
}

/// Judges one report (see the module docs for the rules).
pub fn judge(e: &Enforcing, console: &Console) -> Verdict {
    let local_sections: Vec<String> = e
        .origins
        .iter()
        .filter(|(_, o)| !o.is_console())
        .map(|(s, _)| s.clone())
        .collect();
    let console_version = console_version(e);
    let mut reasons = Vec::new();
    if console.current_points.contains(&e.point) && !local_sections.is_empty() {
        reasons.push("local_override");
    }
    let mut expected_digest = None;
    if let Some(v) = console_version {
        match console.expected(v, &e.point) {
            Ok(Some(d)) => {
                if local_sections.is_empty() && d != e.digest {
                    reasons.push("digest_mismatch");
                }
                expected_digest = Some(d);
            }
            Ok(None) => {}
            Err(()) => reasons.push("unknown_version"),
        }
    }
    Verdict {
        drift: !reasons.is_empty(),
        drift_reasons: reasons,
        local_sections,
        console_version,
        expected_digest,
    }
}

/// Whether an instance counts as live at `now_ms`.
pub fn is_live(instance: Option<&InstanceInfo>, now_ms: i64) -> bool {
    instance
        .and_then(|i| i.last_heartbeat_ms)
        .is_some_and(|t| now_ms - t <= LIVE_MS)
}

/// How many live instances enforce something for a point from one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceCount {
    /// `console`, `code` or `file:<path>`.
    pub source: String,
    /// `console`, `code` or `file`.
    pub kind: String,
    /// Instances with at least one section from this source.
    pub instances: u64,
    /// The versions of the source they hold, ascending.
    pub versions: Vec<u64>,
}

/// Who enforces a policy for a point.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EnforcedBy {
    /// Live instances enforcing at least one section for the point.
    pub instances: u64,
    /// Per source, sorted by source.
    pub sources: Vec<SourceCount>,
    /// Per kind of source (`code`, `file`, `console`): instances with at least one
    /// section from a source of that kind.
    pub by_kind: BTreeMap<String, u64>,
    /// The oldest of the reports counted, ms since the Unix epoch.
    pub received_ms: Option<i64>,
}

/// The breaker states of a point across live instances.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BreakerSummary {
    /// Live instances with a breaker on the point.
    pub instances: u64,
    /// How many are closed.
    pub closed: u64,
    /// How many are open.
    pub open: u64,
    /// How many are half open.
    pub half_open: u64,
    /// The worst state: `open`, else `half_open`, else `closed`.
    pub state: &'static str,
    /// Since when the oldest not-closed breaker is in its state (the instance's
    /// clock); `None` when all are closed.
    pub since_ms: Option<i64>,
    /// Since when the most recently closed one is closed, when all are.
    pub closed_since_ms: Option<i64>,
}

/// What the points list says about a point's enforcement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PointEnforcement {
    /// Who enforces a policy for it.
    pub enforced_by: EnforcedBy,
    /// Whether a live instance drifts for it.
    pub drift: bool,
    /// How many live instances drift for it.
    pub drift_instances: u64,
    /// Its breakers' states, `None` if no live instance has a breaker on it.
    pub breaker: Option<BreakerSummary>,
}

/// Summarises the live reports of one point.
pub fn summarize<'a>(
    rows: impl IntoIterator<Item = &'a EnforcementRow>,
    console: &Console,
) -> PointEnforcement {
    let mut out = PointEnforcement::default();
    let mut sources: BTreeMap<String, (u64, BTreeSet<u64>)> = BTreeMap::new();
    let mut breaker = BreakerSummary::default();
    for row in rows {
        let e = &row.entry;
        if !e.origins.is_empty() {
            out.enforced_by.instances += 1;
            out.enforced_by.received_ms = Some(
                out.enforced_by
                    .received_ms
                    .map_or(row.received_ms, |t| t.min(row.received_ms)),
            );
            let mut seen = BTreeMap::new();
            for o in e.origins.values() {
                let v: &mut u64 = seen.entry(o.source.clone()).or_insert(o.version);
                *v = (*v).max(o.version);
            }
            let kinds: BTreeSet<&str> = e.origins.values().map(SectionOrigin::kind).collect();
            for kind in kinds {
                *out.enforced_by.by_kind.entry(kind.to_owned()).or_default() += 1;
            }
            for (source, version) in seen {
                let s = sources.entry(source).or_default();
                s.0 += 1;
                s.1.insert(version);
            }
        }
        if judge(e, console).drift {
            out.drift_instances += 1;
        }
        if let Some(b) = &e.breaker {
            breaker.instances += 1;
            match b.state.as_str() {
                "open" => breaker.open += 1,
                "half_open" => breaker.half_open += 1,
                _ => breaker.closed += 1,
            }
            if b.state == "closed" {
                breaker.closed_since_ms = Some(
                    breaker
                        .closed_since_ms
                        .map_or(b.since_ms, |t| t.max(b.since_ms)),
                );
            } else {
                breaker.since_ms = Some(breaker.since_ms.map_or(b.since_ms, |t| t.min(b.since_ms)));
            }
        }
    }
    out.drift = out.drift_instances > 0;
    out.enforced_by.sources = sources
        .into_iter()
        .map(|(source, (instances, versions))| SourceCount {
            kind: if source.starts_with("file:") {
                "file".to_owned()
            } else {
                source.clone()
            },
            source,
            instances,
            versions: versions.into_iter().collect(),
        })
        .collect();
    if breaker.instances > 0 {
        breaker.state = if breaker.open > 0 {
            "open"
        } else if breaker.half_open > 0 {
            "half_open"
        } else {
            "closed"
        };
        if breaker.state != "closed" {
            breaker.closed_since_ms = None;
        }
        out.breaker = Some(breaker);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BreakerReport;
    use serde_json::json;

    fn origin(source: &str, version: u64) -> SectionOrigin {
        SectionOrigin {
            source: source.into(),
            version,
        }
    }

    fn entry(point: &str, digest: &str, origins: &[(&str, &str, u64)]) -> Enforcing {
        Enforcing {
            point: point.into(),
            digest: digest.into(),
            origins: origins
                .iter()
                .map(|(s, src, v)| ((*s).to_owned(), origin(src, *v)))
                .collect(),
            local: None,
            breaker: None,
        }
    }

    fn console() -> (Console, String) {
        let v3 = Document::from_json(
            &json!({"points": {"a": {"max_visits": 3}, "b": {"max_visits": 1}}}),
        )
        .unwrap();
        let v2 = Document::from_json(&json!({"points": {"a": {"max_visits": 2}}})).unwrap();
        let mut c = Console::new(3, &v3);
        c.add_version(2, Some(Ok(v2)));
        c.add_version(9, None);
        let a3 = v3.file.points["a"].digest();
        (c, a3)
    }

    #[test]
    fn an_instance_enforcing_the_console_exactly_does_not_drift() {
        let (c, a3) = console();
        let v = judge(&entry("a", &a3, &[("rules", "console", 3)]), &c);
        assert_eq!(v.drift_reasons, Vec::<&str>::new());
        assert_eq!(v.console_version, Some(3));
        assert_eq!(v.expected_digest.as_deref(), Some(a3.as_str()));
    }

    #[test]
    fn a_local_section_over_a_console_point_drifts() {
        let (c, a3) = console();
        let v = judge(
            &entry(
                "a",
                "0123456789abcdef",
                &[("rules", "console", 3), ("breaker", "file:/etc/p.toml", 1)],
            ),
            &c,
        );
        assert_eq!(v.drift_reasons, ["local_override"]);
        assert_eq!(v.local_sections, ["breaker"]);
        assert_eq!(v.expected_digest, Some(a3));
        // A local policy of a point the console does not manage is not drift.
        let v = judge(&entry("z", "0123456789abcdef", &[("rules", "code", 1)]), &c);
        assert!(!v.drift, "{v:?}");
    }

    #[test]
    fn a_digest_other_than_the_version_held_drifts_and_behind_is_not_drift() {
        let (c, _) = console();
        let v = judge(
            &entry("a", "0123456789abcdef", &[("rules", "console", 3)]),
            &c,
        );
        assert_eq!(v.drift_reasons, ["digest_mismatch"]);
        // Holding v2 and enforcing exactly v2's settings: behind, not drifting.
        let v2 = Document::from_json(&json!({"points": {"a": {"max_visits": 2}}})).unwrap();
        let d2 = v2.file.points["a"].digest();
        assert!(!judge(&entry("a", &d2, &[("rules", "console", 2)]), &c).drift);
        // Console sections for a point the version does not have.
        let v = judge(
            &entry("b", "0123456789abcdef", &[("rules", "console", 2)]),
            &c,
        );
        assert_eq!(v.drift_reasons, ["digest_mismatch"]);
        assert_eq!(v.expected_digest.as_deref(), Some("none"));
        let v = judge(
            &entry("a", "0123456789abcdef", &[("rules", "console", 9)]),
            &c,
        );
        assert_eq!(v.drift_reasons, ["unknown_version"]);
    }

    #[test]
    fn summaries_count_sources_drift_and_breakers() {
        let (c, a3) = console();
        let row = |instance: &str, e: Enforcing, state: Option<(&str, i64)>| EnforcementRow {
            instance: instance.into(),
            entry: Enforcing {
                breaker: state.map(|(s, since)| BreakerReport {
                    kind: "classic".into(),
                    state: s.into(),
                    since_ms: since,
                    transitions: 1,
                }),
                ..e
            },
            has_local: false,
            cycle_start_ms: 0,
            received_ms: 100,
        };
        let rows = [
            row(
                "i1",
                entry("a", &a3, &[("rules", "console", 3)]),
                Some(("closed", 5)),
            ),
            row(
                "i2",
                entry(
                    "a",
                    "0123456789abcdef",
                    &[("rules", "console", 3), ("breaker", "file:/p.toml", 2)],
                ),
                Some(("open", 20)),
            ),
            row(
                "i3",
                entry("a", "0123456789abcdef", &[("breaker", "file:/p.toml", 2)]),
                Some(("half_open", 10)),
            ),
        ];
        let s = summarize(&rows, &c);
        assert_eq!(s.enforced_by.instances, 3);
        assert_eq!(
            s.enforced_by
                .sources
                .iter()
                .map(|s| (s.source.as_str(), s.kind.as_str(), s.instances))
                .collect::<Vec<_>>(),
            [("console", "console", 2), ("file:/p.toml", "file", 2)]
        );
        assert_eq!(
            s.enforced_by.by_kind,
            [("console".to_owned(), 2), ("file".to_owned(), 2)].into()
        );
        assert_eq!((s.drift, s.drift_instances), (true, 2));
        let b = s.breaker.unwrap();
        assert_eq!((b.closed, b.open, b.half_open, b.state), (1, 1, 1, "open"));
        assert_eq!(b.since_ms, Some(10), "the oldest not-closed one");
        assert_eq!(b.closed_since_ms, None);
        let calm = summarize(&rows[..1], &c);
        assert!(!calm.drift);
        assert_eq!(calm.breaker.unwrap().closed_since_ms, Some(5));
    }
}
