//! `#[retry]` end to end on the global registry (system clock): sync fns sleep their
//! (tiny) backoffs, async fns sleep on tokio's paused clock.

use resilience_runtime::{downgrade, registry, retry, Downgraded, Policy, Reason};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

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

fn is_transient(e: &AppError) -> bool {
    matches!(e, AppError::Busy)
}

fn retry_stats(point: &str) -> resilience_runtime::retry::RetryStats {
    registry().point(point).unwrap().retry_stats()
}

fn kill(name: &str) {
    registry()
        .set_policy(name, Policy::builder().max_visits(0).build().unwrap())
        .unwrap();
}

// ---- sync ----

static FLAKY: AtomicU32 = AtomicU32::new(0);

/// Busy twice, then the answer.
#[retry(
    point = "rm.flaky",
    attempts = 3,
    backoff = "fixed",
    base = "1ms",
    jitter = "none"
)]
fn flaky(x: u32, label: String) -> Result<u32, AppError> {
    assert_eq!(label, "x");
    if FLAKY.fetch_add(1, Ordering::SeqCst) < 2 {
        Err(AppError::Busy)
    } else {
        Ok(x * 2)
    }
}

#[test]
fn retries_until_success() {
    assert_eq!(flaky(21, "x".to_owned()), Ok(42));
    assert_eq!(FLAKY.load(Ordering::SeqCst), 3);
    let s = retry_stats("rm.flaky");
    assert_eq!((s.calls, s.attempts, s.retries, s.exhausted), (1, 3, 2, 0));
}

static MADE: AtomicU32 = AtomicU32::new(0);

/// `#[retry]` from a declarative macro: its fragments reach the attribute wrapped in
/// invisible groups, and read as if written by hand.
macro_rules! retried {
    ($name:ident -> $ret:ty $body:block, $point:literal, $attempts:literal, $retry_if:path) => {
        #[retry(point = $point, attempts = $attempts, base = "1ms", retry_if = $retry_if)]
        fn $name() -> $ret $body
    };
}

retried!(
    made_by_a_macro -> Result<u32, AppError> {
        if MADE.fetch_add(1, Ordering::SeqCst) < 3 {
            Err(AppError::Busy)
        } else {
            Ok(7)
        }
    },
    "rm.macro_rules",
    4,
    is_transient
);

#[test]
fn an_attribute_inside_a_declarative_macro_works_as_written_by_hand() {
    assert_eq!(made_by_a_macro(), Ok(7));
    assert_eq!(MADE.load(Ordering::SeqCst), 4);
    let s = retry_stats("rm.macro_rules");
    assert_eq!((s.calls, s.attempts, s.retries), (1, 4, 3));
}

static ALWAYS: AtomicU32 = AtomicU32::new(0);

#[retry(
    point = "rm.always",
    attempts = 4,
    base = "1ms",
    max = "2ms",
    multiplier = 1.5
)]
fn always_busy() -> Result<(), AppError> {
    ALWAYS.fetch_add(1, Ordering::SeqCst);
    Err(AppError::Busy)
}

#[test]
fn exhausted_returns_the_last_error() {
    assert_eq!(always_busy(), Err(AppError::Busy));
    assert_eq!(ALWAYS.load(Ordering::SeqCst), 4);
    let s = retry_stats("rm.always");
    assert_eq!((s.calls, s.attempts, s.retries, s.exhausted), (1, 4, 3, 1));
}

static FATAL: AtomicU32 = AtomicU32::new(0);

#[retry(point = "rm.fatal", attempts = 5, base = "1ms", retry_if = is_transient)]
fn fatal() -> Result<(), AppError> {
    FATAL.fetch_add(1, Ordering::SeqCst);
    Err(AppError::Fatal)
}

#[test]
fn retry_if_declines() {
    assert_eq!(fatal(), Err(AppError::Fatal));
    assert_eq!(FATAL.load(Ordering::SeqCst), 1);
    let s = retry_stats("rm.fatal");
    assert_eq!((s.calls, s.attempts, s.retries), (1, 1, 0));
}

static PANICS: AtomicU32 = AtomicU32::new(0);

#[retry(point = "rm.panics", attempts = 5, base = "1ms")]
fn panics() -> Result<(), AppError> {
    PANICS.fetch_add(1, Ordering::SeqCst);
    panic!("boom");
}

#[test]
fn a_panic_is_not_retried() {
    assert!(std::panic::catch_unwind(panics).is_err());
    assert_eq!(PANICS.load(Ordering::SeqCst), 1);
    assert_eq!(retry_stats("rm.panics").retries, 0);
}

// Above a `#[downgrade]`: each attempt is a call of the point; a downgrade ends it.
static ABOVE_RUNS: AtomicU32 = AtomicU32::new(0);
static ABOVE_FALLBACKS: AtomicU32 = AtomicU32::new(0);

fn busy_fallback() -> Result<u32, AppError> {
    ABOVE_FALLBACKS.fetch_add(1, Ordering::SeqCst);
    // An error `retry_if` would choose: only the mark stops the retry.
    Err(AppError::Busy)
}

#[retry(attempts = 5, base = "1ms")]
#[downgrade(point = "rm.above", fallback = busy_fallback)]
fn above() -> Result<u32, AppError> {
    ABOVE_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(AppError::Busy)
}

#[test]
fn stacked_above_a_downgrade_never_retries_the_downgrade() {
    // No policy yet: every attempt runs, fails and is retried.
    assert_eq!(above(), Err(AppError::Busy));
    assert_eq!(ABOVE_RUNS.load(Ordering::SeqCst), 5);
    let t = registry().stats("rm.above").unwrap().totals;
    assert_eq!((t.visits, t.exceptions), (5, 5));

    kill("rm.above");
    assert_eq!(above(), Err(AppError::Busy));
    assert_eq!(ABOVE_RUNS.load(Ordering::SeqCst), 5, "the body did not run");
    assert_eq!(
        ABOVE_FALLBACKS.load(Ordering::SeqCst),
        1,
        "one attempt, downgraded"
    );
    let s = retry_stats("rm.above");
    assert_eq!((s.calls, s.attempts, s.retries), (2, 6, 4));
    assert_eq!(registry().stats("rm.above").unwrap().totals.downgrades, 1);
}

// Below a `#[downgrade]`: the point sees one call; the retries run inside it.
static BELOW_RUNS: AtomicU32 = AtomicU32::new(0);

#[downgrade(point = "rm.below", default = Err(AppError::Fatal))]
#[retry(point = "rm.below", attempts = 3, base = "1ms")]
fn below() -> Result<u32, AppError> {
    BELOW_RUNS.fetch_add(1, Ordering::SeqCst);
    Err(AppError::Busy)
}

#[test]
fn stacked_below_a_downgrade_retries_inside_one_call() {
    assert_eq!(below(), Err(AppError::Busy));
    assert_eq!(BELOW_RUNS.load(Ordering::SeqCst), 3);
    let s = registry().stats("rm.below").unwrap();
    assert_eq!((s.totals.visits, s.totals.exceptions), (1, 1));
    assert_eq!((s.retry.calls, s.retry.attempts), (1, 3));

    kill("rm.below");
    assert_eq!(below(), Err(AppError::Fatal));
    assert_eq!(
        BELOW_RUNS.load(Ordering::SeqCst),
        3,
        "downgraded before any attempt"
    );
    assert_eq!(retry_stats("rm.below").calls, 1);
}

#[retry(
    point = "rm.budget",
    attempts = 100,
    backoff = "fixed",
    base = "1ns",
    budget = "rm.shared"
)]
fn budgeted() -> Result<(), AppError> {
    Err(AppError::Busy)
}

#[test]
fn the_budget_refuses_retries() {
    for _ in 0..5 {
        assert_eq!(budgeted(), Err(AppError::Busy));
    }
    let s = retry_stats("rm.budget");
    assert_eq!(s.calls, 5);
    assert!(s.refused_by_budget >= 1, "{s:?}");
    assert_eq!(s.exhausted + s.refused_by_budget, 5, "{s:?}");
    assert_eq!(s.attempts, s.calls + s.retries, "{s:?}");
    assert!(registry().retry_budget("rm.shared").stats() != Default::default());
}

// Arguments: references are reborrowed, owned values cloned per attempt.
static ARGS: AtomicU32 = AtomicU32::new(0);

#[retry(point = "rm.args", attempts = 2, base = "1ms")]
fn arguments(
    name: &str,
    out: &mut Vec<String>,
    mut owned: Vec<u8>,
    (a, b): (u8, u8),
) -> Result<usize, AppError> {
    owned.push(a + b);
    out.push(format!("{name}{}", owned.len()));
    if ARGS.fetch_add(1, Ordering::SeqCst) == 0 {
        Err(AppError::Busy)
    } else {
        Ok(owned.len())
    }
}

#[test]
fn each_attempt_gets_fresh_arguments() {
    let mut out = Vec::new();
    assert_eq!(arguments("n", &mut out, vec![1], (1, 2)), Ok(2));
    assert_eq!(out, ["n2", "n2"]);
}

// ---- async ----

static ASYNC_FLAKY: AtomicU32 = AtomicU32::new(0);

#[retry(point = "rm.async", attempts = 3, base = "1s", jitter = "none")]
async fn async_flaky(id: String) -> Result<String, AppError> {
    tokio::task::yield_now().await;
    if ASYNC_FLAKY.fetch_add(1, Ordering::SeqCst) < 2 {
        Err(AppError::Busy)
    } else {
        Ok(id)
    }
}

#[tokio::test(start_paused = true)]
async fn async_retries_wait_their_backoff() {
    let t0 = tokio::time::Instant::now();
    assert_eq!(async_flaky("a".into()).await, Ok("a".to_owned()));
    // 1 s, then 2 s.
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    let s = retry_stats("rm.async");
    assert_eq!((s.calls, s.attempts, s.retries), (1, 3, 2));
}

static ASYNC_EXHAUSTED: AtomicU32 = AtomicU32::new(0);

#[retry(point = "rm.async.exhausted", attempts = 2, base = "10ms", retry_if = is_transient)]
async fn async_exhausted(fatal: bool) -> Result<(), AppError> {
    ASYNC_EXHAUSTED.fetch_add(1, Ordering::SeqCst);
    Err(if fatal {
        AppError::Fatal
    } else {
        AppError::Busy
    })
}

#[tokio::test(start_paused = true)]
async fn async_exhausted_and_declined() {
    assert_eq!(async_exhausted(false).await, Err(AppError::Busy));
    assert_eq!(ASYNC_EXHAUSTED.load(Ordering::SeqCst), 2);
    assert_eq!(async_exhausted(true).await, Err(AppError::Fatal));
    assert_eq!(ASYNC_EXHAUSTED.load(Ordering::SeqCst), 3);
    let s = retry_stats("rm.async.exhausted");
    assert_eq!((s.calls, s.attempts, s.exhausted), (2, 3, 1));
}

static ASYNC_ABOVE_RUNS: AtomicU32 = AtomicU32::new(0);

async fn async_busy_fallback() -> Result<u32, AppError> {
    tokio::task::yield_now().await;
    Err(AppError::Busy)
}

#[retry(attempts = 4, base = "10ms")]
#[downgrade(point = "rm.async.above", fallback = async_busy_fallback)]
async fn async_above() -> Result<u32, AppError> {
    ASYNC_ABOVE_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Err(AppError::Busy)
}

#[tokio::test(start_paused = true)]
async fn async_stacked_above_a_downgrade() {
    kill("rm.async.above");
    assert_eq!(async_above().await, Err(AppError::Busy));
    assert_eq!(ASYNC_ABOVE_RUNS.load(Ordering::SeqCst), 0);
    let s = retry_stats("rm.async.above");
    assert_eq!((s.calls, s.attempts, s.retries), (1, 1, 0));
}

// Marks do not leak between tasks on a multi-thread runtime: tasks whose attempts
// are downgraded interleave with tasks whose attempts fail and must be retried.
static MT_RUNS: AtomicU32 = AtomicU32::new(0);

#[retry(attempts = 3, backoff = "fixed", base = "1ms")]
#[downgrade(point = "rm.mt.down", fallback = async_busy_fallback)]
async fn mt_downgraded() -> Result<u32, AppError> {
    Ok(0)
}

#[retry(attempts = 3, backoff = "fixed", base = "1ms")]
#[downgrade(point = "rm.mt.up", default = Ok(0))]
async fn mt_failing() -> Result<u32, AppError> {
    MT_RUNS.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Err(AppError::Busy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn downgrade_marks_do_not_leak_between_tasks() {
    kill("rm.mt.down");
    let n = 200u32;
    let mut tasks = Vec::new();
    for i in 0..n {
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                mt_downgraded().await
            } else {
                mt_failing().await
            }
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), Err(AppError::Busy));
    }
    assert_eq!(MT_RUNS.load(Ordering::SeqCst), 3 * n / 2);
    let down = retry_stats("rm.mt.down");
    assert_eq!(
        (down.calls, down.attempts),
        (u64::from(n / 2), u64::from(n / 2))
    );
    let up = retry_stats("rm.mt.up");
    assert_eq!(
        (up.calls, up.attempts),
        (u64::from(n / 2), u64::from(3 * n / 2))
    );
}
