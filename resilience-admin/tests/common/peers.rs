//! Breakers that know their peers: several instances (registries of their own, each
//! with its own heartbeat client) against one real console over HTTP, run on SQLite
//! (`tests/peers.rs`) and PostgreSQL (`tests/postgres.rs`).
//!
//! The instances and the console share a manual clock, so open waits elapse when the
//! test says; every pull is a real request, made when the test says (the background
//! thread's pull period is the time between two of them).

use super::*;
use resilience_admin::server::StorageConfig;
use resilience_runtime::breaker::FleetCount;
use resilience_runtime::heartbeat::{HeartbeatClient, HeartbeatConfig, PullOutcome};
use resilience_runtime::{BreakerState, Clock, ManualClock, Registry};
use serde_json::json;
use std::time::Duration;

const POLICY: &str = "/api/v1/apps/shop/orders/policy";
const POINTS: &str = "/api/v1/apps/shop/orders/points";

/// One instance: its registry and its heartbeat client.
pub struct Instance {
    registry: &'static Registry,
    client: HeartbeatClient,
}

impl Instance {
    pub fn new(url: &str, id: &str, manual: &ManualClock) -> Instance {
        let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(manual))));
        let config = HeartbeatConfig::builder("shop", "orders", url)
            .token(APP)
            .instance(id)
            .pull_period(Duration::from_secs(1))
            .build()
            .unwrap();
        Instance {
            registry,
            client: HeartbeatClient::new(config, registry),
        }
    }

    pub fn state(&self, point: &str) -> BreakerState {
        let stats = self.registry.point(point).unwrap().stats();
        stats.breaker.expect("the point has a breaker").state
    }

    /// Calls that fail until the point's own breaker opens (two in a row).
    pub fn trip(&self, point: &str) {
        let p = self.registry.point(point).unwrap();
        for _ in 0..2 {
            p.enter().expect("closed: the call runs").finish(true);
        }
        assert_eq!(self.state(point), BreakerState::Open, "{point} tripped");
    }

    /// One call that succeeds, if the breaker admits it.
    pub fn succeed(&self, point: &str) -> bool {
        let p = self.registry.point(point).unwrap();
        p.enter().map(|permit| permit.finish(false)).is_ok()
    }

    pub fn pull(&self) {
        self.client.pull_now().expect("the console answers");
    }

    pub fn count(&self, point: &str) -> Option<FleetCount> {
        self.client.fleet().get(point).copied()
    }
}

/// A classic breaker that opens after two failures in a row, waits 2 s, and closes
/// after one good probe; with a quorum of two.
pub fn breaker(action: &str) -> serde_json::Value {
    json!({"algorithm": "classic", "consecutive_failures": 2, "half_open_probes": 1,
           "open_wait": {"base": "2s"}, "quorum": {"open_at": 2, "action": action}})
}

pub fn breakers_know_their_peers(storage: StorageConfig) {
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    let server = start(c);
    let url = server.url();
    // A bad quorum is refused by the console, naming the field.
    let bad = put_json(
        server.addr(),
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "ops", "policy": {"points": {"pay": {"breaker":
            {"algorithm": "classic", "quorum": {"open_at": 1}}}}}}),
    );
    assert_eq!(bad.status, 422, "{}", bad.text());
    assert!(bad.text().contains("quorum.open_at"), "{}", bad.text());
    let edited = put_json(
        server.addr(),
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "ops", "policy": {"points": {
            "pay": {"breaker": breaker("open")},
            "stock": {"breaker": breaker("half_open")}}}}),
    );
    assert_eq!(edited.status, 200, "{}", edited.text());
    let fleet: Vec<Instance> = (1..=3)
        .map(|i| Instance::new(&url, &format!("i-{i}"), &manual))
        .collect();
    for i in &fleet {
        assert!(matches!(
            i.client.pull_now().unwrap(),
            PullOutcome::Applied { version: 1, .. }
        ));
        assert_eq!(i.state("pay"), BreakerState::Closed);
    }
    // The pulls that applied the policy carried no breaker yet; this one does.
    for i in &fleet {
        i.pull();
    }
    assert_eq!(fleet[2].count("pay"), Some(FleetCount::new(0, 3)));

    // One instance open: the others stay closed, pull after pull.
    fleet[0].trip("pay");
    fleet[0].trip("stock");
    for _ in 0..2 {
        for i in &fleet {
            i.pull();
        }
    }
    assert_eq!(fleet[2].count("pay"), Some(FleetCount::new(1, 3)));
    assert_eq!(fleet[1].state("pay"), BreakerState::Closed);
    assert_eq!(fleet[2].state("pay"), BreakerState::Closed);
    assert_eq!(fleet[2].client.status().quorum_moves, 0);

    // A second one opens by its own rules: the third follows at its next pull, before
    // its own window has seen a single failure.
    fleet[1].trip("pay");
    fleet[1].trip("stock");
    fleet[1].pull();
    assert_eq!(fleet[2].state("pay"), BreakerState::Closed);
    fleet[2].pull();
    assert_eq!(fleet[2].count("pay"), Some(FleetCount::new(2, 3)));
    assert_eq!(fleet[2].state("pay"), BreakerState::Open);
    assert_eq!(fleet[2].state("stock"), BreakerState::HalfOpen);
    assert_eq!(fleet[2].client.status().quorum_moves, 2);
    assert!(
        !fleet[2].succeed("pay"),
        "opened by the quorum: calls are refused"
    );
    // The instances that opened by themselves were not moved.
    assert_eq!(fleet[0].client.status().quorum_moves, 0);

    // The half-open one probes: a good probe closes it by its own rules.
    assert!(fleet[2].succeed("stock"));
    assert_eq!(fleet[2].state("stock"), BreakerState::Closed);

    // The console counts the quorum's breaker apart: it does not hold the quorum up.
    fleet[2].pull();
    let points = get(server.addr(), POINTS, Some(ADMIN)).json();
    let pay = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "pay")
        .expect("pay is listed")
        .clone();
    assert_eq!(
        pay["fleet"],
        json!({"open": 2, "half_open": 0, "by_quorum": 1, "instances": 3}),
        "{pay}"
    );

    // The quorum clears: the two recover by their own rules after the open wait...
    manual.advance(Duration::from_secs(2));
    for i in &fleet[..2] {
        assert!(i.succeed("pay"), "the probe runs");
        assert!(i.succeed("stock"), "the probe runs");
        assert_eq!(i.state("pay"), BreakerState::Closed);
        i.pull();
    }
    // ...and the third is not closed by the count: it too closes by its own rules.
    fleet[2].pull();
    assert_eq!(fleet[2].count("pay"), Some(FleetCount::new(0, 3)));
    assert_eq!(fleet[2].state("pay"), BreakerState::Open);
    assert!(
        fleet[2].succeed("pay"),
        "its open wait elapsed: the probe runs"
    );
    assert_eq!(fleet[2].state("pay"), BreakerState::Closed);
    fleet[2].pull();
    assert_eq!(fleet[2].state("pay"), BreakerState::Closed);

    // The console goes away with the quorum reached again: local rules only.
    let late = Instance::new(&url, "i-4", &manual);
    late.pull();
    late.pull();
    assert_eq!(late.state("pay"), BreakerState::Closed);
    fleet[0].trip("pay");
    fleet[1].trip("pay");
    fleet[0].pull();
    fleet[1].pull();
    server.stop();
    for i in [&fleet[2], &late] {
        assert!(i.client.pull_now().is_err(), "the console is gone");
        assert_eq!(i.client.fleet(), Default::default(), "no count is fresh");
        assert_eq!(i.state("pay"), BreakerState::Closed);
    }
    // The breaker still judges its own calls.
    late.trip("pay");
    assert_eq!(late.client.status().quorum_moves, 0);
}
