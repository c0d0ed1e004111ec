//! The storage scenarios on an SQLite file (the same ones run on PostgreSQL in
//! `postgres.rs`).

mod common;

use common::{hot_keys, scenarios, TempDir};
use resilience_admin::server::StorageConfig;

fn file(dir: &TempDir) -> StorageConfig {
    StorageConfig::Sqlite(dir.path().join("admin.db"))
}

/// Takes a file of this version back to schema version 9: without the points' index
/// by `last_seen_ms`, the instances' `keys_cycle_ms` and (version 11) `breakers`,
/// with the hot keys' index by point.
fn without_v10() -> String {
    "DROP INDEX points_last_seen;
     ALTER TABLE instances DROP COLUMN keys_cycle_ms;
     ALTER TABLE instances DROP COLUMN breakers;
     CREATE INDEX hot_keys_point ON hot_keys (app_id, point);"
        .to_owned()
}

/// Takes a file of this version back to schema version 8: without the hot keys.
fn without_v9() -> String {
    without_v10() + "\nDROP TABLE hot_keys;"
}

/// Takes a file of this version back to schema version 7: without the queues'
/// evicted waiters.
fn without_v8() -> String {
    without_v9() + "\n" + &drop_columns(&["queue_evicted"])
}

/// Takes a file of this version back to schema version 6: without the cycles'
/// queues.
fn without_v7() -> String {
    without_v8()
        + "\n"
        + &drop_columns(&[
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
        ])
}

/// Takes a file of this version back to schema version 5: without the cycles'
/// queues, cancelled calls and retry counters.
fn without_v6() -> String {
    without_v7()
        + "\n"
        + &drop_columns(&[
            "cancelled",
            "retry_calls",
            "retry_attempts",
            "retry_retries",
            "retry_exhausted",
            "retry_refused_by_budget",
            "retry_hedges",
            "retry_cancelled",
        ])
}

fn drop_columns(columns: &[&str]) -> String {
    columns
        .iter()
        .map(|c| format!("ALTER TABLE cycle_stats DROP COLUMN {c};"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn sqlite_aggregation() {
    let dir = TempDir::new("agg");
    scenarios::aggregation(file(&dir));
}

#[test]
fn sqlite_restart() {
    let dir = TempDir::new("restart2");
    scenarios::restart(file(&dir));
}

#[test]
fn sqlite_conflict_and_restore() {
    let dir = TempDir::new("conflict");
    scenarios::conflict_and_restore(file(&dir));
}

#[test]
fn sqlite_prune() {
    let dir = TempDir::new("prune");
    scenarios::prune(file(&dir));
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = TempDir::new("schema");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let e = resilience_admin::store::SqliteStore::open(&path).unwrap_err();
    assert!(e.to_string().contains("schema version 99"), "{e}");
}

#[test]
fn sqlite_enforcement() {
    let dir = TempDir::new("enforcing");
    scenarios::enforcement(file(&dir));
}

/// A file of schema version 1 (before enforcement reports) opens: its instances are
/// kept, and new heartbeats store what they enforce.
/// (Its instance last sent a heartbeat at the manual clock's start, within the
/// retention: an instance silent for longer is forgotten by the first pruning.)
#[test]
fn a_version_1_file_is_migrated() {
    let dir = TempDir::new("migrate");
    let path = dir.path().join("admin.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE apps (id INTEGER PRIMARY KEY, app_group TEXT NOT NULL,
             app_name TEXT NOT NULL, created_ms INTEGER NOT NULL, UNIQUE (app_group, app_name));
         CREATE TABLE instances (app_id INTEGER NOT NULL REFERENCES apps(id),
             instance TEXT NOT NULL, host TEXT NOT NULL, ip TEXT NOT NULL,
             protocol TEXT NOT NULL, last_heartbeat_ms INTEGER, last_pull_ms INTEGER,
             policy_version INTEGER, PRIMARY KEY (app_id, instance));
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO instances VALUES (1, 'old-1', 'h', '10.0.0.1', 'json', 1767225600000, NULL, 2);
         PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(conn);
    scenarios::migrated_v1(file(&dir));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

#[test]
fn sqlite_seconds() {
    let dir = TempDir::new("seconds");
    scenarios::seconds(file(&dir));
}

/// A file of schema version 2 (before the 1-second buckets: this version's file
/// without them) opens: its cycles are kept, and new heartbeats store their seconds.
#[test]
fn a_version_2_file_is_migrated() {
    let dir = TempDir::new("migrate2");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         DROP TABLE second_stats;
         DROP TABLE second_reasons;
         ALTER TABLE cycle_stats DROP COLUMN second_instances;
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO cycle_stats VALUES (1, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1);
         PRAGMA user_version = 2;",
        without_v6()
    ))
    .unwrap();
    drop(conn);
    scenarios::migrated_v2(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

/// A file of schema version 4 (before the seconds' call durations: this version's
/// file without them) opens: its seconds are kept, without durations, and new
/// heartbeats store theirs.
#[test]
fn a_version_4_file_is_migrated() {
    let dir = TempDir::new("migrate4");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         ALTER TABLE second_stats DROP COLUMN measured;
         ALTER TABLE second_stats DROP COLUMN sum_us;
         ALTER TABLE second_stats DROP COLUMN max_us;
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO second_stats VALUES (1, 'order.create', {}, 7, 7, 0, 0, 0, 1);
         PRAGMA user_version = 4;",
        without_v6(),
        cycle + 3_000
    ))
    .unwrap();
    drop(conn);
    scenarios::migrated_v4(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

#[test]
fn sqlite_cancellations_and_retries() {
    let dir = TempDir::new("retries");
    scenarios::cancellations_and_retries(file(&dir));
}

/// A file of schema version 5 (before cancelled calls and retry counters: this
/// version's file without them) opens: its cycles are kept, with zeros, and new
/// heartbeats store theirs.
#[test]
fn a_version_5_file_is_migrated() {
    let dir = TempDir::new("migrate5");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO cycle_stats VALUES (1, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0);
         PRAGMA user_version = 5;",
        without_v6()
    ))
    .unwrap();
    drop(conn);
    scenarios::migrated_v5(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

#[test]
fn sqlite_queues() {
    let dir = TempDir::new("queues");
    scenarios::queues(file(&dir));
}

/// A file of schema version 6 (before the concurrency queues: this version's file
/// without them) opens: its cycles are kept, without a queue, and new heartbeats
/// store theirs.
#[test]
fn a_version_6_file_is_migrated() {
    let dir = TempDir::new("migrate6");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO cycle_stats
             VALUES (1, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0);
         PRAGMA user_version = 6;",
        without_v7()
    ))
    .unwrap();
    drop(conn);
    scenarios::migrated_v6(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

/// A file of schema version 7 (before the queues' evicted waiters: this version's file
/// without them) opens: its cycles keep their queues, with none evicted, and new
/// heartbeats store theirs.
#[test]
fn a_version_7_file_is_migrated() {
    let dir = TempDir::new("migrate7");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO cycle_stats
             VALUES (1, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                     1, 0, 2, 4, 0, 0, 0, 0, 8, 3);
         PRAGMA user_version = 7;",
        without_v8()
    ))
    .unwrap();
    drop(conn);
    scenarios::migrated_v7(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

#[test]
fn sqlite_hot_keys() {
    let dir = TempDir::new("hot-keys");
    hot_keys::hot_keys(file(&dir));
}

/// A file of schema version 8 (before the hot keys: this version's file without
/// them) opens: its cycles are kept, and new heartbeats store their hot keys.
#[test]
fn a_version_8_file_is_migrated() {
    let dir = TempDir::new("migrate8");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO points VALUES (1, 'order.create', 0, {cycle}, {cycle});
         INSERT INTO cycle_stats
             VALUES (1, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                     0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
         PRAGMA user_version = 8;",
        without_v9()
    ))
    .unwrap();
    drop(conn);
    hot_keys::migrated_v8(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
}

/// A file of schema version 9 (before the points' index by `last_seen_ms`: this
/// version's file without it, with the hot keys' index by point) opens: the index is
/// created, the hot keys' by point dropped, the hot keys stored before are still shown
/// until the instance's next heartbeat, after which only its current ones are.
#[test]
fn a_version_9_file_is_migrated() {
    let dir = TempDir::new("migrate9");
    let path = dir.path().join("admin.db");
    drop(resilience_admin::store::SqliteStore::open(&path).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "{}
         INSERT INTO apps VALUES (1, 'shop', 'orders', 5);
         INSERT INTO points VALUES (1, 'order.create', 0, {cycle}, {cycle});
         INSERT INTO points VALUES (1, 'order.idle', 0, {cycle}, {cycle});
         {}
         PRAGMA user_version = 9;",
        without_v10(),
        hot_keys::V9_ROWS.replace("{cycle}", &cycle.to_string()),
    ))
    .unwrap();
    drop(conn);
    hot_keys::migrated_v9(file(&dir), cycle);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 11);
    let mut indexes = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index'
               AND tbl_name IN ('points', 'hot_keys') AND sql IS NOT NULL ORDER BY name",
        )
        .unwrap();
    let indexes: Vec<String> = indexes
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes, ["hot_keys_received", "points_last_seen"]);
}

#[test]
fn sqlite_stale_hot_keys_are_not_shown() {
    let dir = TempDir::new("stale-keys");
    hot_keys::stale_hot_keys(file(&dir));
}

#[test]
fn sqlite_points_without_keys_are_forgotten_in_one_go() {
    let dir = TempDir::new("forget-keys");
    hot_keys::forgotten_in_one_go(file(&dir));
}
