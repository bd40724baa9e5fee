//! Per-tenant quotas: a request presenting a tenant's key is admitted only within the
//! tenant's requests per minute, tokens per minute (the prompt estimate reserved now, the
//! response's `usage` settled when the body ends) and requests at once. Every admitted or
//! refused request gets OpenAI's `x-ratelimit-*` headers; a refusal is a 429 with
//! `Retry-After`. Counters are per gateway; a reload starts them again.

pub mod bucket;
pub mod headers;
mod metrics;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::gateway::config::Flow;
use crate::gateway::config::{TenantConfig, TenantLimits};
use crate::gateway::secrets::bearer;
use bucket::Bucket;
pub use headers::RateLimitHeaders;
pub use metrics::TenantMetrics;

/// Every tenant, found by the SHA-256 of its keys.
pub struct Tenants {
    by_key: HashMap<[u8; 32], Arc<Tenant>>,
    metrics: Arc<TenantMetrics>,
}

/// One tenant's live counters.
pub struct Tenant {
    pub name: String,
    /// The tenant's place in the admission queue's fair order.
    flow: Flow,
    max_priority: u8,
    limits: TenantLimits,
    buckets: Mutex<Buckets>,
    in_flight: AtomicU64,
}

struct Buckets {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tenant `{tenant}` is over its {what} limit; retry in {retry_after_secs} s")]
pub struct QuotaExceeded {
    pub tenant: String,
    pub what: &'static str,
    pub retry_after_secs: u64,
    pub headers: RateLimitHeaders,
}

impl Tenants {
    pub fn new(config: &[TenantConfig], metrics: Arc<TenantMetrics>) -> Self {
        let now = Instant::now();
        let mut by_key = HashMap::new();
        for tenant in config {
            let live = Arc::new(Tenant {
                name: tenant.name.clone(),
                flow: Flow {
                    key: Arc::from(tenant.name.as_str()),
                    weight: tenant.weight,
                    band: tenant.priority,
                },
                max_priority: tenant.max_priority,
                limits: tenant.limits,
                buckets: Mutex::new(Buckets {
                    requests: tenant.limits.requests_per_minute.map(|n| Bucket::new(n, now)),
                    tokens: tenant.limits.tokens_per_minute.map(|n| Bucket::new(n, now)),
                }),
                in_flight: AtomicU64::new(0),
            });
            for key in &tenant.keys {
                by_key.insert(Sha256::digest(key.trim().as_bytes()).into(), live.clone());
            }
        }
        Self { by_key, metrics }
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The tenant whose key the request presents, if any.
    pub fn of(&self, headers: &HeaderMap) -> Option<Arc<Tenant>> {
        if self.by_key.is_empty() {
            return None;
        }
        let key: [u8; 32] = Sha256::digest(bearer(headers)?.trim().as_bytes()).into();
        self.by_key.get(&key).cloned()
    }

    /// Admits one request of `prompt_tokens` (estimated) for `tenant` at `now`.
    pub fn admit(
        &self,
        tenant: &Arc<Tenant>,
        prompt_tokens: u64,
        now: Instant,
    ) -> Result<QuotaTicket, QuotaExceeded> {
        let mut buckets = tenant.buckets.lock();
        let mut refused: Option<(&'static str, Duration)> = None;
        if let Some(bucket) = &mut buckets.requests {
            let wait = bucket.wait_for(1, now);
            if !wait.is_zero() {
                refused = Some(("requests", wait));
            }
        }
        if let Some(bucket) = &mut buckets.tokens {
            let wait = bucket.wait_for(prompt_tokens, now);
            if !wait.is_zero() && refused.is_none_or(|(_, other)| wait > other) {
                refused = Some(("tokens", wait));
            }
        }
        let limit = tenant.limits.max_concurrent;
        if refused.is_none() && limit.is_some_and(|max| tenant.in_flight() >= max) {
            // A place frees when a response ends: no better hint than a second.
            refused = Some(("concurrent requests", Duration::from_secs(1)));
        }
        if let Some((what, wait)) = refused {
            let headers = RateLimitHeaders::read(&mut buckets, now);
            drop(buckets);
            self.metrics.record_refused(&tenant.name, what);
            return Err(QuotaExceeded {
                tenant: tenant.name.clone(),
                what,
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
                headers,
            });
        }
        if let Some(bucket) = &mut buckets.requests {
            bucket.take(1, now);
        }
        if let Some(bucket) = &mut buckets.tokens {
            bucket.take(prompt_tokens, now);
        }
        let headers = RateLimitHeaders::read(&mut buckets, now);
        drop(buckets);
        tenant.in_flight.fetch_add(1, Ordering::Relaxed);
        self.metrics.record_admitted(&tenant.name, tenant.in_flight());
        Ok(QuotaTicket {
            tenant: tenant.clone(),
            metrics: self.metrics.clone(),
            reserved_tokens: prompt_tokens,
            headers,
            settled: false,
        })
    }
}

impl Tenant {
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The tenant's flow, in the band asked for (`x-laneway-priority`) up to its maximum.
    pub fn flow(&self, asked: Option<u8>) -> Flow {
        let band = asked.map_or(self.flow.band, |band| band.min(self.max_priority));
        Flow { band, ..self.flow.clone() }
    }
}

/// An admitted request's hold on its tenant: its place among the concurrent requests
/// (freed on drop) and its reserved tokens (corrected by [`QuotaTicket::settle`]).
pub struct QuotaTicket {
    tenant: Arc<Tenant>,
    metrics: Arc<TenantMetrics>,
    reserved_tokens: u64,
    /// The limits as they stood after admission, for the response's headers.
    pub headers: RateLimitHeaders,
    settled: bool,
}

impl QuotaTicket {
    /// Charges what the request really used (the response's `usage`, prompt plus
    /// completion) instead of the reservation.
    pub fn settle(mut self, prompt_tokens: u64, completion_tokens: u64) {
        let used = prompt_tokens + completion_tokens;
        if let Some(bucket) = &mut self.tenant.buckets.lock().tokens {
            bucket.settle(used as i64 - self.reserved_tokens as i64, Instant::now());
        }
        self.metrics.record_tokens(&self.tenant.name, prompt_tokens, completion_tokens);
        self.settled = true;
    }
}

impl Drop for QuotaTicket {
    fn drop(&mut self) {
        let left = self.tenant.in_flight.fetch_sub(1, Ordering::Relaxed) - 1;
        self.metrics.set_in_flight(&self.tenant.name, left);
    }
}

#[cfg(test)]
mod tests;
