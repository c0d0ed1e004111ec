//! How a guarded service reports a refused call: [`Refused`] (with its HTTP status
//! and `Retry-After`) and the [`GuardError`] of the error mode.

use crate::{Downgraded, Reason};
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use std::fmt;
use std::time::Duration;

/// A call refused by a [`PointLayer`](super::PointLayer) or an [`AdmissionLayer`](super::AdmissionLayer): which guard, why, and
/// how long to wait before retrying when that is known.
///
/// # Examples
///
/// ```
/// use resilience_runtime::tower::Refused;
/// use resilience_runtime::Reason;
/// use std::time::Duration;
///
/// let r = Refused {
///     point: "api.search",
///     reason: Reason::Concurrency,
///     retry_after: Some(Duration::from_millis(1500)),
/// };
/// let res: http::Response<String> = r.into_http_response();
/// assert_eq!(res.status(), 429);
/// assert_eq!(res.headers()["retry-after"], "2");
/// assert_eq!(res.body(), "`api.search` refused the request (concurrency)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The point's name, or the name given to the [`AdmissionLayer`](super::AdmissionLayer).
    pub point: &'static str,
    /// The rule that refused the call: a point's [`Reason`]; an
    /// [`AdmissionLayer`](super::AdmissionLayer)'s [`Gate`](crate::adaptive::Gate)
    /// refuses with [`Reason::Concurrency`] and its adaptive limits with
    /// [`Reason::Overloaded`].
    pub reason: Reason,
    /// How long the client should wait before retrying, when known.
    pub retry_after: Option<Duration>,
}

impl Refused {
    /// The refusal of a point's downgrade.
    pub fn from_downgraded(d: Downgraded, retry_after: Option<Duration>) -> Self {
        Refused {
            point: d.point(),
            reason: d.reason(),
            retry_after,
        }
    }

    /// The HTTP status for this refusal: `429 Too Many Requests` for every limit,
    /// `503 Service Unavailable` for an open breaker, `504 Gateway Timeout` for a call
    /// cut at its deadline ([`Reason::Deadline`], when a `Downgraded` from a
    /// `timeout = "..."` function is turned into a refusal).
    pub fn status(&self) -> StatusCode {
        match self.reason {
            // An open breaker is the server's own state, not the client's rate.
            Reason::BreakerOpen => StatusCode::SERVICE_UNAVAILABLE,
            Reason::Deadline => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// An HTTP response for this refusal: [`status`](Refused::status), a
    /// `Retry-After` header in whole seconds (rounded up, at least 1) when the wait is
    /// known, and the message as a plain-text body.
    pub fn into_http_response<B: From<String>>(self) -> http::Response<B> {
        let mut res = http::Response::new(B::from(self.to_string()));
        *res.status_mut() = self.status();
        let headers = res.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            headers.insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        res
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            // Admitted, then cut: not a refusal.
            Reason::Deadline => write!(f, "`{}` cut the request at its deadline", self.point),
            reason => write!(f, "`{}` refused the request ({reason})", self.point),
        }
    }
}

impl std::error::Error for Refused {}

impl<B: From<String>> From<Refused> for http::Response<B> {
    fn from(r: Refused) -> Self {
        r.into_http_response()
    }
}

/// The error of a guarded service in the default mode ([`AsError`](super::AsError)): the guard refused
/// the call, or the inner service failed.
#[derive(Debug)]
pub enum GuardError<E> {
    /// The guard refused the call; the inner service was not called.
    Refused(Refused),
    /// The inner service's error.
    Inner(E),
}

impl<E> GuardError<E> {
    /// The refusal, if this is one.
    pub fn refused(&self) -> Option<&Refused> {
        match self {
            GuardError::Refused(r) => Some(r),
            GuardError::Inner(_) => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Refused(r) => r.fmt(f),
            GuardError::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GuardError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Refused(_) => None,
            // Transparent: `Display` already prints the inner error, so its source is
            // this one's (an error chain never prints the same text twice).
            GuardError::Inner(e) => e.source(),
        }
    }
}

/// The refusal of a call `point` refused, with its wait: an open breaker's own
/// (the time until it may admit a probe) when known, else `retry_after`.
pub(super) fn refusal(
    point: &'static crate::Point,
    d: Downgraded,
    retry_after: Option<Duration>,
) -> Refused {
    let breaker_wait = (d.reason() == Reason::BreakerOpen)
        .then(|| point.breaker_retry_in())
        .flatten();
    Refused::from_downgraded(d, breaker_wait.or(retry_after))
}
