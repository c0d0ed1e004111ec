//! The `retry` section of a point's settings: set in code, in policy files and by the
//! console (layers), read by `#[retry]` and `Point::call_retrying` in place of the
//! code's arguments, validated with field names, exact under policy changes racing
//! many threads.

use resilience_runtime::config::{Format, PolicyFile};
use resilience_runtime::retry::{Backoff, BudgetConfig, Retry, RetryPolicy};
use resilience_runtime::sources::{PointConfig, Section, Source};
use resilience_runtime::{registry, retry, BreakerError, Clock, ManualClock, Registry};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

fn fixed(attempts: u64) -> Retry {
    Retry::builder(attempts)
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .build()
        .unwrap()
}

/// Attempts made by one always-failing call of `point` whose code asks for `code`.
fn attempts_of(point: &'static resilience_runtime::Point, code: u32) -> u64 {
    let before = point.retry_stats().attempts;
    let out: Result<(), &str> = point.call_retrying(
        &fixed(u64::from(code)),
        None,
        || Err("busy"),
        |_| Ok(()),
        |_| true,
    );
    assert_eq!(out, Err("busy"));
    point.retry_stats().attempts - before
}

#[test]
fn the_section_replaces_the_code_and_clearing_gives_it_back() {
    let (manual, registry) = manual_registry();
    let point = registry.point("rp.code").unwrap();
    assert_eq!(attempts_of(point, 2), 2);
    let section = RetryPolicy::builder(
        Retry::builder(4)
            .backoff(Backoff::exponential(
                Duration::from_millis(100),
                3.0,
                Duration::from_millis(500),
            ))
            .build()
            .unwrap(),
    )
    .build()
    .unwrap();
    registry.set_retry("rp.code", section).unwrap();
    assert_eq!(registry.retry("rp.code").unwrap(), Some(section));
    let t0 = manual.now().as_nanos();
    assert_eq!(attempts_of(point, 2), 4);
    // The section's backoff (no jitter): 100 + 300 + 500 ms.
    assert_eq!(manual.now().as_nanos() - t0, 900_000_000);
    registry.clear_retry("rp.code").unwrap();
    assert_eq!(registry.retry("rp.code").unwrap(), None);
    assert!(
        registry.layers("rp.code").unwrap().is_empty(),
        "a code layer left empty is removed"
    );
    assert_eq!(attempts_of(point, 2), 2);
}

#[test]
fn a_section_budget_replaces_the_named_one() {
    let (_manual, registry) = manual_registry();
    let named = registry.retry_budget("rp.named");
    let point = registry.point("rp.budget").unwrap();
    let none = BudgetConfig::builder()
        .percent(0.0)
        .min_per_second(0)
        .window(Duration::from_secs(10))
        .build()
        .unwrap();
    registry
        .set_retry(
            "rp.budget",
            RetryPolicy::builder(fixed(3)).budget(none).build().unwrap(),
        )
        .unwrap();
    let out: Result<(), &str> =
        point.call_retrying(&fixed(3), Some(named), || Err("x"), |_| Ok(()), |_| true);
    assert_eq!(out, Err("x"));
    let s = point.retry_stats();
    assert_eq!(
        (s.attempts, s.refused_by_budget),
        (1, 1),
        "the own budget refuses"
    );
    assert_eq!(named.stats().calls, 0, "the named budget is not used");

    // Without a budget in the section, the named one is used again.
    registry
        .set_retry("rp.budget", RetryPolicy::builder(fixed(3)).build().unwrap())
        .unwrap();
    let _: Result<(), &str> =
        point.call_retrying(&fixed(3), Some(named), || Err("x"), |_| Ok(()), |_| true);
    assert_eq!(named.stats().calls, 1);
    assert_eq!(point.retry_stats().attempts, 1 + 3);
}

#[test]
fn invalid_sections_are_refused_naming_the_field() {
    let field = |p: RetryPolicy| match registry().set_retry("rp.invalid", p) {
        Err(retry::RetryError::Config(e)) => e.field,
        other => panic!("{other:?}"),
    };
    // The builders refuse invalid values...
    assert_eq!(Retry::builder(0).build().unwrap_err().field, "attempts");
    assert_eq!(Retry::builder(101).build().unwrap_err().field, "attempts");
    // ...and the fields stay public, so the registry checks a section again.
    let ok = RetryPolicy::builder(Retry::builder(2).build().unwrap())
        .build()
        .unwrap();
    let with = |change: &dyn Fn(&mut RetryPolicy)| {
        let mut p = ok;
        change(&mut p);
        p
    };
    assert_eq!(field(with(&|p| p.retry.attempts = 0)), "attempts");
    assert_eq!(field(with(&|p| p.retry.attempts = 101)), "attempts");
    assert_eq!(
        field(with(&|p| p.retry.backoff.multiplier = 0.5)),
        "multiplier"
    );
    assert_eq!(
        field(with(&|p| p.retry.backoff = Backoff::fixed(Duration::ZERO))),
        "base"
    );
    let mut bad_window = BudgetConfig::default();
    bad_window.window = Duration::from_millis(10);
    assert_eq!(
        field(with(&|p| p.budget = Some(bad_window))),
        "budget.window"
    );
    assert_eq!(registry().retry("rp.invalid").unwrap(), None, "nothing set");
    // Through the layers as well.
    let err = registry()
        .set_layer(
            "rp.invalid",
            Source::Console,
            PointConfig::builder()
                .retry(with(&|p| p.retry.attempts = 0))
                .build(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, BreakerError::Retry(e) if e.field == "attempts"),
        "{err}"
    );
    assert!(err.to_string().contains("invalid retry section"), "{err}");
    assert!(matches!(
        registry().set_retry(
            "",
            RetryPolicy::builder(Retry::builder(2).build().unwrap())
                .build()
                .unwrap()
        ),
        Err(retry::RetryError::Name(_))
    ));
}

#[test]
fn files_read_write_and_check_the_section() {
    let text = r#"
        [points."rp.file"]
        max_visits = 10
        [points."rp.file".retry]
        attempts = 5
        base = "20ms"
        multiplier = 1.5
        max = "1s"
        jitter = 0.5
        budget = { percent = 10.0, min_per_second = 2, window = "30s" }
        [points."rp.file.only"]
        retry = { attempts = 2 }
    "#;
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let backoff = Backoff::exponential(Duration::from_millis(20), 1.5, Duration::from_secs(1))
        .with_jitter(0.5);
    let want = RetryPolicy::builder(Retry::builder(5).backoff(backoff).build().unwrap())
        .budget(
            BudgetConfig::builder()
                .percent(10.0)
                .min_per_second(2)
                .window(Duration::from_secs(30))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let config = &file.points["rp.file"];
    assert_eq!(config.retry, Some(want));
    assert!(config.sets(Section::Rules) && config.sets(Section::Retry));
    let only = &file.points["rp.file.only"];
    assert_eq!(
        only.retry,
        Some(
            RetryPolicy::builder(Retry::builder(2).build().unwrap())
                .build()
                .unwrap()
        )
    );
    assert!(!only.sets(Section::Rules), "retry alone sets no rule");
    for format in [Format::Toml, Format::Json] {
        let written = file.to_text(format).unwrap();
        assert_eq!(
            PolicyFile::parse(&written, format).unwrap(),
            file,
            "{written}"
        );
    }
    // Defaults are left out when written; a missing `max` is at least `base`.
    let long = PolicyFile::parse(
        "[points.p.retry]\nattempts = 3\nbase = \"5s\"\n",
        Format::Toml,
    )
    .unwrap();
    let b = long.points["p"].retry.unwrap().retry.backoff;
    assert_eq!(
        (b.base, b.max),
        (Duration::from_secs(5), Duration::from_secs(5))
    );
    let written = long.to_text(Format::Toml).unwrap();
    assert!(!written.contains("max ="), "{written}");

    // Every problem, each with its field.
    let err = PolicyFile::parse(
        r#"{"points": {"p": {"retry": {"atempts": 2, "base": "fast", "jitter": 2.0,
            "budget": {"percent": -1, "window": "1ms", "extra": 1}}}}}"#,
        Format::Json,
    )
    .unwrap_err();
    let fields: Vec<_> = err
        .problems()
        .iter()
        .filter_map(|p| p.field.clone())
        .collect();
    for want in [
        "retry.atempts",
        "retry.attempts",
        "retry.base",
        "retry.budget.percent",
        "retry.budget.extra",
    ] {
        assert!(fields.iter().any(|f| f == want), "{want} in {fields:?}");
    }
    assert!(err.to_string().contains("did you mean `attempts`"), "{err}");
    let err = PolicyFile::parse(
        "[points.p.retry]\nattempts = 2\njitter = 2.0\n",
        Format::Toml,
    )
    .unwrap_err();
    assert_eq!(err.problems()[0].field.as_deref(), Some("retry.jitter"));
    let err = PolicyFile::parse(
        "[points.p.retry]\nattempts = 2\nbudget = { window = \"1ms\" }\n",
        Format::Toml,
    )
    .unwrap_err();
    assert_eq!(
        err.problems()[0].field.as_deref(),
        Some("retry.budget.window")
    );
}

#[test]
fn layers_rank_the_section_and_report_its_origin() {
    let (_manual, registry) = manual_registry();
    let point = registry.point("rp.layers").unwrap();
    registry
        .set_retry("rp.layers", RetryPolicy::builder(fixed(2)).build().unwrap())
        .unwrap();
    registry
        .load_policies_str(
            "[points.\"rp.layers\".retry]\nattempts = 3\nbase = \"1ms\"\n",
            Format::Toml,
        )
        .unwrap();
    assert_eq!(attempts_of(point, 9), 3, "the file ranks above code");
    registry
        .set_layer(
            "rp.layers",
            Source::Console,
            PointConfig::builder()
                .retry(RetryPolicy::builder(fixed(5)).build().unwrap())
                .build(),
        )
        .unwrap();
    assert_eq!(attempts_of(point, 9), 5, "the console ranks above the file");
    let effective = registry.effective_policy("rp.layers").unwrap();
    assert_eq!(
        effective.origin(Section::Retry).unwrap().source,
        Source::Console
    );
    assert!(effective.policy.is_none(), "no rule was set by anyone");
    registry.clear_layer("rp.layers", Source::Console).unwrap();
    assert_eq!(attempts_of(point, 9), 3);
    // A file without the section gives the code's section back.
    registry
        .load_policies_str("[points.\"rp.layers\"]\nmax_visits = 100\n", Format::Toml)
        .unwrap();
    assert_eq!(attempts_of(point, 9), 2);
    registry.clear_retry("rp.layers").unwrap();
    assert_eq!(attempts_of(point, 9), 9);
}

#[retry(attempts = 2, backoff = "fixed", base = "1ns", point = "rp.macro")]
fn always_busy(id: u32) -> Result<u32, String> {
    Err(format!("busy {id}"))
}

#[test]
fn the_macro_reads_the_section() {
    let stats = || registry().stats("rp.macro").unwrap().retry;
    assert_eq!(always_busy(1), Err("busy 1".to_owned()));
    assert_eq!(stats().attempts, 2);
    let retry = Retry::builder(6)
        .backoff(Backoff::fixed(Duration::from_nanos(1)))
        .build()
        .unwrap();
    let section = RetryPolicy::builder(retry).build().unwrap();
    registry().set_retry("rp.macro", section).unwrap();
    assert_eq!(always_busy(2), Err("busy 2".to_owned()));
    assert_eq!(stats().attempts, 2 + 6);
    let none = BudgetConfig::builder()
        .percent(0.0)
        .min_per_second(0)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    registry()
        .set_retry(
            "rp.macro",
            RetryPolicy::builder(retry).budget(none).build().unwrap(),
        )
        .unwrap();
    assert_eq!(always_busy(3), Err("busy 3".to_owned()));
    let s = stats();
    assert_eq!((s.attempts, s.refused_by_budget), (2 + 6 + 1, 1));
    registry().clear_retry("rp.macro").unwrap();
    assert_eq!(always_busy(4), Err("busy 4".to_owned()));
    assert_eq!(stats().attempts, 2 + 6 + 1 + 2);
}

/// 1 to 64 threads make always-failing calls while another thread swaps the section
/// between 5 attempts with an own budget of 10% and 2 attempts with none: every call
/// makes between 1 and 5 attempts, the counters add up, and the own budget never
/// allows more than 10% of the calls it counted (the window does not move).
#[test]
fn swaps_racing_many_threads_keep_every_bound() {
    for threads in [1u64, 2, 8, 24, 64] {
        let (_manual, registry) = manual_registry();
        let name = "rp.race";
        let point = registry.point(name).unwrap();
        let tight = BudgetConfig::builder()
            .percent(10.0)
            .min_per_second(0)
            .window(Duration::from_secs(10))
            .build()
            .unwrap();
        let wide = RetryPolicy::builder(fixed(5))
            .budget(tight)
            .build()
            .unwrap();
        let narrow = RetryPolicy::builder(fixed(2)).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let section = if i.is_multiple_of(2) { wide } else { narrow };
                    registry.set_retry(name, section).unwrap();
                    i += 1;
                    std::thread::yield_now();
                }
            })
        };
        let too_many = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let too_many = too_many.clone();
                std::thread::spawn(move || {
                    for _ in 0..300 {
                        let mut attempts = 0u32;
                        let _: Result<(), ()> = point.call_retrying(
                            &fixed(3),
                            None,
                            || {
                                attempts += 1;
                                Err(())
                            },
                            |_| Ok(()),
                            |_| true,
                        );
                        if !(1..=5).contains(&attempts) {
                            too_many.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(too_many.load(Ordering::Relaxed), 0, "{threads} threads");
        let s = point.retry_stats();
        assert_eq!(s.calls, threads * 300);
        assert_eq!(s.attempts, s.calls + s.retries);
        assert_eq!(
            s.exhausted + s.refused_by_budget,
            s.calls,
            "every call ended by attempts or by the budget"
        );
        assert_eq!(point.stats().totals.exceptions, s.attempts);
        // The own budget: one budget for the wide section, whichever swap made it.
        registry.set_retry(name, wide).unwrap();
        let b = point
            .retry_budget()
            .expect("the section sets a budget")
            .stats();
        assert!(
            b.retries <= b.calls / 10,
            "{threads} threads: {} retries for {} calls",
            b.retries,
            b.calls
        );
    }
}
