//! Cancelled calls and retry counters in real Chromium: a real heartbeat client sends
//! a point's cancelled calls and retrying calls, a second instance (SDS's protocol,
//! a newer client with hedges) adds its own; the points table shows the summed
//! cancelled calls next to the timeouts, and the retries table the summed counters,
//! exactly as stored.

use super::*;
use resilience_runtime::retry::Retry;
use resilience_runtime::ManualClock;

/// What the API stores for a point's latest cycle.
fn stored_cycle(addr: SocketAddr, point: &str) -> Value {
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == point)
        .unwrap_or_else(|| panic!("no point {point}: {points}"))["last_cycle"]
        .clone()
}

#[test]
fn the_dashboard_shows_cancelled_calls_and_retry_counters() {
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

    // Four retrying calls (3 attempts at most): at once, after one retry, exhausted
    // after two, at once; and two calls whose permit is dropped (cancelled).
    let point = registry.point("rt.retrying").unwrap();
    for failures in [0, 1, 3, 0] {
        let mut left = failures;
        let _ = point.call_retrying(
            &Retry::builder(3).build().unwrap(),
            None,
            || {
                if left > 0 {
                    left -= 1;
                    Err("busy")
                } else {
                    Ok(())
                }
            },
            |_| Ok(()),
            |e| *e == "busy",
        );
    }
    for _ in 0..2 {
        drop(point.enter().unwrap());
    }
    let sent = point.retry_stats();
    assert_eq!(
        (sent.calls, sent.attempts, sent.retries, sent.exhausted),
        (4, 7, 3, 1)
    );
    assert_eq!(point.stats().totals.cancelled, 2);
    // The backoff slept on the instance's clock: the server's catches up.
    server_clock.advance(Duration::from_millis(
        (wall_ms_of(&instance_clock) - wall_ms_of(&server_clock)) as u64,
    ));
    server_clock.advance(Duration::from_secs(10));
    instance_clock.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    assert!(client.status().last_upload_error.is_none());
    let cycle = last_closed_cycle(wall_ms_of(&server_clock));

    // A second instance in SDS's protocol, with the counters of newer clients.
    let sds = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "sds-2",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {
            "rt.retrying": {"visitNum": 5, "timeoutNum": 1, "cancelledNum": 3,
                "retry": {"calls": 3, "attempts": 5, "retries": 2, "exhausted": 0,
                          "refused_by_budget": 1, "hedges": 2, "cancelled": 1}},
            "rt.plain": {"visitNum": 3, "timeoutNum": 2}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&sds.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // What is stored: the sums of both instances.
    let retrying = stored_cycle(addr, "rt.retrying");
    assert_eq!(retrying["cycle_start_ms"], cycle, "{retrying}");
    assert_eq!(retrying["instances"], 2, "{retrying}");
    assert_eq!(
        (retrying["cancelled"].clone(), retrying["timeouts"].clone()),
        (json!(5), json!(1))
    );
    let want = json!({"calls": 7, "attempts": 12, "retries": 5, "exhausted": 1,
                      "refused_by_budget": 1, "hedges": 2, "cancelled": 1});
    assert_eq!(retrying["retry"], want);
    let plain = stored_cycle(addr, "rt.plain");
    assert_eq!(plain["cancelled"], 0);

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    let text = |css: &str| {
        let q = css.replace('\'', "\\'");
        browser.wait(
            &format!("document.querySelector('{q}') && document.querySelector('{q}').textContent"),
            css,
        )
    };
    let row = |point: &str, css: &str| format!("#points tr[data-point=\"{point}\"] {css}");
    // Cancelled next to the timeouts, as stored.
    for (point, cycle_row) in [("rt.retrying", &retrying), ("rt.plain", &plain)] {
        for k in ["visits", "timeouts", "cancelled"] {
            assert_eq!(
                text(&row(point, &format!("td.n-{k}"))),
                json!(cycle_row[k].to_string()),
                "{point} {k}"
            );
        }
    }
    assert_eq!(
        browser.js(
            "return [...document.querySelectorAll('#points thead th')].map(t => t.textContent);"
        ),
        json!([
            "point",
            "policy",
            "drift",
            "breaker",
            "visits",
            "passes",
            "downgrades",
            "exceptions",
            "timeouts",
            "cancelled",
            "as of"
        ])
    );
    // The retries table: one row, the point with retrying calls, its counters as
    // stored; the point without none.
    let r = "#retries tr[data-point=\"rt.retrying\"]";
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(text(&format!("{r} td.r-{k}")), json!(v.to_string()), "{k}");
    }
    assert_eq!(
        browser.js(&format!(
            "return document.querySelector('{}').dataset.cycleStartMs;",
            format!("{r} td.asof").replace('\'', "\\'")
        )),
        json!(cycle.to_string())
    );
    assert_eq!(
        browser.js(
            "return [document.querySelectorAll('#retries tbody tr').length, \
                     document.querySelector('#retries-none').hidden];"
        ),
        json!([1, true])
    );
    // Clicking it selects the point.
    browser.click(r);
    browser.wait(
        "document.querySelector('#form-point').textContent === 'rt.retrying'",
        "the point to be selected",
    );
    assert_eq!(
        browser.js(&format!(
            "return document.querySelector('{}').classList.contains('selected');",
            r.replace('\'', "\\'")
        )),
        json!(true)
    );
    // For people: what it looked like.
    browser.js("window.scrollTo(0, 0);");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("retries.png");
    std::fs::write(&shot, browser.page_png()).unwrap();
    eprintln!("retries screenshot: {}", shot.display());
    drop(browser);
}
