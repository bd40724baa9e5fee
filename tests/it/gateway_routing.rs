//! Predicted-latency placement end to end: the request SLO headers are checked (400 in the
//! OpenAI error shape for bad values) and the heterogeneous example config is valid. The
//! slowed replica's share, which depends on measured latencies, is in `tests/load`.

use std::time::Duration;

use crate::support::gateway::*;
use laneway::gateway::config::{EntrySlo, PolicyKind};

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
