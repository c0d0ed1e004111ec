//! The hung-call table (`point/hang.rs`): a call that ran past its threshold is
//! counted as a timeout exactly once, by the sweep or by the call itself when it
//! returns, however the two race; and live threads never share a slot.
//!
//! Lane numbers come from the runtime's process-wide mutex and each loom thread's own
//! thread-local, as in the runtime; loom gives every model thread its own
//! thread-locals and drops them (returning the lane number) when the thread ends, so
//! each execution starts from the same numbers. The models here hold [`SERIAL`] so
//! that two of them never draw numbers at once (loom replays executions and needs
//! each to behave the same), and start each execution with [`new_execution`], which
//! gives the numbers' mutex its loom lock (so that loom sees a lane handed from an
//! ended thread to a new one, with the stores into it).

use super::check_branches;
use crate::hang::HangTable;
use crate::lock::Recover;
use crate::sync::new_execution;
use loom::sync::Arc;
use loom::thread;
use std::sync::{Mutex, MutexGuard};

/// Steps in one execution: each sweep loads 512 slots.
const BRANCHES: usize = 10_000;

/// Held by each model here for its whole run (see the module docs).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().recover()
}

const START: u64 = 100;
const THRESHOLD: u64 = 50;
/// A sweep time at which a call started at [`START`] is past the threshold.
const LATE: u64 = START + THRESHOLD + 1;

/// Runs `call` on a thread of its own with a new table while `sweeps` sweeps past
/// [`START`]'s threshold run on others: what the call returned, how many calls the
/// sweeps counted, and the table (to check it after).
fn race_sweeps<R: Send + 'static>(
    sweeps: usize,
    call: impl FnOnce(&HangTable) -> R + Send + 'static,
) -> (R, u64, Arc<HangTable>) {
    new_execution();
    let t = Arc::new(HangTable::new());
    let caller = {
        let t = t.clone();
        thread::spawn(move || call(&t))
    };
    let sweepers: Vec<_> = (0..sweeps)
        .map(|_| {
            let t = t.clone();
            thread::spawn(move || t.sweep(LATE, THRESHOLD))
        })
        .collect();
    let answer = caller.join().unwrap();
    let counted = sweepers.into_iter().map(|s| s.join().unwrap()).sum();
    (answer, counted, t)
}

/// A call on its own thread registers, runs late and returns (`unregister(slot,
/// true)`: it measured itself as over the threshold) while two sweeps past its
/// threshold run on other threads. It counts itself as a timeout unless a sweep
/// already did; the total is always 1.
#[test]
fn a_late_call_is_counted_once() {
    let _serial = serial();
    check_branches(BRANCHES, || {
        let (itself, sweeps, t) = race_sweeps(2, |t| {
            let slot = t.register(START).expect("room");
            // Late by its own measure: counts itself unless a sweep did.
            u64::from(!t.unregister(slot, true))
        });
        let counted = itself + sweeps;
        assert_eq!(counted, 1, "a late call counted {counted} times");
        assert_eq!(t.sweep(u64::MAX - 1, 0), 0, "its slot was freed");
    });
}

/// The same with a call that returns through the in-line path (`late = false`: it did
/// not measure itself as late, so it counts only what the sweep reports), racing one
/// sweep: the sweep counts it at most once, the call reports a mark only if the
/// sweep counted it, and the slot is freed either way.
#[test]
fn a_sweep_racing_an_on_time_return_agrees_with_it() {
    let _serial = serial();
    check_branches(BRANCHES, || {
        let (swept, counted, t) = race_sweeps(1, |t| {
            let slot = t.register(START).expect("room");
            t.unregister(slot, false)
        });
        assert!(counted <= 1);
        // A mark the call sees is the sweep's count; a sweep that marks it between the
        // call's load and store counts it without the call knowing (it was in flight
        // past the threshold when the sweep read it).
        assert!(!swept || counted == 1, "the call saw a mark nobody counted");
        assert_eq!(t.sweep(u64::MAX - 1, 0), 0, "its slot was freed");
    });
}

/// The hot path's on-time return (`free_at`: one store, not asking whether a sweep
/// marked the slot) racing one sweep: the sweep counts the call at most once, and the
/// slot is free afterwards whichever came first, so no later sweep counts it again.
#[test]
fn an_on_time_return_frees_its_slot_with_one_store() {
    let _serial = serial();
    check_branches(BRANCHES, || {
        let ((), counted, t) = race_sweeps(1, |t| {
            let (slot, at) = t.register_slot_at(START);
            assert_ne!(slot, crate::hang::NO_SLOT, "room");
            HangTable::free_at(at.expect("the slot of a registered call"));
        });
        assert!(counted <= 1);
        assert_eq!(t.sweep(u64::MAX - 1, 0), 0, "its slot was freed");
    });
}

/// Two threads each register two calls, in flight while a sweep (with a threshold
/// none of them passed) runs: every call gets its own slot (the owned lanes are filled
/// with a plain load and a store, so two live threads in one lane could take the same
/// slot), and a later sweep sees each of them once.
#[test]
fn live_threads_never_share_a_slot() {
    let _serial = serial();
    check_branches(BRANCHES, || {
        new_execution();
        let t = Arc::new(HangTable::new());
        let callers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|id| {
                let t = t.clone();
                // The calls stay in flight past the thread's end.
                thread::spawn(move || [1, 2].map(|n| t.register(id << 8 | n).expect("room")))
            })
            .collect();
        let sweep = {
            let t = t.clone();
            thread::spawn(move || t.sweep(1 << 16, 1 << 16))
        };
        let mut slots: Vec<u32> = callers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(sweep.join().unwrap(), 0, "no call was past the threshold");
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), 4, "shared slots: {slots:?}");
        assert_eq!(t.sweep(u64::MAX - 1, 0), 4, "each call seen once");
        for s in slots {
            assert!(t.unregister(s, true), "swept");
        }
    });
}
