//! The live view in real Chromium: a real heartbeat client (on a manual clock, so
//! every second is exact) uploads two cycles whose traffic differs from second to
//! second; the charts' data in the DOM (the values of each line, and the line's
//! drawn coordinates) equal the per-second numbers sent, for one point and for the
//! sum of the points, at 1-second resolution for short ranges and in 10-s cycles for
//! long ones. The stored seconds are checked through the API too.

use super::*;
use resilience_runtime::{ManualClock, Policy};
use std::collections::{BTreeMap, BTreeSet};

/// One second of one point as the test made it happen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Second {
    visits: u64,
    passes: u64,
    downgrades: u64,
    exceptions: u64,
    timeouts: u64,
    reasons: BTreeMap<String, u64>,
}

impl Second {
    fn get(&self, series: &str) -> u64 {
        match series {
            "visits" => self.visits,
            "passes" => self.passes,
            "exceptions" => self.exceptions,
            "timeouts" => self.timeouts,
            _ => unreachable!("{series}"),
        }
    }

    fn reason(&self, reason: &str) -> u64 {
        self.reasons.get(reason).copied().unwrap_or(0)
    }
}

/// Visits of each second of the two cycles: every second different, idle ones too.
const VISITS: [u64; 20] = [
    3, 8, 1, 0, 12, 5, 9, 2, 4, 6, 7, 0, 2, 11, 4, 4, 1, 10, 3, 5,
];

/// Calls `point` `n` times in second `k` at the clock's current reading: a call
/// fails when `(i + k) % 4 == 0`; downgraded calls are counted with their reason.
fn calls(point: &'static resilience_runtime::Point, k: usize, n: u64, s: &mut Second) {
    for i in 0..n {
        s.visits += 1;
        match point.enter() {
            Ok(p) => {
                s.passes += 1;
                let fail = (i as usize + k).is_multiple_of(4);
                s.exceptions += u64::from(fail);
                p.finish(fail);
            }
            Err(d) => {
                s.downgrades += 1;
                *s.reasons.entry(d.reason().as_str().to_owned()).or_default() += 1;
            }
        }
    }
}

fn sum(a: &Second, b: &Second) -> Second {
    let mut reasons = a.reasons.clone();
    for (r, n) in &b.reasons {
        *reasons.entry(r.clone()).or_default() += n;
    }
    Second {
        visits: a.visits + b.visits,
        passes: a.passes + b.passes,
        downgrades: a.downgrades + b.downgrades,
        exceptions: a.exceptions + b.exceptions,
        timeouts: a.timeouts + b.timeouts,
        reasons,
    }
}

/// A line of a chart: its values and the coordinates of its points.
type Line = (Vec<u64>, Vec<(f64, f64)>);

/// What a chart holds in the DOM: its data attributes, and per line its values and
/// the coordinates it is drawn at.
#[derive(Debug)]
struct Drawn {
    resolution: String,
    step_ms: i64,
    from_ms: i64,
    buckets: usize,
    top: f64,
    lines: BTreeMap<String, Line>,
}

fn drawn(browser: &Browser, chart: &str) -> Drawn {
    let v = browser.js(&format!(
        "const c = document.querySelector('#chart-{chart}'); \
         return {{d: Object.assign({{}}, c.dataset), lines: [...c.querySelectorAll('polyline')].map(p => \
           [p.dataset.series, p.dataset.values, p.getAttribute('points')])}};"
    ));
    let d = &v["d"];
    let num = |k: &str| {
        d[k].as_str()
            .unwrap_or("")
            .parse::<f64>()
            .unwrap_or(f64::NAN)
    };
    let lines = v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let values = l[1]
                .as_str()
                .unwrap()
                .split(',')
                .map(|x| x.parse().unwrap())
                .collect();
            let points = l[2]
                .as_str()
                .unwrap()
                .split(' ')
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            (l[0].as_str().unwrap().to_owned(), (values, points))
        })
        .collect();
    Drawn {
        resolution: d["resolution"].as_str().unwrap_or("").to_owned(),
        step_ms: num("stepMs") as i64,
        from_ms: num("fromMs") as i64,
        buckets: num("buckets") as usize,
        top: num("top"),
        lines,
    }
}

/// Waits until the chart shows `buckets` buckets of `resolution` ending at `to_ms`
/// whose lines are `expected` (series -> values), then checks that each line is
/// drawn at the coordinates of its values.
fn check_chart(
    browser: &Browser,
    chart: &str,
    resolution: &str,
    to_ms: i64,
    expected: &BTreeMap<String, Vec<u64>>,
) {
    let start = Instant::now();
    let d = loop {
        let d = drawn(browser, chart);
        let values: BTreeMap<String, Vec<u64>> = d
            .lines
            .iter()
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        let n = expected.values().next().map_or(0, Vec::len);
        let step = if resolution == "1s" { 1_000 } else { 10_000 };
        if d.resolution == resolution
            && d.step_ms == step
            && d.buckets == n
            && d.from_ms == to_ms - step * n as i64
            && &values == expected
        {
            break d;
        }
        if start.elapsed() > Duration::from_secs(20) {
            // The end of each line: the rest is zeros.
            let tail = |v: &[u64]| v[v.len().saturating_sub(25)..].to_vec();
            let want: BTreeMap<_, _> = expected.iter().map(|(k, v)| (k, tail(v))).collect();
            let got: BTreeMap<_, _> = values.iter().map(|(k, v)| (k, tail(v))).collect();
            panic!(
                "#chart-{chart}: expected {n} buckets of {resolution} ending at {to_ms}, ending with \
                 {want:?};\ngot {} of {} from {} (step {}), ending with {got:?}",
                d.buckets, d.resolution, d.from_ms, d.step_ms
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The drawing: evenly spaced x from 44 to 632, y = 8 + 150 * (1 - v / top).
    for (series, (values, points)) in &d.lines {
        assert_eq!(points.len(), values.len(), "{chart} {series}");
        for (i, (&v, &(x, y))) in values.iter().zip(points).enumerate() {
            let want_x = 44.0 + i as f64 * 588.0 / (values.len() - 1) as f64;
            let want_y = 8.0 + 150.0 * (1.0 - v as f64 / d.top);
            assert!(
                (x - want_x).abs() < 0.06 && (y - want_y).abs() < 0.06,
                "{chart} {series}[{i}] = {v} drawn at ({x}, {y}), expected ({want_x}, {want_y})"
            );
        }
    }
}

/// The lines of the three charts for `seconds` (the newest last), padded with `pad`
/// zero buckets in front.
fn lines(seconds: &[Second], pad: usize) -> [BTreeMap<String, Vec<u64>>; 3] {
    let line = |f: &dyn Fn(&Second) -> u64| {
        std::iter::repeat_n(0, pad)
            .chain(seconds.iter().map(f))
            .collect::<Vec<u64>>()
    };
    let series = |names: &[&str]| {
        names
            .iter()
            .map(|&n| ((*n).to_owned(), line(&|s: &Second| s.get(n))))
            .collect::<BTreeMap<_, _>>()
    };
    let reasons: BTreeSet<&str> = seconds
        .iter()
        .flat_map(|s| s.reasons.keys().map(String::as_str))
        .collect();
    [
        series(&["visits", "passes"]),
        reasons
            .into_iter()
            .map(|r| (r.to_owned(), line(&|s: &Second| s.reason(r))))
            .collect(),
        series(&["exceptions", "timeouts"]),
    ]
}

fn check_charts(browser: &Browser, resolution: &str, to_ms: i64, seconds: &[Second], pad: usize) {
    let [traffic, downgrades, errors] = lines(seconds, pad);
    check_chart(browser, "traffic", resolution, to_ms, &traffic);
    check_chart(browser, "downgrades", resolution, to_ms, &downgrades);
    check_chart(browser, "errors", resolution, to_ms, &errors);
}

/// Sums ten seconds into cycles.
fn cycles(seconds: &[Second]) -> Vec<Second> {
    seconds
        .chunks(10)
        .map(|c| c.iter().fold(Second::default(), |a, b| sum(&a, b)))
        .collect()
}

fn select_range(browser: &Browser, ms: u64) {
    browser.js(&format!(
        "const s = document.querySelector('#range'); s.value = '{ms}'; \
         s.dispatchEvent(new Event('change')); return true;"
    ));
}

#[test]
fn the_charts_show_the_seconds_a_real_client_sent() {
    let clock = ManualClock::new();
    let mut c = config(StorageConfig::Memory);
    c.clock = Clock::manual(&clock);
    let server = start(c);
    let addr = server.addr();
    let registry: &'static Registry =
        Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    // A limit of 25 visits and 2 slow calls per 10-s window: downgrades of two
    // reasons.
    registry
        .set_policy(
            "live.checkout",
            Policy::builder()
                .max_visits(25)
                .timeouts(Duration::from_millis(250), 2)
                .build()
                .unwrap(),
        )
        .unwrap();
    let checkout = registry.point("live.checkout").unwrap();
    let search = registry.point("live.search").unwrap(); // no policy
    let hb = HeartbeatConfig::new("shop", "live", &server.url())
        .unwrap()
        .token(APP)
        .instance("live-1")
        .unwrap();
    let client = HeartbeatClient::new(hb, registry);
    let t0 = wall_ms_of(&clock);
    assert_eq!(t0 % 10_000, 0, "the manual clock starts on a cycle");

    let (mut sent_checkout, mut sent_search) = (Vec::new(), Vec::new());
    for (k, &n) in VISITS.iter().enumerate() {
        let (mut a, mut b) = (Second::default(), Second::default());
        calls(checkout, k, n, &mut a);
        calls(search, k + 1, n / 2 + 1, &mut b);
        if [12, 14, 15].contains(&k) {
            // One slow call: 600 ms, over the 250 ms threshold.
            a.visits += 1;
            match checkout.enter() {
                Ok(p) => {
                    a.passes += 1;
                    a.timeouts += 1;
                    clock.advance(Duration::from_millis(600));
                    p.finish(false);
                    clock.advance(Duration::from_millis(400));
                }
                Err(d) => {
                    a.downgrades += 1;
                    *a.reasons.entry(d.reason().as_str().to_owned()).or_default() += 1;
                    clock.advance(Duration::from_secs(1));
                }
            }
        } else {
            clock.advance(Duration::from_secs(1));
        }
        sent_checkout.push(a);
        sent_search.push(b);
        if k % 10 == 9 {
            match client.upload_now().unwrap() {
                resilience_runtime::heartbeat::UploadOutcome::Sent { cycle_start_ms, .. } => {
                    assert_eq!(cycle_start_ms as i64, t0 + 1_000 * (k as i64 - 9));
                }
                other => panic!("{other:?}"),
            }
        }
    }
    // The runtime's per-second series (what the client sent) is what the test did.
    for (point, made) in [(checkout, &sent_checkout), (search, &sent_search)] {
        let series: Vec<Second> = point
            .seconds(20)
            .iter()
            .map(|s| Second {
                visits: s.visits,
                passes: s.passes,
                downgrades: s.downgrades,
                exceptions: s.exceptions,
                timeouts: s.timeouts,
                reasons: s
                    .downgrades_by_reason
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(r, n)| (r.as_str().to_owned(), n))
                    .collect(),
            })
            .collect();
        assert_eq!(&series, made, "{}", point.name());
    }
    let reasons: BTreeSet<&String> = sent_checkout
        .iter()
        .flat_map(|s| s.reasons.keys())
        .collect();
    assert_eq!(
        reasons.into_iter().map(String::as_str).collect::<Vec<_>>(),
        ["timeouts", "visits"],
        "two reasons: {sent_checkout:?}"
    );
    let both: Vec<Second> = sent_checkout
        .iter()
        .zip(&sent_search)
        .map(|(a, b)| sum(a, b))
        .collect();

    // What is stored: the seconds with traffic, as sent.
    let end = t0 + 20_000;
    let s = get(
        addr,
        &format!(
            "/api/v1/apps/shop/live/stats?resolution=1s&point=live.checkout&from={t0}&to={end}"
        ),
        None,
    )
    .json();
    let stored: Vec<(i64, Second)> = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (
                r["second_start_ms"].as_i64().unwrap(),
                Second {
                    visits: n("visits"),
                    passes: n("passes"),
                    downgrades: n("downgrades"),
                    exceptions: n("exceptions"),
                    timeouts: n("timeouts"),
                    reasons: serde_json::from_value(r["downgrades_by_reason"].clone()).unwrap(),
                },
            )
        })
        .collect();
    let expected: Vec<(i64, Second)> = sent_checkout
        .iter()
        .enumerate()
        .filter(|(_, s)| **s != Second::default())
        .map(|(k, s)| (t0 + 1_000 * k as i64, s.clone()))
        .collect();
    assert_eq!(stored, expected);
    assert_eq!(s["incomplete_cycles"], json!([]));

    // 6 s after the second cycle ends its heartbeats are in: the charts end there.
    clock.advance(Duration::from_secs(6));
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    // The default range, 15 minutes, per second: every point summed.
    check_charts(&browser, "1s", end, &both, 900 - 20);
    assert_eq!(
        browser.js("return document.querySelector('#chart-resolution').textContent;"),
        json!("per second")
    );
    // One point.
    browser.click("#points tr[data-point=\"live.checkout\"]");
    check_charts(&browser, "1s", end, &sent_checkout, 900 - 20);
    // The last minute.
    select_range(&browser, 60_000);
    check_charts(&browser, "1s", end, &sent_checkout, 60 - 20);
    // An hour: the 10-s cycles, whose figures are the sums of their seconds.
    select_range(&browser, 3_600_000);
    check_charts(&browser, "10s", end, &cycles(&sent_checkout), 360 - 2);
    assert_eq!(
        browser.js("return document.querySelector('#chart-resolution').textContent;"),
        json!("per 10-s cycle")
    );
    browser.click("#points tr[data-point=\"\"]");
    check_charts(&browser, "10s", end, &cycles(&both), 360 - 2);
    // For people: what it looked like.
    select_range(&browser, 60_000);
    check_charts(&browser, "1s", end, &both, 60 - 20);
    browser.js("window.scrollTo(0, 0);");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("live.png");
    std::fs::write(&shot, browser.page_png()).unwrap();
    eprintln!("live view screenshot: {}", shot.display());
}
