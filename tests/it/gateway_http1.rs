//! The listeners' HTTP/1.1 on one client connection, as a raw client sends it: requests
//! served by laneway's own server one after another, then a request it hands to hyper (a
//! chunked body) in the middle of the connection, and the connection served on from there.

use std::time::Duration;

use crate::support::gateway::{start_gateway, start_sims};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":4}"#;

/// One response off a keep-alive connection: its status, headers (lowercase) and body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Reads exactly one response (length-delimited or chunked), leaving what follows unread.
async fn read_answer(stream: &mut (impl AsyncRead + Unpin), pending: &mut Vec<u8>) -> Answer {
    async fn fill(stream: &mut (impl AsyncRead + Unpin), pending: &mut Vec<u8>) {
        let mut buffer = [0u8; 4096];
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "the gateway closed the connection mid-answer");
        pending.extend_from_slice(&buffer[..read]);
    }
    let read = async {
        let head_end = loop {
            if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            fill(stream, pending).await;
        };
        let head = String::from_utf8(pending.drain(..head_end).collect()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter(|line| !line.is_empty())
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.to_ascii_lowercase(), value.trim().to_string())
            })
            .collect();
        let mut answer = Answer { status, headers, body: Vec::new() };
        if let Some(length) = answer.header("content-length") {
            let length: usize = length.parse().unwrap();
            while pending.len() < length {
                fill(stream, pending).await;
            }
            answer.body = pending.drain(..length).collect();
            return answer;
        }
        assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
        loop {
            let line_end = loop {
                if let Some(at) = pending.windows(2).position(|w| w == b"\r\n") {
                    break at;
                }
                fill(stream, pending).await;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&pending[..line_end]).unwrap(), 16)
                    .unwrap();
            while pending.len() < line_end + 2 + size + 2 {
                fill(stream, pending).await;
            }
            answer.body.extend_from_slice(&pending[line_end + 2..line_end + 2 + size]);
            pending.drain(..line_end + 2 + size + 2);
            if size == 0 {
                return answer;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read).await.expect("no answer within 20 s")
}

fn with_length() -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
}

fn chunked() -> String {
    let (first, second) = BODY.split_at(10);
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
        first.len(),
        second.len()
    )
}

#[tokio::test]
async fn one_connection_is_served_by_the_own_server_then_by_hyper_from_a_chunked_request_on() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(crate::support::gateway::config_for(&sims)).await;
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let mut pending = Vec::new();
    // Two requests written at once (pipelined), then one at a time.
    stream.write_all(format!("{}{}", with_length(), with_length()).as_bytes()).await.unwrap();
    let mut answers = vec![
        read_answer(&mut stream, &mut pending).await,
        read_answer(&mut stream, &mut pending).await,
    ];
    for request in [chunked(), with_length()] {
        stream.write_all(request.as_bytes()).await.unwrap();
        answers.push(read_answer(&mut stream, &mut pending).await);
    }
    for (index, answer) in answers.iter().enumerate() {
        assert_eq!(answer.status, 200, "answer {index}: {}", String::from_utf8_lossy(&answer.body));
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(body["usage"]["completion_tokens"], 4, "answer {index}");
        assert_eq!(answer.header("x-laneway-entry"), Some("short"), "answer {index}");
        assert!(answer.header("date").is_some(), "answer {index}");
        assert!(answer.header("keep-alive").is_some_and(|v| v.starts_with("timeout=")));
    }
    // The connection is still open and answers; then the client asks to close it.
    let closing = with_length().replacen("Host: gw\r\n", "Host: gw\r\nConnection: close\r\n", 1);
    stream.write_all(closing.as_bytes()).await.unwrap();
    let last = read_answer(&mut stream, &mut pending).await;
    assert_eq!(last.status, 200);
    assert_eq!(last.header("connection"), Some("close"));
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty() && pending.is_empty(), "nothing after the last answer");
    crate::support::gateway::wait_until("idle", || gateway.replica_in_flight("sim-0") == 0).await;
    gateway.shutdown().await;
}
