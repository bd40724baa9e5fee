//! Scripted replicas that answer (send a stream's response headers), or fail, only when the
//! test says so: the answer gate and hedged sends are tested against them.

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

pub async fn next_arrival<T>(
    arrivals: &mut mpsc::UnboundedReceiver<oneshot::Sender<T>>,
) -> oneshot::Sender<T> {
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

/// What a [`start_scripted_stub`] replica does with a request the test has seen.
#[derive(Debug)]
pub enum Reply {
    /// A streamed answer: the response headers and `[DONE]`.
    Answer,
    /// The connection closed before any response byte (the replica failed the request);
    /// the sender is told once the gateway closed its side too, i.e. it has seen the failure.
    Close(oneshot::Sender<()>),
}

/// Fails a request at a scripted replica, and returns once the gateway has seen it fail.
pub async fn fail(request: oneshot::Sender<Reply>) {
    let (closed, gateway_closed) = oneshot::channel();
    request.send(Reply::Close(closed)).unwrap();
    tokio::time::timeout(Duration::from_secs(10), gateway_closed)
        .await
        .expect("the gateway closes the failed connection")
        .expect("the stub runs");
}

/// A replica on raw HTTP/1.1 that answers or fails each inference request as the test says:
/// each one that arrives hands the test its [`Reply`] sender (a dropped sender closes). A
/// `GET /metrics` gets [`STUB_METRICS`], any other `GET` 404, without asking.
pub async fn start_scripted_stub() -> (SocketAddr, mpsc::UnboundedReceiver<oneshot::Sender<Reply>>)
{
    let (arrived, arrivals) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            tokio::spawn(serve_scripted(connection, arrived.clone()));
        }
    });
    (addr, arrivals)
}

/// One connection of a scripted replica: requests one after another until a close.
async fn serve_scripted(
    mut connection: tokio::net::TcpStream,
    arrived: mpsc::UnboundedSender<oneshot::Sender<Reply>>,
) {
    use tokio::io::AsyncWriteExt;
    let mut buffer = Vec::new();
    loop {
        // The head, then the body by its Content-Length.
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            if !read_more(&mut connection, &mut buffer).await {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        let body_length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |value| value.trim().parse().unwrap());
        while buffer.len() < head_end + body_length {
            if !read_more(&mut connection, &mut buffer).await {
                return;
            }
        }
        buffer.drain(..head_end + body_length);
        let answer = if head.starts_with("get /metrics") {
            response("text/plain", STUB_METRICS, "200 OK")
        } else if head.starts_with("get ") {
            response("text/plain", b"", "404 Not Found")
        } else {
            let (reply, told) = oneshot::channel();
            arrived.send(reply).unwrap();
            match told.await {
                Ok(Reply::Answer) => response("text/event-stream", b"data: [DONE]\n\n", "200 OK"),
                Ok(Reply::Close(closed)) => {
                    // Our side closed; the gateway's close (a read of 0) says it saw it.
                    let _ = connection.shutdown().await;
                    while read_more(&mut connection, &mut buffer).await {}
                    let _ = closed.send(());
                    return;
                }
                Err(_) => return,
            }
        };
        if connection.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// Appends what `connection` has to `buffer`: false once it is closed (or failed).
async fn read_more(connection: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> bool {
    use tokio::io::AsyncReadExt;
    matches!(connection.read_buf(buffer).await, Ok(n) if n > 0)
}

/// A whole HTTP/1.1 response with `status`, `content_type` and `body`.
fn response(content_type: &str, body: &[u8], status: &str) -> Vec<u8> {
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    [head.as_bytes(), body].concat()
}
