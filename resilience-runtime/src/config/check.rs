//! The checker: turns a [`Node`] tree into a [`PolicyFile`], collecting every problem
//! (unknown keys, wrong types, missing fields, duplicates, out-of-range values) instead
//! of stopping at the first.

use super::error::{shown, Problem, ProblemKind};
use super::node::Node;
use super::report::{unknown_key_message, Reporter};
use super::{keys, retry, sections, PointConfig, PolicyFile};
use crate::error::check_point_name;
use crate::policy::{Policy, PolicyBuilder, QueueOrder, WindowConfig};
use crate::sources::{Section, Sections};
use std::collections::HashSet;

/// Top-level keys.
const TOP_LEVEL: [&str; 2] = ["strict", "points"];

/// The keys of a point's table, in the order the reference documents them.
pub(crate) const POINT_FIELDS: [&str; 18] = [
    "shadow",
    "max_visits",
    "max_concurrency",
    "queue",
    "max_exceptions",
    "downgrade_percentage",
    "exception_rate",
    "timeouts",
    "call_timeout",
    "token_bucket",
    "warm_up",
    "delay",
    "window",
    "adaptive",
    "cluster",
    "keys",
    "breaker",
    "retry",
];

/// What the checker made of a document, even a broken one.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Every valid point, built.
    pub(crate) file: PolicyFile,
    /// The names of every point in the document, valid or not, first occurrence only,
    /// in file order (for the strict check).
    pub(crate) names: Vec<String>,
    pub(crate) problems: Vec<Problem>,
}

/// Checks a whole document.
pub(crate) fn check(root: &Node, every_feature: bool) -> Checked {
    let mut out = Checked::default();
    let Node::Map(entries) = root else {
        out.problems.push(Problem::new(
            None,
            None,
            ProblemKind::WrongType,
            format!("expected a table at the top level, got {}", root.describe()),
        ));
        return out;
    };
    let mut seen = HashSet::new();
    for (key, value) in entries {
        if !seen.insert(key.as_str()) {
            out.problems.push(Problem::new(
                None,
                Some(key),
                ProblemKind::DuplicateField,
                format!("`{key}` is given twice"),
            ));
            continue;
        }
        match key.as_str() {
            "strict" => match value {
                Node::Bool(b) => out.file.strict = *b,
                other => out.problems.push(Problem::new(
                    None,
                    Some("strict"),
                    ProblemKind::WrongType,
                    format!("expected a boolean, got {}", other.describe()),
                )),
            },
            "points" => check_points(value, &mut out, every_feature),
            _ => out.problems.push(Problem::new(
                None,
                Some(key),
                ProblemKind::UnknownField,
                unknown_key_message(key, &TOP_LEVEL),
            )),
        }
    }
    out
}

fn check_points(value: &Node, out: &mut Checked, every_feature: bool) {
    let Node::Map(points) = value else {
        out.problems.push(Problem::new(
            None,
            Some("points"),
            ProblemKind::WrongType,
            format!(
                "expected a table of points (`[points.\"name\"]`), got {}",
                value.describe()
            ),
        ));
        return;
    };
    let mut seen = HashSet::new();
    for (name, fields) in points {
        if !seen.insert(name.as_str()) {
            out.problems.push(Problem::new(
                Some(name),
                None,
                ProblemKind::DuplicatePoint,
                format!("point `{}` is configured more than once", shown(name)),
            ));
            continue;
        }
        out.names.push(name.clone());
        if let Err(e) = check_point_name(name) {
            out.problems.push(Problem::new(
                Some(name),
                None,
                ProblemKind::InvalidPointName,
                e.to_string(),
            ));
            continue;
        }
        if let Some(config) = check_point(name, fields, &mut out.problems, every_feature) {
            out.file.points.insert(name.clone(), config);
        }
    }
}

/// Checks one point's table and builds its policy; `None` if anything was wrong.
fn check_point(
    point: &str,
    value: &Node,
    problems: &mut Vec<Problem>,
    every_feature: bool,
) -> Option<PointConfig> {
    let mut r = Reporter::new(point, problems, every_feature);
    let Node::Map(entries) = value else {
        r.push_point(value);
        return None;
    };
    let mut b = Policy::builder();
    let mut breaker = None;
    let mut retry = None;
    let mut seen = HashSet::new();
    let mut set = Sections::NONE;
    for (key, _) in entries {
        let section = match key.as_str() {
            "shadow" => Section::Shadow,
            "window" => Section::Window,
            "adaptive" => Section::Adaptive,
            "cluster" => Section::Cluster,
            "keys" => Section::Keys,
            "breaker" | "retry" => continue,
            _ => Section::Rules,
        };
        set = set.with(section);
    }
    if entries.is_empty() {
        // An empty table: "observe", no rule.
        set = set.with(Section::Rules);
    }
    for (key, v) in entries {
        if !seen.insert(key.as_str()) {
            r.push(
                key,
                ProblemKind::DuplicateField,
                format!("`{key}` is given twice"),
            );
            continue;
        }
        b = match key.as_str() {
            "shadow" => apply(b, r.bool(key, v), PolicyBuilder::shadow),
            "max_visits" => apply(b, r.u64(key, v), PolicyBuilder::max_visits),
            "max_concurrency" => apply(b, r.u64(key, v), PolicyBuilder::max_concurrency),
            "max_exceptions" => apply(b, r.u64(key, v), PolicyBuilder::max_exceptions),
            "downgrade_percentage" => {
                // Up to 255 goes to the policy, which owns the 0..=100 rule and its
                // message; beyond that the value does not even fit the field.
                match v {
                    Node::Int(i) => match u8::try_from(*i) {
                        Ok(p) => b.downgrade_percentage(p),
                        Err(_) => {
                            r.push(
                                key,
                                ProblemKind::OutOfRange,
                                format!("must be within 0..=100, got {i}"),
                            );
                            b
                        }
                    },
                    other => {
                        r.wrong_type(key, "an integer percentage (0..=100)", other);
                        b
                    }
                }
            }
            "queue" => check_queue(&mut r, v, b),
            "exception_rate" => check_exception_rate(&mut r, v, b),
            "timeouts" => check_timeouts(&mut r, v, b),
            "call_timeout" => apply(b, r.duration(key, v), PolicyBuilder::call_timeout),
            "token_bucket" => check_token_bucket(&mut r, v, b),
            "warm_up" => check_warm_up(&mut r, v, b),
            "delay" => check_delay(&mut r, v, b),
            "window" => check_window(&mut r, v, b),
            "adaptive" | "cluster" | "keys" if is_off(v) => b,
            "adaptive" => apply(
                b,
                sections::check_adaptive(&mut r, v),
                PolicyBuilder::adaptive,
            ),
            "cluster" if r.reads_redis_sections() => apply(
                b,
                sections::check_cluster(&mut r, v),
                PolicyBuilder::cluster_section,
            ),
            "cluster" => {
                r.push(
                    key,
                    ProblemKind::UnknownField,
                    "`cluster` needs the `redis` feature of resilience-runtime".to_owned(),
                );
                b
            }
            "keys" => apply(b, keys::check_keys(&mut r, v), PolicyBuilder::keys),
            "breaker" => {
                breaker = sections::check_breaker(&mut r, v);
                b
            }
            "retry" => {
                retry = retry::check_retry(&mut r, v);
                b
            }
            _ => {
                let message = unknown_key_message(key, &POINT_FIELDS);
                r.push(key, ProblemKind::UnknownField, message);
                b
            }
        };
    }
    // Range checks of every field that was well typed, even if others were not, so one
    // load reports everything.
    match b.build() {
        Ok(policy) if !r.failed() => {
            let mut config = PointConfig::builder().policy(policy).sections(set).build();
            config.breaker = breaker;
            config.retry = retry;
            Some(config)
        }
        Ok(_) => None,
        Err(e) => {
            for fe in e.errors() {
                r.push(fe.field, ProblemKind::OutOfRange, fe.message.clone());
            }
            None
        }
    }
}

/// `"off"`: the section is set to "none" (over lower layers).
fn is_off(v: &Node) -> bool {
    matches!(v, Node::Str(s) if s == "off")
}

fn apply<T>(
    b: PolicyBuilder,
    value: Option<T>,
    set: fn(PolicyBuilder, T) -> PolicyBuilder,
) -> PolicyBuilder {
    match value {
        Some(v) => set(b, v),
        None => b,
    }
}

fn check_exception_rate(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([rate, min_visits]) = r.section("exception_rate", v, ["rate", "min_visits"]) else {
        return b;
    };
    let rate = r
        .required("exception_rate.rate", rate)
        .and_then(|v| r.number("exception_rate.rate", v));
    let min_visits = match min_visits {
        Some(v) => r.u64("exception_rate.min_visits", v),
        None => Some(0),
    };
    match (rate, min_visits) {
        (Some(rate), Some(min)) => b.exception_rate(rate, min),
        _ => b,
    }
}

fn check_queue(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([max_waiting, max_wait, order]) =
        r.section("queue", v, ["max_waiting", "max_wait", "order"])
    else {
        return b;
    };
    let max_waiting = r
        .required("queue.max_waiting", max_waiting)
        .and_then(|v| r.u64("queue.max_waiting", v));
    let max_wait = r
        .required("queue.max_wait", max_wait)
        .and_then(|v| r.duration("queue.max_wait", v));
    let order = match order {
        None => Some(QueueOrder::OldestFirst),
        Some(v) => r.string("queue.order", v).and_then(|name| {
            let order = QueueOrder::from_name(&name);
            if order.is_none() {
                r.push(
                    "queue.order",
                    ProblemKind::WrongType,
                    format!("must be \"oldest_first\" or \"newest_first\", got {name:?}"),
                );
            }
            order
        }),
    };
    match (max_waiting, max_wait, order) {
        (Some(n), Some(d), Some(order)) => b.queue(n, d).queue_order(order),
        _ => b,
    }
}

fn check_timeouts(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([threshold, max_count]) = r.section("timeouts", v, ["threshold", "max_count"]) else {
        return b;
    };
    let threshold = r
        .required("timeouts.threshold", threshold)
        .and_then(|v| r.duration("timeouts.threshold", v));
    let max_count = r
        .required("timeouts.max_count", max_count)
        .and_then(|v| r.u64("timeouts.max_count", v));
    match (threshold, max_count) {
        (Some(t), Some(n)) => b.timeouts(t, n),
        _ => b,
    }
}

fn check_token_bucket(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([rate, capacity, max_wait]) =
        r.section("token_bucket", v, ["rate", "capacity", "max_wait"])
    else {
        return b;
    };
    let rate = r
        .required("token_bucket.rate", rate)
        .and_then(|v| r.number("token_bucket.rate", v));
    let capacity = r
        .required("token_bucket.capacity", capacity)
        .and_then(|v| r.u64("token_bucket.capacity", v));
    let b = match max_wait.and_then(|v| r.duration("token_bucket.max_wait", v)) {
        Some(d) => b.token_wait(d),
        None => b,
    };
    match (rate, capacity) {
        (Some(rate), Some(capacity)) => b.token_bucket(rate, capacity),
        _ => b,
    }
}

fn check_warm_up(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([period, cold_factor]) = r.section("warm_up", v, ["period", "cold_factor"]) else {
        return b;
    };
    let period = r
        .required("warm_up.period", period)
        .and_then(|v| r.duration("warm_up.period", v));
    let cold_factor = match cold_factor {
        Some(v) => r.number("warm_up.cold_factor", v),
        None => Some(3.0),
    };
    match (period, cold_factor) {
        (Some(p), Some(f)) => b.warm_up(p, f),
        _ => b,
    }
}

fn check_delay(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([duration, retry]) = r.section("delay", v, ["duration", "retry_interval"]) else {
        return b;
    };
    let duration = r
        .required("delay.duration", duration)
        .and_then(|v| r.duration("delay.duration", v));
    let retry = match retry {
        Some(v) => r.duration("delay.retry_interval", v).map(Some),
        None => Some(None),
    };
    match (duration, retry) {
        (Some(d), Some(retry)) => b.delay(d, retry),
        _ => b,
    }
}

fn check_window(r: &mut Reporter<'_>, v: &Node, b: PolicyBuilder) -> PolicyBuilder {
    let Some([buckets, width]) = r.section("window", v, ["buckets", "bucket_width"]) else {
        return b;
    };
    let default = WindowConfig::default();
    let buckets = match buckets {
        Some(v) => r.u64("window.buckets", v),
        None => Some(default.buckets),
    };
    let width = match width {
        Some(v) => r.duration("window.bucket_width", v),
        None => Some(default.bucket_width),
    };
    match (buckets, width) {
        (Some(n), Some(w)) => b.window(n, w),
        _ => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::report::edit_distance;

    #[test]
    fn suggestions_are_close_names_only() {
        assert_eq!(edit_distance("max_visit", "max_visits"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert!(
            unknown_key_message("max_visit", &POINT_FIELDS).contains("did you mean `max_visits`")
        );
        assert!(!unknown_key_message("tokens_total", &POINT_FIELDS).contains("did you mean"));
        assert!(unknown_key_message("call_timout", &POINT_FIELDS)
            .contains("did you mean `call_timeout`"));
    }
}
