//! Downgrade listeners: events are handed to a bounded queue and delivered on a
//! dedicated thread, so a slow or panicking listener never touches a guarded call.

use crate::breaker::TransitionReason;
use crate::error::Reason;
use crate::stats::BreakerState;
use crate::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use crate::sync::{Arc, Mutex, OnceLock, RwLock};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::SystemTime;

/// How many events may wait for delivery before new ones are dropped (and counted).
pub const EVENT_QUEUE_CAPACITY: usize = 4096;

/// A call was downgraded, or a breaker changed state. Seen by every listener added
/// with [`Registry::add_listener`](crate::Registry::add_listener).
///
/// Breaker state changes carry [`breaker`](DowngradeEvent::breaker) and the reason
/// [`Reason::BreakerOpen`]; every other event is one downgraded call.
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
}

/// A state change of a point's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerChange {
    /// The state left.
    pub from: BreakerState,
    /// The state entered.
    pub to: BreakerState,
    /// Why, for the classic breaker (the SRE breaker starts and stops dropping by its
    /// formula).
    pub cause: Option<TransitionReason>,
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

type Listener = Arc<dyn Fn(&DowngradeEvent) + Send + Sync>;

pub(crate) struct Dispatcher {
    /// Number of listeners: the hot path reads only this.
    count: AtomicUsize,
    listeners: Arc<RwLock<Vec<(ListenerId, Listener)>>>,
    sender: OnceLock<SyncSender<DowngradeEvent>>,
    start: Mutex<()>,
    dropped: AtomicU64,
    delivered: Arc<AtomicU64>,
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
            listeners: Arc::new(RwLock::new(Vec::new())),
            sender: OnceLock::new(),
            start: Mutex::new(()),
            dropped: AtomicU64::new(0),
            delivered: Arc::new(AtomicU64::new(0)),
        }
    }

    #[inline]
    pub(crate) fn has_listeners(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    pub(crate) fn add(&self, f: Listener) -> ListenerId {
        self.ensure_thread();
        let id = ListenerId::fresh();
        let mut list = self.listeners.write().unwrap_or_else(|e| e.into_inner());
        list.push((id, f));
        self.count.store(list.len(), Ordering::Release);
        id
    }

    pub(crate) fn remove(&self, id: ListenerId) -> bool {
        let mut list = self.listeners.write().unwrap_or_else(|e| e.into_inner());
        let before = list.len();
        list.retain(|(i, _)| *i != id);
        self.count.store(list.len(), Ordering::Release);
        list.len() != before
    }

    /// Queues an event; never blocks. Returns false if it was dropped.
    pub(crate) fn emit(&self, event: DowngradeEvent) -> bool {
        let Some(tx) = self.sender.get() else {
            return false;
        };
        match tx.try_send(event) {
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
        self.delivered.load(Ordering::Acquire)
    }

    fn ensure_thread(&self) {
        if self.sender.get().is_some() {
            return;
        }
        let _once = self.start.lock().unwrap_or_else(|e| e.into_inner());
        if self.sender.get().is_some() {
            return;
        }
        let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE_CAPACITY);
        let listeners = Arc::clone(&self.listeners);
        let delivered = Arc::clone(&self.delivered);
        let spawned = std::thread::Builder::new()
            .name("resilience-events".into())
            .spawn(move || deliver(rx, listeners, delivered));
        if spawned.is_ok() {
            let _ = self.sender.set(tx);
        }
    }
}

fn deliver(
    rx: Receiver<DowngradeEvent>,
    listeners: Arc<RwLock<Vec<(ListenerId, Listener)>>>,
    delivered: Arc<AtomicU64>,
) {
    while let Ok(event) = rx.recv() {
        let current: Vec<Listener> = listeners
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, l)| Arc::clone(l))
            .collect();
        for listener in current {
            // A panicking listener must not stop delivery to the others.
            let _ = catch_unwind(AssertUnwindSafe(|| listener(&event)));
        }
        delivered.fetch_add(1, Ordering::Release);
    }
}
