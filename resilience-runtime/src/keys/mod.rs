//! Hot keys: limits per value of an argument (Sentinel's hot-parameter rules), in
//! bounded memory.
//!
//! A policy's `keys` section ([`KeyPolicy`], set with
//! [`PolicyBuilder::keys`](crate::PolicyBuilder::keys)) gives every value of a key (a
//! user id, a tenant, an item) a limit of its own: calls per period with a burst,
//! calls in flight, and overrides for chosen values. A call names its key with
//! `#[downgrade(key = ...)]` or [`Point::enter_key`](crate::Point::enter_key) and is
//! checked against the key's rule after the point's own rules; a refusal is
//! [`Reason::HotKey`](crate::Reason::HotKey).
//!
//! See [`KeyPolicy`] for the bounds, exact for every tracked key and never exceeded
//! for the others.
//!
//! # With the macros
//!
//! `key = expr` names the call's key, an expression over the arguments, evaluated
//! once before the entry and only borrowed (the body still takes the arguments):
//!
//! ```
//! use resilience_runtime::keys::KeyPolicy;
//! use resilience_runtime::{downgrade, registry, Downgraded, Policy, Reason};
//! use std::time::Duration;
//!
//! fn busy(user: String, why: Downgraded) -> String {
//!     format!("{user}: {}", why.reason())
//! }
//!
//! #[downgrade(point = "docs.keys_macro", key = user, fallback_with_reason = busy)]
//! fn profile(user: String) -> String {
//!     user + ": profile"
//! }
//!
//! let keys = KeyPolicy::builder()
//!     .limit(2, Duration::from_secs(60))
//!     .override_limit("batch", 1000)
//!     .build()?;
//! registry().set_policy("docs.keys_macro", Policy::builder().keys(keys).build()?)?;
//! assert_eq!(profile("ann".into()), "ann: profile");
//! assert_eq!(profile("ann".into()), "ann: profile");
//! assert_eq!(profile("ann".into()), "ann: hot_key", "ann's third call this minute");
//! assert_eq!(profile("bob".into()), "bob: profile");
//! assert!((0..10).all(|_| profile("batch".into()) == "batch: profile"));
//! let stats = registry().stats("docs.keys_macro").unwrap();
//! assert_eq!(stats.totals.downgrades_by_reason.get(Reason::HotKey), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `#[breaker(key = ...)]` is the same, for a breaker's point.
//!
//! With the `redis` feature a key's limit can be cluster-wide
//! (`KeyPolicyBuilder::cluster`, `KeyCluster`): every value of the key then has one
//! bucket in Redis shared by the fleet, spent through a lease per hot key; see
//! [`KeyPolicy`] for the bound it keeps across instances.
//!
//! # Reading order
//!
//! `policy` (the section), `fingerprint` (key identity), `text` (a key's text in
//! reports), `rule` (a rule's decision on one key, pure), `shard` (the table and the
//! sketch, pure), `table` (the locks around them), then `crate::point::form::keys` (a
//! point's forms of the section, the hot path). With `redis`: `cluster` (the
//! cluster setting and a key's Redis name), then `crate::point::form::key_leases` (the
//! leases of hot keys and their chores).

mod arg;
mod cluster;
mod fingerprint;
mod limiter;
mod overrides;
mod policy;
mod rule;
mod shard;
mod table;
mod text;

pub use arg::KeyArg;
pub(crate) use arg::WaitingKey;
#[cfg(feature = "redis")]
pub(crate) use cluster::redis_name;
pub use cluster::{KeyCluster, KeyClusterBuilder, DEFAULT_KEY_COLD, KEY_NAME_TEXT_MAX};
pub(crate) use fingerprint::fingerprint;
pub use limiter::{KeyLimiter, KeyPermit, KeyRefused};
pub(crate) use overrides::OverrideIndex;
pub use policy::{
    KeyOverride, KeyOverrideBuilder, KeyPolicy, KeyPolicyBuilder, KeyRule, DEFAULT_MAX_KEYS,
    MAX_KEYS, MAX_KEY_OVERRIDES, MAX_OVERRIDE_LEN,
};
pub(crate) use rule::{Refusal, Rule};
pub(crate) use table::{admit_key, KeyTable, OverrideCell};
pub use table::{HotKeyStats, KeyClusterStats, KeyTableStats};
pub(crate) use table::{KeyHold, HOLD_CODE_BITS};
pub(crate) use text::KeyText;
pub use text::KEY_TEXT_MAX;

/// The busiest keys a point's statistics carry
/// ([`PointStats::hot_keys`](crate::PointStats::hot_keys)), which the metrics export
/// and heartbeats upload.
pub const STATS_HOT_KEYS: usize = 10;

use std::fmt::Display;
use std::hash::Hash;

/// What a key must be: `Hash` (its identity: a 64-bit fingerprint of it) and
/// `Display` (its text in statistics and listener events). Every string and integer
/// type is one, as is any type with both; an integer key matches an override by its
/// decimal text, and a newtype deriving `Hash` over one string or integer hashes as
/// that field. (An `async fn`'s future borrows its key across its awaits, so it is
/// `Send` when the key is `Sync`, as strings and integers are.)
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a hot key: a key must implement `Hash` and `Display`",
    label = "not usable as a key",
    note = "pass a field or a method call that gives a string or an integer, or implement `Hash` and `Display` for `{Self}`"
)]
pub trait HotKey: Hash + Display {}

// Not recommended: a key that is not `Hash` or not `Display` then gets the message
// above, once, instead of one error per missing bound (and rustc's list of the types
// that are `Hash`).
#[diagnostic::do_not_recommend]
impl<T: Hash + Display + ?Sized> HotKey for T {}

#[doc(hidden)]
pub fn bench_fingerprint<K: Hash + ?Sized>(k: &K) -> u64 {
    fingerprint(k)
}

/// Orders key statistics busiest first (calls admitted and refused), then by text.
pub(crate) fn sort_hot_keys(keys: &mut [HotKeyStats]) {
    keys.sort_by(|a, b| {
        (b.passes + b.refused)
            .cmp(&(a.passes + a.refused))
            .then_with(|| a.key.cmp(&b.key))
    });
}
