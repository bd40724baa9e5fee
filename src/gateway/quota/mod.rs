//! Per-tenant quotas: a request presenting a tenant's key is admitted only within the
//! tenant's requests per minute, tokens per minute (the prompt estimate reserved now, the
//! response's `usage` settled when the body ends) and requests at once. Every admitted or
//! refused request gets OpenAI's `x-ratelimit-*` headers; a refusal is a 429 with
//! `Retry-After`. Counters are per gateway (a reload starts them again) unless `[limits]
//! store` shares them in Redis; local counters are kept either way, and decide whenever
//! the store does not answer.

pub mod bucket;
pub mod headers;
mod metrics;
pub mod shared_store;
mod store_health;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::HeaderMap;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::gateway::config::Flow;
use crate::gateway::config::{QuotaStoreConfig, TenantConfig, TenantLimits};
use crate::gateway::secrets::bearer;
use bucket::Bucket;
pub use headers::RateLimitHeaders;
pub use metrics::TenantMetrics;
use shared_store::{Lease, SharedStore, StoreVerdict};

/// Every tenant, found by the SHA-256 of its keys.
pub struct Tenants {
    by_key: HashMap<[u8; 32], Arc<Tenant>>,
    metrics: Arc<TenantMetrics>,
    /// Counters shared with other gateways, if configured.
    store: Option<SharedStore>,
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
    /// The tenants of `config`, their counters shared through `store` if given (which then
    /// needs a tokio runtime).
    pub fn new(
        config: &[TenantConfig],
        store: Option<&QuotaStoreConfig>,
        metrics: Arc<TenantMetrics>,
    ) -> Self {
        let store = store.filter(|_| !config.is_empty()).and_then(|store| {
            SharedStore::open(store, metrics.clone())
                .inspect_err(|error| tracing::warn!(%error, "shared quota store unusable"))
                .ok()
        });
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
        Self { by_key, metrics, store }
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

    /// Admits one request of `prompt_tokens` (estimated) for `tenant`: by the shared store
    /// if there is one and it answers in time, else by this gateway's counters.
    pub async fn admit(
        &self,
        tenant: &Arc<Tenant>,
        prompt_tokens: u64,
    ) -> Result<QuotaTicket, QuotaExceeded> {
        let Some(store) = &self.store else {
            return self.admit_locally(tenant, prompt_tokens, Instant::now());
        };
        match store.admit(&tenant.name, tenant.limits, prompt_tokens).await {
            Some(verdict) => self.apply(tenant, prompt_tokens, verdict, store),
            None => {
                store.fell_back();
                let mut ticket = self.admit_locally(tenant, prompt_tokens, Instant::now())?;
                // Nothing was reserved in the store: settlement charges it all there.
                ticket.shared = Some(SharedHold { store: store.clone(), reserved: 0, lease: None });
                Ok(ticket)
            }
        }
    }

    /// Follows the store's verdict; an admitted request is charged to the local counters
    /// too, so that they are current should the store stop answering.
    fn apply(
        &self,
        tenant: &Arc<Tenant>,
        prompt_tokens: u64,
        verdict: StoreVerdict,
        store: &SharedStore,
    ) -> Result<QuotaTicket, QuotaExceeded> {
        if let Some((what, wait)) = verdict.refused {
            self.metrics.record_refused(&tenant.name, what);
            return Err(QuotaExceeded {
                tenant: tenant.name.clone(),
                what,
                retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
                headers: verdict.headers,
            });
        }
        let now = Instant::now();
        let mut buckets = tenant.buckets.lock();
        if let Some(bucket) = &mut buckets.requests {
            bucket.charge(1, now);
        }
        if let Some(bucket) = &mut buckets.tokens {
            bucket.charge(prompt_tokens, now);
        }
        drop(buckets);
        let mut ticket = self.ticket(tenant, prompt_tokens, verdict.headers);
        let reserved = prompt_tokens.min(tenant.limits.tokens_per_minute.unwrap_or(0));
        ticket.shared = Some(SharedHold { store: store.clone(), reserved, lease: verdict.lease });
        Ok(ticket)
    }

    /// Admits one request of `prompt_tokens` (estimated) for `tenant` at `now` on this
    /// gateway's counters alone.
    pub fn admit_locally(
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
        Ok(self.ticket(tenant, prompt_tokens, headers))
    }

    fn ticket(
        &self,
        tenant: &Arc<Tenant>,
        prompt_tokens: u64,
        headers: RateLimitHeaders,
    ) -> QuotaTicket {
        tenant.in_flight.fetch_add(1, Ordering::Relaxed);
        self.metrics.record_admitted(&tenant.name, tenant.in_flight());
        QuotaTicket {
            tenant: tenant.clone(),
            metrics: self.metrics.clone(),
            reserved_tokens: prompt_tokens,
            headers,
            shared: None,
        }
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
    /// Its part in the shared store, when there is one.
    shared: Option<SharedHold>,
}

/// What an admitted request holds in the shared store.
struct SharedHold {
    store: SharedStore,
    /// Tokens reserved there (none if the request was admitted locally).
    reserved: u64,
    lease: Option<Lease>,
}

impl QuotaTicket {
    /// Charges what the request really used (the response's `usage`, prompt plus
    /// completion) instead of the reservation.
    pub fn settle(self, prompt_tokens: u64, completion_tokens: u64) {
        let used = prompt_tokens + completion_tokens;
        if let Some(bucket) = &mut self.tenant.buckets.lock().tokens {
            bucket.settle(used as i64 - self.reserved_tokens as i64, Instant::now());
        }
        self.metrics.record_tokens(&self.tenant.name, prompt_tokens, completion_tokens);
        let limit = self.tenant.limits.tokens_per_minute;
        if let (Some(shared), Some(limit)) = (&self.shared, limit) {
            let delta = used as i64 - shared.reserved as i64;
            shared.store.settle(&self.tenant.name, limit, delta);
        }
    }
}

impl Drop for QuotaTicket {
    fn drop(&mut self) {
        let left = self.tenant.in_flight.fetch_sub(1, Ordering::Relaxed) - 1;
        self.metrics.set_in_flight(&self.tenant.name, left);
        if let Some(SharedHold { store, lease: Some(lease), .. }) = self.shared.take() {
            store.release(lease);
        }
    }
}

#[cfg(test)]
mod tests;
