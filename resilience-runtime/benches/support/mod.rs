//! Helpers shared by the benches.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `f` `iters` times on each of two threads started together and returns the
/// slower thread's time: the per-call latency of each thread while both run.
#[allow(dead_code)]
pub(crate) fn two_threads(iters: u64, f: impl Fn() + Sync) -> Duration {
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let h: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let t = Instant::now();
                    for _ in 0..iters {
                        f();
                    }
                    t.elapsed()
                })
            })
            .collect();
        h.into_iter().map(|h| h.join().unwrap()).max().unwrap()
    })
}

/// Per-call times (ns) of each candidate in each of `rounds` rounds. A round times a
/// batch of `batch` calls of every candidate, one after the other, so that the ratio of
/// two candidates within a round compares them under the same conditions: a host whose
/// speed drifts or flips between phases (a noisy neighbour) moves them together.
#[allow(dead_code)]
pub(crate) fn interleaved(rounds: usize, batch: u64, candidates: &[&dyn Fn()]) -> Vec<Vec<f64>> {
    let none = || {};
    let prepared: Vec<_> = candidates
        .iter()
        .map(|f| (&none as &dyn Fn(), *f))
        .collect();
    interleaved_prepared(rounds, batch, &prepared)
}

/// A candidate of [`interleaved_prepared`]: its untimed set-up and its call.
pub(crate) type Prepared<'a> = (&'a dyn Fn(), &'a dyn Fn());

/// [`interleaved`] with a set-up per candidate, run before each of its batches and
/// not timed: `(set_up, call)`.
#[allow(dead_code)]
pub(crate) fn interleaved_prepared(
    rounds: usize,
    batch: u64,
    candidates: &[Prepared<'_>],
) -> Vec<Vec<f64>> {
    let mut times = vec![Vec::with_capacity(rounds); candidates.len()];
    for _ in 0..rounds {
        for ((set_up, f), t) in candidates.iter().zip(&mut times) {
            set_up();
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            t.push(start.elapsed().as_nanos() as f64 / batch as f64);
        }
    }
    times
}

/// Per-call times (ns) of `f` on one thread and on two threads at once, in `rounds`
/// rounds: a round times a batch of `batch` calls on this thread alone, then a batch on
/// this thread and a helper thread together (the slower of the two), so that the ratio
/// within a round compares them under the same conditions, as in [`interleaved`].
/// Returns `(one, two)`.
// Each bench compiles this module on its own and not every bench uses everything.
#[allow(dead_code)]
pub(crate) fn one_and_two_threads(
    rounds: usize,
    batch: u64,
    f: &(dyn Fn() + Sync),
) -> (Vec<f64>, Vec<f64>) {
    let start = Barrier::new(2);
    let end = Barrier::new(2);
    let helper_ns = std::sync::atomic::AtomicU64::new(0);
    let mut one = Vec::with_capacity(rounds);
    let mut two = Vec::with_capacity(rounds);
    let time = || {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        t.elapsed().as_nanos() as u64
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                start.wait();
                helper_ns.store(time(), std::sync::atomic::Ordering::Relaxed);
                end.wait();
            }
        });
        for _ in 0..rounds {
            one.push(time() as f64 / batch as f64);
            start.wait();
            let mine = time();
            end.wait();
            let theirs = helper_ns.load(std::sync::atomic::Ordering::Relaxed);
            two.push(mine.max(theirs) as f64 / batch as f64);
        }
    });
    (one, two)
}

/// The median of `values` (which must not be empty).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The median over rounds of the ratio `a[k] / b[k]`.
pub(crate) fn median_ratio(a: &[f64], b: &[f64]) -> f64 {
    let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    median(&ratios)
}
