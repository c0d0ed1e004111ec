//! The shedder's pure cores (`ShedderWindow`, `ShedderRules`, `CoolOff`) against
//! go-zero's constants and the cases of its `adaptiveshedder_test.go`, plus checks
//! that `AdaptiveLimiter` decides exactly as the cores say, from one thread and from
//! many.
//!
//! go-zero's tests are not quoted in PEERS.md; where a case comes from them its
//! expected value is derived by hand in a comment from the formulas PEERS.md gives
//! (section 2.6).

use resilience_runtime::adaptive::{
    AdaptiveConfig, AdaptiveLimiter, CoolOff, FixedCpu, ShedderRules, ShedderWindow,
};
use resilience_runtime::rolling::Bucket;
use resilience_runtime::{Clock, ManualClock};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// The instant `ns` nanoseconds into the timeline (the tests drive time by hand).
fn at(ns: u64) -> resilience_runtime::Instant {
    resilience_runtime::Instant::from_nanos(ns)
}

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;
/// go-zero's test window: 10 buckets of 100 ms (`windowScale` 0.01).
const BUCKET: u64 = 100 * MS;

fn test_config(cpu_threshold: u64) -> AdaptiveConfig {
    AdaptiveConfig::builder()
        .window(Duration::from_secs(1))
        .buckets(10)
        .cpu_threshold(cpu_threshold)
        .build()
        .unwrap()
}

/// A bucket of `count` latencies averaging `avg_ms`.
fn bucket(count: u64, avg_ms: f64) -> Bucket {
    Bucket {
        sum: avg_ms * count as f64,
        count,
    }
}

/// go-zero's maxFlight/shouldDrop fixture: in bucket `i` (0 ..= 9), `(i + 1) x 100`
/// passes and the latencies `10 i + 1 ..= 10 i + 10` (average `10 i + 5.5`). go-zero's
/// window ignores the current bucket (the tenth), so buckets 0 ..= 8 are visible.
fn go_zero_fixture() -> Vec<Bucket> {
    (0..9u64)
        .map(|i| bucket((i + 1) * 100, 10.0 * i as f64 + 5.5))
        .collect()
}

#[test]
fn defaults_are_go_zeros_constants() {
    let c = AdaptiveConfig::default();
    assert_eq!(c.window, Duration::from_secs(5));
    assert_eq!(c.buckets, 50);
    assert_eq!(c.bucket_width(), Duration::from_millis(100));
    assert_eq!(c.cpu_threshold, 900);
    assert_eq!(c.cool_off, Duration::from_secs(1));
    assert_eq!(c.default_min_rt, Duration::from_secs(1));
    assert_eq!(c.flying_beta, 0.9);
    assert_eq!(c.min_overload_factor, 0.1);
    // (1 s / 100 ms) / 1000 = 10 / 1000.
    assert_eq!(c.window_scale(), 0.01);
    let rules = ShedderRules::new(&c);
    assert_eq!(rules.window_scale(), 0.01);
    assert_eq!(
        rules.window(),
        ShedderWindow::new(1000.0),
        "defaultMinRt = 1000 ms"
    );
    // The test geometry has the same scale.
    assert_eq!(test_config(900).window_scale(), 0.01);
}

#[test]
fn max_pass_go_zero_vectors() {
    // TestAdaptiveShedderMaxPass: buckets of 100, 200, ..., 1000 passes -> 1000.
    let buckets: Vec<Bucket> = (1..=10u64).map(|i| bucket(i * 100, 1.0)).collect();
    assert_eq!(ShedderWindow::from_buckets(1000.0, &buckets).max_pass, 1000);
    // ... and "default max pass is equal to 1" for an empty window.
    assert_eq!(ShedderWindow::from_buckets(1000.0, &[]).max_pass, 1);
    let empty = [Bucket::default(); 10];
    assert_eq!(ShedderWindow::from_buckets(1000.0, &empty).max_pass, 1);
    // Order does not matter.
    let mut reversed = buckets.clone();
    reversed.reverse();
    assert_eq!(
        ShedderWindow::from_buckets(1000.0, &reversed).max_pass,
        1000
    );
}

#[test]
fn min_rt_go_zero_vectors() {
    // TestAdaptiveShedderMinRt: bucket i holds 10 i + 1 ..= 10 i + 10 (ten calls);
    // bucket 0 averages 55 / 10 = 5.5 ms, which Go's math.Round (half away from zero)
    // makes 6; every later bucket averages more -> 6.
    let buckets: Vec<Bucket> = (0..10u64)
        .map(|i| Bucket {
            sum: (i * 10 + 1..=i * 10 + 10).sum::<u64>() as f64,
            count: 10,
        })
        .collect();
    assert_eq!(buckets[0].sum, 55.0);
    assert_eq!(ShedderWindow::from_buckets(1000.0, &buckets).min_rt_ms, 6.0);
    // ... and the default (defaultMinRt, 1000 ms) when no bucket has calls.
    assert_eq!(ShedderWindow::from_buckets(1000.0, &[]).min_rt_ms, 1000.0);
    let empty = [Bucket::default(); 3];
    assert_eq!(
        ShedderWindow::from_buckets(1000.0, &empty).min_rt_ms,
        1000.0
    );
    // Rounding (derived): 2.5 -> 3, 2.4999 -> 2, 0.5 -> 1; buckets without calls are
    // skipped, not read as 0 ms.
    let w = |b: &[Bucket]| ShedderWindow::from_buckets(1000.0, b).min_rt_ms;
    assert_eq!(w(&[bucket(2, 2.5)]), 3.0);
    assert_eq!(w(&[bucket(10_000, 2.4999)]), 2.0);
    assert_eq!(w(&[bucket(2, 0.5), Bucket::default()]), 1.0);
    // A latency above the default never raises the minimum above the default.
    assert_eq!(w(&[bucket(3, 5_000.0)]), 1000.0);
}

#[test]
fn max_flight_go_zero_vector() {
    // TestAdaptiveShedderMaxFlight: max_pass = 900 (bucket 8; the 1000 of the current
    // bucket is ignored), min_rt = 6 (bucket 0), window scale 0.01:
    // 900 x 6 x 0.01 = 54.
    let rules = ShedderRules::new(&test_config(900));
    let mut window = rules.window();
    for b in &go_zero_fixture() {
        window.add(b);
    }
    assert_eq!((window.max_pass, window.min_rt_ms), (900, 6.0));
    assert_eq!(rules.max_flight(&window), 54.0);
    assert_eq!(window.max_flight(0.01), 54.0);
    // Derived: the floor of 1. An empty window is 1 x 1000 x 0.01 = 10; a tiny one
    // 1 pass x 20 ms x 0.01 = 0.2 -> 1.
    assert_eq!(rules.max_flight(&rules.window()), 10.0);
    let tiny = ShedderWindow::from_buckets(1000.0, &[bucket(1, 20.0)]);
    assert_eq!(rules.max_flight(&tiny), 1.0);
}

#[test]
fn overload_factor_derived_vectors() {
    // (1000 - cpu) / (1000 - 900), clamped to [0.1, 1].
    let rules = ShedderRules::new(&AdaptiveConfig::default());
    let cases = [
        (0, 1.0),     // 10, clamped
        (500, 1.0),   // 5, clamped
        (900, 1.0),   // exactly 1
        (950, 0.5),   // 50 / 100
        (980, 0.2),   // 20 / 100
        (990, 0.1),   // 10 / 100
        (995, 0.1),   // 0.05, raised to the floor
        (1000, 0.1),  // 0, raised to the floor
        (5_000, 0.1), // readings above 1000 count as 1000
    ];
    for (cpu, expect) in cases {
        let got = rules.overload_factor(cpu);
        assert!((got - expect).abs() < 1e-12, "cpu {cpu}: {got} != {expect}");
    }
    // Another threshold and floor: (1000 - 700) / (1000 - 500) = 0.6; 0.02 -> 0.25.
    let other = ShedderRules::new(
        &AdaptiveConfig::builder()
            .cpu_threshold(500)
            .min_overload_factor(0.25)
            .build()
            .unwrap(),
    );
    assert!((other.overload_factor(700) - 0.6).abs() < 1e-12);
    assert_eq!(other.overload_factor(990), 0.25);
    assert!(other.is_overloaded(500) && !other.is_overloaded(499));
}

#[test]
fn still_hot_rule() {
    // stillHot: droppedRecently && overloadTime != 0 && now - overloadTime < coolOff
    // (1 s); expired -> clear droppedRecently.
    let rules = ShedderRules::new(&AdaptiveConfig::default());
    let t = 7 * SECOND;
    assert_eq!(rules.cool_off(at(t), false, None), CoolOff::Cold);
    assert_eq!(
        rules.cool_off(at(t), false, Some(at(t))),
        CoolOff::Cold,
        "no recent drop"
    );
    assert_eq!(
        rules.cool_off(at(t), true, None),
        CoolOff::Cold,
        "never overloaded"
    );
    assert_eq!(rules.cool_off(at(t), true, Some(at(t))), CoolOff::Hot);
    assert_eq!(
        rules.cool_off(at(t + SECOND - 1), true, Some(at(t))),
        CoolOff::Hot
    );
    assert_eq!(
        rules.cool_off(at(t + SECOND), true, Some(at(t))),
        CoolOff::Expired,
        "strict <"
    );
    assert_eq!(
        rules.cool_off(at(t + 60 * SECOND), true, Some(at(t))),
        CoolOff::Expired
    );
    // A reading "before" the overload (clocks of several threads) is still hot.
    assert_eq!(rules.cool_off(at(t - 5), true, Some(at(t))), CoolOff::Hot);
    assert!(CoolOff::Hot.is_hot() && !CoolOff::Cold.is_hot() && !CoolOff::Expired.is_hot());
    // A configured cool-off.
    let short = ShedderRules::new(
        &AdaptiveConfig::builder()
            .cool_off(Duration::from_millis(250))
            .build()
            .unwrap(),
    );
    assert_eq!(
        short.cool_off(at(t + 249 * MS), true, Some(at(t))),
        CoolOff::Hot
    );
    assert_eq!(
        short.cool_off(at(t + 250 * MS), true, Some(at(t))),
        CoolOff::Expired
    );
}

#[test]
fn should_drop_go_zero_cases() {
    // TestAdaptiveShedderShouldDrop, on the fixture (max_flight 54). go-zero stubs the
    // overload check; here the CPU reads exactly the threshold, so the system is
    // overloaded and the overload factor is 1 (limit 54).
    let rules = ShedderRules::new(&test_config(900));
    let max_flight = rules.max_flight(&ShedderWindow::from_buckets(1000.0, &go_zero_fixture()));
    assert_eq!(max_flight, 54.0);
    let hot_cpu = 900;
    assert_eq!(rules.flight_limit(max_flight, hot_cpu), 54.0);
    // "cpu >= 800, inflight < maxPass": avgFlying 50 -> no drop.
    assert!(!rules.should_drop(hot_cpu, false, 50.0, 0, max_flight));
    assert!(!rules.should_drop(hot_cpu, false, 50.0, 80, max_flight));
    // avgFlying 80, flying = int(maxFlight x overloadFactor) - 5 = 49 -> no drop.
    assert!(!rules.should_drop(hot_cpu, false, 80.0, 54 - 5, max_flight));
    // avgFlying 80, flying 80 -> drop (Allow returns ErrServiceOverloaded).
    assert!(rules.should_drop(hot_cpu, false, 80.0, 80, max_flight));
    // "cpu < 800": not overloaded and not hot -> no drop, whatever the flight.
    assert!(!rules.should_drop(899, false, 80.0, 80, max_flight));
    // Not overloaded but still hot (a drop less than 1 s after an overload) -> drop.
    assert!(rules.should_drop(899, true, 80.0, 80, max_flight));
    // Derived boundaries: both comparisons are strict.
    assert!(!rules.should_drop(hot_cpu, false, 54.0, 80, max_flight));
    assert!(!rules.should_drop(hot_cpu, false, 80.0, 54, max_flight));
    assert!(rules.should_drop(hot_cpu, false, 54.000_001, 55, max_flight));
    // Derived: at 950 the factor is 0.5, limit 27.
    assert!(rules.should_drop(950, false, 27.5, 28, max_flight));
    assert!(!rules.should_drop(950, false, 27.5, 27, max_flight));
    assert!(rules.high_throughput(28.0, 28, 27.0));
    assert!(!rules.high_throughput(27.0, 28, 27.0));
}

/// The limiter fed the go-zero fixture reads the same statistics and limit.
#[test]
fn the_limiter_reads_its_window_with_the_cores() {
    let cpu = Arc::new(FixedCpu::new(900));
    let clock = ManualClock::new();
    let config = test_config(900);
    let l = AdaptiveLimiter::with_parts(config, cpu.clone(), Clock::manual(&clock)).unwrap();
    let t0 = l.now().as_nanos();
    // The fixture, one latency sample per pass: bucket i gets (i + 1) x 100 passes
    // (the tenth bucket 1000 of them) of (i + 6) ms, so bucket 0 averages 6 like
    // go-zero's 5.5 rounded.
    for i in 0..10u64 {
        for _ in 0..(i + 1) * 100 {
            l.record(at(t0 + i * BUCKET), Duration::from_millis(i + 6), 0);
        }
    }
    let now = t0 + 9 * BUCKET;
    let fed: Vec<Bucket> = (0..9u64)
        .map(|i| bucket((i + 1) * 100, (i + 6) as f64))
        .collect();
    let rules = ShedderRules::new(&config);
    let expect = ShedderWindow::from_buckets(1000.0, &fed);
    let stats = l.stats(at(now));
    assert_eq!(
        (stats.max_pass, stats.min_rt_ms),
        (expect.max_pass, expect.min_rt_ms)
    );
    assert_eq!((stats.max_pass, stats.min_rt_ms), (900, 6.0));
    assert_eq!(stats.max_flight, rules.max_flight(&expect));
    assert_eq!(stats.max_flight, 54.0);
    assert_eq!(stats.overload_factor, rules.overload_factor(900));
    // 80 in flight, but the average is 0: admitted.
    assert!(l.check(at(now), 80).is_ok());
    // Raise the average to 80: 0.9 x 0 + 0.1 x 80 = 8, and so on, 40 times.
    let mut avg = 0.0;
    for _ in 0..40 {
        l.record_failure(80);
        avg = 0.9 * avg + 0.1 * 80.0;
    }
    assert!((l.stats(at(now)).avg_in_flight - avg).abs() < 1e-9);
    assert!(avg > 54.0);
    let err = l.check(at(now), 80).unwrap_err();
    assert_eq!(err.limit, rules.flight_limit(54.0, 900));
    assert_eq!((err.in_flight, err.cpu), (80, Some(900)));
    assert!(l.check(at(now), 54).is_ok(), "strict: 54 is not above 54");
}

/// A small deterministic generator for the model test.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

/// The limiter against a model made of the pure cores: its window (the buckets the
/// test fed, current one ignored), its flight average, its overload time and its
/// recent-drop flag. Every decision must agree.
#[test]
fn the_limiter_decides_as_the_cores_say() {
    // Over all seeds: drops while only still hot, and cool-offs that expired.
    let (mut hot_drops, mut expired) = (0u32, 0u32);
    for seed in 1..=8u64 {
        let cpu = Arc::new(FixedCpu::new(0));
        let clock = ManualClock::new();
        let config = test_config(900);
        let l = AdaptiveLimiter::with_parts(config, cpu.clone(), Clock::manual(&clock)).unwrap();
        let rules = ShedderRules::new(&config);
        let t0 = l.now().as_nanos();
        let mut rng = Lcg(seed);
        // Model state.
        let mut buckets: Vec<Bucket> = Vec::new(); // by absolute bucket index
        let mut avg = 0.0f64;
        let mut overload_time: Option<resilience_runtime::Instant> = None;
        let mut dropped_recently = false;
        let mut now = t0;
        let (mut decisions, mut drops) = (0u32, 0u32);
        for step in 0..600 {
            now += rng.next(120) * MS;
            let cur = ((now - t0) / BUCKET) as usize;
            if buckets.len() <= cur {
                buckets.resize(cur + 1, Bucket::default());
            }
            match rng.next(4) {
                // A completed call: one latency sample in the current bucket.
                0 => {
                    let ms = 1 + rng.next(8);
                    let in_flight = rng.next(30);
                    l.record(at(now), Duration::from_millis(ms), in_flight);
                    buckets[cur].sum += ms as f64;
                    buckets[cur].count += 1;
                    avg = 0.9 * avg + 0.1 * in_flight as f64;
                }
                // A failed call: the average only.
                1 => {
                    let in_flight = rng.next(30);
                    l.record_failure(in_flight);
                    avg = 0.9 * avg + 0.1 * in_flight as f64;
                }
                // A decision at some CPU reading.
                _ => {
                    // Phases of 1.5 s: mostly hot, then cool (for cool-offs to run
                    // out).
                    let reading = if ((now - t0) / (1_500 * MS)).is_multiple_of(2) {
                        [899, 900, 950, 990, 1000][rng.next(5) as usize]
                    } else {
                        [300, 899][rng.next(2) as usize]
                    };
                    cpu.set(reading);
                    let in_flight = rng.next(30);
                    let visible = &buckets[cur.saturating_sub(9)..cur];
                    let max_flight =
                        rules.max_flight(&ShedderWindow::from_buckets(1000.0, visible));
                    let limit = rules.flight_limit(max_flight, reading);
                    // The model, in go-zero's order: the overload check first (it
                    // records the time), stillHot only when not overloaded (it may
                    // clear the flag).
                    let overloaded = rules.is_overloaded(reading);
                    let mut hot = false;
                    if overloaded {
                        overload_time = Some(at(now));
                    } else {
                        match rules.cool_off(at(now), dropped_recently, overload_time) {
                            CoolOff::Hot => hot = true,
                            CoolOff::Cold => {}
                            CoolOff::Expired => {
                                dropped_recently = false;
                                expired += 1;
                            }
                        }
                    }
                    let expect = rules.should_drop(reading, hot, avg, in_flight, max_flight);
                    let got = l.check(at(now), in_flight);
                    // The limiter keeps max_flight per bucket as an f32: skip the rare
                    // readings that close to the limit.
                    let close = |x: f64| (x - limit).abs() <= 1e-5 * limit.max(1.0);
                    if (overloaded || hot) && (close(avg) || close(in_flight as f64)) {
                        if got.is_err() {
                            dropped_recently = true;
                        }
                        continue;
                    }
                    assert_eq!(got.is_err(), expect, "seed {seed} step {step}");
                    if let Err(e) = got {
                        assert!((e.limit - limit).abs() <= 1e-5 * limit, "{e:?} vs {limit}");
                        dropped_recently = true;
                        drops += 1;
                        hot_drops += u32::from(!overloaded);
                    }
                    decisions += 1;
                }
            }
        }
        assert!(decisions > 200, "seed {seed}: {decisions}");
        assert!(drops > 0, "seed {seed}: the model never dropped");
        assert!((l.stats(at(now)).avg_in_flight - avg).abs() < 1e-9);
    }
    assert!(hot_drops > 0, "the still-hot rule never dropped");
    assert!(expired > 0, "no cool-off ever expired");
}

/// Many threads complete calls into one bucket at once: the window the limiter reads
/// is the bucket they made, folded by the core.
#[test]
fn concurrent_passes_fold_into_the_same_statistics() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 2_000;
    let cpu = Arc::new(FixedCpu::new(0));
    let clock = ManualClock::new();
    let config = test_config(900);
    let l =
        Arc::new(AdaptiveLimiter::with_parts(config, cpu.clone(), Clock::manual(&clock)).unwrap());
    let t0 = l.now().as_nanos();
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (l, barrier) = (Arc::clone(&l), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..PER_THREAD {
                    let permit = l.try_acquire(at(t0)).expect("a cool CPU never drops");
                    // Thread i's calls take i + 1 ms, all ending in bucket 0.
                    permit.pass(at(t0 + (i + 1) * MS));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(l.in_flight(), 0);
    // Bucket 0 holds 8000 samples summing 2000 x (1 + 2 + 3 + 4) = 20 000 ms: an
    // average of 2.5 ms, rounded to 3. Read one bucket later.
    let expect = ShedderWindow::from_buckets(1000.0, &[bucket(THREADS * PER_THREAD, 2.5)]);
    let stats = l.stats(at(t0 + BUCKET));
    assert_eq!(
        (stats.max_pass, stats.min_rt_ms),
        (expect.max_pass, expect.min_rt_ms)
    );
    assert_eq!((stats.max_pass, stats.min_rt_ms), (8_000, 3.0));
    let rules = ShedderRules::new(&config);
    // 8000 x 3 x 0.01 = 240.
    assert_eq!(stats.max_flight, rules.max_flight(&expect));
    assert_eq!(stats.max_flight, 240.0);

    // Now hot: threads race to check with 100 in flight and a high average; every
    // refusal is counted once.
    cpu.set(1000);
    for _ in 0..60 {
        l.record_failure(100);
    }
    let now = t0 + BUCKET;
    let refused: u64 = (0..THREADS)
        .map(|_| {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                (0..500).filter(|_| l.check(at(now), 100).is_err()).count() as u64
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    // Limit 240 x 0.1 = 24, the average about 100: every check refuses.
    assert_eq!(refused, THREADS * 500);
    assert_eq!(l.stats(at(now)).drops, refused);
}
