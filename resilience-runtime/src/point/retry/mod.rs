//! Retries at a point: `retry_settings` (the point's retry section), `retrying` and
//! `retrying_async` (`Point::call_retrying` and its async form), `hedging` (hedged
//! attempts).

#[cfg(feature = "tokio")]
pub(in crate::point) mod hedging;
pub(in crate::point) mod retry_settings;
pub(in crate::point) mod retrying;
#[cfg(feature = "tokio")]
pub(in crate::point) mod retrying_async;
