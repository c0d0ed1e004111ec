//! A master of a real Redis Cluster killed under load (a private cluster of 3 masters
//! and 3 replicas this test starts, node timeout 1 s): the limits whose keys it
//! served fall back to their local limiter within about a timeout, callers never
//! wait longer than their timeout meanwhile, and the limits return to the
//! cluster-wide ones once the replica has taken over; limits on the other masters
//! never leave the cluster; the killed master, restarted, rejoins as a replica and
//! nothing changes for the limits.
//!
//! The nodes run with `cluster-require-full-coverage no`, the setting these limits
//! want: with Redis's default (`yes`) every node refuses every command while a slot
//! has no master, and every limit falls back for that second or two.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use redis_cluster::{bucket_keys, masters, name_on, RedisCluster};
use resilience_runtime::bloom::{BloomConfig, HashScheme};
use resilience_runtime::redis::{
    ClusterDecision, ClusterLease, ClusterMode, RedisBloom, RedisTokenLimiter,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Every Redis call's bound.
const TIMEOUT: Duration = Duration::from_millis(100);
/// What a caller may wait on top of the timeout on a loaded test machine (scheduling,
/// not Redis).
const SLACK: Duration = Duration::from_millis(150);

/// Mode switches, with the time since the start of the test.
type Switches = Arc<Mutex<Vec<(Duration, ClusterMode)>>>;

fn recorder(
    start: Instant,
) -> (
    Switches,
    impl Fn(&resilience_runtime::redis::ModeSwitch) + Send + Sync,
) {
    let log: Switches = Arc::default();
    let writer = Arc::clone(&log);
    (log, move |s: &resilience_runtime::redis::ModeSwitch| {
        writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((start.elapsed(), s.to))
    })
}

fn switches(log: &Switches) -> Vec<(Duration, ClusterMode)> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Decisions and the slowest call of one caller.
#[derive(Debug, Default)]
struct Seen {
    counts: BTreeMap<&'static str, u64>,
    /// Admitted from Redis after the last switch back.
    admitted_after_return: u64,
    slowest: Duration,
}

fn name(d: ClusterDecision) -> &'static str {
    match d {
        ClusterDecision::Admitted => "admitted",
        ClusterDecision::Refused => "refused",
        ClusterDecision::AdmittedLocally => "admitted_locally",
        ClusterDecision::RefusedLocally => "refused_locally",
    }
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_killed_master_sends_its_limits_to_the_fallback_until_its_replica_takes_over() {
    let mut cluster = RedisCluster::start_with(
        3,
        1,
        Duration::from_millis(1000),
        &["--cluster-require-full-coverage", "no"],
    );
    let url = cluster.url();
    let before = masters(cluster.ports()[0]);
    let (victim, survivor) = (before[0].clone(), before[1].clone());
    let hit = name_on(&victim, "failover-hit", |n| bucket_keys(n)[0].clone());
    let per_call = name_on(&victim, "failover-per-call", |n| bucket_keys(n)[0].clone());
    let safe = name_on(&survivor, "failover-safe", |n| bucket_keys(n)[0].clone());
    let bloom_key = name_on(&victim, "failover-bloom", str::to_owned);

    let start = Instant::now();
    let (hit_log, hit_hook) = recorder(start);
    let (safe_log, safe_hook) = recorder(start);
    let (call_log, call_hook) = recorder(start);
    // 1000 tokens/s, bursts of 100; half of that locally while the cluster is away.
    let lease = |key: &str| {
        ClusterLease::token_bucket(&url, key, 1000.0, 100)
            .batch(10)
            .timeout(TIMEOUT)
            .probe_interval(Duration::from_millis(50))
            .fallback_share(0.5)
    };
    let hit_lease = lease(&hit).on_switch(hit_hook).build().unwrap();
    let safe_lease = lease(&safe).on_switch(safe_hook).build().unwrap();
    let limiter = RedisTokenLimiter::builder(&url, &per_call, 1000.0, 100)
        .timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(50))
        .on_switch(call_hook)
        .build()
        .unwrap();
    let bloom_config = BloomConfig::builder()
        .bits(64)
        .hashes(14)
        .scheme(HashScheme::GoZero)
        .build()
        .unwrap();
    let bloom = RedisBloom::builder(&url, bloom_key.as_str(), bloom_config)
        .timeout(TIMEOUT)
        .build()
        .unwrap();
    assert_eq!(hit_lease.mode(), ClusterMode::Redis);

    let stop = AtomicBool::new(false);
    let (lease_seen, safe_seen, call_seen, bloom_seen, timeline) = thread::scope(|s| {
        // A failed assertion below stops the callers too (the scope waits for them).
        let _stop_on_panic = StopOnDrop(&stop);
        let leases = s.spawn(|| {
            let (mut hit_seen, mut safe_seen) = (Seen::default(), Seen::default());
            while !stop.load(Ordering::Relaxed) {
                for (lease, seen, log) in [
                    (&hit_lease, &mut hit_seen, &hit_log),
                    (&safe_lease, &mut safe_seen, &safe_log),
                ] {
                    let t = Instant::now();
                    let d = lease.try_acquire();
                    seen.slowest = seen.slowest.max(t.elapsed());
                    *seen.counts.entry(name(d)).or_default() += 1;
                    let back = switches(log)
                        .last()
                        .is_some_and(|(_, m)| *m == ClusterMode::Redis);
                    if back && d == ClusterDecision::Admitted {
                        seen.admitted_after_return += 1;
                    }
                }
                thread::sleep(Duration::from_millis(1));
            }
            (hit_seen, safe_seen)
        });
        let async_calls = s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (mut calls, mut blooms) = (Seen::default(), Seen::default());
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let d = limiter.allow().await;
                    calls.slowest = calls.slowest.max(t.elapsed());
                    *calls.counts.entry(name(d)).or_default() += 1;
                    let back = switches(&call_log)
                        .last()
                        .is_some_and(|(_, m)| *m == ClusterMode::Redis);
                    if back && d == ClusterDecision::Admitted {
                        calls.admitted_after_return += 1;
                    }
                    if n.is_multiple_of(10) {
                        let t = Instant::now();
                        let outcome = match bloom.insert(n.to_string()).await {
                            Ok(_) => "ok",
                            Err(e) if e.is_redis_failure() => "redis_failure",
                            Err(e) => panic!("not a failure of Redis: {e}"),
                        };
                        blooms.slowest = blooms.slowest.max(t.elapsed());
                        *blooms.counts.entry(outcome).or_default() += 1;
                        if outcome == "ok" && blooms.counts.contains_key("redis_failure") {
                            blooms.admitted_after_return += 1;
                        }
                    }
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (calls, blooms)
            })
        });

        // Traffic on a healthy cluster, then the master dies.
        thread::sleep(Duration::from_millis(700));
        let killed_at = start.elapsed();
        cluster.kill(victim.port);
        // Its replica takes over: wait until the survivor sees a new master for every
        // slot (up to 20 s).
        let promoted = loop {
            let now = masters(survivor.port);
            let covered: u32 = now
                .iter()
                .flat_map(|m| m.slots.iter().map(|(lo, hi)| u32::from(hi - lo) + 1))
                .sum();
            if covered == 16384 && now.iter().all(|m| m.port != victim.port) {
                break start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no failover: {now:?}"
            );
            thread::sleep(Duration::from_millis(20));
        };
        // The limits come back (the probes run every 50 ms): up to 10 s.
        let limit = Instant::now() + Duration::from_secs(10);
        while [&hit_log, &call_log].iter().any(|log| {
            !switches(log)
                .last()
                .is_some_and(|(_, m)| *m == ClusterMode::Redis)
        }) {
            assert!(
                Instant::now() < limit,
                "the limits did not come back: {:?} {:?}",
                switches(&hit_log),
                switches(&call_log)
            );
            thread::sleep(Duration::from_millis(20));
        }
        let returned_at = start.elapsed();
        // Traffic on the healed cluster; then the old master is back, as a replica.
        thread::sleep(Duration::from_millis(500));
        let restarted_at = start.elapsed();
        cluster.restart(victim.port);
        cluster.wait_ok(Duration::from_secs(20));
        let rejoined_at = start.elapsed();
        thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let (hit_seen, safe_seen) = leases.join().unwrap();
        let (call_seen, bloom_seen) = async_calls.join().unwrap();
        let timeline = [
            ("killed", killed_at),
            ("promoted", promoted),
            ("returned", returned_at),
            ("restarted", restarted_at),
            ("rejoined", rejoined_at),
        ];
        (hit_seen, safe_seen, call_seen, bloom_seen, timeline)
    });
    let killed_at = timeline[0].1;
    let promoted = timeline[1].1;
    println!("timeline: {timeline:?}");
    println!(
        "lease on the killed master: {lease_seen:?} {:?}",
        switches(&hit_log)
    );
    println!(
        "lease on another master: {safe_seen:?} {:?}",
        switches(&safe_log)
    );
    println!("per-call limiter: {call_seen:?} {:?}", switches(&call_log));
    println!("bloom filter: {bloom_seen:?}");

    // The killed master's limits: one switch to the fallback soon after the kill (a
    // refill or a call fails within its timeout), one back once the replica serves.
    for (what, log) in [("lease", &hit_log), ("per-call limiter", &call_log)] {
        let log = switches(log);
        let modes: Vec<ClusterMode> = log.iter().map(|(_, m)| *m).collect();
        assert_eq!(
            modes,
            [ClusterMode::Fallback, ClusterMode::Redis],
            "{what}: {log:?}"
        );
        let (down, up) = (log[0].0, log[1].0);
        assert!(
            down >= killed_at && down < killed_at + Duration::from_secs(2),
            "{what} fell back at {down:?}, the master died at {killed_at:?}"
        );
        assert!(
            // (The survivor, polled every 20 ms, may learn of the new master a little
            // after the clients do.)
            up + Duration::from_millis(500) >= promoted && up < promoted + Duration::from_secs(3),
            "{what} came back at {up:?}, the replica took over at {promoted:?}"
        );
    }
    // Meanwhile they answered locally, and from the cluster again afterwards.
    for (what, seen) in [("lease", &lease_seen), ("per-call limiter", &call_seen)] {
        assert!(
            seen.counts.get("admitted_locally").copied().unwrap_or(0) > 0,
            "{what}: {seen:?}"
        );
        assert!(seen.admitted_after_return > 0, "{what}: {seen:?}");
    }
    // A lease answers from local atomics: never a wait on Redis.
    assert!(
        lease_seen.slowest < Duration::from_millis(50),
        "{lease_seen:?}"
    );
    assert!(
        safe_seen.slowest < Duration::from_millis(50),
        "{safe_seen:?}"
    );
    // Async calls wait at most their timeout.
    assert!(call_seen.slowest < TIMEOUT + SLACK, "{call_seen:?}");
    assert!(bloom_seen.slowest < TIMEOUT + SLACK, "{bloom_seen:?}");
    // The filter reported the outage as errors, then worked again.
    assert!(
        bloom_seen.counts.get("redis_failure").copied().unwrap_or(0) > 0,
        "{bloom_seen:?}"
    );
    assert!(bloom_seen.admitted_after_return > 0, "{bloom_seen:?}");
    // The other master's limit never left the cluster.
    assert!(switches(&safe_log).is_empty(), "{:?}", switches(&safe_log));
    assert!(
        safe_seen.counts.get("admitted").copied().unwrap_or(0) > 0,
        "{safe_seen:?}"
    );
    assert_eq!(
        safe_seen.counts.get("admitted_locally"),
        None,
        "{safe_seen:?}"
    );
    // The old master came back as a replica; the limits stayed with the cluster.
    assert!(masters(survivor.port).iter().all(|m| m.port != victim.port));
    assert_eq!(hit_lease.mode(), ClusterMode::Redis);
    assert_eq!(limiter.mode(), ClusterMode::Redis);
}
