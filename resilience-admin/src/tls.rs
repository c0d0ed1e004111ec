//! https: the server's certificate and key, read from PEM, and the TLS acceptor that
//! wraps each accepted connection.
//!
//! rustls (through tokio-rustls) with the ring provider, chosen explicitly rather than
//! through rustls' process-wide default, so an embedding program that turns on
//! another provider cannot make the choice ambiguous.

use std::fmt;
use std::path::Path;
// std's `Arc`: rustls takes its configuration in one.
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;

/// A certificate chain and its private key: the server then serves https only.
///
/// # Examples
///
/// ```no_run
/// use resilience_admin::auth::Token;
/// use resilience_admin::server::{AdminConfig, StorageConfig};
/// use resilience_admin::tls::TlsConfig;
///
/// let tls = TlsConfig::from_pem_files(
///     "/etc/resilience-admin/cert.pem".as_ref(),
///     "/etc/resilience-admin/key.pem".as_ref(),
/// )?;
/// let config = AdminConfig::builder(StorageConfig::Memory, Token::new("admin-token-0123456789")?)
///     .tls(tls)
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<ServerConfig>,
    /// Where the certificate came from, for `Debug` and the start-up line.
    source: String,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No key material.
        f.debug_struct("TlsConfig")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// A certificate or key that cannot be used.
#[derive(Debug)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

impl TlsConfig {
    /// Reads a PEM certificate chain (the server's certificate first, then its
    /// intermediates) and a PEM private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming the file: unreadable, no certificate or key in it, or a
    /// key that does not match the certificate.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<TlsConfig, TlsError> {
        let read = |path: &Path| {
            std::fs::read(path)
                .map_err(|e| TlsError(format!("cannot read {}: {e}", path.display())))
        };
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        TlsConfig::build(
            &cert_pem,
            &key_pem,
            &cert.display().to_string(),
            &key.display().to_string(),
        )
    }

    /// The same from PEM text already in memory.
    ///
    /// # Errors
    ///
    /// As [`from_pem_files`](Self::from_pem_files).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsConfig, TlsError> {
        TlsConfig::build(cert_pem, key_pem, "the certificate", "the key")
    }

    fn build(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert_name: &str,
        key_name: &str,
    ) -> Result<TlsConfig, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("{cert_name}: {e}")))?;
        if chain.is_empty() {
            return Err(TlsError(format!(
                "{cert_name}: no `BEGIN CERTIFICATE` block in it"
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
            TlsError(format!(
                "{key_name}: no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"
            ))
        })?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS set-up: {e}")))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| match e {
                tokio_rustls::rustls::Error::InconsistentKeys(_) => {
                    TlsError(format!("{key_name} is not the private key of {cert_name}"))
                }
                e => TlsError(format!("{cert_name} with {key_name}: {e}")),
            })?;
        // The server speaks HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsConfig {
            config: Arc::new(config),
            source: cert_name.to_owned(),
        })
    }

    /// The acceptor that wraps accepted connections.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config))
    }
}
