//! The policy cell (`point/cell.rs`): a reader sees no form, or one whole form as it
//! was stored (never a torn mix of two), while a writer publishes and swaps forms.

use super::check;
use crate::cell::{Kept, PolicyCell};
use crate::sync::new_execution;
use loom::sync::{Arc, Mutex};
use loom::thread;

/// A form whose two halves always agree when read whole.
#[derive(Debug, PartialEq)]
struct Form(u64, u64);

#[test]
fn a_reader_sees_whole_forms_only() {
    check(|| {
        new_execution();
        // The kept forms live beside the cell, as in a point (they are freed with it).
        let owner = Arc::new((PolicyCell::<Form>::new(), Mutex::new(Kept::new())));
        let writer = {
            let owner = owner.clone();
            thread::spawn(move || {
                let (cell, kept) = &*owner;
                let mut kept = kept.lock().unwrap();
                cell.store(Some(Form(1, 1)), &mut kept);
                cell.store(Some(Form(2, 2)), &mut kept);
                cell.store(Some(Form(1, 1)), &mut kept);
            })
        };
        let cell = &owner.0;
        for _ in 0..2 {
            if let Some(f) = cell.get() {
                assert_eq!(f.0, f.1, "a torn form");
                assert!(f.0 == 1 || f.0 == 2);
            }
        }
        writer.join().unwrap();
        let last = cell.get().expect("published");
        assert_eq!(*last, Form(1, 1));
    });
}
