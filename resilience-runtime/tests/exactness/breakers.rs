//! Breakers.
//!
//! * Classic: half-open admits exactly `half_open_probes` of the calls racing for the
//!   probes: the breaker alone, under `Policy::observe()`, and while another thread
//!   keeps swapping the point's policy between `Policy::observe()` and
//!   `max_visits(u64::MAX / 2)`.
//! * SRE (the breaker itself, on explicit times): while dropping, at most one forced
//!   probe per `force_pass_interval`, whatever the number of threads asking at the
//!   same instant or along a timeline (across ten bucket boundaries of the window);
//!   with a roll of 0 those probes are the only calls admitted, and every decision
//!   sees the window's failures (a positive drop ratio).

use crate::support::*;
use resilience_runtime::breaker::{ClassicConfig, SreBreaker, SreConfig, SreDecision, SreVerdict};
use resilience_runtime::retry::Backoff;
use resilience_runtime::{BreakerPolicy, Policy, Reason};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

// ---- classic breaker ----------------------------------------------------------------------

/// What the point around the classic breaker has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClassicMode {
    /// The breaker and no policy.
    Alone,
    /// The breaker and `Policy::observe()`.
    Observe,
    /// The breaker, with another thread swapping the policy between `Policy::observe()`
    /// and `max_visits(u64::MAX / 2)` from before the breaker trips until the race
    /// for the probes has ended.
    Swapped,
}

const PROBES: u64 = 5;
const FAILURES: u64 = 3;
const OPEN_WAIT: Duration = Duration::from_secs(5);
/// Independent races (a fresh registry each) per thread count while the policy is
/// swapped, so that swaps land in the middle of admissions.
const SWAPPED_ROUNDS: usize = 10;

/// One half-open race: `FAILURES` failures open the breaker, the open wait passes on
/// the manual clock, and `threads` calls race for the `PROBES` probes, each holding its
/// permit until every thread has tried: exactly `min(PROBES, threads)` are admitted.
fn classic_case(v: &Verdicts, threads: usize, mode: ClassicMode, round: usize) {
    let (reg, clock) = manual_registry();
    let name = format!("breaker.{threads}.{mode:?}.{round}");
    let rule = format!(
        "classic breaker, {FAILURES} failures open it, {PROBES} half-open probes{}",
        match mode {
            ClassicMode::Alone => String::new(),
            ClassicMode::Observe => ", observe policy".to_owned(),
            ClassicMode::Swapped => format!(
                ", observe policy swapped with max_visits(u64::MAX / 2), round {}",
                round + 1
            ),
        }
    );
    let swapped = mode == ClassicMode::Swapped;
    let case = Case::new(rule, Shape::Enter, threads, swapped);
    reg.set_breaker(
        &name,
        BreakerPolicy::Classic(
            ClassicConfig::builder()
                .consecutive_failures(FAILURES)
                .open_wait(Backoff::fixed(OPEN_WAIT))
                .half_open_probes(PROBES)
                .build()
                .unwrap(),
        ),
    )
    .unwrap();
    if mode != ClassicMode::Alone {
        reg.set_policy(&name, Policy::observe()).unwrap();
    }
    let other = Policy::builder().max_visits(u64::MAX / 2).build().unwrap();
    let p = reg.point(&name).unwrap();
    let (done, swaps) = (AtomicBool::new(false), AtomicU64::new(0));
    let seen = Seen::default();
    let (start, tried) = (Barrier::new(threads), Barrier::new(threads));
    let (before, after) = std::thread::scope(|s| {
        if swapped {
            let (name, other, done, swaps) = (&name, &other, &done, &swaps);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    reg.set_policy(name, other.clone()).unwrap();
                    reg.set_policy(name, Policy::observe()).unwrap();
                    swaps.fetch_add(1, Ordering::SeqCst);
                    // Leave the callers a share of the CPUs: a swap takes locks.
                    std::thread::yield_now();
                }
            });
            while swaps.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
        }
        for _ in 0..FAILURES {
            match p.enter() {
                Ok(permit) => permit.finish(true),
                Err(d) => v.check(false, || {
                    format!("{case}: a closed breaker refused a call ({:?})", d.reason())
                }),
            }
        }
        let open = p.enter().map(drop).map_err(|d| d.reason());
        v.check(open == Err(Reason::BreakerOpen), || {
            format!(
                "{case}: after {FAILURES} failures the breaker must be open, the call got {open:?}"
            )
        });
        clock.advance(OPEN_WAIT + Duration::from_millis(1));
        let before = p.stats();
        let racers: Vec<_> = (0..threads)
            .map(|_| {
                let (seen, start, tried, swaps) = (&seen, &start, &tried, &swaps);
                s.spawn(move || {
                    start.wait();
                    let entered = p.enter();
                    let inside = match &entered {
                        Ok(_) => Some(seen.inside()),
                        Err(d) => {
                            seen.refused(d.reason());
                            None
                        }
                    };
                    seen.calls.fetch_add(1, Ordering::SeqCst);
                    // Every permit is held until every thread has tried (and, when
                    // swapped, until the policy has changed under it).
                    let at = swaps.load(Ordering::SeqCst);
                    tried.wait();
                    while swapped && swaps.load(Ordering::SeqCst) < at + 2 {
                        std::thread::yield_now();
                    }
                    drop(inside);
                    if let Ok(permit) = entered {
                        permit.finish(false);
                    }
                })
            })
            .collect();
        for r in racers {
            r.join().unwrap();
        }
        let after = p.stats();
        done.store(true, Ordering::Relaxed);
        (before, after)
    });
    let (b, a) = (&before.totals, &after.totals);
    let want = PROBES.min(threads as u64);
    v.check(seen.admitted() == want, || {
        format!(
            "{case}: {} of {threads} racing calls admitted half-open, exactly {want} must be",
            seen.admitted()
        )
    });
    v.check(a.visits - b.visits == seen.calls(), || {
        format!(
            "{case}: {} calls made, {} visits counted",
            seen.calls(),
            a.visits - b.visits
        )
    });
    v.check(a.visits == a.passes + a.downgrades, || {
        format!(
            "{case}: visits {} != passes {} + downgrades {}",
            a.visits, a.passes, a.downgrades
        )
    });
    v.check(a.passes - b.passes == seen.admitted(), || {
        format!(
            "{case}: the callers saw {} admitted, the point counted {} passes",
            seen.admitted(),
            a.passes - b.passes
        )
    });
    let refused = seen.refused_for(Reason::BreakerOpen);
    v.check(a.downgrades - b.downgrades == refused, || {
        format!(
            "{case}: the callers saw {refused} refusals (BreakerOpen), the point counted {} downgrades",
            a.downgrades - b.downgrades
        )
    });
    v.check(after.concurrency == 0, || {
        format!("{case}: {} permits never came back", after.concurrency)
    });
}

#[test]
fn a_half_open_classic_breaker_admits_exactly_its_probes() {
    let v = Verdicts::default();
    for threads in THREADS {
        for mode in [ClassicMode::Alone, ClassicMode::Observe] {
            classic_case(&v, threads, mode, 0);
        }
    }
    v.conclude();
}

#[test]
fn a_half_open_classic_breaker_admits_exactly_its_probes_while_the_policy_is_swapped() {
    let v = Verdicts::default();
    for threads in THREADS {
        for round in 0..SWAPPED_ROUNDS {
            classic_case(&v, threads, ClassicMode::Swapped, round);
        }
    }
    v.conclude();
}

// ---- SRE breaker --------------------------------------------------------------------------

const SECOND: u64 = 1_000_000_000;
/// The forced-probe interval of the SRE cases.
const INTERVAL: Duration = Duration::from_secs(1);
/// Calls each thread makes at one instant.
const SRE_CALLS: u64 = 200;
/// Calls each thread makes along the timeline of the sweep.
const SWEEP_CALLS: u64 = 500;
/// How much time the sweep covers.
const SWEEP: Duration = Duration::from_secs(5);
/// The SRE window: 40 buckets of 500 ms (20 s, the whole case).
const SRE_BUCKETS: u64 = 40;
const SRE_BUCKET: Duration = Duration::from_millis(500);

/// What the threads of one SRE round saw.
#[derive(Default)]
struct SreSeen {
    accepted: AtomicU64,
    forced: Mutex<Vec<u64>>,
    rejected: AtomicU64,
    /// The times of decisions with a drop ratio of 0 (the breaker was not dropping).
    not_dropping: Mutex<Vec<u64>>,
}

impl SreSeen {
    fn note(&self, b: &SreBreaker, now: u64, d: SreDecision) {
        if d.drop_ratio <= 0.0 {
            self.not_dropping.lock().unwrap().push(now);
        }
        match d.verdict {
            SreVerdict::Accepted => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
            }
            SreVerdict::Refused => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
            }
            SreVerdict::ForcedProbe => {
                self.forced.lock().unwrap().push(now);
                // The probe fails: the dependency is still down.
                b.on_failure(instant(now));
            }
        }
    }

    fn forced(&self) -> Vec<u64> {
        let mut f = self.forced.lock().unwrap().clone();
        f.sort_unstable();
        f
    }
}

/// `threads` threads, started together, each calling `allow_with_roll(at(thread, i),
/// 0.0)` for `i in 0..calls` (a roll of 0 rejects whenever the ratio is positive,
/// unless the call is forced through).
fn sre_round(
    b: &SreBreaker,
    threads: usize,
    calls: u64,
    at: &(dyn Fn(usize, u64) -> u64 + Sync),
) -> SreSeen {
    let seen = SreSeen::default();
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (seen, start) = (&seen, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..calls {
                    let now = at(t, i);
                    seen.note(b, now, b.allow_with_roll(instant(now), 0.0));
                }
            });
        }
    });
    seen
}

/// The books of one round of `calls` calls: every call was decided while dropping,
/// none was accepted by the dice (a roll of 0), every call was rejected or forced, and
/// the rejections are the drops the window gained (`drops`: before, after).
fn check_sre_books(v: &Verdicts, case: &str, seen: &SreSeen, calls: u64, drops: (u64, u64)) {
    let (accepted, rejected) = (
        seen.accepted.load(Ordering::Relaxed),
        seen.rejected.load(Ordering::Relaxed),
    );
    let forced = seen.forced().len() as u64;
    v.check(accepted == 0, || {
        format!("{case}: {accepted} calls accepted with a roll of 0 while dropping")
    });
    v.check(accepted + rejected + forced == calls, || {
        format!(
            "{case}: {calls} calls, {accepted} accepted + {rejected} rejected + {forced} forced"
        )
    });
    let mut not_dropping = seen.not_dropping.lock().unwrap().clone();
    not_dropping.sort_unstable();
    v.check(not_dropping.is_empty(), || {
        format!(
            "{case}: {} decisions saw a drop ratio of 0 (at {not_dropping:?} ns; buckets are \
             {SRE_BUCKET:?} wide), but the window holds the 1000 failures and every drop since: \
             the breaker must be dropping throughout",
            not_dropping.len()
        )
    });
    v.check(drops.1 - drops.0 == rejected, || {
        format!(
            "{case}: {rejected} rejections seen, the window gained {} drops",
            drops.1 - drops.0
        )
    });
}

#[test]
fn a_dropping_sre_breaker_forces_at_most_one_probe_per_interval() {
    let interval = nanos(INTERVAL);
    let config = SreConfig::builder()
        // Long enough that the failures stay in the window for the whole case, in
        // buckets short enough that the sweep crosses ten bucket boundaries.
        .window(SRE_BUCKET * SRE_BUCKETS as u32)
        .buckets(SRE_BUCKETS)
        .force_pass_interval(INTERVAL)
        .build()
        .unwrap();
    let v = Verdicts::default();
    for threads in THREADS {
        let case = |what: &str| {
            format!("SRE breaker, force_pass_interval {INTERVAL:?} [{threads} threads]: {what}")
        };
        let b = SreBreaker::new(config, instant(0)).unwrap();
        for _ in 0..1_000 {
            b.on_failure(instant(0));
        }
        // go-zero forces no probe before the first call admitted while dropping.
        let pass_at = SECOND / 1000;
        let no_pass = b.allow_with_roll(instant(pass_at), 0.0).verdict;
        v.check(no_pass == SreVerdict::Refused, || {
            case(&format!(
                "with no pass yet a roll of 0 must be rejected, got {no_pass:?}"
            ))
        });
        let pass = b.allow_with_roll(instant(pass_at), 0.999_999).verdict;
        v.check(pass == SreVerdict::Accepted, || {
            case(&format!(
                "a roll of 0.999999 must be accepted, got {pass:?}"
            ))
        });
        v.check(b.last_pass() == Some(instant(pass_at)), || {
            case(&format!(
                "last_pass {:?} after the pass at {pass_at}",
                b.last_pass()
            ))
        });
        let now = pass_at + interval + 1;
        let rounds = [
            (now, "every thread at the pass + interval + 1 ns", 1),
            (now + interval / 2, "half an interval after that", 0),
            (now + interval + 1, "one interval + 1 ns after that", 1),
        ];
        for (at, what, forced) in rounds {
            let calls = threads as u64 * SRE_CALLS;
            let drops = b.history(instant(at)).drops;
            let seen = sre_round(&b, threads, SRE_CALLS, &|_, _| at);
            let drops = (drops, b.history(instant(at)).drops);
            let case = case(&format!("{SRE_CALLS} calls per thread at {at} ns, {what}"));
            check_sre_books(&v, &case, &seen, calls, drops);
            let probes = seen.forced();
            // The bound: at most one. With every thread asking after a full interval
            // the first compare-and-swap on the last pass wins: exactly `forced`.
            v.check(probes.len() <= 1, || {
                format!(
                    "{case}: {} forced probes, at most one per {INTERVAL:?} may be",
                    probes.len()
                )
            });
            v.check(probes.len() == forced, || {
                format!(
                    "{case}: {} forced probes, exactly {forced} expected",
                    probes.len()
                )
            });
        }
        // The sweep: every thread walks the next `SWEEP` on its own (thread `t` a
        // microsecond after thread `t - 1`, and the threads drift apart as they are
        // scheduled); any two forced probes are more than an interval apart.
        let from = now + interval + 1;
        let step = nanos(SWEEP) / SWEEP_CALLS;
        let end = from + nanos(SWEEP) + threads as u64 * 1_000;
        let drops = b.history(instant(from)).drops;
        let seen = sre_round(&b, threads, SWEEP_CALLS, &|t, i| {
            from + i * step + t as u64 * 1_000
        });
        let drops = (drops, b.history(instant(end)).drops);
        let probes = seen.forced();
        let gaps: Vec<u64> = probes.windows(2).map(|w| w[1] - w[0]).collect();
        let case = case(&format!(
            "{SWEEP_CALLS} calls per thread along {SWEEP:?} from {from} ns"
        ));
        check_sre_books(&v, &case, &seen, threads as u64 * SWEEP_CALLS, drops);
        v.check(gaps.iter().all(|g| *g > interval), || {
            format!("{case}: forced probes at {probes:?}, some closer than {INTERVAL:?}")
        });
        let most = nanos(SWEEP + Duration::from_micros(threads as u64)) / interval + 1;
        v.check((1..=most).contains(&(probes.len() as u64)), || {
            format!(
                "{case}: {} forced probes (at {probes:?}), at least 1 and at most {most} may be",
                probes.len()
            )
        });
    }
    v.conclude();
}
