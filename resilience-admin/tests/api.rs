//! The server over real loopback HTTP: heartbeats in both protocols, aggregation,
//! persistence across a restart, versioned policies with conflicts and rollback,
//! tokens, body limits and malformed input, retention.

mod common;
/// The live view: 1-second buckets.
#[path = "api/live.rs"]
mod live;

use common::*;
use resilience_admin::server::StorageConfig;
use resilience_runtime::{Clock, ManualClock};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

fn manual_config(storage: StorageConfig) -> (resilience_admin::server::AdminConfig, ManualClock) {
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    (c, manual)
}

fn now_ms(manual: &ManualClock) -> i64 {
    let c = Clock::manual(manual);
    c.unix_time(c.now()).as_millis() as i64
}

fn heartbeat(instance: &str, cycle: i64, points: Value) -> Value {
    json!({"app_group": "shop", "app": "orders", "instance": instance, "host": "web",
           "cycle_start_ms": cycle, "points": points,
           "declared_points": ["order.create", "order.refund"]})
}

fn stats(addr: SocketAddr, query: &str) -> Value {
    let r = get(
        addr,
        &format!("/api/v1/apps/shop/orders/stats?{query}"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn edit(addr: SocketAddr, base: u64, author: &str, policy: Value) -> common::Response {
    put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": base, "author": author, "policy": policy}),
    )
}

#[test]
fn json_heartbeats_are_summed_over_instances_and_not_counted_twice() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let one = heartbeat(
        "i-1",
        cycle,
        json!([{"name": "order.create", "visits": 10, "passes": 7, "downgrades": 3,
                "exceptions": 1, "timeouts": 2, "peak_concurrency": 4,
                "downgrades_by_reason": {"visits": 2, "concurrency": 1}}]),
    );
    let two = heartbeat(
        "i-2",
        cycle,
        json!([{"name": "order.create", "visits": 5, "downgrades": 1, "peak_concurrency": 2,
                "downgrades_by_reason": {"visits": 1}}]),
    );
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &one);
    assert_eq!(
        (r.status, r.json()["result"].clone()),
        (200, json!("stored")),
        "{}",
        r.text()
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(ORDERS_ONLY), &two).status,
        200
    );
    // A retry of the same cycle (its first answer lost) is recognised.
    let again = post_json(addr, "/api/v1/heartbeat", Some(APP), &one);
    assert_eq!(again.json()["result"], "duplicate");

    let s = stats(
        addr,
        &format!("point=order.create&from={cycle}&to={}", cycle + 10_000),
    );
    let rows = s["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{s}");
    let row = &rows[0];
    assert_eq!(row["cycle_start_ms"], cycle);
    assert_eq!(row["visits"], 15);
    assert_eq!(row["passes"], 11);
    assert_eq!(row["downgrades"], 4);
    assert_eq!(row["exceptions"], 1);
    assert_eq!(row["timeouts"], 2);
    assert_eq!(row["peak_concurrency"], 6);
    assert_eq!(row["instances"], 2);
    assert_eq!(
        row["downgrades_by_reason"],
        json!({"visits": 3, "concurrency": 1})
    );

    // The declared point without traffic is listed too.
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    let names: Vec<_> = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["declared"].as_bool().unwrap(),
                p["last_cycle"].is_null(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("order.create", true, false), ("order.refund", true, true)]
    );
    let instances = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    assert_eq!(instances["instances"].as_array().unwrap().len(), 2);
    let apps = get(addr, "/api/v1/apps", None).json();
    assert_eq!(apps["apps"][0]["name"], "orders");
    assert_eq!(apps["apps"][0]["instances"], 2);
}

#[test]
fn sds_form_protocol_round_trip() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let now = now_ms(&manual);
    // SDS sends the END of the reported cycle.
    let end = now - now % 10_000;
    let client = json!({"appGroupName": "shop", "appName": "orders", "ip": "10.0.0.7",
                        "hostname": "web-7", "statisticsCycleTime": end,
                        "pointInfoMap": {"order.create": {"point": "order.create", "visitNum": 12,
                            "exceptionNum": 2, "concurrentNum": 3, "timeoutNum": 1,
                            "downgradeNum": 5}}});
    let form = format!("client={}", form_value(&client.to_string()));
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&form),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["errorMsg"].is_null());
    let s = stats(addr, &format!("from={}&to={end}", end - 10_000));
    assert_eq!(s["rows"][0]["visits"], 12);
    assert_eq!(s["rows"][0]["passes"], 7);
    assert_eq!(s["rows"][0]["peak_concurrency"], 3);

    let pull = |version: u64| {
        let c = json!({"appGroupName": "shop", "appName": "orders", "ip": "10.0.0.7",
                       "hostname": "web-7", "version": version, "pointList": ["order.create"]});
        let form = format!("client={}", form_value(&c.to_string()));
        let r = request(
            addr,
            "POST",
            "/sds/heartbeat/pullstrategy",
            Some(APP),
            Body::Form(&form),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    // A fresh client (version 0) gets nothing while the app has no version.
    let p = pull(0);
    assert_eq!(
        (p["changed"].clone(), p["version"].clone()),
        (json!(false), json!(0))
    );
    assert_eq!(
        edit(
            addr,
            0,
            "alice",
            json!({"points": {"order.create": {"max_visits": 40,
            "delay": {"duration": "10s", "retry_interval": "1s"}}}})
        )
        .status,
        200
    );
    let p = pull(0);
    assert_eq!(p["changed"], true);
    assert_eq!(p["version"], 1);
    assert!(p["errorMsg"].is_null());
    let s = &p["strategies"][0];
    assert_eq!(s["point"], "order.create");
    assert_eq!(s["visitThreshold"], 40);
    assert_eq!(s["delayTime"], 10_000);
    assert_eq!(s["retryInterval"], 1_000);
    assert_eq!(s["concurrentThreshold"], -1);
    assert_eq!(s["downgradeRate"], 100);
    assert_eq!(s["resiliencePolicy"]["max_visits"], 40);
    assert_eq!(pull(1)["changed"], false);
    // The instance and the version it holds are recorded.
    let instances = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let inst = &instances["instances"][0];
    assert_eq!(inst["instance"], "web-7@10.0.0.7");
    assert_eq!(inst["protocol"], "sds");
    assert_eq!(inst["policy_version"], 1);

    // Malformed SDS bodies get SDS's errorMsg as well as our error.
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form("other=1"),
    );
    assert_eq!(r.status, 400);
    assert!(
        r.json()["errorMsg"].as_str().unwrap().contains("`client`"),
        "{}",
        r.text()
    );
}

#[test]
fn json_pull_returns_the_policy_only_when_the_version_changed() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let pull = |version: u64| {
        let r = post_json(
            addr,
            "/api/v1/pull",
            Some(APP),
            &json!({"app_group": "shop", "app": "orders", "instance": "i-1", "version": version}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    assert_eq!(
        pull(0),
        json!({"changed": false, "version": 0, "policy": null})
    );
    edit(
        addr,
        0,
        "alice",
        json!({"points": {"a": {"max_concurrency": 3}}}),
    );
    let p = pull(0);
    assert_eq!(p["changed"], true);
    assert_eq!(
        p["policy"],
        json!({"points": {"a": {"max_concurrency": 3}}})
    );
    assert_eq!(pull(1)["changed"], false);
    // A client that holds a version the server no longer has gets the current one.
    assert_eq!(pull(7)["version"], 1);
}

#[test]
fn everything_survives_a_restart_on_the_same_sqlite_file() {
    let dir = TempDir::new("restart");
    let db = dir.path().join("admin.db");
    let (c, manual) = manual_config(StorageConfig::Sqlite(db.clone()));
    let cycle = last_closed_cycle(now_ms(&manual));
    let server = start(c.clone());
    let addr = server.addr();
    let hb = heartbeat(
        "i-1",
        cycle,
        json!([{"name": "order.create", "visits": 9, "downgrades": 2,
                "downgrades_by_reason": {"token_bucket": 2}}]),
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb).status,
        200
    );
    assert_eq!(
        edit(
            addr,
            0,
            "alice",
            json!({"points": {"order.create": {"max_visits": 5}}})
        )
        .status,
        200
    );
    assert_eq!(
        edit(
            addr,
            1,
            "bob",
            json!({"points": {"order.create": {"max_visits": 6}}})
        )
        .status,
        200
    );
    let before_stats = stats(addr, "");
    let before_history = get(addr, &format!("{POLICY}/versions"), None).json();
    server.stop();

    let server = start(c);
    let addr = server.addr();
    assert_eq!(stats(addr, "")["rows"], before_stats["rows"]);
    assert_eq!(
        stats(addr, "")["rows"][0]["downgrades_by_reason"]["token_bucket"],
        2
    );
    let history = get(addr, &format!("{POLICY}/versions"), None).json();
    assert_eq!(history, before_history);
    let versions: Vec<_> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["author"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(versions, [(2, "bob".to_owned()), (1, "alice".to_owned())]);
    let current = get(addr, POLICY, None).json();
    assert_eq!(current["version"], 2);
    assert_eq!(current["policy"]["points"]["order.create"]["max_visits"], 6);
    // The duplicate detection survives too.
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb).json()["result"],
        "duplicate"
    );
    // And the next edit continues the numbering.
    assert_eq!(
        edit(addr, 2, "carol", json!({"points": {}})).json()["version"],
        3
    );
}

#[test]
fn a_stale_edit_is_refused_and_any_version_can_be_restored() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let v1 = json!({"points": {"order.create": {"max_visits": 100,
                                                "timeouts": {"threshold": "250ms", "max_count": 5}}}});
    let r = edit(addr, 0, "alice", v1.clone());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["version"], 1);
    manual.advance(Duration::from_secs(60));
    let r = edit(
        addr,
        1,
        "bob",
        json!({"points": {"order.create": {"max_visits": 50,
        "timeouts": {"threshold": "250ms", "max_count": 5}}, "order.refund": {"max_concurrency": 2}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v2 = r.json();
    assert_eq!(v2["version"], 2);
    assert_eq!(v2["created_ms"], now_ms(&manual));
    assert_eq!(
        v2["diff"],
        json!([
            {"point": "order.create", "field": "max_visits", "old": 100, "new": 50},
            {"point": "order.refund", "field": null, "old": null, "new": {"max_concurrency": 2}},
        ])
    );

    // Carol edits from version 1, which is no longer current.
    let r = edit(addr, 1, "carol", json!({"points": {}}));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["current_version"], 2);
    assert_eq!(get(addr, POLICY, None).json()["version"], 2);

    // An edit that changes nothing makes no version.
    let same = get(addr, POLICY, None).json()["policy"].clone();
    let r = edit(addr, 2, "dave", same);
    assert_eq!(r.json(), json!({"changed": false, "version": 2}));

    // Roll back to version 1.
    let restore = |base: u64| {
        post_json(
            addr,
            &format!("{POLICY}/versions/1/restore"),
            Some(ADMIN),
            &json!({"base_version": base, "author": "erin"}),
        )
    };
    assert_eq!(restore(1).status, 409);
    let r = restore(2);
    assert_eq!(r.status, 200, "{}", r.text());
    let v3 = r.json();
    assert_eq!(v3["version"], 3);
    assert_eq!(v3["restored_from"], 1);
    assert_eq!(v3["comment"], "restore version 1");
    assert_eq!(v3["policy"], v1);
    assert_eq!(get(addr, POLICY, None).json()["policy"], v1);
    let old = get(addr, &format!("{POLICY}/versions/2"), None).json();
    assert_eq!(old["author"], "bob");
    assert!(
        old["toml"]
            .as_str()
            .unwrap()
            .contains("[points.\"order.refund\"]"),
        "{old}"
    );
    assert_eq!(get(addr, &format!("{POLICY}/versions/9"), None).status, 404);
    assert_eq!(
        post_json(
            addr,
            &format!("{POLICY}/versions/9/restore"),
            Some(ADMIN),
            &json!({"base_version": 3, "author": "erin"})
        )
        .status,
        404
    );
}

#[test]
fn invalid_policies_are_refused_with_every_problem() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let r = edit(
        addr,
        0,
        "alice",
        json!({"points": {"order.create": {"max_visits": "lots", "max_visit": 1,
                                           "timeouts": {"threshold": "0ms", "max_count": 1}}}}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let body = r.json();
    let problems: Vec<_> = body["error"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["point"].as_str().unwrap().to_owned(),
                p["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        problems.contains(&("order.create".into(), "max_visits".into())),
        "{body}"
    );
    assert!(
        problems.contains(&("order.create".into(), "max_visit".into())),
        "{body}"
    );
    assert_eq!(get(addr, POLICY, None).json()["version"], 0);
    // TOML text is validated the same way.
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "alice", "text": "[points.a]\nmax_visits = -3\n"}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["error"]["problems"][0]["field"], "max_visits");
    // The validate endpoint reports without storing.
    let r = post_json(
        addr,
        &format!("{POLICY}/validate"),
        None,
        &json!({"text": "[points.a]\nmax_visits = 3\n"}),
    );
    assert_eq!(
        r.json()["policy"],
        json!({"points": {"a": {"max_visits": 3}}})
    );
    // Missing metadata names the field.
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"author": "a", "policy": {"points": {}}}),
    );
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("base_version"));
}

#[test]
fn bad_tokens_are_refused() {
    let mut c = config(StorageConfig::Memory);
    c.read_token = Some(resilience_admin::auth::Token::new("read-token-0123456789abc").unwrap());
    let server = start(c);
    let addr = server.addr();
    let body = json!({"base_version": 0, "author": "mallory", "policy": {"points": {"a": {"max_visits": 0}}}});
    for token in [
        None,
        Some("wrong-token-0123456789abcdef"),
        Some(APP),
        Some("read-token-0123456789abc"),
    ] {
        let r = put_json(addr, POLICY, token, &body);
        assert_eq!(r.status, 401, "{token:?}: {}", r.text());
        assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    }
    // A token that differs only in its last character.
    let almost = format!("{}X", &ADMIN[..ADMIN.len() - 1]);
    assert_eq!(put_json(addr, POLICY, Some(&almost), &body).status, 401);
    assert_eq!(get(addr, POLICY, Some(ADMIN)).json()["version"], 0);

    // Reads are protected by the read token here.
    assert_eq!(get(addr, "/api/v1/apps", None).status, 401);
    assert_eq!(get(addr, "/api/v1/apps", Some(APP)).status, 401);
    assert_eq!(
        get(addr, "/api/v1/apps", Some("read-token-0123456789abc")).status,
        200
    );
    assert_eq!(get(addr, "/api/v1/apps", Some(ADMIN)).status, 200);
    // The dashboard page itself needs no token; its API calls do.
    assert_eq!(get(addr, "/", None).status, 200);

    // Heartbeats need an app token valid for their app.
    let hb = |app: &str| {
        json!({"app_group": "shop", "app": app, "instance": "i",
               "cycle_start_ms": last_closed_cycle(wall_ms()), "points": []})
    };
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", None, &hb("orders")).status,
        401
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(ADMIN), &hb("orders")).status,
        401
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(ORDERS_ONLY), &hb("search")).status,
        401
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(ORDERS_ONLY), &hb("orders")).status,
        200
    );
    let pull = json!({"app_group": "shop", "app": "search", "instance": "i", "version": 0});
    assert_eq!(
        post_json(addr, "/api/v1/pull", Some(ORDERS_ONLY), &pull).status,
        401
    );
    assert_eq!(
        post_json(addr, "/api/v1/pull", Some(APP), &pull).status,
        200
    );
    // Nothing of the refused heartbeat was stored.
    let apps = get(addr, "/api/v1/apps", Some(ADMIN)).json();
    let names: Vec<_> = apps["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].clone())
        .collect();
    assert_eq!(names, [json!("orders"), json!("search")], "{apps}");
    assert_eq!(
        get(addr, "/api/v1/apps/shop/search/instances", Some(ADMIN)).json()["instances"][0]
            ["last_heartbeat_ms"],
        Value::Null
    );
}

#[test]
fn oversized_and_malformed_bodies_are_refused_without_touching_stored_data() {
    let (mut c, manual) = manual_config(StorageConfig::Memory);
    c.max_body_bytes = 16 * 1024;
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let good = heartbeat("i-1", cycle, json!([{"name": "order.create", "visits": 3}]));
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &good).status,
        200
    );
    let before = stats(addr, "");

    // Too large, with a Content-Length and streamed in chunks.
    let many: Vec<Value> = (0..2000)
        .map(|i| json!({"name": format!("p{i}"), "visits": 1}))
        .collect();
    let big = heartbeat("i-2", cycle, Value::Array(many)).to_string();
    assert!(big.len() > 16 * 1024);
    let r = request(
        addr,
        "POST",
        "/api/v1/heartbeat",
        Some(APP),
        Body::Raw(big.as_bytes(), "application/json"),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "body_too_large");
    let r = request(
        addr,
        "POST",
        "/api/v1/heartbeat",
        Some(APP),
        Body::Chunked(big.as_bytes()),
    );
    assert_eq!(r.status, 413, "{}", r.text());
    let form = format!("client={}", form_value(&big));
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&form),
    );
    assert_eq!(r.status, 413);
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "a", "text": "#".repeat(20_000)}),
    );
    assert_eq!(r.status, 413);

    // Malformed: not JSON, wrong shapes, inconsistent counts, bad cycle.
    let r = request(
        addr,
        "POST",
        "/api/v1/heartbeat",
        Some(APP),
        Body::Raw(b"{\"app\": ", "application/json"),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "malformed_json");
    // (A malformed point alone leaves the rest of the heartbeat valid: see
    // tests/parts.rs, `a_partly_invalid_heartbeat_stores_its_valid_points`.)
    let cases = [
        (
            json!({"app_group": "shop", "app": "orders", "instance": "i-3", "cycle_start_ms": cycle + 1234,
                "points": [{"name": "order.create", "visits": 1}]}),
            "cycle_start_ms",
        ),
        (
            json!({"app_group": "shop", "app": "orders", "instance": "i-3", "cycle_start_ms": cycle,
                "points": {"order.create": 1}}),
            "points",
        ),
        (
            json!({"app_group": "shop", "app": "orders", "instance": "i-3\u{7}", "cycle_start_ms": cycle,
                "points": []}),
            "instance",
        ),
    ];
    for (body, field) in cases {
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
        assert_eq!(r.status, 400, "{field}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["problems"][0]["field"], field, "{e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(field),
            "{e}"
        );
    }
    assert_eq!(stats(addr, "")["rows"], before["rows"]);
    let instances = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    assert_eq!(
        instances["instances"].as_array().unwrap().len(),
        1,
        "{instances}"
    );
}

#[test]
fn statistics_older_than_the_retention_limit_are_pruned() {
    let (mut c, manual) = manual_config(StorageConfig::Memory);
    c.retention = Duration::from_secs(3600);
    c.prune_interval = Duration::from_millis(20);
    let server = start(c);
    let addr = server.addr();
    let now = now_ms(&manual);
    let old = last_closed_cycle(now);
    let hb = heartbeat("i-1", old, json!([{"name": "order.create", "visits": 3}]));
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb).status,
        200
    );
    manual.advance(Duration::from_secs(1800));
    let recent = last_closed_cycle(now_ms(&manual));
    let hb = heartbeat(
        "i-1",
        recent,
        json!([{"name": "order.create", "visits": 4}]),
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb).status,
        200
    );
    let all = format!("from={}&to={}", old, recent + 10_000);
    assert_eq!(stats(addr, &all)["rows"].as_array().unwrap().len(), 2);

    // 40 minutes later the first cycle is more than an hour old.
    manual.advance(Duration::from_secs(2400));
    let rows = wait_for(
        Duration::from_secs(10),
        "the old cycle to be pruned",
        || {
            let rows = stats(addr, &all)["rows"].clone();
            (rows.as_array().unwrap().len() == 1).then_some(rows)
        },
    );
    assert_eq!(rows[0]["cycle_start_ms"], recent);
    // And a heartbeat that old is refused.
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &heartbeat("i-2", old, json!([])),
    );
    assert_eq!(r.status, 400);
    assert!(r.text().contains("retention"), "{}", r.text());
}

#[test]
fn the_binary_serves_the_dashboard_and_the_api() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_resilience-admin"))
        .args(["--bind", "127.0.0.1:0", "--memory"])
        .env("RESILIENCE_ADMIN_TOKEN", ADMIN)
        .env("RESILIENCE_APP_TOKENS", APP)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr: SocketAddr = first
        .split("http://")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no address in {first:?}"));
    assert!(addr.ip().is_loopback());
    assert!(!first.contains(ADMIN));
    let rest: Vec<String> = lines.by_ref().take(1).map(Result::unwrap).collect();
    assert!(
        rest[0].starts_with("dashboard:"),
        "{rest:?}: given tokens are not printed"
    );
    assert_eq!(
        get(addr, "/api/v1/health", None).json(),
        json!({"ok": true})
    );
    let page = get(addr, "/", None);
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page
        .header("content-security-policy")
        .unwrap()
        .contains("script-src 'self'"));
    assert_eq!(get(addr, "/nope", None).status, 404);
    child.kill().unwrap();
    child.wait().unwrap();

    // A bad option is reported with exit code 2.
    let out = Command::new(env!("CARGO_BIN_EXE_resilience-admin"))
        .args(["--retention", "forever"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--retention"));
}

// ---- what each instance enforces: ingest, drift, breakers, idle points ----

const POINTS: &str = "/api/v1/apps/shop/orders/points";

fn origin(source: &str, version: u64) -> Value {
    json!({"source": source, "version": version})
}

fn enforcing_heartbeat(instance: &str, cycle: i64, enforcing: Value) -> Value {
    json!({"app_group": "shop", "app": "orders", "instance": instance,
           "cycle_start_ms": cycle, "enforcing": enforcing})
}

/// The digest of the console's settings for `point` in its current version, as the
/// runtime computes it.
fn console_digest(addr: SocketAddr, point: &str) -> String {
    let policy = get(addr, POLICY, None).json()["policy"].to_string();
    let file = resilience_runtime::config::PolicyFile::parse(
        &policy,
        resilience_runtime::config::Format::Json,
    )
    .unwrap();
    file.points[point].digest()
}

fn point_of(points: &Value, name: &str) -> Value {
    points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no point {name} in {points}"))
        .clone()
}

fn instance_of(list: &Value, instance: &str) -> Value {
    list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance"] == instance)
        .unwrap_or_else(|| panic!("no instance {instance} in {list}"))
        .clone()
}

#[test]
fn enforcement_and_client_health_are_ingested_in_both_protocols_or_absent() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let now = now_ms(&manual);
    let cycle = last_closed_cycle(now);
    // An older client: neither field.
    let old = heartbeat("old", cycle, json!([{"name": "order.create", "visits": 2}]));
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &old).status,
        200
    );
    // Our JSON protocol, with both.
    let local = json!({"max_concurrency": 3});
    let mut hb = enforcing_heartbeat(
        "json-1",
        cycle,
        json!([{"name": "order.refund", "digest": "0123456789abcdef",
                "origins": {"rules": origin("file:/etc/app/policies.toml", 2)},
                "local": local, "unknown": {"ignored": true}}]),
    );
    hb["client"] = json!({"last_upload_error": "HTTP 401 from 10.0.0.1:7070",
                          "last_pull_error": null, "from_cache": true, "uploads_dropped": 1,
                          "pull_failures": 0, "policies_rejected": 0});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
    assert_eq!(r.status, 200, "{}", r.text());
    // SDS's protocol: the same inside the `client` form field.
    let client = json!({"appGroupName": "shop", "appName": "orders", "hostname": "web-9",
                        "instanceId": "sds-1", "statisticsCycleTime": cycle + 10_000,
                        "enforcing": [{"name": "order.refund", "digest": "fedcba9876543210",
                                       "origins": {"rules": origin("code", 1)},
                                       "breaker": {"kind": "sre", "state": "open",
                                                   "since_ms": cycle + 3_000, "transitions": 1}}],
                        "client": {"last_upload_error": null,
                                   "last_pull_error": "connection refused",
                                   "from_cache": false}});
    let form = format!("client={}", form_value(&client.to_string()));
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&form),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    let list = get(addr, &format!("{POINTS}/order.refund/instances"), None).json();
    assert_eq!(list["instances"].as_array().unwrap().len(), 2, "{list}");
    let j = instance_of(&list, "json-1");
    assert_eq!(
        j["origins"]["rules"],
        origin("file:/etc/app/policies.toml", 2)
    );
    assert_eq!(j["has_local"], true);
    assert_eq!(j["live"], true);
    let s = instance_of(&list, "sds-1");
    assert_eq!(s["breaker"]["state"], "open");
    assert_eq!(s["breaker"]["since_ms"], cycle + 3_000);
    assert_eq!(s["has_local"], false);
    let l = get(
        addr,
        &format!("{POINTS}/order.refund/instances/json-1/local"),
        None,
    )
    .json();
    assert_eq!(l["local"], local);
    assert!(
        l["toml"].as_str().unwrap().contains("max_concurrency = 3"),
        "{l}"
    );
    assert_eq!(
        get(
            addr,
            &format!("{POINTS}/order.refund/instances/sds-1/local"),
            None
        )
        .json()["local"],
        Value::Null
    );
    assert_eq!(
        get(
            addr,
            &format!("{POINTS}/order.refund/instances/nobody/local"),
            None
        )
        .status,
        404
    );

    // Heartbeat health in the instances list.
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    assert_eq!(instance_of(&inst, "old")["client"], Value::Null);
    let j = instance_of(&inst, "json-1");
    assert_eq!(
        j["client"]["last_upload_error"],
        "HTTP 401 from 10.0.0.1:7070"
    );
    assert_eq!(j["client"]["from_cache"], true);
    assert_eq!(j["client"]["uploads_dropped"], 1);
    assert_eq!(j["client_reported_ms"], now);
    assert_eq!(j["last_upload_age_ms"], 0);
    let s = instance_of(&inst, "sds-1");
    assert_eq!(s["client"]["last_pull_error"], "connection refused");
    manual.advance(Duration::from_secs(7));
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    assert_eq!(instance_of(&inst, "json-1")["last_upload_age_ms"], 7_000);

    // The points list: the point with no console policy is enforced, from a file and
    // the code, never "no policy".
    let points = get(addr, POINTS, None).json();
    let p = point_of(&points, "order.refund");
    assert_eq!(p["has_policy"], false);
    assert_eq!(p["enforced_by"]["instances"], 2);
    assert_eq!(p["enforced_by"]["by_kind"], json!({"code": 1, "file": 1}));
    assert_eq!(
        p["drift"], false,
        "the console does not manage it: no drift"
    );
    assert_eq!(p["breaker"]["open"], 1);
    assert_eq!(points["cycle_start_ms"], last_closed_cycle(now_ms(&manual)));
}

#[test]
fn malformed_enforcement_is_refused_naming_the_field_and_stores_nothing() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let good = json!({"name": "p", "digest": "none"});
    // Malformed entries of `enforcing` are left out and reported, the rest stored:
    // see `malformed_enforcement_entries_are_left_out_and_reported` below.
    let cases = [
        (json!({"enforcing": {"p": good}}), "enforcing"),
        (json!({"client": {"from_cache": "no"}}), "client.from_cache"),
        (json!({"client": "fine"}), "client"),
    ];
    for (extra, field) in cases {
        let mut body = json!({"app_group": "shop", "app": "orders", "instance": "bad",
                              "cycle_start_ms": cycle,
                              "points": [{"name": "order.create", "visits": 1}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
        assert_eq!(r.status, 400, "{field}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["problems"][0]["field"], field, "{e}");
        // The same in SDS's protocol, under `client.`.
        let mut client = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "bad",
                                "statisticsCycleTime": cycle + 10_000});
        for (k, v) in extra.as_object().unwrap() {
            client[k] = v.clone();
        }
        let form = format!("client={}", form_value(&client.to_string()));
        let r = request(
            addr,
            "POST",
            "/sds/heartbeat/add",
            Some(APP),
            Body::Form(&form),
        );
        assert_eq!(r.status, 400, "SDS {field}: {}", r.text());
        let e = r.json();
        assert_eq!(
            e["error"]["problems"][0]["field"],
            format!("client.{field}"),
            "{e}"
        );
        assert!(e["errorMsg"].as_str().unwrap().contains(field), "{e}");
    }
    // Nothing of them was stored.
    assert_eq!(stats(addr, "")["rows"], json!([]));
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    assert_eq!(inst["instances"], json!([]));
}

/// A malformed entry of `enforcing` is left out and reported (`rejected`), in both
/// protocols; the heartbeat's points and its other entries are stored.
#[test]
fn malformed_enforcement_entries_are_left_out_and_reported() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let good = json!({"name": "p", "digest": "none"});
    let big_local = json!({"enforcing": [{"name": "p", "digest": "none",
                                          "local": {"x": "y".repeat(17 * 1024)}}]});
    let cases = [
        (json!({"enforcing": [good, good]}), "enforcing[1].name"),
        (
            json!({"enforcing": [{"name": "p", "digest": "12 hex digits"}]}),
            "enforcing[0].digest",
        ),
        (
            json!({"enforcing": [{"name": "p", "digest": "none",
                                  "origins": {"rules": {"source": "disk", "version": 1}}}]}),
            "enforcing[0].origins.rules.source",
        ),
        (
            json!({"enforcing": [{"name": "p", "digest": "none",
                                  "origins": {"window": {"source": "console", "version": "3"}}}]}),
            "enforcing[0].origins.window.version",
        ),
        (
            json!({"enforcing": [{"name": "p", "digest": "none",
                                  "breaker": {"kind": "classic", "state": "broken", "since_ms": 1}}]}),
            "enforcing[0].breaker.state",
        ),
        (
            json!({"enforcing": [{"name": "p", "digest": "none",
                                  "breaker": {"kind": "classic", "state": "open"}}]}),
            "enforcing[0].breaker.since_ms",
        ),
        (big_local, "enforcing[0].local"),
    ];
    let n = cases.len() as u64;
    for (k, (extra, field)) in cases.into_iter().enumerate() {
        let instance = format!("json-{k}");
        let mut body = json!({"app_group": "shop", "app": "orders", "instance": instance,
                              "cycle_start_ms": cycle,
                              "points": [{"name": "order.create", "visits": 1}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
        assert_eq!(r.status, 200, "{field}: {}", r.text());
        let e = r.json();
        assert_eq!(e["rejected"][0]["field"], field, "{e}");
        assert_eq!(e["points"], 1, "{e}");
        // The same in SDS's protocol, under `client.`.
        let mut client = json!({"appGroupName": "shop", "appName": "orders",
                                "instanceId": format!("sds-{k}"),
                                "statisticsCycleTime": cycle + 10_000,
                                "pointInfoMap": {"order.create": {"visitNum": 1}}});
        for (k, v) in extra.as_object().unwrap() {
            client[k] = v.clone();
        }
        let form = format!("client={}", form_value(&client.to_string()));
        let r = request(
            addr,
            "POST",
            "/sds/heartbeat/add",
            Some(APP),
            Body::Form(&form),
        );
        assert_eq!(r.status, 200, "SDS {field}: {}", r.text());
        let e = r.json();
        assert_eq!(e["rejected"][0]["field"], format!("client.{field}"), "{e}");
    }
    // Every heartbeat's point was stored; of `[good, good]` the first entry.
    let rows = stats(addr, "")["rows"].clone();
    assert_eq!(rows[0]["visits"], 2 * n, "{rows}");
    let p = get(addr, "/api/v1/apps/shop/orders/points/p/instances", None).json();
    assert_eq!(p["instances"].as_array().map_or(0, Vec::len), 2, "{p}");
}

/// Drift, as the admin README defines it: a local source over a point the console
/// manages, or a digest other than the console's own at the version held.
#[test]
fn drift_is_flagged_for_local_overrides_and_digest_mismatches() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let r = edit(
        addr,
        0,
        "ops",
        json!({"points": {"a": {"max_visits": 3}, "b": {"max_visits": 5}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let a1 = console_digest(addr, "a");
    let r = edit(
        addr,
        1,
        "ops",
        json!({"points": {"a": {"max_visits": 4}, "b": {"max_visits": 5}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let (a2, b2) = (console_digest(addr, "a"), console_digest(addr, "b"));
    assert_ne!(a1, a2);
    let cycle = last_closed_cycle(now_ms(&manual));
    let console = |v: u64| json!({"rules": origin("console", v)});
    let reports = [
        // Exactly the console's current settings.
        (
            "exact",
            json!([{"name": "a", "digest": a2, "origins": console(2)},
                         {"name": "b", "digest": b2, "origins": console(2)}]),
        ),
        // Behind: v1's settings of `a`, exactly.
        (
            "behind",
            json!([{"name": "a", "digest": a1, "origins": console(1)}]),
        ),
        // A file's breaker over the console's rules of `a`.
        (
            "local",
            json!([{"name": "a", "digest": "0123456789abcdef",
                          "origins": {"rules": origin("console", 2),
                                      "breaker": origin("file:/etc/p.toml", 1)},
                          "local": {"breaker": {"algorithm": "classic", "consecutive_failures": 2}}}]),
        ),
        // Says it enforces console v2 for `b`, but not what v2 says.
        (
            "tampered",
            json!([{"name": "b", "digest": "0123456789abcdef", "origins": console(2)}]),
        ),
        // Its own policy of a point the console does not manage.
        (
            "own",
            json!([{"name": "c", "digest": "0123456789abcdef",
                        "origins": {"rules": origin("code", 1)}}]),
        ),
    ];
    for (instance, enforcing) in &reports {
        let r = post_json(
            addr,
            "/api/v1/heartbeat",
            Some(APP),
            &enforcing_heartbeat(instance, cycle, enforcing.clone()),
        );
        assert_eq!(r.status, 200, "{instance}: {}", r.text());
    }
    let list = get(addr, &format!("{POINTS}/a/instances"), None).json();
    assert_eq!(list["console_digest"], a2);
    let verdict = |list: &Value, i: &str| {
        let x = instance_of(list, i);
        (x["drift"].clone(), x["drift_reasons"].clone())
    };
    assert_eq!(verdict(&list, "exact"), (json!(false), json!([])));
    assert_eq!(verdict(&list, "behind"), (json!(false), json!([])));
    assert_eq!(instance_of(&list, "behind")["console_version"], 1);
    assert_eq!(instance_of(&list, "behind")["expected_digest"], a1);
    assert_eq!(
        verdict(&list, "local"),
        (json!(true), json!(["local_override"]))
    );
    assert_eq!(
        instance_of(&list, "local")["local_sections"],
        json!(["breaker"])
    );
    let list_b = get(addr, &format!("{POINTS}/b/instances"), None).json();
    assert_eq!(
        verdict(&list_b, "tampered"),
        (json!(true), json!(["digest_mismatch"]))
    );
    assert_eq!(verdict(&list_b, "exact"), (json!(false), json!([])));

    let points = get(addr, POINTS, None).json();
    let a = point_of(&points, "a");
    assert_eq!(
        (a["drift"].clone(), a["drift_instances"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(a["enforced_by"]["instances"], 3);
    assert_eq!(
        a["enforced_by"]["by_kind"],
        json!({"console": 3, "file": 1})
    );
    let console_source = a["enforced_by"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "console")
        .unwrap()
        .clone();
    assert_eq!(console_source["versions"], json!([1, 2]));
    assert_eq!(console_source["instances"], 3);
    let b = point_of(&points, "b");
    assert_eq!(
        (b["drift"].clone(), b["drift_instances"].clone()),
        (json!(true), json!(1))
    );
    let c = point_of(&points, "c");
    assert_eq!(c["drift"], false);
    assert_eq!(c["has_policy"], false);
    assert_eq!(c["enforced_by"]["by_kind"], json!({"code": 1}));

    // The console stops managing `a`: the file's breaker is no longer drift.
    let r = edit(addr, 2, "ops", json!({"points": {"b": {"max_visits": 5}}}));
    assert_eq!(r.status, 200, "{}", r.text());
    let list = get(addr, &format!("{POINTS}/a/instances"), None).json();
    assert_eq!(verdict(&list, "local"), (json!(false), json!([])));
    // ... but `exact` still enforcing v2's `a` is behind, not drifting.
    assert_eq!(verdict(&list, "exact"), (json!(false), json!([])));

    // Silent instances leave the summaries, and are listed as not live.
    manual.advance(Duration::from_secs(61));
    let cycle = last_closed_cycle(now_ms(&manual));
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &enforcing_heartbeat("exact", cycle, reports[0].1.clone()),
    );
    assert_eq!(r.status, 200);
    let b = point_of(&get(addr, POINTS, None).json(), "b");
    assert_eq!(b["drift"], false, "{b}");
    assert_eq!(b["enforced_by"]["instances"], 1);
    let list_b = get(addr, &format!("{POINTS}/b/instances"), None).json();
    assert_eq!(instance_of(&list_b, "tampered")["live"], false);
    assert_eq!(instance_of(&list_b, "exact")["live"], true);
}

#[test]
fn breaker_states_are_summed_up_per_point() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let breaker = |state: &str, since: i64| {
        json!([{"name": "order.create", "digest": "0123456789abcdef",
                "origins": {"breaker": origin("code", 1)},
                "breaker": {"kind": "classic", "state": state, "since_ms": since,
                            "transitions": 3}}])
    };
    for (instance, state, since) in [
        ("i-1", "closed", cycle - 50_000),
        ("i-2", "open", cycle + 4_000),
        ("i-3", "half_open", cycle + 1_000),
        ("i-4", "open", cycle + 6_000),
    ] {
        let r = post_json(
            addr,
            "/api/v1/heartbeat",
            Some(APP),
            &enforcing_heartbeat(instance, cycle, breaker(state, since)),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let b = point_of(&get(addr, POINTS, None).json(), "order.create")["breaker"].clone();
    assert_eq!(
        b,
        json!({"instances": 4, "closed": 1, "open": 2, "half_open": 1, "state": "open",
               "since_ms": cycle + 1_000, "closed_since_ms": null})
    );
    // All closed again: since when the last one closed.
    manual.advance(Duration::from_secs(10));
    for (instance, since) in [
        ("i-2", cycle + 8_000),
        ("i-3", cycle + 7_000),
        ("i-4", cycle + 9_000),
    ] {
        let r = post_json(
            addr,
            "/api/v1/heartbeat",
            Some(APP),
            &enforcing_heartbeat(instance, cycle + 10_000, breaker("closed", since)),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let b = point_of(&get(addr, POINTS, None).json(), "order.create")["breaker"].clone();
    assert_eq!(
        (
            b["state"].clone(),
            b["closed"].clone(),
            b["since_ms"].clone(),
            b["closed_since_ms"].clone()
        ),
        (json!("closed"), json!(4), json!(null), json!(cycle + 9_000))
    );
    // A point without a breaker has none.
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &heartbeat("i-5", cycle, json!([{"name": "order.refund", "visits": 1}])),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        point_of(&get(addr, POINTS, None).json(), "order.refund")["breaker"],
        Value::Null
    );
}

/// A point without traffic in more than two closed cycles is idle, with the end of
/// its last cycle with traffic; every figure carries its cycle.
#[test]
fn points_without_traffic_for_more_than_two_cycles_are_idle() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &heartbeat(
            "i-1",
            cycle,
            json!([{"name": "order.create", "visits": 8, "downgrades": 2}]),
        ),
    );
    assert_eq!(r.status, 200);
    let look = || {
        let points = get(addr, POINTS, None).json();
        let p = point_of(&points, "order.create");
        (points, p)
    };
    let (points, p) = look();
    assert_eq!(points["cycle_start_ms"], cycle);
    assert_eq!(
        (p["idle"].clone(), p["idle_since_ms"].clone()),
        (json!(false), json!(null))
    );
    assert_eq!(p["last_cycle"]["cycle_start_ms"], cycle);
    assert_eq!(p["last_cycle"]["visits"], 8);
    // The declared point never had traffic: idle, since nothing.
    let refund = point_of(&points, "order.refund");
    assert_eq!(
        (refund["idle"].clone(), refund["idle_since_ms"].clone()),
        (json!(true), json!(null))
    );
    // Two closed cycles without traffic: not yet idle (the second one's reports may
    // still be coming).
    manual.advance(Duration::from_secs(20));
    let (points, p) = look();
    assert_eq!(points["cycle_start_ms"], cycle + 20_000);
    assert_eq!(p["idle"], false);
    // A third: idle since the end of its last cycle with traffic.
    manual.advance(Duration::from_secs(10));
    let (_, p) = look();
    assert_eq!(
        (p["idle"].clone(), p["idle_since_ms"].clone()),
        (json!(true), json!(cycle + 10_000))
    );
    // Traffic again: not idle.
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &heartbeat(
            "i-1",
            cycle + 30_000,
            json!([{"name": "order.create", "visits": 1}]),
        ),
    );
    assert_eq!(r.status, 200);
    let (_, p) = look();
    assert_eq!(
        (p["idle"].clone(), p["last_cycle"]["visits"].clone()),
        (json!(false), json!(1))
    );
}

/// `(point, field, kind, line, column)` of every problem of a 422 answer.
fn located_problems(r: &common::Response) -> Vec<(Value, Value, Value, Value, Value)> {
    assert_eq!(r.status, 422, "{}", r.text());
    r.json()["error"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["point"].clone(),
                p["field"].clone(),
                p["kind"].clone(),
                p["line"].clone(),
                p["column"].clone(),
            )
        })
        .collect()
}

#[test]
fn problems_of_a_text_have_their_line_and_column() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let validate = |body: Value| post_json(addr, &format!("{POLICY}/validate"), None, &body);
    // TOML: a field at its key, a missing field at the section that lacks it.
    let text = "strict = false\n\n[points.\"order.create\"]\nmax_visits = 5\n\n\
                [points.\"order.create\".timeouts]\nmax_count = 3\n\n\
                [points.\"order.create\".breaker]\nalgorithm = \"sre\"\n  k = 0.5\n";
    let problems = located_problems(&validate(json!({"text": text, "format": "toml"})));
    assert_eq!(
        problems,
        [
            (
                json!("order.create"),
                json!("timeouts.threshold"),
                json!("missing_field"),
                json!(6),
                json!(1)
            ),
            (
                json!("order.create"),
                json!("breaker.k"),
                json!("out_of_range"),
                json!(11),
                json!(3)
            ),
        ]
    );
    // Inline tables and dotted keys are found too.
    let text = "[points.a]\ntimeouts = { threshold = \"fast\", max_count = 3 }\nbreaker.algorithm = \"sre\"\nbreaker.k = 0.5\n";
    let problems = located_problems(&validate(json!({"text": text})));
    let at: Vec<_> = problems
        .iter()
        .map(|p| (p.1.clone(), p.3.clone(), p.4.clone()))
        .collect();
    assert_eq!(
        at,
        [
            (json!("timeouts.threshold"), json!(2), json!(14)),
            (json!("breaker.k"), json!(4), json!(1))
        ]
    );
    // A syntax error: the parser's position.
    let problems = located_problems(&validate(json!({"text": "[points.a]\nmax_visits = \n"})));
    assert_eq!(
        problems,
        [(
            json!(null),
            json!(null),
            json!("syntax"),
            json!(2),
            json!(14)
        )]
    );
    // JSON the same way.
    let text = "{\"points\": {\n  \"a\": {\n    \"max_visits\": \"lots\",\n    \"delay\": {}}}}";
    let problems = located_problems(&validate(json!({"text": text, "format": "json"})));
    assert_eq!(
        problems,
        [
            (
                json!("a"),
                json!("max_visits"),
                json!("wrong_type"),
                json!(3),
                json!(5)
            ),
            (
                json!("a"),
                json!("delay.duration"),
                json!("missing_field"),
                json!(4),
                json!(5)
            ),
        ]
    );
    let problems = located_problems(&validate(
        json!({"text": "{\"points\": {\n  \"a\": {,}}}", "format": "json"}),
    ));
    assert_eq!(problems[0].2, "syntax");
    assert_eq!((&problems[0].3, &problems[0].4), (&json!(2), &json!(9)));
    // A policy given as a JSON object has no text to point into.
    let r = validate(json!({"policy": {"points": {"a": {"max_visits": -1}}}}));
    let problems = located_problems(&r);
    assert_eq!(problems[0].3, Value::Null);
    assert!(r.json()["error"]["problems"][0].get("line").is_none());
    // PUT reports the same lines, and stores nothing.
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": 0, "author": "alice", "text": "[points.a]\n\nmax_visit = 1\n"}),
    );
    assert_eq!(located_problems(&r)[0].3, 3);
    assert_eq!(get(addr, POLICY, None).json()["version"], 0);
}

#[test]
fn an_edit_of_one_point_changes_that_point_only() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let r = edit(
        addr,
        0,
        "alice",
        json!({"points": {"a": {"max_visits": 1, "breaker": {"algorithm": "sre", "k": 2.0}},
                          "b": {"max_concurrency": 2}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Validation of one point's draft: `strict` and other points are refused, at
    // their lines.
    let r = post_json(
        addr,
        &format!("{POLICY}/validate"),
        None,
        &json!({"point": "a", "text": "strict = true\n[points.a]\nmax_visits = 2\n[points.b]\nmax_visits = 3\n"}),
    );
    assert_eq!(
        located_problems(&r),
        [
            (
                json!(null),
                json!("strict"),
                json!("app_setting"),
                json!(1),
                json!(1)
            ),
            (
                json!("b"),
                json!(null),
                json!("other_point"),
                json!(4),
                json!(1)
            ),
        ]
    );
    let r = post_json(
        addr,
        &format!("{POLICY}/validate"),
        None,
        &json!({"point": "a", "text": "[points.a]\nmax_visits = 2\n"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // The point's settings are replaced; `b` stays as it is.
    let put = |base: u64, body: Value| {
        let mut body = body;
        body["base_version"] = json!(base);
        body["author"] = json!("bob");
        put_json(addr, POLICY, Some(ADMIN), &body)
    };
    let r = put(
        1,
        json!({"point": "a", "text": "[points.a]\nmax_visits = 2\nshadow = true\n\n[points.a.breaker]\nalgorithm = \"sre\"\nk = 2.0\n"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["version"], 2);
    assert_eq!(
        v["policy"],
        json!({"points": {"a": {"shadow": true, "max_visits": 2, "breaker": {"algorithm": "sre", "k": 2.0}},
                          "b": {"max_concurrency": 2}}})
    );
    let fields: Vec<_> = v["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["point"].clone(), d["field"].clone()))
        .collect();
    assert_eq!(
        fields,
        [
            (json!("a"), json!("max_visits")),
            (json!("a"), json!("shadow"))
        ]
    );
    // A draft without the point removes its policy.
    let r = put(2, json!({"point": "b", "policy": {"points": {}}}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["diff"],
        json!([{"point": "b", "field": null,
        "old": {"max_concurrency": 2}, "new": null}])
    );
    // A point's draft that names another point is refused, nothing stored.
    let r = put(
        3,
        json!({"point": "a", "policy": {"points": {"c": {"max_visits": 1}}}}),
    );
    assert_eq!(located_problems(&r)[0].0, "c");
    // A stale base is refused as for whole edits.
    let r = put(
        2,
        json!({"point": "a", "text": "[points.a]\nmax_visits = 9\n"}),
    );
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["current_version"], 3);
    // `point` must be a name.
    let r = put(3, json!({"point": 7, "policy": {"points": {}}}));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["problems"][0]["field"], "point");
    assert_eq!(get(addr, POLICY, None).json()["version"], 3);
}

/// A keys section is validated as the runtime does: its problems name the field
/// (an override by its value, quoted) and are placed at their line, a valid one is
/// stored in the runtime's canonical form and served by a pull.
#[test]
fn keys_sections_are_validated_stored_and_pulled() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let validate = |body: Value| post_json(addr, &format!("{POLICY}/validate"), None, &body);
    let text = "[points.a.keys]\nlimit = 10\nlimt = 3\n\n[points.a.keys.overrides]\n\
                \"vip.42\" = 2000000000\nslow = { burst = 0, max_concurency = 1 }\n";
    let problems = located_problems(&validate(json!({"text": text, "format": "toml"})));
    assert_eq!(
        problems,
        [
            (
                json!("a"),
                json!("keys.limt"),
                json!("unknown_field"),
                json!(3),
                json!(1)
            ),
            (
                json!("a"),
                json!("keys.overrides.\"slow\".max_concurency"),
                json!("unknown_field"),
                json!(7),
                json!(21)
            ),
            (
                json!("a"),
                json!("keys.overrides.\"slow\".burst"),
                json!("out_of_range"),
                json!(7),
                json!(10)
            ),
            (
                json!("a"),
                json!("keys.overrides.\"vip.42\".limit"),
                json!("out_of_range"),
                json!(6),
                json!(1)
            ),
        ]
    );
    // A valid one: stored as the runtime writes it (an override of the limit alone as
    // a number, the default period left out), and pulled as stored.
    let policy = json!({"points": {"a": {"keys": {"limit": 10, "period": "1s",
        "overrides": {"vip-42": {"limit": 1000}, "slow": {"max_concurrency": 1}}}}}});
    let r = edit(addr, 0, "alice", policy);
    assert_eq!(r.status, 200, "{}", r.text());
    let keys = json!({"limit": 10, "overrides": {"slow": {"max_concurrency": 1}, "vip-42": 1000}});
    let stored = get(addr, POLICY, None).json();
    assert_eq!(stored["policy"]["points"]["a"]["keys"], keys, "{stored}");
    assert!(
        stored["toml"]
            .as_str()
            .unwrap()
            .contains("[points.a.keys.overrides]"),
        "{stored}"
    );
    let pulled = post_json(
        addr,
        "/api/v1/pull",
        Some(APP),
        &json!({"app_group": "shop", "app": "orders", "instance": "i", "version": 0}),
    )
    .json();
    assert_eq!(pulled["policy"]["points"]["a"]["keys"], keys, "{pulled}");
    // SDS's pull carries them in the full settings.
    let client = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "s",
                        "version": 0, "pointList": ["a"]});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/pullstrategy",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&client.to_string()))),
    );
    assert_eq!(
        r.json()["strategies"][0]["resiliencePolicy"]["keys"],
        keys,
        "{}",
        r.text()
    );
}
