//! Breakers that know their peers on SQLite: three instances, each its own registry
//! and heartbeat client, against the real console over HTTP (the scenario is in
//! `common/peers.rs`; `tests/postgres.rs` runs it on PostgreSQL).

mod common;

use common::{peers, TempDir};
use resilience_admin::server::StorageConfig;

#[test]
fn sqlite_breakers_know_their_peers() {
    let dir = TempDir::new("peers");
    peers::breakers_know_their_peers(StorageConfig::Sqlite(dir.path().join("console.db")));
}
