//! Running a closure or future under a point: the guard of [`Point::enter`] in one
//! call, with a fallback for downgrades.

use super::permit::Permit;
use super::Point;
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
        &'static self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: impl FnOnce(Downgraded) -> Result<T, E>,
    ) -> Result<T, E> {
        // The permit stays in place, as in the code `#[downgrade]` generates.
        let mut permit = None;
        if let Err(d) = self.enter_in(&mut permit) {
            return fallback(d);
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(out) => {
                Permit::finish_in(self, &mut permit, out.is_err());
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
    pub fn call_or<T, E>(
        &'static self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: T,
    ) -> Result<T, E> {
        self.call(f, |_| Ok(fallback))
    }

    /// The async form of [`call`](Point::call): `f` and `fallback` produce futures.
    /// If the returned future is dropped mid-flight the call counts as cancelled: its
    /// concurrency slot is released and no exception is recorded.
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
        &'static self,
        f: impl FnOnce() -> F,
        fallback: impl FnOnce(Downgraded) -> G,
    ) -> Result<T, E>
    where
        F: std::future::Future<Output = Result<T, E>>,
        G: std::future::Future<Output = Result<T, E>>,
    {
        let mut permit = None;
        if let Err(d) = self.enter_in(&mut permit) {
            return fallback(d).await;
        }
        match crate::unwind::CatchUnwind::new(f()).await {
            Ok(out) => {
                Permit::finish_in(self, &mut permit, out.is_err());
                out
            }
            Err(panic) => {
                Permit::finish_in(self, &mut permit, true);
                std::panic::resume_unwind(panic)
            }
        }
    }
}
