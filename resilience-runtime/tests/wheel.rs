//! Timing wheel: go-zero's table tests on a manual ticker, the go-zero quirks fixed,
//! and one real-time run on the thread ticker.

use resilience_runtime::wheel::{ManualTicker, TimingWheel, WheelError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// The interval of the manual-ticker tests; delays are whole multiples of it.
const STEP: Duration = Duration::from_secs(1);

fn steps(n: u64) -> Duration {
    STEP * u32::try_from(n).unwrap()
}

/// Every callback as (key, value), in the order they ran.
type Log = Arc<Mutex<Vec<(u32, u32)>>>;

/// A hand-ticked wheel of `slots` slots of [`STEP`] whose callbacks are logged.
fn manual_wheel(slots: usize) -> (TimingWheel<u32, u32>, ManualTicker<u32, u32>, Log) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let (wheel, ticker) =
        TimingWheel::with_ticker(STEP, slots, move |k, v| sink.lock().unwrap().push((k, v)))
            .unwrap();
    (wheel, ticker, log)
}

/// Ticks until something fires (at most `max` ticks); returns the tick it fired on
/// (counted from the wheel's start) and what fired. Callbacks run inline in `tick`,
/// so the log is complete when it returns.
fn tick_until_fired(
    ticker: &ManualTicker<u32, u32>,
    log: &Log,
    max: u64,
) -> (u64, Vec<(u32, u32)>) {
    for _ in 0..max {
        ticker.tick().unwrap();
        let fired: Vec<_> = log.lock().unwrap().drain(..).collect();
        if !fired.is_empty() {
            return (ticker.now().unwrap(), fired);
        }
    }
    panic!(
        "nothing fired within {max} ticks (now at tick {})",
        ticker.now().unwrap()
    );
}

// ---- go-zero's table tests -------------------------------------------------------

#[test]
fn set_fires_on_exact_tick() {
    // TestTimingWheel_SetTimer
    for set_at in [5, 7, 10, 12] {
        let (wheel, ticker, log) = manual_wheel(5);
        wheel.set_timer(1, 2, steps(set_at)).unwrap();
        assert_eq!(
            tick_until_fired(&ticker, &log, 50),
            (set_at, vec![(1, 2)]),
            "set at {set_at}"
        );
    }
}

#[test]
fn set_then_move_fires_on_moved_tick() {
    // TestTimingWheel_SetAndMoveThenStart
    for (set_at, move_at) in [(3, 5), (3, 7), (3, 10), (3, 12), (5, 7), (5, 10), (5, 12)] {
        let (wheel, ticker, log) = manual_wheel(5);
        wheel.set_timer(1, 2, steps(set_at)).unwrap();
        assert!(wheel.move_timer(&1, steps(move_at)).unwrap());
        assert_eq!(
            tick_until_fired(&ticker, &log, 50),
            (move_at, vec![(1, 2)]),
            "set at {set_at}, moved to {move_at}"
        );
        ticker.advance(20).unwrap();
        assert!(log.lock().unwrap().is_empty(), "fired twice");
    }
}

#[test]
fn move_twice_fires_on_last_move() {
    // TestTimingWheel_SetAndMoveTwice
    for (set_at, move_at, again_at) in [
        (3, 5, 10),
        (3, 7, 12),
        (3, 10, 15),
        (3, 12, 17),
        (5, 7, 12),
        (5, 10, 17),
        (5, 12, 17),
    ] {
        let (wheel, ticker, log) = manual_wheel(5);
        wheel.set_timer(1, 2, steps(set_at)).unwrap();
        wheel.move_timer(&1, steps(move_at)).unwrap();
        wheel.move_timer(&1, steps(again_at)).unwrap();
        assert_eq!(
            tick_until_fired(&ticker, &log, 50),
            (again_at, vec![(1, 2)]),
            "set {set_at}, move {move_at}, move {again_at}"
        );
    }
}

#[test]
fn elapsed_then_set_fires_on_elapsed_plus_delay() {
    // TestTimingWheel_ElapsedAndSet
    for (elapsed, set_at) in [(3, 5), (3, 7), (3, 10), (3, 12), (5, 7), (5, 10), (5, 12)] {
        let (wheel, ticker, log) = manual_wheel(5);
        assert_eq!(ticker.advance(elapsed).unwrap(), 0);
        wheel.set_timer(1, 2, steps(set_at)).unwrap();
        assert_eq!(
            tick_until_fired(&ticker, &log, 50),
            (elapsed + set_at, vec![(1, 2)]),
            "elapsed {elapsed}, set at {set_at}"
        );
    }
}

#[test]
fn elapsed_then_set_then_move_fires_on_elapsed_plus_move() {
    // TestTimingWheel_ElapsedAndSetThenMove
    for (elapsed, set_at, move_at) in [
        (3, 5, 10),
        (3, 7, 12),
        (3, 10, 15),
        (3, 12, 16),
        (5, 7, 12),
        (5, 10, 15),
        (5, 12, 17),
    ] {
        let (wheel, ticker, log) = manual_wheel(5);
        ticker.advance(elapsed).unwrap();
        wheel.set_timer(1, 2, steps(set_at)).unwrap();
        wheel.move_timer(&1, steps(move_at)).unwrap();
        assert_eq!(
            tick_until_fired(&ticker, &log, 50),
            (elapsed + move_at, vec![(1, 2)]),
            "elapsed {elapsed}, set {set_at}, move {move_at}"
        );
    }
}

#[test]
fn move_after_ticks_passed_is_not_early() {
    // go-zero fires this one after 5 ticks: set at 2, one tick passes, move to 10.
    let (wheel, ticker, log) = manual_wheel(5);
    wheel.set_timer(1, 2, steps(2)).unwrap();
    ticker.tick().unwrap();
    wheel.move_timer(&1, steps(10)).unwrap();
    assert_eq!(tick_until_fired(&ticker, &log, 50), (11, vec![(1, 2)]));
    // Every combination, against the plain rule "fires on elapsed + new delay".
    for set_at in 1..=12 {
        for passed in 0..set_at {
            for move_at in 1..=12 {
                let (wheel, ticker, log) = manual_wheel(5);
                wheel.set_timer(1, 2, steps(set_at)).unwrap();
                ticker.advance(passed).unwrap();
                wheel.move_timer(&1, steps(move_at)).unwrap();
                assert_eq!(
                    tick_until_fired(&ticker, &log, 50).0,
                    passed + move_at,
                    "set {set_at}, {passed} ticks, move {move_at}"
                );
            }
        }
    }
}

#[test]
fn set_twice_keeps_last_value_and_delay() {
    // TestTimingWheel_SetTimerTwice
    let (wheel, ticker, log) = manual_wheel(10);
    assert_eq!(wheel.set_timer(1, 3, steps(4)).unwrap(), None);
    assert_eq!(wheel.set_timer(1, 5, steps(7)).unwrap(), Some(3));
    assert_eq!(tick_until_fired(&ticker, &log, 50), (7, vec![(1, 5)]));
}

#[test]
fn short_delay_fires_on_next_tick() {
    // TestTimingWheel_SetTimerSoon, plus a zero delay.
    for delay in [Duration::ZERO, STEP / 2, STEP - Duration::from_nanos(1)] {
        let (wheel, ticker, log) = manual_wheel(10);
        wheel.set_timer(1, 3, delay).unwrap();
        assert_eq!(tick_until_fired(&ticker, &log, 5), (1, vec![(1, 3)]));
    }
    // Delays round down to whole intervals.
    let (wheel, ticker, log) = manual_wheel(10);
    wheel.set_timer(1, 3, STEP * 2 + STEP / 2).unwrap();
    assert_eq!(tick_until_fired(&ticker, &log, 5), (2, vec![(1, 3)]));
}

#[test]
fn move_to_now_fires_once_on_next_tick() {
    // TestTimingWheel_MoveTimerSoon; go-zero runs the task at once and leaves the old
    // entry scheduled, so it fires again at tick 4.
    let (wheel, ticker, log) = manual_wheel(3);
    wheel.set_timer(1, 3, steps(4)).unwrap();
    assert!(wheel.move_timer(&1, STEP / 2).unwrap());
    assert_eq!(tick_until_fired(&ticker, &log, 5), (1, vec![(1, 3)]));
    assert_eq!(ticker.advance(10).unwrap(), 0);
}

#[test]
fn move_earlier_and_unknown_key() {
    // TestTimingWheel_MoveTimerEarlier and TestTimingWheel_MoveTimer
    let (wheel, ticker, log) = manual_wheel(10);
    wheel.set_timer(1, 3, steps(4)).unwrap();
    wheel.move_timer(&1, steps(2)).unwrap();
    assert!(!wheel.move_timer(&99, STEP).unwrap());
    assert_eq!(tick_until_fired(&ticker, &log, 5), (2, vec![(1, 3)]));

    let (wheel, ticker, log) = manual_wheel(3);
    wheel.set_timer(1, 3, steps(4)).unwrap();
    wheel.move_timer(&1, steps(7)).unwrap();
    assert_eq!(ticker.advance(6).unwrap(), 0);
    assert_eq!(tick_until_fired(&ticker, &log, 5), (7, vec![(1, 3)]));
}

#[test]
fn move_then_remove_never_fires() {
    let (wheel, ticker, log) = manual_wheel(5);
    wheel.set_timer(1, 2, steps(3)).unwrap();
    wheel.move_timer(&1, steps(7)).unwrap();
    assert_eq!(wheel.remove_timer(&1).unwrap(), Some(2));
    assert_eq!(wheel.remove_timer(&1).unwrap(), None);
    assert_eq!(wheel.remove_timer(&42).unwrap(), None);
    assert_eq!(ticker.advance(30).unwrap(), 0);
    assert!(log.lock().unwrap().is_empty());
    assert!(wheel.is_empty());
}

#[test]
fn fifty_keys_on_the_same_tick_each_fire_once() {
    let (wheel, ticker, log) = manual_wheel(5);
    for k in 0..50 {
        wheel.set_timer(k, k * 10, steps(7)).unwrap();
    }
    assert_eq!(wheel.len(), 50);
    assert_eq!(ticker.advance(6).unwrap(), 0);
    assert_eq!(ticker.tick().unwrap(), 50);
    let fired: Vec<_> = log.lock().unwrap().drain(..).collect();
    // Each key once, with its own value, in the order they were set.
    assert_eq!(fired, (0..50).map(|k| (k, k * 10)).collect::<Vec<_>>());
    assert_eq!(ticker.advance(20).unwrap(), 0);
    assert!(wheel.is_empty());
}

#[test]
fn many_keys_at_many_delays_fire_on_their_ticks() {
    let (wheel, ticker, log) = manual_wheel(7);
    let mut expected: HashMap<u32, u64> = HashMap::new();
    for k in 0..500u32 {
        let delay = u64::from(k * 37 % 41 + 1);
        wheel.set_timer(k, k, steps(delay)).unwrap();
        expected.insert(k, delay);
    }
    // Move a third, remove a fifth.
    for k in (0..500u32).step_by(3) {
        let delay = u64::from(k * 13 % 29 + 1);
        wheel.move_timer(&k, steps(delay)).unwrap();
        expected.insert(k, delay);
    }
    for k in (0..500u32).step_by(5) {
        wheel.remove_timer(&k).unwrap();
        expected.remove(&k);
    }
    let mut fired_at: HashMap<u32, u64> = HashMap::new();
    for _ in 0..50 {
        ticker.tick().unwrap();
        let now = ticker.now().unwrap();
        for (k, v) in log.lock().unwrap().drain(..) {
            assert_eq!(k, v);
            assert!(fired_at.insert(k, now).is_none(), "key {k} fired twice");
        }
    }
    assert_eq!(fired_at, expected);
}

#[test]
fn concurrent_set_move_remove_from_many_threads_fire_exactly_once() {
    const THREADS: u32 = 4;
    const KEYS: u32 = 2_000;
    let (wheel, ticker, log) = manual_wheel(16);
    let wheel = Arc::new(wheel);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let wheel = Arc::clone(&wheel);
            std::thread::spawn(move || {
                for i in 0..KEYS {
                    let k = t * KEYS + i;
                    wheel.set_timer(k, k, steps(u64::from(i % 40 + 1))).unwrap();
                    if i % 3 == 0 {
                        wheel.move_timer(&k, steps(u64::from(i % 7 + 1))).unwrap();
                    }
                    if i % 4 == 0 {
                        assert_eq!(wheel.remove_timer(&k).unwrap(), Some(k));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let expected = (THREADS * KEYS - THREADS * KEYS.div_ceil(4)) as usize;
    assert_eq!(wheel.len(), expected);
    assert_eq!(ticker.advance(41).unwrap(), expected);
    let mut fired: Vec<u32> = log
        .lock()
        .unwrap()
        .iter()
        .map(|&(k, v)| {
            assert_eq!(k, v);
            k
        })
        .collect();
    fired.sort_unstable();
    fired.dedup();
    assert_eq!(fired.len(), expected);
    assert!(fired.iter().all(|k| !(k % KEYS).is_multiple_of(4)));
    assert!(wheel.is_empty());
}

// ---- drain, stop, errors ---------------------------------------------------------

#[test]
fn drain_hands_over_everything_and_forgets_the_keys() {
    // TestTimingWheel_Drain
    let (wheel, ticker, log) = manual_wheel(10);
    wheel.set_timer(1, 3, steps(4)).unwrap();
    wheel.set_timer(2, 5, steps(7)).unwrap();
    wheel.set_timer(3, 7, steps(7)).unwrap();
    let mut drained = Vec::new();
    assert_eq!(wheel.drain(|k, v| drained.push((k, v))).unwrap(), 3);
    drained.sort_unstable();
    assert_eq!(drained, [(1, 3), (2, 5), (3, 7)]);
    assert!(wheel.is_empty());
    assert_eq!(wheel.drain(|_, _| panic!("already drained")).unwrap(), 0);
    assert_eq!(ticker.advance(20).unwrap(), 0);
    assert!(log.lock().unwrap().is_empty());

    // go-zero kept drained keys mapped to detached entries, so this timer never fired.
    assert_eq!(wheel.set_timer(1, 9, steps(2)).unwrap(), None);
    assert!(wheel.move_timer(&1, steps(3)).unwrap());
    let start = ticker.now().unwrap();
    assert_eq!(
        tick_until_fired(&ticker, &log, 10),
        (start + 3, vec![(1, 9)])
    );
}

#[test]
fn stop_is_idempotent_and_later_calls_are_closed() {
    let (wheel, ticker, log) = manual_wheel(5);
    wheel.set_timer(1, 2, steps(1)).unwrap();
    assert!(!wheel.is_stopped());
    wheel.stop();
    wheel.stop();
    assert!(wheel.is_stopped());
    assert_eq!(wheel.set_timer(1, 2, STEP), Err(WheelError::Closed));
    assert_eq!(wheel.move_timer(&1, STEP), Err(WheelError::Closed));
    assert_eq!(wheel.remove_timer(&1), Err(WheelError::Closed));
    assert_eq!(wheel.drain(|_, _| {}), Err(WheelError::Closed));
    assert_eq!(ticker.tick(), Err(WheelError::Closed));
    assert_eq!(ticker.advance(3), Err(WheelError::Closed));
    assert_eq!(ticker.now(), Err(WheelError::Closed));
    assert!(wheel.is_empty());
    assert!(
        log.lock().unwrap().is_empty(),
        "pending timers are dropped, not fired"
    );
    assert_eq!(
        WheelError::Closed.to_string(),
        "the timing wheel is stopped"
    );
}

#[test]
fn invalid_construction_is_an_error() {
    let noop = |_: u32, _: u32| {};
    assert_eq!(
        TimingWheel::new(Duration::ZERO, 10, noop).unwrap_err(),
        WheelError::ZeroInterval
    );
    assert_eq!(
        TimingWheel::new(STEP, 0, noop).unwrap_err(),
        WheelError::ZeroSlots
    );
    assert_eq!(
        TimingWheel::with_ticker(Duration::ZERO, 10, noop).unwrap_err(),
        WheelError::ZeroInterval
    );
    assert_eq!(
        TimingWheel::with_ticker(STEP, 0, noop).unwrap_err(),
        WheelError::ZeroSlots
    );
    assert!(WheelError::ZeroSlots.to_string().contains("`slots`"));
    assert!(WheelError::ZeroInterval.to_string().contains("`interval`"));
}

#[test]
fn panicking_callback_does_not_kill_the_manual_wheel() {
    let hits = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&hits);
    let (wheel, ticker) = TimingWheel::with_ticker(STEP, 4, move |k: u32, _: ()| {
        if k == 0 {
            panic!("callback for key 0 fails (expected in this test)");
        }
        seen.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    for k in 0..3 {
        wheel.set_timer(k, (), STEP).unwrap();
    }
    assert_eq!(ticker.tick().unwrap(), 3);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the other callbacks of the tick ran"
    );
    wheel.set_timer(7, (), STEP).unwrap();
    assert_eq!(ticker.tick().unwrap(), 1);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[test]
fn callbacks_may_rearm_timers() {
    // The callback reaches the wheel through a `Weak`, so there is no cycle.
    let handle: Arc<OnceLock<Weak<TimingWheel<u32, u32>>>> = Arc::default();
    let inner = Arc::clone(&handle);
    let (wheel, ticker) = TimingWheel::with_ticker(STEP, 4, move |k: u32, n: u32| {
        if let Some(w) = inner.get().and_then(Weak::upgrade) {
            if n > 0 {
                w.set_timer(k, n - 1, STEP * 3).unwrap();
            }
        }
    })
    .unwrap();
    let wheel = Arc::new(wheel);
    handle.set(Arc::downgrade(&wheel)).unwrap();
    wheel.set_timer(1, 2, STEP).unwrap();
    // Fires at 1, re-armed for 4, then 7, then done.
    let fired: Vec<usize> = (0..10).map(|_| ticker.tick().unwrap()).collect();
    assert_eq!(fired, [1, 0, 0, 1, 0, 0, 1, 0, 0, 0]);
}

#[test]
fn huge_delays_do_not_overflow() {
    let (wheel, ticker, _log) = manual_wheel(5);
    wheel.set_timer(1, 1, Duration::MAX).unwrap();
    assert_eq!(ticker.advance(100).unwrap(), 0);
    assert_eq!(wheel.len(), 1);
}

#[test]
fn wheel_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TimingWheel<String, Vec<u8>>>();
    assert_send_sync::<ManualTicker<String, Vec<u8>>>();
}

// ---- real time -------------------------------------------------------------------

#[test]
fn thread_ticker_fires_in_real_time_and_survives_a_panic() {
    let (tx, rx) = mpsc::channel();
    let ticker_thread = Arc::new(Mutex::new(None));
    let seen_thread = Arc::clone(&ticker_thread);
    let wheel = TimingWheel::new(Duration::from_millis(10), 8, move |k: u32, v: u32| {
        *seen_thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        if k == 0 {
            panic!("callback for key 0 fails (expected in this test)");
        }
        let _ = tx.send((k, v));
    })
    .unwrap();
    let start = std::time::Instant::now();
    wheel.set_timer(0, 0, Duration::from_millis(10)).unwrap();
    wheel.set_timer(1, 10, Duration::from_millis(30)).unwrap();
    wheel.set_timer(2, 20, Duration::from_millis(150)).unwrap(); // about two turns
    wheel.set_timer(3, 30, Duration::from_millis(40)).unwrap();
    wheel.remove_timer(&3).unwrap();

    let timeout = Duration::from_secs(10);
    assert_eq!(rx.recv_timeout(timeout).unwrap(), (1, 10));
    assert_eq!(rx.recv_timeout(timeout).unwrap(), (2, 20));
    let elapsed = start.elapsed();
    // Fires on the 15th tick: at least 14 intervals after the set.
    assert!(elapsed >= Duration::from_millis(140), "{elapsed:?}");
    assert_eq!(
        ticker_thread.lock().unwrap().as_deref(),
        Some("timing-wheel-worker"),
        "callbacks run on the worker thread"
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "removed timer fired"
    );
    wheel.stop();
    wheel.stop();
    assert_eq!(
        wheel.set_timer(5, 5, Duration::ZERO),
        Err(WheelError::Closed)
    );
}

/// With few timers the ticker sleeps until one is due, and parks while there is none:
/// a timer set meanwhile wakes it and still fires after its own delay, neither at the
/// sleeping ticker's next wake-up nor early by the ticks it slept through.
#[test]
fn a_sleeping_ticker_wakes_for_a_timer_set_while_it_sleeps() {
    let (tx, rx) = mpsc::channel();
    let wheel = TimingWheel::new(Duration::from_millis(10), 8, move |k: u32, _: u32| {
        let _ = tx.send((k, std::time::Instant::now()));
    })
    .unwrap();
    let timeout = Duration::from_secs(10);
    // Parked with nothing pending, then woken by a set: fires after its delay.
    std::thread::sleep(Duration::from_millis(100));
    let set = std::time::Instant::now();
    wheel.set_timer(1, 0, Duration::from_millis(50)).unwrap();
    let (key, at) = rx.recv_timeout(timeout).unwrap();
    assert_eq!(key, 1);
    assert!(at - set >= Duration::from_millis(40), "{:?}", at - set);
    // Asleep until a timer 3 s away: a shorter one set later fires on its own delay.
    wheel.set_timer(2, 0, Duration::from_secs(3)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let set = std::time::Instant::now();
    wheel.set_timer(3, 0, Duration::from_millis(100)).unwrap();
    let (key, at) = rx.recv_timeout(timeout).unwrap();
    assert_eq!(key, 3, "the sooner timer first");
    let after = at - set;
    assert!(after >= Duration::from_millis(90), "fired early: {after:?}");
    assert!(
        after < Duration::from_millis(2_000),
        "waited for the sleeping ticker: {after:?}"
    );
    assert_eq!(rx.recv_timeout(timeout).unwrap().0, 2);
    wheel.stop();
}

#[test]
fn dropping_the_wheel_stops_it() {
    let (wheel, ticker, log) = manual_wheel(4);
    wheel.set_timer(1, 1, STEP).unwrap();
    drop(wheel);
    assert_eq!(ticker.tick(), Err(WheelError::Closed));
    assert!(log.lock().unwrap().is_empty());
}
