//! Helpers shared by the benches.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `f` `iters` times on each of two threads started together and returns the
/// slower thread's time: the per-call latency of each thread while both run.
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
pub(crate) fn interleaved(rounds: usize, batch: u64, candidates: &[&dyn Fn()]) -> Vec<Vec<f64>> {
    let mut times = vec![Vec::with_capacity(rounds); candidates.len()];
    for _ in 0..rounds {
        for (f, t) in candidates.iter().zip(&mut times) {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            t.push(start.elapsed().as_nanos() as f64 / batch as f64);
        }
    }
    times
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
