//! Streams pass through unbuffered, and a replica's in-flight count returns to zero after
//! a normal end, a client disconnect and an upstream failure.

use crate::support::gateway::*;
use bytes::Bytes;
use laneway::sim::Fault;

fn token_event(text: &str) -> Bytes {
    Bytes::from(format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"))
}

#[tokio::test]
async fn each_chunk_reaches_the_client_before_the_replica_sends_the_next() {
    let mut stub = start_stub().await;
    let gateway = start_gateway(loopback_config(vec![replica("stub", stub.addr)])).await;
    let request = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .json(&chat_body(10, 5, true))
        .send();
    let (response, stream) = tokio::join!(request, stub.streams.recv());
    let stream = stream.unwrap();
    let mut response = response.unwrap();
    assert_eq!(header(&response, "x-laneway-replica"), "stub");
    let mut received = String::new();
    for token in ["alpha", "beta", "gamma"] {
        // The next chunk is sent only once the previous one arrived at the client.
        stream.send(token_event(token)).await.unwrap();
        read_until(&mut response, &mut received, token).await;
        assert_eq!(gateway.replica_in_flight("stub"), 1, "held while streaming");
    }
    stream.send(Bytes::from_static(b"data: [DONE]\n\n")).await.unwrap();
    drop(stream);
    read_until(&mut response, &mut received, "[DONE]").await;
    assert!(response.chunk().await.unwrap().is_none());
    wait_until("in-flight back to zero", || gateway.replica_in_flight("stub") == 0).await;
    let metrics = gateway.metrics_text();
    let labels = "{entry=\"short\",replica=\"stub\",status_class=\"2xx\",strategy=\"force_close\",variant=\"default\"}";
    assert_eq!(sample(&metrics, &format!("laneway_ttft_seconds_count{labels}")), Some(1.0));
    assert_eq!(sample(&metrics, &format!("laneway_itl_seconds_count{labels}")), Some(2.0));
    gateway.shutdown().await;
}

#[tokio::test]
async fn in_flight_is_released_when_the_client_disconnects_mid_stream() {
    let mut stub = start_stub().await;
    let gateway = start_gateway(loopback_config(vec![replica("stub", stub.addr)])).await;
    let client = reqwest::Client::new();
    let request =
        client.post(url(&gateway, "/v1/chat/completions")).json(&chat_body(10, 5, true)).send();
    let (response, stream) = tokio::join!(request, stub.streams.recv());
    let (mut response, stream) = (response.unwrap(), stream.unwrap());
    stream.send(token_event("first")).await.unwrap();
    read_until(&mut response, &mut String::new(), "first").await;
    assert_eq!(gateway.replica_in_flight("stub"), 1);
    drop(response);
    drop(client);
    // The gateway notices the closed connection at the latest on its next write.
    let _ = stream.send(token_event("second")).await;
    wait_until("in-flight released after disconnect", || gateway.replica_in_flight("stub") == 0)
        .await;
    // The upstream stream is dropped too: the stub's sender sees its receiver gone.
    wait_until("upstream stream dropped", || stream.is_closed()).await;
    let metrics = gateway.metrics_text();
    let disconnects = "laneway_request_errors_total{entry=\"short\",kind=\"client_disconnect\"}";
    assert_eq!(sample(&metrics, disconnects), Some(1.0));
    gateway.shutdown().await;
}

#[tokio::test]
async fn in_flight_returns_to_zero_after_normal_and_failed_streams() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    let normal = post_chat(&client, &gateway, &chat_body(20, 4, true)).await.text().await.unwrap();
    assert!(normal.ends_with("data: [DONE]\n\n"));
    wait_until("in-flight zero after a normal stream", || gateway.replica_in_flight("sim-0") == 0)
        .await;

    sims[0].set_fault(Fault::CutAfterChunks { chunks: 2 });
    let cut = post_chat(&client, &gateway, &chat_body(20, 20, true)).await.text().await.unwrap();
    // The broken stream ends the way vLLM reports errors: an error event, then [DONE].
    assert!(cut.contains("data: {\"error\":"), "{cut}");
    assert!(cut.ends_with("data: [DONE]\n\n"), "{cut}");
    wait_until("in-flight zero after an upstream reset", || {
        gateway.replica_in_flight("sim-0") == 0
    })
    .await;
    let metrics = gateway.metrics_text();
    let resets = "laneway_request_errors_total{entry=\"short\",kind=\"upstream_reset\"}";
    assert_eq!(sample(&metrics, resets), Some(1.0));

    sims[0].set_fault(Fault::Healthy);
    let response = post_chat(&client, &gateway, &chat_body(20, 4, false)).await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 4);
    assert_eq!(gateway.replica_in_flight("sim-0"), 0);
    let metrics = gateway.metrics_text();
    let tokens =
        "laneway_completion_tokens_total{entry=\"short\",replica=\"sim-0\",variant=\"default\"}";
    // 4 (stream, from usage) + the cut stream's counted events + 4 (JSON usage).
    assert!(sample(&metrics, tokens).unwrap() >= 8.0);
    gateway.shutdown().await;
}

#[tokio::test]
async fn shutdown_drains_an_open_stream_and_stops_accepting() {
    let mut stub = start_stub().await;
    let gateway = start_gateway(loopback_config(vec![replica("stub", stub.addr)])).await;
    let addr = gateway.addr();
    let request = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .json(&chat_body(10, 5, true))
        .send();
    let (response, stream) = tokio::join!(request, stub.streams.recv());
    let (mut response, stream) = (response.unwrap(), stream.unwrap());
    let shutdown = tokio::spawn(gateway.shutdown());
    // Finishing the stream lets the drain complete.
    let mut received = String::new();
    stream.send(token_event("during-drain")).await.unwrap();
    read_until(&mut response, &mut received, "during-drain").await;
    drop(stream);
    while response.chunk().await.unwrap().is_some() {}
    tokio::time::timeout(std::time::Duration::from_secs(10), shutdown).await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "still accepting");
}
