//! Fault units and N-1 at SLO (field notes, section 4): a unit is a node or a rack, and
//! losing it takes every replica on it and every replica that spans it. For each unit, what
//! the remaining replicas sustain at SLO is compared with demand raised by the margin:
//! `headroom = sum of surviving capacities - demand * (1 + margin)`. Even a positive figure
//! is only a necessary condition.

use serde::Serialize;

/// What the N-1 judgement needs to know about one replica.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaCapacity {
    pub name: String,
    /// Every node it runs on.
    pub nodes: Vec<String>,
    pub rack: Option<String>,
    /// Requests per second at SLO; `None` while unknown (not configured, not yet learned).
    pub capacity_rps: Option<f64>,
    /// Out of rotation (drained or ejected) already: it counts for nothing.
    pub out_of_rotation: bool,
}

/// A node or a rack.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FaultUnit {
    pub kind: UnitKind,
    pub name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitKind {
    Node,
    Rack,
}

impl FaultUnit {
    /// The metric label: `node/<name>` or `rack/<name>`.
    pub fn label(&self) -> String {
        let kind = match self.kind {
            UnitKind::Node => "node",
            UnitKind::Rack => "rack",
        };
        format!("{kind}/{}", self.name)
    }

    /// Whether losing this unit takes `replica` down.
    pub fn takes_down(&self, replica: &ReplicaCapacity) -> bool {
        match self.kind {
            UnitKind::Node => replica.nodes.contains(&self.name),
            UnitKind::Rack => replica.rack.as_deref() == Some(self.name.as_str()),
        }
    }
}

/// What is left if one unit fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    pub unit: String,
    /// The replicas it takes down.
    pub lost: Vec<String>,
    /// The replicas left in rotation.
    pub surviving: Vec<String>,
    /// What they sustain at SLO; `None` when one of them has no known capacity.
    pub surviving_rps: Option<f64>,
    /// `surviving_rps - demand * (1 + margin)`; negative: this failure breaks the SLO.
    pub headroom_rps: Option<f64>,
}

/// Every node and rack the replicas name, in a stable order.
pub fn fault_units(replicas: &[ReplicaCapacity]) -> Vec<FaultUnit> {
    let mut units: Vec<FaultUnit> = replicas
        .iter()
        .flat_map(|replica| {
            let nodes = replica
                .nodes
                .iter()
                .map(|name| FaultUnit { kind: UnitKind::Node, name: name.clone() });
            let rack = replica
                .rack
                .iter()
                .map(|name| FaultUnit { kind: UnitKind::Rack, name: name.clone() });
            nodes.chain(rack).collect::<Vec<_>>()
        })
        .collect();
    units.sort();
    units.dedup();
    units
}

/// N-1 per fault unit, given the measured demand (requests per second) and the margin.
pub fn what_if(replicas: &[ReplicaCapacity], demand_rps: f64, margin: f64) -> Vec<WhatIf> {
    let required = demand_rps * (1.0 + margin);
    fault_units(replicas)
        .into_iter()
        .map(|unit| {
            let (lost, kept): (Vec<&ReplicaCapacity>, Vec<&ReplicaCapacity>) =
                replicas.iter().partition(|replica| unit.takes_down(replica));
            let surviving: Vec<&ReplicaCapacity> =
                kept.into_iter().filter(|replica| !replica.out_of_rotation).collect();
            let surviving_rps =
                surviving.iter().map(|replica| replica.capacity_rps).sum::<Option<f64>>();
            WhatIf {
                unit: unit.label(),
                lost: lost.iter().map(|replica| replica.name.clone()).collect(),
                surviving: surviving.iter().map(|replica| replica.name.clone()).collect(),
                surviving_rps,
                headroom_rps: surviving_rps.map(|rps| rps - required),
            }
        })
        .collect()
}

/// The unit whose loss leaves the least headroom (among those with a known figure).
pub fn worst(what_ifs: &[WhatIf]) -> Option<&WhatIf> {
    what_ifs
        .iter()
        .filter(|what_if| what_if.headroom_rps.is_some())
        .min_by(|a, b| a.headroom_rps.partial_cmp(&b.headroom_rps).expect("finite"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(
        name: &str,
        nodes: &[&str],
        rack: Option<&str>,
        rps: Option<f64>,
    ) -> ReplicaCapacity {
        ReplicaCapacity {
            name: name.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            rack: rack.map(str::to_string),
            capacity_rps: rps,
            out_of_rotation: false,
        }
    }

    fn headroom<'a>(what_ifs: &'a [WhatIf], unit: &str) -> &'a WhatIf {
        what_ifs.iter().find(|w| w.unit == unit).unwrap()
    }

    #[test]
    fn a_node_failure_takes_the_replicas_on_it_and_those_spanning_it() {
        // TP8x2 on nodes a and b, and a PP2/TP8 engine spanning b and c.
        let replicas = [
            replica("tp8-a", &["a"], Some("r1"), Some(7.0)),
            replica("tp8-b", &["b"], Some("r1"), Some(7.0)),
            replica("pp2", &["b", "c"], Some("r2"), Some(7.0)),
        ];
        let what_ifs = what_if(&replicas, 0.0, 0.0);
        let units: Vec<&str> = what_ifs.iter().map(|w| w.unit.as_str()).collect();
        assert_eq!(units, ["node/a", "node/b", "node/c", "rack/r1", "rack/r2"]);
        assert_eq!(headroom(&what_ifs, "node/a").lost, ["tp8-a"]);
        assert_eq!(headroom(&what_ifs, "node/b").lost, ["tp8-b", "pp2"]);
        assert_eq!(headroom(&what_ifs, "node/b").surviving, ["tp8-a"]);
        assert_eq!(headroom(&what_ifs, "node/c").lost, ["pp2"]);
        assert_eq!(headroom(&what_ifs, "rack/r1").lost, ["tp8-a", "tp8-b"]);
        assert_eq!(worst(&what_ifs).unwrap().surviving_rps, Some(7.0));
    }

    #[test]
    fn the_write_ups_example_two_replicas_are_short_three_are_enough() {
        // Replicas of 7 req/s at SLO, demand 12 req/s: (R - 1) x 7 >= 12 needs R = 3.
        let two =
            [replica("r0", &["n0"], None, Some(7.0)), replica("r1", &["n1"], None, Some(7.0))];
        let what_ifs = what_if(&two, 12.0, 0.0);
        assert_eq!(what_ifs.len(), 2);
        assert!(what_ifs.iter().all(|w| w.headroom_rps == Some(-5.0)), "{what_ifs:?}");
        let mut three = two.to_vec();
        three.push(replica("r2", &["n2"], None, Some(7.0)));
        let what_ifs = what_if(&three, 12.0, 0.0);
        assert!(what_ifs.iter().all(|w| w.headroom_rps == Some(2.0)), "{what_ifs:?}");
        // A 10% margin for retries and cold caches: 14 - 13.2.
        let worst_with_margin = worst(&what_if(&three, 12.0, 0.10)).unwrap().headroom_rps.unwrap();
        assert!((worst_with_margin - 0.8).abs() < 1e-9, "{worst_with_margin}");
        // Two of the three on one node: that node's loss leaves one replica.
        three[1].nodes = vec!["n0".into()];
        assert_eq!(worst(&what_if(&three, 12.0, 0.0)).unwrap().headroom_rps, Some(-5.0));
    }

    #[test]
    fn unknown_capacities_and_replicas_out_of_rotation() {
        let mut replicas = [
            replica("r0", &["n0"], None, Some(7.0)),
            replica("r1", &["n1"], None, None),
            replica("r2", &["n2"], None, Some(7.0)),
        ];
        let what_ifs = what_if(&replicas, 5.0, 0.0);
        assert_eq!(headroom(&what_ifs, "node/n1").headroom_rps, Some(9.0));
        assert_eq!(headroom(&what_ifs, "node/n0").headroom_rps, None);
        replicas[1].capacity_rps = Some(7.0);
        replicas[2].out_of_rotation = true;
        let what_ifs = what_if(&replicas, 5.0, 0.0);
        assert_eq!(headroom(&what_ifs, "node/n0").headroom_rps, Some(2.0));
        assert_eq!(headroom(&what_ifs, "node/n0").surviving, ["r1"]);
    }
}
