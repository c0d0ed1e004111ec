//! The durations table (`point/durations.rs`): threads recording into the shared lane
//! (compare-and-swap max, added totals) and into their own lanes (plain loads and
//! stores) lose no call and keep the max, whatever a reader sees meanwhile.

use super::check;
use crate::durations::{Durations, Total, OWNED};
use loom::sync::Arc;
use loom::thread;

/// Two threads past the owned lanes share one lane; a reader reads meanwhile.
#[test]
fn the_shared_lane_loses_no_call_and_keeps_the_max() {
    check(|| {
        let d = Arc::new(Durations::new());
        let writers: Vec<_> = [(OWNED as u32, 10), (OWNED as u32 + 1, 20)]
            .into_iter()
            .map(|(lane, us)| {
                let d = d.clone();
                thread::spawn(move || d.record(lane, 5, us))
            })
            .collect();
        let (calls, sum) = d.total().since(Total(0));
        let max = d.max_of(5);
        assert!(
            calls <= 2 && [0, 10, 20, 30].contains(&sum),
            "{calls} {sum}"
        );
        assert!([0, 10, 20].contains(&max), "{max}");
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(d.total().since(Total(0)), (2, 30));
        assert_eq!(d.max_of(5), 20);
    });
}

/// An owner and a thread of the shared lane, in two seconds: each second keeps its
/// own max, and the totals add up.
#[test]
fn owned_and_shared_lanes_add_up_per_second() {
    check(|| {
        let d = Arc::new(Durations::new());
        let owner = {
            let d = d.clone();
            thread::spawn(move || {
                d.record(0, 5, 7);
                d.record(0, 6, 3);
            })
        };
        let shared = {
            let d = d.clone();
            thread::spawn(move || d.record(OWNED as u32 + 3, 6, 9))
        };
        owner.join().unwrap();
        shared.join().unwrap();
        assert_eq!(d.total().since(Total(0)), (3, 19));
        assert_eq!((d.max_of(5), d.max_of(6)), (7, 9));
    });
}
