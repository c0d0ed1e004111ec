//! `#[breaker]` and breakers as a runtime setting of a point, on a manual clock.

use resilience_runtime::breaker::{ClassicConfig, SreConfig};
use resilience_runtime::retry::Backoff;
use resilience_runtime::{
    breaker, downgrade, init_registry, registry, BreakerPolicy, BreakerState, Clock, Downgraded,
    ManualClock, Policy, Reason,
};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

fn clock() -> &'static ManualClock {
    static CLOCK: OnceLock<ManualClock> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let c = ManualClock::new();
        init_registry(Clock::manual(&c)).expect("first use of the registry in this binary");
        c
    })
}

#[derive(Debug, PartialEq)]
enum CallError {
    Backend,
    Unavailable(Reason),
}

impl From<Downgraded> for CallError {
    fn from(d: Downgraded) -> Self {
        CallError::Unavailable(d.reason())
    }
}

#[breaker(point = "b.default")]
fn backend(fail: bool) -> Result<u32, CallError> {
    if fail {
        Err(CallError::Backend)
    } else {
        Ok(1)
    }
}

#[test]
fn sre_by_default_rejects_nearly_everything_after_many_failures() {
    clock();
    // the first call installs go-zero's breaker
    assert_eq!(backend(false), Ok(1));
    assert!(matches!(
        registry().breaker("b.default").unwrap(),
        Some(BreakerPolicy::Sre { .. })
    ));
    let mut rejected = 0;
    for _ in 0..1_000 {
        match backend(true) {
            Err(CallError::Unavailable(Reason::BreakerOpen)) => rejected += 1,
            Err(CallError::Backend) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(rejected > 900, "{rejected} of 1000 rejected");
    let s = registry().stats("b.default").unwrap();
    let b = s.breaker.unwrap();
    assert_eq!((b.kind, b.state), ("sre", BreakerState::Open));
    assert_eq!(
        s.totals.downgrades_by_reason.get(Reason::BreakerOpen),
        rejected
    );
    // business errors are returned unchanged and counted as exceptions
    assert_eq!(s.totals.exceptions, 1_000 - rejected);

    // after the window rolls over with successes it accepts again
    clock().advance(Duration::from_secs(11));
    for _ in 0..100 {
        assert_eq!(backend(false), Ok(1));
    }
    let b = registry().stats("b.default").unwrap().breaker.unwrap();
    assert_eq!(b.state, BreakerState::Closed);
}

fn cached(_fail: bool) -> Result<u32, CallError> {
    Ok(0)
}

#[breaker(point = "b.fallback", fallback = cached)]
fn with_fallback(fail: bool) -> Result<u32, CallError> {
    if fail {
        Err(CallError::Backend)
    } else {
        Ok(1)
    }
}

#[test]
fn fallback_runs_on_rejection_only() {
    clock();
    let config = ClassicConfig::builder()
        .consecutive_failures(3)
        .open_wait(Backoff::fixed(Duration::from_secs(5)))
        .half_open_probes(1)
        .build()
        .unwrap();
    registry()
        .set_breaker("b.fallback", BreakerPolicy::Classic(config))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(with_fallback(true), Err(CallError::Backend));
    }
    // open: the fallback answers
    assert_eq!(with_fallback(false), Ok(0));
    // after the wait one probe runs; it succeeds and closes the breaker
    clock().advance(Duration::from_secs(5));
    assert_eq!(with_fallback(false), Ok(1));
    assert_eq!(with_fallback(false), Ok(1));
    let b = registry().stats("b.fallback").unwrap().breaker.unwrap();
    assert_eq!(
        (b.kind, b.state, b.transitions),
        ("classic", BreakerState::Closed, 3)
    );
}

fn is_server_error(e: &CallError) -> bool {
    *e == CallError::Backend
}

#[breaker(point = "b.acceptable", is_exception = is_server_error, default = Ok(0))]
fn acceptable(code: u32) -> Result<u32, CallError> {
    if code >= 500 {
        Err(CallError::Backend)
    } else {
        Err(CallError::Unavailable(Reason::Visits))
    }
}

#[test]
fn acceptable_errors_count_as_successes() {
    clock();
    for _ in 0..200 {
        let _ = acceptable(404);
    }
    let b = registry().stats("b.acceptable").unwrap().breaker.unwrap();
    assert_eq!((b.window_successes, b.window_failures), (200, 0));
}

#[breaker(point = "b.probe", default = 0)]
fn probe(fail: bool) -> u32 {
    if fail {
        panic!("backend exploded");
    }
    1
}

#[test]
fn panics_are_failures_and_forced_probes_come_once_a_second() {
    clock();
    registry()
        .set_breaker(
            "b.probe",
            BreakerPolicy::Sre {
                config: SreConfig::builder()
                    .force_pass_interval(Duration::from_secs(1))
                    .build()
                    .unwrap(),
                slow_call: None,
            },
        )
        .unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for _ in 0..200 {
        let _ = std::panic::catch_unwind(|| probe(true));
    }
    std::panic::set_hook(hook);
    let s = registry().stats("b.probe").unwrap();
    assert!(s.breaker.unwrap().window_failures > 10);
    assert_eq!(s.concurrency, 0);
    // let one call through while dropping so forced probes can be paced from it
    let mut admitted = 0;
    for _ in 0..10_000 {
        admitted += probe(false);
        if admitted > 0 {
            break;
        }
    }
    assert_eq!(admitted, 1, "the dice let a call through eventually");
    // within the second nothing is forced (the odds are tiny but not zero: count only)
    clock().advance(Duration::from_millis(1001));
    let forced: u32 = (0..1).map(|_| probe(false)).sum();
    assert_eq!(forced, 1, "a forced probe after one second");
}

#[breaker(point = "b.slow", default = 0)]
fn slow(ms: u64) -> u32 {
    clock().advance(Duration::from_millis(ms));
    1
}

#[test]
fn latency_aware_sre_counts_slow_calls_as_failures() {
    clock();
    registry()
        .set_breaker(
            "b.slow",
            BreakerPolicy::Sre {
                config: SreConfig::default(),
                slow_call: Some(Duration::from_millis(100)),
            },
        )
        .unwrap();
    for _ in 0..3 {
        slow(150);
        slow(50);
    }
    let b = registry().stats("b.slow").unwrap().breaker.unwrap();
    assert_eq!((b.window_successes, b.window_failures), (3, 3));
}

#[test]
fn fewer_than_protection_calls_never_trip() {
    clock();
    let point = registry().point("b.protection").unwrap();
    registry()
        .set_breaker("b.protection", BreakerPolicy::default())
        .unwrap();
    for _ in 0..5 {
        point.enter().unwrap().finish(true);
    }
    // total 5 = protection: still accepted
    assert!(point.enter().is_ok());
}

#[test]
fn breaker_transitions_reach_the_listeners() {
    clock();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let id = registry().add_listener(move |e| {
        if e.point == "b.events" {
            let _ = tx
                .lock()
                .unwrap()
                .send((e.reason, e.breaker.map(|c| (c.from, c.to))));
        }
    });
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .half_open_probes(1)
        .open_wait(Backoff::fixed(Duration::from_secs(1)))
        .build()
        .unwrap();
    registry()
        .set_breaker("b.events", BreakerPolicy::Classic(config))
        .unwrap();
    let p = registry().point("b.events").unwrap();
    p.enter().unwrap().finish(true); // closed -> open
    assert_eq!(p.enter().unwrap_err().reason(), Reason::BreakerOpen);
    clock().advance(Duration::from_secs(1));
    p.enter().unwrap().finish(false); // open -> half-open -> closed
    let got: Vec<_> = (0..4)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
        .collect();
    use BreakerState::*;
    assert_eq!(
        got,
        [
            (Reason::BreakerOpen, Some((Closed, Open))),
            (Reason::BreakerOpen, None),
            (Reason::BreakerOpen, Some((Open, HalfOpen))),
            (Reason::BreakerOpen, Some((HalfOpen, Closed))),
        ]
    );
    registry().remove_listener(id);
}

#[test]
fn a_dropped_probe_frees_its_slot() {
    clock();
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .half_open_probes(1)
        .open_wait(Backoff::fixed(Duration::from_secs(1)))
        .build()
        .unwrap();
    registry()
        .set_breaker("b.cancel", BreakerPolicy::Classic(config))
        .unwrap();
    let p = registry().point("b.cancel").unwrap();
    p.enter().unwrap().finish(true);
    clock().advance(Duration::from_secs(1));
    let probe = p.enter().unwrap();
    assert!(p.enter().is_err(), "the only probe slot is taken");
    drop(probe); // a cancelled future
    assert!(p.enter().is_ok(), "the slot came back");
}

#[test]
fn disabled_breaker_and_invalid_settings() {
    clock();
    registry()
        .set_breaker("b.disabled", BreakerPolicy::Disabled)
        .unwrap();
    #[breaker(point = "b.disabled")]
    fn never_broken() -> Result<(), CallError> {
        Err(CallError::Backend)
    }
    for _ in 0..1_000 {
        assert_eq!(never_broken(), Err(CallError::Backend));
    }
    assert!(registry().stats("b.disabled").unwrap().breaker.is_none());

    assert_eq!(
        SreConfig::builder().k(f64::NAN).build().unwrap_err().field,
        "k"
    );
    // The fields stay public: the registry checks them again.
    let mut config = SreConfig::default();
    config.k = f64::NAN;
    let bad = BreakerPolicy::Sre {
        config,
        slow_call: None,
    };
    let err = registry().set_breaker("b.bad", bad).unwrap_err();
    assert!(err.to_string().contains("k"), "{err}");
    assert!(registry()
        .set_breaker("", BreakerPolicy::default())
        .is_err());
}

// Stacked: the attribute nearest the `fn` is the outer guard. Each guard has its own
// point; here the downgrade point limits visits, the breaker point tracks failures.
#[downgrade(point = "b.stack.limit", default = Ok(0))]
#[breaker(point = "b.stack.breaker", default = Ok(0))]
fn stacked(fail: bool) -> Result<u32, CallError> {
    if fail {
        Err(CallError::Backend)
    } else {
        Ok(1)
    }
}

#[test]
fn downgrade_and_breaker_stack() {
    clock();
    registry()
        .set_policy(
            "b.stack.limit",
            Policy::builder().max_visits(3).build().unwrap(),
        )
        .unwrap();
    for _ in 0..5 {
        let _ = stacked(false);
    }
    // the breaker (outer) saw all five; the downgrade point (inner) admitted three
    let outer = registry().stats("b.stack.breaker").unwrap();
    let inner = registry().stats("b.stack.limit").unwrap();
    assert_eq!(outer.totals.visits, 5);
    assert_eq!((inner.totals.visits, inner.totals.passes), (5, 3));
}

#[test]
fn a_point_can_have_both_a_policy_and_a_breaker() {
    clock();
    registry()
        .set_policy(
            "b.both",
            Policy::builder().max_concurrency(1).build().unwrap(),
        )
        .unwrap();
    registry()
        .set_breaker(
            "b.both",
            BreakerPolicy::Classic(
                ClassicConfig::builder()
                    .consecutive_failures(1)
                    .build()
                    .unwrap(),
            ),
        )
        .unwrap();
    let p = registry().point("b.both").unwrap();
    let held = p.enter().unwrap();
    // the concurrency rule trips first: the breaker never sees the call
    assert_eq!(p.enter().unwrap_err().reason(), Reason::Concurrency);
    held.finish(true);
    assert_eq!(p.enter().unwrap_err().reason(), Reason::BreakerOpen);
    assert_eq!(p.stats().concurrency, 0);
}
