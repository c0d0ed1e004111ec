//! The three exporters show the same series: every sample of the Prometheus
//! exposition (read with `prometheus-parse`) is a series of the `metrics` facade
//! (`metrics-util`'s `DebuggingRecorder`) and a data point of the OpenTelemetry SDK
//! (`InMemoryMetricExporter`), with the same name, labels and value, and neither has
//! more; over points with every kind of series (breaker, queue, hot keys, downgrades)
//! and over the cap.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use opentelemetry::metrics::MeterProvider as _;
use prometheus_parse::{Scrape, Value};
use resilience_runtime::keys::KeyPolicy;
use resilience_runtime::metrics::PointsCollector;
use resilience_runtime::{Policy, Reason, Registry};
use std::collections::BTreeMap;
use std::time::Duration;

#[path = "support/facade_recorder.rs"]
mod facade_recorder;
#[path = "support/otel_sdk.rs"]
mod otel_sdk;
#[path = "support/metrics_traffic.rs"]
mod traffic;
use otel_sdk::{Point, Sdk, Series};
use traffic::{open_breaker, own_registry, queue_timeout};

fn sorted(labels: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut labels: Vec<_> = labels.collect();
    labels.sort();
    labels
}

fn prometheus(collector: PointsCollector) -> BTreeMap<Series, f64> {
    let mut m = prometheus_client::registry::Registry::default();
    m.register_collector(Box::new(collector));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &m).unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let mut all = BTreeMap::new();
    for s in scrape.samples {
        let value = match s.value {
            Value::Counter(v) | Value::Gauge(v) => v,
            other => panic!("{}: {other:?}", s.metric),
        };
        let labels = sorted(s.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        assert!(all.insert((s.metric, labels), value).is_none());
    }
    all
}

#[allow(clippy::cast_precision_loss)] // test counts are tiny
fn facade(collector: PointsCollector) -> BTreeMap<Series, f64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    collector.publish_to(&recorder);
    facade_recorder::read(&snapshotter)
        .into_iter()
        .map(|((name, labels), (_, _, value))| {
            let value = match value {
                DebugValue::Counter(v) => v as f64,
                DebugValue::Gauge(v) => v.0,
                DebugValue::Histogram(_) => panic!("no histograms"),
            };
            ((name, sorted(labels.into_iter())), value)
        })
        .collect()
}

/// The data points of one collection, named as Prometheus names them (`_total` added
/// to monotonic sums, as OpenTelemetry's Prometheus exporters do).
#[allow(clippy::cast_precision_loss)] // test counts are tiny
fn otel(collector: PointsCollector) -> BTreeMap<Series, f64> {
    let sdk = Sdk::new();
    collector.register_otel(&sdk.provider.meter("test"));
    let (points, _) = sdk.collect();
    sdk.provider.shutdown().unwrap();
    points
        .into_iter()
        .map(|((name, attributes), point)| match point {
            Point::Counter(v) => ((format!("{name}_total"), attributes), v as f64),
            Point::FloatCounter(v, _) => ((format!("{name}_total"), attributes), v),
            Point::Gauge(v) => ((name, attributes), v as f64),
        })
        .collect()
}

/// A registry with every kind of series: plain calls with exceptions, a kill switch
/// in a delay, a full concurrency limit, an open breaker, a queue that timed out,
/// hot keys, an idle point.
fn busy_registry() -> &'static Registry {
    let r = own_registry();
    for i in 1..=5u64 {
        let p = r.point(&format!("x.calls.{i}")).unwrap();
        for n in 0..i {
            p.enter().unwrap().finish(n == 0);
        }
    }
    r.point("x.idle").unwrap();
    let kill = Policy::builder()
        .max_visits(0)
        .delay(Duration::from_secs(600), None)
        .build()
        .unwrap();
    r.set_policy("x.kill", kill).unwrap();
    for _ in 0..3 {
        assert!(r.point("x.kill").unwrap().enter().is_err());
    }
    r.set_policy(
        "x.conc",
        Policy::builder().max_concurrency(1).build().unwrap(),
    )
    .unwrap();
    let conc = r.point("x.conc").unwrap();
    std::mem::forget(conc.enter().unwrap()); // in flight for good
    assert_eq!(conc.enter().unwrap_err().reason(), Reason::Concurrency);
    open_breaker(r, "x.breaker");
    let breaker = r.point("x.breaker").unwrap();
    assert_eq!(breaker.enter().unwrap_err().reason(), Reason::BreakerOpen);
    queue_timeout(r, "x.queue");
    let keys = KeyPolicy::builder()
        .limit(2, Duration::from_secs(3600))
        .max_keys(16)
        .build()
        .unwrap();
    r.set_policy("x.keys", Policy::builder().keys(keys).build().unwrap())
        .unwrap();
    let k = r.point("x.keys").unwrap();
    for i in 0..7 {
        let _ = k
            .enter_key(format!("k-{}", i % 2).as_str())
            .map(|p| p.finish(false));
    }
    r
}

fn assert_same(collector: PointsCollector) -> BTreeMap<Series, f64> {
    let prometheus = prometheus(collector);
    let facade = facade(collector);
    let otel = otel(collector);
    assert!(prometheus.len() > 50, "{}", prometheus.len());
    let only = |a: &BTreeMap<Series, f64>, b: &BTreeMap<Series, f64>| -> Vec<Series> {
        a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
    };
    assert_eq!(
        only(&prometheus, &facade),
        [] as [Series; 0],
        "not in facade"
    );
    assert_eq!(
        only(&facade, &prometheus),
        [] as [Series; 0],
        "only in facade"
    );
    assert_eq!(only(&prometheus, &otel), [] as [Series; 0], "not in otel");
    assert_eq!(only(&otel, &prometheus), [] as [Series; 0], "only in otel");
    for (series, value) in &prometheus {
        assert_eq!(facade[series], *value, "facade {series:?}");
        assert_eq!(otel[series], *value, "otel {series:?}");
    }
    prometheus
}

fn get<'a>(all: &'a BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> &'a f64 {
    let labels = sorted(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    &all[&(name.to_owned(), labels)]
}

#[test]
fn every_exporter_shows_the_same_series() {
    let r = busy_registry();
    let all = assert_same(PointsCollector::new(r));
    // The scenario's series are there (so the comparison is not of empty sets).
    let of = |point| [("point", point)];
    assert_eq!(*get(&all, "resilience_visits_total", &of("x.calls.5")), 5.0);
    assert_eq!(
        *get(
            &all,
            "resilience_downgrades_total",
            &[("point", "x.kill"), ("reason", "visits")]
        ),
        1.0
    );
    assert_eq!(*get(&all, "resilience_in_delay", &of("x.kill")), 1.0);
    assert_eq!(*get(&all, "resilience_concurrency", &of("x.conc")), 1.0);
    assert_eq!(
        *get(
            &all,
            "resilience_breaker_state",
            &[
                ("point", "x.breaker"),
                ("kind", "classic"),
                ("state", "open")
            ]
        ),
        1.0
    );
    assert!(*get(&all, "resilience_queue_wait_seconds_total", &of("x.queue")) > 0.0);
    assert_eq!(
        *get(
            &all,
            "resilience_hot_key_refused_total",
            &[("point", "x.keys"), ("key", "k-0")]
        ),
        2.0
    );
    assert_eq!(*get(&all, "resilience_metrics_points_omitted", &[]), 0.0);
}

#[test]
fn every_exporter_caps_the_points_alike() {
    let r = busy_registry();
    let all = assert_same(PointsCollector::new(r).max_points(4));
    assert_eq!(*get(&all, "resilience_metrics_points_omitted", &[]), 7.0);
    let other = [("point", "other"), ("omitted", "true")];
    // Shown: the delay and the open breaker first, then the most visits (x.keys 7,
    // x.calls.5 5); the other seven summed.
    assert!(all.contains_key(&(
        "resilience_visits_total".to_owned(),
        sorted(
            other
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        )
    )));
    let mut shown: Vec<&str> = all
        .keys()
        .filter(|(name, _)| name == "resilience_visits_total")
        .filter_map(|(_, labels)| labels.iter().find(|(k, _)| k == "point"))
        .map(|(_, v)| v.as_str())
        .collect();
    shown.sort_unstable();
    assert_eq!(
        shown,
        ["other", "x.breaker", "x.calls.5", "x.keys", "x.kill"]
    );
    let all_nothing = assert_same(PointsCollector::new(r).max_points(0));
    assert_eq!(
        *get(&all_nothing, "resilience_metrics_points_omitted", &[]),
        11.0
    );
}
