//! Unit tests of the shared pieces, the token limiter and the lease.

use super::*;

#[test]
fn ttl_is_never_zero() {
    // go-zero: floor(2 x 1 / 10) = 0 s, and SETEX fails on every call.
    assert_eq!(token_ttl_ms(10.0, 1), 1000);
    assert_eq!(token_ttl_ms(1000.0, 3), 1000);
    // Otherwise 2 x burst / rate, rounded up.
    assert_eq!(token_ttl_ms(10.0, 100), 20_000);
    assert_eq!(token_ttl_ms(3.0, 10), 6667);
    assert_eq!(token_ttl_ms(1e-12, 1), MAX_TTL_MS);
}

#[test]
fn local_bucket_bursts_then_refills_at_rate() {
    let t0 = 5_000_000_000;
    let b = LocalBucket::new(10.0, 3, t0);
    assert!((0..3).all(|_| b.try_take(1, t0)));
    assert!(!b.try_take(1, t0));
    // One token every 100 ms.
    assert!(!b.try_take(1, t0 + 99_000_000));
    assert!(b.try_take(1, t0 + 100_000_000));
    assert!(!b.try_take(1, t0 + 100_000_000));
    // Idle for a long time: no more than the burst is saved.
    let later = t0 + 60_000_000_000;
    assert!(b.try_take(3, later));
    assert!(!b.try_take(1, later));
    // A take larger than the burst never passes.
    assert!(!b.try_take(4, later + 3_600_000_000_000));
}

#[test]
fn fallback_share_scales_rate_and_burst() {
    let Fallback::Bucket(b) = Fallback::bucket(90.0, 30, 1.0 / 3.0, 1_000_000_000) else {
        panic!("expected a bucket");
    };
    // 30 tokens per second, 10 at once.
    let t0 = 1_000_000_000;
    assert_eq!((0..20).filter(|_| b.try_take(1, t0)).count(), 10);
    assert_eq!(
        (0..40)
            .filter(|_| b.try_take(1, t0 + 1_000_000_000))
            .count(),
        10,
        "after 1 s the bucket is full again, not over-full"
    );
    assert!(matches!(
        Fallback::bucket(90.0, 30, 0.0, 0),
        Fallback::Closed
    ));
    // A tiny share still leaves one token of burst.
    let Fallback::Bucket(b) = Fallback::bucket(1.0, 2, 0.1, 0) else {
        panic!("expected a bucket");
    };
    assert!(b.try_take(1, t0));
    assert!(!b.try_take(1, t0));
}

#[test]
fn settings_are_checked_before_any_io() {
    let url = "redis://127.0.0.1:1/";
    let field = |r: Result<RedisTokenLimiter, RedisLimitError>| match r.unwrap_err() {
        RedisLimitError::InvalidConfig { field, .. } => field,
        e => panic!("expected InvalidConfig, got {e:?}"),
    };
    assert_eq!(field(RedisTokenLimiter::new(url, "", 1.0, 1)), "key");
    assert_eq!(field(RedisTokenLimiter::new(url, "k", f64::NAN, 1)), "rate");
    assert_eq!(field(RedisTokenLimiter::new(url, "k", -1.0, 1)), "rate");
    assert_eq!(field(RedisTokenLimiter::new(url, "k", 1.0, 0)), "burst");
    let b = || RedisTokenLimiter::builder(url, "k", 1.0, 1);
    assert_eq!(field(b().timeout(Duration::ZERO).build()), "timeout");
    assert_eq!(
        field(b().probe_interval(Duration::ZERO).build()),
        "probe_interval"
    );
    assert_eq!(field(b().fallback_share(1.5).build()), "fallback_share");
    assert!(matches!(
        RedisTokenLimiter::new("http://nope", "k", 1.0, 1),
        Err(RedisLimitError::InvalidUrl { .. })
    ));

    let lease_field = |r: Result<ClusterLease, RedisLimitError>| match r.unwrap_err() {
        RedisLimitError::InvalidConfig { field, .. } => field,
        e => panic!("expected InvalidConfig, got {e:?}"),
    };
    let t = || ClusterLease::token_bucket(url, "k", 10.0, 5);
    assert_eq!(lease_field(t().batch(0).build()), "batch");
    assert_eq!(lease_field(t().batch(6).build()), "batch");
    assert_eq!(lease_field(t().batch(4).refill_at(4).build()), "refill_at");
    assert_eq!(
        lease_field(t().batch(5).alignment(Alignment::Utc).build()),
        "alignment"
    );
    let v = || ClusterLease::visits(url, "k", Duration::from_secs(1), 5);
    assert_eq!(
        lease_field(v().refill_clock(RefillClock::Local).build()),
        "refill_clock"
    );
    assert_eq!(
        lease_field(ClusterLease::visits(url, "k", Duration::ZERO, 5).build()),
        "period"
    );
}

#[test]
fn handles_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<ClusterLease>();
    shareable::<RedisTokenLimiter>();
    shareable::<crate::redis::RedisPeriodLimiter>();
}

#[test]
fn decisions_report_admission_and_mode() {
    use ClusterDecision::*;
    assert_eq!(
        [Admitted, Refused, AdmittedLocally, RefusedLocally].map(|d| (d.is_admitted(), d.mode())),
        [
            (true, ClusterMode::Redis),
            (false, ClusterMode::Redis),
            (true, ClusterMode::Fallback),
            (false, ClusterMode::Fallback)
        ]
    );
}
