//! How a guarded service reports a refused call: [`Rejected`] (with its HTTP status
//! and `Retry-After`), its [`RejectReason`], and the [`GuardError`] of the error mode.

use crate::{Downgraded, Reason};
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;
use std::fmt;
use std::time::Duration;

/// Which rule refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// A point's policy downgraded the call.
    Downgraded(Reason),
    /// A [`Gate`](crate::adaptive::Gate) had no free slot.
    CapacityExhausted,
    /// An adaptive limit ([`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter), [`GradientLimiter`](crate::adaptive::GradientLimiter)) found the service
    /// overloaded.
    Overloaded,
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::Downgraded(r) => write!(f, "downgraded ({r})"),
            RejectReason::CapacityExhausted => f.write_str("capacity exhausted"),
            RejectReason::Overloaded => f.write_str("overloaded"),
        }
    }
}

/// A call refused by a [`PointLayer`](super::PointLayer) or an [`AdmissionLayer`](super::AdmissionLayer): which guard, why, and
/// how long to wait before retrying when that is known.
///
/// # Examples
///
/// ```
/// use resilience_runtime::tower::{Rejected, RejectReason};
/// use resilience_runtime::Reason;
/// use std::time::Duration;
///
/// let r = Rejected {
///     point: "api.search",
///     reason: RejectReason::Downgraded(Reason::Concurrency),
///     retry_after: Some(Duration::from_millis(1500)),
/// };
/// let res: http::Response<String> = r.into_http_response();
/// assert_eq!(res.status(), 429);
/// assert_eq!(res.headers()["retry-after"], "2");
/// assert_eq!(res.body(), "`api.search` refused the request: downgraded (concurrency)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The point's name, or the name given to the [`AdmissionLayer`](super::AdmissionLayer).
    pub point: &'static str,
    /// The rule that refused the call.
    pub reason: RejectReason,
    /// How long the client should wait before retrying, when known.
    pub retry_after: Option<Duration>,
}

impl Rejected {
    /// The rejection of a point's downgrade.
    pub fn from_downgraded(d: Downgraded, retry_after: Option<Duration>) -> Self {
        Rejected {
            point: d.point(),
            reason: RejectReason::Downgraded(d.reason()),
            retry_after,
        }
    }

    /// The HTTP status for this rejection: `429 Too Many Requests` for every limit,
    /// `503 Service Unavailable` for an open breaker, `504 Gateway Timeout` for a call
    /// cut at its deadline ([`Reason::Deadline`], when a `Downgraded` from a
    /// `timeout = "..."` function is turned into a rejection).
    pub fn status(&self) -> StatusCode {
        match self.reason {
            // An open breaker is the server's own state, not the client's rate.
            RejectReason::Downgraded(Reason::BreakerOpen) => StatusCode::SERVICE_UNAVAILABLE,
            RejectReason::Downgraded(Reason::Deadline) => StatusCode::GATEWAY_TIMEOUT,
            RejectReason::Downgraded(_)
            | RejectReason::CapacityExhausted
            | RejectReason::Overloaded => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// An HTTP response for this rejection: [`status`](Rejected::status), a
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

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` refused the request: {}", self.point, self.reason)
    }
}

impl std::error::Error for Rejected {}

impl<B: From<String>> From<Rejected> for http::Response<B> {
    fn from(r: Rejected) -> Self {
        r.into_http_response()
    }
}

/// The error of a guarded service in the default mode ([`AsError`](super::AsError)): the guard refused
/// the call, or the inner service failed.
#[derive(Debug)]
pub enum GuardError<E> {
    /// The guard refused the call; the inner service was not called.
    Rejected(Rejected),
    /// The inner service's error.
    Inner(E),
}

impl<E> GuardError<E> {
    /// The rejection, if this is one.
    pub fn rejected(&self) -> Option<&Rejected> {
        match self {
            GuardError::Rejected(r) => Some(r),
            GuardError::Inner(_) => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Rejected(r) => r.fmt(f),
            GuardError::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GuardError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Rejected(_) => None,
            GuardError::Inner(e) => Some(e),
        }
    }
}

/// The rejection of a call `point` refused, with its wait: an open breaker's own
/// (the time until it may admit a probe) when known, else `retry_after`.
pub(super) fn rejection(
    point: &'static crate::Point,
    d: Downgraded,
    retry_after: Option<Duration>,
) -> Rejected {
    let breaker_wait = (d.reason() == Reason::BreakerOpen)
        .then(|| point.breaker_retry_in())
        .flatten();
    Rejected::from_downgraded(d, breaker_wait.or(retry_after))
}
