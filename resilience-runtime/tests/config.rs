//! Policy files: TOML and JSON round trips, every kind of problem reported with its
//! point and field, all-or-nothing application, strict mode, and hot reload of a real
//! file in a temporary directory.
//!
//! Each test uses a registry of its own (leaked, as the global one is), so that one
//! test's load cannot clear another's points.

use resilience_runtime::adaptive::{AdaptiveConfig, GradientConfig};
use resilience_runtime::breaker::{ClassicConfig, SreConfig};
use resilience_runtime::config::{
    ConfigError, Format, PointConfig, PolicyFile, ProblemKind, WatchOptions, WatchOptionsBuilder,
};
use resilience_runtime::retry::Backoff;
use resilience_runtime::sources::{Section, Source};
use resilience_runtime::{
    downgrade, AdaptiveLimit, BreakerPolicy, Clock, Policy, Reason, Registry,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn new_registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

/// Every point's policy, for "nothing changed" checks.
fn snapshot(r: &Registry) -> BTreeMap<&'static str, Option<Policy>> {
    r.point_names()
        .into_iter()
        .map(|n| (n, r.policy(n).unwrap()))
        .collect()
}

/// (kind, point, field) of every problem of an error.
fn problems(e: &ConfigError) -> Vec<(ProblemKind, Option<&str>, Option<&str>)> {
    e.problems()
        .iter()
        .map(|p| (p.kind, p.point.as_deref(), p.field.as_deref()))
        .collect()
}

/// A policy with every rule set (and non-default window and percentage).
fn everything(shadow: bool) -> Policy {
    Policy::builder()
        .max_visits(1000)
        .max_concurrency(64)
        .max_exceptions(30)
        .exception_rate(0.25, 20)
        .timeouts(Duration::from_millis(250), 7)
        .call_timeout(Duration::from_millis(750))
        .token_bucket(12.5, 40)
        .downgrade_percentage(80)
        .delay(Duration::from_secs(10), Some(Duration::from_millis(1500)))
        .window(20, Duration::from_millis(500))
        .shadow(shadow)
        .build()
        .unwrap()
}

fn sample_file() -> PolicyFile {
    let mut file = PolicyFile::default();
    file.points.insert(
        "rt.everything".into(),
        PointConfig::builder().policy(everything(false)).build(),
    );
    file.points.insert(
        "rt.shadow".into(),
        PointConfig::builder().policy(everything(true)).build(),
    );
    file.points.insert(
        "rt.kill switch".into(),
        PointConfig::builder()
            .policy(Policy::builder().max_visits(0).build().unwrap())
            .build(),
    );
    file.points.insert(
        "rt.observe".into(),
        PointConfig::builder().policy(Policy::observe()).build(),
    );
    file
}

#[test]
fn toml_round_trip_applies_every_setting() {
    let r = new_registry();
    let file = sample_file();
    let text = file.to_text(Format::Toml).unwrap();
    assert!(text.contains(r#"threshold = "250ms""#), "{text}");
    assert!(text.contains(r#"call_timeout = "750ms""#), "{text}");
    assert!(text.contains(r#"retry_interval = "1500ms""#), "{text}");
    assert!(text.contains("[points.\"rt.kill switch\"]"), "{text}");
    assert_eq!(PolicyFile::parse(&text, Format::Toml).unwrap(), file);

    let report = r.load_policies_str(&text, Format::Toml).unwrap();
    assert_eq!(report.version, 1);
    assert_eq!(
        report.applied,
        ["rt.everything", "rt.kill switch", "rt.observe", "rt.shadow"]
    );
    assert!(report.cleared.is_empty());
    for (name, config) in &file.points {
        assert_eq!(
            r.policy(name).unwrap().as_ref(),
            Some(&config.policy),
            "{name}"
        );
    }
    assert!(r.policy("rt.shadow").unwrap().unwrap().is_shadow());
    assert_eq!(PolicyFile::from_registry(r), file);
}

#[test]
fn json_round_trip_matches_toml() {
    let file = sample_file();
    let json = file.to_text(Format::Json).unwrap();
    assert!(json.contains(r#""bucket_width": "500ms""#), "{json}");
    assert_eq!(PolicyFile::parse(&json, Format::Json).unwrap(), file);
    // TOML -> model -> JSON -> model is the same model.
    let via_toml = PolicyFile::parse(&file.to_text(Format::Toml).unwrap(), Format::Toml).unwrap();
    assert_eq!(via_toml.to_text(Format::Json).unwrap(), json);

    let r = new_registry();
    r.load_policies_str(&json, Format::Json).unwrap();
    assert_eq!(PolicyFile::from_registry(r), file);
}

#[test]
fn the_example_policy_file_is_valid() {
    let file =
        PolicyFile::parse(include_str!("../../examples/policies.toml"), Format::Toml).unwrap();
    assert!(file.strict);
    let order = &file.points["order.create"].policy;
    assert_eq!(order.max_visits(), Some(1000));
    assert_eq!(order.call_timeout(), Some(Duration::from_secs(2)));
    assert_eq!(
        order.timeouts().unwrap().threshold,
        Duration::from_millis(250)
    );
    assert_eq!(
        order.delay().unwrap().retry_interval,
        Some(Duration::from_secs(1))
    );
    assert_eq!(order.window().buckets, 10);
    let Some(AdaptiveLimit::Gradient(gradient)) = order.adaptive() else {
        panic!("order.create has a gradient limit: {:?}", order.adaptive());
    };
    assert_eq!(gradient.max_limit, 200);
    let Some(BreakerPolicy::Classic(classic)) = file.points["order.create"].breaker else {
        panic!("order.create has a classic breaker");
    };
    assert_eq!(classic.consecutive_failures, Some(5));
    assert_eq!(classic.open_wait.max, Duration::from_secs(30));
    assert!(matches!(
        file.points["search.query"].breaker,
        Some(BreakerPolicy::Sre { config, .. }) if config.k == 2.0
    ));
    assert!(file.points["recommendations"].policy.is_shadow());
    let keys = order.keys().unwrap();
    assert_eq!(keys.rule().limit, Some(100));
    assert_eq!(keys.rule_of("vip-42").limit, Some(1000));
    assert_eq!(keys.rule_of("slow").max_concurrency, Some(1));
    assert_eq!(
        file.points.keys().collect::<Vec<_>>(),
        ["order.create", "recommendations", "search.query"]
    );
}

// Found by config_fuzz: serde_json's default float parsing can be one ulp off, so a
// rate written to JSON came back different.
#[test]
fn json_floats_round_trip_exactly() {
    for rate in [
        203_244.617_822_524_65_f64,
        0.984_866_607_490_393_9,
        0.1,
        1e-300,
    ] {
        let policy = Policy::builder()
            .token_bucket(rate.min(1e9), 1)
            .build()
            .unwrap();
        let mut file = PolicyFile::default();
        file.points
            .insert("f".into(), PointConfig::builder().policy(policy).build());
        let json = file.to_text(Format::Json).unwrap();
        assert_eq!(
            PolicyFile::parse(&json, Format::Json).unwrap(),
            file,
            "{json}"
        );
    }
}

#[test]
fn serde_deserialize_reports_every_problem() {
    let file: PolicyFile = serde_json::from_str(r#"{"points": {"a": {"max_visits": 3}}}"#).unwrap();
    assert_eq!(file.points["a"].policy.max_visits(), Some(3));
    let err = serde_json::from_str::<PolicyFile>(
        r#"{"points": {"a": {"max_visits": -1, "window": {"buckets": 0}}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("point `a`, field `max_visits`"), "{err}");
    assert!(err.contains("point `a`, field `window.buckets`"), "{err}");
    let config: PointConfig = toml::from_str("max_concurrency = 2").unwrap();
    assert_eq!(config.policy.max_concurrency(), Some(2));
}

#[test]
fn durations_accept_compound_and_fractional_text() {
    let file = PolicyFile::parse(
        r#"
        [points.d]
        delay = { duration = "1m 30s", retry_interval = "2.5s" }
        timeouts = { threshold = "1500us", max_count = 1 }
        "#,
        Format::Toml,
    )
    .unwrap();
    let p = &file.points["d"].policy;
    assert_eq!(p.delay().unwrap().duration, Duration::from_secs(90));
    assert_eq!(
        p.delay().unwrap().retry_interval,
        Some(Duration::from_millis(2500))
    );
    assert_eq!(p.timeouts().unwrap().threshold, Duration::from_micros(1500));
}

#[test]
fn call_timeout_parses_writes_back_and_names_its_field() {
    let text = r#"
        [points."ct.only"]
        call_timeout = "1m 30s"

        [points."ct.with_rules"]
        max_visits = 10
        call_timeout = "0.2s"
    "#;
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let only = &file.points["ct.only"];
    assert_eq!(only.policy.call_timeout(), Some(Duration::from_secs(90)));
    assert_eq!(only.policy.max_visits(), None);
    // A rule of the rules section: it sets that section, and only that one.
    assert!(only.sections.contains(Section::Rules));
    assert!(!only.sections.contains(Section::Window));
    let with_rules = &file.points["ct.with_rules"].policy;
    assert_eq!(with_rules.call_timeout(), Some(Duration::from_millis(200)));
    assert_eq!(with_rules.max_visits(), Some(10));

    // Written back in the largest exact unit, and read back the same.
    let toml = file.to_text(Format::Toml).unwrap();
    assert!(toml.contains(r#"call_timeout = "90s""#), "{toml}");
    assert!(toml.contains(r#"call_timeout = "200ms""#), "{toml}");
    assert_eq!(PolicyFile::parse(&toml, Format::Toml).unwrap(), file);
    let json = file.to_text(Format::Json).unwrap();
    assert!(json.contains(r#""call_timeout": "90s""#), "{json}");
    assert_eq!(PolicyFile::parse(&json, Format::Json).unwrap(), file);
    // Unset, it is not written at all (so digests of settings without it are unchanged).
    let plain = PointConfig::builder()
        .policy(Policy::builder().max_visits(1).build().unwrap())
        .build();
    assert!(!serde_json::to_string(&plain)
        .unwrap()
        .contains("call_timeout"));

    // Applied, the points' calls read it.
    let r = new_registry();
    r.load_policies_str(text, Format::Toml).unwrap();
    assert_eq!(
        r.point("ct.only").unwrap().call_timeout(),
        Some(Duration::from_secs(90))
    );
    assert_eq!(PolicyFile::from_registry(r), file);

    // Every bad value is named by its field, and nothing is applied.
    let before = snapshot(r);
    let bad = r#"
        [points."ct.number"]
        call_timeout = 200
        [points."ct.unitless"]
        call_timeout = "200"
        [points."ct.zero"]
        call_timeout = "0ms"
        [points."ct.long"]
        call_timeout = "25h"
        [points."ct.typo"]
        call_timout = "1s"
    "#;
    let err = r.load_policies_str(bad, Format::Toml).unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (WrongType, Some("ct.number"), Some("call_timeout")),
            (WrongType, Some("ct.unitless"), Some("call_timeout")),
            (OutOfRange, Some("ct.zero"), Some("call_timeout")),
            (OutOfRange, Some("ct.long"), Some("call_timeout")),
            (UnknownField, Some("ct.typo"), Some("call_timout")),
        ],
        "{err}"
    );
    let text = err.to_string();
    for expected in [
        "point `ct.number`, field `call_timeout`: expected a duration string such as \"250ms\" or \"10s\"",
        "point `ct.unitless`, field `call_timeout`: missing unit after `200`",
        "point `ct.zero`, field `call_timeout`: must be greater than zero",
        "point `ct.long`, field `call_timeout`: must be at most 86400s (one day), got 90000s",
        "did you mean `call_timeout`?",
    ] {
        assert!(text.contains(expected), "{expected}\n{text}");
    }
    assert_eq!(snapshot(r), before);
}

#[test]
fn every_problem_is_listed_with_point_and_field_and_nothing_is_applied() {
    let r = new_registry();
    r.set_policy("bad.good", Policy::builder().max_visits(5).build().unwrap())
        .unwrap();
    r.set_policy("bad.api", Policy::builder().max_visits(6).build().unwrap())
        .unwrap();
    let before = snapshot(r);
    let text = r#"
        colour = "blue"

        [points."bad.good"]
        max_visits = 50                       # valid, but the file is rejected

        [points."bad.types"]
        max_visits = "many"
        max_concurrency = 1.5
        shadow = "yes"
        timeouts = { threshold = 250, max_count = 3 }
        delay = { duration = "10", retry_interval = "1s" }

        [points."bad.ranges"]
        max_visits = -1
        max_concurrency = 5000000000
        downgrade_percentage = 150
        exception_rate = { rate = 1.5, min_visits = 5 }
        token_bucket = { rate = 10.0, capacity = 0 }
        window = { buckets = 4000, bucket_width = "1s" }
        delay = { duration = "1s", retry_interval = "2s" }

        [points."bad.fields"]
        max_visit = 3
        breaker = { kind = "sre" }
        timeouts = { threshold = "1s" }
        window = { buckets = 10, width = "1s" }

        [points."  "]
        max_visits = 1
    "#;
    let err = r.load_policies_str(text, Format::Toml).unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (UnknownField, None, Some("colour")),
            (WrongType, Some("bad.types"), Some("max_visits")),
            (WrongType, Some("bad.types"), Some("max_concurrency")),
            (WrongType, Some("bad.types"), Some("shadow")),
            (WrongType, Some("bad.types"), Some("timeouts.threshold")),
            (WrongType, Some("bad.types"), Some("delay.duration")),
            (OutOfRange, Some("bad.ranges"), Some("max_visits")),
            (OutOfRange, Some("bad.ranges"), Some("max_concurrency")),
            (OutOfRange, Some("bad.ranges"), Some("exception_rate.rate")),
            (
                OutOfRange,
                Some("bad.ranges"),
                Some("token_bucket.capacity")
            ),
            (OutOfRange, Some("bad.ranges"), Some("downgrade_percentage")),
            (OutOfRange, Some("bad.ranges"), Some("delay.retry_interval")),
            (OutOfRange, Some("bad.ranges"), Some("window.buckets")),
            (UnknownField, Some("bad.fields"), Some("max_visit")),
            (UnknownField, Some("bad.fields"), Some("breaker.kind")),
            (MissingField, Some("bad.fields"), Some("breaker.algorithm")),
            (MissingField, Some("bad.fields"), Some("timeouts.max_count")),
            (UnknownField, Some("bad.fields"), Some("window.width")),
            (InvalidPointName, Some("  "), None),
        ],
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("nothing applied (19 problems)"), "{text}");
    assert!(
        text.contains("point `bad.fields`, field `max_visit`: unknown field `max_visit`, did you mean `max_visits`?"),
        "{text}"
    );
    assert!(
        text.contains("point `bad.types`, field `delay.duration`: missing unit after `10`"),
        "{text}"
    );
    assert!(
        text.contains(
            "point `bad.ranges`, field `downgrade_percentage`: must be within 0..=100, got 150"
        ),
        "{text}"
    );
    assert_eq!(snapshot(r), before);
    assert_eq!(r.policy_file_version(), 0);
}

#[test]
fn point_names_follow_the_one_rule_in_policy_files() {
    let r = new_registry();
    let before = snapshot(r);
    let long = "n".repeat(257);
    let text = format!(
        r#"
        [points."names.ok"]
        max_visits = 1
        [points."{long}"]
        max_visits = 1
        [points." lead"]
        max_visits = 1
        [points."trail "]
        max_visits = 1
        [points."tab\tname"]
        max_visits = 1
        [points."bell\u0007"]
        max_visits = 1
    "#
    );
    let err = r.load_policies_str(&text, Format::Toml).unwrap_err();
    let named: Vec<_> = problems(&err)
        .into_iter()
        .map(|(kind, point, _)| (kind, point.map(str::to_owned)))
        .collect();
    let invalid = |name: &str| (ProblemKind::InvalidPointName, Some(name.to_owned()));
    assert_eq!(
        named,
        [
            invalid(&long),
            invalid(" lead"),
            invalid("trail "),
            invalid("tab\tname"),
            invalid("bell\u{7}"),
        ],
        "{err}"
    );
    let message = err.to_string();
    // Each reason is given, and no raw control character reaches the message.
    assert!(message.contains("256 bytes"), "{message}");
    assert!(message.contains("whitespace"), "{message}");
    assert!(message.contains("control character"), "{message}");
    assert!(
        !message.chars().any(|c| c.is_control() && c != '\n'),
        "{message:?}"
    );
    assert_eq!(snapshot(r), before, "nothing applied");
}

#[test]
fn json_wrong_shapes_are_reported() {
    let r = new_registry();
    let err = r
        .load_policies_str(
            r#"{"strict": "yes", "points": {"a": 3, "b": {"window": [1, 2]}}}"#,
            Format::Json,
        )
        .unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (WrongType, None, Some("strict")),
            (WrongType, Some("a"), None),
            (WrongType, Some("b"), Some("window")),
        ],
        "{err}"
    );
    let err = r.load_policies_str("[1, 2]", Format::Json).unwrap_err();
    assert_eq!(problems(&err), [(WrongType, None, None)], "{err}");
    assert!(r.point_names().is_empty());
}

#[test]
fn duplicate_points_are_named_in_json_and_toml() {
    let r = new_registry();
    let before = snapshot(r);
    let err = r
        .load_policies_str(
            r#"{"points": {
                "dup.a": {"max_visits": 1},
                "dup.b": {"max_visits": 1, "max_visits": 2},
                "dup.a": {"max_visits": 2}
            }}"#,
            Format::Json,
        )
        .unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (DuplicateField, Some("dup.b"), Some("max_visits")),
            (DuplicatePoint, Some("dup.a"), None),
        ],
        "{err}"
    );
    let err = r
        .load_policies_str(
            "[points.\"dup.a\"]\nmax_visits = 1\n\n[points.\"dup.a\"]\nmax_visits = 2\n",
            Format::Toml,
        )
        .unwrap_err();
    assert_eq!(problems(&err), [(DuplicatePoint, Some("dup.a"), None)]);
    assert!(
        err.to_string()
            .contains("point `dup.a` is configured more than once (again at line 4)"),
        "{err}"
    );
    assert_eq!(snapshot(r), before);
}

#[test]
fn a_byte_order_mark_is_ignored() {
    for (text, format) in [
        ("\u{feff}[points.bom]\nmax_visits = 1\n", Format::Toml),
        (
            "\u{feff}{\"points\": {\"bom\": {\"max_visits\": 1}}}",
            Format::Json,
        ),
    ] {
        let file = PolicyFile::parse(text, format).unwrap();
        assert_eq!(file.points["bom"].policy.max_visits(), Some(1));
    }
}

#[test]
fn syntax_errors_change_nothing() {
    let r = new_registry();
    r.load_policies_str("[points.s]\nmax_visits = 1\n", Format::Toml)
        .unwrap();
    let before = snapshot(r);
    for (text, format) in [
        ("[points.s\nmax_visits = 2", Format::Toml),
        ("{\"points\": {\"s\": {\"max_visits\": 2}", Format::Json),
        ("", Format::Json),
    ] {
        let err = r.load_policies_str(text, format).unwrap_err();
        assert_eq!(problems(&err), [(ProblemKind::Syntax, None, None)], "{err}");
    }
    assert_eq!(snapshot(r), before);
    assert_eq!(r.policy_file_version(), 1);
}

// Declared, never called: strict mode must accept it.
#[downgrade(point = "strict.declared", default)]
#[allow(dead_code)]
fn declared_only() -> u8 {
    0
}

#[test]
fn strict_mode_rejects_unknown_points_only() {
    let r = new_registry();
    r.point("strict.created").unwrap();
    let before = snapshot(r);
    let text = r#"
        strict = true
        [points."strict.declared"]
        max_visits = 1
        [points."strict.created"]
        max_visits = 1
        [points."strict.typo"]
        max_visits = 1
        [points."strict.typo2"]
        max_visits = "x"
    "#;
    let err = r.load_policies_str(text, Format::Toml).unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (WrongType, Some("strict.typo2"), Some("max_visits")),
            (UnknownPoint, Some("strict.typo"), None),
            (UnknownPoint, Some("strict.typo2"), None),
        ],
        "{err}"
    );
    assert_eq!(snapshot(r), before);
    assert!(
        r.get("strict.typo").is_none(),
        "a rejected file creates no point"
    );

    // Without the strict flag, the same unknown name is fine (and created).
    let lax = text
        .replace("strict = true", "")
        .replace("max_visits = \"x\"", "max_visits = 2");
    let report = r.load_policies_str(&lax, Format::Toml).unwrap();
    assert_eq!(report.applied.len(), 4);
    assert!(r.get("strict.typo").is_some());
    // Strict again: every point now exists, so it passes.
    let strict = format!("strict = true\n{lax}");
    r.load_policies_str(&strict, Format::Toml).unwrap();
}

#[test]
fn a_new_file_clears_points_the_old_one_configured() {
    let r = new_registry();
    r.set_policy("clr.api", Policy::builder().max_visits(9).build().unwrap())
        .unwrap();
    let first = r
        .load_policies_str(
            r#"{"points": {"clr.a": {"max_visits": 1}, "clr.b": {"max_visits": 2}}}"#,
            Format::Json,
        )
        .unwrap();
    assert_eq!(first.version, 1);
    let second = r
        .load_policies_str(
            r#"{"points": {"clr.b": {"max_visits": 3}, "clr.c": {"max_concurrency": 1}}}"#,
            Format::Json,
        )
        .unwrap();
    assert_eq!(second.version, 2);
    assert_eq!(second.applied, ["clr.b", "clr.c"]);
    assert_eq!(second.cleared, ["clr.a"]);
    assert_eq!(r.policy("clr.a").unwrap(), None);
    assert_eq!(r.policy("clr.b").unwrap().unwrap().max_visits(), Some(3));
    // Never mentioned by a file: left as the API set it.
    assert_eq!(r.policy("clr.api").unwrap().unwrap().max_visits(), Some(9));
    // A rejected file neither applies nor clears, and keeps the version.
    let err = r
        .load_policies_str(r#"{"points": {"clr.d": {"max_visits": -3}}}"#, Format::Json)
        .unwrap_err();
    assert_eq!(err.problems().len(), 1);
    assert_eq!(r.policy("clr.b").unwrap().unwrap().max_visits(), Some(3));
    assert_eq!(r.policy_file_version(), 2);
    // An empty file clears everything it configured.
    let third = r.load_policies_str("", Format::Toml).unwrap();
    assert_eq!(third.cleared, ["clr.b", "clr.c"]);
    assert_eq!(r.policy("clr.c").unwrap(), None);
    assert_eq!(r.policy("clr.api").unwrap().unwrap().max_visits(), Some(9));
}

#[test]
fn a_loaded_policy_is_enforced() {
    let r = new_registry();
    r.load_policies_str("[points.enf]\nmax_visits = 2\n", Format::Toml)
        .unwrap();
    let p = r.point("enf").unwrap();
    for _ in 0..2 {
        p.enter().unwrap().finish(false);
    }
    assert!(
        p.enter().is_err(),
        "the third visit in the window is downgraded"
    );
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "resilience-config-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn files_are_read_by_extension() {
    let dir = TempDir::new("ext");
    let r = new_registry();
    let json = dir.path("p.JSON");
    std::fs::write(&json, r#"{"points": {"f.j": {"max_visits": 4}}}"#).unwrap();
    let report = r.load_policies(&json).unwrap();
    assert_eq!(report.source.as_deref(), Some(json.as_path()));
    assert_eq!(r.policy("f.j").unwrap().unwrap().max_visits(), Some(4));

    let yaml = dir.path("p.yaml");
    std::fs::write(&yaml, "points: {}").unwrap();
    assert!(matches!(
        r.load_policies(&yaml),
        Err(ConfigError::UnknownFormat { .. })
    ));
    let err = r.load_policies(dir.path("missing.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.toml"), "{err}");

    // A rejected file names itself.
    let broken = dir.path("broken.toml");
    std::fs::write(&broken, "[points.x]\nmax_visits = true\n").unwrap();
    let err = r.load_policies(&broken).unwrap_err();
    assert!(err.to_string().contains("broken.toml rejected"), "{err}");
    assert_eq!(r.policy_file_version(), 1);
}

/// Polls `f` until it returns `Some`, for at most 5 s of real time.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out after {:?} waiting for {what}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Replaces a file the way many editors do: write a sibling, then rename over it.
fn replace_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `options` with an `on_reload` that sends each reload's version (or error text).
fn reports(options: WatchOptionsBuilder) -> (WatchOptions, mpsc::Receiver<Result<u64, String>>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let options = options.on_reload(move |result| {
        let summary = result.map(|r| r.version).map_err(|e| e.to_string());
        let _ = tx.lock().unwrap().send(summary);
    });
    (options.build(), rx)
}

#[test]
fn hot_reload_applies_good_edits_and_keeps_the_last_good_policies() {
    let dir = TempDir::new("watch");
    let path = dir.path("policies.toml");
    std::fs::write(&path, "[points.hot]\nmax_visits = 10\n").unwrap();
    let r = new_registry();
    let (options, rx) = reports(WatchOptions::builder().debounce(Duration::from_millis(50)));
    let watcher = r.watch_policies_with(&path, options).unwrap();
    assert_eq!(watcher.status().version, 1);
    assert_eq!(r.policy("hot").unwrap().unwrap().max_visits(), Some(10));

    // A good edit in place: applied, version 2.
    std::fs::write(&path, "[points.hot]\nmax_visits = 20\n").unwrap();
    let status = wait_for("version 2", || {
        Some(watcher.status()).filter(|s| s.version == 2)
    });
    assert!(status.last_error.is_none());
    assert_eq!(r.policy("hot").unwrap().unwrap().max_visits(), Some(20));
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(2));

    // A broken edit: rejected, the last good policies stay, the status says why.
    replace_atomically(
        &path,
        "[points.hot]\nmax_visits = 30\n[points.other]\nmax_concurrency = \"x\"\n",
    );
    let status = wait_for("the broken edit to be reported", || {
        Some(watcher.status()).filter(|s| s.last_error.is_some())
    });
    let error = status.last_error.unwrap();
    assert_eq!(
        error
            .problems()
            .iter()
            .map(|p| (p.point.as_deref(), p.field.as_deref()))
            .collect::<Vec<_>>(),
        [(Some("other"), Some("max_concurrency"))]
    );
    assert_eq!(status.version, 2);
    assert!(status.failures >= 1);
    assert_eq!(r.policy("hot").unwrap().unwrap().max_visits(), Some(20));
    assert!(r.get("other").is_none());
    let reported = rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap_err();
    assert!(
        reported.contains("point `other`, field `max_concurrency`"),
        "{reported}"
    );

    // Fixed by a rename, as editors save: applied, error cleared, version 3.
    replace_atomically(
        &path,
        "[points.hot]\nmax_visits = 30\n[points.other]\nmax_concurrency = 4\n",
    );
    let status = wait_for("version 3", || {
        Some(watcher.status()).filter(|s| s.version == 3)
    });
    assert!(status.last_error.is_none());
    assert_eq!(status.last_applied.applied, ["hot", "other"]);
    assert_eq!(r.policy("hot").unwrap().unwrap().max_visits(), Some(30));
    assert_eq!(
        r.policy("other").unwrap().unwrap().max_concurrency(),
        Some(4)
    );

    // Dropping the watcher stops it: later edits are not applied.
    drop(watcher);
    std::fs::write(&path, "[points.hot]\nmax_visits = 40\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(r.policy("hot").unwrap().unwrap().max_visits(), Some(30));
    assert_eq!(r.policy_file_version(), 3);
}

#[test]
fn a_burst_of_writes_is_applied_once() {
    let dir = TempDir::new("burst");
    let path = dir.path("policies.json");
    std::fs::write(&path, r#"{"points": {"burst": {"max_visits": 1}}}"#).unwrap();
    let r = new_registry();
    let watcher = r
        .watch_policies_with(
            &path,
            WatchOptions::builder()
                .debounce(Duration::from_millis(300))
                .build(),
        )
        .unwrap();
    // An editor's save in several steps, each a few ms apart; the half-written states
    // are invalid JSON and must never be read.
    let full = r#"{"points": {"burst": {"max_visits": 2}}}"#;
    for end in [0, 12, 25, full.len()] {
        std::fs::write(&path, &full[..end]).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = wait_for("version 2", || {
        Some(watcher.status()).filter(|s| s.version == 2)
    });
    assert_eq!(status.failures, 0, "{:?}", status.last_error);
    assert_eq!(status.reloads, 1);
    assert_eq!(r.policy("burst").unwrap().unwrap().max_visits(), Some(2));
}

/// A writer that pauses longer than the debounce half-way through (point `a` written,
/// a 400 ms pause, then point `b`): the half-written file is never applied, so `b` is
/// never cleared, because the two reads a settle period apart do not agree.
#[test]
fn a_slow_writer_is_not_applied_half_way() {
    let dir = TempDir::new("slow");
    let path = dir.path("policies.toml");
    let full = "[points.a]\nmax_visits = 1\n[points.b]\nmax_visits = 2\n";
    std::fs::write(&path, full).unwrap();
    let r = new_registry();
    let watcher = r
        .watch_policies_with(
            &path,
            WatchOptions::builder()
                .debounce(Duration::from_millis(200))
                .settle(Duration::from_millis(500))
                .build(),
        )
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen_cleared = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let observer = {
        let (done, seen_cleared) = (done.clone(), seen_cleared.clone());
        let r: &'static resilience_runtime::Registry = r;
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if r.policy("b").unwrap().is_none() {
                    seen_cleared.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // The slow save: truncate and write `a` (with a new value), pause, then `b`.
    let edited = "[points.a]\nmax_visits = 10\n[points.b]\nmax_visits = 20\n";
    let (head, tail) = edited.split_at(edited.find("[points.b]").unwrap());
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(head.as_bytes()).unwrap();
        f.sync_all().unwrap();
        std::thread::sleep(Duration::from_millis(400));
        f.write_all(tail.as_bytes()).unwrap();
        f.sync_all().unwrap();
    }
    let status = wait_for("version 2", || {
        Some(watcher.status()).filter(|s| s.version == 2)
    });
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    observer.join().unwrap();
    assert!(
        !seen_cleared.load(std::sync::atomic::Ordering::Relaxed),
        "point b was cleared while the file was half written"
    );
    assert_eq!(status.failures, 0, "{:?}", status.last_error);
    assert_eq!(r.policy("a").unwrap().unwrap().max_visits(), Some(10));
    assert_eq!(r.policy("b").unwrap().unwrap().max_visits(), Some(20));
    assert_eq!(r.policy_file_version(), 2, "applied once, complete");
}

/// A file rejected and then restored to the content in force: the watcher says it is
/// good again (status and `on_reload`), although there is nothing new to apply.
#[test]
fn a_rejected_file_restored_to_good_text_is_reported() {
    let dir = TempDir::new("restored");
    let path = dir.path("policies.toml");
    let good = "[points.restored]\nmax_visits = 5\n";
    std::fs::write(&path, good).unwrap();
    let r = new_registry();
    let quick = WatchOptions::builder()
        .debounce(Duration::from_millis(50))
        .settle(Duration::from_millis(50));
    let (options, rx) = reports(quick);
    let watcher = r.watch_policies_with(&path, options).unwrap();
    replace_atomically(&path, "[points.restored]\nmax_visits = []\n");
    let reported = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(reported.is_err(), "{reported:?}");
    assert!(watcher.status().last_error.is_some());
    replace_atomically(&path, good);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Ok(1),
        "good again, at the version in force"
    );
    let status = watcher.status();
    assert!(status.last_error.is_none());
    assert_eq!(status.version, 1);
    assert_eq!(r.policy_file_version(), 1, "nothing new was applied");
}

#[test]
fn a_broken_file_at_start_is_an_error() {
    let dir = TempDir::new("start");
    let path = dir.path("policies.toml");
    std::fs::write(&path, "[points.start]\nmax_visits = []\n").unwrap();
    let r = new_registry();
    let err = r.watch_policies(&path).unwrap_err();
    assert_eq!(
        problems(&err),
        [(ProblemKind::WrongType, Some("start"), Some("max_visits"))]
    );
    assert!(r.get("start").is_none());
}

// ---- breaker and adaptive sections ----

/// Every breaker field and every adaptive field away from its default.
fn tuned_file() -> PolicyFile {
    let sre = BreakerPolicy::Sre {
        config: SreConfig::builder()
            .window(Duration::from_secs(20))
            .buckets(80)
            .k(2.25)
            .protection(9)
            .force_pass_interval(Duration::from_millis(1500))
            .cancellations_are_failures(true)
            .build()
            .unwrap(),
        slow_call: Some(Duration::from_millis(300)),
    };
    let classic = BreakerPolicy::Classic(
        ClassicConfig::builder()
            .failure_rate(0.4)
            .slow_call_rate(0.75)
            .slow_call_duration(Duration::from_millis(800))
            .minimum_calls(25)
            .consecutive_failures(4)
            .window(Duration::from_secs(30))
            .buckets(15)
            .open_wait(
                Backoff::exponential(Duration::from_secs(1), 2.5, Duration::from_secs(40))
                    .with_jitter(0.125),
            )
            .half_open_probes(6)
            .cancellations_are_failures(true)
            .build()
            .unwrap(),
    );
    let gradient = AdaptiveLimit::Gradient(
        GradientConfig::builder()
            .initial_limit(40)
            .min_limit(4)
            .max_limit(400)
            .smoothing(0.5)
            .rtt_tolerance(2.0)
            .queue_size(6.5)
            .long_window(300)
            .sample_window(Duration::from_millis(250))
            .min_samples(20)
            .critical_reserve(0.25)
            .build()
            .unwrap(),
    );
    let shedder = AdaptiveLimit::Shedder(
        AdaptiveConfig::builder()
            .window(Duration::from_secs(2))
            .buckets(20)
            .cpu_threshold(800)
            .cool_off(Duration::from_millis(500))
            .default_min_rt(Duration::from_millis(750))
            .flying_beta(0.8)
            .min_overload_factor(0.25)
            .build()
            .unwrap(),
    );
    let with = |adaptive: Option<AdaptiveLimit>, breaker: Option<BreakerPolicy>| {
        let mut b = Policy::builder().max_visits(100);
        if let Some(a) = adaptive {
            b = b.adaptive(a);
        }
        let c = PointConfig::builder().policy(b.build().unwrap());
        match breaker {
            Some(breaker) => c.breaker(breaker).build(),
            None => c.build(),
        }
    };
    let mut file = PolicyFile::default();
    let points = &mut file.points;
    points.insert("tn.sre".into(), with(Some(gradient), Some(sre)));
    points.insert("tn.classic".into(), with(Some(shedder), Some(classic)));
    points.insert(
        "tn.disabled".into(),
        with(None, Some(BreakerPolicy::Disabled)),
    );
    points.insert(
        "tn.defaults".into(),
        PointConfig::builder()
            .policy(
                Policy::builder()
                    .adaptive(AdaptiveLimit::Gradient(GradientConfig::default()))
                    .build()
                    .unwrap(),
            )
            .breaker(BreakerPolicy::Classic(ClassicConfig::default()))
            .build(),
    );
    file
}

#[test]
fn breakers_and_adaptive_limits_round_trip_in_toml_and_json() {
    let file = tuned_file();
    let toml_text = file.to_text(Format::Toml).unwrap();
    for expected in [
        "[points.\"tn.classic\".breaker]",
        "algorithm = \"classic\"",
        "[points.\"tn.classic\".breaker.open_wait]",
        "base = \"1s\"",
        "max = \"40s\"",
        "[points.\"tn.sre\".adaptive]",
        "algorithm = \"gradient\"",
        "sample_window = \"250ms\"",
        "slow_call = \"300ms\"",
        "algorithm = \"disabled\"",
    ] {
        assert!(toml_text.contains(expected), "{expected}\n{toml_text}");
    }
    // Defaults are left out: the all-default point writes only the algorithms.
    let defaults = toml_text
        .split("[points.\"tn.defaults\".adaptive]")
        .nth(1)
        .unwrap()
        .split("[points.\"tn.disabled\"]")
        .next()
        .unwrap();
    assert_eq!(
        defaults.split_whitespace().collect::<Vec<_>>(),
        [
            "algorithm",
            "=",
            "\"gradient\"",
            "[points.\"tn.defaults\".breaker]",
            "algorithm",
            "=",
            "\"classic\""
        ],
        "{toml_text}"
    );
    assert_eq!(PolicyFile::parse(&toml_text, Format::Toml).unwrap(), file);
    let json = file.to_text(Format::Json).unwrap();
    assert!(
        json.contains(r#""force_pass_interval": "1500ms""#),
        "{json}"
    );
    assert_eq!(PolicyFile::parse(&json, Format::Json).unwrap(), file);

    let r = new_registry();
    let report = r.load_policies_str(&toml_text, Format::Toml).unwrap();
    assert_eq!(report.applied.len(), 4);
    for (name, config) in &file.points {
        assert_eq!(r.breaker(name).unwrap(), config.breaker, "{name}");
        assert_eq!(r.policy(name).unwrap().as_ref(), Some(&config.policy));
    }
    assert_eq!(PolicyFile::from_registry(r), file);
}

#[test]
fn missing_breaker_and_adaptive_fields_take_the_defaults() {
    let file = PolicyFile::parse(
        r#"
        [points.a.breaker]
        algorithm = "classic"
        failure_rate = 0.3
        open_wait = { base = "10s" }

        [points.b]
        breaker = { algorithm = "sre", k = 2 }
        adaptive = { algorithm = "shedder", cpu_threshold = 700 }
        "#,
        Format::Toml,
    )
    .unwrap();
    assert_eq!(
        file.points["a"].breaker,
        Some(BreakerPolicy::Classic(
            ClassicConfig::builder()
                .failure_rate(0.3)
                // A lone `base` longer than the default `max` is a fixed wait.
                .open_wait(Backoff::fixed(Duration::from_secs(10)))
                .build()
                .unwrap()
        ))
    );
    assert_eq!(file.points["a"].policy, Policy::observe());
    assert_eq!(
        file.points["b"].breaker,
        Some(BreakerPolicy::Sre {
            config: SreConfig::builder().k(2.0).build().unwrap(),
            slow_call: None,
        })
    );
    assert_eq!(
        file.points["b"].policy.adaptive(),
        Some(AdaptiveLimit::Shedder(
            AdaptiveConfig::builder()
                .cpu_threshold(700)
                .build()
                .unwrap()
        ))
    );
}

#[test]
fn every_breaker_and_adaptive_problem_is_named_and_nothing_is_applied() {
    let r = new_registry();
    let api_breaker =
        BreakerPolicy::Classic(ClassicConfig::builder().minimum_calls(3).build().unwrap());
    r.set_breaker("bk.ok", api_breaker).unwrap();
    r.set_policy("bk.ok", Policy::builder().max_visits(5).build().unwrap())
        .unwrap();
    let before = snapshot(r);
    let text = r#"
        [points."bk.ok"]
        max_visits = 6
        breaker = { algorithm = "sre" }             # valid, but the file is rejected

        [points."bk.shape"]
        breaker = "sre"
        adaptive = { max_limit = 10 }

        [points."bk.names"]
        breaker = { algorithm = "sr" }
        adaptive = { algorithm = 3 }

        [points."bk.fields"]
        breaker = { algorithm = "sre", protecton = 3, failure_rate = 0.5 }
        adaptive = { algorithm = "gradient", window = "1s" }

        [points."bk.types"]
        breaker = { algorithm = "classic", window = 10, consecutive_failures = "3", open_wait = { base = "1s", multiplier = "x", step = 1 } }
        adaptive = { algorithm = "shedder", cpu_threshold = -1 }

        [points."bk.ranges"]
        breaker = { algorithm = "classic", failure_rate = 1.5, half_open_probes = 0, open_wait = { base = "2s", max = "1s" } }
        adaptive = { algorithm = "gradient", min_limit = 0, smoothing = 2.0 }

        [points."bk.sre"]
        breaker = { algorithm = "sre", k = 1.0, buckets = 0, slow_call = "0s" }

        [points."bk.disabled"]
        breaker = { algorithm = "disabled", k = 2 }
    "#;
    let err = r.load_policies_str(text, Format::Toml).unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (WrongType, Some("bk.shape"), Some("breaker")),
            (MissingField, Some("bk.shape"), Some("adaptive.algorithm")),
            (WrongType, Some("bk.names"), Some("breaker.algorithm")),
            (WrongType, Some("bk.names"), Some("adaptive.algorithm")),
            (UnknownField, Some("bk.fields"), Some("breaker.protecton")),
            (
                UnknownField,
                Some("bk.fields"),
                Some("breaker.failure_rate")
            ),
            (UnknownField, Some("bk.fields"), Some("adaptive.window")),
            (
                WrongType,
                Some("bk.types"),
                Some("breaker.consecutive_failures")
            ),
            (WrongType, Some("bk.types"), Some("breaker.window")),
            (
                UnknownField,
                Some("bk.types"),
                Some("breaker.open_wait.step")
            ),
            (
                WrongType,
                Some("bk.types"),
                Some("breaker.open_wait.multiplier")
            ),
            (OutOfRange, Some("bk.types"), Some("adaptive.cpu_threshold")),
            (OutOfRange, Some("bk.ranges"), Some("breaker.failure_rate")),
            (OutOfRange, Some("bk.ranges"), Some("breaker.open_wait.max")),
            (
                OutOfRange,
                Some("bk.ranges"),
                Some("breaker.half_open_probes")
            ),
            (OutOfRange, Some("bk.ranges"), Some("adaptive.min_limit")),
            (OutOfRange, Some("bk.ranges"), Some("adaptive.smoothing")),
            (OutOfRange, Some("bk.sre"), Some("breaker.buckets")),
            (OutOfRange, Some("bk.sre"), Some("breaker.k")),
            (OutOfRange, Some("bk.sre"), Some("breaker.slow_call")),
            (UnknownField, Some("bk.disabled"), Some("breaker.k")),
        ],
        "{err}"
    );
    let text = err.to_string();
    for says in [
        "point `bk.names`, field `breaker.algorithm`: unknown algorithm `sr`, did you mean `sre`?",
        "point `bk.fields`, field `breaker.protecton`: unknown field `protecton`, did you mean `protection`?",
        "point `bk.fields`, field `breaker.failure_rate`: `failure_rate` is not a setting of the `sre` breaker",
        "point `bk.disabled`, field `breaker.k`: `k` is not a setting of the `disabled` breaker, which takes no other field",
        "point `bk.fields`, field `adaptive.window`: `window` is not a setting of the `gradient` adaptive limit",
        "point `bk.sre`, field `breaker.slow_call`: must be greater than zero (leave the field out to ignore durations)",
        "point `bk.ranges`, field `breaker.open_wait.max`: must be",
    ] {
        assert!(text.contains(says), "{says}\n{text}");
    }
    assert_eq!(snapshot(r), before);
    assert_eq!(r.breaker("bk.ok").unwrap(), Some(api_breaker));
    assert_eq!(r.breaker("bk.sre").unwrap(), None);
    assert_eq!(r.policy_file_version(), 0);

    // JSON: a duplicate key inside the section is named too.
    let err = r
        .load_policies_str(
            r#"{"points": {"bk.ok": {"breaker": {"algorithm": "sre", "k": 2, "k": 3}}}}"#,
            Format::Json,
        )
        .unwrap_err();
    assert_eq!(
        problems(&err),
        [(DuplicateField, Some("bk.ok"), Some("breaker.k"))]
    );
    assert_eq!(r.breaker("bk.ok").unwrap(), Some(api_breaker));
}

#[test]
fn a_breaker_made_in_code_is_checked_before_anything_is_applied() {
    let r = new_registry();
    let mut file = PolicyFile::default();
    file.points.insert(
        "code.ok".into(),
        PointConfig::builder().policy(Policy::observe()).build(),
    );
    // The fields stay public, so a configuration may have changed since it was built.
    let mut classic = ClassicConfig::default();
    classic.open_wait = Backoff::fixed(Duration::from_secs(1)).with_jitter(2.0);
    let bad = BreakerPolicy::Classic(classic);
    file.points.insert(
        "code.bad".into(),
        PointConfig::builder()
            .policy(Policy::observe())
            .breaker(bad)
            .build(),
    );
    let err = r
        .apply_source(Source::file("made-in-code"), &file)
        .unwrap_err();
    assert_eq!(
        problems(&err),
        [(
            ProblemKind::OutOfRange,
            Some("code.bad"),
            Some("breaker.open_wait.jitter")
        )]
    );
    assert!(r.get("code.ok").is_none(), "nothing applied");
    assert_eq!(r.policy_file_version(), 0);
}

#[test]
fn reloads_keep_unchanged_breakers_and_clear_removed_ones() {
    let r = new_registry();
    let trip_fast = r#"{"algorithm": "classic", "consecutive_failures": 1}"#;
    let file =
        |a: &str, b: &str| format!(r#"{{"points": {{"rl.a": {{"breaker": {a}}}, "rl.b": {b}}}}}"#);
    r.set_breaker("rl.api", BreakerPolicy::Disabled).unwrap();
    let first = r
        .load_policies_str(
            &file(trip_fast, &format!(r#"{{"breaker": {trip_fast}}}"#)),
            Format::Json,
        )
        .unwrap();
    assert!(first.breakers_cleared.is_empty());
    let a = r.point("rl.a").unwrap();
    a.enter().unwrap().finish(true);
    assert_eq!(a.enter().unwrap_err().reason(), Reason::BreakerOpen);

    // The same breaker again (b loses its section): a's breaker keeps its state.
    let second = r
        .load_policies_str(&file(trip_fast, r#"{"max_visits": 9}"#), Format::Json)
        .unwrap();
    assert_eq!(second.breakers_cleared, ["rl.b"]);
    assert_eq!(r.breaker("rl.b").unwrap(), None);
    assert_eq!(a.enter().unwrap_err().reason(), Reason::BreakerOpen);

    // A changed breaker starts afresh.
    let tolerant = r#"{"algorithm": "classic", "consecutive_failures": 2}"#;
    r.load_policies_str(&file(tolerant, "{}"), Format::Json)
        .unwrap();
    a.enter().unwrap().finish(true);
    a.enter().unwrap().finish(false);

    // A file without any breaker clears a's, never the API's.
    let last = r.load_policies_str("", Format::Toml).unwrap();
    assert_eq!(last.breakers_cleared, ["rl.a"]);
    assert_eq!(r.breaker("rl.a").unwrap(), None);
    assert_eq!(r.breaker("rl.api").unwrap(), Some(BreakerPolicy::Disabled));
}

/// With the `tracing` feature: a load logs an info event with the file, version and
/// point count, and a rejected reload logs a warning with the error.
#[cfg(feature = "tracing")]
mod tracing_events {
    use super::{wait_for, TempDir};
    use resilience_runtime::config::WatchOptions;
    use resilience_runtime::{Clock, Registry};
    use std::fmt::Write as _;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// Every event as "LEVEL message field=value ...".
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<String>>>);

    struct Line(String);

    impl Visit for Line {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut line = Line(event.metadata().level().to_string());
            event.record(&mut line);
            self.0.lock().unwrap().push(line.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn loads_and_rejected_reloads_are_logged() {
        let capture = Capture::default();
        // Global, so that the watcher's thread logs here too; no other test sets one.
        tracing::subscriber::set_global_default(capture.clone()).unwrap();
        let dir = TempDir::new("tracing");
        let path = dir.path("traced.toml");
        std::fs::write(&path, "[points.t1]\nmax_visits = 1\n[points.t2]\n").unwrap();
        let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
        let watcher = r
            .watch_policies_with(
                &path,
                WatchOptions::builder()
                    .debounce(Duration::from_millis(20))
                    .build(),
            )
            .unwrap();
        let mine = |level: Level| {
            let file = path.display().to_string();
            capture
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.starts_with(level.as_str()) && l.contains(&file))
                .cloned()
                .collect::<Vec<_>>()
        };
        let info = mine(Level::INFO);
        assert_eq!(info.len(), 1, "{info:?}");
        assert!(info[0].contains("policy file applied"), "{info:?}");
        assert!(info[0].contains("version=1 points=2 cleared=0"), "{info:?}");

        std::fs::write(&path, "[points.t1]\nmax_visits = \"x\"\n").unwrap();
        let warn = wait_for("a warning", || {
            Some(mine(Level::WARN)).filter(|w| !w.is_empty())
        });
        assert!(warn[0].contains("rejected"), "{warn:?}");
        assert!(
            warn[0].contains("point `t1`, field `max_visits`"),
            "{warn:?}"
        );
        assert_eq!(watcher.status().version, 1);
    }
}

// ---- cluster section ----

#[cfg(feature = "redis")]
#[test]
fn cluster_limits_parse_and_round_trip_in_toml_and_json() {
    use resilience_runtime::ClusterLimit;
    let text = r#"
        [points."cl.visits".cluster]
        algorithm = "visits"
        url = "redis://127.0.0.1:6379/"
        key = "limits:visits"
        period = "1m"
        quota = 600
        batch = 25

        [points."cl.tokens"]
        max_visits = 10
        cluster = { algorithm = "token_bucket", url = "redis://127.0.0.1:6379/", key = "limits:tokens", rate = 12.5, burst = 40 }

        [points."cl.small"]
        cluster = { algorithm = "token_bucket", url = "redis://127.0.0.1:6379/", key = "limits:small", rate = 2, burst = 4 }
    "#;
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let visits = ClusterLimit::Visits {
        url: "redis://127.0.0.1:6379/".into(),
        key: "limits:visits".into(),
        period: Duration::from_secs(60),
        quota: 600,
        batch: 25,
    };
    let tokens = ClusterLimit::TokenBucket {
        url: "redis://127.0.0.1:6379/".into(),
        key: "limits:tokens".into(),
        rate: 12.5,
        burst: 40,
        // Left out: the default batch.
        batch: resilience_runtime::redis::DEFAULT_BATCH,
    };
    assert_eq!(file.points["cl.visits"].policy.cluster(), Some(&visits));
    assert_eq!(file.points["cl.tokens"].policy.cluster(), Some(&tokens));
    assert_eq!(file.points["cl.tokens"].policy.max_visits(), Some(10));
    // A bucket smaller than the default batch leases its whole burst at most.
    assert!(matches!(
        file.points["cl.small"].policy.cluster(),
        Some(ClusterLimit::TokenBucket {
            burst: 4,
            batch: 4,
            ..
        })
    ));

    for format in [Format::Toml, Format::Json] {
        let written = file.to_text(format).unwrap();
        // The default batch is not written; a chosen one is.
        assert_eq!(written.matches("batch").count(), 1, "{written}");
        let again = PolicyFile::parse(&written, format).unwrap();
        assert_eq!(again, file, "{written}");
    }
}

#[cfg(feature = "redis")]
#[test]
fn every_cluster_problem_is_named() {
    let text = r#"
        [points."cl.shape"]
        cluster = "redis"

        [points."cl.missing"]
        cluster = { algorithm = "visits", key = "k", period = "1s" }

        [points."cl.names"]
        cluster = { algorithm = "token-bucket", url = "redis://h/", key = "k" }

        [points."cl.fields"]
        cluster = { algorithm = "token_bucket", url = "redis://h/", key = "k", rate = 1, burst = 1, quota = 3, bach = 2 }

        [points."cl.types"]
        cluster = { algorithm = "visits", url = 6379, key = "k", period = 10, quota = "3" }

        [points."cl.ranges"]
        cluster = { algorithm = "token_bucket", url = "http://not-redis/", key = "", rate = -1.0, burst = 0, batch = 0 }

        [points."cl.visits_ranges"]
        cluster = { algorithm = "visits", url = "redis://h/", key = "k", period = "0s", quota = 0 }

        [points."cl.lease_ranges"]
        cluster = { algorithm = "token_bucket", url = "redis://h/", key = "k", rate = 5, burst = 2, batch = 3 }

        [points."cl.sub_ms"]
        cluster = { algorithm = "visits", url = "redis://h/", key = "k", period = "500us", quota = 3 }
    "#;
    let err = PolicyFile::parse(text, Format::Toml).unwrap_err();
    use ProblemKind::*;
    let key = |p: &(ProblemKind, Option<&str>, Option<&str>)| {
        (p.0.as_str(), p.1.map(str::to_owned), p.2.map(str::to_owned))
    };
    let mut found = problems(&err);
    found.sort_by_key(key);
    let mut expected = vec![
        (WrongType, Some("cl.shape"), Some("cluster")),
        (MissingField, Some("cl.missing"), Some("cluster.url")),
        (MissingField, Some("cl.missing"), Some("cluster.quota")),
        (WrongType, Some("cl.names"), Some("cluster.algorithm")),
        (UnknownField, Some("cl.fields"), Some("cluster.bach")),
        (UnknownField, Some("cl.fields"), Some("cluster.quota")),
        (WrongType, Some("cl.types"), Some("cluster.url")),
        (WrongType, Some("cl.types"), Some("cluster.period")),
        (WrongType, Some("cl.types"), Some("cluster.quota")),
        (OutOfRange, Some("cl.ranges"), Some("cluster.url")),
        (OutOfRange, Some("cl.ranges"), Some("cluster.key")),
        (OutOfRange, Some("cl.ranges"), Some("cluster.rate")),
        (OutOfRange, Some("cl.ranges"), Some("cluster.burst")),
        (OutOfRange, Some("cl.ranges"), Some("cluster.batch")),
        (OutOfRange, Some("cl.visits_ranges"), Some("cluster.period")),
        (OutOfRange, Some("cl.visits_ranges"), Some("cluster.quota")),
        (OutOfRange, Some("cl.lease_ranges"), Some("cluster.batch")),
        (OutOfRange, Some("cl.sub_ms"), Some("cluster.period")),
    ];
    expected.sort_by_key(key);
    assert_eq!(found, expected, "{err}");
    let text = err.to_string();
    for says in [
        "point `cl.names`, field `cluster.algorithm`: unknown algorithm `token-bucket`, did you mean `token_bucket`?",
        "point `cl.fields`, field `cluster.quota`: `quota` is not a setting of the `token_bucket` cluster",
        "point `cl.missing`, field `cluster.url`: `cluster.url` is required",
        "point `cl.lease_ranges`, field `cluster.batch`: must not exceed `burst` (2), got 3",
        "point `cl.sub_ms`, field `cluster.period`: must be between 1 ms and 10 years, got 500µs",
    ] {
        assert!(text.contains(says), "{says}\n{text}");
    }
}

#[cfg(not(feature = "redis"))]
#[test]
fn a_cluster_section_without_the_redis_feature_is_named() {
    let text = r#"
        [points."cl.x"]
        cluster = { algorithm = "visits", url = "redis://h/", key = "k", period = "1s", quota = 3 }
    "#;
    let err = PolicyFile::parse(text, Format::Toml).unwrap_err();
    assert_eq!(
        problems(&err),
        [(ProblemKind::UnknownField, Some("cl.x"), Some("cluster"))]
    );
    assert!(
        err.to_string().contains("needs the `redis` feature"),
        "{err}"
    );
}

/// The guide's fleet chapter: the one-line `cluster` section it shows is a valid point
/// setting.
#[cfg(feature = "redis")]
#[test]
fn the_guide_cluster_line_parses() {
    use resilience_runtime::ClusterLimit;
    let chapter = include_str!("../src/guide/fleet.md");
    let line = chapter
        .lines()
        .find(|l| l.starts_with("`cluster = {"))
        .expect("the fleet chapter shows a `cluster = { ... }` line")
        .trim_matches(|c| c == '`' || c == '.');
    let file = PolicyFile::parse(
        &format!("[points.\"orders.create\"]\n{line}\n"),
        Format::Toml,
    )
    .unwrap_or_else(|e| panic!("{line}: {e}"));
    assert!(matches!(
        file.points["orders.create"].policy.cluster(),
        Some(ClusterLimit::Visits { quota: 500, .. })
    ));
}

#[cfg(not(feature = "redis"))]
#[test]
fn a_cluster_wide_keys_section_without_the_redis_feature_is_named() {
    let text = r#"
        [points."k.x"]
        keys = { limit = 3, cluster = { url = "redis://h/", prefix = "k:" } }
    "#;
    let err = PolicyFile::parse(text, Format::Toml).unwrap_err();
    assert_eq!(
        problems(&err),
        [(ProblemKind::UnknownField, Some("k.x"), Some("keys.cluster"))]
    );
    assert!(
        err.to_string().contains("needs the `redis` feature"),
        "{err}"
    );
}
