//! Hot keys in real Chromium: a real heartbeat client reports a point with per-key
//! limits (keys admitted and refused, an override), a second instance adds its own
//! keys, a third sends a malformed key (its point is kept without hot keys, the field
//! named); the points list stores the merged latest reports, the dashboard shows a
//! "Hot keys" table per point exactly as stored, and the `hot_key` reason has its
//! colour in the downgrades legend.

use super::*;
use resilience_runtime::keys::KeyPolicy;
use resilience_runtime::{ManualClock, Policy, Reason};

/// The points list's entry of a point.
fn stored_point(addr: SocketAddr, point: &str) -> Value {
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == point)
        .unwrap_or_else(|| panic!("no point {point}: {points}"))
        .clone()
}

#[test]
fn the_dashboard_shows_the_hot_keys_of_the_points() {
    let (server_clock, instance_clock) = (ManualClock::new(), ManualClock::new());
    let mut c = config(StorageConfig::Memory);
    c.clock = Clock::manual(&server_clock);
    let server = start(c);
    let addr = server.addr();
    let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(
        &instance_clock,
    ))));
    let hb = HeartbeatConfig::builder("shop", "orders", &server.url())
        .token(APP)
        .instance("rt-1")
        .build()
        .unwrap();
    let client = HeartbeatClient::new(hb, registry);
    let keys = KeyPolicy::builder()
        .limit(3, Duration::from_secs(3600))
        .override_limit("vip-42", 10)
        .build()
        .unwrap();
    registry
        .set_policy("rt.keys", Policy::builder().keys(keys).build().unwrap())
        .unwrap();
    let point = registry.point("rt.keys").unwrap();
    let call = |key: &str| match point.enter_key(key) {
        Ok(permit) => {
            permit.finish(false);
            true
        }
        Err(d) => {
            assert_eq!(d.reason(), Reason::HotKey);
            false
        }
    };
    assert_eq!((0..5).filter(|_| call("alice")).count(), 3);
    assert_eq!((0..4).filter(|_| call("vip-42")).count(), 4);
    assert!(call("bob"));
    registry
        .point("rt.plain")
        .unwrap()
        .enter()
        .unwrap()
        .finish(false);
    // The server's clock catches up with the instance's.
    server_clock.advance(Duration::from_millis(
        (wall_ms_of(&instance_clock) - wall_ms_of(&server_clock)) as u64,
    ));
    server_clock.advance(Duration::from_secs(10));
    instance_clock.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    assert!(client.status().last_upload_error.is_none());
    let cycle = last_closed_cycle(wall_ms_of(&server_clock));
    let mine = stored_point(addr, "rt.keys");
    assert_eq!(
        mine["hot_keys"],
        json!([{"key": "alice", "passes": 3, "refused": 2, "overridden": false},
               {"key": "vip-42", "passes": 4, "refused": 0, "overridden": true},
               {"key": "bob", "passes": 1, "refused": 0, "overridden": false}]),
        "{mine}"
    );
    assert_eq!(
        mine["key_table"],
        json!({"tracked": 2, "untracked_passes": 0, "untracked_refused": 0, "evictions": 0}),
        "{mine}"
    );
    assert_eq!(
        (
            mine["hot_keys_cycle_start_ms"].clone(),
            mine["hot_keys_instances"].clone()
        ),
        (json!(cycle), json!(1))
    );
    assert_eq!(
        mine["last_cycle"]["downgrades_by_reason"],
        json!({"hot_key": 2})
    );
    let plain = stored_point(addr, "rt.plain");
    assert!(
        plain.get("hot_keys").is_none() && plain.get("key_table").is_none(),
        "{plain}"
    );

    // A second instance: its keys are added to the same keys'.
    let body = json!({"app_group": "shop", "app": "orders", "instance": "rt-2",
        "cycle_start_ms": cycle,
        "points": [{"name": "rt.keys", "visits": 12, "downgrades": 4,
                    "downgrades_by_reason": {"hot_key": 4},
                    "hot_keys": [{"key": "alice", "passes": 1, "refused": 4, "overridden": false},
                                 {"key": "carol", "passes": 7, "refused": 0, "overridden": false}],
                    "key_table": {"tracked": 2, "untracked_passes": 3, "untracked_refused": 1,
                                  "evictions": 5}}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rejected"], json!([]), "{}", r.text());
    // A third, with a key the server refuses: its point's counts are stored, its hot
    // keys are not, and the answer names the field.
    let body = json!({"app_group": "shop", "app": "orders", "instance": "rt-3",
        "cycle_start_ms": cycle,
        "points": [{"name": "rt.keys", "visits": 1,
                    "hot_keys": [{"key": "bad\u{7}key", "passes": 99}]}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let rejected = r.json()["rejected"].clone();
    assert_eq!(
        rejected[0]["field"], "points[0].hot_keys[0].key",
        "{rejected}"
    );
    let merged = stored_point(addr, "rt.keys");
    let want_keys = json!([
        {"key": "alice", "passes": 4, "refused": 6, "overridden": false},
        {"key": "carol", "passes": 7, "refused": 0, "overridden": false},
        {"key": "vip-42", "passes": 4, "refused": 0, "overridden": true},
        {"key": "bob", "passes": 1, "refused": 0, "overridden": false}]);
    assert_eq!(merged["hot_keys"], want_keys, "{merged}");
    let want_table =
        json!({"tracked": 4, "untracked_passes": 3, "untracked_refused": 1, "evictions": 5});
    assert_eq!(merged["key_table"], want_table, "{merged}");
    assert_eq!(merged["hot_keys_instances"], 2);
    assert_eq!(
        merged["last_cycle"]["instances"], 3,
        "the third one's counts are in"
    );

    // Time for the cycle's heartbeats to be in: the charts show it.
    server_clock.advance(Duration::from_secs(10));
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    let table = "#hot-keys .hot-keys-point[data-point=\"rt.keys\"]";
    browser.wait(
        &format!("document.querySelector('{}')", table.replace('\'', "\\'")),
        "the hot keys table",
    );
    let shown = browser.js(&format!(
        "return [...document.querySelectorAll('{} tbody tr')].map(r => \
             [r.dataset.key, ...['key', 'passes', 'refused', 'overridden'].map(c => \
                 r.querySelector('td.k-' + c).textContent)]);",
        table.replace('\'', "\\'")
    ));
    let want: Vec<Value> = want_keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            json!([
                k["key"],
                k["key"],
                k["passes"].to_string(),
                k["refused"].to_string(),
                if k["overridden"] == true { "yes" } else { "" }
            ])
        })
        .collect();
    assert_eq!(shown, json!(want));
    assert_eq!(
        browser.js(&format!(
            "const t = document.querySelector('{}'); \
             return [[...t.querySelectorAll('thead th')].map(h => h.textContent), \
                     t.querySelector('caption .point').textContent, \
                     t.querySelector('caption .asof').dataset.cycleStartMs, \
                     Object.assign({{}}, t.querySelector('.key-table').dataset)];",
            table.replace('\'', "\\'")
        )),
        json!([["key", "passes", "refused", "override"], "rt.keys", cycle.to_string(),
               {"tracked": "4", "untrackedPasses": "3", "untrackedRefused": "1",
                "evictions": "5"}])
    );
    // One table, of the point with keys; the "none" line is hidden.
    assert_eq!(
        browser.js(
            "return [document.querySelectorAll('#hot-keys .hot-keys-point').length, \
                     document.querySelector('#hot-keys-none').hidden];"
        ),
        json!([1, true])
    );
    // The hot_key reason has its colour in the downgrades legend.
    let swatch = browser.wait(
        "(() => { const k = document.querySelector('#legend-downgrades .key[data-series=\"hot_key\"] .swatch'); \
                  return k && getComputedStyle(k).backgroundColor; })()",
        "the hot_key legend",
    );
    assert_eq!(swatch, json!("rgb(2, 132, 199)"));
    assert_eq!(
        browser.js("return REASON_COLORS.hot_key;"),
        json!("#0284c7")
    );
    // Clicking the table selects the point.
    browser.click(table);
    browser.wait(
        "document.querySelector('#form-point').textContent === 'rt.keys'",
        "the point to be selected",
    );
    browser.wait(
        &format!(
            "document.querySelector('{}').classList.contains('selected')",
            table.replace('\'', "\\'")
        ),
        "the table to be marked",
    );
    // For people: what it looked like.
    browser.js("document.querySelector('#hot-keys').scrollIntoView();");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hot_keys.png");
    std::fs::write(&shot, browser.page_png()).unwrap();
    eprintln!("hot keys screenshot: {}", shot.display());
    drop(browser);
}
