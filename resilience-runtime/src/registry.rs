//! The process-wide registry: point name → per-point state, policies and listeners.

use crate::clock::Clock;
use crate::error::{check_point_name, AlreadyInitialized, PointNameError};
use crate::layers::{Layers, PointConfig};
use crate::listener::{Dispatcher, DowngradeEvent, ListenerId};
use crate::point::Point;
use crate::policy::{BreakerError, BreakerPolicy, Policy};
use crate::stats::PointStats;
use crate::sync::{Arc, AtomicUsize, OnceLock, Ordering};
use dashmap::DashMap;
use std::fmt;

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// The process-wide registry used by `#[downgrade]`, created on first use with the
/// system clock.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{registry, Policy};
///
/// registry().set_policy("docs.registry", Policy::builder().max_visits(10).build()?)?;
/// assert_eq!(registry().policy("docs.registry")?.unwrap().max_visits(), Some(10));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn registry() -> &'static Registry {
    GLOBAL.get_or_init(|| Registry::with_clock(Clock::system()))
}

/// Creates the global registry with the given clock (a [`ManualClock`](crate::ManualClock)
/// in tests). Call it before anything touches [`registry()`].
///
/// # Errors
///
/// [`AlreadyInitialized`] if the global registry already exists.
pub fn init_registry(clock: Clock) -> Result<&'static Registry, AlreadyInitialized> {
    let mut created = false;
    let r = GLOBAL.get_or_init(|| {
        created = true;
        Registry::with_clock(clock)
    });
    if created {
        Ok(r)
    } else {
        Err(AlreadyInitialized)
    }
}

/// Point name → point state. Points are created on first use (a call or an API call)
/// and live for the rest of the process.
pub struct Registry {
    clock: Clock,
    points: DashMap<&'static str, &'static Point>,
    events: Arc<Dispatcher>,
    layers: Layers,
    /// Points no `#[downgrade]` or `#[breaker]` function declares, and their cap.
    undeclared: AtomicUsize,
    max_undeclared: AtomicUsize,
}

/// How many points that no function declares a registry takes by default
/// ([`Registry::set_max_undeclared_points`]).
pub const DEFAULT_MAX_UNDECLARED_POINTS: usize = 100_000;

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("points", &self.points.len())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry of its own with the given clock, separate from the global one (for
    /// tests and for embedding several isolated registries). Its points are never freed.
    pub fn with_clock(clock: Clock) -> Registry {
        Registry {
            clock,
            points: DashMap::new(),
            events: Arc::new(Dispatcher::new()),
            layers: Layers::new(),
            undeclared: AtomicUsize::new(0),
            max_undeclared: AtomicUsize::new(DEFAULT_MAX_UNDECLARED_POINTS),
        }
    }

    pub(crate) fn layers_state(&self) -> &Layers {
        &self.layers
    }

    /// The registry's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The point with this name, created if needed.
    ///
    /// A registry holds at most [`max_undeclared_points`](Self::max_undeclared_points)
    /// points that no `#[downgrade]` or `#[breaker]` function declares (default
    /// [`DEFAULT_MAX_UNDECLARED_POINTS`]): points never go away, so names built from
    /// user input would otherwise grow the process without bound. Declared points are
    /// never refused, and existing points are always returned.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an empty or whitespace-only name, one with control
    /// characters, leading or trailing whitespace or over 256 bytes, or a new
    /// undeclared name once the cap is reached.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{Clock, Registry};
    ///
    /// let r: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    /// r.set_max_undeclared_points(2);
    /// r.point("user.1")?;
    /// r.point("user.2")?;
    /// let err = r.point("user.3").unwrap_err();
    /// assert!(err.to_string().contains("at most 2 points"), "{err}");
    /// assert!(r.point("user.1").is_ok(), "existing points are still there");
    /// # Ok::<(), resilience_runtime::PointNameError>(())
    /// ```
    pub fn point(&self, name: &str) -> Result<&'static Point, PointNameError> {
        if let Some(p) = self.points.get(name) {
            return Ok(*p);
        }
        check_point_name(name)?;
        let declared = crate::declared::is_declared(name);
        if !declared {
            // Taken before the point is made, so the cap holds exactly under races.
            let held = self.undeclared.fetch_add(1, Ordering::AcqRel);
            let max = self.max_undeclared.load(Ordering::Acquire);
            if held >= max {
                self.undeclared.fetch_sub(1, Ordering::AcqRel);
                return Err(PointNameError::too_many(name, max));
            }
        }
        // Two threads racing to create the same point may leak one extra copy of the
        // name; the point itself is created once.
        let name = leak_name(name);
        let mut created = false;
        let entry = self.points.entry(name).or_insert_with(|| {
            created = true;
            Box::leak(Box::new(Point::new(
                name,
                self.clock.clone(),
                Arc::clone(&self.events),
            )))
        });
        let point = *entry;
        drop(entry);
        if !declared && !created {
            self.undeclared.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(point)
    }

    /// The most points no function declares that this registry takes.
    pub fn max_undeclared_points(&self) -> usize {
        self.max_undeclared.load(Ordering::Acquire)
    }

    /// Sets [`max_undeclared_points`](Self::max_undeclared_points). Lowering it below
    /// the points already held refuses new ones; it removes none.
    pub fn set_max_undeclared_points(&self, max: usize) {
        self.max_undeclared.store(max, Ordering::Release);
    }

    /// How many points that no function declares this registry holds.
    pub fn undeclared_points(&self) -> usize {
        self.undeclared.load(Ordering::Acquire)
    }

    /// The point with this name if it exists, without creating it.
    pub fn get(&self, name: &str) -> Option<&'static Point> {
        self.points.get(name).map(|p| *p)
    }

    /// Sets the policy of a point in the code layer ([`Source::Code`](crate::layers::Source::Code)),
    /// creating the point if needed. The next call on every thread sees it, unless a
    /// file or the console sets the same sections (they rank above code by default,
    /// see [`layers`](crate::layers)). Counters, in-flight calls, the token bucket and
    /// the delay state are kept; a different window geometry restarts the window only.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn set_policy(&self, name: &str, policy: Policy) -> Result<(), PointNameError> {
        let point = self.point(name)?;
        self.edit_code_layer(point, |current| {
            let mut config = PointConfig::new(policy);
            config.breaker = current.and_then(|c| c.breaker);
            Some(config)
        });
        Ok(())
    }

    /// Removes the policy of a point from the code layer: without other layers, every
    /// call passes and only totals are counted.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn clear_policy(&self, name: &str) -> Result<(), PointNameError> {
        check_point_name(name)?;
        if let Some(point) = self.get(name) {
            self.edit_code_layer(point, |current| {
                current.map(|c| c.with_sections(crate::layers::Sections::NONE))
            });
        }
        Ok(())
    }

    /// The policy a point enforces, if any (composed from its layers, see
    /// [`effective_policy`](Registry::effective_policy)).
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn policy(&self, name: &str) -> Result<Option<Policy>, PointNameError> {
        check_point_name(name)?;
        Ok(self.get(name).and_then(Point::policy))
    }

    /// Sets the breaker of a point in the code layer (creating the point if needed);
    /// the next call on every thread sees it unless a higher layer sets a breaker. A
    /// changed breaker starts with an empty window; setting the breaker already in
    /// force keeps it running.
    ///
    /// # Errors
    ///
    /// [`BreakerError`] for an invalid name or setting (naming the field).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, BreakerPolicy, Reason};
    /// use resilience_runtime::breaker::ClassicConfig;
    ///
    /// let config = ClassicConfig { consecutive_failures: Some(2), ..ClassicConfig::default() };
    /// registry().set_breaker("docs.set_breaker", BreakerPolicy::Classic(config))?;
    /// let point = registry().point("docs.set_breaker")?;
    /// point.enter().unwrap().finish(true);
    /// point.enter().unwrap().finish(true);
    /// assert_eq!(point.enter().unwrap_err().reason(), Reason::BreakerOpen);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_breaker(&self, name: &str, breaker: BreakerPolicy) -> Result<(), BreakerError> {
        breaker.validate()?;
        let point = self.point(name)?;
        self.edit_code_layer(point, |current| {
            Some(match current {
                Some(c) => c.with_breaker(breaker),
                None => PointConfig::breaker_only(breaker),
            })
        });
        Ok(())
    }

    /// Removes the breaker setting of the code layer. A `#[breaker]` point without
    /// any breaker setting gets the default breaker again on its next call; use
    /// [`BreakerPolicy::Disabled`] to turn it off.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn clear_breaker(&self, name: &str) -> Result<(), PointNameError> {
        check_point_name(name)?;
        if let Some(point) = self.get(name) {
            self.edit_code_layer(point, |current| {
                current.map(|mut c| {
                    c.breaker = None;
                    c
                })
            });
        }
        Ok(())
    }

    /// The breaker setting a point enforces, if any.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn breaker(&self, name: &str) -> Result<Option<BreakerPolicy>, PointNameError> {
        check_point_name(name)?;
        Ok(self.get(name).and_then(Point::breaker))
    }

    /// Statistics of a point, or `None` if no point has that name.
    pub fn stats(&self, name: &str) -> Option<PointStats> {
        self.get(name).map(Point::stats)
    }

    /// Every point, in no particular order (cheaper than [`point_names`](Self::point_names)
    /// for a pass over all of them).
    #[cfg(feature = "metrics")]
    pub(crate) fn for_each_point(&self, mut f: impl FnMut(&'static Point)) {
        for entry in &self.points {
            f(entry.value());
        }
    }

    /// The names of every point created so far, sorted.
    pub fn point_names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.points.iter().map(|e| *e.key()).collect();
        names.sort_unstable();
        names
    }

    /// Adds a listener that sees every downgrade of every point.
    ///
    /// Events are delivered in order on a dedicated thread through a bounded queue of
    /// [`EVENT_QUEUE_CAPACITY`](crate::EVENT_QUEUE_CAPACITY) events: a slow listener
    /// delays only other listeners, a panicking one is isolated, and when the queue is
    /// full new events are dropped and counted ([`PointStats::dropped_events`],
    /// [`Registry::dropped_events`]). With no listener, downgrades cost no event at all.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy, Reason};
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// let tx = std::sync::Mutex::new(tx);
    /// let id = registry().add_listener(move |e| {
    ///     let _ = tx.lock().unwrap().send((e.point, e.reason));
    /// });
    /// registry().set_policy("docs.listener", Policy::builder().max_visits(0).build()?)?;
    /// assert!(registry().point("docs.listener")?.enter().is_err());
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(5))?, ("docs.listener", Reason::Visits));
    /// registry().remove_listener(id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_listener<F>(&self, f: F) -> ListenerId
    where
        F: Fn(&DowngradeEvent) + Send + Sync + 'static,
    {
        self.events.add(Arc::new(f))
    }

    /// Removes a listener (of downgrades or of policy changes); returns whether it
    /// was registered.
    pub fn remove_listener(&self, id: ListenerId) -> bool {
        self.events.remove(id) | self.layers.remove_listener(id)
    }

    /// Events dropped because the listener queue was full, over all points.
    pub fn dropped_events(&self) -> u64 {
        self.events.dropped()
    }

    /// Events delivered to the listeners so far (each event counts once, however many
    /// listeners saw it).
    pub fn delivered_events(&self) -> u64 {
        self.events.delivered()
    }
}

fn leak_name(name: &str) -> &'static str {
    Box::leak(name.to_owned().into_boxed_str())
}
