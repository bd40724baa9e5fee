//! Replicas and a pick context for the policies' unit tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::policy::PickContext;
use super::replica::Replica;
use crate::gateway::config::ReplicaConfig;

/// `count` replicas named `r0`, `r1`, ... on one node, at an address nothing listens on.
pub fn replicas(count: usize) -> Vec<Arc<Replica>> {
    (0..count)
        .map(|i| {
            Arc::new(Replica::new(&ReplicaConfig {
                name: format!("r{i}"),
                authority: "127.0.0.1:1".into(),
                node: "n".into(),
                tls: false,
                placement: Default::default(),
            }))
        })
        .collect()
}

/// A context at this instant, nothing excluded, reports fresh for a second.
pub fn context() -> PickContext {
    let epoch = Instant::now();
    PickContext { epoch, now: epoch, fresh_for: Duration::from_secs(1), exclude: None }
}
