//! The process-wide registry: point name → per-point state, policies and listeners.

use crate::clock::Clock;
use crate::error::{check_point_name, AlreadyInitialized, PointNameError};
use crate::listener::{
    BreakerEvent, Dispatcher, DowngradeEvent, Event, EventKind, Listener, ListenerId,
};
use crate::point::Point;
use crate::policy::{BreakerError, BreakerPolicy, Policy};
use crate::retry::RetryBudget;
use crate::sources::PointConfig;
use crate::stats::PointStats;
use crate::sync::Recover;
use crate::sync::{Arc, AtomicU64, OnceLock, Ordering};
use dashmap::DashMap;
use layers::Layers;
use std::fmt;
use std::time::Duration;

mod layers;
mod retire;
mod retry;
#[cfg(feature = "testing")]
pub(crate) mod scoped;
pub use retire::RetireError;

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// The process-wide registry used by `#[downgrade]`, created on first use with the
/// system clock.
///
/// With the `testing` feature, a thread (or future) that has a
/// [`TestRegistry`](crate::testing::TestRegistry) in scope gets that one instead, as
/// the guarded calls there do.
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
    #[cfg(feature = "testing")]
    if let Some(scoped) = scoped::scoped() {
        return scoped;
    }
    global()
}

/// The process-wide registry, whatever is in scope: what the call sites cache.
#[inline]
pub(crate) fn global() -> &'static Registry {
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
/// and live as long as the registry, unless [retired](Registry::retire). Dropping a
/// registry frees its points (each once its last [handle](Registry::point_handle) is
/// gone), their slots, its named retry budgets and its event thread.
pub struct Registry {
    clock: Clock,
    points: DashMap<&'static str, Arc<Point>>,
    events: Arc<Dispatcher>,
    layers: Layers,
    /// Points no `#[downgrade]` or `#[breaker]` function declares, and their cap.
    undeclared: AtomicU64,
    max_undeclared: AtomicU64,
    /// Named retry budgets, boxed so that borrows of them stay put (reconfigured in
    /// place, never removed while the registry lives).
    pub(crate) budgets: crate::sync::Mutex<std::collections::HashMap<String, Box<RetryBudget>>>,
}

/// How many points that no function declares a registry takes by default
/// ([`Registry::set_max_undeclared_points`]).
pub const DEFAULT_MAX_UNDECLARED_POINTS: u64 = 100_000;

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("points", &self.points.len())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// The declarations of the program (see [`crate::declared`]).
impl Registry {
    /// Every `#[downgrade]` and `#[breaker]` function linked into the program, sorted
    /// by point name, then function, file and line; available before any of them runs.
    ///
    /// Declarations are process-wide: every registry lists the same ones. A point
    /// created only through the API (`registry().point("x")`) is not declared.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::registry;
    ///
    /// for p in registry().declared_points() {
    ///     println!("{p}");
    /// }
    /// ```
    pub fn declared_points(&self) -> Vec<crate::declared::DeclaredPoint> {
        crate::declared::sorted()
    }
}

impl Registry {
    /// A registry of its own with the given clock, separate from the global one (for
    /// tests and for embedding several isolated registries). Dropped, it frees
    /// everything it made; its points are borrowed from it, so the borrow checker
    /// sees that none is used after (handles from
    /// [`point_handle`](Self::point_handle) keep theirs alive).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{Clock, Policy, Registry, Reason};
    ///
    /// let r = Registry::with_clock(Clock::system());
    /// r.set_policy("test.kill", Policy::builder().max_visits(0).build()?)?;
    /// let point = r.point("test.kill")?; // borrows `r`
    /// assert_eq!(point.enter().unwrap_err().reason(), Reason::Visits);
    /// drop(r); // frees the point, its slots and everything else `r` made
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(clock: Clock) -> Registry {
        Registry {
            clock,
            points: DashMap::new(),
            events: Arc::new(Dispatcher::new()),
            layers: Layers::new(),
            undeclared: AtomicU64::new(0),
            max_undeclared: AtomicU64::new(DEFAULT_MAX_UNDECLARED_POINTS),
            budgets: crate::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    pub(crate) fn layers_state(&self) -> &Layers {
        &self.layers
    }

    /// The registry's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The point with this name, created if needed, borrowed from the registry (for
    /// [`registry()`](crate::registry), `&'static`: the macros' fast path). The borrow
    /// pins the point: it is never [retired](Self::retire), since the borrow may last
    /// as long as the registry. For points whose names come from data, use
    /// [`point_handle`](Self::point_handle), which can be retired.
    ///
    /// A registry holds at most [`max_undeclared_points`](Self::max_undeclared_points)
    /// points that no `#[downgrade]` or `#[breaker]` function declares (default
    /// [`DEFAULT_MAX_UNDECLARED_POINTS`]), so that names built from user input cannot
    /// grow the process without bound; retired points give their room back. Declared
    /// points are never refused, and existing points are always returned.
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
    pub fn point(&self, name: &str) -> Result<&Point, PointNameError> {
        if let Some(point) = self.get(name) {
            // No count taken for a point that exists: a look-up per call stays cheap.
            return Ok(point);
        }
        let point = self.lookup(name, Pin::Yes)?;
        // SAFETY: the point is pinned (see `lookup`): the map keeps this `Arc` until
        // the registry is dropped, and the returned borrow ends before that. An
        // `Arc`'s value never moves.
        Ok(unsafe { &*Arc::as_ptr(&point) })
    }

    /// The point with this name, created if needed, as a shared handle: it lives as
    /// long as any handle does, and may be [retired](Self::retire) once none is left.
    /// For points whose names come from data (a tenant, a route, a user), so that
    /// their memory can be given back; [`point`](Self::point) hands out a borrow
    /// instead, which pins the point for the registry's life.
    ///
    /// # Errors
    ///
    /// As [`point`](Self::point).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    ///
    /// let tenant = registry().point_handle("docs.tenant.42")?;
    /// tenant.enter().unwrap().finish(false);
    /// assert_eq!(registry().stats("docs.tenant.42").unwrap().totals.passes, 1);
    /// drop(tenant);
    /// registry().retire("docs.tenant.42")?;
    /// assert!(registry().stats("docs.tenant.42").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn point_handle(&self, name: &str) -> Result<Arc<Point>, PointNameError> {
        self.lookup(name, Pin::No)
    }

    /// The point named `name`, made if needed (counted against the cap on undeclared
    /// points), pinned if `pin` says so. Pinning happens under the map entry's lock,
    /// which [`retire`](Self::retire) takes to remove it: a point is either pinned
    /// before a retirement looks at it, or retired before the pin finds it.
    fn lookup(&self, name: &str, pin: Pin) -> Result<Arc<Point>, PointNameError> {
        if let Some(p) = self.points.get(name) {
            pin.apply(&p);
            return Ok(Arc::clone(&p));
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
        let name = intern(name);
        let mut created = false;
        let entry = self.points.entry(name).or_insert_with(|| {
            created = true;
            Arc::new_cyclic(|me| {
                Point::new(
                    name,
                    self.clock.clone(),
                    Arc::clone(&self.events),
                    me.clone(),
                )
            })
        });
        pin.apply(&entry);
        let point = Arc::clone(&entry);
        drop(entry);
        if !declared && !created {
            self.undeclared.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(point)
    }

    /// The point named `name` if it exists, not pinned (for the registry's own use:
    /// held while it works, then let go).
    pub(crate) fn find(&self, name: &str) -> Option<Arc<Point>> {
        self.points.get(name).map(|p| Arc::clone(&p))
    }

    /// The most points no function declares that this registry takes.
    pub fn max_undeclared_points(&self) -> u64 {
        self.max_undeclared.load(Ordering::Acquire)
    }

    /// Sets [`max_undeclared_points`](Self::max_undeclared_points). Lowering it below
    /// the points already held refuses new ones; it removes none.
    pub fn set_max_undeclared_points(&self, max: u64) {
        self.max_undeclared.store(max, Ordering::Release);
    }

    /// How many points that no function declares this registry holds.
    pub fn undeclared_points(&self) -> u64 {
        self.undeclared.load(Ordering::Acquire)
    }

    /// The point with this name if it exists, without creating it. Like
    /// [`point`](Self::point), it pins the point (it is never retired).
    pub fn get(&self, name: &str) -> Option<&Point> {
        let entry = self.points.get(name)?;
        Pin::Yes.apply(&entry);
        // SAFETY: as in `point`: pinned, so kept by the map while the registry lives.
        Some(unsafe { &*Arc::as_ptr(&entry) })
    }

    /// Sets the policy of a point in the code layer ([`Source::Code`](crate::sources::Source::Code)),
    /// creating the point if needed. The next call on every thread sees it, unless a
    /// file or the console sets the same sections (they rank above code by default,
    /// see [`sources`](crate::sources)). Counters, in-flight calls, the token bucket and
    /// the delay state are kept; a different window geometry restarts the window only.
    ///
    /// # Errors
    ///
    /// [`PointNameError`] for an invalid name.
    pub fn set_policy(&self, name: &str, policy: Policy) -> Result<(), PointNameError> {
        let point = self.point_handle(name)?;
        self.edit_code_layer(point, |current| {
            let mut config = PointConfig::builder().policy(policy).build();
            if let Some(c) = current {
                config.breaker = c.breaker;
                config.retry = c.retry;
            }
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
        if let Some(point) = self.find(name) {
            self.edit_code_layer(point, |current| {
                current.map(|mut c| {
                    c.sections = crate::sources::Sections::NONE;
                    c
                })
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
        Ok(self.find(name).and_then(|p| p.policy()))
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
    /// let config = ClassicConfig::builder().consecutive_failures(2).build()?;
    /// registry().set_breaker("docs.set_breaker", BreakerPolicy::Classic(config))?;
    /// let point = registry().point("docs.set_breaker")?;
    /// point.enter().unwrap().finish(true);
    /// point.enter().unwrap().finish(true);
    /// assert_eq!(point.enter().unwrap_err().reason(), Reason::BreakerOpen);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_breaker(&self, name: &str, breaker: BreakerPolicy) -> Result<(), BreakerError> {
        breaker.validate()?;
        let point = self.point_handle(name)?;
        self.edit_code_layer(point, |current| {
            Some(match current {
                Some(mut c) => {
                    c.breaker = Some(breaker);
                    c
                }
                None => PointConfig::builder().breaker(breaker).build(),
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
        if let Some(point) = self.find(name) {
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
        Ok(self.find(name).and_then(|p| p.breaker()))
    }

    /// Statistics of a point, or `None` if no point has that name.
    pub fn stats(&self, name: &str) -> Option<PointStats> {
        self.find(name).map(|p| p.stats())
    }

    /// Every point, in no particular order (cheaper than [`point_names`](Self::point_names)
    /// for a pass over all of them).
    #[cfg(any(feature = "prometheus", feature = "metrics", feature = "opentelemetry"))]
    pub(crate) fn for_each_point(&self, mut f: impl FnMut(&Point)) {
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

    /// Adds a listener that sees every downgrade of every point, every breaker state
    /// change and every shadow downgrade, all as the same flat [`DowngradeEvent`].
    ///
    /// Superseded by [`add_event_listener`](Self::add_event_listener), whose
    /// [`Event`] tells the three kinds apart, and by the filtered
    /// [`add_downgrade_listener`](Self::add_downgrade_listener),
    /// [`add_breaker_listener`](Self::add_breaker_listener) and
    /// [`add_shadow_listener`](Self::add_shadow_listener); it keeps working, with the
    /// same queue and delivery as they have.
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
        self.events.add(Listener::Record(Arc::new(f)))
    }

    /// Adds a listener that sees every event of every point, as an [`Event`]: a
    /// downgraded call ([`Event::Downgrade`]), a breaker state change
    /// ([`Event::Breaker`]), a call a shadow policy would have downgraded
    /// ([`Event::Shadow`]) or a change of a point's effective settings
    /// ([`Event::Policy`]).
    ///
    /// Delivery is as for [`add_listener`](Self::add_listener): in order, on the
    /// registry's delivery thread, through the bounded queue shared by every listener
    /// (full: new events are dropped and counted); a slow listener delays only other
    /// listeners and a panicking one is isolated, so neither ever blocks or breaks a
    /// guarded call. [`flush_listeners`](Self::flush_listeners) waits for delivery.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Event, Policy, Reason};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = Arc::clone(&seen);
    /// let id = registry().add_event_listener(move |e| match e {
    ///     Event::Downgrade(d) if d.point == "docs.event_listener" => {
    ///         sink.lock().unwrap().push(d.reason)
    ///     }
    ///     _ => {}
    /// });
    /// registry().set_policy("docs.event_listener", Policy::builder().max_visits(0).build()?)?;
    /// assert!(registry().point("docs.event_listener")?.enter().is_err());
    /// assert!(registry().flush_listeners(Duration::from_secs(5)));
    /// assert_eq!(*seen.lock().unwrap(), [Reason::Visits]);
    /// registry().remove_listener(id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_event_listener<F>(&self, f: F) -> ListenerId
    where
        F: Fn(&Event) + Send + Sync + 'static,
    {
        self.events.add(Listener::Typed(Arc::new(f)))
    }

    /// Adds a listener of the events of the given kinds only (the others are not
    /// handed to it); delivered as by [`add_event_listener`](Self::add_event_listener).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Event, EventKind, Policy};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = Arc::clone(&seen);
    /// let kinds = [EventKind::Policy, EventKind::Downgrade];
    /// let id = registry().add_event_listener_of(&kinds, move |e| {
    ///     if e.point() == "docs.kinds" {
    ///         sink.lock().unwrap().push(e.kind());
    ///     }
    /// });
    /// registry().set_policy("docs.kinds", Policy::builder().max_visits(0).build()?)?;
    /// assert!(registry().point("docs.kinds")?.enter().is_err());
    /// assert!(registry().flush_listeners(Duration::from_secs(5)));
    /// assert_eq!(*seen.lock().unwrap(), [EventKind::Policy, EventKind::Downgrade]);
    /// registry().remove_listener(id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_event_listener_of<F>(&self, kinds: &[EventKind], f: F) -> ListenerId
    where
        F: Fn(&Event) + Send + Sync + 'static,
    {
        let kinds = kinds.to_vec();
        self.add_event_listener(move |e| {
            if kinds.contains(&e.kind()) {
                f(e);
            }
        })
    }

    /// Queues an [`Event::Policy`] per change for the typed listeners; never blocks.
    /// Without listeners nothing is copied (a reload may change many points).
    pub(crate) fn emit_policy_events(&self, changes: &[crate::sources::PolicyChange]) {
        if !self.events.has_listeners() {
            return;
        }
        for change in changes {
            self.events
                .emit_typed(Event::Policy(Box::new(change.clone())));
        }
    }

    /// Adds a listener of downgraded calls only ([`Event::Downgrade`]: no breaker
    /// changes, no shadow downgrades); delivered as by
    /// [`add_event_listener`](Self::add_event_listener).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let count = Arc::new(AtomicU64::new(0));
    /// let c = Arc::clone(&count);
    /// let id = registry().add_downgrade_listener(move |d| {
    ///     if d.point == "docs.downgrade_listener" {
    ///         c.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// });
    /// registry().set_policy("docs.downgrade_listener", Policy::builder().max_visits(1).build()?)?;
    /// let point = registry().point("docs.downgrade_listener")?;
    /// point.enter().unwrap().finish(false);
    /// assert!(point.enter().is_err());
    /// assert!(point.enter().is_err());
    /// assert!(registry().flush_listeners(Duration::from_secs(5)));
    /// assert_eq!(count.load(Ordering::Relaxed), 2);
    /// registry().remove_listener(id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_downgrade_listener<F>(&self, f: F) -> ListenerId
    where
        F: Fn(&DowngradeEvent) + Send + Sync + 'static,
    {
        self.add_event_listener(move |e| {
            if let Event::Downgrade(d) = e {
                f(d);
            }
        })
    }

    /// Adds a listener of breaker state changes only ([`Event::Breaker`]); delivered
    /// as by [`add_event_listener`](Self::add_event_listener). See [`BreakerEvent`]
    /// for an example.
    pub fn add_breaker_listener<F>(&self, f: F) -> ListenerId
    where
        F: Fn(&BreakerEvent) + Send + Sync + 'static,
    {
        self.add_event_listener(move |e| {
            if let Event::Breaker(b) = e {
                f(b);
            }
        })
    }

    /// Adds a listener of shadow downgrades only ([`Event::Shadow`]: calls a shadow
    /// policy would have downgraded, which ran); delivered as by
    /// [`add_event_listener`](Self::add_event_listener).
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy, Reason};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = Arc::clone(&seen);
    /// let id = registry().add_shadow_listener(move |d| {
    ///     if d.point == "docs.shadow_listener" {
    ///         sink.lock().unwrap().push(d.reason);
    ///     }
    /// });
    /// let policy = Policy::builder().max_visits(0).shadow(true).build()?;
    /// registry().set_policy("docs.shadow_listener", policy)?;
    /// // A shadow policy lets the call run, and reports what it would have done.
    /// registry().point("docs.shadow_listener")?.enter().unwrap().finish(false);
    /// assert!(registry().flush_listeners(Duration::from_secs(5)));
    /// assert_eq!(*seen.lock().unwrap(), [Reason::Visits]);
    /// registry().remove_listener(id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_shadow_listener<F>(&self, f: F) -> ListenerId
    where
        F: Fn(&DowngradeEvent) + Send + Sync + 'static,
    {
        self.add_event_listener(move |e| {
            if let Event::Shadow(d) = e {
                f(d);
            }
        })
    }

    /// Waits until every event queued before this call has been delivered to every
    /// listener, or `timeout` has passed; returns `true` if delivery finished in time.
    ///
    /// The call queues a marker behind the events already queued and sleeps on a
    /// condition variable until the delivery thread reaches it (no polling); events
    /// queued meanwhile by other threads may be delivered too, but are not waited
    /// for. With a full queue it waits, within `timeout`, for room for the marker;
    /// the marker holds one slot of the queue until it is reached. It returns `true`
    /// at once when no listener was ever added (nothing was ever queued), and `false`
    /// at once when called from a listener (the delivery thread cannot wait for
    /// itself). Events dropped because the queue was full are not waited for: they
    /// are counted in [`dropped_events`](Self::dropped_events).
    ///
    /// For tests and for shutdown: a guarded call never waits for listeners.
    ///
    /// # Examples
    ///
    /// ```
    /// use resilience_runtime::{registry, Policy};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let seen = Arc::new(AtomicBool::new(false));
    /// let s = Arc::clone(&seen);
    /// let id = registry().add_downgrade_listener(move |d| {
    ///     if d.point == "docs.flush" {
    ///         std::thread::sleep(Duration::from_millis(20)); // a slow listener
    ///         s.store(true, Ordering::Relaxed);
    ///     }
    /// });
    /// registry().set_policy("docs.flush", Policy::builder().max_visits(0).build()?)?;
    /// assert!(registry().point("docs.flush")?.enter().is_err()); // returns at once
    /// assert!(registry().flush_listeners(Duration::from_secs(5)));
    /// assert!(seen.load(Ordering::Relaxed), "delivered before flush returned");
    /// registry().remove_listener(id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush_listeners(&self, timeout: Duration) -> bool {
        self.events.flush(timeout)
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

/// The one `&'static` copy of a point name, made by the first point of that name in
/// any registry. Names outlive their points: events, errors and layer tables carry
/// them as `&'static str`, and a retired point's downgrade may still be on its way to
/// a listener. A retired name made again reuses its copy, so names cost at most one
/// copy each (256 bytes at most, see [`crate::name`]).
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<crate::sync::Mutex<std::collections::HashSet<&'static str>>> =
        OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().recover();
    if let Some(n) = names.get(name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(n);
    n
}

/// Whether a look-up pins the point it returns (see [`Registry::point`]).
#[derive(Clone, Copy)]
enum Pin {
    Yes,
    No,
}

impl Pin {
    /// Pins `point` if asked; called under its map entry's lock.
    fn apply(self, point: &Point) {
        if matches!(self, Pin::Yes) && !point.pinned.load(Ordering::Relaxed) {
            point.pinned.store(true, Ordering::Relaxed);
        }
    }
}
