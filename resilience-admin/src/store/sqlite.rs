//! The embedded SQLite store: one database file, no server to run.

use super::{
    is_max_column, parse_json, queue_from, queue_values, to_i64, to_json, to_u64, BreakerReports,
    Forgotten, Pool, Pooled, Pull, Store, StoreError, StoredEnforcing, StoredHotKeys,
    QUEUE_COLUMNS,
};
use crate::lock::Recover;
use crate::model::{
    AppKey, AppSummary, ClientHealth, CycleRow, EnforcementRow, Heartbeat, HotKeysRow, Ingested,
    InstanceInfo, NewPolicyVersion, PointCycle, PointInfo, PolicyVersion, QueueCounts, RetryCounts,
    SecondCounts, SecondRow, CYCLE_MS, SECOND_MS,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The schema; `PRAGMA user_version` tells which one a file has.
const SCHEMA_VERSION: i64 = 11;

/// What each schema version adds to the one before ([`SCHEMA`] is version 1). Only
/// additions: a file of an older version opens and is brought up to date.
const MIGRATIONS: [(i64, &str); 10] = [
    (
        2,
        "
ALTER TABLE instances ADD COLUMN health_ms INTEGER;
ALTER TABLE instances ADD COLUMN health_cycle_ms INTEGER;
ALTER TABLE instances ADD COLUMN last_upload_error TEXT;
ALTER TABLE instances ADD COLUMN last_pull_error TEXT;
ALTER TABLE instances ADD COLUMN from_cache INTEGER;
ALTER TABLE instances ADD COLUMN uploads_dropped INTEGER;
ALTER TABLE instances ADD COLUMN pull_failures INTEGER;
ALTER TABLE instances ADD COLUMN policies_rejected INTEGER;
ALTER TABLE instances ADD COLUMN enforcing_cycle_ms INTEGER;
CREATE TABLE IF NOT EXISTS enforcing (
    app_id INTEGER NOT NULL,
    instance TEXT NOT NULL,
    point TEXT NOT NULL,
    digest TEXT NOT NULL,
    origins TEXT NOT NULL,
    local TEXT,
    breaker_kind TEXT,
    breaker_state TEXT,
    breaker_since_ms INTEGER,
    breaker_transitions INTEGER,
    cycle_start_ms INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    PRIMARY KEY (app_id, instance, point)
);
CREATE INDEX IF NOT EXISTS enforcing_point ON enforcing (app_id, point);
CREATE INDEX IF NOT EXISTS enforcing_received ON enforcing (received_ms);
",
    ),
    // Version 3: the live view's 1-second buckets, and per cycle how many instances
    // sent them.
    (
        3,
        "
ALTER TABLE cycle_stats ADD COLUMN second_instances INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS second_stats (
    app_id INTEGER NOT NULL,
    point TEXT NOT NULL,
    second_ms INTEGER NOT NULL,
    visits INTEGER NOT NULL,
    passes INTEGER NOT NULL,
    downgrades INTEGER NOT NULL,
    exceptions INTEGER NOT NULL,
    timeouts INTEGER NOT NULL,
    instances INTEGER NOT NULL,
    PRIMARY KEY (app_id, point, second_ms)
);
CREATE INDEX IF NOT EXISTS second_stats_time ON second_stats (second_ms);
CREATE TABLE IF NOT EXISTS second_reasons (
    app_id INTEGER NOT NULL,
    point TEXT NOT NULL,
    second_ms INTEGER NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (app_id, point, second_ms, reason)
);
CREATE INDEX IF NOT EXISTS second_reasons_time ON second_reasons (second_ms);
",
    ),
    // Version 4: a cycle may come in parts (`received` keeps one row per cycle, so
    // the parts get their own table); the cycles received before count as part 0.
    (
        4,
        "
CREATE TABLE IF NOT EXISTS received_parts (
    app_id INTEGER NOT NULL,
    instance TEXT NOT NULL,
    cycle_start_ms INTEGER NOT NULL,
    part INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    PRIMARY KEY (app_id, instance, cycle_start_ms, part)
);
CREATE INDEX IF NOT EXISTS received_parts_time ON received_parts (cycle_start_ms);
INSERT OR IGNORE INTO received_parts (app_id, instance, cycle_start_ms, part, received_ms)
    SELECT app_id, instance, cycle_start_ms, 0, received_ms FROM received;
",
    ),
    // Version 5: the seconds' call durations (calls measured, the sum and the max of
    // their durations in µs); the seconds stored before have none.
    (
        5,
        "
ALTER TABLE second_stats ADD COLUMN measured INTEGER NOT NULL DEFAULT 0;
ALTER TABLE second_stats ADD COLUMN sum_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE second_stats ADD COLUMN max_us INTEGER NOT NULL DEFAULT 0;
",
    ),
    // Version 6: the cycles' cancelled calls and retry counters; the cycles stored
    // before have none.
    (
        6,
        "
ALTER TABLE cycle_stats ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_exhausted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_refused_by_budget INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_hedges INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN retry_cancelled INTEGER NOT NULL DEFAULT 0;
",
    ),
    // Version 7: the cycles' concurrency queues (`QUEUE_COLUMNS`); the cycles stored
    // before have none (`queue_reports` 0).
    (
        7,
        "
ALTER TABLE cycle_stats ADD COLUMN queue_reports INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_peak_waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_admitted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_timed_out INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_cancelled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_refused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_full INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_wait_ns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cycle_stats ADD COLUMN queue_max_wait_ns INTEGER NOT NULL DEFAULT 0;
",
    ),
    // Version 8: the queues' evicted waiters; the cycles stored before have none.
    (
        8,
        "
ALTER TABLE cycle_stats ADD COLUMN queue_evicted INTEGER NOT NULL DEFAULT 0;
",
    ),
    // Version 9: each instance's latest hot keys and key table per point (JSON: the
    // keys, at most ten, and the table's totals); no history.
    (
        9,
        "
CREATE TABLE IF NOT EXISTS hot_keys (
    app_id INTEGER NOT NULL,
    instance TEXT NOT NULL,
    point TEXT NOT NULL,
    keys TEXT NOT NULL,
    key_table TEXT,
    cycle_start_ms INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    PRIMARY KEY (app_id, instance, point)
);
CREATE INDEX IF NOT EXISTS hot_keys_point ON hot_keys (app_id, point);
CREATE INDEX IF NOT EXISTS hot_keys_received ON hot_keys (received_ms);
",
    ),
    // Version 10: the points by when an instance last mentioned them (the retention
    // forgets the points silent since its limit); per instance the newest cycle of
    // its heartbeats in our JSON protocol, the one that carries hot keys (the console
    // shows an instance's hot keys of that cycle only); the hot keys' index by point
    // goes (no read filters them by point).
    (
        10,
        "
CREATE INDEX IF NOT EXISTS points_last_seen ON points (last_seen_ms);
ALTER TABLE instances ADD COLUMN keys_cycle_ms INTEGER;
DROP INDEX IF EXISTS hot_keys_point;
",
    ),
    // Version 11: per instance the breaker states its last pull carried (JSON, see
    // `fleet`), for the fleet counts of breakers that know their peers.
    (
        11,
        "
ALTER TABLE instances ADD COLUMN breakers TEXT;
",
    ),
];

/// The columns of `cycle_stats` added by schema version 6, in the order of a
/// point's [`RetryCounts::to_array`] after `cancelled`.
const EXTRA_COLUMNS: [&str; 8] = [
    "cancelled",
    "retry_calls",
    "retry_attempts",
    "retry_retries",
    "retry_exhausted",
    "retry_refused_by_budget",
    "retry_hedges",
    "retry_cancelled",
];

/// How many columns `extra_columns` lists: `EXTRA_COLUMNS`, then `QUEUE_COLUMNS`.
const EXTRA: usize = EXTRA_COLUMNS.len() + QUEUE_COLUMNS.len();

/// `cancelled, retry_calls, ..., queue_reports, ...` (`EXTRA_COLUMNS` then
/// `QUEUE_COLUMNS`) with each column as `f` writes it.
fn extra_columns(f: impl Fn(&str) -> String) -> String {
    EXTRA_COLUMNS
        .iter()
        .chain(&QUEUE_COLUMNS)
        .map(|c| f(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A cycle's cancelled calls, retry counters and queue, read from `extra_columns`
/// starting at column `at`.
fn read_extra(
    r: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<(u64, RetryCounts, Option<QueueCounts>)> {
    let count = |i: usize| -> rusqlite::Result<u64> {
        Ok(u64::try_from(r.get::<_, Option<i64>>(at + i)?.unwrap_or(0)).unwrap_or(0))
    };
    let mut retry = [0; 7];
    for (i, v) in retry.iter_mut().enumerate() {
        *v = count(i + 1)?;
    }
    let mut queue = [0; 11];
    for (i, v) in queue.iter_mut().enumerate() {
        *v = count(i + 8)?;
    }
    Ok((count(0)?, RetryCounts::from_array(retry), queue_from(queue)))
}

/// A point's cancelled calls, retry counters and queue as `extra_columns` store
/// them.
fn extra_values(p: &PointCycle) -> [i64; EXTRA] {
    let r = p.retry.to_array();
    let mut out = [0; EXTRA];
    out[0] = to_i64(p.cancelled);
    for (o, v) in out[1..8].iter_mut().zip(r) {
        *o = to_i64(v);
    }
    out[8..].copy_from_slice(&queue_values(p));
    out
}

/// Indexes for the reads of one app over a time range (every point's cycles or
/// seconds of the last minutes, summed or not): created, if missing, on every
/// opening, after the migrations (they change no table, so a file with them still
/// opens in an older server, which keeps them up to date).
const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS cycle_stats_app_time ON cycle_stats (app_id, cycle_start_ms);
CREATE INDEX IF NOT EXISTS cycle_reasons_app_time ON cycle_reasons (app_id, cycle_start_ms, point, reason);
CREATE INDEX IF NOT EXISTS second_stats_app_time ON second_stats (app_id, second_ms);
CREATE INDEX IF NOT EXISTS second_reasons_app_time ON second_reasons (app_id, second_ms, point, reason);
";

/// Read connections kept open beside the writer (WAL lets them read while it writes).
const READERS: usize = 4;

/// The page cache of each connection, in KiB (SQLite's default is 2 MiB): the point
/// list of a big app reads its points, latest cycles and enforcement reports whole.
const CACHE_KIB: i64 = 32 * 1024;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS apps (
    id INTEGER PRIMARY KEY,
    app_group TEXT NOT NULL,
    app_name TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    UNIQUE (app_group, app_name)
);
CREATE TABLE IF NOT EXISTS points (
    app_id INTEGER NOT NULL REFERENCES apps(id),
    name TEXT NOT NULL,
    declared INTEGER NOT NULL DEFAULT 0,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL,
    PRIMARY KEY (app_id, name)
);
CREATE TABLE IF NOT EXISTS instances (
    app_id INTEGER NOT NULL REFERENCES apps(id),
    instance TEXT NOT NULL,
    host TEXT NOT NULL,
    ip TEXT NOT NULL,
    protocol TEXT NOT NULL,
    last_heartbeat_ms INTEGER,
    last_pull_ms INTEGER,
    policy_version INTEGER,
    PRIMARY KEY (app_id, instance)
);
CREATE TABLE IF NOT EXISTS received (
    app_id INTEGER NOT NULL,
    instance TEXT NOT NULL,
    cycle_start_ms INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    PRIMARY KEY (app_id, instance, cycle_start_ms)
);
CREATE TABLE IF NOT EXISTS cycle_stats (
    app_id INTEGER NOT NULL,
    point TEXT NOT NULL,
    cycle_start_ms INTEGER NOT NULL,
    visits INTEGER NOT NULL,
    passes INTEGER NOT NULL,
    downgrades INTEGER NOT NULL,
    exceptions INTEGER NOT NULL,
    timeouts INTEGER NOT NULL,
    peak_concurrency INTEGER NOT NULL,
    instances INTEGER NOT NULL,
    PRIMARY KEY (app_id, point, cycle_start_ms)
);
CREATE INDEX IF NOT EXISTS cycle_stats_time ON cycle_stats (cycle_start_ms);
CREATE TABLE IF NOT EXISTS cycle_reasons (
    app_id INTEGER NOT NULL,
    point TEXT NOT NULL,
    cycle_start_ms INTEGER NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (app_id, point, cycle_start_ms, reason)
);
CREATE INDEX IF NOT EXISTS cycle_reasons_time ON cycle_reasons (cycle_start_ms);
CREATE TABLE IF NOT EXISTS policy_versions (
    app_id INTEGER NOT NULL REFERENCES apps(id),
    version INTEGER NOT NULL,
    author TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    comment TEXT NOT NULL,
    restored_from INTEGER,
    diff TEXT NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (app_id, version)
);
";

/// A [`Store`] in an SQLite database file (or in memory).
///
/// The file is opened in WAL mode with `synchronous = FULL`: a committed heartbeat or
/// policy change survives a crash of the process or of the machine. One connection
/// writes (heartbeats, pulls, policy changes and pruning, one after the other);
/// reads (the dashboard's lists, statistics, policies) use up to four read-only
/// connections of their own, each read one transaction (one snapshot), so they never
/// wait for a write in progress and a write never waits for them. A database in
/// memory has the one connection only.
///
/// # Examples
///
/// ```
/// use resilience_admin::model::{AppKey, NewPolicyVersion};
/// use resilience_admin::store::{SqliteStore, Store};
///
/// let store = SqliteStore::open_in_memory()?;
/// let app = AppKey::new("shop", "orders");
/// assert_eq!(store.current_version(&app)?, 0);
/// let change = NewPolicyVersion {
///     base_version: 0,
///     author: "alice".into(),
///     created_ms: 1_767_225_600_000,
///     comment: String::new(),
///     restored_from: None,
///     diff: Vec::new(),
///     document: serde_json::json!({"points": {"order.create": {"max_visits": 10}}}),
/// };
/// assert_eq!(store.commit_policy(&app, &change)?.version, 1);
/// assert_eq!(store.current_version(&app)?, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// Read connections of a file (`None` in memory: a second connection would not
    /// see the same database).
    readers: Option<Pool<Connection>>,
    path: Option<PathBuf>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the file cannot be opened or created, or was
    /// written by a newer version of this server.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        create_private(path)?;
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Backend(format!("cannot open {}: {e}", path.display())))?;
        Self::init(conn, Some(path.to_owned()))
    }

    /// A database in memory, gone when the store is dropped (for tests and trials).
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if SQLite fails.
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let conn = Connection::open_in_memory().map_err(backend)?;
        Self::init(conn, None)
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<SqliteStore, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(backend)?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(backend)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(backend)?;
        // Another process (a second server on the same file) may hold a write lock
        // for a moment.
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(backend)?;
        // One transaction holding the write lock: a second server opening the same
        // file waits, then sees the schema up to date.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let found: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(backend)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::Backend(format!(
                "the database has schema version {found}, newer than this server's \
                 {SCHEMA_VERSION}"
            )));
        }
        tx.execute_batch(SCHEMA).map_err(backend)?;
        for (version, sql) in MIGRATIONS {
            if found < version {
                tx.execute_batch(sql).map_err(|e| {
                    StoreError::Backend(format!("cannot migrate to schema version {version}: {e}"))
                })?;
            }
        }
        tx.execute_batch(INDEXES).map_err(backend)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        let readers = match &path {
            Some(path) => {
                let pool = Pool::new(READERS, |_| true);
                // Two opened now: the first reads after the opening (a point list reads
                // its points beside the rest) do not pay for one.
                pool.put(open_reader(path)?);
                pool.put(open_reader(path)?);
                Some(pool)
            }
            None => None,
        };
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            readers,
            path,
        })
    }

    /// The database file, `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock rolled its transaction back (the
        // `Transaction` drop), so the connection is still consistent.
        self.conn.lock().recover()
    }

    /// Runs `f` in one read transaction (one snapshot of the database) on a read
    /// connection, or on the writer's for a database in memory.
    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut reader: Reader<'_> = match (&self.readers, &self.path) {
            (Some(pool), Some(path)) => Reader::Pooled(pool.get(|| open_reader(path))?),
            _ => Reader::Writer(self.conn()),
        };
        let tx = reader.conn().transaction().map_err(backend)?;
        let out = f(&tx);
        // Nothing was written: ending the transaction either way releases the snapshot.
        tx.rollback().map_err(backend)?;
        out
    }
}

/// The connection a read runs on.
enum Reader<'a> {
    Pooled(Pooled<'a, Connection>),
    Writer(MutexGuard<'a, Connection>),
}

impl Reader<'_> {
    fn conn(&mut self) -> &mut Connection {
        match self {
            Reader::Pooled(c) => c,
            Reader::Writer(c) => c,
        }
    }
}

/// A read-only connection to the file: it cannot write (`query_only`), and in WAL mode
/// it reads the last committed state while the writer writes.
fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)
        .map_err(|e| StoreError::Backend(format!("cannot open {}: {e}", path.display())))?;
    conn.pragma_update(None, "query_only", true)
        .map_err(backend)?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)
        .map_err(backend)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(backend)?;
    Ok(conn)
}

fn app_id(tx: &Transaction<'_>, app: &AppKey, now_ms: i64) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO apps (app_group, app_name, created_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (app_group, app_name) DO NOTHING",
        params![app.group, app.name, now_ms],
    )?;
    tx.query_row(
        "SELECT id FROM apps WHERE app_group = ?1 AND app_name = ?2",
        params![app.group, app.name],
        |r| r.get(0),
    )
}

/// Stores the heartbeat's client health and enforcement reports, replacing the
/// instance's previous ones, unless they come from an older cycle than those.
fn record_enforcement(
    tx: &Transaction<'_>,
    app: i64,
    hb: &Heartbeat,
    now_ms: i64,
) -> rusqlite::Result<()> {
    if let Some(h) = &hb.client {
        tx.execute(
            "UPDATE instances SET health_ms = ?3, health_cycle_ms = ?4,
                last_upload_error = ?5, last_pull_error = ?6, from_cache = ?7,
                uploads_dropped = ?8, pull_failures = ?9, policies_rejected = ?10
             WHERE app_id = ?1 AND instance = ?2
               AND (health_cycle_ms IS NULL OR health_cycle_ms <= ?4)",
            params![
                app,
                hb.instance,
                now_ms,
                hb.cycle_start_ms,
                h.last_upload_error,
                h.last_pull_error,
                h.from_cache,
                to_i64(h.uploads_dropped),
                to_i64(h.pull_failures),
                to_i64(h.policies_rejected)
            ],
        )?;
    }
    let Some(entries) = &hb.enforcing else {
        return Ok(());
    };
    let held: Option<i64> = tx.query_row(
        "SELECT enforcing_cycle_ms FROM instances WHERE app_id = ?1 AND instance = ?2",
        params![app, hb.instance],
        |r| r.get(0),
    )?;
    match held {
        // A late retry of an older cycle.
        Some(held) if held > hb.cycle_start_ms => return Ok(()),
        // Another part (or a retry) of the cycle held: its entries are added.
        Some(held) if held == hb.cycle_start_ms => {}
        // The first part of a newer cycle to arrive: it replaces the list.
        _ => {
            tx.execute(
                "UPDATE instances SET enforcing_cycle_ms = ?3
                 WHERE app_id = ?1 AND instance = ?2",
                params![app, hb.instance, hb.cycle_start_ms],
            )?;
            tx.execute(
                "DELETE FROM enforcing WHERE app_id = ?1 AND instance = ?2",
                params![app, hb.instance],
            )?;
        }
    }
    let mut insert = tx.prepare_cached(
        "INSERT OR REPLACE INTO enforcing (app_id, instance, point, digest, origins, local,
            breaker_kind, breaker_state, breaker_since_ms, breaker_transitions,
            cycle_start_ms, received_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    for e in entries {
        let c = StoredEnforcing::of(e);
        insert.execute(params![
            app,
            hb.instance,
            c.point,
            c.digest,
            c.origins,
            c.local,
            c.breaker_kind,
            c.breaker_state,
            c.breaker_since_ms,
            c.breaker_transitions,
            hb.cycle_start_ms,
            now_ms
        ])?;
    }
    Ok(())
}

/// Stores each point's hot keys as the instance's latest (unless a newer cycle's are
/// stored), and forgets the instance's of the points it reports without them.
fn record_hot_keys(
    tx: &Transaction<'_>,
    app: i64,
    hb: &Heartbeat,
    now_ms: i64,
) -> rusqlite::Result<()> {
    let mut upsert = tx.prepare_cached(
        "INSERT INTO hot_keys (app_id, instance, point, keys, key_table, cycle_start_ms,
            received_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (app_id, instance, point) DO UPDATE SET
            keys = excluded.keys, key_table = excluded.key_table,
            cycle_start_ms = excluded.cycle_start_ms, received_ms = excluded.received_ms
         WHERE excluded.cycle_start_ms >= hot_keys.cycle_start_ms",
    )?;
    let mut without: Vec<&str> = Vec::new();
    for p in &hb.points {
        match &p.keys {
            Some(k) => {
                let c = StoredHotKeys::of(k);
                upsert.execute(params![
                    app,
                    hb.instance,
                    p.point,
                    c.keys,
                    c.key_table,
                    hb.cycle_start_ms,
                    now_ms
                ])?;
            }
            None => without.push(&p.point),
        }
    }
    if without.is_empty() {
        return Ok(());
    }
    // One statement for all the points reported without keys (the point names as a
    // JSON array), however many: the instance's rows are found through the primary
    // key (app_id, instance, point).
    tx.prepare_cached(
        "DELETE FROM hot_keys WHERE app_id = ?1 AND instance = ?2 AND cycle_start_ms <= ?3
            AND point IN (SELECT value FROM json_each(?4))",
    )?
    .execute(params![
        app,
        hb.instance,
        hb.cycle_start_ms,
        to_json(&without)
    ])?;
    Ok(())
}

/// The cycle a heartbeat sets as its instance's newest one in our JSON protocol (the
/// protocol that carries hot keys); `None` for SDS's, which leaves it as it is.
fn keys_cycle(hb: &Heartbeat) -> Option<i64> {
    (hb.protocol == crate::model::Protocol::Json).then_some(hb.cycle_start_ms)
}

fn find_app(conn: &Connection, app: &AppKey) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT id FROM apps WHERE app_group = ?1 AND app_name = ?2",
        params![app.group, app.name],
        |r| r.get(0),
    )
    .optional()
}

fn current_version(conn: &Connection, app_id: i64) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM policy_versions WHERE app_id = ?1",
        params![app_id],
        |r| r.get(0),
    )
}

/// A `policy_versions` row as read, before its JSON columns are parsed.
struct VersionRow {
    version: i64,
    author: String,
    created_ms: i64,
    comment: String,
    restored_from: Option<i64>,
    diff: String,
    document: String,
}

impl VersionRow {
    const COLUMNS: &'static str =
        "version, author, created_ms, comment, restored_from, diff, document";

    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<VersionRow> {
        Ok(VersionRow {
            version: r.get(0)?,
            author: r.get(1)?,
            created_ms: r.get(2)?,
            comment: r.get(3)?,
            restored_from: r.get(4)?,
            diff: r.get(5)?,
            document: r.get(6)?,
        })
    }

    fn into_version(self) -> Result<PolicyVersion, StoreError> {
        Ok(PolicyVersion {
            version: to_u64(self.version, "version")?,
            author: self.author,
            created_ms: self.created_ms,
            comment: self.comment,
            restored_from: self
                .restored_from
                .map(|v| to_u64(v, "version"))
                .transpose()?,
            diff: parse_json(&self.diff, "policy diff")?,
            document: parse_json(&self.document, "policy document")?,
        })
    }
}

/// `AND point = ?` with a point, nothing without: a statement of each kind, so that
/// each is served by an index (`(?2 IS NULL OR point = ?2)` would use none of the
/// point's), with its arguments in order.
fn point_filter<'a>(
    app_id: &'a i64,
    point: &'a Option<&'a str>,
) -> (&'static str, Vec<&'a dyn rusqlite::ToSql>) {
    let mut args: Vec<&dyn rusqlite::ToSql> = vec![app_id];
    match point {
        Some(p) => {
            args.push(p);
            ("AND point = ?", args)
        }
        None => ("", args),
    }
}

/// Reads cycle rows and attaches their per-reason counts.
fn read_cycles(
    conn: &Connection,
    app_id: i64,
    point: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> rusqlite::Result<Vec<CycleRow>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (filter, mut args) = point_filter(&app_id, &point);
    args.extend([&from_ms as &dyn rusqlite::ToSql, &to_ms]);
    // Of one point: the primary key's range (app_id, point, cycle_start_ms); of all:
    // the app's time index, then sorted.
    let stats_index = if point.is_some() {
        ""
    } else {
        "INDEXED BY cycle_stats_app_time"
    };
    let extra = extra_columns(str::to_owned);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT point, cycle_start_ms, visits, passes, downgrades, exceptions, timeouts,
                peak_concurrency, instances, {extra}
         FROM cycle_stats {stats_index}
         WHERE app_id = ? {filter} AND cycle_start_ms >= ? AND cycle_start_ms < ?
         ORDER BY point, cycle_start_ms
         LIMIT ?"
    ))?;
    let mut with_limit = args.clone();
    with_limit.push(&limit);
    let mut rows: Vec<CycleRow> = stmt
        .query_map(&with_limit[..], |r| {
            let count = |i: usize| -> rusqlite::Result<u64> {
                Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0))
            };
            let (cancelled, retry, queue) = read_extra(r, 9)?;
            Ok(CycleRow {
                cycle_start_ms: r.get(1)?,
                counts: PointCycle {
                    point: r.get(0)?,
                    visits: count(2)?,
                    passes: count(3)?,
                    downgrades: count(4)?,
                    exceptions: count(5)?,
                    timeouts: count(6)?,
                    cancelled,
                    peak_concurrency: count(7)?,
                    downgrades_by_reason: BTreeMap::new(),
                    seconds: None,
                    retry,
                    queue,
                    keys: None,
                },
                instances: count(8)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    if rows.is_empty() {
        return Ok(rows);
    }
    let mut index: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        index.insert((row.counts.point.clone(), row.cycle_start_ms), i);
    }
    let reasons_index = if point.is_some() {
        ""
    } else {
        "INDEXED BY cycle_reasons_app_time"
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT point, cycle_start_ms, reason, count FROM cycle_reasons {reasons_index}
         WHERE app_id = ? {filter} AND cycle_start_ms >= ? AND cycle_start_ms < ?"
    ))?;
    let reasons = stmt.query_map(&args[..], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    for reason in reasons {
        let (point, cycle, reason, count) = reason?;
        if let Some(&i) = index.get(&(point, cycle)) {
            rows[i]
                .counts
                .downgrades_by_reason
                .insert(reason, u64::try_from(count).unwrap_or(0));
        }
    }
    Ok(rows)
}

/// Adds the heartbeat's 1-second buckets (those with traffic) to the app's seconds.
fn record_seconds(tx: &Transaction<'_>, app: i64, hb: &Heartbeat) -> rusqlite::Result<()> {
    let mut counts = tx.prepare_cached(
        "INSERT INTO second_stats (app_id, point, second_ms, visits, passes, downgrades,
            exceptions, timeouts, measured, sum_us, max_us, instances)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 1)
         ON CONFLICT (app_id, point, second_ms) DO UPDATE SET
            visits = second_stats.visits + excluded.visits,
            passes = second_stats.passes + excluded.passes,
            downgrades = second_stats.downgrades + excluded.downgrades,
            exceptions = second_stats.exceptions + excluded.exceptions,
            timeouts = second_stats.timeouts + excluded.timeouts,
            measured = second_stats.measured + excluded.measured,
            sum_us = second_stats.sum_us + excluded.sum_us,
            max_us = MAX(second_stats.max_us, excluded.max_us),
            instances = second_stats.instances + 1",
    )?;
    let mut reasons = tx.prepare_cached(
        "INSERT INTO second_reasons (app_id, point, second_ms, reason, count)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (app_id, point, second_ms, reason) DO UPDATE SET
            count = second_reasons.count + excluded.count",
    )?;
    for p in &hb.points {
        let Some(seconds) = &p.seconds else {
            continue;
        };
        for (k, c) in seconds.seconds.iter().enumerate() {
            if seconds.is_empty_at(k) {
                continue;
            }
            let at = hb.cycle_start_ms + SECOND_MS * k as i64;
            counts.execute(params![
                app,
                p.point,
                at,
                to_i64(c.visits),
                to_i64(c.passes),
                to_i64(c.downgrades),
                to_i64(c.exceptions),
                to_i64(c.timeouts),
                to_i64(c.measured),
                to_i64(c.sum_us),
                to_i64(c.max_us)
            ])?;
            for (reason, n) in &seconds.downgrades_by_reason {
                if n[k] > 0 {
                    reasons.execute(params![app, p.point, at, reason, to_i64(n[k])])?;
                }
            }
        }
    }
    Ok(())
}

/// Reads second rows (per point, or summed over points) and attaches their
/// per-reason counts.
fn read_seconds(
    conn: &Connection,
    app_id: i64,
    point: Option<&str>,
    sum_points: bool,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> rusqlite::Result<Vec<SecondRow>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (filter, mut args) = point_filter(&app_id, &point);
    args.extend([&from_ms as &dyn rusqlite::ToSql, &to_ms]);
    // Of one point: the primary key's range (app_id, point, second_ms); of all: the
    // app's time index.
    let (stats_index, reasons_index) = if point.is_some() {
        ("", "")
    } else {
        (
            "INDEXED BY second_stats_app_time",
            "INDEXED BY second_reasons_app_time",
        )
    };
    let sql = if sum_points {
        format!(
            "SELECT NULL, second_ms, SUM(visits), SUM(passes), SUM(downgrades),
                    SUM(exceptions), SUM(timeouts), MAX(instances),
                    SUM(measured), SUM(sum_us), MAX(max_us)
             FROM second_stats {stats_index}
             WHERE app_id = ? {filter} AND second_ms >= ? AND second_ms < ?
             GROUP BY second_ms ORDER BY second_ms LIMIT ?"
        )
    } else {
        format!(
            "SELECT point, second_ms, visits, passes, downgrades, exceptions, timeouts,
                    instances, measured, sum_us, max_us
             FROM second_stats {stats_index}
             WHERE app_id = ? {filter} AND second_ms >= ? AND second_ms < ?
             ORDER BY point, second_ms LIMIT ?"
        )
    };
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut with_limit = args.clone();
    with_limit.push(&limit);
    let mut rows: Vec<SecondRow> = stmt
        .query_map(&with_limit[..], |r| {
            let count = |i: usize| -> rusqlite::Result<u64> {
                Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0))
            };
            Ok(SecondRow {
                point: r.get(0)?,
                second_start_ms: r.get(1)?,
                counts: SecondCounts {
                    visits: count(2)?,
                    passes: count(3)?,
                    downgrades: count(4)?,
                    exceptions: count(5)?,
                    timeouts: count(6)?,
                    measured: count(8)?,
                    sum_us: count(9)?,
                    max_us: count(10)?,
                },
                downgrades_by_reason: BTreeMap::new(),
                instances: count(7)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    if rows.is_empty() {
        return Ok(rows);
    }
    let index: BTreeMap<(Option<String>, i64), usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.point.clone(), r.second_start_ms), i))
        .collect();
    let sql = if sum_points {
        format!(
            "SELECT NULL, second_ms, reason, SUM(count) FROM second_reasons {reasons_index}
             WHERE app_id = ? {filter} AND second_ms >= ? AND second_ms < ?
             GROUP BY second_ms, reason"
        )
    } else {
        format!(
            "SELECT point, second_ms, reason, count FROM second_reasons {reasons_index}
             WHERE app_id = ? {filter} AND second_ms >= ? AND second_ms < ?"
        )
    };
    let mut stmt = conn.prepare_cached(&sql)?;
    let reasons = stmt.query_map(&args[..], |r| {
        Ok((
            r.get::<_, Option<String>>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    for reason in reasons {
        let (point, second, reason, count) = reason?;
        if let Some(&i) = index.get(&(point, second)) {
            rows[i]
                .downgrades_by_reason
                .insert(reason, u64::try_from(count).unwrap_or(0));
        }
    }
    Ok(rows)
}

/// Reads cycle rows summed over points, with their per-reason counts.
fn read_cycles_summed(
    conn: &Connection,
    app_id: i64,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> rusqlite::Result<Vec<CycleRow>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let extra = extra_columns(|c| {
        if is_max_column(c) {
            format!("MAX({c})")
        } else {
            format!("SUM({c})")
        }
    });
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT cycle_start_ms, SUM(visits), SUM(passes), SUM(downgrades), SUM(exceptions),
                SUM(timeouts), SUM(peak_concurrency), MAX(instances), {extra}
         FROM cycle_stats INDEXED BY cycle_stats_app_time
         WHERE app_id = ?1 AND cycle_start_ms >= ?2 AND cycle_start_ms < ?3
         GROUP BY cycle_start_ms ORDER BY cycle_start_ms LIMIT ?4"
    ))?;
    let mut rows: Vec<CycleRow> = stmt
        .query_map(params![app_id, from_ms, to_ms, limit], |r| {
            let count = |i: usize| -> rusqlite::Result<u64> {
                Ok(u64::try_from(r.get::<_, i64>(i)?).unwrap_or(0))
            };
            let (cancelled, retry, queue) = read_extra(r, 8)?;
            Ok(CycleRow {
                cycle_start_ms: r.get(0)?,
                counts: PointCycle {
                    point: String::new(),
                    visits: count(1)?,
                    passes: count(2)?,
                    downgrades: count(3)?,
                    exceptions: count(4)?,
                    timeouts: count(5)?,
                    cancelled,
                    peak_concurrency: count(6)?,
                    downgrades_by_reason: BTreeMap::new(),
                    seconds: None,
                    retry,
                    queue,
                    keys: None,
                },
                instances: count(7)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    if rows.is_empty() {
        return Ok(rows);
    }
    let index: BTreeMap<i64, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.cycle_start_ms, i))
        .collect();
    let mut stmt = conn.prepare_cached(
        "SELECT cycle_start_ms, reason, SUM(count)
         FROM cycle_reasons INDEXED BY cycle_reasons_app_time
         WHERE app_id = ?1 AND cycle_start_ms >= ?2 AND cycle_start_ms < ?3
         GROUP BY cycle_start_ms, reason",
    )?;
    let reasons = stmt.query_map(params![app_id, from_ms, to_ms], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for reason in reasons {
        let (cycle, reason, count) = reason?;
        if let Some(&i) = index.get(&cycle) {
            rows[i]
                .counts
                .downgrades_by_reason
                .insert(reason, u64::try_from(count).unwrap_or(0));
        }
    }
    Ok(rows)
}

impl Store for SqliteStore {
    fn record_heartbeat(&self, hb: &Heartbeat, now_ms: i64) -> Result<Ingested, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let app = app_id(&tx, &hb.app, now_ms).map_err(backend)?;
        tx.execute(
            "INSERT INTO instances (app_id, instance, host, ip, protocol, last_heartbeat_ms,
                                    policy_version, keys_cycle_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (app_id, instance) DO UPDATE SET
                host = excluded.host, ip = excluded.ip, protocol = excluded.protocol,
                last_heartbeat_ms = excluded.last_heartbeat_ms,
                policy_version = COALESCE(excluded.policy_version, instances.policy_version),
                keys_cycle_ms = MAX(COALESCE(instances.keys_cycle_ms, excluded.keys_cycle_ms),
                                    COALESCE(excluded.keys_cycle_ms, instances.keys_cycle_ms))",
            params![
                app,
                hb.instance,
                hb.host,
                hb.ip,
                hb.protocol.as_str(),
                now_ms,
                hb.policy_version.map(to_i64),
                keys_cycle(hb)
            ],
        )
        .map_err(backend)?;
        let fresh = tx
            .execute(
                "INSERT INTO received_parts (app_id, instance, cycle_start_ms, part,
                    received_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                params![app, hb.instance, hb.cycle_start_ms, hb.part, now_ms],
            )
            .map_err(backend)?
            == 1;
        let declared: BTreeSet<&str> = hb.declared_points.iter().map(String::as_str).collect();
        let mentioned: BTreeSet<&str> = hb
            .points
            .iter()
            .map(|p| p.point.as_str())
            .chain(hb.known_points.iter().map(String::as_str))
            .chain(declared.iter().copied())
            .chain(hb.enforcing.iter().flatten().map(|e| e.point.as_str()))
            .collect();
        record_enforcement(&tx, app, hb, now_ms).map_err(backend)?;
        if hb.protocol == crate::model::Protocol::Json {
            record_hot_keys(&tx, app, hb, now_ms).map_err(backend)?;
        }
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO points (app_id, name, declared, first_seen_ms, last_seen_ms)
                     VALUES (?1, ?2, ?3, ?4, ?4)
                     ON CONFLICT (app_id, name) DO UPDATE SET
                        declared = MAX(points.declared, excluded.declared),
                        last_seen_ms = excluded.last_seen_ms",
                )
                .map_err(backend)?;
            for name in &mentioned {
                stmt.execute(params![app, name, declared.contains(name), now_ms])
                    .map_err(backend)?;
            }
        }
        if fresh {
            let extra = extra_columns(str::to_owned);
            let extra_params = (11..11 + EXTRA)
                .map(|i| format!("?{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let extra_sums = extra_columns(|c| {
                if is_max_column(c) {
                    format!("{c} = max(cycle_stats.{c}, excluded.{c})")
                } else {
                    format!("{c} = cycle_stats.{c} + excluded.{c}")
                }
            });
            let mut stats = tx
                .prepare_cached(&format!(
                    "INSERT INTO cycle_stats (app_id, point, cycle_start_ms, visits, passes,
                        downgrades, exceptions, timeouts, peak_concurrency, instances,
                        second_instances, {extra})
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10, {extra_params})
                     ON CONFLICT (app_id, point, cycle_start_ms) DO UPDATE SET
                        {extra_sums},
                        second_instances =
                            cycle_stats.second_instances + excluded.second_instances,
                        visits = cycle_stats.visits + excluded.visits,
                        passes = cycle_stats.passes + excluded.passes,
                        downgrades = cycle_stats.downgrades + excluded.downgrades,
                        exceptions = cycle_stats.exceptions + excluded.exceptions,
                        timeouts = cycle_stats.timeouts + excluded.timeouts,
                        peak_concurrency =
                            cycle_stats.peak_concurrency + excluded.peak_concurrency,
                        instances = cycle_stats.instances + 1"
                ))
                .map_err(backend)?;
            let mut reasons = tx
                .prepare_cached(
                    "INSERT INTO cycle_reasons (app_id, point, cycle_start_ms, reason, count)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (app_id, point, cycle_start_ms, reason) DO UPDATE SET
                        count = cycle_reasons.count + excluded.count",
                )
                .map_err(backend)?;
            for p in &hb.points {
                let counts = [
                    to_i64(p.visits),
                    to_i64(p.passes),
                    to_i64(p.downgrades),
                    to_i64(p.exceptions),
                    to_i64(p.timeouts),
                    to_i64(p.peak_concurrency),
                    i64::from(p.seconds.is_some()),
                ];
                let extra = extra_values(p);
                let args: [&dyn rusqlite::ToSql; 3] = [&app, &p.point, &hb.cycle_start_ms];
                stats
                    .execute(rusqlite::params_from_iter(
                        args.into_iter().chain(
                            counts
                                .iter()
                                .chain(&extra)
                                .map(|v| v as &dyn rusqlite::ToSql),
                        ),
                    ))
                    .map_err(backend)?;
                for (reason, count) in p.downgrades_by_reason.iter().filter(|(_, c)| **c > 0) {
                    reasons
                        .execute(params![
                            app,
                            p.point,
                            hb.cycle_start_ms,
                            reason,
                            to_i64(*count)
                        ])
                        .map_err(backend)?;
                }
            }
            record_seconds(&tx, app, hb).map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(if fresh {
            Ingested::Stored
        } else {
            Ingested::Duplicate
        })
    }

    fn record_pull(&self, pull: &Pull<'_>, now_ms: i64) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let app = app_id(&tx, pull.app, now_ms).map_err(backend)?;
        tx.execute(
            "INSERT INTO instances (app_id, instance, host, ip, protocol, last_pull_ms,
                                    policy_version, breakers)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (app_id, instance) DO UPDATE SET
                host = excluded.host, ip = excluded.ip, protocol = excluded.protocol,
                last_pull_ms = excluded.last_pull_ms,
                policy_version = excluded.policy_version, breakers = excluded.breakers",
            params![
                app,
                pull.instance,
                pull.host,
                pull.ip,
                pull.protocol.as_str(),
                now_ms,
                to_i64(pull.version),
                pull.breakers
            ],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)
    }

    fn breaker_reports(
        &self,
        app: &AppKey,
        since_ms: i64,
    ) -> Result<Vec<BreakerReports>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            let mut stmt = conn
                .prepare_cached(
                    "SELECT instance, last_pull_ms, breakers FROM instances
                     WHERE app_id = ?1 AND breakers IS NOT NULL AND last_pull_ms >= ?2
                     ORDER BY instance",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![app_id, since_ms], |r| {
                    Ok(BreakerReports {
                        instance: r.get(0)?,
                        pulled_ms: r.get(1)?,
                        breakers: r.get(2)?,
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
    }

    fn apps(&self) -> Result<Vec<AppSummary>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT a.app_group, a.app_name,
                    (SELECT COALESCE(MAX(version), 0) FROM policy_versions v
                        WHERE v.app_id = a.id),
                    (SELECT MAX(MAX(COALESCE(i.last_heartbeat_ms, 0),
                                    COALESCE(i.last_pull_ms, 0)))
                        FROM instances i WHERE i.app_id = a.id),
                    (SELECT COUNT(*) FROM instances i WHERE i.app_id = a.id)
                 FROM apps a ORDER BY a.app_group, a.app_name",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, i64>(4)?,
                    ))
                })
                .map_err(backend)?;
            let mut apps = Vec::new();
            for row in rows {
                let (group, name, version, last_seen, instances) = row.map_err(backend)?;
                apps.push(AppSummary {
                    group,
                    name,
                    policy_version: to_u64(version, "version")?,
                    last_seen_ms: last_seen.filter(|&t| t > 0),
                    instances: to_u64(instances, "instance count")?,
                });
            }
            Ok(apps)
        })
    }

    fn points(&self, app: &AppKey) -> Result<Vec<PointInfo>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            // One query for the whole list: per point, its latest cycle's row found
            // backwards through the primary key (app_id, point, cycle_start_ms), read
            // by its rowid, and that cycle's reasons through theirs if it had a
            // downgrade (the reasons add up to at most the downgrades): at most three
            // index probes per point, whatever the length of the history.
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT p.name, p.declared, p.first_seen_ms, p.last_seen_ms,
                        s.cycle_start_ms, s.visits, s.passes, s.downgrades, s.exceptions,
                        s.timeouts, s.peak_concurrency, s.instances,
                        CASE WHEN s.downgrades > 0 THEN
                            (SELECT json_group_object(r.reason, r.count) FROM cycle_reasons r
                             WHERE r.app_id = s.app_id AND r.point = s.point
                               AND r.cycle_start_ms = s.cycle_start_ms)
                        END,
                        {extra}
                     FROM points p
                     LEFT JOIN cycle_stats s ON s.rowid = (SELECT m.rowid FROM cycle_stats m
                        WHERE m.app_id = p.app_id AND m.point = p.name
                        ORDER BY m.cycle_start_ms DESC LIMIT 1)
                     WHERE p.app_id = ?1 ORDER BY p.name",
                    extra = extra_columns(|c| format!("s.{c}"))
                ))
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![app_id], |r| {
                    let count = |i: usize| -> rusqlite::Result<u64> {
                        Ok(u64::try_from(r.get::<_, Option<i64>>(i)?.unwrap_or(0)).unwrap_or(0))
                    };
                    let name: String = r.get(0)?;
                    let last_cycle = match r.get::<_, Option<i64>>(4)? {
                        None => None,
                        Some(t) => {
                            let (cancelled, retry, queue) = read_extra(r, 13)?;
                            Some(CycleRow {
                                cycle_start_ms: t,
                                counts: PointCycle {
                                    point: name.clone(),
                                    visits: count(5)?,
                                    passes: count(6)?,
                                    downgrades: count(7)?,
                                    exceptions: count(8)?,
                                    timeouts: count(9)?,
                                    cancelled,
                                    peak_concurrency: count(10)?,
                                    downgrades_by_reason: BTreeMap::new(),
                                    seconds: None,
                                    retry,
                                    queue,
                                    keys: None,
                                },
                                instances: count(11)?,
                            })
                        }
                    };
                    let info = PointInfo {
                        name,
                        declared: r.get(1)?,
                        has_policy: false,
                        first_seen_ms: Some(r.get(2)?),
                        last_seen_ms: Some(r.get(3)?),
                        last_cycle,
                    };
                    Ok((info, r.get::<_, Option<String>>(12)?))
                })
                .map_err(backend)?;
            let mut points = Vec::new();
            for row in rows {
                let (mut info, reasons) = row.map_err(backend)?;
                if let (Some(cycle), Some(text)) = (info.last_cycle.as_mut(), reasons) {
                    if text != "{}" {
                        cycle.counts.downgrades_by_reason = parse_json(&text, "downgrade reasons")?;
                    }
                }
                points.push(info);
            }
            Ok(points)
        })
    }

    fn instances(&self, app: &AppKey) -> Result<Vec<InstanceInfo>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            let mut stmt = conn
                .prepare_cached(
                    "SELECT instance, host, ip, protocol, last_heartbeat_ms, last_pull_ms,
                        policy_version, health_ms, last_upload_error, last_pull_error,
                        from_cache, uploads_dropped, pull_failures, policies_rejected
                 FROM instances WHERE app_id = ?1 ORDER BY instance",
                )
                .map_err(backend)?;
            let count = |r: &rusqlite::Row<'_>, i: usize| -> rusqlite::Result<u64> {
                Ok(r.get::<_, Option<i64>>(i)?
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0))
            };
            let rows = stmt
                .query_map(params![app_id], |r| {
                    let health_ms: Option<i64> = r.get(7)?;
                    let client = match health_ms {
                        None => None,
                        Some(_) => Some(ClientHealth {
                            last_upload_error: r.get(8)?,
                            last_pull_error: r.get(9)?,
                            from_cache: r.get::<_, Option<bool>>(10)?.unwrap_or(false),
                            uploads_dropped: count(r, 11)?,
                            pull_failures: count(r, 12)?,
                            policies_rejected: count(r, 13)?,
                        }),
                    };
                    Ok(InstanceInfo {
                        instance: r.get(0)?,
                        host: r.get(1)?,
                        ip: r.get(2)?,
                        protocol: r.get(3)?,
                        last_heartbeat_ms: r.get(4)?,
                        last_pull_ms: r.get(5)?,
                        policy_version: r
                            .get::<_, Option<i64>>(6)?
                            .and_then(|v| u64::try_from(v).ok()),
                        client,
                        client_reported_ms: health_ms,
                    })
                })
                .map_err(backend)?;
            rows.collect::<rusqlite::Result<_>>().map_err(backend)
        })
    }

    fn enforcement(
        &self,
        app: &AppKey,
        point: Option<&str>,
        with_local: bool,
    ) -> Result<Vec<EnforcementRow>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            // Of one point: the index (app_id, point); of all: the primary key's
            // prefix (app_id).
            let (filter, mut args) = point_filter(&app_id, &point);
            args.push(&with_local);
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT instance, point, digest, origins,
                        CASE WHEN ?{local} THEN local END, local IS NOT NULL,
                        breaker_kind, breaker_state, breaker_since_ms, breaker_transitions,
                        cycle_start_ms, received_ms
                     FROM enforcing WHERE app_id = ?1 {filter}
                     ORDER BY point, instance",
                    local = args.len(),
                    filter = filter.replace('?', "?2"),
                ))
                .map_err(backend)?;
            let rows = stmt
                .query_map(&args[..], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        StoredEnforcing {
                            point: r.get(1)?,
                            digest: r.get(2)?,
                            origins: r.get(3)?,
                            local: r.get(4)?,
                            breaker_kind: r.get(6)?,
                            breaker_state: r.get(7)?,
                            breaker_since_ms: r.get(8)?,
                            breaker_transitions: r.get(9)?,
                        },
                        r.get::<_, bool>(5)?,
                        r.get::<_, i64>(10)?,
                        r.get::<_, i64>(11)?,
                    ))
                })
                .map_err(backend)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend)?;
            rows.into_iter()
                .map(|(instance, stored, has_local, cycle, received)| {
                    Ok(EnforcementRow {
                        instance,
                        entry: stored.into_entry()?,
                        has_local,
                        cycle_start_ms: cycle,
                        received_ms: received,
                    })
                })
                .collect()
        })
    }

    fn hot_keys(&self, app: &AppKey) -> Result<Vec<HotKeysRow>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            // The primary key's prefix (app_id), each row's instance by its own; rows
            // of an older cycle than the instance's newest are stale (the point had
            // no traffic since).
            let mut stmt = conn
                .prepare_cached(
                    "SELECT h.instance, h.point, h.keys, h.key_table, h.cycle_start_ms,
                        h.received_ms
                     FROM hot_keys h LEFT JOIN instances i
                        ON i.app_id = h.app_id AND i.instance = h.instance
                     WHERE h.app_id = ?1
                       AND h.cycle_start_ms >= COALESCE(i.keys_cycle_ms, h.cycle_start_ms)
                     ORDER BY h.point, h.instance",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![app_id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        StoredHotKeys {
                            keys: r.get(2)?,
                            key_table: r.get(3)?,
                        },
                        r.get::<_, i64>(4)?,
                        r.get::<_, i64>(5)?,
                    ))
                })
                .map_err(backend)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend)?;
            rows.into_iter()
                .map(|(instance, point, stored, cycle, received)| {
                    Ok(HotKeysRow {
                        instance,
                        point,
                        keys: stored.into_keys()?,
                        cycle_start_ms: cycle,
                        received_ms: received,
                    })
                })
                .collect()
        })
    }

    fn stats(
        &self,
        app: &AppKey,
        point: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<CycleRow>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            read_cycles(conn, app_id, point, from_ms, to_ms, limit).map_err(backend)
        })
    }

    fn stats_summed(
        &self,
        app: &AppKey,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<CycleRow>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            read_cycles_summed(conn, app_id, from_ms, to_ms, limit).map_err(backend)
        })
    }

    fn seconds(
        &self,
        app: &AppKey,
        point: Option<&str>,
        sum_points: bool,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<SecondRow>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            read_seconds(conn, app_id, point, sum_points, from_ms, to_ms, limit).map_err(backend)
        })
    }

    fn cycles_without_seconds(
        &self,
        app: &AppKey,
        point: Option<&str>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            // Of one point: the primary key's range; of all: the app's time index.
            let (filter, mut args) = point_filter(&app_id, &point);
            let from = from_ms - CYCLE_MS;
            args.extend([&from as &dyn rusqlite::ToSql, &to_ms]);
            let index = if point.is_some() {
                ""
            } else {
                "INDEXED BY cycle_stats_app_time"
            };
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT DISTINCT cycle_start_ms FROM cycle_stats {index}
                     WHERE app_id = ? {filter} AND cycle_start_ms > ? AND cycle_start_ms < ?
                       AND instances > second_instances
                       AND visits + exceptions + timeouts > 0
                     ORDER BY cycle_start_ms"
                ))
                .map_err(backend)?;
            let rows = stmt
                .query_map(&args[..], |r| r.get::<_, i64>(0))
                .map_err(backend)?;
            rows.collect::<rusqlite::Result<_>>().map_err(backend)
        })
    }

    fn current_version(&self, app: &AppKey) -> Result<u64, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(0);
            };
            to_u64(current_version(conn, app_id).map_err(backend)?, "version")
        })
    }

    fn policy_version(
        &self,
        app: &AppKey,
        version: u64,
    ) -> Result<Option<PolicyVersion>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(None);
            };
            let sql = format!(
                "SELECT {} FROM policy_versions WHERE app_id = ?1 AND version = ?2",
                VersionRow::COLUMNS
            );
            let row = conn
                .query_row(&sql, params![app_id, to_i64(version)], VersionRow::read)
                .optional()
                .map_err(backend)?;
            row.map(VersionRow::into_version).transpose()
        })
    }

    fn policy_history(&self, app: &AppKey) -> Result<Vec<PolicyVersion>, StoreError> {
        self.read(|conn| {
            let Some(app_id) = find_app(conn, app).map_err(backend)? else {
                return Ok(Vec::new());
            };
            let sql = format!(
                "SELECT {} FROM policy_versions WHERE app_id = ?1 ORDER BY version DESC",
                VersionRow::COLUMNS
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(backend)?;
            let rows = stmt
                .query_map(params![app_id], VersionRow::read)
                .map_err(backend)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend)?;
            rows.into_iter().map(VersionRow::into_version).collect()
        })
    }

    fn commit_policy(
        &self,
        app: &AppKey,
        change: &NewPolicyVersion,
    ) -> Result<PolicyVersion, StoreError> {
        let mut conn = self.conn();
        // IMMEDIATE takes the write lock up front, so the version check and the insert
        // cannot interleave with another writer (another server on the same file).
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let app_id = app_id(&tx, app, change.created_ms).map_err(backend)?;
        let current = to_u64(current_version(&tx, app_id).map_err(backend)?, "version")?;
        if current != change.base_version {
            return Err(StoreError::Conflict { current });
        }
        let version = current + 1;
        tx.execute(
            "INSERT INTO policy_versions (app_id, version, author, created_ms, comment,
                restored_from, diff, document)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                app_id,
                to_i64(version),
                change.author,
                change.created_ms,
                change.comment,
                change.restored_from.map(to_i64),
                to_json(&change.diff),
                to_json(&change.document)
            ],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(PolicyVersion {
            version,
            author: change.author.clone(),
            created_ms: change.created_ms,
            comment: change.comment.clone(),
            restored_from: change.restored_from,
            diff: change.diff.clone(),
            document: change.document.clone(),
        })
    }

    fn prune(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let deleted = tx
            .execute(
                "DELETE FROM cycle_stats WHERE cycle_start_ms < ?1",
                params![before_ms],
            )
            .map_err(backend)?;
        tx.execute(
            "DELETE FROM cycle_reasons WHERE cycle_start_ms < ?1",
            params![before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM received WHERE cycle_start_ms < ?1",
            params![before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM received_parts WHERE cycle_start_ms < ?1",
            params![before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM enforcing WHERE received_ms < ?1",
            params![before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM hot_keys WHERE received_ms < ?1",
            params![before_ms],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(deleted as u64)
    }

    fn prune_seconds(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let deleted = tx
            .execute(
                "DELETE FROM second_stats WHERE second_ms < ?1",
                params![before_ms],
            )
            .map_err(backend)?;
        tx.execute(
            "DELETE FROM second_reasons WHERE second_ms < ?1",
            params![before_ms],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(deleted as u64)
    }

    fn prune_silent(&self, before_ms: i64) -> Result<Forgotten, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        let silent = "MAX(COALESCE(last_heartbeat_ms, 0), COALESCE(last_pull_ms, 0)) < ?1";
        tx.execute(
            &format!(
                "DELETE FROM enforcing WHERE EXISTS (SELECT 1 FROM instances i
                    WHERE i.app_id = enforcing.app_id AND i.instance = enforcing.instance
                      AND {silent})"
            ),
            params![before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            &format!(
                "DELETE FROM hot_keys WHERE EXISTS (SELECT 1 FROM instances i
                    WHERE i.app_id = hot_keys.app_id AND i.instance = hot_keys.instance
                      AND {silent})"
            ),
            params![before_ms],
        )
        .map_err(backend)?;
        let instances = tx
            .execute(
                &format!("DELETE FROM instances WHERE {silent}"),
                params![before_ms],
            )
            .map_err(backend)?;
        // A point stays while it is mentioned, declared by an app that still sends
        // heartbeats, or configured in its app's current policy.
        let points = tx
            .execute(
                "DELETE FROM points WHERE last_seen_ms < ?1
                   AND NOT (declared AND EXISTS (SELECT 1 FROM instances i
                       WHERE i.app_id = points.app_id AND i.last_heartbeat_ms >= ?1))
                   AND name NOT IN (SELECT key FROM json_each(
                       (SELECT document FROM policy_versions v WHERE v.app_id = points.app_id
                        ORDER BY v.version DESC LIMIT 1), '$.points'))",
                params![before_ms],
            )
            .map_err(backend)?;
        let apps: Vec<i64> = {
            let mut stmt = tx
                .prepare(
                    "SELECT id FROM apps a WHERE created_ms < ?1
                       AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.app_id = a.id)
                       AND NOT EXISTS (SELECT 1 FROM points p WHERE p.app_id = a.id)
                       AND NOT EXISTS (SELECT 1 FROM policy_versions v WHERE v.app_id = a.id)
                       AND NOT EXISTS (SELECT 1 FROM cycle_stats c WHERE c.app_id = a.id)
                       AND NOT EXISTS (SELECT 1 FROM second_stats s WHERE s.app_id = a.id)",
                )
                .map_err(backend)?;
            let ids = stmt
                .query_map(params![before_ms], |r| r.get(0))
                .map_err(backend)?;
            ids.collect::<rusqlite::Result<_>>().map_err(backend)?
        };
        for id in &apps {
            // Whatever is left of it (receipts, reasons), so that nothing is found
            // under its id again.
            for table in [
                "cycle_reasons",
                "second_stats",
                "second_reasons",
                "received",
                "received_parts",
                "enforcing",
                "hot_keys",
            ] {
                tx.execute(&format!("DELETE FROM {table} WHERE app_id = ?1"), [id])
                    .map_err(backend)?;
            }
            tx.execute("DELETE FROM apps WHERE id = ?1", [id])
                .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(Forgotten {
            instances: instances as u64,
            points: points as u64,
            apps: apps.len() as u64,
        })
    }
}

/// Creates the database file, if it does not exist yet, readable and writable by
/// its owner only (0600 on Unix): it holds every app's policies and statistics.
/// SQLite gives its `-wal` and `-shm` files the mode of the database file. An
/// existing file keeps its mode.
fn create_private(path: &Path) -> Result<(), StoreError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Backend(format!(
            "cannot create {}: {e}",
            path.display()
        ))),
    }
}
