//! What `#[retry]` asks of the function it wraps: a return type with an error to
//! retry ([`Fallible`]), arguments it can pass to each attempt ([`RetryArgument`]),
//! and a `retry_if` predicate of the error's type ([`RetryPredicate`]).
//!
//! The generated code calls these traits (through the macros' private doorway), so
//! that a function that does not fit is a compile error at the user's token, in
//! words about the user's type, naming these public traits.

/// A return type with an error that `#[retry]` can retry: `Result<T, E>`, including
/// any alias of it (`std::io::Result<T>`, `anyhow::Result<T>`, a crate's own
/// `Result<T>`).
///
/// `#[retry]` inspects each attempt's output through this trait: an `Err` is retried
/// (if `retry_if` chooses it), an `Ok` returned. A function returning anything else
/// is a compile error at its return type. Sealed: only `Result` implements it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::Fallible;
///
/// let failed: Result<u32, String> = Err("busy".to_owned());
/// assert_eq!(failed.retry_error().map(String::as_str), Some("busy"));
/// assert_eq!(Ok::<u32, String>(1).retry_error(), None);
/// ```
///
/// A function that cannot fail has nothing to retry:
///
/// ```compile_fail,E0277
/// use resilience_runtime::retry;
///
/// #[retry(attempts = 3)]
/// fn count() -> u32 { // error: `#[retry]` needs a function that returns `Result<T, E>`, not `u32`
///     1
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`#[retry]` needs a function that returns `Result<T, E>`, not `{Self}`",
    label = "only an `Err` can be retried",
    note = "return `Result<{Self}, E>` (or an alias such as `std::io::Result<{Self}>`), where `E` is the error to retry, or remove `#[retry]`"
)]
pub trait Fallible {
    /// The error: `E` of `Result<T, E>`, what `retry_if` is given.
    type Error;

    /// The error, if this output is one.
    fn retry_error(&self) -> Option<&Self::Error>;

    /// Seals the trait: no other crate can name the argument's type. (A method, not a
    /// supertrait: rustc checks a supertrait at every call of a method, and its error
    /// would then come first, without this trait's message.)
    #[doc(hidden)]
    fn __sealed(_: sealed::Sealed);
}

// Not recommended: rustc then does not list this impl under the message.
#[diagnostic::do_not_recommend]
impl<T, E> Fallible for Result<T, E> {
    type Error = E;

    #[inline]
    fn retry_error(&self) -> Option<&E> {
        self.as_ref().err()
    }

    fn __sealed(_: sealed::Sealed) {}
}

/// A `retry_if` predicate for errors of type `E`: a function (or method) that takes
/// `&E` and returns `bool`, `true` for an error to retry.
///
/// Every `fn(&E) -> bool` is one, generic ones included (`fn transient<E:
/// Debug>(e: &E) -> bool`), as is a method `fn is_transient(&self) -> bool` of `E`
/// (`retry_if = MyError::is_transient`). The predicate takes the error exactly as the
/// function returns it, by reference: no conversion is applied on the way, so a
/// predicate over `&dyn Error` needs a small `fn(&E) -> bool` that calls it.
///
/// `S` is a marker the compiler infers; write `_` for it. (With a single impl, rustc
/// would take it at once and report a predicate of the wrong arity or argument type
/// as a mismatch of `Fn` signatures, a message `on_unimplemented` cannot change.
/// With two impls, one per marker, it first checks which apply, and a predicate that
/// fits neither gets the message below, at `retry_if = ...`.)
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::RetryPredicate;
///
/// #[derive(Debug, PartialEq)]
/// enum Error {
///     Busy,
///     Invalid,
/// }
///
/// fn is_transient(e: &Error) -> bool {
///     *e == Error::Busy
/// }
///
/// assert!(RetryPredicate::<_, _>::should_retry(&Error::Busy, &is_transient));
/// assert!(!RetryPredicate::<_, _>::should_retry(&Error::Invalid, &is_transient));
/// ```
///
/// A predicate of another type is a compile error at `retry_if = ...`:
///
/// ```compile_fail,E0277
/// use resilience_runtime::retry;
///
/// fn is_transient(e: String) -> bool {
///     e == "busy"
/// }
///
/// // error: `retry_if` takes a `fn(&E) -> bool` where `E` is the function's error type ...
/// #[retry(retry_if = is_transient)]
/// fn fetch() -> Result<u32, String> {
///     Ok(1)
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`retry_if` takes a `fn(&E) -> bool` where `E` is the function's error type, here `fn(&{E}) -> bool`",
    label = "expected a `fn(&{E}) -> bool`",
    note = "write `fn is_transient(error: &{E}) -> bool {{ .. }}` and `retry_if = is_transient`: it takes the error by reference and returns `true` to retry"
)]
pub trait RetryPredicate<E: ?Sized, S> {
    /// Whether `error` is to be retried.
    fn should_retry(error: &E, predicate: &Self) -> bool;
}

impl<E: ?Sized, F: Fn(&E) -> bool> RetryPredicate<E, sealed::Fits> for F {
    #[inline]
    fn should_retry(error: &E, predicate: &Self) -> bool {
        predicate(error)
    }
}

// Load-bearing, though it never applies: see `S` above.
impl<E: ?Sized, F: sealed::Uninhabited> RetryPredicate<E, sealed::Never> for F {
    fn should_retry(_: &E, _: &Self) -> bool {
        unreachable!("no type implements `Uninhabited`")
    }
}

/// An argument of a `#[retry]` function: each attempt gets a fresh copy of it, so an
/// owned argument must be `Clone` (`&T` arguments are copied and `&mut T` ones
/// reborrowed, with no bound).
///
/// Implemented for every `Clone` type; the macros name this trait in the compile
/// error for an argument that is not, at that argument. Sealed: no other type can
/// implement it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::retry::RetryArgument;
///
/// let name = String::from("ann");
/// let copy = name.clone_for_attempt();
/// assert_eq!(copy, name);
/// ```
///
/// ```compile_fail,E0277
/// use resilience_runtime::retry;
///
/// struct Connection;
///
/// #[retry(attempts = 2)]
/// fn send(conn: Connection) -> Result<(), ()> { // error: ... `Connection` is not `Clone`
///     let _ = conn;
///     Ok(())
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "a `#[retry]` fn clones its arguments for each attempt, but `{Self}` is not `Clone`",
    label = "this argument is not `Clone`",
    note = "derive or implement `Clone`, take the argument by reference, or remove `#[retry]`"
)]
pub trait RetryArgument {
    /// A fresh copy for the next attempt.
    fn clone_for_attempt(&self) -> Self;

    /// Seals the trait (see [`Fallible`]).
    #[doc(hidden)]
    fn __sealed(_: sealed::Sealed);
}

impl<T: Clone> RetryArgument for T {
    #[inline(always)]
    fn clone_for_attempt(&self) -> Self {
        self.clone()
    }

    fn __sealed(_: sealed::Sealed) {}
}

mod sealed {
    /// The argument of the sealing methods of [`Fallible`](super::Fallible) and
    /// [`RetryArgument`](super::RetryArgument), which no other crate can name.
    #[derive(Debug)]
    pub struct Sealed;

    /// The marker of every predicate that fits (see
    /// [`RetryPredicate`](super::RetryPredicate)).
    #[derive(Debug)]
    pub enum Fits {}

    /// The marker of no predicate: its impl never applies, but being there it makes
    /// the compiler weigh a predicate against both impls (see
    /// [`RetryPredicate`](super::RetryPredicate)).
    #[derive(Debug)]
    pub enum Never {}

    /// Implemented by no type: the bound of the impl for [`Never`].
    pub trait Uninhabited {}
}
