//! https end to end over loopback: the console serving TLS with certificates made
//! here, the runtime's heartbeat client uploading and pulling over it in both
//! protocols, and each refusal saying what is wrong: a CA that did not sign the
//! console's certificate, an address the certificate does not name, plain http
//! against https and the reverse.

mod common;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use resilience_admin::server::{AdminConfig, StorageConfig};
use resilience_admin::tls::TlsConfig;
use resilience_runtime::heartbeat::{
    HeartbeatClient, HeartbeatConfig, HeartbeatError, Protocol, PullOutcome, UploadOutcome,
};
use resilience_runtime::{Clock, ManualClock, Registry};
use serde_json::json;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

const POLICY: &str = "/api/v1/apps/shop/orders/policy";

/// A CA of its own and a server certificate it signed.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

/// A certificate for `names` (DNS names or IP addresses) from a new CA called `ca`.
fn make_pki(ca: &str, names: &[&str]) -> Pki {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, ca);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "console");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &*issuer).unwrap();
    Pki {
        ca_pem: issuer.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn https_config(pki: &Pki) -> AdminConfig {
    let mut c = config(StorageConfig::Memory);
    c.tls = Some(TlsConfig::from_pem(pki.cert_pem.as_bytes(), pki.key_pem.as_bytes()).unwrap());
    c
}

fn registry(manual: &ManualClock) -> &'static Registry {
    Box::leak(Box::new(Registry::with_clock(Clock::manual(manual))))
}

fn client(
    url: &str,
    ca_pem: Option<&str>,
    protocol: Protocol,
    registry: &'static Registry,
) -> HeartbeatClient {
    let mut config = HeartbeatConfig::builder("shop", "orders", url)
        .token(APP)
        .protocol(protocol)
        .instance("i-1");
    if let Some(ca) = ca_pem {
        config = config.ca_pem(ca);
    }
    HeartbeatClient::new(config.build().unwrap(), registry)
}

/// One request over TLS, trusting `ca_pem` only and expecting the certificate to
/// name `localhost`.
fn https_request(
    addr: SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Body<'_>,
) -> Response {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap())
            .unwrap();
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    request_over(
        rustls::StreamOwned::new(conn, tcp),
        addr,
        method,
        path,
        token,
        body,
    )
}

fn network_error(e: HeartbeatError) -> String {
    match e {
        HeartbeatError::Network { message, .. } => message,
        other => panic!("expected a network error, got {other:?}"),
    }
}

#[test]
fn heartbeats_and_pulls_go_over_https_in_both_protocols() {
    let pki = make_pki("test CA", &["localhost", "127.0.0.1"]);
    for protocol in [Protocol::Json, Protocol::Sds] {
        let manual = ManualClock::new();
        let mut c = https_config(&pki);
        c.clock = Clock::manual(&manual);
        let server = start(c);
        let addr = server.addr();
        assert_eq!(server.url(), format!("https://{addr}"));
        let edit = https_request(
            addr,
            &pki.ca_pem,
            "PUT",
            POLICY,
            Some(ADMIN),
            Body::Json(&json!({"base_version": 0, "author": "ops",
                "policy": {"points": {"tls.point": {"max_visits": 2}}}})),
        );
        assert_eq!(edit.status, 200, "{}", edit.text());

        // By address (the certificate names 127.0.0.1) and by name.
        let r = registry(&manual);
        let hb = client(&server.url(), Some(&pki.ca_pem), protocol, r);
        assert!(matches!(
            hb.pull_now().unwrap(),
            PullOutcome::Applied { version: 1, .. }
        ));
        let by_name = format!("https://localhost:{}", addr.port());
        assert!(matches!(
            client(&by_name, Some(&pki.ca_pem), protocol, registry(&manual))
                .pull_now()
                .unwrap(),
            PullOutcome::Applied { version: 1, .. }
        ));
        let point = r.point("tls.point").unwrap();
        let passed = (0..3)
            .filter(|_| point.enter().map(|p| p.finish(false)).is_ok())
            .count();
        assert_eq!(passed, 2, "the pulled policy is enforced");
        manual.advance(Duration::from_secs(14));
        assert!(matches!(
            hb.upload_now().unwrap(),
            UploadOutcome::Sent { points: 1, .. }
        ));

        let now = {
            let c = Clock::manual(&manual);
            c.unix_time(c.now()).as_millis() as i64
        };
        let cycle = last_closed_cycle(now);
        let path = format!(
            "/api/v1/apps/shop/orders/stats?from={cycle}&to={}",
            cycle + 1
        );
        let stats = https_request(addr, &pki.ca_pem, "GET", &path, None, Body::None).json();
        assert_eq!(stats["rows"][0]["visits"], 3, "{stats}");
        assert_eq!(stats["rows"][0]["passes"], 2, "{stats}");
        let instances = https_request(
            addr,
            &pki.ca_pem,
            "GET",
            "/api/v1/apps/shop/orders/instances",
            None,
            Body::None,
        )
        .json();
        let proto = if protocol == Protocol::Sds {
            "sds"
        } else {
            "json"
        };
        assert_eq!(instances["instances"][0]["protocol"], proto, "{instances}");
        assert_eq!(instances["instances"][0]["policy_version"], 1);

        // The dashboard comes over https too.
        let page = https_request(addr, &pki.ca_pem, "GET", "/", None, Body::None);
        assert_eq!(page.status, 200);
        assert!(page
            .header("content-type")
            .unwrap()
            .starts_with("text/html"));
    }
}

#[test]
fn a_certificate_from_another_ca_or_for_another_address_is_refused() {
    let pki = make_pki("the console's CA", &["localhost"]);
    let server = start(https_config(&pki));
    let port = server.addr().port();
    let by_name = format!("https://localhost:{port}");
    let manual = ManualClock::new();
    let r = registry(&manual);

    // A CA that did not sign the console's certificate: refused, and the message
    // says the certificate is not trusted and what was.
    let other = make_pki("another CA", &["localhost"]);
    for protocol in [Protocol::Json, Protocol::Sds] {
        let hb = client(&by_name, Some(&other.ca_pem), protocol, r);
        let message = network_error(hb.pull_now().unwrap_err());
        assert!(message.contains("certificate is not trusted"), "{message}");
        assert!(message.contains("UnknownIssuer"), "{message}");
        assert!(message.contains("`ca_pem`"), "{message}");
        manual.advance(Duration::from_secs(10));
        assert!(hb.upload_now().is_err());
        let status = hb.status();
        assert_eq!((status.uploads, status.uploads_dropped), (0, 1));
        assert!(status
            .last_upload_error
            .unwrap()
            .contains("certificate is not trusted"));
    }

    // The built-in roots know no private CA either.
    let message = network_error(
        client(&by_name, None, Protocol::Json, r)
            .pull_now()
            .unwrap_err(),
    );
    assert!(message.contains("certificate is not trusted"), "{message}");
    assert!(message.contains("built-in roots"), "{message}");

    // The right CA, but an address the certificate does not name.
    let by_ip = format!("https://127.0.0.1:{port}");
    let message = network_error(
        client(&by_ip, Some(&pki.ca_pem), Protocol::Json, r)
            .pull_now()
            .unwrap_err(),
    );
    assert!(message.contains("certificate is not trusted"), "{message}");
    assert!(message.contains("127.0.0.1"), "{message}");

    // The right CA and name: served, and nothing above got in.
    let hb = client(&by_name, Some(&pki.ca_pem), Protocol::Json, r);
    assert_eq!(
        hb.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 0 }
    );
    let apps = https_request(
        server.addr(),
        &pki.ca_pem,
        "GET",
        "/api/v1/apps",
        None,
        Body::None,
    );
    assert_eq!(apps.json()["apps"][0]["instances"], 1, "{}", apps.text());
}

#[test]
fn a_ca_file_is_read_at_build_and_a_bad_one_is_a_configuration_error() {
    let pki = make_pki("file CA", &["localhost"]);
    let server = start(https_config(&pki));
    let dir = TempDir::new("tls-ca");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let url = format!("https://localhost:{}", server.addr().port());
    let config = HeartbeatConfig::builder("shop", "orders", &url)
        .token(APP)
        .ca_file(&ca_file)
        .build()
        .unwrap();
    let hb = HeartbeatClient::new(config, registry(&ManualClock::new()));
    assert_eq!(
        hb.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 0 }
    );

    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("key-not-cert.pem");
    std::fs::write(&not_pem, &pki.key_pem).unwrap();
    for (path, says) in [
        (&missing, "cannot read"),
        (&not_pem, "no `BEGIN CERTIFICATE`"),
    ] {
        let e = HeartbeatConfig::builder("shop", "orders", &url)
            .ca_file(path)
            .build()
            .unwrap_err();
        assert!(
            matches!(e, HeartbeatError::Config { field: "ca", .. }),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(says) && text.contains(&path.display().to_string()),
            "{text}"
        );
    }
}

#[test]
fn plain_http_against_https_and_https_against_plain_http_fail_clearly() {
    let pki = make_pki("test CA", &["localhost", "127.0.0.1"]);
    let tls = start(https_config(&pki));
    let r = registry(&ManualClock::new());
    let plain_url = format!("http://{}", tls.addr());
    for protocol in [Protocol::Json, Protocol::Sds] {
        let e = client(&plain_url, None, protocol, r)
            .pull_now()
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("it serves https, so use an https:// address"),
            "{protocol:?}: {text}"
        );
    }
    // The console goes on serving https.
    let hb = client(&tls.url(), Some(&pki.ca_pem), Protocol::Json, r);
    assert_eq!(
        hb.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 0 }
    );

    let plain = start(config(StorageConfig::Memory));
    let https_url = format!("https://{}", plain.addr());
    let message = network_error(
        client(&https_url, Some(&pki.ca_pem), Protocol::Json, r)
            .pull_now()
            .unwrap_err(),
    );
    assert!(message.contains("does not speak TLS"), "{message}");
    assert!(message.contains("use an http:// address"), "{message}");
}

#[test]
fn a_silent_connection_is_dropped_and_the_503_beyond_the_cap_comes_over_tls() {
    let pki = make_pki("test CA", &["localhost"]);
    let mut c = https_config(&pki);
    c.max_connections = 1;
    c.header_read_timeout = Duration::from_millis(500);
    let server = start(c);
    let addr = server.addr();
    // Holds the one connection without ever starting its handshake.
    let mut silent = TcpStream::connect(addr).unwrap();
    let opened = Instant::now();
    let over = https_request(addr, &pki.ca_pem, "GET", "/api/v1/health", None, Body::None);
    assert_eq!(over.status, 503, "{}", over.text());
    assert_eq!(over.header("retry-after"), Some("1"));
    // The handshake has the header read timeout: then the connection is closed.
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(silent.read(&mut buf).unwrap(), 0);
    assert!(
        opened.elapsed() < Duration::from_secs(5),
        "{:?}",
        opened.elapsed()
    );
    // Its slot is free again.
    let health = wait_for(Duration::from_secs(5), "a free slot", || {
        let r = https_request(addr, &pki.ca_pem, "GET", "/api/v1/health", None, Body::None);
        (r.status == 200).then_some(r)
    });
    assert_eq!(health.json(), json!({"ok": true}));
}

#[test]
fn the_binary_serves_https_with_tls_cert_and_tls_key() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let pki = make_pki("test CA", &["localhost"]);
    let dir = TempDir::new("tls-bin");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &pki.cert_pem).unwrap();
    std::fs::write(&key, &pki.key_pem).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_resilience-admin"))
        .args(["--bind", "127.0.0.1:0", "--memory", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .env("RESILIENCE_ADMIN_TOKEN", ADMIN)
        .env("RESILIENCE_APP_TOKENS", APP)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr: SocketAddr = first
        .split("https://")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no https address in {first:?}"));
    let dashboard = lines.next().unwrap().unwrap();
    assert_eq!(dashboard, format!("dashboard: https://{addr}/"));
    let health = https_request(addr, &pki.ca_pem, "GET", "/api/v1/health", None, Body::None);
    assert_eq!(health.json(), json!({"ok": true}));
    let url = format!("https://localhost:{}", addr.port());
    let hb = client(
        &url,
        Some(&pki.ca_pem),
        Protocol::Sds,
        registry(&ManualClock::new()),
    );
    assert_eq!(
        hb.pull_now().unwrap(),
        PullOutcome::Unchanged { version: 0 }
    );
    child.kill().unwrap();
    child.wait().unwrap();

    // A key that is not the certificate's: refused at start, naming both files.
    let stranger = KeyPair::generate().unwrap().serialize_pem();
    std::fs::write(&key, stranger).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_resilience-admin"))
        .args(["--memory", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tls-cert/--tls-key"), "{err}");
    assert!(err.contains("key.pem is not the private key of"), "{err}");
}
