//! Registries made for tests free everything when dropped: points, their slots and
//! compiled forms, named retry budgets, hung-call tables, per-second series and the
//! timers of their chores. Measured with a counting global allocator: a round that
//! makes a registry with 300 points with every rule, calls them, and drops it must
//! leave the heap where it found it.

use resilience_runtime::retry::{BudgetConfig, Retry, RetryPolicy};
use resilience_runtime::{Clock, ManualClock, Policy, Registry};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, counting live bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The tests of this file take turns: the heap is counted for the whole process.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn every_rule() -> Policy {
    Policy::builder()
        .max_visits(1_000)
        .max_concurrency(100)
        .max_exceptions(100)
        .exception_rate(0.5, 10)
        .timeouts(Duration::from_millis(1), 100)
        .token_bucket(1_000.0, 100)
        .downgrade_percentage(50)
        .delay(Duration::from_secs(10), Some(Duration::from_secs(1)))
        .build()
        .unwrap()
}

const POINTS: usize = 300;

/// One registry's life: points with every rule, a breaker and a retry section with a
/// budget of their own, each changed once (two forms and slots of each kind kept), a
/// named budget, calls (timed ones arm the hung-call sweep and the sampler); then
/// everything is dropped. Returns the heap's growth at its peak.
fn one_life() -> isize {
    let before = live();
    let r = Registry::with_clock(Clock::system());
    r.retry_budget("freed.budget");
    for i in 0..POINTS {
        let name = format!("freed.{i}");
        r.set_policy(&name, every_rule()).unwrap();
        r.set_breaker(&name, resilience_runtime::BreakerPolicy::default())
            .unwrap();
        let retry = RetryPolicy::builder(Retry::builder(3).build().unwrap())
            .budget(BudgetConfig::default())
            .build()
            .unwrap();
        r.set_retry(&name, retry).unwrap();
        // A second setting of each: replaced slots and forms are kept until the end.
        let changed = Policy::builder()
            .max_concurrency(50)
            .token_bucket(10.0, 5)
            .timeouts(Duration::from_millis(2), 10)
            .build()
            .unwrap();
        r.set_policy(&name, changed).unwrap();
        let point = r.point(&name).unwrap();
        for _ in 0..3 {
            if let Ok(permit) = point.enter() {
                std::thread::sleep(Duration::from_micros(50));
                permit.finish(false);
            }
        }
    }
    let peak = live() - before;
    drop(r);
    peak
}

#[test]
fn a_dropped_registry_gives_back_every_byte_it_took() {
    let _turn = turn();
    // The first life makes what lives for the process: the interned names, the
    // timing wheel's and the clock's threads, thread-local lanes.
    one_life();
    // Timers fire on the wheel's thread; let anything in flight end.
    std::thread::sleep(Duration::from_millis(100));
    let start = live();
    let mut peaks = Vec::new();
    for _ in 0..3 {
        peaks.push(one_life());
    }
    // What a dropped point's timers and queued sweeps still hold (a weak reference
    // keeps its allocation) is given back when they fire: on a loaded host that can
    // take longer than a moment, so wait for the heap to settle (a leak never does).
    let mut grown = live() - start;
    for _ in 0..50 {
        if grown < 16 * 1024 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        grown = live() - start;
    }
    eprintln!("peaks {peaks:?} bytes; grown over three lives: {grown} bytes");
    assert!(
        peaks.iter().all(|p| *p > 500_000),
        "each life holds its points while it lives: {peaks:?}"
    );
    // A leak of one point's slots would be ~3 KiB × 300 per life.
    assert!(grown < 16 * 1024, "three lives left {grown} bytes behind");
}

#[test]
fn a_handle_outlives_its_registry_and_frees_its_point_last() {
    let _turn = turn();
    let r = Registry::with_clock(Clock::system());
    r.set_policy(
        "freed.handle",
        Policy::builder().max_visits(1).build().unwrap(),
    )
    .unwrap();
    let handle = r.point_handle("freed.handle").unwrap();
    let weak = std::sync::Arc::downgrade(&handle);
    drop(r);
    // The point still enforces its policy.
    handle.enter().unwrap().finish(false);
    assert!(handle.enter().is_err());
    drop(handle);
    assert!(weak.upgrade().is_none(), "the last handle freed the point");
}

#[test]
fn a_manual_clock_outliving_its_registry_lets_its_points_go() {
    let _turn = turn();
    let manual = ManualClock::new();
    let before = live();
    let r = Registry::with_clock(Clock::manual(&manual));
    let policy = Policy::builder()
        .max_concurrency(1)
        .queue(4, Duration::from_secs(1))
        .build()
        .unwrap();
    let mut weaks = Vec::new();
    for i in 0..100 {
        let name = format!("freed.manual.{i}");
        r.set_policy(&name, policy.clone()).unwrap();
        let point = r.point_handle(&name).unwrap();
        // A call hooks the sampler, a wait the queue, into the manual clock.
        let held = point.enter().unwrap();
        assert!(point.try_enter().is_err());
        held.finish(false);
        weaks.push(std::sync::Arc::downgrade(&point));
    }
    drop(r);
    assert!(weaks.iter().all(|w| w.upgrade().is_none()));
    // The clock's hooks find their points gone at its next move, and go too.
    manual.advance(Duration::from_secs(5));
    drop(weaks);
    let grown = live() - before;
    assert!(grown < 4 * 1024, "{grown} bytes kept by the clock's hooks");
}
