//! A replica on a raw socket, for what a framework would hide: it records every complete
//! request it reads (head lines as sent, body decoded), numbers its connections, and answers
//! inference paths either with a valid chat completion or with bytes the test scripts
//! (malformed responses). `/metrics`, `/v1/models` and `/health` answer as vLLM's do, so
//! the gateway's pollers are served, and are not recorded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the replica read whole.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub target: String,
    /// Header lines as (lowercase name, value).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Which of the replica's connections carried it (numbered as accepted).
    pub connection: usize,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What the replica answers an inference path with.
#[derive(Clone)]
pub enum Answer {
    /// A valid non-streamed chat completion, kept alive.
    Chat,
    /// These bytes, then the connection stays open for the next request (the bytes' own
    /// framing decides what the gateway makes of them).
    Raw(&'static [u8]),
}

pub struct RawReplica {
    pub addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
}

impl RawReplica {
    pub async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recorded: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let (log, count) = (recorded.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let connection = count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, connection, answer.clone(), log.clone()));
            }
        });
        Self { addr, recorded }
    }

    /// The requests read whole so far, the gateway's own pollers left out.
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded.lock().clone()
    }
}

const METRICS: &str = "# TYPE vllm:num_requests_waiting gauge\n\
                       vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n\
                       # TYPE vllm:num_requests_running gauge\n\
                       vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\n";
const MODELS: &str = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
const CHAT: &str = r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

async fn serve(
    mut stream: TcpStream,
    connection: usize,
    answer: Answer,
    log: Arc<Mutex<Vec<Recorded>>>,
) {
    let mut buffer = Vec::new();
    loop {
        let Some(mut request) = read_request(&mut stream, &mut buffer).await else { return };
        request.connection = connection;
        let polled = ["/metrics", "/v1/models", "/health"].contains(&request.target.as_str());
        let close = request.header("connection").is_some_and(|v| v.contains("close"));
        let reply = match (&answer, request.target.as_str()) {
            (_, "/metrics") => ok("text/plain", METRICS),
            (_, "/v1/models") => ok("application/json", MODELS),
            (_, "/health") => ok("text/plain", ""),
            (Answer::Raw(bytes), _) => bytes.to_vec(),
            (Answer::Chat, _) => ok("application/json", CHAT),
        };
        if !polled {
            log.lock().push(request);
        }
        if stream.write_all(&reply).await.is_err() || close {
            return;
        }
    }
}

fn ok(content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads one whole request (`Content-Length` or chunked body); `None` when the connection
/// ends first or the bytes are not HTTP.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        read_more(stream, buffer).await?;
    };
    let mut parsed_headers = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Request::new(&mut parsed_headers);
    parsed.parse(&buffer[..head_end]).ok()?;
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let (method, target) = (parsed.method?.to_string(), parsed.path?.to_string());
    buffer.drain(..head_end);
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let body = if find("transfer-encoding").is_some() {
        read_chunked(stream, buffer).await?
    } else {
        let length: usize = find("content-length").map_or(Some(0), |v| v.trim().parse().ok())?;
        while buffer.len() < length {
            read_more(stream, buffer).await?;
        }
        buffer.drain(..length).collect()
    };
    Some(Recorded { method, target, headers, body, connection: 0 })
}

async fn read_chunked(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(at) = buffer.windows(2).position(|w| w == b"\r\n") {
                break at;
            }
            read_more(stream, buffer).await?;
        };
        let size_text = std::str::from_utf8(&buffer[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.trim(), 16).ok()?;
        buffer.drain(..line_end + 2);
        while buffer.len() < size + 2 {
            read_more(stream, buffer).await?;
        }
        if &buffer[size..size + 2] != b"\r\n" {
            return None;
        }
        body.extend(buffer.drain(..size));
        buffer.drain(..2);
        if size == 0 {
            return Some(body);
        }
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}
