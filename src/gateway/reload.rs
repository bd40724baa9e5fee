//! Hitless reload: a new config (from `GatewayHandle::reload`, or the config file on
//! SIGHUP) is validated, then the whole request-path state switches atomically. Each
//! request loads the state once when it starts, so requests in flight finish on the old
//! settings. Replicas that keep their name and address keep their load counters and
//! health; counters, queues and budgets carry over. An invalid file is refused with a log
//! line per problem, and the old config stays. Listener settings (addresses, header
//! limits) are fixed at start: a change to them is logged and ignored.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::gateway::config::{ConfigError, GatewayConfig};
use crate::gateway::pick::{Picker, Replica, scrape};
use crate::gateway::state::GatewayState;

/// The state every request loads once at its start.
pub type LiveState = ArcSwap<GatewayState>;

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error("replicas: at least one [[replicas]] entry is required")]
    NoReplicas,
}

/// Swaps states and keeps the metrics scrapers in step with the replica set.
pub struct Reloader {
    live: Arc<LiveState>,
    scrapers: Mutex<Vec<JoinHandle<()>>>,
}

impl Reloader {
    /// Starts scraping the current replica set.
    pub fn new(live: Arc<LiveState>) -> Self {
        let scrapers = spawn_scrapers(&live.load());
        Self { live, scrapers: Mutex::new(scrapers) }
    }

    pub fn live(&self) -> &Arc<LiveState> {
        &self.live
    }

    /// Switches to `config`.
    pub async fn apply(&self, config: GatewayConfig) -> Result<(), ReloadError> {
        if config.replicas.is_empty() {
            return Err(ReloadError::NoReplicas);
        }
        let mut scrapers = self.scrapers.lock().await;
        let previous = self.live.load_full();
        warn_fixed_settings(&previous.config, &config);
        let next = rebuild(&previous, config);
        forget_removed(&previous, &next);
        let replicas = next.picker.snapshot().len();
        self.live.store(Arc::new(next));
        for scraper in scrapers.drain(..) {
            scraper.abort();
        }
        *scrapers = spawn_scrapers(&self.live.load());
        // New replicas or limits may make room for requests waiting in the queue.
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

    /// Stops the scrapers.
    pub async fn stop(&self) {
        for scraper in self.scrapers.lock().await.drain(..) {
            scraper.abort();
        }
    }
}

/// The state for `config`, sharing counters with `previous` and keeping its replicas by
/// name and address.
pub fn rebuild(previous: &GatewayState, config: GatewayConfig) -> GatewayState {
    let old = previous.picker.snapshot();
    let replicas: Vec<Arc<Replica>> = config
        .replicas
        .iter()
        .map(|wanted| {
            old.iter()
                .find(|r| r.is(wanted))
                .cloned()
                .unwrap_or_else(|| Arc::new(Replica::new(wanted)))
        })
        .collect();
    let mut picker = Picker::new(&config);
    // Scrape ages of carried replicas count from the old time base.
    picker.epoch = previous.picker.epoch;
    picker.replace(replicas);
    let shared = previous.shared.clone();
    shared.admission.configure(config.reliability.admission.clone());
    shared.retry_budget.configure(&config.reliability.retry);
    GatewayState::with_shared(config, Arc::new(picker), shared)
}

/// Drops the per-replica health series of replicas no longer configured.
fn forget_removed(previous: &GatewayState, next: &GatewayState) {
    let healthy = &next.shared.reliability_metrics.replica_healthy;
    for replica in previous.picker.snapshot().iter() {
        if next.picker.by_name(&replica.name).is_none() {
            let _ = healthy.remove_label_values(&[&replica.name]);
            tracing::info!(replica = %replica.name, "replica removed by reload");
        }
    }
}

fn spawn_scrapers(state: &GatewayState) -> Vec<JoinHandle<()>> {
    let replicas = state.picker.snapshot();
    let interval = state.config.scrape_interval;
    scrape::spawn_scrapers(&replicas, state.picker.epoch, interval, &state.upstream_tls)
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
            "timeouts.client_header_ms",
            old.reliability.timeouts.client_header != new.reliability.timeouts.client_header,
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
