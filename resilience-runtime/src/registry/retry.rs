//! The registry's retry settings: named budgets and each point's `retry` section.

use crate::error::{check_point_name, PointNameError};
use crate::retry::{BudgetConfig, RetryBudget, RetryError, RetryPolicy};
use crate::sources::PointConfig;
use crate::sync::Recover;
use crate::Registry;

impl Registry {
    /// The retry budget named `name`, made with [`BudgetConfig::default`] (20% of the
    /// calls of the last 10 s plus 10 a second) on first use. Every caller that names
    /// it shares it; look it up once and keep the reference (it lives as long as the
    /// registry: the whole process for [`registry()`](crate::registry)).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::registry;
    ///
    /// let budget = registry().retry_budget("docs.budget");
    /// assert!(std::ptr::eq(budget, registry().retry_budget("docs.budget")));
    /// assert_eq!(budget.config().percent, 20.0);
    /// ```
    pub fn retry_budget(&self, name: &str) -> &RetryBudget {
        let mut budgets = self.budgets.lock().recover();
        let budget = budgets.entry(name.to_owned()).or_insert_with(|| {
            let budget = RetryBudget::new(BudgetConfig::default(), self.clock().clone())
                .unwrap_or_else(|_| unreachable!("the default budget is valid"));
            Box::new(budget)
        });
        // SAFETY: budgets are boxed (they never move) and never removed while the
        // registry lives; the returned borrow is of the registry.
        unsafe { &*std::ptr::from_ref::<RetryBudget>(budget) }
    }

    /// Sets the limits of the budget named `name` (making it if needed) and returns
    /// it. Every caller sees the change at once, call sites that looked the budget up
    /// before included (see [`RetryBudget::reconfigure`]: new limits count from zero).
    ///
    /// # Errors
    ///
    /// A [`FieldError`](crate::FieldError) naming an invalid field of `config` (the
    /// budget is unchanged).
    pub fn set_retry_budget(
        &self,
        name: &str,
        config: BudgetConfig,
    ) -> Result<&RetryBudget, crate::FieldError> {
        config.validate()?;
        let mut budgets = self.budgets.lock().recover();
        let budget: &RetryBudget = match budgets.get(name) {
            Some(b) => {
                b.reconfigure(config)?;
                b
            }
            None => {
                let b = Box::new(RetryBudget::new(config, self.clock().clone())?);
                budgets.entry(name.to_owned()).or_insert(b)
            }
        };
        // SAFETY: as in `retry_budget`.
        Ok(unsafe { &*std::ptr::from_ref::<RetryBudget>(budget) })
    }

    /// Sets the retry section of a point in the code layer (creating the point if
    /// needed): its retrying calls (`#[retry]`, [`Point::call_retrying`](crate::Point::call_retrying))
    /// use it from their next attempt on, unless a file or the console sets the
    /// section (they rank above code by default). See [`RetryPolicy`].
    ///
    /// # Errors
    ///
    /// [`RetryError`] for an invalid name or field (named as in a policy file).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::retry::{Backoff, Retry, RetryPolicy};
    /// use resilience_runtime::registry;
    /// use std::time::Duration;
    ///
    /// let point = registry().point("docs.set_retry")?;
    /// let retry = Retry::builder(5).backoff(Backoff::fixed(Duration::from_nanos(1))).build()?;
    /// registry().set_retry("docs.set_retry", RetryPolicy::builder(retry).build()?)?;
    /// // The code asks for 2 attempts; the section in force says 5.
    /// let code = Retry::builder(2).build()?;
    /// let out: Result<(), &str> =
    ///     point.call_retrying(&code, None, || Err("busy"), |_| Ok(()), |_| true);
    /// assert_eq!(out, Err("busy"));
    /// assert_eq!(point.retry_stats().attempts, 5);
    /// // The fields stay public, so a policy changed after `build` is checked again.
    /// let mut bad = RetryPolicy::builder(code).build()?;
    /// bad.retry.attempts = 0;
    /// assert!(registry().set_retry("docs.set_retry", bad).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_retry(&self, name: &str, retry: RetryPolicy) -> Result<(), RetryError> {
        retry.validate().map_err(RetryError::Config)?;
        let point = self.point_handle(name)?;
        self.edit_code_layer(point, |current| {
            Some(match current {
                Some(mut c) => {
                    c.retry = Some(retry);
                    c
                }
                None => PointConfig::builder().retry(retry).build(),
            })
        });
        Ok(())
    }

    /// Removes the retry section of the code layer: the point's retrying calls use
    /// what the code says again (unless another layer sets the section).
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn clear_retry(&self, name: &str) -> Result<(), PointNameError> {
        check_point_name(name)?;
        if let Some(point) = self.find(name) {
            self.edit_code_layer(point, |current| {
                // A layer left empty is removed by the table.
                current.map(|mut c| {
                    c.retry = None;
                    c
                })
            });
        }
        Ok(())
    }

    /// The retry section a point enforces, if any layer sets one.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn retry(&self, name: &str) -> Result<Option<RetryPolicy>, PointNameError> {
        check_point_name(name)?;
        Ok(self.find(name).and_then(|p| p.retry_policy()))
    }
}
