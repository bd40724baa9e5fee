//! Capacity as a rate at SLO and N-1 per fault unit: each replica's sustained rate at SLO
//! (configured `capacity_rps`, or learned from its traffic by [`learn`]), demand as the
//! measured arrival rate, and what is left when each node or rack fails ([`units`]).
//!
//! A task reads every replica's counters once per `[capacity] window_ms`, updates the
//! learners and demand, and publishes a [`CapacityReport`]: the status page's what-if table
//! (`GET /admin/capacity`) and the gauges `laneway_n_minus_one_headroom_rps{unit}`,
//! `laneway_n_minus_one_worst_headroom_rps{unit}`, `laneway_demand_rps` and
//! `laneway_replica_capacity_rps{replica,source}`.

pub mod learn;
pub mod units;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus::{Gauge, GaugeVec, Opts, Registry};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::canary::Slo;
use crate::gateway::config::GatewayConfig;
use crate::gateway::pick::Replica;
use crate::gateway::state::reload::LiveState;
use learn::{CapacityLearner, WindowCounts};
use units::{ReplicaCapacity, WhatIf};

/// Demand is smoothed over windows: this share of the newest window's arrival rate.
const DEMAND_SMOOTHING: f64 = 0.5;

/// The SLO a request is judged by for capacity: `[canary.slo]`, the gateway's one SLO
/// (with none set, every complete 2xx response counts as good).
pub fn request_slo(config: &GatewayConfig) -> Slo {
    config.canary.slo
}

/// One replica's line in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaLine {
    pub name: String,
    pub nodes: Vec<String>,
    pub rack: Option<String>,
    pub capacity_rps: Option<f64>,
    /// `configured`, `learned` or `unknown`.
    pub source: &'static str,
    pub in_rotation: bool,
}

/// What the status page and the gauges show.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CapacityReport {
    /// Measured arrival rate over every replica, requests per second.
    pub demand_rps: f64,
    pub margin: f64,
    pub replicas: Vec<ReplicaLine>,
    pub what_if: Vec<WhatIf>,
    /// The unit whose loss leaves the least headroom.
    pub worst: Option<WhatIf>,
}

/// The latest report and the gauges, kept across reloads.
pub struct CapacityShared {
    pub report: ArcSwap<CapacityReport>,
    headroom: GaugeVec,
    worst: GaugeVec,
    demand: Gauge,
    capacity: GaugeVec,
}

impl CapacityShared {
    pub fn new(registry: &Registry) -> Self {
        let vec = |name: &str, help: &str, labels: &[&str]| {
            let gauge = GaugeVec::new(Opts::new(name, help), labels).expect("valid");
            registry.register(Box::new(gauge.clone())).expect("unique metric name");
            gauge
        };
        let demand =
            Gauge::new("laneway_demand_rps", "Measured arrival rate, requests/s").expect("valid");
        registry.register(Box::new(demand.clone())).expect("unique metric name");
        Self {
            report: ArcSwap::from_pointee(CapacityReport::default()),
            headroom: vec(
                "laneway_n_minus_one_headroom_rps",
                "Requests/s at SLO left if this node or rack fails, minus demand with margin",
                &["unit"],
            ),
            worst: vec(
                "laneway_n_minus_one_worst_headroom_rps",
                "The least N-1 headroom over every fault unit, labelled with that unit",
                &["unit"],
            ),
            demand,
            capacity: vec(
                "laneway_replica_capacity_rps",
                "Requests/s a replica sustains at SLO, configured or learned",
                &["replica", "source"],
            ),
        }
    }

    fn publish(&self, report: CapacityReport) {
        self.demand.set(report.demand_rps);
        self.headroom.reset();
        for what_if in &report.what_if {
            if let Some(headroom) = what_if.headroom_rps {
                self.headroom.with_label_values(&[what_if.unit.as_str()]).set(headroom);
            }
        }
        self.worst.reset();
        if let Some(worst) = &report.worst {
            let headroom = worst.headroom_rps.expect("the worst unit has a figure");
            self.worst.with_label_values(&[worst.unit.as_str()]).set(headroom);
        }
        self.capacity.reset();
        for line in &report.replicas {
            if let Some(rps) = line.capacity_rps {
                self.capacity.with_label_values(&[line.name.as_str(), line.source]).set(rps);
            }
        }
        self.report.store(Arc::new(report));
    }
}

/// A replica's learner and its counters at the last window's end.
struct Track {
    learner: CapacityLearner,
    arrivals: u64,
    finished: u64,
    good: u64,
    in_flight: u64,
}

/// The learners and demand, owned by the window task.
pub struct CapacityBook {
    tracks: HashMap<String, Track>,
    demand_rps: Option<f64>,
}

impl Default for CapacityBook {
    fn default() -> Self {
        Self::new()
    }
}

impl CapacityBook {
    pub fn new() -> Self {
        Self { tracks: HashMap::new(), demand_rps: None }
    }

    /// Closes a window of `elapsed` over `replicas` and returns the report.
    pub fn close_window(
        &mut self,
        replicas: &[Arc<Replica>],
        elapsed: Duration,
        config: &GatewayConfig,
    ) -> CapacityReport {
        let attainment = config.capacity.attainment;
        let seconds = elapsed.as_secs_f64();
        let mut arrivals_total = 0;
        let mut lines = Vec::with_capacity(replicas.len());
        let mut capacities = Vec::with_capacity(replicas.len());
        self.tracks.retain(|name, _| replicas.iter().any(|r| &r.name == name));
        for replica in replicas {
            let load = &replica.load;
            let now = [&load.arrivals, &load.finished, &load.good]
                .map(|counter| counter.load(std::sync::atomic::Ordering::Relaxed));
            let in_flight = load.in_flight();
            let track = self.tracks.entry(replica.name.clone()).or_insert_with(|| Track {
                learner: CapacityLearner::new(attainment),
                arrivals: now[0],
                finished: now[1],
                good: now[2],
                in_flight,
            });
            // A replica rebuilt by a reload starts its counters again.
            let since = |now: u64, then: u64| if now >= then { now - then } else { now };
            let window = WindowCounts {
                seconds,
                arrivals: since(now[0], track.arrivals),
                finished: since(now[1], track.finished),
                good: since(now[2], track.good),
                queue_start: track.in_flight,
                queue_end: in_flight,
            };
            track.learner.observe(&window);
            (track.arrivals, track.finished, track.good, track.in_flight) =
                (now[0], now[1], now[2], in_flight);
            arrivals_total += window.arrivals;
            let (capacity_rps, source) = match replica.placement.capacity_rps {
                Some(rps) => (Some(rps), "configured"),
                None => match track.learner.estimate() {
                    Some(rps) => (Some(rps), "learned"),
                    None => (None, "unknown"),
                },
            };
            let nodes: Vec<String> = replica.nodes().map(str::to_string).collect();
            let in_rotation = replica.accepts_new_requests();
            capacities.push(ReplicaCapacity {
                name: replica.name.clone(),
                nodes: nodes.clone(),
                rack: replica.placement.rack.clone(),
                capacity_rps,
                out_of_rotation: !in_rotation,
            });
            lines.push(ReplicaLine {
                name: replica.name.clone(),
                nodes,
                rack: replica.placement.rack.clone(),
                capacity_rps,
                source,
                in_rotation,
            });
        }
        if seconds > 0.0 {
            let rate = arrivals_total as f64 / seconds;
            self.demand_rps = Some(match self.demand_rps {
                Some(previous) => previous + DEMAND_SMOOTHING * (rate - previous),
                None => rate,
            });
        }
        let demand_rps = self.demand_rps.unwrap_or(0.0);
        let margin = config.capacity.margin;
        let what_if = units::what_if(&capacities, demand_rps, margin);
        let worst = units::worst(&what_if).cloned();
        CapacityReport { demand_rps, margin, replicas: lines, what_if, worst }
    }
}

/// Closes a window every `[capacity] window_ms` until `stop` turns true; the first report
/// (configured capacities, no demand yet) is published at once.
pub fn spawn(live: Arc<LiveState>, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut book = CapacityBook::new();
        let mut last = Instant::now();
        loop {
            let state = live.load_full();
            let now = Instant::now();
            let report = book.close_window(
                &state.picker.snapshot(),
                now.duration_since(last),
                &state.config,
            );
            last = now;
            state.shared.capacity.publish(report);
            let window = state.config.capacity.window;
            drop(state);
            tokio::select! {
                _ = tokio::time::sleep(window) => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
    })
}
