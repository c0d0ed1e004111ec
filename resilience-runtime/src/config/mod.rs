//! Policy files: every point's policy in one TOML or JSON file, checked as a whole and
//! applied all or nothing, with optional hot reload.
//!
//! This module is the reference of the file's format; the guide's
//! [policy files](crate::guide::policy_files) chapter is the short way in.
//!
//! ```toml
//! strict = true                      # unknown point names are errors
//!
//! [points."order.create"]
//! max_visits = 1000
//! max_concurrency = 64
//! queue = { max_waiting = 100, max_wait = "50ms" }  # wait for a slot, oldest first
//! timeouts = { threshold = "250ms", max_count = 20 }
//! call_timeout = "200ms"             # deadline of `timeout = "..."` async fns
//! delay = { duration = "10s", retry_interval = "1s" }
//!
//! [points."order.create".window]
//! buckets = 10
//! bucket_width = "1s"
//!
//! [points."order.create".adaptive]   # adaptive concurrency limit
//! algorithm = "gradient"             # or "shedder"
//! max_limit = 200
//!
//! [points."order.create".cluster]    # cluster-wide limit in Redis (`redis` feature)
//! algorithm = "token_bucket"         # or "visits" (with `period` and `quota`)
//! url = "redis://127.0.0.1:6379/"
//! key = "limits:order.create"
//! rate = 500.0
//! burst = 100
//!
//! [points."order.create".breaker]    # circuit breaker
//! algorithm = "classic"              # or "sre", "disabled"
//! failure_rate = 0.5
//! open_wait = { base = "1s", multiplier = 2.0, max = "30s" }
//!
//! [points."order.create".retry]      # how `#[retry]` retries this point's calls
//! attempts = 3
//! base = "50ms"                      # exponential backoff, full jitter by default
//! budget = { percent = 20.0, min_per_second = 10, window = "10s" }
//!
//! [points."order.create".keys]       # per-key limits (hot keys), see `keys::KeyPolicy`
//! limit = 100                        # calls per period of each key
//! period = "1s"                      # the default
//! burst = 150                        # default: the limit
//! max_concurrency = 5                # calls of one key in flight
//! max_wait = "50ms"                  # wait for the key's next call instead of a refusal
//! max_keys = 4096                    # keys tracked exactly (the default)
//! # cluster = { url = "redis://127.0.0.1:6379/", prefix = "orders:" }  # fleet-wide (`redis`)
//!
//! [points."order.create".keys.overrides]
//! "vip-42" = 1000                    # a number: that value's limit
//! "blocked" = 0                      # 0 refuses every call of the value
//! "slow" = { max_concurrency = 1 }   # a table: any of limit, burst, max_concurrency
//! ```
//!
//! The same file in JSON is `{"strict": true, "points": {"order.create": {...}}}`
//! (overrides: `"keys": {"limit": 100, "overrides": {"vip-42": 1000, "slow":
//! {"max_concurrency": 1}}}`). In the repository, `examples/policies.toml` documents
//! every field.
//!
//! # Loading, all or nothing
//!
//! [`Registry::load_policies`] reads a file, checks everything (syntax, unknown fields,
//! types, ranges with [`PolicyBuilder::build`](crate::PolicyBuilder::build), duplicate
//! points, and in strict mode unknown points) and applies it only if there is no
//! problem at all; otherwise no policy changes and [`ConfigError::Invalid`] lists every
//! problem with its point and field:
//!
//! ```text
//! policy file policies.toml rejected, nothing applied (3 problems):
//!   - point `order.create`, field `max_visit`: unknown field `max_visit`, did you mean `max_visits`? (expected one of ...) (unknown_field)
//!   - point `order.create`, field `timeouts.threshold`: missing unit after `250` in duration "250" (one of ns, us, ms, s, m, h) (wrong_type)
//!   - point `serch`: no `#[downgrade]` or `#[breaker]` function declares point `serch` and it does not exist yet (strict mode) (unknown_point)
//! ```
//!
//! [`Registry::load_policies_str`] does the same for text in memory, and
//! [`PolicyFile::parse`] checks a file without applying it.
//!
//! # Hot reload
//!
//! [`Registry::watch_policies`] loads the file and then follows it: each burst of
//! writes is read once, after 200 ms of quiet, and applied with the same
//! all-or-nothing rule. A broken edit keeps the last good policies in force;
//! [`PolicyWatcher::status`] gives the version in force and the last error, and
//! [`WatchOptionsBuilder::on_reload`] a callback ([`Registry::watch_policies_with`]). The
//! watcher watches the file's directory, so editors that save by renaming and
//! Kubernetes ConfigMap symlink swaps are seen. An empty file is never applied by the
//! watcher (a half-written save looks like that): write an empty `[points]` table to
//! remove every policy. With the `tracing` feature each applied file is an `info`
//! event (file, version, points, cleared) and each rejected reload a `warn` event with
//! the whole error.
//!
//! # A file is a layer
//!
//! A file applies to the points it names, as its own layer (a
//! [`Source::File`], see [`sources`](crate::sources)
//! for how layers combine and which wins). A point that the previous load of the same
//! file configured and the new one leaves out loses that file's layer: it falls back
//! to what other sources set, or passes every call again. Other files, the console
//! and the program's `set_policy` are never touched by a file. Counters, in-flight
//! calls and delay state are kept across loads.
//!
//! A point table sets the sections it mentions: the rules if it has any rule key (or
//! no key at all: an empty table sets "no rule"), and `window`, `shadow`, `adaptive`,
//! `cluster`, `keys`, `breaker` and `retry` if present. `adaptive = "off"`,
//! `cluster = "off"` and `keys = "off"` set "none" over lower layers.
//!
//! # The keys of a point: its rules
//!
//! The [`policy`](crate::policy) module's table says what each rule does and which
//! bounds it keeps.
//!
//! | key | type | meaning |
//! |---|---|---|
//! | `strict` | bool, default `false` | (top level) a point name must be declared by an annotated function or already exist in the registry |
//! | `[points."NAME"]` | table | one per point; a point given twice is an error (JSON too) |
//! | `shadow` | bool, default `false` | dry run: rules are evaluated and counted (`shadow_downgrades`), calls are never downgraded |
//! | `max_visits` | integer ≥ 0 | downgrade when admitted visits in the window exceed it; `0` is a kill switch |
//! | `max_concurrency` | integer 0..=4194304 | at most this many calls in flight; never waits |
//! | `queue.max_waiting` | integer 1..=1000000, required | with `max_concurrency` or `adaptive`: calls that may wait for a slot (or for the adaptive limit's room) at once |
//! | `queue.max_wait` | duration, 0 < it <= `"1h"`, required | the longest a call waits for a slot |
//! | `queue.order` | `"oldest_first"` (default) \| `"newest_first"` | which waiter of a tier a freed slot goes to; newest first, a full queue refuses its oldest waiter to make room (see [`QueueOrder`]) |
//! | `max_exceptions` | integer ≥ 0 | downgrade once the window holds this many exceptions |
//! | `downgrade_percentage` | integer 0..=100, default 100 | probability that a tripped rule really downgrades |
//! | `exception_rate.rate` | number 0.0..=1.0, required | downgrade when exceptions / admitted visits ≥ rate |
//! | `exception_rate.min_visits` | integer ≥ 0, default 0 | the rate rule applies once visits exceed this |
//! | `timeouts.threshold` | duration > 0, required | a call slower than this is a timeout |
//! | `timeouts.max_count` | integer ≥ 0, required | downgrade once the window holds this many timeouts |
//! | `call_timeout` | duration, 0 < it ≤ `"24h"` | deadline of each call of an `async fn` with `timeout = "..."`, overriding the attribute's; the call is cut then |
//! | `token_bucket.rate` | number 0.0..=1e9, required | tokens added per second (`0` admits nothing) |
//! | `token_bucket.capacity` | integer 1..=1e9, required | bucket size, full at start |
//! | `token_bucket.max_wait` | duration, 0 < it <= `"1h"`, optional | a call finding no token waits for it if it is due within this; `capacity = 1` is pacing |
//! | `warm_up.period` | duration 1s..=1h, required | with `token_bucket`: the warm-up (Sentinel's); a cold point starts at `rate / cold_factor` |
//! | `warm_up.cold_factor` | number in (1, 100], default 3 | how much slower a cold point starts |
//! | `delay.duration` | duration > 0, required | after a trip, stay downgraded this long |
//! | `delay.retry_interval` | duration, 0 < it ≤ `duration`, optional | let one probe call through this often |
//! | `window.buckets` | integer 1..=3600, default 10 | number of buckets of the sliding window |
//! | `window.bucket_width` | duration > 0, default `"1s"` | width of one bucket |
//!
//! Sections can be written as sub-tables (`[points."x".timeouts]`) or inline
//! (`timeouts = { threshold = "250ms", max_count = 5 }`).
//!
//! # The sections of a point: breaker, retry, adaptive, cluster, keys
//!
//! A point's table may also hold a `breaker`, a `retry`, an `adaptive`, a `keys` and
//! (with the `redis` feature) a `cluster` section, applied with the same
//! all-or-nothing rule:
//!
//! | section / field | type | default | notes |
//! |---|---|---|---|
//! | `[points."x".breaker]` `algorithm` | `"sre"` \| `"classic"` \| `"disabled"` | required | `disabled` takes no other field |
//! | sre `k`, `protection` | number, integer | 1.5, 5 | `k` finite, >= 1.1 |
//! | sre `window`, `buckets` | duration, integer | `"10s"`, 40 | >= 1 ns per bucket |
//! | sre `force_pass_interval` | duration | `"1s"` | > 0 |
//! | sre `slow_call` | duration | none | a slower call counts as a failure |
//! | classic `failure_rate`, `slow_call_rate` | number | 0.5, none | 0..=1 |
//! | classic `slow_call_duration` | duration | `"1s"` | > 0 when `slow_call_rate` is set |
//! | classic `minimum_calls`, `consecutive_failures` | integer | 10, none | >= 1 |
//! | classic `window`, `buckets`, `half_open_probes` | duration, integer, integer | `"10s"`, 10, 3 | |
//! | sre and classic `cancellations_are_failures` | boolean | `false` | a call its caller cancelled in time counts as a failure (see the guide's [cancelled calls](crate::guide::timeouts#cancelled-calls)) |
//! | `[points."x".breaker.quorum]` `open_at`, `action` | integer, `"open"` \| `"half_open"` | none, `"open"` | classic only; `open_at` >= 2: a closed breaker takes `action` when that many live instances have it open (heartbeat client; see the guide's [peers section](crate::guide::fleet#breakers-that-know-their-peers)) |
//! | `[points."x".breaker.open_wait]` `base`, `multiplier`, `max`, `jitter` | duration, number, duration, number | `"5s"`, 1.0, max(`"5s"`, base), 0.0 | multiplier >= 1, jitter 0..=1 |
//! | `[points."x".retry]` `attempts` | integer | required | 1..=100 attempts in all, replacing the code's `#[retry]` / `call_retrying` arguments (see the guide's [retry settings at runtime](crate::guide::retries#retry-settings-at-runtime)) |
//! | retry `base`, `multiplier`, `max`, `jitter` | duration, number, duration, number | `"50ms"`, 2.0, max(`"2s"`, base), 1.0 | the backoff between attempts: base > 0, multiplier >= 1 (1 is a fixed wait), max >= base, jitter 0..=1 |
//! | `[points."x".retry.budget]` `percent`, `min_per_second`, `window` | number, integer, duration | 20.0, 10, `"10s"` | a budget of the point's own, replacing the one the code names: 0..=1000, <= 1000000, 1 s..=1 h |
//! | `[points."x".adaptive]` `algorithm` | `"gradient"` \| `"shedder"` | required | |
//! | gradient `initial_limit`, `min_limit`, `max_limit` | integer | 20, 1, 1000 | min <= initial <= max |
//! | gradient `smoothing`, `rtt_tolerance`, `queue_size` | number | 0.2, 1.25, 4.0 | |
//! | gradient `long_window`, `sample_window`, `min_samples` | integer, duration, integer | 600, `"100ms"`, 10 | `long_window`: windows between two probes of the no-load latency |
//! | shedder `window`, `buckets` | duration, integer | `"5s"`, 50 | |
//! | shedder `cpu_threshold` | integer (millicores) | 900 | 0..=999 |
//! | shedder `cool_off`, `default_min_rt` | duration | `"1s"`, `"1s"` | |
//! | shedder `flying_beta`, `min_overload_factor` | number | 0.9, 0.1 | |
//! | `[points."x".cluster]` `algorithm` | `"visits"` \| `"token_bucket"` | required | needs the `redis` feature |
//! | cluster `url`, `key` | string | required | a Redis URL: `redis://host:port/` for one server, `redis+cluster://host:port,host:port/` for a Redis Cluster, `rediss` for TLS (`redis-tls`); a non-empty key (a token bucket's not starting with `}`) |
//! | visits `period`, `quota` | duration, integer | required | 1 ms..=10 years, >= 1 |
//! | token_bucket `rate`, `burst` | number, integer | required | finite > 0, >= 1 |
//! | cluster `batch` | integer | 10 (token_bucket: `burst` if smaller) | tokens leased per round trip, >= 1; token_bucket: <= `burst` |
//! | `[points."x".keys]` `limit`, `period` | integer, duration | none, `"1s"` | per-key limits (hot keys): calls of each key per period, 0..=1e9 (0 refuses every call of a key), period 1 ms..=1 day, at most 1e9 calls a second; `keys = "off"` sets none over lower layers |
//! | keys `burst`, `max_concurrency` | integer, integer | `limit`, none | burst 1..=1e9 (needs `limit`); calls of one key in flight, 0..=4194304 |
//! | keys `max_keys` | integer | 4096 | keys tracked exactly, 16..=1048576 |
//! | keys `max_wait` | duration | none | a call whose key used its burst waits for the key's next call if it comes within this (pacing per key) instead of being refused; up to `"1h"`; needs `limit`; not with `cluster`; a call that waited in the queue, a dry run and the tower layer never wait for a key |
//! | keys `cluster = { url, prefix, batch, cold }` | table | none | (`redis` feature) every key's limit shared by the fleet: one bucket per value in Redis at `prefix` + the key's text, spent through a lease per hot key of `batch` tokens (default 10) dropped after `cold` without a call (default `"60s"`, 100 ms..=1 day); `url` and `prefix` required |
//! | `[points."x".keys.overrides]` `"VALUE" = N` or `{ limit, burst, max_concurrency }` | integer or table | none | one value's limit (a number), or any of the three fields (a table; the others are the section's); at most 10000 values of 1..=256 bytes; a problem names the value: `keys.overrides."vip-42".limit` |
//!
//! Every field of `keys` may be left out (a section without `limit` counts calls per
//! key but limits none, unless `max_concurrency` or an override does); an override's
//! fields replace the section's, the others are inherited (an override setting `limit`
//! and no `burst` has a burst of its own limit).
//!
//! # Durations
//!
//! Durations are strings with a unit: `"250ms"`, `"10s"`, `"1m30s"`, `"1.5s"` (units
//! `ns`, `us`, `ms`, `s`, `m`, `h`); a bare number is an error, so `250` can never
//! mean seconds in one place and milliseconds in another.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::config::Format;
//! use resilience_runtime::registry;
//!
//! let report = registry().load_policies_str(
//!     r#"
//!     [points."docs.config.create"]
//!     max_visits = 100
//!     timeouts = { threshold = "250ms", max_count = 5 }
//!     "#,
//!     Format::Toml,
//! )?;
//! assert_eq!(report.applied, ["docs.config.create"]);
//! assert_eq!(registry().policy("docs.config.create")?.unwrap().max_visits(), Some(100));
//!
//! // A broken file changes nothing and names every problem.
//! let err = registry()
//!     .load_policies_str(
//!         r#"{"points": {"docs.config.create": {"max_visits": "lots", "max_visit": 1}}}"#,
//!         Format::Json,
//!     )
//!     .unwrap_err();
//! let fields: Vec<_> = err.problems().iter().map(|p| p.field.as_deref().unwrap()).collect();
//! assert_eq!(fields, ["max_visits", "max_visit"]);
//! assert_eq!(registry().policy("docs.config.create")?.unwrap().max_visits(), Some(100));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Each file imports only from those it comes after (and from this one): `error`,
// `node`, `duration`, `report` (a point's problems and "did you mean"), the
// sections' checks (`sections`, `keys`, `retry`), `check` (a whole file), `watch`.
mod check;
mod duration;
mod error;
mod keys;
mod node;
mod report;
mod retry;
mod sections;
mod watch;

pub use error::{ConfigError, Problem, ProblemKind};
pub use watch::{PolicyWatcher, WatchOptions, WatchOptionsBuilder, WatchStatus};

use crate::adaptive::{AdaptiveConfig, GradientConfig};
use crate::breaker::{ClassicConfig, SreConfig};
use crate::error::PointNameError;
use crate::policy::{AdaptiveLimit, BreakerPolicy, QueueOrder};
use crate::registry::Registry;
use crate::sources::{Section, Source};
use crate::sync::Arc;
use node::Node;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The syntax of a policy file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

impl Format {
    /// The format a file's extension names: `.toml` or `.json` (any case).
    ///
    /// # Errors
    ///
    /// [`ConfigError::UnknownFormat`] for any other extension.
    pub fn from_path(path: &Path) -> Result<Format, ConfigError> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("toml") => Ok(Format::Toml),
            Some("json") => Ok(Format::Json),
            _ => Err(ConfigError::UnknownFormat {
                path: path.to_owned(),
            }),
        }
    }
}

/// A whole policy file: the `strict` flag and one [`PointConfig`] per point name.
///
/// Parse one with [`PolicyFile::parse`], write one with [`PolicyFile::to_text`], and
/// apply one with [`Registry::apply_source`] (or let
/// [`Registry::load_policies`] do all of it). It also implements serde's `Serialize`
/// and `Deserialize`, so it can be embedded in a larger configuration; deserialising
/// fails with every problem in the message.
///
/// # Examples
///
/// ```
/// use resilience_runtime::config::{Format, PointConfig, PolicyFile};
/// use resilience_runtime::Policy;
/// use std::time::Duration;
///
/// let mut file = PolicyFile::default();
/// file.strict = true;
/// let policy = Policy::builder().max_visits(10).delay(Duration::from_secs(5), None).build()?;
/// file.points.insert("search".into(), PointConfig::builder().policy(policy).build());
/// let text = file.to_text(Format::Toml)?;
/// assert!(text.contains("[points.search]"));
/// assert!(text.contains(r#"duration = "5s""#));
/// assert_eq!(PolicyFile::parse(&text, Format::Toml)?, file);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct PolicyFile {
    /// Unknown point names are errors: a point must be declared by a `#[downgrade]` or
    /// `#[breaker]` function of the program, or already exist in the registry.
    pub strict: bool,
    /// Every configured point, by name.
    pub points: BTreeMap<String, PointConfig>,
}

pub use crate::sources::PointConfig;

impl PolicyFile {
    /// Parses and checks a file's text, without applying it.
    ///
    /// The strict check needs a registry and is made when the file is applied.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] listing every problem.
    pub fn parse(text: &str, format: Format) -> Result<PolicyFile, ConfigError> {
        PolicyFile::parse_checked(text, format, false)
    }

    /// [`parse`](Self::parse) as a runtime built with every feature would: sections
    /// this build cannot enforce (a `cluster` section or a key's `cluster` without the
    /// `redis` feature) are read and checked like the others instead of refused. For
    /// tools that check policies for a fleet, as the admin console does; applying such
    /// a file to this build's registry refuses those sections.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] listing every problem.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::config::{Format, PolicyFile};
    ///
    /// let text = r#"
    ///     [points."orders.create"]
    ///     cluster = { algorithm = "visits", url = "redis://cache:6379/", key = "orders", period = "1s", quota = 500 }
    /// "#;
    /// let file = PolicyFile::parse_with_every_feature(text, Format::Toml)?;
    /// assert!(file.points["orders.create"].policy.cluster().is_some());
    /// // An invalid one is refused either way, naming the field.
    /// let bad = text.replace("redis://cache:6379/", "http://cache/");
    /// let err = PolicyFile::parse_with_every_feature(&bad, Format::Toml).unwrap_err();
    /// assert_eq!(err.problems()[0].field.as_deref(), Some("cluster.url"));
    /// # Ok::<(), resilience_runtime::config::ConfigError>(())
    /// ```
    pub fn parse_with_every_feature(text: &str, format: Format) -> Result<PolicyFile, ConfigError> {
        PolicyFile::parse_checked(text, format, true)
    }

    fn parse_checked(
        text: &str,
        format: Format,
        every_feature: bool,
    ) -> Result<PolicyFile, ConfigError> {
        let checked = parse_checked(text, format, every_feature);
        if checked.problems.is_empty() {
            Ok(checked.file)
        } else {
            Err(ConfigError::Invalid {
                path: None,
                problems: checked.problems,
            })
        }
    }

    /// What every point of a registry enforces, as a file: each point's sections that
    /// some layer sets ([`EffectivePolicy::to_config`](crate::sources::EffectivePolicy::to_config)).
    /// Loading it as the only source enforces the same.
    pub fn from_registry(registry: &Registry) -> PolicyFile {
        let points = registry
            .point_names()
            .into_iter()
            .filter_map(|name| {
                let config = registry.effective_policy(name).ok()?.to_config()?;
                Some((name.to_owned(), config))
            })
            .collect();
        PolicyFile {
            strict: false,
            points,
        }
    }

    /// Writes the file as TOML or JSON (pretty-printed). Fields left at their default
    /// are omitted; durations are written in the largest exact unit.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] if the serialiser refuses a value (a policy built
    /// with [`PolicyBuilder::build`](crate::PolicyBuilder::build) never makes it).
    pub fn to_text(&self, format: Format) -> Result<String, ConfigError> {
        let result = match format {
            Format::Toml => toml::to_string(self).map_err(|e| e.to_string()),
            Format::Json => serde_json::to_string_pretty(self).map_err(|e| e.to_string()),
        };
        result.map_err(|message| ConfigError::Invalid {
            path: None,
            problems: vec![Problem::new(None, None, ProblemKind::WrongType, message)],
        })
    }
}

/// Parses the text into a tree, then checks it; syntax errors become one problem.
fn parse_checked(text: &str, format: Format, every_feature: bool) -> check::Checked {
    // Some editors start UTF-8 files with a byte-order mark; neither parser wants it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root: Result<Node, Problem> = match format {
        Format::Toml => toml::from_str(text).map_err(|e| toml_problem(text, &e)),
        Format::Json => serde_json::from_str(text).map_err(|e| {
            Problem::new(
                None,
                None,
                ProblemKind::Syntax,
                format!("JSON syntax error: {e}"),
            )
        }),
    };
    match root {
        Ok(root) => check::check(&root, every_feature),
        Err(problem) => check::Checked {
            problems: vec![problem],
            ..check::Checked::default()
        },
    }
}

/// A TOML parse error as a problem. The parser rejects a duplicate key itself; such an
/// error is traced back to the point (and field) it concerns so the message names them.
fn toml_problem(text: &str, e: &toml::de::Error) -> Problem {
    let (line, column) = e.span().map_or((0, 0), |s| line_column(text, s.start));
    let generic = || {
        Problem::new(
            None,
            None,
            ProblemKind::Syntax,
            format!(
                "TOML syntax error at line {line}, column {column}: {}",
                e.message()
            ),
        )
    };
    let Some(span) = e.span() else {
        return generic();
    };
    if !e.message().contains("duplicate key") {
        return generic();
    }
    match duplicate_key_path(text, span).as_deref() {
        Some([points, name]) if points == "points" => Problem::new(
            Some(name),
            None,
            ProblemKind::DuplicatePoint,
            format!(
                "point `{}` is configured more than once (again at line {line})",
                error::shown(name)
            ),
        ),
        Some([points, name, field @ ..]) if points == "points" => {
            let field = field.join(".");
            Problem::new(
                Some(name),
                Some(&field),
                ProblemKind::DuplicateField,
                format!("`{field}` is given twice (again at line {line})"),
            )
        }
        Some([key]) => Problem::new(
            None,
            Some(key),
            ProblemKind::DuplicateField,
            format!("`{key}` is given twice (again at line {line})"),
        ),
        _ => generic(),
    }
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The full key path of the duplicate key at `span`: the table header in force plus
/// the dotted key of its line, or the header itself when the duplicate is a header.
fn duplicate_key_path(text: &str, span: std::ops::Range<usize>) -> Option<Vec<String>> {
    let line_start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..span.end)?;
    let trimmed = line.trim_start();
    if let Some(header) = trimmed.strip_prefix('[') {
        // `[points."order.create"]`: the span ends at the duplicate key.
        return key_path(header.trim_start_matches('['));
    }
    // A `key = value` line: find the table header above it.
    let mut path = Vec::new();
    for previous in text.get(..line_start)?.lines().rev() {
        let previous = previous.trim();
        if let Some(header) = previous.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            let end = header.rfind(']')?;
            let inner = header.get(..end)?.trim_end_matches(']');
            path = key_path(inner)?;
            break;
        }
    }
    path.extend(key_path(line)?);
    Some(path)
}

/// The path of a (possibly dotted and quoted) TOML key, read with the TOML parser
/// itself so that quoting and escapes are handled exactly.
fn key_path(key: &str) -> Option<Vec<String>> {
    let table: toml::Table = toml::from_str(&format!("{key} = 0")).ok()?;
    let mut path = Vec::new();
    let mut current = &table;
    loop {
        let mut entries = current.iter();
        let (k, v) = entries.next()?;
        path.push(k.clone());
        match v {
            toml::Value::Table(t) => current = t,
            _ => return Some(path),
        }
    }
}

/// What a successful load did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadReport {
    /// The layer the file was applied to.
    pub layer: Source,
    /// That source's version after this load: 1 for a file's first load, increased by
    /// one by every successful load, never by a rejected one; for the console, the
    /// console's version.
    pub version: u64,
    /// The file, if the policies came from one.
    pub source: Option<PathBuf>,
    /// The points whose layer was set, sorted.
    pub applied: Vec<String>,
    /// The points that the source's previous load configured and this one does not
    /// mention: the source's layer of them was removed (they fall back to other
    /// sources' layers, or pass every call), sorted.
    pub cleared: Vec<String>,
    /// The points whose breaker the source's previous load set and this one has no
    /// `breaker` section for, sorted.
    pub breakers_cleared: Vec<String>,
}

impl PointConfig {
    /// A short fingerprint of these settings (16 hex digits): equal settings have
    /// equal digests, in every process and version of this crate that writes them
    /// the same way ([`PolicyFile::to_text`]'s JSON). Heartbeats carry the digest of
    /// each point's effective settings so the console can tell which instances agree.
    pub fn digest(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        // FNV-1a, 64 bits: stable, and enough to tell settings apart at a glance.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
}

/// The source of text loaded without a path ([`Registry::load_policies_str`]).
pub const INLINE_SOURCE: &str = "inline";

impl Registry {
    /// Reads a TOML (`.toml`) or JSON (`.json`) policy file and applies it, all or
    /// nothing, as the layer of [`Source::File`] named by the path.
    ///
    /// Every point in the file gets the file's layer (see [`crate::sources`] for what a
    /// point table sets); points that the file's previous load configured but it no
    /// longer mentions lose the file's layer and fall back to other sources (code, the
    /// console, other files); such a point that nothing else holds, declares or
    /// configures is then [retired](Registry::retire), its memory given back. Other
    /// sources' layers are never touched. An unchanged
    /// breaker is kept with its state; a changed one starts with an empty window.
    /// Counters, in-flight calls and delay state are kept, as with
    /// [`set_policy`](Registry::set_policy). Points are updated one after the other:
    /// during the few microseconds of the apply, a call on another thread may see
    /// some points already updated and others not yet.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Io`] if the file cannot be read, [`ConfigError::UnknownFormat`]
    /// for another extension, and [`ConfigError::Invalid`] listing every problem of
    /// the file; on any error no policy changes.
    pub fn load_policies(&self, path: impl AsRef<Path>) -> Result<LoadReport, ConfigError> {
        let path = path.as_ref();
        let format = Format::from_path(path)?;
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
            path: path.to_owned(),
            error,
        })?;
        self.load_text(&text, format, Some(path))
    }

    /// Like [`load_policies`](Registry::load_policies), from text, as the file source
    /// named [`INLINE_SOURCE`].
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] listing every problem; nothing is applied.
    pub fn load_policies_str(&self, text: &str, format: Format) -> Result<LoadReport, ConfigError> {
        self.load_text(text, format, None)
    }

    /// Applies a parsed [`PolicyFile`] as the whole layer of `source`, with the same
    /// rules as [`load_policies`](Registry::load_policies) (strict check, all or
    /// nothing, removing the source's layers of points it no longer mentions).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] if `strict` is set and a point is unknown, or if a
    /// breaker is invalid (a field the configuration's builder rejects).
    pub fn apply_source(
        &self,
        source: Source,
        file: &PolicyFile,
    ) -> Result<LoadReport, ConfigError> {
        self.apply_checked(source, None, checked_of(file), None)
    }

    /// [`apply_source`](Registry::apply_source) with the source's version given (the
    /// console's policy version).
    #[cfg(feature = "heartbeat")]
    pub(crate) fn apply_source_version(
        &self,
        source: Source,
        file: &PolicyFile,
        version: u64,
    ) -> Result<LoadReport, ConfigError> {
        self.apply_checked(source, Some(version), checked_of(file), None)
    }

    /// The number of policy-file loads applied to this registry so far, over every
    /// file source (0 before the first); see
    /// [`source_version`](Registry::source_version) for one file's.
    pub fn policy_file_version(&self) -> u64 {
        self.source_versions()
            .iter()
            .filter(|(s, _)| matches!(s, Source::File(_)))
            .map(|(_, v)| v)
            .sum()
    }

    fn load_text(
        &self,
        text: &str,
        format: Format,
        path: Option<&Path>,
    ) -> Result<LoadReport, ConfigError> {
        self.apply_checked(
            file_source(path),
            None,
            parse_checked(text, format, false),
            path,
        )
    }

    /// The strict check, then the apply if nothing at all is wrong.
    fn apply_checked(
        &self,
        source: Source,
        version: Option<u64>,
        mut checked: check::Checked,
        path: Option<&Path>,
    ) -> Result<LoadReport, ConfigError> {
        if checked.file.strict {
            for name in &checked.names {
                if crate::error::check_point_name(name).is_ok()
                    && !crate::declared::is_declared(name)
                    && self.find(name).is_none()
                {
                    checked.problems.push(Problem::new(
                        Some(name),
                        None,
                        ProblemKind::UnknownPoint,
                        format!(
                            "no `#[downgrade]` or `#[breaker]` function declares point `{}` \
                             and it does not exist yet (strict mode)",
                            error::shown(name)
                        ),
                    ));
                }
            }
        }
        // Files parsed here are checked already; a `PolicyFile` made in code is not.
        for (name, config) in &checked.file.points {
            if let Some(Err(e)) = config.breaker.as_ref().map(BreakerPolicy::validate) {
                checked.problems.push(Problem::new(
                    Some(name),
                    Some(&format!("breaker.{}", e.field)),
                    ProblemKind::OutOfRange,
                    e.message,
                ));
            }
            if let Err(e) = crate::error::check_point_name(name) {
                checked.problems.push(name_problem(name, &e));
            }
            // A fleet's document can hold sections this build cannot enforce: refuse
            // them rather than leave them silently unenforced.
            if !cfg!(feature = "redis") {
                let policy = Some(&config.policy);
                let needs_redis = [
                    ("cluster", policy.is_some_and(|p| p.cluster().is_some())),
                    (
                        "keys.cluster",
                        policy
                            .and_then(|p| p.keys())
                            .is_some_and(|k| k.cluster().is_some()),
                    ),
                ];
                for (field, set) in needs_redis {
                    if set {
                        checked.problems.push(Problem::new(
                            Some(name),
                            Some(field),
                            ProblemKind::UnknownField,
                            format!("`{field}` needs the `redis` feature of resilience-runtime"),
                        ));
                    }
                }
            }
        }
        if !checked.problems.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.map(Path::to_owned),
                problems: checked.problems,
            });
        }
        // New names the registry cannot take (its cap on undeclared points) refuse the
        // whole file, before any point is made.
        let new_undeclared: Vec<&String> = checked
            .file
            .points
            .keys()
            .filter(|n| self.find(n).is_none() && !crate::declared::is_declared(n))
            .collect();
        let room = self
            .max_undeclared_points()
            .saturating_sub(self.undeclared_points());
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        for name in new_undeclared.iter().skip(room) {
            let e = PointNameError::too_many(name, self.max_undeclared_points());
            checked.problems.push(name_problem(name, &e));
        }
        let mut points = Vec::with_capacity(checked.file.points.len());
        for (name, config) in &checked.file.points {
            if checked.problems.is_empty() {
                // A point another thread made meanwhile may still take the last room.
                match self.point_handle(name) {
                    Ok(point) => points.push((point, config)),
                    Err(e) => checked.problems.push(name_problem(name, &e)),
                }
            }
        }
        if !checked.problems.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.map(Path::to_owned),
                problems: checked.problems,
            });
        }
        let mut cleared = Vec::new();
        let mut breakers_cleared = Vec::new();
        let version = self.edit_layers(&source, version, |table| {
            let mut edits: Vec<_> = points
                .iter()
                .map(|(point, config)| (Arc::clone(point), Some((*config).clone())))
                .collect();
            for name in table.points_of(&source) {
                let had_breaker = table
                    .layer(name, &source)
                    .is_some_and(|l| l.settings.breaker.is_some());
                match checked.file.points.get(name) {
                    None => {
                        cleared.push(name.to_owned());
                        if had_breaker {
                            breakers_cleared.push(name.to_owned());
                        }
                        if let Some(point) = self.find(name) {
                            edits.push((point, None));
                        }
                    }
                    Some(c) if had_breaker && c.breaker.is_none() => {
                        breakers_cleared.push(name.to_owned());
                    }
                    Some(_) => {}
                }
            }
            edits
        });
        // Points the source made and no longer names, that nothing else holds or
        // configures, are retired: a file that shrinks gives their memory back.
        for name in &cleared {
            let _ = self.retire(name);
        }
        let report = LoadReport {
            layer: source,
            version,
            source: path.map(Path::to_owned),
            applied: checked.file.points.keys().cloned().collect(),
            cleared,
            breakers_cleared,
        };
        #[cfg(feature = "tracing")]
        {
            let r = &report;
            let (points, cleared) = (r.applied.len(), r.cleared.len());
            let breakers_cleared = r.breakers_cleared.len();
            if matches!(r.layer, Source::File(_)) {
                tracing::info!(file = ?r.source, layer = %r.layer, version = r.version, points,
                    cleared, breakers_cleared, "policy file applied");
            } else {
                tracing::info!(layer = %r.layer, version = r.version, points, cleared,
                    breakers_cleared, "policy source applied");
            }
        }
        Ok(report)
    }
}

/// A point the registry does not take, as a problem of the file.
fn name_problem(name: &str, e: &PointNameError) -> Problem {
    Problem::new(
        Some(name),
        None,
        ProblemKind::InvalidPointName,
        e.to_string(),
    )
}

/// The file source of a path, or [`INLINE_SOURCE`].
fn file_source(path: Option<&Path>) -> Source {
    Source::file(path.map_or_else(|| INLINE_SOURCE.to_owned(), |p| p.display().to_string()))
}

/// A file made in code, as if the checker had read it (the strict check and the
/// breaker check still run).
fn checked_of(file: &PolicyFile) -> check::Checked {
    check::Checked {
        file: file.clone(),
        names: file.points.keys().cloned().collect(),
        problems: Vec::new(),
    }
}

// ---- serde representation ----
//
// Writing goes through borrowed mirror structs so that durations become strings and
// defaults are left out. Reading goes through `Node` and the checker, which collects
// every problem where a derived `Deserialize` would stop at the first.

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct FileOut<'a> {
    #[serde(skip_serializing_if = "is_false")]
    strict: bool,
    points: BTreeMap<&'a str, PointOut>,
}

/// Scalar fields first: TOML needs plain values before sub-tables.
#[derive(Serialize)]
struct PointOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_visits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrency: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_exceptions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    downgrade_percentage: Option<u8>,
    /// Left out when unset, so the digest of settings without it is unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    call_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<QueueOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exception_rate: Option<ExceptionRateOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeouts: Option<TimeoutsOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_bucket: Option<TokenBucketOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warm_up: Option<WarmUpOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<DelayOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<WindowOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptive: Option<OrOff<AdaptiveOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<OrOff<ClusterOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keys: Option<OrOff<keys::KeysOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    breaker: Option<BreakerOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<retry::RetryOut>,
}

#[derive(Serialize)]
struct QueueOut {
    max_waiting: u64,
    max_wait: String,
    /// Written only when not the default (`oldest_first`).
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<&'static str>,
}

/// A cluster-wide limit: `algorithm`, its fields, and `batch` unless it is the default.
#[derive(Serialize, Default)]
struct ClusterOut {
    algorithm: &'static str,
    url: String,
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<u64>,
}

impl ClusterOut {
    fn of(limit: &crate::policy::ClusterLimit) -> ClusterOut {
        use crate::policy::ClusterLimit;
        let (ClusterLimit::Visits {
            url, key, batch, ..
        }
        | ClusterLimit::TokenBucket {
            url, key, batch, ..
        }) = limit;
        let common = ClusterOut {
            url: url.clone(),
            key: key.clone(),
            batch: Some(*batch).filter(|&b| b != limit.default_batch()),
            ..ClusterOut::default()
        };
        match limit {
            ClusterLimit::Visits { period, quota, .. } => ClusterOut {
                algorithm: "visits",
                period: Some(duration::format_duration(*period)),
                quota: Some(*quota),
                ..common
            },
            ClusterLimit::TokenBucket { rate, burst, .. } => ClusterOut {
                algorithm: "token_bucket",
                rate: Some(*rate),
                burst: Some(*burst),
                ..common
            },
        }
    }
}

#[derive(Serialize)]
struct ExceptionRateOut {
    rate: f64,
    min_visits: u64,
}

#[derive(Serialize)]
struct TimeoutsOut {
    threshold: String,
    max_count: u64,
}

#[derive(Serialize)]
struct TokenBucketOut {
    rate: f64,
    capacity: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_wait: Option<String>,
}

#[derive(Serialize)]
struct WarmUpOut {
    period: String,
    cold_factor: f64,
}

#[derive(Serialize)]
struct DelayOut {
    duration: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_interval: Option<String>,
}

#[derive(Serialize)]
struct WindowOut {
    buckets: u64,
    bucket_width: String,
}

/// A breaker: `algorithm`, then every field that differs from the algorithm's default
/// (the two algorithms' fields share one struct; those of the other one stay `None`).
#[derive(Serialize, Default)]
struct BreakerOut {
    algorithm: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    k: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    protection: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_call_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_call_duration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    minimum_calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consecutive_failures: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    buckets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    force_pass_interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_call: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    half_open_probes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    open_wait: Option<OpenWaitOut>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cancellations_are_failures: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum: Option<QuorumOut>,
}

#[derive(Serialize)]
struct QuorumOut {
    open_at: u32,
    action: &'static str,
}

#[derive(Serialize)]
struct OpenWaitOut {
    base: String,
    multiplier: f64,
    max: String,
    jitter: f64,
}

/// An adaptive limit, written like [`BreakerOut`].
#[derive(Serialize, Default)]
struct AdaptiveOut {
    algorithm: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    initial_limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    smoothing: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt_tolerance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_size: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    long_window: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sample_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    critical_reserve: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    buckets: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_threshold: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cool_off: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default_min_rt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flying_beta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_overload_factor: Option<f64>,
}

/// `value`, unless it is the default (then the field is left out).
fn unless_default<T: PartialEq>(value: T, default: T) -> Option<T> {
    (value != default).then_some(value)
}

/// [`unless_default`] for a duration, written as text.
fn duration_unless_default(
    value: std::time::Duration,
    default: std::time::Duration,
) -> Option<String> {
    unless_default(value, default).map(duration::format_duration)
}

impl BreakerOut {
    fn of(b: &BreakerPolicy) -> BreakerOut {
        let text = duration_unless_default;
        match b {
            BreakerPolicy::Sre {
                config: c,
                slow_call,
            } => {
                let d = SreConfig::default();
                BreakerOut {
                    algorithm: "sre",
                    k: unless_default(c.k, d.k),
                    protection: unless_default(c.protection, d.protection),
                    window: text(c.window, d.window),
                    buckets: unless_default(c.buckets, d.buckets),
                    force_pass_interval: text(c.force_pass_interval, d.force_pass_interval),
                    slow_call: slow_call.map(duration::format_duration),
                    cancellations_are_failures: c.cancellations_are_failures,
                    ..BreakerOut::default()
                }
            }
            BreakerPolicy::Classic(c) => {
                let d = ClassicConfig::default();
                BreakerOut {
                    algorithm: "classic",
                    failure_rate: unless_default(c.failure_rate, d.failure_rate),
                    slow_call_rate: c.slow_call_rate,
                    slow_call_duration: text(c.slow_call_duration, d.slow_call_duration),
                    minimum_calls: unless_default(c.minimum_calls, d.minimum_calls),
                    consecutive_failures: c.consecutive_failures,
                    window: text(c.window, d.window),
                    buckets: unless_default(c.buckets, d.buckets),
                    half_open_probes: unless_default(c.half_open_probes, d.half_open_probes),
                    open_wait: unless_default(c.open_wait, d.open_wait).map(|w| OpenWaitOut {
                        base: duration::format_duration(w.base),
                        multiplier: w.multiplier,
                        max: duration::format_duration(w.max),
                        jitter: w.jitter,
                    }),
                    cancellations_are_failures: c.cancellations_are_failures,
                    quorum: c.quorum.map(|q| QuorumOut {
                        open_at: q.open_at,
                        action: q.action.as_str(),
                    }),
                    ..BreakerOut::default()
                }
            }
            BreakerPolicy::Disabled => BreakerOut {
                algorithm: "disabled",
                ..BreakerOut::default()
            },
        }
    }
}

impl AdaptiveOut {
    fn off() -> OrOff<AdaptiveOut> {
        OrOff::Off("off")
    }

    fn of(a: &AdaptiveLimit) -> OrOff<AdaptiveOut> {
        OrOff::On(AdaptiveOut::of_limit(a))
    }

    fn of_limit(a: &AdaptiveLimit) -> AdaptiveOut {
        let text = duration_unless_default;
        match a {
            AdaptiveLimit::Gradient(c) => {
                let d = GradientConfig::default();
                AdaptiveOut {
                    algorithm: "gradient",
                    initial_limit: unless_default(c.initial_limit, d.initial_limit),
                    min_limit: unless_default(c.min_limit, d.min_limit),
                    max_limit: unless_default(c.max_limit, d.max_limit),
                    smoothing: unless_default(c.smoothing, d.smoothing),
                    rtt_tolerance: unless_default(c.rtt_tolerance, d.rtt_tolerance),
                    queue_size: unless_default(c.queue_size, d.queue_size),
                    long_window: unless_default(c.long_window, d.long_window),
                    sample_window: text(c.sample_window, d.sample_window),
                    min_samples: unless_default(c.min_samples, d.min_samples),
                    critical_reserve: unless_default(c.critical_reserve, d.critical_reserve),
                    ..AdaptiveOut::default()
                }
            }
            AdaptiveLimit::Shedder(c) => {
                let d = AdaptiveConfig::default();
                AdaptiveOut {
                    algorithm: "shedder",
                    window: text(c.window, d.window),
                    buckets: unless_default(c.buckets, d.buckets),
                    cpu_threshold: unless_default(c.cpu_threshold, d.cpu_threshold),
                    cool_off: text(c.cool_off, d.cool_off),
                    default_min_rt: text(c.default_min_rt, d.default_min_rt),
                    flying_beta: unless_default(c.flying_beta, d.flying_beta),
                    min_overload_factor: unless_default(
                        c.min_overload_factor,
                        d.min_overload_factor,
                    ),
                    ..AdaptiveOut::default()
                }
            }
        }
    }
}

impl PointOut {
    /// The sections the settings set, each written even at its default value (so that
    /// it still sets it when read back); fields within a section are left out at their
    /// default.
    fn of(config: &PointConfig) -> PointOut {
        let p = &config.policy;
        let sets = |s: Section| config.sets(s);
        use duration::format_duration as text;
        let rules = sets(Section::Rules);
        let mut out = PointOut {
            shadow: sets(Section::Shadow).then_some(p.is_shadow()),
            max_visits: p.max_visits().filter(|_| rules),
            max_concurrency: p.max_concurrency().filter(|_| rules),
            max_exceptions: p.max_exceptions().filter(|_| rules),
            downgrade_percentage: Some(p.downgrade_percentage()).filter(|&d| rules && d != 100),
            call_timeout: p.call_timeout().filter(|_| rules).map(text),
            queue: p.queue().filter(|_| rules).map(|q| QueueOut {
                max_waiting: q.max_waiting,
                max_wait: text(q.max_wait),
                order: (q.order != QueueOrder::OldestFirst).then(|| q.order.as_str()),
            }),
            exception_rate: p
                .exception_rate()
                .filter(|_| rules)
                .map(|r| ExceptionRateOut {
                    rate: r.rate,
                    min_visits: r.min_visits,
                }),
            timeouts: p.timeouts().filter(|_| rules).map(|t| TimeoutsOut {
                threshold: text(t.threshold),
                max_count: t.max_count,
            }),
            token_bucket: p.token_bucket().filter(|_| rules).map(|t| TokenBucketOut {
                rate: t.rate,
                capacity: t.capacity,
                max_wait: p.token_wait().map(text),
            }),
            warm_up: p.warm_up().filter(|_| rules).map(|w| WarmUpOut {
                period: text(w.period),
                cold_factor: w.cold_factor,
            }),
            delay: p.delay().filter(|_| rules).map(|d| DelayOut {
                duration: text(d.duration),
                retry_interval: d.retry_interval.map(text),
            }),
            window: sets(Section::Window).then(|| {
                let w = p.window();
                WindowOut {
                    buckets: w.buckets,
                    bucket_width: text(w.bucket_width),
                }
            }),
            adaptive: sets(Section::Adaptive).then(|| {
                p.adaptive()
                    .as_ref()
                    .map_or(AdaptiveOut::off(), AdaptiveOut::of)
            }),
            cluster: sets(Section::Cluster).then(|| {
                p.cluster()
                    .map_or(OrOff::Off("off"), |c| OrOff::On(ClusterOut::of(c)))
            }),
            keys: sets(Section::Keys).then(|| {
                p.keys()
                    .map_or(OrOff::Off("off"), |k| OrOff::On(keys::KeysOut::of(k)))
            }),
            breaker: config.breaker.as_ref().map(BreakerOut::of),
            retry: config.retry.as_ref().map(retry::RetryOut::of),
        };
        let no_rule_written = out.max_visits.is_none()
            && out.max_concurrency.is_none()
            && out.max_exceptions.is_none()
            && out.downgrade_percentage.is_none()
            && out.exception_rate.is_none()
            && out.timeouts.is_none()
            && out.call_timeout.is_none()
            && out.queue.is_none()
            && out.token_bucket.is_none()
            && out.warm_up.is_none()
            && out.delay.is_none();
        let other_written = out.shadow.is_some()
            || out.window.is_some()
            || out.adaptive.is_some()
            || out.cluster.is_some()
            || out.keys.is_some()
            || out.breaker.is_some()
            || out.retry.is_some();
        if rules && no_rule_written && other_written {
            // Rules set to "none": a table with other keys but no rule key would not
            // set the rules when read back, so say it with the default percentage.
            out.downgrade_percentage = Some(100);
        }
        out
    }
}

/// A section that is either written out or `"off"` (set to "none" over lower layers).
#[derive(Serialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum OrOff<T> {
    On(T),
    Off(&'static str),
}

impl Serialize for PolicyFile {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FileOut {
            strict: self.strict,
            points: self
                .points
                .iter()
                .map(|(name, config)| (name.as_str(), PointOut::of(config)))
                .collect(),
        }
        .serialize(serializer)
    }
}

impl Serialize for PointConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        PointOut::of(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PolicyFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PolicyFile, D::Error> {
        let root = Node::deserialize(deserializer)?;
        let checked = check::check(&root, false);
        if checked.problems.is_empty() {
            Ok(checked.file)
        } else {
            Err(serde::de::Error::custom(problem_list(&checked.problems)))
        }
    }
}

impl<'de> Deserialize<'de> for PointConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<PointConfig, D::Error> {
        const NAME: &str = "<point>";
        let node = Node::deserialize(deserializer)?;
        let root = Node::Map(vec![(
            "points".to_owned(),
            Node::Map(vec![(NAME.to_owned(), node)]),
        )]);
        let mut checked = check::check(&root, false);
        match checked.file.points.remove(NAME) {
            Some(config) if checked.problems.is_empty() => Ok(config),
            _ => Err(serde::de::Error::custom(problem_list(&checked.problems))),
        }
    }
}

fn problem_list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_toml_keys_name_their_point() {
        let cases = [
            (
                "[points.\"order.create\"]\nmax_visits = 1\n[points.\"order.create\"]\nmax_visits = 2\n",
                ProblemKind::DuplicatePoint,
                Some("order.create"),
                None,
            ),
            (
                "[points]\n\"a\" = { max_visits = 1 }\n\"a\" = { max_visits = 2 }\n",
                ProblemKind::DuplicatePoint,
                Some("a"),
                None,
            ),
            (
                "[points.a]\nmax_visits = 1\nmax_visits = 2\n",
                ProblemKind::DuplicateField,
                Some("a"),
                Some("max_visits"),
            ),
            (
                "[points.a.window]\nbuckets = 1\n[points.a.window]\nbuckets = 2\n",
                ProblemKind::DuplicateField,
                Some("a"),
                Some("window"),
            ),
            (
                "strict = true\nstrict = false\n",
                ProblemKind::DuplicateField,
                None,
                Some("strict"),
            ),
        ];
        for (text, kind, point, field) in cases {
            let err = PolicyFile::parse(text, Format::Toml).unwrap_err();
            let p = &err.problems()[0];
            assert_eq!(
                (p.kind, p.point.as_deref(), p.field.as_deref()),
                (kind, point, field),
                "{text}\n{err}"
            );
        }
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = PolicyFile::parse("[points.a]\nmax_visits = \n", Format::Toml).unwrap_err();
        assert_eq!(err.problems()[0].kind, ProblemKind::Syntax);
        assert!(
            err.problems()[0].message.contains("line 2, column 14"),
            "{err}"
        );
        let err = PolicyFile::parse("{\"points\": [}", Format::Json).unwrap_err();
        assert_eq!(err.problems()[0].kind, ProblemKind::Syntax);
        assert!(err.problems()[0].message.contains("line 1"), "{err}");
    }

    #[test]
    fn line_column_counts_chars() {
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("", 0), (1, 1));
    }
}
