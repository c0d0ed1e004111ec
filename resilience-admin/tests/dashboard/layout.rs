//! The page at a laptop's width in real Chromium. Seeded through the real API with
//! what a production app sends (long point, instance, host and key names, six-digit
//! figures, retries, queues, hot keys, open breakers, local files, long errors, a
//! policy history), no table of the dashboard is wider than its box at 1280 x 800
//! and the page does not scroll sideways; columns that do not fit are folded, and
//! every folded cell is shown, under its column's name, by its row's button. The
//! tables fit again at other widths and unfold on a wide screen. Lines of a chart
//! that coincide (passes equal to visits, series that are all zero, a mean equal to
//! its max) are both drawn and both seen, and their values are still the stats
//! API's rows.

use super::*;
use resilience_runtime::ManualClock;
use std::collections::BTreeMap;

/// Points as production names them: long, dotted, hyphenated.
const POINTS: [&str; 8] = [
    "checkout.payment.authorize-card-with-3ds-fallback",
    "inventory.reservation.release-expired-holds",
    "search.catalogue.query-suggestions.v2",
    "notifications.email.send-order-confirmation",
    "pricing.promotions.evaluate-basket-discounts",
    "order.create",
    "shipping.carrier-rates.fetch-live-quotes-from-partner-api",
    "accounts.session.refresh-oauth2-token",
];

/// Instances as Kubernetes names them, each with its host.
const INSTANCES: [(&str, &str); 3] = [
    (
        "checkout-service-7f9c8d6b5-x2k4p",
        "ip-10-42-17-203.eu-west-1.compute.internal",
    ),
    (
        "checkout-service-7f9c8d6b5-qz8rm",
        "ip-10-42-33-119.eu-west-1.compute.internal",
    ),
    (
        "checkout-service-canary-5d4b9c7f8-l6tnw",
        "ip-10-42-51-8.eu-west-1.compute.internal",
    ),
];

/// The policy file the instances' local settings come from.
const FILE: &str = "file:/etc/resilience/production/checkout-service/policies.toml";

/// A heartbeat of `instance` for the cycle: every point with six-digit figures, and
/// retries, a queue and hot keys on most of them; each point enforced with a
/// breaker from the local file (open on two points).
fn production_heartbeat(k: usize, (instance, host): (&str, &str), cycle: i64) -> Value {
    let points: Vec<Value> = POINTS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let visits = 183_467 + 10_007 * (i * 3 + k) as u64;
            let downgrades = 12_345 + 991 * i as u64;
            let mut p = json!({"name": name, "visits": visits, "passes": visits - downgrades,
                "downgrades": downgrades, "exceptions": 4_321 + i as u64,
                "timeouts": 2_718 + i as u64, "cancelled": 1_414 + i as u64,
                "peak_concurrency": 48,
                "downgrades_by_reason": {"visits": downgrades - 345, "breaker_open": 345}});
            if i % 4 != 3 {
                p["retry"] = json!({"calls": 104_729 + i, "attempts": 130_363, "retries": 25_634,
                    "exhausted": 1_789, "refused_by_budget": 3_571, "hedges": 8_191,
                    "cancelled": 2_053});
            }
            if i % 3 != 2 {
                p["queue"] = json!({"waiting": 1_337, "peak_waiting": 4_096, "admitted": 99_991,
                    "timed_out": 7_919, "cancelled": 6_007, "refused": 5_003, "full": 4_001,
                    "evicted": 3_001, "wait_ns": 98_765_432_100_000_u64,
                    "max_wait_ns": 9_876_543_210_u64});
            }
            if i % 2 == 0 {
                p["hot_keys"] = json!([
                    {"key": "tenant:acme-corp-eu-west-1:user:8f14e45fceea167a5a36dedd4bea2543",
                     "passes": 98_765, "refused": 43_210, "overridden": true},
                    {"key": "tenant:globex/api-key/sk_live_51HxJkLmNoPqRsTuVwXyZ0123456789",
                     "passes": 54_321, "refused": 12_345, "overridden": false},
                    {"key": "203.0.113.254", "passes": 1_234, "refused": 0, "overridden": false}]);
                p["key_table"] = json!({"tracked": 10_000, "untracked_passes": 987_654,
                    "untracked_refused": 123_456, "evictions": 55_555});
            }
            p
        })
        .collect();
    let enforcing: Vec<Value> = POINTS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let state = if i < 2 { "open" } else { "closed" };
            json!({"name": name, "digest": format!("{:016x}", 0x9f2c_4e1a_0b3d_5f67_u64 + i as u64),
                "origins": {"rules": {"source": "console", "version": 1},
                            "breaker": {"source": FILE, "version": 7}},
                "local": {"breaker": {"algorithm": "classic", "consecutive_failures": 5,
                                      "open_duration": "30s"}},
                "breaker": {"kind": "classic", "state": state, "since_ms": cycle + 1_234,
                            "transitions": 3}})
        })
        .collect();
    json!({"app_group": "shop", "app": "orders", "instance": instance, "host": host,
        "ip": format!("10.42.17.{}", 200 + k), "cycle_start_ms": cycle, "policy_version": 1,
        "points": points, "enforcing": enforcing,
        "declared_points": POINTS.iter().chain(&["legacy.soap-gateway.forward-request-to-mainframe-adapter"]).collect::<Vec<_>>(),
        "client": {"last_upload_error": if k == 2 {
                       json!("error sending request for url (https://resilience-admin.internal.example.com:7070/api/v1/heartbeat): operation timed out")
                   } else { Value::Null },
                   "last_pull_error": null, "from_cache": k == 2, "uploads_dropped": 3 * k,
                   "pull_failures": k, "policies_rejected": 0}})
}

/// Seeds the app `shop/orders` as production would: three instances of our
/// protocol and one of SDS's, and three versions of a policy.
fn seed_production(addr: SocketAddr) {
    let cycle = last_closed_cycle(wall_ms());
    for (k, instance) in INSTANCES.into_iter().enumerate() {
        let r = post_json(
            addr,
            "/api/v1/heartbeat",
            Some(APP),
            &production_heartbeat(k, instance, cycle),
        );
        assert_eq!(
            (r.status, r.json()["rejected"].clone()),
            (200, json!([])),
            "{}",
            r.text()
        );
    }
    let sds = json!({"appGroupName": "shop", "appName": "orders",
        "hostname": "legacy-orders-worker-01.datacenter-frankfurt.example.com",
        "ip": "192.168.100.17", "statisticsCycleTime": cycle,
        "pointInfoMap": {"order.create": {"visitNum": 765_432, "passNum": 765_000}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&sds.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let policies = [
        json!({"points": {POINTS[0]: {"max_visits": 250_000, "max_concurrency": 64},
                          POINTS[1]: {"max_visits": 180_000}}}),
        json!({"points": {POINTS[0]: {"max_visits": 300_000, "max_concurrency": 64},
                          POINTS[1]: {"max_visits": 180_000},
                          POINTS[6]: {"max_concurrency": 16, "queue": {"max_waiting": 4096, "max_wait": "2s"}}}}),
        json!({"points": {POINTS[0]: {"max_visits": 300_000, "max_concurrency": 48},
                          POINTS[6]: {"max_concurrency": 16, "queue": {"max_waiting": 4096, "max_wait": "2s"}}}}),
    ];
    for (version, policy) in policies.into_iter().enumerate() {
        let r = put_json(
            addr,
            "/api/v1/apps/shop/orders/policy",
            Some(ADMIN),
            &json!({"base_version": version, "author": "Jane Doe (payments on-call, incident INC-20931)",
                    "comment": "Black Friday ramp-up: raise the card authorisation limit after the PSP confirmed capacity; see runbook https://wiki.example.com/payments/runbooks/black-friday-2025#limits",
                    "policy": policy}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

/// Every table of the page that is too wide for its box, every panel that scrolls
/// sideways, and the page if it does: `[]` when everything fits.
const OVERFLOWS: &str = r#"
    const out = [];
    const doc = document.documentElement;
    if (doc.scrollWidth > doc.clientWidth) out.push('page ' + doc.scrollWidth + ' > ' + doc.clientWidth);
    for (const t of document.querySelectorAll('table')) {
      if (!t.getClientRects().length) continue;
      const box = t.parentElement;
      const name = t.id || t.className + ' ' + (t.dataset.point || '');
      if (t.scrollWidth > box.clientWidth || t.offsetWidth > box.clientWidth || box.scrollWidth > box.clientWidth)
        out.push(name + ': table ' + t.scrollWidth + '/' + t.offsetWidth + ', box ' + box.scrollWidth + ' > ' + box.clientWidth);
    }
    for (const p of document.querySelectorAll('.panel'))
      if (p.scrollWidth > p.clientWidth) out.push('panel ' + p.id + ' ' + p.scrollWidth + ' > ' + p.clientWidth);
    return out;"#;

/// What an operator can read of every data row of every table: for each cell that is
/// not drawn (folded), whether the row below shows it under its column's name, as
/// drawn; and every figure or time drawn on a single line. The problems found.
const UNREADABLE: &str = r#"
    const out = [];
    const drawn = (e) => e.getClientRects().length > 0;
    for (const t of document.querySelectorAll('table')) {
      if (!drawn(t)) continue;
      const heads = [...t.tHead.rows[0].cells].map((h) => h.textContent);
      const name = t.id || 'hot keys of ' + t.dataset.point;
      for (const row of t.querySelectorAll('tbody tr:not(.fold-details)')) {
        if (row.hidden) continue;
        let col = 0;
        for (const cell of row.cells) {
          const span = Number(cell.dataset.span || cell.colSpan);
          const label = heads.slice(col, col + span).join(', ');
          col += span;
          if (drawn(cell)) {
            if (cell.classList.contains('num')) {
              const r = document.createRange();
              r.selectNodeContents(cell);
              const lines = new Set([...r.getClientRects()].map((x) => Math.round(x.top)));
              if (lines.size > 1) out.push(name + ': ' + label + ' "' + cell.textContent + '" on ' + lines.size + ' lines');
            }
            continue;
          }
          const details = row.nextElementSibling;
          const shown = details && details.classList.contains('fold-details') && drawn(details)
            ? [...details.querySelectorAll('.folded-cell')].find((c) => c.querySelector('dt').textContent === label)
            : null;
          if (!shown) out.push(name + ': ' + label + ' of ' + row.textContent.slice(0, 40) + ' not shown');
          else if (shown.querySelector('dd').textContent !== cell.textContent)
            out.push(name + ': ' + label + ' shown as "' + shown.querySelector('dd').textContent + '", not "' + cell.textContent + '"');
        }
      }
    }
    return out;"#;

/// Checks that the page fits at `width` (its viewport width) and returns what each
/// table folded, by its id (hot keys tables by point).
fn check_fits(browser: &Browser, width: u32) -> BTreeMap<String, String> {
    // Fitting happens after a draw and on a resize: wait until it settled.
    let start = Instant::now();
    loop {
        let inner = browser.js("return window.innerWidth;");
        let overflows = browser.js(OVERFLOWS);
        if inner == json!(width) && overflows == json!([]) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "at {width} px (window.innerWidth {inner}): {overflows:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let folded = browser.js(
        "return Object.fromEntries([...document.querySelectorAll('table.fit')] \
           .filter((t) => t.getClientRects().length) \
           .map((t) => [t.id || 'hot-keys:' + t.dataset.point, t.dataset.folded || '']));",
    );
    serde_json::from_value(folded).unwrap()
}

/// Opens a point row's folded cells with a real click on its button: the row below
/// shows them, and the selected point stays selected.
fn unfold_a_point(browser: &Browser) {
    let selected = browser.js("return document.querySelector('#form-point').textContent;");
    let point = browser.js(
        "const b = [...document.querySelectorAll('#points button.fold[aria-expanded=\"false\"]')] \
           .find((b) => !b.closest('tr').classList.contains('selected')); \
         return b && b.closest('tr').dataset.point;",
    );
    let point = point.as_str().expect("a folded point row");
    let button = format!("#points tr[data-point=\"{point}\"] button.fold");
    assert!(browser
        .js(&format!(
            "return document.querySelector('{}').title;",
            button.replace('\'', "\\'")
        ))
        .as_str()
        .unwrap()
        .starts_with("show "));
    browser.click(&button);
    browser.wait(
        &format!(
            "document.querySelector('#points tr[data-point=\"{point}\"] + tr.fold-details') && \
             document.querySelector('{}').getAttribute('aria-expanded') === 'true'",
            button.replace('\'', "\\'")
        ),
        "the point's folded cells",
    );
    assert_eq!(
        browser.js("return document.querySelector('#form-point').textContent;"),
        selected,
        "the button does not select the point"
    );
}

/// Opens every row's folded cells, then checks that each folded cell is shown under
/// its column's name, and that the page still fits.
fn unfold_every_row(browser: &Browser, width: u32) {
    browser.js(
        "for (const b of document.querySelectorAll('button.fold[aria-expanded=\"false\"]')) b.click(); \
         return true;",
    );
    let problems = browser.js(UNREADABLE);
    assert_eq!(problems, json!([]), "at {width} px");
    check_fits(browser, width);
}

#[test]
fn every_table_fits_a_laptop_screen_with_every_cell_one_click_away() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    seed_production(addr);
    let browser = Browser::start_sized(1280, 800);
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    // Every table has its rows: the point's instances after selecting it, with one
    // instance's local settings shown.
    browser.click(&format!("#points tr[data-point=\"{}\"]", POINTS[0]));
    browser.wait(
        &format!(
            "document.querySelectorAll('#enforcement tr.instance-row').length === 3 && \
             document.querySelectorAll('#points tbody tr').length === {} && \
             document.querySelectorAll('#instances tbody tr').length === 4 && \
             document.querySelectorAll('#history tbody tr').length === 3 && \
             document.querySelectorAll('#hot-keys table').length === 4 && \
             document.querySelectorAll('#retries tbody tr').length === 6 && \
             document.querySelectorAll('#queues tbody tr').length === 6",
            POINTS.len() + 2
        ),
        "every table's rows",
    );
    browser.js("document.querySelector('#enforcement button.reveal-local').click(); return true;");
    browser.wait(
        "document.querySelector('#enforcement pre.local-text[data-loaded=\"true\"]')",
        "the local settings",
    );

    let folded = check_fits(&browser, 1280);
    // The tables of the left column fold what does not fit, least important first:
    // the points keep their name, breaker, drift and traffic.
    assert!(!folded["points"].is_empty(), "{folded:?}");
    for kept in ["point", "drift", "breaker", "visits", "downgrades"] {
        assert!(
            !folded["points"].split(',').any(|c| c == kept),
            "{kept}: {folded:?}"
        );
    }
    assert!(!folded["queues"].is_empty(), "{folded:?}");
    assert!(
        !folded["queues"].split(',').any(|c| c == "waiting"),
        "{folded:?}"
    );
    // Names stay readable: the point column is at least 11em wide.
    let name_width = browser.js("return document.querySelector('#points th').offsetWidth;");
    assert!(name_width.as_f64().unwrap() >= 143.0, "{name_width}");
    // For people: what it looked like, the first screen and the whole page.
    browser.js("window.scrollTo(0, 0);");
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("layout-1280.png"), browser.page_png()).unwrap();

    // Each row's button shows its folded cells, every one of them.
    unfold_a_point(&browser);
    unfold_every_row(&browser, 1280);
    browser.js("window.scrollTo(0, 0);");
    std::fs::write(dir.join("layout-1280-open.png"), browser.page_png()).unwrap();
    let height = browser.js("return document.documentElement.scrollHeight;");
    browser.resize(1280, height.as_u64().unwrap() as u32 + 40);
    check_fits(&browser, 1280);
    std::fs::write(dir.join("layout-1280-page.png"), browser.page_png()).unwrap();
    eprintln!(
        "layout screenshots: {}",
        dir.join("layout-1280*.png").display()
    );

    // Other widths: a narrower window (still two columns), the issue's 1400 px, and
    // a wide screen, where nothing is folded any more.
    for width in [1100, 1400] {
        browser.resize(width, 900);
        check_fits(&browser, width);
        unfold_every_row(&browser, width);
    }
    browser.resize(2560, 1200);
    let wide = check_fits(&browser, 2560);
    assert!(
        wide.values().all(String::is_empty),
        "folded on a wide screen: {wide:?}"
    );
    assert_eq!(
        browser.js("return document.querySelectorAll('button.fold, tr.fold-details').length;"),
        json!(0)
    );
    drop(browser);
    server.stop();
}

// ---- lines that coincide ----

/// A chart's lines as drawn: per series its colour, width, dashes, points, the
/// series it says it coincides with, and the legend's text and swatch colour.
fn lines_of(browser: &Browser, chart: &str) -> BTreeMap<String, Value> {
    let v = browser.js(&format!(
        "return Object.fromEntries([...document.querySelectorAll('#chart-{chart} [data-series]:is(polyline, path)')] \
           .map((l) => {{ const key = document.querySelector('#legend-{chart} .key[data-series=\"' + l.dataset.series + '\"]'); \
             return [l.dataset.series, {{stroke: l.getAttribute('stroke'), width: Number(l.getAttribute('stroke-width')), \
               dash: l.getAttribute('stroke-dasharray'), points: l.getAttribute('points') || l.getAttribute('d'), \
               values: l.dataset.values, same_as: l.dataset.sameAs || null, legend: key.textContent, \
               legend_same_as: key.dataset.sameAs || null, \
               swatch: getComputedStyle(key.querySelector('.swatch')).backgroundColor}}]; }}));"
    ));
    serde_json::from_value(v).unwrap()
}

/// Checks that `under` and `over` coincide, and are drawn apart: distinct colours,
/// the later line thinner and dashed over the wider solid one.
fn check_coincide(lines: &BTreeMap<String, Value>, under: &str, over: &str) {
    let (a, b) = (&lines[under], &lines[over]);
    assert_eq!(a["points"], b["points"], "{under} and {over} coincide");
    assert_ne!(a["stroke"], b["stroke"], "{a} {b}");
    assert_ne!(a["swatch"], b["swatch"], "{a} {b}");
    assert!(a["dash"].is_null(), "{under} is solid: {a}");
    assert!(
        b["dash"].as_str().is_some_and(|d| !d.is_empty()),
        "{over} is dashed: {b}"
    );
    assert!(
        a["width"].as_f64().unwrap() >= b["width"].as_f64().unwrap() + 1.5,
        "{under} wider than {over}: {a} {b}"
    );
    assert_eq!(b["same_as"], json!(under), "{b}");
    assert_eq!(b["legend_same_as"], json!(under), "{b}");
    assert!(
        b["legend"]
            .as_str()
            .unwrap()
            .ends_with(&format!(", the same line as {under}")),
        "{b}"
    );
}

#[test]
fn lines_that_coincide_are_both_seen() {
    let clock = ManualClock::new();
    let mut c = config(StorageConfig::Memory);
    c.clock = Clock::manual(&clock);
    let server = start(c);
    let addr = server.addr();
    let t0 = wall_ms_of(&clock);
    assert_eq!(t0 % 10_000, 0, "the manual clock starts on a cycle");
    // Two cycles where every call passes and none fails: passes equal visits, and the
    // exceptions and timeouts are zero throughout. One call a second is measured, so
    // each second's mean duration is its max.
    for (k, cycle) in [t0, t0 + 10_000].into_iter().enumerate() {
        let visits: Vec<u64> = (0..10).map(|s| 5 + (s * 7 + k * 3) as u64 % 13).collect();
        let seconds: Vec<[u64; 5]> = visits.iter().map(|&v| [v, v, 0, 0, 0]).collect();
        let durations: Vec<[u64; 3]> = (0..10)
            .map(|s| {
                let us = 2_000 + 1_500 * ((s + k) % 4) as u64;
                [1, us, us]
            })
            .collect();
        let total: u64 = visits.iter().sum();
        let body = json!({"app_group": "shop", "app": "calm", "instance": "calm-1",
            "cycle_start_ms": cycle,
            "points": [{"name": "calm.read", "visits": total, "passes": total,
                        "seconds": seconds, "seconds_durations": durations}]});
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
        assert_eq!(
            (r.status, r.json()["rejected"].clone()),
            (200, json!([])),
            "{}",
            r.text()
        );
    }
    // 6 s after the second cycle ends its heartbeats are in.
    clock.advance(Duration::from_secs(26));
    let end = t0 + 20_000;

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    browser.js(
        "const s = document.querySelector('#range'); s.value = '60000'; \
         s.dispatchEvent(new Event('change')); return true;",
    );
    browser.wait(
        &format!(
            "document.querySelector('#chart-traffic').dataset.fromMs === '{}' && \
             document.querySelector('#chart-durations').dataset.measured === '20'",
            end - 60_000
        ),
        "the last minute's charts",
    );
    // The lines are the stats API's rows, seconds without a row at 0.
    let stats = get(
        addr,
        &format!(
            "/api/v1/apps/shop/calm/stats?resolution=1s&sum=points&from={}&to={end}",
            end - 60_000
        ),
        None,
    )
    .json();
    let mut visits = vec![0_u64; 60];
    for r in stats["rows"].as_array().unwrap() {
        let k = (r["second_start_ms"].as_i64().unwrap() - (end - 60_000)) / 1_000;
        assert_eq!(r["passes"], r["visits"], "{r}");
        visits[k as usize] = r["visits"].as_u64().unwrap();
    }
    assert_eq!(visits.iter().filter(|&&v| v > 0).count(), 20);
    let joined = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let traffic = lines_of(&browser, "traffic");
    assert_eq!(traffic["visits"]["values"], json!(joined(&visits)));
    assert_eq!(traffic["passes"]["values"], json!(joined(&visits)));
    check_coincide(&traffic, "visits", "passes");
    assert!(traffic["visits"]["same_as"].is_null());
    let errors = lines_of(&browser, "errors");
    assert_eq!(errors["exceptions"]["values"], json!(joined(&[0; 60])));
    check_coincide(&errors, "exceptions", "timeouts");
    let durations = lines_of(&browser, "durations");
    assert_eq!(durations["mean"]["points"], durations["max"]["points"]);
    assert_ne!(durations["mean"]["stroke"], durations["max"]["stroke"]);
    assert!(durations["max"]["dash"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    assert!(durations["mean"]["width"].as_f64() > durations["max"]["width"].as_f64());
    // Each second's max dot sits inside its mean dot.
    let radii = browser.js(
        "return ['mean', 'max'].map((s) => [...new Set([...document.querySelectorAll( \
           '#chart-durations circle[data-series=\"' + s + '\"]')].map((c) => Number(c.getAttribute('r'))))]);",
    );
    let radii: [Vec<f64>; 2] = serde_json::from_value(radii).unwrap();
    assert!(
        radii[0].len() == 1 && radii[1].len() == 1 && radii[0][0] > radii[1][0] + 1.0,
        "{radii:?}"
    );

    assert!(
        durations["max"]["legend"]
            .as_str()
            .unwrap()
            .ends_with(", the same line as mean"),
        "{durations:?}"
    );
    // On the screen both colours of each pair are there, in the chart itself.
    let rects: Vec<[u32; 4]> = ["traffic", "errors", "durations"]
        .iter()
        .map(|c| browser.rect(&format!("#chart-{c}")))
        .collect();
    let png = browser.page_png();
    let page = decode(&png);
    for (rect, (chart, pairs)) in rects.into_iter().zip([
        (
            "traffic",
            [
                ("visits", [0x25, 0x63, 0xeb]),
                ("passes", [0x16, 0xa3, 0x4a]),
            ],
        ),
        (
            "errors",
            [
                ("exceptions", [0xc0, 0x26, 0xd3]),
                ("timeouts", [0xea, 0x58, 0x0c]),
            ],
        ),
        (
            "durations",
            [("mean", [0x0f, 0x76, 0x6e]), ("max", [0xb9, 0x1c, 0x1c])],
        ),
    ]) {
        for (series, rgb) in pairs {
            let n = pixels_near(&page, rect, rgb);
            assert!(n > 150, "{chart}: {n} pixels of {series} in {rect:?}");
        }
    }
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("coinciding.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!("coinciding lines screenshot: {}", shot.display());
    drop(browser);
    server.stop();
}
