//! The live view over the API: the heartbeat's 1-second buckets in both protocols,
//! with and without them, refused with the field at fault, summed over instances
//! (and points), the cycles an older client leaves without seconds, ranges ending
//! where the heartbeats are in, and the seconds' own retention; the seconds' call
//! durations (mean and max) summed over instances, absent from older clients, and
//! malformed ones left out.

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
        // Once a subtraction overflow (a panic in debug builds).
        ("from=1&to=-9223372036854775800", "to"),
        ("to=-9223372036854775800", "to"),
        ("from=-9223372036854775808", "from"),
        ("to=9223372036854775807&range=1h", "to"),
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

/// Ten `[measured, sum_us, max_us]`.
fn durations(f: impl Fn(u64) -> [u64; 3]) -> Value {
    Value::Array((0..10).map(|k| json!(f(k))).collect())
}

/// Durations of second `k` of instance 1: `k + 1` calls of 1.5 ms on average, the
/// longest `1.5 + k / 10` ms; none measured in second 3.
fn d1(k: u64) -> [u64; 3] {
    if k == 3 {
        return [0; 3];
    }
    [k + 1, 1_500 * (k + 1), 1_500 + 100 * k]
}

/// Durations of second `k` of instance 2: 4 calls of 10 ms on average in even
/// seconds, the longest `25 - 2k` ms; none in odd ones.
fn d2(k: u64) -> [u64; 3] {
    if k % 2 == 1 {
        return [0; 3];
    }
    [4, 40_000, 25_000 - 2_000 * k]
}

/// The durations of a 1-second row: second, measured, sum_us, mean_us, max_us.
type DurationRow = (i64, u64, u64, Option<f64>, Option<u64>);

/// The durations of each 1-second row.
fn duration_rows(s: &Value) -> Vec<DurationRow> {
    s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["second_start_ms"].as_i64().unwrap(),
                r["measured"].as_u64().unwrap(),
                r["sum_us"].as_u64().unwrap(),
                r["mean_us"].as_f64(),
                r["max_us"].as_u64(),
            )
        })
        .collect()
}

/// What a second's row says of `[measured, sum_us, max_us]` summed (the max the
/// longest).
fn expected_row(second: i64, parts: &[[u64; 3]]) -> DurationRow {
    let measured: u64 = parts.iter().map(|d| d[0]).sum();
    let sum: u64 = parts.iter().map(|d| d[1]).sum();
    let max = parts.iter().map(|d| d[2]).max().unwrap_or(0);
    (
        second,
        measured,
        sum,
        (measured > 0).then(|| sum as f64 / measured as f64),
        (measured > 0).then_some(max),
    )
}

#[test]
fn call_durations_are_summed_over_instances_in_both_protocols() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    manual.advance(Duration::from_secs(6));
    let cycle = last_closed_cycle(now_ms(&manual));
    let visits = |f: fn(u64) -> [u64; 5]| (0..10).map(|k| f(k)[0]).sum::<u64>();
    // Instance 1, our JSON protocol: k + 1 visits in second k; a second point with
    // one long call in second 0.
    let first = |k: u64| [k + 1, k + 1, 0, 0, 0];
    let refund = |k: u64| [u64::from(k == 0), u64::from(k == 0), 0, 0, 0];
    let long = |k: u64| {
        if k == 0 {
            [1, 700_000, 700_000]
        } else {
            [0; 3]
        }
    };
    let hb1 = heartbeat(
        "i-1",
        cycle,
        json!([{"name": "order.create", "visits": visits(first),
                "seconds": buckets(first), "seconds_durations": durations(d1)},
               {"name": "order.refund", "visits": 1,
                "seconds": buckets(refund), "seconds_durations": durations(long)}]),
    );
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb1);
    assert_eq!(
        (r.status, r.json()["rejected"].clone()),
        (200, json!([])),
        "{}",
        r.text()
    );
    // Instance 2, SDS's protocol: 10 visits in even seconds.
    let client = json!({"appGroupName": "shop", "appName": "orders", "ip": "10.0.0.8",
        "hostname": "web-8", "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": visits(two), "timeoutNum": 1,
                                          "seconds": buckets(two),
                                          "secondsDurations": durations(d2)}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&sds_form(&client)),
    );
    assert_eq!(
        (r.status, r.json()["rejected"].clone()),
        (200, json!([])),
        "{}",
        r.text()
    );
    // A retry of instance 1 is not counted twice.
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb1);
    assert_eq!(r.json()["result"], "duplicate");

    let range = format!("from={cycle}&to={}", cycle + 10_000);
    let at = |k: u64| cycle + 1_000 * k as i64;
    // One point: measured and sums added, the mean their quotient, the max the
    // longest of either instance.
    let s = stats(addr, &format!("resolution=1s&point=order.create&{range}"));
    let expected: Vec<_> = (0..10)
        .map(|k| expected_row(at(k), &[d1(k), d2(k)]))
        .collect();
    assert_eq!(duration_rows(&s), expected);
    // Second 3: traffic but no measured call: no mean, no max (not 0).
    let third = &s["rows"][3];
    assert_eq!(
        (
            third["visits"].clone(),
            third["measured"].clone(),
            third["mean_us"].clone(),
            third["max_us"].clone()
        ),
        (json!(4), json!(0), Value::Null, Value::Null),
        "{third}"
    );
    // Second 0: (1 * 1.5 ms + 4 * 10 ms) / 5 calls, the longest instance 2's 25 ms;
    // second 9: instance 1's alone.
    assert_eq!(
        (
            s["rows"][0]["mean_us"].clone(),
            s["rows"][0]["max_us"].clone()
        ),
        (json!(8_300.0), json!(25_000))
    );
    assert_eq!(
        (
            s["rows"][9]["mean_us"].clone(),
            s["rows"][9]["max_us"].clone()
        ),
        (json!(1_500.0), json!(2_400))
    );
    // Second 8: instance 2's 9 ms is longer than instance 1's 2.3 ms.
    assert_eq!(s["rows"][8]["max_us"], 9_000);
    // Per point: order.refund's row has its own.
    let s = stats(addr, &format!("resolution=1s&{range}"));
    let rows = duration_rows(&s);
    assert_eq!(rows.len(), 11);
    assert_eq!(rows[..10], expected[..]);
    assert_eq!(rows[10], expected_row(at(0), &[long(0)]));
    assert_eq!(s["rows"][10]["point"], "order.refund");
    // Summed over points: second 0 has the three calls' figures, its max the 700 ms.
    let s = stats(addr, &format!("resolution=1s&sum=points&{range}"));
    let summed = duration_rows(&s);
    assert_eq!(summed[0], expected_row(at(0), &[d1(0), d2(0), long(0)]));
    assert_eq!(summed[0].4, Some(700_000));
    assert_eq!(summed[1..], expected[1..]);
    // The 10-s cycles have no durations.
    let s = stats(addr, &format!("sum=points&{range}"));
    assert!(s["rows"][0].get("measured").is_none(), "{s}");
}

/// An older client's heartbeat (seconds without `seconds_durations`), in either
/// protocol, still stores its seconds, without durations; beside a newer client's
/// in the same seconds, the mean and max are the newer client's alone. A malformed
/// `seconds_durations` is left out and reported, its point and seconds stored.
#[test]
fn seconds_without_durations_are_stored_without_them() {
    let (c, manual) = manual_config(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    manual.advance(Duration::from_secs(6));
    let cycle = last_closed_cycle(now_ms(&manual));
    let range = format!("from={cycle}&to={}", cycle + 10_000);
    let at = |k: u64| cycle + 1_000 * k as i64;
    let old = heartbeat(
        "old-1",
        cycle,
        json!([{"name": "order.create", "visits": 10,
                "seconds": buckets(|_| [1, 1, 0, 0, 0])}]),
    );
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &old);
    assert_eq!((r.status, r.json()["points"].clone()), (200, json!(1)));
    let s = stats(addr, &format!("resolution=1s&point=order.create&{range}"));
    assert_eq!(
        second_rows(&s),
        (0..10)
            .map(|k| (at(k), [1, 1, 0, 0, 0], 0, 1))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        duration_rows(&s),
        (0..10)
            .map(|k| (at(k), 0, 0, None, None))
            .collect::<Vec<_>>()
    );
    // SDS's old client, the same.
    let client = json!({"appGroupName": "shop", "appName": "orders", "hostname": "h",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": 20,
                                          "seconds": buckets(|_| [2, 2, 0, 0, 0])}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&sds_form(&client)),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A newer client: its durations alone make the mean and the max.
    let new = heartbeat(
        "new-1",
        cycle,
        json!([{"name": "order.create", "visits": 10,
                "seconds": buckets(|_| [1, 1, 0, 0, 0]),
                "seconds_durations": durations(d1)}]),
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &new).json()["rejected"],
        json!([])
    );
    let s = stats(addr, &format!("resolution=1s&point=order.create&{range}"));
    assert_eq!(
        second_rows(&s),
        (0..10)
            .map(|k| (at(k), [4, 4, 0, 0, 0], 0, 3))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        duration_rows(&s),
        (0..10)
            .map(|k| expected_row(at(k), &[d1(k)]))
            .collect::<Vec<_>>()
    );

    // Malformed durations: left out and reported, the point and its seconds kept.
    let next = cycle + 10_000;
    manual.advance(Duration::from_secs(10));
    let mut bad = durations(d1);
    bad[4] = json!([1, 10, 20]);
    for (instance, durations, field) in [
        ("bad-1", bad, "points[0].seconds_durations[4]"),
        ("bad-2", json!("fast"), "points[0].seconds_durations"),
    ] {
        let hb = heartbeat(
            instance,
            next,
            json!([{"name": "order.create", "visits": 10,
                    "seconds": buckets(|_| [1, 1, 0, 0, 0]),
                    "seconds_durations": durations}]),
        );
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["rejected"][0]["field"], field, "{}", r.text());
        assert_eq!(r.json()["points"], 1, "{}", r.text());
    }
    let client = json!({"appGroupName": "shop", "appName": "orders", "hostname": "h",
        "statisticsCycleTime": next + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": 10,
                                          "seconds": buckets(|_| [1, 1, 0, 0, 0]),
                                          "secondsDurations": [[1, 2, 3]]}}});
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
        "client.pointInfoMap.order.create.secondsDurations"
    );
    assert_eq!(r.json()["points"], 1);
    let s = stats(
        addr,
        &format!(
            "resolution=1s&point=order.create&from={next}&to={}",
            next + 10_000
        ),
    );
    assert_eq!(
        second_rows(&s),
        (0..10)
            .map(|k| (next + 1_000 * k as i64, [3, 3, 0, 0, 0], 0, 3))
            .collect::<Vec<_>>()
    );
    assert!(duration_rows(&s).iter().all(|r| r.1 == 0 && r.3.is_none()));
    assert_eq!(s["incomplete_cycles"], json!([]));
}
