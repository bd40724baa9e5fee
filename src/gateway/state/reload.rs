//! Hitless reload: a new config (from `GatewayHandle::reload`, or the config file on
//! SIGHUP) is validated, then the whole request-path state switches atomically. Each
//! request loads the state once when it starts, so requests in flight finish on the old
//! settings. The replica set outlives the switch: the reload submits the new static list
//! to it, discovered replicas stay, and replicas that keep their name and address keep
//! their load counters, health and scrapers; counters, queues and budgets carry over.
//! Discovery sources restart only when `[discovery]` changed. An invalid file is refused
//! with a log line per problem, and the old config stays. Listener settings (addresses,
//! header limits) are fixed at start: a change to them is logged and ignored.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::gateway::config::DiscoveryConfig;
use crate::gateway::config::{ConfigError, GatewayConfig};
use crate::gateway::discovery;
use crate::gateway::kv_events::following::Following;
use crate::gateway::pick::{Picker, Replica, ReplicaSet, Source};
use crate::gateway::state::GatewayState;

/// The state every request loads once at its start.
pub type LiveState = ArcSwap<GatewayState>;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("replicas: at least one [[replicas]] entry or a [discovery] source is required")]
    NoReplicas,
}

/// Swaps states, and keeps the replica set's static list, scrapers and discovery sources
/// in step with the config.
pub struct Reloader {
    live: Arc<LiveState>,
    /// The running discovery sources and the config they run with; serialises reloads.
    discovery: Mutex<Discovery>,
}

struct Discovery {
    config: DiscoveryConfig,
    task: Option<JoinHandle<()>>,
}

impl Reloader {
    /// Starts scraping the current replica set and the configured discovery sources.
    pub async fn start(live: Arc<LiveState>) -> Self {
        let state = live.load_full();
        let set = state.picker.set();
        let following = Following::of(&state.config);
        set.scrape(state.config.scrape_interval, state.upstream_tls.clone(), following, true).await;
        let config = state.config.discovery.clone();
        let task = config.is_active().then(|| discovery::spawn(set.clone(), &config));
        Self { live, discovery: Mutex::new(Discovery { config, task }) }
    }

    pub fn live(&self) -> &Arc<LiveState> {
        &self.live
    }

    /// Switches to `config`.
    pub async fn apply(&self, config: GatewayConfig) -> Result<(), ReloadError> {
        if config.replicas.is_empty() && !config.discovery.is_active() {
            return Err(ReloadError::NoReplicas);
        }
        let mut discovery = self.discovery.lock().await;
        let previous = self.live.load_full();
        warn_fixed_settings(&previous.config, &config);
        let set = previous.picker.set().clone();
        let before = set.snapshot();
        set.submit(Source::Static, config.replicas.clone()).await;
        if discovery.config != config.discovery {
            discovery.restart(&set, &config.discovery).await;
        }
        let next = rebuild(&previous, config);
        // Certificate files were read again for the new state: scrapers reconnect with them.
        let tls_configured = next.config.upstream_tls != Default::default();
        let following = Following::of(&next.config);
        let (interval, tls) = (next.config.scrape_interval, next.upstream_tls.clone());
        set.scrape(interval, tls, following, tls_configured).await;
        forget_removed(&before, &next);
        let replicas = next.picker.snapshot().len();
        self.live.store(Arc::new(next));
        // New limits may make room for requests waiting in the queue.
        self.live.load().shared.admission.notify_room();
        tracing::info!(replicas, "configuration reloaded");
        Ok(())
    }

    /// Reads, validates and applies a config file; on error logs every problem and keeps
    /// the current config.
    pub async fn apply_file(&self, path: &std::path::Path) -> Result<(), ReloadError> {
        let result = match GatewayConfig::load(path) {
            Ok(config) => self.apply(config).await,
            Err(error) => Err(error.into()),
        };
        if let Err(error) = &result {
            match error {
                ReloadError::Invalid(invalid) => {
                    for issue in &invalid.issues {
                        tracing::error!(path = %issue.path, message = %issue.message, "config rejected");
                    }
                }
                other => tracing::error!(error = %other, "config rejected"),
            }
            tracing::warn!("reload refused; the previous configuration stays");
        }
        result
    }

    /// Stops the discovery sources and the scrapers.
    pub async fn stop(&self) {
        if let Some(task) = self.discovery.lock().await.task.take() {
            task.abort();
        }
        self.live.load().picker.set().stop_scraping().await;
    }
}

impl Discovery {
    /// Replaces the running sources with `config`'s; a source no longer configured takes
    /// its replicas with it.
    async fn restart(&mut self, set: &Arc<ReplicaSet>, config: &DiscoveryConfig) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if config.dns.is_none() {
            set.withdraw(Source::Dns).await;
        }
        if config.kubernetes.is_none() {
            set.withdraw(Source::Kubernetes).await;
        }
        self.task = config.is_active().then(|| discovery::spawn(set.clone(), config));
        self.config = config.clone();
        tracing::info!("discovery sources restarted with the new configuration");
    }
}

/// The state for `config` over `previous`'s replica set, sharing its counters.
pub fn rebuild(previous: &GatewayState, config: GatewayConfig) -> GatewayState {
    let picker = Picker::with_set(previous.picker.set().clone(), &config);
    let shared = previous.shared.clone();
    shared.admission.configure(config.reliability.admission.clone());
    shared.retry_budget.configure(&config.reliability.retry);
    GatewayState::with_shared(config, Arc::new(picker), shared)
}

/// Drops the per-replica health series of replicas no longer in the set.
fn forget_removed(before: &[Arc<Replica>], next: &GatewayState) {
    let healthy = &next.shared.reliability_metrics.replica_healthy;
    for replica in before {
        if next.picker.by_name(&replica.name).is_none() {
            let _ = healthy.remove_label_values(&[&replica.name]);
            tracing::info!(replica = %replica.name, "replica removed by reload");
        }
    }
}

fn warn_fixed_settings(old: &GatewayConfig, new: &GatewayConfig) {
    let fixed = [
        ("listen", old.listen != new.listen),
        ("admin_listen", old.admin_listen != new.admin_listen),
        (
            "entries.*.listen",
            (old.short.listen, old.long.listen, old.debug.listen)
                != (new.short.listen, new.long.listen, new.debug.listen),
        ),
        ("limits", old.reliability.limits != new.reliability.limits),
        (
            "canary (window_seconds, slo, alpha, guard, margins, min_pairs)",
            (old.canary.window, old.canary.slo, &old.canary.guard)
                != (new.canary.window, new.canary.slo, &new.canary.guard),
        ),
    ];
    for (field, changed) in fixed {
        if changed {
            tracing::warn!(field, "changed in the file but fixed at start; restart to apply");
        }
    }
}

/// Reloads `path` on every SIGHUP.
pub fn spawn_sighup(reloader: Arc<Reloader>, path: PathBuf) -> std::io::Result<JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!(path = %path.display(), "SIGHUP: reloading the configuration");
            let _ = reloader.apply_file(&path).await;
        }
    }))
}
