//! Limits shared beyond this process (a policy's `cluster` section), as the engine
//! asks them: a trait the engine owns and a feature implements (the `redis` feature's
//! lease), found through a link-time list, so that the engine never names the feature
//! that plugs in.
//!
//! A point keeps one [`SharedLimit`] per `cluster` setting it has had (see `slots`):
//! the current one answers its calls, replaced ones are stopped after a grace.

use crate::policy::ClusterLimit;
use std::fmt;

/// What a shared limit says of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shared {
    /// Admitted by the shared limit.
    Admitted,
    /// Refused by it.
    Refused,
    /// The shared store is out of reach: the limit's local fallback decided,
    /// `true` if it admitted the call.
    Local(bool),
}

/// A limit this process shares with others, asked once per call.
pub(crate) trait SharedLimit: Send + Sync + fmt::Debug {
    /// One call's share, now, never blocking. Its own bound and its fallback while
    /// the shared store is out of reach are the implementation's (see
    /// [`ClusterLease`](crate::redis::ClusterLease)).
    fn decide(&self) -> Shared;
    /// [`decide`](Self::decide) as a yes or no.
    #[inline]
    fn try_admit(&self) -> bool {
        matches!(self.decide(), Shared::Admitted | Shared::Local(true))
    }
    /// Whether its first request to the shared store was answered (a limit started
    /// without waiting for it).
    fn answered(&self) -> bool;
    /// Takes up to `n` of the tokens it holds now, without asking the store: calls
    /// admitted on credit before it was answered pay with them.
    fn take_up_to(&self, n: u64) -> u64;
    /// Whether the shared store is out of reach (its local fallback decides).
    fn in_fallback(&self) -> bool;
    /// Stops its background work: the setting it served was replaced. Answers
    /// calls that still ask it from what it holds, then without the shared store.
    fn stop(&self);
    /// Whether [`stop`](Self::stop) ended its background work.
    fn is_stopped(&self) -> bool;
}

/// A key's share of a `keys` section's cluster-wide limit: a token bucket of `rate`
/// per second holding `burst`, at `url` under the key's own name, leased `batch`
/// tokens at a time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyBucket<'a> {
    pub(crate) url: &'a str,
    pub(crate) name: &'a str,
    pub(crate) rate: f64,
    pub(crate) burst: u64,
    pub(crate) batch: u64,
}

/// What a feature that shares limits provides: how to make the shared limit of a
/// policy's `cluster` section, and of one key of a `keys` section's (started
/// without waiting for the store, see `key_leases`). Either says why it could not
/// be started (only a failed thread spawn: the settings were checked).
#[derive(Debug)]
pub(crate) struct SharedLimits {
    pub(crate) of_cluster: fn(&ClusterLimit) -> Result<Box<dyn SharedLimit>, String>,
    pub(crate) of_key: fn(&KeyBucket<'_>) -> Result<Box<dyn SharedLimit>, String>,
}

/// The providers of shared limits linked into the program: the `redis` feature adds
/// one. Empty without it (and a policy that shares a limit is refused then).
#[linkme::distributed_slice]
pub(crate) static SHARED_LIMITS: [SharedLimits];

/// The shared limit of `limit`, from the first provider linked in; `None` without one.
pub(crate) fn make_shared(limit: &ClusterLimit) -> Option<Result<Box<dyn SharedLimit>, String>> {
    SHARED_LIMITS.first().map(|p| (p.of_cluster)(limit))
}

/// The shared limit of one key's bucket, from the first provider linked in.
pub(crate) fn make_key_shared(
    bucket: &KeyBucket<'_>,
) -> Option<Result<Box<dyn SharedLimit>, String>> {
    SHARED_LIMITS.first().map(|p| (p.of_key)(bucket))
}
