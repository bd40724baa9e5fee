//! Tenants' counters in Redis (`[limits] store`), so that every gateway pointed at it
//! enforces one budget: one atomic script per admission (requests, tokens and concurrency
//! together), one per settlement, leases renewed while their streams run. Every call is
//! bounded by the configured timeout; a call that fails or runs out of time returns `None`
//! and the caller decides on local counters (see [`super::store_health`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use redis::{RedisError, Script};

use super::TenantMetrics;
use super::headers::{LimitState, RateLimitHeaders};
use super::store_health::StoreHealth;
use crate::gateway::config::{QuotaStoreConfig, TenantLimits};
use crate::gateway::store_connection;

/// A lease outlives its gateway by at most this long: renewed every third of it while the
/// request runs, it lapses when the gateway that holds it is gone.
pub const LEASE_LIFETIME: Duration = Duration::from_secs(30);
/// A bucket untouched this long is full again (a bucket holds at most one minute of debt,
/// refilled in two), so its key may go.
const BUCKET_KEY_LIFETIME: Duration = Duration::from_secs(130);
/// Background calls (settlement, release, renewal) are off the request path: more patience.
const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(1);

/// The shared store of one gateway state; clones share one connection.
#[derive(Clone)]
pub struct SharedStore {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    connection: ConnectionManager,
    prefix: String,
    timeout: Duration,
    /// Makes this gateway's lease ids unique among all gateways on the store.
    instance: String,
    next_lease: AtomicU64,
    /// Live leases (id -> leases key), renewed in the background.
    leases: Mutex<HashMap<String, String>>,
    health: StoreHealth,
    admit: Script,
    settle: Script,
    renew: Script,
}

/// A concurrency place held in the store.
#[derive(Debug)]
pub struct Lease {
    id: String,
    key: String,
}

/// What the store decided for one request.
pub struct StoreVerdict {
    /// Which limit refused it and when to retry; `None`: admitted.
    pub refused: Option<(&'static str, Duration)>,
    pub headers: RateLimitHeaders,
    pub lease: Option<Lease>,
}

impl SharedStore {
    /// A store whose connection is made in the background; until it answers, requests are
    /// decided locally. Must run inside a tokio runtime.
    pub fn open(
        config: &QuotaStoreConfig,
        metrics: Arc<TenantMetrics>,
    ) -> Result<Self, RedisError> {
        let connection = store_connection::open(&config.url)?;
        let inner = Arc::new(StoreInner {
            connection,
            prefix: config.key_prefix.clone(),
            timeout: config.timeout,
            instance: format!("{:016x}", rand::random::<u64>()),
            next_lease: AtomicU64::new(0),
            leases: Mutex::new(HashMap::new()),
            health: StoreHealth::new(metrics, Instant::now()),
            admit: Script::new(include_str!("scripts/admit.lua")),
            settle: Script::new(include_str!("scripts/settle.lua")),
            renew: Script::new(include_str!("scripts/renew.lua")),
        });
        tokio::spawn(warm_up(Arc::downgrade(&inner)));
        tokio::spawn(renew_leases(Arc::downgrade(&inner)));
        Ok(Self { inner })
    }

    fn key(&self, tenant: &str, counter: &str) -> String {
        // The braces keep one tenant's keys in one slot, should the store be a cluster.
        format!("{}:{{{tenant}}}:{counter}", self.inner.prefix)
    }

    /// Admits one request in the store; `None` when the store did not answer in time.
    pub async fn admit(
        &self,
        tenant: &str,
        limits: TenantLimits,
        prompt_tokens: u64,
    ) -> Option<StoreVerdict> {
        let inner = &self.inner;
        if !inner.health.may_call(Instant::now()) {
            return None;
        }
        let lease = limits.max_concurrent.map(|_| Lease {
            id: format!("{}-{}", inner.instance, inner.next_lease.fetch_add(1, Ordering::Relaxed)),
            key: self.key(tenant, "leases"),
        });
        let mut invocation = inner.admit.prepare_invoke();
        invocation
            .key(self.key(tenant, "requests"))
            .key(self.key(tenant, "tokens"))
            .key(self.key(tenant, "leases"))
            .arg(limits.requests_per_minute.unwrap_or(0))
            .arg(limits.tokens_per_minute.unwrap_or(0))
            .arg(prompt_tokens)
            .arg(limits.max_concurrent.unwrap_or(0))
            .arg(lease.as_ref().map_or("", |lease| lease.id.as_str()))
            .arg(LEASE_LIFETIME.as_millis() as u64)
            .arg(BUCKET_KEY_LIFETIME.as_millis() as u64);
        let mut connection = inner.connection.clone();
        let answer = tokio::time::timeout(
            inner.timeout,
            invocation.invoke_async::<Vec<i64>>(&mut connection),
        )
        .await;
        let figures = match answer {
            Ok(Ok(figures)) if figures.len() == 6 => figures,
            Ok(Ok(figures)) => {
                let error = format!("admission script answered {} figures, not 6", figures.len());
                inner.health.failed(Instant::now(), &error);
                return None;
            }
            Ok(Err(error)) => {
                inner.health.failed(Instant::now(), &error);
                return None;
            }
            Err(_elapsed) => {
                inner.health.failed(Instant::now(), &"no answer within limits.store_timeout_ms");
                // The script may still have run and taken a place: give it back.
                if let Some(lease) = lease {
                    self.release(lease);
                }
                return None;
            }
        };
        inner.health.answered();
        let millis = |n: i64| Duration::from_millis(n.max(0) as u64);
        let state = |limit: Option<u64>, remaining: i64, reset: i64| {
            limit.map(|limit| LimitState {
                limit,
                remaining: remaining.max(0) as u64,
                reset: millis(reset),
            })
        };
        let headers = RateLimitHeaders {
            requests: state(limits.requests_per_minute, figures[2], figures[3]),
            tokens: state(limits.tokens_per_minute, figures[4], figures[5]),
        };
        let refused = match figures[0] {
            0 => None,
            1 => Some(("requests", millis(figures[1]))),
            2 => Some(("tokens", millis(figures[1]))),
            _ => Some(("concurrent requests", millis(figures[1]))),
        };
        let lease = if refused.is_none() { lease } else { None };
        if let Some(lease) = &lease {
            inner.leases.lock().insert(lease.id.clone(), lease.key.clone());
        }
        Some(StoreVerdict { refused, headers, lease })
    }

    /// Charges `delta` more tokens (negative: fewer) than were reserved, in the background.
    pub fn settle(&self, tenant: &str, tokens_per_minute: u64, delta: i64) {
        if delta == 0 || !self.inner.health.may_call(Instant::now()) {
            return;
        }
        let inner = self.inner.clone();
        let key = self.key(tenant, "tokens");
        spawn(async move {
            let mut invocation = inner.settle.prepare_invoke();
            invocation
                .key(key)
                .arg(tokens_per_minute)
                .arg(delta)
                .arg(BUCKET_KEY_LIFETIME.as_millis() as u64);
            let mut connection = inner.connection.clone();
            let call = invocation.invoke_async::<i64>(&mut connection);
            inner.record(tokio::time::timeout(BACKGROUND_TIMEOUT, call).await);
        });
    }

    /// Gives a concurrency place back, in the background.
    pub fn release(&self, lease: Lease) {
        let inner = self.inner.clone();
        inner.leases.lock().remove(&lease.id);
        spawn(async move {
            let mut connection = inner.connection.clone();
            let mut remove = redis::cmd("ZREM");
            let call = remove.arg(&lease.key).arg(&lease.id).query_async::<i64>(&mut connection);
            inner.record(tokio::time::timeout(BACKGROUND_TIMEOUT, call).await);
        });
    }

    /// A tenant request was decided locally.
    pub fn fell_back(&self) {
        self.inner.health.fell_back();
    }
}

impl StoreInner {
    fn record<T>(&self, result: Result<Result<T, RedisError>, tokio::time::error::Elapsed>) {
        match result {
            Ok(Ok(_)) => self.health.answered(),
            Ok(Err(error)) => self.health.failed(Instant::now(), &error),
            Err(_) => self.health.failed(Instant::now(), &"no answer in time"),
        }
    }
}

/// Runs `task` on the current runtime, if there is one (a ticket may drop after it ends).
fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

/// Connects and loads the scripts before the first request needs them.
async fn warm_up(inner: Weak<StoreInner>) {
    let Some(inner) = inner.upgrade() else { return };
    let mut connection = inner.connection.clone();
    let load = async {
        for script in [&inner.admit, &inner.settle, &inner.renew] {
            script.prepare_invoke().load_async(&mut connection).await?;
        }
        Ok::<(), RedisError>(())
    };
    inner.record(tokio::time::timeout(BACKGROUND_TIMEOUT * 2, load).await);
}

/// Keeps this gateway's live leases from lapsing, until the store is dropped.
async fn renew_leases(inner: Weak<StoreInner>) {
    let mut ticks = tokio::time::interval(LEASE_LIFETIME / 3);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
        for (id, key) in inner.leases.lock().iter() {
            by_key.entry(key.clone()).or_default().push(id.clone());
        }
        for (key, ids) in by_key {
            if !inner.health.may_call(Instant::now()) {
                break;
            }
            let mut invocation = inner.renew.prepare_invoke();
            invocation.key(key).arg(LEASE_LIFETIME.as_millis() as u64).arg(ids);
            let mut connection = inner.connection.clone();
            let call = invocation.invoke_async::<i64>(&mut connection);
            inner.record(tokio::time::timeout(BACKGROUND_TIMEOUT, call).await);
        }
    }
}
