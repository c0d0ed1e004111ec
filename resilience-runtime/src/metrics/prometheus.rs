//! The Prometheus exposition (feature `prometheus`): the shared walk encoded with
//! `prometheus-client`.

use super::series::{self, Emit, Family, Kind, Sink, Value};
use super::PointsCollector;
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

#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
impl Collector for PointsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        series::collect(self, &mut Encoder(&mut encoder))
    }
}

/// The walk's families as `prometheus-client` descriptors and const metrics.
struct Encoder<'e, 'a>(&'e mut DescriptorEncoder<'a>);

impl Sink for Encoder<'_, '_> {
    fn family(
        &mut self,
        family: &Family,
        samples: &mut dyn FnMut(&mut Emit<'_>) -> fmt::Result,
    ) -> fmt::Result {
        let metric_type = match family.kind {
            Kind::Counter | Kind::Seconds => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        };
        let mut metric = self
            .0
            .encode_descriptor(family.name, family.help, None, metric_type)?;
        samples(&mut |labels, value| {
            let sample = metric.encode_family(&labels)?;
            match (family.kind, value) {
                (Kind::Gauge, v) => ConstGauge::new(v.as_i64()).encode(sample),
                (_, Value::Int(v)) => ConstCounter::new(v).encode(sample),
                (_, Value::Float(v)) => ConstCounter::new(v).encode(sample),
            }
        })
    }
}
