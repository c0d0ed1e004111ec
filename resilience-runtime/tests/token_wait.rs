//! Token buckets that wait (`PolicyBuilder::token_wait`) and pacing
//! (`PolicyBuilder::pacing`): reservations in arrival order, refusal at once past
//! the wait, the bound over the times calls run, on the manual clock and on real time.

use resilience_runtime::config::Format;
use resilience_runtime::{Clock, ManualClock, Policy, Reason, Registry};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn manual_registry() -> (ManualClock, &'static Registry) {
    let manual = ManualClock::new();
    let registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    (manual, registry)
}

#[test]
fn pacing_spaces_calls_uniformly_on_the_manual_clock() {
    let (manual, registry) = manual_registry();
    let policy = Policy::builder()
        .pacing(10.0, Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(policy.token_bucket().unwrap().capacity, 1);
    registry.set_policy("tw.pacing", policy).unwrap();
    let point = registry.point("tw.pacing").unwrap();
    let t0 = manual.now().as_nanos();
    let mut runs = Vec::new();
    for _ in 0..5 {
        let permit = point.enter().unwrap();
        runs.push((manual.now().as_nanos() - t0) / 1_000_000);
        permit.finish(false);
    }
    // One every 100 ms: the waits advanced the manual clock.
    assert_eq!(runs, [0, 100, 200, 300, 400]);
    let s = point.stats();
    assert_eq!((s.totals.passes, s.totals.downgrades), (5, 0));
}

#[test]
fn a_token_further_than_the_wait_is_refused_at_once() {
    let (manual, registry) = manual_registry();
    let policy = Policy::builder()
        .token_bucket(10.0, 2)
        .token_wait(Duration::from_millis(50))
        .build()
        .unwrap();
    registry.set_policy("tw.refuse", policy).unwrap();
    let point = registry.point("tw.refuse").unwrap();
    let t0 = manual.now().as_nanos();
    // Two tokens in the bucket; the third is 100 ms away, past the 50 ms allowed.
    point.enter().unwrap().finish(false);
    point.enter().unwrap().finish(false);
    assert_eq!(point.enter().unwrap_err().reason(), Reason::TokenBucket);
    assert_eq!(manual.now().as_nanos(), t0, "refused without waiting");
    // 60 ms later the next token is 40 ms away: that call waits for it.
    manual.advance(Duration::from_millis(60));
    point.enter().unwrap().finish(false);
    assert_eq!(manual.now().as_nanos() - t0, 100_000_000);
    let s = point.stats();
    assert_eq!(
        (
            s.totals.passes,
            s.totals.downgrades_by_reason.get(Reason::TokenBucket)
        ),
        (3, 1)
    );
}

#[test]
fn policy_files_read_and_check_the_wait() {
    let (_manual, registry) = manual_registry();
    registry
        .load_policies_str(
            "[points.\"tw.file\"]\ntoken_bucket = { rate = 5.0, capacity = 1, max_wait = \"2s\" }\n",
            Format::Toml,
        )
        .unwrap();
    let p = registry.policy("tw.file").unwrap().unwrap();
    assert_eq!(p.token_wait(), Some(Duration::from_secs(2)));
    let text = resilience_runtime::config::PolicyFile::parse(
        "[points.\"tw.file\"]\ntoken_bucket = { rate = 5.0, capacity = 1, max_wait = \"2s\" }\n",
        Format::Toml,
    )
    .unwrap()
    .to_text(Format::Toml)
    .unwrap();
    assert!(text.contains("max_wait = \"2s\""), "{text}");
    let err = registry
        .load_policies_str(
            "[points.\"tw.bad\"]\ntoken_bucket = { rate = 5.0, capacity = 1, max_wait = \"2h\" }\n",
            Format::Toml,
        )
        .unwrap_err();
    assert_eq!(
        err.problems()[0].field.as_deref(),
        Some("token_bucket.max_wait")
    );
    let err = Policy::builder()
        .token_wait(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(err.fields(), ["token_bucket.max_wait"]);
}

/// 8 threads ask a pacing point of 200 calls a second at once: the calls run no
/// closer than the bucket allows over any interval (with the timeline's millisecond
/// of slack), and none is refused (each waits at most 1 s).
#[test]
fn the_bound_holds_over_the_times_calls_run() {
    let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let policy = Policy::builder()
        .pacing(200.0, Duration::from_secs(1))
        .build()
        .unwrap();
    registry.set_policy("tw.bound", policy).unwrap();
    let point = registry.point("tw.bound").unwrap();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let runs = runs.clone();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let permit = point.enter().unwrap();
                    runs.lock().unwrap().push(t0.elapsed());
                    permit.finish(false);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut runs = runs.lock().unwrap().clone();
    runs.sort();
    assert_eq!(runs.len(), 80);
    // Any k consecutive runs span at least (k - 1 - 1) intervals of 5 ms, less 2 ms of
    // timeline slack: capacity 1 plus rate * t.
    for k in [2usize, 10, 40, 80] {
        for w in runs.windows(k) {
            let span = w[k - 1] - w[0];
            let allowed =
                Duration::from_millis(5 * (k as u64 - 2)).saturating_sub(Duration::from_millis(2));
            assert!(span >= allowed, "{k} runs within {span:?}");
        }
    }
    // 80 calls at 200 a second: the last ran after about 395 ms.
    assert!(runs[79] >= Duration::from_millis(380), "{:?}", runs[79]);
    assert_eq!(point.stats().totals.downgrades, 0);
}

#[cfg(feature = "tokio")]
#[test]
fn async_waiters_run_in_arrival_order() {
    let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let policy = Policy::builder()
        .pacing(100.0, Duration::from_secs(2))
        .build()
        .unwrap();
    registry.set_policy("tw.order", policy).unwrap();
    let point = registry.point("tw.order").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    runtime.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..12u32 {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let permit = point.enter_async().await.unwrap();
                order.lock().unwrap().push(i);
                permit.finish(false);
            }));
            // Arrivals 1 ms apart, the calls 10 ms apart: they queue on the bucket.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(*order.lock().unwrap(), (0..12).collect::<Vec<_>>());
}
