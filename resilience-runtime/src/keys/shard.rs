//! One shard of a point's key table, pure: no atomics, no clock, no lock (the table
//! runs it under the shard's mutex).
//!
//! # Layout
//!
//! - `entries`: the tracked keys, at most `cap`, each with its exact state, a decayed
//!   hit count (its recent frequency) and its passes and refusals since it was tracked.
//! - `index`: open addressing (linear probing, backward-shift deletion) from a key's
//!   fingerprint to its entry.
//! - `sketch`: two rows of cells shared by the keys that are not tracked, each cell
//!   with a token bucket, calls in flight and a decayed frequency.
//!
//! # The invariant
//!
//! For every key `k` and each of its two sketch cells `c`, the state `k` would have
//! with a bucket and a count of its own (its *true* state) is at most `c`'s: `c`'s
//! bucket is at least as far ahead and `c` counts at least as many calls in flight.
//! It holds because a cell is charged for every call of every key it holds, and
//! because a key enters and leaves the table carrying its state:
//!
//! - a key enters the table only with no call in flight in the sketch (some cell of
//!   it counts 0), starting from the lesser of its cells' buckets;
//! - a key leaves the table only with no call in flight, folding its bucket into both
//!   cells (each keeps the one further ahead).
//!
//! An untracked key is admitted when the lesser of its cells admits it, so its true
//! state admits it too: no key, tracked or not, is ever admitted beyond its rule.
//! (Overridden values are never in a shard: the table keeps them apart.)
//!
//! # Who is tracked
//!
//! Every call of a key, tracked or not, counts in its two cells' frequencies, and a
//! key's frequency is the lesser of the two (a count-min sketch: never below its
//! true count). A key not in the table takes a free entry if there is one. Otherwise
//! it replaces the least frequent of the next [`VICTIMS`] entries after the clock
//! hand that have no call in flight, if its frequency is more than twice that
//! entry's, plus one (TinyLFU's admission rule, with a margin: when many keys call
//! about equally often, none is worth a slot more than another, and the table
//! hardly churns). A key that would not beat the coldest frequency the previous look
//! found does not look (halved at each aging like the frequencies), so most calls of
//! keys the table cannot hold cost no more than a hashed lookup. Frequencies are halved every `8 * cap` calls, so a key that went cold
//! makes room.

use super::rule::{KeyState, Refusal, Rule};
use super::text::KeyText;
use crate::limit::Gcra;

/// Entries looked at for a victim.
pub(crate) const VICTIMS: usize = 8;

const EMPTY: u16 = u16::MAX;

/// The most entries one shard holds (entry numbers fit the index's `u16`).
pub(crate) const MAX_SHARD_CAP: usize = (u16::MAX - 1) as usize;

/// A tracked key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) fp: u64,
    pub(crate) state: KeyState,
    pub(crate) passes: u64,
    pub(crate) refused: u64,
    pub(crate) text: KeyText,
}

/// A sketch cell, shared by the untracked keys that hash to it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cell {
    pub(crate) tat: u64,
    pub(crate) inflight: u32,
    pub(crate) freq: u32,
}

/// Where an admitted call holds its slot (for [`Shard::release`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// In entry `n`.
    Entry(u16),
    /// In the key's two sketch cells.
    Sketch,
}

/// One shard (see the module docs).
#[derive(Debug)]
pub(crate) struct Shard {
    entries: Vec<Entry>,
    cap: usize,
    index: Box<[u16]>,
    index_mask: usize,
    sketch: Box<[Cell]>,
    width_mask: usize,
    /// The bucket every state here is scaled for: the rule's, last time it was used.
    gcra: Option<Gcra>,
    hand: usize,
    /// The frequency of the coldest entry the last look for a victim found (halved
    /// with the others).
    floor: u32,
    ops: u32,
    aging: u32,
    /// Calls of untracked keys admitted and refused.
    pub(crate) untracked_passes: u64,
    pub(crate) untracked_refused: u64,
    /// Keys that replaced another in the table.
    pub(crate) evictions: u64,
}

impl Shard {
    /// A shard of `cap` entries (at most [`MAX_SHARD_CAP`]).
    pub(crate) fn new(cap: usize) -> Shard {
        let cap = cap.clamp(1, MAX_SHARD_CAP);
        let slots = (cap * 2).next_power_of_two();
        // Two cells per row for each entry: a sketch this wide keeps the counts of a
        // full table's keys mostly apart.
        let width = (cap * 2).next_power_of_two();
        Shard {
            entries: Vec::with_capacity(cap),
            cap,
            index: vec![EMPTY; slots].into_boxed_slice(),
            index_mask: slots - 1,
            sketch: vec![Cell::default(); width * 2].into_boxed_slice(),
            width_mask: width - 1,
            gcra: None,
            hand: 0,
            floor: 0,
            ops: 0,
            aging: (cap as u32).saturating_mul(8).max(256),
            untracked_passes: 0,
            untracked_refused: 0,
            evictions: 0,
        }
    }

    /// Bytes this shard holds on the heap and inline.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Shard>()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.index.len() * 2
            + self.sketch.len() * std::mem::size_of::<Cell>()
    }

    /// Keys tracked.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The tracked keys.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    #[inline(always)]
    fn cells(&self, fp: u64) -> (usize, usize) {
        let w = self.width_mask;
        ((fp as usize) & w, w + 1 + ((fp >> 32) as usize & w))
    }

    #[inline(always)]
    fn home(&self, fp: u64) -> usize {
        (fp >> 20) as usize & self.index_mask
    }

    /// The entry of `fp`, if tracked.
    #[inline]
    pub(crate) fn find(&self, fp: u64) -> Option<usize> {
        let mut i = self.home(fp);
        loop {
            match self.index[i] {
                EMPTY => return None,
                n if self.entries[usize::from(n)].fp == fp => return Some(usize::from(n)),
                _ => i = (i + 1) & self.index_mask,
            }
        }
    }

    /// Re-scales every state for `gcra` (the rule changed), carrying what each owes.
    fn retune(&mut self, gcra: Option<Gcra>, now: u64) {
        if self.gcra == gcra {
            return;
        }
        let old = self.gcra;
        self.gcra = gcra;
        let Some(new) = gcra else { return };
        let carry = |tat: u64| match old {
            Some(old) => new.carry(&old, tat, old.scaled(now), new.scaled(now)),
            None => new.full(new.scaled(now)),
        };
        for e in &mut self.entries {
            e.state.tat = carry(e.state.tat);
        }
        for c in self.sketch.iter_mut() {
            c.tat = carry(c.tat);
        }
    }

    /// Halves every hit count and frequency every `aging` calls.
    #[inline]
    fn tick(&mut self) {
        self.ops += 1;
        if self.ops >= self.aging {
            self.ops = 0;
            self.floor /= 2;
            for c in self.sketch.iter_mut() {
                c.freq /= 2;
            }
        }
    }

    /// [`admit_with`](Self::admit_with) with nothing else to ask.
    #[cfg(test)]
    pub(crate) fn admit(
        &mut self,
        fp: u64,
        rule: &Rule,
        now: u64,
        text: impl FnOnce() -> KeyText,
    ) -> Result<Option<Place>, Refusal> {
        self.admit_with(fp, rule, now, text, |_| true)
    }

    /// The decision for a call of key `fp` under `rule` at `now` (clock ns): where it
    /// holds its slot (if the rule counts calls in flight; `None` otherwise), or why
    /// it is refused. `text` gives the key's text if it enters the table. A call the
    /// rule admits is admitted only if `also` (told whether the key is in the table)
    /// agrees, and otherwise refused for [`Refusal::Tokens`] with nothing taken: the
    /// keys' cluster-wide buckets are asked there, under this shard's lock.
    #[inline]
    pub(crate) fn admit_with(
        &mut self,
        fp: u64,
        rule: &Rule,
        now: u64,
        text: impl FnOnce() -> KeyText,
        also: impl FnOnce(bool) -> bool,
    ) -> Result<Option<Place>, Refusal> {
        self.retune(rule.gcra, now);
        self.tick();
        let n = match self.find(fp) {
            Some(n) => {
                let (a, b) = self.cells(fp);
                self.bump(a, b);
                n
            }
            // `track` counts the call in the sketch.
            None => match self.track(fp, text) {
                Some(n) => n,
                None => return self.admit_untracked(fp, rule, now, also),
            },
        };
        let e = &mut self.entries[n];
        let mut next = e.state;
        let decided = match next.admit(rule, now) {
            Ok(()) if also(true) => Ok(()),
            Ok(()) => Err(Refusal::Tokens),
            Err(r) => Err(r),
        };
        match decided {
            Ok(()) => {
                e.state = next;
                e.passes += 1;
                Ok(rule.holds().then_some(Place::Entry(n as u16)))
            }
            Err(w @ Refusal::Wait(_)) => {
                // The token is reserved: counted when the call comes back for it.
                e.state = next;
                Err(w)
            }
            Err(r) => {
                e.refused += 1;
                Err(r)
            }
        }
    }

    /// Moves `fp` into the table if the rule of the module docs lets it: its entry.
    fn track(&mut self, fp: u64, text: impl FnOnce() -> KeyText) -> Option<usize> {
        let (a, b) = self.cells(fp);
        self.bump(a, b);
        let (ca, cb) = (self.sketch[a], self.sketch[b]);
        let freq = ca.freq.min(cb.freq);
        if ca.inflight.min(cb.inflight) != 0 {
            // Some call of this key may be in flight in the sketch.
            return None;
        }
        let now_tat = self.lesser_tat(ca.tat, cb.tat);
        let n = if self.entries.len() < self.cap {
            self.entries.push(Entry {
                fp,
                state: KeyState::default(),
                passes: 0,
                refused: 0,
                text: KeyText::EMPTY,
            });
            self.entries.len() - 1
        } else {
            // The coldest frequency the last look found: a key that would not beat
            // it skips the look (most calls, when many keys call equally often).
            if freq <= self.floor.saturating_mul(2).saturating_add(1) {
                return None;
            }
            let (victim, theirs) = self.victim()?;
            self.floor = theirs;
            if freq <= theirs.saturating_mul(2).saturating_add(1) {
                return None;
            }
            self.evict(victim);
            victim
        };
        self.entries[n] = Entry {
            fp,
            state: KeyState {
                tat: now_tat,
                inflight: 0,
            },
            passes: 0,
            refused: 0,
            text: text(),
        };
        self.insert_index(fp, n as u16);
        Some(n)
    }

    #[inline]
    fn bump(&mut self, a: usize, b: usize) {
        self.sketch[a].freq = self.sketch[a].freq.saturating_add(1);
        self.sketch[b].freq = self.sketch[b].freq.saturating_add(1);
    }

    /// Of two buckets' arrival times, the one less far ahead (scaled; either, without
    /// a bucket).
    fn lesser_tat(&self, x: u64, y: u64) -> u64 {
        match self.gcra {
            // Both are read at the same moment: the one less far ahead of any `now`
            // at or before both is the lesser, and a full bucket reads as 0 ahead.
            Some(_) if x.wrapping_sub(y) as i64 > 0 => y,
            _ => x,
        }
    }

    /// A key's frequency: the lesser of its cells'.
    #[inline]
    fn frequency(&self, fp: u64) -> u32 {
        let (a, b) = self.cells(fp);
        self.sketch[a].freq.min(self.sketch[b].freq)
    }

    /// The least frequent of the next [`VICTIMS`] entries without a call in flight,
    /// with its frequency.
    fn victim(&mut self) -> Option<(usize, u32)> {
        let len = self.entries.len();
        let mut best: Option<(usize, u32)> = None;
        for _ in 0..VICTIMS.min(len) {
            let n = self.hand;
            self.hand = (self.hand + 1) % len;
            let e = &self.entries[n];
            if e.state.inflight == 0 {
                let f = self.frequency(e.fp);
                if best.is_none_or(|(_, bf)| f < bf) {
                    best = Some((n, f));
                }
            }
        }
        best
    }

    /// Takes entry `n` out of the index, folding its bucket into its cells.
    fn evict(&mut self, n: usize) {
        let e = self.entries[n];
        let (a, b) = self.cells(e.fp);
        for c in [a, b] {
            let cell = &mut self.sketch[c];
            cell.tat = self.gcra.map_or(cell.tat, |_| {
                if e.state.tat.wrapping_sub(cell.tat) as i64 > 0 {
                    e.state.tat
                } else {
                    cell.tat
                }
            });
        }
        self.remove_index(e.fp);
        self.evictions += 1;
    }

    fn insert_index(&mut self, fp: u64, n: u16) {
        let mut i = self.home(fp);
        while self.index[i] != EMPTY {
            i = (i + 1) & self.index_mask;
        }
        self.index[i] = n;
    }

    /// Linear probing's deletion: later entries of the run shift back into the hole.
    fn remove_index(&mut self, fp: u64) {
        let mut i = self.home(fp);
        loop {
            let n = self.index[i];
            if n == EMPTY {
                return;
            }
            if self.entries[usize::from(n)].fp == fp {
                break;
            }
            i = (i + 1) & self.index_mask;
        }
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & self.index_mask;
            let n = self.index[j];
            if n == EMPTY {
                break;
            }
            let home = self.home(self.entries[usize::from(n)].fp);
            // Move `n` back unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.index[hole] = n;
                hole = j;
            }
        }
        self.index[hole] = EMPTY;
    }

    /// The decision for a key not tracked, on the lesser of its two cells.
    fn admit_untracked(
        &mut self,
        fp: u64,
        rule: &Rule,
        now: u64,
        also: impl FnOnce(bool) -> bool,
    ) -> Result<Option<Place>, Refusal> {
        let (a, b) = self.cells(fp);
        let (ca, cb) = (self.sketch[a], self.sketch[b]);
        let mut lesser = KeyState {
            tat: self.lesser_tat(ca.tat, cb.tat),
            inflight: ca.inflight.min(cb.inflight),
        };
        let waits = match lesser.admit(rule, now) {
            Ok(()) => None,
            Err(Refusal::Wait(ns)) => Some(ns),
            Err(r) => {
                self.untracked_refused += 1;
                return Err(r);
            }
        };
        if let Some(ns) = waits {
            // Reserved on the lesser cell: both cells are charged for it, as for a
            // call admitted now (the charge is what keeps every key's count below
            // its cells'); no slot yet.
            for c in [a, b] {
                let cell = &mut self.sketch[c];
                if let Some(g) = &rule.gcra {
                    cell.tat = g.charge(cell.tat, g.scaled(now), 1);
                }
            }
            return Err(Refusal::Wait(ns));
        }
        if !also(false) {
            self.untracked_refused += 1;
            return Err(Refusal::Tokens);
        }
        for c in [a, b] {
            let cell = &mut self.sketch[c];
            if let (Some(g), false) = (&rule.gcra, rule.held) {
                cell.tat = g.charge(cell.tat, g.scaled(now), 1);
            }
            if rule.holds() {
                cell.inflight += 1;
            }
        }
        self.untracked_passes += 1;
        Ok(rule.holds().then_some(Place::Sketch))
    }

    /// A call of `fp` admitted at `place` ended.
    pub(crate) fn release(&mut self, fp: u64, place: Place) {
        match place {
            Place::Entry(n) => {
                if let Some(e) = self.entries.get_mut(usize::from(n)) {
                    // An entry with a call in flight is never replaced.
                    debug_assert_eq!(e.fp, fp);
                    if e.fp == fp {
                        e.state.release();
                    }
                }
            }
            Place::Sketch => {
                let (a, b) = self.cells(fp);
                for c in [a, b] {
                    self.sketch[c].inflight = self.sketch[c].inflight.saturating_sub(1);
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
