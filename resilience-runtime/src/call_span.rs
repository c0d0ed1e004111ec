//! The `tracing` span around each call of a `#[downgrade]` or `#[breaker]` fn
//! (feature `tracing`).
//!
//! One span per guarded call, named [`CALL_SPAN`] with target `resilience`, at level
//! `DEBUG` by default: quiet under `RUST_LOG=info`, shown with `RUST_LOG=debug` or a
//! directive for the target alone (`RUST_LOG=info,resilience=debug`). To see them at
//! `INFO` (or hide them down at `TRACE`), call [`set_level`] once at start-up; every
//! span is made at the one call site of the level in force, so a filter enables all
//! of them or none. It has three fields:
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
//!     .with_max_level(tracing::Level::DEBUG)
//!     .finish();
//! tracing::subscriber::with_default(subscriber, || assert_eq!(lookup(), Ok(7)));
//! assert_eq!(CALL_SPAN, "resilience.call");
//! # }
//! ```

use std::sync::atomic::{AtomicU8, Ordering};

/// The name of the span around each guarded call.
pub const CALL_SPAN: &str = "resilience.call";

/// The level of the call spans, [`DEBUG`](tracing::Level::DEBUG) unless set.
static LEVEL: AtomicU8 = AtomicU8::new(DEBUG);

const TRACE: u8 = 0;
const DEBUG: u8 = 1;
const INFO: u8 = 2;

/// Sets the level of the call spans, for every call from now on: `TRACE`, `DEBUG`
/// (the default) or `INFO`. Raise it to `INFO` to see the spans under a subscriber
/// that shows `INFO` (as `RUST_LOG=info` does); lower it to `TRACE` to keep them out
/// of `DEBUG` logs. `WARN` and `ERROR` are taken as `INFO`: a call's span is not a
/// warning.
///
/// # Examples
///
/// ```
/// use resilience_runtime::call_span;
///
/// call_span::set_level(tracing::Level::INFO);
/// assert_eq!(call_span::level(), tracing::Level::INFO);
/// call_span::set_level(tracing::Level::DEBUG);
/// ```
pub fn set_level(level: tracing::Level) {
    let code = if level == tracing::Level::TRACE {
        TRACE
    } else if level == tracing::Level::DEBUG {
        DEBUG
    } else {
        INFO
    };
    LEVEL.store(code, Ordering::Relaxed);
}

/// The level of the call spans (see [`set_level`]).
pub fn level() -> tracing::Level {
    match LEVEL.load(Ordering::Relaxed) {
        TRACE => tracing::Level::TRACE,
        DEBUG => tracing::Level::DEBUG,
        _ => tracing::Level::INFO,
    }
}

/// `span!` of a call at one of the three levels: one call site each.
macro_rules! call_span_at {
    ($level:expr, $point:expr) => {
        tracing::span!(
            target: "resilience",
            $level,
            "resilience.call",
            point = $point,
            outcome = tracing::field::Empty,
            reason = tracing::field::Empty,
        )
    };
}

/// A new span for a call of `point`, at the level in force.
#[inline]
pub(crate) fn call_span(point: &'static str) -> tracing::Span {
    match LEVEL.load(Ordering::Relaxed) {
        TRACE => call_span_at!(tracing::Level::TRACE, point),
        DEBUG => call_span_at!(tracing::Level::DEBUG, point),
        _ => call_span_at!(tracing::Level::INFO, point),
    }
}

/// Whether a subscriber takes call spans at the level in force.
#[inline]
fn enabled() -> bool {
    match LEVEL.load(Ordering::Relaxed) {
        TRACE => tracing::span_enabled!(target: "resilience", tracing::Level::TRACE),
        DEBUG => tracing::span_enabled!(target: "resilience", tracing::Level::DEBUG),
        _ => tracing::span_enabled!(target: "resilience", tracing::Level::INFO),
    }
}

/// Records the call's outcome (and why, for a refusal or a cut) into the current
/// span, if that is a call span.
#[inline]
pub(crate) fn record(outcome: &'static str, reason: Option<crate::Reason>) {
    // Without a subscriber that takes call spans (none, or one filtering the
    // `resilience` target out), there is no call span to write into: one check of the
    // subscriber's cached interest, no look-up of the current span.
    if !enabled() {
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
