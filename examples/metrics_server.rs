//! Operating the runtime: follows `examples/policies.toml` (edit it while this runs:
//! good edits apply, broken ones are reported and ignored), lists the declared points,
//! drives some traffic, and serves every point's metrics at
//! `http://127.0.0.1:9464/metrics` with a tiny std-only HTTP responder.
//!
//! ```sh
//! cargo run -p examples --example metrics_server
//! curl -s http://127.0.0.1:9464/metrics | grep order_create
//! ```
//!
//! Options: `--addr 127.0.0.1:PORT` (port 0 picks a free one) and `--requests N` to exit
//! after serving N requests (for smoke tests).

use resilience_runtime::config::WatchOptions;
use resilience_runtime::{downgrade, metrics, registry, Downgraded};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

#[derive(Debug)]
enum Error {
    Downgraded,
    Failed,
}

impl From<Downgraded> for Error {
    fn from(_: Downgraded) -> Self {
        Error::Downgraded
    }
}

#[downgrade(point = "order.create")]
fn create_order(n: u64) -> Result<u64, Error> {
    // One call in ten fails, to give the exception counters something to show.
    if n.is_multiple_of(10) {
        return Err(Error::Failed);
    }
    Ok(n)
}

#[downgrade(point = "search.query", default)]
fn search(n: u64) -> Vec<u64> {
    std::thread::sleep(Duration::from_millis(n % 3));
    vec![n]
}

#[downgrade(point = "recommendations", default)]
fn recommendations(n: u64) -> Vec<u64> {
    vec![n, n + 1]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut addr = "127.0.0.1:9464".to_owned();
    let mut requests: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => addr = args.next().ok_or("--addr needs a value")?,
            "--requests" => {
                requests = Some(args.next().ok_or("--requests needs a value")?.parse()?)
            }
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }

    println!("declared points:");
    for p in registry().declared_points() {
        println!("  {p}");
    }

    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies.toml");
    let watcher = registry().watch_policies_with(
        &file,
        WatchOptions::builder()
            .on_reload(|result| match result {
                Ok(report) => {
                    println!("policies v{} applied: {:?}", report.version, report.applied)
                }
                Err(e) => eprintln!("{e}\n(the last good policies stay in force)"),
            })
            .build(),
    )?;
    println!(
        "policies v{} from {} in force",
        watcher.status().version,
        file.display()
    );

    std::thread::spawn(|| {
        let mut n = 0u64;
        loop {
            n += 1;
            let _ = create_order(n);
            let _ = search(n);
            let _ = recommendations(n);
            std::thread::sleep(Duration::from_millis(2));
        }
    });

    let listener = TcpListener::bind(&addr)?;
    println!("serving http://{}/metrics", listener.local_addr()?);
    for (served, stream) in (1..).zip(listener.incoming()) {
        if let Err(e) = serve(stream?) {
            eprintln!("request failed: {e}");
        }
        if requests.is_some_and(|max| served >= max) {
            break;
        }
    }
    Ok(())
}

/// Answers one HTTP/1.x request: the metrics at `/metrics`, 404 elsewhere.
fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Skip the headers; the responder needs none of them.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let (status, content_type, body) = if path == "/metrics" {
        ("200 OK", metrics::CONTENT_TYPE, metrics::render())
    } else {
        ("404 Not Found", "text/plain", "try /metrics\n".to_owned())
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
