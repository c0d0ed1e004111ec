//! The live view in real Chromium: a real heartbeat client (on a manual clock, so
//! every second is exact) uploads two cycles whose traffic differs from second to
//! second; the charts' data in the DOM (the values of each line, and the line's
//! drawn coordinates) equal the per-second numbers sent, for one point and for the
//! sum of the points, at 1-second resolution for short ranges and in 10-s cycles for
//! long ones. The stored seconds are checked through the API too, and so are the
//! call durations the client measured, which the durations chart draws. Posted
//! heartbeats of two instances give the durations chart's exact mean and max of
//! each second (gaps where no call was measured), for a point and for the sum.

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
    let hb = HeartbeatConfig::builder("shop", "live", &server.url())
        .token(APP)
        .instance("live-1")
        .build()
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
    let checkout_seconds = checkout.seconds(20);
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
    // The call durations the client measured (the point has a policy): stored as the
    // runtime's series has them, and drawn as stored.
    let mut stored_durations = vec![[0_u64; 3]; 20];
    for r in s["rows"].as_array().unwrap() {
        let k = (r["second_start_ms"].as_i64().unwrap() - t0) / 1_000;
        let n = |f: &str| r[f].as_u64().unwrap_or(0);
        stored_durations[k as usize] = [n("measured"), n("sum_us"), n("max_us")];
    }
    for (k, (second, [measured, sum_us, max_us])) in
        checkout_seconds.iter().zip(&stored_durations).enumerate()
    {
        assert_eq!(second.measured, *measured, "second {k}");
        let us = |d: Option<Duration>| d.map(|d| d.as_micros() as f64);
        let mean = (*measured > 0).then(|| *sum_us as f64 / *measured as f64);
        assert!(
            match (us(second.mean_duration), mean) {
                (Some(a), Some(b)) => (a - b).abs() <= 1.0,
                (a, b) => a == b,
            },
            "second {k}: {second:?}, stored {sum_us} us"
        );
        assert_eq!(
            us(second.max_duration),
            (*measured > 0).then_some(*max_us as f64),
            "second {k}"
        );
    }
    assert!(
        stored_durations.iter().any(|d| d[2] >= 600_000),
        "a slow call: {stored_durations:?}"
    );
    check_durations(
        &browser,
        end,
        &duration_lines(&[&stored_durations], 60 - 20),
        &std::iter::repeat_n(0, 40)
            .chain(stored_durations.iter().map(|d| d[0]))
            .collect::<Vec<_>>(),
    );
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

/// What the durations chart holds in the DOM: its data attributes, per line its
/// values (`None`: a gap) and the number of its segments, and its dots.
#[derive(Debug)]
struct DurationsDrawn {
    hidden: bool,
    resolution: String,
    from_ms: i64,
    buckets: usize,
    top: f64,
    lines: BTreeMap<String, (Vec<Option<f64>>, usize)>,
    dots: Vec<Dot>,
    legend: String,
}

/// A dot of the durations chart: a second with a measured call.
#[derive(Debug)]
struct Dot {
    series: String,
    second_ms: i64,
    value: f64,
    measured: u64,
    cx: f64,
    cy: f64,
    title: String,
}

fn durations_drawn(browser: &Browser) -> DurationsDrawn {
    let v = browser.js("const c = document.querySelector('#chart-durations'); \
         return {hidden: document.querySelector('#durations').hidden, \
           d: Object.assign({}, c.dataset), \
           legend: document.querySelector('#legend-durations').textContent, \
           lines: [...c.querySelectorAll('path')].map(p => \
             [p.dataset.series, p.dataset.values, p.getAttribute('d')]), \
           dots: [...c.querySelectorAll('circle')].map(e => [e.dataset.series, \
             e.dataset.secondMs, e.dataset.value, e.dataset.measured, \
             e.getAttribute('cx'), e.getAttribute('cy'), e.querySelector('title').textContent])};");
    let d = &v["d"];
    let text = |x: &Value| x.as_str().unwrap_or("").to_owned();
    let num = |x: &Value| x.as_str().unwrap_or("").parse::<f64>().unwrap_or(f64::NAN);
    DurationsDrawn {
        hidden: v["hidden"].as_bool().unwrap(),
        resolution: text(&d["resolution"]),
        from_ms: num(&d["fromMs"]) as i64,
        buckets: num(&d["buckets"]) as usize,
        top: num(&d["top"]),
        lines: v["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let values = text(&l[1])
                    .split(',')
                    .map(|x| (!x.is_empty()).then(|| x.parse().unwrap()))
                    .collect();
                let segments = text(&l[2]).matches('M').count();
                (text(&l[0]), (values, segments))
            })
            .collect(),
        dots: v["dots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| Dot {
                series: text(&e[0]),
                second_ms: num(&e[1]) as i64,
                value: num(&e[2]),
                measured: num(&e[3]) as u64,
                cx: num(&e[4]),
                cy: num(&e[5]),
                title: text(&e[6]),
            })
            .collect(),
        legend: v["legend"].as_str().unwrap().to_owned(),
    }
}

/// `[measured, sum_us, max_us]` of ten seconds.
type Durations = [[u64; 3]; 10];

/// The mean and max line (ms, `None` where nothing was measured) of the instances'
/// durations (as many seconds each) summed, padded with `pad` empty seconds in front.
fn duration_lines(parts: &[&[[u64; 3]]], pad: usize) -> BTreeMap<String, Vec<Option<f64>>> {
    let mut mean = vec![None; pad];
    let mut max = vec![None; pad];
    for k in 0..parts[0].len() {
        let measured: u64 = parts.iter().map(|d| d[k][0]).sum();
        let sum: u64 = parts.iter().map(|d| d[k][1]).sum();
        let longest = parts.iter().map(|d| d[k][2]).max().unwrap();
        mean.push((measured > 0).then(|| sum as f64 / measured as f64 / 1000.0));
        max.push((measured > 0).then(|| longest as f64 / 1000.0));
    }
    [("max".to_owned(), max), ("mean".to_owned(), mean)].into()
}

/// Waits until the durations chart shows `buckets` seconds ending at `to_ms` with
/// the lines `expected`, then checks its dots against them: one per second with a
/// value, at that value's height, with the calls measured of `measured`.
fn check_durations(
    browser: &Browser,
    to_ms: i64,
    expected: &BTreeMap<String, Vec<Option<f64>>>,
    measured: &[u64],
) -> DurationsDrawn {
    let n = expected["mean"].len();
    let close = |a: &[Option<f64>], b: &[Option<f64>]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| match (x, y) {
                (Some(x), Some(y)) => (x - y).abs() < 1e-9,
                (None, None) => true,
                _ => false,
            })
    };
    let start = Instant::now();
    let d = loop {
        let d = durations_drawn(browser);
        let matches = !d.hidden
            && d.resolution == "1s"
            && d.buckets == n
            && d.from_ms == to_ms - 1_000 * n as i64
            && d.lines.len() == expected.len()
            && expected
                .iter()
                .all(|(k, v)| d.lines.get(k).is_some_and(|(got, _)| close(got, v)));
        if matches {
            break d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "#chart-durations: expected {n} seconds ending at {to_ms} with {:?};\ngot {:?}",
            expected
                .iter()
                .map(|(k, v)| (k, &v[n.saturating_sub(10)..]))
                .collect::<Vec<_>>(),
            (
                d.hidden,
                &d.resolution,
                d.buckets,
                d.from_ms,
                d.lines
                    .iter()
                    .map(|(k, (v, _))| (k, &v[v.len().saturating_sub(10)..]))
                    .collect::<Vec<_>>()
            )
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let from = to_ms - 1_000 * n as i64;
    for (series, values) in expected {
        let dots: Vec<&Dot> = d.dots.iter().filter(|e| &e.series == series).collect();
        let want: Vec<(usize, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .collect();
        assert_eq!(
            dots.len(),
            want.len(),
            "{series}: one dot per second with a value"
        );
        for (dot, &(i, v)) in dots.iter().zip(&want) {
            assert_eq!(dot.second_ms, from + 1_000 * i as i64, "{series} {dot:?}");
            assert!(
                (dot.value - v).abs() < 1e-9,
                "{series} {dot:?}, expected {v}"
            );
            assert_eq!(dot.measured, measured[i], "{series} {dot:?}");
            let want_x = 44.0 + i as f64 * 588.0 / (n - 1) as f64;
            let want_y = 8.0 + 150.0 * (1.0 - v / d.top);
            assert!(
                (dot.cx - want_x).abs() < 0.06 && (dot.cy - want_y).abs() < 0.06,
                "{series} {dot:?}: expected at ({want_x}, {want_y})"
            );
        }
        // One segment per run of seconds with a value: a gap is not a 0.
        let runs = values
            .iter()
            .enumerate()
            .filter(|(i, v)| v.is_some() && (*i == 0 || values[i - 1].is_none()))
            .count();
        assert_eq!(d.lines[series].1, runs, "{series}: segments");
    }
    d
}

/// Second `k` of instance 1: `k + 2` calls of 2.5 ms on average, the longest
/// `3 + k / 2` ms; none measured in second 2 (traffic all the same), idle in second 7.
fn pay_1(k: usize) -> ([u64; 5], [u64; 3]) {
    let k64 = k as u64;
    match k {
        7 => ([0; 5], [0; 3]),
        2 => ([4, 4, 0, 0, 0], [0; 3]),
        _ => (
            [k64 + 2, k64 + 2, 0, 0, 0],
            [k64 + 2, 2_500 * (k64 + 2), 3_000 + 500 * k64],
        ),
    }
}

/// Second `k` of instance 2: 3 calls of 10 ms on average in seconds 0 to 5 (none
/// measured in second 2), the longest `12 + k` ms.
fn pay_2(k: usize) -> ([u64; 5], [u64; 3]) {
    let k64 = k as u64;
    match k {
        2 => ([3, 3, 0, 0, 0], [0; 3]),
        0..=5 => ([3, 3, 0, 0, 0], [3, 30_000, 12_000 + 1_000 * k64]),
        _ => ([0; 5], [0; 3]),
    }
}

#[test]
fn the_duration_chart_shows_the_mean_and_max_of_each_second() {
    let clock = ManualClock::new();
    let mut c = config(StorageConfig::Memory);
    c.clock = Clock::manual(&clock);
    let server = start(c);
    let addr = server.addr();
    let t0 = wall_ms_of(&clock);
    assert_eq!(t0 % 10_000, 0, "the manual clock starts on a cycle");
    // 6 s after the cycle ends its heartbeats are in: the charts end there.
    clock.advance(Duration::from_secs(16));
    let end = t0 + 10_000;
    let split = |f: fn(usize) -> ([u64; 5], [u64; 3])| {
        let s: [[u64; 5]; 10] = std::array::from_fn(|k| f(k).0);
        let d: Durations = std::array::from_fn(|k| f(k).1);
        (s, d)
    };
    let (s1, d1) = split(pay_1);
    let (s2, d2) = split(pay_2);
    // Another point: one 95 ms call in second 4.
    let mut other: Durations = [[0; 3]; 10];
    other[4] = [1, 95_000, 95_000];
    let mut other_seconds = [[0_u64; 5]; 10];
    other_seconds[4] = [1, 1, 0, 0, 0];
    let visits = |s: &[[u64; 5]; 10]| s.iter().map(|b| b[0]).sum::<u64>();
    let body = json!({"app_group": "shop", "app": "timed", "instance": "pay-1",
        "cycle_start_ms": t0,
        "points": [{"name": "timed.pay", "visits": visits(&s1), "seconds": s1,
                    "seconds_durations": d1},
                   {"name": "timed.other", "visits": 1, "seconds": other_seconds,
                    "seconds_durations": other}]});
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &body);
    assert_eq!(
        (r.status, r.json()["rejected"].clone()),
        (200, json!([])),
        "{}",
        r.text()
    );
    let client = json!({"appGroupName": "shop", "appName": "timed", "hostname": "pay-2",
        "ip": "10.0.0.2", "statisticsCycleTime": end,
        "pointInfoMap": {"timed.pay": {"visitNum": visits(&s2), "seconds": s2,
                                       "secondsDurations": d2}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&client.to_string()))),
    );
    assert_eq!(
        (r.status, r.json()["rejected"].clone()),
        (200, json!([])),
        "{}",
        r.text()
    );
    let measured = |parts: &[&[[u64; 3]]], pad: usize| -> Vec<u64> {
        std::iter::repeat_n(0, pad)
            .chain((0..10).map(|k| parts.iter().map(|d| d[k][0]).sum()))
            .collect()
    };

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    select_range(&browser, 60_000);
    // Every point summed: second 4 has the other point's 95 ms call too.
    let all: [&[[u64; 3]]; 3] = [&d1, &d2, &other];
    let d = check_durations(
        &browser,
        end,
        &duration_lines(&all, 50),
        &measured(&all, 50),
    );
    let at4: Vec<(&str, f64)> = d
        .dots
        .iter()
        .filter(|e| e.second_ms == t0 + 4_000)
        .map(|e| (e.series.as_str(), e.value))
        .collect();
    // (6 * 2.5 ms + 3 * 10 ms + 95 ms) / 10 calls; the longest 95 ms.
    assert_eq!(at4, [("mean", 14.0), ("max", 95.0)]);

    // One point: the mean and max of its two instances' calls.
    browser.click("#points tr[data-point=\"timed.pay\"]");
    let pay: [&[[u64; 3]]; 2] = [&d1, &d2];
    let d = check_durations(
        &browser,
        end,
        &duration_lines(&pay, 50),
        &measured(&pay, 50),
    );
    // The chosen second, 4: (6 * 2.5 ms + 3 * 10 ms) / 9 calls = 5 ms; the longest
    // instance 2's 16 ms (instance 1's: 5 ms). Its dots' figures and tooltips say so.
    let at4: Vec<(&str, f64, u64, &str)> = d
        .dots
        .iter()
        .filter(|e| e.second_ms == t0 + 4_000)
        .map(|e| (e.series.as_str(), e.value, e.measured, e.title.as_str()))
        .collect();
    let when = browser.js(&format!(
        "return new Date({}).toLocaleTimeString([], {{hour12: false}});",
        t0 + 4_000
    ));
    let when = when.as_str().unwrap();
    assert_eq!(
        at4,
        [
            (
                "mean",
                5.0,
                9,
                format!("{when}: mean 5 ms of 9 calls").as_str()
            ),
            (
                "max",
                16.0,
                9,
                format!("{when}: max 16 ms of 9 calls").as_str()
            ),
        ]
    );
    // Second 2 had traffic but no measured call, second 7 none at all: gaps.
    for k in [2, 7] {
        assert!(
            !d.dots.iter().any(|e| e.second_ms == t0 + 1_000 * k),
            "second {k}: {:?}",
            d.dots
        );
        assert_eq!(d.lines["mean"].0[50 + k as usize], None);
    }
    assert_eq!(
        d.lines["max"].0[59],
        Some(7.5),
        "second 9: instance 1's alone"
    );
    // The legend names both lines, with the range's mean (52 calls of 2.5 ms and 15
    // of 10 ms: 4.179 ms) and its longest call (instance 2's 17 ms in second 5).
    assert_eq!(d.legend, "mean (overall 4.18 ms)max (longest 17 ms)");
    assert_eq!(
        browser.js("return document.querySelector('#chart-durations').getAttribute('aria-label');"),
        json!("mean and max call duration in ms per second")
    );
    // The 10-s cycles have no durations chart.
    select_range(&browser, 3_600_000);
    browser.wait(
        "document.querySelector('#charts-panel').dataset.resolution === '10s'",
        "the 10-s view",
    );
    assert!(durations_drawn(&browser).hidden);
    select_range(&browser, 60_000);
    assert!(
        !check_durations(
            &browser,
            end,
            &duration_lines(&pay, 50),
            &measured(&pay, 50)
        )
        .hidden
    );
}
