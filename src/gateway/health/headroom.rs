//! N-1 headroom in in-flight slots (`laneway_n_minus_one_headroom`, kept for its existing
//! dashboards): the slots left if the largest fault domain (the `node` with the most
//! replicas) fails, minus the current demand. A replica's slots are its in-flight limit
//! (`admission.max_in_flight_per_replica`); demand is the gateway's requests in flight.
//! Slots are not a rate: N-1 at SLO, per node and rack and counting replicas that span
//! nodes, is [`crate::gateway::capacity`] (`laneway_n_minus_one_headroom_rps`), which the
//! alert rule uses.

use std::collections::HashMap;
use std::sync::Arc;

use crate::gateway::pick::Replica;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    /// Replicas on the node that holds the most.
    pub largest_fault_domain_replicas: usize,
    /// Capacity outside that node, minus requests in flight.
    pub n_minus_one: i64,
}

pub fn n_minus_one(replicas: &[Arc<Replica>], capacity_per_replica: u64) -> Headroom {
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for replica in replicas {
        *per_node.entry(replica.node.as_str()).or_default() += 1;
    }
    let largest = per_node.values().copied().max().unwrap_or(0);
    let demand: u64 = replicas.iter().map(|r| r.load.in_flight()).sum();
    let left = ((replicas.len() - largest) as u64).saturating_mul(capacity_per_replica);
    let left = i64::try_from(left).unwrap_or(i64::MAX);
    Headroom {
        largest_fault_domain_replicas: largest,
        n_minus_one: left.saturating_sub(demand as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::ReplicaConfig;
    use std::sync::atomic::Ordering;

    #[test]
    fn the_largest_node_is_taken_out_and_demand_subtracted() {
        let nodes = ["a", "a", "b", "c"];
        let replicas: Vec<Arc<Replica>> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                Arc::new(Replica::new(&ReplicaConfig {
                    name: format!("r{i}"),
                    authority: "127.0.0.1:1".into(),
                    node: (*node).into(),
                    tls: false,
                    placement: Default::default(),
                }))
            })
            .collect();
        replicas[3].load.in_flight.store(7, Ordering::Relaxed);
        let headroom = n_minus_one(&replicas, 10);
        assert_eq!(headroom, Headroom { largest_fault_domain_replicas: 2, n_minus_one: 13 });
    }
}
