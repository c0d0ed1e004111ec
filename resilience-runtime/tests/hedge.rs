//! `#[retry(hedge = "..")]` end to end on the global registry: most tests on tokio's
//! paused clock (hedge delays and latencies are tokio time), a couple in real time.

use resilience_runtime::retry::BudgetConfig;
use resilience_runtime::{downgrade, registry, retry, Downgraded, Policy, Reason};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::{sleep, Instant};

#[derive(Debug, Clone, PartialEq)]
enum AppError {
    Busy,
    Fatal,
    Down(Reason),
}

impl From<Downgraded> for AppError {
    fn from(d: Downgraded) -> Self {
        AppError::Down(d.reason())
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn retry_stats(point: &str) -> resilience_runtime::retry::RetryStats {
    registry().point(point).unwrap().retry_stats()
}

/// Sets a flag when dropped: an attempt's future was dropped (or ended).
struct OnDrop(&'static AtomicBool);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

// ---- the first attempt stalls, the hedge wins ----

static STALL: AtomicU32 = AtomicU32::new(0);
static STALL_DROPPED: AtomicBool = AtomicBool::new(false);

#[retry(attempts = 3, hedge = "30ms", budget = "hedge.stall")]
#[downgrade(point = "hedge.stall")]
async fn stall_then_win(id: String) -> Result<String, AppError> {
    let n = STALL.fetch_add(1, Ordering::SeqCst);
    if n == 0 {
        let _flag = OnDrop(&STALL_DROPPED);
        sleep(Duration::from_secs(10)).await;
    } else {
        sleep(ms(5)).await;
    }
    Ok(format!("{id}{n}"))
}

#[tokio::test(start_paused = true)]
async fn a_hedge_wins_and_the_stalled_attempt_is_cancelled() {
    let t0 = Instant::now();
    assert_eq!(stall_then_win("a".into()).await, Ok("a1".to_owned()));
    assert_eq!(t0.elapsed(), ms(35), "hedged at 30 ms, answered 5 ms later");
    assert!(
        STALL_DROPPED.load(Ordering::SeqCst),
        "dropped before the call returned"
    );
    assert_eq!(STALL.load(Ordering::SeqCst), 2, "one hedge only");
    let s = retry_stats("hedge.stall");
    assert_eq!(
        (s.calls, s.attempts, s.retries, s.hedges, s.cancelled),
        (1, 2, 0, 1, 1)
    );
    let p = registry().stats("hedge.stall").unwrap();
    assert_eq!(
        (p.totals.visits, p.totals.cancelled, p.totals.exceptions),
        (2, 1, 0)
    );
    let b = registry().retry_budget("hedge.stall").stats();
    assert_eq!(
        (b.calls, b.retries, b.refused),
        (1, 1, 0),
        "the hedge spent"
    );
}

// ---- no hedge when the first attempt answers in time ----

static QUICK: AtomicU32 = AtomicU32::new(0);

#[retry(point = "hedge.quick", attempts = 3, hedge = "30ms")]
async fn quick(wait: bool) -> Result<u32, AppError> {
    QUICK.fetch_add(1, Ordering::SeqCst);
    if wait {
        sleep(ms(29)).await;
    }
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn no_hedge_when_the_first_answers_before_the_delay() {
    let t0 = Instant::now();
    assert_eq!(quick(true).await, Ok(7));
    assert_eq!(quick(false).await, Ok(7));
    assert_eq!(t0.elapsed(), ms(29));
    assert_eq!(QUICK.load(Ordering::SeqCst), 2);
    let s = retry_stats("hedge.quick");
    assert_eq!((s.calls, s.attempts, s.hedges, s.cancelled), (2, 2, 0, 0));
}

// ---- hedges limited by attempts and by the budget ----

static SLOW: AtomicU32 = AtomicU32::new(0);

#[retry(point = "hedge.limit", attempts = 3, hedge = "10ms")]
async fn all_slow() -> Result<u32, AppError> {
    let n = SLOW.fetch_add(1, Ordering::SeqCst);
    sleep(ms(1000)).await;
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn hedges_stop_at_the_attempts_limit() {
    let t0 = Instant::now();
    // Attempts at 0, 10 and 20 ms; the first answers first.
    assert_eq!(all_slow().await, Ok(0));
    assert_eq!(t0.elapsed(), ms(1000));
    assert_eq!(SLOW.load(Ordering::SeqCst), 3);
    let s = retry_stats("hedge.limit");
    assert_eq!(
        (s.calls, s.attempts, s.hedges, s.cancelled, s.exhausted),
        (1, 3, 2, 2, 0)
    );
}

static POOR: AtomicU32 = AtomicU32::new(0);

#[retry(
    point = "hedge.poor",
    attempts = 5,
    hedge = "10ms",
    budget = "hedge.empty"
)]
async fn poor() -> Result<u32, AppError> {
    POOR.fetch_add(1, Ordering::SeqCst);
    sleep(ms(100)).await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_refuses_the_hedge() {
    let none = BudgetConfig::builder()
        .percent(0.0)
        .min_per_second(0)
        .window(Duration::from_secs(10))
        .build()
        .unwrap();
    registry().set_retry_budget("hedge.empty", none).unwrap();
    let t0 = Instant::now();
    assert_eq!(poor().await, Ok(1));
    assert_eq!(t0.elapsed(), ms(100));
    assert_eq!(POOR.load(Ordering::SeqCst), 1, "no hedge sent");
    let s = retry_stats("hedge.poor");
    assert_eq!(
        (s.attempts, s.hedges, s.refused_by_budget, s.cancelled),
        (1, 0, 1, 0),
        "asked once, not at every delay"
    );
    let b = registry().retry_budget("hedge.empty").stats();
    assert_eq!((b.calls, b.retries, b.refused), (1, 0, 1));
}

// ---- errors while another attempt runs ----

static ERRS: AtomicU32 = AtomicU32::new(0);

/// Attempt 0 fails after 50 ms; the hedge (at 10 ms) answers at 110 ms.
#[retry(point = "hedge.error", attempts = 3, hedge = "10ms")]
async fn fails_first() -> Result<u32, AppError> {
    let n = ERRS.fetch_add(1, Ordering::SeqCst);
    if n == 0 {
        sleep(ms(50)).await;
        Err(AppError::Busy)
    } else {
        sleep(ms(100)).await;
        Ok(n)
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_waits_for_the_attempts_still_running() {
    let t0 = Instant::now();
    assert_eq!(fails_first().await, Ok(1));
    // The third attempt was hedged at 20 ms: 1 answers at 110, 2 would at 120.
    assert_eq!(t0.elapsed(), ms(110));
    let s = retry_stats("hedge.error");
    assert_eq!(
        (s.attempts, s.retries, s.hedges, s.cancelled, s.exhausted),
        (3, 0, 2, 1, 0)
    );
}

static ROUNDS: AtomicU32 = AtomicU32::new(0);

/// Attempt 0 fails at 15 ms, attempt 1 (hedged at 10 ms) at 14 ms: none is left
/// running before the next hedge (20 ms), so after the backoff (100 ms) attempt 2, a
/// retry, answers.
#[retry(
    point = "hedge.rounds",
    attempts = 3,
    hedge = "10ms",
    backoff = "fixed",
    base = "100ms",
    jitter = "none",
    retry_if = is_busy
)]
async fn fails_twice() -> Result<u32, AppError> {
    let n = ROUNDS.fetch_add(1, Ordering::SeqCst);
    match n {
        0 => {
            sleep(ms(15)).await;
            Err(AppError::Busy)
        }
        1 => {
            sleep(ms(4)).await;
            Err(AppError::Busy)
        }
        _ => Ok(n),
    }
}

fn is_busy(e: &AppError) -> bool {
    *e == AppError::Busy
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_failed_the_retry_path_goes_on() {
    let t0 = Instant::now();
    assert_eq!(fails_twice().await, Ok(2));
    assert_eq!(t0.elapsed(), ms(115));
    let s = retry_stats("hedge.rounds");
    assert_eq!(
        (s.attempts, s.retries, s.hedges, s.cancelled, s.exhausted),
        (3, 1, 1, 0, 0)
    );
}

#[retry(point = "hedge.exhausted", attempts = 2, hedge = "10ms", base = "1ms")]
async fn always_busy() -> Result<u32, AppError> {
    sleep(ms(20)).await;
    Err(AppError::Busy)
}

#[retry(point = "hedge.fatal", attempts = 3, hedge = "10ms", retry_if = is_busy)]
async fn fatal_later() -> Result<u32, AppError> {
    sleep(ms(20)).await;
    Err(AppError::Fatal)
}

#[tokio::test(start_paused = true)]
async fn the_last_error_when_attempts_run_out_and_errors_not_to_retry_win() {
    assert_eq!(always_busy().await, Err(AppError::Busy));
    let s = retry_stats("hedge.exhausted");
    assert_eq!((s.attempts, s.hedges, s.retries, s.exhausted), (2, 1, 0, 1));
    // An error not to retry is an answer: it ends the call, the hedge is dropped.
    let t0 = Instant::now();
    assert_eq!(fatal_later().await, Err(AppError::Fatal));
    assert_eq!(t0.elapsed(), ms(20));
    let s = retry_stats("hedge.fatal");
    assert_eq!((s.attempts, s.hedges, s.cancelled), (2, 1, 1));
}

// ---- a downgrade ends the call at once ----

static LONE: AtomicU32 = AtomicU32::new(0);

async fn lone_fallback() -> Result<u32, AppError> {
    Ok(99)
}

/// One slot: the hedge is refused by the point while the first attempt holds it.
#[retry(attempts = 3, hedge = "30ms")]
#[downgrade(point = "hedge.down", fallback = lone_fallback)]
async fn one_slot() -> Result<u32, AppError> {
    LONE.fetch_add(1, Ordering::SeqCst);
    sleep(Duration::from_secs(5)).await;
    Ok(1)
}

#[tokio::test(start_paused = true)]
async fn a_downgraded_hedge_ends_the_call_at_once() {
    registry()
        .set_policy(
            "hedge.down",
            Policy::builder().max_concurrency(1).build().unwrap(),
        )
        .unwrap();
    let t0 = Instant::now();
    assert_eq!(one_slot().await, Ok(99));
    assert_eq!(t0.elapsed(), ms(30));
    assert_eq!(LONE.load(Ordering::SeqCst), 1, "the hedge never ran");
    let s = retry_stats("hedge.down");
    assert_eq!((s.attempts, s.hedges, s.cancelled, s.retries), (2, 1, 1, 0));
    let p = registry().stats("hedge.down").unwrap();
    assert_eq!(
        (p.totals.downgrades, p.totals.cancelled, p.concurrency),
        (1, 1, 0)
    );
}

// ---- a panic propagates ----

static PANICS: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, hedge = "10ms")]
#[downgrade(point = "hedge.panic")]
async fn panics_in_the_hedge() -> Result<u32, AppError> {
    if PANICS.fetch_add(1, Ordering::SeqCst) == 0 {
        sleep(Duration::from_secs(5)).await;
        Ok(0)
    } else {
        sleep(ms(1)).await;
        panic!("boom");
    }
}

#[tokio::test(start_paused = true)]
async fn a_panic_propagates_and_drops_the_others() {
    registry()
        .set_policy(
            "hedge.panic",
            Policy::builder().max_concurrency(10).build().unwrap(),
        )
        .unwrap();
    let joined = tokio::spawn(panics_in_the_hedge()).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(PANICS.load(Ordering::SeqCst), 2);
    let p = registry().stats("hedge.panic").unwrap();
    assert_eq!((p.totals.exceptions, p.concurrency), (1, 0));
    // The first attempt, dropped while unwinding: cancelled on the point.
    assert_eq!(p.totals.cancelled, 1);
}

// ---- percentile mode ----

static P95_WAIT: AtomicU32 = AtomicU32::new(10);
static P95_RUNS: AtomicU32 = AtomicU32::new(0);

/// Attempt 0 of each call waits `P95_WAIT` ms, hedges 5 ms.
#[retry(point = "hedge.p95", attempts = 2, hedge = "p95")]
async fn by_percentile(call: u32) -> Result<u32, AppError> {
    let first = P95_RUNS.fetch_add(1, Ordering::SeqCst) == call;
    if first {
        sleep(ms(u64::from(P95_WAIT.load(Ordering::SeqCst)))).await;
    } else {
        sleep(ms(5)).await;
    }
    Ok(u32::from(first))
}

#[tokio::test(start_paused = true)]
async fn a_percentile_hedges_only_after_twenty_samples_then_near_it() {
    // 19 calls of 10 ms and a slow one: no hedge before 20 samples.
    let mut runs = 0;
    for i in 0..20 {
        P95_WAIT.store(if i == 5 { 300 } else { 10 }, Ordering::SeqCst);
        let t0 = Instant::now();
        assert_eq!(by_percentile(runs).await, Ok(1), "call {i}");
        assert_eq!(t0.elapsed(), ms(u64::from(P95_WAIT.load(Ordering::SeqCst))));
        runs += 1;
    }
    assert_eq!(retry_stats("hedge.p95").hedges, 0);
    // p95 of {19 x 10 ms, 300 ms} is in the 10 ms bucket, [8.39 ms, 10.49 ms): the
    // delay is its upper bound. A slow first attempt is hedged then.
    P95_WAIT.store(200, Ordering::SeqCst);
    let t0 = Instant::now();
    assert_eq!(by_percentile(runs).await, Ok(0), "the hedge answers");
    let took = t0.elapsed();
    assert!(
        took >= ms(15) && took <= ms(17),
        "{took:?}: 10.49 ms + 5 ms"
    );
    let s = retry_stats("hedge.p95");
    assert_eq!((s.calls, s.hedges, s.cancelled), (21, 1, 1));
}

// ---- real time ----

static REAL: AtomicU32 = AtomicU32::new(0);

#[retry(point = "hedge.real", attempts = 2, hedge = "20ms")]
async fn real_stall() -> Result<u32, AppError> {
    let n = REAL.fetch_add(1, Ordering::SeqCst);
    sleep(if n.is_multiple_of(2) {
        ms(3_000)
    } else {
        ms(5)
    })
    .await;
    Ok(n % 2)
}

#[tokio::test]
async fn real_time_a_hedge_cuts_a_stall() {
    let t0 = std::time::Instant::now();
    assert_eq!(real_stall().await, Ok(1));
    let took = t0.elapsed();
    assert!(took >= ms(25) && took < ms(1_500), "{took:?}");
    assert_eq!(retry_stats("hedge.real").cancelled, 1);
}

#[retry(point = "hedge.real.quick", attempts = 2, hedge = "500ms")]
async fn real_quick() -> Result<u32, AppError> {
    sleep(ms(2)).await;
    Ok(1)
}

#[tokio::test]
async fn real_time_no_hedge_for_a_quick_answer() {
    let t0 = std::time::Instant::now();
    assert_eq!(real_quick().await, Ok(1));
    assert!(t0.elapsed() < ms(400), "{:?}", t0.elapsed());
    let s = retry_stats("hedge.real.quick");
    assert_eq!((s.attempts, s.hedges), (1, 0));
}

// ---- stress ----

static STRESS: AtomicU32 = AtomicU32::new(0);

async fn stress_fallback(_seed: u32) -> Result<u32, AppError> {
    Err(AppError::Fatal)
}

#[retry(attempts = 3, hedge = "1ms", backoff = "fixed", base = "1ms")]
#[downgrade(point = "hedge.stress", fallback = stress_fallback)]
async fn stressed(seed: u32) -> Result<u32, AppError> {
    let n = STRESS.fetch_add(1, Ordering::SeqCst);
    let mix = n.wrapping_mul(2_654_435_761) ^ seed;
    sleep(Duration::from_micros(u64::from(mix % 3_000))).await;
    if mix.is_multiple_of(7) {
        Err(AppError::Busy)
    } else {
        Ok(n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_many_hedged_calls_under_max_concurrency() {
    registry()
        .set_policy(
            "hedge.stress",
            Policy::builder().max_concurrency(16).build().unwrap(),
        )
        .unwrap();
    let calls = 2_000u32;
    let tasks: Vec<_> = (0..calls).map(|i| tokio::spawn(stressed(i))).collect();
    let mut answered = 0u64;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => answered += 1,
            Err(AppError::Fatal | AppError::Busy) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(answered > 0);
    let p = registry().stats("hedge.stress").unwrap();
    let s = p.retry;
    assert_eq!(p.concurrency, 0, "no permit leaked");
    assert_eq!(s.calls, u64::from(calls));
    assert_eq!(s.attempts, s.calls + s.retries + s.hedges, "{s:?}");
    assert!(s.hedges > 0 && s.cancelled > 0 && s.retries > 0, "{s:?}");
    assert!(
        p.totals.downgrades > 0,
        "the limit refused some: {:?}",
        p.totals
    );
    // Every attempt is a visit of the point; every attempt the retry dropped is a
    // cancelled call of the point, and the point saw no other cancellation.
    assert_eq!(p.totals.visits, s.attempts, "{s:?} {:?}", p.totals);
    assert_eq!(p.totals.cancelled, s.cancelled, "{s:?} {:?}", p.totals);
    assert_eq!(u64::from(STRESS.load(Ordering::SeqCst)), p.totals.passes);
    assert_eq!(p.totals.passes + p.totals.downgrades, p.totals.visits);
}

// ---- metrics ----

#[cfg(feature = "prometheus")]
#[tokio::test(start_paused = true)]
async fn metrics_carry_hedges_and_cancelled() {
    static FIRST: AtomicBool = AtomicBool::new(true);
    #[retry(point = "hedge.metrics", attempts = 2, hedge = "10ms")]
    async fn once() -> Result<u32, AppError> {
        let first = FIRST.swap(false, Ordering::SeqCst);
        sleep(if first { ms(1_000) } else { ms(1) }).await;
        Ok(1)
    }
    assert_eq!(once().await, Ok(1));
    let text = resilience_runtime::metrics::render();
    for (series, n) in [
        ("resilience_retry_calls_total", 1),
        ("resilience_retry_attempts_total", 2),
        ("resilience_retry_hedges_total", 1),
        ("resilience_retry_cancelled_total", 1),
    ] {
        let line = format!("{series}{{point=\"hedge.metrics\"}} {n}");
        assert!(text.lines().any(|l| l == line), "{line} missing");
    }
}

// ---- against a plain model ----

/// What each attempt of the model call does: (latency in ms, answers `Ok`).
static SCRIPT: std::sync::Mutex<Vec<(u64, bool)>> = std::sync::Mutex::new(Vec::new());
static SCRIPTED: AtomicU32 = AtomicU32::new(0);

#[retry(
    point = "hedge.model",
    attempts = 4,
    hedge = "10ms",
    backoff = "fixed",
    base = "7ms",
    jitter = "none"
)]
async fn scripted() -> Result<usize, usize> {
    let n = SCRIPTED.fetch_add(1, Ordering::SeqCst) as usize;
    let (latency, ok) = SCRIPT.lock().unwrap()[n];
    sleep(ms(latency)).await;
    if ok {
        Ok(n)
    } else {
        Err(n)
    }
}

/// The model: events in time order; at equal times answers before a hedge, and
/// attempts in the order they started. Returns the result, the time it took, and
/// (hedges, retries, cancelled, exhausted).
fn model(
    script: &[(u64, bool)],
    delay: u64,
    attempts: usize,
    backoff: u64,
) -> (Result<usize, usize>, u64, [u64; 4]) {
    let (mut t, mut started) = (0u64, 0usize);
    let mut counts = [0u64; 4];
    loop {
        let mut running = vec![(started, t + script[started].0)];
        started += 1;
        let mut last_start = t;
        let mut last_err = 0;
        while !running.is_empty() {
            let next_end = running.iter().map(|r| r.1).min().unwrap();
            if started < attempts && last_start + delay < next_end {
                t = last_start + delay;
                running.push((started, t + script[started].0));
                started += 1;
                counts[0] += 1;
                last_start = t;
                continue;
            }
            t = next_end;
            let mut i = 0;
            while i < running.len() {
                if running[i].1 != t {
                    i += 1;
                    continue;
                }
                let (n, _) = running.remove(i);
                if script[n].1 {
                    counts[2] += running.len() as u64;
                    return (Ok(n), t, counts);
                }
                last_err = n;
            }
        }
        if started >= attempts {
            counts[3] += 1;
            return (Err(last_err), t, counts);
        }
        counts[1] += 1;
        t += backoff;
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Random latencies and outcomes: the hedged call gives the model's answer, at
    /// the model's time, with the model's counts.
    #[test]
    fn matches_a_model(script in proptest::collection::vec((1u64..40, proptest::bool::weighted(0.6)), 4)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        *SCRIPT.lock().unwrap() = script.clone();
        SCRIPTED.store(0, Ordering::SeqCst);
        let before = retry_stats("hedge.model");
        let (out, took) = runtime.block_on(async {
            let t0 = Instant::now();
            let out = scripted().await;
            (out, t0.elapsed())
        });
        let s = retry_stats("hedge.model");
        let (want, want_took, [hedges, retries, cancelled, exhausted]) = model(&script, 10, 4, 7);
        proptest::prop_assert_eq!(out, want);
        proptest::prop_assert_eq!(took, ms(want_took));
        proptest::prop_assert_eq!(
            (s.hedges - before.hedges, s.retries - before.retries,
             s.cancelled - before.cancelled, s.exhausted - before.exhausted),
            (hedges, retries, cancelled, exhausted)
        );
        proptest::prop_assert_eq!(s.attempts - before.attempts, 1 + hedges + retries);
    }
}
