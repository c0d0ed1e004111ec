//! The cluster-wide side of a `keys` section (enforced with the `redis` feature): where every key's
//! shared bucket lives in Redis, and the stable Redis name of a key.

use crate::bloom::murmur3_x64_128;
use crate::builder::builder;
use crate::error::{FieldError, PolicyError};
use std::fmt::{self, Write};
use std::time::Duration;

/// The default of [`KeyCluster::cold`]: a key's lease is dropped after 60 s without
/// a call.
pub const DEFAULT_KEY_COLD: Duration = Duration::from_secs(60);

/// The longest key text a key's Redis name holds as it is, in bytes; a longer text
/// is named by its first bytes and a hash of the whole (see [`KeyCluster`]).
pub const KEY_NAME_TEXT_MAX: usize = 128;

/// Makes a key's limit cluster-wide (`redis` feature): every value of the key has one
/// token bucket in Redis shared by every instance, with the key's own rule (`limit`
/// per period, holding `burst`; an override's rule for an overridden value), and each
/// instance spends tokens it leases from that bucket in batches
/// ([`ClusterLease`](crate::redis::ClusterLease)), one lease per hot key. Set with
/// [`KeyPolicyBuilder::cluster`](super::KeyPolicyBuilder::cluster); see
/// [`KeyPolicy`](super::KeyPolicy) for the bound it keeps.
///
/// # In Redis
///
/// The bucket of a key whose text (its `Display`) is `t` lives at the keys
/// `{prefix + t}.tokens` and `{prefix + t}.ts` (the layout of
/// [`RedisTokenLimiter`](crate::redis::RedisTokenLimiter)). A text longer than
/// [`KEY_NAME_TEXT_MAX`] bytes is replaced by its first bytes (cut at a character),
/// `~` and the 32 hex digits of its murmur3 (x64, 128 bits, seed 0), so the name is
/// bounded and still the same in every process; such a name is always longer than
/// any text kept as it is, so two keys share a bucket only if their texts are equal
/// or their hashes collide. Every instance must give a key the same text (the same
/// `Display`); the key's in-process fingerprint is never used, as it differs between
/// processes.
///
/// # Leases
///
/// A lease is started on the chores' thread (never on the call's) for a key the
/// point's table tracks (every key while the table has room, the most frequent ones
/// when it is full), and kept in a map of at most `max_keys` leases: when it is full
/// the least recently used lease is dropped. A lease is dropped once its key has had
/// no call for [`cold`](Self::cold) (looked at every `cold / 4`), and its unspent
/// tokens with it. Each lease is one refill thread and one Redis connection of this
/// process. Leases outlive policy changes that keep the section's `max_keys` and
/// cluster setting (a key whose rule changed starts a new one); after a change
/// that drops them, the old leases go cold and are dropped like any other.
///
/// While Redis is unreachable a lease is in its fallback mode
/// ([`ClusterMode::Fallback`](crate::redis::ClusterMode::Fallback)): the key's
/// local rule alone decides, and the lease pings Redis every 100 ms until it answers.
///
/// # Examples
///
/// ```
/// use resilience_runtime::keys::{KeyCluster, KeyPolicy};
/// use std::time::Duration;
///
/// // 100 calls a minute per tenant across the fleet, 5 tokens per Redis round trip.
/// let keys = KeyPolicy::builder()
///     .limit(100, Duration::from_secs(60))
///     .cluster(KeyCluster::builder("redis://127.0.0.1:6379/", "tenants:").batch(5).build()?)
///     .build()?;
/// assert_eq!(keys.cluster().unwrap().cold, Duration::from_secs(60));
/// # Ok::<(), resilience_runtime::PolicyError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KeyCluster {
    /// Redis URL, such as `redis://127.0.0.1:6379/`, or a Redis Cluster's, such as
    /// `redis+cluster://10.0.0.1:6379,10.0.0.2:6379/`.
    pub url: String,
    /// Prefix of every key's Redis name (not empty, not starting with `}`), such as
    /// `"tenants:"`.
    pub prefix: String,
    /// Tokens leased per Redis round trip, at least 1 (default
    /// [`DEFAULT_BATCH`](crate::policy::DEFAULT_BATCH)). A key whose burst is smaller
    /// leases its burst.
    pub batch: u64,
    /// How long a key goes without a call before its lease is dropped, from 100 ms
    /// to 1 day (default [`DEFAULT_KEY_COLD`]).
    pub cold: Duration,
}

impl KeyCluster {
    /// Starts a setting of buckets at Redis `url` under `prefix`, with the default
    /// batch and cold time.
    pub fn builder(url: impl Into<String>, prefix: impl Into<String>) -> KeyClusterBuilder {
        KeyClusterBuilder {
            config: KeyCluster::new(url, prefix),
        }
    }

    /// Buckets at Redis `url` under `prefix`, with the default batch and cold time;
    /// unchecked.
    pub(crate) fn new(url: impl Into<String>, prefix: impl Into<String>) -> KeyCluster {
        KeyCluster {
            url: url.into(),
            prefix: prefix.into(),
            batch: crate::policy::DEFAULT_BATCH,
            cold: DEFAULT_KEY_COLD,
        }
    }

    /// Every invalid field, as one error.
    fn validate(&self) -> Result<(), PolicyError> {
        let mut errors = Vec::new();
        self.check(&mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(PolicyError { errors })
        }
    }

    /// The Redis name of the key whose text is `text` (see the type docs); the
    /// bucket's keys are `{name}.tokens` and `{name}.ts`.
    ///
    /// ```
    /// use resilience_runtime::keys::KeyCluster;
    ///
    /// let c = KeyCluster::builder("redis://127.0.0.1/", "tenants:").build()?;
    /// assert_eq!(c.name_of(&"acme"), "tenants:acme");
    /// assert_eq!(c.name_of(&42u64), "tenants:42");
    /// let long = c.name_of(&"x".repeat(1000));
    /// assert_eq!(long.len(), "tenants:".len() + 128 + 1 + 32);
    /// # Ok::<(), resilience_runtime::PolicyError>(())
    /// ```
    pub fn name_of(&self, text: &(impl fmt::Display + ?Sized)) -> String {
        redis_name(&self.prefix, &text)
    }

    /// Appends an error for each invalid field (`keys.cluster.*`).
    pub(crate) fn check(&self, errors: &mut Vec<FieldError>) {
        let mut fail = |field: &'static str, message: String| {
            errors.push(FieldError { field, message });
        };
        if let Err(reason) = crate::policy::check_redis_url(&self.url) {
            fail("keys.cluster.url", reason);
        }
        if self.prefix.is_empty() {
            fail("keys.cluster.prefix", "must not be empty".into());
        } else if let Err(reason) = crate::policy::check_bucket_name(&self.prefix) {
            fail("keys.cluster.prefix", reason);
        }
        if self.batch == 0 {
            fail("keys.cluster.batch", "must be at least 1".into());
        }
        if self.cold < Duration::from_millis(100) || self.cold > Duration::from_secs(86_400) {
            fail(
                "keys.cluster.cold",
                format!("must be from 100ms to 1 day, got {:?}", self.cold),
            );
        }
    }
}

builder! {
    /// Builds a [`KeyCluster`]; start from [`KeyCluster::builder`]. Each setter is
    /// named after the field it sets; [`build`](Self::build) checks them all.
    pub struct KeyClusterBuilder => KeyCluster;

    /// Checks every setting and returns the setting.
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] naming each invalid field, as
    /// [`KeyPolicyBuilder::build`](super::KeyPolicyBuilder::build) does:
    /// `keys.cluster.url`, `keys.cluster.prefix`, `keys.cluster.batch`,
    /// `keys.cluster.cold`.
    build -> Result<PolicyError> = KeyCluster::validate;

    /// Tokens leased per Redis round trip, at least 1 (default
    /// [`DEFAULT_BATCH`](crate::policy::DEFAULT_BATCH)). A key whose burst is smaller
    /// leases its burst.
    batch: u64,
    /// How long a key goes without a call before its lease is dropped, from 100 ms
    /// to 1 day (default [`DEFAULT_KEY_COLD`]).
    cold: Duration,
}

/// `prefix` + the key's text, or its first [`KEY_NAME_TEXT_MAX`] bytes (at most, cut
/// at a character), `~` and the hex murmur3 of the whole text if it is longer.
pub(crate) fn redis_name(prefix: &str, text: &dyn fmt::Display) -> String {
    let mut full = String::new();
    // Writing into a `String` never fails.
    let _ = write!(full, "{text}");
    let mut name = String::with_capacity(prefix.len() + full.len().min(KEY_NAME_TEXT_MAX + 33));
    name.push_str(prefix);
    if full.len() <= KEY_NAME_TEXT_MAX {
        name.push_str(&full);
        return name;
    }
    let mut head = KEY_NAME_TEXT_MAX;
    while !full.is_char_boundary(head) {
        head -= 1;
    }
    let (h1, h2) = murmur3_x64_128(full.as_bytes(), 0);
    let _ = write!(name, "{}~{h1:016x}{h2:016x}", &full[..head]);
    name
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_bounded_and_never_alias_a_short_text() {
        assert_eq!(redis_name("p:", &"alice"), "p:alice");
        assert_eq!(redis_name("p:", &-7i32), "p:-7");
        let exact = "a".repeat(KEY_NAME_TEXT_MAX);
        assert_eq!(redis_name("p:", &exact.as_str()), format!("p:{exact}"));
        let long = "a".repeat(KEY_NAME_TEXT_MAX + 1);
        let n = redis_name("p:", &long.as_str());
        assert!(n.starts_with(&format!("p:{exact}~")), "{n}");
        assert_eq!(n.len(), 2 + KEY_NAME_TEXT_MAX + 33);
        // The same text, the same name (the hash has a fixed seed).
        assert_eq!(n, redis_name("p:", &long.as_str()));
        // Texts sharing their first bytes differ by their hash.
        let other = format!("{exact}b");
        assert_ne!(n, redis_name("p:", &other.as_str()));
        // A multi-byte character across the cut is left out whole.
        let wide = format!("{}é{}", "a".repeat(KEY_NAME_TEXT_MAX - 1), "z".repeat(10));
        let n = redis_name("", &wide.as_str());
        assert!(n.starts_with(&format!("{}~", "a".repeat(KEY_NAME_TEXT_MAX - 1))));
        // Pinned: the name must not change between releases (fleets mix versions).
        let pinned = redis_name("", &"k".repeat(200).as_str());
        assert_eq!(
            pinned,
            format!(
                "{}~4d75da9ec3e1c5355c94474ced7692ef",
                "k".repeat(KEY_NAME_TEXT_MAX)
            )
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let mut errors = Vec::new();
        KeyCluster {
            url: "nope".into(),
            prefix: String::new(),
            batch: 0,
            cold: Duration::from_millis(10),
        }
        .check(&mut errors);
        let fields: Vec<_> = errors.iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "keys.cluster.url",
                "keys.cluster.prefix",
                "keys.cluster.batch",
                "keys.cluster.cold"
            ]
        );
    }
}
