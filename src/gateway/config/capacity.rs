//! Where a replica runs and what it sustains (`nodes`, `rack`, `capacity_rps` on a
//! `[[replicas]]` entry) and how N-1 capacity is judged (`[capacity]`): the typed forms and
//! their validation.

use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;
use super::raw::RawReplica;

/// A replica's fault units and its capacity at SLO, beyond its first `node`.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Nodes it spans beyond the first (a PP2/TP8 or TP16 engine over two nodes); a failure
    /// of any of them takes it down.
    pub other_nodes: Vec<String>,
    /// The rack (or other group of nodes) that fails as one.
    pub rack: Option<String>,
    /// Requests per second it sustains while meeting its entry's SLO, when configured;
    /// otherwise it is learned from traffic.
    pub capacity_rps: Option<f64>,
}

impl PartialEq for Placement {
    fn eq(&self, other: &Self) -> bool {
        self.other_nodes == other.other_nodes
            && self.rack == other.rack
            && self.capacity_rps.map(f64::to_bits) == other.capacity_rps.map(f64::to_bits)
    }
}

impl Eq for Placement {}

/// `[capacity]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCapacity {
    pub margin_percent: Option<f64>,
    pub window_ms: Option<i64>,
    pub attainment_percent: Option<f64>,
}

/// How capacity at SLO is learned and N-1 headroom judged.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityConfig {
    /// Demand is raised by this share before it is compared with what survives a fault
    /// unit: retries, cold caches and the cut-over need more than the bare rate.
    pub margin: f64,
    /// Length of one learning window: arrivals, goodput and queue growth are counted per
    /// window, and demand is the arrival rate over the last windows.
    pub window: Duration,
    /// Share of requests that must meet the SLO for a window's rate to count as sustained.
    pub attainment: f64,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        Self { margin: 0.10, window: Duration::from_secs(30), attainment: 0.95 }
    }
}

pub(super) fn capacity(raw: &RawCapacity, issues: &mut Issues) -> CapacityConfig {
    let defaults = CapacityConfig::default();
    let mut percent = |field: &str, value: Option<f64>, default: f64, max: f64| match value {
        None => default,
        Some(v) if v.is_finite() && (0.0..=max).contains(&v) => v / 100.0,
        Some(v) => {
            issues.add(format!("capacity.{field}"), format!("{v} is out of range 0..={max}"));
            default
        }
    };
    let margin = percent("margin_percent", raw.margin_percent, defaults.margin, 1000.0);
    let attainment =
        percent("attainment_percent", raw.attainment_percent, defaults.attainment, 100.0);
    let window = Duration::from_millis(issues.positive(
        "capacity.window_ms",
        raw.window_ms,
        defaults.window.as_millis() as u64,
        3_600_000,
    ));
    CapacityConfig { margin, window, attainment }
}

/// The replica's first node (its name when none is given) and the rest of its placement.
pub(super) fn placement(
    raw: &RawReplica,
    path: &str,
    name: &str,
    issues: &mut Issues,
) -> (String, Placement) {
    let mut nodes: Vec<String> = match (&raw.node, &raw.nodes) {
        (Some(_), Some(_)) => {
            issues.add(format!("{path}.nodes"), "give `node` or `nodes`, not both");
            raw.node.iter().cloned().collect()
        }
        (Some(node), None) => vec![node.clone()],
        (None, Some(nodes)) if nodes.is_empty() => {
            issues.add(format!("{path}.nodes"), "must name at least one node");
            Vec::new()
        }
        (None, Some(nodes)) => nodes.clone(),
        (None, None) => Vec::new(),
    };
    for (index, node) in nodes.iter().enumerate() {
        if node.is_empty() {
            issues.add(format!("{path}.nodes[{index}]"), "must not be empty");
        } else if nodes[..index].contains(node) {
            issues.add(format!("{path}.nodes[{index}]"), format!("`{node}` is listed twice"));
        }
    }
    if nodes.is_empty() {
        nodes.push(name.to_string());
    }
    if raw.rack.as_deref() == Some("") {
        issues.add(format!("{path}.rack"), "must not be empty");
    }
    let capacity_rps = raw.capacity_rps.filter(|rate| {
        let valid = rate.is_finite() && *rate > 0.0;
        if !valid {
            issues.add(format!("{path}.capacity_rps"), format!("{rate} must be a rate > 0"));
        }
        valid
    });
    let node = nodes.remove(0);
    (node, Placement { other_nodes: nodes, rack: raw.rack.clone(), capacity_rps })
}

#[cfg(test)]
mod tests {
    use crate::gateway::config::GatewayConfig;

    fn paths(text: &str) -> Vec<String> {
        GatewayConfig::from_toml(text).unwrap_err().issues.into_iter().map(|i| i.path).collect()
    }

    #[test]
    fn a_replica_may_span_nodes_sit_in_a_rack_and_carry_its_capacity() {
        let config = GatewayConfig::from_toml(
            r#"
            [[replicas]]
            name = "pp2"
            url = "http://127.0.0.1:8001"
            nodes = ["gpu-a", "gpu-b"]
            rack = "r1"
            capacity_rps = 7.5

            [[replicas]]
            name = "tp8"
            url = "http://127.0.0.1:8002"
            node = "gpu-c"

            [capacity]
            margin_percent = 25
            "#,
        )
        .unwrap();
        let pp2 = &config.replicas[0];
        assert_eq!(pp2.nodes().collect::<Vec<_>>(), ["gpu-a", "gpu-b"]);
        assert_eq!(pp2.placement.rack.as_deref(), Some("r1"));
        assert_eq!(pp2.placement.capacity_rps, Some(7.5));
        assert_eq!(config.replicas[1].nodes().collect::<Vec<_>>(), ["gpu-c"]);
        assert_eq!(config.capacity.margin, 0.25);
        assert_eq!(config.capacity.attainment, 0.95);
    }

    #[test]
    fn every_bad_placement_field_is_reported_with_its_path() {
        let found = paths(
            r#"
            [[replicas]]
            name = "a"
            url = "http://127.0.0.1:8001"
            node = "n0"
            nodes = ["n0", "n1"]

            [[replicas]]
            name = "b"
            url = "http://127.0.0.1:8002"
            nodes = ["n1", "n1", ""]
            rack = ""
            capacity_rps = 0

            [capacity]
            margin_percent = -5
            attainment_percent = 101
            window_ms = 0
            "#,
        );
        assert_eq!(
            found,
            [
                "replicas[0].nodes",
                "replicas[1].nodes[1]",
                "replicas[1].nodes[2]",
                "replicas[1].rack",
                "replicas[1].capacity_rps",
                "capacity.margin_percent",
                "capacity.attainment_percent",
                "capacity.window_ms",
            ]
        );
    }
}
