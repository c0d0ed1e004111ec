//! The storage at the scale ("ten thousand points per instance"), on SQLite
//! and on PostgreSQL (feature `postgres`, `RESILIENCE_ADMIN_PG_URL`): a 10 000-point
//! heartbeat stored in one go (two instances, a retry, the next cycle), every figure
//! checked; and `GET .../points` of a 10 000-point app over HTTP, on a cold start
//! (the first request after the store is opened) and warm (the median and the 99th
//! percentile of several requests). Each prints its times; the bounds are the
//! issue's (200 ms for the point list: the cold request and the warm median) in
//! release builds, and loose ones in debug builds, which only catch a return to one
//! statement per row.
//!
//! Time them with `cargo test --release -p resilience-admin --all-features --test
//! storage_perf -- --nocapture --test-threads 1`.

mod common;

use common::{config, get, last_closed_cycle, start, TempDir};
use resilience_admin::model::{
    AppKey, BreakerReport, ClientHealth, CycleSeconds, Enforcing, Heartbeat, HotKey, Ingested,
    KeyTableCounts, PointCycle, PointKeys, Protocol, SecondCounts, SectionOrigin,
};
use resilience_admin::server::{open_store, StorageConfig};
use resilience_runtime::{Clock, ManualClock};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const POINTS: usize = 10_000;

/// The point list's bound: the 200 ms in release builds (debug builds are
/// several times slower, and share the machine with the other tests).
fn list_bound() -> Duration {
    if cfg!(debug_assertions) {
        Duration::from_secs(10)
    } else {
        Duration::from_millis(200)
    }
}

/// A heartbeat's bound: in release builds, far below the 14 s PostgreSQL took with
/// one statement per row.
fn ingest_bound() -> Duration {
    if cfg!(debug_assertions) {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(4)
    }
}

fn name(i: usize) -> String {
    format!("p.{i:05}")
}

/// Point `i`'s seconds in a cycle of instance `scale`: second `k` has
/// `(i + k) % 4 * scale` visits (none in the idle ones), one downgrade for reason
/// `visits` when it has visits and `k` is even.
fn seconds_of(i: usize, scale: u64) -> CycleSeconds {
    let mut by_reason = [0_u64; 10];
    let seconds = std::array::from_fn(|k| {
        let visits = ((i + k) % 4) as u64 * scale;
        let downgrades = u64::from(visits > 0 && k % 2 == 0);
        by_reason[k] = downgrades;
        SecondCounts {
            visits,
            passes: visits - downgrades,
            downgrades,
            exceptions: u64::from(visits > 0 && k == 3),
            timeouts: 0,
            ..SecondCounts::default()
        }
    });
    CycleSeconds {
        seconds,
        downgrades_by_reason: [("visits".to_owned(), by_reason)].into(),
    }
}

/// One instance's cycle of `POINTS` points with their seconds, reasons, declared
/// points, what it enforces for every tenth point, and its client's health.
fn big_heartbeat(app: &AppKey, instance: &str, cycle: i64, scale: u64) -> Heartbeat {
    let points = (0..POINTS)
        .map(|i| {
            let s = seconds_of(i, scale);
            let sum = |f: fn(&SecondCounts) -> u64| s.seconds.iter().map(f).sum::<u64>();
            let downgrades = sum(|c| c.downgrades);
            PointCycle {
                point: name(i),
                visits: sum(|c| c.visits),
                passes: sum(|c| c.passes),
                downgrades,
                exceptions: sum(|c| c.exceptions),
                timeouts: 0,
                peak_concurrency: scale,
                downgrades_by_reason: [("visits".to_owned(), downgrades)].into(),
                seconds: Some(s),
                ..PointCycle::default()
            }
        })
        .collect();
    let enforcing = (0..POINTS)
        .step_by(10)
        .map(|i| Enforcing {
            point: name(i),
            digest: format!("{i:016x}"),
            origins: [(
                "rules".to_owned(),
                SectionOrigin {
                    source: "console".into(),
                    version: 1,
                },
            )]
            .into(),
            local: (i % 20 == 0).then(|| serde_json::json!({"window": {"seconds": 10}})),
            breaker: Some(BreakerReport {
                kind: "classic".into(),
                state: "closed".into(),
                since_ms: cycle,
                transitions: 0,
            }),
        })
        .collect();
    Heartbeat {
        app: app.clone(),
        instance: instance.into(),
        host: format!("{instance}.example"),
        ip: "127.0.0.1".into(),
        protocol: Protocol::Json,
        cycle_start_ms: cycle,
        points,
        known_points: vec!["z.known".into()],
        declared_points: (0..POINTS).map(name).collect(),
        policy_version: Some(0),
        enforcing: Some(enforcing),
        client: Some(ClientHealth::default()),
        part: 0,
        parts: 1,
    }
}

/// Stores two instances' cycles, a retry and the next cycle, timing each, and checks
/// what was stored.
fn ingest(storage: StorageConfig, label: &str) {
    let store = open_store(&storage).unwrap();
    let app = AppKey::new("big", "app");
    let cycle = 1_767_225_600_000_i64;
    let a = big_heartbeat(&app, "a", cycle, 1);
    let b = big_heartbeat(&app, "b", cycle, 10);
    let mut times = BTreeMap::new();
    let mut timed = |what: &'static str, hb: &Heartbeat, expected: Ingested| {
        let started = Instant::now();
        let outcome = store.record_heartbeat(hb, cycle + 15_000).unwrap();
        let took = started.elapsed();
        assert_eq!(outcome, expected, "{what}");
        times.insert(what, took);
        took
    };
    let first = timed("1 first instance", &a, Ingested::Stored);
    let second = timed("2 second instance", &b, Ingested::Stored);
    let retry = timed("3 retry", &a, Ingested::Duplicate);
    let next = big_heartbeat(&app, "a", cycle + 10_000, 1);
    let later = timed("4 next cycle", &next, Ingested::Stored);
    println!("{label}: a {POINTS}-point heartbeat with seconds: {times:?}");
    for t in [first, second, retry, later] {
        assert!(t < ingest_bound(), "{label}: {times:?}");
    }

    // The cycle: both instances summed, the retry not counted.
    let rows = store
        .stats(&app, None, cycle, cycle + 1, POINTS + 1)
        .unwrap();
    assert_eq!(rows.len(), POINTS);
    for (i, row) in rows.iter().enumerate() {
        let (sa, sb) = (seconds_of(i, 1), seconds_of(i, 10));
        let visits: u64 = sa.seconds.iter().chain(&sb.seconds).map(|c| c.visits).sum();
        let downgrades: u64 = sa
            .seconds
            .iter()
            .chain(&sb.seconds)
            .map(|c| c.downgrades)
            .sum();
        assert_eq!(row.counts.point, name(i));
        assert_eq!(
            (row.counts.visits, row.counts.downgrades, row.instances),
            (visits, downgrades, 2),
            "{row:?}"
        );
        assert_eq!(row.counts.peak_concurrency, 11);
        assert_eq!(
            row.counts.downgrades_by_reason.get("visits").copied(),
            (downgrades > 0).then_some(downgrades),
            "{row:?}"
        );
    }
    // One point's seconds: both instances summed, idle ones not stored.
    let p = 7;
    let seconds = store
        .seconds(&app, Some(&name(p)), false, cycle, cycle + 10_000, 100)
        .unwrap();
    let expected: Vec<(i64, u64, u64, u64)> = (0..10)
        .filter_map(|k| {
            let (ca, cb) = (seconds_of(p, 1).seconds[k], seconds_of(p, 10).seconds[k]);
            (ca.visits > 0).then(|| {
                (
                    cycle + 1_000 * k as i64,
                    ca.visits + cb.visits,
                    ca.downgrades + cb.downgrades,
                    2,
                )
            })
        })
        .collect();
    let got: Vec<(i64, u64, u64, u64)> = seconds
        .iter()
        .map(|s| {
            (
                s.second_start_ms,
                s.counts.visits,
                s.counts.downgrades,
                s.instances,
            )
        })
        .collect();
    assert_eq!(got, expected);
    assert!(seconds.iter().all(
        |s| s.downgrades_by_reason.get("visits").copied().unwrap_or(0) == s.counts.downgrades
    ));
    // Every point is listed (the known one too), each with its latest cycle.
    let points = store.points(&app).unwrap();
    assert_eq!(points.len(), POINTS + 1);
    assert!(points[..POINTS]
        .iter()
        .all(|p| p.declared
            && p.last_cycle.as_ref().map(|c| c.cycle_start_ms) == Some(cycle + 10_000)));
    assert_eq!(points[POINTS].name, "z.known");
    // What both instances enforce: instance a's newest report, b's.
    let enforcement = store.enforcement(&app, None, false).unwrap();
    assert_eq!(enforcement.len(), 2 * POINTS / 10);
    assert!(enforcement
        .iter()
        .all(|r| r.entry.breaker.is_some() && r.entry.local.is_none()));
    let one = store.enforcement(&app, Some(&name(20)), true).unwrap();
    assert_eq!(
        one.iter()
            .map(|r| (r.instance.as_str(), r.cycle_start_ms, r.has_local))
            .collect::<Vec<_>>(),
        [("a", cycle + 10_000, true), ("b", cycle, true)]
    );
    assert!(one[0].entry.local.is_some());
}

/// Requests of `GET .../points` timed after the first (cold) one.
const WARM_REQUESTS: usize = 15;

/// The `p`-th percentile (0 to 100) of sorted durations: the nearest rank.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Point `i`'s hot keys as instance `scale` reports them (every tenth point, those
/// ending in 5, has some): three keys and the key table's totals.
fn keys_of(i: usize, scale: u64) -> Option<PointKeys> {
    (i % 10 == 5).then(|| PointKeys {
        hot_keys: (0..3)
            .map(|k| HotKey {
                key: format!("k{k}"),
                passes: (10 - k) * scale,
                refused: k,
                overridden: k == 0,
            })
            .collect(),
        key_table: Some(KeyTableCounts {
            tracked: 3,
            untracked_passes: scale,
            untracked_refused: 0,
            evictions: 0,
        }),
    })
}

/// Checks a point list of the app [`point_list`] builds.
fn check_list(list: &serde_json::Value, latest: i64) {
    let points = list["points"].as_array().unwrap();
    assert_eq!(points.len(), POINTS + 1);
    for (i, p) in points[..POINTS].iter().enumerate() {
        assert_eq!(p["name"], name(i));
        let k = i64::from(i % 10 == 0);
        assert_eq!(
            p["last_cycle"]["cycle_start_ms"],
            latest - k * 10_000,
            "{p}"
        );
        assert_eq!(p["last_cycle"]["instances"], 2, "{p}");
        let by = &p["enforced_by"];
        if i % 10 == 0 {
            assert_eq!(by["instances"], 2, "{p}");
        } else {
            assert!(by.is_null() || by["instances"] == 0, "{p}");
        }
        if i % 10 == 5 {
            // Both instances' keys merged: k0 10 + 20 passes, ...
            assert_eq!(p["hot_keys_instances"], 2, "{p}");
            assert_eq!(p["hot_keys"][0]["key"], "k0", "{p}");
            assert_eq!(p["hot_keys"][0]["passes"], 30, "{p}");
            assert_eq!(p["key_table"]["tracked"], 6, "{p}");
        } else {
            assert!(p.get("hot_keys").is_none(), "{p}");
        }
    }
}

/// Builds a 10 000-point app of two instances with three cycles of history, what
/// they enforce and their hot keys, then times `GET .../points` over HTTP on a
/// server opened afterwards: its first request (cold), then [`WARM_REQUESTS`] more,
/// of which it prints the median and the 99th percentile, and bounds the median.
fn point_list(storage: StorageConfig, label: &str) {
    let manual = ManualClock::new();
    let clock = Clock::manual(&manual);
    let now = clock.unix_time(clock.now()).as_millis() as i64;
    let latest = last_closed_cycle(now);
    let app = AppKey::new("shop", "orders");
    {
        let store = open_store(&storage).unwrap();
        for cycle in [latest - 20_000, latest - 10_000, latest] {
            for (instance, scale) in [("a", 1), ("b", 2)] {
                let mut hb = big_heartbeat(&app, instance, cycle, scale);
                for (i, p) in hb.points.iter_mut().enumerate() {
                    p.keys = keys_of(i, scale);
                }
                // Point i has no traffic in the latest cycle when i % 10 == 0.
                if cycle == latest {
                    hb.points.retain(|p| !p.point.ends_with('0'));
                }
                store.record_heartbeat(&hb, now).unwrap();
            }
        }
    }
    let mut c = config(storage);
    c.clock = clock;
    let server = start(c);
    let path = "/api/v1/apps/shop/orders/points";
    let timed = || {
        let started = Instant::now();
        let r = get(server.addr(), path, None);
        let took = started.elapsed();
        assert_eq!(r.status, 200, "{}", r.text());
        (took, r)
    };
    let (cold, r) = timed();
    check_list(&r.json(), latest);
    let mut warm = Vec::with_capacity(WARM_REQUESTS);
    let mut last = None;
    for _ in 0..WARM_REQUESTS {
        let (took, r) = timed();
        warm.push(took);
        last = Some(r);
    }
    check_list(&last.unwrap().json(), latest);
    let mut sorted = warm.clone();
    sorted.sort();
    let (p50, p99) = (percentile(&sorted, 50), percentile(&sorted, 99));
    println!(
        "{label}: GET .../points of {POINTS} points: cold {cold:?}, warm p50 {p50:?} \
         p99 {p99:?} (of {WARM_REQUESTS}: {warm:?})"
    );
    assert!(cold < list_bound(), "{label}: cold start {cold:?}");
    assert!(p50 < list_bound(), "{label}: warm p50 {p50:?} of {warm:?}");
    server.stop();
}

#[test]
fn sqlite_ingest_of_ten_thousand_points() {
    let dir = TempDir::new("perf-ingest");
    ingest(StorageConfig::Sqlite(dir.path().join("admin.db")), "SQLite");
}

#[test]
fn sqlite_point_list_of_ten_thousand_points_cold_and_warm() {
    let dir = TempDir::new("perf-list");
    point_list(StorageConfig::Sqlite(dir.path().join("admin.db")), "SQLite");
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
                "ra_perf_{}_{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let mut c = ::postgres::Client::connect(&admin_url, ::postgres::NoTls).unwrap();
            c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
            Database { admin_url, name }
        }

        fn storage(&self) -> StorageConfig {
            let (base, _) = self.admin_url.rsplit_once('/').unwrap();
            StorageConfig::Postgres(format!("{base}/{}", self.name))
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

    #[test]
    fn postgres_ingest_of_ten_thousand_points() {
        let db = Database::create();
        ingest(db.storage(), "PostgreSQL");
    }

    #[test]
    fn postgres_point_list_of_ten_thousand_points_cold_and_warm() {
        let db = Database::create();
        point_list(db.storage(), "PostgreSQL");
    }
}
