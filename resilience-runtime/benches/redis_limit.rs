//! Redis token limiter, one round trip per call vs leasing: Redis round trips per
//! 1 000 admitted calls and admitted calls per second, against a real redis-server.
//!
//! Run with a server (scripts/redis.sh starts one and sets the variable):
//!
//! ```text
//! scripts/redis.sh cargo bench -p resilience-runtime --features redis --bench redis_limit
//! ```
//!
//! The limit is set far above what one machine can ask for (a billion tokens per
//! second), so the numbers measure the cost of asking, not the limit. Not a criterion
//! bench: each figure is one timed run, and the round-trip counts are exact.

use resilience_runtime::redis::{ClusterDecision, ClusterLease, RedisTokenLimiter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const URL_VAR: &str = "RESILIENCE_REDIS_URL";
const RATE: f64 = 1e9;
const BURST: u64 = 1_000_000_000;
const RUN: Duration = Duration::from_millis(1500);

fn key(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("resilience-bench:{name}:{}:{nanos}", std::process::id())
}

struct Row {
    mode: String,
    /// Calls made, admitted or not.
    calls: u64,
    admitted: u64,
    secs: f64,
    round_trips: u64,
}

impl Row {
    fn per_sec(&self) -> f64 {
        self.admitted as f64 / self.secs
    }
    fn ns_per_call(&self) -> f64 {
        self.secs * 1e9 / self.calls.max(1) as f64
    }
    fn trips_per_1000(&self) -> f64 {
        self.round_trips as f64 * 1000.0 / self.admitted.max(1) as f64
    }
}

/// `tasks` concurrent tasks calling `allow()` for [`RUN`].
fn per_call(url: &str, tasks: usize) -> Row {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let limiter = Arc::new(
        RedisTokenLimiter::builder(url, &key("per-call"), RATE, BURST)
            .timeout(Duration::from_secs(1))
            .build()
            .expect("limiter"),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    rt.block_on(async {
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let limiter = Arc::clone(&limiter);
            let admitted = Arc::clone(&admitted);
            let calls = Arc::clone(&calls);
            handles.push(tokio::spawn(async move {
                while start.elapsed() < RUN {
                    calls.fetch_add(1, Ordering::Relaxed);
                    if limiter.allow().await == ClusterDecision::Admitted {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        for h in handles {
            h.await.expect("task");
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let status = limiter.status();
    assert_eq!(status.to_fallback, 0, "Redis failed during the bench");
    Row {
        mode: format!("per call, {tasks} task(s)"),
        calls: calls.load(Ordering::Relaxed),
        admitted: admitted.load(Ordering::Relaxed),
        secs,
        round_trips: status.redis_calls,
    }
}

/// `threads` threads calling `try_acquire()` for [`RUN`].
fn leased(url: &str, batch: u64, threads: usize) -> Row {
    let lease = Arc::new(
        ClusterLease::token_bucket(url, &key("lease"), RATE, BURST)
            .batch(batch)
            .timeout(Duration::from_secs(1))
            .build()
            .expect("lease"),
    );
    let before = lease.status().redis_calls;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let lease = Arc::clone(&lease);
            thread::spawn(move || {
                let (mut calls, mut admitted) = (0u64, 0u64);
                while start.elapsed() < RUN {
                    calls += 64;
                    // Check the time once per 64 calls: reading it costs more than a call.
                    for _ in 0..64 {
                        if lease.try_acquire() == ClusterDecision::Admitted {
                            admitted += 1;
                        }
                    }
                }
                (calls, admitted)
            })
        })
        .collect();
    let (mut calls, mut admitted) = (0, 0);
    for h in handles {
        let (c, a) = h.join().expect("thread");
        calls += c;
        admitted += a;
    }
    let secs = start.elapsed().as_secs_f64();
    let status = lease.status();
    assert_eq!(status.to_fallback, 0, "Redis failed during the bench");
    Row {
        mode: format!("lease batch {batch}, {threads} thread(s)"),
        calls,
        admitted,
        secs,
        round_trips: status.redis_calls - before,
    }
}

fn main() {
    let Ok(url) = std::env::var(URL_VAR) else {
        println!(
            "redis_limit bench: {URL_VAR} is not set, nothing measured. Run it against a \
             real redis-server with\n  scripts/redis.sh cargo bench -p resilience-runtime \
             --features redis --bench redis_limit"
        );
        return;
    };
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run passes
    // nothing and should stay short.
    if !std::env::args().any(|a| a == "--bench") {
        println!("redis_limit bench: run with `cargo bench` to measure");
        return;
    }
    let rows = [
        per_call(&url, 1),
        per_call(&url, 32),
        leased(&url, 10, 1),
        leased(&url, 100, 1),
        leased(&url, 100, 2),
    ];
    println!(
        "{:<28} {:>11} {:>11} {:>14} {:>10} {:>18}",
        "mode", "calls", "admitted", "admitted/s", "ns/call", "round trips/1000"
    );
    for r in &rows {
        println!(
            "{:<28} {:>11} {:>11} {:>14.0} {:>10.0} {:>18.1}",
            r.mode,
            r.calls,
            r.admitted,
            r.per_sec(),
            r.ns_per_call(),
            r.trips_per_1000()
        );
    }
    println!("(round trips per 1000 admitted calls; a lease's calls beyond its batches are rejected at once)");
    let base = &rows[0];
    for r in &rows[1..] {
        println!(
            "{}: {:.1}x the admitted calls/s of one task per call, {:.1}x fewer round trips per call",
            r.mode,
            r.per_sec() / base.per_sec(),
            base.trips_per_1000() / r.trips_per_1000().max(f64::MIN_POSITIVE)
        );
    }
}
