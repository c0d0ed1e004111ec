//! The "last 10 s" window is ten seconds, for a point with a policy (its ring of ten
//! 1 s buckets) and for one without (its per-second series): at each second's
//! middle, an event 9.5 s old is in and one 10.5 s old is out, in the statistics'
//! window; the per-second series holds ten closed seconds for `seconds(10)`.

use resilience_runtime::{Clock, ManualClock, Policy, Registry};
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn an_event_older_than_ten_seconds_leaves_the_window_with_and_without_a_policy() {
    let clock = ManualClock::new();
    let registry: &'static Registry =
        Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    registry
        .set_policy(
            "edges.policy",
            Policy::builder().max_visits(1_000).build().unwrap(),
        )
        .unwrap();
    let points = [
        registry.point("edges.policy").unwrap(),
        registry.point("edges.none").unwrap(),
    ];
    let window = |p: &resilience_runtime::Point| p.stats().window.map_or(0, |w| w.visits);

    // Both clocks start on a whole second; the event is a quarter into it.
    clock.advance(ms(250));
    for p in points {
        p.enter().unwrap().finish(false);
    }
    // 9.5 s later: nine and a half seconds old, in.
    clock.advance(ms(9_500));
    for p in points {
        assert_eq!(
            window(p),
            1,
            "{} at 9.5 s: {:?}",
            p.name(),
            p.stats().window
        );
    }
    // 10.5 s: out.
    clock.advance(ms(1_000));
    for p in points {
        assert_eq!(
            window(p),
            0,
            "{} at 10.5 s: {:?}",
            p.name(),
            p.stats().window
        );
    }
    // The per-second series: ten closed seconds for `seconds(10)`, the event's among
    // them until it is more than ten closed seconds back.
    let series =
        |p: &resilience_runtime::Point| -> u64 { p.seconds(10).iter().map(|s| s.visits).sum() };
    for p in points {
        assert_eq!(p.seconds(10).len(), 10);
        assert_eq!(series(p), 1, "{}", p.name());
    }
    clock.advance(ms(1_000));
    for p in points {
        assert_eq!(series(p), 0, "{}", p.name());
    }
}
