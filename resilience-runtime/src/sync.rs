//! Every atomic, lock and cell the runtime shares between threads, in one place, so a
//! model checker can replace them: `resilience-loom` compiles the engine's decision
//! files against loom's versions of these names (see its crate docs). Nothing else in
//! the crate names `std::sync`.

/// Taking a lock recovers it from poisoning: `m.lock().recover()`.
pub(crate) use crate::lock::Recover;
pub(crate) use std::sync::atomic::{self, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(test)]
pub(crate) use std::sync::Barrier;
#[cfg(feature = "redis")]
pub(crate) use std::sync::LazyLock;
pub(crate) use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, Once, OnceLock, RwLock, Weak};
pub(crate) use std::thread_local;
