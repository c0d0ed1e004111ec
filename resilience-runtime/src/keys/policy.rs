//! The `keys` section of a policy: per-key limits, their overrides, and how many keys
//! a point tracks.

use super::rule::{Rule, NO_INFLIGHT_LIMIT};
use crate::builder::builder;
use crate::error::FieldError;
use crate::error::PolicyError;
use crate::limit::Gcra;
use crate::limit::MAX_CONCURRENCY;
use std::time::Duration;

/// The default of [`KeyPolicyBuilder::max_keys`]: keys a point tracks exactly.
pub const DEFAULT_MAX_KEYS: u64 = 4096;

/// The most keys a point may track ([`KeyPolicyBuilder::max_keys`]).
pub const MAX_KEYS: u64 = 1 << 20;

/// The most overrides one `keys` section may have.
pub const MAX_KEY_OVERRIDES: u64 = 10_000;

/// The longest override value, in bytes.
pub const MAX_OVERRIDE_LEN: usize = 256;

/// The limits of one key: at most `limit` calls per `period` (a token bucket holding
/// `burst`) and at most `max_concurrency` in flight. Each is optional.
///
/// A view of a section ([`KeyPolicy::rule`], [`KeyPolicy::rule_of`]); the section is
/// set with [`KeyPolicy::builder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyRule {
    /// Calls per `period`; 0 refuses every call of the key.
    pub limit: Option<u64>,
    /// Calls the key may make at once after a quiet time; `None` is `limit`.
    pub burst: Option<u64>,
    /// Calls of the key in flight at once; 0 refuses every call of the key.
    pub max_concurrency: Option<u64>,
}

/// What an override changes for one key value: each field given replaces the
/// section's own, the others are kept. Build one with [`KeyOverride::builder`] and
/// give it to [`KeyPolicyBuilder::override_rule`].
///
/// # Examples
///
/// ```
/// use resilience_runtime::keys::{KeyOverride, KeyPolicy};
/// use std::time::Duration;
///
/// let slow = KeyOverride::builder().max_concurrency(1).build();
/// let keys = KeyPolicy::builder()
///     .limit(10, Duration::from_secs(1))
///     .override_rule("slow-tenant", slow)
///     .build()?;
/// assert_eq!(keys.rule_of("slow-tenant").max_concurrency, Some(1));
/// assert_eq!(keys.rule_of("slow-tenant").limit, Some(10));
/// # Ok::<(), resilience_runtime::PolicyError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyOverride {
    /// Calls per period (the section's period).
    pub limit: Option<u64>,
    /// The key's burst.
    pub burst: Option<u64>,
    /// The key's calls in flight.
    pub max_concurrency: Option<u64>,
}

impl KeyOverride {
    /// Starts an override that changes nothing.
    pub fn builder() -> KeyOverrideBuilder {
        KeyOverrideBuilder {
            config: KeyOverride::default(),
        }
    }

    /// An override of the limit alone (a policy file's `"vip-42" = 1000`).
    pub(crate) fn of_limit(limit: u64) -> KeyOverride {
        KeyOverride {
            limit: Some(limit),
            ..KeyOverride::default()
        }
    }
}

builder! {
    /// Builds a [`KeyOverride`]; start from [`KeyOverride::builder`]. A setting left
    /// out keeps the section's. The override is checked with its section, by
    /// [`KeyPolicyBuilder::build`].
    pub struct KeyOverrideBuilder => KeyOverride;

    /// Returns the override.
    build -> Infallible;

    /// Calls per period (the section's period); 0 blocks the value.
    limit: Option<u64>,
    /// The key's burst (unset with `limit` set: the override's own limit).
    burst: Option<u64>,
    /// The key's calls in flight.
    max_concurrency: Option<u64>,
}

/// Per-key limits of a point (Sentinel's hot-parameter rule): calls are counted per
/// value of a key (an argument, `#[downgrade(key = user_id)]`, or
/// [`Point::enter_key`](crate::Point::enter_key)), after the point's own rules. A
/// refused call is downgraded with [`Reason::HotKey`](crate::Reason::HotKey); its
/// listener event names the key.
///
/// # Bounds
///
/// - A point tracks at most [`max_keys`](KeyPolicyBuilder::max_keys) keys, each
///   exactly: over any interval `t`, a key's admitted calls are at most
///   `burst + limit * t / period`, and at most `max_concurrency` of them are in
///   flight, under any number of threads.
/// - With [`max_wait`](KeyPolicyBuilder::max_wait), a call past its key's burst waits
///   for the key's next token instead (reserved for it, so calls queue behind each
///   other); it runs only once that token has refilled, so the bound above holds for
///   the times calls run.
/// - Every overridden value is always tracked.
/// - A key that is not tracked (more keys than `max_keys` are active) is counted in a
///   sketch of two rows of cells it shares with other untracked keys; a cell's count
///   is never below the count of any key it holds, so an untracked key is never
///   admitted beyond its own limits either. It may be refused early: only when, in
///   both rows, the keys sharing its cell have used what the key's limit leaves. A
///   row has about `2 * max_keys` cells, so with `U` untracked keys each calling at a
///   rate `r` under the limit `L` (per second), a key shares a cell with `U / (2 *
///   max_keys)` others on average, and is refused early with probability at most
///   `((U / (2 * max_keys)) / (L / r - 1))²` (Markov's bound in each of the two
///   independent rows): for 100 000 untracked keys of the default 4 096 tracked,
///   each calling at a hundredth of its limit, 1.5 %. The keys that call most are
///   moved into the table (a frequency sketch decides, as in TinyLFU), so a heavy key
///   is counted exactly.
/// - Memory: about 140 bytes per tracked key (`max_keys` of them), made on the first
///   call with a key; see [`Point::key_stats`](crate::Point::key_stats).
///
/// # Cluster-wide limits
///
/// With [`cluster`](KeyPolicyBuilder::cluster) (`redis` feature), a call the key's
/// local rule admits also needs a token of the key's bucket in Redis, shared by every
/// instance, with the key's own rule (an override's, for an overridden value; see
/// [`KeyCluster`](super::KeyCluster) for the layout and the leases). A refusal there
/// takes nothing from the local rule, and is
/// [`Reason::HotKey`](crate::Reason::HotKey) too, counted apart in
/// [`KeyClusterStats::refused`](super::KeyClusterStats::refused). Each instance
/// spends tokens it leased from the bucket, so over any interval of length `d`, one
/// key's calls admitted by `N` instances are at most
///
/// `burst + limit × d / period + N × (max_held + batch × starts)`
///
/// with the key's `limit`, `period` and `burst`, where
/// `max_held = batch + batch / 4` is the most tokens one lease holds (the
/// bound of [`ClusterLease`](crate::redis::ClusterLease), per key), `batch` is
/// [`KeyCluster::batch`](super::KeyCluster::batch) (the key's burst, if smaller) and
/// `starts` is how many times an instance started the key's lease in or just before
/// the interval: once for a key that stays hot, one more each time it comes back
/// after going cold or being dropped from a full map. Starting a lease takes one
/// Redis round trip (at most its 100 ms timeout) on a background thread, and the
/// call never waits for it: until the lease's first batch is answered, up to `batch`
/// calls of the key are admitted on credit (by the local rule alone) and the rest
/// are refused; the credit is paid back from the lease's first tokens, before any
/// later call is admitted, so it only adds to the bound while it is unpaid.
///
/// Outside that bound, as for [`ClusterLease`](crate::redis::ClusterLease): while
/// Redis is unreachable, each instance admits what the key's local rule admits (its
/// fallback), and a key without a lease (not tracked by a full table, or a lease
/// that could not start) is limited by its local rule alone. The other way, a
/// dropped lease loses its unspent tokens (at most `max_held`), and a lease's
/// fallback never lets a key past its local rule.
///
/// # Examples
///
/// ```
/// use resilience_runtime::keys::KeyPolicy;
/// use resilience_runtime::{registry, Policy, Reason};
/// use std::time::Duration;
///
/// let keys = KeyPolicy::builder()
///     .limit(2, Duration::from_secs(60))
///     .override_limit("vip", 100)
///     .override_limit("blocked", 0)
///     .build()?;
/// registry().set_policy("docs.keys", Policy::builder().keys(keys).build()?)?;
/// let point = registry().point("docs.keys")?;
/// assert!(point.enter_key("alice").is_ok());
/// assert!(point.enter_key("alice").is_ok());
/// assert_eq!(point.enter_key("alice").unwrap_err().reason(), Reason::HotKey);
/// assert!(point.enter_key("bob").is_ok(), "every key has its own limit");
/// assert!(point.enter_key("vip").is_ok());
/// assert!(point.enter_key("blocked").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct KeyPolicy {
    pub(crate) max_keys: u64,
    pub(crate) period: Duration,
    pub(crate) rule: KeyRule,
    /// By value, sorted, each value once.
    pub(crate) overrides: Vec<(String, KeyOverride)>,
    /// How long a call may wait for its key's next call (pacing per key).
    pub(crate) max_wait: Option<Duration>,
    /// The keys' buckets in Redis, if their limits are cluster-wide.
    pub(crate) cluster: Option<super::KeyCluster>,
}

impl KeyPolicy {
    /// Starts a section with no limit, a period of one second and
    /// [`DEFAULT_MAX_KEYS`] tracked keys.
    pub fn builder() -> KeyPolicyBuilder {
        KeyPolicyBuilder {
            policy: KeyPolicy {
                max_keys: DEFAULT_MAX_KEYS,
                period: Duration::from_secs(1),
                rule: KeyRule {
                    limit: None,
                    burst: None,
                    max_concurrency: None,
                },
                overrides: Vec::new(),
                max_wait: None,
                cluster: None,
            },
            duplicates: Vec::new(),
        }
    }

    /// How long a call may wait for its key's next call, if it may
    /// ([`KeyPolicyBuilder::max_wait`]).
    pub fn max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// Keys tracked exactly.
    pub fn max_keys(&self) -> u64 {
        self.max_keys
    }

    /// The period of [`KeyRule::limit`].
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The rule of every key without an override.
    pub fn rule(&self) -> KeyRule {
        self.rule
    }

    /// The overrides, by value.
    pub fn overrides(&self) -> &[(String, KeyOverride)] {
        &self.overrides
    }

    /// Where the keys' limits are shared, if they are cluster-wide (only a runtime
    /// built with the `redis` feature accepts such a section).
    pub fn cluster(&self) -> Option<&super::KeyCluster> {
        self.cluster.as_ref()
    }

    /// The rule of an overridden value: the section's, with the override's fields.
    pub fn rule_of(&self, value: &str) -> KeyRule {
        match self
            .overrides
            .binary_search_by(|(v, _)| v.as_str().cmp(value))
        {
            Ok(i) => self.merged(&self.overrides[i].1),
            Err(_) => self.rule,
        }
    }

    /// The hot-path form of `r` under this section's period.
    pub(crate) fn compile(&self, r: &KeyRule) -> Rule {
        let gcra = r.limit.map(|limit| {
            if limit == 0 {
                Gcra::CLOSED
            } else {
                let rate = limit as f64 / self.period.as_secs_f64();
                Gcra::per_second(rate, r.burst.unwrap_or(limit))
            }
        });
        Rule {
            gcra,
            // Validated at most MAX_CONCURRENCY (2^22), so it fits the engine's u32.
            max_inflight: r.max_concurrency.map_or(NO_INFLIGHT_LIMIT, |m| {
                u32::try_from(m).unwrap_or(NO_INFLIGHT_LIMIT)
            }),
            max_wait: self.max_wait.map_or(0, |d| crate::clock::nanos(d).max(1)),
            held: false,
        }
    }

    pub(crate) fn merged(&self, o: &KeyOverride) -> KeyRule {
        KeyRule {
            limit: o.limit.or(self.rule.limit),
            burst: o.burst.or(if o.limit.is_some() {
                None
            } else {
                self.rule.burst
            }),
            max_concurrency: o.max_concurrency.or(self.rule.max_concurrency),
        }
    }
}

/// Builds a [`KeyPolicy`]; see there.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyPolicyBuilder {
    policy: KeyPolicy,
    duplicates: Vec<String>,
}

impl KeyPolicyBuilder {
    /// At most `limit` calls of each key per `period` (a token bucket of `limit` per
    /// `period`, holding [`burst`](Self::burst) = `limit` unless set).
    #[must_use = "a setter returns the changed builder"]
    pub fn limit(mut self, limit: u64, period: Duration) -> Self {
        self.policy.rule.limit = Some(limit);
        self.policy.period = period;
        self
    }

    /// Calls a key may make at once after a quiet time (default: its limit).
    #[must_use = "a setter returns the changed builder"]
    pub fn burst(mut self, burst: u64) -> Self {
        self.policy.rule.burst = Some(burst);
        self
    }

    /// A call whose key used up its burst waits for the key's next call instead of
    /// being refused, if that comes within `max_wait` (the key's calls are paced at
    /// its limit, as [`PolicyBuilder::token_wait`](crate::PolicyBuilder::token_wait)
    /// does for a point): a sync call sleeps, an async one awaits a timer (the
    /// `tokio` feature; without it, or through
    /// [`Point::try_enter_key`](crate::Point::try_enter_key) and the tower layer, it
    /// is refused at once). The
    /// bound is unchanged: a waiting call runs only once its token has refilled. At
    /// most one hour; needs `limit`; not with a cluster setting.
    ///
    /// ```
    /// use resilience_runtime::keys::KeyPolicy;
    /// use resilience_runtime::{Clock, ManualClock, Policy, Registry};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let registry: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::manual(&clock))));
    /// let keys = KeyPolicy::builder()
    ///     .limit(10, Duration::from_secs(1)) // one call every 100 ms per key
    ///     .burst(1)
    ///     .max_wait(Duration::from_millis(250))
    ///     .build()?;
    /// registry.set_policy("docs.key_wait", Policy::builder().keys(keys).build()?)?;
    /// let point = registry.point("docs.key_wait")?;
    /// let start = clock.now();
    /// for _ in 0..3 {
    ///     point.enter_key("a")?.finish(false); // the 2nd and 3rd wait 100 ms each
    /// }
    /// assert_eq!(clock.now() - start, Duration::from_millis(200));
    /// assert!(point.enter_key("b").is_ok(), "another key does not wait");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use = "a setter returns the changed builder"]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.policy.max_wait = Some(max_wait);
        self
    }

    /// At most `max` calls of each key in flight.
    #[must_use = "a setter returns the changed builder"]
    pub fn max_concurrency(mut self, max: u64) -> Self {
        self.policy.rule.max_concurrency = Some(max);
        self
    }

    /// Keys tracked exactly (default [`DEFAULT_MAX_KEYS`], at most [`MAX_KEYS`]).
    #[must_use = "a setter returns the changed builder"]
    pub fn max_keys(mut self, max: u64) -> Self {
        self.policy.max_keys = max;
        self
    }

    /// Makes every key's limit (and each override's) cluster-wide through Redis
    /// (`redis` feature): see [`KeyCluster`](super::KeyCluster) and the bound in
    /// [`KeyPolicy`]. Needs a `limit`, on the section or on some override.
    #[must_use = "a setter returns the changed builder"]
    #[cfg(feature = "redis")]
    pub fn cluster(mut self, cluster: super::KeyCluster) -> Self {
        self.policy.cluster = Some(cluster);
        self
    }

    /// The limit of one value (`0` blocks it). A string key matches its text, an
    /// integer key its decimal text, a `bool` `true` or `false`.
    #[must_use = "a setter returns the changed builder"]
    pub fn override_limit(self, value: impl Into<String>, limit: u64) -> Self {
        self.override_rule(value, KeyOverride::of_limit(limit))
    }

    /// The rule of one value: the fields of `o` replace the section's (an override
    /// that sets `limit` and no `burst` has a burst of its own limit).
    #[must_use = "a setter returns the changed builder"]
    pub fn override_rule(mut self, value: impl Into<String>, o: KeyOverride) -> Self {
        let value = value.into();
        match self
            .policy
            .overrides
            .binary_search_by(|(v, _)| v.as_str().cmp(&value))
        {
            Ok(_) => self.duplicates.push(value),
            Err(at) => self.policy.overrides.insert(at, (value, o)),
        }
        self
    }

    /// Validates the section.
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] naming each invalid field (`keys.limit`, `keys.period`,
    /// `keys.burst`, `keys.max_concurrency`, `keys.max_keys`, `keys.overrides`, and
    /// with `redis` `keys.cluster` (no limit to share), `keys.cluster.url`,
    /// `keys.cluster.prefix`, `keys.cluster.batch`, `keys.cluster.cold`).
    ///
    /// ```
    /// use resilience_runtime::keys::KeyPolicy;
    /// use std::time::Duration;
    ///
    /// let err = KeyPolicy::builder().limit(10, Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.fields(), ["keys.period"]);
    /// ```
    pub fn build(self) -> Result<KeyPolicy, PolicyError> {
        let mut errors = Vec::new();
        self.policy.check(&mut errors);
        for d in &self.duplicates {
            errors.push(FieldError {
                field: "keys.overrides",
                message: format!("{d:?} is overridden twice"),
            });
        }
        if errors.is_empty() {
            Ok(self.policy)
        } else {
            Err(PolicyError { errors })
        }
    }
}

/// The most calls per period, and the largest burst.
const MAX_LIMIT: u64 = 1_000_000_000;

impl KeyPolicy {
    /// Appends an error for each invalid field.
    pub(crate) fn check(&self, errors: &mut Vec<FieldError>) {
        let mut fail = |field: &'static str, message: String| {
            errors.push(FieldError { field, message });
        };
        if !(16..=MAX_KEYS).contains(&self.max_keys) {
            fail(
                "keys.max_keys",
                format!("must be in 16..={MAX_KEYS}, got {}", self.max_keys),
            );
        }
        if self.period < Duration::from_millis(1) || self.period > Duration::from_secs(86_400) {
            fail(
                "keys.period",
                format!("must be from 1ms to 1 day, got {:?}", self.period),
            );
        }
        let mut rule = |r: &KeyRule, limit: &'static str, burst: &'static str, conc, who: &str| {
            if let Some(l) = r.limit {
                if l > MAX_LIMIT {
                    fail(limit, format!("{who}must be at most {MAX_LIMIT}, got {l}"));
                } else if l > 0
                    && self.period >= Duration::from_millis(1)
                    && (l as f64 / self.period.as_secs_f64()) > 1e9
                {
                    fail(
                        limit,
                        format!(
                            "{who}is more than 1e9 calls per second over {:?}",
                            self.period
                        ),
                    );
                }
            }
            if let Some(b) = r.burst {
                if r.limit.is_none() {
                    fail(
                        burst,
                        format!("{who}needs `limit`: the burst is of its calls"),
                    );
                } else if b == 0 || b > MAX_LIMIT {
                    fail(burst, format!("{who}must be in 1..={MAX_LIMIT}, got {b}"));
                }
            }
            if let Some(c) = r.max_concurrency {
                if c > MAX_CONCURRENCY {
                    fail(
                        conc,
                        format!("{who}must be at most {MAX_CONCURRENCY}, got {c}"),
                    );
                }
            }
        };
        rule(
            &self.rule,
            "keys.limit",
            "keys.burst",
            "keys.max_concurrency",
            "",
        );
        for (value, o) in &self.overrides {
            let who = format!("override {value:?}: ");
            rule(
                &self.merged(o),
                "keys.overrides.limit",
                "keys.overrides.burst",
                "keys.overrides.max_concurrency",
                &who,
            );
        }
        if self.overrides.len() as u64 > MAX_KEY_OVERRIDES {
            fail(
                "keys.overrides",
                format!(
                    "at most {MAX_KEY_OVERRIDES} values may be overridden, got {}",
                    self.overrides.len()
                ),
            );
        }
        for (value, _) in &self.overrides {
            if value.is_empty() || value.len() > MAX_OVERRIDE_LEN {
                fail(
                    "keys.overrides",
                    format!(
                        "a value must be 1 to {MAX_OVERRIDE_LEN} bytes long, got {} bytes",
                        value.len()
                    ),
                );
            } else if value.chars().any(char::is_control) {
                fail(
                    "keys.overrides",
                    format!("{value:?} holds a control character"),
                );
            }
        }
        if let Some(w) = self.max_wait {
            let limited =
                self.rule.limit.is_some() || self.overrides.iter().any(|(_, o)| o.limit.is_some());
            if w.is_zero() || w > Duration::from_secs(3600) {
                errors.push(FieldError {
                    field: "keys.max_wait",
                    message: format!("must be greater than zero and at most 1h, got {w:?}"),
                });
            } else if !limited {
                errors.push(FieldError {
                    field: "keys.max_wait",
                    message: "needs `limit`: calls wait for their key's next call".into(),
                });
            }
            if self.cluster.is_some() {
                errors.push(FieldError {
                    field: "keys.max_wait",
                    message: "cannot be used with `cluster`: a key's fleet-wide calls are \
                              leased, not reserved"
                        .into(),
                });
            }
        }
        if let Some(c) = &self.cluster {
            let limited = |r: &KeyRule| r.limit.is_some_and(|l| l > 0);
            if !limited(&self.rule) && !self.overrides.iter().any(|(_, o)| limited(&self.merged(o)))
            {
                errors.push(FieldError {
                    field: "keys.cluster",
                    message: "needs `limit` (on the section or an override): the cluster \
                              bucket is a key's limit"
                        .into(),
                });
            }
            c.check(errors);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_bad_field_is_named() {
        let err = KeyPolicy::builder()
            .limit(2_000_000_000, Duration::from_secs(1))
            .burst(0)
            .max_concurrency(MAX_CONCURRENCY + 1)
            .max_keys(3)
            .override_limit("", 1)
            .override_limit("a\nb", 1)
            .override_limit("x", 5)
            .override_limit("x", 6)
            .build()
            .unwrap_err();
        assert_eq!(
            err.fields(),
            [
                "keys.max_keys",
                "keys.limit",
                "keys.burst",
                "keys.max_concurrency",
                "keys.overrides.max_concurrency",
                "keys.overrides.max_concurrency",
                "keys.overrides.max_concurrency",
                "keys.overrides",
                "keys.overrides",
                "keys.overrides",
            ],
            "{err}"
        );
        let fast = KeyPolicy::builder()
            .limit(1000, Duration::from_micros(999))
            .build()
            .unwrap_err();
        assert_eq!(fast.fields(), ["keys.period"]);
        let rate = KeyPolicy::builder()
            .limit(1_000_000_000, Duration::from_millis(1))
            .build()
            .unwrap_err();
        assert_eq!(rate.fields(), ["keys.limit"]);
        let burst_alone = KeyPolicy::builder().burst(5).build().unwrap_err();
        assert_eq!(burst_alone.fields(), ["keys.burst"]);
    }

    #[test]
    fn overrides_inherit_what_they_do_not_set() {
        let p = KeyPolicy::builder()
            .limit(10, Duration::from_secs(1))
            .burst(20)
            .max_concurrency(3)
            .override_limit("vip", 1000)
            .override_rule("slow", KeyOverride::builder().max_concurrency(1).build())
            .build()
            .unwrap();
        let vip = p.rule_of("vip");
        assert_eq!(
            (vip.limit, vip.burst, vip.max_concurrency),
            (Some(1000), None, Some(3))
        );
        let slow = p.rule_of("slow");
        assert_eq!(
            (slow.limit, slow.burst, slow.max_concurrency),
            (Some(10), Some(20), Some(1))
        );
        assert_eq!(p.rule_of("other"), p.rule());
        assert_eq!(p.overrides().len(), 2);
    }
}
