//! TLS to `https://` replicas (`[upstream_tls]`): one rustls client (ring provider, TLS 1.2
//! and 1.3) that trusts a CA file or the system's store, optionally presents a client
//! certificate (mutual TLS), and verifies each replica's certificate against the host of
//! its URL. Every upstream path uses it: force_close and spread connect through
//! [`UpstreamTls::connect`], the keep-alive pool, the scraper and the health checks through
//! [`UpstreamTls::pooled_connector`]. A reload builds a new state, which reads the files
//! again. Plain `http://` replicas never touch this module.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::server::{TlsError, read_certs};

/// `[upstream_tls]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    /// PEM CA bundle the replicas' certificates chain to; default the system's roots.
    pub ca: Option<String>,
    /// PEM certificate chain presented to replicas that ask for one (with `client_key`).
    pub client_cert: Option<String>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<String>,
}

/// The certificate and key presented to replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The validated `[upstream_tls]`; the default (no section) trusts the system's roots and
/// presents no certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTlsConfig {
    pub ca: Option<PathBuf>,
    pub client: Option<ClientIdentity>,
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamTlsError {
    #[error(transparent)]
    Files(#[from] TlsError),
    #[error("CA certificate in {path} is not usable: {source}")]
    Root { path: PathBuf, source: rustls::Error },
    #[error("client certificate {cert} with key {key}: {source}")]
    ClientIdentity { cert: PathBuf, key: PathBuf, source: rustls::Error },
    #[error("TLS client setup: {0}")]
    Setup(#[from] rustls::Error),
}

impl UpstreamTlsConfig {
    /// Validates `[upstream_tls]`: `client_cert` and `client_key` together, every file
    /// readable and the client configuration buildable. On error, (field path, message).
    pub fn from_raw(raw: &RawUpstreamTls) -> Result<Self, Vec<(String, String)>> {
        let client = match (&raw.client_cert, &raw.client_key) {
            (Some(cert), Some(key)) => Some(ClientIdentity { cert: cert.into(), key: key.into() }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(vec![(
                    "upstream_tls.client_key".into(),
                    "is required with `client_cert` (mutual TLS needs both)".into(),
                )]);
            }
            (None, Some(_)) => {
                return Err(vec![(
                    "upstream_tls.client_cert".into(),
                    "is required with `client_key` (mutual TLS needs both)".into(),
                )]);
            }
        };
        let config = Self { ca: raw.ca.as_ref().map(PathBuf::from), client };
        // Load everything once now, so that a bad file is refused with the config (an
        // empty root store stands in for the system's: its loading cannot fail here).
        let roots = match &config.ca {
            Some(ca) => roots_from_file(ca).map_err(|error| config.issue(&error))?,
            None => Arc::new(RootCertStore::empty()),
        };
        client_config(roots, config.client.as_ref()).map_err(|error| config.issue(&error))?;
        Ok(config)
    }

    fn issue(&self, error: &UpstreamTlsError) -> Vec<(String, String)> {
        let field = match error {
            UpstreamTlsError::Files(TlsError::Key { .. } | TlsError::KeyType { .. }) => {
                "upstream_tls.client_key"
            }
            UpstreamTlsError::Root { .. } => "upstream_tls.ca",
            UpstreamTlsError::Files(TlsError::Cert { path, .. } | TlsError::NoCert(path))
                if Some(path) == self.ca.as_ref() =>
            {
                "upstream_tls.ca"
            }
            UpstreamTlsError::Files(_) | UpstreamTlsError::ClientIdentity { .. } => {
                "upstream_tls.client_cert"
            }
            UpstreamTlsError::Setup(_) => "upstream_tls",
        };
        vec![(field.to_string(), error.to_string())]
    }
}

/// The upstream TLS client of one gateway state.
pub struct UpstreamTls {
    /// For connections made by hand (force_close, spread): ALPN `http/1.1`.
    direct: TlsConnector,
    /// For hyper-rustls, which sets ALPN itself (none when only HTTP/1.1 is enabled).
    pooled: ClientConfig,
    /// The last failure logged per replica address, so that a replica with a bad
    /// certificate logs once per reason, not once per request; a good handshake clears it.
    logged_failures: DashMap<String, String>,
}

impl UpstreamTls {
    /// Reads the files of `config` (the system's roots when no CA is given).
    pub fn load(config: &UpstreamTlsConfig) -> Result<Self, UpstreamTlsError> {
        let roots = match &config.ca {
            Some(ca) => roots_from_file(ca)?,
            None => system_roots(),
        };
        Ok(Self::from_config(client_config(roots, config.client.as_ref())?))
    }

    /// A client that trusts nothing: every https replica fails its handshake. Stands in
    /// when the files vanished between validation and use, failing closed.
    pub fn unavailable() -> Self {
        let config = client_config(Arc::new(RootCertStore::empty()), None)
            .expect("the ring provider supports the safe defaults");
        Self::from_config(config)
    }

    /// Loads `config`, or logs why not and returns [`UpstreamTls::unavailable`].
    pub fn load_or_unavailable(config: &UpstreamTlsConfig) -> Self {
        Self::load(config).unwrap_or_else(|error| {
            tracing::error!(%error, "upstream TLS unavailable: https replicas will fail");
            Self::unavailable()
        })
    }

    fn from_config(pooled: ClientConfig) -> Self {
        let mut direct = pooled.clone();
        direct.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            direct: TlsConnector::from(Arc::new(direct)),
            pooled,
            logged_failures: DashMap::new(),
        }
    }

    /// Runs the client handshake on `tcp`, verifying the certificate against `server_name`.
    /// A failure is logged once per replica and reason.
    pub async fn connect(
        &self,
        authority: &str,
        server_name: &ServerName<'static>,
        tcp: TcpStream,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let connected = self.direct.connect(server_name.clone(), tcp).await;
        match &connected {
            Ok(_) => self.note_success(authority),
            Err(error) => {
                self.note_failure(authority, error);
            }
        }
        connected
    }

    /// A pooled-client connector: `http://` URIs go as before, `https://` ones through
    /// this TLS client (HTTP/1.1 only).
    pub fn pooled_connector(&self, mut http: HttpConnector) -> HttpsConnector<HttpConnector> {
        // HttpConnector refuses https URIs unless told that a wrapper handles them.
        http.enforce_http(false);
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.pooled.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http)
    }

    /// Logs `error` for `authority` unless the same reason was logged last; whether it
    /// logged.
    pub fn note_failure(&self, authority: &str, error: &dyn std::fmt::Display) -> bool {
        let reason = error.to_string();
        if self.logged_failures.get(authority).is_some_and(|logged| *logged == reason) {
            return false;
        }
        tracing::warn!(replica = authority, %reason, "TLS to replica failed");
        self.logged_failures.insert(authority.to_string(), reason);
        true
    }

    /// A handshake to `authority` succeeded: its next failure is logged again.
    pub fn note_success(&self, authority: &str) {
        if !self.logged_failures.is_empty() {
            self.logged_failures.remove(authority);
        }
    }
}

/// The name a replica's certificate must carry: the host of `host:port` (an IP address is
/// a valid name). `None` when the host is neither.
pub fn server_name(authority: &str) -> Option<ServerName<'static>> {
    let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

/// The system's trust store, read once per process (`rustls-native-certs`); the bundled
/// Mozilla roots when it is empty or unreadable. A change to it needs a restart.
pub fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::debug!(%error, "system trust store");
            }
            let mut roots = RootCertStore::empty();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::info!("system trust store is empty; using the bundled Mozilla roots");
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            Arc::new(roots)
        })
        .clone()
}

/// Every certificate of a PEM CA bundle as a root.
pub fn roots_from_file(path: &Path) -> Result<Arc<RootCertStore>, UpstreamTlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .map_err(|source| UpstreamTlsError::Root { path: path.to_path_buf(), source })?;
    }
    Ok(Arc::new(roots))
}

/// A client configuration trusting `roots`, presenting `client` if given; no ALPN.
pub fn client_config(
    roots: Arc<RootCertStore>,
    client: Option<&ClientIdentity>,
) -> Result<ClientConfig, UpstreamTlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let Some(client) = client else {
        return Ok(builder.with_no_client_auth());
    };
    let chain: Vec<CertificateDer<'static>> = read_certs(&client.cert)?;
    let key = PrivateKeyDer::from_pem_file(&client.key)
        .map_err(|source| TlsError::Key { path: client.key.clone(), source })?;
    builder.with_client_auth_cert(chain, key).map_err(|source| UpstreamTlsError::ClientIdentity {
        cert: client.cert.clone(),
        key: client.key.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_host() {
        assert_eq!(server_name("replica.example:8443").unwrap().to_str(), "replica.example");
        assert_eq!(server_name("10.0.0.1:443").unwrap().to_str(), "10.0.0.1");
        assert_eq!(server_name("[::1]:443").unwrap().to_str(), "::1");
    }

    #[test]
    fn a_failure_is_logged_once_per_reason_until_a_handshake_succeeds() {
        let tls = UpstreamTls::unavailable();
        let logged: Vec<bool> = [
            tls.note_failure("a:1", &"unknown issuer"),
            tls.note_failure("a:1", &"unknown issuer"),
            tls.note_failure("b:1", &"unknown issuer"),
            tls.note_failure("a:1", &"expired"),
        ]
        .into();
        assert_eq!(logged, [true, false, true, true]);
        tls.note_success("a:1");
        assert!(tls.note_failure("a:1", &"expired"));
    }

    #[test]
    fn client_cert_and_key_go_together() {
        let raw = RawUpstreamTls { client_cert: Some("/x.pem".into()), ..Default::default() };
        let issues = UpstreamTlsConfig::from_raw(&raw).unwrap_err();
        assert_eq!(issues[0].0, "upstream_tls.client_key");
        let raw = RawUpstreamTls { client_key: Some("/x.key".into()), ..Default::default() };
        assert_eq!(UpstreamTlsConfig::from_raw(&raw).unwrap_err()[0].0, "upstream_tls.client_cert");
        assert_eq!(
            UpstreamTlsConfig::from_raw(&RawUpstreamTls::default()).unwrap(),
            UpstreamTlsConfig::default()
        );
    }

    #[test]
    fn an_unreadable_ca_is_named() {
        let raw =
            RawUpstreamTls { ca: Some("/nonexistent/laneway-ca.pem".into()), ..Default::default() };
        let issues = UpstreamTlsConfig::from_raw(&raw).unwrap_err();
        assert_eq!(issues[0].0, "upstream_tls.ca");
        assert!(issues[0].1.contains("/nonexistent/laneway-ca.pem"), "{}", issues[0].1);
    }
}
