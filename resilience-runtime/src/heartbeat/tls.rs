//! TLS of the heartbeat client (feature `heartbeat-tls`): the roots it trusts and the
//! handshake over a blocking `TcpStream`.
//!
//! rustls with the ring provider, chosen explicitly rather than through rustls'
//! process-wide default, so that another crate of the program turning on aws-lc-rs
//! cannot make the choice ambiguous (rustls panics then).

use super::error::HeartbeatError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::fmt;
use std::net::TcpStream;
use std::path::PathBuf;
// std's `Arc`, not `crate::sync`'s: rustls takes its configuration in std's.
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA given to the builder: read and parsed by `build`.
#[derive(Clone)]
pub(crate) enum CaSource {
    /// A PEM file.
    File(PathBuf),
    /// PEM text.
    Pem(Vec<u8>),
}

impl fmt::Debug for CaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaSource::File(path) => write!(f, "File({})", path.display()),
            CaSource::Pem(pem) => write!(f, "Pem({} bytes)", pem.len()),
        }
    }
}

/// The client side of TLS: what it trusts, ready for every connection.
#[derive(Clone)]
pub(crate) struct TlsClient {
    config: Arc<ClientConfig>,
    /// What is trusted, for `Debug` and error messages.
    roots: String,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

fn bad_ca(message: String) -> HeartbeatError {
    HeartbeatError::Config {
        field: "ca",
        message,
    }
}

/// The TLS configuration: the given CAs only, or Mozilla's roots when none is given.
///
/// # Errors
///
/// [`HeartbeatError::Config`] (field `ca`) for a file that cannot be read, PEM that
/// does not parse, a source without any certificate, or a certificate that is not a
/// usable trust anchor.
pub(crate) fn client(cas: &[CaSource]) -> Result<TlsClient, HeartbeatError> {
    let mut roots = RootCertStore::empty();
    let described = if cas.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        "the built-in roots (webpki-roots)".to_owned()
    } else {
        let mut names = Vec::new();
        for ca in cas {
            let (pem, name) = match ca {
                CaSource::File(path) => (
                    std::fs::read(path)
                        .map_err(|e| bad_ca(format!("cannot read {}: {e}", path.display())))?,
                    path.display().to_string(),
                ),
                CaSource::Pem(pem) => (pem.clone(), "the PEM given to `ca_pem`".to_owned()),
            };
            let mut found = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad_ca(format!("{name}: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad_ca(format!("{name}: not a usable CA certificate: {e}")))?;
                found += 1;
            }
            if found == 0 {
                return Err(bad_ca(format!(
                    "{name}: no `BEGIN CERTIFICATE` block in it"
                )));
            }
            names.push(name);
        }
        format!("the CA certificates of {}", names.join(", "))
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad_ca(format!("TLS set-up: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsClient {
        config: Arc::new(config),
        roots: described,
    })
}

/// The name the server's certificate must carry: a DNS name or an IP address.
///
/// # Errors
///
/// A message if `host` is neither.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_owned()).map_err(|e| {
        format!("{host:?} is not a DNS name or IP address a certificate can name: {e}")
    })
}

/// A TLS stream over a connected socket.
pub(crate) type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Runs the handshake over `tcp`, each read within `io_timeout` and the whole by
/// `deadline`, and checks the server's certificate against the roots and `host`.
///
/// # Errors
///
/// A message saying what failed: a certificate not trusted (and what is trusted), a
/// server that does not speak TLS, or one too slow.
pub(crate) fn connect(
    tls: &TlsClient,
    host: &str,
    tcp: TcpStream,
    io_timeout: Duration,
    deadline: Instant,
) -> Result<TlsStream, String> {
    let name = server_name(host)?;
    let conn = ClientConnection::new(Arc::clone(&tls.config), name)
        .map_err(|e| format!("TLS set-up: {e}"))?;
    let mut stream = StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("TLS handshake: too slow".into());
        }
        stream
            .sock
            .set_read_timeout(Some(left.min(io_timeout)))
            .map_err(|e| format!("TLS handshake: {e}"))?;
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| handshake_failed(&e, &tls.roots))?;
    }
    Ok(stream)
}

/// Says why a handshake failed, in words that point at the fix.
fn handshake_failed(e: &std::io::Error, roots: &str) -> String {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(why)) => format!(
            "TLS handshake: the server's certificate is not trusted ({why}); \
             trusted: {roots}"
        ),
        Some(
            rustls::Error::InvalidMessage(_)
            | rustls::Error::InappropriateMessage { .. }
            | rustls::Error::InappropriateHandshakeMessage { .. },
        ) => format!(
            "TLS handshake: the server does not speak TLS ({e}); \
             is it serving plain http? then use an http:// address"
        ),
        Some(other) => format!("TLS handshake: {other}"),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "TLS handshake: the server closed the connection (is it serving https?)".to_owned()
        }
        None => format!("TLS handshake: {e}"),
    }
}
