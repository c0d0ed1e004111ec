//! Hot keys: the per-call cost of a keyed limit against governor's keyed limiter
//! (`RateLimiter::keyed`, its DashMap store), with 1, 1 000 and 1 000 000 distinct
//! keys, measured interleaved in one run; and the memory each holds.
//!
//! Target: ours <= governor's `check_key` at every size, and flat in the key count.
//! Two rows of ours, both with 4 096 keys tracked and a limit no call reaches:
//! `KeyLimiter::check`, the keyed limit alone (what `check_key` is), and a call
//! through a point, `Point::enter_key` + `Permit::finish` under a policy whose only
//! rule is a `keys` section, which adds the point's own admission and counting. Keys
//! are `u64`, walked in a fixed pseudo-random order. `KeyLimiter::check` is also timed
//! alone: interleaved, governor's map (which holds every key it saw) evicts our
//! table from the caches between batches.

// `criterion_group!` generates undocumented public functions.
#![allow(missing_docs)]

mod support;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::keys::{KeyLimiter, KeyPolicy};
use resilience_runtime::{registry, Point, Policy};
use std::cell::Cell;
use std::num::NonZeroU32;
use std::time::Duration;

const SIZES: [u64; 3] = [1, 1_000, 1_000_000];

/// The `i`-th key of a set of `n` (a permutation of `0..n` for odd multipliers).
fn key(i: u64, n: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % n
}

fn section() -> KeyPolicy {
    KeyPolicy::builder()
        .limit(1_000_000_000, Duration::from_secs(1))
        .build()
        .unwrap()
}

fn point(n: u64) -> &'static Point {
    let name = format!("bench.keys.{n}");
    let keys = section();
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
        let alone = KeyLimiter::new(section());
        g.bench_function(format!("key_limiter_check/{n}"), |b| {
            b.iter(|| {
                let k = key(i.replace(i.get() + 1), n);
                black_box(alone.check(&k)).ok()
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
        let alone = KeyLimiter::new(section());
        let i = Cell::new(0u64);
        let j = Cell::new(0u64);
        let l = Cell::new(0u64);
        let limited = || {
            let k = key(l.replace(l.get() + 1), n);
            let _ = black_box(alone.check(&k));
        };
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
            limited();
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
        let t = support::interleaved(200, 20_000, &[&ours, &theirs, &observe, &hash, &limited]);
        let ours_bytes = alone.stats().memory_bytes;
        // Flatness without the other candidates: interleaved, governor's map (one
        // entry per key it saw, 20 MiB at a million keys) evicts our table from the
        // caches between batches.
        let solo = support::interleaved(200, 20_000, &[&limited]);
        println!(
            "  {n:>9} keys: KeyLimiter::check {:>6.1} ns, governor check_key {:>6.1} ns: \
             ratio {:.2} (target <= 1)",
            support::median(&t[4]),
            support::median(&t[1]),
            support::median_ratio(&t[4], &t[1]),
        );
        println!(
            "             KeyLimiter::check measured alone (no other candidate's memory \
             in the caches): {:>6.1} ns",
            support::median(&solo[0]),
        );
        println!(
            "             through a point: enter_key + finish {:>6.1} ns, ratio {:.2} \
             (a point with an observe-only policy alone: enter + finish {:.1} ns; the key's \
             hash {:.1} ns)",
            support::median(&t[0]),
            support::median_ratio(&t[0], &t[1]),
            support::median(&t[2]),
            support::median(&t[3]),
        );
        println!(
            "             memory: ours {} KiB (the table, bounded), governor {} KiB \
             (resident growth: one entry per key it saw)",
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
