//! What a point reports: downgrades to its counters and listeners, breaker changes to
//! its listeners and `tracing`.

use crate::breaker::Transition;
use crate::clock::Instant;
use crate::point::form::keys::KeyArg;
use crate::point::form::slots::classic_state;
use crate::point::Point;
use crate::sync::Ordering;
use crate::{BreakerChange, DowngradeEvent, Downgraded, Reason};

impl Point {
    pub(in crate::point) fn classic_changed(&self, t: Transition) {
        self.breaker_changed(
            t.at.as_nanos(),
            BreakerChange {
                from: classic_state(t.from),
                to: classic_state(t.to),
                cause: Some(t.reason),
            },
        );
    }

    pub(in crate::point) fn breaker_changed(&self, now: u64, change: BreakerChange) {
        if let Some(slot) = self.compiled().breaker {
            let slot = slot.0;
            slot.changed_at.store(now, Ordering::Relaxed);
        }
        self.counters
            .breaker_transitions
            .fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        tracing::info!(
            point = self.name,
            from = change.from.as_str(),
            to = change.to.as_str(),
            cause = ?change.cause,
            "resilience: breaker state changed"
        );
        if self.events.has_listeners() {
            self.send(DowngradeEvent {
                point: self.name,
                reason: Reason::BreakerOpen,
                delay_cause: None,
                time: self.clock.system_time(Instant::from_nanos(now)),
                breaker: Some(change),
                shadow: false,
                key: None,
            });
        }
    }

    pub(in crate::point) fn send(&self, event: DowngradeEvent) {
        if !self.events.emit(event) {
            self.counters.dropped_events.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a downgrade and reports it to the listeners.
    pub(in crate::point) fn downgrade(&self, reason: Reason, now: u64, shadow: bool) -> Downgraded {
        self.downgrade_keyed(reason, None, now, shadow)
    }

    /// [`downgrade`](Self::downgrade) of a call with a key.
    pub(in crate::point) fn downgrade_keyed(
        &self,
        reason: Reason,
        key: Option<&KeyArg<'_>>,
        now: u64,
        shadow: bool,
    ) -> Downgraded {
        self.counters.downgrades.fetch_add(1, Ordering::Relaxed);
        self.counters.reason_cells().downgrades[reason.index()].fetch_add(1, Ordering::Relaxed);
        self.event_keyed(reason, key, now, shadow);
        Downgraded {
            point: self.name,
            reason,
        }
    }

    /// Reports a downgraded call (of `key`, which the event names, cut at
    /// [`KEY_TEXT_MAX`](crate::keys::KEY_TEXT_MAX) bytes).
    #[inline]
    pub(in crate::point) fn event_keyed(
        &self,
        reason: Reason,
        key: Option<&KeyArg<'_>>,
        now: u64,
        shadow: bool,
    ) {
        // Downgrades can come by the thousand per second: debug level.
        #[cfg(feature = "tracing")]
        tracing::debug!(
            point = self.name,
            reason = reason.as_str(),
            shadow,
            key = key.map(|k| crate::keys::KeyText::of(k.text).to_display()),
            "resilience: call downgraded"
        );
        if self.events.has_listeners() {
            let delay_cause = if reason == Reason::Delay {
                Reason::from_index(self.delay.cause())
            } else {
                None
            };
            self.send(DowngradeEvent {
                point: self.name,
                reason,
                delay_cause,
                time: self.clock.system_time(Instant::from_nanos(now)),
                breaker: None,
                shadow,
                key: key.map(|k| crate::keys::KeyText::of(k.text).to_display()),
            });
        }
    }
}
