//! [`Point::call_retrying_async`]: [`Point::call_retrying`] for futures (`tokio`
//! feature), waiting between attempts with `tokio::time::sleep`.

use crate::point::admit::permit::Permit;
use crate::point::Point;
use crate::retry::{Retry, RetryBudget};
use crate::Downgraded;
use std::future::Future;

impl Point {
    /// The async form of [`call_retrying`](Point::call_retrying): each attempt is
    /// `f()` awaited as a call of this point, an `Err` that `retry_if` chooses is
    /// retried after `retry.backoff` (`tokio::time::sleep`; a manual clock advances
    /// instead), while `budget` allows; a downgrade ends the call with `fallback` at
    /// once. The point's retry section, if a layer sets one, replaces `retry` and
    /// (if it has a budget) `budget`. Dropping the returned future mid-attempt counts
    /// that attempt as cancelled; a panic keeps unwinding (counted as an exception).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::retry::{Backoff, Retry};
    /// use resilience_runtime::registry;
    /// use std::time::Duration;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let point = registry().point("docs.call_retrying_async")?;
    /// let retry = Retry::builder(3).backoff(Backoff::fixed(Duration::from_millis(1))).build()?;
    /// let mut failures_left = 1;
    /// let out = point
    ///     .call_retrying_async(
    ///         &retry,
    ///         None,
    ///         || {
    ///             let fail = failures_left > 0;
    ///             failures_left -= 1;
    ///             async move { if fail { Err("busy") } else { Ok(7) } }
    ///         },
    ///         |_downgraded| Ok(0),
    ///         |e| *e == "busy",
    ///     )
    ///     .await;
    /// assert_eq!(out, Ok(7));
    /// assert_eq!(point.retry_stats().attempts, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn call_retrying_async<T, E, F>(
        &self,
        retry: &Retry,
        budget: Option<&RetryBudget>,
        mut f: impl FnMut() -> F,
        fallback: impl FnOnce(Downgraded) -> Result<T, E>,
        retry_if: impl Fn(&E) -> bool,
    ) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let budget = self.begin_retrying(budget);
        let mut done = 0;
        loop {
            // The guard of the generated async code: an attempt dropped mid-flight is
            // a cancelled call.
            let mut call = crate::point::admit::pending::Pending::manual(self);
            if let Err(d) = self.enter_in(&mut call.slot) {
                call.done = true;
                return fallback(d);
            }
            let out = crate::unwind::CatchUnwind::new(f()).await;
            call.done = true;
            let out = match out {
                Ok(out) => {
                    Permit::finish_in(self, &mut call.slot, out.is_err());
                    out
                }
                Err(panic) => {
                    Permit::finish_in(self, &mut call.slot, true);
                    std::panic::resume_unwind(panic)
                }
            };
            match out {
                Err(e) if retry_if(&e) => {
                    done += 1;
                    match self.retry_after(|| *retry, budget, done) {
                        Some(wait) => self.clock.sleep_async(wait).await,
                        None => return Err(e),
                    }
                }
                out => return out,
            }
        }
    }
}
