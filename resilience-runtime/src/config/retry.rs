//! The `retry` section of a point: `[points."x".retry]` and its optional
//! `[points."x".retry.budget]` (see [`RetryPolicy`]).
//!
//! Every field but `attempts` may be left out: the backoff then is
//! [`Retry::builder`]'s (50 ms doubling up to 2 s, full jitter; a `max` left out is raised
//! to `base` if that is longer), the budget [`BudgetConfig::default`]'s.

use super::duration::format_duration;
use super::error::ProblemKind;
use super::node::Node;
use super::report::Reporter;
use crate::retry::{BudgetConfig, Retry, RetryPolicy};
use serde::Serialize;

/// The fields of `[points."x".retry]`.
const RETRY_FIELDS: [&str; 6] = ["attempts", "base", "multiplier", "max", "jitter", "budget"];
/// The fields of `[points."x".retry.budget]`.
const BUDGET_FIELDS: [&str; 3] = ["percent", "min_per_second", "window"];

/// Checks `[points."x".retry]`; `None` once a problem is reported.
pub(super) fn check_retry(r: &mut Reporter<'_>, value: &Node) -> Option<RetryPolicy> {
    let before = r.count();
    let [attempts, base, multiplier, max, jitter, budget] =
        r.section("retry", value, RETRY_FIELDS)?;
    let mut retry = Retry::new(1);
    let attempts = r.required("retry.attempts", attempts);
    if let Some(n) = attempts.and_then(|v| r.u64("retry.attempts", v)) {
        retry.attempts = n;
    }
    let b = &mut retry.backoff;
    if let Some(d) = base.and_then(|v| r.duration("retry.base", v)) {
        b.base = d;
        b.max = b.max.max(d);
    }
    if let Some(d) = max.and_then(|v| r.duration("retry.max", v)) {
        b.max = d;
    }
    if let Some(x) = multiplier.and_then(|v| r.number("retry.multiplier", v)) {
        b.multiplier = x;
    }
    if let Some(x) = jitter.and_then(|v| r.number("retry.jitter", v)) {
        b.jitter = x;
    }
    let mut policy = RetryPolicy::new(retry);
    if let Some(v) = budget {
        policy.budget = check_budget(r, v);
    }
    // Range checks of each part, even when another part was mistyped, so one load
    // reports them all.
    let mut report = |e: crate::FieldError| {
        r.push(
            &format!("retry.{}", e.field),
            ProblemKind::OutOfRange,
            e.message,
        );
    };
    let attempts_only = RetryPolicy::new(Retry {
        attempts: policy.retry.attempts,
        backoff: Retry::new(1).backoff,
    });
    if let Err(e) = attempts_only.validate() {
        report(e);
    }
    let backoff_only = RetryPolicy::new(Retry {
        attempts: 1,
        backoff: policy.retry.backoff,
    });
    if let Err(e) = backoff_only.validate() {
        report(e);
    }
    if let Some(config) = policy.budget {
        let budget_only = RetryPolicy {
            budget: Some(config),
            ..RetryPolicy::new(Retry::new(1))
        };
        if let Err(e) = budget_only.validate() {
            report(e);
        }
    }
    (r.count() == before).then_some(policy)
}

fn check_budget(r: &mut Reporter<'_>, value: &Node) -> Option<BudgetConfig> {
    let [percent, min, window] = r.section("retry.budget", value, BUDGET_FIELDS)?;
    let mut c = BudgetConfig::default();
    if let Some(x) = percent.and_then(|v| r.number("retry.budget.percent", v)) {
        c.percent = x;
    }
    if let Some(n) = min.and_then(|v| r.u64("retry.budget.min_per_second", v)) {
        c.min_per_second = n;
    }
    if let Some(d) = window.and_then(|v| r.duration("retry.budget.window", v)) {
        c.window = d;
    }
    Some(c)
}

/// `[points."x".retry]` as written: fields at their default left out, but `attempts`
/// and every budget field always written.
#[derive(Serialize)]
pub(super) struct RetryOut {
    attempts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    base: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    multiplier: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<BudgetOut>,
}

#[derive(Serialize)]
struct BudgetOut {
    percent: f64,
    min_per_second: u64,
    window: String,
}

impl RetryOut {
    pub(super) fn of(policy: &RetryPolicy) -> RetryOut {
        let d = Retry::new(1).backoff;
        let b = policy.retry.backoff;
        // `max` left out reads back as the default raised to `base`.
        let max_default = d.max.max(b.base);
        RetryOut {
            attempts: policy.retry.attempts,
            base: (b.base != d.base).then(|| format_duration(b.base)),
            multiplier: (b.multiplier != d.multiplier).then_some(b.multiplier),
            max: (b.max != max_default).then(|| format_duration(b.max)),
            jitter: (b.jitter != d.jitter).then_some(b.jitter),
            budget: policy.budget.map(|c| BudgetOut {
                percent: c.percent,
                min_per_second: c.min_per_second,
                window: format_duration(c.window),
            }),
        }
    }
}
