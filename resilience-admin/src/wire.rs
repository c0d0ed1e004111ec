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
//! `POST /api/v1/pull`: `{"app_group", "app", "instance", "host", "ip", "version"}`.
//!
//! # SDS's protocol
//!
//! `POST /sds/heartbeat/add` and `POST /sds/heartbeat/pullstrategy`, form-encoded,
//! one field `client` holding SDS's `HeartbeatRequest` JSON: `appGroupName`,
//! `appName`, `ip`, `hostname`, `statisticsCycleTime` (the END of the reported
//! cycle, ms), `pointInfoMap` (`point -> {visitNum, exceptionNum, concurrentNum,
//! timeoutNum, downgradeNum}`), or for a pull `version` and `pointList`. This
//! project's client adds `instanceId`, `declaredPoints`, `knownPoints` and, per point,
//! `downgradeReasons`; SDS's admin ignores them.

use crate::model::{
    AppKey, Heartbeat, PointCycle, Protocol, CYCLE_MS, MAX_COUNT, MAX_NAME_LEN,
    MAX_POINTS_PER_HEARTBEAT,
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
    if s.trim().is_empty() {
        Err("must not be empty or blank".into())
    } else if s.trim() != s {
        Err("must not begin or end with whitespace".into())
    } else if s.len() > MAX_NAME_LEN {
        Err(format!(
            "is {} bytes long, more than the limit of {MAX_NAME_LEN}",
            s.len()
        ))
    } else if s.chars().any(char::is_control) {
        Err("must not contain control characters".into())
    } else {
        Ok(())
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
        known: r.names("known_points"),
        declared: r.names("declared_points"),
        points: json_points(&mut r),
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
            let mut out = Vec::with_capacity(items.len());
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let key = format!("points[{i}]");
                match r.child(&key, item).and_then(|mut p| {
                    let name = p.name("name");
                    read_point_counts(&mut p, name, JSON_FIELDS)
                }) {
                    Some(point) => out.push(point),
                    None => ok = false,
                }
            }
            if ok {
                check_unique(r, "points", &out).then_some(out)
            } else {
                None
            }
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
}

impl Parts {
    /// The heartbeat, if every field was well formed.
    fn heartbeat(self, protocol: Protocol) -> Option<Heartbeat> {
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
        })
    }
}

/// Field names of one point's counts in each protocol.
struct CountFields {
    visits: &'static str,
    passes: Option<&'static str>,
    downgrades: &'static str,
    exceptions: &'static str,
    timeouts: &'static str,
    concurrency: &'static str,
    reasons: &'static str,
}

const JSON_FIELDS: CountFields = CountFields {
    visits: "visits",
    passes: Some("passes"),
    downgrades: "downgrades",
    exceptions: "exceptions",
    timeouts: "timeouts",
    concurrency: "peak_concurrency",
    reasons: "downgrades_by_reason",
};

const SDS_FIELDS: CountFields = CountFields {
    visits: "visitNum",
    passes: None,
    downgrades: "downgradeNum",
    exceptions: "exceptionNum",
    timeouts: "timeoutNum",
    concurrency: "concurrentNum",
    reasons: "downgradeReasons",
};

fn read_point_counts(
    p: &mut Reader<'_, '_>,
    name: Option<String>,
    f: CountFields,
) -> Option<PointCycle> {
    let visits = p.count(f.visits);
    let downgrades = p.count(f.downgrades);
    let exceptions = p.count(f.exceptions);
    let timeouts = p.count(f.timeouts);
    let peak = p.count(f.concurrency);
    let reasons = read_reasons(p, f.reasons, downgrades);
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
        peak_concurrency: peak?,
        downgrades_by_reason: reasons?,
    })
}

fn check_unique(r: &mut Reader<'_, '_>, key: &str, points: &[PointCycle]) -> bool {
    let mut seen = BTreeSet::new();
    for (i, p) in points.iter().enumerate() {
        if !seen.insert(p.point.as_str()) {
            let f = format!("{}[{i}].name", r.field(key));
            r.error(f, format!("point {:?} is reported twice", p.point));
            return false;
        }
    }
    true
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
        known: r.names("knownPoints"),
        declared: r.names("declaredPoints"),
        points: sds_points(&mut r),
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

fn is_idle(p: &PointCycle) -> bool {
    p.visits == 0 && p.exceptions == 0 && p.timeouts == 0 && p.peak_concurrency == 0
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
}
