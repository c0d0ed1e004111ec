//! Background work of idle timed points: registers 100 000 points with a timeout rule,
//! gives each one call (or none), then measures the CPU the process spends in
//! consecutive 3 s windows after the last call, up to 21 s, and the memory each point
//! holds.
//!
//! The bound: from 3 s after the last call, points that were each called once cost
//! under 0.5% of a core, and points never called cost nothing (what is left is the
//! measuring itself). Background work follows traffic, not the number of points that
//! ever had any.
//!
//! Run with `cargo run --release -p examples --example idle_points [points] [called]
//! [windows]`: `called` = 1 makes one timed call on every point first, 0 none; without
//! it, both runs are made, each in a process of its own. `windows` (default 7) sets
//! how many 3 s windows are measured.

use resilience_runtime::{registry, Policy};
use std::time::{Duration, Instant};

/// The bound on the CPU share of idle points from [`SETTLE`] after the last call.
const BOUND_PERCENT: f64 = 0.5;
/// When the bound starts to hold: the last seconds of the calls close meanwhile.
const SETTLE: Duration = Duration::from_secs(3);
/// The length of a measuring window.
const WINDOW: Duration = Duration::from_secs(3);
/// How many windows are measured by default (up to 21 s after the last call).
const WINDOWS: u32 = 7;

/// CPU time of this process (user + system, every thread), to the nanosecond.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of each thread of the process by name, in clock ticks, from
/// `/proc/self/task/*/stat` (coarse, for the breakdown only).
fn thread_ticks() -> Vec<(String, u64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // The name is in parentheses; utime and stime are the 12th and 13th fields
        // after it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            out.push((
                format!("{name}/{}", task.file_name().to_string_lossy()),
                user + system,
            ));
        }
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let points: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let called = args.next();
    let windows: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(WINDOWS);
    match called.as_deref() {
        Some("1") => run(points, true, windows),
        Some(_) => run(points, false, windows),
        None => {
            // Both runs, each in a fresh process: the registry is process-wide.
            let me = std::env::current_exe().expect("the example's path");
            for called in ["1", "0"] {
                let status = std::process::Command::new(&me)
                    .args([points.to_string().as_str(), called])
                    .status()
                    .expect("the example runs");
                assert!(status.success(), "the run with called = {called} failed");
            }
        }
    }
}

fn run(points: usize, called: bool, windows: u32) {
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
    let (last_call, cpu_at_last_call) = (Instant::now(), cpu_time());
    let memory: usize = (0..points.min(1000))
        .map(|i| {
            registry()
                .point(&format!("idle.{i}"))
                .unwrap()
                .memory_bytes()
        })
        .sum::<usize>()
        / points.clamp(1, 1000);
    println!(
        "{points} timed points, {}; {memory} B per point; CPU share of a core after the \
         last call (bound: under {BOUND_PERCENT}% from {} s on, 0 if never called):",
        if called {
            "one call each"
        } else {
            "never called"
        },
        SETTLE.as_secs(),
    );
    let mut threads_at_settle = Vec::new();
    let mut over = 0;
    let (mut cpu0, mut t0) = (cpu_at_last_call, last_call);
    for k in 1..=windows {
        let end = last_call + WINDOW * k;
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let (cpu, now) = (cpu_time(), Instant::now());
        let share = (cpu - cpu0).as_secs_f64() / (now - t0).as_secs_f64() * 100.0;
        let from = (t0 - last_call).as_secs_f64().round();
        let bound = if t0 - last_call + Duration::from_millis(500) < SETTLE {
            "(settling)"
        } else if share < BOUND_PERCENT {
            "ok"
        } else {
            over += 1;
            "OVER"
        };
        println!(
            "  {from:>2.0}-{:>2.0} s: {share:6.3}% {bound}",
            (now - last_call).as_secs_f64().round()
        );
        if t0 == last_call {
            threads_at_settle = thread_ticks();
        }
        (cpu0, t0) = (cpu, now);
    }
    // Which threads spent the CPU after the settling window (10 ms ticks).
    let busy: Vec<String> = thread_ticks()
        .into_iter()
        .filter_map(|(name, ticks)| {
            let before = threads_at_settle
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, t)| *t);
            (ticks > before).then(|| format!("{name} {} ms", (ticks - before) * 10))
        })
        .collect();
    println!(
        "  threads after {} s: {}",
        SETTLE.as_secs(),
        if busy.is_empty() {
            "none measurable".to_string()
        } else {
            busy.join(", ")
        }
    );
    println!(
        "  {}",
        if over == 0 {
            "within the bound".to_string()
        } else {
            format!("{over} window(s) over the bound")
        }
    );
}
