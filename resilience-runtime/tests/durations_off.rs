//! Call durations are not measured until something turns the measuring on (its own
//! test binary: the switch is process-wide).

use resilience_runtime::{measure_durations, measuring_durations, Clock, ManualClock};
use resilience_runtime::{Policy, Registry};
use std::time::Duration;

#[test]
fn durations_are_measured_only_once_turned_on() {
    let manual = ManualClock::new();
    let registry: &'static Registry =
        Box::leak(Box::new(Registry::with_clock(Clock::manual(&manual))));
    registry
        .set_policy("off.point", Policy::builder().build().unwrap())
        .unwrap();
    let point = registry.point("off.point").unwrap();
    assert!(!measuring_durations());
    let p = point.enter().unwrap();
    manual.advance(Duration::from_millis(4));
    p.finish(false);
    manual.advance(Duration::from_secs(1));
    measure_durations(true);
    let p = point.enter().unwrap();
    manual.advance(Duration::from_millis(6));
    p.finish(false);
    manual.advance(Duration::from_secs(1));
    let view: Vec<_> = point
        .seconds(2)
        .iter()
        .map(|s| (s.passes, s.measured, s.max_duration))
        .collect();
    assert_eq!(view, [(1, 0, None), (1, 1, Some(Duration::from_millis(6)))]);
}
