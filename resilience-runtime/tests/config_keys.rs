//! The `keys` section of policy files: every field in TOML and JSON, overrides in
//! both forms, every problem named by its field, round trips, layering, and a hot
//! reload that changes a limit and an override while calls run.

use resilience_runtime::config::{ConfigError, Format, PolicyFile, ProblemKind, WatchOptions};
use resilience_runtime::keys::{KeyOverride, KeyPolicy, DEFAULT_MAX_KEYS};
use resilience_runtime::sources::{Section, Source};
use resilience_runtime::{Clock, Policy, Reason, Registry};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn new_registry() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

/// (kind, point, field) of every problem of an error.
fn problems(e: &ConfigError) -> Vec<(ProblemKind, Option<&str>, Option<&str>)> {
    e.problems()
        .iter()
        .map(|p| (p.kind, p.point.as_deref(), p.field.as_deref()))
        .collect()
}

const EVERY_FIELD: &str = r#"
[points."api.get".keys]
limit = 100
period = "2s"
burst = 150
max_concurrency = 5
max_keys = 8192

[points."api.get".keys.overrides]
"vip-42" = 1000
"blocked" = 0
"slow" = { max_concurrency = 1 }
"big" = { limit = 10, burst = 20, max_concurrency = 3 }
"#;

fn every_field() -> KeyPolicy {
    KeyPolicy::builder()
        .limit(100, Duration::from_secs(2))
        .burst(150)
        .max_concurrency(5)
        .max_keys(8192)
        .override_limit("vip-42", 1000)
        .override_limit("blocked", 0)
        .override_rule("slow", KeyOverride::builder().max_concurrency(1).build())
        .override_rule(
            "big",
            KeyOverride::builder()
                .limit(10)
                .burst(20)
                .max_concurrency(3)
                .build(),
        )
        .build()
        .unwrap()
}

#[test]
fn every_field_parses_in_toml() {
    let file = PolicyFile::parse(EVERY_FIELD, Format::Toml).unwrap();
    let config = &file.points["api.get"];
    assert!(config.sets(Section::Keys));
    // Only `keys`: the table sets the rules to "none" (it has no rule key).
    assert!(!config.sets(Section::Rules));
    let keys = config.policy.keys().unwrap();
    assert_eq!(keys, &every_field());
    assert_eq!(keys.period(), Duration::from_secs(2));
    assert_eq!(keys.max_keys(), 8192);
    let rule = keys.rule();
    assert_eq!(
        (rule.limit, rule.burst, rule.max_concurrency),
        (Some(100), Some(150), Some(5))
    );
    let values: Vec<_> = keys.overrides().iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(values, ["big", "blocked", "slow", "vip-42"]);
    assert_eq!(keys.rule_of("vip-42").limit, Some(1000));
    assert_eq!(keys.rule_of("blocked").limit, Some(0));
    let slow = keys.rule_of("slow");
    assert_eq!(
        (slow.limit, slow.burst, slow.max_concurrency),
        (Some(100), Some(150), Some(1))
    );
    let big = keys.rule_of("big");
    assert_eq!(
        (big.limit, big.burst, big.max_concurrency),
        (Some(10), Some(20), Some(3))
    );
}

#[test]
fn the_json_form_is_the_same() {
    let json = r#"{"points": {"api.get": {"keys": {
        "limit": 100, "period": "2s", "burst": 150, "max_concurrency": 5, "max_keys": 8192,
        "overrides": {"vip-42": 1000, "blocked": 0, "slow": {"max_concurrency": 1},
                      "big": {"limit": 10, "burst": 20, "max_concurrency": 3}}}}}}"#;
    let from_json = PolicyFile::parse(json, Format::Json).unwrap();
    let from_toml = PolicyFile::parse(EVERY_FIELD, Format::Toml).unwrap();
    assert_eq!(from_json, from_toml);
}

#[test]
fn defaults_and_round_trips() {
    let file = PolicyFile::parse(
        "[points.a]\nmax_visits = 5\nkeys = { limit = 3 }\n[points.b]\nkeys = {}\n\
         [points.c]\nkeys = { max_concurrency = 2, overrides = { x = {} } }\n",
        Format::Toml,
    )
    .unwrap();
    let a = file.points["a"].policy.keys().unwrap();
    assert_eq!(a.period(), Duration::from_secs(1));
    assert_eq!(a.max_keys(), DEFAULT_MAX_KEYS);
    assert_eq!(a.rule().burst, None);
    assert!(a.overrides().is_empty());
    assert_eq!(file.points["a"].policy.max_visits(), Some(5));
    let b = file.points["b"].policy.keys().unwrap();
    assert_eq!(b.rule().limit, None);
    let c = file.points["c"].policy.keys().unwrap();
    assert_eq!(c.overrides(), [("x".to_owned(), KeyOverride::default())]);

    let mut all = file.clone();
    all.points
        .extend(PolicyFile::parse(EVERY_FIELD, Format::Toml).unwrap().points);
    for format in [Format::Toml, Format::Json] {
        let text = all.to_text(format).unwrap();
        assert_eq!(PolicyFile::parse(&text, format).unwrap(), all, "{text}");
    }
    // Defaults are left out; an override of the limit alone is a number.
    let json = all.to_text(Format::Json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["points"]["a"]["keys"], serde_json::json!({"limit": 3}));
    assert_eq!(
        v["points"]["api.get"]["keys"],
        serde_json::json!({"limit": 100, "period": "2s", "burst": 150, "max_concurrency": 5,
            "max_keys": 8192, "overrides": {"big": {"limit": 10, "burst": 20,
            "max_concurrency": 3}, "blocked": 0, "slow": {"max_concurrency": 1},
            "vip-42": 1000}})
    );
    assert_eq!(
        v["points"]["c"]["keys"]["overrides"]["x"],
        serde_json::json!({})
    );
}

#[test]
fn every_problem_names_its_field_and_nothing_is_applied() {
    let r = new_registry();
    r.load_policies_str("[points.k]\nkeys = { limit = 1 }\n", Format::Toml)
        .unwrap();
    let text = r#"
        [points.types]
        keys = { limit = "lots", period = 5, burst = -1, max_concurrency = 1.5, max_keys = true }

        [points.unknown.keys]
        limt = 3
        overrides = { a = { limit = 1, max_concurency = 2 } }

        [points.shapes]
        keys = { overrides = { a = "many", b = [1], c = -3 } }

        [points.not_a_table]
        keys = 5

        [points.overrides_not_a_table]
        keys = { overrides = 3 }

        [points.ranges.keys]
        limit = 2000000000
        period = "0s"
        burst = 0
        max_concurrency = 100000000
        max_keys = 3

        [points.override_ranges.keys]
        limit = 10
        [points.override_ranges.keys.overrides]
        "vip" = 2000000000
        "b" = { burst = 0 }
        "c" = { max_concurrency = 100000000 }
        "" = 1
        "a\tb" = 1

        [points.burst_alone]
        keys = { burst = 5, overrides = { x = { burst = 2 } } }
    "#;
    let err = r.load_policies_str(text, Format::Toml).unwrap_err();
    use ProblemKind::*;
    assert_eq!(
        problems(&err),
        [
            (WrongType, Some("types"), Some("keys.limit")),
            (WrongType, Some("types"), Some("keys.period")),
            (OutOfRange, Some("types"), Some("keys.burst")),
            (WrongType, Some("types"), Some("keys.max_concurrency")),
            (WrongType, Some("types"), Some("keys.max_keys")),
            (UnknownField, Some("unknown"), Some("keys.limt")),
            (
                UnknownField,
                Some("unknown"),
                Some("keys.overrides.\"a\".max_concurency")
            ),
            (WrongType, Some("shapes"), Some("keys.overrides.\"a\"")),
            (WrongType, Some("shapes"), Some("keys.overrides.\"b\"")),
            (OutOfRange, Some("shapes"), Some("keys.overrides.\"c\"")),
            (WrongType, Some("not_a_table"), Some("keys")),
            (
                WrongType,
                Some("overrides_not_a_table"),
                Some("keys.overrides")
            ),
            (OutOfRange, Some("ranges"), Some("keys.max_keys")),
            (OutOfRange, Some("ranges"), Some("keys.period")),
            (OutOfRange, Some("ranges"), Some("keys.limit")),
            (OutOfRange, Some("ranges"), Some("keys.burst")),
            (OutOfRange, Some("ranges"), Some("keys.max_concurrency")),
            (
                OutOfRange,
                Some("override_ranges"),
                Some("keys.overrides.\"\"")
            ),
            (
                OutOfRange,
                Some("override_ranges"),
                Some("keys.overrides.\"a\\tb\"")
            ),
            (
                OutOfRange,
                Some("override_ranges"),
                Some("keys.overrides.\"b\".burst")
            ),
            (
                OutOfRange,
                Some("override_ranges"),
                Some("keys.overrides.\"c\".max_concurrency")
            ),
            (
                OutOfRange,
                Some("override_ranges"),
                Some("keys.overrides.\"vip\".limit")
            ),
            (OutOfRange, Some("burst_alone"), Some("keys.burst")),
            (
                OutOfRange,
                Some("burst_alone"),
                Some("keys.overrides.\"x\".burst")
            ),
        ],
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("unknown field `limt`, did you mean `limit`?"),
        "{message}"
    );
    assert!(
        message.contains("unknown field `max_concurency`, did you mean `max_concurrency`?"),
        "{message}"
    );
    // The override's message is the runtime's, without its "override ..." prefix (the
    // field names the value).
    let vip = err
        .problems()
        .iter()
        .find(|p| p.field.as_deref() == Some("keys.overrides.\"vip\".limit"))
        .unwrap();
    assert!(
        vip.message.starts_with("must be at most"),
        "{}",
        vip.message
    );
    // An unknown point field suggests `keys`.
    let err = r
        .load_policies_str("[points.k]\nkey = { limit = 1 }\n", Format::Toml)
        .unwrap_err();
    assert!(err.to_string().contains("did you mean `keys`"), "{err}");
    // Nothing was applied.
    assert_eq!(
        r.policy("k").unwrap().unwrap().keys().unwrap().rule().limit,
        Some(1)
    );
    assert!(r.get("types").is_none());
}

#[test]
fn json_duplicates_of_an_override_are_named() {
    let err = PolicyFile::parse(
        r#"{"points": {"p": {"keys": {"limit": 1, "overrides": {"v": 1, "v": 2}}}}}"#,
        Format::Json,
    )
    .unwrap_err();
    assert_eq!(
        problems(&err),
        [(
            ProblemKind::DuplicateField,
            Some("p"),
            Some("keys.overrides.\"v\"")
        )]
    );
}

#[test]
fn a_file_without_keys_leaves_the_section_to_other_sources() {
    let r = new_registry();
    let code = KeyPolicy::builder()
        .limit(3, Duration::from_secs(60))
        .build()
        .unwrap();
    r.set_policy("lay", Policy::builder().keys(code.clone()).build().unwrap())
        .unwrap();
    let keys_of = |r: &Registry| r.policy("lay").unwrap().unwrap().keys().cloned();
    let origin = |r: &Registry| {
        r.effective_policy("lay")
            .unwrap()
            .origin(Section::Keys)
            .map(|o| o.source.clone())
    };
    // The file's keys win over the code's.
    r.load_policies_str(
        "[points.lay]\nmax_visits = 100\nkeys = { limit = 7, overrides = { v = 1 } }\n",
        Format::Toml,
    )
    .unwrap();
    assert_eq!(keys_of(r).unwrap().rule().limit, Some(7));
    assert!(matches!(origin(r), Some(Source::File(_))));
    // The file stops mentioning `keys`: the code's section is back, the file's rules
    // stay.
    r.load_policies_str("[points.lay]\nmax_visits = 50\n", Format::Toml)
        .unwrap();
    assert_eq!(keys_of(r), Some(code.clone()));
    assert_eq!(origin(r), Some(Source::Code));
    assert_eq!(r.policy("lay").unwrap().unwrap().max_visits(), Some(50));
    // `keys = "off"`: no per-key limits, over the code's.
    r.load_policies_str("[points.lay]\nkeys = \"off\"\n", Format::Toml)
        .unwrap();
    assert_eq!(keys_of(r), None);
    assert!(matches!(origin(r), Some(Source::File(_))));
    let point = r.point("lay").unwrap();
    for _ in 0..10 {
        point.enter_key("alice").unwrap().finish(false);
    }
    // What the registry enforces, written as a file, says so and reads back the same.
    let file = PolicyFile::from_registry(r);
    let json = file.to_text(Format::Json).unwrap();
    assert!(json.contains(r#""keys": "off""#), "{json}");
    assert_eq!(PolicyFile::parse(&json, Format::Json).unwrap(), file);
    // The file gone: the code's again.
    r.load_policies_str("", Format::Toml).unwrap();
    assert_eq!(keys_of(r), Some(code));
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "resilience-keys-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `f` until it is true, for at most 5 s.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Calls of `key` admitted out of `n` tries (each admitted call ends at once).
fn admitted(r: &'static Registry, key: &str, n: usize) -> usize {
    let point = r.point("hot.keys").unwrap();
    (0..n)
        .filter(|_| match point.enter_key(key) {
            Ok(permit) => {
                permit.finish(false);
                true
            }
            Err(d) => {
                assert_eq!(d.reason(), Reason::HotKey);
                false
            }
        })
        .count()
}

#[test]
fn a_hot_reload_changes_a_limit_and_an_override_while_calls_run() {
    let dir = TempDir::new("reload");
    let path = dir.0.join("policies.toml");
    // An hour's period: no token comes back during the test.
    let first = "[points.\"hot.keys\".keys]\nlimit = 2\nperiod = \"1h\"\n\
                 [points.\"hot.keys\".keys.overrides]\n\"vip\" = 3\n";
    std::fs::write(&path, first).unwrap();
    let r = new_registry();
    let watcher = r
        .watch_policies_with(
            &path,
            WatchOptions::builder()
                .debounce(Duration::from_millis(50))
                .build(),
        )
        .unwrap();
    assert_eq!(watcher.status().version, 1);
    let point = r.point("hot.keys").unwrap();

    // Calls of many keys run on other threads all along.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (stop, calls) = (stop.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match point.enter_key(&format!("bg-{t}-{}", i % 50)) {
                        Ok(permit) => permit.finish(false),
                        Err(d) => assert_eq!(d.reason(), Reason::HotKey),
                    }
                    i += 1;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    assert_eq!(admitted(r, "alice", 5), 2, "the section's limit");
    assert_eq!(admitted(r, "vip", 6), 3, "the override's limit");

    // The limit raised to 5, the override to 10.
    std::fs::write(
        &path,
        "[points.\"hot.keys\".keys]\nlimit = 5\nperiod = \"1h\"\n\
         [points.\"hot.keys\".keys.overrides]\n\"vip\" = 10\n\"blocked\" = 0\n",
    )
    .unwrap();
    wait_for("version 2", || watcher.status().version == 2);
    assert_eq!(admitted(r, "bob", 8), 5, "the new limit of a new key");
    // The override keeps what the value used: between the 7 left and all 10.
    let vip = admitted(r, "vip", 12);
    assert!((7..=10).contains(&vip), "vip admitted {vip} of its new 10");
    assert_eq!(admitted(r, "blocked", 3), 0, "a new override of 0");

    // The override removed: `vip` is a key like any other, under the limit of 5.
    std::fs::write(
        &path,
        "[points.\"hot.keys\".keys]\nlimit = 5\nperiod = \"1h\"\n",
    )
    .unwrap();
    wait_for("version 3", || watcher.status().version == 3);
    assert!(admitted(r, "vip", 8) <= 5);
    assert_eq!(admitted(r, "carol", 8), 5);

    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(calls.load(Ordering::Relaxed) > 0);
    assert!(watcher.status().last_error.is_none());
    // The refusals were downgrades with their reason.
    let stats = r.stats("hot.keys").unwrap();
    assert!(stats.totals.downgrades_by_reason.get(Reason::HotKey) > 0);
    // The keys are seen by the statistics, the overrides marked.
    let hot = point.hot_keys(1000);
    assert!(hot
        .iter()
        .any(|k| k.key == "bob" && k.passes == 5 && k.refused == 3));
    assert!(point.key_stats().is_some());
}

#[cfg(feature = "redis")]
#[test]
fn a_cluster_wide_keys_section_parses_round_trips_and_names_its_problems() {
    use resilience_runtime::keys::{KeyCluster, DEFAULT_KEY_COLD};
    let text = r#"
        [points."t"]
        keys = { limit = 50, cluster = { url = "redis://127.0.0.1:6379/", prefix = "tenants:" } }
        [points."u"]
        keys = { limit = 50, cluster = { url = "redis://h/", prefix = "u:", batch = 4, cold = "5s" } }
    "#;
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let t = file.points["t"].policy.keys().unwrap().cluster().unwrap();
    assert_eq!(
        (t.url.as_str(), t.prefix.as_str(), t.batch, t.cold),
        (
            "redis://127.0.0.1:6379/",
            "tenants:",
            resilience_runtime::redis::DEFAULT_BATCH,
            DEFAULT_KEY_COLD
        )
    );
    let u = file.points["u"].policy.keys().unwrap().cluster().unwrap();
    assert_eq!(
        u,
        &KeyCluster::builder("redis://h/", "u:")
            .batch(4)
            .cold(Duration::from_secs(5))
            .build()
            .unwrap()
    );
    for format in [Format::Toml, Format::Json] {
        let out = file.to_text(format).unwrap();
        assert_eq!(PolicyFile::parse(&out, format).unwrap(), file, "{out}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&file.to_text(Format::Json).unwrap()).unwrap();
    assert_eq!(
        json["points"]["t"]["keys"]["cluster"],
        serde_json::json!({"url": "redis://127.0.0.1:6379/", "prefix": "tenants:"})
    );
    let bad = r#"
        [points."v"]
        keys = { limit = 5, cluster = { url = "redis://h/", prefx = "a", batch = 0, cold = "1ms" } }
    "#;
    let err = PolicyFile::parse(bad, Format::Toml).unwrap_err();
    let fields: Vec<_> = problems(&err)
        .into_iter()
        .map(|(_, _, f)| f.map(str::to_owned))
        .collect();
    assert!(fields.contains(&Some("keys.cluster.prefx".into())), "{err}");
    assert!(
        fields.contains(&Some("keys.cluster.prefix".into())),
        "{err}"
    );
    assert!(err.to_string().contains("prefix"), "did you mean: {err}");
    let ranges = r#"
        [points."w"]
        keys = { limit = 5, cluster = { url = "redis://h/", prefix = "a", batch = 0, cold = "1ms" } }
    "#;
    let err = PolicyFile::parse(ranges, Format::Toml).unwrap_err();
    let fields: Vec<_> = problems(&err)
        .into_iter()
        .filter_map(|(_, _, f)| f.map(str::to_owned))
        .collect();
    assert_eq!(fields, ["keys.cluster.batch", "keys.cluster.cold"], "{err}");
}

#[test]
fn max_wait_parses_round_trips_and_names_its_problems() {
    let text = "[points.w]\nkeys = { limit = 10, max_wait = \"50ms\" }\n";
    let file = PolicyFile::parse(text, Format::Toml).unwrap();
    let keys = file.points["w"].policy.keys().unwrap();
    assert_eq!(keys.max_wait(), Some(Duration::from_millis(50)));
    for format in [Format::Toml, Format::Json] {
        let out = file.to_text(format).unwrap();
        assert_eq!(PolicyFile::parse(&out, format).unwrap(), file, "{out}");
    }
    let bad = r#"
        [points.zero]
        keys = { limit = 10, max_wait = "0s" }
        [points.long]
        keys = { limit = 10, max_wait = "2h" }
        [points.unlimited]
        keys = { max_concurrency = 3, max_wait = "10ms" }
        [points.typed]
        keys = { limit = 10, max_wait = 5 }
    "#;
    let err = PolicyFile::parse(bad, Format::Toml).unwrap_err();
    let mut got: Vec<_> = problems(&err)
        .into_iter()
        .map(|(kind, point, field)| (point, field, format!("{kind:?}")))
        .collect();
    got.sort();
    let want = [
        (Some("long"), Some("keys.max_wait"), "OutOfRange".to_owned()),
        (Some("typed"), Some("keys.max_wait"), "WrongType".to_owned()),
        (
            Some("unlimited"),
            Some("keys.max_wait"),
            "OutOfRange".to_owned(),
        ),
        (Some("zero"), Some("keys.max_wait"), "OutOfRange".to_owned()),
    ];
    assert_eq!(got, want, "{err}");
    assert!(err.to_string().contains("needs `limit`"), "{err}");
}
