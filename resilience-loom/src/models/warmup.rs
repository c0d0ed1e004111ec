//! The warm-up limit's cell (`limit/warmup.rs`): passes racing in one second never
//! exceed its limit, one caller resyncs the tokens when the second moves on, and the
//! others decide on the tokens it publishes (or on the cold cap while it works).

use super::check;
use crate::limit::warmup::{WarmUp, WarmUpCell};
use loom::sync::Arc;
use loom::thread;

const NS: u64 = 1_000_000_000;
/// The start of the cell's first second (ns).
const NOW: u64 = 5 * NS;

/// 6 a second over 1 s, factor 3: warning 3, max 6 (cold limit 2, 6 / 3), cold qps
/// floor(6 / 3) = 2.
fn limit() -> WarmUp {
    let w = WarmUp::from_valid(6.0, 1.0, 3.0);
    assert_eq!((w.warning_token(), w.max_token()), (3.0, 6.0));
    assert_eq!((w.cap(6.0), w.cold_cap()), (2, 2));
    w
}

/// Each thread calls once at its instant (ns); returns who passed.
fn race<const N: usize>(w: WarmUp, cell: &Arc<WarmUpCell>, times: [u64; N]) -> [bool; N] {
    let handles = times.map(|t| {
        let cell = cell.clone();
        thread::spawn(move || cell.try_pass(&w, t))
    });
    handles.map(|h| h.join().unwrap())
}

/// Three calls in a cold cell's first second, whose limit is 2: exactly two pass.
#[test]
fn cold_second_admits_exactly_two() {
    check(|| {
        let w = limit();
        let cell = Arc::new(WarmUpCell::new(&w, NOW));
        let got = race(w, &cell, [NOW + 1, NOW + 2, NOW + 3]);
        assert_eq!(got.iter().filter(|g| **g).count(), 2, "{got:?}");
        assert_eq!(cell.stored(), 6.0);
    });
}

/// Two calls cross into the second second after two passes in the first: exactly
/// one of them resyncs (6 > 3 and 2 passes are not below the cold qps 2: no refill,
/// 6 - 2 = 4 tokens, a limit of 1 / (1 / 9 + 1 / 6) = 3.6), and both pass (under
/// the cold cap of 2 while the tokens are computed, or the limit of 3 after).
#[test]
fn crossing_a_second_resyncs_once() {
    check(|| {
        let w = limit();
        assert_eq!(w.cap(4.0), 3);
        let cell = Arc::new(WarmUpCell::new(&w, NOW));
        assert!(cell.try_pass(&w, NOW));
        assert!(cell.try_pass(&w, NOW));
        let got = race(w, &cell, [NOW + NS, NOW + NS + 1]);
        assert_eq!(got, [true, true]);
        assert_eq!(cell.stored(), 4.0, "resynced once");
        // The second's third pass, and no fourth.
        assert!(cell.try_pass(&w, NOW + NS + 2));
        assert!(!cell.try_pass(&w, NOW + NS + 3));
    });
}

/// A warm cell (1 token, a limit of 6) idle for a second: calls after the gap find
/// it cold again (1 + 2 s * 6 refilled, capped at 6: a limit of 2), and exactly two
/// of them pass. Each of two threads calls three times, so that one may pass twice
/// under the cold cap while the other resyncs, and call again after the resync-er
/// has published the tokens (and refused itself, the second being full): reading the
/// old tokens then would admit a third, so this is the `Release` of the publication.
#[test]
fn after_an_idle_gap_calls_see_the_cold_tokens() {
    check(|| {
        let w = limit();
        let cell = Arc::new(WarmUpCell::new(&w, NOW));
        // Second 1: 6 tokens, 2 pass. Second 2: 6 - 2 = 4, 3 pass. Second 3:
        // 4 > 3 and 3 >= 2, no refill: 4 - 3 = 1, below warning: 6 pass.
        for (second, passes) in [(0, 2), (1, 3), (2, 6)] {
            let t = NOW + second * NS;
            for _ in 0..passes {
                assert!(cell.try_pass(&w, t));
            }
            assert!(!cell.try_pass(&w, t));
        }
        assert_eq!(cell.stored(), 1.0);
        assert_eq!(w.cap(1.0), 6);
        // Second 4 idle; second 5: gap 2, no previous passes, 1 + 12 capped at 6.
        let t = NOW + 4 * NS;
        let handles = [0, 1].map(|_| {
            let cell = cell.clone();
            thread::spawn(move || (0..3).filter(|i| cell.try_pass(&w, t + i)).count())
        });
        let passed: usize = handles.map(|h| h.join().unwrap()).iter().sum();
        assert_eq!(passed, 2);
        assert_eq!(cell.stored(), 6.0);
    });
}
