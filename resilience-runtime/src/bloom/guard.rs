//! Cache-penetration protection: answer "absent" for keys that were never stored,
//! without asking the backing store.

use super::BloomFilter;
use crate::sync::{AtomicU64, Ordering};
use std::fmt;

/// A bloom filter in front of a loader, so lookups of keys that do not exist stop
/// before they reach the database.
///
/// Cache penetration is a flood of lookups for keys that exist nowhere (a bug, a
/// scraper, an attacker walking ids): the cache never holds them, so every one of them
/// falls through to the store. The guard checks the filter first: a key the filter has
/// never seen is answered `Ok(None)` at once, and only keys that may exist call the
/// loader.
///
/// # Semantics
///
/// - **Pre-load.** The filter must hold *every* key that exists before the guard
///   serves reads (load the ids at start-up). A stored key missing from the filter is
///   reported absent: the guard trusts the filter.
/// - **Insert on write.** Call [`insert`](Self::insert) for each new key *before* the
///   write becomes visible, so no reader can find the row but be turned away by the
///   filter. (Inserting first is harmless: a reader that arrives in between calls the
///   loader and gets `None`.)
/// - **No deletes.** A bloom filter cannot forget: deleted keys keep reaching the
///   loader, like false positives. Rebuild the filter now and then if many keys are
///   deleted.
/// - **False positives** reach the loader at about the filter's false-positive rate;
///   [`GuardStats::false_positives`] counts loads that found nothing.
/// - Errors from the loader are passed through untouched.
///
/// The guard is `Sync` when the loader is: share it with an `Arc`.
///
/// # Examples
///
/// ```
/// use resilience_runtime::bloom::{BloomFilter, PenetrationGuard};
/// use std::collections::HashMap;
///
/// let store: HashMap<String, u32> = [("alice".to_string(), 30), ("bob".to_string(), 41)].into();
/// let filter = BloomFilter::with_rate(1_000, 0.01)?;
/// for key in store.keys() {
///     filter.insert(key);
/// }
/// let guard = PenetrationGuard::new(filter, |key: &str| {
///     Ok::<_, std::convert::Infallible>(store.get(key).copied())
/// });
///
/// assert_eq!(guard.get("alice"), Ok(Some(30)));
/// assert_eq!(guard.get("mallory"), Ok(None)); // answered by the filter
/// assert_eq!(guard.stats().blocked, 1);
/// # Ok::<(), resilience_runtime::bloom::BloomError>(())
/// ```
pub struct PenetrationGuard<L> {
    filter: BloomFilter,
    loader: L,
    blocked: AtomicU64,
    loaded: AtomicU64,
    false_positives: AtomicU64,
}

/// Counters of a [`PenetrationGuard`], read with [`PenetrationGuard::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardStats {
    /// Lookups answered "absent" by the filter, without calling the loader.
    pub blocked: u64,
    /// Lookups that called the loader.
    pub loaded: u64,
    /// Loader calls that returned `Ok(None)`: filter false positives, deleted keys,
    /// or keys inserted before their write became visible.
    pub false_positives: u64,
}

impl<L> PenetrationGuard<L> {
    /// A guard that checks `filter` before calling `loader`.
    ///
    /// `filter` must already hold every existing key; see the type docs.
    pub fn new(filter: BloomFilter, loader: L) -> Self {
        PenetrationGuard {
            filter,
            loader,
            blocked: AtomicU64::new(0),
            loaded: AtomicU64::new(0),
            false_positives: AtomicU64::new(0),
        }
    }

    /// Looks `key` up: `Ok(None)` without calling the loader if the filter has never
    /// seen `key`, otherwise whatever the loader returns.
    ///
    /// # Errors
    ///
    /// The loader's error, unchanged.
    pub fn get<K, V, E>(&self, key: &K) -> Result<Option<V>, E>
    where
        K: AsRef<[u8]> + ?Sized,
        L: Fn(&K) -> Result<Option<V>, E>,
    {
        if !self.filter.contains(key) {
            self.blocked.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        self.loaded.fetch_add(1, Ordering::Relaxed);
        let found = (self.loader)(key)?;
        if found.is_none() {
            self.false_positives.fetch_add(1, Ordering::Relaxed);
        }
        Ok(found)
    }

    /// Records that `key` now exists (call it on every write that creates a key, before
    /// the write becomes visible). Returns what [`BloomFilter::insert`] returns.
    pub fn insert<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.filter.insert(key)
    }

    /// Whether the filter may hold `key` (no loader call, no counters touched).
    pub fn may_contain<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.filter.contains(key)
    }

    /// The guard's filter.
    pub fn filter(&self) -> &BloomFilter {
        &self.filter
    }

    /// The counters so far.
    pub fn stats(&self) -> GuardStats {
        GuardStats {
            blocked: self.blocked.load(Ordering::Relaxed),
            loaded: self.loaded.load(Ordering::Relaxed),
            false_positives: self.false_positives.load(Ordering::Relaxed),
        }
    }
}

impl<L> fmt::Debug for PenetrationGuard<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PenetrationGuard")
            .field("filter", &self.filter)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
