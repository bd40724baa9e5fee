//! Balancing by queue depth: under `least_queue` a slowed replica, whose requests stay in
//! flight longer, receives fewer new requests than an idle one; `round_robin` does not care.

use std::collections::HashMap;

use crate::support::gateway::*;
use futures_util::StreamExt;
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
    println!("{}: {counts:?}", policy.as_str());
    counts
}

#[tokio::test]
async fn least_queue_sends_fewer_requests_to_a_loaded_replica() {
    let counts = served_per_replica(PolicyKind::LeastQueue).await;
    let slow = counts.get("sim-0").copied().unwrap_or(0);
    let idle = counts.get("sim-1").copied().unwrap_or(0);
    assert_eq!(slow + idle, REQUESTS);
    assert!(slow < idle, "slow replica got {slow}, idle one {idle}");
}

#[tokio::test]
async fn least_queue_sees_load_from_other_clients_through_scraped_metrics() {
    let sims = start_sims(2, 1).await;
    // Another client keeps 16 long streams running on sim-0, behind the gateway's back.
    sims[0].set_fault(Fault::Slow { factor: 100.0 });
    let direct = reqwest::Client::new();
    let mut held = Vec::new();
    for _ in 0..16 {
        let response = direct
            .post(format!("http://{}/v1/chat/completions", sims[0].addr()))
            .json(&chat_body(20, 2000, true))
            .send()
            .await
            .unwrap();
        held.push(response);
    }
    let gateway = start_gateway(with_policy(config_for(&sims), PolicyKind::LeastQueue)).await;
    let running = "laneway_replica_reported_running{replica=\"sim-0\"}";
    wait_until("the scraper sees the load", || {
        sample(&gateway.metrics_text(), running).is_some_and(|n| n >= 16.0)
    })
    .await;
    let client = reqwest::Client::new();
    for _ in 0..20 {
        let response = post_chat(&client, &gateway, &chat_body(20, 2, false)).await;
        assert_eq!(header(&response, "x-laneway-replica"), "sim-1");
        response.bytes().await.unwrap();
    }
    drop(held);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_replica_failing_its_scrapes_is_avoided_until_it_recovers() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    sims[0].set_fault(Fault::Unavailable);
    wait_until("a failed scrape", || gateway.replica_failures("sim-0") > 0).await;
    for _ in 0..10 {
        let response = post_chat(&client, &gateway, &chat_body(20, 2, false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-laneway-replica"), "sim-1");
    }
    sims[0].set_fault(Fault::Healthy);
    wait_until("a good scrape", || gateway.replica_failures("sim-0") == 0).await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn round_robin_splits_evenly_whatever_the_load() {
    let counts = served_per_replica(PolicyKind::RoundRobin).await;
    assert_eq!(counts.get("sim-0"), Some(&(REQUESTS / 2)));
    assert_eq!(counts.get("sim-1"), Some(&(REQUESTS / 2)));
}
