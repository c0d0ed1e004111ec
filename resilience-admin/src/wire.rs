//! Reading heartbeats and pulls off the wire, in both protocols, with an error that
//! names the field for everything malformed.
//!
//! Bodies are parsed into a JSON tree first and then read field by field, so a
//! mistake is reported as `points[2].visits: expected a non-negative integer, got
//! "ten"` rather than as a serde position. Unknown fields are ignored: SDS clients
//! and newer runtimes may send more than this server reads.
//!
//! # Our JSON protocol
//!
//! `POST /api/v1/heartbeat`:
//!
//! ```json
//! {"app_group": "shop", "app": "orders", "instance": "web-1-4711", "host": "web-1",
//!  "ip": "10.0.0.7", "cycle_start_ms": 1767225600000, "policy_version": 3,
//!  "points": [{"name": "order.create", "visits": 120, "passes": 100,
//!              "downgrades": 20, "exceptions": 1, "timeouts": 0,
//!              "peak_concurrency": 7, "downgrades_by_reason": {"visits": 20}}],
//!  "known_points": ["order.create", "order.cancel"],
//!  "declared_points": ["order.create", "order.cancel"]}
//! ```
//!
//! This project's client adds what each point enforces and its own health (both
//! optional: older clients send neither):
//!
//! ```json
//! {"enforcing": [{"name": "order.create", "digest": "9f2c4e1a0b3d5f67",
//!                 "origins": {"rules": {"source": "console", "version": 3},
//!                             "breaker": {"source": "file:/etc/app/policies.toml", "version": 2}},
//!                 "local": {"breaker": {"algorithm": "classic", "consecutive_failures": 5}},
//!                 "breaker": {"kind": "classic", "state": "open", "since_ms": 1767225602000,
//!                             "transitions": 2}}],
//!  "client": {"last_upload_error": null, "last_pull_error": null, "from_cache": false,
//!             "uploads_dropped": 0, "pull_failures": 0, "policies_rejected": 0}}
//! ```
//!
//! `local` holds the settings of the sections that do not come from the console (at
//! most [`MAX_LOCAL_BYTES`] of JSON per point); origins of sections this server does
//! not know are ignored.
//!
//! Per point it also sends `cancelled` (calls whose future, or whose permit, was
//! dropped before they ended) and, when the point made retrying calls, `retry`: what
//! they did since the previous report (each counter optional, 0 when absent; the
//! whole object is absent for a point without retrying calls, and from older
//! clients):
//!
//! ```json
//! {"name": "order.create", "visits": 120, "...": "...", "cancelled": 2,
//!  "retry": {"calls": 40, "attempts": 52, "retries": 12, "exhausted": 1,
//!            "refused_by_budget": 3, "hedges": 0, "cancelled": 0}}
//! ```
//!
//! A malformed `cancelled` or `retry` counter makes its point malformed (left out
//! and reported by the `*_lenient` readers).
//!
//! A point whose concurrency queue did something in the cycle also sends `queue`
//! (absent otherwise, and from older clients): the counts' growth since the
//! previous report, the calls `waiting` now, `peak_waiting` (the most ever, since
//! the process started), `wait_ns` (the total waited by the waits that ended in the
//! cycle) and `max_wait_ns` (the longest of them). Each is bounded like a count, a
//! missing one is 0, and a malformed one makes its point malformed:
//!
//! ```json
//! {"name": "order.create", "...": "...",
//!  "queue": {"waiting": 1, "peak_waiting": 4, "admitted": 30, "timed_out": 2,
//!            "cancelled": 0, "refused": 0, "full": 1, "wait_ns": 96000000,
//!            "max_wait_ns": 9000000}}
//! ```
//!
//! A point with per-key limits (a `keys` section) also sends its hottest keys and its
//! key table (absent otherwise, from older clients, and never in SDS's protocol):
//!
//! ```json
//! {"name": "order.create", "...": "...",
//!  "hot_keys": [{"key": "vip-42", "passes": 10, "refused": 2, "overridden": true}],
//!  "key_table": {"tracked": 1, "untracked_passes": 0, "untracked_refused": 0,
//!                "evictions": 0}}
//! ```
//!
//! at most [`MAX_HOT_KEYS`] keys, each a text of at most [`MAX_KEY_TEXT_LEN`] bytes
//! without control characters; `passes`, `refused` and the table's figures are
//! running totals (since the instance tracks the key), a missing one 0, `overridden`
//! missing `false`. A malformed `hot_keys` or `key_table` is left out of its point
//! (the rest of the point kept) and reported by the `*_lenient` readers.
//!
//! It also adds, per point, the cycle's ten 1-second buckets (optional too: without
//! them the point has no per-second figures for the cycle):
//!
//! ```json
//! {"name": "order.create", "visits": 120, "...": "...",
//!  "seconds": [[12, 10, 2, 0, 0], [9, 9, 0, 1, 0], "... ten in all"],
//!  "seconds_by_reason": {"visits": [2, 0, 0, 0, 0, 0, 0, 0, 0, 0]},
//!  "seconds_durations": [[10, 23500, 4100], [9, 18000, 2500], "... ten in all"]}
//! ```
//!
//! `seconds[k]` is `[visits, passes, downgrades, exceptions, timeouts]` of the second
//! starting `k` seconds after `cycle_start_ms`; `seconds_by_reason` lists, for the
//! reasons with a downgrade in the cycle, the downgrades of each second (at most
//! [`MAX_SECOND_REASONS`] reasons). `seconds_durations[k]` is `[measured, sum_us,
//! max_us]` of the same second: the calls whose duration was measured (those under a
//! policy that ended in it), the sum of their durations and the longest one, in
//! microseconds. It is absent when no call of the point was measured in the cycle
//! (and older clients never send it): the seconds then have no durations. A
//! malformed `seconds_durations` is left out and reported by the `*_lenient`
//! readers, the rest of its point kept.
//!
//! A cycle too big for one body comes in parts: `"part": k, "parts": n` (`k` from 0,
//! `n` at most [`MAX_PARTS`]), each part with its share of the four lists. A
//! malformed entry of a list is left out and reported by the `*_lenient` readers;
//! the envelope is all or nothing.
//!
//! `POST /api/v1/pull`: `{"app_group", "app", "instance", "host", "ip", "version"}`.
//!
//! # SDS's protocol
//!
//! `POST /sds/heartbeat/add` and `POST /sds/heartbeat/pullstrategy`, form-encoded,
//! one field `client` holding SDS's `HeartbeatRequest` JSON: `appGroupName`,
//! `appName`, `ip`, `hostname`, `statisticsCycleTime` (the END of the reported
//! cycle, ms), `pointInfoMap` (`point -> {visitNum, exceptionNum, concurrentNum,
//! timeoutNum, downgradeNum}`), or for a pull `version` and `pointList`. This
//! project's client adds `instanceId`, `declaredPoints`, `knownPoints`, `enforcing`,
//! `client` (the same as in our JSON protocol), `part` and `parts` for a cycle sent in
//! parts (as in our protocol: each part has its share of `pointInfoMap` and of the
//! lists; a cycle that fits in one body has neither field), `pointsCount` on a pull
//! whose `pointList` was cut to fit the body limit, and, per point, `cancelledNum`,
//! `retry` and `queue` (the same as `cancelled`, `retry` and `queue`),
//! `downgradeReasons`, `seconds`, `secondsByReason` and `secondsDurations` (the same
//! as `seconds`, `seconds_by_reason` and `seconds_durations`, index 0 being the
//! second starting at `statisticsCycleTime - 10000`); SDS's admin ignores them.

// Field names of one point's counts in each protocol: the runtime's table, which its
// heartbeat client writes with.
use crate::fields::{
    PointFields as CountFields, JSON_POINT as JSON_FIELDS, SDS_POINT as SDS_FIELDS,
};
use crate::model::{
    AppKey, BreakerReport, ClientHealth, CycleSeconds, Enforcing, Heartbeat, HotKey,
    KeyTableCounts, PointCycle, PointKeys, Protocol, QueueCounts, RetryCounts, SecondCounts,
    SectionOrigin, CYCLE_MS, MAX_COUNT, MAX_ERROR_LEN, MAX_HOT_KEYS, MAX_KEY_TEXT_LEN,
    MAX_LOCAL_BYTES, MAX_NAME_LEN, MAX_PARTS, MAX_POINTS_PER_HEARTBEAT, MAX_SECOND_REASONS,
    MAX_SOURCE_LEN, SECONDS_PER_CYCLE,
};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One malformed field of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InputError {
    /// The field's path (`points[2].visits`, `client.appName`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A policy pull, read from either protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    /// The app.
    pub app: AppKey,
    /// The instance id.
    pub instance: String,
    /// Its host name.
    pub host: String,
    /// Its IP address.
    pub ip: String,
    /// The version it holds (0: none).
    pub version: u64,
}

/// What the server knows when it reads a heartbeat.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The server's wall clock, ms since the Unix epoch.
    pub now_ms: i64,
    /// Cycles that started before this are beyond the retention limit.
    pub oldest_ms: i64,
    /// The peer's address, used when the request does not give an IP.
    pub peer_ip: &'a str,
}

/// How far in the future a cycle may start (clock skew between hosts).
const MAX_SKEW_MS: i64 = 60_000;

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let short: String = s.chars().take(40).collect();
            format!("the string {short:?}")
        }
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Reads the fields of one JSON object, collecting errors.
struct Reader<'a, 'e> {
    obj: &'a Map<String, Value>,
    path: String,
    errors: &'e mut Vec<InputError>,
}

impl<'a, 'e> Reader<'a, 'e> {
    fn root(v: &'a Value, path: &str, errors: &'e mut Vec<InputError>) -> Option<Self> {
        match v {
            Value::Object(obj) => Some(Reader {
                obj,
                path: path.to_owned(),
                errors,
            }),
            other => {
                errors.push(InputError {
                    field: if path.is_empty() {
                        "body".into()
                    } else {
                        path.into()
                    },
                    message: format!("expected a JSON object, got {}", describe(other)),
                });
                None
            }
        }
    }

    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn error(&mut self, field: String, message: impl Into<String>) {
        self.errors.push(InputError {
            field,
            message: message.into(),
        });
    }

    /// A present, non-null value.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    /// A required name.
    fn name(&mut self, key: &str) -> Option<String> {
        match self.get(key) {
            None => {
                let f = self.field(key);
                self.error(f, "is missing");
                None
            }
            Some(v) => self.name_value(self.field(key), v),
        }
    }

    /// An optional name, or `default`.
    fn name_or(&mut self, key: &str, default: &str) -> Option<String> {
        match self.get(key) {
            None => Some(default.to_owned()),
            Some(v) => self.name_value(self.field(key), v),
        }
    }

    fn name_value(&mut self, field: String, v: &Value) -> Option<String> {
        let Value::String(s) = v else {
            self.error(field, format!("expected a string, got {}", describe(v)));
            return None;
        };
        match check_name(s) {
            Ok(()) => Some(s.clone()),
            Err(message) => {
                self.error(field, message);
                None
            }
        }
    }

    /// A count: a non-negative integer up to [`MAX_COUNT`]; missing means 0.
    fn count(&mut self, key: &str) -> Option<u64> {
        match self.get(key) {
            None => Some(0),
            Some(v) => self.count_value(self.field(key), v),
        }
    }

    fn count_value(&mut self, field: String, v: &Value) -> Option<u64> {
        match v.as_u64() {
            Some(n) if n <= MAX_COUNT => Some(n),
            Some(n) => {
                self.error(
                    field,
                    format!("{n} is above the limit of {MAX_COUNT} per cycle"),
                );
                None
            }
            None => {
                self.error(
                    field,
                    format!("expected a non-negative integer, got {}", describe(v)),
                );
                None
            }
        }
    }

    /// An optional count: `Some(None)` when absent, `None` when malformed.
    fn optional_count(&mut self, key: &str) -> Option<Option<u64>> {
        match self.get(key) {
            None => Some(None),
            Some(v) => self.count_value(self.field(key), v).map(Some),
        }
    }

    /// A running total (a counter since the process started): a non-negative integer
    /// that fits the database's 64-bit integers; missing means 0.
    fn counter(&mut self, key: &str) -> Option<u64> {
        match self.get(key) {
            None => Some(0),
            Some(v) => match v.as_u64() {
                Some(n) if i64::try_from(n).is_ok() => Some(n),
                _ => {
                    let f = self.field(key);
                    self.error(
                        f,
                        format!("expected a non-negative integer, got {}", describe(v)),
                    );
                    None
                }
            },
        }
    }

    /// An optional error text, its control characters escaped (`\u{0}`: it is
    /// only shown) and cut to [`MAX_ERROR_LEN`] bytes: `Some(None)` when absent or
    /// null.
    fn error_text(&mut self, key: &str) -> Option<Option<String>> {
        match self.get(key) {
            None => Some(None),
            Some(Value::String(s)) => {
                let s = &crate::policy::escape_controls(s);
                let mut end = s.len().min(MAX_ERROR_LEN);
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                Some(Some(s[..end].to_owned()))
            }
            Some(other) => {
                let f = self.field(key);
                self.error(
                    f,
                    format!("expected a string or null, got {}", describe(other)),
                );
                None
            }
        }
    }

    /// Records that the list of points at `key` holds `n` points, more than a
    /// heartbeat may.
    fn too_many_points<T>(&mut self, key: &str, n: usize) -> Option<T> {
        let f = self.field(key);
        self.error(
            f,
            format!("{n} points, more than the limit of {MAX_POINTS_PER_HEARTBEAT}"),
        );
        None
    }

    /// `part` and `parts`: which part of a cycle sent in several bodies this is;
    /// `(0, 1)` when both are absent (the cycle in one body).
    fn part(&mut self, part_key: &str, parts_key: &str) -> Option<(u32, u32)> {
        let limit = |v: &Value, max: u64| v.as_u64().filter(|&n| n <= max);
        match (self.get(part_key), self.get(parts_key)) {
            (None, None) => Some((0, 1)),
            (Some(_), None) => {
                let f = self.field(parts_key);
                self.error(f, format!("is missing (`{part_key}` is given)"));
                None
            }
            (None, Some(_)) => {
                let f = self.field(part_key);
                self.error(f, format!("is missing (`{parts_key}` is given)"));
                None
            }
            (Some(k), Some(n)) => {
                let Some(n) = limit(n, u64::from(MAX_PARTS)).filter(|&n| n >= 1) else {
                    let f = self.field(parts_key);
                    self.error(
                        f,
                        format!(
                            "expected an integer in 1..={MAX_PARTS}, got {}",
                            describe(n)
                        ),
                    );
                    return None;
                };
                let Some(k) = limit(k, n - 1) else {
                    let f = self.field(part_key);
                    self.error(
                        f,
                        format!(
                            "expected an integer in 0..{n} (the part of {n}), got {}",
                            describe(k)
                        ),
                    );
                    return None;
                };
                // Both at most MAX_PARTS.
                Some((k as u32, n as u32))
            }
        }
    }

    /// A required integer time in ms.
    fn time(&mut self, key: &str) -> Option<i64> {
        match self.get(key) {
            None => {
                let f = self.field(key);
                self.error(f, "is missing");
                None
            }
            Some(v) => match v.as_i64() {
                Some(t) if t >= 0 => Some(t),
                _ => {
                    let f = self.field(key);
                    self.error(
                        f,
                        format!(
                            "expected a time in milliseconds since the Unix epoch, got {}",
                            describe(v)
                        ),
                    );
                    None
                }
            },
        }
    }

    /// An optional list of names.
    fn names(&mut self, key: &str) -> Option<Vec<String>> {
        let Some(v) = self.get(key) else {
            return Some(Vec::new());
        };
        let Value::Array(items) = v else {
            let f = self.field(key);
            self.error(f, format!("expected a list of names, got {}", describe(v)));
            return None;
        };
        if items.len() > MAX_POINTS_PER_HEARTBEAT {
            let f = self.field(key);
            self.error(
                f,
                format!(
                    "{} names, more than the limit of {MAX_POINTS_PER_HEARTBEAT}",
                    items.len()
                ),
            );
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.name_value(format!("{}[{i}]", self.field(key)), item) {
                Some(name) => out.push(name),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn child(&mut self, key: &str, v: &'a Value) -> Option<Reader<'a, '_>> {
        let path = self.field(key);
        Reader::root(v, &path, self.errors)
    }
}

/// The rules for app, instance, host and point names, the runtime's point-name rule
/// ([`resilience_runtime::check_point_name`]): not blank, no leading or trailing
/// whitespace, at most [`MAX_NAME_LEN`] bytes, no control characters.
pub fn check_name(s: &str) -> Result<(), String> {
    match resilience_runtime::NameProblem::of(s) {
        None => Ok(()),
        Some(resilience_runtime::NameProblem::TooLong) => Err(format!(
            "is {} bytes long, more than the limit of {MAX_NAME_LEN}",
            s.len()
        )),
        Some(problem) => Err(problem.text().to_owned()),
    }
}

/// Reason names are short snake-case words (`visits`, `exception_rate`).
fn check_reason(s: &str) -> Result<(), String> {
    if s.is_empty()
        || s.len() > 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        Err(format!(
            "reason {:?} is not a snake_case name of at most 64 characters",
            s.chars().take(70).collect::<String>()
        ))
    } else {
        Ok(())
    }
}

/// Checks the cycle start against the server's clock and the retention limit.
fn check_cycle(r: &mut Reader<'_, '_>, field: &str, start: i64, ctx: &Context<'_>) -> bool {
    let f = r.field(field);
    if start % CYCLE_MS != 0 {
        r.error(
            f,
            format!("{start} is not the start of a 10-second cycle (a multiple of {CYCLE_MS})"),
        );
        false
    } else if start > ctx.now_ms + MAX_SKEW_MS {
        r.error(
            f,
            format!(
                "{start} is in the future (the server's clock reads {}); check the clocks",
                ctx.now_ms
            ),
        );
        false
    } else if start < ctx.oldest_ms {
        r.error(
            f,
            format!(
                "{start} is older than the retention limit ({})",
                ctx.oldest_ms
            ),
        );
        false
    } else {
        true
    }
}

/// Per-reason counts: an object of reason -> count whose sum is at most `downgrades`.
fn read_reasons(
    r: &mut Reader<'_, '_>,
    key: &str,
    downgrades: Option<u64>,
) -> Option<BTreeMap<String, u64>> {
    let Some(v) = r.get(key) else {
        return Some(BTreeMap::new());
    };
    let field = r.field(key);
    let Value::Object(m) = v else {
        r.error(
            field,
            format!("expected an object of reason -> count, got {}", describe(v)),
        );
        return None;
    };
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (reason, count) in m {
        if let Err(message) = check_reason(reason) {
            r.error(field.clone(), message);
            ok = false;
            continue;
        }
        match r.count_value(format!("{field}.{reason}"), count) {
            Some(n) => {
                out.insert(reason.clone(), n);
            }
            None => ok = false,
        }
    }
    if !ok {
        return None;
    }
    let sum: u64 = out.values().sum();
    if let Some(d) = downgrades {
        if sum > d {
            r.error(
                field,
                format!("the reasons add up to {sum}, more than the {d} downgrades"),
            );
            return None;
        }
    }
    Some(out)
}

fn finish<T>(value: Option<T>, errors: Vec<InputError>) -> Result<T, Vec<InputError>> {
    match value {
        Some(v) if errors.is_empty() => Ok(v),
        _ if errors.is_empty() => Err(vec![InputError {
            field: "body".into(),
            message: "malformed request".into(),
        }]),
        _ => Err(errors),
    }
}

/// Reads a heartbeat of our JSON protocol.
///
/// # Errors
///
/// Every malformed field, by path.
pub fn json_heartbeat(v: &Value, ctx: &Context<'_>) -> Result<Heartbeat, Vec<InputError>> {
    let mut errors = Vec::new();
    let hb = read_json_heartbeat(v, ctx, &mut errors);
    finish(hb, errors)
}

fn read_json_heartbeat(
    v: &Value,
    ctx: &Context<'_>,
    errors: &mut Vec<InputError>,
) -> Option<Heartbeat> {
    let mut r = Reader::root(v, "", errors)?;
    // Read in this order, so that errors are listed in it.
    let parts = Parts {
        group: r.name("app_group"),
        app: r.name("app"),
        instance: r.name("instance"),
        host: r.name_or("host", ""),
        ip: r.name_or("ip", ctx.peer_ip),
        start: r
            .time("cycle_start_ms")
            .filter(|&s| check_cycle(&mut r, "cycle_start_ms", s, ctx)),
        version: r.optional_count("policy_version"),
        part: r.part("part", "parts"),
        known: r.names("known_points"),
        declared: r.names("declared_points"),
        points: json_points(&mut r),
        enforcing: read_enforcing(&mut r, "enforcing"),
        client: read_client_health(&mut r, "client"),
    };
    parts.heartbeat(Protocol::Json)
}

fn json_points(r: &mut Reader<'_, '_>) -> Option<Vec<PointCycle>> {
    match r.get("points") {
        None => Some(Vec::new()),
        Some(Value::Array(items)) if items.len() > MAX_POINTS_PER_HEARTBEAT => {
            r.too_many_points("points", items.len())
        }
        Some(Value::Array(items)) => {
            let mut out: Vec<PointCycle> = Vec::with_capacity(items.len());
            let mut ok = true;
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let key = format!("points[{i}]");
                match r.child(&key, item).and_then(|mut p| {
                    let name = p.name("name");
                    read_point_counts(&mut p, name, JSON_FIELDS)
                }) {
                    // Every repetition is named (at its own index), whatever else is
                    // malformed, so that the valid points can be told apart.
                    Some(point) if !seen.insert(point.point.clone()) => {
                        let f = format!("{}.name", r.field(&key));
                        r.error(f, format!("point {:?} is reported twice", point.point));
                        ok = false;
                    }
                    Some(point) => out.push(point),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
        Some(other) => {
            let f = r.field("points");
            r.error(
                f,
                format!("expected a list of points, got {}", describe(other)),
            );
            None
        }
    }
}

/// The fields of a heartbeat as read, in either protocol; `None` where a field was
/// malformed (its error is already recorded).
struct Parts {
    group: Option<String>,
    app: Option<String>,
    instance: Option<String>,
    host: Option<String>,
    ip: Option<String>,
    /// The cycle's start, `None` also when it was refused by `check_cycle`.
    start: Option<i64>,
    points: Option<Vec<PointCycle>>,
    known: Option<Vec<String>>,
    declared: Option<Vec<String>>,
    version: Option<Option<u64>>,
    part: Option<(u32, u32)>,
    enforcing: Option<Option<Vec<Enforcing>>>,
    client: Option<Option<ClientHealth>>,
}

impl Parts {
    /// The heartbeat, if every field was well formed.
    fn heartbeat(self, protocol: Protocol) -> Option<Heartbeat> {
        let (part, parts) = self.part?;
        Some(Heartbeat {
            app: AppKey::new(self.group?, self.app?),
            instance: self.instance?,
            host: self.host?,
            ip: self.ip?,
            protocol,
            cycle_start_ms: self.start?,
            points: self.points?,
            known_points: self.known?,
            declared_points: self.declared?,
            policy_version: self.version?,
            enforcing: self.enforcing?,
            client: self.client?,
            part,
            parts,
        })
    }
}

fn read_point_counts(
    p: &mut Reader<'_, '_>,
    name: Option<String>,
    f: CountFields,
) -> Option<PointCycle> {
    let visits = p.count(f.visits);
    let downgrades = p.count(f.downgrades);
    let exceptions = p.count(f.exceptions);
    let timeouts = p.count(f.timeouts);
    let cancelled = p.count(f.cancelled);
    let peak = p.count(f.concurrency);
    let reasons = read_reasons(p, f.reasons, downgrades);
    let retry = read_retry(p, f.retry);
    let queue = read_queue(p, f.queue);
    let seconds = read_seconds(p, &f);
    let keys = read_keys(p, &f);
    let (visits, downgrades) = (visits?, downgrades?);
    if downgrades > visits {
        let field = p.field(f.downgrades);
        p.error(
            field,
            format!("{downgrades} downgrades but only {visits} visits (visits include downgraded calls)"),
        );
        return None;
    }
    let passes = visits - downgrades;
    if let Some(key) = f.passes {
        if let Some(v) = p.get(key) {
            let given = p.count_value(p.field(key), v)?;
            if given != passes {
                let field = p.field(key);
                p.error(
                    field,
                    format!("{given} passes, but visits - downgrades = {passes}"),
                );
                return None;
            }
        }
    }
    Some(PointCycle {
        point: name?,
        visits,
        passes,
        downgrades,
        exceptions: exceptions?,
        timeouts: timeouts?,
        cancelled: cancelled?,
        peak_concurrency: peak?,
        downgrades_by_reason: reasons?,
        seconds: seconds?,
        retry: retry?,
        queue: queue?,
        keys,
    })
}

/// A point's hot keys (`hot_keys`: at most [`MAX_HOT_KEYS`] objects `{"key",
/// "passes", "refused", "overridden"}`, the key a text of at most
/// [`MAX_KEY_TEXT_LEN`] bytes without control characters, the counts running totals,
/// a missing one 0, `overridden` a boolean, missing: false) and key table
/// (`key_table`: `{"tracked", "untracked_passes", "untracked_refused", "evictions"}`,
/// running totals, a missing one 0). Fields this server does not know are ignored.
/// `None` when the point has neither (an older client, SDS's protocol) or when one
/// is malformed: that is reported, and the lenient readers leave out only the
/// malformed field of the point (see `lenient`).
fn read_keys(p: &mut Reader<'_, '_>, f: &CountFields) -> Option<PointKeys> {
    let (Some(keys_key), Some(table_key)) = (f.hot_keys, f.key_table) else {
        return None;
    };
    let keys = p.get(keys_key);
    let table = p.get(table_key);
    if keys.is_none() && table.is_none() {
        return None;
    }
    let before = p.errors.len();
    let mut out = PointKeys::default();
    if let Some(v) = keys {
        let field = p.field(keys_key);
        match v {
            Value::Array(items) if items.len() > MAX_HOT_KEYS => p.error(
                field,
                format!(
                    "{} keys, more than the limit of {MAX_HOT_KEYS} per point",
                    items.len()
                ),
            ),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let Some(k) = read_hot_key(p, &format!("{keys_key}[{i}]"), item) {
                        out.hot_keys.push(k);
                    }
                }
            }
            other => p.error(
                field,
                format!(
                    "expected a list of at most {MAX_HOT_KEYS} keys \
                     {{\"key\", \"passes\", \"refused\", \"overridden\"}}, got {}",
                    describe(other)
                ),
            ),
        }
    }
    if let Some(v) = table {
        if v.is_object() {
            let mut t = p.child(table_key, v)?;
            let counts = [
                t.counter("tracked"),
                t.counter("untracked_passes"),
                t.counter("untracked_refused"),
                t.counter("evictions"),
            ];
            if let [Some(tracked), Some(untracked_passes), Some(untracked_refused), Some(evictions)] =
                counts
            {
                out.key_table = Some(KeyTableCounts {
                    tracked,
                    untracked_passes,
                    untracked_refused,
                    evictions,
                });
            }
        } else {
            let field = p.field(table_key);
            p.error(
                field,
                format!(
                    "expected an object {{\"tracked\", \"untracked_passes\", \
                     \"untracked_refused\", \"evictions\"}}, got {}",
                    describe(v)
                ),
            );
        }
    }
    (p.errors.len() == before).then_some(out)
}

/// One entry of `hot_keys`.
fn read_hot_key<'a>(p: &mut Reader<'a, '_>, key: &str, v: &'a Value) -> Option<HotKey> {
    let mut k = p.child(key, v)?;
    let text = match k.get("key") {
        None => {
            let f = k.field("key");
            k.error(f, "is missing");
            None
        }
        Some(Value::String(s)) if s.len() > MAX_KEY_TEXT_LEN => {
            let f = k.field("key");
            k.error(
                f,
                format!(
                    "is {} bytes long, more than the limit of {MAX_KEY_TEXT_LEN}",
                    s.len()
                ),
            );
            None
        }
        Some(Value::String(s)) if s.chars().any(char::is_control) => {
            let f = k.field("key");
            k.error(f, "must not contain control characters");
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            let f = k.field("key");
            k.error(f, format!("expected a string, got {}", describe(other)));
            None
        }
    };
    let passes = k.counter("passes");
    let refused = k.counter("refused");
    let overridden = match k.get("overridden") {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            let f = k.field("overridden");
            k.error(f, format!("expected a boolean, got {}", describe(other)));
            None
        }
    };
    Some(HotKey {
        key: text?,
        passes: passes?,
        refused: refused?,
        overridden: overridden?,
    })
}

/// The counters of a retry report, in the order of [`RetryCounts::to_array`].
const RETRY_FIELDS: [&str; 7] = [
    "calls",
    "attempts",
    "retries",
    "exhausted",
    "refused_by_budget",
    "hedges",
    "cancelled",
];

/// A point's retry counters (`retry`: an object of [`RETRY_FIELDS`], each a count
/// bounded like a cycle's, a missing one 0; counters this server does not know are
/// ignored); all 0 when the point has none (it made no retrying call, or an older
/// client). The counters are not compared with each other nor with the cycle's: the
/// runtime reads them at another moment than the cycle's figures.
fn read_retry(p: &mut Reader<'_, '_>, key: &str) -> Option<RetryCounts> {
    let Some(v) = p.get(key) else {
        return Some(RetryCounts::default());
    };
    if !v.is_object() {
        let field = p.field(key);
        p.error(
            field,
            format!(
                "expected an object of retry counters ({}), got {}",
                RETRY_FIELDS.join(", "),
                describe(v)
            ),
        );
        return None;
    }
    let mut r = p.child(key, v)?;
    let mut out = [0; 7];
    let mut ok = true;
    for (i, name) in RETRY_FIELDS.iter().enumerate() {
        match r.count(name) {
            Some(n) => out[i] = n,
            None => ok = false,
        }
    }
    ok.then(|| RetryCounts::from_array(out))
}

/// The fields of a queue report, in the order of [`QueueCounts::to_array`].
const QUEUE_FIELDS: [&str; 10] = [
    "waiting",
    "peak_waiting",
    "admitted",
    "timed_out",
    "cancelled",
    "refused",
    "full",
    "wait_ns",
    "max_wait_ns",
    "evicted",
];

/// A point's concurrency queue (`queue`: an object of [`QUEUE_FIELDS`], each a count
/// bounded like a cycle's, a missing one 0; fields this server does not know are
/// ignored); `Some(None)` when the point has none (no queue, a queue that did nothing
/// in the cycle, or an older client). Like the retry counters, the figures are not
/// compared with each other nor with the cycle's: the runtime reads the longest wait
/// at another moment than the counters.
fn read_queue(p: &mut Reader<'_, '_>, key: &str) -> Option<Option<QueueCounts>> {
    let Some(v) = p.get(key) else {
        return Some(None);
    };
    if !v.is_object() {
        let field = p.field(key);
        p.error(
            field,
            format!(
                "expected an object of queue figures ({}), got {}",
                QUEUE_FIELDS.join(", "),
                describe(v)
            ),
        );
        return None;
    }
    let mut r = p.child(key, v)?;
    let mut out = [0; 10];
    let mut ok = true;
    for (i, name) in QUEUE_FIELDS.iter().enumerate() {
        match r.count(name) {
            Some(n) => out[i] = n,
            None => ok = false,
        }
    }
    ok.then(|| Some(QueueCounts::from_array(out)))
}

/// The cycle's ten 1-second buckets (`seconds`: ten `[visits, passes, downgrades,
/// exceptions, timeouts]`) and their downgrades per reason (`seconds_by_reason`:
/// reason -> ten counts), with their call durations (`seconds_durations`, see
/// [`read_durations`]; malformed ones are reported but do not make the seconds
/// `None`); `Some(None)` when the point has no `seconds`.
///
/// Every count is bounded like a cycle's, and each second's passes are its visits
/// minus its downgrades. The sums are not compared with the cycle's figures: the
/// runtime samples its per-second series a little after each second ends (about
/// 20 ms on the system clock), so the last second of a cycle may hold calls of the
/// first milliseconds of the next one, while a point's cycle under a policy is
/// counted exactly at the boundary.
fn read_seconds(p: &mut Reader<'_, '_>, f: &CountFields) -> Option<Option<CycleSeconds>> {
    let by_reason = p.get(f.seconds_by_reason);
    let Some(v) = p.get(f.seconds) else {
        if p.get(f.durations).is_some() {
            // Reported (and so left out by the lenient readers), the point kept.
            let field = p.field(f.durations);
            p.error(
                field,
                format!("is given without `{}`, the seconds it details", f.seconds),
            );
        }
        if by_reason.is_some() {
            let field = p.field(f.seconds_by_reason);
            p.error(
                field,
                format!("is given without `{}`, the seconds it details", f.seconds),
            );
            return None;
        }
        return Some(None);
    };
    let field = p.field(f.seconds);
    let items = match v {
        Value::Array(items) if items.len() == SECONDS_PER_CYCLE => items,
        Value::Array(items) => {
            p.error(
                field,
                format!(
                    "expected the cycle's {SECONDS_PER_CYCLE} one-second buckets, got {} entries",
                    items.len()
                ),
            );
            return None;
        }
        other => {
            p.error(
                field,
                format!(
                    "expected a list of {SECONDS_PER_CYCLE} buckets \
                     [visits, passes, downgrades, exceptions, timeouts], got {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let mut out = CycleSeconds::default();
    let mut ok = true;
    for (k, item) in items.iter().enumerate() {
        let at = format!("{field}[{k}]");
        let Some(n) = five_counts(p, &at, item) else {
            ok = false;
            continue;
        };
        let [visits, passes, downgrades, exceptions, timeouts] = n;
        if downgrades > visits || passes != visits - downgrades {
            p.error(
                at,
                format!(
                    "{visits} visits, {passes} passes and {downgrades} downgrades: \
                     passes must be visits - downgrades"
                ),
            );
            ok = false;
            continue;
        }
        out.seconds[k] = SecondCounts {
            visits,
            passes,
            downgrades,
            exceptions,
            timeouts,
            ..SecondCounts::default()
        };
    }
    for (i, column) in ["visits", "passes", "downgrades", "exceptions", "timeouts"]
        .iter()
        .enumerate()
    {
        let sum: u64 = out.seconds.iter().map(|s| second_value(s, i)).sum();
        if ok && sum > MAX_COUNT {
            p.error(
                field.clone(),
                format!("the seconds' {column} add up to {sum}, above the limit of {MAX_COUNT} per cycle"),
            );
            ok = false;
        }
    }
    if let Some(v) = by_reason {
        match read_seconds_by_reason(p, f.seconds_by_reason, v) {
            Some(m) => out.downgrades_by_reason = m,
            None => ok = false,
        }
    }
    // Malformed durations are reported but do not make the seconds malformed: the
    // lenient readers leave out only them (see `lenient`).
    if let Some(v) = p.get(f.durations) {
        if let Some(durations) = read_durations(p, f.durations, v) {
            for (s, [measured, sum_us, max_us]) in out.seconds.iter_mut().zip(durations) {
                s.measured = measured;
                s.sum_us = sum_us;
                s.max_us = max_us;
            }
        }
    }
    ok.then_some(Some(out))
}

/// The ten seconds' call durations (`seconds_durations`: ten `[measured, sum_us,
/// max_us]`). Each is bounded like a count, and so are the cycle's sums of
/// `measured` and of `sum_us` (so that sums over instances fit the database's
/// integers); the longest call is at most the sum of them, and a second without a
/// measured call has neither.
fn read_durations(
    p: &mut Reader<'_, '_>,
    key: &str,
    v: &Value,
) -> Option<[[u64; 3]; SECONDS_PER_CYCLE]> {
    let field = p.field(key);
    let items = match v {
        Value::Array(items) if items.len() == SECONDS_PER_CYCLE => items,
        other => {
            p.error(
                field,
                format!(
                    "expected the cycle's {SECONDS_PER_CYCLE} seconds \
                     [measured, sum_us, max_us], got {}",
                    match other {
                        Value::Array(n) => format!("{} entries", n.len()),
                        v => describe(v),
                    }
                ),
            );
            return None;
        }
    };
    let mut out = [[0; 3]; SECONDS_PER_CYCLE];
    let mut ok = true;
    for (k, item) in items.iter().enumerate() {
        let at = format!("{field}[{k}]");
        let n = match item {
            Value::Array(n) if n.len() == 3 => n,
            other => {
                p.error(
                    at,
                    format!(
                        "expected 3 integers [measured, sum_us, max_us], got {}",
                        match other {
                            Value::Array(n) => format!("{} entries", n.len()),
                            v => describe(v),
                        }
                    ),
                );
                ok = false;
                continue;
            }
        };
        let mut d = [0; 3];
        let mut item_ok = true;
        for (j, x) in n.iter().enumerate() {
            match p.count_value(format!("{at}[{j}]"), x) {
                Some(c) => d[j] = c,
                None => item_ok = false,
            }
        }
        if !item_ok {
            ok = false;
            continue;
        }
        let [measured, sum_us, max_us] = d;
        let problem = if measured == 0 && (sum_us > 0 || max_us > 0) {
            Some(format!(
                "no measured call but a sum of {sum_us} µs and a max of {max_us} µs: \
                 both must be 0"
            ))
        } else if max_us > sum_us {
            Some(format!(
                "the longest call ({max_us} µs) is longer than the sum of the \
                 {measured} measured ({sum_us} µs)"
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            p.error(at, message);
            ok = false;
            continue;
        }
        out[k] = d;
    }
    for (i, column) in ["measured", "sum_us"].iter().enumerate() {
        let sum: u64 = out.iter().map(|d| d[i]).sum();
        if ok && sum > MAX_COUNT {
            p.error(
                field.clone(),
                format!(
                    "the seconds' {column} add up to {sum}, above the limit of {MAX_COUNT} \
                     per cycle"
                ),
            );
            ok = false;
        }
    }
    ok.then_some(out)
}

fn second_value(s: &SecondCounts, i: usize) -> u64 {
    [s.visits, s.passes, s.downgrades, s.exceptions, s.timeouts][i]
}

/// One bucket: a list of five counts.
fn five_counts(p: &mut Reader<'_, '_>, at: &str, item: &Value) -> Option<[u64; 5]> {
    match item {
        Value::Array(n) if n.len() == 5 => {
            let mut out = [0; 5];
            let mut ok = true;
            for (j, x) in n.iter().enumerate() {
                match p.count_value(format!("{at}[{j}]"), x) {
                    Some(c) => out[j] = c,
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
        other => {
            p.error(
                at.to_owned(),
                format!(
                    "expected 5 counts [visits, passes, downgrades, exceptions, timeouts], got {}",
                    match other {
                        Value::Array(n) => format!("{} entries", n.len()),
                        v => describe(v),
                    }
                ),
            );
            None
        }
    }
}

/// `reason -> ten counts`.
fn read_seconds_by_reason(
    p: &mut Reader<'_, '_>,
    key: &str,
    v: &Value,
) -> Option<BTreeMap<String, [u64; SECONDS_PER_CYCLE]>> {
    let field = p.field(key);
    let Value::Object(m) = v else {
        p.error(
            field,
            format!(
                "expected an object of reason -> {SECONDS_PER_CYCLE} counts, got {}",
                describe(v)
            ),
        );
        return None;
    };
    if m.len() > MAX_SECOND_REASONS {
        p.error(
            field,
            format!(
                "{} reasons, more than the limit of {MAX_SECOND_REASONS}",
                m.len()
            ),
        );
        return None;
    }
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (reason, counts) in m {
        if let Err(message) = check_reason(reason) {
            p.error(field.clone(), message);
            ok = false;
            continue;
        }
        let at = format!("{field}.{reason}");
        let items = match counts {
            Value::Array(items) if items.len() == SECONDS_PER_CYCLE => items,
            other => {
                p.error(
                    at,
                    format!(
                        "expected {SECONDS_PER_CYCLE} counts, one per second, got {}",
                        match other {
                            Value::Array(n) => format!("{} entries", n.len()),
                            v => describe(v),
                        }
                    ),
                );
                ok = false;
                continue;
            }
        };
        let mut row = [0; SECONDS_PER_CYCLE];
        let mut row_ok = true;
        for (k, x) in items.iter().enumerate() {
            match p.count_value(format!("{at}[{k}]"), x) {
                Some(c) => row[k] = c,
                None => row_ok = false,
            }
        }
        let sum: u64 = row.iter().sum();
        if row_ok && sum > MAX_COUNT {
            p.error(
                at,
                format!("adds up to {sum}, above the limit of {MAX_COUNT} per cycle"),
            );
            row_ok = false;
        }
        if row_ok {
            out.insert(reason.clone(), row);
        } else {
            ok = false;
        }
    }
    ok.then_some(out)
}

/// Reads a heartbeat of our JSON protocol, keeping what is valid: an entry of
/// `points`, `enforcing`, `known_points` or `declared_points` that is malformed is
/// left out and reported (the second part of the answer), the rest is read. A point
/// whose only malformed fields are `seconds_durations`, `hot_keys` or `key_table` is
/// kept without them.
///
/// # Errors
///
/// Every malformed field, when one of them is not in such an entry (the app, the
/// instance, the cycle, the part, a list that is not a list, too many points...).
pub fn json_heartbeat_lenient(
    v: &Value,
    ctx: &Context<'_>,
) -> Result<(Heartbeat, Vec<InputError>), Vec<InputError>> {
    lenient(
        v,
        ctx,
        "",
        &["points", "enforcing", "known_points", "declared_points"],
        None,
        &[
            JSON_FIELDS.durations,
            // Both are `Some` in our protocol's field names.
            JSON_FIELDS.hot_keys.unwrap_or("hot_keys"),
            JSON_FIELDS.key_table.unwrap_or("key_table"),
        ],
        json_heartbeat,
    )
}

/// Reads SDS's `HeartbeatRequest` keeping what is valid, as
/// [`json_heartbeat_lenient`] does: a malformed entry of `pointInfoMap`,
/// `enforcing`, `knownPoints` or `declaredPoints` is left out and reported (of a
/// point whose only malformed field is `secondsDurations`, only that field).
///
/// # Errors
///
/// Every malformed field, when one of them is not in such an entry.
pub fn sds_heartbeat_lenient(
    v: &Value,
    ctx: &Context<'_>,
) -> Result<(Heartbeat, Vec<InputError>), Vec<InputError>> {
    lenient(
        v,
        ctx,
        "client",
        &["enforcing", "knownPoints", "declaredPoints"],
        Some("pointInfoMap"),
        &[SDS_FIELDS.durations],
        sds_heartbeat,
    )
}

/// What of an entry is at fault: the whole entry (`None`), or only some of its
/// detail fields.
type Fault<'d> = Option<BTreeSet<&'d str>>;

/// Adds an error of an entry (`tail`: its field after the entry's) to the entry's
/// fault.
fn add_fault<'d>(fault: &mut Fault<'d>, tail: &str, details: &[&'d str]) {
    // The detail the rest of an error's field is in, if any.
    let detail = tail.strip_prefix('.').and_then(|t| {
        details.iter().copied().find(|d| {
            t.strip_prefix(d)
                .is_some_and(|t| t.is_empty() || t.starts_with(['[', '.']))
        })
    });
    match (fault.as_mut(), detail) {
        (Some(set), Some(d)) => {
            set.insert(d);
        }
        _ => *fault = None,
    }
}

/// Reads strictly; if every error is inside an entry of one of the `lists` (or of
/// the object `map`, keyed by point), reads again without those entries, or of an
/// entry whose errors are all in some of its fields `details`, without those fields.
fn lenient(
    v: &Value,
    ctx: &Context<'_>,
    path: &str,
    lists: &[&str],
    map: Option<&str>,
    details: &[&str],
    read: fn(&Value, &Context<'_>) -> Result<Heartbeat, Vec<InputError>>,
) -> Result<(Heartbeat, Vec<InputError>), Vec<InputError>> {
    let errors = match read(v, ctx) {
        Ok(hb) => return Ok((hb, Vec::new())),
        Err(errors) => errors,
    };
    let at = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    // The entries at fault, each with what of it is.
    let mut indices: BTreeMap<&str, BTreeMap<usize, Fault<'_>>> = BTreeMap::new();
    let mut keys: BTreeMap<&str, Fault<'_>> = BTreeMap::new();
    for e in &errors {
        let index = lists.iter().find_map(|&key| {
            let rest = e.field.strip_prefix(&format!("{}[", at(key)))?;
            let (i, tail) = rest.split_once(']')?;
            Some((key, i.parse::<usize>().ok()?, tail))
        });
        if let Some((key, i, tail)) = index {
            let fault = indices
                .entry(key)
                .or_default()
                .entry(i)
                .or_insert_with(|| Some(BTreeSet::new()));
            add_fault(fault, tail, details);
            continue;
        }
        // A point of the map: the longest key the field is at (names may hold dots).
        let entry = map.and_then(|key| {
            let Some(Value::Object(m)) = v.get(key) else {
                return None;
            };
            let rest = e.field.strip_prefix(&format!("{}.", at(key)))?;
            m.keys()
                .filter_map(|k| {
                    let tail = rest.strip_prefix(k.as_str())?;
                    (tail.is_empty() || tail.starts_with('.')).then_some((k, tail))
                })
                .max_by_key(|(k, _)| k.len())
        });
        match entry {
            Some((k, tail)) => {
                let fault = keys
                    .entry(k.as_str())
                    .or_insert_with(|| Some(BTreeSet::new()));
                add_fault(fault, tail, details);
            }
            None => return Err(errors),
        }
    }
    let mut valid = v.clone();
    let strip = |entry: Option<&mut Value>, fields: &BTreeSet<&str>| {
        if let Some(Value::Object(o)) = entry {
            for f in fields {
                o.remove(*f);
            }
        }
    };
    for (key, entries) in indices {
        if let Some(Value::Array(items)) = valid.get_mut(key) {
            for (&i, fault) in &entries {
                if let Some(fields) = fault {
                    strip(items.get_mut(i), fields);
                }
            }
            let mut i = 0;
            items.retain(|_| {
                i += 1;
                !matches!(entries.get(&(i - 1)), Some(None))
            });
        }
    }
    if let Some(Value::Object(m)) = map.and_then(|key| valid.get_mut(key)) {
        for (k, fault) in keys {
            match fault {
                Some(fields) => strip(m.get_mut(k), &fields),
                None => {
                    m.remove(k);
                }
            }
        }
    }
    read(&valid, ctx).map(|hb| (hb, errors))
}

/// Reads SDS's `HeartbeatRequest` (the JSON of the `client` form field).
///
/// # Errors
///
/// Every malformed field, by path (under `client.`).
pub fn sds_heartbeat(v: &Value, ctx: &Context<'_>) -> Result<Heartbeat, Vec<InputError>> {
    let mut errors = Vec::new();
    let hb = read_sds_heartbeat(v, ctx, &mut errors);
    finish(hb, errors)
}

fn read_sds_heartbeat(
    v: &Value,
    ctx: &Context<'_>,
    errors: &mut Vec<InputError>,
) -> Option<Heartbeat> {
    let mut r = Reader::root(v, "client", errors)?;
    // Read in this order, so that errors are listed in it.
    let group = r.name("appGroupName");
    let app = r.name("appName");
    let host = r.name_or("hostname", "");
    let ip = r.name_or("ip", ctx.peer_ip);
    let instance = match r.get("instanceId") {
        Some(v) => r.name_value(r.field("instanceId"), v),
        // SDS has no instance id: the host and address stand for it.
        None => Some(format!(
            "{}@{}",
            host.as_deref().unwrap_or(""),
            ip.as_deref().unwrap_or("")
        )),
    };
    let parts = Parts {
        group,
        app,
        instance,
        host,
        ip,
        // SDS sends the END of the reported cycle (the start of the current one).
        start: r
            .time("statisticsCycleTime")
            .map(|end| end - CYCLE_MS)
            .filter(|&s| check_cycle(&mut r, "statisticsCycleTime", s, ctx)),
        version: r.optional_count("version"),
        // This project's client splits a cycle too big for one body, as in our
        // protocol; SDS's own client never does (no part fields: one body).
        part: r.part("part", "parts"),
        known: r.names("knownPoints"),
        declared: r.names("declaredPoints"),
        points: sds_points(&mut r),
        enforcing: read_enforcing(&mut r, "enforcing"),
        client: read_client_health(&mut r, "client"),
    };
    parts.heartbeat(Protocol::Sds)
}

fn sds_points(r: &mut Reader<'_, '_>) -> Option<Vec<PointCycle>> {
    match r.get("pointInfoMap") {
        None => Some(Vec::new()),
        Some(Value::Object(m)) if m.len() > MAX_POINTS_PER_HEARTBEAT => {
            r.too_many_points("pointInfoMap", m.len())
        }
        Some(Value::Object(m)) => {
            let mut out = Vec::with_capacity(m.len());
            let mut ok = true;
            for (name, item) in m {
                let key = format!("pointInfoMap.{name}");
                let name = match check_name(name) {
                    Ok(()) => Some(name.clone()),
                    Err(message) => {
                        let f = r.field(&key);
                        r.error(f, format!("point name {message}"));
                        None
                    }
                };
                match r
                    .child(&key, item)
                    .and_then(|mut p| read_point_counts(&mut p, name, SDS_FIELDS))
                {
                    // SDS's admin drops points without activity; so do we.
                    Some(point) if is_idle(&point) => {}
                    Some(point) => out.push(point),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
        Some(other) => {
            let f = r.field("pointInfoMap");
            r.error(
                f,
                format!(
                    "expected an object of point -> counts, got {}",
                    describe(other)
                ),
            );
            None
        }
    }
}

/// The sections of a point's settings, as the runtime names them.
const SECTIONS: [&str; 8] = [
    "rules", "window", "shadow", "adaptive", "cluster", "breaker", "retry", "keys",
];

/// The breaker states the runtime reports.
const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

/// The list of what each point enforces; `Some(None)` when absent.
fn read_enforcing(r: &mut Reader<'_, '_>, key: &str) -> Option<Option<Vec<Enforcing>>> {
    let Some(v) = r.get(key) else {
        return Some(None);
    };
    let Value::Array(items) = v else {
        let f = r.field(key);
        r.error(
            f,
            format!("expected a list of points' settings, got {}", describe(v)),
        );
        return None;
    };
    if items.len() > MAX_POINTS_PER_HEARTBEAT {
        return r.too_many_points(key, items.len());
    }
    let mut out: Vec<Enforcing> = Vec::with_capacity(items.len());
    let mut ok = true;
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let entry_key = format!("{key}[{i}]");
        match r
            .child(&entry_key, item)
            .and_then(|mut e| read_entry(&mut e))
        {
            Some(entry) if !seen.insert(entry.point.clone()) => {
                let f = format!("{}.name", r.field(&entry_key));
                r.error(f, format!("point {:?} is listed twice", entry.point));
                ok = false;
            }
            Some(entry) => out.push(entry),
            None => ok = false,
        }
    }
    ok.then_some(Some(out))
}

/// One entry of `enforcing`.
fn read_entry(e: &mut Reader<'_, '_>) -> Option<Enforcing> {
    let name = e.name("name");
    let digest = match e.get("digest") {
        None => {
            let f = e.field("digest");
            e.error(f, "is missing");
            None
        }
        Some(Value::String(d))
            if d == "none"
                || (8..=64).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Some(d.to_ascii_lowercase())
        }
        Some(other) => {
            let f = e.field("digest");
            e.error(
                f,
                format!(
                    "expected 8 to 64 hexadecimal digits or \"none\", got {}",
                    describe(other)
                ),
            );
            None
        }
    };
    let origins = read_origins(e, "origins");
    let local = match e.get("local") {
        None => Some(None),
        Some(v @ Value::Object(_)) => {
            let bytes = v.to_string().len();
            if bytes > MAX_LOCAL_BYTES {
                let f = e.field("local");
                e.error(
                    f,
                    format!("{bytes} bytes of settings, more than the limit of {MAX_LOCAL_BYTES}"),
                );
                None
            } else {
                Some(Some(v.clone()))
            }
        }
        Some(other) => {
            let f = e.field("local");
            e.error(
                f,
                format!("expected an object of settings, got {}", describe(other)),
            );
            None
        }
    };
    let breaker = match e.get("breaker") {
        None => Some(None),
        Some(v) => {
            let key = "breaker".to_owned();
            e.child(&key, v)
                .and_then(|mut b| read_breaker(&mut b))
                .map(Some)
        }
    };
    Some(Enforcing {
        point: name?,
        digest: digest?,
        origins: origins?,
        local: local?,
        breaker: breaker?,
    })
}

/// `section -> {source, version}`; sections this server does not know are ignored.
fn read_origins(e: &mut Reader<'_, '_>, key: &str) -> Option<BTreeMap<String, SectionOrigin>> {
    let mut out = BTreeMap::new();
    let Some(v) = e.get(key) else {
        return Some(out);
    };
    let Value::Object(m) = v else {
        let f = e.field(key);
        e.error(
            f,
            format!(
                "expected an object of section -> origin, got {}",
                describe(v)
            ),
        );
        return None;
    };
    let mut ok = true;
    for (section, origin) in m {
        if !SECTIONS.contains(&section.as_str()) {
            continue;
        }
        let path = format!("{key}.{section}");
        let read = e.child(&path, origin).and_then(|mut o| {
            let source = match o.get("source") {
                Some(Value::String(s)) => match check_source(s) {
                    Ok(()) => Some(s.clone()),
                    Err(message) => {
                        let f = o.field("source");
                        o.error(f, message);
                        None
                    }
                },
                Some(other) => {
                    let f = o.field("source");
                    o.error(
                        f,
                        format!(
                            "expected `code`, `console` or `file:<path>`, got {}",
                            describe(other)
                        ),
                    );
                    None
                }
                None => {
                    let f = o.field("source");
                    o.error(f, "is missing");
                    None
                }
            };
            let version = o.counter("version");
            Some(SectionOrigin {
                source: source?,
                version: version?,
            })
        });
        match read {
            Some(o) => {
                out.insert(section.clone(), o);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// `code`, `console` or `file:<path>` with a path of at most [`MAX_SOURCE_LEN`]
/// bytes and no control characters.
fn check_source(s: &str) -> Result<(), String> {
    match s {
        "code" | "console" => Ok(()),
        _ => match s.strip_prefix("file:") {
            Some("") => Err("a file source without a path".into()),
            Some(_) if s.len() > MAX_SOURCE_LEN => Err(format!(
                "is {} bytes long, more than the limit of {MAX_SOURCE_LEN}",
                s.len()
            )),
            Some(path) if path.chars().any(char::is_control) => {
                Err("must not contain control characters".into())
            }
            Some(_) => Ok(()),
            None => Err(format!(
                "expected `code`, `console` or `file:<path>`, got {}",
                describe(&Value::String(s.to_owned()))
            )),
        },
    }
}

fn read_breaker(b: &mut Reader<'_, '_>) -> Option<BreakerReport> {
    let kind = match b.get("kind") {
        Some(Value::String(k)) if check_reason(k).is_ok() => Some(k.clone()),
        Some(other) => {
            let f = b.field("kind");
            b.error(
                f,
                format!(
                    "expected the breaker's kind (`classic`, `sre`), got {}",
                    describe(other)
                ),
            );
            None
        }
        None => {
            let f = b.field("kind");
            b.error(f, "is missing");
            None
        }
    };
    let state = match b.get("state") {
        Some(Value::String(s)) if BREAKER_STATES.contains(&s.as_str()) => Some(s.clone()),
        other => {
            let f = b.field("state");
            let got = other.map_or_else(|| "nothing".to_owned(), describe);
            b.error(
                f,
                format!("expected `closed`, `open` or `half_open`, got {got}"),
            );
            None
        }
    };
    let since = b.time("since_ms");
    let transitions = b.counter("transitions");
    Some(BreakerReport {
        kind: kind?,
        state: state?,
        since_ms: since?,
        transitions: transitions?,
    })
}

/// The client's own health; `Some(None)` when absent.
fn read_client_health(r: &mut Reader<'_, '_>, key: &str) -> Option<Option<ClientHealth>> {
    let Some(v) = r.get(key) else {
        return Some(None);
    };
    let mut h = r.child(key, v)?;
    let upload = h.error_text("last_upload_error");
    let pull = h.error_text("last_pull_error");
    let from_cache = match h.get("from_cache") {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            let f = h.field("from_cache");
            h.error(
                f,
                format!("expected true or false, got {}", describe(other)),
            );
            None
        }
    };
    let dropped = h.counter("uploads_dropped");
    let failures = h.counter("pull_failures");
    let rejected = h.counter("policies_rejected");
    Some(Some(ClientHealth {
        last_upload_error: upload?,
        last_pull_error: pull?,
        from_cache: from_cache?,
        uploads_dropped: dropped?,
        pull_failures: failures?,
        policies_rejected: rejected?,
    }))
}

fn is_idle(p: &PointCycle) -> bool {
    p.visits == 0
        && p.exceptions == 0
        && p.timeouts == 0
        && p.cancelled == 0
        && p.peak_concurrency == 0
        && p.retry.is_zero()
        && p.queue.is_none()
}

/// Reads a pull of our JSON protocol.
///
/// # Errors
///
/// Every malformed field.
pub fn json_pull(v: &Value, peer_ip: &str) -> Result<PullRequest, Vec<InputError>> {
    read_pull(
        v,
        "",
        ["app_group", "app", "instance", "host", "ip", "version"],
        peer_ip,
    )
}

/// Reads SDS's pull request (the JSON of the `client` form field).
///
/// # Errors
///
/// Every malformed field.
pub fn sds_pull(v: &Value, peer_ip: &str) -> Result<PullRequest, Vec<InputError>> {
    read_pull(
        v,
        "client",
        [
            "appGroupName",
            "appName",
            "instanceId",
            "hostname",
            "ip",
            "version",
        ],
        peer_ip,
    )
}

fn read_pull(
    v: &Value,
    path: &str,
    [group, app, instance, host, ip, version]: [&str; 6],
    peer_ip: &str,
) -> Result<PullRequest, Vec<InputError>> {
    let mut errors = Vec::new();
    let out = (|| {
        let mut r = Reader::root(v, path, &mut errors)?;
        let g = r.name(group);
        let a = r.name(app);
        let h = r.name_or(host, "");
        let i = r.name_or(ip, peer_ip);
        let inst = match r.get(instance) {
            Some(v) => r.name_value(r.field(instance), v),
            None if path.is_empty() => {
                let f = r.field(instance);
                r.error(f, "is missing");
                None
            }
            None => Some(format!(
                "{}@{}",
                h.as_deref().unwrap_or(""),
                i.as_deref().unwrap_or("")
            )),
        };
        let ver = r.count(version);
        Some(PullRequest {
            app: AppKey::new(g?, a?),
            instance: inst?,
            host: h?,
            ip: i?,
            version: ver?,
        })
    })();
    finish(out, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console refuses exactly the names the runtime refuses: one rule.
    #[test]
    fn names_follow_the_runtime_rule() {
        let long = "x".repeat(MAX_NAME_LEN);
        let too_long = "x".repeat(MAX_NAME_LEN + 1);
        for name in [
            "orders.create",
            "a b",
            "é",
            "",
            " ",
            " lead",
            "trail ",
            "tab\there",
            "nul\0",
            long.as_str(),
            too_long.as_str(),
        ] {
            assert_eq!(
                check_name(name).is_ok(),
                resilience_runtime::check_point_name(name).is_ok(),
                "{name:?}"
            );
        }
    }
    use serde_json::json;

    const NOW: i64 = 1_767_225_605_000;

    fn ctx() -> Context<'static> {
        Context {
            now_ms: NOW,
            oldest_ms: NOW - 3_600_000,
            peer_ip: "127.0.0.1",
        }
    }

    fn fields(errors: &[InputError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn json_heartbeat_reads_every_field() {
        let hb = json_heartbeat(
            &json!({"app_group": "shop", "app": "orders", "instance": "i-1", "host": "web-1",
                    "cycle_start_ms": 1_767_225_590_000_i64, "policy_version": 2,
                    "points": [{"name": "p", "visits": 10, "passes": 7, "downgrades": 3,
                                "exceptions": 1, "timeouts": 2, "peak_concurrency": 4,
                                "downgrades_by_reason": {"visits": 2, "concurrency": 1}}],
                    "declared_points": ["p", "q"]}),
            &ctx(),
        )
        .unwrap();
        assert_eq!(hb.app, AppKey::new("shop", "orders"));
        assert_eq!(hb.ip, "127.0.0.1");
        assert_eq!(hb.policy_version, Some(2));
        assert_eq!(hb.points[0].passes, 7);
        assert_eq!(hb.points[0].downgrades_by_reason["concurrency"], 1);
        assert_eq!(hb.declared_points, ["p", "q"]);
    }

    #[test]
    fn malformed_json_heartbeats_name_each_field() {
        let errors = json_heartbeat(
            &json!({"app_group": "", "instance": 5, "cycle_start_ms": 1_767_225_591_234_i64,
                    "points": [{"name": "p", "visits": "ten"},
                               {"name": "q", "visits": 1, "downgrades": 2},
                               {"name": "r", "visits": 5, "downgrades": 1, "passes": 3},
                               {"name": "s", "visits": 5, "downgrades": 1,
                                "downgrades_by_reason": {"visits": 2}},
                               {"visits": -1}]}),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "app_group",
                "app",
                "instance",
                "cycle_start_ms",
                "points[0].visits",
                "points[1].downgrades",
                "points[2].passes",
                "points[3].downgrades_by_reason",
                "points[4].name",
                "points[4].visits",
            ],
            "{errors:?}"
        );
        assert!(
            errors[3].message.contains("multiple of 10000"),
            "{errors:?}"
        );
        assert!(errors[4].message.contains("\"ten\""), "{errors:?}");
    }

    #[test]
    fn cycles_outside_the_accepted_range_are_refused() {
        let base = json!({"app_group": "g", "app": "a", "instance": "i"});
        for (start, word) in [
            (NOW + 120_000 - NOW % 10_000, "future"),
            (NOW - 7_200_000 - NOW % 10_000, "retention"),
        ] {
            let mut v = base.clone();
            v["cycle_start_ms"] = start.into();
            let errors = json_heartbeat(&v, &ctx()).unwrap_err();
            assert!(errors[0].message.contains(word), "{errors:?}");
        }
        assert_eq!(
            fields(&json_heartbeat(&json!([1, 2]), &ctx()).unwrap_err()),
            ["body"]
        );
    }

    #[test]
    fn sds_heartbeats_use_the_end_of_the_cycle_and_drop_idle_points() {
        let hb = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "ip": "10.1.2.3", "hostname": "h",
                    "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {
                        "busy": {"point": "busy", "visitNum": 9, "exceptionNum": 1,
                                 "concurrentNum": 2, "timeoutNum": 0, "downgradeNum": 4},
                        "idle": {"point": "idle", "visitNum": 0, "exceptionNum": 0,
                                 "concurrentNum": 0, "timeoutNum": 0, "downgradeNum": 0}}}),
            &ctx(),
        )
        .unwrap();
        assert_eq!(hb.cycle_start_ms, 1_767_225_590_000);
        assert_eq!(hb.instance, "h@10.1.2.3");
        assert_eq!(hb.points.len(), 1);
        assert_eq!(hb.points[0].passes, 5);
        assert_eq!(hb.points[0].peak_concurrency, 2);
        let errors = sds_heartbeat(
            &json!({"appGroupName": "g", "statisticsCycleTime": "soon",
                    "pointInfoMap": {"p": {"visitNum": 1.5}}}),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "client.appName",
                "client.statisticsCycleTime",
                "client.pointInfoMap.p.visitNum"
            ]
        );
    }

    /// `cancelled` and `retry` in both protocols: read when sent, 0 when absent (the
    /// whole `retry`, or counters of it: `hedges` and `cancelled` come from newer
    /// clients only), unknown counters ignored.
    #[test]
    fn cancelled_and_retry_counters_are_read_in_both_protocols() {
        let retry = json!({"calls": 40, "attempts": 52, "retries": 12, "exhausted": 1,
                           "refused_by_budget": 3, "hedges": 2, "cancelled": 1,
                           "a_later_counter": 9});
        let json_hb = json_heartbeat(
            &with(json!({"points": [
                {"name": "r", "visits": 40, "timeouts": 1, "cancelled": 4, "retry": retry},
                {"name": "old", "visits": 5, "retry": {"calls": 5, "attempts": 6, "retries": 1}},
                {"name": "none", "visits": 5}]})),
            &ctx(),
        )
        .unwrap();
        let sds_hb = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {
                        "r": {"visitNum": 40, "timeoutNum": 1, "cancelledNum": 4, "retry": retry},
                        "old": {"visitNum": 5, "retry": {"calls": 5, "attempts": 6, "retries": 1}},
                        "none": {"visitNum": 5},
                        // Only cancellations, or only retries: not idle.
                        "cancels": {"visitNum": 0, "cancelledNum": 2},
                        "retries": {"visitNum": 0, "retry": {"calls": 1}}}}),
            &ctx(),
        )
        .unwrap();
        let full = RetryCounts {
            calls: 40,
            attempts: 52,
            retries: 12,
            exhausted: 1,
            refused_by_budget: 3,
            hedges: 2,
            cancelled: 1,
        };
        let older = RetryCounts {
            calls: 5,
            attempts: 6,
            retries: 1,
            ..RetryCounts::default()
        };
        for hb in [&json_hb, &sds_hb] {
            let point = |name: &str| hb.points.iter().find(|p| p.point == name).unwrap();
            assert_eq!((point("r").cancelled, point("r").retry), (4, full));
            assert_eq!(point("r").timeouts, 1);
            assert_eq!((point("old").cancelled, point("old").retry), (0, older));
            assert_eq!(
                (point("none").cancelled, point("none").retry),
                (0, RetryCounts::default())
            );
        }
        let names: Vec<_> = sds_hb.points.iter().map(|p| p.point.as_str()).collect();
        assert_eq!(names, ["cancels", "none", "old", "r", "retries"]);
    }

    #[test]
    fn malformed_cancelled_and_retry_counters_name_the_field() {
        let errors = json_heartbeat(
            &with(json!({"points": [
                {"name": "a", "visits": 1, "cancelled": -1},
                {"name": "b", "visits": 1, "retry": {"calls": "many", "attempts": 1.5,
                                                     "hedges": MAX_COUNT + 1}},
                {"name": "c", "visits": 1, "retry": [1, 2]},
                {"name": "d", "visits": 1, "retry": {"refused_by_budget": true,
                                                     "cancelled": {}}}]})),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "points[0].cancelled",
                "points[1].retry.calls",
                "points[1].retry.attempts",
                "points[1].retry.hedges",
                "points[2].retry",
                "points[3].retry.refused_by_budget",
                "points[3].retry.cancelled",
            ],
            "{errors:?}"
        );
        assert!(errors[3].message.contains("above the limit"), "{errors:?}");
        assert!(errors[4].message.contains("retry counters"), "{errors:?}");
        let errors = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {"p": {"visitNum": 1, "cancelledNum": "2",
                                           "retry": {"exhausted": -3}}}}),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "client.pointInfoMap.p.cancelledNum",
                "client.pointInfoMap.p.retry.exhausted"
            ]
        );
        // The lenient reader leaves the malformed point out and keeps the others.
        let (hb, rejected) = json_heartbeat_lenient(
            &with(json!({"points": [
                {"name": "bad", "visits": 1, "retry": {"calls": -1}},
                {"name": "good", "visits": 2, "cancelled": 1}]})),
            &ctx(),
        )
        .unwrap();
        assert_eq!(fields(&rejected), ["points[0].retry.calls"]);
        assert_eq!(hb.points.len(), 1);
        assert_eq!(
            (hb.points[0].point.as_str(), hb.points[0].cancelled),
            ("good", 1)
        );
    }

    /// `queue` in both protocols: read when sent (missing figures 0, unknown ones
    /// ignored), `None` when absent; a point with only queue figures is not idle, and
    /// the runtime's queue reasons are accepted.
    #[test]
    fn queue_figures_are_read_in_both_protocols() {
        let queue = json!({"waiting": 2, "peak_waiting": 4, "admitted": 30, "timed_out": 3,
                           "cancelled": 1, "refused": 1, "full": 5, "evicted": 2,
                           "wait_ns": 96_000_000,
                           "max_wait_ns": 9_000_000, "a_later_figure": 7});
        let json_hb = json_heartbeat(
            &with(json!({"points": [
                {"name": "q", "visits": 40, "downgrades": 8,
                 "downgrades_by_reason": {"queue_full": 5, "queue_timeout": 3},
                 "queue": queue},
                {"name": "part", "visits": 5, "queue": {"admitted": 5, "wait_ns": 10}},
                {"name": "none", "visits": 5}]})),
            &ctx(),
        )
        .unwrap();
        let sds_hb = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {
                        "q": {"visitNum": 40, "downgradeNum": 8,
                              "downgradeReasons": {"queue_full": 5, "queue_timeout": 3},
                              "queue": queue},
                        "part": {"visitNum": 5, "queue": {"admitted": 5, "wait_ns": 10}},
                        "none": {"visitNum": 5},
                        // Only calls still waiting: not idle.
                        "waiting": {"visitNum": 0, "queue": {"waiting": 1, "peak_waiting": 1}}}}),
            &ctx(),
        )
        .unwrap();
        let full = QueueCounts {
            waiting: 2,
            peak_waiting: 4,
            admitted: 30,
            timed_out: 3,
            cancelled: 1,
            refused: 1,
            full: 5,
            evicted: 2,
            wait_ns: 96_000_000,
            max_wait_ns: 9_000_000,
        };
        let part = QueueCounts {
            admitted: 5,
            wait_ns: 10,
            ..QueueCounts::default()
        };
        for hb in [&json_hb, &sds_hb] {
            let point = |name: &str| hb.points.iter().find(|p| p.point == name).unwrap();
            assert_eq!(point("q").queue, Some(full));
            assert_eq!(point("q").downgrades_by_reason["queue_full"], 5);
            assert_eq!(point("q").downgrades_by_reason["queue_timeout"], 3);
            assert_eq!(point("part").queue, Some(part));
            assert_eq!(point("none").queue, None);
        }
        let names: Vec<_> = sds_hb.points.iter().map(|p| p.point.as_str()).collect();
        assert_eq!(names, ["none", "part", "q", "waiting"]);
        assert_eq!(full.ended(), 37);
        let mut sum = full;
        sum.merge(&QueueCounts {
            waiting: 1,
            peak_waiting: 9,
            admitted: 1,
            max_wait_ns: 1,
            wait_ns: 1,
            evicted: 3,
            ..QueueCounts::default()
        });
        assert_eq!(
            (
                sum.waiting,
                sum.peak_waiting,
                sum.admitted,
                sum.wait_ns,
                sum.max_wait_ns,
                sum.evicted
            ),
            (3, 9, 31, 96_000_001, 9_000_000, 5)
        );
    }

    #[test]
    fn malformed_queue_figures_name_the_field() {
        let errors = json_heartbeat(
            &with(json!({"points": [
                {"name": "a", "visits": 1, "queue": {"waiting": -1, "peak_waiting": "4",
                                                     "wait_ns": MAX_COUNT + 1}},
                {"name": "b", "visits": 1, "queue": [1, 2]},
                {"name": "c", "visits": 1, "queue": {"admitted": 1.5, "max_wait_ns": true,
                                                     "full": {}, "evicted": -2}},
                {"name": "d", "visits": 1, "queue": 3}]})),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "points[0].queue.waiting",
                "points[0].queue.peak_waiting",
                "points[0].queue.wait_ns",
                "points[1].queue",
                "points[2].queue.admitted",
                "points[2].queue.full",
                "points[2].queue.max_wait_ns",
                "points[2].queue.evicted",
                "points[3].queue",
            ],
            "{errors:?}"
        );
        assert!(errors[2].message.contains("above the limit"), "{errors:?}");
        assert!(errors[3].message.contains("queue figures"), "{errors:?}");
        let errors = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {"p": {"visitNum": 1, "queue": {"timed_out": -3}}}}),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(fields(&errors), ["client.pointInfoMap.p.queue.timed_out"]);
        // The lenient reader leaves the malformed point out and keeps the others.
        let (hb, rejected) = json_heartbeat_lenient(
            &with(json!({"points": [
                {"name": "bad", "visits": 1, "queue": {"refused": "x"}},
                {"name": "good", "visits": 2, "queue": {"admitted": 2}}]})),
            &ctx(),
        )
        .unwrap();
        assert_eq!(fields(&rejected), ["points[0].queue.refused"]);
        assert_eq!(hb.points.len(), 1);
        assert_eq!(hb.points[0].queue.map(|q| q.admitted), Some(2));
    }

    fn with(extra: Value) -> Value {
        let mut v = json!({"app_group": "g", "app": "a", "instance": "i",
                           "cycle_start_ms": 1_767_225_590_000_i64});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    #[test]
    fn enforcement_and_client_health_are_read_and_optional() {
        let hb = json_heartbeat(&with(json!({})), &ctx()).unwrap();
        assert_eq!((hb.enforcing, hb.client), (None, None));
        let hb = json_heartbeat(
            &with(json!({
                "enforcing": [{"name": "p", "digest": "0123456789ABCDEF",
                               "origins": {"rules": {"source": "console", "version": 3},
                                           "breaker": {"source": "file:/etc/p.toml", "version": 2},
                                           "future_section": {"anything": true}},
                               "local": {"breaker": {"algorithm": "classic"}},
                               "breaker": {"kind": "classic", "state": "half_open",
                                           "since_ms": 1_767_225_602_000_i64, "transitions": 2,
                                           "extra": 1},
                               "extra": "ignored"},
                              {"name": "q", "digest": "none"}],
                "client": {"last_upload_error": "HTTP 401", "last_pull_error": null,
                           "from_cache": true, "uploads_dropped": 2, "pull_failures": 1,
                           "policies_rejected": 0, "extra": [1]}})),
            &ctx(),
        )
        .unwrap();
        let e = hb.enforcing.unwrap();
        assert_eq!(e[0].digest, "0123456789abcdef");
        assert_eq!(e[0].origins.len(), 2, "unknown sections are ignored");
        assert_eq!(e[0].origins["breaker"].source, "file:/etc/p.toml");
        assert_eq!(e[0].breaker.as_ref().unwrap().state, "half_open");
        assert_eq!(
            e[0].local.as_ref().unwrap()["breaker"]["algorithm"],
            "classic"
        );
        assert!(e[1].origins.is_empty() && e[1].local.is_none() && e[1].breaker.is_none());
        let c = hb.client.unwrap();
        assert_eq!(c.last_upload_error.as_deref(), Some("HTTP 401"));
        assert!(c.from_cache);
        assert_eq!(c.uploads_dropped, 2);
        // SDS: the same keys inside the `client` form field.
        let hb = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "statisticsCycleTime": 1_767_225_600_000_i64,
                    "enforcing": [{"name": "p", "digest": "none"}],
                    "client": {"from_cache": false}}),
            &ctx(),
        )
        .unwrap();
        assert_eq!(hb.enforcing.unwrap()[0].point, "p");
        assert!(!hb.client.unwrap().from_cache);
    }

    #[test]
    fn malformed_enforcement_names_each_field() {
        let long_local = "x".repeat(MAX_LOCAL_BYTES);
        let errors = json_heartbeat(
            &with(json!({
                "enforcing": [{"name": "p", "digest": "xyz"},
                              {"name": "q", "digest": "none",
                               "origins": {"rules": {"source": "disk", "version": 1},
                                           "window": {"source": "console", "version": -1}}},
                              {"name": "r", "digest": "none", "local": {"k": long_local}},
                              {"name": "s", "digest": "none",
                               "breaker": {"kind": "classic", "state": "ajar", "since_ms": 1}},
                              {"name": "t", "digest": "none"},
                              {"name": "t", "digest": "none"},
                              {"digest": "none", "local": "text"}],
                "client": {"from_cache": "yes", "uploads_dropped": -1, "last_pull_error": 5}})),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "enforcing[0].digest",
                "enforcing[1].origins.rules.source",
                "enforcing[1].origins.window.version",
                "enforcing[2].local",
                "enforcing[3].breaker.state",
                "enforcing[5].name",
                "enforcing[6].name",
                "enforcing[6].local",
                "client.last_pull_error",
                "client.from_cache",
                "client.uploads_dropped",
            ],
            "{errors:?}"
        );
        let errors = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a", "statisticsCycleTime": 1_767_225_600_000_i64,
                    "enforcing": {"p": {}}, "client": [true]}),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(fields(&errors), ["client.enforcing", "client.client"]);
        // Error texts are cut, not refused.
        let hb = json_heartbeat(
            &with(json!({"client": {"last_upload_error": "é".repeat(MAX_ERROR_LEN)}})),
            &ctx(),
        )
        .unwrap();
        let text = hb.client.unwrap().last_upload_error.unwrap();
        assert!(text.len() <= MAX_ERROR_LEN && text.starts_with('é'));
    }

    fn ten(f: impl Fn(u64) -> Value) -> Value {
        Value::Array((0..10).map(f).collect())
    }

    #[test]
    fn seconds_are_read_in_both_protocols_and_optional() {
        // Second k: k + 1 visits, k % 2 of them downgraded, one exception in second 9.
        let seconds = ten(|k| json!([k + 1, k + 1 - k % 2, k % 2, u64::from(k == 9), 0]));
        let by_reason = json!({"visits": ten(|k| json!(k % 2))});
        let hb = json_heartbeat(
            &with(json!({"points": [
                {"name": "p", "visits": 55, "downgrades": 5, "exceptions": 1,
                 "downgrades_by_reason": {"visits": 5},
                 "seconds": seconds, "seconds_by_reason": by_reason},
                {"name": "old", "visits": 3}]})),
            &ctx(),
        )
        .unwrap();
        let s = hb.points[0].seconds.as_ref().unwrap();
        assert_eq!(
            s.seconds[3],
            SecondCounts {
                visits: 4,
                passes: 3,
                downgrades: 1,
                exceptions: 0,
                timeouts: 0,
                ..SecondCounts::default()
            }
        );
        assert_eq!(s.seconds[9].exceptions, 1);
        assert_eq!(
            s.downgrades_by_reason["visits"],
            [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
        );
        assert!(hb.points[1].seconds.is_none(), "older clients send none");
        // SDS: `seconds` and `secondsByReason` in each pointInfoMap entry.
        let hb = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a",
                    "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {"p": {"visitNum": 55, "downgradeNum": 5,
                                           "seconds": seconds,
                                           "secondsByReason": by_reason},
                                     "sds": {"visitNum": 2}}}),
            &ctx(),
        )
        .unwrap();
        assert_eq!(hb.points[0].seconds.as_ref().unwrap().seconds[4].visits, 5);
        assert!(hb.points[1].seconds.is_none());
    }

    #[test]
    fn malformed_seconds_name_each_field() {
        let good = ten(|_| json!([1, 1, 0, 0, 0]));
        let mut bad_bucket = good.clone();
        bad_bucket[2] = json!([1, 1, 0, 0]);
        let mut bad_count = good.clone();
        bad_count[4] = json!([1, 1, 0, -1, 0]);
        let mut bad_passes = good.clone();
        bad_passes[7] = json!([3, 3, 1, 0, 0]);
        let mut too_big = good.clone();
        too_big[0] = json!([MAX_COUNT, MAX_COUNT, 0, 0, 0]);
        too_big[1] = json!([MAX_COUNT, MAX_COUNT, 0, 0, 0]);
        let point = |name: &str, extra: Value| {
            let mut p = json!({"name": name, "visits": 10});
            for (k, v) in extra.as_object().unwrap() {
                p[k] = v.clone();
            }
            p
        };
        let errors = json_heartbeat(
            &with(json!({"points": [
                point("a", json!({"seconds": [[1, 1, 0, 0, 0]]})),
                point("b", json!({"seconds": "often"})),
                point("c", json!({"seconds": bad_bucket})),
                point("d", json!({"seconds": bad_count})),
                point("e", json!({"seconds": bad_passes})),
                point("f", json!({"seconds": too_big})),
                point("g", json!({"seconds": good, "seconds_by_reason": {"visits": [1, 2]}})),
                point("h", json!({"seconds": good, "seconds_by_reason": {"Bad Reason": ten(|_| json!(0))}})),
                point("i", json!({"seconds": good, "seconds_by_reason": {"visits": ten(|k| if k == 3 { json!("x") } else { json!(0) })}})),
                point("j", json!({"seconds_by_reason": {"visits": ten(|_| json!(0))}})),
            ]})),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "points[0].seconds",
                "points[1].seconds",
                "points[2].seconds[2]",
                "points[3].seconds[4][3]",
                "points[4].seconds[7]",
                "points[5].seconds",
                "points[6].seconds_by_reason.visits",
                "points[7].seconds_by_reason",
                "points[8].seconds_by_reason.visits[3]",
                "points[9].seconds_by_reason",
            ],
            "{errors:?}"
        );
        assert!(
            errors[0].message.contains("10 one-second buckets, got 1"),
            "{errors:?}"
        );
        assert!(
            errors[4]
                .message
                .contains("passes must be visits - downgrades"),
            "{errors:?}"
        );
        // SDS names its own keys.
        let errors = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a",
                    "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {"p": {"visitNum": 5, "seconds": [[5, 5, 0, 0, 0]]},
                                     "q": {"visitNum": 5, "seconds": ten(|_| json!([0, 0, 0, 0, 0])),
                                           "secondsByReason": []}}}),
            &ctx(),
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "client.pointInfoMap.p.seconds",
                "client.pointInfoMap.q.secondsByReason"
            ]
        );
    }

    #[test]
    fn seconds_durations_are_read_in_both_protocols_and_optional() {
        let seconds = ten(|k| json!([k, k, 0, 0, 0]));
        // Second k: k calls measured, k * 1000 µs in all, the longest k * 500 µs;
        // second 0 none.
        let durations = ten(|k| json!([k, k * 1000, k * 500]));
        let hb = json_heartbeat(
            &with(json!({"points": [
                {"name": "p", "visits": 45, "seconds": seconds,
                 "seconds_durations": durations},
                {"name": "q", "visits": 45, "seconds": seconds}]})),
            &ctx(),
        )
        .unwrap();
        let s = &hb.points[0].seconds.as_ref().unwrap().seconds;
        assert_eq!(
            (s[4].measured, s[4].sum_us, s[4].max_us, s[4].visits),
            (4, 4000, 2000, 4)
        );
        assert_eq!(s[4].mean_us(), Some(1000.0));
        assert_eq!(s[0].mean_us(), None);
        assert_eq!(s[0].max_duration_us(), None);
        // Without the field (older clients, or nothing measured): no durations.
        let q = &hb.points[1].seconds.as_ref().unwrap().seconds;
        assert!(q
            .iter()
            .all(|c| (c.measured, c.sum_us, c.max_us) == (0, 0, 0)));
        assert_eq!(q[4].visits, 4);
        // A second with calls measured but no visit (calls that began before it) and
        // calls shorter than a microsecond are fine.
        let hb = json_heartbeat(
            &with(json!({"points": [{"name": "p", "visits": 1,
                "seconds": ten(|k| json!([u64::from(k == 0), u64::from(k == 0), 0, 0, 0])),
                "seconds_durations": ten(|k| match k { 3 => json!([2, 0, 0]),
                                                       5 => json!([1, 7, 7]),
                                                       _ => json!([0, 0, 0]) })}]})),
            &ctx(),
        )
        .unwrap();
        let s = &hb.points[0].seconds.as_ref().unwrap().seconds;
        assert_eq!((s[3].measured, s[3].mean_us()), (2, Some(0.0)));
        assert_eq!((s[5].visits, s[5].max_duration_us()), (0, Some(7)));
        assert!(!s[5].is_zero());
        // SDS: `secondsDurations` in each pointInfoMap entry.
        let hb = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a",
                    "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {"p": {"visitNum": 45, "seconds": seconds,
                                           "secondsDurations": durations},
                                     "q": {"visitNum": 45, "seconds": seconds}}}),
            &ctx(),
        )
        .unwrap();
        let s = &hb.points[0].seconds.as_ref().unwrap().seconds;
        assert_eq!((s[9].measured, s[9].sum_us, s[9].max_us), (9, 9000, 4500));
        assert_eq!(
            hb.points[1].seconds.as_ref().unwrap().seconds[9].measured,
            0
        );
    }

    #[test]
    fn malformed_seconds_durations_are_left_out_keeping_the_point() {
        let seconds = ten(|_| json!([1, 1, 0, 0, 0]));
        let good = ten(|_| json!([1, 10, 10]));
        let with_one = |k: usize, v: Value| {
            let mut d = good.clone();
            d[k] = v;
            d
        };
        let point = |name: &str, durations: Value| {
            json!({"name": name, "visits": 10, "seconds": seconds,
                   "seconds_durations": durations})
        };
        let body = with(json!({"points": [
            point("a", json!([[1, 10, 10]])),
            point("b", json!("slow")),
            point("c", with_one(2, json!([1, 10]))),
            point("d", with_one(3, json!([1, -10, 0]))),
            point("e", with_one(4, json!([1, 10, 11]))),
            point("f", with_one(5, json!([0, 10, 0]))),
            point("g", with_one(6, json!([0, 0, 3]))),
            point("h", with_one(7, json!([MAX_COUNT + 1, 10, 10]))),
            point("i", ten(|_| json!([MAX_COUNT / 5, 10, 10]))),
            point("j", ten(|_| json!([1, MAX_COUNT / 5, 10]))),
            {"name": "k", "visits": 10, "seconds_durations": good},
            // Malformed elsewhere too: the whole point is left out.
            {"name": "l", "visits": -1, "seconds": seconds,
             "seconds_durations": with_one(0, json!("x"))},
            point("m", good.clone()),
        ]}));
        let errors = json_heartbeat(&body, &ctx()).unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "points[0].seconds_durations",
                "points[1].seconds_durations",
                "points[2].seconds_durations[2]",
                "points[3].seconds_durations[3][1]",
                "points[4].seconds_durations[4]",
                "points[5].seconds_durations[5]",
                "points[6].seconds_durations[6]",
                "points[7].seconds_durations[7][0]",
                "points[8].seconds_durations",
                "points[9].seconds_durations",
                "points[10].seconds_durations",
                "points[11].visits",
                "points[11].seconds_durations[0]",
            ],
            "{errors:?}"
        );
        let message = |i: usize| errors[i].message.as_str();
        assert!(message(0).contains("10 seconds"), "{}", message(0));
        assert!(message(4).contains("longer than the sum"), "{}", message(4));
        assert!(message(5).contains("must be 0"), "{}", message(5));
        assert!(message(8).contains("measured add up to"), "{}", message(8));
        assert!(message(9).contains("sum_us add up to"), "{}", message(9));
        assert!(message(10).contains("without `seconds`"), "{}", message(10));
        // Leniently: every point but `l` kept, with its seconds; only `m` has
        // durations.
        let (hb, rejected) = json_heartbeat_lenient(&body, &ctx()).unwrap();
        assert_eq!(rejected, errors);
        let names: Vec<&str> = hb.points.iter().map(|p| p.point.as_str()).collect();
        assert_eq!(
            names,
            ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"]
        );
        for p in &hb.points {
            let measured = p
                .seconds
                .as_ref()
                .map(|s| s.seconds.iter().map(|c| c.measured).sum::<u64>());
            let want = match p.point.as_str() {
                "k" => None,
                "m" => Some(10),
                _ => Some(0),
            };
            assert_eq!(measured, want, "{}", p.point);
        }
        assert_eq!(hb.points[0].seconds.as_ref().unwrap().seconds[0].visits, 1);
        // SDS names its own keys (point names with dots included).
        let client = json!({"appGroupName": "g", "appName": "a",
            "statisticsCycleTime": 1_767_225_600_000_i64,
            "pointInfoMap": {
                "order.create": {"visitNum": 10, "seconds": seconds,
                                 "secondsDurations": with_one(1, json!([2, 5, 6]))},
                "order.bad": {"visitNum": "x", "seconds": seconds,
                              "secondsDurations": json!([])},
                "order.fine": {"visitNum": 10, "seconds": seconds,
                               "secondsDurations": good}}});
        let (hb, rejected) = sds_heartbeat_lenient(&client, &ctx()).unwrap();
        assert_eq!(
            fields(&rejected),
            [
                "client.pointInfoMap.order.bad.visitNum",
                "client.pointInfoMap.order.bad.secondsDurations",
                "client.pointInfoMap.order.create.secondsDurations[1]",
            ]
        );
        let names: Vec<&str> = hb.points.iter().map(|p| p.point.as_str()).collect();
        assert_eq!(names, ["order.create", "order.fine"]);
        let measured = |i: usize| -> u64 {
            hb.points[i]
                .seconds
                .as_ref()
                .unwrap()
                .seconds
                .iter()
                .map(|c| c.measured)
                .sum()
        };
        assert_eq!((measured(0), measured(1)), (0, 10));
    }

    /// The runtime attributes a call to a second a little after it ends, so the ten
    /// seconds may add up to more (or less) than the cycle: accepted as sent.
    #[test]
    fn seconds_that_differ_from_the_cycle_are_kept_as_sent() {
        // Twelve visits in the seconds of a 10-visit cycle (two of the next cycle's
        // first milliseconds in its last second).
        let hb = json_heartbeat(
            &with(json!({"points": [{"name": "p", "visits": 10, "passes": 10,
                "seconds": ten(|k| { let v = 1 + 2 * u64::from(k == 9); json!([v, v, 0, 0, 0]) })}]})),
            &ctx(),
        )
        .unwrap();
        let s = hb.points[0].seconds.as_ref().unwrap();
        assert_eq!(s.seconds.iter().map(|s| s.visits).sum::<u64>(), 12);
        assert_eq!(hb.points[0].visits, 10);
    }

    #[test]
    fn pulls_read_both_protocols() {
        let p = sds_pull(
            &json!({"appGroupName": "g", "appName": "a", "hostname": "h", "version": 3,
                    "pointList": ["x"]}),
            "127.0.0.9",
        )
        .unwrap();
        assert_eq!((p.version, p.instance.as_str()), (3, "h@127.0.0.9"));
        let errors =
            json_pull(&json!({"app_group": "g", "app": "a", "version": -2}), "x").unwrap_err();
        assert_eq!(fields(&errors), ["instance", "version"]);
    }
    #[test]
    fn hot_keys_and_key_tables_are_read_in_our_protocol_only() {
        let keys = json!([{"key": "vip-42", "passes": 10, "refused": 2, "overridden": true},
                          {"key": "alice", "passes": 3, "a_later_field": 1},
                          {"key": "", "refused": 1, "overridden": false}]);
        let table = json!({"tracked": 2, "untracked_passes": 5, "untracked_refused": 1,
                           "evictions": 3, "memory_bytes": 9});
        let hb = json_heartbeat(
            &with(json!({"points": [
                {"name": "both", "visits": 1, "hot_keys": keys, "key_table": table},
                {"name": "keys", "visits": 1, "hot_keys": []},
                {"name": "table", "visits": 1, "key_table": {}},
                {"name": "none", "visits": 1}]})),
            &ctx(),
        )
        .unwrap();
        let got: Vec<_> = hb.points.iter().map(|p| p.keys.clone()).collect();
        let key = |k: &str, passes, refused, overridden| HotKey {
            key: k.into(),
            passes,
            refused,
            overridden,
        };
        assert_eq!(
            got,
            [
                Some(PointKeys {
                    hot_keys: vec![
                        key("vip-42", 10, 2, true),
                        key("alice", 3, 0, false),
                        key("", 0, 1, false)
                    ],
                    key_table: Some(KeyTableCounts {
                        tracked: 2,
                        untracked_passes: 5,
                        untracked_refused: 1,
                        evictions: 3
                    }),
                }),
                Some(PointKeys::default()),
                Some(PointKeys {
                    hot_keys: vec![],
                    key_table: Some(KeyTableCounts::default())
                }),
                None,
            ]
        );
        // SDS's protocol has no hot keys: the fields are ignored, even malformed.
        let sds = sds_heartbeat(
            &json!({"appGroupName": "g", "appName": "a",
                    "statisticsCycleTime": 1_767_225_600_000_i64,
                    "pointInfoMap": {"p": {"visitNum": 1, "hot_keys": "x", "key_table": 3}}}),
            &ctx(),
        )
        .unwrap();
        assert_eq!(sds.points[0].keys, None);
    }

    #[test]
    fn malformed_hot_keys_name_the_field_and_only_they_are_left_out() {
        let k = |key: Value| json!({"key": key, "passes": 1});
        let eleven: Vec<Value> = (0..11).map(|i| k(json!(format!("k{i}")))).collect();
        let body = with(json!({"points": [
            {"name": "long", "visits": 1, "hot_keys": [k(json!("x".repeat(65))), k(json!("ok"))]},
            {"name": "control", "visits": 1, "hot_keys": [k(json!("a\u{7}b"))]},
            {"name": "many", "visits": 1, "hot_keys": eleven},
            {"name": "shapes", "visits": 1, "hot_keys": [
                {"passes": 1}, {"key": 5}, {"key": "n", "passes": -1, "refused": "2",
                                           "overridden": 1}, 7]},
            {"name": "list", "visits": 1, "hot_keys": {"key": "a"}},
            {"name": "table", "visits": 1, "hot_keys": [k(json!("fine"))],
             "key_table": {"tracked": -1, "evictions": 1.5}},
            {"name": "table_shape", "visits": 1, "key_table": [1]},
            {"name": "good", "visits": 1, "hot_keys": [k(json!("\u{e9}".repeat(32)))]},
            // Malformed elsewhere too: the whole point is left out.
            {"name": "bad", "visits": "x", "hot_keys": [k(json!(1))]}]}));
        let errors = json_heartbeat(&body, &ctx()).unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "points[0].hot_keys[0].key",
                "points[1].hot_keys[0].key",
                "points[2].hot_keys",
                "points[3].hot_keys[0].key",
                "points[3].hot_keys[1].key",
                "points[3].hot_keys[2].passes",
                "points[3].hot_keys[2].refused",
                "points[3].hot_keys[2].overridden",
                "points[3].hot_keys[3]",
                "points[4].hot_keys",
                "points[5].key_table.tracked",
                "points[5].key_table.evictions",
                "points[6].key_table",
                "points[8].visits",
                "points[8].hot_keys[0].key",
            ],
            "{errors:?}"
        );
        assert!(
            errors[0].message.contains("65 bytes"),
            "{}",
            errors[0].message
        );
        assert!(
            errors[1].message.contains("control"),
            "{}",
            errors[1].message
        );
        assert!(
            errors[2].message.contains("11 keys"),
            "{}",
            errors[2].message
        );
        // Leniently: every point but `bad`, without its malformed hot keys or key table
        // (a point's valid part is kept: `table` keeps its hot keys).
        let (hb, rejected) = json_heartbeat_lenient(&body, &ctx()).unwrap();
        assert_eq!(rejected, errors);
        let got: Vec<(&str, Option<usize>, bool)> = hb
            .points
            .iter()
            .map(|p| {
                (
                    p.point.as_str(),
                    p.keys.as_ref().map(|k| k.hot_keys.len()),
                    p.keys.as_ref().is_some_and(|k| k.key_table.is_some()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("long", None, false),
                ("control", None, false),
                ("many", None, false),
                ("shapes", None, false),
                ("list", None, false),
                ("table", Some(1), false),
                ("table_shape", None, false),
                ("good", Some(1), false),
            ]
        );
        assert_eq!(hb.points[0].visits, 1);
    }

    #[test]
    fn hot_keys_of_instances_merge_by_key() {
        let key = |k: &str, passes, refused, overridden| HotKey {
            key: k.into(),
            passes,
            refused,
            overridden,
        };
        let a = PointKeys {
            hot_keys: vec![key("x", 5, 0, false), key("y", 1, 1, true)],
            key_table: Some(KeyTableCounts {
                tracked: 2,
                evictions: 1,
                ..KeyTableCounts::default()
            }),
        };
        let b = PointKeys {
            hot_keys: (0..10)
                .map(|i| key(&format!("k{i}"), i, 0, false))
                .chain([key("y", 9, 0, false)])
                .collect(),
            key_table: Some(KeyTableCounts {
                tracked: 3,
                untracked_passes: 4,
                untracked_refused: u64::MAX,
                evictions: 0,
            }),
        };
        let c = PointKeys::default();
        let m = PointKeys::merged([&a, &b, &c]);
        let names: Vec<_> = m.hot_keys.iter().map(|k| k.key.as_str()).collect();
        // A tie goes to the key that sorts first (k5 before x).
        assert_eq!(
            names,
            ["y", "k9", "k8", "k7", "k6", "k5", "x", "k4", "k3", "k2"]
        );
        assert_eq!(m.hot_keys[0], key("y", 10, 1, true));
        assert_eq!(
            m.key_table,
            Some(KeyTableCounts {
                tracked: 5,
                untracked_passes: 4,
                untracked_refused: u64::MAX,
                evictions: 1
            })
        );
        assert_eq!(PointKeys::merged([&c]).key_table, None);
    }
}
