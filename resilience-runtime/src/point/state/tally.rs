//! Visit counts of calls that run without a policy (points with no policy, or with a
//! breaker only), kept per thread so that counting one is a load and a store into a
//! cell only the counting thread writes, not an atomic read-modify-write on a line
//! every thread shares.
//!
//! Each thread owns a sparse table indexed by point id (256 x 256 x 256 cells, chunks
//! allocated on first use: the first uncounted call of a thread on each block of 256
//! points allocates 2 KiB; the last 65 536 ids are never allocated, so points created
//! past the first 16 711 680 are counted by their callers with an atomic instead).
//! Reading a total takes the registry lock and adds the cells of every live thread to
//! those of the threads that exited, which fold their counts into a shared table under
//! the same lock, so a total never counts a call twice or misses a finished one.

use crate::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use crate::sync::Recover;
use crate::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::cell::Cell;

const FAN: usize = 256;
/// Points with ids at or above this are counted elsewhere by the caller. The last
/// top-level block is never allocated: [`key`] maps every larger id into it.
pub(crate) const MAX_IDS: u32 = ((FAN - 1) * FAN * FAN) as u32;

struct Chunk([AtomicU64; FAN]);
struct Level2([AtomicPtr<Chunk>; FAN]);

/// A sparse table of counters indexed by point id.
struct Table {
    l1: [AtomicPtr<Level2>; FAN],
}

fn null_array<T>() -> [AtomicPtr<T>; FAN] {
    std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut()))
}

/// The table of a thread that has none (yet, or any more): nothing is allocated in
/// it, so every lookup misses and takes the slow path.
static EMPTY: Table = Table {
    l1: [const { AtomicPtr::new(std::ptr::null_mut()) }; FAN],
};

/// The counting key of point `id`: `id` itself below [`MAX_IDS`], else a key whose
/// block is never allocated, so that [`add_one`] needs no range check.
pub(crate) fn key(id: u32) -> u32 {
    id.min(MAX_IDS)
}

impl Table {
    fn new() -> Table {
        Table { l1: null_array() }
    }

    /// Top-level, second-level and cell index of a key (any `u32`: the top index is
    /// masked, and keys past [`MAX_IDS`] only ever miss).
    #[inline]
    fn split(id: u32) -> (usize, usize, usize) {
        let id = id as usize;
        (id / (FAN * FAN) % FAN, id / FAN % FAN, id % FAN)
    }

    /// The cell of `id`, allocated if missing. Only the owner of a thread table (or
    /// a holder of the registry lock, for the shared table) calls this.
    #[inline]
    fn cell(&self, id: u32) -> &AtomicU64 {
        debug_assert!(id < MAX_IDS && !std::ptr::eq(self, &EMPTY));
        let (a, b, c) = Table::split(id);
        let mut l2 = self.l1[a].load(Ordering::Acquire);
        if l2.is_null() {
            l2 = Box::into_raw(Box::new(Level2(null_array())));
            self.l1[a].store(l2, Ordering::Release);
        }
        // SAFETY: level-2 nodes and chunks are freed only when the table is dropped,
        // and a table is dropped only once nobody can reach it (see `Drop`).
        let l2 = unsafe { &*l2 };
        let mut chunk = l2.0[b].load(Ordering::Acquire);
        if chunk.is_null() {
            chunk = Box::into_raw(Box::new(Chunk(std::array::from_fn(|_| AtomicU64::new(0)))));
            l2.0[b].store(chunk, Ordering::Release);
        }
        // SAFETY: as above.
        unsafe { &(*chunk).0[c] }
    }

    /// The cell of `id` if it was allocated.
    #[inline]
    fn existing(&self, id: u32) -> Option<&AtomicU64> {
        let (a, b, c) = Table::split(id);
        let l2 = self.l1[a].load(Ordering::Acquire);
        if l2.is_null() {
            return None;
        }
        // SAFETY: see `cell`.
        let chunk = unsafe { &*l2 }.0[b].load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: see `cell`.
        Some(unsafe { &(*chunk).0[c] })
    }

    /// The count of `id` (0 when never counted).
    fn get(&self, id: u32) -> u64 {
        self.existing(id).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Calls `f(id, count)` for every non-zero count.
    fn for_each(&self, mut f: impl FnMut(u32, u64)) {
        for (a, l2) in self.l1.iter().enumerate() {
            let l2 = l2.load(Ordering::Acquire);
            if l2.is_null() {
                continue;
            }
            // SAFETY: see `cell`.
            for (b, chunk) in unsafe { &*l2 }.0.iter().enumerate() {
                let chunk = chunk.load(Ordering::Acquire);
                if chunk.is_null() {
                    continue;
                }
                // SAFETY: see `cell`.
                for (c, v) in unsafe { &*chunk }.0.iter().enumerate() {
                    let v = v.load(Ordering::Relaxed);
                    if v != 0 {
                        f(((a * FAN + b) * FAN + c) as u32, v);
                    }
                }
            }
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        for l2 in &self.l1 {
            let l2 = l2.load(Ordering::Acquire);
            if l2.is_null() {
                continue;
            }
            // SAFETY: allocated by `cell` with `Box::into_raw`; `&mut self` means no
            // one else holds the table.
            let l2 = unsafe { Box::from_raw(l2) };
            for chunk in &l2.0 {
                let chunk = chunk.load(Ordering::Acquire);
                if !chunk.is_null() {
                    // SAFETY: as above.
                    drop(unsafe { Box::from_raw(chunk) });
                }
            }
        }
    }
}

/// The live thread tables and the counts of exited threads.
struct Shared {
    live: Vec<Arc<Table>>,
    exited: Table,
}

fn shared() -> MutexGuard<'static, Shared> {
    static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            Mutex::new(Shared {
                live: Vec::new(),
                exited: Table::new(),
            })
        })
        .lock()
        .recover()
}

/// A thread's table, registered while the thread lives.
struct ThreadTable(Arc<Table>);

impl ThreadTable {
    fn register() -> ThreadTable {
        let table = Arc::new(Table::new());
        shared().live.push(Arc::clone(&table));
        ThreadTable(table)
    }
}

impl Drop for ThreadTable {
    fn drop(&mut self) {
        // From now on this thread's calls are counted by their callers.
        MINE_FAST.set(&EMPTY);
        let mut shared = shared();
        let Shared { live, exited } = &mut *shared;
        // Fold and unregister under one lock: a reader sees the counts either here or
        // there, never both, never neither.
        self.0.for_each(|id, v| {
            exited.cell(id).fetch_add(v, Ordering::Relaxed);
        });
        live.retain(|t| !Arc::ptr_eq(t, &self.0));
    }
}

thread_local! {
    /// This thread's registered table (lazily, unregistered at thread exit).
    static MINE: ThreadTable = ThreadTable::register();
    /// The same table as a plain pointer (`EMPTY` until `MINE` exists and after it is
    /// gone), readable without the lazy-initialisation check.
    static MINE_FAST: Cell<*const Table> = const { Cell::new(&EMPTY) };
}

/// Counts one call of the point with [`key`] `id` on this thread. Returns `false`
/// (nothing counted) when `id` is out of range or the thread's locals are already torn
/// down; the caller then counts the call itself. (The engine calls its two halves,
/// [`add_to_existing`] in line and [`add_one_slow`] out of its hot path.)
#[cfg(test)]
pub(crate) fn add_one(id: u32) -> bool {
    add_to_existing(id) || add_one_slow(id)
}

/// [`add_one`] into a cell this thread already has; `false` (nothing counted) when it
/// has none, and the caller goes the cold way ([`add_one_slow`]), out of its hot path.
#[inline]
pub(crate) fn add_to_existing(id: u32) -> bool {
    // SAFETY: `MINE_FAST` is `EMPTY` or points into `MINE`, which outlives it (its
    // drop resets the pointer first), and only this thread uses it.
    let table = unsafe { &*MINE_FAST.get() };
    match table.existing(id) {
        Some(cell) => {
            // Only this thread writes this cell: no read-modify-write needed.
            cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// The first count of a thread, or of a block of 256 points on it.
/// Returns `false` as [`add_one`] does.
#[cold]
#[inline(never)]
pub(crate) fn add_one_slow(id: u32) -> bool {
    if id >= MAX_IDS {
        return false;
    }
    MINE.try_with(|t| {
        MINE_FAST.set(Arc::as_ptr(&t.0));
        let cell = t.0.cell(id);
        cell.store(cell.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    })
    .is_ok()
}

/// All calls of point `id` counted by [`add_one`], on every thread, live or exited.
pub(crate) fn total(id: u32) -> u64 {
    Reader::new().total(id)
}

/// Reads totals under one hold of the registry lock, for a pass over many points
/// (hold it for a bounded batch: a thread's first call on a block of points and a
/// thread's exit wait for it).
pub(crate) struct Reader(MutexGuard<'static, Shared>);

impl Reader {
    pub(crate) fn new() -> Reader {
        Reader(shared())
    }

    /// [`total`] of `id`.
    pub(crate) fn total(&self, id: u32) -> u64 {
        if id >= MAX_IDS {
            return 0;
        }
        self.0.exited.get(id) + self.0.live.iter().map(|t| t.get(id)).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::atomic::AtomicU32;

    /// Ids no other test uses.
    fn fresh_id() -> u32 {
        static NEXT: AtomicU32 = AtomicU32::new(MAX_IDS - 10_000);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn counts_from_live_and_exited_threads_add_up_exactly() {
        let id = fresh_id();
        let other = fresh_id();
        for _ in 0..10 {
            assert!(add_one(id));
        }
        let handles: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        assert!(add_one(id));
                    }
                })
            })
            .collect();
        // While they run and exit, a total never goes down.
        let mut last = 0;
        while handles.iter().any(|h| !h.is_finished()) {
            let t = total(id);
            assert!(t >= last, "{t} after {last}");
            last = t;
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(total(id), 8 * 1_000 + 10);
        assert_eq!(total(other), 0, "other ids untouched");
    }

    #[test]
    fn sparse_ids_across_levels() {
        let ids = [0u32, 255, 256, 65_535, 65_536, MAX_IDS - 1];
        let table = Table::new();
        for (n, &id) in ids.iter().enumerate() {
            for _ in 0..=n {
                let c = table.cell(id);
                c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        }
        for (n, &id) in ids.iter().enumerate() {
            assert_eq!(table.get(id), n as u64 + 1);
        }
        let mut seen = Vec::new();
        table.for_each(|id, v| seen.push((id, v)));
        assert_eq!(seen.len(), ids.len());
        assert!(seen.iter().all(|(id, v)| ids[*v as usize - 1] == *id));
        assert_eq!(table.get(1), 0);
        assert!(!add_one(MAX_IDS), "out of range is the caller's to count");
        for id in [MAX_IDS, MAX_IDS + 1, u32::MAX] {
            assert_eq!(key(id), MAX_IDS);
            assert!(!add_one(key(id)));
            assert!(!add_one(id), "any key past the range misses");
        }
        assert_eq!(key(MAX_IDS - 1), MAX_IDS - 1);
        assert_eq!(
            std::mem::size_of::<Chunk>(),
            2048,
            "the guide (how it works): 2 KiB per block"
        );
        assert_eq!(total(MAX_IDS), 0);
    }
}
