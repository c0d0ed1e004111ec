//! Redis Cluster for integration tests: the shared cluster `scripts/redis-cluster.sh`
//! starts (`RESILIENCE_REDIS_CLUSTER_URL`), its masters and their slots, keys placed
//! on a chosen master, and private clusters for tests that kill a node.
//!
//! Use it from a test file with
//!
//! ```ignore
//! #[path = "support/redis_cluster.rs"]
//! mod redis_cluster;
//! ```
//!
//! Everything here panics with a message saying what to do, because a test that
//! cannot reach its cluster must fail, not skip. Nodes are administered with
//! `redis-cli` (installed with `redis-server` on Debian).

#![allow(dead_code)] // each test file uses what it needs

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable holding the shared test cluster's URL.
pub(crate) const CLUSTER_URL_VAR: &str = "RESILIENCE_REDIS_CLUSTER_URL";

/// The URL of the shared test cluster, from `RESILIENCE_REDIS_CLUSTER_URL`.
///
/// # Panics
///
/// If the variable is unset or empty, with instructions.
pub(crate) fn shared_cluster_url() -> String {
    match std::env::var(CLUSTER_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{CLUSTER_URL_VAR} is not set, and the Redis Cluster tests need a real cluster. \
             Run them with `scripts/test.sh`, or with \
             `bash scripts/redis-cluster.sh cargo test -p resilience-runtime --features redis \
             --test redis_cluster` (it starts 6 nodes on 127.0.0.1:6400-6405; set \
             RESILIENCE_REDIS_CLUSTER_PORT to move them)"
        ),
    }
}

/// The ports of the seed nodes of a `redis+cluster://[user:pass@]127.0.0.1:P,...` URL.
pub(crate) fn seed_ports(url: &str) -> Vec<u16> {
    let rest = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or("");
    let seeds = rest.rsplit_once('@').map_or(rest, |(_, seeds)| seeds);
    seeds
        .split(',')
        .map(|seed| {
            seed.rsplit_once(':')
                .and_then(|(_, port)| port.parse().ok())
                .unwrap_or_else(|| panic!("no port in seed {seed:?} of {url}"))
        })
        .collect()
}

/// Runs `redis-cli -p port ARGS...` and returns its output.
///
/// # Panics
///
/// If `redis-cli` cannot be run or fails.
pub(crate) fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-cli ({e}): install it (`apt-get install redis-tools`)")
        });
    assert!(
        out.status.success(),
        "redis-cli -p {port} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `redis-cli -p port PING` answers `PONG`.
fn pongs(port: u16) -> bool {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "PING"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "PONG")
}

/// A master of a cluster: its port and the slots it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Master {
    pub(crate) port: u16,
    pub(crate) slots: Vec<(u16, u16)>,
}

impl Master {
    /// Whether this master serves `slot`.
    pub(crate) fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// The live masters serving slots, as node `port` sees them (`CLUSTER NODES`),
/// ordered by their first slot.
pub(crate) fn masters(port: u16) -> Vec<Master> {
    let mut masters: Vec<Master> = cli(port, &["CLUSTER", "NODES"])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let addr = fields.get(1)?.split('@').next()?;
            let port = addr.rsplit_once(':')?.1.parse().ok()?;
            let slots: Vec<(u16, u16)> = fields
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|one| (one, one)),
                })
                .collect();
            (!slots.is_empty()).then_some(Master { port, slots })
        })
        .collect();
    masters.sort_by_key(|m| m.slots[0].0);
    masters
}

/// The cluster slot of `key` (CRC16/XMODEM of its hash tag or of the whole key, mod
/// 16384): written again here, independently of the crate, and checked against
/// `CLUSTER KEYSLOT` by the tests.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tag = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `{prefix}-{n}` for the first `n` whose Redis key `redis_key(name)` falls in a slot
/// `master` serves.
pub(crate) fn name_on(master: &Master, prefix: &str, redis_key: impl Fn(&str) -> String) -> String {
    (0..100_000)
        .map(|n| format!("{prefix}-{n}"))
        .find(|name| master.serves(slot(&redis_key(name))))
        .unwrap_or_else(|| panic!("no name `{prefix}-N` lands on {master:?}"))
}

/// The Redis keys of the token bucket named `name`.
pub(crate) fn bucket_keys(name: &str) -> [String; 2] {
    [format!("{{{name}}}.tokens"), format!("{{{name}}}.ts")]
}

/// A loopback port `p` that is free, as is `p + 10000` (a cluster node's bus port).
fn free_cluster_port() -> u16 {
    for _ in 0..1000 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
        let port = listener.local_addr().expect("bound port").port();
        if port < 55_000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free pair of loopback ports P and P + 10000")
}

/// A private Redis Cluster on loopback ports, without persistence (each node keeps only
/// its `nodes.conf`, so a restarted node rejoins), killed and deleted on drop.
#[derive(Debug)]
pub(crate) struct RedisCluster {
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
    dir: PathBuf,
    node_timeout: Duration,
    /// Extra arguments of every node.
    extra: Vec<String>,
    /// With TLS: each node's TLS port (beside its plain one, kept for `redis-cli`)
    /// and the directory of `server.pem`, `server.key` and `ca.pem`.
    tls: Option<(Vec<u16>, PathBuf)>,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each, each failed over after
    /// `node_timeout` without an answer, and waits until every node says
    /// `cluster_state:ok`.
    ///
    /// # Panics
    ///
    /// If a node does not start, or the cluster is not ready within 30 s.
    pub(crate) fn start(masters: usize, replicas: usize, node_timeout: Duration) -> Self {
        Self::start_with(masters, replicas, node_timeout, &[])
    }

    /// [`start`](Self::start) with `extra` arguments for every node's `redis-server`.
    pub(crate) fn start_with(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
        extra: &[&str],
    ) -> Self {
        Self::start_inner(masters, replicas, node_timeout, extra, None)
    }

    /// [`start`](Self::start) with TLS between the nodes (`tls-cluster`,
    /// `tls-replication`) and for clients, on a TLS port per node, with the
    /// certificates in `certs` (`server.pem`, `server.key`, `ca.pem`); clients need
    /// not present one. [`url`](Self::url) is then a `rediss+cluster://` URL.
    pub(crate) fn start_tls(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
        certs: PathBuf,
    ) -> Self {
        let n = masters * (1 + replicas);
        let ports = (0..n).map(|_| free_cluster_port()).collect();
        Self::start_inner(masters, replicas, node_timeout, &[], Some((ports, certs)))
    }

    fn start_inner(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
        extra: &[&str],
        tls: Option<(Vec<u16>, PathBuf)>,
    ) -> Self {
        let n = masters * (1 + replicas);
        let dir = std::env::temp_dir().join(format!(
            "resilience-cluster-{}-{}",
            std::process::id(),
            free_cluster_port()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {dir:?}: {e}"));
        let mut cluster = RedisCluster {
            ports: (0..n).map(|_| free_cluster_port()).collect(),
            children: (0..n).map(|_| None).collect(),
            dir,
            node_timeout,
            extra: extra.iter().map(|a| a.to_string()).collect(),
            tls,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok(Duration::from_secs(30));
        cluster
    }

    /// `redis+cluster://` with every master as a seed (as they were at start).
    pub(crate) fn url(&self) -> String {
        let masters = masters(self.ports[0]);
        let seeds: Vec<String> = masters
            .iter()
            .map(|m| match &self.tls {
                Some((tls_ports, _)) => format!("127.0.0.1:{}", tls_ports[self.index(m.port)]),
                None => format!("127.0.0.1:{}", m.port),
            })
            .collect();
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}+cluster://{}/", seeds.join(","))
    }

    /// Every node's port.
    pub(crate) fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Kills node `port` at once (`SIGKILL`, like a crash).
    pub(crate) fn kill(&mut self, port: u16) {
        let i = self.index(port);
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `port` again with its `nodes.conf`, so that it rejoins the cluster.
    pub(crate) fn restart(&mut self, port: u16) {
        let i = self.index(port);
        self.kill(port);
        self.spawn(i);
    }

    /// Waits until every running node says `cluster_state:ok` and sees the same
    /// masters, and every replica has synced with its master; returns how long that
    /// took.
    ///
    /// # Panics
    ///
    /// If that takes longer than `limit`.
    pub(crate) fn wait_ok(&self, limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let live: Vec<u16> = self
                .ports
                .iter()
                .zip(&self.children)
                .filter(|(_, c)| c.is_some())
                .map(|(p, _)| *p)
                .collect();
            // A replica takes over a dead master only if it has synced with it.
            let ok = live.iter().all(|&p| {
                cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok") && {
                    let replication = cli(p, &["INFO", "replication"]);
                    !replication.contains("role:slave")
                        || replication.contains("master_link_status:up")
                }
            }) && live.windows(2).all(|w| masters(w[0]) == masters(w[1]));
            if ok {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "the cluster on {:?} is not ok after {limit:?}",
                self.ports
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn index(&self, port: u16) -> usize {
        self.ports
            .iter()
            .position(|&p| p == port)
            .unwrap_or_else(|| panic!("no node on port {port} in {:?}", self.ports))
    }

    fn spawn(&mut self, i: usize) {
        let port = self.ports[i];
        let binary =
            std::env::var("RESILIENCE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--cluster-enabled", "yes"])
            // Replicas sync at once (the default waits 5 s for more replicas).
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args([
                "--cluster-node-timeout",
                &self.node_timeout.as_millis().to_string(),
            ])
            .args(["--loglevel", "warning", "--logfile", &format!("{port}.log")])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .args(self.tls.iter().flat_map(|(tls_ports, certs)| {
                let file = |f: &str| certs.join(f).to_string_lossy().into_owned();
                [
                    "--tls-port".to_owned(),
                    tls_ports[i].to_string(),
                    "--tls-cluster".to_owned(),
                    "yes".to_owned(),
                    "--tls-replication".to_owned(),
                    "yes".to_owned(),
                    "--tls-cert-file".to_owned(),
                    file("server.pem"),
                    "--tls-key-file".to_owned(),
                    file("server.key"),
                    "--tls-ca-cert-file".to_owned(),
                    file("ca.pem"),
                    "--tls-auth-clients".to_owned(),
                    "no".to_owned(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `{binary}` ({e}): install it (`apt-get install redis-server`), \
                     or run `scripts/test.sh`, which installs it"
                )
            });
        self.children[i] = Some(child);
        let start = Instant::now();
        while !pongs(port) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "cluster node on port {port} did not answer PING within 10 s; log: {}",
                std::fs::read_to_string(self.dir.join(format!("{port}.log"))).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
