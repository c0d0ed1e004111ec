//! Heartbeats and policy pulls, in our JSON protocol and in SDS's form protocol.

use super::{bearer, body, json_body, AdminState, ApiError};
use crate::fleet::{self, FleetCount, Reported};
use crate::model::{AppKey, Heartbeat, Ingested, Protocol};
use crate::policy::Document;
use crate::store::Pull;
use crate::wire::{self, Context, InputError, PullRequest};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;

fn malformed(errors: Vec<InputError>) -> ApiError {
    let summary = errors
        .iter()
        .take(5)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "malformed_request",
        format!("malformed request: {summary}"),
    )
    .with_problems(&errors)
}

/// Refuses a request without a valid app token for `app`. A request with no token
/// at all is refused before its body is read.
fn require_app(state: &AdminState, headers: &HeaderMap, app: &AppKey) -> Result<(), ApiError> {
    if state.auth().allows_app(bearer(headers), app) {
        Ok(())
    } else {
        Err(ApiError::unauthorized(format!(
            "invalid app token for app {app}"
        )))
    }
}

fn require_some_token(headers: &HeaderMap) -> Result<(), ApiError> {
    match bearer(headers) {
        Some(_) => Ok(()),
        None => Err(ApiError::unauthorized(
            "missing `Authorization: Bearer` header: heartbeats and pulls need an app token".into(),
        )),
    }
}

/// SDS's form body: the `client` field's JSON.
fn sds_client(bytes: &[u8]) -> Result<Value, ApiError> {
    let client = form_urlencoded::parse(bytes)
        .find(|(k, _)| k == "client")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_request",
                "the form field `client` is missing (SDS sends `client=<JSON>`)",
            )
        })?;
    serde_json::from_str(&client).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!("the form field `client` is not valid JSON: {e}"),
        )
    })
}

fn context<'a>(state: &AdminState, peer_ip: &'a str) -> Context<'a> {
    let now_ms = state.now_ms();
    Context {
        now_ms,
        oldest_ms: now_ms.saturating_sub(state.retention_ms()),
        peer_ip,
    }
}

async fn store_heartbeat(state: &AdminState, hb: Heartbeat) -> Result<Ingested, ApiError> {
    let now = state.now_ms();
    state.store_op(move |s| s.record_heartbeat(&hb, now)).await
}

/// `POST /api/v1/heartbeat`.
pub(super) async fn json_heartbeat(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    require_some_token(&headers)?;
    let value = json_body(&body(raw)?)?;
    let peer_ip = peer.ip().to_string();
    let (hb, rejected) =
        wire::json_heartbeat_lenient(&value, &context(&state, &peer_ip)).map_err(malformed)?;
    require_app(&state, &headers, &hb.app)?;
    let (points, part, parts) = (hb.points.len(), hb.part, hb.parts);
    let outcome = store_heartbeat(&state, hb).await?;
    Ok(Json(
        json!({"result": outcome, "points": points, "part": part,
                   "parts": parts, "rejected": rejected}),
    ))
}

/// `POST /sds/heartbeat/add`.
pub(super) async fn sds_heartbeat(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let result = async {
        require_some_token(&headers)?;
        let client = sds_client(&body(raw)?)?;
        let peer_ip = peer.ip().to_string();
        let (hb, rejected) =
            wire::sds_heartbeat_lenient(&client, &context(&state, &peer_ip)).map_err(malformed)?;
        require_app(&state, &headers, &hb.app)?;
        let points = hb.points.len();
        let outcome = store_heartbeat(&state, hb).await?;
        Ok(Json(
            json!({"result": outcome, "points": points, "errorMsg": null,
                       "rejected": rejected}),
        ))
    }
    .await;
    result.map_err(ApiError::sds)
}

/// A pull's answer: the current version, the document if the instance holds another
/// one, and the fleet's breaker counts.
type Pulled = (u64, Option<Document>, Option<BTreeMap<String, FleetCount>>);

/// Records the pull and returns the app's current version and, if the instance
/// holds another one, the document.
///
/// With `breakers` (our JSON protocol, see [`crate::fleet`]) the instance's breaker
/// states are kept, and the fleet's counts returned (this pull's states included);
/// without, none are (an instance with no classic breaker has no quorum to apply).
async fn pull(
    state: &AdminState,
    req: PullRequest,
    protocol: Protocol,
    breakers: Option<Reported>,
) -> Result<Pulled, ApiError> {
    let now = state.now_ms();
    state
        .store_op(move |s| {
            let stored = breakers.as_ref().map(Reported::to_stored);
            s.record_pull(
                &Pull {
                    app: &req.app,
                    instance: &req.instance,
                    host: &req.host,
                    ip: &req.ip,
                    protocol,
                    version: req.version,
                    breakers: stored.as_deref(),
                },
                now,
            )?;
            let fleet = match stored {
                Some(_) => {
                    let reports = s.breaker_reports(&req.app, fleet::oldest_fresh(now))?;
                    Some(fleet::count(&reports, now))
                }
                None => None,
            };
            let current = s.current_version(&req.app)?;
            if current == req.version {
                return Ok((current, None, fleet));
            }
            let doc = match s.policy_version(&req.app, current)? {
                Some(v) => Some(v.document),
                None => None,
            };
            Ok((current, Some(doc), fleet))
        })
        .await
        .and_then(|(current, doc, fleet)| match doc {
            None => Ok((current, None, fleet)),
            // Version 0: no policy at all, so the instance clears what it had.
            Some(None) => Ok((current, Some(Document::empty()), fleet)),
            Some(Some(stored)) => Document::from_stored(&stored)
                .map(|d| (current, Some(d), fleet))
                .map_err(|problems| {
                    ApiError::internal(format!(
                        "stored policy version {current} does not validate: {problems:?}"
                    ))
                }),
        })
}

/// `POST /api/v1/pull`: `{"changed", "version", "policy"}`.
pub(super) async fn json_pull(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    require_some_token(&headers)?;
    let value = json_body(&body(raw)?)?;
    let req = wire::json_pull(&value, &peer.ip().to_string()).map_err(malformed)?;
    let breakers = Reported::read(&value).map_err(malformed)?;
    require_app(&state, &headers, &req.app)?;
    let (version, doc, fleet) = pull(&state, req, Protocol::Json, breakers).await?;
    let mut answer = match doc {
        None => json!({"changed": false, "version": version, "policy": null}),
        Some(d) => json!({"changed": true, "version": version, "policy": d.json}),
    };
    if let Some(fleet) = fleet {
        answer["fleet"] = json!(fleet);
    }
    Ok(Json(answer))
}

/// `POST /sds/heartbeat/pullstrategy`: SDS's `HeartBeatResponse`.
pub(super) async fn sds_pull(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let result = async {
        require_some_token(&headers)?;
        let client = sds_client(&body(raw)?)?;
        let req = wire::sds_pull(&client, &peer.ip().to_string()).map_err(malformed)?;
        require_app(&state, &headers, &req.app)?;
        let (version, doc, _) = pull(&state, req, Protocol::Sds, None).await?;
        Ok(Json(match doc {
            None => json!({"sdsSchemeName": null, "changed": false, "version": version,
                           "strategies": null, "errorMsg": null}),
            Some(d) => json!({"sdsSchemeName": null, "changed": true, "version": version,
                              "strategies": d.sds_strategies(), "errorMsg": null}),
        }))
    }
    .await;
    result.map_err(ApiError::sds)
}
