//! Cluster-wide limits as policy options of a point, against the real Redis.

#[path = "support/redis_server.rs"]
mod redis_server;

use resilience_runtime::{Clock, ClusterLimit, Point, Policy, Reason, Registry};
use std::time::Duration;

fn registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

/// `n` calls on `p`, 20 ms apart (time for the lease's refill thread to answer): what
/// each got.
fn calls(p: &'static Point, n: usize) -> Vec<Result<(), Reason>> {
    (0..n)
        .map(|_| {
            let outcome = p
                .enter()
                .map(|permit| permit.finish(false))
                .map_err(|d| d.reason());
            std::thread::sleep(Duration::from_millis(20));
            outcome
        })
        .collect()
}

#[test]
fn a_cluster_visits_limit_is_shared_by_two_instances() {
    let limit = ClusterLimit::Visits {
        url: redis_server::shared_url(),
        key: redis_server::unique_key("cluster-visits"),
        period: Duration::from_secs(60),
        quota: 6,
        batch: 2,
    };
    // two "instances": two registries with the same cluster limit
    let (a, b) = (registry(), registry());
    for r in [a, b] {
        let policy = Policy::builder().cluster(limit.clone()).build().unwrap();
        r.set_policy("cluster.visits", policy).unwrap();
    }
    let pa = a.point("cluster.visits").unwrap();
    let pb = b.point("cluster.visits").unwrap();
    let mut admitted = 0;
    let mut reasons = Vec::new();
    for _ in 0..10 {
        for p in [pa, pb] {
            match p.enter() {
                Ok(permit) => {
                    admitted += 1;
                    permit.finish(false);
                }
                Err(d) => reasons.push(d.reason()),
            }
        }
        // let the refill threads answer
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admitted, 6, "exactly the quota across both instances");
    assert!(
        reasons.iter().all(|r| *r == Reason::ClusterVisits),
        "{reasons:?}"
    );
}

#[test]
fn a_cluster_token_bucket_reports_its_reason() {
    let limit = ClusterLimit::TokenBucket {
        url: redis_server::shared_url(),
        key: redis_server::unique_key("cluster-tokens"),
        rate: 0.001,
        burst: 3,
        batch: 1,
    };
    let r = registry();
    r.set_policy(
        "cluster.tokens",
        Policy::builder().cluster(limit).build().unwrap(),
    )
    .unwrap();
    let outcomes = calls(r.point("cluster.tokens").unwrap(), 6);
    assert_eq!(
        outcomes.iter().filter(|o| o.is_ok()).count(),
        3,
        "{outcomes:?}"
    );
    assert!(outcomes
        .iter()
        .all(|o| o.is_ok() || *o == Err(Reason::ClusterTokenBucket)));
}

#[test]
fn invalid_cluster_settings_are_named() {
    let err = Policy::builder()
        .cluster(ClusterLimit::TokenBucket {
            url: "not a url".into(),
            key: String::new(),
            rate: f64::NAN,
            burst: 0,
            batch: 0,
        })
        .build()
        .unwrap_err();
    assert_eq!(
        err.fields(),
        [
            "cluster.rate",
            "cluster.burst",
            "cluster.url",
            "cluster.key",
            "cluster.batch"
        ]
    );
}

/// The same limit set from a policy file: the `cluster` section builds the lease and
/// the calls are limited across the cluster.
#[cfg(feature = "config")]
#[test]
fn a_cluster_limit_from_a_policy_file_is_enforced() {
    use resilience_runtime::config::Format;
    let key = redis_server::unique_key("cluster-file");
    let text = format!(
        r#"
        [points."cluster.file".cluster]
        algorithm = "visits"
        url = "{url}"
        key = "{key}"
        period = "1m"
        quota = 3
        batch = 1
        "#,
        url = redis_server::shared_url(),
    );
    let r = registry();
    let report = r.load_policies_str(&text, Format::Toml).unwrap();
    assert_eq!(report.applied, ["cluster.file"]);
    assert_eq!(
        calls(r.point("cluster.file").unwrap(), 5),
        [
            Ok(()),
            Ok(()),
            Ok(()),
            Err(Reason::ClusterVisits),
            Err(Reason::ClusterVisits)
        ]
    );
}

/// Calls on three threads while a fourth swaps the point's cluster limit 60 times and
/// moves the clock past the grace after each swap, so that leases are stopped while
/// calls that read an older policy may still be asking them. Every call is admitted
/// or downgraded by a cluster limit, the counts add up, every permit comes back, and
/// no more calls are admitted than the limits' keys allow in all.
#[test]
fn swapping_cluster_limits_under_calls() {
    use resilience_runtime::Reason;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let (manual, r, prefix) = redis_server::manual_registry("cluster-swaps");
    let url = redis_server::shared_url();
    let limit = |i: u64| {
        let cluster = if i.is_multiple_of(2) {
            ClusterLimit::Visits {
                url: url.clone(),
                key: format!("{prefix}:{i}"),
                period: Duration::from_secs(60),
                quota: 1 + i % 7,
                batch: 1 + i % 3,
            }
        } else {
            let burst = 1 + i % 5;
            ClusterLimit::TokenBucket {
                url: url.clone(),
                key: format!("{prefix}:{i}"),
                // Refills too slow to count: the bucket gives `burst` tokens, once.
                rate: 0.001,
                burst,
                batch: 1 + (i / 2) % burst,
            }
        };
        Policy::builder()
            .max_concurrency(2)
            .cluster(cluster)
            .build()
            .unwrap()
    };
    r.set_policy("cluster.swaps", limit(0)).unwrap();
    let point = r.point("cluster.swaps").unwrap();
    let done = AtomicBool::new(false);
    let (calls, admitted) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    calls.fetch_add(1, Ordering::Relaxed);
                    match point.enter() {
                        Ok(permit) => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            permit.finish(false);
                        }
                        Err(d) => assert!(
                            matches!(
                                d.reason(),
                                Reason::ClusterVisits
                                    | Reason::ClusterTokenBucket
                                    | Reason::Concurrency
                            ),
                            "{d:?}"
                        ),
                    }
                }
            });
        }
        for i in 1..=60 {
            r.set_policy("cluster.swaps", limit(i)).unwrap();
            manual.advance(Duration::from_secs(11));
            std::thread::sleep(Duration::from_millis(5));
        }
        done.store(true, Ordering::Relaxed);
    });
    let s = r.stats("cluster.swaps").unwrap();
    let calls = calls.load(Ordering::Relaxed);
    assert!(calls > 0);
    assert_eq!(s.totals.visits, calls, "every call counted once");
    assert_eq!(s.totals.passes, admitted.load(Ordering::Relaxed));
    assert_eq!(s.totals.downgrades, s.totals.downgrades_by_reason.total());
    assert_eq!(s.concurrency, 0, "every permit came back");
    assert!(s.peak_concurrency <= 2);
    // Each limit has its own key: the cluster admits at most its quota or burst.
    let most: u64 = (0..=60u64)
        .map(|i| match limit(i).cluster() {
            Some(ClusterLimit::Visits { quota, .. }) => *quota,
            Some(ClusterLimit::TokenBucket { burst, .. }) => *burst,
            _ => unreachable!("every policy here has a visits or token-bucket limit"),
        })
        .sum();
    assert!(
        (1..=most).contains(&s.totals.passes),
        "{} admitted, at most {most} allowed",
        s.totals.passes
    );
}
