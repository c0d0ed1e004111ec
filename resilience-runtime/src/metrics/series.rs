//! Every series of the exporters, walked once: the registry's points are read (one
//! snapshot per point, under the cap of [`select`](super::select)), then each family
//! is handed with its samples to a [`Sink`]. The Prometheus encoder, the `metrics`
//! facade publisher and the OpenTelemetry instruments are three sinks of this one walk.

use super::select::{Rows, Selector};
use super::PointsCollector;
use crate::error::Reason;
use crate::registry::Registry;
use crate::stats::PointStats;
use std::fmt;

/// What a family counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A monotonic count (Prometheus adds `_total` to the name).
    Counter,
    /// A monotonic count of seconds, in `f64` (`resilience_queue_wait_seconds`).
    Seconds,
    /// A value now.
    Gauge,
}

/// One metric family: its name (without the `_total` Prometheus gives counters), its
/// help text and its kind.
#[derive(Debug, Clone, Copy)]
pub(super) struct Family {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    pub(super) kind: Kind,
}

impl Family {
    /// The name of its samples in the Prometheus text format (`_total` for counters).
    #[cfg(feature = "metrics")]
    pub(super) fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter | Kind::Seconds => format!("{}_total", self.name),
            Kind::Gauge => self.name.to_owned(),
        }
    }
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: Kind::Counter,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: Kind::Gauge,
    }
}

/// One sample's value: counts and gauges are integers, seconds are not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value {
    Int(u64),
    Float(f64),
}

impl Value {
    /// Gauges as Prometheus holds them (`i64`, saturated).
    #[cfg(feature = "prometheus")]
    pub(super) fn as_i64(self) -> i64 {
        match self {
            Value::Int(v) => i64::try_from(v).unwrap_or(i64::MAX),
            Value::Float(v) => v as i64,
        }
    }

    #[cfg(any(feature = "metrics", feature = "opentelemetry"))]
    #[allow(clippy::cast_precision_loss)] // counts past 2^53 lose their last digits
    pub(super) fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
        }
    }

    #[cfg(any(feature = "metrics", feature = "opentelemetry"))]
    pub(super) fn as_u64(self) -> u64 {
        match self {
            Value::Int(v) => v,
            Value::Float(v) => v as u64,
        }
    }
}

/// A sample's labels, in their exposition order.
pub(super) type Labels<'a> = [(&'static str, &'a str)];

/// Takes each sample of the family being walked.
pub(super) type Emit<'e> = dyn FnMut(&Labels<'_>, Value) -> fmt::Result + 'e;

/// Where the walk's families go: `samples` hands each sample of `family` to the
/// [`Emit`] it is given (every family is offered, those without samples too).
pub(super) trait Sink {
    fn family(
        &mut self,
        family: &Family,
        samples: &mut dyn FnMut(&mut Emit<'_>) -> fmt::Result,
    ) -> fmt::Result;
}

/// Walks every series of `source`'s registry into `sink`.
///
/// # Errors
///
/// Only the sink's own (a writer that refuses a write).
pub(super) fn collect(source: &PointsCollector, sink: &mut dyn Sink) -> fmt::Result {
    // One snapshot per point, so every family shows the same instant of a point.
    let mut selector = Selector::new(usize::try_from(source.max_points).unwrap_or(usize::MAX));
    // Per-thread counts are read in batches under one hold of their lock.
    let mut tally = None;
    let mut batch = 0;
    source.registry.for_each_point(|p| {
        if batch == 0 {
            tally = None;
            tally = Some(crate::point::state::tally::Reader::new());
            batch = 4096;
        }
        batch -= 1;
        if selector.is_full() && !p.ever_entered() {
            // Never called: all zeros, the least important of all.
            selector.omit_idle();
        } else if let Some(t) = &tally {
            selector.push(p.stats_without_windows(t));
        }
    });
    drop(tally);
    let rows = selector.finish();
    point_families(sink, &rows)?;
    breaker_families(sink, &rows.shown)?;
    let omitted = rows.others.as_ref().map_or(0, |(_, n)| *n as u64);
    single(
        sink,
        &gauge(
            "resilience_metrics_points_omitted",
            "Points left out of the per-point series (over the collector's cap); their \
             counts are in the series labelled point=\"other\", omitted=\"true\".",
        ),
        Value::Int(omitted),
    )?;
    registry_families(sink, source.registry)
}

/// A family of one sample without labels.
fn single(sink: &mut dyn Sink, family: &Family, value: Value) -> fmt::Result {
    sink.family(family, &mut |emit| emit(&[], value))
}

fn labels<'a>(omitted: &'a str, point: &'a str) -> Vec<(&'static str, &'a str)> {
    if omitted.is_empty() {
        vec![("point", point)]
    } else {
        vec![("point", point), ("omitted", omitted)]
    }
}

/// One family with a value per point (labels: `point`).
fn per_point(
    sink: &mut dyn Sink,
    family: Family,
    points: &Rows,
    value: impl Fn(&PointStats) -> u64,
) -> fmt::Result {
    per_point_with(sink, family, points, |p| Some(Value::Int(value(p))))
}

/// [`per_point`] for the points `value` gives a value for (the others have no series).
fn per_point_with(
    sink: &mut dyn Sink,
    family: Family,
    points: &Rows,
    value: impl Fn(&PointStats) -> Option<Value>,
) -> fmt::Result {
    sink.family(&family, &mut |emit| {
        for (p, omitted, point) in points.each() {
            if let Some(v) = value(p) {
                emit(&labels(omitted, point), v)?;
            }
        }
        Ok(())
    })
}

/// One family with a value per point that has queue statistics (a point whose calls
/// never waited has no series: queues are rare, series are not free).
fn per_queue(
    sink: &mut dyn Sink,
    family: Family,
    points: &Rows,
    value: impl Fn(&crate::QueueStats) -> Value,
) -> fmt::Result {
    per_point_with(sink, family, points, |p| p.queue.as_ref().map(&value))
}

/// One counter family with a value per point and reason (labels: `point`, `reason`).
fn per_reason(
    sink: &mut dyn Sink,
    family: Family,
    points: &Rows,
    count: impl Fn(&PointStats, Reason) -> u64,
) -> fmt::Result {
    sink.family(&family, &mut |emit| {
        for (p, omitted, point) in points.each() {
            for reason in Reason::ALL {
                let mut labels = labels(omitted, point);
                labels.push(("reason", reason.as_str()));
                emit(&labels, Value::Int(count(p, reason)))?;
            }
        }
        Ok(())
    })
}

fn point_families(sink: &mut dyn Sink, points: &Rows) -> fmt::Result {
    per_point(
        sink,
        counter(
            "resilience_visits",
            "Calls that asked to run, downgraded ones included.",
        ),
        points,
        |p| p.totals.visits,
    )?;
    per_point(
        sink,
        counter("resilience_passes", "Calls that ran."),
        points,
        |p| p.totals.passes,
    )?;
    per_reason(
        sink,
        counter(
            "resilience_downgrades",
            "Calls that were downgraded, by the rule that tripped.",
        ),
        points,
        |p, r| p.totals.downgrades_by_reason.get(r),
    )?;
    per_reason(
        sink,
        counter(
            "resilience_shadow_downgrades",
            "Calls a shadow (dry-run) policy would have downgraded; they ran.",
        ),
        points,
        |p, r| p.shadow_downgrades_by_reason.get(r),
    )?;
    type Series = (Family, fn(&PointStats) -> u64);
    let outcome_series: [Series; 10] = [
        (
            counter(
                "resilience_exceptions",
                "Calls that returned a counted error or panicked.",
            ),
            |p| p.totals.exceptions,
        ),
        (
            counter(
                "resilience_timeouts",
                "Calls slower than the timeout threshold.",
            ),
            |p| p.totals.timeouts,
        ),
        (
            counter(
                "resilience_cancelled",
                "Calls that ran and never reported an outcome (future or permit dropped).",
            ),
            |p| p.totals.cancelled,
        ),
        (
            counter(
                "resilience_retry_calls",
                "Calls made through call_retrying.",
            ),
            |p| p.retry.calls,
        ),
        (
            counter(
                "resilience_retry_attempts",
                "Attempts: first ones, retries and hedges.",
            ),
            |p| p.retry.attempts,
        ),
        (counter("resilience_retry_retries", "Retries made."), |p| {
            p.retry.retries
        }),
        (
            counter(
                "resilience_retry_exhausted",
                "Calls that failed on their last attempt.",
            ),
            |p| p.retry.exhausted,
        ),
        (
            counter(
                "resilience_retry_refused_by_budget",
                "Retries and hedges the budget refused.",
            ),
            |p| p.retry.refused_by_budget,
        ),
        (
            counter(
                "resilience_retry_hedges",
                "Hedged attempts started beside a slow one.",
            ),
            |p| p.retry.hedges,
        ),
        (
            counter(
                "resilience_retry_cancelled",
                "Attempts dropped because another attempt of their call answered first.",
            ),
            |p| p.retry.cancelled,
        ),
    ];
    for (family, value) in outcome_series {
        per_point(sink, family, points, value)?;
    }
    queue_families(sink, points)?;
    key_families(sink, points)?;
    let rest: [Series; 4] = [
        (
            counter(
                "resilience_dropped_events",
                "Downgrade events dropped because the listener queue was full.",
            ),
            |p| p.dropped_events,
        ),
        (
            gauge(
                "resilience_concurrency",
                "Calls in flight now (tracked while the point has a policy).",
            ),
            |p| p.concurrency,
        ),
        (
            gauge(
                "resilience_peak_concurrency",
                "The most calls ever in flight at once.",
            ),
            |p| p.peak_concurrency,
        ),
        (
            gauge(
                "resilience_in_delay",
                "1 while the point is inside a downgrade delay, else 0.",
            ),
            |p| u64::from(p.in_delay),
        ),
    ];
    for (family, value) in rest {
        per_point(sink, family, points, value)?;
    }
    Ok(())
}

fn queue_families(sink: &mut dyn Sink, points: &Rows) -> fmt::Result {
    type QueueSeries = (Family, fn(&crate::QueueStats) -> Value);
    let queue_series: [QueueSeries; 9] = [
        (
            counter(
                "resilience_queue_admitted",
                "Waits in the concurrency queue that ended with a slot.",
            ),
            |q| Value::Int(q.admitted),
        ),
        (
            counter(
                "resilience_queue_timed_out",
                "Waits in the concurrency queue that ran out.",
            ),
            |q| Value::Int(q.timed_out),
        ),
        (
            counter(
                "resilience_queue_cancelled",
                "Waits in the concurrency queue whose caller gave up.",
            ),
            |q| Value::Int(q.cancelled),
        ),
        (
            counter(
                "resilience_queue_refused",
                "Waits ended by another rule when the waiter asked again.",
            ),
            |q| Value::Int(q.refused),
        ),
        (
            counter(
                "resilience_queue_full",
                "Calls refused because the concurrency queue was full.",
            ),
            |q| Value::Int(q.full),
        ),
        (
            counter(
                "resilience_queue_evicted",
                "Waiters taken out of a full queue by a call of a higher priority.",
            ),
            |q| Value::Int(q.evicted),
        ),
        (
            Family {
                name: "resilience_queue_wait_seconds",
                help: "Time waited in the concurrency queue by the waits that ended.",
                kind: Kind::Seconds,
            },
            |q| Value::Float(crate::clock::nanos(q.wait) as f64 / 1e9),
        ),
        (
            gauge(
                "resilience_queue_waiting",
                "Calls waiting in the concurrency queue now.",
            ),
            |q| Value::Int(q.waiting),
        ),
        (
            gauge(
                "resilience_queue_peak_waiting",
                "The most calls ever waiting in the concurrency queue at once.",
            ),
            |q| Value::Int(q.peak_waiting),
        ),
    ];
    for (family, value) in queue_series {
        per_queue(sink, family, points, value)?;
    }
    Ok(())
}

/// The hot keys of the points shown: their busiest keys (at most
/// [`STATS_HOT_KEYS`](crate::keys::STATS_HOT_KEYS) each, so at most that many series
/// per point, never every key) and their key tables' totals.
fn key_families(sink: &mut dyn Sink, points: &Rows) -> fmt::Result {
    type KeySeries = (Family, fn(&crate::keys::HotKeyStats) -> u64);
    let key_series: [KeySeries; 2] = [
        (
            counter(
                "resilience_hot_key_passes",
                "Calls of one of the point's busiest keys that its key rule admitted.",
            ),
            |k| k.passes,
        ),
        (
            counter(
                "resilience_hot_key_refused",
                "Calls of one of the point's busiest keys that its key rule refused.",
            ),
            |k| k.refused,
        ),
    ];
    for (family, value) in key_series {
        sink.family(&family, &mut |emit| {
            for p in &points.shown {
                for k in &p.hot_keys {
                    emit(
                        &[("point", p.name), ("key", k.key.as_str())],
                        Value::Int(value(k)),
                    )?;
                }
            }
            Ok(())
        })?;
    }
    type TableSeries = (Family, fn(&crate::keys::KeyTableStats) -> u64);
    let table_series: [TableSeries; 4] = [
        (
            gauge(
                "resilience_keys_tracked",
                "Keys the point's key table tracks exactly now.",
            ),
            |t| t.tracked,
        ),
        (
            counter(
                "resilience_keys_untracked_passes",
                "Calls of keys not tracked (counted in the sketch) that were admitted.",
            ),
            |t| t.untracked_passes,
        ),
        (
            counter(
                "resilience_keys_untracked_refused",
                "Calls of keys not tracked (counted in the sketch) that were refused.",
            ),
            |t| t.untracked_refused,
        ),
        (
            counter(
                "resilience_keys_evictions",
                "Keys that took the entry of a colder key in the point's key table.",
            ),
            |t| t.evictions,
        ),
    ];
    for (family, value) in table_series {
        per_point_with(sink, family, points, |p| {
            p.key_table.as_ref().map(|t| Value::Int(value(t)))
        })?;
    }
    Ok(())
}

/// Breaker state, window counts and transitions of the points that have a breaker
/// (rejected calls are `resilience_downgrades_total{reason="breaker_open"}`).
fn breaker_families(sink: &mut dyn Sink, points: &[PointStats]) -> fmt::Result {
    use crate::BreakerState;
    let with_breaker: Vec<(&PointStats, crate::BreakerStats)> = points
        .iter()
        .filter_map(|p| p.breaker.map(|b| (p, b)))
        .collect();
    let state = gauge(
        "resilience_breaker_state",
        "1 for the breaker's current state (closed, open, half_open), 0 for the others.",
    );
    sink.family(&state, &mut |emit| {
        for (p, b) in &with_breaker {
            for state in [
                BreakerState::Closed,
                BreakerState::Open,
                BreakerState::HalfOpen,
            ] {
                let labels = [
                    ("point", p.name),
                    ("kind", b.kind),
                    ("state", state.as_str()),
                ];
                emit(&labels, Value::Int(u64::from(b.state == state)))?;
            }
        }
        Ok(())
    })?;
    type Window = (Family, fn(&crate::BreakerStats) -> Option<u64>);
    let windows: [Window; 4] = [
        (
            gauge(
                "resilience_breaker_window_successes",
                "Successful calls in the breaker's window.",
            ),
            |b| Some(b.window_successes),
        ),
        (
            gauge(
                "resilience_breaker_window_failures",
                "Failed calls in the breaker's window.",
            ),
            |b| Some(b.window_failures),
        ),
        (
            gauge(
                "resilience_breaker_window_drops",
                "Calls the breaker rejected in its window (SRE breaker only).",
            ),
            |b| b.window_drops,
        ),
        (
            counter(
                "resilience_breaker_transitions",
                "State changes of the breaker so far.",
            ),
            |b| Some(b.transitions),
        ),
    ];
    for (family, value) in windows {
        sink.family(&family, &mut |emit| {
            for (p, b) in &with_breaker {
                if let Some(v) = value(b) {
                    emit(&[("point", p.name)], Value::Int(v))?;
                }
            }
            Ok(())
        })?;
    }
    Ok(())
}

fn registry_families(sink: &mut dyn Sink, registry: &Registry) -> fmt::Result {
    let singles = [
        (
            gauge(
                "resilience_points_undeclared",
                "Points no #[downgrade] or #[breaker] function declares.",
            ),
            registry.undeclared_points(),
        ),
        (
            gauge(
                "resilience_points_undeclared_max",
                "The most undeclared points the registry takes; new names past it are \
                 refused.",
            ),
            registry.max_undeclared_points(),
        ),
        (
            counter(
                "resilience_listener_events_dropped",
                "Downgrade events dropped over all points because the listener queue was \
                 full.",
            ),
            registry.dropped_events(),
        ),
        (
            counter(
                "resilience_listener_events_delivered",
                "Downgrade events delivered to the listeners.",
            ),
            registry.delivered_events(),
        ),
    ];
    for (family, value) in singles {
        single(sink, &family, Value::Int(value))?;
    }
    #[cfg(feature = "heartbeat")]
    heartbeat_families(sink, registry)?;
    let versions = gauge(
        "resilience_policy_source_version",
        "The version of each policy source applied to the registry: a file's loads, the \
         console's policy version, the code's changes.",
    );
    let sources = registry.source_versions();
    sink.family(&versions, &mut |emit| {
        for (source, version) in &sources {
            let name = source.to_string();
            emit(&[("source", name.as_str())], Value::Int(*version))?;
        }
        Ok(())
    })
}

/// The counters of every live heartbeat client of the registry (label `app`:
/// `group/app`).
#[cfg(feature = "heartbeat")]
fn heartbeat_families(sink: &mut dyn Sink, registry: &Registry) -> fmt::Result {
    use crate::heartbeat::HeartbeatStatus;
    let clients = crate::heartbeat::statuses_of(registry);
    type Field = (Family, fn(&HeartbeatStatus) -> u64);
    let fields: [Field; 10] = [
        (counter("resilience_heartbeat_uploads", "Cycles uploaded."), |s| s.uploads),
        (counter("resilience_heartbeat_upload_retries", "Uploads retried on the next server."), |s| s.upload_retries),
        (counter("resilience_heartbeat_uploads_dropped", "Cycles dropped: their upload failed twice."), |s| s.uploads_dropped),
        (counter("resilience_heartbeat_pulls", "Pulls answered."), |s| s.pulls),
        (counter("resilience_heartbeat_pull_failures", "Pulls that failed (network, HTTP, protocol)."), |s| s.pull_failures),
        (counter("resilience_heartbeat_policy_updates", "Console policy versions applied."), |s| s.policy_updates),
        (counter("resilience_heartbeat_policies_rejected", "Console policy versions refused by the loader."), |s| s.policies_rejected),
        (gauge("resilience_heartbeat_policy_version", "The console policy version held."), |s| s.policy_version),
        (gauge("resilience_heartbeat_failing", "1 while the last upload or pull failed."), |s| u64::from(s.last_upload_error.is_some() || s.last_pull_error.is_some())),
        (gauge("resilience_heartbeat_from_cache", "1 while the console policies held came from the cache file and no pull succeeded since."), |s| u64::from(s.from_cache)),
    ];
    for (family, value) in fields {
        sink.family(&family, &mut |emit| {
            for (app, status) in &clients {
                emit(&[("app", app.as_str())], Value::Int(value(status)))?;
            }
            Ok(())
        })?;
    }
    Ok(())
}
