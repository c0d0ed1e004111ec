//! Spare boxes for permits' extras, a few per thread, so that a call whose policy
//! keeps records (a key, a classic breaker, an adaptive limit, a probe) takes its box
//! from its thread and gives it back to the thread it ends on, without the allocator.
//!
//! Bounds: a thread keeps at most [`SPARES`] spare boxes (40 bytes each); a box past
//! that is freed, and a thread without a spare allocates one. So the boxes alive are
//! at most the calls in flight with records plus `SPARES` per thread, and a thread's
//! spares are freed when it exits. Plain thread-local cells: no atomics, no locks.

use super::records::Extras;
use std::cell::Cell;

/// The most spare boxes a thread keeps.
pub(in crate::point) const SPARES: usize = 16;

struct Spares {
    len: Cell<usize>,
    boxes: [Cell<Option<Box<Extras>>>; SPARES],
}

thread_local! {
    static SPARE: Spares = const {
        Spares {
            len: Cell::new(0),
            boxes: [const { Cell::new(None) }; SPARES],
        }
    };
}

/// A box holding `extras`: a spare of this thread's, else a new one. Give it back
/// with [`give_back`].
#[inline]
pub(in crate::point) fn take(extras: Extras) -> Box<Extras> {
    let spare = SPARE
        .try_with(|s| {
            let n = s.len.get().checked_sub(1)?;
            s.len.set(n);
            s.boxes.get(n)?.take()
        })
        .ok()
        .flatten();
    match spare {
        Some(mut b) => {
            *b = extras;
            b
        }
        None => Box::new(extras),
    }
}

/// Gives back a box and returns what it held: kept as one of this thread's spares,
/// or freed if it has enough (or is exiting).
#[inline]
pub(in crate::point) fn give_back(b: Box<Extras>) -> Extras {
    let extras = Extras {
        form: b.form,
        records: b.records,
    };
    let _ = SPARE.try_with(move |s| {
        let n = s.len.get();
        if let Some(cell) = s.boxes.get(n) {
            cell.set(Some(b));
            s.len.set(n + 1);
        }
        // Else `b` is dropped: freed.
    });
    extras
}

/// How many spare boxes this thread keeps (the tests' view).
#[cfg(all(test, not(loom)))]
pub(in crate::point) fn held() -> usize {
    SPARE.with(|s| s.len.get())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::point::admit::records::Records;
    use crate::point::form::compiled::{Compiled, EMPTY};

    fn extras(key_fp: u64) -> Extras {
        let form: &'static Compiled = &EMPTY;
        Extras {
            form,
            records: Records {
                key_fp,
                ..Records::default()
            },
        }
    }

    fn address(b: &Extras) -> *const Extras {
        b
    }

    #[test]
    fn a_box_given_back_is_the_next_one_taken_on_its_thread() {
        let a = take(extras(1));
        let at = address(&a);
        assert_eq!(give_back(a).records.key_fp, 1);
        let b = take(extras(2));
        assert_eq!(address(&b), at, "the spare is reused");
        assert_eq!(give_back(b).records.key_fp, 2, "and holds the new records");
    }

    #[test]
    fn a_thread_keeps_at_most_its_spares_and_takes_from_them_first() {
        let boxes: Vec<_> = (0..SPARES as u64 + 5).map(|i| take(extras(i))).collect();
        let given: Vec<_> = boxes.iter().map(|b| address(b)).collect();
        for b in boxes {
            give_back(b);
        }
        assert_eq!(held(), SPARES, "the boxes past the spares were freed");
        let again: Vec<_> = (0..SPARES as u64).map(|i| take(extras(i))).collect();
        assert_eq!(held(), 0);
        for b in again {
            assert!(
                given.contains(&address(&b)),
                "a spare is one of the boxes given back"
            );
            give_back(b);
        }
    }

    #[test]
    fn a_box_taken_on_one_thread_is_a_spare_of_the_thread_that_gives_it_back() {
        let sent = std::thread::spawn(|| take(extras(5))).join().unwrap();
        let before = held();
        assert_eq!(give_back(sent).records.key_fp, 5);
        assert_eq!(held(), (before + 1).min(SPARES));
    }
}
