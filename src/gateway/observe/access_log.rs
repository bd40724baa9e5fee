//! The access log: one `tracing` event per request at target `laneway::access`, written
//! when the response ends (streams included), so it carries TTFT, tokens and the full
//! duration. `--log-json` turns it into one JSON object per line; `RUST_LOG` can route or
//! silence it by its target (`RUST_LOG=info,laneway::access=off`).

use std::time::Duration;

/// Everything one access line says.
#[derive(Debug, Clone)]
pub struct AccessRecord<'a> {
    pub request_id: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub entry: &'a str,
    pub variant: &'a str,
    /// `-` when the gateway answered itself.
    pub replica: &'a str,
    pub status: u16,
    pub ttft: Option<Duration>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub duration: Duration,
    /// `complete`, `upstream_reset`, `client_gone`, or the gateway's error kind.
    pub outcome: &'a str,
}

/// Writes the line.
pub fn emit(record: &AccessRecord<'_>) {
    tracing::info!(
        target: "laneway::access",
        request_id = record.request_id,
        method = record.method,
        path = record.path,
        entry = record.entry,
        variant = record.variant,
        replica = record.replica,
        status = record.status,
        ttft_ms = record.ttft.map(|ttft| ttft.as_secs_f64() * 1e3),
        prompt_tokens = record.prompt_tokens,
        completion_tokens = record.completion_tokens,
        duration_ms = record.duration.as_secs_f64() * 1e3,
        outcome = record.outcome,
        "access"
    );
}
