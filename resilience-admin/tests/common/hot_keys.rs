//! The hot keys' storage scenarios, run against every store (SQLite in `storage.rs`,
//! PostgreSQL in `postgres.rs`), over the real HTTP API.

use super::scenarios::{manual, now_ms};
use super::*;
use resilience_admin::server::open_store;
use serde_json::json;

fn keys_hb(instance: &str, cycle: i64, keys: serde_json::Value) -> serde_json::Value {
    let mut point = json!({"name": "order.create", "visits": 3});
    if !keys.is_null() {
        point["hot_keys"] = keys;
        point["key_table"] = json!({"tracked": 2, "untracked_passes": 1,
                                    "untracked_refused": 0, "evictions": 1});
    }
    json!({"app_group": "shop", "app": "orders", "instance": instance, "cycle_start_ms": cycle,
           "points": [point]})
}

/// The points list's entry of `order.create`.
fn keys_of(addr: std::net::SocketAddr) -> serde_json::Value {
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "order.create")
        .cloned()
        .unwrap_or_else(|| panic!("{points}"))
}

/// Each instance's latest hot keys of a point: stored (merged over the instances in
/// the points list), replaced by a newer cycle's, not undone by a late retry, kept
/// across a restart, gone when the instance reports the point without them, and
/// forgotten with the retention. SDS's protocol never has any.
pub fn hot_keys(storage: StorageConfig) {
    let (c, manual) = manual(storage.clone());
    let cycle = last_closed_cycle(now_ms(&manual));
    let key = |k: &str, passes: u64, refused: u64, overridden: bool| json!({"key": k, "passes": passes, "refused": refused, "overridden": overridden});
    let first = keys_hb(
        "a",
        cycle,
        json!([key("vip-42", 9, 1, true), key("bob", 2, 0, false)]),
    );
    {
        let server = start(c.clone());
        let addr = server.addr();
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &first);
        assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
        let second = keys_hb("b", cycle, json!([key("bob", 5, 5, false)]));
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &second);
        assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
        server.stop();
    }
    // Across a restart, merged over both instances.
    let server = start(c.clone());
    let addr = server.addr();
    let p = keys_of(addr);
    assert_eq!(
        p["hot_keys"],
        json!([key("bob", 7, 5, false), key("vip-42", 9, 1, true)]),
        "{p}"
    );
    assert_eq!(
        p["key_table"],
        json!({"tracked": 4, "untracked_passes": 2, "untracked_refused": 0, "evictions": 2})
    );
    assert_eq!(p["hot_keys_instances"], 2);
    let app = resilience_admin::model::AppKey::new("shop", "orders");
    let store = open_store(&storage).unwrap();
    let rows = store.hot_keys(&app).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| {
                (
                    r.point.as_str(),
                    r.instance.as_str(),
                    r.keys.hot_keys.len(),
                    r.cycle_start_ms,
                )
            })
            .collect::<Vec<_>>(),
        [
            ("order.create", "a", 2, cycle),
            ("order.create", "b", 1, cycle)
        ]
    );
    drop(store);
    // A newer cycle replaces the instance's keys (no history).
    manual.advance(std::time::Duration::from_secs(10));
    let next = keys_hb("a", cycle + 10_000, json!([key("carol", 1, 0, false)]));
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &next).status,
        200
    );
    assert_eq!(
        keys_of(addr)["hot_keys"],
        json!([key("bob", 5, 5, false), key("carol", 1, 0, false)])
    );
    // A late retry of the older cycle does not undo it.
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &first);
    assert_eq!(r.json()["result"], "duplicate");
    let late = keys_hb("a", cycle - 10_000, json!([key("old", 1, 0, false)]));
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &late);
    assert_eq!(r.json()["result"], "stored");
    let p = keys_of(addr);
    assert_eq!(
        p["hot_keys"],
        json!([key("bob", 5, 5, false), key("carol", 1, 0, false)])
    );
    assert_eq!(p["hot_keys_cycle_start_ms"], cycle + 10_000);
    // SDS's protocol carries none and removes none.
    let sds = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "b",
        "statisticsCycleTime": cycle + 20_000,
        "pointInfoMap": {"order.create": {"visitNum": 1, "hot_keys": [key("x", 1, 0, false)]}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&sds.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(keys_of(addr)["hot_keys_instances"], 2);
    // The point reported without them: that instance's keys are gone.
    let none = keys_hb("b", cycle + 10_000, serde_json::Value::Null);
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &none).status,
        200
    );
    let p = keys_of(addr);
    assert_eq!(p["hot_keys"], json!([key("carol", 1, 0, false)]), "{p}");
    assert_eq!(p["hot_keys_instances"], 1);
    server.stop();
    // The retention forgets reports received before its limit.
    let store = open_store(&storage).unwrap();
    store.prune(now_ms(&manual) + 1).unwrap();
    assert!(store.hot_keys(&app).unwrap().is_empty());
}

/// A database of schema version 8 (before the hot keys) holding a cycle at `cycle` of
/// shop/orders' `order.create` (7 visits): the cycle is kept, and a new heartbeat
/// stores its hot keys.
pub fn migrated_v8(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    assert_eq!(keys_of(addr)["last_cycle"]["visits"], 7);
    assert!(keys_of(addr).get("hot_keys").is_none());
    let body = keys_hb(
        "new-1",
        cycle + 10_000,
        json!([{"key": "vip-42", "passes": 3, "refused": 1, "overridden": true}]),
    );
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let p = keys_of(addr);
    assert_eq!(
        p["hot_keys"],
        json!([{"key": "vip-42", "passes": 3, "refused": 1, "overridden": true}]),
        "{p}"
    );
    assert_eq!(p["key_table"]["tracked"], 2);
}

/// The points list's entry of a point.
fn point_of(addr: std::net::SocketAddr, name: &str) -> serde_json::Value {
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {points}"))
}

fn key(k: &str, passes: u64) -> serde_json::Value {
    json!({"key": k, "passes": passes, "refused": 0, "overridden": false})
}

/// A heartbeat of shop/orders reporting each `(point, keys)` (without keys when
/// `keys` is null).
fn points_hb(
    instance: &str,
    cycle: i64,
    points: &[(&str, serde_json::Value)],
) -> serde_json::Value {
    let points: Vec<serde_json::Value> = points
        .iter()
        .map(|(name, keys)| {
            let mut p = json!({"name": name, "visits": 3});
            if !keys.is_null() {
                p["hot_keys"] = keys.clone();
            }
            p
        })
        .collect();
    json!({"app_group": "shop", "app": "orders", "instance": instance, "cycle_start_ms": cycle,
           "points": points})
}

fn send(addr: std::net::SocketAddr, body: &serde_json::Value, result: &str) {
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"], result, "{}", r.text());
}

/// The hot keys of a point an instance stopped reporting (it has no traffic) are
/// stale from the instance's next cycle on: the points list leaves them out (and
/// does not merge them with the other instances' current ones) although they are
/// kept until the retention; a late retry of an older cycle does not bring them
/// back, a new report of the point does. SDS's heartbeats, which never carry keys,
/// do not make them stale.
pub fn stale_hot_keys(storage: StorageConfig) {
    let (c, manual) = manual(storage.clone());
    let cycle = last_closed_cycle(now_ms(&manual));
    let server = start(c);
    let addr = server.addr();
    let a0 = points_hb(
        "a",
        cycle,
        &[
            ("order.create", json!([key("vip", 9)])),
            ("order.idle", json!([key("x", 5)])),
        ],
    );
    send(addr, &a0, "stored");
    send(
        addr,
        &points_hb("b", cycle, &[("order.idle", json!([key("x", 1)]))]),
        "stored",
    );
    let p = point_of(addr, "order.idle");
    assert_eq!(p["hot_keys"], json!([key("x", 6)]), "{p}");
    assert_eq!(p["hot_keys_instances"], 2, "{p}");

    // Instance a's next cycle has no traffic on order.idle: only b's keys are current.
    manual.advance(std::time::Duration::from_secs(10));
    send(
        addr,
        &points_hb(
            "a",
            cycle + 10_000,
            &[("order.create", json!([key("vip", 3)]))],
        ),
        "stored",
    );
    let p = point_of(addr, "order.idle");
    assert_eq!(p["hot_keys"], json!([key("x", 1)]), "{p}");
    assert_eq!(p["hot_keys_instances"], 1, "{p}");
    assert_eq!(p["hot_keys_cycle_start_ms"], cycle, "{p}");
    assert_eq!(
        point_of(addr, "order.create")["hot_keys"],
        json!([key("vip", 3)])
    );
    // An SDS heartbeat of b (never any keys) leaves b's as they are.
    let sds = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "b",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.other": {"visitNum": 1}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&sds.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(point_of(addr, "order.idle")["hot_keys_instances"], 1);
    // Then b's next cycle has no traffic at all: none are current.
    send(addr, &points_hb("b", cycle + 10_000, &[]), "stored");
    let p = point_of(addr, "order.idle");
    assert!(p.get("hot_keys").is_none(), "{p}");
    assert!(p.get("key_table").is_none(), "{p}");
    assert!(p.get("hot_keys_instances").is_none(), "{p}");
    // A retry of a's first cycle, and a late older cycle, do not bring a's back.
    send(addr, &a0, "duplicate");
    send(
        addr,
        &points_hb(
            "a",
            cycle - 10_000,
            &[("order.idle", json!([key("old", 1)]))],
        ),
        "stored",
    );
    assert!(point_of(addr, "order.idle").get("hot_keys").is_none());

    // A new report of the point shows its keys again; order.create, which a no longer
    // reports, has none now.
    manual.advance(std::time::Duration::from_secs(10));
    send(
        addr,
        &points_hb("a", cycle + 20_000, &[("order.idle", json!([key("y", 2)]))]),
        "stored",
    );
    assert_eq!(
        point_of(addr, "order.idle")["hot_keys"],
        json!([key("y", 2)])
    );
    assert!(point_of(addr, "order.create").get("hot_keys").is_none());
    server.stop();
    let app = resilience_admin::model::AppKey::new("shop", "orders");
    let store = open_store(&storage).unwrap();
    let rows = store.hot_keys(&app).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.point.as_str(), r.instance.as_str(), r.cycle_start_ms))
            .collect::<Vec<_>>(),
        [("order.idle", "a", cycle + 20_000)]
    );
    // The retention forgets them all.
    store.prune(now_ms(&manual) + 1).unwrap();
    assert!(store.hot_keys(&app).unwrap().is_empty());
}

/// A heartbeat reporting thousands of points without keys forgets the instance's keys
/// of each of them (one statement on either store), and only the instance's: another
/// instance's keys of the same points stay, and a late retry does not bring them back.
pub fn forgotten_in_one_go(storage: StorageConfig) {
    use resilience_admin::model::{AppKey, Heartbeat, Ingested, PointCycle, PointKeys, Protocol};
    const POINTS: usize = 3_000;
    let app = AppKey::new("shop", "orders");
    let cycle = 1_767_225_600_000_i64;
    let name = |i: usize| format!("p.{i:05}");
    let hb = |instance: &str, cycle: i64, points: Vec<(String, bool)>| Heartbeat {
        app: app.clone(),
        instance: instance.into(),
        host: "h".into(),
        ip: "127.0.0.1".into(),
        protocol: Protocol::Json,
        cycle_start_ms: cycle,
        points: points
            .into_iter()
            .map(|(point, with_keys)| PointCycle {
                point,
                visits: 1,
                passes: 1,
                keys: with_keys.then(|| PointKeys {
                    hot_keys: vec![resilience_admin::model::HotKey {
                        key: "k".into(),
                        passes: 1,
                        refused: 0,
                        overridden: false,
                    }],
                    key_table: None,
                }),
                ..PointCycle::default()
            })
            .collect(),
        known_points: Vec::new(),
        declared_points: Vec::new(),
        policy_version: None,
        enforcing: None,
        client: None,
        part: 0,
        parts: 1,
    };
    let store = open_store(&storage).unwrap();
    let first = hb("a", cycle, (0..POINTS).map(|i| (name(i), true)).collect());
    assert_eq!(
        store.record_heartbeat(&first, cycle + 15_000).unwrap(),
        Ingested::Stored
    );
    let b = hb("b", cycle, (0..10).map(|i| (name(i), true)).collect());
    store.record_heartbeat(&b, cycle + 15_000).unwrap();
    assert_eq!(store.hot_keys(&app).unwrap().len(), POINTS + 10);
    // The next cycle: every point without keys, one more with.
    let mut points: Vec<(String, bool)> = (0..POINTS).map(|i| (name(i), false)).collect();
    points.push((name(POINTS), true));
    let started = std::time::Instant::now();
    store
        .record_heartbeat(&hb("a", cycle + 10_000, points), cycle + 25_000)
        .unwrap();
    println!(
        "{POINTS} points reported without keys in {:?}",
        started.elapsed()
    );
    let current = |store: &dyn resilience_admin::store::Store| -> Vec<(String, String, i64)> {
        store
            .hot_keys(&app)
            .unwrap()
            .into_iter()
            .map(|r| (r.instance, r.point, r.cycle_start_ms))
            .collect()
    };
    let mut expected: Vec<(String, String, i64)> =
        (0..10).map(|i| ("b".to_owned(), name(i), cycle)).collect();
    expected.push(("a".to_owned(), name(POINTS), cycle + 10_000));
    expected.sort_by(|x, y| (&x.1, &x.0).cmp(&(&y.1, &y.0)));
    assert_eq!(current(store.as_ref()), expected);
    // A retry of the first cycle is not counted again, and its keys are stale.
    assert_eq!(
        store.record_heartbeat(&first, cycle + 26_000).unwrap(),
        Ingested::Duplicate
    );
    assert_eq!(current(store.as_ref()), expected);
}

/// What a database of schema version 9 holds of shop/orders besides its points (the
/// app is 1; `{cycle}` stands for the cycle): instance a, which sent a heartbeat in
/// `{cycle}` with hot keys of order.idle.
pub const V9_ROWS: &str = r#"INSERT INTO instances (app_id, instance, host, ip, protocol, last_heartbeat_ms)
    VALUES (1, 'a', 'h', '127.0.0.1', 'json', {cycle});
INSERT INTO hot_keys (app_id, instance, point, keys, key_table, cycle_start_ms, received_ms)
    VALUES (1, 'a', 'order.idle', '[{"key": "old", "passes": 4, "refused": 0, "overridden": false}]',
            NULL, {cycle}, {cycle});"#;

/// A database of schema version 9 holding [`V9_ROWS`]: instance a's hot keys of
/// order.idle are shown until its next heartbeat, which does not report order.idle
/// and reports order.create's keys.
pub fn migrated_v9(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    let p = point_of(addr, "order.idle");
    assert_eq!(p["hot_keys"], json!([key("old", 4)]), "{p}");
    assert_eq!(p["hot_keys_instances"], 1, "{p}");
    send(
        addr,
        &points_hb(
            "a",
            cycle + 10_000,
            &[("order.create", json!([key("vip", 3)]))],
        ),
        "stored",
    );
    assert!(point_of(addr, "order.idle").get("hot_keys").is_none());
    assert_eq!(
        point_of(addr, "order.create")["hot_keys"],
        json!([key("vip", 3)])
    );
    server.stop();
}
