//! DNS discovery: a name (typically a Kubernetes headless Service, whose A records are the
//! ready pods) resolved every interval; each address is a replica on the configured port,
//! named `ip:port`. The resolver is a trait so tests can script the answers.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Discovered, Source};
use crate::gateway::config::{DnsDiscovery, ReplicaConfig};

// The source is config (validated once); resolving it is this module's.
impl DnsDiscovery {
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
    use crate::gateway::config::Issues;
    use crate::gateway::config::discovery::RawDns;
    use std::time::Duration;

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
        let replicas =
            DnsDiscovery::from_raw(&raw, &mut Issues::default()).unwrap().discover().await.unwrap();
        assert!(!replicas.is_empty());
        assert!(replicas.iter().all(|replica| replica.tls), "{replicas:?}");
    }

    #[test]
    fn missing_fields_are_named() {
        let raw = RawDns { name: None, port: None, interval_ms: Some(1), https: None };
        let mut issues = Issues::default();
        assert!(DnsDiscovery::from_raw(&raw, &mut issues).is_none());
        let paths = issues.paths();
        assert_eq!(
            paths,
            ["discovery.dns.name", "discovery.dns.port", "discovery.dns.interval_ms"]
        );
    }
}
