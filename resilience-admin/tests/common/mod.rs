//! Shared helpers of the integration tests: a server on a loopback port, a small
//! blocking HTTP client, temporary directories.

// Each test file uses a different part of this module.
#![allow(dead_code, unreachable_pub)]

pub mod hardening;
pub mod hot_keys;
pub mod peers;
pub mod scenarios;

use resilience_admin::auth::{AppToken, Token};
use resilience_admin::server::{AdminConfig, RunningServer, StorageConfig};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const ADMIN: &str = "admin-token-0123456789abcdef";
pub const APP: &str = "app-token-0123456789abcdef";
pub const ORDERS_ONLY: &str = "orders-only-token-0123456789";

/// A configuration on an ephemeral loopback port with the test tokens: `APP` for
/// every app, `ORDERS_ONLY` for shop/orders only.
pub fn config(storage: StorageConfig) -> AdminConfig {
    AdminConfig::builder(storage, Token::new(ADMIN).unwrap())
        .bind("127.0.0.1:0".parse().unwrap())
        .app_token(AppToken::parse(APP).unwrap())
        .app_token(AppToken::parse(&format!("shop/orders={ORDERS_ONLY}")).unwrap())
        .build()
        .unwrap()
}

pub fn start(config: AdminConfig) -> RunningServer {
    RunningServer::start(config).expect("server starts")
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "resilience-admin-{tag}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a request body is sent.
pub enum Body<'a> {
    None,
    Json(&'a Value),
    Form(&'a str),
    /// Raw bytes with a content type.
    Raw(&'a [u8], &'a str),
    /// Raw bytes sent with chunked transfer encoding (no Content-Length).
    Chunked(&'a [u8]),
}

/// One HTTP/1.1 request over a fresh connection.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Body<'_>,
) -> Response {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    request_over(stream, addr, method, path, token, body)
}

/// One HTTP/1.1 request over `stream`, already connected to `addr` (a TLS stream in
/// the https tests).
pub fn request_over(
    mut stream: impl Read + Write,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Body<'_>,
) -> Response {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let json_text;
    let (bytes, content_type, chunked): (&[u8], Option<&str>, bool) = match body {
        Body::None => (b"", None, false),
        Body::Json(v) => {
            json_text = v.to_string();
            (json_text.as_bytes(), Some("application/json"), false)
        }
        Body::Form(f) => (
            f.as_bytes(),
            Some("application/x-www-form-urlencoded"),
            false,
        ),
        Body::Raw(b, ct) => (b, Some(ct), false),
        Body::Chunked(b) => (b, Some("application/json"), true),
    };
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
    } else if method != "GET" {
        head.push_str(&format!("Content-Length: {}\r\n\r\n", bytes.len()));
    } else {
        head.push_str("\r\n");
    }
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) and close before the whole body is sent: ignore
    // write errors and read what it said.
    if chunked {
        for chunk in bytes.chunks(16 * 1024) {
            if stream
                .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .and_then(|()| stream.write_all(chunk))
                .and_then(|()| stream.write_all(b"\r\n"))
                .is_err()
            {
                break;
            }
        }
        let _ = stream.write_all(b"0\r\n\r\n");
    } else {
        let _ = stream.write_all(bytes);
    }
    let _ = stream.flush();
    // Read until the answer is complete: some servers (ChromeDriver) keep the
    // connection open despite `Connection: close`.
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
        if response_complete(&raw) {
            break;
        }
    }
    parse_response(&raw)
}

fn response_complete(raw: &[u8]) -> bool {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    match head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        Some(n) => body.len() >= n,
        None => false,
    }
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&rest[..end]);
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = end + 2;
        out.extend_from_slice(&rest[start..(start + size).min(rest.len())]);
        rest = &rest[(start + size + 2).min(rest.len())..];
    }
}

pub fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Response {
    request(addr, "GET", path, token, Body::None)
}

pub fn post_json(addr: SocketAddr, path: &str, token: Option<&str>, body: &Value) -> Response {
    request(addr, "POST", path, token, Body::Json(body))
}

pub fn put_json(addr: SocketAddr, path: &str, token: Option<&str>, body: &Value) -> Response {
    request(addr, "PUT", path, token, Body::Json(body))
}

/// Percent-encodes a form value.
pub fn form_value(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The start of the 10 s cycle before the one holding `now_ms`.
pub fn last_closed_cycle(now_ms: i64) -> i64 {
    now_ms - now_ms % 10_000 - 10_000
}

/// Wall-clock now in ms.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Polls `f` every 20 ms until it returns `Some`, for at most `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
