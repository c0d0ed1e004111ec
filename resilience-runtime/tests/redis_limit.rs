//! The Redis limiters against a real `redis-server`: go-zero's period-limit vectors,
//! the token bucket's burst and refill (on a manual clock and in real time), the TTL
//! fix, fallback on a stopped or paused Redis and the switch back, the bound on how
//! long a caller waits, leasing's round trips and its over-admission bound, and three
//! OS processes sharing one limit (exact per call, within 5% leased), including one
//! run where Redis is killed and restarted under them.
//!
//! The multi-process tests re-run this test binary as workers: `cluster_worker` below
//! is the worker's entry point, selected with `--ignored --exact cluster_worker` and
//! the `RESILIENCE_LIMIT_WORKER` environment variable.
//!
//! Most tests use the shared server named by `RESILIENCE_REDIS_URL` (started by
//! `scripts/test.sh`), each under its own key; the outage tests start private servers.

#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/workers.rs"]
mod workers;

use workers::{env, num, sum};

use redis_server::{free_port, query, raw, shared_url, unique_key, wait_for, RedisServer};
use resilience_runtime::redis::{
    Alignment, ClusterDecision, ClusterLease, ClusterMode, ModeSwitch, PeriodDecision,
    RedisFailure, RedisLimitError, RedisPeriodLimiter, RedisTokenLimiter, RefillClock,
};
use resilience_runtime::{Clock, ManualClock};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

fn raw_sync(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("cannot connect to Redis at {url}: {e}"))
}

fn get_f64(conn: &mut ::redis::Connection, key: &str) -> Option<f64> {
    ::redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(conn)
        .unwrap_or_else(|e| panic!("GET {key}: {e}"))
        .map(|s| s.parse().unwrap_or_else(|e| panic!("{key} = {s:?}: {e}")))
}

/// Records every mode switch a limiter reports.
#[derive(Clone, Default)]
struct Switches(Arc<Mutex<Vec<(Instant, ModeSwitch)>>>);

impl Switches {
    fn hook(&self) -> impl Fn(&ModeSwitch) + Send + Sync + 'static {
        let log = Arc::clone(&self.0);
        move |s: &ModeSwitch| {
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((Instant::now(), s.clone()))
        }
    }

    fn modes(&self) -> Vec<ClusterMode> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, s)| s.to)
            .collect()
    }

    fn all(&self) -> Vec<(Instant, ModeSwitch)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The timing-heavy tests (the multi-process ones, the outages) run one at a time, so
/// they do not skew each other's clocks on a small machine.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------------
// Period limiter
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn period_limit_matches_go_zero_vectors() {
    let url = shared_url();
    // go-zero's TestPeriodLimit_Take: quota 5, 100 takes.
    let limiter =
        RedisPeriodLimiter::new(&url, &unique_key("period-5"), Duration::from_secs(60), 5).unwrap();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut decisions = Vec::new();
    for _ in 0..100 {
        let d = limiter.take().await.unwrap();
        decisions.push(d);
        let name = match d {
            PeriodDecision::Allowed => "Allowed",
            PeriodDecision::HitQuota => "HitQuota",
            PeriodDecision::OverQuota => "OverQuota",
        };
        *counts.entry(name).or_default() += 1;
    }
    assert_eq!(
        counts,
        BTreeMap::from([("Allowed", 4), ("HitQuota", 1), ("OverQuota", 95)])
    );
    assert_eq!(
        decisions[4],
        PeriodDecision::HitQuota,
        "the 5th take hits the quota"
    );

    // Quota 1: the first take already hits it.
    let one =
        RedisPeriodLimiter::new(&url, &unique_key("period-1"), Duration::from_secs(60), 1).unwrap();
    assert_eq!(one.take().await.unwrap(), PeriodDecision::HitQuota);
    assert_eq!(one.take().await.unwrap(), PeriodDecision::OverQuota);

    // Quota 0 admits nothing.
    let zero =
        RedisPeriodLimiter::new(&url, &unique_key("period-0"), Duration::from_secs(60), 0).unwrap();
    assert_eq!(zero.take().await.unwrap(), PeriodDecision::OverQuota);

    // Keys per id are separate limits; the counter lives at `{key}{id}` with the window as TTL.
    let prefix = unique_key("period-ids");
    let per_id = RedisPeriodLimiter::new(&url, &prefix, Duration::from_secs(30), 1).unwrap();
    assert_eq!(
        per_id.take_for("a").await.unwrap(),
        PeriodDecision::HitQuota
    );
    assert_eq!(
        per_id.take_for("b").await.unwrap(),
        PeriodDecision::HitQuota
    );
    assert_eq!(
        per_id.take_for("a").await.unwrap(),
        PeriodDecision::OverQuota
    );
    let mut conn = raw(&url).await;
    let count: i64 = query(&mut conn, ::redis::cmd("GET").arg(format!("{prefix}a"))).await;
    assert_eq!(count, 2);
    let pttl: i64 = query(&mut conn, ::redis::cmd("PTTL").arg(format!("{prefix}a"))).await;
    assert!((29_000..=30_000).contains(&pttl), "PTTL {pttl}");
}

#[tokio::test]
async fn period_window_resets_and_a_counter_without_expiry_gets_one() {
    let url = shared_url();
    let key = unique_key("period-reset");
    let limiter = RedisPeriodLimiter::new(&url, &key, Duration::from_millis(300), 2).unwrap();
    let limiter = &limiter;
    let takes = |n| async move {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(limiter.take().await.unwrap());
        }
        v
    };
    use PeriodDecision::*;
    assert_eq!(takes(3).await, [Allowed, HitQuota, OverQuota]);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        takes(3).await,
        [Allowed, HitQuota, OverQuota],
        "a new window"
    );

    // go-zero sets the expiry only when the count is 1: a counter created by anyone
    // else would never expire. Ours gets the window whenever it has no expiry.
    let orphan = unique_key("period-orphan");
    let mut conn = raw(&url).await;
    let _: i64 = query(&mut conn, ::redis::cmd("INCRBY").arg(&orphan).arg(7)).await;
    let l = RedisPeriodLimiter::new(&url, &orphan, Duration::from_secs(10), 100).unwrap();
    assert_eq!(l.take().await.unwrap(), Allowed);
    let pttl: i64 = query(&mut conn, ::redis::cmd("PTTL").arg(&orphan)).await;
    assert!((9_000..=10_000).contains(&pttl), "PTTL {pttl}");
}

#[tokio::test]
async fn aligned_window_ends_at_the_local_boundary() {
    let url = shared_url();
    // The manual clock reads 2026-01-01T00:00:00Z: in UTC+8 that is 08:00, so the
    // local day has 16 hours left; in UTC the whole day is left.
    let clock = Clock::manual(&ManualClock::new());
    let day = Duration::from_secs(86_400);
    let mut conn = raw(&url).await;
    for (alignment, expect_ms) in [
        (Alignment::UtcOffset(8 * 3600), 16 * 3_600_000i64),
        (Alignment::Utc, 86_400_000),
        (Alignment::UtcOffset(-5 * 3600), 5 * 3_600_000),
    ] {
        let key = unique_key("period-aligned");
        let l = RedisPeriodLimiter::builder(&url, &key, day, 3)
            .alignment(alignment)
            .clock(clock.clone())
            .build()
            .unwrap();
        assert_eq!(l.take().await.unwrap(), PeriodDecision::Allowed);
        let pttl: i64 = query(&mut conn, ::redis::cmd("PTTL").arg(&key)).await;
        assert!(
            (expect_ms - 2_000..=expect_ms).contains(&pttl),
            "{alignment:?}: PTTL {pttl}, expected about {expect_ms}"
        );
    }
}

#[tokio::test]
async fn period_limit_failures_are_errors() {
    let url = shared_url();
    // WRONGTYPE: the key holds a hash.
    let key = unique_key("period-wrongtype");
    let mut conn = raw(&url).await;
    let _: i64 = query(&mut conn, ::redis::cmd("HSET").arg(&key).arg("f").arg(1)).await;
    let l = RedisPeriodLimiter::new(&url, &key, Duration::from_secs(1), 5).unwrap();
    match l.take().await {
        Err(RedisLimitError::Redis(RedisFailure::Server { code, .. })) => {
            assert_eq!(code.as_deref(), Some("WRONGTYPE"))
        }
        other => panic!("expected a WRONGTYPE error, got {other:?}"),
    }

    // Nobody listening.
    let dead = format!("redis://127.0.0.1:{}/", free_port());
    let l = RedisPeriodLimiter::new(&dead, "k", Duration::from_secs(1), 5).unwrap();
    let err = l.take().await.unwrap_err();
    assert!(err.is_redis_failure(), "{err:?}");
    assert!(
        matches!(
            err,
            RedisLimitError::Redis(RedisFailure::Connection {
                operation: "take",
                ..
            })
        ),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------
// Token limiter, one round trip per call
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn token_limiter_bursts_then_refills_at_rate_on_a_manual_clock() {
    let url = shared_url();
    let manual = ManualClock::new();
    let key = unique_key("token-manual");
    let limiter = RedisTokenLimiter::builder(&url, &key, 10.0, 5)
        .refill_clock(RefillClock::Local)
        .clock(Clock::manual(&manual))
        .build()
        .unwrap();
    let allow = |n: usize| {
        let limiter = limiter.clone();
        async move {
            let mut admitted = 0;
            for _ in 0..n {
                if limiter.allow().await.is_admitted() {
                    admitted += 1;
                }
            }
            admitted
        }
    };
    assert_eq!(allow(8).await, 5, "the burst, then nothing");
    manual.advance(Duration::from_millis(99));
    assert_eq!(allow(3).await, 0, "no whole token after 99 ms at 10/s");
    manual.advance(Duration::from_millis(1));
    assert_eq!(allow(3).await, 1, "one token after 100 ms");
    manual.advance(Duration::from_millis(350));
    assert_eq!(allow(5).await, 3, "3.5 tokens after 350 ms");
    manual.advance(Duration::from_secs(60));
    assert_eq!(
        allow(10).await,
        5,
        "an idle bucket holds no more than the burst"
    );
    manual.advance(Duration::from_secs(60));
    assert_eq!(
        limiter.allow_n(6).await,
        ClusterDecision::Refused,
        "n > burst"
    );
    assert_eq!(limiter.allow_n(5).await, ClusterDecision::Admitted);
    assert_eq!(limiter.allow_n(0).await, ClusterDecision::Admitted);

    let s = limiter.status();
    assert_eq!(
        (s.admitted, s.mode, s.to_fallback),
        (16, ClusterMode::Redis, 0)
    );

    // go-zero's key layout, and a TTL of max(1 s, 2 x 5 / 10 s).
    let mut conn = raw(&url).await;
    for k in [format!("{{{key}}}.tokens"), format!("{{{key}}}.ts")] {
        let pttl: i64 = query(&mut conn, ::redis::cmd("PTTL").arg(&k)).await;
        assert!((0..=1000).contains(&pttl) && pttl > 500, "{k}: PTTL {pttl}");
    }
    assert_eq!(limiter.ttl(), Duration::from_secs(1));
}

#[tokio::test]
async fn token_limiter_holds_its_rate_in_real_time() {
    let url = shared_url();
    // 20 tokens per second, burst 4, on the Redis server's clock.
    let limiter = RedisTokenLimiter::new(&url, &unique_key("token-real"), 20.0, 4).unwrap();
    let start = Instant::now();
    let mut admitted = 0u32;
    for _ in 0..10 {
        admitted += u32::from(limiter.allow().await.is_admitted());
    }
    assert_eq!(admitted, 4, "the burst");
    // Poll for 500 ms: about 10 more tokens arrive.
    while start.elapsed() < Duration::from_millis(500) {
        admitted += u32::from(limiter.allow().await.is_admitted());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let most = 4.0 + 20.0 * elapsed;
    assert!(
        f64::from(admitted) <= most && f64::from(admitted) >= most - 3.0,
        "{admitted} admitted in {elapsed:.3} s, expected at most {most:.1}"
    );
}

#[tokio::test]
async fn token_limiter_does_not_flap_when_two_bursts_are_less_than_the_rate() {
    // go-zero: rate 100, burst 1 gives a TTL of floor(2 x 1 / 100) = 0 s, SETEX fails on
    // every call and the limiter flaps between Redis and its rescue limiter.
    let url = shared_url();
    let key = unique_key("token-ttl");
    let limiter = RedisTokenLimiter::new(&url, &key, 100.0, 1).unwrap();
    for _ in 0..20 {
        let d = limiter.allow().await;
        assert_eq!(d.mode(), ClusterMode::Redis, "{d:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let s = limiter.status();
    assert_eq!(s.to_fallback, 0);
    assert!(s.admitted >= 2 && s.refused >= 1, "{s:?}");
    let pttl: i64 = query(
        &mut raw(&url).await,
        ::redis::cmd("PTTL").arg(format!("{{{key}}}.ts")),
    )
    .await;
    assert!(pttl > 0 && pttl <= 1000, "PTTL {pttl}");
}

#[test]
fn token_limiter_falls_back_when_redis_stops_and_returns_when_it_is_back() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let switches = Switches::default();
    let limiter = RedisTokenLimiter::builder(&server.url(), "token-outage", 10.0, 3)
        .timeout(Duration::from_millis(200))
        .probe_interval(Duration::from_millis(50))
        .on_switch(switches.hook())
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
        server.stop();
        // The failing call is answered by the local bucket (full: 3 tokens).
        assert_eq!(limiter.allow().await, ClusterDecision::AdmittedLocally);
        assert_eq!(limiter.mode(), ClusterMode::Fallback);
        let start = Instant::now();
        let local: Vec<_> = allow_in_turn(&limiter, 4).await;
        assert!(
            start.elapsed() < Duration::from_millis(50),
            "fallback answers at once"
        );
        assert_eq!(
            local,
            [
                ClusterDecision::AdmittedLocally,
                ClusterDecision::AdmittedLocally,
                ClusterDecision::RefusedLocally,
                ClusterDecision::RefusedLocally
            ],
            "the fallback bucket holds the burst of 3"
        );
    });
    let all = switches.all();
    assert_eq!(switches.modes(), [ClusterMode::Fallback]);
    assert!(
        all[0].1.cause.as_deref().is_some_and(|c| !c.is_empty()),
        "{:?}",
        all[0].1
    );
    // Still down: the probe keeps failing and the mode stays.
    thread::sleep(Duration::from_millis(200));
    assert_eq!(limiter.mode(), ClusterMode::Fallback);
    let calls_while_down = limiter.status().redis_calls;
    // Two calls, then a probe every 50 ms.
    assert!(calls_while_down >= 4, "{calls_while_down} Redis calls");

    server.restart();
    let back = wait_for("switch back to Redis", Duration::from_secs(3), || {
        limiter.mode() == ClusterMode::Redis
    });
    assert!(back < Duration::from_millis(500), "back after {back:?}");
    assert_eq!(
        switches.modes(),
        [ClusterMode::Fallback, ClusterMode::Redis]
    );
    // The restarted server is empty: a full bucket, served by Redis again.
    rt.block_on(async {
        assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
    });
    let s = limiter.status();
    assert_eq!((s.to_fallback, s.to_redis), (1, 1));
}

/// Runs `n` calls one after the other.
async fn allow_in_turn(limiter: &RedisTokenLimiter, n: usize) -> Vec<ClusterDecision> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(limiter.allow().await);
    }
    v
}

#[test]
fn callers_never_wait_longer_than_the_timeout_on_a_paused_redis() {
    let _serial = serial();
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let timeout = Duration::from_millis(150);
    let limiter = Arc::new(
        RedisTokenLimiter::builder(&server.url(), "token-pause", 1000.0, 100)
            .timeout(timeout)
            .probe_interval(Duration::from_millis(50))
            .build()
            .unwrap(),
    );
    let period =
        RedisPeriodLimiter::builder(&server.url(), "period-pause", Duration::from_secs(10), 100)
            .timeout(timeout)
            .build()
            .unwrap();
    let lease = ClusterLease::token_bucket(&server.url(), "lease-pause", 1000.0, 100)
        .batch(5)
        .refill_at(0)
        .timeout(timeout)
        .probe_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
        assert!(period.take().await.is_ok());
    });
    assert_eq!(lease.mode(), ClusterMode::Redis);

    server.pause();
    // Eight concurrent callers on a frozen server: each gets an answer within the
    // timeout (plus scheduling slack), from the fallback.
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let limiter = Arc::clone(&limiter);
            tasks.push(tokio::spawn(async move {
                let start = Instant::now();
                let d = limiter.allow().await;
                (d, start.elapsed())
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (d, waited) in &results {
        assert_eq!(*d, ClusterDecision::AdmittedLocally);
        assert!(
            *waited < timeout + Duration::from_millis(100),
            "waited {waited:?}"
        );
    }
    // From now on, no wait at all.
    rt.block_on(async {
        let start = Instant::now();
        assert_eq!(limiter.allow().await, ClusterDecision::AdmittedLocally);
        assert!(
            start.elapsed() < Duration::from_millis(20),
            "{:?}",
            start.elapsed()
        );
        // The period limiter has no fallback: its take fails with a timeout, in time.
        let start = Instant::now();
        let err = period.take().await.unwrap_err();
        assert!(
            matches!(err, RedisLimitError::Redis(RedisFailure::Timeout { .. })),
            "{err:?}"
        );
        assert!(start.elapsed() < timeout + Duration::from_millis(100));
    });
    // The lease never waits: drain its tokens, then keep asking while its refill
    // thread is stuck on the frozen server.
    let mut slowest = Duration::ZERO;
    let mut decisions = BTreeMap::new();
    let until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < until {
        let start = Instant::now();
        let d = lease.try_acquire();
        slowest = slowest.max(start.elapsed());
        *decisions.entry(format!("{d:?}")).or_insert(0u32) += 1;
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        slowest < Duration::from_millis(50),
        "slowest try_acquire {slowest:?}"
    );
    assert_eq!(lease.mode(), ClusterMode::Fallback, "{decisions:?}");
    assert!(decisions.contains_key("AdmittedLocally"), "{decisions:?}");

    server.resume();
    wait_for("limiter back on Redis", Duration::from_secs(3), || {
        limiter.mode() == ClusterMode::Redis
    });
    wait_for("lease back on Redis", Duration::from_secs(3), || {
        lease.mode() == ClusterMode::Redis
    });
    rt.block_on(async {
        assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
    });
    wait_for(
        "lease admits from Redis again",
        Duration::from_secs(2),
        || lease.try_acquire() == ClusterDecision::Admitted,
    );
}

// ---------------------------------------------------------------------------------
// Leasing
// ---------------------------------------------------------------------------------

/// Calls `try_acquire` `attempts` times, sleeping 1 ms after each rejection so the
/// refill thread can work; returns the admitted count.
fn drain(lease: &ClusterLease, attempts: usize) -> u64 {
    let mut admitted = 0;
    for _ in 0..attempts {
        match lease.try_acquire() {
            ClusterDecision::Admitted => admitted += 1,
            ClusterDecision::Refused => thread::sleep(Duration::from_millis(1)),
            d => panic!("unexpected {d:?} with Redis up"),
        }
    }
    admitted
}

#[test]
fn a_lease_spends_exactly_what_it_took_at_one_round_trip_per_batch() {
    let url = shared_url();
    let key = unique_key("lease-batches");
    // A frozen manual clock: the bucket in Redis never refills, so its 100 tokens are
    // all there is.
    let manual = ManualClock::new();
    let lease = ClusterLease::token_bucket(&url, &key, 10.0, 100)
        .batch(10)
        .refill_clock(RefillClock::Local)
        .clock(Clock::manual(&manual))
        .build()
        .unwrap();
    assert_eq!(lease.status().held, 10, "build waits for the first batch");
    assert_eq!(lease.max_held(), 12);
    let admitted = drain(&lease, 400);
    assert_eq!(admitted, 100, "every token of the bucket, and not one more");
    let s = lease.status();
    assert_eq!((s.admitted, s.held), (100, 0));
    // Ten batches, then one more reserved: the bucket is 10 tokens in debt, and the
    // reserved batch is not spendable until the clock says the bucket refilled.
    assert_eq!(s.redis_calls, 11, "one round trip per batch");
    let mut conn = raw_sync(&url);
    let tokens_key = format!("{{{key}}}.tokens");
    assert_eq!(get_f64(&mut conn, &tokens_key), Some(-10.0));
    assert_eq!(drain(&lease, 50), 0, "the reserved batch is not ready");
    // One second at 10 tokens/s: the reservation is ready, and the next one is made.
    manual.advance(Duration::from_secs(1));
    wait_for("the reserved batch", Duration::from_secs(2), || {
        lease.status().held == 10
    });
    assert_eq!(drain(&lease, 50), 10);
    assert_eq!(lease.status().redis_calls, 12);
    assert_eq!(get_f64(&mut conn, &tokens_key), Some(-10.0));
}

#[test]
fn leasing_over_admits_at_most_instances_times_max_held() {
    // Three leases on one bucket (burst 30, 10 tokens/s, batch 10) on one manual clock.
    let url = shared_url();
    let key = unique_key("lease-bound");
    let manual = ManualClock::new();
    let leases: Vec<ClusterLease> = (0..3)
        .map(|_| {
            ClusterLease::token_bucket(&url, &key, 10.0, 30)
                .batch(10)
                .refill_clock(RefillClock::Local)
                .clock(Clock::manual(&manual))
                .build()
                .unwrap()
        })
        .collect();
    // Each took a batch at build: the bucket is empty, 30 tokens are held.
    assert_eq!(leases.iter().map(|l| l.status().held).sum::<u64>(), 30);
    // Ten idle seconds refill the bucket to its burst (not to 100).
    manual.advance(Duration::from_secs(10));
    // Now spend everything, the clock frozen (no refill during the burst).
    let mut admitted = 0;
    for _ in 0..300 {
        for l in &leases {
            match l.try_acquire() {
                ClusterDecision::Admitted => admitted += 1,
                ClusterDecision::Refused => {}
                d => panic!("unexpected {d:?}"),
            }
        }
        thread::sleep(Duration::from_micros(500));
    }
    let burst = 30;
    let bound = burst + leases.iter().map(ClusterLease::max_held).sum::<u64>();
    assert!(
        admitted > burst,
        "the held tokens come on top of the refilled burst: {admitted}"
    );
    assert!(
        admitted <= bound,
        "{admitted} > burst + instances x max_held = {bound}"
    );
    assert_eq!(admitted, 60, "30 held + 30 refilled, with whole batches");
    // Since the start, no more than burst + rate x t: 30 + 10 x 10 s.
    assert!(admitted <= 30 + 100);
}

#[test]
fn visits_lease_drops_its_tokens_when_the_window_ends() {
    let url = shared_url();
    let key = unique_key("visits-lapse");
    let lease = ClusterLease::visits(&url, &key, Duration::from_millis(400), 100)
        .batch(10)
        .build()
        .unwrap();
    let mut conn = raw_sync(&url);
    let count = |conn: &mut ::redis::Connection| -> i64 {
        ::redis::cmd("GET")
            .arg(&key)
            .query::<Option<i64>>(conn)
            .unwrap()
            .unwrap_or(0)
    };
    assert_eq!(count(&mut conn), 10, "one batch taken at build");
    for _ in 0..3 {
        assert_eq!(lease.try_acquire(), ClusterDecision::Admitted);
    }
    assert_eq!(lease.status().held, 7);
    thread::sleep(Duration::from_millis(450));
    assert_eq!(lease.status().held, 0, "the old window's tokens lapsed");
    // The next call finds nothing valid, asks for a batch in the new window and is
    // rejected rather than spending an old token.
    assert_eq!(lease.try_acquire(), ClusterDecision::Refused);
    wait_for("a batch of the new window", Duration::from_secs(1), || {
        lease.status().held == 10
    });
    assert_eq!(
        count(&mut conn),
        10,
        "the new window's counter holds only the new batch"
    );
}

#[test]
fn visits_lease_never_grants_more_than_the_quota() {
    let url = shared_url();
    let key = unique_key("visits-quota");
    // Two leases and a per-call limiter on one counter: 25 visits per 30 s.
    let a = ClusterLease::visits(&url, &key, Duration::from_secs(30), 25)
        .batch(10)
        .build()
        .unwrap();
    let b = ClusterLease::visits(&url, &key, Duration::from_secs(30), 25)
        .batch(10)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let per_call = RedisPeriodLimiter::new(&url, &key, Duration::from_secs(30), 25).unwrap();
    // After the two batches (20), five remain for the per-call limiter.
    let direct: Vec<_> = rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(per_call.take().await.unwrap());
        }
        v
    });
    assert_eq!(
        direct.iter().filter(|d| d.is_admitted()).count(),
        5,
        "{direct:?}"
    );
    let admitted = drain(&a, 50) + drain(&b, 50);
    assert_eq!(
        admitted, 20,
        "only the two batches taken before the quota ran out"
    );
}

// ---------------------------------------------------------------------------------
// Several OS processes
// ---------------------------------------------------------------------------------

const WORKER_VAR: &str = "RESILIENCE_LIMIT_WORKER";

/// Starts `n` copies of this test binary as workers of `mode`, with `env`, and returns
/// each one's `key=value` report.
fn run_workers(n: usize, mode: &str, env: &[(&str, String)]) -> Vec<workers::Report> {
    workers::run("cluster_worker", WORKER_VAR, mode, n, env)
}

fn env_u64(name: &str) -> u64 {
    env(name).parse().unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn sleep_until_unix_ms(t: u64) {
    let now = unix_ms();
    if t > now {
        thread::sleep(Duration::from_millis(t - now));
    }
}

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
        "outage" => worker_outage(&url),
        other => panic!("unknown worker mode {other:?}"),
    };
    println!("WORKER-REPORT {report}");
}

/// 200 token takes and 150 period takes, one round trip each.
fn worker_per_call(url: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tokens = RedisTokenLimiter::builder(url, &env("WORKER_TOKEN_KEY"), 0.001, 300)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let period =
        RedisPeriodLimiter::builder(url, &env("WORKER_PERIOD_KEY"), Duration::from_secs(60), 250)
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
    sleep_until_unix_ms(env_u64("WORKER_START_MS"));
    rt.block_on(async {
        let (mut admitted, mut rejected) = (0, 0);
        let (mut allowed, mut hit, mut over) = (0, 0, 0);
        for i in 0..350 {
            // Interleave the two limits, so the processes contend on both at once.
            if i % 7 < 4 {
                match tokens.allow().await {
                    ClusterDecision::Admitted => admitted += 1,
                    ClusterDecision::Refused => rejected += 1,
                    d => panic!("fallback with Redis up: {d:?}"),
                }
            } else {
                match period.take().await.unwrap() {
                    PeriodDecision::Allowed => allowed += 1,
                    PeriodDecision::HitQuota => hit += 1,
                    PeriodDecision::OverQuota => over += 1,
                }
            }
        }
        format!(
            "admitted={admitted} rejected={rejected} allowed={allowed} hit={hit} over={over} round_trips={}",
            tokens.status().redis_calls
        )
    })
}

/// Spends from a token lease and a visits lease between the start and end times.
fn worker_lease(url: &str) -> String {
    let rate = env_u64("WORKER_RATE") as f64;
    // A generous timeout: a busy test machine must not look like an outage here.
    let tokens =
        ClusterLease::token_bucket(url, &env("WORKER_TOKEN_KEY"), rate, env_u64("WORKER_BURST"))
            .batch(env_u64("WORKER_BATCH"))
            .timeout(Duration::from_secs(1))
            .build()
            .unwrap();
    let visits = ClusterLease::visits(
        url,
        &env("WORKER_VISITS_KEY"),
        Duration::from_secs(60),
        env_u64("WORKER_QUOTA"),
    )
    .batch(env_u64("WORKER_BATCH"))
    .timeout(Duration::from_secs(1))
    .build()
    .unwrap();
    let (start, end) = (env_u64("WORKER_START_MS"), env_u64("WORKER_END_MS"));
    sleep_until_unix_ms(start);
    let first = unix_ms();
    let (mut t_admitted, mut v_admitted) = (0u64, 0u64);
    while unix_ms() < end {
        let t = tokens.try_acquire();
        let v = visits.try_acquire();
        assert!(
            t.mode() == ClusterMode::Redis && v.mode() == ClusterMode::Redis,
            "fallback with Redis up: {t:?} {v:?}"
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
         round_trips={} held={}",
        tokens.max_held(),
        tokens.status().redis_calls,
        tokens.status().held
    )
}

/// Spends from a token lease while the parent kills and restarts Redis; reports what
/// it admitted in each mode and when it switched.
fn worker_outage(url: &str) -> String {
    let start_ms = env_u64("WORKER_START_MS");
    let switches: Arc<Mutex<Vec<(u64, ClusterMode)>>> = Arc::default();
    let log = Arc::clone(&switches);
    let lease = ClusterLease::token_bucket(url, &env("WORKER_TOKEN_KEY"), 300.0, 30)
        .batch(5)
        .timeout(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(50))
        .fallback_share(1.0 / 3.0)
        .on_switch(move |s| {
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((unix_ms(), s.to))
        })
        .build()
        .unwrap();
    sleep_until_unix_ms(start_ms);
    let end = env_u64("WORKER_END_MS");
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    let mut redis_after_return = 0u64;
    let mut slowest = Duration::ZERO;
    while unix_ms() < end {
        let t0 = Instant::now();
        let d = lease.try_acquire();
        slowest = slowest.max(t0.elapsed());
        let name = match d {
            ClusterDecision::Admitted => "admitted",
            ClusterDecision::Refused => "rejected",
            ClusterDecision::AdmittedLocally => "admitted_locally",
            ClusterDecision::RefusedLocally => "refused_locally",
        };
        *counts.entry(name).or_default() += 1;
        let returned = switches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(_, m)| *m == ClusterMode::Redis);
        if returned && d == ClusterDecision::Admitted {
            redis_after_return += 1;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let switches = switches
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let when = |m: ClusterMode| {
        switches
            .iter()
            .filter(|(_, s)| *s == m)
            .map(|(t, _)| t.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "admitted={} rejected={} admitted_locally={} refused_locally={} redis_after_return={redis_after_return} \
         to_fallback_at={} to_redis_at={} slowest_us={}",
        counts.get("admitted").unwrap_or(&0),
        counts.get("rejected").unwrap_or(&0),
        counts.get("admitted_locally").unwrap_or(&0),
        counts.get("refused_locally").unwrap_or(&0),
        when(ClusterMode::Fallback),
        when(ClusterMode::Redis),
        slowest.as_micros()
    )
}

#[test]
fn three_processes_share_one_limit_exactly_per_call() {
    let _serial = serial();
    let url = shared_url();
    let token_key = unique_key("procs-token");
    let period_key = unique_key("procs-period");
    let reports = run_workers(
        3,
        "per-call",
        &[
            ("WORKER_URL", url),
            ("WORKER_TOKEN_KEY", token_key),
            ("WORKER_PERIOD_KEY", period_key),
            ("WORKER_START_MS", (unix_ms() + 1_000).to_string()),
        ],
    );
    // Token bucket: burst 300, refill 0.001/s (under one token in the test), 600 takes.
    assert_eq!(sum(&reports, "admitted"), 300, "{reports:?}");
    assert_eq!(sum(&reports, "rejected"), 300, "{reports:?}");
    assert!(
        reports.iter().all(|r| num(r, "admitted") > 0),
        "every process got some: {reports:?}"
    );
    // Period: quota 250 in one window, 450 takes: exactly one HitQuota across processes.
    assert_eq!(sum(&reports, "allowed"), 249, "{reports:?}");
    assert_eq!(sum(&reports, "hit"), 1, "{reports:?}");
    assert_eq!(sum(&reports, "over"), 200, "{reports:?}");
    // One round trip per call.
    assert_eq!(sum(&reports, "round_trips"), 600);
}

#[test]
fn three_processes_share_one_limit_within_five_percent_leased() {
    let _serial = serial();
    let url = shared_url();
    let (rate, burst, batch, quota) = (1000u64, 50u64, 10u64, 1500u64);
    let start = unix_ms() + 1_500;
    let end = start + 2_000;
    let reports = run_workers(
        3,
        "lease",
        &[
            ("WORKER_URL", url),
            ("WORKER_TOKEN_KEY", unique_key("procs-lease-token")),
            ("WORKER_VISITS_KEY", unique_key("procs-lease-visits")),
            ("WORKER_RATE", rate.to_string()),
            ("WORKER_BURST", burst.to_string()),
            ("WORKER_BATCH", batch.to_string()),
            ("WORKER_QUOTA", quota.to_string()),
            ("WORKER_START_MS", start.to_string()),
            ("WORKER_END_MS", end.to_string()),
        ],
    );
    // Visits: 1500 per minute, demanded at about 3 x 1000/s: all of it, never more.
    let visits = sum(&reports, "visits");
    assert!(visits <= quota, "{visits} > quota {quota}: {reports:?}");
    assert!(
        visits * 100 >= quota * 95,
        "{visits} < 95% of {quota}: {reports:?}"
    );

    // Token bucket: what one round trip per call would admit over the run is
    // burst + rate x duration; leasing may add at most instances x max_held.
    let tokens = sum(&reports, "tokens");
    let first = reports.iter().map(|r| num(r, "first")).min().unwrap();
    let last = reports.iter().map(|r| num(r, "last")).max().unwrap();
    let secs = (last - first) as f64 / 1000.0;
    let ideal = burst as f64 + rate as f64 * secs;
    let bound = ideal + sum(&reports, "max_held") as f64;
    assert!(
        (tokens as f64) <= bound,
        "{tokens} admitted > {bound:.0} (burst + rate x {secs:.3} s + 3 x max_held): {reports:?}"
    );
    assert!(
        (tokens as f64 - ideal).abs() <= 0.05 * ideal,
        "{tokens} admitted, not within 5% of {ideal:.0}: {reports:?}"
    );
    println!("leased, 3 processes: {reports:?}");
    // Leasing's point: one round trip per batch, not per call. (Each process may end
    // with one more batch reserved and not yet ready.)
    let trips = sum(&reports, "round_trips");
    assert!(
        trips <= tokens / batch + 2 * 3,
        "{trips} round trips for {tokens} tokens at batch {batch}: {reports:?}"
    );
}

#[test]
fn processes_serve_from_their_fallback_while_redis_is_down_and_switch_back() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let start = unix_ms() + 1_500;
    let end = start + 3_000;
    let key = unique_key("procs-outage");
    let url = server.url();
    let workers = thread::spawn(move || {
        run_workers(
            3,
            "outage",
            &[
                ("WORKER_URL", url),
                ("WORKER_TOKEN_KEY", key),
                ("WORKER_START_MS", start.to_string()),
                ("WORKER_END_MS", end.to_string()),
            ],
        )
    });
    sleep_until_unix_ms(start + 800);
    let stopped = unix_ms();
    server.stop();
    sleep_until_unix_ms(start + 1_800);
    let restarting = unix_ms();
    server.restart();
    let restarted = unix_ms();
    let reports = workers.join().expect("workers");

    let times = |r: &BTreeMap<String, String>, k: &str| -> Vec<u64> {
        r[k].split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect()
    };
    for (i, r) in reports.iter().enumerate() {
        let down = times(r, "to_fallback_at");
        let up = times(r, "to_redis_at");
        assert_eq!(
            down.len(),
            1,
            "worker {i}: one switch to the fallback: {r:?}"
        );
        assert_eq!(up.len(), 1, "worker {i}: one switch back: {r:?}");
        assert!(
            down[0] >= stopped && down[0] < stopped + 1_000,
            "worker {i} switched at {} (Redis stopped at {stopped}): {r:?}",
            down[0]
        );
        assert!(
            up[0] >= restarting && up[0] < restarted + 1_000,
            "worker {i} came back at {} (Redis restarted at {restarting}..{restarted}): {r:?}",
            up[0]
        );
        // It kept serving from its fallback: 100/s with a burst of 10 (a third of
        // 300/s and 30) over the ~1 s outage.
        let local = num(r, "admitted_locally");
        let outage_s = (up[0] - down[0]) as f64 / 1000.0;
        assert!(
            local >= 20,
            "worker {i}: only {local} admitted locally: {r:?}"
        );
        assert!(
            local as f64 <= 10.0 + 100.0 * outage_s + 5.0,
            "worker {i}: {local} admitted locally in {outage_s:.3} s: {r:?}"
        );
        assert!(num(r, "redis_after_return") > 0, "worker {i}: {r:?}");
        assert!(num(r, "slowest_us") < 50_000, "worker {i} blocked: {r:?}");
    }
}
