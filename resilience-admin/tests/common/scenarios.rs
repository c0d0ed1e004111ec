//! Storage scenarios run against every store (SQLite in `storage.rs`, PostgreSQL in
//! `postgres.rs`), over the real HTTP API.

use super::*;
use resilience_admin::server::{open_store, AdminConfig};
use resilience_runtime::{Clock, ManualClock};
use serde_json::json;

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

pub fn manual(storage: StorageConfig) -> (AdminConfig, ManualClock) {
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    (c, manual)
}

pub fn now_ms(manual: &ManualClock) -> i64 {
    let c = Clock::manual(manual);
    c.unix_time(c.now()).as_millis() as i64
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
            enforcing: None,
            client: None,
            part: 0,
            parts: 1,
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

fn enforcing_hb(instance: &str, cycle: i64, entries: serde_json::Value) -> serde_json::Value {
    json!({"app_group": "shop", "app": "orders", "instance": instance, "cycle_start_ms": cycle,
           "enforcing": entries,
           "client": {"last_upload_error": format!("upload error of {cycle}"),
                      "last_pull_error": null, "from_cache": true, "uploads_dropped": 1,
                      "pull_failures": 2, "policies_rejected": 3}})
}

fn point_instances(addr: std::net::SocketAddr, point: &str) -> serde_json::Value {
    let r = get(
        addr,
        &format!("/api/v1/apps/shop/orders/points/{point}/instances"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// What each instance enforces and its client's health: stored, replaced (not
/// appended) by the next report, not undone by a late retry, kept across a restart,
/// and forgotten with the retention.
pub fn enforcement(storage: StorageConfig) {
    let (c, manual) = manual(storage.clone());
    let cycle = last_closed_cycle(now_ms(&manual));
    let local = json!({"breaker": {"algorithm": "classic", "consecutive_failures": 3}});
    let first = enforcing_hb(
        "a",
        cycle,
        json!([{"name": "order.create", "digest": "0123456789abcdef",
                "origins": {"rules": {"source": "console", "version": 1},
                            "breaker": {"source": "file:/etc/p.toml", "version": 2}},
                "local": local,
                "breaker": {"kind": "classic", "state": "open",
                            "since_ms": cycle + 2_000, "transitions": 1}},
               {"name": "order.cancel", "digest": "none",
                "origins": {"rules": {"source": "code", "version": 1}}}]),
    );
    {
        let server = start(c.clone());
        let addr = server.addr();
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &first);
        assert_eq!(r.status, 200, "{}", r.text());
        server.stop();
    }
    // Across a restart.
    let server = start(c.clone());
    let addr = server.addr();
    let e = point_instances(addr, "order.create");
    let i = &e["instances"][0];
    assert_eq!(i["instance"], "a");
    assert_eq!(i["digest"], "0123456789abcdef");
    assert_eq!(i["origins"]["breaker"]["source"], "file:/etc/p.toml");
    assert_eq!(i["breaker"]["state"], "open");
    assert_eq!(i["breaker"]["since_ms"], cycle + 2_000);
    assert_eq!(i["has_local"], true);
    assert_eq!(i["cycle_start_ms"], cycle);
    let l = get(
        addr,
        "/api/v1/apps/shop/orders/points/order.create/instances/a/local",
        None,
    )
    .json();
    assert_eq!(l["local"], local);
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let h = &inst["instances"][0]["client"];
    assert_eq!(
        h,
        &json!({"last_upload_error": format!("upload error of {cycle}"), "last_pull_error": null,
                "from_cache": true, "uploads_dropped": 1, "pull_failures": 2,
                "policies_rejected": 3})
    );
    assert_eq!(
        point_instances(addr, "order.cancel")["instances"][0]["instance"],
        "a"
    );
    // The next report replaces the whole list: order.cancel is no longer enforced.
    manual.advance(std::time::Duration::from_secs(10));
    let next = enforcing_hb(
        "a",
        cycle + 10_000,
        json!([{"name": "order.create", "digest": "none",
                "breaker": {"kind": "sre", "state": "closed", "since_ms": cycle, "transitions": 2}}]),
    );
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &next).status,
        200
    );
    assert_eq!(
        point_instances(addr, "order.cancel")["instances"],
        json!([])
    );
    let i = &point_instances(addr, "order.create")["instances"][0];
    assert_eq!(i["breaker"]["kind"], "sre");
    assert_eq!(i["has_local"], false);
    // A late retry of the older cycle does not undo the newer report.
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &first);
    assert_eq!(r.json()["result"], "duplicate");
    assert_eq!(
        point_instances(addr, "order.create")["instances"][0]["breaker"]["kind"],
        "sre"
    );
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    assert_eq!(
        inst["instances"][0]["client"]["last_upload_error"],
        format!("upload error of {}", cycle + 10_000)
    );
    // A heartbeat without the fields (an older client) leaves them as they are.
    let old = json!({"app_group": "shop", "app": "orders", "instance": "a",
                     "cycle_start_ms": cycle + 10_000});
    assert_eq!(
        post_json(addr, "/api/v1/heartbeat", Some(APP), &old).status,
        200
    );
    assert_eq!(
        point_instances(addr, "order.create")["instances"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    server.stop();
    // The retention forgets reports received before its limit.
    let store = open_store(&storage).unwrap();
    store.prune(now_ms(&manual) + 1).unwrap();
    let app = resilience_admin::model::AppKey::new("shop", "orders");
    assert!(store.enforcement(&app, None, true).unwrap().is_empty());
}

/// A database migrated from schema version 1 holding instance `old-1` of shop/orders
/// (policy version 2): the instance is listed without health, and a new heartbeat
/// stores what it enforces and its health.
pub fn migrated_v1(storage: StorageConfig) {
    let (c, manual) = manual(storage);
    let server = start(c);
    let addr = server.addr();
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let old = &inst["instances"][0];
    assert_eq!(
        (
            old["instance"].clone(),
            old["policy_version"].clone(),
            old["client"].clone()
        ),
        (json!("old-1"), json!(2), json!(null))
    );
    let cycle = last_closed_cycle(now_ms(&manual));
    let r = post_json(
        addr,
        "/api/v1/heartbeat",
        Some(APP),
        &enforcing_hb(
            "new-1",
            cycle,
            json!([{"name": "p", "digest": "none",
                    "origins": {"rules": {"source": "code", "version": 1}}}]),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        point_instances(addr, "p")["instances"][0]["instance"],
        "new-1"
    );
    let inst = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let names: Vec<_> = inst["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["instance"].clone(), i["client"]["from_cache"].clone()))
        .collect();
    assert_eq!(
        names,
        [(json!("new-1"), json!(true)), (json!("old-1"), json!(null))]
    );
}

/// A heartbeat of the store's own model with the given seconds of point `p`
/// (`[visits, passes, downgrades, exceptions, timeouts]`, the `visits` reason for the
/// downgrades) and of point `q` (one visit in second 0, no seconds when `None`).
fn seconds_hb(
    instance: &str,
    cycle: i64,
    p: Option<[[u64; 5]; 10]>,
) -> resilience_admin::model::Heartbeat {
    use resilience_admin::model::{
        AppKey, CycleSeconds, Heartbeat, PointCycle, Protocol, SecondCounts,
    };
    let cycle_of = |name: &str, s: Option<[[u64; 5]; 10]>| {
        let seconds = s.map(|s| CycleSeconds {
            seconds: s.map(
                |[visits, passes, downgrades, exceptions, timeouts]| SecondCounts {
                    visits,
                    passes,
                    downgrades,
                    exceptions,
                    timeouts,
                    ..SecondCounts::default()
                },
            ),
            downgrades_by_reason: [("visits".to_owned(), s.map(|b| b[2]))].into(),
        });
        let sum = |i: usize| s.map_or(1, |s| s.iter().map(|b| b[i]).sum());
        PointCycle {
            point: name.into(),
            visits: sum(0),
            passes: sum(1),
            downgrades: if s.is_some() { sum(2) } else { 0 },
            exceptions: if s.is_some() { sum(3) } else { 0 },
            timeouts: if s.is_some() { sum(4) } else { 0 },
            peak_concurrency: 1,
            downgrades_by_reason: Default::default(),
            seconds,
            ..PointCycle::default()
        }
    };
    let mut q = [[0; 5]; 10];
    q[0] = [1, 1, 0, 0, 0];
    Heartbeat {
        app: AppKey::new("g", "a"),
        instance: instance.into(),
        host: String::new(),
        ip: "127.0.0.1".into(),
        protocol: Protocol::Json,
        cycle_start_ms: cycle,
        points: vec![cycle_of("p", p), cycle_of("q", p.map(|_| q))],
        known_points: vec![],
        declared_points: vec![],
        policy_version: None,
        enforcing: None,
        client: None,
        part: 0,
        parts: 1,
    }
}

/// Sets the call durations (`[measured, sum_us, max_us]` of each second) of point
/// `p` of a [`seconds_hb`] heartbeat.
fn with_durations(
    mut hb: resilience_admin::model::Heartbeat,
    f: impl Fn(usize) -> [u64; 3],
) -> resilience_admin::model::Heartbeat {
    let seconds = hb.points[0].seconds.as_mut().expect("p has seconds");
    for (k, c) in seconds.seconds.iter_mut().enumerate() {
        [c.measured, c.sum_us, c.max_us] = f(k);
    }
    hb
}

/// Durations of second `k` of instance `a` of the seconds scenario (none in the idle
/// second 5)...
fn durations_a(k: usize) -> [u64; 3] {
    let k = k as u64;
    if k == 5 {
        return [0; 3];
    }
    [k + 1, 3_000 * (k + 1), 2_000 + k]
}

/// ...and of instance `b`: its longest call is the longest up to second 7, `a`'s
/// from then on; none measured in second 1 (calls shorter than a microsecond in
/// second 2).
fn durations_b(k: usize) -> [u64; 3] {
    match k {
        1 | 5 => [0; 3],
        2 => [4, 0, 0],
        _ => [2, 10_000, 9_000 - 1_000 * k as u64],
    }
}

/// The seconds of second `k` of a scenario: `k + 1` visits, `k % 3` of them
/// downgraded, an exception in even seconds, a timeout in second 9; second 5 idle.
fn busy_seconds(scale: u64) -> [[u64; 5]; 10] {
    std::array::from_fn(|k| {
        let k = k as u64;
        if k == 5 {
            return [0; 5];
        }
        let visits = (k + 1) * scale;
        let downgrades = (k % 3).min(visits);
        [
            visits,
            visits - downgrades,
            downgrades,
            u64::from(k.is_multiple_of(2)),
            u64::from(k == 9),
        ]
    })
}

/// The live view's 1-second buckets in the store: summed over instances (a retry is
/// not counted twice; of the call durations, the longest call of any instance),
/// idle seconds not stored, per point and summed over points, cycles without
/// seconds found, kept across a reopening, pruned on their own.
pub fn seconds(storage: StorageConfig) {
    use resilience_admin::model::AppKey;
    let app = AppKey::new("g", "a");
    let cycle = 1_767_225_600_000_i64;
    {
        let store = open_store(&storage).unwrap();
        let (a, b) = (busy_seconds(1), busy_seconds(10));
        let hb_a = with_durations(seconds_hb("a", cycle, Some(a)), durations_a);
        store.record_heartbeat(&hb_a, cycle + 15_000).unwrap();
        store
            .record_heartbeat(
                &with_durations(seconds_hb("b", cycle, Some(b)), durations_b),
                cycle + 15_000,
            )
            .unwrap();
        // A retry, and an older client's cycle (no seconds) a cycle later.
        store.record_heartbeat(&hb_a, cycle + 16_000).unwrap();
        store
            .record_heartbeat(&seconds_hb("old", cycle + 10_000, None), cycle + 25_000)
            .unwrap();
    }
    let store = open_store(&storage).unwrap();
    let rows = store
        .seconds(&app, Some("p"), false, cycle, cycle + 20_000, 100)
        .unwrap();
    let (a, b) = (busy_seconds(1), busy_seconds(10));
    let expected: Vec<(i64, [u64; 5], u64)> = (0..10)
        .filter(|&k| k != 5)
        .map(|k| {
            (
                cycle + 1_000 * k as i64,
                std::array::from_fn(|i| a[k][i] + b[k][i]),
                (k % 3) as u64 * 2,
            )
        })
        .collect();
    let got: Vec<(i64, [u64; 5], u64)> = rows
        .iter()
        .map(|r| {
            let c = &r.counts;
            (
                r.second_start_ms,
                [c.visits, c.passes, c.downgrades, c.exceptions, c.timeouts],
                r.downgrades_by_reason.get("visits").copied().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(got, expected);
    // Durations: counts and sums added, the longest of either instance.
    let durations: Vec<[u64; 3]> = rows
        .iter()
        .map(|r| [r.counts.measured, r.counts.sum_us, r.counts.max_us])
        .collect();
    let want: Vec<[u64; 3]> = (0..10)
        .filter(|&k| k != 5)
        .map(|k| {
            let (a, b) = (durations_a(k), durations_b(k));
            [a[0] + b[0], a[1] + b[1], a[2].max(b[2])]
        })
        .collect();
    assert_eq!(durations, want);
    assert_eq!(want[0][2], 9_000, "b's in second 0");
    assert_eq!(want[8][2], 2_009, "a's in second 9");
    assert!(rows
        .iter()
        .all(|r| r.instances == 2 && r.point.as_deref() == Some("p")));
    assert!(
        rows.iter()
            .all(|r| r.downgrades_by_reason.values().all(|&n| n > 0)),
        "no zero reasons: {rows:?}"
    );
    // Every point: p's rows then q's one (second 0 of both instances).
    let all = store
        .seconds(&app, None, false, cycle, cycle + 20_000, 100)
        .unwrap();
    assert_eq!(all.len(), 10);
    assert_eq!(
        (
            all[9].point.as_deref(),
            all[9].second_start_ms,
            all[9].counts.visits
        ),
        (Some("q"), cycle, 2)
    );
    // Summed over points: one row per second.
    let summed = store
        .seconds(&app, None, true, cycle, cycle + 20_000, 100)
        .unwrap();
    assert_eq!(summed.len(), 9);
    assert_eq!(summed[0].point, None);
    assert_eq!(summed[0].counts.visits, a[0][0] + b[0][0] + 2);
    assert_eq!(summed[1].downgrades_by_reason["visits"], 2);
    assert_eq!(summed[1].counts, rows[1].counts);
    // q measured nothing: second 0 has p's durations only.
    assert_eq!(
        [
            summed[0].counts.measured,
            summed[0].counts.sum_us,
            summed[0].counts.max_us
        ],
        want[0]
    );
    // Limits and ranges.
    assert_eq!(
        store
            .seconds(&app, Some("p"), false, cycle, cycle + 20_000, 3)
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        store
            .seconds(&app, Some("p"), false, cycle + 6_000, cycle + 8_000, 100)
            .unwrap()
            .iter()
            .map(|r| r.second_start_ms)
            .collect::<Vec<_>>(),
        [cycle + 6_000, cycle + 7_000]
    );
    // The old client's cycle lacks seconds, for each of its points.
    for point in [None, Some("p"), Some("q")] {
        assert_eq!(
            store
                .cycles_without_seconds(&app, point, cycle, cycle + 20_000)
                .unwrap(),
            [cycle + 10_000],
            "{point:?}"
        );
    }
    assert!(store
        .cycles_without_seconds(&app, None, cycle, cycle + 10_000)
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .cycles_without_seconds(&app, None, cycle + 15_000, cycle + 16_000)
            .unwrap(),
        [cycle + 10_000],
        "a cycle overlapping the range counts"
    );
    // 10-s cycles summed over points.
    let cycles = store
        .stats_summed(&app, cycle, cycle + 20_000, 100)
        .unwrap();
    assert_eq!(
        cycles
            .iter()
            .map(|c| (c.cycle_start_ms, c.counts.visits, c.instances))
            .collect::<Vec<_>>(),
        [
            (
                cycle,
                rows.iter().map(|r| r.counts.visits).sum::<u64>() + 2,
                2
            ),
            (cycle + 10_000, 2, 1)
        ]
    );
    assert_eq!(cycles[0].counts.downgrades_by_reason, Default::default());
    // Seconds are pruned on their own; cycles stay.
    assert_eq!(store.prune_seconds(cycle + 3_000).unwrap(), 3 + 1);
    assert_eq!(
        store
            .seconds(&app, Some("p"), false, 0, i64::MAX, 100)
            .unwrap()[0]
            .second_start_ms,
        cycle + 3_000
    );
    assert_eq!(store.stats(&app, None, 0, i64::MAX, 100).unwrap().len(), 4);
    assert_eq!(store.prune_seconds(i64::MAX).unwrap(), 6);
    assert!(store
        .seconds(&app, None, true, 0, i64::MAX, 100)
        .unwrap()
        .is_empty());
}

/// A database of schema version 2 (before the 1-second buckets) holding one cycle of
/// shop/orders' `order.create` at `cycle`: the cycle is kept (and counts as without
/// seconds), and a new heartbeat stores its seconds.
pub fn migrated_v2(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}",
            cycle + 20_000
        ),
        None,
    )
    .json();
    assert_eq!(s["rows"][0]["visits"], 7, "{s}");
    let next = cycle + 10_000;
    let body = json!({"app_group": "shop", "app": "orders", "instance": "new-1",
        "cycle_start_ms": next,
        "points": [{"name": "order.create", "visits": 3,
                    "seconds": [[1, 1, 0, 0, 0], [2, 2, 0, 0, 0], [0, 0, 0, 0, 0],
                                [0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0],
                                [0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0],
                                [0, 0, 0, 0, 0]]}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?resolution=1s&from={cycle}&to={}",
            cycle + 20_000
        ),
        None,
    )
    .json();
    assert_eq!(s["incomplete_cycles"], json!([cycle]), "{s}");
    let rows: Vec<_> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["second_start_ms"].clone(), r["visits"].clone()))
        .collect();
    assert_eq!(
        rows,
        [(json!(next), json!(1)), (json!(next + 1_000), json!(2))]
    );
}

/// A database of schema version 4 (before the seconds' call durations) holding
/// second 3 of the cycle at `cycle` of shop/orders' `order.create` (7 visits): the
/// second is kept, without durations, and a new heartbeat stores its durations.
pub fn migrated_v4(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    let next = cycle + 10_000;
    let mut seconds = vec![json!([0, 0, 0, 0, 0]); 10];
    seconds[0] = json!([2, 2, 0, 0, 0]);
    let mut durations = vec![json!([0, 0, 0]); 10];
    durations[0] = json!([2, 5_000, 4_000]);
    let body = json!({"app_group": "shop", "app": "orders", "instance": "new-1",
        "cycle_start_ms": next,
        "points": [{"name": "order.create", "visits": 2, "seconds": seconds,
                    "seconds_durations": durations}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?resolution=1s&from={cycle}&to={}",
            cycle + 20_000
        ),
        None,
    )
    .json();
    let rows: Vec<_> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["second_start_ms"].clone(),
                r["visits"].clone(),
                r["measured"].clone(),
                r["mean_us"].clone(),
                r["max_us"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                json!(cycle + 3_000),
                json!(7),
                json!(0),
                json!(null),
                json!(null)
            ),
            (
                json!(next),
                json!(2),
                json!(2),
                json!(2_500.0),
                json!(4_000)
            ),
        ],
        "{s}"
    );
}

/// `GET .../points` of an app of 10 000 points with three cycles of history, sent in
/// parts of 1 000 points; prints the time it takes (a bound of 5 s only catches a
/// return to one query per point) and checks each point's latest cycle.
pub fn points_list_of_ten_thousand(storage: StorageConfig, label: &str) {
    const POINTS: usize = 10_000;
    const PER_PART: usize = 1_000;
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    let server = start(c);
    let addr = server.addr();
    let latest = last_closed_cycle(now_ms(&manual));
    let started = std::time::Instant::now();
    for cycle in [latest - 20_000, latest - 10_000, latest] {
        let k = (latest - cycle) / 10_000;
        for part in 0..POINTS / PER_PART {
            let points: Vec<serde_json::Value> = (part * PER_PART..(part + 1) * PER_PART)
                // Point i has no traffic in the latest cycle when i % 10 == 0.
                .filter(|i| k > 0 || i % 10 != 0)
                .map(|i| {
                    let visits = (i % 5 + 1) as u64 + k as u64;
                    json!({"name": format!("p.{i:05}"), "visits": visits, "passes": visits - 1,
                           "downgrades": 1, "downgrades_by_reason": {"visits": 1}})
                })
                .collect();
            let body = json!({"app_group": "shop", "app": "orders", "instance": "i-1",
                              "cycle_start_ms": cycle, "part": part,
                              "parts": POINTS / PER_PART, "points": points});
            let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
    println!(
        "{label}: 3 cycles of {POINTS} points stored in {:?}",
        started.elapsed()
    );
    let mut times = Vec::new();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let r = get(addr, "/api/v1/apps/shop/orders/points", None);
        times.push(started.elapsed());
        assert_eq!(r.status, 200, "{}", r.text());
        let list = r.json();
        let points = list["points"].as_array().unwrap();
        assert_eq!(points.len(), POINTS);
        for (i, p) in points.iter().enumerate() {
            assert_eq!(p["name"], format!("p.{i:05}"));
            let cycle = &p["last_cycle"];
            let k = if i % 10 == 0 { 1 } else { 0 };
            assert_eq!(cycle["cycle_start_ms"], latest - k * 10_000, "{p}");
            assert_eq!(cycle["visits"], (i % 5 + 1) as i64 + k, "{p}");
            assert_eq!(cycle["downgrades_by_reason"], json!({"visits": 1}), "{p}");
        }
    }
    println!("{label}: GET .../points of {POINTS} points took {times:?}");
    assert!(
        times.iter().all(|t| t.as_secs() < 5),
        "{label}: {times:?} (one query per point again?)"
    );
    server.stop();
}

/// Cancelled calls and retry counters: summed over instances (one speaking our JSON
/// protocol, one SDS's), not counted twice for a duplicate, 0 where an instance does
/// not send them, in the stats API per point and summed over points, in the point
/// list's latest cycle, and kept across a restart.
pub fn cancellations_and_retries(storage: StorageConfig) {
    let (c, manual) = manual(storage);
    let cycle = last_closed_cycle(now_ms(&manual));
    let server = start(c.clone());
    let addr = server.addr();
    let json_hb = json!({"app_group": "shop", "app": "orders", "instance": "a",
        "cycle_start_ms": cycle,
        "points": [
            {"name": "order.create", "visits": 10, "timeouts": 1, "cancelled": 3,
             "retry": {"calls": 8, "attempts": 11, "retries": 3, "exhausted": 1,
                       "refused_by_budget": 2}},
            {"name": "order.refund", "visits": 4, "cancelled": 1,
             "retry": {"calls": 1, "attempts": 2, "retries": 1, "exhausted": 0,
                       "refused_by_budget": 0, "hedges": 1, "cancelled": 1}}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &json_hb);
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &json_hb);
    assert_eq!(r.json()["result"], "duplicate");
    let client = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "b",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {"order.create": {"visitNum": 5, "cancelledNum": 2,
            "retry": {"calls": 4, "attempts": 6, "retries": 2, "exhausted": 0,
                      "refused_by_budget": 1, "hedges": 3, "cancelled": 2}}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&client.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // An older client: neither.
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("c", cycle, 2, 0));
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
    let create = json!({"calls": 12, "attempts": 17, "retries": 5, "exhausted": 1,
                        "refused_by_budget": 3, "hedges": 3, "cancelled": 2});
    let refund = json!({"calls": 1, "attempts": 2, "retries": 1, "exhausted": 0,
                        "refused_by_budget": 0, "hedges": 1, "cancelled": 1});
    let summed = json!({"calls": 13, "attempts": 19, "retries": 6, "exhausted": 1,
                        "refused_by_budget": 3, "hedges": 4, "cancelled": 3});
    let check = |addr: std::net::SocketAddr| {
        let range = format!("from={cycle}&to={}", cycle + 10_000);
        let s = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}"),
            None,
        )
        .json();
        let rows: Vec<_> = s["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["point"].clone(),
                    r["visits"].clone(),
                    r["timeouts"].clone(),
                    r["cancelled"].clone(),
                    r["retry"].clone(),
                    r["instances"].clone(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    json!("order.create"),
                    json!(17),
                    json!(1),
                    json!(5),
                    create.clone(),
                    json!(3)
                ),
                (
                    json!("order.refund"),
                    json!(4),
                    json!(0),
                    json!(1),
                    refund.clone(),
                    json!(1)
                ),
            ],
            "{s}"
        );
        let s = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}&sum=points"),
            None,
        )
        .json();
        assert_eq!(
            (
                s["rows"][0]["cancelled"].clone(),
                s["rows"][0]["retry"].clone()
            ),
            (json!(6), summed.clone()),
            "{s}"
        );
        let one = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}&point=order.refund"),
            None,
        )
        .json();
        assert_eq!(one["rows"][0]["retry"], refund, "{one}");
        let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
        let last = |name: &str| {
            points["points"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap()["last_cycle"]
                .clone()
        };
        assert_eq!(last("order.create")["cancelled"], 5, "{points}");
        assert_eq!(last("order.create")["retry"], create, "{points}");
        assert_eq!(last("order.refund")["retry"], refund, "{points}");
        // A declared point without traffic has no cycle at all.
        assert!(last("order.idle").is_null(), "{points}");
    };
    check(addr);
    server.stop();
    let server = start(c);
    check(server.addr());
    // The next cycle of the older client only: zeros.
    let addr = server.addr();
    let next = cycle + 10_000;
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("c", next, 2, 0));
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={next}&to={}",
            next + 10_000
        ),
        None,
    )
    .json();
    assert_eq!(
        (
            s["rows"][0]["cancelled"].clone(),
            s["rows"][0]["retry"].clone()
        ),
        (
            json!(0),
            json!({"calls": 0, "attempts": 0, "retries": 0, "exhausted": 0,
                   "refused_by_budget": 0, "hedges": 0, "cancelled": 0})
        ),
        "{s}"
    );
}

/// A database of schema version 5 (before cancelled calls and retry counters)
/// holding a cycle at `cycle` of shop/orders' `order.create` (7 visits): the cycle is
/// kept, with zeros for them, and a new heartbeat stores its own.
pub fn migrated_v5(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    let next = cycle + 10_000;
    let body = json!({"app_group": "shop", "app": "orders", "instance": "new-1",
        "cycle_start_ms": next,
        "points": [{"name": "order.create", "visits": 2, "cancelled": 1,
                    "retry": {"calls": 2, "attempts": 3, "retries": 1}}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}",
            cycle + 20_000
        ),
        None,
    )
    .json();
    let rows: Vec<_> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["cycle_start_ms"].clone(),
                r["visits"].clone(),
                r["cancelled"].clone(),
                r["retry"]["calls"].clone(),
                r["retry"]["attempts"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (json!(cycle), json!(7), json!(0), json!(0), json!(0)),
            (json!(next), json!(2), json!(1), json!(2), json!(3)),
        ],
        "{s}"
    );
}

/// Concurrency queues: counts, `waiting` and `wait_ns` summed over instances (one
/// speaking our JSON protocol, one SDS's), `peak_waiting` and `max_wait_ns` the
/// largest, a duplicate not counted twice, `null` where no instance reported a queue,
/// in the stats API per point and over points, in the point list's latest cycle, and
/// kept across a restart.
pub fn queues(storage: StorageConfig) {
    let (c, manual) = manual(storage);
    let cycle = last_closed_cycle(now_ms(&manual));
    let server = start(c.clone());
    let addr = server.addr();
    let json_hb = json!({"app_group": "shop", "app": "orders", "instance": "a",
        "cycle_start_ms": cycle,
        "points": [
            {"name": "order.create", "visits": 16, "downgrades": 6,
             "downgrades_by_reason": {"queue_full": 4, "queue_timeout": 2},
             "queue": {"waiting": 1, "peak_waiting": 3, "admitted": 10, "timed_out": 2,
                       "cancelled": 1, "refused": 0, "full": 4, "evicted": 2,
                       "wait_ns": 50_000_000, "max_wait_ns": 9_000_000}},
            {"name": "order.refund", "visits": 4}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &json_hb);
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &json_hb);
    assert_eq!(r.json()["result"], "duplicate");
    let client = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "b",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {
            "order.create": {"visitNum": 5, "queue": {"waiting": 2, "peak_waiting": 5,
                "admitted": 3, "refused": 1, "evicted": 1, "wait_ns": 6_000_000,
                "max_wait_ns": 4_000_000}},
            "order.list": {"visitNum": 1, "queue": {"peak_waiting": 7, "admitted": 1,
                "wait_ns": 1_000, "max_wait_ns": 1_000}}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&client.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // An older client: no queue.
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("c", cycle, 2, 0));
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
    let create = json!({"waiting": 3, "peak_waiting": 5, "admitted": 13, "timed_out": 2,
                        "cancelled": 1, "refused": 1, "full": 4, "evicted": 3,
                        "wait_ns": 56_000_000,
                        "max_wait_ns": 9_000_000});
    let list = json!({"waiting": 0, "peak_waiting": 7, "admitted": 1, "timed_out": 0,
                      "cancelled": 0, "refused": 0, "full": 0, "evicted": 0,
                      "wait_ns": 1_000,
                      "max_wait_ns": 1_000});
    let summed = json!({"waiting": 3, "peak_waiting": 7, "admitted": 14, "timed_out": 2,
                        "cancelled": 1, "refused": 1, "full": 4, "evicted": 3,
                        "wait_ns": 56_001_000,
                        "max_wait_ns": 9_000_000});
    let check = |addr: std::net::SocketAddr| {
        let range = format!("from={cycle}&to={}", cycle + 10_000);
        let s = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}"),
            None,
        )
        .json();
        let rows: Vec<_> = s["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["point"].clone(),
                    r["visits"].clone(),
                    r["queue"].clone(),
                    r["instances"].clone(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (json!("order.create"), json!(23), create.clone(), json!(3)),
                (json!("order.list"), json!(1), list.clone(), json!(1)),
                (json!("order.refund"), json!(4), json!(null), json!(1)),
            ],
            "{s}"
        );
        assert_eq!(
            s["rows"][0]["downgrades_by_reason"],
            json!({"queue_full": 4, "queue_timeout": 2}),
            "{s}"
        );
        let s = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}&sum=points"),
            None,
        )
        .json();
        assert_eq!(s["rows"][0]["queue"], summed, "{s}");
        let one = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}&point=order.refund"),
            None,
        )
        .json();
        assert_eq!(one["rows"][0]["queue"], json!(null), "{one}");
        let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
        let last = |name: &str| {
            points["points"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap()["last_cycle"]
                .clone()
        };
        assert_eq!(last("order.create")["queue"], create, "{points}");
        assert_eq!(last("order.list")["queue"], list, "{points}");
        assert_eq!(last("order.refund")["queue"], json!(null), "{points}");
    };
    check(addr);
    server.stop();
    let server = start(c);
    check(server.addr());
    // The next cycle of the older client only: no queue.
    let addr = server.addr();
    let next = cycle + 10_000;
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb("c", next, 2, 0));
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
    let range = format!("from={next}&to={}", next + 10_000);
    for sum in ["", "&sum=points"] {
        let s = get(
            addr,
            &format!("/api/v1/apps/shop/orders/stats?{range}{sum}"),
            None,
        )
        .json();
        assert_eq!(s["rows"][0]["queue"], json!(null), "{s}");
    }
}

/// A database of schema version 6 (before the concurrency queues) holding a cycle at
/// `cycle` of shop/orders' `order.create` (7 visits): the cycle is kept, without a
/// queue, and a new heartbeat stores its own.
pub fn migrated_v6(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    let next = cycle + 10_000;
    let body = json!({"app_group": "shop", "app": "orders", "instance": "new-1",
        "cycle_start_ms": next,
        "points": [{"name": "order.create", "visits": 2,
                    "queue": {"peak_waiting": 1, "admitted": 1, "wait_ns": 5,
                              "max_wait_ns": 5}}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}",
            cycle + 20_000
        ),
        None,
    )
    .json();
    let rows: Vec<_> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["cycle_start_ms"].clone(),
                r["visits"].clone(),
                r["queue"]["admitted"].clone(),
                r["queue"]["max_wait_ns"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (json!(cycle), json!(7), json!(null), json!(null)),
            (json!(next), json!(2), json!(1), json!(5)),
        ],
        "{s}"
    );
    assert!(s["rows"][0]["queue"].is_null(), "{s}");
}

/// A database of schema version 7 (before the queues' evicted waiters) holding a cycle
/// at `cycle` of shop/orders' `order.create` (7 visits, a queue that admitted 4, peak
/// 2, waited 8 ns, at most 3): the cycle keeps its queue, with 0 evicted, and a new
/// heartbeat stores its evictions.
pub fn migrated_v7(storage: StorageConfig, cycle: i64) {
    let (c, manual) = manual(storage);
    assert_eq!(
        cycle,
        last_closed_cycle(now_ms(&manual)),
        "the manual clock's last cycle"
    );
    let server = start(c);
    let addr = server.addr();
    let next = cycle + 10_000;
    let body = json!({"app_group": "shop", "app": "orders", "instance": "new-1",
        "cycle_start_ms": next,
        "points": [{"name": "order.create", "visits": 2, "downgrades": 1,
                    "downgrades_by_reason": {"queue_full": 1},
                    "queue": {"peak_waiting": 1, "admitted": 1, "evicted": 1, "wait_ns": 5,
                              "max_wait_ns": 5}}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}",
            cycle + 20_000
        ),
        None,
    )
    .json();
    let old = json!({"waiting": 0, "peak_waiting": 2, "admitted": 4, "timed_out": 0,
                     "cancelled": 0, "refused": 0, "full": 0, "evicted": 0, "wait_ns": 8,
                     "max_wait_ns": 3});
    let new = json!({"waiting": 0, "peak_waiting": 1, "admitted": 1, "timed_out": 0,
                     "cancelled": 0, "refused": 0, "full": 0, "evicted": 1, "wait_ns": 5,
                     "max_wait_ns": 5});
    let rows: Vec<_> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["cycle_start_ms"].clone(),
                r["visits"].clone(),
                r["queue"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [(json!(cycle), json!(7), old), (json!(next), json!(2), new),],
        "{s}"
    );
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}&sum=points",
            cycle + 20_000
        ),
        None,
    )
    .json();
    let evicted: Vec<_> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["queue"]["evicted"].clone())
        .collect();
    assert_eq!(evicted, [json!(0), json!(1)], "{s}");
}
