//! The window's ring (`window.rs`): a reader never takes a snapshot newer than its
//! window's start as the base, while another thread rotates the ring, so a window
//! never looks emptier than it is.

use super::check;
use crate::window::Ring;
use loom::sync::Arc;
use loom::thread;

/// Two buckets of 10 ns; the snapshot at the start of tick `t` is `10 * t`. The
/// window ending at tick 1 starts at tick 0 (base 0), the one ending at tick 2 at
/// tick 1 (base 10): whatever the interleaving, no reader may see a base above 10
/// (the snapshot of tick 2, written into the slot of the window-1 base, was the bug).
#[test]
fn a_reader_never_takes_a_newer_snapshot_as_base() {
    check(|| {
        let ring = Arc::new(Ring::<1>::new(2, 10, 5, [0]));
        let rotator = {
            let ring = ring.clone();
            thread::spawn(move || {
                assert!(ring.base(15, || [10])[0] <= 10);
                assert!(ring.base(25, || [20])[0] <= 10);
            })
        };
        // A reader on the published window (its `now` crosses no boundary).
        let base = ring.base(0, || unreachable!("no rotation from tick 0"))[0];
        assert!(base <= 10, "base {base}: newer than the window's start");
        rotator.join().unwrap();
        assert_eq!(ring.base(25, || [20])[0], 10, "the window ending at tick 2");
    });
}

/// Two threads crossing the same boundary rotate once between them (the busy claim):
/// both see the new window's base.
#[test]
fn racing_rotations_publish_one_window() {
    check(|| {
        let ring = Arc::new(Ring::<1>::new(2, 10, 5, [0]));
        let other = {
            let ring = ring.clone();
            thread::spawn(move || ring.base(15, || [10])[0])
        };
        let mine = ring.base(15, || [10])[0];
        let theirs = other.join().unwrap();
        // A thread that found the rotation running reads the window before it (base 0)
        // or after it (base 0 too: the window ending at tick 1 starts at tick 0).
        assert_eq!((mine, theirs), (0, 0));
        assert_eq!(ring.base(25, || [20])[0], 10);
    });
}
