//! The data the server stores and serves: apps, heartbeats, statistics cycles,
//! instances and policy versions.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Length of a statistics cycle in milliseconds: the runtime's
/// [`CYCLE`](resilience_runtime::CYCLE), 10 s aligned to wall-clock boundaries as in SDS.
pub const CYCLE_MS: i64 = resilience_runtime::CYCLE.as_millis() as i64;

/// The largest count one instance may report for one point in one cycle (10^15, far
/// above any real traffic): larger values are rejected so that sums over instances
/// and cycles never overflow the database's 64-bit integers.
pub const MAX_COUNT: u64 = 1_000_000_000_000_000;

/// The longest app group, app, instance, host or point name accepted, in bytes: the
/// runtime's own limit for point names, so a point the runtime takes is never refused.
pub const MAX_NAME_LEN: usize = resilience_runtime::MAX_POINT_NAME_LEN;

/// The most points one heartbeat may carry.
pub const MAX_POINTS_PER_HEARTBEAT: usize = 10_000;

/// The most parts one cycle of an instance may be split into (`"parts"` of our JSON
/// protocol): a cycle of [`MAX_POINTS_PER_HEARTBEAT`] points in bodies of a few KiB
/// stays far below it.
pub const MAX_PARTS: u32 = 1000;

/// The longest `local` settings of one point in a heartbeat's `enforcing` list, in
/// bytes of compact JSON: far above any real point's settings.
pub const MAX_LOCAL_BYTES: usize = 16 * 1024;

/// The longest source name (`file:<path>`) accepted in an origin, in bytes.
pub const MAX_SOURCE_LEN: usize = 1024;

/// Error texts of a client's health are cut to this many bytes.
pub const MAX_ERROR_LEN: usize = 1024;

/// The most hot keys one point of a heartbeat may carry (the runtime sends its ten
/// hottest, `Point::hot_keys(10)`).
pub const MAX_HOT_KEYS: usize = 10;

/// The longest hot key text accepted, in bytes (the runtime cuts a key's text at
/// [`KEY_TEXT_MAX`](resilience_runtime::keys::KEY_TEXT_MAX) bytes and a `…`).
pub const MAX_KEY_TEXT_LEN: usize = 64;

/// An application: its group and its name, as SDS identifies apps.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AppKey {
    /// The app group (SDS's `appGroupName`).
    pub group: String,
    /// The app name (SDS's `appName`).
    pub name: String,
}

impl AppKey {
    /// An app key.
    pub fn new(group: impl Into<String>, name: impl Into<String>) -> AppKey {
        AppKey {
            group: group.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for AppKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.group, self.name)
    }
}

/// Which protocol an instance spoke to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// SDS's form-encoded protocol (`/sds/heartbeat/...`).
    Sds,
    /// This server's JSON API (`/api/v1/...`).
    Json,
}

impl Protocol {
    /// A stable lowercase name (`"sds"`, `"json"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Sds => "sds",
            Protocol::Json => "json",
        }
    }
}

/// One point's counts in one cycle, as reported by one instance (or, when read back,
/// summed over every instance of the app).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointCycle {
    /// The point's name.
    pub point: String,
    /// Calls that asked to run, downgraded ones included.
    pub visits: u64,
    /// Calls that ran.
    pub passes: u64,
    /// Calls that were downgraded.
    pub downgrades: u64,
    /// Calls that failed.
    pub exceptions: u64,
    /// Calls slower than the point's timeout threshold.
    pub timeouts: u64,
    /// Calls that did not finish: their future was dropped, or their permit dropped
    /// before they ended (0 from older clients and SDS's own).
    pub cancelled: u64,
    /// The most calls in flight at once (read back: the sum of the instances' peaks,
    /// an upper bound of the app-wide peak).
    pub peak_concurrency: u64,
    /// Downgrades per reason (`visits`, `concurrency`, ...); reasons with no
    /// downgrade may be left out.
    pub downgrades_by_reason: BTreeMap<String, u64>,
    /// The cycle's ten 1-second buckets, if the instance sent them (this project's
    /// client does; older clients and SDS's own do not). Never read back with the
    /// cycle: the seconds are read with [`Store::seconds`](crate::store::Store::seconds).
    #[serde(skip)]
    pub seconds: Option<CycleSeconds>,
    /// What the point's retrying calls did in the cycle (all 0 when it made none, and
    /// from older clients).
    pub retry: RetryCounts,
    /// What the point's concurrency queue did in the cycle; `None` when no instance
    /// reported one (the point has no queue, its queue did nothing, or older clients).
    pub queue: Option<QueueCounts>,
    /// The point's hottest keys and its key table as the instance reported them with
    /// the cycle (this project's JSON protocol only); `None` when it sent neither.
    /// Not a figure of the cycle: stored as the instance's latest, never read back
    /// with the cycle (see [`Store::hot_keys`](crate::store::Store::hot_keys)).
    #[serde(skip)]
    pub keys: Option<PointKeys>,
}

/// One of a point's hottest keys: its calls admitted and refused by the key's rule
/// since the instance tracks it (running totals, not a cycle's), as an instance
/// reported them or, read back, summed over the app's live instances.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotKey {
    /// The key's text (at most [`MAX_KEY_TEXT_LEN`] bytes, no control character).
    pub key: String,
    /// Calls the key's rule admitted.
    pub passes: u64,
    /// Calls the key's rule refused (downgraded as `hot_key`).
    pub refused: u64,
    /// Whether the value has an override in the point's `keys` section.
    pub overridden: bool,
}

/// The totals of a point's key table (running totals of the instance, or summed over
/// the app's live instances).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyTableCounts {
    /// Keys tracked exactly now.
    pub tracked: u64,
    /// Calls of untracked keys admitted.
    pub untracked_passes: u64,
    /// Calls of untracked keys refused.
    pub untracked_refused: u64,
    /// Keys that took the entry of a colder one.
    pub evictions: u64,
}

impl KeyTableCounts {
    /// Adds another instance's totals.
    pub fn merge(&mut self, other: &KeyTableCounts) {
        self.tracked = self.tracked.saturating_add(other.tracked);
        self.untracked_passes = self.untracked_passes.saturating_add(other.untracked_passes);
        self.untracked_refused = self
            .untracked_refused
            .saturating_add(other.untracked_refused);
        self.evictions = self.evictions.saturating_add(other.evictions);
    }
}

/// A point's hottest keys (at most [`MAX_HOT_KEYS`], the hottest first) and its key
/// table, as one heartbeat carried them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointKeys {
    /// The keys.
    pub hot_keys: Vec<HotKey>,
    /// The key table's totals, if the instance sent them.
    pub key_table: Option<KeyTableCounts>,
}

impl PointKeys {
    /// The keys of several instances' reports as one: each key's passes and refusals
    /// summed (overridden if any instance overrides it), the hottest
    /// [`MAX_HOT_KEYS`] kept (most calls first, then by key), and the key tables
    /// summed.
    pub fn merged<'a>(reports: impl IntoIterator<Item = &'a PointKeys>) -> PointKeys {
        let mut keys: BTreeMap<&str, HotKey> = BTreeMap::new();
        let mut table: Option<KeyTableCounts> = None;
        for r in reports {
            for k in &r.hot_keys {
                let e = keys.entry(k.key.as_str()).or_insert_with(|| HotKey {
                    key: k.key.clone(),
                    passes: 0,
                    refused: 0,
                    overridden: false,
                });
                e.passes = e.passes.saturating_add(k.passes);
                e.refused = e.refused.saturating_add(k.refused);
                e.overridden |= k.overridden;
            }
            if let Some(t) = &r.key_table {
                table.get_or_insert_with(KeyTableCounts::default).merge(t);
            }
        }
        let mut hot_keys: Vec<HotKey> = keys.into_values().collect();
        hot_keys.sort_by(|a, b| {
            let calls = |k: &HotKey| k.passes.saturating_add(k.refused);
            calls(b).cmp(&calls(a)).then_with(|| a.key.cmp(&b.key))
        });
        hot_keys.truncate(MAX_HOT_KEYS);
        PointKeys {
            hot_keys,
            key_table: table,
        }
    }
}

/// One instance's latest hot keys of a point, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKeysRow {
    /// The instance.
    pub instance: String,
    /// The point.
    pub point: String,
    /// Its keys and key table.
    pub keys: PointKeys,
    /// The cycle of the heartbeat that carried them.
    pub cycle_start_ms: i64,
    /// When the server received them, ms since the Unix epoch.
    pub received_ms: i64,
}

/// The retry counters of one point in one cycle, as an instance reported them (the
/// growth since its previous report), or summed over instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryCounts {
    /// Calls made through the point's retrying call.
    pub calls: u64,
    /// Attempts in all (first attempts and retries).
    pub attempts: u64,
    /// Retries made.
    pub retries: u64,
    /// Calls that failed on their last attempt.
    pub exhausted: u64,
    /// Retries the retry budget refused (the call returned its last error).
    pub refused_by_budget: u64,
    /// Hedged attempts started (0 from clients that do not hedge).
    pub hedges: u64,
    /// Attempts cancelled: a losing hedge, or the call dropped while retrying (0 from
    /// clients that do not say).
    pub cancelled: u64,
}

impl RetryCounts {
    /// The counters in the order the stores keep them: calls, attempts, retries,
    /// exhausted, refused by budget, hedges, cancelled.
    pub fn to_array(&self) -> [u64; 7] {
        [
            self.calls,
            self.attempts,
            self.retries,
            self.exhausted,
            self.refused_by_budget,
            self.hedges,
            self.cancelled,
        ]
    }

    /// The counters back from [`to_array`](RetryCounts::to_array)'s order.
    pub fn from_array(
        [calls, attempts, retries, exhausted, refused_by_budget, hedges, cancelled]: [u64; 7],
    ) -> RetryCounts {
        RetryCounts {
            calls,
            attempts,
            retries,
            exhausted,
            refused_by_budget,
            hedges,
            cancelled,
        }
    }

    /// Whether every counter is 0.
    pub fn is_zero(&self) -> bool {
        *self == RetryCounts::default()
    }
}

/// The concurrency queue of one point in one cycle, as an instance reported it, or
/// summed over instances (counts, `waiting` and `wait_ns` summed, `peak_waiting` and
/// `max_wait_ns` the largest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    /// Calls waiting at the end of the cycle.
    pub waiting: u64,
    /// The most calls ever waiting at once (since the instance started).
    pub peak_waiting: u64,
    /// Waits that ended with a slot (the call then ran).
    pub admitted: u64,
    /// Waits that ran out of time (downgraded as `queue_timeout`).
    pub timed_out: u64,
    /// Waits whose caller gave up (an async call dropped while it waited).
    pub cancelled: u64,
    /// Waits ended by another rule when the waiter asked again.
    pub refused: u64,
    /// Calls refused at once because the queue was full (downgraded as
    /// `queue_full`).
    pub full: u64,
    /// Waiters taken out of a full queue by a call of a higher priority (0 from
    /// older clients).
    #[serde(default)]
    pub evicted: u64,
    /// The total time waited by the waits that ended in the cycle, in nanoseconds.
    pub wait_ns: u64,
    /// The longest wait that ended in the cycle, in nanoseconds.
    pub max_wait_ns: u64,
}

impl QueueCounts {
    /// The counters in the order the stores keep them: waiting, peak waiting,
    /// admitted, timed out, cancelled, refused, full, wait ns, max wait ns, evicted
    /// (the last added by schema version 8).
    pub fn to_array(&self) -> [u64; 10] {
        [
            self.waiting,
            self.peak_waiting,
            self.admitted,
            self.timed_out,
            self.cancelled,
            self.refused,
            self.full,
            self.wait_ns,
            self.max_wait_ns,
            self.evicted,
        ]
    }

    /// The counters back from [`to_array`](QueueCounts::to_array)'s order.
    pub fn from_array(
        [waiting, peak_waiting, admitted, timed_out, cancelled, refused, full, wait_ns, max_wait_ns, evicted]: [u64; 10],
    ) -> QueueCounts {
        QueueCounts {
            waiting,
            peak_waiting,
            admitted,
            timed_out,
            cancelled,
            refused,
            full,
            evicted,
            wait_ns,
            max_wait_ns,
        }
    }

    /// Whether the counter at `i` of [`to_array`](QueueCounts::to_array) is the
    /// largest over instances rather than their sum (`peak_waiting`, `max_wait_ns`).
    pub const fn is_max(i: usize) -> bool {
        i == 1 || i == 8
    }

    /// `other` added in: counts summed, the peak and the longest wait the largest.
    pub fn merge(&mut self, other: &QueueCounts) {
        let mut a = self.to_array();
        for (i, (x, y)) in a.iter_mut().zip(other.to_array()).enumerate() {
            *x = if QueueCounts::is_max(i) {
                (*x).max(y)
            } else {
                x.saturating_add(y)
            };
        }
        *self = QueueCounts::from_array(a);
    }

    /// Waits that ended in the cycle (admitted, timed out, cancelled, refused or
    /// evicted).
    pub fn ended(&self) -> u64 {
        self.admitted + self.timed_out + self.cancelled + self.refused + self.evicted
    }
}

/// A validated heartbeat: the statistics of one closed cycle of one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The reporting app.
    pub app: AppKey,
    /// The reporting instance's id (unique per process).
    pub instance: String,
    /// The instance's host name.
    pub host: String,
    /// The instance's IP address, as it reported it.
    pub ip: String,
    /// The protocol it used.
    pub protocol: Protocol,
    /// Wall-clock start of the reported cycle, in ms since the Unix epoch (a multiple
    /// of [`CYCLE_MS`]).
    pub cycle_start_ms: i64,
    /// The counts of every point with activity in the cycle.
    pub points: Vec<PointCycle>,
    /// Points that exist in the instance (created or declared), with or without
    /// traffic.
    pub known_points: Vec<String>,
    /// Points declared by annotated functions of the instance's program.
    pub declared_points: Vec<String>,
    /// The policy version the instance holds, if it said.
    pub policy_version: Option<u64>,
    /// What the instance enforces, per point with a setting or a breaker; `None` if
    /// the heartbeat did not say (older clients, SDS's own).
    pub enforcing: Option<Vec<Enforcing>>,
    /// The heartbeat client's own health; `None` if the heartbeat did not say.
    pub client: Option<ClientHealth>,
    /// Which part of the instance's cycle this body is, from 0 (a big cycle is sent
    /// in several bodies, each with its share of the points and lists).
    pub part: u32,
    /// How many parts the cycle has (1 when it is sent whole).
    pub parts: u32,
}

/// Where one section of a point's effective settings comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionOrigin {
    /// `code`, `file:<path>` or `console`.
    pub source: String,
    /// That source's version (for the console: the console's policy version).
    pub version: u64,
}

impl SectionOrigin {
    /// Whether the section comes from the console.
    pub fn is_console(&self) -> bool {
        self.source == "console"
    }

    /// The kind of the source: `code`, `file` or `console`.
    pub fn kind(&self) -> &str {
        if self.source.starts_with("file:") {
            "file"
        } else {
            &self.source
        }
    }
}

/// A point's breaker as an instance reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerReport {
    /// `classic` or `sre`.
    pub kind: String,
    /// `closed`, `open` or `half_open`.
    pub state: String,
    /// Since when it is in that state, ms since the Unix epoch (the instance's clock).
    pub since_ms: i64,
    /// State changes so far.
    pub transitions: u64,
}

/// What one instance enforces for one point, as its last heartbeat said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcing {
    /// The point.
    pub point: String,
    /// The digest of the effective settings (16 hex digits, the runtime's
    /// `PointConfig::digest`), or `none` when no section is set.
    pub digest: String,
    /// Section (`rules`, `window`, `shadow`, `adaptive`, `cluster`, `breaker`,
    /// `retry`, `keys`) -> where it comes from; sections no source sets are absent.
    pub origins: BTreeMap<String, SectionOrigin>,
    /// The settings of the sections that do not come from the console, in the policy
    /// file's JSON form for one point; `None` when every section comes from the
    /// console (or when read without it).
    pub local: Option<serde_json::Value>,
    /// The point's breaker, if it has one.
    pub breaker: Option<BreakerReport>,
}

/// A heartbeat client's own health, as it reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHealth {
    /// The error of its previous upload, if that failed.
    pub last_upload_error: Option<String>,
    /// The error of its last pull, if that failed.
    pub last_pull_error: Option<String>,
    /// Whether the console policies it holds come from its cache file (no pull has
    /// succeeded since it started).
    pub from_cache: bool,
    /// Cycles it dropped because their upload failed.
    pub uploads_dropped: u64,
    /// Pulls that failed.
    pub pull_failures: u64,
    /// Policy versions its loader refused.
    pub policies_rejected: u64,
}

/// One stored enforcement report: an instance's latest [`Enforcing`] entry for a
/// point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnforcementRow {
    /// The instance.
    pub instance: String,
    /// What it enforces (`local` is `None` when read without it).
    pub entry: Enforcing,
    /// Whether the entry has local settings (also when read without them).
    pub has_local: bool,
    /// The cycle of the heartbeat that carried it.
    pub cycle_start_ms: i64,
    /// When the server received it, ms since the Unix epoch.
    pub received_ms: i64,
}

/// What storing a heartbeat did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingested {
    /// The cycle (or this part of it) was added to the app's statistics.
    Stored,
    /// This instance had already reported this part of this cycle (a retry whose
    /// first answer was lost): nothing was counted twice.
    Duplicate,
}

/// One point's statistics for one cycle, summed over the app's instances.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CycleRow {
    /// Wall-clock start of the cycle, ms since the Unix epoch.
    pub cycle_start_ms: i64,
    /// The counts, summed over instances.
    #[serde(flatten)]
    pub counts: PointCycle,
    /// How many instances reported this point in this cycle.
    pub instances: u64,
}

// ---- the live view: 1-second buckets ----

/// Length of a second bucket in milliseconds.
pub const SECOND_MS: i64 = 1_000;

/// The 1-second buckets of a cycle.
pub const SECONDS_PER_CYCLE: usize = 10;

/// The most downgrade reasons a point's `seconds_by_reason` may list (the runtime
/// has 11).
pub const MAX_SECOND_REASONS: usize = 32;

/// The counts of one 1-second bucket of one point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecondCounts {
    /// Calls that asked to run, downgraded ones included.
    pub visits: u64,
    /// Calls that ran.
    pub passes: u64,
    /// Calls that were downgraded.
    pub downgrades: u64,
    /// Calls that failed.
    pub exceptions: u64,
    /// Calls slower than the point's timeout threshold.
    pub timeouts: u64,
    /// Calls whose duration was measured: those under a policy that ended in the
    /// second (0 when the instance measured none, and always from older clients).
    pub measured: u64,
    /// The sum of their durations, in microseconds.
    pub sum_us: u64,
    /// The longest of them, in microseconds (summed over instances or points: the
    /// longest of any).
    pub max_us: u64,
}

impl SecondCounts {
    /// Whether nothing happened in the second (no call counted or measured).
    pub fn is_zero(&self) -> bool {
        *self == SecondCounts::default()
    }

    /// The mean duration of the measured calls, in microseconds; `None` when none
    /// was measured.
    pub fn mean_us(&self) -> Option<f64> {
        (self.measured > 0).then(|| self.sum_us as f64 / self.measured as f64)
    }

    /// The longest measured call, in microseconds; `None` when none was measured.
    pub fn max_duration_us(&self) -> Option<u64> {
        (self.measured > 0).then_some(self.max_us)
    }
}

/// The ten 1-second buckets of one point's cycle, as one instance reported them:
/// index 0 is the second starting at the cycle's start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleSeconds {
    /// The counts of each second.
    pub seconds: [SecondCounts; SECONDS_PER_CYCLE],
    /// Downgrades of each second per reason, for the reasons the instance listed.
    pub downgrades_by_reason: BTreeMap<String, [u64; SECONDS_PER_CYCLE]>,
}

impl CycleSeconds {
    /// Whether second `k` has no count and no downgrade of any reason.
    pub fn is_empty_at(&self, k: usize) -> bool {
        self.seconds[k].is_zero() && self.downgrades_by_reason.values().all(|v| v[k] == 0)
    }
}

/// One point's (or, summed over points, the app's) counts of one second, summed over
/// the app's instances.
///
/// Serialized flat, the durations as `measured`, `sum_us`, `mean_us` and `max_us`
/// (the last two `null` when no call was measured).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecondRow {
    /// The point; `None` in rows summed over every point.
    pub point: Option<String>,
    /// Wall-clock start of the second, ms since the Unix epoch.
    pub second_start_ms: i64,
    /// The counts, summed over instances (and points); `max_us` is the longest call
    /// of any of them.
    pub counts: SecondCounts,
    /// Downgrades per reason; reasons without downgrades are left out.
    pub downgrades_by_reason: BTreeMap<String, u64>,
    /// How many instances had traffic of the point in this second (summed over
    /// points: the most of any point).
    pub instances: u64,
}

impl Serialize for SecondRow {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The row as the API shows it.
        #[derive(Serialize)]
        struct Flat<'a> {
            point: &'a Option<String>,
            second_start_ms: i64,
            visits: u64,
            passes: u64,
            downgrades: u64,
            exceptions: u64,
            timeouts: u64,
            measured: u64,
            sum_us: u64,
            mean_us: Option<f64>,
            max_us: Option<u64>,
            downgrades_by_reason: &'a BTreeMap<String, u64>,
            instances: u64,
        }
        let c = &self.counts;
        Flat {
            point: &self.point,
            second_start_ms: self.second_start_ms,
            visits: c.visits,
            passes: c.passes,
            downgrades: c.downgrades,
            exceptions: c.exceptions,
            timeouts: c.timeouts,
            measured: c.measured,
            sum_us: c.sum_us,
            mean_us: c.mean_us(),
            max_us: c.max_duration_us(),
            downgrades_by_reason: &self.downgrades_by_reason,
            instances: self.instances,
        }
        .serialize(serializer)
    }
}

/// An app as listed by the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AppSummary {
    /// The app group.
    pub group: String,
    /// The app name.
    pub name: String,
    /// The app's current policy version (0: no policy ever set).
    pub policy_version: u64,
    /// The last heartbeat or pull of any instance, ms since the Unix epoch.
    pub last_seen_ms: Option<i64>,
    /// Instances ever seen.
    pub instances: u64,
}

/// A point of an app as the server knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PointInfo {
    /// The point's name.
    pub name: String,
    /// Whether an instance reported it as declared by an annotated function.
    pub declared: bool,
    /// Whether the point has a policy in the current version.
    pub has_policy: bool,
    /// First heartbeat that mentioned it, ms since the Unix epoch.
    pub first_seen_ms: Option<i64>,
    /// Last heartbeat that mentioned it.
    pub last_seen_ms: Option<i64>,
    /// The latest stored cycle with traffic, if any is still kept.
    pub last_cycle: Option<CycleRow>,
}

/// An instance of an app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InstanceInfo {
    /// The instance id.
    pub instance: String,
    /// Its host name.
    pub host: String,
    /// Its IP address.
    pub ip: String,
    /// `"sds"` or `"json"`.
    pub protocol: String,
    /// Its last heartbeat, ms since the Unix epoch.
    pub last_heartbeat_ms: Option<i64>,
    /// Its last policy pull.
    pub last_pull_ms: Option<i64>,
    /// The policy version it last said it holds.
    pub policy_version: Option<u64>,
    /// Its heartbeat client's health as last reported; `None` if it never said
    /// (older clients, SDS's own).
    pub client: Option<ClientHealth>,
    /// When that health was received.
    pub client_reported_ms: Option<i64>,
}

/// One change between two policy documents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffEntry {
    /// The point concerned, or `None` for a top-level setting (`strict`).
    pub point: Option<String>,
    /// The field (`max_visits`, `timeouts.threshold`), or `None` when a whole point
    /// was added or removed.
    pub field: Option<String>,
    /// The value before, `None` if it was not set.
    pub old: Option<serde_json::Value>,
    /// The value after, `None` if it is no longer set.
    pub new: Option<serde_json::Value>,
}

/// A stored policy version.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyVersion {
    /// The version: 1 for the first, one more for every change.
    pub version: u64,
    /// Who made the change.
    pub author: String,
    /// When, ms since the Unix epoch.
    pub created_ms: i64,
    /// An optional note of the author.
    pub comment: String,
    /// The version this one restored, for a rollback.
    pub restored_from: Option<u64>,
    /// What changed against the previous version.
    pub diff: Vec<DiffEntry>,
    /// The whole policy document (the runtime's policy-file JSON).
    pub document: serde_json::Value,
}

/// A policy version to store on top of `base_version`.
#[derive(Clone, Debug, PartialEq)]
pub struct NewPolicyVersion {
    /// The version the change was made against; the store refuses the change if the
    /// app's current version is another one.
    pub base_version: u64,
    /// Who makes the change.
    pub author: String,
    /// When, ms since the Unix epoch.
    pub created_ms: i64,
    /// An optional note.
    pub comment: String,
    /// The version this one restores, for a rollback.
    pub restored_from: Option<u64>,
    /// What changed against `base_version`.
    pub diff: Vec<DiffEntry>,
    /// The whole policy document, canonical JSON.
    pub document: serde_json::Value,
}
