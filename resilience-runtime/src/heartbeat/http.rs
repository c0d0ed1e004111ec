//! A minimal HTTP/1.1 client over `std::net::TcpStream`, in TLS for `https://`
//! servers (feature `heartbeat-tls`): one POST per connection (`Connection: close`),
//! bounded in time and in response size.
//!
//! The heartbeat client needs nothing more, and an HTTP stack with a runtime of its
//! own would be a heavy dependency for two requests every 5 seconds.

use super::config::{is_loopback_ip, ServerAddr};
use super::error::HeartbeatError;
#[cfg(feature = "heartbeat-tls")]
use super::tls::{self, TlsClient};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
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
    /// A token is sent and plain http was not allowed: a plain-http server must
    /// resolve to loopback addresses (`localhost` might not).
    pub(crate) plain_only_to_loopback: bool,
    /// The TLS set-up for `https://` servers.
    #[cfg(feature = "heartbeat-tls")]
    pub(crate) tls: Option<&'a TlsClient>,
}

/// A connection: plain, or TLS over the socket.
enum Conn {
    Plain(TcpStream),
    #[cfg(feature = "heartbeat-tls")]
    Tls(Box<tls::TlsStream>),
}

impl Conn {
    fn socket(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            #[cfg(feature = "heartbeat-tls")]
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            #[cfg(feature = "heartbeat-tls")]
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            #[cfg(feature = "heartbeat-tls")]
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            #[cfg(feature = "heartbeat-tls")]
            Conn::Tls(s) => s.flush(),
        }
    }
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
    let mut addrs: Vec<SocketAddr> = (server.host.as_str(), server.port)
        .to_socket_addrs()
        .map_err(|e| net(format!("cannot resolve {}: {e}", server.host)))?
        .collect();
    if req.plain_only_to_loopback && !server.tls {
        addrs = loopback_only(server, addrs)?;
    }
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
    let stream = stream.ok_or_else(|| {
        net(last.map_or_else(|| "no address".into(), |e| format!("connect: {e}")))
    })?;
    stream
        .set_write_timeout(Some(req.io_timeout))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| net(e.to_string()))?;
    let local_ip = stream
        .local_addr()
        .map_or(IpAddr::from([127, 0, 0, 1]), |a| a.ip());
    let mut stream = connect(server, req, stream).map_err(net)?;
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
        .and_then(|()| stream.flush())
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

/// The loopback addresses among those `server`'s name resolved to: `build` let a
/// plain-http server with a token through as loopback by its name (`localhost`), and
/// what that name resolves to must be loopback too, or the token would leave the host.
fn loopback_only(
    server: &ServerAddr,
    resolved: Vec<SocketAddr>,
) -> Result<Vec<SocketAddr>, HeartbeatError> {
    let loopback: Vec<SocketAddr> = resolved
        .iter()
        .copied()
        .filter(|a| is_loopback_ip(a.ip()))
        .collect();
    if loopback.is_empty() && !resolved.is_empty() {
        let list: Vec<String> = resolved.iter().map(|a| a.ip().to_string()).collect();
        return Err(HeartbeatError::Config {
            field: "servers",
            message: format!(
                "{server} resolves to {}, not loopback: the app token is not sent over \
                 plain http there (use https://, or set `allow_plain_http(true)`)",
                list.join(", ")
            ),
        });
    }
    Ok(loopback)
}

/// The connection to speak HTTP over: the socket itself, or TLS over it for an
/// `https://` server.
fn connect(server: &ServerAddr, req: &Request<'_>, socket: TcpStream) -> Result<Conn, String> {
    if !server.tls {
        return Ok(Conn::Plain(socket));
    }
    #[cfg(feature = "heartbeat-tls")]
    {
        let tls = req
            .tls
            .ok_or("no TLS set-up for an https server (a bug: `build` makes it)")?;
        // The same budget as the answer's: a server that trickles its handshake
        // cannot hold the client thread for long either.
        let deadline = Instant::now() + req.io_timeout * 3;
        tls::connect(tls, &server.host, socket, req.io_timeout, deadline)
            .map(|s| Conn::Tls(Box::new(s)))
    }
    #[cfg(not(feature = "heartbeat-tls"))]
    {
        // `ServerAddr::parse` refuses https without the feature.
        let _ = req;
        Err("https needs the runtime's `heartbeat-tls` feature".into())
    }
}

fn read_all(
    stream: &mut Conn,
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
        stream
            .socket()
            .set_read_timeout(Some(left.min(io_timeout)))?;
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

/// Whether a response with a Content-Length, or a chunked one, has fully arrived
/// (then there is no need to wait for the server to close: a TLS server that closes
/// without `close_notify` would make that an error).
fn complete(raw: &[u8]) -> bool {
    let Some(end) = find(raw, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    if is_chunked(&head) {
        // Decoded only when it may have ended, so reading stays linear.
        return raw.ends_with(b"0\r\n\r\n") && dechunk(&raw[end + 4..]).is_ok();
    }
    content_length(&head).is_some_and(|n| raw.len() >= end + 4 + n)
}

fn is_chunked(head: &str) -> bool {
    header(head, "transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
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
    // A TLS record (an alert, a handshake) where an HTTP head should be: the server
    // serves https and refused our plain request.
    if matches!(raw, [0x15 | 0x16, 0x03, ..]) {
        return Err(
            "the server answered in TLS: it serves https, so use an https:// address".into(),
        );
    }
    if raw.is_empty() {
        return Err("the server closed the connection without answering".into());
    }
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
    let body = if is_chunked(&head) {
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
    fn a_tls_answer_to_plain_http_says_to_use_https() {
        // A TLS alert record (decode_error), as a TLS server answers an HTTP request.
        let e = parse(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]).unwrap_err();
        assert!(e.contains("use an https:// address"), "{e}");
        let e = parse(b"").unwrap_err();
        assert!(e.contains("without answering"), "{e}");
    }

    #[test]
    fn a_localhost_that_resolves_elsewhere_gets_no_token() {
        let server = ServerAddr::parse("http://localhost:7070").unwrap();
        let at = |ip: [u8; 4]| SocketAddr::from((ip, 7070));
        let e = loopback_only(&server, vec![at([10, 0, 0, 5])]).unwrap_err();
        assert!(
            e.to_string().contains("resolves to 10.0.0.5, not loopback"),
            "{e}"
        );
        // Only the loopback addresses are tried.
        let kept = loopback_only(&server, vec![at([10, 0, 0, 5]), at([127, 0, 0, 1])]).unwrap();
        assert_eq!(kept, [at([127, 0, 0, 1])]);
    }

    #[test]
    fn a_chunked_answer_is_complete_at_its_last_chunk() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let whole = [&head[..], b"2\r\nhi\r\n0\r\n\r\n"].concat();
        assert!(complete(&whole));
        assert!(!complete(&whole[..whole.len() - 1]));
        // A chunk whose data ends like the last chunk is not the end.
        assert!(!complete(&[&head[..], b"9\r\nxx0\r\n\r\n"].concat()));
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
