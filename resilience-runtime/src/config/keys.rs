//! The `keys` section of a point: `[points."x".keys]` and its optional
//! `[points."x".keys.overrides]` table (see [`KeyPolicy`]).
//!
//! Every field may be left out: no limit, a `period` of one second and
//! [`DEFAULT_MAX_KEYS`] tracked keys. An override is a number (the value's `limit`)
//! or a table of any of `limit`, `burst` and `max_concurrency`. The problems of an
//! override name its value, quoted as a JSON (and TOML) string:
//! `keys.overrides."vip-42".limit`. The ranges are [`KeyPolicy`]'s own check's.

use super::duration::format_duration;
use super::error::ProblemKind;
use super::node::Node;
use super::report::Reporter;
use crate::error::FieldError;
use crate::keys::{KeyOverride, KeyPolicy, KeyRule, DEFAULT_MAX_KEYS, MAX_KEY_OVERRIDES};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The fields of `[points."x".keys]`.
pub(crate) const KEYS_FIELDS: [&str; 8] = [
    "limit",
    "period",
    "burst",
    "max_concurrency",
    "max_wait",
    "max_keys",
    "overrides",
    "cluster",
];

/// The fields of `keys.cluster` (enforced with the `redis` feature).
pub(crate) const CLUSTER_FIELDS: [&str; 4] = ["url", "prefix", "batch", "cold"];

/// The fields of one override's table.
pub(crate) const OVERRIDE_FIELDS: [&str; 3] = ["limit", "burst", "max_concurrency"];

/// The default `period`.
const DEFAULT_PERIOD: Duration = Duration::from_secs(1);

/// The field of one override: `keys.overrides."vip-42"` (the value as a JSON string,
/// which is also a TOML key).
pub(crate) fn override_field(value: &str) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_else(|_| format!("{value:?}"));
    format!("keys.overrides.{quoted}")
}

/// Checks `[points."x".keys]`; `None` once a problem is reported.
pub(super) fn check_keys(r: &mut Reporter<'_>, value: &Node) -> Option<KeyPolicy> {
    let before = r.count();
    let [limit, period, burst, max_concurrency, max_wait, max_keys, overrides, cluster] =
        r.section("keys", value, KEYS_FIELDS)?;
    let mut policy = KeyPolicy {
        max_keys: DEFAULT_MAX_KEYS,
        period: DEFAULT_PERIOD,
        rule: KeyRule {
            limit: None,
            burst: None,
            max_concurrency: None,
        },
        overrides: Vec::new(),
        max_wait: None,
        cluster: None,
    };
    policy.max_wait = max_wait.and_then(|v| r.duration("keys.max_wait", v));
    if let Some(v) = cluster {
        if r.reads_redis_sections() {
            policy.cluster = check_cluster(r, v);
        } else {
            r.push(
                "keys.cluster",
                ProblemKind::UnknownField,
                "`keys.cluster` needs the `redis` feature of resilience-runtime".to_owned(),
            );
        }
    }
    policy.rule.limit = limit.and_then(|v| r.u64("keys.limit", v));
    if let Some(d) = period.and_then(|v| r.duration("keys.period", v)) {
        policy.period = d;
    }
    policy.rule.burst = burst.and_then(|v| r.u64("keys.burst", v));
    policy.rule.max_concurrency = max_concurrency.and_then(|v| r.u64("keys.max_concurrency", v));
    if let Some(n) = max_keys.and_then(|v| r.u64("keys.max_keys", v)) {
        policy.max_keys = n;
    }
    let overrides = match overrides {
        Some(v) => check_overrides(r, v),
        None => BTreeMap::new(),
    };
    // Range checks of every field that was well typed, so one load reports them all:
    // the section's own rule first, then each override's fields, by value.
    let mut errors = Vec::new();
    policy.check(&mut errors);
    report(r, errors);
    for (value, o) in &overrides {
        let one = KeyPolicy {
            overrides: vec![(value.clone(), *o)],
            ..policy.clone()
        };
        let mut errors = Vec::new();
        one.check(&mut errors);
        for e in errors {
            let field = override_field(value);
            let message = e
                .message
                .strip_prefix(&format!("override {value:?}: "))
                .unwrap_or(&e.message)
                .to_owned();
            match e.field.strip_prefix("keys.overrides.") {
                // A fault of a field the override inherits is the section's own,
                // reported above.
                Some("limit") if o.limit.is_none() => {}
                Some("burst") if o.burst.is_none() => {}
                Some("max_concurrency") if o.max_concurrency.is_none() => {}
                Some(rest) => r.push(&format!("{field}.{rest}"), ProblemKind::OutOfRange, message),
                None if e.field == "keys.overrides" => {
                    r.push(&field, ProblemKind::OutOfRange, message)
                }
                // The section's own fields, reported above.
                None => {}
            }
        }
    }
    if overrides.len() as u64 > MAX_KEY_OVERRIDES {
        r.push(
            "keys.overrides",
            ProblemKind::OutOfRange,
            format!(
                "at most {MAX_KEY_OVERRIDES} values may be overridden, got {}",
                overrides.len()
            ),
        );
    }
    policy.overrides = overrides.into_iter().collect();
    if r.count() == before {
        // Whatever the checks above missed, the section's whole check does not.
        let mut errors = Vec::new();
        policy.check(&mut errors);
        report(r, errors);
    }
    (r.count() == before).then_some(policy)
}

/// `keys.cluster = { url, prefix, batch, cold }` (`url` and `prefix` required); the
/// ranges are `KeyPolicy`'s own check's.
fn check_cluster(r: &mut Reporter<'_>, value: &Node) -> Option<crate::keys::KeyCluster> {
    let [url, prefix, batch, cold] = r.section("keys.cluster", value, CLUSTER_FIELDS)?;
    let url = r
        .required("keys.cluster.url", url)
        .and_then(|v| r.string("keys.cluster.url", v));
    let prefix = r
        .required("keys.cluster.prefix", prefix)
        .and_then(|v| r.string("keys.cluster.prefix", v));
    let mut c = crate::keys::KeyCluster::new(url?, prefix?);
    if let Some(b) = batch.and_then(|v| r.u64("keys.cluster.batch", v)) {
        c.batch = b;
    }
    if let Some(d) = cold.and_then(|v| r.duration("keys.cluster.cold", v)) {
        c.cold = d;
    }
    Some(c)
}

fn report(r: &mut Reporter<'_>, errors: Vec<FieldError>) {
    for e in errors {
        r.push(e.field, ProblemKind::OutOfRange, e.message);
    }
}

/// `[points."x".keys.overrides]`: value -> a limit, or a table of a rule's fields.
fn check_overrides(r: &mut Reporter<'_>, value: &Node) -> BTreeMap<String, KeyOverride> {
    let mut out = BTreeMap::new();
    let Node::Map(entries) = value else {
        r.wrong_type(
            "keys.overrides",
            "a table of value -> limit or { limit, burst, max_concurrency }",
            value,
        );
        return out;
    };
    let mut seen = HashSet::new();
    for (key, v) in entries {
        let field = override_field(key);
        if !seen.insert(key.as_str()) {
            r.push(
                &field,
                ProblemKind::DuplicateField,
                format!("`{field}` is given twice"),
            );
            continue;
        }
        let o = match v {
            Node::Map(_) => {
                let Some([limit, burst, conc]) = r.section(&field, v, OVERRIDE_FIELDS) else {
                    continue;
                };
                KeyOverride {
                    limit: limit.and_then(|v| r.u64(&format!("{field}.limit"), v)),
                    burst: burst.and_then(|v| r.u64(&format!("{field}.burst"), v)),
                    max_concurrency: conc
                        .and_then(|v| r.u64(&format!("{field}.max_concurrency"), v)),
                }
            }
            Node::Int(_) => match r.u64(&field, v) {
                Some(limit) => KeyOverride::of_limit(limit),
                None => continue,
            },
            other => {
                r.wrong_type(
                    &field,
                    "a limit (a non-negative integer) or a table of `limit`, `burst`, \
                     `max_concurrency`",
                    other,
                );
                continue;
            }
        };
        out.insert(key.clone(), o);
    }
    out
}

/// `[points."x".keys]` as written: fields at their default left out, an override of
/// the limit alone as a number, any other as a table.
#[derive(Serialize)]
pub(super) struct KeysOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrency: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_wait: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_keys: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    overrides: BTreeMap<String, OverrideOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterOut>,
}

/// `keys.cluster` as written: `batch` and `cold` left out at their defaults.
#[derive(Serialize)]
struct ClusterOut {
    url: String,
    prefix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cold: Option<String>,
}

/// One override as written.
#[derive(Serialize)]
#[serde(untagged)]
enum OverrideOut {
    Limit(u64),
    Rule {
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        burst: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_concurrency: Option<u64>,
    },
}

impl KeysOut {
    pub(super) fn of(p: &KeyPolicy) -> KeysOut {
        let rule = p.rule();
        KeysOut {
            limit: rule.limit,
            period: (p.period() != DEFAULT_PERIOD).then(|| format_duration(p.period())),
            burst: rule.burst,
            max_concurrency: rule.max_concurrency,
            max_wait: p.max_wait().map(format_duration),
            max_keys: (p.max_keys() != DEFAULT_MAX_KEYS).then_some(p.max_keys()),
            overrides: p
                .overrides()
                .iter()
                .map(|(value, o)| {
                    let out = match *o {
                        KeyOverride {
                            limit: Some(limit),
                            burst: None,
                            max_concurrency: None,
                        } => OverrideOut::Limit(limit),
                        KeyOverride {
                            limit,
                            burst,
                            max_concurrency,
                        } => OverrideOut::Rule {
                            limit,
                            burst,
                            max_concurrency,
                        },
                    };
                    (value.clone(), out)
                })
                .collect(),
            cluster: p.cluster().map(|c| ClusterOut {
                url: c.url.clone(),
                prefix: c.prefix.clone(),
                batch: (c.batch != crate::policy::DEFAULT_BATCH).then_some(c.batch),
                cold: (c.cold != crate::keys::DEFAULT_KEY_COLD).then(|| format_duration(c.cold)),
            }),
        }
    }
}
