//! The HTTP side of the load generator: one hyper client with an HTTP/1.1 keep-alive pool,
//! request bodies in the OpenAI shape, and the timed exchange that yields a record.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::openai::request::Endpoint;
use crate::tokens::{CHAT_TOKENS_PER_MESSAGE, synthetic_text};

use super::record::{Outcome, RequestRecord};
use super::timing::StreamTimer;
use super::workload::Shape;
use crate::error_chain::ErrorChain;

/// Body bytes of an error response kept for nothing but draining: enough to free the
/// connection for reuse without reading an unbounded body.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The shared HTTP client.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Idle connections a client keeps per host; more are closed when they fall idle, so that
/// targets measured one after another stay well within the process's file descriptors.
pub const MAX_IDLE_PER_HOST: usize = 1024;

/// A client that keeps connections alive and reuses them, as ordinary OpenAI clients do.
pub fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    // Idle connections are closed after a while so that a run over many targets does not
    // keep every earlier target's connections (and file descriptors) open.
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .pool_idle_timeout(Duration::from_secs(10))
        .build(connector)
}

/// Where and how requests are sent: everything about a request but its shape.
#[derive(Debug, Clone)]
pub struct RequestTemplate {
    /// One URI, or several that requests take in turn by index: the "direct" baseline's
    /// client-side round robin over the replicas, with no proxy in between.
    pub uris: Vec<Uri>,
    pub endpoint: Endpoint,
    pub model: String,
    pub headers: HeaderMap,
    pub timeout: Duration,
}

impl RequestTemplate {
    pub fn new(
        base_url: &str,
        endpoint: Endpoint,
        model: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let uris = base_url
            .split(',')
            .map(|base| format!("{}{}", base.trim().trim_end_matches('/'), endpoint.path()).parse())
            .collect::<Result<Vec<Uri>, _>>()?;
        let mut header_map = HeaderMap::new();
        for (name, value) in headers {
            header_map.append(HeaderName::try_from(name.as_str())?, HeaderValue::try_from(value)?);
        }
        Ok(Self { uris, endpoint, model: model.to_string(), headers: header_map, timeout })
    }

    /// The streamed body of request `index`: the prompt is seeded by (`seed`, `index`), so
    /// every target receives the same prompts in the same order.
    pub fn streaming_body(&self, shape: Shape, seed: u64, index: u64) -> Bytes {
        let mut rng = StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let max_tokens = shape.output_tokens;
        let body = match self.endpoint {
            Endpoint::Chat => {
                let text_tokens = shape.input_tokens.saturating_sub(CHAT_TOKENS_PER_MESSAGE);
                serde_json::json!({
                    "model": self.model,
                    "messages": [{"role": "user", "content": synthetic_text(text_tokens, &mut rng)}],
                    "max_tokens": max_tokens,
                    "stream": true,
                    "stream_options": {"include_usage": true},
                    "ignore_eos": true,
                })
            }
            Endpoint::Completions => serde_json::json!({
                "model": self.model,
                "prompt": synthetic_text(shape.input_tokens, &mut rng),
                "max_tokens": max_tokens,
                "stream": true,
                "stream_options": {"include_usage": true},
                "ignore_eos": true,
            }),
        };
        Bytes::from(serde_json::to_vec(&body).expect("a JSON value always serialises"))
    }

    /// A streamed body with these (role, text) messages; for `/v1/completions` their texts
    /// one after the other. `user` fills OpenAI's `user` field (an end-user id that routers
    /// can keep sessions on).
    pub fn messages_body(
        &self,
        messages: &[(&str, &str)],
        max_tokens: u64,
        user: Option<&str>,
    ) -> Bytes {
        let mut body = match self.endpoint {
            Endpoint::Chat => serde_json::json!({
                "model": self.model,
                "messages": messages
                    .iter()
                    .map(|(role, text)| serde_json::json!({"role": role, "content": text}))
                    .collect::<Vec<_>>(),
            }),
            Endpoint::Completions => serde_json::json!({
                "model": self.model,
                "prompt": messages.iter().map(|(_, text)| *text).collect::<String>(),
            }),
        };
        let fields = body.as_object_mut().expect("built as an object");
        fields.insert("max_tokens".into(), max_tokens.into());
        fields.insert("stream".into(), true.into());
        fields.insert("stream_options".into(), serde_json::json!({"include_usage": true}));
        fields.insert("ignore_eos".into(), true.into());
        if let Some(user) = user {
            fields.insert("user".into(), user.into());
        }
        Bytes::from(serde_json::to_vec(&body).expect("a JSON value always serialises"))
    }

    /// The one non-streaming body the overhead mode sends over and over: a few prompt
    /// tokens and a single output token, so the target's own work is as small as it gets.
    pub fn tiny_body(&self) -> Bytes {
        let body = match self.endpoint {
            Endpoint::Chat => serde_json::json!({
                "model": self.model,
                "messages": [{"role": "user", "content": "ping"}],
                "max_tokens": 1,
                "stream": false,
            }),
            Endpoint::Completions => serde_json::json!({
                "model": self.model, "prompt": "ping", "max_tokens": 1, "stream": false,
            }),
        };
        Bytes::from(serde_json::to_vec(&body).expect("a JSON value always serialises"))
    }

    fn request(&self, index: u64, body: Bytes, session: Option<&str>) -> Request<Full<Bytes>> {
        let uri = self.uris[(index % self.uris.len() as u64) as usize].clone();
        let mut request = Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("a parsed URI and static headers make a valid request");
        for (name, value) in &self.headers {
            request.headers_mut().append(name, value.clone());
        }
        if let Some(value) = session.and_then(|id| HeaderValue::from_str(id).ok()) {
            request.headers_mut().insert(SESSION_HEADER, value);
        }
        request
    }
}

/// The header that names a request's conversation, for routers with session affinity.
pub const SESSION_HEADER: &str = "x-session-id";

/// What a streamed request carries besides its body, and what is kept of its response.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamOptions<'a> {
    /// Sent as `x-session-id`.
    pub session: Option<&'a str>,
    /// Keep the response body (a conversation needs the answer for its next turn).
    pub keep_body: bool,
}

/// Sends one streamed request and times it; never fails, every ending is a record.
pub async fn send_streaming(
    client: &HttpClient,
    template: &RequestTemplate,
    body: Bytes,
    prompt_tokens: u64,
    expected_tokens: u64,
    options: StreamOptions<'_>,
    record: &mut RequestRecord,
) -> Vec<u8> {
    record.prompt_tokens = prompt_tokens;
    let index = record.index;
    let sent = Instant::now();
    let mut kept = Vec::new();
    let mut served = (None, None);
    let exchange = async {
        let request = template.request(index, body, options.session);
        let response = match client.request(request).await {
            Ok(response) => response,
            Err(error) => return (Outcome::Connect(ErrorChain(&error).to_string()), None, None),
        };
        served = served_by(response.headers());
        let status = response.status();
        if !status.is_success() {
            drain(response.into_body()).await;
            return (Outcome::HttpStatus(status.as_u16()), Some(status.as_u16()), None);
        }
        let mut timer = StreamTimer::new(sent, expected_tokens);
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Some(data) = frame.data_ref() {
                timer.on_chunk(Instant::now(), data);
                if options.keep_body {
                    kept.extend_from_slice(data);
                }
            }
        }
        (Outcome::Success, Some(status.as_u16()), Some(timer.finish(Instant::now())))
    };
    let exchanged = tokio::time::timeout(template.timeout, exchange).await;
    (record.replica, record.api_worker) = served;
    match exchanged {
        Err(_) => {
            record.outcome = Outcome::Timeout;
            record.e2e = sent.elapsed();
        }
        Ok((outcome, status, figures)) => {
            record.status = status;
            match figures {
                Some(figures) => {
                    record.outcome = figures.outcome;
                    record.ttft = figures.ttft;
                    record.e2e = figures.e2e;
                    record.itl = figures.itl;
                    record.output_tokens = figures.output_tokens;
                    record.chunks = figures.chunks;
                    record.cached_tokens = figures.cached_tokens;
                    if let Some(reported) = figures.prompt_tokens {
                        record.prompt_tokens = reported;
                    }
                }
                None => {
                    record.outcome = outcome;
                    record.e2e = sent.elapsed();
                }
            }
        }
    }
    kept
}

/// Sends one non-streaming request and times it to the end of its body.
pub async fn send_plain(
    client: &HttpClient,
    template: &RequestTemplate,
    body: Bytes,
    record: &mut RequestRecord,
) {
    let index = record.index;
    let sent = Instant::now();
    let exchange = async {
        let response = client.request(template.request(index, body, None)).await?;
        let status = response.status().as_u16();
        let collected = response.into_body().collect().await;
        Ok::<_, hyper_util::client::legacy::Error>((status, collected.is_ok()))
    };
    let result = tokio::time::timeout(template.timeout, exchange).await;
    record.e2e = sent.elapsed();
    record.outcome = match result {
        Err(_) => Outcome::Timeout,
        Ok(Err(error)) => Outcome::Connect(ErrorChain(&error).to_string()),
        Ok(Ok((status, complete))) => {
            record.status = Some(status);
            if !(200..300).contains(&status) {
                Outcome::HttpStatus(status)
            } else if complete {
                record.ttft = Some(record.e2e);
                record.output_tokens = 1;
                Outcome::Success
            } else {
                Outcome::Truncated
            }
        }
    };
}

/// The replica and simulated API process a response names (see [`RequestRecord::replica`]).
fn served_by(headers: &http::HeaderMap) -> (Option<String>, Option<u32>) {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let replica = text("x-sim-replica").or_else(|| text("x-laneway-replica"));
    let api_worker = text("x-sim-api-worker").and_then(|value| value.parse().ok());
    (replica.map(str::to_string), api_worker)
}

async fn drain(mut body: hyper::body::Incoming) {
    let mut read = 0;
    while read < MAX_ERROR_BODY_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
            _ => break,
        }
    }
}
