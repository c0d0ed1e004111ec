//! Statistics of a point: exact totals, the current sliding window and the last closed
//! wall-clock cycle.

use crate::error::Reason;
use std::time::{Duration, SystemTime};

/// The length of a statistics cycle: 10 s, aligned to wall-clock boundaries like SDS.
/// [`PointStats::last_cycle`] is the last one closed; the heartbeat reports one per
/// upload and the admin console stores them by their start.
///
/// ```
/// assert_eq!(resilience_runtime::CYCLE.as_secs(), 10);
/// ```
pub const CYCLE: Duration = Duration::from_secs(10);

/// [`CYCLE`] in milliseconds (the heartbeat's unit).
#[cfg(feature = "heartbeat")]
pub(crate) const CYCLE_MS: u64 = CYCLE.as_millis() as u64;

/// Downgrade counts per [`Reason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReasonCounts(pub(crate) [u64; Reason::ALL.len()]);

impl ReasonCounts {
    /// The count for one reason.
    pub fn get(&self, reason: Reason) -> u64 {
        // `Reason::Deadline` is not a refusal: no count.
        self.0.get(reason.index()).copied().unwrap_or(0)
    }

    /// Every reason with its count, in [`Reason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        Reason::ALL.iter().map(move |r| (*r, self.get(*r)))
    }

    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Exact counts since the point was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Calls that asked to run, downgraded ones included.
    pub visits: u64,
    /// Calls that ran (`visits - downgrades`).
    pub passes: u64,
    /// Calls that were downgraded.
    pub downgrades: u64,
    /// Calls that returned a counted `Err` or panicked.
    pub exceptions: u64,
    /// Calls slower than the timeout threshold (measured only under a timeout rule),
    /// and calls cut at their deadline (`timeout = "..."`, `call_timeout`).
    pub timeouts: u64,
    /// Calls that ran and never reported an outcome: an async call whose future was
    /// dropped by its caller, a [`Permit`](crate::Permit) dropped without `finish`.
    /// `passes` = successes + `exceptions` + `cancelled` + calls that only timed out.
    pub cancelled: u64,
    /// Downgrades per reason.
    pub downgrades_by_reason: ReasonCounts,
}

/// Counts in the current sliding window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowCounts {
    /// Calls that asked to run, downgraded ones included.
    pub visits: u64,
    /// Calls that ran.
    pub passes: u64,
    /// Calls that were downgraded.
    pub downgrades: u64,
    /// Exceptions recorded.
    pub exceptions: u64,
    /// Timeouts recorded.
    pub timeouts: u64,
    /// Cancelled calls (see [`Totals::cancelled`]).
    pub cancelled: u64,
}

/// Counts of the last closed 10-second cycle, aligned to wall-clock boundaries like
/// SDS's statistics cycles (for heartbeat and metrics exporters).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CycleStats {
    /// Wall-clock start of the cycle.
    pub start: SystemTime,
    /// Calls that asked to run, downgraded ones included.
    pub visits: u64,
    /// Calls that ran.
    pub passes: u64,
    /// Calls that were downgraded.
    pub downgrades: u64,
    /// Exceptions recorded.
    pub exceptions: u64,
    /// Timeouts recorded.
    pub timeouts: u64,
    /// Cancelled calls (see [`Totals::cancelled`]).
    pub cancelled: u64,
    /// The most calls in flight at once during the cycle.
    pub peak_concurrency: u64,
    /// Downgrades per reason.
    pub downgrades_by_reason: ReasonCounts,
}

impl Default for CycleStats {
    fn default() -> Self {
        CycleStats {
            start: SystemTime::UNIX_EPOCH,
            visits: 0,
            passes: 0,
            downgrades: 0,
            exceptions: 0,
            timeouts: 0,
            cancelled: 0,
            peak_concurrency: 0,
            downgrades_by_reason: ReasonCounts::default(),
        }
    }
}

/// The traffic of one wall-clock second of a point, from its per-second series
/// ([`Point::seconds`](crate::Point::seconds)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SecondStats {
    /// Start of the second (wall clock).
    pub start: SystemTime,
    /// Calls that asked to run, downgraded ones included.
    pub visits: u64,
    /// Calls that ran.
    pub passes: u64,
    /// Calls that were downgraded.
    pub downgrades: u64,
    /// Exceptions recorded.
    pub exceptions: u64,
    /// Timeouts recorded.
    pub timeouts: u64,
    /// Cancelled calls (see [`Totals::cancelled`]).
    pub cancelled: u64,
    /// Downgrades per reason.
    pub downgrades_by_reason: ReasonCounts,
    /// Calls whose duration was measured that ended in the second: while
    /// [`measure_durations`](crate::measure_durations) is on, every call admitted
    /// that finished or panicked (cancelled calls have no duration).
    pub measured: u64,
    /// The mean duration of the measured calls, in whole microseconds (`None` if
    /// there were none).
    pub mean_duration: Option<Duration>,
    /// The longest measured call, in whole microseconds (`None` if there were none).
    pub max_duration: Option<Duration>,
}

/// The state of a point's breaker, as shown in stats and events. The SRE breaker has
/// no states of its own: it is [`Open`](BreakerState::Open) while it is dropping calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls pass.
    Closed,
    /// Calls are rejected (SRE: some calls are being dropped).
    Open,
    /// A few probe calls run (classic breaker only).
    HalfOpen,
}

impl BreakerState {
    /// A stable lowercase name, used in metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Statistics of a point's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerStats {
    /// `"sre"` or `"classic"`.
    pub kind: &'static str,
    /// The current state.
    pub state: BreakerState,
    /// Successful calls in the breaker's window.
    pub window_successes: u64,
    /// Failed calls in the breaker's window.
    pub window_failures: u64,
    /// Rejected calls in the breaker's window (SRE only; the classic breaker does not
    /// keep them in its window).
    pub window_drops: Option<u64>,
    /// State changes so far.
    pub transitions: u64,
    /// Since when the breaker is in its current state (its last change, or when it
    /// was installed).
    pub since: SystemTime,
}

/// A snapshot of one point's statistics, from [`Registry::stats`](crate::Registry::stats).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PointStats {
    /// The point's name.
    pub name: &'static str,
    /// Exact totals.
    pub totals: Totals,
    /// The last 10 s: exact under a policy with a rule on the window or the calls in
    /// flight (visits, concurrency, queue, exceptions, exception rate, timeouts,
    /// delay); otherwise from the per-second series, and `None` until its first
    /// sample.
    pub window: Option<WindowCounts>,
    /// The last closed 10 s cycle, exact or from the series as `window` is.
    pub last_cycle: Option<CycleStats>,
    /// Calls in flight now, tracked under a policy with a rule on the window or the
    /// calls in flight (see `window`); 0 otherwise: a point pays only for what its
    /// policy uses (per-key limits count their own calls in flight).
    pub concurrency: u64,
    /// The most calls ever in flight at once (tracked as `concurrency` is).
    pub peak_concurrency: u64,
    /// Whether the point is inside a downgrade delay.
    pub in_delay: bool,
    /// Downgrade events of this point dropped because the listener queue was full.
    pub dropped_events: u64,
    /// Calls a shadow (dry-run) policy would have downgraded, per reason; they ran.
    pub shadow_downgrades_by_reason: ReasonCounts,
    /// The breaker, if the point has one.
    pub breaker: Option<BreakerStats>,
    /// What [`Point::call_retrying`](crate::Point::call_retrying) did on this point.
    pub retry: crate::retry::RetryStats,
    /// The queue (of the concurrency rule or the adaptive limit), once a call waited
    /// or found it full (see
    /// [`PolicyBuilder::queue`](crate::PolicyBuilder::queue)).
    pub queue: Option<QueueStats>,
    /// Under a policy with a [`keys`](crate::PolicyBuilder::keys) section, its busiest
    /// keys (at most [`STATS_HOT_KEYS`](crate::keys::STATS_HOT_KEYS), as
    /// [`Point::hot_keys`](crate::Point::hot_keys) gives them); empty otherwise.
    pub hot_keys: Vec<crate::keys::HotKeyStats>,
    /// Under a policy with a `keys` section, once a call had a key: its table's
    /// totals ([`Point::key_stats`](crate::Point::key_stats)).
    pub key_table: Option<crate::keys::KeyTableStats>,
}

/// What a point's queue did, since the point was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Calls waiting now.
    pub waiting: u64,
    /// The most calls ever waiting at once.
    pub peak_waiting: u64,
    /// Waits that ended with a slot (the call then ran).
    pub admitted: u64,
    /// Waits that ran out ([`Reason::QueueTimeout`]).
    pub timed_out: u64,
    /// Waits whose caller gave up (an async call's future dropped while it waited):
    /// neither a pass nor a downgrade, the call never began.
    pub cancelled: u64,
    /// Waits ended by another rule when the waiter asked again (counted as that
    /// rule's downgrade).
    pub refused: u64,
    /// Calls refused at once because the queue was full ([`Reason::QueueFull`]).
    pub full: u64,
    /// Waiters taken out of a full queue by a call of a higher tier
    /// ([`Priority`](crate::priority::Priority)) or, in a queue served
    /// [newest first](crate::QueueOrder::NewestFirst), of the same tier; refused with
    /// [`Reason::QueueFull`].
    pub evicted: u64,
    /// The total time waited by the waits that ended.
    pub wait: Duration,
    /// The longest wait that ended.
    pub max_wait: Duration,
}

impl QueueStats {
    /// The mean wait of the waits that ended, if any did.
    pub fn mean_wait(&self) -> Option<Duration> {
        let ended = self.admitted + self.timed_out + self.cancelled + self.refused + self.evicted;
        (ended > 0).then(|| Duration::from_nanos(crate::util::nanos(self.wait) / ended))
    }
}
