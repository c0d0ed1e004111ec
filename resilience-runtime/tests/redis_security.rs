//! ACL users and TLS against a real `redis-server` of the test's own:
//!
//! - an ACL user (`ACL SETUSER`) reaches Redis with `redis://user:password@host/`
//!   (limiters, leases, bloom filters); a wrong password is a failure of Redis (the
//!   limiter answers from its fallback, the filter returns an error), within the
//!   timeout;
//! - with the `redis-tls` feature, `rediss://` reaches a server whose certificate a
//!   private certificate authority signed (made here with `openssl`), trusted
//!   through `SSL_CERT_FILE`; the same URL without that trust, or a plain URL to
//!   the TLS port, fails and falls back, never silently in plain text.
//!
//! The TLS case runs in a worker process (this binary, re-run with
//! `RESILIENCE_SECURITY_WORKER` set), because `SSL_CERT_FILE` is read from the
//! environment of the whole process.

#[cfg(feature = "redis-tls")]
#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "support/redis_server.rs"]
mod redis_server;
#[cfg(feature = "redis-tls")]
#[path = "support/workers.rs"]
mod workers;

use redis_server::{unique_key, RedisServer};
use resilience_runtime::redis::{
    ClusterDecision, ClusterLease, ClusterMode, RedisBloom, RedisTokenLimiter,
};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `redis-cli -p port ARGS...`; panics unless it succeeds.
fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): apt-get install redis-tools"));
    assert!(out.status.success(), "redis-cli {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Creates user `name` with `password`, allowed every command on every key.
fn acl_user(port: u16, name: &str, password: &str) {
    let rule = format!(">{password}");
    let reply = cli(port, &["ACL", "SETUSER", name, "on", &rule, "~*", "+@all"]);
    assert_eq!(reply.trim(), "OK");
}

#[tokio::test(flavor = "current_thread")]
async fn an_acl_user_and_password_reach_redis() {
    let server = RedisServer::start();
    let port = server.port();
    acl_user(port, "limiter", "s3cret:Pass");
    // The `:` of the password is allowed as is; `@` would be written `%40`.
    let url = format!("redis://limiter:s3cret:Pass@127.0.0.1:{port}/");
    let key = unique_key("acl");

    let limiter = RedisTokenLimiter::builder(&url, &key, 0.001, 2)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
    assert_eq!(limiter.allow().await, ClusterDecision::Admitted);
    assert_eq!(limiter.allow().await, ClusterDecision::Refused);
    // Redis saw the user.
    let clients = cli(port, &["CLIENT", "LIST"]);
    assert!(clients.contains("user=limiter"), "{clients}");

    let lease = ClusterLease::visits(&url, &unique_key("acl-lease"), Duration::from_secs(60), 3)
        .batch(3)
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let decisions: Vec<_> = (0..4).map(|_| lease.try_acquire()).collect();
    assert_eq!(
        decisions,
        [
            ClusterDecision::Admitted,
            ClusterDecision::Admitted,
            ClusterDecision::Admitted,
            ClusterDecision::Refused
        ]
    );

    let bloom = RedisBloom::go_zero(&url, unique_key("acl-bloom").as_str(), 64).unwrap();
    assert!(bloom.insert("alice").await.unwrap());
    assert!(bloom.contains("alice").await.unwrap());

    // A wrong password: Redis refuses the connection, within the timeout.
    let wrong = format!("redis://limiter:wrong@127.0.0.1:{port}/");
    let refused = RedisTokenLimiter::builder(&wrong, &key, 0.001, 2)
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let started = Instant::now();
    assert_eq!(refused.allow().await, ClusterDecision::AdmittedLocally);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(refused.mode(), ClusterMode::Fallback);
    let bloom = RedisBloom::go_zero(&wrong, unique_key("acl-bloom").as_str(), 64).unwrap();
    let err = bloom.contains("alice").await.unwrap_err();
    assert!(err.is_redis_failure(), "{err}");
    let source = std::error::Error::source(&err).map(|e| e.to_string());
    assert!(
        source
            .as_deref()
            .is_some_and(|s| s.to_lowercase().contains("authentication failed")),
        "{err}: {source:?}"
    );
}

/// Without the `redis-tls` feature, a `rediss://` URL is refused when the limiter is
/// built, naming the feature.
#[cfg(not(feature = "redis-tls"))]
#[test]
fn tls_urls_need_the_redis_tls_feature() {
    let err = RedisTokenLimiter::new("rediss://127.0.0.1:6380/", "k", 1.0, 1).unwrap_err();
    assert!(err.to_string().contains("`redis-tls`"), "{err}");
}

#[cfg(feature = "redis-tls")]
mod tls {
    use super::*;
    use std::path::{Path, PathBuf};
    use workers::{env, num};

    const WORKER_VAR: &str = "RESILIENCE_SECURITY_WORKER";

    /// Runs `openssl ARGS...` in `dir`; panics unless it succeeds.
    fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run openssl ({e}): install it (`apt-get install openssl`)")
            });
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A certificate authority (`ca.pem`) and a server certificate it signed
    /// (`server.pem`, `server.key`) for `localhost` and `127.0.0.1`, in a new
    /// directory. (Also a client certificate: cluster nodes present it to each other.)
    fn certificates() -> PathBuf {
        let dir = std::env::temp_dir().join(unique_key("tls").replace(':', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &dir,
            &[
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"],
                &["-subj", "/CN=resilience test CA"],
            ]
            .concat(),
        );
        openssl(
            &dir,
            &[
                &["req"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr"],
                &["-subj", "/CN=localhost"],
            ]
            .concat(),
        );
        std::fs::write(
            dir.join("server.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
             extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        dir
    }

    /// The worker: what a process that trusts the test's authority sees.
    #[test]
    #[ignore = "worker process of the TLS test, started by it"]
    fn tls_worker() {
        if std::env::var(WORKER_VAR).is_err() {
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = rt.block_on(async {
            let mut report = Vec::new();
            for (name, url) in [("ip", env("WORKER_URL")), ("acl", env("WORKER_ACL_URL"))] {
                let limiter = RedisTokenLimiter::builder(&url, &unique_key("tls"), 0.001, 2)
                    .timeout(Duration::from_secs(2))
                    .build()
                    .unwrap();
                let decisions = [
                    limiter.allow().await,
                    limiter.allow().await,
                    limiter.allow().await,
                ];
                let exact = decisions
                    == [
                        ClusterDecision::Admitted,
                        ClusterDecision::Admitted,
                        ClusterDecision::Refused,
                    ];
                let bloom =
                    RedisBloom::go_zero(&url, unique_key("tls-bloom").as_str(), 64).unwrap();
                let bloom_ok = bloom.insert("alice").await.unwrap()
                    && bloom.contains("alice").await.unwrap()
                    && !bloom.contains("bob").await.unwrap();
                let lease = ClusterLease::token_bucket(&url, &unique_key("tls-lease"), 0.001, 4)
                    .batch(2)
                    .timeout(Duration::from_secs(2))
                    .build()
                    .unwrap();
                let leased = (0..6)
                    .filter(|_| {
                        let d = lease.try_acquire();
                        std::thread::sleep(Duration::from_millis(50));
                        d == ClusterDecision::Admitted
                    })
                    .count();
                report.push(format!(
                    "{name}_exact={} {name}_bloom={} {name}_leased={leased}",
                    u8::from(exact),
                    u8::from(bloom_ok)
                ));
            }
            report.join(" ")
        });
        println!("WORKER-REPORT {report}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn rediss_reaches_a_server_signed_by_a_trusted_authority() {
        let dir = certificates();
        let tls_port = redis_server::free_port();
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let server = RedisServer::start_with(vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path("server.pem"),
            "--tls-key-file".into(),
            path("server.key"),
            "--tls-ca-cert-file".into(),
            path("ca.pem"),
            "--tls-auth-clients".into(),
            "no".into(),
        ]);
        acl_user(server.port(), "tlsuser", "tls-Pass");

        // A process trusting the authority: everything works over TLS, by IP and as
        // an ACL user by host name.
        let reports = workers::run(
            "tls::tls_worker",
            WORKER_VAR,
            "1",
            1,
            &[
                ("SSL_CERT_FILE", path("ca.pem")),
                ("WORKER_URL", format!("rediss://127.0.0.1:{tls_port}/")),
                (
                    "WORKER_ACL_URL",
                    format!("rediss://tlsuser:tls-Pass@localhost:{tls_port}/"),
                ),
            ],
        );
        println!("TLS worker: {reports:?}");
        for name in ["ip", "acl"] {
            assert_eq!(num(&reports[0], &format!("{name}_exact")), 1, "{reports:?}");
            assert_eq!(num(&reports[0], &format!("{name}_bloom")), 1, "{reports:?}");
            assert_eq!(
                num(&reports[0], &format!("{name}_leased")),
                4,
                "{reports:?}"
            );
        }

        // This process trusts only the system's authorities: the certificate is
        // refused, and the limiter falls back within its timeout.
        let untrusted = RedisTokenLimiter::builder(
            &format!("rediss://127.0.0.1:{tls_port}/"),
            &unique_key("tls-untrusted"),
            0.001,
            2,
        )
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
        let started = Instant::now();
        assert_eq!(untrusted.allow().await, ClusterDecision::AdmittedLocally);
        assert!(started.elapsed() < Duration::from_millis(700));
        let bloom = RedisBloom::go_zero(
            &format!("rediss://127.0.0.1:{tls_port}/"),
            unique_key("tls-bloom").as_str(),
            64,
        )
        .unwrap();
        let err = bloom.contains("alice").await.unwrap_err();
        assert!(err.is_redis_failure(), "{err}");
        // Plain text to the TLS port gets no answer it can use either.
        let plain = RedisBloom::builder(
            &format!("redis://127.0.0.1:{tls_port}/"),
            unique_key("tls-plain").as_str(),
            resilience_runtime::bloom::BloomConfig::builder()
                .bits(64)
                .hashes(14)
                .build()
                .unwrap(),
        )
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
        assert!(plain
            .contains("alice")
            .await
            .unwrap_err()
            .is_redis_failure());
        // Certificate checks cannot be turned off.
        let insecure = format!("rediss://127.0.0.1:{tls_port}/#insecure");
        let err = RedisTokenLimiter::new(&insecure, "k", 1.0, 1).unwrap_err();
        assert!(err.to_string().contains("SSL_CERT_FILE"), "{err}");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A Redis Cluster whose nodes speak only TLS to clients and to each other:
    /// `rediss+cluster://` seeds, the slots' TLS addresses learned from them, exact
    /// answers on every master, plain and ACL user alike.
    #[test]
    fn rediss_cluster_reaches_every_master_over_tls() {
        let dir = certificates();
        let cluster =
            redis_cluster::RedisCluster::start_tls(3, 0, Duration::from_millis(1000), dir.clone());
        let url = cluster.url();
        assert!(url.starts_with("rediss+cluster://"), "{url}");
        for &port in cluster.ports() {
            acl_user(port, "tlsuser", "tls-Pass");
        }
        let seeds = url.trim_start_matches("rediss+cluster://");
        let reports = workers::run(
            "tls::tls_worker",
            WORKER_VAR,
            "1",
            1,
            &[
                (
                    "SSL_CERT_FILE",
                    dir.join("ca.pem").to_string_lossy().into_owned(),
                ),
                ("WORKER_URL", url.clone()),
                (
                    "WORKER_ACL_URL",
                    format!("rediss+cluster://tlsuser:tls-Pass@{seeds}"),
                ),
            ],
        );
        println!("TLS cluster worker: {reports:?}");
        for name in ["ip", "acl"] {
            assert_eq!(num(&reports[0], &format!("{name}_exact")), 1, "{reports:?}");
            assert_eq!(num(&reports[0], &format!("{name}_bloom")), 1, "{reports:?}");
            assert_eq!(
                num(&reports[0], &format!("{name}_leased")),
                4,
                "{reports:?}"
            );
        }
        drop(cluster);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
