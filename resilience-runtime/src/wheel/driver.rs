//! The threads behind a real-time [`TimingWheel`](super::TimingWheel): a ticker that
//! advances the wheel every interval and a worker that runs the callbacks.
//!
//! Callbacks run on the worker, never on the ticker, so a slow or panicking callback
//! cannot delay or stop the ticks.

use super::{Execute, Shared};
use crate::sync::atomic::Ordering;
use crate::sync::mpsc::{Receiver, Sender};
use crate::sync::Arc;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::Instant;

/// Due timers of one tick, sent from the ticker to the worker.
pub(super) type Batch<K, V> = Vec<(K, V)>;

/// Runs one callback, containing a panic so the caller's thread survives it.
///
/// The default panic hook still prints the panic message, which is how the user learns
/// of it. Under `panic = "abort"` nothing can be contained.
pub(super) fn run_callback<K, V>(execute: &Execute<K, V>, key: K, value: V) {
    let _ = catch_unwind(AssertUnwindSafe(|| execute(key, value)));
}

/// The ticker loop: tick every `interval` until the wheel is closed.
///
/// Ticks are scheduled on absolute deadlines, so they do not drift. If the thread falls
/// more than one tick behind (the machine was suspended, say), it skips the missed
/// ticks, like Go's `time.Ticker` and so like go-zero, instead of firing a burst.
pub(super) fn run_ticker<K, V>(shared: Arc<Shared<K, V>>, tx: Sender<Batch<K, V>>)
where
    K: Eq + std::hash::Hash + Clone,
{
    let interval = shared.interval;
    let mut deadline = Instant::now().checked_add(interval);
    loop {
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let Some(at) = deadline else {
            // An interval too long to represent never ticks; wait to be stopped.
            thread::park();
            continue;
        };
        let now = Instant::now();
        if now < at {
            // `stop` unparks us; spurious wake-ups just go round the loop.
            thread::park_timeout(at - now);
            continue;
        }
        let due = match shared.lock().as_mut() {
            Some(wheel) => wheel.tick(),
            None => return,
        };
        if !due.is_empty() {
            // The worker only goes away after this thread drops the sender, so this
            // cannot fail; if it somehow did, the batch is dropped and ticking goes on.
            let _ = tx.send(due);
        }
        deadline = at.checked_add(interval).map(|next| {
            if next <= now {
                now.checked_add(interval).unwrap_or(next)
            } else {
                next
            }
        });
    }
}

/// The worker loop: run each batch's callbacks in order until the ticker is gone.
pub(super) fn run_worker<K, V>(rx: Receiver<Batch<K, V>>, execute: Arc<Execute<K, V>>) {
    for batch in rx {
        for (key, value) in batch {
            run_callback(&*execute, key, value);
        }
    }
}
