//! The two ways a guarded service answers a refusal and judges an outcome:
//! [`AsError`] and [`AsResponse`], the [`RejectMode`]s.

use super::error::{GuardError, Rejected};

/// How a guarded service reports a refusal and judges an outcome; the mode of a
/// [`PointService`](super::PointService) or [`AdmissionService`](super::AdmissionService).
///
/// [`AsError`] returns [`GuardError`]s; [`AsResponse`] answers HTTP requests itself.
pub trait RejectMode<Res, E> {
    /// The guarded service's error type.
    type Error;

    /// What the service returns for a refused call.
    fn rejected(rejected: Rejected) -> Result<Res, Self::Error>;

    /// Wraps an error of the inner service.
    fn inner_error(error: E) -> Self::Error;

    /// Whether the outcome counts as a failure for the guard.
    fn is_failure(result: &Result<Res, E>) -> bool;
}

/// The default mode: a refusal is `Err(GuardError::Rejected(..))`, and the inner
/// service's `Err` is a failure.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsError;

impl<Res, E> RejectMode<Res, E> for AsError {
    type Error = GuardError<E>;

    fn rejected(rejected: Rejected) -> Result<Res, GuardError<E>> {
        Err(GuardError::Rejected(rejected))
    }

    fn inner_error(error: E) -> GuardError<E> {
        GuardError::Inner(error)
    }

    fn is_failure(result: &Result<Res, E>) -> bool {
        result.is_err()
    }
}

/// The HTTP mode: a refusal is answered with [`Rejected::into_http_response`], the
/// error type stays the inner service's (so axum accepts the layer as it is), and a
/// 5xx response or an `Err` is a failure.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsResponse;

impl<B: From<String>, E> RejectMode<http::Response<B>, E> for AsResponse {
    type Error = E;

    fn rejected(rejected: Rejected) -> Result<http::Response<B>, E> {
        Ok(rejected.into_http_response())
    }

    fn inner_error(error: E) -> E {
        error
    }

    fn is_failure(result: &Result<http::Response<B>, E>) -> bool {
        result
            .as_ref()
            .map_or(true, |res| res.status().is_server_error())
    }
}
