//! The overload simulation (`examples::sim`): each adaptive limit against an
//! overloaded service, deterministic on a manual clock.

use examples::sim::{run, Scenario, SimLimit, SimReport};
use resilience_runtime::adaptive::{littles_law, AdaptiveConfig, GradientConfig};
use std::time::Duration;

// ---------------------------------------------------------------- the simulation

/// 20 workers of 10 ms (2000 calls/s): 2 s warm-up at 70%, then 8 s at 2.5x.
fn small() -> Scenario {
    Scenario {
        workers: 20,
        base_latency: Duration::from_millis(10),
        warmup_rate: 1400.0,
        warmup: Duration::from_secs(2),
        arrival_rate: 5000.0,
        duration: Duration::from_secs(10),
        sla: Duration::from_millis(100),
        ..Scenario::default()
    }
}

#[test]
fn sim_without_a_limit_latency_explodes() {
    let s = small();
    let o = run(&s, &SimLimit::Unlimited).unwrap();
    assert_eq!(o.refused, 0);
    assert!(o.p99 > 10 * s.base_latency, "{o:?}");
    assert!(o.goodput < 0.2 * s.capacity(), "contention collapse: {o:?}");
}

#[test]
fn sim_fixed_gate_from_littles_law_holds_latency() {
    let s = small();
    let l = littles_law(s.capacity(), s.base_latency).unwrap();
    assert_eq!(l, 20);
    let o = run(&s, &SimLimit::Fixed(l)).unwrap();
    assert!(o.p99 < 5 * s.base_latency, "{o:?}");
    assert!(o.goodput >= 0.8 * s.capacity(), "{o:?}");
    assert!(o.max_in_flight <= l);
}

#[test]
fn sim_gradient_limit_keeps_goodput_and_bounds_p99() {
    let s = small();
    let unlimited = run(&s, &SimLimit::Unlimited).unwrap();
    let o = run(&s, &SimLimit::Gradient(GradientConfig::default())).unwrap();
    assert!(o.p99 < 5 * s.base_latency, "{o:?}");
    assert!(o.goodput >= 0.8 * s.capacity(), "{o:?}");
    assert!(o.refused > 0);
    assert_eq!(
        o.offered, unlimited.offered,
        "same arrivals for every policy"
    );
}

/// The gradient limit finds the workers' real concurrency: the flight stays within
/// 1.5x of the workers and admitted calls queue little (median within 1.5x of the
/// service time), with the fixed gate's goodput, with no number to choose; and from a
/// cold start straight into the overload (no warm-up) too, where the first probes
/// (about 2 s of the 9.5 s measured) cost a few percent.
#[test]
fn sim_gradient_limit_settles_near_the_real_concurrency() {
    let cold = Scenario {
        warmup_rate: 0.0,
        warmup: Duration::from_millis(500),
        ..small()
    };
    for (s, share) in [(small(), 0.97), (cold, 0.93)] {
        let fixed = run(&s, &SimLimit::Fixed(s.workers)).unwrap();
        let o = run(&s, &SimLimit::Gradient(GradientConfig::default())).unwrap();
        assert!(o.max_in_flight as f64 <= 1.5 * s.workers as f64, "{o:?}");
        assert!(
            o.p50.as_secs_f64() <= 1.5 * s.base_latency.as_secs_f64(),
            "{o:?}"
        );
        assert!(o.goodput >= share * fixed.goodput, "{o:?} vs {fixed:?}");
    }
}

#[test]
fn sim_shedder_with_a_fast_cpu_meter_sheds_and_recovers() {
    // go-zero's rule acts on the CPU reading: with a meter of the last 250 ms it
    // engages after the first overloaded sample, drains the backlog that built up
    // meanwhile, then holds the flight near what the service sustains (oscillating,
    // as the overload factor tightens the limit at full CPU).
    let s = Scenario {
        cpu_beta: 0.0,
        ..small()
    };
    let unlimited = run(&s, &SimLimit::Unlimited).unwrap();
    let o = run(&s, &SimLimit::Shedder(AdaptiveConfig::default())).unwrap();
    assert!(o.refused > 0, "{o:?}");
    assert!(o.goodput >= 0.4 * s.capacity(), "{o:?}");
    assert!(
        o.goodput > 10.0 * unlimited.goodput,
        "{o:?} vs {unlimited:?}"
    );
    assert!(o.p50 < 3 * s.base_latency, "{o:?}");
    assert!(o.p99 * 5 < unlimited.p99, "{o:?} vs {unlimited:?}");
    assert!(o.max_in_flight * 10 < unlimited.max_in_flight, "{o:?}");
}

#[test]
fn sim_shedder_with_go_zeros_slow_cpu_meter_reacts_too_late() {
    // With go-zero's own smoothing (0.95 per 250 ms) the meter needs ~10 s to cross
    // 90% from a 70% warm-up: a step to 2.5x collapses the service first. This pins
    // down that limitation (the gate and the gradient react to flight and latency).
    let s = Scenario {
        cpu_beta: 0.95,
        ..small()
    };
    let o = run(&s, &SimLimit::Shedder(AdaptiveConfig::default())).unwrap();
    assert_eq!(o.refused, 0, "{o:?}");
    assert!(o.p99 > 10 * s.base_latency, "{o:?}");
}

#[test]
fn sim_is_deterministic_and_validates_its_input() {
    let s = small();
    let a = run(&s, &SimLimit::Shedder(AdaptiveConfig::default())).unwrap();
    let b = run(&s, &SimLimit::Shedder(AdaptiveConfig::default())).unwrap();
    assert_eq!(a, b);
    let bad = Scenario {
        workers: 0,
        ..small()
    };
    assert_eq!(
        run(&bad, &SimLimit::Unlimited).unwrap_err().field,
        "workers"
    );
    assert_eq!(run(&s, &SimLimit::Fixed(0)).unwrap_err().field, "capacity");
}

/// 20% critical calls at 2x capacity (deterministic): without priorities both tiers
/// lose about half; with 30% of the gradient limit reserved, critical calls keep at
/// least 95% goodput and the total goodput does not drop.
#[test]
fn sim_a_critical_reserve_keeps_critical_goodput() {
    let s = Scenario {
        arrival_rate: 4000.0,
        critical_share: 0.2,
        ..Scenario::default()
    };
    let with = |reserve: f64| {
        run(
            &s,
            &SimLimit::Gradient(
                GradientConfig::builder()
                    .critical_reserve(reserve)
                    .build()
                    .unwrap(),
            ),
        )
        .unwrap()
    };
    let (plain, reserved) = (with(0.0), with(0.3));
    assert!(plain.critical.goodput_share() < 0.8, "{plain:?}");
    assert!(reserved.critical.goodput_share() >= 0.95, "{reserved:?}");
    assert!(reserved.other.goodput_share() < plain.other.goodput_share());
    let total = |o: &SimReport| o.critical.good + o.other.good;
    assert!(
        total(&reserved) as f64 >= 0.95 * total(&plain) as f64,
        "{} vs {}",
        total(&reserved),
        total(&plain)
    );
}
