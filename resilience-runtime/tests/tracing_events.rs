//! With the `tracing` feature, downgrades and breaker state changes are `tracing`
//! events with the point and the reason as fields.

use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::{BreakerPolicy, Clock, ManualClock, Policy, Registry};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records every event's fields as `name=value` strings.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Vec<String>>>>);

struct Fields<'a>(&'a mut Vec<String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{}={}", field.name(), value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={:?}", field.name(), value));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(fields);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn downgrades_and_breaker_changes_are_traced() {
    let capture = Capture::default();
    let events = Arc::clone(&capture.0);
    tracing::subscriber::with_default(capture, || {
        let clock = ManualClock::new();
        let reg: &'static Registry =
            Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
        reg.set_policy("traced", Policy::builder().max_visits(0).build().unwrap())
            .unwrap();
        let _ = reg.point("traced").unwrap().enter();
        let config = ClassicConfig::builder()
            .consecutive_failures(1)
            .build()
            .unwrap();
        reg.set_breaker("traced.breaker", BreakerPolicy::Classic(config))
            .unwrap();
        reg.point("traced.breaker")
            .unwrap()
            .enter()
            .unwrap()
            .finish(true);
    });
    let events = events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|f| f.contains(&"point=traced".to_owned())
                && f.contains(&"reason=visits".to_owned())),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|f| f.contains(&"point=traced.breaker".to_owned())
                && f.contains(&"to=open".to_owned())),
        "{events:?}"
    );
}

/// A heartbeat client whose console does not answer says so at once, with the cause,
/// and then not again for a minute (its status keeps the last error all along).
#[cfg(feature = "heartbeat")]
#[test]
fn a_failing_heartbeat_is_logged_once_with_its_cause() {
    use resilience_runtime::heartbeat::{HeartbeatClient, HeartbeatConfig};
    // A port nothing listens on: the connection is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let capture = Capture::default();
    let events = Arc::clone(&capture.0);
    let client = tracing::subscriber::with_default(capture, || {
        let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
        let config = HeartbeatConfig::builder("group", "logged-app", &addr.to_string())
            .build()
            .unwrap();
        let client = HeartbeatClient::new(config, reg);
        for _ in 0..3 {
            assert!(client.pull_now().is_err());
        }
        client
    });
    let events = events.lock().unwrap();
    let failures: Vec<_> = events
        .iter()
        .filter(|f| f.contains(&"request=pull".to_owned()))
        .collect();
    assert_eq!(failures.len(), 1, "the first failure only: {events:?}");
    let fields = failures[0];
    assert!(fields.contains(&"app=logged-app".to_owned()), "{fields:?}");
    assert!(
        fields
            .iter()
            .any(|f| f.starts_with("cause=") && f.contains("cannot reach")),
        "the cause is in the message: {fields:?}"
    );
    let status = client.status();
    assert_eq!(status.pull_failures, 3);
    assert!(status.last_pull_error.is_some());
}
