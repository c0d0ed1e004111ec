//! A bounded load test over loopback: 200 simulated instances in 20 apps heartbeat
//! 1 000 points each (with their 1-second buckets, in two parts as the runtime's
//! client splits them), pull twice per cycle, while dashboards read in parallel.
//!
//! The server is the real `resilience-admin` binary, run as a subprocess on
//! 127.0.0.1 (SQLite; PostgreSQL too when `RESILIENCE_ADMIN_PG_URL` is set and the
//! `postgres` feature is on), so its memory is its own resident set
//! (`/proc/<pid>/status`). The clients are 8 threads: 6 play the instances, 2 the
//! dashboards. It checks that every request succeeded, that the stored figures add
//! up to what was sent, and that no request kind has a p99 above 5 s; it prints one
//! table of p50/p99 per request kind and the server's memory (`--nocapture`).
//!
//! Bounded: a fixed amount of work (`ROUNDS` cycles of all 200 instances; on
//! PostgreSQL fewer points per instance, `PG_POINTS`), every request with a 20 s
//! read timeout; the two tests run one after the other. `RESILIENCE_LOAD_ROUNDS=N`
//! and `RESILIENCE_LOAD_PG_POINTS=N` run more by hand.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const GROUP: &str = "load";
const APPS: usize = 20;
const INSTANCES_PER_APP: usize = 10;
const INSTANCES: usize = APPS * INSTANCES_PER_APP;
/// Points per instance on SQLite (every instance of an app reports the same ones).
const POINTS: usize = 1_000;
/// Parts per heartbeat: 1 000 points with their seconds are about 280 KiB of JSON,
/// above the 256 KiB body limit; the runtime's client would send them in two parts
/// of at most 192 KiB, so do we.
const PARTS: usize = 2;
/// The runtime's client's default body limit (192 KiB).
const CLIENT_MAX_BODY: usize = resilience_runtime::heartbeat::DEFAULT_MAX_BODY_BYTES;
/// Cycles of all 200 instances on SQLite: one in the debug profile (a debug server
/// ingests some 6 500 points a second, about 30 s a round), two in release (some
/// 16 000 a second).
const ROUNDS: usize = if cfg!(debug_assertions) { 1 } else { 2 };
/// Threads playing the instances, and the dashboards.
const INGEST_THREADS: usize = 6;
const DASHBOARD_THREADS: usize = 2;
/// Each dashboard thread refreshes at most this often (the dashboard's own period is
/// 5 s): the reads of some five open dashboards, which share the store's one
/// connection with the heartbeats.
const DASHBOARD_PERIOD: Duration = Duration::from_secs(2);
/// Points with an enforcement entry (and local settings) per instance: every 100th.
const ENFORCED_EVERY: usize = 100;
/// The bound on every kind's p99 (debug build, 2 cores).
const P99_BOUND: Duration = Duration::from_secs(5);

/// The two load tests must not run at the same time: they would measure each other.
static SERIAL: Mutex<()> = Mutex::new(());

/// What one run sends.
#[derive(Clone, Copy, Debug)]
struct Plan {
    label: &'static str,
    points: usize,
    rounds: usize,
}

fn rounds(default: usize) -> usize {
    std::env::var("RESILIENCE_LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn app_name(app: usize) -> String {
    format!("app-{app:02}")
}

fn instance_name(app: usize, inst: usize) -> String {
    format!("app-{app:02}-i{inst}")
}

fn point_name(point: usize) -> String {
    format!("svc.point-{point:04}")
}

/// The figures instance `inst` of `app` reports for `point` in round `round`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
struct Figures {
    visits: u64,
    downgrades: u64,
    exceptions: u64,
}

fn figures(app: usize, inst: usize, point: usize, round: usize) -> Figures {
    let visits = 1 + ((point * 31 + inst * 17 + app * 7 + round * 13) % 20) as u64;
    Figures {
        visits,
        downgrades: u64::from(point.is_multiple_of(4)),
        exceptions: u64::from((point + inst).is_multiple_of(5)),
    }
}

/// Second `k`'s `[visits, passes, downgrades, exceptions, timeouts]`: the visits
/// spread over the ten seconds, the downgrade and the exception in second 0.
fn second(f: Figures, k: u64) -> [u64; 5] {
    let visits = f.visits / 10 + u64::from(k < f.visits % 10);
    let (downgrades, exceptions) = if k == 0 {
        (f.downgrades, f.exceptions)
    } else {
        (0, 0)
    };
    [visits, visits - downgrades, downgrades, exceptions, 0]
}

/// Part `part` of the heartbeat of one instance for one cycle, as the runtime's
/// client would write it: its share of `points` and `known_points`, the enforcement
/// entries in the part of their point, the client's health.
fn heartbeat_body(
    plan: &Plan,
    app: usize,
    inst: usize,
    round: usize,
    cycle: i64,
    version: u64,
    part: usize,
) -> String {
    let per_part = plan.points.div_ceil(PARTS);
    let range = part * per_part..((part + 1) * per_part).min(plan.points);
    let mut s = String::with_capacity(per_part * 300 + 1024);
    write!(
        s,
        r#"{{"app_group":"{GROUP}","app":"{}","instance":"{}","host":"host-{inst}","ip":"10.0.{app}.{inst}","cycle_start_ms":{cycle},"policy_version":{version},"part":{part},"parts":{PARTS},"points":["#,
        app_name(app),
        instance_name(app, inst)
    )
    .unwrap();
    for (n, p) in range.clone().enumerate() {
        let f = figures(app, inst, p, round);
        if n > 0 {
            s.push(',');
        }
        write!(
            s,
            r#"{{"name":"{}","visits":{},"passes":{},"downgrades":{},"exceptions":{},"timeouts":0,"peak_concurrency":{}"#,
            point_name(p),
            f.visits,
            f.visits - f.downgrades,
            f.downgrades,
            f.exceptions,
            1 + p % 3
        )
        .unwrap();
        if f.downgrades > 0 {
            write!(
                s,
                r#","downgrades_by_reason":{{"visits":{}}}"#,
                f.downgrades
            )
            .unwrap();
        }
        s.push_str(r#","seconds":["#);
        for k in 0..10 {
            let [v, pa, d, e, t] = second(f, k);
            if k > 0 {
                s.push(',');
            }
            write!(s, "[{v},{pa},{d},{e},{t}]").unwrap();
        }
        s.push(']');
        if f.downgrades > 0 {
            write!(
                s,
                r#","seconds_by_reason":{{"visits":[{},0,0,0,0,0,0,0,0,0]}}"#,
                f.downgrades
            )
            .unwrap();
        }
        s.push('}');
    }
    s.push_str(r#"],"known_points":["#);
    for (n, p) in range.clone().enumerate() {
        if n > 0 {
            s.push(',');
        }
        write!(s, r#""{}""#, point_name(p)).unwrap();
    }
    s.push_str(r#"],"enforcing":["#);
    for (n, p) in range
        .filter(|p| p.is_multiple_of(ENFORCED_EVERY))
        .enumerate()
    {
        if n > 0 {
            s.push(',');
        }
        write!(
            s,
            r#"{{"name":"{}","digest":"0123456789abcdef","origins":{{"rules":{{"source":"code","version":1}}}},"local":{{"rules":{{"max_visits":{}}}}}}}"#,
            point_name(p),
            500 + p
        )
        .unwrap();
    }
    s.push_str(
        r#"],"client":{"last_upload_error":null,"last_pull_error":null,"from_cache":false,"uploads_dropped":0,"pull_failures":0,"policies_rejected":0}}"#,
    );
    s
}

/// The server binary as a subprocess, killed when dropped.
struct Subprocess {
    child: Child,
    addr: SocketAddr,
}

impl Subprocess {
    fn start(storage: &[&str]) -> Subprocess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_resilience-admin"))
            .args(["--bind", "127.0.0.1:0"])
            .args(storage)
            .env("RESILIENCE_ADMIN_TOKEN", ADMIN)
            .env("RESILIENCE_APP_TOKENS", APP)
            .env_remove("RESILIENCE_READ_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the resilience-admin binary starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines
            .next()
            .expect("the server prints its address")
            .unwrap();
        let addr: SocketAddr = first
            .split("http://")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no address in {first:?}"));
        assert!(addr.ip().is_loopback());
        // The rest of its output (the dashboard line) is read and dropped.
        std::thread::spawn(move || for _ in lines {});
        Subprocess { child, addr }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Subprocess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// CPU time (user + system) of process `pid` so far, exited threads included
/// (`/proc/<pid>/stat`, at Linux's USER_HZ of 100 ticks a second).
fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Latencies by request kind, kept in the order kinds are first seen.
#[derive(Default)]
struct Latencies {
    kinds: Vec<(&'static str, Vec<Duration>)>,
    failures: Vec<String>,
}

impl Latencies {
    fn add(&mut self, kind: &'static str, d: Duration) {
        match self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, v)) => v.push(d),
            None => self.kinds.push((kind, vec![d])),
        }
    }

    fn merge(&mut self, other: Latencies) {
        for (kind, v) in other.kinds {
            for d in v {
                self.add(kind, d);
            }
        }
        self.failures.extend(other.failures);
    }

    /// Times a request and checks it answered 2xx.
    fn timed(
        &mut self,
        kind: &'static str,
        what: &str,
        f: impl FnOnce() -> Response,
    ) -> Option<Response> {
        let start = Instant::now();
        let r = f();
        self.add(kind, start.elapsed());
        if (200..300).contains(&r.status) {
            Some(r)
        } else {
            let text: String = r.text().chars().take(300).collect();
            self.failures
                .push(format!("{kind} {what}: status {}: {text}", r.status));
            None
        }
    }
}

/// Nearest-rank percentile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn app_path(app: usize, suffix: &str) -> String {
    format!("/api/v1/apps/{GROUP}/{}{suffix}", app_name(app))
}

/// What the instances know, by instance (`app + APPS * instance of the app`).
struct Fleet {
    /// The policy version each holds.
    versions: Vec<AtomicU64>,
    /// Whether the first part of a heartbeat of it was stored.
    heard: Vec<AtomicBool>,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet {
            versions: (0..INSTANCES).map(|_| AtomicU64::new(0)).collect(),
            heard: (0..INSTANCES).map(|_| AtomicBool::new(false)).collect(),
        }
    }
}

/// One instance's cycle: a pull, the heartbeat's parts, another pull (pulls every
/// 5 s, heartbeats every 10 s).
fn instance_cycle(
    addr: SocketAddr,
    plan: &Plan,
    lat: &mut Latencies,
    fleet: &Fleet,
    g: usize,
    round: usize,
    cycle: i64,
) {
    let (app, inst) = (g % APPS, g / APPS);
    let pull = |lat: &mut Latencies| {
        let held = fleet.versions[g].load(Ordering::Relaxed);
        let body = json!({"app_group": GROUP, "app": app_name(app),
                          "instance": instance_name(app, inst), "host": format!("host-{inst}"),
                          "version": held, "points_count": plan.points});
        let what = instance_name(app, inst);
        if let Some(r) = lat.timed("pull", &what, || {
            post_json(addr, "/api/v1/pull", Some(APP), &body)
        }) {
            let answer = r.json();
            // Every app has version 1: the first pull gets it, the others do not.
            let expected = json!({"changed": held == 0, "version": 1});
            let got = json!({"changed": answer["changed"], "version": answer["version"]});
            if got != expected || (held == 0) == answer["policy"].is_null() {
                lat.failures
                    .push(format!("pull {what} holding {held}: {answer}"));
            }
            fleet.versions[g].store(1, Ordering::Relaxed);
        }
    };
    pull(lat);
    for part in 0..PARTS {
        let version = fleet.versions[g].load(Ordering::Relaxed);
        let body = heartbeat_body(plan, app, inst, round, cycle, version, part);
        assert!(body.len() <= CLIENT_MAX_BODY, "{} bytes", body.len());
        let what = format!("{} cycle {cycle} part {part}", instance_name(app, inst));
        if let Some(r) = lat.timed("heartbeat part", &what, || {
            request(
                addr,
                "POST",
                "/api/v1/heartbeat",
                Some(APP),
                Body::Raw(body.as_bytes(), "application/json"),
            )
        }) {
            let answer = r.json();
            let share = plan
                .points
                .div_ceil(PARTS)
                .min(plan.points - part * plan.points.div_ceil(PARTS));
            let expected = json!({"result": "stored", "points": share, "part": part,
                                  "parts": PARTS, "rejected": []});
            if answer != expected {
                lat.failures.push(format!("heartbeat {what}: {answer}"));
            }
            if part == 0 {
                fleet.heard[g].store(true, Ordering::Relaxed);
            }
        }
    }
    pull(lat);
}

/// One dashboard refresh of `app`, with a point and one of its instances selected:
/// what `dashboard.js` requests.
fn dashboard_refresh(
    addr: SocketAddr,
    plan: &Plan,
    lat: &mut Latencies,
    fleet: &Fleet,
    app: usize,
    n: usize,
) {
    // A point with an enforcement entry, in the first part of the heartbeats: the
    // first part of a newer cycle replaces the instance's entries, the others add
    // theirs, so an entry of a later part is briefly missing between the parts.
    let point = point_name((n * ENFORCED_EVERY) % plan.points.div_ceil(PARTS));
    let reads: [(&'static str, String); 9] = [
        ("GET apps", "/api/v1/apps".to_owned()),
        ("GET points", app_path(app, "/points")),
        ("GET instances", app_path(app, "/instances")),
        (
            "GET stats 1s, sum (15 min)",
            app_path(app, "/stats?range=900000&sum=points&resolution=1s"),
        ),
        (
            "GET stats 1s, a point (15 min)",
            app_path(
                app,
                &format!("/stats?range=900000&point={point}&resolution=1s"),
            ),
        ),
        (
            "GET stats 10s, sum (1 h)",
            app_path(app, "/stats?range=3600000&sum=points"),
        ),
        (
            "GET point's instances",
            app_path(app, &format!("/points/{point}/instances")),
        ),
        ("GET policy", app_path(app, "/policy")),
        ("GET policy versions", app_path(app, "/policy/versions")),
    ];
    for (kind, path) in reads {
        lat.timed(kind, &path, || get(addr, &path, None));
    }
    // The local settings of an instance of the app whose first part of a cycle was
    // stored (404 before).
    let inst = n % INSTANCES_PER_APP;
    if fleet.heard[inst * APPS + app].load(Ordering::Relaxed) {
        let path = app_path(
            app,
            &format!(
                "/points/{point}/instances/{}/local",
                instance_name(app, inst)
            ),
        );
        lat.timed("GET local settings", &path, || get(addr, &path, None));
    }
}

/// Checks the stored figures of `app` against what was sent: the cycles summed over
/// points and instances, and (for `full`) every point's rows, its latest cycle in the
/// point list, and the seconds summed over the points.
fn verify_app(addr: SocketAddr, plan: &Plan, cycles: &[i64], app: usize, full: bool) {
    let (from, to) = (cycles[0], cycles[cycles.len() - 1] + 10_000);
    let sent = |point: usize, round: usize| -> Figures {
        (0..INSTANCES_PER_APP).fold(Figures::default(), |acc, inst| {
            let f = figures(app, inst, point, round);
            Figures {
                visits: acc.visits + f.visits,
                downgrades: acc.downgrades + f.downgrades,
                exceptions: acc.exceptions + f.exceptions,
            }
        })
    };
    let read = |path: String| -> Value {
        let r = get(addr, &path, None);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        r.json()
    };

    let summed = read(app_path(
        app,
        &format!("/stats?from={from}&to={to}&sum=points"),
    ));
    let rows = summed["rows"].as_array().unwrap();
    assert_eq!(rows.len(), cycles.len(), "{}: {summed}", app_name(app));
    for (round, (row, &cycle)) in rows.iter().zip(cycles).enumerate() {
        let total = (0..plan.points).fold((0, 0, 0), |(v, d, e), p| {
            let f = sent(p, round);
            (v + f.visits, d + f.downgrades, e + f.exceptions)
        });
        assert_eq!(row["cycle_start_ms"], cycle, "{row}");
        assert_eq!(
            (&row["visits"], &row["downgrades"], &row["exceptions"]),
            (&json!(total.0), &json!(total.1), &json!(total.2)),
            "{} round {round}: {row}",
            app_name(app)
        );
        assert_eq!(row["passes"], total.0 - total.1, "{row}");
        assert_eq!(row["instances"], INSTANCES_PER_APP, "{row}");
    }

    let apps = read("/api/v1/apps".into());
    let listed = apps["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["group"] == GROUP && a["name"] == app_name(app))
        .unwrap_or_else(|| panic!("{} not in {apps}", app_name(app)));
    assert_eq!(listed["instances"], INSTANCES_PER_APP, "{listed}");
    let instances = read(app_path(app, "/instances"));
    let instances = instances["instances"].as_array().unwrap();
    assert_eq!(instances.len(), INSTANCES_PER_APP, "{instances:?}");
    // The point list sums up what live instances (heard from in the last 60 s)
    // enforce: all of them unless the run was slow.
    let live = instances.iter().filter(|i| i["live"] == true).count() as u64;
    if !full {
        return;
    }

    // Every point's cycles, summed over the instances.
    let stats = read(app_path(
        app,
        &format!("/stats?from={from}&to={to}&limit=50000"),
    ));
    assert_eq!(stats["truncated"], false);
    let mut by_point: BTreeMap<(String, i64), &Value> = BTreeMap::new();
    for row in stats["rows"].as_array().unwrap() {
        let key = (
            row["point"].as_str().unwrap().to_owned(),
            row["cycle_start_ms"].as_i64().unwrap(),
        );
        assert!(by_point.insert(key, row).is_none(), "{row} twice");
    }
    assert_eq!(by_point.len(), plan.points * cycles.len());
    for (round, &cycle) in cycles.iter().enumerate() {
        for p in 0..plan.points {
            let row = by_point[&(point_name(p), cycle)];
            let f = sent(p, round);
            assert_eq!(
                (&row["visits"], &row["downgrades"], &row["exceptions"]),
                (&json!(f.visits), &json!(f.downgrades), &json!(f.exceptions)),
                "{} round {round}: {row}",
                app_name(app)
            );
            assert_eq!(row["instances"], INSTANCES_PER_APP, "{row}");
        }
    }

    // The point list: every point, with the last round's figures.
    let last = cycles.len() - 1;
    let list = read(app_path(app, "/points"));
    let points = list["points"].as_array().unwrap();
    assert_eq!(points.len(), plan.points);
    for p in points {
        let name = p["name"].as_str().unwrap();
        let i: usize = name.strip_prefix("svc.point-").unwrap().parse().unwrap();
        let f = sent(i, last);
        assert_eq!(p["last_cycle"]["cycle_start_ms"], cycles[last], "{p}");
        assert_eq!(p["last_cycle"]["visits"], f.visits, "{p}");
        assert_eq!(p["last_cycle"]["downgrades"], f.downgrades, "{p}");
        let enforced = p["enforced_by"]["instances"].as_u64().unwrap_or(0);
        let expected = if i.is_multiple_of(ENFORCED_EVERY) {
            live
        } else {
            0
        };
        assert_eq!(enforced, expected, "{p}");
    }

    // The seconds, summed over points and instances.
    let seconds = read(app_path(
        app,
        &format!("/stats?from={from}&to={to}&sum=points&resolution=1s"),
    ));
    assert_eq!(seconds["incomplete_cycles"], json!([]), "{seconds}");
    let mut expected: BTreeMap<i64, u64> = BTreeMap::new();
    for (round, &cycle) in cycles.iter().enumerate() {
        for k in 0..10u64 {
            let v: u64 = (0..plan.points)
                .flat_map(|p| (0..INSTANCES_PER_APP).map(move |i| (p, i)))
                .map(|(p, i)| second(figures(app, i, p, round), k)[0])
                .sum();
            if v > 0 {
                expected.insert(cycle + 1000 * k as i64, v);
            }
        }
    }
    let got: BTreeMap<i64, u64> = seconds["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["second_start_ms"].as_i64().unwrap(),
                r["visits"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected, "{} seconds", app_name(app));
}

/// The whole run against a server started with `storage`.
fn run(plan: Plan, storage: &[&str]) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let server = Subprocess::start(storage);
    let addr = server.addr;
    let pid = server.pid();
    let idle_kib = proc_kib(pid, "VmRSS");

    // Version 1 of every app's policy, for the pulls to fetch.
    for app in 0..APPS {
        let policy = json!({"points": {point_name(0): {"max_visits": 1000}}});
        let r = put_json(
            addr,
            &app_path(app, "/policy"),
            Some(ADMIN),
            &json!({"base_version": 0, "author": "load", "policy": policy}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }

    // Consecutive closed cycles, the last one the latest closed one.
    let latest = last_closed_cycle(wall_ms());
    let cycles: Vec<i64> = (0..plan.rounds)
        .map(|r| latest - 10_000 * (plan.rounds - 1 - r) as i64)
        .collect();
    let fleet = Fleet::new();
    let next_job = AtomicUsize::new(0);
    let ingest_done = AtomicBool::new(false);
    let peak_sampled = AtomicU64::new(idle_kib);
    let load_started = Instant::now();
    let (server_cpu0, test_cpu0) = (cpu_time(&pid.to_string()), cpu_time("self"));
    let mut lat = Latencies::default();
    let mut ingest_time = Duration::ZERO;
    let mut refreshes = 0;
    std::thread::scope(|s| {
        let ingest: Vec<_> = (0..INGEST_THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut lat = Latencies::default();
                    loop {
                        let job = next_job.fetch_add(1, Ordering::Relaxed);
                        if job >= plan.rounds * INSTANCES {
                            break;
                        }
                        let (round, g) = (job / INSTANCES, job % INSTANCES);
                        instance_cycle(addr, &plan, &mut lat, &fleet, g, round, cycles[round]);
                    }
                    lat
                })
            })
            .collect();
        let dashboards: Vec<_> = (0..DASHBOARD_THREADS)
            .map(|t| {
                let (fleet, ingest_done) = (&fleet, &ingest_done);
                s.spawn(move || {
                    let mut lat = Latencies::default();
                    let mut n = 0;
                    while !ingest_done.load(Ordering::Relaxed) {
                        let refresh = Instant::now();
                        dashboard_refresh(addr, &plan, &mut lat, fleet, (t * 7 + n) % APPS, n);
                        n += 1;
                        while refresh.elapsed() < DASHBOARD_PERIOD
                            && !ingest_done.load(Ordering::Relaxed)
                        {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    (lat, n)
                })
            })
            .collect();
        // The server's resident set, sampled while the load runs (VmHWM below is
        // the kernel's exact peak).
        s.spawn(|| {
            while !ingest_done.load(Ordering::Relaxed) {
                peak_sampled.fetch_max(proc_kib(pid, "VmRSS"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        for h in ingest {
            lat.merge(h.join().unwrap());
        }
        ingest_time = load_started.elapsed();
        ingest_done.store(true, Ordering::Relaxed);
        for h in dashboards {
            let (l, n) = h.join().unwrap();
            lat.merge(l);
            refreshes += n;
        }
    });
    let load_time = load_started.elapsed();
    let rss_after_kib = proc_kib(pid, "VmRSS");
    let hwm_kib = proc_kib(pid, "VmHWM");
    let server_cpu = cpu_time(&pid.to_string()) - server_cpu0;
    let test_cpu = cpu_time("self") - test_cpu0;

    // The table.
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let points_sent = plan.rounds * INSTANCES * plan.points;
    let mut out = String::new();
    writeln!(
        out,
        "\nload test, {} ({profile} build), server: the resilience-admin binary as a subprocess (pid {pid})",
        plan.label
    )
    .unwrap();
    writeln!(
        out,
        "{APPS} apps x {INSTANCES_PER_APP} instances x {} points, {} rounds ({points_sent} point-cycles with seconds, \
         {PARTS} parts per heartbeat); {INGEST_THREADS} instance threads + {DASHBOARD_THREADS} dashboard threads \
         ({refreshes} refreshes); ingest {:.1} s, {:.0} points/s; CPU: server {:.1} s, test process {:.1} s",
        plan.points,
        plan.rounds,
        ingest_time.as_secs_f64(),
        points_sent as f64 / ingest_time.as_secs_f64(),
        server_cpu.as_secs_f64(),
        test_cpu.as_secs_f64(),
    )
    .unwrap();
    let rule = "-".repeat(78);
    writeln!(out, "{rule}").unwrap();
    writeln!(
        out,
        "{:<34} {:>7} {:>10} {:>10} {:>10}",
        "request kind", "count", "p50 ms", "p99 ms", "max ms"
    )
    .unwrap();
    writeln!(out, "{rule}").unwrap();
    let mut over = Vec::new();
    for (kind, v) in &mut lat.kinds {
        v.sort();
        let (p50, p99, max) = (percentile(v, 0.5), percentile(v, 0.99), v[v.len() - 1]);
        writeln!(
            out,
            "{:<34} {:>7} {:>10} {:>10} {:>10}",
            kind,
            v.len(),
            ms(p50),
            ms(p99),
            ms(max)
        )
        .unwrap();
        if p99 >= P99_BOUND {
            over.push(format!("{kind}: p99 {p99:?}"));
        }
    }
    writeln!(out, "{rule}").unwrap();
    writeln!(
        out,
        "server memory (VmRSS of the subprocess): idle {}, peak {} (VmHWM; sampled {}), after the load {}",
        mib(idle_kib),
        mib(hwm_kib),
        mib(peak_sampled.load(Ordering::Relaxed)),
        mib(rss_after_kib)
    )
    .unwrap();
    writeln!(out, "{rule}").unwrap();
    println!("{out}");
    assert!(
        lat.failures.is_empty(),
        "{} failed requests or wrong answers, the first: {:#?}",
        lat.failures.len(),
        &lat.failures[..lat.failures.len().min(10)]
    );
    let verify_started = Instant::now();
    for app in 0..APPS {
        verify_app(addr, &plan, &cycles, app, app == 0 || app == APPS - 1);
    }
    println!(
        "{}: every request 2xx, every answer as expected; stored figures of the {APPS} apps \
         checked against what was sent in {:.1} s (test total {:.1} s)",
        plan.label,
        verify_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    assert!(
        over.is_empty(),
        "p99 above {P99_BOUND:?}: {over:?} (load phase {load_time:?})"
    );
    drop(server);
}

#[test]
fn load_on_sqlite() {
    let dir = TempDir::new("load");
    let db = dir.path().join("admin.db");
    let plan = Plan {
        label: "SQLite",
        points: POINTS,
        rounds: rounds(ROUNDS),
    };
    run(plan, &["--db", db.to_str().unwrap()]);
    assert!(Path::new(&db).exists());
}

/// A database of its own on the PostgreSQL at `RESILIENCE_ADMIN_PG_URL`, dropped
/// with the guard (as in `tests/postgres.rs`).
#[cfg(feature = "postgres")]
struct PgDatabase {
    admin_url: String,
    name: String,
}

#[cfg(feature = "postgres")]
impl PgDatabase {
    fn create(admin_url: String) -> PgDatabase {
        let name = format!("ra_load_{}", std::process::id());
        let mut client =
            postgres::Client::connect(&admin_url, postgres::NoTls).expect("connect to PostgreSQL");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        PgDatabase { admin_url, name }
    }

    fn url(&self) -> String {
        let (base, _) = self
            .admin_url
            .rsplit_once('/')
            .expect("a URL ending in /DATABASE");
        format!("{base}/{}", self.name)
    }
}

#[cfg(feature = "postgres")]
impl Drop for PgDatabase {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Points per instance on PostgreSQL: its ingest is still far slower than SQLite's
/// (some 850 points a second in a debug build, 2 400 in release), so the same 200
/// instances report fewer points, in one round.
#[cfg(feature = "postgres")]
const PG_POINTS: usize = if cfg!(debug_assertions) { 20 } else { 100 };

/// PostgreSQL, when `RESILIENCE_ADMIN_PG_URL` is set (`scripts/postgres.sh`): the
/// same fleet, fewer points (`PG_POINTS`; `RESILIENCE_LOAD_PG_POINTS=N` by hand).
#[cfg(feature = "postgres")]
#[test]
fn load_on_postgres() {
    const URL_VAR: &str = "RESILIENCE_ADMIN_PG_URL";
    let Some(admin_url) = std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty()) else {
        println!("load_on_postgres: {URL_VAR} is not set, PostgreSQL not load-tested");
        return;
    };
    let db = PgDatabase::create(admin_url);
    let plan = Plan {
        label: "PostgreSQL",
        points: std::env::var("RESILIENCE_LOAD_PG_POINTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .unwrap_or(PG_POINTS),
        rounds: rounds(1),
    };
    run(plan, &["--postgres", &db.url()]);
}
