//! The metrics render at scale: registers N points (default 1 000 000) without a
//! policy, the first 5 000 of them with traffic, then times `metrics::render()` (capped
//! at `DEFAULT_MAX_POINTS` points, the rest summed) and reports the size of its text,
//! and the resident memory the points took.
//!
//! Run with `cargo run --release -p examples --example metrics_scale [points] [all]`
//! (`all`: every point gets one call, like names built from user input).

use resilience_runtime::{metrics, registry};
use std::time::Instant;

fn main() {
    let points: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let all = std::env::args().nth(2).is_some_and(|a| a == "all");
    // These points are made up on purpose: lift the cap on undeclared ones.
    registry().set_max_undeclared_points(u64::MAX);
    let before = examples::resident_bytes();
    let started = Instant::now();
    for i in 0..points {
        let p = registry()
            .point(&format!("scale.{i}"))
            .expect("a valid name");
        if all {
            p.enter().expect("no policy").finish(false);
        }
        if i < 5_000 {
            for _ in 0..=(i % 7) {
                p.enter().expect("no policy").finish(false);
            }
        }
    }
    let made = started.elapsed();
    let grown = examples::resident_bytes().saturating_sub(before);
    println!(
        "{points} points made in {made:.2?}: resident +{} MB, {} B per point (memory_bytes of the last one: {} B)",
        grown / 1_000_000,
        grown / points.max(1) as u64,
        // The last point: called only with `all`, and never by the traffic above.
        registry()
            .point(&format!("scale.{}", points.saturating_sub(1)))
            .map(|p| p.memory_bytes())
            .unwrap_or(0),
    );
    for round in 0..3 {
        let t = Instant::now();
        let text = metrics::render();
        let took = t.elapsed();
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        println!(
            "render {round}: {took:.2?}, {} KB, {series} series (cap {} points)",
            text.len() / 1000,
            metrics::DEFAULT_MAX_POINTS
        );
    }
}
