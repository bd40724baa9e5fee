//! Runs one round of requests against one target: the closed loop (N clients) or the open
//! loop (a Poisson schedule that spawns each request on time, whatever the target does).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::Semaphore;

use super::arrivals::{Arrivals, PoissonSchedule};
use super::client::{HttpClient, RequestTemplate, StreamOptions, send_plain, send_streaming};
use super::conversation;
use super::prefix_workload::{ConversationSpec, PrefixSpec};
use super::progress::Progress;
use super::record::{Outcome, RequestRecord};
use super::workload::{WeightedShape, Workload};

/// Requests an open loop without `--max-concurrency` keeps in flight at most: each holds
/// a connection (a file descriptor), and the process may not have more than some 20,000.
/// A request due while the cap is full is recorded as not sent, never delayed.
pub const OPEN_LOOP_IN_FLIGHT_CAP: usize = 4096;

/// What each request of the run is.
#[derive(Debug, Clone)]
pub enum RequestKind {
    Streaming {
        mix: Vec<WeightedShape>,
    },
    /// The overhead mode's tiny non-streaming request, one body for all.
    Tiny {
        body: Bytes,
    },
    /// Requests sharing prompt prefixes.
    SharedPrefix {
        spec: PrefixSpec,
    },
    /// Multi-turn conversations (closed loop only).
    Conversations {
        spec: ConversationSpec,
    },
}

/// How much one round sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    Requests(u64),
    Duration(Duration),
}

/// Everything a request task needs, shared by all of a target's tasks.
pub struct TargetContext {
    pub client: HttpClient,
    pub template: RequestTemplate,
    pub kind: RequestKind,
    pub seed: u64,
    pub progress: Arc<Progress>,
    /// Open loop without `--max-concurrency`: requests in flight at most
    /// ([`OPEN_LOOP_IN_FLIGHT_CAP`] in a run).
    pub in_flight_cap: usize,
}

/// One round: which requests (from `first_index`), how many, and how they arrive.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub number: u32,
    pub first_index: u64,
    pub budget: Budget,
    pub arrivals: Arrivals,
    /// Closed loop: client k of C starts k/C of this later, as real clients connect
    /// over time rather than in one millisecond.
    pub ramp_up: Duration,
}

/// A round's records and its wall time.
#[derive(Debug)]
pub struct RoundResult {
    pub records: Vec<RequestRecord>,
    pub elapsed: Duration,
}

/// Runs a round to its end: every request sent is waited for (each is bounded by the
/// request timeout), and every one comes back as a record.
pub async fn run_round(context: Arc<TargetContext>, round: Round) -> RoundResult {
    let started = Instant::now();
    let conversations = match &context.kind {
        RequestKind::Conversations { spec } => Some(*spec),
        _ => None,
    };
    let records = match round.arrivals {
        Arrivals::Closed { concurrency } => match conversations {
            Some(spec) => conversation::run_round(context, round, spec, concurrency, started).await,
            None => closed_loop(context, round, concurrency, started).await,
        },
        Arrivals::Open { rate, max_concurrency } => {
            open_loop(context, round, rate, max_concurrency, started).await
        }
    };
    RoundResult { records, elapsed: started.elapsed() }
}

async fn closed_loop(
    context: Arc<TargetContext>,
    round: Round,
    concurrency: usize,
    started: Instant,
) -> Vec<RequestRecord> {
    let next = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::with_capacity(concurrency);
    for client in 0..concurrency {
        let (context, next) = (context.clone(), next.clone());
        let start_at = started + round.ramp_up.mul_f64(client as f64 / concurrency as f64);
        clients.push(tokio::spawn(async move {
            tokio::time::sleep_until(start_at.into()).await;
            let mut records = Vec::new();
            loop {
                let offset = next.fetch_add(1, Ordering::Relaxed);
                let in_budget = match round.budget {
                    Budget::Requests(count) => offset < count,
                    Budget::Duration(length) => started.elapsed() < length,
                };
                if !in_budget {
                    break;
                }
                let at = started.elapsed();
                records.push(one_request(&context, round, offset, at, started).await);
            }
            records
        }));
    }
    let mut records = Vec::new();
    for client in clients {
        // A client task only ends by panicking if the code is wrong; its requests are lost
        // with it, so say so loudly rather than skew the figures quietly.
        records.extend(client.await.expect("a client task panicked"));
    }
    records.sort_by_key(|record| record.index);
    records
}

async fn open_loop(
    context: Arc<TargetContext>,
    round: Round,
    rate: f64,
    max_concurrency: Option<usize>,
    started: Instant,
) -> Vec<RequestRecord> {
    let slots = max_concurrency.map(|limit| Arc::new(Semaphore::new(limit)));
    // With --max-concurrency, waiting requests hold no connection: that cap is the bound.
    let in_flight_cap =
        max_concurrency.is_none().then(|| Arc::new(Semaphore::new(context.in_flight_cap)));
    let schedule_rng = StdRng::seed_from_u64(context.seed ^ u64::from(round.number) << 32);
    let mut in_flight = Vec::new();
    let mut not_sent = Vec::new();
    for (offset, due) in PoissonSchedule::new(rate, schedule_rng).enumerate() {
        let offset = offset as u64;
        let in_budget = match round.budget {
            Budget::Requests(count) => offset < count,
            Budget::Duration(length) => due < length,
        };
        if !in_budget {
            break;
        }
        tokio::time::sleep_until((started + due).into()).await;
        let index = round.first_index + offset;
        let cap_permit = match &in_flight_cap {
            None => None,
            Some(cap) => cap.clone().try_acquire_owned().ok(),
        };
        if in_flight_cap.is_some() && cap_permit.is_none() {
            let mut record = RequestRecord::failed(index, round.number, due, started.elapsed());
            record.outcome = Outcome::NotSent;
            context.progress.record(false);
            not_sent.push(record);
            continue;
        }
        let (context, slots) = (context.clone(), slots.clone());
        in_flight.push((
            index,
            due,
            tokio::spawn(async move {
                let _cap = cap_permit;
                let _slot = match slots {
                    Some(slots) => Some(slots.acquire_owned().await.expect("never closed")),
                    None => None,
                };
                one_request(&context, round, offset, due, started).await
            }),
        ));
    }
    let mut records = not_sent;
    records.reserve(in_flight.len());
    for (index, due, task) in in_flight {
        records.push(task.await.unwrap_or_else(|_| {
            let mut record = RequestRecord::failed(index, round.number, due, due);
            record.outcome = Outcome::Unfinished;
            record
        }));
    }
    records.sort_by_key(|record| record.index);
    records
}

async fn one_request(
    context: &TargetContext,
    round: Round,
    offset: u64,
    scheduled_at: Duration,
    started: Instant,
) -> RequestRecord {
    let index = round.first_index + offset;
    let mut record = RequestRecord::failed(index, round.number, scheduled_at, scheduled_at);
    match &context.kind {
        RequestKind::Streaming { mix } => {
            let mut rng = StdRng::seed_from_u64(context.seed.wrapping_add(index));
            let shape = Workload::pick_shape(mix, &mut rng);
            let body = context.template.streaming_body(shape, context.seed, index);
            record.sent_at = started.elapsed();
            let options = StreamOptions::default();
            let (input, output) = (shape.input_tokens, shape.output_tokens);
            let template = &context.template;
            send_streaming(&context.client, template, body, input, output, options, &mut record)
                .await;
        }
        RequestKind::SharedPrefix { spec } => {
            let prompt = spec.prompt(context.seed, index);
            let messages = [("system", prompt.context.as_str()), ("user", &prompt.question)];
            let body = context.template.messages_body(&messages, spec.output_tokens, None);
            let shape = spec.shape();
            let (input, output) = (shape.input_tokens, shape.output_tokens);
            record.sent_at = started.elapsed();
            let template = &context.template;
            let options = StreamOptions::default();
            send_streaming(&context.client, template, body, input, output, options, &mut record)
                .await;
        }
        RequestKind::Conversations { .. } => {
            unreachable!("conversations run in their own loop (conversation::run_round)")
        }
        RequestKind::Tiny { body } => {
            record.sent_at = started.elapsed();
            send_plain(&context.client, &context.template, body.clone(), &mut record).await;
        }
    }
    context.progress.record(record.outcome.is_success());
    record
}
