//! Retiring points (`Registry::retire`, `retire_unused`): what keeps a point, what
//! frees it, and that a retirement racing calls, handles and policy changes never
//! loses a policy or frees a point in use.

use resilience_runtime::config::{Format, PolicyFile};
use resilience_runtime::sources::Source;
use resilience_runtime::{
    downgrade, Clock, Downgraded, ManualClock, Policy, Reason, Registry, RetireError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

fn registry() -> Registry {
    Registry::with_clock(Clock::system())
}

#[downgrade(point = "retire.declared")]
fn declared() -> Result<u32, Downgraded> {
    Ok(1)
}

#[test]
fn a_held_point_is_kept_and_a_released_one_freed() {
    let r = registry();
    let handle = r.point_handle("retire.held").unwrap();
    handle.enter().unwrap().finish(false);
    assert_eq!(r.undeclared_points(), 1);
    assert_eq!(
        r.retire("retire.held"),
        Err(RetireError::InUse("retire.held".into()))
    );
    let weak = Arc::downgrade(&handle);
    drop(handle);
    r.retire("retire.held").unwrap();
    assert!(weak.upgrade().is_none(), "retired and freed");
    assert!(r.stats("retire.held").is_none());
    assert_eq!(r.undeclared_points(), 0);
    assert_eq!(
        r.retire("retire.held"),
        Err(RetireError::Unknown("retire.held".into()))
    );
    // The name is free again: a new point, with empty counters.
    let again = r.point_handle("retire.held").unwrap();
    assert_eq!(again.stats().totals.passes, 0);
}

#[test]
fn a_call_in_flight_keeps_its_point() {
    let r = registry();
    let handle = r.point_handle("retire.inflight").unwrap();
    let permit = handle.enter().unwrap();
    // The permit borrows the handle: the point is held until the call ends.
    assert!(matches!(
        r.retire("retire.inflight"),
        Err(RetireError::InUse(_))
    ));
    permit.finish(false);
    assert_eq!(handle.stats().totals.passes, 1);
}

#[test]
fn borrowed_and_declared_points_are_kept() {
    let r = registry();
    r.point("retire.borrowed").unwrap();
    let e = r.retire("retire.borrowed").unwrap_err();
    assert_eq!(e, RetireError::Pinned("retire.borrowed".into()));
    assert!(e.to_string().contains("point_handle"), "{e}");
    // `get` pins as `point` does.
    r.point_handle("retire.got").unwrap();
    assert!(r.get("retire.got").is_some());
    assert!(matches!(
        r.retire("retire.got"),
        Err(RetireError::Pinned(_))
    ));

    assert_eq!(declared().unwrap(), 1);
    r.point_handle("retire.declared").unwrap();
    assert_eq!(
        r.retire("retire.declared"),
        Err(RetireError::Declared("retire.declared".into()))
    );
    assert!(matches!(
        r.retire("bad\nname"),
        Err(RetireError::Name(e)) if e.to_string().contains("control")
    ));
}

#[test]
fn settings_are_never_dropped_by_a_retirement() {
    let r = registry();
    let kill = Policy::builder().max_visits(0).build().unwrap();
    r.set_policy("retire.configured", kill).unwrap();
    let e = r.retire("retire.configured").unwrap_err();
    assert_eq!(
        e,
        RetireError::Configured {
            point: "retire.configured".into(),
            sources: vec![Source::Code],
        }
    );
    assert!(e.to_string().contains("code"), "{e}");
    assert_eq!(r.retire_unused(), 0);
    assert_eq!(
        r.point_handle("retire.configured")
            .unwrap()
            .enter()
            .unwrap_err()
            .reason(),
        Reason::Visits
    );
    r.clear_layer("retire.configured", Source::Code).unwrap();
    r.retire("retire.configured").unwrap();
}

#[test]
fn a_policy_file_that_stops_naming_a_point_retires_it() {
    let r = registry();
    let mut text = String::new();
    for i in 0..1_000 {
        text.push_str(&format!("[points.\"retire.file.{i}\"]\nmax_visits = 10\n"));
    }
    r.load_policies_str(&text, Format::Toml).unwrap();
    assert_eq!(r.undeclared_points(), 1_000);
    let held = r.point_handle("retire.file.7").unwrap();
    let e = r.retire("retire.file.3").unwrap_err();
    assert!(
        matches!(&e, RetireError::Configured { sources, .. } if matches!(sources[..], [Source::File(_)])),
        "{e}"
    );
    // The file shrinks to one point: the others lose its layer, and those nothing
    // else holds are retired with it.
    r.load_policies_str(
        "[points.\"retire.file.0\"]\nmax_visits = 10\n",
        Format::Toml,
    )
    .unwrap();
    assert_eq!(r.point_names(), ["retire.file.0", "retire.file.7"]);
    assert_eq!(r.undeclared_points(), 2);
    // The held one has lost the file's layer; released, it goes too.
    assert_eq!(held.policy(), None);
    drop(held);
    assert_eq!(r.retire_unused(), 1);
    assert_eq!(r.point_names(), ["retire.file.0"]);
}

#[test]
fn a_console_source_that_stops_naming_a_point_retires_it() {
    let r = registry();
    let both = "[points.\"retire.console.a\"]\nmax_visits = 0\n[points.\"retire.console.b\"]\nmax_visits = 0\n";
    r.apply_source(
        Source::Console,
        &PolicyFile::parse(both, Format::Toml).unwrap(),
    )
    .unwrap();
    // Code's own setting of `b` keeps it: a retirement never drops a setting.
    r.set_policy("retire.console.b", Policy::observe()).unwrap();
    let one = "[points.\"retire.console.c\"]\nmax_visits = 0\n";
    r.apply_source(
        Source::Console,
        &PolicyFile::parse(one, Format::Toml).unwrap(),
    )
    .unwrap();
    assert_eq!(r.point_names(), ["retire.console.b", "retire.console.c"]);
    assert_eq!(
        r.layers("retire.console.b").unwrap().len(),
        1,
        "code's layer kept"
    );
    assert_eq!(
        r.policy("retire.console.b").unwrap(),
        Some(Policy::observe())
    );
}

/// On a manual clock no background chore runs between the calls and the retirement,
/// so every point is free at once: the count is exact.
#[test]
fn retire_unused_frees_the_points_built_from_data() {
    let clock = ManualClock::new();
    let r = Registry::with_clock(Clock::manual(&clock));
    r.set_max_undeclared_points(1_000);
    for round in 0..5 {
        for user in 0..1_000 {
            let p = r
                .point_handle(&format!("retire.user.{round}.{user}"))
                .unwrap();
            p.enter().unwrap().finish(false);
        }
        // At the cap: the next new name is refused until points are retired.
        assert!(r.point_handle(&format!("retire.user.{round}.x")).is_err());
        assert_eq!(r.retire_unused(), 1_000);
        assert_eq!(r.undeclared_points(), 0);
    }
}

/// On the system clock, the registry's once-a-second sampler may hold a point for
/// the instant it samples it: such a point is kept by that call and retired by the
/// next one, and no point is ever retired twice or lost.
#[test]
fn retire_unused_on_the_system_clock_frees_every_point_within_a_few_calls() {
    let r = registry();
    r.set_max_undeclared_points(1_000);
    for round in 0..5 {
        for user in 0..1_000 {
            let p = r
                .point_handle(&format!("retire.system.{round}.{user}"))
                .unwrap();
            p.enter().unwrap().finish(false);
        }
        let mut retired = 0;
        for _ in 0..100 {
            retired += r.retire_unused();
            if retired >= 1_000 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(retired, 1_000, "round {round}");
        assert_eq!(r.undeclared_points(), 0);
        assert_eq!(r.retire_unused(), 0);
    }
}

/// A retirement racing calls, handles and a kill switch, at 1 to 64 threads: a
/// configured point is never retired (the kill switch holds for every call), a point
/// in use is never freed under its caller (its own counters see every call), and the
/// undeclared count always equals the points held.
#[test]
fn retirement_races_calls_and_policy_changes() {
    for threads in [1usize, 2, 4, 8, 16, 64] {
        let r = registry();
        let kill = Policy::builder().max_visits(0).build().unwrap();
        r.set_policy("race.kill", kill).unwrap();
        let start = Barrier::new(threads);
        let refused = AtomicU64::new(0);
        let retired = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (r, start, refused, retired) = (&r, &start, &refused, &retired);
                s.spawn(move || {
                    start.wait();
                    for i in 0..300 {
                        match (t + i) % 4 {
                            0 => match r.retire("race.kill") {
                                // Kept: configured, and held now and then.
                                Err(RetireError::Configured { .. } | RetireError::InUse(_)) => {}
                                other => panic!("a configured point: {other:?}"),
                            },
                            1 => {
                                let p = r.point_handle("race.kill").unwrap();
                                assert_eq!(p.enter().unwrap_err().reason(), Reason::Visits);
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            2 => {
                                let p = r.point_handle("race.free").unwrap();
                                let before = p.stats().totals.passes;
                                p.enter().unwrap().finish(false);
                                p.enter().unwrap().finish(false);
                                assert!(p.stats().totals.passes >= before + 2);
                            }
                            _ => match r.retire("race.free") {
                                Ok(()) => {
                                    retired.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(RetireError::InUse(_) | RetireError::Unknown(_)) => {}
                                Err(e) => panic!("{e}"),
                            },
                        }
                        if i % 50 == 0 {
                            // Policy changes racing the retirements.
                            let kill = Policy::builder().max_visits(0).build().unwrap();
                            r.set_policy("race.kill", kill).unwrap();
                        }
                    }
                });
            }
        });
        assert_eq!(refused.load(Ordering::Relaxed) as usize, 300 * threads / 4);
        let names = r.point_names();
        assert_eq!(r.undeclared_points(), names.len() as u64, "{names:?}");
        assert!(names.contains(&"race.kill"));
        eprintln!(
            "{threads} threads: race.free retired {} times",
            retired.load(Ordering::Relaxed)
        );
    }
}
