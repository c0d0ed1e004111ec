//! The data the server stores and serves: apps, heartbeats, statistics cycles,
//! instances and policy versions.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Length of a statistics cycle in milliseconds: 10 s, aligned to wall-clock
/// boundaries, as in the runtime and SDS.
pub const CYCLE_MS: i64 = 10_000;

/// The largest count one instance may report for one point in one cycle (10^15, far
/// above any real traffic): larger values are rejected so that sums over instances
/// and cycles never overflow the database's 64-bit integers.
pub const MAX_COUNT: u64 = 1_000_000_000_000_000;

/// The longest app group, app, instance, host or point name accepted, in bytes: the
/// runtime's own limit for point names, so a point the runtime takes is never refused.
pub const MAX_NAME_LEN: usize = resilience_runtime::MAX_POINT_NAME_LEN;

/// The most points one heartbeat may carry.
pub const MAX_POINTS_PER_HEARTBEAT: usize = 10_000;

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
    /// The most calls in flight at once (read back: the sum of the instances' peaks,
    /// an upper bound of the app-wide peak).
    pub peak_concurrency: u64,
    /// Downgrades per reason (`visits`, `concurrency`, ...); reasons with no
    /// downgrade may be left out.
    pub downgrades_by_reason: BTreeMap<String, u64>,
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
}

/// What storing a heartbeat did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingested {
    /// The cycle was added to the app's statistics.
    Stored,
    /// This instance had already reported this cycle (a retry whose first answer was
    /// lost): nothing was counted twice.
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
