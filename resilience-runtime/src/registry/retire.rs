//! Retiring points ([`Registry::retire`], [`Registry::retire_unused`]): a point that
//! no code holds and no source configures is removed, and its memory given back.

use super::Registry;
use crate::error::{check_point_name, PointNameError};
use crate::point::Point;
use crate::sources::table::Table;
use crate::sources::Source;
use crate::sync::{Arc, Ordering};
use std::fmt;

/// Why [`Registry::retire`] kept a point.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetireError {
    /// The name is not a valid point name.
    Name(PointNameError),
    /// No point has this name (never made, or retired already).
    Unknown(String),
    /// A `#[downgrade]` or `#[breaker]` function declares the point.
    Declared(String),
    /// The point was handed out as a borrow ([`Registry::point`], [`Registry::get`]),
    /// which may live as long as the registry.
    Pinned(String),
    /// A handle of the point ([`Registry::point_handle`]) is held, by its owner or by
    /// a call in flight.
    InUse(String),
    /// These sources have settings for the point; clear them first.
    Configured {
        /// The point.
        point: String,
        /// The sources with a layer of it, sorted.
        sources: Vec<Source>,
    },
}

impl fmt::Display for RetireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetireError::Name(e) => e.fmt(f),
            RetireError::Unknown(p) => write!(f, "no point is named {p:?}"),
            RetireError::Declared(p) => write!(
                f,
                "point {p:?} is declared by a #[downgrade] or #[breaker] function, and lives as long as the program"
            ),
            RetireError::Pinned(p) => write!(
                f,
                "point {p:?} was handed out by `Registry::point` or `Registry::get`, and lives as long as its registry (use `point_handle` for points to retire)"
            ),
            RetireError::InUse(p) => {
                write!(f, "point {p:?} is still held by a handle or a call in flight")
            }
            RetireError::Configured { point, sources } => {
                write!(f, "point {point:?} still has settings from ")?;
                for (i, s) in sources.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{s}")?;
                }
                f.write_str(" (clear them first)")
            }
        }
    }
}

impl std::error::Error for RetireError {}

impl From<PointNameError> for RetireError {
    fn from(e: PointNameError) -> RetireError {
        RetireError::Name(e)
    }
}

/// Why a point is kept, if it is: the checks of both entries, cheapest first (the
/// layer table is read last, under the layer lock the caller holds).
fn kept(name: &str, point: &Arc<Point>, table: &Table) -> Option<RetireError> {
    let owned = || name.to_owned();
    if crate::declared::is_declared(name) {
        Some(RetireError::Declared(owned()))
    } else if point.pinned.load(Ordering::Relaxed) {
        Some(RetireError::Pinned(owned()))
    } else if Arc::strong_count(point) > 1 {
        Some(RetireError::InUse(owned()))
    } else {
        let sources = table.sources(name);
        (!sources.is_empty()).then(|| RetireError::Configured {
            point: owned(),
            sources,
        })
    }
}

impl Registry {
    /// Removes a point that no code holds and no source configures, and frees it. Its
    /// counters and statistics go with it; its name, looked up again, makes a new
    /// point with empty counters.
    ///
    /// A point is retired when:
    /// - no `#[downgrade]` or `#[breaker]` function declares it;
    /// - it was never handed out as a borrow ([`point`](Self::point),
    ///   [`get`](Self::get)): such a borrow may live as long as the registry;
    /// - no [handle](Self::point_handle) of it is left (a call in flight holds one);
    /// - no source has a layer for it: settings an operator set are never dropped by
    ///   a retirement (a policy file or the console that stops naming the point
    ///   removes its layer, and so lets it be retired).
    ///
    /// The decision is made under the layer lock and the point's map entry lock, so
    /// no handle can be taken and no layer set while it is made. On the system clock
    /// the registry's own sampler holds a point called in the last seconds for the
    /// instant it samples it, once a second: a point met at that instant is kept
    /// ([`RetireError::InUse`]) and retired by a later call. Only the name stays
    /// (one copy per distinct name, at most 256 bytes: events and errors carry it).
    ///
    /// # Errors
    ///
    /// A [`RetireError`] saying why the point is kept (or that there is none).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy, RetireError};
    ///
    /// let name = "docs.retire.tenant-7";
    /// let tenant = registry().point_handle(name)?;
    /// registry().set_policy(name, Policy::builder().max_visits(100).build()?)?;
    /// assert!(matches!(registry().retire(name), Err(RetireError::InUse(_))));
    /// drop(tenant);
    /// assert!(matches!(registry().retire(name), Err(RetireError::Configured { .. })));
    /// registry().clear_layer(name, resilience_runtime::sources::Source::Code)?;
    /// registry().retire(name)?;
    /// assert!(registry().point_names().iter().all(|n| *n != name));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retire(&self, name: &str) -> Result<(), RetireError> {
        check_point_name(name)?;
        let table = self.layers_state().lock();
        let mut why = Some(RetireError::Unknown(name.to_owned()));
        let removed = self.points.remove_if(name, |n, p| {
            why = kept(n, p, &table);
            why.is_none()
        });
        drop(table);
        match (removed, why) {
            (Some((_, point)), _) => {
                self.undeclared.fetch_sub(1, Ordering::AcqRel);
                // Freed here, with no lock held (a cluster lease stops its thread).
                drop(point);
                Ok(())
            }
            (None, Some(e)) => Err(e),
            (None, None) => Err(RetireError::Unknown(name.to_owned())),
        }
    }

    /// Retires every point that [`retire`](Self::retire) would; returns how many.
    /// For a registry whose point names come from data: call it now and then (from a
    /// timer of your own) to give back the memory of points that fell out of use.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{Clock, Registry};
    ///
    /// let r = Registry::with_clock(Clock::system());
    /// for user in 0..100 {
    ///     let point = r.point_handle(&format!("user.{user}"))?;
    ///     point.enter().unwrap().finish(false);
    /// }
    /// let kept = r.point_handle("user.7")?;
    /// assert_eq!(r.retire_unused(), 99);
    /// assert_eq!(r.point_names(), ["user.7"]);
    /// assert_eq!(r.undeclared_points(), 1);
    /// # drop(kept);
    /// # Ok::<(), resilience_runtime::PointNameError>(())
    /// ```
    pub fn retire_unused(&self) -> u64 {
        let names: Vec<&'static str> = self.points.iter().map(|e| *e.key()).collect();
        let mut freed = Vec::new();
        {
            let table = self.layers_state().lock();
            for name in names {
                if let Some(p) = self
                    .points
                    .remove_if(name, |n, p| kept(n, p, &table).is_none())
                {
                    freed.push(p.1);
                }
            }
        }
        let n = freed.len() as u64;
        self.undeclared.fetch_sub(n, Ordering::AcqRel);
        drop(freed);
        n
    }
}
