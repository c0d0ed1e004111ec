//! The delay (`point/delay.rs`): at most one probe out at a time, none before its
//! time (not even while the delay is being started), and a refused probe comes back.

use super::check;
use crate::delay::{in_delay, Delay};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

const DELAY: u64 = 1000;
const RETRY: u64 = 10;
const CAUSE: u8 = 3;

/// A delay started at 0: ends at 1000, first probe at 10.
fn started() -> Arc<Delay> {
    let d = Delay::new();
    d.start(0, DELAY, RETRY, CAUSE);
    Arc::new(d)
}

/// A call at `now`: reads the delay's end and, inside the delay, tries to claim.
fn try_probe(d: &Delay, now: u64) -> Option<u64> {
    let until = d.until();
    if in_delay(now, until) {
        d.claim(now, until, RETRY)
    } else {
        None
    }
}

/// Three calls at the probe's time: exactly one claims it.
#[test]
fn one_probe_among_simultaneous_calls() {
    check(|| {
        let d = started();
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || try_probe(&d, RETRY).is_some())
            })
            .collect();
        let claimed = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&c| c)
            .count();
        assert_eq!(claimed, 1);
    });
}

/// A delay being started (at 0, first probe at 10) while two calls at 5 look at it:
/// whatever they see (no delay yet, `STARTING`, or the new delay), neither claims a
/// probe before its time, neither with the old probe time (0) nor the new one.
#[test]
fn no_probe_before_its_time_while_starting() {
    check(|| {
        let d = Arc::new(Delay::new());
        let starter = {
            let d = d.clone();
            thread::spawn(move || d.start(0, DELAY, RETRY, CAUSE))
        };
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                thread::spawn(move || try_probe(&d, 5))
            })
            .collect();
        starter.join().unwrap();
        for c in callers {
            assert_eq!(c.join().unwrap(), None, "a probe claimed at 5");
        }
        assert_eq!((d.until(), d.cause()), (DELAY, CAUSE));
        assert_eq!(
            d.claim(RETRY, DELAY, RETRY),
            Some(RETRY),
            "on time, it is there"
        );
    });
}

/// What the probe's holders share: how many hold it, and data that the holder changes
/// without synchronising, which loom checks against happens-before: an unclaim must
/// happen before the next claim (their `AcqRel`).
struct Probe {
    holders: AtomicUsize,
    data: UnsafeCell<u64>,
}

// SAFETY: `data` is only touched by the probe's holder, and there is at most one; that
// is what the model checks (loom panics on a concurrent access).
unsafe impl Sync for Probe {}

/// A call that claims the probe and gives it back (refused by a limit), racing another
/// that claims it and gives it back too: never two holders at once (neither by count
/// nor by happens-before), and afterwards the probe is there again, at its time.
#[test]
fn an_unclaimed_probe_comes_back() {
    check(|| {
        let d = started();
        let probe = Arc::new(Probe {
            holders: AtomicUsize::new(0),
            data: UnsafeCell::new(0),
        });
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (d, probe) = (d.clone(), probe.clone());
                thread::spawn(move || {
                    let Some(claimed) = try_probe(&d, RETRY) else {
                        return 0;
                    };
                    assert_eq!(claimed, RETRY);
                    // Relaxed: the counter must not order the holders itself.
                    let before = probe.holders.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(before, 0, "two probes out");
                    // SAFETY: see `Probe`; loom checks it.
                    probe.data.with_mut(|n| unsafe { *n += 1 });
                    probe.holders.fetch_sub(1, Ordering::Relaxed);
                    d.unclaim(claimed);
                    1
                })
            })
            .collect();
        let claims: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(claims >= 1);
        // SAFETY: every thread was joined.
        assert_eq!(probe.data.with(|n| unsafe { *n }), claims);
        assert_eq!(try_probe(&d, RETRY), Some(RETRY), "given back");
        assert_eq!(try_probe(&d, RETRY), None);
    });
}

/// Two trips at once (at 0 and at 5): one delay starts, and its probe time and cause
/// are the winner's, never a mix; the loser changes nothing.
#[test]
fn racing_starts_start_one_delay() {
    check(|| {
        let d = Arc::new(Delay::new());
        let handles: Vec<_> = [(0, 1u8), (5, 2u8)]
            .into_iter()
            .map(|(now, cause)| {
                let d = d.clone();
                thread::spawn(move || d.start(now, DELAY, RETRY, cause))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let (until, cause) = (d.until(), d.cause());
        let now = match cause {
            1 => 0,
            2 => 5,
            c => panic!("cause {c}"),
        };
        assert_eq!(until, now + DELAY);
        assert_eq!(d.claim(now + RETRY - 1, until, RETRY), None);
        assert_eq!(d.claim(now + RETRY, until, RETRY), Some(now + RETRY));
        assert_eq!(d.claim(now + RETRY, until, RETRY), None, "one at a time");
    });
}
