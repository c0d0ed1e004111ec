//! Adaptive backpressure: the gate of the seed, go-zero's shedder through its public
//! API, the CPU sampler on fake and real cgroup files, (the overload simulation is tested in the `examples` crate).

use resilience_runtime::adaptive::{
    littles_law, AdaptiveConfig, AdaptiveLimiter, CpuSampler, CpuSampling, CpuSource, FixedCpu,
    Gate, GateRefused, GradientConfig, GradientLimiter, SystemCpu,
};
use resilience_runtime::{Clock, ManualClock};
use std::fs;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The instant `ns` nanoseconds into the timeline (the tests drive time by hand).
fn at(ns: u64) -> resilience_runtime::Instant {
    resilience_runtime::Instant::from_nanos(ns)
}

const MS: u64 = 1_000_000;

// ---------------------------------------------------------------- the gate (seed)

#[test]
fn gate_latency_ewma_follows_the_seed() {
    let clock = ManualClock::new();
    let gate = Gate::with_clock(8, Clock::manual(&clock)).unwrap();
    assert_eq!(gate.average_latency(), None);
    let mut seen = Vec::new();
    for ns in [100, 200] {
        let permit = gate.try_acquire().unwrap();
        clock.advance(Duration::from_nanos(ns));
        drop(permit);
        seen.push(gate.average_latency().unwrap().as_nanos());
    }
    assert_eq!(
        seen,
        [100, 130],
        "first sample initialises, then 0.7 old + 0.3 new"
    );
}

#[test]
fn gate_fails_fast_at_capacity_and_counts() {
    let gate = Gate::from_littles_law(20_000.0, Duration::from_millis(20)).unwrap();
    assert_eq!(gate.capacity(), 400);
    assert_eq!(
        littles_law(20_000.0, Duration::from_millis(20)).unwrap(),
        400
    );
    let held: Vec<_> = (0..400).map(|_| gate.try_acquire().unwrap()).collect();
    assert_eq!(gate.active(), 400);
    let started = Instant::now();
    assert_eq!(
        gate.try_acquire().unwrap_err(),
        GateRefused { capacity: 400 }
    );
    assert!(started.elapsed() < Duration::from_millis(50), "never waits");
    assert_eq!(gate.refused(), 1);
    drop(held);
    assert_eq!(gate.active(), 0);
    assert!(gate.try_acquire().is_ok());
}

/// A future that is never ready.
struct Never;

impl Future for Never {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

#[test]
fn gate_permit_is_released_by_panic_and_by_a_cancelled_future() {
    let clock = ManualClock::new();
    let gate = Arc::new(Gate::with_clock(1, Clock::manual(&clock)).unwrap());

    let g = gate.clone();
    let c = clock.clone();
    let panicked = std::thread::spawn(move || {
        let _permit = g.try_acquire().unwrap();
        c.advance(Duration::from_micros(3));
        panic!("handler panicked");
    })
    .join();
    assert!(panicked.is_err());
    assert_eq!(gate.active(), 0, "released while unwinding");
    assert_eq!(gate.average_latency(), Some(Duration::from_micros(3)));

    let g = gate.clone();
    let mut fut = Box::pin(async move {
        let _permit = g.try_acquire_owned().unwrap();
        Never.await;
    });
    let waker = std::task::Waker::noop();
    assert!(fut
        .as_mut()
        .poll(&mut Context::from_waker(waker))
        .is_pending());
    assert_eq!(gate.active(), 1);
    assert!(
        gate.try_acquire().is_err(),
        "the suspended call holds the slot"
    );
    drop(fut);
    assert_eq!(gate.active(), 0, "cancelling the future released the slot");
}

#[test]
fn gate_never_exceeds_capacity_across_threads() {
    let gate = Gate::new(4).unwrap();
    let peak = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50_000 {
                    if let Ok(_p) = gate.try_acquire() {
                        peak.fetch_max(gate.active(), std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert!(peak.into_inner() <= 4);
    assert_eq!(gate.active(), 0);
}

// ---------------------------------------------------------------- the shedder

const BUCKET: u64 = 100 * MS;

/// 10 buckets of 100 ms (go-zero's test window: window scale 0.01).
fn shedder(cpu: &Arc<FixedCpu>, threshold: u64) -> (AdaptiveLimiter, ManualClock) {
    shedder_with(cpu, threshold, Duration::from_secs(1))
}

fn shedder_with(
    cpu: &Arc<FixedCpu>,
    threshold: u64,
    cool_off: Duration,
) -> (AdaptiveLimiter, ManualClock) {
    let clock = ManualClock::new();
    let config = AdaptiveConfig::builder()
        .window(Duration::from_secs(1))
        .buckets(10)
        .cpu_threshold(threshold)
        .cool_off(cool_off)
        .build()
        .unwrap();
    let limiter = AdaptiveLimiter::with_parts(config, cpu.clone(), Clock::manual(&clock)).unwrap();
    (limiter, clock)
}

/// Completes `n` calls of `latency_ms` each, ending at the limiter's current time
/// (so every sample lands in the current bucket).
fn complete(l: &AdaptiveLimiter, n: u64, latency_ms: u64) {
    let now = l.now().as_nanos();
    let start = now - latency_ms * MS;
    let permits: Vec<_> = (0..n).map(|_| l.try_acquire(at(start)).unwrap()).collect();
    for p in permits {
        p.pass(at(now));
    }
}

#[test]
fn shedder_max_pass_from_buckets_of_100_to_1000() {
    let cpu = Arc::new(FixedCpu::new(0));
    let (l, clock) = shedder(&cpu, 900);
    for i in 1..=10 {
        complete(&l, i * 100, 1);
        clock.advance(Duration::from_nanos(BUCKET));
    }
    assert_eq!(l.stats(l.now()).max_pass, 1000);
}

#[test]
fn shedder_min_rt_is_the_rounded_lowest_bucket_average() {
    let cpu = Arc::new(FixedCpu::new(0));
    let (l, clock) = shedder(&cpu, 900);
    assert_eq!(
        l.stats(l.now()).min_rt_ms,
        1000.0,
        "default before any call"
    );
    for i in 0..10u64 {
        if i > 0 {
            clock.advance(Duration::from_nanos(BUCKET));
        }
        for j in i * 10 + 1..=i * 10 + 10 {
            complete(&l, 1, j);
        }
    }
    // Bucket 0 averages 5.5 ms: rounded half away from zero.
    assert_eq!(l.stats(l.now()).min_rt_ms, 6.0);
}

#[test]
fn shedder_max_flight_is_littles_law_of_the_window() {
    let cpu = Arc::new(FixedCpu::new(0));
    let (l, clock) = shedder(&cpu, 900);
    // Bucket i: (i + 1) x 100 calls of (i + 6) ms. The last bucket is the current one
    // and is ignored: 900 passes per 100 ms x 6 ms = 9000/s x 0.006 s = 54.
    for i in 0..10u64 {
        if i > 0 {
            clock.advance(Duration::from_nanos(BUCKET));
        }
        complete(&l, (i + 1) * 100, i + 6);
    }
    let s = l.stats(l.now());
    assert_eq!((s.max_pass, s.min_rt_ms, s.max_flight), (900, 6.0, 54.0));
}

/// A limiter whose window says "54 in flight are sustainable" (as above), with a
/// cool-off of 80 ms so that it ends within one bucket.
fn loaded_shedder(cpu: &Arc<FixedCpu>, threshold: u64) -> (AdaptiveLimiter, ManualClock) {
    let (l, clock) = shedder_with(cpu, threshold, Duration::from_millis(80));
    for i in 0..10u64 {
        if i > 0 {
            clock.advance(Duration::from_nanos(BUCKET));
        }
        complete(&l, (i + 1) * 100, i + 6);
    }
    (l, clock)
}

#[test]
fn shedder_drops_only_when_hot_and_over_the_flight() {
    let cpu = Arc::new(FixedCpu::new(100));
    let (l, clock) = loaded_shedder(&cpu, 500);
    let now = l.now().as_nanos();
    // Cool CPU: 200 calls in flight are admitted.
    let mut held: Vec<_> = (0..200).map(|_| l.try_acquire(at(now)).unwrap()).collect();
    // Finishing a few lifts the flight average over the limit (0.9 old + 0.1 flight).
    for _ in 0..40 {
        held.pop().unwrap().fail();
        held.push(l.try_acquire(at(now)).unwrap());
    }
    let s = l.stats(at(now));
    assert!(s.avg_in_flight > 54.0, "{s:?}");
    // Hot CPU at the threshold (overload factor 1): over 54 in flight, dropped.
    cpu.set(500);
    let err = l.try_acquire(at(now)).unwrap_err();
    assert_eq!((err.in_flight, err.limit, err.cpu), (200, 54.0, Some(500)));
    // CPU cools: still dropping during the 80 ms cool-off after the last hot
    // reading (same bucket, same window)...
    cpu.set(100);
    clock.advance(Duration::from_millis(79));
    assert!(l.try_acquire(l.now()).is_err(), "cool-off");
    // ...and admitting after it: a cool CPU never drops, however many are in flight.
    clock.advance(Duration::from_millis(1));
    held.push(l.try_acquire(l.now()).unwrap());
    assert_eq!(l.in_flight(), 201);
    // Hot again, but back under the limit: admitted.
    cpu.set(500);
    assert!(l.try_acquire(l.now()).is_err());
    while held.len() > 54 {
        held.pop().unwrap().fail();
    }
    assert!(
        l.try_acquire(l.now()).is_ok(),
        "54 in flight is not over 54"
    );
    // Nearly saturated: the limit tightens to 54 x (1000 - 950) / 500 = 5.4.
    cpu.set(950);
    let err = l.try_acquire(l.now()).unwrap_err();
    assert!((err.limit - 5.4).abs() < 1e-9, "{err:?}");
}

#[test]
fn shedder_permits_release_on_every_path() {
    let cpu = Arc::new(FixedCpu::new(0));
    let (l, _clock) = shedder(&cpu, 900);
    let l = Arc::new(l);
    let now = l.now().as_nanos();
    l.try_acquire(at(now)).unwrap().pass(at(now + MS));
    l.try_acquire(at(now)).unwrap().fail();
    drop(l.try_acquire_owned(at(now)).unwrap());
    let l2 = l.clone();
    let _ = std::thread::spawn(move || {
        let _p = l2.try_acquire_owned(at(now)).unwrap();
        panic!("boom");
    })
    .join();
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn shedder_config_errors_name_the_field() {
    let err = AdaptiveConfig::builder().buckets(0).build().unwrap_err();
    assert_eq!(err.field, "buckets");
    assert!(err.to_string().contains("`buckets`"), "{err}");
    // The fields stay public: the limiter checks them again.
    let mut bad = AdaptiveConfig::default();
    bad.buckets = 0;
    assert_eq!(AdaptiveLimiter::new(bad).unwrap_err(), err);
}

// ---------------------------------------------------------------- gradient

#[test]
fn gradient_limit_grows_with_steady_latency_and_shrinks_when_it_climbs() {
    let clock = ManualClock::new();
    let config = GradientConfig::builder().initial_limit(10).build().unwrap();
    let l = GradientLimiter::with_clock(config, Clock::manual(&clock)).unwrap();
    let window = |latency_ms: u64| {
        // Saturate the limit, then complete every call: one 100 ms window.
        let now = l.now().as_nanos();
        let permits: Vec<_> = std::iter::from_fn(|| l.try_acquire(at(now)).ok()).collect();
        assert!(!permits.is_empty());
        clock.advance(Duration::from_millis(100));
        for p in permits {
            p.pass(at(now + latency_ms * MS));
        }
    };
    // The first windows probe the no-load latency (the limit drops to 4 while it
    // is measured), then the limit grows by 0.8 a window.
    for _ in 0..25 {
        window(10);
    }
    let grown = l.limit();
    assert!(grown > 20.0, "10 + 0.8 per window, got {grown}");
    // Latency x4: gradient 0.5, the limit loses about 10% per window.
    for _ in 0..10 {
        window(40);
    }
    assert!(l.limit() < grown * 0.75, "{} after {grown}", l.limit());
    assert!(l.drops() > 0);
}

/// The service on a manual clock: it serves 8 calls at once in 20 ms, so a
/// window at a flight of `n` has a latency of `20 ms x max(1, n / 8)`; the load keeps
/// the limit full (an overload). Started at 20, the limit settles within
/// `[8, 1.25 x 8 + 2]` and stays there, probes aside.
#[test]
fn gradient_limit_settles_near_the_real_concurrency_of_a_saturated_service() {
    let clock = ManualClock::new();
    let l = GradientLimiter::with_clock(GradientConfig::default(), Clock::manual(&clock)).unwrap();
    let mut limits = Vec::new();
    for _ in 0..300 {
        let now = l.now().as_nanos();
        let permits: Vec<_> = std::iter::from_fn(|| l.try_acquire(at(now)).ok()).collect();
        let n = permits.len() as u64;
        let latency = 20 * MS * n.max(8) / 8;
        clock.advance(Duration::from_millis(100));
        for p in permits {
            p.pass(at(now + latency));
        }
        limits.push(l.limit());
    }
    let settled = &limits[60..];
    let high = settled.iter().cloned().fold(0.0, f64::max);
    assert!(high <= 12.0, "{high}: {settled:?}");
    let mut sorted = settled.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    assert!((8.0..=12.0).contains(&median), "{median}: {settled:?}");
}

// ---------------------------------------------------------------- CPU sampling

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "resilience-adaptive-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn cpu_sampler_reads_cgroup_v2_against_its_quota() {
    let t = TempDir::new("v2");
    t.write("proc/self/cgroup", "0::/kubepods/pod1\n");
    t.write(
        "cg/kubepods/pod1/cpu.stat",
        "usage_usec 1000000\nuser_usec 1\n",
    );
    t.write("cg/kubepods/pod1/cpu.max", "150000 100000\n");
    let mut s = CpuSampler::detect_in(&t.path("proc"), &t.path("cg")).unwrap();
    assert_eq!(s.sampling(), CpuSampling::CgroupV2);
    assert_eq!(s.limit_cores(), 1.5);
    assert_eq!(s.sample(at(1_000 * MS)).unwrap(), None, "baseline");
    // 0.75 s of CPU in 1 s against 1.5 cores: 500 millicores.
    t.write("cg/kubepods/pod1/cpu.stat", "usage_usec 1750000\n");
    assert_eq!(s.sample(at(2_000 * MS)).unwrap(), Some(500));
    // More than the quota is clamped.
    t.write("cg/kubepods/pod1/cpu.stat", "usage_usec 9750000\n");
    assert_eq!(s.sample(at(3_000 * MS)).unwrap(), Some(1000));
    // No quota: the cpuset decides.
    t.write("cg/kubepods/pod1/cpu.max", "max 100000\n");
    t.write("cg/kubepods/pod1/cpuset.cpus.effective", "0-3\n");
    let s = CpuSampler::detect_in(&t.path("proc"), &t.path("cg")).unwrap();
    assert_eq!(s.limit_cores(), 4.0);
    // A broken file is an error naming it, not a panic.
    let mut s = s;
    t.write("cg/kubepods/pod1/cpu.stat", "garbage\n");
    let err = s.sample(at(4_000 * MS)).unwrap_err();
    assert!(err.to_string().contains("cpu.stat"), "{err}");
}

#[test]
fn cpu_sampler_falls_back_to_cgroup_v1_then_proc_stat() {
    let t = TempDir::new("v1");
    t.write(
        "proc/self/cgroup",
        "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n2:cpuset:/docker/abc\n0::/\n",
    );
    t.write("cg/cpu,cpuacct/docker/abc/cpuacct.usage", "5000000000\n");
    t.write("cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    t.write("cg/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    t.write("cg/cpuset/docker/abc/cpuset.cpus", "0-1\n");
    t.write(
        "proc/stat",
        "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n",
    );
    let mut s = CpuSampler::detect_in(&t.path("proc"), &t.path("cg")).unwrap();
    assert_eq!(s.sampling(), CpuSampling::CgroupV1);
    assert_eq!(s.limit_cores(), 2.0, "no quota: the cpuset's 2 CPUs");
    assert_eq!(s.sample(at(0)).unwrap(), None);
    t.write("cg/cpu,cpuacct/docker/abc/cpuacct.usage", "5500000000\n");
    assert_eq!(
        s.sample(at(1_000 * MS)).unwrap(),
        Some(250),
        "0.5 s of 2 cores"
    );

    t.write("cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000\n");
    let s = CpuSampler::detect_in(&t.path("proc"), &t.path("cg")).unwrap();
    assert_eq!(s.limit_cores(), 0.5, "a quota wins over the cpuset");

    // Without cgroup files: the machine's /proc/stat.
    fs::remove_dir_all(t.path("cg")).unwrap();
    let mut s = CpuSampler::detect_in(&t.path("proc"), &t.path("cg")).unwrap();
    assert_eq!(s.sampling(), CpuSampling::ProcStat);
    assert_eq!(s.sample(at(0)).unwrap(), None);
    // busy +300 of total +400 jiffies (idle +100): 750.
    t.write("proc/stat", "cpu  300 0 200 900 0 0 0 0 0 0\n");
    assert_eq!(s.sample(at(0)).unwrap(), Some(750));

    fs::remove_file(t.path("proc/stat")).unwrap();
    assert!(CpuSampler::detect_in(&t.path("proc"), &t.path("cg")).is_err());
}

/// Spins the CPU for `d`.
fn burn(d: Duration) {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < d {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn cpu_sampler_measures_this_machine() {
    let mut s = CpuSampler::detect().expect("Linux has a cgroup or /proc/stat");
    assert!(s.limit_cores() > 0.0);
    let origin = Instant::now();
    let now = || origin.elapsed().as_nanos() as u64 + 1;
    assert_eq!(s.sample(at(now())).unwrap(), None);
    burn(Duration::from_millis(300));
    let usage = s.sample(at(now())).unwrap().expect("time passed");
    // One core busy out of `limit_cores`, others' work on top; on a crowded machine
    // this thread may get only part of a core, hence the low floor.
    let floor = (1000.0 / s.limit_cores() * 0.1) as u64;
    assert!(
        (floor..=1000).contains(&usage),
        "{usage} millicores while burning one core of {} ({:?}, {})",
        s.limit_cores(),
        s.sampling(),
        s.usage_file().display()
    );
}

#[cfg(target_os = "linux")]
#[test]
fn system_cpu_starts_its_sampler_lazily() {
    assert!(SystemCpu::sampling().is_some());
    burn(Duration::from_millis(700));
    let usage = SystemCpu.usage();
    assert!(
        (1..=1000).contains(&usage),
        "two 250 ms samples while burning a core should move the average: {usage}"
    );
}

/// While the shedder sheds (CPU at the threshold, limit 54 in flight), the tier scales
/// the limit: with 60 in flight and the flight average above 54, a sheddable call
/// (limit 27) and a default one (54) are dropped, while critical calls are admitted up
/// to 108 in flight.
#[test]
fn shedder_drops_by_tier() {
    use resilience_runtime::priority::Priority;
    let cpu = Arc::new(FixedCpu::new(100));
    let (l, _clock) = loaded_shedder(&cpu, 500);
    let now = l.now().as_nanos();
    let mut held: Vec<_> = (0..200).map(|_| l.try_acquire(at(now)).unwrap()).collect();
    for _ in 0..60 {
        held.pop().unwrap().fail();
        held.push(l.try_acquire(at(now)).unwrap());
    }
    while held.len() > 60 {
        held.pop().unwrap().fail();
    }
    assert!(
        l.stats(at(now)).avg_in_flight > 54.0,
        "{:?}",
        l.stats(at(now))
    );
    cpu.set(500);
    let asks = |tier: Priority| l.try_acquire_for(at(now), || tier);
    assert!(asks(Priority::Sheddable).is_err());
    assert!(asks(Priority::Default).is_err());
    while held.len() < 108 {
        held.push(
            asks(Priority::Critical).expect("critical calls are admitted up to twice the limit"),
        );
    }
    // Past twice the limit a critical call is dropped too (the average permitting).
    let s = l.stats(at(now));
    assert_eq!(
        asks(Priority::Critical).is_err(),
        s.avg_in_flight > 108.0 && s.in_flight > 108
    );
}
