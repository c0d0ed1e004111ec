//! Bloom filter: go-zero compatibility vectors, false-positive rates, concurrency and
//! the cache-penetration guard.

use resilience_runtime::bloom::{
    murmur3_x64_128, BloomConfig, BloomError, BloomFilter, GuardStats, HashScheme,
    PenetrationGuard, GO_ZERO_HASHES,
};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

// ---- go-zero compatibility -------------------------------------------------------

#[test]
fn murmur3_sum64_matches_spaolacci_vectors() {
    let cases: [(&str, u64); 4] = [
        ("", 0),
        ("hello", 0xcbd8_a7b3_41bd_9b02),
        ("hello, world", 0x342f_ac62_3a5e_bc8e),
        (
            "The quick brown fox jumps over the lazy dog.",
            0xcd99_481f_9ee9_02c9,
        ),
    ];
    for (data, want) in cases {
        let (h1, _) = murmur3_x64_128(data.as_bytes(), 0);
        assert_eq!(h1, want, "Sum64({data:?}) = {h1:#x}, want {want:#x}");
    }
}

#[test]
fn go_zero_golden_positions() {
    let at = |bits: u64, key: &str| -> Vec<u64> {
        BloomConfig::builder()
            .bits(bits)
            .scheme(HashScheme::GoZero)
            .build()
            .unwrap()
            .positions(key.as_bytes())
            .collect()
    };
    assert_eq!(
        at(64, "hello"),
        [51, 34, 34, 19, 23, 2, 10, 0, 20, 32, 13, 25, 51, 53]
    );
    assert_eq!(
        at(64, "world"),
        [7, 46, 46, 5, 27, 22, 12, 19, 53, 30, 44, 25, 16, 28]
    );
    assert_eq!(
        at(1024, "hello"),
        [307, 802, 866, 915, 983, 770, 138, 576, 596, 224, 781, 153, 819, 373]
    );
    assert_eq!(at(1024, "hello").len(), GO_ZERO_HASHES as usize);
}

#[test]
fn go_zero_hello_world_in_64_bits() {
    let filter = BloomFilter::go_zero(64).unwrap();
    filter.insert("hello");
    filter.insert("world");
    assert_eq!(filter.count_ones(), 22);
    let distinct: BTreeSet<u64> = filter
        .positions(b"hello")
        .chain(filter.positions(b"world"))
        .collect();
    assert_eq!(distinct.len(), 22);
    assert!(filter.contains("hello"));
    assert!(filter.contains("world"));
    for absent in ["kevin", "foo", "bar", "go-zero", "hello!"] {
        assert!(!filter.contains(absent), "{absent} should be absent");
    }
}

#[test]
fn go_zero_bitmap_is_in_redis_setbit_order() {
    // What go-zero's `SETBIT key offset 1` for "hello" at 64 bits leaves in Redis.
    let filter = BloomFilter::go_zero(64).unwrap();
    filter.insert("hello");
    let mut redis = [0u8; 8];
    for offset in [51u64, 34, 34, 19, 23, 2, 10, 0, 20, 32, 13, 25, 51, 53] {
        redis[(offset / 8) as usize] |= 0x80 >> (offset % 8);
    }
    assert_eq!(filter.to_bitmap_bytes(), redis);

    // And a bitmap read back from Redis (GET) answers the same.
    let copy = BloomFilter::from_bitmap_bytes(*filter.config(), &redis).unwrap();
    assert!(copy.contains("hello"));
    assert!(!copy.contains("kevin"));
}

#[test]
fn go_zero_mode_has_fourteen_hashes_and_its_documented_rate() {
    // go-zero's advice: 20 bits per element with 14 hashes, under 1e-4 false positives.
    let n = 10_000u64;
    let filter = BloomFilter::go_zero(20 * n).unwrap();
    assert_eq!(filter.config().hashes(), 14);
    assert_eq!(filter.config().scheme(), HashScheme::GoZero);
    for i in 0..n {
        filter.insert(key(b'g', i));
    }
    let queries = 50_000u64;
    let fp = (0..queries)
        .filter(|&i| filter.contains(key(b'q', i)))
        .count();
    // Expected about 3.4; 20 would be 4e-4.
    assert!(fp < 20, "{fp} false positives in {queries}");
    assert!(filter.expected_fpr(n) < 1e-4);
}

// ---- sizing ----------------------------------------------------------------------

#[test]
fn invalid_parameters_are_named_errors() {
    let cases: Vec<(Result<BloomFilter, BloomError>, &str)> = vec![
        (BloomFilter::with_bits(0, 3), "`bits`"),
        (BloomFilter::with_bits(64, 0), "`hashes`"),
        (BloomFilter::go_zero(0), "`bits`"),
        (BloomFilter::with_rate(0, 0.01), "`expected_items`"),
        (BloomFilter::with_rate(100, 0.0), "`false_positive_rate`"),
        (BloomFilter::with_rate(100, 1.0), "`false_positive_rate`"),
        (BloomFilter::with_rate(100, -1.0), "`false_positive_rate`"),
        (
            BloomFilter::with_rate(100, f64::NAN),
            "`false_positive_rate`",
        ),
    ];
    for (result, name) in cases {
        let err = result.unwrap_err();
        assert!(err.to_string().contains(name), "{err} should name {name}");
    }
}

#[test]
fn tiny_filters_work() {
    let filter = BloomFilter::with_bits(1, 1).unwrap();
    assert!(!filter.contains("a"));
    filter.insert("a");
    assert!(filter.contains("a") && filter.contains("anything"));
}

// ---- false-positive rates --------------------------------------------------------

/// A distinct key per (tag, i): inserted and queried keys use different tags.
fn key(tag: u8, i: u64) -> [u8; 9] {
    let mut k = [tag; 9];
    k[1..].copy_from_slice(&i.to_le_bytes());
    k
}

/// Inserts `n` keys, queries `n` others, returns the observed false-positive rate.
fn observed_fpr(filter: &BloomFilter, n: u64) -> f64 {
    for i in 0..n {
        filter.insert(key(b'i', i));
    }
    let fp = (0..n).filter(|&i| filter.contains(key(b'q', i))).count();
    fp as f64 / n as f64
}

#[test]
fn observed_false_positive_rate_is_within_1_3x_of_target() {
    // 100 000 keys: at p = 0.1% about 100 false positives are expected (sd 10), so the
    // 1.3x band is 3 standard deviations wide; at 1% and 10% it is far wider. Keys are
    // fixed, so the test is deterministic.
    let n = 100_000;
    for p in [0.001, 0.01, 0.1] {
        let filter = BloomFilter::with_rate(n, p).unwrap();
        // No false negatives.
        let observed = observed_fpr(&filter, n);
        for i in (0..n).step_by(97) {
            assert!(filter.contains(key(b'i', i)));
        }
        let c = filter.config();
        assert!(
            observed <= p * 1.3 && observed >= p / 1.3,
            "p = {p}: observed {observed} with {} bits, k = {}",
            c.bits(),
            c.hashes()
        );
    }
}

// ---- concurrency -----------------------------------------------------------------

#[test]
fn concurrent_inserts_and_lookups_never_give_false_negatives() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 20_000;
    let filter = Arc::new(BloomFilter::with_rate(THREADS * PER_THREAD, 0.01).unwrap());
    // Each writer publishes how many of its keys are in; readers check every published
    // key while writers are still going.
    let published: Arc<Vec<AtomicU64>> =
        Arc::new((0..THREADS).map(|_| AtomicU64::new(0)).collect());
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (filter, published) = (Arc::clone(&filter), Arc::clone(&published));
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    filter.insert(key(t as u8, i));
                    published[t as usize].store(i + 1, Ordering::Release);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (filter, published) = (Arc::clone(&filter), Arc::clone(&published));
            std::thread::spawn(move || {
                let mut checked = 0u64;
                while published
                    .iter()
                    .any(|p| p.load(Ordering::Acquire) < PER_THREAD)
                {
                    for t in 0..THREADS {
                        let upto = published[t as usize].load(Ordering::Acquire);
                        if upto > 0 {
                            let i = upto - 1;
                            assert!(filter.contains(key(t as u8, i)), "thread {t} key {i}");
                            checked += 1;
                        }
                    }
                }
                checked
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for r in readers {
        r.join().unwrap();
    }
    for t in 0..THREADS {
        for i in 0..PER_THREAD {
            assert!(filter.contains(key(t as u8, i)), "thread {t} key {i}");
        }
    }
}

#[test]
fn filter_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<BloomFilter>();
    assert_send_sync::<PenetrationGuard<fn(&str) -> Result<Option<u8>, ()>>>();
}

// ---- penetration guard -----------------------------------------------------------

#[test]
fn guard_skips_the_loader_for_unknown_keys() {
    let store: HashMap<String, String> = (0..1_000)
        .map(|i| (format!("user:{i}"), format!("name {i}")))
        .collect();
    let filter = BloomFilter::with_rate(2_000, 0.01).unwrap();
    for k in store.keys() {
        filter.insert(k);
    }
    let calls = AtomicU64::new(0);
    let guard = PenetrationGuard::new(filter, |k: &str| {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok::<_, String>(store.get(k).cloned())
    });

    for i in 0..1_000 {
        assert_eq!(
            guard.get(format!("user:{i}").as_str()),
            Ok(Some(format!("name {i}")))
        );
    }
    let mut absent = 0;
    for i in 1_000..11_000 {
        assert_eq!(guard.get(format!("user:{i}").as_str()), Ok(None));
        absent += 1;
    }
    let stats = guard.stats();
    assert_eq!(stats.loaded, calls.load(Ordering::Relaxed));
    assert_eq!(stats.blocked + stats.loaded, 1_000 + absent);
    assert_eq!(stats.loaded, 1_000 + stats.false_positives);
    // About 1% of the 10 000 missing keys get through.
    assert!(stats.false_positives < 200, "{stats:?}");
}

#[test]
fn guard_sees_keys_inserted_on_write_and_passes_errors_through() {
    let guard = PenetrationGuard::new(BloomFilter::with_rate(100, 0.01).unwrap(), |k: &[u8]| {
        if k == b"broken" {
            Err("store down")
        } else {
            Ok(Some(k.len()))
        }
    });
    assert_eq!(guard.get(&b"new"[..]), Ok(None));
    assert!(!guard.may_contain(b"new"));
    guard.insert(b"new");
    assert!(guard.may_contain(b"new"));
    assert_eq!(guard.get(&b"new"[..]), Ok(Some(3)));
    guard.insert(b"broken");
    assert_eq!(guard.get(&b"broken"[..]), Err("store down"));
    let stats: GuardStats = guard.stats();
    assert_eq!(
        (stats.blocked, stats.loaded, stats.false_positives),
        (1, 2, 0)
    );
}
