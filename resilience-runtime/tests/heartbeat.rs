//! The heartbeat client's side of the protocol, against scripted HTTP peers on
//! loopback: what it uploads (both protocols) from real statistics, how it applies
//! pulled policies all or nothing, failover and retry, and that a dead or hanging
//! server neither blocks guarded calls nor costs the policies in force.
//!
//! The round trip against the real admin server is in
//! `resilience-admin/tests/client.rs`; these peers are scripted so that failures
//! (refused connections, hangs, error answers) can be produced on demand.
#![cfg(all(feature = "heartbeat", feature = "macros"))]
// The annotated function exists to be declared, not called.
#![allow(dead_code)]

use resilience_runtime::heartbeat::{
    HeartbeatClient, HeartbeatConfig, HeartbeatConfigBuilder, HeartbeatError, Protocol,
    PullOutcome, UploadOutcome,
};
use resilience_runtime::sources::{Origin, Section, Source};
use resilience_runtime::{downgrade, BreakerPolicy, Clock, ManualClock, Policy, Registry};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[downgrade(point = "hb.declared.only", default)]
fn declared_only() -> u32 {
    1
}

/// 2026-01-01T00:00:00Z, where a manual clock's wall time starts (plus 1 s).
const CYCLE0: u64 = 1_767_225_600_000;

fn manual_registry() -> (&'static Registry, ManualClock) {
    let manual = ManualClock::new();
    let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (r, manual)
}

/// A request the peer received.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// The JSON of SDS's `client` form field.
    fn sds_client(&self) -> Value {
        let (_, client) = form_urlencoded::parse(&self.body)
            .find(|(k, _)| k == "client")
            .expect("a `client` form field");
        serde_json::from_str(&client).unwrap()
    }
}

type Script = dyn Fn(&Seen) -> Option<(u16, String)> + Send + Sync;

/// A scripted HTTP/1.1 peer: records every request and answers what the script says
/// (`None`: accept, read, and never answer, like a hung server).
struct Peer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Peer {
    fn start(script: impl Fn(&Seen) -> Option<(u16, String)> + Send + Sync + 'static) -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let (s, st) = (Arc::clone(&seen), Arc::clone(&stop));
        thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (s, script, st) =
                            (Arc::clone(&s), Arc::clone(&script), Arc::clone(&st));
                        thread::spawn(move || serve(stream, &s, script.as_ref(), &st));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Peer { addr, seen, stop }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Seen>>, script: &Script, stop: &AtomicBool) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let (head_end, length) = loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (end, length);
        }
    };
    while raw.len() < head_end + 4 + length {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next().unwrap().split(' ').nth(1).unwrap().to_owned();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned()))
        .collect();
    let request = Seen {
        path,
        headers,
        body: raw[head_end + 4..].to_vec(),
    };
    let answer = script(&request);
    seen.lock().unwrap().push(request);
    match answer {
        Some((status, body)) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        None => {
            // Hang: keep the connection open without answering.
            while !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A cycle's ten seconds (visits, passes, downgrades, exceptions, timeouts), zero but
/// for the given ones.
fn seconds(given: &[(usize, [u64; 5])]) -> Value {
    let mut all = vec![[0u64; 5]; 10];
    for (i, counts) in given {
        all[*i] = *counts;
    }
    json!(all)
}

fn ok(body: Value) -> Option<(u16, String)> {
    Some((200, body.to_string()))
}

/// A loopback port where nothing listens: connections are refused at once.
fn refused_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

fn config(servers: &str) -> HeartbeatConfig {
    builder(servers).build().unwrap()
}

fn builder(servers: &str) -> HeartbeatConfigBuilder {
    HeartbeatConfig::builder("shop", "orders", servers)
        .token("app-token-0123456789")
        .instance("web-1-4711")
        .host("web-1")
}

#[test]
fn json_upload_carries_the_closed_cycle_of_every_point() {
    let (registry, manual) = manual_registry();
    let peer = Peer::start(|_| ok(json!({"result": "stored"})));
    let client = HeartbeatClient::new(config(&peer.url()), registry);
    // A point with a policy: two passes, one visits downgrade, one exception.
    registry
        .set_policy(
            "hb.guarded",
            Policy::builder().max_visits(2).build().unwrap(),
        )
        .unwrap();
    let guarded = registry.point("hb.guarded").unwrap();
    // A client measures the durations of calls under a policy, for the console.
    let call = guarded.enter().unwrap();
    manual.advance(Duration::from_millis(3));
    call.finish(true);
    guarded.enter().unwrap().finish(false);
    assert!(guarded.enter().is_err());
    // A point without a policy: only totals, reported as growth.
    let plain = registry.point("hb.plain").unwrap();
    for _ in 0..3 {
        plain.enter().unwrap().finish(false);
    }
    manual.advance(Duration::from_secs(14));

    let outcome = client.upload_now().unwrap();
    assert_eq!(
        outcome,
        UploadOutcome::Sent {
            cycle_start_ms: CYCLE0,
            points: 2,
            parts: 1,
            server: peer.url(),
            retried: false
        }
    );
    let seen = peer.seen();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.path, "/api/v1/heartbeat");
    assert_eq!(req.headers["authorization"], "Bearer app-token-0123456789");
    assert_eq!(req.headers["content-type"], "application/json");
    let body = req.json();
    assert_eq!(body["app_group"], "shop");
    assert_eq!(body["app"], "orders");
    assert_eq!(body["instance"], "web-1-4711");
    assert_eq!(body["host"], "web-1");
    assert_eq!(body["ip"], "127.0.0.1");
    assert_eq!(body["cycle_start_ms"], CYCLE0);
    assert_eq!(body["policy_version"], 0);
    let points = body["points"].as_array().unwrap();
    assert_eq!(
        points[0],
        json!({"name": "hb.guarded", "visits": 3, "passes": 2, "downgrades": 1,
               "exceptions": 1, "timeouts": 0, "cancelled": 0, "peak_concurrency": 1,
               "downgrades_by_reason": {"visits": 1},
               // Every call was in the cycle's first second.
               "seconds": seconds(&[(0, [3, 2, 1, 1, 0])]),
               "seconds_by_reason": {"visits": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]},
               // Calls measured, the sum and the max of their durations in µs.
               "seconds_durations": [[2, 3000, 3000], [0, 0, 0], [0, 0, 0], [0, 0, 0],
                   [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]})
    );
    assert_eq!(points[1]["name"], "hb.plain");
    // Calls without a policy are timed too (zero-length on this manual clock).
    assert_eq!(points[1]["seconds_durations"][0], json!([3, 0, 0]));
    assert_eq!(points[1]["visits"], 3);
    assert_eq!(points[1]["passes"], 3);
    // A point without a policy has its seconds too.
    assert_eq!(points[1]["seconds"], seconds(&[(0, [3, 3, 0, 0, 0])]));
    assert_eq!(body["known_points"], json!(["hb.guarded", "hb.plain"]));
    assert!(
        body["declared_points"]
            .as_array()
            .unwrap()
            .contains(&json!("hb.declared.only")),
        "{body}"
    );

    // The same cycle is not sent twice.
    assert_eq!(
        client.upload_now().unwrap(),
        UploadOutcome::AlreadyHandled {
            cycle_start_ms: CYCLE0
        }
    );
    // Next cycle: only what happened since.
    plain.enter().unwrap().finish(true);
    manual.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    let body = peer.seen()[1].json();
    assert_eq!(body["cycle_start_ms"], CYCLE0 + 10_000);
    let points = body["points"].as_array().unwrap();
    // The guarded point had no call: it is left out.
    assert_eq!(points.len(), 1, "{body}");
    assert_eq!(
        (
            points[0]["name"].clone(),
            points[0]["visits"].clone(),
            points[0]["exceptions"].clone()
        ),
        (json!("hb.plain"), json!(1), json!(1))
    );
    // That call came at 14 s: the cycle's fifth second.
    assert_eq!(points[0]["seconds"], seconds(&[(4, [1, 1, 0, 1, 0])]));
    assert_eq!(client.status().uploads, 2);
}

#[test]
fn sds_protocol_upload_and_pull_bodies() {
    let (registry, manual) = manual_registry();
    let peer = Peer::start(|req| {
        if req.path.ends_with("/pullstrategy") {
            ok(
                json!({"sdsSchemeName": null, "changed": true, "version": 5, "errorMsg": null,
                      "strategies": [{"point": "hb.sds", "visitThreshold": 1, "concurrentThreshold": -1,
                                      "downgradeRate": 100}]}),
            )
        } else {
            ok(json!({"errorMsg": null}))
        }
    });
    let url = format!("{}/admin/", peer.url());
    let client = HeartbeatClient::new(
        builder(&url).protocol(Protocol::Sds).build().unwrap(),
        registry,
    );
    assert_eq!(
        client.pull_now().unwrap(),
        PullOutcome::Applied {
            version: 5,
            applied: vec!["hb.sds".into()],
            cleared: vec![]
        }
    );
    let point = registry.point("hb.sds").unwrap();
    point.enter().unwrap().finish(false);
    assert!(point.enter().is_err(), "visitThreshold 1 is in force");
    manual.advance(Duration::from_secs(14));
    client.upload_now().unwrap();

    let seen = peer.seen();
    assert_eq!(seen[0].path, "/admin/sds/heartbeat/pullstrategy");
    assert!(seen[0].headers["content-type"].starts_with("application/x-www-form-urlencoded"));
    let pull = seen[0].sds_client();
    assert_eq!(
        (
            pull["appGroupName"].clone(),
            pull["appName"].clone(),
            pull["hostname"].clone(),
            pull["version"].clone()
        ),
        (json!("shop"), json!("orders"), json!("web-1"), json!(0))
    );
    assert_eq!(seen[1].path, "/admin/sds/heartbeat/add");
    let up = seen[1].sds_client();
    // SDS sends the end of the reported cycle.
    assert_eq!(up["statisticsCycleTime"], CYCLE0 + 10_000);
    assert_eq!(up["version"], 5);
    assert_eq!(up["ip"], "127.0.0.1");
    assert_eq!(
        up["pointInfoMap"]["hb.sds"],
        json!({"point": "hb.sds", "visitNum": 2, "exceptionNum": 0, "concurrentNum": 1,
               "timeoutNum": 0, "cancelledNum": 0, "downgradeNum": 1,
               "downgradeReasons": {"visits": 1},
               "seconds": seconds(&[(0, [2, 1, 1, 0, 0])]),
               "secondsByReason": {"visits": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]},
               "secondsDurations": [[1, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0],
                   [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]})
    );
}

#[test]
fn pulled_policies_replace_the_whole_set_or_nothing() {
    let (registry, _manual) = manual_registry();
    let answers = Arc::new(Mutex::new(Vec::<Value>::new()));
    let queue = Arc::clone(&answers);
    let peer = Peer::start(move |_| ok(queue.lock().unwrap().remove(0)));
    let push = |v: Value| answers.lock().unwrap().push(v);
    let client = HeartbeatClient::new(config(&peer.url()), registry);

    push(json!({"changed": true, "version": 1,
                "policy": {"points": {"hb.a": {"max_visits": 10}, "hb.b": {"max_concurrency": 2}}}}));
    client.pull_now().unwrap();
    assert_eq!(
        registry.policy("hb.a").unwrap().unwrap().max_visits(),
        Some(10)
    );
    assert_eq!(client.policy_version(), 1);
    assert_eq!(peer.seen()[0].json()["version"], 0);

    push(json!({"changed": false, "version": 1, "policy": null}));
    assert_eq!(
        client.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 1 }
    );
    assert_eq!(peer.seen()[1].json()["version"], 1);

    // Version 2 drops hb.b and changes hb.a.
    push(
        json!({"changed": true, "version": 2, "policy": {"points": {"hb.a": {"max_visits": 20}}}}),
    );
    assert_eq!(
        client.pull_now().unwrap(),
        PullOutcome::Applied {
            version: 2,
            applied: vec!["hb.a".into()],
            cleared: vec!["hb.b".into()]
        }
    );
    assert_eq!(registry.policy("hb.b").unwrap(), None);

    // Version 3 is partly invalid: nothing of it applies.
    push(json!({"changed": true, "version": 3,
                "policy": {"points": {"hb.a": {"max_visits": 30}, "hb.c": {"max_concurrency": -1}}}}));
    match client.pull_now() {
        Err(HeartbeatError::Rejected { version: 3, error }) => {
            assert_eq!(error.problems()[0].point.as_deref(), Some("hb.c"));
            assert_eq!(
                error.problems()[0].field.as_deref(),
                Some("max_concurrency")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        registry.policy("hb.a").unwrap().unwrap().max_visits(),
        Some(20)
    );
    assert_eq!(registry.policy("hb.c").unwrap(), None);
    let status = client.status();
    assert_eq!(
        (
            status.policy_version,
            status.policies_rejected,
            status.policy_updates
        ),
        (2, 1, 2)
    );
    assert!(status.last_pull_error.unwrap().contains("hb.c"));
}

#[test]
fn failed_uploads_are_retried_once_on_the_next_server_then_dropped() {
    let (registry, manual) = manual_registry();
    let good = Peer::start(|_| ok(json!({"result": "stored"})));
    let down = refused_url();
    let client = HeartbeatClient::new(config(&format!("{down},{}", good.url())), registry);
    registry
        .point("hb.x")
        .unwrap()
        .enter()
        .unwrap()
        .finish(false);
    manual.advance(Duration::from_secs(14));
    match client.upload_now().unwrap() {
        UploadOutcome::Sent {
            server,
            retried: true,
            ..
        } => assert_eq!(server, good.url()),
        other => panic!("{other:?}"),
    }
    // The client stays on the server that works.
    manual.advance(Duration::from_secs(10));
    match client.upload_now().unwrap() {
        UploadOutcome::Sent { retried: false, .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(good.seen().len(), 2);

    // Two failing servers: one retry, then the cycle is dropped and counted.
    let failing = Peer::start(|_| {
        Some((
            503,
            json!({"error": {"message": "maintenance"}}).to_string(),
        ))
    });
    let client = HeartbeatClient::new(
        config(&format!("{},{}", failing.url(), refused_url())),
        registry,
    );
    manual.advance(Duration::from_secs(10));
    let err = client.upload_now().unwrap_err();
    assert!(matches!(err, HeartbeatError::Network { .. }), "{err}");
    let s = client.status();
    assert_eq!((s.uploads, s.upload_retries, s.uploads_dropped), (0, 1, 1));
    assert_eq!(failing.seen().len(), 1);
    // Pulls fail over too: the next pull goes to the other server.
    let err = client.pull_now().unwrap_err();
    assert!(
        matches!(err, HeartbeatError::Http { status: 503, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("maintenance"), "{err}");
    assert!(matches!(
        client.pull_now().unwrap_err(),
        HeartbeatError::Network { .. }
    ));
    assert_eq!(client.status().pull_failures, 2);
}

#[test]
fn a_hung_server_neither_blocks_guarded_calls_nor_costs_the_policies() {
    let (registry, _manual) = manual_registry();
    let policy = Arc::new(AtomicBool::new(true));
    let p = Arc::clone(&policy);
    let peer = Peer::start(move |_| {
        if p.load(Ordering::Relaxed) {
            ok(
                json!({"changed": true, "version": 1, "policy": {"points": {"hb.hung": {"max_visits": 3}}}}),
            )
        } else {
            None // hang
        }
    });
    // SDS's 1-s timeouts: a guarded call that waited for the network would take 1 s.
    let config = builder(&peer.url())
        .connect_timeout(Duration::from_secs(1))
        .io_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let client = HeartbeatClient::new(config, registry);
    client.pull_now().unwrap();
    policy.store(false, Ordering::Relaxed);

    // The pull blocks only the thread that runs it, for at most 3 I/O timeouts.
    let puller = {
        let client = client.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let result = client.pull_now();
            (
                result.map(|_| ()).map_err(|e| e.to_string()),
                started.elapsed(),
            )
        })
    };
    let point = registry.point("hb.hung").unwrap();
    let mut slowest = Duration::ZERO;
    let mut passed = 0;
    let started = Instant::now();
    while !puller.is_finished() && started.elapsed() < Duration::from_secs(5) {
        let t = Instant::now();
        if let Ok(permit) = point.enter() {
            passed += 1;
            permit.finish(false);
        }
        slowest = slowest.max(t.elapsed());
    }
    let (result, took) = puller.join().unwrap();
    assert!(
        result.unwrap_err().contains("receive"),
        "the hung pull fails with a timeout"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "the pull gave up after {took:?}"
    );
    // Far below the 1-s timeout: no call waited for the network.
    assert!(
        slowest < Duration::from_millis(250),
        "a guarded call took {slowest:?}"
    );
    // The policy pulled before the server hung is still in force.
    assert_eq!(passed, 3, "max_visits 3 held while the server was hung");
    assert_eq!(client.policy_version(), 1);
}

#[test]
fn the_background_thread_pulls_periodically_and_stops_with_its_handle() {
    let (registry, _manual) = manual_registry();
    let peer = Peer::start(|_| {
        ok(json!({"changed": true, "version": 7,
                                         "policy": {"points": {"hb.bg": {"max_visits": 1}}}}))
    });
    let client = HeartbeatClient::new(
        builder(&peer.url())
            .pull_period(Duration::from_millis(50))
            .build()
            .unwrap(),
        registry,
    );
    let handle = client.spawn().unwrap();
    let started = Instant::now();
    while peer.seen().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "only {} pulls",
            peer.seen().len()
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(handle.client().policy_version(), 7);
    assert_eq!(
        registry.policy("hb.bg").unwrap().unwrap().max_visits(),
        Some(1)
    );
    // The second and later pulls say which version the client holds.
    assert_eq!(peer.seen()[1].json()["version"], 7);
    let t = Instant::now();
    handle.stop();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        t.elapsed()
    );
    let after = peer.seen().len();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(peer.seen().len(), after, "no request after stop");
}

/// The incident of issue 15: a service with a policy file and the heartbeat client.
/// The console's pull mentions one point; the file's token bucket and breakers of the
/// other points stay, the console point keeps the file's breaker, and the file's later
/// edit does not win back what the console sets.
#[test]
fn a_console_pull_never_clears_what_a_file_set() {
    let (registry, _manual) = manual_registry();
    let dir = std::env::temp_dir().join(format!("resilience-hb-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("policies.toml");
    let file_text = |visits: u64| {
        format!(
            "[points.\"hb.l.bucket\"]\ntoken_bucket = {{ rate = 20.0, capacity = 20 }}\n\
             [points.\"hb.l.a\"]\nmax_visits = {visits}\n\
             [points.\"hb.l.a\".breaker]\nalgorithm = \"classic\"\nconsecutive_failures = 3\n\
             [points.\"hb.l.b\".breaker]\nalgorithm = \"classic\"\nconsecutive_failures = 3\n"
        )
    };
    std::fs::write(&path, file_text(100)).unwrap();
    registry.load_policies(&path).unwrap();
    let file = Source::file(path.display().to_string());

    let answers = Arc::new(Mutex::new(Vec::<Value>::new()));
    let queue = Arc::clone(&answers);
    let peer = Peer::start(move |_| ok(queue.lock().unwrap().remove(0)));
    let client = HeartbeatClient::new(config(&peer.url()), registry);
    answers
        .lock()
        .unwrap()
        .push(json!({"changed": true, "version": 3,
        "policy": {"points": {"hb.l.a": {"max_visits": 5}}}}));
    assert_eq!(
        client.pull_now().unwrap(),
        PullOutcome::Applied {
            version: 3,
            applied: vec!["hb.l.a".into()],
            cleared: vec![]
        }
    );
    // The file's bucket still admits exactly its 20 (the clock does not move).
    let bucket = registry.point("hb.l.bucket").unwrap();
    let passed = (0..60)
        .filter(|_| bucket.enter().map(|p| p.finish(false)).is_ok())
        .count();
    assert_eq!(passed, 20);
    // Both breakers are in force; the console point has the console's rules.
    for name in ["hb.l.a", "hb.l.b"] {
        let e = registry.effective_policy(name).unwrap();
        assert!(
            matches!(e.breaker, Some(BreakerPolicy::Classic(_))),
            "{name}"
        );
        assert_eq!(e.origin(Section::Breaker).unwrap().source, file);
    }
    let a = registry.effective_policy("hb.l.a").unwrap();
    assert_eq!(a.policy.as_ref().unwrap().max_visits(), Some(5));
    let origin = a.origin(Section::Rules).unwrap();
    assert_eq!((&origin.source, origin.version), (&Source::Console, 3));

    // The file is edited: its other points change, the console keeps its point.
    std::fs::write(&path, file_text(50)).unwrap();
    registry.load_policies(&path).unwrap();
    assert_eq!(
        registry.policy("hb.l.a").unwrap().unwrap().max_visits(),
        Some(5)
    );
    let layers = registry.layers("hb.l.a").unwrap();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[0].settings.policy.max_visits(), Some(50));

    // The console drops the point: the file's value comes back.
    answers
        .lock()
        .unwrap()
        .push(json!({"changed": true, "version": 4, "policy": {"points": {}}}));
    client.pull_now().unwrap();
    assert_eq!(
        registry.policy("hb.l.a").unwrap().unwrap().max_visits(),
        Some(50)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A restart while the console is down: the new client reads the console's last
/// policies from its cache file, enforces them, and says so.
#[test]
fn the_console_layer_survives_a_restart_with_the_console_down() {
    let dir = std::env::temp_dir().join(format!("resilience-hb-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("console-cache.json");
    let _ = std::fs::remove_file(&cache);
    let before = {
        let (registry, _manual) = manual_registry();
        let peer = Peer::start(|_| {
            ok(json!({"changed": true, "version": 7, "policy": {"points": {
                "hb.c.a": {"max_visits": 3, "breaker": {"algorithm": "classic", "consecutive_failures": 2}},
                "hb.c.b": {"shadow": true, "max_concurrency": 1}}}}))
        });
        let client = HeartbeatClient::new(
            builder(&peer.url()).cache_file(&cache).build().unwrap(),
            registry,
        );
        assert!(!client.status().from_cache);
        client.pull_now().unwrap();
        assert_eq!(client.status().cache_error, None);
        ["hb.c.a", "hb.c.b"].map(|n| registry.effective_policy(n).unwrap())
    };
    assert!(cache.exists());

    // The "restarted" instance: a fresh registry, the console unreachable.
    let (registry, _manual) = manual_registry();
    let client = HeartbeatClient::new(
        builder(&refused_url()).cache_file(&cache).build().unwrap(),
        registry,
    );
    let status = client.status();
    assert!(status.from_cache);
    assert_eq!(status.policy_version, 7);
    assert_eq!(status.cache_error, None);
    let after = ["hb.c.a", "hb.c.b"].map(|n| registry.effective_policy(n).unwrap());
    assert_eq!(after, before);
    assert_eq!(
        after[0].origin(Section::Rules).unwrap(),
        &Origin {
            source: Source::Console,
            version: 7
        }
    );
    assert!(client.pull_now().is_err());
    assert!(client.status().from_cache, "still enforcing the cache");
    assert_eq!(
        registry.policy("hb.c.a").unwrap().unwrap().max_visits(),
        Some(3)
    );

    // A cache of another app is not applied, and says why.
    let (other, _m) = manual_registry();
    let cfg = HeartbeatConfig::builder("shop", "billing", &refused_url())
        .cache_file(&cache)
        .build()
        .unwrap();
    let client = HeartbeatClient::new(cfg, other);
    assert!(!client.status().from_cache);
    assert!(client.status().cache_error.unwrap().contains("shop/orders"));
    assert_eq!(other.policy("hb.c.a").unwrap(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Heartbeat counters appear in the metrics, per client app.
#[cfg(feature = "prometheus")]
#[test]
fn heartbeat_counters_are_exported_as_metrics() {
    let cfg = HeartbeatConfig::builder("metrics", "hb", &refused_url())
        .build()
        .unwrap();
    let client = HeartbeatClient::new(cfg, resilience_runtime::registry());
    let text = resilience_runtime::metrics::render();
    assert!(
        text.contains("resilience_heartbeat_pull_failures_total{app=\"metrics/hb\"} 0"),
        "{text}"
    );
    assert!(client.pull_now().is_err());
    let text = resilience_runtime::metrics::render();
    assert!(text.contains("resilience_heartbeat_pull_failures_total{app=\"metrics/hb\"} 1"));
    assert!(text.contains("resilience_heartbeat_failing{app=\"metrics/hb\"} 1"));
    drop(client);
    let text = resilience_runtime::metrics::render();
    assert!(
        !text.contains("app=\"metrics/hb\""),
        "a dropped client is not reported"
    );
}

/// Uploads say what each point enforces and from where: the origin of every
/// section, the local (non-console) settings as text, the digest, the breaker state
/// with the time it entered it, and the client's own health.
#[test]
fn uploads_carry_what_each_point_enforces_and_from_where() {
    let (registry, manual) = manual_registry();
    let peer = Peer::start(|s| {
        if s.path.ends_with("/pull") {
            ok(json!({"changed": true, "version": 4,
                      "policy": {"points": {"hb.e.a": {"max_visits": 9}}}}))
        } else {
            ok(json!({"result": "stored"}))
        }
    });
    let client = HeartbeatClient::new(config(&peer.url()), registry);
    registry
        .load_policies_str(
            "[points.\"hb.e.a\".breaker]\nalgorithm = \"classic\"\nconsecutive_failures = 1\n\
             [points.\"hb.e.local\"]\nmax_concurrency = 3\n",
            resilience_runtime::config::Format::Toml,
        )
        .unwrap();
    client.pull_now().unwrap();
    let a = registry.point("hb.e.a").unwrap();
    manual.advance(Duration::from_secs(2));
    a.enter().unwrap().finish(true); // opens the breaker (1 failure)
    let opened_ms = CYCLE0 + 2_000;
    registry.point("hb.e.none").unwrap();
    manual.advance(Duration::from_secs(12));
    client.upload_now().unwrap();
    let body = peer
        .seen()
        .into_iter()
        .find(|s| s.path == "/api/v1/heartbeat")
        .unwrap()
        .json();
    let enforcing = body["enforcing"].as_array().unwrap();
    let by_name = |n: &str| enforcing.iter().find(|e| e["name"] == n).cloned();
    assert!(
        by_name("hb.e.none").is_none(),
        "no setting, no breaker: nothing to say"
    );
    let e = by_name("hb.e.a").unwrap();
    assert_eq!(
        e["origins"]["rules"],
        json!({"source": "console", "version": 4})
    );
    assert_eq!(
        e["origins"]["breaker"],
        json!({"source": "file:inline", "version": 1})
    );
    // The local text holds the file's breaker only, not the console's rules.
    assert_eq!(e["local"]["breaker"]["algorithm"], "classic");
    assert!(e["local"].get("max_visits").is_none(), "{e}");
    assert_eq!(e["breaker"]["state"], "open");
    assert_eq!(e["breaker"]["since_ms"], opened_ms);
    let digest = e["digest"].as_str().unwrap();
    assert_eq!(digest.len(), 16);
    assert_eq!(
        digest,
        registry
            .effective_policy("hb.e.a")
            .unwrap()
            .to_config()
            .unwrap()
            .digest()
    );
    let local = by_name("hb.e.local").unwrap();
    assert_eq!(local["local"]["max_concurrency"], 3);
    assert_ne!(local["digest"], e["digest"]);
    assert_eq!(body["client"]["from_cache"], false);
    assert_eq!(body["client"]["last_pull_error"], Value::Null);
}

/// A cycle too big for one body goes in parts, each within the limit, that together
/// carry every point and every name exactly once; a pull stays small.
#[test]
fn a_big_cycle_is_uploaded_in_parts_within_the_body_limit() {
    let (registry, manual) = manual_registry();
    registry.set_max_undeclared_points(u64::MAX);
    let peer = Peer::start(|_| ok(json!({"result": "stored", "version": 0, "changed": false})));
    let limit = 16 * 1024;
    let client = HeartbeatClient::new(
        builder(&peer.url()).max_body_bytes(limit).build().unwrap(),
        registry,
    );
    let names: Vec<String> = (0..1_500).map(|i| format!("hb.parts.{i:04}")).collect();
    for (i, name) in names.iter().enumerate() {
        let p = registry.point(name).unwrap();
        for _ in 0..=(i % 3) {
            p.enter().unwrap().finish(false);
        }
    }
    manual.advance(Duration::from_secs(14));
    let outcome = client.upload_now().unwrap();
    let UploadOutcome::Sent { points, parts, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(points, 1_500);
    assert!(parts > 5, "{parts} parts");
    let bodies: Vec<Value> = peer
        .seen()
        .iter()
        .filter(|s| s.path == "/api/v1/heartbeat")
        .map(|s| {
            assert!(s.body.len() <= limit, "a part of {} bytes", s.body.len());
            s.json()
        })
        .collect();
    assert_eq!(bodies.len(), parts);
    let mut seen_points = Vec::new();
    let mut seen_known = Vec::new();
    for (k, b) in bodies.iter().enumerate() {
        assert_eq!(
            (b["part"].as_u64(), b["parts"].as_u64()),
            (Some(k as u64), Some(parts as u64))
        );
        assert_eq!(b["cycle_start_ms"], CYCLE0);
        assert_eq!(b["instance"], "web-1-4711");
        for p in b["points"].as_array().unwrap() {
            let i: usize = p["name"].as_str().unwrap()[9..].parse().unwrap();
            assert_eq!(p["visits"], (i % 3 + 1) as u64);
            seen_points.push(p["name"].as_str().unwrap().to_owned());
        }
        for n in b["known_points"].as_array().unwrap() {
            seen_known.push(n.as_str().unwrap().to_owned());
        }
    }
    seen_points.sort();
    seen_known.sort();
    assert_eq!(seen_points, names, "every point once");
    assert_eq!(seen_known, names, "every name once");
    // The pull does not list the points any more.
    client.pull_now().unwrap();
    let pull = peer
        .seen()
        .into_iter()
        .find(|s| s.path.ends_with("/pull"))
        .unwrap();
    assert!(pull.body.len() < 1_000, "{} bytes", pull.body.len());
    assert_eq!(pull.json()["points_count"], 1_500);
}

#[test]
fn uploads_carry_the_retry_counters_of_the_cycle() {
    use resilience_runtime::retry::{Backoff, Retry};
    let (registry, manual) = manual_registry();
    let peer = Peer::start(|_| ok(json!({"result": "stored"})));
    let client = HeartbeatClient::new(config(&peer.url()), registry);
    let point = registry.point("hb.retry").unwrap();
    let retry = Retry::builder(3)
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .build()
        .unwrap();
    let _ = point.call_retrying(&retry, None, || Err::<(), _>(()), |_| Ok(()), |_| true);
    manual.advance(Duration::from_secs(14));
    client.upload_now().unwrap();
    let body = peer.seen()[0].json();
    let p = body["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "hb.retry")
        .unwrap()
        .clone();
    assert_eq!(
        p["retry"],
        json!({"calls": 1, "attempts": 3, "retries": 2, "exhausted": 1, "refused_by_budget": 0,
               "hedges": 0, "cancelled": 0})
    );
    // Only the growth: nothing new in the next cycle, so no retry object.
    point.enter().unwrap().finish(false);
    manual.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    let body = peer.seen()[1].json();
    let p = &body["points"].as_array().unwrap()[0];
    assert_eq!(p["name"], "hb.retry");
    assert!(p.get("retry").is_none(), "{p}");
}

#[test]
fn uploads_carry_the_queue_of_the_cycle() {
    use std::future::Future;
    let (registry, manual) = manual_registry();
    let peer = Peer::start(|_| ok(json!({"result": "stored"})));
    let client = HeartbeatClient::new(config(&peer.url()), registry);
    let policy = resilience_runtime::Policy::builder()
        .max_concurrency(1)
        .queue(1, Duration::from_millis(100))
        .build()
        .unwrap();
    registry.set_policy("hb.queue", policy).unwrap();
    let point = registry.point("hb.queue").unwrap();
    let held = point.enter().unwrap();
    // One waiter (polled by hand), one refused because the queue is full.
    let mut waiter = Box::pin(point.enter_async());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(waiter.as_mut().poll(&mut cx).is_pending());
    assert!(point.enter().is_err());
    manual.advance(Duration::from_millis(30));
    held.finish(false);
    let std::task::Poll::Ready(Ok(permit)) = waiter.as_mut().poll(&mut cx) else {
        panic!("admitted");
    };
    permit.finish(false);
    manual.advance(Duration::from_secs(14));
    client.upload_now().unwrap();
    let body = peer.seen()[0].json();
    let p = body["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "hb.queue")
        .unwrap()
        .clone();
    assert_eq!(
        p["queue"],
        json!({"waiting": 0, "peak_waiting": 1, "admitted": 1, "timed_out": 0,
               "cancelled": 0, "refused": 0, "full": 1, "evicted": 0, "wait_ns": 30_000_000u64,
               "max_wait_ns": 30_000_000u64})
    );
    // Only the growth: a quiet next cycle carries no queue object.
    point.enter().unwrap().finish(false);
    manual.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    let body = peer.seen()[1].json();
    let p = &body["points"].as_array().unwrap()[0];
    assert!(p.get("queue").is_none(), "{p}");
}

#[test]
fn uploads_carry_the_hot_keys_and_pulled_keys_sections_apply() {
    let (registry, manual) = manual_registry();
    let answers = Arc::new(Mutex::new(Vec::<Value>::new()));
    let queue = Arc::clone(&answers);
    let peer = Peer::start(move |req| {
        if req.path.ends_with("/pull") {
            ok(queue.lock().unwrap().remove(0))
        } else {
            ok(json!({"result": "stored"}))
        }
    });
    let client = HeartbeatClient::new(config(&peer.url()), registry);
    answers
        .lock()
        .unwrap()
        .push(json!({"changed": true, "version": 1, "policy": {"points": {
        "hb.keys": {"keys": {"limit": 2, "period": "1h", "overrides": {"vip": 5,
                    "slow": {"max_concurrency": 1}}}},
        "hb.plain": {"max_visits": 100}}}}));
    client.pull_now().unwrap();
    let keys = registry
        .policy("hb.keys")
        .unwrap()
        .unwrap()
        .keys()
        .cloned()
        .unwrap();
    assert_eq!(keys.rule_of("vip").limit, Some(5));
    assert_eq!(keys.rule_of("slow").max_concurrency, Some(1));
    let point = registry.point("hb.keys").unwrap();
    let call = |key: &str| point.enter_key(key).map(|p| p.finish(false)).is_ok();
    assert_eq!((0..3).filter(|_| call("alice")).count(), 2);
    assert_eq!((0..4).filter(|_| call("vip")).count(), 4);
    assert!(call("bob"));
    registry
        .point("hb.plain")
        .unwrap()
        .enter()
        .unwrap()
        .finish(false);
    manual.advance(Duration::from_secs(14));
    client.upload_now().unwrap();
    let body = peer.seen()[1].json();
    let find = |name: &str| {
        body["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    let p = find("hb.keys");
    assert_eq!(
        p["hot_keys"],
        json!([{"key": "vip", "passes": 4, "refused": 0, "overridden": true},
               {"key": "alice", "passes": 2, "refused": 1, "overridden": false},
               {"key": "bob", "passes": 1, "refused": 0, "overridden": false},
               // An override is tracked before its first call.
               {"key": "slow", "passes": 0, "refused": 0, "overridden": true}])
    );
    assert_eq!(
        p["key_table"],
        json!({"tracked": 2, "untracked_passes": 0, "untracked_refused": 0, "evictions": 0})
    );
    assert_eq!(p["downgrades_by_reason"], json!({"hot_key": 1}));
    // A point without a keys section has neither.
    let plain = find("hb.plain");
    assert!(plain.get("hot_keys").is_none() && plain.get("key_table").is_none());
    // The section's origin is the console's.
    let enforcing = body["enforcing"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "hb.keys")
        .unwrap()
        .clone();
    assert_eq!(enforcing["origins"]["keys"]["source"], "console");

    // At most ten keys, the hottest.
    for i in 0..20 {
        for _ in 0..=(i % 3) {
            call(&format!("k{i:02}"));
        }
    }
    manual.advance(Duration::from_secs(10));
    client.upload_now().unwrap();
    let body = peer.seen()[2].json();
    let p = &body["points"].as_array().unwrap()[0];
    assert_eq!(p["name"], "hb.keys");
    let hot = p["hot_keys"].as_array().unwrap();
    assert_eq!(hot.len(), 10, "{p}");
    assert_eq!(hot[0]["key"], "vip");
    assert_eq!(p["key_table"]["tracked"], 22);

    // SDS's form is unchanged: no hot keys.
    let sds = HeartbeatClient::new(
        builder(&peer.url())
            .protocol(Protocol::Sds)
            .build()
            .unwrap(),
        registry,
    );
    call("alice");
    manual.advance(Duration::from_secs(10));
    sds.upload_now().unwrap();
    let up = peer.seen()[3].sds_client();
    let p = &up["pointInfoMap"]["hb.keys"];
    assert!(p.is_object(), "{up}");
    assert!(
        p.get("hot_keys").is_none() && p.get("key_table").is_none(),
        "{p}"
    );
}

#[test]
fn a_token_goes_over_plain_http_only_to_loopback_unless_allowed() {
    let peer = Peer::start(|_| {
        ok(json!({"changed": false, "version": 0, "errorMsg": null, "strategies": []}))
    });
    let local_by_name = format!("http://localhost:{}", peer.addr.port());
    for protocol in [Protocol::Json, Protocol::Sds] {
        // Not loopback: refused when built, naming the server and the option.
        for remote in ["http://10.0.0.5:7070", "console.internal:7070"] {
            let servers = format!("{},{remote}", peer.url());
            let e = builder(&servers).protocol(protocol).build().unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(
                    e,
                    HeartbeatError::Config {
                        field: "servers",
                        ..
                    }
                ),
                "{text}"
            );
            assert!(
                text.contains(remote.trim_start_matches("http://")),
                "{text}"
            );
            assert!(text.contains("`allow_plain_http(true)`"), "{text}");
            // Said explicitly, it is allowed; and without a token there is nothing to
            // protect.
            let allowed = builder(&servers)
                .protocol(protocol)
                .allow_plain_http(true)
                .build()
                .unwrap();
            assert_eq!(allowed.servers().len(), 2);
            HeartbeatConfig::builder("shop", "orders", &servers)
                .protocol(protocol)
                .build()
                .unwrap();
        }
        // Loopback by name: the token arrives.
        let (registry, _) = manual_registry();
        let config = builder(&local_by_name).protocol(protocol).build().unwrap();
        HeartbeatClient::new(config, registry).pull_now().unwrap();
        let seen = peer.seen();
        let last = seen.last().unwrap();
        assert_eq!(
            last.headers.get("authorization").map(String::as_str),
            Some("Bearer app-token-0123456789")
        );
    }
    assert_eq!(peer.seen().len(), 2);
}
