//! Cache-penetration protection: a flood of lookups for user ids that do not exist,
//! answered by a bloom filter instead of the database.
//!
//! The fake store counts its queries. The filter is pre-loaded with every existing id,
//! new users are added to it on write, and the example prints how many store queries
//! the guard saved.
//!
//! Run it with `cargo run -p examples --example cache_guard`.

use resilience_runtime::bloom::{BloomFilter, PenetrationGuard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

const USERS: u64 = 10_000;
const REQUESTS: u64 = 200_000;

/// A stand-in for a database table that counts how often it is queried.
struct FakeStore {
    rows: RwLock<HashMap<String, String>>,
    queries: AtomicU64,
}

impl FakeStore {
    fn get(&self, key: &str) -> Result<Option<String>, String> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        let rows = self.rows.read().map_err(|_| "store poisoned".to_string())?;
        Ok(rows.get(key).cloned())
    }

    fn put(&self, key: String, value: String) {
        if let Ok(mut rows) = self.rows.write() {
            rows.insert(key, value);
        }
    }
}

/// xorshift64*: enough randomness for an attack simulation, no dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn main() {
    let store = FakeStore {
        rows: RwLock::new(
            (0..USERS)
                .map(|id| (format!("user:{id}"), format!("User #{id}")))
                .collect(),
        ),
        queries: AtomicU64::new(0),
    };

    // Pre-load: every existing key goes into the filter before serving reads. Size it
    // with room for growth (2x) at a 1% false-positive rate.
    let filter = match BloomFilter::with_rate(2 * USERS, 0.01) {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("cannot size the filter: {err}");
            return;
        }
    };
    if let Ok(rows) = store.rows.read() {
        for key in rows.keys() {
            filter.insert(key);
        }
    }
    println!(
        "filter: {} bits ({:.1} KiB), {} hashes, for {} users",
        filter.config().bits(),
        filter.config().bits() as f64 / 8192.0,
        filter.config().hashes(),
        USERS
    );

    let guard = PenetrationGuard::new(filter, |key: &str| store.get(key));

    // A new user signs up: insert into the filter before the row becomes visible.
    let new_key = format!("user:{USERS}");
    guard.insert(&new_key);
    store.put(new_key.clone(), "New user".to_string());

    // The flood: 90% random ids far outside the table, 10% real users.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let (mut found, mut missing, mut errors) = (0u64, 0u64, 0u64);
    for _ in 0..REQUESTS {
        let r = next(&mut rng);
        let key = if r % 100 < 10 {
            format!("user:{}", r % (USERS + 1))
        } else {
            format!("user:{}", 1_000_000 + r % 1_000_000_000)
        };
        match guard.get(key.as_str()) {
            Ok(Some(_)) => found += 1,
            Ok(None) => missing += 1,
            Err(_) => errors += 1,
        }
    }
    assert_eq!(
        guard.get(new_key.as_str()),
        Ok(Some("New user".to_string()))
    );

    let stats = guard.stats();
    let queries = store.queries.load(Ordering::Relaxed);
    let requests = REQUESTS + 1;
    println!(
        "requests:              {requests:>8}  ({found} found, {missing} missing, {errors} errors)"
    );
    println!("store queries:         {queries:>8}  (without the guard: {requests})");
    println!(
        "saved by the filter:   {:>8}  ({:.1}% of all requests)",
        stats.blocked,
        100.0 * stats.blocked as f64 / requests as f64
    );
    println!(
        "false positives:       {:>8}  ({:.2}% of missing keys reached the store)",
        stats.false_positives,
        100.0 * stats.false_positives as f64 / missing.max(1) as f64
    );
}
