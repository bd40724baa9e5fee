//! Predicted-latency placement end to end: a slowed replica's share falls and comes back
//! once it heals, every placed stream reports its prediction error, and the request SLO
//! headers are checked (400 in the OpenAI error shape for bad values).

use std::time::Duration;

use crate::support::gateway::*;
use futures_util::StreamExt;
use laneway::gateway::config::{EntrySlo, PolicyKind};
use laneway::gateway::{Entry, GatewayHandle};
use laneway::sim::Fault;

const CONCURRENCY: usize = 6;

/// A predicted-latency gateway in front of `sims`, with an SLO that the tiny replicas at
/// test speed meet (TPOT well under a millisecond) and a 50x slowed one does not (10 ms).
fn predicted_config(sims: &[laneway::sim::SimHandle]) -> laneway::gateway::GatewayConfig {
    let mut config = with_policy(config_for(sims), PolicyKind::PredictedLatency);
    let slo = EntrySlo { ttft: Duration::from_millis(1000), tpot: Duration::from_millis(5) };
    config.entry_mut(Entry::Short).slo = slo;
    config
}

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

#[tokio::test]
async fn slo_headers_tighten_and_bad_values_are_refused_in_the_openai_shape() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(predicted_config(&sims)).await;
    let client = reqwest::Client::new();
    let post = |name: &'static str, value: &'static str| {
        client
            .post(url(&gateway, "/v1/chat/completions"))
            .header(name, value)
            .json(&chat_body(20, 4, false))
            .send()
    };
    for (name, value) in [("x-laneway-slo-ttft-ms", "500"), ("x-laneway-slo-tpot-ms", "99999")] {
        let response = post(name, value).await.unwrap();
        assert_eq!(response.status(), 200, "{name}: {value}");
        response.bytes().await.unwrap();
    }
    for (name, value) in [
        ("x-laneway-slo-ttft-ms", "0"),
        ("x-laneway-slo-ttft-ms", "fast"),
        ("x-laneway-slo-tpot-ms", "-1"),
        ("x-laneway-slo-tpot-ms", "2.5"),
        ("x-laneway-slo-tpot-ms", "3600001"),
    ] {
        let response = post(name, value).await.unwrap();
        assert_eq!(response.status(), 400, "{name}: {value}");
        let body: serde_json::Value = response.json().await.unwrap();
        let error = &body["error"];
        assert_eq!(error["type"], "BadRequestError", "{body}");
        assert!(error["message"].as_str().unwrap().contains(name), "{body}");
        assert_eq!(error["code"], 400, "{body}");
    }
    let metrics = gateway.metrics_text();
    let bad = "laneway_request_errors_total{entry=\"short\",kind=\"bad_request\"}";
    assert_eq!(sample(&metrics, bad), Some(5.0));
    gateway.shutdown().await;
}

#[test]
fn the_heterogeneous_fleet_example_config_is_valid() {
    let path = std::path::Path::new("config/hetero.toml");
    let config = laneway::gateway::GatewayConfig::load(path).unwrap();
    assert_eq!(config.policy, PolicyKind::PredictedLatency);
    assert_eq!(config.long.variants[0].pool.as_deref(), Some("tp8"));
    assert_eq!(config.long.slo.ttft, Duration::from_millis(2000));
    assert_eq!(config.short.slo, EntrySlo::default());
}
