//! The runtime's heartbeat client against the real server over loopback, in both
//! protocols: statistics arrive and are summed, policy edits reach running
//! instances within one pull period, and a server that goes away leaves the
//! instances working on their last policies.

mod common;

use common::*;
use resilience_admin::server::{AdminConfig, StorageConfig};
use resilience_runtime::heartbeat::{
    HeartbeatClient, HeartbeatConfig, HeartbeatError, Protocol, PullOutcome, UploadOutcome,
};
use resilience_runtime::{Clock, ManualClock, Registry};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

fn registry(manual: &ManualClock) -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::manual(manual))))
}

/// A server and registries sharing one manual clock, so cycles agree.
fn setup(storage: StorageConfig) -> (AdminConfig, ManualClock) {
    let manual = ManualClock::new();
    let mut c = config(storage);
    c.clock = Clock::manual(&manual);
    (c, manual)
}

fn client(
    url: &str,
    instance: &str,
    protocol: Protocol,
    registry: &'static Registry,
) -> HeartbeatClient {
    let config = HeartbeatConfig::builder("shop", "orders", url)
        .token(APP)
        .protocol(protocol)
        .instance(instance)
        .build()
        .unwrap();
    HeartbeatClient::new(config, registry)
}

fn edit(addr: SocketAddr, base: u64, policy: Value) -> Value {
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": base, "author": "ops", "policy": policy}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn round_trip(protocol: Protocol) {
    let (c, manual) = setup(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let (r1, r2) = (registry(&manual), registry(&manual));
    let (c1, c2) = (
        client(&server.url(), "i-1", protocol, r1),
        client(&server.url(), "i-2", protocol, r2),
    );
    // Both instances: a policy so that cycles are tracked, then traffic.
    let first = edit(
        addr,
        0,
        json!({"points": {"order.create": {"max_visits": 4,
        "window": {"buckets": 20, "bucket_width": "500ms"}}}}),
    );
    assert_eq!(first["version"], 1);
    for (client, registry, calls) in [(&c1, r1, 6), (&c2, r2, 3)] {
        assert!(matches!(
            client.pull_now().unwrap(),
            PullOutcome::Applied { version: 1, .. }
        ));
        // Everything the policy said arrived, including fields SDS has no word for.
        let policy = registry.policy("order.create").unwrap().unwrap();
        assert_eq!(
            (policy.max_visits(), policy.window().buckets),
            (Some(4), 20)
        );
        let point = registry.point("order.create").unwrap();
        for i in 0..calls {
            if let Ok(permit) = point.enter() {
                permit.finish(i == 0);
            }
        }
    }
    manual.advance(Duration::from_secs(14));
    for client in [&c1, &c2] {
        assert!(matches!(
            client.upload_now().unwrap(),
            UploadOutcome::Sent { points: 1, .. }
        ));
    }
    let now = {
        let c = Clock::manual(&manual);
        c.unix_time(c.now()).as_millis() as i64
    };
    let cycle = last_closed_cycle(now);
    let stats = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}",
            cycle + 1
        ),
        None,
    )
    .json();
    let row = &stats["rows"][0];
    // i-1: 6 visits, 4 passes, 2 downgraded by `visits`; i-2: 3 visits, all passed.
    assert_eq!(row["visits"], 9, "{stats}");
    assert_eq!(row["passes"], 7);
    assert_eq!(row["downgrades"], 2);
    assert_eq!(row["exceptions"], 2);
    assert_eq!(row["instances"], 2);
    assert_eq!(row["downgrades_by_reason"], json!({"visits": 2}));
    let instances = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let held: Vec<_> = instances["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["instance"].as_str().unwrap().to_owned(),
                i["policy_version"].as_u64(),
                i["protocol"].clone(),
            )
        })
        .collect();
    let proto = json!(if protocol == Protocol::Sds {
        "sds"
    } else {
        "json"
    });
    assert_eq!(
        held,
        [
            ("i-1".into(), Some(1), proto.clone()),
            ("i-2".into(), Some(1), proto)
        ]
    );

    // A new version replaces the set; an unchanged one is not sent again.
    edit(
        addr,
        1,
        json!({"points": {"order.refund": {"max_concurrency": 1}}}),
    );
    assert_eq!(
        c1.pull_now().unwrap(),
        PullOutcome::Applied {
            version: 2,
            applied: vec!["order.refund".into()],
            cleared: vec!["order.create".into()]
        }
    );
    assert_eq!(
        c1.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 2 }
    );
    assert_eq!(r1.policy("order.create").unwrap(), None);
}

#[test]
fn json_protocol_round_trip() {
    round_trip(Protocol::Json);
}

#[test]
fn sds_protocol_round_trip() {
    round_trip(Protocol::Sds);
}

#[test]
fn clients_keep_their_policies_while_the_server_is_down_and_catch_up_after() {
    let dir = TempDir::new("down");
    let (mut c, manual) = setup(StorageConfig::Sqlite(dir.path().join("admin.db")));
    let server = start(c.clone());
    let addr = server.addr();
    c.bind = addr; // come back on the same port
    let r = registry(&manual);
    let client = client(&server.url(), "i-1", Protocol::Json, r);
    edit(
        addr,
        0,
        json!({"points": {"order.create": {"max_visits": 2}}}),
    );
    client.pull_now().unwrap();
    server.stop();

    // Down: pulls and uploads fail, calls go on under the last policy.
    let point = r.point("order.create").unwrap();
    let passed = (0..5)
        .filter(|_| point.enter().map(|p| p.finish(false)).is_ok())
        .count();
    assert_eq!(passed, 2);
    assert!(matches!(
        client.pull_now().unwrap_err(),
        HeartbeatError::Network { .. }
    ));
    manual.advance(Duration::from_secs(14));
    assert!(client.upload_now().is_err());
    let s = client.status();
    assert_eq!(
        (s.policy_version, s.uploads_dropped, s.pull_failures),
        (1, 1, 1)
    );
    assert_eq!(
        r.policy("order.create").unwrap().unwrap().max_visits(),
        Some(2)
    );

    // Back on the same file: the version is known, and a new edit arrives.
    let server = start(c);
    assert_eq!(
        client.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 1 }
    );
    edit(
        addr,
        1,
        json!({"points": {"order.create": {"max_visits": 50}}}),
    );
    assert!(matches!(
        client.pull_now().unwrap(),
        PullOutcome::Applied { version: 2, .. }
    ));
    assert_eq!(
        r.policy("order.create").unwrap().unwrap().max_visits(),
        Some(50)
    );
    manual.advance(Duration::from_secs(10));
    assert!(matches!(
        client.upload_now().unwrap(),
        UploadOutcome::Sent { .. }
    ));
    drop(server);
}

#[test]
fn an_edit_reaches_every_running_instance_within_one_pull_period() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let period = Duration::from_secs(1);
    let instances: Vec<_> = ["a", "b"]
        .iter()
        .map(|id| {
            let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
            let config = HeartbeatConfig::builder("shop", "orders", &server.url())
                .token(APP)
                .instance(id)
                .pull_period(period)
                .build()
                .unwrap();
            (r, HeartbeatClient::new(config, r).spawn().unwrap())
        })
        .collect();
    // Let both threads make their first pull.
    wait_for(Duration::from_secs(5), "first pulls", || {
        instances
            .iter()
            .all(|(_, h)| h.client().status().pulls >= 1)
            .then_some(())
    });
    edit(
        addr,
        0,
        json!({"points": {"order.create": {"max_concurrency": 1}}}),
    );
    let edited = Instant::now();
    for (r, handle) in &instances {
        wait_for(Duration::from_secs(5), "the new version", || {
            (handle.client().policy_version() == 1).then_some(())
        });
        assert_eq!(
            r.policy("order.create").unwrap().unwrap().max_concurrency(),
            Some(1)
        );
    }
    let took = edited.elapsed();
    // One period, plus slack for a loaded machine (the request itself takes
    // milliseconds).
    assert!(took < period + Duration::from_millis(1500), "took {took:?}");
}

/// The policy file of the enforcement round trips: a breaker under the console's
/// rules of `e.mixed`, and `e.file`'s own limit.
const LOCAL_FILE: &str = "[points.\"e.mixed\".breaker]\nalgorithm = \"classic\"\n\
                          consecutive_failures = 1\n\n[points.\"e.file\"]\nmax_concurrency = 5\n";

fn ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn find<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|x| x[key] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// What a real client enforces arrives: the origins of each section, the file's
/// settings as local text, the breaker's state, digests that agree with the
/// console's for what comes from it, and the client's health.
fn enforcement_round_trip(protocol: Protocol) {
    let (c, manual) = setup(StorageConfig::Memory);
    let server = start(c);
    let addr = server.addr();
    let dir = TempDir::new("enforce");
    let path = dir.path().join("policies.toml");
    std::fs::write(&path, LOCAL_FILE).unwrap();
    let r = registry(&manual);
    r.load_policies(&path).unwrap();
    edit(
        addr,
        0,
        json!({"points": {"e.console": {"max_visits": 3}, "e.mixed": {"max_visits": 50}}}),
    );
    let client = client(&server.url(), "i-1", protocol, r);
    assert!(matches!(
        client.pull_now().unwrap(),
        PullOutcome::Applied { version: 1, .. }
    ));
    let console = r.point("e.console").unwrap();
    for i in 0..5 {
        if let Ok(p) = console.enter() {
            p.finish(i == 0);
        }
    }
    manual.advance(Duration::from_secs(2));
    r.point("e.mixed").unwrap().enter().unwrap().finish(true); // opens the breaker
    manual.advance(Duration::from_secs(12));
    assert!(matches!(
        client.upload_now().unwrap(),
        UploadOutcome::Sent { .. }
    ));

    let points = get(addr, "/api/v1/apps/shop/orders/points", None).json();
    let points = &points["points"];
    let p = find(points, "name", "e.console");
    assert_eq!(p["drift"], false, "{p}");
    assert_eq!(p["enforced_by"]["by_kind"], json!({"console": 1}));
    assert_eq!(p["last_cycle"]["visits"], 5);
    assert_eq!(p["last_cycle"]["downgrades"], 2);
    let p = find(points, "name", "e.mixed");
    assert_eq!(p["drift"], true, "{p}");
    assert_eq!(
        p["enforced_by"]["by_kind"],
        json!({"console": 1, "file": 1})
    );
    let since = ms(r.stats("e.mixed").unwrap().breaker.unwrap().since);
    assert_eq!(
        (
            p["breaker"]["state"].clone(),
            p["breaker"]["since_ms"].clone()
        ),
        (json!("open"), json!(since))
    );
    let p = find(points, "name", "e.file");
    assert_eq!(p["drift"], false, "the console does not manage it");
    assert_eq!(p["has_policy"], false);
    assert_eq!(p["enforced_by"]["by_kind"], json!({"file": 1}));

    let list = get(
        addr,
        "/api/v1/apps/shop/orders/points/e.console/instances",
        None,
    )
    .json();
    let i = find(&list["instances"], "instance", "i-1");
    assert_eq!(i["digest"], i["expected_digest"], "{i}");
    assert_eq!(i["digest"], list["console_digest"]);
    assert_eq!(i["console_version"], 1);
    let list = get(
        addr,
        "/api/v1/apps/shop/orders/points/e.mixed/instances",
        None,
    )
    .json();
    let i = find(&list["instances"], "instance", "i-1");
    let file_source = format!("file:{}", path.display());
    assert_eq!(
        i["origins"],
        json!({"rules": {"source": "console", "version": 1},
               "breaker": {"source": file_source, "version": 1}})
    );
    assert_eq!(i["drift_reasons"], json!(["local_override"]));
    // The local text is the file's own settings of the point.
    let file = resilience_runtime::config::PolicyFile::parse(
        LOCAL_FILE,
        resilience_runtime::config::Format::Toml,
    )
    .unwrap();
    let local = get(
        addr,
        "/api/v1/apps/shop/orders/points/e.mixed/instances/i-1/local",
        None,
    )
    .json();
    assert_eq!(
        local["local"],
        serde_json::to_value(&file.points["e.mixed"]).unwrap()
    );
    let instances = get(addr, "/api/v1/apps/shop/orders/instances", None).json();
    let health = &find(&instances["instances"], "instance", "i-1")["client"];
    assert_eq!(health["from_cache"], false);
    assert_eq!(health["last_pull_error"], Value::Null);
}

#[test]
fn json_protocol_carries_what_each_point_enforces() {
    enforcement_round_trip(Protocol::Json);
}

#[test]
fn sds_protocol_carries_what_each_point_enforces() {
    enforcement_round_trip(Protocol::Sds);
}
