//! The `testing` module: registries of each test's own (isolation under parallel
//! threads and futures that move between threads), forced breaker states and
//! refusals (racing calls at 1 to 64 threads), and one clock for every rule (a paused
//! tokio runtime drives windows, breakers, deadlines, backoffs and hedges).

use resilience_runtime::breaker::{ClassicConfig, SreConfig};
use resilience_runtime::testing::{
    force_breaker, force_refusal, reset_breaker, ForceError, TestRegistry,
};
use resilience_runtime::{
    breaker, downgrade, registry, retry, BreakerPolicy, BreakerState, Clock, Downgraded,
    ManualClock, Policy, Reason,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

#[downgrade(point = "testing.shared", default = 0)]
fn shared_call() -> u32 {
    1
}

/// Runs `f` on `threads` threads at once, each with the index of its thread.
fn on_threads(threads: usize, f: impl Fn(usize) + Sync) {
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (f, start) = (&f, &start);
            s.spawn(move || {
                start.wait();
                f(t);
            });
        }
    });
}

// ------------------------------------------------------------------- isolation

/// Tests of one binary run in parallel threads: each with its own registry and its
/// own policy on the same point name, they never see each other's, nor the global
/// registry theirs.
#[test]
fn parallel_tests_on_one_point_name_see_only_their_own_registry() {
    for threads in [2, 8, 32] {
        on_threads(threads, |t| {
            let r = TestRegistry::new();
            let _scope = r.enter();
            // Even threads refuse every call; odd ones admit three in their window.
            let max = if t % 2 == 0 { 0 } else { 3 };
            r.set_policy(
                "testing.shared",
                Policy::builder().max_visits(max).build().unwrap(),
            )
            .unwrap();
            let passed: u32 = (0..100).map(|_| shared_call()).sum();
            assert_eq!(passed, max as u32, "thread {t}: its own limit only");
            let totals = r.stats("testing.shared").unwrap().totals;
            assert_eq!((totals.visits, totals.passes), (100, max), "thread {t}");
            assert!(
                std::ptr::eq(registry(), r.registry()),
                "registry() is scoped"
            );
        });
    }
    // The global registry saw none of it.
    assert!(resilience_runtime::testing::TestRegistry::new()
        .get("testing.shared")
        .is_none());
    let _ = shared_call();
    assert_eq!(
        registry().stats("testing.shared").unwrap().totals.visits,
        1,
        "outside every scope, the global registry"
    );
}

#[test]
fn scopes_nest_and_restore_even_through_a_panic() {
    let outer = TestRegistry::new();
    let inner = TestRegistry::new();
    let _o = outer.enter();
    inner.run(|| {
        assert!(std::ptr::eq(registry(), inner.registry()));
        let _ = shared_call();
    });
    assert!(std::ptr::eq(registry(), outer.registry()));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _i = inner.enter();
        panic!("a failing assertion inside the scope");
    }));
    assert!(caught.is_err());
    assert!(std::ptr::eq(registry(), outer.registry()), "restored");
    assert_eq!(inner.stats("testing.shared").unwrap().totals.visits, 1);
    assert!(outer.get("testing.shared").is_none());
}

#[downgrade(point = "testing.async", fallback = async_fallback)]
async fn async_call(wait: bool) -> u32 {
    if wait {
        tokio::task::yield_now().await;
    }
    1
}

async fn async_fallback(_wait: bool) -> u32 {
    0
}

/// Futures scoped to their own registries on a multi-threaded runtime: polled on
/// whichever worker, interleaved with each other, each call uses its own registry.
#[test]
fn scoped_futures_keep_their_registry_across_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let r = TestRegistry::new();
            r.set_policy(
                "testing.async",
                Policy::builder().max_visits(t % 4).build().unwrap(),
            )
            .unwrap();
            let task = r.scope(async move {
                let mut passed = 0;
                for _ in 0..10 {
                    passed += async_call(true).await;
                }
                passed
            });
            tasks.push((t, r, tokio::spawn(task)));
        }
        for (t, r, task) in tasks {
            assert_eq!(u64::from(task.await.unwrap()), t % 4, "task {t}");
            assert_eq!(r.stats("testing.async").unwrap().totals.visits, 10);
        }
    });
    assert!(registry().get("testing.async").is_none());
}

// --------------------------------------------------------------- forced refusals

#[downgrade(point = "testing.reasons", fallback_with_reason = reason_of)]
fn reasoned() -> String {
    "ran".to_owned()
}

fn reason_of(d: Downgraded) -> String {
    d.reason().as_str().to_owned()
}

#[test]
fn every_reason_can_be_forced_and_is_counted_as_that_rule() {
    let r = TestRegistry::new();
    let _scope = r.enter();
    for reason in Reason::ALL {
        force_refusal(&r, "testing.reasons", Some(reason)).unwrap();
        assert_eq!(reasoned(), reason.as_str());
    }
    force_refusal(&r, "testing.reasons", None).unwrap();
    assert_eq!(reasoned(), "ran");
    let totals = r.stats("testing.reasons").unwrap().totals;
    assert_eq!(totals.downgrades, Reason::ALL.len() as u64);
    for reason in Reason::ALL {
        assert_eq!(totals.downgrades_by_reason.get(reason), 1, "{reason}");
    }
    assert_eq!(
        force_refusal(&r, "testing.reasons", Some(Reason::Deadline)),
        Err(ForceError::NotARefusal)
    );
}

#[downgrade(point = "testing.queued", fallback_with_reason = reason_of)]
fn queued() -> String {
    "ran".to_owned()
}

/// A forced `QueueFull` under a policy with a queue is a refusal, not the queue's
/// signal to wait: sync and async calls return at once.
#[test]
fn a_forced_queue_full_does_not_wait() {
    let r = TestRegistry::new();
    let _scope = r.enter();
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(4, Duration::from_secs(3600))
        .build()
        .unwrap();
    r.set_policy("testing.queued", policy).unwrap();
    force_refusal(&r, "testing.queued", Some(Reason::QueueFull)).unwrap();
    assert_eq!(queued(), "queue_full");
    let point = r.point("testing.queued").unwrap();
    let refused = futures_executor::block_on(point.enter_async()).unwrap_err();
    assert_eq!(refused.reason(), Reason::QueueFull);
    force_refusal(&r, "testing.queued", None).unwrap();
    assert_eq!(queued(), "ran");
}

/// Forced refusals switched on and off while 1 to 64 threads call, and the policy
/// under them changes: no call is lost or counted twice, a call is refused only for
/// the forced reason or the policy's, and once the refusal is lifted calls pass.
#[test]
fn forced_refusals_racing_calls_and_policy_changes() {
    for threads in [1, 2, 8, 64] {
        let r = TestRegistry::new();
        let point = r.point("testing.race").unwrap();
        let (passed, refused) = (AtomicU64::new(0), AtomicU64::new(0));
        let calls_per_thread = 2_000;
        on_threads(threads + 1, |t| {
            if t == threads {
                // The switcher: forced refusal on and off, the policy changing.
                for i in 0..200u64 {
                    let reason = (i % 2 == 0).then_some(Reason::Exceptions);
                    force_refusal(&r, "testing.race", reason).unwrap();
                    let policy = Policy::builder()
                        .max_concurrency(1 + i % 8)
                        .build()
                        .unwrap();
                    r.set_policy("testing.race", policy).unwrap();
                    std::thread::yield_now();
                }
                force_refusal(&r, "testing.race", None).unwrap();
                return;
            }
            for _ in 0..calls_per_thread {
                match point.enter() {
                    Ok(permit) => {
                        passed.fetch_add(1, Ordering::Relaxed);
                        permit.finish(false);
                    }
                    Err(d) => {
                        assert!(
                            matches!(d.reason(), Reason::Exceptions | Reason::Concurrency),
                            "{d}"
                        );
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let totals = r.stats("testing.race").unwrap().totals;
        let calls = threads as u64 * calls_per_thread;
        assert_eq!(totals.visits, calls, "{threads} threads");
        assert_eq!(totals.passes, passed.load(Ordering::Relaxed));
        assert_eq!(totals.downgrades, refused.load(Ordering::Relaxed));
        assert_eq!(totals.passes + totals.downgrades, calls);
        assert!(point.enter().is_ok(), "lifted: calls pass again");
    }
}

// ---------------------------------------------------------------- forced breakers

fn classic_registry() -> (TestRegistry, ManualClock) {
    let clock = ManualClock::new();
    let r = TestRegistry::with_clock(Clock::manual(&clock));
    (r, clock)
}

#[test]
fn a_classic_breaker_forced_open_recovers_by_its_rules() {
    let (r, clock) = classic_registry();
    r.set_breaker(
        "testing.classic",
        BreakerPolicy::Classic(ClassicConfig::default()),
    )
    .unwrap();
    let point = r.point("testing.classic").unwrap();
    let state = || r.stats("testing.classic").unwrap().breaker.unwrap().state;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    r.add_breaker_listener(move |e| seen.lock().unwrap().push((e.change.from, e.change.to)));

    force_breaker(&r, "testing.classic", BreakerState::Open).unwrap();
    assert_eq!(state(), BreakerState::Open);
    assert_eq!(point.enter().unwrap_err().reason(), Reason::BreakerOpen);
    clock.advance(Duration::from_millis(4_999));
    assert!(point.enter().is_err(), "the default 5 s open wait");
    clock.advance(Duration::from_millis(1));
    for _ in 0..3 {
        point.enter().expect("a probe").finish(false);
    }
    assert_eq!(state(), BreakerState::Closed, "three probes succeeded");

    force_breaker(&r, "testing.classic", BreakerState::HalfOpen).unwrap();
    assert_eq!(state(), BreakerState::HalfOpen);
    let probes: Vec<_> = (0..3)
        .map(|_| point.enter().expect("a probe slot"))
        .collect();
    assert!(point.enter().is_err(), "three probe slots only");
    probes.into_iter().next().unwrap().finish(true);
    assert_eq!(state(), BreakerState::Open, "a failed probe reopens it");

    reset_breaker(&r, "testing.classic").unwrap();
    assert_eq!(state(), BreakerState::Closed);
    let b = r.stats("testing.classic").unwrap().breaker.unwrap();
    assert_eq!((b.window_successes, b.window_failures), (0, 0), "emptied");
    assert!(point.enter().is_ok());

    assert!(r.flush_listeners(Duration::from_secs(5)));
    let events = events.lock().unwrap().clone();
    assert_eq!(
        events[0],
        (BreakerState::Closed, BreakerState::Open),
        "{events:?}"
    );
    assert!(events.contains(&(BreakerState::Closed, BreakerState::HalfOpen)));
    assert_eq!(
        events.last(),
        Some(&(BreakerState::Open, BreakerState::Closed))
    );
}

#[test]
fn an_sre_breaker_forced_open_drops_and_has_no_half_open() {
    let (r, _clock) = classic_registry();
    r.set_breaker(
        "testing.sre",
        BreakerPolicy::Sre {
            config: SreConfig::default(),
            slow_call: None,
        },
    )
    .unwrap();
    let point = r.point("testing.sre").unwrap();
    let state = || r.stats("testing.sre").unwrap().breaker.unwrap().state;
    force_breaker(&r, "testing.sre", BreakerState::Open).unwrap();
    assert_eq!(state(), BreakerState::Open);
    let admitted = (0..1_000)
        .filter(|_| point.enter().map(|p| p.finish(false)).is_ok())
        .count();
    assert!(
        admitted <= 5,
        "drops nearly every call: {admitted} of 1000 admitted"
    );
    assert_eq!(
        force_breaker(&r, "testing.sre", BreakerState::HalfOpen),
        Err(ForceError::NoHalfOpen)
    );
    reset_breaker(&r, "testing.sre").unwrap();
    assert_eq!(state(), BreakerState::Closed);
    assert!((0..100).all(|_| point.enter().map(|p| p.finish(false)).is_ok()));

    assert_eq!(
        force_breaker(&r, "testing.none", BreakerState::Open),
        Err(ForceError::NoBreaker)
    );
    assert!(matches!(
        force_breaker(&r, " bad", BreakerState::Open),
        Err(ForceError::Name(_))
    ));
}

/// A classic breaker moved by hand while 1 to 64 threads call through it: no call is
/// lost, a half-open breaker never has more probes in flight than its slots, and the
/// breaker ends in the state last forced.
#[test]
fn forced_breaker_states_racing_calls() {
    for threads in [1, 2, 8, 64] {
        let (r, clock) = classic_registry();
        let config = ClassicConfig::builder()
            .consecutive_failures(5)
            .build()
            .unwrap();
        r.set_breaker("testing.force_race", BreakerPolicy::Classic(config))
            .unwrap();
        let point = r.point("testing.force_race").unwrap();
        let (ran, refused, probing, max_probing) = (
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
            AtomicU64::new(0),
        );
        // Set before the last reset: from then on calls only succeed, so that the
        // breaker's own rule (5 failures in a row, which 64 threads failing one call
        // in 7 can line up) cannot open it again after the reset.
        let forced = AtomicBool::new(false);
        on_threads(threads + 1, |t| {
            if t == threads {
                let states = [
                    BreakerState::Open,
                    BreakerState::HalfOpen,
                    BreakerState::Closed,
                ];
                for i in 0..300 {
                    force_breaker(&r, "testing.force_race", states[i % 3]).unwrap();
                    clock.advance(Duration::from_millis(7));
                    std::thread::yield_now();
                }
                forced.store(true, Ordering::SeqCst);
                reset_breaker(&r, "testing.force_race").unwrap();
                return;
            }
            for i in 0..1_000u64 {
                match point.enter() {
                    Ok(permit) => {
                        ran.fetch_add(1, Ordering::Relaxed);
                        let half_open = r
                            .stats("testing.force_race")
                            .unwrap()
                            .breaker
                            .unwrap()
                            .state
                            == BreakerState::HalfOpen;
                        if half_open {
                            let now = probing.fetch_add(1, Ordering::SeqCst) + 1;
                            max_probing.fetch_max(now, Ordering::SeqCst);
                        }
                        permit.finish(i % 7 == 0 && !forced.load(Ordering::SeqCst));
                        if half_open {
                            probing.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    Err(d) => {
                        assert_eq!(d.reason(), Reason::BreakerOpen);
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let totals = r.stats("testing.force_race").unwrap().totals;
        assert_eq!(totals.visits, threads as u64 * 1_000);
        assert_eq!(totals.passes, ran.load(Ordering::Relaxed));
        assert_eq!(totals.downgrades, refused.load(Ordering::Relaxed));
        // Calls that saw half-open may overlap calls admitted just before a forced
        // move (their epoch is gone), so the bound is the probe slots plus the threads
        // that could have been admitted in the old state: never unbounded.
        assert!(max_probing.load(Ordering::SeqCst) <= 3 + threads as u64);
        let b = r.stats("testing.force_race").unwrap().breaker.unwrap();
        assert_eq!(b.state, BreakerState::Closed, "{threads} threads");
        assert!(point.enter().is_ok());
    }
}

// ------------------------------------------------------------------- one clock

#[downgrade(point = "testing.slow", timeout = "100ms", default = "cut")]
async fn slow(d: Duration) -> &'static str {
    tokio::time::sleep(d).await;
    "done"
}

#[breaker(point = "testing.flaky", fallback = flaky_fallback)]
async fn flaky(fail: bool) -> Result<&'static str, String> {
    if fail {
        Err("down".into())
    } else {
        Ok("up")
    }
}

async fn flaky_fallback(_fail: bool) -> Result<&'static str, String> {
    Ok("fallback")
}

static ATTEMPTS: AtomicU64 = AtomicU64::new(0);

#[retry(
    attempts = 4,
    backoff = "exponential",
    base = "1s",
    max = "10s",
    jitter = "none"
)]
async fn retried() -> Result<u32, String> {
    if ATTEMPTS.fetch_add(1, Ordering::SeqCst) < 3 {
        Err("not yet".into())
    } else {
        Ok(7)
    }
}

/// Under a paused tokio runtime and a registry on tokio's clock, a deadline, a
/// breaker's open wait and a retry's backoffs all run in virtual time: minutes of
/// them take no real time, and each is exact to the virtual nanosecond.
#[test]
fn a_paused_runtime_drives_every_rule_in_virtual_time() {
    let real = std::time::Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let r = TestRegistry::with_clock(Clock::tokio(&tokio::runtime::Handle::current()));
        r.scope(async {
            // The deadline: cut at exactly 100 ms of virtual time.
            let t0 = tokio::time::Instant::now();
            assert_eq!(slow(Duration::from_secs(60)).await, "cut");
            assert_eq!(t0.elapsed(), Duration::from_millis(100));
            assert_eq!(slow(Duration::from_millis(99)).await, "done");
            let s = r.stats("testing.slow").unwrap().totals;
            assert_eq!((s.passes, s.timeouts), (2, 1));

            // A classic breaker: five failures open it for 30 s, then probes close it.
            let config = ClassicConfig::builder()
                .consecutive_failures(5)
                .open_wait(resilience_runtime::retry::Backoff::fixed(
                    Duration::from_secs(30),
                ))
                .half_open_probes(1)
                .build()
                .unwrap();
            r.set_breaker("testing.flaky", BreakerPolicy::Classic(config))
                .unwrap();
            for _ in 0..5 {
                assert!(flaky(true).await.is_err());
            }
            assert_eq!(flaky(false).await, Ok("fallback"), "open");
            tokio::time::sleep(Duration::from_secs(29)).await;
            assert_eq!(flaky(false).await, Ok("fallback"), "29 s: still open");
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert_eq!(
                flaky(false).await,
                Ok("up"),
                "30 s: a probe, which succeeds"
            );
            let b = r.stats("testing.flaky").unwrap().breaker.unwrap();
            assert_eq!(b.state, BreakerState::Closed);

            // Backoffs of 1 s, 2 s and 4 s between four attempts: 7 s, exactly.
            let t0 = tokio::time::Instant::now();
            assert_eq!(retried().await, Ok(7));
            assert_eq!(t0.elapsed(), Duration::from_secs(7));
        })
        .await;
    });
    assert!(
        real.elapsed() < Duration::from_secs(5),
        "no real sleeping: {:?}",
        real.elapsed()
    );
}
