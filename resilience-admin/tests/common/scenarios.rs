//! Storage scenarios run against every store (SQLite in `storage.rs`, PostgreSQL in
//! `postgres.rs`), over the real HTTP API.

use super::*;
use resilience_admin::server::{open_store, AdminConfig};
use resilience_runtime::{Clock, ManualClock};
use serde_json::json;

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

fn manual(storage: StorageConfig) -> (AdminConfig, ManualClock) {
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    (c, manual)
}

fn now_ms(manual: &ManualClock) -> i64 {
    let c = Clock::manual(manual);
    (c.wall_nanos(c.now()) / 1_000_000) as i64
}

fn hb(instance: &str, cycle: i64, visits: u64, downgrades: u64) -> serde_json::Value {
    json!({"app_group": "shop", "app": "orders", "instance": instance, "cycle_start_ms": cycle,
           "points": [{"name": "order.create", "visits": visits, "downgrades": downgrades,
                       "peak_concurrency": 2, "downgrades_by_reason": {"visits": downgrades}}],
           "declared_points": ["order.create", "order.idle"]})
}

/// Two instances, a duplicate, a second cycle: sums per cycle, declared points, apps.
pub fn aggregation(storage: StorageConfig) {
    let (c, manual) = manual(storage);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    for (i, v, d) in [("a", 10, 2), ("b", 5, 1)] {
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb(i, cycle, v, d));
        assert_eq!(r.json()["result"], "stored", "{}", r.text());
    }
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("a", cycle, 10, 2));
    assert_eq!(r.json()["result"], "duplicate");
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &hb("a", cycle - 10_000, 1, 0),
    );
    assert_eq!(r.json()["result"], "stored");
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={}&to={}",
            cycle - 10_000,
            cycle + 10_000
        ),
        None,
    )
    .json();
    let rows = s["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{s}");
    assert_eq!(
        (rows[0]["visits"].clone(), rows[0]["instances"].clone()),
        (json!(1), json!(1))
    );
    let row = &rows[1];
    assert_eq!(
        (
            row["visits"].clone(),
            row["passes"].clone(),
            row["downgrades"].clone(),
            row["peak_concurrency"].clone(),
            row["instances"].clone()
        ),
        (json!(15), json!(12), json!(3), json!(4), json!(2))
    );
    assert_eq!(row["downgrades_by_reason"], json!({"visits": 3}));
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    assert_eq!(points["points"][1]["name"], "order.idle");
    assert_eq!(points["points"][1]["declared"], true);
    assert!(points["points"][1]["last_cycle"].is_null());
    assert_eq!(points["points"][0]["last_cycle"]["visits"], 15);
    let apps = get(addr, "/api/v1/apps", None).json();
    assert_eq!(
        apps["apps"],
        json!([{"group": "shop", "name": "orders", "policy_version": 0,
                                     "last_seen_ms": now_ms(&manual), "instances": 2}])
    );
}

/// Versions, stats and duplicate detection survive a restart; numbering continues.
pub fn restart(storage: StorageConfig) {
    let (c, manual) = manual(storage);
    let cycle = last_closed_cycle(now_ms(&manual));
    let server = start(c.clone());
    let addr = server.addr();
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("a", cycle, 7, 1)).status,
        200
    );
    for (base, v) in [(0, 5), (1, 6)] {
        let r = put_json(
            addr,
            POLICY,
            Some(ADMIN),
            &json!({"base_version": base, "author": format!("u{base}"),
            "policy": {"points": {"order.create": {"max_visits": v}}}}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let history = get(addr, &format!("{POLICY}/versions"), None).json();
    server.stop();
    let server = start(c);
    let addr = server.addr();
    assert_eq!(
        get(addr, &format!("{POLICY}/versions"), None).json(),
        history
    );
    assert_eq!(
        get(addr, POLICY, None).json()["policy"]["points"]["order.create"]["max_visits"],
        6
    );
    assert_eq!(
        get(addr, "/api/v1/apps/shop/orders/stats", None).json()["rows"][0]["visits"],
        7
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("a", cycle, 7, 1)).json()["result"],
        "duplicate"
    );
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 2, "author": "x", "policy": {"points": {}}}),
    );
    assert_eq!(r.json()["version"], 3);
}

/// A stale base is refused with 409; a restore makes a new version equal to the old.
pub fn conflict_and_restore(storage: StorageConfig) {
    let (c, _manual) = manual(storage);
    let server = start(c);
    let addr = server.addr();
    let v1 = json!({"points": {"order.create": {"max_concurrency": 3}}});
    assert_eq!(
        put_json(
            addr,
            POLICY,
            Some(ADMIN),
            &json!({"base_version": 0, "author": "a", "policy": v1})
        )
        .status,
        200
    );
    assert_eq!(
        put_json(
            addr,
            POLICY,
            Some(ADMIN),
            &json!({"base_version": 1, "author": "b", "policy": {"points": {}}})
        )
        .status,
        200
    );
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 1, "author": "c", "policy": {"points": {}}}),
    );
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"]["current_version"], 2);
    let r = post_json(
        addr,
        &format!("{POLICY}/versions/1/restore"),
        Some(ADMIN),
        &json!({"base_version": 2, "author": "d"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (
            r.json()["version"].clone(),
            r.json()["restored_from"].clone()
        ),
        (json!(3), json!(1))
    );
    assert_eq!(get(addr, POLICY, None).json()["policy"], v1);
    let history = get(addr, &format!("{POLICY}/versions"), None).json();
    let authors: Vec<_> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["author"].clone())
        .collect();
    assert_eq!(authors, [json!("d"), json!("b"), json!("a")]);
}

/// The store's retention: cycles before the limit go, later ones stay.
pub fn prune(storage: StorageConfig) {
    use resilience_admin::model::{AppKey, Heartbeat, PointCycle, Protocol};
    let store = open_store(&storage).unwrap();
    let cycle = |k: i64| 1_767_225_600_000 + k * 10_000;
    for k in 0..4 {
        let h = Heartbeat {
            app: AppKey::new("g", "a"),
            instance: "i".into(),
            host: String::new(),
            ip: "127.0.0.1".into(),
            protocol: Protocol::Json,
            cycle_start_ms: cycle(k),
            points: vec![PointCycle {
                point: "p".into(),
                visits: 1,
                passes: 1,
                ..PointCycle::default()
            }],
            known_points: vec![],
            declared_points: vec![],
            policy_version: None,
        };
        store.record_heartbeat(&h, cycle(k)).unwrap();
    }
    assert_eq!(store.prune(cycle(2)).unwrap(), 2);
    let left = store
        .stats(&AppKey::new("g", "a"), None, 0, i64::MAX, 100)
        .unwrap();
    assert_eq!(
        left.iter().map(|r| r.cycle_start_ms).collect::<Vec<_>>(),
        [cycle(2), cycle(3)]
    );
    assert_eq!(store.prune(cycle(2)).unwrap(), 0);
}
