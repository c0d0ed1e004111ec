//! Background work of idle timed points: registers 100 000 points with a timeout rule,
//! gives each one call (or none), then measures the CPU the process spends over 5 s of
//! no traffic, and the memory each point holds.
//!
//! Run with `cargo run --release -p examples --example idle_points [points] [called]`
//! (`called` = 1 makes one timed call on every point first).

use resilience_runtime::{registry, Policy};
use std::time::{Duration, Instant};

/// CPU time of this process (user + system), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let hz = 100; // USER_HZ on Linux
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / hz)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let points: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let called = args.next().is_some_and(|a| a == "1");
    let policy = Policy::builder()
        .timeouts(Duration::from_secs(1), 100)
        .build()
        .expect("a valid policy");
    // These points are made up on purpose: lift the cap on undeclared ones.
    registry().set_max_undeclared_points(u64::MAX);
    for i in 0..points {
        let name = format!("idle.{i}");
        registry()
            .set_policy(&name, policy.clone())
            .expect("a valid name");
        if called {
            let point = registry().point(&name).expect("a valid name");
            point.enter().expect("admitted").finish(false);
        }
    }
    let memory: usize = (0..points.min(1000))
        .map(|i| {
            registry()
                .point(&format!("idle.{i}"))
                .unwrap()
                .memory_bytes()
        })
        .sum::<usize>()
        / points.clamp(1, 1000);
    // Let the sweeps of the calls made above run out, then measure 5 s of idleness.
    std::thread::sleep(Duration::from_secs(3));
    let (cpu0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let (cpu, wall) = (cpu_time() - cpu0, t0.elapsed());
    println!(
        "{points} timed points, {}: {:.2}% of a core idle; {memory} B per point",
        if called {
            "one call each"
        } else {
            "never called"
        },
        cpu.as_secs_f64() / wall.as_secs_f64() * 100.0
    );
}
