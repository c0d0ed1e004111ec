//! In real time, against the real Redis: the lease of a replaced cluster limit stops by
//! itself once its grace (10 s) has passed, with no further change of the point.
//!
//! The only test of its binary, because it counts the process's lease threads.

#[path = "support/redis_server.rs"]
mod redis_server;

use resilience_runtime::{Clock, ClusterLimit, Policy, Registry};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
#[test]
fn replaced_cluster_leases_stop_after_their_grace() {
    let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let limit = |quota| {
        Policy::builder()
            .cluster(ClusterLimit::Visits {
                url: redis_server::shared_url(),
                key: redis_server::unique_key("lease-chores"),
                period: Duration::from_secs(60),
                quota,
                batch: 1,
            })
            .build()
            .unwrap()
    };
    r.set_policy("chores.cluster", limit(5)).unwrap();
    assert_eq!(redis_server::lease_threads(), 1);
    r.set_policy("chores.cluster", limit(6)).unwrap();
    let replaced = Instant::now();
    r.clear_policy("chores.cluster").unwrap();
    assert_eq!(
        redis_server::lease_threads(),
        2,
        "replaced leases run on through their grace"
    );
    // The chore runs on the timing wheel (10 ms ticks) once 10 s have passed.
    redis_server::wait_for("replaced leases stopped", Duration::from_secs(20), || {
        redis_server::lease_threads() == 0
    });
    assert!(
        replaced.elapsed() >= Duration::from_millis(9_900),
        "stopped before the grace: {:?}",
        replaced.elapsed()
    );
}
