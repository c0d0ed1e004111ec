//! Hot keys through a point: a flood of a million distinct keys (memory bounded, the
//! heavy hitters found and counted exactly), listener events naming the key, shadow
//! policies, policy changes that keep each key's state, refill on a manual clock,
//! the top keys, and a keyed call on a point without a `keys` section.

use resilience_runtime::keys::{KeyOverride, KeyPolicy};
use resilience_runtime::{Clock, Event, ManualClock, Policy, Reason, Registry};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

fn manual() -> (&'static Registry, ManualClock) {
    let clock = ManualClock::new();
    let r = Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    (r, clock)
}

fn keyed(keys: KeyPolicy) -> Policy {
    Policy::builder().keys(keys).build().unwrap()
}

#[test]
fn a_million_distinct_keys_stay_in_bounded_memory_and_the_heavy_ones_are_exact() {
    let (r, _clock) = manual();
    // 100 calls per key at most over the (frozen) test.
    let section = KeyPolicy::builder()
        .limit(100, Duration::from_secs(3600))
        .max_keys(1024)
        .build()
        .unwrap();
    r.set_policy("flood", keyed(section)).unwrap();
    let p = r.point("flood").unwrap();
    let heavy: Vec<String> = (0..10).map(|i| format!("heavy-{i}")).collect();
    let mut heavy_admitted = [0u64; 10];
    let mut memory = None;
    for i in 0..1_500_000u64 {
        // Every third call is one of ten heavy keys (50 000 calls each, far over
        // their 100), the others a million distinct ones.
        if i % 3 == 0 {
            let h = (i / 3 % 10) as usize;
            if let Ok(permit) = p.enter_key(heavy[h].as_str()) {
                heavy_admitted[h] += 1;
                permit.finish(false);
            }
        } else if let Ok(permit) = p.enter_key(&(i / 3 * 2 + i % 3)) {
            permit.finish(false);
        }
        if i == 100_000 {
            memory = p.key_stats().map(|s| s.memory_bytes);
        }
    }
    let stats = p.key_stats().unwrap();
    assert_eq!(Some(stats.memory_bytes), memory, "the table never grows");
    assert!(
        stats.memory_bytes < 1024 * 200,
        "{} bytes for 1024 keys",
        stats.memory_bytes
    );
    assert!(stats.tracked <= 1024);
    // The sketch never admits a key beyond its limit: the heavy keys got at most
    // 100 each, tracked or not at the time.
    for (h, n) in heavy_admitted.iter().enumerate() {
        assert!(*n <= 100, "heavy-{h} admitted {n} times");
    }
    // And they are found: the top ten keys are the heavy ones, with their refusals.
    let top = p.hot_keys(10);
    let mut names: Vec<&str> = top.iter().map(|k| k.key.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, heavy.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(top.iter().all(|k| k.refused > 40_000), "{top:?}");
    let s = p.stats();
    assert_eq!(s.totals.visits, 1_500_000);
    assert_eq!(
        s.totals.downgrades,
        s.totals.downgrades_by_reason.get(Reason::HotKey)
    );
}

#[test]
fn a_refusal_names_its_key_in_the_listener_event() {
    let r = registry();
    let section = KeyPolicy::builder()
        .limit(1, Duration::from_secs(60))
        .build()
        .unwrap();
    r.set_policy("ev.keys", keyed(section)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    r.add_event_listener(move |e| {
        if let Event::Downgrade(d) = e {
            s.lock().unwrap().push((d.reason, d.key.clone()));
        }
    });
    let p = r.point("ev.keys").unwrap();
    p.enter_key("alice").unwrap().finish(false);
    let long = "x".repeat(100);
    p.enter_key(long.as_str()).unwrap().finish(false);
    assert!(p.enter_key("alice").is_err());
    assert!(p.enter_key(long.as_str()).is_err());
    assert!(r.flush_listeners(Duration::from_secs(20)));
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], (Reason::HotKey, Some("alice".to_owned())));
    assert_eq!(
        seen[1],
        (Reason::HotKey, Some(format!("{}…", "x".repeat(30))))
    );
}

#[test]
fn a_shadow_policy_counts_key_refusals_and_runs_every_call() {
    let r = registry();
    let policy = Policy::builder()
        .keys(
            KeyPolicy::builder()
                .limit(1, Duration::from_secs(60))
                .build()
                .unwrap(),
        )
        .shadow(true)
        .build()
        .unwrap();
    r.set_policy("shadow.keys", policy).unwrap();
    let p = r.point("shadow.keys").unwrap();
    for _ in 0..5 {
        p.enter_key("k").unwrap().finish(false);
    }
    let s = p.stats();
    assert_eq!(s.totals.passes, 5);
    assert_eq!(s.shadow_downgrades_by_reason.get(Reason::HotKey), 4);
}

#[test]
fn keys_refill_and_keep_their_state_across_policy_changes() {
    let (r, clock) = manual();
    let section = |limit| {
        KeyPolicy::builder()
            .limit(limit, Duration::from_secs(1))
            .override_rule("vip", KeyOverride::builder().limit(10).build())
            .build()
            .unwrap()
    };
    r.set_policy("refill", keyed(section(2))).unwrap();
    let p = r.point("refill").unwrap();
    let admits = |k: &str, n: usize| (0..n).filter(|_| p.enter_key(k).is_ok()).count();
    assert_eq!(admits("a", 5), 2);
    assert_eq!(admits("vip", 20), 10);
    // Another rule elsewhere in the policy keeps the keys' state: nothing refills.
    r.set_policy(
        "refill",
        Policy::builder()
            .keys(section(2))
            .max_concurrency(100)
            .build()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(admits("a", 5), 0);
    assert_eq!(admits("vip", 5), 0);
    // Half a second refills one call of `a` and five of `vip`.
    clock.advance(Duration::from_millis(500));
    assert_eq!(admits("a", 5), 1);
    assert_eq!(admits("vip", 20), 5);
    // A raised limit carries what the key owes: `a` used its burst, so it gets the
    // new burst's difference at once (4 - 2 owed), not a fresh 4.
    r.set_policy("refill", keyed(section(4))).unwrap();
    assert_eq!(admits("a", 10), 2);
    // Removing the section: keys are no longer looked at.
    r.set_policy("refill", Policy::observe()).unwrap();
    assert_eq!(admits("a", 10), 10);
}

#[test]
fn a_point_without_a_keys_section_ignores_the_key() {
    let r = registry();
    let p = r.point("no.keys").unwrap();
    assert!(p.enter_key("a").is_ok());
    r.set_policy("no.keys", Policy::builder().max_visits(3).build().unwrap())
        .unwrap();
    assert_eq!((0..5).filter(|_| p.enter_key("a").is_ok()).count(), 3);
    assert!(p.hot_keys(5).is_empty());
    assert!(p.key_stats().is_none());
}

#[test]
fn the_point_s_own_rules_come_first() {
    let r = registry();
    let policy = Policy::builder()
        .max_visits(2)
        .keys(
            KeyPolicy::builder()
                .limit(1, Duration::from_secs(60))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    r.set_policy("order", policy).unwrap();
    let p = r.point("order").unwrap();
    assert!(p.enter_key("a").is_ok());
    assert_eq!(p.enter_key("a").unwrap_err().reason(), Reason::HotKey);
    // A key refusal took no visit: `b` still gets the point's second.
    assert!(p.enter_key("b").is_ok());
    assert_eq!(p.enter_key("c").unwrap_err().reason(), Reason::Visits);
    let top = p.hot_keys(10);
    assert_eq!(top[0].key, "a");
    assert_eq!((top[0].passes, top[0].refused), (1, 1));
    // `c` was refused by the point before its key was looked at.
    assert!(top.iter().all(|k| k.key != "c"));
}

#[test]
fn integers_match_overrides_by_their_decimal_text() {
    let r = registry();
    let section = KeyPolicy::builder()
        .limit(1, Duration::from_secs(60))
        .override_limit("42", 3)
        .override_limit("-7", 0)
        .build()
        .unwrap();
    r.set_policy("ints", keyed(section)).unwrap();
    let p = r.point("ints").unwrap();
    assert_eq!((0..5).filter(|_| p.enter_key(&42u32).is_ok()).count(), 3);
    assert_eq!(
        (0..5).filter(|_| p.enter_key(&42i64).is_ok()).count(),
        0,
        "the same key"
    );
    assert!(p.enter_key(&-7i16).is_err());
    assert!(p.enter_key(&7u8).is_ok());
    assert!(p.enter_key(&7u8).is_err());
}

#[test]
fn a_key_past_its_burst_waits_for_its_next_call_within_max_wait() {
    let (r, clock) = manual();
    let section = KeyPolicy::builder()
        .limit(10, Duration::from_secs(1)) // a call every 100 ms per key
        .burst(1)
        .max_wait(Duration::from_millis(150))
        .build()
        .unwrap();
    r.set_policy("wait.keys", keyed(section)).unwrap();
    let p = r.point("wait.keys").unwrap();
    let t0 = clock.now().as_nanos();
    for _ in 0..4 {
        p.enter_key("a").unwrap().finish(false);
    }
    // The first at once, each other one 100 ms after the last (the manual clock's
    // sleep advances it).
    assert_eq!(clock.now().as_nanos() - t0, 300_000_000);
    let s = p.stats();
    assert_eq!((s.totals.passes, s.totals.downgrades), (4, 0));
    let top = p.hot_keys(1);
    assert_eq!((top[0].passes, top[0].refused), (4, 0));

    // A wait longer than max_wait is a refusal, at once.
    let section = KeyPolicy::builder()
        .limit(10, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_millis(50))
        .build()
        .unwrap();
    r.set_policy("wait.short", keyed(section)).unwrap();
    let q = r.point("wait.short").unwrap();
    let t1 = clock.now().as_nanos();
    q.enter_key("a").unwrap().finish(false);
    assert_eq!(q.enter_key("a").unwrap_err().reason(), Reason::HotKey);
    assert_eq!(clock.now().as_nanos(), t1, "no wait");
    // A call that may not wait (the tower layer's) is refused at once too.
    clock.advance(Duration::from_millis(60));
    assert_eq!(q.try_enter_key("a").unwrap_err().reason(), Reason::HotKey);
    let s = q.stats();
    assert_eq!(s.totals.downgrades_by_reason.get(Reason::HotKey), 2);
    assert_eq!(s.totals.visits, s.totals.passes + s.totals.downgrades);
}

#[test]
fn waiting_keys_keep_their_rate_under_threads_in_real_time() {
    let r = registry();
    let section = KeyPolicy::builder()
        .limit(100, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_millis(100))
        .build()
        .unwrap();
    r.set_policy("wait.threads", keyed(section)).unwrap();
    let p = r.point("wait.threads").unwrap();
    let start = std::time::Instant::now();
    let run = Duration::from_millis(300);
    let admitted = std::sync::atomic::AtomicU64::new(0);
    let refused = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                while start.elapsed() < run {
                    match p.enter_key("shared") {
                        Ok(permit) => {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            permit.finish(false);
                        }
                        Err(_) => {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let admitted = admitted.into_inner();
    // Never beyond the bucket: 1 + 100 per second of the run.
    assert!(
        admitted as f64 <= 1.0 + 100.0 * elapsed + 1.0,
        "{admitted} admitted in {elapsed:.3} s"
    );
    // And paced rather than refused: most of the rate is used.
    assert!(admitted >= 15, "{admitted} admitted in {elapsed:.3} s");
    let s = p.stats();
    assert_eq!(s.totals.passes, admitted);
    assert_eq!(s.totals.downgrades, refused.into_inner());
    assert_eq!(s.concurrency, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_keyed_call_awaits_its_key_s_next_call() {
    let r = registry();
    let section = KeyPolicy::builder()
        .limit(20, Duration::from_secs(1)) // every 50 ms
        .burst(1)
        .max_wait(Duration::from_millis(500))
        .build()
        .unwrap();
    r.set_policy("wait.async", keyed(section)).unwrap();
    let p = r.point("wait.async").unwrap();
    let start = std::time::Instant::now();
    for _ in 0..5 {
        let permit = p.enter_key_async("t").await.unwrap();
        permit.finish(false);
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(195), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(p.stats().totals.passes, 5);
}

#[test]
fn a_key_limiter_answers_at_once_and_reports_its_busiest_keys() {
    use resilience_runtime::keys::{KeyLimiter, KeyRefused};
    let clock = ManualClock::new();
    let policy = KeyPolicy::builder()
        .limit(2, Duration::from_secs(60))
        .max_wait(Duration::from_secs(3600)) // a limiter never waits
        .max_keys(64)
        .override_limit("vip", 5)
        .build()
        .unwrap();
    let limiter = KeyLimiter::with_clock(policy, Clock::manual(&clock));
    let t0 = clock.now().as_nanos();
    assert_eq!((0..4).filter(|_| limiter.check("a").is_ok()).count(), 2);
    assert_eq!(limiter.check("a"), Err(KeyRefused::Limit));
    assert_eq!(clock.now().as_nanos(), t0);
    assert_eq!((0..9).filter(|_| limiter.check("vip").is_ok()).count(), 5);
    let top: Vec<_> = limiter
        .hot_keys(2)
        .into_iter()
        .map(|k| (k.key, k.passes, k.refused, k.overridden))
        .collect();
    assert_eq!(
        top,
        [
            ("vip".to_owned(), 5, 4, true),
            ("a".to_owned(), 2, 3, false)
        ]
    );
    // A flood of keys: the table stays at its size.
    for i in 0..10_000u64 {
        let _ = limiter.check(&i);
    }
    let stats = limiter.stats();
    assert!(stats.tracked <= 64);
    assert!(stats.memory_bytes < 64 * 1024, "{}", stats.memory_bytes);
}
