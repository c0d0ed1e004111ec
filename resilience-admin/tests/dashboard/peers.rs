//! Breakers that know their peers in real Chromium: three real instances (each its
//! own registry and heartbeat client) pull from the console; two open a point's
//! breaker by their own rules, the third follows by quorum. The points list shows the
//! point's breakers across the fleet exactly as the API counts them.

use super::*;
use crate::common::peers::{breaker, Instance};
use resilience_runtime::{BreakerState, ManualClock};

#[test]
fn the_points_list_shows_each_breaker_across_the_fleet() {
    let manual = ManualClock::new();
    let mut c = config(StorageConfig::Memory);
    c.clock = Clock::manual(&manual);
    let server = start(c);
    let addr = server.addr();
    let r = put_json(
        addr,
        "/api/v1/apps/shop/orders/policy",
        Some(ADMIN),
        &json!({"base_version": 0, "author": "ops", "policy": {"points": {
            "fleet.pay": {"breaker": breaker("open")}}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let fleet: Vec<Instance> = (1..=3)
        .map(|i| Instance::new(&server.url(), &format!("dom-{i}"), &manual))
        .collect();
    for i in &fleet {
        i.pull();
    }
    fleet[0].trip("fleet.pay");
    fleet[1].trip("fleet.pay");
    for i in &fleet {
        i.pull();
    }
    assert_eq!(fleet[2].state("fleet.pay"), BreakerState::Open);
    // Its next pull tells the console that the quorum opened it.
    fleet[2].pull();

    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    let api = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fleet.pay")
        .unwrap_or_else(|| panic!("no fleet.pay: {points}"))["fleet"]
        .clone();
    assert_eq!(
        api,
        json!({"open": 2, "half_open": 0, "by_quorum": 1, "instances": 3})
    );

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    let css = "#points tr[data-point=\"fleet.pay\"] td.breaker span.fleet";
    let shown = browser.wait(
        &format!(
            "(() => {{ const e = document.querySelector('{css}'); \
             return e && [e.textContent, e.dataset.open, e.dataset.halfOpen, \
                          e.dataset.byQuorum, e.dataset.instances]; }})()"
        ),
        "the fleet line of fleet.pay",
    );
    let n = |key: &str| api[key].to_string();
    assert_eq!(
        shown,
        json!([
            "open on 2 of 3 instances, 1 by quorum",
            n("open"),
            n("half_open"),
            n("by_quorum"),
            n("instances")
        ])
    );
}
