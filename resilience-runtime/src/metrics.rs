//! Prometheus exposition of every point: counters and gauges read from the registry's
//! statistics at scrape time, encoded with `prometheus-client`.
//!
//! Nothing is recorded twice: the collector reads [`Registry::stats`] for every point
//! when it is scraped, so the numbers are exactly the registry's and cost nothing
//! between scrapes.
//!
//! | metric | type | labels | from |
//! |---|---|---|---|
//! | `resilience_visits_total` | counter | `point` | [`Totals::visits`](crate::Totals::visits) |
//! | `resilience_passes_total` | counter | `point` | [`Totals::passes`](crate::Totals::passes) |
//! | `resilience_downgrades_total` | counter | `point`, `reason` | [`Totals::downgrades_by_reason`](crate::Totals::downgrades_by_reason) |
//! | `resilience_shadow_downgrades_total` | counter | `point`, `reason` | calls a shadow policy would have downgraded |
//! | `resilience_exceptions_total` | counter | `point` | [`Totals::exceptions`](crate::Totals::exceptions) |
//! | `resilience_timeouts_total` | counter | `point` | [`Totals::timeouts`](crate::Totals::timeouts) |
//! | `resilience_cancelled_total` | counter | `point` | [`Totals::cancelled`](crate::Totals::cancelled) |
//! | `resilience_retry_calls_total`, `_attempts_total`, `_retries_total`, `_exhausted_total`, `_refused_by_budget_total`, `_hedges_total`, `_cancelled_total` | counter | `point` | [`RetryStats`](crate::retry::RetryStats) |
//! | `resilience_queue_admitted_total`, `_timed_out_total`, `_cancelled_total`, `_refused_total`, `_full_total`, `_evicted_total`, `resilience_queue_wait_seconds_total` | counter | `point` | [`QueueStats`](crate::QueueStats), only for points whose calls waited (or found the queue full) |
//! | `resilience_queue_waiting`, `resilience_queue_peak_waiting` | gauge | `point` | the same points: calls waiting now, and the most ever |
//! | `resilience_dropped_events_total` | counter | `point` | listener events dropped, queue full |
//! | `resilience_concurrency` | gauge | `point` | calls in flight now |
//! | `resilience_peak_concurrency` | gauge | `point` | most calls ever in flight at once |
//! | `resilience_in_delay` | gauge | `point` | 1 while the point is in a downgrade delay |
//! | `resilience_breaker_state` | gauge | `point`, `kind`, `state` | 1 for the breaker's current state |
//! | `resilience_breaker_window_successes` / `_failures` / `_drops` | gauge | `point` | the breaker's window |
//! | `resilience_breaker_transitions_total` | counter | `point` | breaker state changes |
//! | `resilience_metrics_points_omitted` | gauge | | points over the cap, summed into `point="other", omitted="true"` |
//! | `resilience_points_undeclared`, `resilience_points_undeclared_max` | gauge | | points no function declares, and the registry's cap on them |
//! | `resilience_listener_events_dropped_total` | counter | | over all points |
//! | `resilience_listener_events_delivered_total` | counter | | over all points |
//! | `resilience_policy_source_version` | gauge | `source` | each policy source's version (`code`, `file:<path>`, `console`) |
//! | `resilience_heartbeat_uploads_total`, `_upload_retries_total`, `_uploads_dropped_total`, `_pulls_total`, `_pull_failures_total`, `_policy_updates_total`, `_policies_rejected_total` | counter | `app` | with feature `heartbeat`: each live client's counters |
//! | `resilience_heartbeat_policy_version`, `_failing`, `_from_cache` | gauge | `app` | the console version held; 1 while the last upload or pull failed; 1 while enforcing the cache file |
//!
//! `resilience_downgrades_total` has one series per [`Reason`], zeros included, so
//! `rate()` works from the first scrape.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::{metrics, registry, Policy};
//!
//! registry().set_policy("docs.metrics", Policy::builder().max_visits(0).build()?)?;
//! let _ = registry().point("docs.metrics")?.enter(); // downgraded
//! let text = metrics::render();
//! assert!(text.contains(r#"resilience_downgrades_total{point="docs.metrics",reason="visits"} 1"#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::Reason;
use crate::registry::{registry, Registry};
use crate::stats::PointStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

/// The `Content-Type` of [`render`]'s output (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `Content-Type` of [`render_openmetrics`]'s output.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every point of the global registry in the Prometheus text format (0.0.4), ready to
/// serve at `/metrics` with [`CONTENT_TYPE`].
pub fn render() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail, and the collector reports no error of its own.
    let _ = encode_into(&mut out);
    out
}

/// Appends [`render`]'s text to `out`.
///
/// # Errors
///
/// Only if `out` refuses a write (a `String` never does).
pub fn encode_into(out: &mut impl fmt::Write) -> fmt::Result {
    let mut metrics = prometheus_client::registry::Registry::default();
    metrics.register_collector(Box::new(PointsCollector::global()));
    prometheus_client::encoding::prometheus_text::encode(out, &metrics)
}

/// Every point of the global registry in the OpenMetrics text format (ends with
/// `# EOF`), to serve with [`OPENMETRICS_CONTENT_TYPE`].
pub fn render_openmetrics() -> String {
    let mut metrics = prometheus_client::registry::Registry::default();
    metrics.register_collector(Box::new(PointsCollector::global()));
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &metrics);
    out
}

/// A `prometheus-client` collector of every point of a registry, read at scrape time.
///
/// [`render`] uses it with the global registry; register it in an application's own
/// `prometheus_client` registry to serve the points next to other metrics.
///
/// # Examples
///
/// ```
/// use resilience_runtime::metrics::PointsCollector;
///
/// let mut app_metrics = prometheus_client::registry::Registry::default();
/// app_metrics.register_collector(Box::new(PointsCollector::global()));
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &app_metrics)?;
/// assert!(text.ends_with("# EOF\n"));
/// # Ok::<(), std::fmt::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PointsCollector {
    registry: &'static Registry,
    max_points: usize,
}

/// How many points a collector exports one by one unless told otherwise
/// ([`PointsCollector::max_points`]).
pub const DEFAULT_MAX_POINTS: usize = 2_000;

impl PointsCollector {
    /// A collector of the given registry's points, exporting at most
    /// [`DEFAULT_MAX_POINTS`] of them one by one.
    pub fn new(registry: &'static Registry) -> PointsCollector {
        PointsCollector {
            registry,
            max_points: DEFAULT_MAX_POINTS,
        }
    }

    /// The same collector exporting at most `max` points one by one: those with an
    /// open or half-open breaker or in a delay first, then those with the most visits.
    /// The others are summed into series labelled `point="other", omitted="true"`
    /// (their breakers are not exported), and `resilience_metrics_points_omitted`
    /// says how many they are. The sum is over a set that changes as traffic moves,
    /// so it may go down between scrapes: read it as a scale, not with `rate()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::metrics::PointsCollector;
    /// use resilience_runtime::{Clock, Registry};
    ///
    /// let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    /// for (name, calls) in [("busy", 5), ("quiet", 1), ("idle", 0)] {
    ///     let p = r.point(name)?;
    ///     for _ in 0..calls {
    ///         p.enter().unwrap().finish(false);
    ///     }
    /// }
    /// let mut m = prometheus_client::registry::Registry::default();
    /// m.register_collector(Box::new(PointsCollector::new(r).max_points(1)));
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &m)?;
    /// assert!(text.contains(r#"resilience_visits_total{point="busy"} 5"#));
    /// assert!(text.contains(r#"resilience_visits_total{point="other",omitted="true"} 1"#));
    /// assert!(text.contains("resilience_metrics_points_omitted 2"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn max_points(mut self, max: usize) -> PointsCollector {
        self.max_points = max;
        self
    }

    /// A collector of the global registry's points.
    pub fn global() -> PointsCollector {
        PointsCollector::new(registry())
    }
}

impl Collector for PointsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        // One snapshot per point, so every family shows the same instant of a point.
        let mut selector = Selector::new(self.max_points);
        // Per-thread counts are read in batches under one hold of their lock.
        let mut tally = None;
        let mut batch = 0;
        self.registry.for_each_point(|p| {
            if batch == 0 {
                tally = None;
                tally = Some(crate::point::tally::Reader::new());
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
        encode_point_metrics(&mut encoder, &rows)?;
        encode_breaker_metrics(&mut encoder, &rows.shown)?;
        let omitted = rows.others.as_ref().map_or(0, |(_, n)| *n as u64);
        gauge(omitted).encode(encoder.encode_descriptor(
            "resilience_metrics_points_omitted",
            "Points left out of the per-point series (over the collector's cap); their \
             counts are in the series labelled point=\"other\", omitted=\"true\".",
            None,
            MetricType::Gauge,
        )?)?;
        encode_registry_metrics(&mut encoder, self.registry)
    }
}

/// The points exported one by one, and the sum of the others.
struct Rows {
    shown: Vec<PointStats>,
    /// The omitted points summed (counters and concurrency added, peak the largest,
    /// `in_delay` true if any), and how many they are.
    others: Option<(PointStats, usize)>,
}

impl Rows {
    /// Every row with its labels: `point="NAME"`, and `point="other", omitted="true"`
    /// for the sum of the omitted points (a point may be named `other`; its series has
    /// no `omitted` label).
    fn each(&self) -> impl Iterator<Item = (&PointStats, &'static str, &str)> + '_ {
        self.shown
            .iter()
            .map(|p| (p, "", p.name))
            .chain(self.others.iter().map(|(p, _)| (p, "true", "other")))
    }
}

fn labels<'a>(omitted: &'a str, point: &'a str) -> Vec<(&'static str, &'a str)> {
    if omitted.is_empty() {
        vec![("point", point)]
    } else {
        vec![("point", point), ("omitted", omitted)]
    }
}

/// Keeps the `max` points that matter most: an open (or half-open) breaker or a delay
/// in force first, then the most visits; the rest are summed. One pass over the
/// points, holding at most `2 * max` snapshots at a time.
struct Selector {
    max: usize,
    shown: Vec<PointStats>,
    others: Option<(PointStats, usize)>,
}

fn urgent(p: &PointStats) -> bool {
    p.in_delay
        || p.breaker
            .is_some_and(|b| b.state != crate::BreakerState::Closed)
}

/// More important first.
fn rank(a: &PointStats, b: &PointStats) -> std::cmp::Ordering {
    urgent(b)
        .cmp(&urgent(a))
        .then(b.totals.visits.cmp(&a.totals.visits))
        .then(a.name.cmp(b.name))
}

impl Selector {
    fn new(max: usize) -> Selector {
        Selector {
            max,
            shown: Vec::new(),
            others: None,
        }
    }

    /// Whether `max` points are held already.
    fn is_full(&self) -> bool {
        self.shown.len() >= self.max
    }

    /// Counts a point that was never called as omitted (its counts are all zero).
    fn omit_idle(&mut self) {
        self.others_sum().1 += 1;
    }

    fn others_sum(&mut self) -> &mut (PointStats, usize) {
        self.others.get_or_insert_with(|| {
            (
                PointStats {
                    name: "other",
                    totals: crate::Totals::default(),
                    window: None,
                    last_cycle: None,
                    concurrency: 0,
                    peak_concurrency: 0,
                    in_delay: false,
                    dropped_events: 0,
                    shadow_downgrades_by_reason: crate::ReasonCounts::default(),
                    breaker: None,
                    retry: crate::retry::RetryStats::default(),
                    queue: None,
                    hot_keys: Vec::new(),
                    key_table: None,
                },
                0,
            )
        })
    }

    fn push(&mut self, p: PointStats) {
        self.shown.push(p);
        if self.shown.len() >= 2 * self.max.max(1) {
            self.compact();
        }
    }

    /// Keeps the `max` most important snapshots and sums the others.
    fn compact(&mut self) {
        if self.shown.len() <= self.max {
            return;
        }
        if self.max > 0 {
            self.shown.select_nth_unstable_by(self.max - 1, rank);
        }
        let omitted = self.shown.split_off(self.max);
        let (sum, n) = self.others_sum();
        *n += omitted.len();
        for p in &omitted {
            add_into(sum, p);
        }
    }

    fn finish(mut self) -> Rows {
        self.compact();
        self.shown.sort_by(|a, b| a.name.cmp(b.name));
        Rows {
            shown: self.shown,
            others: self.others,
        }
    }
}

/// Adds a point's counts to a sum of points (peak: the largest; delay: any).
fn add_into(sum: &mut PointStats, p: &PointStats) {
    let (t, o) = (&mut sum.totals, &p.totals);
    t.visits += o.visits;
    t.passes += o.passes;
    t.downgrades += o.downgrades;
    t.exceptions += o.exceptions;
    t.timeouts += o.timeouts;
    t.cancelled += o.cancelled;
    if let Some(q) = &p.queue {
        let s = sum.queue.get_or_insert_with(crate::QueueStats::default);
        s.waiting += q.waiting;
        s.peak_waiting = s.peak_waiting.max(q.peak_waiting);
        s.admitted += q.admitted;
        s.timed_out += q.timed_out;
        s.cancelled += q.cancelled;
        s.refused += q.refused;
        s.full += q.full;
        s.evicted += q.evicted;
        s.wait_ns += q.wait_ns;
        s.max_wait_ns = s.max_wait_ns.max(q.max_wait_ns);
    }
    let (r, q) = (&mut sum.retry, &p.retry);
    r.calls += q.calls;
    r.attempts += q.attempts;
    r.retries += q.retries;
    r.exhausted += q.exhausted;
    r.refused_by_budget += q.refused_by_budget;
    r.hedges += q.hedges;
    r.cancelled += q.cancelled;
    for (a, b) in t
        .downgrades_by_reason
        .0
        .iter_mut()
        .zip(o.downgrades_by_reason.0)
    {
        *a += b;
    }
    let shadow = &mut sum.shadow_downgrades_by_reason.0;
    for (a, b) in shadow.iter_mut().zip(p.shadow_downgrades_by_reason.0) {
        *a += b;
    }
    sum.concurrency += p.concurrency;
    sum.peak_concurrency = sum.peak_concurrency.max(p.peak_concurrency);
    sum.in_delay |= p.in_delay;
    sum.dropped_events += p.dropped_events;
}

/// One metric family with a value per point (labels: `point`).
fn per_point<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    points: &Rows,
    value: impl Fn(&PointStats) -> M,
) -> fmt::Result {
    per_point_with(encoder, name, help, metric_type, points, |p| Some(value(p)))
}

/// [`per_point`] for the points `value` gives a value for (the others have no series).
fn per_point_with<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    points: &Rows,
    value: impl Fn(&PointStats) -> Option<M>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (p, omitted, point) in points.each() {
        if let Some(v) = value(p) {
            v.encode(family.encode_family(&labels(omitted, point))?)?;
        }
    }
    Ok(())
}

/// One metric family with a value per point that has queue statistics (a point
/// whose calls never waited has no series: queues are rare, series are not free).
fn per_queue<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric_type: MetricType,
    points: &Rows,
    value: impl Fn(&crate::QueueStats) -> M,
) -> fmt::Result {
    per_point_with(encoder, name, help, metric_type, points, |p| {
        p.queue.as_ref().map(&value)
    })
}

/// One metric family with a value per point and reason (labels: `point`, `reason`).
fn per_reason(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    points: &Rows,
    count: impl Fn(&PointStats, Reason) -> u64,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (p, omitted, point) in points.each() {
        for reason in Reason::ALL {
            let mut labels = labels(omitted, point);
            labels.push(("reason", reason.as_str()));
            ConstCounter::new(count(p, reason)).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

fn gauge(v: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

fn encode_point_metrics(encoder: &mut DescriptorEncoder<'_>, points: &Rows) -> fmt::Result {
    use MetricType::{Counter, Gauge};
    let counter = ConstCounter::new;
    per_point(
        encoder,
        "resilience_visits",
        "Calls that asked to run, downgraded ones included.",
        Counter,
        points,
        |p| counter(p.totals.visits),
    )?;
    per_point(
        encoder,
        "resilience_passes",
        "Calls that ran.",
        Counter,
        points,
        |p| counter(p.totals.passes),
    )?;
    per_reason(
        encoder,
        "resilience_downgrades",
        "Calls that were downgraded, by the rule that tripped.",
        points,
        |p, r| p.totals.downgrades_by_reason.get(r),
    )?;
    per_reason(
        encoder,
        "resilience_shadow_downgrades",
        "Calls a shadow (dry-run) policy would have downgraded; they ran.",
        points,
        |p, r| p.shadow_downgrades_by_reason.get(r),
    )?;
    per_point(
        encoder,
        "resilience_exceptions",
        "Calls that returned a counted error or panicked.",
        Counter,
        points,
        |p| counter(p.totals.exceptions),
    )?;
    per_point(
        encoder,
        "resilience_timeouts",
        "Calls slower than the timeout threshold.",
        Counter,
        points,
        |p| counter(p.totals.timeouts),
    )?;
    per_point(
        encoder,
        "resilience_cancelled",
        "Calls that ran and never reported an outcome (future or permit dropped).",
        Counter,
        points,
        |p| counter(p.totals.cancelled),
    )?;
    type Series = (&'static str, &'static str, fn(&PointStats) -> u64);
    let retry_series: [Series; 7] = [
        (
            "resilience_retry_calls",
            "Calls made through call_retrying.",
            |p| p.retry.calls,
        ),
        (
            "resilience_retry_attempts",
            "Attempts: first ones, retries and hedges.",
            |p| p.retry.attempts,
        ),
        ("resilience_retry_retries", "Retries made.", |p| {
            p.retry.retries
        }),
        (
            "resilience_retry_exhausted",
            "Calls that failed on their last attempt.",
            |p| p.retry.exhausted,
        ),
        (
            "resilience_retry_refused_by_budget",
            "Retries and hedges the budget refused.",
            |p| p.retry.refused_by_budget,
        ),
        (
            "resilience_retry_hedges",
            "Hedged attempts started beside a slow one.",
            |p| p.retry.hedges,
        ),
        (
            "resilience_retry_cancelled",
            "Attempts dropped because another attempt of their call answered first.",
            |p| p.retry.cancelled,
        ),
    ];
    for (name, help, value) in retry_series {
        per_point(encoder, name, help, Counter, points, |p| counter(value(p)))?;
    }
    type QueueSeries = (&'static str, &'static str, fn(&crate::QueueStats) -> u64);
    let queue_series: [QueueSeries; 6] = [
        (
            "resilience_queue_admitted",
            "Waits in the concurrency queue that ended with a slot.",
            |q| q.admitted,
        ),
        (
            "resilience_queue_timed_out",
            "Waits in the concurrency queue that ran out.",
            |q| q.timed_out,
        ),
        (
            "resilience_queue_cancelled",
            "Waits in the concurrency queue whose caller gave up.",
            |q| q.cancelled,
        ),
        (
            "resilience_queue_refused",
            "Waits ended by another rule when the waiter asked again.",
            |q| q.refused,
        ),
        (
            "resilience_queue_full",
            "Calls refused because the concurrency queue was full.",
            |q| q.full,
        ),
        (
            "resilience_queue_evicted",
            "Waiters taken out of a full queue by a call of a higher priority.",
            |q| q.evicted,
        ),
    ];
    for (name, help, value) in queue_series {
        per_queue(encoder, name, help, Counter, points, |q| counter(value(q)))?;
    }
    per_queue(
        encoder,
        "resilience_queue_wait_seconds",
        "Time waited in the concurrency queue by the waits that ended.",
        Counter,
        points,
        |q| ConstCounter::new(q.wait_ns as f64 / 1e9),
    )?;
    per_queue(
        encoder,
        "resilience_queue_waiting",
        "Calls waiting in the concurrency queue now.",
        Gauge,
        points,
        |q| gauge(q.waiting),
    )?;
    per_queue(
        encoder,
        "resilience_queue_peak_waiting",
        "The most calls ever waiting in the concurrency queue at once.",
        Gauge,
        points,
        |q| gauge(q.peak_waiting),
    )?;
    encode_key_metrics(encoder, points)?;
    per_point(
        encoder,
        "resilience_dropped_events",
        "Downgrade events dropped because the listener queue was full.",
        Counter,
        points,
        |p| counter(p.dropped_events),
    )?;
    per_point(
        encoder,
        "resilience_concurrency",
        "Calls in flight now (tracked while the point has a policy).",
        Gauge,
        points,
        |p| gauge(p.concurrency),
    )?;
    per_point(
        encoder,
        "resilience_peak_concurrency",
        "The most calls ever in flight at once.",
        Gauge,
        points,
        |p| gauge(p.peak_concurrency),
    )?;
    per_point(
        encoder,
        "resilience_in_delay",
        "1 while the point is inside a downgrade delay, else 0.",
        Gauge,
        points,
        |p| gauge(u64::from(p.in_delay)),
    )
}

/// The hot keys of the points shown: their busiest keys (at most
/// [`STATS_HOT_KEYS`](crate::keys::STATS_HOT_KEYS) each, so at most that many series
/// per point, never every key) and their key tables' totals.
fn encode_key_metrics(encoder: &mut DescriptorEncoder<'_>, points: &Rows) -> fmt::Result {
    type KeySeries = (
        &'static str,
        &'static str,
        fn(&crate::keys::HotKeyStats) -> u64,
    );
    let key_series: [KeySeries; 2] = [
        (
            "resilience_hot_key_passes",
            "Calls of one of the point's busiest keys that its key rule admitted.",
            |k| k.passes,
        ),
        (
            "resilience_hot_key_refused",
            "Calls of one of the point's busiest keys that its key rule refused.",
            |k| k.refused,
        ),
    ];
    for (name, help, value) in key_series {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for p in &points.shown {
            for k in &p.hot_keys {
                let labels = [("point", p.name), ("key", k.key.as_str())];
                ConstCounter::new(value(k)).encode(family.encode_family(&labels)?)?;
            }
        }
    }
    per_point_with(
        encoder,
        "resilience_keys_tracked",
        "Keys the point's key table tracks exactly now.",
        MetricType::Gauge,
        points,
        |p| p.key_table.as_ref().map(|t| gauge(t.tracked)),
    )?;
    type TableSeries = (
        &'static str,
        &'static str,
        fn(&crate::keys::KeyTableStats) -> u64,
    );
    let table_series: [TableSeries; 3] = [
        (
            "resilience_keys_untracked_passes",
            "Calls of keys not tracked (counted in the sketch) that were admitted.",
            |t| t.untracked_passes,
        ),
        (
            "resilience_keys_untracked_refused",
            "Calls of keys not tracked (counted in the sketch) that were refused.",
            |t| t.untracked_refused,
        ),
        (
            "resilience_keys_evictions",
            "Keys that took the entry of a colder key in the point's key table.",
            |t| t.evictions,
        ),
    ];
    for (name, help, value) in table_series {
        per_point_with(encoder, name, help, MetricType::Counter, points, |p| {
            p.key_table.as_ref().map(|t| ConstCounter::new(value(t)))
        })?;
    }
    Ok(())
}

/// Breaker state, window counts and transitions of the points that have a breaker
/// (rejected calls are `resilience_downgrades_total{reason="breaker_open"}`).
fn encode_breaker_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    points: &[PointStats],
) -> fmt::Result {
    use crate::BreakerState;
    let with_breaker: Vec<(&PointStats, crate::BreakerStats)> = points
        .iter()
        .filter_map(|p| p.breaker.map(|b| (p, b)))
        .collect();
    let mut family = encoder.encode_descriptor(
        "resilience_breaker_state",
        "1 for the breaker's current state (closed, open, half_open), 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
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
            gauge(u64::from(b.state == state)).encode(family.encode_family(&labels)?)?;
        }
    }
    type Window = (
        &'static str,
        &'static str,
        fn(&crate::BreakerStats) -> Option<u64>,
    );
    let windows: [Window; 3] = [
        (
            "resilience_breaker_window_successes",
            "Successful calls in the breaker's window.",
            |b| Some(b.window_successes),
        ),
        (
            "resilience_breaker_window_failures",
            "Failed calls in the breaker's window.",
            |b| Some(b.window_failures),
        ),
        (
            "resilience_breaker_window_drops",
            "Calls the breaker rejected in its window (SRE breaker only).",
            |b| b.window_drops,
        ),
    ];
    for (name, help, value) in windows {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (p, b) in &with_breaker {
            if let Some(v) = value(b) {
                gauge(v).encode(family.encode_family(&[("point", p.name)])?)?;
            }
        }
    }
    let mut family = encoder.encode_descriptor(
        "resilience_breaker_transitions",
        "State changes of the breaker so far.",
        None,
        MetricType::Counter,
    )?;
    for (p, b) in &with_breaker {
        ConstCounter::new(b.transitions).encode(family.encode_family(&[("point", p.name)])?)?;
    }
    Ok(())
}

fn encode_registry_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    registry: &Registry,
) -> fmt::Result {
    for (name, help, value) in [
        (
            "resilience_points_undeclared",
            "Points no #[downgrade] or #[breaker] function declares.",
            registry.undeclared_points(),
        ),
        (
            "resilience_points_undeclared_max",
            "The most undeclared points the registry takes; new names past it are refused.",
            registry.max_undeclared_points(),
        ),
    ] {
        gauge(value as u64).encode(encoder.encode_descriptor(
            name,
            help,
            None,
            MetricType::Gauge,
        )?)?;
    }
    let dropped = ConstCounter::new(registry.dropped_events());
    dropped.encode(encoder.encode_descriptor(
        "resilience_listener_events_dropped",
        "Downgrade events dropped over all points because the listener queue was full.",
        None,
        MetricType::Counter,
    )?)?;
    let delivered = ConstCounter::new(registry.delivered_events());
    delivered.encode(encoder.encode_descriptor(
        "resilience_listener_events_delivered",
        "Downgrade events delivered to the listeners.",
        None,
        MetricType::Counter,
    )?)?;
    #[cfg(feature = "heartbeat")]
    encode_heartbeat_metrics(encoder, registry)?;
    let mut family = encoder.encode_descriptor(
        "resilience_policy_source_version",
        "The version of each policy source applied to the registry: a file's loads, the \
         console's policy version, the code's changes.",
        None,
        MetricType::Gauge,
    )?;
    for (source, version) in registry.source_versions() {
        let name = source.to_string();
        gauge(version).encode(family.encode_family(&[("source", name.as_str())])?)?;
    }
    Ok(())
}

/// The counters of every live heartbeat client of the registry (label `app`:
/// `group/app`).
#[cfg(feature = "heartbeat")]
fn encode_heartbeat_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    registry: &Registry,
) -> fmt::Result {
    use crate::heartbeat::HeartbeatStatus;
    let clients = crate::heartbeat::statuses_of(registry);
    type Field = (
        &'static str,
        &'static str,
        MetricType,
        fn(&HeartbeatStatus) -> u64,
    );
    let fields: [Field; 10] = [
        ("resilience_heartbeat_uploads", "Cycles uploaded.", MetricType::Counter, |s| s.uploads),
        ("resilience_heartbeat_upload_retries", "Uploads retried on the next server.", MetricType::Counter, |s| s.upload_retries),
        ("resilience_heartbeat_uploads_dropped", "Cycles dropped: their upload failed twice.", MetricType::Counter, |s| s.uploads_dropped),
        ("resilience_heartbeat_pulls", "Pulls answered.", MetricType::Counter, |s| s.pulls),
        ("resilience_heartbeat_pull_failures", "Pulls that failed (network, HTTP, protocol).", MetricType::Counter, |s| s.pull_failures),
        ("resilience_heartbeat_policy_updates", "Console policy versions applied.", MetricType::Counter, |s| s.policy_updates),
        ("resilience_heartbeat_policies_rejected", "Console policy versions refused by the loader.", MetricType::Counter, |s| s.policies_rejected),
        ("resilience_heartbeat_policy_version", "The console policy version held.", MetricType::Gauge, |s| s.policy_version),
        ("resilience_heartbeat_failing", "1 while the last upload or pull failed.", MetricType::Gauge, |s| u64::from(s.last_upload_error.is_some() || s.last_pull_error.is_some())),
        ("resilience_heartbeat_from_cache", "1 while the console policies held came from the cache file and no pull succeeded since.", MetricType::Gauge, |s| u64::from(s.from_cache)),
    ];
    for (name, help, kind, value) in fields {
        let mut family = encoder.encode_descriptor(name, help, None, kind)?;
        for (app, status) in &clients {
            let labels = [("app", app.as_str())];
            match kind {
                MetricType::Counter => {
                    ConstCounter::new(value(status)).encode(family.encode_family(&labels)?)?;
                }
                _ => gauge(value(status)).encode(family.encode_family(&labels)?)?,
            }
        }
    }
    Ok(())
}
