//! The two ways a guarded service answers a refusal and judges an outcome:
//! [`AsError`] and [`AsResponse`], the [`RefusalMode`]s.

use super::error::{GuardError, Refused};

/// How a guarded service reports a refusal and judges an outcome; the mode of a
/// [`PointService`](super::PointService) or [`AdmissionService`](super::AdmissionService).
///
/// [`AsError`] returns [`GuardError`]s; [`AsResponse`] answers HTTP requests itself.
pub trait RefusalMode<Res, E> {
    /// The guarded service's error type.
    type Error;

    /// What the service returns for a refused call.
    fn refused(refused: Refused) -> Result<Res, Self::Error>;

    /// Wraps an error of the inner service.
    fn inner_error(error: E) -> Self::Error;

    /// Whether the outcome counts as a failure for the guard.
    fn is_failure(result: &Result<Res, E>) -> bool;
}

/// The default mode: a refusal is `Err(GuardError::Refused(..))`, and the inner
/// service's `Err` is a failure.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsError;

impl<Res, E> RefusalMode<Res, E> for AsError {
    type Error = GuardError<E>;

    fn refused(refused: Refused) -> Result<Res, GuardError<E>> {
        Err(GuardError::Refused(refused))
    }

    fn inner_error(error: E) -> GuardError<E> {
        GuardError::Inner(error)
    }

    fn is_failure(result: &Result<Res, E>) -> bool {
        result.is_err()
    }
}

/// The HTTP mode: a refusal is answered with [`Refused::into_http_response`], the
/// error type stays the inner service's (so axum accepts the layer as it is), and a
/// 5xx response or an `Err` is a failure.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsResponse;

impl<B: From<String>, E> RefusalMode<http::Response<B>, E> for AsResponse {
    type Error = E;

    fn refused(refused: Refused) -> Result<http::Response<B>, E> {
        Ok(refused.into_http_response())
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
