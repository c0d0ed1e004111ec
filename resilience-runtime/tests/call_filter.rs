//! `Point::call_with` / `call_async_with`: an exception filter like the macros'
//! `is_exception`, exact under many threads, and seen by the breaker.

use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::retry::Backoff;
use resilience_runtime::{registry, BreakerPolicy, BreakerState, Policy};
use std::time::Duration;

#[test]
fn only_the_errors_the_filter_chooses_are_exceptions_under_many_threads() {
    for threads in [1u64, 4, 16, 64] {
        let name: &'static str = Box::leak(format!("filter.threads.{threads}").into_boxed_str());
        registry()
            .set_policy(
                name,
                Policy::builder().max_concurrency(1_000).build().unwrap(),
            )
            .unwrap();
        let point = registry().point(name).unwrap();
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        // Every call fails; one in five is a "server" error.
                        let code = if (i + t) % 5 == 0 { 500 } else { 404 };
                        let out =
                            point.call_with(|| Err::<(), u16>(code), |_| Ok(()), |c| *c >= 500);
                        assert_eq!(out, Err(code));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let totals = point.stats().totals;
        assert_eq!(totals.passes, threads * 500, "{threads}");
        assert_eq!(totals.exceptions, threads * 100, "{threads}");
    }
}

#[test]
fn a_breaker_sees_only_the_chosen_errors() {
    let name = "filter.breaker";
    registry()
        .set_breaker(
            name,
            BreakerPolicy::Classic(
                ClassicConfig::builder()
                    .consecutive_failures(3)
                    .open_wait(Backoff::fixed(Duration::from_secs(60)))
                    .build()
                    .unwrap(),
            ),
        )
        .unwrap();
    let point = registry().point(name).unwrap();
    for _ in 0..10 {
        let out = point.call_with(
            || Err::<(), _>("not found"),
            |_| Ok(()),
            |e| *e != "not found",
        );
        assert_eq!(out, Err("not found"));
    }
    assert_eq!(
        registry().stats(name).unwrap().breaker.unwrap().state,
        BreakerState::Closed
    );
    for _ in 0..3 {
        let _ = point.call_with(|| Err::<(), _>("boom"), |_| Ok(()), |e| *e != "not found");
    }
    assert_eq!(
        registry().stats(name).unwrap().breaker.unwrap().state,
        BreakerState::Open
    );
    // Open: the fallback runs.
    let out = point.call_with(|| Err::<u8, _>("boom"), |_| Ok(7), |_| true);
    assert_eq!(out, Ok(7));
}

#[test]
fn the_async_form_filters_too_and_a_panic_is_always_an_exception() {
    let name = "filter.async";
    registry()
        .set_policy(name, Policy::builder().build().unwrap())
        .unwrap();
    let point = registry().point(name).unwrap();
    let out = futures_executor::block_on(point.call_async_with(
        || async { Err::<(), u16>(404) },
        |_| async { Ok(()) },
        |c| *c >= 500,
    ));
    assert_eq!(out, Err(404));
    let out = futures_executor::block_on(point.call_async_with(
        || async { Err::<(), u16>(503) },
        |_| async { Ok(()) },
        |c| *c >= 500,
    ));
    assert_eq!(out, Err(503));
    let panicked = std::panic::catch_unwind(|| {
        point.call_with(
            || -> Result<(), u16> { panic!("boom") },
            |_| Ok(()),
            |_| false,
        )
    });
    assert!(panicked.is_err());
    assert_eq!(point.stats().totals.exceptions, 2);
}
