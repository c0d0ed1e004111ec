//! Waiting admission under overload, in real time: 300 calls arrive 2.5 ms apart
//! (400 a second) at a dependency that serves 2 at a time in 10 ms (200 a second), so
//! half of them cannot be served on arrival. The same arrivals meet three policies:
//!
//! * reject only: `max_concurrency(2)` refuses a call at once when both slots are
//!   taken;
//! * a queue: `max_concurrency(2).queue(32, 100ms)` lets up to 32 calls wait, first in
//!   first out, at most 100 ms each (a bulkhead with a bounded wait);
//! * pacing: `pacing(200, 100ms)` spaces calls 5 ms apart (Sentinel's rate limiter),
//!   each waiting at most 100 ms for its turn.
//!
//! For each it prints how many calls ran and were refused (by reason), and the
//! latency percentiles of the calls that ran, waiting included. Run with
//! `cargo run -p examples --example bulkhead`.

use resilience_runtime::{registry, Policy, Reason};
use std::collections::BTreeMap;
use std::sync::PoisonError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CALLS: u32 = 300;
const GAP: Duration = Duration::from_micros(2_500);
const SERVICE: Duration = Duration::from_millis(10);

/// What the calls of one run got: latencies of those that ran, refusals by reason.
#[derive(Default)]
struct Results {
    latencies: Vec<Duration>,
    refused: BTreeMap<&'static str, u32>,
}

fn run(point: &'static str, policy: Policy) -> Result<Results, Box<dyn std::error::Error>> {
    registry().set_policy(point, policy)?;
    let point = registry().point(point)?;
    // The dependency serves two at a time, whatever the admission does.
    let dependency = Arc::new((Mutex::new(0u32), std::sync::Condvar::new()));
    let results = Arc::new(Mutex::new(Results::default()));
    let start = Instant::now();
    let mut threads = Vec::new();
    for i in 0..CALLS {
        let due = start + GAP * i;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let (results, dependency) = (results.clone(), dependency.clone());
        threads.push(std::thread::spawn(move || {
            let arrived = Instant::now();
            match point.enter() {
                Ok(permit) => {
                    let (busy, freed) = &*dependency;
                    let mut n = busy.lock().unwrap_or_else(PoisonError::into_inner);
                    while *n >= 2 {
                        n = freed.wait(n).unwrap_or_else(PoisonError::into_inner);
                    }
                    *n += 1;
                    drop(n);
                    std::thread::sleep(SERVICE);
                    *busy.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
                    freed.notify_one();
                    permit.finish(false);
                    let mut r = results.lock().unwrap_or_else(PoisonError::into_inner);
                    r.latencies.push(arrived.elapsed());
                }
                Err(d) => {
                    let mut r = results.lock().unwrap_or_else(PoisonError::into_inner);
                    *r.refused.entry(d.reason().as_str()).or_default() += 1;
                }
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    let mut r = std::mem::take(&mut *results.lock().unwrap_or_else(PoisonError::into_inner));
    r.latencies.sort();
    Ok(r)
}

fn pct(sorted: &[Duration], q: f64) -> String {
    if sorted.is_empty() {
        return "-".to_owned();
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    format!("{:.1} ms", sorted[i].as_secs_f64() * 1e3)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wait = Duration::from_millis(100);
    let policies = [
        (
            "reject only",
            "example.bulkhead.reject",
            Policy::builder().max_concurrency(2).build()?,
        ),
        (
            "queue (32, 100 ms)",
            "example.bulkhead.queue",
            Policy::builder()
                .max_concurrency(2)
                .queue(32, wait)
                .build()?,
        ),
        (
            "pacing (200/s, 100 ms)",
            "example.bulkhead.pacing",
            Policy::builder().pacing(200.0, wait).build()?,
        ),
    ];
    println!(
        "{CALLS} calls {:?} apart (400/s) at a dependency of 2 x {:?} (200/s)\n",
        GAP, SERVICE
    );
    println!(
        "{:<24} {:>5} {:>8}  {:<34} {:>9} {:>9} {:>9}",
        "policy", "ran", "refused", "by reason", "p50", "p99", "max"
    );
    for (name, point, policy) in policies {
        let r = run(point, policy)?;
        let refused: u32 = r.refused.values().sum();
        let reasons = r
            .refused
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{:<24} {:>5} {:>8}  {:<34} {:>9} {:>9} {:>9}",
            name,
            r.latencies.len(),
            refused,
            reasons,
            pct(&r.latencies, 0.5),
            pct(&r.latencies, 0.99),
            pct(&r.latencies, 1.0),
        );
    }
    println!(
        "\nlatency: arrival to completion of the calls that ran, waiting included. \
         Reasons: {}, {}, {}.",
        Reason::Concurrency,
        Reason::QueueFull,
        Reason::QueueTimeout
    );
    Ok(())
}
