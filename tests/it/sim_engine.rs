//! The engine's scheduling, checked on exact simulated step times: continuous batching,
//! chunked prefill, the `max_num_seqs` and KV-cache limits, and aborts freeing the cache.
//! The clock runs a million times faster, so simulated seconds pass in microseconds.

use std::sync::Arc;

use laneway::sim::Profile;
use laneway::sim::clock::{SimClock, SimTime};
use laneway::sim::engine::{Engine, EngineLoad, EngineRequest, TokenBatch};
use laneway::sim::fault::FaultSwitch;
use laneway::sim::metrics::SimMetrics;
use laneway::sim::profile::EngineProfile;
use laneway::sim::step_jitter::StepJitter;
use tokio::sync::{mpsc, watch};

fn tiny() -> EngineProfile {
    Profile::built_in("tiny").unwrap().engine
}

struct Harness {
    inbox: mpsc::UnboundedSender<EngineRequest>,
    _stop: watch::Sender<bool>,
    _faults: FaultSwitch,
}

fn start(profile: EngineProfile) -> Harness {
    start_seeded(profile, 0)
}

/// An engine whose step jitter (if its profile has one) draws from `seed`.
fn start_seeded(profile: EngineProfile, seed: u64) -> Harness {
    let (inbox, receiver) = mpsc::unbounded_channel();
    let (stop, stop_watch) = watch::channel(false);
    let faults = FaultSwitch::default();
    let engine = Engine {
        jitter: StepJitter::new(profile.step_jitter, seed),
        profile,
        clock: SimClock::new(1e6),
        inbox: receiver,
        faults: faults.subscribe(),
        metrics: Arc::new(SimMetrics::new("m").unwrap()),
        load: Arc::new(EngineLoad::default()),
        stop: stop_watch,
        kv_events: None,
    };
    tokio::spawn(engine.run());
    Harness { inbox, _stop: stop, _faults: faults }
}

fn submit(harness: &Harness, prompt: u64, max_tokens: u64) -> mpsc::Receiver<TokenBatch> {
    submit_blocks(harness, prompt, max_tokens, Vec::new())
}

/// Submits a request whose prompt's full blocks hash to `block_hashes`.
fn submit_blocks(
    harness: &Harness,
    prompt: u64,
    max_tokens: u64,
    block_hashes: Vec<u64>,
) -> mpsc::Receiver<TokenBatch> {
    let (tokens, receiver) = mpsc::channel(max_tokens as usize + 1);
    let request = EngineRequest {
        prompt_tokens: prompt,
        max_tokens,
        block_hashes,
        kv_event_blocks: None,
        ready_at: SimTime(0),
        tokens,
    };
    harness.inbox.send(request).unwrap();
    receiver
}

/// Simulated times (µs) of every token of a request.
async fn token_times(mut receiver: mpsc::Receiver<TokenBatch>) -> Vec<f64> {
    let mut times = Vec::new();
    while let Some(batch) = receiver.recv().await {
        for _ in 0..batch.count {
            times.push(batch.at.0 as f64 / 1000.0);
        }
        if batch.finished {
            break;
        }
    }
    times
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

#[tokio::test]
async fn requests_prefill_together_then_decode_in_the_same_steps() {
    let profile = tiny();
    let harness = start(profile.clone());
    let first = submit(&harness, 100, 4);
    let second = submit(&harness, 100, 4);
    let (first, second) = (token_times(first).await, token_times(second).await);
    assert_eq!(first, second, "one batch: same step ends");
    let prefill = profile.step_base_us + 200.0 * profile.prefill_us_per_token;
    let decode = profile.step_base_us + 2.0 * profile.decode_us_per_seq;
    assert!(close(first[0], prefill), "{first:?}");
    assert!(close(first[3] - first[0], 3.0 * decode), "{first:?}");
}

#[tokio::test]
async fn a_stream_over_a_longer_context_steps_slower_by_the_kv_it_reads() {
    let mut profile = tiny();
    profile.decode_ns_per_context_token = 100.0;
    let harness = start(profile.clone());
    let short = token_times(submit(&harness, 100, 4)).await;
    let long = token_times(submit(&harness, 2000, 4)).await;
    // Each decode step reads the prompt and the tokens generated before it: after the
    // first token (generated 1), then 2, then 3.
    let decode_over = |prompt: f64| {
        (1..=3)
            .map(|generated| {
                profile.step_base_us
                    + profile.decode_us_per_seq
                    + profile.decode_ns_per_context_token / 1000.0 * (prompt + generated as f64)
            })
            .sum::<f64>()
    };
    assert!(close(short[3] - short[0], decode_over(100.0)), "{short:?}");
    assert!(close(long[3] - long[0], decode_over(2000.0)), "{long:?}");
    // 1,900 more tokens of context: 0.19 ms more a step, over three steps.
    assert!(close((long[3] - long[0]) - (short[3] - short[0]), 3.0 * 190.0), "{short:?} {long:?}");
}

#[tokio::test]
async fn jittered_steps_keep_their_mean_and_replicas_fed_alike_drift_apart() {
    let mut profile = tiny();
    profile.step_jitter = 0.3;
    let decode = profile.step_base_us + profile.decode_us_per_seq;
    let run = |seed: u64| {
        let harness = start_seeded(profile.clone(), seed);
        async move { token_times(submit(&harness, 100, 401)).await }
    };
    let (first, second, again) = (run(1).await, run(2).await, run(1).await);
    assert_eq!(first, again, "a seed replays");
    let gaps: Vec<f64> = first.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let spread = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
    // 400 steps of one sequence decoding: their mean is the modelled step, their spread 30%.
    assert!((mean / decode - 1.0).abs() < 0.05, "mean {mean} against {decode}");
    assert!((spread / mean - 0.3).abs() < 0.06, "spread {spread} around {mean}");
    // The same request on two replicas no longer ends at the same instant.
    let (end_first, end_second) = (first[400], second[400]);
    assert!((end_first - end_second).abs() > decode, "{end_first} and {end_second}");
}

#[tokio::test]
async fn long_prompts_prefill_in_chunks() {
    let profile = tiny();
    let harness = start(profile.clone());
    let times = token_times(submit(&harness, 5000, 1)).await;
    // 2048 + 2048 + 904 tokens: three steps.
    let expected = 3.0 * profile.step_base_us + 5000.0 * profile.prefill_us_per_token;
    assert!(close(times[0], expected), "{times:?} vs {expected}");
}

#[tokio::test]
async fn max_num_seqs_makes_requests_wait() {
    let mut profile = tiny();
    profile.max_num_seqs = 1;
    let harness = start(profile);
    let first = submit(&harness, 10, 5);
    let second = submit(&harness, 10, 5);
    let (first, second) = (token_times(first).await, token_times(second).await);
    assert!(second[0] > first[4], "the second starts after the first ends: {first:?} {second:?}");
}

#[tokio::test]
async fn a_full_kv_cache_makes_requests_wait_and_aborts_free_it() {
    let mut profile = tiny();
    profile.kv_cache_tokens = 300;
    let harness = start(profile);
    let first = submit(&harness, 100, 100);
    let second = submit(&harness, 100, 100);
    let (first, second) = (token_times(first).await, token_times(second).await);
    assert!(second[0] > first[99], "200 + 200 tokens do not fit in 300");

    // A request whose client went away is aborted and its reservation released.
    let abandoned = submit(&harness, 100, 100);
    drop(abandoned);
    let next = token_times(submit(&harness, 100, 100)).await;
    assert_eq!(next.len(), 100);
}

/// The first batch of a request: when its first token came and its cached prompt tokens.
async fn first_batch(mut receiver: mpsc::Receiver<TokenBatch>) -> (f64, u64) {
    let batch = receiver.recv().await.unwrap();
    (batch.at.0 as f64 / 1000.0, batch.cached_tokens)
}

#[tokio::test]
async fn requests_scheduled_in_one_step_share_the_prefix_one_of_them_computes() {
    // Three requests on one 3,000-token prompt arrive together. Step 1's budget (2,048
    // tokens) all goes to the first one's first chunk; step 2 schedules its last 952
    // tokens, then the two others. As in vLLM, blocks are cached as they are scheduled, so
    // the two others hit every block up to their last token's (floor(2999 / 16) = 187
    // blocks), the 59 the first is computing in that same step included, and the three
    // first tokens come at the end of step 2.
    let harness = start(tiny());
    let hashes = laneway::prompt_tokens::block_hashes(&(0..3000).collect::<Vec<u64>>(), 16);
    let first = submit_blocks(&harness, 3000, 2, hashes.clone());
    let second = submit_blocks(&harness, 3000, 2, hashes.clone());
    let third = submit_blocks(&harness, 3000, 2, hashes);
    let first = first_batch(first).await;
    let second = first_batch(second).await;
    let third = first_batch(third).await;
    assert_eq!([first.1, second.1, third.1], [0, 187 * 16, 187 * 16]);
    assert!(close(first.0, second.0) && close(first.0, third.0), "{first:?} {second:?} {third:?}");
}
