//! DNS discovery: a name (typically a Kubernetes headless Service, whose A records are the
//! ready pods) resolved every interval; each address is a replica on the configured port,
//! named `ip:port`. The resolver is a trait so tests can script the answers.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Discovered, Source};
use crate::gateway::config::ReplicaConfig;

/// `[discovery.dns]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    pub name: Option<String>,
    pub port: Option<u16>,
    pub interval_ms: Option<u64>,
    /// Reach the addresses over TLS; their certificates must name the IP (an IP SAN).
    pub https: Option<bool>,
}

/// Resolves a name to addresses.
pub trait Resolver: Send + Sync + 'static {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default)]
pub struct SystemResolver;

/// The one shared [`SystemResolver`]: configs compare resolvers by pointer, so a reload of
/// an unchanged `[discovery.dns]` equals the running one and does not restart it.
fn system_resolver() -> Arc<dyn Resolver> {
    static SYSTEM: std::sync::OnceLock<Arc<dyn Resolver>> = std::sync::OnceLock::new();
    SYSTEM.get_or_init(|| Arc::new(SystemResolver)).clone()
}

impl Resolver for SystemResolver {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<SocketAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name, port)).await?.collect()) })
    }
}

/// A validated DNS source.
#[derive(Clone)]
pub struct DnsDiscovery {
    pub name: String,
    pub port: u16,
    pub interval: Duration,
    /// `https = true`: TLS to each address, verified against the IP.
    pub https: bool,
    pub resolver: Arc<dyn Resolver>,
}

impl fmt::Debug for DnsDiscovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsDiscovery")
            .field("name", &self.name)
            .field("port", &self.port)
            .field("interval", &self.interval)
            .field("https", &self.https)
            .finish_non_exhaustive()
    }
}

impl PartialEq for DnsDiscovery {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.port == other.port
            && self.interval == other.interval
            && self.https == other.https
            && Arc::ptr_eq(&self.resolver, &other.resolver)
    }
}

impl DnsDiscovery {
    pub fn new(name: impl Into<String>, port: u16, interval: Duration) -> Self {
        Self { name: name.into(), port, interval, https: false, resolver: system_resolver() }
    }

    pub fn from_raw(raw: &RawDns) -> Result<Self, Vec<(String, String)>> {
        let mut issues = Vec::new();
        let name = raw.name.clone().unwrap_or_default();
        if name.is_empty() {
            issues.push(("discovery.dns.name".into(), "is required".into()));
        }
        let port = raw.port.unwrap_or(0);
        if port == 0 {
            issues.push(("discovery.dns.port".into(), "is required (1..=65535)".into()));
        }
        let interval_ms = raw.interval_ms.unwrap_or(5000);
        if !(100..=3_600_000).contains(&interval_ms) {
            issues.push((
                "discovery.dns.interval_ms".into(),
                format!("{interval_ms} is out of range 100..=3600000"),
            ));
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        let source = Self::new(name, port, Duration::from_millis(interval_ms));
        Ok(Self { https: raw.https.unwrap_or(false), ..source })
    }

    /// One resolution, as replicas (sorted, so that equal answers compare equal).
    pub async fn discover(&self) -> std::io::Result<Vec<ReplicaConfig>> {
        let mut addrs = self.resolver.resolve(&self.name, self.port).await?;
        addrs.sort_unstable();
        addrs.dedup();
        Ok(addrs
            .into_iter()
            .map(|addr| ReplicaConfig {
                name: addr.to_string(),
                authority: addr.to_string(),
                // DNS says nothing about nodes: each address is its own fault domain.
                node: addr.ip().to_string(),
                tls: self.https,
                placement: Default::default(),
            })
            .collect())
    }
}

/// Resolves every interval and sends each answer; a failed lookup sends nothing, so the
/// last good set stays.
pub fn spawn(source: DnsDiscovery, sets: mpsc::Sender<Discovered>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(source.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match source.discover().await {
                Ok(replicas) => {
                    if sets.send((Source::Dns, replicas)).await.is_err() {
                        return;
                    }
                }
                Err(error) => {
                    tracing::warn!(name = %source.name, %error, "DNS discovery failed; keeping the last set")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn localhost_resolves_to_loopback_replicas() {
        let source = DnsDiscovery::new("localhost", 8000, Duration::from_secs(1));
        let replicas = source.discover().await.unwrap();
        assert!(!replicas.is_empty());
        for replica in replicas {
            assert!(replica.authority.ends_with(":8000"), "{replica:?}");
            assert_eq!(replica.name, replica.authority);
        }
    }

    #[tokio::test]
    async fn https_addresses_are_tls_replicas() {
        let raw = RawDns {
            name: Some("localhost".into()),
            port: Some(8443),
            interval_ms: None,
            https: Some(true),
        };
        let replicas = DnsDiscovery::from_raw(&raw).unwrap().discover().await.unwrap();
        assert!(!replicas.is_empty());
        assert!(replicas.iter().all(|replica| replica.tls), "{replicas:?}");
    }

    #[test]
    fn missing_fields_are_named() {
        let raw = RawDns { name: None, port: None, interval_ms: Some(1), https: None };
        let paths: Vec<String> =
            DnsDiscovery::from_raw(&raw).unwrap_err().into_iter().map(|i| i.0).collect();
        assert_eq!(
            paths,
            ["discovery.dns.name", "discovery.dns.port", "discovery.dns.interval_ms"]
        );
    }
}
