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

use crate::model::{
    AppKey, AppSummary, CycleRow, Heartbeat, Ingested, InstanceInfo, NewPolicyVersion, PointInfo,
    PolicyVersion, Protocol,
};
use std::fmt;

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
}

/// Where the server keeps apps, statistics, instances and policy versions.
///
/// Implementations must make every method atomic (one transaction) and must never
/// leave partial data behind when they return an error.
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Adds one instance's cycle to the app's statistics (summing over instances),
    /// records the points it mentions and the instance itself. A second report of the
    /// same cycle by the same instance is recognised and not counted again.
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

    /// Deletes statistics of cycles that started before `before_ms`; returns how many
    /// point-cycles were deleted. Policy versions are never deleted.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the database fails.
    fn prune(&self, before_ms: i64) -> Result<u64, StoreError>;
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
