//! gRPC (feature `tonic`): a refusal as a [`tonic::Status`], and [`AsStatus`], the mode
//! that answers refused gRPC calls with one.

use super::error::{GuardError, Refused};
use super::respond::RefusalMode;
use crate::Reason;
use tonic::{Code, Status};

/// The metadata key of the server's pushback, gRPC's `Retry-After`: how many
/// milliseconds a client's retry policy should wait before trying again (gRPC's
/// retry design, A6).
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

impl Refused {
    /// The gRPC status code of this refusal (feature `tonic`), as
    /// [`status`](Refused::status) maps to HTTP: `RESOURCE_EXHAUSTED` for every limit
    /// (HTTP 429), `UNAVAILABLE` for an open breaker (503), `DEADLINE_EXCEEDED` for a
    /// call cut at its deadline (504).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::tower::Refused;
    /// use resilience_runtime::Reason;
    /// use tonic::Code;
    ///
    /// let refused = |reason| Refused { point: "p", reason, retry_after: None };
    /// assert_eq!(refused(Reason::Concurrency).grpc_code(), Code::ResourceExhausted);
    /// assert_eq!(refused(Reason::QueueTimeout).grpc_code(), Code::ResourceExhausted);
    /// assert_eq!(refused(Reason::BreakerOpen).grpc_code(), Code::Unavailable);
    /// assert_eq!(refused(Reason::Deadline).grpc_code(), Code::DeadlineExceeded);
    /// ```
    pub fn grpc_code(&self) -> Code {
        match self.reason {
            Reason::BreakerOpen => Code::Unavailable,
            Reason::Deadline => Code::DeadlineExceeded,
            _ => Code::ResourceExhausted,
        }
    }

    /// This refusal as a gRPC status (feature `tonic`): [`grpc_code`](Refused::grpc_code),
    /// the message, and, when the wait is known, the metadata
    /// `grpc-retry-pushback-ms` ([`RETRY_PUSHBACK`]) in whole milliseconds, rounded
    /// up.
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
    ///     reason: Reason::BreakerOpen,
    ///     retry_after: Some(Duration::from_micros(1500)),
    /// };
    /// let status = r.to_status();
    /// assert_eq!(status.code(), tonic::Code::Unavailable);
    /// assert_eq!(status.message(), "`api.search` refused the request (breaker_open)");
    /// assert_eq!(status.metadata().get("grpc-retry-pushback-ms").unwrap(), "2");
    /// ```
    pub fn to_status(&self) -> Status {
        let mut status = Status::new(self.grpc_code(), self.to_string());
        if let Some(wait) = self.retry_after {
            let millis = wait.as_millis() + u128::from(wait.subsec_nanos() % 1_000_000 > 0);
            let millis = u64::try_from(millis).unwrap_or(u64::MAX);
            status.metadata_mut().insert(RETRY_PUSHBACK, millis.into());
        }
        status
    }
}

impl From<Refused> for Status {
    fn from(r: Refused) -> Status {
        r.to_status()
    }
}

/// The error of a guarded service in the error mode as a gRPC status: a refusal's
/// ([`Refused::to_status`]), or the inner error's own.
impl<E: Into<Status>> From<GuardError<E>> for Status {
    fn from(e: GuardError<E>) -> Status {
        match e {
            GuardError::Refused(r) => r.to_status(),
            GuardError::Inner(e) => e.into(),
        }
    }
}

/// The gRPC mode (feature `tonic`): a refused call is answered with its
/// [`Refused::to_status`] as a gRPC response (HTTP 200, `grpc-status` and
/// `grpc-message` in the headers: a "trailers-only" response, which a tonic client
/// reads as `Err(Status)`), the error type stays the inner service's, and a failure
/// is an `Err`, an HTTP 5xx, or a gRPC status in the response headers that says the
/// server failed: `UNKNOWN`, `DEADLINE_EXCEEDED`, `INTERNAL`, `UNAVAILABLE` or
/// `DATA_LOSS` (a unary tonic handler's `Err(Status)` is sent so). A status sent
/// later, in the trailers of a streamed response, is not seen.
///
/// Made by [`PointLayer::grpc`](super::PointLayer::grpc); for tonic's `Server::layer`
/// and for a client's `Channel` alike.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsStatus;

impl<B: Default, E> RefusalMode<http::Response<B>, E> for AsStatus {
    type Error = E;

    fn refused(refused: Refused) -> Result<http::Response<B>, E> {
        Ok(refused.to_status().into_http())
    }

    fn inner_error(error: E) -> E {
        error
    }

    fn is_failure(result: &Result<http::Response<B>, E>) -> bool {
        let Ok(res) = result else {
            return true;
        };
        if res.status().is_server_error() {
            return true;
        }
        let code = res
            .headers()
            .get(Status::GRPC_STATUS)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
            .map(Code::from);
        matches!(
            code,
            Some(
                Code::Unknown
                    | Code::DeadlineExceeded
                    | Code::Internal
                    | Code::Unavailable
                    | Code::DataLoss
            )
        )
    }
}
