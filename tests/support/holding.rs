//! A scripted replica that answers (sends a stream's response headers) only when the test
//! says so: the answer gate and hedged sends are tested against it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use tokio::sync::{mpsc, oneshot};

use laneway::gateway::GatewayHandle;

use super::gateway::{STUB_METRICS, chat_body, url};

/// A replica that answers (sends the response headers) only when the test says so: each
/// request that arrives hands the test its go-ahead.
pub async fn start_holding_stub() -> (SocketAddr, mpsc::UnboundedReceiver<oneshot::Sender<()>>) {
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let chat = move || {
        let arrived = arrived.clone();
        async move {
            let (answer, go) = oneshot::channel();
            arrived.send(answer).unwrap();
            let _ = go.await;
            let events = futures_util::stream::iter([Ok::<_, Infallible>(
                bytes::Bytes::from_static(b"data: [DONE]\n\n"),
            )]);
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(events))
                .unwrap()
        }
    };
    let app = Router::new()
        .route("/metrics", get(|| async { STUB_METRICS }))
        .route("/v1/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, arrivals)
}

pub async fn next_arrival(
    arrivals: &mut mpsc::UnboundedReceiver<oneshot::Sender<()>>,
) -> oneshot::Sender<()> {
    tokio::time::timeout(Duration::from_secs(10), arrivals.recv())
        .await
        .expect("a request arrives at the replica")
        .expect("the stub runs")
}

/// A small chat request through `gateway`, streamed or not, on a task of its own: its
/// status once the whole body was read.
pub fn send_chat(gateway: &Arc<GatewayHandle>, stream: bool) -> tokio::task::JoinHandle<u16> {
    send_chat_with(gateway, stream, 10, &[])
}

/// As [`send_chat`], with a prompt of about `prompt_tokens` and `headers` added.
pub fn send_chat_with(
    gateway: &Arc<GatewayHandle>,
    stream: bool,
    prompt_tokens: u64,
    headers: &[(&'static str, &'static str)],
) -> tokio::task::JoinHandle<u16> {
    let gateway = gateway.clone();
    let headers = headers.to_vec();
    tokio::spawn(async move {
        let mut request = reqwest::Client::new()
            .post(url(&gateway, "/v1/chat/completions"))
            .json(&chat_body(prompt_tokens, 2, stream));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        response.bytes().await.unwrap();
        status
    })
}
