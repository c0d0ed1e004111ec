//! Isolation: a registry of a test's own, in scope for a thread or a future.
//!
//! # The guarantee kept here
//!
//! While a [`TestRegistry`] is in scope on a thread (its [`enter`](TestRegistry::enter)
//! guard is alive, or a future it [`scope`](TestRegistry::scope)s is being polled
//! there), every `#[downgrade]`, `#[breaker]` and `#[retry]` call on that thread, and
//! every [`registry()`](crate::registry) there, uses that registry and nothing else:
//! no policy, count, window or breaker state of the global registry or of another
//! test's is read or written. Scopes nest; leaving one restores the one around it
//! (none, for the outermost), even when the test panics.
//!
//! Outside every scope, and in builds without the `testing` feature, nothing changes:
//! the call sites use their cached point of the global registry. The feature is meant
//! for `[dev-dependencies]`, where cargo turns it on for tests only, so a release build
//! of the program never has the check at all.

use crate::registry::scoped::{enter, leave};
use crate::registry::Registry;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A registry of one test's own (feature `testing`): its points, policies, counts,
/// windows and breakers are nobody else's, so tests of one binary (which cargo runs
/// in parallel threads) never see each other's, even on the same point names.
///
/// It dereferences to a [`Registry`]: configure it and read its statistics as any
/// registry. Code under test reaches it through a scope: [`enter`](Self::enter) for
/// the rest of a sync test's thread, [`scope`](Self::scope) for a future, or
/// [`run`](Self::run) for a closure. Inside a scope, the guarded functions' calls and
/// [`registry()`](crate::registry) use this registry.
///
/// A test registry lives until the process ends (a few kilobytes and its points):
/// the call sites under test hold `'static` borrows of it, as they do of the global
/// registry.
///
/// # Examples
///
/// Two tests on the same point, each with its own policy; run in parallel they never
/// see each other's:
///
/// ```
/// use resilience_runtime::testing::TestRegistry;
/// use resilience_runtime::{downgrade, Policy};
///
/// #[downgrade(point = "docs.testing.orders", default = "busy")]
/// fn create_order() -> &'static str {
///     "created"
/// }
///
/// let a = std::thread::spawn(|| {
///     let registry = TestRegistry::new();
///     let _scope = registry.enter();
///     registry.set_policy("docs.testing.orders", Policy::builder().max_visits(0).build()?)?;
///     assert_eq!(create_order(), "busy");
///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
/// });
/// let b = std::thread::spawn(|| {
///     let registry = TestRegistry::new();
///     let _scope = registry.enter();
///     assert_eq!(create_order(), "created", "no policy in this test's registry");
///     assert_eq!(registry.stats("docs.testing.orders").unwrap().totals.visits, 1);
/// });
/// a.join().unwrap().unwrap();
/// b.join().unwrap();
/// // The global registry saw none of it.
/// assert!(resilience_runtime::registry().get("docs.testing.orders").is_none());
/// ```
pub struct TestRegistry {
    registry: &'static Registry,
}

impl TestRegistry {
    /// A new, empty registry on the system clock.
    pub fn new() -> TestRegistry {
        TestRegistry::with_clock(crate::Clock::system())
    }

    /// A new, empty registry on `clock`: a [`ManualClock`](crate::ManualClock) to
    /// move time by hand, or [`Clock::tokio`](crate::Clock::tokio) to follow a paused
    /// tokio runtime.
    pub fn with_clock(clock: crate::Clock) -> TestRegistry {
        TestRegistry {
            registry: Box::leak(Box::new(Registry::with_clock(clock))),
        }
    }

    /// The registry, for code that takes a `&'static Registry`.
    pub fn registry(&self) -> &'static Registry {
        self.registry
    }

    /// Puts this registry in scope on the current thread until the guard is dropped.
    ///
    /// For a sync test, or an async test on a current-thread runtime whose tasks all
    /// run on this thread (`#[tokio::test]`'s default). A thread the test spawns is not
    /// in scope: enter there too.
    pub fn enter(&self) -> ScopeGuard {
        ScopeGuard {
            previous: enter(self.registry),
            _not_send: std::marker::PhantomData,
        }
    }

    /// Runs `f` with this registry in scope on the current thread.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let _scope = self.enter();
        f()
    }

    /// `future`, with this registry in scope whenever it is polled, on whichever
    /// thread polls it: for a multi-threaded runtime, or to isolate one task of many.
    /// Tasks it spawns are not in scope unless scoped too.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::testing::TestRegistry;
    /// use resilience_runtime::{downgrade, Downgraded, Policy};
    ///
    /// #[downgrade(point = "docs.testing.async")]
    /// async fn fetch() -> Result<u32, Downgraded> {
    ///     Ok(1)
    /// }
    ///
    /// let registry = TestRegistry::new();
    /// registry.set_policy("docs.testing.async", Policy::builder().max_visits(0).build()?)?;
    /// let refused = futures_executor::block_on(registry.scope(fetch()));
    /// assert!(refused.is_err());
    /// // Outside the scope, the global registry has no policy for it.
    /// assert_eq!(futures_executor::block_on(fetch()), Ok(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn scope<F: Future>(&self, future: F) -> Scoped<F> {
        Scoped {
            registry: self.registry,
            future,
        }
    }
}

impl Default for TestRegistry {
    fn default() -> Self {
        TestRegistry::new()
    }
}

impl std::ops::Deref for TestRegistry {
    type Target = Registry;

    fn deref(&self) -> &Registry {
        self.registry
    }
}

impl fmt::Debug for TestRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TestRegistry").field(self.registry).finish()
    }
}

/// A [`TestRegistry`] in scope on this thread; dropping it restores the scope
/// before (see [`TestRegistry::enter`]). Not `Send`: a scope belongs to its thread.
#[must_use = "the registry is in scope only while the guard is alive"]
pub struct ScopeGuard {
    previous: Option<&'static Registry>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        leave(self.previous);
    }
}

impl fmt::Debug for ScopeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopeGuard").finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// A future with a [`TestRegistry`] in scope at each poll (see
    /// [`TestRegistry::scope`]).
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        registry: &'static Registry,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let previous = enter(this.registry);
        // Restored even if the poll panics.
        let _restore = Restore(previous);
        this.future.poll(cx)
    }
}

impl<F> fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoped").finish_non_exhaustive()
    }
}

/// Restores a scope when dropped.
struct Restore(Option<&'static Registry>);

impl Drop for Restore {
    fn drop(&mut self) {
        leave(self.0);
    }
}
