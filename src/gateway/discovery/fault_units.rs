//! Fault units and capacity from an EndpointSlice's metadata, for replicas discovered in
//! Kubernetes. An endpoint's `nodeName` is its node; a replica that spans nodes (a
//! PP2/TP8 or TP16 engine whose workers run on other nodes: only its leader is an
//! endpoint) is listed in the slice's annotation `laneway.io/nodes`, a JSON object from pod
//! name to every node it runs on (label values cannot hold lists). Labels the Service
//! passes on to its slices apply to each of its replicas: `laneway.io/rack` and
//! `laneway.io/capacity-rps` (requests per second at SLO).

use std::collections::HashMap;

use serde::Deserialize;

use crate::gateway::config::Placement;

pub const NODES_ANNOTATION: &str = "laneway.io/nodes";
pub const RACK_LABEL: &str = "laneway.io/rack";
pub const CAPACITY_LABEL: &str = "laneway.io/capacity-rps";

/// The part of an EndpointSlice's `metadata` read here.
#[derive(Debug, Default, Deserialize)]
pub struct SliceMetadata {
    #[serde(default)]
    pub labels: HashMap<String, String>,
    #[serde(default)]
    pub annotations: HashMap<String, String>,
}

impl SliceMetadata {
    /// The pod's first node and the rest of its placement; `node_name` is the endpoint's.
    /// A malformed annotation or label is ignored (logged): the replica keeps its node.
    pub fn placement(&self, pod: Option<&str>, node_name: String) -> (String, Placement) {
        let spans = self.annotations.get(NODES_ANNOTATION).and_then(|text| {
            serde_json::from_str::<HashMap<String, Vec<String>>>(text)
                .inspect_err(|error| tracing::warn!(%error, "ignoring {NODES_ANNOTATION}"))
                .ok()
        });
        let mut nodes = pod
            .and_then(|pod| spans.and_then(|mut spans| spans.remove(pod)))
            .filter(|nodes| !nodes.is_empty() && nodes.iter().all(|node| !node.is_empty()))
            .unwrap_or_else(|| vec![node_name]);
        let capacity_rps = self.labels.get(CAPACITY_LABEL).and_then(|text| {
            let rate = text.parse::<f64>().ok().filter(|rate| rate.is_finite() && *rate > 0.0);
            if rate.is_none() {
                tracing::warn!(value = %text, "ignoring {CAPACITY_LABEL}: not a rate > 0");
            }
            rate
        });
        let rack = self.labels.get(RACK_LABEL).filter(|rack| !rack.is_empty()).cloned();
        let node = nodes.remove(0);
        nodes.retain(|other| *other != node);
        (node, Placement { other_nodes: nodes, rack, capacity_rps })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spanning_nodes_rack_and_capacity_come_from_the_slice() {
        let metadata: SliceMetadata = serde_json::from_str(
            r#"{"labels": {"laneway.io/rack": "r7", "laneway.io/capacity-rps": "7"},
                "annotations": {"laneway.io/nodes": "{\"pp-0\": [\"gpu-a\", \"gpu-b\"]}"}}"#,
        )
        .unwrap();
        let (node, placement) = metadata.placement(Some("pp-0"), "gpu-a".into());
        assert_eq!(node, "gpu-a");
        assert_eq!(placement.other_nodes, ["gpu-b"]);
        assert_eq!(placement.rack.as_deref(), Some("r7"));
        assert_eq!(placement.capacity_rps, Some(7.0));
        // A pod the annotation does not name keeps its endpoint's node.
        let (node, placement) = metadata.placement(Some("tp8-0"), "gpu-c".into());
        assert_eq!((node.as_str(), placement.other_nodes.len()), ("gpu-c", 0));
        // Bad values are ignored.
        let bad: SliceMetadata = serde_json::from_str(
            r#"{"labels": {"laneway.io/capacity-rps": "-1"},
                "annotations": {"laneway.io/nodes": "not json"}}"#,
        )
        .unwrap();
        let (node, placement) = bad.placement(Some("pp-0"), "gpu-a".into());
        assert_eq!((node.as_str(), placement.capacity_rps), ("gpu-a", None));
    }
}
