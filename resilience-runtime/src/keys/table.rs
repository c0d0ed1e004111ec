//! The atomic shell around [`Shard`]: a point's key table (shards behind mutexes,
//! chosen by fingerprint), the cells of overridden values, and the hold a call keeps
//! on its key's slot.
//!
//! Every decision runs under one shard's (or one override's) lock, so the bounds of
//! `shard` hold under any number of threads: the lock orders the calls of a key, and
//! a call's decision and its state change are one step. A lock is held for a few
//! dozen instructions that cannot panic or block.

use super::rule::{KeyState, Refusal, Rule};
use super::shard::{Place, Shard};
use super::text::KeyText;
use crate::limit::Gcra;
use crate::sync::Mutex;
use crate::sync::Recover;
use crossbeam_utils::CachePadded;

/// The keys of one point, in shards (see `shard`).
#[derive(Debug)]
pub(crate) struct KeyTable {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// log2 of the shard count.
    bits: u32,
}

/// One key's traffic, as statistics report it (see
/// [`Point::hot_keys`](crate::Point::hot_keys)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HotKeyStats {
    /// The key's text (its `Display`), cut at
    /// [`KEY_TEXT_MAX`](super::KEY_TEXT_MAX) bytes.
    pub key: String,
    /// Calls admitted by the key's rule since it was tracked.
    pub passes: u64,
    /// Calls its rule refused since it was tracked (with a cluster setting, those its
    /// cluster-wide bucket refused too).
    pub refused: u64,
    /// Whether the key's value is overridden (overrides are always tracked).
    pub overridden: bool,
}

/// A table's totals (see [`Point::key_stats`](crate::Point::key_stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyTableStats {
    /// Keys tracked exactly now.
    pub tracked: u64,
    /// Calls of untracked keys admitted (counted in the sketch).
    pub untracked_passes: u64,
    /// Calls of untracked keys refused.
    pub untracked_refused: u64,
    /// Keys that took the entry of a colder one.
    pub evictions: u64,
    /// Bytes the table holds.
    pub memory_bytes: u64,
    /// The keys' cluster-wide leases, if the section has a cluster setting
    /// (`KeyPolicyBuilder::cluster`, `redis` feature).
    pub cluster: Option<KeyClusterStats>,
}

/// The leases of a `keys` section's cluster-wide limits (see
/// [`KeyTableStats::cluster`]). Counts are since the leases' map was made (it is kept
/// across policy changes that keep the section's `max_keys` and cluster setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyClusterStats {
    /// Keys with a lease now (started or being started).
    pub leases: u64,
    /// Leases started.
    pub started: u64,
    /// Leases dropped because their key went cold.
    pub dropped_cold: u64,
    /// Leases dropped for another key's (the map was full) or because the key's rule
    /// changed.
    pub evicted: u64,
    /// Calls admitted with a token leased from Redis.
    pub admitted: u64,
    /// Calls admitted on credit while the key's lease waited for its first batch.
    pub credit: u64,
    /// Calls admitted by the local rule alone: Redis unreachable (the lease's
    /// fallback), a lease that could not start, or a key without a lease (not
    /// tracked by a full table).
    pub local: u64,
    /// Calls refused by the cluster-wide bucket (or by a credit used up), counted as
    /// [`Reason::HotKey`](crate::Reason::HotKey).
    pub refused: u64,
}

impl KeyTable {
    /// A table tracking at most about `max_keys` keys (rounded up to whole shards).
    pub(crate) fn new(max_keys: u64) -> KeyTable {
        let shards = (max_keys / 256).clamp(1, 64).next_power_of_two();
        let cap = (max_keys as usize).div_ceil(shards as usize);
        KeyTable {
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::new(Shard::new(cap))))
                .collect(),
            bits: shards.trailing_zeros(),
        }
    }

    #[inline(always)]
    fn shard(&self, fp: u64) -> &Mutex<Shard> {
        let i = if self.bits == 0 {
            0
        } else {
            (fp >> (64 - self.bits)) as usize
        };
        &self.shards[i]
    }

    /// The decision for a call of `fp` under `rule` (see [`Shard::admit_with`]).
    #[inline]
    pub(crate) fn admit(
        &self,
        fp: u64,
        rule: &Rule,
        now: u64,
        text: impl FnOnce() -> KeyText,
    ) -> Result<Option<Place>, Refusal> {
        self.admit_with(fp, rule, now, text, |_| true)
    }

    /// [`admit`](Self::admit), asking `also` (told whether the key is tracked) under
    /// the shard's lock before a call the rule admits is admitted (see
    /// [`Shard::admit_with`]).
    #[inline]
    pub(crate) fn admit_with(
        &self,
        fp: u64,
        rule: &Rule,
        now: u64,
        text: impl FnOnce() -> KeyText,
        also: impl FnOnce(bool) -> bool,
    ) -> Result<Option<Place>, Refusal> {
        self.shard(fp)
            .lock()
            .recover()
            .admit_with(fp, rule, now, text, also)
    }

    /// A call of `fp` admitted at `place` ended.
    #[inline]
    pub(crate) fn release(&self, fp: u64, place: Place) {
        self.shard(fp).lock().recover().release(fp, place);
    }

    /// The `n` busiest tracked keys (no override's), added to `out` in no order:
    /// most calls admitted and refused, ties by text, as `sort_hot_keys` orders
    /// them. Only the winners' texts are made.
    pub(crate) fn busiest(&self, n: usize, out: &mut Vec<HotKeyStats>) {
        type Candidate = (u64, u64, u64, KeyText);
        let better =
            |a: &Candidate, b: &Candidate| a.0 > b.0 || (a.0 == b.0 && a.3.as_str() < b.3.as_str());
        // `n` may be any number (`Point::hot_keys(usize::MAX)`): grown as needed.
        let mut top: Vec<Candidate> = Vec::with_capacity(n.min(64));
        for s in self.shards.iter() {
            let s = s.lock().recover();
            for e in s.entries() {
                let c = (e.passes + e.refused, e.passes, e.refused, e.text);
                if top.len() < n {
                    top.push(c);
                } else if let Some(worst) =
                    (0..top.len()).reduce(|w, i| if better(&top[w], &top[i]) { i } else { w })
                {
                    if better(&c, &top[worst]) {
                        top[worst] = c;
                    }
                }
            }
        }
        out.extend(
            top.into_iter()
                .map(|(_, passes, refused, text)| HotKeyStats {
                    key: text.to_display(),
                    passes,
                    refused,
                    overridden: false,
                }),
        );
    }

    pub(crate) fn stats(&self) -> KeyTableStats {
        let mut t = KeyTableStats::default();
        for s in self.shards.iter() {
            let s = s.lock().recover();
            t.tracked += s.len() as u64;
            t.untracked_passes += s.untracked_passes;
            t.untracked_refused += s.untracked_refused;
            t.evictions += s.evictions;
            t.memory_bytes += (s.memory_bytes() + std::mem::size_of::<CachePadded<()>>()) as u64;
        }
        t
    }
}

/// The state of one overridden value, kept by the point across policy changes (and
/// across forms that override the same value).
#[derive(Debug)]
pub(crate) struct OverrideCell {
    text: KeyText,
    inner: Mutex<OverrideState>,
}

#[derive(Debug)]
struct OverrideState {
    /// The bucket `state.tat` is scaled for.
    gcra: Option<Gcra>,
    state: KeyState,
    passes: u64,
    refused: u64,
}

impl OverrideCell {
    pub(crate) fn new(value: &str) -> OverrideCell {
        OverrideCell {
            text: KeyText::of(value),
            inner: Mutex::new(OverrideState {
                gcra: None,
                state: KeyState::default(),
                passes: 0,
                refused: 0,
            }),
        }
    }

    /// The decision for a call of this value under `rule` at `now`.
    #[inline]
    pub(crate) fn admit(&self, rule: &Rule, now: u64) -> Result<(), Refusal> {
        self.admit_with(rule, now, || true)
    }

    /// [`admit`](Self::admit), asking `also` under the cell's lock before a call the
    /// rule admits is admitted (refused for [`Refusal::Tokens`] with nothing taken
    /// otherwise).
    #[inline]
    pub(crate) fn admit_with(
        &self,
        rule: &Rule,
        now: u64,
        also: impl FnOnce() -> bool,
    ) -> Result<(), Refusal> {
        let mut s = self.inner.lock().recover();
        if s.gcra != rule.gcra {
            // The override's rule changed: carry what the key owes into the new one.
            if let Some(new) = rule.gcra {
                s.state.tat = match s.gcra {
                    Some(old) => new.carry(&old, s.state.tat, old.scaled(now), new.scaled(now)),
                    None => new.full(new.scaled(now)),
                };
            }
            s.gcra = rule.gcra;
        }
        let mut next = s.state;
        let decided = match next.admit(rule, now) {
            Ok(()) if also() => Ok(()),
            Ok(()) => Err(Refusal::Tokens),
            Err(r) => Err(r),
        };
        match decided {
            Ok(()) => {
                s.state = next;
                s.passes += 1;
                Ok(())
            }
            Err(w @ Refusal::Wait(_)) => {
                s.state = next;
                Err(w)
            }
            Err(r) => {
                s.refused += 1;
                Err(r)
            }
        }
    }

    pub(crate) fn release(&self) {
        self.inner.lock().recover().state.release();
    }

    pub(crate) fn stats(&self) -> HotKeyStats {
        let s = self.inner.lock().recover();
        HotKeyStats {
            key: self.text.to_display(),
            passes: s.passes,
            refused: s.refused,
            overridden: true,
        }
    }
}

/// Where a call holds its key's slot.
#[derive(Debug)]
enum HoldAt<'a> {
    Table(&'a KeyTable, Place),
    Override(&'a OverrideCell),
}

/// A call's slot under its key's concurrency limit, given back when dropped.
#[derive(Debug)]
pub(crate) struct KeyHold<'a> {
    fp: u64,
    at: HoldAt<'a>,
}

impl<'a> KeyHold<'a> {
    pub(crate) fn in_table(table: &'a KeyTable, fp: u64, place: Place) -> KeyHold<'a> {
        KeyHold {
            fp,
            at: HoldAt::Table(table, place),
        }
    }

    pub(crate) fn in_override(cell: &'a OverrideCell, fp: u64) -> KeyHold<'a> {
        KeyHold {
            fp,
            at: HoldAt::Override(cell),
        }
    }

    /// The hold as two numbers, without giving it back: its key's fingerprint and
    /// where it holds, a code of [`HOLD_CODE_BITS`] bits (0: under its key's override;
    /// else its place in the table). Whoever takes them gives the slot back with
    /// [`in_table_code`](Self::in_table_code) or [`in_override`](Self::in_override) of
    /// the same table or override (a permit keeps them in two of its words' bits).
    pub(crate) fn into_parts(self) -> (u64, u32) {
        let code = match self.at {
            HoldAt::Override(_) => 0,
            HoldAt::Table(_, Place::Sketch) => 1,
            HoldAt::Table(_, Place::Entry(n)) => 2 + u32::from(n),
        };
        let fp = self.fp;
        std::mem::forget(self);
        (fp, code)
    }

    /// The hold in `table` that [`into_parts`](Self::into_parts) gave `(fp, code)`
    /// for (`code` not 0).
    pub(crate) fn in_table_code(table: &'a KeyTable, fp: u64, code: u32) -> KeyHold<'a> {
        debug_assert_ne!(code, 0, "an override's hold");
        let place = match code {
            1 => Place::Sketch,
            n => Place::Entry((n - 2) as u16),
        };
        KeyHold::in_table(table, fp, place)
    }
}

/// The bits of a hold's code (see [`KeyHold::into_parts`]): 0, 1 and 2 + a `u16`.
pub(crate) const HOLD_CODE_BITS: u32 = 17;
const _: () = assert!((2 + u16::MAX as u64) >> HOLD_CODE_BITS == 0);

impl Drop for KeyHold<'_> {
    fn drop(&mut self) {
        match self.at {
            HoldAt::Table(t, place) => t.release(self.fp, place),
            HoldAt::Override(c) => c.release(),
        }
    }
}

/// The key step of a call of `fp`, shared by a point's `keys` forms and
/// [`KeyLimiter`](super::KeyLimiter): under the override `over` if the key has one,
/// else in `table` under `rule`; the call's slot if the rule counts calls in flight.
#[inline]
pub(crate) fn admit_key<'a>(
    table: &'a KeyTable,
    over: Option<(&'a OverrideCell, &Rule)>,
    rule: &Rule,
    fp: u64,
    now: u64,
    text: impl FnOnce() -> KeyText,
) -> Result<Option<KeyHold<'a>>, Refusal> {
    if let Some((cell, rule)) = over {
        cell.admit(rule, now)?;
        return Ok(rule.holds().then(|| KeyHold::in_override(cell, fp)));
    }
    let place = table.admit(fp, rule, now, text)?;
    Ok(place.map(|p| KeyHold::in_table(table, fp, p)))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::keys::fingerprint;
    use crate::limit::Gcra;

    #[test]
    fn the_busiest_keys_are_the_top_of_a_full_sort() {
        let t = KeyTable::new(256);
        let rule = Rule {
            gcra: Some(Gcra::per_second(1.0, 3)),
            max_inflight: crate::keys::rule::NO_INFLIGHT_LIMIT,
            max_wait: 0,
            held: false,
        };
        // Key i is called i % 13 times: many ties, and refusals past 3.
        for i in 0..200u64 {
            let text = format!("k{i}");
            for _ in 0..i % 13 {
                let _ = t.admit(fingerprint(text.as_str()), &rule, 1 << 40, || {
                    KeyText::of(text.as_str())
                });
            }
        }
        let mut all = Vec::new();
        t.busiest(usize::MAX, &mut all);
        assert_eq!(all.len(), t.stats().tracked as usize);
        crate::keys::sort_hot_keys(&mut all);
        for n in [0, 1, 7, 20] {
            let mut top = Vec::new();
            t.busiest(n, &mut top);
            crate::keys::sort_hot_keys(&mut top);
            assert_eq!(top, all[..n], "n = {n}");
        }
    }

    #[test]
    fn a_hold_comes_back_whole_from_its_parts() {
        let t = KeyTable::new(256);
        let places = [
            Place::Sketch,
            Place::Entry(0),
            Place::Entry(1),
            Place::Entry(u16::MAX),
        ];
        for (i, place) in places.into_iter().enumerate() {
            let fp = 0x9e37_79b9_7f4a_7c15 ^ i as u64;
            let (got_fp, code) = KeyHold::in_table(&t, fp, place).into_parts();
            assert_eq!(got_fp, fp);
            assert!(
                code != 0 && code >> HOLD_CODE_BITS == 0,
                "{place:?}: {code}"
            );
            let back = KeyHold::in_table_code(&t, fp, code);
            assert!(
                matches!(back.at, HoldAt::Table(_, p) if p == place),
                "{place:?}"
            );
            assert_eq!(back.fp, fp);
            // Not a real hold: nothing to give back.
            std::mem::forget(back);
        }
        let cell = OverrideCell::new("vip");
        let (fp, code) = KeyHold::in_override(&cell, 42).into_parts();
        assert_eq!((fp, code), (42, 0), "an override's hold is code 0");
    }
}
