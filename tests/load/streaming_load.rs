//! The reliability tests' load: a gateway tuned for fast failure detection, a streaming
//! client that records what each request saw, and a bounded load loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use laneway::gateway::{GatewayConfig, GatewayHandle};
use laneway::sim::SimHandle;
use tokio::sync::mpsc;

use crate::support::gateway::{chat_body, config_for, url};

/// Health checks every 100 ms (timeout 200 ms), short upstream timeouts.
pub fn fast_config(sims: &[SimHandle]) -> GatewayConfig {
    let mut config = config_for(sims);
    let reliability = &mut config.reliability;
    reliability.health.interval = Duration::from_millis(100);
    reliability.health.timeout = Duration::from_millis(200);
    reliability.timeouts.first_byte = Duration::from_secs(2);
    reliability.timeouts.idle = Duration::from_secs(2);
    config
}

/// What one request saw.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: u16,
    pub replica: String,
    /// At least one body byte arrived.
    pub got_bytes: bool,
    /// The stream ended with `[DONE]` and no error event.
    pub complete: bool,
    pub error_event: bool,
    pub retry_after: Option<String>,
    /// Client-side time to the first token event.
    pub ttft: Option<Duration>,
    /// First token to the end of the stream.
    pub decode: Option<Duration>,
}

impl Outcome {
    pub fn failed_before_any_byte(&self) -> bool {
        !self.got_bytes || (self.status != 200 && self.status != 429)
    }
}

/// Sends one streaming chat request and reads it to the end (10 s at most).
pub async fn stream_once(client: &reqwest::Client, base: &str, max_tokens: u64) -> Outcome {
    let started = Instant::now();
    let sent = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat_body(64, max_tokens, true))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let mut outcome = Outcome {
        status: 0,
        replica: String::new(),
        got_bytes: false,
        complete: false,
        error_event: false,
        retry_after: None,
        ttft: None,
        decode: None,
    };
    let Ok(mut response) = sent else {
        return outcome;
    };
    outcome.status = response.status().as_u16();
    let header =
        |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    outcome.replica = header("x-laneway-replica").unwrap_or_default();
    outcome.retry_after = header("retry-after");
    let mut body = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        outcome.got_bytes = true;
        body.push_str(&String::from_utf8_lossy(&chunk));
        if outcome.ttft.is_none() && has_token(&body) {
            outcome.ttft = Some(started.elapsed());
        }
    }
    outcome.decode = outcome.ttft.map(|ttft| started.elapsed().saturating_sub(ttft));
    if outcome.status != 200 && outcome.status != 429 {
        eprintln!("request failed with {}: {body}", outcome.status);
    }
    outcome.error_event = body.contains("data: {\"error\"");
    outcome.complete =
        outcome.status == 200 && body.ends_with("data: [DONE]\n\n") && !outcome.error_event;
    outcome
}

/// Whether an event with generated text has arrived.
fn has_token(body: &str) -> bool {
    body.split("\n\n").filter_map(|event| event.strip_prefix("data: ")).any(|data| {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(data) else {
            return false;
        };
        let choice = &value["choices"][0];
        let text = choice["delta"]["content"].as_str().or(choice["text"].as_str());
        text.is_some_and(|text| !text.is_empty())
    })
}

/// `clients` tasks sending streams one after another until `stop`, at most `per_client`
/// each; outcomes arrive on the returned channel as they finish.
pub struct Load {
    pub stop: Arc<AtomicBool>,
    pub finished: Arc<AtomicUsize>,
    pub outcomes: mpsc::UnboundedReceiver<Outcome>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub fn start(
        gateway: &GatewayHandle,
        clients: usize,
        per_client: usize,
        max_tokens: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicUsize::new(0));
        let (sender, outcomes) = mpsc::unbounded_channel();
        let base = url(gateway, "");
        let tasks = (0..clients)
            .map(|_| {
                let (stop, finished, sender, base) =
                    (stop.clone(), finished.clone(), sender.clone(), base.clone());
                tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    for _ in 0..per_client {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let outcome = stream_once(&client, &base, max_tokens).await;
                        finished.fetch_add(1, Ordering::Relaxed);
                        let _ = sender.send(outcome);
                    }
                })
            })
            .collect();
        Self { stop, finished, outcomes, tasks }
    }

    /// Waits (bounded) until `more` further requests finished.
    pub async fn wait_for_more(&self, more: usize) {
        let target = self.finished.load(Ordering::Relaxed) + more;
        crate::support::gateway::wait_until("more finished requests", || {
            self.finished.load(Ordering::Relaxed) >= target
        })
        .await;
    }

    /// Stops the clients and returns every outcome.
    pub async fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        self.complete().await
    }

    /// Lets every client send all its requests, then returns every outcome.
    pub async fn complete(mut self) -> Vec<Outcome> {
        for task in self.tasks.drain(..) {
            tokio::time::timeout(Duration::from_secs(20), task).await.unwrap().unwrap();
        }
        let mut outcomes = Vec::new();
        while let Ok(outcome) = self.outcomes.try_recv() {
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Outcomes received so far.
    pub fn drain(&mut self) -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        while let Ok(outcome) = self.outcomes.try_recv() {
            outcomes.push(outcome);
        }
        outcomes
    }
}

/// Median of the TTFTs, in seconds.
pub fn median_ttft(outcomes: &[Outcome]) -> f64 {
    median(outcomes.iter().filter_map(|o| o.ttft).collect())
}

/// Median of first token to end of stream, in seconds.
pub fn median_decode(outcomes: &[Outcome]) -> f64 {
    median(outcomes.iter().filter_map(|o| o.decode).collect())
}

fn median(durations: Vec<Duration>) -> f64 {
    let mut values: Vec<f64> = durations.iter().map(Duration::as_secs_f64).collect();
    assert!(!values.is_empty(), "nothing measured");
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Whether the gateway currently sends new requests to `name`.
pub fn in_rotation(gateway: &GatewayHandle, name: &str) -> bool {
    gateway.state().picker.by_name(name).is_some_and(|r| r.accepts_new_requests())
}

/// Every replica's in-flight count is back to zero (bounded wait).
pub async fn wait_all_idle(gateway: &GatewayHandle, names: &[&str]) {
    crate::support::gateway::wait_until("in-flight counts back to zero", || {
        names.iter().all(|name| gateway.replica_in_flight(name) == 0)
            && gateway.state().shared.admission.in_flight() == 0
    })
    .await;
}
