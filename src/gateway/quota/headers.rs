//! OpenAI's rate-limit headers, as clients and SDKs read them: limit, remaining and time to
//! reset, for requests and for tokens.

use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::Buckets;

/// One bucket's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitState {
    pub limit: u64,
    pub remaining: u64,
    pub reset: Duration,
}

/// The figures sent back with a tenant's response; `None` where the tenant has no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimitHeaders {
    pub requests: Option<LimitState>,
    pub tokens: Option<LimitState>,
}

impl RateLimitHeaders {
    pub(super) fn read(buckets: &mut Buckets, now: Instant) -> Self {
        let state = |bucket: &mut Option<super::Bucket>| {
            bucket.as_mut().map(|bucket| LimitState {
                limit: bucket.limit(),
                remaining: bucket.remaining(now),
                reset: bucket.until_full(now),
            })
        };
        Self { requests: state(&mut buckets.requests), tokens: state(&mut buckets.tokens) }
    }

    /// Adds the headers (`x-ratelimit-limit-requests`, ...) to `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (suffix, state) in [("requests", self.requests), ("tokens", self.tokens)] {
            let Some(state) = state else { continue };
            let mut put = |name: &str, value: String| {
                if let (Ok(name), Ok(value)) =
                    (HeaderName::try_from(format!("x-ratelimit-{name}-{suffix}")), value.parse())
                {
                    let value: HeaderValue = value;
                    headers.insert(name, value);
                }
            };
            put("limit", state.limit.to_string());
            put("remaining", state.remaining.to_string());
            put("reset", duration_text(state.reset));
        }
    }
}

/// `250ms`, `6s`, `1m30s`: the duration form OpenAI's reset headers use.
pub fn duration_text(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let secs = duration.as_secs_f64().ceil() as u64;
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s}s"),
        (m, s) => format!("{m}m{s}s"),
    }
}
