//! Criticality of calls: under overload the lowest tier is shed first.
//!
//! A call carries a [`Priority`]: [`Priority::Critical`], [`Priority::Default`] or
//! [`Priority::Sheddable`] (DAGOR's and Cinnamon's tiers, failsafe-go's priorities).
//! It comes from the caller's scope ([`with`] for sync code, [`scope`] for a
//! future), from `#[downgrade(.., priority = expr)]` / `#[breaker(.., priority =
//! expr)]` (an expression over the arguments), or from the tower layer (a request
//! header or extension, see [`tower`](crate::tower)). Without any, a call is
//! [`Priority::Default`].
//!
//! What the priority changes, only under overload (a call that would pass anyway is
//! never held back, so the pass path does not even read it):
//!
//! - **the concurrency queue** ([`PolicyBuilder::queue`](crate::PolicyBuilder::queue))
//!   serves higher tiers first (first in first out within a tier, or newest first
//!   with [`QueueOrder::NewestFirst`](crate::QueueOrder::NewestFirst)), and a call that
//!   finds the queue full evicts the last waiter of a lower tier (which is refused
//!   with [`Reason::QueueFull`](crate::Reason::QueueFull));
//! - **the gradient adaptive limit** keeps a share of its capacity for critical calls
//!   ([`GradientConfig::critical_reserve`](crate::adaptive::GradientConfig::critical_reserve)):
//!   the other tiers are refused once the calls in flight reach `(1 - share)` of the
//!   limit;
//! - **go-zero's shedder**, while it sheds (CPU overloaded or still hot), drops a
//!   sheddable call once the flight passes half its limit, a default one past the
//!   limit (go-zero's rule), a critical one only past twice the limit
//!   ([`Priority::shedder_scale`]);
//! - **the SRE breaker** drops by tier: with go-zero's drop probability `p`, a
//!   sheddable call is dropped with probability `min(1, 2p)`, a default one with `p`,
//!   a critical one with `max(0, 2p - 1)` (only once more than half the traffic would
//!   be dropped).
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::priority::{self, Priority};
//!
//! assert_eq!(priority::current(), Priority::Default);
//! let inner = priority::with(Priority::Critical, priority::current);
//! assert_eq!(inner, Priority::Critical);
//! assert_eq!(priority::current(), Priority::Default, "restored");
//! assert_eq!("sheddable".parse::<Priority>(), Ok(Priority::Sheddable));
//! ```

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// How much a call matters when not every call can be served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Shed first: prefetches, analytics, retries of background work.
    Sheddable = 0,
    /// Everything else.
    #[default]
    Default = 1,
    /// Shed last: the calls the service exists for.
    Critical = 2,
}

impl Priority {
    /// Every tier, lowest first.
    pub const ALL: [Priority; 3] = [Priority::Sheddable, Priority::Default, Priority::Critical];

    /// The tier's name: `sheddable`, `default`, `critical`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Priority::Sheddable => "sheddable",
            Priority::Default => "default",
            Priority::Critical => "critical",
        }
    }

    /// The factor of go-zero's shedder flight limit for this tier (see the module
    /// docs): 0.5, 1 and 2. Pure.
    pub fn shedder_scale(self) -> f64 {
        match self {
            Priority::Sheddable => 0.5,
            Priority::Default => 1.0,
            Priority::Critical => 2.0,
        }
    }

    /// The drop probability for this tier when the SRE breaker's is `p` (see the
    /// module docs). Pure.
    pub fn sre_drop(self, p: f64) -> f64 {
        match self {
            Priority::Sheddable => (2.0 * p).min(1.0),
            Priority::Default => p,
            Priority::Critical => (2.0 * p - 1.0).max(0.0),
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A priority name that is none of `critical`, `default`, `sheddable`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPriority(pub String);

impl fmt::Display for UnknownPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown priority `{}`, expected one of `critical`, `default`, `sheddable`",
            self.0
        )
    }
}

impl std::error::Error for UnknownPriority {}

impl std::str::FromStr for Priority {
    type Err = UnknownPriority;

    /// A tier by name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Priority, UnknownPriority> {
        Priority::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPriority(s.to_owned()))
    }
}

std::thread_local! {
    static CURRENT: Cell<Priority> = const { Cell::new(Priority::Default) };
}

/// The priority of calls made now on this thread.
pub fn current() -> Priority {
    CURRENT.with(Cell::get)
}

/// The priority of this thread until the scope is dropped, when the previous one is
/// restored (even by a panic); not held across an `.await`.
#[derive(Debug)]
pub(crate) struct Scope(Priority);

impl Scope {
    pub(crate) fn enter(p: Priority) -> Scope {
        Scope(CURRENT.with(|c| c.replace(p)))
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Runs `f` with calls made on this thread at priority `p`, then restores the
/// previous one (also on a panic).
pub fn with<R>(p: Priority, f: impl FnOnce() -> R) -> R {
    let _scope = Scope::enter(p);
    f()
}

/// `future` with the calls it makes at priority `p`: the priority is set around
/// each of its polls (so it follows the task across threads, and never leaks into
/// other tasks polled on the same thread).
pub fn scope<F: Future>(p: Priority, future: F) -> Scoped<F> {
    Scoped {
        priority: p,
        future,
    }
}

/// A future with a priority; see [`scope`].
#[derive(Debug)]
pub struct Scoped<F> {
    priority: Priority,
    future: F,
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _scope = Scope::enter(self.priority);
        // SAFETY: `future` is structurally pinned: it is never moved out of `self`,
        // and `Scoped` has no `Drop` or `Unpin` impl of its own that could move it.
        let future = unsafe { self.map_unchecked_mut(|s| &mut s.future) };
        future.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_restore_on_panic() {
        with(Priority::Sheddable, || {
            assert_eq!(current(), Priority::Sheddable);
            with(Priority::Critical, || {
                assert_eq!(current(), Priority::Critical)
            });
            assert_eq!(current(), Priority::Sheddable);
            let _ = std::panic::catch_unwind(|| with(Priority::Critical, || panic!("boom")));
            assert_eq!(current(), Priority::Sheddable);
        });
        assert_eq!(current(), Priority::Default);
    }

    #[test]
    fn a_scoped_future_has_its_priority_only_while_polled() {
        let mut seen = None;
        let fut = scope(Priority::Critical, async {
            seen = Some(current());
        });
        futures_executor::block_on(fut);
        assert_eq!(seen, Some(Priority::Critical));
        assert_eq!(current(), Priority::Default);
    }

    #[test]
    fn tiers_order_and_parse() {
        assert!(Priority::Critical > Priority::Default && Priority::Default > Priority::Sheddable);
        assert_eq!(" Critical ".parse::<Priority>(), Ok(Priority::Critical));
        let err = "urgent".parse::<Priority>().unwrap_err();
        assert!(err.to_string().contains("`urgent`"), "{err}");
        for p in Priority::ALL {
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
        }
    }

    #[test]
    fn sre_drops_shed_the_lowest_tier_first() {
        for p in [0.0, 0.1, 0.4, 0.5, 0.75, 1.0] {
            let [s, d, c] = Priority::ALL.map(|t| t.sre_drop(p));
            assert!(s >= d && d >= c, "{p}: {s} {d} {c}");
            assert!((0.0..=1.0).contains(&s) && (0.0..=1.0).contains(&c));
        }
        assert_eq!(Priority::Critical.sre_drop(0.5), 0.0);
        assert_eq!(Priority::ALL.map(Priority::shedder_scale), [0.5, 1.0, 2.0]);
        assert_eq!(Priority::Sheddable.sre_drop(0.5), 1.0);
    }
}
