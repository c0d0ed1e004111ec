//! The Prometheus exposition, scraped over a real loopback TCP connection from a small
//! HTTP server thread and read with a real exposition parser (`prometheus-parse`): the
//! values must be the registry's own statistics for points with known traffic.

use prometheus_parse::{Sample, Scrape, Value};
use resilience_runtime::{metrics, registry, PointStats, Policy, Reason};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Serves `metrics::render()` for `requests` requests on a free loopback port.
fn start_server(requests: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut header = String::new();
            while reader.read_line(&mut header).unwrap() > 2 {
                header.clear();
            }
            let body = metrics::render();
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                metrics::CONTENT_TYPE,
                body.len()
            )
            .unwrap();
        }
    });
    (addr, handle)
}

/// GETs `/metrics` and returns (content type, body).
fn scrape(addr: SocketAddr) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap()
        .to_owned();
    (content_type, body.to_owned())
}

fn parse(body: &str) -> Scrape {
    Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("a valid exposition")
}

/// The value of the one sample of `metric` with these labels.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(matching.len(), 1, "{metric} {labels:?}: {matching:?}");
    match matching[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        ref other => panic!("{metric}: unexpected {other:?}"),
    }
}

#[allow(clippy::cast_precision_loss)] // test counts are tiny
fn f(v: u64) -> f64 {
    v as f64
}

/// A label value as the text format writes it (`\\` and `\"` escaped): prometheus-parse
/// hands label values back without unescaping them.
fn escaped(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn assert_point(scrape: &Scrape, stats: &PointStats) {
    let name = escaped(stats.name);
    let point = [("point", name.as_str())];
    let t = &stats.totals;
    assert_eq!(
        value(scrape, "resilience_visits_total", &point),
        f(t.visits)
    );
    assert_eq!(
        value(scrape, "resilience_passes_total", &point),
        f(t.passes)
    );
    assert_eq!(
        value(scrape, "resilience_exceptions_total", &point),
        f(t.exceptions)
    );
    assert_eq!(
        value(scrape, "resilience_timeouts_total", &point),
        f(t.timeouts)
    );
    assert_eq!(
        value(scrape, "resilience_dropped_events_total", &point),
        f(stats.dropped_events)
    );
    assert_eq!(
        value(scrape, "resilience_concurrency", &point),
        f(stats.concurrency)
    );
    assert_eq!(
        value(scrape, "resilience_in_delay", &point),
        f(u64::from(stats.in_delay))
    );
    for reason in Reason::ALL {
        let labels = [("point", name.as_str()), ("reason", reason.as_str())];
        assert_eq!(
            value(scrape, "resilience_downgrades_total", &labels),
            f(t.downgrades_by_reason.get(reason)),
            "{} {reason}",
            stats.name
        );
    }
}

#[test]
fn scraped_values_are_the_registry_stats() {
    let r = registry();
    // 5 calls, 2 of them exceptions, no policy.
    let ok = r.point("m.ok").unwrap();
    for i in 0..5 {
        ok.enter().unwrap().finish(i % 3 == 0);
    }
    // A kill switch with a sticky delay: 3 visits, 1 trip on visits, 2 in the delay.
    r.set_policy(
        "m.kill",
        Policy::builder()
            .max_visits(0)
            .delay(Duration::from_secs(600), None)
            .build()
            .unwrap(),
    )
    .unwrap();
    let kill = r.point("m.kill").unwrap();
    for _ in 0..3 {
        assert!(kill.enter().is_err());
    }
    // One call in flight at a concurrency limit of 1: the second is downgraded.
    r.set_policy(
        "m.conc",
        Policy::builder().max_concurrency(1).build().unwrap(),
    )
    .unwrap();
    let conc = r.point("m.conc").unwrap();
    let held = conc.enter().unwrap();
    assert!(conc.enter().is_err());
    // Two calls slower than a 1 µs threshold.
    r.set_policy(
        "m.slow",
        Policy::builder()
            .timeouts(Duration::from_micros(1), 100)
            .build()
            .unwrap(),
    )
    .unwrap();
    let slow = r.point("m.slow").unwrap();
    for _ in 0..2 {
        let permit = slow.enter().unwrap();
        std::thread::sleep(Duration::from_millis(2));
        permit.finish(false);
    }
    // A name that needs escaping in a label value.
    let odd = r.point(r#"m."quoted" \ name"#).unwrap();
    odd.enter().unwrap().finish(false);

    let (addr, server) = start_server(1);
    let (content_type, body) = scrape(addr);
    server.join().unwrap();
    assert_eq!(content_type, metrics::CONTENT_TYPE);
    let scrape = parse(&body);

    let names = ["m.ok", "m.kill", "m.conc", "m.slow", r#"m."quoted" \ name"#];
    for name in names {
        assert_point(&scrape, &r.stats(name).unwrap());
    }
    // The known traffic, spelled out once, so the test does not only compare the
    // exposition with itself.
    let kill = [("point", "m.kill")];
    assert_eq!(value(&scrape, "resilience_visits_total", &kill), 3.0);
    assert_eq!(
        value(
            &scrape,
            "resilience_downgrades_total",
            &[("point", "m.kill"), ("reason", "visits")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "resilience_downgrades_total",
            &[("point", "m.kill"), ("reason", "delay")]
        ),
        2.0
    );
    assert_eq!(value(&scrape, "resilience_in_delay", &kill), 1.0);
    assert_eq!(
        value(&scrape, "resilience_exceptions_total", &[("point", "m.ok")]),
        2.0
    );
    assert_eq!(
        value(&scrape, "resilience_concurrency", &[("point", "m.conc")]),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "resilience_downgrades_total",
            &[("point", "m.conc"), ("reason", "concurrency")]
        ),
        1.0
    );
    assert_eq!(
        value(&scrape, "resilience_timeouts_total", &[("point", "m.slow")]),
        2.0
    );
    assert_eq!(
        value(
            &scrape,
            "resilience_visits_total",
            &[("point", r#"m.\"quoted\" \\ name"#)]
        ),
        1.0
    );
    // Types and help come through.
    assert!(matches!(
        scrape
            .samples
            .iter()
            .find(|s| s.metric == "resilience_concurrency")
            .unwrap()
            .value,
        Value::Gauge(_)
    ));
    assert!(scrape.docs.contains_key("resilience_visits_total"));

    // Releasing the call shows on the next scrape.
    drop(held);
    let scrape2 = parse(&metrics::render());
    assert_eq!(
        value(&scrape2, "resilience_concurrency", &[("point", "m.conc")]),
        0.0
    );
}

#[test]
fn openmetrics_output_is_terminated_and_typed() {
    registry()
        .point("m.om")
        .unwrap()
        .enter()
        .unwrap()
        .finish(false);
    let text = metrics::render_openmetrics();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE resilience_visits counter"), "{text}");
    assert!(
        text.contains(r#"resilience_visits_total{point="m.om"} "#),
        "{text}"
    );
}

#[test]
fn breaker_state_and_window_are_exported() {
    use resilience_runtime::breaker::ClassicConfig;
    use resilience_runtime::BreakerPolicy;
    let config = ClassicConfig::builder()
        .consecutive_failures(2)
        .build()
        .unwrap();
    registry()
        .set_breaker("metrics.breaker", BreakerPolicy::Classic(config))
        .unwrap();
    let p = registry().point("metrics.breaker").unwrap();
    p.enter().unwrap().finish(false);
    p.enter().unwrap().finish(true);
    p.enter().unwrap().finish(true); // opens
    assert!(p.enter().is_err());
    let scrape = parse(&resilience_runtime::metrics::render());
    let state = |s: &str| {
        value(
            &scrape,
            "resilience_breaker_state",
            &[
                ("point", "metrics.breaker"),
                ("kind", "classic"),
                ("state", s),
            ],
        )
    };
    assert_eq!(
        (state("open"), state("closed"), state("half_open")),
        (1.0, 0.0, 0.0)
    );
    assert_eq!(
        value(
            &scrape,
            "resilience_breaker_transitions_total",
            &[("point", "metrics.breaker")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "resilience_downgrades_total",
            &[("point", "metrics.breaker"), ("reason", "breaker_open")]
        ),
        1.0
    );
}

/// The cap on exported points: an open breaker and a delay are always shown, then the
/// busiest; the rest are summed exactly into the `omitted` series, and counted.
#[test]
fn exported_points_are_capped_and_the_rest_summed() {
    use resilience_runtime::breaker::ClassicConfig;
    use resilience_runtime::metrics::PointsCollector;
    use resilience_runtime::{BreakerPolicy, Clock, Registry};
    let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    // Twelve points with 1..=12 calls, one exception each.
    for i in 1..=12u64 {
        let p = r.point(&format!("cap.{i:02}")).unwrap();
        for n in 0..i {
            p.enter().unwrap().finish(n == 0);
        }
    }
    // A quiet point whose breaker is open.
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .build()
        .unwrap();
    r.set_breaker("cap.open", BreakerPolicy::Classic(config))
        .unwrap();
    r.point("cap.open").unwrap().enter().unwrap().finish(true);
    let mut m = prometheus_client::registry::Registry::default();
    m.register_collector(Box::new(PointsCollector::new(r).max_points(3)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &m).unwrap();
    let scrape = parse(&text);
    let shown: std::collections::BTreeSet<String> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "resilience_visits_total")
        .map(|s| s.labels.get("point").unwrap().to_owned())
        .collect();
    let expected: std::collections::BTreeSet<String> = ["cap.open", "cap.12", "cap.11", "other"]
        .map(String::from)
        .into();
    assert_eq!(shown, expected, "{text}");
    let other = [("point", "other"), ("omitted", "true")];
    // cap.01 ..= cap.10: 55 calls, 10 exceptions.
    assert_eq!(value(&scrape, "resilience_visits_total", &other), 55.0);
    assert_eq!(value(&scrape, "resilience_passes_total", &other), 55.0);
    assert_eq!(value(&scrape, "resilience_exceptions_total", &other), 10.0);
    assert_eq!(
        value(&scrape, "resilience_metrics_points_omitted", &[]),
        10.0
    );
    assert_eq!(
        value(&scrape, "resilience_visits_total", &[("point", "cap.12")]),
        12.0
    );
    // Breakers of shown points only.
    assert!(
        text.contains(
            r#"resilience_breaker_state{point="cap.open",kind="classic",state="open"} 1"#
        ),
        "{text}"
    );
    // Under the cap, nothing is summed.
    let mut m = prometheus_client::registry::Registry::default();
    m.register_collector(Box::new(PointsCollector::new(r).max_points(100)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &m).unwrap();
    assert!(!text.contains(r#"point="other",omitted="true"}"#));
    assert!(text.contains("resilience_metrics_points_omitted 0"));
}

/// Queue series exist for a point whose calls waited or found the queue full, with its
/// statistics, and not for a point without a queue.
#[test]
fn queues_are_exported_for_points_that_have_one() {
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(1, Duration::from_millis(1))
        .build()
        .unwrap();
    registry().set_policy("metrics.queue", policy).unwrap();
    let point = registry().point("metrics.queue").unwrap();
    let held = point.enter().unwrap();
    // Times out after 1 ms on the system clock.
    assert_eq!(point.enter().unwrap_err().reason(), Reason::QueueTimeout);
    held.finish(false);
    registry()
        .point("metrics.no_queue")
        .unwrap()
        .enter()
        .unwrap()
        .finish(false);
    let scrape = parse(&metrics::render());
    let q = registry().stats("metrics.queue").unwrap().queue.unwrap();
    let point = [("point", "metrics.queue")];
    assert_eq!(
        value(&scrape, "resilience_queue_timed_out_total", &point),
        1.0
    );
    assert_eq!(
        value(&scrape, "resilience_queue_admitted_total", &point),
        0.0
    );
    assert_eq!(value(&scrape, "resilience_queue_waiting", &point), 0.0);
    assert_eq!(value(&scrape, "resilience_queue_peak_waiting", &point), 1.0);
    assert!(
        (value(&scrape, "resilience_queue_wait_seconds_total", &point)
            - q.wait.as_nanos() as f64 / 1e9)
            .abs()
            < 1e-9
    );
    assert!(
        !scrape
            .samples
            .iter()
            .any(|s| s.metric.starts_with("resilience_queue_")
                && s.labels.get("point") == Some("metrics.no_queue")),
        "no queue, no series"
    );
}

#[test]
fn the_busiest_keys_are_exported_and_no_more() {
    use resilience_runtime::keys::{KeyPolicy, STATS_HOT_KEYS};
    let keys = KeyPolicy::builder()
        .limit(3, Duration::from_secs(3600))
        .max_keys(64)
        .build()
        .unwrap();
    registry()
        .set_policy(
            "metrics.keys",
            Policy::builder().keys(keys).build().unwrap(),
        )
        .unwrap();
    let point = registry().point("metrics.keys").unwrap();
    // 30 keys; key "k-0" called 9 times (3 admitted), the others once.
    for _ in 0..9 {
        let _ = point.enter_key("k-0").map(|p| p.finish(false));
    }
    for i in 1..30 {
        point
            .enter_key(format!("k-{i}").as_str())
            .unwrap()
            .finish(false);
    }
    registry()
        .set_policy("metrics.keys.none", Policy::observe())
        .unwrap();
    let plain = registry().point("metrics.keys.none").unwrap();
    plain.enter_key("k-0").unwrap().finish(false);
    let quote = "a\"b";
    point.enter_key(quote).unwrap().finish(false);
    point.enter_key(quote).unwrap().finish(false);
    let scrape = parse(&metrics::render());
    fn of(key: &str) -> [(&str, &str); 2] {
        [("point", "metrics.keys"), ("key", key)]
    }
    assert_eq!(
        value(&scrape, "resilience_hot_key_passes_total", &of("k-0")),
        3.0
    );
    assert_eq!(
        value(&scrape, "resilience_hot_key_refused_total", &of("k-0")),
        6.0
    );
    assert_eq!(
        value(
            &scrape,
            "resilience_hot_key_passes_total",
            &of(&escaped(quote))
        ),
        2.0
    );
    let series = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "resilience_hot_key_passes_total")
        .filter(|s| s.labels.get("point") == Some("metrics.keys"))
        .count();
    assert_eq!(
        series, STATS_HOT_KEYS,
        "the busiest keys only, never every key"
    );
    let point_label = [("point", "metrics.keys")];
    assert_eq!(
        value(&scrape, "resilience_keys_tracked", &point_label),
        31.0
    );
    assert_eq!(
        value(&scrape, "resilience_keys_evictions_total", &point_label),
        0.0
    );
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.labels.get("point") == Some("metrics.keys.none")));
    assert!(
        !scrape
            .samples
            .iter()
            .any(|s| (s.metric.starts_with("resilience_keys_")
                || s.metric.starts_with("resilience_hot_key"))
                && s.labels.get("point") == Some("metrics.keys.none")),
        "no keys section, no series"
    );
}
