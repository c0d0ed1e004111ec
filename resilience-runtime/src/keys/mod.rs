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
//! With the `redis` feature a key's limit can be cluster-wide
//! (`KeyPolicyBuilder::cluster`, `KeyCluster`): every value of the key then has one
//! bucket in Redis shared by the fleet, spent through a lease per hot key; see
//! [`KeyPolicy`] for the bound it keeps across instances.
//!
//! # Reading order
//!
//! `policy` (the section), `fingerprint` (key identity), `text` (a key's text in
//! reports), `rule` (a rule's decision on one key, pure), `shard` (the table and the
//! sketch, pure), `table` (the locks around them), then `crate::point::keys` (a
//! point's forms of the section, the hot path). With `redis`: `cluster` (the
//! cluster setting and a key's Redis name), then `crate::point::key_leases` (the
//! leases of hot keys and their chores).

#[cfg(feature = "redis")]
mod cluster;
mod fingerprint;
mod policy;
mod rule;
mod shard;
mod table;
mod text;

#[cfg(feature = "redis")]
pub(crate) use cluster::redis_name;
#[cfg(feature = "redis")]
pub use cluster::{KeyCluster, DEFAULT_KEY_COLD, KEY_NAME_TEXT_MAX};
pub(crate) use fingerprint::{fingerprint, text_fingerprints};
pub use policy::{
    KeyOverride, KeyPolicy, KeyPolicyBuilder, KeyRule, DEFAULT_MAX_KEYS, MAX_KEYS,
    MAX_KEY_OVERRIDES, MAX_OVERRIDE_LEN,
};
pub(crate) use rule::{Refusal, Rule};
pub use table::{HotKeyStats, KeyClusterStats, KeyHold, KeyTableStats};
pub(crate) use table::{KeyTable, OverrideCell};
pub(crate) use text::KeyText;
pub use text::KEY_TEXT_MAX;

use std::fmt::Display;
use std::hash::Hash;

/// What a key must be: `Hash` (its identity: a 64-bit fingerprint of it), `Display`
/// (its text in statistics and listener events) and `Sync` (an async call that waits
/// holds it across its awaits). Every string and integer type is one, as is any type
/// with the three; an integer key matches an override by its decimal text, and a
/// newtype deriving `Hash` over one string or integer hashes as that field.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a hot key: a key must implement `Hash`, `Display` and `Sync`",
    label = "not usable as a key",
    note = "pass a field or a method call that gives a string or an integer, or implement `Hash` and `Display` for `{Self}`"
)]
pub trait HotKey: Hash + Display + Sync {}

impl<T: Hash + Display + Sync + ?Sized> HotKey for T {}
