//! The engine's lock-free decisions, model-checked with [loom].
//!
//! `resilience-runtime` admits calls with a handful of atomic words: the flow word
//! (passes and calls in flight, one compare-and-swap per admission), the delay's end
//! and probe time, the token bucket's arrival time, and the hung-call table. Their
//! guarantees are exact ("never more than the limit", "at most one probe", "counted
//! once"), and a stress test can only make a violation likely, not rule it out. The
//! models under `src/models` run the engine's code under loom, which executes every
//! interleaving of two or three threads (up to a bound on preemptions), with the
//! values each atomic load may return under its orderings, and checks every access
//! to an `UnsafeCell` against happens-before; each model asserts its bound in every
//! one of them.
//!
//! loom's memory model is not all of C++'s: a read-modify-write always reads the
//! latest store, for one, so an ordering that matters only through a
//! compare-and-swap reading an older value goes unchecked (the `Acquire` of
//! `Delay::until`, which keeps a claim from deciding on the previous probe time, is
//! such an ordering: weakening it to `Relaxed` fails no model).
//!
//! # How the engine gets here
//!
//! This crate compiles the engine's *real* source files, included by `#[path]`
//! (`point/state/flow.rs`, `point/state/delay.rs`, `point/state/hang.rs`,
//! `point/state/durations.rs`, `limit/gcra.rs`,
//! `limit/cell.rs`, `retry/take.rs`, and the key table of `keys/`): they take their atomics (and `hang.rs` its mutex and
//! thread-locals) from `crate::sync`, which here is this crate's `sync` module, built
//! on loom, and in the runtime is `std`'s. `build.rs` sets `cfg(loom)`, so the files'
//! std-thread unit tests (`#[cfg(all(test, not(loom)))]`) drop out.
//!
//! The alternative, building `resilience-runtime` itself with `RUSTFLAGS="--cfg
//! loom"`, would rebuild every dependency with that flag (and need the whole runtime
//! to compile against loom's types); including the few files that hold the decisions
//! keeps the models a plain `cargo test -p resilience-loom`, built with the rest of
//! the workspace.
//!
//! Run with `cargo test -p resilience-loom` (`--release` for speed). loom's usual
//! environment variables (`LOOM_LOG`, `LOOM_LOCATION`, ...) work; the preemption
//! bound is set by each model.

// Not every engine function is used by a model.
#![allow(dead_code)]

/// What the included engine files take from `crate::sync`: loom's versions.
mod sync {
    pub(crate) use loom::sync::atomic::{self, AtomicPtr, AtomicU64, AtomicU8, Ordering};

    pub(crate) use crate::lock::Recover;
    use std::cell::Cell;
    use std::ops::{Deref, DerefMut};
    use std::sync::LockResult;
    pub(crate) use std::sync::PoisonError;

    std::thread_local! {
        /// The loom lock behind every [`Mutex`] in the current execution (see
        /// [`new_execution`]). A std thread-local: one per test, shared by the
        /// test's loom threads (coroutines on the test's OS thread).
        static SHADOW: Cell<Option<&'static loom::sync::Mutex<()>>> = const { Cell::new(None) };
    }

    /// Gives [`Mutex`] a loom lock of this execution: call first thing in each
    /// execution of a model whose code locks one. Not a `loom::lazy_static!`: loom
    /// drops those when the model's closure returns, while a spawned thread's
    /// thread-locals (whose destructors lock here, giving a lane number back) may be
    /// dropped after that, as `join` returns before them. The lock is leaked (a few
    /// bytes per execution) so that every guard can hold it for `'static`; loom's
    /// mutex has no destructor that would need its execution.
    pub(crate) fn new_execution() {
        SHADOW.set(Some(Box::leak(Box::new(loom::sync::Mutex::new(())))));
    }

    /// std's `Mutex` (a `const fn new`, for a `static`) whose locking loom sees: each
    /// `lock` first takes the execution's loom lock (one for all of them: the engine
    /// never holds two), so loom orders the critical sections and knows that what a
    /// thread wrote before its unlock happens before the next lock. (With the std
    /// mutex alone, loom would let a thread that got a lane number back from an ended
    /// thread miss that thread's stores into the lane.) Only then is the std mutex
    /// taken, uncontended, as loom's own `Mutex` does with its data: loom threads are
    /// coroutines on one OS thread, so a std lock held across a loom step would
    /// deadlock.
    pub(crate) struct Mutex<T> {
        data: std::sync::Mutex<T>,
    }

    impl<T> std::fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Mutex")
        }
    }

    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Mutex<T> {
            Mutex {
                data: std::sync::Mutex::new(value),
            }
        }

        pub(crate) fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
            let shadow = SHADOW
                .get()
                .expect("call sync::new_execution() at the start of the model")
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let data = self.data.lock().unwrap_or_else(PoisonError::into_inner);
            Ok(MutexGuard {
                data,
                _shadow: shadow,
            })
        }
    }

    /// Unlocks the std mutex, then (a loom step) the loom one: fields drop in order.
    pub(crate) struct MutexGuard<'a, T> {
        data: std::sync::MutexGuard<'a, T>,
        _shadow: loom::sync::MutexGuard<'static, ()>,
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;

        fn deref(&self) -> &T {
            &self.data
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.data
        }
    }

    /// `std::thread_local!` for loom: each loom thread (a coroutine, all of them on one
    /// OS thread) gets its own value, through [`Local`], which adds the `get` and
    /// `set` that std has for `Cell` locals.
    macro_rules! loom_thread_local {
        () => {};
        // A `const { .. }` initialiser (edition 2021's `expr` does not match one).
        ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr }; $($rest:tt)*) => {
            $crate::sync::thread_local!($(#[$attr])* $vis static $name: $t = $init; $($rest)*);
        };
        ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
            $(#[$attr])*
            $vis static $name: $crate::sync::Local<$t> = {
                loom::thread_local!(static KEY: $t = $init);
                $crate::sync::Local(&KEY)
            };
            $crate::sync::thread_local!($($rest)*);
        };
    }
    pub(crate) use loom_thread_local as thread_local;

    /// A loom thread-local with std's `LocalKey` methods.
    pub(crate) struct Local<T: 'static>(pub(crate) &'static loom::thread::LocalKey<T>);

    impl<T: 'static> Local<T> {
        pub(crate) fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
            self.0.with(f)
        }

        pub(crate) fn try_with<R>(
            &'static self,
            f: impl FnOnce(&T) -> R,
        ) -> Result<R, loom::thread::AccessError> {
            self.0.try_with(f)
        }
    }

    impl<T: Copy + 'static> Local<Cell<T>> {
        pub(crate) fn get(&'static self) -> T {
            self.0.with(Cell::get)
        }

        /// Like std's for a `const`-initialised `Cell` (which is never destroyed): a
        /// `set` from another local's destructor, after loom has dropped this one, is
        /// ignored rather than a panic.
        pub(crate) fn set(&'static self, value: T) {
            let _ = self.0.try_with(|c| c.set(value));
        }
    }
}

#[path = "../../resilience-runtime/src/lock.rs"]
mod lock;

#[path = "../../resilience-runtime/src/point/state/arming.rs"]
mod arming;

#[path = "../../resilience-runtime/src/point/state/flow.rs"]
mod flow;

#[path = "../../resilience-runtime/src/point/state/delay.rs"]
mod delay;

#[path = "../../resilience-runtime/src/point/state/chunks.rs"]
mod chunks;

#[path = "../../resilience-runtime/src/lane.rs"]
mod lane;

#[path = "../../resilience-runtime/src/point/state/hang.rs"]
mod hang;

#[path = "../../resilience-runtime/src/point/state/durations.rs"]
mod durations;

#[path = "../../resilience-runtime/src/window.rs"]
mod window;

#[path = "../../resilience-runtime/src/point/state/cell.rs"]
mod cell;

#[path = "../../resilience-runtime/src/retry/take.rs"]
mod take;

/// The retry budget's atomic step, laid out as in the runtime.
#[cfg(test)]
mod retry {
    pub(crate) use super::take;
}

/// The token bucket, laid out as in the runtime (`cell.rs` reaches `super::Gcra`).
///
/// The `path` of an inline module is the directory of the files it declares. (A
/// `path` on `gcra` inside a plain `mod limit { .. }` would be taken relative to
/// `src/limit/`, a directory that does not exist, so `..` could not climb out of it.)
#[path = "../../resilience-runtime/src/limit"]
mod limit {
    pub(crate) mod cell;
    pub(crate) mod gcra;
    pub(crate) mod warmup;

    pub(crate) use gcra::Gcra;
}

/// The key table (`keys/`): its decisions are pure (`rule.rs`, `shard.rs`) and run
/// under one shard's lock (`table.rs`), laid out as in the runtime.
#[path = "../../resilience-runtime/src/keys"]
mod keys {
    pub(crate) mod rule;
    pub(crate) mod shard;
    pub(crate) mod table;
    pub(crate) mod text;

    pub(crate) const KEY_TEXT_MAX: usize = text::KEY_TEXT_MAX;
}

/// The models: one `#[test]` per guarantee (files in `src/models/`).
#[cfg(test)]
mod models {
    mod arming;
    mod cell;
    mod chunks;
    mod delay;
    mod durations;
    mod flow;
    mod gcra;
    mod hang;
    mod keys;
    mod take;
    mod warmup;
    mod window;

    /// A loom model with the bound every test here uses: three preemptions cover the
    /// races of two or three threads (loom's own recommendation is 2-3) and keep each
    /// model within seconds in a debug build.
    pub(super) fn check(f: impl Fn() + Sync + Send + 'static) {
        check_branches(1_000, f);
    }

    /// [`check`] for models taking more than loom's default 1000 steps in one
    /// execution (a sweep of the hang table loads each of its 512 slots).
    pub(super) fn check_branches(max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.max_branches = max_branches;
        b.preemption_bound = Some(3);
        b.check(f);
    }
}
