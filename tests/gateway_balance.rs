//! Balancing by queue depth: under `least_queue` a slowed replica, whose requests stay in
//! flight longer, receives fewer new requests than an idle one; `round_robin` does not care.

mod gateway_support;

use std::collections::HashMap;

use futures_util::StreamExt;
use gateway_support::*;
use laneway::gateway::config::PolicyKind;
use laneway::sim::Fault;

const REQUESTS: usize = 40;
const CONCURRENCY: usize = 8;

/// Sends `REQUESTS` streamed requests, `CONCURRENCY` at a time, with sim-0 slowed 50x;
/// returns how many each replica served.
async fn served_per_replica(policy: PolicyKind) -> HashMap<String, usize> {
    let sims = start_sims(2, 1).await;
    sims[0].set_fault(Fault::Slow { factor: 50.0 });
    let gateway = start_gateway(with_policy(config_for(&sims), policy)).await;
    let client = reqwest::Client::new();
    let served: Vec<String> = futures_util::stream::iter(0..REQUESTS)
        .map(|_| {
            let request =
                client.post(url(&gateway, "/v1/chat/completions")).json(&chat_body(50, 8, true));
            async move {
                let response = request.send().await.unwrap();
                let replica = header(&response, "x-laneway-replica");
                response.bytes().await.unwrap();
                replica
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    wait_until("streams released", || {
        gateway.replica_in_flight("sim-0") + gateway.replica_in_flight("sim-1") == 0
    })
    .await;
    gateway.shutdown().await;
    let mut counts = HashMap::new();
    for replica in served {
        *counts.entry(replica).or_default() += 1;
    }
    counts
}

#[tokio::test]
async fn least_queue_sends_fewer_requests_to_a_loaded_replica() {
    let counts = served_per_replica(PolicyKind::LeastQueue).await;
    let slow = counts.get("sim-0").copied().unwrap_or(0);
    let idle = counts.get("sim-1").copied().unwrap_or(0);
    assert_eq!(slow + idle, REQUESTS);
    assert!(slow * 2 < idle, "slow replica got {slow}, idle one {idle}");
}

#[tokio::test]
async fn round_robin_splits_evenly_whatever_the_load() {
    let counts = served_per_replica(PolicyKind::RoundRobin).await;
    assert_eq!(counts.get("sim-0"), Some(&(REQUESTS / 2)));
    assert_eq!(counts.get("sim-1"), Some(&(REQUESTS / 2)));
}
