//! The Redis bloom filter against a real `redis-server`: round trips, layout
//! equality with the in-memory filter (go-zero mode included), expiry, delete, errors,
//! and Redis being killed, paused and restarted mid-run.
//!
//! Most tests use the shared server named by `RESILIENCE_REDIS_URL` (started by
//! `scripts/test.sh`), each under its own key; the outage tests start private servers.
//! Without `RESILIENCE_REDIS_URL` the shared-server tests fail and say how to run them.

#[path = "support/redis_server.rs"]
mod redis_server;

use redis_server::{free_port, query, raw, shared_url, unique_key, RedisServer};
use resilience_runtime::bloom::{BloomConfig, BloomError, BloomFilter, HashScheme};
use resilience_runtime::redis::{Expiry, RedisBloom, RedisBloomError, RedisFailure, MAX_BITS};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The raw bytes at `key` (`GET`), empty if missing.
async fn get_bytes(conn: &mut ::redis::aio::MultiplexedConnection, key: &str) -> Vec<u8> {
    query::<Option<Vec<u8>>>(conn, ::redis::cmd("GET").arg(key))
        .await
        .unwrap_or_default()
}

/// Asserts that the Redis string `stored` holds the bits of `expected` (from
/// `to_bitmap_bytes`). Redis keeps a bitmap only up to the last byte a `SETBIT` has
/// touched, so `stored` may be shorter; the missing bytes are zero.
fn assert_same_bitmap(stored: &[u8], expected: &[u8]) {
    assert!(
        stored.len() <= expected.len(),
        "Redis holds {} bytes, the filter has {}",
        stored.len(),
        expected.len()
    );
    let mut padded = stored.to_vec();
    padded.resize(expected.len(), 0);
    assert_eq!(padded, expected);
}

#[tokio::test]
async fn insert_then_contains_round_trip() {
    let url = shared_url();
    let key = unique_key("round-trip");
    let filter = RedisBloom::with_rate(&url, key.as_str(), 1_000, 0.01).unwrap();
    let mut conn = raw(&url).await;

    assert!(!filter.contains("user:0").await.unwrap(), "empty filter");
    for i in 0..300 {
        let item = format!("user:{i}");
        filter.insert(&item).await.unwrap();
        assert!(filter.contains(&item).await.unwrap(), "{item} lost");
    }
    // No false negatives, on a second pass either.
    for i in 0..300 {
        assert!(filter.contains(format!("user:{i}")).await.unwrap());
    }
    // Inserting again sets no new bit, as in memory.
    assert!(!filter.insert("user:7").await.unwrap());
    assert!(filter.insert("never-seen-before").await.unwrap());

    // The bits Redis holds are the ones the filter reports.
    let ones: u64 = query(&mut conn, ::redis::cmd("BITCOUNT").arg(&key)).await;
    let snapshot = filter.snapshot().await.unwrap();
    assert_eq!(snapshot.count_ones(), ones);
    assert!(snapshot.contains("user:299"));
    assert!(filter.delete().await.unwrap());
}

#[tokio::test]
async fn answers_match_the_in_memory_filter_and_false_positives_are_near_target() {
    let url = shared_url();
    let key = unique_key("fpr");
    let (n, p) = (2_000u64, 0.01);
    let filter = RedisBloom::with_rate(&url, key.as_str(), n, p).unwrap();
    let local = BloomFilter::with_rate(n, p).unwrap();
    for i in 0..n {
        let item = format!("present:{i}");
        let new_in_redis = filter.insert(&item).await.unwrap();
        assert_eq!(new_in_redis, local.insert(&item), "insert({item})");
    }
    let probes = 3_000;
    let mut false_positives = 0u32;
    for i in 0..probes {
        let item = format!("absent:{i}");
        let in_redis = filter.contains(&item).await.unwrap();
        // Same layout, same bits: every answer must agree with memory.
        assert_eq!(in_redis, local.contains(&item), "contains({item})");
        false_positives += u32::from(in_redis);
    }
    let rate = f64::from(false_positives) / f64::from(probes);
    // Expected about 1%; 3 000 probes put 3% far out in the tail.
    assert!(
        rate > 0.0 && rate < 0.03,
        "false-positive rate {rate} for target {p}"
    );
    assert!(filter.delete().await.unwrap());
}

#[tokio::test]
async fn go_zero_layout_is_byte_for_byte_the_in_memory_one() {
    let url = shared_url();
    let mut conn = raw(&url).await;

    // go-zero's own test case: "hello" and "world" in 64 bits set 22 distinct bits,
    // and these five keys test absent.
    let key = unique_key("go-zero-64");
    let filter = RedisBloom::go_zero(&url, key.as_str(), 64).unwrap();
    let local = BloomFilter::go_zero(64).unwrap();
    for item in ["hello", "world"] {
        filter.insert(item).await.unwrap();
        local.insert(item);
    }
    assert_same_bitmap(&get_bytes(&mut conn, &key).await, &local.to_bitmap_bytes());
    let ones: u64 = query(&mut conn, ::redis::cmd("BITCOUNT").arg(&key)).await;
    assert_eq!(ones, 22);
    for item in ["kevin", "foo", "bar", "go-zero", "hello!"] {
        assert!(!filter.contains(item).await.unwrap(), "{item}");
    }
    assert!(filter.contains("hello").await.unwrap());

    // "hello" in 1024 bits lands on go-zero's 14 offsets, read back with GETBIT.
    let key = unique_key("go-zero-1024");
    let filter = RedisBloom::go_zero(&url, key.as_str(), 1024).unwrap();
    filter.insert("hello").await.unwrap();
    let golden = [
        307u64, 802, 866, 915, 983, 770, 138, 576, 596, 224, 781, 153, 819, 373,
    ];
    for offset in golden {
        let bit: u8 = query(&mut conn, ::redis::cmd("GETBIT").arg(&key).arg(offset)).await;
        assert_eq!(bit, 1, "offset {offset}");
    }
    let ones: u64 = query(&mut conn, ::redis::cmd("BITCOUNT").arg(&key)).await;
    assert_eq!(ones, 14);
    assert!(filter.delete().await.unwrap());

    // Many keys, an odd size (a partial last byte) and both hashing modes.
    for config in [
        BloomConfig::builder()
            .bits(10_007)
            .scheme(HashScheme::GoZero)
            .build()
            .unwrap(),
        BloomConfig::builder()
            .expected_items(500)
            .false_positive_rate(0.01)
            .build()
            .unwrap(),
    ] {
        let key = unique_key("layout");
        let filter = RedisBloom::new(&url, key.as_str(), config).unwrap();
        let local = BloomFilter::new(config).unwrap();
        for i in 0..500u32 {
            filter.insert(i.to_be_bytes()).await.unwrap();
            local.insert(i.to_be_bytes());
        }
        let expected = local.to_bitmap_bytes();
        assert_same_bitmap(&get_bytes(&mut conn, &key).await, &expected);
        // And back: the snapshot is the in-memory filter.
        assert_eq!(filter.snapshot().await.unwrap().to_bitmap_bytes(), expected);
        assert!(filter.delete().await.unwrap());
    }
}

/// Builds a filter with a 100 s `expiry`, inserts one item, shortens the key's time to
/// live to 5 s behind the filter's back, inserts another and returns the time to live
/// (ms) the second insert left.
async fn ttl_after_second_insert(
    url: &str,
    conn: &mut ::redis::aio::MultiplexedConnection,
    name: &str,
    config: BloomConfig,
    expiry: impl FnOnce(Duration) -> Expiry,
) -> i64 {
    let key = unique_key(name);
    let filter = RedisBloom::builder(url, key.as_str(), config)
        .expiry(expiry(Duration::from_secs(100)))
        .build()
        .unwrap();
    filter.insert("a").await.unwrap();
    let pttl: i64 = query(conn, ::redis::cmd("PTTL").arg(&key)).await;
    assert!(pttl > 90_000 && pttl <= 100_000, "{name}: {pttl}");
    let _: i64 = query(conn, ::redis::cmd("PEXPIRE").arg(&key).arg(5_000)).await;
    filter.insert("b").await.unwrap();
    let pttl: i64 = query(conn, ::redis::cmd("PTTL").arg(&key)).await;
    filter.delete().await.unwrap();
    pttl
}
#[tokio::test]
async fn expiry_is_set_on_insert() {
    let url = shared_url();
    let mut conn = raw(&url).await;
    let config = BloomConfig::builder().bits(256).hashes(3).build().unwrap();

    // Never: no time to live.
    let key = unique_key("expiry-never");
    let filter = RedisBloom::new(&url, key.as_str(), config).unwrap();
    filter.insert("a").await.unwrap();
    let pttl: i64 = query(&mut conn, ::redis::cmd("PTTL").arg(&key)).await;
    assert_eq!(pttl, -1);
    filter.delete().await.unwrap();

    // After the last insert: every insert resets the time to live.
    let ttl = ttl_after_second_insert(&url, &mut conn, "expiry-sliding", config, |ttl| {
        Expiry::AfterLastInsert(ttl)
    })
    .await;
    assert!(ttl > 90_000, "sliding expiry not reset: {ttl}");

    // After the first insert: later inserts leave the time to live alone.
    let ttl = ttl_after_second_insert(&url, &mut conn, "expiry-fixed", config, |ttl| {
        Expiry::AfterFirstInsert(ttl)
    })
    .await;
    assert!(ttl > 0 && ttl <= 5_000, "fixed expiry was reset: {ttl}");

    // A real expiry: the filter is empty once the time to live has passed.
    let key = unique_key("expiry-real");
    let filter = RedisBloom::builder(&url, key.as_str(), config)
        .expiry(Expiry::AfterLastInsert(Duration::from_millis(300)))
        .build()
        .unwrap();
    filter.insert("short-lived").await.unwrap();
    assert!(filter.contains("short-lived").await.unwrap());
    let start = Instant::now();
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(
        !filter.contains("short-lived").await.unwrap(),
        "still present {:?} after insert with a 300 ms expiry",
        start.elapsed()
    );
    let exists: i64 = query(&mut conn, ::redis::cmd("EXISTS").arg(&key)).await;
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn delete_empties_the_filter() {
    let url = shared_url();
    let key = unique_key("delete");
    let filter = RedisBloom::with_rate(&url, key.as_str(), 100, 0.01).unwrap();
    let other = RedisBloom::with_rate(&url, key.as_str(), 100, 0.01).unwrap();
    filter.insert("x").await.unwrap();
    assert!(other.contains("x").await.unwrap(), "shared by key");
    assert!(filter.delete().await.unwrap());
    assert!(!other.contains("x").await.unwrap());
    assert!(
        !filter.delete().await.unwrap(),
        "second delete finds nothing"
    );
    assert_eq!(filter.snapshot().await.unwrap().count_ones(), 0);
}

#[tokio::test]
async fn zero_size_and_out_of_range_offsets_are_errors_before_any_write() {
    let url = shared_url();
    let key = unique_key("invalid");
    let mut conn = raw(&url).await;

    assert_eq!(
        RedisBloom::go_zero(&url, key.as_str(), 0).unwrap_err(),
        RedisBloomError::Bloom(BloomError::ZeroBits)
    );
    assert_eq!(
        RedisBloom::with_rate(&url, key.as_str(), 0, 0.01).unwrap_err(),
        RedisBloomError::Bloom(BloomError::ZeroItems)
    );
    let huge = BloomConfig::builder()
        .bits(MAX_BITS + 8)
        .hashes(3)
        .build()
        .unwrap();
    assert!(matches!(
        RedisBloom::new(&url, key.as_str(), huge).unwrap_err(),
        RedisBloomError::TooManyBits { .. }
    ));

    let filter = RedisBloom::go_zero(&url, key.as_str(), 64).unwrap();
    let err = filter.insert_positions(&[3, 64, 5]).await.unwrap_err();
    assert_eq!(
        err,
        RedisBloomError::OffsetOutOfRange {
            offset: 64,
            bits: 64
        }
    );
    assert!(!err.is_redis_failure());
    assert!(err.to_string().contains("`bits`"), "{err}");
    let err = filter.contains_positions(&[u64::MAX]).await.unwrap_err();
    assert!(matches!(err, RedisBloomError::OffsetOutOfRange { .. }));
    // Nothing reached Redis: not even the valid offset 3.
    let exists: i64 = query(&mut conn, ::redis::cmd("EXISTS").arg(&key)).await;
    assert_eq!(exists, 0);

    // In-range positions work, and match the item API.
    let hello: Vec<u64> = filter.config().positions(b"hello").collect();
    assert!(filter.insert_positions(&hello).await.unwrap());
    assert!(filter.contains("hello").await.unwrap());
    assert!(filter.contains_positions(&hello).await.unwrap());
    assert!(!filter.contains_positions(&[63, 62, 61, 60]).await.unwrap());
    filter.delete().await.unwrap();
}

#[tokio::test]
async fn redis_error_replies_are_errors_not_absent() {
    let url = shared_url();
    let key = unique_key("wrongtype");
    let mut conn = raw(&url).await;
    let _: i64 = query(
        &mut conn,
        ::redis::cmd("RPUSH").arg(&key).arg("not a bitmap"),
    )
    .await;

    let filter = RedisBloom::with_rate(&url, key.as_str(), 100, 0.01).unwrap();
    for result in [
        filter.contains("x").await,
        filter.insert("x").await,
        filter.snapshot().await.map(|_| true),
    ] {
        match result {
            Err(RedisBloomError::Redis(RedisFailure::Server { code, .. })) => {
                assert_eq!(code.as_deref(), Some("WRONGTYPE"));
            }
            other => panic!("expected a WRONGTYPE error, got {other:?}"),
        }
    }
    // The connection survives an error reply.
    assert!(filter.delete().await.unwrap());
    assert!(filter.insert("x").await.unwrap());
    filter.delete().await.unwrap();
}

#[tokio::test]
async fn snapshot_of_a_larger_filter_is_refused() {
    let url = shared_url();
    let key = unique_key("larger");
    let big = RedisBloom::go_zero(&url, key.as_str(), 4096).unwrap();
    for i in 0..50u32 {
        big.insert(i.to_le_bytes()).await.unwrap();
    }
    let small = RedisBloom::go_zero(&url, key.as_str(), 64).unwrap();
    let err = small.snapshot().await.unwrap_err();
    assert!(
        matches!(
            err,
            RedisBloomError::Bloom(BloomError::BitmapTooLong { .. })
                | RedisBloomError::Bloom(BloomError::BitOutOfRange { .. })
        ),
        "{err:?}"
    );
    big.delete().await.unwrap();
}

#[tokio::test]
async fn unreachable_redis_is_an_error_within_the_timeout() {
    // Nobody listens on this port.
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let timeout = Duration::from_millis(500);
    let filter = RedisBloom::builder(
        &url,
        "k",
        BloomConfig::builder()
            .bits(64)
            .scheme(HashScheme::GoZero)
            .build()
            .unwrap(),
    )
    .timeout(timeout)
    .build()
    .unwrap();
    let start = Instant::now();
    let err = filter.contains("x").await.unwrap_err();
    assert!(err.is_redis_failure(), "{err:?}");
    assert!(
        matches!(
            err,
            RedisBloomError::Redis(
                RedisFailure::Connection {
                    operation: "contains",
                    ..
                } | RedisFailure::Timeout { .. }
            )
        ),
        "{err:?}"
    );
    assert!(start.elapsed() <= timeout + Duration::from_millis(500));
}

#[tokio::test]
async fn redis_killed_mid_run_fails_fast_then_recovers_after_restart() {
    let mut server = RedisServer::start();
    let timeout = Duration::from_millis(500);
    let filter = RedisBloom::builder(
        &server.url(),
        "bloom:outage",
        BloomConfig::builder()
            .bits(1024)
            .scheme(HashScheme::GoZero)
            .build()
            .unwrap(),
    )
    .timeout(timeout)
    .build()
    .unwrap();

    for i in 0..20 {
        filter.insert(format!("before:{i}")).await.unwrap();
    }
    assert!(filter.contains("before:3").await.unwrap());

    server.stop();
    assert!(!server.is_running());
    for _ in 0..3 {
        for call in ["insert", "contains"] {
            let start = Instant::now();
            let result = match call {
                "insert" => filter.insert("during").await,
                _ => filter.contains("before:3").await,
            };
            let elapsed = start.elapsed();
            let err = result.expect_err("a call on a stopped Redis must fail, not answer");
            assert!(err.is_redis_failure(), "{call}: {err:?}");
            assert!(
                elapsed <= timeout + Duration::from_millis(500),
                "{call} took {elapsed:?} with a {timeout:?} timeout"
            );
        }
    }

    server.restart();
    // The new server is empty (no persistence) and has no scripts loaded: the first
    // call reconnects, reloads the script and answers.
    assert!(!filter.contains("before:3").await.unwrap());
    assert!(filter.insert("after").await.unwrap());
    assert!(filter.contains("after").await.unwrap());
    let mut conn = raw(&server.url()).await;
    let ones: u64 = query(&mut conn, ::redis::cmd("BITCOUNT").arg("bloom:outage")).await;
    assert_eq!(ones, filter.snapshot().await.unwrap().count_ones());
}

#[tokio::test]
async fn paused_redis_times_out_then_recovers() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let filter = RedisBloom::builder(
        &server.url(),
        "bloom:paused",
        BloomConfig::builder().bits(512).hashes(4).build().unwrap(),
    )
    .timeout(timeout)
    .build()
    .unwrap();
    filter.insert("kept").await.unwrap();

    server.pause();
    let start = Instant::now();
    let result = filter.contains("kept").await;
    let elapsed = start.elapsed();
    server.resume();
    match result {
        Err(RedisBloomError::Redis(RedisFailure::Timeout { operation, after })) => {
            assert_eq!((operation, after), ("contains", timeout));
        }
        other => panic!("expected a timeout from a paused Redis, got {other:?}"),
    }
    assert!(
        elapsed >= timeout && elapsed <= timeout + Duration::from_millis(500),
        "timed out after {elapsed:?}, timeout {timeout:?}"
    );

    // Resumed, the data is still there and the filter answers again.
    assert!(filter.contains("kept").await.unwrap());
    assert!(filter.insert("new").await.unwrap());
}

/// How many connections the server has accepted since it started.
async fn accepted_connections(conn: &mut ::redis::aio::MultiplexedConnection) -> u64 {
    let info: String = query(conn, ::redis::cmd("INFO").arg("stats")).await;
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in INFO stats: {info}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_share_one_connection_and_lose_no_bits() {
    // A private server, so the connection count below is ours alone.
    let server = RedisServer::start();
    let mut conn = raw(&server.url()).await;
    let accepted_before = accepted_connections(&mut conn).await;

    let config = BloomConfig::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .build()
        .unwrap();
    let filter = Arc::new(RedisBloom::new(&server.url(), "bloom:shared", config).unwrap());
    let start = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let filter = Arc::clone(&filter);
            let start = Arc::clone(&start);
            // `tokio::spawn` needs the call futures to be `Send`.
            tokio::spawn(async move {
                start.wait().await;
                for i in 0..50 {
                    filter.insert(format!("{t}:{i}")).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    // No insert lost a bit: the stored bitmap is the in-memory one.
    let local = BloomFilter::new(config).unwrap();
    for t in 0..8 {
        for i in 0..50 {
            local.insert(format!("{t}:{i}"));
        }
    }
    assert_same_bitmap(
        &get_bytes(&mut conn, "bloom:shared").await,
        &local.to_bitmap_bytes(),
    );

    // Eight tasks dialled at once, yet the filter opened a single connection.
    assert_eq!(accepted_connections(&mut conn).await, accepted_before + 1);
}
