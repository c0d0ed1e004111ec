//! The point's hot-key API: the manual entry of a call with a key
//! ([`Point::enter_key`], [`Point::enter_key_async`], [`Point::try_enter_key`]) and
//! the keys' statistics ([`Point::hot_keys`], [`Point::key_stats`]).

use crate::keys::{sort_hot_keys, HotKey, HotKeyStats, KeyTableStats};
use crate::point::admit::permit::Permit;
use crate::point::form::keys::KeyArg;
use crate::point::Point;
use crate::Downgraded;

impl Point {
    /// [`enter`](Self::enter) for a call of `key`: the point's rules, then the rule of
    /// `key` under the policy's [`keys`](crate::PolicyBuilder::keys) section
    /// (refused with [`Reason::HotKey`](crate::Reason::HotKey)). Without a `keys`
    /// section the key is not looked at.
    ///
    /// ```
    /// use resilience_runtime::keys::KeyPolicy;
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let keys = KeyPolicy::builder().max_concurrency(1).build()?;
    /// registry().set_policy("docs.enter_key", Policy::builder().keys(keys).build()?)?;
    /// let point = registry().point("docs.enter_key")?;
    /// let first = point.enter_key(&7u64)?;
    /// assert!(point.enter_key(&7u64).is_err(), "key 7 has its one call in flight");
    /// assert!(point.enter_key(&8u64).is_ok());
    /// first.finish(false);
    /// assert!(point.enter_key(&7u64).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn enter_key<'p, K: HotKey + ?Sized>(&'p self, key: &K) -> Result<Permit<'p>, Downgraded> {
        let key = KeyArg::new(&key);
        let mut slot = None;
        self.enter_keyed_in(&mut slot, &key)?;
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// [`enter_key`](Self::enter_key) for async code (see
    /// [`enter_async`](Self::enter_async)): a call that waits, in the queue or for its
    /// key's next call (the `keys` section's `max_wait`), waits in the future.
    pub async fn enter_key_async<'p, K: HotKey + Sync + ?Sized>(
        &'p self,
        key: &K,
    ) -> Result<Permit<'p>, Downgraded> {
        let key = KeyArg::new(&key);
        let mut slot = None;
        match self.enter_async_keyed_in(&mut slot, None, Some(key)) {
            crate::point::admit::queue::Admission::Ready(r) => r?,
            crate::point::admit::queue::Admission::Wait(w) => w.await?,
        }
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// [`enter_key`](Self::enter_key) that never waits (see
    /// [`try_enter`](Self::try_enter)).
    #[inline]
    pub fn try_enter_key<'p, K: HotKey + ?Sized>(
        &'p self,
        key: &K,
    ) -> Result<Permit<'p>, Downgraded> {
        let key = KeyArg::new(&key);
        let mut slot = None;
        self.try_enter_keyed_in(&mut slot, Some(&key))?;
        Ok(slot.unwrap_or_else(|| Permit::untracked(self)))
    }

    /// The `n` tracked keys (overridden values included) with the most calls, with
    /// their passes and refusals, most first. Empty without a `keys` section or
    /// before the first call with a key.
    pub fn hot_keys(&self, n: usize) -> Vec<HotKeyStats> {
        let settings = self.settings();
        let Some(policy) = settings.policy.as_ref().and_then(|p| p.keys()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(t) = settings
            .keys
            .current_table(Some(policy))
            .and_then(|t| t.made())
        {
            t.busiest(n, &mut out);
        }
        for (value, _) in policy.overrides() {
            if let Some(c) = settings.keys.cell(value) {
                out.push(c.stats());
            }
        }
        drop(settings);
        sort_hot_keys(&mut out);
        out.truncate(n);
        out
    }

    /// The totals of the key table in use, if the policy has a `keys` section and a
    /// call with a key was made; with a cluster setting (`redis` feature), the counts
    /// of the keys' leases in [`KeyTableStats::cluster`].
    ///
    /// ```
    /// use resilience_runtime::keys::KeyPolicy;
    /// use resilience_runtime::{registry, Policy};
    /// use std::time::Duration;
    ///
    /// let keys = KeyPolicy::builder().limit(5, Duration::from_secs(1)).build()?;
    /// registry().set_policy("docs.key_stats", Policy::builder().keys(keys).build()?)?;
    /// let point = registry().point("docs.key_stats")?;
    /// assert!(point.key_stats().is_none(), "no call with a key yet");
    /// point.enter_key("alice")?.finish(false);
    /// let stats = point.key_stats().unwrap();
    /// assert_eq!((stats.tracked, stats.cluster), (1, None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_stats(&self) -> Option<KeyTableStats> {
        let settings = self.settings();
        let policy = settings.policy.as_ref().and_then(|p| p.keys());
        let t = settings.keys.current_table(policy)?.made()?;
        #[allow(unused_mut)]
        let mut stats = t.stats();
        #[cfg(feature = "redis")]
        if let Some(p) = policy {
            stats.cluster = settings.keys.cluster_stats(p);
        }
        Some(stats)
    }
}
