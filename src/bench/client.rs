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

/// Body bytes of an error response kept for nothing but draining: enough to free the
/// connection for reuse without reading an unbounded body.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The shared HTTP client.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client that keeps connections alive and reuses them, as ordinary OpenAI clients do.
pub fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(usize::MAX).build(connector)
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

    fn request(&self, index: u64, body: Bytes) -> Request<Full<Bytes>> {
        let uri = self.uris[(index % self.uris.len() as u64) as usize].clone();
        let mut request = Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("a parsed URI and static headers make a valid request");
        for (name, value) in &self.headers {
            request.headers_mut().append(name, value.clone());
        }
        request
    }
}

/// Sends one streamed request and times it; never fails, every ending is a record.
pub async fn send_streaming(
    client: &HttpClient,
    template: &RequestTemplate,
    body: Bytes,
    prompt_tokens: u64,
    expected_tokens: u64,
    record: &mut RequestRecord,
) {
    record.prompt_tokens = prompt_tokens;
    let index = record.index;
    let sent = Instant::now();
    let exchange = async {
        let response = match client.request(template.request(index, body)).await {
            Ok(response) => response,
            Err(error) => return (Outcome::Connect(error_chain(&error)), None, None),
        };
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
            }
        }
        (Outcome::Success, Some(status.as_u16()), Some(timer.finish(Instant::now())))
    };
    match tokio::time::timeout(template.timeout, exchange).await {
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
        let response = client.request(template.request(index, body)).await?;
        let status = response.status().as_u16();
        let collected = response.into_body().collect().await;
        Ok::<_, hyper_util::client::legacy::Error>((status, collected.is_ok()))
    };
    let result = tokio::time::timeout(template.timeout, exchange).await;
    record.e2e = sent.elapsed();
    record.outcome = match result {
        Err(_) => Outcome::Timeout,
        Ok(Err(error)) => Outcome::Connect(error_chain(&error)),
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

async fn drain(mut body: hyper::body::Incoming) {
    let mut read = 0;
    while read < MAX_ERROR_BODY_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
            _ => break,
        }
    }
}

/// The error with its causes, because hyper's top-level message ("client error
/// (Connect)") alone does not say what went wrong.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
