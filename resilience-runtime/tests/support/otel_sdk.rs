//! The OpenTelemetry SDK as the exporter tests read it: a provider whose reader exports
//! to memory when flushed, and its data points by name and attributes.

// Each test binary uses some of these.
#![allow(dead_code)]

use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use std::collections::BTreeMap;
use std::time::Duration;

/// An instrument's data point: its name and attributes (sorted by key).
pub(crate) type Series = (String, Vec<(String, String)>);

/// What the SDK exported for one series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Point {
    /// A monotonic cumulative sum.
    Counter(u64),
    /// A monotonic cumulative sum of `f64`, with its unit.
    FloatCounter(f64, String),
    Gauge(u64),
}

pub(crate) struct Sdk {
    pub(crate) provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Sdk {
    /// A provider whose reader only exports when flushed (its interval is an hour).
    pub(crate) fn new() -> Sdk {
        let exporter = InMemoryMetricExporter::default();
        let reader = PeriodicReader::builder(exporter.clone())
            .with_interval(Duration::from_secs(3600))
            .build();
        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        Sdk { provider, exporter }
    }

    /// Collects once and returns every data point exported, with its description.
    pub(crate) fn collect(&self) -> (BTreeMap<Series, Point>, BTreeMap<String, String>) {
        self.exporter.reset();
        self.provider.force_flush().unwrap();
        let exported = self.exporter.get_finished_metrics().unwrap();
        assert_eq!(exported.len(), 1, "one collection");
        let mut points = BTreeMap::new();
        let mut help = BTreeMap::new();
        for metric in exported[0].scope_metrics().flat_map(|s| s.metrics()) {
            let name = metric.name().to_owned();
            help.insert(name.clone(), metric.description().to_owned());
            let mut put = |attributes: Vec<(String, String)>, point: Point| {
                let mut attributes = attributes;
                attributes.sort();
                assert!(
                    points.insert((name.clone(), attributes), point).is_none(),
                    "{name}: one data point per attribute set"
                );
            };
            let attrs = |kv: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
                kv.map(|a| (a.key.to_string(), a.value.to_string()))
                    .collect::<Vec<_>>()
            };
            match metric.data() {
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    assert!(sum.is_monotonic(), "{name}");
                    for p in sum.data_points() {
                        put(attrs(&mut p.attributes()), Point::Counter(p.value()));
                    }
                }
                AggregatedMetrics::F64(MetricData::Sum(sum)) => {
                    assert!(sum.is_monotonic(), "{name}");
                    for p in sum.data_points() {
                        let unit = metric.unit().to_owned();
                        put(
                            attrs(&mut p.attributes()),
                            Point::FloatCounter(p.value(), unit),
                        );
                    }
                }
                AggregatedMetrics::U64(MetricData::Gauge(gauge)) => {
                    for p in gauge.data_points() {
                        put(attrs(&mut p.attributes()), Point::Gauge(p.value()));
                    }
                }
                other => panic!("{name}: unexpected {other:?}"),
            }
        }
        (points, help)
    }
}

pub(crate) fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}
