//! The web dashboard: one HTML page, two scripts and a stylesheet, compiled into the
//! binary (no build step) and served as they are.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("dashboard.js");
const EDITOR: &str = include_str!("editor.js");
const STYLE: &str = include_str!("dashboard.css");

/// Scripts and styles come from this server only; charts are inline SVG built by the
/// script, so nothing else is needed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `GET /`.
pub(crate) async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `GET /dashboard.js`.
pub(crate) async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /editor.js`: the policy editors.
pub(crate) async fn editor() -> Response {
    asset(EDITOR, "text/javascript; charset=utf-8")
}

/// `GET /dashboard.css`.
pub(crate) async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}
