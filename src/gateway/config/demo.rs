//! The no-config mode: four simulated `h20-tp4` replicas (four API workers each, two per
//! node as on a TP4x4 fleet) started in-process on loopback, so that `laneway serve`
//! alone is a working demo.

use crate::gateway::config::ReplicaConfig;
use crate::sim::{self, SimConfig, SimHandle};

/// Replicas started in demo mode.
pub const DEMO_REPLICAS: usize = 4;
/// API-server processes per demo replica.
pub const DEMO_API_WORKERS: usize = 4;

/// Starts the demo replicas and returns them with their gateway config entries.
pub async fn start_replicas() -> anyhow::Result<(Vec<SimHandle>, Vec<ReplicaConfig>)> {
    let mut handles = Vec::with_capacity(DEMO_REPLICAS);
    let mut replicas = Vec::with_capacity(DEMO_REPLICAS);
    for index in 0..DEMO_REPLICAS {
        let name = format!("sim-{index}");
        let mut config = SimConfig::with_profile(name.clone(), "h20-tp4")?;
        config.api_workers = DEMO_API_WORKERS;
        let handle = sim::spawn(config).await?;
        replicas.push(ReplicaConfig {
            name,
            authority: handle.addr().to_string(),
            node: format!("node-{}", index / 2),
            tls: false,
            placement: Default::default(),
        });
        handles.push(handle);
    }
    Ok((handles, replicas))
}

/// Stops the demo replicas.
pub async fn stop_replicas(handles: Vec<SimHandle>) {
    for handle in handles {
        handle.shutdown().await;
    }
}
