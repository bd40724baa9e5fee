//! Predicted-latency placement under a fault: a slowed replica's share falls and comes back
//! once it heals, and every placed stream reports its prediction error. Its SLO is judged
//! on measured latencies, so it runs here, alone.

use crate::support::gateway::*;
use futures_util::StreamExt;
use laneway::gateway::GatewayHandle;
use laneway::sim::Fault;

const CONCURRENCY: usize = 6;

/// Sends `count` streamed requests, `CONCURRENCY` at a time; the replica of each, in order
/// of completion.
async fn send(gateway: &GatewayHandle, count: usize) -> Vec<String> {
    let client = reqwest::Client::new();
    futures_util::stream::iter(0..count)
        .map(|_| {
            let request =
                client.post(url(gateway, "/v1/chat/completions")).json(&chat_body(50, 20, true));
            async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200);
                let replica = header(&response, "x-laneway-replica");
                response.bytes().await.unwrap();
                replica
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

fn share(served: &[String], replica: &str) -> f64 {
    served.iter().filter(|r| *r == replica).count() as f64 / served.len() as f64
}

#[tokio::test]
async fn a_slowed_replica_loses_its_share_and_wins_it_back_when_healed() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(3, 1).await;
    sims[0].set_fault(Fault::Slow { factor: 50.0 });
    let gateway = start_gateway(predicted_config(&sims)).await;
    let slowed = send(&gateway, 120).await;
    sims[0].set_fault(Fault::Healthy);
    let healing = send(&gateway, 240).await;
    let healed = &healing[120..];
    let (slow_share, healed_share) = (share(&slowed, "sim-0"), share(healed, "sim-0"));
    println!("sim-0 share: slowed {slow_share:.3}, healed {healed_share:.3}");
    // A fair share is a third.
    assert!(slow_share < 1.0 / 6.0, "slowed replica kept {slow_share:.3}");
    assert!(healed_share > slow_share, "healed {healed_share:.3} <= slowed {slow_share:.3}");
    let metrics = gateway.metrics_text();
    let errors = "laneway_predicted_ttft_error_ratio_count{replica=\"sim-1\"}";
    assert!(sample(&metrics, errors).is_some_and(|n| n > 0.0), "no prediction errors recorded");
    wait_until("streams released", || {
        sims.iter().all(|sim| gateway.replica_in_flight(sim.id()) == 0)
    })
    .await;
    gateway.shutdown().await;
}
