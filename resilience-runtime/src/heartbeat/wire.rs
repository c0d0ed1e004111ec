//! What goes over the wire: the cycle report built from the registry, the request
//! bodies of both protocols, and the policies read back from a pull answer.

use super::config::{HeartbeatConfig, Protocol};
use super::fields::{PointFields, JSON_POINT, SDS_POINT};
use super::HeartbeatStatus;
use crate::config::{ConfigError, Format, PointConfig, PolicyFile, Problem, ProblemKind};
use crate::registry::Registry;
use crate::sources::{EffectivePolicy, Section, Sections, Source};
use crate::stats::BreakerStats;
use crate::stats::Totals;
use crate::Reason;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::UNIX_EPOCH;

/// Length of a statistics cycle ([`crate::CYCLE`]), ms.
pub(crate) use crate::stats::CYCLE_MS;

/// One point's counts in the reported cycle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PointReport {
    pub(crate) name: &'static str,
    pub(crate) visits: u64,
    pub(crate) passes: u64,
    pub(crate) downgrades: u64,
    pub(crate) exceptions: u64,
    pub(crate) timeouts: u64,
    /// Calls whose future or permit was dropped (not in SDS's protocol of its own).
    pub(crate) cancelled: u64,
    pub(crate) peak_concurrency: u64,
    pub(crate) by_reason: Vec<(Reason, u64)>,
    /// The cycle's ten seconds: visits, passes, downgrades, exceptions, timeouts.
    pub(crate) seconds: Vec<[u64; 5]>,
    /// The cycle's ten seconds of downgrades, per reason that has any.
    pub(crate) seconds_by_reason: Vec<(Reason, Vec<u64>)>,
    /// The cycle's ten seconds of call durations: calls measured, the sum and the max
    /// of their durations in microseconds; empty when no call was measured.
    pub(crate) seconds_durations: Vec<[u64; 3]>,
    /// What `call_retrying` did on the point since the previous report.
    pub(crate) retry: crate::retry::RetryStats,
    /// The concurrency queue since the previous report (counts grown, waiting now,
    /// the longest wait that ended), if the point has one.
    pub(crate) queue: Option<crate::QueueStats>,
    /// The point's hottest keys now ([`Point::hot_keys`](crate::Point::hot_keys), at
    /// most [`HOT_KEYS`]); empty without a `keys` section or a call with a key.
    pub(crate) hot_keys: Vec<crate::keys::HotKeyStats>,
    /// The totals of the point's key table, if it has one.
    pub(crate) key_table: Option<crate::keys::KeyTableStats>,
}

/// The most hot keys a point's report carries.
pub(crate) const HOT_KEYS: usize = 10;

impl PointReport {
    fn is_idle(&self) -> bool {
        self.visits == 0
            && self.exceptions == 0
            && self.timeouts == 0
            && self.cancelled == 0
            && self.peak_concurrency == 0
    }
}

/// The statistics of one closed cycle.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Report {
    pub(crate) cycle_start_ms: u64,
    pub(crate) points: Vec<PointReport>,
    pub(crate) known: Vec<&'static str>,
    pub(crate) declared: Vec<&'static str>,
    /// What each point with a setting or a breaker enforces, and from where.
    pub(crate) enforcing: Vec<Value>,
}

/// What a point enforces, for the console: the digest of its effective settings,
/// the origin of each section, the settings of the sections that do not come from
/// the console (`local`, absent when everything does), and its breaker's state.
fn enforcing(name: &str, effective: &EffectivePolicy, breaker: Option<&BreakerStats>) -> Value {
    let config = effective.to_config();
    let mut out = Map::new();
    out.insert("name".into(), name.into());
    out.insert(
        "digest".into(),
        config
            .as_ref()
            .map_or_else(|| "none".to_owned(), PointConfig::digest)
            .into(),
    );
    let origins: Map<String, Value> = effective
        .origins()
        .map(|(section, o)| {
            (
                section.name().to_owned(),
                json!({"source": o.source.to_string(), "version": o.version}),
            )
        })
        .collect();
    out.insert("origins".into(), Value::Object(origins));
    if let Some(config) = config {
        let local = effective
            .origins()
            .filter(|(_, o)| o.source != Source::Console)
            .fold(Sections::NONE, |set, (section, _)| set.with(section));
        let is_local = |section| {
            effective
                .origin(section)
                .is_some_and(|o| o.source != Source::Console)
        };
        let (breaker_local, retry_local) = (is_local(Section::Breaker), is_local(Section::Retry));
        if !local.is_empty() || breaker_local || retry_local {
            let mut local_config = config;
            local_config.sections = local;
            if !breaker_local {
                local_config.breaker = None;
            }
            if !retry_local {
                local_config.retry = None;
            }
            if let Ok(v) = serde_json::to_value(&local_config) {
                out.insert("local".into(), v);
            }
        }
    }
    if let Some(b) = breaker {
        let since_ms = b
            .since
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        out.insert(
            "breaker".into(),
            json!({"kind": b.kind, "state": b.state.as_str(), "since_ms": since_ms,
                   "transitions": b.transitions}),
        );
    }
    Value::Object(out)
}

/// Builds cycle reports. Points with a policy report their last closed cycle
/// ([`CycleStats`](crate::CycleStats)); points without one keep only totals, so they
/// report the growth of their totals since the previous report (attributed to the
/// cycle just closed; their peak concurrency is not tracked and reported as 0).
#[derive(Debug, Default)]
pub(crate) struct Collector {
    previous: HashMap<&'static str, Totals>,
    /// The retry counters of each point at the previous report.
    previous_retry: HashMap<&'static str, crate::retry::RetryStats>,
    /// The queue counters of each point at the previous report.
    previous_queue: HashMap<&'static str, crate::QueueStats>,
}

impl Collector {
    /// A collector whose first report counts from now.
    pub(crate) fn new(registry: &Registry) -> Collector {
        let mut c = Collector::default();
        for name in registry.point_names() {
            if let Some(s) = registry.stats(name) {
                c.previous.insert(name, s.totals);
                c.previous_retry.insert(name, s.retry);
            }
        }
        c
    }

    /// The report of the cycle starting at `cycle_start_ms` (wall clock).
    pub(crate) fn collect(&mut self, registry: &Registry, cycle_start_ms: u64) -> Report {
        let known = registry.point_names();
        let mut points = Vec::new();
        let mut enforced = Vec::new();
        for &name in &known {
            let Some(stats) = registry.stats(name) else {
                continue;
            };
            if let Ok(effective) = registry.effective_policy(name) {
                if effective.origins().next().is_some() || stats.breaker.is_some() {
                    enforced.push(enforcing(name, &effective, stats.breaker.as_ref()));
                }
            }
            let previous = self.previous.insert(name, stats.totals).unwrap_or_default();
            let report = match &stats.last_cycle {
                Some(cycle) => {
                    let start = cycle
                        .start
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    if start != cycle_start_ms {
                        // The point got its policy during the cycle: no full cycle yet.
                        continue;
                    }
                    PointReport {
                        name,
                        visits: cycle.visits,
                        passes: cycle.passes,
                        downgrades: cycle.downgrades,
                        exceptions: cycle.exceptions,
                        timeouts: cycle.timeouts,
                        cancelled: cycle.cancelled,
                        peak_concurrency: cycle.peak_concurrency,
                        by_reason: cycle.downgrades_by_reason.iter().collect(),
                        ..PointReport::default()
                    }
                }
                None => {
                    let t = &stats.totals;
                    let d = |now: u64, before: u64| now.saturating_sub(before);
                    let visits = d(t.visits, previous.visits);
                    let downgrades = d(t.downgrades, previous.downgrades).min(visits);
                    PointReport {
                        name,
                        visits,
                        passes: visits - downgrades,
                        downgrades,
                        exceptions: d(t.exceptions, previous.exceptions),
                        timeouts: d(t.timeouts, previous.timeouts),
                        cancelled: d(t.cancelled, previous.cancelled),
                        peak_concurrency: 0,
                        by_reason: t
                            .downgrades_by_reason
                            .iter()
                            .map(|(r, n)| (r, d(n, previous.downgrades_by_reason.get(r))))
                            .collect(),
                        ..PointReport::default()
                    }
                }
            };
            let before = self
                .previous_retry
                .insert(name, stats.retry)
                .unwrap_or_default();
            let mut report = report;
            report.retry = retry_growth(&stats.retry, &before);
            if let Some(now) = stats.queue {
                let before = self.previous_queue.insert(name, now).unwrap_or_default();
                let max = registry
                    .find(name)
                    .and_then(|p| p.take_queue_max_wait())
                    .unwrap_or(0);
                report.queue = Some(queue_growth(&now, &before, max));
            }
            let queue_busy = report.queue.as_ref().is_some_and(queue_busy);
            if !report.is_idle() || report.retry.calls > 0 || queue_busy {
                if let Some(point) = registry.find(name) {
                    report.hot_keys = point.hot_keys(HOT_KEYS);
                    report.key_table = point.key_stats();
                    let from = cycle_start_ms / 1000;
                    let seconds = point.seconds_between(from, from + CYCLE_MS / 1000);
                    report.seconds = seconds
                        .iter()
                        .map(|c| {
                            [
                                c.visits(),
                                c.tracked[crate::window::PASSES],
                                c.tracked[crate::window::DOWNGRADES],
                                c.tracked[crate::window::EXCEPTIONS],
                                c.tracked[crate::window::TIMEOUTS],
                            ]
                        })
                        .collect();
                    report.seconds_by_reason = Reason::ALL
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| seconds.iter().any(|c| c.reasons[*i] > 0))
                        .map(|(i, r)| (*r, seconds.iter().map(|c| c.reasons[i]).collect()))
                        .collect();
                    if seconds.iter().any(|c| c.calls > 0) {
                        report.seconds_durations = seconds
                            .iter()
                            .map(|c| {
                                let (n, sum, max) = c.durations();
                                [n, sum, max]
                            })
                            .collect();
                    }
                }
                points.push(report);
            }
        }
        let mut declared: Vec<&'static str> = registry
            .declared_points()
            .iter()
            .map(|p| p.name())
            .collect();
        declared.dedup();
        Report {
            cycle_start_ms,
            points,
            known,
            declared,
            enforcing: enforced,
        }
    }
}

/// The queue counters' growth from `before` to `now`, with the calls waiting now and
/// `max_wait_ns`, the longest wait since the previous report.
fn queue_growth(
    now: &crate::QueueStats,
    before: &crate::QueueStats,
    max_wait_ns: u64,
) -> crate::QueueStats {
    let mut q = *now;
    q.admitted = now.admitted.saturating_sub(before.admitted);
    q.timed_out = now.timed_out.saturating_sub(before.timed_out);
    q.cancelled = now.cancelled.saturating_sub(before.cancelled);
    q.refused = now.refused.saturating_sub(before.refused);
    q.full = now.full.saturating_sub(before.full);
    q.evicted = now.evicted.saturating_sub(before.evicted);
    q.wait = now.wait.saturating_sub(before.wait);
    q.max_wait = std::time::Duration::from_nanos(max_wait_ns);
    q
}

/// Whether a point's queue did something this cycle.
fn queue_busy(q: &crate::QueueStats) -> bool {
    q.waiting + q.admitted + q.timed_out + q.cancelled + q.refused + q.full + q.evicted > 0
}

/// A point's queue on the wire, if it has one that did something this cycle.
fn queue_json(p: &PointReport) -> Option<Value> {
    let q = p.queue?;
    queue_busy(&q).then(|| {
        json!({"waiting": q.waiting, "peak_waiting": q.peak_waiting, "admitted": q.admitted,
               "timed_out": q.timed_out, "cancelled": q.cancelled, "refused": q.refused,
               "full": q.full, "evicted": q.evicted, "wait_ns": crate::clock::nanos(q.wait),
               "max_wait_ns": crate::clock::nanos(q.max_wait)})
    })
}

/// The longest key text sent, in bytes (resilience-admin's limit).
const WIRE_KEY_MAX: usize = 64;

/// A key's text as sent: control characters written as `\u{..}` (a key is the
/// caller's data; the console takes none), cut at [`WIRE_KEY_MAX`] bytes with `…`.
fn wire_key(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    if out.len() > WIRE_KEY_MAX {
        let mut end = WIRE_KEY_MAX - '…'.len_utf8();
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out
}

/// A point's hottest keys on the wire (our JSON protocol only), if it has any.
fn hot_keys_json(p: &PointReport) -> Option<Value> {
    (!p.hot_keys.is_empty()).then(|| {
        p.hot_keys
            .iter()
            .map(|k| {
                json!({"key": wire_key(&k.key), "passes": k.passes, "refused": k.refused,
                       "overridden": k.overridden})
            })
            .collect()
    })
}

/// A point's key table on the wire (our JSON protocol only), if it has one.
fn key_table_json(p: &PointReport) -> Option<Value> {
    p.key_table.map(|t| {
        json!({"tracked": t.tracked, "untracked_passes": t.untracked_passes,
               "untracked_refused": t.untracked_refused, "evictions": t.evictions})
    })
}

/// The retry counters' growth from `before` to `now`.
fn retry_growth(
    now: &crate::retry::RetryStats,
    before: &crate::retry::RetryStats,
) -> crate::retry::RetryStats {
    crate::retry::RetryStats {
        calls: now.calls.saturating_sub(before.calls),
        attempts: now.attempts.saturating_sub(before.attempts),
        retries: now.retries.saturating_sub(before.retries),
        exhausted: now.exhausted.saturating_sub(before.exhausted),
        refused_by_budget: now
            .refused_by_budget
            .saturating_sub(before.refused_by_budget),
        hedges: now.hedges.saturating_sub(before.hedges),
        cancelled: now.cancelled.saturating_sub(before.cancelled),
    }
}

/// A point's retry counters on the wire, if it made a retrying call.
fn retry_json(p: &PointReport) -> Option<Value> {
    let r = &p.retry;
    (r.calls > 0).then(|| {
        json!({"calls": r.calls, "attempts": r.attempts, "retries": r.retries,
               "exhausted": r.exhausted, "refused_by_budget": r.refused_by_budget,
               "hedges": r.hedges, "cancelled": r.cancelled})
    })
}

fn reasons(p: &PointReport) -> Map<String, Value> {
    p.by_reason
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| (r.as_str().to_owned(), Value::from(*n)))
        .collect()
}

/// The fields both protocols send only when there is something in them: the seconds'
/// durations, the retry and the queue counters.
fn point_extras(point: &mut Value, p: &PointReport, f: &PointFields) {
    if !p.seconds_durations.is_empty() {
        point[f.durations] = json!(p.seconds_durations);
    }
    if let Some(retry) = retry_json(p) {
        point[f.retry] = retry;
    }
    if let Some(queue) = queue_json(p) {
        point[f.queue] = queue;
    }
}

fn seconds_by_reason(p: &PointReport) -> Map<String, Value> {
    p.seconds_by_reason
        .iter()
        .map(|(r, v)| (r.as_str().to_owned(), json!(v)))
        .collect()
}

/// The bodies of an upload: one for SDS's protocol; for ours, as many parts as it
/// takes to keep each body within `max_body` bytes (see [`pack`]).
pub(crate) fn upload_body(
    config: &HeartbeatConfig,
    report: &Report,
    version: u64,
    health: &HeartbeatStatus,
    ip: IpAddr,
) -> Vec<Vec<u8>> {
    match config.protocol {
        Protocol::Json => {
            let points: Vec<Value> = report
                .points
                .iter()
                .map(|p| {
                    let f = &JSON_POINT;
                    let mut point = json!({(f.name): p.name, (f.visits): p.visits,
                           (f.downgrades): p.downgrades, (f.exceptions): p.exceptions,
                           (f.timeouts): p.timeouts, (f.cancelled): p.cancelled,
                           (f.concurrency): p.peak_concurrency,
                           (f.reasons): reasons(p), (f.seconds): p.seconds,
                           (f.seconds_by_reason): seconds_by_reason(p)});
                    point_extras(&mut point, p, f);
                    if let Some(passes) = f.passes {
                        point[passes] = json!(p.passes);
                    }
                    if let (Some(field), Some(keys)) = (f.hot_keys, hot_keys_json(p)) {
                        point[field] = keys;
                    }
                    if let (Some(field), Some(table)) = (f.key_table, key_table_json(p)) {
                        point[field] = table;
                    }
                    point
                })
                .collect();
            let base = json!({"app_group": config.app_group, "app": config.app,
                   "instance": config.instance, "host": config.host, "ip": ip.to_string(),
                   "cycle_start_ms": report.cycle_start_ms, "policy_version": version,
                   "client": client_health(health)});
            let lists = vec![
                List::array("points", points),
                List::array("enforcing", report.enforcing.clone()),
                List::array(
                    "known_points",
                    report.known.iter().map(|n| json!(n)).collect(),
                ),
                List::array(
                    "declared_points",
                    report.declared.iter().map(|n| json!(n)).collect(),
                ),
            ];
            pack(&base, lists, config.max_body_bytes, str::len, Always)
                .into_iter()
                .map(|v| v.to_string().into_bytes())
                .collect()
        }
        Protocol::Sds => {
            let points: Vec<(String, Value)> = report
                .points
                .iter()
                .map(|p| {
                    let f = &SDS_POINT;
                    let mut point = json!({(f.name): p.name, (f.visits): p.visits,
                               (f.exceptions): p.exceptions,
                               (f.concurrency): p.peak_concurrency,
                               (f.timeouts): p.timeouts, (f.cancelled): p.cancelled,
                               (f.downgrades): p.downgrades,
                               (f.reasons): reasons(p), (f.seconds): p.seconds,
                               (f.seconds_by_reason): seconds_by_reason(p)});
                    point_extras(&mut point, p, f);
                    (p.name.to_owned(), point)
                })
                .collect();
            // SDS sends the END of the reported cycle.
            let base = json!({"appGroupName": config.app_group, "appName": config.app,
                              "ip": ip.to_string(), "hostname": config.host,
                              "statisticsCycleTime": report.cycle_start_ms + CYCLE_MS,
                              "instanceId": config.instance, "version": version,
                              "client": client_health(health)});
            let names = |list: &[&str]| list.iter().map(|n| json!(n)).collect();
            let lists = vec![
                List::map("pointInfoMap", points),
                List::array("enforcing", report.enforcing.clone()),
                List::array("knownPoints", names(&report.known)),
                List::array("declaredPoints", names(&report.declared)),
            ];
            // The form encoding is what counts against the body limit. A cycle that
            // fits goes as SDS sends it, in one body without part fields.
            pack(&base, lists, config.max_body_bytes, form_len, WhenSplit)
                .iter()
                .map(sds_form)
                .collect()
        }
    }
}

/// A list of an upload that [`pack`] spreads over the parts: an array, or an object
/// (SDS's `pointInfoMap`) whose entries are spread the same way.
pub(crate) struct List {
    key: &'static str,
    /// Whether the list is an object (each item has a name).
    map: bool,
    items: Vec<(Option<String>, Value)>,
}

impl List {
    pub(crate) fn array(key: &'static str, items: Vec<Value>) -> List {
        List {
            key,
            map: false,
            items: items.into_iter().map(|v| (None, v)).collect(),
        }
    }

    fn map(key: &'static str, entries: Vec<(String, Value)>) -> List {
        List {
            key,
            map: true,
            items: entries.into_iter().map(|(k, v)| (Some(k), v)).collect(),
        }
    }
}

/// Whether [`pack`] writes `"part"` and `"parts"` into a body that holds the whole
/// cycle.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartFields {
    /// Always (our protocol).
    Always,
    /// Only when the cycle takes more than one body (SDS's: one body as SDS sends).
    WhenSplit,
}
use PartFields::{Always, WhenSplit};

/// The length of `text` form-encoded (see `http::form_encode`).
fn form_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' | b' ' => 1,
            _ => 3,
        })
        .sum()
}

/// The client's own health, as the console shows it: the previous upload's and the
/// last pull's errors, and whether the console policies held come from the cache.
fn client_health(s: &HeartbeatStatus) -> Value {
    json!({"last_upload_error": s.last_upload_error, "last_pull_error": s.last_pull_error,
           "from_cache": s.from_cache, "uploads_dropped": s.uploads_dropped,
           "pull_failures": s.pull_failures, "policies_rejected": s.policies_rejected})
}

/// An address text at least as long as any `IpAddr`'s, raw or form-encoded.
const LONGEST_IP: &str = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";

/// Splits an upload into parts of at most `max_body` bytes each (as `size` measures
/// a text: its length, or its form-encoded length): every part has the `base`
/// fields plus `"part": k, "parts": n`, and the items of the `lists` are spread over
/// the parts in order (an item larger than a part on its own goes alone). One part,
/// with every list, when everything fits; `fields` says whether it carries the part
/// fields then.
pub(crate) fn pack(
    base: &Value,
    lists: Vec<List>,
    max_body: usize,
    size: impl Fn(&str) -> usize,
    fields: PartFields,
) -> Vec<Value> {
    // The base, the empty lists and the part fields, with room for large numbers.
    // The base's `ip` is the local address of the connection a body goes out on: it
    // is measured as the longest address text, so that every address gets the same
    // parts (the client counts them before it connects).
    let mut sized = base.clone();
    if sized.get("ip").is_some() {
        sized["ip"] = json!(LONGEST_IP);
    }
    let overhead = size(&sized.to_string())
        + lists
            .iter()
            .map(|l| size(&format!(r#","{}":[]"#, l.key)))
            .sum::<usize>()
        + size(r#","part":4294967295,"parts":4294967295"#);
    let budget = max_body.saturating_sub(overhead).max(1);
    let empty = |l: &List| {
        if l.map {
            Value::Object(Map::new())
        } else {
            Value::Array(Vec::new())
        }
    };
    let shapes: Vec<(&'static str, Value)> = lists.iter().map(|l| (l.key, empty(l))).collect();
    let mut parts: Vec<Vec<(&'static str, Option<String>, Value)>> = vec![Vec::new()];
    let mut used = 0;
    for list in lists {
        for (name, item) in list.items {
            let mut text = item.to_string();
            if let Some(name) = &name {
                text.push_str(&Value::String(name.clone()).to_string());
                text.push(':');
            }
            // With the comma before it.
            text.push(',');
            let bytes = size(&text);
            if used + bytes > budget && used > 0 {
                parts.push(Vec::new());
                used = 0;
            }
            used += bytes;
            if let Some(part) = parts.last_mut() {
                part.push((list.key, name, item));
            }
        }
    }
    let n = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(k, items)| {
            let mut body = base.clone();
            for (key, shape) in &shapes {
                body[*key] = shape.clone();
            }
            for (key, name, item) in items {
                match (body.get_mut(key), name) {
                    (Some(Value::Array(a)), _) => a.push(item),
                    (Some(Value::Object(m)), Some(name)) => {
                        m.insert(name, item);
                    }
                    _ => {}
                }
            }
            if n > 1 || fields == Always {
                body["part"] = json!(k);
                body["parts"] = json!(n);
            }
            body
        })
        .collect()
}

/// The body of a pull; in our JSON protocol, with the classic breakers' states
/// (`breakers`, see `quorum`) when there are some.
pub(crate) fn pull_body(
    config: &HeartbeatConfig,
    version: u64,
    points: &[&'static str],
    breakers: Option<&Value>,
    ip: IpAddr,
) -> Vec<u8> {
    match config.protocol {
        // The points are in the heartbeats: a pull stays small however many there are.
        Protocol::Json => {
            let mut body = json!({"app_group": config.app_group, "app": config.app,
                                  "instance": config.instance, "host": config.host,
                                  "ip": ip.to_string(), "version": version,
                                  "points_count": points.len()});
            if let Some(b) = breakers {
                body["breakers"] = b.clone();
                // The console counts these states for three periods.
                body["pull_period_ms"] = json!(config.pull_period.as_millis() as u64);
            }
            body.to_string().into_bytes()
        }
        Protocol::Sds => {
            let mut client = json!({"appGroupName": config.app_group,
                                    "appName": config.app, "ip": ip.to_string(),
                                    "hostname": config.host, "version": version,
                                    "pointList": points,
                                    "instanceId": config.instance});
            let body = sds_form(&client);
            if body.len() <= config.max_body_bytes {
                return body;
            }
            // The answer holds every strategy whatever the list says, and the points
            // reach the console in the uploads: the list is cut to the names that
            // fit, and `pointsCount` says how many there are.
            // Everything but the list, and the count with room for any number.
            let rest = body.len() - form_len(&json!(points).to_string())
                + form_len(r#","pointsCount":18446744073709551615"#);
            let room = config.max_body_bytes.saturating_sub(rest);
            let mut used = form_len("[]");
            let fit = points
                .iter()
                .take_while(|n| {
                    used += form_len(&json!(n).to_string()) + form_len(",");
                    used <= room
                })
                .count();
            client["pointList"] = json!(points[..fit]);
            client["pointsCount"] = json!(points.len());
            sds_form(&client)
        }
    }
}

fn sds_form(client: &Value) -> Vec<u8> {
    format!("client={}", super::http::form_encode(&client.to_string())).into_bytes()
}

pub(crate) fn content_type(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Json => "application/json",
        Protocol::Sds => "application/x-www-form-urlencoded; charset=UTF-8",
    }
}

/// What a pull answered.
#[derive(Debug)]
pub(crate) enum PullAnswer {
    /// The version the client holds is current.
    Unchanged(u64),
    /// A new version: its policies, or the problems that keep them from applying.
    Changed(u64, Result<PolicyFile, ConfigError>),
}

/// Reads a pull answer. `Err` is an answer that is not one at all (a message for the
/// protocol error).
pub(crate) fn read_pull_answer(protocol: Protocol, body: &[u8]) -> Result<PullAnswer, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err("empty answer".into());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(msg) = v.get("errorMsg").and_then(Value::as_str) {
        if !msg.trim().is_empty() {
            return Err(format!("the server says: {msg}"));
        }
    }
    let changed = v.get("changed").and_then(Value::as_bool).unwrap_or(false);
    let version = v
        .get("version")
        .and_then(Value::as_u64)
        .ok_or("no `version` in the answer")?;
    if !changed {
        return Ok(PullAnswer::Unchanged(version));
    }
    let file = match protocol {
        Protocol::Json => match v.get("policy") {
            Some(p) if p.is_object() => PolicyFile::parse(&p.to_string(), Format::Json),
            Some(Value::Null) | None => Ok(PolicyFile::default()),
            Some(_) => return Err("`policy` is not an object".into()),
        },
        Protocol::Sds => match v.get("strategies") {
            Some(Value::Array(list)) => from_sds(list),
            Some(Value::Null) | None => Ok(PolicyFile::default()),
            Some(_) => return Err("`strategies` is not a list".into()),
        },
    };
    Ok(PullAnswer::Changed(version, file))
}

/// SDS strategies as a policy file. A strategy that carries this project's full
/// settings (`resiliencePolicy`, sent by resilience-admin) is read from them;
/// otherwise SDS's fields are translated (see the module docs), and the result goes
/// through the same checks as a policy file.
pub(crate) fn from_sds(strategies: &[Value]) -> Result<PolicyFile, ConfigError> {
    let mut points = Map::new();
    let mut problems = Vec::new();
    for (i, s) in strategies.iter().enumerate() {
        let Some(name) = s.get("point").and_then(Value::as_str) else {
            problems.push(Problem::new(
                None,
                Some(&format!("strategies[{i}].point")),
                ProblemKind::MissingField,
                "an SDS strategy without a point name",
            ));
            continue;
        };
        let settings = match s.get("resiliencePolicy") {
            Some(p) if p.is_object() => p.clone(),
            _ => match translate(s) {
                Ok(p) => p,
                Err((field, message)) => {
                    problems.push(Problem::new(
                        Some(name),
                        Some(field),
                        ProblemKind::WrongType,
                        message,
                    ));
                    continue;
                }
            },
        };
        if points.insert(name.to_owned(), settings).is_some() {
            problems.push(Problem::new(
                Some(name),
                None,
                ProblemKind::DuplicatePoint,
                format!("point `{name}` has two strategies"),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(ConfigError::Invalid {
            path: None,
            problems,
        });
    }
    PolicyFile::parse(&json!({ "points": points }).to_string(), Format::Json)
}

/// One SDS strategy in this project's point format. SDS writes -1 (or null) for
/// "rule off"; the rules' own off-values (see the table in the module docs) are kept.
fn translate(s: &Value) -> Result<Value, (&'static str, String)> {
    let int = |field: &'static str| -> Result<Option<i64>, (&'static str, String)> {
        match s.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| (field, format!("expected an integer, got {v}"))),
        }
    };
    let mut p = Map::new();
    if let Some(v) = int("visitThreshold")?.filter(|v| *v >= 0) {
        p.insert("max_visits".into(), v.into());
    }
    if let Some(v) = int("concurrentThreshold")?.filter(|v| *v >= 0) {
        p.insert("max_concurrency".into(), v.into());
    }
    if let Some(v) = int("exceptionThreshold")?.filter(|v| *v >= 0) {
        p.insert("max_exceptions".into(), v.into());
    }
    let rate = int("exceptionRateThreshold")?.filter(|v| (0..=100).contains(v));
    let start = int("exceptionRateStart")?.filter(|v| *v >= 0);
    if let (Some(rate), Some(start)) = (rate, start) {
        p.insert(
            "exception_rate".into(),
            json!({"rate": rate as f64 / 100.0, "min_visits": start}),
        );
    }
    let threshold = int("timeoutThreshold")?.filter(|v| *v > 0);
    let count = int("timeoutCountThreshold")?.filter(|v| *v >= 0);
    if let (Some(t), Some(c)) = (threshold, count) {
        p.insert(
            "timeouts".into(),
            json!({"threshold": format!("{t}ms"), "max_count": c}),
        );
    }
    if let Some(r) = int("tokenBucketGeneratedTokensInSecond")?.filter(|v| *v >= 0) {
        // SDS lets max(rate, size) calls through per calendar second; a bucket of that
        // rate and capacity admits the same per second, refilled smoothly.
        let size = int("tokenBucketSize")?.unwrap_or(0);
        let per_second = r.max(size);
        p.insert(
            "token_bucket".into(),
            json!({"rate": per_second as f64, "capacity": per_second.max(1)}),
        );
    }
    if let Some(d) = int("delayTime")?.filter(|v| *v >= 0) {
        let mut delay = json!({"duration": format!("{d}ms")});
        if let Some(r) = int("retryInterval")?.filter(|v| *v > 0) {
            delay["retry_interval"] = format!("{r}ms").into();
        }
        p.insert("delay".into(), delay);
    }
    let percent = int("downgradeRate")?.map_or(100, |r| r.clamp(0, 100));
    p.insert("downgrade_percentage".into(), percent.into());
    Ok(Value::Object(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn file(v: Value) -> PolicyFile {
        PolicyFile::parse(&v.to_string(), Format::Json).unwrap()
    }

    #[test]
    fn the_retry_object_carries_hedges_and_cancelled_growth() {
        use crate::retry::RetryStats;
        let before = RetryStats {
            calls: 2,
            attempts: 5,
            retries: 1,
            hedges: 2,
            cancelled: 1,
            ..RetryStats::default()
        };
        let now = RetryStats {
            calls: 3,
            attempts: 9,
            retries: 1,
            hedges: 5,
            cancelled: 3,
            refused_by_budget: 1,
            ..RetryStats::default()
        };
        let report = PointReport {
            retry: retry_growth(&now, &before),
            ..PointReport::default()
        };
        assert_eq!(
            retry_json(&report),
            Some(
                json!({"calls": 1, "attempts": 4, "retries": 0, "exhausted": 0,
                        "refused_by_budget": 1, "hedges": 3, "cancelled": 2})
            )
        );
    }

    /// A point report with every field the protocols can carry.
    fn full_point() -> PointReport {
        PointReport {
            name: "p",
            visits: 3,
            passes: 2,
            downgrades: 1,
            by_reason: vec![(Reason::Visits, 1)],
            seconds: vec![[3, 2, 1, 0, 0]],
            seconds_by_reason: vec![(Reason::Visits, vec![1])],
            seconds_durations: vec![[2, 10, 6]],
            retry: crate::retry::RetryStats {
                calls: 1,
                ..crate::retry::RetryStats::default()
            },
            queue: Some(crate::QueueStats {
                admitted: 1,
                ..crate::QueueStats::default()
            }),
            hot_keys: vec![crate::keys::HotKeyStats {
                key: "k".into(),
                passes: 2,
                refused: 0,
                overridden: false,
            }],
            key_table: Some(crate::keys::KeyTableStats::default()),
            ..PointReport::default()
        }
    }

    #[test]
    fn points_are_written_with_exactly_the_shared_field_names() {
        let report = Report {
            cycle_start_ms: 10_000,
            points: vec![full_point()],
            known: vec!["p"],
            declared: vec![],
            enforcing: vec![],
        };
        let health = HeartbeatStatus::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let config = HeartbeatConfig::builder("g", "a", "http://127.0.0.1:1")
            .build()
            .unwrap();
        let json_body = &upload_body(&config, &report, 1, &health, ip)[0];
        let body: Value = serde_json::from_slice(json_body).unwrap();
        let point = body["points"][0].as_object().unwrap();
        let mut sent: Vec<&str> = point.keys().map(String::as_str).collect();
        let mut all = JSON_POINT.all();
        sent.sort_unstable();
        all.sort_unstable();
        assert_eq!(sent, all, "every JSON field, each under its shared name");

        let sds = HeartbeatConfig {
            protocol: Protocol::Sds,
            ..config
        };
        let form = upload_body(&sds, &report, 1, &health, ip).remove(0);
        let (_, client) = form_urlencoded::parse(&form)
            .find(|(k, _)| k == "client")
            .unwrap();
        let client: Value = serde_json::from_str(&client).unwrap();
        let point = client["pointInfoMap"]["p"].as_object().unwrap();
        let mut sent: Vec<&str> = point.keys().map(String::as_str).collect();
        let mut all = SDS_POINT.all();
        sent.sort_unstable();
        all.sort_unstable();
        assert_eq!(sent, all, "every SDS field, each under its shared name");
    }

    #[test]
    fn key_texts_are_sent_without_control_characters_and_short() {
        assert_eq!(wire_key("vip-42"), "vip-42");
        assert_eq!(wire_key("a\nb\u{1b}"), "a\\u{a}b\\u{1b}");
        let cut = wire_key(&"\u{0}".repeat(30));
        assert!(cut.len() <= WIRE_KEY_MAX && cut.ends_with('…'), "{cut}");
        assert_eq!(wire_key(&"é".repeat(32)), "é".repeat(32));
        assert!(wire_key(&"é".repeat(40)).len() <= WIRE_KEY_MAX);
    }

    #[test]
    fn sds_fields_are_translated() {
        let f = from_sds(&[json!({
            "point": "p", "visitThreshold": 40, "concurrentThreshold": -1,
            "exceptionThreshold": null, "exceptionRateThreshold": 50, "exceptionRateStart": 10,
            "timeoutThreshold": 200, "timeoutCountThreshold": 3,
            "tokenBucketGeneratedTokensInSecond": 5, "tokenBucketSize": 20,
            "delayTime": 10000, "retryInterval": 1000, "downgradeRate": 80,
            "returnValueStr": null, "pressureTestDowngrade": 0
        })])
        .unwrap();
        let p = &f.points["p"].policy;
        assert_eq!(p.max_visits(), Some(40));
        assert_eq!(p.max_concurrency(), None);
        assert_eq!(p.max_exceptions(), None);
        assert_eq!(
            p.exception_rate().map(|r| (r.rate, r.min_visits)),
            Some((0.5, 10))
        );
        let t = p.timeouts().unwrap();
        assert_eq!((t.threshold, t.max_count), (Duration::from_millis(200), 3));
        let b = p.token_bucket().unwrap();
        assert_eq!((b.rate, b.capacity), (20.0, 20));
        let d = p.delay().unwrap();
        assert_eq!(
            (d.duration, d.retry_interval),
            (Duration::from_secs(10), Some(Duration::from_secs(1)))
        );
        assert_eq!(p.downgrade_percentage(), 80);
    }

    #[test]
    fn our_full_settings_win_and_bad_strategies_name_the_field() {
        let f = from_sds(&[json!({"point": "p", "visitThreshold": 1,
                                  "resiliencePolicy": {"max_visits": 7, "shadow": true}})])
        .unwrap();
        assert_eq!(
            f,
            file(json!({"points": {"p": {"max_visits": 7, "shadow": true}}}))
        );
        let e = from_sds(&[
            json!({"point": "p", "visitThreshold": "many"}),
            json!({"visitThreshold": 1}),
        ])
        .unwrap_err();
        let fields: Vec<_> = e
            .problems()
            .iter()
            .map(|p| p.field.clone().unwrap())
            .collect();
        assert_eq!(fields, ["visitThreshold", "strategies[1].point"]);
        // Values the runtime refuses are reported by its own checks.
        let e = from_sds(&[json!({"point": "p", "delayTime": 5000, "retryInterval": 9000})])
            .unwrap_err();
        assert_eq!(e.problems()[0].point.as_deref(), Some("p"));
    }

    /// The address sent, and a client of SDS's protocol with a 64 KiB body limit.
    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn sds_config() -> (HeartbeatConfig, usize) {
        let limit = 64 * 1024;
        let config = HeartbeatConfig::builder("g", "a", "http://127.0.0.1:1")
            .protocol(Protocol::Sds)
            .max_body_bytes(limit)
            .build()
            .unwrap();
        (config, limit)
    }

    /// The `client` object of an SDS form body.
    fn sds_client(form: &[u8]) -> Value {
        let (_, client) = form_urlencoded::parse(form)
            .find(|(k, _)| k == "client")
            .unwrap();
        serde_json::from_str(&client).unwrap()
    }

    /// An SDS upload too big for one body goes in parts, each an SDS heartbeat within
    /// the limit (as form-encoded) with its share of `pointInfoMap` and of the lists;
    /// one that fits is one body, as SDS sends it, without part fields.
    #[test]
    fn sds_uploads_are_split_within_the_body_limit() {
        let names: Vec<&'static str> = (0..3_000)
            .map(|i| &*Box::leak(format!("sds.point-{i:04}").into_boxed_str()))
            .collect();
        let report = Report {
            cycle_start_ms: 10_000,
            points: names
                .iter()
                .map(|n| PointReport {
                    name: n,
                    visits: 3,
                    ..PointReport::default()
                })
                .collect(),
            known: names.clone(),
            declared: names[..10].to_vec(),
            enforcing: vec![json!({"name": names[0]})],
        };
        let health = HeartbeatStatus::default();
        let (config, limit) = sds_config();
        let bodies = upload_body(&config, &report, 1, &health, IP);
        assert!(bodies.len() > 3, "{} bodies", bodies.len());
        let (mut points, mut known) = (BTreeSet::new(), 0);
        for (k, body) in bodies.iter().enumerate() {
            assert!(body.len() <= limit, "part {k}: {} bytes", body.len());
            let client = sds_client(body);
            assert_eq!(
                (client["part"].as_u64(), client["parts"].as_u64()),
                (Some(k as u64), Some(bodies.len() as u64))
            );
            assert_eq!(client["statisticsCycleTime"], 20_000);
            for (name, point) in client["pointInfoMap"].as_object().unwrap() {
                assert_eq!(point["visitNum"], 3);
                assert!(points.insert(name.clone()), "{name} twice");
            }
            known += client["knownPoints"].as_array().unwrap().len();
        }
        assert_eq!(points.len(), names.len());
        assert_eq!(known, names.len());

        let small = Report {
            points: report.points[..5].to_vec(),
            known: names[..5].to_vec(),
            ..report
        };
        let bodies = upload_body(&config, &small, 1, &health, IP);
        assert_eq!(bodies.len(), 1);
        let client = sds_client(&bodies[0]);
        assert!(
            client.get("part").is_none() && client.get("parts").is_none(),
            "{client}"
        );
        assert_eq!(client["pointInfoMap"].as_object().unwrap().len(), 5);
        assert_eq!(client["declaredPoints"].as_array().unwrap().len(), 10);
    }

    /// The parts of a cycle do not depend on the local address the bodies carry:
    /// the client counts them with one address and sends them with another.
    #[test]
    fn parts_are_the_same_for_every_local_address() {
        let names: Vec<&'static str> = (0..400)
            .map(|i| &*Box::leak(format!("addr.point-{i:03}").into_boxed_str()))
            .collect();
        let health = HeartbeatStatus::default();
        let short: IpAddr = "1.2.3.4".parse().unwrap();
        let long: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        let limit = 4096;
        for protocol in [Protocol::Json, Protocol::Sds] {
            let config = HeartbeatConfig::builder("g", "a", "http://127.0.0.1:1")
                .protocol(protocol)
                .max_body_bytes(limit)
                .build()
                .unwrap();
            for n in 0..names.len() {
                let report = Report {
                    cycle_start_ms: 10_000,
                    points: Vec::new(),
                    known: names[..n].to_vec(),
                    declared: Vec::new(),
                    enforcing: Vec::new(),
                };
                let a = upload_body(&config, &report, 1, &health, short);
                let b = upload_body(&config, &report, 1, &health, long);
                assert_eq!(a.len(), b.len(), "{protocol:?}, {n} names");
                for body in a.iter().chain(&b) {
                    assert!(
                        body.len() <= limit,
                        "{protocol:?}, {n} names: {}",
                        body.len()
                    );
                }
            }
        }
    }

    /// An SDS pull whose point list would pass the body limit sends the names that
    /// fit and their count; a small one is sent whole, as SDS sends it.
    #[test]
    fn sds_pulls_fit_the_body_limit() {
        let names: Vec<&'static str> = (0..12_000)
            .map(|i| &*Box::leak(format!("sds.pull-point-{i:05}").into_boxed_str()))
            .collect();
        let (config, limit) = sds_config();
        let body = pull_body(&config, 3, &names, None, IP);
        assert!(body.len() <= limit, "{} bytes", body.len());
        let client = sds_client(&body);
        assert_eq!(client["pointsCount"], 12_000);
        let sent = client["pointList"].as_array().unwrap();
        assert!(sent.len() > 1_000, "{} names", sent.len());
        assert_eq!(sent[..], json!(names[..sent.len()]).as_array().unwrap()[..]);
        // Nearly full: another name would not have fit.
        assert!(body.len() + form_len(&json!(names[sent.len()]).to_string()) + 3 > limit - 64);

        let body = pull_body(&config, 3, &names[..3], None, IP);
        let client = sds_client(&body);
        assert_eq!(client["pointList"], json!(names[..3]));
        assert!(client.get("pointsCount").is_none());
        assert_eq!(client["version"], 3);
    }

    #[test]
    fn pull_answers() {
        let json_answer = br#"{"changed": true, "version": 4, "policy": {"points": {"a": {"max_concurrency": 2}}}}"#;
        match read_pull_answer(Protocol::Json, json_answer).unwrap() {
            PullAnswer::Changed(4, Ok(f)) => {
                assert_eq!(f.points["a"].policy.max_concurrency(), Some(2))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_pull_answer(
                Protocol::Sds,
                br#"{"changed": false, "version": 4, "strategies": null}"#
            ),
            Ok(PullAnswer::Unchanged(4))
        ));
        match read_pull_answer(
            Protocol::Sds,
            br#"{"changed": true, "version": 0, "strategies": null}"#,
        ) {
            Ok(PullAnswer::Changed(0, Ok(f))) => assert_eq!(f, PolicyFile::default()),
            other => panic!("{other:?}"),
        }
        let e = read_pull_answer(
            Protocol::Sds,
            br#"{"changed": true, "version": 1, "errorMsg": "app unknown"}"#,
        )
        .unwrap_err();
        assert!(e.contains("app unknown"), "{e}");
        assert!(read_pull_answer(Protocol::Json, b"  ").is_err());
        assert!(read_pull_answer(Protocol::Json, b"<html>").is_err());
        assert!(read_pull_answer(Protocol::Json, br#"{"changed": true}"#).is_err());
    }
}
