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
