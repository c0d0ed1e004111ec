//! Blocks made on first use (`point/chunks.rs`): threads racing to make the same block
//! all get the one published, see what its maker wrote into it, and no block is made
//! twice or lost; blocks of other indices are left alone.

use super::check;
use crate::chunks::Chunks;
use crate::sync::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A block whose maker writes its thread's mark before publishing it.
struct Block(AtomicU64);

#[test]
fn racing_makers_share_one_block() {
    check(|| {
        let chunks = Arc::new(Chunks::<Block, 2>::new());
        let handles: Vec<_> = (1..=2u64)
            .map(|mark| {
                let chunks = chunks.clone();
                thread::spawn(move || {
                    let block = chunks.get_or_make(0, || Block(AtomicU64::new(mark)));
                    // Whoever made it, its contents are visible here (the other
                    // thread may have added its 10 already).
                    let seen = block.0.load(Ordering::Relaxed);
                    assert!(matches!(seen % 10, 1 | 2), "an unpublished block: {seen}");
                    block.0.fetch_add(10, Ordering::Relaxed);
                    std::ptr::from_ref(block) as usize
                })
            })
            .collect();
        let blocks: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            blocks[0], blocks[1],
            "both threads use the one published block"
        );
        let block = chunks.get(0).expect("made");
        let v = block.0.load(Ordering::Relaxed);
        assert!(v == 21 || v == 22, "neither thread's write lost: {v}");
        assert!(chunks.get(1).is_none(), "another index is never made");
        assert_eq!(chunks.made().count(), 1);
    });
}

#[test]
fn a_reader_sees_a_block_whole_or_not_at_all() {
    check(|| {
        let chunks = Arc::new(Chunks::<Block, 1>::new());
        let maker = {
            let chunks = chunks.clone();
            thread::spawn(move || {
                chunks.get_or_make(0, || Block(AtomicU64::new(7)));
            })
        };
        if let Some(block) = chunks.get(0) {
            assert_eq!(
                block.0.load(Ordering::Relaxed),
                7,
                "a block seen before its contents"
            );
        }
        maker.join().unwrap();
        assert_eq!(chunks.get(0).map(|b| b.0.load(Ordering::Relaxed)), Some(7));
    });
}
