//! Fuzzing the policy-file parser and loader with proptest: arbitrary text and bytes,
//! random mutations of a valid file, and structured but random TOML and JSON
//! documents. No input may panic, a rejected load must leave every policy as it was,
//! and an accepted one must apply exactly what the file says. With the `redis` feature,
//! files with cluster-wide limits are also applied against the real Redis
//! (`RESILIENCE_REDIS_URL`, started by `scripts/test.sh`).
//!
//! Case counts are set per test below; `PROPTEST_CASES` overrides them all.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
#[cfg(feature = "redis")]
use resilience_runtime::config::INLINE_SOURCE;
use resilience_runtime::config::{Format, PointConfig, PolicyFile};
use resilience_runtime::keys::{KeyOverride, KeyPolicy};
use resilience_runtime::retry::RetryPolicy;
#[cfg(feature = "redis")]
use resilience_runtime::sources::Source;
use resilience_runtime::{BreakerPolicy, Clock, Policy, Registry};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// A valid file touching every field, the seed of the mutation fuzzer.
const SEED_TOML: &str = r#"
strict = false

[points."order.create"]
shadow = false
max_visits = 1000
max_concurrency = 64
max_exceptions = 30
downgrade_percentage = 80
exception_rate = { rate = 0.25, min_visits = 20 }
timeouts = { threshold = "250ms", max_count = 7 }
call_timeout = "750ms"
token_bucket = { rate = 12.5, capacity = 40 }
delay = { duration = "10s", retry_interval = "1500ms" }

[points."order.create".window]
buckets = 20
bucket_width = "500ms"

[points."order.create".adaptive]
algorithm = "gradient"
max_limit = 200
sample_window = "250ms"

[points."order.create".breaker]
algorithm = "classic"
failure_rate = 0.4
consecutive_failures = 5
open_wait = { base = "1s", multiplier = 2.0, max = "30s", jitter = 0.1 }

[points."order.create".keys]
limit = 100
period = "2s"
burst = 150
max_concurrency = 5
max_keys = 8192

[points."order.create".keys.overrides]
"vip-42" = 1000
"blocked" = 0
"slow" = { max_concurrency = 1, burst = 3, limit = 2 }

[points.search]
max_visits = 0
keys = { max_concurrency = 2, overrides = { a = 1 } }
breaker = { algorithm = "sre", k = 2.0, slow_call = "500ms" }
retry = { attempts = 4, base = "10ms", budget = { percent = 5.0 } }
adaptive = { algorithm = "shedder", cpu_threshold = 800 }
"#;

fn seed_json() -> String {
    PolicyFile::parse(SEED_TOML, Format::Toml)
        .unwrap()
        .to_text(Format::Json)
        .unwrap()
}

fn new_registry() -> &'static Registry {
    let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    // Something to lose: a rejected load must keep these exactly.
    r.load_policies_str(SEED_TOML, Format::Toml).unwrap();
    r.set_policy(
        "api.only",
        Policy::builder().max_concurrency(3).build().unwrap(),
    )
    .unwrap();
    r
}

/// One registry per test function, made on first use: proptest runs a test's cases one
/// after the other, and `check_load` leaves the registry as it found it.
fn shared(test: usize) -> &'static Registry {
    static REGISTRIES: [OnceLock<&'static Registry>; 5] = [const { OnceLock::new() }; 5];
    REGISTRIES[test].get_or_init(new_registry)
}

fn snapshot(r: &Registry) -> BTreeMap<&'static str, Option<Policy>> {
    r.point_names()
        .into_iter()
        .map(|n| (n, r.policy(n).unwrap()))
        .collect()
}

/// Every point's breaker setting.
fn breakers(r: &Registry) -> BTreeMap<&'static str, Option<BreakerPolicy>> {
    r.point_names()
        .into_iter()
        .map(|n| (n, r.breaker(n).unwrap()))
        .collect()
}

/// Every point's retry section.
fn retries(r: &Registry) -> BTreeMap<&'static str, Option<RetryPolicy>> {
    r.point_names()
        .into_iter()
        .map(|n| (n, r.retry(n).unwrap()))
        .collect()
}

/// Loads `text` and checks the all-or-nothing rule either way.
fn check_load(r: &Registry, text: &str, format: Format) -> Result<(), TestCaseError> {
    let before = snapshot(r);
    let breakers_before = breakers(r);
    let retries_before = retries(r);
    let version = r.policy_file_version();
    let parsed = PolicyFile::parse(text, format);
    match r.load_policies_str(text, format) {
        Err(e) => {
            prop_assert!(!e.problems().is_empty(), "an Invalid error lists problems");
            prop_assert_eq!(
                snapshot(r),
                before,
                "a rejected load changed policies: {}",
                e
            );
            prop_assert_eq!(
                breakers(r),
                breakers_before,
                "a rejected load changed breakers"
            );
            prop_assert_eq!(
                retries(r),
                retries_before,
                "a rejected load changed retry sections"
            );
            prop_assert_eq!(r.policy_file_version(), version);
            // Display never panics and names every problem.
            prop_assert!(e.to_string().contains("nothing applied"));
        }
        Ok(report) => {
            let file = parsed
                .map_err(|e| TestCaseError::fail(format!("loaded, but parse failed: {e}")))?;
            prop_assert_eq!(report.version, version + 1);
            for (name, config) in &file.points {
                // The file is the only source: a table that sets no policy section
                // (a breaker only) leaves the point without a policy.
                let now = r.policy(name).unwrap();
                let expected = (!config.sections.is_empty()).then_some(&config.policy);
                prop_assert_eq!(now.as_ref(), expected);
                if config.breaker.is_some() {
                    prop_assert_eq!(r.breaker(name).unwrap(), config.breaker);
                }
                // The file is the only source of retry sections.
                prop_assert_eq!(r.retry(name).unwrap(), config.retry);
            }
            // Points outside the file keep what they had, unless the previous file
            // configured them (then they are cleared).
            for (name, policy) in &before {
                if !file.points.contains_key(*name) && !report.cleared.iter().any(|c| c == name) {
                    prop_assert_eq!(&r.policy(name).unwrap(), policy, "{}", name);
                }
            }
            prop_assert_eq!(
                r.policy("api.only").unwrap().unwrap().max_concurrency(),
                Some(3)
            );
            // Put the seed back so later cases start from the same state.
            r.load_policies_str(SEED_TOML, Format::Toml).unwrap();
        }
    }
    Ok(())
}

/// `cases` cases (unless `PROPTEST_CASES` says otherwise), with failures saved in
/// `resilience-runtime/proptest-regressions/config_fuzz.txt` and replayed first.
fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/config_fuzz.txt",
        ))),
        ..Config::default()
    }
}

fn format() -> impl Strategy<Value = Format> {
    prop_oneof![Just(Format::Toml), Just(Format::Json)]
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn arbitrary_text_never_panics_nor_applies_partially(text in ".{0,200}", format in format()) {
        let r = shared(0);
        check_load(r, &text, format)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), format in format()) {
        let r = shared(1);
        check_load(r, &String::from_utf8_lossy(&bytes), format)?;
    }
}

/// One edit of a text: delete, insert or replace a short run at some position.
#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, String),
    Replace(usize, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Inserted text favours the file's own alphabet so mutants stay near-valid.
    let piece = prop_oneof![
        "[\\[\\]{}=,.\"'#\n 0-9a-z_-]{1,6}",
        Just("\"".to_owned()),
        Just("-1".to_owned()),
        Just("1e400".to_owned()),
        Just("nan".to_owned()),
        Just("\"0s\"".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("[points.x]\n".to_owned()),
    ];
    prop_oneof![
        (any::<usize>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), piece.clone()).prop_map(|(at, s)| Edit::Insert(at, s)),
        (any::<usize>(), piece).prop_map(|(at, s)| Edit::Replace(at, s)),
    ]
}

fn mutate(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let len = chars.len().max(1);
        match e {
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
            Edit::Insert(at, s) => {
                let at = at % (chars.len() + 1);
                chars.splice(at..at, s.chars());
            }
            Edit::Replace(at, s) => {
                let at = at % len;
                let end = (at + s.chars().count()).min(chars.len());
                chars.splice(at.min(end)..end, s.chars());
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn mutated_valid_files_never_panic_nor_apply_partially(
        edits in proptest::collection::vec(edit(), 1..4),
        format in format(),
    ) {
        let seed = match format {
            Format::Toml => SEED_TOML.to_owned(),
            Format::Json => seed_json(),
        };
        let r = shared(2);
        check_load(r, &mutate(&seed, &edits), format)?;
    }
}

/// A random value: mostly plausible for the fields, sometimes of the wrong type.
fn value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{json, Value};
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::from),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(100),
            Just(101),
            Just(3600),
            Just(3601),
            Just(i64::MAX),
            Just(i64::from(u32::MAX) + 1)
        ]
        .prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(0.0f64),
            Just(0.5),
            Just(1.0),
            Just(1.5),
            Just(-0.1),
            Just(1e9),
            Just(2e9)
        ]
        .prop_map(Value::from),
        prop_oneof![
            Just("250ms"),
            Just("0s"),
            Just("10s"),
            Just("1m30s"),
            Just("5"),
            Just("5d"),
            Just(""),
            Just("600000000000h"),
            Just("1.5s")
        ]
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            proptest::collection::btree_map(field_name(), inner, 0..4).prop_map(|m| json!(m)),
        ]
    })
}

/// Field names: the real ones (and their sections' keys) most of the time.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop_oneof![
            Just("shadow"), Just("max_visits"), Just("max_concurrency"), Just("max_exceptions"),
            Just("downgrade_percentage"), Just("exception_rate"), Just("timeouts"),
            Just("call_timeout"), Just("token_bucket"), Just("delay"), Just("window"), Just("rate"), Just("min_visits"),
            Just("threshold"), Just("max_count"), Just("capacity"), Just("duration"),
            Just("retry_interval"), Just("buckets"), Just("bucket_width"),
            Just("breaker"), Just("adaptive"), Just("algorithm"), Just("k"),
            Just("failure_rate"), Just("open_wait"), Just("max_limit"),
            Just("retry"), Just("attempts"), Just("base"), Just("multiplier"), Just("max"),
            Just("jitter"), Just("budget"), Just("percent"), Just("min_per_second"),
            Just("keys"), Just("limit"), Just("period"), Just("burst"), Just("max_keys"),
            Just("overrides"), Just("vip"),
        ]
        .prop_map(str::to_owned),
        1 => "[a-z_]{1,10}",
    ]
}

/// A point's table: known fields with plausible values, sections as tables.
fn point() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    let section = |keys: &'static [&'static str]| {
        proptest::collection::btree_map(
            prop_oneof![4 => proptest::sample::select(keys).prop_map(str::to_owned), 1 => field_name()],
            value(),
            0..3,
        )
        .prop_map(|m| json!(m))
    };
    let field = prop_oneof![
        value().prop_map(|v| ("max_visits".to_owned(), v)),
        value().prop_map(|v| ("max_concurrency".to_owned(), v)),
        value().prop_map(|v| ("max_exceptions".to_owned(), v)),
        value().prop_map(|v| ("downgrade_percentage".to_owned(), v)),
        value().prop_map(|v| ("call_timeout".to_owned(), v)),
        value().prop_map(|v| ("shadow".to_owned(), v)),
        section(&["rate", "min_visits"]).prop_map(|v| ("exception_rate".to_owned(), v)),
        section(&["threshold", "max_count"]).prop_map(|v| ("timeouts".to_owned(), v)),
        section(&["rate", "capacity"]).prop_map(|v| ("token_bucket".to_owned(), v)),
        section(&["duration", "retry_interval"]).prop_map(|v| ("delay".to_owned(), v)),
        section(&["buckets", "bucket_width"]).prop_map(|v| ("window".to_owned(), v)),
        section(&[
            "algorithm",
            "k",
            "window",
            "slow_call",
            "failure_rate",
            "open_wait"
        ])
        .prop_map(|v| ("breaker".to_owned(), v)),
        section(&[
            "algorithm",
            "max_limit",
            "sample_window",
            "window",
            "cpu_threshold"
        ])
        .prop_map(|v| ("adaptive".to_owned(), v)),
        section(&["attempts", "base", "multiplier", "max", "jitter", "budget"])
            .prop_map(|v| ("retry".to_owned(), v)),
        section(&[
            "limit",
            "period",
            "burst",
            "max_concurrency",
            "max_keys",
            "overrides"
        ])
        .prop_map(|v| ("keys".to_owned(), v)),
        (field_name(), value()),
    ];
    proptest::collection::vec(field, 0..6)
        .prop_map(|fields| json!(fields.into_iter().collect::<serde_json::Map<_, _>>()))
}

/// A random valid policy: every rule present or not, values anywhere in range.
fn valid_policy() -> impl Strategy<Value = Policy> {
    use proptest::option::of;
    use std::time::Duration;
    let ms = |max: u64| (1..max).prop_map(Duration::from_millis);
    (
        (
            of(0..10_000u64),
            of(0..1_000u64),
            of(0..1_000u64),
            of((0.0..=1.0f64, 0..100u64)),
            of((ms(10_000), 0..100u64)),
        ),
        (
            of((0.0..1e6f64, 1..1_000_000u64)),
            0..=100u8,
            of((ms(60_000), of(1..1_000u64))),
            (
                1..=3_600u64,
                prop_oneof![ms(10_000), (1..1_000_000u64).prop_map(Duration::from_nanos)],
            ),
            any::<bool>(),
            of(ms(86_400_000)),
        ),
        of(valid_keys()),
    )
        .prop_filter_map(
            "the policy must build",
            |(
                (visits, conc, exc, rate, timeouts),
                (bucket, pct, delay, window, shadow, call_timeout),
                keys,
            )| {
                let mut b = Policy::builder().downgrade_percentage(pct).shadow(shadow);
                if let Some(k) = keys {
                    b = b.keys(k);
                }
                if let Some(d) = call_timeout {
                    b = b.call_timeout(d);
                }
                b = b.window(window.0, window.1);
                if let Some(v) = visits {
                    b = b.max_visits(v);
                }
                if let Some(v) = conc {
                    b = b.max_concurrency(v);
                }
                if let Some(v) = exc {
                    b = b.max_exceptions(v);
                }
                if let Some((r, min)) = rate {
                    b = b.exception_rate(r, min);
                }
                if let Some((t, n)) = timeouts {
                    b = b.timeouts(t, n);
                }
                if let Some((r, c)) = bucket {
                    b = b.token_bucket(r, c);
                }
                if let Some((d, retry)) = delay {
                    // A retry interval no longer than the delay.
                    let retry = retry.map(|r| d.min(Duration::from_millis(r)));
                    b = b.delay(d, retry);
                }
                b.build().ok()
            },
        )
}

/// A random valid `keys` section: every field present or not, overrides in both
/// forms (some of which the section's rule makes invalid, filtered out).
fn valid_keys() -> impl Strategy<Value = KeyPolicy> {
    use proptest::option::of;
    use std::time::Duration;
    let over = prop_oneof![
        (0..1_000_000u64).prop_map(|limit| KeyOverride::builder().limit(limit).build()),
        (of(0..1_000_000u64), of(1..1_000_000u64), of(0..1_000u64)).prop_map(
            |(limit, burst, max_concurrency)| {
                let mut o = KeyOverride::builder();
                if let Some(l) = limit {
                    o = o.limit(l);
                }
                if let Some(b) = burst {
                    o = o.burst(b);
                }
                if let Some(m) = max_concurrency {
                    o = o.max_concurrency(m);
                }
                o.build()
            }
        ),
    ];
    (
        of((0..1_000_000u64, 1..86_400_000u64)),
        of(1..1_000_000u64),
        of(0..1_000u64),
        of(16..=(1u64 << 20)),
        proptest::collection::btree_map("[a-z0-9:-]{1,8}", over, 0..4),
    )
        .prop_filter_map(
            "the keys section must build",
            |(limit, burst, conc, max_keys, overrides)| {
                let mut b = KeyPolicy::builder();
                if let Some((l, ms)) = limit {
                    b = b.limit(l, Duration::from_millis(ms));
                }
                if let Some(n) = burst {
                    b = b.burst(n);
                }
                if let Some(n) = conc {
                    b = b.max_concurrency(n);
                }
                if let Some(n) = max_keys {
                    b = b.max_keys(n);
                }
                for (value, o) in overrides {
                    b = b.override_rule(value, o);
                }
                b.build().ok()
            },
        )
}

/// A random valid retry section, or none.
fn valid_retry() -> impl Strategy<Value = Option<RetryPolicy>> {
    use resilience_runtime::retry::{Backoff, BudgetConfig, Retry};
    use std::time::Duration;
    let budget = (0.0..=1000.0f64, 0..=1_000_000u64, 1..=3_600u64).prop_map(|(p, m, w)| {
        BudgetConfig::builder()
            .percent(p)
            .min_per_second(m)
            .window(Duration::from_secs(w))
            .build()
            .unwrap()
    });
    proptest::option::of(
        (
            1..=100u64,
            1..10_000u64,
            1.0..10.0f64,
            0..100_000u64,
            0.0..=1.0f64,
            proptest::option::of(budget),
        )
            .prop_map(|(attempts, base, multiplier, extra, jitter, budget)| {
                let base = Duration::from_millis(base);
                let backoff =
                    Backoff::exponential(base, multiplier, base + Duration::from_millis(extra))
                        .with_jitter(jitter);
                let retry = Retry::builder(attempts).backoff(backoff).build().unwrap();
                let policy = RetryPolicy::builder(retry);
                match budget {
                    Some(b) => policy.budget(b),
                    None => policy,
                }
                .build()
                .unwrap()
            }),
    )
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn random_valid_policies_round_trip_and_apply(
        // Few distinct names: the registry keeps every point it ever saw, and each case
        // compares all of them, so an open-ended name space would make the run quadratic.
        policies in proptest::collection::btree_map(
            "[a-c]{1,2}(\\.[a-c])?",
            (valid_policy(), valid_retry()),
            0..5,
        ),
    ) {
        let mut file = PolicyFile::default();
        for (name, (policy, retry)) in &policies {
            let mut config = PointConfig::builder().policy(policy.clone()).build();
            config.retry = *retry;
            file.points.insert(name.clone(), config);
        }
        for format in [Format::Toml, Format::Json] {
            let text = file.to_text(format).unwrap();
            prop_assert_eq!(&PolicyFile::parse(&text, format).unwrap(), &file, "{}", text);
        }
        let r = shared(4);
        check_load(r, &file.to_text(Format::Toml).unwrap(), Format::Toml)?;
    }
}

/// A point as the serialiser writes a valid policy.
fn valid_point() -> impl Strategy<Value = serde_json::Value> {
    valid_policy()
        .prop_map(|p| serde_json::to_value(PointConfig::builder().policy(p).build()).unwrap())
}

fn document() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    let name = prop_oneof![
        Just("order.create".to_owned()),
        Just("search".to_owned()),
        // Never "api.only": it stands for points no file mentions.
        // A small name space, for the reason given at `random_valid_policies_...`.
        "[a-c.]{1,3}",
        Just(" ".to_owned()),
    ];
    (
        proptest::option::of(
            prop_oneof![3 => any::<bool>().prop_map(serde_json::Value::from), 1 => value()],
        ),
        proptest::collection::btree_map(name, prop_oneof![2 => valid_point(), 1 => point()], 0..4),
        prop_oneof![3 => Just(None), 1 => proptest::option::of((field_name(), value()))],
    )
        .prop_map(|(strict, points, extra)| {
            let mut doc = serde_json::Map::new();
            if let Some(strict) = strict {
                doc.insert("strict".into(), strict);
            }
            doc.insert("points".into(), json!(points));
            if let Some((k, v)) = extra {
                doc.insert(k, v);
            }
            serde_json::Value::Object(doc)
        })
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn structured_random_documents_load_all_or_nothing(doc in document()) {
        let r = shared(3);
        let json = serde_json::to_string_pretty(&doc).unwrap();
        check_load(r, &json, Format::Json)?;
        // The same document as TOML (when TOML can express it: no nulls, and
        // tables after values, which the serialiser arranges) must get the same verdict.
        if let Ok(toml_text) = toml::to_string(&doc) {
            check_load(r, &toml_text, Format::Toml)?;
            let from_json = PolicyFile::parse(&json, Format::Json);
            let from_toml = PolicyFile::parse(&toml_text, Format::Toml);
            prop_assert_eq!(from_json.is_ok(), from_toml.is_ok(), "{}\n{}", json, toml_text);
            if let (Ok(a), Ok(b)) = (&from_json, &from_toml) {
                prop_assert_eq!(a, b);
                // An accepted document survives a round trip through both formats.
                for format in [Format::Toml, Format::Json] {
                    let text = a.to_text(format).unwrap();
                    prop_assert_eq!(&PolicyFile::parse(&text, format).unwrap(), a);
                }
            }
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let r = new_registry();
    let before = snapshot(r);
    for depth in [64, 1_000, 100_000] {
        let toml_text = format!("x = {}{}", "[".repeat(depth), "]".repeat(depth));
        let json = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let inline = format!("x = {}1{}", "{a = ".repeat(depth), "}".repeat(depth));
        assert!(r.load_policies_str(&toml_text, Format::Toml).is_err());
        assert!(r.load_policies_str(&json, Format::Json).is_err());
        assert!(r.load_policies_str(&inline, Format::Toml).is_err());
    }
    assert_eq!(snapshot(r), before);
}

/// The structured generator must produce accepted documents too, or the all-or-nothing
/// checks above would only ever see rejections.
#[test]
fn structured_documents_are_often_valid() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = document();
    let (mut accepted, mut points_applied, total) = (0, 0, 1_000);
    for _ in 0..total {
        let doc = strategy.new_tree(&mut runner).unwrap().current();
        if let Ok(file) = PolicyFile::parse(&doc.to_string(), Format::Json) {
            accepted += 1;
            points_applied += file.points.len();
        }
    }
    println!("{accepted} of {total} random documents accepted, {points_applied} points");
    assert!(
        accepted >= total / 10,
        "only {accepted} of {total} accepted"
    );
    assert!(points_applied >= total / 10, "only {points_applied} points");
}

/// A random valid cluster-wide limit, on random Redis addresses (for parsing and
/// writing only).
#[cfg(feature = "redis")]
fn valid_cluster() -> impl Strategy<Value = resilience_runtime::ClusterLimit> {
    cluster_at(prop_oneof![
        Just("redis://127.0.0.1:6379/".to_owned()),
        "[a-z]{1,8}".prop_map(|h| format!("redis://{h}:6380/2")),
    ])
}

/// A random valid cluster-wide limit on a Redis at one of `url`'s values.
#[cfg(feature = "redis")]
fn cluster_at(
    url: impl Strategy<Value = String> + Clone,
) -> impl Strategy<Value = resilience_runtime::ClusterLimit> {
    use resilience_runtime::ClusterLimit;
    use std::time::Duration;
    let key = "[a-z:._-]{1,20}";
    prop_oneof![
        (
            url.clone(),
            key,
            1..100_000_000u64,
            1..1_000_000u64,
            1..1_000u64
        )
            .prop_map(|(url, key, ms, quota, batch)| ClusterLimit::Visits {
                url,
                key,
                period: Duration::from_millis(ms),
                quota,
                batch,
            }),
        (url, key, 1e-3..1e6f64, 1..1_000_000u64, 1..1_000u64).prop_map(
            |(url, key, rate, burst, batch)| ClusterLimit::TokenBucket {
                url,
                key,
                rate,
                burst,
                // A batch is taken from the bucket at once: at most `burst`.
                batch: batch.min(burst),
            }
        ),
    ]
}

#[cfg(feature = "redis")]
proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn random_cluster_limits_round_trip(
        points in proptest::collection::btree_map("[a-c]{1,2}", (valid_policy(), valid_cluster()), 1..4),
    ) {
        let mut file = PolicyFile::default();
        for (name, (policy, cluster)) in &points {
            let mut b = Policy::builder().cluster(cluster.clone());
            if let Some(v) = policy.max_visits() {
                b = b.max_visits(v);
            }
            file.points.insert(name.clone(), PointConfig::builder().policy(b.build().unwrap()).build());
        }
        for format in [Format::Toml, Format::Json] {
            let text = file.to_text(format).unwrap();
            prop_assert_eq!(&PolicyFile::parse(&text, format).unwrap(), &file, "{}", text);
        }
    }
}

#[cfg(feature = "redis")]
#[path = "support/redis_server.rs"]
mod redis_server;

/// Cluster limits in files are applied against the real Redis: a valid file starts one
/// lease per point, a file with one bad limit applies nothing and starts none, and the
/// leases of removed limits stop once their grace has passed.
#[cfg(feature = "redis")]
#[test]
fn cluster_limits_in_files_apply_all_or_nothing_and_stop_when_removed() {
    use proptest::test_runner::TestRunner;
    use resilience_runtime::ClusterLimit;
    use std::time::Duration;

    let (manual, r, prefix) = redis_server::manual_registry("fuzz");
    let url = redis_server::shared_url();
    let points = proptest::collection::btree_map(
        "[a-c]{1,2}",
        (
            valid_policy(),
            cluster_at(Just(url)).prop_map(move |mut c| {
                match &mut c {
                    ClusterLimit::Visits { key, .. } | ClusterLimit::TokenBucket { key, .. } => {
                        *key = format!("{prefix}:{key}")
                    }
                    _ => unreachable!("a new kind of cluster limit: prefix its key too"),
                }
                c
            }),
        ),
        1..4,
    );
    let mut runner = TestRunner::new(config(24));
    runner
        .run(
            &(points, any::<bool>(), 0..3usize),
            |(points, broken, which)| {
                #[cfg(target_os = "linux")]
                prop_assert_eq!(
                    redis_server::lease_threads(),
                    0,
                    "a case starts with no lease"
                );
                let mut file = PolicyFile::default();
                for (name, (policy, cluster)) in &points {
                    let mut b = Policy::builder().cluster(cluster.clone());
                    if let Some(v) = policy.max_visits() {
                        b = b.max_visits(v);
                    }
                    file.points.insert(
                        name.clone(),
                        PointConfig::builder().policy(b.build().unwrap()).build(),
                    );
                }
                let mut doc: serde_json::Value =
                    serde_json::from_str(&file.to_text(Format::Json).unwrap()).unwrap();
                let bad = points.keys().nth(which % points.len()).unwrap().clone();
                if broken {
                    // A limit the policy checks refuse, in one point only.
                    let cluster = &mut doc["points"][bad.as_str()]["cluster"];
                    match cluster["algorithm"].as_str() {
                        Some("visits") => cluster["quota"] = 0.into(),
                        _ => cluster["burst"] = 0.into(),
                    }
                }
                let before = snapshot(r);
                match r.load_policies_str(&doc.to_string(), Format::Json) {
                    Err(e) => {
                        prop_assert!(broken, "a valid file was refused: {}", e);
                        prop_assert!(
                            e.to_string()
                                .contains(&format!("point `{bad}`, field `cluster.")),
                            "{}",
                            e
                        );
                        prop_assert_eq!(snapshot(r), before);
                        #[cfg(target_os = "linux")]
                        prop_assert_eq!(
                            redis_server::lease_threads(),
                            0,
                            "a refused file started a lease"
                        );
                    }
                    Ok(_) => {
                        prop_assert!(!broken, "a file with a bad limit was applied");
                        for (name, config) in &file.points {
                            let policy = r.policy(name).unwrap().unwrap();
                            prop_assert_eq!(policy.cluster(), config.policy.cluster());
                            // Calls are admitted or downgraded, never anything worse.
                            let point = r.point(name).unwrap();
                            for _ in 0..3 {
                                match point.enter() {
                                    Ok(permit) => permit.finish(false),
                                    Err(d) => prop_assert_eq!(d.point(), name.as_str()),
                                }
                            }
                        }
                        #[cfg(target_os = "linux")]
                        prop_assert_eq!(
                            redis_server::lease_threads(),
                            points.len(),
                            "one lease per point"
                        );
                    }
                }
                // Remove the limits; a change after their grace hands their leases to the chore.
                for name in points.keys() {
                    r.clear_layer(name, Source::file(INLINE_SOURCE)).unwrap();
                }
                manual.advance(Duration::from_secs(11));
                for name in points.keys() {
                    r.set_policy(name, Policy::observe()).unwrap();
                    r.clear_policy(name).unwrap();
                }
                // The change after the grace has the chore stop them, on the timing
                // wheel's thread (within a tick or two).
                #[cfg(target_os = "linux")]
                redis_server::wait_for(
                    "removed limits left leases running",
                    Duration::from_secs(2),
                    || redis_server::lease_threads() == 0,
                );
                Ok(())
            },
        )
        .unwrap();
}
