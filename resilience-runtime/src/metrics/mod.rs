//! Every point's statistics as metrics, read from the registry when they are asked
//! for, through three exporters over one walk of the points:
//!
//! - **Prometheus** (feature `prometheus`): `render`, `render_openmetrics` and the
//!   `prometheus-client` collector [`PointsCollector`];
//! - **the `metrics` facade** (feature `metrics`): `publish`,
//!   `PointsCollector::publish` and the periodic `Publisher` set every series on
//!   the installed `metrics::Recorder` (counters with `Counter::absolute`, gauges with
//!   `Gauge::set`);
//! - **OpenTelemetry** (feature `opentelemetry`): `PointsCollector::register_otel`
//!   registers observable instruments on a `Meter` whose callbacks report every
//!   series at each collection.
//!
//! Nothing is recorded twice: each export reads [`Registry::stats`] for every point,
//! so the numbers are exactly the registry's and cost nothing between exports.
//!
//! Every exporter has the same series (names, labels, the cap of
//! [`PointsCollector::max_points`] and its `other` series). The names below are the
//! Prometheus ones: the facade uses them as they are (counters end in `_total`);
//! OpenTelemetry instruments are named without the `_total` of counters, which
//! OpenTelemetry's Prometheus exporters add back.
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
//! | `resilience_hot_key_passes_total`, `resilience_hot_key_refused_total` | counter | `point`, `key` | each point's busiest keys ([`STATS_HOT_KEYS`](crate::keys::STATS_HOT_KEYS) at most) |
//! | `resilience_keys_tracked` (gauge), `resilience_keys_untracked_passes_total`, `_untracked_refused_total`, `_evictions_total` | counter | `point` | the point's key table |
//!
//! Through the facade, `resilience_queue_wait_seconds_total` is a gauge (a count of
//! seconds with a fraction; the facade's counters are integers), described with
//! `Unit::Seconds`. Through OpenTelemetry it is an `f64` counter with unit `s`.
//!
//! `resilience_downgrades_total` has one series per [`Reason`](crate::Reason), zeros
//! included, so `rate()` works from the first scrape.
//!
//! # Examples
//!
//! ```
//! # #[cfg(feature = "prometheus")] {
//! use resilience_runtime::{metrics, registry, Policy};
//!
//! registry().set_policy("docs.metrics", Policy::builder().max_visits(0).build()?)?;
//! let _ = registry().point("docs.metrics")?.enter(); // downgraded
//! let text = metrics::render();
//! assert!(text.contains(r#"resilience_downgrades_total{point="docs.metrics",reason="visits"} 1"#));
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::registry::{registry, Registry};

#[cfg(feature = "metrics")]
mod facade;
#[cfg(feature = "opentelemetry")]
mod otel;
#[cfg(feature = "prometheus")]
mod prometheus;
mod select;
mod series;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use facade::{publish, Publisher};
#[cfg(feature = "opentelemetry")]
#[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
pub use otel::OtelInstruments;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::{
    encode_into, render, render_openmetrics, CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE,
};

/// Which points of which registry the exporters show: every point of a registry, read
/// at export time, at most [`max_points`](PointsCollector::max_points) of them one by
/// one.
///
/// With feature `prometheus` it is a `prometheus-client` collector (`render` uses it
/// with the global registry; register it in an application's own `prometheus_client`
/// registry to serve the points next to other metrics); with `metrics` it
/// publishes to a `metrics` recorder (`PointsCollector::publish`); with
/// `opentelemetry` it registers instruments on a meter
/// (`PointsCollector::register_otel`).
///
/// # Examples
///
/// ```
/// # #[cfg(feature = "prometheus")] {
/// use resilience_runtime::metrics::PointsCollector;
///
/// let mut app_metrics = prometheus_client::registry::Registry::default();
/// app_metrics.register_collector(Box::new(PointsCollector::global()));
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &app_metrics)?;
/// assert!(text.ends_with("# EOF\n"));
/// # }
/// # Ok::<(), std::fmt::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PointsCollector {
    registry: &'static Registry,
    max_points: u64,
}

/// How many points a collector exports one by one unless told otherwise
/// ([`PointsCollector::max_points`]).
pub const DEFAULT_MAX_POINTS: u64 = 2_000;

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
    /// # #[cfg(feature = "prometheus")] {
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
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn max_points(mut self, max: u64) -> PointsCollector {
        self.max_points = max;
        self
    }

    /// A collector of the global registry's points.
    pub fn global() -> PointsCollector {
        PointsCollector::new(registry())
    }
}
