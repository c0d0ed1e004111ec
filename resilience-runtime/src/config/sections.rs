//! The sections that choose an algorithm and tune it: `breaker` and `adaptive`.
//!
//! Both are a table with a required `algorithm` and that algorithm's fields; a field
//! left out takes the value of the algorithm's `Default` configuration. The
//! configurations' own `validate` names only the first bad field, so every bad field
//! is reported, put back to its default and the check repeated: one load lists them
//! all.

use super::error::ProblemKind;
use super::node::Node;
use super::report::{unknown_name_message, Reporter};
use crate::adaptive::{AdaptiveConfig, GradientConfig};
use crate::breaker::{ClassicConfig, Quorum, QuorumAction, SreConfig};
use crate::policy::{AdaptiveLimit, BreakerPolicy};
use std::time::Duration;

/// What a section configures, for messages.
fn noun(section: &str) -> &str {
    match section {
        "adaptive" => "adaptive limit",
        other => other,
    }
}

/// One algorithm a section can choose: its name and the fields it takes.
struct Algorithm {
    name: &'static str,
    fields: &'static [&'static str],
}

/// The fields of `algorithm = "sre"`, in the order the reference documents them.
pub(crate) const SRE_FIELDS: &[&str] = &[
    "k",
    "protection",
    "window",
    "buckets",
    "force_pass_interval",
    "slow_call",
    "cancellations_are_failures",
];

/// The fields of `algorithm = "classic"`.
pub(crate) const CLASSIC_FIELDS: &[&str] = &[
    "failure_rate",
    "slow_call_rate",
    "slow_call_duration",
    "minimum_calls",
    "consecutive_failures",
    "window",
    "buckets",
    "half_open_probes",
    "open_wait",
    "cancellations_are_failures",
    "quorum",
];

/// The fields of `[points."x".breaker.open_wait]`.
const OPEN_WAIT_FIELDS: [&str; 4] = ["base", "multiplier", "max", "jitter"];

/// The fields of `[points."x".breaker.quorum]`.
const QUORUM_FIELDS: [&str; 2] = ["open_at", "action"];

/// The fields of `algorithm = "gradient"`.
pub(crate) const GRADIENT_FIELDS: &[&str] = &[
    "initial_limit",
    "min_limit",
    "max_limit",
    "smoothing",
    "rtt_tolerance",
    "queue_size",
    "long_window",
    "sample_window",
    "min_samples",
    "critical_reserve",
];

/// The fields of `algorithm = "shedder"`.
pub(crate) const SHEDDER_FIELDS: &[&str] = &[
    "window",
    "buckets",
    "cpu_threshold",
    "cool_off",
    "default_min_rt",
    "flying_beta",
    "min_overload_factor",
];

const BREAKERS: [Algorithm; 3] = [
    Algorithm {
        name: "sre",
        fields: SRE_FIELDS,
    },
    Algorithm {
        name: "classic",
        fields: CLASSIC_FIELDS,
    },
    Algorithm {
        name: "disabled",
        fields: &[],
    },
];

const ADAPTIVES: [Algorithm; 2] = [
    Algorithm {
        name: "gradient",
        fields: GRADIENT_FIELDS,
    },
    Algorithm {
        name: "shedder",
        fields: SHEDDER_FIELDS,
    },
];

/// The fields given in a section (`algorithm` excepted), each known and given once.
struct Fields<'n> {
    section: &'static str,
    entries: Vec<(&'n str, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, name: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }

    fn path(&self, name: &str) -> String {
        format!("{}.{name}", self.section)
    }

    /// Parses field `name`, if given, into `slot`; a bad value is reported.
    fn set<'r, T>(
        &self,
        r: &mut Reporter<'r>,
        name: &str,
        slot: &mut T,
        parse: fn(&mut Reporter<'r>, &str, &Node) -> Option<T>,
    ) {
        if let Some(v) = self.get(name) {
            if let Some(value) = parse(r, &self.path(name), v) {
                *slot = value;
            }
        }
    }

    /// Like [`set`](Self::set), for a field whose absence means `None`.
    fn set_some<'r, T>(
        &self,
        r: &mut Reporter<'r>,
        name: &str,
        slot: &mut Option<T>,
        parse: fn(&mut Reporter<'r>, &str, &Node) -> Option<T>,
    ) {
        if let Some(v) = self.get(name) {
            if let Some(value) = parse(r, &self.path(name), v) {
                *slot = Some(value);
            }
        }
    }
}

/// Checks a section's table: unknown and duplicate keys, the required `algorithm`
/// (one of `algorithms`), and fields that belong to another algorithm. Returns the
/// chosen algorithm's name and its fields, or `None` once reported.
fn choose<'n>(
    r: &mut Reporter<'_>,
    section: &'static str,
    value: &'n Node,
    algorithms: &[Algorithm],
) -> Option<(&'static str, Fields<'n>)> {
    let names: Vec<&str> = algorithms.iter().map(|a| a.name).collect();
    let quoted = names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let Node::Map(entries) = value else {
        let expected = format!("a table with `algorithm` ({quoted}) and its settings");
        r.wrong_type(section, &expected, value);
        return None;
    };
    let mut known = vec!["algorithm"];
    for field in algorithms.iter().flat_map(|a| a.fields) {
        if !known.contains(field) {
            known.push(field);
        }
    }
    let mut given: Vec<&str> = Vec::new();
    let mut fields = Vec::new();
    let mut algorithm = None;
    let mut failed = false;
    for (key, v) in entries {
        let path = format!("{section}.{key}");
        if !known.contains(&key.as_str()) {
            r.push(
                &path,
                ProblemKind::UnknownField,
                unknown_name_message("field", key, &known),
            );
            failed = true;
        } else if given.contains(&key.as_str()) {
            r.push(
                &path,
                ProblemKind::DuplicateField,
                format!("`{path}` is given twice"),
            );
            failed = true;
        } else {
            given.push(key);
            if key == "algorithm" {
                algorithm = Some(v);
            } else {
                fields.push((key.as_str(), v));
            }
        }
    }
    let path = format!("{section}.algorithm");
    let node = r.required(&path, algorithm)?;
    let Node::Str(name) = node else {
        r.wrong_type(&path, &format!("one of {quoted}"), node);
        return None;
    };
    let Some(chosen) = algorithms.iter().find(|a| a.name == name) else {
        r.push(
            &path,
            ProblemKind::WrongType,
            unknown_name_message("algorithm", name, &names),
        );
        return None;
    };
    for (key, _) in &fields {
        if !chosen.fields.contains(key) {
            let takes = if chosen.fields.is_empty() {
                "takes no other field".to_owned()
            } else {
                let list = chosen
                    .fields
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("takes {list}")
            };
            r.push(
                &format!("{section}.{key}"),
                ProblemKind::UnknownField,
                format!(
                    "`{key}` is not a setting of the `{}` {}, which {takes}",
                    chosen.name,
                    noun(section)
                ),
            );
            failed = true;
        }
    }
    (!failed).then_some((
        chosen.name,
        Fields {
            section,
            entries: fields,
        },
    ))
}

/// Runs `validate` until it passes, reporting each bad field (as `section.field`)
/// once and putting it back to its default with `reset` before the next run. Returns
/// `config` if it was valid as given.
fn validate_each<C: Copy>(
    r: &mut Reporter<'_>,
    section: &str,
    config: C,
    validate: impl Fn(&C) -> Result<(), (&'static str, String)>,
    reset: impl Fn(&mut C, &str) -> bool,
) -> Option<C> {
    let mut c = config;
    let mut reported: Vec<&str> = Vec::new();
    while let Err((field, message)) = validate(&c) {
        // The same field again: a fault of a combination, already named.
        if reported.contains(&field) {
            break;
        }
        r.push(
            &format!("{section}.{field}"),
            ProblemKind::OutOfRange,
            // The configurations speak Rust; in a file an optional field is left out.
            message
                .replace("use `None`", "leave the field out")
                .replace("use None", "leave the field out"),
        );
        reported.push(field);
        if !reset(&mut c, field) {
            break;
        }
    }
    reported.is_empty().then_some(config)
}

/// Checks `[points."x".breaker]`; `None` once reported.
pub(super) fn check_breaker(r: &mut Reporter<'_>, value: &Node) -> Option<BreakerPolicy> {
    let (algorithm, f) = choose(r, "breaker", value, &BREAKERS)?;
    let before = r.count();
    let policy = match algorithm {
        "sre" => {
            let mut config = SreConfig::default();
            let mut slow_call = None;
            f.set(r, "k", &mut config.k, Reporter::number);
            f.set(r, "protection", &mut config.protection, Reporter::u64);
            f.set(r, "window", &mut config.window, Reporter::duration);
            f.set(r, "buckets", &mut config.buckets, Reporter::u64);
            let interval = &mut config.force_pass_interval;
            f.set(r, "force_pass_interval", interval, Reporter::duration);
            f.set_some(r, "slow_call", &mut slow_call, Reporter::duration);
            let cancels = &mut config.cancellations_are_failures;
            f.set(r, "cancellations_are_failures", cancels, Reporter::bool);
            BreakerPolicy::Sre { config, slow_call }
        }
        "classic" => {
            let mut c = ClassicConfig::default();
            f.set(r, "failure_rate", &mut c.failure_rate, Reporter::number);
            f.set_some(r, "slow_call_rate", &mut c.slow_call_rate, Reporter::number);
            let slow = &mut c.slow_call_duration;
            f.set(r, "slow_call_duration", slow, Reporter::duration);
            f.set(r, "minimum_calls", &mut c.minimum_calls, Reporter::u64);
            let consecutive = &mut c.consecutive_failures;
            f.set_some(r, "consecutive_failures", consecutive, Reporter::u64);
            f.set(r, "window", &mut c.window, Reporter::duration);
            f.set(r, "buckets", &mut c.buckets, Reporter::u64);
            f.set(
                r,
                "half_open_probes",
                &mut c.half_open_probes,
                Reporter::u64,
            );
            if let Some(v) = f.get("open_wait") {
                check_open_wait(r, v, &mut c);
            }
            let cancels = &mut c.cancellations_are_failures;
            f.set(r, "cancellations_are_failures", cancels, Reporter::bool);
            if let Some(v) = f.get("quorum") {
                c.quorum = check_quorum(r, v);
            }
            BreakerPolicy::Classic(c)
        }
        _ => BreakerPolicy::Disabled,
    };
    if r.count() > before {
        return None;
    }
    validate_each(
        r,
        "breaker",
        policy,
        |p| p.validate().map_err(|e| (e.field, e.message)),
        reset_breaker,
    )
}

/// `[points."x".breaker.open_wait]`. A missing `max` is the default's (5 s), raised to
/// `base` if that is longer, so that `{ base = "10s" }` alone is a fixed 10 s wait.
fn check_open_wait(r: &mut Reporter<'_>, value: &Node, c: &mut ClassicConfig) {
    let section = "breaker.open_wait";
    let Some([base, multiplier, max, jitter]) = r.section(section, value, OPEN_WAIT_FIELDS) else {
        return;
    };
    let default = ClassicConfig::default().open_wait;
    let w = &mut c.open_wait;
    let set_duration =
        |r: &mut Reporter<'_>, name: &str, node: Option<&Node>, slot: &mut Duration| {
            if let Some(d) = node.and_then(|v| r.duration(&format!("{section}.{name}"), v)) {
                *slot = d;
            }
        };
    set_duration(r, "base", base, &mut w.base);
    w.max = default.max.max(w.base);
    set_duration(r, "max", max, &mut w.max);
    if let Some(x) = multiplier.and_then(|v| r.number("breaker.open_wait.multiplier", v)) {
        w.multiplier = x;
    }
    if let Some(x) = jitter.and_then(|v| r.number("breaker.open_wait.jitter", v)) {
        w.jitter = x;
    }
}

/// `[points."x".breaker.quorum]`: `open_at` (required) and `action` (`"open"`, the
/// default, or `"half_open"`). Its range (`open_at >= 2`) is the breaker's validation.
fn check_quorum(r: &mut Reporter<'_>, value: &Node) -> Option<Quorum> {
    let section = "breaker.quorum";
    let [open_at, action] = r.section(section, value, QUORUM_FIELDS)?;
    let open_at = r.required("breaker.quorum.open_at", open_at)?;
    let open_at = r.u64("breaker.quorum.open_at", open_at)?;
    let open_at = u32::try_from(open_at).unwrap_or(u32::MAX);
    let action = match action {
        None => QuorumAction::Open,
        Some(v) => {
            let field = "breaker.quorum.action";
            let text = r.string(field, v)?;
            let Some(a) = QuorumAction::parse(&text) else {
                r.push(
                    field,
                    ProblemKind::OutOfRange,
                    format!("expected `open` or `half_open`, got `{text}`"),
                );
                return None;
            };
            a
        }
    };
    Some(Quorum { open_at, action })
}

/// Puts a bad breaker field back to its default; `false` for a field it does not know.
fn reset_breaker(p: &mut BreakerPolicy, field: &str) -> bool {
    match p {
        BreakerPolicy::Sre { config, slow_call } => {
            let d = SreConfig::default();
            match field {
                "k" => config.k = d.k,
                "window" => config.window = d.window,
                "buckets" => config.buckets = d.buckets,
                "force_pass_interval" => config.force_pass_interval = d.force_pass_interval,
                "slow_call" => *slow_call = None,
                "cancellations_are_failures" => {
                    config.cancellations_are_failures = d.cancellations_are_failures
                }
                _ => return false,
            }
        }
        BreakerPolicy::Classic(c) => {
            let d = ClassicConfig::default();
            match field {
                "failure_rate" => c.failure_rate = d.failure_rate,
                "slow_call_rate" => c.slow_call_rate = d.slow_call_rate,
                "slow_call_duration" => c.slow_call_duration = d.slow_call_duration,
                "minimum_calls" => c.minimum_calls = d.minimum_calls,
                "consecutive_failures" => c.consecutive_failures = d.consecutive_failures,
                "window" => c.window = d.window,
                "buckets" => c.buckets = d.buckets,
                "half_open_probes" => c.half_open_probes = d.half_open_probes,
                "cancellations_are_failures" => {
                    c.cancellations_are_failures = d.cancellations_are_failures
                }
                // Keep `base <= max` when putting one of them back.
                "open_wait.base" if c.open_wait.max.is_zero() => {
                    c.open_wait.base = d.open_wait.base
                }
                "open_wait.base" => c.open_wait.base = c.open_wait.max.min(d.open_wait.base),
                "open_wait.max" => c.open_wait.max = c.open_wait.base.max(d.open_wait.max),
                "open_wait.multiplier" => c.open_wait.multiplier = d.open_wait.multiplier,
                "open_wait.jitter" => c.open_wait.jitter = d.open_wait.jitter,
                "quorum.open_at" => c.quorum = d.quorum,
                _ => return false,
            }
        }
        BreakerPolicy::Disabled => return false,
    }
    true
}

/// The fields of the `cluster` section's `algorithm = "visits"`.
pub(crate) const CLUSTER_VISITS_FIELDS: &[&str] = &["url", "key", "period", "quota", "batch"];

/// The fields of the `cluster` section's `algorithm = "token_bucket"`.
pub(crate) const CLUSTER_TOKEN_FIELDS: &[&str] = &["url", "key", "rate", "burst", "batch"];

const CLUSTERS: [Algorithm; 2] = [
    Algorithm {
        name: "visits",
        fields: CLUSTER_VISITS_FIELDS,
    },
    Algorithm {
        name: "token_bucket",
        fields: CLUSTER_TOKEN_FIELDS,
    },
];

/// Checks `[points."x".cluster]`; `None` once reported. The ranges (`quota`, `rate`,
/// `burst`, `batch`, the URL and the key) are the policy's own validation, reported
/// with the other range problems of the point.
pub(super) fn check_cluster(
    r: &mut Reporter<'_>,
    value: &Node,
) -> Option<crate::policy::ClusterLimit> {
    use crate::policy::ClusterLimit;
    let (algorithm, f) = choose(r, "cluster", value, &CLUSTERS)?;
    let before = r.count();
    // Every field but `batch` is required.
    let need = |r: &mut Reporter<'_>, name: &str| r.required(&f.path(name), f.get(name));
    let url = need(r, "url").and_then(|v| r.string("cluster.url", v));
    let key = need(r, "key").and_then(|v| r.string("cluster.key", v));
    let mut batch = None;
    f.set_some(r, "batch", &mut batch, Reporter::u64);
    // Every field is read (and every problem reported) before `?` gives up.
    let limit = if algorithm == "visits" {
        let period = need(r, "period").and_then(|v| r.duration("cluster.period", v));
        let quota = need(r, "quota").and_then(|v| r.u64("cluster.quota", v));
        ClusterLimit::Visits {
            url: url?,
            key: key?,
            period: period?,
            quota: quota?,
            batch: batch.unwrap_or(ClusterLimit::default_batch_up_to(u64::MAX)),
        }
    } else {
        let rate = need(r, "rate").and_then(|v| r.number("cluster.rate", v));
        let burst = need(r, "burst").and_then(|v| r.u64("cluster.burst", v))?;
        ClusterLimit::TokenBucket {
            url: url?,
            key: key?,
            rate: rate?,
            burst,
            batch: batch.unwrap_or(ClusterLimit::default_batch_up_to(burst)),
        }
    };
    (r.count() == before).then_some(limit)
}

/// Checks `[points."x".adaptive]`; `None` once reported.
pub(super) fn check_adaptive(r: &mut Reporter<'_>, value: &Node) -> Option<AdaptiveLimit> {
    let (algorithm, f) = choose(r, "adaptive", value, &ADAPTIVES)?;
    let before = r.count();
    let limit = if algorithm == "gradient" {
        let mut c = GradientConfig::default();
        f.set(r, "initial_limit", &mut c.initial_limit, Reporter::u64);
        f.set(r, "min_limit", &mut c.min_limit, Reporter::u64);
        f.set(r, "max_limit", &mut c.max_limit, Reporter::u64);
        f.set(r, "smoothing", &mut c.smoothing, Reporter::number);
        f.set(r, "rtt_tolerance", &mut c.rtt_tolerance, Reporter::number);
        f.set(r, "queue_size", &mut c.queue_size, Reporter::number);
        f.set(r, "long_window", &mut c.long_window, Reporter::u64);
        f.set(r, "sample_window", &mut c.sample_window, Reporter::duration);
        f.set(r, "min_samples", &mut c.min_samples, Reporter::u64);
        let reserve = &mut c.critical_reserve;
        f.set(r, "critical_reserve", reserve, Reporter::number);
        AdaptiveLimit::Gradient(c)
    } else {
        let mut c = AdaptiveConfig::default();
        f.set(r, "window", &mut c.window, Reporter::duration);
        f.set(r, "buckets", &mut c.buckets, Reporter::u64);
        f.set(r, "cpu_threshold", &mut c.cpu_threshold, Reporter::u64);
        f.set(r, "cool_off", &mut c.cool_off, Reporter::duration);
        f.set(
            r,
            "default_min_rt",
            &mut c.default_min_rt,
            Reporter::duration,
        );
        f.set(r, "flying_beta", &mut c.flying_beta, Reporter::number);
        let factor = &mut c.min_overload_factor;
        f.set(r, "min_overload_factor", factor, Reporter::number);
        AdaptiveLimit::Shedder(c)
    };
    if r.count() > before {
        return None;
    }
    let validate = |a: &AdaptiveLimit| {
        match a {
            AdaptiveLimit::Gradient(c) => c.validate(),
            AdaptiveLimit::Shedder(c) => c.validate(),
        }
        .map_err(|e| (e.field, e.message))
    };
    validate_each(r, "adaptive", limit, validate, reset_adaptive)
}

/// Puts a bad adaptive field back to its default; `false` for a field it does not know.
fn reset_adaptive(a: &mut AdaptiveLimit, field: &str) -> bool {
    match a {
        AdaptiveLimit::Gradient(c) => {
            let d = GradientConfig::default();
            match field {
                "min_limit" => c.min_limit = d.min_limit,
                // Keep `min_limit <= initial_limit <= max_limit` when putting one back.
                "max_limit" => c.max_limit = c.min_limit.max(d.max_limit),
                "initial_limit" => {
                    c.initial_limit = d
                        .initial_limit
                        .clamp(c.min_limit, c.max_limit.max(c.min_limit))
                }
                "smoothing" => c.smoothing = d.smoothing,
                "rtt_tolerance" => c.rtt_tolerance = d.rtt_tolerance,
                "queue_size" => c.queue_size = d.queue_size,
                "long_window" => c.long_window = d.long_window,
                "min_samples" => c.min_samples = d.min_samples,
                "critical_reserve" => c.critical_reserve = d.critical_reserve,
                _ => return false,
            }
        }
        AdaptiveLimit::Shedder(c) => {
            let d = AdaptiveConfig::default();
            match field {
                "window" => c.window = d.window,
                "buckets" => c.buckets = d.buckets,
                "cpu_threshold" => c.cpu_threshold = d.cpu_threshold,
                "default_min_rt" => c.default_min_rt = d.default_min_rt,
                "flying_beta" => c.flying_beta = d.flying_beta,
                "min_overload_factor" => c.min_overload_factor = d.min_overload_factor,
                _ => return false,
            }
        }
    }
    true
}
