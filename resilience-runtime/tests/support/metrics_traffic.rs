//! Known traffic on a registry of a test's own, shared by the exporter tests
//! (`metrics_facade`, `metrics_otel`, `metrics_exporters`).

// Each test binary uses some of these.
#![allow(dead_code)]

use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::{BreakerPolicy, Clock, Permit, Policy, Reason, Registry};
use std::time::Duration;

/// A registry no other test sees.
pub(crate) fn own_registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

/// `{prefix}.ok`: 5 calls, 2 of them exceptions, no policy; `{prefix}.kill`: a kill
/// switch, 3 visits downgraded on `visits`; `{prefix}.conc`: one call in flight (the
/// permit returned) at a concurrency limit of 1 and one downgraded on `concurrency`.
pub(crate) fn known_traffic(r: &'static Registry, prefix: &str) -> Permit<'static> {
    let ok = r.point(&format!("{prefix}.ok")).unwrap();
    for i in 0..5 {
        ok.enter().unwrap().finish(i % 3 == 0);
    }
    let kill = format!("{prefix}.kill");
    r.set_policy(&kill, Policy::builder().max_visits(0).build().unwrap())
        .unwrap();
    for _ in 0..3 {
        let refused = r.point(&kill).unwrap().enter().unwrap_err();
        assert_eq!(refused.reason(), Reason::Visits);
    }
    let conc = format!("{prefix}.conc");
    r.set_policy(&conc, Policy::builder().max_concurrency(1).build().unwrap())
        .unwrap();
    let point = r.point(&conc).unwrap();
    let held = point.enter().unwrap();
    assert_eq!(point.enter().unwrap_err().reason(), Reason::Concurrency);
    held
}

/// `cap.1` ..= `cap.6` with as many calls as their number (the first an exception),
/// `cap.idle` never called, and `cap.open`, one call, its breaker open: over a cap of
/// 3 points, `cap.open`, `cap.6` and `cap.5` are shown and the 5 others summed.
pub(crate) fn capped_traffic(r: &'static Registry) {
    for i in 1..=6u64 {
        let p = r.point(&format!("cap.{i}")).unwrap();
        for n in 0..i {
            p.enter().unwrap().finish(n == 0);
        }
    }
    r.point("cap.idle").unwrap();
    open_breaker(r, "cap.open");
}

/// A point whose classic breaker opened on its one call, a failure.
pub(crate) fn open_breaker(r: &'static Registry, name: &str) {
    let config = ClassicConfig::builder()
        .consecutive_failures(1)
        .build()
        .unwrap();
    r.set_breaker(name, BreakerPolicy::Classic(config)).unwrap();
    r.point(name).unwrap().enter().unwrap().finish(true);
}

/// A point with a queue of 1 before a concurrency limit of 1, whose one waiter timed
/// out after 1 ms (its wait is counted in `resilience_queue_wait_seconds`).
pub(crate) fn queue_timeout(r: &'static Registry, name: &str) {
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(1, Duration::from_millis(1))
        .build()
        .unwrap();
    r.set_policy(name, policy).unwrap();
    let point = r.point(name).unwrap();
    let held = point.enter().unwrap();
    assert_eq!(point.enter().unwrap_err().reason(), Reason::QueueTimeout);
    held.finish(false);
}
