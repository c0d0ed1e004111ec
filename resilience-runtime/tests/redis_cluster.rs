//! Every Redis-backed feature on a real Redis Cluster (`redis+cluster://` URLs), the
//! one `scripts/redis-cluster.sh` starts (3 masters, 3 replicas;
//! `RESILIENCE_REDIS_CLUSTER_URL`), with keys placed on each master in turn:
//!
//! - a token bucket's two keys share a slot, as `CLUSTER KEYSLOT` says;
//! - three processes share per-call limits (token bucket, period) exactly, and leased
//!   ones (token bucket, visits) within their documented bounds;
//! - bloom filters keep go-zero's bits on whichever master holds their key;
//! - hot keys' leases (`keys.cluster`) and a point's `cluster` limit are shared;
//! - an ACL user (`redis+cluster://user:pass@...`) reaches every node; a wrong
//!   password sends limits to their fallback.
//!
//! The multi-process tests re-run this binary as workers (`cluster_worker`, selected
//! with `--ignored --exact` and `RESILIENCE_CLUSTER_WORKER`). Killing a master is
//! `redis_cluster_failover`'s, on a private cluster.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/workers.rs"]
mod workers;

use redis_cluster::{bucket_keys, cli, masters, name_on, seed_ports, shared_cluster_url, slot};
use redis_server::unique_key;
use resilience_runtime::bloom::BloomFilter;
use resilience_runtime::keys::{KeyCluster, KeyPolicy};
use resilience_runtime::redis::{
    ClusterDecision, ClusterLease, ClusterMode, PeriodDecision, RedisBloom, RedisPeriodLimiter,
    RedisTokenLimiter,
};
use resilience_runtime::{Clock, ClusterLimit, Point, Policy, Reason, Registry};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use workers::{env, num, sum};

/// The shared cluster's masters, as its first seed sees them (3 with the script).
fn cluster() -> (String, Vec<redis_cluster::Master>) {
    let url = shared_cluster_url();
    let masters = masters(seed_ports(&url)[0]);
    assert!(masters.len() >= 3, "a cluster of 3 masters: {masters:?}");
    (url, masters)
}

/// The multi-process tests one at a time: each starts three processes.
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

fn registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

/// Whether the master on `port` itself holds `key` (asked directly, not through the
/// cluster: another node would answer `MOVED`).
fn holds(port: u16, key: &str) -> bool {
    cli(port, &["EXISTS", key]).trim() == "1"
}

#[test]
fn a_token_buckets_keys_share_a_slot_on_every_master() {
    let (_, masters) = cluster();
    let port = masters[0].port;
    for (i, m) in masters.iter().enumerate() {
        let name = name_on(m, &unique_key(&format!("slot-{i}")), |n| {
            bucket_keys(n)[0].clone()
        });
        let [tokens, ts] = bucket_keys(&name);
        let of = |key: &str| -> u16 {
            cli(port, &["CLUSTER", "KEYSLOT", key])
                .trim()
                .parse()
                .unwrap()
        };
        assert_eq!(
            of(&tokens),
            slot(&tokens),
            "this test's CRC16 is the cluster's"
        );
        assert_eq!(of(&tokens), of(&ts), "{tokens} and {ts}");
        assert!(m.serves(of(&tokens)));
    }
    // Keys the old names would split (a leading `}`) are refused, not split.
    let err = RedisTokenLimiter::new(&shared_cluster_url(), "}odd", 1.0, 1).unwrap_err();
    assert!(err.to_string().contains("slots"), "{err}");
}

// ---------------------------------------------------------------------------------
// Several processes
// ---------------------------------------------------------------------------------

const WORKER_VAR: &str = "RESILIENCE_CLUSTER_WORKER";

/// The worker process of the multi-process tests; does nothing unless started by one.
#[test]
#[ignore = "worker process of the multi-process tests, started by them"]
fn cluster_worker() {
    let Ok(mode) = std::env::var(WORKER_VAR) else {
        return;
    };
    let url = env("WORKER_URL");
    let report = match mode.as_str() {
        "per-call" => worker_per_call(&url),
        "lease" => worker_lease(&url),
        "keys" => worker_keys(&url),
        other => panic!("unknown worker mode {other:?}"),
    };
    println!("WORKER-REPORT {report}");
}

/// Per master `i` (keys `WORKER_TOKEN_KEY_i`, `WORKER_PERIOD_KEY_i`): 100 takes of a
/// token bucket (burst 100, refill 0.001/s) and 70 of a period limit (quota 80),
/// interleaved across the masters.
fn worker_per_call(url: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n: usize = env("WORKER_MASTERS").parse().unwrap();
    let limits: Vec<_> = (0..n)
        .map(|i| {
            let tokens =
                RedisTokenLimiter::builder(url, &env(&format!("WORKER_TOKEN_KEY_{i}")), 0.001, 100)
                    .timeout(Duration::from_secs(2))
                    .build()
                    .unwrap();
            let period = RedisPeriodLimiter::builder(
                url,
                &env(&format!("WORKER_PERIOD_KEY_{i}")),
                Duration::from_secs(60),
                80,
            )
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
            (tokens, period)
        })
        .collect();
    sleep_until_unix_ms(env("WORKER_START_MS").parse().unwrap());
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    rt.block_on(async {
        for step in 0..170 {
            for (i, (tokens, period)) in limits.iter().enumerate() {
                let what = if step % 17 < 10 {
                    match tokens.allow().await {
                        ClusterDecision::Admitted => "admitted",
                        ClusterDecision::Refused => "refused",
                        d => panic!("fallback with the cluster up: {d:?}"),
                    }
                } else {
                    match period.take().await.unwrap() {
                        PeriodDecision::Allowed => "allowed",
                        PeriodDecision::HitQuota => "hit",
                        PeriodDecision::OverQuota => "over",
                    }
                };
                *counts.entry(format!("{what}_{i}")).or_default() += 1;
            }
        }
    });
    let round_trips: u64 = limits.iter().map(|(t, _)| t.status().redis_calls).sum();
    let mut report: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    report.push(format!("round_trips={round_trips}"));
    report.join(" ")
}

/// Spends from a token lease and a visits lease (keys on different masters) between
/// the start and end times.
fn worker_lease(url: &str) -> String {
    let batch: u64 = env("WORKER_BATCH").parse().unwrap();
    let tokens = ClusterLease::token_bucket(
        url,
        &env("WORKER_TOKEN_KEY"),
        env("WORKER_RATE").parse().unwrap(),
        env("WORKER_BURST").parse().unwrap(),
    )
    .batch(batch)
    .timeout(Duration::from_secs(1))
    .build()
    .unwrap();
    let visits = ClusterLease::visits(
        url,
        &env("WORKER_VISITS_KEY"),
        Duration::from_secs(60),
        env("WORKER_QUOTA").parse().unwrap(),
    )
    .batch(batch)
    .timeout(Duration::from_secs(1))
    .build()
    .unwrap();
    let (start, end): (u64, u64) = (
        env("WORKER_START_MS").parse().unwrap(),
        env("WORKER_END_MS").parse().unwrap(),
    );
    sleep_until_unix_ms(start);
    let first = unix_ms();
    let (mut t_admitted, mut v_admitted) = (0u64, 0u64);
    while unix_ms() < end {
        let t = tokens.try_acquire();
        let v = visits.try_acquire();
        assert!(
            t.mode() == ClusterMode::Redis && v.mode() == ClusterMode::Redis,
            "fallback with the cluster up: {t:?} {v:?}"
        );
        t_admitted += u64::from(t.is_admitted());
        v_admitted += u64::from(v.is_admitted());
        if !t.is_admitted() {
            thread::sleep(Duration::from_micros(200));
        }
    }
    let last = unix_ms();
    format!(
        "tokens={t_admitted} visits={v_admitted} first={first} last={last} max_held={} \
         round_trips={}",
        tokens.max_held(),
        tokens.status().redis_calls + visits.status().redis_calls,
    )
}

/// Calls the hot keys `WORKER_HOT_i` (every process) and `solo-{id}` (this one alone)
/// of a `keys` section shared through the cluster, between the start and end times.
fn worker_keys(url: &str) -> String {
    let n: usize = env("WORKER_MASTERS").parse().unwrap();
    let keys = KeyPolicy::builder()
        .limit(KEY_LIMIT, KEY_PERIOD)
        .cluster(
            KeyCluster::builder(url, env("WORKER_PREFIX"))
                .batch(KEY_BATCH)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let r = registry();
    r.set_policy(
        "keys.cluster",
        Policy::builder().keys(keys).build().unwrap(),
    )
    .unwrap();
    let p = r.point("keys.cluster").unwrap();
    let hot: Vec<String> = (0..n).map(|i| env(&format!("WORKER_HOT_{i}"))).collect();
    let solo = format!("solo-{}", env("WORKER_ID"));
    let (start, end): (u64, u64) = (
        env("WORKER_START_MS").parse().unwrap(),
        env("WORKER_END_MS").parse().unwrap(),
    );
    sleep_until_unix_ms(start);
    let first = unix_ms();
    let mut admitted: BTreeMap<String, u64> = BTreeMap::new();
    while unix_ms() < end {
        for (name, key) in hot
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("hot_{i}"), k.as_str()))
            .chain([("solo".to_owned(), solo.as_str())])
        {
            match call(p, key) {
                Ok(()) => *admitted.entry(name).or_default() += 1,
                Err(r) => assert_eq!(r, Reason::HotKey, "{key}"),
            }
        }
        thread::sleep(Duration::from_micros(500));
    }
    let last = unix_ms();
    let stats = p
        .key_stats()
        .and_then(|s| s.cluster)
        .expect("cluster stats");
    let mut report: Vec<String> = admitted.iter().map(|(k, v)| format!("{k}={v}")).collect();
    report.push(format!(
        "first={first} last={last} local={} leases={}",
        stats.local, stats.leases
    ));
    report.join(" ")
}

const KEY_LIMIT: u64 = 60;
const KEY_PERIOD: Duration = Duration::from_secs(1000);
const KEY_BATCH: u64 = 5;

/// The sum of the numbers `key` of all reports, 0 where a report has none (a worker
/// that never saw that outcome).
fn total(reports: &[workers::Report], key: &str) -> u64 {
    reports
        .iter()
        .map(|r| r.get(key).map_or(0, |v| v.parse::<u64>().unwrap()))
        .sum()
}

fn call(p: &'static Point, key: &str) -> Result<(), Reason> {
    p.enter_key(key)
        .map(|permit| permit.finish(false))
        .map_err(|d| d.reason())
}

/// Three processes take from a token bucket and a period limit on each master, one
/// round trip per call: each limit admits exactly its burst or quota, fleet-wide.
#[test]
fn three_processes_share_per_call_limits_exactly_on_every_master() {
    let _serial = serial();
    let (url, masters) = cluster();
    let mut env = vec![
        ("WORKER_URL".to_owned(), url.clone()),
        ("WORKER_MASTERS".to_owned(), masters.len().to_string()),
        (
            "WORKER_START_MS".to_owned(),
            (unix_ms() + 1_000).to_string(),
        ),
    ];
    let mut keys = Vec::new();
    for (i, m) in masters.iter().enumerate() {
        let token = name_on(m, &unique_key(&format!("procs-token-{i}")), |n| {
            bucket_keys(n)[0].clone()
        });
        let period = name_on(m, &unique_key(&format!("procs-period-{i}")), str::to_owned);
        env.push((format!("WORKER_TOKEN_KEY_{i}"), token.clone()));
        env.push((format!("WORKER_PERIOD_KEY_{i}"), period.clone()));
        keys.push((m.port, token, period));
    }
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let started = Instant::now();
    let reports = workers::run("cluster_worker", WORKER_VAR, "per-call", 3, &env);
    println!(
        "per call, 3 processes x {} masters in {:?}: {reports:?}",
        masters.len(),
        started.elapsed()
    );
    for (i, (port, token, period)) in keys.iter().enumerate() {
        // Burst 100, 300 takes; quota 80, 210 takes.
        assert_eq!(
            total(&reports, &format!("admitted_{i}")),
            100,
            "{reports:?}"
        );
        assert_eq!(total(&reports, &format!("refused_{i}")), 200, "{reports:?}");
        assert_eq!(total(&reports, &format!("allowed_{i}")), 79, "{reports:?}");
        assert_eq!(total(&reports, &format!("hit_{i}")), 1, "{reports:?}");
        assert_eq!(total(&reports, &format!("over_{i}")), 130, "{reports:?}");
        // The state lives on the master the key's slot belongs to.
        for key in bucket_keys(token).iter().chain([period]) {
            assert!(holds(*port, key), "{key} on 127.0.0.1:{port}");
        }
    }
    // One round trip per token take.
    assert_eq!(sum(&reports, "round_trips"), 3 * 100 * masters.len() as u64);
}

/// Three processes spend a token lease and a visits lease whose keys sit on different
/// masters: visits never pass the quota and reach 95% of it; tokens stay within
/// `burst + rate x duration + instances x max_held` and within 5% of the ideal.
#[test]
fn three_processes_share_leased_limits_on_the_cluster() {
    let _serial = serial();
    let (url, masters) = cluster();
    let (rate, burst, batch, quota) = (500u64, 50u64, 10u64, 900u64);
    let start = unix_ms() + 1_500;
    let end = start + 1_500;
    let token_key = name_on(&masters[1], &unique_key("lease-tokens"), |n| {
        bucket_keys(n)[0].clone()
    });
    let visits_key = name_on(&masters[2], &unique_key("lease-visits"), str::to_owned);
    let reports = workers::run(
        "cluster_worker",
        WORKER_VAR,
        "lease",
        3,
        &[
            ("WORKER_URL", url),
            ("WORKER_TOKEN_KEY", token_key.clone()),
            ("WORKER_VISITS_KEY", visits_key.clone()),
            ("WORKER_RATE", rate.to_string()),
            ("WORKER_BURST", burst.to_string()),
            ("WORKER_BATCH", batch.to_string()),
            ("WORKER_QUOTA", quota.to_string()),
            ("WORKER_START_MS", start.to_string()),
            ("WORKER_END_MS", end.to_string()),
        ],
    );
    println!("leased, 3 processes: {reports:?}");
    let visits = sum(&reports, "visits");
    assert!(visits <= quota, "{visits} > quota {quota}: {reports:?}");
    assert!(
        visits * 100 >= quota * 95,
        "{visits} < 95% of {quota}: {reports:?}"
    );
    let tokens = sum(&reports, "tokens");
    let first = reports.iter().map(|r| num(r, "first")).min().unwrap();
    let last = reports.iter().map(|r| num(r, "last")).max().unwrap();
    let secs = (last - first) as f64 / 1000.0;
    let ideal = burst as f64 + rate as f64 * secs;
    let bound = ideal + sum(&reports, "max_held") as f64;
    assert!(
        tokens as f64 <= bound,
        "{tokens} admitted > {bound:.0} (burst + rate x {secs:.3} s + 3 x max_held): {reports:?}"
    );
    assert!(
        (tokens as f64 - ideal).abs() <= 0.05 * ideal,
        "{tokens} admitted, not within 5% of {ideal:.0}: {reports:?}"
    );
    assert!(holds(masters[1].port, &bucket_keys(&token_key)[0]));
    assert!(holds(masters[2].port, &visits_key));
}

/// Three processes call one hot key per master (and one key of their own) through a
/// `keys` section shared on the cluster: each hot key stays within its limit plus the
/// lease bound of `KeyPolicy`'s docs, each process's own key gets exactly its limit,
/// and no call was decided locally.
#[test]
fn three_processes_share_hot_keys_on_every_master() {
    let _serial = serial();
    let (url, masters) = cluster();
    let prefix = format!("{}:", unique_key("keys"));
    let start = unix_ms() + 1_500;
    let end = start + 1_000;
    let mut env = vec![
        ("WORKER_URL".to_owned(), url),
        ("WORKER_PREFIX".to_owned(), prefix.clone()),
        ("WORKER_MASTERS".to_owned(), masters.len().to_string()),
        ("WORKER_START_MS".to_owned(), start.to_string()),
        ("WORKER_END_MS".to_owned(), end.to_string()),
    ];
    let mut hot = Vec::new();
    for (i, m) in masters.iter().enumerate() {
        // The key's bucket is `{prefix + text}.tokens`.
        let text = name_on(m, &format!("hot{i}"), |t| {
            bucket_keys(&format!("{prefix}{t}"))[0].clone()
        });
        env.push((format!("WORKER_HOT_{i}"), text.clone()));
        hot.push((m.port, text));
    }
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let reports = workers::run("cluster_worker", WORKER_VAR, "keys", 3, &env);
    println!("hot keys on the cluster, 3 processes: {reports:?}");
    let first = reports.iter().map(|r| num(r, "first")).min().unwrap();
    let last = reports.iter().map(|r| num(r, "last")).max().unwrap();
    let secs = (last - first) as f64 / 1000.0;
    let n = reports.len() as f64;
    let max_held = (KEY_BATCH + KEY_BATCH / 4) as f64;
    for (i, (port, text)) in hot.iter().enumerate() {
        let total = sum(&reports, &format!("hot_{i}"));
        let refill = KEY_LIMIT as f64 * secs / KEY_PERIOD.as_secs_f64();
        let bound = KEY_LIMIT as f64 + refill + n * (max_held + KEY_BATCH as f64);
        assert!(
            total as f64 <= bound,
            "hot_{i}: {total} > {bound:.1}: {reports:?}"
        );
        assert!(
            total as f64 >= KEY_LIMIT as f64 - n * max_held,
            "hot_{i}: only {total} of {KEY_LIMIT}: {reports:?}"
        );
        assert!(holds(*port, &bucket_keys(&format!("{prefix}{text}"))[0]));
    }
    for r in &reports {
        assert_eq!(num(r, "solo"), KEY_LIMIT, "a key of one process: {r:?}");
        assert_eq!(num(r, "local"), 0, "the cluster was up: {r:?}");
    }
}

// ---------------------------------------------------------------------------------
// One process
// ---------------------------------------------------------------------------------

/// go-zero's own case on each master: "hello" and "world" in 64 bits set 22 distinct
/// bits, five other words test absent, the snapshot is the in-memory filter's bitmap,
/// and `delete` empties it.
#[tokio::test(flavor = "current_thread")]
async fn bloom_filters_keep_go_zeros_bits_on_every_master() {
    let (url, masters) = cluster();
    for (i, m) in masters.iter().enumerate() {
        let key = name_on(m, &unique_key(&format!("bloom-{i}")), str::to_owned);
        let filter = RedisBloom::go_zero(&url, key.as_str(), 64).unwrap();
        let local = BloomFilter::go_zero(64).unwrap();
        for word in ["hello", "world"] {
            assert!(filter.insert(word).await.unwrap(), "{word} is new");
            local.insert(word);
        }
        assert!(filter.contains("hello").await.unwrap());
        assert!(filter.contains("world").await.unwrap());
        for word in ["kevin", "foo", "bar", "go-zero", "hello!"] {
            assert!(!filter.contains(word).await.unwrap(), "{word}");
        }
        let snapshot = filter.snapshot().await.unwrap();
        assert_eq!(snapshot.to_bitmap_bytes(), local.to_bitmap_bytes());
        assert_eq!(snapshot.count_ones(), 22);
        assert!(holds(m.port, &key), "{key} on 127.0.0.1:{}", m.port);
        assert!(filter.delete().await.unwrap());
        assert!(!filter.contains("hello").await.unwrap());
    }
}

/// A point's `cluster` section naming the cluster: two registries (two instances)
/// share a token bucket of burst 6 on the second master, exactly.
#[test]
fn a_points_cluster_limit_names_the_cluster() {
    let (url, masters) = cluster();
    let key = name_on(&masters[1], &unique_key("point"), |n| {
        bucket_keys(n)[0].clone()
    });
    let limit = ClusterLimit::TokenBucket {
        url,
        key: key.clone(),
        rate: 0.001,
        burst: 6,
        batch: 2,
    };
    let (a, b) = (registry(), registry());
    for r in [a, b] {
        r.set_policy(
            "cluster.point",
            Policy::builder().cluster(limit.clone()).build().unwrap(),
        )
        .unwrap();
    }
    let points = [
        a.point("cluster.point").unwrap(),
        b.point("cluster.point").unwrap(),
    ];
    let mut admitted = 0;
    for _ in 0..10 {
        for p in points {
            match p.enter() {
                Ok(permit) => {
                    admitted += 1;
                    permit.finish(false);
                }
                Err(d) => assert_eq!(d.reason(), Reason::ClusterTokenBucket),
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admitted, 6, "exactly the burst across both instances");
    assert!(holds(masters[1].port, &bucket_keys(&key)[0]));
}

/// An ACL user set on every node reaches the cluster with
/// `redis+cluster://user:password@...`; a wrong password is a failure of Redis (the
/// limiter answers from its fallback, the filter returns the error), never a hang.
#[tokio::test(flavor = "current_thread")]
async fn an_acl_user_reaches_every_node() {
    let (url, masters) = cluster();
    let user = format!("limiter{}", std::process::id());
    let password = "s3cret-Pass";
    // Every node, replicas included: any of them may be asked for the slots.
    let nodes: Vec<u16> = cli(masters[0].port, &["CLUSTER", "NODES"])
        .lines()
        .filter(|l| !l.contains("fail"))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(1)?
                .split('@')
                .next()?
                .rsplit_once(':')?
                .1
                .parse()
                .ok()
        })
        .collect();
    for &port in &nodes {
        let rule = format!(">{password}");
        assert_eq!(
            cli(port, &["ACL", "SETUSER", &user, "on", &rule, "~*", "+@all"]).trim(),
            "OK"
        );
    }
    let seeds = url.trim_start_matches("redis+cluster://");
    let with = |pass: &str| format!("redis+cluster://{user}:{pass}@{seeds}");

    let key = name_on(&masters[2], &unique_key("acl"), |n| {
        bucket_keys(n)[0].clone()
    });
    let limiter = RedisTokenLimiter::builder(&with(password), &key, 0.001, 2)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
    assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
    assert_eq!(limiter.allow().await, ClusterDecision::Refused);
    let bloom_key = name_on(&masters[0], &unique_key("acl-bloom"), str::to_owned);
    let bloom = RedisBloom::go_zero(&with(password), bloom_key.as_str(), 64).unwrap();
    assert!(bloom.insert("alice").await.unwrap());
    assert!(bloom.contains("alice").await.unwrap());

    let wrong = RedisTokenLimiter::builder(&with("wrong"), &key, 0.001, 2)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let started = Instant::now();
    assert_eq!(wrong.allow().await, ClusterDecision::AdmittedLocally);
    assert!(started.elapsed() < Duration::from_millis(1_500));
    assert_eq!(wrong.mode(), ClusterMode::Fallback);
    let bad_bloom = RedisBloom::go_zero(&with("wrong"), bloom_key.as_str(), 64).unwrap();
    let err = bad_bloom.contains("alice").await.unwrap_err();
    assert!(err.is_redis_failure(), "{err}");

    for &port in &nodes {
        cli(port, &["ACL", "DELUSER", &user]);
    }
}
