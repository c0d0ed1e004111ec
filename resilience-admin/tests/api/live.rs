//! The live view over the API: the heartbeat's 1-second buckets in both protocols,
//! with and without them, refused with the field at fault, summed over instances
//! (and points), the cycles an older client leaves without seconds, ranges ending
//! where the heartbeats are in, and the seconds' own retention.

use super::*;

/// Ten buckets `[visits, passes, downgrades, exceptions, timeouts]`.
fn buckets(f: impl Fn(u64) -> [u64; 5]) -> Value {
    Value::Array((0..10).map(|k| json!(f(k))).collect())
}

/// The figures of one 1-second stats row: second, the five counts, the `visits`
/// reason, instances.
fn second_rows(s: &Value) -> Vec<(i64, [u64; 5], u64, u64)> {
    s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["second_start_ms"].as_i64().unwrap(),
                ["visits", "passes", "downgrades", "exceptions", "timeouts"]
                    .map(|k| r[k].as_u64().unwrap()),
                r["downgrades_by_reason"]["visits"].as_u64().unwrap_or(0),
                r["instances"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn sds_form(client: &Value) -> String {
    format!("client={}", form_value(&client.to_string()))
}

/// Second `k` of instance 1: `k + 1` visits, `k % 2` downgraded (reason `visits`),
/// an exception in second 3; second 6 idle.
fn one(k: u64) -> [u64; 5] {
    if k == 6 {
        return [0; 5];
    }
    [k + 1, k + 1 - k % 2, k % 2, u64::from(k == 3), 0]
}

/// Second `k` of instance 2: 10 visits in even seconds, a timeout in second 9.
fn two(k: u64) -> [u64; 5] {
    let v = 10 * u64::from(k.is_multiple_of(2));
    [v, v, 0, 0, u64::from(k == 9)]
}

#[test]
fn per_second_figures_are_ingested_in_both_protocols_and_summed_over_instances() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    // 6 s into a cycle: the previous one's heartbeats are in.
    manual.advance(Duration::from_secs(6));
    let cycle = last_closed_cycle(now_ms(&manual));
    let sum = |f: fn(u64) -> [u64; 5], i: usize| (0..10).map(|k| f(k)[i]).sum::<u64>();
    // Instance 1, our JSON protocol, with a second point.
    let hb1 = heartbeat(
        "i-1",
        cycle,
        json!([{"name": "order.create", "visits": sum(one, 0), "downgrades": sum(one, 2),
                "exceptions": 1, "downgrades_by_reason": {"visits": sum(one, 2)},
                "seconds": buckets(one),
                "seconds_by_reason": {"visits": (0..10).map(|k| one(k)[2]).collect::<Vec<_>>()}},
               {"name": "order.refund", "visits": 2,
                "seconds": buckets(|k| if k == 0 { [2, 2, 0, 0, 0] } else { [0; 5] })}]),
    );
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb1);
    assert_eq!(r.status, 200, "{}", r.text());
    // Instance 2, SDS's protocol: the end of the cycle, `secondsByReason` absent.
    let client = json!({"appGroupName": "shop", "appName": "orders", "ip": "10.0.0.8",
        "hostname": "web-8", "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": sum(two, 0), "timeoutNum": 1,
                                          "seconds": buckets(two)}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&sds_form(&client)),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A retry of instance 1 is not counted twice.
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb1);
    assert_eq!(r.json()["result"], "duplicate");

    let s = stats(
        addr,
        &format!(
            "resolution=1s&point=order.create&from={cycle}&to={}",
            cycle + 10_000
        ),
    );
    assert_eq!(
        (
            s["resolution"].clone(),
            s["step_ms"].clone(),
            s["incomplete_cycles"].clone(),
            s["truncated"].clone()
        ),
        (json!("1s"), json!(1000), json!([]), json!(false))
    );
    // Every second with traffic, summed over both instances; second 6 of instance 1
    // is idle but instance 2 had 10 visits in it.
    let expected: Vec<(i64, [u64; 5], u64, u64)> = (0..10)
        .map(|k| {
            let (a, b) = (one(k), two(k));
            let busy = |x: [u64; 5]| u64::from(x.iter().any(|&n| n > 0));
            (
                cycle + 1_000 * k as i64,
                std::array::from_fn(|i| a[i] + b[i]),
                a[2],
                busy(a) + busy(b),
            )
        })
        .filter(|r| r.3 > 0)
        .collect();
    assert_eq!(second_rows(&s), expected);
    assert!(s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["point"] == "order.create"));
    // Summed over points: order.refund's 2 visits join second 0.
    let s = stats(
        addr,
        &format!(
            "resolution=1s&sum=points&from={cycle}&to={}",
            cycle + 10_000
        ),
    );
    let summed = second_rows(&s);
    assert_eq!(summed[0].1[0], one(0)[0] + two(0)[0] + 2);
    assert_eq!(summed.len(), expected.len());
    assert!(s["rows"][0]["point"].is_null());
    // Per point without `sum`: both points' rows.
    let s = stats(
        addr,
        &format!("resolution=1s&from={cycle}&to={}", cycle + 10_000),
    );
    assert_eq!(s["rows"].as_array().unwrap().len(), expected.len() + 1);

    // A range by its length ends where the heartbeats are in (6 s into this cycle:
    // at the end of the previous one).
    let s = stats(addr, "resolution=1s&sum=points&range=1m");
    assert_eq!(
        (s["to_ms"].clone(), s["from_ms"].clone()),
        (json!(cycle + 10_000), json!(cycle + 10_000 - 60_000))
    );
    assert_eq!(second_rows(&s), summed);
    assert_eq!(
        stats(addr, "resolution=1s&sum=points&range=60000")["from_ms"],
        s["from_ms"]
    );
    // The 10-s cycles summed over points.
    let s = stats(addr, "sum=points&range=5m");
    assert_eq!(
        (
            s["resolution"].clone(),
            s["step_ms"].clone(),
            s["rows"][0]["cycle_start_ms"].clone(),
            s["rows"][0]["visits"].clone(),
            s["rows"][0]["point"].clone()
        ),
        (
            json!("10s"),
            json!(10_000),
            json!(cycle),
            json!(sum(one, 0) + sum(two, 0) + 2),
            Value::Null
        )
    );

    // An older client (no seconds) in the next cycle: that cycle's seconds miss its
    // traffic, and say so.
    manual.advance(Duration::from_secs(10));
    let old = heartbeat(
        "i-old",
        cycle + 10_000,
        json!([{"name": "order.create", "visits": 4}]),
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &old).status,
        200
    );
    let s = stats(addr, "resolution=1s&sum=points&range=1m");
    assert_eq!(s["incomplete_cycles"], json!([cycle + 10_000]));
    let s = stats(addr, "resolution=1s&point=order.refund&range=1m");
    assert_eq!(s["incomplete_cycles"], json!([]), "other points are whole");

    // Bad parameters name themselves.
    for (query, word) in [
        ("resolution=2s", "resolution"),
        ("range=5 minutes", "range"),
        ("range=0", "range"),
        ("sum=instances", "sum"),
        ("resolution=1s&from=10&to=5", "from"),
    ] {
        let r = get(
            addr,
            &format!(
                "/api/v1/apps/shop/orders/stats?{}",
                query.replace(' ', "%20")
            ),
            None,
        );
        assert_eq!(r.status, 400, "{query}: {}", r.text());
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(word),
            "{query}: {}",
            r.text()
        );
    }
}

#[test]
fn malformed_seconds_reject_their_point_naming_the_field() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let good = buckets(|_| [1, 1, 0, 0, 0]);
    let mut nine = good.clone();
    nine.as_array_mut().unwrap().pop();
    let mut four = good.clone();
    four[5] = json!([1, 1, 0, 0]);
    let mut negative = good.clone();
    negative[2] = json!([1, 1, 0, -3, 0]);
    let mut passes = good.clone();
    passes[8] = json!([5, 5, 2, 0, 0]);
    for (seconds, by_reason, field) in [
        (nine, Value::Null, "points[0].seconds"),
        (
            json!({"0": [1, 1, 0, 0, 0]}),
            Value::Null,
            "points[0].seconds",
        ),
        (four, Value::Null, "points[0].seconds[5]"),
        (negative, Value::Null, "points[0].seconds[2][3]"),
        (passes, Value::Null, "points[0].seconds[8]"),
        (
            good.clone(),
            json!({"visits": [0, 0, 0]}),
            "points[0].seconds_by_reason.visits",
        ),
        (
            good.clone(),
            json!({"visits": [0, 0, 0, 0, 0, 0, 0, 0, 0, 1.5]}),
            "points[0].seconds_by_reason.visits[9]",
        ),
        (
            Value::Null,
            json!({"visits": []}),
            "points[0].seconds_by_reason",
        ),
    ] {
        let hb = heartbeat(
            "i-1",
            cycle,
            json!([{"name": "order.create", "visits": 10, "seconds": seconds,
                    "seconds_by_reason": by_reason}]),
        );
        // The point is left out and reported; the heartbeat itself is taken.
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
        assert_eq!(r.status, 200, "{field}: {}", r.text());
        assert_eq!(r.json()["rejected"][0]["field"], field, "{}", r.text());
        assert_eq!(r.json()["points"], 0, "{}", r.text());
    }
    // SDS: the same rules under `client.pointInfoMap.<point>`, with SDS's errorMsg.
    let client = json!({"appGroupName": "shop", "appName": "orders", "hostname": "h",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": 10, "seconds": good,
                                          "secondsByReason": {"visits": "all"}}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&sds_form(&client)),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["rejected"][0]["field"],
        "client.pointInfoMap.order.create.secondsByReason.visits"
    );
    assert!(r.json()["rejected"][0]["message"].is_string());
    assert_eq!(r.json()["points"], 0);
    // Nothing of the points was stored: no cycle, no second.
    let range = format!("from={cycle}&to={}", cycle + 10_000);
    assert_eq!(stats(addr, &range)["rows"], json!([]));
    assert_eq!(
        stats(addr, &format!("resolution=1s&{range}"))["rows"],
        json!([])
    );
}

#[test]
fn seconds_are_kept_for_their_own_retention_and_cycles_for_theirs() {
    let (mut c, manual) = manual_config(StorageConfig::Memory);
    c.seconds_retention = Duration::from_secs(60);
    c.prune_interval = Duration::from_millis(20);
    let server = start(c);
    let addr = server.addr();
    let cycle = last_closed_cycle(now_ms(&manual));
    let hb = heartbeat(
        "i-1",
        cycle,
        json!([{"name": "order.create", "visits": 10,
                "seconds": buckets(|_| [1, 1, 0, 0, 0])}]),
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &hb).status,
        200
    );
    let range = format!("from={cycle}&to={}", cycle + 10_000);
    let s = stats(addr, &format!("resolution=1s&{range}"));
    assert_eq!(s["rows"].as_array().unwrap().len(), 10);
    assert_eq!(s["seconds_retention_ms"], 60_000);
    assert_eq!(s["retained_from_ms"], now_ms(&manual) - 60_000);
    // Two minutes later the seconds are gone, the cycle stays.
    manual.advance(Duration::from_secs(120));
    wait_for(Duration::from_secs(10), "the seconds to be pruned", || {
        let rows = stats(addr, &format!("resolution=1s&{range}"))["rows"].clone();
        (rows == json!([])).then_some(())
    });
    assert_eq!(stats(addr, &range)["rows"][0]["visits"], 10);
    let s = stats(addr, &format!("resolution=1s&{range}"));
    assert!(s["retained_from_ms"].as_i64().unwrap() > s["from_ms"].as_i64().unwrap());
}
