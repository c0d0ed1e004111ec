//! Reading statistics and policies, editing and restoring policies.

use super::{body, json_body, require, AdminState, ApiError};
use crate::auth::Right;
use crate::model::{AppKey, NewPolicyVersion, PointInfo, PolicyVersion, CYCLE_MS};
use crate::policy::{self, Document};
use crate::wire::check_name;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use resilience_runtime::config::Format;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The longest author name or comment accepted.
const MAX_AUTHOR_LEN: usize = 128;
const MAX_COMMENT_LEN: usize = 1024;

/// The most rows one statistics request returns.
const MAX_ROWS: usize = 50_000;

/// The stats range when none is given: the last 15 minutes.
const DEFAULT_RANGE_MS: i64 = 15 * 60 * 1000;

fn app_key(group: String, app: String) -> Result<AppKey, ApiError> {
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

fn stored_document(v: &PolicyVersion) -> Result<Document, ApiError> {
    Document::from_stored(&v.document).map_err(|problems| {
        ApiError::internal(format!(
            "stored policy version {} does not validate: {problems:?}",
            v.version
        ))
    })
}

/// `GET .../points`: points reported by instances and points with a policy.
pub(super) async fn points(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let key = app.clone();
    let reported = state.store_op(move |s| s.points(&key)).await?;
    let (_, doc) = current(&state, &app).await?;
    let with_policy = doc.point_names();
    let mut points: BTreeMap<String, PointInfo> =
        reported.into_iter().map(|p| (p.name.clone(), p)).collect();
    for name in &with_policy {
        points.entry(name.clone()).or_insert_with(|| PointInfo {
            name: name.clone(),
            declared: false,
            has_policy: true,
            first_seen_ms: None,
            last_seen_ms: None,
            last_cycle: None,
        });
    }
    for p in points.values_mut() {
        p.has_policy = with_policy.contains(&p.name);
    }
    let points: Vec<PointInfo> = points.into_values().collect();
    Ok(Json(json!({ "points": points, "now_ms": state.now_ms() })))
}

/// `GET .../instances`.
pub(super) async fn instances(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let instances = state.store_op(move |s| s.instances(&app)).await?;
    Ok(Json(
        json!({ "instances": instances, "now_ms": state.now_ms() }),
    ))
}

/// Query of `GET .../stats`.
#[derive(Debug, Deserialize)]
pub(super) struct StatsQuery {
    point: Option<String>,
    from: Option<i64>,
    to: Option<i64>,
    limit: Option<usize>,
}

/// `GET .../stats?point=&from=&to=&limit=`: cycles with `from <= start < to` (ms;
/// default: the last 15 minutes).
pub(super) async fn stats(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
    query: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    let app = app_key(group, app)?;
    let Query(q) =
        query.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query", e.body_text()))?;
    let now = state.now_ms();
    let to = q.to.unwrap_or(now + CYCLE_MS);
    let from = q.from.unwrap_or(to - DEFAULT_RANGE_MS);
    if from >= to {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("from ({from}) must be before to ({to})"),
        ));
    }
    let limit = q.limit.unwrap_or(MAX_ROWS).min(MAX_ROWS);
    let point = q.point.filter(|p| !p.is_empty());
    let rows = state
        .store_op(move |s| s.stats(&app, point.as_deref(), from, to, limit + 1))
        .await?;
    let truncated = rows.len() > limit;
    let rows = &rows[..rows.len().min(limit)];
    Ok(Json(json!({
        "from_ms": from, "to_ms": to, "cycle_ms": CYCLE_MS, "now_ms": now,
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
    document: Result<Document, Vec<policy::PolicyProblem>>,
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
        Some(Value::String(c)) if c.len() <= MAX_COMMENT_LEN => c.clone(),
        Some(_) => {
            return Err(field_error(
                "comment",
                format!("expected a string of at most {MAX_COMMENT_LEN} bytes"),
            ))
        }
    };
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
                Document::parse(text, format)
            }
            (None, Some(_)) => return Err(field_error("text", "expected a string")),
            _ => return Err(field_error(
                "policy",
                "give the policy either as `policy` (a JSON object) or as `text` (TOML or JSON)",
            )),
        };
    Ok(Draft {
        base_version,
        author,
        comment,
        document,
    })
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

/// `POST .../policy/validate`: the problems of a draft, or its canonical form.
pub(super) async fn validate_policy(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((group, app)): Path<(String, String)>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    require(&state, &headers, Right::Read)?;
    app_key(group, app)?;
    let draft = read_draft(&json_body(&body(raw)?)?)?;
    let doc = draft.document.map_err(invalid)?;
    Ok(Json(
        json!({"valid": true, "policy": doc.json, "toml": doc.to_toml()}),
    ))
}

/// Stores `doc` as the version after `base`, unless it equals the current one.
async fn commit(
    state: &AdminState,
    app: AppKey,
    base: u64,
    author: String,
    comment: String,
    doc: Document,
    restored_from: Option<u64>,
) -> Result<Json<Value>, ApiError> {
    let (current_version, current_doc) = current(state, &app).await?;
    let current = current_version.as_ref().map_or(0, |v| v.version);
    if current != base {
        return Err(crate::store::StoreError::Conflict { current }.into());
    }
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
/// the current version, 422 listing every problem if the policy is invalid.
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
    let author = required(draft.author, "author", "who makes the change")?;
    let doc = draft.document.map_err(invalid)?;
    commit(&state, app, base, author, draft.comment, doc, None).await
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
    commit(&state, app, base, author, comment, doc, Some(target)).await
}
