//! The process-wide registry: point name → per-point state, policies and listeners.

use crate::clock::Clock;
use crate::error::{check_point_name, AlreadyInitialized, PointNameError};
use crate::layers::PointConfig;
use crate::listener::{
    BreakerEvent, Dispatcher, DowngradeEvent, Event, EventKind, Listener, ListenerId,
};
use crate::point::Point;
use crate::policy::{BreakerError, BreakerPolicy, Policy};
use crate::retry::RetryBudget;
use crate::stats::PointStats;
use crate::sync::Recover;
use crate::sync::{Arc, AtomicU64, OnceLock, Ordering};
use dashmap::DashMap;
use layers::Layers;
use std::fmt;
use std::time::Duration;

mod layers;
mod retry;

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
    undeclared: AtomicU64,
    max_undeclared: AtomicU64,
    /// Named retry budgets, leaked like points (reconfigured in place).
    pub(crate) budgets: crate::sync::Mutex<std::collections::HashMap<String, &'static RetryBudget>>,
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
    /// tests and for embedding several isolated registries). Its points are never freed.
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
            place_point(Point::new(
                name,
                self.clock.clone(),
                Arc::clone(&self.events),
            ))
        });
        let point = *entry;
        drop(entry);
        if !declared && !created {
            self.undeclared.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(point)
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
    #[cfg(any(
        feature = "metrics",
        feature = "metrics-facade",
        feature = "opentelemetry"
    ))]
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
    pub(crate) fn emit_policy_events(&self, changes: &[crate::layers::PolicyChange]) {
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

fn leak_name(name: &str) -> &'static str {
    Box::leak(name.to_owned().into_boxed_str())
}

/// Points per block of [`place_point`].
const POINT_BLOCK: usize = 32;

/// The unused rest of the current block of points.
static POINT_SLOTS: crate::sync::Mutex<&'static mut [std::mem::MaybeUninit<Point>]> =
    crate::sync::Mutex::new(&mut []);

/// Places a point for the rest of the process. Points are cache-line aligned (their
/// flow word has a line of its own), which an allocation of its own would pay for
/// with alignment padding each: they are placed in blocks of [`POINT_BLOCK`] instead.
fn place_point(point: Point) -> &'static Point {
    let mut slots = POINT_SLOTS.lock().recover();
    let mut block = std::mem::take(&mut *slots);
    if block.is_empty() {
        block = Box::leak(Box::new_uninit_slice(POINT_BLOCK));
    }
    let (first, rest) = block.split_first_mut().expect("a block is never empty");
    *slots = rest;
    first.write(point)
}
