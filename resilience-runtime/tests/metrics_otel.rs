//! The OpenTelemetry exporter, registered on the real SDK (`SdkMeterProvider` with a
//! `PeriodicReader` over the `InMemoryMetricExporter`) and read back from what the SDK
//! exported: instrument names, kinds, attributes and values must be the registry's
//! statistics after known traffic, read at collection time, with the cap and its
//! `other` series as in the Prometheus exposition.

use opentelemetry::metrics::MeterProvider as _;
use resilience_runtime::metrics::PointsCollector;
use resilience_runtime::Reason;
use std::collections::BTreeMap;

#[path = "support/otel_sdk.rs"]
mod otel_sdk;
#[path = "support/metrics_traffic.rs"]
mod traffic;
use otel_sdk::{series, Point, Sdk, Series};
use traffic::{capped_traffic, known_traffic, own_registry, queue_timeout};

fn get(all: &BTreeMap<Series, Point>, name: &str, labels: &[(&str, &str)]) -> Point {
    match all.get(&series(name, labels)) {
        Some(p) => p.clone(),
        None => panic!("no {name} {labels:?}"),
    }
}

#[test]
fn instruments_report_the_registry_stats_at_collection_time() {
    let r = own_registry();
    let sdk = Sdk::new();
    let instruments = PointsCollector::new(r).register_otel(&sdk.provider.meter("test"));
    assert!(instruments.names().contains(&"resilience_visits"));
    assert!(instruments.names().contains(&"resilience_concurrency"));

    // The traffic comes after the registration: callbacks read the registry when the
    // SDK collects.
    let held = known_traffic(r, "o");
    let conc_point = r.point("o.conc").unwrap();

    let (all, help) = sdk.collect();
    let ok = [("point", "o.ok")];
    assert_eq!(get(&all, "resilience_visits", &ok), Point::Counter(5));
    assert_eq!(get(&all, "resilience_passes", &ok), Point::Counter(5));
    assert_eq!(get(&all, "resilience_exceptions", &ok), Point::Counter(2));
    let kill = [("point", "o.kill")];
    assert_eq!(get(&all, "resilience_visits", &kill), Point::Counter(3));
    for reason in Reason::ALL {
        let labels = [("point", "o.kill"), ("reason", reason.as_str())];
        let expected = if reason == Reason::Visits { 3 } else { 0 };
        assert_eq!(
            get(&all, "resilience_downgrades", &labels),
            Point::Counter(expected),
            "{reason}"
        );
    }
    let conc = [("point", "o.conc")];
    let by_concurrency = [("point", "o.conc"), ("reason", "concurrency")];
    assert_eq!(
        get(&all, "resilience_downgrades", &by_concurrency),
        Point::Counter(1)
    );
    assert_eq!(get(&all, "resilience_concurrency", &conc), Point::Gauge(1));
    assert_eq!(get(&all, "resilience_in_delay", &conc), Point::Gauge(0));
    assert_eq!(
        get(&all, "resilience_metrics_points_omitted", &[]),
        Point::Gauge(0)
    );
    assert_eq!(
        help["resilience_visits"],
        "Calls that asked to run, downgraded ones included."
    );
    // No `_total` in instrument names: OpenTelemetry's Prometheus exporters add it.
    assert!(!help.keys().any(|name| name.ends_with("_total")));

    // A second collection reads the registry again.
    held.finish(false);
    conc_point.enter().unwrap().finish(true);
    let (all, _) = sdk.collect();
    assert_eq!(get(&all, "resilience_visits", &conc), Point::Counter(3));
    assert_eq!(get(&all, "resilience_passes", &conc), Point::Counter(2));
    assert_eq!(get(&all, "resilience_exceptions", &conc), Point::Counter(1));
    assert_eq!(get(&all, "resilience_concurrency", &conc), Point::Gauge(0));
    assert_eq!(get(&all, "resilience_visits", &ok), Point::Counter(5));
    // Every value is the registry's own.
    for name in ["o.ok", "o.kill", "o.conc"] {
        let stats = r.stats(name).unwrap();
        let point = [("point", name)];
        let t = &stats.totals;
        assert_eq!(
            get(&all, "resilience_visits", &point),
            Point::Counter(t.visits)
        );
        assert_eq!(
            get(&all, "resilience_timeouts", &point),
            Point::Counter(t.timeouts)
        );
        for reason in Reason::ALL {
            let labels = [("point", name), ("reason", reason.as_str())];
            assert_eq!(
                get(&all, "resilience_downgrades", &labels),
                Point::Counter(t.downgrades_by_reason.get(reason))
            );
        }
    }
    sdk.provider.shutdown().unwrap();
}

#[test]
fn instruments_report_the_capped_points_and_the_rest_summed() {
    let r = own_registry();
    capped_traffic(r);

    let sdk = Sdk::new();
    PointsCollector::new(r)
        .max_points(3)
        .register_otel(&sdk.provider.meter("test"));
    let (all, _) = sdk.collect();
    let mut shown: Vec<String> = all
        .keys()
        .filter(|(name, _)| name == "resilience_visits")
        .filter_map(|(_, labels)| labels.iter().find(|(k, _)| k == "point"))
        .map(|(_, v)| v.clone())
        .collect();
    shown.sort();
    assert_eq!(shown, ["cap.5", "cap.6", "cap.open", "other"]);
    let other = [("point", "other"), ("omitted", "true")];
    assert_eq!(get(&all, "resilience_visits", &other), Point::Counter(10));
    assert_eq!(
        get(&all, "resilience_exceptions", &other),
        Point::Counter(4)
    );
    assert_eq!(
        get(&all, "resilience_metrics_points_omitted", &[]),
        Point::Gauge(5)
    );
    assert_eq!(
        get(
            &all,
            "resilience_breaker_state",
            &[
                ("point", "cap.open"),
                ("kind", "classic"),
                ("state", "open")
            ]
        ),
        Point::Gauge(1)
    );
    assert_eq!(
        get(
            &all,
            "resilience_breaker_transitions",
            &[("point", "cap.open")]
        ),
        Point::Counter(1)
    );
    assert!(!all
        .keys()
        .any(|(_, labels)| labels.iter().any(|(_, v)| v == "cap.1")));
    sdk.provider.shutdown().unwrap();
}

#[test]
fn queue_wait_is_a_float_counter_in_seconds() {
    let r = own_registry();
    queue_timeout(r, "o.queue");

    let sdk = Sdk::new();
    PointsCollector::new(r).register_otel(&sdk.provider.meter("test"));
    let (all, _) = sdk.collect();
    let q = r.stats("o.queue").unwrap().queue.unwrap();
    let labels = [("point", "o.queue")];
    assert_eq!(
        get(&all, "resilience_queue_timed_out", &labels),
        Point::Counter(1)
    );
    let Point::FloatCounter(waited, unit) = get(&all, "resilience_queue_wait_seconds", &labels)
    else {
        panic!("not a float counter");
    };
    assert_eq!(unit, "s");
    #[allow(clippy::cast_precision_loss)]
    let expected = q.wait.as_nanos() as f64 / 1e9;
    assert!((waited - expected).abs() < 1e-9, "{waited} {expected}");
    assert!(waited > 0.0);
    sdk.provider.shutdown().unwrap();
}
