//! The timing wheel as a plain data structure: no lock, no thread, no clock.

use super::error::WheelError;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;

const NIL: usize = usize::MAX;

/// A single-threaded hashed timing wheel driven by [`tick`](Self::tick), counting time
/// in ticks.
///
/// This is the core of [`TimingWheel`](super::TimingWheel), usable on its own when the
/// caller owns the loop (a game loop, an event loop, a simulation) or wants no
/// threads. It never reads a clock: time moves only when `tick` is called.
///
/// A timer set `d` ticks ahead (at least 1) fires on exactly the `d`-th following
/// call to `tick`. There is one timer per key.
///
/// # Layout
///
/// Timers live in a slab (`Vec` plus free list); each of the `slots` slots is a doubly
/// linked list threaded through the slab, and a `HashMap` maps each key to its slab
/// index. Setting, moving and removing a timer are O(1); a tick walks one slot.
///
/// Where go-zero stores a per-entry *circle* count (turns left before firing) and
/// decrements it on every pass, an entry here stores its absolute due tick, and the
/// circle count is implicit: `(due - now - 1) / slots`. A pass over a slot then only
/// compares, a moved timer needs no circle arithmetic, and the go-zero bug where a
/// timer moved after some ticks fires a turn early cannot happen.
///
/// # Examples
///
/// ```
/// use resilience_runtime::wheel::RawWheel;
///
/// let mut wheel = RawWheel::new(4)?;
/// wheel.set("a", 1, 2);
/// wheel.set("b", 2, 6); // more than one turn ahead
/// assert!(wheel.tick().is_empty());
/// assert_eq!(wheel.tick(), [("a", 1)]);
/// for _ in 0..3 {
///     assert!(wheel.tick().is_empty());
/// }
/// assert_eq!(wheel.tick(), [("b", 2)]);
/// assert!(wheel.is_empty());
/// # Ok::<(), resilience_runtime::wheel::WheelError>(())
/// ```
pub struct RawWheel<K, V> {
    slots: Box<[Slot]>,
    nodes: Vec<Node<K, V>>,
    /// Head of the free list threaded through vacant nodes.
    free: usize,
    index: HashMap<K, usize>,
    now: u64,
}

#[derive(Clone, Copy)]
struct Slot {
    head: usize,
    tail: usize,
}

const EMPTY: Slot = Slot {
    head: NIL,
    tail: NIL,
};

enum Node<K, V> {
    Occupied(Entry<K, V>),
    Vacant { next_free: usize },
}

struct Entry<K, V> {
    key: K,
    value: V,
    due: u64,
    prev: usize,
    next: usize,
}

impl<K, V> RawWheel<K, V> {
    /// An empty wheel of `slots` slots at tick 0.
    ///
    /// # Errors
    ///
    /// [`WheelError::ZeroSlots`] if `slots` is 0, [`WheelError::TooManySlots`] if
    /// the slot array cannot be allocated.
    pub fn new(slots: usize) -> Result<Self, WheelError> {
        if slots == 0 {
            return Err(WheelError::ZeroSlots);
        }
        let mut array = Vec::new();
        array
            .try_reserve_exact(slots)
            .map_err(|_| WheelError::TooManySlots)?;
        array.resize(slots, EMPTY);
        Ok(RawWheel {
            slots: array.into_boxed_slice(),
            nodes: Vec::new(),
            free: NIL,
            index: HashMap::new(),
            now: 0,
        })
    }

    /// The number of ticks so far.
    #[inline]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The number of slots.
    #[inline]
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The number of pending timers.
    #[inline]
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no timer is pending.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    #[inline]
    fn slot_of(&self, due: u64) -> usize {
        // The remainder is below `slots.len()`, so it fits a usize.
        (due % self.slots.len() as u64) as usize
    }

    #[inline]
    fn entry(&self, idx: usize) -> &Entry<K, V> {
        match &self.nodes[idx] {
            Node::Occupied(e) => e,
            Node::Vacant { .. } => unreachable!("timer index points at a vacant node"),
        }
    }

    #[inline]
    fn entry_mut(&mut self, idx: usize) -> &mut Entry<K, V> {
        match &mut self.nodes[idx] {
            Node::Occupied(e) => e,
            Node::Vacant { .. } => unreachable!("timer index points at a vacant node"),
        }
    }

    /// Appends node `idx` (with its `due` already set) to the tail of its slot.
    fn link(&mut self, idx: usize) {
        let slot = self.slot_of(self.entry(idx).due);
        let tail = self.slots[slot].tail;
        {
            let e = self.entry_mut(idx);
            e.prev = tail;
            e.next = NIL;
        }
        if tail == NIL {
            self.slots[slot].head = idx;
        } else {
            self.entry_mut(tail).next = idx;
        }
        self.slots[slot].tail = idx;
    }

    /// Takes node `idx` out of its slot's list (it stays in the slab).
    fn unlink(&mut self, idx: usize) {
        let (slot, prev, next) = {
            let e = self.entry(idx);
            (self.slot_of(e.due), e.prev, e.next)
        };
        if prev == NIL {
            self.slots[slot].head = next;
        } else {
            self.entry_mut(prev).next = next;
        }
        if next == NIL {
            self.slots[slot].tail = prev;
        } else {
            self.entry_mut(next).prev = prev;
        }
    }

    /// Returns node `idx` to the free list and hands back its entry.
    fn release(&mut self, idx: usize) -> Entry<K, V> {
        let node = std::mem::replace(
            &mut self.nodes[idx],
            Node::Vacant {
                next_free: self.free,
            },
        );
        self.free = idx;
        match node {
            Node::Occupied(e) => e,
            Node::Vacant { .. } => unreachable!("released a vacant node"),
        }
    }

    fn alloc(&mut self, entry: Entry<K, V>) -> usize {
        if self.free == NIL {
            self.nodes.push(Node::Occupied(entry));
            self.nodes.len() - 1
        } else {
            let idx = self.free;
            self.free = match self.nodes[idx] {
                Node::Vacant { next_free } => next_free,
                Node::Occupied(_) => unreachable!("free list points at an occupied node"),
            };
            self.nodes[idx] = Node::Occupied(entry);
            idx
        }
    }

    fn due_after(&self, ticks: u64) -> u64 {
        self.now.saturating_add(ticks.max(1))
    }

    /// The earliest tick a pending timer is due on, if any. Walks every slot and
    /// every timer: O(slots + timers), for a wheel that holds few (the real-time
    /// ticker asks it to know how long it may sleep).
    pub(crate) fn next_due(&self) -> Option<u64> {
        let mut earliest = None;
        for slot in self.slots.iter() {
            let mut idx = slot.head;
            while idx != NIL {
                let e = self.entry(idx);
                earliest = Some(earliest.map_or(e.due, |d: u64| d.min(e.due)));
                idx = e.next;
            }
        }
        earliest
    }

    /// Moves time forward to tick `to` without walking a slot: the ticks skipped
    /// must have nothing due (`to` is before [`next_due`](Self::next_due)), as when
    /// the real-time ticker slept through them.
    pub(crate) fn skip_to(&mut self, to: u64) {
        debug_assert!(
            self.next_due().is_none_or(|due| due > to),
            "skipped a due timer"
        );
        self.now = self.now.max(to);
    }

    /// Takes every pending timer out of the wheel and forgets it; the wheel is then
    /// empty (its tick count is kept). The timers come out in no particular order.
    pub fn drain(&mut self) -> Vec<(K, V)> {
        let out = std::mem::take(&mut self.nodes)
            .into_iter()
            .filter_map(|node| match node {
                Node::Occupied(e) => Some((e.key, e.value)),
                Node::Vacant { .. } => None,
            })
            .collect();
        self.free = NIL;
        self.index.clear();
        self.slots.fill(EMPTY);
        out
    }
}

impl<K: Eq + Hash + Clone, V> RawWheel<K, V> {
    /// Sets the timer of `key` to fire with `value` after `ticks` ticks (0 counts as
    /// 1). If `key` already has a timer, its value and due tick are replaced and the old
    /// value is returned.
    pub fn set(&mut self, key: K, value: V, ticks: u64) -> Option<V> {
        use std::collections::hash_map::Entry as MapEntry;
        let due = self.due_after(ticks);
        match self.index.entry(key) {
            MapEntry::Occupied(o) => {
                let idx = *o.get();
                self.unlink(idx);
                let e = self.entry_mut(idx);
                e.due = due;
                let old = std::mem::replace(&mut e.value, value);
                self.link(idx);
                Some(old)
            }
            MapEntry::Vacant(v) => {
                // Clone before touching the slab, so a panicking `Clone` leaves the
                // wheel as it was.
                let key = v.key().clone();
                let idx = if self.free == NIL {
                    self.nodes.len()
                } else {
                    self.free
                };
                v.insert(idx);
                let got = self.alloc(Entry {
                    key,
                    value,
                    due,
                    prev: NIL,
                    next: NIL,
                });
                debug_assert_eq!(got, idx);
                self.link(idx);
                None
            }
        }
    }

    /// Moves the timer of `key` to fire `ticks` ticks from now (0 counts as 1),
    /// keeping its value. Returns `false` (and does nothing) if `key` has no timer.
    pub fn move_to<Q>(&mut self, key: &Q, ticks: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(&idx) = self.index.get(key) else {
            return false;
        };
        let due = self.due_after(ticks);
        self.unlink(idx);
        self.entry_mut(idx).due = due;
        self.link(idx);
        true
    }

    /// Cancels the timer of `key`, returning its value, or `None` if it had none.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let idx = self.index.remove(key)?;
        self.unlink(idx);
        Some(self.release(idx).value)
    }

    /// Whether `key` has a pending timer.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.index.contains_key(key)
    }

    /// How many ticks from now the timer of `key` fires (at least 1), or `None`.
    pub fn ticks_left<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let &idx = self.index.get(key)?;
        Some(self.entry(idx).due - self.now)
    }

    /// Advances one tick and returns the timers due on it, in the order they were
    /// scheduled into their slot. They are forgotten by the wheel.
    ///
    /// Walks the one slot the tick lands on, including its timers for later turns.
    /// Does not allocate when nothing is due.
    pub fn tick(&mut self) -> Vec<(K, V)> {
        self.now += 1;
        let mut due = Vec::new();
        let mut idx = self.slots[self.slot_of(self.now)].head;
        while idx != NIL {
            let (next, fires) = {
                let e = self.entry(idx);
                (e.next, e.due <= self.now)
            };
            if fires {
                self.unlink(idx);
                let e = self.release(idx);
                self.index.remove(&e.key);
                due.push((e.key, e.value));
            }
            idx = next;
        }
        due
    }
}

impl<K: fmt::Debug, V> fmt::Debug for RawWheel<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawWheel")
            .field("slots", &self.slots.len())
            .field("now", &self.now)
            .field("pending", &self.index.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks until something fires; returns (tick number, fired).
    fn run_until_fire<K: Eq + Hash + Clone, V>(
        w: &mut RawWheel<K, V>,
        max: u64,
    ) -> (u64, Vec<(K, V)>) {
        for _ in 0..max {
            let fired = w.tick();
            if !fired.is_empty() {
                return (w.now(), fired);
            }
        }
        panic!("nothing fired within {max} ticks");
    }

    #[test]
    fn zero_slots_is_an_error() {
        assert_eq!(
            RawWheel::<u8, u8>::new(0).unwrap_err(),
            WheelError::ZeroSlots
        );
    }

    #[test]
    fn fires_on_exact_tick_for_every_delay_and_wheel_size() {
        for slots in 1..=7 {
            for delay in 0..=20u64 {
                let mut w = RawWheel::new(slots).unwrap();
                w.set(1u8, delay, delay);
                let (at, fired) = run_until_fire(&mut w, 30);
                assert_eq!(at, delay.max(1), "slots {slots} delay {delay}");
                assert_eq!(fired, [(1, delay)]);
                assert!(w.is_empty());
            }
        }
    }

    #[test]
    fn slab_slots_are_reused() {
        let mut w = RawWheel::new(3).unwrap();
        for round in 0..10u32 {
            for k in 0..100u32 {
                w.set(k, round, u64::from(k % 5));
            }
            for k in (0..100u32).step_by(2) {
                assert_eq!(w.remove(&k), Some(round));
            }
            let mut fired = 0;
            for _ in 0..5 {
                fired += w.tick().len();
            }
            assert_eq!(fired, 50);
            assert!(w.is_empty());
        }
        assert!(w.nodes.len() <= 100, "slab grew to {}", w.nodes.len());
    }

    #[test]
    fn same_slot_fires_in_scheduling_order_and_skips_later_turns() {
        let mut w = RawWheel::new(4).unwrap();
        w.set("late", 0, 6); // same slot as tick 2, one turn later
        w.set("a", 1, 2);
        w.set("b", 2, 2);
        w.set("c", 3, 2);
        w.remove("b");
        w.tick();
        assert_eq!(w.tick(), [("a", 1), ("c", 3)]);
        assert_eq!(w.ticks_left("late"), Some(4));
        assert!(w.contains_key("late"));
    }

    #[test]
    fn drain_empties_and_keeps_time() {
        let mut w = RawWheel::new(4).unwrap();
        w.tick();
        w.set(1, 'a', 3);
        w.set(2, 'b', 9);
        let mut all = w.drain();
        all.sort();
        assert_eq!(all, [(1, 'a'), (2, 'b')]);
        assert!(w.is_empty());
        assert_eq!(w.now(), 1);
        for _ in 0..12 {
            assert!(w.tick().is_empty());
        }
        w.set(1, 'c', 1);
        assert_eq!(w.tick(), [(1, 'c')]);
    }
}
