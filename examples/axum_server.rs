//! An axum service whose routes are guarded by points of the registry and by adaptive
//! limits; refused requests get `429 Too Many Requests` (with `Retry-After` where the
//! wait is known).
//!
//! ```sh
//! cargo run -p examples --example axum_server -- --port 8080
//! curl -i http://127.0.0.1:8080/search
//! curl -s http://127.0.0.1:8080/stats
//! ```
//!
//! Options: `--port N` (or the `PORT` variable; default 0 picks a free port, and the
//! bound address is printed) and `--serve-for SECS` to stop by itself (smoke tests).
//!
//! | route | guard |
//! |---|---|
//! | `/search` | point `api.search`: at most 16 in flight |
//! | `/orders` | point `api.orders`: token bucket of 50/s, burst 10, `Retry-After: 1` |
//! | `/report` | point `api.report`: at most 2 in flight, downgraded after 3 calls over 200 ms in the window |
//! | `/recommend` | the adaptive shedder (go-zero's rule on this process's CPU) |
//! | `/upload` | a gate sized by Little's law: 200 req/s x 50 ms = 10 |
//! | `/stats` | unguarded: every point's counters |

use axum::http::Uri;
use axum::routing::get;
use axum::Router;
use resilience_runtime::adaptive::{littles_law, AdaptiveConfig, AdaptiveLimiter, Gate};
use resilience_runtime::tower::{AdmissionLayer, PointLayer};
use resilience_runtime::{registry, Policy};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// Policies set at start. A policy file loaded at start (and watched) would replace
/// these calls.
fn set_policies() -> Result<(), Box<dyn std::error::Error>> {
    let r = registry();
    r.set_policy("api.search", Policy::builder().max_concurrency(16).build()?)?;
    r.set_policy(
        "api.orders",
        Policy::builder().token_bucket(50.0, 10).build()?,
    )?;
    r.set_policy(
        "api.report",
        Policy::builder()
            .max_concurrency(2)
            .timeouts(Duration::from_millis(200), 3)
            .build()?,
    )?;
    Ok(())
}

/// Pretends to work for `?ms=N` milliseconds (default `default_ms`).
async fn work(uri: &Uri, default_ms: u64) -> String {
    let ms = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("ms="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_ms);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    format!("done in {ms} ms\n")
}

fn stats() -> String {
    let mut out = String::new();
    let mut names = registry().point_names();
    names.sort_unstable();
    for name in names {
        if let Some(s) = registry().stats(name) {
            let _ = writeln!(
                out,
                "{name}: visits={} passes={} downgrades={} exceptions={} in_flight={} peak={}",
                s.totals.visits,
                s.totals.passes,
                s.totals.downgrades,
                s.totals.exceptions,
                s.concurrency,
                s.peak_concurrency
            );
        }
    }
    out
}

fn app() -> Result<Router, Box<dyn std::error::Error>> {
    let shedder = Arc::new(AdaptiveLimiter::new(AdaptiveConfig::default())?);
    let gate = Arc::new(Gate::new(littles_law(200.0, Duration::from_millis(50))?)?);
    Ok(Router::new()
        .route(
            "/search",
            get(|uri: Uri| async move { work(&uri, 20).await })
                .route_layer(PointLayer::new("api.search")?.respond()),
        )
        .route(
            "/orders",
            get(|uri: Uri| async move { work(&uri, 5).await }).route_layer(
                PointLayer::new("api.orders")?
                    .retry_after(Duration::from_secs(1))
                    .respond(),
            ),
        )
        .route(
            "/report",
            get(|uri: Uri| async move { work(&uri, 100).await })
                .route_layer(PointLayer::new("api.report")?.respond()),
        )
        .route(
            "/recommend",
            get(|uri: Uri| async move { work(&uri, 10).await })
                .route_layer(AdmissionLayer::new("recommend", shedder).respond()),
        )
        .route(
            "/upload",
            get(|uri: Uri| async move { work(&uri, 50).await })
                .route_layer(AdmissionLayer::new("upload", gate).respond()),
        )
        .route("/stats", get(|| async { stats() })))
}

struct Args {
    port: u16,
    serve_for: Option<Duration>,
}

fn args() -> Result<Args, String> {
    let mut port = match std::env::var("PORT") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("PORT: not a port number: {v:?}"))?,
        Err(_) => 0,
    };
    let mut serve_for = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag}: missing value"))?;
        match flag.as_str() {
            "--port" => {
                port = value
                    .parse()
                    .map_err(|_| format!("--port: not a port number: {value:?}"))?
            }
            "--serve-for" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| format!("--serve-for: not a number of seconds: {value:?}"))?;
                serve_for = Some(Duration::from_secs(secs));
            }
            _ => {
                return Err(format!(
                    "unknown option {flag}; expected --port or --serve-for"
                ))
            }
        }
    }
    Ok(Args { port, serve_for })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    set_policies()?;
    let app = app()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
        println!("listening on http://{}", listener.local_addr()?);
        let stop = async move {
            match args.serve_for {
                Some(d) => tokio::time::sleep(d).await,
                None => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await?;
        print!("{}", stats());
        Ok(())
    })
}
