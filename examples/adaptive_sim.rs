//! Adaptive backpressure in a simulated overload: a service of 40 workers x 20 ms
//! (2000 calls/s) is warmed up at 70% of capacity for 5 s, then driven at 2.5x its
//! capacity for 25 s. The same arrivals meet each admission policy:
//!
//! * none: every call queues; latency grows without bound and contention eats the
//!   throughput;
//! * a fixed gate of L = 40 (Little's law: 2000 calls/s x 20 ms);
//! * go-zero's adaptive shedder with go-zero's CPU smoothing (0.95 per 250 ms): the
//!   meter crosses 90% only after the service has collapsed;
//! * the same shedder with a CPU meter of the last 250 ms: it engages after one
//!   sample, drains the backlog, then holds the flight near capacity (oscillating);
//! * a Gradient2-style latency limit, which needs no CPU signal.
//!
//! A second table gives 20% of the calls [`Priority::Critical`] and drives the service
//! at 2x its capacity: the gradient limit without priorities sheds both tiers alike;
//! with `critical_reserve` it keeps a share of its limit for critical calls, which
//! then keep their goodput (the target is >= 95% of them served within the SLA).
//!
//! The simulation is deterministic (discrete events, seeded arrivals), so the tables
//! are the same on every run. Run with `cargo run -p examples --example adaptive_sim`.

use examples::sim::{run, Scenario, SimLimit};
use resilience_runtime::adaptive::{littles_law, AdaptiveConfig, GradientConfig};
#[allow(unused_imports)] // for the docs' link
use resilience_runtime::priority::Priority;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scenario = Scenario::default();
    let fast_meter = Scenario {
        cpu_beta: 0.0,
        ..Scenario::default()
    };
    let fixed = littles_law(scenario.capacity(), scenario.base_latency)?;
    let shedder = SimLimit::Shedder(AdaptiveConfig::default());
    let policies = [
        ("no limit", scenario, SimLimit::Unlimited),
        ("fixed gate (L=40)", scenario, SimLimit::Fixed(fixed)),
        ("shedder, cpu beta .95", scenario, shedder),
        ("shedder, cpu 250 ms", fast_meter, shedder),
        (
            "gradient",
            scenario,
            SimLimit::Gradient(GradientConfig::default()),
        ),
    ];
    println!(
        "service: {} workers x {:?} = {:.0} calls/s; {:.0}/s for {:?}, then {:.0}/s until {:?}; SLA {:?}\n",
        scenario.workers,
        scenario.base_latency,
        scenario.capacity(),
        scenario.warmup_rate,
        scenario.warmup,
        scenario.arrival_rate,
        scenario.duration,
        scenario.sla,
    );
    println!(
        "{:<22} {:>8} {:>8} {:>8} {:>15} {:>11} {:>11} {:>8}",
        "policy", "offered", "admitted", "rejected", "goodput/s", "p50", "p99", "max fly"
    );
    for (name, s, admission) in policies {
        let o = run(&s, &admission)?;
        println!(
            "{:<22} {:>8} {:>8} {:>8} {:>8.0} ({:>3.0}%) {:>11} {:>11} {:>8}",
            name,
            o.offered,
            o.admitted,
            o.refused,
            o.goodput,
            100.0 * o.goodput / s.capacity(),
            ms(o.p50),
            ms(o.p99),
            o.max_in_flight,
        );
    }
    println!("\ngoodput: completed within the SLA after the warm-up; p50/p99: admitted calls, queueing included.");
    priorities()
}

/// 20% critical traffic at 2x capacity, with and without a reserve for it.
fn priorities() -> Result<(), Box<dyn std::error::Error>> {
    let scenario = Scenario {
        arrival_rate: 4000.0,
        critical_share: 0.2,
        ..Scenario::default()
    };
    println!(
        "\npriorities: {:.0}/s ({:.0}x capacity), {:.0}% critical; the gradient limit",
        scenario.arrival_rate,
        scenario.arrival_rate / scenario.capacity(),
        scenario.critical_share * 100.0
    );
    println!(
        "{:<26} {:>14} {:>11} {:>14} {:>11}",
        "", "critical good", "p99", "other good", "p99"
    );
    for (name, reserve) in [("no priorities", 0.0), ("critical_reserve = 0.3", 0.3)] {
        let config = GradientConfig::builder()
            .critical_reserve(reserve)
            .build()
            .unwrap();
        let o = run(&scenario, &SimLimit::Gradient(config))?;
        println!(
            "{:<26} {:>13.1}% {:>11} {:>13.1}% {:>11}",
            name,
            100.0 * o.critical.goodput_share(),
            ms(o.critical.p99),
            100.0 * o.other.goodput_share(),
            ms(o.other.p99),
        );
    }
    println!("good: the tier's calls served within the SLA after the warm-up, of those offered.");
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}
