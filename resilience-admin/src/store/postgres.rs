//! The PostgreSQL store (feature `postgres`), for teams that already run a server.
//!
//! Tables carry the prefix `ra_` so that they can live in a database shared with
//! other applications.

use super::{
    is_max_column, parse_json, queue_from, queue_values, to_i64, to_json, to_u64, BreakerReports,
    Forgotten, Pool, Pooled, Pull, Store, StoreError, StoredEnforcing, StoredHotKeys,
    QUEUE_COLUMNS,
};
use crate::model::{
    AppKey, AppSummary, ClientHealth, CycleRow, EnforcementRow, Heartbeat, HotKeysRow, Ingested,
    InstanceInfo, NewPolicyVersion, PointCycle, PointInfo, PolicyVersion, QueueCounts, RetryCounts,
    SecondCounts, SecondRow, CYCLE_MS, SECOND_MS,
};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

const SCHEMA_VERSION: i32 = 11;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ra_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ra_apps (
    id BIGSERIAL PRIMARY KEY,
    app_group TEXT NOT NULL,
    app_name TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    UNIQUE (app_group, app_name)
);
CREATE TABLE IF NOT EXISTS ra_points (
    app_id BIGINT NOT NULL REFERENCES ra_apps(id),
    name TEXT NOT NULL,
    declared BOOLEAN NOT NULL DEFAULT FALSE,
    first_seen_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL,
    PRIMARY KEY (app_id, name)
);
CREATE TABLE IF NOT EXISTS ra_instances (
    app_id BIGINT NOT NULL REFERENCES ra_apps(id),
    instance TEXT NOT NULL,
    host TEXT NOT NULL,
    ip TEXT NOT NULL,
    protocol TEXT NOT NULL,
    last_heartbeat_ms BIGINT,
    last_pull_ms BIGINT,
    policy_version BIGINT,
    PRIMARY KEY (app_id, instance)
);
CREATE TABLE IF NOT EXISTS ra_received (
    app_id BIGINT NOT NULL,
    instance TEXT NOT NULL,
    cycle_start_ms BIGINT NOT NULL,
    received_ms BIGINT NOT NULL,
    PRIMARY KEY (app_id, instance, cycle_start_ms)
);
CREATE TABLE IF NOT EXISTS ra_cycle_stats (
    app_id BIGINT NOT NULL,
    point TEXT NOT NULL,
    cycle_start_ms BIGINT NOT NULL,
    visits BIGINT NOT NULL,
    passes BIGINT NOT NULL,
    downgrades BIGINT NOT NULL,
    exceptions BIGINT NOT NULL,
    timeouts BIGINT NOT NULL,
    peak_concurrency BIGINT NOT NULL,
    instances BIGINT NOT NULL,
    PRIMARY KEY (app_id, point, cycle_start_ms)
);
CREATE INDEX IF NOT EXISTS ra_cycle_stats_time ON ra_cycle_stats (cycle_start_ms);
CREATE TABLE IF NOT EXISTS ra_cycle_reasons (
    app_id BIGINT NOT NULL,
    point TEXT NOT NULL,
    cycle_start_ms BIGINT NOT NULL,
    reason TEXT NOT NULL,
    count BIGINT NOT NULL,
    PRIMARY KEY (app_id, point, cycle_start_ms, reason)
);
CREATE INDEX IF NOT EXISTS ra_cycle_reasons_time ON ra_cycle_reasons (cycle_start_ms);
CREATE TABLE IF NOT EXISTS ra_policy_versions (
    app_id BIGINT NOT NULL REFERENCES ra_apps(id),
    version BIGINT NOT NULL,
    author TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    comment TEXT NOT NULL,
    restored_from BIGINT,
    diff TEXT NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (app_id, version)
);
-- Version 2: what each instance enforces, and its client's health. Additions only,
-- each of which may run again: a version 1 database is brought up to date.
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS health_ms BIGINT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS health_cycle_ms BIGINT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS last_upload_error TEXT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS last_pull_error TEXT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS from_cache BOOLEAN;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS uploads_dropped BIGINT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS pull_failures BIGINT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS policies_rejected BIGINT;
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS enforcing_cycle_ms BIGINT;
CREATE TABLE IF NOT EXISTS ra_enforcing (
    app_id BIGINT NOT NULL,
    instance TEXT NOT NULL,
    point TEXT NOT NULL,
    digest TEXT NOT NULL,
    origins TEXT NOT NULL,
    local TEXT,
    breaker_kind TEXT,
    breaker_state TEXT,
    breaker_since_ms BIGINT,
    breaker_transitions BIGINT,
    cycle_start_ms BIGINT NOT NULL,
    received_ms BIGINT NOT NULL,
    PRIMARY KEY (app_id, instance, point)
);
CREATE INDEX IF NOT EXISTS ra_enforcing_point ON ra_enforcing (app_id, point);
CREATE INDEX IF NOT EXISTS ra_enforcing_received ON ra_enforcing (received_ms);
-- Version 3: the live view's 1-second buckets, and per cycle how many instances sent
-- them. Additions only, each of which may run again.
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS second_instances BIGINT NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS ra_second_stats (
    app_id BIGINT NOT NULL,
    point TEXT NOT NULL,
    second_ms BIGINT NOT NULL,
    visits BIGINT NOT NULL,
    passes BIGINT NOT NULL,
    downgrades BIGINT NOT NULL,
    exceptions BIGINT NOT NULL,
    timeouts BIGINT NOT NULL,
    instances BIGINT NOT NULL,
    PRIMARY KEY (app_id, point, second_ms)
);
CREATE INDEX IF NOT EXISTS ra_second_stats_time ON ra_second_stats (second_ms);
CREATE TABLE IF NOT EXISTS ra_second_reasons (
    app_id BIGINT NOT NULL,
    point TEXT NOT NULL,
    second_ms BIGINT NOT NULL,
    reason TEXT NOT NULL,
    count BIGINT NOT NULL,
    PRIMARY KEY (app_id, point, second_ms, reason)
);
CREATE INDEX IF NOT EXISTS ra_second_reasons_time ON ra_second_reasons (second_ms);
-- Version 4: a cycle may come in parts (`ra_received` keeps one row per cycle, so the
-- parts get their own table). Additions only, each of which may run again; the
-- cycles received before count as part 0 (copied once, in `connect`).
CREATE TABLE IF NOT EXISTS ra_received_parts (
    app_id BIGINT NOT NULL,
    instance TEXT NOT NULL,
    cycle_start_ms BIGINT NOT NULL,
    part INTEGER NOT NULL,
    received_ms BIGINT NOT NULL,
    PRIMARY KEY (app_id, instance, cycle_start_ms, part)
);
CREATE INDEX IF NOT EXISTS ra_received_parts_time ON ra_received_parts (cycle_start_ms);
-- Version 5: the seconds' call durations (calls measured, the sum and the max of their
-- durations in µs). Additions only, each of which may run again; the seconds stored
-- before have none.
ALTER TABLE ra_second_stats ADD COLUMN IF NOT EXISTS measured BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_second_stats ADD COLUMN IF NOT EXISTS sum_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_second_stats ADD COLUMN IF NOT EXISTS max_us BIGINT NOT NULL DEFAULT 0;
-- Version 6: the cycles' cancelled calls and retry counters. Additions only, each of
-- which may run again; the cycles stored before have none.
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS cancelled BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_calls BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_exhausted BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_refused_by_budget BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_hedges BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS retry_cancelled BIGINT NOT NULL DEFAULT 0;
-- Version 7: the cycles' concurrency queues (`QUEUE_COLUMNS`); the cycles stored
-- before have none (queue_reports 0).
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_reports BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_waiting BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_peak_waiting BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_admitted BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_timed_out BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_cancelled BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_refused BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_full BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_wait_ns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_max_wait_ns BIGINT NOT NULL DEFAULT 0;
-- Version 8: the queues' evicted waiters; the cycles stored before have none.
ALTER TABLE ra_cycle_stats ADD COLUMN IF NOT EXISTS queue_evicted BIGINT NOT NULL DEFAULT 0;
-- Version 9: each instance's latest hot keys and key table per point (JSON: the keys,
-- at most ten, and the table's totals); no history.
CREATE TABLE IF NOT EXISTS ra_hot_keys (
    app_id BIGINT NOT NULL,
    instance TEXT NOT NULL,
    point TEXT NOT NULL,
    keys TEXT NOT NULL,
    key_table TEXT,
    cycle_start_ms BIGINT NOT NULL,
    received_ms BIGINT NOT NULL,
    PRIMARY KEY (app_id, instance, point)
);
CREATE INDEX IF NOT EXISTS ra_hot_keys_received ON ra_hot_keys (received_ms);
-- Version 10: the points by when an instance last mentioned them (the retention
-- forgets the points silent since its limit); per instance the newest cycle of its
-- heartbeats in our JSON protocol, the one that carries hot keys (the console shows an
-- instance's hot keys of that cycle only); version 9's index of the hot keys by point
-- (app_id, point) goes: no read filters them by point.
CREATE INDEX IF NOT EXISTS ra_points_last_seen ON ra_points (last_seen_ms);
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS keys_cycle_ms BIGINT;
DROP INDEX IF EXISTS ra_hot_keys_point;
-- Version 11: per instance the breaker states its last pull carried (JSON, see
-- `fleet`), for the fleet counts of breakers that know their peers.
ALTER TABLE ra_instances ADD COLUMN IF NOT EXISTS breakers TEXT;
-- The reads of one app over a time range (every point's cycles or seconds of the last
-- minutes, summed or not). Indexes only: a database with them still opens in an
-- older server, which keeps them up to date.
CREATE INDEX IF NOT EXISTS ra_cycle_stats_app_time ON ra_cycle_stats (app_id, cycle_start_ms);
CREATE INDEX IF NOT EXISTS ra_cycle_reasons_app_time ON ra_cycle_reasons (app_id, cycle_start_ms, point, reason);
CREATE INDEX IF NOT EXISTS ra_second_stats_app_time ON ra_second_stats (app_id, second_ms);
CREATE INDEX IF NOT EXISTS ra_second_reasons_app_time ON ra_second_reasons (app_id, second_ms, point, reason);
";

/// The columns of `ra_cycle_stats` added by schema version 6: `cancelled`, then a
/// point's [`RetryCounts::to_array`].
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

/// The `extra_columns` in order.
fn extra_list() -> impl Iterator<Item = &'static str> {
    EXTRA_COLUMNS.iter().chain(&QUEUE_COLUMNS).copied()
}

/// `cancelled, retry_calls, ..., queue_reports, ...` (`EXTRA_COLUMNS` then
/// `QUEUE_COLUMNS`) with each column as `f` writes it.
fn extra_columns(f: impl Fn(&str) -> String) -> String {
    extra_list().map(f).collect::<Vec<_>>().join(", ")
}

/// A cycle's cancelled calls, retry counters and queue, read from `extra_columns`
/// starting at column `at`.
fn read_extra(r: &Row, at: usize) -> (u64, RetryCounts, Option<QueueCounts>) {
    let mut retry = [0; 7];
    for (i, v) in retry.iter_mut().enumerate() {
        *v = count(r, at + 1 + i);
    }
    let mut queue = [0; 11];
    for (i, v) in queue.iter_mut().enumerate() {
        *v = count(r, at + 8 + i);
    }
    (
        count(r, at),
        RetryCounts::from_array(retry),
        queue_from(queue),
    )
}

/// Connections kept open: heartbeats, pulls and reads each take one, so a read
/// never waits for a heartbeat in progress (nor a heartbeat for a read).
const CONNECTIONS: usize = 4;

/// Rows sent in one statement of a batch (as arrays, unnested by the server).
const BATCH_ROWS: usize = 10_000;

/// Run when a database of a schema version before 4 is brought up to date: the
/// cycles it received count as their part 0, so that a retry is still recognised.
const RECEIVED_AS_PARTS: &str = "
INSERT INTO ra_received_parts (app_id, instance, cycle_start_ms, part, received_ms)
    SELECT app_id, instance, cycle_start_ms, 0, received_ms FROM ra_received
    ON CONFLICT DO NOTHING;
";

/// A [`Store`] in a PostgreSQL database.
///
/// Up to four connections, opened as needed and kept: each operation takes one for
/// itself, so reads, pulls and heartbeats run side by side (a broken connection is
/// closed and replaced by a new one). Every method is one transaction; a heartbeat
/// writes each table's rows in a few statements (arrays unnested by the server), in
/// key order, so concurrent heartbeats of one app cannot deadlock. Policy changes
/// lock the app's row, so two servers sharing the database cannot both write the
/// same version.
pub struct PostgresStore {
    config: postgres::Config,
    clients: Pool<Client>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection string may hold a password: not shown.
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

fn backend(e: postgres::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl PostgresStore {
    /// Connects (without TLS: use a local server or a TLS-terminating proxy) and
    /// creates the tables if needed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the server cannot be reached or refuses the
    /// schema, or holds a newer schema.
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let config: postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Backend(format!("cannot connect to PostgreSQL: {e}")))?;
        let mut client = open(&config)?;
        let mut tx = client.transaction().map_err(backend)?;
        // Two servers starting together must not both create the tables.
        tx.batch_execute("SELECT pg_advisory_xact_lock(7041995)")
            .map_err(backend)?;
        tx.batch_execute(SCHEMA).map_err(backend)?;
        let found: Option<i32> = tx
            .query_opt("SELECT MAX(version) FROM ra_schema", &[])
            .map_err(backend)?
            .and_then(|r| r.get(0));
        match found {
            Some(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::Backend(format!(
                    "the database has schema version {v}, newer than this server's \
                     {SCHEMA_VERSION}"
                )))
            }
            Some(v) if v < SCHEMA_VERSION => {
                // The schema above brought it up to date.
                if v < 4 {
                    tx.batch_execute(RECEIVED_AS_PARTS).map_err(backend)?;
                }
                tx.execute("UPDATE ra_schema SET version = $1", &[&SCHEMA_VERSION])
                    .map_err(backend)?;
            }
            Some(_) => {}
            None => {
                tx.execute(
                    "INSERT INTO ra_schema (version) VALUES ($1)",
                    &[&SCHEMA_VERSION],
                )
                .map_err(backend)?;
            }
        }
        tx.commit().map_err(backend)?;
        let clients = Pool::new(CONNECTIONS, |c: &Client| !c.is_closed());
        clients.put(client);
        // A second one now: the first point list (its points beside its other reads)
        // does not open one.
        clients.put(open(&config)?);
        Ok(PostgresStore { config, clients })
    }

    /// A connection of the pool (a transaction a panic left open was rolled back
    /// when it was dropped).
    fn client(&self) -> Result<Pooled<'_, Client>, StoreError> {
        self.clients.get(|| open(&self.config))
    }
}

fn open(config: &postgres::Config) -> Result<Client, StoreError> {
    let mut client = config
        .connect(NoTls)
        .map_err(|e| StoreError::Backend(format!("cannot connect to PostgreSQL: {e}")))?;
    // The point list of a big app is estimated costly enough for the JIT compiler,
    // whose compiling takes longer than the query (about 100 ms for 10 000 points).
    client.batch_execute("SET jit = off").map_err(backend)?;
    Ok(client)
}

fn app_id(c: &mut impl GenericClient, app: &AppKey, now_ms: i64) -> Result<i64, postgres::Error> {
    c.execute(
        "INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ($1, $2, $3)
         ON CONFLICT (app_group, app_name) DO NOTHING",
        &[&app.group, &app.name, &now_ms],
    )?;
    Ok(c.query_one(
        "SELECT id FROM ra_apps WHERE app_group = $1 AND app_name = $2",
        &[&app.group, &app.name],
    )?
    .get(0))
}

fn find_app(c: &mut impl GenericClient, app: &AppKey) -> Result<Option<i64>, postgres::Error> {
    Ok(c.query_opt(
        "SELECT id FROM ra_apps WHERE app_group = $1 AND app_name = $2",
        &[&app.group, &app.name],
    )?
    .map(|r| r.get(0)))
}

fn current_version(c: &mut impl GenericClient, app_id: i64) -> Result<i64, postgres::Error> {
    Ok(c.query_one(
        "SELECT COALESCE(MAX(version), 0) FROM ra_policy_versions WHERE app_id = $1",
        &[&app_id],
    )?
    .get(0))
}

const VERSION_COLUMNS: &str = "version, author, created_ms, comment, restored_from, diff, document";

fn version_from_row(r: &Row) -> Result<PolicyVersion, StoreError> {
    Ok(PolicyVersion {
        version: to_u64(r.get(0), "version")?,
        author: r.get(1),
        created_ms: r.get(2),
        comment: r.get(3),
        restored_from: r
            .get::<_, Option<i64>>(4)
            .map(|v| to_u64(v, "version"))
            .transpose()?,
        diff: parse_json(r.get(5), "policy diff")?,
        document: parse_json(r.get(6), "policy document")?,
    })
}

fn count(r: &Row, i: usize) -> u64 {
    u64::try_from(r.get::<_, i64>(i)).unwrap_or(0)
}

/// A statement of one point (`{point}` in `sql` becomes `AND point = $2`) or of all
/// (nothing), so that each is served by an index (`($2 IS NULL OR point = $2)` would
/// not be), with its arguments: the app (`$1`), the point if any, then `rest`, which
/// `sql` names `$a`, `$b`, `$c`.
fn by_point<'a>(
    sql: &str,
    app_id: &'a i64,
    point: &'a Option<&'a str>,
    rest: &[&'a (dyn ToSql + Sync)],
) -> (String, Vec<&'a (dyn ToSql + Sync)>) {
    let mut args: Vec<&(dyn ToSql + Sync)> = vec![app_id];
    let mut sql = match point {
        Some(p) => {
            args.push(p);
            sql.replace("{point}", "AND point = $2")
        }
        None => sql.replace("{point}", ""),
    };
    for (name, value) in ["$a", "$b", "$c"].iter().zip(rest) {
        args.push(*value);
        sql = sql.replace(name, &format!("${}", args.len()));
    }
    (sql, args)
}

fn read_cycles(
    c: &mut impl GenericClient,
    app_id: i64,
    point: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> Result<Vec<CycleRow>, postgres::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let (sql, args) = by_point(
        &format!(
            "SELECT point, cycle_start_ms, visits, passes, downgrades, exceptions, timeouts,
                peak_concurrency, instances, {}
         FROM ra_cycle_stats
         WHERE app_id = $1 {{point}} AND cycle_start_ms >= $a AND cycle_start_ms < $b
         ORDER BY point, cycle_start_ms
         LIMIT $c",
            extra_columns(str::to_owned)
        ),
        &app_id,
        &point,
        &[&from_ms, &to_ms, &limit],
    );
    let rows = c.query(&sql, &args)?;
    let mut out: Vec<CycleRow> = rows
        .iter()
        .map(|r| {
            let (cancelled, retry, queue) = read_extra(r, 9);
            CycleRow {
                cycle_start_ms: r.get(1),
                counts: PointCycle {
                    point: r.get(0),
                    visits: count(r, 2),
                    passes: count(r, 3),
                    downgrades: count(r, 4),
                    exceptions: count(r, 5),
                    timeouts: count(r, 6),
                    cancelled,
                    peak_concurrency: count(r, 7),
                    downgrades_by_reason: BTreeMap::new(),
                    seconds: None,
                    retry,
                    queue,
                    keys: None,
                },
                instances: count(r, 8),
            }
        })
        .collect();
    if out.is_empty() {
        return Ok(out);
    }
    let index: BTreeMap<(String, i64), usize> = out
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.counts.point.clone(), r.cycle_start_ms), i))
        .collect();
    let (sql, args) = by_point(
        "SELECT point, cycle_start_ms, reason, count FROM ra_cycle_reasons
         WHERE app_id = $1 {point} AND cycle_start_ms >= $a AND cycle_start_ms < $b",
        &app_id,
        &point,
        &[&from_ms, &to_ms],
    );
    for r in c.query(&sql, &args)? {
        if let Some(&i) = index.get(&(r.get::<_, String>(0), r.get::<_, i64>(1))) {
            out[i]
                .counts
                .downgrades_by_reason
                .insert(r.get(2), count(&r, 3));
        }
    }
    Ok(out)
}

/// Stores each point's hot keys as the instance's latest (unless a newer cycle's are
/// stored), and forgets the instance's of the points it reports without them.
fn record_hot_keys(
    tx: &mut postgres::Transaction<'_>,
    app: i64,
    hb: &Heartbeat,
    now_ms: i64,
) -> Result<(), postgres::Error> {
    let mut with: BTreeMap<&str, StoredHotKeys> = BTreeMap::new();
    let mut without: BTreeSet<&str> = BTreeSet::new();
    for p in &hb.points {
        match &p.keys {
            Some(k) => {
                with.insert(p.point.as_str(), StoredHotKeys::of(k));
            }
            None => {
                without.insert(p.point.as_str());
            }
        }
    }
    let with: Vec<(&str, StoredHotKeys)> = with.into_iter().collect();
    for chunk in with.chunks(BATCH_ROWS) {
        let points: Vec<&str> = chunk.iter().map(|(p, _)| *p).collect();
        let keys: Vec<&str> = chunk.iter().map(|(_, c)| c.keys.as_str()).collect();
        let tables: Vec<Option<&str>> = chunk.iter().map(|(_, c)| c.key_table.as_deref()).collect();
        tx.execute(
            "INSERT INTO ra_hot_keys (app_id, instance, point, keys, key_table,
                cycle_start_ms, received_ms)
             SELECT $1::BIGINT, $2::TEXT, u.point, u.keys, u.key_table, $3::BIGINT, $4::BIGINT
             FROM UNNEST($5::TEXT[], $6::TEXT[], $7::TEXT[]) AS u(point, keys, key_table)
             ON CONFLICT (app_id, instance, point) DO UPDATE SET
                keys = excluded.keys, key_table = excluded.key_table,
                cycle_start_ms = excluded.cycle_start_ms, received_ms = excluded.received_ms
             WHERE excluded.cycle_start_ms >= ra_hot_keys.cycle_start_ms",
            &[
                &app,
                &hb.instance,
                &hb.cycle_start_ms,
                &now_ms,
                &points,
                &keys,
                &tables,
            ],
        )?;
    }
    let without: Vec<&str> = without.into_iter().collect();
    for chunk in without.chunks(BATCH_ROWS) {
        let points: Vec<&str> = chunk.to_vec();
        tx.execute(
            "DELETE FROM ra_hot_keys WHERE app_id = $1 AND instance = $2
                AND cycle_start_ms <= $3 AND point = ANY($4)",
            &[&app, &hb.instance, &hb.cycle_start_ms, &points],
        )?;
    }
    Ok(())
}

/// Stores the heartbeat's client health and enforcement reports, replacing the
/// instance's previous ones, unless they come from an older cycle than those.
fn record_enforcement(
    tx: &mut postgres::Transaction<'_>,
    app: i64,
    hb: &Heartbeat,
    now_ms: i64,
) -> Result<(), postgres::Error> {
    if let Some(h) = &hb.client {
        tx.execute(
            "UPDATE ra_instances SET health_ms = $3, health_cycle_ms = $4,
                last_upload_error = $5, last_pull_error = $6, from_cache = $7,
                uploads_dropped = $8, pull_failures = $9, policies_rejected = $10
             WHERE app_id = $1 AND instance = $2
               AND (health_cycle_ms IS NULL OR health_cycle_ms <= $4)",
            &[
                &app,
                &hb.instance,
                &now_ms,
                &hb.cycle_start_ms,
                &h.last_upload_error,
                &h.last_pull_error,
                &h.from_cache,
                &to_i64(h.uploads_dropped),
                &to_i64(h.pull_failures),
                &to_i64(h.policies_rejected),
            ],
        )?;
    }
    let Some(entries) = &hb.enforcing else {
        return Ok(());
    };
    // The instance's row is locked until the commit: parts of one cycle arriving
    // together are applied one after the other.
    let held: Option<i64> = tx
        .query_one(
            "SELECT enforcing_cycle_ms FROM ra_instances
             WHERE app_id = $1 AND instance = $2 FOR UPDATE",
            &[&app, &hb.instance],
        )?
        .get(0);
    match held {
        // A late retry of an older cycle.
        Some(held) if held > hb.cycle_start_ms => return Ok(()),
        // Another part (or a retry) of the cycle held: its entries are added.
        Some(held) if held == hb.cycle_start_ms => {}
        // The first part of a newer cycle to arrive: it replaces the list.
        _ => {
            tx.execute(
                "UPDATE ra_instances SET enforcing_cycle_ms = $3
                 WHERE app_id = $1 AND instance = $2",
                &[&app, &hb.instance, &hb.cycle_start_ms],
            )?;
            tx.execute(
                "DELETE FROM ra_enforcing WHERE app_id = $1 AND instance = $2",
                &[&app, &hb.instance],
            )?;
        }
    }
    // One entry per point (a later one replaces an earlier one, as a row would),
    // sorted.
    let entries: BTreeMap<&str, StoredEnforcing> = entries
        .iter()
        .map(|e| (e.point.as_str(), StoredEnforcing::of(e)))
        .collect();
    let entries: Vec<StoredEnforcing> = entries.into_values().collect();
    for chunk in entries.chunks(BATCH_ROWS) {
        let column = |f: fn(&StoredEnforcing) -> Option<String>| -> Vec<Option<String>> {
            chunk.iter().map(f).collect()
        };
        let points: Vec<&str> = chunk.iter().map(|c| c.point.as_str()).collect();
        let digests: Vec<&str> = chunk.iter().map(|c| c.digest.as_str()).collect();
        let origins: Vec<&str> = chunk.iter().map(|c| c.origins.as_str()).collect();
        let local = column(|c| c.local.clone());
        let kinds = column(|c| c.breaker_kind.clone());
        let states = column(|c| c.breaker_state.clone());
        let since: Vec<Option<i64>> = chunk.iter().map(|c| c.breaker_since_ms).collect();
        let transitions: Vec<Option<i64>> = chunk.iter().map(|c| c.breaker_transitions).collect();
        tx.execute(
            "INSERT INTO ra_enforcing (app_id, instance, point, digest, origins, local,
                breaker_kind, breaker_state, breaker_since_ms, breaker_transitions,
                cycle_start_ms, received_ms)
             SELECT $1::BIGINT, $2::TEXT, u.point, u.digest, u.origins, u.local, u.kind,
                    u.state, u.since, u.transitions, $3::BIGINT, $4::BIGINT
             FROM UNNEST($5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[],
                         $10::TEXT[], $11::BIGINT[], $12::BIGINT[])
                  AS u(point, digest, origins, local, kind, state, since, transitions)
             ON CONFLICT (app_id, instance, point) DO UPDATE SET
                digest = excluded.digest, origins = excluded.origins, local = excluded.local,
                breaker_kind = excluded.breaker_kind, breaker_state = excluded.breaker_state,
                breaker_since_ms = excluded.breaker_since_ms,
                breaker_transitions = excluded.breaker_transitions,
                cycle_start_ms = excluded.cycle_start_ms, received_ms = excluded.received_ms",
            &[
                &app,
                &hb.instance,
                &hb.cycle_start_ms,
                &now_ms,
                &points,
                &digests,
                &origins,
                &local,
                &kinds,
                &states,
                &since,
                &transitions,
            ],
        )?;
    }
    Ok(())
}

/// Columns of rows keyed by `K`, built from a sorted map of them.
fn columns<K, V, const N: usize>(rows: &[(K, V)], f: impl Fn(&V) -> [i64; N]) -> Vec<Vec<i64>> {
    let mut out = vec![Vec::with_capacity(rows.len()); N];
    for (_, v) in rows {
        for (column, value) in out.iter_mut().zip(f(v)) {
            column.push(value);
        }
    }
    out
}

/// Adds `add` to the counters at `at`.
fn add<const N: usize>(at: &mut [i64; N], add: [i64; N]) {
    for (a, b) in at.iter_mut().zip(add) {
        *a = a.saturating_add(b);
    }
}

/// Adds the heartbeat's cycle figures (and their reasons) to the app's cycles: each
/// table in statements of up to [`BATCH_ROWS`] rows, in key order. A point listed
/// twice counts twice, as two rows would.
fn record_cycles(
    tx: &mut postgres::Transaction<'_>,
    app: i64,
    hb: &Heartbeat,
) -> Result<(), postgres::Error> {
    // visits, passes, downgrades, exceptions, timeouts, peak, instances, with seconds,
    // then the `extra_columns`
    let mut stats: BTreeMap<&str, [i64; 8 + EXTRA]> = BTreeMap::new();
    let mut reasons: BTreeMap<(&str, &str), [i64; 1]> = BTreeMap::new();
    let is_max: Vec<bool> = [false; 8]
        .into_iter()
        .chain(extra_list().map(is_max_column))
        .collect();
    for p in &hb.points {
        let mut row = [0; 8 + EXTRA];
        row[..8].copy_from_slice(&[
            to_i64(p.visits),
            to_i64(p.passes),
            to_i64(p.downgrades),
            to_i64(p.exceptions),
            to_i64(p.timeouts),
            to_i64(p.peak_concurrency),
            1,
            i64::from(p.seconds.is_some()),
        ]);
        row[8] = to_i64(p.cancelled);
        for (o, v) in row[9..16].iter_mut().zip(p.retry.to_array()) {
            *o = to_i64(v);
        }
        row[16..].copy_from_slice(&queue_values(p));
        let at = stats.entry(p.point.as_str()).or_default();
        for ((a, b), max) in at.iter_mut().zip(row).zip(&is_max) {
            *a = if *max {
                (*a).max(b)
            } else {
                a.saturating_add(b)
            };
        }
        for (reason, n) in p.downgrades_by_reason.iter().filter(|(_, n)| **n > 0) {
            add(
                reasons
                    .entry((p.point.as_str(), reason.as_str()))
                    .or_default(),
                [to_i64(*n)],
            );
        }
    }
    let stats: Vec<(&str, [i64; 8 + EXTRA])> = stats.into_iter().collect();
    let extra = extra_columns(str::to_owned);
    let extra_arrays = (12..12 + EXTRA)
        .map(|i| format!("${i}::BIGINT[]"))
        .collect::<Vec<_>>()
        .join(", ");
    let extra_values = extra_columns(|c| format!("u.{c}"));
    let extra_sums = extra_columns(|c| {
        if is_max_column(c) {
            format!("{c} = GREATEST(ra_cycle_stats.{c}, excluded.{c})")
        } else {
            format!("{c} = ra_cycle_stats.{c} + excluded.{c}")
        }
    });
    for chunk in stats.chunks(BATCH_ROWS) {
        let points: Vec<&str> = chunk.iter().map(|(p, _)| *p).collect();
        let c = columns(chunk, |v| *v);
        tx.execute(
            &format!(
                "INSERT INTO ra_cycle_stats (app_id, point, cycle_start_ms, visits, passes,
                downgrades, exceptions, timeouts, peak_concurrency, instances,
                second_instances, {extra})
             SELECT $1::BIGINT, u.point, $2::BIGINT, u.visits, u.passes, u.downgrades,
                    u.exceptions, u.timeouts, u.peak, u.instances, u.second_instances,
                    {extra_values}
             FROM UNNEST($3::TEXT[], $4::BIGINT[], $5::BIGINT[], $6::BIGINT[],
                         $7::BIGINT[], $8::BIGINT[], $9::BIGINT[], $10::BIGINT[],
                         $11::BIGINT[], {extra_arrays})
                  AS u(point, visits, passes, downgrades, exceptions, timeouts, peak,
                       instances, second_instances, {extra})
             ON CONFLICT (app_id, point, cycle_start_ms) DO UPDATE SET
                {extra_sums},
                second_instances =
                    ra_cycle_stats.second_instances + excluded.second_instances,
                visits = ra_cycle_stats.visits + excluded.visits,
                passes = ra_cycle_stats.passes + excluded.passes,
                downgrades = ra_cycle_stats.downgrades + excluded.downgrades,
                exceptions = ra_cycle_stats.exceptions + excluded.exceptions,
                timeouts = ra_cycle_stats.timeouts + excluded.timeouts,
                peak_concurrency = ra_cycle_stats.peak_concurrency + excluded.peak_concurrency,
                instances = ra_cycle_stats.instances + excluded.instances"
            ),
            &[&app as &(dyn ToSql + Sync), &hb.cycle_start_ms, &points]
                .into_iter()
                .chain(c.iter().map(|v| v as &(dyn ToSql + Sync)))
                .collect::<Vec<_>>(),
        )?;
    }
    let reasons: Vec<((&str, &str), [i64; 1])> = reasons.into_iter().collect();
    for chunk in reasons.chunks(BATCH_ROWS) {
        let points: Vec<&str> = chunk.iter().map(|((p, _), _)| *p).collect();
        let names: Vec<&str> = chunk.iter().map(|((_, r), _)| *r).collect();
        let c = columns(chunk, |v| *v);
        tx.execute(
            "INSERT INTO ra_cycle_reasons (app_id, point, cycle_start_ms, reason, count)
             SELECT $1::BIGINT, u.point, $2::BIGINT, u.reason, u.count
             FROM UNNEST($3::TEXT[], $4::TEXT[], $5::BIGINT[]) AS u(point, reason, count)
             ON CONFLICT (app_id, point, cycle_start_ms, reason) DO UPDATE SET
                count = ra_cycle_reasons.count + excluded.count",
            &[&app, &hb.cycle_start_ms, &points, &names, &c[0]],
        )?;
    }
    Ok(())
}

/// A row of the seconds' reasons: (point, second, reason) and its count.
type SecondReason<'a> = ((&'a str, i64, &'a str), [i64; 1]);

/// Adds the heartbeat's 1-second buckets (those with traffic) to the app's seconds.
fn record_seconds(
    tx: &mut postgres::Transaction<'_>,
    app: i64,
    hb: &Heartbeat,
) -> Result<(), postgres::Error> {
    if hb.points.iter().all(|p| p.seconds.is_none()) {
        return Ok(());
    }
    // visits, passes, downgrades, exceptions, timeouts, instances, measured, sum_us,
    // max_us
    let mut counts: BTreeMap<(&str, i64), [i64; 9]> = BTreeMap::new();
    let mut reasons: BTreeMap<(&str, i64, &str), [i64; 1]> = BTreeMap::new();
    for p in &hb.points {
        let Some(seconds) = &p.seconds else {
            continue;
        };
        for (k, c) in seconds.seconds.iter().enumerate() {
            if seconds.is_empty_at(k) {
                continue;
            }
            let at = hb.cycle_start_ms + SECOND_MS * k as i64;
            let row = counts.entry((p.point.as_str(), at)).or_default();
            add(
                row,
                [
                    to_i64(c.visits),
                    to_i64(c.passes),
                    to_i64(c.downgrades),
                    to_i64(c.exceptions),
                    to_i64(c.timeouts),
                    1,
                    to_i64(c.measured),
                    to_i64(c.sum_us),
                    0,
                ],
            );
            row[8] = row[8].max(to_i64(c.max_us));
            for (reason, n) in &seconds.downgrades_by_reason {
                if n[k] > 0 {
                    add(
                        reasons
                            .entry((p.point.as_str(), at, reason.as_str()))
                            .or_default(),
                        [to_i64(n[k])],
                    );
                }
            }
        }
    }
    let counts: Vec<((&str, i64), [i64; 9])> = counts.into_iter().collect();
    for chunk in counts.chunks(BATCH_ROWS) {
        let points: Vec<&str> = chunk.iter().map(|((p, _), _)| *p).collect();
        let at: Vec<i64> = chunk.iter().map(|((_, t), _)| *t).collect();
        let c = columns(chunk, |v| *v);
        tx.execute(
            "INSERT INTO ra_second_stats (app_id, point, second_ms, visits, passes,
                downgrades, exceptions, timeouts, instances, measured, sum_us, max_us)
             SELECT $1::BIGINT, u.point, u.at, u.visits, u.passes, u.downgrades,
                    u.exceptions, u.timeouts, u.instances, u.measured, u.sum_us, u.max_us
             FROM UNNEST($2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[],
                         $6::BIGINT[], $7::BIGINT[], $8::BIGINT[], $9::BIGINT[],
                         $10::BIGINT[], $11::BIGINT[], $12::BIGINT[])
                  AS u(point, at, visits, passes, downgrades, exceptions, timeouts,
                       instances, measured, sum_us, max_us)
             ON CONFLICT (app_id, point, second_ms) DO UPDATE SET
                visits = ra_second_stats.visits + excluded.visits,
                passes = ra_second_stats.passes + excluded.passes,
                downgrades = ra_second_stats.downgrades + excluded.downgrades,
                exceptions = ra_second_stats.exceptions + excluded.exceptions,
                timeouts = ra_second_stats.timeouts + excluded.timeouts,
                instances = ra_second_stats.instances + excluded.instances,
                measured = ra_second_stats.measured + excluded.measured,
                sum_us = ra_second_stats.sum_us + excluded.sum_us,
                max_us = GREATEST(ra_second_stats.max_us, excluded.max_us)",
            &[
                &app, &points, &at, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8],
            ],
        )?;
    }
    let reasons: Vec<SecondReason<'_>> = reasons.into_iter().collect();
    for chunk in reasons.chunks(BATCH_ROWS) {
        let points: Vec<&str> = chunk.iter().map(|((p, _, _), _)| *p).collect();
        let at: Vec<i64> = chunk.iter().map(|((_, t, _), _)| *t).collect();
        let names: Vec<&str> = chunk.iter().map(|((_, _, r), _)| *r).collect();
        let c = columns(chunk, |v| *v);
        tx.execute(
            "INSERT INTO ra_second_reasons (app_id, point, second_ms, reason, count)
             SELECT $1::BIGINT, u.point, u.at, u.reason, u.count
             FROM UNNEST($2::TEXT[], $3::BIGINT[], $4::TEXT[], $5::BIGINT[])
                  AS u(point, at, reason, count)
             ON CONFLICT (app_id, point, second_ms, reason) DO UPDATE SET
                count = ra_second_reasons.count + excluded.count",
            &[&app, &points, &at, &names, &c[0]],
        )?;
    }
    Ok(())
}

/// Reads second rows (per point, or summed over points) and attaches their
/// per-reason counts.
fn read_seconds(
    c: &mut impl GenericClient,
    app_id: i64,
    point: Option<&str>,
    sum_points: bool,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> Result<Vec<SecondRow>, postgres::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = if sum_points {
        "SELECT NULL::TEXT, second_ms, SUM(visits)::BIGINT, SUM(passes)::BIGINT,
                SUM(downgrades)::BIGINT, SUM(exceptions)::BIGINT, SUM(timeouts)::BIGINT,
                MAX(instances), SUM(measured)::BIGINT, SUM(sum_us)::BIGINT, MAX(max_us)
         FROM ra_second_stats
         WHERE app_id = $1 {point} AND second_ms >= $a AND second_ms < $b
         GROUP BY second_ms ORDER BY second_ms LIMIT $c"
    } else {
        "SELECT point, second_ms, visits, passes, downgrades, exceptions, timeouts, instances,
                measured, sum_us, max_us
         FROM ra_second_stats
         WHERE app_id = $1 {point} AND second_ms >= $a AND second_ms < $b
         ORDER BY point, second_ms LIMIT $c"
    };
    let (sql, args) = by_point(sql, &app_id, &point, &[&from_ms, &to_ms, &limit]);
    let rows = c.query(&sql, &args)?;
    let mut out: Vec<SecondRow> = rows
        .iter()
        .map(|r| SecondRow {
            point: r.get(0),
            second_start_ms: r.get(1),
            counts: SecondCounts {
                visits: count(r, 2),
                passes: count(r, 3),
                downgrades: count(r, 4),
                exceptions: count(r, 5),
                timeouts: count(r, 6),
                measured: count(r, 8),
                sum_us: count(r, 9),
                max_us: count(r, 10),
            },
            downgrades_by_reason: BTreeMap::new(),
            instances: count(r, 7),
        })
        .collect();
    if out.is_empty() {
        return Ok(out);
    }
    let index: BTreeMap<(Option<String>, i64), usize> = out
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.point.clone(), r.second_start_ms), i))
        .collect();
    let sql = if sum_points {
        "SELECT NULL::TEXT, second_ms, reason, SUM(count)::BIGINT FROM ra_second_reasons
         WHERE app_id = $1 {point} AND second_ms >= $a AND second_ms < $b
         GROUP BY second_ms, reason"
    } else {
        "SELECT point, second_ms, reason, count FROM ra_second_reasons
         WHERE app_id = $1 {point} AND second_ms >= $a AND second_ms < $b"
    };
    let (sql, args) = by_point(sql, &app_id, &point, &[&from_ms, &to_ms]);
    for r in c.query(&sql, &args)? {
        if let Some(&i) = index.get(&(r.get::<_, Option<String>>(0), r.get::<_, i64>(1))) {
            out[i].downgrades_by_reason.insert(r.get(2), count(&r, 3));
        }
    }
    Ok(out)
}

/// Reads cycle rows summed over points, with their per-reason counts.
fn read_cycles_summed(
    c: &mut impl GenericClient,
    app_id: i64,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> Result<Vec<CycleRow>, postgres::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = c.query(
        &format!(
            "SELECT cycle_start_ms, SUM(visits)::BIGINT, SUM(passes)::BIGINT,
                SUM(downgrades)::BIGINT, SUM(exceptions)::BIGINT, SUM(timeouts)::BIGINT,
                SUM(peak_concurrency)::BIGINT, MAX(instances), {}
         FROM ra_cycle_stats
         WHERE app_id = $1 AND cycle_start_ms >= $2 AND cycle_start_ms < $3
         GROUP BY cycle_start_ms ORDER BY cycle_start_ms LIMIT $4",
            extra_columns(|c| if is_max_column(c) {
                format!("MAX({c})::BIGINT")
            } else {
                format!("SUM({c})::BIGINT")
            })
        ),
        &[&app_id, &from_ms, &to_ms, &limit],
    )?;
    let mut out: Vec<CycleRow> = rows
        .iter()
        .map(|r| {
            let (cancelled, retry, queue) = read_extra(r, 8);
            CycleRow {
                cycle_start_ms: r.get(0),
                counts: PointCycle {
                    point: String::new(),
                    visits: count(r, 1),
                    passes: count(r, 2),
                    downgrades: count(r, 3),
                    exceptions: count(r, 4),
                    timeouts: count(r, 5),
                    cancelled,
                    peak_concurrency: count(r, 6),
                    downgrades_by_reason: BTreeMap::new(),
                    seconds: None,
                    retry,
                    queue,
                    keys: None,
                },
                instances: count(r, 7),
            }
        })
        .collect();
    if out.is_empty() {
        return Ok(out);
    }
    let index: BTreeMap<i64, usize> = out
        .iter()
        .enumerate()
        .map(|(i, r)| (r.cycle_start_ms, i))
        .collect();
    for r in c.query(
        "SELECT cycle_start_ms, reason, SUM(count)::BIGINT FROM ra_cycle_reasons
         WHERE app_id = $1 AND cycle_start_ms >= $2 AND cycle_start_ms < $3
         GROUP BY cycle_start_ms, reason",
        &[&app_id, &from_ms, &to_ms],
    )? {
        if let Some(&i) = index.get(&r.get::<_, i64>(0)) {
            out[i]
                .counts
                .downgrades_by_reason
                .insert(r.get(1), count(&r, 2));
        }
    }
    Ok(out)
}

impl Store for PostgresStore {
    fn record_heartbeat(&self, hb: &Heartbeat, now_ms: i64) -> Result<Ingested, StoreError> {
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        let app = app_id(&mut tx, &hb.app, now_ms).map_err(backend)?;
        let version = hb.policy_version.map(to_i64);
        // The newest cycle of the instance in our JSON protocol, the one that carries
        // hot keys (SDS's leaves it as it is).
        let keys_cycle = (hb.protocol == crate::model::Protocol::Json).then_some(hb.cycle_start_ms);
        tx.execute(
            "INSERT INTO ra_instances (app_id, instance, host, ip, protocol, last_heartbeat_ms,
                                       policy_version, keys_cycle_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (app_id, instance) DO UPDATE SET
                host = excluded.host, ip = excluded.ip, protocol = excluded.protocol,
                last_heartbeat_ms = excluded.last_heartbeat_ms,
                policy_version = COALESCE(excluded.policy_version, ra_instances.policy_version),
                keys_cycle_ms = GREATEST(ra_instances.keys_cycle_ms, excluded.keys_cycle_ms)",
            &[
                &app,
                &hb.instance,
                &hb.host,
                &hb.ip,
                &hb.protocol.as_str(),
                &now_ms,
                &version,
                &keys_cycle,
            ],
        )
        .map_err(backend)?;
        let fresh = tx
            .execute(
                "INSERT INTO ra_received_parts (app_id, instance, cycle_start_ms, part,
                    received_ms)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    &app,
                    &hb.instance,
                    &hb.cycle_start_ms,
                    &i32::try_from(hb.part).unwrap_or(i32::MAX),
                    &now_ms,
                ],
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
        record_enforcement(&mut tx, app, hb, now_ms).map_err(backend)?;
        if hb.protocol == crate::model::Protocol::Json {
            record_hot_keys(&mut tx, app, hb, now_ms).map_err(backend)?;
        }
        // The points, in name order (a set), in statements of up to BATCH_ROWS.
        let mentioned: Vec<&str> = mentioned.into_iter().collect();
        for chunk in mentioned.chunks(BATCH_ROWS) {
            let flags: Vec<bool> = chunk.iter().map(|n| declared.contains(n)).collect();
            tx.execute(
                "INSERT INTO ra_points (app_id, name, declared, first_seen_ms, last_seen_ms)
                 SELECT $1::BIGINT, u.name, u.declared, $4::BIGINT, $4::BIGINT
                 FROM UNNEST($2::TEXT[], $3::BOOLEAN[]) AS u(name, declared)
                 ON CONFLICT (app_id, name) DO UPDATE SET
                    declared = ra_points.declared OR excluded.declared,
                    last_seen_ms = excluded.last_seen_ms",
                &[&app, &chunk, &flags, &now_ms],
            )
            .map_err(backend)?;
        }
        if fresh {
            record_cycles(&mut tx, app, hb).map_err(backend)?;
            record_seconds(&mut tx, app, hb).map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(if fresh {
            Ingested::Stored
        } else {
            Ingested::Duplicate
        })
    }

    fn record_pull(&self, pull: &Pull<'_>, now_ms: i64) -> Result<(), StoreError> {
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        let app = app_id(&mut tx, pull.app, now_ms).map_err(backend)?;
        tx.execute(
            "INSERT INTO ra_instances (app_id, instance, host, ip, protocol, last_pull_ms,
                                       policy_version, breakers)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (app_id, instance) DO UPDATE SET
                host = excluded.host, ip = excluded.ip, protocol = excluded.protocol,
                last_pull_ms = excluded.last_pull_ms,
                policy_version = excluded.policy_version, breakers = excluded.breakers",
            &[
                &app,
                &pull.instance,
                &pull.host,
                &pull.ip,
                &pull.protocol.as_str(),
                &now_ms,
                &to_i64(pull.version),
                &pull.breakers,
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
        let mut client = self.client()?;
        let rows = client
            .query(
                "SELECT i.instance, i.last_pull_ms, i.breakers
                 FROM ra_instances i JOIN ra_apps a ON a.id = i.app_id
                 WHERE a.app_group = $1 AND a.app_name = $2 AND i.breakers IS NOT NULL
                   AND i.last_pull_ms >= $3
                 ORDER BY i.instance",
                &[&app.group, &app.name, &since_ms],
            )
            .map_err(backend)?;
        Ok(rows
            .iter()
            .map(|r| BreakerReports {
                instance: r.get(0),
                pulled_ms: r.get(1),
                breakers: r.get(2),
            })
            .collect())
    }

    fn apps(&self) -> Result<Vec<AppSummary>, StoreError> {
        let mut client = self.client()?;
        let rows = client
            .query(
                "SELECT a.app_group, a.app_name,
                    (SELECT COALESCE(MAX(version), 0) FROM ra_policy_versions v
                        WHERE v.app_id = a.id),
                    (SELECT MAX(GREATEST(COALESCE(i.last_heartbeat_ms, 0),
                                         COALESCE(i.last_pull_ms, 0)))
                        FROM ra_instances i WHERE i.app_id = a.id),
                    (SELECT COUNT(*) FROM ra_instances i WHERE i.app_id = a.id)
                 FROM ra_apps a ORDER BY a.app_group, a.app_name",
                &[],
            )
            .map_err(backend)?;
        rows.iter()
            .map(|r| {
                Ok(AppSummary {
                    group: r.get(0),
                    name: r.get(1),
                    policy_version: to_u64(r.get(2), "version")?,
                    last_seen_ms: r.get::<_, Option<i64>>(3).filter(|&t| t > 0),
                    instances: to_u64(r.get(4), "instance count")?,
                })
            })
            .collect()
    }

    fn points(&self, app: &AppKey) -> Result<Vec<PointInfo>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        // One query for the whole list: each point's latest cycle is read backwards
        // from the primary key (app_id, point, cycle_start_ms) (the ORDER BY names its
        // columns, so that no other index is taken for it, even before the table has
        // statistics), its reasons by their index if it had a downgrade (the reasons
        // add up to at most the downgrades): at most two index probes per point.
        let rows = client
            .query(
                &format!(
                    "SELECT p.name, p.declared, p.first_seen_ms, p.last_seen_ms, s.cycle_start_ms,
                    s.visits, s.passes, s.downgrades, s.exceptions, s.timeouts,
                    s.peak_concurrency, s.instances,
                    CASE WHEN s.downgrades > 0 THEN
                        (SELECT json_object_agg(r.reason, r.count)::TEXT
                         FROM ra_cycle_reasons r
                         WHERE r.app_id = p.app_id AND r.point = p.name
                           AND r.cycle_start_ms = s.cycle_start_ms)
                    END,
                    {extra}
                 FROM ra_points p
                 LEFT JOIN LATERAL (
                    SELECT * FROM ra_cycle_stats c
                    WHERE c.app_id = p.app_id AND c.point = p.name
                    ORDER BY c.point DESC, c.cycle_start_ms DESC LIMIT 1
                 ) s ON TRUE
                 WHERE p.app_id = $1 ORDER BY p.name",
                    extra = extra_columns(|c| format!("s.{c}"))
                ),
                &[&app_id],
            )
            .map_err(backend)?;
        let mut points = Vec::with_capacity(rows.len());
        for r in rows {
            let name: String = r.get(0);
            let last_cycle = match r.get::<_, Option<i64>>(4) {
                None => None,
                Some(t) => {
                    let reasons: Option<String> = r.get(12);
                    let downgrades_by_reason: BTreeMap<String, u64> = match reasons {
                        Some(text) => parse_json(&text, "downgrade reasons")?,
                        None => BTreeMap::new(),
                    };
                    let (cancelled, retry, queue) = read_extra(&r, 13);
                    Some(CycleRow {
                        cycle_start_ms: t,
                        counts: PointCycle {
                            point: name.clone(),
                            visits: count(&r, 5),
                            passes: count(&r, 6),
                            downgrades: count(&r, 7),
                            exceptions: count(&r, 8),
                            timeouts: count(&r, 9),
                            cancelled,
                            peak_concurrency: count(&r, 10),
                            downgrades_by_reason,
                            seconds: None,
                            retry,
                            queue,
                            keys: None,
                        },
                        instances: count(&r, 11),
                    })
                }
            };
            points.push(PointInfo {
                name,
                declared: r.get(1),
                has_policy: false,
                first_seen_ms: Some(r.get(2)),
                last_seen_ms: Some(r.get(3)),
                last_cycle,
            });
        }
        Ok(points)
    }

    fn instances(&self, app: &AppKey) -> Result<Vec<InstanceInfo>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        let rows = client
            .query(
                "SELECT instance, host, ip, protocol, last_heartbeat_ms, last_pull_ms,
                        policy_version, health_ms, last_upload_error, last_pull_error,
                        from_cache, uploads_dropped, pull_failures, policies_rejected
                 FROM ra_instances WHERE app_id = $1 ORDER BY instance",
                &[&app_id],
            )
            .map_err(backend)?;
        let counter = |r: &Row, i: usize| {
            r.get::<_, Option<i64>>(i)
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0)
        };
        Ok(rows
            .iter()
            .map(|r| {
                let health_ms: Option<i64> = r.get(7);
                InstanceInfo {
                    instance: r.get(0),
                    host: r.get(1),
                    ip: r.get(2),
                    protocol: r.get(3),
                    last_heartbeat_ms: r.get(4),
                    last_pull_ms: r.get(5),
                    policy_version: r
                        .get::<_, Option<i64>>(6)
                        .and_then(|v| u64::try_from(v).ok()),
                    client: health_ms.map(|_| ClientHealth {
                        last_upload_error: r.get(8),
                        last_pull_error: r.get(9),
                        from_cache: r.get::<_, Option<bool>>(10).unwrap_or(false),
                        uploads_dropped: counter(r, 11),
                        pull_failures: counter(r, 12),
                        policies_rejected: counter(r, 13),
                    }),
                    client_reported_ms: health_ms,
                }
            })
            .collect())
    }

    fn enforcement(
        &self,
        app: &AppKey,
        point: Option<&str>,
        with_local: bool,
    ) -> Result<Vec<EnforcementRow>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        // Of one point: the index (app_id, point); of all: the primary key's prefix.
        let (sql, args) = by_point(
            "SELECT instance, point, digest, origins,
                    CASE WHEN $a THEN local END, local IS NOT NULL,
                    breaker_kind, breaker_state, breaker_since_ms, breaker_transitions,
                    cycle_start_ms, received_ms
             FROM ra_enforcing WHERE app_id = $1 {point}
             ORDER BY point, instance",
            &app_id,
            &point,
            &[&with_local],
        );
        let rows = client.query(&sql, &args).map_err(backend)?;
        rows.iter()
            .map(|r| {
                let stored = StoredEnforcing {
                    point: r.get(1),
                    digest: r.get(2),
                    origins: r.get(3),
                    local: r.get(4),
                    breaker_kind: r.get(6),
                    breaker_state: r.get(7),
                    breaker_since_ms: r.get(8),
                    breaker_transitions: r.get(9),
                };
                Ok(EnforcementRow {
                    instance: r.get(0),
                    entry: stored.into_entry()?,
                    has_local: r.get(5),
                    cycle_start_ms: r.get(10),
                    received_ms: r.get(11),
                })
            })
            .collect()
    }

    fn hot_keys(&self, app: &AppKey) -> Result<Vec<HotKeysRow>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        // The primary key's prefix (app_id), each row's instance by its own; rows of
        // an older cycle than the instance's newest are stale (the point had no
        // traffic since).
        let rows = client
            .query(
                "SELECT h.instance, h.point, h.keys, h.key_table, h.cycle_start_ms,
                    h.received_ms
                 FROM ra_hot_keys h LEFT JOIN ra_instances i
                    ON i.app_id = h.app_id AND i.instance = h.instance
                 WHERE h.app_id = $1
                   AND h.cycle_start_ms >= COALESCE(i.keys_cycle_ms, h.cycle_start_ms)
                 ORDER BY h.point, h.instance",
                &[&app_id],
            )
            .map_err(backend)?;
        rows.iter()
            .map(|r| {
                let stored = StoredHotKeys {
                    keys: r.get(2),
                    key_table: r.get(3),
                };
                Ok(HotKeysRow {
                    instance: r.get(0),
                    point: r.get(1),
                    keys: stored.into_keys()?,
                    cycle_start_ms: r.get(4),
                    received_ms: r.get(5),
                })
            })
            .collect()
    }

    fn stats(
        &self,
        app: &AppKey,
        point: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<CycleRow>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        read_cycles(&mut *client, app_id, point, from_ms, to_ms, limit).map_err(backend)
    }

    fn stats_summed(
        &self,
        app: &AppKey,
        from_ms: i64,
        to_ms: i64,
        limit: usize,
    ) -> Result<Vec<CycleRow>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        read_cycles_summed(&mut *client, app_id, from_ms, to_ms, limit).map_err(backend)
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
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        read_seconds(
            &mut *client,
            app_id,
            point,
            sum_points,
            from_ms,
            to_ms,
            limit,
        )
        .map_err(backend)
    }

    fn cycles_without_seconds(
        &self,
        app: &AppKey,
        point: Option<&str>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        let from = from_ms - CYCLE_MS;
        let (sql, args) = by_point(
            "SELECT DISTINCT cycle_start_ms FROM ra_cycle_stats
             WHERE app_id = $1 {point} AND cycle_start_ms > $a AND cycle_start_ms < $b
               AND instances > second_instances
               AND visits + exceptions + timeouts > 0
             ORDER BY cycle_start_ms",
            &app_id,
            &point,
            &[&from, &to_ms],
        );
        let rows = client.query(&sql, &args).map_err(backend)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn current_version(&self, app: &AppKey) -> Result<u64, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(0);
        };
        to_u64(
            current_version(&mut *client, app_id).map_err(backend)?,
            "version",
        )
    }

    fn policy_version(
        &self,
        app: &AppKey,
        version: u64,
    ) -> Result<Option<PolicyVersion>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(None);
        };
        let row = client
            .query_opt(
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM ra_policy_versions
                     WHERE app_id = $1 AND version = $2"
                ),
                &[&app_id, &to_i64(version)],
            )
            .map_err(backend)?;
        row.as_ref().map(version_from_row).transpose()
    }

    fn policy_history(&self, app: &AppKey) -> Result<Vec<PolicyVersion>, StoreError> {
        let mut client = self.client()?;
        let Some(app_id) = find_app(&mut *client, app).map_err(backend)? else {
            return Ok(Vec::new());
        };
        let rows = client
            .query(
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM ra_policy_versions
                     WHERE app_id = $1 ORDER BY version DESC"
                ),
                &[&app_id],
            )
            .map_err(backend)?;
        rows.iter().map(version_from_row).collect()
    }

    fn commit_policy(
        &self,
        app: &AppKey,
        change: &NewPolicyVersion,
    ) -> Result<PolicyVersion, StoreError> {
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        let app_id = app_id(&mut tx, app, change.created_ms).map_err(backend)?;
        // Serialises changes of this app across servers sharing the database.
        tx.execute("SELECT 1 FROM ra_apps WHERE id = $1 FOR UPDATE", &[&app_id])
            .map_err(backend)?;
        let current = to_u64(
            current_version(&mut tx, app_id).map_err(backend)?,
            "version",
        )?;
        if current != change.base_version {
            return Err(StoreError::Conflict { current });
        }
        let version = current + 1;
        let inserted = tx.execute(
            "INSERT INTO ra_policy_versions (app_id, version, author, created_ms, comment,
                restored_from, diff, document)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &app_id,
                &to_i64(version),
                &change.author,
                &change.created_ms,
                &change.comment,
                &change.restored_from.map(to_i64),
                &to_json(&change.diff),
                &to_json(&change.document),
            ],
        );
        match inserted {
            Ok(_) => {}
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                return Err(StoreError::Conflict { current: version });
            }
            Err(e) => return Err(backend(e)),
        }
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
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        let deleted = tx
            .execute(
                "DELETE FROM ra_cycle_stats WHERE cycle_start_ms < $1",
                &[&before_ms],
            )
            .map_err(backend)?;
        tx.execute(
            "DELETE FROM ra_cycle_reasons WHERE cycle_start_ms < $1",
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM ra_received WHERE cycle_start_ms < $1",
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM ra_received_parts WHERE cycle_start_ms < $1",
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM ra_enforcing WHERE received_ms < $1",
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            "DELETE FROM ra_hot_keys WHERE received_ms < $1",
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(deleted)
    }

    fn prune_seconds(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        let deleted = tx
            .execute(
                "DELETE FROM ra_second_stats WHERE second_ms < $1",
                &[&before_ms],
            )
            .map_err(backend)?;
        tx.execute(
            "DELETE FROM ra_second_reasons WHERE second_ms < $1",
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(deleted)
    }

    fn prune_silent(&self, before_ms: i64) -> Result<Forgotten, StoreError> {
        let mut client = self.client()?;
        let mut tx = client.transaction().map_err(backend)?;
        let silent = "GREATEST(COALESCE(i.last_heartbeat_ms, 0), COALESCE(i.last_pull_ms, 0)) < $1";
        tx.execute(
            &format!(
                "DELETE FROM ra_enforcing e USING ra_instances i
                 WHERE i.app_id = e.app_id AND i.instance = e.instance AND {silent}"
            ),
            &[&before_ms],
        )
        .map_err(backend)?;
        tx.execute(
            &format!(
                "DELETE FROM ra_hot_keys h USING ra_instances i
                 WHERE i.app_id = h.app_id AND i.instance = h.instance AND {silent}"
            ),
            &[&before_ms],
        )
        .map_err(backend)?;
        let instances = tx
            .execute(
                &format!("DELETE FROM ra_instances i WHERE {silent}"),
                &[&before_ms],
            )
            .map_err(backend)?;
        // A point stays while it is mentioned, declared by an app that still sends
        // heartbeats, or configured in its app's current policy.
        let points = tx
            .execute(
                "DELETE FROM ra_points p WHERE p.last_seen_ms < $1
                   AND NOT (p.declared AND EXISTS (SELECT 1 FROM ra_instances i
                       WHERE i.app_id = p.app_id AND i.last_heartbeat_ms >= $1))
                   AND NOT EXISTS (SELECT 1 FROM ra_policy_versions v
                       WHERE v.app_id = p.app_id
                         AND v.version = (SELECT MAX(w.version) FROM ra_policy_versions w
                                          WHERE w.app_id = p.app_id)
                         AND (v.document::JSONB -> 'points') ? p.name)",
                &[&before_ms],
            )
            .map_err(backend)?;
        let apps: Vec<i64> = tx
            .query(
                "SELECT id FROM ra_apps a WHERE created_ms < $1
                   AND NOT EXISTS (SELECT 1 FROM ra_instances i WHERE i.app_id = a.id)
                   AND NOT EXISTS (SELECT 1 FROM ra_points p WHERE p.app_id = a.id)
                   AND NOT EXISTS (SELECT 1 FROM ra_policy_versions v WHERE v.app_id = a.id)
                   AND NOT EXISTS (SELECT 1 FROM ra_cycle_stats c WHERE c.app_id = a.id)
                   AND NOT EXISTS (SELECT 1 FROM ra_second_stats s WHERE s.app_id = a.id)",
                &[&before_ms],
            )
            .map_err(backend)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !apps.is_empty() {
            // Whatever is left of them (receipts, reasons).
            for table in [
                "ra_cycle_reasons",
                "ra_second_stats",
                "ra_second_reasons",
                "ra_received",
                "ra_received_parts",
                "ra_enforcing",
                "ra_hot_keys",
            ] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE app_id = ANY($1)"),
                    &[&apps],
                )
                .map_err(backend)?;
            }
            tx.execute("DELETE FROM ra_apps WHERE id = ANY($1)", &[&apps])
                .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(Forgotten {
            instances,
            points,
            apps: apps.len() as u64,
        })
    }
}
