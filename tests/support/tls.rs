//! Test PKI and a TLS front for simulated replicas: certificates made at test time with
//! rcgen (a CA, server and client certificates signed by it, written as PEM files), and a
//! tokio-rustls acceptor on port 0 that terminates TLS and copies bytes to a plain replica.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A certificate authority that signs test certificates.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    /// Its certificate as a PEM file.
    pub pem: PathBuf,
}

/// A certificate signed by a [`TestCa`], in memory and as PEM files.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub cert_pem: PathBuf,
    pub key_pem: PathBuf,
}

/// A fresh directory for one test's files.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("laneway-upstream-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl TestCa {
    pub fn new(dir: &Path, name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}.pem"));
        std::fs::write(&pem, cert.pem()).unwrap();
        Self { cert, key, pem }
    }

    /// A certificate for `names` (DNS names or IP addresses), written as `{file}.pem/.key`.
    pub fn issue(&self, dir: &Path, file: &str, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = CertificateParams::new(names).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let cert_pem = dir.join(format!("{file}.pem"));
        let key_pem = dir.join(format!("{file}.key"));
        std::fs::write(&cert_pem, cert.pem()).unwrap();
        std::fs::write(&key_pem, key.serialize_pem()).unwrap();
        Leaf {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            cert_pem,
            key_pem,
        }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }
}

/// A TLS front for one plain replica.
pub struct TlsFront {
    pub addr: SocketAddr,
    /// Handshakes that completed.
    pub handshakes: Arc<AtomicU64>,
    /// Handshakes the front refused or that failed.
    pub refused: Arc<AtomicU64>,
    /// Completed handshakes where ALPN chose `http/1.1`.
    pub alpn_http11: Arc<AtomicU64>,
}

impl TlsFront {
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Relaxed)
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn alpn_http11(&self) -> u64 {
        self.alpn_http11.load(Ordering::Relaxed)
    }
}

/// Serves `server` on 127.0.0.1:0; client certificates signed by `client_ca` are
/// required when it is given.
pub async fn start_front(
    backend: SocketAddr,
    server: &Leaf,
    client_ca: Option<&TestCa>,
) -> TlsFront {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.der()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config =
        builder.with_single_cert(server.chain.clone(), server.key.clone_key()).unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = TlsFront {
        addr: listener.local_addr().unwrap(),
        handshakes: Arc::default(),
        refused: Arc::default(),
        alpn_http11: Arc::default(),
    };
    let (handshakes, refused, alpn) =
        (front.handshakes.clone(), front.refused.clone(), front.alpn_http11.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, handshakes, refused, alpn) =
                (acceptor.clone(), handshakes.clone(), refused.clone(), alpn.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    refused.fetch_add(1, Ordering::Relaxed);
                    return;
                };
                handshakes.fetch_add(1, Ordering::Relaxed);
                if tls.get_ref().1.alpn_protocol() == Some(b"http/1.1") {
                    alpn.fetch_add(1, Ordering::Relaxed);
                }
                let Ok(mut plain) = TcpStream::connect(backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    front
}
