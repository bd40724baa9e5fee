//! TLS on the smart listener: h2 chosen by ALPN, http/1.1, a client that does not trust
//! the certificate refuses it, and a reload swaps the certificate new connections get.
//! Certificates are made at test time with rcgen.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::gateway::{chat_body, config_for, start_gateway, start_sims};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use laneway::gateway::tls::TlsConfig;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A self-signed certificate for `localhost`, written as PEM into `dir`.
struct TestCert {
    der: CertificateDer<'static>,
}

fn write_cert(dir: &Path) -> TestCert {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.key_pair.serialize_pem()).unwrap();
    TestCert { der: made.cert.der().clone() }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("laneway-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn connector(trusted: &CertificateDer<'static>, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

async fn connect(
    addr: std::net::SocketAddr,
    connector: &TlsConnector,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await
}

fn chat_request(host: &str) -> http::Request<Full<Bytes>> {
    let body = serde_json::to_vec(&chat_body(20, 4, false)).unwrap();
    http::Request::post(format!("https://{host}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("host", host)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// Sends one chat request over `stream` with the protocol ALPN chose; (status, version, body).
async fn chat_over(stream: TlsStream<TcpStream>) -> (u16, http::Version, String) {
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let response = if h2 {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        sender.send_request(chat_request("localhost")).await.unwrap()
    } else {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        sender.send_request(chat_request("localhost")).await.unwrap()
    };
    let status = response.status().as_u16();
    let version = response.version();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, version, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn h2_by_alpn_and_http1_both_proxy_over_tls() {
    let dir = temp_dir("alpn");
    let cert = write_cert(&dir);
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.tls = Some(TlsConfig { cert: dir.join("cert.pem"), key: dir.join("key.pem") });
    let gateway = start_gateway(config).await;

    let stream =
        connect(gateway.addr(), &connector(&cert.der, &[b"h2", b"http/1.1"])).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (status, version, body) = chat_over(stream).await;
    assert_eq!((status, version), (200, http::Version::HTTP_2), "{body}");
    assert!(body.contains("\"usage\""), "{body}");

    let stream = connect(gateway.addr(), &connector(&cert.der, &[b"http/1.1"])).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, version, _) = chat_over(stream).await;
    assert_eq!((status, version), (200, http::Version::HTTP_11));

    // No ALPN at all: HTTP/1.1 still works.
    let stream = connect(gateway.addr(), &connector(&cert.der, &[])).await.unwrap();
    assert_eq!(chat_over(stream).await.0, 200);
    gateway.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_certificate_refuses_it() {
    let dir = temp_dir("untrusted");
    write_cert(&dir);
    let other = write_cert(&temp_dir("untrusted-other"));
    // Write the served certificate last so `other` is not the one served.
    let served = write_cert(&dir);
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.tls = Some(TlsConfig { cert: dir.join("cert.pem"), key: dir.join("key.pem") });
    let gateway = start_gateway(config).await;

    let refused = connect(gateway.addr(), &connector(&other.der, &[b"h2"])).await;
    let error = refused.expect_err("an untrusted certificate must be refused").to_string();
    assert!(error.contains("certificate"), "{error}");
    // The gateway carries on serving clients that trust it.
    let stream = connect(gateway.addr(), &connector(&served.der, &[b"h2"])).await.unwrap();
    assert_eq!(chat_over(stream).await.0, 200);
    gateway.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn reload_swaps_the_certificate_for_new_connections() {
    let dir = temp_dir("reload");
    let first = write_cert(&dir);
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.tls = Some(TlsConfig { cert: dir.join("cert.pem"), key: dir.join("key.pem") });
    let gateway = start_gateway(config).await;

    let before = connect(gateway.addr(), &connector(&first.der, &[b"h2"])).await.unwrap();
    assert_eq!(before.get_ref().1.peer_certificates().unwrap()[0], first.der);

    let second = write_cert(&dir);
    gateway.reload_tls().unwrap();
    let after = connect(gateway.addr(), &connector(&second.der, &[b"h2"])).await.unwrap();
    assert_eq!(after.get_ref().1.peer_certificates().unwrap()[0], second.der);
    assert!(connect(gateway.addr(), &connector(&first.der, &[b"h2"])).await.is_err());
    // The connection made before the reload keeps working.
    assert_eq!(chat_over(before).await.0, 200);

    // A broken file is refused and the current certificate stays.
    std::fs::write(dir.join("cert.pem"), "not a certificate").unwrap();
    assert!(gateway.reload_tls().is_err());
    let still = connect(gateway.addr(), &connector(&second.der, &[b"h2"])).await.unwrap();
    assert_eq!(chat_over(still).await.0, 200);
    gateway.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn config_names_a_bad_certificate_file() {
    let dir = temp_dir("config");
    std::fs::write(dir.join("cert.pem"), "nothing").unwrap();
    let text = format!(
        "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        dir.join("cert.pem").display(),
        dir.join("missing.pem").display()
    );
    let error = laneway::gateway::GatewayConfig::from_toml(&text).unwrap_err();
    assert_eq!(error.issues[0].path, "tls.cert", "{error}");
    let error = laneway::gateway::GatewayConfig::from_toml("[tls]\ncert = \"x\"\n").unwrap_err();
    assert_eq!(error.issues[0].path, "tls");
    std::fs::remove_dir_all(dir).unwrap();
}
