//! The storage scenarios on PostgreSQL (feature `postgres`), each in a database of
//! its own created for the test and dropped after it.
//!
//! Needs `RESILIENCE_ADMIN_PG_URL`, a connection string of a user that may create
//! databases (`scripts/test.sh` starts a throw-away server and sets it). Without it
//! the tests fail and say so.

mod common;

use common::{hot_keys, peers, scenarios};
use resilience_admin::server::StorageConfig;
use std::sync::atomic::{AtomicU64, Ordering};

const URL_VAR: &str = "RESILIENCE_ADMIN_PG_URL";

/// Takes a database of this version back to schema version 9 (but for the number):
/// without the points' index by `last_seen_ms`, the instances' `keys_cycle_ms` and
/// (version 11) `breakers`, with the hot keys' index by point.
const WITHOUT_V10: &str = "DROP INDEX ra_points_last_seen;
    ALTER TABLE ra_instances DROP COLUMN keys_cycle_ms;
    ALTER TABLE ra_instances DROP COLUMN breakers;
    CREATE INDEX ra_hot_keys_point ON ra_hot_keys (app_id, point);";

/// A database of its own, dropped when the guard is.
struct Database {
    admin_url: String,
    name: String,
}

impl Database {
    fn create() -> Database {
        let admin_url = std::env::var(URL_VAR)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "{URL_VAR} is not set: the PostgreSQL tests need a server. Run them with \
                 scripts/test.sh (it starts one), or start one yourself and set \
                 {URL_VAR}=postgresql://USER@127.0.0.1:PORT/postgres"
                )
            });
        static N: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "ra_test_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut client =
            postgres::Client::connect(&admin_url, postgres::NoTls).expect("connect to PostgreSQL");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        Database { admin_url, name }
    }

    /// The URL of this database: the admin URL with its database name replaced.
    fn url(&self) -> String {
        let (base, _) = self
            .admin_url
            .rsplit_once('/')
            .expect("a URL ending in /DATABASE");
        format!("{base}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

#[test]
fn postgres_breakers_know_their_peers() {
    let db = Database::create();
    peers::breakers_know_their_peers(StorageConfig::Postgres(db.url()));
}

#[test]
fn postgres_aggregation() {
    let db = Database::create();
    scenarios::aggregation(StorageConfig::Postgres(db.url()));
}

#[test]
fn postgres_restart() {
    let db = Database::create();
    scenarios::restart(StorageConfig::Postgres(db.url()));
}

#[test]
fn postgres_conflict_and_restore() {
    let db = Database::create();
    scenarios::conflict_and_restore(StorageConfig::Postgres(db.url()));
}

#[test]
fn postgres_prune() {
    let db = Database::create();
    scenarios::prune(StorageConfig::Postgres(db.url()));
}

#[test]
fn two_servers_on_one_database_cannot_write_the_same_version() {
    use resilience_admin::model::{AppKey, NewPolicyVersion};
    use resilience_admin::store::{PostgresStore, Store, StoreError};
    let db = Database::create();
    let a = PostgresStore::connect(&db.url()).unwrap();
    let b = PostgresStore::connect(&db.url()).unwrap();
    let app = AppKey::new("g", "a");
    let change = |author: &str| NewPolicyVersion {
        base_version: 0,
        author: author.into(),
        created_ms: 1,
        comment: String::new(),
        restored_from: None,
        diff: vec![],
        document: serde_json::json!({"points": {}}),
    };
    assert_eq!(a.commit_policy(&app, &change("a")).unwrap().version, 1);
    match b.commit_policy(&app, &change("b")) {
        Err(StoreError::Conflict { current: 1 }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(b.policy_history(&app).unwrap().len(), 1);
}

#[test]
fn postgres_enforcement() {
    let db = Database::create();
    scenarios::enforcement(StorageConfig::Postgres(db.url()));
}

/// A database of schema version 1 (before enforcement reports) opens: its instances
/// are kept, and new heartbeats store what they enforce.
/// (Its instance last sent a heartbeat at the manual clock's start, within the
/// retention: an instance silent for longer is forgotten by the first pruning.)
#[test]
fn a_version_1_database_is_migrated() {
    let db = Database::create();
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(
        "CREATE TABLE ra_schema (version INTEGER NOT NULL);
         INSERT INTO ra_schema VALUES (1);
         CREATE TABLE ra_apps (id BIGSERIAL PRIMARY KEY, app_group TEXT NOT NULL,
             app_name TEXT NOT NULL, created_ms BIGINT NOT NULL, UNIQUE (app_group, app_name));
         CREATE TABLE ra_instances (app_id BIGINT NOT NULL REFERENCES ra_apps(id),
             instance TEXT NOT NULL, host TEXT NOT NULL, ip TEXT NOT NULL,
             protocol TEXT NOT NULL, last_heartbeat_ms BIGINT, last_pull_ms BIGINT,
             policy_version BIGINT, PRIMARY KEY (app_id, instance));
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_instances VALUES (1, 'old-1', 'h', '10.0.0.1', 'json', 1767225600000, NULL, 2);",
    )
    .unwrap();
    scenarios::migrated_v1(StorageConfig::Postgres(db.url()));
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

#[test]
fn postgres_seconds() {
    let db = Database::create();
    scenarios::seconds(StorageConfig::Postgres(db.url()));
}

/// A database of schema version 2 (before the 1-second buckets: this version's
/// schema without them) opens: its cycles are kept, and new heartbeats store their
/// seconds.
#[test]
fn a_version_2_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "DROP TABLE ra_second_stats, ra_second_reasons;
         ALTER TABLE ra_cycle_stats DROP COLUMN second_instances;
         UPDATE ra_schema SET version = 2;
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_cycle_stats
             SELECT id, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1 FROM ra_apps;"
    ))
    .unwrap();
    scenarios::migrated_v2(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

/// A database of schema version 4 (before the seconds' call durations: this
/// version's schema without them) opens: its seconds are kept, without durations,
/// and new heartbeats store theirs.
#[test]
fn a_version_4_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "ALTER TABLE ra_second_stats DROP COLUMN measured, DROP COLUMN sum_us,
             DROP COLUMN max_us;
         UPDATE ra_schema SET version = 4;
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_second_stats
             SELECT id, 'order.create', {}, 7, 7, 0, 0, 0, 1 FROM ra_apps;",
        cycle + 3_000
    ))
    .unwrap();
    scenarios::migrated_v4(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

#[test]
fn postgres_cancellations_and_retries() {
    let db = Database::create();
    scenarios::cancellations_and_retries(StorageConfig::Postgres(db.url()));
}

/// A database of schema version 5 (before cancelled calls and retry counters: this
/// version's schema without them) opens: its cycles are kept, with zeros, and new
/// heartbeats store theirs.
#[test]
fn a_version_5_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "ALTER TABLE ra_cycle_stats DROP COLUMN cancelled, DROP COLUMN retry_calls,
             DROP COLUMN retry_attempts, DROP COLUMN retry_retries,
             DROP COLUMN retry_exhausted, DROP COLUMN retry_refused_by_budget,
             DROP COLUMN retry_hedges, DROP COLUMN retry_cancelled;
         UPDATE ra_schema SET version = 5;
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_cycle_stats
             SELECT id, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0 FROM ra_apps;"
    ))
    .unwrap();
    scenarios::migrated_v5(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

#[test]
fn postgres_queues() {
    let db = Database::create();
    scenarios::queues(StorageConfig::Postgres(db.url()));
}

/// A database of schema version 6 (before the concurrency queues: this version's
/// schema without them) opens: its cycles are kept, without a queue, and new
/// heartbeats store theirs.
#[test]
fn a_version_6_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "ALTER TABLE ra_cycle_stats DROP COLUMN queue_reports, DROP COLUMN queue_waiting,
             DROP COLUMN queue_peak_waiting, DROP COLUMN queue_admitted,
             DROP COLUMN queue_timed_out, DROP COLUMN queue_cancelled,
             DROP COLUMN queue_refused, DROP COLUMN queue_full,
             DROP COLUMN queue_wait_ns, DROP COLUMN queue_max_wait_ns,
             DROP COLUMN queue_evicted;
         DROP TABLE ra_hot_keys;
         UPDATE ra_schema SET version = 6;
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_cycle_stats
             SELECT id, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0,
                    0, 0, 0, 0, 0, 0, 0, 0 FROM ra_apps;"
    ))
    .unwrap();
    scenarios::migrated_v6(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

#[test]
fn postgres_control_characters_are_refused() {
    let db = Database::create();
    common::hardening::control_characters(StorageConfig::Postgres(db.url()));
}

/// The point list of a 10 000-point app on PostgreSQL (prints the time).
#[test]
fn postgres_point_list_of_ten_thousand_points() {
    let db = Database::create();
    scenarios::points_list_of_ten_thousand(StorageConfig::Postgres(db.url()), "PostgreSQL");
}

/// A database of schema version 7 (before the queues' evicted waiters: this version's
/// schema without them) opens: its cycles keep their queues, with none evicted, and
/// new heartbeats store theirs.
#[test]
fn a_version_7_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "{WITHOUT_V10}
         ALTER TABLE ra_cycle_stats DROP COLUMN queue_evicted;
         DROP TABLE ra_hot_keys;
         UPDATE ra_schema SET version = 7;
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_cycle_stats
             SELECT id, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0,
                    0, 0, 0, 0, 0, 0, 0, 0,
                    1, 0, 2, 4, 0, 0, 0, 0, 8, 3 FROM ra_apps;"
    ))
    .unwrap();
    scenarios::migrated_v7(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

#[test]
fn postgres_hot_keys() {
    let db = Database::create();
    hot_keys::hot_keys(StorageConfig::Postgres(db.url()));
}

/// A database of schema version 8 (before the hot keys: this version's schema
/// without them) opens: its cycles are kept, and new heartbeats store their hot keys.
#[test]
fn a_version_8_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "{WITHOUT_V10}
         DROP TABLE ra_hot_keys;
         UPDATE ra_schema SET version = 8;
         INSERT INTO ra_apps (app_group, app_name, created_ms) VALUES ('shop', 'orders', 5);
         INSERT INTO ra_points SELECT id, 'order.create', FALSE, {cycle}, {cycle} FROM ra_apps;
         INSERT INTO ra_cycle_stats
             SELECT id, 'order.create', {cycle}, 7, 7, 0, 0, 0, 1, 1, 0,
                    0, 0, 0, 0, 0, 0, 0, 0,
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 FROM ra_apps;"
    ))
    .unwrap();
    hot_keys::migrated_v8(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
}

/// A database of schema version 9 (before the points' index by `last_seen_ms`: this
/// version's schema without it, with the hot keys' index by point) opens: the index
/// is created, the hot keys' by point dropped, the hot keys stored before are still
/// shown until the instance's next heartbeat, after which only its current ones are.
#[test]
fn a_version_9_database_is_migrated() {
    let db = Database::create();
    drop(resilience_admin::store::PostgresStore::connect(&db.url()).unwrap());
    let cycle = 1_767_225_590_000_i64;
    let mut c = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "{WITHOUT_V10}
         UPDATE ra_schema SET version = 9;
         INSERT INTO ra_apps (id, app_group, app_name, created_ms) VALUES (1, 'shop', 'orders', 5);
         INSERT INTO ra_points VALUES (1, 'order.create', FALSE, {cycle}, {cycle});
         INSERT INTO ra_points VALUES (1, 'order.idle', FALSE, {cycle}, {cycle});
         {}",
        hot_keys::V9_ROWS
            .replace("{cycle}", &cycle.to_string())
            .replace("INSERT INTO ", "INSERT INTO ra_")
    ))
    .unwrap();
    hot_keys::migrated_v9(StorageConfig::Postgres(db.url()), cycle);
    let v: i32 = c
        .query_one("SELECT MAX(version) FROM ra_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, 11);
    let indexes: Vec<String> = c
        .query(
            "SELECT indexname FROM pg_indexes WHERE tablename IN ('ra_points', 'ra_hot_keys')
             ORDER BY indexname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        indexes,
        [
            "ra_hot_keys_pkey",
            "ra_hot_keys_received",
            "ra_points_last_seen",
            "ra_points_pkey"
        ]
    );
}

#[test]
fn postgres_stale_hot_keys_are_not_shown() {
    let db = Database::create();
    hot_keys::stale_hot_keys(StorageConfig::Postgres(db.url()));
}

#[test]
fn postgres_points_without_keys_are_forgotten_in_one_go() {
    let db = Database::create();
    hot_keys::forgotten_in_one_go(StorageConfig::Postgres(db.url()));
}
