//! The public error and decision types: why a call was downgraded, bad point names.

use std::fmt;

/// Why a call was downgraded: the rule that tripped.
///
/// Rules are checked in SDS order (visits, token bucket, concurrency, timeouts,
/// exceptions, exception rate) and the first one that trips is the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Reason {
    /// Too many admitted visits in the sliding window.
    Visits,
    /// The token bucket was empty.
    TokenBucket,
    /// Too many calls in flight.
    Concurrency,
    /// Every slot was taken and the concurrency rule's queue was full (see
    /// [`PolicyBuilder::queue`](crate::PolicyBuilder::queue)).
    QueueFull,
    /// The call waited in the concurrency rule's queue for its `max_wait` without
    /// getting a slot.
    QueueTimeout,
    /// Too many slow calls in the sliding window.
    Timeouts,
    /// Too many exceptions in the sliding window.
    Exceptions,
    /// The exception rate in the sliding window was too high.
    ExceptionRate,
    /// The point is inside a downgrade delay started by an earlier trip.
    Delay,
    /// The cluster-wide visits limit (shared by every instance through Redis) is used up.
    ClusterVisits,
    /// The cluster-wide token bucket (shared by every instance through Redis) is empty.
    ClusterTokenBucket,
    /// The point's adaptive concurrency limit is reached (see
    /// [`AdaptiveLimit`](crate::AdaptiveLimit)).
    Overloaded,
    /// The point's circuit breaker rejected the call (checked after the point's
    /// other rules).
    BreakerOpen,
    /// The call's key used up its own limit (the policy's
    /// [`keys`](crate::keys::KeyPolicy) section), checked after the point's rules;
    /// with a cluster-wide key limit (`redis` feature), also when the key's bucket
    /// shared by the fleet is used up (those refusals are counted apart in
    /// [`KeyClusterStats::refused`](crate::keys::KeyClusterStats::refused)).
    HotKey,
    /// The call ran and was cut at its deadline (`timeout = "..."` on an `async fn`, or
    /// the policy's [`call_timeout`](crate::Policy::call_timeout)): its future was
    /// dropped and the fallback (or default, or `Err(From<Downgraded>)`) took over.
    ///
    /// Not a refusal: such a call was admitted, so it counts as a pass and as a timeout
    /// (and, on a breaker, as a failure), never as a downgrade. It is therefore not in
    /// [`Reason::ALL`], which lists the reasons a call is refused for (the per-reason
    /// downgrade counts, metrics labels and the console's lists), and no listener event
    /// ever carries it.
    Deadline,
}

impl Reason {
    /// Every reason a call is refused for, in check order: SDS's rules, then
    /// [`Reason::Delay`] (which short-cuts them), the breaker and the call's key
    /// ([`Reason::HotKey`]). [`Reason::Deadline`]
    /// is not one: a call cut at its deadline was admitted.
    pub const ALL: [Reason; 14] = [
        Reason::Visits,
        Reason::TokenBucket,
        Reason::Concurrency,
        Reason::QueueFull,
        Reason::QueueTimeout,
        Reason::Timeouts,
        Reason::Exceptions,
        Reason::ExceptionRate,
        Reason::Delay,
        Reason::ClusterVisits,
        Reason::ClusterTokenBucket,
        Reason::Overloaded,
        Reason::BreakerOpen,
        Reason::HotKey,
    ];

    /// A stable snake-case name, used in stats and metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Visits => "visits",
            Reason::TokenBucket => "token_bucket",
            Reason::Concurrency => "concurrency",
            Reason::QueueFull => "queue_full",
            Reason::QueueTimeout => "queue_timeout",
            Reason::Timeouts => "timeouts",
            Reason::Exceptions => "exceptions",
            Reason::ExceptionRate => "exception_rate",
            Reason::Delay => "delay",
            Reason::ClusterVisits => "cluster_visits",
            Reason::ClusterTokenBucket => "cluster_token_bucket",
            Reason::Overloaded => "overloaded",
            Reason::BreakerOpen => "breaker_open",
            Reason::HotKey => "hot_key",
            Reason::Deadline => "deadline",
        }
    }

    /// The position in [`Reason::ALL`], which indexes the per-reason counters.
    /// [`Reason::Deadline`]'s is `Reason::ALL.len()`, one past every per-reason array:
    /// it has no counter (a cut call is not refused), so a lookup by it must be checked
    /// (`get(..)`), and nothing ever counts a downgrade with it.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn from_index(i: u8) -> Option<Reason> {
        Reason::ALL.get(usize::from(i)).copied()
    }
}

const _: () = assert!(
    Reason::Deadline as usize == Reason::ALL.len(),
    "Reason::Deadline comes after every refusal reason, past the per-reason arrays"
);

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call was not run because its point is downgraded, or (with
/// [`Reason::Deadline`]) was cut at its deadline.
///
/// Returned by [`Point::enter`](crate::Point::enter) and, for `#[downgrade]` functions
/// without a fallback, converted into the function's error type with `From`; a
/// `fallback_with_reason` function receives it as its last argument.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{registry, Policy, Reason};
///
/// let point = registry().point("docs.error.kill").unwrap();
/// registry().set_policy("docs.error.kill", Policy::builder().max_visits(0).build().unwrap()).unwrap();
/// let err = point.enter().unwrap_err();
/// assert_eq!(err.reason(), Reason::Visits);
/// assert_eq!(err.to_string(), "point `docs.error.kill` is downgraded (visits)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Downgraded {
    pub(crate) point: &'static str,
    pub(crate) reason: Reason,
}

impl Downgraded {
    /// The point's name.
    pub fn point(&self) -> &'static str {
        self.point
    }

    /// The rule that tripped, or [`Reason::Deadline`] for a call cut at its deadline.
    pub fn reason(&self) -> Reason {
        self.reason
    }
}

impl fmt::Display for Downgraded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            Reason::Deadline => write!(
                f,
                "a call of point `{}` was cut at its deadline",
                self.point
            ),
            reason => write!(f, "point `{}` is downgraded ({reason})", self.point),
        }
    }
}

impl std::error::Error for Downgraded {}

/// A return type that can carry a [`Downgraded`]: what a `#[downgrade]` or
/// `#[breaker]` function without `fallback` or `default` returns when its call is
/// refused (or cut at its deadline).
///
/// Implemented for `Result<T, E>` where `E: From<Downgraded>`: a refused call returns
/// `Err(E::from(downgraded))`. The macros name this trait in the compile error for any
/// other return type; give the attribute a `fallback` or a `default` for those, or
/// add `impl From<Downgraded> for E` to the error type. Sealed: no other type can
/// implement it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{downgrade, registry, Downgraded, FromDowngraded, Policy};
///
/// #[derive(Debug, PartialEq)]
/// enum Error {
///     Busy,
/// }
///
/// impl From<Downgraded> for Error {
///     fn from(_: Downgraded) -> Self {
///         Error::Busy
///     }
/// }
///
/// // No fallback: a refused call returns `Err(Error::from(downgraded))`.
/// #[downgrade(point = "docs.from_downgraded")]
/// fn lookup(id: u32) -> Result<u32, Error> {
///     Ok(id)
/// }
///
/// registry().set_policy("docs.from_downgraded", Policy::builder().max_visits(0).build()?)?;
/// assert_eq!(lookup(7), Err(Error::Busy));
///
/// // The same conversion by hand.
/// let refused = registry().point("docs.from_downgraded")?.enter().unwrap_err();
/// assert_eq!(Result::<u32, Error>::from_downgraded(refused), Err(Error::Busy));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A return type that cannot carry the refusal is a compile error at that type:
///
/// ```compile_fail,E0277
/// use resilience_runtime::downgrade;
///
/// #[downgrade(point = "docs.from_downgraded.u32")]
/// fn count() -> u32 { // error: ... must return `Result<_, E>` where `E: From<Downgraded>`, not `u32`
///     1
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "a `#[downgrade]` or `#[breaker]` function without `fallback` or `default` must return `Result<_, E>` where `E: From<Downgraded>`, not `{Self}`",
    label = "this return type cannot carry a downgrade",
    note = "add `fallback = path` or `default` to the attribute, or return `Result<_, E>` with `impl From<resilience_runtime::Downgraded> for E`"
)]
pub trait FromDowngraded {
    /// The value a refused (or cut) call returns: `Err(E::from(downgraded))`.
    fn from_downgraded(downgraded: Downgraded) -> Self;

    /// Seals the trait: no other crate can name the argument's type. (A method, not a
    /// supertrait: rustc checks a supertrait at every call of a method, and its error
    /// could then come first, without this trait's message.)
    #[doc(hidden)]
    fn __sealed(_: sealed::Sealed);
}

// Not recommended: an `E` without `From<Downgraded>` then gets this crate's message
// (`on_unimplemented` above) instead of rustc's list of the `From` impls `E` has.
#[diagnostic::do_not_recommend]
impl<T, E: From<Downgraded>> FromDowngraded for Result<T, E> {
    #[inline]
    fn from_downgraded(downgraded: Downgraded) -> Self {
        Err(E::from(downgraded))
    }

    fn __sealed(_: sealed::Sealed) {}
}

mod sealed {
    /// The argument of [`FromDowngraded`](super::FromDowngraded)'s sealing method,
    /// which no other crate can name.
    #[derive(Debug)]
    pub struct Sealed;
}

use crate::name::NameProblem;
pub use crate::name::MAX_POINT_NAME_LEN;

/// A point name was rejected: names are non-empty, at most [`MAX_POINT_NAME_LEN`]
/// bytes, free of control characters, and neither begin nor end with whitespace (see
/// [`check_point_name`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointNameError {
    pub(crate) name: String,
    pub(crate) problem: std::borrow::Cow<'static, str>,
}

impl PointNameError {
    /// A new undeclared name past the registry's cap.
    pub(crate) fn too_many(name: &str, max: u64) -> PointNameError {
        PointNameError {
            name: name.chars().take(64).collect(),
            problem: format!(
                "the registry holds at most {max} points that no `#[downgrade]` or \
                 `#[breaker]` function declares (Registry::set_max_undeclared_points); \
                 are point names built from user input?"
            )
            .into(),
        }
    }

    /// The rejected name (its first 64 characters).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for PointNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid point name {:?}: {}", self.name, self.problem)
    }
}

impl std::error::Error for PointNameError {}

/// The one rule for point names, shared by the runtime, the macros (for literal names,
/// at compile time), policy files and the admin console: not empty, not only
/// whitespace, no leading or trailing whitespace, no control characters, at most
/// [`MAX_POINT_NAME_LEN`] bytes. A user-built name that breaks it is refused with the
/// reason instead of reaching the console and being refused there.
///
/// # Errors
///
/// A [`PointNameError`] with the name and what is wrong with it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{check_point_name, MAX_POINT_NAME_LEN};
///
/// assert!(check_point_name("orders.create").is_ok());
/// assert!(check_point_name(" orders").is_err());
/// assert!(check_point_name("orders ").is_err());
/// assert!(check_point_name(&"x".repeat(MAX_POINT_NAME_LEN)).is_ok());
/// let err = check_point_name(&"x".repeat(MAX_POINT_NAME_LEN + 1)).unwrap_err();
/// assert_eq!(err.name().len(), 64, "a long name is reported by its start");
///
/// // The rule itself, as the macros and the admin console use it:
/// use resilience_runtime::NameProblem;
/// assert_eq!(NameProblem::of("orders.create"), None);
/// assert_eq!(NameProblem::of(" orders"), Some(NameProblem::EdgeWhitespace));
/// assert_eq!(NameProblem::of(&"x".repeat(257)), Some(NameProblem::TooLong));
/// assert_eq!(NameProblem::Control.text(), "must not contain control characters");
/// ```
pub fn check_point_name(name: &str) -> Result<(), PointNameError> {
    let problem = point_name_problem(name);
    match problem {
        Some(problem) => Err(PointNameError {
            // A name of any length is reported by its first bytes only.
            name: name.chars().take(64).collect(),
            problem: problem.into(),
        }),
        None => Ok(()),
    }
}

/// What is wrong with a point name, if anything (the text of [`check_point_name`]).
fn point_name_problem(name: &str) -> Option<&'static str> {
    Some(match NameProblem::of(name)? {
        NameProblem::Empty => "a point name must not be empty",
        NameProblem::Blank => "a point name must not be only whitespace",
        NameProblem::EdgeWhitespace => "a point name must not begin or end with whitespace",
        NameProblem::Control => "a point name must not contain control characters",
        NameProblem::TooLong => "a point name must be at most 256 bytes long (MAX_POINT_NAME_LEN)",
    })
}

/// One invalid field of a configuration (a policy, a breaker, an adaptive limit, a
/// retry setting, ...): its path and what is wrong with it. The builders of the
/// configurations fail with one; a [`PolicyError`](crate::PolicyError) lists them.
///
/// # Examples
///
/// ```
/// use resilience_runtime::breaker::SreConfig;
///
/// let err = SreConfig::builder().buckets(0).build().unwrap_err();
/// assert_eq!(err.field, "buckets");
/// assert!(err.to_string().starts_with("invalid configuration: `buckets`"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, such as `k`, `capacity`, `open_wait.multiplier` or
    /// `exception_rate.rate`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        FieldError {
            field,
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration: `{}` {}",
            self.field, self.message
        )
    }
}

impl std::error::Error for FieldError {}

/// The global registry was already created, so its clock can no longer be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlreadyInitialized;

impl fmt::Display for AlreadyInitialized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the global registry is already initialised")
    }
}

impl std::error::Error for AlreadyInitialized {}

/// A policy was rejected; lists every invalid field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub(crate) errors: Vec<FieldError>,
}

impl PolicyError {
    /// Every invalid field, in declaration order.
    pub fn errors(&self) -> &[FieldError] {
        &self.errors
    }

    /// The names of the invalid fields.
    pub fn fields(&self) -> Vec<&'static str> {
        self.errors.iter().map(|e| e.field).collect()
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid policy: ")?;
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "`{}`: {}", e.field, e.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_point_name("order.create").is_ok());
        assert_eq!(
            check_point_name("").unwrap_err().to_string(),
            "invalid point name \"\": a point name must not be empty"
        );
        assert!(check_point_name(" \t").is_err());
        assert!(check_point_name("a\nb").is_err());
    }

    #[test]
    fn reason_indexes_round_trip() {
        for r in Reason::ALL {
            assert_eq!(Reason::from_index(r.index() as u8), Some(r));
        }
        assert_eq!(Reason::from_index(200), None);
        // Deadline is not a refusal: no per-reason slot, and no index maps to it.
        assert!(!Reason::ALL.contains(&Reason::Deadline));
        assert_eq!(Reason::Deadline.index(), Reason::ALL.len());
        assert_eq!(Reason::from_index(Reason::Deadline as u8), None);
    }

    #[test]
    fn deadline_names_itself() {
        assert_eq!(Reason::Deadline.as_str(), "deadline");
        assert_eq!(Reason::Deadline.to_string(), "deadline");
        let cut = Downgraded {
            point: "p",
            reason: Reason::Deadline,
        };
        assert_eq!(
            cut.to_string(),
            "a call of point `p` was cut at its deadline"
        );
    }
}
