//! An axum service limited per tenant: every tenant (the `x-tenant` header) gets 5
//! requests per second with a burst of 5 and 2 in flight, `tenant-vip` 100 per
//! second, and `tenant-banned` none, through the point's `keys` section and
//! `PointLayer::keyed`. Requests without the header are limited by the point's own
//! rules only.
//!
//! ```sh
//! cargo run -p examples --example per_tenant
//! ```
//!
//! With no argument it serves on a free port, sends a burst of requests for three
//! tenants over loopback, prints what each got and the point's hot keys, and exits;
//! `--port N` serves until interrupted instead:
//!
//! ```sh
//! cargo run -p examples --example per_tenant -- --port 8080
//! curl -i -H 'x-tenant: acme' http://127.0.0.1:8080/search
//! ```

use axum::http::{HeaderMap, Request};
use axum::routing::get;
use axum::Router;
use resilience_runtime::keys::KeyPolicy;
use resilience_runtime::tower::PointLayer;
use resilience_runtime::{registry, Policy};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tenant<B>(req: &Request<B>) -> Option<String> {
    req.headers()
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn search(headers: HeaderMap) -> String {
    let t = headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    format!("results for {t}\n")
}

/// One HTTP/1.1 request over a new connection; the status code.
async fn get_status(addr: std::net::SocketAddr, tenant: &str) -> std::io::Result<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "GET /search HTTP/1.1\r\nhost: {addr}\r\nx-tenant: {tenant}\r\nconnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out);
    Ok(text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: Option<u16> = match std::env::args().nth(1).as_deref() {
        Some("--port") => Some(std::env::args().nth(2).ok_or("--port N")?.parse()?),
        Some(other) => return Err(format!("unknown option {other}; expected --port N").into()),
        None => None,
    };
    let keys = KeyPolicy::builder()
        .limit(5, Duration::from_secs(1))
        .max_concurrency(2)
        .override_limit("tenant-vip", 100)
        .override_limit("tenant-banned", 0)
        .build()?;
    registry().set_policy("api.search", Policy::builder().keys(keys).build()?)?;
    let layer = PointLayer::new("api.search")?
        .retry_after(Duration::from_secs(1))
        .keyed(tenant::<axum::body::Body>)
        .respond();
    let app = Router::new().route("/search", get(search)).layer(layer);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.unwrap_or(0))).await?;
        let addr = listener.local_addr()?;
        println!("serving on http://{addr}/search");
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        if port.is_some() {
            server.await??;
            return Ok::<(), Box<dyn std::error::Error>>(());
        }
        for t in ["acme", "tenant-vip", "tenant-banned"] {
            let mut codes = Vec::new();
            for _ in 0..8 {
                codes.push(get_status(addr, t).await?);
            }
            let ok = codes.iter().filter(|c| **c == 200).count();
            println!(
                "{t:<14} 8 requests: {ok} answered, the rest {:?}",
                &codes[ok..]
            );
        }
        println!("hot keys of api.search:");
        for k in registry().point("api.search")?.hot_keys(5) {
            println!(
                "  {:<14} passes {:>2}, refused {:>2}",
                k.key, k.passes, k.refused
            );
        }
        server.abort();
        Ok(())
    })?;
    Ok(())
}
