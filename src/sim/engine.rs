//! The shared engine: one task per replica running vLLM's continuous-batching step loop.
//!
//! # Scheduling (per step)
//! 1. Waiting requests are admitted in FIFO order while fewer than `max_num_seqs` run and
//!    the KV cache can reserve `prompt + max_tokens` tokens for them, less the prompt
//!    blocks found in the prefix cache (reserved in full at admission, released at the end:
//!    no preemption; see [`super::kv_cache`]). The head of the queue blocks the rest. A
//!    request's cached prompt tokens are not prefilled: its prefill starts after them.
//! 2. The step's token budget is `max_num_batched_tokens`: every decoding sequence takes one
//!    token, the rest goes to prefill chunks of the running sequences in admission order
//!    (chunked prefill). A sequence looks the cache up again when it is scheduled its first
//!    chunk (where vLLM schedules a waiting request), and each chunk's full blocks are
//!    cached as it is scheduled, so a request scheduled after another in the same step
//!    hits the blocks that one is computing. A sequence samples its first token at the end
//!    of the step that finishes its prompt, and one more token per step after that.
//!
//! # Step time (simulated)
//! ```text
//! step = slow_factor * ( step_base
//!          + prefill_us_per_token * prefill_tokens
//!          + attention_ns_per_token_pair / 1000 * sum over chunks of c * (p + c / 2)
//!          + sum over decoding sequences of
//!              (decode_us_per_seq + decode_ns_per_context_token / 1000 * context) )
//! ```
//! where a chunk of `c` tokens starts at prompt position `p`, a decoding sequence's context
//! is its prompt and the tokens it has generated, times a random factor of mean
//! 1 where the profile asks for one ([`super::step_jitter`]). A replica that spans nodes
//! adds its cross-node link's cost, see [`super::topology`]. Steps follow each other in
//! simulated time; the engine sleeps until each step's end on the scaled wall clock, and
//! waits on its inbox (no CPU) when nothing runs. A step never starts before the requests
//! it schedules arrived.
//!
//! # KV-cache events
//! With a publisher ([`super::kv_events`]), the blocks a step evicted (at admission) and
//! cached (as chunks are scheduled) are published as one batch when the step ends, before
//! its tokens are handed out, as vLLM publishes each step's events after its forward pass
//! and before its outputs ([`super::kv_event_log`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, watch};

use super::clock::{SimClock, SimTime};
use super::fault::Fault;
use super::kv_cache::{KvCache, SequenceBlocks};
use super::kv_event_log::{KvEventLog, PromptEventBlocks};
use super::kv_events::KvEventPublisher;
use super::metrics::SimMetrics;
use super::profile::EngineProfile;
use super::step_jitter::StepJitter;
use super::topology::SequenceWork;

/// A request handed to the engine by an API worker.
#[derive(Debug)]
pub struct EngineRequest {
    pub prompt_tokens: u64,
    pub max_tokens: u64,
    /// The chained hashes of the prompt's full blocks (empty: nothing to share).
    pub block_hashes: Vec<u64>,
    /// The same blocks as KV-cache events name them (`None`: events are off).
    pub kv_event_blocks: Option<PromptEventBlocks>,
    /// When the API worker finished preprocessing it.
    pub ready_at: SimTime,
    /// Where its tokens go. Bounded at `max_tokens + 1`, so the engine never waits on it.
    pub tokens: mpsc::Sender<TokenBatch>,
}

/// Tokens produced for one request in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBatch {
    pub count: u64,
    /// The end of the step that produced them.
    pub at: SimTime,
    /// The request has all its tokens.
    pub finished: bool,
    /// The request's prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
}

/// Live queue figures, shared with `/load`, `/get_load` and the stats.
#[derive(Debug, Default)]
pub struct EngineLoad {
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    pub kv_reserved_tokens: AtomicU64,
    pub waiting_prompt_tokens: AtomicU64,
}

struct Sequence {
    prompt_tokens: u64,
    max_tokens: u64,
    prefilled: u64,
    generated: u64,
    tokens: mpsc::Sender<TokenBatch>,
    /// Taken at admission.
    block_hashes: Vec<u64>,
    kv_event_blocks: Option<PromptEventBlocks>,
    blocks: SequenceBlocks,
    cached_tokens: u64,
    /// When a step first scheduled it, and when its first token came.
    scheduled_at: Option<SimTime>,
    first_token_at: Option<SimTime>,
}

impl Sequence {
    fn is_decoding(&self) -> bool {
        self.prefilled == self.prompt_tokens
    }

    /// It has not been scheduled a prompt chunk yet: all it holds of its prompt is cached.
    fn awaits_first_chunk(&self) -> bool {
        self.prefilled == self.cached_tokens
    }
}

/// The engine's inputs and shared outputs.
pub struct Engine {
    pub profile: EngineProfile,
    pub clock: SimClock,
    pub inbox: mpsc::UnboundedReceiver<EngineRequest>,
    pub faults: watch::Receiver<Fault>,
    pub metrics: Arc<SimMetrics>,
    pub load: Arc<EngineLoad>,
    pub stop: watch::Receiver<bool>,
    /// Where the prefix cache's changes are published (`None`: KV-cache events are off).
    pub kv_events: Option<KvEventPublisher>,
    /// Each step's duration around its modelled cost (`engine.step_jitter`).
    pub jitter: StepJitter,
}

impl Engine {
    /// Runs the step loop until `stop` turns true or every request sender is gone.
    pub async fn run(mut self) {
        let mut waiting: VecDeque<Sequence> = VecDeque::new();
        let mut running: Vec<Sequence> = Vec::new();
        let mut kv = KvCache::new(&self.profile);
        let mut events = self.kv_events.is_some().then(|| KvEventLog::new(self.profile.block_size));
        let mut step_start = SimTime(0);
        loop {
            if running.is_empty() && waiting.is_empty() {
                let mut stop = self.stop.clone();
                tokio::select! {
                    request = self.inbox.recv() => match request {
                        Some(request) => step_start = enqueue(&mut waiting, request, step_start),
                        None => return,
                    },
                    _ = stop.wait_for(|stopped| *stopped) => return,
                }
            }
            while let Ok(request) = self.inbox.try_recv() {
                step_start = enqueue(&mut waiting, request, step_start);
            }
            self.admit(&mut waiting, &mut running, &mut kv, events.as_mut());
            if running.is_empty() {
                // Only a request larger than the whole KV cache gets here (the API rejects
                // those); drop it so its stream ends instead of blocking the queue forever.
                waiting.pop_front();
                continue;
            }
            let plan = self.plan_step(&mut running, &mut kv, events.as_mut());
            let factor = self.faults.borrow().step_factor();
            let step_end = step_start.plus_us(plan.cost_us * factor * self.jitter.factor());
            let mut stop = self.stop.clone();
            tokio::select! {
                _ = self.clock.sleep_until(step_end) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            // Published before the step's tokens are handed out, as vLLM's scheduler does:
            // whoever sees a token can already replay the batch that cached its prompt.
            if let (Some(publisher), Some(events)) = (&mut self.kv_events, &mut events) {
                publisher.publish(events.take());
            }
            self.finish_step(&mut running, &plan, (step_start, step_end), &mut kv);
            step_start = step_end;
            self.publish_load(&waiting, running.len(), kv.used_tokens());
        }
    }

    fn admit(
        &self,
        waiting: &mut VecDeque<Sequence>,
        running: &mut Vec<Sequence>,
        kv: &mut KvCache,
        mut events: Option<&mut KvEventLog>,
    ) {
        while let Some(head) = waiting.front() {
            if running.len() as u64 >= self.profile.max_num_seqs {
                break;
            }
            let Some(admission) = kv.admit(&head.block_hashes, head.prompt_tokens, head.max_tokens)
            else {
                break;
            };
            let mut sequence = waiting.pop_front().expect("front exists");
            if let Some(events) = events.as_deref_mut() {
                events.evicted(&admission.evicted);
            }
            sequence.blocks = admission.blocks;
            sequence.cached_tokens = admission.cached_tokens;
            sequence.prefilled = admission.cached_tokens;
            if self.profile.enable_prefix_caching {
                self.metrics.prefix_cache_queries.inc_by(sequence.prompt_tokens);
                self.metrics.prefix_cache_hits.inc_by(admission.cached_tokens);
            }
            // vLLM counts every prompt token, cached or computed.
            self.metrics.prompt_tokens.inc_by(admission.cached_tokens);
            running.push(sequence);
        }
        self.publish_load(waiting, running.len(), kv.used_tokens());
    }

    /// Decides what each running sequence does this step and what the step costs; a
    /// sequence scheduled its first chunk extends its hit, and each chunk's full blocks are
    /// cached (and logged, with events on).
    fn plan_step(
        &self,
        running: &mut [Sequence],
        kv: &mut KvCache,
        mut events: Option<&mut KvEventLog>,
    ) -> StepPlan {
        let profile = &self.profile;
        let decoding = running.iter().filter(|s| s.is_decoding()).count() as u64;
        let mut budget = profile.max_num_batched_tokens.saturating_sub(decoding);
        let mut chunks = vec![0; running.len()];
        let mut work = Vec::with_capacity(running.len());
        let mut prefill_tokens = 0;
        let mut attention_pairs = 0.0;
        let mut decode_us = 0.0;
        for (chunk, sequence) in chunks.iter_mut().zip(running) {
            if sequence.is_decoding() {
                let context = (sequence.prompt_tokens + sequence.generated) as f64;
                let compute_us = profile.decode_us_per_seq
                    + profile.decode_ns_per_context_token / 1000.0 * context;
                decode_us += compute_us;
                work.push(SequenceWork { tokens: 1, compute_us });
                continue;
            }
            if budget == 0 {
                continue;
            }
            if sequence.awaits_first_chunk() {
                let found = kv.extend_hit(&mut sequence.blocks, sequence.prompt_tokens);
                sequence.cached_tokens += found;
                sequence.prefilled += found;
                self.metrics.prefix_cache_hits.inc_by(found);
                self.metrics.prompt_tokens.inc_by(found);
            }
            let size = (sequence.prompt_tokens - sequence.prefilled).min(budget);
            let cached = kv.prefilled(&mut sequence.blocks, sequence.prefilled + size);
            if let (Some(events), Some(prompt)) = (events.as_deref_mut(), &sequence.kv_event_blocks)
            {
                events.stored(&sequence.block_hashes, prompt, &cached);
            }
            budget -= size;
            *chunk = size;
            let pairs = size as f64 * (sequence.prefilled as f64 + size as f64 / 2.0);
            prefill_tokens += size;
            attention_pairs += pairs;
            let compute_us = profile.prefill_us_per_token * size as f64
                + profile.attention_ns_per_token_pair / 1000.0 * pairs;
            work.push(SequenceWork { tokens: size, compute_us });
        }
        let cost_us = match &profile.cross_node {
            Some(cross_node) => cross_node.step_us(profile.step_base_us, &work),
            None => {
                profile.step_base_us
                    + profile.prefill_us_per_token * prefill_tokens as f64
                    + profile.attention_ns_per_token_pair / 1000.0 * attention_pairs
                    + decode_us
            }
        };
        StepPlan { chunks, cost_us }
    }

    /// Applies a finished step (it ran `started..at`): advances prefills, hands out tokens,
    /// retires finished and abandoned sequences (freeing their KV), and counts a finished
    /// one's prefill time and prompt as vLLM does.
    fn finish_step(
        &self,
        running: &mut Vec<Sequence>,
        plan: &StepPlan,
        (started, at): (SimTime, SimTime),
        kv: &mut KvCache,
    ) {
        let mut generated_total = 0;
        let mut prefilled_total = 0;
        let mut index = 0;
        running.retain_mut(|sequence| {
            let chunk = plan.chunks[index];
            index += 1;
            if sequence.tokens.is_closed() {
                // The client went away: vLLM aborts the request and frees its blocks.
                kv.release(std::mem::take(&mut sequence.blocks));
                return false;
            }
            sequence.prefilled += chunk;
            prefilled_total += chunk;
            sequence.scheduled_at.get_or_insert(started);
            if !sequence.is_decoding() {
                return true;
            }
            sequence.first_token_at.get_or_insert(at);
            sequence.generated += 1;
            generated_total += 1;
            let finished = sequence.generated >= sequence.max_tokens;
            if finished {
                self.observe_prefill(sequence);
            }
            let cached_tokens = sequence.cached_tokens;
            let batch = TokenBatch { count: 1, at, finished, cached_tokens };
            // The channel holds max_tokens + 1 batches, so only a gone receiver fails here.
            let delivered = sequence.tokens.try_send(batch).is_ok();
            let keep = delivered && !finished;
            if !keep {
                kv.release(std::mem::take(&mut sequence.blocks));
            }
            keep
        });
        self.metrics.prompt_tokens.inc_by(prefilled_total);
        self.metrics.generation_tokens.inc_by(generated_total);
    }

    /// A finished sequence's prefill, from its first scheduling to its first token, in
    /// wall-clock seconds as a real engine counts it: a gateway sets this figure beside the
    /// first tokens it times itself (at speed 1, the same as simulated seconds).
    fn observe_prefill(&self, sequence: &Sequence) {
        if let (Some(scheduled), Some(first)) = (sequence.scheduled_at, sequence.first_token_at) {
            let prefill = self.clock.wall_seconds(first.seconds_since(scheduled));
            self.metrics.request_prefill_time.observe(prefill);
            self.metrics.request_prompt_tokens.observe(sequence.prompt_tokens as f64);
            let computed = sequence.prompt_tokens.saturating_sub(sequence.cached_tokens);
            self.metrics.request_prefill_kv_computed_tokens.observe(computed as f64);
        }
    }

    fn publish_load(&self, waiting: &VecDeque<Sequence>, running: usize, kv_reserved: u64) {
        let load = &self.load;
        load.running.store(running as u64, Ordering::Relaxed);
        load.waiting.store(waiting.len() as u64, Ordering::Relaxed);
        load.kv_reserved_tokens.store(kv_reserved, Ordering::Relaxed);
        let waiting_tokens = waiting.iter().map(|s| s.prompt_tokens).sum();
        load.waiting_prompt_tokens.store(waiting_tokens, Ordering::Relaxed);
        let usage = kv_reserved as f64 / self.profile.kv_cache_tokens as f64;
        self.metrics.num_requests_running.set(running as f64);
        self.metrics.num_requests_waiting.set(waiting.len() as f64);
        self.metrics.kv_cache_usage_perc.set(usage);
        self.metrics.gpu_cache_usage_perc.set(usage);
    }
}

struct StepPlan {
    /// Prefill tokens per running sequence (0 for decoding ones).
    chunks: Vec<u64>,
    cost_us: f64,
}

/// Queues a request; the next step cannot start before it arrived.
fn enqueue(
    waiting: &mut VecDeque<Sequence>,
    request: EngineRequest,
    step_start: SimTime,
) -> SimTime {
    waiting.push_back(Sequence {
        prompt_tokens: request.prompt_tokens.max(1),
        max_tokens: request.max_tokens.max(1),
        prefilled: 0,
        generated: 0,
        tokens: request.tokens,
        block_hashes: request.block_hashes,
        kv_event_blocks: request.kv_event_blocks,
        blocks: SequenceBlocks::default(),
        cached_tokens: 0,
        scheduled_at: None,
        first_token_at: None,
    });
    step_start.max(request.ready_at)
}
