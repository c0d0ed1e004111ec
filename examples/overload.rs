//! A real overload, measured: an axum service on loopback whose backend serves 8
//! requests at a time for 20 ms each (400 requests/s), driven over TCP by an open-loop
//! client at 1x, 2x and 4x that rate, 20% of the requests critical, under these
//! protections:
//!
//! * `none`: every request reaches the backend and waits for it;
//! * `tower`: tower's `ConcurrencyLimitLayer(8)` under a `LoadShedLayer` (503 when full);
//! * `queue`: a [`PointLayer`] of `max_concurrency(8)` with a bounded queue (8 waiting,
//!   at most 100 ms);
//! * `newest-first`: the same limit with a deeper queue (64 waiting, at most 175 ms)
//!   served newest first, a full queue refusing its oldest waiter;
//! * `adaptive`: a [`PointLayer`] of the gradient limit (the defaults);
//! * `gradient`: a [`PointLayer`] of the gradient limit with `critical_reserve(0.5)`,
//!   under a [`PriorityLayer`] that reads the `x-priority` header;
//! * `gradient-queue`: the same with the `newest-first` row's queue for the calls the
//!   limit has no room for: they wait outside the backend, critical ones first, then
//!   the newest (and a latency tolerance of 1.15: the queue absorbs the bursts, so
//!   the limit can sit closer to the backend's concurrency).
//!
//! The client is open loop: arrivals are a seeded Poisson process at the row's
//! rate, whatever the answers, and every protection meets the same arrivals at a
//! given load (one seed per load, so the rows differ by their protection only);
//! each request's latency counts from its scheduled arrival (so a slow client
//! cannot hide queueing), and a request unanswered after 1 s is given up (counted
//! at 1 s). Each row starts a fresh server and point, runs a warm-up at the row's
//! rate (cold start under overload), then measures.
//!
//! For each row: the requests offered per second (a Poisson count: 1x offers
//! somewhat more or less than 400), goodput (200 answers within the 200 ms
//! objective, per second), p50 and p99 latency of the 200 answers, the share of
//! requests refused, the critical tier's success (critical requests answered 200
//! within the objective, of those sent) and the mean number of requests in the
//! handler (the backend's flight: served plus waiting for it).
//!
//! ```sh
//! cargo run --release -p examples --example overload            # the full table
//! cargo run --release -p examples --example overload -- --svg resilience-runtime/src/guide/overload.svg
//! cargo run -p examples --example overload -- --smoke           # 4x only, short, with checks
//! ```
//!
//! Options: `--warmup SECS` and `--secs SECS` (default 2 and 3 per row),
//! `--svg PATH` (write the chart), `--smoke` (4x only, 3 s + 1 s per row, a backend
//! of 4 slots so that a debug build on a busy host keeps up with its 800 requests/s,
//! then checks that every protection beats none on goodput, that the newest-first
//! queue's median is below the oldest-first one's, that the gradient rows, started
//! at a limit of 20, have settled to at most twice the backend's slots in flight,
//! and that the priority rows serve most critical requests; exits with an error
//! otherwise). `OVERLOAD_ONLY=ROW` (`none`, `tower`, `queue`, `newest-first`,
//! `adaptive`, `gradient`, `gradient-queue`) runs one protection only. Loopback
//! only; `scripts/overload.sh` runs the full version.

use axum::error_handling::HandleErrorLayer;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{BoxError, Router};
use resilience_runtime::adaptive::GradientConfig;
use resilience_runtime::tower::{PointLayer, PriorityLayer};
use resilience_runtime::{registry, AdaptiveLimit, Policy, QueueOrder};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tower::ServiceBuilder;

/// Requests the backend serves at once: 8 (4 in the smoke, so that a debug build on
/// a busy host drives 4x its capacity without the client falling behind).
static SLOTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(8);

fn slots() -> usize {
    SLOTS.load(Ordering::Relaxed)
}

/// The backend's capacity, requests per second (`slots / SERVICE`).
fn capacity() -> f64 {
    slots() as f64 / SERVICE.as_secs_f64()
}
/// Each request's service time.
const SERVICE: Duration = Duration::from_millis(20);
/// A 200 answer within this counts as goodput.
const OBJECTIVE: Duration = Duration::from_millis(200);
/// The client gives a request up after this.
const GIVE_UP: Duration = Duration::from_secs(1);
/// The share of critical requests.
const CRITICAL_SHARE: f64 = 0.2;
/// The gradient rows' share of the limit kept for critical requests.
const CRITICAL_RESERVE: f64 = 0.5;
/// The queue of the `newest-first` and `gradient-queue` rows, served newest first: 8
/// waiters per slot of the backend, each for at most 175 ms (the objective less the
/// service time and a little margin: a waiter older than that cannot count anyway).
const NEWEST_QUEUE_PER_SLOT: u64 = 8;
const NEWEST_QUEUE_WAIT: Duration = Duration::from_millis(175);
/// The `gradient-queue` row's latency tolerance: with a queue in front, the limit can
/// sit closer to the backend's real concurrency (the default 1.25 keeps 25% more in
/// flight, which the backend makes wait inside).
const QUEUE_RTT_TOLERANCE: f64 = 1.15;

/// The protections compared, in table order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Protection {
    None,
    Tower,
    Queue,
    NewestFirst,
    Adaptive,
    Gradient,
    GradientQueue,
}

impl Protection {
    const ALL: [Protection; 7] = [
        Protection::None,
        Protection::Tower,
        Protection::Queue,
        Protection::NewestFirst,
        Protection::Adaptive,
        Protection::Gradient,
        Protection::GradientQueue,
    ];

    fn label(self) -> String {
        let n = slots();
        match self {
            Protection::None => "none".into(),
            Protection::Tower => format!("tower ConcurrencyLimit({n}) + LoadShed"),
            Protection::Queue => format!("PointLayer max_concurrency({n}) + queue({n}, 100 ms)"),
            Protection::NewestFirst => format!(
                "PointLayer max_concurrency({n}) + queue({}, {} ms) newest first",
                NEWEST_QUEUE_PER_SLOT * n as u64,
                NEWEST_QUEUE_WAIT.as_millis()
            ),
            Protection::Adaptive => "PointLayer gradient".into(),
            Protection::Gradient => "PointLayer gradient + priorities".into(),
            Protection::GradientQueue => format!(
                "PointLayer gradient + priorities + queue({}, {} ms) newest first",
                NEWEST_QUEUE_PER_SLOT * n as u64,
                NEWEST_QUEUE_WAIT.as_millis()
            ),
        }
    }

    fn short(self) -> &'static str {
        match self {
            Protection::None => "none",
            Protection::Tower => "tower",
            Protection::Queue => "queue",
            Protection::NewestFirst => "newest-first",
            Protection::Adaptive => "adaptive",
            Protection::Gradient => "gradient",
            Protection::GradientQueue => "gradient-queue",
        }
    }
}

/// The backend: a semaphore of 8 slots held 20 ms per request, and the time requests
/// spent in the handler (for the mean flight).
struct Backend {
    slots: Semaphore,
    busy_ns: AtomicU64,
}

async fn work(State(backend): State<Arc<Backend>>) -> &'static str {
    let start = Instant::now();
    // Measured however the handler ends (a client that gave up drops it).
    struct Account<'a>(&'a Backend, Instant);
    impl Drop for Account<'_> {
        fn drop(&mut self) {
            let ns = self.1.elapsed().as_nanos() as u64;
            self.0.busy_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }
    let _account = Account(&backend, start);
    let _slot = backend.slots.acquire().await;
    tokio::time::sleep(SERVICE).await;
    "ok"
}

fn router(
    protection: Protection,
    backend: Arc<Backend>,
    row: &str,
) -> Result<Router, Box<dyn std::error::Error>> {
    let route = get(work);
    let route = match protection {
        Protection::None => route,
        Protection::Tower => route.route_layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|_: BoxError| async {
                    StatusCode::SERVICE_UNAVAILABLE
                }))
                .layer(tower::load_shed::LoadShedLayer::new())
                .layer(tower::limit::ConcurrencyLimitLayer::new(slots())),
        ),
        Protection::Queue => {
            let policy = Policy::builder()
                .max_concurrency(slots() as u64)
                .queue(slots() as u64, Duration::from_millis(100))
                .build()?;
            registry().set_policy(row, policy)?;
            route.route_layer(PointLayer::new(row)?.respond())
        }
        Protection::NewestFirst => {
            let policy = Policy::builder()
                .max_concurrency(slots() as u64)
                .queue(NEWEST_QUEUE_PER_SLOT * slots() as u64, NEWEST_QUEUE_WAIT)
                .queue_order(QueueOrder::NewestFirst)
                .build()?;
            registry().set_policy(row, policy)?;
            route.route_layer(PointLayer::new(row)?.respond())
        }
        Protection::Adaptive => {
            let policy = Policy::builder()
                .adaptive(AdaptiveLimit::Gradient(GradientConfig::default()))
                .build()?;
            registry().set_policy(row, policy)?;
            route.route_layer(PointLayer::new(row)?.respond())
        }
        Protection::Gradient | Protection::GradientQueue => {
            let mut gradient = GradientConfig::builder().critical_reserve(CRITICAL_RESERVE);
            if protection == Protection::GradientQueue {
                gradient = gradient.rtt_tolerance(QUEUE_RTT_TOLERANCE);
            }
            let gradient = gradient.build()?;
            let mut policy = Policy::builder().adaptive(AdaptiveLimit::Gradient(gradient));
            if protection == Protection::GradientQueue {
                policy = policy
                    .queue(NEWEST_QUEUE_PER_SLOT * slots() as u64, NEWEST_QUEUE_WAIT)
                    .queue_order(QueueOrder::NewestFirst);
            }
            let policy = policy.build()?;
            registry().set_policy(row, policy)?;
            route.route_layer(
                ServiceBuilder::new()
                    .layer(PriorityLayer::header("x-priority"))
                    .layer(PointLayer::new(row)?.respond()),
            )
        }
    };
    Ok(Router::new().route("/work", route).with_state(backend))
}

/// How one request ended.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    critical: bool,
    /// The status, `None` for a request given up or failed on the wire.
    status: Option<u16>,
    latency: Duration,
}

/// Keep-alive connections to the server, one request at a time each.
#[derive(Default)]
struct Pool(Mutex<Vec<TcpStream>>);

/// One `GET /work` over a pooled connection (or a new one); the status.
async fn request(pool: &Pool, addr: SocketAddr, critical: bool) -> std::io::Result<u16> {
    let popped = pool.0.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let mut s = match popped {
        Some(s) => s,
        None => {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            s
        }
    };
    let priority = if critical { "critical" } else { "default" };
    let req = format!("GET /work HTTP/1.1\r\nhost: {addr}\r\nx-priority: {priority}\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    let (head_end, status, length, close) = loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or(std::io::ErrorKind::InvalidData)?;
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let close = head.contains("connection: close");
            break (i + 4, status, length, close);
        }
    };
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    if !close {
        pool.0.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    }
    Ok(status)
}

/// SplitMix64, for seeded arrivals and tiers.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// What a row measured.
#[derive(Clone, Copy, Debug, Default)]
struct Row {
    rate: f64,
    /// Requests sent per second while measuring (the Poisson count of the row's seed).
    offered: f64,
    goodput: f64,
    p50: Duration,
    p99: Duration,
    refused_share: f64,
    critical_success: f64,
    other_success: f64,
    mean_flight: f64,
}

/// Drives `protection` at `rate` requests per second: a fresh server, `warmup` of
/// load, then `measure` of load measured.
fn run_row(
    protection: Protection,
    rate: f64,
    warmup: Duration,
    measure: Duration,
    seed: u64,
) -> Result<Row, Box<dyn std::error::Error>> {
    let backend = Arc::new(Backend {
        slots: Semaphore::new(slots()),
        busy_ns: AtomicU64::new(0),
    });
    let row_name = format!(
        "overload.{}.{}x.{seed}",
        protection.short(),
        (rate / capacity()).round()
    );
    let app = router(protection, backend.clone(), &row_name)?;
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = server.block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))?;
    let addr = listener.local_addr()?;
    server.spawn(async move { axum::serve(listener, app).await });

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    // The backend's handler time accumulated when the measure began and at its end.
    let busy = client.block_on(async {
        let pool = Arc::new(Pool::default());
        let mut rng = Rng(seed);
        let start = tokio::time::Instant::now();
        let measure_from = start + warmup;
        let end = measure_from + measure;
        let mut next = start;
        let mut busy_at_measure = None;
        let mut tasks = Vec::new();
        while next < end {
            tokio::time::sleep_until(next).await;
            let now = tokio::time::Instant::now();
            if busy_at_measure.is_none() && now >= measure_from {
                busy_at_measure = Some(backend.busy_ns.load(Ordering::Relaxed));
            }
            // Every arrival due by now (the timer ticks by the millisecond).
            while next <= now && next < end {
                let scheduled = next;
                let critical = rng.next_f64() < CRITICAL_SHARE;
                let (pool, outcomes) = (pool.clone(), outcomes.clone());
                tasks.push(tokio::spawn(async move {
                    let answer =
                        tokio::time::timeout(GIVE_UP, request(&pool, addr, critical)).await;
                    if scheduled < measure_from {
                        return;
                    }
                    let latency = scheduled.elapsed().min(GIVE_UP);
                    let status = answer.ok().and_then(Result::ok);
                    outcomes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(Outcome {
                            critical,
                            status,
                            latency,
                        });
                }));
                let gap = -rng.next_f64().ln() / rate;
                next += Duration::from_secs_f64(gap);
            }
        }
        let busy_end = backend.busy_ns.load(Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        (busy_at_measure.unwrap_or(0), busy_end)
    });
    drop(client);
    server.shutdown_timeout(Duration::from_millis(100));

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap_or_else(|p| p.into_inner()));
    let secs = measure.as_secs_f64();
    let good = |o: &Outcome| o.status == Some(200) && o.latency <= OBJECTIVE;
    let share = |critical: bool| {
        let tier: Vec<_> = outcomes.iter().filter(|o| o.critical == critical).collect();
        if tier.is_empty() {
            return 1.0;
        }
        tier.iter().filter(|o| good(o)).count() as f64 / tier.len() as f64
    };
    let mut ok: Vec<Duration> = outcomes
        .iter()
        .filter(|o| o.status.is_none_or(|s| s == 200))
        .map(|o| o.latency)
        .collect();
    ok.sort_unstable();
    let pct = |q: f64| {
        if ok.is_empty() {
            return Duration::ZERO;
        }
        ok[((ok.len() as f64 * q).ceil() as usize).clamp(1, ok.len()) - 1]
    };
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o.status, Some(s) if s != 200))
        .count();
    let sent = outcomes.len().max(1);
    Ok(Row {
        rate,
        offered: outcomes.len() as f64 / secs,
        goodput: outcomes.iter().filter(|o| good(o)).count() as f64 / secs,
        p50: pct(0.5),
        p99: pct(0.99),
        refused_share: refused as f64 / sent as f64,
        critical_success: share(true),
        other_success: share(false),
        // Handler time accumulated while measuring (calls straddling the edges are
        // counted when they end), over the measured time: the mean flight.
        mean_flight: busy.1.saturating_sub(busy.0) as f64 / 1e9 / secs,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// The table, in Markdown.
fn table(results: &[(Protection, Vec<Row>)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| protection | load | offered/s | goodput/s | p50 ms | p99 ms | refused | critical ok | other ok | in flight |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for (p, rows) in results {
        for r in rows {
            let _ = writeln!(
                out,
                "| {} | {:.0}x | {:.0} | {:.0} | {} | {} | {:.0}% | {:.0}% | {:.0}% | {:.1} |",
                p.label(),
                r.rate / capacity(),
                r.offered,
                r.goodput,
                ms(r.p50),
                ms(r.p99),
                100.0 * r.refused_share,
                100.0 * r.critical_success,
                100.0 * r.other_success,
                r.mean_flight,
            );
        }
    }
    out
}

/// A chart of goodput (left) and p50 latency (right) against the offered load, one
/// line per protection, as a standalone SVG.
fn svg(results: &[(Protection, Vec<Row>)]) -> String {
    const COLORS: [&str; 7] = [
        "#9e9e9e", "#e69f00", "#0072b2", "#56b4e9", "#cc79a7", "#009e73", "#d55e00",
    ];
    // The legend below the panels, one protection a line.
    let (w, h) = (760.0, 300.0 + 18.0 * results.len() as f64 + 10.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r##"<rect width="{w}" height="{h}" fill="#ffffff"/>"##);
    // Two panels: goodput/s (0..capacity() x 1.1) and p50 ms (log scale 10..1000).
    let panels: [(&str, f64); 2] = [
        ("goodput/s (answers within 200 ms)", 40.0),
        ("p50 latency, ms (log)", 420.0),
    ];
    let (pw, ph, top) = (300.0, 220.0, 40.0);
    let loads = [1.0, 2.0, 4.0];
    let x_of = |x0: f64, load: f64| x0 + 30.0 + (load.log2() / 2.0) * (pw - 60.0);
    for (i, (title, x0)) in panels.iter().enumerate() {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="24" font-weight="bold">{title}</text>"##,
            x0
        );
        let _ = writeln!(
            out,
            r##"<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#cccccc"/>"##
        );
        for load in loads {
            let x = x_of(*x0, load);
            let _ = writeln!(
                out,
                r##"<text x="{x}" y="{}" text-anchor="middle">{load:.0}x</text>"##,
                top + ph + 16.0
            );
        }
        let ticks: Vec<(f64, String)> = if i == 0 {
            [0.0, 100.0, 200.0, 300.0, 400.0]
                .iter()
                .map(|v| (top + ph - v / (capacity() * 1.1) * ph, format!("{v:.0}")))
                .collect()
        } else {
            [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
                .iter()
                .map(|v: &f64| (top + ph - (v.log10() - 1.0) / 2.0 * ph, format!("{v:.0}")))
                .collect()
        };
        for (y, label) in ticks {
            let _ = writeln!(
                out,
                r##"<line x1="{x0}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eeeeee"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
                x0 + pw,
                x0 - 4.0,
                y + 4.0
            );
        }
        for (k, (p, rows)) in results.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let points: Vec<String> = rows
                .iter()
                .map(|r| {
                    let load = r.rate / capacity();
                    let y = if i == 0 {
                        top + ph - r.goodput / (capacity() * 1.1) * ph
                    } else {
                        let v = (r.p50.as_secs_f64() * 1e3).clamp(10.0, 1000.0);
                        top + ph - (v.log10() - 1.0) / 2.0 * ph
                    };
                    format!("{:.1},{:.1}", x_of(*x0, load), y)
                })
                .collect();
            let _ = writeln!(
                out,
                r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2.5"/>"##,
                points.join(" ")
            );
            for pt in &points {
                let (x, y) = pt.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(
                    out,
                    r##"<circle cx="{x}" cy="{y}" r="3.5" fill="{color}"><title>{}</title></circle>"##,
                    p.label()
                );
            }
        }
    }
    // Legend.
    for (k, (p, _)) in results.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let (x, y) = (40.0, top + ph + 40.0 + k as f64 * 18.0);
        let _ = writeln!(
            out,
            r##"<rect x="{x}" y="{}" width="14" height="4" fill="{color}"/><text x="{}" y="{}">{}</text>"##,
            y - 6.0,
            x + 20.0,
            y,
            p.label()
        );
    }
    let _ = writeln!(out, "</svg>");
    out
}

struct Args {
    warmup: Duration,
    secs: Duration,
    svg: Option<String>,
    smoke: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        warmup: Duration::from_secs(2),
        secs: Duration::from_secs(3),
        svg: None,
        smoke: false,
    };
    let mut it = std::env::args().skip(1);
    let secs = |v: Option<String>, flag: &str| -> Result<Duration, String> {
        v.and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{flag}: expected a positive number of seconds"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--warmup" => a.warmup = secs(it.next(), "--warmup")?,
            "--secs" => a.secs = secs(it.next(), "--secs")?,
            "--svg" => a.svg = Some(it.next().ok_or("--svg: missing path")?),
            "--smoke" => a.smoke = true,
            _ => {
                return Err(format!(
                    "unknown option {flag}; expected --warmup, --secs, --svg or --smoke"
                ))
            }
        }
    }
    if a.smoke {
        a.warmup = Duration::from_secs(3);
        a.secs = Duration::from_secs(1);
        SLOTS.store(4, Ordering::Relaxed);
    }
    Ok(a)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let loads: &[f64] = if args.smoke { &[4.0] } else { &[1.0, 2.0, 4.0] };
    println!(
        "backend: {} slots x {SERVICE:?} = {:.0} requests/s; open-loop Poisson arrivals, \
         {:.0}% critical; warm-up {:?}, then {:?} measured per row; objective {OBJECTIVE:?}\n",
        slots(),
        capacity(),
        CRITICAL_SHARE * 100.0,
        args.warmup,
        args.secs
    );
    let mut results = Vec::new();
    let only = std::env::var("OVERLOAD_ONLY").ok();
    for p in Protection::ALL {
        if only.as_deref().is_some_and(|o| o != p.short()) {
            continue;
        }
        let mut rows = Vec::new();
        for (j, load) in loads.iter().enumerate() {
            // One seed per load: every protection meets the same arrivals.
            let seed = 0x5eed + j as u64;
            rows.push(run_row(p, load * capacity(), args.warmup, args.secs, seed)?);
        }
        results.push((p, rows));
    }
    print!("{}", table(&results));
    println!(
        "\ngoodput: 200 answers within {OBJECTIVE:?} per second; p50/p99: 200 answers (and requests given up, at {GIVE_UP:?});\n\
         critical/other ok: the tier's requests answered 200 within the objective; in flight: mean requests in the handler."
    );
    if let Some(path) = &args.svg {
        std::fs::write(path, svg(&results))?;
        println!("chart written to {path}");
    }
    if args.smoke {
        check(&results)?;
    }
    Ok(())
}

/// The smoke's checks, loose enough for a busy 2-core host and a debug build.
fn check(results: &[(Protection, Vec<Row>)]) -> Result<(), String> {
    let at = |p: Protection| {
        results
            .iter()
            .find(|(q, _)| *q == p)
            .and_then(|(_, rows)| rows.last().copied())
            .unwrap_or_default()
    };
    let none = at(Protection::None);
    for p in [
        Protection::Tower,
        Protection::Queue,
        Protection::NewestFirst,
        Protection::Adaptive,
        Protection::Gradient,
        Protection::GradientQueue,
    ] {
        let r = at(p);
        if r.goodput < 2.0 * none.goodput + 0.25 * capacity() {
            return Err(format!(
                "{}: goodput {:.0}/s at 4x, not well above none's {:.0}/s",
                p.label(),
                r.goodput,
                none.goodput
            ));
        }
    }
    // Newest first serves most requests at once where the full first-in-first-out
    // queue makes each wait nearly its length.
    let (fifo, newest) = (at(Protection::Queue), at(Protection::NewestFirst));
    if newest.p50 >= fifo.p50 {
        return Err(format!(
            "{}: p50 {:?} at 4x, not below the oldest-first queue's {:?}",
            Protection::NewestFirst.label(),
            newest.p50,
            fifo.p50
        ));
    }
    // The gradient limit finds the backend's concurrency over real HTTP: started at
    // 20, it has come down near the 4 slots by the end of the warm-up (about 1.2x to
    // 1.7x of them in a debug build; the limit it replaced kept 3.5x to 4.6x of 8 in
    // the guide's release run).
    for p in [
        Protection::Adaptive,
        Protection::Gradient,
        Protection::GradientQueue,
    ] {
        let g = at(p);
        if g.mean_flight > 2.0 * slots() as f64 {
            return Err(format!(
                "{}: {:.1} requests in flight at 4x, more than twice the backend's {} slots",
                p.label(),
                g.mean_flight,
                slots()
            ));
        }
    }
    for p in [Protection::Gradient, Protection::GradientQueue] {
        let g = at(p);
        if g.critical_success < 0.6 || g.critical_success <= g.other_success {
            return Err(format!(
                "{}: critical success {:.0}% (other {:.0}%) at 4x",
                p.label(),
                100.0 * g.critical_success,
                100.0 * g.other_success
            ));
        }
    }
    println!("smoke: ok");
    Ok(())
}
