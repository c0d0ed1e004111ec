//! Hot keys: the per-call cost of a keyed limit against governor's keyed limiter
//! (`RateLimiter::keyed`, its DashMap store), with 1, 1 000 and 1 000 000 distinct
//! keys, measured interleaved in one run; and the memory each holds.
//!
//! Target: ours <= governor's `check_key` at every size, and flat in the key count.
//! Ours is `Point::enter_key` + `Permit::finish` under a policy whose only rule is a
//! `keys` section (4 096 keys tracked, a limit no call reaches), so it includes the
//! point's own admission; governor's is `check_key` alone. Keys are `u64`, walked in
//! a fixed pseudo-random order.

// `criterion_group!` generates undocumented public functions.
#![allow(missing_docs)]

mod support;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::keys::KeyPolicy;
use resilience_runtime::{registry, Point, Policy};
use std::cell::Cell;
use std::num::NonZeroU32;
use std::time::Duration;

const SIZES: [u64; 3] = [1, 1_000, 1_000_000];

/// The `i`-th key of a set of `n` (a permutation of `0..n` for odd multipliers).
fn key(i: u64, n: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % n
}

fn point(n: u64) -> &'static Point {
    let name = format!("bench.keys.{n}");
    let keys = KeyPolicy::builder()
        .limit(1_000_000_000, Duration::from_secs(1))
        .build()
        .unwrap();
    registry()
        .set_policy(&name, Policy::builder().keys(keys).build().unwrap())
        .unwrap();
    registry().point(&name).unwrap()
}

type Keyed = governor::RateLimiter<
    u64,
    governor::state::keyed::DefaultKeyedStateStore<u64>,
    governor::clock::DefaultClock,
>;

fn governor() -> Keyed {
    governor::RateLimiter::keyed(governor::Quota::per_second(
        NonZeroU32::new(u32::MAX).unwrap(),
    ))
}

/// Resident memory of this process, in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn criterion_rows(c: &mut Criterion) {
    let mut g = c.benchmark_group("keys");
    for n in SIZES {
        let p = point(n);
        let i = Cell::new(0u64);
        g.bench_function(format!("enter_key/{n}"), |b| {
            b.iter(|| {
                let k = key(i.replace(i.get() + 1), n);
                black_box(p.enter_key(&k))
                    .map(|permit| permit.finish(false))
                    .ok()
            })
        });
        let limiter = governor();
        g.bench_function(format!("governor_check_key/{n}"), |b| {
            b.iter(|| {
                let k = key(i.replace(i.get() + 1), n);
                black_box(limiter.check_key(&k)).ok()
            })
        });
    }
    g.finish();
}

fn ratios(_: &mut Criterion) {
    println!("interleaved, median of 200 rounds of 20 000 calls each:");
    for n in SIZES {
        let p = point(n);
        let limiter = governor();
        let i = Cell::new(0u64);
        let j = Cell::new(0u64);
        let ours = || {
            let k = key(i.replace(i.get() + 1), n);
            let _ = black_box(p.enter_key(&k)).map(|permit| permit.finish(false));
        };
        let theirs = || {
            let k = key(j.replace(j.get() + 1), n);
            let _ = black_box(limiter.check_key(&k));
        };
        // Warm both up over every key once (governor's map holds every key it saw).
        let before = resident();
        for _ in 0..n.max(100_000) {
            theirs();
        }
        let governor_bytes = resident().saturating_sub(before);
        for _ in 0..n.max(100_000) {
            ours();
        }
        let plain = registry().point("bench.keys.observe").unwrap();
        registry()
            .set_policy("bench.keys.observe", Policy::observe())
            .unwrap();
        let observe = || {
            let _ = black_box(plain.enter()).map(|permit| permit.finish(false));
        };
        let hash = || {
            let k = key(i.replace(i.get() + 1), n);
            black_box(resilience_runtime::keys::bench_fingerprint(&k));
        };
        let t = support::interleaved(200, 20_000, &[&ours, &theirs, &observe, &hash]);
        println!(
            "  observe-only enter/finish {:.1} ns, key hash {:.1} ns",
            support::median(&t[2]),
            support::median(&t[3])
        );
        let ours_bytes = p.key_stats().map_or(0, |s| s.memory_bytes);
        println!(
            "  {n:>9} keys: enter_key {:>6.1} ns, governor check_key {:>6.1} ns, \
             ours / governor = {:.2} (target <= 1); memory: ours {} KiB (table, \
             bounded), governor {} KiB (resident growth, one entry per key)",
            support::median(&t[0]),
            support::median(&t[1]),
            support::median_ratio(&t[0], &t[1]),
            ours_bytes / 1024,
            governor_bytes / 1024,
        );
        if let Some(s) = p.key_stats() {
            println!(
                "             tracked {}, untracked passes {}, evictions {}",
                s.tracked, s.untracked_passes, s.evictions
            );
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = ratios, criterion_rows
}
criterion_main!(benches);
