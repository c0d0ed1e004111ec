//! Storage: the [`Store`] trait and its implementations (SQLite built in, PostgreSQL
//! behind the `postgres` feature).
//!
//! Every method is one transaction: a heartbeat is stored whole or not at all, and a
//! policy change is checked against the current version and written atomically. The
//! methods block; the HTTP layer calls them on tokio's blocking pool.

#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;

#[cfg(feature = "postgres")]
pub use self::postgres::PostgresStore;
pub use sqlite::SqliteStore;

use crate::lock::Recover;
use crate::model::{
    AppKey, AppSummary, BreakerReport, CycleRow, EnforcementRow, Enforcing, Heartbeat, HotKeysRow,
    Ingested, InstanceInfo, NewPolicyVersion, PointInfo, PolicyVersion, Protocol, SecondRow,
};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard};

/// What an instance said when it pulled policies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pull<'a> {
    /// The app.
    pub app: &'a AppKey,
    /// The instance id.
    pub instance: &'a str,
    /// Its host name.
    pub host: &'a str,
    /// Its IP address.
    pub ip: &'a str,
    /// The protocol it spoke.
    pub protocol: Protocol,
    /// The policy version it holds.
    pub version: u64,
    /// The breaker states it sent ([`crate::fleet::Reported::to_stored`]); `None`
    /// when it sent none.
    pub breakers: Option<&'a str>,
}

/// The breaker states one instance's last pull carried (see [`crate::fleet`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerReports {
    /// The instance id.
    pub instance: String,
    /// When it pulled, ms since the Unix epoch.
    pub pulled_ms: i64,
    /// The states, as [`crate::fleet::Reported::to_stored`] wrote them.
    pub breakers: String,
}

/// Where the server keeps apps, statistics, instances and policy versions.
///
/// Implementations must make every method atomic (one transaction) and must never
/// leave partial data behind when they return an error.
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Adds one instance's cycle to the app's statistics (summing over instances),
    /// records the points it mentions and the instance itself. A cycle may come in
    /// parts ([`Heartbeat::part`] of [`Heartbeat::parts`], each point in one of them):
    /// every part is added, and a second report of the same part of the same cycle by
    /// the same instance is recognised and not counted again. The
    /// points' 1-second buckets, where the heartbeat has them, are summed the same way
    /// (seconds without traffic or measured call are not stored; of the durations,
    /// the longest is kept), and each cycle counts how many
    /// instances reported it with them.
    ///
    /// What the heartbeat says the instance enforces replaces, whole, what the
    /// instance's heartbeats of an older cycle said (points it no longer lists are
    /// forgotten); the parts of the same cycle add their entries to it. Its client
    /// health replaces the previous one. Both only if the heartbeat's cycle is not
    /// older than the one they were last taken from (a late retry does not undo a
    /// newer report). A heartbeat without them leaves them as they are.
    ///
    /// The hot keys and key table of each point ([`PointCycle::keys`](crate::model::PointCycle::keys))
    /// replace what the instance's heartbeats of an older cycle said of that point (one
    /// row per instance and point, never a history); a point the heartbeat reports
    /// without them loses the instance's row (the instance says it has none now).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails; nothing is stored then.
    fn record_heartbeat(&self, heartbeat: &Heartbeat, now_ms: i64) -> Result<Ingested, StoreError>;

    /// Records a policy pull: the instance, and the version it holds.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn record_pull(&self, pull: &Pull<'_>, now_ms: i64) -> Result<(), StoreError>;

    /// The breaker states of the app's instances whose last pull, at `since_ms` or
    /// later, carried some, sorted by instance.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn breaker_reports(
        &self,
        app: &AppKey,
        since_ms: i64,
    ) -> Result<Vec<BreakerReports>, StoreError>;

    /// Every known app, sorted by group and name.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn apps(&self) -> Result<Vec<AppSummary>, StoreError>;

    /// The points instances of the app have mentioned, sorted, each with its latest
    /// stored cycle (`has_policy` is left `false`: the caller knows the policy).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn points(&self, app: &AppKey) -> Result<Vec<PointInfo>, StoreError>;

    /// The app's instances, sorted by id.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn instances(&self, app: &AppKey) -> Result<Vec<InstanceInfo>, StoreError>;

    /// What the app's instances enforce: every instance's latest report for each
    /// point (of one point, or of all), sorted by point then instance. Without
    /// `with_local` the entries' `local` settings are left out (`has_local` still says
    /// whether there are some).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails or holds unreadable JSON.
    fn enforcement(
        &self,
        app: &AppKey,
        point: Option<&str>,
        with_local: bool,
    ) -> Result<Vec<EnforcementRow>, StoreError>;

    /// The current hot keys of the app's points, sorted by point then instance: each
    /// instance's latest report of each point, if it came with the instance's newest
    /// cycle in our JSON protocol (the protocol that carries them). The report of a
    /// point the instance no longer sends (it had no traffic since) is stale and left
    /// out, though kept until the retention or until the instance reports the point
    /// without keys. Until a heartbeat of this server's version, every report of an
    /// instance counts as current.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails or holds unreadable JSON.
    fn hot_keys(&self, app: &AppKey) -> Result<Vec<HotKeysRow>, StoreError>;

    /// Stored cycles of the app with `from_ms <= cycle_start_ms < to_ms`, of one point
    /// or of all, ordered by point then time, at most `limit` rows.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn stats(
        &self,
        app: &AppKey,
        point: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<CycleRow>, StoreError>;

    /// The stored cycles of the app with `from_ms <= cycle_start_ms < to_ms`, summed
    /// over its points (`counts.point` is empty; `instances` is the most of any
    /// point), ordered by time, at most `limit` rows.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn stats_summed(
        &self,
        app: &AppKey,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<CycleRow>, StoreError>;

    /// The app's 1-second buckets with `from_ms <= second_start_ms < to_ms`, summed
    /// over instances: of one point or of all, per point (ordered by point then time)
    /// or, with `sum_points`, summed over the points (ordered by time). Seconds
    /// without traffic have no row. Calls measured and the sums of their durations
    /// are summed like the counts; `max_us` is the longest of any instance (and
    /// point). At most `limit` rows.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn seconds(
        &self,
        app: &AppKey,
        point: Option<&str>,
        sum_points: bool,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<SecondRow>, StoreError>;

    /// The starts of the stored cycles overlapping `from_ms..to_ms` in which an
    /// instance reported traffic of the point (of any point, without one) without the
    /// cycle's 1-second buckets (an older client, SDS's own): the seconds of those
    /// cycles miss that traffic. Ascending.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn cycles_without_seconds(
        &self,
        app: &AppKey,
        point: Option<&str>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<i64>, StoreError>;

    /// The app's current policy version number (0 if it never had one).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn current_version(&self, app: &AppKey) -> Result<u64, StoreError>;

    /// One policy version of the app, `None` if it does not exist. Version 0 never
    /// exists: it stands for "no policy".
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn policy_version(
        &self,
        app: &AppKey,
        version: u64,
    ) -> Result<Option<PolicyVersion>, StoreError>;

    /// Every policy version of the app, newest first.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn policy_history(&self, app: &AppKey) -> Result<Vec<PolicyVersion>, StoreError>;

    /// Stores a new policy version (the app is created if needed) numbered one more
    /// than the current one, provided the current one is `change.base_version`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] with the current version if another change came
    /// first; [`StoreError::Backend`] if the database fails. Nothing is stored then.
    fn commit_policy(
        &self,
        app: &AppKey,
        change: &NewPolicyVersion,
    ) -> Result<PolicyVersion, StoreError>;

    /// Deletes statistics of cycles that started before `before_ms`, and enforcement
    /// reports and hot keys received before it (of instances silent since); returns
    /// how many point-cycles were deleted. Policy versions are never deleted.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn prune(&self, before_ms: i64) -> Result<u64, StoreError>;

    /// Deletes the 1-second buckets of seconds that started before `before_ms` (they
    /// are kept for a shorter time than cycles); returns how many point-seconds were
    /// deleted.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn prune_seconds(&self, before_ms: i64) -> Result<u64, StoreError>;

    /// Forgets what sent nothing since `before_ms` (the retention limit), after
    /// [`prune`](Store::prune) removed the older cycles:
    ///
    /// - instances whose last heartbeat and last pull are both older (with what they
    ///   enforce and their hot keys);
    /// - points no instance mentioned since, except the points the app's current
    ///   policy version has settings for, and the declared points of an app one of
    ///   whose instances sent a heartbeat since;
    /// - apps left with no instance, no point, no stored cycle or second and no
    ///   policy version, created before `before_ms`.
    ///
    /// Policy versions are never deleted (so an app that ever had one stays).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails; nothing is deleted then.
    fn prune_silent(&self, before_ms: i64) -> Result<Forgotten, StoreError>;
}

/// What [`Store::prune_silent`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forgotten {
    /// Instances.
    pub instances: u64,
    /// Points.
    pub points: u64,
    /// Apps.
    pub apps: u64,
}

/// A small pool of database connections: at most `max` open at once, opened when
/// needed and kept for the next operation; a caller finding all of them busy waits
/// for one.
pub(crate) struct Pool<C> {
    max: usize,
    state: Mutex<PoolState<C>>,
    freed: Condvar,
    /// Whether a connection handed back can be used again (a broken one is closed).
    reusable: fn(&C) -> bool,
}

struct PoolState<C> {
    idle: Vec<C>,
    open: usize,
}

impl<C> Pool<C> {
    pub(crate) fn new(max: usize, reusable: fn(&C) -> bool) -> Pool<C> {
        Pool {
            max: max.max(1),
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            reusable,
        }
    }

    /// Adds an already open connection (it counts against the maximum).
    pub(crate) fn put(&self, conn: C) {
        let mut state = self.lock();
        state.open += 1;
        state.idle.push(conn);
    }

    fn lock(&self) -> MutexGuard<'_, PoolState<C>> {
        // The state is a list and a count, consistent between statements.
        self.state.lock().recover()
    }

    /// An idle connection, a new one from `open` if fewer than the maximum are open,
    /// or else the first one handed back.
    pub(crate) fn get(
        &self,
        open: impl FnOnce() -> Result<C, StoreError>,
    ) -> Result<Pooled<'_, C>, StoreError> {
        let mut state = self.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(Pooled {
                    pool: self,
                    conn: Some(conn),
                });
            }
            if state.open < self.max {
                state.open += 1;
                break;
            }
            state = self.freed.wait(state).recover();
        }
        drop(state);
        match open() {
            Ok(conn) => Ok(Pooled {
                pool: self,
                conn: Some(conn),
            }),
            Err(e) => {
                self.lock().open -= 1;
                self.freed.notify_one();
                Err(e)
            }
        }
    }
}

/// A connection taken from a [`Pool`], handed back when dropped.
pub(crate) struct Pooled<'a, C> {
    pool: &'a Pool<C>,
    conn: Option<C>,
}

impl<C> Deref for Pooled<'_, C> {
    type Target = C;

    fn deref(&self) -> &C {
        // Only `drop` takes the connection out.
        self.conn.as_ref().expect("a pooled connection")
    }
}

impl<C> DerefMut for Pooled<'_, C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().expect("a pooled connection")
    }
}

impl<C> Drop for Pooled<'_, C> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let keep = (self.pool.reusable)(&conn);
        let mut state = self.pool.lock();
        if keep {
            state.idle.push(conn);
        } else {
            state.open -= 1;
        }
        drop(state);
        self.pool.freed.notify_one();
    }
}

/// A storage operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// A policy change was based on a version that is no longer current.
    Conflict {
        /// The app's current version.
        current: u64,
    },
    /// The database failed or holds data this server cannot read.
    Backend(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Conflict { current } => write!(
                f,
                "the policy was changed meanwhile: the current version is {current}"
            ),
            StoreError::Backend(message) => write!(f, "storage error: {message}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Converts a stored counter back; the database never holds a negative one unless it
/// was edited by hand.
pub(crate) fn to_u64(v: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Backend(format!("negative {what} in the database")))
}

/// Counts are validated to be at most [`MAX_COUNT`](crate::model::MAX_COUNT), so they
/// fit an `i64`; this saturates rather than wraps if one does not.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The columns of the cycles' table added by schema version 7 (`queue_evicted` by
/// version 8): how many instances reported a queue for the point in the cycle (0: no
/// queue data), then a point's
/// [`QueueCounts::to_array`](crate::model::QueueCounts::to_array).
pub(crate) const QUEUE_COLUMNS: [&str; 11] = [
    "queue_reports",
    "queue_waiting",
    "queue_peak_waiting",
    "queue_admitted",
    "queue_timed_out",
    "queue_cancelled",
    "queue_refused",
    "queue_full",
    "queue_wait_ns",
    "queue_max_wait_ns",
    // Schema version 8.
    "queue_evicted",
];

/// Whether a column of the cycles' table keeps the largest of the instances' values
/// (the queue's peak and longest wait) rather than their sum.
pub(crate) fn is_max_column(column: &str) -> bool {
    matches!(column, "queue_peak_waiting" | "queue_max_wait_ns")
}

/// A point's queue as [`QUEUE_COLUMNS`] store it (all 0 without one).
pub(crate) fn queue_values(p: &crate::model::PointCycle) -> [i64; 11] {
    let mut out = [0; 11];
    if let Some(q) = &p.queue {
        out[0] = 1;
        for (o, v) in out[1..].iter_mut().zip(q.to_array()) {
            *o = to_i64(v);
        }
    }
    out
}

/// A queue back from [`QUEUE_COLUMNS`]' values; `None` when no instance reported one.
pub(crate) fn queue_from(values: [u64; 11]) -> Option<crate::model::QueueCounts> {
    let mut q = [0; 10];
    q.copy_from_slice(&values[1..]);
    (values[0] > 0).then(|| crate::model::QueueCounts::from_array(q))
}

/// Parses a JSON column.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Backend(format!("unreadable {what}: {e}")))
}

/// Writes a JSON column.
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Documents and diffs are plain JSON trees: serialising them cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// An enforcement report as stored: JSON columns as text, the breaker in columns.
pub(crate) struct StoredEnforcing {
    pub(crate) point: String,
    pub(crate) digest: String,
    pub(crate) origins: String,
    pub(crate) local: Option<String>,
    pub(crate) breaker_kind: Option<String>,
    pub(crate) breaker_state: Option<String>,
    pub(crate) breaker_since_ms: Option<i64>,
    pub(crate) breaker_transitions: Option<i64>,
}

impl StoredEnforcing {
    /// The columns of an entry.
    pub(crate) fn of(e: &Enforcing) -> StoredEnforcing {
        StoredEnforcing {
            point: e.point.clone(),
            digest: e.digest.clone(),
            origins: to_json(&e.origins),
            local: e.local.as_ref().map(to_json),
            breaker_kind: e.breaker.as_ref().map(|b| b.kind.clone()),
            breaker_state: e.breaker.as_ref().map(|b| b.state.clone()),
            breaker_since_ms: e.breaker.as_ref().map(|b| b.since_ms),
            breaker_transitions: e.breaker.as_ref().map(|b| to_i64(b.transitions)),
        }
    }

    /// The entry back.
    pub(crate) fn into_entry(self) -> Result<Enforcing, StoreError> {
        let origins: BTreeMap<String, crate::model::SectionOrigin> =
            parse_json(&self.origins, "enforcement origins")?;
        let local = self
            .local
            .as_deref()
            .map(|t| parse_json(t, "local settings"))
            .transpose()?;
        let breaker = match (self.breaker_kind, self.breaker_state) {
            (Some(kind), Some(state)) => Some(BreakerReport {
                kind,
                state,
                since_ms: self.breaker_since_ms.unwrap_or(0),
                transitions: to_u64(self.breaker_transitions.unwrap_or(0), "transitions")?,
            }),
            _ => None,
        };
        Ok(Enforcing {
            point: self.point,
            digest: self.digest,
            origins,
            local,
            breaker,
        })
    }
}

/// A point's hot keys as stored: the keys and the key table as JSON text.
pub(crate) struct StoredHotKeys {
    pub(crate) keys: String,
    pub(crate) key_table: Option<String>,
}

impl StoredHotKeys {
    /// The columns of a report.
    pub(crate) fn of(k: &crate::model::PointKeys) -> StoredHotKeys {
        StoredHotKeys {
            keys: to_json(&k.hot_keys),
            key_table: k.key_table.as_ref().map(to_json),
        }
    }

    /// The report back.
    pub(crate) fn into_keys(self) -> Result<crate::model::PointKeys, StoreError> {
        Ok(crate::model::PointKeys {
            hot_keys: parse_json(&self.keys, "hot keys")?,
            key_table: self
                .key_table
                .as_deref()
                .map(|t| parse_json(t, "key table"))
                .transpose()?,
        })
    }
}
