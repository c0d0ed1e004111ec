//! With the `tracing` feature, each call of a `#[downgrade]` / `#[breaker]` fn runs in a
//! `resilience.call` span whose fields say the point, the outcome and, for a refused or
//! cut call, the reason. Checked through `tracing-subscriber`'s own formatter, writing
//! each span's close (with its fields) and each event (with its spans) to memory.

use resilience_runtime::{breaker, downgrade, registry, Downgraded, Policy};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `f` under a `fmt` subscriber and returns what it wrote, a line each.
fn traced(f: impl FnOnce()) -> Vec<String> {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    text.lines().map(str::to_owned).collect()
}

/// Runs `f` to completion on a current-thread runtime with timers, on this thread
/// (so under its subscriber).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

/// The close line of the call span of `point`, which must be exactly one.
fn closed<'a>(lines: &'a [String], point: &str) -> &'a str {
    let tag = format!("resilience.call{{point=\"{point}\"");
    let found: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(&tag) && l.contains(": close"))
        .collect();
    assert_eq!(found.len(), 1, "{point}: {lines:#?}");
    found[0]
}

/// An event `message` was written inside the call span of `point`.
fn assert_event_inside(lines: &[String], point: &str, message: &str) {
    let span = format!("resilience.call{{point=\"{point}\"}}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&span) && l.contains(message)),
        "{message} inside {span}: {lines:#?}"
    );
}

#[downgrade(point = "spans.sync", default = Ok(0))]
fn sync_call(fail: bool) -> Result<u32, String> {
    tracing::info!("inside the body");
    if fail {
        Err("boom".into())
    } else {
        Ok(1)
    }
}

#[downgrade(point = "spans.refused", fallback_with_reason = refused_fallback)]
fn refused_call() -> String {
    unreachable!("the point admits no call")
}

/// A caller's span with fields of the same names as a call span's.
fn request_span() -> tracing::Span {
    tracing::info_span!(
        "request",
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty
    )
}

/// The policy of `spans.refused`: no call passes.
fn refuse_every_call() {
    registry()
        .set_policy(
            "spans.refused",
            Policy::builder().max_visits(0).build().unwrap(),
        )
        .unwrap();
}

fn refused_fallback(why: Downgraded) -> String {
    why.reason().to_string()
}

#[downgrade(point = "spans.panics", default)]
fn panicking_call() -> u32 {
    panic!("a bug")
}

#[breaker(point = "spans.breaker")]
fn breaker_call() -> Result<u8, Downgraded> {
    Ok(2)
}

#[downgrade(point = "spans.async", default = 0)]
async fn async_call(wait: Duration) -> u32 {
    tokio::time::sleep(wait).await;
    tracing::info!("after the await");
    3
}

#[downgrade(point = "spans.cut", timeout = "5ms", default = 0)]
async fn cut_call() -> u32 {
    tokio::time::sleep(Duration::from_secs(5)).await;
    4
}

#[test]
fn sync_calls_record_their_outcome() {
    registry()
        .set_policy(
            "spans.refused",
            Policy::builder().max_visits(0).build().unwrap(),
        )
        .unwrap();
    let lines = traced(|| {
        assert_eq!(sync_call(false), Ok(1));
        assert_eq!(refused_call(), "visits");
        assert_eq!(breaker_call(), Ok(2));
        let panicked = std::panic::catch_unwind(panicking_call);
        assert!(panicked.is_err());
    });
    assert!(
        closed(&lines, "spans.sync").contains("outcome=\"ok\""),
        "{lines:#?}"
    );
    let refused = closed(&lines, "spans.refused");
    assert!(refused.contains("outcome=\"downgraded\""), "{refused}");
    assert!(refused.contains("reason=\"visits\""), "{refused}");
    assert!(closed(&lines, "spans.breaker").contains("outcome=\"ok\""));
    assert!(closed(&lines, "spans.panics").contains("outcome=\"panic\""));
    // The body's events are inside the call's span.
    assert_event_inside(&lines, "spans.sync", "inside the body");
}

#[test]
fn exceptions_are_outcomes_of_their_own() {
    let lines = traced(|| assert_eq!(sync_call(true), Err("boom".into())));
    assert!(closed(&lines, "spans.sync").contains("outcome=\"exception\""));
    assert!(!closed(&lines, "spans.sync").contains("reason="));
}

#[test]
fn async_calls_record_their_outcome_across_awaits() {
    let lines = traced(|| {
        block_on(async {
            assert_eq!(async_call(Duration::from_millis(1)).await, 3);
            assert_eq!(cut_call().await, 0);
            // Dropped after its first poll: cancelled.
            let call = async_call(Duration::from_secs(5));
            let dropped = tokio::time::timeout(Duration::from_millis(1), call).await;
            assert!(dropped.is_err());
        });
    });
    let found: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("resilience.call{point=\"spans.async\"") && l.contains(": close"))
        .collect();
    assert_eq!(found.len(), 2, "{lines:#?}");
    assert!(found[0].contains("outcome=\"ok\""), "{lines:#?}");
    assert!(found[1].contains("outcome=\"cancelled\""), "{lines:#?}");
    let cut = closed(&lines, "spans.cut");
    assert!(cut.contains("outcome=\"timeout\""), "{cut}");
    assert!(cut.contains("reason=\"deadline\""), "{cut}");
    assert_event_inside(&lines, "spans.async", "after the await");
}

#[test]
fn a_callers_span_is_the_parent_and_never_written_to() {
    let lines = traced(|| {
        let request = request_span();
        let _entered = request.enter();
        assert_eq!(sync_call(false), Ok(1));
        // A manual guard is not a generated call: it records into no span.
        let point = registry().point("spans.manual").unwrap();
        point.enter().unwrap().finish(true);
    });
    let call = closed(&lines, "spans.sync");
    assert!(call.contains("request:resilience.call"), "{call}");
    let request: Vec<&String> = lines
        .iter()
        .filter(|l| {
            l.contains("request") && l.contains(": close") && !l.contains("resilience.call")
        })
        .collect();
    assert_eq!(request.len(), 1, "{lines:#?}");
    assert!(!request[0].contains("outcome"), "{}", request[0]);
}

/// Starts a manual `call_async` of another point, polls it once and drops it.
#[downgrade(point = "spans.outer", default = 0)]
async fn drops_a_manual_call() -> u32 {
    let inner = registry().point("spans.manual_async").unwrap();
    let call = inner.call_async(
        || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<u32, ()>(1)
        },
        |_| async { Ok(0) },
    );
    let polled = tokio::time::timeout(Duration::from_millis(1), call).await;
    assert!(polled.is_err());
    5
}

#[test]
fn a_manual_call_cancelled_inside_is_not_the_calls_outcome() {
    let lines = traced(|| {
        assert_eq!(block_on(drops_a_manual_call()), 5);
    });
    let outer = closed(&lines, "spans.outer");
    assert!(outer.contains("outcome=\"ok\""), "{outer}");
    assert!(!outer.contains("cancelled"), "{outer}");
    let manual = registry().stats("spans.manual_async").unwrap().totals;
    assert_eq!(
        manual.cancelled, 1,
        "the manual call still counts its cancellation"
    );
}

#[test]
fn a_filtered_out_target_has_no_call_spans_and_its_callers_span_no_outcome() {
    use tracing_subscriber::filter::Targets;
    refuse_every_call();
    use tracing_subscriber::layer::SubscriberExt;
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_span_events(FmtSpan::CLOSE)
                .with_ansi(false)
                .without_time(),
        )
        .with(
            Targets::new()
                .with_target("resilience", tracing::Level::WARN)
                .with_default(tracing::Level::DEBUG),
        );
    tracing::subscriber::with_default(subscriber, || {
        let request = request_span();
        let _entered = request.enter();
        assert_eq!(sync_call(false), Ok(1));
        assert_eq!(refused_call(), "visits");
    });
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    assert!(!text.contains("resilience.call"), "{text}");
    assert!(
        text.contains("inside the body"),
        "the body's own events still: {text}"
    );
    assert!(text.contains("request"), "{text}");
    assert!(!text.contains("outcome="), "{text}");
}

#[test]
fn without_a_subscriber_calls_run_as_before() {
    assert_eq!(sync_call(false), Ok(1));
    assert_eq!(sync_call(true), Err("boom".into()));
}
