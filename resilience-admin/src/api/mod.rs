//! The HTTP API: routes, shared state, authentication and error responses.
//!
//! | method and path | token | what |
//! |---|---|---|
//! | `POST /api/v1/heartbeat` | app | one instance's closed cycle (our JSON) |
//! | `POST /api/v1/pull` | app | policies if the version changed (our JSON); with `breakers`, the fleet's breaker counts ([`crate::fleet`]) |
//! | `POST /sds/heartbeat/add` | app | the same in SDS's form protocol |
//! | `POST /sds/heartbeat/pullstrategy` | app | the same in SDS's form protocol |
//! | `GET /api/v1/health` | none | `{"ok": true}` |
//! | `GET /api/v1/apps` | read | every app with its version and instances |
//! | `GET /api/v1/apps/{group}/{app}/points` | read | points, declared ones included, with enforcement, drift, breakers, breakers across the fleet (`fleet`) |
//! | `GET /api/v1/apps/{group}/{app}/points/{point}/instances` | read | what each instance enforces for the point |
//! | `GET /api/v1/apps/{group}/{app}/points/{point}/instances/{instance}/local` | read | the instance's local (non-console) settings of the point |
//! | `GET /api/v1/apps/{group}/{app}/instances` | read | instances, the versions they hold, heartbeat health |
//! | `GET /api/v1/apps/{group}/{app}/stats?point=&from=&to=&range=&resolution=&sum=` | read | stored cycles (`resolution=10s`, default) or 1-second buckets (`1s`: counts, and the calls measured with their `mean_us` and `max_us`, `null` when none was) |
//! | `GET /api/v1/apps/{group}/{app}/policy` | read | the current version |
//! | `PUT /api/v1/apps/{group}/{app}/policy` | admin | a new version on top of `base_version` (with `point`: that point's settings only) |
//! | `POST /api/v1/apps/{group}/{app}/policy/validate` | read | problems of a draft (with their line for a text), nothing stored |
//! | `GET /api/v1/apps/{group}/{app}/policy/versions` | read | history, newest first |
//! | `GET /api/v1/apps/{group}/{app}/policy/versions/{v}` | read | one version |
//! | `POST /api/v1/apps/{group}/{app}/policy/versions/{v}/restore` | admin | roll back to `v` |
//!
//! Tokens travel as `Authorization: Bearer TOKEN`. Reads need no token unless the
//! server was given a read token. Errors are JSON: `{"error": {"code", "message",
//! "problems"?, "current_version"?}}`; SDS's endpoints add SDS's `errorMsg`.

mod admin;
mod ingest;
mod points;

use crate::auth::{Auth, Right};
use crate::dashboard;
use crate::store::{Store, StoreError};
use axum::extract::rejection::BytesRejection;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use resilience_runtime::Clock;
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt;
use std::sync::Arc;

/// What every request handler shares.
#[derive(Clone)]
pub struct AdminState {
    inner: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn Store>,
    auth: Auth,
    clock: Clock,
    retention_ms: i64,
    seconds_retention_ms: i64,
}

impl fmt::Debug for AdminState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminState")
            .field("store", &self.inner.store)
            .field("auth", &self.inner.auth)
            .field("retention_ms", &self.inner.retention_ms)
            .finish_non_exhaustive()
    }
}

impl AdminState {
    /// State over a store, with the server's tokens, clock and retention limit.
    pub fn new(store: Arc<dyn Store>, auth: Auth, clock: Clock, retention_ms: i64) -> Self {
        AdminState {
            inner: Arc::new(Shared {
                store,
                auth,
                clock,
                retention_ms,
                seconds_retention_ms: retention_ms,
            }),
        }
    }

    /// The same state keeping the 1-second buckets for `ms` (by default as long as
    /// the cycles).
    pub fn with_seconds_retention_ms(mut self, ms: i64) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(shared) => shared.seconds_retention_ms = ms,
            None => {
                let s = &self.inner;
                self.inner = Arc::new(Shared {
                    store: Arc::clone(&s.store),
                    auth: s.auth.clone(),
                    clock: s.clock.clone(),
                    retention_ms: s.retention_ms,
                    seconds_retention_ms: ms,
                });
            }
        }
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The server's wall clock, ms since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        let c = &self.inner.clock;
        i64::try_from(c.unix_time(c.now()).as_millis()).unwrap_or(i64::MAX)
    }

    /// The retention limit in ms.
    pub fn retention_ms(&self) -> i64 {
        self.inner.retention_ms
    }

    /// How long the 1-second buckets are kept, in ms.
    pub fn seconds_retention_ms(&self) -> i64 {
        self.inner.seconds_retention_ms
    }

    fn auth(&self) -> &Auth {
        &self.inner.auth
    }

    /// Runs a store operation on tokio's blocking pool.
    async fn store_op<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = Arc::clone(&self.inner.store);
        match tokio::task::spawn_blocking(move || f(store.as_ref())).await {
            Ok(result) => result.map_err(ApiError::from),
            Err(e) => Err(ApiError::internal(format!("storage task failed: {e}"))),
        }
    }
}

/// Every route, with the body limit applied.
pub fn router(state: AdminState, max_body_bytes: usize) -> Router {
    let apps = Router::new()
        .route("/points", get(points::points))
        .route("/points/{point}/instances", get(admin::point_instances))
        .route(
            "/points/{point}/instances/{instance}/local",
            get(admin::point_local),
        )
        .route("/instances", get(admin::instances))
        .route("/stats", get(admin::stats))
        .route(
            "/policy",
            get(admin::current_policy).put(admin::edit_policy),
        )
        .route("/policy/validate", post(admin::validate_policy))
        .route("/policy/versions", get(admin::history))
        .route("/policy/versions/{version}", get(admin::version))
        .route("/policy/versions/{version}/restore", post(admin::restore));
    Router::new()
        .route("/", get(dashboard::index))
        .route("/dashboard.js", get(dashboard::script))
        .route("/editor.js", get(dashboard::editor))
        .route("/dashboard.css", get(dashboard::style))
        .route(
            "/api/v1/health",
            get(|| async { Json(json!({"ok": true})) }),
        )
        .route("/api/v1/heartbeat", post(ingest::json_heartbeat))
        .route("/api/v1/pull", post(ingest::json_pull))
        .route("/sds/heartbeat/add", post(ingest::sds_heartbeat))
        .route("/sds/heartbeat/pullstrategy", post(ingest::sds_pull))
        .route("/api/v1/apps", get(admin::apps))
        .nest("/api/v1/apps/{group}/{app}", apps)
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::map_response(no_store))
        .with_state(state)
}

/// API answers are live data: never cached.
async fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The bearer token of a request, if any.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let rest = value.strip_prefix(b"Bearer ")?;
    Some(rest.trim_ascii())
}

/// Checks that the request may read or write.
fn require(state: &AdminState, headers: &HeaderMap, right: Right) -> Result<(), ApiError> {
    let token = bearer(headers);
    if state.auth().allows(token, right) {
        return Ok(());
    }
    let what = match right {
        Right::Read => "reading needs the read or admin token",
        Right::Write => "changing policies needs the admin token",
    };
    Err(ApiError::unauthorized(if token.is_some() {
        format!("invalid token: {what}")
    } else {
        format!("missing `Authorization: Bearer` header: {what}")
    }))
}

/// The body, or the error for one that was too large or could not be read.
fn body(body: Result<axum::body::Bytes, BytesRejection>) -> Result<axum::body::Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "body_too_large",
                "the request body is larger than the server's limit",
            )
        } else {
            ApiError::new(status, "bad_body", rejection.body_text())
        }
    })
}

/// Parses a JSON body.
fn json_body(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!("the body is not valid JSON: {e}"),
        )
    })
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    problems: Option<Value>,
    current_version: Option<u64>,
    sds: bool,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            problems: None,
            current_version: None,
            sds: false,
        }
    }

    fn unauthorized(message: String) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    fn internal(message: String) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    fn with_problems(mut self, problems: &impl Serialize) -> ApiError {
        self.problems = serde_json::to_value(problems).ok();
        self
    }

    /// Adds SDS's `errorMsg` to the answer.
    fn sds(mut self) -> ApiError {
        self.sds = true;
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Conflict { current } => ApiError {
                current_version: Some(current),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    "version_conflict",
                    format!(
                        "the policy was changed meanwhile: the current version is {current}; \
                         reload it and apply your change again"
                    ),
                )
            },
            e => ApiError::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(p) = self.problems {
            error["problems"] = p;
        }
        if let Some(v) = self.current_version {
            error["current_version"] = v.into();
        }
        let mut body = json!({ "error": error });
        if self.sds {
            body["errorMsg"] = self.message.into();
        }
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
