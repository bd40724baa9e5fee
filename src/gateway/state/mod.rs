//! The running gateway's state: what every request handler shares (the validated config,
//! the picker, one connector per entry, the canary [`variants`], the metrics), and how it
//! changes. Read-only once built: a [`reload`] builds a new state that keeps the [`Shared`]
//! parts and the replicas by name, and [`canary_actions`] change variant weights on
//! verdicts; what changes between reloads (load figures, drain flags, variant weights) is
//! atomic or `ArcSwap`.

pub mod canary_actions;
pub mod reload;
pub mod variants;

use std::sync::Arc;

use tokio::sync::watch;

use crate::canary::{CanaryRecorder, CanarySettings, CompareSettings};
use crate::gateway::admission::Admission;
use crate::gateway::config::Entry;
use crate::gateway::config::GatewayConfig;
use crate::gateway::forward::Connector;
use crate::gateway::forward::ready::ReadyCounts;
use crate::gateway::forward::retry::RetryBudget;
use crate::gateway::health::{HealthTracker, ReliabilityMetrics};
use crate::gateway::observe::GatewayMetrics;
use crate::gateway::pick::prefix::EngineTokens;
use crate::gateway::pick::prefix::PlacementStore;
use crate::gateway::pick::{Picker, PrefixRouter};
use crate::gateway::quota::{TenantMetrics, Tenants};
use crate::gateway::state::variants::Variants;
use crate::gateway::tls::upstream::UpstreamTls;

/// The parts that outlive a reload: counters, queues and budgets must not restart at zero.
#[derive(Clone)]
pub struct Shared {
    pub metrics: Arc<GatewayMetrics>,
    pub reliability_metrics: Arc<ReliabilityMetrics>,
    pub admission: Arc<Admission>,
    pub retry_budget: Arc<RetryBudget>,
    /// Turns true when the drain deadline passed: open streams end with an error event.
    pub abort_streams: watch::Receiver<bool>,
    /// The canary comparison keeps its samples across reloads.
    pub canary: CanaryRecorder,
    /// The `prefix_aware` index keeps what it learned across reloads.
    pub prefix: Arc<PrefixRouter>,
    /// The latest N-1 capacity report and its gauges.
    pub capacity: Arc<crate::gateway::capacity::CapacityShared>,
    /// Usage per tenant, registered once.
    pub tenant_metrics: Arc<TenantMetrics>,
    /// What `force_close`'s ready connections did, registered once.
    pub ready_counts: ReadyCounts,
}

impl Shared {
    pub fn new(config: &GatewayConfig, abort_streams: watch::Receiver<bool>) -> Self {
        let metrics = Arc::new(GatewayMetrics::new());
        let reliability_metrics = Arc::new(ReliabilityMetrics::new(metrics.registry()));
        let reliability = &config.reliability;
        let tenant_metrics = Arc::new(TenantMetrics::new(metrics.registry()));
        Self {
            tenant_metrics,
            ready_counts: ReadyCounts::new(metrics.registry()),
            admission: Arc::new(Admission::new(
                reliability.admission.clone(),
                reliability_metrics.clone(),
            )),
            retry_budget: Arc::new(RetryBudget::new(&reliability.retry)),
            prefix: Arc::new(prefix_router(config, metrics.registry())),
            capacity: Arc::new(crate::gateway::capacity::CapacityShared::new(metrics.registry())),
            metrics,
            reliability_metrics,
            abort_streams,
            canary: CanaryRecorder::spawn(
                CanarySettings {
                    window: config.canary.window,
                    slo: config.canary.slo,
                    compare: CompareSettings::default(),
                    guard: config.canary.guard.clone(),
                },
                Vec::new(),
            ),
        }
    }
}

/// The prefix router, sharing placements through `[limits] store` when
/// `prefix.share_sessions` or `prefix.share_prefixes` (read at start: reloads keep the
/// router and its store).
fn prefix_router(config: &GatewayConfig, registry: &prometheus::Registry) -> PrefixRouter {
    let router = PrefixRouter::new(&config.prefix, registry);
    let (sessions, prefixes) = (config.prefix.share_sessions, config.prefix.share_prefixes);
    let Some(store) = config.quota_store.as_ref().filter(|_| sessions || prefixes) else {
        return router;
    };
    match PlacementStore::open(store, registry) {
        Ok(shared) => router.with_store(shared, sessions, prefixes),
        Err(error) => {
            tracing::warn!(%error, "shared placement store unusable: placements are not shared");
            router
        }
    }
}

pub struct GatewayState {
    pub config: GatewayConfig,
    pub picker: Arc<Picker>,
    pub metrics: Arc<GatewayMetrics>,
    pub variants: Variants,
    pub health: Arc<HealthTracker>,
    pub shared: Shared,
    /// Tenants' quotas (`[[tenants]]`).
    pub tenants: Tenants,
    /// TLS to https replicas, read from `[upstream_tls]` when this state was built (so a
    /// reload reads the files again); shared by the connectors, scrapers and checks.
    pub upstream_tls: Arc<UpstreamTls>,
    /// The served models' tokenizers and the engines' block hasher (prefix placement).
    pub engine_tokens: EngineTokens,
    short: Connector,
    long: Connector,
    debug: Connector,
}

impl GatewayState {
    /// A state of its own, whose streams nothing aborts (the watchdog reads a closed abort
    /// channel as "never"): for tests and tools. Must run inside a tokio runtime (the
    /// canary recorder is a task).
    pub fn new(config: GatewayConfig) -> Self {
        let (_abort, aborted) = watch::channel(false);
        let shared = Shared::new(&config, aborted);
        let picker = Arc::new(Picker::new(&config));
        Self::with_shared(config, picker, shared)
    }

    /// Builds a state around `picker`, reusing `shared`.
    pub fn with_shared(config: GatewayConfig, picker: Arc<Picker>, shared: Shared) -> Self {
        let upstream_tls = Arc::new(UpstreamTls::load_or_unavailable(&config.upstream_tls));
        let ready_counts = shared.ready_counts.clone();
        let connector = |entry| {
            Connector::new(
                config.entry(entry),
                config.connect_timeout,
                config.reliability.timeouts.first_byte,
                upstream_tls.clone(),
                &ready_counts,
            )
        };
        let health = Arc::new(HealthTracker::new(
            picker.clone(),
            config.reliability.health.clone(),
            shared.reliability_metrics.clone(),
        ));
        let variants = Variants::new(&config, &upstream_tls, &ready_counts);
        shared.prefix.index.set_capacity_bytes(config.prefix.index_bytes);
        shared.canary.set_layout(variants.layout());
        let tenants = Tenants::new(
            &config.tenants,
            config.quota_store.as_ref(),
            shared.tenant_metrics.clone(),
        );
        Self {
            tenants,
            picker,
            metrics: shared.metrics.clone(),
            variants,
            health,
            shared,
            short: connector(Entry::Short),
            long: connector(Entry::Long),
            debug: connector(Entry::Debug),
            upstream_tls,
            engine_tokens: EngineTokens::new(&config),
            config,
        }
    }

    pub fn connector(&self, entry: Entry) -> &Connector {
        match entry {
            Entry::Short => &self.short,
            Entry::Long => &self.long,
            Entry::Debug => &self.debug,
        }
    }
}
