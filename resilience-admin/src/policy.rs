//! Policy documents: validation with the runtime's own policy-file parser, the
//! canonical stored form, diffs between versions, and the SDS strategy view.

use crate::model::DiffEntry;
use resilience_runtime::config::{Format, PointConfig, PolicyFile, Problem};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

mod locate;

/// A problem of a submitted policy, as the API reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyProblem {
    /// The point concerned, if any.
    pub point: Option<String>,
    /// The field within the point (`timeouts.threshold`) or a top-level key.
    pub field: Option<String>,
    /// The runtime's kind of problem (`wrong_type`, `out_of_range`, ...).
    pub kind: String,
    /// What is wrong, for a person.
    pub message: String,
    /// The 1-based line of the submitted text the problem is at (the key at fault, or
    /// the section that lacks a field), when the policy came as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The 1-based column of that line, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl From<&Problem> for PolicyProblem {
    fn from(p: &Problem) -> Self {
        PolicyProblem {
            point: p.point.as_deref().map(escape_controls),
            field: p.field.as_deref().map(escape_controls),
            kind: p.kind.as_str().to_owned(),
            message: escape_controls_but_lines(&p.message),
            line: None,
            column: None,
        }
    }
}

/// `s` with every control character written as `\u{..}` (as Rust escapes it), so
/// that a message quoting a point name never carries a raw NUL, escape sequence or
/// line break into a log, a terminal or the dashboard. Other text is unchanged.
pub fn escape_controls(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// [`escape_controls`] but for line breaks and tabs, which the parser's own messages
/// use (a syntax error quotes the line at fault).
fn escape_controls_but_lines(s: &str) -> String {
    s.split('\n')
        .map(|line| {
            line.split('\t')
                .map(escape_controls)
                .collect::<Vec<_>>()
                .join("\t")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A validated policy document.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The parsed file.
    pub file: PolicyFile,
    /// Its canonical JSON form: what is stored and served (defaults left out,
    /// durations as strings with a unit).
    pub json: Value,
}

impl Document {
    /// The empty document: no point has a policy (version 0).
    pub fn empty() -> Document {
        Document::from_file(PolicyFile::default())
    }

    /// Parses and validates policy text exactly as the runtime's loader does.
    ///
    /// # Errors
    ///
    /// Every problem the runtime finds, each with its point and field, and with the
    /// line (and column) of the text where it is.
    pub fn parse(text: &str, format: Format) -> Result<Document, Vec<PolicyProblem>> {
        Document::parse_unlocated(text, format).map_err(|mut problems| {
            locate::locate(&mut problems, text, format);
            problems
        })
    }

    fn parse_unlocated(text: &str, format: Format) -> Result<Document, Vec<PolicyProblem>> {
        match PolicyFile::parse_with_every_feature(text, format) {
            Ok(file) => Ok(Document::from_file(file)),
            Err(e) => Err(e.problems().iter().map(PolicyProblem::from).collect()),
        }
    }

    /// Validates a JSON document given as a tree (its problems have no line: there
    /// is no text to point into).
    ///
    /// # Errors
    ///
    /// Every problem the runtime finds.
    pub fn from_json(value: &Value) -> Result<Document, Vec<PolicyProblem>> {
        Document::parse_unlocated(&value.to_string(), Format::Json)
    }

    /// Reads a stored canonical document back.
    ///
    /// # Errors
    ///
    /// The problems, if the stored document no longer validates (a document written
    /// by a newer runtime with fields this one does not know).
    pub fn from_stored(value: &Value) -> Result<Document, Vec<PolicyProblem>> {
        Document::from_json(value)
    }

    fn from_file(file: PolicyFile) -> Document {
        let json = file
            .to_text(Format::Json)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            // A policy built by the runtime always serialises; keep an empty document
            // rather than panic if that ever changes.
            .unwrap_or_else(|| serde_json::json!({ "points": {} }));
        Document { file, json }
    }

    /// This document with the settings of `point` replaced (`Some`) or its policy
    /// removed (`None`); every other point and `strict` stay as they are.
    pub fn with_point(&self, point: &str, settings: Option<PointConfig>) -> Document {
        let mut file = self.file.clone();
        match settings {
            Some(config) => file.points.insert(point.to_owned(), config),
            None => file.points.remove(point),
        };
        Document::from_file(file)
    }

    /// Reads this document as a draft of the settings of one point: the settings it
    /// gives `point`, or `None` if it does not configure it (the edit removes the
    /// point's policy).
    ///
    /// # Errors
    ///
    /// A problem for `strict = true` (a setting of the whole app) and one for every
    /// other point the draft configures.
    pub fn point_draft(&self, point: &str) -> Result<Option<PointConfig>, Vec<PolicyProblem>> {
        let mut problems = Vec::new();
        if self.file.strict {
            problems.push(PolicyProblem {
                point: None,
                field: Some("strict".to_owned()),
                kind: "app_setting".to_owned(),
                message: "`strict` is a setting of the whole app: change it in the app's policy, \
                          not in the policy of one point"
                    .to_owned(),
                line: None,
                column: None,
            });
        }
        for name in self.file.points.keys().filter(|n| n.as_str() != point) {
            problems.push(PolicyProblem {
                point: Some(name.clone()),
                field: None,
                kind: "other_point".to_owned(),
                message: format!(
                    "this edit is for point `{point}` only: change `{name}` in its own policy \
                     or in the app's policy"
                ),
                line: None,
                column: None,
            });
        }
        if problems.is_empty() {
            Ok(self.file.points.get(point).cloned())
        } else {
            Err(problems)
        }
    }

    /// The document as TOML, for people.
    pub fn to_toml(&self) -> String {
        self.file.to_text(Format::Toml).unwrap_or_default()
    }

    /// The names of the points that have a policy.
    pub fn point_names(&self) -> BTreeSet<String> {
        self.file.points.keys().cloned().collect()
    }

    /// The document as SDS strategies (`SdsStrategy` objects of SDS's pull response),
    /// one per point, each also carrying this project's full point settings under
    /// `resiliencePolicy` so that our client loses nothing (SDS clients ignore it).
    pub fn sds_strategies(&self) -> Vec<Value> {
        let points = self.json.get("points").and_then(Value::as_object);
        self.file
            .points
            .iter()
            .map(|(name, config)| {
                let p = &config.policy;
                let ms = |d: std::time::Duration| d.as_millis().min(i64::MAX as u128) as i64;
                let mut s = Map::new();
                s.insert("point".into(), name.clone().into());
                s.insert("visitThreshold".into(), opt(p.max_visits()));
                s.insert("concurrentThreshold".into(), opt(p.max_concurrency()));
                s.insert("exceptionThreshold".into(), opt(p.max_exceptions()));
                let rate = p.exception_rate();
                s.insert(
                    "exceptionRateThreshold".into(),
                    opt(rate.map(|r| (r.rate * 100.0).round() as i64)),
                );
                s.insert("exceptionRateStart".into(), opt(rate.map(|r| r.min_visits)));
                let timeouts = p.timeouts();
                s.insert(
                    "timeoutThreshold".into(),
                    opt(timeouts.map(|t| ms(t.threshold))),
                );
                s.insert(
                    "timeoutCountThreshold".into(),
                    opt(timeouts.map(|t| t.max_count)),
                );
                let bucket = p.token_bucket();
                s.insert(
                    "tokenBucketGeneratedTokensInSecond".into(),
                    opt(bucket.map(|b| b.rate.floor() as i64)),
                );
                s.insert("tokenBucketSize".into(), opt(bucket.map(|b| b.capacity)));
                let delay = p.delay();
                s.insert("delayTime".into(), opt(delay.map(|d| ms(d.duration))));
                s.insert(
                    "retryInterval".into(),
                    opt(delay.and_then(|d| d.retry_interval).map(ms)),
                );
                s.insert("downgradeRate".into(), p.downgrade_percentage().into());
                s.insert("pressureTestDowngrade".into(), 0.into());
                s.insert(
                    "resiliencePolicy".into(),
                    points
                        .and_then(|m| m.get(name))
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Map::new())),
                );
                Value::Object(s)
            })
            .collect()
    }
}

/// Sets the line and column of every problem of a policy `text` that can be placed
/// (see [`Document::parse`], which does it for its own problems).
pub fn locate_problems(problems: &mut [PolicyProblem], text: &str, format: Format) {
    locate::locate(problems, text, format);
}

/// SDS writes -1 for "rule not set".
fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map_or_else(|| Value::from(-1), Into::into)
}

/// What changed from `old` to `new` (canonical documents): top-level settings, points
/// added or removed whole, and field by field for points in both.
pub fn diff(old: &Value, new: &Value) -> Vec<DiffEntry> {
    let mut out = Vec::new();
    // The only top-level setting besides `points`.
    let (a, b) = (old.get("strict").cloned(), new.get("strict").cloned());
    if a != b {
        out.push(DiffEntry {
            point: None,
            field: Some("strict".to_owned()),
            old: a,
            new: b,
        });
    }
    let empty = Map::new();
    let points = |v: &Value| v.get("points").and_then(Value::as_object).cloned();
    let (old_points, new_points) = (
        points(old).unwrap_or_else(|| empty.clone()),
        points(new).unwrap_or_else(|| empty.clone()),
    );
    let names: BTreeSet<&String> = old_points.keys().chain(new_points.keys()).collect();
    for name in names {
        match (old_points.get(name), new_points.get(name)) {
            (Some(a), Some(b)) => {
                let (fa, fb) = (flatten(a), flatten(b));
                let fields: BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
                for field in fields {
                    let (x, y) = (fa.get(field), fb.get(field));
                    if x != y {
                        out.push(DiffEntry {
                            point: Some(name.clone()),
                            field: Some(field.clone()),
                            old: x.cloned(),
                            new: y.cloned(),
                        });
                    }
                }
            }
            (a, b) => out.push(DiffEntry {
                point: Some(name.clone()),
                field: None,
                old: a.cloned(),
                new: b.cloned(),
            }),
        }
    }
    out
}

/// A point's settings as `field.path -> value`.
fn flatten(v: &Value) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    fn walk(prefix: &str, v: &Value, out: &mut std::collections::BTreeMap<String, Value>) {
        match v {
            // An empty table is a value of its own (`keys = {}`, an override `{}`).
            Value::Object(m) if m.is_empty() && !prefix.is_empty() => {
                out.insert(prefix.to_owned(), Value::Object(Map::new()));
            }
            Value::Object(m) => {
                for (k, v) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else if prefix == "keys.overrides" {
                        // A value, quoted as the runtime names it in problems.
                        let quoted = serde_json::to_string(k).unwrap_or_else(|_| k.clone());
                        format!("{prefix}.{quoted}")
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&path, v, out);
                }
            }
            other => {
                out.insert(prefix.to_owned(), other.clone());
            }
        }
    }
    walk("", v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form_drops_defaults_and_keeps_units() {
        let doc = Document::from_json(&json!({
            "points": {"a": {"max_visits": 5, "downgrade_percentage": 100,
                             "timeouts": {"threshold": "250ms", "max_count": 3}}}
        }))
        .unwrap();
        assert_eq!(
            doc.json,
            json!({"points": {"a": {"max_visits": 5,
                                    "timeouts": {"threshold": "250ms", "max_count": 3}}}})
        );
    }

    #[test]
    fn a_cluster_section_is_stored_in_canonical_form() {
        let doc = Document::from_json(&json!({
            "points": {"a": {"cluster": {"algorithm": "visits", "url": "redis://127.0.0.1:6379/",
                                         "key": "k", "period": "60s", "quota": 5, "batch": 10}}}
        }))
        .unwrap();
        // The default batch is left out and the period takes its largest exact unit.
        assert_eq!(
            doc.json["points"]["a"]["cluster"],
            json!({"algorithm": "visits", "url": "redis://127.0.0.1:6379/", "key": "k",
                   "period": "1m", "quota": 5})
        );
        let problems = Document::from_json(&json!({
            "points": {"a": {"cluster": {"algorithm": "visits", "url": "redis://h/", "key": "k",
                                         "period": "1s", "quota": 0}}}
        }))
        .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].field.as_deref(), Some("cluster.quota"));
    }

    #[test]
    fn problems_name_point_and_field() {
        let problems = Document::from_json(&json!({
            "points": {"a": {"max_visits": -1, "timeouts": {"threshold": "fast"}}}
        }))
        .unwrap_err();
        let fields: Vec<_> = problems
            .iter()
            .map(|p| (p.point.as_deref(), p.field.as_deref()))
            .collect();
        assert!(
            fields.contains(&(Some("a"), Some("max_visits"))),
            "{problems:?}"
        );
        assert!(
            fields.contains(&(Some("a"), Some("timeouts.threshold"))),
            "{problems:?}"
        );
    }

    #[test]
    fn diff_reports_fields_and_whole_points() {
        let old = json!({"points": {"a": {"max_visits": 5, "timeouts": {"threshold": "1s", "max_count": 2}},
                                    "gone": {"max_visits": 1}}});
        let new = json!({"strict": true,
                         "points": {"a": {"max_visits": 6, "timeouts": {"threshold": "1s", "max_count": 2}},
                                    "added": {"max_concurrency": 3}}});
        let d = diff(&old, &new);
        let keys: Vec<_> = d
            .iter()
            .map(|e| (e.point.as_deref(), e.field.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                (None, Some("strict")),
                (Some("a"), Some("max_visits")),
                (Some("added"), None),
                (Some("gone"), None),
            ]
        );
        assert_eq!(d[1].old, Some(json!(5)));
        assert_eq!(d[1].new, Some(json!(6)));
        assert_eq!(d[3].new, None);
        assert!(diff(&new, &new).is_empty());
    }

    /// The retry section is stored in the runtime's canonical form (defaults left
    /// out, every budget field written), diffed field by field, validated with its
    /// field names, and carried whole in the SDS view's `resiliencePolicy` (SDS's
    /// strategy has no field of its own for it: its `retryInterval` is the delay's).
    #[test]
    fn the_retry_section_is_stored_diffed_and_carried_to_sds_clients() {
        let doc = Document::from_json(&json!({
            "points": {"a": {"retry": {"attempts": 3, "base": "50ms", "multiplier": 1.5,
                                       "budget": {"percent": 10.0}}}}
        }))
        .unwrap();
        let retry = json!({"attempts": 3, "multiplier": 1.5,
                           "budget": {"percent": 10.0, "min_per_second": 10, "window": "10s"}});
        assert_eq!(doc.json["points"]["a"]["retry"], retry);
        let s = &doc.sds_strategies()[0];
        assert_eq!(s["resiliencePolicy"]["retry"], retry);
        assert_eq!(s["retryInterval"], -1);
        let newer = Document::from_json(&json!({
            "points": {"a": {"retry": {"attempts": 5, "multiplier": 1.5,
                                       "budget": {"percent": 10.0}}}}
        }))
        .unwrap();
        let d = diff(&doc.json, &newer.json);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].field.as_deref(), Some("retry.attempts"));
        assert_eq!(
            (d[0].old.clone(), d[0].new.clone()),
            (Some(json!(3)), Some(json!(5)))
        );
        let problems = Document::from_json(&json!({
            "points": {"a": {"retry": {"attempts": 0, "budget": {"percent": 2000.0}}}}
        }))
        .unwrap_err();
        let fields: Vec<_> = problems.iter().map(|p| p.field.as_deref()).collect();
        assert!(fields.contains(&Some("retry.attempts")), "{problems:?}");
        assert!(
            fields.contains(&Some("retry.budget.percent")),
            "{problems:?}"
        );
    }

    /// The concurrency queue is stored as the runtime writes it, diffed field by field,
    /// validated with its field names (`queue` itself without `max_concurrency`), and
    /// carried in the SDS view's `resiliencePolicy`.
    #[test]
    fn the_queue_is_stored_diffed_and_validated_with_its_field_names() {
        let doc = Document::from_json(&json!({
            "points": {"a": {"max_concurrency": 2,
                             "queue": {"max_waiting": 4, "max_wait": "250ms"}}}
        }))
        .unwrap();
        let queue = json!({"max_waiting": 4, "max_wait": "250ms"});
        assert_eq!(doc.json["points"]["a"]["queue"], queue);
        let s = &doc.sds_strategies()[0];
        assert_eq!(s["resiliencePolicy"]["queue"], queue, "{s}");
        let newer = Document::from_json(&json!({
            "points": {"a": {"max_concurrency": 2,
                             "queue": {"max_waiting": 8, "max_wait": "250ms"}}}
        }))
        .unwrap();
        let d = diff(&doc.json, &newer.json);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].field.as_deref(), Some("queue.max_waiting"));
        let fields = |point: Value| -> Vec<Option<String>> {
            Document::from_json(&json!({"points": {"a": point}}))
                .unwrap_err()
                .iter()
                .map(|p| p.field.clone())
                .collect()
        };
        assert_eq!(
            fields(json!({"queue": {"max_waiting": 4, "max_wait": "1s"}})),
            [Some("queue".to_owned())]
        );
        assert_eq!(
            fields(json!({"max_concurrency": 1, "queue": {"max_waiting": 0, "max_wait": "1s"}})),
            [Some("queue.max_waiting".to_owned())]
        );
        assert_eq!(
            fields(json!({"max_concurrency": 1, "queue": {"max_waiting": 1, "max_wait": "2h"}})),
            [Some("queue.max_wait".to_owned())]
        );
        assert_eq!(
            fields(json!({"max_concurrency": 1, "queue": {"max_waiting": 1}})),
            [Some("queue.max_wait".to_owned())]
        );
    }

    /// The token bucket's wait, the warm-up and the gradient's critical reserve are
    /// stored as the runtime writes them, diffed field by field and validated with
    /// their field names (`warm_up` itself without a token bucket).
    #[test]
    fn token_waits_warm_ups_and_critical_reserves_have_their_field_names() {
        let point = json!({"token_bucket": {"rate": 2.5, "capacity": 1, "max_wait": "200ms"},
                           "warm_up": {"period": "10s", "cold_factor": 4.5},
                           "adaptive": {"algorithm": "gradient", "critical_reserve": 0.25}});
        let doc = Document::from_json(&json!({"points": {"a": point}})).unwrap();
        assert_eq!(doc.json["points"]["a"], point);
        let mut newer = point.clone();
        newer["warm_up"]["cold_factor"] = json!(6);
        newer["adaptive"]["critical_reserve"] = json!(0.5);
        let newer = Document::from_json(&json!({"points": {"a": newer}})).unwrap();
        let d = diff(&doc.json, &newer.json);
        let mut changed: Vec<_> = d.iter().map(|e| e.field.clone().unwrap()).collect();
        changed.sort();
        assert_eq!(
            changed,
            ["adaptive.critical_reserve", "warm_up.cold_factor"]
        );
        let fields = |point: Value| -> Vec<Option<String>> {
            Document::from_json(&json!({"points": {"a": point}}))
                .unwrap_err()
                .iter()
                .map(|p| p.field.clone())
                .collect()
        };
        let bucket = json!({"rate": 5, "capacity": 1});
        for (point, field) in [
            (json!({"warm_up": {"period": "10s"}}), "warm_up"),
            (
                json!({"token_bucket": {"rate": 5, "capacity": 1, "max_wait": "2h"}}),
                "token_bucket.max_wait",
            ),
            (
                json!({"token_bucket": bucket, "warm_up": {"period": "500ms"}}),
                "warm_up.period",
            ),
            (
                json!({"token_bucket": bucket, "warm_up": {"period": "1s", "cold_factor": 1}}),
                "warm_up.cold_factor",
            ),
            (
                json!({"adaptive": {"algorithm": "gradient", "critical_reserve": 1}}),
                "adaptive.critical_reserve",
            ),
        ] {
            assert_eq!(fields(point.clone()), [Some(field.to_owned())], "{point}");
        }
    }

    #[test]
    fn sds_view_uses_minus_one_for_unset_rules() {
        let doc = Document::from_json(&json!({
            "points": {"a": {"max_visits": 5, "exception_rate": {"rate": 0.25, "min_visits": 10},
                             "delay": {"duration": "10s", "retry_interval": "1s"}}}
        }))
        .unwrap();
        let s = &doc.sds_strategies()[0];
        assert_eq!(s["point"], "a");
        assert_eq!(s["visitThreshold"], 5);
        assert_eq!(s["concurrentThreshold"], -1);
        assert_eq!(s["exceptionRateThreshold"], 25);
        assert_eq!(s["exceptionRateStart"], 10);
        assert_eq!(s["delayTime"], 10_000);
        assert_eq!(s["retryInterval"], 1_000);
        assert_eq!(s["downgradeRate"], 100);
        assert_eq!(s["resiliencePolicy"]["max_visits"], 5);
    }
}
