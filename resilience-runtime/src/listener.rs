//! Listeners: events are handed to a bounded queue and delivered on a dedicated
//! thread, so a slow or panicking listener never touches a guarded call.
//!
//! The engine queues [`DowngradeEvent`]s; the delivery thread hands each listener
//! either that record (listeners of [`Registry::add_listener`](crate::Registry::add_listener))
//! or its [`Event`] (listeners of [`Registry::add_event_listener`](crate::Registry::add_event_listener)
//! and the filtered variants). [`Registry::flush_listeners`](crate::Registry::flush_listeners)
//! queues a marker behind the events already queued and waits on a condition variable
//! until the delivery thread reaches it.

use crate::breaker::TransitionReason;
use crate::error::Reason;
use crate::stats::BreakerState;
use crate::sync::atomic::AtomicBool;
use crate::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use crate::sync::Recover;
use crate::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::ThreadId;
use std::time::{Duration, Instant, SystemTime};

/// How many events may wait for delivery before new ones are dropped (and counted).
pub const EVENT_QUEUE_CAPACITY: usize = 4096;

/// A call was downgraded (or, under a shadow policy, would have been), or a breaker
/// changed state: the record every listener added with
/// [`Registry::add_listener`](crate::Registry::add_listener) sees.
///
/// Breaker state changes carry [`breaker`](DowngradeEvent::breaker) and the reason
/// [`Reason::BreakerOpen`]; every other event is one downgraded call. The typed
/// [`Event`] tells the three kinds apart; inside [`Event::Downgrade`] and
/// [`Event::Shadow`] this record has `breaker: None` (and `shadow` false and true).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DowngradeEvent {
    /// The point's name.
    pub point: &'static str,
    /// The rule that tripped, or [`Reason::Delay`] inside a delay period.
    pub reason: Reason,
    /// For [`Reason::Delay`], the rule whose trip started the delay.
    pub delay_cause: Option<Reason>,
    /// When it happened (wall clock of the registry's clock).
    pub time: SystemTime,
    /// For a breaker state change (not a downgraded call): the change.
    pub breaker: Option<BreakerChange>,
    /// The point's policy is a shadow (dry run): the call "would have been
    /// downgraded" and ran.
    pub shadow: bool,
    /// The key of a call refused by its key's rule ([`Reason::HotKey`]), as text cut
    /// at [`KEY_TEXT_MAX`](crate::keys::KEY_TEXT_MAX) bytes; `None` otherwise.
    pub key: Option<String>,
}

/// A state change of a point's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerChange {
    /// The state left.
    pub from: BreakerState,
    /// The state entered.
    pub to: BreakerState,
    /// Why, for the classic breaker; for the SRE breaker, which starts and stops
    /// dropping by its formula, only [`TransitionReason::Forced`] (a test moved it).
    pub cause: Option<TransitionReason>,
}

/// A breaker state change of a point, as [`Event::Breaker`] carries it.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{registry, BreakerPolicy, BreakerState, Event};
/// use resilience_runtime::breaker::ClassicConfig;
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&seen);
/// let id = registry().add_breaker_listener(move |e| {
///     if e.point == "docs.breaker_event" {
///         sink.lock().unwrap().push(e.change.to);
///     }
/// });
/// let config = ClassicConfig::builder().consecutive_failures(1).build()?;
/// registry().set_breaker("docs.breaker_event", BreakerPolicy::Classic(config))?;
/// registry().point("docs.breaker_event")?.enter().unwrap().finish(true);
/// assert!(registry().flush_listeners(Duration::from_secs(5)));
/// assert_eq!(*seen.lock().unwrap(), [BreakerState::Open]);
/// registry().remove_listener(id);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerEvent {
    /// The point's name.
    pub point: &'static str,
    /// When it happened (wall clock of the registry's clock).
    pub time: SystemTime,
    /// The change.
    pub change: BreakerChange,
}

/// What a listener added with
/// [`Registry::add_event_listener`](crate::Registry::add_event_listener) sees: one
/// event of one of four kinds, told apart by the variant.
///
/// # Examples
///
/// ```
/// use resilience_runtime::{registry, Event, EventKind, Policy, Reason};
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&seen);
/// let id = registry().add_event_listener(move |e: &Event| {
///     if e.point() == "docs.event" {
///         sink.lock().unwrap().push(e.kind());
///         if let Event::Downgrade(d) = e {
///             assert_eq!(d.reason, Reason::Visits);
///         }
///     }
/// });
/// registry().set_policy("docs.event", Policy::builder().max_visits(0).build()?)?;
/// assert!(registry().point("docs.event")?.enter().is_err());
/// assert!(registry().flush_listeners(Duration::from_secs(5)));
/// // The policy set above is an event too, queued before the downgrade.
/// assert_eq!(*seen.lock().unwrap(), [EventKind::Policy, EventKind::Downgrade]);
/// registry().remove_listener(id);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A call was downgraded: it did not run (`shadow` is false, `breaker` is `None`).
    Downgrade(DowngradeEvent),
    /// A point's breaker changed state (classic: closed / open / half-open; SRE:
    /// started or stopped dropping).
    Breaker(BreakerEvent),
    /// The point's policy is a shadow (dry run): the call would have been downgraded,
    /// and ran (`shadow` is true, `breaker` is `None`).
    Shadow(DowngradeEvent),
    /// A point's effective settings changed: a layer was set or removed (by code, a
    /// policy file or the console) or the precedence changed. The same change as
    /// [`Registry::add_policy_listener`](crate::Registry::add_policy_listener) sees at
    /// once, here queued and delivered with the other events.
    /// (Boxed: a change holds two whole policies.)
    Policy(Box<crate::sources::PolicyChange>),
}

/// The kind of an [`Event`], without its data ([`Event::kind`]).
///
/// # Examples
///
/// ```
/// use resilience_runtime::EventKind;
///
/// let mut kinds = vec![EventKind::Policy, EventKind::Shadow, EventKind::Downgrade, EventKind::Breaker];
/// kinds.sort();
/// assert_eq!(
///     kinds,
///     [EventKind::Downgrade, EventKind::Breaker, EventKind::Shadow, EventKind::Policy]
/// );
/// assert_eq!(EventKind::Breaker.to_string(), "breaker");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventKind {
    /// [`Event::Downgrade`].
    Downgrade,
    /// [`Event::Breaker`].
    Breaker,
    /// [`Event::Shadow`].
    Shadow,
    /// [`Event::Policy`].
    Policy,
}

impl EventKind {
    /// A stable lowercase name: `"downgrade"`, `"breaker"`, `"shadow"` or `"policy"`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(resilience_runtime::EventKind::Shadow.as_str(), "shadow");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::Downgrade => "downgrade",
            EventKind::Breaker => "breaker",
            EventKind::Shadow => "shadow",
            EventKind::Policy => "policy",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Event {
    /// Which kind of event this is.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::{Event, EventKind};
    /// fn is_breaker(e: &Event) -> bool {
    ///     e.kind() == EventKind::Breaker
    /// }
    /// ```
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Downgrade(_) => EventKind::Downgrade,
            Event::Breaker(_) => EventKind::Breaker,
            Event::Shadow(_) => EventKind::Shadow,
            Event::Policy(_) => EventKind::Policy,
        }
    }

    /// The point's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Event;
    /// fn name(e: &Event) -> &'static str {
    ///     e.point()
    /// }
    /// ```
    pub fn point(&self) -> &'static str {
        match self {
            Event::Downgrade(d) | Event::Shadow(d) => d.point,
            Event::Breaker(b) => b.point,
            Event::Policy(c) => c.point,
        }
    }

    /// When it happened (wall clock of the registry's clock).
    ///
    /// # Examples
    ///
    /// ```
    /// # use resilience_runtime::Event;
    /// fn at(e: &Event) -> std::time::SystemTime {
    ///     e.time()
    /// }
    /// ```
    pub fn time(&self) -> SystemTime {
        match self {
            Event::Downgrade(d) | Event::Shadow(d) => d.time,
            Event::Breaker(b) => b.time,
            Event::Policy(c) => c.time,
        }
    }
}

impl From<DowngradeEvent> for Event {
    /// Sorts a record into its kind: a breaker change if it has
    /// [`breaker`](DowngradeEvent::breaker), else a shadow downgrade if
    /// [`shadow`](DowngradeEvent::shadow), else a downgrade.
    fn from(e: DowngradeEvent) -> Event {
        match e.breaker {
            Some(change) => Event::Breaker(BreakerEvent {
                point: e.point,
                time: e.time,
                change,
            }),
            None if e.shadow => Event::Shadow(e),
            None => Event::Downgrade(e),
        }
    }
}

impl TryFrom<Event> for DowngradeEvent {
    /// A policy change, which has no flat record.
    type Error = Event;

    /// The record [`Registry::add_listener`](crate::Registry::add_listener)'s
    /// listeners see for this event (a breaker change has the reason
    /// [`Reason::BreakerOpen`]); a policy change has none (those listeners do not
    /// see it) and is given back.
    fn try_from(e: Event) -> Result<DowngradeEvent, Event> {
        Ok(match e {
            Event::Downgrade(d) | Event::Shadow(d) => d,
            Event::Policy(_) => return Err(e),
            Event::Breaker(b) => DowngradeEvent {
                point: b.point,
                reason: Reason::BreakerOpen,
                delay_cause: None,
                time: b.time,
                breaker: Some(b.change),
                shadow: false,
                key: None,
            },
        })
    }
}

/// Identifies a listener so it can be removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(u64);

impl ListenerId {
    /// A fresh id, unique in the process (downgrade and policy listeners share them).
    pub(crate) fn fresh() -> ListenerId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ListenerId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A listener of either API.
#[derive(Clone)]
pub(crate) enum Listener {
    /// [`Registry::add_listener`](crate::Registry::add_listener): the flat record.
    Record(Arc<dyn Fn(&DowngradeEvent) + Send + Sync>),
    /// [`Registry::add_event_listener`](crate::Registry::add_event_listener) and the
    /// filtered variants: the typed event.
    Typed(Arc<dyn Fn(&Event) + Send + Sync>),
}

/// What the queue carries: an event, or a flush marker whose flag the delivery
/// thread sets when it reaches it.
enum Message {
    /// A downgrade, shadow downgrade or breaker change: every listener sees it.
    Event(DowngradeEvent),
    /// An event with no flat record (a policy change): typed listeners only.
    Typed(Event),
    Flush(Arc<AtomicBool>),
}

/// What the dispatcher shares with its delivery thread.
struct Shared {
    listeners: RwLock<Vec<(ListenerId, Listener)>>,
    delivered: AtomicU64,
    /// Taken by the delivery thread after each message to wake flushers, and by a
    /// flusher while it checks its marker: no wake-up is lost between them.
    wake_lock: Mutex<()>,
    wake: Condvar,
    /// The delivery thread, so a listener that flushes is not left waiting for
    /// itself.
    thread: OnceLock<ThreadId>,
}

pub(crate) struct Dispatcher {
    /// Number of listeners: the hot path reads only this.
    count: AtomicUsize,
    shared: Arc<Shared>,
    sender: OnceLock<SyncSender<Message>>,
    start: Mutex<()>,
    dropped: AtomicU64,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("listeners", &self.count.load(Ordering::Relaxed))
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish()
    }
}

impl Dispatcher {
    pub(crate) fn new() -> Dispatcher {
        Dispatcher {
            count: AtomicUsize::new(0),
            shared: Arc::new(Shared {
                listeners: RwLock::new(Vec::new()),
                delivered: AtomicU64::new(0),
                wake_lock: Mutex::new(()),
                wake: Condvar::new(),
                thread: OnceLock::new(),
            }),
            sender: OnceLock::new(),
            start: Mutex::new(()),
            dropped: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn has_listeners(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    pub(crate) fn add(&self, f: Listener) -> ListenerId {
        self.ensure_thread();
        let id = ListenerId::fresh();
        let mut list = self.shared.listeners.write().recover();
        list.push((id, f));
        self.count.store(list.len(), Ordering::Release);
        id
    }

    pub(crate) fn remove(&self, id: ListenerId) -> bool {
        let mut list = self.shared.listeners.write().recover();
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        self.count.store(list.len(), Ordering::Release);
        list.len() != before
    }

    /// Queues an event; never blocks. Returns false if it was dropped.
    pub(crate) fn emit(&self, event: DowngradeEvent) -> bool {
        self.queue(Message::Event(event))
    }

    /// Queues a typed event without a flat record (for typed listeners); never
    /// blocks. Returns false if it was dropped (or no listener was ever added).
    pub(crate) fn emit_typed(&self, event: Event) -> bool {
        self.has_listeners() && self.queue(Message::Typed(event))
    }

    fn queue(&self, message: Message) -> bool {
        let Some(tx) = self.sender.get() else {
            return false;
        };
        match tx.try_send(message) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn delivered(&self) -> u64 {
        self.shared.delivered.load(Ordering::Acquire)
    }

    /// Waits until the delivery thread has handled every event queued before this
    /// call (see [`Registry::flush_listeners`](crate::Registry::flush_listeners)).
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        let Some(tx) = self.sender.get() else {
            // No listener was ever added: nothing was ever queued.
            return true;
        };
        if self.shared.thread.get() == Some(&std::thread::current().id()) {
            // A listener flushing would wait for itself.
            return false;
        }
        // `None`: a timeout too large for an `Instant`, i.e. no deadline.
        let deadline = Instant::now().checked_add(timeout);
        let done = Arc::new(AtomicBool::new(false));
        let mut marker = Some(Message::Flush(Arc::clone(&done)));
        let shared = &*self.shared;
        let mut guard = shared.wake_lock.lock().recover();
        loop {
            if let Some(m) = marker.take() {
                match tx.try_send(m) {
                    Ok(()) => {}
                    // A full queue: wait for the delivery thread to take a message.
                    Err(TrySendError::Full(m)) => marker = Some(m),
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            if marker.is_none() && done.load(Ordering::Acquire) {
                return true;
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            guard = match shared.wake.wait_timeout(guard, wait) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    fn ensure_thread(&self) {
        if self.sender.get().is_some() {
            return;
        }
        let _once = self.start.lock().recover();
        if self.sender.get().is_some() {
            return;
        }
        let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE_CAPACITY);
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("resilience-events".into())
            .spawn(move || deliver(rx, shared));
        if let Ok(handle) = spawned {
            let _ = self.shared.thread.set(handle.thread().id());
            let _ = self.sender.set(tx);
        }
    }
}

fn deliver(rx: Receiver<Message>, shared: Arc<Shared>) {
    while let Ok(message) = rx.recv() {
        match message {
            Message::Event(event) => {
                deliver_one(&shared, event);
                shared.delivered.fetch_add(1, Ordering::Release);
            }
            Message::Typed(event) => {
                deliver_typed(&shared, &event);
                shared.delivered.fetch_add(1, Ordering::Release);
            }
            Message::Flush(done) => done.store(true, Ordering::Release),
        }
        // Wake flushers: a marker was reached, or a slot freed for one to queue.
        let _guard = shared.wake_lock.lock().recover();
        shared.wake.notify_all();
    }
}

/// The listeners now (a copy: a listener may add or remove listeners).
fn listeners(shared: &Shared) -> Vec<Listener> {
    shared
        .listeners
        .read()
        .recover()
        .iter()
        .map(|(_, l)| l.clone())
        .collect()
}

/// An event without a flat record, to the typed listeners.
fn deliver_typed(shared: &Shared, event: &Event) {
    for listener in listeners(shared) {
        if let Listener::Typed(f) = listener {
            // A panicking listener must not stop delivery to the others.
            let _ = catch_unwind(AssertUnwindSafe(|| f(event)));
        }
    }
}

fn deliver_one(shared: &Shared, record: DowngradeEvent) {
    let current = listeners(shared);
    let mut typed: Option<Event> = None;
    for listener in current {
        // A panicking listener must not stop delivery to the others.
        let _ = catch_unwind(AssertUnwindSafe(|| match &listener {
            Listener::Record(f) => f(&record),
            Listener::Typed(f) => f(typed.get_or_insert_with(|| Event::from(record.clone()))),
        }));
    }
}
