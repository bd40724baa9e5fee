//! A streamed response: turns the engine's tokens into vLLM's SSE events and paces them
//! through the API worker (every event costs `per_chunk_us` of its output time).
//!
//! # Chunk coalescing (a model of vLLM's output processor)
//! A stream has at most one event in the worker's output queue. Tokens the engine produced
//! while that event waited go out together in the next event (one delta with all their
//! text), so output cost is per event, not per token: an overloaded worker sends fewer,
//! larger events, and the token rate (TPOT) holds while the event rate drops. Usage counts
//! stay exact.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::body::{ChunkSender, StreamCut};
use super::chunks::{ResponseWriter, Usage};
use super::clock::SimTime;
use super::engine::TokenBatch;
use super::fault::Fault;
use super::inference::Lengths;
use super::metrics::FinishedTiming;
use super::state::SimState;
use super::stats::InFlightGuard;
use crate::openai::request::Endpoint;
use crate::openai::{ApiError, ErrorKind};

/// Wall-clock pause that lets the connection flush what it took before a cut.
const CUT_GRACE: Duration = Duration::from_millis(10);
/// Bound on the waits for the connection to take the queued events before a cut.
const CUT_DRAIN_POLLS: usize = 100;

/// Everything one stream needs; runs as its own task until the stream ends or the client
/// goes away.
pub struct StreamJob {
    pub state: Arc<SimState>,
    pub worker: usize,
    pub writer: ResponseWriter,
    pub lengths: Lengths,
    pub include_usage: bool,
    pub arrival: SimTime,
    pub tokens: mpsc::Receiver<TokenBatch>,
    pub chunks: ChunkSender,
    pub in_flight: InFlightGuard,
}

/// The stream cannot go on: the client left or a fault cut it.
struct Stopped;

/// Simulated times of the events already sent.
#[derive(Default)]
struct Progress {
    events_sent: u64,
    tokens_sent: u64,
    first_event_at: Option<SimTime>,
    last_event_at: Option<SimTime>,
    last_token_at: Option<SimTime>,
    /// The request's prompt tokens served from the prefix cache (from the engine).
    cached_tokens: u64,
}

impl StreamJob {
    pub async fn run(self) {
        let client = self.chunks.clone();
        tokio::select! {
            _ = self.produce() => {}
            // Dropping the job drops the token receiver, which aborts the request in the engine.
            _ = client.closed() => {}
        }
    }

    async fn produce(mut self) {
        let mut progress = Progress::default();
        // Tokens received and not sent yet, oldest first.
        let mut pending: VecDeque<TokenBatch> = VecDeque::new();
        loop {
            if pending.is_empty() {
                match self.tokens.recv().await {
                    Some(batch) => pending.push_back(batch),
                    None => break,
                }
            }
            while let Ok(batch) = self.tokens.try_recv() {
                pending.push_back(batch);
            }
            // The next event is ready when the stream's previous event is out and a token
            // is there; it carries every token produced by then (decided in simulated time,
            // so a late wake-up on the wall clock does not change what goes together).
            let first_at = pending.front().expect("not empty").at;
            let ready = first_at.max(progress.last_event_at.unwrap_or(first_at));
            let mut count = 0;
            while let Some(batch) = pending.front().filter(|batch| batch.at <= ready) {
                count += batch.count;
                progress.cached_tokens = batch.cached_tokens;
                pending.pop_front();
            }
            if self.send_tokens(&mut progress, count, ready).await.is_err() {
                return;
            }
        }
        if progress.tokens_sent < self.lengths.max_tokens {
            // The engine stopped (replica shutting down): vLLM reports it in-band.
            let error = ApiError::new(ErrorKind::Unavailable, "The engine stopped.");
            let _ = self.chunks.send(Ok(Bytes::from(error.sse_event()))).await;
            let _ = self.chunks.send(Ok(ResponseWriter::done_event())).await;
            return;
        }
        self.record_finish(&progress);
        let Some(last_token_at) = progress.last_token_at else {
            return;
        };
        if self.include_usage {
            let caching = self.state.config.profile.engine.enable_prefix_caching;
            let usage = Usage::new(self.lengths.prompt_tokens, progress.tokens_sent)
                .with_cached(caching.then_some(progress.cached_tokens));
            let event = self.writer.usage_event(usage);
            if self.send_event(&mut progress, event, last_token_at).await.is_err() {
                return;
            }
        }
        let _ = self.send_event(&mut progress, ResponseWriter::done_event(), last_token_at).await;
    }

    /// Sends the next `count` tokens in one event (preceded, for chat, by the role event).
    async fn send_tokens(
        &mut self,
        progress: &mut Progress,
        count: u64,
        token_at: SimTime,
    ) -> Result<(), Stopped> {
        let index = progress.tokens_sent;
        let counters = self.state.counters.clone();
        let choice_events = &counters.choice_events_sent;
        if index == 0 && self.writer.endpoint == Endpoint::Chat {
            let role = self.writer.role_event();
            self.send_event(progress, role, token_at).await?;
            choice_events.fetch_add(1, Ordering::Relaxed);
        }
        let last = index + count >= self.lengths.max_tokens;
        let event = self.writer.token_event(index, count, last);
        let sent_at = self.send_event(progress, event, token_at).await?;
        choice_events.fetch_add(1, Ordering::Relaxed);
        if let Some(previous) = progress.last_token_at {
            let gap = sent_at.seconds_since(previous);
            self.state.metrics.inter_token_latency.observe(gap);
        }
        progress.last_token_at = Some(sent_at);
        progress.tokens_sent += count;
        Ok(())
    }

    /// Charges the worker for one event, waits until it is out, sends it; returns when it
    /// left in simulated time. The first event out fixes TTFT.
    async fn send_event(
        &mut self,
        progress: &mut Progress,
        event: Bytes,
        ready_at: SimTime,
    ) -> Result<SimTime, Stopped> {
        if let Fault::CutAfterChunks { chunks } = self.state.faults.get()
            && progress.events_sent >= chunks
        {
            self.cut().await;
            return Err(Stopped);
        }
        let per_chunk_us = self.state.config.profile.api.per_chunk_us;
        let sent_at = self.state.workers.charge_output(self.worker, ready_at, per_chunk_us);
        self.state.clock.sleep_until(sent_at).await;
        self.chunks.send(Ok(event)).await.map_err(|_| Stopped)?;
        progress.events_sent += 1;
        progress.last_event_at = Some(sent_at);
        if progress.first_event_at.is_none() {
            progress.first_event_at = Some(sent_at);
            let ttft = sent_at.seconds_since(self.arrival);
            self.state.metrics.time_to_first_token.observe(ttft);
        }
        Ok(sent_at)
    }

    /// Ends the stream with an error once the events before it are on the wire: hyper drops
    /// buffered frames when a body fails, so the cut waits for the connection to take every
    /// queued event and flush it (a short wall-clock grace; the cut's timing is not modelled).
    async fn cut(&self) {
        for _ in 0..CUT_DRAIN_POLLS {
            if self.chunks.capacity() == self.chunks.max_capacity() {
                break;
            }
            tokio::time::sleep(CUT_GRACE).await;
        }
        tokio::time::sleep(CUT_GRACE).await;
        let _ = self.chunks.send(Err(StreamCut)).await;
    }

    fn record_finish(&self, progress: &Progress) {
        let (Some(first), Some(last)) = (progress.first_event_at, progress.last_token_at) else {
            return;
        };
        self.state.metrics.observe_finished(FinishedTiming {
            arrival: self.arrival,
            first_output: first,
            last_token: last,
            finished: last,
            tokens: progress.tokens_sent,
        });
    }
}
