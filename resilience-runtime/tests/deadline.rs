//! `timeout = "..."` on async fns (feature `tokio`): a call still running at its
//! deadline is cut, counted as a pass and a timeout (and a breaker failure), and the
//! fallback takes over with `Reason::Deadline`; the policy's `call_timeout` overrides
//! the attribute.
//!
//! The first tests run on real timers (a few hundred milliseconds in all); the rest run
//! on tokio's paused clock, where a sleeping runtime jumps to its next timer, so they
//! are exact and instant. Every test has points of its own in the global registry.
#![cfg(feature = "tokio")]

use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::{
    breaker, downgrade, registry, BreakerPolicy, Downgraded, Policy, Reason, Totals,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, PartialEq)]
enum Error {
    Unavailable(Reason),
    Backend,
}

impl From<Downgraded> for Error {
    fn from(d: Downgraded) -> Self {
        Error::Unavailable(d.reason())
    }
}

fn totals(point: &str) -> Totals {
    registry().stats(point).expect("the point exists").totals
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// ---------------------------------------------------------------- real timers

async fn stale(_ms: u64) -> &'static str {
    "stale"
}

#[downgrade(point = "deadline.real", timeout = "100ms", fallback = stale)]
async fn real(ms: u64) -> &'static str {
    sleep_ms(ms).await;
    "fresh"
}

#[tokio::test]
async fn a_slow_call_is_cut_at_the_attribute_deadline() {
    let start = Instant::now();
    assert_eq!(real(1000).await, "stale");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(600),
        "cut after {took:?}, not at about 100 ms"
    );
    let t = totals("deadline.real");
    assert_eq!(
        (t.visits, t.passes, t.downgrades, t.timeouts, t.exceptions),
        (1, 1, 0, 1, 0),
        "{t:?}"
    );
    assert_eq!(t.downgrades_by_reason.total(), 0);
    // A call in time is not touched.
    assert_eq!(real(1).await, "fresh");
    assert_eq!(totals("deadline.real").timeouts, 1);
}

#[downgrade(point = "deadline.override", timeout = "10s", fallback = stale)]
async fn overridden(ms: u64) -> &'static str {
    sleep_ms(ms).await;
    "fresh"
}

#[tokio::test]
async fn the_policy_call_timeout_overrides_the_attribute() {
    let policy = Policy::builder()
        .call_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    registry().set_policy("deadline.override", policy).unwrap();
    let start = Instant::now();
    assert_eq!(overridden(1000).await, "stale");
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(600),
        "cut after {took:?}: the policy's 100 ms, not the attribute's 10 s"
    );
    let t = totals("deadline.override");
    assert_eq!((t.passes, t.downgrades, t.timeouts), (1, 0, 1), "{t:?}");
}

static BODIES: AtomicU32 = AtomicU32::new(0);

async fn unavailable(d: Downgraded) -> Result<u32, Error> {
    Err(Error::Unavailable(d.reason()))
}

#[breaker(point = "deadline.breaker", timeout = "50ms", fallback_with_reason = unavailable)]
async fn guarded() -> Result<u32, Error> {
    BODIES.fetch_add(1, Ordering::Relaxed);
    sleep_ms(1000).await;
    Ok(1)
}

#[tokio::test]
async fn a_classic_breaker_opens_after_three_cut_calls() {
    let classic = ClassicConfig::builder()
        .consecutive_failures(3)
        .build()
        .unwrap();
    registry()
        .set_breaker("deadline.breaker", BreakerPolicy::Classic(classic))
        .unwrap();
    for _ in 0..3 {
        assert_eq!(guarded().await, Err(Error::Unavailable(Reason::Deadline)));
    }
    // Open: refused without running the body.
    assert_eq!(
        guarded().await,
        Err(Error::Unavailable(Reason::BreakerOpen))
    );
    assert_eq!(BODIES.load(Ordering::Relaxed), 3);
    let stats = registry().stats("deadline.breaker").unwrap();
    let t = stats.totals;
    assert_eq!((t.passes, t.timeouts, t.downgrades), (3, 3, 1), "{t:?}");
    assert_eq!(t.downgrades_by_reason.get(Reason::BreakerOpen), 1);
}

async fn why(id: u32, d: Downgraded) -> String {
    format!("{id}: {} ({})", d.reason(), d)
}

#[downgrade(point = "deadline.reason", timeout = "50ms", fallback_with_reason = why)]
async fn explained(id: u32) -> String {
    sleep_ms(1000).await;
    id.to_string()
}

#[tokio::test]
async fn fallback_with_reason_receives_the_deadline_and_the_point() {
    assert_eq!(
        explained(7).await,
        "7: deadline (a call of point `deadline.reason` was cut at its deadline)"
    );
}

// ---------------------------------------------------------------- paused clock

#[downgrade(point = "deadline.paused", timeout = "100ms", default = u64::MAX)]
async fn sleeps(ms: u64) -> u64 {
    sleep_ms(ms).await;
    ms
}

#[tokio::test(start_paused = true)]
async fn the_deadline_is_exact_on_a_paused_clock() {
    let start = tokio::time::Instant::now();
    assert_eq!(sleeps(99).await, 99);
    assert_eq!(start.elapsed(), Duration::from_millis(99));
    let start = tokio::time::Instant::now();
    assert_eq!(sleeps(101).await, u64::MAX);
    assert_eq!(start.elapsed(), Duration::from_millis(100), "cut at 100 ms");
    let t = totals("deadline.paused");
    assert_eq!((t.passes, t.timeouts, t.downgrades), (2, 1, 0), "{t:?}");
}

#[downgrade(point = "deadline.changes", timeout = "1s")]
async fn changes(ms: u64) -> Result<u64, Error> {
    sleep_ms(ms).await;
    Ok(ms)
}

#[tokio::test(start_paused = true)]
async fn a_changed_call_timeout_applies_from_the_next_call() {
    // The attribute's second.
    assert_eq!(changes(500).await, Ok(500));
    let set = |ms| {
        let p = Policy::builder()
            .call_timeout(Duration::from_millis(ms))
            .build()
            .unwrap();
        registry().set_policy("deadline.changes", p).unwrap();
    };
    set(200);
    let point = registry().point("deadline.changes").unwrap();
    assert_eq!(point.call_timeout(), Some(Duration::from_millis(200)));
    let start = tokio::time::Instant::now();
    // No fallback: `Err(From<Downgraded>)` with the reason.
    assert_eq!(
        changes(500).await,
        Err(Error::Unavailable(Reason::Deadline))
    );
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    // Longer than the attribute's: the policy's wins both ways.
    set(5000);
    assert_eq!(changes(3000).await, Ok(3000));
    // Without a policy the attribute's is back.
    registry().clear_policy("deadline.changes").unwrap();
    assert_eq!(point.call_timeout(), None);
    assert_eq!(
        changes(3000).await,
        Err(Error::Unavailable(Reason::Deadline))
    );
    assert_eq!(totals("deadline.changes").timeouts, 2);
}

#[downgrade(point = "deadline.outcomes", timeout = "100ms")]
async fn outcome(ms: u64, fail: bool) -> Result<u64, Error> {
    sleep_ms(ms).await;
    if fail {
        Err(Error::Backend)
    } else {
        Ok(ms)
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_call_is_a_timeout_and_not_an_exception() {
    assert_eq!(outcome(10, true).await, Err(Error::Backend));
    assert_eq!(
        outcome(1000, true).await,
        Err(Error::Unavailable(Reason::Deadline))
    );
    let t = totals("deadline.outcomes");
    assert_eq!(
        (t.passes, t.exceptions, t.timeouts, t.downgrades),
        (2, 1, 1, 0),
        "{t:?}"
    );
}

#[downgrade(point = "deadline.slot", timeout = "100ms", default = 0)]
async fn one_at_a_time(ms: u64) -> u64 {
    sleep_ms(ms).await;
    ms
}

#[tokio::test(start_paused = true)]
async fn a_cut_call_releases_its_concurrency_slot() {
    let one = Policy::builder().max_concurrency(1).build().unwrap();
    registry().set_policy("deadline.slot", one).unwrap();
    for _ in 0..3 {
        assert_eq!(one_at_a_time(1000).await, 0);
    }
    // Every cut released its slot: the next call runs.
    assert_eq!(one_at_a_time(1).await, 1);
    let stats = registry().stats("deadline.slot").unwrap();
    assert_eq!(stats.concurrency, 0);
    let t = stats.totals;
    assert_eq!((t.passes, t.timeouts, t.downgrades), (4, 3, 0), "{t:?}");
    // While one runs, a second is refused (by the limit, not by a deadline), and the
    // refusal is a downgrade with its reason.
    let running = tokio::spawn(one_at_a_time(50));
    tokio::task::yield_now().await;
    assert_eq!(one_at_a_time(1).await, 0);
    assert_eq!(running.await.unwrap(), 50);
    let t = totals("deadline.slot");
    assert_eq!(t.downgrades_by_reason.get(Reason::Concurrency), 1, "{t:?}");
}

struct Client {
    base: String,
}

impl Client {
    async fn cached(&self, path: &str, _ms: u64, d: Downgraded) -> String {
        format!("cached {}{path} ({})", self.base, d.reason())
    }

    // The body borrows `path`: the fallback gets it after the cut.
    #[downgrade(point = "deadline.method", timeout = "250ms", fallback_with_reason = Self::cached)]
    async fn get(&self, path: &str, ms: u64) -> String {
        sleep_ms(ms).await;
        format!("{}{path}", self.base)
    }
}

#[tokio::test(start_paused = true)]
async fn methods_are_cut_and_fall_back_with_their_arguments() {
    let client = Client {
        base: "http://x".into(),
    };
    assert_eq!(client.get("/a", 10).await, "http://x/a");
    assert_eq!(client.get("/a", 300).await, "cached http://x/a (deadline)");
    // The future of a timed call is still `Send`, for multi-threaded runtimes.
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&client.get("/", 0));
}

#[downgrade(point = "deadline.threads", timeout = "100ms", fallback = stale)]
async fn threaded(ms: u64) -> &'static str {
    sleep_ms(ms).await;
    "fresh"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_a_multi_threaded_runtime_are_cut_too() {
    let calls: Vec<_> = (0..8)
        .map(|i| tokio::spawn(threaded(if i % 2 == 0 { 1 } else { 1000 })))
        .collect();
    let mut stale = 0;
    for call in calls {
        if call.await.unwrap() == "stale" {
            stale += 1;
        }
    }
    assert_eq!(stale, 4);
    let t = totals("deadline.threads");
    assert_eq!((t.passes, t.timeouts, t.downgrades), (8, 4, 0), "{t:?}");
}

// ------------------------------------------------------------------ stress

#[downgrade(point = "deadline.stress", timeout = "4ms")]
async fn stressed(ms: u64, fail: bool) -> Result<u64, Error> {
    sleep_ms(ms).await;
    if fail {
        Err(Error::Backend)
    } else {
        Ok(ms)
    }
}

/// 1, 8 and 64 tasks on a two-thread runtime call a `timeout = "4ms"` fn under
/// `max_concurrency` (swapped between 3 and 6 meanwhile); callers also drop calls with
/// `tokio::time::timeout`. Every call ends one way, and the counts add up exactly:
/// visits = passes + downgrades, passes = successes + exceptions + cancelled + cut
/// (timeouts), and no slot is left taken.
#[test]
fn many_cut_and_dropped_calls_under_a_concurrency_limit_add_up() {
    let name = "deadline.stress";
    let limit = |n| Policy::builder().max_concurrency(n).build().unwrap();
    registry().set_policy(name, limit(6)).unwrap();
    for tasks in [1u64, 8, 64] {
        let before = totals(name);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let outcomes = runtime.block_on(async move {
            let swapper = tokio::spawn(async move {
                for i in 0..40u32 {
                    registry()
                        .set_policy(name, limit(if i % 2 == 0 { 3 } else { 6 }))
                        .unwrap();
                    sleep_ms(1).await;
                }
            });
            let workers: Vec<_> = (0..tasks)
                .map(|t| {
                    tokio::spawn(async move {
                        // [successes, exceptions, cut, refused, dropped]
                        let mut seen = [0u64; 5];
                        let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                        for _ in 0..25 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let (ms, fail, patience) = (x % 7, x % 5 == 0, 1 + (x >> 8) % 8);
                            let call = stressed(ms, fail);
                            match tokio::time::timeout(Duration::from_millis(patience), call).await
                            {
                                Ok(Ok(_)) => seen[0] += 1,
                                Ok(Err(Error::Backend)) => seen[1] += 1,
                                Ok(Err(Error::Unavailable(Reason::Deadline))) => seen[2] += 1,
                                Ok(Err(Error::Unavailable(_))) => seen[3] += 1,
                                Err(_elapsed) => seen[4] += 1,
                            }
                        }
                        seen
                    })
                })
                .collect();
            let mut all = [0u64; 5];
            for w in workers {
                let seen = w.await.unwrap();
                for (a, s) in all.iter_mut().zip(seen) {
                    *a += s;
                }
            }
            swapper.await.unwrap();
            all
        });
        drop(runtime);
        let now = totals(name);
        let d = |f: fn(&Totals) -> u64| f(&now) - f(&before);
        let [ok, failed, cut, refused, dropped] = outcomes;
        assert_eq!(ok + failed + cut + refused + dropped, tasks * 25);
        if tasks == 64 {
            assert!(
                outcomes.iter().all(|n| *n > 0),
                "every way to end: {outcomes:?}"
            );
        }
        assert_eq!(d(|t| t.visits), tasks * 25, "{tasks} tasks");
        assert_eq!(
            d(|t| t.visits),
            d(|t| t.passes) + d(|t| t.downgrades),
            "{tasks}"
        );
        assert_eq!(d(|t| t.downgrades), refused, "{tasks}: {outcomes:?}");
        assert_eq!(d(|t| t.exceptions), failed, "{tasks}: {outcomes:?}");
        assert_eq!(d(|t| t.cancelled), dropped, "{tasks}: {outcomes:?}");
        assert_eq!(d(|t| t.timeouts), cut, "{tasks}: {outcomes:?}");
        assert_eq!(
            d(|t| t.passes),
            ok + failed + dropped + cut,
            "{tasks}: {outcomes:?}"
        );
        let stats = registry().stats(name).unwrap();
        assert_eq!(stats.concurrency, 0, "{tasks}: a slot leaked");
        assert!(stats.peak_concurrency <= 6, "{tasks}");
    }
}
