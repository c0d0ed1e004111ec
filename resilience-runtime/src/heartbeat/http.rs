//! A minimal HTTP/1.1 client over `std::net::TcpStream`: one POST per connection
//! (`Connection: close`), bounded in time and in response size.
//!
//! The heartbeat client needs nothing more, and an HTTP stack with a runtime of its
//! own would be a heavy dependency for two requests every 5 seconds.

use super::config::ServerAddr;
use super::error::HeartbeatError;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The largest response accepted (a policy document of thousands of points).
const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// A request to send.
pub(crate) struct Request<'a> {
    pub(crate) path: &'a str,
    pub(crate) content_type: &'a str,
    pub(crate) token: Option<&'a str>,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
}

/// A response: status and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// POSTs to `server`. The body is made once connected, from the local address of the
/// connection (the instance's IP as the server sees the route to it).
pub(crate) fn post(
    server: &ServerAddr,
    req: &Request<'_>,
    body: impl FnOnce(IpAddr) -> Vec<u8>,
) -> Result<Response, HeartbeatError> {
    let net = |message: String| HeartbeatError::Network {
        server: server.to_string(),
        message,
    };
    let addrs = (server.host.as_str(), server.port)
        .to_socket_addrs()
        .map_err(|e| net(format!("cannot resolve {}: {e}", server.host)))?;
    let mut last = None;
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, req.connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        net(last.map_or_else(|| "no address".into(), |e| format!("connect: {e}")))
    })?;
    stream
        .set_write_timeout(Some(req.io_timeout))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| net(e.to_string()))?;
    let local_ip = stream
        .local_addr()
        .map_or(IpAddr::from([127, 0, 0, 1]), |a| a.ip());
    let body = body(local_ip);
    let mut head = format!(
        "POST {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: resilience-runtime/{}\r\n\
         Content-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        server.prefix,
        req.path,
        server.authority(),
        env!("CARGO_PKG_VERSION"),
        req.content_type,
        body.len()
    );
    if let Some(t) = req.token {
        head.push_str("Authorization: Bearer ");
        head.push_str(t);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(&body))
        .map_err(|e| net(format!("send: {e}")))?;
    // The whole answer must arrive within a few I/O timeouts, so a server that trickles
    // bytes cannot hold the client thread for long.
    let deadline = Instant::now() + req.io_timeout * 3;
    let raw = read_all(&mut stream, req.io_timeout, deadline)
        .map_err(|e| net(format!("receive: {e}")))?;
    parse(&raw).map_err(|message| HeartbeatError::Protocol {
        server: server.to_string(),
        message,
    })
}

fn read_all(
    stream: &mut TcpStream,
    io_timeout: Duration,
    deadline: Instant,
) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "answer too slow",
            ));
        }
        stream.set_read_timeout(Some(left.min(io_timeout)))?;
        match stream.read(&mut buf) {
            Ok(0) => return Ok(raw),
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > MAX_RESPONSE {
                    return Err(std::io::Error::other("answer larger than 8 MiB"));
                }
                if complete(&raw) {
                    return Ok(raw);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether a response with a Content-Length has fully arrived (then there is no need
/// to wait for the server to close).
fn complete(raw: &[u8]) -> bool {
    let Some(end) = find(raw, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    content_length(&head).is_some_and(|n| raw.len() >= end + 4 + n)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn content_length(head: &str) -> Option<usize> {
    header(head, "content-length")?.parse().ok()
}

/// Parses a whole HTTP/1.1 response.
pub(crate) fn parse(raw: &[u8]) -> Result<Response, String> {
    let end = find(raw, b"\r\n\r\n").ok_or("the answer has no complete HTTP head")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status_line = head.split("\r\n").next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 status line: {status_line:?}"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let rest = &raw[end + 4..];
    let chunked = header(&head, "transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = content_length(&head) {
        rest.get(..n)
            .ok_or_else(|| format!("the body ended after {} of {n} bytes", rest.len()))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = find(rest, b"\r\n").ok_or("a chunk size line is cut off")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or("a chunk is cut off")?;
        out.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("a chunk is cut off")?;
    }
}

/// `application/x-www-form-urlencoded` encoding of one value.
pub(crate) fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3 / 2);
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hi"[..]));
        let r = parse(
            b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (409, &b"abcde"[..]));
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhi").is_err());
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
        assert!(complete(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"));
        assert!(!complete(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhi"));
    }

    #[test]
    fn form_encoding_escapes_everything_but_unreserved() {
        assert_eq!(
            form_encode(r#"{"a": "b&c=d"}"#),
            "%7B%22a%22%3A+%22b%26c%3Dd%22%7D"
        );
        assert_eq!(form_encode("é"), "%C3%A9");
    }
}
