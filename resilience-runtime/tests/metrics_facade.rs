//! The `metrics` facade exporter, published to `metrics-util`'s real
//! `DebuggingRecorder` and read back with its `Snapshotter`: names, labels, kinds and
//! values must be the registry's statistics after known traffic, the cap and its
//! `other` series as in the Prometheus exposition, and the periodic publisher must
//! publish on its own and stop when told.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use resilience_runtime::metrics::{self, PointsCollector};
use resilience_runtime::{downgrade, registry, Policy, Reason};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[path = "support/facade_recorder.rs"]
mod facade_recorder;
#[path = "support/metrics_traffic.rs"]
mod traffic;
use facade_recorder::{read, series, Series};
use traffic::{capped_traffic, known_traffic, own_registry, queue_timeout};

fn counter(
    all: &BTreeMap<Series, (MetricKind, Option<String>, DebugValue)>,
    name: &str,
    labels: &[(&str, &str)],
) -> u64 {
    match all.get(&series(name, labels)) {
        Some((MetricKind::Counter, None, DebugValue::Counter(v))) => *v,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn gauge(
    all: &BTreeMap<Series, (MetricKind, Option<String>, DebugValue)>,
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    match all.get(&series(name, labels)) {
        Some((MetricKind::Gauge, _, DebugValue::Gauge(v))) => v.0,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

#[test]
fn published_series_are_the_registry_stats() {
    let r = own_registry();
    let held = known_traffic(r, "f");
    let conc_point = r.point("f.conc").unwrap();

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    PointsCollector::new(r).publish_to(&recorder);
    let all = read(&snapshotter);

    let ok = [("point", "f.ok")];
    assert_eq!(counter(&all, "resilience_visits_total", &ok), 5);
    assert_eq!(counter(&all, "resilience_passes_total", &ok), 5);
    assert_eq!(counter(&all, "resilience_exceptions_total", &ok), 2);
    let kill = [("point", "f.kill")];
    assert_eq!(counter(&all, "resilience_visits_total", &kill), 3);
    assert_eq!(counter(&all, "resilience_passes_total", &kill), 0);
    // One series per reason, zeros included.
    for reason in Reason::ALL {
        let labels = [("point", "f.kill"), ("reason", reason.as_str())];
        let expected = if reason == Reason::Visits { 3 } else { 0 };
        assert_eq!(
            counter(&all, "resilience_downgrades_total", &labels),
            expected,
            "{reason}"
        );
    }
    let conc = [("point", "f.conc")];
    let by_concurrency = [("point", "f.conc"), ("reason", "concurrency")];
    assert_eq!(
        counter(&all, "resilience_downgrades_total", &by_concurrency),
        1
    );
    assert_eq!(gauge(&all, "resilience_concurrency", &conc), 1.0);
    assert_eq!(gauge(&all, "resilience_peak_concurrency", &conc), 1.0);
    assert_eq!(gauge(&all, "resilience_in_delay", &conc), 0.0);
    assert_eq!(gauge(&all, "resilience_metrics_points_omitted", &[]), 0.0);
    // Every value is the registry's own.
    for name in ["f.ok", "f.kill", "f.conc"] {
        let stats = r.stats(name).unwrap();
        let point = [("point", name)];
        assert_eq!(
            counter(&all, "resilience_visits_total", &point),
            stats.totals.visits
        );
        assert_eq!(
            counter(&all, "resilience_passes_total", &point),
            stats.totals.passes
        );
        for reason in Reason::ALL {
            let labels = [("point", name), ("reason", reason.as_str())];
            assert_eq!(
                counter(&all, "resilience_downgrades_total", &labels),
                stats.totals.downgrades_by_reason.get(reason)
            );
        }
    }
    // Families are described with the Prometheus help texts.
    let described = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .any(|(key, _, help, _)| {
            key.key().name() == "resilience_visits_total"
                && help.as_deref() == Some("Calls that asked to run, downgraded ones included.")
        });
    assert!(described);

    // Counters are absolute: publishing again sets the totals, it does not add them.
    held.finish(false);
    conc_point.enter().unwrap().finish(false);
    PointsCollector::new(r).publish_to(&recorder);
    PointsCollector::new(r).publish_to(&recorder);
    let all = read(&snapshotter);
    assert_eq!(counter(&all, "resilience_visits_total", &conc), 3);
    assert_eq!(counter(&all, "resilience_passes_total", &conc), 2);
    assert_eq!(counter(&all, "resilience_visits_total", &ok), 5);
    assert_eq!(gauge(&all, "resilience_concurrency", &conc), 0.0);
}

/// The cap: an open breaker first, then the busiest points; the others summed into
/// `point="other", omitted="true"`, as in the Prometheus exposition.
#[test]
fn published_points_are_capped_and_the_rest_summed() {
    let r = own_registry();
    capped_traffic(r);

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    PointsCollector::new(r).max_points(3).publish_to(&recorder);
    let all = read(&snapshotter);

    let shown: Vec<&str> = all
        .keys()
        .filter(|(name, _)| name == "resilience_visits_total")
        .filter_map(|(_, labels)| labels.iter().find(|(k, _)| k == "point"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(shown, ["cap.5", "cap.6", "cap.open", "other"]);
    let other = [("point", "other"), ("omitted", "true")];
    // cap.1 ..= cap.4: 1 + 2 + 3 + 4 visits, one exception each; cap.idle: none.
    assert_eq!(counter(&all, "resilience_visits_total", &other), 10);
    assert_eq!(counter(&all, "resilience_exceptions_total", &other), 4);
    let other_visits = [
        ("point", "other"),
        ("omitted", "true"),
        ("reason", "visits"),
    ];
    assert_eq!(
        counter(&all, "resilience_downgrades_total", &other_visits),
        0
    );
    assert_eq!(gauge(&all, "resilience_metrics_points_omitted", &[]), 5.0);
    assert_eq!(
        gauge(
            &all,
            "resilience_breaker_state",
            &[
                ("point", "cap.open"),
                ("kind", "classic"),
                ("state", "open")
            ]
        ),
        1.0
    );
    assert_eq!(
        counter(
            &all,
            "resilience_breaker_transitions_total",
            &[("point", "cap.open")]
        ),
        1
    );
    assert!(!all
        .keys()
        .any(|(_, labels)| labels.iter().any(|(_, v)| v == "cap.1")));
}

#[test]
fn queue_wait_seconds_are_a_gauge_in_seconds() {
    let r = own_registry();
    queue_timeout(r, "f.queue");

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    PointsCollector::new(r).publish_to(&recorder);
    let all = read(&snapshotter);
    let q = r.stats("f.queue").unwrap().queue.unwrap();
    let point = [("point", "f.queue")];
    assert_eq!(counter(&all, "resilience_queue_timed_out_total", &point), 1);
    let key = series("resilience_queue_wait_seconds_total", &point);
    let Some((MetricKind::Gauge, Some(unit), DebugValue::Gauge(waited))) = all.get(&key) else {
        panic!("{:?}", all.get(&key));
    };
    assert_eq!(unit, "seconds");
    #[allow(clippy::cast_precision_loss)]
    let expected = q.wait.as_nanos() as f64 / 1e9;
    assert!((waited.0 - expected).abs() < 1e-9, "{waited} {expected}");
    assert!(waited.0 > 0.0);
}

#[downgrade(point = "facade.macro", fallback = fallback)]
fn guarded(fail: bool) -> Result<&'static str, std::io::Error> {
    if fail {
        Err(std::io::Error::other("business error"))
    } else {
        Ok("ran")
    }
}

fn fallback(_fail: bool) -> Result<&'static str, std::io::Error> {
    Ok("downgraded")
}

/// The free `publish` reaches the thread's local recorder, and the periodic publisher
/// the global one, on its own thread, until it is stopped.
#[test]
fn the_global_registry_is_published_to_the_recorder_in_force() {
    registry()
        .set_policy(
            "facade.macro",
            Policy::builder().max_visits(2).build().unwrap(),
        )
        .unwrap();
    assert_eq!(guarded(false).unwrap(), "ran");
    assert!(guarded(true).is_err());
    assert_eq!(guarded(false).unwrap(), "downgraded");
    let point = [("point", "facade.macro")];
    let by_visits = [("point", "facade.macro"), ("reason", "visits")];

    let local = DebuggingRecorder::new();
    let local_view = local.snapshotter();
    ::metrics::with_local_recorder(&local, metrics::publish);
    let all = read(&local_view);
    assert_eq!(counter(&all, "resilience_visits_total", &point), 3);
    assert_eq!(counter(&all, "resilience_passes_total", &point), 2);
    assert_eq!(counter(&all, "resilience_exceptions_total", &point), 1);
    assert_eq!(counter(&all, "resilience_downgrades_total", &by_visits), 1);

    let zero = PointsCollector::global().spawn_publisher(Duration::ZERO);
    assert_eq!(zero.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);

    // The only test of this binary that installs a global recorder.
    let global = DebuggingRecorder::new();
    let global_view = global.snapshotter();
    global.install().expect("no other global recorder");
    let publisher = PointsCollector::global()
        .spawn_publisher(Duration::from_millis(20))
        .unwrap();
    // Each snapshot takes the values published since the last one (it resets them).
    let published = |name: &str, labels: &[(&str, &str)], expected: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some((_, _, DebugValue::Counter(v))) =
                read(&global_view).get(&series(name, labels))
            {
                if *v == expected {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    };
    assert!(published("resilience_visits_total", &point, 3));
    assert!(published("resilience_downgrades_total", &by_visits, 1));
    // A later call shows in a later publish.
    assert_eq!(guarded(false).unwrap(), "downgraded");
    assert!(published("resilience_downgrades_total", &by_visits, 2));
    assert!(published("resilience_visits_total", &point, 4));
    publisher.stop().expect("the publisher did not panic");
    // Stopped: nothing is published any more, so every value read is the reset 0.
    let _ = read(&global_view);
    std::thread::sleep(Duration::from_millis(100));
    let after = read(&global_view);
    assert!(!after.is_empty());
    for (series, (_, _, value)) in after {
        assert!(
            matches!(value, DebugValue::Counter(0)) || value == DebugValue::Gauge(0.0.into()),
            "{series:?} {value:?}"
        );
    }
}
