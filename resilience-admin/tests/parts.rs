//! Big cycles in parts: the runtime's heartbeat client splits a cycle of many points
//! into several bodies (`"part"`, `"parts"`), and the console stores every part, each
//! point exactly once, with the cycle's sums and the union of the lists; a retried
//! part is a duplicate of that part only. Also a cycle of the console's documented
//! limit, `MAX_POINTS_PER_HEARTBEAT`, end to end with the default limits.

mod common;

use common::*;
use resilience_admin::model::MAX_POINTS_PER_HEARTBEAT;
use resilience_admin::server::{AdminConfig, StorageConfig};
use resilience_runtime::heartbeat::{HeartbeatClient, HeartbeatConfig, Protocol, UploadOutcome};
use resilience_runtime::{Clock, ManualClock, Policy, Registry};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn setup(storage: StorageConfig) -> (AdminConfig, ManualClock) {
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    (c, manual)
}

fn now_ms(manual: &ManualClock) -> i64 {
    let c = Clock::manual(manual);
    c.unix_time(c.now()).as_millis() as i64
}

/// A registry on the manual clock that takes any number of points.
fn registry(manual: &ManualClock) -> &'static Registry {
    let r = Box::leak(Box::new(Registry::with_clock(Clock::manual(manual))));
    r.set_max_undeclared_points(u64::MAX);
    r
}

fn name(i: usize) -> String {
    format!("bulk.point-{i:05}")
}

/// `i % 7 + 1` visits of point `i`, one of them failed when `i` is even.
fn traffic(registry: &'static Registry, points: usize) -> u64 {
    let mut total = 0;
    for i in 0..points {
        let point = registry.point(&name(i)).unwrap();
        let visits = i % 7 + 1;
        for k in 0..visits {
            if let Ok(permit) = point.enter() {
                permit.finish(k == 0 && i % 2 == 0);
            }
        }
        total += visits as u64;
    }
    total
}

/// Every stored cycle row of the app between `from` and `to`, by point.
fn rows(addr: SocketAddr, from: i64, to: i64) -> BTreeMap<String, Value> {
    let stats = get(
        addr,
        &format!("/api/v1/apps/shop/orders/stats?from={from}&to={to}&limit=100000"),
        None,
    );
    assert_eq!(stats.status, 200, "{}", stats.text());
    let mut out = BTreeMap::new();
    for row in stats.json()["rows"].as_array().unwrap() {
        let point = row["point"].as_str().unwrap().to_owned();
        assert!(
            out.insert(point.clone(), row.clone()).is_none(),
            "{point} twice"
        );
    }
    out
}

/// A real heartbeat client with a small body limit uploads 1 500 points in parts;
/// 300 of them have a policy in code, so `enforcing` is split over the parts too.
fn client_parts(storage: StorageConfig) {
    const POINTS: usize = 1_500;
    let (c, manual) = setup(storage);
    let server = start(c);
    let addr = server.addr();
    let registry = registry(&manual);
    for i in (0..POINTS).step_by(5) {
        let policy = Policy::builder().max_visits(1_000).build().unwrap();
        registry.set_policy(&name(i), policy).unwrap();
    }
    let config = HeartbeatConfig::builder("shop", "orders", &server.url())
        .token(APP)
        .instance("bulk-1")
        .max_body_bytes(16 * 1024)
        .build()
        .unwrap();
    let client = HeartbeatClient::new(config, registry);
    // Traffic in a cycle of its own, after the one in which the policies were set.
    let start = now_ms(&manual);
    let next = start - start.rem_euclid(10_000) + 10_000;
    manual.advance(Duration::from_millis((next - start) as u64 + 1_000));
    let total = traffic(registry, POINTS);
    manual.advance(Duration::from_secs(13));
    let cycle = last_closed_cycle(now_ms(&manual));
    assert_eq!(cycle, next);
    let outcome = client.upload_now().unwrap();
    let UploadOutcome::Sent { points, parts, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(points, POINTS);
    assert!(parts > 5, "{parts} parts");

    let stored = rows(addr, cycle, cycle + 1);
    assert_eq!(stored.len(), POINTS, "every point stored once");
    let mut visits = 0;
    for i in 0..POINTS {
        let row = &stored[&name(i)];
        assert_eq!(row["visits"], (i % 7 + 1) as u64, "{row}");
        assert_eq!(row["exceptions"], u64::from(i % 2 == 0), "{row}");
        assert_eq!(row["instances"], 1, "{row}");
        visits += row["visits"].as_u64().unwrap();
    }
    assert_eq!(visits, total);
    let summed = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}&sum=points",
            cycle + 1
        ),
        None,
    )
    .json();
    assert_eq!(summed["rows"][0]["visits"], total, "{summed}");
    assert_eq!(summed["rows"][0]["instances"], 1);

    // The known points and every part's enforcement entries, merged.
    let list = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    let points = list["points"].as_array().unwrap();
    assert_eq!(points.len(), POINTS);
    let enforced = points
        .iter()
        .filter(|p| p["enforced_by"]["instances"] == 1)
        .count();
    assert_eq!(enforced, POINTS / 5, "entries of every part are kept");

    server.stop();
}

#[test]
fn a_client_cycle_in_parts_is_stored_whole_in_memory() {
    client_parts(StorageConfig::Memory);
}

#[test]
fn a_client_cycle_in_parts_is_stored_whole_on_sqlite() {
    let dir = TempDir::new("parts");
    client_parts(StorageConfig::Sqlite(dir.path().join("admin.db")));
}

fn part_hb(cycle: i64, part: Value, parts: Value, points: Value) -> Value {
    json!({"app_group": "shop", "app": "orders", "instance": "i-1", "cycle_start_ms": cycle,
           "part": part, "parts": parts, "points": points})
}

/// Parts by hand: each stored, a retried part is a duplicate of that part only,
/// enforcement entries of the parts of one cycle are merged and replaced by a newer
/// cycle's first part; malformed part fields are refused.
#[test]
fn parts_are_stored_once_each_and_enforcement_is_merged() {
    let (c, manual) = setup(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let point = |n: &str, v: u64| json!({"name": n, "visits": v, "passes": v});
    let entry = |n: &str| {
        json!({"name": n, "digest": "0123456789abcdef",
               "origins": {"rules": {"source": "code", "version": 1}}})
    };
    let send = |body: &Value| {
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let mut p0 = part_hb(cycle, json!(0), json!(2), json!([point("a", 3)]));
    p0["enforcing"] = json!([entry("a")]);
    let mut p1 = part_hb(cycle, json!(1), json!(2), json!([point("b", 4)]));
    p1["enforcing"] = json!([entry("b")]);
    assert_eq!(send(&p0)["result"], "stored");
    assert_eq!(send(&p1)["result"], "stored");
    let answer = send(&p1);
    assert_eq!(
        (&answer["result"], &answer["part"], &answer["parts"]),
        (&json!("duplicate"), &json!(1), &json!(2))
    );
    let stored = rows(addr, cycle, cycle + 1);
    assert_eq!(stored["a"]["visits"], 3);
    assert_eq!(stored["b"]["visits"], 4);
    let enforced = |p: &str| {
        let r = get(
            addr,
            &format!("/api/v1/apps/shop/orders/points/{p}/instances"),
            None,
        );
        r.json()["instances"].as_array().map_or(0, Vec::len)
    };
    assert_eq!((enforced("a"), enforced("b")), (1, 1));
    // The newer cycle's first part replaces the list; its other part adds to it.
    let next = cycle + 10_000;
    manual.advance(Duration::from_secs(10));
    let mut n1 = part_hb(next, json!(1), json!(2), json!([]));
    n1["enforcing"] = json!([entry("c")]);
    send(&n1);
    assert_eq!((enforced("a"), enforced("b"), enforced("c")), (0, 0, 1));
    let mut n0 = part_hb(next, json!(0), json!(2), json!([]));
    n0["enforcing"] = json!([entry("a")]);
    send(&n0);
    assert_eq!((enforced("a"), enforced("b"), enforced("c")), (1, 0, 1));
    // A late part of the older cycle changes nothing.
    let mut late = part_hb(cycle, json!(0), json!(2), json!([point("a", 3)]));
    late["enforcing"] = json!([entry("b")]);
    assert_eq!(send(&late)["result"], "duplicate");
    assert_eq!((enforced("a"), enforced("b"), enforced("c")), (1, 0, 1));

    for (part, parts, field) in [
        (json!(2), json!(2), "part"),
        (json!(-1), json!(2), "part"),
        (json!(0), json!(0), "parts"),
        (json!(0), json!(1001), "parts"),
        (json!("0"), json!(2), "part"),
        (json!(0), json!(1.5), "parts"),
        (json!(0), Value::Null, "parts"),
    ] {
        let r = post_json(
            addr,
            "/api/v1/heartbeat",
            Some(APP),
            &part_hb(next, part.clone(), parts.clone(), json!([])),
        );
        assert_eq!(r.status, 400, "{part} of {parts}: {}", r.text());
        assert_eq!(
            r.json()["error"]["problems"][0]["field"],
            field,
            "{}",
            r.text()
        );
    }
    server.stop();
}

/// A cycle of `MAX_POINTS_PER_HEARTBEAT` points goes through with the client's and
/// the console's default limits (body limits and point limit agree), in `protocol`.
fn ten_thousand_points(protocol: Protocol) -> usize {
    let points = MAX_POINTS_PER_HEARTBEAT;
    let dir = TempDir::new("tenk");
    let (c, manual) = setup(StorageConfig::Sqlite(dir.path().join("admin.db")));
    let server = start(c);
    let addr = server.addr();
    let registry = registry(&manual);
    let config = HeartbeatConfig::builder("shop", "orders", &server.url())
        .token(APP)
        .instance("big-1")
        .protocol(protocol)
        .build()
        .unwrap();
    let client = HeartbeatClient::new(config, registry);
    let total = traffic(registry, points);
    manual.advance(Duration::from_secs(14));
    let cycle = last_closed_cycle(now_ms(&manual));
    let started = Instant::now();
    let outcome = client.upload_now().unwrap();
    println!(
        "10 000-point upload ({protocol:?}): {outcome:?} in {:?}",
        started.elapsed()
    );
    let UploadOutcome::Sent {
        points: sent,
        parts,
        ..
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(sent, points);
    let stored = rows(addr, cycle - 10_000, cycle + 1);
    assert_eq!(stored.len(), points);
    let visits: u64 = stored.values().map(|r| r["visits"].as_u64().unwrap()).sum();
    assert_eq!(visits, total);
    // The pull of an instance with that many points goes through too, and brings
    // the console's policy.
    let put = put_json(
        addr,
        "/api/v1/apps/shop/orders/policy",
        Some(ADMIN),
        &json!({"base_version": 0, "author": "ops",
                "policy": {"points": {(name(7)): {"max_visits": 3}}}}),
    );
    assert_eq!(put.status, 200, "{}", put.text());
    let pulled = client.pull_now();
    assert!(pulled.is_ok(), "{pulled:?}");
    let policy = registry.point(&name(7)).unwrap().policy();
    assert_eq!(policy.map(|p| p.max_visits()), Some(Some(3)));
    let started = Instant::now();
    let list = get(addr, "/api/v1/apps/shop/orders/points", None);
    println!(
        "GET .../points of {points} points (SQLite): {:?}",
        started.elapsed()
    );
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["points"].as_array().unwrap().len(), points);
    server.stop();
    parts
}

#[test]
fn ten_thousand_points_end_to_end_with_the_default_limits() {
    assert!(ten_thousand_points(Protocol::Json) > 1);
}

/// SDS's protocol splits the same way (a part is an SDS heartbeat with its share of
/// `pointInfoMap`), and its pull's point list is cut to fit.
#[test]
fn ten_thousand_points_end_to_end_in_sds_protocol() {
    assert!(ten_thousand_points(Protocol::Sds) > 1);
}

/// A heartbeat with a malformed point stores its valid points and reports the
/// others (`rejected`, each naming its field), in both protocols; a malformed
/// envelope is still refused whole.
#[test]
fn a_partly_invalid_heartbeat_stores_its_valid_points() {
    let (c, manual) = setup(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let long = "x".repeat(257);
    let body = json!({"app_group": "shop", "app": "orders", "instance": "i-1",
        "cycle_start_ms": cycle,
        "points": [{"name": "a", "visits": 3}, {"name": "b", "visits": -4},
                   {"name": "a", "visits": 1}, {"name": "c", "visits": 2, "downgrades": 5},
                   {"name": "d", "visits": 5, "passes": 5}],
        "known_points": ["a", long, "e"], "declared_points": ["a\u{0}"]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    let fields: Vec<&str> = answer["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "known_points[1]",
            "declared_points[0]",
            "points[1].visits",
            "points[2].name",
            "points[3].downgrades"
        ],
        "{answer}"
    );
    assert!(answer["rejected"][0]["message"]
        .as_str()
        .unwrap()
        .contains("257 bytes"));
    assert_eq!(answer["points"], 2);
    let stored = rows(addr, cycle, cycle + 1);
    assert_eq!(stored.keys().collect::<Vec<_>>(), ["a", "d"]);
    assert_eq!(stored["a"]["visits"], 3);
    let list = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    let names: Vec<&str> = list["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "d", "e"]);

    // SDS's protocol: the same under `client.pointInfoMap.<point>` (names with dots).
    let client = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "s-1",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": 2}, "order.bad": {"visitNum": "x"},
                         "order.worse": {"visitNum": 1, "downgradeNum": 2}},
        "knownPoints": ["order.create", "\t"]});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&client.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    let fields: Vec<&str> = answer["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "client.knownPoints[1]",
            "client.pointInfoMap.order.bad.visitNum",
            "client.pointInfoMap.order.worse.downgradeNum"
        ],
        "{answer}"
    );
    assert_eq!(answer["points"], 1);
    assert_eq!(rows(addr, cycle, cycle + 1)["order.create"]["visits"], 2);

    // The envelope is still all or nothing.
    for (body, field) in [
        (
            json!({"app": "orders", "instance": "i-2", "cycle_start_ms": cycle,
                "points": [{"name": "z", "visits": 1}]}),
            "app_group",
        ),
        (
            json!({"app_group": "shop", "app": "orders", "cycle_start_ms": cycle,
                "points": [{"name": "z", "visits": 1}]}),
            "instance",
        ),
        (
            json!({"app_group": "shop", "app": "orders", "instance": "i-2",
                "cycle_start_ms": cycle + 1, "points": [{"name": "z", "visits": 1}]}),
            "cycle_start_ms",
        ),
        (
            json!({"app_group": "shop", "app": "orders", "instance": "i-2",
                "cycle_start_ms": cycle, "points": [{"name": "z", "visits": -1}],
                "policy_version": "3"}),
            "policy_version",
        ),
    ] {
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
        assert_eq!(r.status, 400, "{field}: {}", r.text());
        assert_eq!(
            r.json()["error"]["problems"][0]["field"],
            field,
            "{}",
            r.text()
        );
    }
    assert!(!rows(addr, cycle, cycle + 1).contains_key("z"));
    server.stop();
}

/// The point list of a 10 000-point app on SQLite (prints the time).
#[test]
fn the_point_list_of_ten_thousand_points_is_quick_on_sqlite() {
    let dir = TempDir::new("list10k");
    common::scenarios::points_list_of_ten_thousand(
        StorageConfig::Sqlite(dir.path().join("admin.db")),
        "SQLite",
    );
}
