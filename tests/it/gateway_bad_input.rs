//! Bad input gets an OpenAI-shape error with the right status, is counted, and the gateway
//! carries on serving.

use crate::support::gateway::*;
use serde_json::Value;

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], status, "{body}");
    assert!(body["error"]["message"].is_string());
    (status, body)
}

#[tokio::test]
async fn bad_inputs_get_their_statuses_and_the_gateway_carries_on() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.body_limit_bytes = 64 * 1024;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let chat = url(&gateway, "/v1/chat/completions");

    let malformed = client.post(&chat).body("{not json").header("content-type", "application/json");
    let (status, body) = error_of(malformed.send().await.unwrap()).await;
    assert_eq!((status, body["error"]["type"].as_str()), (400, Some("BadRequestError")));

    // Too big for the length shortcut, so parsed: no `messages`.
    let padded = serde_json::json!({"model": "m", "padding": "x".repeat(10_000)});
    let (status, _) = error_of(client.post(&chat).json(&padded).send().await.unwrap()).await;
    assert_eq!(status, 400);

    // A field out of bounds is named in OpenAI's `param`: here a batch's worth of choices.
    let choices = serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "n": 1000});
    let (status, body) = error_of(client.post(&chat).json(&choices).send().await.unwrap()).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("n")), "{body}");

    let unknown_entry =
        client.post(&chat).header("x-laneway-entry", "medium").json(&chat_body(10, 2, false));
    let (status, body) = error_of(unknown_entry.send().await.unwrap()).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("medium"));

    let too_big =
        serde_json::json!({"messages": [{"role": "user", "content": "a".repeat(100_000)}]});
    let (status, _) = error_of(client.post(&chat).json(&too_big).send().await.unwrap()).await;
    assert_eq!(status, 413);

    // Without a Content-Length the limit still holds while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..100).map(|_| Ok(vec![b' '; 1024])).collect();
    let streamed = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let (status, _) = error_of(client.post(&chat).body(streamed).send().await.unwrap()).await;
    assert_eq!(status, 413);

    let get = client.get(&chat).send().await.unwrap();
    assert_eq!(get.headers()["allow"], "POST");
    let (status, _) = error_of(get).await;
    assert_eq!(status, 405);

    let good = client.post(&chat).json(&chat_body(10, 2, false)).send().await.unwrap();
    assert_eq!(good.status(), 200);

    let metrics = gateway.metrics_text();
    for (kind, count) in [
        ("bad_request", 3.0),
        ("unknown_entry", 1.0),
        ("payload_too_large", 2.0),
        ("method_not_allowed", 1.0),
    ] {
        let line = format!("laneway_request_errors_total{{entry=\"short\",kind=\"{kind}\"}}");
        assert_eq!(sample(&metrics, &line), Some(count), "{kind}");
    }
    assert_eq!(sims[0].stats().requests_total, 1, "only the good request reached the replica");
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_hung_replica_times_out_with_504_and_releases_its_request() {
    let sims = start_sims(1, 1).await;
    let mut config = config_for(&sims);
    config.reliability.timeouts.first_byte = std::time::Duration::from_millis(300);
    let gateway = start_gateway(config).await;
    sims[0].set_fault(laneway::sim::Fault::Hang);
    let response = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .json(&chat_body(10, 2, true))
        .send()
        .await
        .unwrap();
    let (status, body) = error_of(response).await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(gateway.replica_in_flight("sim-0"), 0);
    let metrics = gateway.metrics_text();
    let line = "laneway_request_errors_total{entry=\"short\",kind=\"upstream_timeout\"}";
    assert_eq!(sample(&metrics, line), Some(1.0));
    sims[0].set_fault(laneway::sim::Fault::Healthy);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_refused_connection_is_retried_on_another_replica() {
    let sims = start_sims(1, 1).await;
    // A port nobody listens on: bind one, note it, close it.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let replicas = vec![replica("dead", dead), replica("sim-0", sims[0].addr())];
    let gateway = start_gateway(loopback_config(replicas)).await;
    let client = reqwest::Client::new();
    for _ in 0..6 {
        let response = post_chat(&client, &gateway, &chat_body(10, 2, false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-laneway-replica"), "sim-0");
    }
    assert_eq!(gateway.replica_in_flight("dead"), 0);
    gateway.shutdown().await;
}
