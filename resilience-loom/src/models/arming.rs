//! The arming protocol of background jobs (`point/arming.rs`: the hung-call sweep,
//! the per-second sampler): however callers and the job's runs race, the job is
//! scheduled exactly when it is not idle, never twice, and it stops once nothing
//! comes.

use super::check;
use crate::arming::Arming;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A caller's side: arm if not armed, and schedule if the job was stopped.
fn call(a: &Arming, scheduled: &AtomicUsize) {
    if !a.is_armed() && a.arm() {
        let before = scheduled.fetch_add(1, Ordering::SeqCst);
        assert_eq!(before, 0, "scheduled twice");
    }
}

/// One run of the job, if it is scheduled: it finds work (`busy`) or not, and says
/// whether to run again (which keeps it scheduled).
fn run(a: &Arming, scheduled: &AtomicUsize, busy: bool) {
    if scheduled.load(Ordering::SeqCst) == 0 {
        return;
    }
    if !a.after_run(busy) {
        scheduled.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Two callers race two runs (one busy, one idle); afterwards the job is idle
/// exactly when it is not scheduled, and running it to the end stops it.
#[test]
fn the_job_is_scheduled_exactly_when_it_is_not_idle() {
    check(|| {
        let a = Arc::new(Arming::new());
        let scheduled = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (a, s) = (a.clone(), scheduled.clone());
                thread::spawn(move || call(&a, &s))
            })
            .collect();
        let runner = {
            let (a, s) = (a.clone(), scheduled.clone());
            thread::spawn(move || {
                run(&a, &s, true);
                run(&a, &s, false);
            })
        };
        for c in callers {
            c.join().unwrap();
        }
        runner.join().unwrap();
        let pending = scheduled.load(Ordering::SeqCst);
        assert!(pending <= 1);
        assert_eq!(
            pending == 0,
            a.is_idle(),
            "armed but not scheduled, or the reverse"
        );
        // Nothing more comes: at most two more runs stop it.
        for _ in 0..2 {
            run(&a, &scheduled, false);
        }
        assert!(a.is_idle());
        assert_eq!(scheduled.load(Ordering::SeqCst), 0);
        // The next call starts it again.
        call(&a, &scheduled);
        assert_eq!(scheduled.load(Ordering::SeqCst), 1);
    });
}
