//! Atomics (and the mutex and thread-local macro of the hung-call table's lane
//! numbers) used by the runtime, in one place so a model checker can replace them.

pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
pub(crate) use std::sync::Mutex;
pub(crate) use std::thread_local;
