//! Active health checks: every `interval`, `GET /health` on each replica with a timeout.
//! `unhealthy_threshold` failures in a row take a replica out of rotation,
//! `healthy_threshold` passes bring it back. The same round notices passive ejections that
//! ended, so that every change shows once in the logs and in `laneway_replica_healthy`.
//! Checks read no load figure and reset none.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::task::{JoinHandle, JoinSet};

use super::HealthTracker;
use crate::gateway::pick::Replica;
use crate::gateway::tls::upstream::UpstreamTls;

type CheckClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// What one round of checks works on, read afresh each round so the checker follows reloads.
pub struct CheckRound {
    pub replicas: Arc<Vec<Arc<Replica>>>,
    pub health: Arc<HealthTracker>,
    /// The TLS client of the current state: a reload that read the certificates again
    /// gives a new one, and the checks' pooled client is rebuilt with it.
    pub upstream_tls: Arc<UpstreamTls>,
}

/// Starts the checker; `round` gives each round's replicas, tracker and TLS client.
pub fn spawn(round: impl Fn() -> CheckRound + Send + 'static) -> JoinHandle<()> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(1)));
    let new_client = move |tls: &UpstreamTls| -> CheckClient {
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(tls.pooled_connector(connector.clone()))
    };
    tokio::spawn(async move {
        // The client and the TLS client it was built with.
        let mut current: Option<(Arc<UpstreamTls>, CheckClient)> = None;
        loop {
            let state = round();
            let client = match &current {
                Some((tls, client)) if Arc::ptr_eq(tls, &state.upstream_tls) => client.clone(),
                // First round, or a reload read the certificates again.
                _ => {
                    let client = new_client(&state.upstream_tls);
                    current = Some((state.upstream_tls.clone(), client.clone()));
                    client
                }
            };
            let config = state.health.config().clone();
            let mut checks = JoinSet::new();
            for replica in state.replicas.iter() {
                let (client, replica) = (client.clone(), replica.clone());
                checks.spawn(async move {
                    let passed = check_once(&client, &replica, config.timeout).await;
                    (replica, passed)
                });
            }
            while let Some(Ok((replica, passed))) = checks.join_next().await {
                let result = if passed { "pass" } else { "fail" };
                let metrics = state.health.metrics();
                metrics.health_checks.with_label_values(&[&replica.name, result]).inc();
                apply(&replica, passed, config.unhealthy_threshold, config.healthy_threshold);
                report_changes(&replica, metrics);
            }
            drop(state);
            tokio::time::sleep(config.interval).await;
        }
    })
}

async fn check_once(client: &CheckClient, replica: &Replica, timeout: Duration) -> bool {
    let url = format!("{}://{}/health", replica.scheme(), replica.authority);
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match tokio::time::timeout(timeout, client.get(uri)).await {
        Ok(Ok(response)) => response.status().is_success(),
        _ => false,
    }
}

/// Updates the streaks and the down flag after one check.
pub fn apply(replica: &Replica, passed: bool, unhealthy_threshold: u32, healthy_threshold: u32) {
    let health = &replica.health;
    if passed {
        health.check_failures.store(0, Ordering::Relaxed);
        let passes = health.check_streak.fetch_add(1, Ordering::Relaxed) + 1;
        if passes >= healthy_threshold {
            health.check_down.store(false, Ordering::Release);
            // A replica healthy for a while earns back shorter ejections.
            if !health.is_ejected() && passes.is_multiple_of(healthy_threshold * 4) {
                let _ = health
                    .ejections
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
        }
    } else {
        health.check_streak.store(0, Ordering::Relaxed);
        let failures = health.check_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= unhealthy_threshold {
            health.check_down.store(true, Ordering::Release);
        }
    }
}

/// Logs and exports a change of rotation state since the last report.
pub fn report_changes(replica: &Replica, metrics: &super::ReliabilityMetrics) {
    let out = !replica.accepts_new_requests();
    let was_out = replica.health.reported_out.swap(out, Ordering::Relaxed);
    metrics.replica_healthy.with_label_values(&[&replica.name]).set(i64::from(!out));
    if out && !was_out {
        tracing::warn!(replica = %replica.name, "replica out of rotation: failing health checks");
    } else if was_out && !out {
        tracing::info!(replica = %replica.name, "replica back in rotation");
    }
}
