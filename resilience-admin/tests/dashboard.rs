//! The dashboard end to end in a real headless Chromium, driven through ChromeDriver
//! (WebDriver over HTTP): load the page, pick a point, get a validation message for a
//! bad value, save a policy, see the new version arrive at a running heartbeat
//! client, restore an older version from the history, and check on a screenshot that
//! the charts are drawn.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`scripts/test.sh` installs them).
//! Other locations can be given with `RESILIENCE_CHROMIUM` and
//! `RESILIENCE_CHROMEDRIVER`. Without them the test fails and says so: it cannot
//! pass without a browser.

/// Apps whose group or name holds a `/`.
#[path = "dashboard/apps.rs"]
mod apps;
mod common;
/// The policy editors: the point form and the raw text editors.
#[path = "dashboard/editor.rs"]
mod editor;
/// Hot keys: the tables of the points' hottest keys.
#[path = "dashboard/hot_keys.rs"]
mod hot_keys;
/// The page at a laptop's width: tables that fit, lines that coincide.
#[path = "dashboard/layout.rs"]
mod layout;
/// The live view: charts at 1-second resolution.
#[path = "dashboard/live.rs"]
mod live;
/// Breakers across the fleet, and the quorum's.
#[path = "dashboard/peers.rs"]
mod peers;
/// Concurrency queues.
#[path = "dashboard/queues.rs"]
mod queues;
/// Cancelled calls and retry counters.
#[path = "dashboard/retries.rs"]
mod retries;

use common::*;
use resilience_admin::server::StorageConfig;
use resilience_runtime::heartbeat::{HeartbeatClient, HeartbeatConfig};
use resilience_runtime::{Clock, Registry};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn tool(var: &str, candidates: &[&str]) -> PathBuf {
    if let Ok(p) = std::env::var(var) {
        return PathBuf::from(p);
    }
    for c in candidates {
        let p = PathBuf::from(c);
        if p.exists() {
            return p;
        }
    }
    panic!(
        "{} not found: this test needs Debian's `chromium` and `chromium-driver` \
         (`apt-get install chromium chromium-driver`; scripts/test.sh does it), or set {var}",
        candidates[0]
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A ChromeDriver process and one browser session, ended when dropped.
struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: TempDir,
    /// One browser at a time: the tests of this file run in parallel threads, and
    /// several Chromiums at once on a small machine make every wait a race.
    _turn: std::sync::MutexGuard<'static, ()>,
}

static BROWSER_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Browser {
    fn start() -> Browser {
        Browser::start_sized(1400, 1600)
    }

    /// A browser whose window (and, headless, its viewport) is `width` x `height` CSS
    /// pixels.
    fn start_sized(width: u32, height: u32) -> Browser {
        // A test that failed while holding the turn poisons it; the next one may go.
        let turn = BROWSER_TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let chromium = tool(
            "RESILIENCE_CHROMIUM",
            &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
        );
        let chromedriver = tool("RESILIENCE_CHROMEDRIVER", &["/usr/bin/chromedriver"]);
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        wait_for(Duration::from_secs(20), "chromedriver to listen", || {
            std::net::TcpStream::connect(addr).ok()
        });
        let profile = TempDir::new("chromium");
        let args = json!([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ]);
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args}}}});
        let mut browser = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
            _turn: turn,
        };
        let created = browser.call("POST", "/session", Some(&caps));
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        browser
    }

    /// One WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        self.try_call(method, path, body)
            .unwrap_or_else(|v| panic!("WebDriver {method} {path}: {v}"))
    }

    /// One WebDriver command: its `value`, or the whole error answer.
    fn try_call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Value> {
        let r = match body {
            Some(b) => request(self.addr, method, path, None, Body::Json(b)),
            None if method == "GET" => get(self.addr, path, None),
            None => request(self.addr, method, path, None, Body::Json(&json!({}))),
        };
        let v = r.json();
        if r.status == 200 {
            Ok(v["value"].clone())
        } else {
            Err(v)
        }
    }

    fn cmd(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(&json!({ "url": url })));
    }

    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(&json!({"script": script, "args": []})),
        )
    }

    /// Polls a JavaScript expression until it is truthy; returns its value.
    fn wait(&self, expr: &str, what: &str) -> Value {
        let script = format!("return ({expr}) || null;");
        let start = Instant::now();
        loop {
            let v = self.js(&script);
            if !v.is_null() && v != json!(false) {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what} ({expr}); status: {}",
                self.js("return document.querySelector('#status').textContent + ' | ' + document.querySelector('#form-message').textContent;")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "/element",
            Some(&json!({"using": "css selector", "value": css})),
        );
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_owned()
    }

    /// Clicks an element. The dashboard redraws its tables every few seconds, so an
    /// element found just before a redraw is looked up again.
    fn click(&self, css: &str) {
        for _ in 0..5 {
            let id = self.find(css);
            let path = format!("/session/{}/element/{id}/click", self.session);
            match self.try_call("POST", &path, Some(&json!({}))) {
                Ok(_) => return,
                Err(e) if e["value"]["error"] == "stale element reference" => continue,
                Err(e) => panic!("click {css}: {e}"),
            }
        }
        panic!("click {css}: the element kept being replaced");
    }

    /// Replaces an input's text by typing, as a person would.
    fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/clear"), None);
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(&json!({ "text": text })),
        );
    }

    /// The element's rectangle in screenshot pixels, with the page scrolled to the
    /// top (the charts are in the first screen).
    fn rect(&self, css: &str) -> [u32; 4] {
        let v = self.js(&format!(
            "window.scrollTo(0, 0); const r = document.querySelector('{css}').getBoundingClientRect(); \
             const d = window.devicePixelRatio; \
             return [r.left * d, r.top * d, r.width * d, r.height * d].map(Math.round);"
        ));
        let n: Vec<u32> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        [n[0], n[1], n[2], n[3]]
    }

    /// Resizes the window; the page lays itself out again.
    fn resize(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(&json!({"width": width, "height": height})),
        );
    }

    fn page_png(&self) -> Vec<u8> {
        base64_decode(self.cmd("GET", "/screenshot", None).as_str().unwrap())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = request(
                self.addr,
                "DELETE",
                &format!("/session/{}", self.session),
                None,
                Body::None,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// A decoded screenshot: width, height and RGB pixels.
struct Image {
    width: u32,
    height: u32,
    rgb: Vec<[u8; 3]>,
}

fn decode(png_bytes: &[u8]) -> Image {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    Image {
        width: info.width,
        height: info.height,
        rgb: buf[..info.buffer_size()]
            .chunks(channels)
            .map(|px| [px[0], px[1], px[2]])
            .collect(),
    }
}

/// Counts the pixels within a small distance of `rgb` inside `[x, y, w, h]`.
fn pixels_near(image: &Image, [x, y, w, h]: [u32; 4], rgb: [u8; 3]) -> usize {
    let mut n = 0;
    for row in y..(y + h).min(image.height) {
        for col in x..(x + w).min(image.width) {
            let px = image.rgb[(row * image.width + col) as usize];
            if (0..3).all(|i| px[i].abs_diff(rgb[i]) <= 40) {
                n += 1;
            }
        }
    }
    n
}

/// Half an hour of cycles of two instances: traffic that rises above the limit, so
/// the charts have visits, passes and downgrades.
fn seed(addr: SocketAddr) {
    let last = last_closed_cycle(wall_ms());
    for k in 0..90i64 {
        let cycle = last - k * 10_000;
        for instance in ["seed-1", "seed-2"] {
            let visits = 40 + (k % 12) * 6;
            let downgrades = (visits - 70).max(0);
            let body = json!({"app_group": "shop", "app": "orders", "instance": instance,
                "cycle_start_ms": cycle,
                "points": [{"name": "order.create", "visits": visits, "downgrades": downgrades,
                            "exceptions": k % 3, "peak_concurrency": 4,
                            "downgrades_by_reason": {"visits": downgrades}}],
                "declared_points": ["order.create", "order.refund"]});
            let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
            assert_eq!(r.status, 200, "{}", r.text());
        }
    }
}

#[test]
fn edit_a_policy_in_the_dashboard_and_see_it_reach_a_running_client() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    seed(addr);

    // A running instance with the real heartbeat client.
    let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let hb = HeartbeatConfig::builder("shop", "orders", &server.url())
        .token(APP)
        .instance("live-1")
        .pull_period(Duration::from_millis(200))
        .build()
        .unwrap();
    let handle = HeartbeatClient::new(hb, registry).spawn().unwrap();
    let client = handle.client().clone();

    let t = Instant::now();
    let browser = Browser::start();
    eprintln!("browser started in {:?}", t.elapsed());
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    eprintln!("page loaded after {:?}", t.elapsed());
    // The token left the address bar.
    assert_eq!(browser.js("return location.hash;"), json!(""));
    browser.wait(
        "document.querySelector('#points tr[data-point=\"order.refund\"]')",
        "the declared point without traffic to be listed",
    );
    browser.click("#points tr[data-point=\"order.create\"]");
    browser.wait(
        "!document.querySelector('#f-max_visits').disabled",
        "the form to open",
    );
    browser.wait(
        "document.querySelector('#chart-traffic polyline[data-series=\"visits\"]')",
        "the charts",
    );

    // A bad value: the runtime's validation message shows at the field.
    browser.type_into("#author", "e2e");
    browser.type_into("#f-max_visits", "lots");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"max_visits\"]').textContent",
        "the field's validation message",
    );
    assert!(msg.as_str().unwrap().contains("integer"), "{msg}");
    assert_eq!(
        get(addr, "/api/v1/apps/shop/orders/policy", None).json()["version"],
        0
    );

    // A good one: version 1, and the running client gets it.
    browser.type_into("#f-max_visits", "7");
    browser.type_into("#f-timeouts-threshold", "250ms");
    browser.type_into("#f-timeouts-max_count", "3");
    browser.click("#save");
    browser.wait(
        "document.querySelector('#policy-version').dataset.version === '1'",
        "version 1",
    );
    let text = browser.js("return document.querySelector('#form-message').textContent;");
    assert!(text.as_str().unwrap().contains("version 1"), "{text}");
    assert_eq!(
        browser.js(
            "return document.querySelector('.field-error[data-field=\"max_visits\"]').textContent;"
        ),
        json!("")
    );
    wait_for(
        Duration::from_secs(5),
        "the client to hold version 1",
        || (client.policy_version() == 1).then_some(()),
    );
    let policy = registry.policy("order.create").unwrap().unwrap();
    assert_eq!(policy.max_visits(), Some(7));
    assert_eq!(policy.timeouts().unwrap().max_count, 3);
    // The dashboard shows which version the instance holds.
    browser.wait(
        "[...document.querySelectorAll('#instances tr[data-instance=\"live-1\"] .instance-version')].some(e => e.textContent === 'v1')",
        "the instance's version on the dashboard",
    );

    // A second edit, then a rollback to version 1 from the history.
    browser.type_into("#f-max_visits", "9");
    browser.click("#save");
    browser.wait(
        "document.querySelector('#policy-version').dataset.version === '2'",
        "version 2",
    );
    wait_for(
        Duration::from_secs(5),
        "the client to hold version 2",
        || (client.policy_version() == 2).then_some(()),
    );
    assert_eq!(
        registry
            .policy("order.create")
            .unwrap()
            .unwrap()
            .max_visits(),
        Some(9)
    );
    browser.click("#history button.restore[data-version=\"1\"]");
    browser.wait(
        "document.querySelector('#policy-version').dataset.version === '3'",
        "version 3",
    );
    wait_for(
        Duration::from_secs(5),
        "the client to hold version 3",
        || (client.policy_version() == 3).then_some(()),
    );
    assert_eq!(
        registry
            .policy("order.create")
            .unwrap()
            .unwrap()
            .max_visits(),
        Some(7)
    );
    let history = get(addr, "/api/v1/apps/shop/orders/policy/versions", None).json();
    assert_eq!(history["versions"][0]["restored_from"], 1);
    assert_eq!(history["versions"][0]["author"], "e2e");

    // The charts are really drawn: the visits line and the downgrade line have pixels
    // of their colors in the screenshots of their SVGs (legends are outside them).
    browser.wait(
        "document.querySelector('#chart-downgrades polyline[data-series=\"visits\"]')",
        "the downgrade chart",
    );
    let traffic = browser.rect("#chart-traffic");
    let downgrades = browser.rect("#chart-downgrades");
    let png = browser.page_png();
    let page = decode(&png);
    let blue = pixels_near(&page, traffic, [0x25, 0x63, 0xeb]);
    let green = pixels_near(&page, traffic, [0x16, 0xa3, 0x4a]);
    let red = pixels_near(&page, downgrades, [0xdc, 0x26, 0x26]);
    assert!(
        blue > 300 && green > 300 && red > 200,
        "chart pixels: visits {blue}, passes {green}, downgrades {red} (rects {traffic:?} {downgrades:?})"
    );
    // No red in the traffic chart: the counts above are the lines, not noise.
    let stray = pixels_near(&page, traffic, [0xdc, 0x26, 0x26]);
    assert!(stray < 10, "{stray} red pixels in the traffic chart");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!("dashboard screenshot: {}", shot.display());
    drop(browser);
    handle.stop();
}

// ---- what each instance enforces, in the DOM ----

/// The file layer of the enforcement scenario: a breaker under the console's rules of
/// `dom.mixed`, and `dom.file`'s own limit.
const DOM_FILE: &str = "[points.\"dom.mixed\".breaker]\nalgorithm = \"classic\"\n\
                        consecutive_failures = 1\n\n[points.\"dom.file\"]\nmax_concurrency = 5\n";

fn wall_of(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A real heartbeat client uploads from a registry with a file layer, a console
/// layer and an open breaker; the dashboard shows what it sent: the numbers, the
/// policy sources, drift, the breaker's state, a stale point as idle, the client's
/// last error, and on the point's page each section's origin and the local text.
#[test]
fn the_dashboard_shows_what_each_instance_enforces() {
    use resilience_runtime::ManualClock;
    // The server's clock and the instance's, apart for a while to make an upload fail.
    let (server_clock, instance_clock) = (ManualClock::new(), ManualClock::new());
    let mut c = config(StorageConfig::Memory);
    c.clock = Clock::manual(&server_clock);
    let server = start(c);
    let addr = server.addr();
    let both = |d: Duration| {
        server_clock.advance(d);
        instance_clock.advance(d);
    };
    let dir = TempDir::new("dom-enforce");
    let path = dir.path().join("policies.toml");
    std::fs::write(&path, DOM_FILE).unwrap();
    let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(
        &instance_clock,
    ))));
    registry.load_policies(&path).unwrap();
    let r = put_json(
        addr,
        "/api/v1/apps/shop/orders/policy",
        Some(ADMIN),
        &json!({"base_version": 0, "author": "ops", "policy": {"points": {
            "dom.console": {"max_visits": 3}, "dom.mixed": {"max_visits": 50},
            "dom.stale": {"max_visits": 100}}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let hb = HeartbeatConfig::builder("shop", "orders", &server.url())
        .token(APP)
        .instance("dom-1")
        .build()
        .unwrap();
    let client = HeartbeatClient::new(hb, registry);
    client.pull_now().unwrap();
    assert_eq!(client.policy_version(), 1);

    // Cycle 0: the stale point's last traffic.
    let stale = registry.point("dom.stale").unwrap();
    for _ in 0..4 {
        stale.enter().unwrap().finish(false);
    }
    both(Duration::from_secs(14));
    client.upload_now().unwrap();
    let stale_cycle = last_closed_cycle(wall_ms_of(&server_clock));

    // The instance's clock runs 100 s ahead: its next cycle is "in the future" for
    // the server, which refuses it (the client keeps the error), then they agree.
    instance_clock.advance(Duration::from_secs(100));
    assert!(client.upload_now().is_err());
    let upload_error = client.status().last_upload_error.unwrap();
    server_clock.advance(Duration::from_secs(100));

    // The figures of the last cycle: 5 visits on dom.console (3 pass, 1 fails), and
    // one failing call that opens dom.mixed's breaker.
    let console = registry.point("dom.console").unwrap();
    for i in 0..5 {
        if let Ok(p) = console.enter() {
            p.finish(i == 0);
        }
    }
    registry
        .point("dom.mixed")
        .unwrap()
        .enter()
        .unwrap()
        .finish(true);
    let opened = wall_of(registry.stats("dom.mixed").unwrap().breaker.unwrap().since);
    both(Duration::from_secs(10));
    client.upload_now().unwrap();
    let sent = registry.stats("dom.console").unwrap().last_cycle.unwrap();
    assert_eq!(
        (sent.visits, sent.passes, sent.downgrades, sent.exceptions),
        (5, 3, 2, 1)
    );
    // A second instance (crafted) enforcing dom.file from its own file, on its cache.
    let cycle = last_closed_cycle(wall_ms_of(&server_clock));
    let crafted = json!({"app_group": "shop", "app": "orders", "instance": "dom-crafted",
        "cycle_start_ms": cycle,
        "enforcing": [{"name": "dom.file", "digest": "0123456789abcdef",
                       "origins": {"rules": {"source": "file:/srv/other.toml", "version": 4}},
                       "local": {"max_concurrency": 9}}],
        "client": {"last_upload_error": null, "last_pull_error": "connection refused",
                   "from_cache": true, "uploads_dropped": 0, "pull_failures": 3,
                   "policies_rejected": 0}});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &crafted);
    assert_eq!(r.status, 200, "{}", r.text());

    // What is stored.
    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    let point = |name: &str| {
        points["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    let stored = point("dom.console");
    assert_eq!(stored["last_cycle"]["visits"], sent.visits);
    assert_eq!(point("dom.mixed")["breaker"]["since_ms"], opened);
    assert_eq!(point("dom.mixed")["drift"], true);
    assert_eq!(point("dom.stale")["idle"], true);
    assert_eq!(point("dom.stale")["idle_since_ms"], stale_cycle + 10_000);
    let local = get(
        addr,
        "/api/v1/apps/shop/orders/points/dom.mixed/instances/dom-1/local",
        None,
    )
    .json()["local"]
        .clone();
    let file = resilience_runtime::config::PolicyFile::parse(
        DOM_FILE,
        resilience_runtime::config::Format::Toml,
    )
    .unwrap();
    assert_eq!(
        local,
        serde_json::to_value(&file.points["dom.mixed"]).unwrap()
    );

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    let row = |point: &str, css: &str| format!("#points tr[data-point=\"{point}\"] {css}");
    let text = |css: &str| {
        browser.wait(
            &format!(
                "document.querySelector('{}') && document.querySelector('{}').textContent",
                css.replace('\'', "\\'"),
                css.replace('\'', "\\'")
            ),
            css,
        )
    };
    // The numbers shown are the numbers sent, with their cycle.
    for (class, n) in [
        ("n-visits", sent.visits),
        ("n-passes", sent.passes),
        ("n-downgrades", sent.downgrades),
        ("n-exceptions", sent.exceptions),
        ("n-timeouts", sent.timeouts),
    ] {
        assert_eq!(
            text(&row("dom.console", &format!("td.{class}"))),
            json!(n.to_string()),
            "{class}"
        );
    }
    assert_eq!(
        browser.js(&format!(
            "return document.querySelector('{}').dataset.cycleStartMs;",
            row("dom.console", "td.asof").replace('\'', "\\'")
        )),
        json!(wall_of(sent.start).to_string())
    );
    assert_eq!(
        text(&row("dom.console", "td.policy-source")),
        json!("console v1")
    );
    assert_eq!(text(&row("dom.console", "td.drift")), json!("-"));
    // The file's breaker over the console's rules: drift, and the open breaker.
    assert_eq!(
        text(&row("dom.mixed", "td.policy-source")),
        json!("console v1 + file (1 instance)")
    );
    let drift = text(&row("dom.mixed", "td.drift[data-drift=\"true\"]"));
    assert!(drift.as_str().unwrap().starts_with("drift"), "{drift}");
    let breaker = text(&row("dom.mixed", "td.breaker[data-state=\"open\"]"));
    assert!(
        breaker.as_str().unwrap().starts_with("open since "),
        "{breaker}"
    );
    assert_eq!(
        browser.js(&format!(
            "return document.querySelector('{}').dataset.sinceMs;",
            row("dom.mixed", "td.breaker").replace('\'', "\\'")
        )),
        json!(opened.to_string())
    );
    // A point only a file sets, on two instances; never "no policy".
    assert_eq!(
        text(&row("dom.file", "td.policy-source")),
        json!("file (2 instances)")
    );
    // The stale point: idle, and none of its old numbers.
    let idle = text(&row("dom.stale", "td.idle"));
    assert!(idle.as_str().unwrap().starts_with("idle since "), "{idle}");
    assert_eq!(
        browser.js(
            "const r = document.querySelector('#points tr[data-point=\"dom.stale\"]'); \
             return [r.dataset.idle, r.querySelectorAll('td.n-visits').length, \
                     r.querySelector('td.idle').dataset.idleSinceMs];"
        ),
        json!(["true", 0, (stale_cycle + 10_000).to_string()])
    );

    // Heartbeat health in the instances table.
    let hb_error = text("#instances tr[data-instance=\"dom-1\"] td.hb-error");
    assert!(
        hb_error
            .as_str()
            .unwrap()
            .contains(&format!("upload: {upload_error}")),
        "{hb_error} / {upload_error}"
    );
    assert_eq!(
        text("#instances tr[data-instance=\"dom-1\"] td.hb-cache"),
        json!("no")
    );
    assert_eq!(
        text("#instances tr[data-instance=\"dom-1\"] td.hb-age"),
        json!("0 s ago")
    );
    assert_eq!(
        text("#instances tr[data-instance=\"dom-crafted\"] td.hb-cache"),
        json!("yes")
    );
    let crafted_error = text("#instances tr[data-instance=\"dom-crafted\"] td.hb-error");
    assert!(
        crafted_error
            .as_str()
            .unwrap()
            .starts_with("pull: connection refused"),
        "{crafted_error}"
    );

    // The point's page: each instance, the console version it holds, the origin of
    // each section, drift, and the local text on demand.
    browser.click("#points tr[data-point=\"dom.mixed\"]");
    let me = "#enforcement tr.instance-row[data-instance=\"dom-1\"]";
    assert_eq!(text(&format!("{me} td.console-version")), json!("v1"));
    assert_eq!(
        text(&format!("{me} li[data-section=\"rules\"]")),
        json!("rules: console v1")
    );
    assert_eq!(
        text(&format!("{me} li[data-section=\"breaker\"]")),
        json!(format!("breaker: file:{} v1", path.display()))
    );
    assert!(text(&format!("{me} td.drift[data-drift=\"true\"]"))
        .as_str()
        .unwrap()
        .contains("local override"));
    assert!(text(&format!("{me} td.breaker[data-state=\"open\"]"))
        .as_str()
        .unwrap()
        .starts_with("open since "));
    browser.click(&format!("{me} button.reveal-local"));
    let shown = browser.wait(
        &format!(
            "(() => {{ const p = document.querySelector('{}'); \
               return p && !p.hidden && p.dataset.loaded === 'true' && p.textContent; }})()",
            "#enforcement tr.local-row[data-instance=\"dom-1\"] pre.local-text"
        ),
        "the local text",
    );
    let shown: Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
    assert_eq!(shown, local, "the revealed text is what the instance sent");
    // For people: what it looked like.
    browser.js("window.scrollTo(0, 0);");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("enforcement.png");
    std::fs::write(&shot, browser.page_png()).unwrap();
    eprintln!("enforcement screenshot: {}", shot.display());
    drop(browser);
}

fn wall_ms_of(clock: &resilience_runtime::ManualClock) -> i64 {
    let c = Clock::manual(clock);
    c.unix_time(c.now()).as_millis() as i64
}
