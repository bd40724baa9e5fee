//! Passive outlier ejection, as Envoy does it: a replica with `consecutive_failures`
//! observed failures in a row (connect errors, resets, 5xx, timeouts; never 4xx or 429)
//! leaves rotation for `base_ejection x 2^(earlier ejections)`, capped at `max_ejection`,
//! unless that would put more than `max_ejected_percent` of the pool out at once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::metrics::ReliabilityMetrics;
use crate::gateway::clock::micros_after;
use crate::gateway::config::reliability::HealthConfig;
use crate::gateway::pick::{Picker, Replica};

pub use crate::gateway::error::FailureReason;

/// Records request outcomes per replica and ejects the outliers.
pub struct HealthTracker {
    picker: Arc<Picker>,
    config: HealthConfig,
    metrics: Arc<ReliabilityMetrics>,
}

impl HealthTracker {
    pub fn new(
        picker: Arc<Picker>,
        config: HealthConfig,
        metrics: Arc<ReliabilityMetrics>,
    ) -> Self {
        // Counters start at zero, so `increase()` sees the first ejection and dashboards find
        // the series before anything failed.
        for replica in picker.snapshot().iter() {
            for reason in FailureReason::ALL {
                metrics.replica_ejections.with_label_values(&[&replica.name, reason.as_str()]);
            }
        }
        Self { picker, config, metrics }
    }

    pub fn config(&self) -> &HealthConfig {
        &self.config
    }

    pub fn metrics(&self) -> &Arc<ReliabilityMetrics> {
        &self.metrics
    }

    /// A response that says the replica works (any status below 500).
    pub fn record_success(&self, replica: &Replica) {
        replica.health.consecutive_failures.store(0, Ordering::Relaxed);
    }

    /// Classifies a response status: 5xx is a failure, anything else a success.
    pub fn record_status(&self, replica: &Replica, status: http::StatusCode) {
        if status.is_server_error() {
            self.record_failure(replica, FailureReason::ServerError);
        } else {
            self.record_success(replica);
        }
    }

    /// A failure; ejects the replica when it makes the streak long enough.
    pub fn record_failure(&self, replica: &Replica, reason: FailureReason) {
        let streak = replica.health.consecutive_failures.fetch_add(1, Ordering::AcqRel) + 1;
        if streak < self.config.consecutive_failures || replica.health.is_ejected() {
            return;
        }
        let replicas = self.picker.snapshot();
        let ejected = replicas.iter().filter(|r| r.health.is_ejected()).count();
        let allowed = replicas.len() * self.config.max_ejected_percent as usize / 100;
        if ejected + 1 > allowed {
            tracing::warn!(
                replica = %replica.name,
                ejected,
                allowed,
                "not ejecting: the cap on ejected replicas is reached"
            );
            return;
        }
        let repeats = replica.health.ejections.fetch_add(1, Ordering::AcqRel).min(16);
        let duration =
            (self.config.base_ejection * 2u32.pow(repeats)).min(self.config.max_ejection);
        replica.health.ejected_until.store(micros_after(duration), Ordering::Release);
        replica.health.consecutive_failures.store(0, Ordering::Relaxed);
        replica.health.reported_out.store(true, Ordering::Relaxed);
        self.metrics.replica_ejections.with_label_values(&[&replica.name, reason.as_str()]).inc();
        self.metrics.replica_healthy.with_label_values(&[&replica.name]).set(0);
        tracing::warn!(
            replica = %replica.name,
            reason = reason.as_str(),
            streak,
            ejection_ms = duration.as_millis() as u64,
            "replica ejected"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::{GatewayConfig, ReplicaConfig};
    use std::time::Duration;

    fn tracker(count: usize) -> HealthTracker {
        let replicas = (0..count)
            .map(|i| ReplicaConfig {
                name: format!("r{i}"),
                authority: format!("127.0.0.1:{}", 9000 + i),
                node: format!("n{i}"),
                tls: false,
                placement: Default::default(),
            })
            .collect();
        let config = GatewayConfig::with_replicas(replicas);
        let health = config.reliability.health.clone();
        let metrics = Arc::new(ReliabilityMetrics::new(&prometheus::Registry::new()));
        HealthTracker::new(Arc::new(Picker::new(&config)), health, metrics)
    }

    #[test]
    fn five_failures_in_a_row_eject_and_a_success_resets_the_streak() {
        let tracker = tracker(4);
        let replica = tracker.picker.snapshot()[0].clone();
        for _ in 0..4 {
            tracker.record_failure(&replica, FailureReason::Connect);
        }
        tracker.record_status(&replica, http::StatusCode::TOO_MANY_REQUESTS);
        for _ in 0..4 {
            tracker.record_failure(&replica, FailureReason::Reset);
        }
        assert!(replica.accepts_new_requests());
        tracker.record_status(&replica, http::StatusCode::BAD_GATEWAY);
        assert!(!replica.accepts_new_requests());
        assert_eq!(replica.health.ejections(), 1);
    }

    #[test]
    fn no_more_than_half_the_pool_is_ejected_and_repeats_last_longer() {
        let tracker = tracker(4);
        let set = tracker.picker.snapshot();
        for replica in set.iter() {
            for _ in 0..5 {
                tracker.record_failure(replica, FailureReason::ServerError);
            }
        }
        let ejected = set.iter().filter(|r| !r.accepts_new_requests()).count();
        assert_eq!(ejected, 2);
        let first = set[0].health.ejected_until.load(Ordering::Relaxed);
        set[0].health.ejected_until.store(0, Ordering::Relaxed);
        for _ in 0..5 {
            tracker.record_failure(&set[0], FailureReason::ServerError);
        }
        let second = set[0].health.ejected_until.load(Ordering::Relaxed);
        // The second ejection is twice as long: it ends well after the first would have.
        let base = Duration::from_millis(5000).as_micros() as u64;
        assert!(second > first + base / 2, "{first} {second}");
    }
}
