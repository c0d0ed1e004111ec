//! The token bucket's warm-up through a point: exact per second under many threads,
//! kept across a change of another rule, cold again after idle time, in policy files.

use resilience_runtime::config::{Format, PolicyFile};
use resilience_runtime::{Clock, ManualClock, Policy, Reason, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

fn warm(max_visits: Option<u64>) -> Policy {
    let b = Policy::builder()
        .token_bucket(100.0, 100)
        .warm_up(Duration::from_secs(10), 3.0);
    match max_visits {
        Some(v) => b.max_visits(v),
        None => b,
    }
    .build()
    .unwrap()
}

/// Admitted calls in one second, out of `asked`, on `threads` threads.
fn second(point: &'static resilience_runtime::Point, threads: u64, asked: u64) -> u64 {
    let passed = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let passed = passed.clone();
            std::thread::spawn(move || {
                for _ in 0..asked / threads {
                    if let Ok(p) = point.enter() {
                        p.finish(false);
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    passed.load(Ordering::Relaxed)
}

#[test]
fn a_cold_second_admits_exactly_its_limit_under_many_threads() {
    for threads in [1u64, 2, 8, 32, 64] {
        let (manual, registry) = manual_registry();
        registry.set_policy("wu.threads", warm(None)).unwrap();
        let point = registry.point("wu.threads").unwrap();
        // Cold: 100 / 3 = 33 a second.
        assert_eq!(second(point, threads, 640), 33, "{threads} threads");
        manual.advance(Duration::from_secs(1));
        let next = second(point, threads, 640);
        assert!((33..100).contains(&next), "{threads}: {next}");
        let s = point.stats();
        assert_eq!(s.totals.passes, 33 + next);
        assert_eq!(
            s.totals.downgrades_by_reason.get(Reason::TokenBucket),
            2 * 640 - 33 - next
        );
    }
}

#[test]
fn warming_is_kept_across_a_change_of_another_rule_and_lost_when_idle() {
    let (manual, registry) = manual_registry();
    registry.set_policy("wu.keep", warm(None)).unwrap();
    let point = registry.point("wu.keep").unwrap();
    let mut last = 0;
    for _ in 0..30 {
        last = second(point, 1, 200);
        manual.advance(Duration::from_secs(1));
    }
    assert_eq!(last, 100, "warm after 30 s of overload");
    // Another rule changes: the bucket and its warm-up stay.
    registry
        .set_policy("wu.keep", warm(Some(u64::MAX / 2)))
        .unwrap();
    assert_eq!(second(point, 1, 200), 100);
    // A minute idle: cold again.
    manual.advance(Duration::from_secs(60));
    assert_eq!(second(point, 1, 200), 33);
}

#[test]
fn policy_files_read_and_check_the_warm_up() {
    let text = "[points.\"wu.file\"]\ntoken_bucket = { rate = 50.0, capacity = 50 }\nwarm_up = { period = \"20s\", cold_factor = 4.0 }\n";
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let w = file.points["wu.file"].policy.warm_up().unwrap();
    assert_eq!((w.period, w.cold_factor), (Duration::from_secs(20), 4.0));
    for format in [Format::Toml, Format::Json] {
        let written = file.to_text(format).unwrap();
        assert_eq!(
            PolicyFile::parse(&written, format).unwrap(),
            file,
            "{written}"
        );
    }
    let default_factor = PolicyFile::parse(
        "[points.p]\ntoken_bucket = { rate = 5.0, capacity = 5 }\nwarm_up = { period = \"5s\" }\n",
        Format::Toml,
    )
    .unwrap();
    assert_eq!(
        default_factor.points["p"]
            .policy
            .warm_up()
            .unwrap()
            .cold_factor,
        3.0
    );
    let fields = |text: &str| -> Vec<String> {
        PolicyFile::parse(text, Format::Toml)
            .unwrap_err()
            .problems()
            .iter()
            .filter_map(|p| p.field.clone())
            .collect()
    };
    assert_eq!(
        fields("[points.p]\nwarm_up = { period = \"5s\" }\n"),
        ["warm_up"]
    );
    assert_eq!(
        fields("[points.p]\ntoken_bucket = { rate = 5.0, capacity = 5 }\nwarm_up = { period = \"5s\", cold_factor = 1.0 }\n"),
        ["warm_up.cold_factor"]
    );
    assert_eq!(
        fields("[points.p]\ntoken_bucket = { rate = 5.0, capacity = 5 }\nwarm_up = { period = \"2h\" }\n"),
        ["warm_up.period"]
    );
}
