//! The cluster lease (`redis` feature), against the real Redis named by
//! `RESILIENCE_REDIS_URL` (`bash scripts/test.sh` starts one): a visits lease admits
//! at most `quota` calls per Redis window however many threads spend it, and, being
//! the only one on its key and drained to the end, exactly `quota`.
//!
//! Without `RESILIENCE_REDIS_URL` the test fails, saying how to run it: it must not
//! pass without a Redis.

#[path = "../support/redis_server.rs"]
mod redis_server;

use crate::support::*;
use redis_server::{shared_url, unique_key, URL_VAR};
use resilience_runtime::redis::{ClusterDecision, ClusterLease};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// The lease's window: far longer than a case, so that every case runs in one.
const PERIOD: Duration = Duration::from_secs(60);
const QUOTA: u64 = 500;
const BATCH: u64 = 20;
/// Each Redis call's bound: generous, so a busy machine does not send the lease to its
/// fallback (which the case would count as a failure).
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// The most a case may take; only reached if the quota is never spent.
const DEADLINE: Duration = Duration::from_secs(10);
/// The most calls one thread makes.
const MAX_ATTEMPTS: u64 = 1_000_000;
/// Once the quota is spent, each thread goes on until it has seen this many more
/// rejections and [`LINGER`] has passed, to catch any token granted past the quota.
const AFTER_FULL: u64 = 20;
const LINGER: Duration = Duration::from_millis(20);
/// A rejected caller sleeps this long, leaving the CPUs to the refill thread (whose
/// batches are asynchronous: a dry lease rejects until the next one lands).
const PAUSE: Duration = Duration::from_micros(100);

/// The shared server's URL, or a failure saying how to get one.
fn url() -> String {
    if std::env::var(URL_VAR).map_or(true, |u| u.trim().is_empty()) {
        panic!(
            "{URL_VAR} is not set: the cluster case of the concurrency matrix needs a real \
             redis-server and must not pass without one. Run `bash scripts/test.sh`, or \
             `bash scripts/redis.sh cargo test -p resilience-runtime --all-features --test exactness`"
        );
    }
    shared_url()
}

/// What the callers of one lease saw.
#[derive(Default)]
struct Decisions {
    admitted: AtomicU64,
    rejected: AtomicU64,
    admitted_locally: AtomicU64,
    refused_locally: AtomicU64,
    calls: AtomicU64,
}

fn visits_lease_case(v: &Verdicts, url: &str, threads: usize) {
    let key = unique_key(&format!("exactness-visits-{threads}"));
    let case = Case::new(
        format!("ClusterLease::visits({PERIOD:?}, quota {QUOTA}), batch {BATCH}"),
        Shape::Direct,
        threads,
        false,
    );
    let lease = ClusterLease::visits(url, &key, PERIOD, QUOTA)
        .batch(BATCH)
        .timeout(REDIS_TIMEOUT)
        // Fail closed: an outage must not admit calls the bound does not cover.
        .fallback_share(0.0)
        .build()
        .unwrap_or_else(|e| panic!("{case}: building the lease: {e}"));
    let seen = Decisions::default();
    let full_at = OnceLock::<Instant>::new();
    let start = Barrier::new(threads);
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (lease, seen, full_at, start) = (&lease, &seen, &full_at, &start);
            s.spawn(move || {
                start.wait();
                let (mut calls, mut after_full) = (0, 0);
                while calls < MAX_ATTEMPTS && began.elapsed() < DEADLINE {
                    calls += 1;
                    match lease.try_acquire() {
                        ClusterDecision::Admitted => {
                            if seen.admitted.fetch_add(1, Ordering::SeqCst) + 1 == QUOTA {
                                let _ = full_at.set(Instant::now());
                            }
                        }
                        ClusterDecision::Refused => {
                            seen.rejected.fetch_add(1, Ordering::SeqCst);
                            if let Some(full) = full_at.get() {
                                after_full += 1;
                                if after_full >= AFTER_FULL && full.elapsed() >= LINGER {
                                    break;
                                }
                            }
                            std::thread::sleep(PAUSE);
                        }
                        ClusterDecision::AdmittedLocally => {
                            seen.admitted_locally.fetch_add(1, Ordering::SeqCst);
                        }
                        ClusterDecision::RefusedLocally => {
                            seen.refused_locally.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(PAUSE);
                        }
                    }
                }
                seen.calls.fetch_add(calls, Ordering::SeqCst);
            });
        }
    });
    let took = began.elapsed();
    let load = |c: &AtomicU64| c.load(Ordering::SeqCst);
    let (admitted, rejected) = (load(&seen.admitted), load(&seen.rejected));
    let (admitted_locally, refused_locally) =
        (load(&seen.admitted_locally), load(&seen.refused_locally));
    v.check(admitted <= QUOTA, || {
        format!("{case}: {admitted} calls admitted in one Redis window, at most {QUOTA} may be")
    });
    v.check(admitted >= QUOTA, || {
        format!(
            "{case}: only {admitted} of the quota of {QUOTA} admitted in {took:?} ({rejected} \
             rejections): one lease alone on its key, drained until it refuses, spends all of it"
        )
    });
    let status = lease.status();
    v.check(
        status.to_fallback == 0 && admitted_locally == 0 && refused_locally == 0,
        || {
            format!(
                "{case}: the lease fell back {} time(s) ({admitted_locally} admitted and \
                 {refused_locally} rejected locally): Redis did not answer within \
                 {REDIS_TIMEOUT:?}, so the case says nothing about the bound",
                status.to_fallback
            )
        },
    );
    v.check(
        status.admitted == admitted && status.refused == rejected,
        || {
            format!(
                "{case}: the callers saw {admitted} admitted and {rejected} rejected, the \
                 lease counted {} and {}",
                status.admitted, status.refused
            )
        },
    );
    v.check(
        admitted + rejected + admitted_locally + refused_locally == load(&seen.calls),
        || {
            format!(
                "{case}: {} calls, not every one decided once",
                load(&seen.calls)
            )
        },
    );
    v.check(status.held == 0, || {
        format!("{case}: {} leased tokens left unspent", status.held)
    });
    // Every token spent was taken from Redis first.
    let counted: Option<u64> = ::redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .and_then(|mut conn| ::redis::cmd("GET").arg(&key).query(&mut conn))
        .unwrap_or_else(|e| panic!("{case}: GET {key}: {e}"));
    let counted = counted.unwrap_or(0);
    v.check(counted >= admitted, || {
        format!("{case}: {admitted} calls admitted, but Redis counted only {counted} visits")
    });
}

#[test]
fn a_visits_lease_admits_at_most_its_quota_per_window() {
    let url = url();
    let v = Verdicts::default();
    for threads in THREADS {
        visits_lease_case(&v, &url, threads);
    }
    v.conclude();
}
