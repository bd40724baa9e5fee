//! https replicas: streaming through force_close (with and without ready connections),
//! spread and keep_alive to a simulated replica behind a TLS front, scrape and health
//! checks over TLS, a replica whose CA the gateway does not trust (502, not a crash),
//! mutual TLS, and `[upstream_tls]` validation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::gateway::*;
use crate::support::tls::{TestCa, start_front, temp_dir};
use futures_util::future::BoxFuture;
use laneway::gateway::config::ReplicaConfig;
use laneway::gateway::config::{DnsDiscovery, Resolver};
use laneway::gateway::tls::upstream::{ClientIdentity, UpstreamTlsConfig};
use laneway::gateway::{Entry, GatewayConfig, GatewayHandle, Strategy};

fn https_replica(name: &str, addr: SocketAddr) -> ReplicaConfig {
    ReplicaConfig { tls: true, ..replica(name, addr) }
}

/// A gateway in front of one https replica, `strategy` on the short entry, health checks
/// every 50 ms.
fn gateway_config(
    front: SocketAddr,
    strategy: Strategy,
    upstream_tls: UpstreamTlsConfig,
) -> GatewayConfig {
    let mut config =
        with_strategy(loopback_config(vec![https_replica("tls-0", front)]), Entry::Short, strategy);
    config.upstream_tls = upstream_tls;
    config.reliability.health.interval = Duration::from_millis(50);
    config
}

/// A simulated replica behind a TLS front whose certificate (for 127.0.0.1) a test CA
/// signed, and the upstream TLS settings that trust that CA; files under `dir`.
struct HttpsReplica {
    dir: std::path::PathBuf,
    sims: Vec<laneway::sim::SimHandle>,
    front: crate::support::tls::TlsFront,
    trusted: UpstreamTlsConfig,
}

async fn https_sim(name: &str) -> HttpsReplica {
    let dir = temp_dir(name);
    let ca = TestCa::new(&dir, "replica-ca");
    let server = ca.issue(&dir, "replica", &["127.0.0.1"]);
    let sims = start_sims(1, 2).await;
    let front = start_front(sims[0].addr(), &server, None).await;
    let trusted = UpstreamTlsConfig { ca: Some(ca.pem.clone()), client: None };
    HttpsReplica { dir, sims, front, trusted }
}

/// Sends one streaming chat request; (status, body).
async fn stream_chat(gateway: &GatewayHandle) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url(gateway, "/v1/chat/completions"))
        .json(&chat_body(40, 6, true))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The sum of the samples of `name` whose labels hold every one of `labels`.
fn sum_samples(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn every_strategy_streams_from_an_https_replica_and_checks_it_over_tls() {
    let HttpsReplica { dir, sims, front, trusted } = https_sim("strategies").await;
    for strategy in [Strategy::ForceClose, Strategy::Spread, Strategy::KeepAlive] {
        let gateway = start_gateway(gateway_config(front.addr, strategy, trusted.clone())).await;
        let (status, body) = stream_chat(&gateway).await;
        assert_eq!(status, 200, "{strategy}: {body}");
        assert!(body.contains("\"delta\":{\"content\""), "{strategy}: no tokens in {body}");
        assert!(body.trim_end().ends_with("data: [DONE]"), "{strategy}: {body}");
        let metrics = gateway.metrics_text();
        let strategy_label = format!("strategy=\"{strategy}\"");
        let served = sum_samples(
            &metrics,
            "laneway_requests_total",
            &["replica=\"tls-0\"", "status_class=\"2xx\"", &strategy_label],
        );
        assert_eq!(served, 1.0, "{strategy}: {metrics}");
        // The scraper reads /metrics and the checker /health over TLS too.
        let state = gateway.state();
        let replica = state.picker.by_name("tls-0").unwrap();
        let epoch = state.picker.epoch;
        wait_until("a scrape over TLS", || {
            replica.load.scrape_age(epoch, Instant::now()).is_some()
        })
        .await;
        wait_until("a passed health check over TLS", || {
            sample(
                &gateway.metrics_text(),
                "laneway_health_checks_total{replica=\"tls-0\",result=\"pass\"}",
            )
            .is_some_and(|passes| passes >= 1.0)
        })
        .await;
        let view = admin_json(&gateway, "/admin/replicas").await;
        let listed = &view["replicas"][0];
        assert_eq!(listed["url"], format!("https://{}", front.addr));
        assert!(listed["scrape_age_seconds"].is_number(), "{listed}");
        assert_eq!(gateway.replica_failures("tls-0"), 0);
        // The debug entry reaches the named replica over TLS as well.
        let debug = reqwest::get(url(&gateway, "/debug/tls-0/metrics")).await.unwrap();
        assert_eq!(debug.status(), 200, "{strategy}");
        assert!(debug.text().await.unwrap().contains("vllm:num_requests_waiting"));
        gateway.shutdown().await;
    }
    assert_eq!(sims[0].stats().requests_total, 3);
    assert_eq!(front.refused(), 0);
    assert!(front.alpn_http11() >= 1, "force_close and spread offer ALPN http/1.1");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn ready_connections_to_an_https_replica_are_opened_over_tls_and_used() {
    let HttpsReplica { dir, sims, front, trusted } = https_sim("ready").await;
    let mut config = gateway_config(front.addr, Strategy::ForceClose, trusted);
    config.short.ready_connections = 2;
    // Every request counts as close to the one before.
    config.short.ready_max_idle = Duration::from_secs(600);
    let gateway = start_gateway(config).await;
    let used = || {
        sample(&gateway.metrics_text(), "laneway_ready_connections_total{outcome=\"used\"}")
            .unwrap_or(0.0)
    };
    // Requests one after another until one finds a connection handshaken ahead (the
    // third, unless the machine is slow to finish the handshakes in the background).
    let mut sent = 0;
    while used() < 1.0 && sent < 20 {
        let (status, body) = stream_chat(&gateway).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
        sent += 1;
    }
    assert!(used() >= 1.0, "no ready connection used in {sent} requests");
    assert_eq!(sims[0].stats().requests_total, sent);
    assert_eq!(front.refused(), 0);
    gateway.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_untrusted_replica_certificate_is_a_502_and_a_connect_failure() {
    let dir = temp_dir("untrusted");
    let trusted_ca = TestCa::new(&dir, "trusted-ca");
    let other_ca = TestCa::new(&dir, "other-ca");
    let server = other_ca.issue(&dir, "replica", &["127.0.0.1"]);
    let sims = start_sims(1, 1).await;
    let front = start_front(sims[0].addr(), &server, None).await;
    let trusted = UpstreamTlsConfig { ca: Some(trusted_ca.pem.clone()), client: None };
    for strategy in [Strategy::ForceClose, Strategy::Spread, Strategy::KeepAlive] {
        let mut config = gateway_config(front.addr, strategy, trusted.clone());
        // One failing replica must stay in rotation for the request to reach it.
        config.reliability.health.unhealthy_threshold = 100;
        config.reliability.health.consecutive_failures = 100;
        let gateway = start_gateway(config).await;
        let (status, body) = stream_chat(&gateway).await;
        assert_eq!(status, 502, "{strategy}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("cannot connect to replica `tls-0`"), "{strategy}: {message}");
        // The reason reaches the client: rustls names the unknown issuer.
        assert!(message.contains("UnknownIssuer"), "{strategy}: {message}");
        let metrics = gateway.metrics_text();
        let refused = sum_samples(&metrics, "laneway_request_errors_total", &["upstream_connect"]);
        assert!(refused >= 1.0, "{strategy}: {metrics}");
        wait_until("failures counted", || gateway.replica_failures("tls-0") > 0).await;
        gateway.shutdown().await;
    }
    assert_eq!(sims[0].stats().requests_total, 0, "nothing passed an untrusted handshake");
    assert!(front.refused() >= 3);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let dir = temp_dir("misnamed");
    let ca = TestCa::new(&dir, "replica-ca");
    // Signed by the trusted CA, but for a name the replica URL does not hold.
    let server = ca.issue(&dir, "replica", &["replica.example", "10.9.9.9"]);
    let sims = start_sims(1, 1).await;
    let front = start_front(sims[0].addr(), &server, None).await;
    let trusted = UpstreamTlsConfig { ca: Some(ca.pem.clone()), client: None };
    let mut config = gateway_config(front.addr, Strategy::ForceClose, trusted);
    config.reliability.health.unhealthy_threshold = 100;
    config.reliability.health.consecutive_failures = 100;
    let gateway = start_gateway(config).await;
    let (status, body) = stream_chat(&gateway).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("not valid for name"), "{body}");
    assert_eq!(sims[0].stats().requests_total, 0);
    gateway.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_replica_that_requires_client_certificates_serves_only_with_one() {
    let dir = temp_dir("mutual");
    let ca = TestCa::new(&dir, "replica-ca");
    let server = ca.issue(&dir, "replica", &["127.0.0.1"]);
    let client_ca = TestCa::new(&dir, "client-ca");
    let client = client_ca.issue(&dir, "gateway-client", &["laneway"]);
    let sims = start_sims(1, 1).await;
    let front = start_front(sims[0].addr(), &server, Some(&client_ca)).await;

    let without = UpstreamTlsConfig { ca: Some(ca.pem.clone()), client: None };
    let mut config = gateway_config(front.addr, Strategy::ForceClose, without);
    config.reliability.health.unhealthy_threshold = 100;
    config.reliability.health.consecutive_failures = 100;
    let gateway = start_gateway(config).await;
    let (status, body) = stream_chat(&gateway).await;
    assert_eq!(status, 502, "{body}");
    // TLS 1.3: the replica refuses after the client side of the handshake finished.
    assert!(body.contains("closed the connection before answering"), "{body}");
    assert_eq!(sims[0].stats().requests_total, 0);
    assert!(front.refused() >= 1);
    gateway.shutdown().await;

    let identity = ClientIdentity { cert: client.cert_pem.clone(), key: client.key_pem.clone() };
    let with = UpstreamTlsConfig { ca: Some(ca.pem.clone()), client: Some(identity) };
    for strategy in [Strategy::ForceClose, Strategy::KeepAlive] {
        let gateway = start_gateway(gateway_config(front.addr, strategy, with.clone())).await;
        let (status, body) = stream_chat(&gateway).await;
        assert_eq!(status, 200, "{strategy}: {body}");
        assert!(body.trim_end().ends_with("data: [DONE]"), "{strategy}: {body}");
        gateway.shutdown().await;
    }
    assert_eq!(sims[0].stats().requests_total, 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_config_reload_reads_the_ca_file_again() {
    let dir = temp_dir("reload");
    let old_ca = TestCa::new(&dir, "old-ca");
    let new_ca = TestCa::new(&dir, "new-ca");
    let server = new_ca.issue(&dir, "replica", &["127.0.0.1"]);
    let sims = start_sims(1, 1).await;
    let front = start_front(sims[0].addr(), &server, None).await;
    let ca_file = dir.join("replica-ca.pem");
    std::fs::copy(&old_ca.pem, &ca_file).unwrap();
    // The file a SIGHUP would reload: the CA path stays, its content changes.
    let config_file = dir.join("laneway.toml");
    std::fs::write(
        &config_file,
        format!(
            "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [[replicas]]\nname = \"tls-0\"\nurl = \"https://{}\"\n\
             [upstream_tls]\nca = \"{}\"\n\
             [health]\nunhealthy_threshold = 100\nconsecutive_failures = 100\n",
            front.addr,
            ca_file.display()
        ),
    )
    .unwrap();
    let gateway = start_gateway(GatewayConfig::load(&config_file).unwrap()).await;
    let (status, body) = stream_chat(&gateway).await;
    assert_eq!(status, 502, "the old CA does not sign the replica: {body}");
    std::fs::copy(&new_ca.pem, &ca_file).unwrap();
    gateway.reload_file(&config_file).await.unwrap();
    let (status, body) = stream_chat(&gateway).await;
    assert_eq!(status, 200, "after the reload: {body}");
    assert_eq!(sims[0].stats().requests_total, 1);
    gateway.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Answers every lookup with one address.
struct FixedResolver(SocketAddr);

impl Resolver for FixedResolver {
    fn resolve<'a>(
        &'a self,
        _name: &'a str,
        _port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        let addr = self.0;
        Box::pin(async move { Ok(vec![addr]) })
    }
}

#[tokio::test]
async fn dns_discovery_with_https_reaches_replicas_over_tls() {
    let dir = temp_dir("dns");
    let ca = TestCa::new(&dir, "replica-ca");
    let server = ca.issue(&dir, "replica", &["127.0.0.1"]);
    let sims = start_sims(1, 1).await;
    let front = start_front(sims[0].addr(), &server, None).await;
    let mut config = loopback_config(Vec::new());
    config.upstream_tls = UpstreamTlsConfig { ca: Some(ca.pem.clone()), client: None };
    let mut dns = DnsDiscovery::new("replicas.test", 8443, Duration::from_millis(20));
    dns.https = true;
    dns.resolver = Arc::new(FixedResolver(front.addr));
    config.discovery.dns = Some(dns);
    let gateway = start_gateway(config).await;
    wait_until("the discovered replica", || gateway.replica_names().len() == 1).await;
    let (status, body) = stream_chat(&gateway).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sims[0].stats().requests_total, 1);
    assert!(front.handshakes() >= 1);
    let view = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(view["replicas"][0]["url"], format!("https://{}", front.addr));
    gateway.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn upstream_tls_config_errors_name_the_field_and_the_file() {
    let dir = temp_dir("config");
    let ca = TestCa::new(&dir, "ca");
    let client = ca.issue(&dir, "client", &["laneway"]);
    let ca_path = ca.pem.display();
    let parsed = GatewayConfig::from_toml(&format!(
        "[[replicas]]\nname = \"r\"\nurl = \"https://127.0.0.1:8443\"\n\
         [upstream_tls]\nca = \"{ca_path}\"\nclient_cert = \"{}\"\nclient_key = \"{}\"\n",
        client.cert_pem.display(),
        client.key_pem.display()
    ))
    .unwrap();
    assert!(parsed.replicas[0].tls);
    assert_eq!(parsed.upstream_tls.ca.as_deref(), Some(ca.pem.as_path()));
    assert!(parsed.upstream_tls.client.is_some());

    let issues = |text: &str| {
        let error = GatewayConfig::from_toml(text).unwrap_err();
        error.issues.iter().map(|i| (i.path.clone(), i.message.clone())).collect::<Vec<_>>()
    };
    let half =
        issues(&format!("[upstream_tls]\nclient_cert = \"{}\"\n", client.cert_pem.display()));
    assert_eq!(half[0].0, "upstream_tls.client_key");
    let missing = dir.join("missing-ca.pem");
    let unreadable = issues(&format!("[upstream_tls]\nca = \"{}\"\n", missing.display()));
    assert_eq!(unreadable[0].0, "upstream_tls.ca");
    assert!(unreadable[0].1.contains("missing-ca.pem"), "{}", unreadable[0].1);
    let not_a_key = issues(&format!(
        "[upstream_tls]\nclient_cert = \"{}\"\nclient_key = \"{ca_path}\"\n",
        client.cert_pem.display()
    ));
    assert_eq!(not_a_key[0].0, "upstream_tls.client_key");
    let ftp = issues("[[replicas]]\nname = \"r\"\nurl = \"ftp://127.0.0.1:21\"\n");
    assert_eq!(ftp[0].0, "replicas[0].url");
    assert!(ftp[0].1.contains("http:// or https://"), "{}", ftp[0].1);
    let _ = std::fs::remove_dir_all(dir);
}
