//! Concurrency queues in real Chromium: a real heartbeat client reports a point
//! whose calls waited for a slot (admitted, given up, refused by a full queue, run
//! out of time, evicted from a full queue by a critical call), a second instance (SDS's protocol) adds its own queue figures; the
//! queues table shows the sums (the peak and the longest wait the largest), the
//! mean wait of the waits that ended and the longest, exactly as stored.

use super::*;
use resilience_runtime::priority::{self, Priority};
use resilience_runtime::{ManualClock, Policy, Reason};
use std::future::Future;
use std::task::{Context, Poll, Waker};

/// A wait as the wire's nanoseconds.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

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

fn poll_once<F: Future + ?Sized>(f: &mut std::pin::Pin<Box<F>>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    f.as_mut().poll(&mut cx)
}

fn waiting(point: &resilience_runtime::Point) -> u64 {
    point.stats().queue.map_or(0, |q| q.waiting)
}

#[test]
fn the_dashboard_shows_the_queues_of_the_points() {
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
    registry
        .set_policy(
            "rt.queued",
            Policy::builder()
                .max_concurrency(1)
                .queue(4, Duration::from_secs(1))
                .build()
                .unwrap(),
        )
        .unwrap();
    let point = registry.point("rt.queued").unwrap();
    registry
        .point("rt.plain")
        .unwrap()
        .enter()
        .unwrap()
        .finish(false);

    // One call holds the only slot; four wait (polled by hand: three of the default
    // priority, then a sheddable one), so the queue is full.
    let held = point.enter().unwrap();
    let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(point.enter_async())).collect();
    for w in &mut waiters {
        assert!(poll_once(w).is_pending());
    }
    let mut low = Box::pin(priority::scope(Priority::Sheddable, point.enter_async()));
    assert!(poll_once(&mut low).is_pending());
    // Another sheddable call is refused (a call of the default priority would evict).
    let refused = priority::with(Priority::Sheddable, || point.enter().unwrap_err());
    assert_eq!(refused.reason(), Reason::QueueFull);
    // A critical call finds the queue full and takes the sheddable waiter's place.
    let mut critical = Box::pin(priority::scope(Priority::Critical, point.enter_async()));
    assert!(poll_once(&mut critical).is_pending());
    let Poll::Ready(Err(evicted)) = poll_once(&mut low) else {
        panic!("the sheddable waiter is evicted");
    };
    assert_eq!(evicted.reason(), Reason::QueueFull);
    drop(low);
    // Two give up after 10 ms (the critical call and the third waiter).
    instance_clock.advance(Duration::from_millis(10));
    drop(critical);
    waiters.truncate(2);
    // The slot goes to the oldest waiter after 30 ms, then to the next after 50.
    instance_clock.advance(Duration::from_millis(20));
    held.finish(false);
    let Poll::Ready(Ok(first)) = poll_once(&mut waiters[0]) else {
        panic!("the first waiter gets the slot");
    };
    instance_clock.advance(Duration::from_millis(20));
    first.finish(false);
    let Poll::Ready(Ok(second)) = poll_once(&mut waiters[1]) else {
        panic!("the second waiter gets the slot");
    };
    // A thread's call waits behind it and runs out of time (a manual clock that
    // moves wakes the waiters: it moves only once the thread waits).
    let thread = std::thread::spawn(move || point.enter().map(|p| p.finish(false)));
    wait_for(Duration::from_secs(10), "the thread to wait", || {
        (waiting(point) == 1).then_some(())
    });
    instance_clock.advance(Duration::from_secs(1));
    let err = thread.join().unwrap().unwrap_err();
    assert_eq!(err.reason(), Reason::QueueTimeout);
    second.finish(false);
    drop(waiters);
    let sent = point.stats().queue.unwrap();
    assert_eq!(
        (
            sent.waiting,
            sent.peak_waiting,
            sent.admitted,
            sent.timed_out,
            sent.cancelled,
            sent.full,
            sent.evicted
        ),
        (0, 4, 2, 1, 2, 1, 1)
    );
    assert!(sent.max_wait >= Duration::from_secs(1), "{sent:?}");
    // The server's clock catches up with the instance's.
    server_clock.advance(Duration::from_millis(
        (wall_ms_of(&instance_clock) - wall_ms_of(&server_clock)) as u64,
    ));
    server_clock.advance(Duration::from_secs(10));
    instance_clock.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    assert!(client.status().last_upload_error.is_none());
    let cycle = last_closed_cycle(wall_ms_of(&server_clock));
    let mine = stored_cycle(addr, "rt.queued");
    assert_eq!(mine["cycle_start_ms"], cycle, "{mine}");
    assert_eq!(
        mine["queue"],
        json!({"waiting": 0, "peak_waiting": 4, "admitted": 2, "timed_out": 1,
               "cancelled": 2, "refused": 0, "full": 1, "evicted": 1,
               "wait_ns": nanos(sent.wait), "max_wait_ns": nanos(sent.max_wait)}),
        "{mine}"
    );
    // The evicted waiter is refused as queue_full too.
    assert_eq!(
        mine["downgrades_by_reason"],
        json!({"queue_full": 2, "queue_timeout": 1}),
        "{mine}"
    );

    // A second instance in SDS's protocol: a larger peak, a call still waiting, a
    // wait ended by another rule, an eviction.
    let sds = json!({"appGroupName": "shop", "appName": "orders", "instanceId": "sds-2",
        "statisticsCycleTime": cycle + 10_000,
        "pointInfoMap": {
            "rt.queued": {"visitNum": 7, "downgradeNum": 4,
                "downgradeReasons": {"queue_full": 3, "queue_timeout": 1},
                "queue": {"waiting": 1, "peak_waiting": 6, "admitted": 3, "timed_out": 1,
                          "cancelled": 0, "refused": 1, "full": 2, "evicted": 1,
                          "wait_ns": 40_000_000, "max_wait_ns": 20_000_000}},
            "rt.plain": {"visitNum": 3}}});
    let r = request(
        addr,
        "POST",
        "/sds/heartbeat/add",
        Some(APP),
        Body::Form(&format!("client={}", form_value(&sds.to_string()))),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // What is stored: the sums of both instances, the peak and the max the largest.
    let queued = stored_cycle(addr, "rt.queued");
    assert_eq!(queued["instances"], 2, "{queued}");
    let want = json!({"waiting": 1, "peak_waiting": 6, "admitted": 5, "timed_out": 2,
                      "cancelled": 2, "refused": 1, "full": 3, "evicted": 2,
                      "wait_ns": nanos(sent.wait) + 40_000_000, "max_wait_ns": nanos(sent.max_wait)});
    assert_eq!(queued["queue"], want, "{queued}");
    assert_eq!(
        queued["downgrades_by_reason"],
        json!({"queue_full": 5, "queue_timeout": 2}),
        "{queued}"
    );
    assert!(stored_cycle(addr, "rt.plain")["queue"].is_null());

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
    let data = |css: &str, key: &str| {
        browser.js(&format!(
            "return document.querySelector('{}').dataset.{key};",
            css.replace('\'', "\\'")
        ))
    };
    assert_eq!(
        browser.js(
            "return [...document.querySelectorAll('#queues thead th')].map(t => t.textContent);"
        ),
        json!([
            "point",
            "waiting",
            "peak",
            "admitted",
            "timed out",
            "cancelled",
            "refused",
            "full",
            "evicted",
            "mean wait",
            "max wait",
            "as of"
        ])
    );
    // One row, the point with a queue, its figures as stored.
    let r = "#queues tr[data-point=\"rt.queued\"]";
    for k in [
        "waiting",
        "peak_waiting",
        "admitted",
        "timed_out",
        "cancelled",
        "refused",
        "full",
        "evicted",
    ] {
        assert_eq!(
            text(&format!("{r} td.q-{k}")),
            json!(want[k].to_string()),
            "{k}"
        );
    }
    // The mean of the 12 waits that ended (5 admitted, 2 timed out, 2 cancelled, 1
    // refused, 2 evicted), and the longest.
    let ended: u64 = ["admitted", "timed_out", "cancelled", "refused", "evicted"]
        .iter()
        .map(|k| want[k].as_u64().unwrap())
        .sum();
    assert_eq!(ended, 12);
    let mean = want["wait_ns"].as_u64().unwrap() / ended;
    assert_eq!(
        data(&format!("{r} td.q-mean_wait"), "ns"),
        json!(mean.to_string())
    );
    assert_eq!(
        data(&format!("{r} td.q-max_wait"), "ns"),
        json!(nanos(sent.max_wait).to_string())
    );
    let ms = |ns: u64| {
        let v = ns as f64 / 1e6;
        if v >= 1000.0 {
            format!("{} ms", v.round())
        } else {
            format!("{} ms", format!("{v:.2e}").parse::<f64>().unwrap())
        }
    };
    assert_eq!(text(&format!("{r} td.q-mean_wait")), json!(ms(mean)));
    assert_eq!(
        text(&format!("{r} td.q-max_wait")),
        json!(ms(nanos(sent.max_wait)))
    );
    assert_eq!(
        data(&format!("{r} td.asof"), "cycleStartMs"),
        json!(cycle.to_string())
    );
    assert_eq!(
        browser.js(
            "return [document.querySelectorAll('#queues tbody tr').length, \
                     document.querySelector('#queues-none').hidden];"
        ),
        json!([1, true])
    );
    // Clicking it selects the point.
    browser.click(r);
    browser.wait(
        "document.querySelector('#form-point').textContent === 'rt.queued'",
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
    browser.js("document.querySelector('#queues').closest('.table-scroll').previousElementSibling.previousElementSibling.scrollIntoView();");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("queues.png");
    std::fs::write(&shot, browser.page_png()).unwrap();
    eprintln!("queues screenshot: {}", shot.display());
    drop(browser);
}
