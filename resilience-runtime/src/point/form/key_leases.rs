//! The leases of a `keys` section's cluster-wide limits (feature `redis`): one
//! shared limit ([`ClusterLease`](crate::redis::ClusterLease)) per hot key, in a bounded map (least recently used first out),
//! started and stopped by chores of the timing wheel, never on a call's thread.
//!
//! # Lifecycle of a key's lease
//!
//! 1. A call of a key the table tracks, with no lease yet, inserts a *pending* lease
//!    (under its shard's lock) with a credit of `batch` calls, and arms
//!    [`Chore::StartKeyLeases`]. If the shard is full, its least recently used lease
//!    is dropped for it.
//! 2. That chore starts the lease's refill thread without waiting for Redis
//!    ([`ClusterLeaseBuilder::no_wait`](crate::redis::ClusterLeaseBuilder)); the
//!    first batch arrives one round trip later. Meanwhile the key's calls spend the
//!    credit, and what they spent is owed.
//! 3. Once the first batch request is answered, each call first pays what is owed
//!    from the lease's tokens (refused while it cannot), then takes a token of its
//!    own; in fallback mode (Redis unreachable) the key's local rule alone decides.
//! 4. [`Chore::DropColdKeyLeases`] runs every `cold / 4` while the map holds leases
//!    and drops the leases whose key had no call for `cold`; dropped leases (cold,
//!    or evicted by the hot path) are stopped on the chores' thread, which waits for
//!    their refill threads (at most one Redis call each).
//!
//! Every decision on a key runs under its shard's lock, so a key's credit, debt and
//! lease are decided in one order. The lease's own decision is a few atomics and never
//! waits.

use crate::clock::nanos;
use crate::keys::{redis_name, KeyCluster, KeyClusterStats, KeyPolicy, KeyRule};
use crate::point::form::shared::{make_key_shared, KeyBucket, Shared, SharedLimit};
use crate::point::observe::chores::{self, Chore, Chores};
use crate::sync::Recover;
use crate::sync::{Arc, AtomicU8, Mutex, OnceLock, Ordering};
use crate::Clock;
use crossbeam_utils::CachePadded;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

/// The Redis bucket of one key's rule: what its lease is built with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::point) struct LeaseRule {
    /// Tokens per second: the rule's `limit / period`.
    rate: f64,
    /// The rule's burst (its limit unless set).
    burst: u64,
    /// Tokens per round trip: the setting's batch, at most the burst.
    batch: u64,
}

impl LeaseRule {
    /// The bucket of `r` in section `p` under `c`; `None` for a rule without a limit
    /// (nothing to share) or with a limit of 0 (its key is always refused locally).
    pub(in crate::point) fn of(p: &KeyPolicy, r: &KeyRule, c: &KeyCluster) -> Option<LeaseRule> {
        let limit = r.limit.filter(|l| *l > 0)?;
        let burst = r.burst.unwrap_or(limit);
        Some(LeaseRule {
            rate: limit as f64 / p.period().as_secs_f64(),
            burst,
            batch: c.batch.clamp(1, burst),
        })
    }
}

/// One key's lease, shared by its slot and the chores' queues.
struct KeyLease {
    /// The key's Redis name (see [`KeyCluster`]).
    name: String,
    rule: LeaseRule,
    /// Set by the start chore: the key's share of the limit (see `shared`).
    lease: OnceLock<Box<dyn SharedLimit>>,
    /// 1 once out of the map: not to be started.
    gone: AtomicU8,
    /// 1 if its refill thread could not be started: the local rule alone decides.
    failed: AtomicU8,
}

const NIL: u32 = u32::MAX;

/// A key's entry in its shard.
struct Slot {
    fp: u64,
    lease: Arc<KeyLease>,
    /// The point's clock at the key's last call.
    last: u64,
    /// Calls that may still be admitted before the lease's first batch.
    credit: u64,
    /// Calls admitted on credit and not yet paid from the lease.
    debt: u64,
    /// Neighbours in the shard's recency list (towards the most and the least
    /// recently used).
    prev: u32,
    next: u32,
}

/// Fingerprints are already uniform: the map uses them as they are.
#[derive(Default)]
struct FpHasher(u64);

impl Hasher for FpHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
}

/// Counts of a shard, summed into [`KeyClusterStats`].
#[derive(Default)]
struct Counts {
    started: u64,
    dropped_cold: u64,
    evicted: u64,
    admitted: u64,
    credit: u64,
    local: u64,
    refused: u64,
}

/// One shard of the map: slots in a dense vector, a fingerprint index, and a
/// doubly linked recency list through the slots (`head` most recent).
struct LeaseShard {
    index: HashMap<u64, u32, BuildHasherDefault<FpHasher>>,
    slots: Vec<Slot>,
    head: u32,
    tail: u32,
    cap: usize,
    counts: Counts,
}

impl LeaseShard {
    fn new(cap: usize) -> LeaseShard {
        LeaseShard {
            index: HashMap::default(),
            slots: Vec::new(),
            head: NIL,
            tail: NIL,
            cap: cap.max(1),
            counts: Counts::default(),
        }
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        match p {
            NIL => self.head = n,
            p => self.slots[p as usize].next = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.slots[n as usize].prev = p,
        }
    }

    fn push_front(&mut self, i: u32) {
        let head = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = head;
        }
        match head {
            NIL => self.tail = i,
            h => self.slots[h as usize].prev = i,
        }
        self.head = i;
    }

    /// Marks slot `i` used at `now`.
    fn touch(&mut self, i: u32, now: u64) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        let s = &mut self.slots[i as usize];
        s.last = s.last.max(now);
    }

    /// Takes slot `i` out (the last slot moves into its place).
    fn remove(&mut self, i: u32) -> Slot {
        self.unlink(i);
        self.index.remove(&self.slots[i as usize].fp);
        let last = (self.slots.len() - 1) as u32;
        if i != last {
            let (p, n, fp) = {
                let s = &self.slots[last as usize];
                (s.prev, s.next, s.fp)
            };
            match p {
                NIL => self.head = i,
                p => self.slots[p as usize].next = i,
            }
            match n {
                NIL => self.tail = i,
                n => self.slots[n as usize].prev = i,
            }
            self.index.insert(fp, i);
        }
        let slot = self.slots.swap_remove(i as usize);
        slot.lease.gone.store(1, Ordering::Release);
        slot
    }

    fn insert(&mut self, slot: Slot) -> u32 {
        let i = self.slots.len() as u32;
        self.index.insert(slot.fp, i);
        self.slots.push(slot);
        self.push_front(i);
        i
    }

    /// The cluster's decision for a call of slot `i`, whose local rule admitted it.
    fn decide(&mut self, i: u32) -> bool {
        let Self { slots, counts, .. } = self;
        let slot = &mut slots[i as usize];
        let kl = &*slot.lease;
        match kl.lease.get() {
            Some(lease) if lease.answered() => {
                if slot.debt > 0 {
                    slot.debt -= lease.take_up_to(slot.debt);
                }
                if slot.debt > 0 {
                    // Owed calls are paid before new ones, unless Redis is out of
                    // reach: then the local rule decides, as for every other call.
                    return if lease.in_fallback() {
                        counts.local += 1;
                        true
                    } else {
                        counts.refused += 1;
                        false
                    };
                }
                match lease.decide() {
                    Shared::Admitted => {
                        counts.admitted += 1;
                        true
                    }
                    Shared::Refused => {
                        counts.refused += 1;
                        false
                    }
                    // The lease's fallback bucket has the key's own rule, which has
                    // admitted the call already: the local rule decides.
                    Shared::Local(_) => {
                        counts.local += 1;
                        true
                    }
                }
            }
            _ if kl.failed.load(Ordering::Acquire) == 1 => {
                counts.local += 1;
                true
            }
            _ if slot.credit > 0 => {
                slot.credit -= 1;
                slot.debt += 1;
                counts.credit += 1;
                true
            }
            _ => {
                counts.refused += 1;
                false
            }
        }
    }
}

/// The leases of the keys of every `keys` form of a point with one cluster setting
/// and `max_keys` (leaked like every slot; see the module docs).
pub(in crate::point) struct KeyLeases {
    pub(in crate::point) cluster: KeyCluster,
    pub(in crate::point) max_keys: u64,
    clock: Clock,
    /// The point that keeps the map (its chores hold it weakly).
    owner: chores::Owner,
    /// Whether the chores run at all (the wheel's thread started): without them no
    /// lease could start, and the local rule alone decides.
    enabled: bool,
    shards: Box<[CachePadded<Mutex<LeaseShard>>]>,
    /// log2 of the shard count.
    bits: u32,
    /// Leases to start, and dropped leases to stop, by the start chore.
    pending: Mutex<Vec<Arc<KeyLease>>>,
    retired: Mutex<Vec<Arc<KeyLease>>>,
    /// 1 while the start chore is armed, and while the cold chore is.
    start_armed: AtomicU8,
    cold_armed: AtomicU8,
}

/// Whether a call left the chores something to do: pass it to
/// [`KeyLeases::wake`] once no lock is held.
#[must_use]
pub(in crate::point) struct Wake(bool);

impl KeyLeases {
    /// A map of at most `max_keys` leases (in whole shards, rounded down), kept by
    /// the point `owner`.
    pub(in crate::point) fn new(
        cluster: &KeyCluster,
        max_keys: u64,
        clock: &Clock,
        owner: chores::Owner,
    ) -> KeyLeases {
        let shards = (max_keys / 256).clamp(1, 64).next_power_of_two();
        let cap = (max_keys / shards) as usize;
        KeyLeases {
            cluster: cluster.clone(),
            max_keys,
            clock: clock.clone(),
            owner,
            enabled: chores::running(),
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::new(LeaseShard::new(cap))))
                .collect(),
            bits: shards.trailing_zeros(),
            pending: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            start_armed: AtomicU8::new(0),
            cold_armed: AtomicU8::new(0),
        }
    }

    #[inline(always)]
    fn shard(&self, fp: u64) -> &Mutex<LeaseShard> {
        let i = if self.bits == 0 {
            0
        } else {
            (fp >> (64 - self.bits)) as usize
        };
        &self.shards[i]
    }

    /// The cluster's decision for a call of key `fp` (text `text`, rule `rule`) that
    /// its local rule admits at `now`; `tracked` says whether the table tracks the
    /// key (only a tracked key gets a lease). Called under the local rule's lock.
    #[inline]
    pub(in crate::point) fn admit(
        &self,
        fp: u64,
        text: &dyn fmt::Display,
        rule: &LeaseRule,
        tracked: bool,
        now: u64,
    ) -> (bool, Wake) {
        let mut guard = self.shard(fp).lock().recover();
        self.admit_in(&mut guard, fp, text, rule, tracked, now)
    }

    /// Arms the start chore if a call asked for it.
    #[inline]
    pub(in crate::point) fn wake(&self, w: Wake) {
        if w.0 {
            self.wake_start();
        }
    }

    fn admit_in(
        &self,
        sh: &mut LeaseShard,
        fp: u64,
        text: &dyn fmt::Display,
        rule: &LeaseRule,
        tracked: bool,
        now: u64,
    ) -> (bool, Wake) {
        let found = sh.index.get(&fp).copied();
        if let Some(i) = found {
            if sh.slots[i as usize].lease.rule == *rule {
                sh.touch(i, now);
                return (sh.decide(i), Wake(false));
            }
        }
        if (found.is_none() && !tracked) || !self.enabled {
            sh.counts.local += 1;
            return (true, Wake(false));
        }
        // A new lease: for a new key, or for a key whose rule changed.
        let out = match found {
            Some(i) => Some(i),
            None if sh.slots.len() >= sh.cap => Some(sh.tail),
            None => None,
        };
        if let Some(i) = out.filter(|i| *i != NIL) {
            let old = sh.remove(i);
            sh.counts.evicted += 1;
            self.retired.lock().recover().push(old.lease);
        }
        let lease = Arc::new(KeyLease {
            name: redis_name(&self.cluster.prefix, text),
            rule: *rule,
            lease: OnceLock::new(),
            gone: AtomicU8::new(0),
            failed: AtomicU8::new(0),
        });
        self.pending.lock().recover().push(Arc::clone(&lease));
        sh.counts.started += 1;
        let i = sh.insert(Slot {
            fp,
            lease,
            last: now,
            credit: rule.batch,
            debt: 0,
            prev: NIL,
            next: NIL,
        });
        (sh.decide(i), Wake(true))
    }

    /// Arms the start chore unless it is armed.
    fn wake_start(&self) {
        if self.start_armed.swap(1, Ordering::AcqRel) == 0 {
            chores::schedule(
                self.owner.clone(),
                self,
                Chore::StartKeyLeases,
                Duration::ZERO,
            );
        }
    }

    /// How often the cold chore looks: every `cold / 4`, at least every 10 ms.
    fn scan_every(&self) -> Duration {
        (self.cluster.cold / 4).max(Duration::from_millis(10))
    }

    /// The start chore: starts the pending leases, stops the dropped ones, and arms
    /// the cold chore.
    fn start_pending(&self) -> Option<Duration> {
        // Cleared first (reading the last arming's store), so a lease queued after
        // the queue is taken below arms the chore again.
        self.start_armed.swap(0, Ordering::AcqRel);
        let pending = std::mem::take(&mut *self.pending.lock().recover());
        for kl in pending {
            if kl.gone.load(Ordering::Acquire) == 1 {
                continue;
            }
            let r = kl.rule;
            let built = make_key_shared(&KeyBucket {
                url: &self.cluster.url,
                name: &kl.name,
                rate: r.rate,
                burst: r.burst,
                batch: r.batch,
            });
            match built {
                Some(Ok(lease)) => {
                    let _ = kl.lease.set(lease);
                }
                Some(Err(_e)) => {
                    #[cfg(feature = "tracing")]
                    tracing::warn!(key = kl.name, error = %_e, "resilience: key lease not started");
                    kl.failed.store(1, Ordering::Release);
                }
                // No feature shares limits: the local rule alone decides.
                None => kl.failed.store(1, Ordering::Release),
            }
        }
        // Dropping the last handle of a started lease stops its refill thread (with
        // the queue's lock released: calls push to it).
        let retired = std::mem::take(&mut *self.retired.lock().recover());
        drop(retired);
        if self.cold_armed.swap(1, Ordering::AcqRel) == 0 {
            chores::schedule(
                self.owner.clone(),
                self,
                Chore::DropColdKeyLeases,
                self.scan_every(),
            );
        }
        None
    }

    /// The cold chore: drops the leases of keys without a call for `cold`; runs
    /// again while leases are left.
    fn drop_cold(&self) -> Option<Duration> {
        let now = self.clock.now_ns();
        let cold = nanos(self.cluster.cold);
        let mut dropped = Vec::new();
        let mut left = 0;
        for s in self.shards.iter() {
            let mut guard = s.lock().recover();
            let sh = &mut *guard;
            while sh.tail != NIL && now.saturating_sub(sh.slots[sh.tail as usize].last) >= cold {
                let tail = sh.tail;
                dropped.push(sh.remove(tail).lease);
                sh.counts.dropped_cold += 1;
            }
            left += sh.slots.len();
        }
        // Stopped here, with no lock held.
        drop(dropped);
        if left == 0 {
            // A lease inserted since the count above has armed the start chore, which
            // runs after this one (on the same thread) and arms this one again.
            self.cold_armed.store(0, Ordering::Release);
            return None;
        }
        Some(self.scan_every())
    }

    /// Removes the map's timers (its point is being dropped).
    pub(in crate::point) fn forget_chores(&self) {
        chores::cancel(self, &[Chore::StartKeyLeases, Chore::DropColdKeyLeases]);
    }

    /// The map's counts.
    pub(in crate::point) fn stats(&self) -> KeyClusterStats {
        let mut t = KeyClusterStats::default();
        for s in self.shards.iter() {
            let sh = s.lock().recover();
            let c = &sh.counts;
            t.leases += sh.slots.len() as u64;
            t.started += c.started;
            t.dropped_cold += c.dropped_cold;
            t.evicted += c.evicted;
            t.admitted += c.admitted;
            t.credit += c.credit;
            t.local += c.local;
            t.refused += c.refused;
        }
        t
    }
}

impl Chores for KeyLeases {
    fn run(&self, chore: Chore) -> Option<Duration> {
        match chore {
            Chore::StartKeyLeases => self.start_pending(),
            Chore::DropColdKeyLeases => self.drop_cold(),
            _ => None,
        }
    }
}

impl fmt::Debug for KeyLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: leave it out.
        f.debug_struct("KeyLeases")
            .field("prefix", &self.cluster.prefix)
            .field("max_keys", &self.max_keys)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn slot(fp: u64) -> Slot {
        Slot {
            fp,
            lease: Arc::new(KeyLease {
                name: String::new(),
                rule: LeaseRule {
                    rate: 1.0,
                    burst: 1,
                    batch: 1,
                },
                lease: OnceLock::new(),
                gone: AtomicU8::new(0),
                failed: AtomicU8::new(0),
            }),
            last: fp,
            credit: 1,
            debt: 0,
            prev: NIL,
            next: NIL,
        }
    }

    /// The recency list from the most recent, checked against the index.
    fn order(sh: &LeaseShard) -> Vec<u64> {
        let mut out = Vec::new();
        let mut i = sh.head;
        let mut prev = NIL;
        while i != NIL {
            let s = &sh.slots[i as usize];
            assert_eq!(s.prev, prev);
            assert_eq!(sh.index[&s.fp], i);
            out.push(s.fp);
            prev = i;
            i = s.next;
        }
        assert_eq!(sh.tail, prev);
        assert_eq!(out.len(), sh.slots.len());
        out
    }

    #[test]
    fn the_recency_list_survives_touches_and_removals() {
        let mut sh = LeaseShard::new(8);
        for fp in 1..=5 {
            sh.insert(slot(fp));
        }
        assert_eq!(order(&sh), [5, 4, 3, 2, 1]);
        let i = sh.index[&2];
        sh.touch(i, 10);
        assert_eq!(order(&sh), [2, 5, 4, 3, 1]);
        // The tail is the least recently used.
        let tail = sh.tail;
        assert_eq!(sh.remove(tail).fp, 1);
        assert_eq!(order(&sh), [2, 5, 4, 3]);
        // Removing from the middle moves the last slot into the hole.
        let i = sh.index[&5];
        let gone = sh.remove(i);
        assert_eq!(gone.lease.gone.load(Ordering::Relaxed), 1);
        assert_eq!(order(&sh), [2, 4, 3]);
        let i = sh.index[&2];
        sh.remove(i);
        assert_eq!(order(&sh), [4, 3]);
        for fp in [4, 3] {
            let i = sh.index[&fp];
            sh.remove(i);
        }
        assert_eq!(order(&sh), Vec::<u64>::new());
        assert_eq!((sh.head, sh.tail), (NIL, NIL));
    }

    #[test]
    fn a_pending_lease_admits_its_credit_then_refuses() {
        let mut sh = LeaseShard::new(4);
        let mut s = slot(7);
        s.credit = 3;
        let i = sh.insert(s);
        assert_eq!((0..5).map(|_| sh.decide(i)).filter(|a| *a).count(), 3);
        let s = &sh.slots[i as usize];
        assert_eq!((s.credit, s.debt), (0, 3));
        assert_eq!((sh.counts.credit, sh.counts.refused), (3, 2));
        // A lease that could not start: the local rule alone.
        sh.slots[i as usize]
            .lease
            .failed
            .store(1, Ordering::Relaxed);
        assert!(sh.decide(i));
        assert_eq!(sh.counts.local, 1);
    }

    #[test]
    fn lease_rules_follow_the_key_rule_and_clamp_the_batch() {
        let p = KeyPolicy::builder()
            .limit(120, Duration::from_secs(60))
            .build()
            .unwrap();
        let c = KeyCluster {
            batch: 50,
            ..KeyCluster::new("redis://127.0.0.1/", "k:")
        };
        let r = |limit, burst| KeyRule {
            limit,
            burst,
            max_concurrency: None,
        };
        assert_eq!(
            LeaseRule::of(&p, &r(Some(120), None), &c),
            Some(LeaseRule {
                rate: 2.0,
                burst: 120,
                batch: 50
            })
        );
        assert_eq!(
            LeaseRule::of(&p, &r(Some(120), Some(5)), &c).unwrap().batch,
            5
        );
        assert_eq!(LeaseRule::of(&p, &r(Some(0), None), &c), None);
        assert_eq!(LeaseRule::of(&p, &r(None, None), &c), None);
    }
}
