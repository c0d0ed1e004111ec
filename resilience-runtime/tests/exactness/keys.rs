//! Hot keys ([`KeyPolicy`]), through `Point::enter_key` on a manual clock.
//!
//! * Tracked keys (fewer than `max_keys`): a frozen bucket of each key admits exactly
//!   its burst, key by key, with `T` threads calling every key; overridden values get
//!   exactly theirs (`vip`: 20) or none (`blocked`); also while another thread keeps
//!   swapping the policy between two forms with the same keys section and table.
//! * Untracked keys (ten times `max_keys`): no key is ever admitted beyond its burst.
//! * Per-key concurrency: no key ever has more calls in flight than its limit (the
//!   callers' own count, per key), overrides included, with and without swaps; every
//!   slot comes back (a key admits its full limit again afterwards).
//! * The books: every call is a visit, refusals are the point's `HotKey` downgrades.
//! * Through `#[downgrade(key = ...)]` on a sync fn (threads) and an `async fn`
//!   (tasks on a multi-thread runtime), counted inside the bodies: no key is admitted
//!   beyond its limit (the override `"3"` matching the integer key 3) or has more
//!   calls in flight than its `max_concurrency`; one caller gets exactly the limit.

use crate::support::*;
use resilience_runtime::keys::{KeyOverride, KeyPolicy};
use resilience_runtime::{Permit, Point, Policy, Reason, Registry};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

/// A keys section in a plain policy, and the same section with a point concurrency
/// limit that never trips (same table: a swap between them keeps every key's state).
fn policies(keys: KeyPolicy) -> (Policy, Policy) {
    let b = Policy::builder().keys(keys);
    (
        b.clone().build().unwrap(),
        b.max_concurrency(1_000_000).build().unwrap(),
    )
}

/// Per-key counts the callers keep.
struct KeyCounts {
    admitted: Vec<AtomicU64>,
    inflight: Vec<AtomicU64>,
    max_inflight: Vec<AtomicU64>,
    refused: AtomicU64,
    other: AtomicU64,
}

impl KeyCounts {
    fn new(keys: usize) -> KeyCounts {
        let v = || (0..keys).map(|_| AtomicU64::new(0)).collect();
        KeyCounts {
            admitted: v(),
            inflight: v(),
            max_inflight: v(),
            refused: AtomicU64::new(0),
            other: AtomicU64::new(0),
        }
    }
}

/// How the callers of [`run`] call: `threads` threads each call every key `rounds`
/// times (key names from `name_of`), holding each admitted call for a few yields;
/// with `swap`, another thread swaps the point's policy between the two policies
/// meanwhile; with `elsewhere`, each caller hands its permits, in order, to a thread
/// of its own that ends them.
struct Calls {
    keys: usize,
    name_of: fn(usize) -> String,
    threads: usize,
    rounds: usize,
    swap: bool,
    elsewhere: bool,
}

impl Calls {
    fn new(keys: usize, name_of: fn(usize) -> String, threads: usize, rounds: usize) -> Calls {
        Calls {
            keys,
            name_of,
            threads,
            rounds,
            swap: false,
            elsewhere: false,
        }
    }

    fn swap(self, swap: bool) -> Calls {
        Calls { swap, ..self }
    }

    fn elsewhere(self) -> Calls {
        Calls {
            elsewhere: true,
            ..self
        }
    }

    fn total(&self) -> u64 {
        (self.keys * self.rounds * self.threads) as u64
    }
}

/// How the admitted calls ended: finished well, or with an exception (the others
/// were cancelled).
#[derive(Default)]
struct Ends {
    ok: AtomicU64,
    failed: AtomicU64,
}

/// Ends a caller's `n`th admitted call, of key `k`, after `hold` yields: every fifth
/// is cancelled (the first among them), every eighth fails, the others finish well.
fn end(counts: &KeyCounts, ends: &Ends, k: usize, n: usize, hold: usize, permit: Permit<'_>) {
    for _ in 0..hold {
        std::thread::yield_now();
    }
    counts.inflight[k].fetch_sub(1, Ordering::SeqCst);
    if n.is_multiple_of(5) {
        drop(permit); // a cancelled call
    } else if n % 8 == 7 {
        ends.failed.fetch_add(1, Ordering::Relaxed);
        permit.finish(true);
    } else {
        ends.ok.fetch_add(1, Ordering::Relaxed);
        permit.finish(false);
    }
}

/// Runs `calls` on point `name` of `reg` under `plain` (swapped with `other`).
fn run(
    reg: &'static Registry,
    name: &str,
    (plain, other): (Policy, Policy),
    calls: &Calls,
) -> (&'static Point, KeyCounts, Ends) {
    reg.set_policy(name, plain.clone()).unwrap();
    let p = reg.point(name).unwrap();
    let counts = KeyCounts::new(calls.keys);
    let ends = Ends::default();
    let names: Vec<String> = (0..calls.keys).map(calls.name_of).collect();
    let stop = AtomicBool::new(false);
    let start = Barrier::new(calls.threads + 1);
    std::thread::scope(|s| {
        let swapper = s.spawn(|| {
            start.wait();
            while calls.swap && !stop.load(Ordering::Relaxed) {
                reg.set_policy(name, other.clone()).unwrap();
                reg.set_policy(name, plain.clone()).unwrap();
            }
        });
        let mut callers = Vec::new();
        for t in 0..calls.threads {
            let (counts, ends, names, start) = (&counts, &ends, &names, &start);
            // The ending thread of a caller that hands its permits on: at most a call
            // or two of the caller's in flight, so that most calls are admitted.
            let to = calls.elsewhere.then(|| {
                let (to, from) = std::sync::mpsc::sync_channel::<(usize, usize, Permit<'_>)>(1);
                callers.push(s.spawn(move || {
                    for (k, n, permit) in from {
                        end(counts, ends, k, n, 1, permit);
                    }
                }));
                to
            });
            callers.push(s.spawn(move || {
                start.wait();
                let mut n = 0;
                for r in 0..calls.rounds {
                    for i in 0..calls.keys {
                        // Threads walk the keys from different places.
                        let k = (i + t * 7 + r) % calls.keys;
                        match p.enter_key(names[k].as_str()) {
                            Ok(permit) => {
                                counts.admitted[k].fetch_add(1, Ordering::Relaxed);
                                let now = counts.inflight[k].fetch_add(1, Ordering::SeqCst) + 1;
                                counts.max_inflight[k].fetch_max(now, Ordering::Relaxed);
                                match &to {
                                    Some(to) => to.send((k, n, permit)).unwrap(),
                                    None => end(counts, ends, k, n, t % 3, permit),
                                }
                                n += 1;
                            }
                            Err(d) if d.reason() == Reason::HotKey => {
                                counts.refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                counts.other.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                // Dropping `to` ends the caller's ending thread.
            }));
        }
        for c in callers {
            c.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
    });
    (p, counts, ends)
}

fn books(v: &Verdicts, case: &Case, p: &'static Point, c: &KeyCounts, calls: u64) {
    let s = p.stats();
    let admitted: u64 = c.admitted.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    let refused = c.refused.load(Ordering::Relaxed);
    v.check(c.other.load(Ordering::Relaxed) == 0, || {
        format!("{case}: calls refused for another reason than HotKey")
    });
    v.check(
        s.totals.visits == calls && admitted + refused == calls,
        || {
            format!(
                "{case}: {calls} calls, {} visits, {admitted} admitted + {refused} refused",
                s.totals.visits
            )
        },
    );
    v.check(s.totals.passes == admitted, || {
        format!("{case}: {admitted} admitted, {} passes", s.totals.passes)
    });
    v.check(
        s.totals.downgrades_by_reason.get(Reason::HotKey) == refused,
        || {
            format!(
                "{case}: {refused} refused, {} HotKey downgrades",
                s.totals.downgrades_by_reason.get(Reason::HotKey)
            )
        },
    );
    v.check(s.concurrency == 0, || {
        format!("{case}: permits never came back")
    });
}

fn key_name(i: usize) -> String {
    match i {
        0 => "vip".into(),
        1 => "blocked".into(),
        i => format!("user-{i}"),
    }
}

fn frozen_tracked(swap: bool) {
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let case = Case::new(
            "keys: limit 5 per minute, vip 20, blocked 0",
            Shape::Enter,
            threads,
            swap,
        );
        let keys = KeyPolicy::builder()
            .limit(5, Duration::from_secs(60))
            .override_limit("vip", 20)
            .override_limit("blocked", 0)
            .max_keys(64)
            .build()
            .unwrap();
        let rounds = 30;
        let calls = Calls::new(12, key_name, threads, rounds).swap(swap);
        let (p, c, _) = run(reg, "keys.tracked", policies(keys), &calls);
        books(&v, &case, p, &c, calls.total());
        for (k, a) in c.admitted.iter().enumerate() {
            let calls = (rounds * threads) as u64;
            let want = match k {
                0 => calls.min(20),
                1 => 0,
                _ => calls.min(5),
            };
            let got = a.load(Ordering::Relaxed);
            v.check(got == want, || {
                format!(
                    "{case}: key {} admitted {got} times, exactly {want} must be",
                    key_name(k)
                )
            });
        }
    }
    v.conclude();
}

#[test]
fn tracked_keys_admit_exactly_their_burst() {
    frozen_tracked(false);
}

#[test]
fn tracked_keys_admit_exactly_their_burst_while_the_policy_is_swapped() {
    frozen_tracked(true);
}

fn frozen_untracked(swap: bool) {
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let case = Case::new(
            "keys: limit 3 per minute, 16 tracked of 160",
            Shape::Enter,
            threads,
            swap,
        );
        let keys = KeyPolicy::builder()
            .limit(3, Duration::from_secs(60))
            .max_keys(16)
            .build()
            .unwrap();
        let rounds = 8;
        let n = 160;
        let calls = Calls::new(n, |i| format!("u{i}"), threads, rounds).swap(swap);
        let (p, c, _) = run(reg, "keys.untracked", policies(keys), &calls);
        books(&v, &case, p, &c, calls.total());
        for (k, a) in c.admitted.iter().enumerate() {
            let got = a.load(Ordering::Relaxed);
            v.check(got <= 3, || {
                format!("{case}: key u{k} admitted {got} times, at most 3 may be")
            });
        }
        let stats = p.key_stats().unwrap();
        v.check(stats.tracked <= 16, || {
            format!("{case}: {} keys tracked of 16", stats.tracked)
        });
        // The sketch admitted calls too (it is not a refuse-all), and every tracked
        // key got its full burst.
        v.check(stats.untracked_passes > 0, || {
            format!("{case}: no untracked call admitted")
        });
        let admitted: u64 = c.admitted.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        v.check(admitted >= 3 * stats.tracked, || {
            format!(
                "{case}: {admitted} admitted, {} tracked keys of 3 each",
                stats.tracked
            )
        });
    }
    v.conclude();
}

#[test]
fn untracked_keys_are_never_admitted_beyond_their_burst() {
    frozen_untracked(false);
}

#[test]
fn untracked_keys_are_never_admitted_beyond_their_burst_while_the_policy_is_swapped() {
    frozen_untracked(true);
}

fn concurrency(swap: bool, max_keys: u64, keys: usize, rounds: usize) {
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let case = Case::new(
            format!("keys: max_concurrency 2, vip 3, {keys} keys, {max_keys} tracked"),
            Shape::Enter,
            threads,
            swap,
        );
        let section = || {
            KeyPolicy::builder()
                .max_concurrency(2)
                .max_keys(max_keys)
                .override_rule("vip", KeyOverride::builder().max_concurrency(3).build())
                .build()
                .unwrap()
        };
        let calls = Calls::new(keys, key_name, threads, rounds).swap(swap);
        let (p, c, _) = run(reg, "keys.conc", policies(section()), &calls);
        books(&v, &case, p, &c, calls.total());
        for (k, m) in c.max_inflight.iter().enumerate() {
            let max = m.load(Ordering::Relaxed);
            let limit = match k {
                0 => 3,
                _ => 2,
            };
            v.check(max <= limit, || {
                format!(
                    "{case}: key {} had {max} calls in flight, limit {limit}",
                    key_name(k)
                )
            });
        }
        // Every slot came back: each key admits its full limit again, held at once.
        let held: Vec<_> = (0..keys)
            .filter(|k| *k != 1)
            .flat_map(|k| {
                let limit = if k == 0 { 3 } else { 2 };
                (0..limit).map(move |_| k)
            })
            .map(|k| (k, p.enter_key(key_name(k).as_str())))
            .collect();
        let back = held.iter().filter(|(_, r)| r.is_ok()).count();
        let want = held.len();
        // Untracked keys share cells: only the tracked case must admit them all.
        if keys as u64 <= max_keys {
            v.check(back == want, || {
                format!("{case}: {back} of {want} slots back after the run")
            });
        }
        drop(held);
    }
    v.conclude();
}

#[test]
fn no_key_has_more_calls_in_flight_than_its_limit() {
    concurrency(false, 64, 6, 200);
}

#[test]
fn no_key_has_more_calls_in_flight_than_its_limit_while_the_policy_is_swapped() {
    concurrency(true, 64, 6, 200);
}

#[test]
fn no_untracked_key_has_more_calls_in_flight_than_its_limit() {
    concurrency(true, 16, 96, 16);
}

// ---- through the macros: `key = ...` on a sync fn and an async fn ------------------

/// Per-key admissions counted inside the bodies, one table per case.
static MACRO_COUNTS: std::sync::LazyLock<std::sync::Mutex<Vec<std::sync::Arc<KeyCounts>>>> =
    std::sync::LazyLock::new(Default::default);

fn counts_of(case: usize) -> std::sync::Arc<KeyCounts> {
    MACRO_COUNTS.lock().unwrap()[case].clone()
}

#[resilience_runtime::downgrade(point = "keys.macro.sync", key = key, default)]
fn sync_keyed(case: usize, key: u64) -> Option<()> {
    let c = counts_of(case);
    c.admitted[key as usize].fetch_add(1, Ordering::Relaxed);
    let n = c.inflight[key as usize].fetch_add(1, Ordering::SeqCst) + 1;
    c.max_inflight[key as usize].fetch_max(n, Ordering::Relaxed);
    std::thread::yield_now();
    c.inflight[key as usize].fetch_sub(1, Ordering::SeqCst);
    Some(())
}

#[resilience_runtime::downgrade(point = "keys.macro.async", key = key, default)]
async fn async_keyed(case: usize, key: u64) -> Option<()> {
    let c = counts_of(case);
    c.admitted[key as usize].fetch_add(1, Ordering::Relaxed);
    let n = c.inflight[key as usize].fetch_add(1, Ordering::SeqCst) + 1;
    c.max_inflight[key as usize].fetch_max(n, Ordering::Relaxed);
    tokio::task::yield_now().await;
    c.inflight[key as usize].fetch_sub(1, Ordering::SeqCst);
    Some(())
}

const MACRO_KEYS: usize = 8;

fn macro_case(asynchronous: bool, threads: usize, v: &Verdicts) {
    let name = if asynchronous {
        "keys.macro.async"
    } else {
        "keys.macro.sync"
    };
    let shape = if asynchronous {
        Shape::AsyncMacro
    } else {
        Shape::SyncMacro
    };
    let case = Case::new(
        "keys: 5 per key, 2 in flight, key 3 gets 9",
        shape,
        threads,
        false,
    );
    // 5 calls per key per 1000 s (no refill while a case runs), at most 2 in
    // flight per key, the integer key 3 (override "3") 9; a fresh table for each
    // case (a new max_keys is a new table).
    let section = KeyPolicy::builder()
        .limit(5, Duration::from_secs(1000))
        .max_concurrency(2)
        .override_limit("3", 9)
        .max_keys(64 + threads as u64 + u64::from(asynchronous) * 100)
        .build()
        .unwrap();
    resilience_runtime::registry()
        .set_policy(name, Policy::builder().keys(section).build().unwrap())
        .unwrap();
    let slot = {
        let mut all = MACRO_COUNTS.lock().unwrap();
        all.push(std::sync::Arc::new(KeyCounts::new(MACRO_KEYS)));
        all.len() - 1
    };
    let rounds = 20;
    if asynchronous {
        let rt = runtime();
        rt.block_on(async {
            let tasks: Vec<_> = (0..threads)
                .map(|t| {
                    tokio::spawn(async move {
                        for r in 0..rounds {
                            for k in 0..MACRO_KEYS {
                                let key = ((k + t + r) % MACRO_KEYS) as u64;
                                let _ = async_keyed(slot, key).await;
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
    } else {
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || {
                    for r in 0..rounds {
                        for k in 0..MACRO_KEYS {
                            let _ = sync_keyed(slot, ((k + t + r) % MACRO_KEYS) as u64);
                        }
                    }
                });
            }
        });
    }
    let c = counts_of(slot);
    let calls = (rounds * threads) as u64;
    for k in 0..MACRO_KEYS {
        let got = c.admitted[k].load(Ordering::Relaxed);
        let max = c.max_inflight[k].load(Ordering::Relaxed);
        let limit = if k == 3 { 9 } else { 5 };
        v.check(got <= limit && got <= calls, || {
            format!("{case}: key {k} admitted {got} times, at most {limit}")
        });
        // With one call at a time per thread, no call is refused for concurrency
        // when there is one thread: then every key gets exactly its limit.
        if threads == 1 {
            v.check(got == limit.min(calls), || {
                format!("{case}: key {k} admitted {got} times, exactly {limit}")
            });
        }
        v.check(max <= 2, || {
            format!("{case}: key {k} had {max} calls in flight, limit 2")
        });
    }
    let s = resilience_runtime::registry().stats(name).unwrap();
    v.check(s.concurrency == 0, || {
        format!("{case}: permits never came back")
    });
}

#[test]
fn keyed_downgrade_fns_keep_every_key_within_its_limits() {
    let v = Verdicts::default();
    for threads in THREADS {
        macro_case(false, threads, &v);
    }
    v.conclude();
}

#[test]
fn keyed_async_downgrade_fns_keep_every_key_within_its_limits() {
    let v = Verdicts::default();
    for threads in THREADS {
        macro_case(true, threads, &v);
    }
    v.conclude();
}

// ---- permits ended on another thread -------------------------------------------------

/// Per-key concurrency with a classic breaker on the point, each permit entered on its
/// caller's thread and ended on another: the permit's records (the key's fingerprint
/// and the breaker's ticket, boxed) travel with it. No key ever has more calls in
/// flight than its limit; every slot comes back; the breaker saw every outcome of a
/// call that returned, each once, and no cancelled one.
fn handed_off(swap: bool) {
    use resilience_runtime::breaker::ClassicConfig;
    use resilience_runtime::BreakerPolicy;
    const KEYS: usize = 6;
    let v = Verdicts::default();
    for threads in THREADS {
        let (reg, _clock) = manual_registry();
        let case = Case::new(
            "keys: max_concurrency 2, a classic breaker, ended on another thread",
            Shape::Enter,
            threads,
            swap,
        );
        let section = KeyPolicy::builder()
            .max_concurrency(2)
            .max_keys(64)
            .build()
            .unwrap();
        let name = "keys.handed_off";
        // Opens only if every call in its window failed: never, as a caller's first
        // outcome is a success (see `end`).
        let classic = ClassicConfig::builder().failure_rate(1.0).build().unwrap();
        reg.set_breaker(name, BreakerPolicy::Classic(classic))
            .unwrap();
        let calls = Calls::new(KEYS, key_name, threads, 120)
            .swap(swap)
            .elsewhere();
        let (p, counts, ends) = run(reg, name, policies(section), &calls);
        books(&v, &case, p, &counts, calls.total());
        for (k, m) in counts.max_inflight.iter().enumerate() {
            let max = m.load(Ordering::Relaxed);
            v.check(max <= 2, || {
                format!("{case}: key {k} had {max} calls in flight, limit 2")
            });
        }
        let b = p.stats().breaker.expect("a breaker");
        let ok = ends.ok.load(Ordering::Relaxed);
        let failed = ends.failed.load(Ordering::Relaxed);
        // One caller is admitted nearly every time, so failures come; with more, how
        // many calls are admitted is up to the scheduler.
        v.check(
            b.window_successes == ok && b.window_failures == failed && (threads > 1 || failed > 0),
            || {
                format!(
                    "{case}: {ok} ok and {failed} failed calls, the breaker saw {} and {}",
                    b.window_successes, b.window_failures
                )
            },
        );
        // Every slot came back: each key admits its full limit again, held at once.
        let held: Vec<_> = (0..KEYS)
            .flat_map(|k| [k, k])
            .map(|k| p.enter_key(key_name(k).as_str()))
            .collect();
        let back = held.iter().filter(|r| r.is_ok()).count();
        v.check(back == 2 * KEYS, || {
            format!("{case}: {back} of {} slots back after the run", 2 * KEYS)
        });
    }
    v.conclude();
}

#[test]
fn a_permit_ended_on_another_thread_gives_back_its_key_and_reports_to_its_breaker() {
    handed_off(false);
}

#[test]
fn a_permit_ended_on_another_thread_keeps_its_records_while_the_policy_is_swapped() {
    handed_off(true);
}
