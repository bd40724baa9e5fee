//! Replica discovery beyond the static list: a DNS name resolved periodically ([`dns`],
//! e.g. a headless Service) and Kubernetes EndpointSlices by label selector
//! ([`kubernetes`]). Every source reports whole replica sets; [`apply_replica_set`] is the
//! one place a new set reaches the picker, keeping the load counters of replicas that stay.
//! A source that fails keeps its last good set: a DNS hiccup must not empty the fleet.

pub mod dns;
pub mod kubernetes;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::gateway::config::ReplicaConfig;
use crate::gateway::pick::{Picker, Replica, scrape};
use crate::gateway::upstream_tls::UpstreamTls;
pub use dns::{DnsDiscovery, Resolver, SystemResolver};
pub use kubernetes::KubernetesDiscovery;

/// `[discovery]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    pub dns: Option<dns::RawDns>,
    pub kubernetes: Option<kubernetes::RawKubernetes>,
}

/// The validated discovery sources; both may be on, on top of the static replicas.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiscoveryConfig {
    pub dns: Option<DnsDiscovery>,
    pub kubernetes: Option<KubernetesDiscovery>,
}

impl DiscoveryConfig {
    /// Validates `[discovery]`; every bad field as (path, message).
    pub fn from_raw(raw: &RawDiscovery) -> Result<Self, Vec<(String, String)>> {
        let mut issues = Vec::new();
        let dns = raw.dns.as_ref().and_then(|raw| {
            DnsDiscovery::from_raw(raw).map_err(|mut found| issues.append(&mut found)).ok()
        });
        let kubernetes = raw.kubernetes.as_ref().and_then(|raw| {
            KubernetesDiscovery::from_raw(raw).map_err(|mut found| issues.append(&mut found)).ok()
        });
        if issues.is_empty() { Ok(Self { dns, kubernetes }) } else { Err(issues) }
    }

    pub fn is_active(&self) -> bool {
        self.dns.is_some() || self.kubernetes.is_some()
    }
}

/// Which source a set came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Dns,
    Kubernetes,
}

/// A source's latest complete view.
pub type Discovered = (Source, Vec<ReplicaConfig>);

/// Replaces the picker's set with `desired`: a replica with the same name and address
/// keeps its `Arc` (in-flight counts, failures, scraped figures), others are new; requests
/// in flight on a removed replica finish on the replica they hold. Returns the new set.
pub fn apply_replica_set(picker: &Picker, desired: &[ReplicaConfig]) -> Vec<Arc<Replica>> {
    let current = picker.snapshot();
    let next: Vec<Arc<Replica>> = desired
        .iter()
        .map(|wanted| {
            current
                .iter()
                .find(|have| have.is(wanted))
                .cloned()
                .unwrap_or_else(|| Arc::new(Replica::new(wanted)))
        })
        .collect();
    picker.replace(next.clone());
    next
}

/// Runs the configured sources and keeps the picker (and one scraper per replica) in step
/// with `static_replicas` plus whatever the sources report. Abort the handle to stop all.
pub fn spawn(
    picker: Arc<Picker>,
    static_replicas: Vec<ReplicaConfig>,
    config: &DiscoveryConfig,
    scrape_interval: Duration,
    tls: Arc<UpstreamTls>,
) -> JoinHandle<()> {
    let (sets, mut incoming) = mpsc::channel::<Discovered>(8);
    let mut sources = Vec::new();
    if let Some(dns) = &config.dns {
        sources.push(dns::spawn(dns.clone(), sets.clone()));
    }
    if let Some(kubernetes) = &config.kubernetes {
        sources.push(kubernetes::spawn(kubernetes.clone(), sets.clone()));
    }
    drop(sets);
    tokio::spawn(async move {
        // Dropped (and so aborted) with this task.
        let _sources = AbortOnDrop(sources);
        let mut scrapers = Scrapers { tls, by_replica: HashMap::new() };
        scrapers.sync(&picker.snapshot(), picker.epoch, scrape_interval);
        let mut latest: HashMap<Source, Vec<ReplicaConfig>> = HashMap::new();
        while let Some((source, replicas)) = incoming.recv().await {
            if latest.get(&source) == Some(&replicas) {
                continue;
            }
            latest.insert(source, replicas);
            let desired = merge(&static_replicas, &latest);
            let applied = apply_replica_set(&picker, &desired);
            scrapers.sync(&applied, picker.epoch, scrape_interval);
            let names: Vec<&str> = applied.iter().map(|r| r.name.as_str()).collect();
            tracing::info!(?source, replicas = ?names, "replica set changed");
        }
    })
}

/// Static replicas first, then each source's in a fixed order; a name seen twice keeps
/// its first entry.
fn merge(
    static_replicas: &[ReplicaConfig],
    latest: &HashMap<Source, Vec<ReplicaConfig>>,
) -> Vec<ReplicaConfig> {
    let mut merged: Vec<ReplicaConfig> = static_replicas.to_vec();
    for source in [Source::Dns, Source::Kubernetes] {
        for replica in latest.get(&source).into_iter().flatten() {
            if !merged.iter().any(|have| have.name == replica.name) {
                merged.push(replica.clone());
            }
        }
    }
    merged
}

/// One scraper per replica in the set, keyed by the replica's identity.
struct Scrapers {
    tls: Arc<UpstreamTls>,
    by_replica: HashMap<(String, String), JoinHandle<()>>,
}

impl Scrapers {
    fn sync(&mut self, replicas: &[Arc<Replica>], epoch: std::time::Instant, interval: Duration) {
        let key = |replica: &Replica| (replica.name.clone(), replica.authority.clone());
        self.by_replica.retain(|wanted, handle| {
            let keep = replicas.iter().any(|replica| key(replica) == *wanted);
            if !keep {
                handle.abort();
            }
            keep
        });
        let new: Vec<Arc<Replica>> = replicas
            .iter()
            .filter(|replica| !self.by_replica.contains_key(&key(replica)))
            .cloned()
            .collect();
        let handles = scrape::spawn_scrapers(&new, epoch, interval, &self.tls);
        for (replica, handle) in new.iter().zip(handles) {
            self.by_replica.insert(key(replica), handle);
        }
    }
}

impl Drop for Scrapers {
    fn drop(&mut self) {
        for handle in self.by_replica.values() {
            handle.abort();
        }
    }
}

struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::GatewayConfig;

    fn replica(name: &str, port: u16) -> ReplicaConfig {
        ReplicaConfig {
            name: name.into(),
            authority: format!("127.0.0.1:{port}"),
            node: "n".into(),
            tls: false,
        }
    }

    #[test]
    fn replicas_that_stay_keep_their_load_counters() {
        let picker =
            Picker::new(&GatewayConfig::with_replicas(vec![replica("a", 1), replica("b", 2)]));
        let a = picker.by_name("a").unwrap();
        a.load.record_failure();
        a.set_draining(true);
        let applied = apply_replica_set(&picker, &[replica("a", 1), replica("c", 3)]);
        assert!(Arc::ptr_eq(&applied[0], &a));
        assert_eq!(picker.by_name("a").unwrap().load.failures(), 1);
        assert!(picker.by_name("a").unwrap().is_draining());
        assert!(picker.by_name("b").is_none());
        assert_eq!(picker.by_name("c").unwrap().load.failures(), 0);
        // Same name, new address: a new replica.
        apply_replica_set(&picker, &[replica("a", 9)]);
        assert_eq!(picker.by_name("a").unwrap().load.failures(), 0);
    }

    #[test]
    fn static_replicas_win_name_clashes() {
        let mut latest = HashMap::new();
        latest.insert(Source::Kubernetes, vec![replica("k", 5), replica("s", 6)]);
        latest.insert(Source::Dns, vec![replica("d", 4)]);
        let merged = merge(&[replica("s", 1)], &latest);
        let names: Vec<(&str, &str)> =
            merged.iter().map(|r| (r.name.as_str(), r.authority.as_str())).collect();
        assert_eq!(names, [("s", "127.0.0.1:1"), ("d", "127.0.0.1:4"), ("k", "127.0.0.1:5")]);
    }
}
