//! The `tracing` span around each call of a `#[downgrade]` or `#[breaker]` fn
//! (feature `tracing`).
//!
//! One span per guarded call, named [`CALL_SPAN`] with target `resilience`, at level
//! `INFO`, made at one call site (so a filter enables all of them or none). It has
//! three fields:
//!
//! | field | value |
//! |---|---|
//! | `point` | the point's name |
//! | `outcome` | `ok`, `exception`, `panic`, `downgraded` (refused), `timeout` (cut at its deadline) or `cancelled` (its future dropped) |
//! | `reason` | for `downgraded` and `timeout`, the [`Reason`](crate::Reason) as text (`visits`, `breaker_open`, `deadline`, ...) |
//!
//! The span is entered while the call runs: a sync body inside it, an async call's
//! future instrumented with it (entered at each poll and while it is dropped), so
//! spans and events of the body are its children, and a layer that exports spans
//! (an OpenTelemetry one, say) passes its fields on. The outcome is recorded by the generated code's completion hooks into
//! the current span, and only when that is a call span: a span of the caller's is
//! never written to.
//!
//! # Examples
//!
//! ```
//! # #[cfg(feature = "macros")] {
//! use resilience_runtime::{call_span::CALL_SPAN, downgrade, Downgraded};
//! use tracing_subscriber::fmt::format::FmtSpan;
//!
//! #[downgrade(point = "docs.call_span")]
//! fn lookup() -> Result<u32, Downgraded> {
//!     Ok(7)
//! }
//!
//! // Prints `resilience.call{point="docs.call_span" outcome="ok"}: close ...`.
//! let subscriber = tracing_subscriber::fmt()
//!     .with_test_writer()
//!     .with_span_events(FmtSpan::CLOSE)
//!     .finish();
//! tracing::subscriber::with_default(subscriber, || assert_eq!(lookup(), Ok(7)));
//! assert_eq!(CALL_SPAN, "resilience.call");
//! # }
//! ```

/// The name of the span around each guarded call.
pub const CALL_SPAN: &str = "resilience.call";

/// A new span for a call of `point`.
#[inline]
pub(crate) fn call_span(point: &'static str) -> tracing::Span {
    tracing::info_span!(
        target: "resilience",
        "resilience.call",
        point,
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty,
    )
}

/// Records the call's outcome (and why, for a refusal or a cut) into the current
/// span, if that is a call span.
#[inline]
pub(crate) fn record(outcome: &'static str, reason: Option<crate::Reason>) {
    // Without a subscriber that takes call spans (none, or one filtering the
    // `resilience` target out), there is no call span to write into: one check of the
    // subscriber's cached interest, no look-up of the current span.
    if !tracing::span_enabled!(target: "resilience", tracing::Level::INFO) {
        return;
    }
    let span = tracing::Span::current();
    if span.metadata().is_some_and(|m| m.name() == CALL_SPAN) {
        span.record("outcome", outcome);
        if let Some(reason) = reason {
            span.record("reason", reason.as_str());
        }
    }
}
