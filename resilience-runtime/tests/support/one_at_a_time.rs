//! A policy that admits one call at a time through an adaptive limit and makes the
//! others wait in its queue (shared by the queue tests and the tower layer's).

use resilience_runtime::adaptive::GradientConfig;
use resilience_runtime::{AdaptiveLimit, Policy};
use std::time::Duration;

/// A gradient limit pinned at 1 (initial = max, and the least limit is 1 by default)
/// with `queue(waiting, wait)`.
pub(crate) fn gradient_pinned_at_one_with_queue(waiting: u64, wait: Duration) -> Policy {
    let gradient = GradientConfig::builder()
        .initial_limit(1)
        .max_limit(1)
        .build()
        .unwrap();
    Policy::builder()
        .adaptive(AdaptiveLimit::Gradient(gradient))
        .queue(waiting, wait)
        .build()
        .unwrap()
}
