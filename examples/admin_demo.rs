//! One instance of a demo service that reports to resilience-admin: a steady load on
//! an annotated function, the heartbeat client uploading its statistics and pulling
//! its policies, and one line per second saying what got through.
//!
//! `scripts/admin-demo.sh` starts the admin and two of these; by hand:
//!
//! ```text
//! cargo run -p examples --example admin_demo -- --instance a --token APP_TOKEN
//! ```
//!
//! Options: `--server URL` (default `http://127.0.0.1:7070`), `--token TOKEN` (or
//! `RESILIENCE_APP_TOKEN`), `--instance NAME`, `--rate CALLS_PER_SECOND` (default
//! 200), `--seconds N` (default: run until stopped), `--sds` (speak SDS's protocol),
//! `--policy-file PATH` (also watch a local policy file: its layer sits under the
//! console's, see the runtime guide's "Policies at runtime"), `--cache PATH` (keep the
//! console's policies in a file, enforced at the next start even if the console is
//! down).
//!
//! Each line also says where `demo.checkout`'s settings come from, section by section.

use resilience_runtime::heartbeat::{self, HeartbeatConfig, Protocol};
use resilience_runtime::{downgrade, registry, Downgraded, Reason};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Checkout: a payment is declined now and then.
#[downgrade(point = "demo.checkout")]
fn checkout(order: u64) -> Result<u64, CheckoutError> {
    if order.is_multiple_of(50) {
        return Err(CheckoutError::PaymentDeclined);
    }
    Ok(order * 3)
}

/// Declared but never called: the dashboard lists it as a point without traffic.
#[downgrade(point = "demo.refund", default)]
fn refund(order: u64) -> u64 {
    order
}

#[derive(Debug)]
enum CheckoutError {
    PaymentDeclined,
    Busy(Downgraded),
}

impl From<Downgraded> for CheckoutError {
    fn from(d: Downgraded) -> Self {
        CheckoutError::Busy(d)
    }
}

struct Options {
    server: String,
    token: Option<String>,
    instance: String,
    rate: u64,
    seconds: Option<u64>,
    protocol: Protocol,
    policy_file: Option<String>,
    cache: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        server: "http://127.0.0.1:7070".into(),
        token: std::env::var("RESILIENCE_APP_TOKEN").ok(),
        instance: format!("demo-{}", std::process::id()),
        rate: 200,
        seconds: None,
        protocol: Protocol::Json,
        policy_file: None,
        cache: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--server" => o.server = value()?,
            "--token" => o.token = Some(value()?),
            "--instance" => o.instance = value()?,
            "--rate" => o.rate = value()?.parse().map_err(|_| "--rate: a number")?,
            "--seconds" => o.seconds = Some(value()?.parse().map_err(|_| "--seconds: a number")?),
            "--sds" => o.protocol = Protocol::Sds,
            "--policy-file" => o.policy_file = Some(value()?),
            "--cache" => o.cache = Some(value()?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

/// `rules=console@3 breaker=file:policies.toml@1`: where each section of a point's
/// settings comes from.
fn sources(point: &str) -> String {
    let Ok(e) = registry().effective_policy(point) else {
        return "-".into();
    };
    let parts: Vec<String> = e
        .origins()
        .map(|(section, o)| format!("{section}={}@{}", o.source, o.version))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" ")
    }
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("admin_demo: {e}");
            std::process::exit(2);
        }
    };
    let mut config = HeartbeatConfig::builder("demo", "shop", &o.server)
        .instance(o.instance.as_str())
        .protocol(o.protocol);
    if let Some(t) = &o.token {
        config = config.token(t.clone());
    }
    if let Some(path) = &o.cache {
        config = config.cache_file(path);
    }
    let config = config.build().unwrap_or_else(|e| {
        eprintln!("admin_demo: {e}");
        std::process::exit(2);
    });
    // A local file, watched: its layer keeps what the console does not set.
    let _watcher = o.policy_file.as_ref().map(|path| {
        registry().watch_policies(path).unwrap_or_else(|e| {
            eprintln!("admin_demo: {e}");
            std::process::exit(2);
        })
    });
    // Reports every 10 s and pulls every 5 s until dropped.
    let hb = heartbeat::start(config).expect("heartbeat thread");

    // What happened in the last second, downgrades by reason.
    let mut reasons: BTreeMap<Reason, u64> = BTreeMap::new();
    let (mut passed, mut declined) = (0u64, 0u64);
    let started = Instant::now();
    let pause = Duration::from_nanos(1_000_000_000 / o.rate.max(1));
    let mut order = 0u64;
    let mut next_report = started + Duration::from_secs(1);
    let _ = refund;
    loop {
        order += 1;
        match checkout(order) {
            Ok(_) => passed += 1,
            Err(CheckoutError::PaymentDeclined) => declined += 1,
            Err(CheckoutError::Busy(d)) => *reasons.entry(d.reason()).or_default() += 1,
        }
        std::thread::sleep(pause);
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(1);
            let status = hb.client().status();
            let by_reason: Vec<String> = std::mem::take(&mut reasons)
                .into_iter()
                .map(|(r, n)| format!("{n} {}", r.as_str()))
                .collect();
            println!(
                "[{}] policy v{} | last second: {passed} passed, {declined} declined, downgraded: {}{} | sources: {}",
                o.instance,
                status.policy_version,
                if by_reason.is_empty() { "none".to_owned() } else { by_reason.join(", ") },
                status
                    .last_pull_error
                    .map(|e| format!(" | admin unreachable: {e}"))
                    .unwrap_or_default(),
                sources("demo.checkout"),
            );
            (passed, declined) = (0, 0);
            if o.seconds
                .is_some_and(|s| started.elapsed() >= Duration::from_secs(s))
            {
                break;
            }
        }
    }
    hb.stop();
}
