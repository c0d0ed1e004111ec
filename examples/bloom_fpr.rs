//! Bloom filter sizing in practice: for the three false-positive tiers (0.1%, 1%,
//! 10%), build a filter for 100 000 keys, insert them, query 100 000 other keys and
//! print the observed false-positive rate next to the target.
//!
//! Run it with `cargo run -p examples --example bloom_fpr`.

use resilience_runtime::bloom::{BloomConfig, BloomFilter, HashScheme};
use std::time::Instant;

const N: u64 = 100_000;

/// A distinct key per (tag, i): inserted and queried keys use different tags.
fn key(tag: u8, i: u64) -> [u8; 9] {
    let mut k = [tag; 9];
    k[1..].copy_from_slice(&i.to_le_bytes());
    k
}

fn row(label: &str, config: BloomConfig, target: f64) {
    let filter = match BloomFilter::new(config) {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("{label}: {err}");
            return;
        }
    };
    let start = Instant::now();
    for i in 0..N {
        filter.insert(key(b'i', i));
    }
    let false_positives = (0..N).filter(|&i| filter.contains(key(b'q', i))).count();
    let elapsed = start.elapsed();
    let observed = false_positives as f64 / N as f64;
    println!(
        "{label:<10} {target:>8.3}% {bits:>10} {kib:>8.1} {k:>3} {expected:>9.4}% {observed:>9.4}% {ratio:>6.2} {ns:>8.0}",
        target = target * 100.0,
        bits = config.bits(),
        kib = config.bits() as f64 / 8.0 / 1024.0,
        k = config.hashes(),
        expected = config.expected_fpr(N) * 100.0,
        observed = observed * 100.0,
        ratio = observed / target,
        ns = elapsed.as_nanos() as f64 / (2 * N) as f64,
    );
}

fn main() {
    println!("{N} keys inserted, {N} other keys queried\n");
    println!(
        "{:<10} {:>9} {:>10} {:>8} {:>3} {:>10} {:>10} {:>6} {:>8}",
        "scheme", "target", "bits", "KiB", "k", "expected", "observed", "ratio", "ns/op"
    );
    for p in [0.001, 0.01, 0.1] {
        match BloomConfig::builder()
            .expected_items(N)
            .false_positive_rate(p)
            .build()
        {
            Ok(config) => row("double", config, p),
            Err(err) => eprintln!("p = {p}: {err}"),
        }
    }
    // go-zero's own advice: 20 bits per key with its fixed 14 hashes.
    match BloomConfig::builder()
        .bits(20 * N)
        .scheme(HashScheme::GoZero)
        .build()
    {
        Ok(config) => {
            let target = config.expected_fpr(N);
            row("go-zero", config, target);
        }
        Err(err) => eprintln!("go-zero: {err}"),
    }
    println!(
        "\nratio = observed / target; ns/op is the mean of one insert or lookup (use --release)."
    );
    println!(
        "go-zero's row follows its own advice (20 bits per key, 14 hashes): only about 7 false\n\
         positives are expected in {N} lookups, so its ratio is noisy."
    );
}
