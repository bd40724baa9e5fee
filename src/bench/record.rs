//! What the load generator keeps for every request it sent, whatever became of it: failed,
//! timed-out and unfinished requests are records too, so they are counted, never dropped.

use std::time::Duration;

use serde::Serialize;

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    /// A complete response: for a stream, `[DONE]` (or the usage chunk) arrived.
    Success,
    /// The target answered with a non-2xx status.
    HttpStatus(u16),
    /// No connection, or the connection broke before the response headers.
    Connect(String),
    /// The whole request took longer than `--timeout`.
    Timeout,
    /// The stream ended without `[DONE]`.
    Truncated,
    /// The stream carried an error event.
    StreamError(String),
    /// The run's hard end came while the request was still running.
    Unfinished,
    /// Never sent: the open loop's in-flight cap was full when it was due. Counted as a
    /// failure, so an overloaded target cannot make the generator quietly slow down.
    NotSent,
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success)
    }

    /// A short stable name for tables and JSON.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::HttpStatus(_) => "http_status",
            Self::Connect(_) => "connect",
            Self::Timeout => "timeout",
            Self::Truncated => "truncated",
            Self::StreamError(_) => "stream_error",
            Self::Unfinished => "unfinished",
            Self::NotSent => "not_sent",
        }
    }
}

/// One request's timings and counts. Durations are measured from the moment the request
/// was handed to the connection (`sent_at`), as the field does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Position in the target's request sequence; the same index means the same prompt on
    /// every target.
    pub index: u64,
    /// Interleaving round the request belonged to.
    pub round: u32,
    /// When the arrival schedule wanted it sent, from the start of its round.
    #[serde(serialize_with = "as_micros")]
    pub scheduled_at: Duration,
    /// When it was actually sent, from the start of its round (later than `scheduled_at`
    /// only when a concurrency cap held it back).
    #[serde(serialize_with = "as_micros")]
    pub sent_at: Duration,
    pub outcome: Outcome,
    pub status: Option<u16>,
    /// Time to the first event with non-empty `choices`.
    #[serde(serialize_with = "option_as_micros")]
    pub ttft: Option<Duration>,
    /// Time to the last chunk (streams) or to the end of the body.
    #[serde(serialize_with = "as_micros")]
    pub e2e: Duration,
    /// Gaps between consecutive chunks that carried choices, one per chunk after the first.
    #[serde(serialize_with = "vec_as_micros")]
    pub itl: Vec<Duration>,
    /// Prompt tokens the request asked for (usage's count when the target reported one).
    pub prompt_tokens: u64,
    /// Output tokens: `usage.completion_tokens`, else the number of choice chunks.
    pub output_tokens: u64,
    /// Prompt tokens the target served from its prefix cache, when its usage said so.
    pub cached_tokens: Option<u64>,
    /// Events with non-empty choices that arrived (streams only): a proxy that loses or
    /// merges chunks shows here against a direct run of the same requests.
    pub chunks: u64,
    /// Where it was served, when the response said so (streams only): the replica (the
    /// simulator's `x-sim-replica`, else laneway's `x-laneway-replica`) and the simulator's
    /// API process (`x-sim-api-worker`), which every proxy passes on. Placement can then be
    /// read per target, peers included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_worker: Option<u32>,
}

impl RequestRecord {
    /// A record for a request that never produced a response.
    pub fn failed(index: u64, round: u32, scheduled_at: Duration, sent_at: Duration) -> Self {
        Self {
            index,
            round,
            scheduled_at,
            sent_at,
            outcome: Outcome::Unfinished,
            status: None,
            ttft: None,
            e2e: Duration::ZERO,
            itl: Vec::new(),
            prompt_tokens: 0,
            output_tokens: 0,
            cached_tokens: None,
            chunks: 0,
            replica: None,
            api_worker: None,
        }
    }

    /// TPOT as the field defines it: (E2E - TTFT) / (output tokens - 1); none for a
    /// one-token output or a request without a first token.
    pub fn tpot(&self) -> Option<Duration> {
        let ttft = self.ttft?;
        if self.output_tokens < 2 {
            return None;
        }
        let decode = self.e2e.saturating_sub(ttft);
        Some(decode / (self.output_tokens - 1) as u32)
    }
}

fn as_micros<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(value.as_micros() as u64)
}

fn option_as_micros<S: serde::Serializer>(
    value: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.serialize_some(&(value.as_micros() as u64)),
        None => serializer.serialize_none(),
    }
}

fn vec_as_micros<S: serde::Serializer>(
    values: &[Duration],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(values.iter().map(|v| v.as_micros() as u64))
}
