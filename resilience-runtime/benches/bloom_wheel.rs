//! Cost per operation of the in-memory bloom filter and the timing wheel, against
//! straightforward versions, in one run. Run with
//! `cargo bench -p resilience-runtime --bench bloom_wheel`.
//!
//! - `bloom_*`: a filter sized for 1 000 000 keys at p = 1% (9 585 059 bits, 7
//!   hashes) holding 1 000 000 keys. `atomic` is [`BloomFilter`]; `mutex_vec_bool` is a
//!   `Mutex<Vec<bool>>` setting the same 7 positions; `go_zero` is [`BloomFilter`]
//!   with go-zero's hashing (14 MurmurHash3 runs per key) on the same number of bits.
//!   `contains_hit` looks up inserted keys, `contains_miss` keys never inserted
//!   (about 1% are false positives), `insert` adds fresh keys, `positions` computes
//!   a key's positions without touching the bits (the hashing cost alone).
//! - `wheel_*`: 100 000 live timers, 512 slots, delays spread over 1..=2048 ticks.
//!   `raw` is [`RawWheel`], `locked` the shared [`TimingWheel`] (its `Mutex`
//!   included, ticked by hand), `btree` a `BTreeMap<(due, key)>` plus a `HashMap`
//!   from key to due tick. `set` replaces a live timer, `set_new` adds one, `move`
//!   reschedules one, `remove` cancels one; `tick` is the cost of one whole tick,
//!   with fired timers re-armed (untimed) with their own delay, so short ones fire
//!   often: about 400 fall due per tick (printed with the results).

// `criterion_group!` generates undocumented public functions.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use resilience_runtime::bloom::{BloomConfig, BloomFilter};
use resilience_runtime::wheel::{RawWheel, TimingWheel};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const KEYS: usize = 1_000_000;
const RATE: f64 = 0.01;

const TIMERS: u64 = 100_000;
const SLOTS: usize = 512;
const MAX_DELAY: u64 = 2048;
/// Timers removed (or added) between two untimed refills in the `remove`/`set_new`
/// benches, so the live count stays between 90 000 and 110 000.
const BATCH: u64 = 10_000;

/// The yardstick: one lock around a `Vec<bool>`, the same positions as [`BloomFilter`].
struct MutexVecBool {
    config: BloomConfig,
    bits: Mutex<Vec<bool>>,
}

impl MutexVecBool {
    fn new(config: BloomConfig) -> Self {
        let bits = usize::try_from(config.bits()).expect("bench filter fits in memory");
        MutexVecBool {
            config,
            bits: Mutex::new(vec![false; bits]),
        }
    }

    fn insert(&self, key: &[u8]) {
        let mut bits = self.bits.lock().unwrap();
        for pos in self.config.positions(key) {
            bits[pos as usize] = true;
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        let bits = self.bits.lock().unwrap();
        self.config.positions(key).all(|pos| bits[pos as usize])
    }
}

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}:{i:08}").into_bytes())
        .collect()
}

/// Cycles through `items`, one per call.
struct Cycle<'a, T> {
    items: &'a [T],
    next: usize,
}

impl<'a, T> Cycle<'a, T> {
    fn new(items: &'a [T]) -> Self {
        Cycle { items, next: 0 }
    }

    #[inline(always)]
    fn next(&mut self) -> &'a T {
        let item = &self.items[self.next];
        self.next += 1;
        if self.next == self.items.len() {
            self.next = 0;
        }
        item
    }
}

fn bloom(c: &mut Criterion) {
    let present = keys("user", KEYS);
    let absent = keys("miss", KEYS);
    let fresh = keys("new", KEYS);

    let config = BloomConfig::builder()
        .expected_items(KEYS as u64)
        .false_positive_rate(RATE)
        .build()
        .unwrap();
    let atomic = BloomFilter::new(config).unwrap();
    let naive = MutexVecBool::new(config);
    let go_zero = BloomFilter::go_zero(config.bits()).unwrap();
    for key in &present {
        atomic.insert(key);
        naive.insert(key);
        go_zero.insert(key);
    }
    let fp = absent.iter().filter(|k| atomic.contains(k)).count();
    eprintln!(
        "bloom: {} bits, {} hashes, {KEYS} keys in; measured false positives {:.3}% \
         (expected {:.3}%), go-zero hashing {:.3}%",
        config.bits(),
        config.hashes(),
        100.0 * fp as f64 / KEYS as f64,
        100.0 * config.expected_fpr(KEYS as u64),
        100.0 * absent.iter().filter(|k| go_zero.contains(k)).count() as f64 / KEYS as f64,
    );

    for (name, probe) in [("contains_hit", &present), ("contains_miss", &absent)] {
        let mut g = c.benchmark_group(format!("bloom_{name}"));
        let mut keys = Cycle::new(probe);
        g.bench_function("atomic", |b| b.iter(|| atomic.contains(keys.next())));
        g.bench_function("mutex_vec_bool", |b| b.iter(|| naive.contains(keys.next())));
        g.bench_function("go_zero", |b| b.iter(|| go_zero.contains(keys.next())));
        g.finish();
    }

    // Hashing alone: every position of a key, no memory touched.
    let mut g = c.benchmark_group("bloom_positions");
    let mut keys = Cycle::new(&present);
    let go_zero_config = *go_zero.config();
    g.bench_function("atomic", |b| {
        b.iter(|| config.positions(keys.next()).fold(0, u64::wrapping_add))
    });
    g.bench_function("go_zero", |b| {
        b.iter(|| {
            go_zero_config
                .positions(keys.next())
                .fold(0, u64::wrapping_add)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("bloom_insert");
    let mut keys = Cycle::new(&fresh);
    g.bench_function("atomic", |b| b.iter(|| atomic.insert(keys.next())));
    g.bench_function("mutex_vec_bool", |b| b.iter(|| naive.insert(keys.next())));
    g.bench_function("go_zero", |b| b.iter(|| go_zero.insert(keys.next())));
    g.finish();
}

/// Delays in 1..=MAX_DELAY from a fixed xorshift sequence, so every run is the same.
fn delays(n: u64) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % MAX_DELAY + 1
        })
        .collect()
}

/// The yardstick: timers ordered by due tick in a `BTreeMap`, found by key through a
/// `HashMap`.
#[derive(Default)]
struct BTreeTimers {
    now: u64,
    by_due: BTreeMap<(u64, u64), u64>,
    due_of: HashMap<u64, u64>,
}

impl BTreeTimers {
    fn set(&mut self, key: u64, value: u64, ticks: u64) -> Option<u64> {
        let due = self.now + ticks.max(1);
        let old = self
            .due_of
            .insert(key, due)
            .and_then(|old_due| self.by_due.remove(&(old_due, key)));
        self.by_due.insert((due, key), value);
        old
    }

    fn move_to(&mut self, key: u64, ticks: u64) -> bool {
        let due = self.now + ticks.max(1);
        let Some(slot) = self.due_of.get_mut(&key) else {
            return false;
        };
        let old_due = std::mem::replace(slot, due);
        let value = self.by_due.remove(&(old_due, key)).unwrap();
        self.by_due.insert((due, key), value);
        true
    }

    fn remove(&mut self, key: u64) -> Option<u64> {
        let due = self.due_of.remove(&key)?;
        self.by_due.remove(&(due, key))
    }
}

/// Times `op` on `iters` keys taken in turn from the live ones, `BATCH` at a time,
/// and runs `undo` on each batch untimed so the number of live timers stays near
/// `TIMERS`.
fn batched(
    iters: u64,
    cursor: &mut u64,
    mut op: impl FnMut(u64),
    mut undo: impl FnMut(u64),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(BATCH);
        let first = *cursor;
        let start = Instant::now();
        for i in 0..n {
            op((first + i) % TIMERS);
        }
        total += start.elapsed();
        for i in 0..n {
            undo((first + i) % TIMERS);
        }
        *cursor = (first + n) % TIMERS;
        done += n;
    }
    total
}

fn wheel(c: &mut Criterion) {
    let delay = delays(TIMERS);
    let d = |k: u64| delay[k as usize];

    let mut raw = RawWheel::new(SLOTS).unwrap();
    let mut btree = BTreeTimers::default();
    let (locked, ticker) =
        TimingWheel::with_ticker(Duration::from_millis(1), SLOTS, |_: u64, _: u64| {}).unwrap();
    for k in 0..TIMERS {
        raw.set(k, k, d(k));
        btree.set(k, k, d(k));
        locked.set_timer(k, k, Duration::from_millis(d(k))).unwrap();
    }
    // Spread the timers over the turns a running wheel would have.
    for _ in 0..MAX_DELAY / 2 {
        let fired = raw.tick();
        for (k, v) in fired {
            raw.set(k, v, d(k));
        }
    }
    assert_eq!(raw.len() as u64, TIMERS);

    let mut g = c.benchmark_group("wheel_set");
    let mut k = 0u64;
    let mut next = move || {
        k = (k + 7919) % TIMERS;
        k
    };
    g.bench_function("raw", |b| {
        b.iter(|| {
            let k = next();
            raw.set(k, k, d(k ^ 1))
        })
    });
    g.bench_function("locked", |b| {
        b.iter(|| {
            let k = next();
            locked.set_timer(k, k, Duration::from_millis(d(k ^ 1)))
        })
    });
    g.bench_function("btree", |b| {
        b.iter(|| {
            let k = next();
            btree.set(k, k, d(k ^ 1))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("wheel_move");
    g.bench_function("raw", |b| {
        b.iter(|| {
            let k = next();
            raw.move_to(&k, d(k ^ 2))
        })
    });
    g.bench_function("locked", |b| {
        b.iter(|| {
            let k = next();
            locked.move_timer(&k, Duration::from_millis(d(k ^ 2)))
        })
    });
    g.bench_function("btree", |b| {
        b.iter(|| {
            let k = next();
            btree.move_to(k, d(k ^ 2))
        })
    });
    g.finish();

    // Removing and adding change the live count, so these run in batches with an
    // untimed refill (see `batched`).
    let mut g = c.benchmark_group("wheel_remove");
    let mut cursor = 0;
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            let raw = std::cell::RefCell::new(&mut raw);
            batched(
                iters,
                &mut cursor,
                |k| {
                    black_box(raw.borrow_mut().remove(&k));
                },
                |k| {
                    raw.borrow_mut().set(k, k, d(k));
                },
            )
        })
    });
    g.bench_function("btree", |b| {
        b.iter_custom(|iters| {
            let btree = std::cell::RefCell::new(&mut btree);
            batched(
                iters,
                &mut cursor,
                |k| {
                    black_box(btree.borrow_mut().remove(k));
                },
                |k| {
                    btree.borrow_mut().set(k, k, d(k));
                },
            )
        })
    });
    g.finish();

    let mut g = c.benchmark_group("wheel_set_new");
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            let raw = std::cell::RefCell::new(&mut raw);
            batched(
                iters,
                &mut cursor,
                |k| {
                    black_box(raw.borrow_mut().set(k + TIMERS, k, d(k)));
                },
                |k| {
                    raw.borrow_mut().remove(&(k + TIMERS));
                },
            )
        })
    });
    g.bench_function("btree", |b| {
        b.iter_custom(|iters| {
            let btree = std::cell::RefCell::new(&mut btree);
            batched(
                iters,
                &mut cursor,
                |k| {
                    black_box(btree.borrow_mut().set(k + TIMERS, k, d(k)));
                },
                |k| {
                    btree.borrow_mut().remove(k + TIMERS);
                },
            )
        })
    });
    g.finish();

    let mut g = c.benchmark_group("wheel_tick");
    let (mut ticks, mut fired_total) = (0u64, 0u64);
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let fired = raw.tick();
                total += start.elapsed();
                ticks += 1;
                fired_total += fired.len() as u64;
                // Re-arm what fired, untimed, to keep 100 000 timers live.
                for (k, v) in fired {
                    raw.set(k, v, d(k));
                }
            }
            total
        })
    });
    g.finish();
    eprintln!(
        "wheel_tick: {:.0} timers fired per tick on average",
        fired_total as f64 / ticks.max(1) as f64
    );

    assert_eq!(raw.len() as u64, TIMERS);
    assert_eq!(btree.due_of.len() as u64, TIMERS);
    assert_eq!(locked.len() as u64, TIMERS);
    drop(ticker);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bloom, wheel
}
criterion_main!(benches);
