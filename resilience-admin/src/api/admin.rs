//! Reading statistics and policies, editing and restoring policies.

use super::{body, json_body, require, AdminState, ApiError};
use crate::auth::Right;
use crate::enforcement::{self, Console, Verdict};
use crate::model::{
    AppKey, BreakerReport, InstanceInfo, NewPolicyVersion, PolicyVersion, SectionOrigin, CYCLE_MS,
    SECOND_MS,
};
use crate::policy::{self, Document};
use crate::wire::check_name;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use resilience_runtime::config::{Format, PointConfig};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The longest author name or comment accepted.
const MAX_AUTHOR_LEN: usize = 128;
const MAX_COMMENT_LEN: usize = 1024;

/// The most rows one statistics request returns.
const MAX_ROWS: usize = 50_000;

/// The stats range when none is given: the last 15 minutes.
const DEFAULT_RANGE_MS: i64 = 15 * 60 * 1000;

/// The latest time a stats query may name: the end of the year 9999, in ms.
const MAX_TIME_MS: i64 = 253_402_300_799_999;

pub(super) fn app_key(group: String, app: String) -> Result<AppKey, ApiError> {
    for (field, v) in [("group", &group), ("app", &app)] {
        check_name(v).map_err(|m| {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_path", format!("{field}: {m}"))
        })?;
    }
    Ok(AppKey::new(group, app))
}

/// `GET /api/v1/apps`.
pub(super) async fn apps(
    State(state): State<AdminState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let apps = state.store_op(|s| s.apps()).await?;
    Ok(Json(json!({ "apps": apps, "now_ms": state.now_ms() })))
}

/// The current version and its document (version 0: the empty document).
async fn current(
    state: &AdminState,
    app: &AppKey,
) -> Result<(Option<PolicyVersion>, Document), ApiError> {
    let key = app.clone();
    let version = state
        .store_op(move |s| {
            let v = s.current_version(&key)?;
            if v == 0 {
                Ok(None)
            } else {
                s.policy_version(&key, v)
            }
        })
        .await?;
    let doc = match &version {
        None => Document::empty(),
        Some(v) => stored_document(v)?,
    };
    Ok((version, doc))
}

pub(super) fn stored_document(v: &PolicyVersion) -> Result<Document, ApiError> {
    Document::from_stored(&v.document).map_err(|problems| {
        ApiError::internal(format!(
            "stored policy version {} does not validate: {problems:?}",
            v.version
        ))
    })
}

/// The start of the last closed cycle at `now_ms`: the newest cycle whose figures
/// can be in.
pub(super) fn last_closed_cycle(now_ms: i64) -> i64 {
    now_ms - now_ms.rem_euclid(CYCLE_MS) - CYCLE_MS
}

/// A point without traffic in more than this many closed cycles is idle.
pub(super) const IDLE_CYCLES: i64 = 2;

/// At most this many older console versions are read to judge digests; reports of
/// other versions are not judged by digest.
const MAX_VERSIONS_JUDGED: usize = 32;

/// The console as the drift rules need it: the current version, and the digests of
/// the versions in `held` (those the reports' console sections come from).
pub(super) async fn console_view(
    state: &AdminState,
    app: &AppKey,
    current_version: u64,
    doc: &Document,
    held: impl IntoIterator<Item = u64>,
) -> Result<Console, ApiError> {
    let mut console = Console::new(current_version, doc);
    let mut needed: Vec<u64> = held
        .into_iter()
        .filter(|&v| console.needs(v))
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .collect();
    // Versions after the current one were never written: no query needed.
    for &v in needed.iter().filter(|&&v| v > current_version) {
        console.add_version(v, None);
    }
    needed.retain(|&v| v < current_version);
    // The newest first; beyond the limit, unknown (not judged by digest).
    needed.reverse();
    for &v in needed.iter().skip(MAX_VERSIONS_JUDGED) {
        console.add_version(v, Some(Err(())));
    }
    needed.truncate(MAX_VERSIONS_JUDGED);
    if needed.is_empty() {
        return Ok(console);
    }
    let key = app.clone();
    let loaded = state
        .store_op(move |s| {
            needed
                .into_iter()
                .map(|v| Ok((v, s.policy_version(&key, v)?)))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    for (v, found) in loaded {
        console.add_version(
            v,
            found.map(|pv| Document::from_stored(&pv.document).map_err(|_| ())),
        );
    }
    Ok(console)
}

fn point_name(point: &str) -> Result<(), ApiError> {
    check_name(point)
        .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "bad_path", format!("point: {m}")))
}

/// One instance's enforcement of a point, as the point's instance list shows it.
#[derive(Debug, Serialize)]
struct InstanceEnforcement<'a> {
    instance: &'a str,
    host: Option<&'a str>,
    /// Its last heartbeat is at most [`enforcement::LIVE_MS`] old.
    live: bool,
    last_heartbeat_ms: Option<i64>,
    /// The policy version it last said it holds.
    policy_version: Option<u64>,
    digest: &'a str,
    origins: &'a BTreeMap<String, SectionOrigin>,
    has_local: bool,
    breaker: Option<&'a BreakerReport>,
    #[serde(flatten)]
    verdict: Verdict,
    cycle_start_ms: i64,
    received_ms: i64,
}

/// `GET .../points/{point}/instances`: what each instance enforces for the point.
pub(super) async fn point_instances(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app, point)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    point_name(&point)?;
    let (key, p) = (app.clone(), point.clone());
    let (rows, instances) = state
        .store_op(move |s| Ok((s.enforcement(&key, Some(&p), false)?, s.instances(&key)?)))
        .await?;
    let (version, doc) = current(&state, &app).await?;
    let current_version = version.as_ref().map_or(0, |v| v.version);
    let console = console_view(
        &state,
        &app,
        current_version,
        &doc,
        rows.iter()
            .filter_map(|r| enforcement::console_version(&r.entry)),
    )
    .await?;
    let now = state.now_ms();
    let instances: BTreeMap<&str, &InstanceInfo> =
        instances.iter().map(|i| (i.instance.as_str(), i)).collect();
    let list: Vec<InstanceEnforcement<'_>> = rows
        .iter()
        .map(|r| {
            let info = instances.get(r.instance.as_str()).copied();
            InstanceEnforcement {
                instance: &r.instance,
                host: info.map(|i| i.host.as_str()),
                live: enforcement::is_live(info, now),
                last_heartbeat_ms: info.and_then(|i| i.last_heartbeat_ms),
                policy_version: info.and_then(|i| i.policy_version),
                digest: &r.entry.digest,
                origins: &r.entry.origins,
                has_local: r.has_local,
                breaker: r.entry.breaker.as_ref(),
                verdict: enforcement::judge(&r.entry, &console),
                cycle_start_ms: r.cycle_start_ms,
                received_ms: r.received_ms,
            }
        })
        .collect();
    let console_digest = enforcement::digests(&doc)
        .remove(&point)
        .unwrap_or_else(|| "none".to_owned());
    Ok(Json(json!({
        "point": point, "now_ms": now, "policy_version": current_version,
        "has_policy": console.current_points.contains(&point),
        "console_digest": console_digest, "instances": list,
    })))
}

/// `GET .../points/{point}/instances/{instance}/local`: the settings of the point that
/// the instance takes from other sources than the console, as it sent them.
pub(super) async fn point_local(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app, point, instance)): Path<(String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    point_name(&point)?;
    let (key, p) = (app.clone(), point.clone());
    let rows = state
        .store_op(move |s| s.enforcement(&key, Some(&p), true))
        .await?;
    let Some(row) = rows.into_iter().find(|r| r.instance == instance) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_report",
            format!(
                "instance {instance:?} of app {app} reported nothing enforced for point {point:?}"
            ),
        ));
    };
    let local = row.entry.local;
    let text = local
        .as_ref()
        .and_then(|l| serde_json::to_string_pretty(l).ok());
    // As a policy file, when this server's runtime reads it.
    let toml = local.as_ref().and_then(|l| {
        Document::from_json(&json!({ "points": { point.as_str(): l } }))
            .ok()
            .map(|d| d.to_toml())
    });
    Ok(Json(json!({
        "point": point, "instance": row.instance, "local": local, "text": text, "toml": toml,
        "origins": row.entry.origins, "cycle_start_ms": row.cycle_start_ms,
        "received_ms": row.received_ms,
    })))
}

/// `GET .../instances`, with each instance's heartbeat health: the age of its last
/// upload and what its client last reported.
pub(super) async fn instances(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let instances = state.store_op(move |s| s.instances(&app)).await?;
    let now = state.now_ms();
    let list: Vec<Value> = instances
        .iter()
        .map(|i| {
            let mut v = serde_json::to_value(i).unwrap_or_else(|_| json!({}));
            v["last_upload_age_ms"] = i.last_heartbeat_ms.map(|t| (now - t).max(0)).into();
            v["live"] = enforcement::is_live(Some(i), now).into();
            v
        })
        .collect();
    Ok(Json(json!({ "instances": list, "now_ms": now })))
}

/// Query of `GET .../stats`.
#[derive(Debug, Deserialize)]
pub(super) struct StatsQuery {
    point: Option<String>,
    from: Option<i64>,
    to: Option<i64>,
    limit: Option<usize>,
    /// `10s` (cycles, the default) or `1s` (the live view's 1-second buckets).
    resolution: Option<String>,
    /// The length of the range ending at `to` (ms, or with a unit: `300s`, `5m`,
    /// `1h`, `7d`); without `to`, the range ends where the heartbeats are in.
    range: Option<String>,
    /// `points`: one row per cycle (second), summed over the points.
    sum: Option<String>,
}

/// Instances upload a cycle 5 s after it ends: a range given by its length ends at
/// the end of the last cycle that ended at least this long ago, so that its last
/// cycle does not show a dip while the uploads of some instances are still to come.
const UPLOAD_DELAY_MS: i64 = 6_000;

/// The longest `range`: the longest a cycle may be kept.
const MAX_RANGE_MS: i64 = 366 * 24 * 3600 * 1000;

fn bad_query(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_query", message)
}

/// `range`: ms, or a number with the unit `ms`, `s`, `m`, `h` or `d`.
fn parse_range(text: &str) -> Result<i64, ApiError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let unit_ms = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    match digits.parse::<i64>() {
        Ok(n) if unit_ms > 0 && n > 0 && n <= MAX_RANGE_MS / unit_ms => Ok(n * unit_ms),
        _ => Err(bad_query(format!(
            "range: expected a positive duration in ms or with a unit (300s, 5m, 1h, 7d) of \
             at most 366 days, got {:?}",
            t.chars().take(40).collect::<String>()
        ))),
    }
}

/// The end of the newest cycle whose heartbeats are in at `now_ms` (see
/// [`UPLOAD_DELAY_MS`]).
fn complete_to(now_ms: i64) -> i64 {
    let t = now_ms - UPLOAD_DELAY_MS;
    t - t.rem_euclid(CYCLE_MS)
}

/// `GET .../stats?point=&from=&to=&range=&resolution=&sum=&limit=`: cycles (or with
/// `resolution=1s` the 1-second buckets) with `from <= start < to` (ms; default: the
/// last 15 minutes; with `range` and no `to`, the range ending at the end of the newest
/// cycle whose heartbeats are in), of one point or, per point, of all; with
/// `sum=points` summed over the points.
pub(super) async fn stats(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
    query: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let Query(q) = query.map_err(|e| bad_query(e.body_text()))?;
    let now = state.now_ms();
    let range = q.range.as_deref().map(parse_range).transpose()?;
    // Times before 1970 or after 9999 are mistakes, and their arithmetic below could
    // overflow: a 400 naming the field, never a panic.
    for (field, value) in [("from", q.from), ("to", q.to)] {
        if let Some(v) = value.filter(|v| !(0..=MAX_TIME_MS).contains(v)) {
            return Err(bad_query(format!(
                "{field} ({v}) must be a time in ms between 0 and {MAX_TIME_MS}"
            )));
        }
    }
    let to = match (q.to, range) {
        (Some(to), _) => to,
        (None, Some(_)) => complete_to(now),
        (None, None) => now + CYCLE_MS,
    };
    let from = match (q.from, range) {
        (Some(from), _) => from,
        (None, Some(range)) => to.saturating_sub(range),
        (None, None) => to.saturating_sub(DEFAULT_RANGE_MS),
    };
    if from >= to {
        return Err(bad_query(format!("from ({from}) must be before to ({to})")));
    }
    let sum_points = match q.sum.as_deref() {
        None | Some("") => false,
        Some("points") => true,
        Some(other) => {
            return Err(bad_query(format!(
                "sum: expected `points`, got {:?}",
                other.chars().take(40).collect::<String>()
            )))
        }
    };
    let limit = q.limit.unwrap_or(MAX_ROWS).min(MAX_ROWS);
    let point = q.point.filter(|p| !p.is_empty());
    match q.resolution.as_deref() {
        None | Some("" | "10s") => {}
        Some("1s") => {
            let range = Range { from, to, now };
            return second_stats(&state, app, point, sum_points, range, limit).await;
        }
        Some(other) => {
            return Err(bad_query(format!(
                "resolution: expected `10s` or `1s`, got {:?}",
                other.chars().take(40).collect::<String>()
            )))
        }
    }
    let rows = state
        .store_op(move |s| match (sum_points, point) {
            (true, None) => s.stats_summed(&app, from, to, limit + 1),
            // One point summed over points is that point.
            (_, point) => s.stats(&app, point.as_deref(), from, to, limit + 1),
        })
        .await?;
    let truncated = rows.len() > limit;
    let mut rows = serde_json::to_value(&rows[..rows.len().min(limit)])
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if sum_points {
        for row in rows.as_array_mut().into_iter().flatten() {
            row["point"] = Value::Null;
        }
    }
    Ok(Json(json!({
        "from_ms": from, "to_ms": to, "cycle_ms": CYCLE_MS, "now_ms": now,
        "resolution": "10s", "step_ms": CYCLE_MS,
        "rows": rows, "truncated": truncated,
    })))
}

/// The range of a statistics request.
struct Range {
    from: i64,
    to: i64,
    now: i64,
}

/// `GET .../stats?resolution=1s`: the 1-second buckets, and which cycles of the range
/// lack some instance's seconds. Each row has its counts and its call durations:
/// `measured`, `sum_us`, `mean_us` (`sum_us / measured`) and `max_us` (the longest of
/// any instance, and point when summed), the last two `null` when no call was
/// measured (see [`SecondRow`](crate::model::SecondRow)).
async fn second_stats(
    state: &AdminState,
    app: AppKey,
    point: Option<String>,
    sum_points: bool,
    Range { from, to, now }: Range,
    limit: usize,
) -> Result<Json<Value>, ApiError> {
    let (rows, incomplete) = state
        .store_op(move |s| {
            let rows = s.seconds(&app, point.as_deref(), sum_points, from, to, limit + 1)?;
            let incomplete = s.cycles_without_seconds(&app, point.as_deref(), from, to)?;
            Ok((rows, incomplete))
        })
        .await?;
    let truncated = rows.len() > limit;
    let rows = &rows[..rows.len().min(limit)];
    let retention = state.seconds_retention_ms();
    Ok(Json(json!({
        "from_ms": from, "to_ms": to, "now_ms": now,
        "resolution": "1s", "step_ms": SECOND_MS,
        "seconds_retention_ms": retention,
        "retained_from_ms": now.saturating_sub(retention),
        "incomplete_cycles": incomplete,
        "rows": rows, "truncated": truncated,
    })))
}

fn version_json(v: &PolicyVersion, doc: &Document) -> Value {
    json!({
        "version": v.version, "author": v.author, "created_ms": v.created_ms,
        "comment": v.comment, "restored_from": v.restored_from, "diff": v.diff,
        "policy": doc.json, "toml": doc.to_toml(),
    })
}

fn empty_version_json(doc: &Document) -> Value {
    json!({
        "version": 0, "author": null, "created_ms": null, "comment": "",
        "restored_from": null, "diff": [], "policy": doc.json, "toml": doc.to_toml(),
    })
}

/// `GET .../policy`.
pub(super) async fn current_policy(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let (version, doc) = current(&state, &app).await?;
    Ok(Json(match version {
        Some(v) => version_json(&v, &doc),
        None => empty_version_json(&doc),
    }))
}

/// A policy edit or a draft to validate.
struct Draft {
    base_version: Option<u64>,
    author: Option<String>,
    comment: String,
    /// The one point the draft is about (`"point"`): only its settings change.
    point: Option<String>,
    /// The text, if the draft came as text (problems are placed in it).
    text: Option<(String, Format)>,
    document: Result<Document, Vec<policy::PolicyProblem>>,
}

/// The longest point name accepted as the subject of an edit (the runtime's limit).
const MAX_POINT_LEN: usize = resilience_runtime::MAX_POINT_NAME_LEN;

impl Draft {
    /// For a draft of one point: the settings it gives the point (`None`: remove its
    /// policy); every problem placed in the text.
    fn point_settings(
        &self,
        point: &str,
    ) -> Result<Option<PointConfig>, Vec<policy::PolicyProblem>> {
        let doc = self.document.as_ref().map_err(Clone::clone)?;
        doc.point_draft(point).map_err(|mut problems| {
            if let Some((text, format)) = &self.text {
                policy::locate_problems(&mut problems, text, *format);
            }
            problems
        })
    }
}

fn field_error(field: &str, message: impl Into<String>) -> ApiError {
    let message = message.into();
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "malformed_request",
        format!("{field}: {message}"),
    )
    .with_problems(&[json!({"field": field, "message": message})])
}

/// Reads `{"base_version", "author", "comment"?, "policy" | "text" + "format"}`.
fn read_draft(v: &Value) -> Result<Draft, ApiError> {
    let Value::Object(m) = v else {
        return Err(field_error("body", "expected a JSON object"));
    };
    let base_version = match m.get("base_version") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            field_error(
                "base_version",
                "expected the version number the edit is based on",
            )
        })?),
    };
    let author = match m.get("author") {
        None | Some(Value::Null) => None,
        Some(Value::String(a)) => {
            let a = a.trim();
            if a.is_empty() || a.len() > MAX_AUTHOR_LEN || a.chars().any(char::is_control) {
                return Err(field_error(
                    "author",
                    format!("must be 1 to {MAX_AUTHOR_LEN} characters without control characters"),
                ));
            }
            Some(a.to_owned())
        }
        Some(_) => return Err(field_error("author", "expected a string")),
    };
    let comment = match m.get("comment") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(c)) if c.len() <= MAX_COMMENT_LEN => {
            if c.chars()
                .any(|ch| ch.is_control() && !matches!(ch, '\n' | '\r' | '\t'))
            {
                return Err(field_error(
                    "comment",
                    "must not contain control characters other than line breaks and tabs",
                ));
            }
            c.clone()
        }
        Some(_) => {
            return Err(field_error(
                "comment",
                format!("expected a string of at most {MAX_COMMENT_LEN} bytes"),
            ))
        }
    };
    let point = match m.get("point") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if !p.is_empty() && p.len() <= MAX_POINT_LEN => {
            if p.chars().any(char::is_control) {
                return Err(field_error("point", "must not contain control characters"));
            }
            Some(p.clone())
        }
        Some(_) => {
            return Err(field_error(
                "point",
                format!("expected the name of a point (1 to {MAX_POINT_LEN} bytes)"),
            ))
        }
    };
    let mut source = None;
    let document =
        match (m.get("policy"), m.get("text")) {
            (Some(p), None) if p.is_object() => Document::from_json(p),
            (Some(_), None) => return Err(field_error("policy", "expected a JSON object")),
            (None, Some(Value::String(text))) => {
                let format = match m.get("format").and_then(Value::as_str) {
                    None | Some("toml") => Format::Toml,
                    Some("json") => Format::Json,
                    Some(other) => {
                        return Err(field_error(
                            "format",
                            format!("expected `toml` or `json`, got {other:?}"),
                        ))
                    }
                };
                source = Some((text.clone(), format));
                Document::parse(text, format)
            }
            (None, Some(_)) => return Err(field_error("text", "expected a string")),
            _ => return Err(field_error(
                "policy",
                "give the policy either as `policy` (a JSON object) or as `text` (TOML or JSON)",
            )),
        };
    if let Ok(doc) = &document {
        check_point_names(doc)?;
    }
    Ok(Draft {
        base_version,
        author,
        comment,
        point,
        text: source,
        document,
    })
}

/// Refuses point names with control characters (NUL included) in a draft: they
/// could never be stored on every backend nor shown safely.
fn check_point_names(doc: &Document) -> Result<(), ApiError> {
    match doc
        .file
        .points
        .keys()
        .find(|name| name.chars().any(char::is_control))
    {
        Some(name) => Err(field_error(
            &format!("points.{}", policy::escape_controls(name)),
            "a point name must not contain control characters",
        )),
        None => Ok(()),
    }
}

fn invalid(problems: Vec<policy::PolicyProblem>) -> ApiError {
    let summary = problems
        .iter()
        .take(5)
        .map(|p| match (&p.point, &p.field) {
            (Some(pt), Some(f)) => format!("{pt}.{f}: {}", p.message),
            (Some(pt), None) => format!("{pt}: {}", p.message),
            (None, Some(f)) => format!("{f}: {}", p.message),
            (None, None) => p.message.clone(),
        })
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_policy",
        format!("the policy is invalid: {summary}"),
    )
    .with_problems(&problems)
}

/// `POST .../policy/validate`: the problems of a draft (with their line when it is
/// text), or its canonical form. With `"point"`, the draft must configure that point
/// only (or nothing: removing its policy).
pub(super) async fn validate_policy(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    app_key(group, app)?;
    let draft = read_draft(&json_body(&body(raw)?)?)?;
    if let Some(point) = &draft.point {
        draft.point_settings(point).map_err(invalid)?;
    }
    let doc = draft.document.map_err(invalid)?;
    Ok(Json(
        json!({"valid": true, "policy": doc.json, "toml": doc.to_toml()}),
    ))
}

/// What an edit makes of the current document.
enum Change {
    /// This document replaces it.
    Whole(Document),
    /// The settings of one point are replaced (`Some`) or removed (`None`).
    Point(String, Option<Box<PointConfig>>),
}

/// Stores the change as the version after `base`, unless it changes nothing.
async fn commit(
    state: &AdminState,
    app: AppKey,
    base: u64,
    author: String,
    comment: String,
    change: Change,
    restored_from: Option<u64>,
) -> Result<Json<Value>, ApiError> {
    let (current_version, current_doc) = current(state, &app).await?;
    let current = current_version.as_ref().map_or(0, |v| v.version);
    if current != base {
        return Err(crate::store::StoreError::Conflict { current }.into());
    }
    let doc = match change {
        Change::Whole(doc) => doc,
        Change::Point(point, settings) => current_doc.with_point(&point, settings.map(|s| *s)),
    };
    let diff = policy::diff(&current_doc.json, &doc.json);
    if diff.is_empty() {
        return Ok(Json(json!({"changed": false, "version": current})));
    }
    let change = NewPolicyVersion {
        base_version: base,
        author,
        created_ms: state.now_ms(),
        comment,
        restored_from,
        diff,
        document: doc.json.clone(),
    };
    let stored = state
        .store_op(move |s| s.commit_policy(&app, &change))
        .await?;
    let mut out = version_json(&stored, &doc);
    out["changed"] = true.into();
    Ok(Json(out))
}

fn required<T>(v: Option<T>, field: &str, what: &str) -> Result<T, ApiError> {
    v.ok_or_else(|| field_error(field, format!("is missing: {what}")))
}

/// `PUT .../policy`: a new version on top of `base_version`; 409 if that is no longer
/// the current version, 422 listing every problem if the policy is invalid. With
/// `"point"`, only that point's settings are replaced by the draft's (removed if the
/// draft does not configure it); every other point stays as it is in the current
/// version.
pub(super) async fn edit_policy(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Write)?;
    let app = app_key(group, app)?;
    let draft = read_draft(&json_body(&body(raw)?)?)?;
    let base = required(
        draft.base_version,
        "base_version",
        "the version the edit is based on (0 for the first)",
    )?;
    let author = required(draft.author.clone(), "author", "who makes the change")?;
    let change = match &draft.point {
        Some(point) => {
            let settings = draft.point_settings(point).map_err(invalid)?;
            Change::Point(point.clone(), settings.map(Box::new))
        }
        None => Change::Whole(draft.document.map_err(invalid)?),
    };
    commit(&state, app, base, author, draft.comment, change, None).await
}

fn parse_version(v: &str) -> Result<u64, ApiError> {
    v.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_path",
            format!("version {v:?} is not a number"),
        )
    })
}

/// `GET .../policy/versions`: every version, newest first.
pub(super) async fn history(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let versions = state.store_op(move |s| s.policy_history(&app)).await?;
    Ok(Json(json!({ "versions": versions })))
}

async fn load_version(state: &AdminState, app: &AppKey, v: u64) -> Result<PolicyVersion, ApiError> {
    let key = app.clone();
    state
        .store_op(move |s| s.policy_version(&key, v))
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_version",
                format!("app {app} has no policy version {v}"),
            )
        })
}

/// `GET .../policy/versions/{v}`.
pub(super) async fn version(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app, v)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let found = load_version(&state, &app, parse_version(&v)?).await?;
    let doc = stored_document(&found)?;
    Ok(Json(version_json(&found, &doc)))
}

/// `POST .../policy/versions/{v}/restore` with `{"base_version", "author"}`: a new
/// version whose policy is version `v`'s.
pub(super) async fn restore(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app, v)): Path<(String, String, String)>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Write)?;
    let app = app_key(group, app)?;
    let target = parse_version(&v)?;
    let value = json_body(&body(raw)?)?;
    let mut request = value.clone();
    if let Value::Object(m) = &mut request {
        // Only the metadata of the edit format applies here.
        m.insert("policy".into(), json!({"points": {}}));
        m.remove("text");
        m.remove("point");
    }
    let draft = read_draft(&request)?;
    let base = required(
        draft.base_version,
        "base_version",
        "the current version, which the restore replaces",
    )?;
    let author = required(draft.author, "author", "who restores")?;
    let found = load_version(&state, &app, target).await?;
    let doc = stored_document(&found)?;
    let comment = if draft.comment.is_empty() {
        format!("restore version {target}")
    } else {
        draft.comment
    };
    commit(
        &state,
        app,
        base,
        author,
        comment,
        Change::Whole(doc),
        Some(target),
    )
    .await
}
