//! Engine speeds read alike within a pick: two replicas of one speed whose engines' counters
//! read one by its fit and the other by its line through the origin share a burst evenly.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::HeaderMap;
use prometheus::Registry;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::measured::MeasuredTtft;
use super::super::policy::PrefixAware;
use super::super::ttft::QueueTtft;
use super::super::{EngineTokens, PrefixRouter, PromptKey, PromptPick};
use crate::gateway::config::{EntrySlo, PrefixConfig};
use crate::gateway::pick::Replica;
use crate::gateway::pick::policy::{Policy, RequestShape};
use crate::gateway::pick::predict::{EngineEntry, EngineReading, EngineWork, LatencyProbe};
use crate::gateway::pick::test_fleet::{context, replicas};
use crate::openai::InferenceRequest;
use crate::openai::request::Endpoint;
use crate::tokens::synthetic_text;

/// The engine's prefill: 100 ms a request (as it reads when many prefills share its steps)
/// and 46 us an uncached token.
const PER_REQUEST: f64 = 0.1;
const PER_TOKEN: f64 = 46e-6;

/// Shows `replica`'s engine six windows of four prefills, each window's requests of the next
/// size in `sizes` (uncached tokens), at [`PER_REQUEST`] and [`PER_TOKEN`].
fn engine_serves(replica: &Replica, sizes: &[f64]) {
    let mut work = EngineWork::default();
    let mut at = Instant::now();
    replica.latency.observe_engine_work(work, at);
    for window in 0..6 {
        let size = sizes[window % sizes.len()];
        work.prefills += 4.0;
        work.computed_tokens += 4.0 * size;
        work.prefill_seconds += 4.0 * (PER_REQUEST + PER_TOKEN * size);
        // A window a minute: one prefill at a time.
        at += Duration::from_secs(60);
        replica.latency.observe_engine_work(work, at);
    }
}

/// Teaches `replica` this gateway's own first tokens: eight prompts of 500 tokens alone, in
/// 10 ms plus [`PER_TOKEN`] a token, and a decode of 5 ms a token.
fn first_tokens(replica: &Replica) {
    for _ in 0..8 {
        let ttft = Duration::from_secs_f64(0.01 + PER_TOKEN * 500.0);
        replica.latency.observe_prefill((0, 500), 0, true, ttft);
        replica.latency.observe_decode(1.0, Duration::from_millis(5));
    }
}

/// A new conversation's first turn, nothing of it cached anywhere: about 500 tokens.
fn first_turn(conversation: u64) -> PromptKey {
    let text = synthetic_text(380, &mut StdRng::seed_from_u64(conversation));
    let body = serde_json::json!({ "messages": [{"role": "user", "content": text}] });
    let request = InferenceRequest::parse(Endpoint::Chat, body.to_string().as_bytes()).unwrap();
    let headers = HeaderMap::new();
    PromptKey::new(&request, &headers, &PrefixConfig::default(), &EngineTokens::default())
}

#[test]
fn a_pick_reads_its_candidates_engines_alike() {
    let set = replicas(2);
    // Requests of 300 and 700 tokens tell the engine's terms apart: its fit reads 46 us a
    // token, its line through the origin 216. Requests of one size (500) do not: 246.
    engine_serves(&set[0], &[300.0, 700.0]);
    engine_serves(&set[1], &[500.0]);
    let fitted = set[0].latency.engine_slope(EngineReading::Fitted).unwrap();
    let line = set[0].latency.engine_slope(EngineReading::ThroughOrigin).unwrap();
    assert!((fitted - PER_TOKEN).abs() < 1e-9, "{fitted}");
    assert!((line - 216e-6).abs() < 1e-6, "{line}");
    assert!(set[0].latency.engine_reads_fit() && !set[1].latency.engine_reads_fit());
    let one_size = set[1].latency.engine_slope(EngineReading::Fitted).unwrap();
    assert!((one_size - 246e-6).abs() < 1e-9, "{one_size}");
    first_tokens(&set[0]);
    first_tokens(&set[1]);
    let request = RequestShape { prompt_tokens: 500, slo: EntrySlo::default() };
    let configured = QueueTtft { prefill_us_per_token: 75.0, request_us: 1000.0 };
    // One engine read only by its line: every candidate by its line.
    let estimate = MeasuredTtft::for_candidates(&set, &[0, 1], &request, configured);
    let read = |replica: &Replica| estimate.prefill_us_per_token(replica) * 1e-6;
    assert!((read(&set[0]) - line).abs() < 1e-9, "{}", read(&set[0]));
    assert!((read(&set[1]) - one_size).abs() < 1e-9, "{}", read(&set[1]));
    // Alone among candidates, the fitted engine is read by its fit.
    let estimate = MeasuredTtft::for_candidates(&set, &[0], &request, configured);
    assert!((estimate.prefill_us_per_token(&set[0]) * 1e-6 - fitted).abs() < 1e-9);

    // A burst of sixteen first turns, each staying queued: read by the fit on one replica
    // and by the line on the other, the first would look five times faster a token and
    // take most of them.
    let config = PrefixConfig::default();
    let router = Arc::new(PrefixRouter::new(&config, &Registry::new()));
    let mut per_replica = [0; 2];
    let mut queued = Vec::new();
    for conversation in 0..16 {
        let key = first_turn(conversation);
        let prompt = PromptPick { key: &key, router: &router, config: &config };
        let chosen =
            PrefixAware::measured(5).pick_prompt(&set, &context(), &prompt, &request).unwrap();
        per_replica[chosen] += 1;
        set[chosen].load.in_flight.fetch_add(1, Ordering::Relaxed);
        let placed = set[chosen].clone();
        let entry = EngineEntry::AtPlacement;
        let probe = LatencyProbe::begin(placed, key.prompt_tokens, &context(), entry);
        queued.push((probe, router.place(&set[chosen], &key)));
    }
    assert!(per_replica.iter().all(|&n| (7..=9).contains(&n)), "{per_replica:?}");
}
