//! The policy editors in real Chromium: the point form round-trips every section of
//! the policy-file format (random policies, one random field edited, the stored diff
//! names exactly that field), the raw point editor shows the runtime's problems at
//! their line and field and stores nothing, and the raw app editor saves the whole
//! policy in TOML and in JSON. Every check reads the DOM or the stored result.

use super::*;
use resilience_runtime::config::{Format, PolicyFile};

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

/// xorshift64*: a small seeded generator, so a failing case can be replayed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// `n / 10` for `n` in `lo..=hi`: decimals that print as typed.
    fn tenths(&mut self, lo: u64, hi: u64) -> Value {
        json!(self.range(lo, hi) as f64 / 10.0)
    }

    fn hundredths(&mut self, lo: u64, hi: u64) -> Value {
        json!(self.range(lo, hi) as f64 / 100.0)
    }

    fn int(&mut self, lo: u64, hi: u64) -> Value {
        json!(self.range(lo, hi))
    }

    /// Whole seconds (below a minute, so the runtime writes them the same way).
    fn secs(&mut self, lo: u64, hi: u64) -> Value {
        json!(format!("{}s", self.range(lo, hi.min(59))))
    }

    /// Milliseconds below a second.
    fn millis(&mut self, lo: u64, hi: u64) -> Value {
        json!(format!("{}ms", self.range(lo, hi.min(999))))
    }
}

/// The plain fields of a point's table, as the form names them.
const PLAIN_FIELDS: &[&str] = &[
    "max_visits",
    "max_concurrency",
    "max_exceptions",
    "downgrade_percentage",
    "call_timeout",
    "queue.max_waiting",
    "queue.max_wait",
    "queue.order",
    "shadow",
    "exception_rate.rate",
    "exception_rate.min_visits",
    "timeouts.threshold",
    "timeouts.max_count",
    "token_bucket.rate",
    "token_bucket.capacity",
    "token_bucket.max_wait",
    "warm_up.period",
    "warm_up.cold_factor",
    "delay.duration",
    "delay.retry_interval",
    "window.buckets",
    "window.bucket_width",
    "retry.attempts",
    "retry.base",
    "retry.multiplier",
    "retry.max",
    "retry.jitter",
    "retry.budget.percent",
    "retry.budget.min_per_second",
    "retry.budget.window",
    "keys.limit",
    "keys.period",
    "keys.burst",
    "keys.max_concurrency",
    "keys.max_wait",
    "keys.max_keys",
];

/// The fields of each algorithm of the sections that choose one.
fn algorithm_fields(section: &str, algorithm: &str) -> &'static [&'static str] {
    match (section, algorithm) {
        ("breaker", "sre") => &[
            "k",
            "protection",
            "window",
            "buckets",
            "force_pass_interval",
            "slow_call",
            "cancellations_are_failures",
        ],
        ("breaker", "classic") => &[
            "failure_rate",
            "slow_call_rate",
            "slow_call_duration",
            "minimum_calls",
            "consecutive_failures",
            "window",
            "buckets",
            "half_open_probes",
            "open_wait.base",
            "open_wait.multiplier",
            "open_wait.max",
            "open_wait.jitter",
            "cancellations_are_failures",
            "quorum.open_at",
            "quorum.action",
        ],
        ("adaptive", "gradient") => &[
            "initial_limit",
            "min_limit",
            "max_limit",
            "smoothing",
            "rtt_tolerance",
            "queue_size",
            "long_window",
            "sample_window",
            "min_samples",
            "critical_reserve",
        ],
        ("adaptive", "shedder") => &[
            "window",
            "buckets",
            "cpu_threshold",
            "cool_off",
            "default_min_rt",
            "flying_beta",
            "min_overload_factor",
        ],
        ("cluster", "visits") => &["url", "key", "period", "quota", "batch"],
        ("cluster", "token_bucket") => &["url", "key", "rate", "burst", "batch"],
        _ => &[],
    }
}

/// A valid value of a field (`algorithm` empty for plain fields). Combinations are
/// kept valid by the ranges: `retry_interval` (ms) never exceeds `duration` (s), nor
/// `retry.base` (ms) `retry.max` (s),
/// `min_limit < initial_limit < max_limit`, `open_wait.base < open_wait.max`, a
/// token bucket's `batch` below its `burst`.
fn value_of(rng: &mut Rng, section: &str, algorithm: &str, field: &str) -> Value {
    match (section, algorithm, field) {
        ("", _, "max_visits") => rng.int(0, 100_000),
        ("", _, "max_concurrency") => rng.int(1, 4096),
        ("", _, "max_exceptions") => rng.int(0, 1000),
        ("", _, "downgrade_percentage") => rng.int(0, 99),
        ("", _, "call_timeout") => rng.millis(1, 999),
        ("", _, "queue.max_waiting") => rng.int(1, 1_000_000),
        ("", _, "queue.max_wait") => rng.millis(1, 999),
        // The default, "oldest_first", is not written back: only the other is stored.
        ("", _, "queue.order") => json!("newest_first"),
        ("", _, "shadow") => json!(rng.chance(50)),
        ("", _, "exception_rate.rate") => rng.hundredths(0, 100),
        ("", _, "exception_rate.min_visits") => rng.int(1, 500),
        ("", _, "timeouts.threshold") => rng.millis(1, 999),
        ("", _, "timeouts.max_count") => rng.int(0, 100),
        ("", _, "token_bucket.rate") => rng.tenths(1, 100_000),
        ("", _, "token_bucket.capacity") => rng.int(1, 100_000),
        ("", _, "token_bucket.max_wait") => rng.millis(1, 999),
        ("", _, "warm_up.period") => rng.secs(1, 59),
        ("", _, "warm_up.cold_factor") => rng.tenths(11, 1000),
        ("", _, "delay.duration") => rng.secs(2, 59),
        ("", _, "delay.retry_interval") => rng.millis(1, 999),
        ("", _, "window.buckets") => rng.int(1, 3600),
        ("", _, "window.bucket_width") => rng.millis(1, 999),
        ("", _, "retry.attempts") => rng.int(1, 100),
        ("", _, "retry.base") => rng.millis(1, 999),
        ("", _, "retry.multiplier") => rng.tenths(10, 40),
        ("", _, "retry.max") => rng.secs(1, 59),
        ("", _, "retry.jitter") => rng.hundredths(0, 100),
        ("", _, "retry.budget.percent") => rng.tenths(0, 10_000),
        ("", _, "retry.budget.min_per_second") => rng.int(0, 1000),
        ("", _, "retry.budget.window") => rng.secs(1, 59),
        ("", _, "keys.limit") => rng.int(0, 100_000),
        ("", _, "keys.period") => rng.secs(1, 59),
        ("", _, "keys.burst") => rng.int(1, 100_000),
        ("", _, "keys.max_concurrency") => rng.int(0, 1000),
        ("", _, "keys.max_wait") => rng.secs(1, 59),
        ("", _, "keys.max_keys") => rng.int(16, 100_000),
        // `false` is the default, which the runtime leaves out.
        ("breaker", _, "cancellations_are_failures") => json!(true),
        ("breaker", "sre", "k") => rng.tenths(11, 50),
        ("breaker", "sre", "protection") => rng.int(0, 20),
        ("breaker", _, "window") => rng.secs(1, 59),
        ("breaker", _, "buckets") => rng.int(1, 100),
        ("breaker", "sre", "force_pass_interval") => rng.millis(1, 999),
        ("breaker", "sre", "slow_call") => rng.millis(1, 999),
        ("breaker", "classic", "failure_rate" | "slow_call_rate") => rng.hundredths(1, 100),
        ("breaker", "classic", "slow_call_duration") => rng.millis(1, 999),
        ("breaker", "classic", "minimum_calls") => rng.int(1, 100),
        ("breaker", "classic", "consecutive_failures" | "half_open_probes") => rng.int(1, 20),
        ("breaker", "classic", "open_wait.base") => rng.secs(1, 9),
        ("breaker", "classic", "open_wait.multiplier") => rng.tenths(10, 40),
        ("breaker", "classic", "open_wait.max") => rng.secs(10, 59),
        ("breaker", "classic", "open_wait.jitter") => rng.hundredths(0, 100),
        ("breaker", "classic", "quorum.open_at") => rng.int(2, 9),
        ("breaker", "classic", "quorum.action") => {
            json!(["open", "half_open"][rng.range(0, 1) as usize])
        }
        ("adaptive", "gradient", "initial_limit") => rng.int(10, 99),
        ("adaptive", "gradient", "min_limit") => rng.int(1, 9),
        ("adaptive", "gradient", "max_limit") => rng.int(100, 5000),
        ("adaptive", "gradient", "smoothing") => rng.hundredths(1, 100),
        ("adaptive", "gradient", "rtt_tolerance") => rng.tenths(10, 30),
        ("adaptive", "gradient", "queue_size") => rng.tenths(0, 100),
        ("adaptive", "gradient", "long_window") => rng.int(1, 1000),
        ("adaptive", "gradient", "sample_window") => rng.millis(1, 999),
        ("adaptive", "gradient", "min_samples") => rng.int(1, 50),
        ("adaptive", "gradient", "critical_reserve") => rng.hundredths(0, 99),
        ("adaptive", "shedder", "window") => rng.secs(1, 59),
        ("adaptive", "shedder", "buckets") => rng.int(1, 100),
        ("adaptive", "shedder", "cpu_threshold") => rng.int(0, 999),
        ("adaptive", "shedder", "cool_off" | "default_min_rt") => rng.millis(1, 999),
        ("adaptive", "shedder", "flying_beta") => rng.hundredths(0, 99),
        ("adaptive", "shedder", "min_overload_factor") => rng.hundredths(1, 100),
        ("cluster", _, "url") => json!(format!("redis://cache-{}:6379/", rng.range(1, 9))),
        ("cluster", _, "key") => json!(format!("limits:{}", rng.range(1, 999))),
        ("cluster", "visits", "period") => rng.secs(1, 59),
        ("cluster", "visits", "quota") => rng.int(1, 10_000),
        ("cluster", "visits", "batch") => rng.int(1, 40),
        ("cluster", "token_bucket", "rate") => rng.tenths(1, 10_000),
        ("cluster", "token_bucket", "burst") => rng.int(50, 500),
        ("cluster", "token_bucket", "batch") => rng.int(1, 49),
        other => panic!("no generator for {other:?}"),
    }
}

/// Fields that a section cannot go without.
fn required(section: &str, field: &str) -> bool {
    matches!(
        (section, field),
        (
            "",
            "exception_rate.rate" | "timeouts.threshold" | "timeouts.max_count"
        ) | (
            "",
            "token_bucket.rate" | "token_bucket.capacity" | "delay.duration" | "retry.attempts"
        ) | (
            "",
            "queue.max_waiting" | "queue.max_wait" | "warm_up.period"
        ) | (
            "cluster",
            "url" | "key" | "period" | "quota" | "rate" | "burst"
        )
    )
}

fn set_path(obj: &mut Value, path: &str, value: Option<Value>) {
    let keys: Vec<&str> = path.split('.').collect();
    let mut target = obj;
    for k in &keys[..keys.len() - 1] {
        if !target.get(*k).is_some_and(Value::is_object) {
            if value.is_none() {
                return;
            }
            target[*k] = json!({});
        }
        target = &mut target[*k];
    }
    let last = keys[keys.len() - 1];
    match value {
        Some(v) => target[last] = v,
        None => {
            if let Some(m) = target.as_object_mut() {
                m.remove(last);
            }
        }
    }
}

/// Removes tables left empty by a removal (not the point's own table).
fn prune(settings: &mut Value) {
    fn walk(v: &mut Value) {
        if let Some(m) = v.as_object_mut() {
            for child in m.values_mut() {
                walk(child);
            }
            m.retain(|_, c| !c.as_object().is_some_and(|o| o.is_empty()));
        }
    }
    walk(settings);
}

/// A random point covering sections in turn: case `i` chooses the breaker, adaptive
/// and cluster algorithms (or none, or "off") and the shadow flag round-robin, so
/// that every one of them appears in any four consecutive cases; fields at random.
fn random_point(rng: &mut Rng, i: usize) -> Value {
    let mut p = json!({});
    for field in PLAIN_FIELDS {
        if *field == "shadow" {
            continue;
        }
        let section_on = match field.split_once('.') {
            None => rng.chance(50),
            Some((section, _)) => p.get(section).is_some() || rng.chance(40),
        };
        if section_on && (required("", field) || rng.chance(60)) {
            let v = value_of(rng, "", "", field);
            set_path(&mut p, field, Some(v));
        }
    }
    // A section with an optional field only needs its required ones too.
    for (section, needs) in [
        ("exception_rate", &["rate"][..]),
        ("timeouts", &["threshold", "max_count"]),
        ("token_bucket", &["rate", "capacity"]),
        ("delay", &["duration"]),
        ("retry", &["attempts"]),
        ("queue", &["max_waiting", "max_wait"]),
        ("warm_up", &["period"]),
        // A burst is of the limit's calls.
        ("keys", &["limit"]),
    ] {
        if p.get(section).is_some() {
            for f in needs {
                let path = format!("{section}.{f}");
                if p[section].get(*f).is_none() {
                    let v = value_of(rng, "", "", &path);
                    set_path(&mut p, &path, Some(v));
                }
            }
        }
    }
    // A queue needs the concurrency rule.
    if p.get("queue").is_some() && p.get("max_concurrency").is_none() {
        let v = value_of(rng, "", "", "max_concurrency");
        set_path(&mut p, "max_concurrency", Some(v));
    }
    // A warm-up needs the token bucket.
    if p.get("warm_up").is_some() && p.get("token_bucket").is_none() {
        for path in ["token_bucket.rate", "token_bucket.capacity"] {
            let v = value_of(rng, "", "", path);
            set_path(&mut p, path, Some(v));
        }
    }
    // Overrides, which the form shows in rows of their own: an edit of another field
    // keeps them as they are (values with dots and quotes too).
    if p.get("keys").is_some() && rng.chance(70) {
        let mut overrides = serde_json::Map::new();
        for k in 0..rng.range(1, 3) {
            let value = match k {
                0 => format!("vip-{}", rng.range(1, 99)),
                1 => format!("tenant.{}\"q\"", rng.range(1, 99)),
                _ => format!("{}", rng.range(100, 999)),
            };
            let entry = match rng.range(0, 2) {
                0 => rng.int(0, 100_000),
                1 => json!({"max_concurrency": rng.range(0, 100)}),
                _ => json!({"limit": rng.range(1, 1000), "burst": rng.range(1, 1000),
                            "max_concurrency": rng.range(0, 100)}),
            };
            overrides.insert(value, entry);
        }
        p["keys"]["overrides"] = Value::Object(overrides);
    }
    match i % 3 {
        0 => {}
        1 => p["shadow"] = json!(true),
        _ => p["shadow"] = json!(false),
    }
    let choices = [
        ("breaker", ["", "sre", "classic", "disabled"], i),
        ("adaptive", ["", "off", "gradient", "shedder"], i + 1),
        ("cluster", ["", "off", "visits", "token_bucket"], i + 2),
    ];
    for (section, algorithms, k) in choices {
        match algorithms[k % 4] {
            "" => {}
            "off" => p[section] = json!("off"),
            algorithm => {
                let mut s = json!({ "algorithm": algorithm });
                for field in algorithm_fields(section, algorithm) {
                    if required(section, field) || rng.chance(60) {
                        let v = value_of(rng, section, algorithm, field);
                        set_path(&mut s, field, Some(v));
                    }
                }
                // A quorum needs its `open_at`.
                if s.get("quorum").is_some() && s["quorum"].get("open_at").is_none() {
                    let v = value_of(rng, section, algorithm, "quorum.open_at");
                    set_path(&mut s, "quorum.open_at", Some(v));
                }
                p[section] = s;
            }
        }
    }
    p
}

/// The document as the runtime writes it back (what the server stores), or the
/// runtime's problems.
fn canonical(doc: &Value) -> Result<Value, String> {
    let file = PolicyFile::parse_with_every_feature(&doc.to_string(), Format::Json)
        .map_err(|e| e.to_string())?;
    let text = file.to_text(Format::Json).map_err(|e| e.to_string())?;
    Ok(serde_json::from_str(&text).unwrap())
}

/// One field of the point edited: set to `Some` value, or removed.
#[derive(Debug, Clone)]
struct Edit {
    path: String,
    value: Option<Value>,
}

/// The fields the form shows for these settings: every plain field, and the fields
/// of each chosen algorithm.
fn form_fields(settings: &Value) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = PLAIN_FIELDS
        .iter()
        .map(|f| ((*f).to_owned(), String::new(), String::new()))
        .collect();
    for section in ["breaker", "adaptive", "cluster"] {
        if let Some(algorithm) = settings
            .get(section)
            .and_then(|s| s.get("algorithm"))
            .and_then(Value::as_str)
        {
            for f in algorithm_fields(section, algorithm) {
                out.push((
                    format!("{section}.{f}"),
                    section.to_owned(),
                    algorithm.to_owned(),
                ));
            }
        }
    }
    out
}

/// A random edit of one field whose result is valid and is stored exactly as edited
/// (so the expected document is the original with that one field changed).
fn random_edit(rng: &mut Rng, doc: &Value, point: &str) -> (Edit, Value) {
    let settings = &doc["points"][point];
    let fields = form_fields(settings);
    // A section first, then one of its fields: edits spread over the sections.
    let group = |path: &str| match path.split_once('.') {
        Some((section, _)) => section.to_owned(),
        None if path == "shadow" => "shadow".to_owned(),
        None => "rules".to_owned(),
    };
    let mut all: Vec<String> = fields.iter().map(|(p, ..)| group(p)).collect();
    all.dedup();
    // Mostly the sections the point has (changing or removing a field), sometimes
    // any (adding one).
    let present: Vec<String> = all
        .iter()
        .filter(|g| match g.as_str() {
            "rules" => ["max_visits", "max_concurrency", "max_exceptions"]
                .iter()
                .chain(&["downgrade_percentage", "call_timeout"])
                .any(|k| settings.get(*k).is_some()),
            g => settings.get(g).is_some(),
        })
        .cloned()
        .collect();
    for _ in 0..2000 {
        let groups = if present.is_empty() || rng.chance(20) {
            &all
        } else {
            &present
        };
        let chosen = &groups[rng.range(0, groups.len() as u64 - 1) as usize];
        let of_group: Vec<_> = fields
            .iter()
            .filter(|(p, ..)| &group(p) == chosen)
            .collect();
        let (path, section, algorithm) = of_group[rng.range(0, of_group.len() as u64 - 1) as usize];
        let inner = if section.is_empty() {
            path.as_str()
        } else {
            &path[section.len() + 1..]
        };
        let present = path
            .split('.')
            .try_fold(settings, |v, k| v.get(k))
            .is_some();
        let value = if present && rng.chance(30) {
            None
        } else {
            Some(value_of(rng, section, algorithm, inner))
        };
        let mut edited = doc.clone();
        let target = &mut edited["points"][point];
        set_path(target, path, value.clone());
        prune(target);
        if &edited == doc {
            continue;
        }
        if canonical(&edited).as_ref() == Ok(&edited) {
            return (
                Edit {
                    path: path.clone(),
                    value,
                },
                edited,
            );
        }
    }
    panic!("no valid edit of {settings}");
}

fn put_policy(addr: SocketAddr, base: u64, doc: &Value) -> u64 {
    let r = put_json(
        addr,
        POLICY,
        Some(ADMIN),
        &json!({"base_version": base, "author": "seed", "policy": doc}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["version"].as_u64().unwrap()
}

fn stored(addr: SocketAddr) -> (u64, Value) {
    let r = get(addr, POLICY, None).json();
    (r["version"].as_u64().unwrap(), r["policy"].clone())
}

fn history(addr: SocketAddr) -> Vec<Value> {
    get(addr, &format!("{POLICY}/versions"), None).json()["versions"]
        .as_array()
        .unwrap()
        .clone()
}

impl Browser {
    /// Waits until the form shows `version` as the stored one (after a save).
    fn saved(&self, version: u64) {
        self.wait(
            &format!("document.querySelector('#policy-version').dataset.version === '{version}'"),
            "the saved version",
        );
    }

    /// Reloads the page (the token stays in the tab's session storage).
    fn reload(&self) {
        self.cmd("POST", "/refresh", Some(&json!({})));
        self.wait(
            "document.body.dataset.state === 'ready'",
            "the page to load",
        );
    }

    /// Empties an input, as a person selecting its text and deleting it would.
    fn clear(&self, css: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/clear"), None);
    }

    /// Picks an option of a `<select>` by clicking it.
    fn choose(&self, select: &str, value: &str) {
        self.click(&format!("{select} option[value=\"{value}\"]"));
    }

    /// Opens a point's page and waits until the form shows version `version` of it.
    fn open_point(&self, point: &str, version: u64) {
        self.wait(
            &format!("document.querySelector('#policy-version').dataset.version === '{version}'"),
            "the stored version",
        );
        self.wait(
            &format!("document.querySelector('#points tr[data-point=\"{point}\"]')"),
            "the point's row",
        );
        self.click(&format!("#points tr[data-point=\"{point}\"]"));
        self.wait(
            &format!(
                "document.querySelector('#form-point').textContent === '{point}' && \
                 !document.querySelector('#f-max_visits').disabled"
            ),
            "the form of the point",
        );
    }

    fn text_of(&self, css: &str) -> String {
        let v = self.js(&format!(
            "const e = document.querySelector('{css}'); return e ? (e.value !== undefined && e.tagName !== 'LI' && e.tagName !== 'DIV' ? e.value : e.textContent) : null;"
        ));
        v.as_str()
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_owned()
    }
}

/// Fields whose input is a `<select>` (not set / true / false).
fn is_choice(path: &str) -> bool {
    path == "shadow" || path.ends_with(".cancellations_are_failures")
}

fn css_id(path: &str) -> String {
    format!("#f-{}", path.replace('.', "-"))
}

#[test]
fn the_form_edits_exactly_one_field_of_random_policies_of_every_section() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.wait(
        "document.body.dataset.state === 'ready'",
        "the page to load",
    );
    // RESILIENCE_EDITOR_SEED=N replays other cases.
    let seed = std::env::var("RESILIENCE_EDITOR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0015);
    eprintln!("seed {seed} (RESILIENCE_EDITOR_SEED)");
    let mut rng = Rng::new(seed);
    let mut version = 0;
    let mut seen = std::collections::BTreeSet::new();
    for case in 0..20 {
        let target = format!("case.{case}");
        let mut doc = json!({"points": {
            target.clone(): random_point(&mut rng, case),
            "bystander": random_point(&mut rng, case + 7),
        }});
        if case % 5 == 4 {
            doc["strict"] = json!(false);
        }
        let doc = canonical(&doc).unwrap_or_else(|e| panic!("case {case}: {e}\n{doc}"));
        for (name, s) in doc["points"][&target].as_object().unwrap() {
            let kind = s.get("algorithm").and_then(Value::as_str).or(s.as_str());
            seen.insert(format!(
                "{name}{}",
                kind.map(|k| format!(":{k}")).unwrap_or_default()
            ));
        }
        for path in NEWER_FIELDS {
            if path
                .split('.')
                .try_fold(&doc["points"][&target], |v, k| v.get(k))
                .is_some()
            {
                seen.insert(format!("has {path}"));
            }
        }
        version = put_policy(addr, version, &doc);
        let (edit, expected) = random_edit(&mut rng, &doc, &target);
        eprintln!("seed {seed} case {case}: {} -> {:?}", edit.path, edit.value);
        seen.insert(format!("edit {}", edit.path));

        browser.reload();
        browser.type_into("#author", "fuzz");
        browser.open_point(&target, version);
        // The form shows the stored settings.
        let settings = &doc["points"][&target];
        for (path, ..) in form_fields(settings) {
            let shown = browser.text_of(&css_id(&path));
            let stored = path.split('.').try_fold(settings, |v, k| v.get(k));
            let want = match stored {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => {
                    // As JavaScript prints a number: `2.0` is `2`.
                    let f = v.as_f64().unwrap_or(f64::NAN);
                    if v.is_boolean() {
                        v.to_string()
                    } else if f.fract() == 0.0 && f.abs() < 1e15 {
                        format!("{}", f as i64)
                    } else {
                        v.to_string()
                    }
                }
            };
            assert_eq!(
                shown, want,
                "seed {seed} case {case}: field {path} of {settings}"
            );
        }

        match (&edit.path[..], &edit.value) {
            (path, Some(v)) if is_choice(path) => browser.choose(&css_id(path), &v.to_string()),
            (path, None) if is_choice(path) => browser.choose(&css_id(path), ""),
            (path, None) => browser.clear(&css_id(path)),
            (path, Some(Value::String(s))) => browser.type_into(&css_id(path), s),
            (path, Some(v)) => browser.type_into(&css_id(path), &v.to_string()),
        }
        browser.click("#save");
        version += 1;
        browser.saved(version);
        assert!(
            browser
                .text_of("#form-message")
                .contains(&format!("version {version}")),
            "case {case}: {}",
            browser.text_of("#form-message")
        );
        let h = history(addr);
        assert_eq!(h[0]["version"], version);
        let diff: Vec<(Value, Value)> = h[0]["diff"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["point"].clone(), d["field"].clone()))
            .collect();
        assert_eq!(
            diff,
            [(json!(target), json!(edit.path))],
            "seed {seed} case {case}: {edit:?}: {}",
            h[0]["diff"]
        );
        let (v, now) = stored(addr);
        assert_eq!(v, version);
        assert_eq!(now, expected, "seed {seed} case {case}: {edit:?}");
    }
    // Every section and algorithm was in some case, and edits reached all sections.
    for want in [
        "max_visits",
        "shadow",
        "window",
        "timeouts",
        "retry",
        "queue",
        "token_bucket",
        "warm_up",
        "keys",
        "breaker:sre",
        "breaker:classic",
        "breaker:disabled",
        "adaptive:off",
        "adaptive:gradient",
        "adaptive:shedder",
        "cluster:off",
        "cluster:visits",
        "cluster:token_bucket",
    ] {
        assert!(seen.contains(want), "no case with {want}: {seen:?}");
    }
    for path in NEWER_FIELDS {
        assert!(
            seen.contains(&format!("has {path}")),
            "no case with {path}: {seen:?}"
        );
    }
    let edited: Vec<_> = seen.iter().filter(|s| s.starts_with("edit ")).collect();
    assert!(edited.len() >= 10, "{edited:?}");
}

/// The fields added with the runtime's token wait, warm-up and critical reserve: some
/// case of the random round trip has each (and the breaker's fleet quorum, the queue's
/// order).
const NEWER_FIELDS: [&str; 10] = [
    "token_bucket.max_wait",
    "warm_up.period",
    "warm_up.cold_factor",
    "adaptive.critical_reserve",
    "keys.limit",
    "keys.max_wait",
    "keys.overrides",
    "breaker.quorum.open_at",
    "breaker.quorum.action",
    "queue.order",
];

#[test]
fn the_form_switches_algorithms_and_turns_sections_off() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"order.create": {"max_visits": 5,
        "adaptive": {"algorithm": "gradient", "max_limit": 300},
        "breaker": {"algorithm": "classic", "failure_rate": 0.3,
                    "cancellations_are_failures": true}}}});
    let mut version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("order.create", version);
    assert_eq!(browser.text_of("#f-breaker-algorithm"), "classic");
    assert_eq!(browser.text_of("#f-breaker-failure_rate"), "0.3");
    assert_eq!(
        browser.text_of("#f-breaker-cancellations_are_failures"),
        "true"
    );
    // The fields of the other algorithm are hidden.
    assert_eq!(
        browser.js("return document.querySelector('#f-breaker-k').closest('.field').hidden;"),
        json!(true)
    );
    // classic -> sre with k, adaptive -> off, a cluster limit added.
    browser.choose("#f-breaker-algorithm", "sre");
    browser.wait(
        "!document.querySelector('#f-breaker-k').closest('.field').hidden",
        "the sre fields",
    );
    assert_eq!(
        browser.js("return document.querySelector('#f-breaker-buckets').placeholder;"),
        json!("40")
    );
    // The field both algorithms have stays as it was.
    assert_eq!(
        browser.js(
            "const i = document.querySelector('#f-breaker-cancellations_are_failures'); \
             return [i.closest('.field').hidden, i.value];"
        ),
        json!([false, "true"])
    );
    browser.type_into("#f-breaker-k", "2.5");
    browser.choose("#f-adaptive-algorithm", "off");
    browser.choose("#f-cluster-algorithm", "visits");
    browser.type_into("#f-cluster-url", "redis://127.0.0.1:6379/");
    browser.type_into("#f-cluster-key", "orders");
    browser.type_into("#f-cluster-period", "1s");
    // A missing quota: the runtime's message at the field, nothing stored.
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"cluster.quota\"]').textContent",
        "the quota's problem",
    );
    assert!(msg.as_str().unwrap().contains("required"), "{msg}");
    assert_eq!(stored(addr).0, version);
    browser.type_into("#f-cluster-quota", "100");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    assert_eq!(
        stored(addr).1,
        json!({"points": {"order.create": {"max_visits": 5, "adaptive": "off",
            "cluster": {"algorithm": "visits", "url": "redis://127.0.0.1:6379/", "key": "orders",
                        "period": "1s", "quota": 100},
            "breaker": {"algorithm": "sre", "k": 2.5, "cancellations_are_failures": true}}}})
    );
    // The form shows the new version; removing the breaker removes the section only.
    browser.wait(
        "document.querySelector('#f-breaker-algorithm').value === 'sre'",
        "the form to show the new version",
    );
    browser.choose("#f-breaker-algorithm", "");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let h = history(addr);
    let fields: Vec<_> = h[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        fields,
        [
            "breaker.algorithm",
            "breaker.cancellations_are_failures",
            "breaker.k"
        ]
    );
}

#[test]
fn the_raw_point_editor_shows_problems_at_their_line_and_stores_nothing() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {
        "order.create": {"max_visits": 5, "breaker": {"algorithm": "classic", "failure_rate": 0.3}},
        "order.refund": {"max_concurrency": 3}}});
    let version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("order.create", version);
    // The point's text, as the runtime writes it.
    let text = browser.wait(
        "document.querySelector('#raw-point-text').value",
        "the point's text",
    );
    let only_point = json!({"points": {"order.create": doc["points"]["order.create"]}});
    let written = PolicyFile::parse_with_every_feature(&only_point.to_string(), Format::Json)
        .unwrap()
        .to_text(Format::Toml)
        .unwrap();
    assert_eq!(text, json!(written));
    assert!(
        written.contains("[points.\"order.create\".breaker]"),
        "{written}"
    );

    // A field out of range, a misspelt field: each at its line and field.
    let broken = "[points.\"order.create\"]\nmax_visits = 5\nmax_visit = 6\n\n\
                  [points.\"order.create\".breaker]\nalgorithm = \"classic\"\nfailure_rate = 1.5\n";
    browser.type_into("#raw-point-text", broken);
    browser.click("#raw-point-save");
    browser.wait(
        "document.querySelectorAll('#raw-point-problems li').length === 2",
        "two problems",
    );
    let items = browser.js(
        "return [...document.querySelectorAll('#raw-point-problems li')].map(li => \
         [li.dataset.line, li.dataset.field, li.textContent]);",
    );
    let items = items.as_array().unwrap();
    let find = |field: &str| {
        items
            .iter()
            .find(|i| i[1] == field)
            .unwrap_or_else(|| panic!("no problem for {field}: {items:?}"))
            .clone()
    };
    let rate = find("breaker.failure_rate");
    assert_eq!(rate[0], "7", "{rate}");
    let shown = rate[2].as_str().unwrap();
    assert!(
        shown.starts_with(
            "line 7, column 1, point order.create, field breaker.failure_rate: must be"
        ),
        "{shown}"
    );
    let misspelt = find("max_visit");
    assert_eq!(misspelt[0], "3");
    assert!(misspelt[2]
        .as_str()
        .unwrap()
        .contains("did you mean `max_visits`"));
    assert!(browser.text_of("#raw-point-message").contains("not saved"));
    assert_eq!(stored(addr), (version, canonical(&doc).unwrap()));

    // A syntax error, through Check: its line and column from the parser.
    browser.type_into(
        "#raw-point-text",
        "[points.\"order.create\"]\nmax_visits = \n",
    );
    browser.click("#raw-point-check");
    let li = browser.wait(
        "document.querySelector('#raw-point-problems li[data-line=\"2\"]')?.textContent",
        "the syntax error",
    );
    assert!(
        li.as_str()
            .unwrap()
            .starts_with("line 2, column 14: TOML syntax error"),
        "{li}"
    );

    // Another point in the point's text is refused at its line.
    browser.type_into(
        "#raw-point-text",
        "[points.\"order.create\"]\nmax_visits = 6\n\n[points.\"order.refund\"]\nmax_visits = 1\n",
    );
    browser.click("#raw-point-save");
    let li = browser.wait(
        "document.querySelector('#raw-point-problems li[data-point=\"order.refund\"]')",
        "the other point's problem",
    );
    assert!(!li.is_null());
    assert_eq!(
        browser.js("return document.querySelector('#raw-point-problems li').dataset.line;"),
        json!("4")
    );

    // JSON, with the problem's line in the JSON text.
    browser.click("#raw-point-reload");
    browser.wait(
        "!document.querySelector('#raw-point-text').classList.contains('invalid') && document.querySelector('#raw-point-text').value.startsWith('[points')",
        "the text reloaded",
    );
    browser.choose("#raw-point-format", "json");
    browser.wait(
        "document.querySelector('#raw-point-text').value.startsWith('{')",
        "the JSON text",
    );
    let json_text = browser.text_of("#raw-point-text");
    assert_eq!(
        canonical(&serde_json::from_str::<Value>(&json_text).unwrap()),
        canonical(&only_point)
    );
    browser.type_into(
        "#raw-point-text",
        "{\"points\": {\"order.create\": {\n  \"max_visits\": 5,\n  \"breaker\": {\"algorithm\": \"sre\",\n    \"k\": 0.5}}}}",
    );
    browser.click("#raw-point-save");
    let li = browser.wait(
        "document.querySelector('#raw-point-problems li[data-field=\"breaker.k\"]')?.textContent",
        "the JSON problem",
    );
    assert!(
        li.as_str().unwrap().starts_with(
            "line 4, column 5, point order.create, field breaker.k: must be a finite number >= 1.1"
        ),
        "{li}"
    );
    assert_eq!(stored(addr), (version, canonical(&doc).unwrap()));
    assert_eq!(history(addr).len(), 1);

    // Fixed: only this point changes, and only the fields that changed.
    browser.type_into(
        "#raw-point-text",
        "{\"points\": {\"order.create\": {\n  \"max_visits\": 6,\n  \"breaker\": {\"algorithm\": \"classic\", \"failure_rate\": 0.3}}}}",
    );
    browser.click("#raw-point-save");
    browser.wait(
        "document.querySelector('#policy-version').dataset.version === '2'",
        "version 2",
    );
    assert!(browser
        .text_of("#raw-point-message")
        .contains("Saved as version 2"));
    let h = history(addr);
    assert_eq!(
        h[0]["diff"].as_array().unwrap().len(),
        1,
        "{}",
        h[0]["diff"]
    );
    assert_eq!(h[0]["diff"][0]["field"], "max_visits");
    let mut want = canonical(&doc).unwrap();
    want["points"]["order.create"]["max_visits"] = json!(6);
    assert_eq!(stored(addr), (2, want));
    // The form follows.
    browser.wait(
        "document.querySelector('#f-max_visits').value === '6'",
        "the form to show version 2",
    );
}

#[test]
fn the_raw_app_editor_saves_the_whole_policy_in_toml_and_json() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let version = put_policy(
        addr,
        0,
        &json!({"points": {"order.create": {"max_visits": 5}}}),
    );
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.wait(
        &format!("document.querySelector('#raw-app-text').dataset.version === '{version}'"),
        "the app's text",
    );
    assert_eq!(
        browser.text_of("#raw-app-text"),
        get(addr, POLICY, None).json()["toml"].as_str().unwrap()
    );

    // A broken top-level field: at its line, nothing stored.
    browser.type_into(
        "#raw-app-text",
        "strict = \"yes\"\n\n[points.\"order.create\"]\nmax_visits = 5\n",
    );
    browser.click("#raw-app-save");
    let li = browser.wait(
        "document.querySelector('#raw-app-problems li[data-field=\"strict\"]')?.textContent",
        "the problem of `strict`",
    );
    assert!(
        li.as_str()
            .unwrap()
            .starts_with("line 1, column 1, field strict: expected a boolean"),
        "{li}"
    );
    assert_eq!(stored(addr).0, version);

    // A whole new policy in TOML: every section.
    let toml_text = "[points.\"order.create\"]\n\
        max_visits = 100\n\
        shadow = false\n\
        timeouts = { threshold = \"250ms\", max_count = 5 }\n\
        delay = { duration = \"10s\", retry_interval = \"1s\" }\n\
        window = { buckets = 20, bucket_width = \"500ms\" }\n\
        adaptive = \"off\"\n\
        \n\
        [points.\"order.create\".breaker]\n\
        algorithm = \"classic\"\n\
        consecutive_failures = 3\n\
        open_wait = { base = \"1s\", multiplier = 2.0, max = \"30s\" }\n\
        \n\
        [points.\"order.refund\"]\n\
        token_bucket = { rate = 20.0, capacity = 40 }\n\
        adaptive = { algorithm = \"shedder\", cpu_threshold = 800 }\n\
        cluster = { algorithm = \"token_bucket\", url = \"redis://127.0.0.1:6379/\", key = \"refunds\", rate = 50.0, burst = 100 }\n";
    browser.type_into("#raw-app-text", toml_text);
    browser.click("#raw-app-save");
    browser.wait(
        "document.querySelector('#policy-version').dataset.version === '2'",
        "version 2",
    );
    let want = canonical(
        &serde_json::from_str::<Value>(
            &PolicyFile::parse_with_every_feature(toml_text, Format::Toml)
                .unwrap()
                .to_text(Format::Json)
                .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(stored(addr), (2, want.clone()));
    assert_eq!(
        want["points"]["order.create"]["breaker"]["open_wait"],
        json!({"base": "1s", "multiplier": 2.0, "max": "30s", "jitter": 0.0})
    );
    // The editor shows the stored text again, as the runtime writes it.
    browser.wait(
        "document.querySelector('#raw-app-text').dataset.version === '2'",
        "the text of version 2",
    );
    assert_eq!(
        browser.text_of("#raw-app-text"),
        get(addr, POLICY, None).json()["toml"].as_str().unwrap()
    );

    // In JSON: strict on, one point removed.
    browser.choose("#raw-app-format", "json");
    browser.wait(
        "document.querySelector('#raw-app-text').value.startsWith('{')",
        "the JSON text",
    );
    // (JavaScript writes `2.0` as `2`: compare what the runtime reads.)
    assert_eq!(
        canonical(&serde_json::from_str::<Value>(&browser.text_of("#raw-app-text")).unwrap()),
        Ok(want.clone())
    );
    let mut next = want.clone();
    next["strict"] = json!(true);
    next["points"]
        .as_object_mut()
        .unwrap()
        .remove("order.refund");
    browser.type_into(
        "#raw-app-text",
        &serde_json::to_string_pretty(&next).unwrap(),
    );
    browser.click("#raw-app-save");
    browser.wait(
        "document.querySelector('#policy-version').dataset.version === '3'",
        "version 3",
    );
    assert_eq!(canonical(&next).as_ref(), Ok(&next));
    assert_eq!(stored(addr), (3, next));
    let h = history(addr);
    let changes: Vec<_> = h[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["point"].clone(), d["field"].clone()))
        .collect();
    assert_eq!(
        changes,
        [
            (json!(null), json!("strict")),
            (json!("order.refund"), json!(null))
        ]
    );
    assert_eq!(h[0]["author"], "e2e");
}

/// The retry fields as the form names them, with what the E2E test types into them:
/// none of them a default (which the runtime would leave out).
const RETRY_ENTRIES: &[(&str, &str)] = &[
    ("retry.attempts", "4"),
    ("retry.base", "100ms"),
    ("retry.multiplier", "1.5"),
    ("retry.max", "3s"),
    ("retry.jitter", "0.5"),
    ("retry.budget.percent", "12.5"),
    ("retry.budget.min_per_second", "5"),
    ("retry.budget.window", "30s"),
];

/// The retry section those entries make.
fn retry_entered() -> Value {
    json!({"attempts": 4, "base": "100ms", "multiplier": 1.5, "max": "3s", "jitter": 0.5,
           "budget": {"percent": 12.5, "min_per_second": 5, "window": "30s"}})
}

/// The retry fieldset, its nested budget group and the runtime's defaults as
/// placeholders; what the form would send for entered retry fields (read from the
/// form's own `formSettings`, before anything is saved), every other field of the
/// point kept; emptying the budget's fields removes the budget table.
#[test]
fn the_form_has_a_retry_section_with_a_budget_group() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"order.create": {"max_visits": 5, "call_timeout": "200ms",
        "breaker": {"algorithm": "sre", "k": 2.5}}}});
    let version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("order.create", version);
    assert_eq!(browser.text_of("#f-call_timeout"), "200ms");
    let layout = browser.js(
        "const set = document.querySelector('#policy-form fieldset[data-section=\"retry\"]'); \
         const budget = set.querySelector('fieldset[data-section=\"retry.budget\"]'); \
         return {legend: set.querySelector('legend').textContent, \
                 fields: [...set.querySelectorAll('[data-kind]')].map(i => \
                     [i.dataset.field, i.dataset.kind, i.placeholder, \
                      i.closest('.field').querySelector('.name').textContent, \
                      !!budget.contains(i)]), \
                 summary: document.querySelector('#retry-summary').textContent, \
                 slots: [...set.querySelectorAll(':scope > .field-error, fieldset > .field-error')] \
                     .map(e => e.dataset.field)};",
    );
    assert_eq!(layout["legend"], "retry");
    assert_eq!(
        layout["fields"],
        json!([
            ["retry.attempts", "int", "", "attempts", false],
            ["retry.base", "dur", "50ms", "base", false],
            ["retry.multiplier", "num", "2", "multiplier", false],
            ["retry.max", "dur", "max(2s, base)", "max", false],
            ["retry.jitter", "num", "1", "jitter", false],
            ["retry.budget.percent", "num", "20", "percent", true],
            [
                "retry.budget.min_per_second",
                "int",
                "10",
                "min_per_second",
                true
            ],
            ["retry.budget.window", "dur", "10s", "window", true],
        ])
    );
    assert_eq!(layout["slots"], json!(["retry.budget", "retry"]));
    assert_eq!(
        layout["summary"],
        "Stored: no retry section (calls are not retried)."
    );
    for (path, text) in RETRY_ENTRIES {
        browser.type_into(&css_id(path), text);
    }
    let mut want = doc["points"]["order.create"].clone();
    want["retry"] = retry_entered();
    assert_eq!(
        browser.js("return formSettings();"),
        want,
        "the settings the form sends"
    );
    // Without the budget's fields: no budget table.
    for (path, _) in RETRY_ENTRIES.iter().filter(|(p, _)| p.contains("budget")) {
        browser.clear(&css_id(path));
    }
    want["retry"].as_object_mut().unwrap().remove("budget");
    assert_eq!(browser.js("return formSettings();"), want);
    // The summary of a stored section, defaults filled in.
    let summary = browser.js(
        "const s = retrySummary({retry: {attempts: 3, budget: {percent: 50}}}); \
         return [s.text, s.values];",
    );
    assert_eq!(
        summary,
        json!([
            "Stored: 3 attempts in all, waits from 50ms growing \u{d7}2 up to 2s, full jitter; \
             own budget: 50 retries per 100 calls, at least 10/s, over 10s.",
            {"attempts": 3, "base": "50ms", "multiplier": 2, "max": "2s", "jitter": 1,
             "budget": {"percent": 50, "min_per_second": 10, "window": "10s"}}
        ])
    );
    assert_eq!(stored(addr), (version, doc));
}

/// The retry section end to end, through the runtime's parser: the entered fields
/// are stored exactly, the form and the summary show them after a reload, and an
/// invalid value shows the runtime's error at its field and stores nothing.
#[test]
fn the_form_saves_a_retry_section_and_shows_the_runtimes_errors() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"order.create": {"max_visits": 5,
        "breaker": {"algorithm": "classic", "failure_rate": 0.3}}}});
    let mut version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("order.create", version);
    for (path, text) in RETRY_ENTRIES {
        browser.type_into(&css_id(path), text);
    }
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let mut want = doc.clone();
    want["points"]["order.create"]["retry"] = retry_entered();
    assert_eq!(stored(addr), (version, want.clone()));
    let diff: Vec<_> = history(addr)[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_owned())
        .collect();
    let mut fields: Vec<_> = RETRY_ENTRIES.iter().map(|(p, _)| p.to_string()).collect();
    fields.sort();
    assert_eq!(diff, fields);

    // After a reload the inputs and the summary show what is stored.
    browser.reload();
    browser.open_point("order.create", version);
    for (path, text) in RETRY_ENTRIES {
        assert_eq!(browser.text_of(&css_id(path)), *text, "{path}");
    }
    assert_eq!(
        browser.text_of("#retry-summary"),
        "Stored: 4 attempts in all, waits from 100ms growing \u{d7}1.5 up to 3s, jitter 0.5; \
         own budget: 12.5 retries per 100 calls, at least 5/s, over 30s."
    );
    // The raw point editor has the section too, as the runtime writes it.
    let text = browser.wait(
        "document.querySelector('#raw-point-text').value",
        "the point's text",
    );
    assert!(
        text.as_str()
            .unwrap()
            .contains("[points.\"order.create\".retry]"),
        "{text}"
    );

    // attempts = 0: the runtime's error at the field, nothing stored.
    browser.type_into("#f-retry-attempts", "0");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"retry.attempts\"]').textContent",
        "the attempts' problem",
    );
    assert!(!msg.as_str().unwrap().is_empty(), "{msg}");
    assert_eq!(
        browser.js(
            "return document.querySelector('#f-retry-attempts').classList.contains('invalid');"
        ),
        json!(true)
    );
    assert!(
        browser.text_of("#form-message").contains("not saved"),
        "{}",
        browser.text_of("#form-message")
    );
    let r = post_json(
        addr,
        &format!("{POLICY}/validate"),
        Some(ADMIN),
        &json!({"policy": {"points": {"order.create": {"retry": {"attempts": 0}}}}}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let problems = r.json()["error"]["problems"].clone();
    assert_eq!(problems[0]["field"], "retry.attempts", "{problems}");
    assert_eq!(
        msg.as_str().unwrap(),
        problems[0]["message"].as_str().unwrap(),
        "the runtime's own message"
    );
    assert_eq!(stored(addr), (version, want.clone()));

    // Emptying the budget's fields removes the budget, the rest stays.
    browser.type_into("#f-retry-attempts", "4");
    for (path, _) in RETRY_ENTRIES.iter().filter(|(p, _)| p.contains("budget")) {
        browser.clear(&css_id(path));
    }
    browser.click("#save");
    version += 1;
    browser.saved(version);
    want["points"]["order.create"]["retry"]
        .as_object_mut()
        .unwrap()
        .remove("budget");
    assert_eq!(stored(addr), (version, want));
}

/// The queue fieldset sits right after the rules, with its two inputs and a summary;
/// through the runtime's parser the entered fields are stored exactly, shown again
/// after a reload, and the runtime's errors (a queue without `max_concurrency`,
/// `max_waiting = 0`) are shown at their field and store nothing.
#[test]
fn the_form_saves_a_queue_and_shows_the_runtimes_errors() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"order.create": {"max_visits": 5}}});
    let mut version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("order.create", version);
    let layout = browser.js(
        "const set = document.querySelector('#policy-form fieldset[data-section=\"queue\"]'); \
         return {legend: set.querySelector('legend').textContent, \
                 before: set.previousElementSibling.dataset.section, \
                 fields: [...set.querySelectorAll('[data-kind]')].map(i => \
                     [i.dataset.field, i.dataset.kind, i.placeholder, \
                      i.closest('.field').querySelector('.name').textContent]), \
                 summary: document.querySelector('#queue-summary').textContent, \
                 slots: [...set.querySelectorAll('.field-error')].map(e => e.dataset.field)};",
    );
    assert_eq!(
        layout,
        json!({"legend": "queue", "before": "Rules",
               "fields": [["queue.max_waiting", "int", "", "max_waiting"],
                          ["queue.max_wait", "dur", "", "max_wait"],
                          ["queue.order", "str", "oldest_first", "order"]],
               "summary": "Stored: no queue.",
               "slots": ["queue.max_waiting", "queue.max_wait", "queue.order", "queue"]})
    );
    let validate = |policy: Value| {
        let r = post_json(
            addr,
            &format!("{POLICY}/validate"),
            Some(ADMIN),
            &json!({ "policy": policy }),
        );
        assert_eq!(r.status, 422, "{}", r.text());
        r.json()["error"]["problems"][0].clone()
    };

    // Without max_concurrency: the runtime's error at the section, nothing stored.
    browser.type_into("#f-queue-max_waiting", "4");
    browser.type_into("#f-queue-max_wait", "1s");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"queue\"]').textContent",
        "the queue's problem",
    );
    let problem = validate(json!({"points": {"order.create": {"max_visits": 5,
        "queue": {"max_waiting": 4, "max_wait": "1s"}}}}));
    assert_eq!(problem["field"], "queue", "{problem}");
    assert_eq!(msg, problem["message"], "the runtime's own message");
    assert!(
        browser.text_of("#form-message").contains("not saved"),
        "{}",
        browser.text_of("#form-message")
    );
    assert_eq!(stored(addr), (version, doc.clone()));

    // With it: stored exactly, one diff entry per field.
    browser.type_into("#f-max_concurrency", "2");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let want = json!({"points": {"order.create": {"max_visits": 5, "max_concurrency": 2,
        "queue": {"max_waiting": 4, "max_wait": "1s"}}}});
    assert_eq!(stored(addr), (version, want.clone()));
    let diff: Vec<_> = history(addr)[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        diff,
        ["max_concurrency", "queue.max_wait", "queue.max_waiting"]
    );

    // After a reload the inputs and the summary show what is stored.
    browser.reload();
    browser.open_point("order.create", version);
    for (css, text) in [
        ("#f-max_concurrency", "2"),
        ("#f-queue-max_waiting", "4"),
        ("#f-queue-max_wait", "1s"),
    ] {
        assert_eq!(browser.text_of(css), text, "{css}");
    }
    assert_eq!(
        browser.text_of("#queue-summary"),
        "Stored: when all 2 slots are taken, up to 4 calls wait for one, each for at most 1s."
    );
    assert_eq!(
        browser.js("return JSON.parse(document.querySelector('#queue-summary').dataset.queue);"),
        json!({"max_waiting": 4, "max_wait": "1s", "max_concurrency": 2})
    );
    let text = browser.wait(
        "document.querySelector('#raw-point-text').value",
        "the point's text",
    );
    assert!(text.as_str().unwrap().contains("max_waiting = 4"), "{text}");

    // max_waiting = 0: the runtime's error at the field, nothing stored.
    browser.type_into("#f-queue-max_waiting", "0");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"queue.max_waiting\"]').textContent",
        "the max_waiting problem",
    );
    let problem = validate(json!({"points": {"order.create": {"max_visits": 5,
        "max_concurrency": 2, "queue": {"max_waiting": 0, "max_wait": "1s"}}}}));
    assert_eq!(problem["field"], "queue.max_waiting", "{problem}");
    assert_eq!(msg, problem["message"], "the runtime's own message");
    assert_eq!(
        browser.js(
            "return document.querySelector('#f-queue-max_waiting').classList.contains('invalid');"
        ),
        json!(true)
    );
    assert_eq!(stored(addr), (version, want.clone()));
    // The summary of other stored queues.
    assert_eq!(
        browser.js(
            "return [queueSummary({max_concurrency: 1, queue: {max_waiting: 1, max_wait: '50ms'}}).text, \
                     queueSummary({max_concurrency: 3}).text, \
                     queueSummary({adaptive: {algorithm: 'gradient'}, queue: {max_waiting: 8, max_wait: '20ms'}}).text, \
                     queueSummary({max_concurrency: 2, adaptive: {algorithm: 'gradient'}, queue: {max_waiting: 1, max_wait: '1s'}}).text];"
        ),
        json!([
            "Stored: when the only slot is taken, up to 1 call waits for one, each for at most 50ms.",
            "Stored: no queue (calls beyond max_concurrency = 3 are downgraded at once).",
            "Stored: when the adaptive limit is reached, up to 8 calls wait for a call to end, each for at most 20ms.",
            "Stored: when all 2 slots are taken or the adaptive limit reached, up to 1 call waits for one, each for at most 1s."
        ])
    );

    // The order: a name the runtime does not know is its error at the field; newest
    // first is stored, summarised and kept by an edit of another field.
    browser.type_into("#f-queue-max_waiting", "4");
    browser.type_into("#f-queue-order", "lifo");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"queue.order\"]').textContent",
        "the order's problem",
    );
    let problem = validate(json!({"points": {"order.create": {"max_visits": 5,
        "max_concurrency": 2, "queue": {"max_waiting": 4, "max_wait": "1s", "order": "lifo"}}}}));
    assert_eq!(problem["field"], "queue.order", "{problem}");
    assert_eq!(msg, problem["message"], "the runtime's own message");
    assert_eq!(stored(addr), (version, want));
    browser.type_into("#f-queue-order", "newest_first");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let newest = json!({"points": {"order.create": {"max_visits": 5, "max_concurrency": 2,
        "queue": {"max_waiting": 4, "max_wait": "1s", "order": "newest_first"}}}});
    assert_eq!(stored(addr), (version, newest));
    browser.reload();
    browser.open_point("order.create", version);
    assert_eq!(browser.text_of("#f-queue-order"), "newest_first");
    assert_eq!(
        browser.text_of("#queue-summary"),
        "Stored: when all 2 slots are taken, up to 4 calls wait for one, each for at most 1s. \
         Newest first: the last come is served first, and a full queue refuses its oldest waiter."
    );
    browser.type_into("#f-max_visits", "6");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let edited = json!({"points": {"order.create": {"max_visits": 6, "max_concurrency": 2,
        "queue": {"max_waiting": 4, "max_wait": "1s", "order": "newest_first"}}}});
    assert_eq!(stored(addr), (version, edited));
}

/// The token bucket's wait, the warm-up and the gradient limit's critical reserve, as
/// entered in the form.
const TOKEN_ENTRIES: [(&str, &str); 6] = [
    ("token_bucket.rate", "2.5"),
    ("token_bucket.capacity", "1"),
    ("token_bucket.max_wait", "200ms"),
    ("warm_up.period", "10s"),
    ("warm_up.cold_factor", "4.5"),
    ("adaptive.critical_reserve", "0.25"),
];

/// The token bucket's `max_wait`, the warm_up fieldset right after the token bucket
/// and the gradient's `critical_reserve`: a warm-up without a token bucket shows the
/// runtime's message at `warm_up` and stores nothing; with one, the entered fields are
/// stored exactly (one diff entry per field) and shown again after a reload (inputs,
/// summaries); one invalid value per section shows the runtime's message at its
/// field and stores nothing.
#[test]
fn the_form_saves_token_waits_warm_ups_and_critical_reserves() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"order.create": {"max_visits": 5}}});
    let mut version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("order.create", version);
    let layout = browser.js(
        "const of = (name) => { \
             const set = document.querySelector('#policy-form fieldset[data-section=\"' + name + '\"]'); \
             return {before: set.previousElementSibling.dataset.section, \
                     fields: [...set.querySelectorAll('[data-kind]')].filter(i => !i.closest('[hidden]')).map(i => \
                         [i.dataset.field, i.dataset.kind, i.placeholder]), \
                     slots: [...set.querySelectorAll('.field-error')].map(e => e.dataset.field)}; }; \
         return {token_bucket: of('token_bucket'), warm_up: of('warm_up'), \
                 summaries: [document.querySelector('#token-bucket-summary').textContent, \
                             document.querySelector('#warm-up-summary').textContent], \
                 reserve: document.querySelector('#f-adaptive-critical_reserve').closest('.field').dataset.algorithms};",
    );
    assert_eq!(
        layout,
        json!({
            "token_bucket": {"before": "timeouts",
                "fields": [["token_bucket.rate", "num", ""], ["token_bucket.capacity", "int", ""],
                           ["token_bucket.max_wait", "dur", ""]],
                "slots": ["token_bucket.rate", "token_bucket.capacity", "token_bucket.max_wait",
                          "token_bucket"]},
            "warm_up": {"before": "token_bucket",
                "fields": [["warm_up.period", "dur", ""], ["warm_up.cold_factor", "num", "3"]],
                "slots": ["warm_up.period", "warm_up.cold_factor", "warm_up"]},
            "summaries": ["Stored: no token bucket.", "Stored: no warm-up."],
            "reserve": "gradient"
        })
    );
    let validate = |policy: Value| {
        let r = post_json(
            addr,
            &format!("{POLICY}/validate"),
            Some(ADMIN),
            &json!({ "policy": policy }),
        );
        assert_eq!(r.status, 422, "{}", r.text());
        r.json()["error"]["problems"][0].clone()
    };

    // A warm-up without a token bucket: the runtime's error at the section.
    browser.type_into("#f-warm_up-period", "10s");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('.field-error[data-field=\"warm_up\"]').textContent",
        "the warm-up's problem",
    );
    let problem = validate(json!({"points": {"order.create": {"max_visits": 5,
        "warm_up": {"period": "10s"}}}}));
    assert_eq!(problem["field"], "warm_up", "{problem}");
    assert_eq!(msg, problem["message"], "the runtime's own message");
    assert!(
        browser.text_of("#form-message").contains("not saved"),
        "{}",
        browser.text_of("#form-message")
    );
    assert_eq!(stored(addr), (version, doc.clone()));

    // Every field entered: stored exactly, one diff entry per field.
    browser.choose("#f-adaptive-algorithm", "gradient");
    for (path, text) in TOKEN_ENTRIES {
        browser.type_into(&css_id(path), text);
    }
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let want = json!({"points": {"order.create": {"max_visits": 5,
        "token_bucket": {"rate": 2.5, "capacity": 1, "max_wait": "200ms"},
        "warm_up": {"period": "10s", "cold_factor": 4.5},
        "adaptive": {"algorithm": "gradient", "critical_reserve": 0.25}}}});
    assert_eq!(stored(addr), (version, want.clone()));
    let diff: Vec<_> = history(addr)[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_owned())
        .collect();
    let mut fields: Vec<_> = TOKEN_ENTRIES.iter().map(|(p, _)| p.to_string()).collect();
    fields.push("adaptive.algorithm".to_owned());
    fields.sort();
    assert_eq!(diff, fields);

    // After a reload the inputs and the summaries show what is stored.
    browser.reload();
    browser.open_point("order.create", version);
    assert_eq!(browser.text_of("#f-adaptive-algorithm"), "gradient");
    for (path, text) in TOKEN_ENTRIES {
        assert_eq!(browser.text_of(&css_id(path)), text, "{path}");
    }
    assert_eq!(
        browser.text_of("#token-bucket-summary"),
        "Stored: pacing, calls spaced 1/2.5 s apart; a call waits for its turn if it is \
         due within 200ms."
    );
    assert_eq!(
        browser.text_of("#warm-up-summary"),
        "Stored: a cold point admits 0.56 (rate / 4.5) calls a second at first, reaching \
         the bucket's rate over about 10s."
    );
    assert_eq!(
        browser.js(
            "const d = (id, k) => JSON.parse(document.querySelector(id).dataset[k]); \
             return [d('#token-bucket-summary', 'tokenBucket'), d('#warm-up-summary', 'warmUp')];"
        ),
        json!([{"rate": 2.5, "capacity": 1, "max_wait": "200ms"},
               {"period": "10s", "cold_factor": 4.5}])
    );
    let text = browser.wait(
        "document.querySelector('#raw-point-text').value",
        "the point's text",
    );
    for line in [
        "max_wait = \"200ms\"",
        "[points.\"order.create\".warm_up]",
        "critical_reserve = 0.25",
    ] {
        assert!(text.as_str().unwrap().contains(line), "{line}: {text}");
    }

    // One invalid value per section: the runtime's error at the field, nothing stored.
    for (path, bad, policy) in [
        (
            "token_bucket.max_wait",
            "2h",
            json!({"token_bucket": {"rate": 2.5, "capacity": 1, "max_wait": "2h"},
                   "warm_up": {"period": "10s", "cold_factor": 4.5}}),
        ),
        (
            "warm_up.cold_factor",
            "1",
            json!({"token_bucket": {"rate": 2.5, "capacity": 1},
                   "warm_up": {"period": "10s", "cold_factor": 1}}),
        ),
        (
            "warm_up.period",
            "500ms",
            json!({"token_bucket": {"rate": 2.5, "capacity": 1},
                   "warm_up": {"period": "500ms"}}),
        ),
        (
            "adaptive.critical_reserve",
            "1",
            json!({"adaptive": {"algorithm": "gradient", "critical_reserve": 1}}),
        ),
    ] {
        let good = browser.text_of(&css_id(path));
        browser.type_into(&css_id(path), bad);
        browser.click("#save");
        let msg = browser.wait(
            &format!("document.querySelector('.field-error[data-field=\"{path}\"]').textContent"),
            path,
        );
        let problem = validate(json!({"points": {"order.create": policy}}));
        assert_eq!(problem["field"], path, "{problem}");
        assert_eq!(msg, problem["message"], "{path}: the runtime's own message");
        assert_eq!(
            browser.js(&format!(
                "return document.querySelector('{}').classList.contains('invalid');",
                css_id(path)
            )),
            json!(true),
            "{path}"
        );
        assert_eq!(stored(addr), (version, want.clone()), "{path}");
        browser.type_into(&css_id(path), &good);
    }
    // The summaries of other stored sections.
    assert_eq!(
        browser.js(
            "return [tokenBucketSummary({token_bucket: {rate: 100, capacity: 20}}).text, \
                     tokenBucketSummary({token_bucket: {rate: 100, capacity: 20, max_wait: '1s'}}).text, \
                     warmUpSummary({token_bucket: {rate: 90, capacity: 9}, warm_up: {period: '1m'}}).text];"
        ),
        json!([
            "Stored: 100 tokens a second, at most 20 saved up; a call finding no token is downgraded at once.",
            "Stored: 100 tokens a second, at most 20 saved up; a call finding no token waits for the next one if it is due within 1s.",
            "Stored: a cold point admits 30 (rate / 3) calls a second at first, reaching the bucket's rate over about 1m."
        ])
    );
}

/// What the overrides' rows show: per row its value, limit, burst, max_concurrency.
fn override_rows(browser: &Browser) -> Value {
    browser.js(
        "return [...document.querySelectorAll('#keys-override-rows .override-row')].map(r => \
             ['value', 'limit', 'burst', 'max_concurrency'].map(p => \
                 r.querySelector('input[data-part=\"' + p + '\"]').value));",
    )
}

/// The keys section in the form: its plain fields and the overrides' rows show what
/// is stored; two overrides added (one of a limit, one of a table's
/// max_concurrency), one stored override's burst edited (its other fields kept) and
/// the section's fields set are stored exactly, and a pull of a real heartbeat client
/// applies them; the runtime's problems show at the override's field (its value
/// quoted), a value in two rows is refused before anything is sent, and a removed
/// row is gone from the stored document.
#[test]
fn the_form_edits_a_keys_section_with_overrides_that_reach_a_client() {
    use resilience_runtime::keys::{KeyOverride, KeyPolicy};
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"api.get": {"max_visits": 100,
        "keys": {"limit": 5, "overrides": {"old": {"limit": 2, "burst": 3, "max_concurrency": 4}}}},
        "bystander": {"keys": {"max_concurrency": 1, "overrides": {"a.b": 7}}}}});
    let mut version = put_policy(addr, 0, &doc);
    let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    let hb = HeartbeatConfig::builder("shop", "orders", &server.url())
        .token(APP)
        .instance("keys-1")
        .build()
        .unwrap();
    let client = HeartbeatClient::new(hb, registry);
    client.pull_now().unwrap();
    assert_eq!(
        registry
            .policy("api.get")
            .unwrap()
            .unwrap()
            .keys()
            .unwrap()
            .rule()
            .limit,
        Some(5)
    );

    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("api.get", version);
    let layout = browser.js(
        "const set = document.querySelector('#policy-form fieldset[data-section=\"keys\"]'); \
         return {legend: set.querySelector('legend').textContent, \
                 before: set.previousElementSibling.dataset.section, \
                 fields: [...set.querySelectorAll('[data-kind]')].map(i => \
                     [i.dataset.field, i.dataset.kind, i.placeholder]), \
                 overrides: set.querySelector('#keys-overrides legend').textContent};",
    );
    assert_eq!(
        layout,
        json!({"legend": "keys", "before": "window",
               "fields": [["keys.limit", "int", ""], ["keys.period", "dur", "1s"],
                          ["keys.burst", "int", "limit"], ["keys.max_concurrency", "int", ""],
                          ["keys.max_wait", "dur", ""], ["keys.max_keys", "int", "4096"]],
               "overrides": "overrides"})
    );
    // The stored settings.
    assert_eq!(browser.text_of("#f-keys-limit"), "5");
    assert_eq!(browser.text_of("#f-keys-period"), "");
    assert_eq!(override_rows(&browser), json!([["old", "2", "3", "4"]]));

    // The section's fields, the stored override's burst, and two new overrides.
    for (css, text) in [
        ("#f-keys-limit", "10"),
        ("#f-keys-period", "1m"),
        ("#f-keys-burst", "20"),
        ("#f-keys-max_concurrency", "3"),
        ("#f-keys-max_keys", "1024"),
    ] {
        browser.type_into(css, text);
    }
    let row = |n: usize, part: &str| {
        format!("#keys-override-rows .override-row:nth-child({n}) input[data-part=\"{part}\"]")
    };
    browser.type_into(&row(1, "burst"), "5");
    browser.click("#keys-override-add");
    browser.type_into(&row(2, "value"), "vip-42");
    browser.type_into(&row(2, "limit"), "1000");
    browser.click("#keys-override-add");
    browser.type_into(&row(3, "value"), "slow");
    browser.type_into(&row(3, "max_concurrency"), "1");
    // A blank row is no override.
    browser.click("#keys-override-add");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    let keys = json!({"limit": 10, "period": "1m", "burst": 20, "max_concurrency": 3,
        "max_keys": 1024, "overrides": {"old": {"limit": 2, "burst": 5, "max_concurrency": 4},
        "slow": {"max_concurrency": 1}, "vip-42": 1000}});
    let mut want = doc.clone();
    want["points"]["api.get"]["keys"] = keys.clone();
    assert_eq!(stored(addr), (version, want.clone()));
    let mut diff: Vec<_> = history(addr)[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap().to_owned())
        .collect();
    diff.sort();
    assert_eq!(
        diff,
        [
            "keys.burst",
            "keys.limit",
            "keys.max_concurrency",
            "keys.max_keys",
            "keys.overrides.\"old\".burst",
            "keys.overrides.\"slow\".max_concurrency",
            "keys.overrides.\"vip-42\"",
            "keys.period",
        ]
    );
    // A pull of the real client returns it, and the runtime enforces it.
    let pulled = post_json(
        addr,
        "/api/v1/pull",
        Some(APP),
        &json!({"app_group": "shop", "app": "orders", "instance": "keys-1", "version": 1}),
    )
    .json();
    assert_eq!(pulled["version"], version, "{pulled}");
    assert_eq!(
        pulled["policy"]["points"]["api.get"]["keys"], keys,
        "{pulled}"
    );
    client.pull_now().unwrap();
    assert_eq!(client.policy_version(), version);
    let enforced = registry
        .policy("api.get")
        .unwrap()
        .unwrap()
        .keys()
        .cloned()
        .unwrap();
    let expected = KeyPolicy::builder()
        .limit(10, Duration::from_secs(60))
        .burst(20)
        .max_concurrency(3)
        .max_keys(1024)
        .override_rule(
            "old",
            KeyOverride::builder()
                .limit(2)
                .burst(5)
                .max_concurrency(4)
                .build(),
        )
        .override_limit("vip-42", 1000)
        .override_rule("slow", KeyOverride::builder().max_concurrency(1).build())
        .build()
        .unwrap();
    assert_eq!(enforced, expected);
    let point = registry.point("api.get").unwrap();
    let held = point.enter_key("slow").unwrap();
    assert_eq!(
        point.enter_key("slow").unwrap_err().reason(),
        resilience_runtime::Reason::HotKey,
        "the override's one call in flight"
    );
    held.finish(false);
    // The bystander's overrides were not touched.
    assert_eq!(
        registry
            .policy("bystander")
            .unwrap()
            .unwrap()
            .keys()
            .unwrap()
            .rule_of("a.b")
            .limit,
        Some(7)
    );

    // The rows show what is stored, sorted by value.
    browser.wait(
        "document.querySelectorAll('#keys-override-rows .override-row').length === 3",
        "the stored overrides",
    );
    assert_eq!(
        override_rows(&browser),
        json!([
            ["old", "2", "5", "4"],
            ["slow", "", "", "1"],
            ["vip-42", "1000", "", ""]
        ])
    );

    // A limit the runtime refuses: its message at the override's field, nothing stored.
    browser.type_into(&row(3, "limit"), "2000000000");
    browser.click("#save");
    // The field as a JavaScript string literal.
    let field = json!("keys.overrides.\"vip-42\".limit").to_string();
    let msg = browser.wait(
        &format!(
            "[...document.querySelectorAll('.field-error')].find(e => e.dataset.field === {field})?.textContent"
        ),
        "the override's problem",
    );
    let r = post_json(
        addr,
        &format!("{POLICY}/validate"),
        Some(ADMIN),
        &json!({"policy": {"points": {"api.get": {"keys": {"limit": 10,
            "overrides": {"vip-42": 2_000_000_000u64}}}}}}),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    let problem = r.json()["error"]["problems"][0].clone();
    assert_eq!(
        problem["field"], "keys.overrides.\"vip-42\".limit",
        "{problem}"
    );
    assert_eq!(msg, problem["message"], "the runtime's own message");
    assert_eq!(
        browser.js(&format!(
            "return [...document.querySelectorAll('input')].find(e => e.dataset.field === {field}).classList.contains('invalid');"
        )),
        json!(true)
    );
    assert_eq!(stored(addr), (version, want.clone()));

    // A value in two rows: refused here (at the later row), nothing sent.
    browser.type_into(&row(3, "limit"), "1000");
    browser.type_into(&row(2, "value"), "vip-42");
    browser.click("#save");
    let msg = browser.wait(
        "document.querySelector('#keys-override-rows .override-row:nth-child(3) .o-row-error').textContent",
        "the duplicate's message",
    );
    assert!(msg.as_str().unwrap().contains("another row"), "{msg}");
    assert_eq!(history(addr).len(), version as usize);

    // Removing a row (after putting its value back) removes that override only.
    browser.type_into(&row(2, "value"), "slow");
    browser.click("#keys-override-rows .override-row:nth-child(1) .o-remove");
    browser.click("#save");
    version += 1;
    browser.saved(version);
    want["points"]["api.get"]["keys"]["overrides"]
        .as_object_mut()
        .unwrap()
        .remove("old");
    assert_eq!(stored(addr), (version, want));
    let diff: Vec<_> = history(addr)[0]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["field"].clone(), d["new"].clone()))
        .collect();
    assert_eq!(
        diff,
        [
            (json!("keys.overrides.\"old\".burst"), Value::Null),
            (json!("keys.overrides.\"old\".limit"), Value::Null),
            (json!("keys.overrides.\"old\".max_concurrency"), Value::Null),
        ]
    );
    client.pull_now().unwrap();
    let enforced = registry.policy("api.get").unwrap().unwrap();
    assert_eq!(enforced.keys().unwrap().overrides().len(), 2);
    assert_eq!(enforced.max_visits(), Some(100));
}

/// A save that meets a newer version (409) moves the form onto it: saving again
/// keeps the newer version's overrides the operator did not touch (one added, one
/// changed), removes only the row the operator removed, and applies the operator's
/// edit to the newer entry.
#[test]
fn a_save_after_a_conflict_keeps_the_newer_versions_overrides() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"p": {"keys": {"limit": 5,
        "overrides": {"gone": 3, "old": 2, "same": {"limit": 1, "burst": 2}}}}}});
    let version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("p", version);
    let row = |value: &str| {
        format!("#keys-override-rows .override-row[data-field='keys.overrides.\"{value}\"']")
    };
    browser.type_into(&format!("{} input[data-part=\"limit\"]", row("old")), "4");
    browser.click(&format!("{} .o-remove", row("gone")));
    // Meanwhile another operator adds `new` and changes `same`.
    let newer = json!({"points": {"p": {"keys": {"limit": 5,
        "overrides": {"gone": 3, "new": 9, "old": 2, "same": {"limit": 7}}}}}});
    let version = put_policy(addr, version, &newer);
    browser.click("#save");
    browser.wait(
        "document.querySelector('#form-message').textContent.includes('Someone else changed')",
        "the conflict",
    );
    browser.click("#save");
    browser.saved(version + 1);
    let mut want = newer.clone();
    // The stored form of an override of the limit alone is its number.
    want["points"]["p"]["keys"]["overrides"] = json!({"new": 9, "old": 4, "same": 7});
    assert_eq!(stored(addr), (version + 1, want));
}

/// `keys = "off"` stored: the form says so (its empty fields alone would read as "not
/// set here"); a point with a keys table does not show the note.
#[test]
fn the_form_says_when_keys_are_off() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let doc = json!({"points": {"off": {"max_visits": 3, "keys": "off"},
        "on": {"keys": {"limit": 2}}}});
    let version = put_policy(addr, 0, &doc);
    let browser = Browser::start();
    browser.goto(&format!("{}/#token={ADMIN}", server.url()));
    browser.type_into("#author", "e2e");
    browser.open_point("off", version);
    let shown = "return !document.querySelector('#keys-off').hidden;";
    assert_eq!(browser.js(shown), json!(true));
    browser.open_point("on", version);
    assert_eq!(browser.js(shown), json!(false));
}
