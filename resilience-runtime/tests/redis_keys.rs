//! Cluster-wide key limits (`KeyPolicyBuilder::cluster`) against a real `redis-server`:
//! three OS processes calling one hot key (and an overridden one) stay within the
//! key's limit plus the documented lease bound while each process's own key gets its
//! full limit; a key going cold drops its lease (and its refill thread); a full map
//! drops its least recently used lease; Redis unreachable (from the start, or killed
//! under the calls) leaves the key's local rule alone in charge.
//!
//! The multi-process test re-runs this binary as workers: `keys_worker` is the
//! worker's entry point, selected with `--ignored --exact keys_worker` and the
//! `RESILIENCE_KEYS_WORKER` environment variable. The other tests run one at a time
//! (they count this process's lease threads).

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/workers.rs"]
mod workers;

use workers::{env, num, sum};

use redis_server::{free_port, shared_url, unique_key, wait_for, RedisServer};
use resilience_runtime::keys::{KeyCluster, KeyClusterStats, KeyPolicy};
use resilience_runtime::{Clock, Point, Policy, Reason, Registry};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn sleep_until_unix_ms(t: u64) {
    let now = unix_ms();
    if t > now {
        thread::sleep(Duration::from_millis(t - now));
    }
}

/// A point `name` of `r` with `keys` as its only section.
fn point(r: &'static Registry, name: &str, keys: KeyPolicy) -> &'static Point {
    r.set_policy(name, Policy::builder().keys(keys).build().unwrap())
        .unwrap();
    r.point(name).unwrap()
}

/// One call of `key`: admitted, or the reason it was not.
fn call(p: &'static Point, key: &str) -> Result<(), Reason> {
    p.enter_key(key)
        .map(|permit| permit.finish(false))
        .map_err(|d| d.reason())
}

fn cluster_stats(p: &Point) -> KeyClusterStats {
    p.key_stats()
        .and_then(|s| s.cluster)
        .expect("a keys section with a cluster setting, after a call")
}

/// This process's lease threads once their count has not changed for 300 ms.
#[cfg(target_os = "linux")]
fn settled_lease_threads() -> usize {
    let mut last = redis_server::lease_threads();
    let mut since = std::time::Instant::now();
    while since.elapsed() < Duration::from_millis(300) {
        thread::sleep(Duration::from_millis(20));
        let now = redis_server::lease_threads();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
    last
}

/// Calls `key` until `want` calls were admitted (sleeping 5 ms after each refusal, so
/// leases can start), for at most `limit`; returns the admitted count.
fn admit_until(p: &'static Point, key: &str, want: u64, limit: Duration) -> u64 {
    let mut admitted = 0;
    let start = std::time::Instant::now();
    while admitted < want && start.elapsed() < limit {
        match call(p, key) {
            Ok(()) => admitted += 1,
            Err(r) => {
                assert_eq!(r, Reason::HotKey);
                thread::sleep(Duration::from_millis(5));
            }
        }
    }
    admitted
}

// ---------------------------------------------------------------------------------
// Three processes
// ---------------------------------------------------------------------------------

const WORKER_VAR: &str = "RESILIENCE_KEYS_WORKER";

/// The workers' section: 100 calls per 1000 s per key (a refill of 0.1 per second,
/// under one token in the test), `vip` 40, batches of 5.
const LIMIT: u64 = 100;
const PERIOD: Duration = Duration::from_secs(1000);
const VIP: u64 = 40;
const BATCH: u64 = 5;

fn worker_keys(url: &str, prefix: &str) -> KeyPolicy {
    KeyPolicy::builder()
        .limit(LIMIT, PERIOD)
        .override_limit("vip", VIP)
        .cluster(
            KeyCluster::builder(url, prefix)
                .batch(BATCH)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

/// Starts `n` copies of this test binary as workers, with `env`, and returns each
/// one's `key=value` report.
fn run_workers(n: usize, env: &[(&str, String)]) -> Vec<workers::Report> {
    workers::run("keys_worker", WORKER_VAR, "1", n, env)
}

/// The worker process; does nothing unless started by the test below.
#[test]
#[ignore = "worker process of the multi-process test, started by it"]
fn keys_worker() {
    if std::env::var(WORKER_VAR).is_err() {
        return;
    }
    let id = env("WORKER_ID");
    let p = point(
        registry(),
        "keys.fleet",
        worker_keys(&env("WORKER_URL"), &env("WORKER_PREFIX")),
    );
    let solo = format!("solo-{id}");
    let start: u64 = env("WORKER_START_MS").parse().unwrap();
    let end: u64 = env("WORKER_END_MS").parse().unwrap();
    sleep_until_unix_ms(start);
    let first = unix_ms();
    let mut admitted: BTreeMap<&str, u64> = BTreeMap::new();
    while unix_ms() < end {
        for key in ["hot", "vip", solo.as_str()] {
            let name = if key == solo { "solo" } else { key };
            match call(p, key) {
                Ok(()) => *admitted.entry(name).or_default() += 1,
                Err(r) => assert_eq!(r, Reason::HotKey, "{key}"),
            }
        }
        thread::sleep(Duration::from_micros(500));
    }
    let last = unix_ms();
    let s = cluster_stats(p);
    println!(
        "WORKER-REPORT hot={} vip={} solo={} first={first} last={last} leases={} started={} \
         admitted={} credit={} local={} refused={} dropped_cold={} evicted={}",
        admitted.get("hot").unwrap_or(&0),
        admitted.get("vip").unwrap_or(&0),
        admitted.get("solo").unwrap_or(&0),
        s.leases,
        s.started,
        s.admitted,
        s.credit,
        s.local,
        s.refused,
        s.dropped_cold,
        s.evicted,
    );
}

/// Three processes call `hot` and `vip` (every process) and `solo-{i}` (process `i`
/// alone) as fast as they can for 1.5 s. Fleet-wide, `hot` stays within its limit plus
/// the bound of `KeyPolicy`'s docs (`burst + limit × d / period + N × (max_held +
/// batch)`, one lease start per process), as does `vip` with its own limit, far
/// below the `N × limit` three local limits would let through; each `solo` key gets
/// exactly its own limit.
#[test]
fn three_processes_share_a_hot_key_within_the_lease_bound() {
    let _serial = serial();
    let start = unix_ms() + 1_500;
    let end = start + 1_500;
    let reports = run_workers(
        3,
        &[
            ("WORKER_URL", shared_url()),
            ("WORKER_PREFIX", format!("{}:", unique_key("keys-fleet"))),
            ("WORKER_START_MS", start.to_string()),
            ("WORKER_END_MS", end.to_string()),
        ],
    );
    println!("3 processes, cluster-wide keys: {reports:?}");
    let first = reports.iter().map(|r| num(r, "first")).min().unwrap();
    let last = reports.iter().map(|r| num(r, "last")).max().unwrap();
    let secs = (last - first) as f64 / 1000.0;
    let n = reports.len() as f64;
    let max_held = (BATCH + BATCH / 4) as f64;
    for (key, limit) in [("hot", LIMIT), ("vip", VIP)] {
        let total = sum(&reports, key);
        let refill = limit as f64 * secs / PERIOD.as_secs_f64();
        let bound = limit as f64 + refill + n * (max_held + BATCH as f64);
        assert!(
            total as f64 <= bound,
            "{key}: {total} admitted fleet-wide > {bound:.1}: {reports:?}"
        );
        // The credit is paid back and leases under-admit by at most what they hold:
        // the fleet gets about its limit, not three.
        assert!(
            total as f64 >= limit as f64 - n * max_held,
            "{key}: only {total} of {limit}: {reports:?}"
        );
        assert!(
            reports.iter().all(|r| num(r, key) > 0),
            "{key}: every process got some: {reports:?}"
        );
    }
    for r in &reports {
        assert_eq!(num(r, "solo"), LIMIT, "a key of one process: {r:?}");
        assert_eq!(
            (num(r, "leases"), num(r, "started"), num(r, "dropped_cold")),
            (3, 3, 0),
            "{r:?}"
        );
        assert!(num(r, "refused") > 0, "{r:?}");
        assert_eq!(num(r, "local"), 0, "Redis was up: {r:?}");
    }
}

// ---------------------------------------------------------------------------------
// One process
// ---------------------------------------------------------------------------------

/// A key's lease lives while the key is called and is dropped (its refill thread
/// stopped) within `cold × 1.25` of its last call; the bucket is at
/// `{prefix + text}.tokens` in Redis.
#[cfg(target_os = "linux")]
#[test]
fn a_key_going_cold_drops_its_lease() {
    let _serial = serial();
    let url = shared_url();
    let prefix = format!("{}:", unique_key("keys-cold"));
    let cold = Duration::from_millis(400);
    let keys = KeyPolicy::builder()
        .limit(100, Duration::from_secs(60))
        .cluster(
            KeyCluster::builder(url.as_str(), prefix.as_str())
                .batch(2)
                .cold(cold)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    // Leases of the tests before may still be starting (on the chores' thread).
    let threads_before = settled_lease_threads();
    let p = point(registry(), "keys.cold", keys);
    assert_eq!(admit_until(p, "tenant-a", 4, Duration::from_secs(5)), 4);
    let s = cluster_stats(p);
    assert_eq!((s.leases, s.started), (1, 1), "{s:?}");
    assert_eq!(redis_server::lease_threads(), threads_before + 1);
    // The key's bucket, under its text.
    let mut conn = ::redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap();
    let tokens: Option<f64> = ::redis::cmd("GET")
        .arg(format!("{{{prefix}tenant-a}}.tokens"))
        .query(&mut conn)
        .unwrap();
    assert!(tokens.is_some(), "no bucket at {{{prefix}tenant-a}}.tokens");
    // Calls keep it hot past its cold time.
    for _ in 0..6 {
        thread::sleep(cold / 4);
        let _ = call(p, "tenant-a");
    }
    assert_eq!(cluster_stats(p).leases, 1);
    let last_call = std::time::Instant::now();
    let took = wait_for("the cold lease dropped", Duration::from_secs(5), || {
        cluster_stats(p).leases == 0
    });
    assert!(
        last_call.elapsed() >= cold,
        "dropped {:?} after its last call",
        last_call.elapsed()
    );
    // Looked at every `cold / 4`, on a 10 ms wheel: well within `3 × cold`.
    assert!(took < cold * 3, "dropped after {took:?}");
    let s = cluster_stats(p);
    assert_eq!((s.dropped_cold, s.evicted, s.started), (1, 0, 1), "{s:?}");
    wait_for("its refill thread stopped", Duration::from_secs(2), || {
        redis_server::lease_threads() == threads_before
    });
    // Called again, the key gets a new lease, on the same bucket.
    assert_eq!(admit_until(p, "tenant-a", 3, Duration::from_secs(3)), 3);
    let s = cluster_stats(p);
    assert_eq!((s.leases, s.started), (1, 2), "{s:?}");
    assert_eq!(redis_server::lease_threads(), threads_before + 1);
}

/// With the map full (`max_keys` 16), a key entering the table drops the least
/// recently used lease for its own; a key without a lease that the table does not
/// track is left to its local rule.
#[test]
fn a_full_map_drops_its_least_recently_used_lease() {
    let _serial = serial();
    let keys = KeyPolicy::builder()
        .limit(10, Duration::from_secs(60))
        .max_keys(16)
        .cluster(
            KeyCluster::builder(shared_url(), format!("{}:", unique_key("keys-lru")))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let p = point(registry(), "keys.lru", keys);
    for i in 0..16 {
        assert_eq!(call(p, &format!("k{i}")), Ok(()));
    }
    let s = cluster_stats(p);
    assert_eq!((s.leases, s.started), (16, 16), "{s:?}");
    // `k0` was the least recently used, but called again it is the most: `k1` is.
    assert_eq!(call(p, "k0"), Ok(()));
    // A new key gets a lease once it is in the table (at once if its sketch cells
    // are busy, else when it is more frequent than the entries it may replace).
    let mut calls = 0;
    while cluster_stats(p).started == 16 {
        calls += 1;
        assert!(calls <= 8, "the newcomer never entered the table");
        assert_eq!(call(p, "newcomer"), Ok(()));
    }
    let s = cluster_stats(p);
    assert_eq!((s.leases, s.started, s.evicted), (16, 17, 1), "{s:?}");
    assert_eq!(s.local, calls - 1, "calls before it was tracked: {s:?}");
    // Every key but `k1` kept its lease: their calls start none.
    for k in (0..16).filter(|i| *i != 1).map(|i| format!("k{i}")) {
        let _ = call(p, &k);
        let _ = call(p, "newcomer");
    }
    let s = cluster_stats(p);
    assert_eq!((s.leases, s.started, s.evicted), (16, 17, 1), "{s:?}");
}

/// Redis unreachable from the start: once the lease has failed to reach it, the key's
/// local rule alone decides, exactly: 5 of 5.
#[test]
fn unreachable_redis_leaves_the_local_rule_in_charge() {
    let _serial = serial();
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let keys = KeyPolicy::builder()
        .limit(5, Duration::from_secs(600))
        .cluster(
            KeyCluster::builder(url, "nowhere:")
                .batch(2)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let p = point(registry(), "keys.unreachable", keys);
    assert_eq!(admit_until(p, "t", 5, Duration::from_secs(5)), 5);
    thread::sleep(Duration::from_millis(200));
    for _ in 0..5 {
        assert_eq!(call(p, "t"), Err(Reason::HotKey), "the local limit holds");
    }
    let s = cluster_stats(p);
    assert!(s.credit <= 2 && s.credit + s.local == 5, "{s:?}");
    assert!(s.local >= 3, "{s:?}");
    assert_eq!(s.admitted, 0, "{s:?}");
    // The refusals after the fifth are the local rule's: the cluster counts none.
    let refused_by_cluster = s.refused;
    let _ = call(p, "t");
    assert_eq!(cluster_stats(p).refused, refused_by_cluster);
}

/// Redis killed under the calls: the key goes on at its local rule (its fallback)
/// and is held to its limit all the same.
#[test]
fn a_redis_outage_falls_back_to_the_local_rule() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let keys = KeyPolicy::builder()
        .limit(12, Duration::from_secs(600))
        .cluster(
            KeyCluster::builder(server.url(), "outage:")
                .batch(2)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let p = point(registry(), "keys.outage", keys);
    assert_eq!(admit_until(p, "t", 4, Duration::from_secs(5)), 4);
    let before = cluster_stats(p);
    assert!(before.admitted >= 2, "{before:?}");
    assert_eq!(before.local, 0, "{before:?}");
    server.stop();
    // The other 8 of its 12, by the local rule once the lease is in fallback.
    assert_eq!(admit_until(p, "t", 8, Duration::from_secs(5)), 8);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(call(p, "t"), Err(Reason::HotKey), "the local limit holds");
    let s = cluster_stats(p);
    assert!(s.local > 0, "{s:?}");
    assert_eq!(s.admitted + s.credit + s.local, 12, "{s:?}");
}

/// The `keys.cluster.*` fields are checked with the section.
#[test]
fn bad_cluster_settings_are_named() {
    let err = KeyCluster::builder("http://nope", "")
        .batch(0)
        .cold(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        err.fields(),
        [
            "keys.cluster.url",
            "keys.cluster.prefix",
            "keys.cluster.batch",
            "keys.cluster.cold"
        ],
        "{err}"
    );
    // The fields stay public: the section checks them again.
    let mut cluster = KeyCluster::builder("redis://127.0.0.1/", "k:")
        .build()
        .unwrap();
    cluster.url = "http://nope".into();
    cluster.prefix = String::new();
    cluster.batch = 0;
    cluster.cold = Duration::ZERO;
    let err = KeyPolicy::builder()
        .max_concurrency(3)
        .cluster(cluster)
        .build()
        .unwrap_err();
    assert_eq!(
        err.fields(),
        [
            "keys.cluster",
            "keys.cluster.url",
            "keys.cluster.prefix",
            "keys.cluster.batch",
            "keys.cluster.cold"
        ],
        "{err}"
    );
    // An override's limit is enough to share.
    assert!(KeyPolicy::builder()
        .override_limit("vip", 10)
        .cluster(
            KeyCluster::builder("redis://127.0.0.1/", "k:")
                .build()
                .unwrap()
        )
        .build()
        .is_ok());
}
