//! The field names of a point in each protocol of the heartbeat, written by the
//! heartbeat client (feature `heartbeat`) and read by the admin console: one table,
//! so that the two never spell a field differently.
//!
//! The runtime (`src/heartbeat/fields.rs`) and the admin console (`src/fields.rs`)
//! each keep this file; the workspace's `checks` crate tests that the copies are
//! equal.

/// The names of one point's fields in one protocol of the heartbeat. A field that is
/// `None` is not part of that protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PointFields {
    /// The point's name.
    pub(crate) name: &'static str,
    /// Calls that asked the point, in the cycle.
    pub(crate) visits: &'static str,
    /// Calls that ran.
    pub(crate) passes: Option<&'static str>,
    /// Calls refused.
    pub(crate) downgrades: &'static str,
    /// Calls that failed.
    pub(crate) exceptions: &'static str,
    /// Calls slower than the timeouts rule's threshold, and calls cut at their deadline.
    pub(crate) timeouts: &'static str,
    /// Calls whose future was dropped.
    pub(crate) cancelled: &'static str,
    /// The `#[retry]` counters (an object).
    pub(crate) retry: &'static str,
    /// The queue's counters (an object).
    pub(crate) queue: &'static str,
    /// The most calls in flight at once.
    pub(crate) concurrency: &'static str,
    /// Downgrades per reason (an object).
    pub(crate) reasons: &'static str,
    /// The cycle's per-second counts.
    pub(crate) seconds: &'static str,
    /// The per-second downgrades per reason.
    pub(crate) seconds_by_reason: &'static str,
    /// The per-second call durations.
    pub(crate) durations: &'static str,
    /// The point's busiest keys.
    pub(crate) hot_keys: Option<&'static str>,
    /// The point's key table counters.
    pub(crate) key_table: Option<&'static str>,
}

impl PointFields {
    /// Every name of the protocol, in declaration order.
    // Read by the console (its copy of this file) and the tests, not the client.
    #[allow(dead_code)]
    pub(crate) fn all(&self) -> Vec<&'static str> {
        let mut all = vec![self.name, self.visits];
        all.extend(self.passes);
        all.extend([
            self.downgrades,
            self.exceptions,
            self.timeouts,
            self.cancelled,
            self.retry,
            self.queue,
            self.concurrency,
            self.reasons,
            self.seconds,
            self.seconds_by_reason,
            self.durations,
        ]);
        all.extend(self.hot_keys);
        all.extend(self.key_table);
        all
    }
}

/// A point's fields in the JSON protocol (`POST /api/v1/heartbeat`).
pub(crate) const JSON_POINT: PointFields = PointFields {
    name: "name",
    visits: "visits",
    passes: Some("passes"),
    downgrades: "downgrades",
    exceptions: "exceptions",
    timeouts: "timeouts",
    cancelled: "cancelled",
    retry: "retry",
    queue: "queue",
    concurrency: "peak_concurrency",
    reasons: "downgrades_by_reason",
    seconds: "seconds",
    seconds_by_reason: "seconds_by_reason",
    durations: "seconds_durations",
    hot_keys: Some("hot_keys"),
    key_table: Some("key_table"),
};

/// A point's fields in SDS's protocol (its form-encoded upload).
pub(crate) const SDS_POINT: PointFields = PointFields {
    name: "point",
    visits: "visitNum",
    passes: None,
    downgrades: "downgradeNum",
    exceptions: "exceptionNum",
    timeouts: "timeoutNum",
    cancelled: "cancelledNum",
    retry: "retry",
    queue: "queue",
    concurrency: "concurrentNum",
    reasons: "downgradeReasons",
    seconds: "seconds",
    seconds_by_reason: "secondsByReason",
    durations: "secondsDurations",
    hot_keys: None,
    key_table: None,
};

#[cfg(test)]
mod tests {
    use super::{JSON_POINT, SDS_POINT};

    #[test]
    fn each_protocol_spells_its_fields() {
        assert_eq!(
            (JSON_POINT.visits, SDS_POINT.visits),
            ("visits", "visitNum")
        );
        assert_eq!(JSON_POINT.passes, Some("passes"));
        assert_eq!(
            SDS_POINT.passes, None,
            "SDS has no passes: visits - downgrades"
        );
    }
}
