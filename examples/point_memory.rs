//! Memory of points at scale: makes N points (default 100 000), idle or with every
//! rule, and reports the resident growth per point beside `memory_bytes()`, before
//! and after each point's first call.
//!
//! Last, a policy file of N points that shrinks to one: the heap it took, and what is
//! left once the points it no longer names are retired.
//!
//! Run with `cargo run --release -p examples --example point_memory [points]`.

use resilience_runtime::{measure_durations, registry, Policy};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The system allocator, counting live bytes and allocations.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        ALLOCS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Live heap bytes and allocations.
fn heap() -> (usize, usize) {
    (LIVE.load(Ordering::Relaxed), ALLOCS.load(Ordering::Relaxed))
}

/// A policy with every rule of the point set.
fn every_rule() -> Policy {
    Policy::builder()
        .max_visits(1_000)
        .max_concurrency(100)
        .max_exceptions(100)
        .exception_rate(0.5, 10)
        .timeouts(Duration::from_secs(1), 100)
        .token_bucket(1_000.0, 100)
        .downgrade_percentage(50)
        .delay(Duration::from_secs(10), Some(Duration::from_secs(1)))
        .build()
        .expect("a valid policy")
}

/// Makes `points` points named `prefix.i` with `policy`, then gives each one call,
/// printing the resident growth per point and `memory_bytes` of the first, each time.
fn measure(prefix: &str, points: usize, policy: Option<Policy>) {
    let before = examples::resident_bytes();
    let heap0 = heap();
    for i in 0..points {
        let name = format!("{prefix}.{i}");
        match &policy {
            Some(p) => registry()
                .set_policy(&name, p.clone())
                .expect("a valid name"),
            None => drop(registry().point(&name).expect("a valid name")),
        }
    }
    let made = examples::resident_bytes();
    let heap1 = heap();
    let first = registry()
        .point(&format!("{prefix}.0"))
        .expect("made above");
    let made_bytes = first.memory_bytes();
    for i in 0..points {
        let point = registry()
            .point(&format!("{prefix}.{i}"))
            .expect("made above");
        if let Ok(permit) = point.enter() {
            permit.finish(false);
        }
    }
    // Let the per-second sampler run over the calls made.
    std::thread::sleep(Duration::from_secs(3));
    let called = examples::resident_bytes();
    let heap2 = heap();
    println!(
        "{prefix:>6}: heap made +{} B in {} allocations per point, once called +{} B in {}",
        (heap1.0 - heap0.0) / points.max(1),
        (heap1.1 - heap0.1) as f64 / points.max(1) as f64,
        (heap2.0 - heap0.0) / points.max(1),
        (heap2.1 - heap0.1) as f64 / points.max(1) as f64,
    );
    let per = |bytes: u64| bytes / points.max(1) as u64;
    println!(
        "{prefix:>6}: made +{} B per point (memory_bytes {}), once called +{} B per point (memory_bytes {})",
        per(made.saturating_sub(before)),
        made_bytes,
        per(called.saturating_sub(before)),
        first.memory_bytes(),
    );
}

/// A policy text of `points` points named `file.i`, each called once through a
/// handle; then a text of one point. Prints the heap each step holds.
fn shrink(points: usize) {
    use resilience_runtime::config::Format;
    let heap0 = heap();
    let mut text = String::new();
    for i in 0..points {
        text.push_str(&format!("[points.\"file.{i}\"]\nmax_visits = 1000\n"));
    }
    registry()
        .load_policies_str(&text, Format::Toml)
        .expect("a valid file");
    drop(text);
    for i in 0..points {
        let point = registry()
            .point_handle(&format!("file.{i}"))
            .expect("made above");
        if let Ok(permit) = point.enter() {
            permit.finish(false);
        };
    }
    let loaded = heap();
    registry()
        .load_policies_str("[points.\"file.0\"]\nmax_visits = 1000\n", Format::Toml)
        .expect("a valid file");
    let shrunk = heap();
    println!(
        "  file: {points} points +{} kB on the heap; shrunk to one point: +{} kB ({} points left)",
        (loaded.0 - heap0.0) / 1_000,
        shrunk.0.saturating_sub(heap0.0) / 1_000,
        registry()
            .point_names()
            .iter()
            .filter(|n| n.starts_with("file."))
            .count(),
    );
}

fn main() {
    let points: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // As the heartbeat client does: every call's duration goes into its point's series.
    measure_durations(true);
    // These points are made up on purpose: lift the cap on undeclared ones.
    registry().set_max_undeclared_points(u64::MAX);
    measure("idle", points, None);
    measure("full", points, Some(every_rule()));
    shrink(points);
}
