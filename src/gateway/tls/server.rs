//! TLS on the inference listeners (rustls, ring provider): certificate and key from PEM
//! files, ALPN `h2` and `http/1.1`, and reload without a restart: the served certificate
//! sits behind `ArcSwap` in a certificate resolver, so [`ServerTls::reload`] swaps it for
//! new handshakes while open connections keep theirs. [`reload_on_sighup`] calls it on
//! SIGHUP; a config reload path can call it too.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// `[tls]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM certificate chain, leaf first.
    pub cert: Option<String>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<String>,
}

/// Where the listeners' certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsConfig {
    /// Validates `[tls]`: both paths given and loadable. On error, the field path and the
    /// message.
    pub fn from_raw(raw: &RawTls) -> Result<Self, (String, String)> {
        let (Some(cert), Some(key)) = (&raw.cert, &raw.key) else {
            return Err(("tls".into(), "give both `cert` and `key`".into()));
        };
        let config = Self { cert: cert.into(), key: key.into() };
        load_certified_key(&config).map_err(|error| {
            let field = if matches!(error, TlsError::Key { .. }) { "tls.key" } else { "tls.cert" };
            (field.to_string(), error.to_string())
        })?;
        Ok(config)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read certificates from {path}: {source}")]
    Cert { path: PathBuf, source: rustls_pki_types::pem::Error },
    #[error("no certificate in {0}")]
    NoCert(PathBuf),
    #[error("cannot read a private key from {path}: {source}")]
    Key { path: PathBuf, source: rustls_pki_types::pem::Error },
    #[error("unusable private key in {path}: {source}")]
    KeyType { path: PathBuf, source: rustls::Error },
    #[error("TLS setup: {0}")]
    Setup(#[from] rustls::Error),
}

/// The listeners' TLS: an acceptor whose certificate can be swapped.
pub struct ServerTls {
    config: TlsConfig,
    resolver: Arc<SwappableCert>,
    acceptor: TlsAcceptor,
}

impl ServerTls {
    pub fn load(config: &TlsConfig) -> Result<Self, TlsError> {
        let resolver = Arc::new(SwappableCert(ArcSwap::from(load_certified_key(config)?)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(server));
        Ok(Self { config: config.clone(), resolver, acceptor })
    }

    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// Reads the certificate and key files again and serves them to new connections. On
    /// error the current certificate stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.resolver.0.store(load_certified_key(&self.config)?);
        tracing::info!(cert = %self.config.cert.display(), "TLS certificate reloaded");
        Ok(())
    }
}

/// Reloads the certificate on every SIGHUP until the handle is aborted.
pub fn reload_on_sighup(tls: Arc<ServerTls>) -> std::io::Result<JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Err(error) = tls.reload() {
                tracing::error!(%error, "TLS certificate reload failed; keeping the current one");
            }
        }
    }))
}

struct SwappableCert(ArcSwap<CertifiedKey>);

impl fmt::Debug for SwappableCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SwappableCert")
    }
}

impl ResolvesServerCert for SwappableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

fn load_certified_key(config: &TlsConfig) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = read_certs(&config.cert)?;
    let key = PrivateKeyDer::from_pem_file(&config.key)
        .map_err(|source| TlsError::Key { path: config.key.clone(), source })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|source| TlsError::KeyType { path: config.key.clone(), source })?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Every certificate in a PEM file.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let cert_error = |source| TlsError::Cert { path: path.to_path_buf(), source };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(cert_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(cert_error)?;
    if chain.is_empty() {
        return Err(TlsError::NoCert(path.to_path_buf()));
    }
    Ok(chain)
}

/// Longest TLS handshake a client may take; a silent peer must not hold a task forever.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the server handshake; `None` (logged at debug) when it fails or times out.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: tokio::net::TcpStream,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tracing::debug!(%error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}
