//! The retention of instances, points and apps that send nothing, on SQLite and on
//! PostgreSQL (feature `postgres`, `RESILIENCE_ADMIN_PG_URL`), through the server's
//! own periodic pruning on a manual clock; and reads that do not wait for a write in
//! progress.

mod common;

use common::{
    config, get, last_closed_cycle, post_json, put_json, start, wait_for, TempDir, ADMIN, APP,
};
use resilience_admin::model::{AppKey, Heartbeat, Ingested, PointCycle, Protocol};
use resilience_admin::server::{open_store, StorageConfig};
use resilience_runtime::{Clock, ManualClock};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const HOUR: Duration = Duration::from_secs(3600);

fn now_ms(manual: &ManualClock) -> i64 {
    let c = Clock::manual(manual);
    c.unix_time(c.now()).as_millis() as i64
}

fn heartbeat(addr: SocketAddr, app: &str, instance: &str, cycle: i64, body: Value) {
    let mut hb = json!({"app_group": "shop", "app": app, "instance": instance,
                        "cycle_start_ms": cycle});
    for (k, v) in body.as_object().unwrap() {
        hb[k] = v.clone();
    }
    let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"], "stored", "{}", r.text());
}

fn policy(addr: SocketAddr, app: &str, base: u64, points: Value) {
    let r = put_json(
        addr,
        &format!("/api/v1/apps/shop/{app}/policy"),
        Some(ADMIN),
        &json!({"base_version": base, "author": "alice", "policy": {"points": points}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

fn apps(addr: SocketAddr) -> Vec<String> {
    get(addr, "/api/v1/apps", None).json()["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}/{}",
                a["group"].as_str().unwrap(),
                a["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// The app's points as `(name, has a stored row)`: the list also shows the points of
/// the policy, without `first_seen_ms` when the store has no row for them.
fn points(addr: SocketAddr, app: &str) -> Vec<(String, bool)> {
    let r = get(addr, &format!("/api/v1/apps/shop/{app}/points"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                !p["first_seen_ms"].is_null(),
            )
        })
        .collect()
}

fn instances(addr: SocketAddr, app: &str) -> Vec<String> {
    get(addr, &format!("/api/v1/apps/shop/{app}/instances"), None).json()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["instance"].as_str().unwrap().to_owned())
        .collect()
}

fn owned(list: &[(&str, bool)]) -> Vec<(String, bool)> {
    list.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
}

/// Retention of one hour, pruned every 20 ms by the server:
///
/// - shop/orders: instance `gone` reports `gone.only`, `policy.p` and declares
///   `decl.a`, then falls silent; `live` keeps sending heartbeats (without declared
///   points, as SDS's client does); `puller` only pulls. After the hour `gone` and
///   `gone.only` are forgotten; `decl.a` (declared, the app still heartbeats),
///   `policy.p` (in the current policy), `live` and `puller` stay. When the whole
///   app falls silent for another hour, only its policy's point and the app (it has
///   policy versions, never deleted) stay.
/// - shop/silent: one heartbeat, then nothing: the app goes whole, and a later
///   heartbeat starts it afresh (none of its old figures come back).
/// - shop/configured: a policy and one heartbeat: the app stays for its policy.
fn retention(storage: StorageConfig) {
    let manual = ManualClock::new();
    let mut c = config(storage.clone());
    c.clock = Clock::manual(&manual);
    c.retention = HOUR;
    c.prune_interval = Duration::from_millis(20);
    let server = start(c);
    let addr = server.addr();
    let t0 = last_closed_cycle(now_ms(&manual));

    policy(addr, "orders", 0, json!({"policy.p": {"max_visits": 5}}));
    policy(addr, "configured", 0, json!({"conf.p": {"max_visits": 7}}));
    heartbeat(
        addr,
        "orders",
        "gone",
        t0,
        json!({"points": [{"name": "gone.only", "visits": 3}, {"name": "policy.p", "visits": 1}],
               "declared_points": ["decl.a"],
               "enforcing": [{"name": "gone.only", "digest": "none",
                              "origins": {"rules": {"source": "code", "version": 1}}}]}),
    );
    heartbeat(
        addr,
        "orders",
        "live",
        t0,
        json!({"points": [{"name": "live.p", "visits": 2}]}),
    );
    heartbeat(
        addr,
        "silent",
        "s-1",
        t0,
        json!({"points": [{"name": "x", "visits": 9}], "declared_points": ["x.declared"]}),
    );
    heartbeat(
        addr,
        "configured",
        "c-1",
        t0,
        json!({"points": [{"name": "c.traffic", "visits": 1}]}),
    );
    assert_eq!(
        apps(addr),
        ["shop/configured", "shop/orders", "shop/silent"]
    );

    // 50 minutes on: live still sends heartbeats, puller pulls; nothing is old yet.
    manual.advance(Duration::from_secs(50 * 60));
    let t50 = last_closed_cycle(now_ms(&manual));
    heartbeat(
        addr,
        "orders",
        "live",
        t50,
        json!({"points": [{"name": "live.p", "visits": 4}]}),
    );
    let r = post_json(
        addr,
        "/api/v1/pull",
        Some(APP),
        &json!({"app_group": "shop", "app": "orders", "instance": "puller", "version": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        instances(addr, "orders"),
        ["gone", "live", "puller"],
        "nothing is older than the retention yet"
    );

    // 61 minutes after t0: what only t0 saw is older than the retention.
    manual.advance(Duration::from_secs(11 * 60));
    wait_for(Duration::from_secs(10), "shop/silent to be pruned", || {
        (!apps(addr).contains(&"shop/silent".to_owned())).then_some(())
    });
    assert_eq!(apps(addr), ["shop/configured", "shop/orders"]);
    assert_eq!(instances(addr, "orders"), ["live", "puller"]);
    assert_eq!(
        points(addr, "orders"),
        owned(&[("decl.a", true), ("live.p", true), ("policy.p", true)])
    );
    let gone = get(
        addr,
        "/api/v1/apps/shop/orders/points/gone.only/instances",
        None,
    )
    .json();
    assert_eq!(gone["instances"], json!([]), "{gone}");
    assert_eq!(instances(addr, "configured"), Vec::<String>::new());
    assert_eq!(points(addr, "configured"), owned(&[("conf.p", false)]));
    let versions = get(addr, "/api/v1/apps/shop/configured/policy/versions", None).json();
    assert_eq!(
        versions["versions"].as_array().unwrap().len(),
        1,
        "{versions}"
    );
    // The live point's recent cycle is kept, t0's are not.
    let stats = get(
        addr,
        &format!(
            "/api/v1/apps/shop/orders/stats?from={}&to={}",
            t0,
            t50 + 10_000
        ),
        None,
    )
    .json();
    let rows: Vec<(Value, Value)> = stats["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["point"].clone(), r["cycle_start_ms"].clone()))
        .collect();
    assert_eq!(rows, [(json!("live.p"), json!(t50))], "{stats}");

    // The forgotten app starts afresh.
    let t61 = last_closed_cycle(now_ms(&manual));
    heartbeat(
        addr,
        "silent",
        "s-2",
        t61,
        json!({"points": [{"name": "y", "visits": 1}]}),
    );
    assert_eq!(instances(addr, "silent"), ["s-2"]);
    assert_eq!(points(addr, "silent"), owned(&[("y", true)]));

    // Another 61 minutes of silence of shop/orders: its instances and points go, the
    // policy's point and the app (with its versions) stay.
    manual.advance(Duration::from_secs(61 * 60));
    wait_for(
        Duration::from_secs(10),
        "shop/orders' instances to go",
        || instances(addr, "orders").is_empty().then_some(()),
    );
    assert_eq!(points(addr, "orders"), owned(&[("policy.p", true)]));
    wait_for(Duration::from_secs(10), "shop/silent to go again", || {
        (apps(addr) == ["shop/configured", "shop/orders"]).then_some(())
    });
    let policy = get(addr, "/api/v1/apps/shop/orders/policy", None).json();
    assert_eq!(policy["version"], 1, "{policy}");
    server.stop();
    if storage == StorageConfig::Memory {
        return;
    }

    // What is left after the server stopped, read from the store itself.
    let store = open_store(&storage).unwrap();
    let orders = AppKey::new("shop", "orders");
    assert_eq!(store.policy_history(&orders).unwrap().len(), 1);
    assert!(store.instances(&orders).unwrap().is_empty());
    assert!(store.enforcement(&orders, None, true).unwrap().is_empty());
    assert_eq!(
        store
            .points(&orders)
            .unwrap()
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["policy.p"]
    );
    assert!(store
        .stats(&AppKey::new("shop", "silent"), None, 0, i64::MAX, 10)
        .unwrap()
        .is_empty());
}

/// `prune_silent` on the store itself: what it counts, a point of a replaced policy
/// (not in the current version) goes, and a second run deletes nothing.
fn prune_silent_counts(storage: StorageConfig) {
    use resilience_admin::model::NewPolicyVersion;
    let store = open_store(&storage).unwrap();
    let app = AppKey::new("g", "a");
    let hb = |instance: &str, at: i64, points: &[&str]| Heartbeat {
        app: app.clone(),
        instance: instance.into(),
        host: String::new(),
        ip: "127.0.0.1".into(),
        protocol: Protocol::Json,
        cycle_start_ms: at,
        points: points
            .iter()
            .map(|p| PointCycle {
                point: (*p).into(),
                visits: 1,
                passes: 1,
                ..PointCycle::default()
            })
            .collect(),
        known_points: vec![],
        declared_points: vec![],
        policy_version: None,
        enforcing: None,
        client: None,
        part: 0,
        parts: 1,
    };
    let commit = |base: u64, points: Value| {
        store
            .commit_policy(
                &app,
                &NewPolicyVersion {
                    base_version: base,
                    author: "a".into(),
                    created_ms: 1,
                    comment: String::new(),
                    restored_from: None,
                    diff: vec![],
                    document: json!({ "points": points }),
                },
            )
            .unwrap()
    };
    let old = 1_000_000_i64;
    assert_eq!(
        store
            .record_heartbeat(&hb("i-1", old, &["a", "b", "c.x"]), old)
            .unwrap(),
        Ingested::Stored
    );
    // Version 1 configures b, version 2 (current) c.x only: b is no longer protected.
    commit(0, json!({"b": {"max_visits": 1}}));
    commit(1, json!({"c.x": {"max_visits": 1}}));
    let before = old + 1;
    assert_eq!(store.prune(before).unwrap(), 3);
    let forgotten = store.prune_silent(before).unwrap();
    assert_eq!(
        (forgotten.instances, forgotten.points, forgotten.apps),
        (1, 2, 0)
    );
    assert_eq!(
        store
            .points(&app)
            .unwrap()
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["c.x"]
    );
    let again = store.prune_silent(before).unwrap();
    assert_eq!((again.instances, again.points, again.apps), (0, 0, 0));
    // An app with nothing at all left goes; its ids are not reused with old rows.
    let other = AppKey::new("g", "other");
    let mut h = hb("o-1", old, &["p"]);
    h.app = other.clone();
    store.record_heartbeat(&h, old).unwrap();
    store.prune(before).unwrap();
    let forgotten = store.prune_silent(before).unwrap();
    assert_eq!(
        (forgotten.instances, forgotten.points, forgotten.apps),
        (1, 1, 1)
    );
    assert_eq!(
        store
            .apps()
            .unwrap()
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
}

/// Reads answer while a heartbeat waits for the database: `hold` keeps another
/// writer's lock until the returned closure is called.
fn reads_do_not_wait_for_a_write(storage: StorageConfig, hold: impl FnOnce() -> Box<dyn FnOnce()>) {
    let store = open_store(&storage).unwrap();
    let app = AppKey::new("g", "a");
    let hb = |cycle: i64| Heartbeat {
        app: app.clone(),
        instance: "i-1".into(),
        host: String::new(),
        ip: "127.0.0.1".into(),
        protocol: Protocol::Json,
        cycle_start_ms: cycle,
        points: vec![PointCycle {
            point: "p".into(),
            visits: 2,
            passes: 2,
            ..PointCycle::default()
        }],
        known_points: vec![],
        declared_points: vec!["p".into()],
        policy_version: None,
        enforcing: None,
        client: None,
        part: 0,
        parts: 1,
    };
    let cycle = 1_767_225_600_000_i64;
    store.record_heartbeat(&hb(cycle), cycle).unwrap();
    let release = hold();
    let writer = {
        let store = std::sync::Arc::clone(&store);
        let next = hb(cycle + 10_000);
        std::thread::spawn(move || store.record_heartbeat(&next, cycle + 10_000))
    };
    // The heartbeat is now waiting for the lock (holding the store's writer).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !writer.is_finished(),
        "the heartbeat should wait for the lock"
    );
    let started = Instant::now();
    assert_eq!(store.points(&app).unwrap().len(), 1);
    assert_eq!(store.stats(&app, None, 0, i64::MAX, 10).unwrap().len(), 1);
    assert_eq!(
        store.stats(&app, Some("p"), 0, i64::MAX, 10).unwrap().len(),
        1
    );
    assert_eq!(store.stats_summed(&app, 0, i64::MAX, 10).unwrap().len(), 1);
    assert!(store
        .seconds(&app, None, true, 0, i64::MAX, 10)
        .unwrap()
        .is_empty());
    assert!(store.enforcement(&app, None, false).unwrap().is_empty());
    assert_eq!(store.instances(&app).unwrap().len(), 1);
    assert_eq!(store.apps().unwrap().len(), 1);
    assert_eq!(store.current_version(&app).unwrap(), 0);
    let took = started.elapsed();
    assert!(
        !writer.is_finished(),
        "the reads ran while the heartbeat was waiting"
    );
    assert!(took < Duration::from_secs(2), "the reads took {took:?}");
    release();
    assert_eq!(writer.join().unwrap().unwrap(), Ingested::Stored);
    assert_eq!(store.stats(&app, None, 0, i64::MAX, 10).unwrap().len(), 2);
}

/// The retention forgets the points silent since its limit, which it finds by their
/// index on `last_seen_ms` (schema version 10).
#[test]
fn sqlite_retention_forgets_silent_instances_points_and_apps() {
    let dir = TempDir::new("retention");
    let path = dir.path().join("admin.db");
    retention(StorageConfig::Sqlite(path.clone()));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'points_last_seen'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        sql,
        "CREATE INDEX points_last_seen ON points (last_seen_ms)"
    );
    let mut plan = conn
        .prepare("EXPLAIN QUERY PLAN DELETE FROM points WHERE last_seen_ms < 5")
        .unwrap();
    let plan: Vec<String> = plan
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|d| d.contains("USING INDEX points_last_seen")
                || d.contains("USING COVERING INDEX points_last_seen")),
        "{plan:?}"
    );
}

#[test]
fn memory_retention_forgets_silent_instances_points_and_apps() {
    retention(StorageConfig::Memory);
}

#[test]
fn sqlite_prune_silent_counts() {
    let dir = TempDir::new("prune-silent");
    prune_silent_counts(StorageConfig::Sqlite(dir.path().join("admin.db")));
}

#[test]
fn sqlite_reads_do_not_wait_for_a_write() {
    let dir = TempDir::new("readers");
    let path = dir.path().join("admin.db");
    let lock_path = path.clone();
    reads_do_not_wait_for_a_write(StorageConfig::Sqlite(path), move || {
        // Another connection (another server on the file) holds the write lock.
        let conn = rusqlite::Connection::open(&lock_path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        Box::new(move || conn.execute_batch("ROLLBACK").unwrap())
    });
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;

    /// A database of its own (`RESILIENCE_ADMIN_PG_URL` names a server and a user
    /// that may create databases), dropped with the guard.
    struct Database {
        admin_url: String,
        name: String,
    }

    impl Database {
        fn create() -> Database {
            let admin_url = std::env::var("RESILIENCE_ADMIN_PG_URL")
                .ok()
                .filter(|u| !u.trim().is_empty())
                .expect(
                    "RESILIENCE_ADMIN_PG_URL is not set: source \
                     resilience-admin/scripts/postgres.sh first",
                );
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let name = format!(
                "ra_retention_{}_{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let mut c = ::postgres::Client::connect(&admin_url, ::postgres::NoTls).unwrap();
            c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
            Database { admin_url, name }
        }

        fn url(&self) -> String {
            let (base, _) = self.admin_url.rsplit_once('/').unwrap();
            format!("{base}/{}", self.name)
        }
    }

    impl Drop for Database {
        fn drop(&mut self) {
            if let Ok(mut c) = ::postgres::Client::connect(&self.admin_url, ::postgres::NoTls) {
                let _ = c.batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ));
            }
        }
    }

    /// The retention forgets the points silent since its limit, with their index on
    /// `last_seen_ms` (schema version 10) in place.
    #[test]
    fn postgres_retention_forgets_silent_instances_points_and_apps() {
        let db = Database::create();
        retention(StorageConfig::Postgres(db.url()));
        let mut c = ::postgres::Client::connect(&db.url(), ::postgres::NoTls).unwrap();
        let def: String = c
            .query_one(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'ra_points'
                   AND indexname = 'ra_points_last_seen'",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(def.ends_with("USING btree (last_seen_ms)"), "{def}");
    }

    #[test]
    fn postgres_prune_silent_counts() {
        let db = Database::create();
        prune_silent_counts(StorageConfig::Postgres(db.url()));
    }

    #[test]
    fn postgres_reads_do_not_wait_for_a_write() {
        let db = Database::create();
        let url = db.url();
        reads_do_not_wait_for_a_write(StorageConfig::Postgres(db.url()), move || {
            // Another session locks the points against writes (reads still pass).
            let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
            c.batch_execute("BEGIN; LOCK TABLE ra_points IN EXCLUSIVE MODE")
                .unwrap();
            Box::new(move || c.batch_execute("ROLLBACK").unwrap())
        });
    }
}
