//! The storage scenarios on an SQLite file (the same ones run on PostgreSQL in
//! `postgres.rs`).

mod common;

use common::{scenarios, TempDir};
use resilience_admin::server::StorageConfig;

fn file(dir: &TempDir) -> StorageConfig {
    StorageConfig::Sqlite(dir.path().join("admin.db"))
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
