//! The tower layers: shared limits across clones, outcomes reported through the
//! permit, the HTTP mapping, and a load test of an axum app over loopback TCP.

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use http_body_util::{BodyExt, Empty};
use resilience_runtime::adaptive::{
    AdaptiveConfig, AdaptiveLimiter, FixedCpu, Gate, GradientConfig, GradientLimiter,
};
use resilience_runtime::tower::{AdmissionLayer, GuardError, PointLayer, Refused};
use resilience_runtime::{registry, Clock, ManualClock, Policy, Reason};
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tower::{Layer, Service};

/// Doubles its input; 0 is an error.
#[derive(Clone, Debug)]
struct Double;

impl Service<u32> for Double {
    type Response = u32;
    type Error = String;
    type Future = Ready<Result<u32, String>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), String>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, x: u32) -> Self::Future {
        ready(if x == 0 {
            Err("zero".into())
        } else {
            Ok(x * 2)
        })
    }
}

/// Answers with the status in the request's path (`/500` -> 500).
#[derive(Clone, Debug)]
struct StatusFromPath;

impl Service<Request<()>> for StatusFromPath {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        let code: u16 = req.uri().path()[1..].parse().unwrap();
        let mut res = Response::new(String::new());
        *res.status_mut() = StatusCode::from_u16(code).unwrap();
        ready(Ok(res))
    }
}

fn poll_once<F: Future>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match poll_once(f.as_mut()) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the test services are always ready"),
    }
}

fn policy_max_concurrency(name: &str, n: u64) {
    registry()
        .set_policy(name, Policy::builder().max_concurrency(n).build().unwrap())
        .unwrap();
}

#[test]
fn point_layer_clones_share_one_limit() {
    let name = "test.tower.shared";
    policy_max_concurrency(name, 2);
    let layer = PointLayer::new(name).unwrap();
    // Services from the layer, from a clone of the layer, and clones of a service.
    let mut a = layer.layer(Double);
    let mut b = layer.clone().layer(Double);
    let mut c = a.clone();
    let held_a = a.call(1); // the permit is taken in `call` and held by the future
    let held_b = b.call(2);
    let err = block_on(c.call(3)).unwrap_err();
    assert_eq!(
        err.refused().copied(),
        Some(Refused {
            point: name,
            reason: Reason::Concurrency,
            retry_after: None,
        })
    );
    drop(held_a); // cancelled: the slot comes back
    assert_eq!(block_on(c.call(3)).unwrap(), 6);
    assert_eq!(block_on(held_b).unwrap(), 4);
    assert_eq!(registry().stats(name).unwrap().concurrency, 0);
}

#[test]
fn poll_ready_reserves_nothing() {
    let name = "test.tower.ready";
    policy_max_concurrency(name, 1);
    let layer = PointLayer::new(name).unwrap();
    let mut services: Vec<_> = (0..10).map(|_| layer.layer(Double)).collect();
    for s in &mut services {
        let ready = s.poll_ready(&mut Context::from_waker(Waker::noop()));
        assert!(matches!(ready, Poll::Ready(Ok(()))));
    }
    assert_eq!(registry().stats(name).unwrap().concurrency, 0);
    // Ten ready services, one slot: the first call gets it.
    let first = services[3].call(5);
    assert!(block_on(services[7].call(5)).is_err());
    assert_eq!(block_on(first).unwrap(), 10);
}

#[test]
fn outcomes_reach_the_point() {
    let name = "test.tower.outcomes";
    policy_max_concurrency(name, 10);
    let layer = PointLayer::new(name).unwrap();
    let mut svc = layer.layer(Double);
    let exceptions = || registry().stats(name).unwrap().totals.exceptions;

    assert_eq!(block_on(svc.call(4)).unwrap(), 8);
    assert_eq!(exceptions(), 0, "Ok is a success");
    match block_on(svc.call(0)) {
        Err(GuardError::Inner(e)) => assert_eq!(e, "zero"),
        other => panic!("{other:?}"),
    }
    assert_eq!(exceptions(), 1, "Err is an exception");

    // A panicking inner future: the permit records a panic (an exception).
    let mut panicky = layer.layer(tower::service_fn(|_: ()| async {
        panic!("handler panicked");
        #[allow(unreachable_code)]
        Ok::<(), String>(())
    }));
    let fut = panicky.call(());
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| block_on(fut)));
    assert!(caught.is_err());
    assert_eq!(exceptions(), 2, "a panic is an exception");

    // A future dropped mid-flight: cancelled, not an exception.
    let mut slow = layer.layer(tower::service_fn(|_: ()| async {
        std::future::pending::<()>().await;
        Ok::<(), String>(())
    }));
    let mut fut = Box::pin(slow.call(()));
    assert!(poll_once(fut.as_mut()).is_pending());
    assert_eq!(registry().stats(name).unwrap().concurrency, 1);
    drop(fut);
    let stats = registry().stats(name).unwrap();
    assert_eq!((stats.concurrency, stats.totals.exceptions), (0, 2));
}

#[test]
fn http_mode_answers_429_with_retry_after_and_counts_5xx() {
    let name = "test.tower.http";
    policy_max_concurrency(name, 1);
    let layer = PointLayer::new(name)
        .unwrap()
        .retry_after(Duration::from_millis(2500))
        .respond();
    let mut svc = layer.layer(StatusFromPath);
    let get = |path: &str| Request::get(path).body(()).unwrap();

    let held = svc.call(get("/200"));
    let res = block_on(svc.call(get("/200"))).unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(res.headers()["retry-after"], "3", "2.5 s rounds up");
    assert_eq!(res.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(
        res.body(),
        "`test.tower.http` refused the request (concurrency)"
    );
    assert_eq!(block_on(held).unwrap().status(), StatusCode::OK);

    let before = registry().stats(name).unwrap().totals.exceptions;
    assert_eq!(block_on(svc.call(get("/404"))).unwrap().status(), 404);
    assert_eq!(block_on(svc.call(get("/503"))).unwrap().status(), 503);
    let after = registry().stats(name).unwrap().totals.exceptions;
    assert_eq!(after - before, 1, "5xx is a failure, 4xx is not");

    // Without a known wait there is no Retry-After.
    let r = Refused {
        point: "p",
        reason: Reason::Overloaded,
        retry_after: None,
    };
    let res: Response<Body> = r.into();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().get("retry-after").is_none());
}

#[test]
fn every_limit_maps_to_429_and_an_open_breaker_to_503() {
    let open = Refused {
        point: "p",
        reason: Reason::BreakerOpen,
        retry_after: None,
    };
    assert_eq!(open.status(), StatusCode::SERVICE_UNAVAILABLE);
    let cut = Refused {
        point: "p",
        reason: Reason::Deadline,
        retry_after: None,
    };
    assert_eq!(cut.status(), StatusCode::GATEWAY_TIMEOUT);
    for reason in Reason::ALL
        .iter()
        .copied()
        .filter(|r| *r != Reason::BreakerOpen)
    {
        let r = Refused {
            point: "p",
            reason,
            retry_after: None,
        };
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{reason:?}");
    }
}

/// A registry of its own on a manual clock, for breakers whose waits are exact.
fn manual_registry() -> (&'static resilience_runtime::Registry, ManualClock) {
    let clock = ManualClock::new();
    let r = Box::leak(Box::new(resilience_runtime::Registry::with_clock(
        Clock::manual(&clock),
    )));
    (r, clock)
}

#[test]
fn an_open_classic_breaker_answers_503_with_the_rest_of_its_open_wait() {
    use resilience_runtime::breaker::ClassicConfig;
    use resilience_runtime::retry::Backoff;
    use resilience_runtime::BreakerPolicy;

    let (r, clock) = manual_registry();
    let name = "test.tower.retry.classic";
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .open_wait(Backoff::fixed(Duration::from_secs(5)))
        .half_open_probes(1)
        .build()
        .unwrap();
    r.set_breaker(name, BreakerPolicy::Classic(config)).unwrap();
    let point = r.point(name).unwrap();
    // The layer's own wait is only the fallback for a breaker without a known one.
    let mut svc = PointLayer::from_point(point)
        .retry_after(Duration::from_secs(7))
        .respond()
        .layer(StatusFromPath);
    let mut plain = PointLayer::from_point(point).layer(Double);
    let get = |path: &str| Request::get(path).body(()).unwrap();
    let retry_after = |res: &Response<String>| {
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        res.headers()["retry-after"].to_str().unwrap().to_owned()
    };

    assert_eq!(block_on(svc.call(get("/500"))).unwrap().status(), 500);
    // Open for 5 s from now.
    assert_eq!(retry_after(&block_on(svc.call(get("/200"))).unwrap()), "5");
    clock.advance(Duration::from_millis(1_200));
    assert_eq!(
        retry_after(&block_on(svc.call(get("/200"))).unwrap()),
        "4",
        "3.8 s rounds up"
    );
    let err = block_on(plain.call(1)).unwrap_err();
    assert_eq!(
        err.refused().copied(),
        Some(Refused {
            point: name,
            reason: Reason::BreakerOpen,
            retry_after: Some(Duration::from_millis(3_800)),
        }),
        "the exact wait, before rounding"
    );
    clock.advance(Duration::from_millis(3_300));
    assert_eq!(
        retry_after(&block_on(svc.call(get("/200"))).unwrap()),
        "1",
        "0.5 s left: at least 1"
    );

    // The wait is over: the next call is the only half-open probe. While it runs the
    // breaker's wait is unknown, so the layer's 7 s is reported.
    clock.advance(Duration::from_millis(500));
    let probe = svc.call(get("/200"));
    assert_eq!(retry_after(&block_on(svc.call(get("/200"))).unwrap()), "7");
    assert_eq!(block_on(probe).unwrap().status(), StatusCode::OK);
    // The probe closed the breaker: calls pass again.
    assert_eq!(
        block_on(svc.call(get("/200"))).unwrap().status(),
        StatusCode::OK
    );
}

#[test]
fn a_dropping_sre_breaker_answers_503_with_its_force_pass_interval() {
    use resilience_runtime::breaker::SreConfig;
    use resilience_runtime::BreakerPolicy;

    let (r, _clock) = manual_registry();
    let name = "test.tower.retry.sre";
    let config = SreConfig::builder()
        .force_pass_interval(Duration::from_millis(2_500))
        .build()
        .unwrap();
    let policy = BreakerPolicy::Sre {
        config,
        slow_call: None,
    };
    r.set_breaker(name, policy).unwrap();
    let point = r.point(name).unwrap();
    let mut svc = PointLayer::from_point(point)
        .respond()
        .layer(StatusFromPath);
    let get = |path: &str| Request::get(path).body(()).unwrap();

    // Every admitted call fails, so the breaker soon drops nearly every call.
    let mut refused = 0;
    for _ in 0..300 {
        let res = block_on(svc.call(get("/500"))).unwrap();
        match res.status().as_u16() {
            500 => assert!(res.headers().get("retry-after").is_none()),
            503 => {
                assert_eq!(res.headers()["retry-after"], "3", "2.5 s rounds up");
                refused += 1;
            }
            other => panic!("{other}"),
        }
    }
    // About 270 expected (the ratio is (n - 5) / (n + 1) after n failures).
    assert!(refused > 200, "only {refused} of 300 refused");
    // The exact wait, before rounding, in the error mode (a call the dice admits
    // fails and is retried).
    let mut plain = PointLayer::from_point(point).layer(Double);
    let rejected = (0..100)
        .find_map(|_| match block_on(plain.call(0)) {
            Err(GuardError::Refused(r)) => Some(r),
            Err(GuardError::Inner(_)) => None,
            Ok(v) => panic!("Double(0) is an error, got {v}"),
        })
        .expect("a dropping breaker refuses within 100 calls");
    assert_eq!(rejected.reason, Reason::BreakerOpen);
    assert_eq!(rejected.retry_after, Some(Duration::from_millis(2_500)));
}

#[test]
fn admission_layer_shares_a_gate_across_clones() {
    let gate = Arc::new(Gate::new(2).unwrap());
    let layer = AdmissionLayer::new("gate", gate.clone());
    let mut a = layer.layer(Double);
    let mut b = layer.clone().layer(Double);
    let h1 = a.call(1);
    let h2 = b.clone().call(1);
    assert_eq!(gate.active(), 2);
    let err = block_on(b.call(1)).unwrap_err();
    assert_eq!(err.refused().unwrap().reason, Reason::Concurrency);
    assert_eq!(err.refused().unwrap().point, "gate");
    assert_eq!(block_on(h1).unwrap(), 2);
    drop(h2);
    assert_eq!(gate.active(), 0);
    assert!(
        gate.average_latency().is_some(),
        "completed calls are timed"
    );
}

#[test]
fn admission_layer_reports_outcomes_to_the_adaptive_limits() {
    let clock = ManualClock::new();
    let cpu = Arc::new(FixedCpu::new(0));
    let limiter = Arc::new(
        AdaptiveLimiter::with_parts(AdaptiveConfig::default(), cpu, Clock::manual(&clock)).unwrap(),
    );
    let mut svc = AdmissionLayer::new("shed", limiter.clone()).layer(Double);
    assert_eq!(block_on(svc.call(1)).unwrap(), 2);
    assert!(block_on(svc.call(0)).is_err());
    clock.advance(Duration::from_millis(100));
    let s = limiter.stats(limiter.now());
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.max_pass, 1, "the Ok passed, the Err did not");

    let gradient = Arc::new(
        GradientLimiter::with_clock(
            GradientConfig::builder().initial_limit(1).build().unwrap(),
            Clock::manual(&clock),
        )
        .unwrap(),
    );
    let layer =
        AdmissionLayer::new("gradient", gradient.clone()).retry_after(Duration::from_secs(1));
    let mut svc = layer.layer(Double);
    let held = svc.call(1);
    let err = block_on(svc.call(1)).unwrap_err();
    assert_eq!(
        err.refused().copied(),
        Some(Refused {
            point: "gradient",
            reason: Reason::Overloaded,
            retry_after: Some(Duration::from_secs(1)),
        })
    );
    drop(held);
    assert_eq!(gradient.in_flight(), 0);
}

// ---------------------------------------------------------------- over TCP

/// A request and its outcome, as the client saw it.
struct Sample {
    status: StatusCode,
    latency: Duration,
}

/// Sends `total` GET requests to `path` from `clients` HTTP/1 connections (each
/// sends one request at a time), backing off `backoff` after a 429.
async fn drive(
    addr: std::net::SocketAddr,
    path: &'static str,
    total: u64,
    clients: usize,
    backoff: Duration,
) -> Vec<Sample> {
    let sent = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (sent, samples) = (sent.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let io = hyper_util::rt::TokioIo::new(stream);
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            while sent.fetch_add(1, Ordering::Relaxed) < total {
                let req = Request::get(path)
                    .header("host", addr.to_string())
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                sender.ready().await.unwrap();
                let start = Instant::now();
                let res = sender.send_request(req).await.unwrap();
                let status = res.status();
                res.into_body().collect().await.unwrap();
                let latency = start.elapsed();
                samples.lock().unwrap().push(Sample { status, latency });
                if status == StatusCode::TOO_MANY_REQUESTS {
                    tokio::time::sleep(backoff).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(samples).ok().unwrap().into_inner().unwrap()
}

fn percentile(mut latencies: Vec<Duration>, pct: usize) -> Duration {
    latencies.sort_unstable();
    let i = (latencies.len() * pct).div_ceil(100).max(1) - 1;
    latencies[i]
}

fn p99(mut latencies: Vec<Duration>) -> Duration {
    latencies.sort_unstable();
    let i = (latencies.len() * 99).div_ceil(100).max(1) - 1;
    latencies[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_app_sheds_excess_with_429_and_keeps_admitted_latency() {
    const HANDLER: Duration = Duration::from_millis(20);
    policy_max_concurrency("test.tower.axum.slow", 8);
    let gate = Arc::new(Gate::new(4).unwrap());
    // The service can do 8 things at once: beyond that, requests queue inside it.
    let capacity = Arc::new(tokio::sync::Semaphore::new(8));
    let work = move || {
        let capacity = Arc::clone(&capacity);
        async move {
            let _slot = capacity.acquire().await.unwrap();
            tokio::time::sleep(HANDLER).await;
            "done"
        }
    };
    let app = Router::new()
        .route(
            "/slow",
            get(work.clone())
                .route_layer(PointLayer::new("test.tower.axum.slow").unwrap().respond()),
        )
        .route("/unguarded", get(work))
        .route(
            "/gated",
            get(|| async {
                tokio::time::sleep(HANDLER).await;
                "done"
            })
            .route_layer(AdmissionLayer::new("gated", gate.clone()).respond()),
        )
        .route("/free", get(|| async { "free" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let started = Instant::now();
    // Clients back off 10 ms after a 429, so the run spans at least 400 / 32 x 10 ms
    // = 125 ms: several rounds of the 8 slots.
    let samples = drive(addr, "/slow", 400, 32, Duration::from_millis(10)).await;
    let ok: Vec<Duration> = samples
        .iter()
        .filter(|s| s.status == StatusCode::OK)
        .map(|s| s.latency)
        .collect();
    let limited = samples
        .iter()
        .filter(|s| s.status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(samples.len(), 400);
    assert_eq!(ok.len() + limited, 400, "only 200s and 429s");
    assert!(
        limited > 0,
        "32 clients against 8 slots must be refused sometimes"
    );
    assert!(ok.len() >= 24, "{} admitted", ok.len());
    let admitted = ok.len();
    let p50_ok = percentile(ok.clone(), 50);
    let p99_ok = p99(ok);
    // The same service and load without the guard: requests queue inside it.
    let unguarded = drive(addr, "/unguarded", 400, 32, Duration::from_millis(10)).await;
    assert!(unguarded.iter().all(|s| s.status == StatusCode::OK));
    let queued_p50 = percentile(unguarded.iter().map(|s| s.latency).collect(), 50);
    eprintln!(
        "/slow: {admitted} x 200 (p50 {p50_ok:?}, p99 {p99_ok:?}), {limited} x 429; \
         unguarded p50 {queued_p50:?}"
    );
    // Timing on a shared CI machine is noisy, so the bounds compare with the
    // unguarded run under the same conditions instead of only with the handler time.
    assert!(
        p50_ok < 3 * HANDLER,
        "admitted requests keep their latency: p50 {p50_ok:?}"
    );
    assert!(
        p99_ok < queued_p50,
        "admitted requests do not queue: p99 {p99_ok:?} vs unguarded p50 {queued_p50:?}"
    );
    let stats = registry().stats("test.tower.axum.slow").unwrap();
    assert!(stats.peak_concurrency <= 8, "{stats:?}");
    assert_eq!(stats.concurrency, 0);

    let samples = drive(addr, "/gated", 200, 16, Duration::from_millis(5)).await;
    let ok = samples
        .iter()
        .filter(|s| s.status == StatusCode::OK)
        .count();
    let limited = samples
        .iter()
        .filter(|s| s.status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((ok + limited, samples.len()), (200, 200));
    assert!(limited > 0 && ok > 0, "{ok} ok, {limited} limited");
    assert_eq!(gate.active(), 0);
    assert!(gate.average_latency().unwrap() >= HANDLER);

    // An unguarded route is untouched.
    let samples = drive(addr, "/free", 50, 8, Duration::ZERO).await;
    assert!(samples.iter().all(|s| s.status == StatusCode::OK));
    assert!(started.elapsed() < Duration::from_secs(10));
    server.abort();
}

/// A keyed layer: each request's key has its own limit; a request whose key's next
/// call is due within the key's `max_wait` waits for it in the response future (on
/// the manual clock the wait moves the clock), one due later is refused at once, and
/// a request without a key is limited by the point alone.
#[test]
fn a_keyed_layer_limits_each_key_and_waits_within_max_wait() {
    use resilience_runtime::keys::KeyPolicy;
    use resilience_runtime::Registry;
    let clock = ManualClock::new();
    let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    let keys = KeyPolicy::builder()
        .limit(10, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_millis(50))
        .build()
        .unwrap();
    r.set_policy("tower.keyed", Policy::builder().keys(keys).build().unwrap())
        .unwrap();
    let key = |req: &Request<()>| {
        req.headers()
            .get("x-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let layer = PointLayer::from_point(r.point("tower.keyed").unwrap()).keyed(key);
    let mut svc = layer.layer(tower::service_fn(|_req: Request<()>| {
        ready(Ok::<_, Infallible>(1u32))
    }));
    let mut call = |k: Option<&str>| {
        let mut req = Request::builder();
        if let Some(k) = k {
            req = req.header("x-key", k);
        }
        block_on(svc.call(req.body(()).unwrap()))
    };
    let t0 = clock.now().as_nanos();
    assert!(call(Some("a")).is_ok());
    // The key's next call is due in 100 ms, past its 50 ms `max_wait`: refused at once.
    let refused = call(Some("a")).unwrap_err();
    assert_eq!(refused.refused().unwrap().reason, Reason::HotKey);
    assert_eq!(clock.now().as_nanos(), t0, "a refused call does not wait");
    clock.advance(Duration::from_millis(60));
    // Due in 40 ms now: the call waits for it (the manual clock is moved by the wait).
    assert!(call(Some("a")).is_ok());
    assert_eq!(
        clock.now().as_nanos() - t0,
        100_000_000,
        "waited until the key's next call was due"
    );
    assert!(call(Some("b")).is_ok());
    for _ in 0..5 {
        assert!(call(None).is_ok(), "no key, no key limit");
    }
    let p = r.point("tower.keyed").unwrap();
    let keys: Vec<_> = p
        .hot_keys(10)
        .into_iter()
        .map(|k| (k.key, k.passes, k.refused))
        .collect();
    assert_eq!(keys, [("a".to_owned(), 2, 1), ("b".to_owned(), 1, 0)]);
    assert_eq!(p.stats().totals.passes, 8);
}

// ---------------------------------------------------------------- the whole policy over TCP

/// An axum app whose routes wait in a point's queue, are paced by its token bucket and
/// cut at its `call_timeout`, driven by real HTTP/1 clients over loopback TCP: queued
/// requests are all answered (never more than the limit inside the handler), paced
/// ones spaced, and a handler past its deadline answered 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_app_queues_paces_and_cuts_over_tcp() {
    const HANDLER: Duration = Duration::from_millis(20);
    let r = registry();
    r.set_policy(
        "test.tower.axum.queued",
        Policy::builder()
            .max_concurrency(2)
            .queue(64, Duration::from_secs(10))
            .build()
            .unwrap(),
    )
    .unwrap();
    r.set_policy(
        "test.tower.axum.paced",
        Policy::builder()
            .pacing(50.0, Duration::from_secs(10))
            .build()
            .unwrap(),
    )
    .unwrap();
    r.set_policy(
        "test.tower.axum.cut",
        Policy::builder()
            .call_timeout(Duration::from_millis(50))
            .build()
            .unwrap(),
    )
    .unwrap();
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let queued = {
        let (inside, most) = (inside.clone(), most.clone());
        move || {
            let (inside, most) = (inside.clone(), most.clone());
            async move {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(HANDLER).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                "done"
            }
        }
    };
    let guard = |name: &str| PointLayer::new(name).unwrap().respond();
    let app = Router::new()
        .route(
            "/queued",
            get(queued).route_layer(guard("test.tower.axum.queued")),
        )
        .route(
            "/paced",
            get(|| async { "paced" }).route_layer(guard("test.tower.axum.paced")),
        )
        .route(
            "/cut",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "too late"
            })
            .route_layer(guard("test.tower.axum.cut")),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let started = Instant::now();
    let samples = drive(addr, "/queued", 40, 16, Duration::ZERO).await;
    assert!(
        samples.iter().all(|s| s.status == StatusCode::OK),
        "every queued request is answered"
    );
    assert!(most.load(Ordering::SeqCst) <= 2, "{most:?} inside at once");
    assert!(
        started.elapsed() >= 20 * HANDLER,
        "40 requests, 2 at a time"
    );
    let s = r.stats("test.tower.axum.queued").unwrap();
    let q = s.queue.unwrap();
    assert!(q.admitted > 0 && q.timed_out == 0 && q.full == 0, "{q:?}");
    assert_eq!((s.concurrency, q.waiting, s.totals.downgrades), (0, 0, 0));

    let started = Instant::now();
    let samples = drive(addr, "/paced", 10, 5, Duration::ZERO).await;
    assert!(samples.iter().all(|s| s.status == StatusCode::OK));
    // Ten calls at 50/s with a bucket of one: the last starts 180 ms after the first.
    assert!(
        started.elapsed() >= Duration::from_millis(170),
        "{:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let samples = drive(addr, "/cut", 4, 2, Duration::ZERO).await;
    assert!(samples
        .iter()
        .all(|s| s.status == StatusCode::GATEWAY_TIMEOUT));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "cut, not waited"
    );
    let t = r.stats("test.tower.axum.cut").unwrap().totals;
    assert_eq!((t.passes, t.timeouts, t.downgrades), (4, 4, 0));
    server.abort();
}

/// A `RetryLayer` with `RetryHttp` around an HTTP client (a hyper connection per
/// request, over loopback TCP, to an axum app that answers 503 twice, then 200): the
/// client retries the `GET` and gets the 200; a `POST` is sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_layer_retries_an_http_client_over_tcp() {
    use resilience_runtime::retry::{Backoff, Retry};
    use resilience_runtime::tower::{RetryHttp, RetryLayer};

    let hits = Arc::new(AtomicU64::new(0));
    let flaky = {
        let hits = hits.clone();
        move || {
            let n = hits.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        }
    };
    let app = Router::new().route("/flaky", get(flaky.clone()).post(flaky));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = tower::service_fn(move |req: Request<String>| async move {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        sender.send_request(req).await
    });
    let name = "test.tower.client.flaky";
    let retry = Retry::builder(3)
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .build()
        .unwrap();
    let mut svc = RetryLayer::new(name)
        .unwrap()
        .retry(retry)
        .policy(RetryHttp)
        .layer(PointLayer::new(name).unwrap().layer(client));
    let req = |method: &str| {
        Request::builder()
            .method(method)
            .uri(format!("http://{addr}/flaky"))
            .header("host", addr.to_string())
            .body(String::new())
            .unwrap()
    };
    let res = svc.call(req("GET")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    let rs = registry().stats(name).unwrap().retry;
    assert_eq!((rs.calls, rs.attempts, rs.retries), (1, 3, 2));

    hits.store(0, Ordering::SeqCst);
    let res = svc.call(req("POST")).await.unwrap();
    assert_eq!(
        res.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "not idempotent"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    server.abort();
}
