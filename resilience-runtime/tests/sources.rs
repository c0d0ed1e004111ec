//! Layered policy sources (`resilience_runtime::sources`): a model-based proptest of
//! random layer edits and precedence changes against a reference composition written
//! independently here, the "console overrides one point of a file" incident scenario
//! with a real file on disk, racing edits from code, console and file on 8 threads,
//! policy-change listeners, and the `PolicyFile::from_registry` round trip.
//!
//! Every test uses a registry of its own (leaked, as the global one is), so that no
//! test sees another's points or layers.

#![cfg(feature = "config")]

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use resilience_runtime::adaptive::GradientConfig;
use resilience_runtime::breaker::ClassicConfig;
use resilience_runtime::config::{Format, PolicyFile, INLINE_SOURCE};
use resilience_runtime::retry::{Retry, RetryPolicy};
use resilience_runtime::sources::{
    EffectivePolicy, PointConfig, PolicyChange, Precedence, Section, Sections, Source, SourceKind,
    SourceLayer,
};
use resilience_runtime::{AdaptiveLimit, BreakerPolicy, Clock, Policy, Reason, Registry};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------
// Helpers: registries, sources, and the reference composition.
// ---------------------------------------------------------------------------------

fn fresh() -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::system())))
}

/// The five policy sections (every section but the breaker).
const POLICY_SECTIONS: [Section; 6] = [
    Section::Rules,
    Section::Window,
    Section::Shadow,
    Section::Adaptive,
    Section::Cluster,
    Section::Keys,
];

/// The six orders of the three source kinds.
const PERMUTATIONS: [[SourceKind; 3]; 6] = {
    use SourceKind::{Code, Console, File};
    [
        [Console, File, Code],
        [Console, Code, File],
        [File, Console, Code],
        [File, Code, Console],
        [Code, Console, File],
        [Code, File, Console],
    ]
};

/// What a point should enforce, computed by the test.
#[derive(Debug, PartialEq)]
struct Expected {
    policy: Option<Policy>,
    breaker: Option<BreakerPolicy>,
    retry: Option<RetryPolicy>,
    /// Per section of `Section::ALL`: the source and version of its winning layer.
    origins: [Option<(Source, u64)>; Section::ALL.len()],
}

/// Whether `a` ranks above `b` for `section`: the kind placed earlier in the
/// section's order wins; between two files, the name that sorts last.
fn ranks_above(precedence: &Precedence, section: Section, a: &Source, b: &Source) -> bool {
    let order = precedence.order(section);
    let kind = |s: &Source| match s {
        Source::Code => SourceKind::Code,
        Source::File(_) => SourceKind::File,
        Source::Console => SourceKind::Console,
    };
    let position = |s: &Source| order.iter().position(|k| *k == kind(s)).unwrap();
    match position(a).cmp(&position(b)) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Greater => false,
        std::cmp::Ordering::Equal => match (a, b) {
            (Source::File(x), Source::File(y)) => x > y,
            _ => false,
        },
    }
}

/// Whether a setting sets a section (written from the documented meaning, not with
/// `PointConfig::sets`).
fn sets(config: &PointConfig, section: Section) -> bool {
    match section {
        Section::Breaker => config.breaker.is_some(),
        Section::Retry => config.retry.is_some(),
        s => config.sections.contains(s),
    }
}

/// Copies the rules of `from` into a builder.
fn copy_rules(
    mut b: resilience_runtime::PolicyBuilder,
    from: &Policy,
) -> resilience_runtime::PolicyBuilder {
    if let Some(v) = from.max_visits() {
        b = b.max_visits(v);
    }
    if let Some(v) = from.max_concurrency() {
        b = b.max_concurrency(v);
    }
    if let Some(v) = from.max_exceptions() {
        b = b.max_exceptions(v);
    }
    if let Some(r) = from.exception_rate() {
        b = b.exception_rate(r.rate, r.min_visits);
    }
    if let Some(t) = from.timeouts() {
        b = b.timeouts(t.threshold, t.max_count);
    }
    if let Some(d) = from.call_timeout() {
        b = b.call_timeout(d);
    }
    if let Some(t) = from.token_bucket() {
        b = b.token_bucket(t.rate, t.capacity);
    }
    if let Some(d) = from.delay() {
        b = b.delay(d.duration, d.retry_interval);
    }
    b.downgrade_percentage(from.downgrade_percentage())
}

/// The reference composition: for each section, the highest-ranked layer that sets
/// it; the policy starts from `Policy::observe()` with each set section copied from
/// its winner, and is `None` if no layer sets a policy section.
fn reference(layers: &[(Source, u64, PointConfig)], precedence: &Precedence) -> Expected {
    let mut winners: [Option<&(Source, u64, PointConfig)>; Section::ALL.len()] = Default::default();
    for (i, section) in Section::ALL.into_iter().enumerate() {
        for layer in layers.iter().filter(|l| sets(&l.2, section)) {
            let better = match winners[i] {
                None => true,
                Some(best) => ranks_above(precedence, section, &layer.0, &best.0),
            };
            if better {
                winners[i] = Some(layer);
            }
        }
    }
    let winner = |s: Section| winners[s as usize].map(|l| &l.2);
    let mut b = Policy::builder();
    if let Some(c) = winner(Section::Rules) {
        b = copy_rules(b, &c.policy);
    }
    if let Some(c) = winner(Section::Window) {
        let w = c.policy.window();
        b = b.window(w.buckets, w.bucket_width);
    }
    if let Some(c) = winner(Section::Shadow) {
        b = b.shadow(c.policy.is_shadow());
    }
    if let Some(c) = winner(Section::Adaptive) {
        if let Some(a) = c.policy.adaptive() {
            b = b.adaptive(a);
        }
    }
    #[cfg(feature = "redis")]
    if let Some(c) = winner(Section::Cluster) {
        if let Some(limit) = c.policy.cluster() {
            b = b.cluster(limit.clone());
        }
    }
    if let Some(c) = winner(Section::Keys) {
        if let Some(k) = c.policy.keys() {
            b = b.keys(k.clone());
        }
    }
    let any_policy = POLICY_SECTIONS.iter().any(|s| winner(*s).is_some());
    Expected {
        policy: any_policy.then(|| b.build().expect("sections of valid policies")),
        breaker: winner(Section::Breaker).and_then(|c| c.breaker),
        retry: winner(Section::Retry).and_then(|c| c.retry),
        origins: winners.map(|w| w.map(|l| (l.0.clone(), l.1))),
    }
}

/// An effective policy in the shape of [`Expected`].
fn observed(e: &EffectivePolicy) -> Expected {
    Expected {
        policy: e.policy.clone(),
        breaker: e.breaker,
        retry: e.retry,
        origins: Section::ALL.map(|s| e.origin(s).map(|o| (o.source.clone(), o.version))),
    }
}

/// Layers as plain tuples.
fn tuples(layers: &[SourceLayer]) -> Vec<(Source, u64, PointConfig)> {
    layers
        .iter()
        .map(|l| (l.source.clone(), l.version, l.settings.clone()))
        .collect()
}

/// Asserts that a point's effective policy is the reference composition of its
/// layers under the registry's precedence, and that the point enforces it.
fn assert_consistent(r: &Registry, name: &str) {
    let layers = tuples(&r.layers(name).unwrap());
    let expected = reference(&layers, &r.precedence());
    let e = r.effective_policy(name).unwrap();
    assert_eq!(observed(&e), expected, "{name}: layers {layers:#?}");
    assert_eq!(r.policy(name).unwrap(), e.policy, "{name}: point's policy");
    assert_eq!(
        r.breaker(name).unwrap(),
        e.breaker,
        "{name}: point's breaker"
    );
    assert_eq!(
        r.retry(name).unwrap(),
        e.retry,
        "{name}: point's retry section"
    );
}

fn visits(n: u64) -> Policy {
    Policy::builder().max_visits(n).build().unwrap()
}

fn classic(consecutive_failures: u64) -> BreakerPolicy {
    BreakerPolicy::Classic(
        ClassicConfig::builder()
            .consecutive_failures(consecutive_failures)
            .build()
            .unwrap(),
    )
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------
// 1. Model-based proptest.
// ---------------------------------------------------------------------------------

const POINTS: [&str; 2] = ["layers.a", "layers.b"];

fn sources() -> [Source; 4] {
    [
        Source::Code,
        Source::file("a.toml"),
        Source::file("b.toml"),
        Source::Console,
    ]
}

#[derive(Clone, Debug)]
enum PrecedenceOp {
    Uniform([SourceKind; 3]),
    Section(Section, [SourceKind; 3]),
}

#[derive(Clone, Debug)]
enum Op {
    Set {
        point: usize,
        source: usize,
        config: Box<PointConfig>,
    },
    Clear {
        point: usize,
        source: usize,
    },
    Precedence(PrecedenceOp),
}

fn breaker_pool() -> Vec<Option<BreakerPolicy>> {
    vec![
        None,
        Some(BreakerPolicy::Disabled),
        Some(classic(3)),
        Some(BreakerPolicy::Classic(
            ClassicConfig::builder()
                .consecutive_failures(5)
                .failure_rate(0.25)
                .build()
                .unwrap(),
        )),
        Some(BreakerPolicy::default()),
    ]
}

fn point_config() -> impl Strategy<Value = PointConfig> {
    (
        (
            prop::option::of(prop::sample::select(vec![0u64, 5, 100])),
            any::<bool>(),
            prop::option::of(prop::sample::select(vec![100u64, 2000])),
        ),
        prop::sample::select(vec![(10u64, 1000u64), (4, 250), (20, 500)]),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![30u64, 64])),
        0u8..32,
        prop::sample::select(breaker_pool()),
        prop::sample::select(vec![None, Some(2u64), Some(4)]),
    )
        .prop_map(
            |(
                (max_visits, bucket, call_timeout),
                (buckets, width),
                shadow,
                adaptive,
                bits,
                breaker,
                retry,
            )| {
                let mut b = Policy::builder()
                    .window(buckets, Duration::from_millis(width))
                    .shadow(shadow);
                if let Some(v) = max_visits {
                    b = b.max_visits(v);
                }
                if bucket {
                    b = b.token_bucket(2.5, 10);
                }
                if let Some(ms) = call_timeout {
                    b = b.call_timeout(Duration::from_millis(ms));
                }
                if let Some(max_limit) = adaptive {
                    b = b.adaptive(AdaptiveLimit::Gradient(
                        GradientConfig::builder()
                            .max_limit(max_limit)
                            .initial_limit(10)
                            .build()
                            .unwrap(),
                    ));
                }
                let mut sections = Sections::NONE;
                for (i, s) in POLICY_SECTIONS.into_iter().enumerate() {
                    if bits & (1 << i) != 0 {
                        sections = sections.with(s);
                    }
                }
                let mut c = PointConfig::builder()
                    .policy(b.build().unwrap())
                    .sections(sections)
                    .build();
                if let Some(breaker) = breaker {
                    c.breaker = Some(breaker);
                }
                if let Some(attempts) = retry {
                    c.retry = Some(
                        RetryPolicy::builder(Retry::builder(attempts).build().unwrap())
                            .build()
                            .unwrap(),
                    );
                }
                c
            },
        )
}

fn precedence_op() -> impl Strategy<Value = PrecedenceOp> {
    let perm = prop::sample::select(PERMUTATIONS.to_vec());
    prop_oneof![
        perm.clone().prop_map(PrecedenceOp::Uniform),
        (prop::sample::select(Section::ALL.to_vec()), perm)
            .prop_map(|(s, p)| PrecedenceOp::Section(s, p)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..POINTS.len(), 0..4usize, point_config())
            .prop_map(|(point, source, config)| Op::Set { point, source, config: Box::new(config) }),
        3 => (0..POINTS.len(), 0..4usize).prop_map(|(point, source)| Op::Clear { point, source }),
        1 => precedence_op().prop_map(Op::Precedence),
    ]
}

/// The test's plain model of the registry's layers.
#[derive(Default)]
struct Model {
    layers: BTreeMap<&'static str, BTreeMap<Source, (PointConfig, u64)>>,
    versions: HashMap<Source, u64>,
    existing: HashSet<&'static str>,
    precedence: Precedence,
}

impl Model {
    fn bump(&mut self, source: &Source) -> u64 {
        let v = self.versions.entry(source.clone()).or_insert(0);
        *v += 1;
        *v
    }

    fn apply(&mut self, op: &Op) {
        let sources = sources();
        match op {
            Op::Set {
                point,
                source,
                config,
            } => {
                let (name, source) = (POINTS[*point], &sources[*source]);
                self.existing.insert(name);
                let version = self.bump(source);
                let layers = self.layers.entry(name).or_default();
                if config.sections.is_empty() && config.breaker.is_none() && config.retry.is_none()
                {
                    // Settings that set nothing remove the source's layer.
                    layers.remove(source);
                } else {
                    layers.insert(source.clone(), ((**config).clone(), version));
                }
            }
            Op::Clear { point, source } => {
                let (name, source) = (POINTS[*point], &sources[*source]);
                // Clearing a point that does not exist is a no-op (no version bump).
                if self.existing.contains(name) {
                    self.bump(source);
                    self.layers.entry(name).or_default().remove(source);
                }
            }
            Op::Precedence(p) => {
                self.precedence = resolve(&self.precedence, p);
            }
        }
    }

    fn layers_of(&self, name: &str) -> Vec<(Source, u64, PointConfig)> {
        self.layers
            .get(name)
            .map(|m| {
                m.iter()
                    .map(|(s, (c, v))| (s.clone(), *v, c.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn resolve(current: &Precedence, op: &PrecedenceOp) -> Precedence {
    match op {
        PrecedenceOp::Uniform(order) => Precedence::builder().all(*order).build().unwrap(),
        PrecedenceOp::Section(section, order) => {
            let mut b = Precedence::builder();
            for s in Section::ALL {
                b = b.section(s, current.order(s));
            }
            b.section(*section, *order).build().unwrap()
        }
    }
}

fn apply_to_registry(r: &Registry, op: &Op) {
    let sources = sources();
    match op {
        Op::Set {
            point,
            source,
            config,
        } => r
            .set_layer(POINTS[*point], sources[*source].clone(), (**config).clone())
            .unwrap(),
        Op::Clear { point, source } => r
            .clear_layer(POINTS[*point], sources[*source].clone())
            .unwrap(),
        Op::Precedence(p) => r.set_precedence(resolve(&r.precedence(), p)),
    }
}

/// Compares the registry with the model after an operation.
fn check_against_model(r: &Registry, model: &Model, step: usize) {
    assert_eq!(r.precedence(), model.precedence, "step {step}: precedence");
    for source in sources() {
        assert_eq!(
            r.source_version(&source),
            model.versions.get(&source).copied().unwrap_or(0),
            "step {step}: version of {source}"
        );
    }
    for name in POINTS {
        let want_layers = model.layers_of(name);
        assert_eq!(
            tuples(&r.layers(name).unwrap()),
            want_layers,
            "step {step}: layers of {name}"
        );
        let expected = reference(&want_layers, &model.precedence);
        let e = r.effective_policy(name).unwrap();
        assert_eq!(observed(&e), expected, "step {step}: effective {name}");
        assert_eq!(
            r.policy(name).unwrap(),
            e.policy,
            "step {step}: {name} policy"
        );
        assert_eq!(
            r.breaker(name).unwrap(),
            e.breaker,
            "step {step}: {name} breaker"
        );
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// Random sequences of `set_layer`, `clear_layer` and `set_precedence` over two
    /// points and four sources: after every operation each point's layers equal the
    /// model's (no source's edit touched another source's layer), its effective
    /// policy, breaker and per-section origins equal the reference composition, every
    /// source's version is the model's, and the point enforces the effective policy.
    #[test]
    fn random_layer_edits_match_the_reference_composition(
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let r = fresh();
        let mut model = Model::default();
        for (step, op) in ops.iter().enumerate() {
            apply_to_registry(r, op);
            model.apply(op);
            check_against_model(r, &model, step);
        }
    }

    /// After random layerings, `PolicyFile::from_registry` written as TOML and JSON
    /// and loaded into fresh registries as their only source enforces the same policy
    /// and breaker on every point.
    #[test]
    fn from_registry_round_trips_random_layerings(
        ops in prop::collection::vec(op(), 1..25),
    ) {
        let r = fresh();
        for op in &ops {
            apply_to_registry(r, op);
        }
        assert_round_trip(r);
    }
}

// ---------------------------------------------------------------------------------
// 2. The incident scenario.
// ---------------------------------------------------------------------------------

/// A unique temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "resilience-layers-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn incident_file(b1_visits: u64, b2_visits: u64, b2_failures: u32, bucket: bool) -> String {
    let mut text = String::new();
    if bucket {
        text.push_str("[points.\"inc.bucket\"]\ntoken_bucket = { rate = 20.0, capacity = 20 }\n\n");
    }
    text.push_str(&format!(
        "[points.\"inc.b1\"]\nmax_visits = {b1_visits}\n\n\
         [points.\"inc.b1\".breaker]\nalgorithm = \"classic\"\nconsecutive_failures = 3\n\n\
         [points.\"inc.b2\"]\nmax_visits = {b2_visits}\n\n\
         [points.\"inc.b2\".breaker]\nalgorithm = \"classic\"\nconsecutive_failures = {b2_failures}\n"
    ));
    text
}

fn origin(r: &Registry, name: &str, section: Section) -> Option<(Source, u64)> {
    r.effective_policy(name)
        .unwrap()
        .origin(section)
        .map(|o| (o.source.clone(), o.version))
}

/// The incident: a policy file on disk configures a token bucket and two classic
/// breakers; the console then tightens one breaker point's `max_visits` only. The
/// other points keep the file's settings, the console point keeps the file's breaker
/// (with its state), the bucket admits exactly its capacity, a later file edit
/// changes the other points but not the console's rules, an empty console file
/// removes only the console's layer, and a file that drops a point clears it.
#[test]
fn console_override_of_one_point_keeps_the_file_for_everything_else() {
    let r = fresh();
    let dir = TempDir::new("incident");
    let path = dir.path().join("policies.toml");
    let file = Source::file(path.display().to_string());
    std::fs::write(&path, incident_file(100, 200, 3, true)).unwrap();

    let report = r.load_policies(&path).unwrap();
    assert_eq!(report.layer, file);
    assert_eq!(report.version, 1);
    assert_eq!(report.source.as_deref(), Some(path.as_path()));
    assert_eq!(report.applied, ["inc.b1", "inc.b2", "inc.bucket"]);
    assert!(report.cleared.is_empty() && report.breakers_cleared.is_empty());
    for name in ["inc.b1", "inc.b2", "inc.bucket"] {
        assert_consistent(r, name);
    }
    assert_eq!(r.breaker("inc.b1").unwrap(), Some(classic(3)));
    assert_eq!(r.breaker("inc.b2").unwrap(), Some(classic(3)));
    assert_eq!(r.breaker("inc.bucket").unwrap(), None);

    // Trip b1's breaker: three failures in a row.
    let b1 = r.point("inc.b1").unwrap();
    for _ in 0..3 {
        b1.enter().unwrap().finish(true);
    }
    assert_eq!(b1.enter().unwrap_err().reason(), Reason::BreakerOpen);

    let before_b2 = r.effective_policy("inc.b2").unwrap();
    let before_bucket = r.effective_policy("inc.bucket").unwrap();

    // The console sets only b1's rules.
    let console = PolicyFile::parse("[points.\"inc.b1\"]\nmax_visits = 5\n", Format::Toml).unwrap();
    let report = r.apply_source(Source::Console, &console).unwrap();
    assert_eq!(report.layer, Source::Console);
    assert_eq!(report.version, 1);
    assert_eq!(report.source, None);
    assert_eq!(report.applied, ["inc.b1"]);
    assert!(report.cleared.is_empty() && report.breakers_cleared.is_empty());

    assert_eq!(r.effective_policy("inc.b2").unwrap(), before_b2);
    assert_eq!(r.effective_policy("inc.bucket").unwrap(), before_bucket);
    assert_eq!(r.points_of(&Source::Console), ["inc.b1"]);
    let e = r.effective_policy("inc.b1").unwrap();
    assert_eq!(e.policy.as_ref().unwrap().max_visits(), Some(5));
    assert_eq!(e.breaker, Some(classic(3)));
    assert_eq!(
        origin(r, "inc.b1", Section::Rules),
        Some((Source::Console, 1))
    );
    assert_eq!(
        origin(r, "inc.b1", Section::Breaker),
        Some((file.clone(), 1))
    );
    assert_eq!(r.layers("inc.b1").unwrap().len(), 2);
    for name in ["inc.b1", "inc.b2", "inc.bucket"] {
        assert_consistent(r, name);
    }
    // The file's breaker was not replaced: it is still open.
    assert_eq!(b1.enter().unwrap_err().reason(), Reason::BreakerOpen);

    // The bucket admits exactly its capacity.
    let bucket = r.point("inc.bucket").unwrap();
    let mut passed = 0;
    for _ in 0..60 {
        if let Ok(permit) = bucket.enter() {
            permit.finish(false);
            passed += 1;
        }
    }
    assert_eq!(passed, 20);

    // A later file edit: b1's rules stay the console's, b2 changes.
    std::fs::write(&path, incident_file(50, 300, 4, true)).unwrap();
    let report = r.load_policies(&path).unwrap();
    assert_eq!((report.layer.clone(), report.version), (file.clone(), 2));
    assert!(report.cleared.is_empty() && report.breakers_cleared.is_empty());
    assert_eq!(r.policy("inc.b1").unwrap().unwrap().max_visits(), Some(5));
    assert_eq!(
        origin(r, "inc.b1", Section::Rules),
        Some((Source::Console, 1))
    );
    assert_eq!(
        origin(r, "inc.b1", Section::Breaker),
        Some((file.clone(), 2))
    );
    assert_eq!(r.policy("inc.b2").unwrap().unwrap().max_visits(), Some(300));
    assert_eq!(r.breaker("inc.b2").unwrap(), Some(classic(4)));
    assert_eq!(origin(r, "inc.b2", Section::Rules), Some((file.clone(), 2)));
    for name in ["inc.b1", "inc.b2", "inc.bucket"] {
        assert_consistent(r, name);
    }
    // b1's breaker setting did not change, so it kept its state.
    assert_eq!(b1.enter().unwrap_err().reason(), Reason::BreakerOpen);

    // An empty console file removes the console's layer only.
    let report = r
        .apply_source(Source::Console, &PolicyFile::default())
        .unwrap();
    assert_eq!((report.layer.clone(), report.version), (Source::Console, 2));
    assert!(report.applied.is_empty());
    assert_eq!(report.cleared, ["inc.b1"]);
    assert!(
        report.breakers_cleared.is_empty(),
        "the console set no breaker"
    );
    assert_eq!(r.policy("inc.b1").unwrap().unwrap().max_visits(), Some(50));
    assert_eq!(origin(r, "inc.b1", Section::Rules), Some((file.clone(), 2)));
    assert_eq!(r.layers("inc.b1").unwrap().len(), 1);
    assert!(r.points_of(&Source::Console).is_empty());
    for name in ["inc.b1", "inc.b2", "inc.bucket"] {
        assert_consistent(r, name);
    }

    // A file that no longer mentions the bucket clears the file's layer of it.
    std::fs::write(&path, incident_file(50, 300, 4, false)).unwrap();
    let report = r.load_policies(&path).unwrap();
    assert_eq!(report.version, 3);
    assert_eq!(report.cleared, ["inc.bucket"]);
    assert!(report.breakers_cleared.is_empty());
    assert_eq!(
        r.effective_policy("inc.bucket").unwrap(),
        EffectivePolicy::default()
    );
    assert_eq!(r.policy("inc.bucket").unwrap(), None);
    assert!(r.layers("inc.bucket").unwrap().is_empty());
    assert_eq!(r.source_version(&file), 3);
    assert_eq!(r.source_version(&Source::Console), 2);
}

// ---------------------------------------------------------------------------------
// 3. Concurrency.
// ---------------------------------------------------------------------------------

/// xorshift64*, so each thread has its own reproducible random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const RACE_POINTS: [&str; 4] = ["race.a", "race.b", "race.c", "race.d"];

/// A random file of a random subset of the race points.
fn random_file(rng: &mut Rng) -> PolicyFile {
    let mut file = PolicyFile::default();
    for name in RACE_POINTS {
        if rng.below(2) == 0 {
            continue;
        }
        let mut b = Policy::builder().max_visits(rng.below(1000));
        if rng.below(2) == 0 {
            b = b.window(1 + rng.below(8), Duration::from_millis(250));
        }
        let mut c = PointConfig::builder().policy(b.build().unwrap()).build();
        match rng.below(3) {
            0 => c.breaker = Some(classic(1 + rng.below(5))),
            1 => c.breaker = Some(BreakerPolicy::Disabled),
            _ => {}
        }
        file.points.insert(name.to_owned(), c);
    }
    file
}

/// Eight threads race for 2000 edits in total: code (`set_policy`, `set_breaker`,
/// `clear_policy`), console (`apply_source` of random subsets) and inline files
/// (`load_policies_str`). Afterwards every point's effective policy is the reference
/// composition of its layers, the point enforces it, and every source's version
/// counts that source's edits.
#[test]
fn racing_sources_leave_every_point_consistent() {
    const THREADS: u64 = 8;
    const ITERATIONS: u64 = 250;
    let r = fresh();
    for name in RACE_POINTS {
        r.point(name).unwrap();
    }
    let counts: Vec<(u64, u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || {
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1).wrapping_mul(0xdead_beef));
                    let (mut code, mut console, mut file) = (0, 0, 0);
                    for i in 0..ITERATIONS {
                        let name = RACE_POINTS[rng.below(RACE_POINTS.len() as u64) as usize];
                        match t % 3 {
                            0 => {
                                match rng.below(4) {
                                    0 => r.set_breaker(name, classic(1 + (i % 7))).unwrap(),
                                    1 => r.clear_policy(name).unwrap(),
                                    _ => r.set_policy(name, visits(i)).unwrap(),
                                }
                                code += 1;
                            }
                            1 => {
                                let f = random_file(&mut rng);
                                r.apply_source(Source::Console, &f).unwrap();
                                console += 1;
                            }
                            _ => {
                                let text = random_file(&mut rng).to_text(Format::Toml).unwrap();
                                r.load_policies_str(&text, Format::Toml).unwrap();
                                file += 1;
                            }
                        }
                    }
                    (code, console, file)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for name in RACE_POINTS {
        assert_consistent(r, name);
        // No edit left a stale layer of another source behind: every layer's version
        // is at most its source's last version.
        for layer in r.layers(name).unwrap() {
            assert!(
                layer.version <= r.source_version(&layer.source),
                "{layer:?}"
            );
            assert!(layer.version >= 1);
        }
    }
    let total = |f: fn(&(u64, u64, u64)) -> u64| counts.iter().map(f).sum::<u64>();
    assert_eq!(r.source_version(&Source::Code), total(|c| c.0));
    assert_eq!(r.source_version(&Source::Console), total(|c| c.1));
    assert_eq!(
        r.source_version(&Source::file(INLINE_SOURCE)),
        total(|c| c.2)
    );
}

// ---------------------------------------------------------------------------------
// 4. Policy listeners.
// ---------------------------------------------------------------------------------

type Log = Arc<Mutex<Vec<PolicyChange>>>;

fn recorder(r: &Registry) -> (Log, resilience_runtime::ListenerId) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let id = r.add_policy_listener(move |c| sink.lock().unwrap().push(c.clone()));
    (log, id)
}

fn drain(log: &Log) -> Vec<PolicyChange> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// A policy listener sees exactly one change per change of a point's effective
/// settings, with the source that made it and the effective settings before and
/// after; an edit that the precedence hides is not reported; re-setting a layer with
/// the same content is reported (its version, hence the origin, changed); a
/// panicking listener neither breaks the edit nor other listeners; a removed
/// listener sees nothing more.
#[test]
fn policy_listeners_see_every_effective_change() {
    let r = fresh();
    let (log, id) = recorder(r);
    let name = "listen.a";

    // Code sets the rules.
    r.set_policy(name, visits(10)).unwrap();
    let changes = drain(&log);
    assert_eq!(changes.len(), 1);
    let c = &changes[0];
    assert_eq!((c.point, &c.source), (name, &Source::Code));
    assert_eq!(c.before, EffectivePolicy::default());
    assert_eq!(c.after, r.effective_policy(name).unwrap());
    assert_eq!(c.after.policy, Some(visits(10)));
    let mut last = c.after.clone();

    // The console overrides the rules.
    let console = PointConfig::builder().policy(visits(3)).build();
    r.set_layer(name, Source::Console, console.clone()).unwrap();
    let changes = drain(&log);
    assert_eq!(changes.len(), 1);
    let c = &changes[0];
    assert_eq!(c.source, Source::Console);
    assert_eq!(c.before, last);
    assert_eq!(c.after, r.effective_policy(name).unwrap());
    assert_eq!(c.after.policy, Some(visits(3)));
    assert_eq!(c.after.origin(Section::Rules).unwrap().version, 1);
    last = c.after.clone();

    // The same console layer again: same policy, but a new version, so the origin
    // of the rules changed and a change is reported.
    r.set_layer(name, Source::Console, console.clone()).unwrap();
    let changes = drain(&log);
    assert_eq!(changes.len(), 1);
    let c = &changes[0];
    assert_eq!(c.source, Source::Console);
    assert_eq!(c.before, last);
    assert_eq!(c.after.policy, c.before.policy);
    assert_eq!(c.after.breaker, c.before.breaker);
    assert_eq!(c.after.origin(Section::Rules).unwrap().version, 2);
    last = c.after.clone();

    // A code edit hidden by the console's rules changes nothing effective.
    r.set_policy(name, visits(7)).unwrap();
    assert!(drain(&log).is_empty());
    assert_eq!(r.effective_policy(name).unwrap(), last);

    // A code breaker is a new section: reported.
    r.set_breaker(name, BreakerPolicy::Disabled).unwrap();
    let changes = drain(&log);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].source, Source::Code);
    assert_eq!(changes[0].before, last);
    assert_eq!(changes[0].after.breaker, Some(BreakerPolicy::Disabled));
    last = changes[0].after.clone();

    // A precedence change that lets code win the rules: reported once, for this
    // point (the library attributes precedence changes to `Source::Code`).
    r.set_precedence(
        Precedence::builder()
            .section(
                Section::Rules,
                [SourceKind::Code, SourceKind::File, SourceKind::Console],
            )
            .build()
            .unwrap(),
    );
    let changes = drain(&log);
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].point, name);
    assert_eq!(changes[0].source, Source::Code);
    assert_eq!(changes[0].before, last);
    assert_eq!(changes[0].after.policy, Some(visits(7)));
    assert_eq!(
        changes[0].after.origin(Section::Rules).unwrap().source,
        Source::Code
    );
    r.set_precedence(Precedence::default());
    drain(&log);

    // One console apply over two points: one change per point.
    let mut file = PolicyFile::default();
    file.points.insert(
        name.to_owned(),
        PointConfig::builder().policy(visits(4)).build(),
    );
    file.points.insert(
        "listen.b".to_owned(),
        PointConfig::builder().policy(visits(8)).build(),
    );
    r.apply_source(Source::Console, &file).unwrap();
    let mut changes = drain(&log);
    changes.sort_by_key(|c| c.point);
    assert_eq!(
        changes
            .iter()
            .map(|c| (c.point, c.source.clone()))
            .collect::<Vec<_>>(),
        [("listen.a", Source::Console), ("listen.b", Source::Console)]
    );
    assert_eq!(changes[1].before, EffectivePolicy::default());
    for c in &changes {
        assert_eq!(c.after, r.effective_policy(c.point).unwrap());
    }

    // A panicking listener is isolated.
    let panicking = r.add_policy_listener(|_| panic!("listener panics on purpose"));
    r.set_layer(
        name,
        Source::Console,
        PointConfig::builder().policy(visits(2)).build(),
    )
    .unwrap();
    assert_eq!(r.policy(name).unwrap(), Some(visits(2)));
    let changes = drain(&log);
    assert_eq!(changes.len(), 1, "the other listener still sees the change");
    assert_eq!(changes[0].after.policy, Some(visits(2)));
    assert!(r.remove_listener(panicking));

    // A removed listener sees nothing more.
    assert!(r.remove_listener(id));
    assert!(!r.remove_listener(id));
    r.set_layer(
        name,
        Source::Console,
        PointConfig::builder().policy(visits(1)).build(),
    )
    .unwrap();
    assert_eq!(r.policy(name).unwrap(), Some(visits(1)));
    assert!(drain(&log).is_empty());
}

// ---------------------------------------------------------------------------------
// 5. from_registry round trip.
// ---------------------------------------------------------------------------------

/// Writes `PolicyFile::from_registry(r)` as TOML and as JSON, loads each into a
/// fresh registry as its only source, and compares every point's policy and breaker.
fn assert_round_trip(r: &Registry) {
    let file = PolicyFile::from_registry(r);
    for format in [Format::Toml, Format::Json] {
        let text = file.to_text(format).unwrap();
        let copy = fresh();
        let report = copy.load_policies_str(&text, format).unwrap();
        assert_eq!(report.applied.len(), file.points.len(), "{text}");
        for name in r.point_names() {
            let (a, b) = (
                r.effective_policy(name).unwrap(),
                copy.effective_policy(name).unwrap(),
            );
            assert_eq!(a.policy, b.policy, "{name} policy, {format:?}:\n{text}");
            assert_eq!(a.breaker, b.breaker, "{name} breaker, {format:?}:\n{text}");
            assert_eq!(copy.policy(name).unwrap(), a.policy, "{name} enforced");
            assert_eq!(copy.breaker(name).unwrap(), a.breaker, "{name} enforced");
            // Every section the original sets, the copy sets (from the file).
            for section in Section::ALL {
                assert_eq!(
                    a.origin(section).is_some(),
                    b.origin(section).is_some(),
                    "{name} {section}, {format:?}:\n{text}"
                );
            }
        }
    }
}

/// Several sources layered on several points (code, two files, the console, a
/// non-default precedence for the breaker, a point with only a breaker, a point
/// whose layers were all removed): `PolicyFile::from_registry` loaded into a second
/// registry as its only source enforces the same policy and breaker everywhere.
#[test]
fn from_registry_file_enforces_the_same_in_a_fresh_registry() {
    let r = fresh();
    // Code: rules and breakers.
    r.set_policy("rt.api", visits(100)).unwrap();
    r.set_breaker("rt.api", classic(3)).unwrap();
    r.set_policy("rt.observe", Policy::observe()).unwrap();
    r.set_breaker("rt.breaker_only", BreakerPolicy::default())
        .unwrap();
    r.set_policy("rt.gone", visits(1)).unwrap();
    r.clear_policy("rt.gone").unwrap();
    // Two files.
    r.load_policies_str(
        "[points.\"rt.api\"]\nwindow = { buckets = 4, bucket_width = \"250ms\" }\n\
         [points.\"rt.observe\"]\nshadow = true\nadaptive = { algorithm = \"gradient\", max_limit = 50 }\n",
        Format::Toml,
    )
    .unwrap();
    r.set_layer(
        "rt.api",
        Source::file("20-incident.toml"),
        PointConfig::builder()
            .policy(
                Policy::builder()
                    .max_visits(40)
                    .token_bucket(5.0, 10)
                    .window(8, Duration::from_millis(125))
                    .build()
                    .unwrap(),
            )
            .sections(Sections::NONE.with(Section::Rules).with(Section::Window))
            .breaker(BreakerPolicy::Disabled)
            .build(),
    )
    .unwrap();
    // The console.
    let console = PolicyFile::parse(
        "[points.\"rt.api\"]\nmax_visits = 5\n\
         [points.\"rt.observe\"]\nadaptive = \"off\"\ncluster = \"off\"\n",
        Format::Toml,
    )
    .unwrap();
    r.apply_source(Source::Console, &console).unwrap();
    // The code owns breakers.
    r.set_precedence(
        Precedence::builder()
            .section(
                Section::Breaker,
                [SourceKind::Code, SourceKind::Console, SourceKind::File],
            )
            .build()
            .unwrap(),
    );

    let api = r.effective_policy("rt.api").unwrap();
    assert_eq!(api.policy.as_ref().unwrap().max_visits(), Some(5));
    // The window: both files set it; `file:inline` sorts after `file:20-incident.toml`.
    assert_eq!(api.policy.as_ref().unwrap().window().buckets, 4);
    assert_eq!(
        api.origin(Section::Window).unwrap().source,
        Source::file(INLINE_SOURCE)
    );
    assert_eq!(api.breaker, Some(classic(3)));
    let observe = r.effective_policy("rt.observe").unwrap();
    assert!(observe.policy.as_ref().unwrap().is_shadow());
    assert_eq!(observe.policy.as_ref().unwrap().adaptive(), None);
    assert_eq!(
        r.effective_policy("rt.gone").unwrap(),
        EffectivePolicy::default()
    );
    for name in r.point_names() {
        assert_consistent(r, name);
    }

    let file = PolicyFile::from_registry(r);
    assert_eq!(
        file.points.keys().map(String::as_str).collect::<Vec<_>>(),
        ["rt.api", "rt.breaker_only", "rt.observe"]
    );
    assert_round_trip(r);
}
