//! Replica discovery beyond the static list: a DNS name resolved periodically ([`dns`],
//! e.g. a headless Service) and Kubernetes EndpointSlices by label selector
//! ([`kubernetes`], with fault units from slice metadata: [`fault_units`]), run from their
//! validated `[discovery]` config. Every source reports whole lists and submits them to
//! the one owner of the replica set ([`crate::gateway::pick::ReplicaSet`]), which merges them with the static
//! list and keeps the load counters of replicas that stay. A source that fails keeps its
//! last good list: a DNS hiccup must not empty the fleet.

pub mod dns;
pub mod fault_units;
pub mod kubernetes;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::gateway::config::{DiscoveryConfig, ReplicaConfig};
use crate::gateway::pick::{ReplicaSet, Source};

/// A source's latest complete view.
pub type Discovered = (Source, Vec<ReplicaConfig>);

/// Runs the configured sources; each complete view they report is submitted to `set`
/// under its source. A source that fails keeps its last good list there. Abort the handle
/// to stop every source.
pub fn spawn(set: Arc<ReplicaSet>, config: &DiscoveryConfig) -> JoinHandle<()> {
    let (lists, mut incoming) = mpsc::channel::<Discovered>(8);
    let mut sources = Vec::new();
    if let Some(dns) = &config.dns {
        sources.push(dns::spawn(dns.clone(), lists.clone()));
    }
    if let Some(kubernetes) = &config.kubernetes {
        sources.push(kubernetes::spawn(kubernetes.clone(), lists.clone()));
    }
    drop(lists);
    tokio::spawn(async move {
        // Dropped (and so aborted) with this task.
        let _sources = AbortOnDrop(sources);
        while let Some((source, replicas)) = incoming.recv().await {
            let before = set.snapshot();
            let applied = set.submit(source, replicas).await;
            if !Arc::ptr_eq(&before, &applied) {
                let names: Vec<&str> = applied.iter().map(|r| r.name.as_str()).collect();
                tracing::info!(?source, replicas = ?names, "replica set changed");
            }
        }
    })
}

struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for handle in &self.0 {
            handle.abort();
        }
    }
}
