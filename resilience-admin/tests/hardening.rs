//! Hardening: the connection cap and header read timeout, text with control
//! characters, database file modes, app keys with `/` in their group.

mod common;

use common::*;
use resilience_admin::server::StorageConfig;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Opens a connection and sends half a request head.
fn half_sent(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    s
}

/// Whether the server closed `s` (EOF or reset, possibly after a 503) within `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    answer_before_close(s, limit).is_some()
}

/// What the server sent on `s` before closing it (EOF or reset) within `limit`; `None`
/// while it is still open then.
fn answer_before_close(s: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    let mut answer = Vec::new();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(answer),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            Err(_) => return Some(answer),
        }
    }
}

#[test]
fn half_sent_requests_neither_starve_health_nor_pulls_and_are_dropped() {
    let mut c = config(StorageConfig::Memory);
    c.max_connections = 50;
    c.header_read_timeout = Duration::from_secs(2);
    let server = start(c);
    let addr = server.addr();
    let opened = Instant::now();
    let mut slow: Vec<TcpStream> = (0..200).map(|_| half_sent(addr)).collect();

    // Health and pulls answer at once, 200 or 503 (never a timeout), while the
    // 50 served half-sent connections are held.
    for _ in 0..3 {
        let t = Instant::now();
        let health = get(addr, "/api/v1/health", None);
        assert!(
            matches!(health.status, 200 | 503),
            "health: {}",
            health.status
        );
        if health.status == 503 {
            assert_eq!(health.header("retry-after"), Some("1"));
            assert_eq!(health.json()["error"]["code"], "overloaded");
        }
        let pull = post_json(
            addr,
            "/api/v1/pull",
            Some(APP),
            &json!({"app_group": "shop", "app": "orders", "instance": "i-1", "version": 0}),
        );
        assert!(matches!(pull.status, 200 | 503), "pull: {}", pull.status);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "answers took {:?}",
            t.elapsed()
        );
    }

    // Connections beyond the cap were answered 503 and closed; the first 50 are
    // closed by the header read timeout (2 s), not before about that.
    let (first, rest) = slow.split_at_mut(50);
    let mut overloaded = 0;
    for s in rest.iter_mut() {
        let answer = answer_before_close(s, Duration::from_secs(5)).expect("overflow left open");
        if answer.starts_with(b"HTTP/1.1 503") {
            overloaded += 1;
        }
    }
    // Each connection over the cap is told 503 (a reset may rarely eat the answer of
    // one whose request the server closed before reading).
    assert!(
        overloaded >= 140,
        "{overloaded} of 150 overflow connections got a 503"
    );
    for s in first.iter_mut() {
        assert!(
            closed_within(s, Duration::from_secs(6)),
            "half-sent left open"
        );
    }
    let took = opened.elapsed();
    assert!(took >= Duration::from_millis(1500), "closed after {took:?}");
    drop(slow);

    // Once they are gone, everything is served again.
    let health = wait_for(Duration::from_secs(5), "health 200", || {
        let r = get(addr, "/api/v1/health", None);
        (r.status == 200).then_some(r)
    });
    assert_eq!(health.json()["ok"], true);
    server.stop();
}

#[test]
fn a_half_sent_request_is_dropped_after_the_header_timeout() {
    let mut c = config(StorageConfig::Memory);
    c.header_read_timeout = Duration::from_secs(1);
    let server = start(c);
    let mut s = half_sent(server.addr());
    let t = Instant::now();
    // Still open well before the timeout...
    assert!(!closed_within(&mut s, Duration::from_millis(400)));
    // ...and closed soon after it.
    assert!(closed_within(&mut s, Duration::from_secs(4)));
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "closed after {took:?}"
    );
    // A whole request on a fresh connection is served normally.
    assert_eq!(get(server.addr(), "/api/v1/health", None).status, 200);
    server.stop();
}

#[test]
fn control_characters_are_refused_on_sqlite() {
    let dir = TempDir::new("control");
    common::hardening::control_characters(StorageConfig::Sqlite(dir.path().join("admin.db")));
}

#[cfg(unix)]
#[test]
fn the_sqlite_file_and_its_wal_and_shm_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("mode");
    let db = dir.path().join("admin.db");
    let server = start(config(StorageConfig::Sqlite(db.clone())));
    let r = put_json(
        server.addr(),
        "/api/v1/apps/shop/orders/policy",
        Some(ADMIN),
        &json!({"base_version": 0, "author": "alice", "policy": {"points": {"a": {"max_concurrency": 3}}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.path().join(format!("admin.db{suffix}"));
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "{}: {:o}",
            path.display(),
            mode & 0o777
        );
    }
    server.stop();
}

#[test]
fn apps_whose_group_or_name_has_a_slash_are_kept_apart() {
    let server = start(config(StorageConfig::Memory));
    let addr = server.addr();
    let cycle = last_closed_cycle(wall_ms());
    for (group, app) in [("a/b", "c"), ("a", "b/c")] {
        let hb = json!({"app_group": group, "app": app, "instance": "i-1", "cycle_start_ms": cycle,
                        "points": [{"name": "p", "visits": 1, "passes": 1}]});
        let r = post_json(addr, "/api/v1/heartbeat", Some(APP), &hb);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let apps = get(addr, "/api/v1/apps", None).json();
    let mut keys: Vec<(String, String)> = apps["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["group"].as_str().unwrap().to_owned(),
                a["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("a".to_owned(), "b/c".to_owned()),
            ("a/b".to_owned(), "c".to_owned())
        ],
        "{apps}"
    );
    // The API paths take each part percent-encoded: an edit of one leaves the other.
    let r = put_json(
        addr,
        "/api/v1/apps/a%2Fb/c/policy",
        Some(ADMIN),
        &json!({"base_version": 0, "author": "alice", "policy": {"points": {"p": {"max_concurrency": 3}}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        get(addr, "/api/v1/apps/a%2Fb/c/policy", None).json()["version"],
        1
    );
    assert_eq!(
        get(addr, "/api/v1/apps/a/b%2Fc/policy", None).json()["version"],
        0
    );
    let pull = |group: &str, app: &str| {
        post_json(
            addr,
            "/api/v1/pull",
            Some(APP),
            &json!({"app_group": group, "app": app, "instance": "i-1", "version": 0}),
        )
        .json()
    };
    assert_eq!(pull("a/b", "c")["version"], 1);
    assert_eq!(pull("a", "b/c")["version"], 0);
    let points = get(addr, "/api/v1/apps/a/b%2Fc/points", None);
    assert_eq!(points.status, 200, "{}", points.text());
    server.stop();
}
