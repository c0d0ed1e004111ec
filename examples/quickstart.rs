//! The main demo: annotated functions, policies set at run time, a listener, bursts
//! of calls, and a table of passes and downgrades by reason.
//!
//! Run it with `cargo run -p examples --example quickstart`.

use resilience_runtime::{downgrade, registry, Downgraded, Policy, Reason};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug)]
enum OrderError {
    OutOfStock,
    Busy(Downgraded),
}

impl From<Downgraded> for OrderError {
    fn from(d: Downgraded) -> Self {
        OrderError::Busy(d)
    }
}

/// Without a fallback: a downgrade becomes `Err(OrderError::Busy(..))`.
#[downgrade(point = "order.create")]
fn create_order(item: u32) -> Result<u64, OrderError> {
    if item.is_multiple_of(7) {
        return Err(OrderError::OutOfStock);
    }
    Ok(u64::from(item) * 100)
}

/// With a fallback: a downgrade serves the cached recommendations instead.
#[downgrade(point = "recommend.list", fallback = cached_recommendations)]
fn recommendations(user: u32) -> Vec<String> {
    std::thread::sleep(Duration::from_millis(2));
    vec![format!("fresh pick for user {user}")]
}

fn cached_recommendations(_user: u32) -> Vec<String> {
    vec!["bestsellers".to_owned()]
}

/// An async function with a default value on downgrade.
#[downgrade(point = "inventory.check", default = 0)]
async fn stock_level(sku: u32) -> u32 {
    sku % 50
}

fn main() {
    let r = registry();

    // Policies are data set at run time; a change takes effect on the next call.
    r.set_policy(
        "order.create",
        Policy::builder()
            .max_visits(40) // at most 40 admitted calls per sliding 10 s
            .max_exceptions(10)
            .build()
            .expect("valid policy"),
    )
    .unwrap();
    r.set_policy(
        "recommend.list",
        Policy::builder()
            .max_concurrency(2) // never more than 2 in flight
            .timeouts(Duration::from_millis(50), 3)
            .build()
            .unwrap(),
    )
    .unwrap();
    r.set_policy(
        "inventory.check",
        Policy::builder().token_bucket(100.0, 20).build().unwrap(),
    )
    .unwrap();

    // A listener sees every downgrade, off the calling thread.
    let events: Arc<Mutex<BTreeMap<(&'static str, Reason), u64>>> = Arc::default();
    let sink = Arc::clone(&events);
    r.add_listener(move |e| {
        *sink.lock().unwrap().entry((e.point, e.reason)).or_default() += 1;
    });

    // Burst 1: 100 orders in a row.
    let out_of_stock = AtomicU64::new(0);
    for item in 0..100 {
        if let Err(OrderError::OutOfStock) = create_order(item) {
            out_of_stock.fetch_add(1, Ordering::Relaxed);
        }
    }

    // Burst 2: 8 threads asking for recommendations at once.
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                for _ in 0..20 {
                    let _ = recommendations(t);
                }
            });
        }
    });

    // Burst 3: 200 async stock checks as fast as possible.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let zeros = runtime.block_on(async {
        let mut zeros = 0;
        for sku in 1..=200 {
            zeros += u32::from(stock_level(sku).await == 0);
        }
        zeros
    });

    // Change a policy while running: the kill switch.
    r.set_policy(
        "order.create",
        Policy::builder().max_visits(0).build().unwrap(),
    )
    .unwrap();
    match create_order(1) {
        Err(OrderError::Busy(d)) => println!("after the policy change: {d}\n"),
        other => panic!("the kill switch did not apply: {other:?}"),
    }

    println!(
        "{:<18} {:>7} {:>7} {:>10} {:>10}  downgrades by reason",
        "point", "visits", "passes", "downgrades", "exceptions"
    );
    for name in ["order.create", "recommend.list", "inventory.check"] {
        let s = r.stats(name).expect("point exists");
        let reasons: Vec<String> = s
            .totals
            .downgrades_by_reason
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        println!(
            "{:<18} {:>7} {:>7} {:>10} {:>10}  {}",
            name,
            s.totals.visits,
            s.totals.passes,
            s.totals.downgrades,
            s.totals.exceptions,
            reasons.join(" ")
        );
    }
    println!(
        "\nout-of-stock errors returned unchanged: {}; stock checks answered by the default: {zeros}",
        out_of_stock.load(Ordering::Relaxed)
    );

    // Events are delivered asynchronously; wait briefly for the queue to drain.
    let total: u64 = ["order.create", "recommend.list", "inventory.check"]
        .iter()
        .map(|n| r.stats(n).unwrap().totals.downgrades)
        .sum();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while r.delivered_events() < total && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("listener saw:");
    for ((point, reason), n) in events.lock().unwrap().iter() {
        println!("  {point:<18} {reason:<14} {n}");
    }
}
