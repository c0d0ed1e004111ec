//! Running a closure or future under a point: the guard of [`Point::enter`] in one
//! call, with a fallback for downgrades.

use crate::point::admit::permit::Permit;
use crate::point::Point;
use crate::Downgraded;

impl Point {
    /// Runs `f` under this point: if the point is downgraded, `fallback` gets the
    /// [`Downgraded`] decision instead. An `Err` from `f` counts as an exception and is
    /// returned unchanged; a panic counts as an exception and keeps unwinding.
    ///
    /// The fallback runs only for downgrades, never for business errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let point = registry().point("docs.call").unwrap();
    /// registry().set_policy("docs.call", Policy::builder().max_visits(1).build().unwrap()).unwrap();
    /// let price = || Ok::<u32, String>(42);
    /// assert_eq!(point.call(price, |_| Ok(0)), Ok(42));
    /// assert_eq!(point.call(price, |_| Ok(0)), Ok(0), "second visit is downgraded");
    /// ```
    pub fn call<T, E>(
        &self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: impl FnOnce(Downgraded) -> Result<T, E>,
    ) -> Result<T, E> {
        self.call_with(f, fallback, |_| true)
    }

    /// [`call`](Point::call) with a choice of which `Err` values count as exceptions
    /// (the macros' `is_exception`): an `Err` for which `is_exception` says `false`
    /// (a "not found", a validation error: go-zero's "acceptable" errors) is returned
    /// unchanged but counts as a success for the rules and the breaker. A panic always
    /// counts as an exception.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// registry().set_policy("docs.call_with", Policy::builder().max_exceptions(1).build()?)?;
    /// let point = registry().point("docs.call_with")?;
    /// let not_found = || Err::<u32, _>("not found");
    /// let business = |e: &&str| *e != "not found";
    /// for _ in 0..3 {
    ///     // Not an exception: the point never trips.
    ///     assert_eq!(point.call_with(not_found, |_| Ok(0), business), Err("not found"));
    /// }
    /// assert_eq!(point.stats().totals.exceptions, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn call_with<T, E>(
        &self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: impl FnOnce(Downgraded) -> Result<T, E>,
        is_exception: impl FnOnce(&E) -> bool,
    ) -> Result<T, E> {
        // The permit stays in place, as in the code `#[downgrade]` generates.
        let mut permit = None;
        if let Err(d) = self.enter_in(&mut permit) {
            return fallback(d);
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(out) => {
                let exception = out.as_ref().err().is_some_and(is_exception);
                Permit::finish_in(self, &mut permit, exception);
                out
            }
            Err(panic) => {
                Permit::finish_in(self, &mut permit, true);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Like [`call`](Point::call) with a fallback value instead of a closure (SDS's
    /// `invokerMethod(point, downgradeValue, biz)`).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let point = registry().point("docs.call_or").unwrap();
    /// registry().set_policy("docs.call_or", Policy::builder().max_visits(0).build().unwrap()).unwrap();
    /// assert_eq!(point.call_or(|| Ok::<_, ()>(5), 0), Ok(0));
    /// ```
    pub fn call_or<T, E>(&self, f: impl FnOnce() -> Result<T, E>, fallback: T) -> Result<T, E> {
        self.call(f, |_| Ok(fallback))
    }

    /// The async form of [`call`](Point::call): `f` and `fallback` produce futures.
    /// If the returned future is dropped mid-flight the call counts as cancelled (see
    /// [`Totals::cancelled`](crate::Totals::cancelled)): its concurrency slot is
    /// released, no exception is recorded, and it counts as a timeout if it ran past
    /// the timeout threshold.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::registry;
    ///
    /// let point = registry().point("docs.call_async").unwrap();
    /// let out = futures_executor::block_on(point.call_async(
    ///     || async { Ok::<_, ()>(1) },
    ///     |_| async { Ok(0) },
    /// ));
    /// assert_eq!(out, Ok(1));
    /// ```
    pub async fn call_async<T, E, F, G>(
        &self,
        f: impl FnOnce() -> F,
        fallback: impl FnOnce(Downgraded) -> G,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
        G: std::future::Future<Output = Result<T, E>>,
    {
        self.call_async_with(f, fallback, |_| true).await
    }

    /// The async form of [`call_with`](Point::call_with): `is_exception` chooses which
    /// `Err` values count as exceptions.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// registry().set_policy("docs.call_async_with", Policy::builder().max_exceptions(1).build()?)?;
    /// let point = registry().point("docs.call_async_with")?;
    /// let out = futures_executor::block_on(point.call_async_with(
    ///     || async { Err::<u32, _>(404) },
    ///     |_| async { Ok(0) },
    ///     |status: &u16| *status >= 500,
    /// ));
    /// assert_eq!(out, Err(404));
    /// assert_eq!(point.stats().totals.exceptions, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn call_async_with<T, E, F, G>(
        &self,
        f: impl FnOnce() -> F,
        fallback: impl FnOnce(Downgraded) -> G,
        is_exception: impl FnOnce(&E) -> bool,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
        G: std::future::Future<Output = Result<T, E>>,
    {
        // The guard of the generated async code: a future dropped mid-flight is a
        // cancelled call, with or without a permit.
        let mut call = crate::point::admit::pending::Pending::manual(self);
        if let Err(d) = self.enter_in(&mut call.slot) {
            call.done = true;
            return fallback(d).await;
        }
        let out = crate::unwind::CatchUnwind::new(f()).await;
        call.done = true;
        match out {
            Ok(out) => {
                let exception = out.as_ref().err().is_some_and(is_exception);
                Permit::finish_in(self, &mut call.slot, exception);
                out
            }
            Err(panic) => {
                Permit::finish_in(self, &mut call.slot, true);
                std::panic::resume_unwind(panic)
            }
        }
    }
}
